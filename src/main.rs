//! The `compactd` command line.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use compactd::config;
use compactd::model::thread_from_json;
use compactd::reduce::{bind_artifacts, compact, CompactError, CompactRequest, Engine, Memo};
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
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the gRPC service (the default). Without a config: dev mode on 127.0.0.1:50051.
    Serve(ServeArgs),
    /// Compacts a thread file offline and prints {"plan", "request", "report"} as JSON.
    Compact(CompactArgs),
    /// Calls a running service (an operator client) and prints the response as JSON.
    Call(CallArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Authentication tools.
    #[command(subcommand)]
    Auth(AuthCommand),
}

#[derive(Clone, Copy, ValueEnum)]
enum CallKind {
    Compact,
    Render,
    Rehydrate,
}

#[derive(clap::Args)]
struct CallArgs {
    /// Which RPC.
    #[arg(value_enum)]
    method: CallKind,
    /// Server address.
    #[arg(long, default_value = "http://127.0.0.1:50051", env = "COMPACTD_ADDR")]
    addr: String,
    /// Thread JSON (canonical, or an OpenAI messages array / request body); `-` for stdin.
    #[arg(long)]
    input: Option<PathBuf>,
    /// JWT bearer token.
    #[arg(long, env = "COMPACTD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// API key.
    #[arg(long, env = "COMPACTD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Model (tokenizer and payload model).
    #[arg(long)]
    model: Option<String>,
    /// The model's input limit.
    #[arg(long)]
    max_input_tokens: Option<u32>,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Render output: neutral, openai or anthropic.
    #[arg(long, default_value = "neutral")]
    format: String,
    /// Render: compact first, in the same round trip.
    #[arg(long)]
    compact_first: bool,
    /// Render: plan version (0 = latest).
    #[arg(long, default_value_t = 0)]
    plan_version: u64,
    /// Compact: fail with ABORTED unless this is the current plan version.
    #[arg(long)]
    expected_version: Option<u64>,
    /// Thread id (Rehydrate; overrides the input's id otherwise).
    #[arg(long)]
    thread_id: Option<String>,
    /// Artifact id (Rehydrate; Render rehydrates it explicitly).
    #[arg(long)]
    artifact_id: Option<String>,
    /// Rehydrate: token cap; Render: response max_tokens in provider payloads.
    #[arg(long)]
    max_tokens: Option<u32>,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Loads FILE (plus COMPACTD__* environment overrides), validates it and prints the result.
    Check {
        /// YAML config file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Prints the SHA-256 of an API key, for `auth.api_keys[].sha256` (the key itself is never stored).
    HashApiKey {
        /// The key; read from stdin when omitted.
        key: Option<String>,
    },
}

#[derive(clap::Args, Default)]
struct ServeArgs {
    /// YAML config file.
    #[arg(long, env = "COMPACTD_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address (overrides the config), e.g. 127.0.0.1:50051; port 0 picks a free port.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory of the embedded stores (overrides the config).
    #[arg(long)]
    data_dir: Option<PathBuf>,
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
    /// YAML config (the service's file: default_model, default_max_input_tokens, policy).
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

/// Exit codes: 2 bad input or config, 3 the budget cannot be met, 1 anything else.
fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => run_serve(&args).map(|()| String::new()),
        Command::Compact(args) => run_compact(&args),
        Command::Call(args) => run_call(args),
        Command::Config(ConfigCommand::Check { file }) => run_config_check(&file),
        Command::Auth(AuthCommand::HashApiKey { key }) => run_hash_api_key(key),
    };
    match result {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err((code, msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run_serve(args: &ServeArgs) -> Result<(), (u8, String)> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut settings =
        config::load(args.config.as_deref(), std::env::vars()).map_err(|e| (2, e.to_string()))?;
    if let Some(l) = args.listen {
        settings.listen = l;
    }
    if let Some(d) = &args.data_dir {
        settings.data_dir = d.clone();
    }
    // The one-command start: no credentials configured and a loopback address
    // means dev mode (fixed tenant `dev`, logged loudly at start-up).
    let configured = compactd::security::Authenticator::from_config(&settings.auth)
        .map(|a| a.is_configured())
        .unwrap_or(true);
    if !configured && settings.listen.ip().is_loopback() {
        settings.auth.dev = true;
    }
    config::check(&settings).map_err(|e| (2, e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| (1, e.to_string()))?;
    runtime.block_on(async move {
        let shutdown =
            shutdown_signal().map_err(|e| (1, format!("cannot install signal handlers: {e}")))?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|e| (1, format!("cannot listen on {}: {e}", settings.listen)))?;
        let addr = listener.local_addr().map_err(|e| (1, e.to_string()))?;
        // Scripts and tests read this line to find a port chosen with `:0`.
        println!("compactd listening on {addr}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        compactd::server::serve(settings, listener, shutdown)
            .await
            .map_err(|e| (1, e.to_string()))
    })
}

/// Resolves on SIGTERM or Ctrl-C; the server then drains in-flight calls.
/// The handlers are installed before the address is printed, so a signal
/// sent as soon as the server is announced is never the default "terminate".
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let ctrl_c = tokio::signal::ctrl_c();
    Ok(async move {
        #[cfg(unix)]
        let term = async move {
            term.recv().await;
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            () = term => {},
        }
        tracing::info!("shutdown requested; draining in-flight calls");
    })
}

fn run_call(a: CallArgs) -> Result<String, (u8, String)> {
    use compactd::server::client::{call, CallMethod, CallOptions};
    let opts = CallOptions {
        addr: a.addr,
        method: match a.method {
            CallKind::Compact => CallMethod::Compact,
            CallKind::Render => CallMethod::Render,
            CallKind::Rehydrate => CallMethod::Rehydrate,
        },
        input: a.input,
        bearer_token: a.token,
        api_key: a.api_key,
        model: a.model,
        max_input_tokens: a.max_input_tokens,
        system: a.system,
        format: a.format,
        compact_first: a.compact_first,
        plan_version: a.plan_version,
        expected_version: a.expected_version,
        thread_id: a.thread_id,
        artifact_id: a.artifact_id,
        max_tokens: a.max_tokens,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (1, e.to_string()))?;
    let value = runtime
        .block_on(call(&opts))
        .map_err(|e| (e.exit_code(), e.to_string()))?;
    serde_json::to_string_pretty(&value).map_err(|e| (1, e.to_string()))
}

fn run_config_check(file: &std::path::Path) -> Result<String, (u8, String)> {
    let settings = config::load(Some(file), std::env::vars()).map_err(|e| (2, e.to_string()))?;
    config::check(&settings).map_err(|e| (2, e.to_string()))?;
    let yaml = serde_yaml::to_string(&settings).map_err(|e| (1, e.to_string()))?;
    Ok(format!(
        "# {} is valid; effective configuration:\n{yaml}",
        file.display()
    ))
}

fn run_hash_api_key(key: Option<String>) -> Result<String, (u8, String)> {
    let key = match key {
        Some(k) => k,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| (2, format!("stdin: {e}")))?;
            s.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if key.is_empty() {
        return Err((2, "the key must not be empty".into()));
    }
    Ok(compactd::security::hash_api_key(&key))
}

fn run_compact(args: &CompactArgs) -> Result<String, (u8, String)> {
    let bad = |m: String| (2u8, m);
    let settings =
        config::load(args.config.as_deref(), std::env::vars()).map_err(|e| bad(e.to_string()))?;
    let model = args.model.clone().unwrap_or(settings.default_model);
    let max_input_tokens = args
        .max_input_tokens
        .unwrap_or(settings.default_max_input_tokens);
    let policy = settings.policy;
    policy.validate().map_err(|e| bad(e.to_string()))?;
    if model.is_empty() {
        return Err(bad("--model must not be empty".into()));
    }

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

    let counter = counter_for_model(&model);
    let ledger = TokenLedger::default();
    let summarizer = ExtractiveSummarizer;
    let memo = Memo::default();
    let engine = Engine {
        counter: counter.as_ref(),
        ledger: &ledger,
        summarizer: &summarizer,
        memo: &memo,
    };
    let observations = BTreeMap::new();
    let req = CompactRequest {
        thread: &input.thread,
        policy: &policy,
        max_input_tokens,
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
        options: &policy.render,
    };
    let request = render(&input.thread, &out.plan, &render_input);
    let tokens = RequestCounter::new(counter.as_ref(), &ledger).request(&request);
    out.plan.compacted_token_count = tokens.total;
    let opts = ProviderOptions {
        model: model.clone(),
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
