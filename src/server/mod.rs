//! The gRPC edge: tonic handlers, interceptors, limits, error mapping.
//! It takes its own options ([`EdgeOptions`]); settings live in
//! [`crate::settings`], the wiring of stores, keyring, plugins and
//! telemetry in [`crate::startup`].
//!
//! Request path of API calls, outermost first: authentication ([`auth`]) →
//! admission (the server-wide cap, then per-tenant limits) and the call
//! deadline ([`limits`]) → `CompactionService` ([`service`]); health checks
//! and reflection are routed around all of it. Handlers authorize, convert
//! ([`crate::proto`]), call one use case ([`crate::app`]) and map errors in
//! one place ([`error`]).

pub mod access;
pub mod auth;
pub mod convert;
pub mod error;
pub mod limits;
pub mod service;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Server;

use crate::app::App;
use crate::proto::pb;
use crate::security::Authenticator;
use crate::settings::ServeError;
use crate::store::PlanStore;

pub use error::ApiError;
pub use service::{CompactionApi, SERVICE_NAME};

/// What the edge serves: the use cases, who may call them, and how.
pub(crate) struct Edge {
    pub authenticator: Arc<Authenticator>,
    pub tls: Option<tls::TlsListener>,
    pub app: App,
    /// Probed for the health status.
    pub plans: Arc<dyn PlanStore>,
}

/// How the edge serves: its own options, which start-up fills from the
/// settings.
#[derive(Debug, Clone)]
pub(crate) struct EdgeOptions {
    /// Health alone, on a plaintext port of its own.
    pub health_listen: Option<SocketAddr>,
    /// How often the plan store is probed for the health status.
    pub health_probe_interval: Duration,
    /// Admission limits.
    pub limits: limits::TenantLimits,
    /// Where access lines go.
    pub access_log: access::AccessLogSink,
    /// Largest request accepted.
    pub max_message_bytes: usize,
    /// Deadline of a call.
    pub request_timeout: Duration,
    /// HTTP/2 flow-control window of a stream.
    pub http2_stream_window_bytes: u32,
    /// HTTP/2 flow-control window of a connection.
    pub http2_connection_window_bytes: u32,
}

/// Serves the API, health and reflection on `listener` (and health alone on
/// `options.health_listen`) until `shutdown`; in-flight calls are drained
/// before it returns.
pub(crate) async fn run(
    options: EdgeOptions,
    edge: Edge,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;
    let health_only = match options.health_listen {
        Some(addr) => Some(health_listener(addr, health_service.clone()).await?),
        None => None,
    };
    let probe = tokio::spawn(probe_health(
        edge.plans,
        health,
        options.health_probe_interval,
    ));
    let (reflection_v1, reflection_v1alpha) = reflection()?;
    let limiter = Arc::new(limits::TenantLimiter::new(options.limits));
    let access = Arc::new(
        access::AccessLog::open(&options.access_log)
            .map_err(|e| ServeError::invalid("access_log", e))?,
    );
    let api = CompactionApi::new(edge.app, Arc::clone(&limiter), Arc::clone(&access));
    let api = pb::compaction_service_server::CompactionServiceServer::new(api)
        .max_decoding_message_size(options.max_message_bytes);
    // Authentication, admission and the deadline wrap the API only: health
    // checks and reflection are never authenticated, counted or shed.
    let api = Api(tower::ServiceBuilder::new()
        .layer(auth::AuthLayer::new(
            edge.authenticator,
            Arc::clone(&access),
        ))
        .layer(limits::TenantLimitLayer::new(limiter, access))
        .layer(limits::DeadlineLayer::new(options.request_timeout))
        .service(api));
    let router = Server::builder()
        .initial_stream_window_size(options.http2_stream_window_bytes)
        .initial_connection_window_size(options.http2_connection_window_bytes)
        .tcp_nodelay(true)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(api);
    let tls = edge.tls;
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
    if let Some(h) = health_only {
        h.abort();
    }
    result.map_err(ServeError::from)
}

/// Health alone on its own plaintext port: it reveals only whether the
/// service can serve, so it needs neither credentials nor TLS.
async fn health_listener<S>(
    addr: SocketAddr,
    service: S,
) -> Result<tokio::task::JoinHandle<()>, ServeError>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::invalid("health_listen", e))?;
    tracing::info!(health_listen = ?listener.local_addr().ok(), "serving grpc.health.v1");
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let router = Server::builder().add_service(service);
    Ok(tokio::spawn(async move {
        if let Err(e) = router.serve_with_incoming(incoming).await {
            tracing::error!(error = %e, "the health listener stopped; probes will fail");
        }
    }))
}

/// Server reflection (v1 and v1alpha) over compactd's and health's protos.
fn reflection() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    ServeError,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = builder()
        .build_v1()
        .map_err(|e| ServeError::invalid("proto", e))?;
    let v1alpha = builder()
        .build_v1alpha()
        .map_err(|e| ServeError::invalid("proto", e))?;
    Ok((v1, v1alpha))
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
