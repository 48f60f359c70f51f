//! Render: the plan (committed, or compacted in the same call) → fetch the
//! artifacts to inject → fit them into the rehydration reserve → render →
//! count → the requested output form.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::{
    AuditRecord, CompactionPlan, EvictionCounts, PLAN_FORMAT_VERSION, SUMMARY_RENDER_VERSION,
    SUMMARY_SCHEMA_VERSION,
};
use crate::reduce::{budget_for, referenced_artifacts};
use crate::render::{
    anthropic, fit_rehydrated, openai, render, responses, Origin, OutputFormat, ProviderOptions,
    RehydrationReport, RenderInput, Request, RequestCounter, RequestTokens, RENDER_FORMAT_VERSION,
};
use crate::runtime::blocking;
use crate::security::SecurityContext;

use super::error::artifact_read_error;
use super::rehydrate::check_sensitivity;
use super::{App, AppError, CompactCommand, CompactOutcome, Result, UseCase};

/// A Render call, converted and owned.
#[derive(Debug, Clone)]
pub struct RenderCommand {
    /// The thread, policy, model, limit, system prompt, tools, observations
    /// and compare-and-swap version, as for Compact.
    pub request: CompactCommand,
    /// Compact first and render the resulting plan, in one round trip.
    pub compact_first: bool,
    /// Without `compact_first`: the committed version to render (0 = latest).
    pub plan_version: u64,
    /// The output form.
    pub format: OutputFormat,
    /// Response `max_tokens` written into provider payloads.
    pub max_output_tokens: Option<u32>,
    /// Artifacts to inject for this turn only.
    pub rehydrate_artifact_ids: Vec<String>,
    /// Leave tool calls without a result out instead of refusing.
    pub omit_pending_calls: bool,
}

/// A rendered request in the requested form.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderedOutput {
    /// Neutral messages, system prompt and tools.
    Neutral(Request),
    /// A provider request body (OpenAI or Anthropic), as JSON text.
    Payload(String),
}

/// What Render produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOutcome {
    /// The plan rendered.
    pub plan: CompactionPlan,
    /// With `compact_first`: what Compact did.
    pub compaction: Option<CompactOutcome>,
    /// The request.
    pub output: RenderedOutput,
    /// Exact token counts by part.
    pub tokens: RequestTokens,
    /// Which plan and formats produced it, and what was evicted.
    pub audit: AuditRecord,
    /// What happened to each artifact asked for.
    pub rehydrated: Vec<RehydrationReport>,
}

impl App {
    /// Renders the thread through its plan for the caller's tenant.
    pub async fn render(&self, ctx: &SecurityContext, cmd: RenderCommand) -> Result<RenderOutcome> {
        UseCase::Render {
            compact_first: cmd.compact_first,
            rehydrates: !cmd.rehydrate_artifact_ids.is_empty(),
        }
        .authorize(ctx, None)?;
        let (plan, compaction) = self.plan_to_render(ctx, &cmd).await?;
        let fetched = self
            .fetch_artifacts(ctx, &cmd.request.thread.id, &cmd.rehydrate_artifact_ids)
            .await?;
        let model = self.model(cmd.request.model.clone())?;
        let max_input_tokens = self.max_input_tokens(cmd.request.max_input_tokens);
        let parts = self.engine_parts(&model);
        let summarizer_id = self.inner.summarizer.id().to_string();
        let plan = Arc::new(plan);
        let rendered = blocking({
            let plan = Arc::clone(&plan);
            move || {
                let rc = RequestCounter::new(parts.counter.as_ref(), &parts.ledger);
                let counted = cmd.compact_first;
                let (request, tokens, rehydrated) =
                    render_and_count(&cmd, &plan, &rc, fetched, counted, max_input_tokens)?;
                let audit = audit(&plan, parts.counter.name(), &summarizer_id, &rehydrated);
                let output = output(request, cmd.format, model, cmd.max_output_tokens)?;
                Ok::<_, AppError>((output, tokens, audit, rehydrated))
            }
        })
        .await??;
        let (output, tokens, audit, rehydrated) = rendered;
        Ok(RenderOutcome {
            plan: Arc::unwrap_or_clone(plan),
            compaction,
            output,
            tokens,
            audit,
            rehydrated,
        })
    }

    /// The plan to render: compacted now, or the committed one checked
    /// against the requested version and the thread sent.
    async fn plan_to_render(
        &self,
        ctx: &SecurityContext,
        cmd: &RenderCommand,
    ) -> Result<(CompactionPlan, Option<CompactOutcome>)> {
        if cmd.compact_first {
            let mut request = cmd.request.clone();
            request.rehydrated_this_turn |= !cmd.rehydrate_artifact_ids.is_empty();
            let out = self.compact_and_commit(&ctx.tenant_id, request).await?;
            return Ok((out.plan.clone(), Some(out)));
        }
        let thread = &cmd.request.thread;
        self.validate_thread(thread)?;
        cmd.request
            .policy
            .validate()
            .map_err(|e| AppError::invalid(e.field, e.reason))?;
        let plan = self
            .current_plan(&ctx.tenant_id, &thread.id)
            .await?
            .ok_or_else(|| {
                AppError::NotFound(
                    "plan for this thread (call Compact, or set compact_first)".into(),
                )
            })?;
        if cmd.plan_version != 0 && cmd.plan_version != plan.version {
            return Err(AppError::VersionConflict {
                expected: cmd.plan_version,
                current: plan.version,
            });
        }
        plan.validate_against(thread, &cmd.request.policy.roles_never_prune)
            .map_err(|e| AppError::PlanMismatch {
                message: e.to_string(),
            })?;
        Ok((plan, None))
    }

    /// Reads artifacts for injection, checking the sensitivity permission;
    /// a repeated id is read once.
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

/// Renders with the rehydrated content fitted in, and counts the request.
///
/// A plan compacted in this call was counted for exactly this thread, system
/// prompt, tools and model (its fingerprint covers them), so its messages
/// are not tokenized again. A committed plan rendered against a thread that
/// has grown since may no longer fit: it is refused, never handed out over
/// budget.
fn render_and_count(
    cmd: &RenderCommand,
    plan: &CompactionPlan,
    rc: &RequestCounter<'_>,
    fetched: Vec<(String, String)>,
    counted: bool,
    max_input_tokens: u32,
) -> Result<(Request, RequestTokens, Vec<RehydrationReport>)> {
    let policy = &cmd.request.policy;
    let (injected, report) = fit_rehydrated(rc, fetched, policy.rehydration_reserve_tokens);
    let request = render(
        &cmd.request.thread,
        plan,
        &RenderInput {
            system: cmd.request.system.as_deref(),
            tools: &cmd.request.tools,
            rehydrated: &injected,
            options: &policy.render,
            omit_pending_calls: cmd.omit_pending_calls,
        },
    );
    let tokens = if counted {
        counted_tokens(rc, &request, plan)
    } else {
        let tokens = rc.request(&request);
        let hard_limit = budget_for(
            policy,
            max_input_tokens,
            rc,
            request.system.as_deref(),
            &request.tools,
        )
        .hard_limit();
        let used = tokens.total - tokens.rehydrated;
        if used > hard_limit {
            return Err(AppError::InsufficientBudget {
                message: format!(
                    "plan version {} renders this thread to {used} tokens, over the limit of {hard_limit} for max_input_tokens {max_input_tokens}; call Compact or set compact_first",
                    plan.version
                ),
            });
        }
        tokens
    };
    Ok((request, tokens, report))
}

/// Token counts of a request whose plan holds the exact message count.
fn counted_tokens(
    rc: &RequestCounter<'_>,
    request: &Request,
    plan: &CompactionPlan,
) -> RequestTokens {
    let (system, tools, framing) = rc.fixed(request.system.as_deref(), &request.tools);
    let rehydrated: u32 = request
        .messages
        .iter()
        .filter(|m| m.origin == Origin::Rehydrated)
        .map(|m| rc.message(m))
        .sum();
    let messages = plan
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
}

/// The request in the requested form; the request is consumed, so its text
/// moves into the payload rather than being copied.
fn output(
    request: Request,
    format: OutputFormat,
    model: String,
    max_output_tokens: Option<u32>,
) -> Result<RenderedOutput> {
    let opts = ProviderOptions {
        model,
        max_output_tokens,
    };
    let payload = match format {
        OutputFormat::Neutral => return Ok(RenderedOutput::Neutral(request)),
        OutputFormat::OpenAiChat => openai::into_openai(request, &opts),
        OutputFormat::AnthropicMessages => anthropic::to_anthropic(&request, &opts),
        OutputFormat::OpenAiResponses => responses::into_responses(request, &opts),
    };
    // `to_string` writes bytes directly; `Value`'s `Display` goes through
    // `fmt` and was 1.5× slower on a 340 KB payload.
    serde_json::to_string(&payload)
        .map(RenderedOutput::Payload)
        .map_err(|e| AppError::Internal(format!("payload serialization: {e}")))
}

fn audit(
    plan: &CompactionPlan,
    tokenizer: &str,
    summarizer_id: &str,
    rehydrated: &[RehydrationReport],
) -> AuditRecord {
    AuditRecord {
        plan_version: plan.version,
        plan_fingerprint: plan.fingerprint.clone(),
        plan_format_version: PLAN_FORMAT_VERSION.to_string(),
        summary_schema_version: SUMMARY_SCHEMA_VERSION.to_string(),
        summary_render_version: SUMMARY_RENDER_VERSION.to_string(),
        render_format_version: RENDER_FORMAT_VERSION.to_string(),
        summarizer_id: summarizer_id.to_string(),
        tokenizer: tokenizer.to_string(),
        evictions: EvictionCounts::of(plan),
        artifact_ids: referenced_artifacts(plan).into_iter().collect(),
        rehydrated_artifact_ids: rehydrated
            .iter()
            .filter(|r| !r.omitted)
            .map(|r| r.artifact_id.clone())
            .collect(),
        warnings: Vec::new(),
    }
}
