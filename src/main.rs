//! The `compactd` command line: parses, then dispatches to `cli/`.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cli::{auth, call, compact, config, inspect, keys, serve};

/// mimalloc instead of glibc's malloc: compaction makes and drops millions
/// of small strings on several threads, and glibc's bookkeeping took about a
/// fifth of a cold compaction's CPU. A/B in docs/performance.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Runs the gRPC service (the default). Needs an auth method configured,
    /// or `--dev` for a development server on a loopback address.
    Serve(serve::ServeArgs),
    /// Compacts a thread file offline and prints {"plan", "request", "report"} as JSON.
    Compact(compact::CompactArgs),
    /// Shows a plan and its render for people: a table of spans in thread
    /// order with their fate and tokens before and after, the budget and the
    /// warnings (`--html` writes the same as one self-contained page).
    Inspect(inspect::InspectArgs),
    /// Calls a running service (an operator client) and prints the response as JSON.
    Call(call::CallArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Authentication tools.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// The keyring that encrypts artifacts in the data directory.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
}

/// Exit codes: 2 bad input or config, 3 the budget cannot be met, 1 anything else.
fn main() -> ExitCode {
    compactd::runtime::install_panic_hook();
    let result = match Cli::parse().command {
        None => serve::run(&serve::ServeArgs::default()),
        Some(Command::Serve(args)) => serve::run(&args),
        Some(Command::Compact(args)) => compact::run(&args),
        Some(Command::Inspect(args)) => inspect::run(&args),
        Some(Command::Call(args)) => call::run(&args),
        Some(Command::Config(cmd)) => config::run(&cmd),
        Some(Command::Auth(cmd)) => auth::run(&cmd),
        Some(Command::Keys(cmd)) => keys::run(&cmd),
    };
    match result {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
