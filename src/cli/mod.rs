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
    let value =
        parse_json(&text).map_err(|e| Failure::bad_input(format!("input is not JSON: {e}")))?;
    let default_id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| *s != "-")
        .unwrap_or("thread");
    thread_from_json(&value, default_id).map_err(Failure::bad_input)
}

/// `text` as JSON. A top-level array (an OpenAI `messages` log) is split
/// into its elements first and they are parsed on every core: a long
/// thread's parse was a tenth of a cold compaction, on one core. The value
/// and any error are what `serde_json::from_str` gives.
fn parse_json(text: &str) -> serde_json::Result<serde_json::Value> {
    if !text.trim_start().starts_with('[') {
        return serde_json::from_str(text);
    }
    let Ok(elements) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text) else {
        return serde_json::from_str(text);
    };
    let parsed = compactd::par::map(
        &elements,
        |e| e.get().len(),
        |e| serde_json::from_str::<serde_json::Value>(e.get()),
    );
    match parsed.into_iter().collect::<serde_json::Result<Vec<_>>>() {
        Ok(values) => Ok(serde_json::Value::Array(values)),
        Err(_) => serde_json::from_str(text),
    }
}

/// A runtime for one command: the async use cases on the current thread,
/// CPU-bound work on the blocking pool.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::other)
}

#[cfg(test)]
mod tests {
    use super::parse_json;

    /// Split or not, the parse is `serde_json::from_str`'s: the same value,
    /// and the same error where the text is not JSON.
    #[test]
    fn an_array_parsed_by_its_elements_is_the_whole_parse() {
        let big: Vec<serde_json::Value> = (0..3_000)
            .map(|i| {
                serde_json::json!({
                    "role": if i % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("message {i} with \"quotes\", ünïcödé and 0.1 + 0.2 = {}", 0.1 + 0.2),
                    "n": i as f64 / 3.0,
                })
            })
            .collect();
        let big = serde_json::to_string(&big).expect("json");
        assert!(big.len() > compactd::par::PARALLEL_FROM_BYTES);
        for text in [
            big.as_str(),
            " [1, 2.5e300, -0.0, \"x\", {\"a\": [null, true]}] ",
            "[]",
            "{\"messages\": []}",
            "[1, 2,]",
            "[{\"a\": 1}, {\"a\": ]",
            "[\"\\ud800\"]",
            "[1] [2]",
        ] {
            let split = parse_json(text).map_err(|e| e.to_string());
            let whole = serde_json::from_str::<serde_json::Value>(text).map_err(|e| e.to_string());
            assert_eq!(split, whole, "{text:.80}");
        }
    }
}
