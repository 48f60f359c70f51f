//! The data directory: where keys live on disk, and crash-safe writes.
//!
//! Everything here is blocking std I/O, run through [`blocking`] so that one
//! logical operation (several syscalls plus fsyncs) is one trip to tokio's
//! blocking pool.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sha2::{Digest, Sha256};

use super::{validate_path_segment, StoreError};

/// Thread ids up to this many bytes are stored as plain hex (reversible, for
/// operators); longer ones as a hash, since hex would exceed NAME_MAX (255).
const MAX_HEX_THREAD_BYTES: usize = 100;

/// The validated root of one data directory.
#[derive(Debug, Clone)]
pub(super) struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Creates the directory if needed (first start) and checks it is one.
    pub(super) fn open(data_dir: &Path) -> Result<DataDir, StoreError> {
        fs::create_dir_all(data_dir.join("tenants")).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create data directory {}: {e}",
                data_dir.display()
            ))
        })?;
        Ok(DataDir {
            root: data_dir.to_path_buf(),
        })
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// `tenants/{tenant}/threads`, after validating the tenant.
    pub(super) fn tenant_threads(&self, tenant: &str) -> Result<PathBuf, StoreError> {
        validate_path_segment("tenant", tenant)?;
        Ok(self.root.join("tenants").join(tenant).join("threads"))
    }

    /// `tenants/`.
    pub(super) fn tenants(&self) -> PathBuf {
        self.root.join("tenants")
    }

    /// `tenants/{tenant}/threads/{thread_dir}`, after validating both ids.
    pub(super) fn thread_dir(&self, tenant: &str, thread_id: &str) -> Result<PathBuf, StoreError> {
        validate_path_segment("tenant", tenant)?;
        validate_path_segment("thread_id", thread_id)?;
        Ok(self
            .root
            .join("tenants")
            .join(tenant)
            .join("threads")
            .join(thread_dir_name(thread_id)))
    }

    /// Creates `dir` (under the root) one level at a time, fsyncing each
    /// parent whose entries changed, so a new directory survives a crash.
    /// Never recreates the root itself: a vanished data directory (an
    /// unmounted volume) is an outage, not something to paper over.
    pub(super) fn ensure_dir(&self, dir: &Path) -> Result<(), StoreError> {
        if !self.root.is_dir() {
            return Err(StoreError::Unavailable("data directory is missing".into()));
        }
        let relative = dir
            .strip_prefix(&self.root)
            .map_err(|_| StoreError::InvalidId("path outside the data directory".into()))?;
        let mut current = self.root.clone();
        for component in relative.components() {
            let parent = current.clone();
            current.push(component);
            match fs::create_dir(&current) {
                Ok(()) => sync_dir(&parent)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Hex of the id, or `sha256-<hex of its hash>` when too long. The two forms
/// cannot collide: hex never contains `-`.
pub(super) fn thread_dir_name(thread_id: &str) -> String {
    if thread_id.len() <= MAX_HEX_THREAD_BYTES {
        hex::encode(thread_id)
    } else {
        format!("sha256-{}", hex::encode(Sha256::digest(thread_id)))
    }
}

/// Write to a temp file in the same directory, fsync it, rename over `name`,
/// fsync the directory. A reader sees the old or the new content, never a
/// mix; a crash leaves at most a stray `.{name}.tmp-*` file, which no reader
/// opens.
pub(super) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_replacing(dir, name, bytes, Flush::Synced)
}

/// Whether a write waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Durable once the call returns (two fsyncs).
    Synced,
    /// Visible to every reader at once, but a crash may leave the previous
    /// content, or a truncated or empty file: only for objects whose readers
    /// detect that (they are sealed) and recover from it.
    Lazy,
}

/// [`write_atomic`], with or without waiting for the disk. Without, a
/// running reader still sees the old or the new content, never a mix.
pub(super) fn write_replacing(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    flush: Flush,
) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp-{:016x}", rand::random::<u64>()));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        if flush == Flush::Synced {
            file.sync_all()?;
        }
        drop(file);
        match flush {
            Flush::Synced => {
                fs::rename(&tmp, dir.join(name))?;
                sync_dir(dir)
            }
            Flush::Lazy => replace_lazily(&tmp, &dir.join(name)),
        }
    })();
    if result.is_err() {
        // Best effort: the temp file is harmless, only untidy.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Puts `tmp` in `target`'s place, for a write that does not wait for the
/// disk. Renamed over an existing file, ext4 starts writing the new file
/// back before the rename returns (its `auto_da_alloc` guard for
/// replace-by-rename): 0.1–0.3 ms here, a tenth of a session turn. Swapping
/// the two names and removing the old file does not, and readers still see
/// the old or the new content. Elsewhere, or with no file to swap with, a
/// plain rename.
fn replace_lazily(tmp: &Path, target: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if exchange(tmp, target).is_ok() {
        // `tmp` now names the old content. Best effort: a stray temp file
        // is only untidy (no reader opens one; the thread's removal takes it).
        let _ = fs::remove_file(tmp);
        return Ok(());
    }
    fs::rename(tmp, target)
}

/// `renameat2(RENAME_EXCHANGE)`: fails when either is missing or the file
/// system cannot swap names.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both paths are NUL-terminated and outlive the call, which
    // shares no other memory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes renames and new entries in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// The subdirectories of `dir` (none when it does not exist), skipping
/// anything that is not a directory.
pub(super) fn subdirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// `None` when the file does not exist.
pub(super) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs blocking storage work on tokio's blocking pool.
pub(super) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    crate::runtime::blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable(format!("storage task failed: {e}")))?
}

pub(super) use crate::runtime::now_unix_ms;

/// One async mutex per key, created on demand and dropped when unused, so
/// commits to different threads never wait on each other.
pub(crate) struct KeyedLocks<K = PathBuf> {
    inner: Mutex<LockMap<K>>,
}

impl<K> Default for KeyedLocks<K> {
    fn default() -> Self {
        KeyedLocks {
            inner: Mutex::new(LockMap {
                locks: HashMap::new(),
                prune_at: 0,
            }),
        }
    }
}

impl<K> std::fmt::Debug for KeyedLocks<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLocks").finish_non_exhaustive()
    }
}

struct LockMap<K> {
    locks: HashMap<K, Weak<tokio::sync::Mutex<()>>>,
    prune_at: usize,
}

impl<K: std::hash::Hash + Eq> KeyedLocks<K> {
    pub(crate) fn get<Q>(&self, key: &Q) -> Arc<tokio::sync::Mutex<()>>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The map stays consistent even if a holder panicked, so poisoning is ignored.
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lock) = map.locks.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        if map.locks.len() >= map.prune_at {
            // Amortized cleanup: drop entries nobody holds, then wait for the map to double.
            map.locks.retain(|_, weak| weak.strong_count() > 0);
            map.prune_at = (map.locks.len() * 2).max(1024);
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.locks.insert(key.to_owned(), Arc::downgrade(&lock));
        lock
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Either way, the new content in place and nothing else left behind,
    /// whether or not there was a file to replace.
    #[test]
    fn a_replacing_write_leaves_only_the_new_content() {
        for flush in [Flush::Lazy, Flush::Synced] {
            let dir = tempfile::tempdir().expect("tempdir");
            write_replacing(dir.path(), "head", b"first", flush).expect("create");
            write_replacing(dir.path(), "head", b"second, longer", flush).expect("replace");
            write_replacing(dir.path(), "head", b"3", flush).expect("replace again");
            assert_eq!(fs::read(dir.path().join("head")).expect("read"), b"3");
            assert_eq!(names(dir.path()), ["head"], "{flush:?}");
        }
    }
}
