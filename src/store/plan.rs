//! The embedded plan store: one `plan.json` per (tenant, thread), replaced
//! atomically on every commit.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::fs::{self, DataDir, KeyedLocks};
use super::{plan_history_name, PlanStore, StoreError, StoredPlan, PLAN_HISTORY, PLAN_HISTORY_DIR};
use crate::cache::{json_weight, strings_weight, BoundedCache, Weigh};
use crate::model::CompactionPlan;

const PLAN_FILE: &str = "plan.json";
const PLAN_FILE_FORMAT: u32 = 1;

/// What `plan.json` holds. Tenant and thread are repeated inside so a file
/// that ends up under the wrong key is detected instead of served.
#[derive(Debug, Serialize, Deserialize)]
struct PlanFile {
    format: u32,
    tenant: String,
    thread_id: String,
    version: u64,
    committed_at_unix_ms: u64,
    plan: CompactionPlan,
}

/// Plans on local disk.
///
/// Compare-and-swap is serialized by a per-thread async mutex, which is
/// correct within one process only. Several replicas sharing a data
/// directory would race; they need a shared backend with a real CAS.
///
/// The latest committed plan of recently used threads is kept in memory
/// (bounded in bytes): agents call once per turn with the same thread, and
/// parsing `plan.json` on every call was a visible part of a warm round trip.
/// The cache is only written under the thread's lock — after a successful
/// commit, or after a read that missed — so it never runs ahead of disk and
/// a read can never put back a plan older than one just committed.
#[derive(Debug)]
pub struct FsPlanStore {
    dir: DataDir,
    pub(super) locks: KeyedLocks,
    cache: Arc<BoundedCache<PathBuf, StoredPlan>>,
}

/// Bytes of committed plans kept in memory.
const PLAN_CACHE_BYTES: u64 = 64 * 1024 * 1024;

impl Weigh for StoredPlan {
    fn weight(&self) -> u64 {
        let p = &self.plan;
        128 + (p.thread_id.len() + p.fingerprint.len()) as u64
            + p.externalizations
                .iter()
                .map(|r| strings_weight(&r.span.message_ids) + r.summary.weight() + 256)
                .sum::<u64>()
            + p.summarizations
                .iter()
                .map(|r| strings_weight(&r.span.message_ids) + r.summary.weight())
                .sum::<u64>()
            + p.clearings
                .iter()
                .map(|r| {
                    strings_weight(&r.span.message_ids)
                        + r.replacement.len() as u64
                        + r.archive_note.as_ref().map_or(0, |n| n.len() as u64)
                        + r.preserved_fields
                            .iter()
                            .map(|(k, v)| k.len() as u64 + json_weight(v))
                            .sum::<u64>()
                })
                .sum::<u64>()
            + p.drops
                .iter()
                .map(|r| {
                    strings_weight(&r.span.message_ids)
                        + r.reason.len() as u64
                        + strings_weight(&r.index.keywords)
                        + r.index.summary.len() as u64
                })
                .sum::<u64>()
    }
}

impl FsPlanStore {
    /// Opens (creating if needed) the store under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Ok(FsPlanStore {
            dir: DataDir::open(data_dir)?,
            locks: KeyedLocks::default(),
            cache: Arc::new(BoundedCache::new(PLAN_CACHE_BYTES)),
        })
    }

    fn plan_path(&self, tenant: &str, thread_id: &str) -> Result<PathBuf, StoreError> {
        Ok(self.dir.thread_dir(tenant, thread_id)?.join(PLAN_FILE))
    }
}

/// Writes `bytes` as kept version `version` and removes the one that falls
/// out of the last [`PLAN_HISTORY`].
fn keep_version(
    dir: &DataDir,
    thread_dir: &Path,
    version: u64,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let history = thread_dir.join(PLAN_HISTORY_DIR);
    dir.ensure_dir(&history)?;
    // Renamed into place, but not fsynced: a copy kept for diagnosis is
    // not worth a second sync on every commit (a crash may lose the newest).
    let name = plan_history_name(version);
    let tmp = history.join(format!(".{name}.tmp-{:016x}", rand::random::<u64>()));
    std::fs::write(&tmp, bytes)?;
    if let Err(e) = std::fs::rename(&tmp, history.join(&name)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    if version > PLAN_HISTORY {
        match std::fs::remove_file(history.join(plan_history_name(version - PLAN_HISTORY))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads and checks one plan file; `None` if there is none yet.
fn read_plan(path: &Path, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
    let Some(bytes) = fs::read_optional(path)? else {
        return Ok(None);
    };
    decode_plan(&bytes, tenant, thread_id).map(Some)
}

/// Parses a stored plan (the same format on every backend) and checks it
/// belongs to `tenant` and `thread_id`.
pub(super) fn decode_plan(
    bytes: &[u8],
    tenant: &str,
    thread_id: &str,
) -> Result<StoredPlan, StoreError> {
    let file: PlanFile = serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("plan file does not parse: {e}")))?;
    if file.format != PLAN_FILE_FORMAT {
        return Err(StoreError::Corrupt(format!(
            "plan file format {} is not supported",
            file.format
        )));
    }
    if file.tenant != tenant || file.thread_id != thread_id {
        return Err(StoreError::Corrupt(
            "plan file belongs to a different tenant or thread".into(),
        ));
    }
    let mut plan = file.plan;
    plan.version = file.version;
    Ok(StoredPlan {
        version: file.version,
        plan,
        committed_at_unix_ms: file.committed_at_unix_ms,
    })
}

/// The bytes to store for `plan` committed as `version` now, and the
/// [`StoredPlan`] they decode to.
pub(super) fn encode_plan(
    tenant: &str,
    thread_id: &str,
    plan: &CompactionPlan,
    version: u64,
) -> Result<(Vec<u8>, StoredPlan), StoreError> {
    let mut plan = plan.clone();
    plan.version = version;
    let file = PlanFile {
        format: PLAN_FILE_FORMAT,
        tenant: tenant.to_owned(),
        thread_id: thread_id.to_owned(),
        version,
        committed_at_unix_ms: fs::now_unix_ms(),
        plan,
    };
    let bytes = serde_json::to_vec(&file)
        .map_err(|e| StoreError::Corrupt(format!("plan does not serialize: {e}")))?;
    Ok((
        bytes,
        StoredPlan {
            version,
            plan: file.plan,
            committed_at_unix_ms: file.committed_at_unix_ms,
        },
    ))
}

#[async_trait]
impl PlanStore for FsPlanStore {
    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        let path = self.plan_path(tenant, thread_id)?;
        if let Some(p) = self.cache.get(&path) {
            return Ok(Some(p));
        }
        // A miss reads under the thread's lock, so a commit cannot land
        // between the read and the cache insert.
        let _guard = self.locks.get(&path).lock_owned().await;
        if let Some(p) = self.cache.get(&path) {
            return Ok(Some(p));
        }
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());
        let key = path.clone();
        let plan = fs::blocking(move || read_plan(&path, &tenant, &thread_id)).await?;
        if let Some(p) = &plan {
            self.cache.insert(key, p.clone());
        }
        Ok(plan)
    }

    async fn commit(
        &self,
        tenant: &str,
        thread_id: &str,
        plan: &CompactionPlan,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let path = self.plan_path(tenant, thread_id)?;
        let version = super::next_version(plan, thread_id, expected_version)?;
        let (bytes, cached) = encode_plan(tenant, thread_id, plan, version)?;
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());

        let guard = self.locks.get(&path).lock_owned().await;
        let dir = self.dir.clone();
        let key = path.clone();
        let cache = Arc::clone(&self.cache);
        fs::blocking(move || {
            // The guard moves in here: if the caller is cancelled mid-commit,
            // the lock is held until the write has finished, not released early.
            let _guard = guard;
            let current = read_plan(&path, &tenant, &thread_id)?.map_or(0, |p| p.version);
            if current != expected_version {
                return Err(StoreError::Conflict {
                    expected: expected_version,
                    current,
                });
            }
            let thread_dir = path
                .parent()
                .ok_or_else(|| StoreError::InvalidId("plan path has no parent".into()))?;
            dir.ensure_dir(thread_dir)?;
            if let Err(e) = fs::write_atomic(thread_dir, PLAN_FILE, &bytes) {
                // The rename may have happened before the failure (a failed
                // directory fsync): forget the cached plan so the next read
                // sees what is on disk.
                cache.remove(&key);
                return Err(e.into());
            }
            // Still under the thread's lock, so caches are updated in commit order.
            cache.insert(key, cached);
            // The version is committed; keeping a copy of it is best effort.
            if let Err(e) = keep_version(&dir, thread_dir, version, &bytes) {
                tracing::warn!(error = %e, version, "a committed plan version could not be kept for Explain");
            }
            Ok(version)
        })
        .await
    }

    async fn health(&self) -> Result<(), StoreError> {
        let root = self.dir.root().to_path_buf();
        fs::blocking(move || probe(&root)).await
    }

    async fn kept_version(
        &self,
        tenant: &str,
        thread_id: &str,
        version: u64,
    ) -> Result<Option<StoredPlan>, StoreError> {
        let path = self
            .dir
            .thread_dir(tenant, thread_id)?
            .join(PLAN_HISTORY_DIR)
            .join(plan_history_name(version));
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());
        let plan = fs::blocking(move || read_plan(&path, &tenant, &thread_id)).await?;
        Ok(plan.filter(|p| p.version == version))
    }

    async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let path = self.plan_path(tenant, thread_id)?;
        let guard = self.locks.get(&path).lock_owned().await;
        let cache = Arc::clone(&self.cache);
        fs::blocking(move || {
            let _guard = guard;
            cache.remove(&path);
            if let Some(dir) = path.parent() {
                match std::fs::remove_dir_all(dir.join(PLAN_HISTORY_DIR)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let existed = match std::fs::remove_file(&path) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(e) => return Err(e.into()),
            };
            if let Some(dir) = path.parent() {
                fs::sync_dir(dir).or_else(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })?;
            }
            Ok(existed)
        })
        .await
    }

    async fn count(&self, tenant: &str) -> Result<u64, StoreError> {
        let threads = self.dir.tenant_threads(tenant)?;
        fs::blocking(move || {
            let mut n = 0;
            for dir in fs::subdirs(&threads)? {
                if dir.join(PLAN_FILE).is_file() {
                    n += 1;
                }
            }
            Ok(n)
        })
        .await
    }
}

/// Write, read back and delete a small file: the cheapest check that covers
/// a missing, read-only, full or unmounted volume.
fn probe(root: &Path) -> Result<(), StoreError> {
    let unavailable = |what: &str, e: std::io::Error| {
        StoreError::Unavailable(format!("data directory {}: {what}: {e}", root.display()))
    };
    let token: [u8; 16] = rand::random();
    let path = root.join(format!(".health-probe-{}", hex::encode(token)));
    std::fs::write(&path, token).map_err(|e| unavailable("not writable", e))?;
    let read = std::fs::read(&path);
    let removed = std::fs::remove_file(&path);
    let read = read.map_err(|e| unavailable("not readable", e))?;
    removed.map_err(|e| unavailable("cannot delete", e))?;
    if read != token {
        return Err(StoreError::Unavailable(format!(
            "data directory {}: read back different bytes",
            root.display()
        )));
    }
    Ok(())
}
