//! What the process remembers about a thread between its calls, in one
//! home: a [`ThreadState`] per (tenant, thread), held in one bounded cache
//! weighed as the sum of its parts.
//!
//! Every part is derived from what the caller sent or what the stores
//! hold, so losing one costs only time: the next call works it out again.
//! Keeping them together means a thread goes cold as a whole, and that a
//! DeleteThread forgets a thread by removing one entry: a part added here
//! is forgotten with the others without anyone listing it. Calls that were
//! running across a deletion may put parts back as they end; the rule that
//! forgets them again is [`inflight`]'s.
//!
//! Content-addressed caches that are only *scoped* by thread (the core's
//! summaries and compressions, the LLM's answers) live with what computes
//! them; [`super::App::forget_thread`] forgets their scope beside this.

pub(super) mod inflight;

use std::sync::{Arc, Weak};

use crate::cache::{BoundedCache, Weigh};
use crate::model::{Thread, Validation};
use crate::render::prefix::PrefixTrace;
use crate::render::stable::StablePart;

use super::carry::Carry;
use super::recall::RecallPart;
use super::sent::SentThread;
use super::session::Copy;

/// A thread of a tenant, as every part is keyed.
pub(super) type ThreadKey = (String, String);

/// Everything the process remembers about one thread.
#[derive(Clone, Default)]
pub(super) struct ThreadState {
    /// What the committed plan was counted for: the per-turn path.
    pub(super) carry: Option<Arc<Carry>>,
    /// The last thread the client sent in full, as converted.
    pub(super) sent: Option<Arc<SentThread>>,
    /// The stable part of the last render: the next one renders only what
    /// follows it.
    pub(super) stable: Option<Arc<StablePart>>,
    /// The recall index over what the plan evicts, and its search cache.
    pub(super) recall: Option<RecallPart>,
    /// The append session's copy, as of its last version.
    pub(super) session: Option<Arc<Copy>>,
    /// The last render's trace of a thread sent in full (a session keeps
    /// its own in its head).
    pub(super) trace: Option<Arc<PrefixTrace>>,
    /// What validating the thread left, for the next turn's append.
    pub(super) validated: Option<Arc<Validated>>,
    /// The last renders' expected cache reads and the provider's reports
    /// (for Explain).
    pub(super) cache_turns: Vec<crate::render::cache::CacheTurn>,
}

/// A validated thread, by allocation: a thread is never changed in place
/// once shared, so while `thread` points at a live allocation, `state`
/// describes the thread there.
pub(super) struct Validated {
    pub(super) thread: Weak<Thread>,
    /// `None`: validated in full, nothing kept for an append yet.
    pub(super) state: Option<Validation>,
}

impl Validated {
    /// Whether this describes `thread`.
    fn is_of(&self, thread: &Arc<Thread>) -> bool {
        // The weak pointer keeps the allocation, so its address cannot be
        // reused while this lives.
        std::ptr::eq(self.thread.as_ptr(), Arc::as_ptr(thread))
    }
}

impl ThreadState {
    /// Whether no part is held (the entry is then dropped).
    fn is_empty(&self) -> bool {
        let ThreadState {
            carry,
            sent,
            stable,
            recall,
            session,
            trace,
            validated,
            cache_turns,
        } = self;
        carry.is_none()
            && sent.is_none()
            && stable.is_none()
            && recall.is_none()
            && session.is_none()
            && trace.is_none()
            && validated.is_none()
            && cache_turns.is_empty()
    }
}

/// The sum of the parts. Parts share messages (a session's copy, the carry
/// and the stable part hold the same ones), which each counts: the bound
/// stays a bound.
impl Weigh for ThreadState {
    fn weight(&self) -> u64 {
        // Destructured so that a new part cannot go unweighed.
        let ThreadState {
            carry,
            sent,
            stable,
            recall,
            session,
            trace,
            validated,
            cache_turns,
        } = self;
        let part = |w: Option<u64>| w.unwrap_or(0);
        let turns = (cache_turns.capacity()
            * std::mem::size_of::<crate::render::cache::CacheTurn>()) as u64;
        128 + turns
            + part(carry.as_ref().map(Weigh::weight))
            + part(sent.as_ref().map(Weigh::weight))
            + part(stable.as_ref().map(Weigh::weight))
            + part(recall.as_ref().map(Weigh::weight))
            + part(session.as_ref().map(Weigh::weight))
            + part(trace.as_ref().map(Weigh::weight))
            + part(
                validated
                    .as_ref()
                    .map(|v| 64 + v.state.as_ref().map_or(0, |s| s.bytes() as u64)),
            )
    }
}

/// The state of every thread the process remembers.
pub(super) struct ThreadStates(BoundedCache<ThreadKey, ThreadState>);

impl std::fmt::Debug for ThreadStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadStates").finish_non_exhaustive()
    }
}

/// Memory for the parts besides a session's copy (whose share is
/// configured): the carries', the sent threads', the stable parts' (256 MiB
/// each), the recall indexes' (128 MiB) and the traces' (16 MiB) budgets
/// when each had a cache of its own.
pub(super) const PARTS_BYTES: u64 = (3 * 256 + 128 + 16) * 1024 * 1024;

fn key(tenant: &str, thread_id: &str) -> ThreadKey {
    (tenant.to_owned(), thread_id.to_owned())
}

impl ThreadStates {
    /// States of at most about `max_bytes` in all.
    pub(super) fn new(max_bytes: u64) -> Self {
        ThreadStates(BoundedCache::new(max_bytes))
    }

    /// What `f` reads of the thread's state, if one is held.
    pub(super) fn read<T>(
        &self,
        tenant: &str,
        thread_id: &str,
        f: impl FnOnce(&ThreadState) -> Option<T>,
    ) -> Option<T> {
        self.0.read(&key(tenant, thread_id), f).flatten()
    }

    /// Runs `f` on the thread's state (an empty one when none is held),
    /// atomically with every other change to it, and keeps the result
    /// weighed anew; a state left empty is dropped. `f` must not call back
    /// into the states.
    pub(super) fn update<T: Default>(
        &self,
        tenant: &str,
        thread_id: &str,
        f: impl FnOnce(&mut ThreadState) -> T,
    ) -> T {
        self.0
            .update(key(tenant, thread_id), f, ThreadState::is_empty)
    }

    /// What validating `thread` left, taken out; `None` when it was not
    /// validated here (or another call is extending it).
    pub(super) fn take_validated(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
    ) -> Option<Option<Validation>> {
        let taken = self.update(tenant, &thread.id, |s| {
            s.validated.take_if(|v| v.is_of(thread))
        })?;
        // Nothing else holds it (reads never clone it out).
        Some(Arc::try_unwrap(taken).map_or_else(|v| v.state.clone(), |v| v.state))
    }

    /// Records what validating `thread` left.
    pub(super) fn keep_validated(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
        state: Option<Validation>,
    ) {
        let validated = Arc::new(Validated {
            thread: Arc::downgrade(thread),
            state,
        });
        self.update(tenant, &thread.id, |s| s.validated = Some(validated));
    }

    /// Forgets everything of the thread (DeleteThread).
    pub(super) fn forget(&self, tenant: &str, thread_id: &str) {
        self.0.remove(&key(tenant, thread_id));
    }

    /// Forgets every thread's state (the keys that protected what it was
    /// derived from may be gone).
    pub(super) fn clear(&self) {
        self.0.retain(|_| false);
    }

    /// Whether any state of the thread is held.
    #[cfg(test)]
    pub(super) fn holds(&self, tenant: &str, thread_id: &str) -> bool {
        self.read(tenant, thread_id, |_| Some(())).is_some()
    }
}

#[cfg(test)]
mod tests;
