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
    compact_with, request_fingerprint, CompactRequest, Compaction, PendingArtifact, Policy, Report,
};
use crate::runtime::{blocking, compute, now_unix_ms, Call};
use crate::security::SecurityContext;
use crate::store::{ArtifactMeta, StoredPlan};
use crate::tokens::Target;

/// Artifact writes of one compaction in flight at most.
const WRITE_CONCURRENCY: usize = 8;

/// Lost races a Compact without `expected_version` starts again after
/// (each time on the plan that won), before it answers ABORTED.
pub(super) const UNCONDITIONAL_RETRIES: u32 = 2;

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
    /// The workspace slot of the assembled context (bootstrap files are
    /// already in `system`): a fixed part of the request.
    pub workspace: Option<crate::render::RenderedMessage>,
    /// Compare-and-swap: fail unless this is the committed version (0 = none yet).
    pub expected_version: Option<u64>,
    /// Current determinism metadata by tool call id.
    pub observations: Observations,
    /// The agent read artifacts back this turn: skip externalize and drop, so
    /// a rehydrated span is not evicted again at once.
    pub rehydrated_this_turn: bool,
    /// How the caller's task went, when it ended since its last call: a
    /// quality signal, counted beside whether the prompt was compacted.
    pub task_outcome: Option<TaskOutcome>,
    /// What the provider reported for the body the thread's last render
    /// sent: the count calibration learns from it.
    pub usage: Vec<crate::render::cache::ProviderUsage>,
    /// The form the request will be rendered in, which decides how it is
    /// counted; `None` (Compact) or neutral: the provider the model implies.
    pub format: Option<Format>,
    /// Whether `thread` is the whole thread, kept or not, or what was
    /// appended to an append session.
    pub session: super::SessionInput,
    /// The thread `thread` holds first, with only appended messages after
    /// it (an append session's base, or the last thread sent in full when
    /// the edge shared its messages), when known: the per-turn path then
    /// need not compare them. Set by the session or the edge, never from
    /// what a request says.
    pub(crate) extends: Option<Arc<Thread>>,
}

/// What the request's own thread was found to extend (a thread sent in
/// full whose messages the edge shared with the last one sent), while the
/// session hands over that same thread to run: another (an append
/// session's) extends what the session says.
pub(super) fn own_start(cmd: &mut CompactCommand, thread: &Arc<Thread>) -> Option<Arc<Thread>> {
    cmd.extends
        .take()
        .filter(|_| Arc::ptr_eq(&cmd.thread, thread))
}

/// How a task ended, as the caller reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
    /// The agent finished the task.
    Succeeded,
    /// It did not.
    Failed,
}

impl TaskOutcome {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Succeeded => "succeeded",
            TaskOutcome::Failed => "failed",
        }
    }
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
            workspace: None,
            expected_version: None,
            observations: Observations::new(),
            rehydrated_this_turn: false,
            task_outcome: None,
            usage: Vec::new(),
            format: None,
            session: super::SessionInput::Off,
            extends: None,
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
    pub plan: Arc<CompactionPlan>,
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
    /// The append session after the call, when the request used one.
    pub session: Option<super::SessionState>,
    /// Labels of the pinned messages, in thread order, each once (also
    /// when the plan was reused: the caller's rules are still in force).
    pub pinned_labels: Vec<String>,
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

    pub(super) fn reused(plan: CompactionPlan, tokenizer: String, cmd: &CompactCommand) -> Self {
        CompactOutcome {
            plan: Arc::new(plan),
            reused: true,
            report: None,
            artifacts: Vec::new(),
            tokenizer,
            warnings: Vec::new(),
            session: None,
            pinned_labels: crate::reduce::pinned_labels_of(&cmd.thread, &cmd.policy),
        }
    }

    /// Every warning: the thread's, then the pipeline's.
    pub fn all_warnings(&self) -> Vec<String> {
        let report = self.report.as_ref().map_or(&[][..], |r| &r.warnings[..]);
        self.warnings.iter().chain(report).cloned().collect()
    }
}

/// A command resolved against the defaults once per call, ready for the core.
pub(super) struct Resolved {
    pub(super) cmd: CompactCommand,
    pub(super) model: String,
    pub(super) max_input_tokens: u32,
    pub(super) target: Target,
    pub(super) parts: EngineParts,
}

impl Resolved {
    /// The core request (one place, so the reuse check and the compaction
    /// can never disagree on what they fingerprint).
    pub(super) fn request<'a>(
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
            workspace: self.cmd.workspace.as_ref(),
            previous,
            observations: &self.cmd.observations,
            skip_aggressive: self.cmd.rehydrated_this_turn,
            limits: app.inner.limits,
            target: self.target,
        }
    }
}

/// What staging a compaction produced: the committed plan again, or a new
/// one written and bound but not committed.
// Made and taken apart once per call: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Staging {
    /// The committed plan already answers this request.
    Reused(CompactOutcome),
    /// A new plan waiting for [`App::commit`] or [`App::abandon`].
    Staged(Staged),
}

/// The committed plan, as the reuse check found it.
enum Prior {
    /// It answers the request as it stands.
    Unchanged(CompactionPlan),
    /// The request changed: compact on top of it.
    Changed(CompactionPlan),
}

/// A compaction whose artifacts are written and whose plan is bound and
/// verified, not yet committed. It holds the thread's lock: a DeleteThread
/// cannot remove its artifacts before the plan that points at them is
/// committed (or, after it, leave that plan behind).
pub(super) struct Staged {
    tenant: String,
    resolved: Arc<Resolved>,
    /// The bound plan; its version is set by the commit.
    pub(super) plan: CompactionPlan,
    report: Report,
    written: Vec<WrittenArtifact>,
    base_version: u64,
    pending_bytes: u64,
    upgrade: super::summaries::UpgradeInput,
    /// Background mode: the bound compaction, for the upgrade after the commit.
    later: Option<Compaction>,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

impl App {
    /// Compacts the thread and commits the plan for the caller's tenant.
    pub async fn compact(
        &self,
        ctx: &SecurityContext,
        cmd: CompactCommand,
    ) -> Result<CompactOutcome> {
        UseCase::Compact.authorize(ctx, None)?;
        self.held(async move {
            let (sent, input) = (Arc::clone(&cmd.thread), cmd.session.clone());
            let outcome = cmd.task_outcome;
            let basis = self
                .outcome_basis(outcome, &ctx.tenant_id, &cmd.thread.id)
                .await;
            let run = |thread: Arc<Thread>, extends: Option<Arc<Thread>>, previous| {
                let mut cmd = cmd;
                let extends = extends.or_else(|| own_start(&mut cmd, &thread));
                self.compact_thread(
                    ctx,
                    CompactCommand {
                        thread,
                        extends,
                        ..cmd
                    },
                    previous,
                )
            };
            let done = self
                .in_session(&ctx.tenant_id, sent, input, run, |_| None)
                .await?;
            super::report_outcome(outcome, basis.as_deref(), &ctx.tenant_id);
            Ok(CompactOutcome {
                session: done.session,
                ..done.out
            })
        })
        .await
    }

    /// [`App::compact`] of the whole thread.
    /// `previous` is the body the thread's last render sent, which
    /// `cmd.usage` reports on.
    async fn compact_thread(
        &self,
        ctx: &SecurityContext,
        cmd: CompactCommand,
        previous: Option<Arc<crate::render::prefix::PrefixTrace>>,
    ) -> Result<CompactOutcome> {
        self.validate_thread(&ctx.tenant_id, &cmd.thread, cmd.extends.as_ref())?;
        let mut cmd = cmd;
        let mut warnings = Self::settle_thread(&mut cmd.thread, &mut cmd.extends);
        cmd.policy = self.effective_policy(&cmd.policy)?;
        let model = self.model(cmd.model.clone())?;
        let (tenant, usage) = (&ctx.tenant_id, &cmd.usage);
        let learned = self
            .calibrate(tenant, &model, usage, previous.as_deref())
            .await;
        warnings.extend(learned);
        let resolved = self.resolve(&ctx.tenant_id, cmd)?;
        let mut lost = 0;
        let mut out = loop {
            let staged = match self.stage(&ctx.tenant_id, Arc::clone(&resolved)).await? {
                Staging::Reused(out) => break out,
                Staging::Staged(staged) => staged,
            };
            match self.commit(staged).await {
                // A call without `expected_version` that another replica's
                // commit beat builds on that commit instead.
                Err(AppError::VersionConflict { .. })
                    if resolved.cmd.expected_version.is_none() && lost < UNCONDITIONAL_RETRIES =>
                {
                    lost += 1;
                }
                done => break done?,
            }
        };
        out.warnings = warnings;
        Ok(out)
    }

    /// The command resolved against the defaults: model, window, what it is
    /// counted for and the engine's parts.
    pub(super) fn resolve(&self, tenant: &str, cmd: CompactCommand) -> Result<Arc<Resolved>> {
        let model = self.model(cmd.model.clone())?;
        let target = Format::target(cmd.format, &model);
        let parts = self.engine_parts(&model, &target, tenant, &cmd.thread.id);
        Ok(Arc::new(Resolved {
            max_input_tokens: self.max_input_tokens(cmd.max_input_tokens),
            target,
            model,
            parts,
            cmd,
        }))
    }

    /// The committed plan of a thread, with `plan.version` set.
    pub(super) async fn current_plan(
        &self,
        tenant: &str,
        thread_id: &str,
    ) -> Result<Option<Arc<CompactionPlan>>> {
        // Every store hands the plan out with `plan.version` set to its
        // store version.
        let stored = self
            .inner
            .plans
            .get(tenant, thread_id)
            .await
            .map_err(plan_store_error)?;
        Ok(stored.map(|StoredPlan { plan, .. }| plan))
    }

    /// Load → (reuse | lock → compact → write artifacts → bind → verify):
    /// all of Compact but the commit. The caller has validated the thread
    /// and made the policy effective.
    ///
    /// Calls on one thread compact one at a time on a replica, and a call
    /// that had to wait for another reads the plan again before it
    /// compacts: the other's commit usually answers it (reused, or ABORTED
    /// at once when it set `expected_version`), so a fan-out of one turn
    /// costs one compaction, not one each behind the lock. Across replicas
    /// the store's conditional write decides.
    pub(super) async fn stage(&self, tenant: &str, resolved: Arc<Resolved>) -> Result<Staging> {
        let thread_id = resolved.cmd.thread.id.clone();
        let mut waited = None;
        loop {
            let previous = match self.prior(tenant, &resolved).await? {
                Ok(out) => return Ok(Staging::Reused(out)),
                Err(previous) => previous,
            };
            let lock = match waited.take() {
                Some(lock) => lock,
                None => match self.try_lock_thread(tenant, &thread_id) {
                    Some(lock) => lock,
                    None => {
                        waited = Some(self.lock_thread(tenant, &thread_id).await);
                        continue;
                    }
                },
            };
            return self.stage_locked(tenant, resolved, previous, lock).await;
        }
    }

    /// The committed plan, checked against `expected_version`, as the
    /// answer when it still answers the request (carried or unchanged).
    async fn prior(
        &self,
        tenant: &str,
        resolved: &Arc<Resolved>,
    ) -> Result<std::result::Result<CompactOutcome, Option<CompactionPlan>>> {
        let previous = self.current_plan(tenant, &resolved.cmd.thread.id).await?;
        let base_version = previous.as_ref().map_or(0, |p| p.version);
        if let Some(expected) = resolved.cmd.expected_version {
            if expected != base_version {
                return Err(AppError::VersionConflict {
                    expected,
                    current: base_version,
                });
            }
        }
        let Some(committed) = previous else {
            return Ok(Err(None));
        };
        let committed = match self
            .carried(tenant, resolved, Arc::unwrap_or_clone(committed))
            .await?
        {
            Ok(out) => {
                crate::telemetry::metrics().compaction(true, false, 0, 0, tenant);
                return Ok(Ok(out));
            }
            Err(committed) => committed,
        };
        Ok(match self.unchanged(resolved, committed).await? {
            Prior::Unchanged(plan) => Ok(reuse(tenant, resolved, plan)),
            Prior::Changed(previous) => Err(Some(previous)),
        })
    }

    /// [`App::stage`] under the thread's lock, from the committed plan
    /// `previous` that does not answer the request.
    async fn stage_locked(
        &self,
        tenant: &str,
        resolved: Arc<Resolved>,
        previous: Option<CompactionPlan>,
        lock: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<Staging> {
        let thread_id = resolved.cmd.thread.id.clone();
        let base_version = previous.as_ref().map_or(0, |p| p.version);
        let (compaction, previous) = self.compute(tenant, &resolved, previous).await?;
        if let Some(prev) = previous.as_ref() {
            if prev.fingerprint == compaction.plan.fingerprint {
                return Ok(Staging::Reused(reuse(tenant, &resolved, prev.clone())));
            }
        }
        let upgrade = super::summaries::UpgradeInput {
            tenant: tenant.to_string(),
            thread: Arc::clone(&resolved.cmd.thread),
            policy: Arc::clone(&resolved.cmd.policy),
            parts: resolved.parts.clone(),
            previous: previous.map(Arc::new),
        };
        let pending_bytes = compaction
            .pending
            .iter()
            .map(|a| a.content.len() as u64)
            .sum();
        self.check_quotas(tenant, base_version == 0, pending_bytes)
            .await?;
        let (ids, written) = self
            .write_artifacts(tenant, &thread_id, &compaction)
            .await?;
        let bound = match self.bind(&resolved, &upgrade, compaction, &ids).await {
            Ok(c) => c,
            Err(e) => {
                self.delete_artifacts(tenant, &thread_id, &written).await;
                return Err(e);
            }
        };
        let later = self
            .llm_summaries()
            .is_some()
            .then(|| bound.clone())
            .filter(|_| !self.upgrades_now());
        Ok(Staging::Staged(Staged {
            tenant: tenant.to_string(),
            resolved,
            plan: bound.plan,
            report: bound.report,
            written,
            base_version,
            pending_bytes,
            upgrade,
            later,
            _lock: lock,
        }))
    }

    /// The committed plan when the request fingerprints as it did (the
    /// per-turn path), else the plan to compact on top of. Fingerprinting
    /// hashes the whole thread, so it runs on the blocking pool.
    async fn unchanged(&self, resolved: &Arc<Resolved>, prev: CompactionPlan) -> Result<Prior> {
        let (app, r) = (self.clone(), Arc::clone(resolved));
        Ok(blocking(move || {
            let fingerprint = app.fingerprint(request_fingerprint(
                &r.request(None, &app),
                &r.parts.engine(),
            ));
            if prev.fingerprint == fingerprint {
                Prior::Unchanged(prev)
            } else {
                Prior::Changed(prev)
            }
        })
        .await?)
    }

    /// Runs the pipeline on the compute pool, below the priority of the
    /// per-turn calls of other tenants; the previous plan moves into the
    /// task and back.
    async fn compute(
        &self,
        tenant: &str,
        resolved: &Arc<Resolved>,
        previous: Option<CompactionPlan>,
    ) -> Result<(Compaction, Option<CompactionPlan>)> {
        let (app, r) = (self.clone(), Arc::clone(resolved));
        // The pool's thread works inside the call's span (reducer spans nest in it).
        let span = tracing::Span::current();
        let (compaction, previous) = compute(tenant, move || {
            let _in_call = span.enter();
            let reducers = app.reducers(&r.cmd.policy, &r.model);
            let c = compact_with(
                &r.request(previous.as_ref(), &app),
                &r.parts.engine(),
                &reducers,
            );
            let c = c.map(|mut c| {
                c.plan.fingerprint = app.fingerprint(std::mem::take(&mut c.plan.fingerprint));
                c
            });
            (c.map_err(AppError::from), previous)
        })
        .await?;
        Ok((compaction?, previous))
    }

    /// Binds the written artifacts' ids and verifies the plan (see [`bind`]);
    /// in sync mode the LLM writes the new summaries before the commit.
    async fn bind(
        &self,
        resolved: &Arc<Resolved>,
        upgrade: &super::summaries::UpgradeInput,
        compaction: Compaction,
        ids: &BTreeMap<String, String>,
    ) -> Result<Compaction> {
        let bound = blocking({
            let (resolved, ids) = (Arc::clone(resolved), ids.clone());
            move || bind(compaction, &ids, &resolved)
        })
        .await
        .map_err(AppError::from)
        .and_then(|r| r)?;
        if self.upgrades_now() {
            return self.upgrade_summaries(upgrade, bound).await.map(|(c, _)| c);
        }
        Ok(bound)
    }

    /// Commits a staged plan (compare-and-swap on the version it was made
    /// on); the artifacts are deleted again when the commit does not happen.
    pub(super) async fn commit(&self, staged: Staged) -> Result<CompactOutcome> {
        let Staged {
            tenant,
            resolved,
            mut plan,
            report,
            written,
            base_version,
            pending_bytes,
            upgrade,
            later,
            _lock,
        } = staged;
        let thread_id = &resolved.cmd.thread.id;
        let version = match self
            .inner
            .plans
            .commit(&tenant, thread_id, &plan, base_version)
            .await
        {
            Ok(version) => version,
            Err(e) => {
                // The calls waiting for the thread go on while the
                // artifacts no plan points at are removed.
                drop(_lock);
                self.delete_artifacts(&tenant, thread_id, &written).await;
                return Err(plan_store_error(e));
            }
        };
        plan.version = version;
        self.carry(&tenant, &resolved, &plan, &report);
        // How long the previous compaction of this thread stood.
        if report.triggered {
            let at = upgrade
                .previous
                .as_deref()
                .and_then(|p| p.compacted_at_turn);
            if let Some(at) = at {
                let gap = resolved.cmd.thread.current_turn().saturating_sub(at);
                crate::telemetry::metrics().turns_since_compaction(gap, &tenant);
            }
        }
        let capture = crate::telemetry::capture_content().then_some(self.inner.redactor.as_ref());
        crate::telemetry::events::compaction(&crate::telemetry::events::Compacted {
            model: &resolved.model,
            thread: &resolved.cmd.thread,
            policy: &resolved.cmd.policy,
            plan: &plan,
            report: &report,
            previous: upgrade.previous.as_deref(),
            capture,
        });
        crate::telemetry::metrics().compaction(
            false,
            report.triggered,
            report.tokens_before,
            report.tokens_after,
            &tenant,
        );
        self.record_stored(&tenant, base_version == 0, pending_bytes);
        if let Some(c) = later {
            self.schedule_upgrade(upgrade, c, version);
        }
        Ok(CompactOutcome {
            plan: Arc::new(plan),
            reused: false,
            pinned_labels: report.pinned_labels.clone(),
            report: Some(report),
            artifacts: written,
            tokenizer: resolved.parts.counter.name().to_string(),
            warnings: Vec::new(),
            session: None,
        })
    }

    /// Drops a staged plan: nothing is committed and its artifacts are
    /// deleted again.
    pub(super) async fn abandon(&self, staged: Staged) {
        self.delete_artifacts(
            &staged.tenant,
            &staged.resolved.cmd.thread.id,
            &staged.written,
        )
        .await;
    }

    /// Writes every pending artifact, up to [`WRITE_CONCURRENCY`] at once
    /// (each is a round trip, and a KMS call, on S3); on the first failure
    /// deletes what was written and fails. Returns placeholder → id and
    /// what was written, in pending order.
    async fn write_artifacts(
        &self,
        tenant: &str,
        thread_id: &str,
        compaction: &Compaction,
    ) -> Result<(BTreeMap<String, String>, Vec<WrittenArtifact>)> {
        let created = now_unix_ms();
        let limit = Arc::new(tokio::sync::Semaphore::new(WRITE_CONCURRENCY));
        // The set aborts what is still running if this call is dropped.
        let mut set = tokio::task::JoinSet::new();
        // The writes run as this call: a deadline does not free the tenant's
        // slot while a write is still blocking.
        for (k, a) in compaction.pending.iter().enumerate() {
            let write = self.artifact_write(tenant, thread_id, created, a, Arc::clone(&limit));
            Call::spawn_current(&mut set, async move { (k, write.await) });
        }
        let mut results: Vec<Option<Result<String>>> =
            (0..compaction.pending.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            let (k, r) =
                joined.map_err(|e| AppError::Internal(format!("artifact write task: {e}")))?;
            results[k] = Some(r.map_err(|e| match store_error(e, "artifact") {
                AppError::NotFound(_) => {
                    AppError::Internal("artifact store rejected a write".into())
                }
                other => other,
            }));
        }
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

    /// One artifact's write, in its own span (sizes and ids, no content;
    /// the store's own calls, S3 and KMS, nest under it), once `limit`
    /// lets it start.
    fn artifact_write(
        &self,
        tenant: &str,
        thread_id: &str,
        created: u64,
        a: &PendingArtifact,
        limit: Arc<tokio::sync::Semaphore>,
    ) -> impl std::future::Future<Output = std::result::Result<String, crate::store::StoreError>>
           + Send
           + 'static {
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
        let (store, content) = (Arc::clone(&self.inner.artifacts), Arc::clone(&a.content));
        let span = tracing::info_span!(
            "compactd.artifact",
            otel.name = "artifact put",
            otel.status_code = tracing::field::Empty,
            compactd.artifact_id = tracing::field::Empty,
            compactd.artifact.bytes = crate::telemetry::int(a.content.len()),
            compactd.artifact.messages = crate::telemetry::int(a.message_ids.len()),
            compactd.sensitivity = a.sensitivity.as_str(),
        );
        async move {
            let _permit = limit.acquire_owned().await;
            let put = store.put(&meta, content.as_bytes()).await;
            let span = tracing::Span::current();
            match &put {
                Ok(id) => span.record("compactd.artifact_id", id.as_str()),
                Err(_) => span.record("otel.status_code", "ERROR"),
            };
            put
        }
        .instrument(span)
    }

    /// Best effort: an artifact that no plan references is garbage, not a
    /// correctness problem, so failures are logged, not returned. Up to
    /// [`WRITE_CONCURRENCY`] at once, as they were written.
    async fn delete_artifacts(&self, tenant: &str, thread_id: &str, written: &[WrittenArtifact]) {
        let limit = Arc::new(tokio::sync::Semaphore::new(WRITE_CONCURRENCY));
        let mut set = tokio::task::JoinSet::new();
        for a in written {
            let (store, limit) = (Arc::clone(&self.inner.artifacts), Arc::clone(&limit));
            let (tenant, thread_id, id) = (
                tenant.to_string(),
                thread_id.to_string(),
                a.artifact_id.clone(),
            );
            Call::spawn_current(&mut set, async move {
                let _permit = limit.acquire_owned().await;
                if let Err(e) = store.delete(&tenant, &thread_id, &id).await {
                    tracing::warn!(artifact_id = %id, error = %e, "could not delete an uncommitted artifact");
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

/// The committed plan `plan` as the answer to `resolved`: nothing compacted.
fn reuse(tenant: &str, resolved: &Resolved, plan: CompactionPlan) -> CompactOutcome {
    crate::telemetry::metrics().compaction(true, false, 0, 0, tenant);
    let tokenizer = resolved.parts.counter.name().to_string();
    CompactOutcome::reused(plan, tokenizer, &resolved.cmd)
}

/// Binds the store's ids and recounts exactly (only pointers and summaries
/// are counted again); a bound plan over the hard limit is a bug, reported
/// rather than committed.
fn bind(
    mut compaction: Compaction,
    ids: &BTreeMap<String, String>,
    resolved: &Resolved,
) -> Result<Compaction> {
    let hard_limit = compaction.report.budget.hard_limit;
    let total = compaction.bind(
        ids,
        &resolved.cmd.thread,
        &resolved.cmd.policy.render,
        &resolved.parts.engine(),
    );
    if total > hard_limit {
        return Err(AppError::Internal(format!(
            "bound plan renders to {total} tokens, over the hard limit {hard_limit}"
        )));
    }
    Ok(compaction)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::app::Defaults;
    use crate::model::ToolSchema;
    use crate::reduce::compact;

    fn command() -> CompactCommand {
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
        cmd.model = Some("gpt-4o".into());
        cmd.max_input_tokens = Some(50_000);
        cmd
    }

    /// A thread whose compaction writes artifacts: a long tool result that
    /// does not fit a small window.
    pub(in crate::app) fn long_result_command() -> CompactCommand {
        let log: String = (0..600)
            .map(|i| {
                format!(
                    "{i:05} worker-{} batch {} finished in {} ms\n",
                    i % 7,
                    i * 31 % 997,
                    i * 17 % 500
                )
            })
            .collect();
        let thread = crate::provider::thread_from_json(
            &serde_json::json!([
                {"role": "user", "content": "Run the batch job and tell me whether it passed."},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": log},
                {"role": "assistant", "content": "All 600 batches finished."},
                {"role": "user", "content": "Good. Which worker was slowest?"}
            ]),
            "long",
        )
        .expect("thread")
        .thread;
        let mut cmd = CompactCommand::new(thread, Policy::default());
        cmd.model = Some("gpt-4o".into());
        cmd.max_input_tokens = Some(2_000);
        cmd
    }

    /// The reuse check fingerprints the request without the previous plan;
    /// the pipeline fingerprints it with one. If the two drifted, every
    /// unchanged turn would recompact instead of reusing the committed plan.
    #[test]
    fn the_reuse_check_fingerprints_what_compaction_does() {
        let app = App::offline(Defaults::default());
        let r = app.resolve("t", command()).expect("resolves");
        let engine = r.parts.engine();
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
        let first = app.compact(&ctx, command()).await.expect("first");
        assert!(!first.reused);
        let second = app.compact(&ctx, command()).await.expect("second");
        assert!(second.reused);
        assert_eq!(second.plan, first.plan);
        let mut zero = command();
        zero.max_input_tokens = Some(0);
        let e = app.compact(&ctx, zero).await.unwrap_err();
        assert_eq!(e.field(), "max_input_tokens");
        let mut unnamed = command();
        unnamed.model = Some(String::new());
        let e = app.compact(&ctx, unnamed).await.unwrap_err();
        assert_eq!(e.field(), "model");
    }

    #[tokio::test]
    async fn an_abandoned_stage_leaves_no_plan_and_no_artifact() {
        let app = App::offline(Defaults::default());
        let r = app.resolve("t", long_result_command()).expect("resolves");
        let Staging::Staged(staged) = app.stage("t", r).await.expect("stages") else {
            panic!("a new thread has no plan to reuse");
        };
        assert!(!staged.written.is_empty(), "the long result is written out");
        let artifacts = &app.inner.artifacts;
        assert_eq!(
            artifacts.scan(None).await.unwrap().len(),
            staged.written.len()
        );
        assert!(app.current_plan("t", "long").await.unwrap().is_none());
        app.abandon(staged).await;
        assert!(artifacts.scan(None).await.unwrap().is_empty());
        assert!(app.current_plan("t", "long").await.unwrap().is_none());
    }
}
