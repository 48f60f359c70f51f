//! OpenAI Chat Completions request body.
//!
//! The neutral [`Request`] maps almost one to one onto Chat Completions; the
//! only adaptations are the ones the API would otherwise reject:
//! - the system prompt becomes the first message (role `system`); an empty
//!   system prompt is not sent;
//! - image parts are only accepted in user messages, so an image in any other
//!   role, and an inline image of a type the API does not take, is sent as
//!   a short text reference ([`super::images::reference`]);
//! - an empty `Content::Parts` is sent as `""` (an empty content array is
//!   rejected);
//! - an assistant message with tool calls and no text gets `content: null`;
//! - tool-call arguments are sent as the JSON string of the arguments value
//!   (`{}` when the value is null, which is what the API sends for "no
//!   arguments").
//!
//! Output is a `serde_json::Value` whose maps are BTreeMaps, so the serialized
//! body is byte-identical for identical input.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::{ProviderOptions, RenderedMessage, Request};
use crate::model::{Content, ContentPart, Role, ToolCall, ToolSchema};

/// OpenAI Chat Completions request body: {"model", "messages": [...], "tools": [{"type":"function","function":{name,description,parameters}}], "max_completion_tokens"?}.
///
/// `tools` is omitted when there are none (the API rejects an empty array);
/// a tool's `description` is omitted when empty and `parameters` when null.
pub fn to_openai(req: &Request, opts: &ProviderOptions) -> Value {
    into_openai(req.clone(), opts)
}

/// [`to_openai`] taking the request by value: message text moves into the
/// body instead of being copied (the service's per-turn Render path).
pub fn into_openai(req: Request, opts: &ProviderOptions) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(req.messages.into_iter().filter_map(message));

    let mut body = Map::new();
    body.insert("model".into(), Value::String(opts.model.clone()));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool).collect()),
        );
    }
    if let Some(max) = opts.max_output_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    Value::Object(body)
}

fn message(mut m: RenderedMessage) -> Option<Value> {
    // Thinking and reasoning items belong to the provider that produced them.
    let had_reasoning = m.content.reasoning().next().is_some();
    m.content = m.content.without_reasoning();
    if had_reasoning && m.tool_calls.is_empty() && m.content.is_empty() {
        // Nothing left to send: the message only held another provider's reasoning.
        return None;
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::String(m.role.as_str().into()));
    match m.role {
        Role::Tool => {
            // A missing id is kept visible (empty string) so `check_pairing`
            // reports it instead of the provider.
            let id = m.tool_call_id.unwrap_or_default();
            out.insert("tool_call_id".into(), Value::String(id));
            out.insert("content".into(), content(m.content, false));
        }
        Role::Assistant if !m.tool_calls.is_empty() => {
            // The API wants null, not "", next to tool calls.
            let c = if m.content.is_empty() {
                Value::Null
            } else {
                content(m.content, false)
            };
            out.insert("content".into(), c);
            out.insert(
                "tool_calls".into(),
                Value::Array(m.tool_calls.iter().map(tool_call).collect()),
            );
        }
        role => {
            out.insert("content".into(), content(m.content, role == Role::User));
        }
    }
    Some(Value::Object(out))
}

/// Plain text stays a string; parts become a content array. Only user
/// messages may carry `image_url` parts.
fn content(c: Content, images_allowed: bool) -> Value {
    match c {
        Content::Text(s) => Value::String(s),
        Content::Parts(parts) if parts.is_empty() => Value::String(String::new()),
        Content::Parts(parts) => Value::Array(
            parts
                .into_iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(json!({"type": "text", "text": text})),
                    ContentPart::Image { url }
                        if images_allowed && super::images::sendable(&url) =>
                    {
                        Some(json!({"type": "image_url", "image_url": {"url": url}}))
                    }
                    ContentPart::Image { url } => {
                        Some(json!({"type": "text", "text": super::images::reference(&url)}))
                    }
                    // Removed by `without_reasoning` before this is called.
                    ContentPart::Thinking { .. }
                    | ContentPart::RedactedThinking { .. }
                    | ContentPart::Reasoning { .. } => None,
                })
                .collect(),
        ),
    }
}

fn tool_call(c: &ToolCall) -> Value {
    let arguments = c.arguments_json();
    json!({
        "id": c.id,
        "type": "function",
        "function": {"name": c.name, "arguments": arguments},
    })
}

fn tool(t: &ToolSchema) -> Value {
    let mut function = Map::new();
    function.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        function.insert("description".into(), Value::String(t.description.clone()));
    }
    if !t.parameters.is_null() {
        function.insert("parameters".into(), t.parameters.clone());
    }
    json!({"type": "function", "function": function})
}

/// Checks a Chat Completions body for provider-rejecting structure: every assistant tool_call id answered by exactly one following "tool" message before the next non-tool message; no tool message without a preceding matching call; no id twice in one message (an id may recur in a later turn). Err names the problem.
///
/// This is the rule the API enforces (a 400 names the first unanswered
/// `tool_call_id`); checking it here lets the renderer fail with a clear
/// error before a paid call.
pub fn check_pairing(body: &Value) -> Result<(), String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("body has no \"messages\" array")?;
    // Calls of the latest assistant message still waiting for their result.
    let mut pending: Vec<String> = Vec::new();
    // Every call id seen so far, to tell "answered twice" from "never called".
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut pending_from = 0usize;
    for (i, m) in messages.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{i}] has no role"))?;
        if role == "tool" {
            let id = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .ok_or_else(|| format!("messages[{i}] is a tool message without tool_call_id"))?;
            if let Some(pos) = pending.iter().position(|p| p == id) {
                pending.remove(pos);
            } else if seen.contains(id) {
                return Err(format!(
                    "messages[{i}] answers tool call {id:?}, which was already answered or is not in the immediately preceding assistant message"
                ));
            } else {
                return Err(format!(
                    "messages[{i}] is a tool result for {id:?} with no preceding tool call"
                ));
            }
            continue;
        }
        if let Some(id) = pending.first() {
            return Err(format!(
                "tool call {id:?} of messages[{pending_from}] is unanswered before messages[{i}] (role {role})"
            ));
        }
        if role == "assistant" {
            if let Some(calls) = m.get("tool_calls") {
                let calls = calls
                    .as_array()
                    .ok_or_else(|| format!("messages[{i}].tool_calls is not an array"))?;
                for (j, c) in calls.iter().enumerate() {
                    let id = c
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .ok_or_else(|| format!("messages[{i}].tool_calls[{j}] has no id"))?;
                    // An id may come back in a later turn once answered;
                    // twice in one message, a result could not tell which.
                    if pending.iter().any(|p| p == id) {
                        return Err(format!(
                            "messages[{i}].tool_calls[{j}].id {id:?} repeats an id of the same message"
                        ));
                    }
                    seen.insert(id.to_string());
                    pending.push(id.to_string());
                }
                pending_from = i;
            }
        }
    }
    match pending.first() {
        Some(id) => Err(format!(
            "tool call {id:?} of messages[{pending_from}] is never answered"
        )),
        None => Ok(()),
    }
}

/// Hand-built requests and a proptest generator shared by the OpenAI and
/// Anthropic tests, so both formats are checked against the same inputs.
#[cfg(test)]
pub(crate) mod testgen {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use crate::model::{Content, ContentPart, Role, ToolCall, ToolSchema};
    use crate::render::{Origin, ProviderOptions, RenderedMessage, Request};

    pub(crate) fn opts() -> ProviderOptions {
        ProviderOptions {
            model: "test-model".into(),
            max_output_tokens: None,
        }
    }

    pub(crate) fn msg(role: Role, text: &str) -> RenderedMessage {
        RenderedMessage {
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

    fn content() -> impl Strategy<Value = Content> {
        let part = prop_oneof![
            3 => text().prop_map(|text| ContentPart::Text { text }),
            1 => "[a-z]{1,8}".prop_map(|s| ContentPart::Image { url: format!("https://img.test/{s}.png") }),
            1 => "[A-Za-z0-9+/]{4,12}".prop_map(|s| ContentPart::Image { url: format!("data:image/jpeg;base64,{s}") }),
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
                            ContentPart::Image { url } => {
                                match crate::render::images::data_url(url) {
                                    Some((media_type, _)) => push(media_type),
                                    None => push(url),
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
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::testgen::{self, calls, msg, opts, result};
    use super::*;

    #[test]
    fn snapshots() {
        for (name, req) in testgen::fixtures() {
            let body = to_openai(&req, &opts());
            check_pairing(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_json_snapshot!(name, body);
        }
    }

    #[test]
    fn max_completion_tokens_only_when_set() {
        let req = Request {
            system: None,
            messages: vec![msg(Role::User, "hi")],
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_openai(&req, &opts());
        assert!(body.get("max_completion_tokens").is_none());
        assert!(body.get("tools").is_none());
        let body = to_openai(
            &req,
            &ProviderOptions {
                max_output_tokens: Some(512),
                ..opts()
            },
        );
        assert_eq!(body["max_completion_tokens"], json!(512));
    }

    #[test]
    fn arguments_are_a_json_string() {
        let req = Request {
            system: None,
            messages: vec![
                calls("", &[("c1", "f", json!({"b": 1, "a": [true]}))]),
                result("c1", "f", "ok", false),
            ],
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_openai(&req, &opts());
        let m = &body["messages"][0];
        assert_eq!(m["content"], Value::Null);
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            json!(r#"{"a":[true],"b":1}"#)
        );
    }

    #[test]
    fn deterministic_bytes() {
        for (_, req) in testgen::fixtures() {
            let a = serde_json::to_string(&to_openai(&req, &opts())).unwrap();
            let b = serde_json::to_string(&to_openai(&req.clone(), &opts())).unwrap();
            assert_eq!(a, b);
        }
    }

    fn body(messages: Value) -> Value {
        json!({"model": "m", "messages": messages})
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    #[test]
    fn rejects_orphan_tool_result() {
        let err = check_pairing(&body(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "x", "content": "out"},
        ])))
        .unwrap_err();
        assert!(err.contains("no preceding tool call"), "{err}");
    }

    #[test]
    fn rejects_unanswered_call() {
        let err = check_pairing(&body(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "out"},
            {"role": "user", "content": "next"},
        ])))
        .unwrap_err();
        assert!(err.contains("\"b\"") && err.contains("unanswered"), "{err}");
        let err = check_pairing(&body(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
        ])))
        .unwrap_err();
        assert!(err.contains("never answered"), "{err}");
    }

    #[test]
    fn rejects_double_answer_and_late_answer() {
        let err = check_pairing(&body(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
        ])))
        .unwrap_err();
        assert!(err.contains("already answered"), "{err}");
        // An id may come back in a later turn (local servers name every
        // call `call_0`), but not twice in one message.
        check_pairing(&body(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
        ])))
        .unwrap();
        let err = check_pairing(&body(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ])))
        .unwrap_err();
        assert!(err.contains("same message"), "{err}");
    }

    #[test]
    fn accepts_well_formed() {
        check_pairing(&body(json!([
            {"role": "system", "content": "s"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
            {"role": "assistant", "content": "done"},
        ])))
        .unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]
        #[test]
        fn well_formed_requests_pair_and_keep_all_text(req in testgen::request()) {
            let body = to_openai(&req, &opts());
            prop_assert_eq!(check_pairing(&body), Ok(()));
            prop_assert_eq!(testgen::assert_no_loss(&req, &body), Ok(()));
            let expected = req.messages.len()
                + usize::from(req.system.as_deref().is_some_and(|s| !s.is_empty()));
            prop_assert_eq!(body["messages"].as_array().unwrap().len(), expected);
        }
    }
}
