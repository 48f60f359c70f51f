//! Envelope encryption of artifacts: a fresh 256-bit data key per artifact,
//! wrapped by a key service under the encryption context
//! `{tenant, thread, artifact}`; the content sealed with AES-256-GCM under
//! that data key, with the artifact's metadata as associated data.
//!
//! So an object can only be opened by asking the key service with the same
//! tenant, thread and artifact id (another tenant's context fails to unwrap
//! the key: the tenant check is cryptographic, not only a path check), and
//! any change to the ciphertext or to the metadata it was sealed with fails
//! authentication instead of returning garbage.
//!
//! [`LocalKeyring`] is the embedded key service: master keys in a file
//! created 0600 on first start, each with an id; rotation adds a key and
//! makes it current, and old keys stay to unwrap what they wrapped. AWS KMS
//! is the other implementation of [`KeyService`], with the same envelope.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use async_trait::async_trait;
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use zeroize::Zeroizing;

/// The algorithm recorded in every envelope.
pub const ALGORITHM: &str = "AES-256-GCM";

/// Why a key or envelope operation failed.
#[derive(Debug, Error)]
pub enum CryptoError {
    /// The key service cannot be reached or refused to work (KMS down).
    #[error("key service unavailable: {0}")]
    Unavailable(String),
    /// Authentication failed: tampered data, wrong context or wrong key.
    #[error("decryption failed: {0}")]
    Invalid(String),
    /// The master key that wrapped the data key no longer exists (deleted,
    /// disabled or pending deletion): the data is gone for good, which is
    /// what crypto-shredding a tenant means.
    #[error("key deleted: {0}")]
    KeyDeleted(String),
    /// The key file could not be read, written or parsed.
    #[error("key file: {0}")]
    KeyFile(String),
}

/// Who an object belongs to; bound into every wrap and unwrap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EncryptionContext<'a> {
    /// The owning tenant.
    pub tenant: &'a str,
    /// The thread.
    pub thread: &'a str,
    /// The object: an artifact id, or `plan/v{version}` for a plan.
    pub artifact: &'a str,
    /// What the object is; absent for artifacts (so contexts written before
    /// plans were encrypted stay the same), `plan` for plans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'a str>,
}

impl<'a> EncryptionContext<'a> {
    /// The context of an artifact.
    pub fn artifact(tenant: &'a str, thread: &'a str, artifact: &'a str) -> Self {
        EncryptionContext {
            tenant,
            thread,
            artifact,
            kind: None,
        }
    }

    /// The context of a committed plan version (`object` is `plan/v{version}`).
    pub fn plan(tenant: &'a str, thread: &'a str, object: &'a str) -> Self {
        EncryptionContext {
            tenant,
            thread,
            artifact: object,
            kind: Some("plan"),
        }
    }

    /// The context of an append session's head and segments written as
    /// version `object` (`session/v{N}`).
    pub fn session(tenant: &'a str, thread: &'a str, object: &'a str) -> Self {
        EncryptionContext {
            tenant,
            thread,
            artifact: object,
            kind: Some("session"),
        }
    }
}

impl EncryptionContext<'_> {
    /// Canonical bytes: JSON with the keys in a fixed order.
    pub fn canonical(&self) -> Vec<u8> {
        // Field order of the struct is the serialization order.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A data key as the key service returns it.
pub struct DataKey {
    /// The plaintext key; wiped on drop, never stored or logged.
    pub plaintext: Zeroizing<[u8; 32]>,
    /// Which master key wrapped it.
    pub key_id: String,
    /// The wrapped key, stored with the object.
    pub wrapped: Vec<u8>,
}

/// Wraps and unwraps data keys under an encryption context (KMS
/// `GenerateDataKey` / `Decrypt`, or the local keyring).
#[async_trait]
pub trait KeyService: Send + Sync {
    /// A new data key, wrapped under the current master key and `context`.
    async fn generate_data_key(
        &self,
        context: &EncryptionContext<'_>,
    ) -> Result<DataKey, CryptoError>;

    /// The plaintext of a wrapped data key; `Invalid` unless `context` is the
    /// one it was wrapped under.
    async fn decrypt_data_key(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError>;

    /// Changes whenever the set of keys may have changed (a rotation or a
    /// shred seen on disk), so a cache of decrypted data can drop what it
    /// holds instead of serving what a deleted key protected.
    fn generation(&self) -> u64 {
        0
    }
}

/// What is stored next to the ciphertext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always [`ALGORITHM`].
    pub algorithm: String,
    /// The master key that wrapped the data key.
    pub key_id: String,
    /// The wrapped data key, base64.
    pub wrapped_key: String,
    /// The content nonce, base64.
    pub nonce: String,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn random<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut out = [0u8; N];
    SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| CryptoError::Unavailable("no system randomness".into()))?;
    Ok(out)
}

fn aead_key(key: &[u8; 32]) -> Result<LessSafeKey, CryptoError> {
    UnboundKey::new(&AES_256_GCM, key)
        .map(LessSafeKey::new)
        .map_err(|_| CryptoError::Invalid("bad key length".into()))
}

/// Seals `plaintext` under `key` with a random nonce; returns the nonce and
/// ciphertext (tag appended).
fn seal(
    key: &[u8; 32],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<([u8; NONCE_LEN], Vec<u8>), CryptoError> {
    let nonce = random::<NONCE_LEN>()?;
    let mut out = plaintext.to_vec();
    aead_key(key)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut out,
        )
        .map_err(|_| CryptoError::Invalid("seal failed".into()))?;
    Ok((nonce, out))
}

/// Opens what [`seal`] produced; `Invalid` on any mismatch.
fn open(
    key: &[u8; 32],
    nonce: &[u8],
    aad: &[u8],
    ciphertext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let nonce: [u8; NONCE_LEN] = nonce
        .try_into()
        .map_err(|_| CryptoError::Invalid("bad nonce".into()))?;
    let mut buf = ciphertext.to_vec();
    let len = aead_key(key)?
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut buf,
        )
        .map_err(|_| CryptoError::Invalid("ciphertext or metadata does not authenticate".into()))?
        .len();
    buf.truncate(len);
    Ok(buf)
}

/// Seals `plaintext` under a data key the key service just generated,
/// binding `aad` (the metadata). CPU-bound: run it off the async workers.
pub fn seal_content(
    dk: &DataKey,
    aad: &[u8],
    plaintext: &[u8],
) -> Result<(Envelope, Vec<u8>), CryptoError> {
    let (nonce, ciphertext) = seal(&dk.plaintext, aad, plaintext)?;
    Ok((
        Envelope {
            algorithm: ALGORITHM.into(),
            key_id: dk.key_id.clone(),
            wrapped_key: b64().encode(&dk.wrapped),
            nonce: b64().encode(nonce),
        },
        ciphertext,
    ))
}

/// The data key of `envelope`, unwrapped for the requester's `context`.
pub async fn unwrap_key(
    keys: &dyn KeyService,
    envelope: &Envelope,
    context: &EncryptionContext<'_>,
) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
    if envelope.algorithm != ALGORITHM {
        return Err(CryptoError::Invalid(format!(
            "unknown algorithm {:?}",
            envelope.algorithm
        )));
    }
    let wrapped = b64()
        .decode(&envelope.wrapped_key)
        .map_err(|_| CryptoError::Invalid("wrapped_key is not base64".into()))?;
    keys.decrypt_data_key(&envelope.key_id, &wrapped, context)
        .await
}

/// Opens content sealed by [`seal_content`]. CPU-bound.
pub fn open_content(
    key: &[u8; 32],
    envelope: &Envelope,
    aad: &[u8],
    ciphertext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let nonce = b64()
        .decode(&envelope.nonce)
        .map_err(|_| CryptoError::Invalid("nonce is not base64".into()))?;
    open(key, &nonce, aad, ciphertext)
}

/// One master key in the keyring file.
#[derive(Clone, Serialize, Deserialize)]
struct MasterKey {
    id: String,
    /// Base64 of 32 bytes.
    key: String,
    created_at_unix_ms: u64,
}

/// A tenant's own master keys: the newest wraps new data keys, older ones
/// stay to unwrap what they wrapped.
#[derive(Clone, Serialize, Deserialize)]
struct TenantKeys {
    current: String,
    keys: Vec<MasterKey>,
}

#[derive(Clone, Serialize, Deserialize)]
struct KeyringFile {
    format: u32,
    /// The shared key: what wrapped data keys before tenants had their own
    /// (kept to read that data).
    current: String,
    keys: Vec<MasterKey>,
    /// Each tenant's keys, created on the tenant's first write. Deleting a
    /// tenant's entry (`compactd keys shred`) makes exactly its data
    /// unreadable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tenants: BTreeMap<String, TenantKeys>,
    /// Ids of shredded keys (ids only): what they wrapped reads as deleted,
    /// while an id this keyring never had (another keyring, a restored
    /// copy) stays an error to look into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    shredded: Vec<String>,
}

impl KeyringFile {
    fn new() -> Result<Self, CryptoError> {
        let key = new_master_key()?;
        Ok(KeyringFile {
            format: 1,
            current: key.id.clone(),
            keys: vec![key],
            tenants: BTreeMap::new(),
            shredded: Vec::new(),
        })
    }

    /// The key `id` and the tenant that owns it (`None`: the shared key).
    fn find(&self, id: &str) -> Option<(&MasterKey, Option<&str>)> {
        if let Some(k) = self.keys.iter().find(|k| k.id == id) {
            return Some((k, None));
        }
        self.tenants.iter().find_map(|(tenant, keys)| {
            keys.keys
                .iter()
                .find(|k| k.id == id)
                .map(|k| (k, Some(tenant.as_str())))
        })
    }

    fn check(&self, path: &Path) -> Result<(), CryptoError> {
        let current_missing = !self.keys.iter().any(|k| k.id == self.current)
            || self
                .tenants
                .values()
                .any(|t| !t.keys.iter().any(|k| k.id == t.current));
        if current_missing {
            return Err(CryptoError::KeyFile(format!(
                "{}: a current key is not in the file",
                path.display()
            )));
        }
        Ok(())
    }
}

/// What identifies one version of the keyring file on disk, so a change
/// made by `compactd keys …` while the server runs is seen on the next use.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Result<Stamp, CryptoError> {
    let m = std::fs::metadata(path)
        .map_err(|e| CryptoError::KeyFile(format!("{}: {e}", path.display())))?;
    Ok(stamp_of(&m))
}

fn stamp_of(m: &std::fs::Metadata) -> Stamp {
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(m);
    #[cfg(not(unix))]
    let inode = 0;
    Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode,
    }
}

/// A master key's id and its bytes.
type MasterKeyOf = (String, Zeroizing<[u8; 32]>);

struct Loaded {
    file: KeyringFile,
    stamp: Stamp,
}

/// Master keys on local disk: the embedded [`KeyService`].
///
/// Every tenant gets its own master key on its first write, so deleting it
/// shreds that tenant's plans and artifacts and nobody else's. The file is
/// re-read when it changes on disk (a rotation or a shred by the CLI takes
/// effect on the running server's next request), and every change is made
/// under an exclusive lock on `{file}.lock`, re-reading first, so the CLI
/// and the server never undo each other's writes.
pub struct LocalKeyring {
    path: PathBuf,
    loaded: RwLock<Loaded>,
    /// Whether tenants get keys of their own (see [`LocalKeyring::shared_only`]).
    per_tenant: bool,
    /// Bumped on every reload or write: see [`KeyService::generation`].
    generation: AtomicU64,
}

impl std::fmt::Debug for LocalKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("LocalKeyring")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn new_master_key() -> Result<MasterKey, CryptoError> {
    let key = Zeroizing::new(random::<32>()?);
    Ok(MasterKey {
        id: format!("local-{}", hex::encode(random::<8>()?)),
        key: b64().encode(*key),
        created_at_unix_ms: crate::runtime::now_unix_ms(),
    })
}

/// Writes the keyring with mode 0600 through a temp file and a rename.
fn write_keyring(path: &Path, file: &KeyringFile) -> Result<(), CryptoError> {
    let err = |e: std::io::Error| CryptoError::KeyFile(format!("{}: {e}", path.display()));
    let bytes = Zeroizing::new(
        serde_json::to_vec_pretty(file).map_err(|e| CryptoError::KeyFile(e.to_string()))?,
    );
    let dir = path
        .parent()
        .ok_or_else(|| CryptoError::KeyFile("key file has no directory".into()))?;
    std::fs::create_dir_all(dir).map_err(err)?;
    let tmp = dir.join(format!(".keyring.tmp-{}", hex::encode(random::<8>()?)));
    let result = (|| {
        use std::io::Write as _;
        let mut f = private_file(&tmp, true)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

/// Opens `path` for writing with mode 0600 (`new`: it must not exist).
fn private_file(path: &Path, new: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if new {
        options.create_new(true);
    } else {
        options.create(true).truncate(false);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Reads and checks the keyring file: private, parsable, consistent.
fn read_keyring(path: &Path) -> Result<Option<Loaded>, CryptoError> {
    use std::io::Read as _;
    let err = |e: std::io::Error| CryptoError::KeyFile(format!("{}: {e}", path.display()));
    // The stamp comes from the handle the bytes are read from: a file
    // renamed into place meanwhile is seen as a change on the next use.
    let mut handle = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let meta = handle.metadata().map_err(err)?;
    let mut bytes = Zeroizing::new(Vec::new());
    handle.read_to_end(&mut bytes).map_err(err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(CryptoError::KeyFile(format!(
                "{} is readable by group or others (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            )));
        }
    }
    let file: KeyringFile = serde_json::from_slice(&bytes)
        .map_err(|e| CryptoError::KeyFile(format!("{} does not parse: {e}", path.display())))?;
    file.check(path)?;
    Ok(Some(Loaded {
        file,
        stamp: stamp_of(&meta),
    }))
}

fn key_bytes(key: &MasterKey) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
    let bytes = Zeroizing::new(
        b64()
            .decode(&key.key)
            .map_err(|_| CryptoError::KeyFile(format!("key {:?} is not base64", key.id)))?,
    );
    if bytes.len() != 32 {
        return Err(CryptoError::KeyFile(format!(
            "key {:?} is not 32 bytes",
            key.id
        )));
    }
    let mut out = Zeroizing::new([0u8; 32]);
    out.copy_from_slice(&bytes);
    Ok(out)
}

impl LocalKeyring {
    /// Opens the keyring at `path`, creating it (0600, one key) on first
    /// start. A file readable by others is refused.
    pub fn open_or_create(path: &Path) -> Result<Self, CryptoError> {
        let loaded = match read_keyring(path)? {
            Some(l) => l,
            None => {
                let _lock = Self::lock_file(path)?;
                match read_keyring(path)? {
                    Some(l) => l,
                    None => {
                        let file = KeyringFile::new()?;
                        write_keyring(path, &file)?;
                        Loaded {
                            file,
                            stamp: stamp(path)?,
                        }
                    }
                }
            }
        };
        Ok(LocalKeyring {
            path: path.to_path_buf(),
            loaded: RwLock::new(loaded),
            per_tenant: true,
            generation: AtomicU64::new(0),
        })
    }

    /// The keyring wrapping every tenant's data keys under the shared key,
    /// for replicas that each hold a copy of the file (artifacts on S3
    /// without KMS): a tenant key one replica made would be unknown to the
    /// others. Tenants cannot be shredded apart then.
    pub fn shared_only(mut self) -> Self {
        self.per_tenant = false;
        self
    }

    /// Holds the cross-process lock on `{file}.lock` until dropped.
    fn lock_file(path: &Path) -> Result<std::fs::File, CryptoError> {
        let err = |e: std::io::Error| CryptoError::KeyFile(format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let f = private_file(Path::new(&name), false).map_err(err)?;
        f.lock().map_err(err)?;
        Ok(f)
    }

    /// Re-reads the file if it changed on disk since it was loaded.
    fn refresh(&self) -> Result<(), CryptoError> {
        let now = stamp(&self.path)?;
        let stale = self
            .loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stamp
            != now;
        if stale {
            let fresh = read_keyring(&self.path)?.ok_or_else(|| {
                CryptoError::KeyFile(format!("{} was removed", self.path.display()))
            })?;
            *self
                .loaded
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
            self.generation.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    /// Applies `change` to the file as it is on disk now, under the lock,
    /// writes it and makes it the loaded one.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut KeyringFile) -> Result<T, CryptoError>,
    ) -> Result<T, CryptoError> {
        let _lock = Self::lock_file(&self.path)?;
        let mut file = read_keyring(&self.path)?
            .ok_or_else(|| CryptoError::KeyFile(format!("{} was removed", self.path.display())))?
            .file;
        let out = change(&mut file)?;
        write_keyring(&self.path, &file)?;
        *self
            .loaded
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Loaded {
            file,
            stamp: stamp(&self.path)?,
        };
        Ok(out)
    }

    /// Adds a key to the shared set and to every tenant's, and makes each
    /// current; older keys stay to unwrap what they wrapped. Returns the new
    /// shared key's id.
    pub fn rotate(&self) -> Result<String, CryptoError> {
        self.update(|file| {
            let key = new_master_key()?;
            let id = key.id.clone();
            file.keys.push(key);
            file.current = id.clone();
            for keys in file.tenants.values_mut() {
                let key = new_master_key()?;
                keys.current = key.id.clone();
                keys.keys.push(key);
            }
            Ok(id)
        })
    }

    /// Deletes `tenant`'s master keys: every data key they wrapped, hence
    /// every plan and artifact of the tenant written since tenants had
    /// their own keys, can never be unwrapped again. Returns how many keys
    /// were deleted (0: the tenant had none).
    pub fn shred(&self, tenant: &str) -> Result<usize, CryptoError> {
        let removed = self.update(|file| {
            let Some(gone) = file.tenants.remove(tenant) else {
                return Ok(0);
            };
            file.shredded.extend(gone.keys.iter().map(|k| k.id.clone()));
            Ok(gone.keys.len())
        })?;
        if removed > 0 {
            // Caches of what those keys protected must go.
            self.generation.fetch_add(1, Ordering::Release);
        }
        Ok(removed)
    }

    /// The id new data keys are wrapped under when no tenant is named (the
    /// shared key).
    pub fn current_key_id(&self) -> String {
        self.loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .file
            .current
            .clone()
    }

    /// The id `tenant`'s new data keys are wrapped under, if it has keys.
    pub fn tenant_key_id(&self, tenant: &str) -> Option<String> {
        self.loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .file
            .tenants
            .get(tenant)
            .map(|t| t.current.clone())
    }

    /// `tenant`'s current key (created on first use) and its id; the shared
    /// key when tenants have no keys of their own, or when the keyring
    /// cannot be written (a read-only mount).
    fn tenant_master(&self, tenant: &str) -> Result<MasterKeyOf, CryptoError> {
        self.refresh()?;
        if !self.per_tenant {
            return self.shared_master();
        }
        fn current_of(
            file: &KeyringFile,
            tenant: &str,
        ) -> Option<Result<MasterKeyOf, CryptoError>> {
            let keys = file.tenants.get(tenant)?;
            let key = keys.keys.iter().find(|k| k.id == keys.current)?;
            Some(key_bytes(key).map(|k| (key.id.clone(), k)))
        }
        if let Some(found) = current_of(
            &self
                .loaded
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .file,
            tenant,
        ) {
            return found;
        }
        let made = self.update(|file| {
            if !file.tenants.contains_key(tenant) {
                let key = new_master_key()?;
                file.tenants.insert(
                    tenant.to_string(),
                    TenantKeys {
                        current: key.id.clone(),
                        keys: vec![key],
                    },
                );
            }
            current_of(file, tenant).unwrap_or_else(|| {
                Err(CryptoError::KeyFile("a new tenant key was not kept".into()))
            })
        });
        match made {
            Err(CryptoError::KeyFile(e)) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        error = %e,
                        "the keyring cannot be written: new tenants' data keys are wrapped under the shared key (they cannot be shredded apart)"
                    );
                });
                self.shared_master()
            }
            other => other,
        }
    }

    /// The shared current key and its id.
    fn shared_master(&self) -> Result<MasterKeyOf, CryptoError> {
        let loaded = self
            .loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = loaded.file.current.clone();
        let key = loaded
            .file
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| CryptoError::KeyFile("the current key is not in the file".into()))?;
        Ok((id, key_bytes(key)?))
    }

    /// The key `id`, if `tenant` may use it: its own keys or the shared ones.
    fn master(&self, id: &str, tenant: &str) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        self.refresh()?;
        let loaded = self
            .loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match loaded.file.find(id) {
            Some((key, None)) => key_bytes(key),
            Some((key, Some(owner))) if owner == tenant => key_bytes(key),
            Some(_) => Err(CryptoError::Invalid(format!(
                "key {id:?} belongs to another tenant"
            ))),
            None if loaded.file.shredded.iter().any(|s| s == id) => {
                Err(CryptoError::KeyDeleted(format!("key {id:?} was shredded")))
            }
            None => Err(CryptoError::Invalid(format!(
                "key {id:?} is not in this keyring (another keyring, or an older copy of it?)"
            ))),
        }
    }
}

impl LocalKeyring {
    /// `wrapped` (a data key wrapped by `key_id` under `context`) wrapped
    /// again under the tenant's current key, with the id of that key; `None`
    /// when it already is. What rotation's re-wrap does to each object: the
    /// data key stays the same, so the content is not re-encrypted.
    pub fn rewrap(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Option<(String, Vec<u8>)>, CryptoError> {
        let (current_id, current) = self.tenant_master(context.tenant)?;
        if current_id == key_id {
            return Ok(None);
        }
        let plain = self.unwrap_with(key_id, wrapped, context)?;
        let (nonce, sealed) = seal(&current, &context.canonical(), &plain[..])?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(Some((current_id, out)))
    }

    fn unwrap_with(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        let master = self.master(key_id, context.tenant)?;
        unwrap_under(&master, wrapped, context)
    }
}

/// A new data key wrapped under a master key held here (the local keyring,
/// the in-memory key): nonce then sealed key, bound to `context`.
fn wrap_new_under(
    master: &[u8; 32],
    key_id: String,
    context: &EncryptionContext<'_>,
) -> Result<DataKey, CryptoError> {
    let plaintext = Zeroizing::new(random::<32>()?);
    let (nonce, sealed) = seal(master, &context.canonical(), &plaintext[..])?;
    let mut wrapped = nonce.to_vec();
    wrapped.extend_from_slice(&sealed);
    Ok(DataKey {
        plaintext,
        key_id,
        wrapped,
    })
}

/// What [`wrap_new_under`] wrapped, unwrapped; `Invalid` under another
/// context or key.
fn unwrap_under(
    master: &[u8; 32],
    wrapped: &[u8],
    context: &EncryptionContext<'_>,
) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
    if wrapped.len() <= NONCE_LEN {
        return Err(CryptoError::Invalid("wrapped key is truncated".into()));
    }
    let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
    let plain = Zeroizing::new(open(master, nonce, &context.canonical(), sealed)?);
    let mut out = Zeroizing::new([0u8; 32]);
    if plain.len() != 32 {
        return Err(CryptoError::Invalid("data key is not 32 bytes".into()));
    }
    out.copy_from_slice(&plain);
    Ok(out)
}

#[async_trait]
impl KeyService for LocalKeyring {
    async fn generate_data_key(
        &self,
        context: &EncryptionContext<'_>,
    ) -> Result<DataKey, CryptoError> {
        let (key_id, master) = self.tenant_master(context.tenant)?;
        wrap_new_under(&master, key_id, context)
    }

    async fn decrypt_data_key(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        self.unwrap_with(key_id, wrapped, context)
    }

    fn generation(&self) -> u64 {
        // A keyring that cannot be read (removed, broken) must not leave
        // what it protected served from caches: count it as a change.
        if self.refresh().is_err() {
            return self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        }
        self.generation.load(Ordering::Acquire)
    }
}

/// A master key held in memory only, for the in-memory stores (the offline
/// CLI, tests): sealing works the same way, nothing outlives the process.
pub struct EphemeralKeys {
    master: Zeroizing<[u8; 32]>,
    id: String,
}

impl std::fmt::Debug for EphemeralKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralKeys")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Default for EphemeralKeys {
    /// A fresh random master key (from the thread-local CSPRNG, which
    /// cannot fail once seeded).
    fn default() -> Self {
        EphemeralKeys {
            master: Zeroizing::new(rand::random::<[u8; 32]>()),
            id: format!("ephemeral-{}", hex::encode(rand::random::<[u8; 8]>())),
        }
    }
}

#[async_trait]
impl KeyService for EphemeralKeys {
    async fn generate_data_key(
        &self,
        context: &EncryptionContext<'_>,
    ) -> Result<DataKey, CryptoError> {
        wrap_new_under(&self.master, self.id.clone(), context)
    }

    async fn decrypt_data_key(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        if key_id != self.id {
            return Err(CryptoError::Invalid("unknown key".into()));
        }
        unwrap_under(&self.master, wrapped, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`KeyService::generate_data_key`] then [`seal_content`].
    async fn encrypt(
        keys: &dyn KeyService,
        context: &EncryptionContext<'_>,
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<(Envelope, Vec<u8>), CryptoError> {
        let dk = keys.generate_data_key(context).await?;
        seal_content(&dk, aad, plaintext)
    }

    /// [`unwrap_key`] then [`open_content`].
    async fn decrypt(
        keys: &dyn KeyService,
        envelope: &Envelope,
        context: &EncryptionContext<'_>,
        aad: &[u8],
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        let key = unwrap_key(keys, envelope, context).await?;
        open_content(&key, envelope, aad, ciphertext)
    }

    fn ctx<'a>(tenant: &'a str, artifact: &'a str) -> EncryptionContext<'a> {
        EncryptionContext::artifact(tenant, "t1", artifact)
    }

    #[tokio::test]
    async fn round_trip_and_every_binding_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let keys = LocalKeyring::open_or_create(&dir.path().join("keys/keyring.json")).unwrap();
        let secret = b"the deploy password is hunter2";
        let (env, ct) = encrypt(&keys, &ctx("acme", "a1"), b"meta", secret)
            .await
            .unwrap();
        assert!(!ct.windows(7).any(|w| w == b"hunter2"), "no plaintext");
        let back = decrypt(&keys, &env, &ctx("acme", "a1"), b"meta", &ct)
            .await
            .unwrap();
        assert_eq!(back, secret);
        // Another tenant's (or artifact's) context cannot unwrap the key.
        for other in [ctx("globex", "a1"), ctx("acme", "a2")] {
            let e = decrypt(&keys, &env, &other, b"meta", &ct)
                .await
                .unwrap_err();
            assert!(matches!(e, CryptoError::Invalid(_)), "{e}");
        }
        // Changed metadata or ciphertext does not authenticate.
        assert!(decrypt(&keys, &env, &ctx("acme", "a1"), b"metA", &ct)
            .await
            .is_err());
        let mut flipped = ct.clone();
        flipped[0] ^= 1;
        assert!(decrypt(&keys, &env, &ctx("acme", "a1"), b"meta", &flipped)
            .await
            .is_err());
    }

    #[tokio::test]
    async fn rotation_keeps_old_keys_readable_and_the_file_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring.json");
        let keys = LocalKeyring::open_or_create(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let first = keys.current_key_id();
        let (old_env, old_ct) = encrypt(&keys, &ctx("acme", "a1"), b"m", b"old")
            .await
            .unwrap();
        // The tenant's own key wrapped it, not the shared one.
        let acme_first = keys.tenant_key_id("acme").unwrap();
        assert_eq!(old_env.key_id, acme_first);
        assert_ne!(acme_first, first);
        let second = keys.rotate().unwrap();
        assert_ne!(first, second);
        // Reopened from disk: the new keys are current, the old one still opens.
        let keys = LocalKeyring::open_or_create(&path).unwrap();
        assert_eq!(keys.current_key_id(), second);
        let acme_second = keys.tenant_key_id("acme").unwrap();
        assert_ne!(acme_second, acme_first);
        let (new_env, _) = encrypt(&keys, &ctx("acme", "a2"), b"m", b"new")
            .await
            .unwrap();
        assert_eq!(new_env.key_id, acme_second);
        let back = decrypt(&keys, &old_env, &ctx("acme", "a1"), b"m", &old_ct)
            .await
            .unwrap();
        assert_eq!(back, b"old");
        // A keyring others can read is refused.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = LocalKeyring::open_or_create(&path).unwrap_err();
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
    }

    #[tokio::test]
    async fn shredding_a_tenant_makes_its_data_unreadable_and_nobody_elses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring.json");
        let server = LocalKeyring::open_or_create(&path).unwrap();
        let (acme, acme_ct) = encrypt(&server, &ctx("acme", "a1"), b"m", b"acme data")
            .await
            .unwrap();
        let (globex, globex_ct) = encrypt(&server, &ctx("globex", "a1"), b"m", b"globex data")
            .await
            .unwrap();
        // acme's key material, as the file holds it before the shred.
        let before: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let material = before["tenants"]["acme"]["keys"][0]["key"]
            .as_str()
            .unwrap()
            .to_string();
        // Another process (the CLI) shreds acme; the running keyring sees it
        // on its next use, without a restart.
        let cli = LocalKeyring::open_or_create(&path).unwrap();
        assert_eq!(cli.shred("acme").unwrap(), 1);
        assert_eq!(cli.shred("acme").unwrap(), 0, "idempotent");
        let e = decrypt(&server, &acme, &ctx("acme", "a1"), b"m", &acme_ct)
            .await
            .unwrap_err();
        assert!(matches!(e, CryptoError::KeyDeleted(_)), "{e}");
        let back = decrypt(&server, &globex, &ctx("globex", "a1"), b"m", &globex_ct)
            .await
            .unwrap();
        assert_eq!(back, b"globex data");
        // The key is gone from the file, not only from memory (its id stays
        // as a tombstone, so what it wrapped reads as deleted).
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(&material),
            "the shredded key is still on disk"
        );
        // A tenant cannot unwrap with another tenant's key even if it names it.
        let e = server
            .decrypt_data_key(&globex.key_id, b"x", &ctx("acme", "a1"))
            .await
            .unwrap_err();
        assert!(matches!(e, CryptoError::Invalid(_)), "{e}");
        // acme starts over with a new key; the server's write does not bring
        // the shredded key back.
        let (fresh, _) = encrypt(&server, &ctx("acme", "a2"), b"m", b"new")
            .await
            .unwrap();
        assert_ne!(fresh.key_id, acme.key_id);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&material));
    }

    /// Data from another keyring is an error to look into, not "deleted";
    /// a keyring for replicas that share one file wraps under the shared key.
    #[tokio::test]
    async fn a_foreign_key_is_not_a_shredded_one_and_shared_rings_make_no_tenant_keys() {
        let dir = tempfile::tempdir().unwrap();
        let one = LocalKeyring::open_or_create(&dir.path().join("one.json")).unwrap();
        let two = LocalKeyring::open_or_create(&dir.path().join("two.json")).unwrap();
        let (env, ct) = encrypt(&one, &ctx("acme", "a1"), b"m", b"x").await.unwrap();
        let e = decrypt(&two, &env, &ctx("acme", "a1"), b"m", &ct)
            .await
            .unwrap_err();
        assert!(matches!(e, CryptoError::Invalid(_)), "{e}");

        let shared = LocalKeyring::open_or_create(&dir.path().join("shared.json"))
            .unwrap()
            .shared_only();
        let (env, _) = encrypt(&shared, &ctx("acme", "a1"), b"m", b"x")
            .await
            .unwrap();
        assert_eq!(env.key_id, shared.current_key_id());
        assert_eq!(shared.tenant_key_id("acme"), None);
    }
}
