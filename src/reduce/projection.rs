//! The working projection the reducers shrink: the plan under construction
//! plus the rendered token cost of every message under it. Reducers change the
//! projection only through the operations here, which keep the costs exact.

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
    /// The content, as the model saw it.
    pub content: String,
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
        for (i, results) in pairing.answers.iter().enumerate() {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Records so far.
    pub plan: CompactionPlan,
    /// Writes the plan depends on.
    pub pending: Vec<PendingArtifact>,
    /// Call/result groups.
    pub units: Units,
    /// Never compacted: protected flag or a role in `roles_never_prune`.
    pub pinned: Vec<bool>,
    /// Kept verbatim this round: the recent tail and recent tool pairs.
    pub kept: Vec<bool>,
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
    fixed: u32,
    next_pending: usize,
}

impl<'a> Projection<'a> {
    /// A projection of `thread` starting from `plan` (already validated).
    pub fn new(
        thread: &'a Thread,
        counter: RequestCounter<'a>,
        options: &'a RenderOptions,
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
            plan,
            pending: Vec::new(),
            units: Units::of(thread),
            pinned,
            kept: vec![false; n],
            tail_tool_results_reducible: false,
            slots: vec![Slot::Include; n],
            cost: vec![0; n],
            verbatim,
            index,
            messages_total: 0,
            fixed,
            next_pending: 0,
        };
        p.rebuild();
        p
    }

    /// Tokens of the whole request under the current plan.
    pub fn total(&self) -> u32 {
        u32::try_from(self.messages_total + u64::from(self.fixed)).unwrap_or(u32::MAX)
    }

    /// Current rendered cost of message `i` (0 when it does not render).
    pub fn cost(&self, i: usize) -> u32 {
        self.cost[i]
    }

    /// True when message `i` still renders verbatim.
    pub fn is_included(&self, i: usize) -> bool {
        self.slots[i] == Slot::Include
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
            Slot::Clear(r) => Some(self.counter.cleared(m, &self.plan.clearings[r].replacement)),
            Slot::Drop(_) => Some(0),
            Slot::Summarize(_) | Slot::Externalize(_) => None,
        };
        if let Some(new) = quick {
            self.messages_total = self.messages_total - u64::from(self.cost[i]) + u64::from(new);
            self.cost[i] = new;
            return;
        }
        let new = match render_message(m, self.action(i), self.options) {
            Some(rm) => {
                let mut n = self.counter.message(&rm);
                if matches!(self.slots[i], Slot::Summarize(_) | Slot::Externalize(_)) {
                    let text = rm.content.text();
                    n += PENDING_ID_SLACK * text.matches(PENDING_ARTIFACT_PREFIX).count() as u32;
                }
                n
            }
            None => 0,
        };
        self.messages_total = self.messages_total - u64::from(self.cost[i]) + u64::from(new);
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
        let span = SpanReference::of(self.thread, &[i]);
        self.plan.clearings.push(ClearRecord {
            span,
            preserved_fields,
            reason,
            replacement,
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
            content,
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
        });
        self.slots[i] = Slot::Externalize(self.plan.externalizations.len() - 1);
        self.recost(i);
    }

    /// Removes `indices` from every record, returning the summaries and
    /// externalizations that covered them (so a new summary can carry them forward).
    fn take(&mut self, indices: &[usize]) {
        let ids: HashSet<&str> = indices
            .iter()
            .map(|&i| self.thread.messages[i].id.as_str())
            .collect();
        let plan = &mut self.plan;
        plan.clearings.retain_mut(|r| {
            r.span.message_ids.retain(|id| !ids.contains(id.as_str()));
            !r.span.message_ids.is_empty()
        });
        // A summary or pointer that loses any message is replaced as a whole.
        plan.summarizations.retain(|r| {
            !r.span
                .message_ids
                .iter()
                .any(|id| ids.contains(id.as_str()))
        });
        plan.externalizations.retain(|r| {
            !r.span
                .message_ids
                .iter()
                .any(|id| ids.contains(id.as_str()))
        });
        plan.drops.retain_mut(|r| {
            r.span.message_ids.retain(|id| !ids.contains(id.as_str()));
            !r.span.message_ids.is_empty()
        });
    }

    /// Replaces the messages at `indices` (whole units, thread order) with one
    /// summary. Records that covered them are absorbed: their summaries were
    /// given to the summarizer as `prior`, and externalized content stays
    /// reachable through the summary's artifact list.
    pub fn summarize(&mut self, indices: &[usize], summary: StructuredSummary) {
        self.take(indices);
        let span = SpanReference::of(self.thread, indices);
        self.plan.summarizations.push(SummarizationRecord {
            span,
            summary,
            summary_token_count: 0,
        });
        self.rebuild();
        let r = self.plan.summarizations.len() - 1;
        let first = indices[0];
        self.plan.summarizations[r].summary_token_count = self.cost[first];
    }

    /// Records that would be absorbed if `indices` were summarized.
    pub fn covering(
        &self,
        indices: &[usize],
    ) -> (Vec<&SummarizationRecord>, Vec<&ExternalizationRecord>) {
        let set: HashSet<usize> = indices.iter().copied().collect();
        let mut s: Vec<&SummarizationRecord> = Vec::new();
        let mut e: Vec<&ExternalizationRecord> = Vec::new();
        for &i in &set {
            match self.slots[i] {
                Slot::Summarize(r)
                    if !s
                        .iter()
                        .any(|x| std::ptr::eq(*x, &self.plan.summarizations[r])) =>
                {
                    s.push(&self.plan.summarizations[r]);
                }
                Slot::Externalize(r)
                    if !e
                        .iter()
                        .any(|x| std::ptr::eq(*x, &self.plan.externalizations[r])) =>
                {
                    e.push(&self.plan.externalizations[r]);
                }
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
        let ids: HashSet<&str> = self.plan.summarizations[r]
            .span
            .message_ids
            .iter()
            .map(String::as_str)
            .collect();
        Some(
            (0..self.thread.messages.len())
                .filter(|&j| ids.contains(self.thread.messages[j].id.as_str()))
                .collect(),
        )
    }

    /// Omits the messages at `indices` (whole units). Adjacent drops merge into
    /// one record.
    pub fn drop_messages(&mut self, indices: &[usize], reason: &str) {
        self.take(indices);
        let first = indices[0];
        let extend = self.plan.drops.iter().position(|r| {
            let last = r.span.end_message_id();
            first > 0 && self.thread.messages[first - 1].id == last && r.reason == reason
        });
        match extend {
            Some(r) => {
                let rec = &mut self.plan.drops[r];
                for &i in indices {
                    rec.span
                        .message_ids
                        .push(self.thread.messages[i].id.clone());
                }
                rec.span.last_turn = self.thread.messages[indices[indices.len() - 1]].turn;
            }
            None => self.plan.drops.push(DropRecord {
                span: SpanReference::of(self.thread, indices),
                reason: reason.to_string(),
                index: DroppedSpanIndex {
                    keywords: Vec::new(),
                    summary: String::new(),
                },
            }),
        }
        self.rebuild();
    }

    /// Messages of the thread by index.
    pub fn message(&self, i: usize) -> &'a Message {
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
                    self.pending.retain(|a| a.placeholder != rec.artifact_id);
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
