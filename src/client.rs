//! A Rust client for compactd: an endpoint with the transport settings the
//! server is tuned for, credentials as request headers, and errors that carry
//! the server's decoded details. The operator CLI (`compactd call`) and the
//! benchmarks use it; agent platforms written in Rust can too.

use std::time::Duration;

use thiserror::Error;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::proto::pb::compaction_service_client::CompactionServiceClient;
use crate::proto::status::ErrorDescription;
use crate::proto::ConvertError;

/// Largest message the client sends or accepts. Rendered requests of long
/// threads are large; the server enforces its own (configurable) limit.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// How long connecting may take before the call fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 initial stream window, also the server's default: large requests
/// and responses stream without waiting for window updates.
pub const STREAM_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
/// HTTP/2 initial connection window, also the server's default.
pub const CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;

/// How the client proves who it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Credential {
    /// No credential (a dev-mode server).
    #[default]
    None,
    /// A JWT, sent as `authorization: Bearer <token>`.
    Bearer(String),
    /// A static API key, sent as `x-api-key`.
    ApiKey(String),
}

/// Why a call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The address is not a valid URI.
    #[error("{addr:?} is not a valid address: {message}")]
    Address {
        /// As given.
        addr: String,
        /// Why.
        message: String,
    },
    /// The credential cannot be sent as a header.
    #[error("the credential must be visible ASCII")]
    Credential,
    /// The server could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address dialed.
        addr: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server answered with an error status.
    #[error("{}", status_line(.status, .details))]
    Status {
        /// The status as received.
        status: Box<Status>,
        /// Its decoded `google.rpc` details.
        details: ErrorDescription,
    },
    /// The response holds a value this client cannot represent (a server of
    /// another version, or a bug): strictness holds in both directions.
    #[error("unexpected response: {0}")]
    Response(#[from] ConvertError),
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        let details = ErrorDescription::of(&status);
        ClientError::Status {
            status: Box::new(status),
            details,
        }
    }
}

impl ClientError {
    /// The gRPC status, when the server answered with one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            ClientError::Status { status, .. } => Some(status),
            _ => None,
        }
    }

    /// The server's stable reason code (`INSUFFICIENT_BUDGET`, …), if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ClientError::Status { details, .. } if !details.reason.is_empty() => {
                Some(&details.reason)
            }
            _ => None,
        }
    }
}

/// `INVALID_ARGUMENT: <message> [field thread.messages[1].id, reason INVALID_ARGUMENT]`.
fn status_line(status: &Status, d: &ErrorDescription) -> String {
    let mut line = format!("{}: {}", code_name(status.code()), status.message());
    let mut extra = Vec::new();
    if !d.field.is_empty() {
        extra.push(format!("field {}", d.field));
    }
    if !d.reason.is_empty() {
        extra.push(format!("reason {}", d.reason));
    }
    if let Some(after) = d.retry_after {
        extra.push(format!("retry after {} ms", after.as_millis()));
    }
    if !extra.is_empty() {
        line.push_str(&format!(" [{}]", extra.join(", ")));
    }
    line
}

/// The canonical gRPC name of a code (`INVALID_ARGUMENT`), as grpcurl and
/// the other gRPC implementations print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The endpoint for `addr` with the client's transport settings: connect
/// timeout, TCP_NODELAY and the server's HTTP/2 windows. A bare `host:port`
/// is taken as `http://host:port`.
pub fn endpoint(addr: &str) -> Result<Endpoint, ClientError> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)
        .map_err(|e| ClientError::Address {
            addr: addr.to_string(),
            message: e.to_string(),
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES))
}

/// A connected client with message limits raised to [`MAX_MESSAGE_BYTES`].
pub async fn connect(addr: &str) -> Result<CompactionServiceClient<Channel>, ClientError> {
    let channel = endpoint(addr)?
        .connect()
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    Ok(CompactionServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

impl Credential {
    /// The request headers that carry it.
    pub fn metadata(&self) -> Result<MetadataMap, ClientError> {
        let mut md = MetadataMap::new();
        match self {
            Credential::None => {}
            Credential::Bearer(token) => {
                let token = token.trim();
                let token = token.strip_prefix("Bearer ").unwrap_or(token);
                let v: AsciiMetadataValue = format!("Bearer {token}")
                    .parse()
                    .map_err(|_| ClientError::Credential)?;
                md.insert("authorization", v);
            }
            Credential::ApiKey(key) => {
                let v: AsciiMetadataValue =
                    key.trim().parse().map_err(|_| ClientError::Credential)?;
                md.insert("x-api-key", v);
            }
        }
        Ok(md)
    }

    /// `message` as a request carrying this credential.
    pub fn request<T>(&self, message: T) -> Result<tonic::Request<T>, ClientError> {
        let mut r = tonic::Request::new(message);
        *r.metadata_mut() = self.metadata()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_become_headers() {
        let md = Credential::Bearer("Bearer abc.def.ghi".into())
            .metadata()
            .unwrap();
        assert_eq!(
            md.get("authorization").unwrap().to_str().unwrap(),
            "Bearer abc.def.ghi"
        );
        let md = Credential::ApiKey("k-123".into()).metadata().unwrap();
        assert_eq!(md.get("x-api-key").unwrap().to_str().unwrap(), "k-123");
        assert!(Credential::ApiKey("line\nbreak".into()).metadata().is_err());
        assert!(Credential::None.metadata().unwrap().is_empty());
    }

    #[test]
    fn addresses() {
        assert!(endpoint("not a uri").is_err());
        assert!(endpoint("127.0.0.1:50051").is_ok());
        assert!(endpoint("http://127.0.0.1:50051").is_ok());
    }

    #[test]
    fn status_errors_show_code_message_and_detail() {
        let status = ErrorDescription {
            reason: "INVALID_ARGUMENT".into(),
            field: "thread.messages[1].id".into(),
            retry_after: None,
            current_version: None,
        }
        .into_status(Code::InvalidArgument, "duplicate id \"m0\"".into());
        let e = ClientError::from(status);
        let text = e.to_string();
        assert!(text.starts_with("INVALID_ARGUMENT: "), "{text}");
        assert!(text.contains("field thread.messages[1].id"), "{text}");
        assert!(text.contains("reason INVALID_ARGUMENT"), "{text}");
        assert_eq!(e.reason(), Some("INVALID_ARGUMENT"));
        let plain = ClientError::from(Status::unavailable("down"));
        assert_eq!(plain.to_string(), "UNAVAILABLE: down");
        assert_eq!(plain.reason(), None);
    }

    #[tokio::test]
    async fn unreachable_server_is_a_connect_error() {
        // Port 1 on loopback: nothing listens there.
        let e = connect("http://127.0.0.1:1").await.unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    }
}
