//! Why the service does not start, and what the checks that let it start
//! produced. The settings own both: `config check` and `serve` run the same
//! checks and report the same errors, and nothing here depends on the
//! server that consumes them.

use std::net::SocketAddr;

use thiserror::Error;

use crate::security::{AuthConfigError, Authenticator};
use crate::store::StoreError;

/// Why the server did not start (or stopped with an error).
#[derive(Debug, Error)]
pub enum ServeError {
    /// Dev mode accepts every caller as tenant `dev`: loopback only.
    #[error("dev mode (--dev or auth.dev) is only allowed on a loopback address, not {0}")]
    DevModeNotLoopback(SocketAddr),
    /// No credential method is configured and dev mode was not asked for.
    #[error(
        "refusing to serve on {0} without authentication: configure auth.jwt, auth.api_keys or auth.mtls \
         (see docs/security.md), or pass --dev (or set auth.dev: true) for a development \
         server on a loopback address that accepts every caller as tenant `dev`"
    )]
    NoAuthentication(SocketAddr),
    /// The `auth` section is unusable.
    #[error("auth config: {0}")]
    Auth(#[from] AuthConfigError),
    /// A settings value is out of range.
    #[error("{field}: {message}")]
    Invalid {
        /// Dotted path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Bearer secrets would cross the network in cleartext.
    #[error(
        "refusing to accept JWTs or API keys on {0} without TLS: configure tls.cert_file and tls.key_file, \
         or set allow_plaintext_behind_tls_terminator: true if TLS ends in front of compactd"
    )]
    PlaintextCredentials(SocketAddr),
    /// The embedded stores could not be opened.
    #[error("cannot open the data directory: {0}")]
    Store(#[from] StoreError),
    /// TLS files could not be read.
    #[error("tls: {0}")]
    Tls(String),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

impl ServeError {
    /// What opening the stores failed with, as `serve` reports it.
    pub fn from_open(e: crate::store::backend::OpenError) -> Self {
        match e {
            crate::store::backend::OpenError::Invalid { field, message } => {
                ServeError::invalid(field, message)
            }
            crate::store::backend::OpenError::Store(e) => ServeError::from(e),
        }
    }

    /// An `Invalid` naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl ToString) -> Self {
        ServeError::Invalid {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// What [`Settings::validate`](super::Settings::validate) produced: the
/// authenticator, the redaction rules and the TLS material, built once
/// (key files are read here).
#[derive(Debug)]
pub struct Startup {
    /// Verifies credentials.
    pub authenticator: Authenticator,
    /// The compiled redaction rules.
    pub redactor: crate::redact::Redactor,
    /// TLS for the listener, when configured: loaded, so its files were
    /// read and checked.
    pub tls: Option<crate::security::tls::LoadedTls>,
}

impl From<crate::security::tls::TlsError> for ServeError {
    fn from(e: crate::security::tls::TlsError) -> Self {
        ServeError::Tls(e.0)
    }
}
