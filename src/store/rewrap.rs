//! Re-wrapping after a rotation of the local keyring: every sealed artifact
//! and plan under the data directory gets its data key unwrapped by the key
//! that wrapped it and wrapped again under its tenant's current key. Only
//! the envelope in the object's header changes; the ciphertext is copied
//! as it is (the data key is the same, so nothing is re-encrypted), and
//! the metadata bound as associated data is kept byte for byte.
//!
//! Run it with the service stopped: a `plan.json` that changes while it is
//! being re-wrapped is left alone (the next commit seals it under the
//! current key anyway), but the check and the rename are not one step.

use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;

use super::artifact::{crypto_error, sealed_bytes, split_sealed, MAGIC_V2};
use super::envelope::{EncryptionContext, Envelope, LocalKeyring};
use super::fs;
use super::plan::{plan_object, SEALED_MAGIC};
use super::StoreError;

/// What a re-wrap did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrapped {
    /// Objects whose data key is now wrapped by the tenant's current key.
    pub rewrapped: u64,
    /// Objects that already were.
    pub current: u64,
    /// Objects left as they were: plaintext legacy files, files that
    /// changed meanwhile, keys that are gone (shredded tenants).
    pub skipped: u64,
}

/// Who an object belongs to, from its header's metadata.
#[derive(Deserialize)]
struct Owner {
    tenant: String,
    thread_id: String,
    #[serde(default)]
    version: Option<u64>,
}

/// Re-wraps every sealed object under `data_dir` with `keys`.
pub fn rewrap_data_dir(data_dir: &Path, keys: &LocalKeyring) -> Result<Rewrapped, StoreError> {
    let mut done = Rewrapped::default();
    let tenants = data_dir.join("tenants");
    if !tenants.is_dir() {
        return Ok(done);
    }
    for tenant in fs::subdirs(&tenants)? {
        let threads = tenant.join("threads");
        if !threads.is_dir() {
            continue;
        }
        for thread in fs::subdirs(&threads)? {
            let mut objects = Vec::new();
            for (dir, magic) in [
                (thread.join("artifacts"), MAGIC_V2),
                (thread.join(super::PLAN_HISTORY_DIR), SEALED_MAGIC),
            ] {
                if dir.is_dir() {
                    for e in std::fs::read_dir(&dir)? {
                        let path = e?.path();
                        let hidden = path
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
                        if path.is_file() && !hidden {
                            objects.push((path, magic));
                        }
                    }
                }
            }
            let current = thread.join("plan.json");
            if current.is_file() {
                objects.push((current, SEALED_MAGIC));
            }
            for (path, magic) in objects {
                match rewrap_file(&path, magic, keys)? {
                    Some(true) => done.rewrapped += 1,
                    Some(false) => done.current += 1,
                    None => done.skipped += 1,
                }
            }
        }
    }
    Ok(done)
}

/// `Some(true)`: re-wrapped; `Some(false)`: already current; `None`: left
/// alone.
fn rewrap_file(path: &Path, magic: &[u8], keys: &LocalKeyring) -> Result<Option<bool>, StoreError> {
    let bytes = std::fs::read(path)?;
    let Some((header, body_at)) = split_sealed(&bytes, magic)
        .map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display())))?
    else {
        return Ok(None);
    };
    let owner: Owner = serde_json::from_str(header.meta.get())
        .map_err(|e| StoreError::Corrupt(format!("{}: header: {e}", path.display())))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let object;
    let context = if magic == MAGIC_V2 {
        EncryptionContext::artifact(&owner.tenant, &owner.thread_id, &name)
    } else {
        let Some(version) = owner.version else {
            return Ok(None);
        };
        object = plan_object(version);
        EncryptionContext::plan(&owner.tenant, &owner.thread_id, &object)
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let wrapped = b64
        .decode(&header.envelope.wrapped_key)
        .map_err(|_| StoreError::Corrupt(format!("{}: wrapped_key", path.display())))?;
    let (key_id, rewrapped) = match keys.rewrap(&header.envelope.key_id, &wrapped, &context) {
        Ok(Some(new)) => new,
        Ok(None) => return Ok(Some(false)),
        Err(super::envelope::CryptoError::KeyDeleted(_)) => return Ok(None),
        Err(e) => return Err(crypto_error(e)),
    };
    let envelope = Envelope {
        key_id,
        wrapped_key: b64.encode(rewrapped),
        ..header.envelope.clone()
    };
    let out = sealed_bytes(magic, header.meta, &envelope, &bytes[body_at..])?;
    let dir = path
        .parent()
        .ok_or_else(|| StoreError::InvalidId("object path has no parent".into()))?;
    // A file that changed since it was read (a commit) is left to its writer.
    if std::fs::read(path)? != bytes {
        return Ok(None);
    }
    fs::write_atomic(dir, &name, &out)?;
    Ok(Some(true))
}
