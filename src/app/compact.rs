//! Compact: load the committed plan → reuse it, or compact on top of it →
//! write the artifacts → bind their ids and recount exactly → commit.
//!
//! The commit is a compare-and-swap, and it comes last: artifacts are written
//! first, the plan is committed only if every write succeeded and the version
//! did not move, and the artifacts are deleted again when the commit does not
//! happen — a committed plan never points at an unwritten artifact.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tracing::Instrument as _;

use crate::model::{CompactionPlan, Sensitivity, Thread};
use crate::provider::Format;
use crate::reduce::{
    compact_with, request_fingerprint, CompactRequest, Compaction, Policy, Report,
};
use crate::runtime::{blocking, compute, now_unix_ms, Call};
use crate::security::SecurityContext;
use crate::store::{ArtifactMeta, StoredPlan};
use crate::tokens::Target;

/// Artifact writes of one compaction in flight at most.
const WRITE_CONCURRENCY: usize = 8;

use super::error::{plan_store_error, store_error};
use super::{App, AppError, EngineParts, Observations, Result, Tools, UseCase};

/// A Compact call, converted and owned.
#[derive(Debug, Clone)]
pub struct CompactCommand {
    /// The thread snapshot (validated by the use case).
    pub thread: Arc<Thread>,
    /// The policy with the request's overrides applied (validated by the use case).
    pub policy: Arc<Policy>,
    /// Model; `None` = the default. Never empty.
    pub model: Option<String>,
    /// The model's input limit; `None` = the default. Zero is refused.
    pub max_input_tokens: Option<u32>,
    /// System prompt the request will carry.
    pub system: Option<String>,
    /// Tool schemas the request will carry.
    pub tools: Tools,
    /// Compare-and-swap: fail unless this is the committed version (0 = none yet).
    pub expected_version: Option<u64>,
    /// Current determinism metadata by tool call id.
    pub observations: Observations,
    /// The agent read artifacts back this turn: skip externalize and drop, so
    /// a rehydrated span is not evicted again at once.
    pub rehydrated_this_turn: bool,
    /// The form the request will be rendered in, which decides how it is
    /// counted; `None` (Compact) or neutral: the provider the model implies.
    pub format: Option<Format>,
}

impl CompactCommand {
    /// A command for `thread` with everything else at its default.
    pub fn new(thread: Thread, policy: Policy) -> Self {
        CompactCommand {
            thread: Arc::new(thread),
            policy: Arc::new(policy),
            model: None,
            max_input_tokens: None,
            system: None,
            tools: Arc::new(Vec::new()),
            expected_version: None,
            observations: Observations::new(),
            rehydrated_this_turn: false,
            format: None,
        }
    }
}

/// An artifact written by this call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrittenArtifact {
    /// The id the store assigned.
    pub artifact_id: String,
    /// The messages whose content it holds.
    pub message_ids: Vec<String>,
    /// Tokens of the content.
    pub tokens: u32,
    /// Highest sensitivity of the messages.
    pub sensitivity: Sensitivity,
    /// SHA-256 of the content.
    pub content_hash: String,
}

/// What Compact did.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactOutcome {
    /// The committed plan; `plan.version` is its store version.
    pub plan: CompactionPlan,
    /// The committed plan already had this fingerprint: nothing was compacted.
    pub reused: bool,
    /// What the pipeline did; `None` when the plan was reused.
    pub report: Option<Report>,
    /// Artifacts written by this call (none when reused).
    pub artifacts: Vec<WrittenArtifact>,
    /// The tokenizer the counts are in.
    pub tokenizer: String,
    /// What the thread as sent holds that the request leaves out (calls the
    /// conversation moved past); the report adds the pipeline's own.
    pub warnings: Vec<String>,
}

impl CompactOutcome {
    /// Request tokens without any plan.
    pub fn tokens_before(&self) -> u32 {
        self.report
            .as_ref()
            .map_or(self.plan.original_token_count, |r| r.tokens_before)
    }

    /// Exact request tokens with the plan.
    pub fn tokens_after(&self) -> u32 {
        self.plan.compacted_token_count
    }

    fn reused(plan: CompactionPlan, tokenizer: String) -> Self {
        CompactOutcome {
            plan,
            reused: true,
            report: None,
            artifacts: Vec::new(),
            tokenizer,
            warnings: Vec::new(),
        }
    }

    /// Every warning: the thread's, then the pipeline's.
    pub fn all_warnings(&self) -> Vec<String> {
        let report = self.report.as_ref().map_or(&[][..], |r| &r.warnings[..]);
        self.warnings.iter().chain(report).cloned().collect()
    }
}

/// A command resolved against the defaults, ready for the core.
struct Resolved {
    cmd: CompactCommand,
    model: String,
    max_input_tokens: u32,
    target: Target,
}

impl Resolved {
    /// The core request (one place, so the reuse check and the compaction
    /// can never disagree on what they fingerprint).
    fn request<'a>(
        &'a self,
        previous: Option<&'a CompactionPlan>,
        app: &App,
    ) -> CompactRequest<'a> {
        CompactRequest {
            thread: &self.cmd.thread,
            policy: &self.cmd.policy,
            max_input_tokens: self.max_input_tokens,
            system: self.cmd.system.as_deref(),
            tools: &self.cmd.tools,
            previous,
            observations: &self.cmd.observations,
            skip_aggressive: self.cmd.rehydrated_this_turn,
            limits: app.inner.limits,
            target: self.target,
        }
    }
}

impl App {
    /// Compacts the thread and commits the plan for the caller's tenant.
    pub async fn compact(
        &self,
        ctx: &SecurityContext,
        cmd: CompactCommand,
    ) -> Result<CompactOutcome> {
        UseCase::Compact.authorize(ctx, None)?;
        self.validate_thread(&cmd.thread)?;
        let mut cmd = cmd;
        let warnings = Self::settle_thread(&mut cmd.thread);
        cmd.policy = self.effective_policy(&cmd.policy)?;
        let mut out = self.compact_and_commit(&ctx.tenant_id, cmd).await?;
        out.warnings = warnings;
        Ok(out)
    }

    /// The committed plan of a thread, with `plan.version` set.
    pub(super) async fn current_plan(
        &self,
        tenant: &str,
        thread_id: &str,
    ) -> Result<Option<CompactionPlan>> {
        let stored = self
            .inner
            .plans
            .get(tenant, thread_id)
            .await
            .map_err(plan_store_error)?;
        Ok(stored.map(|StoredPlan { version, plan, .. }| {
            let mut plan = plan;
            plan.version = version;
            plan
        }))
    }

    /// Load → (reuse | compact → write artifacts → bind → verify → commit).
    /// The caller has validated the thread and made the policy effective.
    pub(super) async fn compact_and_commit(
        &self,
        tenant: &str,
        cmd: CompactCommand,
    ) -> Result<CompactOutcome> {
        let model = self.model(cmd.model.clone())?;
        let resolved = Arc::new(Resolved {
            target: Format::target(cmd.format, &model),
            model,
            max_input_tokens: self.max_input_tokens(cmd.max_input_tokens),
            cmd,
        });
        let parts = self.engine_parts(
            &resolved.model,
            &resolved.target,
            tenant,
            &resolved.cmd.thread.id,
        );
        let tokenizer = parts.counter.name().to_string();
        let thread_id = resolved.cmd.thread.id.clone();

        let previous = self.current_plan(tenant, &thread_id).await?;
        let current_version = previous.as_ref().map_or(0, |p| p.version);
        if let Some(expected) = resolved.cmd.expected_version {
            if expected != current_version {
                return Err(AppError::VersionConflict {
                    expected,
                    current: current_version,
                });
            }
        }
        // Fingerprinting hashes the whole thread, so the reuse check (the
        // per-turn path) runs on the blocking pool; the previous plan moves
        // into each task and back.
        // A thread without a plan has nothing to reuse: no hashing, no hop.
        let previous = match previous {
            Some(prev) => {
                let (app, r, p) = (self.clone(), Arc::clone(&resolved), parts.clone());
                let (reused, previous) = blocking(move || {
                    let fingerprint =
                        app.fingerprint(request_fingerprint(&r.request(None, &app), &p.engine()));
                    if prev.fingerprint == fingerprint {
                        (Some(prev), None)
                    } else {
                        (None, Some(prev))
                    }
                })
                .await?;
                if let Some(prev) = reused {
                    crate::telemetry::metrics().compaction(true, false, 0, 0, tenant);
                    return Ok(CompactOutcome::reused(prev, tokenizer));
                }
                previous
            }
            None => None,
        };
        // Compaction is the heavy path: the compute pool, below the
        // priority of the per-turn calls of other tenants.
        let (app, r, p) = (self.clone(), Arc::clone(&resolved), parts.clone());
        // The pool's thread works inside the call's span (reducer spans nest in it).
        let span = tracing::Span::current();
        let (compaction, previous) = compute(tenant, move || {
            let _in_call = span.enter();
            let reducers = app.reducers(&r.cmd.policy, &r.model);
            let c = compact_with(&r.request(previous.as_ref(), &app), &p.engine(), &reducers);
            let c = c.map(|mut c| {
                c.plan.fingerprint = app.fingerprint(std::mem::take(&mut c.plan.fingerprint));
                c
            });
            (c.map_err(AppError::from), previous)
        })
        .await?;
        let compaction = compaction?;
        if let Some(prev) = previous.as_ref() {
            if prev.fingerprint == compaction.plan.fingerprint {
                crate::telemetry::metrics().compaction(true, false, 0, 0, tenant);
                return Ok(CompactOutcome::reused(prev.clone(), tokenizer));
            }
        }
        let upgrade = super::summaries::UpgradeInput {
            tenant: tenant.to_string(),
            thread: Arc::clone(&resolved.cmd.thread),
            policy: Arc::clone(&resolved.cmd.policy),
            parts: parts.clone(),
            previous: previous.map(Arc::new),
        };

        let new_thread = current_version == 0;
        let pending_bytes = compaction
            .pending
            .iter()
            .map(|a| a.content.len() as u64)
            .sum();
        self.check_quotas(tenant, new_thread, pending_bytes).await?;
        // Held from the first write to the commit: a DeleteThread of this
        // thread cannot remove these artifacts before the plan that points
        // at them is committed (or, after it, leave that plan behind).
        let _thread = self.lock_thread(tenant, &thread_id).await;
        let (ids, written) = self
            .write_artifacts(tenant, &thread_id, &compaction)
            .await?;
        let bound = blocking({
            let resolved = Arc::clone(&resolved);
            move || bind(compaction, &ids, &resolved, &parts)
        })
        .await
        .map_err(AppError::from)
        .and_then(|r| r);
        // Sync mode: the LLM writes the new summaries before the commit.
        let bound = match bound {
            Ok(c) if self.upgrades_now() => {
                self.upgrade_summaries(&upgrade, c).await.map(|(c, _)| c)
            }
            other => other,
        };
        let bound = match bound {
            Ok(c) => c,
            Err(e) => {
                self.delete_artifacts(tenant, &thread_id, &written).await;
                return Err(e);
            }
        };
        // Background mode: the bound compaction, for the upgrade after the commit.
        let later = self
            .llm_summaries()
            .is_some()
            .then(|| bound.clone())
            .filter(|_| !self.upgrades_now());
        let (mut plan, report) = (bound.plan, bound.report);
        match self
            .inner
            .plans
            .commit(tenant, &thread_id, &plan, current_version)
            .await
        {
            Ok(version) => {
                plan.version = version;
                let capture =
                    crate::telemetry::capture_content().then_some(self.inner.redactor.as_ref());
                lifecycle_events(
                    &resolved,
                    &plan,
                    &report,
                    upgrade.previous.as_deref(),
                    capture,
                );
                crate::telemetry::metrics().compaction(
                    false,
                    report.triggered,
                    report.tokens_before,
                    report.tokens_after,
                    tenant,
                );
                self.record_stored(tenant, new_thread, pending_bytes);
                if let Some(c) = later {
                    self.schedule_upgrade(upgrade, c, version);
                }
            }
            Err(e) => {
                self.delete_artifacts(tenant, &thread_id, &written).await;
                return Err(plan_store_error(e));
            }
        }
        Ok(CompactOutcome {
            plan,
            reused: false,
            report: Some(report),
            artifacts: written,
            tokenizer,
            warnings: Vec::new(),
        })
    }

    /// Writes every pending artifact; on the first failure deletes what was
    /// written and fails. Returns placeholder → id and what was written.
    async fn write_artifacts(
        &self,
        tenant: &str,
        thread_id: &str,
        compaction: &Compaction,
    ) -> Result<(BTreeMap<String, String>, Vec<WrittenArtifact>)> {
        let created = now_unix_ms();
        // Up to WRITE_CONCURRENCY writes in flight: each is a round trip
        // (and a KMS call) on S3, and a compaction may archive and
        // externalize dozens of objects. The set aborts what is still
        // running if this call is dropped.
        let limit = Arc::new(tokio::sync::Semaphore::new(WRITE_CONCURRENCY));
        let mut set = tokio::task::JoinSet::new();
        // The writes run as this call: a deadline does not free the tenant's
        // slot while a write is still blocking.
        let call = Call::current();
        for (k, a) in compaction.pending.iter().enumerate() {
            let meta = ArtifactMeta {
                tenant: tenant.to_string(),
                thread_id: thread_id.to_string(),
                created_at_unix_ms: created,
                ttl_seconds: self.artifact_ttl(),
                sensitivity: a.sensitivity,
                key_id: None,
                content_hash: a.content_hash.clone(),
                size_bytes: a.content.len() as u64,
                message_ids: a.message_ids.clone(),
            };
            let (store, limit, content) = (
                Arc::clone(&self.inner.artifacts),
                Arc::clone(&limit),
                a.content.clone(),
            );
            // A span per write (sizes and ids, no content); the store's own
            // calls (S3, KMS) nest under it.
            let span = tracing::info_span!(
                "compactd.artifact",
                otel.name = "artifact put",
                otel.status_code = tracing::field::Empty,
                compactd.artifact_id = tracing::field::Empty,
                compactd.artifact.bytes = crate::telemetry::int(a.content.len()),
                compactd.artifact.messages = crate::telemetry::int(a.message_ids.len()),
                compactd.sensitivity = a.sensitivity.as_str(),
            );
            let write = async move {
                let _permit = limit.acquire_owned().await;
                let put = store.put(&meta, content.as_bytes()).await;
                let span = tracing::Span::current();
                match &put {
                    Ok(id) => span.record("compactd.artifact_id", id.as_str()),
                    Err(_) => span.record("otel.status_code", "ERROR"),
                };
                (k, put)
            }
            .instrument(span);
            match call.clone() {
                Some(c) => set.spawn(c.within(write)),
                None => set.spawn(write),
            };
        }
        let mut results: Vec<Option<Result<String>>> =
            (0..compaction.pending.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((k, r)) => {
                    results[k] = Some(r.map_err(|e| match store_error(e, "artifact") {
                        AppError::NotFound(_) => {
                            AppError::Internal("artifact store rejected a write".into())
                        }
                        other => other,
                    }))
                }
                Err(e) => return Err(AppError::Internal(format!("artifact write task: {e}"))),
            }
        }
        // In pending order: what was written, and the first failure.
        let mut ids = BTreeMap::new();
        let mut written: Vec<WrittenArtifact> = Vec::with_capacity(compaction.pending.len());
        let mut failure = None;
        for (a, r) in compaction.pending.iter().zip(results) {
            match r {
                Some(Ok(id)) => {
                    ids.insert(a.placeholder.clone(), id.clone());
                    written.push(WrittenArtifact {
                        artifact_id: id,
                        message_ids: a.message_ids.clone(),
                        tokens: a.tokens,
                        sensitivity: a.sensitivity,
                        content_hash: a.content_hash.clone(),
                    });
                }
                Some(Err(e)) => {
                    failure.get_or_insert(e);
                }
                None => {
                    failure.get_or_insert(AppError::Internal(
                        "an artifact write did not finish".into(),
                    ));
                }
            }
        }
        if let Some(e) = failure {
            self.delete_artifacts(tenant, thread_id, &written).await;
            return Err(e);
        }
        Ok((ids, written))
    }

    /// Best effort: an artifact that no plan references is garbage, not a
    /// correctness problem, so failures are logged, not returned.
    async fn delete_artifacts(&self, tenant: &str, thread_id: &str, written: &[WrittenArtifact]) {
        for a in written {
            if let Err(e) = self
                .inner
                .artifacts
                .delete(tenant, thread_id, &a.artifact_id)
                .await
            {
                tracing::warn!(artifact_id = %a.artifact_id, error = %e, "could not delete an uncommitted artifact");
            }
        }
    }
}

/// The compaction's lifecycle events (the names of the seeds' event
/// schema), on the call's span: counts, ids and reasons, never content.
/// Most bytes of content one captured event attribute carries.
const CAPTURED_BYTES: usize = 8 * 1024;

fn lifecycle_events(
    resolved: &Resolved,
    plan: &CompactionPlan,
    report: &Report,
    previous: Option<&CompactionPlan>,
    capture: Option<&crate::redact::Redactor>,
) {
    for r in report.per_reducer.iter().filter(|r| r.tokens_freed > 0) {
        crate::telemetry::metrics().tokens_freed(&r.name, u64::from(r.tokens_freed));
    }
    // The sizes and summaries below are measured only for someone listening.
    if !crate::telemetry::events_enabled() {
        return;
    }
    let b = &report.budget;
    let max = f64::from(b.max_input_tokens.max(1));
    tracing::info!(
        target: crate::telemetry::EVENTS,
        model = %resolved.model,
        t_est = crate::telemetry::int(report.tokens_before),
        max_tokens = crate::telemetry::int(b.max_input_tokens),
        usage_pct = f64::from(report.tokens_before) / max,
        fixed_tokens = crate::telemetry::int(b.fixed_tokens),
        system_tokens = crate::telemetry::int(b.system_tokens),
        tools_schema_tokens = crate::telemetry::int(b.tool_tokens),
        framing_tokens = crate::telemetry::int(b.fixed_tokens.saturating_sub(b.system_tokens + b.tool_tokens)),
        message_tokens = crate::telemetry::int(report.tokens_before.saturating_sub(b.fixed_tokens)),
        "compact.token_estimate"
    );
    tracing::info!(
        target: crate::telemetry::EVENTS,
        triggered = report.triggered,
        reason = if report.triggered {
            "tokens above the trigger"
        } else {
            "tokens at or below the trigger"
        },
        trigger_tokens = crate::telemetry::int(b.trigger),
        target_tokens = crate::telemetry::int(b.target),
        hard_limit_tokens = crate::telemetry::int(b.hard_limit),
        trigger_ratio = resolved.cmd.policy.trigger_ratio,
        target_ratio = resolved.cmd.policy.target_ratio,
        "compact.trigger_decision"
    );
    for r in report.per_reducer.iter().filter(|r| r.tokens_freed > 0) {
        tracing::info!(
            target: crate::telemetry::EVENTS,
            strategy = %r.name,
            tokens_freed = crate::telemetry::int(r.tokens_freed),
            "compact.strategy_applied"
        );
    }
    let old: std::collections::HashSet<&[String]> = previous
        .map(|p| {
            p.summarizations
                .iter()
                .map(|r| r.span.message_ids.as_slice())
                .collect()
        })
        .unwrap_or_default();
    let created: Vec<&crate::model::SummarizationRecord> = plan
        .summarizations
        .iter()
        .filter(|s| !old.contains(s.span.message_ids.as_slice()))
        .collect();
    // Sizes by id, only when there is a summary to measure.
    let sizes: std::collections::HashMap<&str, usize> = if created.is_empty() {
        Default::default()
    } else {
        resolved
            .cmd
            .thread
            .messages
            .iter()
            .map(|m| (m.id.as_str(), m.byte_len()))
            .collect()
    };
    for s in created {
        let input_bytes: usize = s
            .span
            .message_ids
            .iter()
            .filter_map(|id| sizes.get(id.as_str()))
            .sum();
        let rendered = s.summary.render_as_message();
        let summary_bytes = rendered.len().max(1);
        // Opt-in content capture: the summary as the prompt shows it,
        // redacted again and bounded.
        let payload = capture.map(|r| {
            crate::summarize::text::head(&r.redact(&rendered), CAPTURED_BYTES).to_string()
        });
        tracing::info!(
            target: crate::telemetry::EVENTS,
            strategy = if s.summarizer_id.is_empty() {
                crate::summarize::EXTRACTIVE_ID
            } else {
                s.summarizer_id.as_str()
            },
            input_messages = crate::telemetry::int(s.span.message_ids.len()),
            summary_tokens = crate::telemetry::int(s.summary_token_count),
            first_message_id = %s.span.start_message_id(),
            last_message_id = %s.span.end_message_id(),
            entries_left_out = crate::telemetry::int(s.summary.omitted),
            input_bytes = crate::telemetry::int(input_bytes),
            summary_bytes = crate::telemetry::int(summary_bytes),
            // As the seeds define it: summary size over input size (by bytes).
            compression_ratio = summary_bytes as f64 / input_bytes.max(1) as f64,
            payload = payload.as_deref(),
            "compact.summary_created"
        );
    }
    let dropped: Vec<&str> = plan
        .drops
        .iter()
        .flat_map(|d| d.span.message_ids.iter().map(String::as_str))
        .collect();
    if !dropped.is_empty() {
        // At most 50 ids: enough to find a message, bounded in size.
        let ids: Vec<&str> = dropped.iter().copied().take(50).collect();
        tracing::info!(
            target: crate::telemetry::EVENTS,
            pruned_count = crate::telemetry::int(dropped.len()),
            pruned_ids = %ids.join(","),
            kept_recent_turns = crate::telemetry::int(report.keep_recent_turns),
            kept_tool_pairs = crate::telemetry::int(report.keep_tool_io_pairs),
            "compact.pruned_messages"
        );
    }
    tracing::info!(
        target: crate::telemetry::EVENTS,
        tokens_before = crate::telemetry::int(report.tokens_before),
        tokens_after = crate::telemetry::int(report.tokens_after),
        target_use = report.target_use(),
        warnings = crate::telemetry::int(report.warnings.len()),
        "compact.completed"
    );
}

/// Binds the store's ids and recounts exactly (only pointers and summaries
/// are counted again); a bound plan over the hard limit is a bug, reported
/// rather than committed.
fn bind(
    mut compaction: Compaction,
    ids: &BTreeMap<String, String>,
    resolved: &Resolved,
    parts: &EngineParts,
) -> Result<Compaction> {
    let hard_limit = compaction.report.budget.hard_limit;
    let total = compaction.bind(
        ids,
        &resolved.cmd.thread,
        &resolved.cmd.policy.render,
        &parts.engine(),
    );
    if total > hard_limit {
        return Err(AppError::Internal(format!(
            "bound plan renders to {total} tokens, over the hard limit {hard_limit}"
        )));
    }
    Ok(compaction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Defaults;
    use crate::model::ToolSchema;
    use crate::reduce::compact;

    fn resolved() -> Resolved {
        let thread = crate::provider::thread_from_json(
            &serde_json::json!([
                {"role": "user", "content": "Find order A-17 and tell me its status."},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"A-17\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "order A-17: shipped"},
                {"role": "assistant", "content": "A-17 has shipped."}
            ]),
            "t",
        )
        .expect("thread")
        .thread;
        let mut cmd = CompactCommand::new(thread, Policy::default());
        cmd.system = Some("be brief".into());
        cmd.tools = Arc::new(vec![ToolSchema {
            name: "search".into(),
            description: "web search".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]);
        Resolved {
            cmd,
            model: "gpt-4o".into(),
            max_input_tokens: 50_000,
            target: Format::openai_chat_target(),
        }
    }

    /// The reuse check fingerprints the request without the previous plan;
    /// the pipeline fingerprints it with one. If the two drifted, every
    /// unchanged turn would recompact instead of reusing the committed plan.
    #[test]
    fn the_reuse_check_fingerprints_what_compaction_does() {
        let app = App::offline(Defaults::default());
        let r = resolved();
        let parts = app.engine_parts(&r.model, &r.target, "t", &r.cmd.thread.id);
        let engine = parts.engine();
        let fresh = compact(&r.request(None, &app), &engine).expect("compacts");
        let fast = request_fingerprint(&r.request(None, &app), &engine);
        assert_eq!(fresh.plan.fingerprint, fast);
        let again = compact(&r.request(Some(&fresh.plan), &app), &engine).expect("compacts");
        assert_eq!(again.plan.fingerprint, fast);
    }

    #[tokio::test]
    async fn an_unchanged_thread_reuses_the_committed_plan() {
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let first = app.compact(&ctx, resolved().cmd).await.expect("first");
        assert!(!first.reused);
        let second = app.compact(&ctx, resolved().cmd).await.expect("second");
        assert!(second.reused);
        assert_eq!(second.plan, first.plan);
        let mut zero = resolved().cmd;
        zero.max_input_tokens = Some(0);
        let e = app.compact(&ctx, zero).await.unwrap_err();
        assert_eq!(e.field(), "max_input_tokens");
        let mut unnamed = resolved().cmd;
        unnamed.model = Some(String::new());
        let e = app.compact(&ctx, unnamed).await.unwrap_err();
        assert_eq!(e.field(), "model");
    }
}
