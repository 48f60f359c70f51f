//! What a compaction reports: per reducer, the budget, per tier, and the
//! tokens of each record.

use serde::{Deserialize, Serialize};

use crate::model::CompactionPlan;

use super::*;

/// Tokens freed by one reducer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReducerReport {
    /// Reducer name.
    pub name: String,
    /// Tokens freed (over all rounds).
    pub tokens_freed: u32,
}

/// The budget as resolved for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The model's input limit.
    pub max_input_tokens: u32,
    /// Ceiling for the request without rehydrated content.
    pub hard_limit: u32,
    /// Compaction starts above this.
    pub trigger: u32,
    /// Compaction aims for this.
    pub target: u32,
    /// System prompt, tools, the workspace slot and framing.
    pub fixed_tokens: u32,
    /// Of `fixed_tokens`: the system prompt.
    #[serde(default)]
    pub system_tokens: u32,
    /// Of `fixed_tokens`: the tool schemas (the rest is the workspace and
    /// framing).
    #[serde(default)]
    pub tool_tokens: u32,
    /// Tool results against their cap, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<TierReport>,
    /// Of `fixed_tokens`: the workspace slot (left out of documents when
    /// there is none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub workspace_tokens: u32,
    /// What the counts are based on: the tokenizer, the estimate, or the
    /// estimate calibrated by the provider's reports.
    #[serde(default)]
    pub counting: crate::tokens::calibration::Counting,
}

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What compaction did, for the caller and the audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Request tokens with no plan.
    pub tokens_before: u32,
    /// Request tokens with the new plan (an upper bound until artifacts are bound).
    pub tokens_after: u32,
    /// The budget.
    pub budget: BudgetReport,
    /// Whether the trigger was crossed (the total's or a tier cap's).
    pub triggered: bool,
    /// Whether a tier over its cap triggered compaction.
    #[serde(default)]
    pub tier_triggered: bool,
    /// Keep counts that were finally used.
    pub keep_recent_turns: u32,
    /// Keep counts that were finally used.
    pub keep_tool_io_pairs: u32,
    /// Per reducer, in pipeline order.
    pub per_reducer: Vec<ReducerReport>,
    /// Normalization and fallback warnings.
    pub warnings: Vec<String>,
    /// Tokens of the developer messages, as sent (part of the messages'
    /// share; the event schema reports them apart from the system prompt).
    #[serde(default)]
    pub developer_tokens: u32,
    /// Messages never compacted this call (the protected flag, a never-prune
    /// role, or a call still waiting for its result).
    #[serde(default)]
    pub pinned_messages: u32,
    /// Their labels, for those that carry one, in thread order, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_labels: Vec<String>,
    /// Per plan record: its tokens verbatim and as the plan renders it, for
    /// the lifecycle events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<RecordTokens>,
}

/// A tier against its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierReport {
    /// Above this, the tier is reduced.
    pub cap: u32,
    /// What it is reduced to once over the cap.
    pub target: u32,
    /// Its tokens with the previous plan (none: verbatim) applied.
    pub tokens_before: u32,
    /// Its tokens with the new plan.
    pub tokens_after: u32,
}

/// One plan record's tokens: what its messages cost verbatim and what they
/// cost as the plan renders them (an upper bound until artifact ids are
/// bound). Keyed by the record's action and first message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordTokens {
    /// What the record does.
    pub action: crate::model::ActionKind,
    /// Its first message.
    pub first_message_id: String,
    /// Its messages' tokens verbatim.
    pub tokens_before: u32,
    /// Its messages' tokens as rendered under the plan.
    pub tokens_after: u32,
    /// Its messages' tokens under the plan the call started from (the
    /// previous one): `tokens_before` for messages that were verbatim, what
    /// an earlier summary, stub or pointer took for those it absorbs.
    #[serde(default)]
    pub tokens_previous: u32,
}

impl RecordTokens {
    /// What the record freed beyond the plan before it: summed over every
    /// compaction's new records, each token is counted once, however often
    /// its span is summarized again.
    pub fn tokens_freed(&self) -> u32 {
        self.tokens_previous.saturating_sub(self.tokens_after)
    }
}

impl Report {
    /// How much of the target the compacted request uses (1.0 = exactly the
    /// target): a compaction that lands far below it threw away context it
    /// had room for.
    pub fn target_use(&self) -> f64 {
        f64::from(self.tokens_after) / f64::from(self.budget.target.max(1))
    }
}

/// [`RecordTokens`] of every record of `plan`, from the projection's counts
/// and each message's cost when the call started.
pub(super) fn record_tokens(
    plan: &CompactionPlan,
    p: &Projection<'_>,
    start_costs: &[u32],
) -> Vec<RecordTokens> {
    use crate::model::ActionKind;
    let spans = plan
        .externalizations
        .iter()
        .map(|r| (ActionKind::Externalize, &r.span))
        .chain(
            plan.summarizations
                .iter()
                .map(|r| (ActionKind::Summarize, &r.span)),
        )
        .chain(plan.clearings.iter().map(|r| (ActionKind::Clear, &r.span)))
        .chain(plan.drops.iter().map(|r| (ActionKind::Drop, &r.span)));
    spans
        .map(|(action, span)| {
            let (mut before, mut after, mut previous) = (0u32, 0u32, 0u32);
            for i in span.message_ids.iter().filter_map(|id| p.position(id)) {
                before = before.saturating_add(p.verbatim_cost(i));
                after = after.saturating_add(p.cost(i));
                previous = previous.saturating_add(start_costs[i]);
            }
            RecordTokens {
                action,
                first_message_id: span.start_message_id().to_string(),
                tokens_before: before,
                tokens_after: after,
                tokens_previous: previous,
            }
        })
        .collect()
}
