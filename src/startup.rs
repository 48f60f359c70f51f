//! Start-up: from validated settings to a serving process. Opens the
//! stores, wires the use cases (summarizer, plugins, compute pool, sweeper)
//! and hands them to the gRPC edge (`server::run`); on shutdown,
//! gives background summaries a bounded time to commit.

use std::future::Future;
use std::sync::Arc;

use crate::app::App;
use crate::settings::Settings;
use crate::store::backend::Stores;
use crate::store::{ArtifactStore, PlanStore};

pub use crate::settings::{ServeError, Startup};

/// Checks the settings ([`Settings::validate`]), opens the embedded stores in
/// `settings.data_dir` (plans and artifacts share the
/// `tenants/{tenant}/threads/{thread}/` layout) and serves until `shutdown`
/// resolves; in-flight calls are drained before it returns.
pub async fn serve(
    settings: Settings,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let startup = settings.validate()?;
    serve_checked(settings, startup, listener, shutdown).await
}

/// [`serve`] with the start-up checks already done (the CLI runs them
/// before binding, so key files are read and rules compiled once).
pub async fn serve_checked(
    settings: Settings,
    startup: Startup,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let stores = open_stores(&settings).await?;
    serve_opened(settings, startup, stores, listener, shutdown).await
}

/// Opens (and probes) the stores the settings name: a wrong bucket, key or
/// permission is reported here, before the service announces itself.
pub async fn open_stores(settings: &Settings) -> Result<Stores, ServeError> {
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
    settings: Settings,
    startup: Startup,
    stores: Stores,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_with(
        settings,
        startup,
        stores.plans,
        stores.artifacts,
        Some(stores.threads),
        listener,
        shutdown,
    )
    .await
}

/// [`serve`] with the stores supplied (shared backends, or fault injection in tests).
pub async fn serve_with_stores(
    settings: Settings,
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let startup = settings.validate()?;
    // Append sessions in memory: these stores are the caller's.
    serve_with(
        settings, startup, plans, artifacts, None, listener, shutdown,
    )
    .await
}

/// [`serve`] over opened stores, sessions included (replicas sharing one
/// backend in tests).
pub async fn serve_stores(
    settings: Settings,
    stores: Stores,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let startup = settings.validate()?;
    serve_opened(settings, startup, stores, listener, shutdown).await
}

/// Wires the use cases over the stores and serves them until `shutdown`.
async fn serve_with(
    settings: Settings,
    startup: Startup,
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    threads: Option<Arc<crate::store::ThreadStore>>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let Startup {
        authenticator,
        tls,
        redactor,
    } = startup;
    for warning in settings.protection_warnings() {
        tracing::warn!(warning = %warning, "protection turned off");
    }
    if authenticator.is_dev() {
        tracing::warn!(
            listen = %settings.listen,
            "DEV MODE: requests without credentials are accepted as tenant `dev` with every permission; never use this outside a workstation"
        );
    }
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
    let app = assemble(&settings, redactor, Arc::clone(&plans), artifacts, threads)?;
    let sweeper = tokio::spawn(app.clone().run_sweeper());
    let edge = crate::server::Edge {
        authenticator: Arc::new(authenticator),
        tls: tls.map(crate::server::tls::TlsListener::from_loaded),
        app: app.clone(),
        plans,
    };
    let result = crate::server::run(edge_options(&settings), edge, listener, shutdown).await;
    sweeper.abort();
    // Background summaries still running get a bounded time to commit.
    if !app
        .drain_summaries(std::time::Duration::from_secs(10))
        .await
    {
        tracing::warn!("background summaries still running at shutdown were abandoned");
    }
    result
}

/// How the edge serves, as the settings say.
fn edge_options(settings: &Settings) -> crate::server::EdgeOptions {
    crate::server::EdgeOptions {
        health_listen: settings.health_listen,
        health_probe_interval: std::time::Duration::from_millis(
            settings.health_probe_interval_ms.max(10),
        ),
        limits: settings.tenant_limits(),
        access_log: settings.access_log.clone(),
        max_message_bytes: settings.max_message_bytes,
        request_timeout: settings.request_timeout(),
        http2_stream_window_bytes: settings.http2_stream_window_bytes,
        http2_connection_window_bytes: settings.http2_connection_window_bytes,
    }
}

/// The use cases over the stores, with the summarizer and the plugins the
/// settings name; a plugin that does not load (hash, ABI, create) stops
/// start-up.
fn assemble(
    settings: &Settings,
    redactor: crate::redact::Redactor,
    plans: Arc<dyn PlanStore>,
    artifacts: Arc<dyn ArtifactStore>,
    threads: Option<Arc<crate::store::ThreadStore>>,
) -> Result<App, ServeError> {
    let llm = match settings.summarizer.kind {
        crate::llm::SummarizerKind::Extractive => None,
        crate::llm::SummarizerKind::Llm => Some(crate::app::LlmSummaries::new(
            crate::llm::LlmSummarizer::new(settings.summarizer.clone())
                .map_err(|e| ServeError::invalid("summarizer", e))?,
        )),
    };
    let plugins = crate::plugin::load_all(&settings.plugins)
        .map_err(|e| ServeError::invalid("plugins", e))?;
    Ok(App::new(
        settings.app_defaults(),
        plans,
        artifacts,
        settings.ledger_max_entries,
        settings.lifecycle.clone(),
        Arc::new(redactor),
        crate::app::Extensions {
            llm,
            plugins,
            threads,
        },
    ))
}
