//! Reading threads from JSON: the canonical thread format, or what agents
//! already log, so users can pipe their own logs in:
//! - an OpenAI Chat Completions `messages` array or request body;
//! - an Anthropic Messages request body (or its `messages` array): `tool_use`
//!   blocks become tool calls, each `tool_result` block a tool message
//!   (`is_error` a failure), thinking blocks stay with their turn;
//! - OpenAI Responses `input` items or a request body: `function_call` and
//!   `function_call_output` items become calls and results, `reasoning`
//!   items stay with the calls they preceded, `instructions` is the system
//!   prompt.
//!
//! Imported messages get deterministic ids (`m0`, `m1`, …) and turns (a user
//! message opens a new turn).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use thiserror::Error;

use super::message::{
    Content, ContentPart, Message, MessageMetadata, Outcome, Role, ToolCall, ToolContent,
    ToolResultEnvelope, ToolSchema,
};
use super::outcome::infer_outcome;
use super::thread::Thread;

/// A thread file: the thread plus what the request around it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadInput {
    /// The thread.
    pub thread: Thread,
    /// System prompt sent separately from the messages, if any.
    pub system: Option<String>,
    /// Tool schemas.
    pub tools: Vec<ToolSchema>,
    /// Which format was recognized.
    pub format: InputFormat,
}

/// The recognized input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// `{"id", "messages": [canonical messages], "system"?, "tools"?}`.
    Canonical,
    /// An OpenAI `messages` array or Chat Completions request body.
    OpenAi,
    /// An Anthropic Messages request body or `messages` array.
    Anthropic,
    /// OpenAI Responses `input` items or a Responses request body.
    OpenAiResponses,
}

/// Why input could not be read; `path` names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{path}: {reason}")]
pub struct ImportError {
    /// JSON path of the offending field.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

fn err(path: impl Into<String>, reason: impl Into<String>) -> ImportError {
    ImportError {
        path: path.into(),
        reason: reason.into(),
    }
}

/// Reads a thread from parsed JSON. `default_id` names OpenAI-format threads.
pub fn thread_from_json(v: &Value, default_id: &str) -> Result<ThreadInput, ImportError> {
    if let Some(input) = responses_input(v) {
        return responses::thread(v, input, default_id);
    }
    let (messages, obj) = match v {
        Value::Array(a) => (a, None),
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => (a, Some(o)),
            Some(_) => return Err(err("messages", "must be an array")),
            None => return Err(err("messages", "is required")),
        },
        _ => return Err(err("$", "expected a thread object or a messages array")),
    };
    let canonical = !messages.is_empty()
        && messages
            .iter()
            .all(|m| m.get("id").is_some() && m.get("tool_call_id").is_none());
    let tools = match obj.and_then(|o| o.get("tools")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| tool_schema(t).map_err(|r| err(format!("tools[{i}]"), r)))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(err("tools", "must be an array")),
    };
    let system = match obj.and_then(|o| o.get("system")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        // Anthropic's block form; read with the Anthropic body below.
        Some(Value::Array(_)) => None,
        Some(_) => return Err(err("system", "must be a string or an array of text blocks")),
    };
    if canonical {
        let o =
            obj.ok_or_else(|| err("$", "a canonical thread is an object with id and messages"))?;
        if o.get("system").is_some_and(Value::is_array) {
            return Err(err("system", "must be a string in a canonical thread"));
        }
        let id = match o.get("id") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(err("id", "must be a string")),
        };
        let mut parsed = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            if let Some(r) = m.get("role").and_then(Value::as_str) {
                if Role::parse(r).is_none() {
                    return Err(err(
                        format!("messages[{i}].role"),
                        format!("{r:?} is not one of system, developer, user, assistant, tool"),
                    ));
                }
            }
            let mut msg: Message = serde_json::from_value(m.clone())
                .map_err(|e| err(format!("messages[{i}]"), e.to_string()))?;
            // An envelope that does not state its outcome gets the one its
            // output reports, as for provider logs.
            if m.pointer("/tool_result/outcome").is_none() {
                if let Some(env) = &mut msg.tool_result {
                    env.outcome = infer_outcome(&env.content);
                }
            }
            parsed.push(msg);
        }
        let mut thread = Thread {
            id,
            messages: parsed,
        };
        assign_turns_if_absent(&mut thread);
        return Ok(ThreadInput {
            thread,
            system,
            tools,
            format: InputFormat::Canonical,
        });
    }
    let id = obj
        .and_then(|o| o.get("id"))
        .and_then(Value::as_str)
        .unwrap_or(default_id)
        .to_string();
    if is_anthropic(messages, obj) {
        let system = match obj.and_then(|o| o.get("system")) {
            Some(Value::Array(blocks)) => Some(anthropic::system_text(blocks)?),
            _ => system,
        };
        return Ok(ThreadInput {
            thread: anthropic::thread(messages, id)?,
            system,
            tools,
            format: InputFormat::Anthropic,
        });
    }
    let thread = openai_messages(messages, id)?;
    Ok(ThreadInput {
        thread,
        system,
        tools,
        format: InputFormat::OpenAi,
    })
}

/// Anthropic blocks that Chat Completions never has; a text-only Anthropic
/// conversation reads the same either way.
fn is_anthropic(messages: &[Value], obj: Option<&serde_json::Map<String, Value>>) -> bool {
    const ONLY_ANTHROPIC: &[&str] = &["tool_use", "tool_result", "thinking", "redacted_thinking"];
    obj.and_then(|o| o.get("system"))
        .is_some_and(Value::is_array)
        || messages.iter().any(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|blocks| {
                    blocks.iter().any(|b| {
                        let t = b.get("type").and_then(Value::as_str).unwrap_or_default();
                        ONLY_ANTHROPIC.contains(&t) || (t == "image" && b.get("source").is_some())
                    })
                })
        })
}

/// The Responses `input` items of `v`, when it is a Responses body (an
/// object with `input` and no `messages`) or an array of Responses items.
fn responses_input(v: &Value) -> Option<&Value> {
    const ONLY_RESPONSES: &[&str] = &[
        "function_call",
        "function_call_output",
        "reasoning",
        "input_text",
        "output_text",
        "input_image",
    ];
    match v {
        Value::Object(o) if o.get("messages").is_none() => o.get("input"),
        Value::Array(items) => items
            .iter()
            .any(|i| {
                let t = i.get("type").and_then(Value::as_str).unwrap_or_default();
                ONLY_RESPONSES.contains(&t)
                    || i.get("content")
                        .and_then(Value::as_array)
                        .is_some_and(|parts| {
                            parts.iter().any(|p| {
                                ONLY_RESPONSES.contains(
                                    &p.get("type").and_then(Value::as_str).unwrap_or_default(),
                                )
                            })
                        })
            })
            .then_some(v),
        _ => None,
    }
}

/// Builds imported messages with deterministic ids and pairs results with
/// the calls they answer (by position, as validation does).
#[derive(Default)]
struct Builder {
    messages: Vec<Message>,
    /// Open calls by id: (message index, call index).
    open: HashMap<String, (usize, usize)>,
}

impl Builder {
    fn push(&mut self, role: Role, content: Content) -> &mut Message {
        let id = format!("m{}", self.messages.len());
        self.messages.push(Message {
            id,
            role,
            content,
            tool_calls: Vec::new(),
            tool_result: None,
            turn: 0,
            metadata: MessageMetadata::default(),
        });
        let last = self.messages.len() - 1;
        &mut self.messages[last]
    }

    fn call(&mut self, msg: usize, call: ToolCall) {
        let j = self.messages[msg].tool_calls.len();
        self.open.insert(call.id.clone(), (msg, j));
        self.messages[msg].tool_calls.push(call);
    }

    /// A tool message answering `call_id`; `path` names the field on error.
    fn result(
        &mut self,
        call_id: &str,
        content: ToolContent,
        failed: bool,
        path: &str,
    ) -> Result<(), ImportError> {
        let (m, j) = self.open.remove(call_id).ok_or_else(|| {
            err(
                path,
                format!("{call_id:?} answers no earlier call that is still open"),
            )
        })?;
        let tool_name = self.messages[m].tool_calls[j].name.clone();
        let msg = self.push(Role::Tool, Content::default());
        msg.tool_result = Some(imported_result(tool_name, call_id, content, failed));
        Ok(())
    }

    fn thread(self, id: String) -> Thread {
        let mut thread = Thread {
            id,
            messages: self.messages,
        };
        assign_turns_if_absent(&mut thread);
        thread
    }
}

/// Parts as content: one text part is plain text.
fn content_of(parts: Vec<ContentPart>) -> Content {
    match parts.as_slice() {
        [] => Content::default(),
        [ContentPart::Text { text }] => Content::Text(text.clone()),
        _ => Content::Parts(parts),
    }
}

fn str_field<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, ImportError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| err(format!("{path}.{key}"), "is required"))
}

/// Reading Anthropic Messages bodies.
mod anthropic {
    use super::*;

    /// A block-array system prompt as one string.
    pub(super) fn system_text(blocks: &[Value]) -> Result<String, ImportError> {
        let mut texts = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            texts.push(str_field(b, "text", &format!("system[{i}]"))?.to_string());
        }
        Ok(texts.join("\n\n"))
    }

    pub(super) fn thread(messages: &[Value], id: String) -> Result<Thread, ImportError> {
        let mut b = Builder::default();
        for (i, m) in messages.iter().enumerate() {
            let path = format!("messages[{i}]");
            let role = str_field(m, "role", &path)?;
            let blocks: Vec<Value> = match m.get("content") {
                Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
                Some(Value::Array(a)) => a.clone(),
                _ => {
                    return Err(err(
                        format!("{path}.content"),
                        "must be a string or an array",
                    ))
                }
            };
            match role {
                "user" => user(&mut b, &blocks, &path)?,
                "assistant" => assistant(&mut b, &blocks, &path)?,
                other => {
                    return Err(err(
                        format!("{path}.role"),
                        format!("{other:?} is not user or assistant"),
                    ))
                }
            }
        }
        Ok(b.thread(id))
    }

    /// Tool results first (one tool message each), then the user's own
    /// blocks as one user message.
    fn user(b: &mut Builder, blocks: &[Value], path: &str) -> Result<(), ImportError> {
        let mut own = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let bpath = format!("{path}.content[{j}]");
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    let call_id = str_field(block, "tool_use_id", &bpath)?;
                    let text = match block.get("content") {
                        None | Some(Value::Null) => String::new(),
                        Some(Value::String(s)) => s.clone(),
                        // Tool output is text here: images (screenshots)
                        // become short references, never inline data.
                        Some(Value::Array(parts)) => Content::Parts(
                            parts
                                .iter()
                                .enumerate()
                                .map(|(k, p)| part(p, &format!("{bpath}.content[{k}]")))
                                .collect::<Result<Vec<_>, _>>()?,
                        )
                        .flat_text(),
                        Some(_) => {
                            return Err(err(
                                format!("{bpath}.content"),
                                "must be a string or an array",
                            ))
                        }
                    };
                    let failed = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    b.result(
                        call_id,
                        ToolContent::Text(text),
                        failed,
                        &format!("{bpath}.tool_use_id"),
                    )?;
                }
                _ => own.push(part(block, &bpath)?),
            }
        }
        if !own.is_empty() {
            b.push(Role::User, content_of(own));
        }
        Ok(())
    }

    fn assistant(b: &mut Builder, blocks: &[Value], path: &str) -> Result<(), ImportError> {
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let bpath = format!("{path}.content[{j}]");
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => calls.push(ToolCall {
                    id: str_field(block, "id", &bpath)?.to_string(),
                    name: str_field(block, "name", &bpath)?.to_string(),
                    arguments: block.get("input").cloned().unwrap_or(Value::Null),
                }),
                _ => parts.push(part(block, &bpath)?),
            }
        }
        b.push(Role::Assistant, content_of(parts));
        let at = b.messages.len() - 1;
        for c in calls {
            b.call(at, c);
        }
        Ok(())
    }

    fn part(block: &Value, path: &str) -> Result<ContentPart, ImportError> {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => Ok(ContentPart::Text {
                text: str_field(block, "text", path)?.to_string(),
            }),
            Some("image") => {
                let source = block
                    .get("source")
                    .ok_or_else(|| err(format!("{path}.source"), "is required"))?;
                let url = match source.get("type").and_then(Value::as_str) {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        str_field(source, "media_type", &format!("{path}.source"))?,
                        str_field(source, "data", &format!("{path}.source"))?
                    ),
                    Some("url") => str_field(source, "url", &format!("{path}.source"))?.to_string(),
                    other => {
                        return Err(err(
                            format!("{path}.source.type"),
                            format!("{other:?} is not base64 or url"),
                        ))
                    }
                };
                Ok(ContentPart::Image { url })
            }
            Some("thinking") => Ok(ContentPart::Thinking {
                thinking: str_field(block, "thinking", path)?.to_string(),
                signature: str_field(block, "signature", path)?.to_string(),
            }),
            Some("redacted_thinking") => Ok(ContentPart::RedactedThinking {
                data: str_field(block, "data", path)?.to_string(),
            }),
            Some(other) => Err(err(
                format!("{path}.type"),
                format!("unsupported block type {other:?}"),
            )),
            None => Err(err(format!("{path}.type"), "is required")),
        }
    }
}

/// Reading OpenAI Responses input items.
mod responses {
    use super::*;

    pub(super) fn thread(
        v: &Value,
        input: &Value,
        default_id: &str,
    ) -> Result<ThreadInput, ImportError> {
        let obj = v.as_object();
        let id = obj
            .and_then(|o| o.get("id"))
            .and_then(Value::as_str)
            .unwrap_or(default_id)
            .to_string();
        let system = match obj.and_then(|o| o.get("instructions")) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(err("instructions", "must be a string")),
        };
        let tools = match obj.and_then(|o| o.get("tools")) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.get("type")
                        .and_then(Value::as_str)
                        .is_none_or(|t| t == "function")
                })
                .map(|(i, t)| tool_schema(t).map_err(|r| err(format!("tools[{i}]"), r)))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(err("tools", "must be an array")),
        };
        let mut b = Builder::default();
        match input {
            Value::String(s) => {
                b.push(Role::User, Content::Text(s.clone()));
            }
            Value::Array(items) => {
                // The assistant message that function calls and reasoning
                // join, until something else is said.
                let mut turn: Option<usize> = None;
                for (i, item) in items.iter().enumerate() {
                    item_into(&mut b, &mut turn, item, &format!("input[{i}]"))?;
                }
            }
            _ => return Err(err("input", "must be a string or an array")),
        }
        Ok(ThreadInput {
            thread: b.thread(id),
            system,
            tools,
            format: InputFormat::OpenAiResponses,
        })
    }

    fn assistant_turn(b: &mut Builder, turn: &mut Option<usize>) -> usize {
        match *turn {
            Some(i) => i,
            None => {
                b.push(Role::Assistant, Content::default());
                let i = b.messages.len() - 1;
                *turn = Some(i);
                i
            }
        }
    }

    fn add_part(m: &mut Message, p: ContentPart) {
        let mut parts = match std::mem::take(&mut m.content) {
            Content::Text(t) if t.is_empty() => Vec::new(),
            Content::Text(text) => vec![ContentPart::Text { text }],
            Content::Parts(parts) => parts,
        };
        parts.push(p);
        m.content = content_of(parts);
    }

    fn item_into(
        b: &mut Builder,
        turn: &mut Option<usize>,
        item: &Value,
        path: &str,
    ) -> Result<(), ImportError> {
        match item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message")
        {
            "message" => {
                let role_s = str_field(item, "role", path)?;
                let role = Role::parse(role_s)
                    .filter(|r| *r != Role::Tool)
                    .ok_or_else(|| {
                        err(
                            format!("{path}.role"),
                            format!("{role_s:?} is not one of system, developer, user, assistant"),
                        )
                    })?;
                let parts = match item.get("content") {
                    Some(Value::String(s)) => vec![ContentPart::Text { text: s.clone() }],
                    Some(Value::Array(a)) => a
                        .iter()
                        .enumerate()
                        .map(|(k, p)| part(p, &format!("{path}.content[{k}]")))
                        .collect::<Result<_, _>>()?,
                    _ => {
                        return Err(err(
                            format!("{path}.content"),
                            "must be a string or an array",
                        ))
                    }
                };
                if role == Role::Assistant {
                    let at = assistant_turn(b, turn);
                    for p in parts {
                        add_part(&mut b.messages[at], p);
                    }
                } else {
                    *turn = None;
                    b.push(role, content_of(parts));
                }
            }
            "reasoning" => {
                let summary = match item.get("summary") {
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(|s| s.get("text").and_then(Value::as_str).map(str::to_string))
                        .collect(),
                    _ => Vec::new(),
                };
                // Reasoning opens the assistant turn it belongs to.
                if turn.is_some_and(|t| !b.messages[t].tool_calls.is_empty()) {
                    *turn = None;
                }
                let at = assistant_turn(b, turn);
                add_part(
                    &mut b.messages[at],
                    ContentPart::Reasoning {
                        id: str_field(item, "id", path)?.to_string(),
                        summary,
                        encrypted_content: item
                            .get("encrypted_content")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    },
                );
            }
            "function_call" => {
                let arguments = parse_arguments(item.get("arguments"));
                let call = ToolCall {
                    id: str_field(item, "call_id", path)?.to_string(),
                    name: str_field(item, "name", path)?.to_string(),
                    arguments,
                };
                let at = assistant_turn(b, turn);
                b.call(at, call);
            }
            "function_call_output" => {
                *turn = None;
                let call_id = str_field(item, "call_id", path)?;
                let text = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => responses_output_text(parts),
                    _ => return Err(err(format!("{path}.output"), "is required")),
                };
                b.result(
                    call_id,
                    ToolContent::Text(text),
                    false,
                    &format!("{path}.call_id"),
                )?;
            }
            other => {
                return Err(err(
                    format!("{path}.type"),
                    format!("unsupported item type {other:?}"),
                ))
            }
        }
        Ok(())
    }

    fn part(p: &Value, path: &str) -> Result<ContentPart, ImportError> {
        match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => Ok(ContentPart::Text {
                text: str_field(p, "text", path)?.to_string(),
            }),
            Some("refusal") => Ok(ContentPart::Text {
                text: str_field(p, "refusal", path)?.to_string(),
            }),
            Some("input_image") => match p.get("image_url").and_then(Value::as_str) {
                Some(url) => Ok(ContentPart::Image {
                    url: url.to_string(),
                }),
                None => Ok(ContentPart::Text {
                    text: format!(
                        "[image: file {}]",
                        p.get("file_id")
                            .and_then(Value::as_str)
                            .unwrap_or("unknown")
                    ),
                }),
            },
            Some(other) => Err(err(
                format!("{path}.type"),
                format!("unsupported content type {other:?}"),
            )),
            None => Err(err(format!("{path}.type"), "is required")),
        }
    }
}

/// Threads without turn numbers get them from user messages, so the tail and
/// retention (both counted in turns) work on logs that never had turns.
fn assign_turns_if_absent(thread: &mut Thread) {
    if thread.messages.iter().all(|m| m.turn == 0) {
        let mut turn = 0;
        for m in &mut thread.messages {
            if m.role == Role::User {
                turn += 1;
            }
            m.turn = turn;
        }
    }
}

fn openai_messages(messages: &[Value], id: String) -> Result<Thread, ImportError> {
    let mut out = Vec::with_capacity(messages.len());
    let mut call_names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let path = |f: &str| format!("messages[{i}].{f}");
        let role_s = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| err(path("role"), "is required"))?;
        let role = Role::parse(role_s).ok_or_else(|| {
            err(
                path("role"),
                format!("{role_s:?} is not one of system, developer, user, assistant, tool"),
            )
        })?;
        let content = match m.get("content") {
            None | Some(Value::Null) => Content::default(),
            Some(Value::String(s)) => Content::Text(s.clone()),
            Some(Value::Array(parts)) => {
                let mut out = Vec::with_capacity(parts.len());
                for (j, p) in parts.iter().enumerate() {
                    out.push(
                        content_part(p)
                            .map_err(|r| err(format!("messages[{i}].content[{j}]"), r))?,
                    );
                }
                Content::Parts(out)
            }
            Some(_) => return Err(err(path("content"), "must be a string, an array or null")),
        };
        let mut tool_calls = Vec::new();
        if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
            let calls = calls
                .as_array()
                .ok_or_else(|| err(path("tool_calls"), "must be an array"))?;
            for (j, c) in calls.iter().enumerate() {
                let cpath = |f: &str| format!("messages[{i}].tool_calls[{j}].{f}");
                let cid = c
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err(cpath("id"), "is required"))?;
                let f = c
                    .get("function")
                    .ok_or_else(|| err(cpath("function"), "is required"))?;
                let name = f
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err(cpath("function.name"), "is required"))?;
                let arguments = parse_arguments(f.get("arguments"));
                call_names.insert(cid.to_string(), name.to_string());
                tool_calls.push(ToolCall {
                    id: cid.to_string(),
                    name: name.to_string(),
                    arguments,
                });
            }
        }
        let mut message = Message {
            id: format!("m{i}"),
            role,
            content,
            tool_calls,
            tool_result: None,
            turn: 0,
            metadata: MessageMetadata::default(),
        };
        if role == Role::Tool {
            let call_id = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| err(path("tool_call_id"), "is required for role tool"))?;
            let tool_name = call_names.get(call_id).cloned().ok_or_else(|| {
                err(
                    path("tool_call_id"),
                    format!("{call_id:?} has no earlier tool call"),
                )
            })?;
            let text = std::mem::take(&mut message.content).flat_text();
            // Chat Completions tool messages carry no outcome; some logs add
            // `is_error`.
            let failed = m.get("is_error").and_then(Value::as_bool) == Some(true);
            message.tool_result = Some(imported_result(
                tool_name,
                call_id,
                ToolContent::Text(text),
                failed,
            ));
        }
        out.push(message);
    }
    let mut thread = Thread { id, messages: out };
    assign_turns_if_absent(&mut thread);
    Ok(thread)
}

/// OpenAI-style call arguments: JSON text parsed (kept as a string when it
/// is not JSON), any other value as it is, none as `{}`.
fn parse_arguments(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Object(Default::default()),
    }
}

/// An imported result's envelope. Logs carry no durability, timing or key
/// fields; a failure the log states wins, otherwise the output's shape says.
fn imported_result(
    tool_name: String,
    call_id: &str,
    content: ToolContent,
    failed: bool,
) -> ToolResultEnvelope {
    let outcome = if failed {
        Outcome::Failure
    } else {
        infer_outcome(&content)
    };
    ToolResultEnvelope {
        tool_name,
        tool_call_id: call_id.to_string(),
        outcome,
        content,
        key_fields: BTreeMap::new(),
        durability: None,
        determinism: None,
        started_at: None,
        completed_at: None,
    }
}

fn content_part(p: &Value) -> Result<ContentPart, String> {
    match p.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ContentPart::Text {
            text: p
                .get("text")
                .and_then(Value::as_str)
                .ok_or("text is required")?
                .to_string(),
        }),
        Some("image_url") => Ok(ContentPart::Image {
            url: p
                .pointer("/image_url/url")
                .and_then(Value::as_str)
                .ok_or("image_url.url is required")?
                .to_string(),
        }),
        Some(other) => Err(format!("unsupported part type {other:?}")),
        None => Err("type is required".into()),
    }
}

fn tool_schema(t: &Value) -> Result<ToolSchema, String> {
    // OpenAI wraps tools as {"type":"function","function":{...}}; accept both.
    let f = t.get("function").unwrap_or(t);
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or("name is required")?;
    Ok(ToolSchema {
        name: name.to_string(),
        description: f
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        parameters: f
            .get("parameters")
            .or_else(|| f.get("input_schema"))
            .cloned()
            .unwrap_or(Value::Null),
    })
}

/// A Responses `function_call_output` given as content parts, as text:
/// images and files become short references (never inline data), so
/// nothing the tool returned vanishes without a trace.
fn responses_output_text(parts: &[Value]) -> String {
    let field = |p: &Value, k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
    parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some("input_image") => Some(match field(p, "image_url") {
                Some(url) => crate::model::image::reference(&url),
                None => format!("[image: file {}]", field(p, "file_id").unwrap_or_default()),
            }),
            Some("input_file") => Some(format!(
                "[file: {}]",
                field(p, "filename")
                    .or_else(|| field(p, "file_url"))
                    .or_else(|| field(p, "file_id"))
                    .unwrap_or_default()
            )),
            _ => field(p, "text"),
        })
        .filter(|s| !s.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_array_gets_ids_turns_and_envelopes() {
        let v = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "12C"},
            {"role": "assistant", "content": "12C in Oslo"},
            {"role": "user", "content": "thanks"}
        ]);
        let t = thread_from_json(&v, "t").unwrap();
        assert_eq!(t.format, InputFormat::OpenAi);
        let ids: Vec<_> = t.thread.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m0", "m1", "m2", "m3", "m4", "m5"]);
        let turns: Vec<_> = t.thread.messages.iter().map(|m| m.turn).collect();
        assert_eq!(turns, [0, 1, 1, 1, 1, 2]);
        assert_eq!(
            t.thread.messages[2].tool_calls[0].arguments,
            json!({"city": "Oslo"})
        );
        let env = t.thread.messages[3].tool_result.as_ref().unwrap();
        assert_eq!(env.tool_name, "weather");
        t.thread.validate(&Default::default()).unwrap();
    }

    #[test]
    fn tool_results_that_report_an_error_import_as_failures() {
        let v = json!([
            {"role": "user", "content": "ship it"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "d1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}},
                {"id": "d2", "type": "function", "function": {"name": "deploy", "arguments": "{}"}},
                {"id": "d3", "type": "function", "function": {"name": "lint", "arguments": "{}"}},
                {"id": "d4", "type": "function", "function": {"name": "lint", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "d1",
             "content": "{\"status\":\"error\",\"error\":\"Deployment failed: quota exceeded for project p-77 (code Q9)\"}"},
            {"role": "tool", "tool_call_id": "d2", "content": "{\"status\":\"ok\",\"release\":\"r-12\"}"},
            {"role": "tool", "tool_call_id": "d3", "content": "Error: 3 files would be reformatted", "is_error": false},
            {"role": "tool", "tool_call_id": "d4", "content": "all clean", "is_error": true}
        ]);
        let t = thread_from_json(&v, "t").unwrap().thread;
        let outcomes: Vec<Outcome> = t.messages[2..]
            .iter()
            .map(|m| m.tool_result.as_ref().unwrap().outcome)
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Failure,
                Outcome::Success,
                Outcome::Failure,
                Outcome::Failure
            ]
        );

        // Canonical threads: a stated outcome wins, an unstated one is read.
        let v = json!({"id": "t", "messages": [
            {"id": "a", "role": "assistant", "tool_calls": [
                {"id": "c1", "name": "deploy", "arguments": {}},
                {"id": "c2", "name": "deploy", "arguments": {}}
            ]},
            {"id": "b", "role": "tool", "tool_result": {"tool_name": "deploy", "tool_call_id": "c1",
                "content": {"ok": false, "reason": "denied"}}},
            {"id": "c", "role": "tool", "tool_result": {"tool_name": "deploy", "tool_call_id": "c2",
                "outcome": "success", "content": {"ok": false}}}
        ]});
        let t = thread_from_json(&v, "x").unwrap().thread;
        assert_eq!(
            t.messages[1].tool_result.as_ref().unwrap().outcome,
            Outcome::Failure
        );
        assert_eq!(
            t.messages[2].tool_result.as_ref().unwrap().outcome,
            Outcome::Success
        );
    }

    #[test]
    fn anthropic_request_bodies_import_with_thinking_and_errors() {
        let v = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You run builds."}, {"type": "text", "text": "Be terse."}],
            "tools": [{"name": "build", "description": "Run a build", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Build it. Screenshot attached."},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Run the build tool.", "signature": "sig=="},
                    {"type": "tool_use", "id": "toolu_1", "name": "build", "input": {"target": "all"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "build", "input": {"target": "docs"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "docs ok"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "linker exited with code 1", "is_error": true},
                    {"type": "text", "text": "What broke?"}
                ]},
                {"role": "assistant", "content": "The linker failed."}
            ]
        });
        let t = thread_from_json(&v, "x").unwrap();
        assert_eq!(t.format, InputFormat::Anthropic);
        assert_eq!(t.system.as_deref(), Some("You run builds.\n\nBe terse."));
        assert_eq!(t.tools[0].parameters, json!({"type": "object"}));
        t.thread.validate(&Default::default()).unwrap();
        let roles: Vec<Role> = t.thread.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::User,
                Role::Assistant
            ]
        );
        let a = &t.thread.messages[1];
        assert!(
            matches!(&a.content, Content::Parts(p) if matches!(&p[0], ContentPart::Thinking { signature, .. } if signature == "sig=="))
        );
        assert_eq!(a.tool_calls.len(), 2);
        let r1 = t.thread.messages[3].tool_result.as_ref().unwrap();
        assert_eq!(
            (r1.tool_call_id.as_str(), r1.outcome),
            ("toolu_1", Outcome::Failure)
        );
        let r2 = t.thread.messages[2].tool_result.as_ref().unwrap();
        assert_eq!(
            (r2.tool_name.as_str(), r2.outcome),
            ("build", Outcome::Success)
        );
        assert!(matches!(&t.thread.messages[0].content,
            Content::Parts(p) if matches!(&p[1], ContentPart::Image { url } if url == "data:image/png;base64,iVBORw0KGgo=")));
        let turns: Vec<u32> = t.thread.messages.iter().map(|m| m.turn).collect();
        assert_eq!(turns, [1, 1, 1, 1, 2, 2]);

        let e = thread_from_json(&json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}
        ]}), "x").unwrap_err();
        assert_eq!(e.path, "messages[0].content[0].tool_use_id");
    }

    #[test]
    fn responses_items_import_with_reasoning_and_calls() {
        let v = json!({
            "model": "gpt-5",
            "instructions": "You answer billing questions.",
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}},
                      {"type": "web_search"}],
            "input": [
                {"role": "user", "content": "Why was I charged twice?"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Check invoices."}], "encrypted_content": "gAAA"},
                {"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": "{\"customer\":\"c-9\"}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "{\"error\":\"customer c-9 not found\"}"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "I could not find you.", "annotations": []}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Try c-19."},
                    {"type": "input_image", "image_url": "https://x.test/receipt.png", "detail": "auto"}]},
                {"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": "{\"customer\":\"c-19\"}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "2 charges"}
            ]
        });
        let t = thread_from_json(&v, "x").unwrap();
        assert_eq!(t.format, InputFormat::OpenAiResponses);
        assert_eq!(t.system.as_deref(), Some("You answer billing questions."));
        assert_eq!(t.tools.len(), 1, "built-in tools are not function schemas");
        t.thread.validate(&Default::default()).unwrap();
        let roles: Vec<Role> = t.thread.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant,
                Role::User,
                Role::Assistant,
                Role::Tool
            ]
        );
        let first_call = &t.thread.messages[1];
        assert!(
            matches!(&first_call.content, Content::Parts(p) if matches!(&p[0], ContentPart::Reasoning { id, encrypted_content: Some(e), .. } if id == "rs_1" && e == "gAAA"))
        );
        assert_eq!(
            first_call.tool_calls[0].arguments,
            json!({"customer": "c-9"})
        );
        assert_eq!(
            t.thread.messages[2].tool_result.as_ref().unwrap().outcome,
            Outcome::Failure
        );
        // The reused call id pairs with its own call.
        assert_eq!(t.thread.pairing().call_of(6), Some((5, 0)));
        // A bare array of items is recognised too.
        let items = v["input"].clone();
        assert_eq!(
            thread_from_json(&items, "x").unwrap().format,
            InputFormat::OpenAiResponses
        );
    }

    /// Images and files a tool returned (screenshots, fetched documents)
    /// stay visible as short references in every import format, and inline
    /// data never becomes text.
    #[test]
    fn images_in_tool_output_import_as_short_references() {
        let screenshot = "A".repeat(400_000);
        let tool_output = |t: &Thread| -> String {
            t.messages
                .iter()
                .find_map(|m| m.tool_result.as_ref())
                .expect("a result")
                .content
                .to_text()
                .into_owned()
        };
        let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
            {"role": "user", "content": "Open the page."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "Captured."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": screenshot}}
            ]}]}
        ]});
        let out = tool_output(&thread_from_json(&anthropic, "a").unwrap().thread);
        assert!(out.len() < 120, "{out}");
        assert!(
            out.starts_with("Captured.\n[image: inline image/png, about 300000 bytes"),
            "{out}"
        );

        let responses = json!({"input": [
            {"role": "user", "content": "Fetch the invoice."},
            {"type": "function_call", "call_id": "f1", "name": "fetch", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f1", "output": [
                {"type": "input_text", "text": "Here it is."},
                {"type": "input_image", "image_url": format!("data:image/jpeg;base64,{screenshot}")},
                {"type": "input_file", "filename": "invoice-7.pdf", "file_data": "JVBERi0x"}
            ]}
        ]});
        let out = tool_output(&thread_from_json(&responses, "r").unwrap().thread);
        assert!(out.len() < 160, "{out}");
        assert!(
            out.contains("Here it is.")
                && out.contains("image/jpeg")
                && out.contains("[file: invoice-7.pdf]"),
            "{out}"
        );

        let chat = json!([
            {"role": "user", "content": "Chart it."},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "plot", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [
                {"type": "text", "text": "Plotted."},
                {"type": "image_url", "image_url": {"url": "https://charts.example/p99.png"}}
            ]}
        ]);
        let out = tool_output(&thread_from_json(&chat, "c").unwrap().thread);
        assert_eq!(out, "Plotted.\n[image: https://charts.example/p99.png]");
    }

    #[test]
    fn unknown_role_names_the_field() {
        let v = json!([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]);
        let e = thread_from_json(&v, "t").unwrap_err();
        assert_eq!(e.path, "messages[1].role");
    }

    #[test]
    fn orphan_tool_result_names_the_field() {
        let v = json!([{"role": "tool", "tool_call_id": "x", "content": "b"}]);
        let e = thread_from_json(&v, "t").unwrap_err();
        assert_eq!(e.path, "messages[0].tool_call_id");
    }

    #[test]
    fn canonical_thread_round_trips() {
        let v = json!({"id": "t1", "system": "sys", "messages": [
            {"id": "a", "role": "user", "content": "hi", "turn": 1},
            {"id": "b", "role": "assistant", "content": "hello", "turn": 1}
        ]});
        let t = thread_from_json(&v, "x").unwrap();
        assert_eq!(t.format, InputFormat::Canonical);
        assert_eq!(t.thread.id, "t1");
        assert_eq!(t.system.as_deref(), Some("sys"));
        let back = serde_json::to_value(&t.thread).unwrap();
        assert_eq!(back["messages"][0]["content"], "hi");
    }
}
