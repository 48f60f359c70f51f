//! An in-process server over opened stores, for the benches that measure a
//! backend (`#[path]`-included: benches share no crate of their own).

use std::time::Duration;

use tokio::sync::oneshot;

use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::server::access::AccessLogSink;
use compactd::settings::Settings;
use compactd::store::backend::{self, ArtifactsSettings, Backend, Local, PlansSettings};
use compactd_testkit::moto::{credentials, Moto, REGION};

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

/// moto, its S3 client and the ARN of a new KMS key.
pub async fn moto_with_key() -> (Moto, aws_sdk_s3::Client, String) {
    let moto = tokio::task::spawn_blocking(Moto::start)
        .await
        .expect("moto");
    let (s3, kms) = moto.clients().await;
    let key = kms
        .create_key()
        .send()
        .await
        .expect("key")
        .key_metadata
        .and_then(|m| m.arn)
        .expect("arn");
    (moto, s3, key)
}

/// A new `bucket` on moto, and settings that keep everything in it, sealed
/// under `key`.
pub async fn on_bucket(
    moto: &Moto,
    s3: &aws_sdk_s3::Client,
    key: &str,
    bucket: &str,
) -> ArtifactsSettings {
    s3.create_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("bucket");
    let mut artifacts = ArtifactsSettings {
        backend: Backend::S3,
        ..Default::default()
    };
    artifacts.s3.bucket = bucket.into();
    artifacts.s3.region = Some(REGION.into());
    artifacts.s3.endpoint_url = Some(moto.endpoint());
    artifacts.kms.key_id = Some(key.into());
    artifacts.kms.endpoint_url = Some(moto.endpoint());
    artifacts
}

/// The `p` quantile of `v` (sorted in place).
pub fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Runs `bench` on a multi-threaded runtime; `--bench` asks for the full
/// run, anything else for a smoke test.
pub fn main<F: std::future::Future>(bench: impl FnOnce(bool) -> F) -> F::Output {
    let full = std::env::args().any(|a| a == "--bench");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(bench(full))
}
