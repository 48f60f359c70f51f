//! The neutral format: the rendered request itself, for callers with their
//! own adapter. Counted for the provider the model implies (see
//! `Format::target`); its only check is the tool-call pairing every
//! provider requires.

use crate::model::Role;
use crate::render::Request;

/// The neutral form's own rule: every tool message answers a call of the
/// assistant message before it (results directly follow their call), and
/// no call of that message is left unanswered before the next other message.
pub fn check(request: &Request) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    for (i, m) in request.messages.iter().enumerate() {
        if m.role == Role::Tool {
            let id = m.tool_call_id.as_deref().unwrap_or_default();
            match open.iter().position(|o| *o == id) {
                Some(k) => {
                    open.remove(k);
                }
                None => {
                    return Err(format!(
                        "messages[{i}] answers {id:?}, which the preceding assistant message did not call"
                    ))
                }
            }
            continue;
        }
        if let Some(id) = open.first() {
            return Err(format!(
                "tool call {id:?} is unanswered before messages[{i}]"
            ));
        }
        open = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
    }
    match open.first() {
        Some(id) => Err(format!("tool call {id:?} is never answered")),
        None => Ok(()),
    }
}

/// Reading the canonical thread: `{"id", "messages": [canonical messages],
/// "system"?, "tools"?}`.
pub(super) mod import {
    use serde_json::{Map, Value};

    use crate::model::{infer_outcome, Message, Role, Thread};
    use crate::provider::import::{assign_turns_if_absent, err, ImportError};

    /// Every message has an id and none a `tool_call_id` (which only Chat
    /// Completions logs carry).
    pub(in crate::provider) fn recognizes(messages: &[Value]) -> bool {
        !messages.is_empty()
            && messages
                .iter()
                .all(|m| m.get("id").is_some() && m.get("tool_call_id").is_none())
    }

    pub(in crate::provider) fn thread(
        o: &Map<String, Value>,
        messages: &[Value],
    ) -> Result<Thread, ImportError> {
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
        let mut thread = Thread::new(id, parsed);
        assign_turns_if_absent(&mut thread);
        Ok(thread)
    }
}
