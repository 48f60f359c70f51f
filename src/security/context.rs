//! Who is calling and what they may do.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::model::Sensitivity;

/// What a credential allows. Wire form: `compact`, `render`, `rehydrate`,
/// `delete`, `artifact:read:<sensitivity>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Call `Compact` (and commit plans).
    Compact,
    /// Call `Render`.
    Render,
    /// Call `Rehydrate`.
    Rehydrate,
    /// Call `DeleteThread` (erases a thread's plan and artifacts).
    Delete,
    /// Read back artifacts of exactly this sensitivity; levels do not imply
    /// each other, so a grant is always explicit.
    ArtifactRead(Sensitivity),
}

const SENSITIVITIES: [Sensitivity; 4] = [
    Sensitivity::Public,
    Sensitivity::Internal,
    Sensitivity::Confidential,
    Sensitivity::Restricted,
];

impl Permission {
    /// Every permission (what dev mode grants).
    pub fn all() -> BTreeSet<Permission> {
        let mut all: BTreeSet<Permission> = [
            Permission::Compact,
            Permission::Render,
            Permission::Rehydrate,
            Permission::Delete,
        ]
        .into();
        all.extend(SENSITIVITIES.map(Permission::ArtifactRead));
        all
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Permission::Compact => f.write_str("compact"),
            Permission::Render => f.write_str("render"),
            Permission::Rehydrate => f.write_str("rehydrate"),
            Permission::Delete => f.write_str("delete"),
            Permission::ArtifactRead(s) => write!(f, "artifact:read:{}", s.as_str()),
        }
    }
}

/// A permission string that is not one of the known forms.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown permission {0:?} (expected compact, render, rehydrate, delete or artifact:read:<public|internal|confidential|restricted>)")]
pub struct ParsePermissionError(pub String);

impl FromStr for Permission {
    type Err = ParsePermissionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "compact" => return Ok(Permission::Compact),
            "render" => return Ok(Permission::Render),
            "rehydrate" => return Ok(Permission::Rehydrate),
            "delete" => return Ok(Permission::Delete),
            _ => {}
        }
        s.strip_prefix("artifact:read:")
            .and_then(|level| SENSITIVITIES.into_iter().find(|s| s.as_str() == level))
            .map(Permission::ArtifactRead)
            .ok_or_else(|| ParsePermissionError(s.chars().take(64).collect()))
    }
}

/// How the caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthMethod {
    /// Bearer JWT.
    Jwt,
    /// Static API key.
    ApiKey,
    /// TLS client certificate with a SPIFFE id.
    Mtls,
    /// No credential; dev mode on loopback.
    Dev,
}

/// The authenticated caller. Every store key and cache entry is scoped by
/// `tenant_id`, which comes only from the credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityContext {
    /// Tenant; matches [`is_valid_tenant_id`], so it is safe as a path segment.
    pub tenant_id: String,
    /// Who within the tenant (JWT `sub`, API key name, SPIFFE id); for audit.
    pub requester_id: String,
    /// What the caller may do.
    pub permissions: BTreeSet<Permission>,
    /// How the caller authenticated.
    pub method: AuthMethod,
}

impl SecurityContext {
    /// `PermissionDenied` naming `p` unless the caller holds it.
    pub fn require(&self, p: &Permission) -> Result<(), AuthError> {
        if self.permissions.contains(p) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied(format!(
                "the credential lacks the `{p}` permission"
            )))
        }
    }

    /// Whether the caller may read back artifacts of sensitivity `s`.
    pub fn can_read(&self, s: Sensitivity) -> bool {
        self.permissions.contains(&Permission::ArtifactRead(s))
    }

    /// A tenant id sent in a request body must equal the credential's; empty = not sent.
    pub fn check_body_tenant(&self, body_tenant: &str) -> Result<(), AuthError> {
        if body_tenant.is_empty() || body_tenant == self.tenant_id {
            Ok(())
        } else {
            // Neither id is echoed: the message may end up in another system's logs.
            Err(AuthError::PermissionDenied(
                "tenant_id in the request does not match the credential's tenant".into(),
            ))
        }
    }

    /// Dev mode: tenant `dev`, requester `dev`, every permission.
    pub fn dev() -> Self {
        SecurityContext {
            tenant_id: "dev".into(),
            requester_id: "dev".into(),
            permissions: Permission::all(),
            method: AuthMethod::Dev,
        }
    }
}

/// Why a request was not authenticated or not authorized. Messages never
/// contain the credential itself.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AuthError {
    /// No credential and dev mode is off.
    #[error("missing credential: send `authorization: Bearer <jwt>`, `x-api-key`, or a client certificate")]
    Missing,
    /// The credential could not be parsed.
    #[error("malformed credential: {0}")]
    Malformed(String),
    /// Parsed, but not acceptable (signature, claims, unknown key, trust domain).
    #[error("invalid credential: {0}")]
    InvalidToken(String),
    /// `exp` is in the past (beyond the leeway).
    #[error("token expired")]
    Expired,
    /// `iss` is not the configured issuer.
    #[error("token issuer is not accepted")]
    WrongIssuer,
    /// `aud` does not contain the configured audience.
    #[error("token audience is not accepted")]
    WrongAudience,
    /// `alg: none`, or an algorithm the matching key may not be used with.
    #[error("token algorithm {0:?} is not allowed")]
    AlgorithmNotAllowed(String),
    /// No configured key matches the token's `kid`.
    #[error("token is signed by an unknown key")]
    UnknownKey,
    /// Authenticated, but not allowed to do this.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
}

impl AuthError {
    /// PERMISSION_DENIED at the edge; every other variant is UNAUTHENTICATED.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, AuthError::PermissionDenied(_))
    }
}

/// Tenant ids become storage path segments and metric labels, so they are
/// restricted to `[A-Za-z0-9._-]{1,128}` and may not be `.` or `..`.
pub fn is_valid_tenant_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
