//! The provider vocabulary beyond text and function calls: carried items
//! and blocks, pairs of them, calls and results in their provider form,
//! and what other formats make of them.

use serde_json::{json, Value};

use super::{thread_from_json, Format, ProviderOptions};
use crate::model::{Content, ContentPart, Dialect, Message, ProviderPart, Role};
use crate::render::{Origin, RenderedMessage, Request};

fn parts(m: &Message) -> Vec<&ProviderPart> {
    match &m.content {
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Provider(p) => Some(p),
                _ => None,
            })
            .collect(),
        Content::Text(_) => Vec::new(),
    }
}

fn opts() -> ProviderOptions {
    ProviderOptions {
        model: "m".into(),
        max_output_tokens: None,
        // The format tests read bodies as encoded; the marks have their own.
        prompt_cache: crate::render::PromptCache {
            breakpoints: false,
            ..Default::default()
        },
    }
}

/// The thread's messages rendered verbatim, as the renderer would.
fn request(v: &Value) -> Request {
    let input = thread_from_json(v, "t").expect("imports");
    let messages = input
        .thread
        .messages
        .iter()
        .map(|m| {
            crate::render::render_message(
                m,
                crate::model::Action::Include,
                // Bodies as they came: the delimiters have their own tests.
                &crate::render::RenderOptions {
                    delimit_tool_output: false,
                    delimit_user_content: false,
                    ..Default::default()
                },
            )
            .expect("rendered")
        })
        .collect();
    Request {
        system: input.system,
        messages,
        tools: Vec::new(),
        notes: Vec::new(),
    }
}

#[test]
fn a_responses_output_joins_the_message_of_the_item_it_answers() {
    let input = json!({"input": [
        {"role": "user", "content": "go"},
        {"type": "computer_call", "id": "cu_1", "call_id": "c1", "status": "completed",
         "pending_safety_checks": [], "action": {"type": "screenshot"}},
        {"type": "function_call", "call_id": "f1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "ok"},
        {"type": "computer_call_output", "call_id": "c1",
         "output": {"type": "computer_screenshot", "image_url": "https://s/1.png"}},
        {"type": "mcp_approval_request", "id": "r1", "name": "x", "arguments": "{}", "server_label": "s"},
        {"role": "user", "content": "ok"},
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": true},
    ]});
    let t = thread_from_json(&input, "t").expect("imports").thread;
    let kinds = |i: usize| -> Vec<&str> {
        parts(&t.messages[i])
            .iter()
            .map(|p| p.kind.as_str())
            .collect()
    };
    assert_eq!(kinds(1), ["computer_call", "computer_call_output"]);
    // Across the user's message that came between them.
    assert_eq!(kinds(3), ["mcp_approval_request", "mcp_approval_response"]);
    assert_eq!(t.messages[1].tool_calls.len(), 1);
    assert_eq!(t.messages[2].role, Role::Tool);
    // An output that answers nothing is refused, naming its call id.
    let orphan = json!({"input": [{"role": "user", "content": "go"},
        {"type": "shell_call_output", "call_id": "nope", "output": []}]});
    let e = thread_from_json(&orphan, "t").expect_err("orphan");
    assert_eq!(e.path, "input[1].call_id");
}

#[test]
fn a_compaction_pins_what_precedes_it() {
    for input in [
        json!({"input": [{"role": "user", "content": "a"},
            {"type": "compaction", "encrypted_content": "ZW5j", "id": "cmp_1"},
            {"role": "user", "content": "b"}]}),
        json!({"messages": [{"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "compaction", "content": "Summary so far."}]},
            {"role": "user", "content": "b"}]}),
    ] {
        let t = thread_from_json(&input, "t").expect("imports").thread;
        let pinned: Vec<bool> = t.messages.iter().map(|m| m.metadata.protected).collect();
        assert_eq!(pinned, [true, true, false], "{input}");
    }
}

#[test]
fn each_carried_type_goes_to_its_own_format_and_text_goes_everywhere() {
    let carried =
        |d: Dialect, kind: &str, v: Value| ContentPart::Provider(ProviderPart::new(d, kind, &v));
    let cases = [
        (
            carried(
                Dialect::OpenAiResponses,
                "web_search_call",
                json!({"type": "web_search_call", "id": "w"}),
            ),
            false,
        ),
        (
            carried(
                Dialect::AnthropicMessages,
                "document",
                json!({"type": "document"}),
            ),
            false,
        ),
        (
            carried(
                Dialect::OpenAiChat,
                "input_audio",
                json!({"type": "input_audio"}),
            ),
            false,
        ),
        (
            carried(
                Dialect::AnthropicMessages,
                "text",
                json!({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}),
            ),
            true,
        ),
        (
            carried(
                Dialect::OpenAiChat,
                "refusal",
                json!({"type": "refusal", "refusal": "no"}),
            ),
            true,
        ),
    ];
    for (part, text) in cases {
        let ContentPart::Provider(p) = &part else {
            unreachable!()
        };
        let m = Message {
            id: "m0".into(),
            role: Role::User,
            content: Content::Parts(vec![part.clone()]),
            tool_calls: Vec::new(),
            tool_result: None,
            turn: 0,
            metadata: Default::default(),
        };
        for f in Format::ALL {
            let refused = f.unsendable([&m]);
            let own = f.dialect() == Some(p.dialect) || f == Format::Neutral;
            assert_eq!(
                refused.is_none(),
                own || text,
                "{} to {f:?}: {refused:?}",
                p.kind
            );
            if let Some(u) = refused {
                assert!(u.to_string().contains(&format!("{:?}", p.kind)), "{u}");
            }
        }
    }
}

#[test]
fn calls_and_results_go_back_in_their_provider_form() {
    let responses = json!({"input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{ \"a\": 1 }",
         "status": "completed", "namespace": "tools"},
        {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "status": "completed",
         "output": [{"type": "input_text", "text": "seen"}, {"type": "input_image", "image_url": "https://i/1.png", "detail": "high"}]},
        {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
    ]});
    let body = super::openai_responses::to_responses(&request(&responses), &opts());
    let input = body["input"].as_array().expect("input");
    for item in &responses["input"].as_array().expect("items")[1..] {
        assert!(input.contains(item), "{item} not in {body}");
    }
    super::openai_responses::check_structure(&body).expect("valid");

    let chat = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c3", "type": "custom", "custom": {"name": "patch", "input": "*** Begin"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "done"},
        {"role": "assistant", "content": null, "function_call": {"name": "w", "arguments": "{\"x\": 1}"}},
        {"role": "function", "name": "w", "content": "1"},
    ]});
    let req = request(&chat);
    let body = super::openai_chat::to_openai(&req, &opts());
    assert_eq!(body["messages"], chat["messages"]);
    // Anthropic has no custom tools; a legacy call is a call there.
    assert!(Format::AnthropicMessages
        .unsendable(request_messages(&chat).iter())
        .is_some_and(|u| u.kind == "custom"));
    let responses_body = super::openai_responses::to_responses(&req, &opts());
    let kinds: Vec<&str> = responses_body["input"]
        .as_array()
        .expect("input")
        .iter()
        .filter_map(|i| i["type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "custom_tool_call",
            "custom_tool_call_output",
            "function_call",
            "function_call_output"
        ]
    );
}

fn request_messages(v: &Value) -> Vec<Message> {
    thread_from_json(v, "t")
        .expect("imports")
        .thread
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect()
}

#[test]
fn an_anthropic_result_of_blocks_keeps_them_inside_the_delimiter() {
    let anthropic = json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {},
                                            "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "chart"},
            {"type": "image", "source": {"type": "url", "url": "https://i/1.png"}}]}]},
    ]});
    let mut req = request(&anthropic);
    let plain = super::anthropic::to_anthropic(&req, &opts());
    assert_eq!(plain["messages"], anthropic["messages"]);
    // With the delimiter: the blocks as they came, between its two lines.
    for m in &mut req.messages {
        if m.role == Role::Tool {
            m.content = Content::Text(crate::render::delimit_data(&m.content.flat_text()));
        }
    }
    let body = super::anthropic::to_anthropic(&req, &opts());
    let content = &body["messages"][2]["content"][0]["content"];
    assert_eq!(
        content[1],
        anthropic["messages"][2]["content"][0]["content"][0]
    );
    assert_eq!(content[2]["type"], "image");
    assert!(content[0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("<tool_output id=")));
    // Cleared: its text, its other keys kept.
    for m in &mut req.messages {
        if m.role == Role::Tool {
            m.content = Content::Text("[cleared]".into());
            m.origin = Origin::Cleared;
        }
    }
    let body = super::anthropic::to_anthropic(&req, &opts());
    assert_eq!(body["messages"][2]["content"][0]["content"], "[cleared]");
    let _: &RenderedMessage = &req.messages[0];
}

#[test]
fn unknown_types_are_refused_where_the_deployment_says_so() {
    use crate::model::{ThreadLimits, UnknownItems};
    let input = json!({"input": [{"role": "user", "content": "go"},
        {"type": "hologram_call", "id": "h1"}]});
    let t = thread_from_json(&input, "t").expect("carried").thread;
    assert!(t.validate(&ThreadLimits::default()).is_ok());
    let strict = ThreadLimits {
        unknown_items: UnknownItems::Refuse,
        ..ThreadLimits::default()
    };
    let e = t.validate(&strict).expect_err("refused");
    assert_eq!(e.field_path(), "thread.messages[1].parts[0]");
    assert!(e.to_string().contains("hologram_call"), "{e}");
}
