//! Recall at render: the index over what the plan evicts (built once per
//! thread and plan, kept in a bounded cache), and the block of passages
//! that match the latest request, fitted into what the window has left.

use std::sync::Arc;

use crate::cache::{BoundedCache, Weigh};
use crate::model::{CompactionPlan, Thread};
use crate::recall::{block, queries_of, Hit, RecallIndex, RecallSettings};
use crate::redact::Redactor;
use crate::render::{Request, RequestCounter};

/// Bytes of recall indexes kept in memory at most.
const INDEX_CACHE_BYTES: u64 = 128 * 1024 * 1024;

/// Tokens a message's framing takes at most, beyond its text.
const MESSAGE_FRAMING: u32 = 16;

impl Weigh for Arc<RecallIndex> {
    fn weight(&self) -> u64 {
        self.bytes() as u64
    }
}

/// Recall indexes by tenant, thread, plan fingerprint and redaction rules:
/// an index depends only on the messages the plan evicts, which the
/// fingerprint fixes.
pub(super) struct RecallIndexes(BoundedCache<String, Arc<RecallIndex>>);

impl Default for RecallIndexes {
    fn default() -> Self {
        RecallIndexes(BoundedCache::new(INDEX_CACHE_BYTES))
    }
}

impl std::fmt::Debug for RecallIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallIndexes").finish_non_exhaustive()
    }
}

impl RecallIndexes {
    /// The index of `plan` over `thread`, built on a miss.
    pub(super) fn get(
        &self,
        tenant: &str,
        thread: &Thread,
        plan: &CompactionPlan,
        redactor: &Redactor,
    ) -> Arc<RecallIndex> {
        let key = format!(
            "{tenant}\0{}\0{}\0{}",
            thread.id,
            plan.fingerprint,
            redactor.id()
        );
        if let Some(index) = self.0.get(&key) {
            return index;
        }
        let index = Arc::new(RecallIndex::build(thread, plan, redactor));
        self.0.insert(key, Arc::clone(&index));
        index
    }

    /// Forgets a thread's indexes (DeleteThread).
    pub(super) fn forget(&self, tenant: &str, thread_id: &str) {
        let prefix = format!("{tenant}\0{thread_id}\0");
        self.0.retain(|k| !k.starts_with(&prefix));
    }
}

/// The recall block for `thread`'s latest request: the best passages not
/// already in `request`, as many as fit `room` tokens (and the settings'
/// count), best first. `None` when nothing matches or nothing fits.
pub(super) fn fit_recall<'a>(
    index: &'a RecallIndex,
    thread: &Thread,
    request: &Request,
    rc: &RequestCounter<'_>,
    settings: RecallSettings,
    room: u32,
) -> Option<(String, Vec<Hit<'a>>)> {
    if index.is_empty() || room <= MESSAGE_FRAMING {
        return None;
    }
    let queries = queries_of(thread);
    if queries.is_empty() {
        return None;
    }
    let shown = squash(&request_text(request));
    // Twice the count: some passages are already in the prompt (an excerpt's
    // head and tail, a summary's quote).
    let wanted = settings.max_passages as usize;
    let mut hits: Vec<Hit<'a>> = index
        .search_all(&queries, wanted * 2)
        .into_iter()
        .filter(|h| !shown.contains(&squash(&h.passage.text)))
        .collect();
    hits.truncate(wanted);
    while !hits.is_empty() {
        let text = block(&hits);
        let cost = u32::try_from(rc.counter.count(&text)).unwrap_or(u32::MAX);
        if cost.saturating_add(MESSAGE_FRAMING) <= room {
            return Some((text, hits));
        }
        hits.pop();
    }
    None
}

/// The request's text: the system prompt and every message's text.
fn request_text(r: &Request) -> String {
    let mut out = r.system.clone().unwrap_or_default();
    for m in &r.messages {
        out.push('\n');
        out.push_str(&m.content.flat_text());
    }
    out
}

/// Whitespace collapsed, so a passage is found in the prompt however its
/// lines were joined.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
