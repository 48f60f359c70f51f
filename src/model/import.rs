//! Reading threads from JSON: the canonical thread format, or a plain OpenAI
//! Chat Completions `messages` array (or request body) so users can pipe
//! their own logs in. OpenAI messages get deterministic ids (`m0`, `m1`, …)
//! and turns (a user message opens a new turn).

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
        Some(_) => return Err(err("system", "must be a string")),
    };
    if canonical {
        let o =
            obj.ok_or_else(|| err("$", "a canonical thread is an object with id and messages"))?;
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
    let thread = openai_messages(messages, id)?;
    Ok(ThreadInput {
        thread,
        system,
        tools,
        format: InputFormat::OpenAi,
    })
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
                let arguments = match f.get("arguments") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    Some(other) => other.clone(),
                    None => Value::Object(Default::default()),
                };
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
            let text = std::mem::take(&mut message.content).text().into_owned();
            let content = ToolContent::Text(text);
            // Chat Completions tool messages carry no outcome; some logs add
            // `is_error`. Otherwise the output's own shape says.
            let outcome = if m.get("is_error").and_then(Value::as_bool) == Some(true) {
                Outcome::Failure
            } else {
                infer_outcome(&content)
            };
            message.tool_result = Some(ToolResultEnvelope {
                tool_name,
                tool_call_id: call_id.to_string(),
                outcome,
                content,
                key_fields: BTreeMap::new(),
                durability: None,
                determinism: None,
                started_at: None,
                completed_at: None,
            });
        }
        out.push(message);
    }
    let mut thread = Thread { id, messages: out };
    assign_turns_if_absent(&mut thread);
    Ok(thread)
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
