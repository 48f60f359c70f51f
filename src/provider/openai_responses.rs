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
    super::openai_cache_fields(&mut body, opts);
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

pub(super) mod import;
