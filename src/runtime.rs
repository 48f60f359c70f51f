//! The runtime helpers every async layer shares: CPU-bound or blocking work
//! goes to tokio's blocking pool, an admitted call's resources follow the
//! work it starts, and wall-clock time in milliseconds.
//!
//! A call is admitted by the server (its tenant's concurrency slot) and
//! then starts blocking jobs. A deadline or a client that goes away drops
//! the call's future, but a job already on the blocking pool runs on; if the
//! slot were released with the future, a tenant could keep far more work
//! running than its limit. So the server runs each call inside
//! [`Call::scope`], and [`blocking`] moves a clone of the call into every job
//! it starts: the slot is released only when the last job has finished, and
//! the call's [`Cancel`] flag tells the core to stop between steps.

use std::future::Future;
use std::sync::Arc;

use crate::reduce::Cancel;

tokio::task_local! {
    static CALL: Call;
}

/// What an admitted call carries into the jobs it starts. Cheap to clone.
#[derive(Clone)]
pub struct Call {
    /// Whatever must live until the last job ends (the tenant's permit).
    _hold: Arc<dyn Send + Sync>,
    cancel: Arc<Cancel>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Call {
    /// A call holding `hold` until it and every job it started are gone.
    pub fn new(hold: impl Send + Sync + 'static) -> Self {
        Call {
            _hold: Arc::new(hold),
            cancel: Arc::new(Cancel::default()),
        }
    }

    /// Runs `fut` as this call: jobs it starts through [`blocking`] hold the
    /// call. When `fut` completes or is dropped (deadline, disconnect), the
    /// call is cancelled, so jobs still running stop at their next check.
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        struct CancelOnDrop(Arc<Cancel>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                self.0.cancel();
            }
        }
        let _cancel = CancelOnDrop(Arc::clone(&self.cancel));
        CALL.scope(self, fut).await
    }

    /// The call the current task runs as, if any.
    pub fn current() -> Option<Call> {
        CALL.try_with(Call::clone).ok()
    }

    /// The current call's cancel flag; outside a call, one nobody sets.
    pub fn current_cancel() -> Arc<Cancel> {
        Call::current().map_or_else(|| Arc::new(Cancel::default()), |c| c.cancel)
    }

    /// Jobs and futures still holding this call (the scope's own counts).
    #[cfg(test)]
    fn holders(&self) -> usize {
        Arc::strong_count(&self._hold)
    }
}

/// Runs `f` on the blocking pool, so it never stalls the async workers; the
/// current [`Call`] (if any) is held until `f` returns. Store backends use
/// it for their blocking I/O too, so that work is charged to the call.
/// `Err` only when the task panicked or the runtime is shutting down.
pub async fn blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let call = Call::current();
    tokio::task::spawn_blocking(move || {
        let _call = call;
        f()
    })
    .await
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_holds_the_call_after_the_caller_gives_up() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let call = Call::new(());
        let watch = call.clone();
        let cancel = Arc::clone(&call.cancel);
        let fut = call.scope(async move {
            blocking(move || {
                // Runs until the test lets it finish.
                let _ = rx.recv();
            })
            .await
        });
        // The caller's deadline: the future is dropped before the job ends.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(50), fut).await;
        assert!(cancel.is_cancelled(), "the abandoned call is cancelled");
        assert!(watch.holders() >= 2, "the running job still holds the call");
        tx.send(()).expect("job waits");
        for _ in 0..200 {
            if watch.holders() == 1 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the finished job did not release the call");
    }
}
