//! Storage: versioned plans and externalized artifacts, scoped by tenant.
//!
//! Both stores are traits so a shared backend (for many replicas) and S3 can
//! follow; the embedded defaults keep everything under one data directory:
//!
//! ```text
//! {data_dir}/tenants/{tenant}/threads/{thread_dir}/plan.json
//! {data_dir}/tenants/{tenant}/threads/{thread_dir}/artifacts/{artifact_id}
//! ```
//!
//! `thread_dir` is the thread id in hex (or `sha256-<hex>` of it when that
//! would be too long for a file name), so any thread id is a safe file name.
//! Tenant ids are checked by [`validate_path_segment`]; the authenticated
//! tenant is further restricted to `[A-Za-z0-9._-]` by `security`.
//!
//! The artifact store encrypts every artifact ([`envelope`]): a data key per
//! artifact, wrapped under `{tenant, thread, artifact}` by a key service
//! (the local keyring by default), the content sealed with AES-256-GCM and
//! the metadata bound as associated data.

mod artifact;
pub mod backend;
pub mod envelope;
mod fs;
pub mod kms;
pub(crate) use fs::KeyedLocks;
mod memory;
mod plan;
pub mod rewrap;
pub mod s3;
mod session;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::model::{CompactionPlan, Sensitivity};

pub use artifact::{FsArtifactStore, KEYRING_FILE};
pub use memory::{MemoryArtifactStore, MemoryPlanStore};
pub use plan::FsPlanStore;
pub(crate) use session::idle_past;
pub use session::{
    Peek, PrefixTrace, SegmentRef, SessionHead, SessionWrite, ThreadStore, MAX_SEGMENTS,
    MAX_TAIL_BYTES,
};

/// One AWS API request in a client span of its own (`S3.PutObject`,
/// `KMS.Decrypt`, …): which calls a compaction made and how long each took.
/// No keys, bucket paths or payloads are recorded.
pub(crate) async fn aws_call<T, E>(
    service: &'static str,
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "compactd.aws",
        otel.name = %format_args!("{service}.{operation}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        rpc.system = "aws-api",
        rpc.service = service,
        rpc.method = operation,
    );
    let out = call.instrument(span.clone()).await;
    if out.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    out
}

/// Longest tenant or thread id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Compare-and-swap lost: someone committed first.
    #[error("plan version conflict: expected version {expected}, current version is {current}")]
    Conflict {
        /// The version the caller based its plan on.
        expected: u64,
        /// The version actually stored.
        current: u64,
    },
    /// No such artifact for this tenant and thread.
    #[error("not found")]
    NotFound,
    /// An id that can never name anything (the server answers NOT_FOUND or INVALID_ARGUMENT).
    #[error("invalid id: {0}")]
    InvalidId(String),
    /// The backend cannot serve requests (data directory gone, not writable).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The key that wrapped the data was deleted (crypto-shredded): the
    /// data exists but can never be read again.
    #[error("the data's key was deleted: {0}")]
    KeyDeleted(String),
    /// Stored data that does not parse or does not match its hash.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Any other I/O failure.
    #[error("storage I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// A committed plan.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPlan {
    /// Store version, starting at 1; `plan.version` equals it.
    pub version: u64,
    /// The plan; shared, so a cached plan is handed out without copying
    /// its summaries.
    pub plan: std::sync::Arc<CompactionPlan>,
    /// Commit time.
    pub committed_at_unix_ms: u64,
}

/// Plan versions the filesystem and S3 stores keep per thread, the current
/// one included, so Explain can answer for a past turn.
pub const PLAN_HISTORY: u64 = 32;

/// The folder of kept versions, inside the thread's folder or prefix.
pub(crate) const PLAN_HISTORY_DIR: &str = "plans";

/// A kept version's file or object name.
pub(crate) fn plan_history_name(version: u64) -> String {
    format!("v{version:020}.json")
}

/// Versioned plans with compare-and-swap commit.
#[async_trait]
pub trait PlanStore: Send + Sync {
    /// The latest plan, if any.
    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError>;
    /// A committed version: the current one, or, where the store keeps
    /// them, one of the last [`PLAN_HISTORY`]. `None` otherwise.
    async fn get_version(
        &self,
        tenant: &str,
        thread_id: &str,
        version: u64,
    ) -> Result<Option<StoredPlan>, StoreError> {
        if let Some(p) = self.get(tenant, thread_id).await? {
            if p.version == version {
                return Ok(Some(p));
            }
        }
        self.kept_version(tenant, thread_id, version).await
    }
    /// A past version from the store's kept copies (none by default).
    async fn kept_version(
        &self,
        _tenant: &str,
        _thread_id: &str,
        _version: u64,
    ) -> Result<Option<StoredPlan>, StoreError> {
        Ok(None)
    }
    /// Compare-and-swap: succeeds only if the current version equals
    /// `expected_version` (0 = no plan yet); returns the new version
    /// (expected + 1). `Conflict` otherwise.
    async fn commit(
        &self,
        tenant: &str,
        thread_id: &str,
        plan: &CompactionPlan,
        expected_version: u64,
    ) -> Result<u64, StoreError>;
    /// `Unavailable` when the backend cannot be written and read back.
    async fn health(&self) -> Result<(), StoreError>;

    /// Removes the thread's plan and its kept versions; `false` when there
    /// was none (idempotent).
    async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError>;

    /// Threads of `tenant` that have a plan (for the threads quota).
    async fn count(&self, tenant: &str) -> Result<u64, StoreError>;

    /// The generation of the keys the store opens plans with
    /// ([`envelope::KeyService::generation`]): it changes when a key may
    /// have been shredded or rotated, so what the process derived from
    /// decrypted content is dropped rather than served. Constant for a
    /// store without keys.
    fn key_generation(&self) -> u64 {
        0
    }
}

/// An artifact as listed by [`ArtifactStore::scan`].
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactEntry {
    /// Its id.
    pub artifact_id: String,
    /// Its metadata (expired ones included: the sweeper removes them).
    pub meta: ArtifactMeta,
}

/// What a bulk delete removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Artifacts.
    pub artifacts: u64,
    /// Content bytes.
    pub bytes: u64,
}

/// What is known about an artifact besides its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactMeta {
    /// Owner; part of the storage key.
    pub tenant: String,
    /// Thread the content came from; part of the storage key.
    pub thread_id: String,
    /// Write time.
    pub created_at_unix_ms: u64,
    /// After this many seconds past `created_at_unix_ms` the artifact reads as
    /// `NotFound`; `None` keeps it.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Highest sensitivity of the content (gates rehydration).
    pub sensitivity: Sensitivity,
    /// Key that encrypted it, once encryption exists.
    #[serde(default)]
    pub key_id: Option<String>,
    /// SHA-256 hex of the content, see [`content_hash`]; empty on `put` = compute it.
    pub content_hash: String,
    /// Content length; `put` records the real length.
    pub size_bytes: u64,
    /// Messages whose content this is.
    #[serde(default)]
    pub message_ids: Vec<String>,
}

impl ArtifactMeta {
    /// The metadata to store with `content`: its real hash and length. A
    /// caller-supplied hash that does not match the content is refused.
    pub fn for_content(&self, content: &[u8]) -> Result<ArtifactMeta, StoreError> {
        let hash = content_hash(content);
        if !self.content_hash.is_empty() && self.content_hash != hash {
            return Err(StoreError::Corrupt(
                "meta.content_hash does not match the content".into(),
            ));
        }
        let mut meta = self.clone();
        meta.content_hash = hash;
        meta.size_bytes = content.len() as u64;
        Ok(meta)
    }

    /// Past its TTL at `now_unix_ms`: it then reads as `NotFound`, like a
    /// deleted artifact.
    pub fn is_expired(&self, now_unix_ms: u64) -> bool {
        self.ttl_seconds.is_some_and(|ttl| {
            now_unix_ms
                >= self
                    .created_at_unix_ms
                    .saturating_add(ttl.saturating_mul(1000))
        })
    }
}

/// The version a commit creates: `expected_version + 1`, for a plan that
/// names the thread it is committed to.
pub(crate) fn next_version(
    plan: &CompactionPlan,
    thread_id: &str,
    expected_version: u64,
) -> Result<u64, StoreError> {
    if plan.thread_id != thread_id {
        return Err(StoreError::InvalidId(
            "plan.thread_id does not match the thread it is committed to".into(),
        ));
    }
    expected_version
        .checked_add(1)
        .ok_or_else(|| StoreError::InvalidId("expected_version is out of range".into()))
}

/// The artifact id [`ArtifactStore::put_keyed`] stores the value of `key`
/// under: 128 bits of SHA-256 over a domain tag and the key, so a keyed id
/// never collides with a random one in practice.
pub fn keyed_artifact_id(domain: &str, key: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(domain.as_bytes());
    h.update([0]);
    h.update(key);
    format!("art_{}", &hex::encode(h.finalize())[..32])
}

/// SHA-256 hex, as recorded in [`ArtifactMeta::content_hash`].
pub fn content_hash(content: &[u8]) -> String {
    hex::encode(Sha256::digest(content))
}

/// Externalized content, one object per artifact.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Writes atomically under `meta.tenant` / `meta.thread_id` and returns a
    /// new random 128-bit id formatted `art_` + 32 lowercase hex.
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError>;
    /// Writes under a caller-chosen `id` (see [`keyed_artifact_id`]) for
    /// content that is a pure function of the key it was derived from (the
    /// summary cache): an object already there is as good as this one, so
    /// a write that finds it succeeds without writing.
    async fn put_keyed(
        &self,
        meta: &ArtifactMeta,
        id: &str,
        content: &[u8],
    ) -> Result<(), StoreError>;
    /// `NotFound` for other tenants or threads, unknown or expired ids;
    /// `InvalidId` for malformed ids (the server maps both to NOT_FOUND).
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError>;
    /// Like `get`, without reading the content.
    async fn get_metadata(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<ArtifactMeta, StoreError>;
    /// Removes an artifact (cleanup after an aborted commit). `NotFound` if absent.
    async fn delete(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(), StoreError>;

    /// Every artifact of `tenant` (of every tenant when `None`), metadata
    /// only. For the sweeper and usage accounting, not for request paths.
    async fn scan(&self, tenant: Option<&str>) -> Result<Vec<ArtifactEntry>, StoreError>;

    /// Removes every artifact of a thread (idempotent).
    async fn delete_thread(&self, tenant: &str, thread_id: &str) -> Result<Removed, StoreError>;
}

/// `art_` + 32 lowercase hex, checked on every read so an id can never be a path.
pub fn validate_artifact_id(id: &str) -> Result<(), StoreError> {
    if crate::model::is_artifact_id(id) {
        Ok(())
    } else {
        Err(StoreError::InvalidId(
            "artifact_id must be `art_` followed by 32 lowercase hex digits".into(),
        ))
    }
}

/// Tenant and thread ids: non-empty, at most [`MAX_ID_BYTES`], not `.` or
/// `..`, no `/`, `\`, NUL or control characters. Whatever passes stays one
/// path component inside the data directory.
pub fn validate_path_segment(field: &str, s: &str) -> Result<(), StoreError> {
    let problem = if s.is_empty() {
        "must not be empty"
    } else if s.len() > MAX_ID_BYTES {
        "must be at most 256 bytes"
    } else if s == "." || s == ".." {
        "must not be `.` or `..`"
    } else if s.contains(['/', '\\']) {
        "must not contain `/` or `\\`"
    } else if s.chars().any(char::is_control) {
        "must not contain control characters"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidId(format!("{field} {problem}")))
}

#[cfg(test)]
mod tests;
