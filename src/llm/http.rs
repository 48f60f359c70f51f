//! One POST to an OpenAI-compatible endpoint: hyper's pooled client over
//! rustls (ring, the system's roots), a per-attempt timeout, the key read
//! from the environment or a mounted file at call time (so a rotated secret
//! is picked up without a restart) and never logged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::LlmError;

/// Largest response body read, in bytes: a summary is a few KiB.
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Where the API key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// No `Authorization` header (local endpoints).
    None,
    /// An environment variable.
    Env(String),
    /// A file (a mounted Kubernetes Secret); surrounding whitespace ignored.
    File(PathBuf),
}

impl KeySource {
    /// The key now, or why there is none.
    async fn read(&self) -> Result<Option<String>, LlmError> {
        let key = match self {
            KeySource::None => return Ok(None),
            KeySource::Env(var) => std::env::var(var)
                .map_err(|_| LlmError::Config(format!("the API key variable {var} is not set")))?,
            KeySource::File(path) => tokio::fs::read_to_string(path).await.map_err(|e| {
                LlmError::Config(format!(
                    "cannot read the API key file {}: {e}",
                    path.display()
                ))
            })?,
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(LlmError::Config("the API key is empty".into()));
        }
        Ok(Some(key.to_string()))
    }
}

/// A Chat Completions endpoint.
#[derive(Clone)]
pub struct Endpoint {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: Uri,
    key: Arc<KeySource>,
    timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A reply: status, `Retry-After` when given, body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Seconds the server asked to wait before retrying.
    pub retry_after: Option<Duration>,
    /// The body, at most [`MAX_RESPONSE_BYTES`].
    pub body: Bytes,
}

impl Endpoint {
    /// `{base_url}/chat/completions`. `https` needs the system's roots.
    pub fn new(base_url: &str, key: KeySource, timeout: Duration) -> Result<Self, LlmError> {
        let url: Uri = format!("{}/chat/completions", base_url.trim_end_matches('/'))
            .parse()
            .map_err(|e| LlmError::Config(format!("base_url: {e}")))?;
        let mut roots = rustls::RootCertStore::empty();
        if url.scheme_str() == Some("https") {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A malformed system certificate is skipped, not fatal.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(LlmError::Config(
                    "no system root certificates found for an https base_url".into(),
                ));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| LlmError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Endpoint {
            client,
            url,
            key: Arc::new(key),
            timeout,
        })
    }

    /// The URL requests go to.
    pub fn url(&self) -> &Uri {
        &self.url
    }

    /// POSTs `body` (JSON) once; a timeout or transport failure is an error,
    /// any HTTP status a reply.
    pub async fn post(&self, body: Vec<u8>) -> Result<Reply, LlmError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json");
        if let Some(key) = self.key.read().await? {
            req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| LlmError::Config(format!("request: {e}")))?;
        let call = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| LlmError::Transport(e.to_string()))?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| LlmError::Transport(format!("reading the response: {e}")))?
                .to_bytes();
            Ok(Reply {
                status,
                retry_after,
                body,
            })
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| LlmError::Timeout)?
    }
}
