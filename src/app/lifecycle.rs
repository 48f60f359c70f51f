//! Data lifecycle: deleting a thread, resetting its plan, expiring and
//! sweeping artifacts, and per-tenant quotas.
//!
//! What a tenant stores is its plans and artifacts. Artifacts get a TTL when
//! written (`artifact_ttl_seconds`); the sweeper removes expired ones and
//! the ones no committed plan points at any more (superseded plan versions,
//! reset plans, aborted commits), after a grace period that covers a
//! Compact still between writing its artifacts and committing its plan.
//! Quotas are checked before anything is written, on usage counted by a
//! scan of the tenant's data the first time it is needed, then kept up to
//! date by this process's own writes and deletes and recounted exactly by
//! every sweep.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::CompactionPlan;
use crate::reduce::referenced_artifacts;
use crate::runtime::now_unix_ms;
use crate::security::SecurityContext;
use crate::store::Removed;

use super::error::{plan_store_error, store_error};
use super::{App, AppError, Result, UseCase};

/// Retention and quotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Lifecycle {
    /// Artifacts read as not found this long after they were written, and
    /// the sweeper removes them (0: kept while a plan points at them).
    pub artifact_ttl_seconds: u64,
    /// An artifact no committed plan points at is removed once it is this
    /// old (it may belong to a Compact that has not committed yet).
    pub unreferenced_grace_seconds: u64,
    /// How often the sweeper runs (0: never).
    pub sweep_interval_seconds: u64,
    /// Per-tenant limits on what is stored.
    pub quotas: Quotas,
    /// Append sessions: how long an idle one is kept, and memory for the
    /// threads in use.
    pub sessions: super::SessionSettings,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            artifact_ttl_seconds: 30 * 24 * 3600,
            unreferenced_grace_seconds: 3600,
            sweep_interval_seconds: 600,
            quotas: Quotas::default(),
            sessions: super::SessionSettings::default(),
        }
    }
}

/// Per-tenant quotas; 0 disables one. Exceeding one is RESOURCE_EXHAUSTED
/// naming it, and nothing of the call is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quotas {
    /// Artifact bytes stored per tenant.
    pub max_bytes_per_tenant: u64,
    /// Threads with a plan per tenant.
    pub max_threads_per_tenant: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_bytes_per_tenant: 10 * 1024 * 1024 * 1024,
            max_threads_per_tenant: 100_000,
        }
    }
}

/// What one tenant stores, as far as quotas are concerned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Artifact content bytes.
    pub bytes: u64,
    /// Threads with a plan.
    pub threads: u64,
}

/// Usage by tenant, filled on first use.
#[derive(Debug, Default)]
pub(super) struct UsageBook(Mutex<HashMap<String, Usage>>);

impl UsageBook {
    fn get(&self, tenant: &str) -> Option<Usage> {
        self.lock().get(tenant).copied()
    }

    fn set(&self, tenant: &str, usage: Usage) {
        self.lock().insert(tenant.to_string(), usage);
    }

    /// Adjusts a known tenant's usage (unknown tenants are counted on first use).
    fn adjust(&self, tenant: &str, f: impl FnOnce(&mut Usage)) {
        if let Some(u) = self.lock().get_mut(tenant) {
            f(u);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Usage>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What DeleteThread removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// A plan was committed for the thread.
    pub had_plan: bool,
    /// Artifacts and bytes removed.
    pub removed: Removed,
    /// An append session was kept for the thread.
    pub had_session: bool,
}

/// What ResetPlan did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetOutcome {
    /// The version replaced (0: there was no plan, nothing changed).
    pub previous_version: u64,
    /// The version of the empty plan now committed (0 when nothing changed).
    pub version: u64,
}

/// What one sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Artifacts past their TTL.
    pub expired: u64,
    /// Artifacts no committed plan points at, past the grace period.
    pub unreferenced: u64,
    /// Content bytes freed.
    pub bytes: u64,
    /// Append sessions idle past their TTL.
    pub sessions: u64,
}

fn thread_id_field(thread_id: &str) -> Result<()> {
    if thread_id.is_empty() {
        return Err(AppError::invalid("thread_id", "must not be empty"));
    }
    Ok(())
}

impl App {
    /// Deletes a thread of the caller's tenant: its plan, its artifacts and
    /// its cached summaries. Idempotent. The plan goes first, so an
    /// interruption leaves at worst artifacts nothing points at (removed by
    /// a retry or the sweeper), never a plan pointing at deleted content.
    pub async fn delete_thread(
        &self,
        ctx: &SecurityContext,
        thread_id: &str,
    ) -> Result<DeleteOutcome> {
        UseCase::DeleteThread.authorize(ctx, None)?;
        thread_id_field(thread_id)?;
        let tenant = ctx.tenant_id.as_str();
        // No Compact of this thread is between its writes and its commit.
        let _thread = self.lock_thread(tenant, thread_id).await;
        let had_plan = self
            .inner
            .plans
            .delete(tenant, thread_id)
            .await
            .map_err(plan_store_error)?;
        let removed = self
            .inner
            .artifacts
            .delete_thread(tenant, thread_id)
            .await
            .map_err(|e| store_error(e, "artifact"))?;
        let had_session = self.inner.sessions.delete(tenant, thread_id).await?;
        // Recorded first, then forgotten: a call running now forgets the
        // thread again when it ends (calls fill the caches as they end).
        self.inner.in_flight.deleted(tenant, thread_id);
        self.forget_thread(tenant, thread_id);
        self.inner.usage.adjust(tenant, |u| {
            u.bytes = u.bytes.saturating_sub(removed.bytes);
            u.threads = u.threads.saturating_sub(u64::from(had_plan));
        });
        Ok(DeleteOutcome {
            had_plan,
            removed,
            had_session,
        })
    }

    /// Replaces the thread's committed plan with an empty one (the thread
    /// renders verbatim until the next Compact), keeping versions monotonic
    /// so a stale `expected_version` still conflicts. Artifacts only the old
    /// plan pointed at are removed by the next sweep once they are older than
    /// the grace period (counted from their creation).
    pub async fn reset_plan(
        &self,
        ctx: &SecurityContext,
        thread_id: &str,
        expected_version: Option<u64>,
    ) -> Result<ResetOutcome> {
        UseCase::ResetPlan.authorize(ctx, None)?;
        thread_id_field(thread_id)?;
        let tenant = ctx.tenant_id.as_str();
        let Some(current) = self.current_plan(tenant, thread_id).await? else {
            return match expected_version {
                Some(e) if e != 0 => Err(AppError::VersionConflict {
                    expected: e,
                    current: 0,
                }),
                _ => Ok(ResetOutcome {
                    previous_version: 0,
                    version: 0,
                }),
            };
        };
        if let Some(expected) = expected_version {
            if expected != current.version {
                return Err(AppError::VersionConflict {
                    expected,
                    current: current.version,
                });
            }
        }
        let version = self
            .inner
            .plans
            .commit(
                tenant,
                thread_id,
                &CompactionPlan::new(thread_id),
                current.version,
            )
            .await
            .map_err(plan_store_error)?;
        Ok(ResetOutcome {
            previous_version: current.version,
            version,
        })
    }

    /// The tenant's usage, counted from the stores the first time.
    async fn usage(&self, tenant: &str) -> Result<Usage> {
        if let Some(u) = self.inner.usage.get(tenant) {
            return Ok(u);
        }
        let bytes = self
            .inner
            .artifacts
            .scan(Some(tenant))
            .await
            .map_err(|e| store_error(e, "artifact"))?
            .iter()
            .map(|a| a.meta.size_bytes)
            .sum();
        let threads = self
            .inner
            .plans
            .count(tenant)
            .await
            .map_err(plan_store_error)?;
        let usage = Usage { bytes, threads };
        self.inner.usage.set(tenant, usage);
        Ok(usage)
    }

    /// Refuses a write of `bytes` more artifact content (and, for a thread
    /// without a plan, one more thread) that would exceed a quota.
    pub(super) async fn check_quotas(
        &self,
        tenant: &str,
        new_thread: bool,
        bytes: u64,
    ) -> Result<()> {
        let q = &self.inner.lifecycle.quotas;
        if q.max_bytes_per_tenant == 0 && q.max_threads_per_tenant == 0 {
            return Ok(());
        }
        let usage = self.usage(tenant).await?;
        if new_thread && q.max_threads_per_tenant != 0 && usage.threads >= q.max_threads_per_tenant
        {
            return Err(AppError::QuotaExceeded {
                quota: "quotas.max_threads_per_tenant".into(),
                message: format!(
                    "the tenant has {} threads with a plan; the limit is {}",
                    usage.threads, q.max_threads_per_tenant
                ),
            });
        }
        if bytes > 0
            && q.max_bytes_per_tenant != 0
            && usage.bytes.saturating_add(bytes) > q.max_bytes_per_tenant
        {
            return Err(AppError::QuotaExceeded {
                quota: "quotas.max_bytes_per_tenant".into(),
                message: format!(
                    "storing {bytes} more bytes would exceed the limit of {} (stored: {})",
                    q.max_bytes_per_tenant, usage.bytes
                ),
            });
        }
        Ok(())
    }

    /// Records what a successful Compact stored.
    pub(super) fn record_stored(&self, tenant: &str, new_thread: bool, bytes: u64) {
        self.inner.usage.adjust(tenant, |u| {
            u.bytes = u.bytes.saturating_add(bytes);
            u.threads = u.threads.saturating_add(u64::from(new_thread));
        });
    }

    /// The TTL written into new artifacts' metadata.
    pub(super) fn artifact_ttl(&self) -> Option<u64> {
        match self.inner.lifecycle.artifact_ttl_seconds {
            0 => None,
            ttl => Some(ttl),
        }
    }

    /// One sweep over every tenant: removes expired artifacts and those no
    /// committed plan points at once past the grace period, then recounts
    /// usage exactly. Errors on one thread are logged and the sweep goes on.
    pub async fn sweep(&self) -> Result<SweepReport> {
        let now = now_unix_ms();
        let grace_ms = self
            .inner
            .lifecycle
            .unreferenced_grace_seconds
            .saturating_mul(1000);
        let entries = self
            .inner
            .artifacts
            .scan(None)
            .await
            .map_err(|e| store_error(e, "artifact"))?;
        let mut by_thread: HashMap<(String, String), Vec<_>> = HashMap::new();
        for e in entries {
            by_thread
                .entry((e.meta.tenant.clone(), e.meta.thread_id.clone()))
                .or_default()
                .push(e);
        }
        let mut report = SweepReport::default();
        match self.inner.sessions.sweep().await {
            Ok(n) => report.sessions = n,
            Err(e) => tracing::warn!(error = %e, "sweep: idle append sessions were not removed"),
        }
        let mut bytes_by_tenant: HashMap<String, u64> = HashMap::new();
        for ((tenant, thread_id), entries) in by_thread {
            // A Compact between its writes and its commit holds this lock:
            // its artifacts are referenced by the time the sweep looks.
            let _thread = self.lock_thread(&tenant, &thread_id).await;
            let referenced: BTreeSet<String> = match self.current_plan(&tenant, &thread_id).await {
                Ok(Some(plan)) => referenced_artifacts(&plan),
                Ok(None) => BTreeSet::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "sweep: cannot read a plan; skipping its thread");
                    continue;
                }
            };
            for e in entries {
                let expired = e.meta.is_expired(now);
                let unreferenced = !referenced.contains(&e.artifact_id)
                    && now.saturating_sub(e.meta.created_at_unix_ms) >= grace_ms;
                if !(expired || unreferenced) {
                    *bytes_by_tenant.entry(tenant.clone()).or_default() += e.meta.size_bytes;
                    continue;
                }
                match self
                    .inner
                    .artifacts
                    .delete(&tenant, &thread_id, &e.artifact_id)
                    .await
                {
                    Ok(()) => {
                        report.bytes += e.meta.size_bytes;
                        if expired {
                            report.expired += 1;
                        } else {
                            report.unreferenced += 1;
                        }
                    }
                    Err(err) => {
                        *bytes_by_tenant.entry(tenant.clone()).or_default() += e.meta.size_bytes;
                        tracing::warn!(artifact_id = %e.artifact_id, error = %err, "sweep: delete failed");
                    }
                }
            }
        }
        // Exact usage for every tenant this process tracks.
        let tracked: Vec<String> = self.inner.usage.lock().keys().cloned().collect();
        for tenant in tracked {
            let threads = self.inner.plans.count(&tenant).await.ok();
            let bytes = bytes_by_tenant.get(&tenant).copied().unwrap_or(0);
            self.inner.usage.adjust(&tenant, |u| {
                u.bytes = bytes;
                if let Some(t) = threads {
                    u.threads = t;
                }
            });
        }
        Ok(report)
    }

    /// Runs [`App::sweep`] every `sweep_interval_seconds` until dropped.
    pub async fn run_sweeper(self) {
        let every = self.inner.lifecycle.sweep_interval_seconds;
        if every == 0 {
            return std::future::pending().await;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(every));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.sweep().await {
                Ok(r) if r.expired + r.unreferenced > 0 => tracing::info!(
                    expired = r.expired,
                    unreferenced = r.unreferenced,
                    bytes = r.bytes,
                    "artifacts swept"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "artifact sweep failed"),
            }
        }
    }
}
