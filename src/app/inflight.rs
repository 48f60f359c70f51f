//! Calls in flight across a DeleteThread. A call fills the per-thread
//! caches (carry, stable part, recall index, summaries, traces) as it ends,
//! so one that began before a deletion could put the deleted thread's
//! content back after the deletion forgot it. A deletion therefore forgets
//! the thread at once, and again when every call that began before it has
//! ended.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::App;

/// The calls running, by the deletion count when each began.
#[derive(Default)]
pub(super) struct InFlight(Mutex<State>);

#[derive(Default)]
struct State {
    /// Deletions so far.
    deletions: u64,
    /// Calls running, by the deletion count when they began.
    running: BTreeMap<u64, usize>,
    /// Threads (tenant, id) to forget again once no call that began before
    /// their deletion (a count below theirs) runs.
    pending: Vec<(u64, String, String)>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every operation leaves the state whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a deletion; whether a call that began before it still runs
    /// (the thread is then forgotten again when the last such call ends).
    pub(super) fn deleted(&self, tenant: &str, thread_id: &str) -> bool {
        let mut s = self.lock();
        s.deletions += 1;
        if s.running.is_empty() {
            return false;
        }
        let at = s.deletions;
        s.pending
            .push((at, tenant.to_owned(), thread_id.to_owned()));
        true
    }

    fn begin(&self) -> u64 {
        let mut s = self.lock();
        let at = s.deletions;
        *s.running.entry(at).or_default() += 1;
        at
    }

    /// Ends a call begun at `at`; the threads now due to be forgotten again.
    fn end(&self, at: u64) -> Vec<(String, String)> {
        let mut s = self.lock();
        if let Some(n) = s.running.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                s.running.remove(&at);
            }
        }
        // The oldest call still running began at this count: deletions
        // after it are not due yet.
        let oldest = s.running.keys().next().copied().unwrap_or(u64::MAX);
        let (due, wait) = std::mem::take(&mut s.pending)
            .into_iter()
            .partition(|(deleted, _, _)| *deleted <= oldest);
        s.pending = wait;
        due.into_iter().map(|(_, t, id)| (t, id)).collect()
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().pending.len()
    }
}

/// A call running; its end forgets the threads deleted while it ran.
#[derive(Debug)]
pub(super) struct Running {
    app: App,
    at: u64,
}

impl App {
    /// Marks a call that may fill per-thread caches as running until the
    /// value returned is dropped.
    pub(super) fn running(&self) -> Running {
        Running {
            at: self.inner.in_flight.begin(),
            app: self.clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for (tenant, thread_id) in self.app.inner.in_flight.end(self.at) {
            self.app.forget_thread(&tenant, &thread_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::InFlight;

    /// A deletion is due once every call begun before it has ended, and
    /// calls begun after it never hold it back.
    #[test]
    fn a_deletion_waits_only_for_calls_begun_before_it() {
        let f = InFlight::default();
        assert!(!f.deleted("t", "idle"), "nothing runs: nothing to wait for");
        let first = f.begin();
        let second = f.begin();
        assert!(f.deleted("t", "a"));
        let after = f.begin();
        assert!(f.end(after).is_empty(), "began after the deletion");
        assert!(
            f.end(first).is_empty(),
            "another call from before still runs"
        );
        assert_eq!(f.end(second), [("t".to_string(), "a".to_string())]);
        assert_eq!(f.pending(), 0);

        // Two deletions, a call between them: each waits only for the calls
        // begun before it.
        let old = f.begin();
        assert!(f.deleted("t", "b"));
        let between = f.begin();
        assert!(f.deleted("t", "c"));
        assert_eq!(f.end(old), [("t".to_string(), "b".to_string())]);
        assert_eq!(f.end(between), [("t".to_string(), "c".to_string())]);
        assert_eq!(f.pending(), 0);
    }
}
