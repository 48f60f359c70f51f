//! Hand-built requests and a proptest generator shared by the format
//! tests, so every format is checked against the same inputs.

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::model::{Content, ContentPart, Role, ToolCall, ToolSchema};
use crate::render::{Origin, ProviderOptions, RenderedMessage, Request};

pub(crate) fn opts() -> ProviderOptions {
    ProviderOptions {
        model: "test-model".into(),
        max_output_tokens: None,
        // The format tests read bodies as encoded; the marks have their own.
        prompt_cache: crate::render::PromptCache {
            breakpoints: false,
            ..Default::default()
        },
    }
}

pub(crate) fn msg(role: Role, text: &str) -> RenderedMessage {
    RenderedMessage {
        wire: None,
        role,
        content: Content::Text(text.into()),
        tool_calls: Vec::new(),
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        source_id: format!("m-{}", text.len()),
        origin: Origin::Verbatim,
    }
}

pub(crate) fn calls(text: &str, calls: &[(&str, &str, Value)]) -> RenderedMessage {
    RenderedMessage {
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                wire: None,
                id: (*id).into(),
                name: (*name).into(),
                arguments: args.clone(),
            })
            .collect(),
        ..msg(Role::Assistant, text)
    }
}

pub(crate) fn result(id: &str, name: &str, text: &str, is_error: bool) -> RenderedMessage {
    RenderedMessage {
        tool_call_id: Some(id.into()),
        tool_name: Some(name.into()),
        is_error,
        ..msg(Role::Tool, text)
    }
}

pub(crate) fn summary(text: &str) -> RenderedMessage {
    RenderedMessage {
        origin: Origin::Summary,
        ..msg(Role::Assistant, text)
    }
}

fn tools() -> Vec<ToolSchema> {
    vec![
        ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolSchema {
            name: "list_dir".into(),
            description: String::new(),
            parameters: Value::Null,
        },
    ]
}

/// Named fixtures for the snapshot tests.
pub(crate) fn fixtures() -> Vec<(&'static str, Request)> {
    vec![
        (
            "plain_dialogue",
            Request {
                system: Some("You are a helpful assistant.".into()),
                messages: vec![
                    msg(Role::User, "Hello"),
                    msg(Role::Assistant, "Hi! How can I help?"),
                    msg(Role::User, "Tell me a joke."),
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
        (
            "parallel_tool_calls",
            Request {
                system: Some("You are a coding agent.".into()),
                messages: vec![
                    msg(Role::User, "Show me main.rs and the src dir."),
                    calls(
                        "Reading both.",
                        &[
                            ("call_1", "read_file", json!({"path": "src/main.rs"})),
                            ("call_2", "list_dir", Value::Null),
                        ],
                    ),
                    result("call_1", "read_file", "fn main() {}", false),
                    result("call_2", "list_dir", "main.rs\nlib.rs", false),
                    msg(Role::Assistant, "main.rs has an empty main."),
                ],
                tools: tools(),
                notes: Vec::new(),
            },
        ),
        (
            "failed_tool_result",
            Request {
                system: None,
                messages: vec![
                    msg(Role::User, "Read /etc/shadow"),
                    calls("", &[("call_9", "read_file", json!("/etc/shadow"))]),
                    result("call_9", "read_file", "permission denied", true),
                    msg(Role::Assistant, "I cannot read that file."),
                ],
                tools: tools(),
                notes: Vec::new(),
            },
        ),
        (
            "starts_with_summary",
            Request {
                system: Some("You are a coding agent.".into()),
                messages: vec![
                    summary("[Context Summary - Turns 1-4]\nGoal: fix the build."),
                    msg(Role::User, "Continue with the fix."),
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
        (
            "consecutive_assistant",
            Request {
                system: None,
                messages: vec![
                    msg(Role::User, "Go on."),
                    summary("[Context Summary - Turns 1-2]\nDecided: use sqlite."),
                    msg(Role::Assistant, "Next I will write the schema.  "),
                    calls("", &[("call_3", "read_file", json!({"path": "schema.sql"}))]),
                    result("call_3", "read_file", "", false),
                    msg(Role::Assistant, "The schema file is empty.\n"),
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
        (
            "developer_mid_thread",
            Request {
                system: Some("Base system prompt.".into()),
                messages: vec![
                    msg(Role::Developer, "Answer in French."),
                    msg(Role::User, "Hello"),
                    msg(Role::Assistant, "Bonjour !"),
                    msg(Role::Developer, "From now on answer in German."),
                    msg(Role::System, "Budget warning: 80% used."),
                    msg(Role::User, "How are you?"),
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
        (
            "multipart_image",
            Request {
                system: None,
                messages: vec![
                    RenderedMessage {
                        content: Content::Parts(vec![
                            ContentPart::Text {
                                text: "What is in these images?".into(),
                            },
                            ContentPart::Image {
                                url: "https://example.com/cat.png".into(),
                            },
                            ContentPart::Image {
                                url: "data:image/png;base64,iVBORw0KGgo=".into(),
                            },
                        ]),
                        ..msg(Role::User, "")
                    },
                    RenderedMessage {
                        content: Content::Parts(vec![
                            ContentPart::Text {
                                text: "A cat, and this one:".into(),
                            },
                            ContentPart::Image {
                                url: "https://example.com/echo.png".into(),
                            },
                        ]),
                        ..msg(Role::Assistant, "")
                    },
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
        (
            "rehydrated",
            Request {
                system: Some("You are a coding agent.".into()),
                messages: vec![
                    summary("[Externalized Content - artifact:a1b2]\nSummary: build log.\nTo retrieve full content, call: read_artifact(\"a1b2\")"),
                    msg(Role::User, "Why did the build fail?"),
                    RenderedMessage {
                        origin: Origin::Rehydrated,
                        source_id: "a1b2".into(),
                        ..msg(
                            Role::User,
                            "[Rehydrated artifact:a1b2]\nerror[E0308]: mismatched types",
                        )
                    },
                ],
                tools: Vec::new(),
                notes: Vec::new(),
            },
        ),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-zA-Z0-9 .,]{1,16}",
        1 => Just(String::new()),
        1 => "[ \n\t]{1,3}",
        1 => "[a-z]{1,8}[ \n]{1,2}",
        1 => "[\"\\\\{}<>é✓]{1,6}",
    ]
}

/// A provider part: text with metadata (which every format sends as its
/// text) or an item only its own format has.
fn carried(k: usize, t: &str) -> ContentPart {
    use crate::model::{Dialect, ProviderPart};
    use serde_json::json;
    let (dialect, kind, v) = match k {
        0 => (
            Dialect::AnthropicMessages,
            "text",
            json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}),
        ),
        1 => (
            Dialect::OpenAiChat,
            "refusal",
            json!({"type": "refusal", "refusal": t}),
        ),
        _ => (
            Dialect::OpenAiResponses,
            "web_search_call",
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                   "action": {"type": "search", "query": t}}),
        ),
    };
    ContentPart::Provider(ProviderPart::new(dialect, kind, &v))
}

fn content() -> impl Strategy<Value = Content> {
    let part = prop_oneof![
        3 => text().prop_map(|text| ContentPart::Text { text }),
        1 => "[a-z]{1,8}".prop_map(|s| ContentPart::Image { url: format!("https://img.test/{s}.png") }),
        1 => "[A-Za-z0-9+/]{4,12}".prop_map(|s| ContentPart::Image { url: format!("data:image/jpeg;base64,{s}") }),
        1 => (0..3usize, text()).prop_map(|(k, t)| carried(k, &t)),
    ];
    prop_oneof![
        4 => text().prop_map(Content::Text),
        1 => prop::collection::vec(part, 0..4).prop_map(Content::Parts),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => "[a-z]{0,8}".prop_map(|s| json!({"q": s})),
        1 => Just(Value::Null),
        1 => "[a-z]{0,8}".prop_map(Value::String),
        1 => any::<i32>().prop_map(|n| json!([n])),
    ]
}

/// One unit of a well-formed thread.
#[derive(Debug, Clone)]
enum Seg {
    Plain(Role, Content, Origin),
    /// Assistant text, then (name, args, result text, is_error) per call.
    Group(Content, Vec<(Value, String, bool)>),
}

fn seg() -> impl Strategy<Value = Seg> {
    prop_oneof![
        4 => content().prop_map(|c| Seg::Plain(Role::User, c, Origin::Verbatim)),
        3 => content().prop_map(|c| Seg::Plain(Role::Assistant, c, Origin::Verbatim)),
        1 => text().prop_map(|t| Seg::Plain(Role::Assistant, Content::Text(t), Origin::Summary)),
        1 => text().prop_map(|t| Seg::Plain(Role::User, Content::Text(t), Origin::Rehydrated)),
        1 => content().prop_map(|c| Seg::Plain(Role::System, c, Origin::Verbatim)),
        1 => content().prop_map(|c| Seg::Plain(Role::Developer, c, Origin::Verbatim)),
        3 => (content(), prop::collection::vec((arguments(), text(), any::<bool>()), 1..4))
            .prop_map(|(c, calls)| Seg::Group(c, calls)),
    ]
}

/// Random well-formed requests: every tool call is answered right after
/// its assistant message (results in a shuffled order).
pub(crate) fn request() -> impl Strategy<Value = Request> {
    (
        prop::option::of(text()),
        prop::collection::vec((seg(), any::<u64>()), 0..12),
        any::<bool>(),
    )
        .prop_map(|(system, segs, with_tools)| {
            let mut messages = Vec::new();
            let mut n = 0usize;
            for (seg, salt) in segs {
                match seg {
                    Seg::Plain(role, content, origin) => messages.push(RenderedMessage {
                        content,
                        origin,
                        ..msg(role, "")
                    }),
                    Seg::Group(content, group) => {
                        let mut results = Vec::new();
                        let mut tool_calls = Vec::new();
                        for (args, out, is_error) in group {
                            n += 1;
                            let id = format!("call_{n}");
                            let name = format!("tool_{}", n % 3);
                            tool_calls.push(ToolCall {
                                wire: None,
                                id: id.clone(),
                                name: name.clone(),
                                arguments: args,
                            });
                            results.push(result(&id, &name, &out, is_error));
                        }
                        // Deterministic shuffle driven by the generated salt.
                        let len = results.len();
                        results.rotate_left((salt as usize) % len);
                        messages.push(RenderedMessage {
                            content,
                            tool_calls,
                            ..msg(Role::Assistant, "")
                        });
                        messages.extend(results);
                    }
                }
            }
            Request {
                system,
                messages,
                tools: if with_tools { tools() } else { Vec::new() },
                notes: Vec::new(),
            }
        })
}

/// Every string anywhere in a JSON value, with JSON-string tool arguments
/// parsed so their contents count too.
pub(crate) fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            if let Ok(inner @ (Value::Object(_) | Value::Array(_))) =
                serde_json::from_str::<Value>(s)
            {
                strings(&inner, out);
            }
            out.push(s.clone());
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The pieces of input text a body must contain somewhere. Whitespace at
/// the ends is not content (Anthropic rejects blank text and trailing
/// whitespace in a final assistant turn), so pieces are trimmed.
pub(crate) fn pieces(req: &Request) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |s: &str| {
        let t = s.trim();
        if !t.is_empty() {
            out.push(t.to_string());
        }
    };
    if let Some(s) = &req.system {
        push(s);
    }
    for m in &req.messages {
        match &m.content {
            Content::Text(s) => push(s),
            Content::Parts(parts) => {
                for p in parts {
                    match p {
                        ContentPart::Text { text } => push(text),
                        // Inline data is sent as an image or, where it
                        // cannot be, referenced by its type (never inlined
                        // as text); either way the type is in the body.
                        ContentPart::Image { url } => match crate::render::images::data_url(url) {
                            Some((media_type, _)) => push(media_type),
                            None => push(url),
                        },
                        // Text with metadata is sent in every format; an
                        // item only its own format has is not, elsewhere.
                        ContentPart::Provider(p) => {
                            if let Some(t) = p.text_equivalent() {
                                push(&t)
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        for c in &m.tool_calls {
            push(&c.id);
            push(&c.name);
            if let Value::Object(o) = &c.arguments {
                for v in o.values() {
                    if let Value::String(s) = v {
                        push(s);
                    }
                }
            } else if let Value::String(s) = &c.arguments {
                push(s);
            }
        }
    }
    out
}

/// Fails with the first input piece that appears in no output string.
pub(crate) fn assert_no_loss(req: &Request, body: &Value) -> Result<(), String> {
    let mut all = Vec::new();
    strings(body, &mut all);
    for p in pieces(req) {
        if !all.iter().any(|s| s.contains(&p)) {
            return Err(format!("input text {p:?} is missing from the body"));
        }
    }
    Ok(())
}
