//! `code-delta`: for coding agents. A file read whose path was read again
//! or edited later is stale: the agent works from the newer content, and
//! the old copy only costs tokens (and can mislead). Such older reads are
//! cleared to a pointer at the latest read of the path.
//!
//! A read is a result of one of the `read_tools` (default `read_file`,
//! `view_file`, `open_file`, `cat`); an edit is a call of one of the
//! `edit_tools` (default `write_file`, `edit_file`, `str_replace`,
//! `apply_patch`, `create_file`). The path is the call's `path`,
//! `file_path`, `file`, `filename` or `target_file` argument. Failed reads
//! are left alone: the error is what the agent needs.
//!
//! Configuration (JSON): `{"read_tools": [...], "edit_tools": [...]}`.

use std::collections::HashMap;

use compactd_plugin_sdk::{export_plugin, pb, Strategy};
use serde_json::Value;

/// The plugin.
#[derive(Debug)]
pub struct CodeDelta {
    read_tools: Vec<String>,
    edit_tools: Vec<String>,
}

const PATH_KEYS: [&str; 5] = ["path", "file_path", "file", "filename", "target_file"];

fn list(v: &Value, key: &str, default: &[&str]) -> Result<Vec<String>, String> {
    match v.get(key) {
        None => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or(format!("config: {key} must be strings"))
            })
            .collect(),
        Some(_) => Err(format!("config: {key} must be a list")),
    }
}

/// The path a call names, if any.
fn path_of(arguments_json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(arguments_json).ok()?;
    PATH_KEYS
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(|p| p.trim_start_matches("./").to_string())
}

impl Strategy for CodeDelta {
    const NAME: &'static str = "code-delta";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn create(config: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
        Ok(CodeDelta {
            read_tools: list(
                &v,
                "read_tools",
                &["read_file", "view_file", "open_file", "cat"],
            )?,
            edit_tools: list(
                &v,
                "edit_tools",
                &[
                    "write_file",
                    "edit_file",
                    "str_replace",
                    "apply_patch",
                    "create_file",
                ],
            )?,
        })
    }

    fn analyze(&self, req: &pb::AnalyzeRequest) -> Result<pb::AnalyzeResponse, String> {
        let Some(thread) = &req.thread else {
            return Ok(pb::AnalyzeResponse::default());
        };
        // Call id → (tool, path), from every assistant message.
        let mut calls: HashMap<&str, (&str, Option<String>)> = HashMap::new();
        // Path → message index of the last touch (read result or edit call).
        let mut last_touch: HashMap<String, (usize, bool)> = HashMap::new();
        for (i, m) in thread.messages.iter().enumerate() {
            for c in &m.tool_calls {
                let path = path_of(&c.arguments_json);
                if self.edit_tools.iter().any(|t| t == &c.name) {
                    if let Some(p) = &path {
                        last_touch.insert(p.clone(), (i, false));
                    }
                }
                calls.insert(c.id.as_str(), (c.name.as_str(), path));
            }
            if let Some(env) = &m.tool_result {
                if let Some((tool, Some(path))) = calls.get(env.tool_call_id.as_str()) {
                    if self.read_tools.iter().any(|t| t == tool)
                        && env.outcome != pb::api::Outcome::Failure as i32
                    {
                        last_touch.insert(path.clone(), (i, true));
                    }
                }
            }
        }
        let mut proposals = Vec::new();
        for (i, m) in thread.messages.iter().enumerate() {
            let Some(env) = &m.tool_result else { continue };
            if req.states.get(i).copied() != Some(pb::MessageState::Free as i32)
                || env.outcome == pb::api::Outcome::Failure as i32
            {
                continue;
            }
            let Some((tool, Some(path))) = calls.get(env.tool_call_id.as_str()) else {
                continue;
            };
            if !self.read_tools.iter().any(|t| t == tool) {
                continue;
            }
            let Some(&(last, is_read)) = last_touch.get(path) else {
                continue;
            };
            if last <= i {
                continue;
            }
            let later = &thread.messages[last];
            let replacement = if is_read {
                format!(
                    "[stale read of {path}: read again in turn {} (message {}); that copy is current]",
                    later.turn, later.id
                )
            } else {
                format!(
                    "[stale read of {path}: edited in turn {} (message {}); read it again for the current content]",
                    later.turn, later.id
                )
            };
            proposals.push(
                pb::Proposal::clear(m.id.clone(), replacement)
                    .preserving("path", Value::String(path.clone()).to_string())
                    .preserving(
                        "latest_message_id",
                        Value::String(later.id.clone()).to_string(),
                    )
                    .because(if is_read {
                        "superseded by a later read"
                    } else {
                        "superseded by a later edit"
                    }),
            );
        }
        Ok(pb::AnalyzeResponse { proposals })
    }
}

export_plugin!(CodeDelta);

#[cfg(test)]
mod tests {
    use super::*;
    use compactd_plugin_sdk::pb::api;

    fn call(id: &str, tool: &str, path: &str, turn: u32) -> api::Message {
        api::Message {
            id: format!("a-{id}"),
            role: api::Role::Assistant as i32,
            tool_calls: vec![api::ToolCall {
                wire: None,
                id: id.into(),
                name: tool.into(),
                arguments_json: format!("{{\"path\": \"{path}\"}}"),
            }],
            turn,
            ..Default::default()
        }
    }

    fn result(id: &str, tool: &str, turn: u32, outcome: api::Outcome) -> api::Message {
        api::Message {
            id: format!("r-{id}"),
            role: api::Role::Tool as i32,
            tool_result: Some(api::ToolResultEnvelope {
                tool_name: tool.into(),
                tool_call_id: id.into(),
                outcome: outcome as i32,
                content: Some(api::tool_result_envelope::Content::ContentText(
                    "fn main() {}\n".repeat(50),
                )),
                ..Default::default()
            }),
            turn,
            ..Default::default()
        }
    }

    #[test]
    fn older_reads_point_at_the_latest_read_or_edit() {
        let ok = api::Outcome::Success;
        let messages = vec![
            call("1", "read_file", "src/main.rs", 1),
            result("1", "read_file", 1, ok),
            call("2", "read_file", "src/lib.rs", 2),
            result("2", "read_file", 2, ok),
            call("3", "read_file", "./src/main.rs", 3),
            result("3", "read_file", 3, ok),
            call("4", "edit_file", "src/lib.rs", 4),
            result("4", "edit_file", 4, ok),
            call("5", "read_file", "src/util.rs", 5),
            result("5", "read_file", 5, api::Outcome::Failure),
            call("6", "read_file", "src/util.rs", 6),
            result("6", "read_file", 6, ok),
        ];
        let n = messages.len();
        let req = pb::AnalyzeRequest {
            thread: Some(api::Thread {
                id: "t".into(),
                messages,
            }),
            states: vec![pb::MessageState::Free as i32; n],
            message_tokens: vec![100; n],
            ..Default::default()
        };
        let out = compactd_plugin_sdk::testing::run::<CodeDelta>("{}", &req).expect("runs");
        let cleared: Vec<(String, String)> = out
            .proposals
            .iter()
            .filter_map(|p| match &p.action {
                Some(pb::proposal::Action::Clear(c)) => {
                    Some((c.message_id.clone(), c.replacement.clone()))
                }
                _ => None,
            })
            .collect();
        let ids: Vec<&str> = cleared.iter().map(|(id, _)| id.as_str()).collect();
        // main.rs read again, lib.rs edited; the failed read and the
        // latest reads stay.
        assert_eq!(ids, vec!["r-1", "r-2"]);
        assert!(cleared[0].1.contains("read again in turn 3 (message r-3)"));
        assert!(cleared[1].1.contains("edited in turn 4 (message a-4)"));
    }
}
