//! How a tool call ended, read from its output when the caller does not say.
//!
//! Provider logs carry no outcome: an OpenAI `tool` message is just content,
//! and many agents never set one. A failure that is mistaken for a success
//! is cleared or expired like any other result and its error text vanishes,
//! so the model retries blindly. Failures are recognised by the shape of the
//! output, not by tool names or wording:
//! - JSON objects: a non-empty `error`/`errors`/`exception` member, a
//!   failed `status`/`state`/`result`/`outcome`, `ok`/`success: false`,
//!   `is_error: true`, an HTTP status of 400–599, or a non-zero exit code;
//! - text: a first line that opens with an error marker followed by a colon
//!   (`Error: …`, `fatal: …`), an error code (`ERROR 1045 (28000): …`), or a
//!   stack trace header (`Traceback (most recent call last):`).
//!
//! Mistaking a success for a failure only keeps more of it (failures are
//! never cleared), so ambiguous cases lean to failure only where the shape
//! is unambiguous.

use serde_json::{Map, Value};

use super::message::{Outcome, ToolContent};

/// Longest error message kept for summaries and stubs, in characters.
pub const ERROR_MESSAGE_MAX_CHARS: usize = 240;

const FAILED_STATES: &[&str] = &[
    "error",
    "errored",
    "failed",
    "failure",
    "fail",
    "fatal",
    "exception",
    "timeout",
    "timed_out",
    "aborted",
    "rejected",
];
const PARTIAL_STATES: &[&str] = &[
    "partial",
    "partial_success",
    "partially_succeeded",
    "incomplete",
];
const ERROR_WORDS: &[&str] = &["error", "fatal", "exception", "panic", "failed", "failure"];

/// The outcome a tool's output reports.
pub fn infer_outcome(content: &ToolContent) -> Outcome {
    match json_object(content) {
        Some(obj) => object_outcome(&obj),
        None => {
            if text_reports_error(&content.to_text()) {
                Outcome::Failure
            } else {
                Outcome::Success
            }
        }
    }
}

/// The error a failed or partial output reports, as one line of at most
/// [`ERROR_MESSAGE_MAX_CHARS`] characters.
pub fn error_message(content: &ToolContent) -> Option<String> {
    let line = match json_object(content) {
        Some(obj) => object_error(&obj)?,
        None => content
            .to_text()
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())?
            .to_string(),
    };
    let line = line.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return None;
    }
    let mut out: String = line.chars().take(ERROR_MESSAGE_MAX_CHARS).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    Some(out)
}

/// The output as a JSON object, whether it arrived as JSON or as JSON text.
fn json_object(content: &ToolContent) -> Option<Map<String, Value>> {
    let text = content.to_text();
    if !text.trim_start().starts_with('{') {
        return None;
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// The member named `key` in any common spelling (`exit_code`, `exitCode`).
fn member<'a>(obj: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| {
            let k = k.to_ascii_lowercase().replace(['_', '-'], "");
            keys.iter().any(|want| want.replace('_', "") == k)
        })
        .map(|(_, v)| v)
}

fn present(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(true) | Value::Number(_) => true,
    }
}

fn object_outcome(obj: &Map<String, Value>) -> Outcome {
    let failed = member(obj, &["error", "errors", "exception"]).is_some_and(present)
        || member(obj, &["is_error"]).is_some_and(|v| v == &Value::Bool(true))
        || member(obj, &["ok", "success", "succeeded"]).is_some_and(|v| v == &Value::Bool(false))
        || member(obj, &["status_code", "http_status", "status"])
            .and_then(Value::as_u64)
            .is_some_and(|s| (400..600).contains(&s))
        || member(obj, &["exit_code", "returncode", "return_code"])
            .and_then(Value::as_i64)
            .is_some_and(|c| c != 0);
    if failed {
        return Outcome::Failure;
    }
    let state = member(obj, &["status", "state", "result", "outcome"])
        .and_then(Value::as_str)
        .map(|s| s.trim().to_ascii_lowercase().replace([' ', '-'], "_"));
    match state.as_deref() {
        Some(s) if FAILED_STATES.contains(&s) => Outcome::Failure,
        Some(s) if PARTIAL_STATES.contains(&s) => Outcome::Partial,
        _ => Outcome::Success,
    }
}

fn object_error(obj: &Map<String, Value>) -> Option<String> {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => member(o, &["message", "detail", "description"])
            .and_then(Value::as_str)
            .map(|message| {
                // `{"code": "WH-92553", "exception": "QuorumError", "message": …}`:
                // the name and the code are what the agent searches for.
                let name =
                    member(o, &["exception", "type", "name", "kind"]).and_then(Value::as_str);
                let code = member(o, &["code", "error_code", "errno"]).and_then(|c| match c {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                });
                let mut line = String::new();
                if let Some(name) = name.filter(|n| !n.is_empty()) {
                    line.push_str(name);
                    line.push_str(": ");
                }
                if let Some(code) = code.filter(|c| !c.is_empty()) {
                    line.push('[');
                    line.push_str(&code);
                    line.push_str("] ");
                }
                line.push_str(message);
                line
            })
            .or_else(|| Some(v.to_string())),
        Value::Array(a) => a.first().map(|first| match first {
            Value::String(s) => s.clone(),
            Value::Object(o) => member(o, &["message", "detail"])
                .and_then(Value::as_str)
                .map_or_else(|| first.to_string(), str::to_string),
            other => other.to_string(),
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    };
    member(obj, &["error", "errors", "exception"])
        .filter(|v| present(v))
        .and_then(text)
        .or_else(|| {
            member(obj, &["message", "detail", "reason", "stderr"])
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .or_else(|| Some(Value::Object(obj.clone()).to_string()))
}

/// A first line like `Error: …`, `fatal: …`, `ERROR 1045 (28000): …`, a
/// Python traceback header or a Rust panic.
fn text_reports_error(text: &str) -> bool {
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    let lower = line.to_ascii_lowercase();
    if lower.starts_with("traceback (most recent call last)")
        || (lower.starts_with("thread '") && lower.contains("' panicked at"))
    {
        return true;
    }
    let word_end = lower
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(lower.len());
    if !ERROR_WORDS.contains(&&lower[..word_end]) {
        return false;
    }
    let rest = &lower[word_end..];
    if rest.starts_with(':') {
        return true;
    }
    // `ERROR 1045 (28000): …`, `error[E0308]: …`: a code, then a colon.
    let rest = rest.trim_start();
    let code_like = rest.starts_with(|c: char| c.is_ascii_digit() || c == '[' || c == '(');
    code_like
        && rest.find(':').is_some_and(|colon| {
            let code = &rest[..colon];
            code.starts_with('[') || !code.contains(|c: char| c.is_ascii_alphabetic())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> ToolContent {
        ToolContent::Text(s.to_string())
    }

    fn json(v: Value) -> ToolContent {
        ToolContent::json(v)
    }

    #[test]
    fn json_failures_by_shape() {
        let failures = [
            serde_json::json!({"status": "error", "error": "Deployment failed: quota exceeded (code Q9)"}),
            serde_json::json!({"error": {"code": 403, "message": "forbidden"}}),
            serde_json::json!({"errors": [{"message": "field `id` is required"}], "data": null}),
            serde_json::json!({"ok": false, "reason": "rate limited"}),
            serde_json::json!({"Success": false}),
            serde_json::json!({"statusCode": 503, "body": "upstream unavailable"}),
            serde_json::json!({"exitCode": 2, "stderr": "make: *** [all] Error 2"}),
            serde_json::json!({"state": "Timed Out"}),
            serde_json::json!({"isError": true, "content": "boom"}),
        ];
        for f in failures {
            assert_eq!(infer_outcome(&json(f.clone())), Outcome::Failure, "{f}");
            assert_eq!(
                infer_outcome(&text(&f.to_string())),
                Outcome::Failure,
                "as text: {f}"
            );
            assert!(error_message(&json(f.clone())).is_some(), "{f}");
        }
        let fine = [
            serde_json::json!({"status": "ok", "id": "PAY-4711"}),
            serde_json::json!({"status": 201, "url": "https://x"}),
            serde_json::json!({"error": null, "rows": 3}),
            serde_json::json!({"errors": [], "data": {"id": 1}}),
            serde_json::json!({"exit_code": 0, "stdout": "done"}),
            serde_json::json!({"failed_orders": 14, "status": "complete"}),
        ];
        for f in fine {
            assert_eq!(infer_outcome(&json(f.clone())), Outcome::Success, "{f}");
        }
        assert_eq!(
            infer_outcome(&json(serde_json::json!({"status": "partial", "done": 3}))),
            Outcome::Partial
        );
    }

    #[test]
    fn error_messages_name_the_error() {
        let m = error_message(&json(serde_json::json!(
            {"status": "error", "error": "Deployment failed: quota exceeded (code Q9)"}
        )));
        assert_eq!(
            m.as_deref(),
            Some("Deployment failed: quota exceeded (code Q9)")
        );
        let m = error_message(&json(
            serde_json::json!({"error": {"message": "forbidden"}}),
        ));
        assert_eq!(m.as_deref(), Some("forbidden"));
        let m = error_message(&text("\n  fatal: not a git repository\nhint: …"));
        assert_eq!(m.as_deref(), Some("fatal: not a git repository"));
        let long = format!("Error: {}", "x".repeat(1000));
        let m = error_message(&text(&long)).unwrap();
        assert!(m.chars().count() <= ERROR_MESSAGE_MAX_CHARS + 1);
    }

    #[test]
    fn text_failures_need_an_unambiguous_marker() {
        for t in [
            "Error: ENOENT: no such file or directory, open 'a.txt'",
            "fatal: not a git repository (or any of the parent directories): .git",
            "ERROR 1045 (28000): Access denied for user 'app'@'10.0.0.3'",
            "error[E0308]: mismatched types",
            "Traceback (most recent call last):\n  File \"x.py\", line 1",
            "thread 'main' panicked at src/main.rs:3:5:\nboom",
            "Exception: connection reset",
            "FAILED: 3 tests",
        ] {
            assert_eq!(infer_outcome(&text(t)), Outcome::Failure, "{t}");
        }
        for t in [
            "Failed orders: 14 of 150",
            "Error rate is 2% over the last hour",
            "errors were fixed in v2",
            "No errors found.",
            "",
            "{\"not\": \"closed\"",
        ] {
            assert_eq!(infer_outcome(&text(t)), Outcome::Success, "{t}");
        }
    }
}
