//! OpenAI Responses request body: the neutral [`Request`] as `input` items.
//!
//! - The system prompt becomes `instructions`; later system and developer
//!   messages stay `message` items with their role.
//! - User text is a string; multipart user content becomes `input_text` and
//!   `input_image` parts (`detail: auto`).
//! - An assistant message becomes, in order: its reasoning items (passed back
//!   unchanged: the API wants them with the calls they preceded), a
//!   `message` item when it has text, then one `function_call` item per call
//!   (`arguments` is the JSON string of the arguments; `{}` for null).
//!   Anthropic thinking blocks have no Responses form and are left out;
//!   images in assistant messages, and inline images of a type the API does
//!   not take, are sent as a short text reference.
//! - A tool result becomes a `function_call_output` item with its `call_id`.
//!   The API matches outputs to calls by `call_id` across the whole input,
//!   so a reused id is made unique (see `tool_ids`; [`tool_id_rewrites`]
//!   lists the rewrites for the audit record).
//! - Reasoning items of an assistant message left with neither text nor
//!   calls are not sent: the API refuses a reasoning item without the item
//!   it preceded.
//! - A blank user message is sent as `(empty)`; blank system and developer
//!   messages are not sent (the API rejects empty messages).
//! - Function tools are flat: `{"type":"function","name","description"?,"parameters","strict":false}`.
//! - `max_output_tokens` is set when the caller gives a maximum.
//!
//! Output is a `serde_json::Value` whose maps are BTreeMaps, so the serialized
//! body is byte-identical for identical input.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::body::{array, BodyCounter};
use crate::model::{Content, ContentPart, Dialect, Role, ToolCall, ToolSchema};
use crate::render::tool_ids::{IdRules, ToolIds};
use crate::render::wire::{input_schema, EMPTY_TEXT};
use crate::render::{images, ProviderOptions, RenderedMessage, Request};
use crate::tokens::{BlankFiller, Framing, IdGrowth};

/// OpenAI Responses request body.
pub fn to_responses(req: &Request, opts: &ProviderOptions) -> Value {
    into_responses(req.clone(), opts)
}

/// [`to_responses`] taking the request by value (text moves into the body).
pub fn into_responses(req: Request, opts: &ProviderOptions) -> Value {
    let ids = ToolIds::of(&req, IdRules::Unique);
    let custom: BTreeSet<String> = req
        .messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .filter(|c| c.is_custom())
        .map(|c| c.id.clone())
        .collect();
    let mut input = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.into_iter().enumerate() {
        let custom = m
            .tool_call_id
            .as_ref()
            .is_some_and(|id| custom.contains(id));
        items(m, &ids, i, custom, &mut input);
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::String(opts.model.clone()));
    if let Some(system) = req.system.filter(|s| !s.trim().is_empty()) {
        body.insert("instructions".into(), Value::String(system));
    }
    body.insert("input".into(), Value::Array(input));
    if !req.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool).collect()),
        );
    }
    if let Some(max) = opts.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    Value::Object(body)
}

/// Responses content-part types; every other carried type is an item.
const PART_KINDS: &[&str] = &[
    "input_text",
    "output_text",
    "input_image",
    "input_file",
    "input_audio",
    "refusal",
];

/// Whether `p` is a Responses item carried as it came (not a content part).
fn carried_item(p: &ContentPart) -> Option<&crate::model::ProviderPart> {
    match p {
        ContentPart::Provider(p)
            if p.dialect == Dialect::OpenAiResponses && !PART_KINDS.contains(&p.kind.as_str()) =>
        {
            Some(p)
        }
        _ => None,
    }
}

fn items(m: RenderedMessage, ids: &ToolIds, i: usize, custom: bool, out: &mut Vec<Value>) {
    let carries = match &m.content {
        Content::Parts(parts) => parts.iter().any(|p| carried_item(p).is_some()),
        Content::Text(_) => false,
    };
    if carries && m.role != Role::Tool {
        return in_order(&m, &ids.calls[i], out);
    }
    match m.role {
        Role::Tool => {
            let call_id = ids.results[i].clone().unwrap_or_default();
            out.push(output_item(&m, call_id, custom));
        }
        Role::Assistant => assistant_items(&m, &ids.calls[i], out),
        Role::User => {
            let content = user_content(m.content.without_reasoning());
            out.push(json!({"type": "message", "role": "user", "content": content}));
        }
        Role::System | Role::Developer => {
            let text = m.content.flat_text();
            if !text.trim().is_empty() {
                out.push(json!({"type": "message", "role": m.role.as_str(), "content": text}));
            }
        }
    }
}

/// An assistant message as its reasoning items, its text message and its
/// function calls, in that order. A reasoning item must be followed by the
/// item it preceded; with neither text nor calls left (they were compacted
/// away) the API refuses it, so it goes with them.
fn assistant_items(m: &RenderedMessage, call_ids: &[String], out: &mut Vec<Value>) {
    let text = m.content.flat_text();
    let has_text = !text.trim().is_empty();
    if has_text || !m.tool_calls.is_empty() {
        out.extend(m.content.reasoning().filter_map(reasoning_item));
    }
    if has_text {
        out.push(json!({"type": "message", "role": "assistant", "content": text}));
    }
    out.extend(
        m.tool_calls
            .iter()
            .zip(call_ids)
            .map(|(c, id)| function_call(c, id)),
    );
}

/// A message holding carried items, as items in its own order: carried
/// items as they came, reasoning items, and the parts between them as one
/// message item each; then its function calls. A reasoning item with
/// nothing after it is not sent (the API refuses it).
fn in_order(m: &RenderedMessage, call_ids: &[String], out: &mut Vec<Value>) {
    let Content::Parts(parts) = &m.content else {
        return;
    };
    let mut pending: Vec<ContentPart> = Vec::new();
    let mut emitted: Vec<(bool, Value)> = Vec::new();
    let flush = |pending: &mut Vec<ContentPart>, emitted: &mut Vec<(bool, Value)>| {
        if pending.is_empty() {
            return;
        }
        let item = match m.role {
            // Blank text beside a carried item is left out, not sent as
            // the filler a wholly blank message needs.
            Role::User => {
                let parts = user_parts(std::mem::take(pending));
                (!parts.is_empty())
                    .then(|| json!({"type": "message", "role": "user", "content": parts}))
            }
            role => {
                let text = Content::Parts(std::mem::take(pending)).flat_text();
                (!text.trim().is_empty())
                    .then(|| json!({"type": "message", "role": role.as_str(), "content": text}))
            }
        };
        emitted.extend(item.map(|v| (false, v)));
    };
    for p in parts {
        if let Some(c) = carried_item(p) {
            flush(&mut pending, &mut emitted);
            emitted.push((false, c.value()));
        } else if let Some(r) = reasoning_item(p) {
            flush(&mut pending, &mut emitted);
            emitted.push((true, r));
        } else if !p.is_reasoning() {
            pending.push(p.clone());
        }
    }
    flush(&mut pending, &mut emitted);
    if m.tool_calls.is_empty() {
        while emitted.last().is_some_and(|(reasoning, _)| *reasoning) {
            emitted.pop();
        }
    }
    out.extend(emitted.into_iter().map(|(_, v)| v));
    out.extend(
        m.tool_calls
            .iter()
            .zip(call_ids)
            .map(|(c, id)| function_call(c, id)),
    );
}

fn reasoning_item(p: &ContentPart) -> Option<Value> {
    let ContentPart::Reasoning {
        id,
        summary,
        encrypted_content,
        rest,
    } = p
    else {
        return None;
    };
    // Its other keys as they came, then what compactd models.
    let mut item = match rest.as_ref().map(|r| r.parse()) {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    item.insert("type".into(), json!("reasoning"));
    item.insert("id".into(), json!(id));
    item.insert(
        "summary".into(),
        Value::Array(
            summary
                .iter()
                .map(|s| json!({"type": "summary_text", "text": s}))
                .collect(),
        ),
    );
    if let Some(e) = encrypted_content {
        item.insert("encrypted_content".into(), json!(e));
    }
    Some(Value::Object(item))
}

/// A user message's content: text, or input parts (images the API can
/// fetch as images, others as references). The API rejects an empty
/// message, and the user did send one: it gets the filler.
fn user_content(content: Content) -> Value {
    match content {
        Content::Text(s) if s.trim().is_empty() => Value::String(EMPTY_TEXT.into()),
        Content::Text(s) => Value::String(s),
        Content::Parts(parts) => {
            let parts = user_parts(parts);
            if parts.is_empty() {
                Value::String(EMPTY_TEXT.into())
            } else {
                Value::Array(parts)
            }
        }
    }
}

/// The input parts of a user message's parts; blank text is left out.
fn user_parts(parts: Vec<ContentPart>) -> Vec<Value> {
    parts
        .into_iter()
        .filter_map(|p| match p {
            ContentPart::Text { text } if text.trim().is_empty() => None,
            ContentPart::Text { text } => Some(json!({"type": "input_text", "text": text})),
            ContentPart::Image { url } if images::sendable(&url) => {
                Some(json!({"type": "input_image", "image_url": url, "detail": "auto"}))
            }
            ContentPart::Image { url } => {
                Some(json!({"type": "input_text", "text": images::reference(&url)}))
            }
            ContentPart::Provider(p) => match super::sent(&p, Dialect::OpenAiResponses)? {
                super::Sent::Raw(v) => Some(v),
                super::Sent::Text(text) => Some(json!({"type": "input_text", "text": text})),
            },
            _ => None,
        })
        .collect()
}

/// A result as a `function_call_output` (a `custom_tool_call_output` for
/// a custom tool): its provider form when it came in this format, with its
/// output as it came while the rendered text is that output.
fn output_item(m: &RenderedMessage, call_id: String, custom: bool) -> Value {
    use crate::render::wire::{delimited_parts, kept_as, set, Kept};
    let kind = if custom {
        "custom_tool_call_output"
    } else {
        "function_call_output"
    };
    let rendered = m.content.flat_text();
    let Some(w) = m
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::OpenAiResponses && w.kind == kind)
    else {
        return json!({"type": kind, "call_id": call_id, "output": rendered});
    };
    let mut v = w.value();
    set(&mut v, "call_id", json!(call_id));
    let original = import::output_text_of(v.get("output")).unwrap_or_default();
    match (kept_as(&rendered, &original), v.get("output")) {
        (Kept::Same, _) => {}
        (Kept::Delimited { open, close }, Some(Value::Array(parts))) => {
            let parts = delimited_parts(parts, &open, &close, "input_text");
            set(&mut v, "output", parts);
        }
        _ => set(&mut v, "output", json!(rendered)),
    }
    v
}

/// A call as a `function_call` item (a `custom_tool_call` for a custom
/// tool): its provider form when it came in this format, updated.
fn function_call(c: &ToolCall, call_id: &str) -> Value {
    use crate::render::wire::set;
    let own = c
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::OpenAiResponses);
    if c.is_custom() {
        let input = c.arguments.as_str().unwrap_or_default();
        let mut v = own.map_or_else(|| json!({"type": "custom_tool_call"}), |w| w.value());
        set(&mut v, "call_id", json!(call_id));
        set(&mut v, "name", json!(c.name));
        set(&mut v, "input", json!(input));
        return v;
    }
    let Some(w) = own.filter(|w| w.kind == "function_call") else {
        let arguments = c.arguments_json();
        return json!({"type": "function_call", "call_id": call_id, "name": c.name, "arguments": arguments});
    };
    let mut v = w.value();
    set(&mut v, "call_id", json!(call_id));
    set(&mut v, "name", json!(c.name));
    // The arguments as they came, unless they changed (whitespace is kept).
    if !super::same_arguments(&v, &c.arguments) {
        set(&mut v, "arguments", json!(c.arguments_json()));
    }
    v
}

/// The call ids the Responses body sends differently from the request
/// (reused ids made unique), as (sent by the caller, sent), in request order.
pub fn tool_id_rewrites(req: &Request) -> Vec<(String, String)> {
    ToolIds::of(req, IdRules::Unique).rewrites
}

/// A flat function tool. `strict` is always sent, as `false`: the Responses
/// API treats a tool without it as strict (unlike Chat Completions), and a
/// schema written for Chat Completions rarely meets strict mode's rules.
/// `parameters` is required: a tool without parameters takes an empty object.
fn tool(t: &ToolSchema) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("function"));
    out.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        out.insert("description".into(), Value::String(t.description.clone()));
    }
    out.insert("parameters".into(), input_schema(t));
    out.insert("strict".into(), Value::Bool(false));
    Value::Object(out)
}

/// Checks a Responses body for what the API rejects: a `function_call_output`
/// without an earlier unanswered `function_call` with its `call_id`, a
/// `function_call` never answered, a `call_id` used twice, a reasoning item
/// not followed by the assistant message or call it preceded, a non-string
/// `arguments`, or an empty message.
pub fn check_structure(body: &Value) -> Result<(), String> {
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .ok_or("body has no \"input\" array")?;
    // Open calls by call_id, with the item that made them; every call_id
    // ever used (the API matches outputs by call_id across the request).
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut carried_calls: BTreeSet<String> = BTreeSet::new();
    for (i, item) in input.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "function_call" => {
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| format!("input[{i}] is a function_call without call_id"))?;
                if !item.get("arguments").is_some_and(Value::is_string) {
                    return Err(format!("input[{i}].arguments is not a string"));
                }
                if !used.insert(id.to_string()) {
                    return Err(format!(
                        "input[{i}] reuses call_id {id:?} of an earlier function_call"
                    ));
                }
                open.insert(id.to_string(), i);
            }
            "function_call_output" => {
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if open.remove(id).is_none() {
                    return Err(format!(
                        "input[{i}] is a function_call_output for {id:?} with no earlier function_call"
                    ));
                }
            }
            "reasoning" => {
                // The item it preceded: the assistant's message or a call.
                let next = input.get(i + 1);
                let kind = next.and_then(|n| n.get("type")).and_then(Value::as_str);
                let role = next.and_then(|n| n.get("role")).and_then(Value::as_str);
                let follows = match kind {
                    Some("message") => role == Some("assistant"),
                    Some(k) => !k.ends_with("_output"),
                    None => false,
                };
                if !follows {
                    return Err(format!(
                        "input[{i}] is a reasoning item without the item it preceded"
                    ));
                }
            }
            "message" => {
                let empty = match item.get("content") {
                    Some(Value::String(s)) => s.trim().is_empty(),
                    Some(Value::Array(a)) => a.is_empty(),
                    _ => true,
                };
                if empty {
                    return Err(format!("input[{i}] is a message without content"));
                }
            }
            // Carried items: an output answers an earlier item's call_id.
            other if other.ends_with("_output") => {
                let id = ["call_id", "id"]
                    .iter()
                    .find_map(|k| item.get(*k).and_then(Value::as_str))
                    .unwrap_or_default();
                if !carried_calls.contains(id) {
                    return Err(format!(
                        "input[{i}] is a {other} for {id:?} with no earlier item with that call_id"
                    ));
                }
            }
            _ => {
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    carried_calls.insert(id.to_string());
                }
            }
        }
    }
    match open.iter().next() {
        Some((id, i)) => Err(format!(
            "function_call {id:?} at input[{i}] has no function_call_output"
        )),
        None => Ok(()),
    }
}

/// OpenAI Responses: reasoning items are sent; every role's parts but the
/// user's go joined; a reused call id gets a suffix; a blank user message
/// is filled.
pub(super) const FRAMING: Framing = Framing {
    name: "openai-responses",
    sends_reasoning: true,
    joins_non_user_parts: true,
    id_growth: IdGrowth::Suffix,
    blank_filler: BlankFiller::UserOnly,
    tools_as_sent: true,
    ..super::openai_chat::FRAMING
};

/// Tokens of an OpenAI Responses body as sent (see [`super::body_tokens`]).
pub fn count_body(body: &Value, bc: &BodyCounter<'_>) -> u32 {
    let o = bc.overhead();
    let text = |v: &Value| bc.text(v);
    let mut n = o.reply_priming;
    if let Some(instructions) = body.get("instructions") {
        n += o.per_message + text(instructions);
    }
    for item in array(body, "input") {
        n += match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                o.per_tool_call
                    + text(&item["name"])
                    + text(&item["call_id"])
                    + text(&item["arguments"])
            }
            Some("function_call_output") => {
                o.per_message
                    + o.per_name
                    + text(&item["call_id"])
                    + match item.get("output") {
                        Some(Value::Array(parts)) => parts
                            .iter()
                            .map(|p| match p.get("type").and_then(Value::as_str) {
                                Some("input_image") => o.per_image,
                                Some("input_text") => text(&p["text"]),
                                _ => bc.provider(p),
                            })
                            .sum(),
                        Some(out) => text(out),
                        None => 0,
                    }
            }
            Some("reasoning") => {
                o.per_block
                    + array(item, "summary")
                        .map(|s| text(&s["text"]))
                        .sum::<u32>()
                    + text(&item["encrypted_content"])
            }
            Some(k) if k != "message" => bc.provider(item),
            _ => {
                o.per_message
                    + match item.get("content") {
                        Some(Value::Array(parts)) => parts
                            .iter()
                            .map(|p| match p.get("type").and_then(Value::as_str) {
                                Some("input_image") => o.per_image,
                                Some("input_text" | "output_text") => text(&p["text"]),
                                _ => bc.provider(p),
                            })
                            .sum(),
                        Some(c) => text(c),
                        None => 0,
                    }
            }
        };
    }
    n += bc.tools(body, "parameters", true);
    n
}

/// Reading OpenAI Responses `input` items (or a request body) as threads:
/// `function_call` and `function_call_output` items become calls and
/// results, `reasoning` items stay with the calls they preceded,
/// `instructions` is the system prompt.
pub(super) mod import {
    use serde_json::Value;

    use crate::model::{Content, ContentPart, Dialect, Message, Role, ToolCall, ToolContent};
    use crate::provider::import::{
        carried, content_of, err, only_keys, parse_arguments, protect_before_compaction, str_field,
        tool_schema, wire_unless, Builder, ImportError, Marks, ThreadInput,
    };
    use crate::provider::Format;

    /// The Responses `input` items of `v`, when it is a Responses body (an
    /// object with `input` and no `messages`) or an array of Responses items.
    pub(in crate::provider) fn input_of(v: &Value) -> Option<&Value> {
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
                        || (t != "message" && Dialect::OpenAiResponses.knows(t))
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

    pub(in crate::provider) fn thread(
        v: &Value,
        input: &Value,
        default_id: &str,
    ) -> Result<ThreadInput, ImportError> {
        thread_in(v, input, default_id, Builder::default())
    }

    /// The items, built on `b` (a continued import's).
    pub(in crate::provider) fn thread_in(
        v: &Value,
        input: &Value,
        default_id: &str,
        mut b: Builder,
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

        match input {
            Value::String(s) => {
                b.push(Role::User, Content::Text(s.clone()));
            }
            Value::Array(items) => {
                // The assistant message that function calls and reasoning
                // join, until something else is said.
                let mut turn: Option<usize> = None;
                for (i, item) in items.iter().enumerate() {
                    let path = format!("input[{i}]");
                    b.marks = Marks::of(item, &path)?;
                    item_into(&mut b, &mut turn, item, &path)?;
                }
            }
            _ => return Err(err("input", "must be a string or an array")),
        }
        protect_before_compaction(&mut b.messages);
        Ok(ThreadInput {
            thread: b.thread(id),
            system,
            tools,
            format: Format::OpenAiResponses,
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
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(t) => t,
            // An `item_reference` may leave its type out.
            None if item.get("role").is_none() && item.get("id").is_some() => "item_reference",
            None => "message",
        };
        match kind {
            "message" => message_item(b, turn, item, path)?,
            "reasoning" => reasoning_item(b, turn, item, path)?,
            "function_call" | "custom_tool_call" => {
                let custom = kind == "custom_tool_call";
                let arguments = if custom {
                    Value::String(str_field(item, "input", path)?.to_string())
                } else {
                    parse_arguments(item.get("arguments"))
                };
                let modelled: &[&str] = if custom {
                    &[]
                } else {
                    &["type", "call_id", "name", "arguments"]
                };
                let call = ToolCall {
                    wire: wire_unless(Dialect::OpenAiResponses, kind, item, modelled),
                    id: str_field(item, "call_id", path)?.to_string(),
                    name: str_field(item, "name", path)?.to_string(),
                    arguments,
                };
                let at = assistant_turn(b, turn);
                b.call(at, call);
            }
            "function_call_output" | "custom_tool_call_output" => {
                *turn = None;
                let call_id = str_field(item, "call_id", path)?;
                let output = item.get("output");
                let text = output_text_of(output)
                    .ok_or_else(|| err(format!("{path}.output"), "is required"))?;
                b.result(
                    call_id,
                    ToolContent::Text(text),
                    false,
                    &format!("{path}.call_id"),
                )?;
                // An output of parts (images, files) is sent back as parts.
                let plain = kind == "function_call_output" && output.is_some_and(Value::is_string);
                let modelled: &[&str] = if plain {
                    &["type", "call_id", "output"]
                } else {
                    &[]
                };
                b.set_result_wire(
                    wire_unless(Dialect::OpenAiResponses, kind, item, modelled)
                        .map(|p| ContentPart::Provider(*p)),
                );
            }
            "compaction" => {
                // Provider state standing for everything before it: its own
                // message, kept as it came (see `protect_before_compaction`).
                *turn = None;
                let part = carried(Dialect::OpenAiResponses, kind, item);
                b.push(Role::Assistant, Content::Parts(vec![part]));
            }
            other => carried_item(b, turn, item, other, path)?,
        }
        Ok(())
    }

    /// An item compactd does not model, carried as it came. One that
    /// answers an earlier carried item (a `*_output` by `call_id`, an
    /// approval by `approval_request_id`) joins that item's message, so no
    /// compaction can part them; any other joins the open assistant turn.
    fn carried_item(
        b: &mut Builder,
        turn: &mut Option<usize>,
        item: &Value,
        kind: &str,
        path: &str,
    ) -> Result<(), ImportError> {
        let part = carried(Dialect::OpenAiResponses, kind, item);
        let ContentPart::Provider(p) = &part else {
            return Ok(());
        };
        if let Some(target) = p.answers() {
            let holder = b.messages.iter().rposition(|m| holds_item(m, &target));
            match holder {
                Some(at) => {
                    add_part(&mut b.messages[at], part);
                    return Ok(());
                }
                None if kind.ends_with("_output") => {
                    return Err(err(
                        format!("{path}.call_id"),
                        format!("{target:?} answers no earlier item with that call_id"),
                    ))
                }
                None => {}
            }
        }
        let at = assistant_turn(b, turn);
        add_part(&mut b.messages[at], part);
        Ok(())
    }

    /// Whether `m` holds a carried item named `id` (by `call_id` or `id`).
    fn holds_item(m: &Message, id: &str) -> bool {
        let Content::Parts(parts) = &m.content else {
            return false;
        };
        parts.iter().any(|p| match p {
            ContentPart::Provider(p) => p.answers().is_none() && p.ids().iter().any(|i| i == id),
            _ => false,
        })
    }

    /// Whether compactd's own rendering gives `item` back as it came: a
    /// message of `type`, `role` and string content, or a user message of
    /// plain text and image parts. Anything else is carried whole.
    fn reproduced(item: &Value, role: Role) -> bool {
        if !only_keys(item, &["type", "role", "content"]) {
            return false;
        }
        match item.get("content") {
            Some(Value::String(_)) => true,
            Some(Value::Array(parts)) => {
                role == Role::User
                    && !parts.is_empty()
                    && parts
                        .iter()
                        .all(|p| match p.get("type").and_then(Value::as_str) {
                            Some("input_text") => only_keys(p, &["type", "text"]),
                            Some("input_image") => {
                                only_keys(p, &["type", "image_url", "detail"])
                                    && p.get("detail").and_then(Value::as_str) == Some("auto")
                                    && p.get("image_url")
                                        .and_then(Value::as_str)
                                        .is_some_and(crate::render::images::sendable)
                            }
                            _ => false,
                        })
            }
            _ => false,
        }
    }

    /// A message item: an assistant one joins the open assistant turn.
    fn message_item(
        b: &mut Builder,
        turn: &mut Option<usize>,
        item: &Value,
        path: &str,
    ) -> Result<(), ImportError> {
        let role_s = str_field(item, "role", path)?;
        let role = Role::parse(role_s)
            .filter(|r| *r != Role::Tool)
            .ok_or_else(|| {
                err(
                    format!("{path}.role"),
                    format!("{role_s:?} is not one of system, developer, user, assistant"),
                )
            })?;
        if !reproduced(item, role) {
            // Read for its shape (an error names the field), carried whole.
            match item.get("content") {
                Some(Value::String(_)) => {}
                Some(Value::Array(a)) => {
                    for (k, p) in a.iter().enumerate() {
                        part(p, &format!("{path}.content[{k}]"))?;
                    }
                }
                _ => {
                    return Err(err(
                        format!("{path}.content"),
                        "must be a string or an array",
                    ))
                }
            }
            let whole = carried(Dialect::OpenAiResponses, "message", item);
            if role == Role::Assistant {
                let at = assistant_turn(b, turn);
                add_part(&mut b.messages[at], whole);
            } else {
                *turn = None;
                b.push(role, Content::Parts(vec![whole]));
            }
            return Ok(());
        }
        let array = item.get("content").is_some_and(Value::is_array);
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
            // Parts stay parts: the body sends them back as an array.
            b.push(
                role,
                if array {
                    Content::Parts(parts)
                } else {
                    content_of(parts)
                },
            );
        }
        Ok(())
    }

    /// A reasoning item's keys beyond what compactd models (marks aside).
    fn reasoning_rest(item: &Value) -> Option<crate::model::JsonText> {
        let Value::Object(o) = item else {
            return None;
        };
        let rest: serde_json::Map<String, Value> = o
            .iter()
            .filter(|(k, v)| {
                !v.is_null()
                    && !only_keys(
                        &serde_json::json!({ k.as_str(): v }),
                        &["type", "id", "summary", "encrypted_content"],
                    )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!rest.is_empty()).then(|| crate::model::JsonText::from_value(&Value::Object(rest)))
    }

    /// A reasoning item opens the assistant turn it belongs to.
    fn reasoning_item(
        b: &mut Builder,
        turn: &mut Option<usize>,
        item: &Value,
        path: &str,
    ) -> Result<(), ImportError> {
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
                rest: reasoning_rest(item),
                id: str_field(item, "id", path)?.to_string(),
                summary,
                encrypted_content: item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            },
        );
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
            Some(other) => Ok(carried(Dialect::OpenAiResponses, other, p)),
            None => Err(err(format!("{path}.type"), "is required")),
        }
    }

    /// An output's text: a string as it is, parts as [`output_text`].
    pub(in crate::provider) fn output_text_of(output: Option<&Value>) -> Option<String> {
        match output {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(parts)) => Some(output_text(parts)),
            _ => None,
        }
    }

    /// A Responses `function_call_output` given as content parts, as text:
    /// images and files become short references (never inline data), so
    /// nothing the tool returned vanishes without a trace.
    fn output_text(parts: &[Value]) -> String {
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
}
