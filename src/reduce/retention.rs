//! Tool-result retention: old tool output is the fattest target and the first cut.
//! Age-based (keep K turns) and count-based (keep the last N of this tool),
//! per tool with a global default. An expired result is stubbed, never
//! removed: the call stays paired and the model sees that it happened, so it
//! does not re-issue it.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::model::{error_message, ClearReason, Durability, Outcome, ToolResultEnvelope};

use super::{PipelineState, Projection, Reducer, TokenBudget};
use crate::reduce::CompactError;

/// Stubs tool results past their retention.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention;

impl Reducer for Retention {
    fn name(&self) -> &'static str {
        "retention"
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        let policy = state.policy;
        // Rank of each result among its tool's results, counted from the newest.
        let mut rank: HashMap<usize, u32> = HashMap::new();
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for i in (0..p.len()).rev() {
            if let Some(env) = &p.message(i).tool_result {
                let c = seen.entry(env.tool_name.as_str()).or_insert(0);
                rank.insert(i, *c);
                *c += 1;
            }
        }
        // A tool's own retention entry is a rule: when compaction runs it
        // applies wholly. The default is a reason to evict, not a duty: expired
        // results go oldest first and only as far as the target needs (the
        // rest of the budget is better spent than on stubs), and what was
        // stubbed stays stubbed, since later turns extend the plan.
        for i in 0..p.len() {
            let m = p.message(i);
            let Some(env) = &m.tool_result else { continue };
            if p.is_locked(i) || !p.is_included(i) || env.outcome == Outcome::Failure {
                continue;
            }
            let durability = policy.durability_of(env);
            // Non-replayable results cannot be fetched again; they go to the
            // artifact store instead of being stubbed.
            if durability == Durability::NonReplayable {
                continue;
            }
            let explicit = policy.retention.contains_key(&env.tool_name);
            if !explicit && p.total() <= budget.target() {
                continue;
            }
            let rule = policy.retention_for(&env.tool_name);
            if rule.never_evict {
                continue;
            }
            let age = state.current_turn.saturating_sub(m.turn);
            let too_old = rule.keep_turns.is_some_and(|k| age >= k);
            let too_many = rule
                .keep_last
                .is_some_and(|k| rank.get(&i).copied().unwrap_or(0) >= k);
            if !(too_old || too_many) {
                continue;
            }
            // The stub quotes the output: built from the redacted result.
            let env = state.memo.redacted(state.redactor, env);
            let env = env.as_ref();
            let mut preserved = stub_preserved(env);
            let mut text = format!(
                "[result expired] {}: {}",
                env.tool_name,
                env.outcome.as_str()
            );
            // A partial result's error outlives its output.
            if let Some(error) = push_stub_details(env, state.memo, &mut text) {
                preserved.insert("error_message".into(), Value::String(error));
            }
            let before = p.cost(i);
            p.clear(i, ClearReason::Expired, text, preserved);
            if p.cost(i) >= before {
                p.undo_last_clear(i);
            }
        }
        Ok(())
    }
}

/// Values a stub keeps from the output it replaces.
const STUB_REFERENCES: usize = 4;

/// Appends what every stub of a result keeps: the error it reports (when
/// it did not fully succeed, or when a line of it says so: a deploy log
/// whose last lines fail is often sent as a success), its key fields, and
/// the few values that stand out in it (see [`crate::summarize::salient`]).
/// Returns the error.
pub(super) fn push_stub_details(
    env: &ToolResultEnvelope,
    memo: &super::Memo,
    out: &mut String,
) -> Option<String> {
    let text = env.content.to_text();
    let salient = crate::summarize::Scans::salient(memo, &text, STUB_REFERENCES);
    let error = if env.outcome == Outcome::Success {
        salient.error
    } else {
        error_message(&env.content).or(salient.error)
    };
    if let Some(error) = &error {
        out.push_str("\nError: ");
        out.push_str(error);
    }
    env.push_key_data(out);
    let refs: Vec<&str> = salient
        .references
        .iter()
        .map(String::as_str)
        .filter(|r| !out.contains(r))
        .collect();
    if !refs.is_empty() {
        out.push_str("\nRefs: ");
        out.push_str(&refs.join(", "));
    }
    error
}

/// What every stub's record preserves: the tool, the outcome, the key fields.
pub(super) fn stub_preserved(env: &ToolResultEnvelope) -> BTreeMap<String, Value> {
    let mut preserved = BTreeMap::new();
    preserved.insert("tool_name".into(), Value::String(env.tool_name.clone()));
    preserved.insert("outcome".into(), Value::String(env.outcome.as_str().into()));
    if !env.key_fields.is_empty() {
        preserved.insert(
            "key_fields".into(),
            Value::Object(env.key_fields.clone().into_iter().collect()),
        );
    }
    preserved
}
