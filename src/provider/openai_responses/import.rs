//! Reading OpenAI Responses `input` items (or a request body) as threads:
//! `function_call` and `function_call_output` items become calls and
//! results, `reasoning` items stay with the calls they preceded,
//! `instructions` is the system prompt.

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
