//! Clearing by durability. EPHEMERAL results are cleared;
//! ANCHORING ones keep their key fields and a one-line gist; REPLAYABLE ones
//! are cleared only when their determinism metadata shows the source is
//! unchanged (otherwise they are treated as NON_REPLAYABLE); NON_REPLAYABLE
//! results and failures are never cleared.

use serde_json::Value;

use crate::model::{ClearReason, Durability, Outcome, ToolResultEnvelope};

use super::{CompactError, PipelineState, Projection, Reducer, TokenBudget};

/// Clears tool results by durability, oldest first, until the target is met.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clear;

const GIST_CHARS: usize = 200;

impl Reducer for Clear {
    fn name(&self) -> &'static str {
        "clear"
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        for i in 0..p.len() {
            if p.total() <= budget.target() {
                break;
            }
            if p.is_locked(i) || !p.is_included(i) {
                continue;
            }
            let Some(env) = &p.message(i).tool_result else {
                continue;
            };
            if env.outcome == Outcome::Failure {
                continue;
            }
            let durability = state.policy.durability_of(env);
            let gist = match durability {
                Durability::NonReplayable => continue,
                Durability::Replayable if !state.replay_verified(p, i) => continue,
                Durability::Ephemeral | Durability::Replayable => false,
                Durability::Anchoring => true,
            };
            // The stub quotes the output (key data, refs, a gist): built
            // from the redacted result, where a value still has the label
            // that marks it as a secret.
            let env = state.memo.redacted(state.redactor, env);
            let env = env.as_ref();
            let mut text = placeholder(env, state.memo, gist);
            if durability == Durability::Replayable {
                text.push_str(&format!(
                    "\n(cleared: the source is unchanged; call {} again with the same arguments to see it)",
                    env.tool_name
                ));
            }
            let mut preserved = super::retention::stub_preserved(env);
            preserved.insert(
                "durability".into(),
                Value::String(durability.as_str().into()),
            );
            let before = p.cost(i);
            p.clear(i, ClearReason::Durability, text, preserved);
            if p.cost(i) >= before {
                p.undo_last_clear(i);
            }
        }
        Ok(())
    }
}

/// The stub an anchoring result is cleared to, with what its record
/// preserves (for content given back to the prompt in its cheaper form).
pub(super) fn anchoring_stub(
    env: &ToolResultEnvelope,
    memo: &super::Memo,
    redactor: &crate::redact::Redactor,
) -> (String, std::collections::BTreeMap<String, Value>) {
    // Built from the redacted output, as every stub is.
    let redacted;
    let env = match memo.redacted(redactor, env) {
        std::borrow::Cow::Borrowed(e) => e,
        std::borrow::Cow::Owned(e) => {
            redacted = e;
            &redacted
        }
    };
    let mut preserved = super::retention::stub_preserved(env);
    preserved.insert(
        "durability".into(),
        Value::String(Durability::Anchoring.as_str().into()),
    );
    (placeholder(env, memo, true), preserved)
}

/// `[tool: outcome]`, the key fields, and for anchoring results a one-line gist.
fn placeholder(env: &ToolResultEnvelope, memo: &super::Memo, gist: bool) -> String {
    let mut out = format!("[{}: {}]", env.tool_name, env.outcome.as_str());
    super::retention::push_stub_details(env, memo, &mut out);
    if gist {
        let text = env.content.to_text();
        let line = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        if !line.is_empty() {
            let cut: String = line.chars().take(GIST_CHARS).collect();
            out.push_str("\nGist: ");
            out.push_str(&cut);
            if cut.len() < line.len() {
                out.push('…');
            }
        }
    }
    out
}
