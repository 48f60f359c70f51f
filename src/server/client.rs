//! The operator client behind `compactd call compact|render|rehydrate`: reads
//! a thread file, sends one RPC through the generated tonic client and returns
//! the response as JSON.
//!
//! The JSON mirrors the response messages field by field, with three changes
//! that make it readable: enums are lower-case names (`"user"`, `"verbatim"`),
//! plans and neutral messages use the core model's JSON (the same shapes the
//! offline `compactd compact` prints), and the provider payload is parsed from
//! its JSON string (`provider_payload`, not `provider_payload_json`).
//!
//! The core → protobuf conversions ([`thread_to_pb`], [`tools_to_pb`]) are the
//! inverse of the server's inbound ones in [`super::convert`]; benches and
//! other Rust callers build requests with them.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use thiserror::Error;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::model::{
    thread_from_json, ArtifactReference, ClearReason, ClearRecord, CompactionPlan, Content,
    ContentPart, Decision, DeterminismMetadata, DropRecord, DroppedSpanIndex,
    ExternalizationRecord, Message, MessageMetadata, OpenItem, Outcome, Priority, Role,
    Sensitivity, SpanReference, StructuredSummary, SummarizationRecord, Thread, ToolCall,
    ToolContent, ToolOutcome, ToolResultEnvelope, ToolSchema,
};
use crate::render::{Origin, RenderedMessage};

use super::convert::{
    durability_to_pb, json_strings, json_text, outcome_to_pb, role_to_pb, sensitivity_to_pb,
};
use super::error_detail;
use super::pb;
use super::pb::compaction_service_client::CompactionServiceClient;

/// Largest message the client sends or accepts. Rendered requests of long
/// threads are large; the server enforces its own (configurable) limit.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// How long connecting may take before the call fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 initial stream window: the server's default, so large responses
/// stream without waiting for window updates.
pub const STREAM_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
/// HTTP/2 initial connection window (the server's default).
pub const CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;

/// Which RPC to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallMethod {
    /// `Compact`: commit a plan for the input thread.
    #[default]
    Compact,
    /// `Render`: render the input thread through its plan (or compact first).
    Render,
    /// `Rehydrate`: read an externalized artifact back.
    Rehydrate,
}

/// One call, as an operator spells it on the command line. Every field maps
/// to one flag; fields an RPC does not use are ignored by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOptions {
    /// Server address, `http://127.0.0.1:50051` (a bare `host:port` means http).
    pub addr: String,
    /// The RPC.
    pub method: CallMethod,
    /// Thread JSON: canonical, or an OpenAI `messages` array / request body;
    /// `-` reads stdin. Required for Compact and Render. Its `system` and
    /// `tools` are sent along.
    pub input: Option<PathBuf>,
    /// Sent as `authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Sent as `x-api-key`. At most one of the two credentials.
    pub api_key: Option<String>,
    /// Model (tokenizer, payload `model`); unset = the server's default.
    pub model: Option<String>,
    /// The model's input limit; unset = the server's default.
    pub max_input_tokens: Option<u32>,
    /// System prompt; overrides one in the input file.
    pub system: Option<String>,
    /// Render output: `neutral`, `openai` or `anthropic`.
    pub format: String,
    /// Render: compact and render in one round trip.
    pub compact_first: bool,
    /// Render: the plan version to render, 0 = the latest.
    pub plan_version: u64,
    /// Compact, and Render with `compact_first`: compare-and-swap on the
    /// plan version (0 = no plan yet).
    pub expected_version: Option<u64>,
    /// Rehydrate: the artifact's thread (required). Compact / Render: replaces
    /// the input's thread id (OpenAI-format files are otherwise named after
    /// the file).
    pub thread_id: Option<String>,
    /// Rehydrate: the artifact to read (required). Render: an artifact to
    /// inject into this turn's request.
    pub artifact_id: Option<String>,
    /// Rehydrate: token cap on the content (unset = the server's reserve).
    /// Render: the response `max_tokens` written into provider payloads.
    pub max_tokens: Option<u32>,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            addr: "http://127.0.0.1:50051".into(),
            method: CallMethod::Compact,
            input: None,
            bearer_token: None,
            api_key: None,
            model: None,
            max_input_tokens: None,
            system: None,
            format: "neutral".into(),
            compact_first: false,
            plan_version: 0,
            expected_version: None,
            thread_id: None,
            artifact_id: None,
            max_tokens: None,
        }
    }
}

/// Why a call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// An option is missing or invalid; `field` is the [`CallOptions`] field.
    #[error("{field}: {message}")]
    Option {
        /// The option (`input`, `format`, `thread_id`...).
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The input file could not be read or is not a thread.
    #[error("input {file}: {message}")]
    Input {
        /// The file (`-` for stdin).
        file: String,
        /// What is wrong; names the JSON field when one is at fault.
        message: String,
    },
    /// The server could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address dialed.
        addr: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server answered with an error status.
    #[error("{}", status_line(.status, .detail.as_ref()))]
    Status {
        /// The status as received.
        status: Box<Status>,
        /// Its decoded `compactd.v1.ErrorDetail`, when it carries one.
        detail: Option<pb::ErrorDetail>,
    },
    /// The response could not be turned into JSON (a server bug).
    #[error("unexpected response: {0}")]
    Response(String),
}

impl ClientError {
    /// Process exit code for the CLI, consistent with `compactd compact`:
    /// 2 bad input (options, input file, INVALID_ARGUMENT), 3 the budget
    /// cannot be met, 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Option { .. } | ClientError::Input { .. } => 2,
            ClientError::Status { status, detail } => match status.code() {
                Code::InvalidArgument => 2,
                Code::FailedPrecondition
                    if detail
                        .as_ref()
                        .is_some_and(|d| d.code == "INSUFFICIENT_BUDGET") =>
                {
                    3
                }
                _ => 1,
            },
            ClientError::Connect { .. } | ClientError::Response(_) => 1,
        }
    }

    /// The gRPC status, when the server answered with one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            ClientError::Status { status, .. } => Some(status),
            _ => None,
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        let detail = error_detail(&status);
        ClientError::Status {
            status: Box::new(status),
            detail,
        }
    }
}

/// `INVALID_ARGUMENT: <message> [field thread.messages[1].id, reason INVALID_ARGUMENT]`.
fn status_line(status: &Status, detail: Option<&pb::ErrorDetail>) -> String {
    let mut line = format!("{}: {}", code_name(status.code()), status.message());
    if let Some(d) = detail {
        let mut extra = Vec::new();
        if !d.field.is_empty() {
            extra.push(format!("field {}", d.field));
        }
        if !d.code.is_empty() {
            extra.push(format!("reason {}", d.code));
        }
        if d.retry_after_ms > 0 {
            extra.push(format!("retry after {} ms", d.retry_after_ms));
        }
        if !extra.is_empty() {
            line.push_str(&format!(" [{}]", extra.join(", ")));
        }
    }
    line
}

/// The canonical gRPC name of a code (`INVALID_ARGUMENT`), as grpcurl and
/// the other gRPC implementations print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn option_error(field: &'static str, message: impl Into<String>) -> ClientError {
    ClientError::Option {
        field,
        message: message.into(),
    }
}

// ───────────────────────────── the call ─────────────────────────────

/// Sends the call `opts` describes and returns the response as JSON. Options
/// and the input file are checked before anything is sent.
pub async fn call(opts: &CallOptions) -> Result<Value, ClientError> {
    // Build first: a bad option or input never costs a connection.
    let metadata = credentials(opts)?;
    let request = build_request(opts)?;
    let mut client = connect(&opts.addr).await?;
    match request {
        Built::Compact(req) => {
            let out = client
                .compact(with_metadata(req, &metadata))
                .await?
                .into_inner();
            Ok(compact_response_json(&out))
        }
        Built::Render(req, format) => {
            let out = client
                .render(with_metadata(req, &metadata))
                .await?
                .into_inner();
            render_response_json(&out, format)
        }
        Built::Rehydrate(req) => {
            let out = client
                .rehydrate(with_metadata(req, &metadata))
                .await?
                .into_inner();
            Ok(rehydrate_response_json(&out))
        }
    }
}

fn with_metadata<T>(msg: T, metadata: &MetadataMap) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    *r.metadata_mut() = metadata.clone();
    r
}

enum Built {
    Compact(pb::CompactRequest),
    Render(pb::RenderRequest, pb::OutputFormat),
    Rehydrate(pb::RehydrateRequest),
}

fn build_request(opts: &CallOptions) -> Result<Built, ClientError> {
    Ok(match opts.method {
        CallMethod::Compact => Built::Compact(compact_request(opts)?),
        CallMethod::Render => {
            let req = render_request(opts)?;
            let format = pb::OutputFormat::try_from(req.format).unwrap_or_default();
            Built::Render(req, format)
        }
        CallMethod::Rehydrate => Built::Rehydrate(rehydrate_request(opts)?),
    })
}

/// The endpoint for `addr` with the client's transport settings (message
/// limits aside): connect timeout, TCP_NODELAY and the server's HTTP/2
/// windows. A bare `host:port` is taken as `http://host:port`.
pub fn endpoint(addr: &str) -> Result<Endpoint, ClientError> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)
        .map_err(|e| option_error("addr", format!("{addr:?} is not a valid address: {e}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES))
}

/// A connected client with message limits raised to [`MAX_MESSAGE_BYTES`].
pub async fn connect(addr: &str) -> Result<CompactionServiceClient<Channel>, ClientError> {
    let channel = endpoint(addr)?
        .connect()
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    Ok(CompactionServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// The credential headers of `opts`: `authorization: Bearer …` or `x-api-key`.
pub fn credentials(opts: &CallOptions) -> Result<MetadataMap, ClientError> {
    let mut md = MetadataMap::new();
    match (&opts.bearer_token, &opts.api_key) {
        (Some(_), Some(_)) => {
            return Err(option_error(
                "api_key",
                "set bearer_token or api_key, not both",
            ))
        }
        (Some(token), None) => {
            let token = token.trim();
            let token = token.strip_prefix("Bearer ").unwrap_or(token);
            let v: AsciiMetadataValue = format!("Bearer {token}")
                .parse()
                .map_err(|_| option_error("bearer_token", "must be visible ASCII"))?;
            md.insert("authorization", v);
        }
        (None, Some(key)) => {
            let v: AsciiMetadataValue = key
                .trim()
                .parse()
                .map_err(|_| option_error("api_key", "must be visible ASCII"))?;
            md.insert("x-api-key", v);
        }
        (None, None) => {}
    }
    Ok(md)
}

/// The input file as a thread, its system prompt and tool schemas, with the
/// `thread_id` and `system` options applied.
fn read_input(
    opts: &CallOptions,
) -> Result<(pb::Thread, Option<String>, Vec<pb::ToolSchema>), ClientError> {
    let path = opts.input.as_ref().ok_or_else(|| {
        option_error(
            "input",
            "a thread file is required for compact and render (`-` for stdin)",
        )
    })?;
    let file = path.display().to_string();
    let input_error = |message: String| ClientError::Input {
        file: file.clone(),
        message,
    };
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| input_error(e.to_string()))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| input_error(e.to_string()))?
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|e| input_error(format!("not JSON: {e}")))?;
    let default_id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| *s != "-")
        .unwrap_or("thread");
    let input = thread_from_json(&value, default_id).map_err(|e| input_error(e.to_string()))?;
    let mut thread = thread_to_pb(&input.thread);
    if let Some(id) = &opts.thread_id {
        thread.id = id.clone();
    }
    let system = opts.system.clone().or(input.system);
    Ok((thread, system, tools_to_pb(&input.tools)))
}

/// The output format named by `format` (`neutral`, `openai`, `anthropic`;
/// the proto's longer names are accepted too).
pub fn parse_format(format: &str) -> Result<pb::OutputFormat, ClientError> {
    match format.trim().to_ascii_lowercase().as_str() {
        "" | "neutral" => Ok(pb::OutputFormat::Neutral),
        "openai" | "openai_chat" => Ok(pb::OutputFormat::OpenaiChat),
        "anthropic" | "anthropic_messages" => Ok(pb::OutputFormat::AnthropicMessages),
        other => Err(option_error(
            "format",
            format!("{other:?} is not one of neutral, openai, anthropic"),
        )),
    }
}

/// The `CompactRequest` that `opts` describes (reads the input file).
pub fn compact_request(opts: &CallOptions) -> Result<pb::CompactRequest, ClientError> {
    let (thread, system_prompt, tools) = read_input(opts)?;
    Ok(pb::CompactRequest {
        thread: Some(thread),
        model: opts.model.clone().unwrap_or_default(),
        max_input_tokens: opts.max_input_tokens.unwrap_or(0),
        system_prompt,
        tools,
        expected_version: opts.expected_version,
        ..Default::default()
    })
}

/// The `RenderRequest` that `opts` describes (reads the input file).
pub fn render_request(opts: &CallOptions) -> Result<pb::RenderRequest, ClientError> {
    let format = parse_format(&opts.format)?;
    let (thread, system_prompt, tools) = read_input(opts)?;
    Ok(pb::RenderRequest {
        thread: Some(thread),
        plan_version: opts.plan_version,
        compact_first: opts.compact_first,
        system_prompt,
        tools,
        format: format as i32,
        model: opts.model.clone().unwrap_or_default(),
        max_output_tokens: opts.max_tokens,
        rehydrate_artifact_ids: opts.artifact_id.iter().cloned().collect(),
        max_input_tokens: opts.max_input_tokens.unwrap_or(0),
        expected_version: opts.expected_version,
        ..Default::default()
    })
}

/// The `RehydrateRequest` that `opts` describes.
pub fn rehydrate_request(opts: &CallOptions) -> Result<pb::RehydrateRequest, ClientError> {
    let required = |v: &Option<String>, field: &'static str| {
        v.clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| option_error(field, "is required for rehydrate"))
    };
    Ok(pb::RehydrateRequest {
        thread_id: required(&opts.thread_id, "thread_id")?,
        artifact_id: required(&opts.artifact_id, "artifact_id")?,
        max_tokens: opts.max_tokens.unwrap_or(0),
        model: opts.model.clone().unwrap_or_default(),
        tenant_id: None,
    })
}

// ───────────────────────────── core → protobuf ─────────────────────────────

/// A thread on the wire; `thread_from_pb` of the result is the original.
pub fn thread_to_pb(t: &Thread) -> pb::Thread {
    pb::Thread {
        id: t.id.clone(),
        messages: t.messages.iter().map(message_to_pb).collect(),
    }
}

/// A message on the wire.
pub fn message_to_pb(m: &Message) -> pb::Message {
    let (text, parts) = content_to_pb(&m.content);
    pb::Message {
        id: m.id.clone(),
        role: role_to_pb(m.role) as i32,
        text,
        parts,
        tool_calls: m.tool_calls.iter().map(tool_call_to_pb).collect(),
        tool_result: m.tool_result.as_ref().map(envelope_to_pb),
        turn: m.turn,
        metadata: metadata_to_pb(&m.metadata),
    }
}

/// Tool schemas on the wire.
pub fn tools_to_pb(tools: &[ToolSchema]) -> Vec<pb::ToolSchema> {
    tools
        .iter()
        .map(|t| pb::ToolSchema {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters_json: json_text(&t.parameters),
        })
        .collect()
}

/// The `observations` map of a request.
pub fn observations_to_pb(
    o: &BTreeMap<String, DeterminismMetadata>,
) -> HashMap<String, pb::DeterminismMetadata> {
    o.iter()
        .map(|(k, v)| (k.clone(), determinism_to_pb(v)))
        .collect()
}

fn content_to_pb(c: &Content) -> (String, Vec<pb::ContentPart>) {
    match c {
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
    }
}

fn tool_call_to_pb(c: &ToolCall) -> pb::ToolCall {
    pb::ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments_json: json_text(&c.arguments),
    }
}

fn envelope_to_pb(e: &ToolResultEnvelope) -> pb::ToolResultEnvelope {
    let content = match &e.content {
        ToolContent::Text(t) => pb::tool_result_envelope::Content::ContentText(t.clone()),
        ToolContent::Json(j) => pb::tool_result_envelope::Content::ContentJson(j.as_str().into()),
    };
    pb::ToolResultEnvelope {
        tool_name: e.tool_name.clone(),
        tool_call_id: e.tool_call_id.clone(),
        outcome: outcome_to_pb(e.outcome) as i32,
        content: Some(content),
        key_fields: json_strings(&e.key_fields),
        durability: e
            .durability
            .map_or(pb::Durability::Unspecified, durability_to_pb) as i32,
        determinism: e.determinism.as_ref().map(determinism_to_pb),
        started_at: e.started_at.clone(),
        completed_at: e.completed_at.clone(),
    }
}

fn determinism_to_pb(d: &DeterminismMetadata) -> pb::DeterminismMetadata {
    pb::DeterminismMetadata {
        content_hash: d.content_hash.clone(),
        etag: d.etag.clone(),
        mtime: d.mtime,
        version: d.version.clone(),
    }
}

fn metadata_to_pb(m: &MessageMetadata) -> Option<pb::MessageMetadata> {
    (*m != MessageMetadata::default()).then(|| pb::MessageMetadata {
        protected: m.protected,
        label: m.label.clone(),
        sensitivity: sensitivity_to_pb(m.sensitivity) as i32,
        source: m.source.clone(),
    })
}

// ───────────────────────────── responses → JSON ─────────────────────────────
//
// Responses come from the server, so decoding is lenient: an enum number this
// client does not know reads as the proto's documented default, and JSON text
// that does not parse is kept as a string. Nothing here fails on a response
// that the server's own conversions produced.

/// A `CompactResponse` as JSON.
pub fn compact_response_json(r: &pb::CompactResponse) -> Value {
    json!({
        "version": r.version,
        "reused": r.reused,
        "triggered": r.triggered,
        "tokens_before": r.tokens_before,
        "tokens_after": r.tokens_after,
        "budget": r.budget.as_ref().map(|b| json!({
            "max_input_tokens": b.max_input_tokens,
            "hard_limit": b.hard_limit,
            "trigger": b.trigger,
            "target": b.target,
            "fixed_tokens": b.fixed_tokens,
        })),
        "per_reducer": r.per_reducer.iter().map(|p| json!({
            "name": p.name,
            "tokens_freed": p.tokens_freed,
        })).collect::<Vec<_>>(),
        "warnings": r.warnings,
        "new_artifact_ids": r.new_artifact_ids,
        "plan": r.plan.as_ref().map(|p| to_json(&plan_from_pb(p))),
    })
}

/// A `RenderResponse` as JSON. Neutral responses carry `system_prompt` and
/// `messages`; provider formats carry `provider_payload`, parsed.
pub fn render_response_json(
    r: &pb::RenderResponse,
    format: pb::OutputFormat,
) -> Result<Value, ClientError> {
    let mut out = serde_json::Map::new();
    out.insert("plan_version".into(), json!(r.plan_version));
    let format_name = match format {
        pb::OutputFormat::Neutral => "neutral",
        pb::OutputFormat::OpenaiChat => "openai",
        pb::OutputFormat::AnthropicMessages => "anthropic",
    };
    out.insert("format".into(), json!(format_name));
    if r.provider_payload_json.is_empty() {
        out.insert("system_prompt".into(), json!(r.system_prompt));
        let messages: Vec<Value> = r
            .messages
            .iter()
            .map(|m| to_json(&rendered_from_pb(m)))
            .collect();
        out.insert("messages".into(), Value::Array(messages));
    } else {
        let payload: Value = serde_json::from_str(&r.provider_payload_json).map_err(|e| {
            ClientError::Response(format!("provider_payload_json is not JSON: {e}"))
        })?;
        out.insert("provider_payload".into(), payload);
    }
    out.insert(
        "tokens".into(),
        r.tokens.as_ref().map_or(Value::Null, |t| {
            json!({
                "system": t.system,
                "tools": t.tools,
                "messages": t.messages,
                "rehydrated": t.rehydrated,
                "framing": t.framing,
                "total": t.total,
            })
        }),
    );
    out.insert(
        "audit".into(),
        r.audit.as_ref().map_or(Value::Null, audit_json),
    );
    out.insert(
        "rehydrated".into(),
        r.rehydrated
            .iter()
            .map(|a| {
                json!({
                    "artifact_id": a.artifact_id,
                    "truncated": a.truncated,
                    "omitted": a.omitted,
                })
            })
            .collect(),
    );
    out.insert(
        "compaction".into(),
        r.compaction
            .as_ref()
            .map_or(Value::Null, compact_response_json),
    );
    Ok(Value::Object(out))
}

/// A `RehydrateResponse` as JSON.
pub fn rehydrate_response_json(r: &pb::RehydrateResponse) -> Value {
    json!({
        "artifact_id": r.artifact_id,
        "content": r.content,
        "truncated": r.truncated,
        "tokens": r.tokens,
        "sensitivity": sensitivity_from_pb(r.sensitivity),
        "message_ids": r.message_ids,
        "content_hash": r.content_hash,
    })
}

fn audit_json(a: &pb::AuditRecord) -> Value {
    json!({
        "plan_version": a.plan_version,
        "plan_fingerprint": a.plan_fingerprint,
        "plan_format_version": a.plan_format_version,
        "summary_schema_version": a.summary_schema_version,
        "summary_render_version": a.summary_render_version,
        "render_format_version": a.render_format_version,
        "summarizer_id": a.summarizer_id,
        "tokenizer": a.tokenizer,
        "evictions": a.evictions.as_ref().map(|e| json!({
            "externalized": e.externalized,
            "summarized": e.summarized,
            "cleared": e.cleared,
            "dropped": e.dropped,
        })),
        "artifact_ids": a.artifact_ids,
        "rehydrated_artifact_ids": a.rehydrated_artifact_ids,
    })
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    // The core model's types serialize infallibly (string keys, no non-finite floats).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A plan from the wire, in the core model (whose JSON is the plan's JSON).
pub fn plan_from_pb(p: &pb::CompactionPlan) -> CompactionPlan {
    CompactionPlan {
        thread_id: p.thread_id.clone(),
        version: p.version,
        fingerprint: p.fingerprint.clone(),
        externalizations: p
            .externalizations
            .iter()
            .map(|r| ExternalizationRecord {
                span: span_from_pb(r.span.as_ref()),
                artifact_id: r.artifact_id.clone(),
                summary: summary_from_pb(r.summary.as_ref(), r.span.as_ref()),
                rehydrate_hint: r.rehydrate_hint.clone(),
                sensitivity: sensitivity_from_pb(r.sensitivity),
                content_hash: r.content_hash.clone(),
                content_tokens: r.content_tokens,
            })
            .collect(),
        summarizations: p
            .summarizations
            .iter()
            .map(|r| SummarizationRecord {
                span: span_from_pb(r.span.as_ref()),
                summary: summary_from_pb(r.summary.as_ref(), r.span.as_ref()),
                summary_token_count: r.summary_token_count,
            })
            .collect(),
        clearings: p
            .clearings
            .iter()
            .map(|r| ClearRecord {
                span: span_from_pb(r.span.as_ref()),
                preserved_fields: json_values(&r.preserved_fields),
                reason: match pb::ClearReason::try_from(r.reason) {
                    Ok(pb::ClearReason::Expired) => ClearReason::Expired,
                    Ok(pb::ClearReason::Compressed) => ClearReason::Compressed,
                    Ok(pb::ClearReason::Plugin) => ClearReason::Plugin,
                    _ => ClearReason::Durability,
                },
                replacement: r.replacement.clone(),
            })
            .collect(),
        drops: p
            .drops
            .iter()
            .map(|r| DropRecord {
                span: span_from_pb(r.span.as_ref()),
                reason: r.reason.clone(),
                index: r.index.as_ref().map_or(
                    DroppedSpanIndex {
                        keywords: Vec::new(),
                        summary: String::new(),
                    },
                    |i| DroppedSpanIndex {
                        keywords: i.keywords.clone(),
                        summary: i.summary.clone(),
                    },
                ),
            })
            .collect(),
        original_token_count: p.original_token_count,
        compacted_token_count: p.compacted_token_count,
    }
}

fn span_from_pb(s: Option<&pb::SpanReference>) -> SpanReference {
    s.map_or(
        SpanReference {
            message_ids: Vec::new(),
            first_turn: 0,
            last_turn: 0,
        },
        |s| SpanReference {
            message_ids: s.message_ids.clone(),
            first_turn: s.first_turn,
            last_turn: s.last_turn,
        },
    )
}

fn summary_from_pb(
    s: Option<&pb::StructuredSummary>,
    record_span: Option<&pb::SpanReference>,
) -> StructuredSummary {
    let Some(s) = s else {
        return StructuredSummary::empty(span_from_pb(record_span));
    };
    StructuredSummary {
        span: span_from_pb(s.span.as_ref()),
        facts: s.facts.clone(),
        decisions: s
            .decisions
            .iter()
            .map(|d| Decision {
                decision: d.decision.clone(),
                rationale: d.rationale.clone(),
                turn: d.turn,
            })
            .collect(),
        open_items: s
            .open_items
            .iter()
            .map(|o| OpenItem {
                description: o.description.clone(),
                context: o.context.clone(),
                priority: match pb::Priority::try_from(o.priority) {
                    Ok(pb::Priority::High) => Priority::High,
                    Ok(pb::Priority::Low) => Priority::Low,
                    _ => Priority::Medium,
                },
            })
            .collect(),
        artifacts: s
            .artifacts
            .iter()
            .map(|a| ArtifactReference {
                artifact_id: a.artifact_id.clone(),
                description: a.description.clone(),
                rehydrate_hint: a.rehydrate_hint.clone(),
            })
            .collect(),
        tool_outcomes: s
            .tool_outcomes
            .iter()
            .map(|t| ToolOutcome {
                tool_name: t.tool_name.clone(),
                outcome: outcome_from_pb(t.outcome),
                key_fields: json_values(&t.key_fields),
                error_message: t.error_message.clone(),
            })
            .collect(),
        current_task: s.current_task.clone(),
        current_plan: s.current_plan.clone(),
    }
}

/// A rendered message from the wire, in the core model.
pub fn rendered_from_pb(m: &pb::RenderedMessage) -> RenderedMessage {
    let content = if m.parts.is_empty() {
        Content::Text(m.text.clone())
    } else {
        Content::Parts(
            m.parts
                .iter()
                .filter_map(|p| match &p.kind {
                    Some(pb::content_part::Kind::Text(text)) => {
                        Some(ContentPart::Text { text: text.clone() })
                    }
                    Some(pb::content_part::Kind::ImageUrl(url)) => {
                        Some(ContentPart::Image { url: url.clone() })
                    }
                    None => None,
                })
                .collect(),
        )
    };
    RenderedMessage {
        role: role_from_pb(m.role),
        content,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: json_value(&c.arguments_json),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
        tool_name: m.tool_name.clone(),
        is_error: m.is_error,
        source_id: m.source_id.clone(),
        origin: match pb::Origin::try_from(m.origin) {
            Ok(pb::Origin::Cleared) => Origin::Cleared,
            Ok(pb::Origin::Summary) => Origin::Summary,
            Ok(pb::Origin::Externalized) => Origin::Externalized,
            Ok(pb::Origin::Rehydrated) => Origin::Rehydrated,
            _ => Origin::Verbatim,
        },
    }
}

/// JSON text from the wire; empty is null, unparsable text stays a string.
fn json_value(text: &str) -> Value {
    if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
    }
}

fn json_values(m: &HashMap<String, String>) -> BTreeMap<String, Value> {
    m.iter().map(|(k, v)| (k.clone(), json_value(v))).collect()
}

fn role_from_pb(v: i32) -> Role {
    match pb::Role::try_from(v) {
        Ok(pb::Role::System) => Role::System,
        Ok(pb::Role::Developer) => Role::Developer,
        Ok(pb::Role::Assistant) => Role::Assistant,
        Ok(pb::Role::Tool) => Role::Tool,
        _ => Role::User,
    }
}

fn outcome_from_pb(v: i32) -> Outcome {
    match pb::Outcome::try_from(v) {
        Ok(pb::Outcome::Failure) => Outcome::Failure,
        Ok(pb::Outcome::Partial) => Outcome::Partial,
        _ => Outcome::Success,
    }
}

fn sensitivity_from_pb(v: i32) -> Sensitivity {
    match pb::Sensitivity::try_from(v) {
        Ok(pb::Sensitivity::Public) => Sensitivity::Public,
        Ok(pb::Sensitivity::Confidential) => Sensitivity::Confidential,
        Ok(pb::Sensitivity::Restricted) => Sensitivity::Restricted,
        _ => Sensitivity::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Durability, JsonText};
    use crate::server::convert::{thread_from_pb, tools_from_pb};
    use crate::server::ApiError;

    fn json_content(text: &str) -> ToolContent {
        ToolContent::Json(JsonText::from_string(text.into()).expect("valid JSON"))
    }

    fn thread_with_everything() -> Thread {
        let mut key_fields = BTreeMap::new();
        key_fields.insert("order_id".to_string(), json!("A-17"));
        key_fields.insert("total".to_string(), json!(1200));
        key_fields.insert("lines".to_string(), json!([{"sku": "x", "qty": 2}]));
        Thread {
            id: "t-round-trip".into(),
            messages: vec![
                Message {
                    id: "m0".into(),
                    role: Role::System,
                    content: Content::Text("Security policy: never delete data.".into()),
                    tool_calls: vec![],
                    tool_result: None,
                    turn: 0,
                    metadata: MessageMetadata {
                        protected: true,
                        label: Some("Security Policy".into()),
                        sensitivity: Sensitivity::Confidential,
                        source: None,
                    },
                },
                Message {
                    id: "m1".into(),
                    role: Role::User,
                    content: Content::Parts(vec![
                        ContentPart::Text {
                            text: "What is in this picture?".into(),
                        },
                        ContentPart::Image {
                            url: "https://example.com/cat.png".into(),
                        },
                    ]),
                    tool_calls: vec![],
                    tool_result: None,
                    turn: 1,
                    metadata: MessageMetadata {
                        source: Some("upload".into()),
                        sensitivity: Sensitivity::Public,
                        ..Default::default()
                    },
                },
                Message {
                    id: "m2".into(),
                    role: Role::Assistant,
                    content: Content::Text("Let me check two things.".into()),
                    tool_calls: vec![
                        ToolCall {
                            id: "c1".into(),
                            name: "get_order".into(),
                            arguments: json!({"id": "A-17", "expand": ["lines"]}),
                        },
                        ToolCall {
                            id: "c2".into(),
                            name: "read_file".into(),
                            arguments: Value::Null,
                        },
                    ],
                    tool_result: None,
                    turn: 1,
                    metadata: MessageMetadata::default(),
                },
                Message {
                    id: "m3".into(),
                    role: Role::Tool,
                    content: Content::default(),
                    tool_calls: vec![],
                    tool_result: Some(ToolResultEnvelope {
                        tool_name: "get_order".into(),
                        tool_call_id: "c1".into(),
                        outcome: Outcome::Partial,
                        // Odd spacing on purpose: JSON content crosses byte for byte.
                        content: json_content(
                            r#"{"id": "A-17",  "total":1200, "lines":[{"sku":"x","qty":2}]}"#,
                        ),
                        key_fields,
                        durability: Some(Durability::Anchoring),
                        determinism: None,
                        started_at: Some("2025-01-01T00:00:00Z".into()),
                        completed_at: Some("2025-01-01T00:00:01Z".into()),
                    }),
                    turn: 1,
                    metadata: MessageMetadata::default(),
                },
                Message {
                    id: "m4".into(),
                    role: Role::Tool,
                    content: Content::default(),
                    tool_calls: vec![],
                    tool_result: Some(ToolResultEnvelope {
                        tool_name: "read_file".into(),
                        tool_call_id: "c2".into(),
                        outcome: Outcome::Failure,
                        content: ToolContent::Text("Error: permission denied".into()),
                        key_fields: BTreeMap::new(),
                        durability: Some(Durability::Replayable),
                        determinism: Some(DeterminismMetadata {
                            content_hash: Some("sha256:abc".into()),
                            etag: Some("\"e1\"".into()),
                            mtime: Some(1_700_000_000.5),
                            version: Some("v3".into()),
                        }),
                        started_at: None,
                        completed_at: None,
                    }),
                    turn: 1,
                    metadata: MessageMetadata::default(),
                },
                Message {
                    id: "m5".into(),
                    role: Role::Developer,
                    content: Content::Text("Prefer short answers.".into()),
                    tool_calls: vec![],
                    tool_result: None,
                    turn: 2,
                    metadata: MessageMetadata::default(),
                },
                Message {
                    id: "m6".into(),
                    role: Role::Assistant,
                    content: Content::Text(String::new()),
                    tool_calls: vec![],
                    tool_result: None,
                    turn: 2,
                    metadata: MessageMetadata::default(),
                },
            ],
        }
    }

    #[test]
    fn thread_round_trips_through_the_wire() {
        let original = thread_with_everything();
        original
            .validate(&Default::default())
            .expect("the test thread is valid");
        let back = thread_from_pb(Some(thread_to_pb(&original)), "thread").expect("decodes");
        assert_eq!(back, original);
        // JSON tool content keeps its exact bytes, not a re-serialization.
        let ToolContent::Json(j) = &back.messages[3].tool_result.as_ref().unwrap().content else {
            panic!("JSON content stays JSON");
        };
        assert_eq!(
            j.as_str(),
            r#"{"id": "A-17",  "total":1200, "lines":[{"sku":"x","qty":2}]}"#
        );
    }

    #[test]
    fn synthetic_thread_round_trips() {
        let t = crate::synth::thread(&crate::synth::SynthParams::default());
        let back = thread_from_pb(Some(thread_to_pb(&t)), "thread").expect("decodes");
        assert_eq!(back, t);
    }

    #[test]
    fn tools_round_trip() {
        let tools = vec![
            ToolSchema {
                name: "search".into(),
                description: "web search".into(),
                parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            },
            ToolSchema {
                name: "now".into(),
                description: String::new(),
                parameters: Value::Null,
            },
        ];
        assert_eq!(
            tools_from_pb(tools_to_pb(&tools), "tools").expect("decodes"),
            tools
        );
    }

    #[test]
    fn plans_round_trip_and_print_as_core_json() {
        let span = SpanReference {
            message_ids: vec!["m2".into(), "m3".into(), "m4".into()],
            first_turn: 1,
            last_turn: 1,
        };
        let summary = StructuredSummary {
            span: span.clone(),
            facts: vec!["Budget is $1000".into()],
            decisions: vec![Decision {
                decision: "Use Python".into(),
                rationale: "team preference".into(),
                turn: 1,
            }],
            open_items: vec![OpenItem {
                description: "fix read_file permissions".into(),
                context: String::new(),
                priority: Priority::High,
            }],
            artifacts: vec![ArtifactReference {
                artifact_id: "art_0123456789abcdef0123456789abcdef".into(),
                description: "order".into(),
                rehydrate_hint: "when lines matter".into(),
            }],
            tool_outcomes: vec![ToolOutcome {
                tool_name: "get_order".into(),
                outcome: Outcome::Partial,
                key_fields: [("order_id".to_string(), json!("A-17"))].into(),
                error_message: Some("timeout".into()),
            }],
            current_task: Some("review order".into()),
            current_plan: vec!["check".into(), "ship".into()],
        };
        let plan = CompactionPlan {
            thread_id: "t".into(),
            version: 3,
            fingerprint: "f".repeat(64),
            externalizations: vec![ExternalizationRecord {
                span: span.clone(),
                artifact_id: "art_0123456789abcdef0123456789abcdef".into(),
                summary: summary.clone(),
                rehydrate_hint: "read it back".into(),
                sensitivity: Sensitivity::Confidential,
                content_hash: "ab".repeat(32),
                content_tokens: 1234,
            }],
            summarizations: vec![SummarizationRecord {
                span: span.clone(),
                summary,
                summary_token_count: 99,
            }],
            clearings: vec![ClearRecord {
                span: span.clone(),
                preserved_fields: [("total".to_string(), json!(1200))].into(),
                reason: ClearReason::Compressed,
                replacement: "[cleared]".into(),
            }],
            drops: vec![DropRecord {
                span,
                reason: "window".into(),
                index: DroppedSpanIndex {
                    keywords: vec!["order".into()],
                    summary: "an order".into(),
                },
            }],
            original_token_count: 5000,
            compacted_token_count: 900,
        };
        let back = plan_from_pb(&crate::server::convert::plan_to_pb(&plan));
        assert_eq!(back, plan);
        let out = compact_response_json(&pb::CompactResponse {
            plan: Some(crate::server::convert::plan_to_pb(&plan)),
            version: 3,
            ..Default::default()
        });
        assert_eq!(out["plan"], serde_json::to_value(&plan).unwrap());
        assert_eq!(out["plan"]["clearings"][0]["reason"], "compressed");
        assert_eq!(out["budget"], Value::Null);
    }

    #[test]
    fn rendered_messages_round_trip() {
        let m = RenderedMessage {
            role: Role::Tool,
            content: Content::Text("12C".into()),
            tool_calls: vec![],
            tool_call_id: Some("c1".into()),
            tool_name: Some("weather".into()),
            is_error: true,
            source_id: "m3".into(),
            origin: Origin::Cleared,
        };
        assert_eq!(
            rendered_from_pb(&crate::server::convert::rendered_to_pb(&m)),
            m
        );
    }

    #[test]
    fn provider_payloads_are_parsed() {
        let r = pb::RenderResponse {
            provider_payload_json: r#"{"model":"gpt-4o","messages":[]}"#.into(),
            plan_version: 2,
            ..Default::default()
        };
        let out = render_response_json(&r, pb::OutputFormat::OpenaiChat).unwrap();
        assert_eq!(out["provider_payload"]["model"], "gpt-4o");
        assert_eq!(out["format"], "openai");
        assert!(out.get("messages").is_none());
        let bad = pb::RenderResponse {
            provider_payload_json: "{".into(),
            ..Default::default()
        };
        assert!(matches!(
            render_response_json(&bad, pb::OutputFormat::OpenaiChat),
            Err(ClientError::Response(_))
        ));
    }

    fn write_input(dir: &tempfile::TempDir, name: &str, v: &Value) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    #[test]
    fn requests_are_built_from_an_openai_file() {
        let dir = tempfile::tempdir().unwrap();
        let input = write_input(
            &dir,
            "support-chat.json",
            &json!({
                "model": "ignored",
                "system": "file system prompt",
                "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "12C"}
                ]
            }),
        );
        let opts = CallOptions {
            method: CallMethod::Render,
            input: Some(input),
            format: "anthropic".into(),
            compact_first: true,
            max_input_tokens: Some(8000),
            expected_version: Some(0),
            max_tokens: Some(512),
            artifact_id: Some("art_0123456789abcdef0123456789abcdef".into()),
            ..Default::default()
        };
        let r = render_request(&opts).unwrap();
        let thread = r.thread.as_ref().unwrap();
        assert_eq!(thread.id, "support-chat");
        assert_eq!(thread.messages.len(), 3);
        assert_eq!(r.system_prompt.as_deref(), Some("file system prompt"));
        assert_eq!(r.tools[0].name, "weather");
        assert_eq!(r.format, pb::OutputFormat::AnthropicMessages as i32);
        assert!(r.compact_first);
        assert_eq!(
            (r.max_input_tokens, r.expected_version, r.max_output_tokens),
            (8000, Some(0), Some(512))
        );
        assert_eq!(r.rehydrate_artifact_ids.len(), 1);

        // Options override the file; unset numbers mean "server default".
        let opts = CallOptions {
            input: opts.input.clone(),
            system: Some("flag system prompt".into()),
            thread_id: Some("t-9".into()),
            ..Default::default()
        };
        let c = compact_request(&opts).unwrap();
        assert_eq!(c.thread.as_ref().unwrap().id, "t-9");
        assert_eq!(c.system_prompt.as_deref(), Some("flag system prompt"));
        assert_eq!((c.max_input_tokens, c.model.as_str()), (0, ""));
    }

    #[test]
    fn input_errors_name_the_option_or_field() {
        let dir = tempfile::tempdir().unwrap();
        let missing = CallOptions::default();
        assert!(matches!(
            compact_request(&missing),
            Err(ClientError::Option { field: "input", .. })
        ));
        let bad_role = write_input(
            &dir,
            "t.json",
            &json!([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]),
        );
        let e = compact_request(&CallOptions {
            input: Some(bad_role.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("messages[1].role"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let e = render_request(&CallOptions {
            input: Some(bad_role),
            format: "xml".into(),
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(
            e,
            ClientError::Option {
                field: "format",
                ..
            }
        ));
        let e = rehydrate_request(&CallOptions {
            thread_id: Some("t".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(
            e,
            ClientError::Option {
                field: "artifact_id",
                ..
            }
        ));
        let e = credentials(&CallOptions {
            bearer_token: Some("a".into()),
            api_key: Some("b".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(
            e,
            ClientError::Option {
                field: "api_key",
                ..
            }
        ));
        assert!(endpoint("not a uri").is_err());
        assert!(endpoint("127.0.0.1:50051").is_ok());
    }

    #[test]
    fn credentials_become_headers() {
        let md = credentials(&CallOptions {
            bearer_token: Some("Bearer abc.def.ghi".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            md.get("authorization").unwrap().to_str().unwrap(),
            "Bearer abc.def.ghi"
        );
        let md = credentials(&CallOptions {
            api_key: Some("k-123".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(md.get("x-api-key").unwrap().to_str().unwrap(), "k-123");
    }

    #[test]
    fn status_errors_show_code_message_and_detail() {
        let status: Status =
            ApiError::invalid("thread.messages[1].id", "duplicate id \"m0\"").into();
        let e = ClientError::from(status);
        let text = e.to_string();
        assert!(text.starts_with("INVALID_ARGUMENT: "), "{text}");
        assert!(text.contains("field thread.messages[1].id"), "{text}");
        assert!(text.contains("reason INVALID_ARGUMENT"), "{text}");
        assert_eq!(e.exit_code(), 2);
        let budget: Status = ApiError::InsufficientBudget {
            message: "needs 9000 tokens, has 100".into(),
        }
        .into();
        let e = ClientError::from(budget);
        assert!(e.to_string().starts_with("FAILED_PRECONDITION: "));
        assert_eq!(e.exit_code(), 3);
        let plain = ClientError::from(Status::unavailable("down"));
        assert_eq!(plain.to_string(), "UNAVAILABLE: down");
        assert_eq!(plain.exit_code(), 1);
    }

    /// Every method against a real server (dev mode on 127.0.0.1:0).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_every_method_against_a_real_server() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::server::ServerSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            auth: crate::security::AuthConfig {
                dev: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::server::serve(settings, listener, async {
            let _ = stopped.await;
        }));

        // A canonical thread whose one big tool output must be externalized.
        let big: String = (0..1500)
            .map(|i| format!("{i:05} INFO worker-{} batch {} ok\n", i % 7, i * 31 % 997))
            .collect();
        let input = write_input(
            &dir,
            "thread.json",
            &json!({
                "id": "t-call",
                "system": "You are careful.",
                "messages": [
                    {"id": "u1", "role": "user", "content": "Read the log.", "turn": 1},
                    {"id": "a1", "role": "assistant", "turn": 1, "tool_calls": [
                        {"id": "c1", "name": "read_file", "arguments": {"path": "log.txt"}}
                    ]},
                    {"id": "t1", "role": "tool", "turn": 1, "tool_result": {
                        "tool_name": "read_file", "tool_call_id": "c1", "content": big,
                        "durability": "non_replayable"
                    }},
                    {"id": "a2", "role": "assistant", "content": "All batches ok.", "turn": 1},
                    {"id": "u2", "role": "user", "content": "Thanks. Anything else?", "turn": 2},
                    {"id": "a3", "role": "assistant", "content": "No.", "turn": 2}
                ]
            }),
        );
        let base = CallOptions {
            addr: format!("http://{addr}"),
            input: Some(input),
            max_input_tokens: Some(4000),
            ..Default::default()
        };
        let out = call(&base).await.expect("compact");
        assert_eq!(out["version"], 1);
        assert!(out["tokens_after"].as_u64() < out["tokens_before"].as_u64());
        let artifact = out["plan"]["externalizations"][0]["artifact_id"]
            .as_str()
            .expect("the big output was externalized")
            .to_string();
        assert_eq!(out["new_artifact_ids"][0], artifact.as_str());

        let out = call(&CallOptions {
            method: CallMethod::Render,
            ..base.clone()
        })
        .await
        .expect("render");
        assert_eq!(out["plan_version"], 1);
        assert_eq!(out["system_prompt"], "You are careful.");
        assert!(out["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["origin"] == "externalized"));
        assert_eq!(out["compaction"], Value::Null);

        let out = call(&CallOptions {
            method: CallMethod::Render,
            format: "openai".into(),
            compact_first: true,
            ..base.clone()
        })
        .await
        .expect("render openai");
        assert_eq!(out["provider_payload"]["messages"][0]["role"], "system");
        assert_eq!(out["compaction"]["reused"], true);

        let out = call(&CallOptions {
            method: CallMethod::Rehydrate,
            input: None,
            thread_id: Some("t-call".into()),
            artifact_id: Some(artifact),
            max_tokens: Some(50),
            ..base.clone()
        })
        .await
        .expect("rehydrate");
        assert_eq!(out["truncated"], true);
        assert!(out["tokens"].as_u64().unwrap() <= 50);
        assert!(out["content"].as_str().unwrap().starts_with("00000 INFO"));

        // A stale expected version: ABORTED with the detail decoded.
        let e = call(&CallOptions {
            expected_version: Some(7),
            ..base.clone()
        })
        .await
        .unwrap_err();
        assert_eq!(e.status().map(Status::code), Some(Code::Aborted));
        assert!(e.to_string().contains("reason VERSION_CONFLICT"), "{e}");

        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn unreachable_server_is_a_connect_error() {
        // Port 1 on loopback: nothing listens there.
        let e = call(&CallOptions {
            addr: "http://127.0.0.1:1".into(),
            method: CallMethod::Rehydrate,
            thread_id: Some("t".into()),
            artifact_id: Some("a".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    }
}
