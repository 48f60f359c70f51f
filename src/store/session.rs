//! Append sessions at rest: the server's copy of a thread, so a client can
//! send only what it appended since its last call.
//!
//! A session is a small **head** and a list of immutable **segments**:
//!
//! ```text
//! {thread}/session/head                      version, digest, segment list
//! {thread}/session/seg-{version}-{random}    the messages one append added
//! ```
//!
//! An append replaces the head with a compare-and-swap on the version the
//! client based its append on, so the bytes written per turn follow what
//! was appended, not the thread. Small appends ride in the head itself (its
//! **tail**), so a turn is one write; once the tail would pass
//! [`MAX_TAIL_BYTES`], the tail and the append become one new segment.
//! Segment names carry a random part: two replicas racing on one base never
//! overwrite each other's segment, and the loser's is removed. Past
//! [`MAX_SEGMENTS`] the next append writes the whole thread as one segment
//! instead.
//!
//! Both are sealed like plans: a data key per head version, wrapped by the
//! tenant's key under `{tenant, thread, artifact: "session/v{N}", kind:
//! "session"}`, shared by the head and the segment written with it (one
//! key-service call per append). Only the header (tenant, thread, session
//! id, version, update time) is readable without the key: enough for
//! compare-and-swap and for the sweeper.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::artifact::{crypto_error, sealed_bytes, split_sealed};
use super::envelope::{
    open_content, seal_content, unwrap_key, DataKey, EncryptionContext, Envelope, KeyService,
};
use super::fs::{self, DataDir, Flush, KeyedLocks};
use super::{validate_path_segment, StoreError};
use crate::runtime::lock;

/// The folder (or key prefix) of a thread's session.
pub(crate) const SESSION_DIR: &str = "session";
/// The folder (or key prefix) of a tenant's objects that are no thread's,
/// beside `threads`.
pub(crate) const SHARED_DIR: &str = "shared";
const HEAD: &str = "head";
const HEAD_MAGIC: &[u8] = b"compactd-session v1\n";
const SEGMENT_MAGIC: &[u8] = b"compactd-segment v1\n";

/// Segments a session holds before the next append rewrites the thread as
/// one (bounds the head's size and a cold read's object count).
pub const MAX_SEGMENTS: usize = 64;

/// Bytes of appended messages a head carries before they move to a segment:
/// a turn then writes one object, not two (half the PUTs on S3), and the
/// head each turn rewrites stays small.
pub const MAX_TAIL_BYTES: usize = 64 * 1024;

/// One segment of a session, as the head lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRef {
    /// Object name inside the session folder.
    pub name: String,
    /// The head version that wrote it (its key's context).
    pub version: u64,
    /// Messages it holds.
    pub messages: u64,
}

pub use crate::render::prefix::PrefixTrace;

/// A session's head, opened.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionHead {
    /// Random id of this session; a restart (the thread sent in full again)
    /// makes a new one, so copies of the old one are never taken for it.
    pub session: String,
    /// Bumped by every write; what a client appends to.
    pub version: u64,
    /// Last write.
    pub updated_at_unix_ms: u64,
    /// The thread digest the caller computed (hex).
    pub digest: String,
    /// Messages in the thread.
    pub messages: u64,
    /// The segments, in thread order.
    pub segments: Vec<SegmentRef>,
    /// The messages after the segments, as the caller wrote them (opaque,
    /// like a segment's content).
    pub tail: String,
    /// The last render's trace, when there was one.
    pub prefix: Option<PrefixTrace>,
    /// The head's tag, as compare-and-swap checks it; `None` when the
    /// backend did not say what it is after a write.
    pub tag: Option<String>,
}

/// The readable part of a sealed head or segment; its exact bytes are
/// authenticated with the content.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    tenant: String,
    thread_id: String,
    session: String,
    version: u64,
    updated_at_unix_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct HeadBody {
    digest: String,
    messages: u64,
    segments: Vec<SegmentRef>,
    /// The messages after the segments, as written (heads of earlier
    /// versions have none). A reader that predates it fails closed: the
    /// message count and digest no longer match its segments.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    tail: String,
    #[serde(default)]
    prefix: Option<PrefixTrace>,
}

/// A session's head as read, not yet opened: what compare-and-swap and a
/// copy held in memory are checked against (no key needed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    /// The session's random id.
    pub session: String,
    /// Its version.
    pub version: u64,
    /// What a write replacing this head must find (ETag or bytes hash).
    pub tag: String,
    bytes: Vec<u8>,
}

impl Peek {
    /// A head this process wrote or read before, known without reading it
    /// again: a write based on it needs only its tag, and compare-and-swap
    /// still refuses it if another writer has replaced the head since. It
    /// cannot be opened ([`ThreadStore::open_head`] is for heads read from
    /// the store).
    pub fn written(session: String, version: u64, tag: String) -> Self {
        Peek {
            session,
            version,
            tag,
            bytes: Vec::new(),
        }
    }
}

/// What to write: the new head's content and, when messages were
/// appended, the segment holding them.
#[derive(Debug, Clone)]
pub struct SessionWrite {
    /// Compare-and-swap: the head the write is based on; `None` starts a new
    /// session over whatever is there.
    pub base: Option<Peek>,
    /// Digest of the whole thread after the write.
    pub digest: String,
    /// Messages of the whole thread after the write.
    pub messages: u64,
    /// Segments of the base kept, in order (all of them for an append; none
    /// for a start or a consolidation).
    pub keep: Vec<SegmentRef>,
    /// The new segment's content and message count, if any.
    pub segment: Option<(Vec<u8>, u64)>,
    /// The messages after the segments, carried in the head (opaque, like
    /// a segment's content).
    pub tail: String,
    /// The render trace to keep.
    pub prefix: Option<PrefixTrace>,
    /// Segments of the base the new head no longer lists (rewritten into
    /// the new segment): removed once the head is written.
    pub retire: Vec<SegmentRef>,
}

/// What is in a head's place when a session starts.
enum Replaced {
    Absent,
    Head(Peek),
    /// A head that does not read, with its tag.
    Unreadable(String),
}

/// Where a write must find the object it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Nothing there.
    Absent,
    /// The object with this tag (an ETag, or a hash of the bytes).
    Tag(String),
    /// Whatever is there (unique names).
    Any,
}

/// What [`Blobs::put`] answers when `expect` does not hold; the store
/// fills in the versions.
pub(crate) fn lost_race() -> StoreError {
    StoreError::Conflict {
        expected: 0,
        current: 0,
    }
}

impl Expect {
    /// Whether the object found (its tag, if any) is what the write expects.
    fn holds(&self, found: Option<&str>) -> bool {
        match (self, found) {
            (Expect::Any, _) | (Expect::Absent, None) => true,
            (Expect::Tag(t), Some(f)) => t == f,
            _ => false,
        }
    }
}

/// Raw objects of sessions, per (tenant, thread): what each backend
/// provides. Sealing, versions and the segment list are [`ThreadStore`]'s.
#[async_trait]
pub(crate) trait Blobs: Send + Sync {
    /// The object's bytes and tag; `None` if absent.
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError>;
    /// Writes `name`; `Conflict` when `expect` does not hold. `flush` says
    /// whether the write must be durable when this returns (a backend that
    /// is always durable ignores it). Returns the tag of what was written,
    /// when the backend says.
    async fn put(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
        flush: Flush,
    ) -> Result<Option<String>, StoreError>;
    /// A tenant-wide object beside the threads (`{tenant}/shared/{name}`),
    /// with its tag; `None` if absent.
    async fn get_shared(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError>;
    /// Writes a tenant-wide object, durably; `Conflict` when `expect` does
    /// not hold. Returns its tag, when the backend says.
    async fn put_shared(
        &self,
        tenant: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
    ) -> Result<Option<String>, StoreError>;
    /// Removes the named objects (missing ones are fine).
    async fn remove(
        &self,
        tenant: &str,
        thread_id: &str,
        names: &[String],
    ) -> Result<(), StoreError>;
    /// Removes the thread's whole session; `false` when there was none.
    async fn remove_all(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError>;
    /// The bytes of every head (for the sweeper).
    async fn heads(&self) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Removes the sessions whose head has no readable header and was last
    /// written `idle_ttl_ms` ago or more (the sweeper cannot tell whose
    /// they are from the bytes); how many. Only a backend whose head writes
    /// can tear has any.
    async fn remove_torn(&self, _idle_ttl_ms: u64) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// Sessions over a backend, sealed with the tenant's keys.
#[derive(Clone)]
pub struct ThreadStore {
    blobs: Arc<dyn Blobs>,
    keys: Arc<dyn KeyService>,
}

impl std::fmt::Debug for ThreadStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadStore").finish_non_exhaustive()
    }
}

fn object(version: u64) -> String {
    format!("session/v{version}")
}

fn aad(kind: &[u8], meta_raw: &[u8]) -> Vec<u8> {
    let mut out = b"compactd-session-aad v1\0".to_vec();
    out.extend_from_slice(kind);
    out.push(0);
    out.extend_from_slice(meta_raw);
    out
}

/// What compare-and-swap compares on the filesystem: a hash of the
/// object's first two lines (its magic and header). Every write seals under
/// a new data key, so the header alone tells writes apart, and a writer
/// need not read (or hash) the rest. An object without them is hashed
/// whole.
fn header_tag(bytes: &[u8]) -> String {
    let end = header_end(bytes).unwrap_or(bytes.len());
    hex::encode(&Sha256::digest(&bytes[..end])[..16])
}

/// Where the second line ends.
fn header_end(bytes: &[u8]) -> Option<usize> {
    let first = memchr::memchr(b'\n', bytes)?;
    let second = memchr::memchr(b'\n', &bytes[first + 1..])?;
    Some(first + 1 + second + 1)
}

/// The [`header_tag`] of the file at `path` (`None`: there is none),
/// reading no further than its header.
fn read_tag(path: &std::path::Path) -> std::io::Result<Option<String>> {
    Ok(read_header(path)?.map(|bytes| header_tag(&bytes)))
}

/// The start of the file at `path` through its header (the whole file when
/// it has no complete header; `None`: there is no file), reading no further.
fn read_header(path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (mut read, mut chunk) = (Vec::new(), [0u8; 8192]);
    loop {
        let n = file.read(&mut chunk)?;
        read.extend_from_slice(&chunk[..n]);
        if n == 0 || header_end(&read).is_some() {
            return Ok(Some(read));
        }
    }
}

/// A sealed object split at its header, checked to belong to `tenant` and
/// `thread_id`.
fn parse<'a>(
    bytes: &'a [u8],
    magic: &[u8],
    tenant: &str,
    thread_id: &str,
) -> Result<(Meta, Envelope, &'a [u8], usize), StoreError> {
    let (header, body_at) = split_sealed(bytes, magic)?
        .ok_or_else(|| StoreError::Corrupt("session object has no header".into()))?;
    let raw: &'a [u8] = header.meta.get().as_bytes();
    let meta: Meta = serde_json::from_slice(raw)
        .map_err(|e| StoreError::Corrupt(format!("session header does not parse: {e}")))?;
    if meta.tenant != tenant || meta.thread_id != thread_id {
        return Err(StoreError::Corrupt(
            "session object belongs to a different tenant or thread".into(),
        ));
    }
    Ok((meta, header.envelope, raw, body_at))
}

impl ThreadStore {
    /// Sessions in `blobs`, sealed with `keys`.
    pub(crate) fn new(blobs: Arc<dyn Blobs>, keys: Arc<dyn KeyService>) -> Self {
        ThreadStore { blobs, keys }
    }

    /// Sessions under the data directory, next to the plans.
    pub fn fs(data_dir: &std::path::Path, keys: Arc<dyn KeyService>) -> Result<Self, StoreError> {
        Ok(ThreadStore::new(
            Arc::new(FsBlobs {
                dir: DataDir::open(data_dir)?,
                locks: KeyedLocks::default(),
            }),
            keys,
        ))
    }

    /// Sessions in memory, sealed under a key that lives as long as the
    /// process (the offline CLI, tests).
    pub fn memory() -> Self {
        ThreadStore::new(
            Arc::new(MemoryBlobs::default()),
            Arc::new(super::envelope::EphemeralKeys::default()),
        )
    }

    /// The session's head, unopened; `None` when there is none, or it has
    /// not been written to for `idle_ttl_ms` (0: never expires).
    pub async fn peek(
        &self,
        tenant: &str,
        thread_id: &str,
        idle_ttl_ms: u64,
    ) -> Result<Option<Peek>, StoreError> {
        let Some((bytes, tag)) = self.blobs.get(tenant, thread_id, HEAD).await? else {
            return Ok(None);
        };
        let (meta, ..) = parse(&bytes, HEAD_MAGIC, tenant, thread_id)?;
        if expired(&meta, idle_ttl_ms) {
            return Ok(None);
        }
        Ok(Some(Peek {
            session: meta.session,
            version: meta.version,
            tag,
            bytes,
        }))
    }

    /// A peeked head, opened.
    pub async fn open_head(
        &self,
        tenant: &str,
        thread_id: &str,
        peek: &Peek,
    ) -> Result<SessionHead, StoreError> {
        let (meta, ..) = parse(&peek.bytes, HEAD_MAGIC, tenant, thread_id)?;
        let body = self
            .open(&peek.bytes, HEAD_MAGIC, b"head", tenant, thread_id)
            .await?;
        let body: HeadBody = serde_json::from_slice(&body)
            .map_err(|e| StoreError::Corrupt(format!("session head does not parse: {e}")))?;
        Ok(SessionHead {
            session: meta.session,
            version: meta.version,
            updated_at_unix_ms: meta.updated_at_unix_ms,
            digest: body.digest,
            messages: body.messages,
            segments: body.segments,
            tail: body.tail,
            prefix: body.prefix,
            tag: Some(peek.tag.clone()),
        })
    }

    /// The session's head, opened; `None` as for [`ThreadStore::peek`].
    pub async fn head(
        &self,
        tenant: &str,
        thread_id: &str,
        idle_ttl_ms: u64,
    ) -> Result<Option<SessionHead>, StoreError> {
        match self.peek(tenant, thread_id, idle_ttl_ms).await? {
            Some(p) => Ok(Some(self.open_head(tenant, thread_id, &p).await?)),
            None => Ok(None),
        }
    }

    /// What a start finds in the head's place. A head whose header does not
    /// read (torn by a crash: heads are not synced) is replaced too.
    async fn replaceable(&self, tenant: &str, thread_id: &str) -> Result<Replaced, StoreError> {
        match self.peek(tenant, thread_id, 0).await {
            Ok(Some(old)) => Ok(Replaced::Head(old)),
            Ok(None) => Ok(Replaced::Absent),
            Err(StoreError::Corrupt(_)) => Ok(self
                .blobs
                .get(tenant, thread_id, HEAD)
                .await?
                .map_or(Replaced::Absent, |(_, tag)| Replaced::Unreadable(tag))),
            Err(e) => Err(e),
        }
    }

    /// The current version, for a conflict's answer (0: no session).
    async fn current_version(&self, tenant: &str, thread_id: &str) -> Result<u64, StoreError> {
        match self.peek(tenant, thread_id, 0).await {
            Ok(p) => Ok(p.map_or(0, |p| p.version)),
            Err(StoreError::Corrupt(_)) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// A segment's content. `NotFound` when it is gone (a newer head
    /// consolidated the session meanwhile: read the head again).
    pub async fn segment(
        &self,
        tenant: &str,
        thread_id: &str,
        segment: &SegmentRef,
    ) -> Result<Vec<u8>, StoreError> {
        let Some((bytes, _)) = self.blobs.get(tenant, thread_id, &segment.name).await? else {
            return Err(StoreError::NotFound);
        };
        self.open(
            &bytes,
            SEGMENT_MAGIC,
            segment.name.as_bytes(),
            tenant,
            thread_id,
        )
        .await
    }

    async fn open(
        &self,
        bytes: &[u8],
        magic: &[u8],
        kind: &[u8],
        tenant: &str,
        thread_id: &str,
    ) -> Result<Vec<u8>, StoreError> {
        let (meta, envelope, raw, body_at) = parse(bytes, magic, tenant, thread_id)?;
        let key = unwrap_key(
            &*self.keys,
            &envelope,
            &EncryptionContext::session(tenant, thread_id, &object(meta.version)),
        )
        .await
        .map_err(crypto_error)?;
        open_content(&key, &envelope, &aad(kind, raw), &bytes[body_at..]).map_err(crypto_error)
    }

    fn seal(
        dk: &DataKey,
        magic: &[u8],
        kind: &[u8],
        meta: &Meta,
        body: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let raw = serde_json::value::to_raw_value(meta)
            .map_err(|e| StoreError::Corrupt(format!("session header does not serialize: {e}")))?;
        let (envelope, ciphertext) =
            seal_content(dk, &aad(kind, raw.get().as_bytes()), body).map_err(crypto_error)?;
        sealed_bytes(magic, &raw, &envelope, &ciphertext)
    }

    /// What the head must be for the write to hold, the version it writes
    /// and the segments of a head a start replaces (removed after it).
    async fn expectation(
        &self,
        tenant: &str,
        thread_id: &str,
        write: &SessionWrite,
    ) -> Result<(Expect, u64, Vec<SegmentRef>), StoreError> {
        Ok(match &write.base {
            // The head read when the append began: the write holds only if
            // it is still there.
            Some(base) => (Expect::Tag(base.tag.clone()), base.version + 1, Vec::new()),
            // A start replaces whatever is there; its segments go after.
            None => match self.replaceable(tenant, thread_id).await? {
                Replaced::Unreadable(tag) => (Expect::Tag(tag), clock_version(0), Vec::new()),
                Replaced::Absent => (Expect::Absent, clock_version(0), Vec::new()),
                Replaced::Head(old) => {
                    let segments = self
                        .open_head(tenant, thread_id, &old)
                        .await
                        .map(|h| h.segments)
                        .unwrap_or_default();
                    (Expect::Tag(old.tag), clock_version(old.version), segments)
                }
            },
        })
    }

    /// The write's new segment, if it has one: sealed, synced (a head
    /// never names a segment that is not on disk) and listed in
    /// `segments`; its name.
    async fn write_segment(
        &self,
        tenant: &str,
        thread_id: &str,
        write: &SessionWrite,
        (dk, meta): (&DataKey, &Meta),
        segments: &mut Vec<SegmentRef>,
    ) -> Result<Option<String>, StoreError> {
        let version = meta.version;
        if let Some((content, messages)) = &write.segment {
            let name = format!("seg-{version:020}-{:016x}", rand::random::<u64>());
            let bytes = Self::seal(dk, SEGMENT_MAGIC, name.as_bytes(), meta, content)?;
            self.blobs
                .put(tenant, thread_id, &name, bytes, Expect::Any, Flush::Synced)
                .await?;
            segments.push(SegmentRef {
                name: name.clone(),
                version,
                messages: *messages,
            });
            return Ok(Some(name));
        }
        Ok(None)
    }

    /// Writes a new head (and segment) if the session is still at
    /// `write.base`; `Conflict` (with the current version) otherwise, with
    /// nothing left behind. Returns the head written.
    pub async fn write(
        &self,
        tenant: &str,
        thread_id: &str,
        write: SessionWrite,
    ) -> Result<SessionHead, StoreError> {
        let (expect, version, dropped) = self.expectation(tenant, thread_id, &write).await?;
        let session = match &write.base {
            Some(base) => base.session.clone(),
            None => hex::encode(rand::random::<[u8; 12]>()),
        };
        let meta = Meta {
            tenant: tenant.to_owned(),
            thread_id: thread_id.to_owned(),
            session: session.clone(),
            version,
            updated_at_unix_ms: fs::now_unix_ms(),
        };
        let dk = self
            .keys
            .generate_data_key(&EncryptionContext::session(
                tenant,
                thread_id,
                &object(version),
            ))
            .await
            .map_err(crypto_error)?;
        let mut segments = write.keep.clone();
        let written = self
            .write_segment(tenant, thread_id, &write, (&dk, &meta), &mut segments)
            .await?;
        let body = HeadBody {
            digest: write.digest.clone(),
            messages: write.messages,
            segments: segments.clone(),
            tail: write.tail.clone(),
            prefix: write.prefix.clone(),
        };
        let body = serde_json::to_vec(&body)
            .map_err(|e| StoreError::Corrupt(format!("session head does not serialize: {e}")))?;
        let head = Self::seal(&dk, HEAD_MAGIC, b"head", &meta, &body)?;
        // Segments the new head no longer lists (a restart's, or those a
        // consolidation rewrote), removed once it is written.
        let mut unused: Vec<String> = dropped
            .into_iter()
            .chain(write.retire.iter().cloned())
            .map(|s| s.name)
            .collect();
        unused.retain(|n| !segments.iter().any(|s| &s.name == n));
        // The head is rewritten every turn and need not survive a crash: one
        // that went back to an earlier version holds a thread the client
        // had (segments are synced before a head names them), and a torn
        // one does not open, which the caller answers like an unknown
        // session (the client sends its thread in full). Only a head whose
        // write is followed by removals is synced, so that the old one never
        // comes back listing removed segments.
        let flush = if unused.is_empty() {
            Flush::Lazy
        } else {
            Flush::Synced
        };
        let tag = match self
            .blobs
            .put(tenant, thread_id, HEAD, head, expect, flush)
            .await
        {
            Ok(tag) => tag,
            Err(e) => {
                if let Some(name) = written {
                    // Never referenced: remove it (best effort; DeleteThread
                    // removes the whole session folder anyway).
                    let _ = self.blobs.remove(tenant, thread_id, &[name]).await;
                }
                return Err(match e {
                    StoreError::Conflict { .. } => StoreError::Conflict {
                        expected: write.base.as_ref().map_or(0, |b| b.version),
                        current: self.current_version(tenant, thread_id).await?,
                    },
                    other => other,
                });
            }
        };
        // Best effort: a reader that still needs one reads the head again.
        if !unused.is_empty() {
            if let Err(e) = self.blobs.remove(tenant, thread_id, &unused).await {
                tracing::warn!(error = %e, "session segments no longer used could not be removed");
            }
        }
        Ok(SessionHead {
            session,
            version,
            updated_at_unix_ms: meta.updated_at_unix_ms,
            digest: write.digest,
            messages: write.messages,
            segments,
            tail: write.tail,
            prefix: write.prefix,
            tag,
        })
    }

    /// A tenant-wide object (not sealed: only what holds no content, such
    /// as the count calibration) and its tag for [`ThreadStore::put_shared`].
    pub async fn shared(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        self.blobs.get_shared(tenant, name).await
    }

    /// Replaces a tenant-wide object when it still has the tag `replacing`
    /// (`None`: when there is none yet); `Conflict` otherwise. Returns the
    /// new tag, when the backend says.
    pub async fn put_shared(
        &self,
        tenant: &str,
        name: &str,
        bytes: Vec<u8>,
        replacing: Option<String>,
    ) -> Result<Option<String>, StoreError> {
        let expect = replacing.map_or(Expect::Absent, Expect::Tag);
        self.blobs.put_shared(tenant, name, bytes, expect).await
    }

    /// Removes the thread's session; `false` when there was none.
    pub async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        self.blobs.remove_all(tenant, thread_id).await
    }

    /// Removes every session not written to for `idle_ttl_ms`; returns how
    /// many.
    pub async fn sweep(&self, idle_ttl_ms: u64) -> Result<u64, StoreError> {
        if idle_ttl_ms == 0 {
            return Ok(0);
        }
        let mut removed = self.blobs.remove_torn(idle_ttl_ms).await?;
        for bytes in self.blobs.heads().await? {
            let Some(meta) = readable_meta(&bytes) else {
                continue;
            };
            if expired(&meta, idle_ttl_ms)
                && self.blobs.remove_all(&meta.tenant, &meta.thread_id).await?
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// A new session's first version: microseconds since the epoch, and past
/// `replaced` (the head it replaces, 0 for none). Versions of a session
/// that was deleted, or lost to a crash (heads are not synced; a torn one's
/// version is unknown), were each one call, so they stay below the clock:
/// a client holding one is never taken for a client of the new session.
/// Below 2^53 for centuries, so JSON clients keep it exact.
fn clock_version(replaced: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
    now.max(replaced.saturating_add(1))
}

/// A head's readable header; `None` when it has none (torn).
fn readable_meta(bytes: &[u8]) -> Option<Meta> {
    let (header, _) = split_sealed(bytes, HEAD_MAGIC).ok()??;
    serde_json::from_slice(header.meta.get().as_bytes()).ok()
}

fn expired(meta: &Meta, idle_ttl_ms: u64) -> bool {
    idle_past(meta.updated_at_unix_ms, idle_ttl_ms)
}

/// Whether a session last written at `updated_at_unix_ms` has been idle for
/// `idle_ttl_ms` (never, when that is 0): a reader takes it as gone.
pub(crate) fn idle_past(updated_at_unix_ms: u64, idle_ttl_ms: u64) -> bool {
    idle_ttl_ms != 0 && fs::now_unix_ms() >= updated_at_unix_ms.saturating_add(idle_ttl_ms)
}

/// Sessions in the data directory: `{thread_dir}/session/`. Compare-and-swap
/// is serialized per thread within the process (like the fs plan store).
struct FsBlobs {
    dir: DataDir,
    locks: KeyedLocks<PathBuf>,
}

impl FsBlobs {
    fn folder(&self, tenant: &str, thread_id: &str) -> Result<PathBuf, StoreError> {
        Ok(self.dir.thread_dir(tenant, thread_id)?.join(SESSION_DIR))
    }

    /// `tenants/{tenant}/shared`, after validating the tenant and `name`.
    fn shared_folder(&self, tenant: &str, name: &str) -> Result<PathBuf, StoreError> {
        validate_path_segment("name", name)?;
        let threads = self.dir.tenant_threads(tenant)?;
        Ok(threads.with_file_name(SHARED_DIR))
    }

    /// The file at `path` and its tag.
    async fn get_in(&self, path: PathBuf) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        fs::blocking(move || {
            Ok(fs::read_optional(&path)?.map(|b| {
                let tag = header_tag(&b);
                (b, tag)
            }))
        })
        .await
    }

    /// Writes `name` in `folder` when `expect` holds (serialized per folder).
    async fn put_in(
        &self,
        folder: PathBuf,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
        flush: Flush,
    ) -> Result<Option<String>, StoreError> {
        let guard = self.locks.get(&folder).lock_owned().await;
        let dir = self.dir.clone();
        let name = name.to_owned();
        fs::blocking(move || {
            let _guard = guard;
            let found = read_tag(&folder.join(&name))?;
            if !expect.holds(found.as_deref()) {
                return Err(lost_race());
            }
            dir.ensure_dir(&folder)?;
            fs::write_replacing(&folder, &name, &bytes, flush)?;
            Ok(Some(header_tag(&bytes)))
        })
        .await
    }
}

fn not_found_ok(r: std::io::Result<()>) -> std::io::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Blobs for FsBlobs {
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        self.get_in(self.folder(tenant, thread_id)?.join(name))
            .await
    }

    async fn put(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
        flush: Flush,
    ) -> Result<Option<String>, StoreError> {
        self.put_in(self.folder(tenant, thread_id)?, name, bytes, expect, flush)
            .await
    }

    async fn get_shared(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        self.get_in(self.shared_folder(tenant, name)?.join(name))
            .await
    }

    async fn put_shared(
        &self,
        tenant: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
    ) -> Result<Option<String>, StoreError> {
        let folder = self.shared_folder(tenant, name)?;
        self.put_in(folder, name, bytes, expect, Flush::Synced)
            .await
    }

    async fn remove(
        &self,
        tenant: &str,
        thread_id: &str,
        names: &[String],
    ) -> Result<(), StoreError> {
        let folder = self.folder(tenant, thread_id)?;
        let names = names.to_vec();
        fs::blocking(move || {
            for name in names {
                not_found_ok(std::fs::remove_file(folder.join(name)))?;
            }
            Ok(())
        })
        .await
    }

    async fn remove_all(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let folder = self.folder(tenant, thread_id)?;
        let guard = self.locks.get(&folder).lock_owned().await;
        fs::blocking(move || {
            let _guard = guard;
            Ok(not_found_ok(std::fs::remove_dir_all(&folder))?)
        })
        .await
    }

    async fn heads(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let tenants = self.dir.tenants();
        fs::blocking(move || {
            let mut out = Vec::new();
            for tenant in fs::subdirs(&tenants)? {
                for thread in fs::subdirs(&tenant.join("threads"))? {
                    if let Some(b) = fs::read_optional(&thread.join(SESSION_DIR).join(HEAD))? {
                        out.push(b);
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Heads are written without waiting for the disk, so a crash can
    /// leave one torn; its folder is removed like an idle session's, by
    /// the file's age, under the folder's lock (a start may be replacing it).
    async fn remove_torn(&self, idle_ttl_ms: u64) -> Result<u64, StoreError> {
        let tenants = self.dir.tenants();
        let idle = std::time::Duration::from_millis(idle_ttl_ms);
        let torn_and_idle = move |folder: &std::path::Path| -> Result<bool, StoreError> {
            let head = folder.join(HEAD);
            // The header says whether it is torn: the body is not read.
            let Some(bytes) = read_header(&head)? else {
                return Ok(false);
            };
            let age = std::fs::metadata(&head)?
                .modified()?
                .elapsed()
                .unwrap_or_default();
            Ok(readable_meta(&bytes).is_none() && age >= idle)
        };
        let candidates = fs::blocking(move || {
            let mut out = Vec::new();
            for tenant in fs::subdirs(&tenants)? {
                for thread in fs::subdirs(&tenant.join("threads"))? {
                    let folder = thread.join(SESSION_DIR);
                    if torn_and_idle(&folder)? {
                        out.push(folder);
                    }
                }
            }
            Ok(out)
        })
        .await?;
        let mut removed = 0;
        for folder in candidates {
            let guard = self.locks.get(&folder).lock_owned().await;
            let gone = fs::blocking(move || {
                let _guard = guard;
                if !torn_and_idle(&folder)? {
                    return Ok(false);
                }
                Ok(not_found_ok(std::fs::remove_dir_all(&folder))?)
            })
            .await?;
            if gone {
                tracing::warn!("sweep: removed an idle append session whose head was torn");
                removed += 1;
            }
        }
        Ok(removed)
    }
}

type Objects = HashMap<String, (Vec<u8>, String)>;

/// Sessions in memory.
#[derive(Default)]
struct MemoryBlobs {
    threads: Mutex<HashMap<(String, String), Objects>>,
    /// Per tenant, its shared objects.
    shared: Mutex<HashMap<String, Objects>>,
}

fn memory_key(tenant: &str, thread_id: &str) -> Result<(String, String), StoreError> {
    validate_path_segment("tenant", tenant)?;
    validate_path_segment("thread_id", thread_id)?;
    Ok((tenant.to_owned(), thread_id.to_owned()))
}

#[async_trait]
impl Blobs for MemoryBlobs {
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        let k = memory_key(tenant, thread_id)?;
        Ok(lock(&self.threads)
            .get(&k)
            .and_then(|o| o.get(name))
            .cloned())
    }

    async fn put(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
        _flush: Flush,
    ) -> Result<Option<String>, StoreError> {
        let k = memory_key(tenant, thread_id)?;
        let mut threads = lock(&self.threads);
        let objects = threads.entry(k).or_default();
        if !expect.holds(objects.get(name).map(|(_, tag)| tag.as_str())) {
            return Err(lost_race());
        }
        let tag = header_tag(&bytes);
        objects.insert(name.to_owned(), (bytes, tag.clone()));
        Ok(Some(tag))
    }

    async fn remove(
        &self,
        tenant: &str,
        thread_id: &str,
        names: &[String],
    ) -> Result<(), StoreError> {
        let k = memory_key(tenant, thread_id)?;
        if let Some(objects) = lock(&self.threads).get_mut(&k) {
            for n in names {
                objects.remove(n);
            }
        }
        Ok(())
    }

    async fn get_shared(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        validate_path_segment("tenant", tenant)?;
        Ok(lock(&self.shared)
            .get(tenant)
            .and_then(|o| o.get(name))
            .cloned())
    }

    async fn put_shared(
        &self,
        tenant: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: Expect,
    ) -> Result<Option<String>, StoreError> {
        validate_path_segment("tenant", tenant)?;
        validate_path_segment("name", name)?;
        let mut shared = lock(&self.shared);
        let objects = shared.entry(tenant.to_owned()).or_default();
        if !expect.holds(objects.get(name).map(|(_, tag)| tag.as_str())) {
            return Err(lost_race());
        }
        let tag = header_tag(&bytes);
        objects.insert(name.to_owned(), (bytes, tag.clone()));
        Ok(Some(tag))
    }

    async fn remove_all(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let k = memory_key(tenant, thread_id)?;
        Ok(lock(&self.threads)
            .remove(&k)
            .is_some_and(|o| o.contains_key(HEAD)))
    }

    async fn heads(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(lock(&self.threads)
            .values()
            .filter_map(|o| o.get(HEAD).map(|(b, _)| b.clone()))
            .collect())
    }
}
