//! The working projection the reducers shrink: the plan under construction
//! plus the rendered token cost of every message under it. Reducers change the
//! projection only through the operations here, which keep the costs exact.

mod archive;

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::model::{
    Action, ClearReason, ClearRecord, CompactionPlan, DropRecord, DroppedSpanIndex,
    ExternalizationRecord, Message, Role, Sensitivity, SpanReference, StructuredSummary,
    SummarizationRecord, Thread,
};
use crate::render::{render_message, RenderOptions, RequestCounter};

/// Prefix of artifact ids the pipeline assigns before the store has written
/// the content; [`super::bind_artifacts`] swaps them for real ids.
pub const PENDING_ARTIFACT_PREFIX: &str = "art_pending_";
/// Real artifact ids are `art_` + 32 hex digits; a placeholder tokenizes
/// differently, so each occurrence is charged this many extra tokens. That
/// keeps the estimate an upper bound on the final, exact count.
pub(crate) const PENDING_ID_SLACK: u32 = 40;

/// Content the pipeline wants written to the artifact store.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PendingArtifact {
    /// Placeholder id used in the plan until the write succeeds.
    pub placeholder: String,
    /// Messages whose content it holds.
    pub message_ids: Vec<String>,
    /// The content, as the model saw it; shared, so the write of every
    /// artifact of a compaction can hold it without a copy of it all.
    pub content: std::sync::Arc<str>,
    /// Highest sensitivity among the messages.
    pub sensitivity: Sensitivity,
    /// SHA-256 of the content.
    pub content_hash: String,
    /// Tokens of the content.
    pub tokens: u32,
}

/// Message id → index. Ids are caller-chosen, so the hash is seeded per
/// process (no precomputed collisions to make a lookup linear).
type IdIndex<'a> = crate::model::IdMap<&'a str, usize>;

/// Tool call/result groups and other messages, as index ranges that reducers
/// must keep together (a call and its results are removed or kept as one).
#[derive(Debug, Clone)]
pub struct Units {
    /// `(start, end)` inclusive, in thread order, covering every message.
    pub ranges: Vec<(usize, usize)>,
    /// Unit index of every message.
    pub unit_of: Vec<usize>,
}

impl Units {
    /// Groups each assistant tool-call message with its results (and anything
    /// between them) into one unit.
    pub fn of(thread: &Thread) -> Units {
        let n = thread.messages.len();
        let pairing = thread.pairing();
        let mut reach: Vec<usize> = (0..n).collect();
        for (i, results) in pairing.answers().enumerate() {
            for &r in results.iter().flatten() {
                reach[i] = reach[i].max(r);
            }
        }
        let mut ranges = Vec::new();
        let mut unit_of = vec![0; n];
        let mut i = 0;
        while i < n {
            let start = i;
            let mut end = reach[i];
            let mut j = i;
            while j <= end {
                end = end.max(reach[j]);
                j += 1;
            }
            for slot in unit_of.iter_mut().take(end + 1).skip(start) {
                *slot = ranges.len();
            }
            ranges.push((start, end));
            i = end + 1;
        }
        Units { ranges, unit_of }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Slot {
    Include,
    Clear(usize),
    Summarize(usize),
    Externalize(usize),
    Drop(usize),
}

/// The plan under construction and its exact cost.
#[derive(Debug)]
pub struct Projection<'a> {
    /// The thread (never modified).
    pub thread: &'a Thread,
    /// Counts rendered messages.
    pub counter: RequestCounter<'a>,
    /// Rendering options that affect cost.
    pub options: &'a RenderOptions,
    /// Applied to every replacement text and kept field a record stores:
    /// plans are kept at rest and returned to callers.
    pub redactor: &'a crate::redact::Redactor,
    /// Records so far. A record a later operation absorbed stays in place
    /// with an empty span until [`Projection::take_plan`] (or
    /// [`Projection::purge`]) removes it; count summaries with
    /// [`Projection::summary_count`].
    pub plan: CompactionPlan,
    /// Writes the plan depends on.
    pub pending: Vec<PendingArtifact>,
    /// Call/result groups.
    pub units: Units,
    /// Never compacted: protected flag or a role in `roles_never_prune`.
    pub pinned: Vec<bool>,
    /// Kept verbatim this round: the recent tail and recent tool pairs.
    pub kept: Vec<bool>,
    /// Working copies of tool results with their tool's must-preserve
    /// fields added as key fields (see [`super::preserve`]): what the
    /// reducers read through [`Projection::message`].
    enriched: Option<&'a std::collections::HashMap<usize, Message>>,
    /// At the last escalation step, tool results in the tail may be compressed
    /// or externalized (their content stays retrievable) but nothing else.
    pub tail_tool_results_reducible: bool,
    slots: Vec<Slot>,
    cost: Vec<u32>,
    /// Cost of each message rendered verbatim: computed once, because an
    /// included message never changes and recounting it dominated warm calls.
    verbatim: Vec<u32>,
    index: IdIndex<'a>,
    messages_total: u64,
    /// Of `messages_total`: what tool results render (a per-tier cap's tier).
    tool_results_total: u64,
    fixed: u32,
    next_pending: usize,
    /// Per pending artifact not redacted yet (by index in `pending`), where
    /// each message's piece of its content starts: pieces are redacted
    /// apart, on every core (a long thread's roll-up archives one stretch
    /// of tens of MB).
    unsealed: Vec<(usize, Vec<usize>)>,
    /// Number of summarization records that still cover a message. Records a later
    /// operation absorbed are left in place with an empty span (so no other
    /// record's index shifts, and an operation costs what it touches, not
    /// the size of the plan) until [`Projection::take_plan`] removes them.
    live_summaries: usize,
}

/// What [`Projection::summarize_unless_larger`] needs to put back.
#[derive(Debug, Default)]
struct Undo {
    /// Spans of the records the operation changed, as they were.
    records: Vec<(Slot, Vec<String>)>,
    /// Slots of the messages it changed, as they were.
    slots: Vec<(usize, Slot)>,
    summaries_len: usize,
    live_summaries: usize,
}

impl<'a> Projection<'a> {
    /// The span of the plan record a slot points at (`None` for `Include`).
    fn record_span_mut(&mut self, slot: Slot) -> Option<&mut SpanReference> {
        Some(match slot {
            Slot::Include => return None,
            Slot::Clear(r) => &mut self.plan.clearings[r].span,
            Slot::Summarize(r) => &mut self.plan.summarizations[r].span,
            Slot::Externalize(r) => &mut self.plan.externalizations[r].span,
            Slot::Drop(r) => &mut self.plan.drops[r].span,
        })
    }

    /// A projection of `thread` starting from `plan` (already validated).
    pub fn new(
        thread: &'a Thread,
        counter: RequestCounter<'a>,
        options: &'a RenderOptions,
        redactor: &'a crate::redact::Redactor,
        plan: CompactionPlan,
        pinned: Vec<bool>,
        fixed: u32,
    ) -> Self {
        let n = thread.messages.len();
        let verbatim = thread
            .messages
            .iter()
            .map(|m| counter.verbatim(m, options))
            .collect();
        let index = thread
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        let mut p = Projection {
            thread,
            counter,
            options,
            redactor,
            plan,
            pending: Vec::new(),
            units: Units::of(thread),
            pinned,
            kept: vec![false; n],
            enriched: None,
            tail_tool_results_reducible: false,
            slots: vec![Slot::Include; n],
            cost: vec![0; n],
            verbatim,
            index,
            messages_total: 0,
            tool_results_total: 0,
            fixed,
            next_pending: 0,
            unsealed: Vec::new(),
            live_summaries: 0,
        };
        p.rebuild();
        p
    }

    /// Reducers read these working copies in place of the thread's
    /// messages (see [`super::preserve`]); rendering costs stay those of
    /// the thread's own messages.
    pub fn reading(mut self, enriched: &'a std::collections::HashMap<usize, Message>) -> Self {
        self.enriched = (!enriched.is_empty()).then_some(enriched);
        self
    }

    /// Number of summaries in the plan.
    pub fn summary_count(&self) -> usize {
        self.live_summaries
    }

    /// The plan, without the records later operations absorbed, in the
    /// order the records were made; the projection is left with an empty plan.
    pub fn take_plan(&mut self) -> CompactionPlan {
        self.purge();
        std::mem::take(&mut self.plan)
    }

    /// Removes absorbed (empty) records and renumbers the slots.
    pub fn purge(&mut self) {
        fn keep<T>(records: &mut Vec<T>, live: impl Fn(&T) -> bool) -> Vec<usize> {
            let mut new_index = Vec::with_capacity(records.len());
            let mut next = 0;
            for r in records.iter() {
                new_index.push(next);
                if live(r) {
                    next += 1;
                }
            }
            records.retain(live);
            new_index
        }
        let plan = &mut self.plan;
        let c = keep(&mut plan.clearings, |r| !r.span.message_ids.is_empty());
        let s = keep(&mut plan.summarizations, |r| !r.span.message_ids.is_empty());
        let e = keep(&mut plan.externalizations, |r| {
            !r.span.message_ids.is_empty()
        });
        let d = keep(&mut plan.drops, |r| !r.span.message_ids.is_empty());
        for slot in &mut self.slots {
            *slot = match *slot {
                Slot::Include => Slot::Include,
                Slot::Clear(r) => Slot::Clear(c[r]),
                Slot::Summarize(r) => Slot::Summarize(s[r]),
                Slot::Externalize(r) => Slot::Externalize(e[r]),
                Slot::Drop(r) => Slot::Drop(d[r]),
            };
        }
    }

    /// Tokens of the whole request under the current plan.
    pub fn total(&self) -> u32 {
        u32::try_from(self.messages_total + u64::from(self.fixed)).unwrap_or(u32::MAX)
    }

    /// Tokens the tool results render to under the current plan (stubs and
    /// pointers included; a summary's tokens count for its first message).
    pub fn tool_results_total(&self) -> u32 {
        u32::try_from(self.tool_results_total).unwrap_or(u32::MAX)
    }

    /// Current rendered cost of message `i` (0 when it does not render).
    pub fn cost(&self, i: usize) -> u32 {
        self.cost[i]
    }

    /// True when message `i` still renders verbatim.
    pub fn is_included(&self, i: usize) -> bool {
        self.slots[i] == Slot::Include
    }

    /// True when message `i` renders as itself: verbatim or cleared to a
    /// placeholder (not in a summary, a pointer or a drop).
    pub fn renders_itself(&self, i: usize) -> bool {
        matches!(self.slots[i], Slot::Include | Slot::Clear(_))
    }

    /// True when message `i` is dropped.
    pub fn is_dropped(&self, i: usize) -> bool {
        matches!(self.slots[i], Slot::Drop(_))
    }

    /// True when message `i` is part of a summary.
    pub fn is_summarized(&self, i: usize) -> bool {
        matches!(self.slots[i], Slot::Summarize(_))
    }

    /// True when no reducer may touch message `i` this round.
    pub fn is_locked(&self, i: usize) -> bool {
        self.pinned[i] || self.kept[i]
    }

    /// True when message `i` is pinned (protected, a never-prune role, a
    /// call still waiting for its result).
    pub fn is_pinned(&self, i: usize) -> bool {
        self.pinned[i]
    }

    /// Names the plugin behind the last clear of message `i`.
    pub fn attribute_clear(&mut self, i: usize, strategy: &str) {
        if let Slot::Clear(r) = self.slots[i] {
            self.plan.clearings[r].strategy = strategy.to_string();
        }
    }

    /// Names the plugin that externalized message `i`.
    pub fn attribute_externalization(&mut self, i: usize, strategy: &str) {
        if let Slot::Externalize(r) = self.slots[i] {
            self.plan.externalizations[r].strategy = strategy.to_string();
        }
    }

    /// Names the writer of the summary covering message `i`.
    pub fn attribute_summary(&mut self, i: usize, summarizer_id: &str) {
        if let Slot::Summarize(r) = self.slots[i] {
            self.plan.summarizations[r].summarizer_id = summarizer_id.to_string();
        }
    }

    /// True when a whole unit may be summarized or dropped.
    pub fn unit_is_free(&self, u: usize) -> bool {
        let (s, e) = self.units.ranges[u];
        (s..=e).all(|i| !self.is_locked(i))
    }

    /// Tokens of messages that can never be reduced this round.
    pub fn locked_tokens(&self) -> (u32, u32) {
        let mut pinned = 0;
        let mut kept = 0;
        for i in 0..self.cost.len() {
            if self.pinned[i] {
                pinned += self.cost[i];
            } else if self.kept[i] {
                kept += self.cost[i];
            }
        }
        (pinned, kept)
    }

    fn action(&self, i: usize) -> Action<'_> {
        match self.slots[i] {
            Slot::Include => Action::Include,
            Slot::Clear(r) => Action::Clear(&self.plan.clearings[r]),
            Slot::Summarize(r) => Action::Summarize(&self.plan.summarizations[r]),
            Slot::Externalize(r) => Action::Externalize(&self.plan.externalizations[r]),
            Slot::Drop(r) => Action::Drop(&self.plan.drops[r]),
        }
    }

    /// Request tokens with no plan at all.
    pub fn verbatim_total(&self) -> u32 {
        let sum: u64 = self.verbatim.iter().map(|&c| u64::from(c)).sum();
        u32::try_from(sum + u64::from(self.fixed)).unwrap_or(u32::MAX)
    }

    /// Index of a message id.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    fn recost(&mut self, i: usize) {
        let m = &self.thread.messages[i];
        let quick = match self.slots[i] {
            Slot::Include => Some(self.verbatim[i]),
            Slot::Clear(r) => {
                let text = self.plan.clearings[r].rendered_text();
                let slack = PENDING_ID_SLACK * text.matches(PENDING_ARTIFACT_PREFIX).count() as u32;
                Some(self.counter.cleared(m, &text) + slack)
            }
            Slot::Drop(r) => {
                let rec = &self.plan.drops[r];
                (rec.archive_artifact_id.is_none() || rec.span.start_message_id() != m.id)
                    .then_some(0)
            }
            Slot::Summarize(_) | Slot::Externalize(_) => None,
        };
        if let Some(new) = quick {
            self.set_cost(i, new);
            return;
        }
        let new = match render_message(m, self.action(i), self.options) {
            Some(rm) => {
                let mut n = self.counter.message(&rm);
                if matches!(
                    self.slots[i],
                    Slot::Summarize(_) | Slot::Externalize(_) | Slot::Drop(_)
                ) {
                    let text = rm.content.text();
                    n += PENDING_ID_SLACK * text.matches(PENDING_ARTIFACT_PREFIX).count() as u32;
                }
                n
            }
            None => 0,
        };
        self.set_cost(i, new);
    }

    /// Sets message `i`'s cost and the totals it is part of.
    fn set_cost(&mut self, i: usize, new: u32) {
        let old = u64::from(self.cost[i]);
        self.messages_total = self.messages_total - old + u64::from(new);
        if self.thread.messages[i].tool_result.is_some() {
            self.tool_results_total = self.tool_results_total - old + u64::from(new);
        }
        self.cost[i] = new;
    }

    /// Recomputes every slot and cost from the plan's records.
    fn rebuild(&mut self) {
        let index = &self.index;
        let mut slots = vec![Slot::Include; self.thread.messages.len()];
        // Lowest precedence first so higher ones overwrite.
        for (r, rec) in self.plan.clearings.iter().enumerate() {
            for id in &rec.span.message_ids {
                if let Some(&i) = index.get(id.as_str()) {
                    slots[i] = Slot::Clear(r);
                }
            }
        }
        for (r, rec) in self.plan.summarizations.iter().enumerate() {
            for id in &rec.span.message_ids {
                if let Some(&i) = index.get(id.as_str()) {
                    slots[i] = Slot::Summarize(r);
                }
            }
        }
        for (r, rec) in self.plan.externalizations.iter().enumerate() {
            for id in &rec.span.message_ids {
                if let Some(&i) = index.get(id.as_str()) {
                    slots[i] = Slot::Externalize(r);
                }
            }
        }
        for (r, rec) in self.plan.drops.iter().enumerate() {
            for id in &rec.span.message_ids {
                if let Some(&i) = index.get(id.as_str()) {
                    slots[i] = Slot::Drop(r);
                }
            }
        }
        self.slots = slots;
        self.live_summaries = self
            .plan
            .summarizations
            .iter()
            .filter(|r| !r.span.message_ids.is_empty())
            .count();
        for i in 0..self.thread.messages.len() {
            self.recost(i);
        }
    }

    /// Replaces the content of message `i` with `replacement`.
    pub fn clear(
        &mut self,
        i: usize,
        reason: ClearReason,
        replacement: String,
        preserved_fields: BTreeMap<String, Value>,
    ) {
        // Stubs, gists, key data and excerpts quote the original: redacted
        // here, whichever reducer or plugin wrote them.
        let replacement = match self.redactor.redact(&replacement) {
            std::borrow::Cow::Owned(r) => r,
            std::borrow::Cow::Borrowed(_) => replacement,
        };
        let mut preserved_fields = preserved_fields;
        self.redactor.redact_fields(&mut preserved_fields);
        let span = SpanReference::of(self.thread, &[i]);
        self.plan.clearings.push(ClearRecord {
            span,
            preserved_fields,
            reason,
            replacement,
            archive_artifact_id: None,
            archive_note: None,
            strategy: String::new(),
        });
        self.slots[i] = Slot::Clear(self.plan.clearings.len() - 1);
        self.recost(i);
    }

    /// Reverts the most recent clear of message `i` (when it did not pay off).
    pub fn undo_last_clear(&mut self, i: usize) {
        if let Slot::Clear(r) = self.slots[i] {
            if r + 1 == self.plan.clearings.len() {
                self.plan.clearings.pop();
                self.slots[i] = Slot::Include;
                self.recost(i);
            }
        }
    }

    /// Moves message `i` to the artifact store (pending) and renders a pointer.
    pub fn externalize(
        &mut self,
        i: usize,
        summary: StructuredSummary,
        rehydrate_hint: String,
        content: String,
        content_tokens: u32,
    ) {
        use sha2::{Digest, Sha256};
        let m = &self.thread.messages[i];
        let placeholder = format!("{PENDING_ARTIFACT_PREFIX}{:020}", self.next_pending);
        self.next_pending += 1;
        let content_hash = hex::encode(Sha256::digest(content.as_bytes()));
        let span = SpanReference::of(self.thread, &[i]);
        self.pending.push(PendingArtifact {
            placeholder: placeholder.clone(),
            message_ids: span.message_ids.clone(),
            content: content.into(),
            sensitivity: m.metadata.sensitivity,
            content_hash: content_hash.clone(),
            tokens: content_tokens,
        });
        self.plan.externalizations.push(ExternalizationRecord {
            span,
            artifact_id: placeholder,
            summary,
            rehydrate_hint,
            sensitivity: m.metadata.sensitivity,
            content_hash,
            content_tokens,
            strategy: String::new(),
        });
        self.slots[i] = Slot::Externalize(self.plan.externalizations.len() - 1);
        self.recost(i);
    }

    /// Removes `indices` from every record: a summary or pointer that loses
    /// any message is absorbed as a whole (its other messages render verbatim
    /// again), clears and drops just lose those messages. Records are found
    /// through the messages' slots, so this costs what it touches. Returns
    /// the messages outside `indices` whose slot changed; their cost and the
    /// slots of `indices` are the caller's to update.
    fn take(&mut self, indices: &[usize], mut undo: Option<&mut Undo>) -> Vec<usize> {
        let mut records: Vec<Slot> = indices
            .iter()
            .map(|&i| self.slots[i])
            .filter(|s| *s != Slot::Include)
            .collect();
        records.sort_unstable();
        records.dedup();
        if records.is_empty() {
            return Vec::new();
        }
        let ids: HashSet<&str> = indices
            .iter()
            .map(|&i| self.thread.messages[i].id.as_str())
            .collect();
        let mut changed = Vec::new();
        for slot in records {
            let Some(span) = self.record_span_mut(slot) else {
                continue;
            };
            match slot {
                Slot::Summarize(_) | Slot::Externalize(_) => {
                    let old = std::mem::take(&mut span.message_ids);
                    for id in &old {
                        if let Some(&j) = self.index.get(id.as_str()) {
                            if self.slots[j] == slot {
                                if let Some(u) = undo.as_deref_mut() {
                                    u.slots.push((j, slot));
                                }
                                self.slots[j] = Slot::Include;
                                if !ids.contains(id.as_str()) {
                                    changed.push(j);
                                }
                            }
                        }
                    }
                    if matches!(slot, Slot::Summarize(_)) {
                        self.live_summaries -= 1;
                    }
                    if let Some(u) = undo.as_deref_mut() {
                        u.records.push((slot, old));
                    }
                }
                _ => {
                    if let Some(u) = undo.as_deref_mut() {
                        u.records.push((slot, span.message_ids.clone()));
                    }
                    span.message_ids.retain(|id| !ids.contains(id.as_str()));
                    // A drop's notice stands at its first message and names
                    // how many it stands for: that message costs anew.
                    let first = span.message_ids.first().cloned();
                    if let Some(j) = first.and_then(|id| self.index.get(id.as_str()).copied()) {
                        if matches!(slot, Slot::Drop(_)) {
                            changed.push(j);
                        }
                    }
                }
            }
        }
        changed
    }

    /// Sets the slot of every message in `indices` and recosts them and
    /// `changed`.
    fn settle(
        &mut self,
        indices: &[usize],
        slot: Slot,
        changed: &[usize],
        undo: Option<&mut Undo>,
    ) {
        if let Some(u) = undo {
            u.slots.extend(indices.iter().map(|&i| (i, self.slots[i])));
        }
        for &i in indices {
            self.slots[i] = slot;
        }
        for &i in changed.iter().chain(indices) {
            self.recost(i);
        }
    }

    /// Replaces the messages at `indices` (whole units, thread order) with one
    /// summary. Records that covered them are absorbed: their summaries were
    /// given to the summarizer as `prior`, and externalized content stays
    /// reachable through the summary's artifact list.
    pub fn summarize(&mut self, indices: &[usize], summary: StructuredSummary) {
        self.summarize_logged(indices, summary, None);
    }

    /// [`Projection::summarize`], undone again when the request does not get
    /// smaller (the summary is not smaller than what it replaces). Returns
    /// whether the summary was kept. Undoing puts back exactly what the
    /// operation changed, so it costs what the operation cost.
    pub fn summarize_unless_larger(
        &mut self,
        indices: &[usize],
        summary: StructuredSummary,
    ) -> bool {
        self.summarize_within(indices, summary, None).is_ok()
    }

    /// [`Projection::summarize_unless_larger`], except that with a `limit`
    /// the summary is also kept when it makes the request larger but not
    /// above `limit` (a summary re-fitted into room the target leaves).
    /// When undone, the error is the total the request would have had.
    pub fn summarize_within(
        &mut self,
        indices: &[usize],
        summary: StructuredSummary,
        limit: Option<u32>,
    ) -> Result<(), u32> {
        let before = self.total();
        let mut undo = Undo {
            summaries_len: self.plan.summarizations.len(),
            live_summaries: self.live_summaries,
            ..Undo::default()
        };
        self.summarize_logged(indices, summary, Some(&mut undo));
        let would = self.total();
        if would < before || limit.is_some_and(|l| would <= l) {
            return Ok(());
        }
        self.plan.summarizations.truncate(undo.summaries_len);
        self.live_summaries = undo.live_summaries;
        let mut touched: Vec<usize> = Vec::with_capacity(undo.slots.len());
        for (slot, ids) in undo.records.into_iter().rev() {
            // A drop's first message carried its notice while it was cut.
            if matches!(slot, Slot::Drop(_)) {
                touched.extend(
                    self.record_span_mut(slot)
                        .and_then(|span| span.message_ids.first().cloned())
                        .and_then(|id| self.index.get(id.as_str()).copied()),
                );
            }
            if let Some(span) = self.record_span_mut(slot) {
                span.message_ids = ids;
            }
        }
        for &(i, slot) in undo.slots.iter().rev() {
            self.slots[i] = slot;
            touched.push(i);
        }
        for i in touched {
            self.recost(i);
        }
        Err(would)
    }

    fn summarize_logged(
        &mut self,
        indices: &[usize],
        summary: StructuredSummary,
        mut undo: Option<&mut Undo>,
    ) {
        let changed = self.take(indices, undo.as_deref_mut());
        let span = SpanReference::of(self.thread, indices);
        self.plan.summarizations.push(SummarizationRecord {
            span,
            summary: summary.into(),
            summary_token_count: 0,
            archive_artifact_id: None,
            summarizer_id: String::new(),
        });
        self.live_summaries += 1;
        let r = self.plan.summarizations.len() - 1;
        self.settle(indices, Slot::Summarize(r), &changed, undo);
        let first = indices[0];
        self.plan.summarizations[r].summary_token_count = self.cost[first];
    }

    /// Records that would be absorbed if `indices` were summarized.
    pub fn covering(
        &self,
        indices: &[usize],
    ) -> (Vec<&SummarizationRecord>, Vec<&ExternalizationRecord>) {
        let mut seen: HashSet<Slot> = HashSet::new();
        let mut s: Vec<&SummarizationRecord> = Vec::new();
        let mut e: Vec<&ExternalizationRecord> = Vec::new();
        for &i in indices {
            let slot = self.slots[i];
            if !matches!(slot, Slot::Summarize(_) | Slot::Externalize(_)) || !seen.insert(slot) {
                continue;
            }
            match slot {
                Slot::Summarize(r) => s.push(&self.plan.summarizations[r]),
                Slot::Externalize(r) => e.push(&self.plan.externalizations[r]),
                _ => {}
            }
        }
        // Deterministic order: by first message position.
        let pos = |id: &str| self.position(id).unwrap_or(usize::MAX);
        s.sort_by_key(|r| pos(r.span.start_message_id()));
        e.sort_by_key(|r| pos(r.span.start_message_id()));
        (s, e)
    }

    /// All message indices of the summary record that covers message `i`.
    pub fn summary_span_of(&self, i: usize) -> Option<Vec<usize>> {
        let Slot::Summarize(r) = self.slots[i] else {
            return None;
        };
        let mut span: Vec<usize> = self.plan.summarizations[r]
            .span
            .message_ids
            .iter()
            .filter_map(|id| self.position(id))
            .collect();
        span.sort_unstable();
        span.dedup();
        Some(span)
    }

    /// The summarization record that covers message `i` (an index into
    /// `plan.summarizations`).
    pub fn summary_of(&self, i: usize) -> Option<usize> {
        match self.slots[i] {
            Slot::Summarize(r) => Some(r),
            _ => None,
        }
    }

    /// Renders the messages at `indices` verbatim again: each leaves the
    /// record that held it (a pointer or summary is absorbed whole, its other
    /// messages verbatim too; a clear or drop just loses them, a drop's turns
    /// following its remaining span).
    pub fn restore_verbatim(&mut self, indices: &[usize]) {
        let mut drops: Vec<usize> = indices
            .iter()
            .filter_map(|&i| match self.slots[i] {
                Slot::Drop(r) => Some(r),
                _ => None,
            })
            .collect();
        drops.sort_unstable();
        drops.dedup();
        let changed = self.take(indices, None);
        // A drop's turns follow its remaining span before anything is
        // recosted: its notice, at its (new) first message, names them.
        for r in drops {
            let span = &self.plan.drops[r].span;
            let ends = (span.message_ids.first(), span.message_ids.last());
            if let (Some(first), Some(last)) = ends {
                let turn = |id: &String| {
                    self.index
                        .get(id.as_str())
                        .map(|&i| self.thread.messages[i].turn)
                };
                let (a, b) = (turn(first), turn(last));
                let span = &mut self.plan.drops[r].span;
                span.first_turn = a.unwrap_or(span.first_turn);
                span.last_turn = b.unwrap_or(span.last_turn);
            }
        }
        self.settle(indices, Slot::Include, &changed, None);
    }

    /// Whether a plugin strategy decided what became of message `i`: its
    /// decisions carry meaning beyond the budget (a stale read, a replaced
    /// result), so nothing gives them back.
    pub fn decided_by_plugin(&self, i: usize) -> bool {
        match self.slots[i] {
            Slot::Clear(r) => {
                let c = &self.plan.clearings[r];
                c.reason == crate::model::ClearReason::Plugin || !c.strategy.is_empty()
            }
            Slot::Summarize(r) => self.plan.summarizations[r]
                .summarizer_id
                .starts_with("plugin:"),
            Slot::Drop(r) => self.plan.drops[r].reason.starts_with("plugin "),
            Slot::Externalize(r) => !self.plan.externalizations[r].strategy.is_empty(),
            Slot::Include => false,
        }
    }

    /// Takes the last messages of a summary's span out of it, verbatim again:
    /// `from` is the first of them, a position inside the span of the summary
    /// covering it, and everything after it in that span goes. The summary
    /// keeps what it says (its entries about them are redundant, never
    /// wrong) and now names the shorter span. Costs what it touches.
    pub fn release_from_summary(&mut self, from: usize) {
        let Slot::Summarize(r) = self.slots[from] else {
            return;
        };
        let span = &self.plan.summarizations[r].span;
        let Some(cut) = span
            .message_ids
            .iter()
            .position(|id| self.index.get(id.as_str()) == Some(&from))
        else {
            return;
        };
        if cut == 0 {
            return;
        }
        let released: Vec<String> = self.plan.summarizations[r].span.message_ids.split_off(cut);
        let last = self.plan.summarizations[r]
            .span
            .message_ids
            .last()
            .and_then(|id| self.index.get(id.as_str()).copied());
        if let Some(last) = last {
            self.plan.summarizations[r].span.last_turn = self.thread.messages[last].turn;
        }
        let mut touched: Vec<usize> = released
            .iter()
            .filter_map(|id| self.index.get(id.as_str()).copied())
            .collect();
        for &i in &touched {
            self.slots[i] = Slot::Include;
        }
        // The summary's header names its turns.
        let first = self.plan.summarizations[r]
            .span
            .start_message_id()
            .to_string();
        touched.extend(self.index.get(first.as_str()).copied());
        for i in touched {
            self.recost(i);
        }
        if let Some(&i) = self.index.get(first.as_str()) {
            self.plan.summarizations[r].summary_token_count = self.cost[i];
        }
    }

    /// Tokens message `i` would take rendered verbatim.
    pub fn verbatim_cost(&self, i: usize) -> u32 {
        self.verbatim[i]
    }

    /// Omits the messages at `indices` (whole units). Adjacent drops merge into
    /// one record.
    pub fn drop_messages(&mut self, indices: &[usize], reason: &str) {
        let changed = self.take(indices, None);
        let first = indices[0];
        // The record to extend ends at the message before the first one; a
        // message is in at most one record, so its slot names it.
        let extend = match first.checked_sub(1).map(|j| (j, self.slots[j])) {
            // An archived span is closed: its artifact holds exactly its messages.
            Some((j, Slot::Drop(r)))
                if self.plan.drops[r].span.end_message_id() == self.thread.messages[j].id
                    && self.plan.drops[r].reason == reason
                    && self.plan.drops[r].archive_artifact_id.is_none() =>
            {
                Some(r)
            }
            _ => None,
        };
        let r = match extend {
            Some(r) => {
                let rec = &mut self.plan.drops[r];
                for &i in indices {
                    rec.span
                        .message_ids
                        .push(self.thread.messages[i].id.clone());
                }
                rec.span.last_turn = self.thread.messages[indices[indices.len() - 1]].turn;
                r
            }
            None => {
                self.plan.drops.push(DropRecord {
                    span: SpanReference::of(self.thread, indices),
                    reason: reason.to_string(),
                    index: DroppedSpanIndex {
                        keywords: Vec::new(),
                        summary: String::new(),
                        timestamp: None,
                    },
                    archive_artifact_id: None,
                });
                self.plan.drops.len() - 1
            }
        };
        self.settle(indices, Slot::Drop(r), &changed, None);
    }

    /// Messages of the thread by index, as the reducers read them (a tool
    /// result with its must-preserve fields among its key fields).
    pub fn message(&self, i: usize) -> &'a Message {
        if let Some(m) = self.enriched.and_then(|e| e.get(&i)) {
            return m;
        }
        &self.thread.messages[i]
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.thread.messages.len()
    }

    /// True for an empty thread.
    pub fn is_empty(&self) -> bool {
        self.thread.messages.is_empty()
    }

    /// Whether message `i` is a tool result.
    pub fn is_tool_result(&self, i: usize) -> bool {
        self.thread.messages[i].role == Role::Tool
    }
}

impl Projection<'_> {
    /// Reverts the most recent externalization of message `i`.
    pub fn undo_last_externalize(&mut self, i: usize) {
        if let Slot::Externalize(r) = self.slots[i] {
            if r + 1 == self.plan.externalizations.len() {
                let rec = self.plan.externalizations.pop();
                if let Some(rec) = rec {
                    // The pending write is the one `externalize` just pushed.
                    if self
                        .pending
                        .last()
                        .is_some_and(|a| a.placeholder == rec.artifact_id)
                    {
                        self.pending.pop();
                    } else {
                        self.pending.retain(|a| a.placeholder != rec.artifact_id);
                    }
                }
                self.slots[i] = Slot::Include;
                self.recost(i);
            }
        }
    }
}

impl Projection<'_> {
    /// Puts back an earlier plan (taken with `plan.clone()`), recomputing costs.
    pub fn restore(&mut self, plan: CompactionPlan) {
        self.plan = plan;
        self.rebuild();
    }
}
