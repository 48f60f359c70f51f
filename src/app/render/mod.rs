//! Render: the plan (committed, or compacted in the same call) → fetch the
//! artifacts to inject → fit them into the rehydration reserve → render →
//! count → the requested output form.

use crate::provider::Format;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::{AuditRecord, CompactionPlan};
use crate::model::{Thread, ToolSchema};
use crate::recall::RecalledPassage;
use crate::render::prefix::PrefixTrace;
use crate::render::quality::QualitySignals;
use crate::render::stable::StablePart;
use crate::render::{RehydrationReport, Request, RequestCounter, RequestTokens};
use crate::runtime::blocking;
use crate::security::SecurityContext;
use crate::telemetry::events;

use super::compact::{own_start, Resolved, Staging};
use super::error::artifact_read_error;
use super::rehydrate::check_sensitivity;
use super::{App, AppError, CompactCommand, CompactOutcome, Result, UseCase};

mod rehydration;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
mod turn;

use rehydration::*;
use turn::*;

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
    /// How the body addresses the provider's prompt cache.
    pub prompt_cache: crate::render::PromptCache,
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
    /// Tokens of the body the provider is expected to read from its
    /// prompt cache; `None` as for `unchanged_prefix_tokens`.
    pub expected_cache_read_tokens: Option<u32>,
    /// The append session after the call, when the request used one.
    pub session: Option<super::SessionState>,
    /// What the counts are based on.
    pub counting: crate::tokens::calibration::Counting,
    /// What the next render of this thread may keep (taken by the app
    /// before the outcome is returned).
    pub(crate) stable: Option<Arc<StablePart>>,
    /// Thread messages whose render was kept from the last one (0: all
    /// were rendered).
    pub(crate) kept: usize,
}

/// Sets the provider's reports beside what the previous render expected of
/// the body they answer (metrics per tenant and format); a report for
/// another body is named in the warnings and counts nowhere. Returns the
/// reports that answer it.
fn reported_usage(
    usage: &[crate::render::cache::ProviderUsage],
    previous: Option<&PrefixTrace>,
    tenant: &str,
    format: &'static str,
    audit: &mut AuditRecord,
) -> Vec<crate::render::cache::CacheObservation> {
    let (seen, other) = crate::render::cache::observe(previous, usage);
    for o in &seen {
        crate::telemetry::metrics::metrics().prompt_cache(o, format, tenant);
    }
    for i in other {
        audit.warnings.push(format!(
            "usage[{i}]: body_digest does not name the body the previous render of this thread returned; not counted"
        ));
    }
    seen
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
        let (usage, format) = (cmd.request.usage.clone(), cmd.format.name());
        let thread_id = cmd.request.thread.id.clone();
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
            // Set only when the render had a previous one to reckon from.
            let expected_cache_read_tokens =
                done.out.trace.as_ref().and_then(|t| t.expected_cache_read);
            let mut out = done.out;
            let seen = reported_usage(
                &usage,
                done.previous.as_deref(),
                &ctx.tenant_id,
                format,
                &mut out.audit,
            );
            if let Some(trace) = &out.trace {
                self.inner.threads.update(&ctx.tenant_id, &thread_id, |s| {
                    crate::render::cache::record_turn(&mut s.cache_turns, trace, &seen)
                });
            }
            Ok(RenderOutcome {
                unchanged_prefix_tokens,
                expected_cache_read_tokens,
                session: done.session,
                ..out
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
        let model = self.model(cmd.request.model.clone())?;
        let learned = self
            .calibrate(
                &ctx.tenant_id,
                &model,
                &cmd.request.usage,
                previous.as_deref(),
            )
            .await;
        let mut out = self.render_retrying(ctx, cmd, previous).await?;
        out.audit.warnings.extend(learned);
        Ok(out)
    }

    /// [`App::render_thread`] once counting is calibrated.
    async fn render_retrying(
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
            let recall =
                recall_on.then(|| (app.recall_index(&tenant, &cmd, &plan), recall_settings));
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
            let audit = app.turn_audit(
                (&plan, &cmd.request.thread),
                (parts.counter.name(), &summarizer_id),
                &done,
                (thread_warnings, requester),
            );
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
                expected_cache_read_tokens: None,
                session: None,
                counting: crate::tokens::calibration::Counting::of(parts.counter.as_ref()),
                stable: done.next.map(Arc::new),
                kept,
            };
            Ok::<_, AppError>((out, quality))
        })
        .await?
    }

    /// The thread's recall index, brought up to `plan`. A thread sent in
    /// full again is known to extend the last one when the carry check
    /// compared them.
    fn recall_index(
        &self,
        tenant: &str,
        cmd: &RenderCommand,
        plan: &CompactionPlan,
    ) -> RecallIndexRef {
        let thread = &cmd.request.thread;
        let extends = cmd
            .request
            .extends
            .clone()
            .or_else(|| self.carry_extends(tenant, thread));
        let redactor = &self.inner.redactor;
        self.inner
            .threads
            .recall(tenant, thread, extends.as_ref(), plan, redactor)
    }

    /// The audit record of a turn: what the plan did, what was read back,
    /// and every warning (the thread's, the render's, the redaction's).
    fn turn_audit(
        &self,
        (plan, thread): (&CompactionPlan, &Thread),
        (counter, summarizer): (&str, &str),
        done: &Turn,
        (warnings, requester): (Vec<String>, String),
    ) -> AuditRecord {
        let mut audit = audit(plan, counter, summarizer, &done.rehydrated);
        audit.turns_since_compaction = plan.turns_since_compaction(thread.current_turn());
        audit.warnings = warnings;
        audit.warnings.extend(done.warnings.iter().cloned());
        audit.warnings.extend(self.inner.redactor.off_warnings());
        audit.requester = requester;
        audit
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
