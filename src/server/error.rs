//! The edge's errors and their one mapping to `tonic::Status`.
//!
//! A handler fails with an [`ApiError`]: a use-case error (a request that
//! cannot be converted is one, an invalid argument) or a transport-level
//! limit. `From<ApiError> for Status` is the only place a gRPC code is
//! chosen, and it matches every variant. Messages name the
//! offending field but never carry internal details (paths, store errors,
//! other tenants' data): those are logged server-side and the client gets a
//! generic message. Details travel as standard `google.rpc` messages
//! ([`crate::proto::status`]).

use std::time::Duration;

use thiserror::Error;
use tonic::{Code, Status};

use crate::app::AppError;
use crate::proto::status::ErrorDescription;
use crate::proto::ConvertError;
use crate::security::AuthError;

/// Why a call failed at the edge.
#[derive(Debug, Error)]
pub enum ApiError {
    /// The use case failed.
    #[error(transparent)]
    App(#[from] AppError),
    /// The tenant exceeded one of its rates.
    #[error("rate limit exceeded for this tenant ({}); retry after {} ms", limit.setting(), retry_after.as_millis())]
    RateLimited {
        /// Which rate.
        limit: super::limits::RateLimit,
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// Too many calls in flight (per tenant or for the server).
    #[error("too many concurrent requests{0}")]
    Overloaded(String),
    /// The request ran past the server's deadline.
    #[error("the request did not finish within {} ms", .0.as_millis())]
    DeadlineExceeded(Duration),
}

/// A request that could not be converted is bad input like any other.
impl From<ConvertError> for ApiError {
    fn from(e: ConvertError) -> Self {
        ApiError::App(e.into())
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::App(e.into())
    }
}

impl ApiError {
    /// The gRPC code and the stable reason.
    fn codes(&self) -> (Code, &'static str) {
        match self {
            ApiError::App(e) => match e {
                AppError::InvalidArgument { .. } => (Code::InvalidArgument, "INVALID_ARGUMENT"),
                AppError::InsufficientBudget { .. } => {
                    (Code::FailedPrecondition, "INSUFFICIENT_BUDGET")
                }
                AppError::PlanMismatch { .. } => (Code::FailedPrecondition, "PLAN_MISMATCH"),
                AppError::PendingToolCall { .. } => (Code::FailedPrecondition, "PENDING_TOOL_CALL"),
                AppError::VersionConflict { .. } => (Code::Aborted, "VERSION_CONFLICT"),
                AppError::PermissionDenied(_) => (Code::PermissionDenied, "PERMISSION_DENIED"),
                AppError::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED"),
                AppError::NotFound(_) => (Code::NotFound, "NOT_FOUND"),
                AppError::KeyDeleted(_) => (Code::NotFound, "KEY_DELETED"),
                AppError::Unavailable(_) => (Code::Unavailable, "UNAVAILABLE"),
                AppError::Internal(_) => (Code::Internal, "INTERNAL"),
                AppError::Cancelled => (Code::Cancelled, "CANCELLED"),
                AppError::StrategyUnavailable(_) => {
                    (Code::FailedPrecondition, "STRATEGY_UNAVAILABLE")
                }
                AppError::QuotaExceeded { .. } => (Code::ResourceExhausted, "QUOTA_EXCEEDED"),
                AppError::SessionStale { .. } => (Code::FailedPrecondition, "SESSION_STALE"),
            },
            ApiError::RateLimited { .. } => (Code::ResourceExhausted, "RATE_LIMITED"),
            ApiError::Overloaded(_) => (Code::ResourceExhausted, "OVERLOADED"),
            ApiError::DeadlineExceeded(_) => (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
        }
    }

    /// The request field at fault, if one is.
    fn field(&self) -> &str {
        match self {
            ApiError::App(e) => e.field(),
            ApiError::RateLimited { limit, .. } => limit.setting(),
            ApiError::Overloaded(_) | ApiError::DeadlineExceeded(_) => "",
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match &e {
            ApiError::App(AppError::Unavailable(detail)) => {
                tracing::warn!(error = %detail, "store unavailable");
            }
            ApiError::App(AppError::Internal(detail)) => {
                tracing::error!(error = %detail, "internal error");
            }
            _ => {}
        }
        let (code, reason) = e.codes();
        ErrorDescription {
            reason: reason.to_string(),
            field: e.field().to_string(),
            retry_after: match &e {
                ApiError::RateLimited { retry_after, .. } => Some(*retry_after),
                _ => None,
            },
            current_version: match &e {
                ApiError::App(
                    AppError::SessionStale { current, .. }
                    | AppError::VersionConflict { current, .. },
                ) => Some(*current),
                _ => None,
            },
        }
        .into_status(code, e.to_string())
    }
}

impl From<AppError> for Status {
    fn from(e: AppError) -> Status {
        ApiError::App(e).into()
    }
}

impl From<ConvertError> for Status {
    fn from(e: ConvertError) -> Status {
        ApiError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::status::RETRY_AFTER_MS;

    #[test]
    fn details_name_the_field_and_the_reason() {
        let s: Status = AppError::invalid("thread.messages[3].role", "unknown role 42").into();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(s.message().contains("thread.messages[3].role"));
        let d = ErrorDescription::of(&s);
        assert_eq!(d.reason, "INVALID_ARGUMENT");
        assert_eq!(d.field, "thread.messages[3].role");

        let s: Status = ConvertError::new("tools[0].name", "must not be empty").into();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(ErrorDescription::of(&s).field, "tools[0].name");
        assert!(s.message().contains("tools[0].name"));

        let s: Status = AppError::InsufficientBudget {
            message: "needs 9000".into(),
        }
        .into();
        let d = ErrorDescription::of(&s);
        assert_eq!(
            (s.code(), d.reason.as_str(), d.field.as_str()),
            (
                Code::FailedPrecondition,
                "INSUFFICIENT_BUDGET",
                "max_input_tokens"
            )
        );
    }

    #[test]
    fn rate_limits_carry_a_retry_hint() {
        let s: Status = ApiError::RateLimited {
            limit: crate::server::limits::RateLimit::Calls,
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
        assert_eq!(
            ErrorDescription::of(&s).retry_after,
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn internal_details_stay_internal() {
        let s: Status = AppError::Internal("/var/lib/compactd/tenants/acme: EIO".into()).into();
        assert_eq!(s.message(), "internal error");
        let s: Status = AppError::Unavailable("/data/plans: ENOSPC".into()).into();
        assert!(!s.message().contains("/data"));
    }
}
