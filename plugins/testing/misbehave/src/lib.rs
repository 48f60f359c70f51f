//! Misbehaves on purpose, as configured by `{"mode": ...}`, so the host's
//! fault handling can be tested: `panic`, `sleep` (past any timeout),
//! `split_pair` (drops a tool call without its result), `touch_tail`
//! (clears a tail message), `unknown_id`, `fail` (an error status), and
//! `ok` (a valid clear of the oldest free tool result), `externalize` (a
//! valid externalization of the oldest free tool result, estimated to free
//! `estimate` tokens, 0 when not configured; with `fact` and `hint`, the
//! pointer's summary and hint), `externalize_tail` (of a tail tool result)
//! and `externalize_call` (of a free assistant message carrying tool
//! calls). Undecodable answers
//! come from the C example's `garbage` configuration, which the SDK's typed
//! answers cannot produce.

use compactd_plugin_sdk::{export_plugin, pb, Strategy};

/// The plugin.
#[derive(Debug)]
pub struct Misbehave {
    mode: String,
    estimate: u32,
    fact: Option<String>,
    hint: String,
}

fn clear(id: &str) -> pb::Proposal {
    pb::Proposal::clear(id, "[cleared by misbehave]").because("test")
}

impl Strategy for Misbehave {
    const NAME: &'static str = "misbehave";
    const VERSION: &'static str = "0.0.1";

    fn create(config: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(config).map_err(|e| e.to_string())?;
        Ok(Misbehave {
            mode: v["mode"].as_str().unwrap_or("ok").to_string(),
            estimate: v["estimate"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            fact: v["fact"].as_str().map(str::to_string),
            hint: v["hint"].as_str().unwrap_or("").to_string(),
        })
    }

    fn analyze(&self, req: &pb::AnalyzeRequest) -> Result<pb::AnalyzeResponse, String> {
        let thread = req.thread.clone().unwrap_or_default();
        let state = |i: usize| req.states.get(i).copied().unwrap_or(0);
        let free = pb::MessageState::Free as i32;
        let find = |want: i32, tool: bool| {
            thread
                .messages
                .iter()
                .enumerate()
                .find(|(i, m)| state(*i) == want && (m.tool_result.is_some() == tool))
                .map(|(_, m)| m.id.clone())
        };
        let proposals = match self.mode.as_str() {
            "panic" => panic!("misbehave was told to panic"),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(5));
                Vec::new()
            }
            "fail" => return Err("misbehave was told to fail".into()),
            "unknown_id" => vec![clear("no-such-message")],
            "touch_tail" => {
                let id = find(pb::MessageState::Tail as i32, true).ok_or("no tail tool result")?;
                vec![clear(&id)]
            }
            "split_pair" => {
                // The call without its result.
                let call = thread
                    .messages
                    .iter()
                    .enumerate()
                    .find(|(i, m)| state(*i) == free && !m.tool_calls.is_empty())
                    .map(|(_, m)| m.id.clone())
                    .ok_or("no free call")?;
                vec![pb::Proposal::drop_messages(vec![call]).because("test")]
            }
            "externalize" => {
                let id = find(free, true).ok_or("no free tool result")?;
                let summary = self.fact.as_ref().map(|f| pb::api::StructuredSummary {
                    facts: vec![f.clone()],
                    ..Default::default()
                });
                vec![pb::Proposal::externalize(id)
                    .with_pointer(summary, self.hint.clone())
                    .because("test")
                    .freeing(self.estimate)]
            }
            "externalize_tail" => {
                let id = find(pb::MessageState::Tail as i32, true).ok_or("no tail tool result")?;
                vec![pb::Proposal::externalize(id).because("test")]
            }
            "externalize_call" => {
                let call = thread
                    .messages
                    .iter()
                    .enumerate()
                    .find(|(i, m)| state(*i) == free && !m.tool_calls.is_empty())
                    .map(|(_, m)| m.id.clone())
                    .ok_or("no free call")?;
                vec![pb::Proposal::externalize(call).because("test")]
            }
            _ => {
                let id = find(free, true).ok_or("no free tool result")?;
                vec![clear(&id)]
            }
        };
        Ok(pb::AnalyzeResponse { proposals })
    }
}

export_plugin!(Misbehave);
