//! Messages of an agent thread: the immutable input every plan refers to.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who said a message. Providers reject unknown roles, so the set is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the platform.
    System,
    /// Instructions from the application developer (OpenAI's newer system role).
    Developer,
    /// The human (or the calling application) speaking.
    User,
    /// The model.
    Assistant,
    /// A tool result, always paired with an assistant tool call.
    Tool,
}

impl Role {
    /// The lower-case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire name; `None` for anything else so callers can name the field.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One part of a multi-part message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL (or data URL); counted with a fixed estimate.
    Image {
        /// Where the image is.
        url: String,
    },
    /// Anthropic extended thinking, kept byte for byte: during a tool loop
    /// the API rejects a turn whose thinking blocks were changed or dropped.
    Thinking {
        /// The thinking text as the model produced it.
        thinking: String,
        /// The signature that proves it unmodified.
        signature: String,
    },
    /// Anthropic thinking the API returned encrypted.
    RedactedThinking {
        /// Opaque, passed back unchanged.
        data: String,
    },
    /// An OpenAI Responses reasoning item, passed back with the calls it
    /// preceded.
    Reasoning {
        /// The item id (`rs_…`).
        id: String,
        /// Summary texts.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// Opaque reasoning state, passed back unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        /// The item's other keys (its `content`, `status`), as a JSON
        /// object: sent back with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rest: Option<JsonText>,
    },
    /// An item or block of a provider's own vocabulary, carried as it came
    /// and sent back only to its format.
    Provider(super::ProviderPart),
}

impl ContentPart {
    /// A model's own reasoning (thinking or reasoning items): sent back only
    /// to the provider that produced it, never part of the conversation text.
    pub fn is_reasoning(&self) -> bool {
        matches!(
            self,
            ContentPart::Thinking { .. }
                | ContentPart::RedactedThinking { .. }
                | ContentPart::Reasoning { .. }
        )
    }

    /// Bytes it carries, for size limits.
    pub fn byte_len(&self) -> usize {
        match self {
            ContentPart::Text { text } => text.len(),
            ContentPart::Image { url } => url.len(),
            ContentPart::Thinking {
                thinking,
                signature,
            } => thinking.len() + signature.len(),
            ContentPart::RedactedThinking { data } => data.len(),
            ContentPart::Provider(p) => p.byte_len(),
            ContentPart::Reasoning {
                id,
                summary,
                encrypted_content,
                rest,
            } => {
                id.len()
                    + summary.iter().map(String::len).sum::<usize>()
                    + encrypted_content.as_ref().map_or(0, String::len)
                    + rest.as_ref().map_or(0, |r| r.as_str().len())
            }
        }
    }
}

/// Message content: a plain string, or a list of parts as providers accept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// The common case.
    Text(String),
    /// Multi-part content (text and images).
    Parts(Vec<ContentPart>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl Content {
    /// Visible content as one string with images as text references: how
    /// content goes where only text is taken (assistant, system, developer
    /// and tool output for some providers, imported tool output), and how it
    /// is counted there. Blank pieces are left out; thinking and reasoning
    /// are not text.
    pub fn flat_text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Parts(parts) => {
                join_parts(parts, |url| Some(super::image::reference(url).into()), true)
            }
        }
    }

    /// The text of the content; parts are joined by newlines, images and
    /// reasoning omitted.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Content::Text(s) => Cow::Borrowed(s),
            Content::Parts(parts) => Cow::Owned(join_parts(parts, |_| None, false)),
        }
    }

    /// Every part as text, images as `[image: <url>]` references: what an
    /// artifact stores, so moving content out of the prompt loses no part.
    pub fn text_with_references(&self) -> Cow<'_, str> {
        match self {
            Content::Text(s) => Cow::Borrowed(s),
            Content::Parts(parts) => Cow::Owned(join_parts(
                parts,
                |url| Some(format!("[image: {url}]").into()),
                false,
            )),
        }
    }

    /// The content without the model's reasoning parts: what a provider that
    /// did not produce them is sent. Only reasoning left gives empty text.
    pub fn without_reasoning(self) -> Content {
        match self {
            Content::Parts(parts) if parts.iter().any(ContentPart::is_reasoning) => {
                let visible: Vec<ContentPart> =
                    parts.into_iter().filter(|p| !p.is_reasoning()).collect();
                if visible.is_empty() {
                    Content::Text(String::new())
                } else {
                    Content::Parts(visible)
                }
            }
            other => other,
        }
    }

    /// The reasoning parts, in order.
    pub fn reasoning(&self) -> impl Iterator<Item = &ContentPart> {
        let parts: &[ContentPart] = match self {
            Content::Parts(parts) => parts,
            Content::Text(_) => &[],
        };
        parts.iter().filter(|p| p.is_reasoning())
    }

    /// Number of image parts (each costs a fixed token estimate).
    pub fn image_count(&self) -> usize {
        match self {
            Content::Text(_) => 0,
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| matches!(p, ContentPart::Image { .. }))
                .count(),
        }
    }

    /// True when there is neither text nor an image.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(s) => s.is_empty(),
            Content::Parts(parts) => parts.is_empty(),
        }
    }

    /// Byte length of the text (for size limits).
    pub fn byte_len(&self) -> usize {
        match self {
            Content::Text(s) => s.len(),
            Content::Parts(parts) => parts.iter().map(ContentPart::byte_len).sum(),
        }
    }
}

/// A tool call requested by the assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned call id that the result echoes.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON value (OpenAI sends them as a JSON string; we parse it).
    /// A custom (free-form) tool's input is a JSON string.
    #[serde(default)]
    pub arguments: Value,
    /// The call as its provider wrote it, when it holds more than the
    /// fields above (a Responses item's `id`, `status` or `namespace`,
    /// Anthropic's `cache_control`) or is not a function call (a custom
    /// tool, Chat's legacy `function_call`): sent back with them in its
    /// own format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<Box<super::ProviderPart>>,
}

/// The call and output types of custom (free-form input) tools.
pub const CUSTOM_CALL_KINDS: &[&str] = &["custom_tool_call", "custom"];

impl ToolCall {
    /// A function call with no provider form of its own.
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            wire: None,
        }
    }

    /// Whether it calls a custom tool (free-form text input): only OpenAI
    /// formats have those.
    pub fn is_custom(&self) -> bool {
        self.wire
            .as_ref()
            .is_some_and(|w| CUSTOM_CALL_KINDS.contains(&w.kind.as_str()))
    }

    /// Chat's legacy `function_call` (no id on the wire).
    pub fn is_legacy_function(&self) -> bool {
        self.wire
            .as_ref()
            .is_some_and(|w| w.kind == "function_call" && w.dialect == super::Dialect::OpenAiChat)
    }

    /// The arguments as the JSON text OpenAI formats send: an object's text,
    /// `{}` for none.
    pub fn arguments_json(&self) -> String {
        if self.arguments.is_null() {
            "{}".to_string()
        } else {
            serde_json::to_string(&self.arguments).unwrap_or_default()
        }
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The tool did what was asked.
    #[default]
    Success,
    /// The tool failed; failures are never cleared (the model needs the error).
    Failure,
    /// Some of the work was done.
    Partial,
}

impl Outcome {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Partial => "partial",
        }
    }
}

/// How safely a tool result can be removed from the prompt: what can be
/// fetched again may go, what cannot must stay or be externalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Safe to clear entirely (listings, debug output).
    Ephemeral,
    /// Clear only down to its key fields (order ids, decisions).
    Anchoring,
    /// Clearable when the source is verifiably unchanged (re-running gives the same).
    Replayable,
    /// Must be kept or externalized (paid, rate-limited, time-sensitive).
    NonReplayable,
}

impl Durability {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Ephemeral => "ephemeral",
            Durability::Anchoring => "anchoring",
            Durability::Replayable => "replayable",
            Durability::NonReplayable => "non_replayable",
        }
    }
}

/// What a replayable tool saw, so that drift can be detected before clearing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeterminismMetadata {
    /// Hash of the data read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// HTTP ETag of a remote resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Modification time (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<f64>,
    /// API or schema version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl DeterminismMetadata {
    /// True when nothing was captured (then drift cannot be ruled out).
    pub fn is_empty(&self) -> bool {
        self.content_hash.is_none()
            && self.etag.is_none()
            && self.mtime.is_none()
            && self.version.is_none()
    }

    /// Whether the source drifted since `self` was captured. Fails safe: when no
    /// comparable field exists the answer is "changed".
    pub fn has_changed(&self, current: &DeterminismMetadata) -> bool {
        if let (Some(a), Some(b)) = (&self.content_hash, &current.content_hash) {
            return a != b;
        }
        if let (Some(a), Some(b)) = (&self.etag, &current.etag) {
            return a != b;
        }
        if let (Some(a), Some(b)) = (self.mtime, current.mtime) {
            return a != b;
        }
        if let (Some(a), Some(b)) = (&self.version, &current.version) {
            return a != b;
        }
        true
    }
}

/// JSON tool output kept as the exact text it arrived in. Rendering, hashing
/// and counting then read the text as is (re-serializing a parsed tree was the
/// largest cost of a warm compaction); it is parsed only where its structure
/// is needed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<serde_json::value::RawValue>);

impl JsonText {
    /// Validates and wraps JSON text (kept byte for byte).
    pub fn from_string(text: String) -> Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(JsonText)
    }

    /// Compact JSON text of a value.
    pub fn from_value(v: &Value) -> Self {
        // A Value always serializes, and its output is always valid JSON.
        let raw = serde_json::value::to_raw_value(v)
            .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned());
        JsonText(raw)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The parsed value.
    pub fn parse(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<Value> for JsonText {
    fn from(v: Value) -> Self {
        JsonText::from_value(&v)
    }
}

/// Tool output: text, or structured JSON (kept structured so post-processing can
/// pick fields instead of guessing from text). In JSON a string is text; any
/// other value is JSON output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolContent {
    /// Plain text output.
    Text(String),
    /// Structured output.
    Json(JsonText),
}

impl<'de> Deserialize<'de> for ToolContent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Capture the raw text once; a JSON string becomes Text, anything else Json.
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        if raw.get().trim_start().starts_with('"') {
            let s: String = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
            Ok(ToolContent::Text(s))
        } else {
            Ok(ToolContent::Json(JsonText(raw)))
        }
    }
}

impl Default for ToolContent {
    fn default() -> Self {
        ToolContent::Text(String::new())
    }
}

impl ToolContent {
    /// The content as the text a provider receives (JSON as it arrived).
    pub fn to_text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ToolContent::Text(s) => Cow::Borrowed(s),
            ToolContent::Json(v) => Cow::Borrowed(v.as_str()),
        }
    }

    /// JSON output from a value.
    pub fn json(v: Value) -> Self {
        ToolContent::Json(JsonText::from(v))
    }
}

/// The structured envelope around every tool result: outcome, key fields and
/// durability travel with the content, so a cleared result still keeps what
/// the agent needs (without them it would have nothing to keep).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultEnvelope {
    /// Tool name (must match the call's name).
    pub tool_name: String,
    /// The call this result answers.
    pub tool_call_id: String,
    /// How the call ended.
    #[serde(default)]
    pub outcome: Outcome,
    /// The output.
    #[serde(default)]
    pub content: ToolContent,
    /// Fields that must survive any compaction (ids, totals, errors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_fields: BTreeMap<String, Value>,
    /// Durability; `None` means the policy's default for this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// What a replayable tool saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub determinism: Option<DeterminismMetadata>,
    /// RFC 3339 start time, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 completion time, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// The result as its provider wrote it, when it holds more than its
    /// text (an item `id` or `status`, `cache_control`, image or document
    /// blocks, a Chat `name`) or answers a custom tool or a legacy function
    /// call: sent back as it came in its own format while its content is
    /// unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<Box<super::ProviderPart>>,
}

impl ToolResultEnvelope {
    /// Appends `Key data: {…}` (the key fields as JSON) on a line of its
    /// own unless `out` already names them: what every stub, clear and
    /// compression of the result keeps.
    pub fn push_key_data(&self, out: &mut String) {
        if self.key_fields.is_empty() {
            return;
        }
        let kf = serde_json::to_string(&self.key_fields).unwrap_or_default();
        if !out.contains(&kf) {
            out.push_str("\nKey data: ");
            out.push_str(&kf);
        }
    }
}

/// Data classification of a message; gates who may read it back once externalized.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    /// Anyone in the tenant.
    Public,
    /// Default.
    #[default]
    Internal,
    /// Needs explicit permission to read back.
    Confidential,
    /// Highest; never auto-rehydrated.
    Restricted,
}

impl Sensitivity {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Sensitivity::Public => "public",
            Sensitivity::Internal => "internal",
            Sensitivity::Confidential => "confidential",
            Sensitivity::Restricted => "restricted",
        }
    }
}

/// Per-message metadata that steers compaction.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MessageMetadata {
    /// Never removed, summarized or cleared (policies, acceptance criteria).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// Human label shown in reports ("Security Policy").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Classification of the content.
    #[serde(default)]
    pub sensitivity: Sensitivity,
    /// Where user-supplied content came from; rendered in `<user_context id=… source=…>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When it was said, as the caller recorded it (RFC 3339): summaries
    /// date their decisions by it and dropped spans carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// Whether `s` is an RFC 3339 date-time (`2026-01-05T10:00:00Z`,
/// `2026-01-05T10:00:00.250+01:00`): shape only, as it is informational.
pub fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i).is_some_and(|x| x.eq_ignore_ascii_case(&c));
    if !(digits(0..4) && at(4, b'-') && digits(5..7) && at(7, b'-') && digits(8..10)) {
        return false;
    }
    if !((at(10, b'T') || at(10, b' '))
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19))
    {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i) {
        Some(b'Z') | Some(b'z') => i + 1 == b.len(),
        Some(b'+') | Some(b'-') => {
            digits(i + 1..i + 3) && at(i + 3, b':') && digits(i + 4..i + 6) && i + 6 == b.len()
        }
        _ => false,
    }
}

/// One entry of a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique within the thread; plans refer to messages only by id.
    pub id: String,
    /// Who said it.
    pub role: Role,
    /// The text or parts. Empty for tool messages (their content is in the envelope).
    #[serde(default, skip_serializing_if = "Content::is_empty")]
    pub content: Content,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The result envelope of a tool message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolResultEnvelope>,
    /// Turn number: non-decreasing through the thread; a user message usually opens a turn.
    #[serde(default)]
    pub turn: u32,
    /// Compaction metadata.
    #[serde(default, skip_serializing_if = "is_default_metadata")]
    pub metadata: MessageMetadata,
}

fn is_default_metadata(m: &MessageMetadata) -> bool {
    *m == MessageMetadata::default()
}

impl Message {
    /// The text this message contributes to a prompt (tool results: envelope content).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.tool_result {
            Some(env) => env.content.to_text(),
            None => self.content.text(),
        }
    }

    /// Everything the message carries as text, images as references: what
    /// an artifact stores when the message leaves the prompt.
    pub fn archived_text(&self) -> std::borrow::Cow<'_, str> {
        match &self.tool_result {
            Some(env) => env.content.to_text(),
            None => self.content.text_with_references(),
        }
    }

    /// Everything the message carries as text, for searching it: what an
    /// artifact stores ([`Self::archived_text`]) and each tool call's name
    /// and arguments.
    pub fn searchable_text(&self) -> String {
        let mut s = self.archived_text().into_owned();
        for c in &self.tool_calls {
            s.push('\n');
            s.push_str(&c.name);
            s.push(' ');
            s.push_str(&c.arguments_json());
        }
        s
    }

    /// Its provider parts of a type compactd does not know, with their
    /// index among the parts.
    pub fn unknown_parts(&self) -> impl Iterator<Item = (usize, &super::ProviderPart)> {
        let parts: &[ContentPart] = match &self.content {
            Content::Parts(parts) => parts,
            Content::Text(_) => &[],
        };
        parts.iter().enumerate().filter_map(|(k, p)| match p {
            ContentPart::Provider(p) if !p.dialect.knows(&p.kind) => Some((k, p)),
            _ => None,
        })
    }

    /// At least [`Self::byte_len`], without formatting any tool call's
    /// arguments: a size check needs the exact size only near its limit,
    /// and every message of a thread is checked on every call.
    pub fn byte_len_bound(&self) -> usize {
        self.sized(json_len_bound)
    }

    /// Byte size of everything the message carries, for size limits.
    pub fn byte_len(&self) -> usize {
        self.sized(json_len)
    }

    /// The content's, ids', names' and result's bytes, with each call's
    /// arguments sized by `args`.
    fn sized(&self, args: fn(&Value) -> usize) -> usize {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| c.id.len() + c.name.len() + args(&c.arguments))
            .sum();
        let result = self
            .tool_result
            .as_ref()
            .map(|e| e.content.to_text().len())
            .unwrap_or(0);
        self.content.byte_len() + calls + result
    }
}

/// The longest text a JSON number (i64, u64 or f64) formats to.
const NUMBER_TEXT_MAX: usize = 24;

/// At least the JSON text's length of `v`, found without formatting it:
/// every string as if each byte were escaped.
fn json_len_bound(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        // Formatting each number to measure it allocated.
        Value::Number(_) => NUMBER_TEXT_MAX,
        Value::String(s) => 2 + 6 * s.len(),
        Value::Array(items) => 2 + items.iter().map(|i| json_len_bound(i) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| 2 + 6 * k.len() + 1 + json_len_bound(v) + 1)
                .sum::<usize>()
        }
    }
}

/// Length of a value's JSON text, without building the text.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// A tool the model may call, as sent with the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// JSON Schema of its arguments.
    #[serde(default)]
    pub parameters: Value,
}

/// Text parts, images (as `image` writes them; `None` leaves one out) and
/// provider parts' text joined by newlines; thinking and reasoning are
/// never text. With
/// `skip_blank`, blank pieces are left out.
fn join_parts<'a>(
    parts: &'a [ContentPart],
    image: impl Fn(&'a str) -> Option<Cow<'a, str>>,
    skip_blank: bool,
) -> String {
    let mut out = String::new();
    let mut first = true;
    for p in parts {
        let piece = match p {
            ContentPart::Text { text } => Cow::Borrowed(text.as_str()),
            ContentPart::Image { url } => match image(url) {
                Some(piece) => piece,
                None => continue,
            },
            ContentPart::Provider(p) => {
                Cow::Owned(p.text_equivalent().unwrap_or_else(|| p.readable_text()))
            }
            ContentPart::Thinking { .. }
            | ContentPart::RedactedThinking { .. }
            | ContentPart::Reasoning { .. } => continue,
        };
        if skip_blank && piece.trim().is_empty() {
            continue;
        }
        if !first {
            out.push('\n');
        }
        first = false;
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod rfc3339_tests {
    use super::is_rfc3339;

    #[test]
    fn rfc3339_shapes() {
        for ok in [
            "2026-01-05T10:00:00Z",
            "2026-01-05t10:00:00z",
            "2026-01-05 10:00:00+01:00",
            "2026-01-05T10:00:00.123456-08:00",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "",
            "2026-01-05",
            "2026-01-05T10:00:00",
            "2026-01-05T10:00:00.Z",
            "2026-1-05T10:00:00Z",
            "2026-01-05T10:00:00+0100",
            "2026-01-05T10:00:00Zjunk",
            "1736071200",
            "２０２６-01-05T10:00:00Z",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod drift_tests {
    use super::DeterminismMetadata;

    fn meta(
        hash: Option<&str>,
        etag: Option<&str>,
        mtime: Option<f64>,
        version: Option<&str>,
    ) -> DeterminismMetadata {
        DeterminismMetadata {
            content_hash: hash.map(str::to_string),
            etag: etag.map(str::to_string),
            mtime,
            version: version.map(str::to_string),
        }
    }

    /// The content hash decides first (000-24): equal hashes mean unchanged
    /// even when every later field differs, and different hashes mean
    /// changed even when every later field agrees.
    #[test]
    fn drift_content_hash_decides_before_every_other_field() {
        let seen = meta(Some("h1"), Some("e1"), Some(100.0), Some("v1"));
        let others_differ = meta(Some("h1"), Some("e2"), Some(200.0), Some("v2"));
        assert!(!seen.has_changed(&others_differ));
        let hash_differs = meta(Some("h2"), Some("e1"), Some(100.0), Some("v1"));
        assert!(seen.has_changed(&hash_differs));
    }

    /// Without a hash on both sides the etag decides (000-24), before mtime
    /// and version.
    #[test]
    fn drift_etag_decides_when_no_common_hash() {
        let seen = meta(Some("h1"), Some("e1"), Some(100.0), Some("v1"));
        // The current side has no hash: the etag is the first common field.
        let others_differ = meta(None, Some("e1"), Some(200.0), Some("v2"));
        assert!(!seen.has_changed(&others_differ));
        let etag_differs = meta(None, Some("e2"), Some(100.0), Some("v1"));
        assert!(seen.has_changed(&etag_differs));
    }

    /// Without a common hash or etag the mtime decides (000-24), before the
    /// version.
    #[test]
    fn drift_mtime_decides_when_no_common_hash_or_etag() {
        let seen = meta(None, Some("e1"), Some(100.0), Some("v1"));
        let version_differs = meta(Some("h1"), None, Some(100.0), Some("v2"));
        assert!(!seen.has_changed(&version_differs));
        let mtime_differs = meta(Some("h1"), None, Some(100.5), Some("v1"));
        assert!(seen.has_changed(&mtime_differs));
    }

    /// The version decides last (000-24), when it is the only field both
    /// sides have.
    #[test]
    fn drift_version_decides_when_it_is_the_only_common_field() {
        let seen = meta(Some("h1"), None, None, Some("v1"));
        assert!(!seen.has_changed(&meta(None, Some("e1"), Some(1.0), Some("v1"))));
        assert!(seen.has_changed(&meta(None, Some("e1"), Some(1.0), Some("v2"))));
    }

    /// "Cannot tell" counts as changed (000-24): with no field on both
    /// sides, even two empty records, the source may have drifted.
    #[test]
    fn drift_without_a_common_field_counts_as_changed() {
        let hash_only = meta(Some("h1"), None, None, None);
        let etag_only = meta(None, Some("e1"), None, None);
        let mtime_only = meta(None, None, Some(1.0), None);
        let version_only = meta(None, None, None, Some("v1"));
        let all = [&hash_only, &etag_only, &mtime_only, &version_only];
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                if i != j {
                    assert!(a.has_changed(b), "{a:?} vs {b:?}");
                }
            }
        }
        let empty = DeterminismMetadata::default();
        assert!(empty.has_changed(&empty));
        assert!(hash_only.has_changed(&empty));
        assert!(empty.has_changed(&hash_only));
    }
}

#[cfg(test)]
mod size_tests {
    use super::{json_len, json_len_bound, NUMBER_TEXT_MAX};
    use serde_json::{json, Value};

    proptest::proptest! {
        /// The bound a size check trusts below its limit is never under the
        /// exact length, whatever the arguments hold.
        #[test]
        fn json_len_bound_is_never_below_json_len(
            keys in proptest::collection::vec("\\PC{0,6}|[\"\\\\\\x00-\\x1f]{1,4}", 0..5),
            strings in proptest::collection::vec("\\PC{0,12}|[\"\\\\\\x00-\\x1f]{1,8}", 0..5),
            ints in proptest::collection::vec(proptest::num::i64::ANY, 0..3),
            floats in proptest::collection::vec(proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL, 0..3),
        ) {
            let mut obj = serde_json::Map::new();
            for (i, k) in keys.iter().enumerate() {
                let v = match i % 3 {
                    0 => Value::from(strings.clone()),
                    1 => json!({ "n": ints.clone(), "f": floats.clone(), "b": [true, null] }),
                    _ => Value::from(strings.get(i).cloned().unwrap_or_default()),
                };
                obj.insert(k.clone(), v);
            }
            let v = Value::Object(obj);
            proptest::prop_assert!(json_len_bound(&v) >= json_len(&v));
        }
    }

    #[test]
    fn json_len_bound_covers_escapes_and_numbers() {
        for v in [
            json!("\u{0}\u{1f}\"\\"),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(-1.7976931348623157e308),
            json!({"a\u{1}": [null, false, 1.5e-300, "é"]}),
        ] {
            assert!(json_len_bound(&v) >= json_len(&v), "{v}");
        }
        // The longest numbers serde_json writes.
        for v in [
            json!(i64::MIN),
            json!(u64::MAX),
            json!(-2.2250738585072014e-308),
            json!(-1.2345678901234567e-100),
            json!(-f64::MIN_POSITIVE),
            json!(-5e-324),
            json!(f64::MIN),
        ] {
            assert!(v.to_string().len() <= NUMBER_TEXT_MAX, "{v}");
        }
    }
}

/// Rough bytes `messages` hold in memory, for the caches that keep threads:
/// their size bound plus a fixed cost each.
pub fn memory_weight(messages: &[std::sync::Arc<Message>]) -> u64 {
    messages
        .iter()
        .map(|m| 256 + m.byte_len_bound() as u64)
        .sum()
}
