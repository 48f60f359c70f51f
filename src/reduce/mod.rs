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
mod policy;
mod preserve;
mod projection;
mod refill;
mod replay;
mod retention;
mod summary;
mod window;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
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

/// Tokens freed by one reducer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReducerReport {
    /// Reducer name.
    pub name: String,
    /// Tokens freed (over all rounds).
    pub tokens_freed: u32,
}

/// The budget as resolved for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The model's input limit.
    pub max_input_tokens: u32,
    /// Ceiling for the request without rehydrated content.
    pub hard_limit: u32,
    /// Compaction starts above this.
    pub trigger: u32,
    /// Compaction aims for this.
    pub target: u32,
    /// System prompt, tools, the workspace slot and framing.
    pub fixed_tokens: u32,
    /// Of `fixed_tokens`: the system prompt.
    #[serde(default)]
    pub system_tokens: u32,
    /// Of `fixed_tokens`: the tool schemas (the rest is the workspace and
    /// framing).
    #[serde(default)]
    pub tool_tokens: u32,
    /// Tool results against their cap, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<TierReport>,
    /// Of `fixed_tokens`: the workspace slot (left out of documents when
    /// there is none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub workspace_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What compaction did, for the caller and the audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Request tokens with no plan.
    pub tokens_before: u32,
    /// Request tokens with the new plan (an upper bound until artifacts are bound).
    pub tokens_after: u32,
    /// The budget.
    pub budget: BudgetReport,
    /// Whether the trigger was crossed (the total's or a tier cap's).
    pub triggered: bool,
    /// Whether a tier over its cap triggered compaction.
    #[serde(default)]
    pub tier_triggered: bool,
    /// Keep counts that were finally used.
    pub keep_recent_turns: u32,
    /// Keep counts that were finally used.
    pub keep_tool_io_pairs: u32,
    /// Per reducer, in pipeline order.
    pub per_reducer: Vec<ReducerReport>,
    /// Normalization and fallback warnings.
    pub warnings: Vec<String>,
    /// Tokens of the developer messages, as sent (part of the messages'
    /// share; the event schema reports them apart from the system prompt).
    #[serde(default)]
    pub developer_tokens: u32,
    /// Messages never compacted this call (the protected flag, a never-prune
    /// role, or a call still waiting for its result).
    #[serde(default)]
    pub pinned_messages: u32,
    /// Their labels, for those that carry one, in thread order, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_labels: Vec<String>,
    /// Per plan record: its tokens verbatim and as the plan renders it, for
    /// the lifecycle events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<RecordTokens>,
}

/// A tier against its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierReport {
    /// Above this, the tier is reduced.
    pub cap: u32,
    /// What it is reduced to once over the cap.
    pub target: u32,
    /// Its tokens with the previous plan (none: verbatim) applied.
    pub tokens_before: u32,
    /// Its tokens with the new plan.
    pub tokens_after: u32,
}

/// One plan record's tokens: what its messages cost verbatim and what they
/// cost as the plan renders them (an upper bound until artifact ids are
/// bound). Keyed by the record's action and first message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordTokens {
    /// What the record does.
    pub action: crate::model::ActionKind,
    /// Its first message.
    pub first_message_id: String,
    /// Its messages' tokens verbatim.
    pub tokens_before: u32,
    /// Its messages' tokens as rendered under the plan.
    pub tokens_after: u32,
    /// Its messages' tokens under the plan the call started from (the
    /// previous one): `tokens_before` for messages that were verbatim, what
    /// an earlier summary, stub or pointer took for those it absorbs.
    #[serde(default)]
    pub tokens_previous: u32,
}

impl RecordTokens {
    /// What the record freed beyond the plan before it: summed over every
    /// compaction's new records, each token is counted once, however often
    /// its span is summarized again.
    pub fn tokens_freed(&self) -> u32 {
        self.tokens_previous.saturating_sub(self.tokens_after)
    }
}

impl Report {
    /// How much of the target the compacted request uses (1.0 = exactly the
    /// target): a compaction that lands far below it threw away context it
    /// had room for.
    pub fn target_use(&self) -> f64 {
        f64::from(self.tokens_after) / f64::from(self.budget.target.max(1))
    }
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

/// Builds the budget for a request: the safety margin applies when the
/// counter estimates, the rehydration reserve when this turn reads back.
pub fn budget_for(
    policy: &Policy,
    max_input_tokens: u32,
    counter: &RequestCounter<'_>,
    system: Option<&str>,
    tools: &[ToolSchema],
    rehydrating: bool,
) -> TokenBudget {
    TokenBudget::for_policy(
        policy,
        max_input_tokens,
        counter.fixed(system, tools),
        ReserveUse {
            estimated_counts: !counter.counter.is_exact(),
            rehydrating,
        },
    )
}

/// The default reducers, cheap → expensive, as enabled by the policy.
pub fn default_reducers(policy: &Policy) -> Vec<Box<dyn Reducer>> {
    let e = policy.enable;
    let mut out: Vec<Box<dyn Reducer>> = Vec::new();
    if e.retention {
        out.push(Box::new(Retention));
    }
    if e.compress {
        out.push(Box::new(Compress::default()));
    }
    if e.clear {
        out.push(Box::new(Clear));
    }
    if e.externalize {
        out.push(Box::new(Externalize));
    }
    if e.summarize {
        out.push(Box::new(Summarize));
    }
    if e.drop {
        out.push(Box::new(Window));
    }
    out
}

/// Runs the pipeline with the default reducers.
pub fn compact(req: &CompactRequest<'_>, engine: &Engine<'_>) -> Result<Compaction, CompactError> {
    compact_with(req, engine, &default_reducers(req.policy))
}

/// Runs the pipeline with the given reducers (plugins insert theirs by
/// aggressiveness), in four steps:
/// 1. check the request and size the budget for its fixed parts;
/// 2. start from the previous plan (what it evicted stays evicted: its
///    bytes are the prompt cache's prefix) or from a fresh one;
/// 3. above the trigger, `shrink`; below it, keep everything;
/// 4. `finish`: purge, normalize and validate the plan, keep only the
///    artifacts it still references, fingerprint it.
pub fn compact_with(
    req: &CompactRequest<'_>,
    engine: &Engine<'_>,
    reducers: &[Box<dyn Reducer>],
) -> Result<Compaction, CompactError> {
    let (thread, policy) = (req.thread, req.policy);
    thread.validate(&req.limits)?;
    policy.validate()?;
    if req.max_input_tokens == 0 {
        return Err(CompactError::ZeroBudget);
    }
    let counter = RequestCounter::for_target(engine.counter, engine.ledger, req.target);
    let mut budget = budget_for(
        policy,
        req.max_input_tokens,
        &counter,
        req.system,
        req.tools,
        req.skip_aggressive,
    );
    budget.workspace_tokens = req.workspace.map_or(0, |w| counter.message(w));
    let mut warnings = oversize_warnings(thread, &req.limits);
    let start = starting_plan(req, &mut warnings);
    let pinned = partition::pinned(thread, policy);
    let fixed = budget.fixed_tokens();
    let enriched = preserve::enriched(thread, policy);
    let mut p = Projection::new(
        thread,
        counter,
        &policy.render,
        engine.redactor,
        start,
        pinned,
        fixed,
    )
    .reading(&enriched);
    let tokens_before = p.verbatim_total();
    // What each message cost under the plan this call started from: a
    // record that absorbs earlier ones frees only what they still took.
    let start_costs: Vec<u32> = (0..p.len()).map(|i| p.cost(i)).collect();
    let mut state = PipelineState::new(
        thread,
        policy,
        engine,
        req.observations,
        req.skip_aggressive,
    );
    state.warnings = warnings;
    let mut steps = Steps {
        reducers,
        reports: reducers
            .iter()
            .map(|r| ReducerReport {
                name: r.name().to_string(),
                tokens_freed: 0,
            })
            .collect(),
        budget: &budget,
    };
    // Not in a turn that reads back: what was just read is not evicted again.
    if let (Some(w), false) = (policy.window, req.skip_aggressive) {
        window::standing(&mut p, &w);
        if policy.enable.archive {
            p.archive_evictions(state.redactor);
        }
    }
    let mut tail = partition::TailShare::new(policy, budget.target()).within(p.len());
    let tool_results_before = p.tool_results_total();
    let tier_over = budget
        .tool_results_cap
        .is_some_and(|cap| tool_results_before > cap);
    // Over the cap: tool results go first, down to their target. What the
    // tier pass evicted is frozen before the shrink starts, so the refill
    // never gives it back past the cap.
    if tier_over {
        cap_tool_results(&mut p, &mut state, &mut steps, &tail)?;
    }
    let over_trigger = p.total() > budget.trigger();
    if over_trigger {
        shrink(&mut p, &mut state, &mut steps, &mut tail)?;
    } else if p.total() > budget.hard_limit() {
        // The trigger is never above the hard limit, so this cannot happen.
        return Err(CompactError::Internal(
            "untriggered request over the hard limit".into(),
        ));
    }
    let report = Report {
        tokens_before,
        tokens_after: 0,
        budget: BudgetReport {
            max_input_tokens: budget.max_input_tokens,
            hard_limit: budget.hard_limit(),
            trigger: budget.trigger(),
            target: budget.target(),
            fixed_tokens: fixed,
            system_tokens: budget.system_tokens,
            tool_tokens: budget.tool_tokens,
            workspace_tokens: budget.workspace_tokens,
            tool_results: budget.tool_results_cap.map(|cap| TierReport {
                cap,
                target: budget.tool_results_target().unwrap_or(cap),
                tokens_before: tool_results_before,
                tokens_after: p.tool_results_total(),
            }),
        },
        triggered: over_trigger || tier_over,
        tier_triggered: tier_over,
        keep_recent_turns: tail.turns,
        keep_tool_io_pairs: tail.pairs,
        per_reducer: steps.reports,
        warnings: Vec::new(),
        developer_tokens: (0..p.len())
            .filter(|&i| p.message(i).role == crate::model::Role::Developer)
            .map(|i| p.verbatim_cost(i))
            .sum(),
        pinned_messages: p.pinned.iter().filter(|&&x| x).count() as u32,
        pinned_labels: pinned_labels(thread, &p.pinned),
        records: Vec::new(),
    };
    finish(req, engine, p, state, report, &start_costs)
}

/// One warning naming the items of a type compactd does not know, carried
/// as they came (the first three and how many in all): every call on the
/// thread gives it, for the response and the audit record.
pub fn unknown_item_warnings(thread: &Thread) -> Vec<String> {
    let unknown: Vec<String> = thread
        .messages
        .iter()
        .flat_map(|m| {
            m.unknown_parts()
                .map(|(k, p)| format!("{} part {k} ({} {:?})", m.id, p.dialect.as_str(), p.kind))
        })
        .collect();
    if unknown.is_empty() {
        return Vec::new();
    }
    let more = match unknown.len() {
        1..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    vec![format!(
        "input: {}{more} of a type compactd does not know, carried as it came and sent back only in its own format",
        unknown[..unknown.len().min(3)].join(", ")
    )]
}

/// One warning naming the messages over `limits.warn_message_bytes` (the
/// first three and how many in all).
fn oversize_warnings(thread: &Thread, limits: &ThreadLimits) -> Vec<String> {
    let over: Vec<(&str, usize)> = thread
        .messages
        .iter()
        // Images are large by nature; the warning is about text.
        .map(|m| {
            let images: usize = match &m.content {
                crate::model::Content::Parts(parts) => parts
                    .iter()
                    .filter(|p| match p {
                        crate::model::ContentPart::Image { .. } => true,
                        crate::model::ContentPart::Provider(p) => !p.media().is_empty(),
                        _ => false,
                    })
                    .map(crate::model::ContentPart::byte_len)
                    .sum(),
                crate::model::Content::Text(_) => 0,
            };
            (m.id.as_str(), m.byte_len() - images)
        })
        .filter(|&(_, n)| n > limits.warn_message_bytes)
        .collect();
    if over.is_empty() {
        return Vec::new();
    }
    let named: Vec<String> = over
        .iter()
        .take(3)
        .map(|(id, n)| format!("{id} ({} KB)", n.div_ceil(1024)))
        .collect();
    let more = match over.len() {
        1..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    vec![format!(
        "input: {}{more} over {} KB; a message this large is often a dump or a payload cut off on its way",
        named.join(", "),
        limits.warn_message_bytes / 1024
    )]
}

/// The plan to start from: the previous one normalized, or a fresh one when
/// there is none or it no longer fits the thread.
fn starting_plan(req: &CompactRequest<'_>, warnings: &mut Vec<String>) -> CompactionPlan {
    let thread = req.thread;
    let Some(prev) = req.previous else {
        return CompactionPlan::new(thread.id.clone());
    };
    let mut prev = prev.clone();
    let normalized = prev.normalize();
    match prev.validate_against(thread, &req.policy.roles_never_prune) {
        Ok(()) => {
            warnings.extend(normalized.iter().map(ToString::to_string));
            prev
        }
        // The client edited history (a message the plan names is gone or
        // now pinned). Failing would fail every later turn the same way; a
        // fresh plan supersedes the stale one instead.
        Err(e) => {
            warnings.push(format!(
                "previous plan version {} no longer fits the thread ({e}); superseded by a fresh plan",
                prev.version
            ));
            CompactionPlan::new(thread.id.clone())
        }
    }
}

/// The reducers of one call, what each freed, and the budget they work to.
struct Steps<'r> {
    reducers: &'r [Box<dyn Reducer>],
    reports: Vec<ReducerReport>,
    budget: &'r TokenBudget,
}

impl Steps<'_> {
    /// Runs the reducers at `which`, in order, until the target is met.
    fn run(
        &mut self,
        which: &[usize],
        p: &mut Projection<'_>,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        let budget = *self.budget;
        self.run_to(which, p, state, &budget)
    }

    /// Runs the reducers at `which`, in order, until `budget`'s target is met.
    fn run_to(
        &mut self,
        which: &[usize],
        p: &mut Projection<'_>,
        state: &mut PipelineState<'_>,
        budget: &TokenBudget,
    ) -> Result<(), CompactError> {
        for &i in which {
            if p.total() <= budget.target() {
                break;
            }
            state.cancel.check()?;
            let before = p.total();
            self.reducers[i].reduce(p, budget, state)?;
            // What a reducer evicted is archived at once, so the next one
            // sees what naming the archives costs and reduces for it.
            if state.policy.enable.archive {
                p.archive_evictions(state.redactor);
            }
            self.reports[i].tokens_freed += before.saturating_sub(p.total());
        }
        Ok(())
    }
}

/// The reducers that only ever replace tool results (externalize, told so
/// by [`PipelineState::only_tool_results`]): the ones a tier pass runs.
const TOOL_RESULT_REDUCERS: [&str; 4] = ["retention", "compress", "clear", "externalize"];

/// Tool results over their cap: the tool-result reducers, with the recent
/// tail kept, aim the total as far down as the tier is over its target, so
/// only tool results go (oldest first) and dialogue stays. What cannot go
/// (pinned, recent, non-replayable with externalization off) is named in a
/// warning: the cap is a guard, the single total stays the hard ceiling.
fn cap_tool_results(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    steps: &mut Steps<'_>,
    tail: &partition::TailShare,
) -> Result<(), CompactError> {
    let budget = *steps.budget;
    let (Some(cap), Some(target)) = (budget.tool_results_cap, budget.tool_results_target()) else {
        return Ok(());
    };
    let which: Vec<usize> = (0..steps.reducers.len())
        .filter(|&i| TOOL_RESULT_REDUCERS.contains(&steps.reducers[i].name()))
        .collect();
    partition::mark_kept(p, tail.turns, tail.pairs, tail.tokens);
    p.tail_tool_results_reducible = false;
    state.only_tool_results = true;
    // Reducers free in steps (a result at a time) and naming archives costs
    // a little: each round aims anew from where the last left the tier,
    // until it is at its target or a round frees nothing more.
    let mut last = u32::MAX;
    loop {
        let now = p.tool_results_total();
        let over = now.saturating_sub(target);
        if over == 0 || now >= last {
            break;
        }
        last = now;
        let pass = TokenBudget {
            goal: Some(p.total().saturating_sub(over)),
            ..budget
        };
        steps.run_to(&which, p, state, &pass)?;
    }
    state.only_tool_results = false;
    if p.tool_results_total() > target {
        state.warn(format!(
            "tool results take {} tokens, over their target of {target} (cap {cap}): the rest is pinned, recent or may not be evicted",
            p.tool_results_total()
        ));
    }
    Ok(())
}

/// Above the trigger: the reducers with a tail that shrinks until the
/// target is met or the tail is at its floor; then the window (dropping is
/// the last resort); then give back what the target has room for; refuse
/// only what cannot fit even with everything free dropped.
fn shrink(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    steps: &mut Steps<'_>,
    tail: &mut partition::TailShare,
) -> Result<(), CompactError> {
    let budget = steps.budget;
    let archive = state.policy.enable.archive;
    // What the previous plan evicted stays evicted (the cache's prefix).
    let frozen: Vec<bool> = (0..p.len()).map(|i| !p.is_included(i)).collect();
    let (window, rest): (Vec<usize>, Vec<usize>) =
        (0..steps.reducers.len()).partition(|&i| steps.reducers[i].name() == "window");
    loop {
        partition::mark_kept(p, tail.turns, tail.pairs, tail.tokens);
        p.tail_tool_results_reducible = tail.at_floor;
        if tail.escalated() {
            partition::excerpt_last_user(p, tail.user_share(budget.target()));
            if archive {
                p.archive_evictions(state.redactor);
            }
        }
        steps.run(&rest, p, state)?;
        if p.total() <= budget.target() || tail.at_floor {
            break;
        }
        tail.shrink();
    }
    steps.run(&window, p, state)?;
    // `run` archives what each step evicted; naming the window's own
    // archives can tip the request over the hard limit, and then the window
    // frees more (its new drops archived in turn).
    for _ in 0..3 {
        if !archive || p.total() <= budget.hard_limit() {
            break;
        }
        steps.run(&window, p, state)?;
    }
    if p.total() < budget.target() {
        fill_target(p, budget, state, &frozen)?;
    }
    // The last resort is a drop, so it is the drop reducer's to make: with
    // it switched off the request is refused rather than cut.
    if p.total() > budget.hard_limit() && state.policy.enable.drop {
        window::drop_all_free(p);
        if archive {
            p.archive_evictions(state.redactor);
        }
    }
    if p.total() > budget.hard_limit() {
        let (pinned, tail) = p.locked_tokens();
        return Err(CompactError::InsufficientBudget {
            required: p.total(),
            limit: budget.hard_limit(),
            pinned,
            tail,
            fixed: budget.fixed_tokens(),
        });
    }
    if p.total() > budget.target() {
        state.warn(format!(
            "target of {} tokens not reached ({} tokens); within the hard limit of {}",
            budget.target(),
            p.total(),
            budget.hard_limit()
        ));
    }
    Ok(())
}

/// The plan out of the projection: purged, drops indexed (redacted),
/// normalized and validated; only the artifacts it still references are
/// written; counts and fingerprint set.
fn finish(
    req: &CompactRequest<'_>,
    engine: &Engine<'_>,
    mut p: Projection<'_>,
    mut state: PipelineState<'_>,
    mut report: Report,
    start_costs: &[u32],
) -> Result<Compaction, CompactError> {
    p.purge();
    window::index_drops(&mut p);
    let tokens_after = p.total();
    let mut plan = p.take_plan();
    // Dropped spans' indexes are kept in the plan (never rendered).
    for d in &mut plan.drops {
        engine.redactor.redact_drop_index(&mut d.index);
    }
    let mut pending = std::mem::take(&mut p.pending);
    for w in plan.normalize() {
        state.warn(w.to_string());
    }
    plan.validate_against(req.thread, &req.policy.roles_never_prune)
        .map_err(|e| CompactError::Internal(format!("pipeline produced an invalid plan: {e}")))?;
    report.records = record_tokens(&plan, &p, start_costs);
    let referenced = referenced_artifacts(&plan);
    pending.retain(|a| referenced.contains(&a.placeholder));
    plan.original_token_count = report.tokens_before;
    plan.compacted_token_count = tokens_after;
    if report.triggered {
        plan.compacted_at_turn = Some(req.thread.current_turn());
    }
    plan.fingerprint = request_fingerprint(req, engine);
    report.tokens_after = tokens_after;
    report.warnings = state.warnings;
    Ok(Compaction {
        plan,
        pending,
        message_tokens: (0..p.len()).map(|i| p.cost(i)).collect(),
        fixed_tokens: report.budget.fixed_tokens,
        target: req.target,
        report,
    })
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

/// [`RecordTokens`] of every record of `plan`, from the projection's counts
/// and each message's cost when the call started.
fn record_tokens(
    plan: &CompactionPlan,
    p: &Projection<'_>,
    start_costs: &[u32],
) -> Vec<RecordTokens> {
    use crate::model::ActionKind;
    let spans = plan
        .externalizations
        .iter()
        .map(|r| (ActionKind::Externalize, &r.span))
        .chain(
            plan.summarizations
                .iter()
                .map(|r| (ActionKind::Summarize, &r.span)),
        )
        .chain(plan.clearings.iter().map(|r| (ActionKind::Clear, &r.span)))
        .chain(plan.drops.iter().map(|r| (ActionKind::Drop, &r.span)));
    spans
        .map(|(action, span)| {
            let (mut before, mut after, mut previous) = (0u32, 0u32, 0u32);
            for i in span.message_ids.iter().filter_map(|id| p.position(id)) {
                before = before.saturating_add(p.verbatim_cost(i));
                after = after.saturating_add(p.cost(i));
                previous = previous.saturating_add(start_costs[i]);
            }
            RecordTokens {
                action,
                first_message_id: span.start_message_id().to_string(),
                tokens_before: before,
                tokens_after: after,
                tokens_previous: previous,
            }
        })
        .collect()
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

/// Gives back what the target has room for (see [`refill`]), then names the
/// archives of what it re-made. Naming them costs a few tokens the refill
/// cannot see: when that pushes the request over the target, the refill is
/// undone and run once more with what the naming cost kept spare, and
/// undone for good if it overshoots again.
fn fill_target(
    p: &mut Projection<'_>,
    budget: &TokenBudget,
    state: &mut PipelineState<'_>,
    frozen: &[bool],
) -> Result<(), CompactError> {
    let mut spare = 0;
    for _ in 0..2 {
        let before = p.plan.clone();
        let pending = p.pending.len();
        refill::refill(p, budget.target().saturating_sub(spare), state, frozen)?;
        let refilled = p.total();
        if state.policy.enable.archive {
            p.archive_evictions(state.redactor);
        }
        if p.total() <= budget.target() {
            return Ok(());
        }
        // What naming the archives cost, and a little more, kept spare.
        spare = p.total().saturating_sub(refilled) + 32;
        p.pending.truncate(pending);
        p.restore(before);
    }
    Ok(())
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
