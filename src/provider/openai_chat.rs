//! OpenAI Chat Completions request body.
//!
//! The neutral [`Request`] maps almost one to one onto Chat Completions; the
//! only adaptations are the ones the API would otherwise reject:
//! - the system prompt becomes the first message (role `system`); an empty
//!   system prompt is not sent;
//! - image parts are only accepted in user messages, so an image in any other
//!   role, and an inline image of a type the API does not take, is sent as
//!   a short text reference ([`images::reference`]);
//! - an empty `Content::Parts` is sent as `""` (an empty content array is
//!   rejected);
//! - an assistant message with tool calls and no text gets `content: null`;
//! - tool-call arguments are sent as the JSON string of the arguments value
//!   (`{}` when the value is null, which is what the API sends for "no
//!   arguments").
//!
//! Output is a `serde_json::Value` whose maps are BTreeMaps, so the serialized
//! body is byte-identical for identical input.

use serde_json::{json, Map, Value};

use super::body::{array, BodyCounter};
use crate::model::{Content, ContentPart, Dialect, Role, ToolCall, ToolSchema};
use crate::render::{images, ProviderOptions, RenderedMessage, Request};
use crate::tokens::{normalize_model, BlankFiller, ChatOverhead, Framing, IdGrowth, TokenizerRule};

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
    super::openai_cache_fields(&mut body, opts);
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
    if let Some(whole) = whole_message(&m) {
        return Some(whole);
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::String(m.role.as_str().into()));
    match m.role {
        Role::Tool => return Some(tool_message(m)),
        Role::Assistant if legacy(&m) => {
            // Chat's legacy form: one `function_call`, no id.
            let f = m
                .tool_calls
                .first()
                .map_or_else(|| json!({}), legacy_function_call);
            let text = if m.content.is_empty() {
                Value::Null
            } else {
                content(m.content, false)
            };
            out.insert("content".into(), text);
            out.insert("function_call".into(), f);
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

/// A message carried whole (it had fields compactd does not model: a
/// `name`, a `refusal`, `audio`), sent back as it came.
fn whole_message(m: &RenderedMessage) -> Option<Value> {
    use crate::render::wire::set;
    let Content::Parts(parts) = &m.content else {
        return None;
    };
    let [ContentPart::Provider(p)] = parts.as_slice() else {
        return None;
    };
    if p.kind != "message" || p.dialect != Dialect::OpenAiChat {
        return None;
    }
    let mut v = p.value();
    if legacy(m) {
        if let Some(c) = m.tool_calls.first() {
            set(&mut v, "function_call", legacy_function_call(c));
        }
    } else if !m.tool_calls.is_empty() {
        set(
            &mut v,
            "tool_calls",
            Value::Array(m.tool_calls.iter().map(tool_call).collect()),
        );
    }
    Some(v)
}

/// A legacy `function_call` as it came, updated.
fn legacy_function_call(c: &ToolCall) -> Value {
    let mut f = c.wire.as_deref().map_or_else(|| json!({}), |w| w.value());
    crate::render::wire::set(&mut f, "name", json!(c.name));
    if !super::same_arguments(&f, &c.arguments) {
        crate::render::wire::set(&mut f, "arguments", json!(c.arguments_json()));
    }
    f
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
                    ContentPart::Image { url } if images_allowed && images::sendable(&url) => {
                        Some(json!({"type": "image_url", "image_url": {"url": url}}))
                    }
                    ContentPart::Image { url } => {
                        Some(json!({"type": "text", "text": images::reference(&url)}))
                    }
                    ContentPart::Provider(p) => match super::sent(&p, Dialect::OpenAiChat)? {
                        super::Sent::Raw(v) => Some(v),
                        super::Sent::Text(text) => Some(json!({"type": "text", "text": text})),
                    },
                    // Removed by `without_reasoning` before this is called.
                    ContentPart::Thinking { .. }
                    | ContentPart::RedactedThinking { .. }
                    | ContentPart::Reasoning { .. } => None,
                })
                .collect(),
        ),
    }
}

/// Whether an assistant message is Chat's legacy function call: its one
/// call came as a `function_call`.
fn legacy(m: &RenderedMessage) -> bool {
    matches!(m.tool_calls.as_slice(), [c] if c.is_legacy_function())
}

/// A tool result: its provider form when it came in this format (a `name`,
/// parts, the legacy `function` role) with its content as it came while
/// the rendered text is that content, else a plain tool message.
fn tool_message(m: RenderedMessage) -> Value {
    use crate::render::wire::{delimited_parts, kept_as, set, Kept};
    // A missing id is kept visible (empty string) so `check_pairing`
    // reports it instead of the provider.
    let id = m.tool_call_id.clone().unwrap_or_default();
    let Some(w) = m
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::OpenAiChat)
    else {
        return json!({"role": "tool", "tool_call_id": id, "content": content(m.content, false)});
    };
    let mut v = w.value();
    if w.kind != "function" {
        set(&mut v, "tool_call_id", json!(id));
    }
    let rendered = m.content.flat_text();
    let original = match v.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    match (kept_as(&rendered, &original), v.get("content")) {
        (Kept::Same, _) => {}
        (Kept::Delimited { open, close }, Some(Value::Array(parts))) => {
            let parts = delimited_parts(parts, &open, &close, "text");
            set(&mut v, "content", parts);
        }
        _ => set(&mut v, "content", json!(rendered)),
    }
    v
}

fn tool_call(c: &ToolCall) -> Value {
    use crate::render::wire::set;
    let own = c
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::OpenAiChat);
    if c.is_custom() {
        let input = c.arguments.as_str().unwrap_or_default();
        let mut v = own
            .filter(|w| w.kind == "custom")
            .map_or_else(|| json!({"type": "custom", "custom": {}}), |w| w.value());
        set(&mut v, "id", json!(c.id));
        if let Some(custom) = v.get_mut("custom") {
            set(custom, "name", json!(c.name));
            set(custom, "input", json!(input));
        }
        return v;
    }
    let arguments = c.arguments_json();
    match own.filter(|w| w.kind == "function") {
        Some(w) => {
            let mut v = w.value();
            set(&mut v, "id", json!(c.id));
            if let Some(f) = v.get_mut("function") {
                set(f, "name", json!(c.name));
                if !super::same_arguments(f, &c.arguments) {
                    set(f, "arguments", json!(arguments));
                }
            }
            v
        }
        None => json!({
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": arguments},
        }),
    }
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
    let mut pending: Vec<&str> = Vec::new();
    // Every call id seen so far, to tell "answered twice" from "never called".
    let mut seen: crate::model::IdSet<&str> = Default::default();
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
            if let Some(pos) = pending.iter().position(|p| *p == id) {
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
                    if pending.contains(&id) {
                        return Err(format!(
                            "messages[{i}].tool_calls[{j}].id {id:?} repeats an id of the same message"
                        ));
                    }
                    seen.insert(id);
                    pending.push(id);
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

/// OpenAI Chat Completions (and compatible servers): sent as given.
pub(super) const FRAMING: Framing = Framing {
    name: "openai-chat",
    sends_thinking: false,
    sends_reasoning: false,
    labels_late_instructions: false,
    joins_non_user_parts: false,
    id_growth: IdGrowth::Verbatim,
    wraps_scalar_input: false,
    blank_filler: BlankFiller::Never,
    tools_as_sent: false,
    continuation: false,
    tokenizer: TokenizerRule::ByModel,
};

/// OpenAI Chat Completions.
///
/// - `per_message` 4: the OpenAI cookbook ("How to count tokens with
///   tiktoken") counts 3 framing tokens per message (`<|start|>`,
///   `<|message|>`, `<|end|>`) plus the encoded role, and every role name
///   is one token in o200k and cl100k (asserted in a test). Folding the
///   role in means callers need not count it.
/// - `per_name` 1 and `reply_priming` 3: the cookbook's numbers, which
///   match the API's `prompt_tokens` for gpt-3.5/4/4o.
/// - `per_tool_call` 10: OpenAI does not publish it; tiktoken-rs uses 1,
///   which undercounts because every call after the first gets its own
///   message header (4) plus a recipient and content-type header
///   (`to=functions.…`, `json`, about 5) and a terminator (1). Errs high.
/// - `per_image`: the model's worst case ([`image_tokens`]), since
///   a URL says nothing of the image's size.
pub(super) fn overhead(model: &str) -> ChatOverhead {
    ChatOverhead {
        per_message: 4,
        per_name: 1,
        reply_priming: 3,
        per_tool_call: 10,
        per_image: image_tokens(model),
        per_block: 4,
        tools_preamble: 0,
    }
}

/// Worst-case tokens of one image for an OpenAI model (OpenAI's "Images and
/// vision" guide). Tile models scale to 2048×2048 and the short side to 768:
/// at most 8 tiles. Patch models cap at 1536 patches times a multiplier.
/// - gpt-4o, gpt-4.1, gpt-4.5, chatgpt-4o: 85 + 8 × 170 = 1445
/// - o1, o3: 75 + 8 × 150 = 1275
/// - gpt-4o-mini: 2833 + 8 × 5667 = 48169 (its images are billed as tokens
///   at this rate)
/// - gpt-4.1-mini 1536 × 1.62, gpt-4.1-nano 1536 × 2.46, o4-mini 1536 × 1.72
/// - anything else (gpt-5 family and newer): the largest patch cost, 3779
pub(super) fn image_tokens(model: &str) -> u32 {
    let m = normalize_model(model);
    let is = |p: &str| m == p || m.starts_with(&format!("{p}-"));
    if is("gpt-4o-mini") {
        48_169
    } else if is("gpt-4.1-nano") {
        3779
    } else if is("gpt-4.1-mini") {
        2489
    } else if is("o4-mini") {
        2642
    } else if is("o1") || is("o3") {
        1275
    } else if [
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "chatgpt-4o",
        "gpt-4-turbo",
        "gpt-4",
    ]
    .iter()
    .any(|p| is(p))
    {
        1445
    } else {
        3779
    }
}

/// Tokens of an OpenAI Chat body as sent (see [`super::body_tokens`]).
pub fn count_body(body: &Value, bc: &BodyCounter<'_>) -> u32 {
    let messages: u32 = array(body, "messages").map(|m| count_message(m, bc)).sum();
    bc.overhead().reply_priming + messages + bc.tools(body, "parameters", false)
}

/// Tokens of one element of a body's `messages`: the body's count is the
/// sum of its elements' and a part the rest of the body decides.
pub fn count_message(m: &Value, bc: &BodyCounter<'_>) -> u32 {
    let o = bc.overhead();
    let text = |v: &Value| bc.text(v);
    let mut n = 0;
    {
        n += o.per_message;
        match m.get("content") {
            Some(Value::Array(parts)) => {
                for p in parts {
                    n += match p.get("type").and_then(Value::as_str) {
                        Some("image_url") => o.per_image,
                        Some("text") => text(&p["text"]),
                        _ => bc.provider(p),
                    };
                }
            }
            Some(c) => n += text(c),
            None => {}
        }
        for c in array(m, "tool_calls") {
            let f = if c.get("custom").is_some() {
                &c["custom"]
            } else {
                &c["function"]
            };
            n += o.per_tool_call
                + text(&f["name"])
                + text(&c["id"])
                + text(&f["arguments"])
                + text(&f["input"]);
        }
        if let Some(id) = m.get("tool_call_id") {
            n += o.per_name + text(id);
        }
        // A message carried whole: what it holds beside its content.
        for key in ["name", "refusal", "audio", "function_call"] {
            if let Some(v) = m.get(key).filter(|v| !v.is_null()) {
                n += o.per_name + bc.provider(v);
            }
        }
    }
    n
}

/// Whether `m` becomes an element of the body's `messages` (a message that
/// only held another provider's reasoning does not).
pub fn sends(m: &RenderedMessage) -> bool {
    let reasoning_only = m.tool_calls.is_empty()
        && m.content.reasoning().next().is_some()
        && m.content.clone().without_reasoning().is_empty();
    !reasoning_only
}

/// Reading a Chat Completions `messages` array (or request body) as a
/// thread; tool messages are paired with their calls by id.
pub(super) mod import {
    use std::collections::HashMap;

    use serde_json::Value;

    use crate::model::{
        Content, ContentPart, Dialect, Message, MessageMetadata, Role, Thread, ToolCall,
        ToolContent,
    };
    use crate::provider::import::{
        assign_turns_if_absent, carried, err, imported_result, only_keys, parse_arguments,
        wire_unless, ImportError, Marks,
    };

    pub(in crate::provider) fn thread(
        messages: &[Value],
        id: String,
    ) -> Result<Thread, ImportError> {
        thread_in(messages, id, 0, &HashMap::new())
    }

    /// Messages after `offset` earlier ones whose calls are `earlier`
    /// (call id → tool name).
    pub(in crate::provider) fn thread_in(
        messages: &[Value],
        id: String,
        offset: usize,
        earlier: &HashMap<String, String>,
    ) -> Result<Thread, ImportError> {
        let mut out = Vec::with_capacity(messages.len());
        let mut call_names: HashMap<String, String> = earlier.clone();
        // Legacy `function_call`s not yet answered by a `function` message:
        // (name, the id given to the call).
        let mut legacy: Vec<(String, String)> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let path = |f: &str| format!("messages[{i}].{f}");
            let (role, role_s) = role_of(m, i)?;
            let mut content = content(m, i)?;
            let mut tool_calls = tool_calls(m, i)?;
            if let Some(call) = legacy_call(m, &format!("fc_m{}", offset + i), i)? {
                legacy.push((call.name.clone(), call.id.clone()));
                tool_calls.push(call);
            }
            // A message with fields compactd does not model (a `name`, a
            // `refusal`, `audio`) is carried whole; its calls are kept as
            // calls (paired, and sent back in its place).
            let plain = only_keys(
                m,
                &[
                    "role",
                    "content",
                    "tool_calls",
                    "tool_call_id",
                    "function_call",
                ],
            );
            if !plain && role != Role::Tool {
                let mut whole = m.clone();
                if let Value::Object(o) = &mut whole {
                    o.remove("tool_calls");
                    o.remove("function_call");
                }
                content = Content::Parts(vec![carried(Dialect::OpenAiChat, "message", &whole)]);
            }
            for c in &tool_calls {
                call_names.insert(c.id.clone(), c.name.clone());
            }
            let mut message = Message {
                id: format!("m{}", offset + i),
                role,
                content,
                tool_calls,
                tool_result: None,
                turn: 0,
                metadata: MessageMetadata::default(),
            };
            Marks::of(m, &format!("messages[{i}]"))?.apply(&mut message);
            if role == Role::Tool {
                let call_id = if role_s == "function" {
                    answered_legacy(m, &mut legacy, i)?
                } else {
                    m.get("tool_call_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| err(path("tool_call_id"), "is required for role tool"))?
                        .to_string()
                };
                let tool_name = call_names.get(&call_id).cloned().ok_or_else(|| {
                    err(
                        path("tool_call_id"),
                        format!("{call_id:?} has no earlier tool call"),
                    )
                })?;
                let text = std::mem::take(&mut message.content).flat_text();
                // Chat Completions tool messages carry no outcome; some logs add
                // `is_error`.
                let failed = m.get("is_error").and_then(Value::as_bool) == Some(true);
                let mut env = imported_result(tool_name, &call_id, ToolContent::Text(text), failed);
                // A `name`, parts, or the legacy form go back as they came.
                let plain = role_s == "tool" && !m.get("content").is_some_and(Value::is_array);
                let modelled: &[&str] = if plain {
                    &["role", "tool_call_id", "content", "is_error"]
                } else {
                    &[]
                };
                env.wire = wire_unless(Dialect::OpenAiChat, role_s, m, modelled);
                message.tool_result = Some(env);
            }
            out.push(message);
        }
        let mut thread = Thread::new(id, out);
        assign_turns_if_absent(&mut thread);
        Ok(thread)
    }

    /// A message's role, and as it was written (the legacy `function` role
    /// is a tool result).
    fn role_of(m: &Value, i: usize) -> Result<(Role, &str), ImportError> {
        let path = || format!("messages[{i}].role");
        let role_s = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| err(path(), "is required"))?;
        let role = Role::parse(role_s)
            .or((role_s == "function").then_some(Role::Tool))
            .ok_or_else(|| {
                err(
                    path(),
                    format!("{role_s:?} is not one of system, developer, user, assistant, tool, function"),
                )
            })?;
        Ok((role, role_s))
    }

    /// A message's content: a string, parts, or nothing.
    fn content(m: &Value, i: usize) -> Result<Content, ImportError> {
        Ok(match m.get("content") {
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
            Some(_) => {
                return Err(err(
                    format!("messages[{i}].content"),
                    "must be a string, an array or null",
                ))
            }
        })
    }

    /// An assistant message's legacy `function_call`, as a call named `id`.
    fn legacy_call(m: &Value, id: &str, i: usize) -> Result<Option<ToolCall>, ImportError> {
        let Some(f) = m.get("function_call").filter(|f| !f.is_null()) else {
            return Ok(None);
        };
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| err(format!("messages[{i}].function_call.name"), "is required"))?;
        Ok(Some(ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            arguments: parse_arguments(f.get("arguments")),
            wire: wire_unless(Dialect::OpenAiChat, "function_call", f, &[]),
        }))
    }

    /// The call a legacy `function` message answers: the latest
    /// unanswered `function_call` of its `name`.
    fn answered_legacy(
        m: &Value,
        legacy: &mut Vec<(String, String)>,
        i: usize,
    ) -> Result<String, ImportError> {
        let name = m.get("name").and_then(Value::as_str).ok_or_else(|| {
            err(
                format!("messages[{i}].name"),
                "is required for role function",
            )
        })?;
        let at = legacy.iter().rposition(|(n, _)| n == name).ok_or_else(|| {
            err(
                format!("messages[{i}].name"),
                format!("{name:?} answers no earlier function_call"),
            )
        })?;
        Ok(legacy.remove(at).1)
    }

    /// A message's `tool_calls`, their arguments parsed.
    fn tool_calls(m: &Value, i: usize) -> Result<Vec<ToolCall>, ImportError> {
        let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) else {
            return Ok(Vec::new());
        };
        let calls = calls
            .as_array()
            .ok_or_else(|| err(format!("messages[{i}].tool_calls"), "must be an array"))?;
        let mut out = Vec::with_capacity(calls.len());
        for (j, c) in calls.iter().enumerate() {
            let cpath = |f: &str| format!("messages[{i}].tool_calls[{j}].{f}");
            let cid = c
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| err(cpath("id"), "is required"))?;
            // A custom tool takes free-form text.
            let custom = c.get("type").and_then(Value::as_str) == Some("custom");
            let key = if custom { "custom" } else { "function" };
            let f = c.get(key).ok_or_else(|| err(cpath(key), "is required"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| err(cpath(&format!("{key}.name")), "is required"))?;
            let (arguments, wire) = if custom {
                let input = f.get("input").and_then(Value::as_str).unwrap_or_default();
                (
                    Value::String(input.to_string()),
                    wire_unless(Dialect::OpenAiChat, "custom", c, &[]),
                )
            } else {
                let plain = f
                    .as_object()
                    .is_some_and(|o| o.keys().all(|k| k == "name" || k == "arguments"));
                let modelled: &[&str] = if plain {
                    &["id", "type", "function"]
                } else {
                    &[]
                };
                (
                    parse_arguments(f.get("arguments")),
                    wire_unless(Dialect::OpenAiChat, "function", c, modelled),
                )
            };
            out.push(ToolCall {
                wire,
                id: cid.to_string(),
                name: name.to_string(),
                arguments,
            });
        }
        Ok(out)
    }

    fn content_part(p: &Value) -> Result<ContentPart, String> {
        let kind = p.get("type").and_then(Value::as_str);
        let plain = match kind {
            Some("text") => only_keys(p, &["type", "text"]),
            Some("image_url") => {
                only_keys(p, &["type", "image_url"])
                    && p.get("image_url").is_some_and(|i| only_keys(i, &["url"]))
            }
            _ => true,
        };
        if let Some(k) = kind.filter(|_| !plain) {
            return Ok(carried(Dialect::OpenAiChat, k, p));
        }
        match kind {
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
            Some(other) => Ok(carried(Dialect::OpenAiChat, other, p)),
            None => Err("type is required".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::testgen::{self, calls, msg, opts, result};
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
