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

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;

use crate::security;
use crate::security::tls::{load_key_pair, stamp, CurrentKey};
pub use crate::security::tls::{LoadedTls, TlsSettings, TlsSource};
use crate::settings::ServeError;

/// A client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
        Ok(Self::from_loaded(security::tls::load(source)?))
    }

    /// The listener over a configuration already loaded (and so checked).
    pub fn from_loaded(loaded: LoadedTls) -> Self {
        TlsListener {
            acceptor: tokio_rustls::TlsAcceptor::from(loaded.config),
            reloader: Reloader {
                stamp: loaded.stamp,
                source: loaded.source,
                current: loaded.current,
            },
        }
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
                    self.current.set(pair);
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
