//! The settings of the gRPC edge that the server reads as they are: where
//! access lines go and the admission limits. Kept with the settings so that
//! the settings need nothing of the server.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where access lines go.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogSink {
    /// Not written.
    Off,
    /// Standard output.
    Stdout,
    /// Standard error, with the diagnostic log (the default).
    #[default]
    Stderr,
    /// Appended to a file (created 0600 if missing).
    File(PathBuf),
}

/// Admission limits; 0 disables a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantLimits {
    /// Calls in flight on the whole server (at least 1).
    pub global_concurrency: usize,
    /// Calls in flight per tenant.
    pub concurrency: u32,
    /// Sustained calls per second per tenant.
    pub rps: f64,
    /// Bucket size: calls a tenant may make at once after being idle.
    pub burst: u32,
    /// Sustained request bytes per second per tenant.
    pub bytes_per_second: f64,
    /// Request bytes a tenant may send at once after being idle.
    pub bytes_burst: u64,
    /// Sustained thread messages per second per tenant.
    pub messages_per_second: f64,
    /// Thread messages a tenant may send at once after being idle.
    pub messages_burst: u64,
    /// Request bytes the whole server works on at once; a call waits for
    /// room (0: no limit).
    pub in_flight_bytes: u64,
}
