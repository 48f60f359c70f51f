//! The two runtime helpers every async layer shares: CPU-bound or blocking
//! work goes to tokio's blocking pool, and wall-clock time in milliseconds.

/// Runs `f` on the blocking pool, so it never stalls the async workers.
/// `Err` only when the task panicked or the runtime is shutting down.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f).await
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
