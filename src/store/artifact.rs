//! The embedded artifact store: one file per artifact, metadata and content
//! together, so a single atomic rename publishes both. Every artifact is
//! encrypted ([`super::envelope`]); nothing is plaintext at rest.
//!
//! File layout (v2): the line `compactd-artifact v2`, one line of JSON
//! `{"meta": ArtifactMeta, "envelope": Envelope}`, then the AES-256-GCM
//! ciphertext of the content. The metadata's exact bytes and the artifact id
//! are the associated data, so editing the metadata (a sensitivity lowered,
//! a TTL removed) makes the content fail to decrypt. Version 1 files
//! (plaintext, written before encryption existed) are still read until
//! their TTL sweeps them away; nothing writes them any more.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::envelope::{
    open_content, seal_content, unwrap_key, CryptoError, EncryptionContext, Envelope, KeyService,
    LocalKeyring,
};
use super::fs::{self, DataDir};
use super::{
    content_hash, validate_artifact_id, ArtifactEntry, ArtifactMeta, ArtifactStore, Removed,
    StoreError,
};

const MAGIC_V1: &[u8] = b"compactd-artifact v1\n";
pub(super) const MAGIC_V2: &[u8] = b"compactd-artifact v2\n";
/// Metadata is small; a bigger header line means the file is not ours.
const MAX_META_BYTES: u64 = 4 * 1024 * 1024;

/// Where the embedded keyring lives, relative to the data directory.
pub const KEYRING_FILE: &str = "keys/keyring.json";

/// Artifacts on local disk under `tenants/{tenant}/threads/{thread}/artifacts/`.
pub struct FsArtifactStore {
    dir: DataDir,
    keys: Arc<dyn KeyService>,
}

impl std::fmt::Debug for FsArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsArtifactStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Key errors in store terms: a context or tamper failure is corruption
/// (never served), anything else an outage.
pub(super) fn crypto_error(e: CryptoError) -> StoreError {
    match e {
        CryptoError::Invalid(m) => StoreError::Corrupt(format!("does not decrypt: {m}")),
        CryptoError::KeyDeleted(m) => StoreError::KeyDeleted(m),
        CryptoError::Unavailable(m) | CryptoError::KeyFile(m) => StoreError::Unavailable(m),
    }
}

impl FsArtifactStore {
    /// Opens (creating if needed) the store under `data_dir`, encrypting
    /// with the local keyring `{data_dir}/keys/keyring.json` (created 0600
    /// on first start).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let keys =
            LocalKeyring::open_or_create(&data_dir.join(KEYRING_FILE)).map_err(crypto_error)?;
        FsArtifactStore::open_with_keys(data_dir, Arc::new(keys))
    }

    /// Opens the store with another key service (a KMS).
    pub fn open_with_keys(data_dir: &Path, keys: Arc<dyn KeyService>) -> Result<Self, StoreError> {
        Ok(FsArtifactStore {
            dir: DataDir::open(data_dir)?,
            keys,
        })
    }

    fn artifacts_dir(&self, tenant: &str, thread_id: &str) -> Result<PathBuf, StoreError> {
        Ok(self.dir.thread_dir(tenant, thread_id)?.join("artifacts"))
    }

    /// Validates all three ids before any path is built from them.
    fn artifact_path(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<PathBuf, StoreError> {
        validate_artifact_id(artifact_id)?;
        Ok(self.artifacts_dir(tenant, thread_id)?.join(artifact_id))
    }
}

fn new_artifact_id() -> String {
    format!("art_{:032x}", rand::random::<u128>())
}

/// The header line of a sealed object (an artifact, or a plan), as
/// written.
#[derive(Serialize)]
struct HeaderOut<'a> {
    meta: &'a RawValue,
    envelope: &'a Envelope,
}

/// The header line of a sealed object, as read: the metadata's exact bytes
/// are kept, because they are what the content was sealed with.
#[derive(Deserialize)]
pub(super) struct HeaderIn<'a> {
    #[serde(borrow)]
    pub(super) meta: &'a RawValue,
    pub(super) envelope: Envelope,
}

/// A sealed object's bytes: `magic`, the header line (`meta` exactly as
/// given, it is the associated data), then the ciphertext. Artifacts and
/// plans share the layout.
pub(super) fn sealed_bytes(
    magic: &[u8],
    meta: &RawValue,
    envelope: &Envelope,
    ciphertext: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let header = serde_json::to_vec(&HeaderOut { meta, envelope })
        .map_err(|e| StoreError::Corrupt(format!("header does not serialize: {e}")))?;
    let mut bytes = Vec::with_capacity(magic.len() + header.len() + 1 + ciphertext.len());
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&header);
    bytes.push(b'\n');
    bytes.extend_from_slice(ciphertext);
    Ok(bytes)
}

/// The header of a sealed object that starts with `magic` and where its
/// ciphertext starts; `None` when the bytes do not start with `magic`.
pub(super) fn split_sealed<'a>(
    bytes: &'a [u8],
    magic: &[u8],
) -> Result<Option<(HeaderIn<'a>, usize)>, StoreError> {
    let Some(rest) = bytes.strip_prefix(magic) else {
        return Ok(None);
    };
    let end = rest
        .iter()
        .take(MAX_META_BYTES as usize)
        .position(|&b| b == b'\n')
        .ok_or_else(|| StoreError::Corrupt("header is truncated or too large".into()))?;
    let header: HeaderIn<'_> = serde_json::from_slice(&rest[..end])
        .map_err(|e| StoreError::Corrupt(format!("header does not parse: {e}")))?;
    Ok(Some((header, magic.len() + end + 1)))
}

/// A parsed header.
struct Header {
    meta: ArtifactMeta,
    /// `None` for a legacy plaintext (v1) file.
    sealed: Option<(Envelope, Vec<u8>)>,
}

/// The associated data: a label, the artifact id and the metadata bytes.
fn aad(artifact_id: &str, meta_raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + artifact_id.len() + meta_raw.len());
    out.extend_from_slice(b"compactd-artifact-aad v1\0");
    out.extend_from_slice(artifact_id.as_bytes());
    out.push(0);
    out.extend_from_slice(meta_raw);
    out
}

fn parse_meta(line: &[u8]) -> Result<ArtifactMeta, StoreError> {
    serde_json::from_slice(line)
        .map_err(|e| StoreError::Corrupt(format!("artifact metadata does not parse: {e}")))
}

fn parse_header(version: u8, line: &[u8]) -> Result<Header, StoreError> {
    if version == 1 {
        return Ok(Header {
            meta: parse_meta(line)?,
            sealed: None,
        });
    }
    let h: HeaderIn<'_> = serde_json::from_slice(line)
        .map_err(|e| StoreError::Corrupt(format!("artifact header does not parse: {e}")))?;
    let raw = h.meta.get().as_bytes();
    Ok(Header {
        meta: parse_meta(raw)?,
        sealed: Some((h.envelope, raw.to_vec())),
    })
}

/// Checks the artifact belongs to the caller's key and has not expired.
/// Expired reads as `NotFound`, like a deleted one.
fn check_meta(meta: &ArtifactMeta, tenant: &str, thread_id: &str) -> Result<(), StoreError> {
    if meta.tenant != tenant || meta.thread_id != thread_id {
        return Err(StoreError::Corrupt(
            "artifact belongs to a different tenant or thread".into(),
        ));
    }
    if meta.is_expired(fs::now_unix_ms()) {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

fn not_found_or(e: std::io::Error) -> StoreError {
    if e.kind() == std::io::ErrorKind::NotFound {
        StoreError::NotFound
    } else {
        e.into()
    }
}

/// The format version and the header line.
fn read_header(reader: &mut impl BufRead) -> Result<(u8, Vec<u8>), StoreError> {
    let mut magic = vec![0; MAGIC_V2.len()];
    reader
        .read_exact(&mut magic)
        .map_err(|_| StoreError::Corrupt("artifact file is truncated".into()))?;
    let version = if magic == MAGIC_V2 {
        2
    } else if magic == MAGIC_V1 {
        1
    } else {
        return Err(StoreError::Corrupt("not a compactd artifact file".into()));
    };
    let mut line = Vec::new();
    reader.take(MAX_META_BYTES).read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Err(StoreError::Corrupt(
            "artifact metadata is truncated or too large".into(),
        ));
    }
    Ok((version, line))
}

/// Catches truncation and bit rot; content is never served unverified.
fn verify(meta: &ArtifactMeta, content: &[u8]) -> Result<(), StoreError> {
    if content.len() as u64 != meta.size_bytes || content_hash(content) != meta.content_hash {
        return Err(StoreError::Corrupt(
            "artifact content does not match its hash".into(),
        ));
    }
    Ok(())
}

/// An artifact object (v2) ready to be stored under `id`, in the same format
/// on every backend.
pub(super) struct SealedObject {
    /// The new artifact id.
    pub id: String,
    /// Magic, header line and ciphertext.
    pub bytes: Vec<u8>,
}

/// Seals `content` for a new artifact: a fresh id, a data key from `keys`
/// under `{tenant, thread, artifact}`, the metadata serialized once and bound
/// as associated data. Nothing is produced unless the key service answered.
pub(super) async fn seal_object(
    keys: &dyn KeyService,
    meta: &ArtifactMeta,
    content: &[u8],
    id: Option<&str>,
) -> Result<SealedObject, StoreError> {
    let mut meta = meta.for_content(content)?;
    // 128 random bits: a collision is not a practical concern, so no existence check.
    let id = match id {
        Some(id) => {
            super::validate_artifact_id(id)?;
            id.to_string()
        }
        None => new_artifact_id(),
    };
    let context = EncryptionContext::artifact(&meta.tenant, &meta.thread_id, &id);
    let dk = keys
        .generate_data_key(&context)
        .await
        .map_err(crypto_error)?;
    meta.key_id = Some(dk.key_id.clone());
    // Serialized once: these exact bytes are both the header's `meta` and
    // the associated data.
    let raw = serde_json::value::to_raw_value(&meta)
        .map_err(|e| StoreError::Corrupt(format!("metadata does not serialize: {e}")))?;
    let content = content.to_vec();
    fs::blocking(move || {
        let (envelope, ciphertext) =
            seal_content(&dk, &aad(&id, raw.get().as_bytes()), &content).map_err(crypto_error)?;
        let bytes = sealed_bytes(MAGIC_V2, &raw, &envelope, &ciphertext)?;
        Ok(SealedObject { id, bytes })
    })
    .await
}

/// The metadata of a stored object, checked against the caller's tenant and
/// thread (and expiry). Reads only the header.
pub(super) fn object_meta(
    bytes: &[u8],
    tenant: &str,
    thread_id: &str,
) -> Result<ArtifactMeta, StoreError> {
    let meta = object_header_meta(bytes)?;
    check_meta(&meta, tenant, thread_id)?;
    Ok(meta)
}

/// The metadata in a stored object's header, unchecked (for listings).
pub(super) fn object_header_meta(bytes: &[u8]) -> Result<ArtifactMeta, StoreError> {
    let mut reader = bytes;
    let (version, line) = read_header(&mut reader)?;
    Ok(parse_header(version, &line)?.meta)
}

/// Opens a stored object for the caller: header checked against the
/// caller's tenant and thread, the data key unwrapped under the caller's
/// context (not the object's: another tenant's request cannot unwrap it even
/// with the object in its path), content authenticated and hash-verified.
pub(super) async fn open_object(
    keys: &dyn KeyService,
    tenant: &str,
    thread_id: &str,
    artifact_id: &str,
    bytes: Vec<u8>,
) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
    let mut reader = bytes.as_slice();
    let (version, line) = read_header(&mut reader)?;
    let body_at = bytes.len() - reader.len();
    let header = parse_header(version, &line)?;
    check_meta(&header.meta, tenant, thread_id)?;
    let Some((envelope, meta_raw)) = header.sealed else {
        let body = bytes[body_at..].to_vec();
        verify(&header.meta, &body)?;
        return Ok((header.meta, body));
    };
    let context = EncryptionContext::artifact(tenant, thread_id, artifact_id);
    let key = unwrap_key(keys, &envelope, &context)
        .await
        .map_err(crypto_error)?;
    let aad = aad(artifact_id, &meta_raw);
    let meta = header.meta;
    fs::blocking(move || {
        let content =
            open_content(&key, &envelope, &aad, &bytes[body_at..]).map_err(crypto_error)?;
        verify(&meta, &content)?;
        Ok((meta, content))
    })
    .await
}

#[async_trait]
impl ArtifactStore for FsArtifactStore {
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError> {
        let dir = self.artifacts_dir(&meta.tenant, &meta.thread_id)?;
        let sealed = seal_object(self.keys.as_ref(), meta, content, None).await?;
        let data_dir = self.dir.clone();
        fs::blocking(move || {
            data_dir.ensure_dir(&dir)?;
            fs::write_atomic(&dir, &sealed.id, &sealed.bytes)?;
            Ok(sealed.id)
        })
        .await
    }

    async fn put_keyed(
        &self,
        meta: &ArtifactMeta,
        id: &str,
        content: &[u8],
    ) -> Result<(), StoreError> {
        let dir = self.artifacts_dir(&meta.tenant, &meta.thread_id)?;
        let sealed = seal_object(self.keys.as_ref(), meta, content, Some(id)).await?;
        let data_dir = self.dir.clone();
        fs::blocking(move || {
            data_dir.ensure_dir(&dir)?;
            // Atomic rename: a concurrent writer of the same key leaves one
            // whole object either way.
            fs::write_atomic(&dir, &sealed.id, &sealed.bytes)?;
            Ok(())
        })
        .await
    }

    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
        let path = self.artifact_path(tenant, thread_id, artifact_id)?;
        let bytes = fs::blocking(move || std::fs::read(&path).map_err(not_found_or)).await?;
        open_object(self.keys.as_ref(), tenant, thread_id, artifact_id, bytes).await
    }

    async fn get_metadata(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<ArtifactMeta, StoreError> {
        let path = self.artifact_path(tenant, thread_id, artifact_id)?;
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());
        fs::blocking(move || {
            let file = std::fs::File::open(&path).map_err(not_found_or)?;
            let (version, line) = read_header(&mut BufReader::new(file))?;
            let header = parse_header(version, &line)?;
            check_meta(&header.meta, &tenant, &thread_id)?;
            Ok(header.meta)
        })
        .await
    }

    async fn delete(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(), StoreError> {
        let path = self.artifact_path(tenant, thread_id, artifact_id)?;
        fs::blocking(move || {
            std::fs::remove_file(&path).map_err(not_found_or)?;
            if let Some(dir) = path.parent() {
                fs::sync_dir(dir)?;
            }
            Ok(())
        })
        .await
    }

    async fn scan(&self, tenant: Option<&str>) -> Result<Vec<ArtifactEntry>, StoreError> {
        let tenants = match tenant {
            Some(t) => vec![self.dir.tenant_threads(t)?],
            None => Vec::new(),
        };
        let root = self.dir.tenants();
        fs::blocking(move || {
            let tenants = if tenants.is_empty() {
                fs::subdirs(&root)?
                    .into_iter()
                    .map(|t| t.join("threads"))
                    .collect()
            } else {
                tenants
            };
            let mut out = Vec::new();
            for threads in tenants {
                for thread in fs::subdirs(&threads)? {
                    scan_dir(&thread.join("artifacts"), &mut out)?;
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_thread(&self, tenant: &str, thread_id: &str) -> Result<Removed, StoreError> {
        let thread_dir = self.dir.thread_dir(tenant, thread_id)?;
        fs::blocking(move || {
            let dir = thread_dir.join("artifacts");
            let mut entries = Vec::new();
            scan_dir(&dir, &mut entries)?;
            let mut removed = Removed::default();
            for e in &entries {
                match std::fs::remove_file(dir.join(&e.artifact_id)) {
                    Ok(()) => {
                        removed.artifacts += 1;
                        removed.bytes += e.meta.size_bytes;
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(err.into()),
                }
            }
            // Erasure is complete: artifact files whose header does not
            // parse (skipped by the scan) go too, and so do stray temp files
            // of interrupted writes; then the directories.
            if let Ok(rest) = std::fs::read_dir(&dir) {
                for entry in rest.flatten() {
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    if name.starts_with('.') || validate_artifact_id(&name).is_ok() {
                        match std::fs::remove_file(entry.path()) {
                            Ok(()) if !name.starts_with('.') => removed.artifacts += 1,
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            for d in [dir.as_path(), thread_dir.as_path()] {
                match std::fs::remove_dir(d) {
                    Ok(()) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
                        ) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(parent) = thread_dir.parent() {
                let _ = fs::sync_dir(parent);
            }
            Ok(removed)
        })
        .await
    }
}

/// Appends the artifacts in `dir` (headers only); skips temp files and
/// anything that is not an artifact file. A damaged header is skipped with
/// a warning rather than failing the whole scan.
fn scan_dir(dir: &Path, out: &mut Vec<ArtifactEntry>) -> Result<(), StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name.to_str() else { continue };
        if validate_artifact_id(id).is_err() {
            continue;
        }
        let file = match std::fs::File::open(entry.path()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        match read_header(&mut BufReader::new(file)).and_then(|(v, h)| parse_header(v, &h)) {
            Ok(header) => out.push(ArtifactEntry {
                artifact_id: id.to_string(),
                meta: header.meta,
            }),
            Err(e) => {
                tracing::warn!(artifact_id = id, error = %e, "skipping an unreadable artifact")
            }
        }
    }
    Ok(())
}
