//! TLS material for the listener: the settings, where the key pair and
//! client CA come from, and loading them into a rustls configuration whose
//! key pair can be swapped (the listener's reloader does). Loading checks
//! everything a handshake would need, so a configuration check reads and
//! refuses the same files `serve` would.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};

/// Why TLS material could not be loaded; names the setting and the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// Server TLS without client certificates (for JWT and API-key callers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// Certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// How often the files are checked for changes (SIGHUP reloads at once).
    #[serde(default = "default_reload_interval_seconds")]
    pub reload_interval_seconds: u64,
}

fn default_reload_interval_seconds() -> u64 {
    30
}

/// Where the server's key pair and (for mTLS) the client CA come from.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSource {
    /// Certificate chain file.
    pub cert_file: PathBuf,
    /// Private key file.
    pub key_file: PathBuf,
    /// Client CA bundle: client certificates are verified when presented.
    pub client_ca_file: Option<PathBuf>,
    /// File check interval.
    pub reload_interval: Duration,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(field: &str, path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError(format!("{field} ({}): {what}", path.display()))
}

/// Reads and checks a key pair: the chain parses, the key parses and
/// belongs to the leaf certificate.
pub(crate) fn load_key_pair(source: &TlsSource) -> Result<Arc<CertifiedKey>, TlsError> {
    let read = |field: &str, path: &Path| {
        std::fs::read(path).map_err(|e| tls_error(field, path, format!("cannot read: {e}")))
    };
    let cert_pem = read("cert_file", &source.cert_file)?;
    let key_pem = read("key_file", &source.key_file)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| tls_error("cert_file", &source.cert_file, e))?;
    if chain.is_empty() {
        return Err(tls_error(
            "cert_file",
            &source.cert_file,
            "no PEM certificate in it",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| tls_error("key_file", &source.key_file, e))?;
    let pair = CertifiedKey::from_der(chain, key, &provider())
        .map_err(|e| tls_error("key_file", &source.key_file, e))?;
    Ok(Arc::new(pair))
}

/// Hands out the current key pair; [`Reloader`] swaps it.
#[derive(Debug)]
pub(crate) struct CurrentKey(RwLock<Arc<CertifiedKey>>);

impl CurrentKey {
    /// Swaps in a key pair (a reload).
    pub(crate) fn set(&self, pair: Arc<CertifiedKey>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pair;
    }
}

impl ResolvesServerCert for CurrentKey {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ))
    }
}

/// A loaded TLS configuration: what the listener accepts with, the key
/// pair it swaps on reload, and where that comes from.
pub struct LoadedTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) current: Arc<CurrentKey>,
    pub(crate) source: TlsSource,
    /// The files' modification times, taken before they were read: a
    /// rotation after that is a change the reloader sees.
    pub(crate) stamp: Option<(SystemTime, SystemTime)>,
}

impl std::fmt::Debug for LoadedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTls")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Modification times of the key pair files, to notice a rotation.
pub(crate) fn stamp(source: &TlsSource) -> Option<(SystemTime, SystemTime)> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(&source.cert_file)?, m(&source.key_file)?))
}

/// Loads the key pair and the client CA; every problem names the file.
pub fn load(source: TlsSource) -> Result<LoadedTls, TlsError> {
    let stamp = stamp(&source);
    let pair = load_key_pair(&source)?;
    let current = Arc::new(CurrentKey(RwLock::new(pair)));
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &source.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => builder.with_client_cert_verifier(client_verifier(ca_file)?),
    };
    let mut config = builder.with_cert_resolver(Arc::clone(&current) as _);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(LoadedTls {
        config: Arc::new(config),
        current,
        source,
        stamp,
    })
}

/// Client certificates verified against `ca_file` when presented, not
/// required: JWT and API-key callers share the listener; a call with no
/// credential at all still fails authentication.
fn client_verifier(
    ca_file: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let pem = std::fs::read(ca_file)
        .map_err(|e| tls_error("ca_file", ca_file, format!("cannot read: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| tls_error("ca_file", ca_file, e))?;
        roots
            .add(cert)
            .map_err(|e| tls_error("ca_file", ca_file, e))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls_error("ca_file", ca_file, e))
}
