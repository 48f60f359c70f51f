//! Threads as real agents produce them: a user message typed while a tool
//! ran, call ids reused every turn, calls still awaiting approval, Anthropic
//! thinking blocks and OpenAI Responses reasoning items. Every rendered form
//! must be one the provider accepts.

use crate::common;

use common::{log_lines, said, Harness};
use compactd::app::AppError;
use compactd::model::{Content, ContentPart, Role, Thread};
use compactd::provider::thread_from_json;
use compactd::provider::Format;
use compactd::provider::{anthropic, openai_chat, openai_responses};
use compactd::render::{ProviderOptions, Request};
use serde_json::{json, Value};

fn opts() -> ProviderOptions {
    ProviderOptions {
        model: "gpt-4o".into(),
        max_output_tokens: Some(1024),
        ..Default::default()
    }
}

fn import(messages: Value) -> Thread {
    thread_from_json(&messages, "log").expect("imports").thread
}

/// Every provider form of `request` passes that provider's structure check.
fn all_forms_valid(request: &Request) -> (Value, Value, Value) {
    let oa = openai_chat::to_openai(request, &opts());
    openai_chat::check_pairing(&oa).unwrap_or_else(|e| panic!("openai: {e}\n{oa:#}"));
    let an = anthropic::to_anthropic(request, &opts());
    anthropic::check_structure(&an).unwrap_or_else(|e| panic!("anthropic: {e}\n{an:#}"));
    let rs = openai_responses::to_responses(request, &opts());
    openai_responses::check_structure(&rs).unwrap_or_else(|e| panic!("responses: {e}\n{rs:#}"));
    (oa, an, rs)
}

#[test]
fn a_message_typed_while_a_tool_ran_moves_after_the_result() {
    let t = import(json!([
        {"role": "user", "content": "Deploy the billing service."},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "d1", "type": "function", "function": {"name": "deploy", "arguments": "{\"svc\":\"billing\"}"}},
            {"id": "d2", "type": "function", "function": {"name": "notify", "arguments": "{}"}}
        ]},
        {"role": "user", "content": "Oh, and use the blue pool."},
        {"role": "tool", "tool_call_id": "d2", "content": "notified #ops"},
        {"role": "tool", "tool_call_id": "d1", "content": "{\"status\":\"ok\"}"},
        {"role": "assistant", "content": "Deployed; noted the blue pool for next time."}
    ]));
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (oa, _, _) = all_forms_valid(&out.request);
    let roles: Vec<&str> = oa["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "user",
            "assistant"
        ]
    );
    // Parallel results in call order.
    assert_eq!(oa["messages"][3]["tool_call_id"], "d1");
    assert_eq!(oa["messages"][4]["tool_call_id"], "d2");
    assert_eq!(
        said(oa["messages"][5]["content"].as_str().expect("text")),
        "Oh, and use the blue pool."
    );
    assert!(
        out.request
            .notes
            .iter()
            .any(|n| n.contains("moved next to their call")),
        "{:?}",
        out.request.notes
    );
}

#[test]
fn call_ids_reused_every_turn_are_accepted() {
    let mut messages = Vec::new();
    for turn in 0..4 {
        messages.push(json!({"role": "user", "content": format!("Look up ticket {turn}.")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "ticket", "arguments": format!("{{\"n\":{turn}}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": format!("ticket {turn}: open")}));
        messages.push(json!({"role": "assistant", "content": format!("Ticket {turn} is open.")}));
    }
    let t = import(Value::Array(messages));
    t.validate(&Default::default())
        .expect("reused ids validate");
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (oa, an, _) = all_forms_valid(&out.request);
    // OpenAI: as the caller sent them.
    let ids: Vec<&str> = oa["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["call_0"; 4]);
    // Anthropic: one use per id, the last one unchanged, results matching.
    let uses: Vec<String> = an["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(uses, ["call_0_1", "call_0_2", "call_0_3", "call_0"]);
    assert_eq!(anthropic::tool_id_rewrites(&out.request).len(), 3);
    // Responses matches outputs to calls by call_id across the whole input:
    // one use per id there too, each output carrying its own call's id.
    let rs = openai_responses::to_responses(&out.request, &opts());
    let pairs: Vec<(String, String)> = rs["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call" || i["type"] == "function_call_output")
        .map(|i| {
            (
                i["type"].as_str().unwrap().to_string(),
                i["call_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = ["call_0_1", "call_0_2", "call_0_3", "call_0"]
        .iter()
        .flat_map(|id| {
            [
                ("function_call".to_string(), id.to_string()),
                ("function_call_output".to_string(), id.to_string()),
            ]
        })
        .collect();
    assert_eq!(pairs, expected);
    assert_eq!(openai_responses::tool_id_rewrites(&out.request).len(), 3);

    // The same thread compacted hard still pairs every result with its own call.
    let mut h = Harness::default();
    h.policy.keep_recent_turns = 1;
    let small = h.compact(&t, 900, None);
    if let Ok(out) = small {
        all_forms_valid(&out.request);
    }
}

#[test]
fn ids_anthropic_refuses_are_rewritten_consistently() {
    let t = import(json!([
        {"role": "user", "content": "Read the config."},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "functions.Read:3", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "functions.Read:3", "content": "port = 8080"}
    ]));
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (_, an, _) = all_forms_valid(&out.request);
    let text = an.to_string();
    assert!(!text.contains("functions.Read:3"), "{text}");
    assert!(text.contains("\"toolu_"), "{text}");
}

fn pending_thread() -> Thread {
    let mut messages =
        vec![json!({"role": "system", "content": "Ask before destructive actions."})];
    for turn in 0..10 {
        messages.push(json!({"role": "user", "content": format!("Summarize log batch {turn}.")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("r{turn}"), "type": "function", "function": {"name": "read_log", "arguments": "{}"}}
        ]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("r{turn}"), "content": log_lines(60)}),
        );
        messages.push(json!({"role": "assistant", "content": format!("Batch {turn} is clean.")}));
    }
    messages.push(json!({"role": "user", "content": "Now drop the staging database."}));
    messages.push(json!({"role": "assistant", "content": "This needs your approval.", "tool_calls": [
        {"id": "drop1", "type": "function", "function": {"name": "drop_database", "arguments": "{\"db\":\"staging\"}"}}
    ]}));
    import(Value::Array(messages))
}

#[test]
fn pending_calls_are_refused_unless_left_out() {
    let t = pending_thread();
    t.validate(&Default::default())
        .expect("a pending call is valid input");
    let mut h = Harness::default();
    match h.compact(&t, 100_000, None) {
        Err(AppError::PendingToolCall { field, call_id, .. }) => {
            assert_eq!(call_id, "drop1");
            assert_eq!(
                field,
                format!("thread.messages[{}].tool_calls[0].id", t.messages.len() - 1)
            );
        }
        other => panic!(
            "expected a pending-call refusal, got {:?}",
            other.map(|o| o.tokens)
        ),
    }
    h.omit_pending_calls = true;
    let out = h.compact(&t, 100_000, None).expect("renders without it");
    let (oa, _, _) = all_forms_valid(&out.request);
    assert!(!oa.to_string().contains("drop1"));
    assert!(oa.to_string().contains("This needs your approval."));
    assert!(out.request.notes.iter().any(|n| n.contains("drop1")));

    // Compacted hard, the pending call's message stays verbatim.
    let full = out.tokens.total;
    let squeezed = h.compact(&t, full / 2, None).expect("compacts");
    let last = t.messages.last().unwrap();
    assert!(squeezed
        .request
        .messages
        .iter()
        .any(|m| m.source_id == last.id && m.content == last.content));
    assert!(squeezed
        .plan
        .validate_against(&t, &h.policy.roles_never_prune)
        .is_ok());
}

#[test]
fn thinking_goes_to_anthropic_byte_for_byte_and_nowhere_else() {
    let thinking =
        "The user wants the weather; I should call the tool.\n\tIndented, trailing space ";
    let signature = "EqQBCkgIARABGAIiQL+sig/with+slashes==";
    let t = Thread {
        id: "think".into(),
        messages: serde_json::from_value(json!([
            {"id": "u1", "role": "user", "turn": 1, "content": "Weather in Oslo?"},
            {"id": "a1", "role": "assistant", "turn": 1,
             "content": [
                 {"type": "thinking", "thinking": thinking, "signature": signature},
                 {"type": "redacted_thinking", "data": "opaque=="},
                 {"type": "text", "text": "Let me check."}
             ],
             "tool_calls": [{"id": "toolu_01", "name": "weather", "arguments": {"city": "Oslo"}}]},
            {"id": "t1", "role": "tool", "turn": 1,
             "tool_result": {"tool_name": "weather", "tool_call_id": "toolu_01", "content": "12C"}}
        ]))
        .unwrap(),
    };
    t.validate(&Default::default()).unwrap();
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (oa, an, rs) = all_forms_valid(&out.request);
    let assistant = &an["messages"][1]["content"];
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": thinking, "signature": signature})
    );
    assert_eq!(
        assistant[1],
        json!({"type": "redacted_thinking", "data": "opaque=="})
    );
    assert_eq!(assistant[2]["type"], "text");
    assert_eq!(assistant[3]["type"], "tool_use");
    for other in [oa.to_string(), rs.to_string()] {
        assert!(!other.contains("should call the tool") && !other.contains("opaque=="));
    }
}

#[test]
fn reasoning_items_go_back_to_responses_before_their_calls() {
    let t = Thread {
        id: "reason".into(),
        messages: serde_json::from_value(json!([
            {"id": "u1", "role": "user", "turn": 1, "content": "Find the invoice."},
            {"id": "a1", "role": "assistant", "turn": 1,
             "content": [{"type": "reasoning", "id": "rs_1", "summary": ["Search first."], "encrypted_content": "gAAAA=="}],
             "tool_calls": [{"id": "call_9", "name": "search", "arguments": {"q": "invoice"}}]},
            {"id": "t1", "role": "tool", "turn": 1,
             "tool_result": {"tool_name": "search", "tool_call_id": "call_9", "content": "INV-7"}}
        ]))
        .unwrap(),
    };
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (oa, an, rs) = all_forms_valid(&out.request);
    let items = rs["input"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(items[1]["encrypted_content"], "gAAAA==");
    for other in [oa.to_string(), an.to_string()] {
        assert!(!other.contains("gAAAA=="));
    }
    // Model reasoning is only allowed on assistant messages.
    let mut bad = t.clone();
    std::sync::Arc::make_mut(&mut bad.messages[0]).content =
        Content::Parts(vec![ContentPart::Reasoning {
            rest: None,
            id: "rs_x".into(),
            summary: vec![],
            encrypted_content: None,
        }]);
    assert!(bad.validate(&Default::default()).is_err());
    assert_eq!(bad.messages[0].role, Role::User);
}

#[test]
fn an_anthropic_log_comes_back_to_anthropic_unchanged_where_it_matters() {
    let body = json!({
        "model": "claude-opus-4-1",
        "max_tokens": 2048,
        "system": "You maintain the CI fleet.",
        "messages": [
            {"role": "user", "content": "Why is runner 7 offline?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Check its heartbeat first.", "signature": "c2lnLTE="},
                {"type": "tool_use", "id": "toolu_hb", "name": "heartbeat", "input": {"runner": 7}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_hb", "content": "last seen 3h ago", "is_error": false}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Three hours: probably the disk.", "signature": "c2lnLTI="},
                {"type": "text", "text": "It stopped reporting three hours ago."}
            ]}
        ]
    });
    let input = thread_from_json(&body, "ci").expect("imports");
    let mut h = Harness::default();
    h.system = input.system.clone();
    // By default the result is rendered as delimited data ...
    let out = h.compact(&input.thread, 100_000, None).expect("renders");
    let (_, an, _) = all_forms_valid(&out.request);
    let wrapped = an["messages"][2]["content"][0]["content"]
        .as_str()
        .expect("text");
    assert!(
        wrapped.starts_with("<tool_output id=") && wrapped.contains("\nlast seen 3h ago\n"),
        "{wrapped}"
    );
    // ... and with that off, the log comes back as it was.
    h.policy.render.delimit_tool_output = false;
    let out = h.compact(&input.thread, 100_000, None).expect("renders");
    let (_, an, _) = all_forms_valid(&out.request);
    // The cache marks compactd adds (tested on their own) aside.
    let plain = ProviderOptions {
        prompt_cache: compactd::render::PromptCache {
            breakpoints: false,
            ..Default::default()
        },
        ..opts()
    };
    assert!(an["system"][0]["cache_control"].is_object());
    let an = anthropic::to_anthropic(&out.request, &plain);
    assert_eq!(an["system"], body["system"]);
    // Assistant turns, thinking and signatures included, come back exactly;
    // user text may come back as a text block instead of a string.
    assert_eq!(an["messages"][1], body["messages"][1]);
    assert_eq!(an["messages"][3], body["messages"][3]);
    assert_eq!(
        said(
            an["messages"][0]["content"][0]["text"]
                .as_str()
                .expect("text")
        ),
        body["messages"][0]["content"]
    );
    let result = &an["messages"][2]["content"][0];
    assert_eq!(
        (&result["tool_use_id"], &result["content"]),
        (&json!("toolu_hb"), &json!("last seen 3h ago"))
    );
}

#[test]
fn a_responses_log_comes_back_to_responses() {
    let body = json!({
        "model": "gpt-5",
        "instructions": "You triage alerts.",
        "input": [
            {"type": "message", "role": "user", "content": "Is the disk alert real?"},
            {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "Query metrics."}], "encrypted_content": "gAAAAB=="},
            {"type": "function_call", "call_id": "call_m", "name": "metrics", "arguments": "{\"host\":\"db-2\"}"},
            {"type": "function_call_output", "call_id": "call_m", "output": "disk 97%"},
            {"type": "message", "role": "assistant", "content": "Yes: db-2 is at 97%."}
        ]
    });
    let input = thread_from_json(&body, "alerts").expect("imports");
    let mut h = Harness::default();
    h.system = input.system.clone();
    // Tool output and user text as they arrived (the default renders them
    // as delimited data).
    h.policy.render.delimit_tool_output = false;
    h.policy.render.delimit_user_content = false;
    let out = h.compact(&input.thread, 100_000, None).expect("renders");
    let (_, _, rs) = all_forms_valid(&out.request);
    assert_eq!(rs["instructions"], body["instructions"]);
    assert_eq!(rs["input"], body["input"]);
}

#[test]
fn a_merged_assistant_turn_still_opens_with_its_thinking() {
    let t = Thread {
        id: "merge".into(),
        messages: serde_json::from_value(json!([
            {"id": "u1", "role": "user", "turn": 1, "content": "Restart the worker."},
            {"id": "a1", "role": "assistant", "turn": 1, "content": "Okay."},
            {"id": "a2", "role": "assistant", "turn": 1,
             "content": [{"type": "thinking", "thinking": "Check status first.", "signature": "c2ln"}],
             "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"cmd": "systemctl status worker"}}]},
            {"id": "t1", "role": "tool", "turn": 1,
             "tool_result": {"tool_name": "shell", "tool_call_id": "c1", "content": "active"}}
        ]))
        .unwrap(),
    };
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (_, an, _) = all_forms_valid(&out.request);
    let turn = an["messages"][1]["content"].as_array().unwrap();
    let kinds: Vec<&str> = turn.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use"]);
}

/// Whatever the model is called behind an Anthropic-format endpoint (a
/// Bedrock inference-profile ARN, a gateway alias), the text is Claude's and
/// is counted as Claude's.
#[test]
fn an_anthropic_body_is_counted_as_claude_whatever_the_model_is_called() {
    let t = import(json!([
        {"role": "user", "content": "Summarize the incident."},
        {"role": "assistant", "content": "The deploy failed on quota."}
    ]));
    let h = Harness::default();
    let claude = compactd::tokens::counter_for_model("claude-sonnet-4-5")
        .name()
        .to_string();
    for model in [
        "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123",
        "sonnet",
    ] {
        let (_, out) = h
            .render_as(&t, 100_000, None, Format::AnthropicMessages, Some(model))
            .expect("renders");
        assert_eq!(out.audit.tokenizer, claude, "{model}");
    }
    let (_, out) = h
        .render_as(&t, 100_000, None, Format::OpenAiChat, Some("gpt-4o"))
        .expect("renders");
    assert_eq!(out.audit.tokenizer, "o200k_base");
}

/// An image where the provider takes only text (an assistant message) goes
/// as its reference; a long URL costs more than the image would, and the
/// budget must count that, not the image price.
#[test]
fn an_image_sent_as_text_is_counted_as_text() {
    let url = format!(
        "https://cdn.example.com/render?{}",
        "q=0123456789abcdef&".repeat(1200)
    );
    let t = Thread::new(
        "long-url",
        vec![
            msg(
                "m0",
                Role::User,
                Content::Text("Draw the p99 chart.".into()),
            ),
            msg(
                "m1",
                Role::Assistant,
                Content::Parts(vec![
                    ContentPart::Text {
                        text: "Here it is.".into(),
                    },
                    ContentPart::Image { url },
                ]),
            ),
        ],
    );
    let h = Harness::default();
    for (format, model) in [
        (Format::OpenAiChat, "gpt-4o"),
        (Format::AnthropicMessages, "claude-3-5-sonnet"),
        (Format::OpenAiResponses, "gpt-4.1"),
    ] {
        h.render_as(&t, 200_000, None, format, Some(model))
            .unwrap_or_else(|e| panic!("{format:?}: {e}"));
    }
}

/// Responses refuses an empty message and a reasoning item without the item
/// it preceded: blank user parts go as `(empty)`, and reasoning whose
/// message was left with nothing to precede is not sent.
#[test]
fn responses_bodies_never_carry_empty_messages_or_dangling_reasoning() {
    let t = Thread::new(
        "blank",
        vec![
            msg("m0", Role::User, Content::Parts(vec![])),
            msg(
                "m1",
                Role::Assistant,
                Content::Parts(vec![ContentPart::Reasoning {
                    rest: None,
                    id: "rs_1".into(),
                    summary: vec![],
                    encrypted_content: Some("gAAAA".into()),
                }]),
            ),
            msg("m2", Role::User, Content::Text("And now?".into())),
        ],
    );
    let out = Harness::default()
        .compact(&t, 100_000, None)
        .expect("renders");
    let (_, _, rs) = all_forms_valid(&out.request);
    let input = rs["input"].as_array().unwrap();
    assert_eq!(input[0]["content"], "(empty)");
    assert!(input.iter().all(|i| i["type"] != "reasoning"), "{rs:#}");
}

fn msg(id: &str, role: Role, content: Content) -> compactd::model::Message {
    compactd::model::Message {
        id: id.into(),
        role,
        content,
        tool_calls: vec![],
        tool_result: None,
        turn: 1,
        metadata: Default::default(),
    }
}

/// A parallel batch a user interrupted: one call never got its result, and
/// the conversation went on. No provider takes the call, and no client can
/// send its result any more: it is left out (its answered sibling stays),
/// named in a warning, and the thread compacts and renders as any other.
#[test]
fn abandoned_calls_are_left_out_with_a_warning_not_refused() {
    let t = import(json!([
        {"role": "user", "content": "Check both hosts."},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "h1", "type": "function", "function": {"name": "ping", "arguments": "{\"host\":\"a\"}"}},
            {"id": "h2", "type": "function", "function": {"name": "ping", "arguments": "{\"host\":\"b\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "h1", "content": "a: up"},
        {"role": "user", "content": "[Request interrupted by user] never mind b, what about a?"},
        {"role": "assistant", "content": "Host a is up."},
        {"role": "user", "content": "Thanks."}
    ]));
    let h = Harness::default();
    let (_, out) = h
        .render_as(&t, 100_000, None, Format::OpenAiChat, None)
        .expect("an abandoned call is not a pending one");
    let body = match &out.output {
        compactd::app::RenderedOutput::Payload(json) => json.clone(),
        other => panic!("{other:?}"),
    };
    let body: Value = serde_json::from_str(&body).unwrap();
    openai_chat::check_pairing(&body).unwrap();
    assert!(!body.to_string().contains("\"h2\""), "{body}");
    assert!(body.to_string().contains("\"h1\""), "{body}");
    let warned = |ws: &[String]| {
        ws.iter()
            .any(|w| w.contains("h2 (ping)") && w.contains("abandoned"))
    };
    assert!(warned(&out.audit.warnings), "{:?}", out.audit.warnings);
    assert!(warned(&out.compaction.expect("compacted").all_warnings()));

    // Only the last assistant message's calls are pending: those the client
    // still has to answer, and the refusal says how.
    let mut pending = t.clone();
    pending.messages.truncate(3);
    match Harness::default().compact(&pending, 100_000, None) {
        Err(AppError::PendingToolCall { call_id, field, .. }) => {
            assert_eq!(call_id, "h2");
            assert_eq!(field, "thread.messages[1].tool_calls[1].id");
        }
        other => panic!("{:?}", other.map(|o| o.tokens)),
    }
}

/// Anthropic drops a model's thinking from the context once the user speaks
/// again; only the tool loop in progress must carry its own back. So the
/// earlier turn's thinking is neither sent nor counted, and the loop's is
/// sent byte for byte.
#[test]
fn earlier_turns_thinking_is_neither_sent_nor_counted() {
    let long_thought = "Weighing the options at length. ".repeat(200);
    let with = Thread {
        id: "think2".into(),
        messages: serde_json::from_value(json!([
            {"id": "u1", "role": "user", "turn": 1, "content": "Weather in Oslo?"},
            {"id": "a1", "role": "assistant", "turn": 1, "content": [
                {"type": "thinking", "thinking": long_thought, "signature": "c2lnLTE="},
                {"type": "text", "text": "12C and clear."}
            ]},
            {"id": "u2", "role": "user", "turn": 2, "content": "And Bergen?"},
            {"id": "a2", "role": "assistant", "turn": 2, "content": [
                {"type": "thinking", "thinking": "Call the tool for Bergen.", "signature": "c2lnLTI="}
             ],
             "tool_calls": [{"id": "toolu_b", "name": "weather", "arguments": {"city": "Bergen"}}]},
            {"id": "t2", "role": "tool", "turn": 2,
             "tool_result": {"tool_name": "weather", "tool_call_id": "toolu_b", "content": "9C, rain"}}
        ]))
        .unwrap(),
    };
    let mut without = with.clone();
    std::sync::Arc::make_mut(&mut without.messages[1]).content =
        Content::Parts(vec![ContentPart::Text {
            text: "12C and clear.".into(),
        }]);
    let h = Harness::default();
    let body = |t: &Thread| {
        let (_, out) = h
            .render_as(
                t,
                100_000,
                None,
                Format::AnthropicMessages,
                Some("claude-sonnet-4-5"),
            )
            .expect("renders");
        let compactd::app::RenderedOutput::Payload(json) = &out.output else {
            panic!("a payload")
        };
        (
            serde_json::from_str::<Value>(json).unwrap(),
            out.tokens.total,
        )
    };
    let (an, counted) = body(&with);
    anthropic::check_structure(&an).unwrap();
    assert!(!an.to_string().contains("Weighing the options"), "{an}");
    assert_eq!(an["messages"][1]["content"][0]["type"], "text");
    assert_eq!(
        an["messages"][3]["content"][0],
        json!({"type": "thinking", "thinking": "Call the tool for Bergen.", "signature": "c2lnLTI="})
    );
    // Counted as if the earlier thinking were not there at all.
    let (_, without_count) = body(&without);
    assert_eq!(counted, without_count);
}
