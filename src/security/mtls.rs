//! mTLS: the tenant comes from the client certificate's SPIFFE id. The TLS
//! layer has already verified the chain; this only reads the leaf.

use std::collections::BTreeSet;

use x509_parser::extensions::GeneralName;

use super::config::{parse_permissions, read_file, AuthConfigError, MtlsConfig};
use super::context::{is_valid_tenant_id, AuthError, AuthMethod, Permission, SecurityContext};

#[derive(Debug)]
pub(super) struct SpiffeVerifier {
    trust_domain: String,
    permissions: BTreeSet<Permission>,
}

impl SpiffeVerifier {
    pub(super) fn from_config(c: &MtlsConfig) -> Result<Self, AuthConfigError> {
        // The server loads these for TLS; reading them here too moves a typo
        // from the first handshake to start-up, with the field named.
        read_file("auth.mtls.ca_file", &c.ca_file)?;
        read_file("auth.mtls.cert_file", &c.cert_file)?;
        read_file("auth.mtls.key_file", &c.key_file)?;
        let td = c.trust_domain.trim();
        // SPIFFE trust domains are lowercase [a-z0-9.-_]; anything else could never match.
        let valid = !td.is_empty()
            && td.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
            });
        if !valid {
            return Err(AuthConfigError::new(
                "auth.mtls.trust_domain",
                "must be a bare SPIFFE trust domain such as `example.org` (lowercase, no scheme or path)",
            ));
        }
        Ok(SpiffeVerifier {
            trust_domain: td.to_owned(),
            permissions: parse_permissions("auth.mtls.permissions", &c.permissions)?,
        })
    }

    /// `leaf`: DER of the client certificate.
    pub(super) fn verify(&self, leaf: &[u8]) -> Result<SecurityContext, AuthError> {
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|_| AuthError::Malformed("client certificate is not valid DER".into()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|_| AuthError::Malformed("client certificate has an invalid SAN".into()))?;
        let mut ids = san
            .iter()
            .flat_map(|san| san.value.general_names.iter())
            .filter_map(|name| match name {
                GeneralName::URI(uri) if uri.starts_with("spiffe://") => Some(*uri),
                _ => None,
            });
        let id = ids
            .next()
            .ok_or_else(|| AuthError::InvalidToken("client certificate has no SPIFFE id".into()))?;
        // An X.509-SVID carries exactly one SPIFFE id; two would make the tenant ambiguous.
        if ids.next().is_some() {
            return Err(AuthError::InvalidToken(
                "client certificate has more than one SPIFFE id".into(),
            ));
        }
        let tenant = self.tenant_of(id)?;
        Ok(SecurityContext {
            tenant_id: tenant.to_owned(),
            requester_id: id.to_owned(),
            permissions: self.permissions.clone(),
            method: AuthMethod::Mtls,
        })
    }

    /// `spiffe://<trust_domain>/tenant/<tenant>[/...]` → tenant.
    pub(super) fn tenant_of<'a>(&self, id: &'a str) -> Result<&'a str, AuthError> {
        let rest = id.strip_prefix("spiffe://").unwrap_or(id);
        let (domain, path) = rest.split_once('/').unwrap_or((rest, ""));
        if domain != self.trust_domain {
            return Err(AuthError::InvalidToken(
                "SPIFFE trust domain is not accepted".into(),
            ));
        }
        if id.contains(['?', '#']) {
            return Err(AuthError::InvalidToken(
                "SPIFFE id must not have a query or fragment".into(),
            ));
        }
        let mut segments = path.split('/');
        match (segments.next(), segments.next()) {
            (Some("tenant"), Some(tenant)) if is_valid_tenant_id(tenant) => Ok(tenant),
            _ => Err(AuthError::InvalidToken(
                "SPIFFE id path must start with /tenant/<tenant>".into(),
            )),
        }
    }
}
