//! Compare-and-swap under contention: 32 concurrent Compact calls on one
//! thread with the same expected version → exactly one commit, the rest
//! ABORTED, the stored plan intact, and no artifact of a loser left behind.

use crate::server_common;

use server_common::*;
use tonic::Code;

use compactd::proto::pb;

fn files_under(dir: &std::path::Path, name: &str) -> usize {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|f| f == name) {
                n += std::fs::read_dir(&p).map(|d| d.count()).unwrap_or(0);
            } else {
                n += files_under(&p, name);
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_compacts_commit_exactly_once() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let tok = token("acme", ALL);

    let calls = (0..32).map(|_| {
        let mut client = client.clone();
        let tok = tok.clone();
        tokio::spawn(async move {
            let mut req = compact_req(big_thread("hot", 2000), 8000);
            req.policy = Some(externalize_policy());
            req.expected_version = Some(0);
            client.compact(authed(req, &tok)).await
        })
    });
    let results = within(futures_join(calls.collect())).await;

    let mut winners = Vec::new();
    for r in results {
        match r {
            Ok(resp) => winners.push(resp.into_inner()),
            Err(status) => assert_status(&status, Code::Aborted, None),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit");
    let winner = winners.remove(0);
    assert_eq!(winner.version, 1);
    let plan = winner.plan.expect("plan");

    // The stored plan is the winner's, whole.
    let mut client = client.clone();
    let rendered = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(big_thread("hot", 2000)),
                ..Default::default()
            },
            &tok,
        ))
        .await
        .expect("render the committed plan")
        .into_inner();
    assert_eq!(rendered.plan_version, 1);
    let audit = rendered.audit.expect("audit");
    assert_eq!(audit.plan_fingerprint, plan.fingerprint);
    assert_eq!(
        audit.artifact_ids,
        plan.externalizations
            .iter()
            .map(|e| e.artifact_id.clone())
            .collect::<Vec<_>>()
    );

    // Losers deleted what they wrote: only the winner's artifact is on disk.
    assert_eq!(files_under(&server.data_dir, "artifacts"), 1);

    // The next compare-and-swap builds on version 1.
    let mut req = compact_req(big_thread("hot", 2000), 8000);
    req.policy = Some(externalize_policy());
    req.policy.as_mut().expect("policy").target_ratio = Some(0.5);
    req.expected_version = Some(1);
    let next = client
        .compact(authed(req, &tok))
        .await
        .expect("next")
        .into_inner();
    assert_eq!(next.version, 2);
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}
