//! `compactd call compact|render|rehydrate|delete-thread|reset-plan|explain|search-context`:
//! an operator client. Reads a
//! thread file, sends one RPC and prints the response as JSON.
//!
//! The JSON mirrors the response field by field, with three changes that
//! make it readable: enums are lower-case names (`"user"`, `"verbatim"`),
//! plans and messages use the core model's JSON (the shapes the offline
//! `compactd compact` prints), and the provider payload is parsed from its
//! JSON string (`provider_payload`, not `provider_payload_json`). Responses
//! are converted strictly: a value this client cannot represent is an error,
//! never a silent default.

use std::path::PathBuf;

use clap::ValueEnum;
use serde_json::{json, Value};

use compactd::client::{connect, ClientError, Credential};
use compactd::model::{AuditRecord, CompactionPlan};
use compactd::proto::{each, optional, pb, required, ConvertError};
use compactd::reduce::{BudgetReport, ReducerReport};
use compactd::render::{RehydrationReport, RenderedMessage, RequestTokens};
use tonic::Code;

use compactd::provider::Format;

use super::{read_thread, runtime, Failure};

/// Which RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// Commit a plan for the input thread.
    Compact,
    /// Render the input thread through its plan (or compact first).
    Render,
    /// Read an externalized artifact back.
    Rehydrate,
    /// Erase a thread: its plan, artifacts and cached summaries.
    DeleteThread,
    /// Replace the thread's plan with an empty one at the next version.
    ResetPlan,
    /// Say where a text went under the plan (verbatim, summary, artifact, dropped).
    Explain,
    /// Search what the plan compacted out (the agent's `search_context` tool).
    SearchContext,
}

/// Arguments of `compactd call`. Options a method does not use are ignored by it.
#[derive(clap::Args, Debug, Clone)]
pub struct CallArgs {
    /// Which RPC.
    #[arg(value_enum)]
    method: Method,
    /// Server address (a bare `host:port` means http).
    #[arg(long, default_value = "http://127.0.0.1:50051", env = "COMPACTD_ADDR")]
    addr: String,
    /// Thread JSON (canonical, or an OpenAI messages array / request body);
    /// `-` for stdin. Required for compact and render; its system prompt and
    /// tools are sent along.
    #[arg(long)]
    input: Option<PathBuf>,
    /// JWT bearer token.
    #[arg(long, env = "COMPACTD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// API key.
    #[arg(
        long,
        env = "COMPACTD_API_KEY",
        hide_env_values = true,
        conflicts_with = "token"
    )]
    api_key: Option<String>,
    /// Model (tokenizer and payload model); unset = the server's default.
    #[arg(long)]
    model: Option<String>,
    /// The model's input limit; unset = the server's default.
    #[arg(long)]
    max_input_tokens: Option<u32>,
    /// System prompt; overrides one in the input file.
    #[arg(long)]
    system: Option<String>,
    /// Render output: neutral, openai, anthropic or responses.
    #[arg(long, default_value = "neutral")]
    format: Format,
    /// Render: compact first, in the same round trip.
    #[arg(long)]
    compact_first: bool,
    /// Render: plan version (0 = latest).
    #[arg(long, default_value_t = 0)]
    plan_version: u64,
    /// Compact (and render with --compact-first): fail with ABORTED unless
    /// this is the current plan version (0 = no plan yet).
    #[arg(long)]
    expected_version: Option<u64>,
    /// Rehydrate: the artifact's thread (required). Compact and render:
    /// replaces the input's thread id (OpenAI-format files are otherwise
    /// named after the file).
    #[arg(long)]
    thread_id: Option<String>,
    /// Rehydrate: the artifact to read (required). Render: an artifact to
    /// inject into this turn's request.
    #[arg(long)]
    artifact_id: Option<String>,
    /// Rehydrate: token cap on the content; render: the response `max_tokens`
    /// written into provider payloads.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Render: leave tool calls without a result out instead of failing.
    #[arg(long)]
    omit_pending_calls: bool,
    /// Explain: the text to look for; search-context: the query (required).
    #[arg(long)]
    text: Option<String>,
    /// Search-context: passages to return (0 = the server's default, 5).
    #[arg(long, default_value_t = 0)]
    max_results: u32,
    /// Explain: also decrypt and search the plan's artifacts.
    #[arg(long)]
    search_artifacts: bool,
}

/// A built request, ready to send.
enum Built {
    Compact(pb::CompactRequest),
    Render(pb::RenderRequest),
    Rehydrate(pb::RehydrateRequest),
    DeleteThread(pb::DeleteThreadRequest),
    ResetPlan(pb::ResetPlanRequest),
    Explain(pb::ExplainRequest),
    SearchContext(pb::SearchContextRequest),
}

/// Sends the call and prints the response as JSON.
pub fn run(args: &CallArgs) -> Result<String, Failure> {
    let value = runtime()?.block_on(call(args))?;
    serde_json::to_string_pretty(&value).map_err(Failure::other)
}

/// Sends the call `args` describe and returns the response as JSON. Options
/// and the input file are checked before anything is sent.
pub async fn call(args: &CallArgs) -> Result<Value, Failure> {
    let credential = match (&args.token, &args.api_key) {
        (Some(t), _) => Credential::Bearer(t.clone()),
        (None, Some(k)) => Credential::ApiKey(k.clone()),
        (None, None) => Credential::None,
    };
    // Build first: a bad option or input never costs a connection.
    let built = build(args)?;
    let mut client = connect(&args.addr).await.map_err(client_failure)?;
    match built {
        Built::Compact(r) => client
            .compact(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .and_then(|r| compact_json(r.into_inner()).map_err(response_failure)),
        Built::Render(r) => client
            .render(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .and_then(|r| render_json(r.into_inner(), args.format).map_err(response_failure)),
        Built::Rehydrate(r) => client
            .rehydrate(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .and_then(|r| rehydrate_json(r.into_inner()).map_err(response_failure)),
        Built::DeleteThread(r) => client
            .delete_thread(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .map(|r| {
                let r = r.into_inner();
                serde_json::json!({
                    "had_plan": r.had_plan,
                    "artifacts_deleted": r.artifacts_deleted,
                    "bytes_freed": r.bytes_freed,
                })
            }),
        Built::ResetPlan(r) => client
            .reset_plan(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .map(|r| {
                let r = r.into_inner();
                serde_json::json!({
                    "previous_version": r.previous_version,
                    "version": r.version,
                })
            }),
        Built::Explain(r) => client
            .explain(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .map(|r| explain_json(r.into_inner())),
        Built::SearchContext(r) => client
            .search_context(credential.request(r).map_err(client_failure)?)
            .await
            .map_err(|s| client_failure(s.into()))
            .and_then(|r| search_json(r.into_inner()).map_err(response_failure)),
    }
}

/// Exit codes consistent with `compactd compact`: 2 bad input (including
/// INVALID_ARGUMENT), 3 the budget cannot be met, 1 anything else.
fn client_failure(e: ClientError) -> Failure {
    match (&e, e.status().map(tonic::Status::code)) {
        (_, Some(Code::InvalidArgument))
        | (ClientError::Address { .. } | ClientError::Credential, _) => Failure::bad_input(e),
        _ if e.reason() == Some("INSUFFICIENT_BUDGET") => Failure::budget(e),
        _ => Failure::other(e),
    }
}

fn response_failure(e: ConvertError) -> Failure {
    Failure::other(ClientError::Response(e))
}

fn build(args: &CallArgs) -> Result<Built, Failure> {
    let method = match args.method {
        Method::DeleteThread => "delete-thread",
        Method::ResetPlan => "reset-plan",
        Method::Explain => "explain",
        Method::SearchContext => "search-context",
        _ => "rehydrate",
    };
    let required_for = |v: &Option<String>, option: &str| {
        v.clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Failure::bad_input(format!("--{option} is required for {method}")))
    };
    Ok(match args.method {
        Method::Compact => {
            let (thread, system_prompt, tools) = input(args)?;
            Built::Compact(pb::CompactRequest {
                thread: Some(thread),
                model: args.model.clone().unwrap_or_default(),
                max_input_tokens: args.max_input_tokens.unwrap_or(0),
                system_prompt,
                tools,
                expected_version: args.expected_version,
                ..Default::default()
            })
        }
        Method::Render => {
            let (thread, system_prompt, tools) = input(args)?;
            Built::Render(pb::RenderRequest {
                thread: Some(thread),
                plan_version: args.plan_version,
                compact_first: args.compact_first,
                system_prompt,
                tools,
                format: pb::OutputFormat::from(args.format) as i32,
                model: args.model.clone().unwrap_or_default(),
                max_output_tokens: args.max_tokens,
                rehydrate_artifact_ids: args.artifact_id.iter().cloned().collect(),
                max_input_tokens: args.max_input_tokens.unwrap_or(0),
                expected_version: args.expected_version,
                omit_pending_calls: args.omit_pending_calls,
                ..Default::default()
            })
        }
        Method::Rehydrate => Built::Rehydrate(pb::RehydrateRequest {
            thread_id: required_for(&args.thread_id, "thread-id")?,
            artifact_id: required_for(&args.artifact_id, "artifact-id")?,
            max_tokens: args.max_tokens.unwrap_or(0),
            model: args.model.clone().unwrap_or_default(),
            tenant_id: None,
        }),
        Method::DeleteThread => Built::DeleteThread(pb::DeleteThreadRequest {
            thread_id: required_for(&args.thread_id, "thread-id")?,
            tenant_id: None,
        }),
        Method::ResetPlan => Built::ResetPlan(pb::ResetPlanRequest {
            thread_id: required_for(&args.thread_id, "thread-id")?,
            expected_version: args.expected_version,
            tenant_id: None,
        }),
        Method::Explain => {
            Built::Explain(explain_request(args, required_for(&args.text, "text")?)?)
        }
        Method::SearchContext => {
            let query = required_for(&args.text, "text")?;
            let (mut thread, _, _) = input(args)?;
            if let Some(id) = &args.thread_id {
                thread.id = id.clone();
            }
            Built::SearchContext(pb::SearchContextRequest {
                thread: Some(thread),
                query,
                max_results: args.max_results,
                tenant_id: None,
                append: None,
                input: None,
            })
        }
    })
}

/// Explain's request. The thread is optional: with it, Explain says which
/// messages hold the text.
fn explain_request(args: &CallArgs, text: String) -> Result<pb::ExplainRequest, Failure> {
    // The thread is optional: with it, Explain says which messages
    // hold the text.
    let thread = match &args.input {
        Some(_) => {
            let (mut thread, _, _) = input(args)?;
            if let Some(id) = &args.thread_id {
                thread.id = id.clone();
            }
            Some(thread)
        }
        None => None,
    };
    let thread_id = match (&args.thread_id, &thread) {
        (Some(id), _) => id.clone(),
        (None, Some(t)) => t.id.clone(),
        (None, None) => {
            return Err(Failure::bad_input(
                "--thread-id is required for explain".to_string(),
            ))
        }
    };
    Ok(pb::ExplainRequest {
        thread_id,
        plan_version: args.plan_version,
        text,
        thread,
        search_artifacts: args.search_artifacts,
        tenant_id: None,
        append: None,
    })
}

/// SearchContext's response: passages best first.
fn search_json(r: pb::SearchContextResponse) -> Result<Value, ConvertError> {
    let mut passages = Vec::new();
    for p in r.passages {
        passages.push(json!({
            "message_id": p.message_id,
            "artifact_id": p.artifact_id,
            "line": p.line,
            "text": p.text,
            "score": p.score,
            "sensitivity": compactd::proto::sensitivity(p.sensitivity, "passages.sensitivity")?,
        }));
    }
    Ok(json!({
        "plan_version": r.plan_version,
        "passages": passages,
        "withheld": r.withheld,
    }))
}

/// The input file as a thread on the wire, its system prompt and tool
/// schemas, with `--thread-id` and `--system` applied.
fn input(args: &CallArgs) -> Result<(pb::Thread, Option<String>, Vec<pb::ToolSchema>), Failure> {
    let path = args.input.as_ref().ok_or_else(|| {
        Failure::bad_input(
            "--input is required for compact, render and search-context (`-` for stdin)",
        )
    })?;
    let input = read_thread(path)?;
    let mut thread = pb::Thread::from(&input.thread);
    if let Some(id) = &args.thread_id {
        thread.id = id.clone();
    }
    let system = args.system.clone().or(input.system);
    Ok((thread, system, input.tools.iter().map(Into::into).collect()))
}

// ───────────────────────────── responses → JSON ─────────────────────────────

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, ConvertError> {
    serde_json::to_value(v).map_err(|e| ConvertError::new("", e.to_string()))
}

/// A `CompactResponse` as JSON.
fn compact_json(r: pb::CompactResponse) -> Result<Value, ConvertError> {
    let plan: CompactionPlan = required(r.plan, "plan")?;
    let budget: Option<BudgetReport> = optional(r.budget, "budget")?;
    let per_reducer: Vec<ReducerReport> = each(r.per_reducer, "per_reducer")?;
    Ok(json!({
        "version": r.version,
        "reused": r.reused,
        "triggered": r.triggered,
        "tokens_before": r.tokens_before,
        "tokens_after": r.tokens_after,
        "budget": budget,
        "per_reducer": per_reducer,
        "warnings": r.warnings,
        "new_artifact_ids": r.new_artifact_ids,
        "target_use": r.target_use,
        "plan": to_json(&plan)?,
    }))
}

/// A `RenderResponse` as JSON. Neutral responses carry `system_prompt` and
/// `messages`; provider formats carry `provider_payload`, parsed.
fn render_json(r: pb::RenderResponse, format: Format) -> Result<Value, ConvertError> {
    let mut out = serde_json::Map::new();
    out.insert("plan_version".into(), json!(r.plan_version));
    out.insert("format".into(), json!(format.name()));
    if r.provider_payload_json.is_empty() {
        out.insert("system_prompt".into(), json!(r.system_prompt));
        let messages: Vec<RenderedMessage> = each(r.messages, "messages")?;
        out.insert("messages".into(), to_json(&messages)?);
    } else {
        let payload: Value = serde_json::from_str(&r.provider_payload_json).map_err(|e| {
            ConvertError::new("provider_payload_json", format!("invalid JSON: {e}"))
        })?;
        out.insert("provider_payload".into(), payload);
    }
    let tokens: RequestTokens = required(r.tokens, "tokens")?;
    let audit: AuditRecord = required(r.audit, "audit")?;
    let rehydrated: Vec<RehydrationReport> = each(r.rehydrated, "rehydrated")?;
    out.insert("tokens".into(), to_json(&tokens)?);
    out.insert("audit".into(), to_json(&audit)?);
    out.insert("rehydrated".into(), to_json(&rehydrated)?);
    let compaction = match r.compaction {
        Some(c) => compact_json(c).map_err(|e| e.within("compaction"))?,
        None => Value::Null,
    };
    out.insert("compaction".into(), compaction);
    Ok(Value::Object(out))
}

/// An `ExplainResponse` as JSON (enums as lower-case names).
fn explain_json(r: pb::ExplainResponse) -> Value {
    let action = |a: i32| match pb::EvictionAction::try_from(a) {
        Ok(pb::EvictionAction::Externalized) => "externalized",
        Ok(pb::EvictionAction::Summarized) => "summarized",
        Ok(pb::EvictionAction::Cleared) => "cleared",
        Ok(pb::EvictionAction::Dropped) => "dropped",
        _ => "verbatim",
    };
    let verdict = match pb::ExplainVerdict::try_from(r.verdict) {
        Ok(pb::ExplainVerdict::Verbatim) => "verbatim",
        Ok(pb::ExplainVerdict::InSummary) => "in_summary",
        Ok(pb::ExplainVerdict::CompactedOut) => "compacted_out",
        _ => "not_found",
    };
    json!({
        "plan_version": r.plan_version,
        "verdict": verdict,
        "messages": r.messages.iter().map(|h| json!({
            "message_id": h.message_id,
            "action": if h.verbatim { "verbatim" } else { action(h.action) },
            "first_message_id": h.first_message_id,
            "last_message_id": h.last_message_id,
            "strategy": h.strategy,
            "artifact_id": h.artifact_id,
            "in_replacement": h.in_replacement,
        })).collect::<Vec<_>>(),
        "summaries": r.summaries.iter().map(|h| json!({
            "action": action(h.action),
            "first_message_id": h.first_message_id,
            "last_message_id": h.last_message_id,
            "strategy": h.strategy,
            "artifact_id": h.artifact_id,
        })).collect::<Vec<_>>(),
        "artifacts": r.artifacts.iter().map(|a| json!({
            "artifact_id": a.artifact_id,
            "message_ids": a.message_ids,
        })).collect::<Vec<_>>(),
        "artifacts_not_searched": r.artifacts_not_searched,
        "warnings": r.warnings,
    })
}

/// A `RehydrateResponse` as JSON.
fn rehydrate_json(r: pb::RehydrateResponse) -> Result<Value, ConvertError> {
    Ok(json!({
        "artifact_id": r.artifact_id,
        "content": r.content,
        "truncated": r.truncated,
        "tokens": r.tokens,
        "sensitivity": compactd::proto::sensitivity(r.sensitivity, "sensitivity")?,
        "message_ids": r.message_ids,
        "content_hash": r.content_hash,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CallArgs,
    }

    fn args(argv: &[&str]) -> CallArgs {
        Cmd::try_parse_from(std::iter::once("call").chain(argv.iter().copied()))
            .expect("valid arguments")
            .args
    }

    fn write(dir: &tempfile::TempDir, name: &str, v: &Value) -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).expect("write input");
        p.display().to_string()
    }

    #[test]
    fn requests_are_built_from_an_openai_file() {
        let dir = tempfile::tempdir().unwrap();
        let input = write(
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
        let a = args(&[
            "render",
            "--input",
            &input,
            "--format",
            "anthropic_messages",
            "--compact-first",
            "--max-input-tokens",
            "8000",
            "--expected-version",
            "0",
            "--max-tokens",
            "512",
            "--artifact-id",
            "art_0123456789abcdef0123456789abcdef",
        ]);
        let Ok(Built::Render(r)) = build(&a) else {
            panic!("a render request")
        };
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
        let a = args(&[
            "compact",
            "--input",
            &input,
            "--system",
            "flag system prompt",
            "--thread-id",
            "t-9",
        ]);
        let Ok(Built::Compact(c)) = build(&a) else {
            panic!("a compact request")
        };
        assert_eq!(c.thread.as_ref().unwrap().id, "t-9");
        assert_eq!(c.system_prompt.as_deref(), Some("flag system prompt"));
        assert_eq!((c.max_input_tokens, c.model.as_str()), (0, ""));
    }

    #[test]
    fn bad_options_and_input_exit_2_naming_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let e = build(&args(&["compact"])).err().expect("needs --input");
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--input"), "{}", e.message);
        let bad_role = write(
            &dir,
            "t.json",
            &json!([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]),
        );
        let e = build(&args(&["compact", "--input", &bad_role]))
            .err()
            .expect("bad role");
        assert_eq!(e.code, 2);
        assert!(e.message.contains("messages[1].role"), "{}", e.message);
        let e = build(&args(&["rehydrate", "--thread-id", "t"]))
            .err()
            .expect("needs --artifact-id");
        assert!(e.message.contains("--artifact-id"), "{}", e.message);
        assert!(Cmd::try_parse_from(["call", "render", "--format", "xml"]).is_err());
        assert!(
            Cmd::try_parse_from(["call", "compact", "--token", "a", "--api-key", "b"]).is_err(),
            "one credential at a time"
        );
    }

    #[test]
    fn responses_are_converted_strictly() {
        let bad = pb::RenderResponse {
            provider_payload_json: "{".into(),
            ..Default::default()
        };
        let e = render_json(bad, Format::OpenAiChat).unwrap_err();
        assert_eq!(e.field, "provider_payload_json");
        let r = pb::RenderResponse {
            provider_payload_json: r#"{"model":"gpt-4o","messages":[]}"#.into(),
            tokens: Some(pb::TokenBreakdown::default()),
            audit: Some(pb::AuditRecord {
                evictions: Some(pb::EvictionCounts::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let out = render_json(r, Format::OpenAiChat).unwrap();
        assert_eq!(out["provider_payload"]["model"], "gpt-4o");
        assert_eq!(out["format"], "openai");
        assert!(out.get("messages").is_none());

        // A record a server of this version never sends: not silently read as a default.
        let plan = pb::CompactionPlan {
            clearings: vec![pb::ClearRecord {
                span: Some(pb::SpanReference::default()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = compact_json(pb::CompactResponse {
            plan: Some(plan),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "plan.clearings[0].reason");
        let e = rehydrate_json(pb::RehydrateResponse {
            sensitivity: 77,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "sensitivity");
    }

    /// Every method against a real server (dev mode on 127.0.0.1:0).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_every_method_against_a_real_server() {
        let dir = tempfile::tempdir().unwrap();
        let settings = compactd::settings::Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            auth: compactd::security::AuthConfig {
                dev: true,
                ..Default::default()
            },
            access_log: compactd::server::access::AccessLogSink::Off,
            ..Default::default()
        };
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(compactd::startup::serve(settings, listener, async {
            let _ = stopped.await;
        }));

        // A canonical thread whose one big tool output must be externalized.
        let big: String = (0..1500)
            .map(|i| format!("{i:05} INFO worker-{} batch {} ok\n", i % 7, i * 31 % 997))
            .collect();
        let input = write(
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
        let base = [
            "--addr",
            &addr,
            "--input",
            &input,
            "--max-input-tokens",
            "4000",
        ];
        let with = |extra: &[&str]| {
            let mut v: Vec<&str> = extra[..1].to_vec();
            v.extend_from_slice(&base);
            v.extend_from_slice(&extra[1..]);
            args(&v)
        };
        let out = call(&with(&["compact"])).await.expect("compact");
        assert_eq!(out["version"], 1);
        assert!(out["tokens_after"].as_u64() < out["tokens_before"].as_u64());
        let artifact = out["plan"]["externalizations"][0]["artifact_id"]
            .as_str()
            .expect("the big output was externalized")
            .to_string();
        assert_eq!(out["new_artifact_ids"][0], artifact.as_str());

        let out = call(&with(&["render"])).await.expect("render");
        assert_eq!(out["plan_version"], 1);
        assert_eq!(out["system_prompt"], "You are careful.");
        assert!(out["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["origin"] == "externalized"));
        assert_eq!(out["compaction"], Value::Null);
        assert_eq!(out["audit"]["evictions"]["externalized"], 1);

        let out = call(&with(&["render", "--format", "openai", "--compact-first"]))
            .await
            .expect("render openai");
        assert_eq!(out["provider_payload"]["messages"][0]["role"], "system");
        assert_eq!(out["compaction"]["reused"], true);

        let out = call(&args(&[
            "rehydrate",
            "--addr",
            &addr,
            "--thread-id",
            "t-call",
            "--artifact-id",
            &artifact,
            "--max-tokens",
            "50",
        ]))
        .await
        .expect("rehydrate");
        assert_eq!(out["truncated"], true);
        assert!(out["tokens"].as_u64().unwrap() <= 50);
        assert!(out["content"].as_str().unwrap().starts_with("00000 INFO"));
        assert_eq!(out["sensitivity"], "internal");

        // Where a line of the externalized output went.
        let out = call(&args(&[
            "explain",
            "--addr",
            &addr,
            "--thread-id",
            "t-call",
            "--text",
            "00000 INFO",
            "--search-artifacts",
        ]))
        .await
        .expect("explain");
        assert_eq!(out["verdict"], "compacted_out", "{out}");
        assert_eq!(out["artifacts"][0]["artifact_id"], artifact.as_str());
        let e = call(&args(&[
            "explain",
            "--addr",
            &addr,
            "--thread-id",
            "t-call",
        ]))
        .await
        .unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--text"), "{}", e.message);

        // A stale expected version: ABORTED, with the reason decoded.
        let e = call(&with(&["compact", "--expected-version", "7"]))
            .await
            .unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.message.starts_with("ABORTED: "), "{}", e.message);
        assert!(
            e.message.contains("reason VERSION_CONFLICT"),
            "{}",
            e.message
        );

        // INVALID_ARGUMENT from the server exits 2, naming the field.
        let e = call(&with(&["compact", "--thread-id", ""]))
            .await
            .unwrap_err();
        assert_eq!(e.code, 2, "{}", e.message);
        assert!(e.message.contains("field thread.id"), "{}", e.message);

        // Operators' lifecycle calls.
        let out = call(&args(&[
            "reset-plan",
            "--addr",
            &addr,
            "--thread-id",
            "t-call",
        ]))
        .await
        .expect("reset-plan");
        assert_eq!(out["previous_version"], 1);
        assert_eq!(out["version"], 2);
        let out = call(&args(&[
            "delete-thread",
            "--addr",
            &addr,
            "--thread-id",
            "t-call",
        ]))
        .await
        .expect("delete-thread");
        assert_eq!(out["had_plan"], true);
        assert_eq!(out["artifacts_deleted"], 1);
        let e = call(&args(&["delete-thread", "--addr", &addr]))
            .await
            .unwrap_err();
        assert_eq!(e.code, 2);
        assert!(
            e.message
                .contains("--thread-id is required for delete-thread"),
            "{}",
            e.message
        );

        // An impossible budget exits 3, like the offline command.
        let e = call(&args(&[
            "compact",
            "--addr",
            &addr,
            "--input",
            &input,
            "--max-input-tokens",
            "10",
            "--thread-id",
            "t-tiny",
        ]))
        .await
        .unwrap_err();
        assert_eq!(e.code, 3, "{}", e.message);

        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }
}
