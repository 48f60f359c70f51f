//! Threads, messages, tool envelopes, tool schemas, observations and policy
//! overrides.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::model::{
    infer_outcome, Content, ContentPart, DeterminismMetadata, Durability, JsonText, Message,
    MessageMetadata, Outcome, Role, Sensitivity, Thread, ToolCall, ToolContent, ToolResultEnvelope,
    ToolSchema,
};
use crate::reduce::{Policy, ReplayCost, StandingWindow, ToolPolicy, ToolRetention};

use super::{each, optional, pb, unknown_enum, unset_enum, ConvertError, Result};

// ───────────────────────────── enums ─────────────────────────────

impl From<Role> for pb::Role {
    fn from(r: Role) -> Self {
        match r {
            Role::System => pb::Role::System,
            Role::Developer => pb::Role::Developer,
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
            Role::Tool => pb::Role::Tool,
        }
    }
}

/// Every message needs a role: unspecified is rejected.
pub(super) fn role(v: i32, field: &str) -> Result<Role> {
    match pb::Role::try_from(v) {
        Ok(pb::Role::System) => Ok(Role::System),
        Ok(pb::Role::Developer) => Ok(Role::Developer),
        Ok(pb::Role::User) => Ok(Role::User),
        Ok(pb::Role::Assistant) => Ok(Role::Assistant),
        Ok(pb::Role::Tool) => Ok(Role::Tool),
        Ok(pb::Role::Unspecified) => Err(unset_enum(field)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

impl From<Outcome> for pb::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Success => pb::Outcome::Success,
            Outcome::Failure => pb::Outcome::Failure,
            Outcome::Partial => pb::Outcome::Partial,
        }
    }
}

/// An outcome the caller stated; `None` when it left it unspecified.
pub(super) fn stated_outcome(v: i32, field: &str) -> Result<Option<Outcome>> {
    match pb::Outcome::try_from(v) {
        Ok(pb::Outcome::Unspecified) => Ok(None),
        Ok(pb::Outcome::Success) => Ok(Some(Outcome::Success)),
        Ok(pb::Outcome::Failure) => Ok(Some(Outcome::Failure)),
        Ok(pb::Outcome::Partial) => Ok(Some(Outcome::Partial)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

/// Unspecified is success where there is no output to read it from
/// (summaries' tool outcomes are always stated by the server).
pub(super) fn outcome(v: i32, field: &str) -> Result<Outcome> {
    Ok(stated_outcome(v, field)?.unwrap_or(Outcome::Success))
}

impl From<Durability> for pb::Durability {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Ephemeral => pb::Durability::Ephemeral,
            Durability::Anchoring => pb::Durability::Anchoring,
            Durability::Replayable => pb::Durability::Replayable,
            Durability::NonReplayable => pb::Durability::NonReplayable,
        }
    }
}

/// Unspecified is "the policy decides" (`None`).
fn durability(v: i32, field: &str) -> Result<Option<Durability>> {
    match pb::Durability::try_from(v) {
        Ok(pb::Durability::Unspecified) => Ok(None),
        Ok(pb::Durability::Ephemeral) => Ok(Some(Durability::Ephemeral)),
        Ok(pb::Durability::Anchoring) => Ok(Some(Durability::Anchoring)),
        Ok(pb::Durability::Replayable) => Ok(Some(Durability::Replayable)),
        Ok(pb::Durability::NonReplayable) => Ok(Some(Durability::NonReplayable)),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

fn summary_style(v: i32) -> Result<Option<crate::summarize::llm::Style>> {
    use crate::summarize::llm::Style;
    match pb::SummaryStyle::try_from(v) {
        Ok(pb::SummaryStyle::Unspecified) => Ok(None),
        Ok(pb::SummaryStyle::TaskState) => Ok(Some(Style::TaskState)),
        Ok(pb::SummaryStyle::Brief) => Ok(Some(Style::Brief)),
        Ok(pb::SummaryStyle::DecisionLog) => Ok(Some(Style::DecisionLog)),
        Ok(pb::SummaryStyle::CodeDelta) => Ok(Some(Style::CodeDelta)),
        Err(_) => Err(unknown_enum("policy.summary_style", v)),
    }
}

fn durability_to_pb(d: Option<Durability>) -> i32 {
    d.map_or(pb::Durability::Unspecified, pb::Durability::from) as i32
}

impl From<Sensitivity> for pb::Sensitivity {
    fn from(s: Sensitivity) -> Self {
        match s {
            Sensitivity::Public => pb::Sensitivity::Public,
            Sensitivity::Internal => pb::Sensitivity::Internal,
            Sensitivity::Confidential => pb::Sensitivity::Confidential,
            Sensitivity::Restricted => pb::Sensitivity::Restricted,
        }
    }
}

/// A sensitivity from the wire; unspecified is documented as internal.
pub fn sensitivity(v: i32, field: &str) -> Result<Sensitivity> {
    match pb::Sensitivity::try_from(v) {
        Ok(pb::Sensitivity::Unspecified | pb::Sensitivity::Internal) => Ok(Sensitivity::Internal),
        Ok(pb::Sensitivity::Public) => Ok(Sensitivity::Public),
        Ok(pb::Sensitivity::Confidential) => Ok(Sensitivity::Confidential),
        Ok(pb::Sensitivity::Restricted) => Ok(Sensitivity::Restricted),
        Err(_) => Err(unknown_enum(field, v)),
    }
}

/// A sensitivity on the wire, as its `i32`.
pub fn sensitivity_to_pb(s: Sensitivity) -> i32 {
    pb::Sensitivity::from(s) as i32
}

// ───────────────────────────── JSON text ─────────────────────────────

/// JSON values travel as JSON text; null is the empty string.
pub(super) fn json_text(v: &Value) -> String {
    if v.is_null() {
        String::new()
    } else {
        v.to_string()
    }
}

/// The inverse of [`json_text`]: empty (or blank) is null, anything else must parse.
pub(super) fn json_value(text: &str, field: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| ConvertError::new(field, format!("invalid JSON: {e}")))
}

/// A map of JSON values: every value is JSON text (including `null`).
pub(super) fn json_map_to_pb(m: &BTreeMap<String, Value>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
}

/// The inverse of [`json_map_to_pb`]; an invalid value names its key.
pub(super) fn json_map(m: HashMap<String, String>, field: &str) -> Result<BTreeMap<String, Value>> {
    m.into_iter()
        .map(|(k, v)| {
            let value = serde_json::from_str(&v).map_err(|e| {
                ConvertError::new(format!("{field}[{k:?}]"), format!("invalid JSON: {e}"))
            })?;
            Ok((k, value))
        })
        .collect()
}

// ───────────────────────────── content ─────────────────────────────

/// Text or parts. An empty parts list is the empty text on the wire (the
/// two render identically).
pub(super) fn content_to_pb(c: &Content) -> (String, Vec<pb::ContentPart>) {
    match c {
        Content::Text(t) => (t.clone(), Vec::new()),
        Content::Parts(parts) => (String::new(), parts.iter().map(part_to_pb).collect()),
    }
}

fn part_to_pb(p: &ContentPart) -> pb::ContentPart {
    use pb::content_part::Kind;
    pb::ContentPart {
        kind: Some(match p {
            ContentPart::Text { text } => Kind::Text(text.clone()),
            ContentPart::Image { url } => Kind::ImageUrl(url.clone()),
            ContentPart::Thinking {
                thinking,
                signature,
            } => Kind::Thinking(pb::ThinkingBlock {
                thinking: thinking.clone(),
                signature: signature.clone(),
            }),
            ContentPart::RedactedThinking { data } => {
                Kind::RedactedThinking(pb::RedactedThinkingBlock { data: data.clone() })
            }
            ContentPart::Reasoning {
                id,
                summary,
                encrypted_content,
                rest,
            } => Kind::Reasoning(pb::ReasoningItem {
                id: id.clone(),
                summary: summary.clone(),
                encrypted_content: encrypted_content.clone(),
                rest_json: rest.as_ref().map(|r| r.as_str().to_string()),
            }),
            ContentPart::Provider(p) => Kind::Provider(provider_part_to_pb(p)),
        }),
    }
}

/// The inverse of [`content_to_pb`]: text and parts are exclusive.
pub(super) fn content(text: String, parts: Vec<pb::ContentPart>) -> Result<Content> {
    if parts.is_empty() {
        return Ok(Content::Text(text));
    }
    if !text.is_empty() {
        return Err(ConvertError::new(
            "text",
            "must be empty when parts are set",
        ));
    }
    Ok(Content::Parts(each(parts, "parts")?))
}

impl TryFrom<pb::ContentPart> for ContentPart {
    type Error = ConvertError;
    fn try_from(p: pb::ContentPart) -> Result<Self> {
        use pb::content_part::Kind;
        match p.kind {
            Some(Kind::Text(text)) => Ok(ContentPart::Text { text }),
            Some(Kind::ImageUrl(url)) => Ok(ContentPart::Image { url }),
            Some(Kind::Thinking(t)) => Ok(ContentPart::Thinking {
                thinking: t.thinking,
                signature: t.signature,
            }),
            Some(Kind::RedactedThinking(r)) => Ok(ContentPart::RedactedThinking { data: r.data }),
            Some(Kind::Reasoning(r)) => Ok(ContentPart::Reasoning {
                rest: r
                    .rest_json
                    .map(|j| {
                        JsonText::from_string(j)
                            .ok()
                            .filter(|t| t.parse().is_object())
                            .ok_or_else(|| {
                                ConvertError::new("reasoning.rest_json", "must be a JSON object")
                            })
                    })
                    .transpose()?,
                id: r.id,
                summary: r.summary,
                encrypted_content: r.encrypted_content,
            }),
            Some(Kind::Provider(p)) => provider_part(p)
                .map(ContentPart::Provider)
                .map_err(|e| e.within("provider")),
            None => Err(ConvertError::new(
                "",
                "one of text, image_url, thinking, redacted_thinking, reasoning or provider is required",
            )),
        }
    }
}

fn provider_part_to_pb(p: &crate::model::ProviderPart) -> pb::ProviderPart {
    pb::ProviderPart {
        format: p.dialect.as_str().to_string(),
        r#type: p.kind.clone(),
        json: p.json.as_str().to_string(),
    }
}

/// A provider part: a known format, a type, a JSON object of that type.
fn provider_part(p: pb::ProviderPart) -> Result<crate::model::ProviderPart> {
    let dialect = crate::model::Dialect::parse(&p.format).ok_or_else(|| {
        ConvertError::new(
            "format",
            format!(
                "{:?} is not one of openai_chat, openai_responses, anthropic_messages",
                p.format
            ),
        )
    })?;
    if p.r#type.is_empty() {
        return Err(ConvertError::new("type", "is required"));
    }
    let json = JsonText::from_string(p.json)
        .map_err(|e| ConvertError::new("json", format!("is not JSON: {e}")))?;
    let v = json.parse();
    if !v.is_object() {
        return Err(ConvertError::new("json", "must be a JSON object"));
    }
    // A Responses `item_reference` may leave its type out.
    let stated = v.get("type").and_then(serde_json::Value::as_str);
    if stated.is_some_and(|t| t != p.r#type) {
        return Err(ConvertError::new(
            "type",
            format!("is {:?} but the JSON's type is {stated:?}", p.r#type),
        ));
    }
    // Held compactly, as the importers hold theirs: counted and sent alike.
    Ok(crate::model::ProviderPart {
        dialect,
        kind: p.r#type,
        json: JsonText::from_value(&v),
    })
}

// ───────────────────────────── tool calls ─────────────────────────────

impl From<&ToolCall> for pb::ToolCall {
    fn from(c: &ToolCall) -> Self {
        pb::ToolCall {
            wire: c.wire.as_deref().map(provider_part_to_pb),
            id: c.id.clone(),
            name: c.name.clone(),
            arguments_json: json_text(&c.arguments),
        }
    }
}

impl TryFrom<pb::ToolCall> for ToolCall {
    type Error = ConvertError;
    fn try_from(c: pb::ToolCall) -> Result<Self> {
        Ok(ToolCall {
            wire: c
                .wire
                .map(|w| provider_part(w).map(Box::new))
                .transpose()
                .map_err(|e| e.within("wire"))?,
            arguments: json_value(&c.arguments_json, "arguments_json")?,
            id: c.id,
            name: c.name,
        })
    }
}

// ───────────────────────────── messages ─────────────────────────────

impl From<&Thread> for pb::Thread {
    fn from(t: &Thread) -> Self {
        pb::Thread {
            id: t.id.clone(),
            messages: t.messages.iter().map(|m| pb::Message::from(&**m)).collect(),
        }
    }
}

impl TryFrom<pb::Thread> for Thread {
    type Error = ConvertError;
    fn try_from(t: pb::Thread) -> Result<Self> {
        Ok(Thread::new(t.id, each(t.messages, "messages")?))
    }
}

impl From<&Message> for pb::Message {
    fn from(m: &Message) -> Self {
        let (text, parts) = content_to_pb(&m.content);
        pb::Message {
            id: m.id.clone(),
            role: pb::Role::from(m.role) as i32,
            text,
            parts,
            tool_calls: m.tool_calls.iter().map(pb::ToolCall::from).collect(),
            tool_result: m.tool_result.as_ref().map(pb::ToolResultEnvelope::from),
            turn: m.turn,
            metadata: (m.metadata != MessageMetadata::default())
                .then(|| pb::MessageMetadata::from(&m.metadata)),
        }
    }
}

impl TryFrom<pb::Message> for Message {
    type Error = ConvertError;
    fn try_from(m: pb::Message) -> Result<Self> {
        Ok(Message {
            role: role(m.role, "role")?,
            content: content(m.text, m.parts)?,
            tool_calls: each(m.tool_calls, "tool_calls")?,
            tool_result: optional(m.tool_result, "tool_result")?,
            metadata: optional(m.metadata, "metadata")?.unwrap_or_default(),
            id: m.id,
            turn: m.turn,
        })
    }
}

impl From<&MessageMetadata> for pb::MessageMetadata {
    fn from(m: &MessageMetadata) -> Self {
        pb::MessageMetadata {
            protected: m.protected,
            label: m.label.clone(),
            sensitivity: sensitivity_to_pb(m.sensitivity),
            source: m.source.clone(),
            created_at: m.created_at.clone(),
        }
    }
}

impl TryFrom<pb::MessageMetadata> for MessageMetadata {
    type Error = ConvertError;
    fn try_from(m: pb::MessageMetadata) -> Result<Self> {
        Ok(MessageMetadata {
            protected: m.protected,
            label: m.label,
            sensitivity: sensitivity(m.sensitivity, "sensitivity")?,
            source: m.source,
            created_at: m.created_at,
        })
    }
}

impl From<&ToolResultEnvelope> for pb::ToolResultEnvelope {
    fn from(e: &ToolResultEnvelope) -> Self {
        let content = match &e.content {
            ToolContent::Text(t) => pb::tool_result_envelope::Content::ContentText(t.clone()),
            ToolContent::Json(j) => {
                pb::tool_result_envelope::Content::ContentJson(j.as_str().to_string())
            }
        };
        pb::ToolResultEnvelope {
            wire: e.wire.as_deref().map(provider_part_to_pb),
            tool_name: e.tool_name.clone(),
            tool_call_id: e.tool_call_id.clone(),
            outcome: pb::Outcome::from(e.outcome) as i32,
            content: Some(content),
            key_fields: json_map_to_pb(&e.key_fields),
            durability: durability_to_pb(e.durability),
            determinism: e.determinism.as_ref().map(pb::DeterminismMetadata::from),
            started_at: e.started_at.clone(),
            completed_at: e.completed_at.clone(),
        }
    }
}

impl TryFrom<pb::ToolResultEnvelope> for ToolResultEnvelope {
    type Error = ConvertError;
    fn try_from(e: pb::ToolResultEnvelope) -> Result<Self> {
        let content = match e.content {
            None => ToolContent::Text(String::new()),
            Some(pb::tool_result_envelope::Content::ContentText(t)) => ToolContent::Text(t),
            // Kept byte for byte: JSON tool output is passed on as it arrived.
            Some(pb::tool_result_envelope::Content::ContentJson(j)) => ToolContent::Json(
                JsonText::from_string(j)
                    .map_err(|e| ConvertError::new("content_json", format!("invalid JSON: {e}")))?,
            ),
        };
        // Unspecified: the output's own shape says (an error member, a failed
        // status, an `Error:` line), as for imported provider logs.
        let outcome =
            stated_outcome(e.outcome, "outcome")?.unwrap_or_else(|| infer_outcome(&content));
        let wire = e
            .wire
            .map(|w| provider_part(w).map(Box::new))
            .transpose()
            .map_err(|e| e.within("wire"))?;
        Ok(ToolResultEnvelope {
            wire,
            outcome,
            content,
            key_fields: json_map(e.key_fields, "key_fields")?,
            durability: durability(e.durability, "durability")?,
            determinism: e.determinism.map(DeterminismMetadata::from),
            tool_name: e.tool_name,
            tool_call_id: e.tool_call_id,
            started_at: e.started_at,
            completed_at: e.completed_at,
        })
    }
}

impl From<&DeterminismMetadata> for pb::DeterminismMetadata {
    fn from(d: &DeterminismMetadata) -> Self {
        pb::DeterminismMetadata {
            content_hash: d.content_hash.clone(),
            etag: d.etag.clone(),
            mtime: d.mtime,
            version: d.version.clone(),
        }
    }
}

/// Every field is optional on both sides, so this direction is total too.
impl From<pb::DeterminismMetadata> for DeterminismMetadata {
    fn from(d: pb::DeterminismMetadata) -> Self {
        DeterminismMetadata {
            content_hash: d.content_hash,
            etag: d.etag,
            mtime: d.mtime,
            version: d.version,
        }
    }
}

/// The `observations` map of a request.
pub fn observations_from_pb(
    o: HashMap<String, pb::DeterminismMetadata>,
) -> BTreeMap<String, DeterminismMetadata> {
    o.into_iter()
        .map(|(k, v)| (k, DeterminismMetadata::from(v)))
        .collect()
}

/// The `observations` map of a request, on the wire.
pub fn observations_to_pb(
    o: &BTreeMap<String, DeterminismMetadata>,
) -> HashMap<String, pb::DeterminismMetadata> {
    o.iter()
        .map(|(k, v)| (k.clone(), pb::DeterminismMetadata::from(v)))
        .collect()
}

// ───────────────────────────── tools ─────────────────────────────

impl From<&ToolSchema> for pb::ToolSchema {
    fn from(t: &ToolSchema) -> Self {
        pb::ToolSchema {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters_json: json_text(&t.parameters),
        }
    }
}

impl TryFrom<pb::ToolSchema> for ToolSchema {
    type Error = ConvertError;
    fn try_from(t: pb::ToolSchema) -> Result<Self> {
        if t.name.is_empty() {
            return Err(ConvertError::new("name", "must not be empty"));
        }
        Ok(ToolSchema {
            parameters: json_value(&t.parameters_json, "parameters_json")?,
            name: t.name,
            description: t.description,
        })
    }
}

// ───────────────────────────── policy ─────────────────────────────

/// The server's policy with a request's overrides applied; errors name
/// `policy.…`. Range checks are the policy's own (`Policy::validate`).
pub fn policy_from_overrides(base: &Policy, o: Option<pb::PolicyOverrides>) -> Result<Policy> {
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
    set(&mut p.keep_recent_tokens, o.keep_recent_tokens);
    set(
        &mut p.externalize_threshold_tokens,
        o.externalize_threshold_tokens,
    );
    set(&mut p.summary_chunk_tokens, o.summary_chunk_tokens);
    set(&mut p.summary_max_tokens, o.summary_max_tokens);
    set(&mut p.max_summaries, o.max_summaries);
    if let Some(style) = summary_style(o.summary_style)? {
        p.summary_style = Some(style);
    }
    if let Some(d) = durability(o.default_durability, "policy.default_durability")? {
        p.default_durability = d;
    }
    for (tool, d) in o.durability {
        let field = format!("policy.durability[{tool:?}]");
        match durability(d, &field)? {
            Some(d) => {
                p.durability.insert(tool, d);
            }
            None => return Err(ConvertError::new(field, "must be specified")),
        }
    }
    if let Some(r) = o.retention_default {
        p.retention_default = retention(r);
    }
    for (tool, r) in o.retention {
        p.retention.insert(tool, retention(r));
    }
    if let Some(t) = o.tier_caps {
        p.tier_caps = crate::reduce::TierCaps {
            tool_results_ratio: t.tool_results_ratio,
        };
    }
    if let Some(w) = o.window {
        p.window = Some(StandingWindow {
            max_turns: w.max_turns,
            max_tokens: w.max_tokens,
        });
    }
    for (tool, t) in o.tools {
        let entry = tool_policy(&tool, t)?;
        p.tools.insert(tool, entry);
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
    flag(&mut p.enable.archive, o.enable_archive);
    flag(&mut p.render.delimit_user_content, o.delimit_user_content);
    flag(&mut p.render.delimit_tool_output, o.delimit_tool_output);
    if let Some(v) = o.tool_result_max_chars {
        // 0 turns the cap off.
        p.render.tool_result_max_chars = (v > 0).then_some(v as usize);
    }
    Ok(p)
}

/// One tool's policy as a request overrides it.
fn tool_policy(tool: &str, t: pb::ToolPolicy) -> Result<ToolPolicy> {
    let replay_cost = match pb::ReplayCost::try_from(t.replay_cost) {
        Ok(pb::ReplayCost::Unspecified) => None,
        Ok(pb::ReplayCost::Free) => Some(ReplayCost::Free),
        Ok(pb::ReplayCost::Cheap) => Some(ReplayCost::Cheap),
        Ok(pb::ReplayCost::Expensive) => Some(ReplayCost::Expensive),
        Err(_) => {
            let field = format!("policy.tools[{tool:?}].replay_cost");
            return Err(unknown_enum(&field, t.replay_cost));
        }
    };
    Ok(ToolPolicy {
        must_preserve_fields: t.must_preserve_fields,
        externalize_threshold_tokens: t.externalize_threshold_tokens,
        replay_cost,
    })
}

fn retention(r: pb::ToolRetention) -> ToolRetention {
    ToolRetention {
        keep_turns: r.keep_turns,
        keep_last: r.keep_last,
        never_evict: r.never_evict,
    }
}
