//! Why a use case failed, in the application's terms. The gRPC edge maps
//! every variant to one status code (`server::error`); the offline CLI maps
//! them to exit codes.

use thiserror::Error;

use crate::reduce::CompactError;
use crate::security::AuthError;
use crate::store::StoreError;

/// Why a use case failed.
#[derive(Debug, Error)]
pub enum AppError {
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
        /// The explanation with the numbers.
        message: String,
    },
    /// The committed plan does not fit the thread that was sent.
    #[error("the committed plan does not fit this thread ({message}); compact it again")]
    PlanMismatch {
        /// Which reference broke.
        message: String,
    },
    /// A tool call has no result yet and the request did not ask to leave
    /// pending calls out: no provider accepts an unanswered call.
    #[error("tool call {call_id:?} ({tool_name}) at {field} has no result yet: append a tool message with tool_call_id {call_id:?} holding its result, or set omit_pending_calls to leave the last turn's unanswered calls out of the request")]
    PendingToolCall {
        /// `thread.messages[i].tool_calls[j].id`.
        field: String,
        /// The call.
        call_id: String,
        /// The tool it calls.
        tool_name: String,
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
    /// It exists, but the tenant's encryption key that wrapped it was
    /// deleted (crypto-shredding): it is gone for good.
    #[error("{0} can no longer be read: the encryption key that protected it was deleted")]
    KeyDeleted(String),
    /// A store is down; the detail is logged, not returned.
    #[error("storage is temporarily unavailable")]
    Unavailable(String),
    /// A bug or corrupt state; the detail is logged, not returned.
    #[error("internal error")]
    Internal(String),
    /// The call was abandoned (deadline passed or client gone) while it ran.
    #[error("the call was cancelled before it finished")]
    Cancelled,
    /// A strategy plugin the configuration requires is out of rotation.
    #[error("{0}")]
    StrategyUnavailable(String),
    /// An append names a session version that is not the current one (or
    /// a session that does not exist): the client sends the thread in full.
    #[error("{message}")]
    SessionStale {
        /// What happened and what to do.
        message: String,
        /// The session's current version (0: there is none).
        current: u64,
    },
    /// A tenant quota would be exceeded; `quota` names it.
    #[error("quota {quota} exceeded: {message}")]
    QuotaExceeded {
        /// The config key of the quota, e.g. `quotas.max_bytes_per_tenant`.
        quota: String,
        /// Usage and limit.
        message: String,
    },
}

impl AppError {
    /// An `InvalidArgument` for `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The request field at fault, if one is.
    pub fn field(&self) -> &str {
        match self {
            AppError::InvalidArgument { field, .. } => field,
            AppError::InsufficientBudget { .. } => "max_input_tokens",
            AppError::PlanMismatch { .. } => "thread",
            AppError::PendingToolCall { field, .. } => field,
            AppError::VersionConflict { .. }
            | AppError::PermissionDenied(_)
            | AppError::Unauthenticated(_)
            | AppError::NotFound(_)
            | AppError::KeyDeleted(_)
            | AppError::Unavailable(_)
            | AppError::Internal(_)
            | AppError::Cancelled => "",
            AppError::StrategyUnavailable(_) => "plugins",
            AppError::SessionStale { .. } => "append.base_version",
            AppError::QuotaExceeded { quota, .. } => quota,
        }
    }
}

impl From<AuthError> for AppError {
    fn from(e: AuthError) -> Self {
        if e.is_permission_denied() {
            AppError::PermissionDenied(e.to_string())
        } else {
            AppError::Unauthenticated(e.to_string())
        }
    }
}

impl From<CompactError> for AppError {
    fn from(e: CompactError) -> Self {
        match e {
            CompactError::InvalidThread(t) => AppError::InvalidArgument {
                field: t.field_path(),
                message: t.to_string(),
            },
            CompactError::InvalidPolicy(p) => AppError::InvalidArgument {
                field: p.field.clone(),
                message: p.reason,
            },
            CompactError::ZeroBudget => AppError::invalid("max_input_tokens", "must be at least 1"),
            e @ CompactError::InsufficientBudget { .. } => AppError::InsufficientBudget {
                message: e.to_string(),
            },
            CompactError::Internal(m) => AppError::Internal(m),
            CompactError::Cancelled => AppError::Cancelled,
            e @ CompactError::StrategyUnavailable { .. } => {
                AppError::StrategyUnavailable(e.to_string())
            }
        }
    }
}

impl From<crate::runtime::ComputeError> for AppError {
    fn from(e: crate::runtime::ComputeError) -> Self {
        AppError::Internal(format!("compaction failed: {e}"))
    }
}

impl From<tokio::task::JoinError> for AppError {
    fn from(e: tokio::task::JoinError) -> Self {
        AppError::Internal(format!("core task failed: {e}"))
    }
}

/// Store errors seen while reading or writing this tenant's own data. A
/// malformed id is reported exactly like a missing one: never reveal whether
/// something exists.
pub(crate) fn store_error(e: StoreError, what: &str) -> AppError {
    match e {
        StoreError::Conflict { expected, current } => {
            AppError::VersionConflict { expected, current }
        }
        StoreError::NotFound | StoreError::InvalidId(_) => AppError::NotFound(what.to_string()),
        StoreError::KeyDeleted(m) => {
            tracing::info!(error = %m, "stored data whose key was deleted");
            AppError::KeyDeleted(what.to_string())
        }
        StoreError::Unavailable(m) => AppError::Unavailable(m),
        StoreError::Io(e) => AppError::Unavailable(e.to_string()),
        StoreError::Corrupt(m) => AppError::Internal(format!("corrupt {what}: {m}")),
    }
}

/// Plan-store errors: a malformed thread id is the caller's input.
pub(crate) fn plan_store_error(e: StoreError) -> AppError {
    match e {
        StoreError::InvalidId(m) => AppError::invalid("thread.id", m),
        other => store_error(other, "plan"),
    }
}

/// Artifact reads: missing, malformed and foreign ids all read as NOT_FOUND.
pub(crate) fn artifact_read_error(e: StoreError, field: &str) -> AppError {
    match store_error(e, "artifact") {
        AppError::NotFound(_) => AppError::NotFound(format!("artifact ({field})")),
        AppError::KeyDeleted(_) => AppError::KeyDeleted(format!("artifact ({field})")),
        other => other,
    }
}
