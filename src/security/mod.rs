//! Authentication and authorization: credentials → [`SecurityContext`].
//!
//! The tenant always comes from the credential, never from a request body
//! (DESIGN principle 6): a body may repeat it, and [`SecurityContext::check_body_tenant`]
//! rejects a mismatch. Everything here fails closed: a credential that is
//! presented is always verified, even in dev mode, and a method that is not
//! configured rejects its credential instead of ignoring it.
//!
//! No tonic types: the server hands in an `http::HeaderMap` and the peer's
//! certificates, and maps [`AuthError`] to a status.

mod api_key;
mod config;
mod context;
mod jwt;
mod mtls;
pub mod tls;

use http::HeaderMap;

pub use api_key::hash_api_key;
pub use config::{ApiKeyEntry, AuthConfig, AuthConfigError, JwtConfig, MtlsConfig};
pub use context::{
    is_valid_tenant_id, AuthError, AuthMethod, ParsePermissionError, Permission, SecurityContext,
};

/// Largest credential header accepted; bigger is malformed, not parsed.
const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// Verifies credentials against the configured methods. Built once at start-up
/// (key files are read then), shared read-only by every request.
#[derive(Debug)]
pub struct Authenticator {
    dev: bool,
    jwt: Option<jwt::JwtVerifier>,
    api_keys: api_key::ApiKeys,
    mtls: Option<mtls::SpiffeVerifier>,
}

impl Authenticator {
    /// Validates the config and loads key material. Errors name the config field.
    pub fn from_config(c: &AuthConfig) -> Result<Self, AuthConfigError> {
        Ok(Authenticator {
            dev: c.dev,
            jwt: c
                .jwt
                .as_ref()
                .map(jwt::JwtVerifier::from_config)
                .transpose()?,
            api_keys: api_key::ApiKeys::from_config(&c.api_keys)?,
            mtls: c
                .mtls
                .as_ref()
                .map(mtls::SpiffeVerifier::from_config)
                .transpose()?,
        })
    }

    /// Whether any real method (JWT, API key, mTLS) is configured.
    pub fn is_configured(&self) -> bool {
        self.jwt.is_some() || !self.api_keys.is_empty() || self.mtls.is_some()
    }

    /// Whether callers send bearer secrets (JWTs, API keys), which must
    /// not cross a network in cleartext.
    pub fn accepts_bearer_secrets(&self) -> bool {
        self.jwt.is_some() || !self.api_keys.is_empty()
    }

    /// Whether requests without a credential get the fixed `dev` context.
    pub fn is_dev(&self) -> bool {
        self.dev
    }

    /// Resolves the caller. Order: bearer token, API key, mTLS peer certificate,
    /// dev mode; the first credential present decides (no fallback past a bad one).
    ///
    /// `peer_certs`: DER certificates of the verified TLS client, leaf first
    /// (tonic's `Request::peer_certs()`); chain verification is the TLS layer's job.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        peer_certs: Option<&[Vec<u8>]>,
    ) -> Result<SecurityContext, AuthError> {
        if let Some(value) = single_header(headers, http::header::AUTHORIZATION.as_str())? {
            let token = bearer_token(value)?;
            let Some(jwt) = &self.jwt else {
                return Err(AuthError::InvalidToken(
                    "bearer tokens are not accepted by this server".into(),
                ));
            };
            return jwt.verify(token);
        }
        if let Some(value) = single_header(headers, "x-api-key")? {
            if self.api_keys.is_empty() {
                return Err(AuthError::InvalidToken(
                    "API keys are not accepted by this server".into(),
                ));
            }
            return self.api_keys.verify(value);
        }
        if let (Some(mtls), Some(certs)) = (&self.mtls, peer_certs) {
            if let Some(leaf) = certs.first() {
                return mtls.verify(leaf);
            }
        }
        if self.dev {
            return Ok(SecurityContext::dev());
        }
        Err(AuthError::Missing)
    }
}

/// The one value of `name`, as visible ASCII. Two values are ambiguous, so malformed.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, AuthError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthError::Malformed(format!(
            "more than one `{name}` header"
        )));
    }
    if value.len() > MAX_CREDENTIAL_BYTES {
        return Err(AuthError::Malformed(format!(
            "`{name}` header is too large"
        )));
    }
    let value = value
        .to_str()
        .map_err(|_| AuthError::Malformed(format!("`{name}` header is not visible ASCII")))?;
    Ok(Some(value))
}

/// `Bearer <token>`, scheme case-insensitive (RFC 9110).
fn bearer_token(value: &str) -> Result<&str, AuthError> {
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or_else(|| AuthError::Malformed("expected `authorization: Bearer <token>`".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Malformed(
            "only the Bearer authorization scheme is supported".into(),
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Malformed("empty bearer token".into()));
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
