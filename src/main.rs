//! The `compactd` command line.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use compactd::config::Config;
use compactd::model::thread_from_json;
use compactd::reduce::{bind_artifacts, compact, CompactError, CompactRequest, Engine};
use compactd::render::{anthropic, openai, render, ProviderOptions, RenderInput, RequestCounter};
use compactd::summarize::ExtractiveSummarizer;
use compactd::tokens::{counter_for_model, TokenLedger};

#[derive(Parser)]
#[command(
    name = "compactd",
    version,
    about = "Context compaction for LLM agent threads"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compacts a thread file offline and prints {"plan", "request", "report"} as JSON.
    Compact(CompactArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Neutral,
    Openai,
    Anthropic,
}

#[derive(clap::Args)]
struct CompactArgs {
    /// Thread JSON (canonical, or an OpenAI `messages` array / request body); `-` for stdin.
    #[arg(long)]
    input: PathBuf,
    /// YAML config (model, max_input_tokens, policy).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model: picks the tokenizer and is written into provider payloads.
    #[arg(long)]
    model: Option<String>,
    /// The model's input limit in tokens.
    #[arg(long)]
    max_input_tokens: Option<u32>,
    /// Output form of the request.
    #[arg(long, value_enum, default_value = "neutral")]
    format: Format,
    /// System prompt (overrides one in the input file).
    #[arg(long)]
    system: Option<String>,
    /// Response `max_tokens` written into Anthropic payloads.
    #[arg(long)]
    max_output_tokens: Option<u32>,
}

/// Exit codes: 2 bad input, 3 the budget cannot be met, 1 anything else.
fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Compact(args) => match run_compact(&args) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err((code, msg)) => {
                eprintln!("error: {msg}");
                ExitCode::from(code)
            }
        },
    }
}

fn run_compact(args: &CompactArgs) -> Result<String, (u8, String)> {
    let bad = |m: String| (2u8, m);
    let mut cfg = match &args.config {
        Some(p) => Config::load(p).map_err(|e| bad(e.to_string()))?,
        None => Config::default(),
    };
    if let Some(m) = &args.model {
        cfg.model = m.clone();
    }
    if let Some(n) = args.max_input_tokens {
        cfg.max_input_tokens = n;
    }
    cfg.validate().map_err(|e| bad(e.to_string()))?;

    let text = if args.input.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| bad(format!("stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(&args.input)
            .map_err(|e| bad(format!("{}: {e}", args.input.display())))?
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("input is not JSON: {e}")))?;
    let default_id = args
        .input
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| *s != "-")
        .unwrap_or("thread");
    let input = thread_from_json(&value, default_id).map_err(|e| bad(e.to_string()))?;
    let system = args.system.clone().or(input.system.clone());

    let counter = counter_for_model(&cfg.model);
    let ledger = TokenLedger::default();
    let summarizer = ExtractiveSummarizer;
    let engine = Engine {
        counter: counter.as_ref(),
        ledger: &ledger,
        summarizer: &summarizer,
    };
    let observations = BTreeMap::new();
    let req = CompactRequest {
        thread: &input.thread,
        policy: &cfg.policy,
        max_input_tokens: cfg.max_input_tokens,
        system: system.as_deref(),
        tools: &input.tools,
        previous: None,
        observations: &observations,
        skip_aggressive: false,
        limits: Default::default(),
    };
    let mut out = compact(&req, &engine).map_err(|e| match e {
        CompactError::InvalidThread(_)
        | CompactError::InvalidPolicy(_)
        | CompactError::ZeroBudget => bad(e.to_string()),
        CompactError::InsufficientBudget { .. } => (3, e.to_string()),
        other => (1, other.to_string()),
    })?;

    // Offline there is no store: artifact ids derive from the content, so the
    // same input always prints the same output.
    let mut ids = BTreeMap::new();
    let mut artifacts = Vec::new();
    for a in &out.pending {
        let digest = Sha256::digest(format!("{}\0{}", input.thread.id, a.content_hash).as_bytes());
        let id = format!("art_{}", &hex::encode(digest)[..32]);
        artifacts.push(json!({
            "artifact_id": id,
            "message_ids": a.message_ids,
            "tokens": a.tokens,
            "sensitivity": a.sensitivity,
            "content_hash": a.content_hash,
        }));
        ids.insert(a.placeholder.clone(), id);
    }
    bind_artifacts(&mut out.plan, &ids);

    let render_input = RenderInput {
        system: system.as_deref(),
        tools: &input.tools,
        rehydrated: &[],
        options: &cfg.policy.render,
    };
    let request = render(&input.thread, &out.plan, &render_input);
    let tokens = RequestCounter::new(counter.as_ref(), &ledger).request(&request);
    out.plan.compacted_token_count = tokens.total;
    let opts = ProviderOptions {
        model: cfg.model.clone(),
        max_output_tokens: args.max_output_tokens,
    };
    let request_json = match args.format {
        Format::Neutral => serde_json::to_value(&request).map_err(|e| (1, e.to_string()))?,
        Format::Openai => openai::to_openai(&request, &opts),
        Format::Anthropic => anthropic::to_anthropic(&request, &opts),
    };
    let report = &out.report;
    let doc = json!({
        "plan": out.plan,
        "request": request_json,
        "report": {
            "tokens_before": report.tokens_before,
            "tokens_after": tokens.total,
            "tokens": tokens,
            "budget": report.budget,
            "triggered": report.triggered,
            "keep_recent_turns": report.keep_recent_turns,
            "keep_tool_io_pairs": report.keep_tool_io_pairs,
            "per_reducer": report.per_reducer,
            "warnings": report.warnings,
            "artifacts": artifacts,
            "tokenizer": counter.name(),
        }
    });
    serde_json::to_string_pretty(&doc).map_err(|e| (1, e.to_string()))
}
