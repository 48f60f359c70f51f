//! Operations: health follows the plan store, reflection lists the service,
//! start-up refuses unsafe exposure, limits and deadlines answer with the
//! right codes, and failed artifact writes never leave a committed plan
//! pointing at nothing.

use crate::server_common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use server_common::*;
use tokio_stream::StreamExt;
use tonic::Code;

use compactd::model::CompactionPlan;
use compactd::proto::pb;
use compactd::proto::status::{ErrorDescription, RETRY_AFTER_MS};
use compactd::security::AuthConfig;
use compactd::settings::Settings;
use compactd::startup::ServeError;
use compactd::store::{
    ArtifactStore, FsArtifactStore, FsPlanStore, PlanStore, StoreError, StoredPlan,
};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const SERVICE: &str = "compactd.v1.CompactionService";

/// kubelet's gRPC probes speak neither TLS nor credentials: `health_listen`
/// serves health alone, in plaintext, and nothing else.
#[tokio::test]
async fn health_listen_serves_health_only() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let server = TestServer::start_with(|s| s.health_listen = Some(port)).await;
    let channel = {
        let endpoint =
            tonic::transport::Endpoint::from_shared(format!("http://{port}")).expect("endpoint");
        let mut tries = 0;
        loop {
            match endpoint.connect().await {
                Ok(c) => break c,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("health listener never came up: {e}"),
            }
        }
    };
    let mut health = HealthClient::new(channel.clone());
    for service in ["", SERVICE] {
        let s = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("check")
            .into_inner();
        assert_eq!(s.status(), ServingStatus::Serving, "{service:?}");
    }
    // The API is not reachable through it, with or without a credential.
    let mut api = pb::compaction_service_client::CompactionServiceClient::new(channel);
    let err = api
        .compact(authed(
            compact_req(small_thread("t-hl"), 128_000),
            &token("acme", ALL),
        ))
        .await
        .expect_err("API on the health port");
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    // The main listener still serves health too.
    let mut main = HealthClient::new(server.channel().await);
    let s = main
        .check(HealthCheckRequest {
            service: SERVICE.into(),
        })
        .await
        .expect("check")
        .into_inner();
    assert_eq!(s.status(), ServingStatus::Serving);
}

#[tokio::test]
async fn health_follows_the_plan_store() {
    let server = TestServer::start().await;
    let mut health = HealthClient::new(server.channel().await);
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    // No credential needed.
    let s = health
        .check(check(SERVICE))
        .await
        .expect("check")
        .into_inner();
    assert_eq!(s.status(), ServingStatus::Serving);

    let mut watch = health
        .watch(check(SERVICE))
        .await
        .expect("watch")
        .into_inner();
    let first = within(watch.next()).await.expect("item").expect("status");
    assert_eq!(first.status(), ServingStatus::Serving);

    // Take the data directory away. Tests may run as root, where chmod does
    // not stop writes: a regular file in its place does.
    let aside = server.data_dir.with_extension("aside");
    std::fs::rename(&server.data_dir, &aside).expect("move data dir");
    std::fs::write(&server.data_dir, b"not a directory").expect("block data dir");
    let down = within(watch.next()).await.expect("item").expect("status");
    assert_eq!(down.status(), ServingStatus::NotServing);
    // The process itself stays alive (liveness), only the service is not ready.
    let overall = health.check(check("")).await.expect("check").into_inner();
    assert_eq!(overall.status(), ServingStatus::Serving);

    // Calls fail with UNAVAILABLE and leak no path.
    let mut client = server.client().await;
    let err = client
        .compact(authed(
            compact_req(small_thread("t-h"), 128_000),
            &token("acme", ALL),
        ))
        .await
        .expect_err("store down");
    assert_status(&err, Code::Unavailable, None);
    let shown = server.data_dir.display().to_string();
    assert!(!err.message().contains(&shown), "{err:?}");

    std::fs::remove_file(&server.data_dir).expect("unblock");
    std::fs::rename(&aside, &server.data_dir).expect("restore data dir");
    let up = within(watch.next()).await.expect("item").expect("status");
    assert_eq!(up.status(), ServingStatus::Serving);
    client
        .compact(authed(
            compact_req(small_thread("t-h"), 128_000),
            &token("acme", ALL),
        ))
        .await
        .expect("store back");
}

#[tokio::test]
async fn reflection_lists_the_service_in_v1_and_v1alpha() {
    use tonic_reflection::pb::{v1, v1alpha};
    let server = TestServer::start().await;

    let mut c = v1::server_reflection_client::ServerReflectionClient::new(server.channel().await);
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .expect("reflection v1")
        .into_inner();
    let resp = within(stream.next())
        .await
        .expect("item")
        .expect("response");
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("unexpected response {resp:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.iter().any(|n| n == SERVICE), "{names:?}");
    assert!(
        names.iter().any(|n| n == "grpc.health.v1.Health"),
        "{names:?}"
    );

    // The service's file resolves by symbol (what grpcurl does before a call).
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "compactd.v1.CompactRequest".into(),
            ),
        ),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .expect("reflection v1")
        .into_inner();
    let resp = within(stream.next())
        .await
        .expect("item")
        .expect("response");
    assert!(matches!(
        resp.message_response,
        Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(_))
    ));

    let mut c =
        v1alpha::server_reflection_client::ServerReflectionClient::new(server.channel().await);
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .expect("reflection v1alpha")
        .into_inner();
    let resp = within(stream.next())
        .await
        .expect("item")
        .expect("response");
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("unexpected response {resp:?}");
    };
    assert!(list.service.iter().any(|s| s.name == SERVICE));
}

#[tokio::test]
async fn startup_refuses_unsafe_exposure() {
    let public: std::net::SocketAddr = "0.0.0.0:50051".parse().expect("addr");
    let open = Settings {
        listen: public,
        ..Settings::default()
    };
    assert!(matches!(
        open.validate(),
        Err(ServeError::NoAuthentication(_))
    ));
    let dev_public = Settings {
        listen: public,
        auth: AuthConfig {
            dev: true,
            ..AuthConfig::default()
        },
        ..Settings::default()
    };
    assert!(matches!(
        dev_public.validate(),
        Err(ServeError::DevModeNotLoopback(_))
    ));
    let dev_local = Settings {
        auth: AuthConfig {
            dev: true,
            ..AuthConfig::default()
        },
        ..Settings::default()
    };
    dev_local.validate().expect("dev mode on loopback");
    let dir = tempfile::tempdir().expect("tempdir");
    let secured = Settings {
        listen: public,
        ..settings(dir.path())
    };
    // JWTs over plaintext on a public address: only when TLS ends in front.
    assert!(matches!(
        secured.validate(),
        Err(ServeError::PlaintextCredentials(_))
    ));
    let behind_terminator = Settings {
        allow_plaintext_behind_tls_terminator: true,
        ..secured
    };
    behind_terminator
        .validate()
        .expect("public address with JWT auth behind TLS");
    let mut bad_policy = Settings::default();
    bad_policy.policy.trigger_ratio = 2.0;
    match bad_policy.validate() {
        Err(ServeError::Invalid { field, .. }) => assert_eq!(field, "policy.trigger_ratio"),
        other => panic!("{other:?}"),
    }

    // `serve` applies the same check before accepting anything.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let err = compactd::startup::serve(
        Settings {
            data_dir: dir.path().join("data"),
            ..open
        },
        listener,
        std::future::pending(),
    )
    .await
    .expect_err("refused");
    assert!(err.to_string().contains("without authentication"), "{err}");
}

#[tokio::test]
async fn dev_mode_serves_tenant_dev_without_credentials() {
    let server = TestServer::start_with(|s| {
        s.auth = AuthConfig {
            dev: true,
            ..AuthConfig::default()
        }
    })
    .await;
    let mut client = server.client().await;
    let out = client
        .compact(tonic::Request::new(compact_req(
            small_thread("t-dev"),
            128_000,
        )))
        .await
        .expect("dev call")
        .into_inner();
    assert_eq!(out.version, 1);
    let mut req = compact_req(small_thread("t-dev"), 128_000);
    req.tenant_id = Some("dev".into());
    assert!(
        client
            .compact(tonic::Request::new(req))
            .await
            .expect("dev")
            .into_inner()
            .reused
    );
}

#[tokio::test]
async fn rate_limits_are_per_tenant_with_a_retry_hint() {
    let server = TestServer::start_with(|s| {
        s.per_tenant_rps = 0.5;
        s.per_tenant_burst = 2;
    })
    .await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    for _ in 0..2 {
        client
            .compact(authed(compact_req(small_thread("t-rl"), 128_000), &acme))
            .await
            .expect("within burst");
    }
    let err = client
        .compact(authed(compact_req(small_thread("t-rl"), 128_000), &acme))
        .await
        .expect_err("over the rate");
    assert_status(&err, Code::ResourceExhausted, None);
    let hint: u64 = err
        .metadata()
        .get(RETRY_AFTER_MS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("retry-after-ms");
    assert!(hint > 0 && hint <= 2000, "{hint}");
    let d = ErrorDescription::of(&err);
    assert_eq!(
        (
            d.reason.as_str(),
            d.retry_after.map(|a| a.as_millis() as u64)
        ),
        ("RATE_LIMITED", Some(hint))
    );
    // Another tenant has its own bucket; health is never limited.
    client
        .compact(authed(
            compact_req(small_thread("t-rl"), 128_000),
            &token("globex", ALL),
        ))
        .await
        .expect("other tenant");
}

#[tokio::test]
async fn slow_calls_hit_the_deadline() {
    let server = TestServer::start_with(|s| s.request_timeout_ms = 1).await;
    let mut client = server.client().await;
    let mut req = compact_req(big_thread("t-slow", 4000), 8000);
    req.policy = Some(externalize_policy());
    let err = client
        .compact(authed(req, &token("acme", ALL)))
        .await
        .expect_err("deadline");
    assert_status(&err, Code::DeadlineExceeded, None);
}

/// A plan store whose `get` parks until released, to hold a call in flight.
struct GatedPlans {
    inner: FsPlanStore,
    entered: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

#[async_trait]
impl PlanStore for GatedPlans {
    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        if thread_id == "gated" {
            self.entered.notify_one();
            let _permit = self.release.acquire().await;
        }
        self.inner.get(tenant, thread_id).await
    }
    async fn commit(
        &self,
        tenant: &str,
        thread_id: &str,
        plan: &CompactionPlan,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        self.inner
            .commit(tenant, thread_id, plan, expected_version)
            .await
    }
    async fn health(&self) -> Result<(), StoreError> {
        self.inner.health().await
    }
    async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        self.inner.delete(tenant, thread_id).await
    }
    async fn count(&self, tenant: &str) -> Result<u64, StoreError> {
        self.inner.count(tenant).await
    }
}

#[tokio::test]
async fn per_tenant_concurrency_is_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = Arc::new(GatedPlans {
        inner: FsPlanStore::open(dir.path()).expect("plans"),
        entered: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let artifacts = Arc::new(FsArtifactStore::open(dir.path()).expect("artifacts"));
    let server = TestServer::start_with_stores_and(
        Arc::clone(&plans) as Arc<dyn PlanStore>,
        artifacts,
        |s| s.per_tenant_concurrency = 1,
    )
    .await;
    let client = server.client().await;
    let acme = token("acme", ALL);

    let mut c1 = client.clone();
    let t1 = acme.clone();
    let first = tokio::spawn(async move {
        c1.compact(authed(compact_req(small_thread("gated"), 128_000), &t1))
            .await
    });
    within(plans.entered.notified()).await;

    let mut c2 = client.clone();
    let err = c2
        .compact(authed(compact_req(small_thread("other"), 128_000), &acme))
        .await
        .expect_err("second concurrent call of acme");
    assert_status(&err, Code::ResourceExhausted, None);
    assert_eq!(
        Some(ErrorDescription::of(&err).reason.as_str()),
        Some("OVERLOADED")
    );
    c2.compact(authed(
        compact_req(small_thread("other"), 128_000),
        &token("globex", ALL),
    ))
    .await
    .expect("globex is not limited by acme");

    plans.release.add_permits(1);
    within(first)
        .await
        .expect("task")
        .expect("first call completes");
    c2.compact(authed(compact_req(small_thread("other"), 128_000), &acme))
        .await
        .expect("slot free again");
}

/// Two huge tool outputs, so compaction writes two artifacts.
fn two_big_outputs(id: &str) -> pb::Thread {
    let mut t = big_thread(id, 1500);
    let at = 4;
    t.messages.insert(at, call("a1x", 1, "c2", "read_file"));
    t.messages
        .insert(at + 1, result("t2", 1, "c2", "read_file", big_output(1500)));
    t
}

#[tokio::test]
async fn a_failed_artifact_write_commits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The second write fails.
    let artifacts = Arc::new(HookedArtifacts::new(
        dir.path(),
        Box::new(|n| {
            Box::pin(async move {
                if n == 2 {
                    Err(StoreError::Unavailable("disk full at /secret/path".into()))
                } else {
                    Ok(())
                }
            })
        }),
    ));
    let plans = Arc::new(FsPlanStore::open(dir.path()).expect("plans"));
    let server =
        TestServer::start_with_stores(plans, Arc::clone(&artifacts) as Arc<dyn ArtifactStore>)
            .await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let mut req = compact_req(two_big_outputs("t-fail"), 8000);
    req.policy = Some(externalize_policy());
    let err = client
        .compact(authed(req.clone(), &tok))
        .await
        .expect_err("second write fails");
    assert_status(&err, Code::Unavailable, None);
    assert!(!err.message().contains("/secret/path"), "{err:?}");
    assert_eq!(artifacts.puts.load(Ordering::SeqCst), 2);
    assert_eq!(
        artifacts.deleted.load(Ordering::SeqCst),
        1,
        "first write undone"
    );
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(two_big_outputs("t-fail")),
                ..Default::default()
            },
            &tok,
        ))
        .await
        .expect_err("nothing committed");
    assert_status(&err, Code::NotFound, None);

    // The retry writes both and commits version 1.
    let out = client
        .compact(authed(req, &tok))
        .await
        .expect("retry")
        .into_inner();
    assert_eq!(out.version, 1);
    assert_eq!(out.new_artifact_ids.len(), 2);
}

/// `config check` refuses every configuration `serve` refuses from its
/// settings, with the same message and field path: the two run one check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_and_serve_refuse_the_same_configs() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    let plugins = plugin_dir.display();
    let zeros = "0".repeat(64);
    let cases: Vec<(String, &str)> = vec![
        ("listen: 0.0.0.0:50051\n".into(), "without authentication"),
        ("listen: 0.0.0.0:50051\nauth:\n  dev: true\n".into(), "loopback"),
        (
            "auth:\n  dev: true\npolicy:\n  trigger_ratio: 1.5\n".into(),
            "policy.trigger_ratio",
        ),
        (
            "auth:\n  dev: true\ndefault_model: \"\"\n".into(),
            "server.default_model",
        ),
        (
            "auth:\n  dev: true\nartifacts:\n  backend: s3\n".into(),
            "artifacts.s3.bucket",
        ),
        (
            "auth:\n  dev: true\nplans:\n  backend: s3\n".into(),
            "artifacts.s3.bucket",
        ),
        (
            "auth:\n  dev: true\nartifacts:\n  kms:\n    key_id: \"\"\n".into(),
            "artifacts.kms.key_id",
        ),
        (
            "auth:\n  dev: true\nartifacts:\n  kms:\n    tenant_keys:\n      acme: alias/acme\n"
                .into(),
            "artifacts.kms.tenant_keys",
        ),
        (
            format!(
                "auth:\n  dev: true\nplugins:\n  dir: {plugins}\n  load:\n    - name: out\n      path: ../libout.so\n      sha256: {zeros}\n"
            ),
            "must be a file name in plugins.dir",
        ),
        (
            format!(
                "auth:\n  dev: true\nplugins:\n  dir: {plugins}\n  load:\n    - name: short\n      path: libshort.so\n      sha256: abc\n"
            ),
            "sha256",
        ),
        (
            "auth:\n  dev: true\nplugins:\n  load:\n    - name: nodir\n      path: libx.so\n      sha256: x\n"
                .into(),
            "plugins.dir",
        ),
    ];
    for (yaml, expected) in cases {
        let file = dir.path().join("compactd.yaml");
        std::fs::write(&file, &yaml).unwrap();
        let mut settings = compactd::config::load(Some(&file), Vec::new())
            .unwrap_or_else(|e| panic!("{yaml}: {e}"));
        settings.data_dir = dir.path().join("data");
        let checked = compactd::config::check(&settings)
            .expect_err(&yaml)
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let served = compactd::startup::serve(settings, listener, std::future::pending())
            .await
            .expect_err(&yaml)
            .to_string();
        assert!(served.contains(expected), "{yaml}: {served}");
        assert!(
            checked.ends_with(&served),
            "{yaml}: config check said {checked:?}, serve {served:?}"
        );
    }
}
