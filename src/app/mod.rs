//! The use cases — Compact, Render, Rehydrate — over the core, the stores
//! and the caller's security context. The gRPC handlers, the offline CLI and
//! the test harness all go through [`App`], so binding artifact ids, the
//! exact recount and rendering happen in exactly one place.
//!
//! Inputs arrive converted and owned ([`CompactCommand`], [`RenderCommand`],
//! [`RehydrateCommand`]); every use case authorizes first ([`UseCase`]),
//! validates, runs the CPU-bound core on the blocking pool and returns a
//! plain outcome for the caller to map to its own output.

mod calibration;
mod carry;
mod compact;
mod error;
mod explain;
mod lifecycle;
mod recall;
mod rehydrate;
mod render;
mod search;
mod sent;
mod session;
mod summaries;
mod thread_state;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::recall::{FoundPassage, RecalledPassage};
pub use compact::{CompactCommand, CompactOutcome, TaskOutcome, WrittenArtifact};
pub use error::AppError;
pub use explain::{ArtifactHit, ExplainCommand, ExplainOutcome};
pub use lifecycle::{DeleteOutcome, Lifecycle, Quotas, ResetOutcome, SweepReport, Usage};
pub use rehydrate::{RehydrateCommand, RehydrateOutcome};
pub use render::{Injection, RenderCommand, RenderOutcome, RenderedOutput};
pub use search::{search_context_tool, SearchCommand, SearchOutcome, SEARCH_CONTEXT_TOOL};
pub use sent::{SentBefore, SentThread};
pub use session::{SessionInput, SessionSettings, SessionState};
pub use summaries::LlmSummaries;

use crate::model::{DeterminismMetadata, Thread, ThreadLimits, ToolSchema};
use crate::redact::Redactor;
use crate::reduce::{Cancel, Engine, Memo, Policy};
use crate::runtime::Call;
use crate::security::{Permission, SecurityContext};
use crate::store::{ArtifactStore, MemoryArtifactStore, MemoryPlanStore, PlanStore, ThreadStore};
use crate::summarize::{ExtractiveSummarizer, Summarizer};
use crate::tokens::{counter_for, Target, TokenCounter, TokenLedger, DEFAULT_MAX_ENTRIES};

type Result<T> = std::result::Result<T, AppError>;

/// What a request falls back to when it leaves something unset.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// The compaction policy requests override.
    pub policy: Policy,
    /// Model when a request names none (tokenizer and payload `model`).
    pub model: String,
    /// Input limit when a request gives none.
    pub max_input_tokens: u32,
    /// The floor of every request's `safety_buffer_tokens`.
    pub min_safety_buffer_tokens: u32,
    /// Render's injection of artifacts the agent names.
    pub auto_rehydrate: crate::render::AutoRehydrate,
    /// Render's recall block.
    pub recall: crate::recall::RecallSettings,
    /// Items of a type compactd does not know: carried or refused.
    pub unknown_items: crate::model::UnknownItems,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            policy: Policy::default(),
            model: "gpt-4o".into(),
            max_input_tokens: 128_000,
            min_safety_buffer_tokens: 256,
            auto_rehydrate: crate::render::AutoRehydrate::default(),
            recall: crate::recall::RecallSettings::default(),
            unknown_items: crate::model::UnknownItems::Carry,
        }
    }
}

/// The application: stores, process-wide caches and defaults. Cheap to
/// clone; all state is shared.
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    /// One ledger for the process: agents resend the same thread every turn.
    ledger: Arc<TokenLedger>,
    /// Summaries and compressions, for the same reason.
    memo: Memo,
    summarizer: Arc<dyn Summarizer + Send + Sync>,
    defaults: Defaults,
    limits: ThreadLimits,
    lifecycle: Lifecycle,
    usage: lifecycle::UsageBook,
    /// Applied to everything compaction keeps (artifacts, summaries).
    redactor: Arc<Redactor>,
    /// Per (tenant, thread): a Compact's compaction, artifact writes and
    /// commit, and a DeleteThread's removals, never interleave.
    thread_locks: crate::store::KeyedLocks<String>,
    /// Upgrades extractive summaries through an LLM, when configured.
    llm: Option<Arc<LlmSummaries>>,
    /// Strategy plugins, run as pipeline steps.
    plugins: Vec<Arc<crate::plugin::LoadedPlugin>>,
    /// Append sessions.
    sessions: session::Sessions,
    /// How estimated counts relate to each provider's, per tenant and
    /// model family.
    calibrations: calibration::Calibrations,
    /// What the process remembers about each thread between its calls
    /// (carry, sent thread, stable part, recall index, session copy,
    /// trace, validation): one home, forgotten as one.
    threads: Arc<thread_state::ThreadStates>,
    /// Calls running, so that a deletion is forgotten again after those
    /// that began before it.
    in_flight: thread_state::inflight::InFlight,
    /// The plan store's key generation the caches were filled under.
    key_generation: std::sync::atomic::AtomicU64,
    /// What the plugins are and how they are set up, as the fingerprint
    /// hashes it (formed once: plugins are fixed at start-up).
    plugin_setup: Vec<u8>,
}

/// What the service adds to the core's built-in strategies.
#[derive(Default)]
pub struct Extensions {
    /// The LLM summarizer.
    pub llm: Option<LlmSummaries>,
    /// Loaded strategy plugins.
    pub plugins: Vec<Arc<crate::plugin::LoadedPlugin>>,
    /// Where append sessions are kept; `None`: in memory.
    pub threads: Option<Arc<ThreadStore>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("defaults", &self.inner.defaults)
            .finish_non_exhaustive()
    }
}

/// Every use case authorizes itself, even though the gRPC handlers already
/// did before converting the request: callers other than the service (the
/// offline CLI, tests, embedders) get the same checks.
impl App {
    /// An application over the given stores.
    pub fn new(
        defaults: Defaults,
        plans: Arc<dyn PlanStore>,
        artifacts: Arc<dyn ArtifactStore>,
        ledger_max_entries: usize,
        lifecycle: Lifecycle,
        redactor: Arc<Redactor>,
        extensions: Extensions,
    ) -> Self {
        let threads = extensions
            .threads
            .unwrap_or_else(|| Arc::new(ThreadStore::memory()));
        let key_generation = plans.key_generation();
        let states = Arc::new(thread_state::ThreadStates::new(
            thread_state::PARTS_BYTES.saturating_add(lifecycle.sessions.cache_bytes),
        ));
        let calibrations = calibration::Calibrations::new(Arc::clone(&threads));
        let sessions = session::Sessions::new(threads, lifecycle.sessions, Arc::clone(&states));
        App {
            inner: Arc::new(Inner {
                sessions,
                calibrations,
                plans,
                artifacts,
                ledger: Arc::new(TokenLedger::new(ledger_max_entries)),
                memo: Memo::default(),
                summarizer: Arc::new(ExtractiveSummarizer),
                limits: ThreadLimits {
                    unknown_items: defaults.unknown_items,
                    ..ThreadLimits::default()
                },
                defaults,
                lifecycle,
                usage: lifecycle::UsageBook::default(),
                redactor,
                thread_locks: crate::store::KeyedLocks::default(),
                llm: extensions.llm.map(Arc::new),
                plugin_setup: plugin_setup(&extensions.plugins),
                threads: states,
                key_generation: std::sync::atomic::AtomicU64::new(key_generation),
                in_flight: thread_state::inflight::InFlight::default(),
                plugins: extensions.plugins,
            }),
        }
    }

    /// The offline application: in-memory plans and content-addressed
    /// in-memory artifacts, so the same input always gives the same output.
    pub fn offline(defaults: Defaults) -> Self {
        App::offline_with_plans(defaults, Arc::new(MemoryPlanStore::default()))
    }

    /// [`App::offline`] over `plans`: a plan committed there beforehand is
    /// what a Render without `compact_first` renders (`compactd inspect
    /// --plan`).
    pub fn offline_with_plans(defaults: Defaults, plans: Arc<dyn PlanStore>) -> Self {
        App::new(
            defaults,
            plans,
            Arc::new(MemoryArtifactStore::content_addressed()),
            DEFAULT_MAX_ENTRIES,
            Lifecycle::default(),
            Arc::new(Redactor::standard().clone()),
            Extensions::default(),
        )
    }

    /// The defaults requests fall back to.
    pub fn defaults(&self) -> &Defaults {
        &self.inner.defaults
    }

    /// The model to use: the requested one, else the default; never empty.
    fn model(&self, requested: Option<String>) -> Result<String> {
        let model = requested.unwrap_or_else(|| self.inner.defaults.model.clone());
        if model.is_empty() {
            return Err(AppError::invalid("model", "must not be empty"));
        }
        Ok(model)
    }

    /// The input limit: the requested one, else the default. Zero is passed
    /// on, so the core rejects it by name.
    fn max_input_tokens(&self, requested: Option<u32>) -> u32 {
        requested.unwrap_or(self.inner.defaults.max_input_tokens)
    }

    /// The request's policy, validated, with the safety buffer raised to the
    /// configured floor (no request may lower it further).
    fn effective_policy(&self, policy: &Arc<Policy>) -> Result<Arc<Policy>> {
        policy
            .validate()
            .map_err(|e| AppError::invalid(e.field, e.reason))?;
        let floor = self.inner.defaults.min_safety_buffer_tokens;
        if policy.safety_buffer_tokens >= floor {
            return Ok(Arc::clone(policy));
        }
        let mut raised = Policy::clone(policy);
        raised.safety_buffer_tokens = floor;
        Ok(Arc::new(raised))
    }

    /// Validates a thread against the size limits; errors name `thread.…`.
    /// `INVALID_ARGUMENT` naming `field` unless `text` is 1 to `max`
    /// characters and not blank (Explain's text, SearchContext's query).
    fn validate_text(field: &str, text: &str, max: usize) -> Result<()> {
        let chars = text.chars().count();
        if text.trim().is_empty() || chars > max {
            return Err(AppError::invalid(
                field,
                format!("must be 1 to {max} characters, not blank (got {chars})"),
            ));
        }
        Ok(())
    }

    /// [`Thread::validate`] under the service's limits. A thread that
    /// `extends` one this process validated, sharing its messages, has only
    /// its appended messages checked, against what validating that one
    /// left.
    fn validate_thread(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
        extends: Option<&Arc<Thread>>,
    ) -> Result<()> {
        self.validate_and_pair(tenant, thread, extends, false)
            .map(drop)
    }

    /// [`App::validate_thread`], and with `pair` the thread's pairing when
    /// the thread extends one validated here: found from the pairing kept
    /// with that one, reading only the appended messages. `None`: find it.
    fn validate_and_pair(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
        extends: Option<&Arc<Thread>>,
        pair: bool,
    ) -> Result<Option<Arc<crate::model::PairingState>>> {
        let validated = &self.inner.threads;
        let limits = &self.inner.limits;
        // What validating the base left moves to the thread that extends
        // it (a concurrent call on the same base validates in full).
        let base = extends
            .filter(|base| {
                base.messages.len() <= thread.messages.len()
                    && base
                        .messages
                        .iter()
                        .zip(&thread.messages)
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            })
            .and_then(|base| Some((base, validated.take_validated(tenant, base)?)));
        let Some((base, state)) = base else {
            self.check_thread(thread, 0)?;
            validated.keep_validated(tenant, thread, None);
            return Ok(None);
        };
        // Kept from the second turn on: a thread sent in full once never
        // pays for it (one sent again extends the one sent before).
        let mut state = state.unwrap_or_else(|| base.validation());
        match thread.validate_appended(limits, &mut state) {
            Ok(()) => {
                let pairing = pair.then(|| state.pairing_of(thread));
                validated.keep_validated(tenant, thread, Some(state));
                Ok(pairing)
            }
            Err(e) => {
                // Untouched by the failed append: the base's still.
                validated.keep_validated(tenant, base, Some(state));
                Err(thread_error(e))
            }
        }
    }

    /// [`Thread::validate_from`] under the service's limits, as the API's
    /// error.
    fn check_thread(&self, thread: &Thread, checked: usize) -> Result<()> {
        thread
            .validate_from(&self.inner.limits, checked)
            .map_err(thread_error)
    }

    /// Replaces a validated thread with the view every later step works on
    /// (see [`Thread::provider_view`]): calls the conversation moved past
    /// without a result, and reasoning from before the last user message,
    /// left out. Returns the warnings naming the calls, for the response,
    /// the audit record and the CLI.
    fn settle_thread(thread: &mut Arc<Thread>, extends: &mut Option<Arc<Thread>>) -> Vec<String> {
        let abandoned = thread.abandoned_calls(&thread.pairing());
        Self::settle_thread_without(thread, extends, &abandoned)
    }

    /// [`App::settle_thread`] given the thread's abandoned calls.
    fn settle_thread_without(
        thread: &mut Arc<Thread>,
        extends: &mut Option<Arc<Thread>>,
        abandoned: &[(usize, usize)],
    ) -> Vec<String> {
        let mut warnings = crate::reduce::unknown_item_warnings(thread);
        if let Some((view, settled)) = thread.provider_view_without(abandoned) {
            *thread = Arc::new(view);
            // What the thread was known to extend, it may not now.
            *extends = None;
            warnings.extend(settled);
        }
        warnings
    }

    /// The engine for text `target`'s format carries for `model`, for one
    /// tenant's thread: the caches are the process's, seen through keys only
    /// this tenant (counts) and this thread (summaries) can hit.
    fn engine_parts(
        &self,
        model: &str,
        target: &Target,
        tenant: &str,
        thread_id: &str,
    ) -> EngineParts {
        let counter = counter_for(target.framing.tokenizer, model);
        let counter = match self.inner.calibrations.applied(tenant, model) {
            Some(applied) => Arc::new(crate::tokens::Calibrated::new(counter, applied)),
            None => counter,
        };
        EngineParts {
            counter,
            ledger: Arc::new(self.inner.ledger.scoped(tenant)),
            memo: self.inner.memo.scoped(&[tenant, thread_id]),
            summarizer: Arc::clone(&self.inner.summarizer),
            cancel: Call::current_cancel(),
            redactor: Arc::clone(&self.inner.redactor),
        }
    }

    /// Learns from the provider's `usage` reports on `previous` (the body
    /// the thread's last render sent) and brings the model's calibration up
    /// to date; warnings for reports not learned from. An estimated count
    /// is bounded by it, an exact one only predicts with it.
    async fn calibrate(
        &self,
        tenant: &str,
        model: &str,
        usage: &[crate::render::cache::ProviderUsage],
        previous: Option<&crate::render::prefix::PrefixTrace>,
    ) -> Vec<String> {
        let calibrations = &self.inner.calibrations;
        let warnings = calibrations.learn(tenant, model, usage, previous).await;
        calibrations.refresh(tenant, model).await;
        warnings
    }

    /// The lock of one tenant's thread (see `Inner::thread_locks`).
    async fn lock_thread(&self, tenant: &str, thread_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.thread_lock(tenant, thread_id).lock_owned().await
    }

    /// The thread's lock if nobody holds it.
    fn try_lock_thread(
        &self,
        tenant: &str,
        thread_id: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.thread_lock(tenant, thread_id).try_lock_owned().ok()
    }

    fn thread_lock(&self, tenant: &str, thread_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        // NUL cannot occur in a tenant id, so the key is unambiguous.
        let key = format!("{tenant}\0{thread_id}");
        self.inner.thread_locks.get(key.as_str())
    }

    /// The pipeline for `policy` and `model`: the core's reducers with the
    /// plugins' steps in their positions.
    fn reducers(&self, policy: &Policy, model: &str) -> Vec<Box<dyn crate::reduce::Reducer>> {
        let core = crate::reduce::default_reducers(policy);
        let all = if self.inner.plugins.is_empty() {
            core
        } else {
            crate::plugin::insert_plugins(core, &self.inner.plugins, model)
        };
        all.into_iter()
            .map(|r| Box::new(crate::telemetry::Traced(r)) as Box<dyn crate::reduce::Reducer>)
            .collect()
    }

    /// A plan's fingerprint: the core's, and with plugins, what they are
    /// and how they are set up (another plugin makes another plan).
    fn fingerprint(&self, core: String) -> String {
        if self.inner.plugins.is_empty() {
            return core;
        }
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(core.as_bytes());
        h.update(&self.inner.plugin_setup);
        hex::encode(h.finalize())
    }

    /// Forgets everything the process remembers of a thread: its state
    /// (see [`thread_state`]), and the scope of the content caches keyed by
    /// thread (the core's summaries and compressions, the LLM's answers).
    fn forget_thread(&self, tenant: &str, thread_id: &str) {
        self.inner.threads.forget(tenant, thread_id);
        self.inner.memo.forget(&[tenant, thread_id]);
        self.forget_summaries(tenant, thread_id);
    }

    /// Forgets what every thread's state and the content caches hold when
    /// the plan store's keys changed since the last call (a tenant
    /// crypto-shredded, a key rotated): nothing derived from content a
    /// deleted key protected is served from memory. Which tenant it was is
    /// not known here; the caches are only time.
    fn forget_if_keys_changed(&self) {
        let now = self.inner.plans.key_generation();
        let seen = &self.inner.key_generation;
        if seen.load(std::sync::atomic::Ordering::Acquire) == now {
            return;
        }
        // Recorded first: what calls running now put back as they end is
        // forgotten again once the last of them has (as for a deletion).
        self.inner.in_flight.everything_changed();
        self.forget_everything();
        // Stored last: a call that starts meanwhile clears again rather
        // than read what is being cleared.
        seen.store(now, std::sync::atomic::Ordering::Release);
    }

    /// Drops every thread's state and both content caches.
    fn forget_everything(&self) {
        self.inner.threads.clear();
        self.inner.memo.clear();
        self.forget_all_summaries();
    }
}

impl App {
    /// The plan the caller's last prompt was rendered from, when it reports
    /// how the task on it went (read before this call commits a new one).
    async fn outcome_basis(
        &self,
        outcome: Option<TaskOutcome>,
        tenant: &str,
        thread_id: &str,
    ) -> Option<Arc<crate::model::CompactionPlan>> {
        outcome?;
        self.current_plan(tenant, thread_id).await.ok().flatten()
    }
}

/// Records how the task on the caller's last prompt went, once the call
/// that reported it succeeded ([`App::outcome_basis`] read its plan).
fn report_outcome(
    outcome: Option<TaskOutcome>,
    basis: Option<&crate::model::CompactionPlan>,
    tenant: &str,
) {
    if let Some(o) = outcome {
        crate::telemetry::events::task_outcome(o.as_str(), basis, tenant);
    }
}

/// Each plugin's id and settings, as [`App::fingerprint`] hashes them.
fn plugin_setup(plugins: &[Arc<crate::plugin::LoadedPlugin>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in plugins {
        let s = p.settings();
        let part = serde_json::json!([p.id(), s.sha256, s.after, s.aggressiveness, s.config]);
        out.push(0);
        out.extend_from_slice(part.to_string().as_bytes());
    }
    out
}

/// A thread's validation error as the API's.
fn thread_error(e: crate::model::ThreadError) -> AppError {
    AppError::invalid(e.field_path(), e.to_string())
}

/// The parts of a core [`Engine`], owned so that they can move into
/// blocking tasks.
#[derive(Clone)]
struct EngineParts {
    counter: Arc<dyn TokenCounter>,
    ledger: Arc<TokenLedger>,
    memo: Memo,
    summarizer: Arc<dyn Summarizer + Send + Sync>,
    cancel: Arc<Cancel>,
    redactor: Arc<Redactor>,
}

impl EngineParts {
    fn engine(&self) -> Engine<'_> {
        Engine {
            cancel: &self.cancel,
            redactor: &self.redactor,
            counter: self.counter.as_ref(),
            ledger: &self.ledger,
            summarizer: self.summarizer.as_ref(),
            memo: &self.memo,
        }
    }
}

/// A use case as the caller's credential sees it: what it needs, checked
/// before any input is looked at, so an unauthorized caller learns nothing
/// about what a valid request would look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseCase {
    /// Commit a plan.
    Compact,
    /// Render through a plan.
    Render {
        /// Compact in the same call.
        compact_first: bool,
        /// Inject artifacts.
        rehydrates: bool,
    },
    /// Read an artifact back.
    Rehydrate,
    /// Erase a thread.
    DeleteThread,
    /// Replace a thread's plan with an empty one.
    ResetPlan,
    /// Say where a text went under the plan.
    Explain {
        /// Decrypt and search artifact contents: a read, like Rehydrate.
        search_artifacts: bool,
    },
    /// Search what the plan evicts.
    SearchContext,
}

impl UseCase {
    /// The permissions it needs.
    pub fn permissions(self) -> Vec<Permission> {
        match self {
            UseCase::Compact => vec![Permission::Compact],
            UseCase::Render {
                compact_first,
                rehydrates,
            } => {
                let mut needs = vec![Permission::Render];
                if compact_first {
                    needs.push(Permission::Compact);
                }
                if rehydrates {
                    needs.push(Permission::Rehydrate);
                }
                needs
            }
            UseCase::Rehydrate => vec![Permission::Rehydrate],
            UseCase::DeleteThread => vec![Permission::Delete],
            UseCase::ResetPlan => vec![Permission::Compact],
            // Who may render through the plan may ask what it did; artifact
            // contents are still gated per sensitivity.
            UseCase::Explain { search_artifacts } => {
                let mut needs = vec![Permission::Render];
                // Asking whether a text occurs in an artifact, many times
                // over, reads it: the same permission as reading it back.
                if search_artifacts {
                    needs.push(Permission::Rehydrate);
                }
                needs
            }
            // Passages are compacted content read back: as Rehydrate, and
            // only for who may render the thread.
            UseCase::SearchContext => vec![Permission::Render, Permission::Rehydrate],
        }
    }

    /// `PermissionDenied` unless `ctx` holds every permission, and a tenant
    /// id named in the request body (if any) is the credential's own.
    pub fn authorize(self, ctx: &SecurityContext, body_tenant: Option<&str>) -> Result<()> {
        for p in self.permissions() {
            ctx.require(&p)?;
        }
        ctx.check_body_tenant(body_tenant.unwrap_or(""))?;
        Ok(())
    }
}

/// Current determinism metadata by tool call id, as a request reports it.
pub type Observations = BTreeMap<String, DeterminismMetadata>;

/// Tool schemas, shared between the compaction and the render of one call.
pub type Tools = Arc<Vec<ToolSchema>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn said(id: &str) -> Arc<Message> {
        Arc::new(
            serde_json::from_value(serde_json::json!({"id": id, "role": "user", "content": id}))
                .expect("a message"),
        )
    }

    fn grown(from: &Arc<Thread>, ids: &[&str]) -> Arc<Thread> {
        let mut t = Thread::clone(from);
        t.messages.extend(ids.iter().map(|id| said(id)));
        Arc::new(t)
    }

    /// A session's turns validate what they append against the state the
    /// last turn left; a bad append is refused as in full and leaves that
    /// state for the next try.
    #[test]
    fn a_sessions_turns_validate_their_appends() {
        let app = App::offline(Defaults::default());
        let validated = &app.inner.threads;
        let base = Arc::new(Thread::new("t", vec![]));
        let base = grown(&base, &["a", "b"]);
        app.validate_thread("acme", &base, None).expect("valid");
        let second = grown(&base, &["c"]);
        app.validate_thread("acme", &second, Some(&base))
            .expect("valid");
        // The base's state moved on to the thread that extends it.
        assert_eq!(validated.take_validated("acme", &base), None);
        let state = validated
            .take_validated("acme", &second)
            .expect("validated")
            .expect("a state");
        assert_eq!(state, second.validation());
        // Another tenant's thread of the same id is another thread.
        assert_eq!(validated.take_validated("globex", &second), None);
        validated.keep_validated("acme", &second, Some(state));
        let bad = grown(&second, &["a"]);
        let refused = app
            .validate_thread("acme", &bad, Some(&second))
            .expect_err("a duplicate id");
        let whole = bad.validate(&app.inner.limits).expect_err("a duplicate id");
        assert_eq!(refused.to_string(), thread_error(whole).to_string());
        let third = grown(&second, &["d"]);
        app.validate_thread("acme", &third, Some(&second))
            .expect("valid");
        assert_eq!(
            validated.take_validated("acme", &third),
            Some(Some(third.validation())),
            "the failed append left the state of its base"
        );
    }
}
