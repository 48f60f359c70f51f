//! The embedded artifact store: one file per artifact, metadata and content
//! together, so a single atomic rename publishes both.
//!
//! File layout: the line `compactd-artifact v1`, one line of JSON
//! [`ArtifactMeta`], then the raw content.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::fs::{self, DataDir};
use super::{
    content_hash, validate_artifact_id, ArtifactEntry, ArtifactMeta, ArtifactStore, Removed,
    StoreError,
};

const MAGIC: &[u8] = b"compactd-artifact v1\n";
/// Metadata is small; a bigger header line means the file is not ours.
const MAX_META_BYTES: u64 = 4 * 1024 * 1024;

/// Artifacts on local disk under `tenants/{tenant}/threads/{thread}/artifacts/`.
#[derive(Debug)]
pub struct FsArtifactStore {
    dir: DataDir,
}

impl FsArtifactStore {
    /// Opens (creating if needed) the store under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Ok(FsArtifactStore {
            dir: DataDir::open(data_dir)?,
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

fn parse_meta(line: &[u8]) -> Result<ArtifactMeta, StoreError> {
    serde_json::from_slice(line)
        .map_err(|e| StoreError::Corrupt(format!("artifact metadata does not parse: {e}")))
}

/// Parses the header line; checks the artifact belongs to the caller's key
/// and has not expired. Expired reads as `NotFound`, like a deleted one.
fn check_meta(line: &[u8], tenant: &str, thread_id: &str) -> Result<ArtifactMeta, StoreError> {
    let meta = parse_meta(line)?;
    if meta.tenant != tenant || meta.thread_id != thread_id {
        return Err(StoreError::Corrupt(
            "artifact belongs to a different tenant or thread".into(),
        ));
    }
    if meta.is_expired(fs::now_unix_ms()) {
        return Err(StoreError::NotFound);
    }
    Ok(meta)
}

fn not_found_or(e: std::io::Error) -> StoreError {
    if e.kind() == std::io::ErrorKind::NotFound {
        StoreError::NotFound
    } else {
        e.into()
    }
}

fn read_header(reader: &mut impl BufRead) -> Result<Vec<u8>, StoreError> {
    let mut magic = vec![0; MAGIC.len()];
    reader
        .read_exact(&mut magic)
        .map_err(|_| StoreError::Corrupt("artifact file is truncated".into()))?;
    if magic != MAGIC {
        return Err(StoreError::Corrupt("not a compactd artifact file".into()));
    }
    let mut line = Vec::new();
    reader.take(MAX_META_BYTES).read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Err(StoreError::Corrupt(
            "artifact metadata is truncated or too large".into(),
        ));
    }
    Ok(line)
}

fn read_artifact(
    path: &Path,
    tenant: &str,
    thread_id: &str,
) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
    let file = std::fs::File::open(path).map_err(not_found_or)?;
    let mut reader = BufReader::new(file);
    let meta = check_meta(&read_header(&mut reader)?, tenant, thread_id)?;
    let mut content = Vec::with_capacity(usize::try_from(meta.size_bytes).unwrap_or(0));
    reader.read_to_end(&mut content)?;
    // Catches truncation and bit rot; content is never served unverified.
    if content.len() as u64 != meta.size_bytes || content_hash(&content) != meta.content_hash {
        return Err(StoreError::Corrupt(
            "artifact content does not match its hash".into(),
        ));
    }
    Ok((meta, content))
}

#[async_trait]
impl ArtifactStore for FsArtifactStore {
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError> {
        let dir = self.artifacts_dir(&meta.tenant, &meta.thread_id)?;
        let meta = meta.for_content(content)?;
        let header = serde_json::to_vec(&meta)
            .map_err(|e| StoreError::Corrupt(format!("metadata does not serialize: {e}")))?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + header.len() + 1 + content.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&header);
        bytes.push(b'\n');
        bytes.extend_from_slice(content);

        let data_dir = self.dir.clone();
        fs::blocking(move || {
            data_dir.ensure_dir(&dir)?;
            // 128 random bits: a collision is not a practical concern, so no existence check.
            let id = new_artifact_id();
            fs::write_atomic(&dir, &id, &bytes)?;
            Ok(id)
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
        let (tenant, thread_id) = (tenant.to_owned(), thread_id.to_owned());
        fs::blocking(move || read_artifact(&path, &tenant, &thread_id)).await
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
            let header = read_header(&mut BufReader::new(file))?;
            check_meta(&header, &tenant, &thread_id)
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
            // Stray temp files of interrupted writes go too; then the
            // directories, if nothing else is left in them.
            if let Ok(rest) = std::fs::read_dir(&dir) {
                for entry in rest.flatten() {
                    if entry.file_name().to_string_lossy().starts_with('.') {
                        let _ = std::fs::remove_file(entry.path());
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
        match read_header(&mut BufReader::new(file)).and_then(|h| parse_meta(&h)) {
            Ok(meta) => out.push(ArtifactEntry {
                artifact_id: id.to_string(),
                meta,
            }),
            Err(e) => {
                tracing::warn!(artifact_id = id, error = %e, "skipping an unreadable artifact")
            }
        }
    }
    Ok(())
}
