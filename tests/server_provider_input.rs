//! A conversation sent in a provider's shape (`input`: an OpenAI Chat,
//! Responses or Anthropic body as JSON) is read by the same importer as the
//! CLI's files: the server then holds exactly the thread, system prompt and
//! tools a client converting it itself would send, so the committed plan is
//! reused and the body is byte for byte the same. Errors name the path
//! inside the JSON.

mod server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::Code;

const PERMS: &[&str] = &["compact", "render", "delete"];

fn data(name: &str) -> String {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn render_req(format: pb::OutputFormat) -> pb::RenderRequest {
    pb::RenderRequest {
        compact_first: true,
        format: format as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 8_000,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_provider_body_renders_as_the_thread_it_imports_to() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    let logs = [
        "claude_code_rust_port.json",
        "claude_code_rust_port.anthropic.json",
        "swe_agent_marshmallow.json",
        "tau_bench_airline.json",
    ];
    let formats = [
        pb::OutputFormat::OpenaiChat,
        pb::OutputFormat::AnthropicMessages,
        pb::OutputFormat::OpenaiResponses,
        pb::OutputFormat::Neutral,
    ];
    for (i, log) in logs.iter().enumerate() {
        let json = data(log);
        let value: serde_json::Value = serde_json::from_str(&json).expect("json");
        let read = compactd::provider::thread_from_json(&value, "unused").expect("import");
        for format in formats {
            let id = format!("log-{i}-{}", format.as_str_name());
            let mut by_input = render_req(format);
            by_input.input = Some(pb::ProviderInput {
                thread_id: id.clone(),
                json: json.clone(),
            });
            let a = within(client.render(authed(by_input, &token)))
                .await
                .unwrap_or_else(|s| panic!("{log} {format:?}: {s:?}"))
                .into_inner();
            let mut thread = read.thread.clone();
            thread.id = id.clone();
            let mut by_thread = render_req(format);
            by_thread.thread = Some(pb::Thread::from(&thread));
            by_thread.system_prompt = read.system.clone();
            by_thread.tools = read.tools.iter().map(Into::into).collect();
            let b = within(client.render(authed(by_thread, &token)))
                .await
                .unwrap_or_else(|s| panic!("{log} {format:?}: {s:?}"))
                .into_inner();
            let reused = b.compaction.as_ref().is_some_and(|c| c.reused);
            assert!(
                reused,
                "{log} {format:?}: the same thread, system and tools reuse the plan"
            );
            assert_eq!(a.provider_payload_json, b.provider_payload_json, "{log}");
            assert_eq!(a.messages, b.messages, "{log} {format:?}");
            assert!(
                a.tokens.as_ref().is_some_and(|t| t.total <= 8_000),
                "{log} {format:?}: within the budget"
            );
        }
    }
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn the_request_s_own_system_prompt_and_tools_win_over_the_body_s() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "From the body."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    });
    let mut req = render_req(pb::OutputFormat::OpenaiChat);
    req.input = Some(pb::ProviderInput {
        thread_id: "sys".into(),
        json: body.to_string(),
    });
    let out = within(client.render(authed(req.clone(), &token)))
        .await
        .expect("render")
        .into_inner();
    assert!(out.provider_payload_json.contains("From the body."));
    req.system_prompt = Some("From the request.".into());
    let out = within(client.render(authed(req, &token)))
        .await
        .expect("render")
        .into_inner();
    assert!(out.provider_payload_json.contains("From the request."));
    assert!(!out.provider_payload_json.contains("From the body."));
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_bad_provider_body_names_the_path_inside_it() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    let input = |json: &str| {
        Some(pb::ProviderInput {
            thread_id: "bad".into(),
            json: json.into(),
        })
    };
    let orphan =
        r#"[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c9","content":"x"}]"#;
    let cases: Vec<(pb::CompactRequest, &str)> = vec![
        (
            pb::CompactRequest {
                input: input("{not json"),
                ..Default::default()
            },
            "input.json",
        ),
        (
            pb::CompactRequest {
                input: input(orphan),
                ..Default::default()
            },
            "input.json.messages[1].tool_call_id",
        ),
        (
            pb::CompactRequest {
                input: Some(pb::ProviderInput {
                    thread_id: " ".into(),
                    json: "[]".into(),
                }),
                ..Default::default()
            },
            "input.thread_id",
        ),
        (
            pb::CompactRequest {
                input: input("[]"),
                thread: Some(small_thread("both")),
                ..Default::default()
            },
            "input",
        ),
    ];
    for (req, field) in cases {
        let err = within(client.compact(authed(req, &token)))
            .await
            .expect_err(field);
        assert_status(&err, Code::InvalidArgument, Some(field));
    }
    // Nothing was kept for the thread the bad bodies named.
    let err = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(pb::Thread {
                id: "bad".into(),
                messages: vec![text("u1", pb::Role::User, 1, "hi")],
            }),
            ..Default::default()
        },
        &token,
    )))
    .await
    .expect_err("no plan");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    server.stop().await.expect("clean stop");
}
