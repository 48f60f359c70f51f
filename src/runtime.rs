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
    _hold: Arc<Hold>,
    cancel: Arc<Cancel>,
}

/// What a call holds: what it began with, and what was attached to it once
/// it ran (the memory its request was admitted with).
struct Hold {
    _first: Box<dyn Send + Sync>,
    attached: std::sync::Mutex<Vec<Box<dyn Send + Sync>>>,
}

impl Hold {
    fn new(first: impl Send + Sync + 'static) -> Arc<Hold> {
        Arc::new(Hold {
            _first: Box::new(first),
            attached: std::sync::Mutex::new(Vec::new()),
        })
    }
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
            _hold: Hold::new(hold),
            cancel: Arc::new(Cancel::default()),
        }
    }

    /// Holds `hold` as well, until the call and every job it started are
    /// gone, like what it began with.
    pub fn attach(&self, hold: impl Send + Sync + 'static) {
        lock(&self._hold.attached).push(Box::new(hold));
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

    /// Runs `fut`, a task this call spawned, as this call: what it starts
    /// holds the call too. Unlike [`Call::scope`], `fut` ending does not
    /// cancel the call.
    pub async fn within<F: Future>(self, fut: F) -> F::Output {
        CALL.scope(self, fut).await
    }

    /// The current call (a new one outside any) holding `hold` as well:
    /// futures run [`Call::within`] it, and the jobs they start, keep
    /// `hold` until the last of them ends, even after a caller gave up.
    /// Cancelled when the current call is.
    pub fn current_holding(hold: impl Send + Sync + 'static) -> Call {
        match Call::current() {
            Some(c) => Call {
                _hold: Hold::new((c._hold, hold)),
                cancel: c.cancel,
            },
            None => Call::new(hold),
        }
    }

    /// Spawns `fut` into `set` as the current call, if any, so that what
    /// it starts holds the call too (a deadline does not free the call's
    /// slots while it still runs).
    pub fn spawn_current<T: Send + 'static>(
        set: &mut tokio::task::JoinSet<T>,
        fut: impl Future<Output = T> + Send + 'static,
    ) {
        match Call::current() {
            Some(c) => set.spawn(c.within(fut)),
            None => set.spawn(fut),
        };
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

/// Why [`compute`] gave no result.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// The job panicked.
    #[error("a compute job panicked")]
    Panicked,
    /// No result: the job was skipped because its call was cancelled while
    /// it waited, or the pool's threads are gone.
    #[error("the compute job did not run")]
    Unavailable,
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads for CPU-heavy work, below the scheduling
/// priority of request handling, fed by a queue that is fair across
/// tenants: one queue per tenant, served round-robin, so a tenant with many
/// large jobs queued delays another tenant's job by at most one of its own
/// per thread.
struct ComputePool {
    queue: Arc<FairQueue>,
}

#[derive(Default)]
struct FairQueue {
    state: std::sync::Mutex<QueueState>,
    ready: std::sync::Condvar,
}

#[derive(Default)]
struct QueueState {
    /// Tenants with queued jobs, in serving order.
    order: std::collections::VecDeque<String>,
    jobs: std::collections::HashMap<String, std::collections::VecDeque<Job>>,
}

impl FairQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, tenant: &str, job: Job) {
        let mut st = self.lock();
        let queue = st.jobs.entry(tenant.to_string()).or_default();
        let first = queue.is_empty();
        queue.push_back(job);
        if first {
            st.order.push_back(tenant.to_string());
        }
        drop(st);
        self.ready.notify_one();
    }

    /// The next job, round-robin over tenants; blocks while there is none.
    fn pop(&self) -> Job {
        let mut st = self.lock();
        loop {
            if let Some(tenant) = st.order.pop_front() {
                let (job, more) = match st.jobs.get_mut(&tenant) {
                    Some(q) => (q.pop_front(), !q.is_empty()),
                    None => (None, false),
                };
                if more {
                    st.order.push_back(tenant);
                } else {
                    st.jobs.remove(&tenant);
                }
                if let Some(job) = job {
                    return job;
                }
                continue;
            }
            st = self
                .ready
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// How the compute pool is set up; see [`configure_compute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeSettings {
    /// Threads (0: one per core).
    pub threads: usize,
    /// Added to the threads' nice value on Linux (0: same priority as the
    /// rest of the process).
    pub nice: i32,
}

impl Default for ComputeSettings {
    fn default() -> Self {
        ComputeSettings {
            threads: 0,
            nice: 10,
        }
    }
}

static COMPUTE_SETTINGS: std::sync::OnceLock<ComputeSettings> = std::sync::OnceLock::new();
static COMPUTE_POOL: std::sync::OnceLock<ComputePool> = std::sync::OnceLock::new();

/// Sets up the compute pool before its first use; later calls (and calls
/// after first use) have no effect. Returns whether these settings apply.
pub fn configure_compute(settings: ComputeSettings) -> bool {
    COMPUTE_SETTINGS.set(settings).is_ok() && COMPUTE_POOL.get().is_none()
}

fn compute_pool() -> &'static ComputePool {
    COMPUTE_POOL.get_or_init(|| {
        let settings = *COMPUTE_SETTINGS.get_or_init(ComputeSettings::default);
        let threads = match settings.threads {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            n => n,
        };
        let queue = Arc::new(FairQueue::default());
        for i in 0..threads {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name(format!("compactd-compute-{i}"))
                .spawn(move || {
                    lower_priority(settings.nice);
                    loop {
                        (queue.pop())();
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a compute thread");
            }
        }
        ComputePool { queue }
    })
}

/// Lowers the calling thread's scheduling priority by `nice` (Linux only:
/// there each thread has its own nice value). Best effort.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: plain syscalls on the calling thread; no memory is shared.
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice)
        };
        if rc != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "cannot lower the compute threads' priority"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Runs CPU-heavy work (compaction) on the compute pool: one thread per
/// core, at a lower OS priority than the async workers and the blocking
/// pool that serve the light per-turn calls, so a tenant compacting a huge
/// thread slows other tenants' calls as little as the cores allow. The
/// current [`Call`] is held until `f` returns; a job whose call was
/// cancelled while it waited in the queue is skipped.
pub async fn compute<T, F>(tenant: &str, f: F) -> Result<T, ComputeError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let call = Call::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        if call.as_ref().is_some_and(|c| c.cancel.is_cancelled()) {
            return;
        }
        let _call = call;
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(out);
    });
    let pool = compute_pool();
    pool.queue.push(tenant, job);
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(ComputeError::Panicked),
        // Skipped (cancelled) or the pool is gone.
        Err(_) => Err(ComputeError::Unavailable),
    }
}

/// Replaces the default panic report, which prints the panic's message:
/// a message can quote whatever value it was about (a string slice out of
/// range prints the string), and compactd's values are conversations. The
/// report keeps where it happened and the thread, never the message.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        eprintln!("{}", panic_line(info.location(), thread.name()));
        tracing::error!(
            location = %info.location().map_or_else(String::new, ToString::to_string),
            "compactd.panic"
        );
    }));
}

/// The one line a panic leaves on stderr.
fn panic_line(location: Option<&std::panic::Location<'_>>, thread: Option<&str>) -> String {
    let at = location.map_or_else(|| "an unknown place".to_string(), ToString::to_string);
    format!(
        "compactd: internal error (panic) in thread '{}' at {at}; its message is withheld because it can quote conversation content",
        thread.unwrap_or("unnamed")
    )
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Locks `m`, also when a panic poisoned it: every critical section in the
/// service is a single insert, remove or replace, so a panic cannot leave
/// the data half updated.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn compute_runs_jobs_and_reports_panics() {
        assert_eq!(compute("a", || 6 * 7).await.expect("runs"), 42);
        let e = compute("a", || -> u32 { panic!("job panics") }).await;
        assert!(matches!(e, Err(ComputeError::Panicked)), "{e:?}");
        // The pool survives a panicking job.
        assert_eq!(compute("a", || 1).await.expect("still runs"), 1);
    }

    #[test]
    fn a_panic_report_names_the_place_never_the_message() {
        let here = std::panic::Location::caller();
        let line = panic_line(Some(here), Some("compute-0"));
        assert!(
            line.contains(here.file()) && line.contains("compute-0"),
            "{line}"
        );
        assert!(line.contains("withheld"));
        assert!(panic_line(None, None).contains("unknown place"));
    }

    #[test]
    fn the_queue_serves_tenants_round_robin() {
        let q = FairQueue::default();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let job = |tag: &'static str| -> Job {
            let log = Arc::clone(&log);
            Box::new(move || log.lock().expect("log").push(tag))
        };
        for _ in 0..3 {
            q.push("noisy", job("noisy"));
        }
        q.push("quiet", job("quiet"));
        for _ in 0..4 {
            (q.pop())();
        }
        assert_eq!(
            *log.lock().expect("log"),
            vec!["noisy", "quiet", "noisy", "noisy"],
            "the quiet tenant waits for one noisy job, not three"
        );
    }

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
