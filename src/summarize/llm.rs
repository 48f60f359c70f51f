//! What an LLM summarizer sends and what it accepts back: the prompt
//! templates per style (versioned by their hash), the JSON schema of the
//! answer, the transcript of a span, the parsing and validation of an answer,
//! and the quality gate that puts back what the model left out.
//!
//! Pure: the HTTP call is made by `crate::llm`, which is outside the core.
//! Keeping this half here lets tests pin prompts and gate decisions byte for
//! byte without a server.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::extractive::{fit_to_size, is_constraint};
use super::shapes;
use super::text::{collapse_ws, dedup_key, head};
use crate::model::{
    words_of, Decision, Message, OpenItem, Priority, Role, StructuredSummary,
    SUMMARY_SCHEMA_VERSION,
};

/// How a summary is written. Each style is one prompt template; the
/// template's hash is its version, so editing a template invalidates the
/// summaries cached under the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// Where the task stands: constraints, decisions, progress, next steps.
    #[default]
    TaskState,
    /// As short as possible while keeping every constraint and identifier.
    Brief,
    /// Decisions first, each with its reason, for audit-heavy workflows.
    DecisionLog,
    /// For coding agents: files touched, what changed in them, build and test state.
    CodeDelta,
}

/// Shared by every style: the rules the answer must follow whatever its focus.
const RULES: &str = "\
You compress part of a conversation between a user and an AI agent into a structured summary \
that replaces those messages in the agent's context. The agent will only see your summary, so \
anything you leave out is forgotten.

Rules:
- Keep every instruction, constraint, preference and limit the user or system stated, with its \
exact numbers, names and scope. Keep them as close to their original wording as you can.
- Copy identifiers exactly: ids, order and ticket numbers, file paths, URLs, e-mail addresses, \
versions, error codes, amounts, dates. Put each one in `references` as well.
- Record decisions with their reason, unresolved questions and pending work.
- An earlier summary may be given: everything in it that still holds must be carried into your \
answer. Do not drop its constraints or identifiers.
- Do not invent anything. Text such as [REDACTED] stays as it is.
- Answer with one JSON object that matches the schema, and nothing else.";

/// One worked example (a few-shot prompt): how a transcript maps onto the
/// schema, with a stated limit kept word for word and identifiers copied.
/// Its domain is none an agent is likely to be in, so that the model copies
/// the form, not the content.
const EXAMPLE: &str = r#"Example.
Transcript:
[user] We are moving the greenhouse sensor logs to the new archive. Do not delete anything from the old share until the checksums match, and keep the upload under 50 MB per batch.
[assistant] Understood. I'll start with the batch for bed B-12.
[tool list_files: success] /share/sensors/B-12/2025-03.csv 41 MB
[assistant] Uploading /share/sensors/B-12/2025-03.csv as one batch (41 MB). I chose gzip over zstd because the archive only reads gzip.
[tool upload: failure] error E-409: checksum mismatch for batch 7731
Answer:
{"facts":["Do not delete anything from the old share until the checksums match.","Keep the upload under 50 MB per batch.","/share/sensors/B-12/2025-03.csv is 41 MB."],"decisions":[{"decision":"Compress batches with gzip, not zstd","rationale":"the archive only reads gzip"}],"open_items":[{"description":"Upload of batch 7731 failed with E-409 (checksum mismatch); retry before deleting anything","priority":"high"}],"current_task":"Move the greenhouse sensor logs of bed B-12 to the new archive","current_plan":["Retry batch 7731","Compare checksums","Only then delete from the old share"],"references":["B-12","/share/sensors/B-12/2025-03.csv","E-409","7731"]}"#;

impl Style {
    /// Every style.
    pub const ALL: [Style; 4] = [
        Style::TaskState,
        Style::Brief,
        Style::DecisionLog,
        Style::CodeDelta,
    ];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Style::TaskState => "task_state",
            Style::Brief => "brief",
            Style::DecisionLog => "decision_log",
            Style::CodeDelta => "code_delta",
        }
    }

    /// The style's own focus, appended to the shared rules.
    fn focus(self) -> &'static str {
        match self {
            Style::TaskState => {
                "\
Focus: the state of the task. `current_task` says what the agent is working on now, \
`current_plan` the remaining steps in order, `open_items` what is blocked or undecided."
            }
            Style::Brief => {
                "\
Focus: brevity. Use short fragments, merge repeated facts, and leave out narration and tool \
chatter, but never a constraint, a decision or an identifier."
            }
            Style::DecisionLog => {
                "\
Focus: decisions. List every decision in the order it was taken, each with the reason given \
(or an empty rationale when none was stated) and any alternative that was rejected."
            }
            Style::CodeDelta => {
                "\
Focus: code. For each file that was read, created or edited, say what changed and why, keep \
exact paths and symbol names in `references`, and record the last known build and test results \
(commands, failures, error codes) as facts."
            }
        }
    }

    /// The system prompt of this style: the rules, the focus, and one
    /// worked example of the answer's form.
    pub fn template(self) -> String {
        format!("{RULES}\n\n{}\n\n{EXAMPLE}", self.focus())
    }

    /// `style@hash`: the first 12 hex digits of SHA-256 over the template,
    /// the answer schema and the summary schema version, so a change to any
    /// of them is a new version.
    pub fn prompt_version(self) -> String {
        let mut h = Sha256::new();
        h.update(self.template().as_bytes());
        h.update(answer_schema().to_string().as_bytes());
        h.update(SUMMARY_SCHEMA_VERSION.as_bytes());
        format!("{}@{}", self.as_str(), &hex::encode(h.finalize())[..12])
    }
}

/// The JSON schema of an answer, in the strict form OpenAI's structured
/// outputs accept (every property required, no others).
pub fn answer_schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["facts", "decisions", "open_items", "current_task", "current_plan", "references"],
        "properties": {
            "facts": strings,
            "decisions": {"type": "array", "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["decision", "rationale"],
                "properties": {
                    "decision": {"type": "string"},
                    "rationale": {"type": "string"}
                }
            }},
            "open_items": {"type": "array", "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["description", "priority"],
                "properties": {
                    "description": {"type": "string"},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]}
                }
            }},
            "current_task": {"type": "string"},
            "current_plan": strings,
            "references": strings
        }
    })
}

/// Longest part of one message put into a transcript, in bytes: a huge tool
/// output says what it needs to in its first pages, and the span's archive
/// keeps the rest.
pub const MESSAGE_BYTES: usize = 12_000;

/// One message as the summarizer reads it.
fn transcript_block(m: &Message) -> String {
    let mut out = match m.role {
        Role::Tool => {
            let (name, outcome) = m.tool_result.as_ref().map_or(("tool", "success"), |e| {
                (e.tool_name.as_str(), e.outcome.as_str())
            });
            format!("[turn {}] tool result from {name} ({outcome}):\n", m.turn)
        }
        role => format!("[turn {}] {}:\n", m.turn, role_name(role)),
    };
    let text = m.archived_text();
    let body = head(&text, MESSAGE_BYTES);
    out.push_str(body.trim_end());
    if body.len() < text.len() {
        out.push_str(&format!(" …[{} more bytes]", text.len() - body.len()));
    }
    for c in &m.tool_calls {
        let args = c.arguments.to_string();
        let args = head(&args, MESSAGE_BYTES / 4);
        out.push_str(&format!("\n→ calls {}({args})", c.name));
    }
    out
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::Developer => "developer",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The span as transcript chunks of at most `max_bytes` each (a block larger
/// than that alone is cut), in thread order: a span larger than the
/// summarizer's own context is summarized chunk by chunk.
pub fn transcript_chunks(messages: &[&Message], max_bytes: usize) -> Vec<String> {
    let max_bytes = max_bytes.max(256);
    let mut chunks = Vec::new();
    let mut current = String::new();
    for m in messages {
        let block = transcript_block(m);
        let block = head(&block, max_bytes.saturating_sub(2));
        if !current.is_empty() && current.len() + block.len() + 2 > max_bytes {
            chunks.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(block);
    }
    if !current.is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// The user message of one request: the earlier summary to carry forward,
/// the transcript, and the size the answer must fit.
pub fn user_prompt(prior: &[&StructuredSummary], transcript: &str, max_chars: usize) -> String {
    let mut out = String::new();
    if !prior.is_empty() {
        out.push_str("Earlier summary (carry forward everything that still holds):\n");
        for p in prior {
            out.push_str(&p.render_as_message());
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("Messages to summarize:\n\n");
    out.push_str(transcript);
    out.push_str(&format!(
        "\n\nThe summary, rendered, must stay under {max_chars} characters: keep every \
         constraint and identifier, shorten everything else."
    ));
    out
}

/// How the answer's form is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// `response_format: json_schema` with the strict schema (OpenAI, vLLM, many gateways).
    #[default]
    JsonSchema,
    /// `response_format: json_object` (endpoints without schema support);
    /// the answer is validated all the same.
    JsonObject,
    /// No `response_format` at all; the prompt alone asks for JSON.
    None,
}

/// Sent as `seed` with temperature 0, so that endpoints that sample
/// deterministically given a seed answer the same span the same way.
pub const SEED: u64 = 20_251_126;

/// A Chat Completions request body.
pub fn chat_body(
    model: &str,
    style: Style,
    user: &str,
    max_tokens: u32,
    format: ResponseFormat,
) -> Value {
    let mut body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": style.template()},
            {"role": "user", "content": user}
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": SEED,
    });
    let rf = match format {
        ResponseFormat::JsonSchema => Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "structured_summary", "strict": true, "schema": answer_schema()}
        })),
        ResponseFormat::JsonObject => Some(json!({"type": "json_object"})),
        ResponseFormat::None => None,
    };
    if let (Some(rf), Some(obj)) = (rf, body.as_object_mut()) {
        obj.insert("response_format".into(), rf);
    }
    body
}

/// What came back, as far as the summary is concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The answer was cut off at `max_tokens`: retry asking for less.
    #[error("the answer was cut off at its token limit")]
    OverLimit,
    /// The model declined.
    #[error("the model refused: {0}")]
    Refused(String),
    /// Not a usable summary.
    #[error("invalid answer: {0}")]
    Invalid(String),
}

/// What a Chat Completions response says about itself (usage, model,
/// finish reason), for telemetry; absent fields stay `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionMeta {
    /// `usage.prompt_tokens`.
    pub input_tokens: Option<u64>,
    /// `usage.completion_tokens`.
    pub output_tokens: Option<u64>,
    /// `model`.
    pub response_model: Option<String>,
    /// `choices[0].finish_reason`.
    pub finish_reason: Option<String>,
}

/// Reads [`CompletionMeta`] from a parsed response body.
pub fn completion_meta(v: &Value) -> CompletionMeta {
    let usage = v.get("usage");
    let short = |s: &str| head(s, 128).to_string();
    CompletionMeta {
        input_tokens: usage
            .and_then(|u| u.get("prompt_tokens"))
            .and_then(Value::as_u64),
        output_tokens: usage
            .and_then(|u| u.get("completion_tokens"))
            .and_then(Value::as_u64),
        response_model: v.get("model").and_then(Value::as_str).map(short),
        finish_reason: v
            .get("choices")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
            .map(short),
    }
}

/// Reads the summary out of a Chat Completions response body.
pub fn parse_completion(body: &[u8]) -> Result<String, AnswerError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| AnswerError::Invalid(format!("response is not JSON: {e}")))?;
    completion_content(&v)
}

/// [`parse_completion`] of a parsed body.
pub fn completion_content(v: &Value) -> Result<String, AnswerError> {
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| AnswerError::Invalid("response has no choices".into()))?;
    let message = choice.get("message");
    if let Some(r) = message
        .and_then(|m| m.get("refusal"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        return Err(AnswerError::Refused(head(r, 200).to_string()));
    }
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => return Err(AnswerError::OverLimit),
        Some("content_filter") => {
            return Err(AnswerError::Refused("stopped by the content filter".into()))
        }
        _ => {}
    }
    message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .map(str::to_string)
        .ok_or_else(|| AnswerError::Invalid("the message has no content".into()))
}

/// An answer as the schema defines it (lenient on absent fields: endpoints
/// without schema support may leave empty sections out).
#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    facts: Vec<String>,
    #[serde(default)]
    decisions: Vec<AnswerDecision>,
    #[serde(default)]
    open_items: Vec<AnswerItem>,
    #[serde(default)]
    current_task: Option<String>,
    #[serde(default)]
    current_plan: Vec<String>,
    #[serde(default)]
    references: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct AnswerDecision {
    decision: String,
    #[serde(default)]
    rationale: String,
}

#[derive(Debug, Deserialize)]
struct AnswerItem {
    description: String,
    #[serde(default)]
    priority: Option<String>,
}

/// Longest entry accepted from a model, in chars; longer ones are cut.
const ENTRY_CHARS: usize = 1_000;
/// Most entries accepted per section; a model that lists more is looping.
const SECTION_ENTRIES: usize = 200;

/// Parses and validates an answer into a summary of `template`'s span
/// (whose artifacts and tool outcomes it keeps: those are structure, not
/// prose). Entries are trimmed, whitespace collapsed, empty ones dropped.
pub fn parse_answer(
    content: &str,
    template: &StructuredSummary,
    turn: u32,
) -> Result<StructuredSummary, AnswerError> {
    let text = strip_fence(content.trim());
    let answer: Answer = serde_json::from_str(text)
        .map_err(|e| AnswerError::Invalid(format!("not a summary object: {e}")))?;
    let clean = |s: &str| -> Option<String> {
        let c = collapse_ws(s);
        (!c.is_empty()).then(|| super::text::cap_chars(&c, ENTRY_CHARS))
    };
    let too_many = [
        answer.facts.len(),
        answer.decisions.len(),
        answer.open_items.len(),
        answer.current_plan.len(),
        answer.references.len(),
    ]
    .into_iter()
    .any(|n| n > SECTION_ENTRIES);
    if too_many {
        return Err(AnswerError::Invalid(format!(
            "a section has more than {SECTION_ENTRIES} entries"
        )));
    }
    let mut out = StructuredSummary::empty(template.span.clone());
    out.artifacts = template.artifacts.clone();
    out.tool_outcomes = template.tool_outcomes.clone();
    out.facts = answer.facts.iter().filter_map(|f| clean(f)).collect();
    out.decisions = answer
        .decisions
        .iter()
        .filter_map(|d| {
            Some(Decision {
                decision: clean(&d.decision)?,
                rationale: clean(&d.rationale).unwrap_or_default(),
                turn,
                // A model's decision names no message to date it by; the
                // extractive ones the gate merges in keep theirs.
                timestamp: None,
            })
        })
        .collect();
    out.open_items = answer
        .open_items
        .iter()
        .filter_map(|o| {
            let priority = match o.priority.as_deref() {
                Some("high") => Priority::High,
                Some("low") => Priority::Low,
                _ => Priority::Medium,
            };
            Some(OpenItem {
                description: clean(&o.description)?,
                context: String::new(),
                priority,
            })
        })
        .collect();
    out.current_task = answer.current_task.as_deref().and_then(clean);
    out.current_plan = answer
        .current_plan
        .iter()
        .filter_map(|s| clean(s))
        .collect();
    out.references = answer.references.iter().filter_map(|s| clean(s)).collect();
    let said_nothing = out.facts.is_empty()
        && out.decisions.is_empty()
        && out.open_items.is_empty()
        && out.current_task.is_none()
        && out.current_plan.is_empty()
        && out.references.is_empty();
    if said_nothing {
        return Err(AnswerError::Invalid("the summary is empty".into()));
    }
    Ok(out)
}

/// A JSON answer wrapped in a Markdown fence (models without a response
/// format often do that).
fn strip_fence(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```") else {
        return s;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    rest.trim().strip_suffix("```").unwrap_or(rest).trim()
}

/// What the gate did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateReport {
    /// Entries of the reference the answer lacked and that were merged in.
    pub merged: u32,
}

/// Everything a summary says, lower-cased and whitespace-collapsed, for
/// containment checks.
fn said(s: &StructuredSummary) -> String {
    dedup_key(&s.render_as_message())
}

/// Whether `entry` (a fact, decision or open item of the reference) is in
/// `text`/`words`: a binding rule must be there in its own words
/// (paraphrase is where constraints drift); anything else is there when
/// every value it names (ids, paths, amounts, codes) is, or failing that,
/// when its text is.
fn carried(entry: &str, text: &str, words: &HashSet<String>) -> bool {
    let key = dedup_key(strip_tag(entry));
    if key.is_empty() || text.contains(&key) {
        return true;
    }
    if is_constraint(entry) {
        return false;
    }
    let values: Vec<String> = shapes::scan(entry)
        .into_iter()
        .filter(|(shape, _)| *shape != shapes::Shape::Symbol)
        .map(|(_, v)| v.to_lowercase())
        .collect();
    !values.is_empty() && values.iter().all(|v| words.contains(v) || text.contains(v))
}

/// The extractive summarizer tags what the assistant or a tool said; a
/// model's paraphrase never carries the tag.
fn strip_tag(entry: &str) -> &str {
    if let Some(rest) = entry.strip_prefix("assistant: ") {
        return rest;
    }
    if let Some(rest) = entry.strip_prefix("tool ") {
        if let Some((_, said)) = rest.split_once(": ") {
            return said;
        }
    }
    entry
}

/// The quality gate: every fact, decision, open item and reference the
/// extractive pass found (`reference`) must be in the model's summary;
/// what is missing is merged in, in the reference's order, so the result is
/// deterministic. The result is then fitted to `max_chars` the way every
/// summary is (least valuable entries left out first, counted in `omitted`).
pub fn gate(
    candidate: StructuredSummary,
    reference: &StructuredSummary,
    max_chars: usize,
) -> (StructuredSummary, GateReport) {
    let mut out = candidate;
    let mut report = GateReport::default();
    let text = said(&out);
    let words: HashSet<String> = words_of(&text).into_iter().map(str::to_string).collect();
    for f in &reference.facts {
        if !carried(f, &text, &words) {
            out.facts.push(f.clone());
            report.merged += 1;
        }
    }
    for d in &reference.decisions {
        if !carried(&d.decision, &text, &words) {
            out.decisions.push(d.clone());
            report.merged += 1;
        }
    }
    for o in &reference.open_items {
        if !carried(&o.description, &text, &words) {
            out.open_items.push(o.clone());
            report.merged += 1;
        }
    }
    for r in &reference.references {
        let lower = r.to_lowercase();
        if !words.contains(&lower) && !text.contains(&lower) {
            out.references.push(r.clone());
            report.merged += 1;
        }
    }
    // What a person typed is quoted, never left to the model's wording.
    if out.requests.is_empty() {
        out.requests.clone_from(&reference.requests);
    }
    out.omitted = out.omitted.max(reference.omitted);
    (fit_to_size(out, max_chars), report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SpanReference;

    fn span() -> SpanReference {
        SpanReference {
            message_ids: vec!["m1".into(), "m2".into()],
            first_turn: 1,
            last_turn: 2,
        }
    }

    #[test]
    fn every_style_has_its_own_version_and_the_version_follows_the_template() {
        let versions: HashSet<String> = Style::ALL.iter().map(|s| s.prompt_version()).collect();
        assert_eq!(versions.len(), 4);
        let v = Style::Brief.prompt_version();
        assert!(
            v.starts_with("brief@") && v.len() == "brief@".len() + 12,
            "{v}"
        );
        assert_eq!(v, Style::Brief.prompt_version(), "deterministic");
    }

    #[test]
    fn every_template_carries_a_worked_example_that_is_a_valid_answer() {
        let answer = EXAMPLE.split_once("Answer:\n").expect("an answer").1;
        let template = StructuredSummary::empty(span());
        let s = parse_answer(answer, &template, 2).expect("the example parses as an answer");
        assert!(s.facts.iter().any(|f| f.contains("under 50 MB")));
        assert_eq!(s.decisions.len(), 1);
        // Every key of the strict schema, no other.
        let v: Value = serde_json::from_str(answer).expect("JSON");
        let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
        let schema = answer_schema();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(keys.len(), required.len());
        assert!(keys.iter().all(|k| required.contains(&k.as_str())));
        for style in Style::ALL {
            assert!(style.template().ends_with(EXAMPLE));
        }
    }

    #[test]
    fn sampling_is_pinned_temperature_zero_and_a_fixed_seed() {
        let body = chat_body("m", Style::Brief, "hi", 500, ResponseFormat::JsonObject);
        assert_eq!(body["temperature"], 0);
        assert_eq!(body["seed"], SEED);
    }

    #[test]
    fn the_request_asks_for_the_strict_schema_or_what_the_endpoint_supports() {
        let body = chat_body("m", Style::TaskState, "hi", 500, ResponseFormat::JsonSchema);
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        let schema = &body["response_format"]["json_schema"]["schema"];
        let required = schema["required"].as_array().expect("required").len();
        let props = schema["properties"].as_object().expect("properties").len();
        assert_eq!(required, props, "strict mode needs every property required");
        let plain = chat_body("m", Style::TaskState, "hi", 500, ResponseFormat::None);
        assert!(plain.get("response_format").is_none());
        assert_eq!(plain["max_tokens"], 500);
    }

    #[test]
    fn completion_meta_reads_usage_model_and_finish() {
        // As the client reads it: a body that is not JSON has no meta.
        let completion_meta = |body: &[u8]| {
            serde_json::from_slice::<Value>(body)
                .map(|v| super::completion_meta(&v))
                .unwrap_or_default()
        };
        let body = br#"{"model":"gpt-4o-mini-2024","usage":{"prompt_tokens":812,"completion_tokens":97},"choices":[{"message":{"content":"{}"},"finish_reason":"stop"}]}"#;
        let m = completion_meta(body);
        assert_eq!(m.input_tokens, Some(812));
        assert_eq!(m.output_tokens, Some(97));
        assert_eq!(m.response_model.as_deref(), Some("gpt-4o-mini-2024"));
        assert_eq!(m.finish_reason.as_deref(), Some("stop"));
        assert_eq!(completion_meta(b"<html>"), CompletionMeta::default());
        assert_eq!(completion_meta(br#"{"choices":[]}"#).input_tokens, None);
    }

    #[test]
    fn completions_are_classified() {
        let ok =
            br#"{"choices":[{"message":{"content":"{\"facts\":[]}"},"finish_reason":"stop"}]}"#;
        assert_eq!(parse_completion(ok).expect("ok"), "{\"facts\":[]}");
        let cut = br#"{"choices":[{"message":{"content":"{\"fa"},"finish_reason":"length"}]}"#;
        assert_eq!(parse_completion(cut), Err(AnswerError::OverLimit));
        let refused = br#"{"choices":[{"message":{"content":null,"refusal":"I can't help"},"finish_reason":"stop"}]}"#;
        assert!(matches!(
            parse_completion(refused),
            Err(AnswerError::Refused(_))
        ));
        assert!(matches!(
            parse_completion(b"<html>"),
            Err(AnswerError::Invalid(_))
        ));
        assert!(matches!(
            parse_completion(br#"{"choices":[]}"#),
            Err(AnswerError::Invalid(_))
        ));
    }

    #[test]
    fn answers_are_validated_and_cleaned() {
        let template = StructuredSummary::empty(span());
        let s = parse_answer(
            "```json\n{\"facts\":[\"  Budget  is $4,000 \", \"\"],\"decisions\":[{\"decision\":\"Use Postgres\",\"rationale\":\"\"}],\"open_items\":[{\"description\":\"pick a region\",\"priority\":\"high\"}],\"current_task\":\"\",\"current_plan\":[],\"references\":[\"ORD-1\"]}\n```",
            &template,
            2,
        )
        .expect("parses");
        assert_eq!(s.facts, vec!["Budget is $4,000"]);
        assert_eq!(s.decisions[0].turn, 2);
        assert_eq!(s.open_items[0].priority, Priority::High);
        assert_eq!(s.current_task, None);
        assert!(matches!(
            parse_answer("{\"facts\": \"one\"}", &template, 2),
            Err(AnswerError::Invalid(_))
        ));
        assert!(matches!(
            parse_answer("{\"facts\": []}", &template, 2),
            Err(AnswerError::Invalid(_))
        ));
        assert!(matches!(
            parse_answer("Sure! Here is the summary.", &template, 2),
            Err(AnswerError::Invalid(_))
        ));
    }

    #[test]
    fn the_gate_puts_back_rules_and_values_a_paraphrase_lost() {
        let mut reference = StructuredSummary::empty(span());
        reference.facts = vec![
            "Never restart the primary database during business hours.".into(),
            "tool orders: order ORD-48213 shipped to Lyon".into(),
            "The report goes to finance on Fridays.".into(),
        ];
        reference.references = vec!["ORD-48213".into(), "src/db/pool.rs".into()];
        let mut candidate = StructuredSummary::empty(span());
        candidate.facts = vec![
            "Avoid restarting the main DB while the business is open.".into(),
            "Order ord-48213 has shipped.".into(),
            "The report goes to finance on Fridays".into(),
        ];
        let (gated, report) = gate(candidate, &reference, 10_000);
        // The paraphrased rule is back verbatim; the order id was carried
        // (case aside); the path was not.
        assert!(gated
            .facts
            .iter()
            .any(|f| f == "Never restart the primary database during business hours."));
        assert!(gated.references.contains(&"src/db/pool.rs".to_string()));
        assert!(!gated.references.contains(&"ORD-48213".to_string()));
        assert_eq!(report.merged, 2);
        let (again, report) = gate(gated.clone(), &reference, 10_000);
        assert_eq!(report.merged, 0, "a gated summary passes the gate");
        assert_eq!(again, gated);
    }

    #[test]
    fn transcripts_are_chunked_by_size_in_thread_order() {
        let msgs: Vec<Message> = (0..20)
            .map(|i| Message {
                id: format!("m{i}"),
                role: Role::User,
                content: crate::model::Content::Text(format!("{i} {}", "word ".repeat(60))),
                tool_calls: Vec::new(),
                tool_result: None,
                turn: i,
                metadata: Default::default(),
            })
            .collect();
        let refs: Vec<&Message> = msgs.iter().collect();
        let one = transcript_chunks(&refs, 1_000_000);
        assert_eq!(one.len(), 1);
        let chunks = transcript_chunks(&refs, 1_000);
        assert!(chunks.len() > 5);
        assert!(chunks.iter().all(|c| c.len() <= 1_000));
        assert!(chunks[0].starts_with("[turn 0] user:\n0 "));
        assert_eq!(chunks.concat().matches("user:").count(), 20);
    }
}
