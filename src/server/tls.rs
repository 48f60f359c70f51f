//! The TLS listener: rustls over the TCP listener, with the server
//! certificate reloaded without a restart.
//!
//! tonic's own TLS takes a fixed certificate at start-up; certificates in
//! production rotate (cert-manager renews every few weeks), so the handshake
//! is done here instead, against a certificate resolver whose key pair is
//! swapped when the files change (checked every `reload_interval_seconds`)
//! or on SIGHUP. A reload that fails (half-written files, a key that does not
//! match the certificate) keeps serving the previous pair and logs why.
//!
//! Handshakes run one task per connection, so a slow or stalled client
//! cannot hold up accepting others; they time out after
//! [`HANDSHAKE_TIMEOUT`]. tonic reads the client's certificate chain from the
//! resulting stream, exactly as with its own TLS.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;

use crate::startup::ServeError;

/// A client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

fn tls_error(field: &str, path: &Path, what: impl std::fmt::Display) -> ServeError {
    ServeError::Tls(format!("{field} ({}): {what}", path.display()))
}

/// Reads and checks a key pair: the chain parses, the key parses and
/// belongs to the leaf certificate.
fn load_key_pair(source: &TlsSource) -> Result<Arc<CertifiedKey>, ServeError> {
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
struct CurrentKey(RwLock<Arc<CertifiedKey>>);

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

/// The TLS side of the listener: its rustls config and the key reloader.
pub struct TlsListener {
    acceptor: tokio_rustls::TlsAcceptor,
    reloader: Reloader,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("source", &self.reloader.source)
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// Loads the key pair and the client CA; every problem names the file.
    pub fn new(source: TlsSource) -> Result<Self, ServeError> {
        let pair = load_key_pair(&source)?;
        let current = Arc::new(CurrentKey(RwLock::new(pair)));
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ServeError::Tls(e.to_string()))?;
        let builder = match &source.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca_file) => {
                let pem = std::fs::read(ca_file)
                    .map_err(|e| tls_error("ca_file", ca_file, format!("cannot read: {e}")))?;
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| tls_error("ca_file", ca_file, e))?;
                    roots
                        .add(cert)
                        .map_err(|e| tls_error("ca_file", ca_file, e))?;
                }
                // Verified when presented, not required: JWT and API-key
                // callers share the listener; a call with no credential at
                // all still fails authentication.
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| tls_error("ca_file", ca_file, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(Arc::clone(&current) as _);
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsListener {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            reloader: Reloader {
                stamp: stamp(&source),
                source,
                current,
            },
        })
    }

    /// Accepted TCP connections → finished TLS handshakes. The accept loop
    /// and the reloader run as long as the returned stream lives.
    pub fn incoming(
        self,
        tcp: tonic::transport::server::TcpIncoming,
    ) -> impl tokio_stream::Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let acceptor = self.acceptor;
        let reload = AbortOnDrop(tokio::spawn(self.reloader.run()));
        let accept = AbortOnDrop(tokio::spawn(async move {
            let mut tcp = std::pin::pin!(tcp);
            while let Some(conn) = tcp.next().await {
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send(Ok(tls)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
        }));
        ReceiverStream::new(rx).map(move |conn| {
            // The guards live in the stream: when the server drops it at
            // shutdown, the accept loop (and the listener) and the reloader stop.
            let _ = (&reload, &accept);
            conn
        })
    }
}

/// Aborts a background task when its owner goes away.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Modification times of the key pair files, to notice a rotation.
fn stamp(source: &TlsSource) -> Option<(SystemTime, SystemTime)> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(&source.cert_file)?, m(&source.key_file)?))
}

struct Reloader {
    source: TlsSource,
    current: Arc<CurrentKey>,
    stamp: Option<(SystemTime, SystemTime)>,
}

impl Reloader {
    /// Reloads when the files change or on SIGHUP, until aborted.
    async fn run(mut self) {
        #[cfg(unix)]
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; certificates reload on file change only");
                None
            }
        };
        let mut tick =
            tokio::time::interval(self.source.reload_interval.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            #[cfg(unix)]
            let forced = {
                let hup_recv = async {
                    match hup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => false,
                    _ = hup_recv => true,
                }
            };
            #[cfg(not(unix))]
            let forced = {
                tick.tick().await;
                false
            };
            let now = stamp(&self.source);
            if !forced && now == self.stamp {
                continue;
            }
            let source = self.source.clone();
            match tokio::task::spawn_blocking(move || load_key_pair(&source)).await {
                Ok(Ok(pair)) => {
                    *self
                        .current
                        .0
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = pair;
                    self.stamp = now;
                    tracing::info!(cert_file = %self.source.cert_file.display(), "TLS certificate reloaded");
                }
                Ok(Err(e)) => {
                    // Retried on the next change or tick: files may be mid-rotation.
                    tracing::error!(error = %e, "TLS certificate reload failed; still serving the previous certificate");
                }
                Err(e) => tracing::error!(error = %e, "TLS certificate reload task failed"),
            }
        }
    }
}
