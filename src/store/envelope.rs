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

use std::path::{Path, PathBuf};
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
    /// The key file could not be read, written or parsed.
    #[error("key file: {0}")]
    KeyFile(String),
}

/// Who an artifact belongs to; bound into every wrap and unwrap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EncryptionContext<'a> {
    /// The owning tenant.
    pub tenant: &'a str,
    /// The thread.
    pub thread: &'a str,
    /// The artifact id.
    pub artifact: &'a str,
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

#[derive(Clone, Serialize, Deserialize)]
struct KeyringFile {
    format: u32,
    /// The key new data keys are wrapped under.
    current: String,
    keys: Vec<MasterKey>,
}

/// Master keys on local disk: the embedded [`KeyService`].
pub struct LocalKeyring {
    path: PathBuf,
    file: RwLock<KeyringFile>,
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
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let result = (|| {
        use std::io::Write as _;
        let mut f = options.open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

impl LocalKeyring {
    /// Opens the keyring at `path`, creating it (0600, one key) on first
    /// start. A file readable by others is refused.
    pub fn open_or_create(path: &Path) -> Result<Self, CryptoError> {
        let file = match std::fs::read(path) {
            Ok(bytes) => {
                let bytes = Zeroizing::new(bytes);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt as _;
                    let mode = std::fs::metadata(path)
                        .map_err(|e| CryptoError::KeyFile(e.to_string()))?
                        .permissions()
                        .mode();
                    if mode & 0o077 != 0 {
                        return Err(CryptoError::KeyFile(format!(
                            "{} is readable by group or others (mode {:o}); chmod 600 it",
                            path.display(),
                            mode & 0o777
                        )));
                    }
                }
                let file: KeyringFile = serde_json::from_slice(&bytes).map_err(|e| {
                    CryptoError::KeyFile(format!("{} does not parse: {e}", path.display()))
                })?;
                if !file.keys.iter().any(|k| k.id == file.current) {
                    return Err(CryptoError::KeyFile(format!(
                        "{}: the current key {:?} is not in the file",
                        path.display(),
                        file.current
                    )));
                }
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = new_master_key()?;
                let file = KeyringFile {
                    format: 1,
                    current: key.id.clone(),
                    keys: vec![key],
                };
                write_keyring(path, &file)?;
                file
            }
            Err(e) => return Err(CryptoError::KeyFile(format!("{}: {e}", path.display()))),
        };
        Ok(LocalKeyring {
            path: path.to_path_buf(),
            file: RwLock::new(file),
        })
    }

    /// Adds a key and makes it current; older keys stay to unwrap what
    /// they wrapped. Returns the new key's id.
    pub fn rotate(&self) -> Result<String, CryptoError> {
        let mut file = self
            .file
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = new_master_key()?;
        let id = key.id.clone();
        let mut next = file.clone();
        next.keys.push(key);
        next.current = id.clone();
        write_keyring(&self.path, &next)?;
        *file = next;
        Ok(id)
    }

    /// The id new data keys are wrapped under.
    pub fn current_key_id(&self) -> String {
        self.file
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .current
            .clone()
    }

    fn master(&self, id: &str) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        let file = self
            .file
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = file
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| CryptoError::Invalid(format!("unknown key id {id:?}")))?;
        let bytes = Zeroizing::new(
            b64()
                .decode(&key.key)
                .map_err(|_| CryptoError::KeyFile(format!("key {id:?} is not base64")))?,
        );
        let mut out = Zeroizing::new([0u8; 32]);
        if bytes.len() != 32 {
            return Err(CryptoError::KeyFile(format!("key {id:?} is not 32 bytes")));
        }
        out.copy_from_slice(&bytes);
        Ok(out)
    }
}

/// The wrapped form of a data key: nonce then sealed key.
#[async_trait]
impl KeyService for LocalKeyring {
    async fn generate_data_key(
        &self,
        context: &EncryptionContext<'_>,
    ) -> Result<DataKey, CryptoError> {
        let key_id = self.current_key_id();
        let master = self.master(&key_id)?;
        let plaintext = Zeroizing::new(random::<32>()?);
        let (nonce, sealed) = seal(&master, &context.canonical(), &plaintext[..])?;
        let mut wrapped = nonce.to_vec();
        wrapped.extend_from_slice(&sealed);
        Ok(DataKey {
            plaintext,
            key_id,
            wrapped,
        })
    }

    async fn decrypt_data_key(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        let master = self.master(key_id)?;
        if wrapped.len() <= NONCE_LEN {
            return Err(CryptoError::Invalid("wrapped key is truncated".into()));
        }
        let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
        let plain = Zeroizing::new(open(&master, nonce, &context.canonical(), sealed)?);
        let mut out = Zeroizing::new([0u8; 32]);
        if plain.len() != 32 {
            return Err(CryptoError::Invalid("data key is not 32 bytes".into()));
        }
        out.copy_from_slice(&plain);
        Ok(out)
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
        EncryptionContext {
            tenant,
            thread: "t1",
            artifact,
        }
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
        let second = keys.rotate().unwrap();
        assert_ne!(first, second);
        // Reopened from disk: the new key is current, the old one still opens.
        let keys = LocalKeyring::open_or_create(&path).unwrap();
        assert_eq!(keys.current_key_id(), second);
        let (new_env, _) = encrypt(&keys, &ctx("acme", "a2"), b"m", b"new")
            .await
            .unwrap();
        assert_eq!(new_env.key_id, second);
        assert_eq!(old_env.key_id, first);
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
}
