//! Render: the plan (committed, or compacted in the same call) → fetch the
//! artifacts to inject → fit them into the rehydration reserve → render →
//! count → the requested output form.

use crate::provider::{body_tokens, Encoded, Format};
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::{
    AuditRecord, CompactionPlan, EvictionCounts, PLAN_FORMAT_VERSION, SUMMARY_RENDER_VERSION,
    SUMMARY_SCHEMA_VERSION,
};
use crate::model::{Eviction, Pairing, Sensitivity, Thread, ToolSchema};
use crate::recall::RecalledPassage;
use crate::reduce::{referenced_artifacts, ReserveUse, TokenBudget};
use crate::render::prefix::PrefixTrace;
use crate::render::quality::QualitySignals;
use crate::render::stable::{stand_in_text, Rendered, StablePart, Written};
use crate::render::{
    fit_rehydrated, render_from, ProviderOptions, RehydrationReport, RenderInput, Request,
    RequestCounter, RequestTokens, RENDER_FORMAT_VERSION,
};
use crate::render::{
    hinted, named_recently, named_this_turn, request_identifiers, AutoRehydrate, RehydrationBlocked,
};
use crate::runtime::blocking;
use crate::security::{Permission, SecurityContext};
use crate::store::StoreError;
use crate::telemetry::events;
use crate::tokens::truncate_to_tokens;

use super::compact::{own_start, Resolved, Staging};
use super::error::artifact_read_error;
use super::recall::fit_recall;
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
    pub format: Format,
    /// Response `max_tokens` written into provider payloads.
    pub max_output_tokens: Option<u32>,
    /// Artifacts to inject for this turn only.
    pub rehydrate_artifact_ids: Vec<String>,
    /// Leave tool calls without a result out instead of refusing.
    pub omit_pending_calls: bool,
    /// Inject artifacts the agent names in its latest turn; `None`: the
    /// server's setting.
    pub auto_rehydrate: Option<bool>,
    /// Add the `read_artifact` tool definition to the request's tools.
    pub read_artifact_tool: bool,
    /// Add the `search_context` tool definition (answered by SearchContext).
    pub search_context_tool: bool,
    /// Add the recall block; `None`: the server's setting.
    pub recall: Option<bool>,
    /// Per-turn content of the caller's hooks, placed next to the latest
    /// user message and paid from the injection reserve.
    pub injections: Vec<Injection>,
}

/// One hook's per-turn content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The hook, as errors name it.
    pub hook: String,
    /// What it adds.
    pub text: String,
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
    pub plan: Arc<CompactionPlan>,
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
    /// The passages of the recall block, best first.
    pub recalled: Vec<RecalledPassage>,
    /// The body unit by unit, for the next render's unchanged prefix
    /// (provider formats only).
    pub trace: Option<PrefixTrace>,
    /// Tokens of the leading part of the body the previous render of this
    /// thread sent byte for byte; `None` when no previous render is known.
    pub unchanged_prefix_tokens: Option<u32>,
    /// The append session after the call, when the request used one.
    pub session: Option<super::SessionState>,
    /// What the next render of this thread may keep (taken by the app
    /// before the outcome is returned).
    pub(crate) stable: Option<Arc<StablePart>>,
    /// Thread messages whose render was kept from the last one (0: all
    /// were rendered).
    pub(crate) kept: usize,
}

impl App {
    /// Renders the thread through its plan for the caller's tenant. With
    /// `compact_first`, compaction and render are one step: the plan is
    /// committed only once its render succeeded, so a failed Render commits
    /// nothing.
    pub async fn render(&self, ctx: &SecurityContext, cmd: RenderCommand) -> Result<RenderOutcome> {
        UseCase::Render {
            compact_first: cmd.compact_first,
            rehydrates: !cmd.rehydrate_artifact_ids.is_empty(),
        }
        .authorize(ctx, None)?;
        self.held(async move {
            let (sent, input) = (Arc::clone(&cmd.request.thread), cmd.request.session.clone());
            let outcome = cmd.request.task_outcome;
            let basis = self
                .outcome_basis(outcome, &ctx.tenant_id, &cmd.request.thread.id)
                .await;
            let run = |thread: Arc<Thread>, extends: Option<Arc<Thread>>, previous| {
                let mut cmd = cmd;
                cmd.request.extends = extends.or_else(|| own_start(&mut cmd.request, &thread));
                cmd.request.thread = thread;
                self.render_thread(ctx, cmd, previous)
            };
            let done = self
                .in_session(&ctx.tenant_id, sent, input, run, |out| out.trace.as_ref())
                .await?;
            super::report_outcome(outcome, basis.as_deref(), &ctx.tenant_id);
            let unchanged_prefix_tokens = match (&done.out.trace, &done.previous) {
                (Some(now), Some(previous)) => Some(now.unchanged_since(previous).0),
                _ => None,
            };
            Ok(RenderOutcome {
                unchanged_prefix_tokens,
                session: done.session,
                ..done.out
            })
        })
        .await
    }

    /// [`App::render`] of the whole thread. A compacting Render without
    /// `expected_version` whose commit lost to another replica's renders
    /// again on the winning plan, as Compact does.
    async fn render_thread(
        &self,
        ctx: &SecurityContext,
        cmd: RenderCommand,
        previous: Option<Arc<PrefixTrace>>,
    ) -> Result<RenderOutcome> {
        let (mut cmd, mut lost) = (cmd, 0);
        loop {
            let again = (cmd.compact_first
                && cmd.request.expected_version.is_none()
                && lost < super::compact::UNCONDITIONAL_RETRIES)
                .then(|| cmd.clone());
            match (self.render_once(ctx, cmd, previous.clone()).await, again) {
                (Err(AppError::VersionConflict { .. }), Some(again)) => {
                    (cmd, lost) = (again, lost + 1);
                }
                (done, _) => return done,
            }
        }
    }

    /// One try of [`App::render_thread`].
    async fn render_once(
        &self,
        ctx: &SecurityContext,
        cmd: RenderCommand,
        previous: Option<Arc<PrefixTrace>>,
    ) -> Result<RenderOutcome> {
        let (mut cmd, thread_warnings, paired) = self.admit(&ctx.tenant_id, cmd)?;
        let limits = self.inner.defaults.auto_rehydrate;
        let auto = if cmd.auto_rehydrate.unwrap_or(limits.enabled) {
            self.auto_rehydration(ctx, &cmd, limits).await
        } else {
            AutoRehydration::default()
        };
        // Read before anything is compacted: an artifact that cannot be
        // read fails the call with nothing written.
        let fetched = self
            .fetch_artifacts(ctx, &cmd.request.thread.id, &cmd.rehydrate_artifact_ids)
            .await?;
        // The compaction of this turn must not externalize or drop what is
        // being read back (loop breaking).
        cmd.request.rehydrated_this_turn |=
            !auto.fetched.is_empty() || !cmd.rehydrate_artifact_ids.is_empty();
        cmd.request.format = Some(cmd.format);
        let resolved = self.resolve(&ctx.tenant_id, cmd.request.clone())?;
        let (plan, staging) = self.plan_to_render(ctx, &cmd, &resolved).await?;
        let (tenant, thread_id) = (&ctx.tenant_id, cmd.request.thread.id.clone());
        // A render under the plan the last one rendered may keep part of
        // it, whether the thread came as an append or in full again.
        let stable = match &staging {
            None | Some(Staging::Reused(_)) => {
                let threads = &self.inner.threads;
                threads.read(tenant, &thread_id, |s| s.stable.clone())
            }
            _ => None,
        };
        let rendered = self
            .render_plan(
                ctx,
                cmd,
                &resolved,
                plan,
                (fetched, auto),
                Known {
                    warnings: thread_warnings.clone(),
                    paired,
                    previous,
                    stable,
                },
            )
            .await;
        let ((mut out, quality), compaction) = match staging {
            None => (rendered?, None),
            Some(Staging::Reused(c)) => (rendered?, Some(c)),
            Some(Staging::Staged(staged)) => match rendered {
                Ok(out) => (out, Some(self.commit(staged).await?)),
                Err(e) => {
                    self.abandon(staged).await;
                    return Err(e);
                }
            },
        };
        if let Some(mut c) = compaction {
            if out.plan.version != c.plan.version {
                Arc::make_mut(&mut out.plan).version = c.plan.version;
            }
            if let Some(part) = out.stable.as_mut() {
                Arc::make_mut(part).plan.0 = c.plan.version;
            }
            out.audit.plan_version = c.plan.version;
            c.warnings = thread_warnings;
            out.compaction = Some(c);
        }
        // The next render of the thread, appended to or sent in full, may
        // keep this one's part (checked against its thread and plan first).
        let part = out.stable.take();
        self.inner
            .threads
            .update(tenant, &thread_id, |s| s.stable = part);
        events::audit(&out.audit);
        events::rehydration(&out.rehydrated, &ctx.tenant_id);
        events::recall(&out.recalled);
        events::quality(&quality, &ctx.tenant_id);
        Ok(out)
    }

    /// The command checked and settled: the thread valid and without a
    /// pending call (unless those are left out), the policy effective, the
    /// `read_artifact` tool added when asked for. Returns what the thread
    /// as sent leaves out, as warnings, and the settled thread's pairing
    /// when settling left the thread as it was.
    fn admit(
        &self,
        tenant: &str,
        cmd: RenderCommand,
    ) -> Result<(RenderCommand, Vec<String>, Option<Paired>)> {
        let thread = &cmd.request.thread;
        let known = self.validate_and_pair(tenant, thread, cmd.request.extends.as_ref(), true)?;
        // Found once for the pending check and the provider view (an
        // append session's from the last turn's and what was appended).
        let state = known.unwrap_or_else(|| Arc::new(cmd.request.thread.pairing_state()));
        let abandoned = cmd.request.thread.abandoned_calls(&state.pairing);
        if !cmd.omit_pending_calls {
            // Before anything is compacted or committed: the request cannot
            // be rendered as it stands.
            refuse_pending(&cmd.request.thread, &state.pairing, &abandoned)?;
        }
        // Chat Completions refuses an empty `messages` (Anthropic and
        // Responses bodies get a continuation turn instead): with no
        // transcript, the system prompt is the body's one message.
        let no_system = cmd.request.system.as_deref().is_none_or(|s| s.is_empty());
        if cmd.format == Format::OpenAiChat && cmd.request.thread.messages.is_empty() && no_system {
            return Err(AppError::invalid(
                "thread.messages",
                "an OpenAI Chat body needs at least one message: send a system prompt or a message",
            ));
        }
        // A provider item the format has no form for is refused, before
        // anything is compacted: nothing is dropped silently.
        if let Some(u) = cmd
            .format
            .unsendable(cmd.request.thread.messages.iter().map(|m| &**m))
        {
            return Err(AppError::invalid("output_format", u.to_string()));
        }
        let mut cmd = cmd;
        let request = &mut cmd.request;
        let sent = Arc::clone(&request.thread);
        let warnings =
            Self::settle_thread_without(&mut request.thread, &mut request.extends, &abandoned);
        let paired = Arc::ptr_eq(&sent, &request.thread).then_some(Paired {
            thread: sent,
            pairing: state,
        });
        cmd.request.policy = self.effective_policy(&cmd.request.policy)?;
        for (wanted, tool) in [
            (
                cmd.read_artifact_tool,
                read_artifact_tool as fn() -> ToolSchema,
            ),
            (cmd.search_context_tool, super::search_context_tool),
        ] {
            if wanted {
                let tool = tool();
                if !cmd.request.tools.iter().any(|t| t.name == tool.name) {
                    Arc::make_mut(&mut cmd.request.tools).push(tool);
                }
            }
        }
        Ok((cmd, warnings, paired))
    }

    /// Renders, counts and encodes `plan` on the blocking pool, with what
    /// is read back fitted in; the quality signals beside it.
    async fn render_plan(
        &self,
        ctx: &SecurityContext,
        cmd: RenderCommand,
        resolved: &Arc<Resolved>,
        plan: Arc<CompactionPlan>,
        (fetched, auto): (Vec<(String, String)>, AutoRehydration),
        known: Known,
    ) -> Result<(RenderOutcome, QualitySignals)> {
        let Known {
            warnings: thread_warnings,
            paired,
            previous,
            stable,
        } = known;
        let auto_cap = self.inner.defaults.auto_rehydrate.max_tokens_per_artifact;
        let summarizer_id = self.inner.summarizer.id().to_string();
        let requester = ctx.requester_id.clone();
        let tenant = ctx.tenant_id.clone();
        let recall_settings = self.inner.defaults.recall;
        let recall_on = cmd.recall.unwrap_or(recall_settings.enabled);
        let (app, r) = (self.clone(), Arc::clone(resolved));
        blocking(move || {
            let parts = &r.parts;
            let rc = RequestCounter::for_target(parts.counter.as_ref(), &parts.ledger, r.target);
            let recall = recall_on.then(|| {
                let thread = &cmd.request.thread;
                // A thread sent in full again is known to extend the last
                // one when the carry check compared them.
                let extends = cmd
                    .request
                    .extends
                    .clone()
                    .or_else(|| app.carry_extends(&tenant, thread));
                let index = app.inner.threads.recall(
                    &tenant,
                    thread,
                    extends.as_ref(),
                    &plan,
                    &app.inner.redactor,
                );
                (index, recall_settings)
            });
            let extras = TurnExtras {
                fetched,
                auto,
                auto_cap,
                recall,
            };
            let thread = &cmd.request.thread;
            // Found once for every render below and the recall queries (at
            // admission, unless settling the thread changed it).
            let state = match paired {
                Some(p) if Arc::ptr_eq(&p.thread, thread) => p.pairing,
                _ => Arc::new(thread.pairing_state()),
            };
            let pairing = &state.pairing;
            let key = stable_key(&cmd, &r.model, parts.counter.name());
            let plan_id = (plan.version, plan.fingerprint.clone());
            let turn = |part: Option<&StablePart>| {
                render_turn(
                    &cmd,
                    (pairing, (key, &plan_id)),
                    &plan,
                    &rc,
                    extras.clone(),
                    (r.max_input_tokens, r.model.clone()),
                    &parts.memo,
                    (previous.as_deref(), part),
                )
            };
            let usable = stable.filter(|part| {
                part.key == key && part.plan == plan_id && extends_part(&cmd, part, pairing)
            });
            let mut kept = 0;
            let done = match usable.as_deref().map(|part| (part, turn(Some(part)))) {
                Some((part, Ok(done))) => {
                    kept = part.end.saturating_sub(1);
                    #[cfg(debug_assertions)]
                    same_as_rendered_in_full(&done, turn(None), part);
                    done
                }
                // What keeping the part could not render is rendered in
                // full: an error is then the whole thread's.
                _ => turn(None)?,
            };
            let quality = crate::render::quality::quality_signals(
                &cmd.request.thread,
                &plan,
                READ_ARTIFACT_TOOL,
            );
            let mut audit = audit(
                &plan,
                parts.counter.name(),
                &summarizer_id,
                &done.rehydrated,
            );
            audit.turns_since_compaction =
                plan.turns_since_compaction(cmd.request.thread.current_turn());
            audit.warnings = thread_warnings;
            audit.warnings.extend(done.warnings);
            audit
                .warnings
                .extend(app.inner.redactor.off_warning().map(str::to_string));
            audit.requester = requester;
            let out = RenderOutcome {
                plan,
                compaction: None,
                output: done.output,
                tokens: done.tokens,
                audit,
                rehydrated: done.rehydrated,
                recalled: done.recalled,
                trace: done.trace,
                unchanged_prefix_tokens: None,
                session: None,
                stable: done.next.map(Arc::new),
                kept,
            };
            Ok::<_, AppError>((out, quality))
        })
        .await?
    }

    /// The plan to render: compacted now and staged (committed by the
    /// caller once rendered), or the committed one checked against the
    /// requested version and the thread sent.
    async fn plan_to_render(
        &self,
        ctx: &SecurityContext,
        cmd: &RenderCommand,
        resolved: &Arc<Resolved>,
    ) -> Result<(Arc<CompactionPlan>, Option<Staging>)> {
        if cmd.compact_first {
            let staging = self.stage(&ctx.tenant_id, Arc::clone(resolved)).await?;
            let plan = match &staging {
                Staging::Reused(out) => Arc::clone(&out.plan),
                Staging::Staged(staged) => Arc::new(staged.plan.clone()),
            };
            return Ok((plan, Some(staging)));
        }
        let thread = &cmd.request.thread;
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

/// The name of the tool [`read_artifact_tool`] defines.
pub const READ_ARTIFACT_TOOL: &str = "read_artifact";

/// The `read_artifact` tool: what an agent calls to read back content that
/// left its prompt (an externalized result, an archived stub, summary or
/// dropped span). The platform answers it with the Rehydrate RPC.
pub fn read_artifact_tool() -> ToolSchema {
    ToolSchema {
        name: READ_ARTIFACT_TOOL.to_string(),
        description: "Read back content that was moved out of the conversation to save space. \
            Call it with an artifact id (art_ followed by 32 hex digits) shown in a placeholder, \
            pointer or summary when you need the exact original text."
            .to_string(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "artifact_id": {
                    "type": "string",
                    "pattern": "^art_[0-9a-f]{32}$",
                    "description": "The artifact id, exactly as shown."
                },
                "max_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Optional cap on the returned content, in tokens."
                }
            },
            "required": ["artifact_id"],
            "additionalProperties": false
        }),
    }
}

/// What the agent named this turn: content to inject, and what was refused.
#[derive(Debug, Default, Clone)]
struct AutoRehydration {
    fetched: Vec<(String, String)>,
    blocked: Vec<RehydrationReport>,
}

/// A store error as a reason not to inject (never a reason to fail the turn).
fn store_block(artifact_id: &str, e: StoreError) -> RehydrationBlocked {
    match e {
        StoreError::NotFound | StoreError::InvalidId(_) | StoreError::KeyDeleted(_) => {
            RehydrationBlocked::NotFound
        }
        e => {
            tracing::warn!(artifact_id, error = %e, "automatic rehydration: artifact store error");
            RehydrationBlocked::Unavailable
        }
    }
}

fn blocked(artifact_id: &str, why: RehydrationBlocked) -> RehydrationReport {
    RehydrationReport {
        artifact_id: artifact_id.to_string(),
        truncated: false,
        omitted: true,
        auto: true,
        blocked: Some(why),
    }
}

impl App {
    /// Artifacts the agent named in its latest turn, then those whose hint
    /// or summary names an identifier the latest request names, that may be
    /// injected: public or internal, readable by the caller, not named
    /// within the cooldown, at most `max_per_turn`. Best effort: a store that does not
    /// answer blocks the injection, never the turn. Every refusal is
    /// reported and logged as an event (ids and reasons, never content).
    async fn auto_rehydration(
        &self,
        ctx: &SecurityContext,
        cmd: &RenderCommand,
        limits: AutoRehydrate,
    ) -> AutoRehydration {
        let thread = &cmd.request.thread;
        let mut out = AutoRehydration::default();
        let recent = named_recently(thread, limits.cooldown_turns);
        let mut candidates = named_this_turn(thread);
        // Then what the latest request asks for by the identifiers of an
        // artifact's hint or summary, under the same limits (best effort:
        // a plan store that does not answer matches nothing).
        let wanted = request_identifiers(thread);
        if !wanted.is_empty() && candidates.len() < limits.max_per_turn as usize {
            if let Ok(Some(plan)) = self.current_plan(&ctx.tenant_id, &thread.id).await {
                // Only as many as may be injected: a hint is a guess, and
                // a guess over the limit is not worth a refusal report.
                let room = limits.max_per_turn as usize - candidates.len();
                let extra: Vec<String> = hinted(&plan, &wanted)
                    .into_iter()
                    .filter(|id| !candidates.contains(id))
                    .take(room)
                    .collect();
                candidates.extend(extra);
            }
        }
        for id in candidates {
            if cmd.rehydrate_artifact_ids.contains(&id) {
                continue;
            }
            let why = if recent.contains(&id) {
                Some(RehydrationBlocked::Cooldown)
            } else if !ctx.permissions.contains(&Permission::Rehydrate) {
                Some(RehydrationBlocked::Permission)
            } else if out.fetched.len() >= limits.max_per_turn as usize {
                Some(RehydrationBlocked::TurnLimit)
            } else {
                // The metadata first: confidential content is never even
                // decrypted on this path.
                let store = &self.inner.artifacts;
                let read = match store.get_metadata(&ctx.tenant_id, &thread.id, &id).await {
                    Ok(meta) if meta.sensitivity > Sensitivity::Internal => {
                        Err(RehydrationBlocked::Sensitivity)
                    }
                    Ok(meta) if !ctx.can_read(meta.sensitivity) => {
                        Err(RehydrationBlocked::Permission)
                    }
                    Ok(_) => store
                        .get(&ctx.tenant_id, &thread.id, &id)
                        .await
                        .map_err(|e| store_block(&id, e)),
                    Err(e) => Err(store_block(&id, e)),
                };
                match read {
                    Ok((_, bytes)) => {
                        out.fetched
                            .push((id.clone(), String::from_utf8_lossy(&bytes).into_owned()));
                        None
                    }
                    Err(why) => Some(why),
                }
            };
            if let Some(why) = why {
                out.blocked.push(blocked(&id, why));
            }
        }
        out
    }
}

/// Renders with the rehydrated content fitted in, and counts the request as
/// rendered: what is sent is recounted, never taken from the plan (pending
/// calls left out, the order repaired). A committed plan rendered against a
/// thread that has grown since may no longer fit: it is refused, never handed
/// out over budget; a plan compacted in this call that does not fit is a bug,
/// reported as one.
///
/// With the stable `part` of the last render, only the messages after it
/// are rendered: the request returned holds those (and the per-turn
/// content), its tokens count the part's messages too, and its notes start
/// with the part's. Returns also where the per-turn position was before
/// anything was placed there, and the tokens of the messages before it.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn render_and_count(
    cmd: &RenderCommand,
    pairing: &Pairing,
    plan: &CompactionPlan,
    rc: &RequestCounter<'_>,
    extras: TurnExtras,
    max_input_tokens: u32,
    summaries: &dyn crate::render::SummaryTexts,
    part: Option<&StablePart>,
) -> Result<(
    Request,
    RequestTokens,
    Vec<RehydrationReport>,
    Vec<RecalledPassage>,
    (usize, usize),
)> {
    let policy = &cmd.request.policy;
    let kept = part.map_or(0..0, |p| p.cut..p.end);
    let render_with = |rehydrated: &[crate::render::Rehydrated]| {
        render_from(
            &cmd.request.thread,
            pairing,
            plan,
            &RenderInput {
                system: cmd.request.system.as_deref(),
                tools: &cmd.request.tools,
                rehydrated,
                options: &policy.render,
                omit_pending_calls: cmd.omit_pending_calls,
                summaries: Some(summaries),
                workspace: cmd.request.workspace.as_ref(),
            },
            kept.clone(),
        )
    };
    let mut request = render_with(&[]);
    // Where this turn's content goes, before any is placed there: what
    // precedes it is what the next turn may keep.
    let turn_at = crate::render::per_turn_position(&request);
    let rendered = request.messages.len();
    // The kept part's messages count as the request's.
    let with_part = |mut t: RequestTokens| {
        if let Some(p) = part {
            let kept = p.before.tokens + p.after.tokens;
            t.messages += kept;
            t.total += kept;
        }
        t
    };
    let mut tokens = with_part(rc.request(&request));
    // The fixed parts were just counted with the request. Without anything
    // read back the whole window is the ceiling; content read back takes
    // what the reserve and the room left allow.
    let budget = TokenBudget::for_policy(
        policy,
        max_input_tokens,
        (tokens.system, tokens.tools, tokens.framing),
        ReserveUse {
            estimated_counts: !rc.counter.is_exact(),
            rehydrating: false,
        },
    );
    let ceiling = budget.ceiling();
    if tokens.total > ceiling {
        if cmd.compact_first {
            return Err(AppError::Internal(format!(
                "plan version {} was compacted for this request but renders to {} tokens, over the limit {ceiling}",
                plan.version, tokens.total
            )));
        }
        return Err(AppError::InsufficientBudget {
            message: format!(
                "plan version {} renders this thread to {} tokens, over the limit of {ceiling} for max_input_tokens {max_input_tokens}; call Compact or set compact_first",
                plan.version, tokens.total
            ),
        });
    }
    let room = policy
        .rehydration_reserve_tokens
        .min(ceiling - tokens.total);
    let TurnExtras {
        fetched,
        auto,
        auto_cap,
        recall,
    } = extras;
    let options = &cmd.request.policy.render;
    let (injected, report) = fit_read_backs(rc, fetched, auto, auto_cap, room, options);
    if !injected.is_empty() {
        request = render_with(&injected);
        tokens = with_part(rc.request(&request));
        if tokens.total > ceiling {
            return Err(AppError::Internal(format!(
                "read-back content fitted into {room} tokens renders to {} tokens, over the limit {ceiling}",
                tokens.total
            )));
        }
    }
    let mut recalled = Vec::new();
    if let Some((index, settings)) = recall {
        // Recall stays under the trigger: a caller that keeps the
        // compacted prompt as its history is not compacted again for it.
        let room = settings
            .reserve_tokens
            .min(budget.trigger().min(ceiling).saturating_sub(tokens.total));
        let mut index = index
            .lock()
            .map_err(|_| AppError::Internal("recall index poisoned".into()))?;
        let thread = &cmd.request.thread;
        if let Some((text, hits)) = fit_recall(
            &mut index,
            (thread, pairing),
            shown_text(&request, part)?,
            rc,
            settings,
            room,
            options.delimit_tool_output,
        ) {
            // Where the renderer puts per-turn content; counted alone, as
            // the request's count is the sum of its messages'.
            let block = crate::render::recall_message(&text);
            let cost = rc.message(&block);
            if tokens.total + cost <= ceiling {
                let at = crate::render::per_turn_position(&request);
                request.messages.insert(at, block);
                tokens.recalled += cost;
                tokens.total += cost;
                recalled = hits
                    .iter()
                    .map(|h| RecalledPassage {
                        message_id: h.passage.message_id.clone(),
                        artifact_id: h.passage.artifact_id.clone(),
                        line: h.passage.line,
                    })
                    .collect();
            }
        }
    }
    // The caller's hooks last, next to the latest user message, paid from
    // the reserve compaction left free (the ceiling is below the window by
    // that much): the first that does not fit is an error naming it.
    let reserve = cmd.request.policy.injection_reserve_tokens;
    let mut used = 0u32;
    // One position for all, in the order given (a user message placed
    // there makes the next lookup land before it).
    let at = crate::render::per_turn_position(&request);
    for (i, inj) in cmd.injections.iter().enumerate() {
        let m = crate::render::injected_message(&inj.hook, &inj.text);
        let cost = rc.message(&m);
        used = used.saturating_add(cost);
        if used > reserve {
            return Err(AppError::invalid(
                format!("injections[{i}]"),
                format!(
                    "hook {:?} needs {cost} tokens, over what is left of the injection reserve ({} of policy.injection_reserve_tokens {reserve}); raise the reserve or shorten what the hook adds",
                    inj.hook,
                    reserve.saturating_sub(used - cost)
                ),
            ));
        }
        request.messages.insert(at + i, m);
        tokens.messages += cost;
        tokens.total += cost;
    }
    if let Some(p) = part {
        let kept = p.before.notes.iter().chain(&p.after.notes).cloned();
        request.notes.splice(0..0, kept);
    }
    Ok((request, tokens, report, recalled, (turn_at, rendered)))
}

/// One render of the plan with what the turn adds, in the requested form.
struct Turn {
    output: RenderedOutput,
    trace: Option<PrefixTrace>,
    tokens: RequestTokens,
    rehydrated: Vec<RehydrationReport>,
    recalled: Vec<RecalledPassage>,
    /// What rendering changed to satisfy the provider.
    warnings: Vec<String>,
    /// What the next render of the thread may keep.
    next: Option<StablePart>,
}

/// What names the part a render keeps: the hash of what shapes
/// the body, and the plan's version and fingerprint.
type PartId<'a> = (u64, &'a (u64, String));

/// Renders, counts and encodes one turn: the whole thread, or only what
/// follows the stable `part` of the last render.
#[allow(clippy::too_many_arguments)]
fn render_turn(
    cmd: &RenderCommand,
    (pairing, (key, plan_id)): (&Pairing, PartId<'_>),
    plan: &CompactionPlan,
    rc: &RequestCounter<'_>,
    extras: TurnExtras,
    (max_input_tokens, model): (u32, String),
    summaries: &dyn crate::render::SummaryTexts,
    (previous, part): (Option<&PrefixTrace>, Option<&StablePart>),
) -> Result<Turn> {
    let (request, mut tokens, rehydrated, recalled, (at, rendered)) = render_and_count(
        cmd,
        pairing,
        plan,
        rc,
        extras,
        max_input_tokens,
        summaries,
        part,
    )?;
    let warnings = render_warnings(&request, cmd.format);
    // What the body may count as sent: the window less the reserves; the
    // safety margin is there for what an estimate of the parts misses in
    // the whole.
    let window = TokenBudget::for_policy(
        &cmd.request.policy,
        max_input_tokens,
        (tokens.system, tokens.tools, tokens.framing),
        ReserveUse::default(),
    )
    .ceiling();
    let next = Some(Next {
        key,
        plan: plan_id.clone(),
        thread: &cmd.request.thread,
        pairing,
        at,
        rendered,
    });
    let (output, trace, next) = output(
        request,
        cmd.format,
        (model, cmd.max_output_tokens),
        rc,
        (&mut tokens, window),
        previous,
        (part, next),
    )?;
    Ok(Turn {
        output,
        trace,
        tokens,
        rehydrated,
        recalled,
        warnings,
        next,
    })
}

/// Whether the messages after `part` render on their own: the thread (as
/// rendered, after settling) holds the messages the part rendered, the cut
/// message (the user message the per-turn content went before) and its
/// loop included; no result after the part answers a call in it; the format
/// encodes message by message; and there is no workspace slot (it goes
/// after the last summary, which may lie in the part).
fn extends_part(cmd: &RenderCommand, part: &StablePart, pairing: &Pairing) -> bool {
    let (old, now) = (&part.thread.messages, &cmd.request.thread.messages);
    let same = |(a, b): (&Arc<crate::model::Message>, &Arc<crate::model::Message>)| {
        Arc::ptr_eq(a, b) || a == b
    };
    // A part's loop always ends past its cut message.
    let end = part.end;
    cmd.request.workspace.is_none()
        && cmd.format.elements_of(None, &[]).is_some()
        && end <= old.len()
        && end <= now.len()
        // Usually the same messages (an append session's copy); settling
        // (reasoning before the last user message left out) makes new ones
        // with the same content.
        && old[..end].iter().zip(&now[..end]).all(same)
        && crate::render::results_answer_within(pairing, end..now.len())
}

/// Where the message at `part`'s cut is in a request rendered after the
/// part (the kept loop goes right after it).
fn cut_position(request: &Request, part: &StablePart) -> Option<usize> {
    let id = &part.thread.messages.get(part.cut)?.id;
    request
        .messages
        .iter()
        .position(|m| m.origin == crate::render::Origin::Verbatim && m.source_id == *id)
}

/// The stand-in text of the whole prompt (what recall reads as shown), in
/// prompt order: the part's messages before the cut, the request through
/// the cut message, the part's loop, the rest of the request.
fn shown_text(request: &Request, part: Option<&StablePart>) -> Result<String> {
    let Some(p) = part else {
        return Ok(stand_in_text(&request.messages));
    };
    let at = cut_position(request, p).ok_or_else(unkept)? + 1;
    let mut out = p.before.stand_in.clone();
    out.push_str(&stand_in_text(&request.messages[..at]));
    out.push_str(&p.after.stand_in);
    out.push_str(&stand_in_text(&request.messages[at..]));
    Ok(out)
}

/// A render that could not extend its stable part (it is rendered in full
/// instead).
fn unkept() -> AppError {
    AppError::Internal("the body does not extend its stable part".into())
}

/// A hash of everything besides the thread and plan that shapes a body:
/// a stable part is kept only under the same.
fn stable_key(cmd: &RenderCommand, model: &str, counter: &str) -> u64 {
    let r = &cmd.request;
    let shape = serde_json::to_vec(&(
        cmd.format.name(),
        model,
        cmd.max_output_tokens,
        r.system.as_deref(),
        r.tools.as_slice(),
        &r.policy,
        cmd.omit_pending_calls,
        counter,
    ))
    .unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(&shape)
}

/// Checked builds render every turn that kept a part in full as well: the
/// two must agree on everything the caller sees and on the next part.
#[cfg(debug_assertions)]
fn same_as_rendered_in_full(kept: &Turn, full: Result<Turn>, part: &StablePart) {
    let full = match full {
        Ok(full) => full,
        Err(e) => panic!("the thread renders with its stable part but not in full: {e}"),
    };
    let at = format!(
        "cut at message {} of {}",
        part.cut,
        part.thread.messages.len()
    );
    assert_eq!(kept.output, full.output, "body, {at}");
    assert_eq!(kept.trace, full.trace, "trace, {at}");
    assert_eq!(kept.tokens, full.tokens, "tokens, {at}");
    assert_eq!(kept.rehydrated, full.rehydrated, "read-backs, {at}");
    assert_eq!(kept.recalled, full.recalled, "recall, {at}");
    assert_eq!(kept.warnings, full.warnings, "warnings, {at}");
    // The two may end a loop that is not closed yet at different points
    // (each part is checked when the next turn renders with it).
    match (&kept.next, &full.next) {
        (Some(a), Some(b)) if (a.cut, a.end) == (b.cut, b.end) => {
            assert_eq!(a.before, b.before, "next part before its cut, {at}");
            assert_eq!(a.after, b.after, "next part's loop, {at}");
            assert_eq!(a, b, "next part, {at}");
        }
        (Some(_), Some(_)) => {}
        (a, b) => assert_eq!(a.is_some(), b.is_some(), "next part, {at}"),
    }
}

/// What a render starts from besides the plan: the warnings and the tool
/// pairing of admission, and the last render's trace (its units need not be
/// counted again).
struct Known {
    warnings: Vec<String>,
    paired: Option<Paired>,
    previous: Option<Arc<PrefixTrace>>,
    /// The stable part of the thread's last render.
    stable: Option<Arc<StablePart>>,
}

/// A thread's tool pairing, found once per turn (at admission) for the
/// render that follows.
struct Paired {
    thread: Arc<Thread>,
    pairing: Arc<crate::model::PairingState>,
}

/// What a turn adds to the plan's prompt: content read back, and recall.
#[derive(Clone)]
struct TurnExtras {
    fetched: Vec<(String, String)>,
    auto: AutoRehydration,
    auto_cap: u32,
    recall: Option<(
        Arc<std::sync::Mutex<super::recall::Recall>>,
        crate::recall::RecallSettings,
    )>,
}

/// What is read back, fitted into `room` tokens: explicit requests first
/// (they share the reserve with what the agent named, and an explicit
/// request is the stronger signal), then what the agent named, each cut to
/// `auto_cap` tokens. Returns what goes in and a report per artifact,
/// refusals included.
fn fit_read_backs(
    rc: &RequestCounter<'_>,
    mut fetched: Vec<(String, String)>,
    auto: AutoRehydration,
    auto_cap: u32,
    room: u32,
    options: &crate::render::RenderOptions,
) -> (Vec<crate::render::Rehydrated>, Vec<RehydrationReport>) {
    let explicit = fetched.len();
    let mut cut = Vec::with_capacity(auto.fetched.len());
    for (id, text) in auto.fetched {
        let (text, truncated) = truncate_to_tokens(rc.counter, &text, auto_cap);
        cut.push(truncated);
        fetched.push((id, text));
    }
    let (injected, mut report) = fit_rehydrated(rc, fetched, room, options);
    for (r, truncated) in report[explicit..].iter_mut().zip(cut) {
        r.auto = true;
        r.truncated |= truncated;
    }
    report.extend(auto.blocked);
    (injected, report)
}

/// FAILED_PRECONDITION naming the first pending call: one of the last
/// assistant message without a result (earlier ones are abandoned and left
/// out). Checked on the thread as sent, so the field path is the caller's.
fn refuse_pending(
    thread: &crate::model::Thread,
    pairing: &crate::model::Pairing,
    abandoned: &[(usize, usize)],
) -> Result<()> {
    let pending = pairing.pending().find(|c| !abandoned.contains(c));
    match pending {
        Some((i, j)) => {
            let call = &thread.messages[i].tool_calls[j];
            Err(AppError::PendingToolCall {
                field: format!("thread.messages[{i}].tool_calls[{j}].id"),
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
            })
        }
        None => Ok(()),
    }
}

/// What rendering changed to satisfy the provider, for the audit record.
fn render_warnings(request: &Request, format: Format) -> Vec<String> {
    let mut out = request.notes.clone();
    out.extend(
        format
            .tool_id_rewrites(request)
            .into_iter()
            .map(|(from, to)| {
                format!(
                    "tool call id {from:?} sent to {} as {to:?}",
                    format.display_name()
                )
            }),
    );
    out
}

/// The request in the requested form; the request is consumed, so its text
/// moves into the payload rather than being copied. Every provider body
/// passes that provider's structure check first (pairing, adjacency,
/// alternation, non-empty content): a body that fails it is an internal
/// error, never a payload. So is a body that, recounted as it will be sent,
/// needs more than `window` tokens. A body that counts more as sent than
/// the `budgeted` sum of its parts (an estimate is capped at the byte length
/// of what it counts, and Anthropic's system prompt is sent joined) reports
/// the difference as framing, so the reported total is what was sent.
#[allow(clippy::type_complexity)]
fn output(
    request: Request,
    format: Format,
    (model, max_output_tokens): (String, Option<u32>),
    rc: &RequestCounter<'_>,
    (budgeted, window): (&mut RequestTokens, u32),
    known: Option<&PrefixTrace>,
    (part, next): (Option<&StablePart>, Option<Next<'_>>),
) -> Result<(RenderedOutput, Option<PrefixTrace>, Option<StablePart>)> {
    let opts = ProviderOptions {
        model,
        max_output_tokens,
    };
    let mut request = request;
    // The system prompt is the first element of a body written whole, and
    // was sent with a kept part.
    if part.is_some() {
        request.system = None;
    }
    let lead = format.elements_of(request.system.as_deref(), &[]);
    // What the next render may keep, and where the kept loop goes, read
    // before encoding takes the text.
    let written: Option<Vec<Written>> = next.as_ref().and_then(|_| {
        request
            .messages
            .iter()
            .map(|m| {
                let elements = format.elements_of(None, std::slice::from_ref(m))?;
                Some(Written::of(m, elements, rc.message(m)))
            })
            .collect()
    });
    let through_cut = match part {
        Some(p) => {
            let at = cut_position(&request, p).ok_or_else(unkept)?;
            format
                .elements_of(None, &request.messages[..=at])
                .ok_or_else(unkept)?
        }
        None => 0,
    };
    let payload = match format
        .encode(request, &opts)
        .map_err(|e| broken(format, &e))?
    {
        Encoded::Neutral(request) => return Ok((RenderedOutput::Neutral(request), None, None)),
        Encoded::Body(body) => body,
    };
    if let Some(sent) = body_tokens(format, &payload, rc) {
        let sent = sent + part.map_or(0, |p| p.before.body_tokens + p.after.body_tokens);
        if sent > window {
            return Err(AppError::Internal(format!(
                "rendered {format:?} body counts {sent} tokens as sent, more than the {window} the window allows (budgeted at {})",
                budgeted.total
            )));
        }
        if sent > budgeted.total {
            budgeted.framing += sent - budgeted.total;
            budgeted.total = sent;
        }
    }
    // Written as bytes directly (`Value`'s `Display` goes through `fmt` and
    // was 1.5× slower on a 340 KB payload), and traced for the prompt
    // cache as it is written; units the last render sent keep its counts
    // (when it counted with the same counter), the others are counted
    // through the ledger.
    let counter = rc.counter.name();
    let known = known.filter(|k| k.counted_by == counter);
    let (json, traced) =
        crate::render::prefix::to_json_with_elements(&payload, |t| rc.text(t), known)
            .map_err(|e| AppError::Internal(format!("payload serialization: {e}")))?;
    let body_tokens_of = |r: std::ops::Range<usize>| format.element_tokens(&payload, r, rc);
    let next = match (next, written, lead, &traced) {
        (Some(n), Some(written), Some(lead), Some((trace, spans))) => StablePart::next(
            part,
            (n.key, n.plan),
            (n.thread, n.pairing),
            Rendered {
                messages: &written,
                at: n.at,
                placed: written.len().saturating_sub(n.rendered),
                lead,
                json: &json,
                spans,
                units: &trace.units,
                body_tokens: &|r| body_tokens_of(r).unwrap_or_default(),
            },
        ),
        _ => None,
    };
    let (json, trace) = match part {
        None => (json, traced.map(|(trace, _)| trace)),
        Some(p) => {
            let (tail, spans) = traced.ok_or_else(unkept)?;
            if tail.units.first() != Some(&p.head_unit) {
                return Err(unkept());
            }
            let json = p.body_with(&json, &spans, through_cut).ok_or_else(unkept)?;
            let trace = PrefixTrace {
                units: p.units_with(&tail.units, through_cut),
                counted_by: String::new(),
            };
            (json, Some(trace))
        }
    };
    debug_assert_eq!(
        trace,
        PrefixTrace::of_body(&json, |t| rc.text(t)),
        "the trace written with the body is the one read from it"
    );
    let trace = trace.map(|t| PrefixTrace {
        counted_by: counter.to_string(),
        ..t
    });
    Ok((RenderedOutput::Payload(json), trace, next))
}

impl crate::cache::Weigh for Arc<StablePart> {
    fn weight(&self) -> u64 {
        StablePart::weight(self)
    }
}

/// What [`output`] needs to cut the next stable part.
struct Next<'a> {
    key: u64,
    plan: (u64, String),
    thread: &'a Arc<Thread>,
    pairing: &'a Pairing,
    /// The per-turn position in the request, before anything was placed
    /// there, and how many messages were rendered before any was.
    at: usize,
    rendered: usize,
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
        strategies: AuditRecord::strategies_of(plan),
        requester: String::new(),
        turns_since_compaction: None,
        evicted: Eviction::of(plan, summarizer_id),
    }
}

/// An internal error for a body that failed its provider check; the problem
/// names positions and ids, never content.
fn broken(format: Format, problem: &str) -> AppError {
    AppError::Internal(format!(
        "rendered {format:?} request failed the provider structure check: {problem}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use crate::provider::testgen::{self, calls, msg};
    use crate::render::RenderedMessage;

    fn call(id: &str) -> RenderedMessage {
        calls("", &[(id, "search", serde_json::json!({}))])
    }

    fn result(id: &str) -> RenderedMessage {
        testgen::result(id, "search", "found", false)
    }

    fn request(messages: Vec<RenderedMessage>) -> Request {
        Request {
            system: None,
            messages,
            tools: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn rc() -> RequestCounter<'static> {
        static LEDGER: std::sync::LazyLock<crate::tokens::TokenLedger> =
            std::sync::LazyLock::new(|| crate::tokens::TokenLedger::new(1000));
        static COUNTER: std::sync::LazyLock<std::sync::Arc<dyn crate::tokens::TokenCounter>> =
            std::sync::LazyLock::new(crate::tokens::o200k);
        RequestCounter::for_target(
            COUNTER.as_ref(),
            &LEDGER,
            crate::provider::Format::openai_chat_target(),
        )
    }

    /// `request` as `format`'s output, unbounded and with no earlier trace.
    fn output_as(request: Request, format: Format) -> Result<RenderedOutput> {
        let budget = (&mut RequestTokens::default(), u32::MAX);
        output(
            request,
            format,
            ("gpt-4o".into(), None),
            &rc(),
            budget,
            None,
            (None, None),
        )
        .map(|(o, _, _)| o)
    }

    /// A trace's counts are reused only in the counter that made them: a
    /// thread rendered for another model is counted again.
    #[test]
    fn a_trace_counted_by_another_counter_is_counted_again() {
        let req = request(vec![
            msg(
                Role::User,
                "Deploy the worker to eu-west-1 and check the logs.",
            ),
            msg(Role::Assistant, "Deployed; the logs show two warnings."),
        ]);
        let traced = |rc: &RequestCounter<'_>, known: Option<&PrefixTrace>| {
            let budget = (&mut RequestTokens::default(), u32::MAX);
            let (_, trace, _) = output(
                req.clone(),
                Format::OpenAiChat,
                ("gpt-4o".into(), None),
                rc,
                budget,
                known,
                (None, None),
            )
            .expect("a body");
            trace.expect("a provider body has a trace")
        };
        let o200k = traced(&rc(), None);
        let ledger = crate::tokens::TokenLedger::new(1000);
        let cl100k = crate::tokens::cl100k();
        let other = RequestCounter::for_target(
            cl100k.as_ref(),
            &ledger,
            crate::provider::Format::openai_chat_target(),
        );
        let fresh = traced(&other, None);
        assert_eq!(fresh.counted_by, "cl100k_base");
        assert_ne!(fresh.units, o200k.units, "the counters differ on this text");
        // (Taking o200k's counts would fail the check every debug build
        // makes: the trace must be what counting the body gives.)
        assert_eq!(traced(&other, Some(&o200k)), fresh);
        assert_eq!(traced(&other, Some(&fresh)), fresh);
    }

    fn refused(r: Result<RenderedOutput>) -> bool {
        matches!(r, Err(AppError::Internal(m)) if m.contains("structure check"))
    }

    /// Requests the renderer never produces: no format may hand them out.
    #[test]
    fn a_body_that_breaks_provider_rules_is_never_returned() {
        // A result whose call is not in the request at all.
        let orphan = request(vec![msg(Role::User, "hi"), result("c9")]);
        for format in Format::ALL {
            assert!(refused(output_as(orphan.clone(), format)), "{format:?}");
        }
        // A message between a call and its result: refused where the format
        // cannot repair it; Anthropic's merge and Responses' items can.
        let interleaved = request(vec![
            msg(Role::User, "hi"),
            call("c1"),
            msg(Role::User, "also"),
            result("c1"),
        ]);
        for format in Format::ALL {
            let r = output_as(interleaved.clone(), format);
            let repairable = matches!(format, Format::AnthropicMessages | Format::OpenAiResponses);
            assert_eq!(refused(r), !repairable, "{format:?}");
        }
    }

    fn render_first(request: CompactCommand) -> RenderCommand {
        RenderCommand {
            request,
            compact_first: true,
            plan_version: 0,
            format: Format::OpenAiChat,
            max_output_tokens: None,
            rehydrate_artifact_ids: Vec::new(),
            omit_pending_calls: false,
            auto_rehydrate: None,
            read_artifact_tool: false,
            search_context_tool: false,
            recall: None,
            injections: Vec::new(),
        }
    }

    /// Render with `compact_first` is one step: a call that fails commits
    /// no plan and leaves no artifact; one that succeeds returns the plan
    /// it committed, with its version.
    #[tokio::test]
    async fn render_compact_first_commits_only_what_it_rendered() {
        use crate::app::compact::tests::long_result_command;
        let app = App::offline(crate::app::Defaults::default());
        let ctx = SecurityContext::dev();
        let mut unreadable = render_first(long_result_command());
        unreadable.rehydrate_artifact_ids = vec![format!("art_{}", "0".repeat(32))];
        let e = app.render(&ctx, unreadable).await.unwrap_err();
        assert!(
            matches!(&e, AppError::NotFound(m) if m.contains("rehydrate_artifact_ids[0]")),
            "{e:?}"
        );
        assert!(app
            .current_plan(&ctx.tenant_id, "long")
            .await
            .unwrap()
            .is_none());
        assert!(app.inner.artifacts.scan(None).await.unwrap().is_empty());

        let out = app
            .render(&ctx, render_first(long_result_command()))
            .await
            .expect("renders");
        let committed = app
            .current_plan(&ctx.tenant_id, "long")
            .await
            .unwrap()
            .expect("committed");
        let compaction = out.compaction.expect("compacted");
        assert!(!compaction.artifacts.is_empty());
        assert_eq!(committed.version, 1);
        assert_eq!((out.plan.version, out.audit.plan_version), (1, 1));
        assert_eq!(*compaction.plan, *committed);
        assert_eq!(*out.plan, *committed);
        assert!(out.tokens.total <= 2_000);
    }

    /// A deletion while a call runs is forgotten again when the calls that
    /// began before it end: what they put in the caches as they end (here,
    /// a later render's entries stand for it) does not outlive them.
    #[tokio::test]
    async fn a_deletion_during_a_call_is_forgotten_again_when_it_ends() {
        use crate::app::compact::tests::long_result_command;
        let app = App::offline(crate::app::Defaults::default());
        let ctx = SecurityContext::dev();
        let key = (ctx.tenant_id.clone(), "long".to_string());
        let held = |app: &App| {
            let parts = |s: &crate::app::thread_state::ThreadState| {
                Some([
                    s.carry.is_some(),
                    s.stable.is_some(),
                    s.recall.is_some(),
                    s.trace.is_some(),
                ])
            };
            let threads = &app.inner.threads;
            threads.read(&key.0, &key.1, parts).unwrap_or_default()
        };
        let render = || app.render(&ctx, render_first(long_result_command()));
        render().await.expect("renders");
        assert_eq!(held(&app), [true; 4], "carry, part, recall, trace");
        let call = app.running();
        app.delete_thread(&ctx, "long").await.expect("deleted");
        assert_eq!(held(&app), [false; 4]);
        render().await.expect("renders again");
        assert_eq!(held(&app), [true; 4]);
        drop(call);
        assert_eq!(held(&app), [false; 4], "forgotten when the call ended");
        // With no call from before it running, a deletion is forgotten
        // once: later calls keep what they cache. (The render's background
        // work is waited for: one still running at the deletion would make
        // it wait, and forget again what later calls cached, once it ends.)
        render().await.expect("renders");
        for _ in 0..5_000 {
            if app.inner.in_flight.idle() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(
            app.inner.in_flight.idle(),
            "the render's background work ends"
        );
        app.delete_thread(&ctx, "long").await.expect("deleted");
        render().await.expect("renders");
        let later = app.running();
        drop(later);
        assert_eq!(held(&app), [true; 4]);
    }

    /// A thread's recall index follows its plans: a later render indexes
    /// what the new plan evicts, and the cache re-weighs the grown index.
    #[tokio::test]
    async fn recall_follows_the_thread_across_plans() {
        use crate::app::compact::tests::long_result_command;
        use crate::model::{Content, Message, MessageMetadata, Role};
        let app = App::offline(crate::app::Defaults::default());
        let ctx = SecurityContext::dev();
        let first = app
            .render(&ctx, render_first(long_result_command()))
            .await
            .expect("renders");
        let mut grown = long_result_command();
        let thread = Arc::make_mut(&mut grown.thread);
        let turn = thread.messages.last().map_or(0, |m| m.turn);
        for (k, (role, text)) in [
            (
                Role::Assistant,
                "worker-3 was slowest, at 499 ms in batch 617.".to_string(),
            ),
            (
                Role::User,
                "Thanks. Which batch finished in 482 ms?".to_string(),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            thread.messages.push(std::sync::Arc::new(Message {
                id: format!("late{k}"),
                role,
                content: Content::Text(text),
                tool_calls: Vec::new(),
                tool_result: None,
                turn: turn + 1,
                metadata: MessageMetadata::default(),
            }));
        }
        let second = app
            .render(&ctx, render_first(grown))
            .await
            .expect("renders");
        // Appended below the trigger: the committed plan carries over.
        assert_eq!(second.plan.version, first.plan.version);
        assert!(second.compaction.as_ref().is_some_and(|c| c.reused));
        assert!(!second.recalled.is_empty(), "the question matches the log");
        assert!(second.tokens.total <= 2_000);
        let RenderedOutput::Payload(body) = &second.output else {
            panic!("OpenAI output")
        };
        assert!(body.contains("[Recalled context"), "{body}");
    }
}

/// Renders of append sessions that keep part of the last render (see
/// [`StablePart`]) against renders of the whole thread.
#[cfg(test)]
mod kept_part_tests {
    use super::*;
    use crate::app::{Defaults, SessionInput};
    use crate::reduce::Policy;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// One turn's OpenAI messages, by kind: the shapes that decide where a
    /// render can be cut (calls answered out of order, a call answered a
    /// turn later or never, two user messages in a row, a system message
    /// in the middle).
    fn turn(kind: u8, n: usize, lines: usize, pending: &mut Option<String>) -> Vec<Value> {
        let log = |tag: &str| -> String {
            (0..lines)
                .map(|i| {
                    format!(
                        "{tag} {n}.{i}: worker-{} read {} rows\n",
                        i % 5,
                        i * 37 % 1000
                    )
                })
                .collect()
        };
        let user =
            json!({"role": "user", "content": format!("Step {n}: look at shard {}.", n % 7)});
        let mut out = Vec::new();
        if let Some(id) = pending.take() {
            if kind.is_multiple_of(2) {
                out.push(json!({"role": "tool", "tool_call_id": id, "content": log("late")}));
            }
        }
        match kind {
            0 => out.extend([
                user,
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": format!("c{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": format!("c{n}"), "content": log("log")}),
                json!({"role": "assistant", "content": format!("Shard {n} is fine.")}),
            ]),
            1 => out.extend([
                user,
                json!({"role": "assistant", "content": "Reading both.", "tool_calls": [
                    {"id": format!("c{n}a"), "type": "function", "function": {"name": "read", "arguments": "{\"f\":1}"}},
                    {"id": format!("c{n}b"), "type": "function", "function": {"name": "read", "arguments": "{\"f\":2}"}}]}),
                json!({"role": "tool", "tool_call_id": format!("c{n}b"), "content": log("second")}),
                json!({"role": "tool", "tool_call_id": format!("c{n}a"), "content": log("first")}),
                json!({"role": "assistant", "content": "Both agree."}),
            ]),
            2 => out.extend([
                user,
                json!({"role": "user", "content": "And keep it short."}),
                json!({"role": "assistant", "content": "Short it is."}),
            ]),
            3 => {
                out.extend([
                    user,
                    json!({"role": "assistant", "content": null, "tool_calls": [
                        {"id": format!("p{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
                ]);
                *pending = Some(format!("p{n}"));
            }
            4 => out.extend([
                json!({"role": "system", "content": format!("Policy {n}: answer in one line.")}),
                user,
                json!({"role": "assistant", "content": "Noted."}),
            ]),
            // A step of a tool loop: no user message.
            _ => out.extend([
                json!({"role": "assistant", "content": "Next file.", "tool_calls": [
                    {"id": format!("l{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": format!("l{n}"), "content": log("step")}),
            ]),
        }
        out
    }

    fn render_cmd(thread: Thread, budget: u32, session: SessionInput) -> RenderCommand {
        let mut request = CompactCommand::new(thread, Policy::default());
        request.model = Some("gpt-4o".into());
        request.max_input_tokens = Some(budget);
        request.system = Some("You are a careful operator.".into());
        request.session = session;
        RenderCommand {
            request,
            compact_first: true,
            plan_version: 0,
            format: Format::OpenAiChat,
            max_output_tokens: Some(512),
            rehydrate_artifact_ids: Vec::new(),
            omit_pending_calls: true,
            auto_rehydrate: None,
            read_artifact_tool: true,
            search_context_tool: false,
            recall: None,
            injections: Vec::new(),
        }
    }

    /// Runs a session of `kinds` turns, appended in chunks of `chunks`
    /// messages (or, with `resend`, the thread sent in full each time);
    /// checks each turn against the whole thread rendered on its own.
    /// Returns the turns that kept part of the last render.
    async fn session(kinds: &[(u8, usize)], chunks: &[usize], budget: u32, resend: bool) -> usize {
        let mut pending = None;
        let messages: Vec<Value> = kinds
            .iter()
            .enumerate()
            .flat_map(|(n, &(kind, lines))| turn(kind, n, lines, &mut pending))
            .collect();
        let whole = crate::provider::thread_from_json(&Value::Array(messages), "kept")
            .expect("a thread")
            .thread;
        session_of(&whole, chunks, (budget, Format::OpenAiChat), resend).await
    }

    /// [`session`] of the thread `whole`, rendered in `format`.
    async fn session_of(
        whole: &Thread,
        chunks: &[usize],
        (budget, format): (u32, Format),
        resend: bool,
    ) -> usize {
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let (mut at, mut version, mut kept) = (0, 0, 0);
        for (i, &size) in chunks.iter().enumerate() {
            let end = (at + size).min(whole.messages.len());
            if at == end {
                break;
            }
            let chunk = Thread {
                id: whole.id.clone(),
                messages: whole.messages[at..end].to_vec(),
            };
            let so_far = Thread {
                id: whole.id.clone(),
                messages: whole.messages[..end].to_vec(),
            };
            let (sent, input) = match (resend, i) {
                (true, _) => (so_far.clone(), SessionInput::Off),
                (false, 0) => (chunk, SessionInput::Start),
                (false, _) => (
                    chunk,
                    SessionInput::Append {
                        base_version: version,
                        json: None,
                    },
                ),
            };
            // A window too small for the thread fails the turn (and the
            // session stops there); a turn that rendered is rendered again
            // alone, under the plan it committed, without the part the
            // turn left (put back for the next turn).
            let mut cmd = render_cmd(sent, budget, input);
            cmd.format = format;
            let Ok(out) = app.render(&ctx, cmd).await else {
                return kept;
            };
            let key = (ctx.tenant_id.clone(), whole.id.clone());
            let threads = &app.inner.threads;
            let part = threads.read(&key.0, &key.1, |s| s.stable.clone());
            // The cache weighs a part with the thread it holds (for a
            // thread sent in full, nothing else holds it).
            if let Some(p) = &part {
                let bytes: usize = so_far.messages.iter().map(|m| m.byte_len_bound()).sum();
                assert!(p.weight() >= bytes as u64, "messages ..{end}");
            }
            threads.update(&key.0, &key.1, |s| s.stable = None);
            let mut full = render_cmd(so_far, budget, SessionInput::Off);
            full.compact_first = false;
            full.format = format;
            let alone = app
                .render(&ctx, full)
                .await
                .unwrap_or_else(|e| panic!("messages ..{end} alone: {e}"));
            assert_eq!(alone.kept, 0, "rendered in full");
            threads.update(&key.0, &key.1, |s| s.stable = part);
            assert_eq!(out.output, alone.output, "messages ..{end}");
            assert_eq!(out.tokens, alone.tokens, "messages ..{end}");
            assert_eq!(out.audit.warnings, alone.audit.warnings, "messages ..{end}");
            assert_eq!(out.recalled, alone.recalled, "messages ..{end}");
            kept += usize::from(out.kept > 0);
            if !resend {
                version = out.session.expect("a session").version;
            }
            at = end;
        }
        kept
    }

    #[test]
    fn a_steady_session_keeps_its_render_between_compactions() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        // Five kinds of turn, then a tool loop of six steps.
        let kinds: Vec<(u8, usize)> = (0..33)
            .map(|n| (if n % 11 < 5 { n % 11 } else { 5 }, 12))
            .map(|(k, l)| (k as u8, l))
            .collect();
        let chunks = vec![4; 40];
        // 33 turns in about 100 messages: about 25 appends of 4; all but
        // the compactions keep a part, whether the thread is appended to or
        // sent in full again.
        for resend in [false, true] {
            let kept = rt.block_on(session(&kinds, &chunks, 6_000, resend));
            assert!(
                kept >= 14,
                "{kept} turns kept part of the last render ({resend})"
            );
        }
    }

    /// The public agent logs in `tests/data`, replayed as sessions that
    /// append three messages a call, in every format, at a small and a
    /// larger window: every turn renders as its whole thread does.
    #[test]
    fn real_logs_replayed_as_sessions_render_as_their_whole_threads() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut kept = 0;
        for name in [
            "claude_code_rust_port.json",
            "openhands_vue_todo.json",
            "swe_agent_marshmallow.json",
            "tau_bench_airline.json",
        ] {
            let text = std::fs::read_to_string(dir.join(name)).expect("a log");
            let messages: Value = serde_json::from_str(&text).expect("json");
            let messages = messages.get("messages").cloned().unwrap_or(messages);
            let whole = crate::provider::thread_from_json(&messages, "log")
                .expect("imports")
                .thread;
            let chunks = vec![3; whole.messages.len() / 3 + 1];
            for format in Format::ALL {
                for budget in [4_000, 16_000] {
                    let k = rt.block_on(session_of(&whole, &chunks, (budget, format), false));
                    if format == Format::OpenAiChat {
                        kept += k;
                    }
                }
            }
        }
        assert!(kept > 50, "{kept} turns kept part of the last render");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn a_session_renders_what_its_whole_thread_renders(
            kinds in proptest::collection::vec((0u8..7, 1usize..40), 4..16),
            chunks in proptest::collection::vec(1usize..9, 2..30),
            budget in 1_200u32..5_000,
            resend in any::<bool>(),
        ) {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(session(&kinds, &chunks, budget, resend));
        }
    }
}
