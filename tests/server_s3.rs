//! Artifacts and plans on S3 with KMS envelope encryption, against a real
//! local moto server (S3 + KMS) started per test; the AWS path is exercised
//! through the real `aws-sdk-s3`/`aws-sdk-kms` clients, the API through a
//! real gRPC client. moto missing = these tests fail, saying so.

mod server_common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_sdk_kms::primitives::Blob;
use aws_sdk_s3::primitives::ByteStream;
use base64::Engine as _;
use compactd::model::CompactionPlan;
use compactd::proto::pb;
use compactd::store::backend::{self, ArtifactsSettings, Backend, Local, PlansSettings, Stores};
use compactd::store::{PlanStore, StoreError};
use compactd_testkit::moto::{credentials, Fault, FaultProxy, Moto, REGION};
use server_common::*;
use tonic::Code;

const BUCKET: &str = "compactd-artifacts";

/// moto, a proxy in front of it for S3 and one for KMS (so either can fail
/// alone), direct clients for inspecting what was stored, a bucket and two
/// KMS keys (the default and globex's own).
struct Aws {
    _moto: Moto,
    s3_proxy: FaultProxy,
    kms_proxy: FaultProxy,
    s3: aws_sdk_s3::Client,
    kms: aws_sdk_kms::Client,
    default_key: String,
    globex_key: String,
    dir: tempfile::TempDir,
}

async fn aws() -> Aws {
    let moto = tokio::task::spawn_blocking(Moto::start)
        .await
        .expect("moto start");
    let s3_proxy = FaultProxy::start(moto.addr());
    let kms_proxy = FaultProxy::start(moto.addr());
    let (s3, kms) = moto.clients().await;
    s3.create_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .expect("bucket");
    let mut keys = Vec::new();
    for _ in 0..2 {
        let k = kms.create_key().send().await.expect("kms key");
        keys.push(k.key_metadata.expect("metadata").arn.expect("arn"));
    }
    Aws {
        _moto: moto,
        s3_proxy,
        kms_proxy,
        s3,
        kms,
        globex_key: keys.pop().expect("key"),
        default_key: keys.pop().expect("key"),
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

impl Aws {
    fn settings(&self) -> ArtifactsSettings {
        let mut s = ArtifactsSettings {
            backend: Backend::S3,
            ..Default::default()
        };
        s.s3.bucket = BUCKET.into();
        s.s3.prefix = "prod".into();
        s.s3.region = Some(REGION.into());
        s.s3.endpoint_url = Some(self.s3_proxy.endpoint());
        s.kms.key_id = Some(self.default_key.clone());
        s.kms.endpoint_url = Some(self.kms_proxy.endpoint());
        s.kms.tenant_keys = BTreeMap::from([("globex".to_string(), self.globex_key.clone())]);
        s
    }

    async fn stores(&self) -> Stores {
        backend::open(
            Local {
                data_dir: &self.dir.path().join("data"),
                keyring_file: None,
            },
            &self.settings(),
            &PlansSettings::default(),
            Some(credentials()),
        )
        .await
        .expect("open the S3 stores")
    }

    async fn server(&self) -> TestServer {
        let stores = self.stores().await;
        TestServer::start_with_stores(stores.plans, stores.artifacts).await
    }

    /// Every key in the bucket.
    async fn keys(&self) -> Vec<String> {
        let out = self
            .s3
            .list_objects_v2()
            .bucket(BUCKET)
            .send()
            .await
            .expect("list");
        out.contents()
            .iter()
            .filter_map(|o| o.key().map(String::from))
            .collect()
    }

    async fn object(&self, key: &str) -> Vec<u8> {
        let out = self
            .s3
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .expect("get");
        out.body
            .collect()
            .await
            .expect("body")
            .into_bytes()
            .to_vec()
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) {
        self.s3
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .expect("put");
    }

    async fn artifact_keys(&self) -> Vec<String> {
        self.keys()
            .await
            .into_iter()
            .filter(|k| k.contains("/artifacts/art_"))
            .collect()
    }
}

/// The object's header line, parsed.
fn header(object: &[u8]) -> serde_json::Value {
    let start = object.iter().position(|&b| b == b'\n').expect("magic line") + 1;
    let end = start
        + object[start..]
            .iter()
            .position(|&b| b == b'\n')
            .expect("header line");
    serde_json::from_slice(&object[start..end]).expect("header json")
}

fn kms_context(tenant: &str, thread: &str, artifact: &str) -> HashMap<String, String> {
    HashMap::from([
        ("tenant".into(), tenant.into()),
        ("thread".into(), thread.into()),
        ("artifact".into(), artifact.into()),
    ])
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A thread whose big tool result gets externalized, with secrets in it.
fn secret_thread(id: &str) -> pb::Thread {
    let mut t = big_thread(id, 2000);
    t.messages[2] = result(
        "t1",
        1,
        "c1",
        "read_file",
        format!(
            "config:\n  password: hunter2-prod\n  AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n{}",
            big_output(2000)
        ),
    );
    t
}

async fn compact_externalizing(
    client: &mut pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>,
    token: &str,
    thread: pb::Thread,
) -> Result<pb::CompactResponse, tonic::Status> {
    let mut req = compact_req(thread, 8000);
    req.policy = Some(externalize_policy());
    within(client.compact(authed(req, token)))
        .await
        .map(|r| r.into_inner())
}

async fn rehydrate(
    client: &mut pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>,
    token: &str,
    thread_id: &str,
    artifact_id: &str,
) -> Result<pb::RehydrateResponse, tonic::Status> {
    within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: thread_id.into(),
            artifact_id: artifact_id.into(),
            max_tokens: 200_000,
            ..Default::default()
        },
        token,
    )))
    .await
    .map(|r| r.into_inner())
}

#[tokio::test]
async fn externalized_content_is_ciphertext_in_s3_and_comes_back_redacted() {
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = compact_externalizing(&mut client, &acme, secret_thread("t-s3"))
        .await
        .expect("compact");
    let artifact_id = out.new_artifact_ids.first().cloned().expect("externalized");

    let keys = aws.artifact_keys().await;
    let key = keys
        .iter()
        .find(|k| k.ends_with(&artifact_id))
        .expect("the artifact's object");
    assert!(
        key.starts_with("prod/tenants/acme/threads/") && key.contains("/artifacts/"),
        "{key}"
    );
    let object = aws.object(key).await;
    // No plaintext fragment: no line of the original output, no secret.
    let original = big_output(2000);
    for line in original.lines().step_by(97) {
        assert!(
            !contains(&object, line.as_bytes()),
            "plaintext {line:?} in S3"
        );
    }
    for secret in ["hunter2-prod", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"] {
        assert!(!contains(&object, secret.as_bytes()), "{secret} in S3");
    }
    let h = header(&object);
    assert_eq!(h["envelope"]["algorithm"], "AES-256-GCM");
    assert_eq!(h["envelope"]["key_id"], aws.default_key.as_str());
    assert_eq!(h["meta"]["tenant"], "acme");

    let back = rehydrate(&mut client, &acme, "t-s3", &artifact_id)
        .await
        .expect("rehydrate");
    assert!(back
        .content
        .contains(original.lines().nth(1000).expect("line")));
    assert!(!back.content.contains("hunter2-prod"));
    assert!(
        back.content.contains("[REDACTED"),
        "redaction marker missing"
    );

    // The plan is on S3 too, encrypted by S3 under the KMS key.
    let plan_key = keys[0]
        .split("/artifacts/")
        .next()
        .expect("thread prefix")
        .to_string()
        + "/plan.json";
    let head = aws
        .s3
        .head_object()
        .bucket(BUCKET)
        .key(&plan_key)
        .send()
        .await
        .expect("plan object");
    assert_eq!(
        head.server_side_encryption().map(|s| s.as_str()),
        Some("aws:kms")
    );
    let plan_bytes = aws.object(&plan_key).await;
    assert!(!contains(&plan_bytes, b"hunter2-prod"));
    // ... and sealed by compactd per tenant under the tenant's KMS key like
    // the artifacts, so nothing of the conversation is readable in it.
    let sealed = plan_bytes
        .strip_prefix(b"compactd-plan v2\n".as_slice())
        .expect("a sealed plan");
    let line = sealed.split(|&b| b == b'\n').next().expect("header");
    let h: serde_json::Value = serde_json::from_slice(line).expect("header json");
    assert_eq!(h["envelope"]["key_id"], aws.default_key.as_str());
    assert_eq!(h["meta"]["tenant"], "acme");
    for plain in ["worker-0", "A-17", "read_file", "Never delete"] {
        assert!(
            !contains(&plan_bytes, plain.as_bytes()),
            "{plain} in the plan object"
        );
    }
}

#[tokio::test]
async fn another_tenant_cannot_read_an_artifact_by_any_route() {
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let globex = token("globex", ALL);
    let out = compact_externalizing(&mut client, &acme, secret_thread("shared-name"))
        .await
        .expect("compact");
    let id = out.new_artifact_ids[0].clone();

    // The owner reads it.
    rehydrate(&mut client, &acme, "shared-name", &id)
        .await
        .expect("owner reads");
    // Guessed id, same thread name: globex's key prefix has no such object.
    let e = rehydrate(&mut client, &globex, "shared-name", &id)
        .await
        .expect_err("cross-tenant read");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // Forged body tenant: refused before any read.
    let e = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "shared-name".into(),
            artifact_id: id.clone(),
            tenant_id: Some("acme".into()),
            ..Default::default()
        },
        &globex,
    )))
    .await
    .expect_err("forged tenant");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // Path-like and malformed ids never name an object.
    for bad in [
        "../../acme/threads/x/artifacts/".to_string() + &id,
        format!("{id}/../{id}"),
        id.to_uppercase(),
        format!("{id}0"),
        "art_%2e%2e%2facme".into(),
    ] {
        let e = rehydrate(&mut client, &globex, "shared-name", &bad)
            .await
            .expect_err("bad id");
        assert!(
            matches!(e.code(), Code::NotFound | Code::InvalidArgument),
            "{bad}: {e:?}"
        );
    }
    // A thread id with path tricks stays inside globex's prefix.
    let e = rehydrate(&mut client, &globex, "../../acme/threads/shared-name", &id)
        .await
        .expect_err("thread traversal");
    assert!(
        matches!(e.code(), Code::NotFound | Code::InvalidArgument),
        "{e:?}"
    );

    // The object itself, copied under globex's key: the header names acme,
    // so it is refused, never served.
    let acme_key = aws
        .artifact_keys()
        .await
        .into_iter()
        .find(|k| k.ends_with(&id))
        .expect("object");
    let object = aws.object(&acme_key).await;
    aws.put(
        &acme_key.replace("/tenants/acme/", "/tenants/globex/"),
        object.clone(),
    )
    .await;
    let e = rehydrate(&mut client, &globex, "shared-name", &id)
        .await
        .expect_err("copied object");
    assert_ne!(e.code(), Code::Ok);
    // And cryptographically: KMS refuses to unwrap acme's data key in
    // globex's context, with or without globex's key named.
    let h = header(&object);
    let wrapped = base64::engine::general_purpose::STANDARD
        .decode(h["envelope"]["wrapped_key"].as_str().expect("wrapped"))
        .expect("base64");
    let refused = aws
        .kms
        .decrypt()
        .ciphertext_blob(Blob::new(wrapped.clone()))
        .set_encryption_context(Some(kms_context("globex", "shared-name", &id)))
        .send()
        .await
        .expect_err("KMS must refuse another tenant's context");
    assert!(
        format!("{refused:?}").contains("InvalidCiphertextException"),
        "{refused:?}"
    );
    aws.kms
        .decrypt()
        .ciphertext_blob(Blob::new(wrapped))
        .set_encryption_context(Some(kms_context("acme", "shared-name", &id)))
        .send()
        .await
        .expect("the owner's context unwraps");
}

#[tokio::test]
async fn tampered_ciphertext_or_metadata_is_an_error_never_garbage() {
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = compact_externalizing(&mut client, &acme, big_thread("t-tamper", 2000))
        .await
        .expect("compact");
    let id = out.new_artifact_ids[0].clone();
    let key = aws
        .artifact_keys()
        .await
        .into_iter()
        .find(|k| k.ends_with(&id))
        .expect("object");
    let original = aws.object(&key).await;

    // One bit of the ciphertext.
    let mut flipped = original.clone();
    let last = flipped.len() - 20;
    flipped[last] ^= 0x01;
    aws.put(&key, flipped).await;
    let e = rehydrate(&mut client, &acme, "t-tamper", &id)
        .await
        .expect_err("tampered ciphertext");
    assert_ne!(e.code(), Code::Ok);
    assert!(!e.message().contains("line"), "{e:?}");

    // The metadata: sensitivity lowered, TTL removed — same length or not,
    // the associated data no longer authenticates.
    let text = String::from_utf8_lossy(&original).into_owned();
    let mut edits = 0;
    for (from, to) in [
        ("\"internal\"", "\"public\""),
        ("\"ttl_seconds\":", "\"ttl_secondz\":"),
    ] {
        if !text.contains(from) {
            continue;
        }
        let mut edited = original.clone();
        let at = text.find(from).expect("field");
        edited.splice(at..at + from.len(), to.bytes());
        aws.put(&key, edited).await;
        let e = rehydrate(&mut client, &acme, "t-tamper", &id)
            .await
            .expect_err("tampered metadata");
        assert_ne!(e.code(), Code::Ok, "{from}");
        edits += 1;
    }
    assert!(edits > 0, "no metadata field to edit in {text:.300}");

    // Restored, it reads again.
    aws.put(&key, original).await;
    rehydrate(&mut client, &acme, "t-tamper", &id)
        .await
        .expect("restored object reads");
}

/// Plan in the S3 store, if any.
async fn stored_plan(aws: &Aws, tenant: &str, thread: &str) -> Option<CompactionPlan> {
    aws.stores()
        .await
        .plans
        .get(tenant, thread)
        .await
        .expect("plan read")
        .map(|p| Arc::unwrap_or_clone(p.plan))
}

#[tokio::test]
async fn s3_or_kms_down_is_unavailable_commits_nothing_and_recovers() {
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);

    for (which, proxy, fault) in [
        ("kms refused", &aws.kms_proxy, Fault::Refuse),
        ("kms 500", &aws.kms_proxy, Fault::Http500),
        ("s3 refused", &aws.s3_proxy, Fault::Refuse),
        ("s3 500", &aws.s3_proxy, Fault::Http500),
    ] {
        let thread = format!("t-down-{}", which.replace(' ', "-"));
        proxy.set(fault);
        let e = compact_externalizing(&mut client, &acme, big_thread(&thread, 2000))
            .await
            .expect_err(which);
        assert_eq!(e.code(), Code::Unavailable, "{which}: {e:?}");
        proxy.set(Fault::None);
        // Nothing committed: no plan, and no object for a plan to point at.
        assert_eq!(stored_plan(&aws, "acme", &thread).await, None, "{which}");
        if which.starts_with("kms") {
            let hex = hex_of(&thread);
            assert!(
                !aws.keys().await.iter().any(|k| k.contains(&hex)),
                "{which}: an object was written without a data key"
            );
        }
        // Healthy again for the next call, on the same thread.
        let out = compact_externalizing(&mut client, &acme, big_thread(&thread, 2000))
            .await
            .unwrap_or_else(|e| panic!("{which}: after recovery: {e:?}"));
        let plan = stored_plan(&aws, "acme", &thread).await.expect("plan");
        for id in &out.new_artifact_ids {
            assert!(format!("{plan:?}").contains(id.as_str()));
            rehydrate(&mut client, &acme, &thread, id)
                .await
                .unwrap_or_else(|e| panic!("{which}: {id} unreadable: {e:?}"));
        }
    }
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn two_replicas_on_one_bucket_get_one_winner_per_version() {
    let aws = aws().await;
    let (a, b) = (aws.stores().await, aws.stores().await);
    let replicas: [Arc<dyn PlanStore>; 2] = [a.plans, b.plans];
    let thread = "t-shared";
    // Each round both replicas read the latest plan and commit a successor
    // that appends their name; exactly one wins each version and the winner
    // of every version is visible in the final history (no lost update).
    let mut winners = Vec::new();
    let mut versions = Vec::new();
    let mut conflicts = 0;
    for round in 0..12u64 {
        let attempts = replicas.iter().enumerate().map(|(i, store)| {
            let store = Arc::clone(store);
            async move {
                let current = store.get("acme", thread).await.expect("get");
                let (version, mut plan) = match current {
                    Some(p) => (p.version, Arc::unwrap_or_clone(p.plan)),
                    None => (0, CompactionPlan::new(thread)),
                };
                plan.fingerprint = format!("{}+r{i}", plan.fingerprint);
                (i, store.commit("acme", thread, &plan, version).await)
            }
        });
        let results = futures_join(attempts.collect()).await;
        let won: Vec<usize> = results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| *i)
            .collect();
        let lost = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(StoreError::Conflict { .. })))
            .count();
        assert!(!won.is_empty(), "round {round}: nobody won: {results:?}");
        assert_eq!(won.len() + lost, 2, "round {round}: {results:?}");
        conflicts += lost;
        versions.extend(results.iter().filter_map(|(_, r)| r.as_ref().ok().copied()));
        winners.extend(won);
    }
    let last = replicas[0]
        .get("acme", thread)
        .await
        .expect("get")
        .expect("plan");
    assert_eq!(last.version, winners.len() as u64);
    assert!(
        conflicts > 0,
        "the replicas never raced; the test proves nothing"
    );
    // Every version was won exactly once, in order.
    assert_eq!(versions, (1..=last.version).collect::<Vec<_>>());
    let expected: String = winners.iter().map(|i| format!("+r{i}")).collect();
    assert_eq!(
        last.plan.fingerprint, expected,
        "a committed update was lost"
    );
    // A stale writer is refused with the current version.
    let e = replicas[1]
        .commit("acme", thread, &last.plan, 1)
        .await
        .expect_err("stale");
    assert!(
        matches!(e, StoreError::Conflict { expected: 1, current } if current == last.version),
        "{e:?}"
    );
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(fs: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[tokio::test]
async fn the_plan_one_replica_commits_is_the_one_the_other_replaces() {
    let aws = aws().await;
    let (one, two) = (aws.server().await, aws.server().await);
    let acme = token("acme", ALL);
    let out = compact_externalizing(&mut one.client().await, &acme, big_thread("t-rep", 2000))
        .await
        .expect("compact on replica one");
    let plan = out.plan.expect("plan");
    let mut c2 = two.client().await;
    // Replica two resets exactly the version replica one committed.
    let reset = within(c2.reset_plan(authed(
        pb::ResetPlanRequest {
            thread_id: "t-rep".into(),
            expected_version: Some(plan.version),
            ..Default::default()
        },
        &token(
            "acme",
            &[
                "compact",
                "render",
                "rehydrate",
                "artifact:read:internal",
                "delete",
            ],
        ),
    )))
    .await
    .expect("reset on replica two")
    .into_inner();
    assert_eq!(reset.previous_version, plan.version);
    assert_eq!(reset.version, plan.version + 1);
    rehydrate(&mut c2, &acme, "t-rep", &out.new_artifact_ids[0])
        .await
        .expect("replica two reads replica one's artifact");
}

/// Deployment contract: the binary serves on S3+KMS from the SDK's standard
/// environment plus three `COMPACTD__` variables, nothing else.
#[cfg(unix)]
#[tokio::test]
async fn the_binary_serves_on_s3_and_kms_from_the_environment_alone() {
    use std::io::{BufRead, BufReader};
    let aws = aws().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"));
    for (k, _) in
        std::env::vars().filter(|(k, _)| k.starts_with("COMPACTD") || k.starts_with("AWS_"))
    {
        cmd.env_remove(k);
    }
    let mut child = cmd
        .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("COMPACTD__ARTIFACTS__BACKEND", "s3")
        .env("COMPACTD__ARTIFACTS__S3__BUCKET", BUCKET)
        .env("COMPACTD__ARTIFACTS__KMS__KEY_ID", &aws.default_key)
        .env("AWS_ENDPOINT_URL", aws.s3_proxy.endpoint())
        .env("AWS_REGION", REGION)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().expect("stdout");
    let mut child = Kill(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read");
        line
    })
    .await
    .expect("line");
    let addr = line
        .trim()
        .strip_prefix("compactd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let mut client =
        pb::compaction_service_client::CompactionServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
    let mut req = compact_req(big_thread("t-env", 2000), 8000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(req))
        .await
        .unwrap_or_else(|e| {
            let _ = child.0.kill();
            panic!("compact against the env-configured binary: {e:?}")
        })
        .into_inner();
    let id = out.new_artifact_ids[0].clone();
    let keys = aws.keys().await;
    assert!(keys.iter().any(|k| k.ends_with(&id)), "{keys:?}");
    assert!(keys.iter().any(|k| k.ends_with("/plan.json")), "{keys:?}");
    let object = aws
        .object(keys.iter().find(|k| k.ends_with(&id)).expect("key"))
        .await;
    assert_eq!(
        header(&object)["envelope"]["key_id"],
        aws.default_key.as_str()
    );
    // Nothing under the data directory but the (unused) directory itself.
    assert!(!dir.path().join("tenants").exists());
}

/// A bucket that does not exist, or a bucket setting missing, stops
/// start-up with the reason, before the address is announced.
#[cfg(unix)]
#[tokio::test]
async fn a_wrong_bucket_stops_start_up_before_listening() {
    let aws = aws().await;
    let dir = tempfile::tempdir().expect("tempdir");
    for (bucket, expect) in [
        ("no-such-bucket", "no-such-bucket"),
        ("''", "artifacts.s3.bucket"),
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"));
        for (k, _) in
            std::env::vars().filter(|(k, _)| k.starts_with("COMPACTD") || k.starts_with("AWS_"))
        {
            cmd.env_remove(k);
        }
        let out = cmd
            .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("COMPACTD__ARTIFACTS__BACKEND", "s3")
            .env("COMPACTD__ARTIFACTS__S3__BUCKET", bucket)
            .env("AWS_ENDPOINT_URL", aws.s3_proxy.endpoint())
            .env("AWS_REGION", REGION)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("HOME", dir.path())
            .output()
            .expect("run");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{bucket:?}: started");
        assert!(!stdout.contains("listening"), "{bucket:?}: {stdout}");
        assert!(stderr.contains(expect), "{bucket:?}: {stderr}");
    }
}

/// The summary cache's writes: under the caller's id, encrypted like any
/// artifact, and first write wins (a second writer of the same key, e.g.
/// another replica, succeeds without replacing it).
#[tokio::test]
async fn keyed_artifacts_are_sealed_written_once_and_read_back() {
    let aws = aws().await;
    let stores = aws.stores().await;
    let id = compactd::store::keyed_artifact_id("test", b"the key");
    let meta = compactd::store::ArtifactMeta {
        tenant: "acme".into(),
        thread_id: "t-cache".into(),
        created_at_unix_ms: 1,
        ttl_seconds: None,
        sensitivity: compactd::model::Sensitivity::Internal,
        key_id: None,
        content_hash: String::new(),
        size_bytes: 0,
        message_ids: vec!["m1".into()],
    };
    let first = br#"{"facts":["cached summary text"]}"#;
    stores
        .artifacts
        .put_keyed(&meta, &id, first)
        .await
        .expect("first write");
    stores
        .artifacts
        .put_keyed(&meta, &id, b"something else")
        .await
        .expect("a second write of the key succeeds");
    let (_, back) = stores
        .artifacts
        .get("acme", "t-cache", &id)
        .await
        .expect("read back");
    assert_eq!(back, first.to_vec(), "the first write stands");
    let keys = aws.artifact_keys().await;
    let key = keys
        .iter()
        .find(|k| k.ends_with(&id))
        .expect("stored under the caller's id");
    let object = aws.object(key).await;
    assert!(
        !String::from_utf8_lossy(&object).contains("cached summary text"),
        "plaintext in S3"
    );
    // Another tenant cannot read it by id.
    assert!(matches!(
        stores.artifacts.get("globex", "t-cache", &id).await,
        Err(StoreError::NotFound)
    ));
}

/// Span names (`otel.name` when set) with their parent's, as a process-wide
/// subscriber saw them: what a trace backend would nest.
#[derive(Clone, Default)]
struct Recorder(Arc<std::sync::Mutex<Vec<Recorded>>>);

/// A span's name and its parent's.
type Recorded = (String, Option<String>);

struct SpanName(String);

struct OtelName(Option<String>);

impl tracing::field::Visit for OtelName {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "otel.name" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "otel.name" {
            self.0 = Some(value.to_string());
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut name = OtelName(None);
        attrs.record(&mut name);
        let name = name
            .0
            .unwrap_or_else(|| attrs.metadata().name().to_string());
        if let Some(span) = ctx.span(id) {
            let parent = span
                .parent()
                .and_then(|p| p.extensions().get::<SpanName>().map(|n| n.0.clone()));
            span.extensions_mut().insert(SpanName(name.clone()));
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((name, parent));
        }
    }
}

#[tokio::test]
async fn past_plan_versions_are_kept_on_s3_and_go_with_the_plan() {
    let aws = aws().await;
    let stores = aws.stores().await;
    let plans = stores.plans;
    for v in 0..3u64 {
        let mut p = CompactionPlan::new("t-hist");
        p.original_token_count = 100 + v as u32;
        plans.commit("acme", "t-hist", &p, v).await.expect("commit");
    }
    let first = plans
        .get_version("acme", "t-hist", 1)
        .await
        .expect("read")
        .expect("version 1 kept");
    assert_eq!((first.version, first.plan.original_token_count), (1, 100));
    assert_eq!(
        plans
            .get_version("acme", "t-hist", 3)
            .await
            .expect("read")
            .map(|p| p.version),
        Some(3)
    );
    assert_eq!(
        plans
            .get_version("globex", "t-hist", 1)
            .await
            .expect("read"),
        None
    );
    let kept: Vec<String> = aws
        .keys()
        .await
        .into_iter()
        .filter(|k| k.contains("/plans/"))
        .collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(plans.delete("acme", "t-hist").await.expect("delete"));
    assert!(!aws.keys().await.iter().any(|k| k.contains("/plans/")));
    assert_eq!(
        plans.get_version("acme", "t-hist", 1).await.expect("read"),
        None
    );
}

#[tokio::test]
async fn aws_requests_are_client_spans_under_the_artifact_operation() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let recorder = Recorder::default();
    // Process-wide (the writes run on other threads); the other tests of
    // this binary only add spans of the same kinds.
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(recorder.clone()))
        .expect("the only subscriber of this test binary");
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = compact_externalizing(&mut client, &acme, secret_thread("t-spans"))
        .await
        .expect("compact");
    let artifact_id = out.new_artifact_ids.first().cloned().expect("externalized");
    rehydrate(&mut client, &acme, "t-spans", &artifact_id)
        .await
        .expect("rehydrate");
    let seen = recorder
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let under = |child: &str, parent: &str| {
        seen.iter()
            .any(|(c, p)| c == child && p.as_deref() == Some(parent))
    };
    assert!(under("S3.PutObject", "artifact put"), "{seen:?}");
    assert!(under("KMS.GenerateDataKey", "artifact put"), "{seen:?}");
    assert!(under("S3.GetObject", "artifact get"), "{seen:?}");
    assert!(under("KMS.Decrypt", "artifact get"), "{seen:?}");
    assert!(under(
        "artifact put",
        "compactd.v1.CompactionService/Compact"
    ));
    server.stop().await.expect("clean stop");
}

/// The every-byte check on S3 with KMS: after Compact, Render, Explain,
/// SearchContext and Rehydrate of a thread carrying a secret of every
/// detector class, no object in the bucket holds a raw secret or readable
/// conversation text (plans and artifacts are sealed per tenant).
#[tokio::test]
async fn every_object_in_the_bucket_is_free_of_secrets_and_conversation_text() {
    let aws = aws().await;
    let server = aws.server().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let thread = planted_thread("t-s3-every-byte");
    let out = compact_externalizing(&mut client, &acme, thread.clone())
        .await
        .expect("compact");
    let artifact = out.new_artifact_ids.first().cloned().expect("externalized");
    within(client.render(authed(
        pb::RenderRequest {
            thread: Some(thread.clone()),
            model: "gpt-4o".into(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("render");
    within(client.explain(authed(
        pb::ExplainRequest {
            thread_id: "t-s3-every-byte".into(),
            text: "batch".into(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("explain");
    within(client.search_context(authed(
        pb::SearchContextRequest {
            thread: Some(thread.clone()),
            query: "the stripe key and the card on file".into(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("search");
    rehydrate(&mut client, &acme, "t-s3-every-byte", &artifact)
        .await
        .expect("rehydrate");

    let needles: Vec<&str> = PLANTED
        .iter()
        .map(|(s, _)| *s)
        .chain(KEYED.iter().copied())
        .chain(["Never delete production data", "processed batch", "billing"])
        .collect();
    let keys = aws.keys().await;
    assert!(
        keys.iter().any(|k| k.ends_with("/plan.json"))
            && keys.iter().any(|k| k.contains("/artifacts/")),
        "plans and artifacts were written: {keys:?}"
    );
    for key in keys {
        let object = aws.object(&key).await;
        for n in &needles {
            assert!(
                !contains(&object, n.as_bytes()),
                "{n:?} readable in s3://{key}"
            );
        }
    }
}

/// One turn of an agent session: a question, a call, its result, an answer.
fn session_turn(n: u32) -> Vec<pb::Message> {
    agent_turn(n, 30, "shard replicated ok")
}

fn session_render(
    thread: Option<pb::Thread>,
    append: Option<pb::ThreadAppend>,
) -> pb::RenderRequest {
    pb::RenderRequest {
        compact_first: true,
        format: pb::OutputFormat::AnthropicMessages as i32,
        max_input_tokens: 8_000,
        start_session: thread.is_some(),
        thread,
        append,
        ..Default::default()
    }
}

/// Two servers on one moto bucket, a client of each, and a token that may
/// compact and render.
async fn two_replicas(
    aws: &Aws,
) -> (
    [TestServer; 2],
    [pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>; 2],
    String,
) {
    let replicas = [
        TestServer::start_on(aws.stores().await).await,
        TestServer::start_on(aws.stores().await).await,
    ];
    let clients = [replicas[0].client().await, replicas[1].client().await];
    (replicas, clients, token("acme", &["compact", "render"]))
}

#[tokio::test]
async fn two_replicas_on_one_bucket_serve_one_append_session_alternately() {
    let aws = aws().await;
    let (replicas, mut clients, token) = two_replicas(&aws).await;
    let mut whole = pb::Thread {
        id: "shared-session".into(),
        messages: session_turn(1),
    };
    let first =
        within(clients[0].render(authed(session_render(Some(whole.clone()), None), &token)))
            .await
            .expect("start on replica 0")
            .into_inner();
    let mut state = first.session.expect("session");
    let mut stale_seen = 0;
    for n in 2..=16u32 {
        let new = session_turn(n);
        let append = |base: u64| pb::ThreadAppend {
            thread_id: whole.id.clone(),
            base_version: base,
            messages: new.clone(),
            ..Default::default()
        };
        let i = (n % 2) as usize;
        if n % 5 == 0 {
            // Both replicas get the same append on the same base at once:
            // exactly one keeps it, the other says where the session is.
            let (x, y) = clients.split_at_mut(1);
            let (ra, rb) = tokio::join!(
                x[0].render(authed(
                    session_render(None, Some(append(state.version))),
                    &token
                )),
                y[0].render(authed(
                    session_render(None, Some(append(state.version))),
                    &token
                )),
            );
            let (won, lost): (Vec<_>, Vec<_>) = [ra, rb].into_iter().partition(Result::is_ok);
            assert_eq!(won.len(), 1, "one winner per version: {won:?} {lost:?}");
            for l in lost {
                // The loser learns it lost from whichever compare-and-swap
                // it met: the session's (SESSION_STALE) or, while the
                // winner is between its two commits, the plan's (ABORTED).
                // Retrying the same base then says where the session is.
                let status = l.expect_err("lost");
                let status = if status.code() == Code::Aborted {
                    let j = 1 - i;
                    within(clients[j].render(authed(
                        session_render(None, Some(append(state.version))),
                        &token,
                    )))
                    .await
                    .expect_err("the same base again")
                } else {
                    status
                };
                assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
                let d = compactd::proto::status::ErrorDescription::of(&status);
                assert_eq!(d.reason, "SESSION_STALE");
                assert_eq!(d.current_version, Some(state.version + 1));
                stale_seen += 1;
            }
            let out = won
                .into_iter()
                .next()
                .expect("winner")
                .expect("ok")
                .into_inner();
            whole.messages.extend(new);
            state = out.session.expect("session");
        } else {
            let out = within(clients[i].render(authed(
                session_render(None, Some(append(state.version))),
                &token,
            )))
            .await
            .unwrap_or_else(|s| panic!("turn {n} on replica {i}: {s:?}"))
            .into_inner();
            whole.messages.extend(new);
            let next = out.session.expect("session");
            assert_eq!(next.version, state.version + 1, "turn {n}");
            state = next;
        }
        assert_eq!(
            state.messages as usize,
            whole.messages.len(),
            "turn {n}: a message was lost or duplicated"
        );
        // Each replica's view is the whole thread: the other replica's
        // full render of the committed plan is byte-identical.
        let mut full = session_render(None, None);
        full.compact_first = false;
        full.thread = Some(whole.clone());
        full.start_session = false;
        let a = within(clients[0].render(authed(full.clone(), &token)))
            .await
            .expect("full on 0")
            .into_inner();
        let b = within(clients[1].render(authed(full, &token)))
            .await
            .expect("full on 1")
            .into_inner();
        assert_eq!(a.provider_payload_json, b.provider_payload_json, "turn {n}");
    }
    assert!(stale_seen >= 3, "the races were run");
    // The session is sealed in the bucket: no conversation text in it.
    let keys = aws.keys().await;
    let session_keys: Vec<_> = keys.iter().filter(|k| k.contains("/session/")).collect();
    assert!(session_keys.len() >= 2, "{keys:?}");
    for k in session_keys {
        let bytes = aws.object(k).await;
        assert!(!contains(&bytes, b"replicated ok"), "{k} holds plaintext");
    }
    for r in replicas {
        r.stop().await.expect("clean stop");
    }
}

/// A replica appends turn after turn on the version it wrote itself
/// without reading the head from the bucket again; the conditional write
/// (If-Match on the ETag its own PUT returned) then holds, and when the
/// other replica has moved the session on meanwhile it fails, and the
/// append is answered SESSION_STALE with the version the bucket holds.
#[tokio::test]
async fn a_replica_appends_on_its_own_writes_and_meets_the_other_replicas() {
    let aws = aws().await;
    let (replicas, mut clients, token) = two_replicas(&aws).await;
    let thread = pb::Thread {
        id: "own-writes".into(),
        messages: session_turn(1),
    };
    let mut version = within(clients[0].render(authed(session_render(Some(thread), None), &token)))
        .await
        .expect("start on replica 0")
        .into_inner()
        .session
        .expect("session")
        .version;
    let append = |base: u64, n: u32| pb::ThreadAppend {
        thread_id: "own-writes".into(),
        base_version: base,
        messages: session_turn(n),
        ..Default::default()
    };
    // Replica 0, three turns in a row on its own writes.
    for n in 2..=4 {
        let out = within(clients[0].render(authed(
            session_render(None, Some(append(version, n))),
            &token,
        )))
        .await
        .unwrap_or_else(|s| panic!("turn {n} on replica 0: {s:?}"))
        .into_inner();
        let next = out.session.expect("session");
        assert_eq!(next.version, version + 1, "turn {n}");
        version = next.version;
    }
    // Replica 1 moves the session on; replica 0 still holds the version
    // before it.
    let moved = within(clients[1].render(authed(
        session_render(None, Some(append(version, 5))),
        &token,
    )))
    .await
    .expect("turn 5 on replica 1")
    .into_inner()
    .session
    .expect("session");
    assert_eq!(moved.version, version + 1);
    let stale = within(clients[0].render(authed(
        session_render(None, Some(append(version, 6))),
        &token,
    )))
    .await
    .expect_err("replica 0's base was replaced");
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale:?}");
    let d = compactd::proto::status::ErrorDescription::of(&stale);
    assert_eq!(d.reason, "SESSION_STALE");
    assert_eq!(d.current_version, Some(moved.version));
    // On the version the bucket holds, replica 0 reads the head and goes on.
    let out = within(clients[0].render(authed(
        session_render(None, Some(append(moved.version, 6))),
        &token,
    )))
    .await
    .expect("turn 6 on replica 0")
    .into_inner();
    assert_eq!(
        out.session.expect("session").messages,
        moved.messages + session_turn(6).len() as u32
    );
    for r in replicas {
        r.stop().await.expect("clean stop");
    }
}

/// Thread `id` of the replica race after `round` rounds: each round adds
/// 16 turns with long tool results, so each compacts anew and writes new
/// artifacts (the store work a loser must not wait behind).
/// A racing call still unanswered after this is hung.
const HANG: std::time::Duration = std::time::Duration::from_secs(60);

fn race_thread(id: &str, round: u32) -> pb::Thread {
    let mut messages = Vec::new();
    for n in 1..=(round + 1) * 16 {
        messages.extend(agent_turn(n, 1_500, "replica race batch finished"));
    }
    pb::Thread {
        id: id.into(),
        messages,
    }
}

/// An agent platform behind a load balancer fans one turn out to both
/// replicas: 32 Compacts on one thread, all with the version both replicas
/// last saw, half to each. The store's conditional write decides: one
/// commit, 31 ABORTED with the new version, on either replica; round after
/// round (4 on one thread, or `COMPACTD_RACE_ROUNDS`, 4 a thread); no
/// loser's artifact left behind. The deadline only catches a hang: how
/// promptly losers are answered depends on the machine, and is measured
/// against the queueing it replaced by `eval/load.py race` (the slowest
/// call of each round is printed here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicting_compacts_on_two_replicas_are_aborted_promptly() {
    let aws = aws().await;
    let (replicas, clients, token) = two_replicas(&aws).await;
    let rounds: u32 =
        std::env::var("COMPACTD_RACE_ROUNDS").map_or(4, |r| r.parse().expect("a count"));
    let request = |thread: &str, round: u32, version: u64| {
        let mut req = compact_req(race_thread(thread, round), 8_000);
        req.policy = Some(externalize_policy());
        req.expected_version = Some(version);
        let mut req = authed(req, &token);
        req.set_timeout(HANG);
        req
    };
    let (mut version, mut slowest, mut written) = (0, std::time::Duration::ZERO, Vec::new());
    for round in 0..rounds {
        let thread = format!("race-{}", round / 4);
        if round % 4 == 0 {
            version = 0;
        }
        let calls = (0..32).map(|i| {
            let mut client = clients[i % 2].clone();
            let req = request(&thread, round % 4, version);
            async move {
                let started = std::time::Instant::now();
                let out = client.compact(req).await;
                (i % 2, started.elapsed(), out)
            }
        });
        let (mut winners, mut losers) = (Vec::new(), Vec::new());
        let mut round_slowest = std::time::Duration::ZERO;
        for (replica, took, out) in futures_join(calls.collect()).await {
            round_slowest = round_slowest.max(took);
            match out {
                Ok(resp) => winners.push(resp.into_inner()),
                Err(s) => losers.push((replica, took, s)),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one commit");
        let winner = winners.remove(0);
        assert_eq!(winner.version, version + 1, "round {round}");
        for (replica, took, s) in losers {
            let at = format!("round {round}, replica {replica}, after {took:?}: {s:?}");
            assert_eq!(s.code(), Code::Aborted, "{at}");
            let d = compactd::proto::status::ErrorDescription::of(&s);
            assert_eq!(d.reason, "VERSION_CONFLICT", "{at}");
            assert_eq!(d.current_version, Some(winner.version), "{at}");
        }
        version = winner.version;
        written.extend(winner.new_artifact_ids);
        eprintln!("round {round}: slowest of 32 calls {round_slowest:?}");
        slowest = slowest.max(round_slowest);
    }
    eprintln!("slowest of {rounds} rounds x 32 calls: {slowest:?}");
    // Every artifact in the bucket is one a winner wrote.
    let written: std::collections::BTreeSet<String> = written.into_iter().collect();
    for k in aws.artifact_keys().await {
        let id = k.rsplit('/').next().expect("id");
        assert!(written.contains(id), "{k}: a loser's artifact was left");
    }
    for r in replicas {
        r.stop().await.expect("clean stop");
    }
}

/// The same fan-out without `expected_version`, of Compacts and of
/// compacting Renders: the caller did not ask for compare-and-swap, so a
/// call that lost the race to the other replica's commit builds on it
/// (here: finds it answers the request) and every call answers OK with the
/// one new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unconditional_calls_on_two_replicas_all_get_the_winning_plan() {
    let aws = aws().await;
    let (replicas, clients, token) = two_replicas(&aws).await;
    for round in 0..4u32 {
        let calls = (0..32).map(|i| {
            let mut client = clients[i % 2].clone();
            let mut req = compact_req(race_thread("fan-out", round), 8_000);
            req.policy = Some(externalize_policy());
            let render = round % 2 == 1;
            let render_req = pb::RenderRequest {
                thread: req.thread.clone(),
                model: req.model.clone(),
                max_input_tokens: req.max_input_tokens,
                policy: req.policy.clone(),
                compact_first: true,
                format: pb::OutputFormat::OpenaiChat as i32,
                ..Default::default()
            };
            let (mut req, mut render_req) = (authed(req, &token), authed(render_req, &token));
            req.set_timeout(HANG);
            render_req.set_timeout(HANG);
            async move {
                let version = if render {
                    client
                        .render(render_req)
                        .await
                        .map(|r| r.into_inner().plan_version)
                } else {
                    client.compact(req).await.map(|r| r.into_inner().version)
                };
                (i % 2, version)
            }
        });
        let versions: std::collections::BTreeSet<u64> = futures_join(calls.collect())
            .await
            .into_iter()
            .map(|(replica, out)| {
                out.unwrap_or_else(|s| panic!("round {round}, replica {replica}: {s:?}"))
            })
            .collect();
        assert_eq!(versions, [u64::from(round) + 1].into(), "round {round}");
    }
    for r in replicas {
        r.stop().await.expect("clean stop");
    }
}

#[tokio::test]
async fn replicas_on_one_bucket_share_the_count_calibration() {
    let aws = aws().await;
    let (_replicas, mut clients, token) = two_replicas(&aws).await;
    // Replica 0 learns from three reports at 0.4 of its estimate.
    let mut out = claude_render(&mut clients[0], &token, ("calibrating", 4), None).await;
    for turns in 5..=7 {
        let report = report_on(&out, 0.4 / counting(&out).1);
        out = claude_render(
            &mut clients[0],
            &token,
            ("calibrating", turns),
            Some(report),
        )
        .await;
    }
    let (basis, scale) = counting(&out);
    assert_eq!(basis, pb::counting::Basis::Calibrated);
    assert!((0.4..0.5).contains(&scale), "{scale}");
    // Replica 1 counts another thread of the tenant with the same bound.
    let other = claude_render(&mut clients[1], &token, ("another", 3), None).await;
    assert_eq!(counting(&other), (basis, scale));
    // A report on replica 1 that shows the bound too low tightens it for
    // replica 0 too, once replica 0 reads it again (every few seconds).
    let report = report_on(&other, 0.9 / scale);
    let tight = claude_render(&mut clients[1], &token, ("another", 4), Some(report)).await;
    let (_, tightened) = counting(&tight);
    assert!(tightened >= 0.9 * 1.05, "{tightened}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let seen = claude_render(&mut clients[0], &token, ("calibrating", 7), None).await;
        if counting(&seen).1 == tightened {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica 0 still counts at {}",
            counting(&seen).1
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    // A tenant's calibration is its own.
    let stranger = server_common::token("globex", &["compact", "render"]);
    let theirs = claude_render(&mut clients[0], &stranger, ("calibrating", 4), None).await;
    assert_eq!(counting(&theirs), (pb::counting::Basis::Estimate, 1.0));
}
