//! Tool-output post-processing: keep the essentials of large
//! search results, file reads, query results and API responses. Errors and
//! small results are never touched; non-replayable results go to the
//! artifact store instead, so nothing that cannot be fetched again is lost.

use crate::model::{ClearReason, Durability};
use crate::summarize::{compress_tool_output, CompressRules};

use super::{CompactError, PipelineState, Projection, Reducer, TokenBudget};

/// Compresses large tool outputs, oldest first, until the target is met.
#[derive(Debug, Clone, Default)]
pub struct Compress {
    /// Thresholds of the post-processing rules.
    pub rules: CompressRules,
}

impl Reducer for Compress {
    fn name(&self) -> &'static str {
        "compress"
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
            if !state.tool_result_reducible(p, i) || !p.is_included(i) {
                continue;
            }
            let Some((text, preserved)) = compressed_form(p, state, i, &self.rules) else {
                continue;
            };
            let before = p.cost(i);
            p.clear(i, ClearReason::Compressed, text, preserved);
            if p.cost(i) >= before {
                p.undo_last_clear(i);
            }
        }
        Ok(())
    }
}

/// The compressed form of tool result `i` (redacted, as it will render) and
/// what its record preserves; `None` when no rule applies or the result may
/// not be compressed (a failure, non-replayable). Memoized.
pub(super) fn compressed_form(
    p: &Projection<'_>,
    state: &PipelineState<'_>,
    i: usize,
    rules: &CompressRules,
) -> Option<(
    String,
    std::collections::BTreeMap<String, serde_json::Value>,
)> {
    let m = p.message(i);
    let env = m.tool_result.as_ref()?;
    let durability = state.policy.durability_of(env);
    if durability == Durability::NonReplayable {
        return None;
    }
    let tokens = p.counter.text(&env.content.to_text()) as usize;
    let args = state.call_arguments(i);
    let mut key = state.memo.key();
    key.part(b"compress-v1")
        .part(format!("{rules:?}").as_bytes())
        .part(&crate::model::message_digest(m).to_le_bytes())
        .part(&(tokens as u64).to_le_bytes())
        .part(args.map(|a| a.to_string()).unwrap_or_default().as_bytes());
    let mut c = state.memo.compressed(key.finish(), || {
        compress_tool_output(env, args, tokens, rules)
    })?;
    // What replaces the output is kept in the plan: redacted first, so its
    // cost is counted as it will render.
    state
        .redactor
        .redact_compressed(&mut c.text, &mut c.preserved);
    Some((c.text, c.preserved))
}
