use std::path::{Component, Path};
use std::sync::Arc;

use proptest::prelude::*;

use super::fs::{thread_dir_name, KeyedLocks};
use super::*;
use crate::model::{CompactionPlan, DropRecord, DroppedSpanIndex, SpanReference};

fn plan(thread_id: &str, marker: &str) -> CompactionPlan {
    CompactionPlan {
        fingerprint: marker.into(),
        drops: vec![DropRecord {
            span: SpanReference {
                message_ids: vec!["m1".into(), "m2".into()],
                first_turn: 1,
                last_turn: 2,
            },
            reason: "window".into(),
            index: DroppedSpanIndex {
                keywords: vec!["deploy".into()],
                summary: "old chatter".into(),
                timestamp: None,
            },
            archive_artifact_id: None,
        }]
        .into(),
        original_token_count: 1000,
        compacted_token_count: 400,
        ..CompactionPlan::new(thread_id)
    }
}

fn meta(tenant: &str, thread_id: &str) -> ArtifactMeta {
    ArtifactMeta {
        tenant: tenant.into(),
        thread_id: thread_id.into(),
        created_at_unix_ms: fs::now_unix_ms(),
        ttl_seconds: None,
        sensitivity: Sensitivity::Confidential,
        key_id: None,
        content_hash: String::new(),
        size_bytes: 0,
        message_ids: vec!["m7".into()],
    }
}

fn thread_dir(root: &Path, tenant: &str, thread: &str) -> std::path::PathBuf {
    root.join("tenants")
        .join(tenant)
        .join("threads")
        .join(thread_dir_name(thread))
}

#[tokio::test]
async fn past_plan_versions_are_kept_for_a_while_and_deleted_with_the_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    let total = super::PLAN_HISTORY + 3;
    for v in 0..total {
        let mut p = plan("t1", "history");
        p.original_token_count = 1000 + v as u32;
        store.commit("acme", "t1", &p, v).await.expect("commit");
    }
    let current = store.get("acme", "t1").await.expect("get").expect("plan");
    assert_eq!(current.version, total);
    // The last PLAN_HISTORY versions, each as committed.
    for v in [total, total - 1, total - super::PLAN_HISTORY + 1] {
        let p = store
            .get_version("acme", "t1", v)
            .await
            .expect("read")
            .unwrap_or_else(|| panic!("version {v} kept"));
        assert_eq!(p.version, v);
        assert_eq!(p.plan.original_token_count, 1000 + (v - 1) as u32);
    }
    for v in [1, 2, total - super::PLAN_HISTORY, total + 1] {
        assert_eq!(
            store.get_version("acme", "t1", v).await.expect("read"),
            None,
            "{v}"
        );
    }
    // Another tenant reads none of them.
    assert_eq!(
        store
            .get_version("globex", "t1", total - 1)
            .await
            .expect("read"),
        None
    );
    assert!(store.delete("acme", "t1").await.expect("delete"));
    assert_eq!(
        store
            .get_version("acme", "t1", total - 1)
            .await
            .expect("read"),
        None
    );
    assert!(!thread_dir(dir.path(), "acme", "t1").join("plans").exists());
}

#[tokio::test]
async fn plan_versions_and_cas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    assert_eq!(store.get("acme", "t1").await.expect("get"), None);

    assert_eq!(
        store
            .commit("acme", "t1", &plan("t1", "a"), 0)
            .await
            .expect("v1"),
        1
    );
    let got = store.get("acme", "t1").await.expect("get").expect("plan");
    assert_eq!(got.version, 1);
    assert_eq!(got.plan.version, 1);
    assert_eq!(got.plan.fingerprint, "a");
    assert_eq!(got.plan.drops, plan("t1", "a").drops);
    assert!(got.committed_at_unix_ms > 0);

    match store.commit("acme", "t1", &plan("t1", "b"), 0).await {
        Err(StoreError::Conflict {
            expected: 0,
            current: 1,
        }) => {}
        other => panic!("want conflict, got {other:?}"),
    }
    match store.commit("acme", "t1", &plan("t1", "b"), 5).await {
        Err(StoreError::Conflict {
            expected: 5,
            current: 1,
        }) => {}
        other => panic!("want conflict, got {other:?}"),
    }
    assert_eq!(
        store
            .commit("acme", "t1", &plan("t1", "b"), 1)
            .await
            .expect("v2"),
        2
    );

    // Survives a restart.
    drop(store);
    let store = FsPlanStore::open(dir.path()).expect("reopen");
    let got = store.get("acme", "t1").await.expect("get").expect("plan");
    assert_eq!((got.version, got.plan.fingerprint.as_str()), (2, "b"));

    // A plan for another thread is refused rather than filed under the wrong key.
    assert!(matches!(
        store.commit("acme", "t1", &plan("t2", "x"), 2).await,
        Err(StoreError::InvalidId(_))
    ));
    assert!(store.health().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_exactly_one_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(FsPlanStore::open(dir.path()).expect("open"));
    store
        .commit("acme", "t", &plan("t", "base"), 0)
        .await
        .expect("v1");

    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let r = store
                    .commit("acme", "t", &plan("t", &format!("c{i}")), 1)
                    .await;
                (i, r)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut conflicts = 0;
    for task in tasks {
        match task.await.expect("join") {
            (i, Ok(2)) => winners.push(i),
            (
                _,
                Err(StoreError::Conflict {
                    expected: 1,
                    current: 2,
                }),
            ) => conflicts += 1,
            (i, other) => panic!("task {i}: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit wins");
    assert_eq!(conflicts, 31);
    let got = store.get("acme", "t").await.expect("get").expect("plan");
    assert_eq!(got.version, 2);
    assert_eq!(
        got.plan.fingerprint,
        format!("c{}", winners[0]),
        "the winner's plan is stored"
    );
    // One (now unused) lock for the one thread.
    assert_eq!(store.locks.len(), 1);
}

/// A read that misses the plan cache waits for a commit in flight on the
/// same thread: otherwise it could read the older plan from disk and cache it
/// after the commit cached the newer one, and every later read would serve a
/// stale version (and the caller's compare-and-swap would keep failing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_misses_waits_for_a_commit_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = FsPlanStore::open(dir.path()).expect("open");
    other
        .commit("acme", "t", &plan("t", "v1"), 0)
        .await
        .expect("v1");
    let store = Arc::new(FsPlanStore::open(dir.path()).expect("open"));
    let path = thread_dir(dir.path(), "acme", "t").join("plan.json");
    // What a commit holds while it writes.
    let in_flight = store.locks.get(&path).lock_owned().await;
    let reader = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.get("acme", "t").await })
    };
    // Long enough for a read that did not wait to have read v1 from disk.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    other
        .commit("acme", "t", &plan("t", "v2"), 1)
        .await
        .expect("v2");
    drop(in_flight);
    let read = reader.await.expect("join").expect("read").expect("plan");
    assert_eq!(read.version, 2, "the read saw the plan the commit wrote");
    let cached = store.get("acme", "t").await.expect("get").expect("plan");
    assert_eq!(cached.version, 2);
}

#[test]
fn keyed_locks_prune_unused_entries() {
    let locks = KeyedLocks::default();
    let held = locks.get(Path::new("held"));
    for i in 0..5000 {
        let _ = locks.get(Path::new(&format!("k{i}")));
    }
    assert!(locks.len() <= 2048, "map grew to {}", locks.len());
    assert!(Arc::ptr_eq(&held, &locks.get(Path::new("held"))));
}

#[tokio::test]
async fn commits_to_different_threads_do_not_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(FsPlanStore::open(dir.path()).expect("open"));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let thread = format!("t{i}");
                store.commit("acme", &thread, &plan(&thread, "x"), 0).await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("join").expect("commit"), 1);
    }
}

#[tokio::test]
async fn torn_writes_never_surface() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    store
        .commit("acme", "t", &plan("t", "good"), 0)
        .await
        .expect("v1");
    let tdir = thread_dir(dir.path(), "acme", "t");
    let committed = std::fs::read(tdir.join("plan.json")).expect("plan file");

    // What a process killed mid-write leaves behind: a stray temp file and a truncated one.
    std::fs::write(
        tdir.join(".plan.json.tmp-00000000deadbeef"),
        b"{\"format\":1,\"ten",
    )
    .expect("w");
    std::fs::write(
        tdir.join(".plan.json.tmp-00000000feedface"),
        &committed[..committed.len() / 2],
    )
    .expect("w");
    let got = store.get("acme", "t").await.expect("get").expect("plan");
    assert_eq!((got.version, got.plan.fingerprint.as_str()), (1, "good"));

    // Commits carry on past the debris.
    assert_eq!(
        store
            .commit("acme", "t", &plan("t", "next"), 1)
            .await
            .expect("v2"),
        2
    );
    let got = store.get("acme", "t").await.expect("get").expect("plan");
    assert_eq!((got.version, got.plan.fingerprint.as_str()), (2, "next"));

    // Our own temp files do not linger after a successful commit.
    let temps = std::fs::read_dir(&tdir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .count();
    assert_eq!(temps, 2, "only the planted debris remains");

    // A damaged plan file is reported, not silently treated as "no plan" (which would reset CAS).
    // (A fresh store reads the disk; a running one serves its cache until the
    // next commit, which re-reads under the lock and reports it too.)
    std::fs::write(tdir.join("plan.json"), &committed[..committed.len() - 3]).expect("w");
    let fresh = FsPlanStore::open(dir.path()).expect("open");
    assert!(matches!(
        fresh.get("acme", "t").await,
        Err(StoreError::Corrupt(_))
    ));
    // The header still names version 1, so a commit on 0 is refused (the
    // damage itself shows on the next read).
    assert!(matches!(
        store.commit("acme", "t", &plan("t", "x"), 0).await,
        Err(StoreError::Conflict { current: 1, .. } | StoreError::Corrupt(_))
    ));
}

#[tokio::test]
async fn plans_are_isolated_by_tenant_whatever_the_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    store
        .commit("victim", "t", &plan("t", "secret"), 0)
        .await
        .expect("v1");

    // Same thread id, other tenant: its own empty history.
    assert_eq!(store.get("attacker", "t").await.expect("get"), None);
    assert_eq!(
        store
            .commit("attacker", "t", &plan("t", "mine"), 0)
            .await
            .expect("v1"),
        1
    );
    let victim = store.get("victim", "t").await.expect("get").expect("plan");
    assert_eq!(victim.plan.fingerprint, "secret");

    // Thread ids are hex-encoded on disk, so odd ones are just names...
    for thread in ["..%2f..%2fvictim", "~", "%00", "..."] {
        assert_eq!(
            store.get("attacker", thread).await.expect("get"),
            None,
            "{thread:?}"
        );
        store
            .commit("attacker", thread, &plan(thread, "probe"), 0)
            .await
            .expect("own namespace");
    }
    // ...and ones that look like paths are refused outright (defense in depth).
    for thread in [
        "../../victim/threads/74",
        "..",
        "/etc/passwd",
        "t/../../victim",
        "C:\\victim",
    ] {
        assert!(
            matches!(
                store.get("attacker", thread).await,
                Err(StoreError::InvalidId(_))
            ),
            "{thread:?}"
        );
    }
    // Tenant ids that would escape are refused.
    for tenant in [
        "../victim",
        "..",
        ".",
        "",
        "/abs",
        "a/b",
        "a\\b",
        "a\0b",
        "a\nb",
    ] {
        assert!(
            matches!(store.get(tenant, "t").await, Err(StoreError::InvalidId(_))),
            "{tenant:?}"
        );
        assert!(
            matches!(
                store.commit(tenant, "t", &plan("t", "x"), 0).await,
                Err(StoreError::InvalidId(_))
            ),
            "{tenant:?}"
        );
    }
    // "..%2f" is a literal (odd but harmless) tenant name, not an escape.
    assert_eq!(store.get("..%2fvictim", "t").await.expect("get"), None);

    let victim = store.get("victim", "t").await.expect("get").expect("plan");
    assert_eq!(
        (victim.version, victim.plan.fingerprint.as_str()),
        (1, "secret")
    );
    assert_all_inside(dir.path());
}

/// Every file the stores created is under `tenants/` (or `keys/`, the
/// embedded keyring, which no id can name).
fn assert_all_inside(root: &Path) {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir)
            .expect("read_dir")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            out.push(path.clone());
            if path.is_dir() {
                walk(&path, out);
            }
        }
    }
    let mut all = Vec::new();
    walk(root, &mut all);
    for path in all {
        let rel = path.strip_prefix(root).expect("inside");
        let first = rel.components().next();
        assert!(
            first == Some(Component::Normal("tenants".as_ref()))
                || first == Some(Component::Normal("keys".as_ref())),
            "{path:?}"
        );
    }
}

#[tokio::test]
async fn long_thread_ids_are_hashed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    let long = "é".repeat(128); // 256 bytes: hex would be 512 characters
    store
        .commit("acme", &long, &plan(&long, "l"), 0)
        .await
        .expect("commit");
    let got = store.get("acme", &long).await.expect("get").expect("plan");
    assert_eq!(got.plan.thread_id, long);
    assert!(thread_dir_name(&long).starts_with("sha256-"));
    assert_eq!(thread_dir_name("t1"), "7431");
    assert!(matches!(
        store.get("acme", &"x".repeat(257)).await,
        Err(StoreError::InvalidId(_))
    ));
}

#[tokio::test]
async fn health_reports_a_missing_data_dir() {
    let parent = tempfile::tempdir().expect("tempdir");
    let data = parent.path().join("data");
    let store = FsPlanStore::open(&data).expect("open");
    assert!(store.health().await.is_ok());
    std::fs::remove_dir_all(&data).expect("rm");
    assert!(matches!(
        store.health().await,
        Err(StoreError::Unavailable(_))
    ));
    // Writes do not quietly recreate it either.
    assert!(matches!(
        store.commit("acme", "t", &plan("t", "x"), 0).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(!data.exists());
    // A file where the directory should be is just as unavailable.
    std::fs::write(&data, b"not a dir").expect("w");
    assert!(matches!(
        store.health().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        FsPlanStore::open(&data),
        Err(StoreError::Unavailable(_))
    ));
}

#[tokio::test]
async fn artifact_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let content = b"line one\nline two\n\0binary\xff".to_vec();
    let id = store.put(&meta("acme", "t"), &content).await.expect("put");
    validate_artifact_id(&id).expect("well-formed id");

    let (m, bytes) = store.get("acme", "t", &id).await.expect("get");
    assert_eq!(bytes, content);
    assert_eq!(m.content_hash, content_hash(&content));
    assert_eq!(m.size_bytes, content.len() as u64);
    assert_eq!(m.sensitivity, Sensitivity::Confidential);
    assert_eq!(m.message_ids, vec!["m7".to_string()]);
    assert_eq!(store.get_metadata("acme", "t", &id).await.expect("meta"), m);

    // Ids are fresh each time, even for identical content.
    let id2 = store.put(&meta("acme", "t"), &content).await.expect("put");
    assert_ne!(id, id2);

    // A caller-supplied hash must be right.
    let mut lying = meta("acme", "t");
    lying.content_hash = content_hash(b"something else");
    assert!(matches!(
        store.put(&lying, &content).await,
        Err(StoreError::Corrupt(_))
    ));
    let mut honest = meta("acme", "t");
    honest.content_hash = content_hash(&content);
    store.put(&honest, &content).await.expect("matching hash");

    store.delete("acme", "t", &id).await.expect("delete");
    assert!(matches!(
        store.get("acme", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.delete("acme", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(store.get("acme", "t", &id2).await.is_ok());
}

#[tokio::test]
async fn empty_artifact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let id = store.put(&meta("acme", "t"), b"").await.expect("put");
    let (m, bytes) = store.get("acme", "t", &id).await.expect("get");
    assert!(bytes.is_empty());
    assert_eq!(m.size_bytes, 0);
}

#[tokio::test]
async fn artifacts_are_isolated_and_ids_validated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let id = store
        .put(&meta("victim", "t"), b"secret")
        .await
        .expect("put");

    assert!(matches!(
        store.get("attacker", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.get_metadata("attacker", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.delete("attacker", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.get("victim", "other-thread", &id).await,
        Err(StoreError::NotFound)
    ));
    for thread in ["../t", "t/..", "/t", "..%2ft"] {
        assert!(
            store.get("victim", thread, &id).await.is_err(),
            "{thread:?}"
        );
    }
    for tenant in ["../victim", "..", "/victim", "victim/../victim"] {
        assert!(
            matches!(
                store.get(tenant, "t", &id).await,
                Err(StoreError::InvalidId(_))
            ),
            "{tenant:?}"
        );
    }
    let unknown = format!("art_{}", "0".repeat(32));
    assert!(matches!(
        store.get("victim", "t", &unknown).await,
        Err(StoreError::NotFound)
    ));
    for bad in [
        String::new(),
        "art_".into(),
        id.to_uppercase(),
        format!("{id}0"),
        id[..35].to_string(),
        format!("art_../../../../{}", &id[20..]),
        "../plan.json".into(),
        format!("ART_{}", &id[4..]),
        format!("art_{}", "g".repeat(32)),
    ] {
        assert!(
            matches!(
                store.get("victim", "t", &bad).await,
                Err(StoreError::InvalidId(_))
            ),
            "{bad:?}"
        );
        assert!(
            matches!(
                store.delete("victim", "t", &bad).await,
                Err(StoreError::InvalidId(_))
            ),
            "{bad:?}"
        );
    }
    // Tenant/thread are checked at put time too.
    assert!(matches!(
        store.put(&meta("../victim", "t"), b"x").await,
        Err(StoreError::InvalidId(_))
    ));
    assert_eq!(
        store.get("victim", "t", &id).await.expect("still there").1,
        b"secret"
    );
    assert_all_inside(dir.path());
}

#[tokio::test]
async fn damaged_artifacts_are_corrupt_not_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let id = store
        .put(&meta("acme", "t"), b"0123456789")
        .await
        .expect("put");
    let path = thread_dir(dir.path(), "acme", "t")
        .join("artifacts")
        .join(&id);
    let original = std::fs::read(&path).expect("read");

    let mut flipped = original.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    std::fs::write(&path, &flipped).expect("w");
    assert!(matches!(
        store.get("acme", "t", &id).await,
        Err(StoreError::Corrupt(_))
    ));

    std::fs::write(&path, &original[..original.len() - 4]).expect("w");
    assert!(matches!(
        store.get("acme", "t", &id).await,
        Err(StoreError::Corrupt(_))
    ));

    std::fs::write(&path, &original[..10]).expect("w");
    assert!(matches!(
        store.get_metadata("acme", "t", &id).await,
        Err(StoreError::Corrupt(_))
    ));

    // A file copied under another tenant's key is detected by its header.
    let other = thread_dir(dir.path(), "other", "t").join("artifacts");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join(&id), &original).expect("w");
    assert!(matches!(
        store.get("other", "t", &id).await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test]
async fn expired_artifacts_read_as_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let mut old = meta("acme", "t");
    old.created_at_unix_ms = fs::now_unix_ms() - 10_000;
    old.ttl_seconds = Some(5);
    let id = store.put(&old, b"stale").await.expect("put");
    assert!(matches!(
        store.get("acme", "t", &id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.get_metadata("acme", "t", &id).await,
        Err(StoreError::NotFound)
    ));

    let mut fresh = meta("acme", "t");
    fresh.ttl_seconds = Some(3600);
    let id = store.put(&fresh, b"fresh").await.expect("put");
    assert_eq!(store.get("acme", "t", &id).await.expect("get").1, b"fresh");
}

#[test]
fn segment_and_id_validation() {
    for ok in [
        "acme",
        "a.b",
        "...",
        "..%2f",
        "with space",
        "ünïcode",
        &"x".repeat(256),
    ] {
        validate_path_segment("tenant", ok).expect(ok);
    }
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "/",
        "a\\b",
        "a\0",
        "\t",
        "a\u{7f}",
        &"x".repeat(257),
    ] {
        let err = validate_path_segment("tenant", bad).unwrap_err();
        assert!(err.to_string().contains("tenant"), "{err}");
    }
    validate_artifact_id("art_0123456789abcdef0123456789abcdef").expect("ok");
    assert!(validate_artifact_id("art_0123456789ABCDEF0123456789abcdef").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]

    /// Whatever ids pass validation, the key is exactly four normal
    /// components below the root: no escape, no aliasing into another tenant.
    #[test]
    fn keys_never_escape(tenant in "\\PC{0,40}", thread in "\\PC{0,300}") {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = fs::DataDir::open(tmp.path()).expect("open");
        if let Ok(path) = dir.thread_dir(&tenant, &thread) {
            let rel = path.strip_prefix(dir.root()).expect("under root");
            let parts: Vec<_> = rel.components().collect();
            prop_assert_eq!(parts.len(), 4);
            prop_assert!(parts.iter().all(|c| matches!(c, Component::Normal(_))));
            prop_assert_eq!(parts[1], Component::Normal(tenant.as_ref()));
            prop_assert!(thread_dir_name(&thread).len() <= 255);
        }
    }
}

#[tokio::test]
async fn artifacts_are_ciphertext_at_rest_and_bound_to_their_metadata_and_context() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let secret = b"db password: correct-horse-battery-staple; rows 1..500";
    let id = store.put(&meta("acme", "t"), secret).await.expect("put");
    let path = thread_dir(dir.path(), "acme", "t")
        .join("artifacts")
        .join(&id);
    let raw = std::fs::read(&path).expect("read");
    assert!(raw.starts_with(b"compactd-artifact v2\n"));
    for fragment in [&b"correct-horse"[..], b"battery", b"rows 1..500"] {
        assert!(
            !raw.windows(fragment.len()).any(|w| w == fragment),
            "plaintext fragment {:?} at rest",
            String::from_utf8_lossy(fragment)
        );
    }
    let (m, back) = store.get("acme", "t", &id).await.expect("get");
    assert_eq!(back, secret);
    assert!(m.key_id.as_deref().is_some_and(|k| k.starts_with("local-")));

    // Editing the metadata (lowering the sensitivity) breaks the seal.
    let text = String::from_utf8_lossy(&raw).into_owned();
    let header_end = raw
        .iter()
        .skip(21)
        .position(|&b| b == b'\n')
        .expect("header")
        + 21;
    let header = String::from_utf8(raw[21..header_end].to_vec()).expect("utf8 header");
    assert!(text.contains("\"confidential\""));
    let lowered = header.replace("\"confidential\"", "\"public\"");
    let mut edited = raw[..21].to_vec();
    edited.extend_from_slice(lowered.as_bytes());
    edited.extend_from_slice(&raw[header_end..]);
    std::fs::write(&path, &edited).expect("w");
    assert!(matches!(
        store.get("acme", "t", &id).await,
        Err(StoreError::Corrupt(_))
    ));

    // The file under another tenant's path, its header rewritten to match:
    // the key does not unwrap under the other tenant's context.
    std::fs::write(&path, &raw).expect("restore");
    let other = thread_dir(dir.path(), "globex", "t").join("artifacts");
    std::fs::create_dir_all(&other).expect("mkdir");
    let forged = header.replace("\"tenant\":\"acme\"", "\"tenant\":\"globex\"");
    assert_ne!(forged, header);
    let mut moved = raw[..21].to_vec();
    moved.extend_from_slice(forged.as_bytes());
    moved.extend_from_slice(&raw[header_end..]);
    std::fs::write(other.join(&id), &moved).expect("w");
    match store.get("globex", "t", &id).await {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("decrypt"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The original still reads; rotation keeps it readable.
    let keyring = super::envelope::LocalKeyring::open_or_create(
        &dir.path().join(super::artifact::KEYRING_FILE),
    )
    .expect("keyring");
    keyring.rotate().expect("rotate");
    let store = FsArtifactStore::open(dir.path()).expect("reopen");
    assert_eq!(
        store.get("acme", "t", &id).await.expect("old key").1,
        secret
    );
    let id2 = store.put(&meta("acme", "t"), b"new").await.expect("put");
    let (m2, _) = store.get("acme", "t", &id2).await.expect("get");
    assert_ne!(m2.key_id, m.key_id, "new artifacts use the new key");
}

#[tokio::test]
async fn delete_thread_removes_damaged_artifacts_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let a = store
        .put(&meta("acme", "t"), b"kept whole")
        .await
        .expect("put");
    let b = store
        .put(&meta("acme", "t"), b"to be damaged")
        .await
        .expect("put");
    let artifacts = thread_dir(dir.path(), "acme", "t").join("artifacts");
    std::fs::write(artifacts.join(&b), b"compactd-art").expect("damage");
    let removed = store.delete_thread("acme", "t").await.expect("delete");
    assert_eq!(removed.artifacts, 2, "{a} and the damaged {b}");
    assert!(!artifacts.exists(), "nothing left behind");
}

#[tokio::test]
async fn plans_are_sealed_per_tenant_at_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsPlanStore::open(dir.path()).expect("open");
    for v in 0..2 {
        store
            .commit("acme", "t", &plan("t", "SENTINEL-fingerprint"), v)
            .await
            .expect("commit");
    }
    let tdir = thread_dir(dir.path(), "acme", "t");
    let current = std::fs::read(tdir.join("plan.json")).expect("plan file");
    let kept = std::fs::read(tdir.join(PLAN_HISTORY_DIR).join(plan_history_name(1))).expect("kept");
    for bytes in [&current, &kept] {
        assert!(bytes.starts_with(b"compactd-plan v2\n"), "sealed format");
        for plain in ["SENTINEL", "old chatter", "deploy", "window"] {
            assert!(
                !bytes.windows(plain.len()).any(|w| w == plain.as_bytes()),
                "{plain:?} is readable at rest"
            );
        }
    }
    // A fresh store (no cache) opens both with the keyring.
    let fresh = FsPlanStore::open(dir.path()).expect("open");
    let got = fresh.get("acme", "t").await.expect("get").expect("plan");
    assert_eq!(
        (got.version, got.plan.fingerprint.as_str()),
        (2, "SENTINEL-fingerprint")
    );
    let v1 = fresh
        .get_version("acme", "t", 1)
        .await
        .expect("v1")
        .expect("kept");
    assert_eq!(v1.version, 1);

    // Copied under another tenant it is refused by its header; with the
    // header edited to match it still does not open: the data key is bound
    // to the tenant and the header to the content.
    let gdir = thread_dir(dir.path(), "globex", "t");
    std::fs::create_dir_all(&gdir).expect("dir");
    std::fs::write(gdir.join("plan.json"), &current).expect("w");
    assert!(matches!(
        fresh.get("globex", "t").await,
        Err(StoreError::Corrupt(_))
    ));
    let mut edited = current.clone();
    let at = edited
        .windows(b"\"tenant\":\"acme\"".len())
        .position(|w| w == b"\"tenant\":\"acme\"")
        .expect("tenant in header");
    edited.splice(
        at..at + b"\"tenant\":\"acme\"".len(),
        b"\"tenant\":\"glob\"".iter().copied(),
    );
    let gdir = thread_dir(dir.path(), "glob", "t");
    std::fs::create_dir_all(&gdir).expect("dir");
    std::fs::write(gdir.join("plan.json"), &edited).expect("w");
    assert!(matches!(
        fresh.get("glob", "t").await,
        Err(StoreError::Corrupt(_))
    ));

    // A plan written before encryption (format 1, plain JSON) still reads.
    let legacy = serde_json::json!({
        "format": 1, "tenant": "acme", "thread_id": "old", "version": 3,
        "committed_at_unix_ms": 5, "plan": plan("old", "legacy"),
    });
    let odir = thread_dir(dir.path(), "acme", "old");
    std::fs::create_dir_all(&odir).expect("dir");
    std::fs::write(
        odir.join("plan.json"),
        serde_json::to_vec(&legacy).expect("json"),
    )
    .expect("w");
    let got = fresh.get("acme", "old").await.expect("get").expect("plan");
    assert_eq!((got.version, got.plan.fingerprint.as_str()), (3, "legacy"));
    // ... and the next commit on it is sealed.
    fresh
        .commit("acme", "old", &plan("old", "next"), 3)
        .await
        .expect("commit");
    assert!(std::fs::read(odir.join("plan.json"))
        .expect("r")
        .starts_with(b"compactd-plan v2\n"));
}

#[tokio::test]
async fn a_shredded_tenant_reads_key_deleted_and_others_are_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = FsPlanStore::open(dir.path()).expect("open");
    let artifacts = FsArtifactStore::open(dir.path()).expect("open");
    for tenant in ["acme", "globex"] {
        plans
            .commit(tenant, "t", &plan("t", "p"), 0)
            .await
            .expect("commit");
    }
    let id = artifacts
        .put(&meta("acme", "t"), b"acme's content")
        .await
        .expect("put");
    let other = artifacts
        .put(&meta("globex", "t"), b"globex's content")
        .await
        .expect("put");

    let ring =
        envelope::LocalKeyring::open_or_create(&dir.path().join(KEYRING_FILE)).expect("ring");
    assert_eq!(ring.shred("acme").expect("shred"), 1);

    // A fresh store has nothing cached: the plan cannot be opened.
    let fresh = FsPlanStore::open(dir.path()).expect("open");
    assert!(matches!(
        fresh.get("acme", "t").await,
        Err(StoreError::KeyDeleted(_))
    ));
    assert!(matches!(
        artifacts.get("acme", "t", &id).await,
        Err(StoreError::KeyDeleted(_))
    ));
    assert_eq!(
        fresh
            .get("globex", "t")
            .await
            .expect("get")
            .expect("plan")
            .version,
        1
    );
    assert_eq!(
        artifacts.get("globex", "t", &other).await.expect("get").1,
        b"globex's content"
    );
    // Deleting what cannot be read still works.
    assert!(fresh.delete("acme", "t").await.expect("delete"));
}

#[tokio::test]
async fn rotation_rewraps_data_keys_without_touching_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = FsPlanStore::open(dir.path()).expect("open");
    let artifacts = FsArtifactStore::open(dir.path()).expect("open");
    plans
        .commit("acme", "t", &plan("t", "p"), 0)
        .await
        .expect("commit");
    plans
        .commit("acme", "t", &plan("t", "q"), 1)
        .await
        .expect("commit");
    let id = artifacts
        .put(&meta("acme", "t"), b"the content")
        .await
        .expect("put");
    let ring =
        envelope::LocalKeyring::open_or_create(&dir.path().join(KEYRING_FILE)).expect("ring");
    let old_key = ring.tenant_key_id("acme").expect("acme has a key");
    let tdir = thread_dir(dir.path(), "acme", "t");
    let art_path = tdir.join("artifacts").join(&id);
    let body = |bytes: &[u8]| {
        let first = bytes.iter().position(|&b| b == b'\n').expect("magic") + 1;
        let second = first
            + bytes[first..]
                .iter()
                .position(|&b| b == b'\n')
                .expect("header")
            + 1;
        bytes[second..].to_vec()
    };
    let before = std::fs::read(&art_path).expect("artifact");
    let plan_before = std::fs::read(tdir.join("plan.json")).expect("plan");

    ring.rotate().expect("rotate");
    let done = rewrap::rewrap_data_dir(dir.path(), &ring).expect("rewrap");
    // plan.json, two kept versions, one artifact.
    assert_eq!(done.rewrapped, 4, "{done:?}");
    let again = rewrap::rewrap_data_dir(dir.path(), &ring).expect("rewrap");
    assert_eq!((again.rewrapped, again.current), (0, 4), "idempotent");

    let after = std::fs::read(&art_path).expect("artifact");
    assert_eq!(body(&after), body(&before), "the ciphertext is the same");
    assert_ne!(after, before, "the envelope is not");
    let plan_after = std::fs::read(tdir.join("plan.json")).expect("plan");
    assert_eq!(body(&plan_after), body(&plan_before));
    let new_key = ring.tenant_key_id("acme").expect("key");
    assert!(String::from_utf8_lossy(&plan_after).contains(&new_key));
    assert!(!String::from_utf8_lossy(&plan_after).contains(&format!("\"key_id\":\"{old_key}\"")));

    // Everything still opens, in fresh stores.
    let fresh = FsPlanStore::open(dir.path()).expect("open");
    assert_eq!(
        fresh
            .get("acme", "t")
            .await
            .expect("get")
            .expect("plan")
            .version,
        2
    );
    assert!(fresh
        .get_version("acme", "t", 1)
        .await
        .expect("v1")
        .is_some());
    let artifacts = FsArtifactStore::open(dir.path()).expect("open");
    assert_eq!(
        artifacts.get("acme", "t", &id).await.expect("get").1,
        b"the content"
    );
}

/// An artifact written before encryption (format v1: magic, metadata line,
/// plaintext) is still read, checked against its tenant and its hash.
#[tokio::test]
async fn plaintext_v1_artifacts_are_still_read_and_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FsArtifactStore::open(dir.path()).expect("open");
    let content = b"written before encryption";
    let meta = meta("acme", "t").for_content(content).expect("meta");
    let id = "art_0123456789abcdef0123456789abcdef";
    let adir = thread_dir(dir.path(), "acme", "t").join("artifacts");
    std::fs::create_dir_all(&adir).expect("dir");
    let mut bytes = b"compactd-artifact v1\n".to_vec();
    bytes.extend_from_slice(&serde_json::to_vec(&meta).expect("json"));
    bytes.push(b'\n');
    bytes.extend_from_slice(content);
    std::fs::write(adir.join(id), &bytes).expect("w");
    let (got, back) = store.get("acme", "t", id).await.expect("reads");
    assert_eq!(back, content);
    assert_eq!(got.tenant, "acme");
    // Another tenant's path with the same file is refused by its metadata.
    let gdir = thread_dir(dir.path(), "globex", "t").join("artifacts");
    std::fs::create_dir_all(&gdir).expect("dir");
    std::fs::write(gdir.join(id), &bytes).expect("w");
    assert!(store.get("globex", "t", id).await.is_err());
    // A changed byte of content fails its hash.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(adir.join(id), &bad).expect("w");
    assert!(matches!(
        store.get("acme", "t", id).await,
        Err(StoreError::Corrupt(_))
    ));
}

fn session_write(base: Option<Peek>, keep: Vec<SegmentRef>, content: &str) -> SessionWrite {
    SessionWrite {
        base,
        digest: "d".into(),
        messages: keep.iter().map(|s| s.messages).sum::<u64>() + 1,
        keep,
        segment: Some((content.as_bytes().to_vec(), 1)),
        tail: String::new(),
        prefix: None,
        retire: Vec::new(),
    }
}

fn session_store(dir: &Path) -> ThreadStore {
    let keys: Arc<dyn envelope::KeyService> = Arc::new(
        envelope::LocalKeyring::open_or_create(&dir.join("keyring.json")).expect("keyring"),
    );
    ThreadStore::fs(dir, keys).expect("store")
}

#[tokio::test]
async fn sessions_append_by_compare_and_swap_and_are_sealed_per_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_store(dir.path());
    let h1 = store
        .write("acme", "t", session_write(None, vec![], "first message"))
        .await
        .expect("start");
    assert!(
        h1.version > 1_700_000_000_000_000,
        "numbered from the clock"
    );
    let base = store.peek("acme", "t", 0).await.expect("peek");
    assert_eq!(base.as_ref().map(|p| p.version), Some(h1.version));
    let h2 = store
        .write(
            "acme",
            "t",
            session_write(base.clone(), h1.segments.clone(), "second"),
        )
        .await
        .expect("append");
    assert_eq!((h2.version, h2.segments.len()), (h1.version + 1, 2));
    // The same base again loses, and names where the session is.
    let e = store
        .write(
            "acme",
            "t",
            session_write(base, h1.segments.clone(), "lost"),
        )
        .await
        .expect_err("stale");
    assert!(
        matches!(
            e,
            StoreError::Conflict { expected, current }
                if expected == h1.version && current == h2.version
        ),
        "{e:?}"
    );
    let head = store
        .head("acme", "t", 0)
        .await
        .expect("head")
        .expect("some");
    assert_eq!(
        head.segments, h2.segments,
        "the loser's segment is not listed"
    );
    let folder = thread_dir(dir.path(), "acme", "t").join("session");
    assert_eq!(
        std::fs::read_dir(&folder).expect("dir").count(),
        3,
        "head + 2 segments: the loser's was removed"
    );
    assert_eq!(
        store
            .segment("acme", "t", &head.segments[1])
            .await
            .expect("read"),
        b"second"
    );
    // Sealed: no content on disk; another tenant's path does not open it.
    for f in std::fs::read_dir(&folder).expect("dir") {
        let bytes = std::fs::read(f.expect("entry").path()).expect("read");
        assert!(!String::from_utf8_lossy(&bytes).contains("second"));
    }
    let other = thread_dir(dir.path(), "globex", "t").join("session");
    std::fs::create_dir_all(&other).expect("mkdir");
    for f in std::fs::read_dir(&folder).expect("dir") {
        let f = f.expect("entry");
        std::fs::copy(f.path(), other.join(f.file_name())).expect("copy");
    }
    assert!(store.head("globex", "t", 0).await.is_err());
    assert!(store
        .segment("globex", "t", &head.segments[0])
        .await
        .is_err());
    // A restart replaces the session and removes the old segments.
    let h3 = store
        .write("acme", "t", session_write(None, vec![], "again"))
        .await
        .expect("restart");
    assert_ne!(h3.session, h1.session);
    assert!(h3.version > h2.version);
    assert_eq!(std::fs::read_dir(&folder).expect("dir").count(), 2);
}

#[tokio::test]
async fn a_head_carries_its_tail_sealed_in_one_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_store(dir.path());
    let h1 = store
        .write("acme", "t", session_write(None, vec![], "first message"))
        .await
        .expect("start");
    let folder = thread_dir(dir.path(), "acme", "t").join("session");
    let objects = || std::fs::read_dir(&folder).expect("dir").count();
    assert_eq!(objects(), 2, "a head and the start's segment");
    let tail = "{\"role\":\"user\",\"text\":\"tail secret\"}\n[1,2]\n".to_string();
    let base = store.peek("acme", "t", 0).await.expect("peek");
    let append = SessionWrite {
        segment: None,
        tail: tail.clone(),
        messages: 3,
        ..session_write(base, h1.segments.clone(), "")
    };
    let h2 = store.write("acme", "t", append).await.expect("append");
    assert_eq!(objects(), 2, "the append is in the head: no new object");
    assert_eq!((h2.segments.len(), &h2.tail), (1, &tail));
    let read = store
        .head("acme", "t", 0)
        .await
        .expect("head")
        .expect("some");
    assert_eq!(read.tail, tail, "the tail comes back byte for byte");
    assert_eq!(read.segments, h1.segments);
    for f in std::fs::read_dir(&folder).expect("dir") {
        let bytes = std::fs::read(f.expect("entry").path()).expect("read");
        assert!(!String::from_utf8_lossy(&bytes).contains("tail secret"));
    }
}

/// Heads are not synced: after a crash one may be empty, cut short, or an
/// earlier version. None of them may pass for a session, and a start must
/// replace any of them.
#[tokio::test]
async fn a_torn_head_never_opens_and_a_start_replaces_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_store(dir.path());
    let h1 = store
        .write("acme", "t", session_write(None, vec![], "first"))
        .await
        .expect("start");
    let head_file = thread_dir(dir.path(), "acme", "t").join("session/head");
    let whole = std::fs::read(&head_file).expect("head");
    let header_end = whole.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let tears: [(&str, Vec<u8>); 4] = [
        ("empty", Vec::new()),
        ("the magic line only", whole[..header_end].to_vec()),
        ("cut in the body", whole[..whole.len() - 7].to_vec()),
        ("zeros", vec![0; whole.len()]),
    ];
    let mut last = h1.version;
    for (what, torn) in tears {
        std::fs::write(&head_file, &torn).expect("tear");
        let read = match store.peek("acme", "t", 0).await {
            Ok(Some(p)) => store.open_head("acme", "t", &p).await.map(|_| ()),
            Ok(None) => panic!("{what}: a torn head reads as no session"),
            Err(e) => Err(e),
        };
        assert!(
            matches!(read, Err(StoreError::Corrupt(_))),
            "{what}: {read:?}"
        );
        let h = store
            .write("acme", "t", session_write(None, vec![], "restart"))
            .await
            .unwrap_or_else(|e| panic!("{what}: a start replaces the torn head: {e:?}"));
        assert!(h.version > last, "{what}: versions only grow");
        last = h.version;
        let opened = store
            .head("acme", "t", 0)
            .await
            .expect("head")
            .expect("some");
        assert_eq!(opened.version, h.version, "{what}");
        assert_eq!(
            store
                .segment("acme", "t", &opened.segments[0])
                .await
                .expect("segment"),
            b"restart"
        );
    }
}

/// A torn head says nothing about its session, not even its idle time: the
/// sweeper goes by the file's age instead, and leaves a fresh one (a start
/// may be about to replace it) and other sessions alone.
#[tokio::test]
async fn a_torn_head_is_swept_once_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_store(dir.path());
    for thread in ["torn", "whole"] {
        store
            .write("acme", thread, session_write(None, vec![], "x"))
            .await
            .expect("start");
    }
    let folder = thread_dir(dir.path(), "acme", "torn").join("session");
    let head = folder.join("head");
    std::fs::write(&head, b"").expect("tear");
    assert_eq!(
        store.sweep(60_000).await.expect("sweep"),
        0,
        "torn but fresh"
    );
    assert!(folder.exists());
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(&head)
        .and_then(|f| f.set_modified(old))
        .expect("age the head");
    assert_eq!(store.sweep(60_000).await.expect("sweep"), 1);
    assert!(!folder.exists(), "the torn session's folder is gone");
    assert!(
        store
            .head("acme", "whole", 0)
            .await
            .expect("head")
            .is_some(),
        "a readable session not idle for a minute stays"
    );
}

#[tokio::test]
async fn idle_sessions_expire_and_are_swept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_store(dir.path());
    store
        .write("acme", "idle", session_write(None, vec![], "x"))
        .await
        .expect("start");
    assert!(store.head("acme", "idle", 0).await.expect("head").is_some());
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(
        store.head("acme", "idle", 1).await.expect("head").is_none(),
        "idle past the TTL reads as none"
    );
    assert_eq!(
        store.sweep(60_000).await.expect("sweep"),
        0,
        "not idle for a minute"
    );
    assert_eq!(store.sweep(1).await.expect("sweep"), 1);
    assert!(!thread_dir(dir.path(), "acme", "idle")
        .join("session")
        .exists());
    assert!(
        !store.delete("acme", "idle").await.expect("delete"),
        "already gone"
    );
}
