//! Errors on the wire, as standard `google.rpc` details that off-the-shelf
//! gRPC clients decode (`grpc-status-details-bin`):
//!
//! - `ErrorInfo` on every error: `reason` is the stable machine-readable code
//!   (`INSUFFICIENT_BUDGET`, `VERSION_CONFLICT`, …), `domain` is
//!   [`ERROR_DOMAIN`], and `metadata.field` names the request field at fault
//!   when there is one;
//! - `BadRequest` with one field violation on `INVALID_ARGUMENT`;
//! - `RetryInfo` when a retry after a delay can succeed (rate limits), also
//!   sent as the `retry-after-ms` header for clients that read no details.

use std::collections::HashMap;
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// `ErrorInfo.domain` of every compactd error.
pub const ERROR_DOMAIN: &str = "compactd.v1";
/// Header with the retry hint of rate-limit errors, in milliseconds.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";
/// `ErrorInfo.metadata` key naming the request field at fault.
pub const FIELD_KEY: &str = "field";
/// `ErrorInfo.metadata` key of a stale append session's current version.
pub const CURRENT_VERSION_KEY: &str = "current_version";

/// Everything a compactd error carries besides its code and message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorDescription {
    /// Stable reason code (`ErrorInfo.reason`).
    pub reason: String,
    /// Dotted path of the request field at fault; empty when none is.
    pub field: String,
    /// When a retry may succeed.
    pub retry_after: Option<Duration>,
    /// The current version of what the request was based on (a stale
    /// append session's), when that is what failed.
    pub current_version: Option<u64>,
}

impl ErrorDescription {
    /// The status for `code` and `message` with these details attached.
    pub fn into_status(self, code: Code, message: String) -> Status {
        let mut details = ErrorDetails::new();
        let mut metadata = HashMap::new();
        if !self.field.is_empty() {
            metadata.insert(FIELD_KEY.to_string(), self.field.clone());
            if code == Code::InvalidArgument {
                details.add_bad_request_violation(self.field.clone(), message.clone());
            }
        }
        if let Some(v) = self.current_version {
            metadata.insert(CURRENT_VERSION_KEY.to_string(), v.to_string());
        }
        details.set_error_info(self.reason, ERROR_DOMAIN, metadata);
        if let Some(after) = self.retry_after {
            details.set_retry_info(Some(after));
        }
        let mut status = Status::with_error_details(code, message, details);
        if let Some(after) = self.retry_after {
            let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            if let Ok(v) = MetadataValue::try_from(ms.to_string()) {
                status.metadata_mut().insert(RETRY_AFTER_MS, v);
            }
        }
        status
    }

    /// The details a status carries. Statuses from other servers (or from
    /// the transport) carry none: every field is then empty.
    pub fn of(status: &Status) -> Self {
        let details = status.get_error_details();
        // Reasons and field names are only meaningful in compactd's domain.
        let info = details.error_info().filter(|i| i.domain == ERROR_DOMAIN);
        let field = details
            .bad_request()
            .and_then(|b| b.field_violations.first())
            .map(|v| v.field.clone())
            .or_else(|| info.and_then(|i| i.metadata.get(FIELD_KEY).cloned()))
            .unwrap_or_default();
        ErrorDescription {
            reason: info.map(|i| i.reason.clone()).unwrap_or_default(),
            field,
            retry_after: details.retry_info().and_then(|r| r.retry_delay),
            current_version: info
                .and_then(|i| i.metadata.get(CURRENT_VERSION_KEY))
                .and_then(|v| v.parse().ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_round_trip_through_a_status() {
        let d = ErrorDescription {
            reason: "INVALID_ARGUMENT".into(),
            field: "thread.messages[3].role".into(),
            retry_after: None,
            current_version: None,
        };
        let s = d
            .clone()
            .into_status(Code::InvalidArgument, "bad role".into());
        assert_eq!(ErrorDescription::of(&s), d);
        let bad = s.get_details_bad_request().expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, "thread.messages[3].role");

        let d = ErrorDescription {
            reason: "RATE_LIMITED".into(),
            field: String::new(),
            retry_after: Some(Duration::from_millis(250)),
            current_version: Some(7),
        };
        let s = d
            .clone()
            .into_status(Code::ResourceExhausted, "slow down".into());
        assert_eq!(ErrorDescription::of(&s), d);
        assert!(s.get_details_bad_request().is_none());
        assert_eq!(
            s.metadata()
                .get(RETRY_AFTER_MS)
                .and_then(|v| v.to_str().ok()),
            Some("250")
        );
    }

    #[test]
    fn foreign_statuses_have_no_details() {
        assert_eq!(
            ErrorDescription::of(&Status::unavailable("down")),
            ErrorDescription::default()
        );
    }
}
