//! Threads sent in full, as the edge converted them: the next request that
//! sends one again converts only what changed (see
//! `crate::server::convert::ThreadReuse`).

use std::sync::Arc;

use crate::cache::Weigh;
use crate::model::Thread;

use super::thread_state::inflight::Running;
use super::App;

/// What a thread sent in full converted to, with a digest of each message
/// as it was sent.
#[derive(Debug)]
pub struct SentThread {
    /// The converted thread.
    pub thread: Arc<Thread>,
    /// One per message of `thread`, in order.
    pub digests: Vec<u128>,
    /// [`crate::model::memory_weight`] of the messages (which also covers
    /// what validating them leaves while the thread lives, a few words a
    /// message).
    pub messages_weight: u64,
}

impl Weigh for Arc<SentThread> {
    fn weight(&self) -> u64 {
        self.messages_weight + 16 * self.digests.len() as u64 + 256
    }
}

/// What [`App::keep_sent`] needs from before the conversion: the request
/// counts as running from then on, so that a deletion meanwhile (which may
/// be this thread's) forgets the thread again once it is kept.
#[derive(Debug)]
pub struct SentBefore {
    _running: Running,
}

impl App {
    /// The last thread the tenant sent in full under `thread_id`, and the
    /// mark [`App::keep_sent`] takes once the request is converted.
    pub fn sent_thread(
        &self,
        tenant: &str,
        thread_id: &str,
    ) -> (Option<Arc<SentThread>>, SentBefore) {
        let before = SentBefore {
            _running: self.running(),
        };
        let last = self
            .inner
            .threads
            .read(tenant, thread_id, |s| s.sent.clone());
        (last, before)
    }

    /// Keeps `sent` as the last thread the tenant sent in full under its
    /// id. Were it deleted since `before`, it is forgotten again once no
    /// call from before the deletion runs (the next request converts in
    /// full).
    pub fn keep_sent(&self, tenant: &str, sent: Arc<SentThread>, before: SentBefore) {
        let id = sent.thread.id.clone();
        self.inner
            .threads
            .update(tenant, &id, |s| s.sent = Some(sent));
        drop(before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Defaults;
    use crate::model::{Content, Message, MessageMetadata, Role};

    fn sent(id: &str, text: &str) -> Arc<SentThread> {
        let message = Message {
            id: "m1".into(),
            role: Role::User,
            content: Content::Text(text.into()),
            tool_calls: Vec::new(),
            tool_result: None,
            turn: 1,
            metadata: MessageMetadata::default(),
        };
        let thread = Thread::new(id, vec![message]);
        Arc::new(SentThread {
            messages_weight: crate::model::memory_weight(&thread.messages),
            thread: Arc::new(thread),
            digests: vec![1],
        })
    }

    /// Kept per tenant and thread; a deletion forgets it, and one that
    /// happens while a request converts keeps that request's out.
    #[test]
    fn kept_per_tenant_and_forgotten_on_delete() {
        let app = App::offline(Defaults::default());
        let (none, before) = app.sent_thread("acme", "t");
        assert!(none.is_none());
        app.keep_sent("acme", sent("t", "acme's"), before);
        assert!(app.sent_thread("acme", "t").0.is_some());
        assert!(app.sent_thread("globex", "t").0.is_none());
        assert!(app.sent_thread("acme", "u").0.is_none());
        app.forget_thread("acme", "t");
        assert!(app.sent_thread("acme", "t").0.is_none());
        // Converted across a deletion (as DeleteThread forgets): not kept.
        let (_, before) = app.sent_thread("acme", "t");
        app.inner.in_flight.deleted("acme", "t");
        app.forget_thread("acme", "t");
        app.keep_sent("acme", sent("t", "deleted"), before);
        assert!(app.sent_thread("acme", "t").0.is_none());
    }
}
