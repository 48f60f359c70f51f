//! Recall at render: the index over what the plan evicts (built once per
//! thread and plan, kept in a bounded cache), and the block of passages
//! that match the latest request, fitted into what the window has left.

use std::sync::{Arc, Mutex};

use crate::cache::{BoundedCache, Weigh};
use crate::model::{CompactionPlan, Pairing, Thread};
use crate::recall::{block, delimited_block, queries_of, Hit, RecallIndex, RecallSettings};
use crate::redact::Redactor;
use crate::render::RequestCounter;

/// Bytes of recall indexes kept in memory at most.
const INDEX_CACHE_BYTES: u64 = 128 * 1024 * 1024;

/// Tokens a message's framing takes at most, beyond its text.
const MESSAGE_FRAMING: u32 = 16;

/// A cached index with the weight it had when it was (re)inserted: the
/// cache must weigh an entry the same on its way out as on its way in,
/// and an index grows while it is cached.
#[derive(Clone)]
struct Entry {
    index: Arc<Mutex<Recall>>,
    weight: u64,
}

/// A thread's recall index, and the last render's stand-in text, kept
/// squashed: stand-ins change only when the plan does, and squashing them
/// on every render was a tenth of a turn.
#[derive(Default)]
pub(super) struct Recall {
    pub(super) index: RecallIndex,
    shown: Shown,
}

/// The stand-in text of a prompt (`crate::render::stable::stand_in_text`) and its [`squash`].
#[derive(Default)]
struct Shown {
    text: String,
    squashed: String,
}

impl Recall {
    fn bytes(&self) -> usize {
        self.index.bytes() + self.shown.text.len() + self.shown.squashed.len()
    }

    /// The index, and the squashed stand-in text of `request` (squashed
    /// again only when it differs from the last one's).
    fn with_shown(&mut self, text: String) -> (&RecallIndex, &str) {
        if text != self.shown.text {
            self.shown = Shown {
                squashed: squash(&text),
                text,
            };
        }
        (&self.index, &self.shown.squashed)
    }
}

impl Weigh for Entry {
    fn weight(&self) -> u64 {
        self.weight
    }
}

/// Recall indexes by tenant, thread and redaction rules. An index follows
/// the thread's plans: each render updates it with what the plan evicts,
/// at the cost of the newly evicted messages.
pub(super) struct RecallIndexes(BoundedCache<String, Entry>);

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
    /// The thread's index, brought up to `plan`.
    pub(super) fn get(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
        extends: Option<&Arc<Thread>>,
        plan: &CompactionPlan,
        redactor: &Redactor,
    ) -> Arc<Mutex<Recall>> {
        let key = format!("{tenant}\0{}\0{}", thread.id, redactor.id());
        let cached = self.0.get(&key);
        let index = cached
            .as_ref()
            .map_or_else(Default::default, |e| Arc::clone(&e.index));
        let weight = match index.lock() {
            Ok(mut r) => {
                r.index.update(thread, extends, plan, redactor);
                r.bytes() as u64
            }
            // A panic while updating left it half done: start over.
            Err(_) => {
                let fresh = Recall {
                    index: RecallIndex::build(thread, plan, redactor),
                    shown: Shown::default(),
                };
                let weight = fresh.bytes() as u64;
                let fresh = Arc::new(Mutex::new(fresh));
                self.0.insert(
                    key,
                    Entry {
                        index: Arc::clone(&fresh),
                        weight,
                    },
                );
                return fresh;
            }
        };
        if cached.is_none_or(|e| e.weight != weight) {
            // Inserted again with the weight it has now.
            self.0.insert(
                key,
                Entry {
                    index: Arc::clone(&index),
                    weight,
                },
            );
        }
        index
    }

    /// Forgets a thread's indexes (DeleteThread).
    pub(super) fn forget(&self, tenant: &str, thread_id: &str) {
        let prefix = format!("{tenant}\0{thread_id}\0");
        self.0.retain(|k| !k.starts_with(&prefix));
    }
}

/// The recall block for `thread`'s latest request: the best passages not
/// already shown in the prompt's stand-in text `shown` (summaries, excerpts and stubs can quote
/// them), as many as fit `room` tokens and the settings' count, best first.
/// `None` when nothing matches or nothing fits.
pub(super) fn fit_recall<'a>(
    recall: &'a mut Recall,
    (thread, pairing): (&Thread, &Pairing),
    shown: String,
    rc: &RequestCounter<'_>,
    settings: RecallSettings,
    room: u32,
    delimit: bool,
) -> Option<(String, Vec<Hit<'a>>)> {
    if recall.index.is_empty() || room <= MESSAGE_FRAMING {
        return None;
    }
    let queries = queries_of(thread, pairing);
    if queries.is_empty() {
        return None;
    }
    // Twice the count: some passages are already in the prompt.
    let wanted = settings.max_passages as usize;
    let (index, shown) = recall.with_shown(shown);
    let found = index.search_all(&queries, wanted * 2);
    if found.is_empty() {
        return None;
    }
    let shown = shown_among(shown, found.iter().map(|h| squash(&h.passage.text)));
    let mut hits: Vec<Hit<'a>> = found
        .into_iter()
        .zip(shown)
        .filter(|(_, shown)| !shown)
        .map(|(h, _)| h)
        .take(wanted)
        .collect();
    while !hits.is_empty() {
        let text = if delimit {
            delimited_block(&hits)
        } else {
            block(&hits)
        };
        let cost = rc.text(&text);
        if cost.saturating_add(MESSAGE_FRAMING) <= room {
            return Some((text, hits));
        }
        hits.pop();
    }
    None
}

/// For each of `texts`, whether `shown` contains it (SIMD substring
/// search: the shown text can be most of the prompt, read every turn).
fn shown_among(shown: &str, texts: impl Iterator<Item = String>) -> Vec<bool> {
    texts
        .map(|t| memchr::memmem::find(shown.as_bytes(), t.as_bytes()).is_some())
        .collect()
}

/// Whitespace collapsed, so a passage is found in the prompt however its
/// lines were joined.
fn squash(s: &str) -> String {
    crate::summarize::text::collapse_ws(s)
}

#[cfg(test)]
mod tests {
    use super::shown_among;

    #[test]
    fn shown_among_finds_each_text_as_contains_does() {
        let shown = "the summary names abc-123 and the path src/lib.rs; é ü";
        let texts = [
            "abc-123",
            "src/lib.rs;",
            "missing",
            "é ü",
            "abc-123 and",
            "123 and the",
        ];
        let got = shown_among(shown, texts.iter().map(|t| t.to_string()));
        let expected: Vec<bool> = texts.iter().map(|t| shown.contains(t)).collect();
        assert_eq!(got, expected);
        assert_eq!(got, [true, true, false, true, true, true]);
    }
}
