//! LLM summaries over a compaction. The core compacts with the extractive
//! summarizer (pure, fast, deterministic); this upgrades the summaries a
//! compaction created by asking the configured endpoint, then recounts
//! exactly. Every failure keeps the extractive summary, so a dead endpoint
//! costs an upgrade, never a plan:
//!
//! 1. what is sent is redacted, and `restricted` messages are left out
//!    unless the settings allow them;
//! 2. the answer is validated, gated against the extractive summary (what
//!    it lacks is merged in) and fitted to the room the budget leaves;
//! 3. a result that would put the request over its target is not used;
//! 4. answers are cached per thread, in memory and encrypted in the
//!    artifact store, keyed by everything that shaped them.
//!
//! In background mode Compact commits the extractive plan and returns; the
//! upgrade runs later and commits a new version (compare-and-swap on the
//! version it upgraded, so it never overwrites a newer plan).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::cache::BoundedCache;
use crate::llm::{LlmError, LlmSummarizer, SpanInput, SummaryMode};
use crate::model::{
    message_digest, CompactionPlan, Message, Sensitivity, StructuredSummary, Thread,
    SUMMARY_SCHEMA_VERSION,
};
use crate::reduce::{Compaction, Policy};
use crate::runtime::{blocking, lock, now_unix_ms};
use crate::store::{keyed_artifact_id, ArtifactMeta, StoreError};
use crate::summarize::llm::gate;
use tracing::Instrument as _;

use super::{App, AppError, EngineParts};

/// After a failure that says the endpoint is unwell (timeout, transport,
/// 429, 5xx), summaries are not asked for this long: every compaction in
/// between would otherwise wait out the same timeouts.
const COOL_DOWN: Duration = Duration::from_secs(30);

/// Domain of the summary cache's artifact ids.
const CACHE_DOMAIN: &str = "compactd summary cache v1";

/// The LLM summarizer with its cache, its circuit breaker and its
/// background queue. One per process.
pub struct LlmSummaries {
    llm: LlmSummarizer,
    /// Answers by `tenant\0thread\0key`.
    memory: BoundedCache<String, StructuredSummary>,
    /// Unix ms until which no request is made.
    paused_until: AtomicU64,
    /// Background jobs waiting or running (`queue_capacity` permits).
    slots: Arc<Semaphore>,
    /// Background jobs running (`concurrency` permits).
    running: Arc<Semaphore>,
    /// Threads with a background job queued: one per thread at a time.
    queued: Mutex<HashSet<String>>,
    /// Summaries (by tenant, thread and span) the endpoint was asked for
    /// and that stayed extractive (a failure, or a result over the target):
    /// not asked again while the plan carries them. Bounded; forgetting
    /// costs one more attempt.
    tried: Mutex<HashSet<u64>>,
}

impl std::fmt::Debug for LlmSummaries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSummaries")
            .field("llm", &self.llm)
            .finish_non_exhaustive()
    }
}

impl LlmSummaries {
    /// Around a configured summarizer.
    pub fn new(llm: LlmSummarizer) -> Self {
        let s = llm.settings();
        LlmSummaries {
            memory: BoundedCache::new(s.cache_max_bytes),
            slots: Arc::new(Semaphore::new(s.queue_capacity)),
            running: Arc::new(Semaphore::new(s.concurrency)),
            paused_until: AtomicU64::new(0),
            queued: Mutex::new(HashSet::new()),
            tried: Mutex::new(HashSet::new()),
            llm,
        }
    }

    /// How it is configured.
    pub fn settings(&self) -> &crate::llm::SummarizerSettings {
        self.llm.settings()
    }

    fn background(&self) -> bool {
        self.llm.settings().mode == SummaryMode::Background
    }
}

/// What an upgrade needs besides the compaction.
#[derive(Clone)]
pub(super) struct UpgradeInput {
    pub tenant: String,
    pub thread: Arc<Thread>,
    pub policy: Arc<Policy>,
    pub parts: EngineParts,
    /// The plan the compaction was made on top of: its summaries are the
    /// priors of the new ones.
    pub previous: Option<Arc<CompactionPlan>>,
}

/// What a span's LLM summary is written from: the previous plan's
/// summaries inside the span (its priors), and the messages they do not
/// cover, redacted (restricted ones only when the settings allow), with the
/// highest sensitivity sent.
fn material<'a>(
    llm: &LlmSummaries,
    input: &'a UpgradeInput,
    record: &crate::model::SummarizationRecord,
) -> (
    Vec<&'a StructuredSummary>,
    Vec<Cow<'a, Message>>,
    Sensitivity,
) {
    let span: HashSet<&str> = record.span.message_ids.iter().map(String::as_str).collect();
    let inside: Vec<&crate::model::SummarizationRecord> = input
        .previous
        .iter()
        .flat_map(|p| &p.summarizations)
        .filter(|p| {
            p.span
                .message_ids
                .iter()
                .all(|id| span.contains(id.as_str()))
        })
        .collect();
    let prior: Vec<&StructuredSummary> = inside.iter().map(|p| &*p.summary).collect();
    let covered: HashSet<&str> = inside
        .iter()
        .flat_map(|p| p.span.message_ids.iter().map(String::as_str))
        .collect();
    let allow_restricted = llm.llm.settings().allow_restricted;
    let redactor = &input.parts.redactor;
    let mut sensitivity = Sensitivity::Public;
    let sendable = input
        .thread
        .messages
        .iter()
        .filter(|m| span.contains(m.id.as_str()) && !covered.contains(m.id.as_str()))
        .filter(|m| allow_restricted || m.metadata.sensitivity != Sensitivity::Restricted)
        .map(|m| {
            sensitivity = sensitivity.max(m.metadata.sensitivity);
            redactor.redact_message(m)
        })
        .collect();
    (prior, sendable, sensitivity)
}

/// Asks the endpoint for one summary, recording the outcome and latency.
async fn ask(
    llm: &LlmSummaries,
    input: &UpgradeInput,
    record: &crate::model::SummarizationRecord,
    messages: &[&Message],
    prior: &[&StructuredSummary],
    cap: usize,
) -> Result<StructuredSummary, LlmError> {
    let started = std::time::Instant::now();
    let asked = llm
        .llm
        .summarize(&SpanInput {
            messages,
            prior,
            template: &record.summary,
            max_chars: cap,
            style: style_of(llm, input),
        })
        .await;
    let outcome = asked.as_ref().map_or_else(LlmError::kind, |_| "ok".into());
    let model = llm.llm.settings().model.as_str();
    crate::telemetry::metrics().summarizer(model, &outcome, Some(started.elapsed().as_secs_f64()));
    tracing::Span::current().record("compactd.outcome", outcome.as_str());
    let (answer, stats) = asked?;
    tracing::debug!(
        requests = crate::telemetry::int(stats.requests),
        retries = crate::telemetry::int(stats.retries),
        shortened = crate::telemetry::int(stats.shortened),
        "LLM summary written"
    );
    Ok(answer)
}

/// An LLM summary that failed: the span is not tried again, the seeds'
/// error event names what stood in, the report warns. Returns whether the
/// summarizer is paused (an outage: timeouts, transport, 429 and 5xx).
fn summary_failed(
    llm: &LlmSummaries,
    input: &UpgradeInput,
    c: &mut Compaction,
    i: usize,
    e: &LlmError,
) -> bool {
    let span = &c.plan.summarizations[i].span;
    llm.mark_tried(&input.tenant, &input.thread.id, span);
    tracing::warn!(
        target: crate::telemetry::EVENTS,
        error_type = %format_args!("summarizer_{}", e.kind()),
        fallback = "extractive summary",
        first_message_id = %span.start_message_id(),
        last_message_id = %span.end_message_id(),
        "compact.error"
    );
    c.report.warnings.push(format!(
        "summarize: the LLM summary of {}..{} failed ({}); the extractive summary stands",
        span.start_message_id(),
        span.end_message_id(),
        e.kind()
    ));
    let outage = matches!(
        e,
        LlmError::Timeout
            | LlmError::Transport(_)
            | LlmError::Status {
                status: 429 | 500..=599
            }
    );
    if outage {
        llm.paused_until.store(
            now_unix_ms() + COOL_DOWN.as_millis() as u64,
            Ordering::Relaxed,
        );
    }
    outage
}

/// Most spans remembered as tried; the set is cleared beyond it.
const TRIED_MAX: usize = 100_000;

/// The identity of a span of a tenant's thread in `tried`.
fn span_key(tenant: &str, thread: &str, span: &crate::model::SpanReference) -> u64 {
    let mut h = Sha256::new();
    for part in [tenant, thread]
        .into_iter()
        .chain(span.message_ids.iter().map(String::as_str))
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

impl LlmSummaries {
    /// The summaries of `c` to ask for: extractive ones not tried before.
    /// A summary carried from the previous plan is one too when its upgrade
    /// never happened (a background job overtaken by a newer compaction).
    fn candidates(&self, c: &Compaction, tenant: &str, thread: &str) -> Vec<usize> {
        let tried = lock(&self.tried);
        c.plan
            .summarizations
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.summarizer_id.is_empty() && !tried.contains(&span_key(tenant, thread, &r.span))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Remembers that a span stayed extractive after it was asked for.
    fn mark_tried(&self, tenant: &str, thread: &str, span: &crate::model::SpanReference) {
        let mut tried = lock(&self.tried);
        if tried.len() >= TRIED_MAX {
            tried.clear();
        }
        tried.insert(span_key(tenant, thread, span));
    }
}

impl App {
    /// The LLM summaries, when configured.
    pub fn llm_summaries(&self) -> Option<&Arc<LlmSummaries>> {
        self.inner.llm.as_ref()
    }

    /// Whether this compaction's summaries are upgraded before the commit.
    pub(super) fn upgrades_now(&self) -> bool {
        self.inner.llm.as_ref().is_some_and(|l| !l.background())
    }

    /// Upgrades the summaries `c` created (see the module doc); returns the
    /// compaction, its events added to the report's warnings, and whether
    /// any summary was upgraded. Fails only when the recount cannot run.
    pub(super) async fn upgrade_summaries(
        &self,
        input: &UpgradeInput,
        c: Compaction,
    ) -> Result<(Compaction, bool), AppError> {
        let Some(llm) = self.inner.llm.clone() else {
            return Ok((c, false));
        };
        let which = llm.candidates(&c, &input.tenant, &input.thread.id);
        if which.is_empty() {
            return Ok((c, false));
        }
        let mut c = c;
        let paused = llm.paused_until.load(Ordering::Relaxed);
        if paused > now_unix_ms() {
            c.report.warnings.push(format!(
                "summarize: the LLM summarizer is paused after failures; {} summaries stay extractive",
                which.len()
            ));
            return Ok((c, false));
        }
        let before = c.plan.compacted_token_count;
        let target = c.report.budget.target;
        // The room the budget leaves, shared by the new summaries (≈3
        // bytes per token, erring small; the recount below is exact).
        let slack = target.saturating_sub(before) as usize / which.len();
        let max_cap = input.policy.summary_max_tokens as usize * 3;
        let originals = c.plan.summarizations.clone();
        let mut upgraded = 0usize;
        for &i in &which {
            let record = &c.plan.summarizations[i];
            // A tenth under the extractive summary's own size: the refill
            // fills the target, so the room is what this summary takes, and
            // the same bytes of model prose can take a few more tokens.
            let own = record.summary.render_as_message().len() * 9 / 10;
            let cap = (own + slack * 3).min(max_cap).max(own);
            match self.llm_summary(&llm, input, i, &c, cap).await {
                Ok(Some(summary)) => {
                    let r = &mut c.plan.summarizations[i];
                    r.summary = summary.into();
                    r.summarizer_id = llm.llm.id(style_of(&llm, input));
                    upgraded += 1;
                }
                Ok(None) => {
                    llm.mark_tried(
                        &input.tenant,
                        &input.thread.id,
                        &c.plan.summarizations[i].span,
                    );
                }
                Err(e) => {
                    if summary_failed(&llm, input, &mut c, i, &e) {
                        break;
                    }
                }
            }
        }
        if upgraded == 0 {
            return Ok((c, false));
        }
        // Recount exactly; a result over the target (or over what the
        // extractive plan used, if that was already above it) is not used.
        let limit = target.max(before);
        let c = self.rebind(input, c).await?;
        if c.plan.compacted_token_count > limit {
            return Ok((
                self.keep_extractive(&llm, input, c, originals, limit)
                    .await?,
                false,
            ));
        }
        Ok((c, true))
    }

    /// The LLM summaries do not fit `limit`: the extractive ones stand, and
    /// the spans are not tried again.
    async fn keep_extractive(
        &self,
        llm: &LlmSummaries,
        input: &UpgradeInput,
        mut c: Compaction,
        originals: crate::model::Records<crate::model::SummarizationRecord>,
        limit: u32,
    ) -> Result<Compaction, AppError> {
        let mut warnings = std::mem::take(&mut c.report.warnings);
        warnings.push(format!(
            "summarize: the LLM summaries would need {} tokens, over the target {limit}; the extractive summaries stand",
            c.plan.compacted_token_count
        ));
        for r in &c.plan.summarizations {
            if !r.summarizer_id.is_empty() {
                llm.mark_tried(&input.tenant, &input.thread.id, &r.span);
            }
        }
        c.plan.summarizations = originals;
        let mut c = self.rebind(input, c).await?;
        c.report.warnings = warnings;
        Ok(c)
    }

    /// Recounts the summaries' messages exactly (artifact ids are bound already).
    async fn rebind(&self, input: &UpgradeInput, c: Compaction) -> Result<Compaction, AppError> {
        let (thread, policy, parts) = (
            Arc::clone(&input.thread),
            Arc::clone(&input.policy),
            input.parts.clone(),
        );
        blocking(move || {
            let mut c = c;
            c.bind(&BTreeMap::new(), &thread, &policy.render, &parts.engine());
            c
        })
        .await
        .map_err(AppError::from)
    }

    /// One summary from the endpoint (or the cache), gated and redacted;
    /// `None` when there is nothing that may be sent.
    async fn llm_summary(
        &self,
        llm: &LlmSummaries,
        input: &UpgradeInput,
        i: usize,
        c: &Compaction,
        cap: usize,
    ) -> Result<Option<StructuredSummary>, LlmError> {
        let record = &c.plan.summarizations[i];
        let (prior, sendable, sensitivity) = material(llm, input, record);
        let redactor = &input.parts.redactor;
        if sendable.is_empty() && prior.is_empty() {
            return Ok(None);
        }
        let messages: Vec<&Message> = sendable.iter().map(AsRef::as_ref).collect();
        let key = cache_key(
            llm,
            style_of(llm, input),
            redactor.id(),
            cap,
            &prior,
            &messages,
        );
        let model = llm.llm.settings().model.as_str();
        let metrics = crate::telemetry::metrics();
        let span = tracing::info_span!(
            "compactd.summarize",
            otel.name = "summarize span",
            compactd.first_message_id = %record.span.start_message_id(),
            compactd.last_message_id = %record.span.end_message_id(),
            compactd.messages_sent = crate::telemetry::int(messages.len()),
            compactd.style = style_of(llm, input).as_str(),
            compactd.cached = tracing::field::Empty,
            compactd.outcome = tracing::field::Empty,
        );
        let cached = self.cached(llm, input, &key).instrument(span.clone()).await;
        metrics.cache("summary", cached.is_some());
        span.record("compactd.cached", cached.is_some());
        let answer = match cached {
            Some(a) => {
                metrics.summarizer(model, "cached", None);
                span.record("compactd.outcome", "cached");
                a
            }
            None => {
                let answer = ask(llm, input, record, &messages, &prior, cap)
                    .instrument(span.clone())
                    .await?;
                self.remember(llm, input, &key, &answer, sensitivity, record)
                    .instrument(span.clone())
                    .await;
                answer
            }
        };
        let (mut summary, report) = gate(answer, &record.summary, cap);
        if report.merged > 0 {
            tracing::debug!(
                merged = crate::telemetry::int(report.merged),
                "quality gate merged extractive entries"
            );
        }
        redactor.redact_summary(&mut summary);
        Ok(Some(summary))
    }

    /// A cached answer: memory first, then the store.
    async fn cached(
        &self,
        llm: &LlmSummaries,
        input: &UpgradeInput,
        key: &str,
    ) -> Option<StructuredSummary> {
        let mem_key = format!("{}\0{}\0{key}", input.tenant, input.thread.id);
        if let Some(s) = llm.memory.get(&mem_key) {
            return Some(s);
        }
        let id = keyed_artifact_id(CACHE_DOMAIN, key.as_bytes());
        match self
            .inner
            .artifacts
            .get(&input.tenant, &input.thread.id, &id)
            .await
        {
            Ok((_, bytes)) => match serde_json::from_slice::<StructuredSummary>(&bytes) {
                Ok(s) => {
                    llm.memory.insert(mem_key, s.clone());
                    Some(s)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a cached summary does not parse; asking again");
                    None
                }
            },
            Err(StoreError::NotFound) => None,
            Err(e) => {
                tracing::warn!(error = %e, "summary cache read failed; asking the endpoint");
                None
            }
        }
    }

    /// Caches an answer (best effort: a failed write costs a later request).
    async fn remember(
        &self,
        llm: &LlmSummaries,
        input: &UpgradeInput,
        key: &str,
        answer: &StructuredSummary,
        sensitivity: Sensitivity,
        record: &crate::model::SummarizationRecord,
    ) {
        let mem_key = format!("{}\0{}\0{key}", input.tenant, input.thread.id);
        llm.memory.insert(mem_key, answer.clone());
        let Ok(bytes) = serde_json::to_vec(answer) else {
            return;
        };
        let meta = ArtifactMeta {
            tenant: input.tenant.clone(),
            thread_id: input.thread.id.clone(),
            created_at_unix_ms: now_unix_ms(),
            ttl_seconds: self.artifact_ttl(),
            sensitivity,
            key_id: None,
            content_hash: String::new(),
            size_bytes: bytes.len() as u64,
            message_ids: record.span.message_ids.clone(),
        };
        let id = keyed_artifact_id(CACHE_DOMAIN, key.as_bytes());
        if let Err(e) = self.inner.artifacts.put_keyed(&meta, &id, &bytes).await {
            tracing::warn!(error = %e, "summary cache write failed");
        }
    }

    /// Queues a background upgrade of the plan committed as `version`
    /// (one per thread at a time; when the queue is full the extractive
    /// summaries simply stay).
    pub(super) fn schedule_upgrade(
        &self,
        input: UpgradeInput,
        c: Compaction,
        version: u64,
    ) -> bool {
        let Some(llm) = self.inner.llm.clone() else {
            return false;
        };
        if !llm.background()
            || llm
                .candidates(&c, &input.tenant, &input.thread.id)
                .is_empty()
        {
            return false;
        }
        let thread_key = format!("{}\0{}", input.tenant, input.thread.id);
        let Ok(slot) = Arc::clone(&llm.slots).try_acquire_owned() else {
            tracing::warn!("background summary queue full; the extractive summaries stay");
            return false;
        };
        if !lock(&llm.queued).insert(thread_key.clone()) {
            return false;
        }
        let app = self.clone();
        // Its own trace root, linked to the call that scheduled it.
        let span = tracing::info_span!(
            parent: None,
            "compactd.background_summaries",
            otel.name = "background summaries",
            compactd.tenant = %crate::telemetry::tenant_label(&input.tenant),
            compactd.plan_version = crate::telemetry::int(version),
        );
        span.follows_from(tracing::Span::current());
        // Its answers are cached for the thread: it holds the call that
        // scheduled it, so a deletion since that call began is forgotten
        // again when it ends.
        let running = app.still_running();
        let task = async move {
            let _running = running;
            let _slot = slot;
            let _run = Arc::clone(&llm.running).acquire_owned().await;
            lock(&llm.queued).remove(&thread_key);
            let (c, upgraded) = match app.upgrade_summaries(&input, c).await {
                Ok(done) => done,
                Err(e) => {
                    tracing::warn!(error = %e, "background LLM summaries failed");
                    return;
                }
            };
            if !upgraded {
                return;
            }
            let _thread = app.lock_thread(&input.tenant, &input.thread.id).await;
            match app
                .inner
                .plans
                .commit(&input.tenant, &input.thread.id, &c.plan, version)
                .await
            {
                Ok(v) => tracing::info!(version = v, "committed background LLM summaries"),
                Err(StoreError::Conflict { .. }) => {
                    tracing::info!("the plan moved on; background LLM summaries dropped")
                }
                Err(e) => tracing::warn!(error = %e, "background LLM summaries not committed"),
            }
        };
        tokio::spawn(task.instrument(span));
        true
    }

    /// Waits until the background queue is empty (at shutdown), at most `timeout`.
    pub async fn drain_summaries(&self, timeout: Duration) -> bool {
        let Some(llm) = self.inner.llm.clone() else {
            return true;
        };
        let all = llm.llm.settings().queue_capacity as u32;
        tokio::time::timeout(timeout, llm.slots.acquire_many(all))
            .await
            .is_ok_and(|p| p.is_ok())
    }

    /// Forgets a thread's cached answers (its artifacts go with the thread).
    pub(super) fn forget_summaries(&self, tenant: &str, thread_id: &str) {
        self.forget_summaries_under(&format!("{tenant}\0{thread_id}\0"));
    }

    /// Forgets every cached answer (see [`App::forget_if_keys_changed`]).
    pub(super) fn forget_all_summaries(&self) {
        self.forget_summaries_under("");
    }

    fn forget_summaries_under(&self, prefix: &str) {
        if let Some(llm) = &self.inner.llm {
            llm.memory.retain(|k| !k.starts_with(prefix));
        }
    }
}

/// The request's style, else the configured one.
fn style_of(llm: &LlmSummaries, input: &UpgradeInput) -> crate::summarize::llm::Style {
    input
        .policy
        .summary_style
        .unwrap_or(llm.llm.settings().style)
}

/// Everything that shaped an answer: the summarizer (model, style, prompt
/// hash), the summary schema, how the endpoint is asked, the redaction
/// rules, the size asked for, the priors and the exact messages sent.
fn cache_key(
    llm: &LlmSummaries,
    style: crate::summarize::llm::Style,
    redactor: &str,
    cap: usize,
    prior: &[&StructuredSummary],
    messages: &[&Message],
) -> String {
    let s = llm.llm.settings();
    let mut h = Sha256::new();
    let mut part = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(llm.llm.id(style).as_bytes());
    part(SUMMARY_SCHEMA_VERSION.as_bytes());
    part(format!("{:?}", s.response_format).as_bytes());
    part(&s.max_output_tokens.to_le_bytes());
    part(&s.context_tokens.to_le_bytes());
    part(&[u8::from(s.allow_restricted)]);
    part(redactor.as_bytes());
    part(&(cap as u64).to_le_bytes());
    for p in prior {
        part(&serde_json::to_vec(p).unwrap_or_default());
    }
    for m in messages {
        part(&message_digest(m).to_le_bytes());
    }
    hex::encode(h.finalize())
}
