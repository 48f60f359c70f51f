//! SearchContext through gRPC: the agent's look-up over what the committed
//! plan took out of its prompt — ranked passages with the artifact that
//! holds each, redacted, tenant-scoped, gated per sensitivity — and the
//! `search_context` tool definition Render adds on request.

use crate::server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::Code;

/// A thread whose first tool output (a config dump and a deploy log) is
/// externalized at 8k, with a secret and a confidential note early on.
fn thread(id: &str) -> pb::Thread {
    let mut t = big_thread(id, 2000);
    let mut head = String::from(
        "[database]\nhost = db-eu-west-3.internal\nmax_connections = 250\n\
         AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n\
         [deploy]\nlast_error = E_QUOTA_EXCEEDED in scheduler/quota_guard.rs:88\n",
    );
    if let Some(pb::tool_result_envelope::Content::ContentText(body)) = t.messages[2]
        .tool_result
        .as_mut()
        .and_then(|r| r.content.as_mut())
    {
        head.push_str(body);
        *body = head;
    }
    let mut secret = text(
        "u1c",
        pb::Role::User,
        1,
        "Board note: the acquisition codename is BLUEHERON; do not repeat it.",
    );
    secret.metadata = Some(pb::MessageMetadata {
        sensitivity: pb::Sensitivity::Confidential as i32,
        ..Default::default()
    });
    t.messages.insert(1, secret);
    t
}

fn search(thread: &pb::Thread, query: &str) -> pb::SearchContextRequest {
    pb::SearchContextRequest {
        thread: Some(thread.clone()),
        query: query.into(),
        ..Default::default()
    }
}

/// Compacts `thread` for `token`'s tenant; the artifact holding `t1`.
async fn compact(
    client: &mut pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>,
    thread: &pb::Thread,
    token: &str,
) -> String {
    let mut req = compact_req(thread.clone(), 8_000);
    req.policy = Some(externalize_policy());
    let plan = within(client.compact(authed(req, token)))
        .await
        .expect("compact")
        .into_inner()
        .plan
        .expect("plan");
    plan.externalizations
        .iter()
        .find(|e| e.span.as_ref().is_some_and(|s| s.message_ids == ["t1"]))
        .expect("the big result is externalized")
        .artifact_id
        .clone()
}

#[tokio::test]
async fn search_finds_compacted_passages_and_names_their_artifact() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let t = thread("t-search");
    let artifact = compact(&mut client, &t, &acme).await;

    // An identifier from deep inside the externalized output.
    let r = within(client.search_context(authed(search(&t, "quota_guard.rs"), &acme)))
        .await
        .expect("search")
        .into_inner();
    assert!(r.plan_version >= 1);
    let top = r.passages.first().expect("a passage");
    assert_eq!(top.message_id, "t1");
    assert_eq!(top.artifact_id, artifact);
    assert!(top.text.contains("E_QUOTA_EXCEEDED"), "{top:?}");
    assert!(top.line >= 1 && top.score > 0.0);
    assert_eq!(top.sensitivity, pb::Sensitivity::Internal as i32);
    assert!(r.passages.len() <= 5, "the default count");

    // The artifact it names reads the whole original back.
    let back = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-search".into(),
            artifact_id: artifact.clone(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("rehydrate")
    .into_inner();
    assert!(back.content.contains("max_connections = 250"));

    // Deterministic: the same question, the same answer.
    let again = within(client.search_context(authed(search(&t, "quota_guard.rs"), &acme)))
        .await
        .expect("search")
        .into_inner();
    assert_eq!(again, r);

    // Ordinary words find lines too; max_results bounds the answer.
    let mut q = search(&t, "how many max connections does the database allow?");
    q.max_results = 2;
    let r = within(client.search_context(authed(q, &acme)))
        .await
        .expect("search")
        .into_inner();
    assert!(r.passages.len() <= 2);
    assert!(
        r.passages[0].text.contains("max_connections = 250"),
        "{:?}",
        r.passages
    );

    // Secrets come back redacted, like everything compactd keeps.
    let r = within(client.search_context(authed(search(&t, "AWS_ACCESS_KEY_ID"), &acme)))
        .await
        .expect("search")
        .into_inner();
    assert!(!r.passages.is_empty());
    for p in &r.passages {
        assert!(!p.text.contains("AKIAIOSFODNN7EXAMPLE"), "{p:?}");
    }
    assert!(r
        .passages
        .iter()
        .any(|p| p.text.contains("[REDACTED:aws_access_key_id]")));

    // Confidential messages are never searched (read them with Rehydrate),
    // and what the prompt still shows verbatim is not "compacted out".
    for q in ["BLUEHERON", "Answer number 4"] {
        let r = within(client.search_context(authed(search(&t, q), &acme)))
            .await
            .expect("search")
            .into_inner();
        assert!(r.passages.iter().all(|p| !p.text.contains(q)), "{q}: {r:?}");
    }
}

#[tokio::test]
async fn search_is_tenant_scoped_and_permission_checked() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let t = thread("t-scope");
    compact(&mut client, &t, &acme).await;

    // Another tenant has no plan for this thread id.
    let globex = token("globex", ALL);
    let e = within(client.search_context(authed(search(&t, "quota_guard.rs"), &globex)))
        .await
        .expect_err("other tenant");
    assert_status(&e, Code::NotFound, None);

    // Searching compacted content is a read: it needs `rehydrate`.
    let render_only = token("acme", &["render", "artifact:read:internal"]);
    let e = within(client.search_context(authed(search(&t, "quota_guard.rs"), &render_only)))
        .await
        .expect_err("no rehydrate");
    assert_status(&e, Code::PermissionDenied, None);

    // A caller who may read public artifacts only: internal passages are
    // withheld, and counted.
    let public_only = token("acme", &["render", "rehydrate", "artifact:read:public"]);
    let r = within(client.search_context(authed(search(&t, "quota_guard.rs"), &public_only)))
        .await
        .expect("search")
        .into_inner();
    assert!(r.passages.is_empty(), "{r:?}");
    assert!(r.withheld >= 1);

    // The tenant named in the body must be the credential's.
    let mut q = search(&t, "quota");
    q.tenant_id = Some("globex".into());
    let e = within(client.search_context(authed(q, &acme)))
        .await
        .expect_err("body tenant");
    assert_status(&e, Code::PermissionDenied, None);
}

#[tokio::test]
async fn search_rejects_bad_input_naming_the_field() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let t = thread("t-bad");
    compact(&mut client, &t, &acme).await;

    let cases: Vec<(pb::SearchContextRequest, &str)> = vec![
        (search(&t, "   "), "query"),
        (search(&t, &"x".repeat(1001)), "query"),
        (
            pb::SearchContextRequest {
                max_results: 51,
                ..search(&t, "quota")
            },
            "max_results",
        ),
        (
            pb::SearchContextRequest {
                thread: None,
                ..search(&t, "quota")
            },
            "thread",
        ),
    ];
    for (req, field) in cases {
        let e = within(client.search_context(authed(req, &acme)))
            .await
            .expect_err(field);
        assert_status(&e, Code::InvalidArgument, Some(field));
    }

    // A thread without a plan.
    let e = within(client.search_context(authed(search(&thread("t-none"), "quota"), &acme)))
        .await
        .expect_err("no plan");
    assert_status(&e, Code::NotFound, None);
}

#[tokio::test]
async fn render_can_offer_the_search_context_tool_in_each_format() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    for format in [
        pb::OutputFormat::OpenaiChat,
        pb::OutputFormat::AnthropicMessages,
        pb::OutputFormat::OpenaiResponses,
    ] {
        let r = within(client.render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-tool")),
                compact_first: true,
                format: format as i32,
                search_context_tool: true,
                read_artifact_tool: true,
                ..Default::default()
            },
            &acme,
        )))
        .await
        .expect("render")
        .into_inner();
        let body: serde_json::Value =
            serde_json::from_str(&r.provider_payload_json).expect("payload json");
        let tools = body["tools"].as_array().expect("tools");
        let name = |t: &serde_json::Value| match format {
            pb::OutputFormat::OpenaiChat => (
                t["function"]["name"].clone(),
                t["function"]["parameters"].clone(),
            ),
            pb::OutputFormat::AnthropicMessages => (t["name"].clone(), t["input_schema"].clone()),
            _ => (t["name"].clone(), t["parameters"].clone()),
        };
        let names: Vec<_> = tools.iter().map(|t| name(t).0).collect();
        assert_eq!(names, ["read_artifact", "search_context"], "{format:?}");
        let search = name(&tools[1]).1;
        assert_eq!(search["required"][0], "query", "{format:?}");
        assert_eq!(search["properties"]["max_results"]["maximum"], 50);
    }
}

/// The documented loop: the model calls `search_context`, the platform
/// answers with SearchContext, appends the result, and renders again.
#[tokio::test]
async fn the_search_tool_loop_puts_the_answer_in_the_next_prompt() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut t = thread("t-loop");
    compact(&mut client, &t, &acme).await;

    // The model, shown the tool, asks for what it no longer sees.
    let turn = t.messages.last().map_or(1, |m| m.turn);
    t.messages.push(text(
        "u5",
        pb::Role::User,
        turn + 1,
        "Which error did the last deploy hit?",
    ));
    t.messages.push(pb::Message {
        id: "a5".into(),
        role: pb::Role::Assistant as i32,
        turn: turn + 1,
        tool_calls: vec![pb::ToolCall {
            wire: None,
            id: "call_s1".into(),
            name: "search_context".into(),
            arguments_json: r#"{"query":"last_error deploy"}"#.into(),
        }],
        ..Default::default()
    });
    let found = within(client.search_context(authed(search(&t, "last_error deploy"), &acme)))
        .await
        .expect("search")
        .into_inner();
    let answer: Vec<serde_json::Value> = found
        .passages
        .iter()
        .map(|p| serde_json::json!({"artifact_id": p.artifact_id, "line": p.line, "text": p.text}))
        .collect();
    let mut tool_result = result(
        "t5",
        turn + 1,
        "call_s1",
        "search_context",
        serde_json::Value::Array(answer).to_string(),
    );
    if let Some(r) = tool_result.tool_result.as_mut() {
        r.key_fields.clear();
    }
    t.messages.push(tool_result);

    let r = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(t.clone()),
            compact_first: true,
            max_input_tokens: 8_000,
            policy: Some(externalize_policy()),
            format: pb::OutputFormat::OpenaiChat as i32,
            search_context_tool: true,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("render")
    .into_inner();
    let body: serde_json::Value =
        serde_json::from_str(&r.provider_payload_json).expect("payload json");
    let messages = body["messages"].as_array().expect("messages");
    let last = messages.last().expect("a message");
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "call_s1");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("E_QUOTA_EXCEEDED")),
        "{last}"
    );
}

/// Automatic rehydration also follows the latest request: an identifier it
/// names that an externalized artifact's hint or summary names brings that
/// artifact back for the turn (within the usual limits); a request that
/// names nothing brings nothing back.
#[tokio::test]
async fn a_request_naming_what_an_artifact_holds_brings_it_back() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let t = thread("t-hint");
    let artifact = compact(&mut client, &t, &acme).await;
    let render = |thread: pb::Thread| pb::RenderRequest {
        thread: Some(thread),
        compact_first: true,
        max_input_tokens: 8_000,
        policy: Some(externalize_policy()),
        recall: Some(false),
        ..Default::default()
    };
    let turn = t.messages.last().map_or(1, |m| m.turn) + 1;

    let mut asks = t.clone();
    asks.messages.push(text(
        "u5",
        pb::Role::User,
        turn,
        "Show me the read_file output from the start again.",
    ));
    let r = within(client.render(authed(render(asks), &acme)))
        .await
        .expect("render")
        .into_inner();
    let report = r
        .rehydrated
        .iter()
        .find(|x| x.artifact_id == artifact)
        .expect("the artifact the hint names");
    assert!(report.auto && !report.omitted, "{report:?}");
    let shown: String = r.messages.iter().map(|m| m.text.as_str()).collect();
    assert!(shown.contains("max_connections = 250"));

    let mut vague = t.clone();
    vague.messages.push(text(
        "u5",
        pb::Role::User,
        turn,
        "Thanks, what should we do next?",
    ));
    let r = within(client.render(authed(render(vague), &acme)))
        .await
        .expect("render")
        .into_inner();
    assert!(r.rehydrated.is_empty(), "{:?}", r.rehydrated);
}
