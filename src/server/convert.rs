//! Protobuf ↔ core conversions. Inbound conversions reject what the core
//! cannot represent (unknown enum numbers, invalid JSON, ambiguous content)
//! with an [`ApiError::InvalidArgument`] naming the field path, e.g.
//! `thread.messages[3].role`. Outbound conversions are total.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{
    ArtifactReference, ClearReason, ClearRecord, CompactionPlan, Content, ContentPart, Decision,
    DeterminismMetadata, DropRecord, Durability, ExternalizationRecord, JsonText, Message,
    MessageMetadata, OpenItem, Outcome, Priority, Role, Sensitivity, SpanReference,
    StructuredSummary, SummarizationRecord, Thread, ToolCall, ToolContent, ToolOutcome,
    ToolResultEnvelope, ToolSchema,
};
use crate::reduce::{BudgetReport, Policy, ReducerReport, ToolRetention};
use crate::render::{Origin, RenderedMessage, RequestTokens};

use super::error::ApiError;
use super::pb;

type Result<T> = std::result::Result<T, ApiError>;

// ───────────────────────────── inbound ─────────────────────────────

/// The thread of a request; `field` is where it sits (`thread`).
pub fn thread_from_pb(t: Option<pb::Thread>, field: &str) -> Result<Thread> {
    let t = t.ok_or_else(|| ApiError::invalid(field, "is required"))?;
    let messages = t
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| message_from_pb(m, &format!("{field}.messages[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    Ok(Thread { id: t.id, messages })
}

fn message_from_pb(m: pb::Message, field: &str) -> Result<Message> {
    let role = role_from_pb(m.role, &format!("{field}.role"))?;
    let content = if m.parts.is_empty() {
        Content::Text(m.text)
    } else {
        if !m.text.is_empty() {
            return Err(ApiError::invalid(
                format!("{field}.text"),
                "must be empty when parts are set",
            ));
        }
        Content::Parts(
            m.parts
                .into_iter()
                .enumerate()
                .map(|(j, p)| part_from_pb(p, &format!("{field}.parts[{j}]")))
                .collect::<Result<_>>()?,
        )
    };
    let tool_calls = m
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(j, c)| {
            Ok(ToolCall {
                arguments: json_or_null(
                    &c.arguments_json,
                    &format!("{field}.tool_calls[{j}].arguments_json"),
                )?,
                id: c.id,
                name: c.name,
            })
        })
        .collect::<Result<_>>()?;
    let tool_result = m
        .tool_result
        .map(|e| envelope_from_pb(e, &format!("{field}.tool_result")))
        .transpose()?;
    let metadata = match m.metadata {
        None => MessageMetadata::default(),
        Some(md) => MessageMetadata {
            protected: md.protected,
            label: md.label,
            sensitivity: sensitivity_from_pb(
                md.sensitivity,
                &format!("{field}.metadata.sensitivity"),
            )?,
            source: md.source,
        },
    };
    Ok(Message {
        id: m.id,
        role,
        content,
        tool_calls,
        tool_result,
        turn: m.turn,
        metadata,
    })
}

fn part_from_pb(p: pb::ContentPart, field: &str) -> Result<ContentPart> {
    match p.kind {
        Some(pb::content_part::Kind::Text(text)) => Ok(ContentPart::Text { text }),
        Some(pb::content_part::Kind::ImageUrl(url)) => Ok(ContentPart::Image { url }),
        None => Err(ApiError::invalid(
            field,
            "one of text or image_url is required",
        )),
    }
}

fn envelope_from_pb(e: pb::ToolResultEnvelope, field: &str) -> Result<ToolResultEnvelope> {
    let outcome = outcome_from_pb(e.outcome, &format!("{field}.outcome"))?;
    let content = match e.content {
        None => ToolContent::Text(String::new()),
        Some(pb::tool_result_envelope::Content::ContentText(t)) => ToolContent::Text(t),
        Some(pb::tool_result_envelope::Content::ContentJson(j)) => {
            ToolContent::Json(JsonText::from_string(j).map_err(|e| {
                ApiError::invalid(
                    format!("{field}.content_json"),
                    format!("invalid JSON: {e}"),
                )
            })?)
        }
    };
    Ok(ToolResultEnvelope {
        tool_name: e.tool_name,
        tool_call_id: e.tool_call_id,
        outcome,
        content,
        key_fields: json_map(e.key_fields, &format!("{field}.key_fields"))?,
        durability: durability_from_pb(e.durability, &format!("{field}.durability"))?,
        determinism: e.determinism.map(determinism_from_pb),
        started_at: e.started_at,
        completed_at: e.completed_at,
    })
}

/// Determinism metadata (every field optional on both sides).
pub fn determinism_from_pb(d: pb::DeterminismMetadata) -> DeterminismMetadata {
    DeterminismMetadata {
        content_hash: d.content_hash,
        etag: d.etag,
        mtime: d.mtime,
        version: d.version,
    }
}

/// The `observations` map of a request.
pub fn observations_from_pb(
    o: std::collections::HashMap<String, pb::DeterminismMetadata>,
) -> BTreeMap<String, DeterminismMetadata> {
    o.into_iter()
        .map(|(k, v)| (k, determinism_from_pb(v)))
        .collect()
}

/// Tool schemas of a request (`field` = `tools`).
pub fn tools_from_pb(tools: Vec<pb::ToolSchema>, field: &str) -> Result<Vec<ToolSchema>> {
    tools
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let path = format!("{field}[{i}]");
            if t.name.is_empty() {
                return Err(ApiError::invalid(
                    format!("{path}.name"),
                    "must not be empty",
                ));
            }
            Ok(ToolSchema {
                parameters: json_or_null(&t.parameters_json, &format!("{path}.parameters_json"))?,
                name: t.name,
                description: t.description,
            })
        })
        .collect()
}

/// Applies per-request overrides to the server's policy. The result is not
/// validated here: `reduce::compact` validates it and names the field.
pub fn apply_overrides(base: &Policy, o: Option<pb::PolicyOverrides>) -> Result<Policy> {
    let mut p = base.clone();
    let Some(o) = o else {
        return Ok(p);
    };
    let set = |dst: &mut u32, v: Option<u32>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    if let Some(v) = o.trigger_ratio {
        p.trigger_ratio = v;
    }
    if let Some(v) = o.target_ratio {
        p.target_ratio = v;
    }
    set(&mut p.safety_buffer_tokens, o.safety_buffer_tokens);
    set(&mut p.response_reserve_tokens, o.response_reserve_tokens);
    set(
        &mut p.rehydration_reserve_tokens,
        o.rehydration_reserve_tokens,
    );
    set(&mut p.injection_reserve_tokens, o.injection_reserve_tokens);
    set(&mut p.keep_recent_turns, o.keep_recent_turns);
    set(&mut p.keep_tool_io_pairs, o.keep_tool_io_pairs);
    set(
        &mut p.externalize_threshold_tokens,
        o.externalize_threshold_tokens,
    );
    set(&mut p.summary_chunk_tokens, o.summary_chunk_tokens);
    set(&mut p.summary_max_tokens, o.summary_max_tokens);
    set(&mut p.max_summaries, o.max_summaries);
    if let Some(d) = durability_from_pb(o.default_durability, "policy.default_durability")? {
        p.default_durability = d;
    }
    for (tool, d) in o.durability {
        let field = format!("policy.durability[{tool:?}]");
        match durability_from_pb(d, &field)? {
            Some(d) => {
                p.durability.insert(tool, d);
            }
            None => return Err(ApiError::invalid(field, "must be specified")),
        }
    }
    if let Some(r) = o.retention_default {
        p.retention_default = retention_from_pb(r);
    }
    for (tool, r) in o.retention {
        p.retention.insert(tool, retention_from_pb(r));
    }
    let flag = |dst: &mut bool, v: Option<bool>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    flag(&mut p.enable.retention, o.enable_retention);
    flag(&mut p.enable.compress, o.enable_compress);
    flag(&mut p.enable.clear, o.enable_clear);
    flag(&mut p.enable.externalize, o.enable_externalize);
    flag(&mut p.enable.summarize, o.enable_summarize);
    flag(&mut p.enable.drop, o.enable_drop);
    flag(&mut p.render.delimit_user_content, o.delimit_user_content);
    if let Some(v) = o.tool_result_max_chars {
        p.render.tool_result_max_chars = Some(v as usize);
    }
    Ok(p)
}

fn retention_from_pb(r: pb::ToolRetention) -> ToolRetention {
    ToolRetention {
        keep_turns: r.keep_turns,
        keep_last: r.keep_last,
        never_evict: r.never_evict,
    }
}

fn role_from_pb(v: i32, field: &str) -> Result<Role> {
    match pb::Role::try_from(v) {
        Ok(pb::Role::System) => Ok(Role::System),
        Ok(pb::Role::Developer) => Ok(Role::Developer),
        Ok(pb::Role::User) => Ok(Role::User),
        Ok(pb::Role::Assistant) => Ok(Role::Assistant),
        Ok(pb::Role::Tool) => Ok(Role::Tool),
        Ok(pb::Role::Unspecified) => Err(ApiError::invalid(field, "is required")),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

fn outcome_from_pb(v: i32, field: &str) -> Result<Outcome> {
    match pb::Outcome::try_from(v) {
        Ok(pb::Outcome::Unspecified | pb::Outcome::Success) => Ok(Outcome::Success),
        Ok(pb::Outcome::Failure) => Ok(Outcome::Failure),
        Ok(pb::Outcome::Partial) => Ok(Outcome::Partial),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

fn durability_from_pb(v: i32, field: &str) -> Result<Option<Durability>> {
    match pb::Durability::try_from(v) {
        Ok(pb::Durability::Unspecified) => Ok(None),
        Ok(pb::Durability::Ephemeral) => Ok(Some(Durability::Ephemeral)),
        Ok(pb::Durability::Anchoring) => Ok(Some(Durability::Anchoring)),
        Ok(pb::Durability::Replayable) => Ok(Some(Durability::Replayable)),
        Ok(pb::Durability::NonReplayable) => Ok(Some(Durability::NonReplayable)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

fn sensitivity_from_pb(v: i32, field: &str) -> Result<Sensitivity> {
    match pb::Sensitivity::try_from(v) {
        Ok(pb::Sensitivity::Unspecified | pb::Sensitivity::Internal) => Ok(Sensitivity::Internal),
        Ok(pb::Sensitivity::Public) => Ok(Sensitivity::Public),
        Ok(pb::Sensitivity::Confidential) => Ok(Sensitivity::Confidential),
        Ok(pb::Sensitivity::Restricted) => Ok(Sensitivity::Restricted),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

/// The requested output form.
pub fn format_from_pb(v: i32) -> Result<pb::OutputFormat> {
    pb::OutputFormat::try_from(v).map_err(|_| unknown_enum("format", v))
}

fn unknown_enum(field: &str, v: i32) -> ApiError {
    ApiError::invalid(field, format!("unknown enum value {v}"))
}

fn json(text: &str, field: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| ApiError::invalid(field, format!("invalid JSON: {e}")))
}

fn json_or_null(text: &str, field: &str) -> Result<Value> {
    if text.trim().is_empty() {
        Ok(Value::Null)
    } else {
        json(text, field)
    }
}

fn json_map(
    m: std::collections::HashMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, Value>> {
    m.into_iter()
        .map(|(k, v)| {
            let value = json(&v, &format!("{field}[{k:?}]"))?;
            Ok((k, value))
        })
        .collect()
}

// ───────────────────────────── outbound ─────────────────────────────

pub(crate) fn json_text(v: &Value) -> String {
    if v.is_null() {
        String::new()
    } else {
        v.to_string()
    }
}

pub(crate) fn json_strings(
    m: &BTreeMap<String, Value>,
) -> std::collections::HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
}

pub(crate) fn role_to_pb(r: Role) -> pb::Role {
    match r {
        Role::System => pb::Role::System,
        Role::Developer => pb::Role::Developer,
        Role::User => pb::Role::User,
        Role::Assistant => pb::Role::Assistant,
        Role::Tool => pb::Role::Tool,
    }
}

pub(crate) fn outcome_to_pb(o: Outcome) -> pb::Outcome {
    match o {
        Outcome::Success => pb::Outcome::Success,
        Outcome::Failure => pb::Outcome::Failure,
        Outcome::Partial => pb::Outcome::Partial,
    }
}

/// A durability on the wire.
pub(crate) fn durability_to_pb(d: Durability) -> pb::Durability {
    match d {
        Durability::Ephemeral => pb::Durability::Ephemeral,
        Durability::Anchoring => pb::Durability::Anchoring,
        Durability::Replayable => pb::Durability::Replayable,
        Durability::NonReplayable => pb::Durability::NonReplayable,
    }
}

/// A sensitivity on the wire.
pub fn sensitivity_to_pb(s: Sensitivity) -> pb::Sensitivity {
    match s {
        Sensitivity::Public => pb::Sensitivity::Public,
        Sensitivity::Internal => pb::Sensitivity::Internal,
        Sensitivity::Confidential => pb::Sensitivity::Confidential,
        Sensitivity::Restricted => pb::Sensitivity::Restricted,
    }
}

fn span_to_pb(s: &SpanReference) -> pb::SpanReference {
    pb::SpanReference {
        message_ids: s.message_ids.clone(),
        first_turn: s.first_turn,
        last_turn: s.last_turn,
    }
}

fn summary_to_pb(s: &StructuredSummary) -> pb::StructuredSummary {
    pb::StructuredSummary {
        span: Some(span_to_pb(&s.span)),
        facts: s.facts.clone(),
        decisions: s.decisions.iter().map(decision_to_pb).collect(),
        open_items: s.open_items.iter().map(open_item_to_pb).collect(),
        artifacts: s.artifacts.iter().map(artifact_ref_to_pb).collect(),
        tool_outcomes: s.tool_outcomes.iter().map(tool_outcome_to_pb).collect(),
        current_task: s.current_task.clone(),
        current_plan: s.current_plan.clone(),
    }
}

fn decision_to_pb(d: &Decision) -> pb::Decision {
    pb::Decision {
        decision: d.decision.clone(),
        rationale: d.rationale.clone(),
        turn: d.turn,
    }
}

fn open_item_to_pb(o: &OpenItem) -> pb::OpenItem {
    let priority = match o.priority {
        Priority::High => pb::Priority::High,
        Priority::Medium => pb::Priority::Medium,
        Priority::Low => pb::Priority::Low,
    };
    pb::OpenItem {
        description: o.description.clone(),
        context: o.context.clone(),
        priority: priority as i32,
    }
}

fn artifact_ref_to_pb(a: &ArtifactReference) -> pb::ArtifactReference {
    pb::ArtifactReference {
        artifact_id: a.artifact_id.clone(),
        description: a.description.clone(),
        rehydrate_hint: a.rehydrate_hint.clone(),
    }
}

fn tool_outcome_to_pb(t: &ToolOutcome) -> pb::ToolOutcome {
    pb::ToolOutcome {
        tool_name: t.tool_name.clone(),
        outcome: outcome_to_pb(t.outcome) as i32,
        key_fields: json_strings(&t.key_fields),
        error_message: t.error_message.clone(),
    }
}

fn externalization_to_pb(r: &ExternalizationRecord) -> pb::ExternalizationRecord {
    pb::ExternalizationRecord {
        span: Some(span_to_pb(&r.span)),
        artifact_id: r.artifact_id.clone(),
        summary: Some(summary_to_pb(&r.summary)),
        rehydrate_hint: r.rehydrate_hint.clone(),
        sensitivity: sensitivity_to_pb(r.sensitivity) as i32,
        content_hash: r.content_hash.clone(),
        content_tokens: r.content_tokens,
    }
}

fn summarization_to_pb(r: &SummarizationRecord) -> pb::SummarizationRecord {
    pb::SummarizationRecord {
        span: Some(span_to_pb(&r.span)),
        summary: Some(summary_to_pb(&r.summary)),
        summary_token_count: r.summary_token_count,
    }
}

fn clear_to_pb(r: &ClearRecord) -> pb::ClearRecord {
    let reason = match r.reason {
        ClearReason::Expired => pb::ClearReason::Expired,
        ClearReason::Durability => pb::ClearReason::Durability,
        ClearReason::Compressed => pb::ClearReason::Compressed,
        ClearReason::Plugin => pb::ClearReason::Plugin,
    };
    pb::ClearRecord {
        span: Some(span_to_pb(&r.span)),
        preserved_fields: json_strings(&r.preserved_fields),
        reason: reason as i32,
        replacement: r.replacement.clone(),
    }
}

fn drop_to_pb(r: &DropRecord) -> pb::DropRecord {
    pb::DropRecord {
        span: Some(span_to_pb(&r.span)),
        reason: r.reason.clone(),
        index: Some(pb::DroppedSpanIndex {
            keywords: r.index.keywords.clone(),
            summary: r.index.summary.clone(),
        }),
    }
}

/// A plan on the wire.
pub fn plan_to_pb(p: &CompactionPlan) -> pb::CompactionPlan {
    pb::CompactionPlan {
        thread_id: p.thread_id.clone(),
        version: p.version,
        fingerprint: p.fingerprint.clone(),
        externalizations: p
            .externalizations
            .iter()
            .map(externalization_to_pb)
            .collect(),
        summarizations: p.summarizations.iter().map(summarization_to_pb).collect(),
        clearings: p.clearings.iter().map(clear_to_pb).collect(),
        drops: p.drops.iter().map(drop_to_pb).collect(),
        original_token_count: p.original_token_count,
        compacted_token_count: p.compacted_token_count,
    }
}

/// The budget report on the wire.
pub fn budget_to_pb(b: &BudgetReport) -> pb::BudgetReport {
    pb::BudgetReport {
        max_input_tokens: b.max_input_tokens,
        hard_limit: b.hard_limit,
        trigger: b.trigger,
        target: b.target,
        fixed_tokens: b.fixed_tokens,
    }
}

/// Per-reducer reports on the wire.
pub fn reducers_to_pb(r: &[ReducerReport]) -> Vec<pb::ReducerReport> {
    r.iter()
        .map(|r| pb::ReducerReport {
            name: r.name.clone(),
            tokens_freed: r.tokens_freed,
        })
        .collect()
}

/// Token counts on the wire.
pub fn tokens_to_pb(t: &RequestTokens) -> pb::TokenBreakdown {
    pb::TokenBreakdown {
        system: t.system,
        tools: t.tools,
        messages: t.messages,
        rehydrated: t.rehydrated,
        framing: t.framing,
        total: t.total,
    }
}

/// A rendered message (neutral form) on the wire.
pub fn rendered_to_pb(m: &RenderedMessage) -> pb::RenderedMessage {
    let (text, parts) = match &m.content {
        Content::Text(t) => (t.clone(), Vec::new()),
        Content::Parts(parts) => (
            String::new(),
            parts
                .iter()
                .map(|p| pb::ContentPart {
                    kind: Some(match p {
                        ContentPart::Text { text } => pb::content_part::Kind::Text(text.clone()),
                        ContentPart::Image { url } => pb::content_part::Kind::ImageUrl(url.clone()),
                    }),
                })
                .collect(),
        ),
    };
    let origin = match m.origin {
        Origin::Verbatim => pb::Origin::Verbatim,
        Origin::Cleared => pb::Origin::Cleared,
        Origin::Summary => pb::Origin::Summary,
        Origin::Externalized => pb::Origin::Externalized,
        Origin::Rehydrated => pb::Origin::Rehydrated,
    };
    pb::RenderedMessage {
        role: role_to_pb(m.role) as i32,
        text,
        parts,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| pb::ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments_json: json_text(&c.arguments),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
        tool_name: m.tool_name.clone(),
        is_error: m.is_error,
        source_id: m.source_id.clone(),
        origin: origin as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, role: pb::Role) -> pb::Message {
        pb::Message {
            id: id.into(),
            role: role as i32,
            text: "hi".into(),
            ..Default::default()
        }
    }

    #[test]
    fn unknown_role_names_the_field() {
        let mut m = msg("b", pb::Role::User);
        m.role = 42;
        let t = pb::Thread {
            id: "t".into(),
            messages: vec![msg("a", pb::Role::User), m],
        };
        match thread_from_pb(Some(t), "thread") {
            Err(ApiError::InvalidArgument { field, .. }) => {
                assert_eq!(field, "thread.messages[1].role")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_json_names_the_key() {
        let mut m = msg("a", pb::Role::Tool);
        m.tool_result = Some(pb::ToolResultEnvelope {
            key_fields: [("total".to_string(), "not json".to_string())].into(),
            ..Default::default()
        });
        let t = pb::Thread {
            id: "t".into(),
            messages: vec![m],
        };
        match thread_from_pb(Some(t), "thread") {
            Err(ApiError::InvalidArgument { field, .. }) => {
                assert_eq!(
                    field,
                    "thread.messages[0].tool_result.key_fields[\"total\"]"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn overrides_apply_and_unset_fields_keep_the_base() {
        let base = Policy::default();
        let p = apply_overrides(
            &base,
            Some(pb::PolicyOverrides {
                keep_recent_turns: Some(2),
                enable_drop: Some(false),
                ..Default::default()
            }),
        )
        .expect("valid");
        assert_eq!(p.keep_recent_turns, 2);
        assert!(!p.enable.drop);
        assert_eq!(p.trigger_ratio, base.trigger_ratio);
    }
}
