//! The gRPC service: tonic handlers, interceptors, limits, error mapping.
//!
//! Request path, outermost first: load shedding over a global concurrency
//! limit → authentication ([`auth`]) → per-tenant limits and the call deadline
//! ([`limits`]) → routing to `CompactionService` ([`service`]), health or
//! reflection. Handlers authorize, convert ([`crate::proto`]), call one use
//! case ([`crate::app`]) and map errors in one place ([`error`]).

pub mod auth;
pub mod error;
pub mod limits;
pub mod service;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::load_shed::LoadShedLayer;

use crate::reduce::Policy;
use crate::security::{AuthConfig, AuthConfigError, Authenticator};
use crate::store::{ArtifactStore, FsArtifactStore, FsPlanStore, PlanStore, StoreError};

pub use error::ApiError;
pub use service::{CompactionApi, SERVICE_NAME};

use crate::app::{App, Defaults};
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
    /// Calls in flight for the whole server; beyond it calls are shed with
    /// RESOURCE_EXHAUSTED instead of queueing.
    pub global_concurrency: usize,
    /// How often the plan store is probed for the health status, in ms.
    pub health_probe_interval_ms: u64,
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
    /// Authentication.
    pub auth: AuthConfig,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let app = Defaults::default();
        ServerSettings {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50051),
            data_dir: PathBuf::from("compactd-data"),
            max_message_bytes: 64 * 1024 * 1024,
            request_timeout_ms: 30_000,
            per_tenant_concurrency: 64,
            per_tenant_rps: 500.0,
            per_tenant_burst: 1000,
            global_concurrency: 1024,
            health_probe_interval_ms: 1000,
            ledger_max_entries: crate::tokens::DEFAULT_MAX_ENTRIES,
            http2_stream_window_bytes: crate::client::STREAM_WINDOW_BYTES,
            http2_connection_window_bytes: crate::client::CONNECTION_WINDOW_BYTES,
            default_model: app.model,
            default_max_input_tokens: app.max_input_tokens,
            min_safety_buffer_tokens: app.min_safety_buffer_tokens,
            policy: app.policy,
            auth: AuthConfig::default(),
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
        }
    }
}

impl ServerSettings {
    /// The call deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// Why the server did not start (or stopped with an error).
#[derive(Debug, Error)]
pub enum ServeError {
    /// Dev mode accepts every caller as tenant `dev`: loopback only.
    #[error("auth.dev is only allowed on a loopback address, not {0}")]
    DevModeNotLoopback(SocketAddr),
    /// Anyone could call the service.
    #[error(
        "refusing to serve on {0} without authentication: configure auth.jwt, auth.api_keys or auth.mtls, or listen on 127.0.0.1"
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

/// Refuses configurations that would expose the service: a non-loopback
/// address without authentication, or dev mode anywhere but loopback.
/// Also validates the policy and the auth section, and returns the
/// authenticator it built (key files are read once).
pub fn check_startup(settings: &ServerSettings) -> Result<Authenticator, ServeError> {
    let invalid = |field: &str, message: &str| ServeError::Invalid {
        field: field.into(),
        message: message.into(),
    };
    settings
        .policy
        .validate()
        .map_err(|e| ServeError::Invalid {
            field: e.field,
            message: e.reason,
        })?;
    if settings.default_model.is_empty() {
        return Err(invalid("server.default_model", "must not be empty"));
    }
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
    if settings.global_concurrency == 0 {
        return Err(invalid("server.global_concurrency", "must be at least 1"));
    }
    if !(settings.per_tenant_rps >= 0.0 && settings.per_tenant_rps.is_finite()) {
        return Err(invalid(
            "server.per_tenant_rps",
            "must be a finite number >= 0",
        ));
    }
    let auth = Authenticator::from_config(&settings.auth)?;
    let loopback = settings.listen.ip().is_loopback();
    if auth.is_dev() && !loopback {
        return Err(ServeError::DevModeNotLoopback(settings.listen));
    }
    if !loopback && !auth.is_configured() {
        return Err(ServeError::NoAuthentication(settings.listen));
    }
    Ok(auth)
}

/// Opens the embedded stores in `settings.data_dir` (plans and artifacts
/// share the `tenants/{tenant}/threads/{thread}/` layout) and serves until
/// `shutdown` resolves; in-flight calls are drained before it returns.
pub async fn serve(
    settings: ServerSettings,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let plans = FsPlanStore::open(&settings.data_dir)?;
    let artifacts = FsArtifactStore::open(&settings.data_dir)?;
    serve_with_stores(
        settings,
        Arc::new(plans),
        Arc::new(artifacts),
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
    let authenticator = Arc::new(check_startup(&settings)?);
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
    let probe = tokio::spawn(probe_health(
        Arc::clone(&plans),
        health,
        Duration::from_millis(settings.health_probe_interval_ms.max(10)),
    ));

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Invalid {
            field: "proto".into(),
            message: e.to_string(),
        })?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Invalid {
            field: "proto".into(),
            message: e.to_string(),
        })?;

    // Build the default model's tokenizer tables (tens of ms) before the
    // first call needs them, off the async workers.
    let model = settings.default_model.clone();
    tokio::task::spawn_blocking(move || crate::tokens::counter_for_model(&model).count("warm"));

    let app = App::new(
        settings.app_defaults(),
        plans,
        artifacts,
        settings.ledger_max_entries,
    );
    let api = CompactionApi::new(app);
    let api = pb::compaction_service_server::CompactionServiceServer::new(api)
        .max_decoding_message_size(settings.max_message_bytes);

    let limiter = Arc::new(limits::TenantLimiter::new(limits::TenantLimits {
        concurrency: settings.per_tenant_concurrency,
        rps: settings.per_tenant_rps,
        burst: settings.per_tenant_burst,
    }));
    let layers = tower::ServiceBuilder::new()
        .layer(LoadShedLayer::new())
        .layer(GlobalConcurrencyLimitLayer::new(
            settings.global_concurrency,
        ))
        .layer(auth::AuthLayer::new(authenticator))
        .layer(limits::TenantLimitLayer::new(limiter))
        .layer(limits::DeadlineLayer::new(settings.request_timeout()))
        .into_inner();

    let mut builder = Server::builder()
        .initial_stream_window_size(settings.http2_stream_window_bytes)
        .initial_connection_window_size(settings.http2_connection_window_bytes)
        .tcp_nodelay(true);
    if let Some(m) = &settings.auth.mtls {
        builder = builder.tls_config(tls_config(m)?)?;
    }
    tracing::info!(listen = ?listener.local_addr().ok(), "compactd serving");
    let result = builder
        .layer(layers)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(api)
        // tonic ignores `Server::tcp_nodelay` for a caller-supplied listener;
        // without it a lone call waits ~40 ms on the peer's delayed ACK.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await;
    probe.abort();
    result.map_err(ServeError::from)
}

fn tls_config(m: &crate::security::MtlsConfig) -> Result<ServerTlsConfig, ServeError> {
    let read = |p: &PathBuf, field: &str| {
        std::fs::read(p).map_err(|e| ServeError::Tls(format!("auth.mtls.{field}: {e}")))
    };
    let cert = read(&m.cert_file, "cert_file")?;
    let key = read(&m.key_file, "key_file")?;
    let ca = read(&m.ca_file, "ca_file")?;
    // A client certificate is verified when presented but not required, so
    // JWT and API-key callers can use the same TLS listener; a call with
    // neither a certificate nor another credential still fails authentication.
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(ca))
        .client_auth_optional(true))
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
