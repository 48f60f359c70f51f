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
