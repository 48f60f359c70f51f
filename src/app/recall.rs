//! Recall at render: the index over what the plan evicts (built once per
//! thread and plan, kept in a bounded cache), and the block of passages
//! that match the latest request, fitted into what the window has left.

use std::sync::{Arc, Mutex};

use crate::cache::Weigh;
use crate::hash::FastMap;
use crate::model::{CompactionPlan, Pairing, Thread};
use crate::recall::{block, delimited_block, queries_of, Hit, RecallIndex, RecallSettings};
use crate::redact::Redactor;
use crate::render::RequestCounter;

use super::thread_state::ThreadStates;

/// Tokens a message's framing takes at most, beyond its text.
const MESSAGE_FRAMING: u32 = 16;

/// A thread's recall index, with the redaction rules it was built under
/// and the weight it had when it was last kept: the cache must weigh a
/// state the same on its way out as on its way in, and an index grows
/// while it is kept.
#[derive(Clone)]
pub(in crate::app) struct RecallPart {
    redactor: String,
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
    searches: Searches,
}

/// Each query's ranked passages, while the index finds the same: a tool
/// loop asks the same queries turn after turn (the user message it works
/// on, the last thing the agent said), and searching again was the largest
/// part of such a turn.
#[derive(Default)]
struct Searches {
    /// The index generation the results are of.
    generation: u64,
    ranked: FastMap<u128, Vec<(usize, f32)>>,
}

/// Queries whose results are kept at most; past it the record starts over.
const KEPT_SEARCHES: usize = 64;

impl Searches {
    /// What `search` ranks for `query` and `k` in an index at
    /// `generation`, searched only when not kept.
    fn ranked(
        &mut self,
        generation: u64,
        (query, k): (&str, usize),
        search: impl FnOnce() -> Vec<(usize, f32)>,
    ) -> Vec<(usize, f32)> {
        if self.generation != generation {
            self.ranked.clear();
            self.generation = generation;
        }
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&(k as u64).to_le_bytes());
        h.update(query.as_bytes());
        let key = h.digest128();
        if let Some(found) = self.ranked.get(&key) {
            return found.clone();
        }
        let found = search();
        if self.ranked.len() >= KEPT_SEARCHES {
            self.ranked.clear();
        }
        self.ranked.insert(key, found.clone());
        found
    }

    fn bytes(&self) -> usize {
        let pair = std::mem::size_of::<(usize, f32)>();
        self.ranked.values().map(|r| 48 + pair * r.len()).sum()
    }
}

/// The stand-in text of a prompt (`crate::render::stable::stand_in_text`) and its [`squash`].
#[derive(Default)]
struct Shown {
    text: String,
    squashed: String,
    /// Whether each passage (by a hash of its text as indexed) is in
    /// `squashed`: the same passages come back turn after turn, and
    /// squashing each and searching the whole prompt's text for it was a
    /// fifth of the recall block's cost.
    found: FastMap<u128, bool>,
}

/// Passages whose presence in the prompt is kept at most; past it the
/// record starts over.
const SHOWN_PASSAGES: usize = 4096;

impl Shown {
    /// For each of `passages`, whether the prompt shows it (squashed, as
    /// the prompt's text is).
    fn contains_each<'p>(&mut self, passages: impl Iterator<Item = &'p str>) -> Vec<bool> {
        passages
            .map(|p| {
                // A collision (of 128 bits) would at worst leave a passage
                // out of the block, or repeat one the prompt shows.
                let key = xxhash_rust::xxh3::xxh3_128(p.as_bytes());
                if let Some(&known) = self.found.get(&key) {
                    return known;
                }
                let shown = shown_in(&self.squashed, &squash(p));
                if self.found.len() >= SHOWN_PASSAGES {
                    self.found.clear();
                }
                self.found.insert(key, shown);
                shown
            })
            .collect()
    }
}

impl Recall {
    fn bytes(&self) -> usize {
        self.index.bytes()
            + self.searches.bytes()
            + self.shown.text.len()
            + self.shown.squashed.len()
            + 40 * self.shown.found.len()
    }

    /// The index, and the squashed stand-in text of `request` (squashed
    /// again, and its passages looked for again, only when it differs from
    /// the last one's).
    fn with_shown(&mut self, text: String) -> (&RecallIndex, &mut Shown, &mut Searches) {
        if text != self.shown.text {
            self.shown = Shown {
                squashed: squash(&text),
                text,
                ..Shown::default()
            };
        }
        (&self.index, &mut self.shown, &mut self.searches)
    }
}

impl Weigh for RecallPart {
    fn weight(&self) -> u64 {
        self.weight
    }
}

impl ThreadStates {
    /// The thread's recall index, brought up to `plan`. An index follows
    /// the thread's plans: each render updates it with what the plan
    /// evicts, at the cost of the newly evicted messages.
    pub(super) fn recall(
        &self,
        tenant: &str,
        thread: &Arc<Thread>,
        extends: Option<&Arc<Thread>>,
        plan: &CompactionPlan,
        redactor: &Redactor,
    ) -> Arc<Mutex<Recall>> {
        let rules = redactor.id();
        let kept = self
            .read(tenant, &thread.id, |s| s.recall.clone())
            .filter(|r| r.redactor == rules);
        let index = kept
            .as_ref()
            .map_or_else(Default::default, |r| Arc::clone(&r.index));
        let updated = match index.lock() {
            Ok(mut r) => {
                r.index.update(thread, extends, plan, redactor);
                Some(r.bytes() as u64)
            }
            Err(_) => None,
        };
        // A panic while updating left it half done: start over.
        let (index, weight) = match updated {
            Some(weight) => (index, weight),
            None => {
                let fresh = Recall {
                    index: RecallIndex::build(thread, plan, redactor),
                    ..Recall::default()
                };
                let weight = fresh.bytes() as u64;
                (Arc::new(Mutex::new(fresh)), weight)
            }
        };
        if kept.is_none_or(|r| r.weight != weight || !Arc::ptr_eq(&r.index, &index)) {
            // Kept again with the weight it has now.
            let part = RecallPart {
                redactor: rules.to_owned(),
                index: Arc::clone(&index),
                weight,
            };
            self.update(tenant, &thread.id, |s| s.recall = Some(part));
        }
        index
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
    let (index, shown, searches) = recall.with_shown(shown);
    let k = wanted * 2;
    let generation = index.generation();
    let ranked = queries
        .iter()
        .map(|q| searches.ranked(generation, (q, k), || index.ranked_distinctive(q, k)));
    let found = index.merged(ranked, k);
    if found.is_empty() {
        return None;
    }
    let shown = shown.contains_each(found.iter().map(|h| h.passage.text.as_str()));
    // What the request itself says (its latest messages are always in the
    // prompt) is not recalled, nor one text twice.
    let asked: Vec<String> = queries.iter().map(|q| squash(q)).collect();
    let mut seen = crate::hash::FastSet::default();
    let mut hits: Vec<Hit<'a>> = found
        .into_iter()
        .zip(shown)
        .filter(|(h, shown)| {
            let text = squash(&h.passage.text);
            !shown
                && !asked.iter().any(|q| shown_in(q, &text))
                && seen.insert(xxhash_rust::xxh3::xxh3_128(text.as_bytes()))
        })
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

/// Whether `shown` contains `text` (SIMD substring search: the shown text
/// can be most of the prompt).
fn shown_in(shown: &str, text: &str) -> bool {
    memchr::memmem::find(shown.as_bytes(), text.as_bytes()).is_some()
}

/// Whitespace collapsed, so a passage is found in the prompt however its
/// lines were joined.
fn squash(s: &str) -> String {
    crate::summarize::text::collapse_ws(s)
}

#[cfg(test)]
mod tests {
    use super::{Recall, Searches, KEPT_SEARCHES};

    /// A query's results are kept while the index generation stays, per
    /// query and count; a new generation searches again.
    #[test]
    fn searches_are_kept_while_the_index_finds_the_same() {
        let mut s = Searches::default();
        let searched = std::cell::Cell::new(0);
        let mut ask = |generation: u64, query: &str, k: usize| {
            s.ranked(generation, (query, k), || {
                searched.set(searched.get() + 1);
                vec![(query.len() + k, generation as f32)]
            })
        };
        assert_eq!(ask(1, "worker", 10), [(16, 1.0)]);
        assert_eq!(ask(1, "worker", 10), [(16, 1.0)]);
        assert_eq!(searched.get(), 1);
        assert_eq!(ask(1, "worker", 4), [(10, 1.0)]);
        assert_eq!(ask(1, "workers", 10), [(17, 1.0)]);
        assert_eq!(searched.get(), 3);
        assert_eq!(ask(2, "worker", 10), [(16, 2.0)], "a new generation");
        assert_eq!(searched.get(), 4);
        for i in 0..2 * KEPT_SEARCHES {
            ask(2, &format!("q{i}"), 1);
        }
        assert!(s.ranked.len() <= KEPT_SEARCHES);
    }

    /// Each passage is looked for as `contains` would, asked once or again
    /// (the answer then kept), and looked for again in a prompt that changed.
    #[test]
    fn passages_are_found_in_the_prompt_as_contains_finds_them() {
        let shown = "the summary names abc-123 and the path src/lib.rs; é ü";
        let texts = [
            "abc-123",
            "src/lib.rs;",
            "missing",
            "é ü",
            "abc-123 and",
            "123 and the",
        ];
        let passages = || texts.iter().copied();
        let expected: Vec<bool> = texts.iter().map(|t| shown.contains(t)).collect();
        assert_eq!(expected, [true, true, false, true, true, true]);
        let mut recall = Recall::default();
        for _ in 0..2 {
            let (_, prompt, _) = recall.with_shown(shown.to_string());
            assert_eq!(prompt.contains_each(passages()), expected);
        }
        let (_, prompt, _) = recall.with_shown("now only missing is here".to_string());
        assert_eq!(
            prompt.contains_each(passages()),
            [false, false, true, false, false, false]
        );
        // Passages are found however their whitespace runs, as the prompt's
        // text is squashed too.
        let (_, prompt, _) = recall.with_shown("a  b\n\nc".to_string());
        assert_eq!(
            prompt.contains_each(["a b c", "a\tb  c", "b c"].into_iter()),
            [true; 3]
        );
        assert_eq!(prompt.contains_each(["a c"].into_iter()), [false]);
    }
}
