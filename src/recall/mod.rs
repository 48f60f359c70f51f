//! Recall: what the plan takes out of the prompt stays within the model's
//! reach. [`RecallIndex`] holds the originals of every message the plan
//! evicts (cleared, compressed, stubbed, summarized, externalized,
//! dropped) as passages, windows of a few lines (long lines cut at
//! sentence ends), each with the artifact that holds its whole message.
//!
//! Ranking is BM25 (the `bm25` crate's scoring, over an inverted index of
//! term weights computed here from [`tokenize::terms`], so a query touches
//! only the passages that hold its terms) times an exact-identifier boost: a passage that
//! names a path, id or error code the query names ranks above one that only
//! shares words. Ties break on passage order, so the same thread, plan and
//! query give the same passages. Passages are redacted as they are indexed;
//! confidential and restricted messages are never indexed.
//! Pure: no I/O.

mod passage;
pub mod tokenize;

pub use passage::{FoundPassage, RecalledPassage};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{message_digest, Action, CompactionPlan, Message, Role, Sensitivity, Thread};
use crate::redact::Redactor;

/// Lines in one passage at most.
const PASSAGE_LINES: usize = 3;
/// Characters in one passage at most (a longer line is cut at a sentence
/// end, or at this length).
const PASSAGE_CHARS: usize = 480;
/// Message bytes whose passages are prepared (redacted, cut, weighed) at
/// once before the index takes them.
const PREPARE_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// A matched identifier multiplies a passage's score by this much more.
const IDENTIFIER_BOOST: f32 = 1.0;
/// Share of the passages above which a query term is not searched for
/// (see `Postings::is_common`), and the passages it takes to tell.
const COMMON_SHARE: f32 = 0.1;
const COMMON_MIN_PASSAGES: usize = 40;

/// Recall at render: the passages of what left the prompt that best match
/// what the model is about to work on, in a labelled block before the
/// latest user message, within a reserve of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecallSettings {
    /// On by default; a request may turn it off.
    pub enabled: bool,
    /// Tokens the block may take at most (less when the window has less room).
    pub reserve_tokens: u32,
    /// Passages in the block at most.
    pub max_passages: u32,
}

impl Default for RecallSettings {
    fn default() -> Self {
        RecallSettings {
            enabled: true,
            reserve_tokens: 1200,
            max_passages: 6,
        }
    }
}

/// The block's first line: what it is, and how to read more.
pub const BLOCK_HEADER: &str = "[Recalled context: passages from earlier in this conversation that were compacted out of the prompt and match the current request. Each names the artifact that holds the whole original.]";

/// The recall block of `hits` (best first): the header, then one entry per
/// passage naming its message, line and artifact.
pub fn block(hits: &[Hit<'_>]) -> String {
    format!("{BLOCK_HEADER}{}", entries(hits))
}

/// [`block`] with the passages as delimited data (the header outside):
/// recalled text is old tool output and conversation, never instructions.
pub fn delimited_block(hits: &[Hit<'_>]) -> String {
    format!(
        "{BLOCK_HEADER}\n{}",
        crate::render::delimit_data(entries(hits).trim_start_matches('\n'))
    )
}

/// The passages, each on lines of its own after a `---` line naming it.
fn entries(hits: &[Hit<'_>]) -> String {
    hits.iter().map(|h| entry(h.passage)).collect()
}

/// One passage as the block shows it.
pub fn entry(p: &Passage) -> String {
    let source = match &p.artifact_id {
        Some(id) => format!("artifact:{id}, message {} line {}", p.message_id, p.line),
        None => format!("message {} line {}", p.message_id, p.line),
    };
    format!("\n--- {source}\n{}", p.text)
}

/// A window of an evicted message's original text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The message it comes from.
    pub message_id: String,
    /// The artifact holding the whole message, when the plan wrote one.
    pub artifact_id: Option<String>,
    /// Its first line within the message, from 1.
    pub line: u32,
    /// The text, redacted.
    pub text: String,
    /// The message's classification (who may read the passage).
    pub sensitivity: Sensitivity,
}

/// A ranked passage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit<'a> {
    /// The passage.
    pub passage: &'a Passage,
    /// BM25 times the identifier boost; comparable within one query only.
    pub score: f32,
}

/// Terms in a typical passage: BM25's length normalization needs an average
/// document length, fixed here so a passage's weights do not depend on what
/// else is indexed, and an index can grow one message at a time.
const AVERAGE_PASSAGE_TERMS: f32 = 64.0;
/// BM25's parameters, the usual ones.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// The search index over what plans evict from one thread. It grows as
/// later plans evict more (each message is indexed once, again only if its
/// content changed); a search only returns passages of messages the current
/// plan evicts.
#[derive(Default)]
pub struct RecallIndex {
    passages: Vec<Passage>,
    /// Per passage, the hashes of the identifiers it names, sorted.
    identifiers: Vec<Vec<u64>>,
    postings: Postings,
    /// Per passage, whether the latest plan evicts its message (what a
    /// search may return).
    searchable: Vec<bool>,
    /// Per indexed message: its digest and its passages.
    indexed: HashMap<String, (u128, Vec<usize>)>,
    /// Messages the latest plan evicts.
    evicted: HashSet<String>,
    /// The thread of the latest update and what its plan evicted (see
    /// [`evictions_digest`]): a message still the same there need not be
    /// digested again, and a thread that only grew under the same
    /// evictions changes nothing (the per-turn path).
    last: Option<(Arc<Thread>, u128)>,
    bytes: usize,
    /// Updates that may have changed what a search finds (every one not
    /// skipped as unchanged): results kept for a query hold while it stays
    /// the same.
    generation: u64,
}

/// A digest of what `plan` evicts and where it keeps it: every record's
/// message ids and artifact id.
fn evictions_digest(plan: &CompactionPlan) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut add = |kind: u8, ids: &[String], artifact: Option<&str>| {
        h.update(&[kind]);
        h.update(&(ids.len() as u64).to_le_bytes());
        for id in ids {
            h.update(&(id.len() as u64).to_le_bytes());
            h.update(id.as_bytes());
        }
        let artifact = artifact.unwrap_or("");
        h.update(&(artifact.len() as u64).to_le_bytes());
        h.update(artifact.as_bytes());
    };
    for r in &plan.clearings {
        add(0, &r.span.message_ids, r.archive_artifact_id.as_deref());
    }
    for r in &plan.summarizations {
        add(1, &r.span.message_ids, r.archive_artifact_id.as_deref());
    }
    for r in &plan.externalizations {
        add(2, &r.span.message_ids, Some(&r.artifact_id));
    }
    for r in &plan.drops {
        add(3, &r.span.message_ids, r.archive_artifact_id.as_deref());
    }
    h.digest128()
}

impl std::fmt::Debug for RecallIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallIndex")
            .field("passages", &self.passages.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// A message to index: the message, the artifact holding it, its digest
/// and its size (which cuts the batches).
type Fresh<'a> = (&'a Message, Option<String>, u128, usize);

impl RecallIndex {
    /// An index of every message `plan` evicts from `thread`.
    pub fn build(thread: &Arc<Thread>, plan: &CompactionPlan, redactor: &Redactor) -> RecallIndex {
        let mut index = RecallIndex::default();
        index.update(thread, None, plan, redactor);
        index
    }

    /// Follows `plan`: indexes the messages it evicts that are not indexed
    /// yet (or changed), and searches only those from now on. Costs what
    /// the newly evicted messages cost.
    ///
    /// `extends`, when given, is a thread `thread` starts with (its
    /// messages, then only appended ones): the messages the last update
    /// saw there are not digested again.
    pub fn update(
        &mut self,
        thread: &Arc<Thread>,
        extends: Option<&Arc<Thread>>,
        plan: &CompactionPlan,
        redactor: &Redactor,
    ) {
        // Leading messages known to be the last update's: those it found
        // evicted were digested and indexed as they are.
        let evictions = evictions_digest(plan);
        let same = match &self.last {
            Some((last, _)) if Arc::ptr_eq(last, thread) => thread.messages.len(),
            Some((last, _)) if extends.is_some_and(|e| Arc::ptr_eq(last, e)) => last.messages.len(),
            // A thread sent in full again: comparing is a fraction of
            // digesting every evicted message again.
            Some((last, _)) => common_prefix(&last.messages, &thread.messages),
            None => 0,
        };
        let unchanged = self
            .last
            .as_ref()
            .is_some_and(|(last, digest)| *digest == evictions && same == last.messages.len());
        self.last = Some((Arc::clone(thread), evictions));
        // The same evictions of the same messages; what was appended the
        // plan cannot name (it was made before).
        if unchanged {
            return;
        }
        self.generation += 1;
        let actions = plan.actions();
        let was_evicted = std::mem::take(&mut self.evicted);
        self.searchable.iter_mut().for_each(|s| *s = false);
        // Messages to index: (message, its artifact, its digest).
        let mut fresh: Vec<Fresh<'_>> = Vec::new();
        for (k, m) in thread.messages.iter().enumerate() {
            // Confidential and restricted content comes back only on an
            // explicit read, as with automatic rehydration.
            if m.metadata.sensitivity > Sensitivity::Internal {
                continue;
            }
            let artifact_id = match actions.get(m.id.as_str()) {
                None | Some(Action::Include) => continue,
                Some(Action::Clear(r)) => r.archive_artifact_id.clone(),
                Some(Action::Summarize(r)) => r.archive_artifact_id.clone(),
                Some(Action::Externalize(r)) => Some(r.artifact_id.clone()),
                Some(Action::Drop(r)) => r.archive_artifact_id.clone(),
            };
            let verified = k < same && was_evicted.contains(m.id.as_str());
            self.evicted.insert(m.id.clone());
            let indexed = self.indexed.get(m.id.as_str());
            let digest = match indexed {
                Some((d, _)) if verified => *d,
                _ => message_digest(m),
            };
            match indexed {
                Some((d, at)) if *d == digest => {
                    // The same message, perhaps in another artifact now.
                    for &i in at {
                        if self.passages[i].artifact_id != artifact_id {
                            self.passages[i].artifact_id.clone_from(&artifact_id);
                        }
                        self.searchable[i] = true;
                    }
                    continue;
                }
                Some((_, at)) => {
                    for &i in at {
                        let terms = tokenize::terms(&self.passages[i].text);
                        self.postings.remove(i, &terms);
                    }
                }
                None => {}
            }
            // Its size cuts the batches and weighs the work in one.
            fresh.push((m, artifact_id, digest, m.byte_len_bound()));
        }
        self.index_fresh(&fresh, redactor);
    }

    /// Indexes the messages found fresh. Redacting, cutting and weighing
    /// a message's passages depends on nothing else: on every core; the
    /// index takes them in order. A batch at a time: every evicted
    /// message's weights held at once would take more memory than the
    /// index they go into.
    fn index_fresh(&mut self, fresh: &[Fresh<'_>], redactor: &Redactor) {
        let mut rest = fresh;
        while !rest.is_empty() {
            let mut bytes = 0;
            let end = rest
                .iter()
                .position(|&(.., size)| {
                    bytes += size;
                    bytes > PREPARE_BATCH_BYTES
                })
                .map_or(rest.len(), |i| i.max(1));
            let (batch, later) = rest.split_at(end);
            rest = later;
            let prepared = crate::par::map(
                batch,
                |&(.., size)| size,
                |(m, ..)| {
                    let text = readable_text(m);
                    let text = redactor.redact(&text);
                    windows(&text)
                        .into_iter()
                        .map(|(line, window)| {
                            let weights = Weights::of(&window);
                            (line, window, weights)
                        })
                        .collect::<Vec<_>>()
                },
            );
            for ((m, artifact_id, digest, _), passages) in batch.iter().zip(prepared) {
                let mut at = Vec::with_capacity(passages.len());
                for (line, text, weights) in passages {
                    let i = self.insert(
                        Passage {
                            message_id: m.id.clone(),
                            artifact_id: artifact_id.clone(),
                            line,
                            text,
                            sensitivity: m.metadata.sensitivity,
                        },
                        weights,
                    );
                    self.searchable[i] = true;
                    at.push(i);
                }
                self.indexed.insert(m.id.clone(), (*digest, at));
            }
        }
    }

    /// An index over `passages` as they are (all searchable).
    pub fn of(passages: Vec<Passage>) -> RecallIndex {
        let mut index = RecallIndex::default();
        for p in passages {
            index.evicted.insert(p.message_id.clone());
            let i = index.add(p);
            index.searchable[i] = true;
        }
        index
    }

    /// Adds one passage.
    fn add(&mut self, p: Passage) -> usize {
        let weights = Weights::of(&p.text);
        self.insert(p, weights)
    }

    /// Adds one passage with its weights (not searchable until a plan
    /// evicts its message).
    fn insert(&mut self, p: Passage, w: Weights) -> usize {
        let i = self.passages.len();
        for (term, weight) in w.terms {
            self.postings.insert(term, i, weight);
        }
        self.postings.docs += 1;
        self.identifiers.push(w.identifiers);
        self.searchable.push(false);
        self.bytes += p.text.len() + 96;
        self.passages.push(p);
        i
    }

    /// Passages indexed (searchable or not).
    pub fn len(&self) -> usize {
        self.passages.len()
    }

    /// Whether the latest plan evicts nothing with text.
    pub fn is_empty(&self) -> bool {
        self.evicted.is_empty() || self.passages.is_empty()
    }

    /// Bytes the index holds, about (for a bounded cache).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The `k` best passages for `query`, best first; ties in passage order.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit<'_>> {
        self.ranked(query, k)
            .into_iter()
            .map(|r| self.hit(r))
            .collect()
    }

    /// Changes with every update that may change what a search finds.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// [`RecallIndex::search`] as (passage number, score) pairs.
    pub fn ranked(&self, query: &str, k: usize) -> Vec<(usize, f32)> {
        self.ranked_by(query, k, false)
    }

    /// [`RecallIndex::ranked`] for what nobody asked for (the recall block):
    /// by the query's terms that tell passages apart, a term most of the
    /// thread's passages hold left out ("at", "planning" in a travel chat),
    /// so a passage sharing only such words with the request is not shown.
    pub fn ranked_distinctive(&self, query: &str, k: usize) -> Vec<(usize, f32)> {
        self.ranked_by(query, k, true)
    }

    fn ranked_by(&self, query: &str, k: usize, skip_common: bool) -> Vec<(usize, f32)> {
        if self.passages.is_empty() || k == 0 {
            return Vec::new();
        }
        // Each occurrence of a term counts (as the `bm25` crate scores a
        // query), in query order, so the sums are the crate's to the bit.
        let terms = tokenize::terms(query);
        let wanted = identifier_hashes(&terms);
        let hashes: Vec<u64> = terms.iter().map(|t| term_hash(t)).collect();
        let mut hits: Vec<(usize, f32)> = self
            .postings
            .scores(&hashes, &self.searchable, skip_common)
            .into_iter()
            .map(|(d, score)| {
                let named = wanted
                    .iter()
                    .filter(|h| self.identifiers[d].binary_search(h).is_ok())
                    .count();
                (d, score * (1.0 + IDENTIFIER_BOOST * named as f32))
            })
            .filter(|(_, s)| *s > 0.0)
            .collect();
        // Best first, ties in passage order: a total order, so picking the
        // `k` best before sorting them gives what sorting all would.
        let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > k {
            hits.select_nth_unstable_by(k - 1, order);
            hits.truncate(k);
        }
        hits.sort_by(order);
        hits
    }

    /// The passage a ranked pair names.
    fn hit(&self, (i, score): (usize, f32)) -> Hit<'_> {
        Hit {
            passage: &self.passages[i],
            score,
        }
    }
}

/// What the model is about to work on, as queries in order of weight:
/// the latest user message, the arguments of calls still waiting for
/// their result, and the last assistant text. Searched one after the
/// other, so a long assistant turn cannot drown the request.
pub fn queries_of(thread: &Thread, pairing: &crate::model::Pairing) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Some(u) = thread.messages.iter().rev().find(|m| m.role == Role::User) {
        out.push(u.text().into_owned());
    }
    let abandoned = thread.abandoned_calls(pairing);
    let args: Vec<String> = pairing
        .pending()
        .filter(|c| !abandoned.contains(c))
        .map(|(i, j)| thread.messages[i].tool_calls[j].arguments_json())
        .collect();
    if !args.is_empty() {
        out.push(args.join("\n"));
    }
    if let Some(a) = thread
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.content.text().trim().is_empty())
    {
        out.push(a.content.text().into_owned());
    }
    out.retain(|q| !q.trim().is_empty());
    out
}

impl RecallIndex {
    /// The best passages for several queries in order of weight: the
    /// first query's `k` best, then the next query's that are not in yet,
    /// up to `k` in all.
    pub fn search_all(&self, queries: &[String], k: usize) -> Vec<Hit<'_>> {
        self.merged(queries.iter().map(|q| self.ranked(q, k)), k)
    }

    /// [`RecallIndex::search_all`] over each query's [`RecallIndex::ranked`]
    /// passages (taken only as far as needed), in order of weight.
    pub fn merged(
        &self,
        ranked: impl IntoIterator<Item = Vec<(usize, f32)>>,
        k: usize,
    ) -> Vec<Hit<'_>> {
        let mut out: Vec<(usize, f32)> = Vec::new();
        for found in ranked {
            for h in found {
                if out.len() < k && !out.iter().any(|o| o.0 == h.0) {
                    out.push(h);
                }
            }
            // No further query is searched once k are found.
            if out.len() == k {
                break;
            }
        }
        out.into_iter().map(|h| self.hit(h)).collect()
    }
}

/// A message as passages read it: its text (images as references), then
/// each call's name and arguments, one `key: value` line each with string
/// values as they are (not JSON-escaped), so a file written by a tool call
/// is searched and shown line by line.
fn readable_text(m: &Message) -> String {
    let mut out = m.archived_text().into_owned();
    for c in &m.tool_calls {
        out.push('\n');
        out.push_str(&c.name);
        match &c.arguments {
            Value::Object(args) => {
                for (k, v) in args {
                    out.push('\n');
                    out.push_str(k);
                    out.push_str(": ");
                    match v {
                        Value::String(s) => out.push_str(s),
                        other => out.push_str(&other.to_string()),
                    }
                }
            }
            Value::String(s) => {
                out.push('\n');
                out.push_str(s);
            }
            other => {
                out.push('\n');
                out.push_str(&other.to_string());
            }
        }
    }
    out
}

/// A passage's terms weighed as BM25 weighs a document's (term frequency,
/// saturated and normalized by length), and its identifiers.
struct Weights {
    terms: Vec<(u64, f32)>,
    identifiers: Vec<u64>,
}

impl Weights {
    fn of(text: &str) -> Weights {
        let mut hashes: Vec<u64> = Vec::new();
        let mut identifiers: Vec<u64> = Vec::new();
        tokenize::for_each_term(text, |t| {
            let h = term_hash(t);
            hashes.push(h);
            if tokenize::is_identifier(t) {
                identifiers.push(h);
            }
        });
        identifiers.sort_unstable();
        identifiers.dedup();
        // Kept per passage for the index's life.
        identifiers.shrink_to_fit();
        let norm = K1 * (1.0 - B + B * hashes.len() as f32 / AVERAGE_PASSAGE_TERMS);
        hashes.sort_unstable();
        // Runs of one hash are its occurrences; in hash order.
        let weighed: Vec<(u64, f32)> = hashes
            .chunk_by(|a, b| a == b)
            .map(|run| {
                let tf = run.len() as f32;
                (run[0], tf * (K1 + 1.0) / (tf + norm))
            })
            .collect();
        Weights {
            terms: weighed,
            identifiers,
        }
    }
}

/// BM25's inverted index: per term, the passages that hold it with their
/// saturated, length-normalized weight, and how many live passages hold
/// it (its document frequency). Scores equal the `bm25` crate's `Scorer`,
/// which walks every candidate passage's whole term list per query term;
/// here a query term walks only its own postings.
#[derive(Default)]
struct Postings {
    by_term: ByTerm<Term>,
    /// Passages indexed and not removed.
    docs: usize,
    /// Removed passages, counted out once (their postings stay; they are
    /// never searchable again).
    removed: HashSet<usize>,
}

#[derive(Default)]
struct Term {
    live: u32,
    postings: Vec<(u32, f32)>,
}

impl Postings {
    fn insert(&mut self, term: u64, passage: usize, weight: f32) {
        let t = self.by_term.entry(term).or_default();
        t.live += 1;
        t.postings
            .push((u32::try_from(passage).unwrap_or(u32::MAX), weight));
    }

    /// Takes a passage out of every count; `terms` are its terms.
    fn remove(&mut self, passage: usize, terms: &[String]) {
        if !self.removed.insert(passage) {
            return;
        }
        self.docs = self.docs.saturating_sub(1);
        let distinct: HashSet<u64> = terms.iter().map(|t| term_hash(t)).collect();
        for h in distinct {
            if let Some(t) = self.by_term.get_mut(&h) {
                t.live = t.live.saturating_sub(1);
            }
        }
    }

    /// A term a large share of this thread's passages hold ("the", "at",
    /// "planning" in a travel chat): it tells no passage from another, so a
    /// match on it alone brings back filler. Learned from the thread, in
    /// any language; a small index has no frequencies to learn from.
    fn is_common(&self, t: &Term) -> bool {
        self.docs >= COMMON_MIN_PASSAGES && t.live as f32 > self.docs as f32 * COMMON_SHARE
    }

    /// The `bm25` crate's inverse document frequency, in f32 as it computes it.
    fn idf(&self, live: u32) -> f32 {
        let df = live as f32;
        (1f32 + (self.docs as f32 - df + 0.5) / (df + 0.5)).ln()
    }

    /// Every searchable passage holding a query term, with its BM25 score
    /// (the terms' idf times weight, summed in query order).
    fn scores(&self, query: &[u64], searchable: &[bool], skip_common: bool) -> Vec<(usize, f32)> {
        let mut sum: Vec<f32> = Vec::new();
        let mut order: Vec<u32> = Vec::new();
        for h in query {
            let Some(t) = self.by_term.get(h) else {
                continue;
            };
            if skip_common && self.is_common(t) {
                continue;
            }
            if sum.is_empty() {
                sum = vec![f32::NAN; searchable.len()];
            }
            let idf = self.idf(t.live);
            for &(d, w) in &t.postings {
                // A removed passage is never searchable again: its message
                // was indexed anew.
                let i = d as usize;
                if !searchable.get(i).copied().unwrap_or(false) {
                    continue;
                }
                let acc = &mut sum[i];
                if acc.is_nan() {
                    order.push(d);
                    *acc = 0.0;
                }
                *acc += idf * w;
            }
        }
        order
            .into_iter()
            .map(|d| (d as usize, sum[d as usize]))
            .collect()
    }
}

/// The hashes of the identifiers among `terms`, sorted, each once.
fn identifier_hashes(terms: &[String]) -> Vec<u64> {
    let mut ids: Vec<u64> = terms
        .iter()
        .filter(|t| tokenize::is_identifier(t))
        .map(|t| term_hash(t))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A term's 64-bit id in the index (xxh3: the index hashes every term of
/// every evicted passage, so the hash is on the cold path).
fn term_hash(term: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(term.as_bytes())
}

/// Term ids are already hashes: the tables use them as they are.
type ByTerm<V> = HashMap<u64, V, std::hash::BuildHasherDefault<crate::tokens::PassThrough>>;

/// `text` as passages: up to [`PASSAGE_LINES`] lines and
/// [`PASSAGE_CHARS`] characters each, with the line each starts on; blank
/// windows are left out.
fn windows(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 1u32;
    let mut lines_in = 0;
    // A window is kept as long as its thread is: copied at its length
    // (the buffer it grew in keeps its room for the next one).
    let flush = |current: &mut String, start: u32, out: &mut Vec<(u32, String)>| {
        if !current.trim().is_empty() {
            out.push((start, current.as_str().to_owned()));
        }
        current.clear();
    };
    // Characters in `current`, kept as it grows (counting the window again
    // for every line it takes was quadratic in the window).
    let mut current_chars = 0;
    for (n, line) in text.lines().enumerate() {
        let n = u32::try_from(n + 1).unwrap_or(u32::MAX);
        // A blank line ends a paragraph, and the window with it.
        if line.trim().is_empty() {
            flush(&mut current, start, &mut out);
            (lines_in, current_chars) = (0, 0);
            continue;
        }
        let line_chars = line.chars().count();
        if line_chars > PASSAGE_CHARS {
            flush(&mut current, start, &mut out);
            (lines_in, current_chars) = (0, 0);
            for piece in cut(line) {
                out.push((n, piece));
            }
            start = n.saturating_add(1);
            continue;
        }
        if lines_in == PASSAGE_LINES || current_chars + line_chars > PASSAGE_CHARS {
            flush(&mut current, start, &mut out);
            (lines_in, current_chars) = (0, 0);
        }
        if lines_in == 0 {
            start = n;
        } else {
            current.push('\n');
            current_chars += 1;
        }
        current.push_str(line);
        current_chars += line_chars;
        lines_in += 1;
    }
    flush(&mut current, start, &mut out);
    out
}

/// A long line in pieces of at most [`PASSAGE_CHARS`] characters, cut after
/// the last sentence end in each piece when there is one past its middle,
/// else after the last space or separator (`,` `;` `}` `]`: minified JSON,
/// CSV), so that a path or URL is not cut in two; else where it must.
fn cut(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let end = (at + PASSAGE_CHARS).min(chars.len());
        let mut stop = end;
        if end < chars.len() {
            let back = || (at + PASSAGE_CHARS / 2..end).rev();
            let sentence_end = back().find(|&k| {
                matches!(chars[k], '.' | '!' | '?' | '。' | '！' | '？' | ';')
                    && chars
                        .get(k + 1)
                        .is_none_or(|c| c.is_whitespace() || !c.is_ascii())
            });
            let separator = || {
                back().find(|&k| {
                    chars[k].is_whitespace() || matches!(chars[k], ',' | ';' | '}' | ']')
                })
            };
            if let Some(k) = sentence_end.or_else(separator) {
                stop = k + 1;
            }
        }
        let piece: String = chars[at..stop].iter().collect();
        if !piece.trim().is_empty() {
            out.push(piece.trim().to_string());
        }
        at = stop;
    }
    out
}

/// How many leading messages `a` and `b` share (the same message, or an
/// equal one).
fn common_prefix(a: &[Arc<Message>], b: &[Arc<Message>]) -> usize {
    a.iter()
        .zip(b)
        .take_while(|(x, y)| Arc::ptr_eq(x, y) || x == y)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(id: &str, text: &str) -> Passage {
        Passage {
            message_id: id.into(),
            artifact_id: Some(format!("art_{id}")),
            line: 1,
            text: text.into(),
            sensitivity: Sensitivity::Internal,
        }
    }

    fn corpus() -> RecallIndex {
        RecallIndex::of(vec![
            passage(
                "m1",
                "The deploy script lives in ops/deploy/run.sh and needs the staging token.",
            ),
            passage(
                "m2",
                "Customer acct-4471 asked for a refund of 42 EUR on the March invoice.",
            ),
            passage(
                "m3",
                "Traceback: ConnectionError ERR_CONN_REFUSED while reaching db-primary:5432",
            ),
            passage(
                "m4",
                "We agreed the refund policy allows one refund per customer per quarter.",
            ),
            passage("m5", "缓存服务器在凌晨三点重启，原因是内存泄漏。"),
        ])
    }

    #[test]
    fn a_named_identifier_ranks_its_passage_first() {
        let index = corpus();
        let top = |q: &str| index.search(q, 1)[0].passage.message_id.clone();
        assert_eq!(top("which account was the refund for? acct-4471"), "m2");
        assert_eq!(top("what was the error code when the db failed"), "m3");
        assert_eq!(top("where is run.sh"), "m1");
        assert_eq!(top("为什么缓存服务器重启"), "m5");
        // Words alone rank by BM25: "refund policy" is m4's.
        assert_eq!(top("refund policy"), "m4");
    }

    /// The recall block is ranked by the terms that tell this thread's
    /// passages apart: a passage sharing only a word most passages hold is
    /// not brought back unasked, though a search for it still finds it.
    #[test]
    fn unasked_recall_needs_a_distinctive_term() {
        let mut passages: Vec<Passage> = (0..COMMON_MIN_PASSAGES)
            .map(|i| passage(&format!("m{i}"), &format!("ticket {i} was closed at noon")))
            .collect();
        passages.push(passage(
            "x",
            "the shop with the giant milkshakes is on Colonial Drive",
        ));
        let index = RecallIndex::of(passages);
        let x = index.passages.len() - 1;
        let query = "I'm back at the shop, where were the milkshakes?";
        assert_eq!(index.ranked_distinctive(query, 3)[0].0, x);
        let only_common = "closed at noon";
        assert!(index.ranked_distinctive(only_common, 3).is_empty());
        assert!(!index.ranked(only_common, 3).is_empty());
    }

    #[test]
    fn scores_equal_the_bm25_crates_to_the_bit() {
        use bm25::{Embedding, Scorer, TokenEmbedding};
        let mut index = corpus();
        let six = index.add(passage(
            "m6",
            "refund refund refund of the deploy token acct-4471",
        ));
        index.searchable[six] = true;
        // A removed passage leaves every count, as in the crate.
        let gone = index.add(passage("m7", "refund the staging deploy"));
        index
            .postings
            .remove(gone, &tokenize::terms("refund the staging deploy"));
        index.searchable[gone] = false;
        let mut oracle: Scorer<usize, u64> = Scorer::new();
        for (i, p) in index
            .passages
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != gone)
        {
            let terms = tokenize::terms(&p.text);
            let mut counts: HashMap<u64, u32> = HashMap::new();
            for t in &terms {
                *counts.entry(term_hash(t)).or_default() += 1;
            }
            let norm = K1 * (1.0 - B + B * terms.len() as f32 / AVERAGE_PASSAGE_TERMS);
            let weights = counts
                .into_iter()
                .map(|(index, n)| TokenEmbedding {
                    index,
                    value: n as f32 * (K1 + 1.0) / (n as f32 + norm),
                })
                .collect();
            oracle.upsert(&i, Embedding(weights));
        }
        for q in [
            "refund customer refund",
            "deploy token",
            "缓存 重启",
            "zebra",
            "the the a",
        ] {
            let hashes: Vec<u64> = tokenize::terms(q).iter().map(|t| term_hash(t)).collect();
            let mut ours = index.postings.scores(&hashes, &index.searchable, false);
            ours.sort_by_key(|&(d, _)| d);
            let query = Embedding(
                hashes
                    .iter()
                    .map(|&index| TokenEmbedding { index, value: 1.0 })
                    .collect(),
            );
            let mut theirs: Vec<(usize, f32)> = oracle
                .matches(&query)
                .into_iter()
                .map(|d| (d.id, d.score))
                .collect();
            theirs.sort_by_key(|&(d, _)| d);
            assert_eq!(ours.len(), theirs.len(), "{q}");
            for ((a, x), (b, y)) in ours.iter().zip(&theirs) {
                assert_eq!((a, x.to_bits()), (b, y.to_bits()), "{q}");
            }
        }
    }

    #[test]
    fn search_is_deterministic_and_bounded() {
        let index = corpus();
        let a: Vec<_> = index.search("refund customer", 10);
        let b: Vec<_> = index.search("refund customer", 10);
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(index.search("refund", 1).len() == 1);
        assert!(index.search("zebra", 5).is_empty());
        assert!(RecallIndex::of(Vec::new()).search("anything", 5).is_empty());
    }

    #[test]
    fn passages_are_line_windows_and_cut_long_lines() {
        let text = "a1\na2\na3\na4\n\n\nb1";
        let w = windows(text);
        assert_eq!(
            w,
            [
                (1, "a1\na2\na3".to_string()),
                (4, "a4".to_string()),
                (7, "b1".to_string())
            ]
        );
        let long = "First sentence here. ".repeat(60);
        let pieces = windows(&long);
        assert!(pieces.len() >= 3);
        assert!(pieces
            .iter()
            .all(|(_, p)| p.chars().count() <= PASSAGE_CHARS && p.ends_with('.')));
        let cjk = "长".repeat(2000);
        assert!(windows(&cjk)
            .iter()
            .all(|(_, p)| p.chars().count() <= PASSAGE_CHARS));
        // Minified JSON: cut between values, so no URL is cut in two.
        let url = |i: usize| {
            format!("https://dash.example.net/d/{i:04}/saturation?org=3&from=now-3h&panel={i}")
        };
        let json: String = (0..40)
            .map(|i| format!("{{\"rel\":\"dash\",\"href\":\"{}\"}}", url(i)))
            .collect::<Vec<_>>()
            .join(",");
        let pieces = windows(&json);
        assert!(pieces.len() >= 4);
        for i in 0..40 {
            assert!(
                pieces.iter().any(|(_, p)| p.contains(&url(i))),
                "{} is cut in two",
                url(i)
            );
        }
    }
}
