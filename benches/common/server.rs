//! An in-process server over opened stores, for the benches that measure a
//! backend (`#[path]`-included: benches share no crate of their own).

use tokio::sync::oneshot;

use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::server::access::AccessLogSink;
use compactd::settings::Settings;
use compactd::store::backend::{self, ArtifactsSettings, Local, PlansSettings};
use compactd_testkit::moto::credentials;

pub type Client = CompactionServiceClient<tonic::transport::Channel>;

/// A server in dev mode, without rate limits, with plans, artifacts and
/// sessions where `artifacts` says; it stops when the sender is dropped.
pub async fn start(
    artifacts: &ArtifactsSettings,
) -> (Client, oneshot::Sender<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stores = backend::open(
        Local {
            data_dir: &dir.path().join("data"),
            keyring_file: None,
        },
        artifacts,
        &PlansSettings::default(),
        Some(credentials()),
    )
    .await
    .expect("stores");
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().join("data"),
        access_log: AccessLogSink::Off,
        ..Settings::default()
    };
    settings.auth.dev = true;
    settings.per_tenant_rps = 0.0;
    settings.per_tenant_bytes_per_second = 0.0;
    settings.per_tenant_messages_per_second = 0.0;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(compactd::startup::serve_stores(
        settings,
        stores,
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let client = CompactionServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
        .max_decoding_message_size(256 * 1024 * 1024)
        .max_encoding_message_size(256 * 1024 * 1024);
    (client, stop, dir)
}
