//! Reading threads from JSON: the canonical thread format, or what agents
//! already log, so users can pipe their own logs in. Each format's reader
//! lives with its format (`neutral`, `openai_chat`, `anthropic`,
//! `openai_responses`); this module recognizes which one a body is and
//! holds what they share: deterministic ids (`m0`, `m1`, …), turns (a user
//! message opens a new turn), results paired with their calls.
//!
//! Recognition order matters, since formats overlap: Responses items
//! (`input`, or items of Responses-only types) first, then the canonical
//! thread (every message has an id and none a `tool_call_id`), then
//! Anthropic (blocks Chat Completions never has), then Chat Completions.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use thiserror::Error;

use super::{anthropic, neutral, openai_chat, openai_responses, Format};
use crate::model::{
    infer_outcome, Content, ContentPart, Dialect, Message, MessageMetadata, Outcome, ProviderPart,
    Role, Thread, ToolCall, ToolContent, ToolResultEnvelope, ToolSchema,
};

/// A thread file: the thread plus what the request around it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadInput {
    /// The thread.
    pub thread: Thread,
    /// System prompt sent separately from the messages, if any.
    pub system: Option<String>,
    /// Tool schemas.
    pub tools: Vec<ToolSchema>,
    /// Which format was recognized (`Neutral` for the canonical thread).
    pub format: Format,
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

impl ImportError {
    /// The request field at fault when the JSON read was the value of
    /// `field` (`input.json` + `messages[1].role`).
    pub fn field_under(&self, field: &str) -> String {
        if self.path == "$" || self.path.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{}", self.path)
        }
    }
}

pub(super) fn err(path: impl Into<String>, reason: impl Into<String>) -> ImportError {
    ImportError {
        path: path.into(),
        reason: reason.into(),
    }
}

/// Reads a thread from parsed JSON in any format compactd reads.
/// `default_id` names threads whose format carries no id.
pub fn thread_from_json(v: &Value, default_id: &str) -> Result<ThreadInput, ImportError> {
    thread_from_json_as(v, default_id, None)
}

/// The Responses items of `v` when it is in that shape: as the caller says,
/// or as recognized.
fn responses_input(v: &Value, shape: Option<Format>) -> Option<&Value> {
    match shape {
        Some(Format::OpenAiResponses) => Some(match v {
            Value::Object(o) => o.get("input").unwrap_or(v),
            _ => v,
        }),
        Some(_) => None,
        None => openai_responses::import::input_of(v),
    }
}

/// [`thread_from_json`] with the shape given by the caller (`None`:
/// recognized): a short conversation, such as one text-only message, reads
/// the same in several shapes but not into the same content.
pub fn thread_from_json_as(
    v: &Value,
    default_id: &str,
    shape: Option<Format>,
) -> Result<ThreadInput, ImportError> {
    let responses = responses_input(v, shape);
    if let Some(input) = responses {
        return openai_responses::import::thread(v, input, default_id);
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
    let canonical = match shape {
        Some(f) => f == Format::Neutral,
        None => neutral::import::recognizes(messages),
    };
    if canonical {
        let o =
            obj.ok_or_else(|| err("$", "a canonical thread is an object with id and messages"))?;
        return Ok(ThreadInput {
            thread: neutral::import::thread(o, messages)?,
            system,
            tools,
            format: Format::Neutral,
        });
    }
    let id = obj
        .and_then(|o| o.get("id"))
        .and_then(Value::as_str)
        .unwrap_or(default_id)
        .to_string();
    let anthropic = match shape {
        Some(f) => f == Format::AnthropicMessages,
        None => anthropic::import::recognizes(messages, obj),
    };
    if anthropic {
        let system = match obj.and_then(|o| o.get("system")) {
            Some(Value::Array(blocks)) => Some(anthropic::import::system_text(blocks)?),
            _ => system,
        };
        return Ok(ThreadInput {
            thread: anthropic::import::thread(messages, id)?,
            system,
            tools,
            format: Format::AnthropicMessages,
        });
    }
    Ok(ThreadInput {
        thread: openai_chat::import::thread(messages, id)?,
        system,
        tools,
        format: Format::OpenAiChat,
    })
}

/// Messages appended to `prefix`, read from JSON in a provider's shape (a
/// Chat `messages` array, Responses items, Anthropic messages, or a body
/// holding them) as [`thread_from_json`] reads a whole thread: ids go on
/// from the prefix's count (`m<n>`), a user message opens the turn after the
/// prefix's last, and a result may answer a call the prefix made. Paths in
/// errors are the suffix's own (`messages[0].tool_call_id`).
pub fn appended_from_json(
    v: &Value,
    prefix: &Thread,
    shape: Option<Format>,
) -> Result<Vec<std::sync::Arc<Message>>, ImportError> {
    let earlier = Earlier::of(prefix);
    let responses = responses_input(v, shape);
    let mut messages = if let Some(input) = responses {
        openai_responses::import::thread_in(v, input, "", earlier.builder())?
            .thread
            .messages
    } else {
        let (messages, obj) = match v {
            Value::Array(a) => (a, None),
            Value::Object(o) => match o.get("messages") {
                Some(Value::Array(a)) => (a, Some(o)),
                _ => return Err(err("messages", "must be an array")),
            },
            _ => return Err(err("$", "expected an array of messages")),
        };
        let anthropic = match shape {
            Some(f) => f == Format::AnthropicMessages,
            None => anthropic::import::recognizes(messages, obj),
        };
        if anthropic {
            anthropic::import::thread_in(messages, String::new(), earlier.builder())?.messages
        } else {
            openai_chat::import::thread_in(messages, String::new(), earlier.offset, &earlier.names)?
                .messages
        }
    };
    let mut turn = prefix.messages.last().map_or(0, |m| m.turn);
    for m in &mut messages {
        if m.role == Role::User {
            turn += 1;
        }
        std::sync::Arc::make_mut(m).turn = turn;
    }
    Ok(messages)
}

/// What a continued import needs of the thread so far.
struct Earlier {
    offset: usize,
    /// Every call's tool name by call id.
    names: HashMap<String, String>,
    /// Calls without a result yet, by call id.
    open: HashMap<String, String>,
}

impl Earlier {
    fn of(prefix: &Thread) -> Earlier {
        let (mut names, mut open) = (HashMap::new(), HashMap::new());
        for m in &prefix.messages {
            for c in &m.tool_calls {
                names.insert(c.id.clone(), c.name.clone());
                open.insert(c.id.clone(), c.name.clone());
            }
            if let Some(r) = &m.tool_result {
                open.remove(&r.tool_call_id);
            }
        }
        // Ids go on after the highest `m<n>` in use: a session started from
        // a canonical thread may hold ids of that form anywhere.
        let highest = prefix
            .messages
            .iter()
            .filter_map(|m| m.id.strip_prefix('m')?.parse::<usize>().ok())
            .max();
        Earlier {
            offset: prefix
                .messages
                .len()
                .max(highest.map_or(0, |n| n.saturating_add(1))),
            names,
            open,
        }
    }

    fn builder(&self) -> Builder {
        Builder {
            offset: self.offset,
            earlier_open: self.open.clone(),
            ..Builder::default()
        }
    }
}

/// Reads `flag` as the protected mark of every message of `v` (a message
/// array, or a body's `messages` or `input`), at the top level or under
/// `metadata`: its value moves to `protected`, and a `protected` key of the
/// caller's own is dropped, so the importer reads the configured mark
/// alone. Nothing to do for the default flag.
pub fn read_protected_flag_as(v: &mut Value, flag: &str) {
    use crate::reduce::DEFAULT_PROTECTED_FLAG as MARK;
    if flag == MARK {
        return;
    }
    fn rename(o: &mut serde_json::Map<String, Value>, flag: &str) {
        o.remove(MARK);
        if let Some(mark) = o.remove(flag) {
            o.insert(MARK.into(), mark);
        }
    }
    let lists: Vec<&mut Value> = match v {
        Value::Array(_) => vec![v],
        Value::Object(o) => o
            .iter_mut()
            .filter(|(k, _)| *k == "messages" || *k == "input")
            .map(|(_, x)| x)
            .collect(),
        _ => Vec::new(),
    };
    for list in lists {
        let Value::Array(items) = list else { continue };
        for item in items {
            let Value::Object(o) = item else { continue };
            rename(o, flag);
            if let Some(Value::Object(meta)) = o.get_mut("metadata") {
                rename(meta, flag);
            }
        }
    }
}

/// A field an import error names, with the configured mark's key where
/// the importer saw `protected`.
pub fn field_with_flag(field: String, flag: &str) -> String {
    match field.strip_suffix(".protected") {
        Some(head) if flag != crate::reduce::DEFAULT_PROTECTED_FLAG => format!("{head}.{flag}"),
        _ => field,
    }
}

/// What a JSON message says about itself beyond its provider's fields:
/// `"protected": true` (never compacted) and a `"label"` for reports, at the
/// top level or under `"metadata"`. compactd reads them and never sends them
/// on: a provider body is rendered from the thread, not copied.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Marks {
    pub(super) protected: bool,
    pub(super) label: Option<String>,
    /// `"created_at"` (or `"timestamp"`) when it is an RFC 3339 time.
    pub(super) created_at: Option<String>,
}

impl Marks {
    /// The marks of `item` (at `path`); a mark of the wrong type is an error.
    pub(super) fn of(item: &Value, path: &str) -> Result<Marks, ImportError> {
        let mut marks = Marks::default();
        let places = [
            (Some(item), path.to_string()),
            (item.get("metadata"), format!("{path}.metadata")),
        ];
        for (at, at_path) in places {
            let Some(Value::Object(o)) = at else { continue };
            match o.get("protected") {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => marks.protected |= *b,
                Some(_) => return Err(err(format!("{at_path}.protected"), "must be a boolean")),
            }
            match o.get("label") {
                None | Some(Value::Null) => {}
                Some(Value::String(l)) => marks.label = Some(l.clone()),
                Some(_) => return Err(err(format!("{at_path}.label"), "must be a string")),
            }
            // Logs carry times in many forms (epoch numbers, local
            // notations); only an RFC 3339 one is taken, the rest is the
            // log's own business, as every other extra key is.
            for key in ["created_at", "timestamp"] {
                if let Some(Value::String(t)) = o.get(key) {
                    if crate::model::is_rfc3339(t) {
                        marks.created_at = Some(t.clone());
                    }
                }
            }
        }
        Ok(marks)
    }

    /// Sets them on an imported message.
    pub(super) fn apply(&self, m: &mut Message) {
        m.metadata.protected |= self.protected;
        if self.label.is_some() {
            m.metadata.label.clone_from(&self.label);
        }
        if self.created_at.is_some() {
            m.metadata.created_at.clone_from(&self.created_at);
        }
    }
}

/// Builds imported messages with deterministic ids and pairs results with
/// the calls they answer (by position, as validation does).
#[derive(Default)]
pub(super) struct Builder {
    pub(super) messages: Vec<Message>,
    /// The marks of the JSON item being read: every message it makes has them.
    pub(super) marks: Marks,
    /// Open calls by id: (message index, call index).
    open: HashMap<String, (usize, usize)>,
    /// Messages before these (a continued import): ids start after them.
    offset: usize,
    /// Their calls still without a result, by id: the tool name.
    earlier_open: HashMap<String, String>,
}

impl Builder {
    pub(super) fn push(&mut self, role: Role, content: Content) -> &mut Message {
        let id = format!("m{}", self.offset + self.messages.len());
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
        self.marks.apply(&mut self.messages[last]);
        &mut self.messages[last]
    }

    pub(super) fn call(&mut self, msg: usize, call: ToolCall) {
        let j = self.messages[msg].tool_calls.len();
        self.open.insert(call.id.clone(), (msg, j));
        self.messages[msg].tool_calls.push(call);
    }

    /// A tool message answering `call_id`; `path` names the field on error.
    pub(super) fn result(
        &mut self,
        call_id: &str,
        content: ToolContent,
        failed: bool,
        path: &str,
    ) -> Result<(), ImportError> {
        let tool_name = match self.open.remove(call_id) {
            Some((m, j)) => self.messages[m].tool_calls[j].name.clone(),
            None => self.earlier_open.remove(call_id).ok_or_else(|| {
                err(
                    path,
                    format!("{call_id:?} answers no earlier call that is still open"),
                )
            })?,
        };
        let msg = self.push(Role::Tool, Content::default());
        msg.tool_result = Some(imported_result(tool_name, call_id, content, failed));
        Ok(())
    }

    /// Gives the last result pushed its provider form.
    pub(super) fn set_result_wire(&mut self, wire: Option<ContentPart>) {
        let Some(ContentPart::Provider(p)) = wire else {
            return;
        };
        if let Some(env) = self
            .messages
            .last_mut()
            .and_then(|m| m.tool_result.as_mut())
        {
            env.wire = Some(Box::new(p));
        }
    }

    pub(super) fn thread(self, id: String) -> Thread {
        let mut thread = Thread::new(id, self.messages);
        assign_turns_if_absent(&mut thread);
        thread
    }
}

/// Keys compactd reads as marks on a message or item ([`Marks`]) and never
/// sends on.
const MARK_KEYS: &[&str] = &["protected", "label", "metadata", "created_at", "timestamp"];

/// Whether object `v` has only keys in `modelled` (or marks, or null
/// values): what compactd's own rendering gives back as it came.
pub(super) fn only_keys(v: &Value, modelled: &[&str]) -> bool {
    v.as_object().is_some_and(|o| {
        o.iter().all(|(k, x)| {
            x.is_null() || modelled.contains(&k.as_str()) || MARK_KEYS.contains(&k.as_str())
        })
    })
}

/// `v`'s provider form when it holds more than `modelled` (or always):
/// what a call or result keeps to be sent back as it came.
pub(super) fn wire_unless(
    dialect: Dialect,
    kind: &str,
    v: &Value,
    modelled: &[&str],
) -> Option<Box<ProviderPart>> {
    if only_keys(v, modelled) {
        return None;
    }
    match carried(dialect, kind, v) {
        ContentPart::Provider(p) => Some(Box::new(p)),
        _ => None,
    }
}

/// `v`, without its marks, as a provider part of `kind`.
pub(super) fn carried(dialect: Dialect, kind: &str, v: &Value) -> ContentPart {
    match v {
        Value::Object(o) if MARK_KEYS.iter().any(|k| o.contains_key(*k)) => {
            let mut o = o.clone();
            for k in MARK_KEYS {
                o.remove(*k);
            }
            ContentPart::Provider(ProviderPart::new(dialect, kind, &Value::Object(o)))
        }
        _ => ContentPart::Provider(ProviderPart::new(dialect, kind, v)),
    }
}

/// A provider `compaction` (OpenAI's encrypted item, Anthropic's summary
/// block) stands for everything before it: that, and the compaction, are
/// never compacted again; compactd may compact what follows.
pub(super) fn protect_before_compaction(messages: &mut [Message]) {
    let last = messages.iter().rposition(|m| match &m.content {
        Content::Parts(parts) => parts
            .iter()
            .any(|p| matches!(p, ContentPart::Provider(p) if p.kind == "compaction")),
        Content::Text(_) => false,
    });
    if let Some(last) = last {
        for m in &mut messages[..=last] {
            m.metadata.protected = true;
        }
    }
}

/// Parts as content: one text part is plain text.
pub(super) fn content_of(parts: Vec<ContentPart>) -> Content {
    match parts.as_slice() {
        [] => Content::default(),
        [ContentPart::Text { text }] => Content::Text(text.clone()),
        _ => Content::Parts(parts),
    }
}

pub(super) fn str_field<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, ImportError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| err(format!("{path}.{key}"), "is required"))
}

/// Threads without turn numbers get them from user messages, so the tail and
/// retention (both counted in turns) work on logs that never had turns.
pub(super) fn assign_turns_if_absent(thread: &mut Thread) {
    if thread.messages.iter().all(|m| m.turn == 0) {
        let mut turn = 0;
        for m in &mut thread.messages {
            if m.role == Role::User {
                turn += 1;
            }
            std::sync::Arc::make_mut(m).turn = turn;
        }
    }
}

/// OpenAI-style call arguments: JSON text parsed (kept as a string when it
/// is not JSON), any other value as it is, none as `{}`.
pub(super) fn parse_arguments(v: Option<&Value>) -> Value {
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
pub(super) fn imported_result(
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
        wire: None,
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

pub(super) fn tool_schema(t: &Value) -> Result<ToolSchema, String> {
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
        assert_eq!(t.format, Format::OpenAiChat);
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
        assert_eq!(t.format, Format::AnthropicMessages);
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
        assert_eq!(t.format, Format::OpenAiResponses);
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
            Format::OpenAiResponses
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
    fn a_configured_mark_is_read_in_every_shape_and_protected_is_then_ignored() {
        let rule = "Never rebook.";
        for mut v in [
            json!([{"role": "user", "content": rule, "pinned": true}, {"role": "user", "content": "b", "protected": true}]),
            json!({"messages": [{"role": "user", "content": rule, "metadata": {"pinned": true}}, {"role": "user", "content": "b", "metadata": {"protected": true}}]}),
            json!({"input": [{"role": "user", "content": rule, "pinned": true}, {"role": "user", "content": "b", "protected": true}]}),
        ] {
            read_protected_flag_as(&mut v, "pinned");
            let t = thread_from_json(&v, "t").unwrap().thread;
            let pinned: Vec<bool> = t.messages.iter().map(|m| m.metadata.protected).collect();
            assert_eq!(pinned, [true, false], "{v}");
        }
        // The default leaves a body as it is.
        let mut v = json!([{"role": "user", "content": rule, "protected": true}]);
        read_protected_flag_as(&mut v, "protected");
        assert!(
            thread_from_json(&v, "t").unwrap().thread.messages[0]
                .metadata
                .protected
        );
        assert_eq!(
            field_with_flag("m[0].protected".into(), "pinned"),
            "m[0].pinned"
        );
        assert_eq!(
            field_with_flag("m[0].protected".into(), "protected"),
            "m[0].protected"
        );
        // A key messages already use cannot be the mark.
        let mut p = crate::reduce::Policy::default();
        for taken in ["", "role", "label", "metadata"] {
            p.protected_flag = taken.into();
            assert_eq!(p.validate().unwrap_err().field, "policy.protected_flag");
        }
    }

    #[test]
    fn protected_and_label_marks_are_read_in_every_shape() {
        let rule = "Never refund more than $500 without a manager.";
        let cases = [
            (
                json!([{"role": "user", "content": rule, "protected": true, "label": "Refund policy"},
                       {"role": "assistant", "content": "ok"}]),
                Some(Format::OpenAiChat),
            ),
            (
                json!({"messages": [{"role": "user", "content": rule, "metadata": {"protected": true, "label": "Refund policy"}},
                                    {"role": "assistant", "content": "ok"}]}),
                Some(Format::AnthropicMessages),
            ),
            (
                json!({"input": [{"role": "user", "content": rule, "protected": true, "label": "Refund policy"},
                                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}),
                Some(Format::OpenAiResponses),
            ),
        ];
        for (v, shape) in cases {
            let t = thread_from_json_as(&v, "t", shape).unwrap().thread;
            let first = &t.messages[0];
            assert!(first.metadata.protected, "{shape:?}");
            assert_eq!(first.metadata.label.as_deref(), Some("Refund policy"));
            assert!(!t.messages[1].metadata.protected, "{shape:?}");
        }
        let e = thread_from_json(
            &json!([{"role": "user", "content": "a", "protected": "yes"}]),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.path, "messages[0].protected");
        let e = thread_from_json_as(
            &json!({"input": [{"role": "user", "content": "a", "metadata": {"label": 3}}]}),
            "t",
            Some(Format::OpenAiResponses),
        )
        .unwrap_err();
        assert_eq!(e.path, "input[0].metadata.label");
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
        assert_eq!(t.format, Format::Neutral);
        assert_eq!(t.thread.id, "t1");
        assert_eq!(t.system.as_deref(), Some("sys"));
        let back = serde_json::to_value(&t.thread).unwrap();
        assert_eq!(back["messages"][0]["content"], "hi");
    }
}

#[cfg(test)]
mod continued {
    use super::*;

    /// Every log in tests/data, in its own shape, read a message at a time
    /// (Responses: a model response at a time) continuing what was read,
    /// is the thread read whole.
    #[test]
    fn a_continued_import_is_the_whole_import() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
        for (name, shape) in [
            ("swe_agent_marshmallow.json", Format::OpenAiChat),
            ("tau_bench_airline.json", Format::OpenAiChat),
            ("claude_code_rust_port.json", Format::OpenAiChat),
            (
                "claude_code_rust_port.anthropic.json",
                Format::AnthropicMessages,
            ),
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("read");
            let v: Value = serde_json::from_str(&text).expect("json");
            let whole = thread_from_json(&v, "t").expect("whole").thread;
            let items = match &v {
                Value::Array(a) => a.clone(),
                other => other["messages"].as_array().expect("messages").clone(),
            };
            let mut so_far = Thread {
                id: "t".into(),
                messages: Vec::new(),
            };
            for (i, item) in items.iter().enumerate() {
                let part = Value::Array(vec![item.clone()]);
                let more = appended_from_json(&part, &so_far, Some(shape))
                    .unwrap_or_else(|e| panic!("{name} item {i}: {e}"));
                so_far.messages.extend(more);
            }
            assert_eq!(so_far.messages.len(), whole.messages.len(), "{name}");
            for (a, b) in so_far.messages.iter().zip(&whole.messages) {
                assert_eq!(a, b, "{name}");
            }
        }
    }

    #[test]
    fn appended_ids_go_on_after_the_highest_m_n_in_use() {
        let v: Value = serde_json::from_str(
            r#"{"id": "t", "messages": [
                {"id": "m7", "role": "user", "content": "first"},
                {"id": "intro", "role": "assistant", "content": "second"}
            ]}"#,
        )
        .expect("json");
        let prefix = thread_from_json(&v, "t").expect("canonical").thread;
        let more: Value =
            serde_json::from_str(r#"[{"role": "user", "content": "third"}]"#).expect("json");
        let appended = appended_from_json(&more, &prefix, None).expect("appended");
        assert_eq!(appended[0].id, "m8");
        assert_eq!(appended[0].turn, prefix.messages[1].turn + 1);
    }
}
