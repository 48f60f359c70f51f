//! Plans, their records and structured summaries. The server sends them and
//! the client reads them back; both directions are strict, so a plan read by
//! a client is exactly the plan the server committed.

use crate::model::{
    ArtifactReference, ClearReason, ClearRecord, CompactionPlan, Decision, DropRecord,
    DroppedSpanIndex, ExternalizationRecord, OpenItem, Priority, SpanReference, StructuredSummary,
    SummarizationRecord, ToolOutcome,
};

use super::thread::{json_map, json_map_to_pb, outcome, sensitivity, sensitivity_to_pb};
use super::{each, pb, required, unknown_enum, unset_enum, ConvertError, Result};

impl From<&CompactionPlan> for pb::CompactionPlan {
    fn from(p: &CompactionPlan) -> Self {
        pb::CompactionPlan {
            thread_id: p.thread_id.clone(),
            version: p.version,
            fingerprint: p.fingerprint.clone(),
            externalizations: p.externalizations.iter().map(Into::into).collect(),
            summarizations: p.summarizations.iter().map(Into::into).collect(),
            clearings: p.clearings.iter().map(Into::into).collect(),
            drops: p.drops.iter().map(Into::into).collect(),
            original_token_count: p.original_token_count,
            compacted_token_count: p.compacted_token_count,
            compacted_at_turn: p.compacted_at_turn,
        }
    }
}

impl TryFrom<pb::CompactionPlan> for CompactionPlan {
    type Error = ConvertError;
    fn try_from(p: pb::CompactionPlan) -> Result<Self> {
        Ok(CompactionPlan {
            thread_id: p.thread_id,
            version: p.version,
            fingerprint: p.fingerprint,
            externalizations: each(p.externalizations, "externalizations")?.into(),
            summarizations: each(p.summarizations, "summarizations")?.into(),
            clearings: each(p.clearings, "clearings")?.into(),
            drops: each(p.drops, "drops")?.into(),
            original_token_count: p.original_token_count,
            compacted_token_count: p.compacted_token_count,
            compacted_at_turn: p.compacted_at_turn,
        })
    }
}

impl From<&SpanReference> for pb::SpanReference {
    fn from(s: &SpanReference) -> Self {
        pb::SpanReference {
            message_ids: s.message_ids.clone(),
            first_turn: s.first_turn,
            last_turn: s.last_turn,
        }
    }
}

impl TryFrom<pb::SpanReference> for SpanReference {
    type Error = ConvertError;
    fn try_from(s: pb::SpanReference) -> Result<Self> {
        Ok(SpanReference {
            message_ids: s.message_ids,
            first_turn: s.first_turn,
            last_turn: s.last_turn,
        })
    }
}

impl From<&ExternalizationRecord> for pb::ExternalizationRecord {
    fn from(r: &ExternalizationRecord) -> Self {
        pb::ExternalizationRecord {
            span: Some((&r.span).into()),
            artifact_id: r.artifact_id.clone(),
            summary: Some((&r.summary).into()),
            rehydrate_hint: r.rehydrate_hint.clone(),
            sensitivity: sensitivity_to_pb(r.sensitivity),
            content_hash: r.content_hash.clone(),
            content_tokens: r.content_tokens,
            strategy: r.strategy.clone(),
        }
    }
}

impl TryFrom<pb::ExternalizationRecord> for ExternalizationRecord {
    type Error = ConvertError;
    fn try_from(r: pb::ExternalizationRecord) -> Result<Self> {
        Ok(ExternalizationRecord {
            span: required(r.span, "span")?,
            summary: required(r.summary, "summary")?,
            sensitivity: sensitivity(r.sensitivity, "sensitivity")?,
            artifact_id: r.artifact_id,
            rehydrate_hint: r.rehydrate_hint,
            content_hash: r.content_hash,
            content_tokens: r.content_tokens,
            strategy: r.strategy,
        })
    }
}

impl From<&SummarizationRecord> for pb::SummarizationRecord {
    fn from(r: &SummarizationRecord) -> Self {
        pb::SummarizationRecord {
            span: Some((&r.span).into()),
            summary: Some((&*r.summary).into()),
            summary_token_count: r.summary_token_count,
            archive_artifact_id: r.archive_artifact_id.clone(),
            summarizer_id: r.summarizer_id.clone(),
        }
    }
}

impl TryFrom<pb::SummarizationRecord> for SummarizationRecord {
    type Error = ConvertError;
    fn try_from(r: pb::SummarizationRecord) -> Result<Self> {
        Ok(SummarizationRecord {
            span: required(r.span, "span")?,
            summary: std::sync::Arc::new(required(r.summary, "summary")?),
            summary_token_count: r.summary_token_count,
            archive_artifact_id: r.archive_artifact_id,
            summarizer_id: r.summarizer_id,
        })
    }
}

impl From<ClearReason> for pb::ClearReason {
    fn from(r: ClearReason) -> Self {
        match r {
            ClearReason::Expired => pb::ClearReason::Expired,
            ClearReason::Durability => pb::ClearReason::Durability,
            ClearReason::Compressed => pb::ClearReason::Compressed,
            ClearReason::Plugin => pb::ClearReason::Plugin,
            ClearReason::Excerpt => pb::ClearReason::Excerpt,
        }
    }
}

fn clear_reason(v: i32, field: &str) -> Result<ClearReason> {
    match pb::ClearReason::try_from(v) {
        Ok(pb::ClearReason::Expired) => Ok(ClearReason::Expired),
        Ok(pb::ClearReason::Durability) => Ok(ClearReason::Durability),
        Ok(pb::ClearReason::Compressed) => Ok(ClearReason::Compressed),
        Ok(pb::ClearReason::Plugin) => Ok(ClearReason::Plugin),
        Ok(pb::ClearReason::Excerpt) => Ok(ClearReason::Excerpt),
        Ok(pb::ClearReason::Unspecified) => Err(unset_enum(field)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

impl From<&ClearRecord> for pb::ClearRecord {
    fn from(r: &ClearRecord) -> Self {
        pb::ClearRecord {
            span: Some((&r.span).into()),
            preserved_fields: json_map_to_pb(&r.preserved_fields),
            reason: pb::ClearReason::from(r.reason) as i32,
            replacement: r.replacement.clone(),
            archive_artifact_id: r.archive_artifact_id.clone(),
            archive_note: r.archive_note.clone(),
            strategy: r.strategy.clone(),
        }
    }
}

impl TryFrom<pb::ClearRecord> for ClearRecord {
    type Error = ConvertError;
    fn try_from(r: pb::ClearRecord) -> Result<Self> {
        Ok(ClearRecord {
            span: required(r.span, "span")?,
            preserved_fields: json_map(r.preserved_fields, "preserved_fields")?,
            reason: clear_reason(r.reason, "reason")?,
            replacement: r.replacement,
            archive_artifact_id: r.archive_artifact_id,
            archive_note: r.archive_note,
            strategy: r.strategy,
        })
    }
}

impl From<&DropRecord> for pb::DropRecord {
    fn from(r: &DropRecord) -> Self {
        pb::DropRecord {
            span: Some((&r.span).into()),
            reason: r.reason.clone(),
            index: Some(pb::DroppedSpanIndex {
                keywords: r.index.keywords.clone(),
                summary: r.index.summary.clone(),
                timestamp: r.index.timestamp.clone(),
            }),
            archive_artifact_id: r.archive_artifact_id.clone(),
        }
    }
}

impl TryFrom<pb::DropRecord> for DropRecord {
    type Error = ConvertError;
    fn try_from(r: pb::DropRecord) -> Result<Self> {
        Ok(DropRecord {
            span: required(r.span, "span")?,
            index: required(r.index, "index")?,
            reason: r.reason,
            archive_artifact_id: r.archive_artifact_id,
        })
    }
}

impl TryFrom<pb::DroppedSpanIndex> for DroppedSpanIndex {
    type Error = ConvertError;
    fn try_from(i: pb::DroppedSpanIndex) -> Result<Self> {
        Ok(DroppedSpanIndex {
            keywords: i.keywords,
            summary: i.summary,
            timestamp: i.timestamp,
        })
    }
}

// ───────────────────────────── summaries ─────────────────────────────

impl From<&StructuredSummary> for pb::StructuredSummary {
    fn from(s: &StructuredSummary) -> Self {
        pb::StructuredSummary {
            span: Some((&s.span).into()),
            facts: s.facts.clone(),
            decisions: s
                .decisions
                .iter()
                .map(|d| pb::Decision {
                    decision: d.decision.clone(),
                    rationale: d.rationale.clone(),
                    turn: d.turn,
                    timestamp: d.timestamp.clone(),
                })
                .collect(),
            open_items: s
                .open_items
                .iter()
                .map(|o| pb::OpenItem {
                    description: o.description.clone(),
                    context: o.context.clone(),
                    priority: pb::Priority::from(o.priority) as i32,
                })
                .collect(),
            artifacts: s
                .artifacts
                .iter()
                .map(|a| pb::ArtifactReference {
                    artifact_id: a.artifact_id.clone(),
                    description: a.description.clone(),
                    rehydrate_hint: a.rehydrate_hint.clone(),
                })
                .collect(),
            tool_outcomes: s
                .tool_outcomes
                .iter()
                .map(|t| pb::ToolOutcome {
                    tool_name: t.tool_name.clone(),
                    outcome: pb::Outcome::from(t.outcome) as i32,
                    key_fields: json_map_to_pb(&t.key_fields),
                    error_message: t.error_message.clone(),
                })
                .collect(),
            current_task: s.current_task.clone(),
            current_plan: s.current_plan.clone(),
            references: s.references.clone(),
            omitted: s.omitted,
            requests: s.requests.clone(),
        }
    }
}

impl TryFrom<pb::StructuredSummary> for StructuredSummary {
    type Error = ConvertError;
    fn try_from(s: pb::StructuredSummary) -> Result<Self> {
        Ok(StructuredSummary {
            span: required(s.span, "span")?,
            requests: s.requests,
            facts: s.facts,
            decisions: each(s.decisions, "decisions")?,
            open_items: each(s.open_items, "open_items")?,
            artifacts: each(s.artifacts, "artifacts")?,
            tool_outcomes: each(s.tool_outcomes, "tool_outcomes")?,
            current_task: s.current_task,
            current_plan: s.current_plan,
            references: s.references,
            omitted: s.omitted,
            omitted_bytes: 0,
        })
    }
}

impl TryFrom<pb::Decision> for Decision {
    type Error = ConvertError;
    fn try_from(d: pb::Decision) -> Result<Self> {
        Ok(Decision {
            decision: d.decision,
            rationale: d.rationale,
            turn: d.turn,
            timestamp: d.timestamp,
        })
    }
}

impl From<Priority> for pb::Priority {
    fn from(p: Priority) -> Self {
        match p {
            Priority::High => pb::Priority::High,
            Priority::Medium => pb::Priority::Medium,
            Priority::Low => pb::Priority::Low,
        }
    }
}

impl TryFrom<pb::OpenItem> for OpenItem {
    type Error = ConvertError;
    fn try_from(o: pb::OpenItem) -> Result<Self> {
        let priority = match pb::Priority::try_from(o.priority) {
            Ok(pb::Priority::High) => Priority::High,
            Ok(pb::Priority::Medium) => Priority::Medium,
            Ok(pb::Priority::Low) => Priority::Low,
            Ok(pb::Priority::Unspecified) => return Err(unset_enum("priority")),
            Err(_) => return Err(unknown_enum("priority", o.priority)),
        };
        Ok(OpenItem {
            description: o.description,
            context: o.context,
            priority,
        })
    }
}

impl TryFrom<pb::ArtifactReference> for ArtifactReference {
    type Error = ConvertError;
    fn try_from(a: pb::ArtifactReference) -> Result<Self> {
        Ok(ArtifactReference {
            artifact_id: a.artifact_id,
            description: a.description,
            rehydrate_hint: a.rehydrate_hint,
        })
    }
}

impl TryFrom<pb::ToolOutcome> for ToolOutcome {
    type Error = ConvertError;
    fn try_from(t: pb::ToolOutcome) -> Result<Self> {
        Ok(ToolOutcome {
            outcome: outcome(t.outcome, "outcome")?,
            key_fields: json_map(t.key_fields, "key_fields")?,
            tool_name: t.tool_name,
            error_message: t.error_message,
        })
    }
}
