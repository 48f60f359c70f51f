//! `compactd compact`: the whole Compact + Render use case offline, over
//! in-memory stores, printing `{"plan", "request", "report"}`. The same code
//! as the service runs; only the stores differ, and artifact ids derive from
//! the content so the same input always prints the same output.

use std::path::PathBuf;

use serde_json::{json, Value};

use compactd::app::{App, CompactCommand, RenderCommand, RenderedOutput, SearchCommand};
use compactd::config;
use compactd::security::SecurityContext;

use compactd::provider::Format;

use super::{read_thread, runtime, Failure};

/// Arguments of `compactd compact`.
#[derive(clap::Args)]
pub struct CompactArgs {
    /// Thread JSON (canonical, or an OpenAI `messages` array / request body); `-` for stdin.
    #[arg(long)]
    input: PathBuf,
    /// YAML config (the service's file: default_model, default_max_input_tokens, policy).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model: picks the tokenizer and is written into provider payloads.
    #[arg(long)]
    model: Option<String>,
    /// The model's input limit in tokens.
    #[arg(long)]
    max_input_tokens: Option<u32>,
    /// Output form of the request: neutral, openai, anthropic or responses.
    #[arg(long, default_value = "neutral")]
    format: Format,
    /// System prompt (overrides one in the input file).
    #[arg(long)]
    system: Option<String>,
    /// Response `max_tokens` written into provider payloads.
    #[arg(long)]
    max_output_tokens: Option<u32>,
    /// Leave tool calls without a result out of the request instead of failing.
    #[arg(long)]
    omit_pending_calls: bool,
    /// Render without the recall block (to see what it adds).
    #[arg(long)]
    no_recall: bool,
    /// After compacting, run SearchContext for each line of this file and
    /// print the passages under `search` (what an agent's `search_context`
    /// calls would get back).
    #[arg(long)]
    search_queries: Option<PathBuf>,
}

/// Compacts and renders the input; the JSON document to print.
pub fn run(args: &CompactArgs) -> Result<String, Failure> {
    let settings =
        config::load(args.config.as_deref(), std::env::vars()).map_err(Failure::bad_input)?;
    settings.policy.validate().map_err(Failure::bad_input)?;
    let input = read_thread(&args.input)?;
    let policy = settings.policy.clone();
    let app = App::offline(settings.app_defaults());
    let mut request = CompactCommand::new(input.thread, policy);
    request.model = args.model.clone();
    request.max_input_tokens = args.max_input_tokens;
    request.system = args.system.clone().or(input.system);
    request.tools = std::sync::Arc::new(input.tools);
    let queries = match &args.search_queries {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("--search-queries {}: {e}", path.display())))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    };
    let thread = std::sync::Arc::clone(&request.thread);
    let cmd = RenderCommand {
        request,
        compact_first: true,
        plan_version: 0,
        format: args.format,
        max_output_tokens: args.max_output_tokens,
        rehydrate_artifact_ids: Vec::new(),
        omit_pending_calls: args.omit_pending_calls,
        auto_rehydrate: None,
        recall: args.no_recall.then_some(false),
        read_artifact_tool: false,
        search_context_tool: false,
    };
    let rt = runtime()?;
    let ctx = SecurityContext::dev();
    let out = rt.block_on(app.render(&ctx, cmd))?;
    let mut searches = Vec::new();
    for query in queries {
        let found = rt.block_on(app.search_context(
            &ctx,
            SearchCommand {
                thread: std::sync::Arc::clone(&thread),
                query: query.clone(),
                max_results: 0,
                session: Default::default(),
            },
        ))?;
        let passages: Vec<Value> = found
            .passages
            .iter()
            .map(|p| {
                json!({
                    "message_id": p.message_id,
                    "artifact_id": p.artifact_id,
                    "line": p.line,
                    "text": p.text,
                })
            })
            .collect();
        searches.push(json!({"query": query, "passages": passages}));
    }

    let request = match out.output {
        RenderedOutput::Neutral(r) => serde_json::to_value(&r).map_err(Failure::other)?,
        // Parsed so that the document prints as one indented tree.
        RenderedOutput::Payload(json) => serde_json::from_str(&json).map_err(Failure::other)?,
    };
    let compaction = out
        .compaction
        .ok_or_else(|| Failure::other("compact_first returned no compaction"))?;
    let mut report = json!({
        "tokens_before": compaction.tokens_before(),
        "tokens_after": out.tokens.total,
        "tokens": out.tokens,
        "artifacts": compaction.artifacts,
        "tokenizer": compaction.tokenizer,
    });
    if let (Some(r), Value::Object(doc)) = (&compaction.report, &mut report) {
        doc.insert("budget".into(), json!(r.budget));
        doc.insert("triggered".into(), json!(r.triggered));
        doc.insert("target_use".into(), json!(r.target_use()));
        doc.insert("keep_recent_turns".into(), json!(r.keep_recent_turns));
        doc.insert("keep_tool_io_pairs".into(), json!(r.keep_tool_io_pairs));
        doc.insert("per_reducer".into(), json!(r.per_reducer));
    }
    // Everything the thread, the pipeline and the renderer warned about, once
    // each, in the report and on stderr (the document goes to stdout).
    let mut warnings: Vec<String> = Vec::new();
    for w in compaction
        .all_warnings()
        .into_iter()
        .chain(out.audit.warnings.clone())
    {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if let Value::Object(doc) = &mut report {
        doc.insert("warnings".into(), json!(warnings));
    }
    let mut doc = json!({
        "plan": out.plan,
        "request": request,
        "report": report,
    });
    if let (Some(_), Value::Object(d)) = (&args.search_queries, &mut doc) {
        d.insert("search".into(), Value::Array(searches));
    }
    serde_json::to_string_pretty(&doc).map_err(Failure::other)
}
