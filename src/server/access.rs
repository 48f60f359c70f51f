//! The access log: one JSON line per API call — who (tenant, requester),
//! what (method, thread, plan version), how it ended (gRPC code, tokens
//! before and after, latency). Never message content, never credentials.
//!
//! Calls refused before a handler runs (authentication, admission) are
//! logged by the layer that refused them; a call whose future is dropped
//! (deadline, client gone) is logged as `CANCELLED` with `abandoned: true`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tonic::Code;

use crate::security::SecurityContext;

pub use crate::settings::AccessLogSink;

enum Writer {
    Off,
    Stdout,
    Stderr,
    File(Mutex<std::fs::File>),
}

/// The access log writer, shared by the layers and the handlers.
pub struct AccessLog {
    writer: Writer,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog").finish_non_exhaustive()
    }
}

/// One line.
#[derive(Debug, Serialize)]
struct Line<'a> {
    time: String,
    tenant: &'a str,
    requester: &'a str,
    method: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    thread_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan_version: Option<u64>,
    code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_before: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_after: Option<u32>,
    latency_ms: f64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    abandoned: bool,
}

impl AccessLog {
    /// Opens the sink (a file is created 0600 and appended to).
    pub fn open(sink: &AccessLogSink) -> std::io::Result<Self> {
        let writer = match sink {
            AccessLogSink::Off => Writer::Off,
            AccessLogSink::Stdout => Writer::Stdout,
            AccessLogSink::Stderr => Writer::Stderr,
            AccessLogSink::File(path) => {
                let mut options = std::fs::OpenOptions::new();
                options.create(true).append(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                Writer::File(Mutex::new(options.open(path)?))
            }
        };
        Ok(AccessLog { writer })
    }

    fn write(&self, line: &Line<'_>) {
        if matches!(self.writer, Writer::Off) {
            return;
        }
        let Ok(mut bytes) = serde_json::to_vec(line) else {
            return;
        };
        bytes.push(b'\n');
        // One write per line: lines from concurrent calls never interleave.
        let result = match &self.writer {
            Writer::Off => Ok(()),
            Writer::Stdout => std::io::stdout().lock().write_all(&bytes),
            Writer::Stderr => std::io::stderr().lock().write_all(&bytes),
            Writer::File(f) => f
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .write_all(&bytes),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "cannot write the access log");
        }
    }

    /// Logs a call refused before it reached a handler.
    pub fn refused(self: &Arc<Self>, path: &str, ctx: Option<&SecurityContext>, code: Code) {
        let mut entry = Entry::new(
            self,
            method_name(path),
            ctx.map_or("", |c| c.tenant_id.as_str()),
            ctx.map_or("", |c| c.requester_id.as_str()),
            "",
        );
        entry.code = Some(code);
    }

    /// Starts the entry of a call a handler runs; it is written when
    /// finished or dropped.
    pub fn entry(self: &Arc<Self>, method: &str, ctx: &SecurityContext, thread_id: &str) -> Entry {
        Entry::new(self, method, &ctx.tenant_id, &ctx.requester_id, thread_id)
    }
}

/// A call being served; written to the log when dropped.
pub struct Entry {
    log: Arc<AccessLog>,
    start: Instant,
    method: String,
    tenant: String,
    requester: String,
    thread_id: String,
    plan_version: Option<u64>,
    tokens: Option<(u32, u32)>,
    code: Option<Code>,
    /// The call's trace span: ids, counts and the outcome, never content.
    span: tracing::Span,
}

impl Entry {
    fn new(
        log: &Arc<AccessLog>,
        method: &str,
        tenant: &str,
        requester: &str,
        thread_id: &str,
    ) -> Self {
        Entry {
            log: Arc::clone(log),
            start: Instant::now(),
            method: method.to_string(),
            tenant: tenant.to_string(),
            requester: requester.to_string(),
            // Caller-chosen and logged before validation: bounded.
            thread_id: truncate(thread_id, MAX_LOGGED_ID_BYTES).to_string(),
            plan_version: None,
            tokens: None,
            code: None,
            span: tracing::info_span!(
                "compactd.rpc",
                otel.name = %format!("compactd.v1.CompactionService/{}", known_method(method)),
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                rpc.system = "grpc",
                rpc.service = "compactd.v1.CompactionService",
                rpc.method = known_method(method),
                rpc.grpc.status_code = tracing::field::Empty,
                compactd.tenant = %crate::telemetry::tenant_label(tenant),
                compactd.requester = %crate::telemetry::tenant_label(requester),
                compactd.thread_id = %truncate(thread_id, MAX_LOGGED_ID_BYTES),
                compactd.plan_version = tracing::field::Empty,
                compactd.tokens_before = tracing::field::Empty,
                compactd.tokens_after = tracing::field::Empty,
            ),
        }
    }

    /// The span the call's work runs in.
    pub fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// Records the plan version and tokens before and after.
    pub fn plan(&mut self, version: u64, tokens_before: Option<u32>, tokens_after: Option<u32>) {
        self.plan_version = Some(version);
        self.span
            .record("compactd.plan_version", crate::telemetry::int(version));
        if let (Some(b), Some(a)) = (tokens_before, tokens_after) {
            self.tokens = Some((b, a));
            self.span
                .record("compactd.tokens_before", crate::telemetry::int(b));
            self.span
                .record("compactd.tokens_after", crate::telemetry::int(a));
        }
    }

    /// Records how the call ended and passes the result through.
    pub fn finish<T>(mut self, result: Result<T, tonic::Status>) -> Result<T, tonic::Status> {
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        };
        self.code = Some(code);
        self.span.record("rpc.grpc.status_code", code as i32);
        if let Err(status) = &result {
            self.span.record("otel.status_code", "ERROR");
            // The code, the stable reason and the field at fault: never the
            // status message, which may quote request values.
            let detail = crate::proto::status::ErrorDescription::of(status);
            // A path may embed a caller's map key: bounded, like ids.
            let field = crate::summarize::text::head(&detail.field, 128);
            self.span.in_scope(|| {
                tracing::warn!(
                    target: crate::telemetry::EVENTS,
                    error_type = %code_name(code),
                    error_reason = %detail.reason,
                    error_field = %field,
                    fallback = "none",
                    "compact.error"
                );
            });
        }
        result
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let code = code_name(self.code.unwrap_or(Code::Cancelled));
        crate::telemetry::metrics().rpc(
            known_method(&self.method),
            &code,
            self.start.elapsed().as_secs_f64(),
            &self.tenant,
        );
        self.log.write(&Line {
            time: rfc3339_now(),
            tenant: &self.tenant,
            requester: &self.requester,
            method: &self.method,
            thread_id: &self.thread_id,
            plan_version: self.plan_version,
            code,
            tokens_before: self.tokens.map(|t| t.0),
            tokens_after: self.tokens.map(|t| t.1),
            latency_ms: self.start.elapsed().as_secs_f64() * 1000.0,
            abandoned: self.code.is_none(),
        });
    }
}

/// Longest thread id written to the log.
const MAX_LOGGED_ID_BYTES: usize = 256;

use crate::summarize::text::head as truncate;

/// The method as telemetry names it: one of the service's, or `unknown`
/// (a refused call's path is the caller's choice; metrics and span names
/// must stay a bounded set).
fn known_method(method: &str) -> &'static str {
    const METHODS: &[&str] = &[
        "Compact",
        "Render",
        "Rehydrate",
        "DeleteThread",
        "ResetPlan",
        "Explain",
        "SearchContext",
    ];
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("unknown")
}

/// `/compactd.v1.CompactionService/Compact` → `Compact`.
fn method_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The canonical upper-case name (`OK`, `INVALID_ARGUMENT`, …).
fn code_name(code: Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// UTC now as `2026-11-22T16:27:43.123Z`.
fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_names_only_known_methods() {
        assert_eq!(known_method("Explain"), "Explain");
        assert_eq!(known_method("Compact"), "Compact");
        assert_eq!(known_method("x".repeat(300).as_str()), "unknown");
        assert_eq!(known_method("compact"), "unknown");
    }

    #[test]
    fn dates_and_codes() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(truncate("abc", 256), "abc");
        assert_eq!(
            method_name("/compactd.v1.CompactionService/Render"),
            "Render"
        );
    }
}
