//! The audit record returned with every rendered request: which plan, which
//! format versions and what was evicted, so an operator can tell whether
//! something was compacted out or the model ignored it.

use serde::{Deserialize, Serialize};

use super::plan::{ActionKind, ClearReason, CompactionPlan};

/// How a rendered request came about.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Version of the plan rendered.
    pub plan_version: u64,
    /// Fingerprint of the plan's inputs.
    pub plan_fingerprint: String,
    /// Plan format version.
    pub plan_format_version: String,
    /// Structured summary schema version.
    pub summary_schema_version: String,
    /// Summary rendering version.
    pub summary_render_version: String,
    /// Prompt rendering version.
    pub render_format_version: String,
    /// Summarizer that built the summaries.
    pub summarizer_id: String,
    /// Tokenizer the counts are in.
    pub tokenizer: String,
    /// Messages affected, by action.
    pub evictions: EvictionCounts,
    /// Artifacts the plan refers to.
    pub artifact_ids: Vec<String>,
    /// Artifacts injected into this request.
    pub rehydrated_artifact_ids: Vec<String>,
    /// What rendering changed to satisfy the provider (results moved next
    /// to their call, pending calls left out, tool ids rewritten).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Strategies beyond the built-in reducers whose decisions the plan
    /// applies, sorted: plugins (`name@version`) and LLM summarizers
    /// (`llm:model:style@hash`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strategies: Vec<String>,
    /// Who asked for this request (the credential's requester).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requester: String,
    /// Turns since compaction last ran (`None`: the plan evicts nothing, or
    /// predates the count): how long a summary has stood in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns_since_compaction: Option<u32>,
    /// Every record of the plan: what left the prompt, why, by which
    /// strategy, and the artifact that holds the original.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicted: Vec<Eviction>,
}

/// One plan record as the audit shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    /// What happened to the messages (never `Include`).
    pub action: ActionKind,
    /// First message of the span.
    pub first_message_id: String,
    /// Last message of the span.
    pub last_message_id: String,
    /// Messages in the span.
    pub message_count: u32,
    /// Why, in words (no content).
    pub reason: String,
    /// Which strategy decided it (a reducer, a summarizer id, a plugin).
    pub strategy: String,
    /// The artifact holding the original, if any: what `read_artifact` returns.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub artifact_id: String,
}

impl Eviction {
    /// The records of `plan`, in plan order: externalized, summarized,
    /// cleared, dropped. `extractive_id` names summaries without a summarizer id.
    pub fn of(plan: &CompactionPlan, extractive_id: &str) -> Vec<Eviction> {
        fn one(
            action: ActionKind,
            span: &super::plan::SpanReference,
            reason: String,
            strategy: &str,
            artifact: Option<&String>,
        ) -> Eviction {
            Eviction {
                action,
                first_message_id: span.start_message_id().to_string(),
                last_message_id: span.end_message_id().to_string(),
                message_count: u32::try_from(span.message_ids.len()).unwrap_or(u32::MAX),
                reason,
                strategy: strategy.to_string(),
                artifact_id: artifact.cloned().unwrap_or_default(),
            }
        }
        let mut out = Vec::new();
        for r in &plan.externalizations {
            out.push(one(
                ActionKind::Externalize,
                &r.span,
                format!(
                    "moved to the artifact store ({} tokens, {})",
                    r.content_tokens,
                    r.sensitivity.as_str()
                ),
                r.decided_by(),
                Some(&r.artifact_id),
            ));
        }
        for r in &plan.summarizations {
            out.push(one(
                ActionKind::Summarize,
                &r.span,
                "older turns summarized to fit the target".into(),
                r.decided_by(extractive_id),
                r.archive_artifact_id.as_ref(),
            ));
        }
        for r in &plan.clearings {
            let reason = match r.reason {
                ClearReason::Expired => "tool-result retention expired it",
                ClearReason::Durability => "its durability allows clearing",
                ClearReason::Compressed => "compressed to its essentials",
                ClearReason::Plugin => "a plugin cleared it",
                ClearReason::Excerpt => "the last user message's middle left out to fit",
            };
            out.push(one(
                ActionKind::Clear,
                &r.span,
                reason.into(),
                r.decided_by(),
                r.archive_artifact_id.as_ref(),
            ));
        }
        for r in &plan.drops {
            out.push(one(
                ActionKind::Drop,
                &r.span,
                r.reason.clone(),
                r.decided_by(),
                r.archive_artifact_id.as_ref(),
            ));
        }
        out
    }
}

impl AuditRecord {
    /// The strategies `plan` records (see [`AuditRecord::strategies`]).
    pub fn strategies_of(plan: &super::CompactionPlan) -> Vec<String> {
        let mut out = std::collections::BTreeSet::new();
        for c in &plan.clearings {
            if !c.strategy.is_empty() {
                out.insert(c.strategy.clone());
            }
        }
        for e in &plan.externalizations {
            if !e.strategy.is_empty() {
                out.insert(e.strategy.clone());
            }
        }
        for s in &plan.summarizations {
            if let Some(plugin) = s.summarizer_id.strip_prefix("plugin:") {
                out.insert(plugin.to_string());
            } else if !s.summarizer_id.is_empty() {
                out.insert(s.summarizer_id.clone());
            }
        }
        for d in &plan.drops {
            if d.reason.starts_with("plugin ") {
                out.insert(d.decided_by().to_string());
            }
        }
        out.into_iter().collect()
    }
}

/// Messages affected by each kind of plan record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EvictionCounts {
    /// Messages moved to the artifact store.
    pub externalized: u32,
    /// Messages replaced by summaries.
    pub summarized: u32,
    /// Messages whose content is a placeholder.
    pub cleared: u32,
    /// Messages left out.
    pub dropped: u32,
}

impl EvictionCounts {
    /// The counts of `plan`'s records.
    pub fn of(plan: &CompactionPlan) -> Self {
        fn messages<'a>(spans: impl Iterator<Item = &'a super::plan::SpanReference>) -> u32 {
            let n: usize = spans.map(|s| s.message_ids.len()).sum();
            u32::try_from(n).unwrap_or(u32::MAX)
        }
        EvictionCounts {
            externalized: messages(plan.externalizations.iter().map(|r| &r.span)),
            summarized: messages(plan.summarizations.iter().map(|r| &r.span)),
            cleared: messages(plan.clearings.iter().map(|r| &r.span)),
            dropped: messages(plan.drops.iter().map(|r| &r.span)),
        }
    }
}
