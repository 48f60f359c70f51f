//! The `auth:` config section. Parsing only; validation happens when the
//! [`Authenticator`](super::Authenticator) loads it, so errors can name the field.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::context::Permission;

/// How callers authenticate. The default configures nothing, and the server
/// refuses to start that way unless dev mode is asked for (`dev: true` or
/// `serve --dev`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// No credential needed; every request is tenant `dev` with all
    /// permissions. The server refuses it on non-loopback addresses.
    pub dev: bool,
    /// Bearer JWTs.
    pub jwt: Option<JwtConfig>,
    /// Static API keys, stored as SHA-256 hashes.
    pub api_keys: Vec<ApiKeyEntry>,
    /// TLS client certificates carrying a SPIFFE id.
    pub mtls: Option<MtlsConfig>,
}

/// Bearer JWT verification. RS256/ES256 keys come from a JWKS file, HS256
/// from a shared secret; at least one must be set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required member of `aud`.
    pub audience: String,
    /// JWKS (`{"keys": [...]}`) with the issuer's public RSA / P-256 keys.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// File holding the HS256 secret (trailing whitespace ignored).
    #[serde(default)]
    pub hs256_secret_file: Option<PathBuf>,
    /// Environment variable holding the HS256 secret.
    #[serde(default)]
    pub hs256_secret_env: Option<String>,
    /// Claim carrying the tenant id.
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// Claim carrying permissions: an array of strings or a space-separated
    /// string (OAuth `scope` style). Unknown entries are ignored.
    #[serde(default = "default_permissions_claim")]
    pub permissions_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway_seconds")]
    pub leeway_seconds: u64,
}

fn default_tenant_claim() -> String {
    "tenant".into()
}

fn default_permissions_claim() -> String {
    "permissions".into()
}

fn default_leeway_seconds() -> u64 {
    30
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            issuer: String::new(),
            audience: String::new(),
            jwks_file: None,
            hs256_secret_file: None,
            hs256_secret_env: None,
            tenant_claim: default_tenant_claim(),
            permissions_claim: default_permissions_claim(),
            leeway_seconds: default_leeway_seconds(),
        }
    }
}

/// One static API key. Only its hash is configured, so a leaked config file
/// does not leak keys; [`hash_api_key`](super::hash_api_key) gives the hash of a new key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyEntry {
    /// Hex SHA-256 of the key.
    pub sha256: String,
    /// Tenant the key belongs to.
    pub tenant: String,
    /// Name recorded as the requester (for audit).
    pub requester: String,
    /// Granted permissions.
    #[serde(default)]
    pub permissions: Vec<String>,
}

/// Mutual TLS. The server uses the files to set up TLS; authentication reads
/// the tenant from the client certificate's SPIFFE id
/// `spiffe://<trust_domain>/tenant/<tenant>[/...]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MtlsConfig {
    /// CA bundle that client certificates must chain to.
    pub ca_file: PathBuf,
    /// Server certificate (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM).
    pub key_file: PathBuf,
    /// Only SPIFFE ids in this trust domain are accepted.
    pub trust_domain: String,
    /// Permissions granted to every authenticated client certificate.
    #[serde(default)]
    pub permissions: Vec<String>,
}

/// An unusable `auth:` section, naming the field (`auth.jwt.jwks_file: ...`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct AuthConfigError {
    /// Field path, e.g. `auth.api_keys[2].sha256`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl AuthConfigError {
    pub(super) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        AuthConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Parses configured permission strings; unlike tokens, config must not contain unknown ones.
pub(super) fn parse_permissions(
    field: &str,
    list: &[String],
) -> Result<BTreeSet<Permission>, AuthConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            p.parse()
                .map_err(|e| AuthConfigError::new(format!("{field}[{i}]"), format!("{e}")))
        })
        .collect()
}

/// Reads a key file once at start-up.
pub(super) fn read_file(field: &str, path: &Path) -> Result<Vec<u8>, AuthConfigError> {
    std::fs::read(path)
        .map_err(|e| AuthConfigError::new(field, format!("cannot read {}: {e}", path.display())))
}
