//! Calls in flight across a DeleteThread. A call fills the per-thread
//! caches (carry, stable part, recall index, summaries, traces) as it ends,
//! and the jobs it started on the blocking pool may still be filling them
//! after a caller gave up; so one that began before a deletion could put
//! the deleted thread's content back after the deletion forgot it. A
//! deletion is therefore recorded, the thread forgotten at once, and
//! forgotten again when every call that began before it (its jobs and the
//! background work it scheduled included) has ended.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::runtime::Call;

use crate::app::App;

tokio::task_local! {
    /// The call being run through [`App::held`], for the work it schedules
    /// to outlive it (the background summaries).
    static RUNNING: Running;
}

/// The calls running, by the deletion count when each began.
#[derive(Default)]
pub(in crate::app) struct InFlight(Mutex<State>);

#[derive(Default)]
struct State {
    /// Deletions so far.
    deletions: u64,
    /// Holders running, by the deletion count when their call began.
    running: BTreeMap<u64, usize>,
    /// Threads (tenant, id) to forget again once no call that began before
    /// their (latest) deletion runs, with that deletion's count.
    pending: BTreeMap<(String, String), u64>,
    /// Every thread's state to forget again, as for a deletion of all
    /// (the keys changed), with that change's count.
    pending_all: Option<u64>,
}

/// What is due to be forgotten again when a call ends.
#[derive(Debug, Default, PartialEq)]
pub(in crate::app) struct Due {
    /// These threads.
    pub(in crate::app) threads: Vec<(String, String)>,
    /// Every thread's state and the content caches.
    pub(in crate::app) all: bool,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every operation leaves the state whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a deletion, before the caches are cleared: a call running
    /// then forgets the thread again when it ends.
    pub(in crate::app) fn deleted(&self, tenant: &str, thread_id: &str) {
        let mut s = self.lock();
        s.deletions += 1;
        if s.running.is_empty() {
            return;
        }
        let at = s.deletions;
        s.pending
            .insert((tenant.to_owned(), thread_id.to_owned()), at);
    }

    /// Records that everything the caches hold may be unreadable now (the
    /// keys changed), before they are cleared: calls running then clear
    /// them again when the last of them ends.
    pub(in crate::app) fn everything_changed(&self) {
        let mut s = self.lock();
        s.deletions += 1;
        if !s.running.is_empty() {
            s.pending_all = Some(s.deletions);
        }
    }

    /// One more holder of a call begun at `at` (the current count when
    /// `None`); the count.
    fn begin(&self, at: Option<u64>) -> u64 {
        let mut s = self.lock();
        let at = at.unwrap_or(s.deletions);
        *s.running.entry(at).or_default() += 1;
        at
    }

    /// Ends a holder of a call begun at `at`; the threads now due to be
    /// forgotten again.
    fn end(&self, at: u64) -> Due {
        let mut s = self.lock();
        if let Some(n) = s.running.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                s.running.remove(&at);
            }
        }
        if s.pending.is_empty() && s.pending_all.is_none() {
            return Due::default();
        }
        // The oldest call still running began at this count: deletions
        // after it are not due yet.
        let oldest = s.running.keys().next().copied().unwrap_or(u64::MAX);
        let mut due = Due {
            all: s.pending_all.is_some_and(|at| at <= oldest),
            ..Due::default()
        };
        if due.all {
            s.pending_all = None;
        }
        s.pending.retain(|thread, deleted| {
            let now = *deleted <= oldest;
            if now {
                due.threads.push(thread.clone());
            }
            !now
        });
        due
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Holders of calls running (background work included).
    #[cfg(test)]
    pub(in crate::app) fn holders(&self) -> usize {
        self.lock().running.values().sum()
    }

    /// Whether no call runs (background work included).
    #[cfg(test)]
    pub(in crate::app) fn idle(&self) -> bool {
        self.lock().running.is_empty()
    }
}

/// A holder of a running call; when the last holder of every call begun
/// before a deletion ends, the deleted thread is forgotten again.
#[derive(Debug)]
pub(in crate::app) struct Running {
    app: App,
    at: u64,
}

/// Another holder of the same call (the same count).
impl Clone for Running {
    fn clone(&self) -> Running {
        Running {
            at: self.app.inner.in_flight.begin(Some(self.at)),
            app: self.app.clone(),
        }
    }
}

impl App {
    /// Marks a call that may fill per-thread caches as running until the
    /// value returned is dropped.
    pub(in crate::app) fn running(&self) -> Running {
        Running {
            at: self.inner.in_flight.begin(None),
            app: self.clone(),
        }
    }

    /// Runs `fut` as a call that fills per-thread caches: it, the jobs it
    /// starts on the blocking pool and the background work it schedules
    /// count as running until the last of them ends.
    pub(in crate::app) async fn held<F: Future>(&self, fut: F) -> F::Output {
        self.forget_if_keys_changed();
        let running = self.running();
        let call = Call::current_holding(Arc::new(running.clone()));
        RUNNING.scope(running, call.within(fut)).await
    }

    /// The running call this task is part of ([`App::held`]) held once
    /// more; a new one outside any.
    pub(in crate::app) fn still_running(&self) -> Running {
        RUNNING
            .try_with(Running::clone)
            .unwrap_or_else(|_| self.running())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let due = self.app.inner.in_flight.end(self.at);
        if due.all {
            self.app.forget_everything();
        }
        for (tenant, thread_id) in due.threads {
            self.app.forget_thread(&tenant, &thread_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Due, InFlight};

    fn thread(id: &str) -> (String, String) {
        ("t".to_string(), id.to_string())
    }

    /// A job a call started on the blocking pool holds the call after the
    /// caller gave up: what it caches once the thread was deleted is
    /// forgotten when it ends.
    #[tokio::test]
    async fn a_job_outliving_its_caller_is_waited_for() {
        use crate::app::{App, Defaults};
        use crate::render::prefix::PrefixTrace;
        use crate::security::SecurityContext;
        use std::sync::Arc;
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let tenant = ctx.tenant_id.clone();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (cached, was_cached) = tokio::sync::oneshot::channel::<()>();
        let job_app = app.clone();
        let job_tenant = tenant.clone();
        let call = app.held(async move {
            crate::runtime::blocking(move || {
                let _ = wait.recv();
                let trace = Arc::new(PrefixTrace::default());
                job_app.inner.sessions.keep_trace(&job_tenant, "x", trace);
                let _ = cached.send(());
            })
            .await
        });
        // The caller gives up while its job waits.
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(50), call).await;
        assert!(gave_up.is_err());
        app.delete_thread(&ctx, "x").await.expect("deleted");
        go.send(()).expect("the job waits");
        was_cached.await.expect("the job cached its trace");
        // It is gone once the job has ended.
        let gone = async {
            while app.inner.sessions.trace(&tenant, "x").is_some() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), gone)
            .await
            .expect("forgotten once the job ended");
    }

    /// A deletion is due once every holder of a call begun before it has
    /// ended, and calls begun after it never hold it back.
    #[test]
    fn a_deletion_waits_only_for_calls_begun_before_it() {
        let f = InFlight::default();
        f.deleted("t", "idle");
        assert_eq!(f.pending(), 0, "nothing runs: nothing to wait for");
        let first = f.begin(None);
        let second = f.begin(None);
        // A job of the second call, still running after the call ended.
        let job = f.begin(Some(second));
        f.deleted("t", "a");
        f.deleted("t", "a");
        assert_eq!(f.pending(), 1, "one thread, however often deleted");
        let after = f.begin(None);
        assert_eq!(f.end(after), Due::default(), "began after the deletion");
        assert_eq!(
            f.end(first),
            Due::default(),
            "a call from before still runs"
        );
        assert_eq!(f.end(second), Due::default(), "its job still runs");
        assert_eq!(f.end(job).threads, [thread("a")]);
        assert_eq!(f.pending(), 0);

        // Two deletions, a call between them: each waits only for the calls
        // begun before it.
        let old = f.begin(None);
        f.deleted("t", "b");
        let between = f.begin(None);
        f.deleted("t", "c");
        assert_eq!(f.end(old).threads, [thread("b")]);
        assert_eq!(f.end(between).threads, [thread("c")]);
        assert_eq!(f.pending(), 0);
    }

    /// A change of keys is due, like a deletion of everything, once every
    /// call begun before it has ended; with nothing running, at once.
    #[test]
    fn a_change_of_keys_waits_for_the_calls_begun_before_it() {
        let f = InFlight::default();
        f.everything_changed();
        let call = f.begin(None);
        assert_eq!(f.end(call), Due::default(), "nothing was running");
        let old = f.begin(None);
        let job = f.begin(Some(old));
        f.everything_changed();
        let after = f.begin(None);
        assert_eq!(f.end(after), Due::default(), "began after the change");
        assert_eq!(f.end(old), Due::default(), "its job still runs");
        assert!(f.end(job).all);
        let again = f.begin(None);
        assert_eq!(f.end(again), Due::default(), "due once");
    }
}
