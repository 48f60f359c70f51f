//! Static API keys (`x-api-key`), configured as SHA-256 hashes.

use std::collections::{BTreeSet, HashSet};

use sha2::{Digest, Sha256};

use super::config::{parse_permissions, ApiKeyEntry, AuthConfigError};
use super::context::{is_valid_tenant_id, AuthError, AuthMethod, Permission, SecurityContext};

/// For operators: the SHA-256 hex to put in `auth.api_keys[].sha256`.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

#[derive(Debug)]
struct Entry {
    hash: [u8; 32],
    tenant: String,
    requester: String,
    permissions: BTreeSet<Permission>,
}

/// The configured keys, hashes decoded once.
#[derive(Debug, Default)]
pub(super) struct ApiKeys {
    entries: Vec<Entry>,
}

impl ApiKeys {
    pub(super) fn from_config(list: &[ApiKeyEntry]) -> Result<Self, AuthConfigError> {
        let mut seen = HashSet::new();
        let mut entries = Vec::with_capacity(list.len());
        for (i, e) in list.iter().enumerate() {
            let field = |name: &str| format!("auth.api_keys[{i}].{name}");
            let hash: [u8; 32] = hex::decode(e.sha256.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    AuthConfigError::new(
                        field("sha256"),
                        "must be the 64-character hex SHA-256 of the key, not the key itself",
                    )
                })?;
            if !seen.insert(hash) {
                return Err(AuthConfigError::new(
                    field("sha256"),
                    "duplicate key hash: one key cannot belong to two entries",
                ));
            }
            if !is_valid_tenant_id(&e.tenant) {
                return Err(AuthConfigError::new(
                    field("tenant"),
                    "must match [A-Za-z0-9._-]{1,128} and not be . or ..",
                ));
            }
            if e.requester.trim().is_empty() {
                return Err(AuthConfigError::new(
                    field("requester"),
                    "must not be empty",
                ));
            }
            entries.push(Entry {
                hash,
                tenant: e.tenant.clone(),
                requester: e.requester.clone(),
                permissions: parse_permissions(&field("permissions"), &e.permissions)?,
            });
        }
        Ok(ApiKeys { entries })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Compares the key's hash with every entry in constant time, so response
    /// timing reveals neither the key nor which entry matched.
    pub(super) fn verify(&self, key: &str) -> Result<SecurityContext, AuthError> {
        let key = key.trim();
        if key.is_empty() {
            return Err(AuthError::Malformed("empty `x-api-key` header".into()));
        }
        let presented: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = None;
        for entry in &self.entries {
            if constant_time_eq(&entry.hash, &presented) {
                found = Some(entry);
            }
        }
        let entry = found.ok_or_else(|| AuthError::InvalidToken("unknown API key".into()))?;
        Ok(SecurityContext {
            tenant_id: entry.tenant.clone(),
            requester_id: entry.requester.clone(),
            permissions: entry.permissions.clone(),
            method: AuthMethod::ApiKey,
        })
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}
