//! `CompactionService`: thin handlers over the core and the stores.
//!
//! Every handler has one shape: security context (put into the request
//! extensions by the auth layer) → permission and body-tenant check →
//! convert and validate → core (CPU-bound work on the blocking pool) → map.
//! Authorization comes before validation so an unauthorized caller learns
//! nothing about what a valid request would look like.
//!
//! Compact is a compare-and-swap: artifacts are written first, the plan is
//! committed only if every write succeeded and the version did not move, and
//! the artifacts are deleted again when the commit does not happen — a
//! committed plan never points at an unwritten artifact.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tonic::{Request, Response, Status};

use crate::model::{
    CompactionPlan, DeterminismMetadata, Sensitivity, Thread, ThreadLimits, ToolSchema,
    PLAN_FORMAT_VERSION, SUMMARY_RENDER_VERSION, SUMMARY_SCHEMA_VERSION,
};
use crate::reduce::{
    compact, referenced_artifacts, BudgetReport, CompactRequest, Engine, Memo, Policy,
    ReducerReport,
};
use crate::render::{
    anthropic, openai, render, Rehydrated, RenderInput, RenderedMessage, RequestCounter,
    RequestTokens, RENDER_FORMAT_VERSION,
};
use crate::security::{Permission, SecurityContext};
use crate::store::{ArtifactMeta, ArtifactStore, PlanStore, StoredPlan};
use crate::summarize::{ExtractiveSummarizer, Summarizer};
use crate::tokens::{counter_for_model, TokenCounter, TokenLedger};

use super::convert;
use super::error::{store_error, ApiError};
use super::pb;
use super::pb::compaction_service_server::CompactionService;
use super::ServerSettings;

/// Fully qualified gRPC name of the service (health status key).
pub const SERVICE_NAME: &str = "compactd.v1.CompactionService";

type Result<T> = std::result::Result<T, ApiError>;

/// The service implementation. Cheap to clone; all state is shared.
#[derive(Clone)]
pub struct CompactionApi {
    inner: Arc<Inner>,
}

struct Inner {
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    /// One ledger for the process: agents resend the same thread every turn.
    ledger: Arc<TokenLedger>,
    /// Summaries and compressions, for the same reason.
    memo: Arc<Memo>,
    policy: Policy,
    default_model: String,
    default_max_input_tokens: u32,
    limits: ThreadLimits,
}

impl std::fmt::Debug for CompactionApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionApi")
            .field("default_model", &self.inner.default_model)
            .finish_non_exhaustive()
    }
}

/// A Compact call after conversion: everything owned, ready for the blocking pool.
#[derive(Clone)]
struct CompactInput {
    thread: Arc<Thread>,
    policy: Arc<Policy>,
    model: String,
    max_input_tokens: u32,
    system: Option<String>,
    tools: Arc<Vec<ToolSchema>>,
    expected_version: Option<u64>,
    observations: BTreeMap<String, DeterminismMetadata>,
    skip_aggressive: bool,
}

/// What Compact did.
struct CompactOutcome {
    plan: CompactionPlan,
    tokens_before: u32,
    tokens_after: u32,
    per_reducer: Vec<ReducerReport>,
    budget: Option<BudgetReport>,
    warnings: Vec<String>,
    reused: bool,
    triggered: bool,
    new_artifact_ids: Vec<String>,
}

impl CompactOutcome {
    fn to_pb(&self) -> pb::CompactResponse {
        pb::CompactResponse {
            plan: Some(convert::plan_to_pb(&self.plan)),
            version: self.plan.version,
            tokens_before: self.tokens_before,
            tokens_after: self.tokens_after,
            per_reducer: convert::reducers_to_pb(&self.per_reducer),
            budget: self.budget.as_ref().map(convert::budget_to_pb),
            warnings: self.warnings.clone(),
            reused: self.reused,
            triggered: self.triggered,
            new_artifact_ids: self.new_artifact_ids.clone(),
        }
    }
}

fn context<T>(req: &Request<T>) -> Result<SecurityContext> {
    req.extensions()
        .get::<SecurityContext>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthenticated("no authenticated caller".into()))
}

fn authorize(ctx: &SecurityContext, needs: &[Permission], body_tenant: Option<&str>) -> Result<()> {
    for p in needs {
        ctx.require(p)?;
    }
    ctx.check_body_tenant(body_tenant.unwrap_or(""))?;
    Ok(())
}

/// Runs CPU-bound core work on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("core task failed: {e}")))?
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl CompactInput {
    /// The core request for these inputs (one place, so the reuse check and
    /// the compaction can never disagree on what they fingerprint).
    fn request<'a>(
        &'a self,
        previous: Option<&'a CompactionPlan>,
        limits: ThreadLimits,
    ) -> CompactRequest<'a> {
        CompactRequest {
            thread: &self.thread,
            policy: &self.policy,
            max_input_tokens: self.max_input_tokens,
            system: self.system.as_deref(),
            tools: &self.tools,
            previous,
            observations: &self.observations,
            skip_aggressive: self.skip_aggressive,
            limits,
        }
    }
}

/// The process-wide parts of a core [`Engine`], owned so that they can move
/// into blocking tasks.
#[derive(Clone)]
struct EngineParts {
    counter: Arc<dyn TokenCounter>,
    ledger: Arc<TokenLedger>,
    memo: Arc<Memo>,
}

impl EngineParts {
    fn engine(&self) -> Engine<'_> {
        Engine {
            counter: self.counter.as_ref(),
            ledger: &self.ledger,
            summarizer: &ExtractiveSummarizer,
            memo: &self.memo,
        }
    }
}

impl CompactionApi {
    /// A service over the given stores, with the settings' defaults.
    pub fn new(
        settings: &ServerSettings,
        plans: Arc<dyn PlanStore>,
        artifacts: Arc<dyn ArtifactStore>,
    ) -> Self {
        CompactionApi {
            inner: Arc::new(Inner {
                plans,
                artifacts,
                ledger: Arc::new(TokenLedger::new(settings.ledger_max_entries)),
                memo: Arc::new(Memo::default()),
                policy: settings.policy.clone(),
                default_model: settings.default_model.clone(),
                default_max_input_tokens: settings.default_max_input_tokens,
                limits: ThreadLimits::default(),
            }),
        }
    }

    fn engine_parts(&self, model: &str) -> EngineParts {
        EngineParts {
            counter: counter_for_model(model),
            ledger: Arc::clone(&self.inner.ledger),
            memo: Arc::clone(&self.inner.memo),
        }
    }

    fn model(&self, requested: String) -> String {
        if requested.is_empty() {
            self.inner.default_model.clone()
        } else {
            requested
        }
    }

    /// Converts and validates the thread; errors name `thread.…`.
    fn thread(&self, t: Option<pb::Thread>) -> Result<Thread> {
        let thread = convert::thread_from_pb(t, "thread")?;
        thread
            .validate(&self.inner.limits)
            .map_err(|e| ApiError::InvalidArgument {
                field: e.field_path(),
                message: e.to_string(),
            })?;
        Ok(thread)
    }

    fn policy(&self, o: Option<pb::PolicyOverrides>) -> Result<Policy> {
        let p = convert::apply_overrides(&self.inner.policy, o)?;
        p.validate().map_err(|e| ApiError::InvalidArgument {
            field: e.field,
            message: e.reason,
        })?;
        Ok(p)
    }

    async fn current_plan(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>> {
        self.inner
            .plans
            .get(tenant, thread_id)
            .await
            .map_err(|e| plan_store_error(e, "thread.id"))
    }

    /// Load → (reuse | compact → write artifacts → bind → verify → commit).
    async fn compact_and_commit(
        &self,
        tenant: &str,
        input: CompactInput,
    ) -> Result<CompactOutcome> {
        let current = self.current_plan(tenant, &input.thread.id).await?;
        let current_version = current.as_ref().map_or(0, |s| s.version);
        if let Some(expected) = input.expected_version {
            if expected != current_version {
                return Err(ApiError::VersionConflict {
                    expected,
                    current: current_version,
                });
            }
        }
        let parts = self.engine_parts(&input.model);
        let limits = self.inner.limits;
        let previous = current.map(|s| {
            let mut plan = s.plan;
            plan.version = s.version;
            plan
        });
        if let Some(prev) = &previous {
            let fingerprint =
                crate::reduce::request_fingerprint(&input.request(None, limits), &parts.engine());
            if prev.fingerprint == fingerprint {
                return Ok(reused(prev.clone()));
            }
        }

        let (input_c, parts_c, prev) = (input.clone(), parts.clone(), previous.clone());
        let compaction = blocking(move || {
            compact(&input_c.request(prev.as_ref(), limits), &parts_c.engine())
                .map_err(ApiError::from)
        })
        .await?;
        if let Some(prev) = previous {
            if prev.fingerprint == compaction.plan.fingerprint {
                return Ok(reused(prev));
            }
        }

        // Write every artifact before the plan that points at them.
        let mut written: Vec<String> = Vec::with_capacity(compaction.pending.len());
        let mut ids = BTreeMap::new();
        let created = now_unix_ms();
        for a in &compaction.pending {
            let meta = ArtifactMeta {
                tenant: tenant.to_string(),
                thread_id: input.thread.id.clone(),
                created_at_unix_ms: created,
                ttl_seconds: None,
                sensitivity: a.sensitivity,
                key_id: None,
                content_hash: a.content_hash.clone(),
                size_bytes: a.content.len() as u64,
                message_ids: a.message_ids.clone(),
            };
            match self.inner.artifacts.put(&meta, a.content.as_bytes()).await {
                Ok(id) => {
                    ids.insert(a.placeholder.clone(), id.clone());
                    written.push(id);
                }
                Err(e) => {
                    self.delete_artifacts(tenant, &input.thread.id, &written)
                        .await;
                    return Err(match store_error(e, "artifact") {
                        ApiError::NotFound(_) => {
                            ApiError::Internal("artifact store rejected a write".into())
                        }
                        other => other,
                    });
                }
            }
        }

        let mut compaction = compaction;
        let hard_limit = compaction.report.budget.hard_limit;
        let (thread, policy) = (Arc::clone(&input.thread), Arc::clone(&input.policy));
        let bound = blocking(move || {
            // Exact count with the real ids; only pointers and summaries are recounted.
            let total = compaction.bind(&ids, &thread, &policy.render, &parts.engine());
            if total > hard_limit {
                return Err(ApiError::Internal(format!(
                    "bound plan renders to {total} tokens, over the hard limit {hard_limit}"
                )));
            }
            Ok(compaction)
        })
        .await;
        let (mut plan, report) = match bound {
            Ok(c) => (c.plan, c.report),
            Err(e) => {
                self.delete_artifacts(tenant, &input.thread.id, &written)
                    .await;
                return Err(e);
            }
        };

        match self
            .inner
            .plans
            .commit(tenant, &input.thread.id, &plan, current_version)
            .await
        {
            Ok(version) => plan.version = version,
            Err(e) => {
                self.delete_artifacts(tenant, &input.thread.id, &written)
                    .await;
                return Err(plan_store_error(e, "thread.id"));
            }
        }
        Ok(CompactOutcome {
            tokens_before: report.tokens_before,
            tokens_after: plan.compacted_token_count,
            per_reducer: report.per_reducer,
            budget: Some(report.budget),
            warnings: report.warnings,
            reused: false,
            triggered: report.triggered,
            new_artifact_ids: written,
            plan,
        })
    }

    /// Best effort: an artifact that no plan references is garbage, not a
    /// correctness problem, so failures are logged, not returned.
    async fn delete_artifacts(&self, tenant: &str, thread_id: &str, ids: &[String]) {
        for id in ids {
            if let Err(e) = self.inner.artifacts.delete(tenant, thread_id, id).await {
                tracing::warn!(artifact_id = %id, error = %e, "could not delete an uncommitted artifact");
            }
        }
    }

    /// Reads artifacts for injection, checking the sensitivity permission.
    async fn fetch_artifacts(
        &self,
        ctx: &SecurityContext,
        thread_id: &str,
        ids: &[String],
    ) -> Result<Vec<(String, String)>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            if !seen.insert(id.as_str()) {
                continue;
            }
            let (meta, bytes) = self
                .inner
                .artifacts
                .get(&ctx.tenant_id, thread_id, id)
                .await
                .map_err(|e| artifact_read_error(e, &format!("rehydrate_artifact_ids[{i}]")))?;
            check_sensitivity(ctx, meta.sensitivity)?;
            out.push((id.clone(), String::from_utf8_lossy(&bytes).into_owned()));
        }
        Ok(out)
    }
}

fn reused(plan: CompactionPlan) -> CompactOutcome {
    CompactOutcome {
        tokens_before: plan.original_token_count,
        tokens_after: plan.compacted_token_count,
        per_reducer: Vec::new(),
        budget: None,
        warnings: Vec::new(),
        reused: true,
        triggered: false,
        new_artifact_ids: Vec::new(),
        plan,
    }
}

/// Plan-store errors: a malformed thread id is the caller's input.
fn plan_store_error(e: crate::store::StoreError, field: &str) -> ApiError {
    match e {
        crate::store::StoreError::InvalidId(m) => ApiError::invalid(field, m),
        other => store_error(other, "plan"),
    }
}

/// Artifact reads: missing, malformed and foreign ids all read as NOT_FOUND.
fn artifact_read_error(e: crate::store::StoreError, field: &str) -> ApiError {
    match store_error(e, "artifact") {
        ApiError::NotFound(_) => ApiError::NotFound(format!("artifact ({field})")),
        other => other,
    }
}

fn check_sensitivity(ctx: &SecurityContext, s: Sensitivity) -> Result<()> {
    if ctx.can_read(s) {
        Ok(())
    } else {
        Err(ApiError::PermissionDenied(format!(
            "permission denied: reading this artifact needs `artifact:read:{}`",
            s.as_str()
        )))
    }
}

/// The longest prefix of `text` (on a char boundary) of at most `max` tokens,
/// and whether it was cut. Counts with the tokenizer directly: prefixes are
/// one-off texts that would only churn the ledger.
pub fn truncate_to_tokens(counter: &dyn TokenCounter, text: &str, max: u32) -> (String, bool) {
    let max = max as usize;
    if counter.count(text) <= max {
        return (text.to_string(), false);
    }
    let down = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let up = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    // Invariant: text[..lo] fits; the answer is a char boundary in [lo, hi].
    // Bound the search first: a token is rarely longer than 16 bytes, so the
    // answer almost always lies within the first 16·max bytes.
    let (mut lo, mut hi) = (0usize, down(text.len() - 1));
    let probe = down(text.len().min(max.saturating_mul(16)));
    if counter.count(&text[..probe]) <= max {
        lo = probe;
    } else {
        hi = down(probe.saturating_sub(1)).max(lo);
    }
    while lo < hi {
        // Round up so `mid` > `lo`: every step shrinks [lo, hi].
        let mid = up(lo + (hi - lo).div_ceil(2)).min(hi);
        if counter.count(&text[..mid]) <= max {
            lo = mid;
        } else {
            hi = down(mid - 1).max(lo);
        }
    }
    (text[..lo].to_string(), true)
}

/// Fits artifacts into the rehydration reserve, in request order: each is
/// cut so that its rendered message (framing included) fits what is left;
/// one that does not fit at all is omitted. Returns the injected content and
/// the per-artifact report.
fn fit_rehydrated(
    counter: &RequestCounter<'_>,
    fetched: Vec<(String, String)>,
    reserve: u32,
) -> (Vec<Rehydrated>, Vec<pb::RehydratedArtifact>) {
    let empty = Thread {
        id: String::new(),
        messages: Vec::new(),
    };
    let options = Default::default();
    let message_tokens = |r: &Rehydrated| -> u32 {
        let request = render(
            &empty,
            &CompactionPlan::default(),
            &RenderInput {
                system: None,
                tools: &[],
                rehydrated: std::slice::from_ref(r),
                options: &options,
            },
        );
        request.messages.iter().map(|m| counter.message(m)).sum()
    };
    let mut remaining = reserve;
    let mut injected = Vec::new();
    let mut report = Vec::new();
    for (artifact_id, content) in fetched {
        let mut r = Rehydrated {
            artifact_id: artifact_id.clone(),
            content,
            truncated: false,
        };
        let mut cost = message_tokens(&r);
        if cost > remaining {
            let overhead = message_tokens(&Rehydrated {
                artifact_id: artifact_id.clone(),
                content: String::new(),
                truncated: true,
            });
            let full = std::mem::take(&mut r.content);
            let mut cap = remaining.saturating_sub(overhead);
            r.truncated = true;
            // Token counts of concatenations are not exactly additive: shrink
            // the cap until the whole rendered message fits.
            loop {
                r.content = truncate_to_tokens(counter.counter, &full, cap).0;
                cost = message_tokens(&r);
                if cost <= remaining || cap == 0 {
                    break;
                }
                cap = cap.saturating_sub((cost - remaining).max(1));
            }
            if cost > remaining || r.content.is_empty() {
                report.push(pb::RehydratedArtifact {
                    artifact_id,
                    truncated: true,
                    omitted: true,
                });
                continue;
            }
        }
        remaining -= cost;
        report.push(pb::RehydratedArtifact {
            artifact_id,
            truncated: r.truncated,
            omitted: false,
        });
        injected.push(r);
    }
    (injected, report)
}

fn audit(plan: &CompactionPlan, tokenizer: &str, rehydrated: &[Rehydrated]) -> pb::AuditRecord {
    let count = |spans: Vec<usize>| spans.into_iter().sum::<usize>() as u32;
    pb::AuditRecord {
        plan_version: plan.version,
        plan_fingerprint: plan.fingerprint.clone(),
        plan_format_version: PLAN_FORMAT_VERSION.to_string(),
        summary_schema_version: SUMMARY_SCHEMA_VERSION.to_string(),
        summary_render_version: SUMMARY_RENDER_VERSION.to_string(),
        render_format_version: RENDER_FORMAT_VERSION.to_string(),
        summarizer_id: ExtractiveSummarizer.id().to_string(),
        tokenizer: tokenizer.to_string(),
        evictions: Some(pb::EvictionCounts {
            externalized: count(
                plan.externalizations
                    .iter()
                    .map(|r| r.span.message_ids.len())
                    .collect(),
            ),
            summarized: count(
                plan.summarizations
                    .iter()
                    .map(|r| r.span.message_ids.len())
                    .collect(),
            ),
            cleared: count(
                plan.clearings
                    .iter()
                    .map(|r| r.span.message_ids.len())
                    .collect(),
            ),
            dropped: count(
                plan.drops
                    .iter()
                    .map(|r| r.span.message_ids.len())
                    .collect(),
            ),
        }),
        artifact_ids: referenced_artifacts(plan).into_iter().collect(),
        rehydrated_artifact_ids: rehydrated.iter().map(|r| r.artifact_id.clone()).collect(),
    }
}

/// A rendered request in the requested form.
struct Rendered {
    messages: Vec<RenderedMessage>,
    system: Option<String>,
    payload: String,
    tokens: RequestTokens,
    report: Vec<pb::RehydratedArtifact>,
    injected: Vec<Rehydrated>,
}

#[tonic::async_trait]
impl CompactionService for CompactionApi {
    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> std::result::Result<Response<pb::CompactResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        authorize(&ctx, &[Permission::Compact], r.tenant_id.as_deref())?;
        let input = CompactInput {
            thread: Arc::new(self.thread(r.thread)?),
            policy: Arc::new(self.policy(r.policy)?),
            model: self.model(r.model),
            max_input_tokens: non_zero_or(r.max_input_tokens, self.inner.default_max_input_tokens),
            system: r.system_prompt,
            tools: Arc::new(convert::tools_from_pb(r.tools, "tools")?),
            expected_version: r.expected_version,
            observations: convert::observations_from_pb(r.observations),
            skip_aggressive: r.rehydrated_this_turn,
        };
        let out = self.compact_and_commit(&ctx.tenant_id, input).await?;
        Ok(Response::new(out.to_pb()))
    }

    async fn render(
        &self,
        request: Request<pb::RenderRequest>,
    ) -> std::result::Result<Response<pb::RenderResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut needs = vec![Permission::Render];
        if r.compact_first {
            needs.push(Permission::Compact);
        }
        if !r.rehydrate_artifact_ids.is_empty() {
            needs.push(Permission::Rehydrate);
        }
        authorize(&ctx, &needs, r.tenant_id.as_deref())?;

        let format = convert::format_from_pb(r.format)?;
        let thread = Arc::new(self.thread(r.thread)?);
        let policy = Arc::new(self.policy(r.policy)?);
        let tools = Arc::new(convert::tools_from_pb(r.tools, "tools")?);
        let model = self.model(r.model);
        let system = r.system_prompt;

        let (plan, compaction) = if r.compact_first {
            let input = CompactInput {
                thread: Arc::clone(&thread),
                policy: Arc::clone(&policy),
                model: model.clone(),
                max_input_tokens: non_zero_or(
                    r.max_input_tokens,
                    self.inner.default_max_input_tokens,
                ),
                system: system.clone(),
                tools: Arc::clone(&tools),
                expected_version: r.expected_version,
                observations: convert::observations_from_pb(r.observations),
                skip_aggressive: !r.rehydrate_artifact_ids.is_empty(),
            };
            let out = self.compact_and_commit(&ctx.tenant_id, input).await?;
            (out.plan.clone(), Some(out.to_pb()))
        } else {
            let stored = self
                .current_plan(&ctx.tenant_id, &thread.id)
                .await?
                .ok_or_else(|| {
                    ApiError::NotFound(
                        "plan for this thread (call Compact, or set compact_first)".into(),
                    )
                })?;
            if r.plan_version != 0 && r.plan_version != stored.version {
                return Err(ApiError::VersionConflict {
                    expected: r.plan_version,
                    current: stored.version,
                }
                .into());
            }
            let mut plan = stored.plan;
            plan.version = stored.version;
            plan.validate_against(&thread)
                .map_err(|e| ApiError::PlanMismatch {
                    message: e.to_string(),
                })?;
            (plan, None)
        };

        let fetched = self
            .fetch_artifacts(&ctx, &thread.id, &r.rehydrate_artifact_ids)
            .await?;
        let ledger = Arc::clone(&self.inner.ledger);
        let counter = counter_for_model(&model);
        let opts = crate::render::ProviderOptions {
            model,
            max_output_tokens: r.max_output_tokens,
        };
        let plan_c = plan.clone();
        let counter_c = Arc::clone(&counter);
        // With compact_first the plan was counted for exactly this thread,
        // system prompt, tools and model (its fingerprint covers them), so
        // the messages part need not be tokenized again.
        let counted = r.compact_first;
        let max_input_tokens = non_zero_or(r.max_input_tokens, self.inner.default_max_input_tokens);
        let plan_version = plan.version;
        let rendered = blocking(move || {
            let rc = RequestCounter::new(counter_c.as_ref(), &ledger);
            let (injected, report) =
                fit_rehydrated(&rc, fetched, policy.rehydration_reserve_tokens);
            let request = render(
                &thread,
                &plan_c,
                &RenderInput {
                    system: system.as_deref(),
                    tools: &tools,
                    rehydrated: &injected,
                    options: &policy.render,
                },
            );
            let tokens = if counted {
                let (system, tools, framing) = rc.fixed(request.system.as_deref(), &request.tools);
                let rehydrated: u32 = request
                    .messages
                    .iter()
                    .filter(|m| m.origin == crate::render::Origin::Rehydrated)
                    .map(|m| rc.message(m))
                    .sum();
                let messages = plan_c
                    .compacted_token_count
                    .saturating_sub(system + tools + framing);
                RequestTokens {
                    system,
                    tools,
                    messages,
                    rehydrated,
                    framing,
                    total: system + tools + messages + rehydrated + framing,
                }
            } else {
                // A committed plan rendered against a thread that has grown
                // since may no longer fit; never hand out an over-budget request.
                let tokens = rc.request(&request);
                let hard_limit = crate::reduce::budget_for(
                    &policy,
                    max_input_tokens,
                    &rc,
                    request.system.as_deref(),
                    &request.tools,
                )
                .hard_limit();
                let used = tokens.total - tokens.rehydrated;
                if used > hard_limit {
                    return Err(ApiError::InsufficientBudget {
                        message: format!(
                            "plan version {plan_version} renders this thread to {used} tokens, over the limit of {hard_limit} for max_input_tokens {max_input_tokens}; call Compact or set compact_first"
                        ),
                    });
                }
                tokens
            };
            // The request is consumed: its text moves into the response.
            let (payload, messages, system) = match format {
                pb::OutputFormat::Neutral => (String::new(), request.messages, request.system),
                pb::OutputFormat::OpenaiChat => (
                    payload_json(&openai::into_openai(request, &opts))?,
                    Vec::new(),
                    None,
                ),
                pb::OutputFormat::AnthropicMessages => (
                    payload_json(&anthropic::to_anthropic(&request, &opts))?,
                    Vec::new(),
                    None,
                ),
            };
            Ok(Rendered {
                messages,
                system,
                payload,
                tokens,
                report,
                injected,
            })
        })
        .await?;

        Ok(Response::new(pb::RenderResponse {
            messages: rendered
                .messages
                .iter()
                .map(convert::rendered_to_pb)
                .collect(),
            system_prompt: rendered.system,
            provider_payload_json: rendered.payload,
            tokens: Some(convert::tokens_to_pb(&rendered.tokens)),
            plan_version: plan.version,
            audit: Some(audit(&plan, counter.name(), &rendered.injected)),
            compaction,
            rehydrated: rendered.report,
        }))
    }

    async fn rehydrate(
        &self,
        request: Request<pb::RehydrateRequest>,
    ) -> std::result::Result<Response<pb::RehydrateResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        authorize(&ctx, &[Permission::Rehydrate], r.tenant_id.as_deref())?;
        if r.thread_id.is_empty() {
            return Err(ApiError::invalid("thread_id", "must not be empty").into());
        }
        if r.artifact_id.is_empty() {
            return Err(ApiError::invalid("artifact_id", "must not be empty").into());
        }
        let (meta, bytes) = self
            .inner
            .artifacts
            .get(&ctx.tenant_id, &r.thread_id, &r.artifact_id)
            .await
            .map_err(|e| artifact_read_error(e, "artifact_id"))?;
        check_sensitivity(&ctx, meta.sensitivity)?;
        let cap = non_zero_or(r.max_tokens, self.inner.policy.rehydration_reserve_tokens);
        let counter = counter_for_model(&self.model(r.model));
        let ledger = Arc::clone(&self.inner.ledger);
        let (content, truncated, tokens) = blocking(move || {
            let text = String::from_utf8_lossy(&bytes);
            let (content, truncated) = truncate_to_tokens(counter.as_ref(), &text, cap);
            let tokens = ledger.count(counter.as_ref(), &content);
            Ok((content, truncated, tokens))
        })
        .await?;
        Ok(Response::new(pb::RehydrateResponse {
            artifact_id: r.artifact_id,
            content,
            truncated,
            tokens,
            sensitivity: convert::sensitivity_to_pb(meta.sensitivity) as i32,
            message_ids: meta.message_ids,
            content_hash: meta.content_hash,
        }))
    }
}

/// JSON text of a provider payload. `serde_json::to_string` writes bytes
/// directly; `Value`'s `Display` goes through `fmt` and was 1.5× slower on a
/// 340 KB payload.
fn payload_json(v: &serde_json::Value) -> Result<String> {
    serde_json::to_string(v).map_err(|e| ApiError::Internal(format!("payload serialization: {e}")))
}

fn non_zero_or(v: u32, default: u32) -> u32 {
    if v == 0 {
        default
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::o200k;

    #[test]
    fn service_name_matches_the_generated_server() {
        use tonic::server::NamedService;
        assert_eq!(
            <pb::compaction_service_server::CompactionServiceServer<CompactionApi> as NamedService>::NAME,
            SERVICE_NAME
        );
    }

    #[test]
    fn truncation_keeps_the_longest_prefix_within_the_cap() {
        let c = o200k();
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(200);
        let (cut, truncated) = truncate_to_tokens(c.as_ref(), &text, 50);
        assert!(truncated);
        assert!(c.count(&cut) <= 50);
        assert!(c.count(&text[..cut.len() + 5]) > 50);
        let (all, truncated) = truncate_to_tokens(c.as_ref(), "short", 50);
        assert_eq!((all.as_str(), truncated), ("short", false));
        let (none, _) = truncate_to_tokens(c.as_ref(), "héllo wörld", 0);
        assert_eq!(none, "");
        // Multi-byte text: the cut is on a char boundary and maximal.
        let text = "日本語のテキストと émojis 🎉 mixed in. ".repeat(50);
        let (cut, truncated) = truncate_to_tokens(c.as_ref(), &text, 37);
        assert!(truncated && c.count(&cut) <= 37);
        let next = text[cut.len()..].chars().next().map_or(0, char::len_utf8);
        assert!(c.count(&text[..cut.len() + next]) > 37);
    }

    #[test]
    fn request_fingerprint_matches_the_core() {
        let thread = crate::synth::thread(&crate::synth::SynthParams::default());
        let input = CompactInput {
            thread: Arc::new(thread),
            policy: Arc::new(Policy::default()),
            model: "gpt-4o".into(),
            max_input_tokens: 50_000,
            system: Some("be brief".into()),
            tools: Arc::new(vec![ToolSchema {
                name: "search".into(),
                description: "web search".into(),
                parameters: serde_json::json!({"type": "object"}),
            }]),
            expected_version: None,
            observations: BTreeMap::new(),
            skip_aggressive: false,
        };
        let parts = EngineParts {
            counter: o200k(),
            ledger: Arc::new(TokenLedger::new(10_000)),
            memo: Arc::new(Memo::default()),
        };
        let engine = parts.engine();
        let out =
            compact(&input.request(None, ThreadLimits::default()), &engine).expect("compacts");
        // The reuse check fingerprints the request without the previous plan.
        assert_eq!(
            out.plan.fingerprint,
            crate::reduce::request_fingerprint(
                &input.request(None, ThreadLimits::default()),
                &engine
            )
        );
    }
}
