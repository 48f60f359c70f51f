//! The gRPC service: tonic handlers, interceptors, limits, error mapping.
//!
//! Request path of API calls, outermost first: authentication ([`auth`]) →
//! admission (the server-wide cap, then per-tenant limits) and the call
//! deadline ([`limits`]) → `CompactionService` ([`service`]); health checks
//! and reflection are routed around all of it. Handlers authorize, convert
//! ([`crate::proto`]), call one use case ([`crate::app`]) and map errors in
//! one place ([`error`]).

pub mod access;
pub mod auth;
pub mod error;
pub mod limits;
pub mod service;
pub mod tls;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tonic::transport::Server;

use crate::reduce::Policy;
use crate::security::{AuthConfig, AuthConfigError, Authenticator};
use crate::store::backend::Stores;
use crate::store::{ArtifactStore, PlanStore, StoreError};

pub use error::ApiError;
pub use service::{CompactionApi, SERVICE_NAME};

use crate::app::{App, Defaults, Lifecycle};
use crate::proto::pb;

/// Everything the service needs to run. Plain data, so the config file can
/// embed it; every field has a default that works for a local start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on. Non-loopback addresses require authentication.
    pub listen: SocketAddr,
    /// Directory of the embedded plan and artifact stores.
    pub data_dir: PathBuf,
    /// The local keyring that encrypts artifacts; `None`:
    /// `{data_dir}/keys/keyring.json`. Put it outside `data_dir` (another
    /// volume, a mounted Secret) so a copy of the data is not a copy of the key.
    pub keyring_file: Option<PathBuf>,
    /// Where artifacts are stored and which key service wraps their keys
    /// (filesystem + local keyring by default; S3 and KMS).
    pub artifacts: crate::store::backend::ArtifactsSettings,
    /// Where plans are stored (by default wherever artifacts are).
    pub plans: crate::store::backend::PlansSettings,
    /// Render injects public and internal artifacts the agent names in its
    /// latest turn, within these limits.
    pub auto_rehydrate: crate::render::AutoRehydrate,
    /// Largest request message accepted, in bytes (after decompression).
    pub max_message_bytes: usize,
    /// Deadline of one call on the server, in milliseconds (0: none).
    pub request_timeout_ms: u64,
    /// Calls in flight per tenant (0: unlimited).
    pub per_tenant_concurrency: u32,
    /// Sustained calls per second per tenant (0: unlimited).
    pub per_tenant_rps: f64,
    /// Calls a tenant may make in a burst.
    pub per_tenant_burst: u32,
    /// Sustained request bytes per second per tenant (0: unlimited).
    pub per_tenant_bytes_per_second: f64,
    /// Request bytes a tenant may send in a burst (a request larger than
    /// this passes a full bucket, charged as the whole burst).
    pub per_tenant_bytes_burst: u64,
    /// Sustained thread messages per second per tenant (0: unlimited).
    pub per_tenant_messages_per_second: f64,
    /// Thread messages a tenant may send in a burst.
    pub per_tenant_messages_burst: u64,
    /// API calls in flight for the whole server; beyond it calls are shed
    /// with RESOURCE_EXHAUSTED instead of queueing. Health checks and
    /// reflection are never counted or shed.
    pub global_concurrency: usize,
    /// How often the plan store is probed for the health status, in ms.
    pub health_probe_interval_ms: u64,
    /// A second, plaintext listener that serves only `grpc.health.v1`
    /// (no auth, no TLS), for probes that cannot speak TLS, such as
    /// kubelet's native gRPC probes. `None`: health is on `listen` only.
    pub health_listen: Option<SocketAddr>,
    /// Threads of the compute pool that runs compactions (0: one per core).
    pub compute_threads: usize,
    /// How much lower the compute threads' OS priority is (Linux nice
    /// increment; 0: the same as request handling). Compactions of huge
    /// threads then yield the cores to other tenants' per-turn calls.
    pub compute_nice: i32,
    /// Entries of the process-wide token ledger.
    pub ledger_max_entries: usize,
    /// HTTP/2 initial stream window, bytes (large requests are the norm).
    pub http2_stream_window_bytes: u32,
    /// HTTP/2 initial connection window, bytes.
    pub http2_connection_window_bytes: u32,
    /// Model used when a request names none (tokenizer and payload `model`).
    pub default_model: String,
    /// Input limit used when a request gives none.
    pub default_max_input_tokens: u32,
    /// No request's policy can lower `safety_buffer_tokens` below this: the
    /// buffer absorbs what a count may miss, above all for models whose
    /// tokenizer is estimated.
    pub min_safety_buffer_tokens: u32,
    /// The compaction policy; requests may override parts of it.
    pub policy: Policy,
    /// Artifact retention, the sweeper and per-tenant quotas.
    pub lifecycle: Lifecycle,
    /// Secrets redacted from everything compactd keeps (artifacts, summaries).
    pub redaction: crate::redact::RedactionConfig,
    /// Where the per-call access log goes (JSON lines; no content).
    pub access_log: access::AccessLogSink,
    /// Authentication.
    pub auth: AuthConfig,
    /// Server TLS (certificate and key files, reloaded when they change).
    /// `auth.mtls` brings its own files and is not combined with this.
    pub tls: Option<tls::TlsSettings>,
    /// TLS is terminated in front of the service (a mesh sidecar or load
    /// balancer on the same host or network): allow JWT and API-key callers
    /// on a non-loopback plaintext listener. Off by default, because bearer
    /// secrets would otherwise cross the network in cleartext.
    pub allow_plaintext_behind_tls_terminator: bool,
    /// Who writes summaries: the built-in extractive summarizer, or an
    /// OpenAI-compatible endpoint with the extractive one as its fallback.
    pub summarizer: crate::llm::SummarizerSettings,
    /// Strategy plugins loaded at start-up.
    pub plugins: crate::plugin::PluginsSettings,
    /// Trace export (OTLP/gRPC) and how tenants appear in it.
    pub telemetry: crate::telemetry::TelemetrySettings,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let app = Defaults::default();
        ServerSettings {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50051),
            data_dir: PathBuf::from("compactd-data"),
            keyring_file: None,
            artifacts: Default::default(),
            plans: Default::default(),
            auto_rehydrate: Default::default(),
            max_message_bytes: 64 * 1024 * 1024,
            request_timeout_ms: 30_000,
            per_tenant_concurrency: 64,
            per_tenant_rps: 500.0,
            per_tenant_burst: 1000,
            per_tenant_bytes_per_second: 64.0 * 1024.0 * 1024.0,
            per_tenant_bytes_burst: 256 * 1024 * 1024,
            per_tenant_messages_per_second: 200_000.0,
            per_tenant_messages_burst: 1_000_000,
            global_concurrency: 1024,
            health_probe_interval_ms: 1000,
            health_listen: None,
            compute_threads: 0,
            compute_nice: 10,
            ledger_max_entries: crate::tokens::DEFAULT_MAX_ENTRIES,
            http2_stream_window_bytes: crate::client::STREAM_WINDOW_BYTES,
            http2_connection_window_bytes: crate::client::CONNECTION_WINDOW_BYTES,
            default_model: app.model,
            default_max_input_tokens: app.max_input_tokens,
            min_safety_buffer_tokens: app.min_safety_buffer_tokens,
            policy: app.policy,
            lifecycle: Lifecycle::default(),
            redaction: crate::redact::RedactionConfig::default(),
            access_log: access::AccessLogSink::default(),
            auth: AuthConfig::default(),
            tls: None,
            allow_plaintext_behind_tls_terminator: false,
            summarizer: crate::llm::SummarizerSettings::default(),
            plugins: crate::plugin::PluginsSettings::default(),
            telemetry: crate::telemetry::TelemetrySettings::default(),
        }
    }
}

impl ServerSettings {
    /// What the use cases fall back on when a request leaves it out.
    pub fn app_defaults(&self) -> Defaults {
        Defaults {
            policy: self.policy.clone(),
            model: self.default_model.clone(),
            max_input_tokens: self.default_max_input_tokens,
            min_safety_buffer_tokens: self.min_safety_buffer_tokens,
            auto_rehydrate: self.auto_rehydrate,
        }
    }
}

impl ServerSettings {
    /// The admission limits.
    pub fn tenant_limits(&self) -> limits::TenantLimits {
        limits::TenantLimits {
            global_concurrency: self.global_concurrency,
            concurrency: self.per_tenant_concurrency,
            rps: self.per_tenant_rps,
            burst: self.per_tenant_burst,
            bytes_per_second: self.per_tenant_bytes_per_second,
            bytes_burst: self.per_tenant_bytes_burst,
            messages_per_second: self.per_tenant_messages_per_second,
            messages_burst: self.per_tenant_messages_burst,
        }
    }

    /// The call deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// Why the server did not start (or stopped with an error).
#[derive(Debug, Error)]
pub enum ServeError {
    /// Dev mode accepts every caller as tenant `dev`: loopback only.
    #[error("dev mode (--dev or auth.dev) is only allowed on a loopback address, not {0}")]
    DevModeNotLoopback(SocketAddr),
    /// No credential method is configured and dev mode was not asked for.
    #[error(
        "refusing to serve on {0} without authentication: configure auth.jwt, auth.api_keys or auth.mtls \
         (see README, \"Security model\"), or pass --dev (or set auth.dev: true) for a development \
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

/// What start-up checks produced: the authenticator and the TLS listener,
/// built once (key files are read here).
#[derive(Debug)]
pub struct Startup {
    /// Verifies credentials.
    pub authenticator: Authenticator,
    /// The compiled redaction rules.
    pub redactor: crate::redact::Redactor,
    /// TLS for the listener, when configured.
    pub tls: Option<tls::TlsListener>,
}

/// Where the listener's key pair comes from: `tls`, or the files of
/// `auth.mtls` (which also verify client certificates); never both.
fn tls_source(settings: &ServerSettings) -> Result<Option<tls::TlsSource>, ServeError> {
    match (&settings.tls, &settings.auth.mtls) {
        (Some(_), Some(_)) => Err(ServeError::invalid(
            "tls",
            "auth.mtls already configures the server certificate; set it in one place",
        )),
        (Some(t), None) => Ok(Some(tls::TlsSource {
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
            client_ca_file: None,
            reload_interval: Duration::from_secs(t.reload_interval_seconds),
        })),
        (None, Some(m)) => Ok(Some(tls::TlsSource {
            cert_file: m.cert_file.clone(),
            key_file: m.key_file.clone(),
            client_ca_file: Some(m.ca_file.clone()),
            reload_interval: Duration::from_secs(30),
        })),
        (None, None) => Ok(None),
    }
}

/// Refuses configurations that would expose the service: no authentication
/// without an explicit dev mode, dev mode anywhere but loopback, bearer
/// secrets on a non-loopback plaintext listener. Also validates the policy,
/// the auth section and the TLS files.
pub fn check_startup(settings: &ServerSettings) -> Result<Startup, ServeError> {
    let invalid = |field: &str, message: &str| ServeError::invalid(field, message);
    settings
        .policy
        .validate()
        .map_err(|e| ServeError::invalid(e.field, e.reason))?;
    if settings.default_model.is_empty() {
        return Err(invalid("server.default_model", "must not be empty"));
    }
    settings
        .summarizer
        .validate()
        .map_err(|(field, why)| ServeError::invalid(&field, why))?;
    if settings.min_safety_buffer_tokens > settings.policy.safety_buffer_tokens {
        return Err(invalid(
            "server.min_safety_buffer_tokens",
            "must not exceed policy.safety_buffer_tokens",
        ));
    }
    if settings.default_max_input_tokens == 0 {
        return Err(invalid(
            "server.default_max_input_tokens",
            "must be at least 1",
        ));
    }
    if settings.max_message_bytes == 0 {
        return Err(invalid("server.max_message_bytes", "must be at least 1"));
    }
    if !(0..=19).contains(&settings.compute_nice) {
        return Err(invalid("compute_nice", "must be in 0..=19"));
    }
    if settings.global_concurrency == 0 {
        return Err(invalid("server.global_concurrency", "must be at least 1"));
    }
    for (field, rate) in [
        ("per_tenant_rps", settings.per_tenant_rps),
        (
            "per_tenant_bytes_per_second",
            settings.per_tenant_bytes_per_second,
        ),
        (
            "per_tenant_messages_per_second",
            settings.per_tenant_messages_per_second,
        ),
    ] {
        if !(rate >= 0.0 && rate.is_finite()) {
            return Err(invalid(field, "must be a finite number >= 0"));
        }
    }
    let auth = Authenticator::from_config(&settings.auth)?;
    let loopback = settings.listen.ip().is_loopback();
    if auth.is_dev() && !loopback {
        return Err(ServeError::DevModeNotLoopback(settings.listen));
    }
    if !auth.is_dev() && !auth.is_configured() {
        return Err(ServeError::NoAuthentication(settings.listen));
    }
    let tls = tls_source(settings)?
        .map(tls::TlsListener::new)
        .transpose()?;
    if tls.is_none()
        && !loopback
        && auth.accepts_bearer_secrets()
        && !settings.allow_plaintext_behind_tls_terminator
    {
        return Err(ServeError::PlaintextCredentials(settings.listen));
    }
    let redactor = crate::redact::Redactor::from_config(&settings.redaction)
        .map_err(|e| ServeError::invalid(e.field, e.message))?;
    Ok(Startup {
        authenticator: auth,
        tls,
        redactor,
    })
}

/// Checks the settings ([`check_startup`]), opens the embedded stores in
/// `settings.data_dir` (plans and artifacts share the
/// `tenants/{tenant}/threads/{thread}/` layout) and serves until `shutdown`
/// resolves; in-flight calls are drained before it returns.
pub async fn serve(
    settings: ServerSettings,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let startup = check_startup(&settings)?;
    serve_checked(settings, startup, listener, shutdown).await
}

/// [`serve`] with the start-up checks already done (the CLI runs them
/// before binding, so key files are read and rules compiled once).
pub async fn serve_checked(
    settings: ServerSettings,
    startup: Startup,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let stores = open_stores(&settings).await?;
    serve_opened(settings, startup, stores, listener, shutdown).await
}

/// Opens (and probes) the stores the settings name: a wrong bucket, key or
/// permission is reported here, before the service announces itself.
pub async fn open_stores(settings: &ServerSettings) -> Result<Stores, ServeError> {
    let stores = crate::store::backend::open(
        crate::store::backend::Local {
            data_dir: &settings.data_dir,
            keyring_file: settings.keyring_file.as_deref(),
        },
        &settings.artifacts,
        &settings.plans,
        None,
    )
    .await
    .map_err(ServeError::from_open)?;
    tracing::info!(stores = %stores.description, "stores opened");
    Ok(stores)
}

/// [`serve_checked`] over stores [`open_stores`] opened.
pub async fn serve_opened(
    settings: ServerSettings,
    startup: Startup,
    stores: Stores,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    run(
        settings,
        startup,
        stores.plans,
        stores.artifacts,
        listener,
        shutdown,
    )
    .await
}

/// [`serve`] with the stores supplied (shared backends, or fault injection in tests).
pub async fn serve_with_stores(
    settings: ServerSettings,
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let startup = check_startup(&settings)?;
    run(settings, startup, plans, artifacts, listener, shutdown).await
}

async fn run(
    settings: ServerSettings,
    startup: Startup,
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let Startup {
        authenticator,
        tls,
        redactor,
    } = startup;
    let authenticator = Arc::new(authenticator);
    if authenticator.is_dev() {
        tracing::warn!(
            listen = %settings.listen,
            "DEV MODE: requests without credentials are accepted as tenant `dev` with every permission; never use this outside a workstation"
        );
    }

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;
    // Health alone on its own plaintext port: it reveals only whether the
    // service can serve, so it needs neither credentials nor TLS.
    let health_only = match settings.health_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| ServeError::invalid("health_listen", e))?;
            tracing::info!(health_listen = ?listener.local_addr().ok(), "serving grpc.health.v1");
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let router = Server::builder().add_service(health_service.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = router.serve_with_incoming(incoming).await {
                    tracing::error!(error = %e, "the health listener stopped; probes will fail");
                }
            }))
        }
        None => None,
    };

    let probe = tokio::spawn(probe_health(
        Arc::clone(&plans),
        health,
        Duration::from_millis(settings.health_probe_interval_ms.max(10)),
    ));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(|e| ServeError::invalid("proto", e))?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(|e| ServeError::invalid("proto", e))?;

    // Build the default model's tokenizer tables (tens of ms) before the
    // first call needs them, off the async workers.
    let model = settings.default_model.clone();
    tokio::task::spawn_blocking(move || crate::tokens::counter_for_model(&model).count("warm"));

    // First use wins: in a process that serves once (the binary) these
    // settings apply; tests and benches share one pool.
    crate::runtime::configure_compute(crate::runtime::ComputeSettings {
        threads: settings.compute_threads,
        nice: settings.compute_nice,
    });
    let llm = match settings.summarizer.kind {
        crate::llm::SummarizerKind::Extractive => None,
        crate::llm::SummarizerKind::Llm => Some(crate::app::LlmSummaries::new(
            crate::llm::LlmSummarizer::new(settings.summarizer.clone())
                .map_err(|e| ServeError::invalid("summarizer", e))?,
        )),
    };
    // A plugin that does not load (hash, ABI, create) stops start-up.
    let plugins = crate::plugin::load_all(&settings.plugins)
        .map_err(|e| ServeError::invalid("plugins", e))?;
    let app = App::new(
        settings.app_defaults(),
        plans,
        artifacts,
        settings.ledger_max_entries,
        settings.lifecycle.clone(),
        Arc::new(redactor),
        crate::app::Extensions { llm, plugins },
    );
    let sweeper = tokio::spawn(app.clone().run_sweeper());
    let limiter = Arc::new(limits::TenantLimiter::new(settings.tenant_limits()));
    let access = Arc::new(
        access::AccessLog::open(&settings.access_log)
            .map_err(|e| ServeError::invalid("access_log", e))?,
    );
    let api = CompactionApi::new(app.clone(), Arc::clone(&limiter), Arc::clone(&access));
    let api = pb::compaction_service_server::CompactionServiceServer::new(api)
        .max_decoding_message_size(settings.max_message_bytes);
    // Authentication, admission and the deadline wrap the API only: health
    // checks and reflection are never authenticated, counted or shed.
    let api = Api(tower::ServiceBuilder::new()
        .layer(auth::AuthLayer::new(authenticator, Arc::clone(&access)))
        .layer(limits::TenantLimitLayer::new(limiter, access))
        .layer(limits::DeadlineLayer::new(settings.request_timeout()))
        .service(api));

    let router = Server::builder()
        .initial_stream_window_size(settings.http2_stream_window_bytes)
        .initial_connection_window_size(settings.http2_connection_window_bytes)
        .tcp_nodelay(true)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(api);
    tracing::info!(listen = ?listener.local_addr().ok(), tls = tls.is_some(), "compactd serving");
    // tonic ignores `Server::tcp_nodelay` for a caller-supplied listener;
    // without it a lone call waits ~40 ms on the peer's delayed ACK.
    let tcp = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let result = match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(tls.incoming(tcp), shutdown)
                .await
        }
        None => router.serve_with_incoming_shutdown(tcp, shutdown).await,
    };
    probe.abort();
    sweeper.abort();
    if let Some(h) = health_only {
        h.abort();
    }
    // Background summaries still running get a bounded time to commit.
    if !app
        .drain_summaries(std::time::Duration::from_secs(10))
        .await
    {
        tracing::warn!("background summaries still running at shutdown were abandoned");
    }
    result.map_err(ServeError::from)
}

/// The layered API under the generated service's name, so the router
/// dispatches to it like to any generated service.
#[derive(Debug, Clone)]
struct Api<S>(S);

impl<S> tonic::server::NamedService for Api<S> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<S, B> tower::Service<http::Request<B>> for Api<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.0.call(req)
    }
}

/// Flips the service's health to NOT_SERVING while the plan store fails its
/// probe, and back once it passes. The overall status ("") stays SERVING: the
/// process is alive, it just cannot serve compactions (readiness, not liveness).
async fn probe_health(
    plans: Arc<dyn PlanStore>,
    health: tonic_health::server::HealthReporter,
    every: Duration,
) {
    let mut serving = true;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let ok = match plans.health().await {
            Ok(()) => true,
            Err(e) => {
                if serving {
                    tracing::warn!(error = %e, "plan store health probe failed");
                }
                false
            }
        };
        if ok != serving {
            serving = ok;
            let status = if ok {
                tracing::info!("plan store healthy again");
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            health.set_service_status(SERVICE_NAME, status).await;
        }
    }
}
