//! AWS KMS as the [`KeyService`]: `GenerateDataKey` (AES_256) and `Decrypt`
//! with the encryption context `{tenant, thread, artifact}`, so KMS itself
//! refuses to unwrap a data key for anyone but the artifact's owner, and
//! CloudTrail records every unwrap with its tenant.
//!
//! Keys: a default key id plus an optional tenant → key id mapping (bring
//! your own key). Decrypt names the key recorded in the envelope, so a
//! tenant moved to a new key still reads what the old one wrapped.
//!
//! Unwrapped data keys may be cached to spare KMS a round trip when the same
//! artifact is read again (an agent rereading a result), bounded in age, in
//! uses and in entries. A cache entry is keyed by the hash of the wrapped key
//! *and* the context, so a request in another tenant's context never hits an
//! entry it could not have unwrapped itself. Wrapping is never cached: every
//! artifact has its own context, hence its own data key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_kms::error::{DisplayErrorContext, SdkError};
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::DataKeySpec;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::envelope::{CryptoError, DataKey, EncryptionContext, KeyService};

/// How long and how often an unwrapped data key may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataKeyCache {
    /// Age after which an entry is no longer used (0 = no cache).
    pub max_age: Duration,
    /// Unwraps an entry may serve before KMS is asked again.
    pub max_uses: u32,
    /// Entries kept at most.
    pub max_entries: usize,
}

struct Cached {
    key: Zeroizing<[u8; 32]>,
    at: Instant,
    uses: u32,
}

/// Data keys from AWS KMS.
pub struct KmsKeys {
    client: aws_sdk_kms::Client,
    default_key: String,
    tenant_keys: BTreeMap<String, String>,
    cache: DataKeyCache,
    unwrapped: Mutex<HashMap<[u8; 32], Cached>>,
}

impl std::fmt::Debug for KmsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsKeys")
            .field("default_key", &self.default_key)
            .field("tenant_keys", &self.tenant_keys.len())
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// The context as KMS takes it (a string map; order does not matter to KMS).
fn kms_context(c: &EncryptionContext<'_>) -> HashMap<String, String> {
    let mut map = HashMap::from([
        ("tenant".to_string(), c.tenant.to_string()),
        ("thread".to_string(), c.thread.to_string()),
        ("artifact".to_string(), c.artifact.to_string()),
    ]);
    if let Some(kind) = c.kind {
        map.insert("kind".to_string(), kind.to_string());
    }
    map
}

/// KMS errors: a refusal to decrypt (wrong context, tampered blob, wrong
/// key) is `Invalid` — never served, never retried; anything else (network,
/// throttling, disabled key, 5xx) is an outage.
fn kms_error<E, R>(op: &str, e: SdkError<E, R>) -> CryptoError
where
    E: aws_sdk_kms::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    if let SdkError::ServiceError(se) = &e {
        let code = se.err().code().unwrap_or_default();
        if let Some(e) = classify(op, code) {
            return e;
        }
    }
    CryptoError::Unavailable(format!("KMS {op}: {}", DisplayErrorContext(&e)))
}

/// KMS error codes that say something about the data rather than the
/// service: a refused ciphertext is invalid; a key that was deleted,
/// disabled or scheduled for deletion means the data is gone
/// (crypto-shredding), which callers see as NOT_FOUND, not as an outage.
fn classify(op: &str, code: &str) -> Option<CryptoError> {
    match code {
        "InvalidCiphertextException" | "IncorrectKeyException" | "InvalidKeyUsageException" => {
            Some(CryptoError::Invalid(format!("KMS {op} refused: {code}")))
        }
        // Only a read says the data is gone; a write under such a key is
        // refused like any other key service failure.
        "NotFoundException" | "DisabledException" | "KMSInvalidStateException"
            if op == "Decrypt" =>
        {
            Some(CryptoError::KeyDeleted(format!(
                "KMS {op}: the key is deleted or disabled ({code})"
            )))
        }
        _ => None,
    }
}

impl KmsKeys {
    /// A key service on `client`: new data keys are wrapped under the
    /// tenant's key from `tenant_keys`, else under `default_key`.
    pub fn new(
        client: aws_sdk_kms::Client,
        default_key: String,
        tenant_keys: BTreeMap<String, String>,
        cache: DataKeyCache,
    ) -> KmsKeys {
        KmsKeys {
            client,
            default_key,
            tenant_keys,
            cache,
            unwrapped: Mutex::new(HashMap::new()),
        }
    }

    /// The key new data keys of `tenant` are wrapped under.
    pub fn key_for(&self, tenant: &str) -> &str {
        self.tenant_keys
            .get(tenant)
            .map_or(self.default_key.as_str(), String::as_str)
    }

    /// Checks that every configured key can wrap a data key (start-up: a
    /// wrong key id or missing permission is found before the first call).
    pub async fn probe(&self) -> Result<(), CryptoError> {
        let mut keys: Vec<&str> = vec![&self.default_key];
        keys.extend(self.tenant_keys.values().map(String::as_str));
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            self.client
                .generate_data_key()
                .key_id(key)
                .key_spec(DataKeySpec::Aes256)
                .encryption_context("purpose", "compactd-startup-probe")
                .send()
                .await
                .map_err(|e| kms_error("GenerateDataKey", e))?;
        }
        Ok(())
    }

    fn cache_key(key_id: &str, wrapped: &[u8], c: &EncryptionContext<'_>) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [key_id.as_bytes(), wrapped, &c.canonical()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().into()
    }

    /// The cache is on only when every bound allows an entry.
    fn caching(&self) -> bool {
        !self.cache.max_age.is_zero() && self.cache.max_uses > 0 && self.cache.max_entries > 0
    }

    fn cached(&self, k: &[u8; 32]) -> Option<Zeroizing<[u8; 32]>> {
        if !self.caching() {
            return None;
        }
        let mut map = self.unwrapped.lock().ok()?;
        let entry = map.get_mut(k)?;
        if entry.at.elapsed() >= self.cache.max_age || entry.uses >= self.cache.max_uses {
            map.remove(k);
            return None;
        }
        entry.uses += 1;
        Some(entry.key.clone())
    }

    fn remember(&self, k: [u8; 32], key: &Zeroizing<[u8; 32]>) {
        if !self.caching() {
            return;
        }
        let Ok(mut map) = self.unwrapped.lock() else {
            return;
        };
        if map.len() >= self.cache.max_entries {
            let (age, uses) = (self.cache.max_age, self.cache.max_uses);
            map.retain(|_, e| e.at.elapsed() < age && e.uses < uses);
            if map.len() >= self.cache.max_entries {
                // Still full of live keys: the oldest goes.
                if let Some(oldest) = map.iter().min_by_key(|(_, e)| e.at).map(|(k, _)| *k) {
                    map.remove(&oldest);
                }
            }
        }
        map.insert(
            k,
            Cached {
                key: key.clone(),
                at: Instant::now(),
                uses: 1,
            },
        );
    }
}

#[async_trait]
impl KeyService for KmsKeys {
    async fn generate_data_key(
        &self,
        context: &EncryptionContext<'_>,
    ) -> Result<DataKey, CryptoError> {
        let out = self
            .client
            .generate_data_key()
            .key_id(self.key_for(context.tenant))
            .key_spec(DataKeySpec::Aes256)
            .set_encryption_context(Some(kms_context(context)))
            .send();
        let out = super::aws_call("KMS", "GenerateDataKey", out)
            .await
            .map_err(|e| kms_error("GenerateDataKey", e))?;
        let plaintext = out
            .plaintext
            .ok_or_else(|| CryptoError::Unavailable("KMS returned no plaintext key".into()))?;
        let wrapped = out
            .ciphertext_blob
            .ok_or_else(|| CryptoError::Unavailable("KMS returned no wrapped key".into()))?;
        let plaintext = Zeroizing::new(plaintext.into_inner());
        let key: [u8; 32] = plaintext.as_slice().try_into().map_err(|_| {
            CryptoError::Unavailable("KMS returned a data key that is not 256 bits".into())
        })?;
        Ok(DataKey {
            plaintext: Zeroizing::new(key),
            // The ARN KMS answers with, so the envelope names the key exactly.
            key_id: out
                .key_id
                .unwrap_or_else(|| self.key_for(context.tenant).to_string()),
            wrapped: wrapped.into_inner(),
        })
    }

    async fn decrypt_data_key(
        &self,
        key_id: &str,
        wrapped: &[u8],
        context: &EncryptionContext<'_>,
    ) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
        let ck = Self::cache_key(key_id, wrapped, context);
        if let Some(key) = self.cached(&ck) {
            return Ok(key);
        }
        let out = self
            .client
            .decrypt()
            .key_id(key_id)
            .ciphertext_blob(Blob::new(wrapped))
            .set_encryption_context(Some(kms_context(context)))
            .send();
        let out = super::aws_call("KMS", "Decrypt", out)
            .await
            .map_err(|e| kms_error("Decrypt", e))?;
        let plaintext = Zeroizing::new(
            out.plaintext
                .ok_or_else(|| CryptoError::Unavailable("KMS returned no plaintext".into()))?
                .into_inner(),
        );
        let key: [u8; 32] = plaintext
            .as_slice()
            .try_into()
            .map_err(|_| CryptoError::Invalid("the unwrapped data key is not 256 bits".into()))?;
        let key = Zeroizing::new(key);
        self.remember(ck, &key);
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(cache: DataKeyCache) -> KmsKeys {
        // A client that is never called: only the cache is under test.
        let conf = aws_sdk_kms::Config::builder()
            .behavior_version(aws_sdk_kms::config::BehaviorVersion::latest())
            .region(aws_sdk_kms::config::Region::new("us-east-1"))
            .build();
        KmsKeys::new(
            aws_sdk_kms::Client::from_conf(conf),
            "key-default".into(),
            BTreeMap::from([("globex".to_string(), "key-globex".to_string())]),
            cache,
        )
    }

    fn ctx<'a>(tenant: &'a str) -> EncryptionContext<'a> {
        EncryptionContext::artifact(tenant, "t", "art_00000000000000000000000000000001")
    }

    #[test]
    fn a_deleted_or_disabled_key_is_gone_not_an_outage() {
        for code in [
            "NotFoundException",
            "DisabledException",
            "KMSInvalidStateException",
        ] {
            assert!(
                matches!(classify("Decrypt", code), Some(CryptoError::KeyDeleted(_))),
                "{code}"
            );
        }
        assert!(matches!(
            classify("Decrypt", "InvalidCiphertextException"),
            Some(CryptoError::Invalid(_))
        ));
        // Throttling, access denied and the like stay outages (UNAVAILABLE),
        // and so does a write under a deleted key.
        for code in ["ThrottlingException", "AccessDeniedException", ""] {
            assert!(classify("Decrypt", code).is_none(), "{code}");
        }
        assert!(classify("GenerateDataKey", "DisabledException").is_none());
    }

    #[test]
    fn tenants_get_their_own_key_and_everyone_else_the_default() {
        let k = keys(DataKeyCache {
            max_age: Duration::ZERO,
            max_uses: 0,
            max_entries: 0,
        });
        assert_eq!(k.key_for("globex"), "key-globex");
        assert_eq!(k.key_for("acme"), "key-default");
    }

    #[test]
    fn the_unwrap_cache_is_bounded_in_uses_age_and_entries_and_keyed_by_context() {
        let k = keys(DataKeyCache {
            max_age: Duration::from_secs(60),
            max_uses: 3,
            max_entries: 2,
        });
        let key = Zeroizing::new([7u8; 32]);
        let acme = KmsKeys::cache_key("key-default", b"wrapped", &ctx("acme"));
        let globex = KmsKeys::cache_key("key-default", b"wrapped", &ctx("globex"));
        assert_ne!(acme, globex, "the context is part of the cache key");
        k.remember(acme, &key);
        assert!(k.cached(&globex).is_none(), "another tenant never hits");
        // The unwrap itself was use 1; two more, then KMS again.
        assert_eq!(k.cached(&acme).as_deref(), Some(&[7u8; 32]));
        assert!(k.cached(&acme).is_some());
        assert!(k.cached(&acme).is_none(), "max_uses reached");
        // Entries: the oldest live one goes when full.
        for i in 0..3u8 {
            k.remember([i; 32], &key);
        }
        assert!(k.unwrapped.lock().map(|m| m.len()).unwrap_or(0) <= 2);
        assert!(k.cached(&[0; 32]).is_none());
        assert!(k.cached(&[2; 32]).is_some());

        // Age.
        let short = keys(DataKeyCache {
            max_age: Duration::from_millis(20),
            max_uses: 100,
            max_entries: 10,
        });
        short.remember(acme, &key);
        std::thread::sleep(Duration::from_millis(40));
        assert!(short.cached(&acme).is_none(), "max_age reached");
        // Off.
        let off = keys(DataKeyCache {
            max_age: Duration::ZERO,
            max_uses: 100,
            max_entries: 10,
        });
        off.remember(acme, &key);
        assert!(off.cached(&acme).is_none());
    }
}
