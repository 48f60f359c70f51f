//! The compaction plan: pure data that says, per message id, what the renderer
//! shows instead of the message. Plans never contain message content beyond
//! summaries and placeholders, and never edit the thread.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::message::{Role, Sensitivity};
use super::records::Records;
use super::summary::StructuredSummary;
use super::thread::Thread;

/// A run of messages, by explicit id list. Self-sufficient: it resolves without
/// start/end arithmetic, so appending to the thread never shifts it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpanReference {
    /// Non-empty, in thread order.
    pub message_ids: Vec<String>,
    /// Turn of the first message (for display).
    pub first_turn: u32,
    /// Turn of the last message (for display).
    pub last_turn: u32,
}

impl SpanReference {
    /// Span over the given messages of `thread` (indices ascending).
    pub fn of(thread: &Thread, indices: &[usize]) -> SpanReference {
        let first = indices
            .first()
            .map(|&i| thread.messages[i].turn)
            .unwrap_or(0);
        let last = indices
            .last()
            .map(|&i| thread.messages[i].turn)
            .unwrap_or(0);
        SpanReference {
            message_ids: indices
                .iter()
                .map(|&i| thread.messages[i].id.clone())
                .collect(),
            first_turn: first,
            last_turn: last,
        }
    }

    /// First id (where a replacement renders).
    pub fn start_message_id(&self) -> &str {
        self.message_ids.first().map(String::as_str).unwrap_or("")
    }

    /// Last id.
    pub fn end_message_id(&self) -> &str {
        self.message_ids.last().map(String::as_str).unwrap_or("")
    }
}

/// Content moved to the artifact store; the prompt keeps a pointer and a summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalizationRecord {
    /// What was moved.
    pub span: SpanReference,
    /// Where it is; assigned by the store when the write succeeded.
    pub artifact_id: String,
    /// What it held.
    pub summary: StructuredSummary,
    /// When the agent should read it back.
    pub rehydrate_hint: String,
    /// Highest sensitivity of the moved messages (gates rehydration).
    pub sensitivity: Sensitivity,
    /// SHA-256 of the stored content.
    pub content_hash: String,
    /// Tokens of the moved content.
    pub content_tokens: u32,
    /// The plugin that proposed it (`name@version`); empty when the
    /// built-in step did (and then not serialized: plans keep their bytes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
}

impl ExternalizationRecord {
    /// The strategy that externalized it: the plugin, or the built-in step.
    pub fn decided_by(&self) -> &str {
        if self.strategy.is_empty() {
            "externalize"
        } else {
            &self.strategy
        }
    }
}

/// Messages replaced by one summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummarizationRecord {
    /// What was summarized.
    pub span: SpanReference,
    /// The summary; shared, so a plan carried from turn to turn is copied
    /// without copying its summaries (a change copies the one it changes).
    pub summary: std::sync::Arc<StructuredSummary>,
    /// Tokens of the rendered summary message.
    pub summary_token_count: u32,
    /// The artifact holding the summarized messages' originals (shown in the
    /// summary's header), when an artifact store archives evictions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_artifact_id: Option<String>,
    /// Who wrote the summary when it was not the built-in extractive
    /// summarizer: an LLM, as `llm:{model}:{style}@{prompt hash}`. Empty:
    /// the extractive summarizer (also its fallback when an LLM failed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summarizer_id: String,
}

/// Why a message's content was replaced by a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClearReason {
    /// Tool-result retention expired it (age or count).
    Expired,
    /// Durability rules allowed clearing it.
    Durability,
    /// Tool-output post-processing kept only its essentials.
    Compressed,
    /// A plugin strategy replaced it.
    Plugin,
    /// The last user message, too long for its share of the budget: its
    /// head and tail stay, its middle is archived.
    Excerpt,
}

/// A message whose content renders as a placeholder; the message itself (and any
/// tool pairing) stays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClearRecord {
    /// Exactly the cleared message(s).
    pub span: SpanReference,
    /// Fields kept from the original (tool name, outcome, key fields).
    #[serde(default)]
    pub preserved_fields: BTreeMap<String, Value>,
    /// Why.
    pub reason: ClearReason,
    /// The exact text rendered in place of the content.
    pub replacement: String,
    /// The artifact holding the original (one per batch of clears).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_artifact_id: Option<String>,
    /// Appended to the replacement of the first clear of a batch: where the
    /// batch's originals are (the id appears once per batch, not per stub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_note: Option<String>,
    /// The plugin that proposed it (`name@version`), for
    /// [`ClearReason::Plugin`]; empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
}

/// An artifact id as the stores issue them: `art_` + 32 lowercase hex (128
/// random bits). Checked on every read, so an id can never be a path, and
/// used to find ids in text.
pub fn is_artifact_id(s: &str) -> bool {
    s.len() == 36
        && s.starts_with("art_")
        && s[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl SummarizationRecord {
    /// The summarizer that wrote it (`extractive_id` when it names none):
    /// what audits and explanations call its strategy.
    pub fn decided_by<'a>(&'a self, extractive_id: &'a str) -> &'a str {
        if self.summarizer_id.is_empty() {
            extractive_id
        } else {
            &self.summarizer_id
        }
    }
}

impl ClearRecord {
    /// The strategy that cleared it: the plugin, or the built-in reducer
    /// its reason implies.
    pub fn decided_by(&self) -> &str {
        if !self.strategy.is_empty() {
            return &self.strategy;
        }
        match self.reason {
            ClearReason::Expired => "retention",
            ClearReason::Durability => "clear",
            ClearReason::Compressed => "compress",
            ClearReason::Plugin => "plugin",
            ClearReason::Excerpt => "excerpt",
        }
    }

    /// What renders in place of the content: the replacement, plus the
    /// batch's archive note on the batch's first clear.
    pub fn rendered_text(&self) -> std::borrow::Cow<'_, str> {
        match &self.archive_note {
            Some(note) => std::borrow::Cow::Owned(format!("{}\n{note}", self.replacement)),
            None => std::borrow::Cow::Borrowed(&self.replacement),
        }
    }
}

impl DropRecord {
    /// The strategy that dropped it: `name@version` of a plugin (its reason
    /// reads `plugin name@version: …`), else `drop`.
    pub fn decided_by(&self) -> &str {
        self.reason
            .strip_prefix("plugin ")
            .map_or("drop", |rest| rest.split(':').next().unwrap_or(rest))
    }

    /// The one line that stands for an archived dropped span (rendered in
    /// place of its first message); `None` when the span is not archived.
    pub fn notice(&self) -> Option<String> {
        let id = self.archive_artifact_id.as_deref()?;
        let n = self.span.message_ids.len();
        let noun = if n == 1 { "message" } else { "messages" };
        Some(format!(
            "[{n} earlier {noun} (turns {}-{}) were removed to fit the context; the originals are archived as {id} (read_artifact)]",
            self.span.first_turn, self.span.last_turn
        ))
    }
}

/// A keyword index of dropped content, so recall can be added later without rework.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedSpanIndex {
    /// Most frequent content words.
    pub keywords: Vec<String>,
    /// One-line description.
    pub summary: String,
    /// When its last dated message was said (RFC 3339), if any is dated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// Messages omitted from the prompt entirely (last resort).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DropRecord {
    /// What was dropped.
    pub span: SpanReference,
    /// Why.
    pub reason: String,
    /// What was in it.
    pub index: DroppedSpanIndex,
    /// The artifact holding the dropped messages; when set, the span's first
    /// message renders as a one-line notice naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_artifact_id: Option<String>,
}

/// What the renderer does with one message. Order is precedence: a higher action
/// wins when a message appears in two records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Shown as is.
    Include,
    /// Content replaced by a placeholder.
    Clear,
    /// Replaced by a summary.
    Summarize,
    /// Replaced by a pointer and summary.
    Externalize,
    /// Omitted.
    Drop,
}

impl ActionKind {
    /// What was done, as events, audits and the CLI say it ("externalized",
    /// "included"): one wording everywhere.
    pub fn done(self) -> &'static str {
        match self {
            ActionKind::Include => "included",
            ActionKind::Clear => "cleared",
            ActionKind::Summarize => "summarized",
            ActionKind::Externalize => "externalized",
            ActionKind::Drop => "dropped",
        }
    }
}

/// Message id → action. A fast hash: the map lives for one render.
pub type ActionMap<'a> = super::ids::IdMap<&'a str, Action<'a>>;

/// A resolved action with the record it came from.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// Shown as is.
    Include,
    /// Content replaced by the record's placeholder.
    Clear(&'a ClearRecord),
    /// Replaced by the record's summary.
    Summarize(&'a SummarizationRecord),
    /// Replaced by the record's pointer.
    Externalize(&'a ExternalizationRecord),
    /// Omitted.
    Drop(&'a DropRecord),
}

impl Action<'_> {
    /// The kind, without the record.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::Include => ActionKind::Include,
            Action::Clear(_) => ActionKind::Clear,
            Action::Summarize(_) => ActionKind::Summarize,
            Action::Externalize(_) => ActionKind::Externalize,
            Action::Drop(_) => ActionKind::Drop,
        }
    }
}

/// The compaction plan for one thread.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CompactionPlan {
    /// The thread it applies to.
    pub thread_id: String,
    /// Store version (0 until committed).
    #[serde(default)]
    pub version: u64,
    /// Fingerprint of (thread content, policy, versions) that produced it.
    #[serde(default)]
    pub fingerprint: String,
    /// Externalized spans.
    #[serde(default)]
    pub externalizations: Records<ExternalizationRecord>,
    /// Summarized spans.
    #[serde(default)]
    pub summarizations: Records<SummarizationRecord>,
    /// Cleared messages.
    #[serde(default)]
    pub clearings: Records<ClearRecord>,
    /// Dropped spans.
    #[serde(default)]
    pub drops: Records<DropRecord>,
    /// Tokens of the request rendered without the plan.
    #[serde(default)]
    pub original_token_count: u32,
    /// Tokens of the request rendered with the plan.
    #[serde(default)]
    pub compacted_token_count: u32,
    /// The thread's turn when compaction last crossed the trigger (later
    /// turns extend the plan without compacting again); `None` in plans
    /// written before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_at_turn: Option<u32>,
}

impl CompactionPlan {
    /// Turns since compaction last ran, at `current_turn`; `None` for a
    /// plan that evicts nothing or does not know.
    pub fn turns_since_compaction(&self, current_turn: u32) -> Option<u32> {
        if self.is_empty() {
            return None;
        }
        self.compacted_at_turn
            .map(|t| current_turn.saturating_sub(t))
    }
}

/// A message id claimed by two records; the higher precedence won.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormalizationWarning {
    /// The message.
    pub message_id: String,
    /// The action that lost.
    pub dropped: ActionKind,
    /// The action that won.
    pub kept: ActionKind,
}

impl std::fmt::Display for NormalizationWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "message {} is in both {:?} and {:?}; {:?} takes precedence",
            self.message_id, self.dropped, self.kept, self.kept
        )
    }
}

/// A plan that does not fit its thread.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// A record with no messages.
    #[error("plan.{list}[{record}].span.message_ids must not be empty")]
    EmptySpan {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
    },
    /// An id not in the thread.
    #[error("plan.{list}[{record}].span references unknown message {id:?}")]
    UnknownMessage {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The id.
        id: String,
    },
    /// Ids out of thread order.
    #[error("plan.{list}[{record}].span.message_ids are not in thread order")]
    OutOfOrder {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
    },
    /// A span that would orphan a tool call or result.
    #[error("plan.{list}[{record}].span splits the tool call {call_id:?} from its result")]
    SplitsToolPair {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The call id.
        call_id: String,
    },
    /// A protected message in a record.
    #[error("plan.{list}[{record}].span includes protected message {id:?}")]
    Protected {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The id.
        id: String,
    },
    /// A message of a role that is never pruned, in a record.
    #[error(
        "plan.{list}[{record}].span includes message {id:?}, whose role {role} is never pruned"
    )]
    PinnedRole {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The id.
        id: String,
        /// Its role.
        role: &'static str,
    },
    /// A span whose replacement would render on one side of a pinned message
    /// content from the other side, so later facts would precede it.
    #[error("plan.{list}[{record}].span reaches across pinned message {id:?}")]
    StraddlesPinned {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The pinned message in between.
        id: String,
    },
    /// A message whose tool call has no result yet: it stays verbatim.
    #[error("plan.{list}[{record}].span includes message {id:?}, which has a tool call without a result")]
    PendingCall {
        /// Record list.
        list: &'static str,
        /// Record index.
        record: usize,
        /// The id.
        id: String,
    },
    /// A record for another thread.
    #[error("plan.thread_id {got:?} does not match thread.id {expected:?}")]
    WrongThread {
        /// The thread's id.
        expected: String,
        /// The plan's.
        got: String,
    },
}

impl CompactionPlan {
    /// An empty plan for `thread_id`.
    pub fn new(thread_id: impl Into<String>) -> Self {
        CompactionPlan {
            thread_id: thread_id.into(),
            ..Default::default()
        }
    }

    /// True when the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.externalizations.is_empty()
            && self.summarizations.is_empty()
            && self.clearings.is_empty()
            && self.drops.is_empty()
    }

    /// Resolves every message id to its action. Records are applied lowest
    /// precedence first so a higher one overwrites; within one kind the first
    /// record wins (normalization removes such duplicates anyway).
    pub fn actions(&self) -> ActionMap<'_> {
        // Sized once: growing it rehashed every id of a long plan again.
        let capacity: usize = (self.clearings.iter().map(|r| &r.span))
            .chain(self.summarizations.iter().map(|r| &r.span))
            .chain(self.externalizations.iter().map(|r| &r.span))
            .chain(self.drops.iter().map(|r| &r.span))
            .map(|span| span.message_ids.len())
            .sum();
        self.actions_of(capacity, |_| true)
    }

    /// [`CompactionPlan::actions`] of the messages `wanted` accepts: a
    /// render of a thread's last few messages needs theirs only.
    pub fn actions_among(&self, wanted: &super::ids::IdSet<&str>) -> ActionMap<'_> {
        self.actions_of(wanted.len(), |id| wanted.contains(id))
    }

    fn actions_of(&self, capacity: usize, wanted: impl Fn(&str) -> bool) -> ActionMap<'_> {
        let mut map: ActionMap<'_> =
            HashMap::with_capacity_and_hasher(capacity, Default::default());
        fn put<'a>(
            map: &mut ActionMap<'a>,
            ids: &'a [String],
            a: Action<'a>,
            wanted: &dyn Fn(&str) -> bool,
        ) {
            for id in ids.iter().filter(|id| wanted(id)) {
                match map.get(id.as_str()) {
                    Some(prev) if prev.kind() >= a.kind() => {}
                    _ => {
                        map.insert(id, a);
                    }
                }
            }
        }
        for r in &self.clearings {
            put(&mut map, &r.span.message_ids, Action::Clear(r), &wanted);
        }
        for r in &self.summarizations {
            put(&mut map, &r.span.message_ids, Action::Summarize(r), &wanted);
        }
        for r in &self.externalizations {
            put(
                &mut map,
                &r.span.message_ids,
                Action::Externalize(r),
                &wanted,
            );
        }
        for r in &self.drops {
            put(&mut map, &r.span.message_ids, Action::Drop(r), &wanted);
        }
        map
    }

    /// Makes every message id appear in at most one record: the highest
    /// precedence (Drop > Externalize > Summarize > Clear) keeps it, the others
    /// lose it, records left empty disappear. Returns one warning per removal.
    /// Idempotent: a normalized plan normalizes to itself with no warnings.
    pub fn normalize(&mut self) -> Vec<NormalizationWarning> {
        let mut owner: HashMap<String, ActionKind> = HashMap::new();
        let mut warnings = Vec::new();
        // Claim ids from the highest precedence down; the first claim wins.
        fn claim(
            owner: &mut HashMap<String, ActionKind>,
            warnings: &mut Vec<NormalizationWarning>,
            span: &mut SpanReference,
            kind: ActionKind,
        ) {
            span.message_ids.retain(|id| match owner.get(id) {
                Some(&kept) => {
                    warnings.push(NormalizationWarning {
                        message_id: id.clone(),
                        dropped: kind,
                        kept,
                    });
                    false
                }
                None => {
                    owner.insert(id.clone(), kind);
                    true
                }
            });
        }
        for r in &mut self.drops {
            claim(&mut owner, &mut warnings, &mut r.span, ActionKind::Drop);
        }
        for r in &mut self.externalizations {
            claim(
                &mut owner,
                &mut warnings,
                &mut r.span,
                ActionKind::Externalize,
            );
        }
        for r in &mut self.summarizations {
            claim(
                &mut owner,
                &mut warnings,
                &mut r.span,
                ActionKind::Summarize,
            );
        }
        for r in &mut self.clearings {
            claim(&mut owner, &mut warnings, &mut r.span, ActionKind::Clear);
        }
        self.drops.retain(|r| !r.span.message_ids.is_empty());
        self.externalizations
            .retain(|r| !r.span.message_ids.is_empty());
        self.summarizations
            .retain(|r| !r.span.message_ids.is_empty());
        self.clearings.retain(|r| !r.span.message_ids.is_empty());
        warnings
    }

    /// Checks that the plan can be rendered against `thread` without breaking an
    /// invariant: known ids in thread order; pinned messages (the protected
    /// flag, or a role in `pinned_roles`) untouched and never straddled by a
    /// span, so nothing after a pinned instruction renders before it; and no
    /// span that separates a tool call from its result. Clears are exempt from
    /// the pairing rule because a cleared message keeps its role and call id.
    pub fn validate_against(
        &self,
        thread: &Thread,
        pinned_roles: &[Role],
    ) -> Result<(), PlanError> {
        if self.thread_id != thread.id {
            return Err(PlanError::WrongThread {
                expected: thread.id.clone(),
                got: self.thread_id.clone(),
            });
        }
        let spans = SpanCheck::new(thread, pinned_roles);
        for (i, r) in self.drops.iter().enumerate() {
            spans.check("drops", i, &r.span, true)?;
        }
        for (i, r) in self.externalizations.iter().enumerate() {
            // A single externalized tool message keeps its role and call id.
            let single_tool = r.span.message_ids.len() == 1
                && spans
                    .pos
                    .get(r.span.message_ids[0].as_str())
                    .is_some_and(|&p| thread.messages[p].role == Role::Tool);
            spans.check("externalizations", i, &r.span, !single_tool)?;
        }
        for (i, r) in self.summarizations.iter().enumerate() {
            spans.check("summarizations", i, &r.span, true)?;
        }
        for (i, r) in self.clearings.iter().enumerate() {
            spans.check("clearings", i, &r.span, false)?;
        }
        Ok(())
    }
}

/// What checking a plan's spans against one thread reads: positions by id,
/// the pairing, what is pinned, and for each position the first pinned or
/// pending message at or after it (`n` when none), so a span's straddle
/// check is one lookup.
struct SpanCheck<'t> {
    thread: &'t Thread,
    pinned_roles: &'t [Role],
    pairing: super::thread::Pairing,
    next_blocked: Vec<usize>,
    pos: super::ids::IdMap<&'t str, usize>,
}

impl<'t> SpanCheck<'t> {
    fn new(thread: &'t Thread, pinned_roles: &'t [Role]) -> Self {
        let pairing = thread.pairing();
        let n = thread.messages.len();
        let mut check = SpanCheck {
            thread,
            pinned_roles,
            pairing,
            next_blocked: vec![n; n + 1],
            pos: thread
                .messages
                .iter()
                .enumerate()
                .map(|(i, m)| (m.id.as_str(), i))
                .collect(),
        };
        for j in (0..n).rev() {
            check.next_blocked[j] = if check.blocked(j) {
                j
            } else {
                check.next_blocked[j + 1]
            };
        }
        check
    }

    fn pinned(&self, m: &super::message::Message) -> bool {
        m.metadata.protected || self.pinned_roles.contains(&m.role)
    }

    fn blocked(&self, j: usize) -> bool {
        self.pinned(&self.thread.messages[j]) || self.pairing.has_pending(j)
    }

    /// One record's span: known ids in thread order, none protected,
    /// pinned or pending, no pinned message straddled, and (when it removes
    /// pairs) no tool call separated from its results.
    fn check(
        &self,
        list: &'static str,
        record: usize,
        span: &SpanReference,
        removes_pairs: bool,
    ) -> Result<(), PlanError> {
        if span.message_ids.is_empty() {
            return Err(PlanError::EmptySpan { list, record });
        }
        let mut last: Option<usize> = None;
        let mut members: HashSet<usize> = HashSet::with_capacity(span.message_ids.len());
        let mut order: Vec<usize> = Vec::with_capacity(span.message_ids.len());
        for id in &span.message_ids {
            let Some(&i) = self.pos.get(id.as_str()) else {
                return Err(PlanError::UnknownMessage {
                    list,
                    record,
                    id: id.clone(),
                });
            };
            if last.is_some_and(|l| l >= i) {
                return Err(PlanError::OutOfOrder { list, record });
            }
            last = Some(i);
            members.insert(i);
            order.push(i);
            self.member(list, record, id, i)?;
        }
        if let (Some(&first), Some(last)) = (
            span.message_ids
                .first()
                .and_then(|id| self.pos.get(id.as_str())),
            last,
        ) {
            if let Some(p) = Some(self.next_blocked[first]).filter(|&p| p <= last) {
                return Err(PlanError::StraddlesPinned {
                    list,
                    record,
                    id: self.thread.messages[p].id.clone(),
                });
            }
        }
        if removes_pairs {
            check_pairs(self.thread, &self.pairing, &order, &members).map_err(|call_id| {
                PlanError::SplitsToolPair {
                    list,
                    record,
                    call_id,
                }
            })?;
        }
        Ok(())
    }

    /// A message a span holds may not be protected, pinned or pending.
    fn member(
        &self,
        list: &'static str,
        record: usize,
        id: &str,
        i: usize,
    ) -> Result<(), PlanError> {
        let m = &self.thread.messages[i];
        let id = || id.to_owned();
        if m.metadata.protected {
            return Err(PlanError::Protected {
                list,
                record,
                id: id(),
            });
        }
        if self.pinned(m) {
            return Err(PlanError::PinnedRole {
                list,
                record,
                id: id(),
                role: m.role.as_str(),
            });
        }
        if self.pairing.has_pending(i) {
            return Err(PlanError::PendingCall {
                list,
                record,
                id: id(),
            });
        }
        Ok(())
    }
}

/// For the message indices that will be replaced or removed (`order`, the
/// span's order; `members`, the same as a set), returns the
/// id of a tool call whose call and results are not all inside the set
/// (paired by position, so a reused call id is never mistaken for another).
fn check_pairs(
    thread: &Thread,
    pairing: &super::thread::Pairing,
    order: &[usize],
    members: &HashSet<usize>,
) -> Result<(), String> {
    // In span order, so the call named is the first one split (a set's
    // iteration order would name any of them).
    for &i in order {
        let m = &thread.messages[i];
        for (call, answer) in m.tool_calls.iter().zip(pairing.answers_of(i)) {
            if !answer.is_some_and(|r| members.contains(&r)) {
                return Err(call.id.clone());
            }
        }
        if let Some((c, _)) = pairing.call_of(i) {
            if !members.contains(&c) {
                return Err(m
                    .tool_result
                    .as_ref()
                    .map(|e| e.tool_call_id.clone())
                    .unwrap_or_default());
            }
        }
    }
    Ok(())
}

/// Versions that change what a plan would be; part of every fingerprint.
pub const PLAN_FORMAT_VERSION: &str = "plan-v1";

/// A stable fingerprint of everything that determines a plan: the thread's
/// content, the policy, and the versions of the summary schema and plan format.
/// Identical inputs give an identical fingerprint, which makes Compact idempotent.
///
/// The thread is digested field by field (raw text bytes, no JSON escaping)
/// because serializing a 500 KB thread to JSON cost more than everything else
/// on a warm call.
pub fn fingerprint(thread: &Thread, policy: &impl Serialize, extra: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(PLAN_FORMAT_VERSION.as_bytes());
    h.update([0]);
    h.update(super::summary::SUMMARY_SCHEMA_VERSION.as_bytes());
    h.update([0]);
    h.update(thread_digest(thread).to_le_bytes());
    if let Ok(bytes) = serde_json::to_vec(policy) {
        h.update(&bytes);
    }
    for e in extra {
        h.update([0]);
        h.update(e.as_bytes());
    }
    hex::encode(h.finalize())
}

/// A 128-bit digest of a thread's content, streamed through one hasher.
pub fn thread_digest(thread: &Thread) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = Vec::with_capacity(1024);
    h.update(&(thread.id.len() as u64).to_le_bytes());
    h.update(thread.id.as_bytes());
    for m in &thread.messages {
        hash_message(&mut h, &mut buf, m);
    }
    h.digest128()
}

/// A 128-bit digest of everything in a message. Every field is
/// length-prefixed so that no two different messages feed the hasher the
/// same byte stream.
pub fn message_digest(m: &super::message::Message) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    hash_message(&mut h, &mut Vec::with_capacity(256), m);
    h.digest128()
}

/// A content part's fields (see [`hash_message`]).
fn hash_part(field: &mut impl FnMut(&[u8]), p: &super::message::ContentPart) {
    use super::message::ContentPart;
    match p {
        ContentPart::Text { text } => field(text.as_bytes()),
        ContentPart::Image { url } => {
            field(b"image");
            field(url.as_bytes());
        }
        ContentPart::Thinking {
            thinking,
            signature,
        } => {
            field(b"thinking");
            field(thinking.as_bytes());
            field(signature.as_bytes());
        }
        ContentPart::RedactedThinking { data } => {
            field(b"redacted_thinking");
            field(data.as_bytes());
        }
        ContentPart::Reasoning {
            id,
            summary,
            encrypted_content,
            rest,
        } => {
            field(b"reasoning");
            field(id.as_bytes());
            for s in summary {
                field(s.as_bytes());
            }
            field(encrypted_content.as_deref().unwrap_or("\u{0}").as_bytes());
            field(rest.as_ref().map_or("\u{0}", |r| r.as_str()).as_bytes());
        }
        ContentPart::Provider(p) => {
            field(b"provider");
            field(p.dialect.as_str().as_bytes());
            field(p.json.as_str().as_bytes());
        }
    }
}

/// Feeds a message's fields to `h`. Small fields are gathered in `buf` and
/// handed over in one update: thousands of tiny streaming updates cost more
/// than hashing the content itself.
fn hash_message(h: &mut xxhash_rust::xxh3::Xxh3, buf: &mut Vec<u8>, m: &super::message::Message) {
    use super::message::{Content, ToolContent};
    const SMALL: usize = 256;
    buf.clear();
    // Large fields go in as their one-shot xxh3-128: the streaming hasher is
    // several times slower per byte than the one-shot function.
    let mut field = |b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
        if b.len() <= SMALL {
            buf.extend_from_slice(b);
        } else {
            buf.extend_from_slice(&xxhash_rust::xxh3::xxh3_128(b).to_le_bytes());
        }
    };
    field(m.id.as_bytes());
    field(m.role.as_str().as_bytes());
    field(&m.turn.to_le_bytes());
    let md = &m.metadata;
    field(&[u8::from(md.protected), md.sensitivity as u8]);
    field(md.label.as_deref().unwrap_or("\u{0}").as_bytes());
    field(md.source.as_deref().unwrap_or("\u{0}").as_bytes());
    // Hashed only when set, so digests of messages without it are unchanged.
    if let Some(t) = &md.created_at {
        field(b"created_at");
        field(t.as_bytes());
    }
    match &m.content {
        Content::Text(t) => field(t.as_bytes()),
        Content::Parts(parts) => {
            for p in parts {
                hash_part(&mut field, p);
            }
        }
    }
    for c in &m.tool_calls {
        field(c.id.as_bytes());
        field(c.name.as_bytes());
        field(
            serde_json::to_string(&c.arguments)
                .unwrap_or_default()
                .as_bytes(),
        );
    }
    field(b"calls-end");
    match &m.tool_result {
        None => field(b""),
        Some(env) => {
            field(env.tool_name.as_bytes());
            field(env.tool_call_id.as_bytes());
            field(env.outcome.as_str().as_bytes());
            field(env.durability.map_or("", |d| d.as_str()).as_bytes());
            // Rare and small: serialized only when present.
            if !env.key_fields.is_empty() || env.determinism.is_some() {
                field(
                    &serde_json::to_vec(&(&env.key_fields, &env.determinism)).unwrap_or_default(),
                );
            } else {
                field(b"");
            }
            field(env.started_at.as_deref().unwrap_or("\u{0}").as_bytes());
            field(env.completed_at.as_deref().unwrap_or("\u{0}").as_bytes());
            match &env.content {
                ToolContent::Text(t) => {
                    field(b"text");
                    field(t.as_bytes());
                }
                ToolContent::Json(v) => {
                    field(b"json");
                    field(v.as_str().as_bytes());
                }
            }
        }
    }
    h.update(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Sensitivity, StructuredSummary};

    fn span(ids: &[&str]) -> SpanReference {
        SpanReference {
            message_ids: ids.iter().map(|s| s.to_string()).collect(),
            first_turn: 1,
            last_turn: 1,
        }
    }

    /// Every pair of actions claims one message: m2 (drop, externalize),
    /// m3 (drop, summarize), m4 (drop, clear), m5 (externalize, summarize),
    /// m6 (externalize, clear), m7 (summarize, clear); m1 is in no record.
    fn overlapping() -> CompactionPlan {
        let mut plan = CompactionPlan::new("t");
        plan.drops.push(DropRecord {
            span: span(&["m2", "m3", "m4"]),
            reason: "window".into(),
            index: DroppedSpanIndex {
                keywords: vec![],
                summary: String::new(),
                timestamp: None,
            },
            archive_artifact_id: None,
        });
        plan.externalizations.push(ExternalizationRecord {
            span: span(&["m2", "m5", "m6"]),
            artifact_id: "art_00000000000000000000000000000001".into(),
            summary: StructuredSummary::empty(span(&["m2"])),
            rehydrate_hint: String::new(),
            sensitivity: Sensitivity::Internal,
            content_hash: String::new(),
            content_tokens: 1,
            strategy: String::new(),
        });
        plan.summarizations.push(SummarizationRecord {
            span: span(&["m3", "m5", "m7"]),
            summary: StructuredSummary::empty(span(&["m3"])).into(),
            summary_token_count: 1,
            archive_artifact_id: None,
            summarizer_id: String::new(),
        });
        for id in ["m4", "m6", "m7"] {
            plan.clearings.push(ClearRecord {
                span: span(&[id]),
                preserved_fields: BTreeMap::new(),
                reason: ClearReason::Durability,
                replacement: "[cleared]".into(),
                archive_artifact_id: None,
                archive_note: None,
                strategy: String::new(),
            });
        }
        plan
    }

    #[test]
    fn overlapping_records_resolve_drop_externalize_summarize_clear_include() {
        let mut plan = overlapping();
        // Rendering resolves the same way before normalization…
        let before: Vec<(String, ActionKind)> = ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]
            .iter()
            .map(|id| {
                let kind = plan
                    .actions()
                    .get(id)
                    .map_or(ActionKind::Include, Action::kind);
                (id.to_string(), kind)
            })
            .collect();
        use ActionKind::*;
        let want = [
            Include,
            Drop,
            Drop,
            Drop,
            Externalize,
            Externalize,
            Summarize,
        ];
        assert_eq!(
            before.iter().map(|b| b.1).collect::<Vec<_>>(),
            want.to_vec()
        );
        // …and normalization leaves each message in its winner's record.
        let warnings = plan.normalize();
        let text: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "message m2 is in both Externalize and Drop; Drop takes precedence",
                "message m3 is in both Summarize and Drop; Drop takes precedence",
                "message m5 is in both Summarize and Externalize; Externalize takes precedence",
                "message m4 is in both Clear and Drop; Drop takes precedence",
                "message m6 is in both Clear and Externalize; Externalize takes precedence",
                "message m7 is in both Clear and Summarize; Summarize takes precedence",
            ]
        );
        assert_eq!(plan.drops[0].span.message_ids, ["m2", "m3", "m4"]);
        assert_eq!(plan.externalizations[0].span.message_ids, ["m5", "m6"]);
        assert_eq!(plan.summarizations[0].span.message_ids, ["m7"]);
        // Records left with no message are removed.
        assert!(plan.clearings.is_empty());
        let after: Vec<ActionKind> = before
            .iter()
            .map(|(id, _)| {
                plan.actions()
                    .get(id.as_str())
                    .map_or(Include, Action::kind)
            })
            .collect();
        assert_eq!(after, want.to_vec());
        // Idempotent.
        assert!(plan.normalize().is_empty());
    }
}
