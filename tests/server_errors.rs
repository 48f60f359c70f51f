//! The error contract: for each bad input, credential or permission, the
//! exact gRPC code, the stable reason (google.rpc ErrorInfo) and the field path.

use crate::server_common;

use serde_json::json;
use server_common::*;
use tonic::Code;

use compactd::proto::pb;
use compactd::proto::status::ErrorDescription;

/// One bad Compact request and what it must produce.
struct Case {
    name: &'static str,
    req: pb::CompactRequest,
    code: Code,
    detail: &'static str,
    field: &'static str,
}

fn with_messages(mut t: pb::Thread, f: impl FnOnce(&mut Vec<pb::Message>)) -> pb::Thread {
    f(&mut t.messages);
    t
}

fn cases() -> Vec<Case> {
    let bad = |name, thread: pb::Thread, field| Case {
        name,
        req: compact_req(thread, 128_000),
        code: Code::InvalidArgument,
        detail: "INVALID_ARGUMENT",
        field,
    };
    let protected_big = {
        let mut m = text("p0", pb::Role::User, 1, &big_output(600));
        m.metadata = Some(pb::MessageMetadata {
            protected: true,
            ..Default::default()
        });
        pb::Thread {
            id: "t-budget".into(),
            messages: vec![m, text("p1", pb::Role::Assistant, 1, "ok")],
        }
    };
    let mut policy_case = compact_req(small_thread("t"), 128_000);
    policy_case.policy = Some(pb::PolicyOverrides {
        trigger_ratio: Some(1.5),
        ..Default::default()
    });
    let mut durability_case = compact_req(small_thread("t"), 128_000);
    durability_case.policy = Some(pb::PolicyOverrides {
        default_durability: 17,
        ..Default::default()
    });
    let mut tools_case = compact_req(small_thread("t"), 128_000);
    tools_case.tools = vec![pb::ToolSchema {
        name: "search".into(),
        parameters_json: "{not json".into(),
        ..Default::default()
    }];
    vec![
        bad(
            "duplicate ids",
            with_messages(small_thread("t"), |m| m[3].id = "m1".into()),
            "thread.messages[3].id",
        ),
        bad(
            "orphan tool result",
            with_messages(small_thread("t"), |m| {
                m.remove(1);
            }),
            "thread.messages[1].tool_result.tool_call_id",
        ),
        bad(
            "unknown role",
            with_messages(small_thread("t"), |m| m[3].role = 42),
            "thread.messages[3].role",
        ),
        bad(
            "unspecified role",
            with_messages(small_thread("t"), |m| m[0].role = 0),
            "thread.messages[0].role",
        ),
        bad(
            "turns going backwards",
            with_messages(small_thread("t"), |m| m[4].turn = 0),
            "thread.messages[4].turn",
        ),
        bad(
            "empty message id",
            with_messages(small_thread("t"), |m| m[2].id.clear()),
            "thread.messages[2].id",
        ),
        bad(
            "tool arguments not JSON",
            with_messages(small_thread("t"), |m| {
                m[1].tool_calls[0].arguments_json = "{oops".into()
            }),
            "thread.messages[1].tool_calls[0].arguments_json",
        ),
        bad(
            "key field value not JSON",
            with_messages(small_thread("t"), |m| {
                if let Some(env) = m[2].tool_result.as_mut() {
                    env.key_fields.insert("total".into(), "twelve".into());
                }
            }),
            "thread.messages[2].tool_result.key_fields[\"total\"]",
        ),
        bad(
            "unknown outcome",
            with_messages(small_thread("t"), |m| {
                if let Some(env) = m[2].tool_result.as_mut() {
                    env.outcome = 9;
                }
            }),
            "thread.messages[2].tool_result.outcome",
        ),
        bad(
            "text and parts together",
            with_messages(small_thread("t"), |m| {
                m[0].parts = vec![pb::ContentPart {
                    kind: Some(pb::content_part::Kind::Text("x".into())),
                }]
            }),
            "thread.messages[0].text",
        ),
        bad(
            "tool message without envelope",
            with_messages(small_thread("t"), |m| m[2].tool_result = None),
            "thread.messages[2].tool_result",
        ),
        bad(
            "empty thread id",
            with_messages(small_thread(""), |_| {}),
            "thread.id",
        ),
        Case {
            name: "missing thread",
            req: pb::CompactRequest::default(),
            code: Code::InvalidArgument,
            detail: "INVALID_ARGUMENT",
            field: "thread",
        },
        Case {
            name: "policy out of range",
            req: policy_case,
            code: Code::InvalidArgument,
            detail: "INVALID_ARGUMENT",
            field: "policy.trigger_ratio",
        },
        Case {
            name: "unknown durability in policy",
            req: durability_case,
            code: Code::InvalidArgument,
            detail: "INVALID_ARGUMENT",
            field: "policy.default_durability",
        },
        Case {
            name: "tool schema not JSON",
            req: tools_case,
            code: Code::InvalidArgument,
            detail: "INVALID_ARGUMENT",
            field: "tools[0].parameters_json",
        },
        Case {
            name: "impossible budget",
            req: compact_req(protected_big, 4000),
            code: Code::FailedPrecondition,
            detail: "INSUFFICIENT_BUDGET",
            field: "max_input_tokens",
        },
    ]
}

#[tokio::test]
async fn bad_inputs_name_the_field() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    for case in cases() {
        let err = within(client.compact(authed(case.req, &tok)))
            .await
            .expect_err(case.name);
        assert_eq!(err.code(), case.code, "{}: {err:?}", case.name);
        let d = ErrorDescription::of(&err);
        assert_eq!(d.reason, case.detail, "{}", case.name);
        assert_eq!(d.field, case.field, "{}: {err:?}", case.name);
        assert!(
            err.message().contains(case.field),
            "{}: message {:?} names the field",
            case.name,
            err.message()
        );
    }
}

#[tokio::test]
async fn render_errors() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);

    // No plan yet.
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-r")),
                ..Default::default()
            },
            &tok,
        ))
        .await
        .expect_err("no plan");
    assert_status(&err, Code::NotFound, None);

    // Unknown output format.
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-r")),
                format: 9,
                ..Default::default()
            },
            &tok,
        ))
        .await
        .expect_err("format");
    assert_status(&err, Code::InvalidArgument, Some("format"));

    // A plan that references messages the sent thread no longer has.
    let mut req = compact_req(big_thread("t-m", 2000), 8000);
    req.policy = Some(externalize_policy());
    client.compact(authed(req, &tok)).await.expect("compact");
    let mut shrunk = big_thread("t-m", 2000);
    shrunk.messages.drain(0..4);
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(shrunk),
                ..Default::default()
            },
            &tok,
        ))
        .await
        .expect_err("plan mismatch");
    assert_status(&err, Code::FailedPrecondition, Some("thread"));
    assert_eq!(
        Some(ErrorDescription::of(&err).reason.as_str()),
        Some("PLAN_MISMATCH")
    );
}

#[tokio::test]
async fn credentials_are_checked() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = |patch: serde_json::Value| {
        let mut c = json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "agent", "tenant": "acme",
            "permissions": ALL, "exp": now + 3600,
        });
        if let (Some(c), Some(p)) = (c.as_object_mut(), patch.as_object()) {
            for (k, v) in p {
                c.insert(k.clone(), v.clone());
            }
        }
        c
    };
    let wrong_key = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims(json!({})),
        &jsonwebtoken::EncodingKey::from_secret(b"some-other-secret-some-other-secret"),
    )
    .expect("encode");
    let table: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        (
            "expired",
            Some(token_with(claims(json!({"exp": now - 3600})))),
        ),
        (
            "wrong issuer",
            Some(token_with(claims(json!({"iss": "https://evil.test"})))),
        ),
        (
            "wrong audience",
            Some(token_with(claims(json!({"aud": "someone-else"})))),
        ),
        ("alg none", Some(alg_none_token("acme"))),
        ("bad signature", Some(wrong_key)),
        ("garbage", Some("not-a-jwt".into())),
    ];
    for (name, tok) in table {
        let req = compact_req(small_thread("t-auth"), 128_000);
        let result = match &tok {
            Some(t) => client.compact(authed(req, t)).await,
            None => client.compact(tonic::Request::new(req)).await,
        };
        let err = result.expect_err(name);
        assert_eq!(err.code(), Code::Unauthenticated, "{name}: {err:?}");
        assert_eq!(
            Some(ErrorDescription::of(&err).reason.as_str()),
            Some("UNAUTHENTICATED"),
            "{name}"
        );
        if let Some(t) = tok {
            assert!(!err.message().contains(&t), "{name}: token echoed");
        }
    }
    // Authentication comes before any request field is read: a request
    // that would fail validation is still UNAUTHENTICATED without a
    // credential (the caller learns nothing about what it sent).
    let mut bad = compact_req(small_thread("t-auth"), 128_000);
    bad.thread = None;
    let err = client
        .compact(tonic::Request::new(bad))
        .await
        .expect_err("no credential");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
}

#[tokio::test]
async fn permissions_and_body_tenant_are_enforced() {
    let server = TestServer::start().await;
    let mut client = server.client().await;

    // Forged tenant in the body.
    let mut req = compact_req(small_thread("t-p"), 128_000);
    req.tenant_id = Some("globex".into());
    let err = client
        .compact(authed(req, &token("acme", ALL)))
        .await
        .expect_err("forged tenant");
    assert_status(&err, Code::PermissionDenied, None);
    assert!(!err.message().contains("globex") && !err.message().contains("acme"));

    // The matching tenant is fine.
    let mut req = compact_req(small_thread("t-p"), 128_000);
    req.tenant_id = Some("acme".into());
    client
        .compact(authed(req, &token("acme", ALL)))
        .await
        .expect("matching body tenant");

    // Missing permissions, per RPC.
    let render_only = token("acme", &["render"]);
    let err = client
        .compact(authed(
            compact_req(small_thread("t-p"), 128_000),
            &render_only,
        ))
        .await
        .expect_err("compact needs `compact`");
    assert_status(&err, Code::PermissionDenied, None);
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-p")),
                compact_first: true,
                ..Default::default()
            },
            &render_only,
        ))
        .await
        .expect_err("compact_first needs `compact`");
    assert_status(&err, Code::PermissionDenied, None);
    let err = client
        .render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-p")),
                rehydrate_artifact_ids: vec!["art_00000000000000000000000000000000".into()],
                ..Default::default()
            },
            &render_only,
        ))
        .await
        .expect_err("rehydration needs `rehydrate`");
    assert_status(&err, Code::PermissionDenied, None);
    let err = client
        .rehydrate(authed(
            pb::RehydrateRequest {
                thread_id: "t-p".into(),
                artifact_id: "art_00000000000000000000000000000000".into(),
                ..Default::default()
            },
            &render_only,
        ))
        .await
        .expect_err("rehydrate needs `rehydrate`");
    assert_status(&err, Code::PermissionDenied, None);
    // Render with only `render` works.
    client
        .render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-p")),
                ..Default::default()
            },
            &render_only,
        ))
        .await
        .expect("render with `render`");
}

/// tonic checks `max_decoding_message_size` while decoding the request and
/// answers OUT_OF_RANGE ("decoded message length too large"), before any
/// handler runs — not RESOURCE_EXHAUSTED. Asserted as observed.
#[tokio::test]
async fn oversize_request_is_rejected_by_tonic() {
    let server = TestServer::start_with(|s| s.max_message_bytes = 64 * 1024).await;
    let mut client = server.client().await;
    let req = compact_req(big_thread("t-big", 3000), 128_000);
    let err = client
        .compact(authed(req, &token("acme", ALL)))
        .await
        .expect_err("oversize");
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("too large"), "{err:?}");
    // Under the limit the same server answers normally.
    client
        .compact(authed(
            compact_req(small_thread("t-small"), 128_000),
            &token("acme", ALL),
        ))
        .await
        .expect("small request");
}
