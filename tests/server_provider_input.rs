//! A conversation sent in a provider's shape (`input`: an OpenAI Chat,
//! Responses or Anthropic body as JSON) is read by the same importer as the
//! CLI's files: the server then holds exactly the thread, system prompt and
//! tools a client converting it itself would send, so the committed plan is
//! reused and the body is byte for byte the same. Errors name the path
//! inside the JSON.

use crate::server_common;

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

/// A Render of the Chat Completions body `json` as thread `thread_id`, at
/// a budget (6,000 tokens) that forces compaction of the real logs.
fn tight_chat_input(
    format: pb::OutputFormat,
    thread_id: String,
    json: String,
) -> pb::RenderRequest {
    let mut req = render_req(format);
    req.max_input_tokens = 6_000;
    req.input = Some(pb::ProviderInput {
        thread_id,
        json,
        format: pb::OutputFormat::OpenaiChat as i32,
    });
    req
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
                ..Default::default()
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
        ..Default::default()
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
            ..Default::default()
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
                    ..Default::default()
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

/// Where each call's append starts: after every message (Chat, Anthropic),
/// or where a model's response starts (Responses items, whose reasoning,
/// text and calls of one response join one assistant message).
fn cuts(items: &[serde_json::Value], responses: bool) -> Vec<usize> {
    if !responses {
        return (1..items.len()).collect();
    }
    (1..items.len())
        .filter(|&i| {
            let before = &items[i - 1];
            before.get("type").and_then(|t| t.as_str()) == Some("function_call_output")
                || before.get("role").and_then(|r| r.as_str()) == Some("user")
        })
        .collect()
}

#[tokio::test]
async fn an_append_in_a_provider_s_shape_continues_the_thread_as_the_whole_reads() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    // The Responses shape of a log, as compactd renders it.
    let mut as_responses = render_req(pb::OutputFormat::OpenaiResponses);
    as_responses.max_input_tokens = 1_000_000;
    as_responses.input = Some(pb::ProviderInput {
        thread_id: "responses-src".into(),
        json: data("claude_code_rust_port.json"),
        ..Default::default()
    });
    let body = within(client.render(authed(as_responses, &token)))
        .await
        .expect("render")
        .into_inner()
        .provider_payload_json;
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    let cases = [
        (
            "chat",
            data("swe_agent_marshmallow.json"),
            false,
            pb::OutputFormat::OpenaiChat,
        ),
        (
            "anthropic",
            data("claude_code_rust_port.anthropic.json"),
            false,
            pb::OutputFormat::AnthropicMessages,
        ),
        (
            "responses",
            body["input"].to_string(),
            true,
            pb::OutputFormat::OpenaiResponses,
        ),
    ];
    for (name, json, responses, shape) in cases {
        let value: serde_json::Value = serde_json::from_str(&json).expect("json");
        let key = if value.get("messages").is_some() {
            "messages"
        } else {
            ""
        };
        let items: Vec<serde_json::Value> = match key {
            "messages" => value["messages"].as_array().expect("array").clone(),
            _ => value.as_array().expect("array").clone(),
        };
        let wrap = |part: &[serde_json::Value]| match key {
            "messages" => {
                let mut v = value.clone();
                v["messages"] = serde_json::Value::Array(part.to_vec());
                v.to_string()
            }
            _ => serde_json::Value::Array(part.to_vec()).to_string(),
        };
        let points = cuts(&items, responses);
        assert!(points.len() > 3, "{name}: too few cuts");
        let first = points[0];
        let start = |id: String, upto: usize| {
            let mut r = pb::CompactRequest {
                model: "gpt-4o".into(),
                max_input_tokens: 8_000,
                start_session: true,
                ..Default::default()
            };
            r.input = Some(pb::ProviderInput {
                thread_id: id,
                json: wrap(&items[..upto]),
                format: shape as i32,
            });
            r
        };
        let out = within(client.compact(authed(start(format!("{name}-s"), first), &token)))
            .await
            .unwrap_or_else(|s| panic!("{name}: {s:?}"))
            .into_inner();
        let mut state = out.session.expect("session");
        let mut from = first;
        for &to in points[1..].iter().chain(std::iter::once(&items.len())) {
            let req = pb::CompactRequest {
                model: "gpt-4o".into(),
                max_input_tokens: 8_000,
                append: Some(pb::ThreadAppend {
                    thread_id: format!("{name}-s"),
                    base_version: state.version,
                    messages: Vec::new(),
                    messages_json: serde_json::Value::Array(items[from..to].to_vec()).to_string(),
                    messages_format: shape as i32,
                }),
                ..Default::default()
            };
            let out = within(client.compact(authed(req, &token)))
                .await
                .unwrap_or_else(|s| panic!("{name} append {from}..{to}: {s:?}"))
                .into_inner();
            state = out.session.expect("session");
            from = to;
        }
        // The whole conversation read at once holds the same messages.
        let whole =
            within(client.compact(authed(start(format!("{name}-whole"), items.len()), &token)))
                .await
                .expect("whole")
                .into_inner()
                .session
                .expect("session");
        assert_eq!(state.messages, whole.messages, "{name}");
        assert_eq!(state.digest, whole.digest, "{name}: the same messages");
    }
    // An append's errors name the path inside its JSON.
    let mut r = pb::CompactRequest {
        start_session: true,
        ..Default::default()
    };
    r.input = Some(pb::ProviderInput {
        thread_id: "append-bad".into(),
        json: r#"[{"role":"user","content":"hi"}]"#.into(),
        ..Default::default()
    });
    let v = within(client.compact(authed(r, &token)))
        .await
        .expect("start")
        .into_inner()
        .session
        .expect("session")
        .version;
    let bad = pb::CompactRequest {
        append: Some(pb::ThreadAppend {
            thread_id: "append-bad".into(),
            base_version: v,
            messages_json: r#"[{"role":"tool","tool_call_id":"nope","content":"x"}]"#.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = within(client.compact(authed(bad, &token)))
        .await
        .expect_err("orphan result");
    assert_status(
        &err,
        Code::InvalidArgument,
        Some("append.messages_json.messages[0].tool_call_id"),
    );
    server.stop().await.expect("clean stop");
}

/// A message the caller marks `"protected": true` in its own JSON (the
/// only way to protect one when sending a provider's shape) stays verbatim
/// however small the budget, its label is reported, and neither mark
/// reaches the provider body.
#[tokio::test]
async fn a_protected_mark_in_provider_json_keeps_the_message_and_reports_its_label() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    let mut value: serde_json::Value =
        serde_json::from_str(&data("tau_bench_airline.json")).expect("json");
    let messages = value.as_array_mut().expect("a messages array");
    let rule = "Do not change the flights or the passengers, only the cabin.";
    messages.insert(
        1,
        serde_json::json!({"role": "user", "content": rule, "protected": true, "label": "Booking constraint"}),
    );
    messages.insert(
        2,
        serde_json::json!({"role": "assistant", "content": "Understood."}),
    );
    let json = value.to_string();
    for format in [
        pb::OutputFormat::OpenaiChat,
        pb::OutputFormat::AnthropicMessages,
        pb::OutputFormat::OpenaiResponses,
    ] {
        let req = tight_chat_input(
            format,
            format!("protected-{}", format.as_str_name()),
            json.clone(),
        );
        let out = within(client.render(authed(req.clone(), &token)))
            .await
            .unwrap_or_else(|s| panic!("{format:?}: {s:?}"))
            .into_inner();
        let compaction = out.compaction.expect("compaction");
        assert!(
            compaction.tokens_before > 6_000,
            "the budget forces compaction"
        );
        assert_eq!(compaction.pinned_labels, ["Booking constraint"]);
        // The same request again reuses the committed plan: the rule is
        // still pinned and still reported.
        let again = within(client.render(authed(req, &token)))
            .await
            .unwrap_or_else(|s| panic!("{format:?}: {s:?}"))
            .into_inner()
            .compaction
            .expect("compaction");
        assert!(again.reused, "{format:?}: the plan is reused");
        assert_eq!(again.pinned_labels, ["Booking constraint"]);
        let body: serde_json::Value =
            serde_json::from_str(&out.provider_payload_json).expect("body");
        let text = body.to_string();
        assert!(
            text.contains(rule),
            "{format:?}: the protected message is kept"
        );
        assert!(
            !text.contains("\"protected\"") && !text.contains("Booking constraint"),
            "{format:?}: marks are not sent on"
        );
    }
}

/// A server configured with its own protected mark (`policy.protected_flag:
/// pinned`, seed 002's configurable flag name) reads that key, at the top
/// level or under `metadata`, in full bodies and in appended JSON; a
/// `"protected"` key is then the caller's own and pins nothing; a mark of
/// the wrong type is named by its configured key.
#[tokio::test]
async fn a_configured_protected_flag_name_is_the_mark_read() {
    let server = TestServer::start_with(|s| s.policy.protected_flag = "pinned".into()).await;
    let mut client = server.client().await;
    let token = token("acme", PERMS);
    let mut value: serde_json::Value =
        serde_json::from_str(&data("tau_bench_airline.json")).expect("json");
    let messages = value.as_array_mut().expect("a messages array");
    let rule = "Do not change the flights or the passengers, only the cabin.";
    // Long enough that compaction takes it unless it is pinned.
    let decoy = "Please also keep my seat preference, my meal choice and my loyalty number on file for later trips. "
        .repeat(60);
    let decoy = decoy.trim_end();
    messages.insert(
        1,
        serde_json::json!({"role": "user", "content": rule, "metadata": {"pinned": true, "label": "Booking constraint"}}),
    );
    messages.insert(
        2,
        serde_json::json!({"role": "assistant", "content": "Understood."}),
    );
    messages.insert(
        3,
        serde_json::json!({"role": "user", "content": decoy, "protected": true}),
    );
    messages.insert(
        4,
        serde_json::json!({"role": "assistant", "content": "Noted."}),
    );
    let req = tight_chat_input(
        pb::OutputFormat::OpenaiChat,
        "flag".into(),
        value.to_string(),
    );
    let out = within(client.render(authed(req, &token)))
        .await
        .expect("render")
        .into_inner();
    let compaction = out.compaction.expect("compaction");
    assert!(
        compaction.tokens_before > 6_000,
        "the budget forces compaction"
    );
    assert_eq!(compaction.pinned_labels, ["Booking constraint"]);
    let body: serde_json::Value = serde_json::from_str(&out.provider_payload_json).expect("body");
    let verbatim = |text: &str| {
        body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| said(m["content"].as_str().unwrap_or("")) == text)
    };
    assert!(verbatim(rule), "the configured mark pins the rule");
    // (A person's words may still be quoted in a summary.)
    assert!(!verbatim(decoy), "`protected` is an ordinary key here");
    assert!(
        !out.provider_payload_json.contains("\"pinned\""),
        "marks are not sent on"
    );

    // The wrong type is refused by the configured key's name.
    let mut bad = render_req(pb::OutputFormat::OpenaiChat);
    bad.input = Some(pb::ProviderInput {
        thread_id: "flag-bad".into(),
        json: r#"[{"role": "user", "content": "hi", "pinned": "yes"}]"#.into(),
        format: pb::OutputFormat::OpenaiChat as i32,
    });
    let e = within(client.render(authed(bad, &token)))
        .await
        .expect_err("a string mark");
    assert_status(
        &e,
        Code::InvalidArgument,
        Some("input.json.messages[0].pinned"),
    );
    server.stop().await.expect("clean stop");
}
