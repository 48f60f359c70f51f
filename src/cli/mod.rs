//! The `compactd` subcommands, one per file. Each has its clap arguments and
//! a `run` that returns what to print or a [`Failure`] with its exit code.

pub mod auth;
pub mod call;
pub mod compact;
pub mod config;
pub mod inspect;
pub mod keys;
pub mod serve;

use std::io::Read as _;
use std::path::Path;

use compactd::app::AppError;
use compactd::provider::{thread_from_json, ThreadInput};

/// Why a command failed, and the process exit code that says so:
/// 2 bad input or config, 3 the budget cannot be met, 1 anything else.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// What to print after `error: `.
    pub message: String,
}

impl Failure {
    /// Exit code 2: the input, an option or the config is wrong.
    pub fn bad_input(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// Exit code 3: the budget cannot be met.
    pub fn budget(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 3,
            message: message.to_string(),
        }
    }

    /// Exit code 1: anything else.
    pub fn other(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }
}

impl From<AppError> for Failure {
    fn from(e: AppError) -> Self {
        match e {
            AppError::InvalidArgument { .. }
            | AppError::PlanMismatch { .. }
            | AppError::PendingToolCall { .. } => Failure::bad_input(e),
            AppError::InsufficientBudget { .. } => Failure::budget(e),
            AppError::VersionConflict { .. }
            | AppError::PermissionDenied(_)
            | AppError::Unauthenticated(_)
            | AppError::NotFound(_)
            | AppError::KeyDeleted(_)
            | AppError::Unavailable(_)
            | AppError::Internal(_)
            | AppError::Cancelled
            | AppError::StrategyUnavailable(_)
            | AppError::QuotaExceeded { .. }
            | AppError::SessionStale { .. } => Failure::other(e),
        }
    }
}

/// A thread file (canonical JSON, an OpenAI `messages` array or a whole
/// request body); `-` reads stdin. The thread id defaults to the file name.
pub fn read_thread(path: &Path) -> Result<ThreadInput, Failure> {
    let unreadable = |e: std::io::Error| Failure::bad_input(format!("{}: {e}", path.display()));
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(unreadable)?;
        s
    } else {
        std::fs::read_to_string(path).map_err(unreadable)?
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::bad_input(format!("input is not JSON: {e}")))?;
    let default_id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| *s != "-")
        .unwrap_or("thread");
    thread_from_json(&value, default_id).map_err(Failure::bad_input)
}

/// A runtime for one command: the async use cases on the current thread,
/// CPU-bound work on the blocking pool.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::other)
}
