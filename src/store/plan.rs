//! The embedded plan store: one `plan.json` per (tenant, thread), replaced
//! atomically on every commit; and the stored form of a plan, the same on
//! every backend.
//!
//! A plan names what was cut from a conversation and carries summaries,
//! stubs and key fields drawn from it, so it is sealed like an artifact: a
//! data key per committed version, wrapped by the tenant's key under the
//! context `{tenant, thread, artifact: "plan/v{N}", kind: "plan"}`, the plan
//! JSON sealed with AES-256-GCM and the header (tenant, thread, version,
//! commit time) bound as associated data. Only the header is readable
//! without the key, which is all compare-and-swap and counting need.
//! Plans written before encryption (plain JSON, format 1) are still read.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::artifact::{crypto_error, sealed_bytes, split_sealed};
use super::envelope::{
    open_content, seal_content, unwrap_key, EncryptionContext, Envelope, KeyService, LocalKeyring,
};
use super::fs::{self, DataDir, KeyedLocks};
use super::{plan_history_name, PlanStore, StoreError, StoredPlan, PLAN_HISTORY, PLAN_HISTORY_DIR};
use crate::cache::{json_weight, strings_weight, BoundedCache, Weigh};
use crate::model::CompactionPlan;

const PLAN_FILE: &str = "plan.json";
const PLAN_FILE_FORMAT: u32 = 1;
/// The first bytes of a sealed plan (format 2); a format 1 plan is JSON.
pub(super) const SEALED_MAGIC: &[u8] = b"compactd-plan v2\n";

/// What a format 1 (plaintext, legacy) `plan.json` holds. Tenant and thread
/// are repeated inside so a file that ends up under the wrong key is
/// detected instead of served.
#[derive(Debug, Serialize, Deserialize)]
struct PlanFile {
    format: u32,
    tenant: String,
    thread_id: String,
    version: u64,
    committed_at_unix_ms: u64,
    plan: CompactionPlan,
}

/// The readable part of a sealed plan; its exact bytes are the associated
/// data, so none of it can be changed without failing authentication.
#[derive(Debug, Serialize, Deserialize)]
struct SealedMeta {
    tenant: String,
    thread_id: String,
    version: u64,
    committed_at_unix_ms: u64,
}

/// The encryption context's object name for a committed version.
pub(super) fn plan_object(version: u64) -> String {
    format!("plan/v{version}")
}

fn plan_aad(meta_raw: &[u8]) -> Vec<u8> {
    let mut out = b"compactd-plan-aad v1\0".to_vec();
    out.extend_from_slice(meta_raw);
    out
}

/// A stored plan split at its header: what can be known without the key.
enum Parsed<'a> {
    /// A format 1 plan, whole.
    Legacy(StoredPlan),
    /// A sealed plan: its header, the exact metadata bytes (the associated
    /// data) and where the ciphertext starts.
    Sealed {
        meta: SealedMeta,
        envelope: Envelope,
        raw: &'a [u8],
        body_at: usize,
    },
}

fn parse_stored<'a>(
    bytes: &'a [u8],
    tenant: &str,
    thread_id: &str,
) -> Result<Parsed<'a>, StoreError> {
    let Some((header, body_at)) = split_sealed(bytes, SEALED_MAGIC)? else {
        return decode_plan(bytes, tenant, thread_id).map(Parsed::Legacy);
    };
    let raw: &'a [u8] = header.meta.get().as_bytes();
    let meta: SealedMeta = serde_json::from_slice(raw)
        .map_err(|e| StoreError::Corrupt(format!("plan header does not parse: {e}")))?;
    if meta.tenant != tenant || meta.thread_id != thread_id {
        return Err(StoreError::Corrupt(
            "plan file belongs to a different tenant or thread".into(),
        ));
    }
    Ok(Parsed::Sealed {
        meta,
        envelope: header.envelope,
        raw,
        body_at,
    })
}

/// The committed version a stored plan declares, read from its header
/// (no key needed): for compare-and-swap.
pub(super) fn stored_version(
    bytes: &[u8],
    tenant: &str,
    thread_id: &str,
) -> Result<u64, StoreError> {
    Ok(match parse_stored(bytes, tenant, thread_id)? {
        Parsed::Legacy(plan) => plan.version,
        Parsed::Sealed { meta, .. } => meta.version,
    })
}

/// Seals `plan` committed as `version` now: the bytes to store (the same on
/// every backend) and the [`StoredPlan`] they open to. Nothing is produced
/// unless the key service answered.
pub(super) async fn seal_plan(
    keys: &dyn KeyService,
    tenant: &str,
    thread_id: &str,
    plan: &CompactionPlan,
    version: u64,
) -> Result<(Vec<u8>, StoredPlan), StoreError> {
    let mut plan = plan.clone();
    plan.version = version;
    let meta = SealedMeta {
        tenant: tenant.to_owned(),
        thread_id: thread_id.to_owned(),
        version,
        committed_at_unix_ms: fs::now_unix_ms(),
    };
    let object = plan_object(version);
    let dk = keys
        .generate_data_key(&EncryptionContext::plan(tenant, thread_id, &object))
        .await
        .map_err(crypto_error)?;
    let raw = serde_json::value::to_raw_value(&meta)
        .map_err(|e| StoreError::Corrupt(format!("plan header does not serialize: {e}")))?;
    let committed_at_unix_ms = meta.committed_at_unix_ms;
    fs::blocking(move || {
        let body = serde_json::to_vec(&plan)
            .map_err(|e| StoreError::Corrupt(format!("plan does not serialize: {e}")))?;
        let (envelope, ciphertext) =
            seal_content(&dk, &plan_aad(raw.get().as_bytes()), &body).map_err(crypto_error)?;
        let bytes = sealed_bytes(SEALED_MAGIC, &raw, &envelope, &ciphertext)?;
        Ok((
            bytes,
            StoredPlan {
                version,
                plan: plan.into(),
                committed_at_unix_ms,
            },
        ))
    })
    .await
}

/// Opens a stored plan for `tenant` and `thread_id`: header checked, the
/// data key unwrapped under the caller's context (so another tenant's
/// request cannot open it even with the bytes in hand), the plan
/// authenticated with its header.
pub(super) async fn open_plan(
    keys: &dyn KeyService,
    bytes: Vec<u8>,
    tenant: &str,
    thread_id: &str,
) -> Result<StoredPlan, StoreError> {
    // The header is parsed once; the closure below gets what it needs.
    let (meta, envelope, aad, body_at) = match parse_stored(&bytes, tenant, thread_id)? {
        Parsed::Legacy(plan) => return Ok(plan),
        Parsed::Sealed {
            meta,
            envelope,
            raw,
            body_at,
        } => (meta, envelope, plan_aad(raw), body_at),
    };
    let object = plan_object(meta.version);
    let key = unwrap_key(
        keys,
        &envelope,
        &EncryptionContext::plan(tenant, thread_id, &object),
    )
    .await
    .map_err(crypto_error)?;
    let thread_id = thread_id.to_owned();
    fs::blocking(move || {
        let body = open_content(&key, &envelope, &aad, &bytes[body_at..]).map_err(crypto_error)?;
        let mut plan: CompactionPlan = serde_json::from_slice(&body)
            .map_err(|e| StoreError::Corrupt(format!("plan does not parse: {e}")))?;
        if plan.thread_id != thread_id {
            return Err(StoreError::Corrupt(
                "plan belongs to a different thread".into(),
            ));
        }
        plan.version = meta.version;
        Ok(StoredPlan {
            version: meta.version,
            plan: plan.into(),
            committed_at_unix_ms: meta.committed_at_unix_ms,
        })
    })
    .await
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
pub struct FsPlanStore {
    dir: DataDir,
    keys: Arc<dyn KeyService>,
    /// The key service's generation the cache was filled under: when it
    /// changes (a key shredded or rotated), cached plans are dropped so a
    /// shredded tenant's plan is not served from memory.
    key_generation: std::sync::atomic::AtomicU64,
    pub(super) locks: KeyedLocks,
    cache: Arc<BoundedCache<PathBuf, StoredPlan>>,
}

impl std::fmt::Debug for FsPlanStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsPlanStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
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
    /// Opens (creating if needed) the store under `data_dir`, sealing with
    /// the local keyring `{data_dir}/keys/keyring.json` (created 0600 on
    /// first use), the same one the artifact store opens by default.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let keys = LocalKeyring::open_or_create(&data_dir.join(super::KEYRING_FILE))
            .map_err(crypto_error)?;
        Self::open_with_keys(data_dir, Arc::new(keys))
    }

    /// Opens the store under `data_dir`, sealing plans with `keys`.
    pub fn open_with_keys(data_dir: &Path, keys: Arc<dyn KeyService>) -> Result<Self, StoreError> {
        Ok(FsPlanStore {
            dir: DataDir::open(data_dir)?,
            key_generation: std::sync::atomic::AtomicU64::new(keys.generation()),
            keys,
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

/// Parses a format 1 (plaintext) plan and checks it belongs to `tenant`
/// and `thread_id`.
fn decode_plan(bytes: &[u8], tenant: &str, thread_id: &str) -> Result<StoredPlan, StoreError> {
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
        plan: plan.into(),
        committed_at_unix_ms: file.committed_at_unix_ms,
    })
}

#[async_trait]
impl PlanStore for FsPlanStore {
    fn key_generation(&self) -> u64 {
        self.keys.generation()
    }

    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        let path = self.plan_path(tenant, thread_id)?;
        let generation = self.keys.generation();
        if self
            .key_generation
            .swap(generation, std::sync::atomic::Ordering::AcqRel)
            != generation
        {
            self.cache.retain(|_| false);
        }
        if let Some(p) = self.cache.get(&path) {
            return Ok(Some(p));
        }
        // A miss reads under the thread's lock, so a commit cannot land
        // between the read and the cache insert.
        let _guard = self.locks.get(&path).lock_owned().await;
        if let Some(p) = self.cache.get(&path) {
            return Ok(Some(p));
        }
        let key = path.clone();
        let Some(bytes) = fs::blocking(move || Ok(fs::read_optional(&path)?)).await? else {
            return Ok(None);
        };
        let plan = open_plan(&*self.keys, bytes, tenant, thread_id).await?;
        // Not cached if a key was shredded while it was being opened: it
        // would outlive the clear above.
        if self.keys.generation() == generation {
            self.cache.insert(key, plan.clone());
        }
        Ok(Some(plan))
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
        let generation = self.keys.generation();
        let (bytes, cached) = seal_plan(&*self.keys, tenant, thread_id, plan, version).await?;
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());

        let guard = self.locks.get(&path).lock_owned().await;
        let dir = self.dir.clone();
        let key = path.clone();
        let cache = Arc::clone(&self.cache);
        let keys = Arc::clone(&self.keys);
        fs::blocking(move || {
            // The guard moves in here: if the caller is cancelled mid-commit,
            // the lock is held until the write has finished, not released early.
            let _guard = guard;
            let current = match fs::read_optional(&path)? {
                Some(bytes) => stored_version(&bytes, &tenant, &thread_id)?,
                None => 0,
            };
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
            // Still under the thread's lock, so caches are updated in commit
            // order; not at all if a key was shredded meanwhile.
            if keys.generation() == generation {
                cache.insert(key, cached);
            } else {
                cache.remove(&key);
            }
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
        let Some(bytes) = fs::blocking(move || Ok(fs::read_optional(&path)?)).await? else {
            return Ok(None);
        };
        let plan = open_plan(&*self.keys, bytes, tenant, thread_id).await?;
        Ok(Some(plan).filter(|p| p.version == version))
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
