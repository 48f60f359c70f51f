//! `compactd serve`: the gRPC service.

use std::io::Write as _;
use std::path::PathBuf;

use compactd::config;

use super::Failure;

/// Arguments of `compactd serve` (also what a bare `compactd` runs).
#[derive(clap::Args, Default)]
pub struct ServeArgs {
    /// YAML config file; repeat it to merge several in order (later wins),
    /// e.g. settings from a ConfigMap and auth material from a Secret.
    #[arg(long, env = "COMPACTD_CONFIG", value_delimiter = ',')]
    config: Vec<PathBuf>,
    /// Listen address (overrides the config), e.g. 127.0.0.1:50051; port 0 picks a free port.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory of the embedded stores (overrides the config).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Development mode: no credentials, every caller is tenant `dev` with
    /// every permission. Loopback addresses only; same as `auth.dev: true`.
    #[arg(long)]
    dev: bool,
}

/// Serves until SIGTERM or Ctrl-C, then drains in-flight calls.
pub fn run(args: &ServeArgs) -> Result<String, Failure> {
    let mut settings =
        config::load_files(&args.config, std::env::vars()).map_err(Failure::bad_input)?;
    if let Some(l) = args.listen {
        settings.listen = l;
    }
    if let Some(d) = &args.data_dir {
        settings.data_dir = d.clone();
    }
    // Dev mode is only ever asked for, never inferred: a loopback listener
    // behind a local proxy or sidecar would otherwise serve everyone as `dev`.
    if args.dev {
        settings.auth.dev = true;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Failure::other)?;
    // Logs, and trace export when an endpoint is configured; the exporter's
    // channel lives on the runtime, which must be entered to build it.
    let telemetry = {
        let _entered = runtime.enter();
        compactd::telemetry::Telemetry::install(&settings.telemetry)
            .map_err(|e| Failure::bad_input(e.to_string()))?
    };
    if telemetry.exporting() {
        tracing::info!("exporting traces over OTLP/gRPC");
    }
    for d in &settings.deprecations {
        tracing::warn!(deprecation = %d, "config written in an older layout; `compactd config check` prints it in the current one");
    }
    // Once: key files are read, TLS set up and rules compiled here.
    let startup = settings
        .validate()
        .map_err(|e| Failure::bad_input(e.to_string()))?;
    let served = runtime.block_on(async move {
        let shutdown = shutdown_signal()
            .map_err(|e| Failure::other(format!("cannot install signal handlers: {e}")))?;
        // Stores before the listener: a bad bucket, key or permission
        // stops start-up before the address is announced.
        let stores = compactd::startup::open_stores(&settings)
            .await
            .map_err(|e| Failure::bad_input(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|e| Failure::other(format!("cannot listen on {}: {e}", settings.listen)))?;
        let addr = listener.local_addr().map_err(Failure::other)?;
        // Scripts and tests read this line to find a port chosen with `:0`.
        println!("compactd listening on {addr}");
        let _ = std::io::stdout().flush();
        compactd::startup::serve_opened(settings, startup, stores, listener, shutdown)
            .await
            .map_err(Failure::other)?;
        Ok(String::new())
    });
    // Flushed while the runtime (which drives the exporter's channel) runs.
    telemetry.shutdown();
    served
}

/// Resolves on SIGTERM or Ctrl-C; the server then drains in-flight calls.
/// The handlers are installed before the address is printed, so a signal
/// sent as soon as the server is announced is never the default "terminate".
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let ctrl_c = tokio::signal::ctrl_c();
    Ok(async move {
        #[cfg(unix)]
        let term = async move {
            term.recv().await;
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            () = term => {},
        }
        tracing::info!("shutdown requested; draining in-flight calls");
    })
}
