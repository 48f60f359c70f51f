//! The service's errors, and their one mapping to `tonic::Status`.
//!
//! Every failure a handler can produce is an [`ApiError`]; `From<ApiError>
//! for Status` is the only place a gRPC code is chosen. Messages name the
//! offending field but never carry internal details (paths, store errors,
//! other tenants' data): those are logged server-side and the client gets a
//! generic message.

use std::time::Duration;

use prost::Message as _;
use thiserror::Error;
use tonic::{Code, Status};

use crate::reduce::CompactError;
use crate::security::AuthError;
use crate::store::StoreError;

use super::pb::ErrorDetail;

/// Metadata key of the retry hint sent with rate-limit errors.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";
/// Type URL of [`ErrorDetail`] inside the google.rpc.Status details.
pub const ERROR_DETAIL_TYPE_URL: &str = "type.googleapis.com/compactd.v1.ErrorDetail";

/// Why a call failed.
#[derive(Debug, Error)]
pub enum ApiError {
    /// Bad input; `field` is the dotted path of the offending field.
    #[error("invalid argument at {field}: {message}")]
    InvalidArgument {
        /// `thread.messages[3].role`, `policy.trigger_ratio`...
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The budget cannot be met even after every reduction.
    #[error("{message}")]
    InsufficientBudget {
        /// The core's explanation with the numbers.
        message: String,
    },
    /// The committed plan does not fit the thread that was sent.
    #[error("the committed plan does not fit this thread ({message}); compact it again")]
    PlanMismatch {
        /// Which reference broke.
        message: String,
    },
    /// Compare-and-swap failed: the plan moved on.
    #[error("plan version conflict: expected version {expected}, current version is {current}")]
    VersionConflict {
        /// What the caller expected.
        expected: u64,
        /// What is committed.
        current: u64,
    },
    /// The credential lacks a permission, or the body names another tenant.
    #[error("{0}")]
    PermissionDenied(String),
    /// No valid credential.
    #[error("{0}")]
    Unauthenticated(String),
    /// Nothing visible to this tenant under that name.
    #[error("{0} not found")]
    NotFound(String),
    /// The tenant exceeded its request rate.
    #[error("rate limit exceeded for this tenant; retry after {} ms", retry_after.as_millis())]
    RateLimited {
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// Too many calls in flight (per tenant or for the server).
    #[error("too many concurrent requests{0}")]
    Overloaded(String),
    /// The request ran past the server's deadline.
    #[error("the request did not finish within {} ms", .0.as_millis())]
    DeadlineExceeded(Duration),
    /// A store is down; the detail is logged, not returned.
    #[error("storage is temporarily unavailable")]
    Unavailable(String),
    /// A bug or corrupt state; the detail is logged, not returned.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// An INVALID_ARGUMENT for `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The gRPC code and the stable reason code of the detail.
    fn codes(&self) -> (Code, &'static str) {
        match self {
            ApiError::InvalidArgument { .. } => (Code::InvalidArgument, "INVALID_ARGUMENT"),
            ApiError::InsufficientBudget { .. } => {
                (Code::FailedPrecondition, "INSUFFICIENT_BUDGET")
            }
            ApiError::PlanMismatch { .. } => (Code::FailedPrecondition, "PLAN_MISMATCH"),
            ApiError::VersionConflict { .. } => (Code::Aborted, "VERSION_CONFLICT"),
            ApiError::PermissionDenied(_) => (Code::PermissionDenied, "PERMISSION_DENIED"),
            ApiError::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED"),
            ApiError::NotFound(_) => (Code::NotFound, "NOT_FOUND"),
            ApiError::RateLimited { .. } => (Code::ResourceExhausted, "RATE_LIMITED"),
            ApiError::Overloaded(_) => (Code::ResourceExhausted, "OVERLOADED"),
            ApiError::DeadlineExceeded(_) => (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
            ApiError::Unavailable(_) => (Code::Unavailable, "UNAVAILABLE"),
            ApiError::Internal(_) => (Code::Internal, "INTERNAL"),
        }
    }

    /// The request field at fault, if one is.
    fn field(&self) -> &str {
        match self {
            ApiError::InvalidArgument { field, .. } => field,
            ApiError::InsufficientBudget { .. } => "max_input_tokens",
            ApiError::PlanMismatch { .. } => "thread",
            _ => "",
        }
    }
}

/// Wire form of `google.rpc.Status`, the payload gRPC defines for the
/// `grpc-status-details-bin` trailer (so standard client helpers decode it).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match &e {
            ApiError::Unavailable(detail) => tracing::warn!(error = %detail, "store unavailable"),
            ApiError::Internal(detail) => tracing::error!(error = %detail, "internal error"),
            _ => {}
        }
        let (code, reason) = e.codes();
        let retry_after_ms = match &e {
            ApiError::RateLimited { retry_after } => {
                u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX)
            }
            _ => 0,
        };
        let detail = ErrorDetail {
            code: reason.to_string(),
            field: e.field().to_string(),
            retry_after_ms,
        };
        let message = e.to_string();
        let status = RpcStatus {
            code: code as i32,
            message: message.clone(),
            details: vec![prost_types::Any {
                type_url: ERROR_DETAIL_TYPE_URL.to_string(),
                value: detail.encode_to_vec(),
            }],
        };
        let mut out = Status::with_details(code, message, status.encode_to_vec().into());
        if retry_after_ms > 0 {
            if let Ok(v) = retry_after_ms.to_string().parse() {
                out.metadata_mut().insert(RETRY_AFTER_MS, v);
            }
        }
        out
    }
}

/// The [`ErrorDetail`] a status carries, for clients of this crate.
pub fn error_detail(status: &Status) -> Option<ErrorDetail> {
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details
        .iter()
        .find(|a| a.type_url == ERROR_DETAIL_TYPE_URL)
        .and_then(|a| ErrorDetail::decode(a.value.as_slice()).ok())
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        if e.is_permission_denied() {
            ApiError::PermissionDenied(e.to_string())
        } else {
            ApiError::Unauthenticated(e.to_string())
        }
    }
}

impl From<CompactError> for ApiError {
    fn from(e: CompactError) -> Self {
        match e {
            CompactError::InvalidThread(t) => ApiError::InvalidArgument {
                field: t.field_path(),
                message: t.to_string(),
            },
            CompactError::InvalidPolicy(p) => ApiError::InvalidArgument {
                field: p.field.clone(),
                message: p.reason,
            },
            CompactError::ZeroBudget => ApiError::invalid("max_input_tokens", "must be at least 1"),
            e @ CompactError::InsufficientBudget { .. } => ApiError::InsufficientBudget {
                message: e.to_string(),
            },
            CompactError::InvalidPlan(p) => ApiError::PlanMismatch {
                message: p.to_string(),
            },
            CompactError::Internal(m) => ApiError::Internal(m),
        }
    }
}

/// Store errors seen while reading or writing this tenant's own data. A
/// malformed id is reported exactly like a missing one: never reveal whether
/// something exists.
pub fn store_error(e: StoreError, what: &str) -> ApiError {
    match e {
        StoreError::Conflict { expected, current } => {
            ApiError::VersionConflict { expected, current }
        }
        StoreError::NotFound | StoreError::InvalidId(_) => ApiError::NotFound(what.to_string()),
        StoreError::Unavailable(m) => ApiError::Unavailable(m),
        StoreError::Io(e) => ApiError::Unavailable(e.to_string()),
        StoreError::Corrupt(m) => ApiError::Internal(format!("corrupt {what}: {m}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_round_trips_through_status() {
        let s: Status = ApiError::invalid("thread.messages[3].role", "unknown role 42").into();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(s.message().contains("thread.messages[3].role"));
        let d = error_detail(&s).expect("detail");
        assert_eq!(d.code, "INVALID_ARGUMENT");
        assert_eq!(d.field, "thread.messages[3].role");
    }

    #[test]
    fn rate_limits_carry_a_retry_hint() {
        let s: Status = ApiError::RateLimited {
            retry_after: Duration::from_millis(250),
        }
        .into();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(
            s.metadata()
                .get(RETRY_AFTER_MS)
                .and_then(|v| v.to_str().ok()),
            Some("250")
        );
        assert_eq!(error_detail(&s).map(|d| d.retry_after_ms), Some(250));
    }

    #[test]
    fn internal_details_stay_internal() {
        let s: Status = ApiError::Internal("/var/lib/compactd/tenants/acme: EIO".into()).into();
        assert_eq!(s.message(), "internal error");
        let s: Status = ApiError::Unavailable("/data/plans: ENOSPC".into()).into();
        assert!(!s.message().contains("/data"));
    }
}
