//! Secrets in a thread never reach what compactd keeps: the externalized
//! artifact (read back through Rehydrate), the plan's summaries and every
//! file at rest carry `[REDACTED:<kind>]` instead.

mod server_common;

use compactd::proto::pb;
use server_common::*;

const SECRETS: &[&str] = &[
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2-prod",
    "sk-proj-abcdefghijklmnop1234",
    "s3cr3t-pw",
];

fn leaky_thread(id: &str) -> pb::Thread {
    let mut t = big_thread(id, 2000);
    let secrets = "deploy env:\n  AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n  password: hunter2-prod\n  OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234\n  DATABASE_URL=postgres://app:s3cr3t-pw@db.internal:5432/main\n";
    t.messages[2] = result(
        "t1",
        1,
        "c1",
        "read_file",
        format!("{secrets}{}", big_output(2000)),
    );
    t
}

#[tokio::test]
async fn artifacts_summaries_and_files_at_rest_are_redacted() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut req = compact_req(leaky_thread("t-leak"), 8000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    let artifact_id = out.new_artifact_ids.first().cloned().expect("externalized");
    let plan_text = format!("{plan:?}");
    for s in SECRETS {
        assert!(!plan_text.contains(s), "{s} in the plan");
    }
    let back = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-leak".into(),
            artifact_id,
            max_tokens: 100_000,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("rehydrate")
    .into_inner();
    for s in SECRETS {
        assert!(!back.content.contains(s), "{s} in the artifact");
    }
    assert!(back.content.contains("[REDACTED:aws_access_key_id]"));
    assert!(back.content.contains("processed batch"), "the rest is kept");
    // The plan file on disk holds none of them either.
    let mut files = Vec::new();
    let mut stack = vec![server.data_dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("dir").flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    for f in files {
        let bytes = std::fs::read(&f).expect("file");
        for s in SECRETS {
            assert!(
                !bytes.windows(s.len()).any(|w| w == s.as_bytes()),
                "{s} at rest in {f:?}"
            );
        }
    }
}
