//! Rendered messages, token counts, reports, the output format and the audit
//! record.

use crate::model::{ActionKind, AuditRecord, Eviction, EvictionCounts};
use crate::provider::Format;
use crate::reduce::{BudgetReport, ReducerReport};
use crate::render::{
    Origin, RehydrationBlocked, RehydrationReport, RenderedMessage, RequestTokens,
};
use crate::tokens::calibration::{CountBasis, Counting};

use super::thread::{content, content_to_pb, role};
use super::{each, pb, unknown_enum, unset_enum, ConvertError, Result};

impl From<Format> for pb::OutputFormat {
    fn from(f: Format) -> Self {
        match f {
            // Zero, which every server reads as neutral (4 is newer).
            Format::Neutral => pb::OutputFormat::Unspecified,
            Format::OpenAiChat => pb::OutputFormat::OpenaiChat,
            Format::AnthropicMessages => pb::OutputFormat::AnthropicMessages,
            Format::OpenAiResponses => pb::OutputFormat::OpenaiResponses,
        }
    }
}

/// The requested output form (unset, like an explicit neutral, is neutral).
pub fn output_format(v: i32, field: &str) -> Result<Format> {
    match pb::OutputFormat::try_from(v) {
        Ok(pb::OutputFormat::Unspecified | pb::OutputFormat::Neutral) => Ok(Format::Neutral),
        Ok(pb::OutputFormat::OpenaiChat) => Ok(Format::OpenAiChat),
        Ok(pb::OutputFormat::AnthropicMessages) => Ok(Format::AnthropicMessages),
        Ok(pb::OutputFormat::OpenaiResponses) => Ok(Format::OpenAiResponses),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

impl From<Origin> for pb::Origin {
    fn from(o: Origin) -> Self {
        match o {
            Origin::Verbatim => pb::Origin::Verbatim,
            Origin::Cleared => pb::Origin::Cleared,
            Origin::Summary => pb::Origin::Summary,
            Origin::Externalized => pb::Origin::Externalized,
            Origin::Rehydrated => pb::Origin::Rehydrated,
            Origin::Recalled => pb::Origin::Recalled,
            Origin::Injected => pb::Origin::Injected,
            Origin::Workspace => pb::Origin::Workspace,
        }
    }
}

fn origin(v: i32, field: &str) -> Result<Origin> {
    match pb::Origin::try_from(v) {
        Ok(pb::Origin::Verbatim) => Ok(Origin::Verbatim),
        Ok(pb::Origin::Cleared) => Ok(Origin::Cleared),
        Ok(pb::Origin::Summary) => Ok(Origin::Summary),
        Ok(pb::Origin::Externalized) => Ok(Origin::Externalized),
        Ok(pb::Origin::Rehydrated) => Ok(Origin::Rehydrated),
        Ok(pb::Origin::Recalled) => Ok(Origin::Recalled),
        Ok(pb::Origin::Injected) => Ok(Origin::Injected),
        Ok(pb::Origin::Workspace) => Ok(Origin::Workspace),
        Ok(pb::Origin::Unspecified) => Err(unset_enum(field)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

impl From<&RenderedMessage> for pb::RenderedMessage {
    fn from(m: &RenderedMessage) -> Self {
        let (text, parts) = content_to_pb(&m.content);
        pb::RenderedMessage {
            role: pb::Role::from(m.role) as i32,
            text,
            parts,
            tool_calls: m.tool_calls.iter().map(pb::ToolCall::from).collect(),
            tool_call_id: m.tool_call_id.clone(),
            tool_name: m.tool_name.clone(),
            is_error: m.is_error,
            source_id: m.source_id.clone(),
            origin: pb::Origin::from(m.origin) as i32,
        }
    }
}

impl TryFrom<pb::RenderedMessage> for RenderedMessage {
    type Error = ConvertError;
    fn try_from(m: pb::RenderedMessage) -> Result<Self> {
        Ok(RenderedMessage {
            wire: None,
            role: role(m.role, "role")?,
            content: content(m.text, m.parts)?,
            tool_calls: each(m.tool_calls, "tool_calls")?,
            origin: origin(m.origin, "origin")?,
            tool_call_id: m.tool_call_id,
            tool_name: m.tool_name,
            is_error: m.is_error,
            source_id: m.source_id,
        })
    }
}

impl From<&RequestTokens> for pb::TokenBreakdown {
    fn from(t: &RequestTokens) -> Self {
        pb::TokenBreakdown {
            system: t.system,
            tools: t.tools,
            messages: t.messages,
            rehydrated: t.rehydrated,
            recalled: t.recalled,
            framing: t.framing,
            total: t.total,
        }
    }
}

impl TryFrom<pb::TokenBreakdown> for RequestTokens {
    type Error = ConvertError;
    fn try_from(t: pb::TokenBreakdown) -> Result<Self> {
        let parts = [
            t.system,
            t.tools,
            t.messages,
            t.rehydrated,
            t.recalled,
            t.framing,
        ]
        .iter()
        .map(|&n| u64::from(n))
        .sum::<u64>();
        if parts != u64::from(t.total) {
            return Err(ConvertError::new(
                "total",
                format!("is {} but the parts add up to {parts}", t.total),
            ));
        }
        Ok(RequestTokens {
            system: t.system,
            tools: t.tools,
            messages: t.messages,
            rehydrated: t.rehydrated,
            recalled: t.recalled,
            framing: t.framing,
            total: t.total,
        })
    }
}

/// A count's basis on the wire.
pub fn counting_to_pb(c: &Counting) -> pb::Counting {
    use pb::counting::Basis;
    pb::Counting {
        basis: match c.basis {
            CountBasis::Unstated => Basis::Unspecified,
            CountBasis::Exact => Basis::Exact,
            CountBasis::Estimate => Basis::Estimate,
            CountBasis::Calibrated => Basis::Calibrated,
        } as i32,
        scale: f64::from(c.scale_ppm) / 1e6,
        reports: c.reports,
    }
}

/// A count's basis from the wire (an unknown basis is not said).
fn counting_from_pb(c: pb::Counting) -> Counting {
    use pb::counting::Basis;
    Counting {
        basis: match Basis::try_from(c.basis) {
            Ok(Basis::Exact) => CountBasis::Exact,
            Ok(Basis::Estimate) => CountBasis::Estimate,
            Ok(Basis::Calibrated) => CountBasis::Calibrated,
            Ok(Basis::Unspecified) | Err(_) => CountBasis::Unstated,
        },
        scale_ppm: if c.scale.is_finite() && c.scale > 0.0 {
            (c.scale * 1e6).round().min(f64::from(u32::MAX)) as u32
        } else {
            0
        },
        reports: c.reports,
    }
}

impl From<&BudgetReport> for pb::BudgetReport {
    fn from(b: &BudgetReport) -> Self {
        pb::BudgetReport {
            max_input_tokens: b.max_input_tokens,
            hard_limit: b.hard_limit,
            trigger: b.trigger,
            target: b.target,
            fixed_tokens: b.fixed_tokens,
            system_tokens: b.system_tokens,
            tool_tokens: b.tool_tokens,
            workspace_tokens: b.workspace_tokens,
            counting: Some(counting_to_pb(&b.counting)),
            tool_results: b.tool_results.map(|t| pb::TierUsage {
                cap: t.cap,
                target: t.target,
                tokens_before: t.tokens_before,
                tokens_after: t.tokens_after,
            }),
        }
    }
}

impl TryFrom<pb::BudgetReport> for BudgetReport {
    type Error = ConvertError;
    fn try_from(b: pb::BudgetReport) -> Result<Self> {
        Ok(BudgetReport {
            max_input_tokens: b.max_input_tokens,
            hard_limit: b.hard_limit,
            trigger: b.trigger,
            target: b.target,
            fixed_tokens: b.fixed_tokens,
            system_tokens: b.system_tokens,
            tool_tokens: b.tool_tokens,
            workspace_tokens: b.workspace_tokens,
            counting: b.counting.map(counting_from_pb).unwrap_or_default(),
            tool_results: b.tool_results.map(|t| crate::reduce::TierReport {
                cap: t.cap,
                target: t.target,
                tokens_before: t.tokens_before,
                tokens_after: t.tokens_after,
            }),
        })
    }
}

impl From<&ReducerReport> for pb::ReducerReport {
    fn from(r: &ReducerReport) -> Self {
        pb::ReducerReport {
            name: r.name.clone(),
            tokens_freed: r.tokens_freed,
        }
    }
}

impl TryFrom<pb::ReducerReport> for ReducerReport {
    type Error = ConvertError;
    fn try_from(r: pb::ReducerReport) -> Result<Self> {
        Ok(ReducerReport {
            name: r.name,
            tokens_freed: r.tokens_freed,
        })
    }
}

impl From<&RehydrationReport> for pb::RehydratedArtifact {
    fn from(r: &RehydrationReport) -> Self {
        pb::RehydratedArtifact {
            artifact_id: r.artifact_id.clone(),
            truncated: r.truncated,
            omitted: r.omitted,
            auto: r.auto,
            blocked: match r.blocked {
                None => pb::RehydrationBlocked::Unspecified,
                Some(RehydrationBlocked::Sensitivity) => pb::RehydrationBlocked::Sensitivity,
                Some(RehydrationBlocked::Permission) => pb::RehydrationBlocked::Permission,
                Some(RehydrationBlocked::Cooldown) => pb::RehydrationBlocked::Cooldown,
                Some(RehydrationBlocked::TurnLimit) => pb::RehydrationBlocked::TurnLimit,
                Some(RehydrationBlocked::NotFound) => pb::RehydrationBlocked::NotFound,
                Some(RehydrationBlocked::Unavailable) => pb::RehydrationBlocked::Unavailable,
            } as i32,
        }
    }
}

impl TryFrom<pb::RehydratedArtifact> for RehydrationReport {
    type Error = ConvertError;
    fn try_from(r: pb::RehydratedArtifact) -> Result<Self> {
        Ok(RehydrationReport {
            artifact_id: r.artifact_id,
            truncated: r.truncated,
            omitted: r.omitted,
            auto: r.auto,
            blocked: match pb::RehydrationBlocked::try_from(r.blocked) {
                Ok(pb::RehydrationBlocked::Unspecified) => None,
                Ok(pb::RehydrationBlocked::Sensitivity) => Some(RehydrationBlocked::Sensitivity),
                Ok(pb::RehydrationBlocked::Permission) => Some(RehydrationBlocked::Permission),
                Ok(pb::RehydrationBlocked::Cooldown) => Some(RehydrationBlocked::Cooldown),
                Ok(pb::RehydrationBlocked::TurnLimit) => Some(RehydrationBlocked::TurnLimit),
                Ok(pb::RehydrationBlocked::NotFound) => Some(RehydrationBlocked::NotFound),
                Ok(pb::RehydrationBlocked::Unavailable) => Some(RehydrationBlocked::Unavailable),
                Err(_) => return Err(ConvertError::new("blocked", "unknown value")),
            },
        })
    }
}

impl From<&AuditRecord> for pb::AuditRecord {
    fn from(a: &AuditRecord) -> Self {
        pb::AuditRecord {
            plan_version: a.plan_version,
            plan_fingerprint: a.plan_fingerprint.clone(),
            plan_format_version: a.plan_format_version.clone(),
            summary_schema_version: a.summary_schema_version.clone(),
            summary_render_version: a.summary_render_version.clone(),
            render_format_version: a.render_format_version.clone(),
            summarizer_id: a.summarizer_id.clone(),
            tokenizer: a.tokenizer.clone(),
            evictions: Some(pb::EvictionCounts {
                externalized: a.evictions.externalized,
                summarized: a.evictions.summarized,
                cleared: a.evictions.cleared,
                dropped: a.evictions.dropped,
            }),
            artifact_ids: a.artifact_ids.clone(),
            rehydrated_artifact_ids: a.rehydrated_artifact_ids.clone(),
            warnings: a.warnings.clone(),
            strategies: a.strategies.clone(),
            requester: a.requester.clone(),
            evicted: a.evicted.iter().map(pb::Eviction::from).collect(),
            turns_since_compaction: a.turns_since_compaction,
        }
    }
}

impl TryFrom<pb::AuditRecord> for AuditRecord {
    type Error = ConvertError;
    fn try_from(a: pb::AuditRecord) -> Result<Self> {
        let e = a
            .evictions
            .ok_or_else(|| ConvertError::new("evictions", "is required"))?;
        Ok(AuditRecord {
            plan_version: a.plan_version,
            plan_fingerprint: a.plan_fingerprint,
            plan_format_version: a.plan_format_version,
            summary_schema_version: a.summary_schema_version,
            summary_render_version: a.summary_render_version,
            render_format_version: a.render_format_version,
            summarizer_id: a.summarizer_id,
            tokenizer: a.tokenizer,
            evictions: EvictionCounts {
                externalized: e.externalized,
                summarized: e.summarized,
                cleared: e.cleared,
                dropped: e.dropped,
            },
            artifact_ids: a.artifact_ids,
            rehydrated_artifact_ids: a.rehydrated_artifact_ids,
            warnings: a.warnings,
            strategies: a.strategies,
            requester: a.requester,
            turns_since_compaction: a.turns_since_compaction,
            evicted: a
                .evicted
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    Eviction::try_from(e).map_err(|err| err.within(&format!("evicted[{i}]")))
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// The one mapping of an action onto the wire (kept text has no eviction
/// action of its own).
impl From<ActionKind> for pb::EvictionAction {
    fn from(a: ActionKind) -> Self {
        match a {
            ActionKind::Externalize => pb::EvictionAction::Externalized,
            ActionKind::Summarize => pb::EvictionAction::Summarized,
            ActionKind::Clear => pb::EvictionAction::Cleared,
            ActionKind::Drop => pb::EvictionAction::Dropped,
            ActionKind::Include => pb::EvictionAction::Unspecified,
        }
    }
}

impl From<&Eviction> for pb::Eviction {
    fn from(e: &Eviction) -> Self {
        pb::Eviction {
            action: pb::EvictionAction::from(e.action) as i32,
            first_message_id: e.first_message_id.clone(),
            last_message_id: e.last_message_id.clone(),
            message_count: e.message_count,
            reason: e.reason.clone(),
            strategy: e.strategy.clone(),
            artifact_id: e.artifact_id.clone(),
        }
    }
}

impl TryFrom<pb::Eviction> for Eviction {
    type Error = ConvertError;
    fn try_from(e: pb::Eviction) -> Result<Self> {
        let action = match pb::EvictionAction::try_from(e.action) {
            Ok(pb::EvictionAction::Externalized) => ActionKind::Externalize,
            Ok(pb::EvictionAction::Summarized) => ActionKind::Summarize,
            Ok(pb::EvictionAction::Cleared) => ActionKind::Clear,
            Ok(pb::EvictionAction::Dropped) => ActionKind::Drop,
            Ok(pb::EvictionAction::Unspecified) | Err(_) => {
                return Err(ConvertError::new("action", "unknown value"))
            }
        };
        Ok(Eviction {
            action,
            first_message_id: e.first_message_id,
            last_message_id: e.last_message_id,
            message_count: e.message_count,
            reason: e.reason,
            strategy: e.strategy,
            artifact_id: e.artifact_id,
        })
    }
}
