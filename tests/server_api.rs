//! Every RPC through the generated client against a real server:
//! Compact → Render, compact-and-render, idempotent repeats, provider
//! formats, externalize → Rehydrate, and tenant isolation of plans and artifacts.

use crate::server_common;

use server_common::*;
use tonic::Code;

use compactd::proto::pb;

#[tokio::test]
async fn compact_then_render_round_trip() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);

    let out = within(client.compact(authed(compact_req(small_thread("t-1"), 128_000), &tok)))
        .await
        .expect("compact")
        .into_inner();
    assert_eq!(out.version, 1);
    assert!(!out.reused);
    let plan = out.plan.expect("plan");
    assert_eq!(plan.thread_id, "t-1");
    assert_eq!(plan.version, 1);
    assert!(!plan.fingerprint.is_empty());
    assert!(plan.externalizations.is_empty() && plan.drops.is_empty());
    let budget = out.budget.expect("budget");
    assert_eq!(budget.max_input_tokens, 128_000);
    assert!(out.tokens_after <= budget.hard_limit);

    let rendered = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(small_thread("t-1")),
            system_prompt: Some("You are a careful agent.".into()),
            model: "gpt-4o".into(),
            ..Default::default()
        },
        &tok,
    )))
    .await
    .expect("render")
    .into_inner();
    assert_eq!(rendered.plan_version, 1);
    assert_eq!(rendered.messages.len(), 5);
    assert_eq!(
        said(&rendered.messages[0].text),
        "I prefer Python. The budget is $1000."
    );
    assert_eq!(rendered.messages[0].origin, pb::Origin::Verbatim as i32);
    assert_eq!(rendered.messages[1].tool_calls[0].name, "read_file");
    assert_eq!(rendered.messages[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(
        rendered.system_prompt.as_deref(),
        Some("You are a careful agent.")
    );
    let t = rendered.tokens.expect("tokens");
    assert_eq!(
        t.total,
        t.system + t.tools + t.messages + t.rehydrated + t.recalled + t.framing
    );
    assert_eq!(
        t.total, out.tokens_after,
        "render counts what compact counted"
    );
    let audit = rendered.audit.expect("audit");
    assert_eq!(audit.plan_version, 1);
    assert_eq!(audit.plan_fingerprint, plan.fingerprint);
    assert_eq!(audit.tokenizer, "o200k_base");
    assert_eq!(audit.plan_format_version, "plan-v1");
    assert!(!audit.summary_schema_version.is_empty());

    // A pinned version that is current renders; a stale one is ABORTED.
    let mut req = pb::RenderRequest {
        thread: Some(small_thread("t-1")),
        plan_version: 1,
        ..Default::default()
    };
    client
        .render(authed(req.clone(), &tok))
        .await
        .expect("current version renders");
    req.plan_version = 7;
    let err = client.render(authed(req, &tok)).await.expect_err("stale");
    assert_status(&err, Code::Aborted, None);
}

#[tokio::test]
async fn compact_and_render_in_one_call_in_every_format() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);

    let base = pb::RenderRequest {
        thread: Some(big_thread("t-2", 2000)),
        compact_first: true,
        system_prompt: Some("You are a careful agent.".into()),
        model: "gpt-4o".into(),
        max_input_tokens: 8000,
        policy: Some(externalize_policy()),
        max_output_tokens: Some(1024),
        ..Default::default()
    };
    let neutral = within(client.render(authed(base.clone(), &tok)))
        .await
        .expect("render")
        .into_inner();
    let compaction = neutral.compaction.expect("compaction report");
    assert_eq!(compaction.version, 1);
    assert_eq!(neutral.plan_version, 1);
    let budget = compaction.budget.expect("budget");
    let tokens = neutral.tokens.expect("tokens");
    assert!(
        tokens.total <= budget.hard_limit,
        "{} > {}",
        tokens.total,
        budget.hard_limit
    );
    assert!(compaction.tokens_before > budget.max_input_tokens);
    assert!(neutral
        .messages
        .iter()
        .any(|m| m.origin == pb::Origin::Externalized as i32
            || m.origin == pb::Origin::Summary as i32));

    // The same call again reuses the committed plan and renders the same bytes.
    let again = within(client.render(authed(base.clone(), &tok)))
        .await
        .expect("render")
        .into_inner();
    assert!(again.compaction.expect("compaction").reused);
    assert_eq!(again.messages, neutral.messages);
    assert_eq!(again.tokens, neutral.tokens);

    // compact_first takes the message tokens from the plan; rendering the
    // committed plan without it tokenizes everything: both must agree.
    let mut stored = base.clone();
    stored.compact_first = false;
    let recounted = within(client.render(authed(stored, &tok)))
        .await
        .expect("render")
        .into_inner();
    assert_eq!(recounted.messages, neutral.messages);
    assert_eq!(recounted.tokens, neutral.tokens);

    for (format, check) in [
        (pb::OutputFormat::OpenaiChat, "messages"),
        (pb::OutputFormat::AnthropicMessages, "max_tokens"),
    ] {
        let mut req = base.clone();
        req.format = format as i32;
        let out = within(client.render(authed(req, &tok)))
            .await
            .expect("render")
            .into_inner();
        assert!(out.messages.is_empty());
        let payload: serde_json::Value =
            serde_json::from_str(&out.provider_payload_json).expect("payload is JSON");
        assert_eq!(payload["model"], "gpt-4o");
        assert!(payload.get(check).is_some(), "{format:?}: {payload}");
    }
}

#[tokio::test]
async fn identical_compact_is_idempotent() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let req = || {
        let mut r = compact_req(big_thread("t-3", 2000), 8000);
        r.policy = Some(externalize_policy());
        r
    };
    let first = client
        .compact(authed(req(), &tok))
        .await
        .expect("first")
        .into_inner();
    assert!(!first.reused);
    assert!(!first.new_artifact_ids.is_empty());
    let second = client
        .compact(authed(req(), &tok))
        .await
        .expect("second")
        .into_inner();
    assert!(second.reused);
    assert_eq!(second.version, first.version);
    assert_eq!(second.plan, first.plan);
    assert!(second.new_artifact_ids.is_empty(), "no duplicate artifacts");

    // With the matching expected_version it is still a reuse, not a conflict.
    let mut r = req();
    r.expected_version = Some(first.version);
    assert!(
        client
            .compact(authed(r, &tok))
            .await
            .expect("cas")
            .into_inner()
            .reused
    );

    // A different policy is a different plan: a new version.
    let mut r = req();
    r.policy.as_mut().expect("policy").target_ratio = Some(0.5);
    let third = client
        .compact(authed(r, &tok))
        .await
        .expect("third")
        .into_inner();
    assert!(!third.reused);
    assert_eq!(third.version, first.version + 1);
}

#[tokio::test]
async fn externalize_then_rehydrate_and_other_tenants_see_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let globex = token("globex", ALL);
    let output = big_output(2000);

    let mut req = compact_req(big_thread("t-4", 2000), 8000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    assert_eq!(plan.externalizations.len(), 1, "{plan:?}");
    let ext = &plan.externalizations[0];
    assert_eq!(ext.span.as_ref().expect("span").message_ids, vec!["t1"]);
    let artifact_id = ext.artifact_id.clone();
    assert!(
        artifact_id.starts_with("art_") && artifact_id.len() == 36,
        "{artifact_id}"
    );
    assert_eq!(out.new_artifact_ids, vec![artifact_id.clone()]);

    // Full read.
    let full = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-4".into(),
            artifact_id: artifact_id.clone(),
            max_tokens: 1_000_000,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("rehydrate")
    .into_inner();
    assert_eq!(full.content, output);
    assert!(!full.truncated);
    assert_eq!(full.message_ids, vec!["t1"]);
    assert_eq!(full.sensitivity, pb::Sensitivity::Internal as i32);

    // Capped read.
    let capped = client
        .rehydrate(authed(
            pb::RehydrateRequest {
                thread_id: "t-4".into(),
                artifact_id: artifact_id.clone(),
                max_tokens: 100,
                ..Default::default()
            },
            &acme,
        ))
        .await
        .expect("rehydrate capped")
        .into_inner();
    assert!(capped.truncated);
    assert!(
        capped.tokens <= 100 && capped.tokens > 50,
        "{}",
        capped.tokens
    );
    assert!(output.starts_with(&capped.content));

    // Rendered with the artifact injected, capped at the rehydration reserve.
    let rendered = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(big_thread("t-4", 2000)),
                policy: Some(externalize_policy()),
                rehydrate_artifact_ids: vec![artifact_id.clone()],
                ..Default::default()
            },
            &acme,
        ))
        .await
        .expect("render with rehydration")
        .into_inner();
    let tokens = rendered.tokens.expect("tokens");
    assert!(
        tokens.rehydrated > 0 && tokens.rehydrated <= 2000,
        "{tokens:?}"
    );
    assert_eq!(rendered.rehydrated.len(), 1);
    assert!(rendered.rehydrated[0].truncated);
    let injected: Vec<_> = rendered
        .messages
        .iter()
        .filter(|m| m.origin == pb::Origin::Rehydrated as i32)
        .collect();
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].source_id, artifact_id);
    assert_eq!(
        rendered.audit.expect("audit").rehydrated_artifact_ids,
        vec![artifact_id.clone()]
    );

    // Another tenant: the same ids reveal nothing.
    let err = client
        .rehydrate(authed(
            pb::RehydrateRequest {
                thread_id: "t-4".into(),
                artifact_id: artifact_id.clone(),
                ..Default::default()
            },
            &globex,
        ))
        .await
        .expect_err("other tenant");
    assert_status(&err, Code::NotFound, None);
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(big_thread("t-4", 2000)),
                ..Default::default()
            },
            &globex,
        ))
        .await
        .expect_err("other tenant's plan is invisible");
    assert_status(&err, Code::NotFound, None);
    // A malformed id and an unknown well-formed id answer exactly alike.
    for id in ["../../etc/passwd", "art_00000000000000000000000000000000"] {
        let err = client
            .rehydrate(authed(
                pb::RehydrateRequest {
                    thread_id: "t-4".into(),
                    artifact_id: id.into(),
                    ..Default::default()
                },
                &acme,
            ))
            .await
            .expect_err("unknown id");
        assert_status(&err, Code::NotFound, None);
        assert_eq!(err.message(), "artifact (artifact_id) not found");
    }

    // Without the sensitivity permission: PERMISSION_DENIED.
    let no_internal = token("acme", &["rehydrate", "artifact:read:public"]);
    let err = client
        .rehydrate(authed(
            pb::RehydrateRequest {
                thread_id: "t-4".into(),
                artifact_id,
                ..Default::default()
            },
            &no_internal,
        ))
        .await
        .expect_err("sensitivity");
    assert_status(&err, Code::PermissionDenied, None);
    assert!(err.message().contains("artifact:read:internal"));
}

#[tokio::test]
async fn other_tenants_compact_their_own_plan_of_the_same_thread_id() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let globex = token("globex", ALL);
    let a = client
        .compact(authed(compact_req(small_thread("shared"), 128_000), &acme))
        .await
        .expect("acme")
        .into_inner();
    // globex has no plan: expecting acme's version is a conflict with globex's own (0).
    let mut req = compact_req(small_thread("shared"), 128_000);
    req.expected_version = Some(a.version);
    let err = client
        .compact(authed(req, &globex))
        .await
        .expect_err("globex has no version 1");
    assert_status(&err, Code::Aborted, None);
    let g = client
        .compact(authed(
            compact_req(small_thread("shared"), 128_000),
            &globex,
        ))
        .await
        .expect("globex")
        .into_inner();
    assert_eq!(g.version, 1);
    assert!(!g.reused, "never reuses another tenant's plan");
}

#[tokio::test]
async fn a_committed_plan_that_no_longer_fits_is_refused_not_rendered() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let thread = big_thread("t-grow", 2000);
    within(client.compact(authed(compact_req(thread.clone(), 8000), &tok)))
        .await
        .expect("compact");

    // The agent went on for ten more turns and renders the old plan without compacting.
    let mut grown = thread;
    let last_turn = grown.messages.last().map_or(1, |m| m.turn);
    for i in 1..=10 {
        grown.messages.push(text(
            &format!("late{i}"),
            pb::Role::User,
            last_turn + i,
            &"please read this long paste ".repeat(300),
        ));
    }
    let req = pb::RenderRequest {
        thread: Some(grown.clone()),
        max_input_tokens: 8000,
        ..Default::default()
    };
    let err = within(client.render(authed(req, &tok)))
        .await
        .expect_err("over budget");
    assert_status(&err, Code::FailedPrecondition, Some("max_input_tokens"));
    assert!(err.message().contains("compact_first"), "{err:?}");

    // Compacting in the same call fits it again.
    let req = pb::RenderRequest {
        thread: Some(grown),
        max_input_tokens: 8000,
        compact_first: true,
        ..Default::default()
    };
    let ok = within(client.render(authed(req, &tok)))
        .await
        .expect("compact_first renders")
        .into_inner();
    assert!(ok.tokens.expect("tokens").total <= 8000);
}

#[tokio::test]
async fn pending_calls_are_refused_by_name_or_left_out_on_request() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let mut thread = small_thread("t-pending");
    thread
        .messages
        .push(call("m5", 2, "approve-1", "delete_branch"));
    let render = |omit: bool| pb::RenderRequest {
        thread: Some(thread.clone()),
        compact_first: true,
        model: "gpt-4o".into(),
        max_input_tokens: 128_000,
        format: pb::OutputFormat::OpenaiChat as i32,
        omit_pending_calls: omit,
        ..Default::default()
    };
    let err = within(client.render(authed(render(false), &tok)))
        .await
        .expect_err("a pending call cannot be sent");
    assert_status(
        &err,
        Code::FailedPrecondition,
        Some("thread.messages[5].tool_calls[0].id"),
    );
    assert_eq!(
        compactd::proto::status::ErrorDescription::of(&err).reason,
        "PENDING_TOOL_CALL"
    );
    // Nothing was committed for the refused call.
    let out = within(client.render(authed(render(true), &tok)))
        .await
        .expect("renders without it")
        .into_inner();
    assert_eq!(out.plan_version, 1);
    assert!(!out.provider_payload_json.contains("approve-1"));
    let audit = out.audit.expect("audit");
    assert!(
        audit.warnings.iter().any(|w| w.contains("approve-1")),
        "{:?}",
        audit.warnings
    );
}
