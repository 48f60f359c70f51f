//! The reducer pipeline, cheap → expensive. Read top to bottom:
//!
//! 1. validate the thread, the policy and any previous plan;
//! 2. count the request with the previous plan applied; below the trigger,
//!    return that plan unchanged (a stable prefix is worth more than tokens);
//! 3. partition: pinned messages, the recent tail and recent tool pairs are
//!    off limits;
//! 4. run the reducers in order — retention, compress, clear, externalize,
//!    summarize, window — stopping as soon as the request is at the target;
//! 5. if the request is still over the hard limit, shrink the tail and tool
//!    pairs one step at a time (floor 1) and run them again; at the floor,
//!    tool results in the tail may be compressed or externalized;
//! 6. still over: `InsufficientBudget`, naming the numbers.
//!
//! The result is a normalized, validated plan plus the artifact writes it
//! depends on. Nothing here does I/O.

mod budget;
mod clear;
mod compress;
mod externalize;
mod memo;
mod partition;
mod pipeline;
mod policy;
mod preserve;
mod projection;
mod refill;
mod replay;
mod report;
mod retention;
mod summary;
mod window;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::model::{
    fingerprint, CompactionPlan, DeterminismMetadata, Thread, ThreadError, ThreadLimits, ToolSchema,
};
use crate::render::RequestCounter;
use crate::summarize::{Summarizer, SummaryRequest};
use crate::tokens::{Target, TokenCounter, TokenLedger};

use replay::ReplayIndex;

pub use budget::{ReserveUse, TokenBudget};
pub use clear::Clear;
pub use compress::Compress;
pub use externalize::Externalize;
pub use memo::{KeyHasher, Memo};
pub use policy::{
    Enabled, Policy, PolicyError, ReplayCost, StandingWindow, TierCaps, ToolPolicy, ToolRetention,
    DEFAULT_PROTECTED_FLAG,
};
pub use projection::{PendingArtifact, Projection, Units, PENDING_ARTIFACT_PREFIX};
pub use retention::Retention;
pub use summary::Summarize;
pub use window::Window;

pub use pipeline::*;
pub use report::*;

/// One step of the pipeline: shrinks the projection toward the budget.
/// The budget is passed by reference so per-tier caps can be added to it
/// without changing this signature.
pub trait Reducer {
    /// Name used in reports and traces.
    fn name(&self) -> &'static str;
    /// Shrinks `p`; stops early once `budget.target()` is met.
    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError>;
}

/// The summarizer behind the memo, with the redaction around it.
#[derive(Clone, Copy)]
pub struct Summarizing<'a> {
    summarizer: &'a dyn Summarizer,
    memo: &'a Memo,
    redactor: &'a crate::redact::Redactor,
}

impl Summarizing<'_> {
    /// See [`PipelineState::summarize`].
    pub fn summarize(
        &self,
        req: &SummaryRequest<'_>,
    ) -> Result<crate::model::StructuredSummary, crate::summarize::SummarizeError> {
        let mut k = self.memo.key();
        k.part(self.summarizer.id().as_bytes())
            .part(crate::model::SUMMARY_SCHEMA_VERSION.as_bytes())
            .part(&(req.max_chars as u64).to_le_bytes())
            .part(&[u8::from(req.rereads_prior)]);
        let digests: Vec<u128> = req
            .messages
            .iter()
            .map(|m| crate::model::message_digest(m))
            .collect();
        for d in &digests {
            k.part(&d.to_le_bytes());
        }
        for p in req.prior {
            k.part(&serde_json::to_vec(p).unwrap_or_default());
        }
        // The span is part of the summary; same content under other ids differs.
        k.part(&serde_json::to_vec(&req.span).unwrap_or_default());
        k.part(self.redactor.id().as_bytes());
        // The summarizer reads redacted messages (a value it pulls out of a
        // sentence has lost the context that marked it secret), and what it
        // returns is redacted again, for what prior summaries carried.
        let mut summary = self.memo.summary(k.finish(), || {
            let at: Vec<usize> = (0..req.messages.len()).collect();
            let redacted: Vec<(memo::ReadMessage<'_>, u128)> = crate::par::map(
                &at,
                |&i| req.messages[i].byte_len(),
                |&i| {
                    let read =
                        self.memo
                            .redacted_message(self.redactor, req.messages[i], digests[i]);
                    let digest = match &read {
                        memo::ReadMessage::Same(_) => digests[i],
                        memo::ReadMessage::Redacted(r) => crate::model::message_digest(r),
                    };
                    (read, digest)
                },
            );
            let messages: Vec<&crate::model::Message> =
                redacted.iter().map(|(m, _)| m.as_ref()).collect();
            let read_digests: Vec<u128> = redacted.iter().map(|&(_, d)| d).collect();
            self.summarizer.summarize(&SummaryRequest {
                messages: &messages,
                scans: Some(self.memo),
                digests: Some(&read_digests),
                ..req.clone()
            })
        })?;
        self.redactor.redact_summary(&mut summary);
        Ok(summary)
    }
}

/// What reducers share across one call.
pub struct PipelineState<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// Builds summaries.
    pub summarizer: &'a dyn Summarizer,
    /// Cache of summaries and compressions.
    pub memo: &'a Memo,
    /// Current determinism metadata by tool call id, from the caller.
    pub observations: &'a BTreeMap<String, DeterminismMetadata>,
    /// Rehydration happened this turn: skip externalize and drop, so content
    /// the agent just read back is not evicted again at once (no fetch loop).
    pub skip_aggressive: bool,
    /// A tier pass for tool results is running: reducers that could reach
    /// other messages (externalize) leave them alone.
    pub only_tool_results: bool,
    /// Turn of the last message.
    pub current_turn: u32,
    /// Warnings for the report.
    pub warnings: Vec<String>,
    /// Checked between reducer steps.
    pub cancel: &'a Cancel,
    /// Applied to artifact content and summaries before they are kept.
    pub redactor: &'a crate::redact::Redactor,
    thread: &'a Thread,
    pairing: crate::model::Pairing,
    /// Built on the first [`PipelineState::replay_verified`] that needs it.
    replay: std::cell::OnceCell<ReplayIndex<'a>>,
}

impl<'a> PipelineState<'a> {
    fn new(
        thread: &'a Thread,
        policy: &'a Policy,
        engine: &Engine<'a>,
        observations: &'a BTreeMap<String, DeterminismMetadata>,
        skip_aggressive: bool,
    ) -> Self {
        PipelineState {
            policy,
            summarizer: engine.summarizer,
            memo: engine.memo,
            observations,
            skip_aggressive,
            only_tool_results: false,
            current_turn: thread.current_turn(),
            warnings: Vec::new(),
            cancel: engine.cancel,
            redactor: engine.redactor,
            thread,
            pairing: thread.pairing(),
            replay: std::cell::OnceCell::new(),
        }
    }

    /// Records a warning.
    pub fn warn(&mut self, w: String) {
        self.warnings.push(w);
    }

    /// Summarizes through the memo: the key covers the summarizer, the
    /// summary schema, the size cap, every message's content and the prior
    /// summaries, so a hit is exactly what the summarizer would return.
    pub fn summarize(
        &self,
        req: &SummaryRequest<'_>,
    ) -> Result<crate::model::StructuredSummary, crate::summarize::SummarizeError> {
        self.summarizing().summarize(req)
    }

    /// What summarizing needs, shareable across threads (the state itself
    /// holds per-call cells): for summaries made ahead on every core.
    pub fn summarizing(&self) -> Summarizing<'a> {
        Summarizing {
            summarizer: self.summarizer,
            memo: self.memo,
            redactor: self.redactor,
        }
    }

    /// Arguments of the call that result message `i` answers (by position:
    /// call ids may be reused across turns).
    pub fn call_arguments(&self, i: usize) -> Option<&'a Value> {
        let (m, c) = self.pairing.call_of(i)?;
        Some(&self.thread.messages[m].tool_calls[c].arguments)
    }

    /// Character cap handed to the summarizer (≈3 chars per token, erring small;
    /// the pipeline counts the real tokens afterwards).
    pub fn summary_max_chars(&self) -> usize {
        self.policy.summary_max_tokens as usize * 3
    }

    /// Whether tool result `i` may be compressed or externalized this round.
    pub fn tool_result_reducible(&self, p: &Projection<'_>, i: usize) -> bool {
        !p.pinned[i] && (!p.kept[i] || p.tail_tool_results_reducible)
    }

    /// A replayable result may be cleared only when its source is verifiably
    /// unchanged: the caller reports current metadata for the call, or a later
    /// call of the same tool with the same arguments saw the same metadata.
    pub fn replay_verified(&self, p: &Projection<'_>, i: usize) -> bool {
        let Some(env) = &p.message(i).tool_result else {
            return false;
        };
        let Some(seen) = env.determinism.as_ref().filter(|d| !d.is_empty()) else {
            return false;
        };
        if let Some(now) = self.observations.get(&env.tool_call_id) {
            return !seen.has_changed(now);
        }
        // A later result of the same tool with the same arguments whose
        // metadata shows no change: one lookup per field `seen` has, in an
        // index of every result built once (scanning the rest of the thread
        // for each result was quadratic).
        self.replay
            .get_or_init(|| ReplayIndex::new(self))
            .later_unchanged(i, seen)
    }
}

/// Why compaction failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CompactError {
    /// The thread broke an invariant.
    #[error(transparent)]
    InvalidThread(#[from] ThreadError),
    /// The policy is out of range.
    #[error(transparent)]
    InvalidPolicy(#[from] PolicyError),
    /// `max_input_tokens` was zero.
    #[error("max_input_tokens must be at least 1")]
    ZeroBudget,
    /// Even with everything reducible reduced, the request does not fit.
    #[error(
        "insufficient budget: the smallest valid request needs {required} tokens but the limit is {limit} \
         (fixed parts: system, tools and workspace {fixed}; pinned messages {pinned}; last user message and \
         newest call group {tail}; the rest {rest}); reduce protected content or the workspace, or raise max_input_tokens",
         rest = required.saturating_sub(*fixed).saturating_sub(*pinned).saturating_sub(*tail)
    )]
    InsufficientBudget {
        /// Smallest request the pipeline reached.
        required: u32,
        /// The hard limit.
        limit: u32,
        /// Tokens of pinned messages.
        pinned: u32,
        /// Tokens of the kept tail at the floor: the last user message (cut
        /// to its head and tail) and the newest call group.
        tail: u32,
        /// System prompt, tools and framing.
        fixed: u32,
    },
    /// A pipeline invariant broke (a bug, reported rather than rendered).
    #[error("internal error: {0}")]
    Internal(String),
    /// The caller cancelled (see [`Cancel`]); nothing was produced.
    #[error("cancelled")]
    Cancelled,
    /// A strategy the configuration requires is out of rotation.
    #[error("strategy plugin {strategy} is required (plugins.load[].required) and out of rotation ({reason})")]
    StrategyUnavailable {
        /// `name@version`.
        strategy: String,
        /// Why it was taken out.
        reason: String,
    },
}

/// Inputs of one compaction.
#[derive(Debug, Clone, Copy)]
pub struct CompactRequest<'a> {
    /// The thread.
    pub thread: &'a Thread,
    /// The policy.
    pub policy: &'a Policy,
    /// The model's input limit.
    pub max_input_tokens: u32,
    /// System prompt the request will carry.
    pub system: Option<&'a str>,
    /// Tool schemas the request will carry.
    pub tools: &'a [ToolSchema],
    /// The workspace slot of the assembled context: a fixed part, like the
    /// system prompt.
    pub workspace: Option<&'a crate::render::RenderedMessage>,
    /// The plan committed for this thread last turn, extended rather than replaced.
    pub previous: Option<&'a CompactionPlan>,
    /// Current determinism metadata by tool call id.
    pub observations: &'a BTreeMap<String, DeterminismMetadata>,
    /// Rehydration happened this turn.
    pub skip_aggressive: bool,
    /// Size limits on the thread.
    pub limits: ThreadLimits,
    /// The provider the request is counted for (its framing, what it is sent).
    pub target: Target,
}

/// Set when nobody waits for the result any more (the call's deadline
/// passed, the client went away). Compaction checks it between reducer
/// steps and stops with [`CompactError::Cancelled`], so abandoned work
/// frees its thread and its tenant's slot instead of running to the end.
#[derive(Debug, Default)]
pub struct Cancel(std::sync::atomic::AtomicBool);

impl Cancel {
    /// A flag nobody sets (offline runs, tests, benches).
    pub fn never() -> &'static Cancel {
        static NEVER: Cancel = Cancel(std::sync::atomic::AtomicBool::new(false));
        &NEVER
    }

    /// Asks the work to stop.
    pub fn cancel(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once cancelled.
    pub fn check(&self) -> Result<(), CompactError> {
        if self.is_cancelled() {
            Err(CompactError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Tokenizer, ledger and summarizer: what compaction needs besides its inputs.
#[derive(Clone, Copy)]
pub struct Engine<'a> {
    /// Checked between steps; see [`Cancel`].
    pub cancel: &'a Cancel,
    /// Applied to what compaction keeps: artifact content and summaries.
    pub redactor: &'a crate::redact::Redactor,
    /// Tokenizer for the target model.
    pub counter: &'a dyn TokenCounter,
    /// Per-text count cache.
    pub ledger: &'a TokenLedger,
    /// Summary builder.
    pub summarizer: &'a dyn Summarizer,
    /// Cache of summaries and compressions across calls.
    pub memo: &'a Memo,
}

/// A plan and the artifact writes it depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// The plan; its pending artifact ids must be bound before it is committed.
    pub plan: CompactionPlan,
    /// Content to write to the artifact store.
    pub pending: Vec<PendingArtifact>,
    /// Rendered tokens of each thread message under the plan (0 when it does
    /// not render); an upper bound until artifacts are bound.
    pub message_tokens: Vec<u32>,
    /// System prompt, tools and framing.
    pub fixed_tokens: u32,
    /// What happened.
    pub report: Report,
    /// What the counts are for.
    pub target: Target,
}

/// Per message, whether compaction never touches it (the protected flag, a
/// never-prune role, or a call still waiting for its result): the one rule,
/// for views outside the pipeline.
pub fn pinned_messages(thread: &Thread, policy: &Policy) -> Vec<bool> {
    partition::pinned(thread, policy)
}

/// [`Report::pinned_labels`] without running the pipeline (a reused
/// plan): nothing to scan further when no message carries a label.
pub fn pinned_labels_of(thread: &Thread, policy: &Policy) -> Vec<String> {
    let labelled = thread
        .messages
        .iter()
        .any(|m| m.metadata.label.as_deref().is_some_and(|l| !l.is_empty()));
    if !labelled {
        return Vec::new();
    }
    pinned_labels(thread, &partition::pinned(thread, policy))
}

/// Labels of the pinned messages, each once, in thread order.
fn pinned_labels(thread: &Thread, pinned: &[bool]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (m, _) in thread.messages.iter().zip(pinned).filter(|(_, &p)| p) {
        if let Some(l) = m.metadata.label.as_deref().filter(|l| !l.is_empty()) {
            if !out.iter().any(|o| o == l) {
                out.push(l.to_string());
            }
        }
    }
    out
}

/// The fingerprint [`compact`] gives the plan for `req`: the thread's content
/// and every input that changes the plan. A caller holding a committed plan
/// with this fingerprint can return it without compacting.
pub fn request_fingerprint(req: &CompactRequest<'_>, engine: &Engine<'_>) -> String {
    fingerprint_of(req.thread, req, engine)
}

/// What [`request_fingerprint`] hashes but the messages: two requests with
/// the same settings fingerprint make the same plan of the same messages.
pub fn settings_fingerprint(req: &CompactRequest<'_>, engine: &Engine<'_>) -> String {
    let bare = Thread {
        id: req.thread.id.clone(),
        messages: Vec::new(),
    };
    fingerprint_of(&bare, req, engine)
}

fn fingerprint_of(thread: &Thread, req: &CompactRequest<'_>, engine: &Engine<'_>) -> String {
    /// The system prompt alone (as it always was hashed: a request without
    /// a workspace keeps its fingerprint), or with the workspace slot as a
    /// pair, which no system prompt's text can spell.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum FixedText<'a> {
        System(Option<&'a str>),
        WithWorkspace(Option<&'a str>, std::borrow::Cow<'a, str>),
    }
    let system = match req.workspace {
        None => FixedText::System(req.system),
        Some(w) => FixedText::WithWorkspace(req.system, w.content.text()),
    };
    fingerprint(
        thread,
        &(
            req.policy,
            req.max_input_tokens,
            system,
            req.tools,
            req.observations,
            req.skip_aggressive,
            engine.counter.name(),
            engine.summarizer.id(),
            engine.redactor.id(),
            req.target.describe(),
        ),
        &[crate::render::RENDER_FORMAT_VERSION],
    )
}

impl Compaction {
    /// Binds the store's artifact ids (see [`bind_artifacts`]) and returns the
    /// exact request tokens. Only messages that can mention an artifact
    /// (pointers and summaries) are rendered and counted again; every other
    /// message keeps the count the pipeline already has.
    pub fn bind(
        &mut self,
        ids: &BTreeMap<String, String>,
        thread: &Thread,
        options: &crate::render::RenderOptions,
        engine: &Engine<'_>,
    ) -> u32 {
        bind_artifacts(&mut self.plan, ids);
        let counter = RequestCounter::for_target(engine.counter, engine.ledger, self.target);
        let actions = self.plan.actions();
        for (i, m) in thread.messages.iter().enumerate() {
            let action = actions
                .get(m.id.as_str())
                .copied()
                .unwrap_or(crate::model::Action::Include);
            let names_artifact = match action {
                crate::model::Action::Summarize(_) | crate::model::Action::Externalize(_) => true,
                crate::model::Action::Clear(r) => r.archive_note.is_some(),
                crate::model::Action::Drop(r) => r.archive_artifact_id.is_some(),
                crate::model::Action::Include => false,
            };
            if names_artifact {
                if let Some(slot) = self.message_tokens.get_mut(i) {
                    *slot = crate::render::render_message(m, action, options)
                        .map_or(0, |rm| counter.message(&rm));
                }
            }
        }
        // A summary's recorded size is its rendered message's, ids bound.
        for r in &mut self.plan.summarizations {
            if let Some(i) = thread.index_of(r.span.start_message_id()) {
                if let Some(&n) = self.message_tokens.get(i) {
                    r.summary_token_count = n;
                }
            }
        }
        let total: u64 = self.message_tokens.iter().map(|&n| u64::from(n)).sum();
        let total = u32::try_from(total + u64::from(self.fixed_tokens)).unwrap_or(u32::MAX);
        self.plan.compacted_token_count = total;
        self.report.tokens_after = total;
        total
    }
}

/// Every artifact id the plan refers to (pointers and summary artifact lists).
pub fn referenced_artifacts(plan: &CompactionPlan) -> std::collections::BTreeSet<String> {
    let mut ids: std::collections::BTreeSet<String> = plan
        .externalizations
        .iter()
        .map(|r| r.artifact_id.clone())
        .collect();
    for s in &plan.summarizations {
        ids.extend(s.summary.artifacts.iter().map(|a| a.artifact_id.clone()));
        ids.extend(s.archive_artifact_id.iter().cloned());
    }
    for c in &plan.clearings {
        ids.extend(c.archive_artifact_id.iter().cloned());
    }
    for d in &plan.drops {
        ids.extend(d.archive_artifact_id.iter().cloned());
    }
    for e in &plan.externalizations {
        ids.extend(e.summary.artifacts.iter().map(|a| a.artifact_id.clone()));
    }
    ids
}

/// Replaces pending artifact ids with the ids the store assigned. Call only
/// after every write succeeded; [`Compaction::bind`] does this and recounts.
pub fn bind_artifacts(plan: &mut CompactionPlan, ids: &BTreeMap<String, String>) {
    let swap = |id: &mut String| {
        if let Some(real) = ids.get(id.as_str()) {
            *id = real.clone();
        }
    };
    for e in &mut plan.externalizations {
        swap(&mut e.artifact_id);
        e.summary
            .artifacts
            .iter_mut()
            .for_each(|a| swap(&mut a.artifact_id));
    }
    for s in &mut plan.summarizations {
        std::sync::Arc::make_mut(&mut s.summary)
            .artifacts
            .iter_mut()
            .for_each(|a| swap(&mut a.artifact_id));
        s.archive_artifact_id.iter_mut().for_each(swap);
    }
    for d in &mut plan.drops {
        d.archive_artifact_id.iter_mut().for_each(swap);
    }
    for c in &mut plan.clearings {
        if let (Some(pending), Some(note)) = (&c.archive_artifact_id, &mut c.archive_note) {
            if let Some(real) = ids.get(pending.as_str()) {
                *note = note.replace(pending.as_str(), real);
            }
        }
        c.archive_artifact_id.iter_mut().for_each(swap);
    }
}
