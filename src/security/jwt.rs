//! Bearer JWTs: RS256/ES256 against a JWKS file, HS256 against a shared secret.
//!
//! The algorithm is chosen by the key, never by the token: the header's `alg`
//! only has to agree with the key it selects. That rules out `alg: none` and
//! key confusion (an HS256 token "signed" with the RSA public key), because an
//! HMAC check only ever uses the configured secret.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::config::{read_file, AuthConfigError, JwtConfig};
use super::context::{is_valid_tenant_id, AuthError, AuthMethod, Permission, SecurityContext};

/// HS256 secrets shorter than the hash output are brute-forceable (RFC 7518 §3.2).
const MIN_HS256_SECRET_BYTES: usize = 32;
/// RSA keys below 2048 bits are not accepted from a JWKS.
const MIN_RSA_MODULUS_BYTES: usize = 256;
/// More clock skew than this is a misconfiguration, not skew.
const MAX_LEEWAY_SECONDS: u64 = 600;

/// One public key from the JWKS, with the only algorithm it may verify.
#[derive(Debug)]
struct JwksKey {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

#[derive(Debug)]
pub(super) struct JwtVerifier {
    issuer: String,
    audience: String,
    jwks: Vec<JwksKey>,
    hs256: Option<DecodingKey>,
    tenant_claim: String,
    permissions_claim: String,
    leeway_seconds: u64,
}

impl JwtVerifier {
    pub(super) fn from_config(c: &JwtConfig) -> Result<Self, AuthConfigError> {
        for (field, value) in [
            ("auth.jwt.issuer", &c.issuer),
            ("auth.jwt.audience", &c.audience),
            ("auth.jwt.tenant_claim", &c.tenant_claim),
            ("auth.jwt.permissions_claim", &c.permissions_claim),
        ] {
            if value.trim().is_empty() {
                return Err(AuthConfigError::new(field, "must not be empty"));
            }
        }
        if c.leeway_seconds > MAX_LEEWAY_SECONDS {
            return Err(AuthConfigError::new(
                "auth.jwt.leeway_seconds",
                format!("must be at most {MAX_LEEWAY_SECONDS}"),
            ));
        }
        let jwks = match &c.jwks_file {
            Some(path) => load_jwks(path)?,
            None => Vec::new(),
        };
        let hs256 = load_hs256_secret(c)?.map(|s| DecodingKey::from_secret(&s));
        if jwks.is_empty() && hs256.is_none() {
            return Err(AuthConfigError::new(
                "auth.jwt",
                "set jwks_file (RS256/ES256) or hs256_secret_file / hs256_secret_env (HS256)",
            ));
        }
        Ok(JwtVerifier {
            issuer: c.issuer.clone(),
            audience: c.audience.clone(),
            jwks,
            hs256,
            tenant_claim: c.tenant_claim.clone(),
            permissions_claim: c.permissions_claim.clone(),
            leeway_seconds: c.leeway_seconds,
        })
    }

    pub(super) fn verify(&self, token: &str) -> Result<SecurityContext, AuthError> {
        let header = decode_header(token)?;
        let (alg, key) = self.select_key(&header)?;

        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = self.leeway_seconds;
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map_err(|e| map_jwt_error(e.kind(), alg))?
            .claims;

        let tenant = match claims.get(&self.tenant_claim) {
            None | Some(Value::Null) => {
                return Err(AuthError::InvalidToken(format!(
                    "token has no `{}` claim",
                    self.tenant_claim
                )))
            }
            Some(Value::String(t)) if is_valid_tenant_id(t) => t,
            Some(_) => {
                return Err(AuthError::InvalidToken(format!(
                    "`{}` claim is not a valid tenant id ([A-Za-z0-9._-]{{1,128}})",
                    self.tenant_claim
                )))
            }
        };
        let sub = claims.get("sub").and_then(Value::as_str).unwrap_or("");
        if sub.is_empty() {
            return Err(AuthError::InvalidToken("`sub` claim is empty".into()));
        }
        Ok(SecurityContext {
            tenant_id: tenant.to_owned(),
            requester_id: sub.to_owned(),
            permissions: self.permissions(&claims)?,
            method: AuthMethod::Jwt,
        })
    }

    /// Picks the key by `kid` (a one-key JWKS also matches a token without
    /// one) and checks the header's algorithm is the one that key allows.
    fn select_key(&self, header: &TokenHeader) -> Result<(Algorithm, &DecodingKey), AuthError> {
        match header.alg.as_str() {
            "HS256" => self
                .hs256
                .as_ref()
                .map(|k| (Algorithm::HS256, k))
                .ok_or_else(|| AuthError::AlgorithmNotAllowed("HS256".into())),
            alg @ ("RS256" | "ES256") => {
                if self.jwks.is_empty() {
                    return Err(AuthError::AlgorithmNotAllowed(alg.into()));
                }
                let key = match &header.kid {
                    Some(kid) => self.jwks.iter().find(|k| k.kid.as_ref() == Some(kid)),
                    None if self.jwks.len() == 1 => self.jwks.first(),
                    None => None,
                }
                .ok_or(AuthError::UnknownKey)?;
                if alg_name(key.alg) != alg {
                    return Err(AuthError::AlgorithmNotAllowed(alg.into()));
                }
                Ok((key.alg, &key.key))
            }
            other => Err(AuthError::AlgorithmNotAllowed(printable(other))),
        }
    }

    /// Known permissions from the claim. Unknown entries are ignored: an
    /// identity provider's `scope` usually carries other services' scopes too.
    fn permissions(&self, claims: &Map<String, Value>) -> Result<BTreeSet<Permission>, AuthError> {
        let bad = || {
            AuthError::InvalidToken(format!(
                "`{}` claim must be an array of strings or a space-separated string",
                self.permissions_claim
            ))
        };
        let names: Vec<&str> = match claims.get(&self.permissions_claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => s.split_whitespace().collect(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().ok_or_else(bad))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad()),
        };
        Ok(names.into_iter().filter_map(|n| n.parse().ok()).collect())
    }
}

/// The two header fields that matter, read before any library decoding so
/// that `alg: none` (which jsonwebtoken cannot even represent) is named as such.
#[derive(Debug)]
struct TokenHeader {
    alg: String,
    kid: Option<String>,
}

fn decode_header(token: &str) -> Result<TokenHeader, AuthError> {
    let parts: Vec<&str> = token.split('.').collect();
    match parts.len() {
        3 => {}
        5 => {
            return Err(AuthError::Malformed(
                "encrypted tokens (JWE) are not supported".into(),
            ))
        }
        _ => {
            return Err(AuthError::Malformed(
                "a JWT has three dot-separated parts".into(),
            ))
        }
    }
    let header: Map<String, Value> = URL_SAFE_NO_PAD
        .decode(parts[0])
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| AuthError::Malformed("token header is not base64url JSON".into()))?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or_else(|| AuthError::Malformed("token header has no `alg`".into()))?;
    // RFC 7515 §4.1.11: a recipient that does not understand `crit` must reject.
    if header.contains_key("crit") {
        return Err(AuthError::InvalidToken(
            "critical header extensions are not supported".into(),
        ));
    }
    let kid = match header.get("kid") {
        None | Some(Value::Null) => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(AuthError::Malformed("token `kid` is not a string".into())),
    };
    Ok(TokenHeader {
        alg: alg.to_owned(),
        kid,
    })
}

fn map_jwt_error(kind: &ErrorKind, alg: Algorithm) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::ImmatureSignature => {
            AuthError::InvalidToken("token is not valid yet (nbf)".into())
        }
        ErrorKind::InvalidSignature => AuthError::InvalidToken("signature does not verify".into()),
        ErrorKind::MissingRequiredClaim(c) => {
            AuthError::InvalidToken(format!("token has no `{c}` claim"))
        }
        ErrorKind::InvalidClaimFormat(c) => {
            AuthError::InvalidToken(format!("claim `{c}` has the wrong type"))
        }
        ErrorKind::InvalidAlgorithm => AuthError::AlgorithmNotAllowed(alg_name(alg).into()),
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => AuthError::Malformed("token is not a well-formed JWT".into()),
        other => {
            // A key that loaded but cannot verify is our problem, not the caller's.
            tracing::warn!(error = ?other, "JWT verification failed inside the key provider");
            AuthError::InvalidToken("token cannot be verified with the configured keys".into())
        }
    }
}

fn alg_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::RS256 => "RS256",
        Algorithm::ES256 => "ES256",
        Algorithm::HS256 => "HS256",
        _ => "unsupported",
    }
}

/// An attacker-chosen header value, made safe to put in an error message.
fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect()
}

fn load_hs256_secret(c: &JwtConfig) -> Result<Option<Vec<u8>>, AuthConfigError> {
    let (field, secret) = match (&c.hs256_secret_file, &c.hs256_secret_env) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(AuthConfigError::new(
                "auth.jwt.hs256_secret_env",
                "set only one of hs256_secret_file and hs256_secret_env",
            ))
        }
        (Some(path), None) => {
            let mut bytes = read_file("auth.jwt.hs256_secret_file", path)?;
            // Files written with `echo` end in a newline that is not part of the secret.
            while bytes.last().is_some_and(u8::is_ascii_whitespace) {
                bytes.pop();
            }
            ("auth.jwt.hs256_secret_file", bytes)
        }
        (None, Some(var)) => {
            let value = std::env::var(var).map_err(|_| {
                AuthConfigError::new(
                    "auth.jwt.hs256_secret_env",
                    format!("environment variable {var} is not set or not UTF-8"),
                )
            })?;
            ("auth.jwt.hs256_secret_env", value.into_bytes())
        }
    };
    if secret.len() < MIN_HS256_SECRET_BYTES {
        return Err(AuthConfigError::new(
            field,
            format!("HS256 secret must be at least {MIN_HS256_SECRET_BYTES} bytes"),
        ));
    }
    Ok(Some(secret))
}

/// Reads the usable signing keys: RSA (RS256) and P-256 (ES256). Keys for
/// encryption or other algorithms are skipped, since identity providers
/// publish those in the same set; a broken key of a supported type is an error.
fn load_jwks(path: &Path) -> Result<Vec<JwksKey>, AuthConfigError> {
    const FIELD: &str = "auth.jwt.jwks_file";
    let err = |msg: String| AuthConfigError::new(FIELD, format!("{}: {msg}", path.display()));
    let doc: Value = serde_json::from_slice(&read_file(FIELD, path)?)
        .map_err(|e| err(format!("not JSON: {e}")))?;
    let entries = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or_else(|| err("expected a JWKS object {\"keys\": [...]}".into()))?;
    let mut keys = Vec::new();
    let mut kids = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some(key) = parse_jwk(entry).map_err(|msg| err(format!("keys[{i}]: {msg}")))? else {
            tracing::warn!(file = %path.display(), index = i, "skipping JWKS key: not an RS256/ES256 signing key");
            continue;
        };
        if let Some(kid) = &key.kid {
            if !kids.insert(kid.clone()) {
                return Err(err(format!("keys[{i}]: duplicate kid {kid:?}")));
            }
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(err("no RS256 or ES256 signing key in the set".into()));
    }
    Ok(keys)
}

fn parse_jwk(jwk: &Value) -> Result<Option<JwksKey>, String> {
    let field = |name: &str| jwk.get(name).and_then(Value::as_str);
    let required = |name: &str| field(name).ok_or_else(|| format!("missing `{name}`"));
    if field("use").is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    let kid = field("kid").map(str::to_owned);
    let alg_ok = |want: &str| field("alg").is_none_or(|a| a == want);
    let (alg, key) = match field("kty") {
        Some("RSA") if alg_ok("RS256") => {
            let (n, e) = (required("n")?, required("e")?);
            let modulus = URL_SAFE_NO_PAD
                .decode(n)
                .map_err(|_| "`n` is not base64url".to_owned())?;
            let significant = modulus.iter().skip_while(|&&b| b == 0).count();
            if significant < MIN_RSA_MODULUS_BYTES {
                return Err("RSA key is shorter than 2048 bits".into());
            }
            let key = DecodingKey::from_rsa_components(n, e)
                .map_err(|e| format!("invalid RSA key: {e}"))?;
            (Algorithm::RS256, key)
        }
        Some("EC") if alg_ok("ES256") && field("crv") == Some("P-256") => {
            let (x, y) = (required("x")?, required("y")?);
            for (name, coord) in [("x", x), ("y", y)] {
                let len = URL_SAFE_NO_PAD.decode(coord).map(|b| b.len());
                if len.ok() != Some(32) {
                    return Err(format!("`{name}` is not a base64url P-256 coordinate"));
                }
            }
            let key = DecodingKey::from_ec_components(x, y)
                .map_err(|e| format!("invalid EC key: {e}"))?;
            (Algorithm::ES256, key)
        }
        _ => return Ok(None),
    };
    Ok(Some(JwksKey { kid, alg, key }))
}
