//! Threads sent in full, as the edge converted them: the next request that
//! sends one again converts only what changed (see
//! `crate::proto::ThreadReuse`).

use std::sync::Arc;

use crate::cache::Weigh;
use crate::model::Thread;

/// Memory for the converted threads kept. Their messages are mostly shared
/// with the other per-thread caches (the stable part, the carry), which
/// count them too, so the bound stays a bound.
pub(super) const SENT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// What a thread sent in full converted to, with a digest of each message
/// as it was sent.
#[derive(Debug)]
pub struct SentThread {
    /// The converted thread.
    pub thread: Arc<Thread>,
    /// One per message of `thread`, in order.
    pub digests: Vec<u128>,
    /// About the memory held: the bytes sent.
    pub bytes: u64,
}

impl Weigh for Arc<SentThread> {
    fn weight(&self) -> u64 {
        self.bytes + 16 * self.digests.len() as u64 + 256
    }
}

impl super::App {
    /// The last thread the tenant sent in full under `thread_id`.
    pub fn sent_thread(&self, tenant: &str, thread_id: &str) -> Option<Arc<SentThread>> {
        self.inner
            .sent
            .get(&(tenant.to_owned(), thread_id.to_owned()))
    }

    /// Keeps `sent` as the last thread the tenant sent in full under its id.
    pub fn keep_sent(&self, tenant: &str, sent: Arc<SentThread>) {
        let key = (tenant.to_owned(), sent.thread.id.clone());
        self.inner.sent.insert(key, sent);
    }
}
