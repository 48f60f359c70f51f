//! Data lifecycle and tenant isolation through gRPC: DeleteThread and
//! ResetPlan, artifact TTL and the sweeper, per-tenant quotas, the access
//! log, admission that holds a tenant's slot until its blocking work ends,
//! and health checks that are never shed.

use crate::server_common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use compactd::proto::pb;
use compactd::proto::status::ErrorDescription;
use compactd::server::access::AccessLogSink;
use compactd::store::{FsPlanStore, PlanStore, StoreError};
use server_common::*;
use tonic::Code;

/// Every permission, including erasure.
const WITH_DELETE: &[&str] = &[
    "compact",
    "render",
    "rehydrate",
    "delete",
    "artifact:read:public",
    "artifact:read:internal",
];

fn externalizing(id: &str) -> pb::CompactRequest {
    let mut r = compact_req(big_thread(id, 2000), 8000);
    r.policy = Some(externalize_policy());
    r
}

/// Artifact files under the data directory (temp files excluded).
fn artifact_files(data_dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("art_"))
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(data_dir, &mut out);
    out
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 10 s");
}

#[tokio::test]
async fn delete_thread_erases_plan_artifacts_and_is_idempotent() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", WITH_DELETE);
    let out = within(client.compact(authed(externalizing("t-del"), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let artifact_id = out.new_artifact_ids.first().cloned().expect("an artifact");
    // Another tenant's thread of the same name is untouched by acme's delete.
    let globex = token("globex", WITH_DELETE);
    within(client.compact(authed(externalizing("t-del"), &globex)))
        .await
        .expect("globex compact");
    assert_eq!(artifact_files(&server.data_dir).len(), 2);

    // Without the permission: refused, nothing removed.
    let err = within(client.delete_thread(authed(
        pb::DeleteThreadRequest {
            thread_id: "t-del".into(),
            ..Default::default()
        },
        &token("acme", ALL),
    )))
    .await
    .expect_err("no delete permission");
    assert_status(&err, Code::PermissionDenied, None);
    assert_eq!(artifact_files(&server.data_dir).len(), 2);

    let del = || pb::DeleteThreadRequest {
        thread_id: "t-del".into(),
        ..Default::default()
    };
    let gone = within(client.delete_thread(authed(del(), &acme)))
        .await
        .expect("delete")
        .into_inner();
    assert!(gone.had_plan);
    assert_eq!(gone.artifacts_deleted, 1);
    assert!(gone.bytes_freed > 10_000, "{gone:?}");
    let again = within(client.delete_thread(authed(del(), &acme)))
        .await
        .expect("idempotent")
        .into_inner();
    assert!(!again.had_plan && again.artifacts_deleted == 0);

    // Render and Rehydrate: NOT_FOUND; the files are gone; globex keeps its own.
    let err = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(big_thread("t-del", 2000)),
            max_input_tokens: 8000,
            model: "gpt-4o".into(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect_err("no plan");
    assert_status(&err, Code::NotFound, None);
    let err = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-del".into(),
            artifact_id,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect_err("artifact gone");
    assert_status(&err, Code::NotFound, None);
    let left = artifact_files(&server.data_dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].to_string_lossy().contains("/globex/"), "{left:?}");
    let acme_dir = server.data_dir.join("tenants/acme/threads");
    let dirs: Vec<_> = std::fs::read_dir(&acme_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(dirs.is_empty(), "thread directory left behind: {dirs:?}");

    let err = within(client.delete_thread(authed(pb::DeleteThreadRequest::default(), &acme)))
        .await
        .expect_err("empty id");
    assert_status(&err, Code::InvalidArgument, Some("thread_id"));
}

#[tokio::test]
async fn reset_plan_then_the_sweeper_removes_what_only_the_old_plan_used() {
    let server = TestServer::start_with(|s| {
        s.lifecycle.unreferenced_grace_seconds = 0;
        s.lifecycle.sweep_interval_seconds = 1;
    })
    .await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = within(client.compact(authed(externalizing("t-reset"), &acme)))
        .await
        .expect("compact")
        .into_inner();
    assert_eq!(out.version, 1);
    // The committed plan points at its artifact: sweeps leave it alone.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(artifact_files(&server.data_dir).len(), 1);

    let err = within(client.reset_plan(authed(
        pb::ResetPlanRequest {
            thread_id: "t-reset".into(),
            expected_version: Some(7),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect_err("stale version");
    assert_status(&err, Code::Aborted, None);
    let reset = within(client.reset_plan(authed(
        pb::ResetPlanRequest {
            thread_id: "t-reset".into(),
            expected_version: Some(1),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("reset")
    .into_inner();
    assert_eq!((reset.previous_version, reset.version), (1, 2));
    let data_dir = server.data_dir.clone();
    eventually("the sweeper removing the superseded artifact", || {
        artifact_files(&data_dir).is_empty()
    })
    .await;
    // The thread compacts again on top of the empty plan.
    let again = within(client.compact(authed(externalizing("t-reset"), &acme)))
        .await
        .expect("compact after reset")
        .into_inner();
    assert_eq!(again.version, 3);
}

#[tokio::test]
async fn the_sweeper_removes_expired_artifacts() {
    let server = TestServer::start_with(|s| {
        s.lifecycle.artifact_ttl_seconds = 1;
        s.lifecycle.sweep_interval_seconds = 1;
    })
    .await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = within(client.compact(authed(externalizing("t-ttl"), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let artifact_id = out.new_artifact_ids.first().cloned().expect("artifact");
    assert_eq!(artifact_files(&server.data_dir).len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Expired reads as not found at once…
    let err = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-ttl".into(),
            artifact_id,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect_err("expired");
    assert_status(&err, Code::NotFound, None);
    // …and the sweeper deletes the file.
    let data_dir = server.data_dir.clone();
    eventually("the sweeper removing the expired artifact", || {
        artifact_files(&data_dir).is_empty()
    })
    .await;
}

#[tokio::test]
async fn quota_breaches_are_resource_exhausted_naming_the_quota() {
    let server = TestServer::start_with(|s| {
        s.lifecycle.quotas.max_bytes_per_tenant = 150_000;
        s.lifecycle.quotas.max_threads_per_tenant = 2;
    })
    .await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    // ~600 lines (~36 kB) fit; ~2000 more lines (~118 kB) do not.
    within(client.compact(authed(
        {
            let mut r = compact_req(big_thread("q-1", 600), 4000);
            r.policy = Some(externalize_policy());
            r
        },
        &acme,
    )))
    .await
    .expect("within the byte quota");
    let before = artifact_files(&server.data_dir).len();
    let err = within(client.compact(authed(externalizing("q-2"), &acme)))
        .await
        .expect_err("over the byte quota");
    assert_status(&err, Code::ResourceExhausted, None);
    let d = ErrorDescription::of(&err);
    assert_eq!(d.reason, "QUOTA_EXCEEDED");
    assert_eq!(d.field, "quotas.max_bytes_per_tenant");
    assert!(
        err.message().contains("quotas.max_bytes_per_tenant"),
        "{}",
        err.message()
    );
    assert_eq!(
        artifact_files(&server.data_dir).len(),
        before,
        "nothing written"
    );
    // Another tenant has its own quota.
    within(client.compact(authed(externalizing("q-2"), &token("globex", ALL))))
        .await
        .expect("globex is not charged for acme");

    // Threads: small threads store no artifacts, only plans.
    within(client.compact(authed(compact_req(small_thread("q-3"), 100_000), &acme)))
        .await
        .expect("second thread");
    let err = within(client.compact(authed(compact_req(small_thread("q-4"), 100_000), &acme)))
        .await
        .expect_err("third thread");
    assert_eq!(
        ErrorDescription::of(&err).field,
        "quotas.max_threads_per_tenant"
    );
    // An existing thread still compacts.
    within(client.compact(authed(compact_req(small_thread("q-3"), 100_000), &acme)))
        .await
        .expect("existing thread");
}

#[tokio::test]
async fn the_access_log_has_one_json_line_per_call_and_no_content() {
    let logs = tempfile::tempdir().expect("tempdir");
    let path = logs.path().join("access.log");
    let p = path.clone();
    let server = TestServer::start_with(move |s| s.access_log = AccessLogSink::File(p)).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    within(client.compact(authed(externalizing("t-log"), &acme)))
        .await
        .expect("compact");
    within(client.compact(compact_req(small_thread("t-anon"), 100_000)))
        .await
        .expect_err("no credential");
    let text = std::fs::read_to_string(&path).expect("access log");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let ok = &lines[0];
    assert_eq!(ok["tenant"], "acme");
    assert_eq!(ok["requester"], "agent@acme");
    assert_eq!(ok["method"], "Compact");
    assert_eq!(ok["thread_id"], "t-log");
    assert_eq!(ok["plan_version"], 1);
    assert_eq!(ok["code"], "OK");
    assert!(
        ok["tokens_before"].as_u64().expect("before") > ok["tokens_after"].as_u64().expect("after")
    );
    assert!(ok["latency_ms"].as_f64().expect("latency") > 0.0);
    assert!(ok["time"].as_str().expect("time").ends_with('Z'));
    let refused = &lines[1];
    assert_eq!(refused["code"], "UNAUTHENTICATED");
    assert_eq!(refused["method"], "Compact");
    // No message content, no credential.
    for needle in [
        "Never delete production data",
        "processed batch",
        "Bearer",
        &acme,
    ] {
        assert!(!text.contains(needle), "{needle:?} in the access log");
    }
}

/// Artifact writes that block a pool thread until released.
struct Slow {
    release: Arc<AtomicBool>,
    entered: Arc<tokio::sync::Notify>,
}

/// A server whose artifact writes block until `release` is set.
async fn slow_server(
    tweak: impl FnOnce(&mut compactd::settings::Settings),
) -> (TestServer, Slow, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let slow = Slow {
        release: Arc::new(AtomicBool::new(false)),
        entered: Arc::default(),
    };
    let (release, entered) = (Arc::clone(&slow.release), Arc::clone(&slow.entered));
    let artifacts = Arc::new(HookedArtifacts::new(
        dir.path(),
        Box::new(move |_| {
            let (release, entered) = (Arc::clone(&release), Arc::clone(&entered));
            Box::pin(async move {
                entered.notify_one();
                // Blocking work through the runtime helper, as a real
                // backend's I/O.
                compactd::runtime::blocking(move || {
                    while !release.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                })
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))
            })
        }),
    ));
    let plans = Arc::new(FsPlanStore::open(dir.path()).expect("plans"));
    let server =
        TestServer::start_with_stores_and(plans as Arc<dyn PlanStore>, artifacts, tweak).await;
    (server, slow, dir)
}

#[tokio::test]
async fn a_timed_out_call_keeps_its_tenant_slot_until_its_work_ends() {
    let (server, artifacts, _dir) = slow_server(|s| {
        s.per_tenant_concurrency = 1;
        // Long enough for the compaction itself (debug build), so the
        // deadline passes while the write blocks.
        s.request_timeout_ms = 4000;
    })
    .await;
    let release = Arc::clone(&artifacts.release);
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let first = tokio::spawn({
        let mut c = client.clone();
        let t = acme.clone();
        async move { c.compact(authed(externalizing("slow"), &t)).await }
    });
    within(artifacts.entered.notified()).await;
    let err = within(first).await.expect("task").expect_err("deadline");
    assert_status(&err, Code::DeadlineExceeded, None);
    // The abandoned call's write is still running on the blocking pool: the
    // tenant's one slot is still taken, so the tenant cannot start more.
    let err = within(client.compact(authed(compact_req(small_thread("s-2"), 100_000), &acme)))
        .await
        .expect_err("slot still held");
    assert_eq!(ErrorDescription::of(&err).reason, "OVERLOADED");
    // Other tenants are unaffected.
    within(client.compact(authed(
        compact_req(small_thread("s-2"), 100_000),
        &token("globex", ALL),
    )))
    .await
    .expect("globex");
    release.store(true, Ordering::SeqCst);
    let mut ok = false;
    for _ in 0..100 {
        if client
            .compact(authed(compact_req(small_thread("s-2"), 100_000), &acme))
            .await
            .is_ok()
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the slot was released once the work ended");
}

/// With room for one request's memory in flight, a second waits, decoded,
/// before any work (it is neither shed nor failed), and runs once the
/// first has ended.
#[tokio::test]
async fn a_request_waits_for_memory_in_flight_then_runs() {
    use prost::Message as _;
    let size = externalizing("mem-1").encoded_len() as u64;
    let (server, slow, _dir) = slow_server(|s| s.in_flight_bytes = size * 3 / 2).await;
    let client = server.client().await;
    let acme = token("acme", ALL);
    let call = |id: &'static str| {
        let (mut c, t) = (client.clone(), acme.clone());
        tokio::spawn(async move { c.compact(authed(externalizing(id), &t)).await })
    };
    let first = call("mem-1");
    within(slow.entered.notified()).await;
    let second = call("mem-2");
    // The second would reach its own artifact write well within this if
    // it had been let in beside the first.
    let entered = tokio::time::timeout(Duration::from_millis(500), slow.entered.notified()).await;
    assert!(entered.is_err(), "the second request ran beside the first");
    assert!(!second.is_finished());
    slow.release.store(true, Ordering::SeqCst);
    within(first).await.expect("task").expect("first");
    within(second)
        .await
        .expect("task")
        .expect("second, once there was room");
}

#[tokio::test]
async fn health_checks_are_never_shed() {
    let (server, artifacts, _dir) = slow_server(|s| s.global_concurrency = 1).await;
    let release = Arc::clone(&artifacts.release);
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let busy = tokio::spawn({
        let mut c = client.clone();
        let t = acme.clone();
        async move { c.compact(authed(externalizing("busy"), &t)).await }
    });
    within(artifacts.entered.notified()).await;
    // The server is full: API calls are shed at once…
    let mut shed = false;
    for _ in 0..100 {
        match client
            .compact(authed(
                compact_req(small_thread("x"), 100_000),
                &token("globex", ALL),
            ))
            .await
        {
            Err(e) if e.code() == Code::ResourceExhausted => {
                shed = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(shed, "a full server sheds API calls");
    // …while health checks still answer.
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    for _ in 0..20 {
        let r = within(health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        }))
        .await
        .expect("health is never shed")
        .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
    release.store(true, Ordering::SeqCst);
    within(busy)
        .await
        .expect("task")
        .expect("busy call completes");
}

#[tokio::test]
async fn the_keyring_can_live_outside_the_data_directory() {
    let keys = tempfile::tempdir().expect("tempdir");
    let keyring = keys.path().join("keyring.json");
    let k = keyring.clone();
    let server = TestServer::start_with(move |s| s.keyring_file = Some(k)).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let out = within(client.compact(authed(externalizing("t-keys"), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let artifact_id = out.new_artifact_ids.first().cloned().expect("artifact");
    assert!(keyring.is_file(), "keyring created where configured");
    assert!(
        !server.data_dir.join("keys").exists(),
        "no second keyring in data_dir"
    );
    within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-keys".into(),
            artifact_id,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("decrypts with the configured keyring");
}
