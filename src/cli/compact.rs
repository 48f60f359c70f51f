//! `compactd compact`: the whole Compact + Render use case offline, over
//! in-memory stores, printing `{"plan", "request", "report"}`. The same code
//! as the service runs; only the stores differ, and artifact ids derive from
//! the content so the same input always prints the same output.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

use compactd::app::{
    App, CompactCommand, RenderCommand, RenderOutcome, RenderedOutput, SearchCommand,
};
use compactd::config;
use compactd::model::{CompactionPlan, Thread, ToolSchema};
use compactd::security::SecurityContext;
use compactd::store::{MemoryPlanStore, PlanStore};

use compactd::provider::Format;

use super::{read_thread, runtime, Failure};

/// What `compactd compact` and `compactd inspect` share: the thread, and
/// how it is compacted and rendered.
#[derive(clap::Args)]
pub struct OfflineArgs {
    /// Thread JSON (canonical, or an OpenAI `messages` array / request body); `-` for stdin.
    #[arg(long)]
    pub input: PathBuf,
    /// YAML config (the service's file: default_model, default_max_input_tokens, policy).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Model: picks the tokenizer and is written into provider payloads.
    #[arg(long)]
    pub model: Option<String>,
    /// The model's input limit in tokens.
    #[arg(long)]
    pub max_input_tokens: Option<u32>,
    /// Output form of the request: neutral, openai, anthropic or responses.
    #[arg(long, default_value = "neutral")]
    pub format: Format,
    /// System prompt (overrides one in the input file).
    #[arg(long)]
    pub system: Option<String>,
    /// Response `max_tokens` written into provider payloads.
    #[arg(long)]
    pub max_output_tokens: Option<u32>,
    /// Leave tool calls without a result out of the request instead of failing.
    #[arg(long)]
    pub omit_pending_calls: bool,
    /// Render without the recall block (to see what it adds).
    #[arg(long)]
    pub no_recall: bool,
}

/// Arguments of `compactd compact`.
#[derive(clap::Args)]
pub struct CompactArgs {
    #[command(flatten)]
    offline: OfflineArgs,
    /// After compacting, run SearchContext for each line of this file and
    /// print the passages under `search` (what an agent's `search_context`
    /// calls would get back).
    #[arg(long)]
    search_queries: Option<PathBuf>,
}

/// One offline Render (compact-first, or of a given plan) and what went
/// into it.
pub struct Offline {
    /// The application it ran on (in-memory stores).
    pub app: App,
    /// The runtime it ran on.
    pub rt: tokio::runtime::Runtime,
    /// The caller (the development context).
    pub ctx: SecurityContext,
    /// What Render returned.
    pub out: RenderOutcome,
    /// The thread as read from the input.
    pub thread: Arc<Thread>,
    /// The system prompt the request carries.
    pub system: Option<String>,
    /// The tool schemas the request carries.
    pub tools: Arc<Vec<ToolSchema>>,
    /// The model (the option, else the config's default).
    pub model: String,
    /// The input limit (the option, else the config's default).
    pub max_input_tokens: u32,
    /// Everything the thread, the pipeline and the renderer warned about,
    /// once each.
    pub warnings: Vec<String>,
}

/// Runs the offline Render of `args`: with no `plan`, Compact and Render
/// in one step, as the service does (`compact_first`); with a plan, that
/// plan committed to the in-memory store first and rendered as it is.
pub fn offline(args: &OfflineArgs, plan: Option<CompactionPlan>) -> Result<Offline, Failure> {
    let settings =
        config::load(args.config.as_deref(), std::env::vars()).map_err(Failure::bad_input)?;
    settings.policy.validate().map_err(Failure::bad_input)?;
    let defaults = settings.app_defaults();
    let model = args.model.clone().unwrap_or_else(|| defaults.model.clone());
    // The tokenizer's tables load on another core while the input is read.
    let warm = model.clone();
    std::thread::spawn(move || drop(compactd::tokens::counter_for_model(&warm)));
    let input = read_thread(&args.input)?;
    let policy = settings.policy.clone();
    let max_input_tokens = args.max_input_tokens.unwrap_or(defaults.max_input_tokens);
    let rt = runtime()?;
    let ctx = SecurityContext::dev();
    let compact_first = plan.is_none();
    let app = match plan {
        None => App::offline(defaults),
        Some(plan) => {
            let plans = Arc::new(MemoryPlanStore::default());
            rt.block_on(plans.commit(&ctx.tenant_id, &input.thread.id, &plan, 0))
                .map_err(|e| Failure::bad_input(format!("--plan: {e}")))?;
            App::offline_with_plans(defaults, plans)
        }
    };
    let mut request = CompactCommand::new(input.thread, policy);
    request.model = args.model.clone();
    request.max_input_tokens = args.max_input_tokens;
    request.system = args.system.clone().or(input.system);
    request.tools = Arc::new(input.tools);
    let thread = Arc::clone(&request.thread);
    let (system, tools) = (request.system.clone(), Arc::clone(&request.tools));
    let cmd = RenderCommand {
        request,
        compact_first,
        plan_version: 0,
        format: args.format,
        max_output_tokens: args.max_output_tokens,
        prompt_cache: Default::default(),
        rehydrate_artifact_ids: Vec::new(),
        omit_pending_calls: args.omit_pending_calls,
        auto_rehydrate: None,
        recall: args.no_recall.then_some(false),
        read_artifact_tool: false,
        search_context_tool: false,
        injections: Vec::new(),
    };
    let out = rt.block_on(app.render(&ctx, cmd))?;
    let mut warnings: Vec<String> = Vec::new();
    let from_compaction = out
        .compaction
        .as_ref()
        .map(|c| c.all_warnings())
        .unwrap_or_default();
    for w in from_compaction
        .into_iter()
        .chain(out.audit.warnings.iter().cloned())
    {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    Ok(Offline {
        app,
        rt,
        ctx,
        out,
        thread,
        system,
        tools,
        model,
        max_input_tokens,
        warnings,
    })
}

/// Compacts and renders the input; the JSON document to print.
pub fn run(args: &CompactArgs) -> Result<String, Failure> {
    let queries: Vec<String> = match &args.search_queries {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("--search-queries {}: {e}", path.display())))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    };
    let Offline {
        app,
        rt,
        ctx,
        out,
        thread,
        warnings,
        ..
    } = offline(&args.offline, None)?;
    let mut searches = Vec::new();
    for query in queries {
        let found = rt.block_on(app.search_context(
            &ctx,
            SearchCommand {
                thread: Arc::clone(&thread),
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
