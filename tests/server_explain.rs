//! Explain through gRPC: where a text went under the committed plan —
//! verbatim, in a summary, compacted out into an artifact (found by
//! decrypting it), or nowhere — with the documented errors.

use crate::server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::Code;

fn explain(thread_id: &str, text: &str) -> pb::ExplainRequest {
    pb::ExplainRequest {
        thread_id: thread_id.into(),
        text: text.into(),
        ..Default::default()
    }
}

/// Line 123 of `big_output`: only the externalized tool result holds it.
const LOG_LINE: &str = "00123 INFO worker-4 processed batch";

#[tokio::test]
async fn explain_says_where_text_went() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let thread = big_thread("t-explain", 2000);
    let mut req = compact_req(thread.clone(), 8_000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    let externalized = plan
        .externalizations
        .iter()
        .find(|e| e.span.as_ref().is_some_and(|s| s.message_ids == ["t1"]))
        .expect("the big result is externalized");
    let artifact = externalized.artifact_id.clone();
    let recorded: Vec<&String> = plan
        .externalizations
        .iter()
        .filter_map(|r| r.span.as_ref())
        .chain(plan.summarizations.iter().filter_map(|r| r.span.as_ref()))
        .chain(plan.clearings.iter().filter_map(|r| r.span.as_ref()))
        .chain(plan.drops.iter().filter_map(|r| r.span.as_ref()))
        .flat_map(|s| &s.message_ids)
        .collect();

    // With the thread: the message that held it, what the plan did, and the
    // artifact that holds it now.
    let mut r = explain("t-explain", LOG_LINE);
    r.thread = Some(thread.clone());
    let e = within(client.explain(authed(r, &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.plan_version, plan.version);
    assert_eq!(e.verdict, pb::ExplainVerdict::CompactedOut as i32, "{e:?}");
    let hit = e
        .messages
        .iter()
        .find(|h| h.message_id == "t1")
        .expect("t1");
    assert!(!hit.verbatim);
    assert_eq!(hit.action, pb::EvictionAction::Externalized as i32);
    assert_eq!(hit.artifact_id, artifact);
    assert!(!hit.in_replacement);

    // Case does not matter.
    let mut r = explain("t-explain", &LOG_LINE.to_lowercase());
    r.thread = Some(thread.clone());
    let e = within(client.explain(authed(r, &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::CompactedOut as i32);

    // Without the thread, only the artifacts' contents can tell.
    let e = within(client.explain(authed(explain("t-explain", LOG_LINE), &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::NotFound as i32);
    let mut r = explain("t-explain", LOG_LINE);
    r.search_artifacts = true;
    let e = within(client.explain(authed(r, &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::CompactedOut as i32);
    assert!(e
        .artifacts
        .iter()
        .any(|a| a.artifact_id == artifact && a.message_ids == ["t1"]));

    // A message no record covers is verbatim; the plan decides which.
    let last = thread.messages.last().expect("messages");
    assert!(!recorded.contains(&&last.id));
    let mut r = explain("t-explain", "Answer number 4");
    r.thread = Some(thread.clone());
    let e = within(client.explain(authed(r, &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::Verbatim as i32, "{e:?}");
    assert!(e
        .messages
        .iter()
        .any(|h| h.message_id == "a4" && h.verbatim));

    // Text the thread never held.
    let mut r = explain("t-explain", "the zebra crossed at dawn");
    r.thread = Some(thread.clone());
    r.search_artifacts = true;
    let e = within(client.explain(authed(r, &acme)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::NotFound as i32);
    assert!(e.messages.is_empty() && e.summaries.is_empty() && e.artifacts.is_empty());

    // Searching artifacts reads them: it needs `rehydrate` too.
    let renderer = token("acme", &["render", "artifact:read:internal"]);
    let mut r = explain("t-explain", LOG_LINE);
    r.search_artifacts = true;
    let err = within(client.explain(authed(r, &renderer)))
        .await
        .expect_err("search without rehydrate");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // A caller who may not read the artifacts' sensitivity: listed, not searched.
    let reader = token("acme", &["render", "rehydrate"]);
    let mut r = explain("t-explain", LOG_LINE);
    r.search_artifacts = true;
    let e = within(client.explain(authed(r, &reader)))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(e.verdict, pb::ExplainVerdict::NotFound as i32);
    assert!(e.artifacts_not_searched.contains(&artifact));

    // Errors, each naming its field or cause.
    let err = within(client.explain(authed(explain("t-explain", "  "), &acme)))
        .await
        .expect_err("blank text");
    assert_status(&err, Code::InvalidArgument, Some("text"));
    let err = within(client.explain(authed(explain("t-explain", &"x".repeat(1_001)), &acme)))
        .await
        .expect_err("long text");
    assert_status(&err, Code::InvalidArgument, Some("text"));
    let mut r = explain("t-explain", "log");
    r.thread = Some(small_thread("another-thread"));
    let err = within(client.explain(authed(r, &acme)))
        .await
        .expect_err("thread id mismatch");
    assert_status(&err, Code::InvalidArgument, Some("thread.id"));
    let mut r = explain("t-explain", "log");
    r.plan_version = plan.version + 5;
    let err = within(client.explain(authed(r, &acme)))
        .await
        .expect_err("no such version");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = within(client.explain(authed(explain("t-none", "log"), &acme)))
        .await
        .expect_err("no plan");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // Another tenant sees no plan at all, whatever the body says.
    let other = token("globex", ALL);
    let err = within(client.explain(authed(explain("t-explain", LOG_LINE), &other)))
        .await
        .expect_err("other tenant");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = within(client.explain(authed(
        explain("t-explain", LOG_LINE),
        &token("acme", &["compact"]),
    )))
    .await
    .expect_err("no render permission");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    server.stop().await.expect("clean stop");
}

/// A past turn's plan: the thread grew, the plan moved on, and Explain still
/// answers for the version the earlier prompt was rendered from.
#[tokio::test]
async fn explain_answers_for_a_past_plan_version() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let thread = big_thread("t-past", 2000);
    let mut req = compact_req(thread.clone(), 8_000);
    req.policy = Some(externalize_policy());
    let first = within(client.compact(authed(req.clone(), &acme)))
        .await
        .expect("compact")
        .into_inner();
    // The thread grows: a second big result, a new version.
    let mut grown = thread.clone();
    grown
        .messages
        .push(text("u5", pb::Role::User, 5, "Read the second log."));
    grown.messages.push(call("a5", 5, "c5", "read_file"));
    grown
        .messages
        .push(result("t5", 5, "c5", "read_file", big_output(1500)));
    grown.messages.push(text(
        "a5b",
        pb::Role::Assistant,
        5,
        "The second log is fine too.",
    ));
    grown
        .messages
        .push(text("u6", pb::Role::User, 6, "Thanks."));
    req.thread = Some(grown.clone());
    let second = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact again")
        .into_inner();
    assert!(second.version > first.version);
    // At the first version, the first log's line is in its artifact.
    for (version, thread) in [(first.version, &thread), (0, &grown)] {
        let mut r = explain("t-past", LOG_LINE);
        r.plan_version = version;
        r.thread = Some(thread.clone());
        let e = within(client.explain(authed(r, &acme)))
            .await
            .expect("explain")
            .into_inner();
        let expected = if version == 0 {
            second.version
        } else {
            version
        };
        assert_eq!(e.plan_version, expected);
        assert_eq!(e.verdict, pb::ExplainVerdict::CompactedOut as i32, "{e:?}");
    }
    server.stop().await.expect("clean stop");
}
