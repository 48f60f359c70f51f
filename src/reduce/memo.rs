//! Derived results that are expensive to recompute and fully determined by
//! their inputs: summaries (an LLM call, later) and tool-output compressions
//! (a JSON parse of a large output). Agents resend the same thread every turn,
//! so without this every turn would redo them.
//!
//! Keys hash every input that changes the result (content, summarizer id,
//! schema version, size caps), so a cached value is never stale. Memory is
//! bounded in bytes by the crate's one bounded cache type.

use crate::cache::{entries_weight, json_weight, strings_weight, BoundedCache, Weigh};
use crate::model::StructuredSummary;
use crate::summarize::{salient::Salient, Compressed};

/// Bytes each kind of entry may hold by default.
pub const DEFAULT_MEMO_BYTES: u64 = 64 * 1024 * 1024;

/// An entry's key: the scope it belongs to and the hash of its inputs.
/// The scope is part of the key, so one tenant's hit can never be another's
/// (no timing side channel) and a scope can be forgotten as a whole.
type ScopedKey = (u64, u128);

struct Caches {
    summaries: BoundedCache<ScopedKey, StructuredSummary>,
    compressed: BoundedCache<ScopedKey, Option<Compressed>>,
    salient: BoundedCache<ScopedKey, Salient>,
    parts: BoundedCache<ScopedKey, Part>,
    redacted: BoundedCache<ScopedKey, Redacted>,
    /// Messages as a summarizer reads them: `None` when no rule changed one.
    read: BoundedCache<ScopedKey, Read>,
    texts: BoundedCache<ScopedKey, Text>,
    /// Digests of summaries by allocation: a carried plan shares its
    /// summaries from turn to turn, and serializing every summary into its
    /// text's key on every render was an eighth of rendering.
    digests: std::sync::Mutex<crate::cache::ByAddress<StructuredSummary, u128>>,
}

/// A message with the rules applied, when they changed it.
#[derive(Clone)]
struct Read(Option<std::sync::Arc<crate::model::Message>>);

impl Weigh for Read {
    fn weight(&self) -> u64 {
        48 + self.0.as_ref().map_or(0, |m| m.byte_len() as u64)
    }
}

/// What the extractive summarizer took from one message.
#[derive(Clone)]
struct Part(std::sync::Arc<crate::summarize::extractive::MessagePart>);

impl Weigh for Part {
    fn weight(&self) -> u64 {
        self.0.weight()
    }
}

/// A message as a summarizer reads it (see [`Memo::redacted_message`]).
pub enum ReadMessage<'a> {
    /// No rule changed it.
    Same(&'a crate::model::Message),
    /// Redacted.
    Redacted(std::sync::Arc<crate::model::Message>),
}

impl AsRef<crate::model::Message> for ReadMessage<'_> {
    fn as_ref(&self) -> &crate::model::Message {
        match self {
            ReadMessage::Same(m) => m,
            ReadMessage::Redacted(m) => m,
        }
    }
}

/// A rendered text (a summary's message).
#[derive(Clone)]
struct Text(std::sync::Arc<str>);

impl Weigh for Text {
    fn weight(&self) -> u64 {
        48 + self.0.len() as u64
    }
}

/// What a rule set makes of a tool result's content and key fields: `None`
/// when no rule changed them (the common case, stored as a few bytes).
#[derive(Clone)]
struct Redacted(Option<std::sync::Arc<RedactedParts>>);

struct RedactedParts {
    content: crate::model::ToolContent,
    key_fields: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Weigh for Redacted {
    fn weight(&self) -> u64 {
        48 + self.0.as_ref().map_or(0, |e| {
            e.content.to_text().len() as u64
                + e.key_fields
                    .iter()
                    .map(|(k, v)| k.len() as u64 + json_weight(v))
                    .sum::<u64>()
        })
    }
}

/// Process-wide cache of summaries and compressions, bounded in bytes and
/// shared by every scope. Callers work through [`Memo::scoped`] views (one
/// per tenant and thread); the unscoped memo is a view of scope 0.
///
/// Keys are seeded per process (never logged), so nobody can precompute a
/// key that collides with another's content.
#[derive(Clone)]
pub struct Memo {
    caches: std::sync::Arc<Caches>,
    scope: u64,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("summaries_bytes", &self.caches.summaries.weight())
            .field("compressed_bytes", &self.caches.compressed.weight())
            .finish_non_exhaustive()
    }
}

impl Default for Memo {
    fn default() -> Self {
        Memo::new(DEFAULT_MEMO_BYTES)
    }
}

/// The scope id of `parts` (length-prefixed, seeded).
fn scope_id(parts: &[&str]) -> u64 {
    let mut k = KeyHasher::seeded();
    for p in parts {
        k.part(p.as_bytes());
    }
    // 0 is the unscoped view.
    (k.finish() as u64).max(1)
}

impl Memo {
    /// A memo holding up to about `bytes_per_kind` of summaries and as much
    /// of compressions.
    pub fn new(bytes_per_kind: u64) -> Self {
        Memo {
            caches: std::sync::Arc::new(Caches {
                summaries: BoundedCache::new(bytes_per_kind),
                compressed: BoundedCache::new(bytes_per_kind),
                salient: BoundedCache::new(bytes_per_kind / 4),
                parts: BoundedCache::new(bytes_per_kind / 4),
                redacted: BoundedCache::new(bytes_per_kind / 4),
                read: BoundedCache::new(bytes_per_kind / 4),
                texts: BoundedCache::new(bytes_per_kind / 4),
                digests: Default::default(),
            }),
            scope: 0,
        }
    }

    /// A view of the same caches whose entries only it sees: the service
    /// scopes by (tenant, thread).
    pub fn scoped(&self, parts: &[&str]) -> Memo {
        Memo {
            caches: std::sync::Arc::clone(&self.caches),
            scope: scope_id(parts),
        }
    }

    /// Drops every entry of the scope `parts` (a deleted thread's summaries).
    /// Walks the whole cache: deletion is rare, lookups are not.
    pub fn forget(&self, parts: &[&str]) {
        let scope = scope_id(parts);
        self.forget_where(|s| s == scope);
    }

    /// Drops every entry of every scope (the keys that protected what they
    /// were made from may be gone).
    pub fn clear(&self) {
        self.forget_where(|_| true);
    }

    /// Whether the scope `parts` holds any entry.
    #[cfg(test)]
    pub fn holds(&self, parts: &[&str]) -> bool {
        let scope = scope_id(parts);
        let found = std::sync::atomic::AtomicBool::new(false);
        self.forget_where(|s| {
            if s == scope {
                found.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            false
        });
        found.into_inner()
    }

    /// Drops the entries whose scope `drop` says.
    fn forget_where(&self, drop: impl Fn(u64) -> bool) {
        // Destructured so that a new cache cannot be left out.
        let Caches {
            summaries,
            compressed,
            salient,
            parts,
            redacted,
            read,
            texts,
            // Digests of content by allocation, not by scope: nothing to
            // read back once the summaries are gone.
            digests: _,
        } = &*self.caches;
        summaries.retain(|k| !drop(k.0));
        compressed.retain(|k| !drop(k.0));
        salient.retain(|k| !drop(k.0));
        parts.retain(|k| !drop(k.0));
        redacted.retain(|k| !drop(k.0));
        read.retain(|k| !drop(k.0));
        texts.retain(|k| !drop(k.0));
    }

    /// `env` with `redactor`'s rules applied, as
    /// [`Redactor::redact_envelope`](crate::redact::Redactor::redact_envelope)
    /// gives it, cached by content and rule set: every stub is built from
    /// the redacted result, and running every rule over every cleared
    /// result again on each warm call was most of its cost.
    pub fn redacted<'a>(
        &self,
        redactor: &crate::redact::Redactor,
        env: &'a crate::model::ToolResultEnvelope,
    ) -> std::borrow::Cow<'a, crate::model::ToolResultEnvelope> {
        use std::borrow::Cow;
        // The rules read only the content and the key fields.
        let kind: &[u8] = match env.content {
            crate::model::ToolContent::Text(_) => b"text",
            crate::model::ToolContent::Json(_) => b"json",
        };
        let mut k = self.key();
        k.part(redactor.id().as_bytes())
            .part(kind)
            .part(env.content.to_text().as_bytes());
        for (name, v) in &env.key_fields {
            k.part(name.as_bytes()).part(v.to_string().as_bytes());
        }
        let key = (self.scope, k.finish());
        if let Some(Redacted(hit)) = self.caches.redacted.get(&key) {
            return match hit {
                None => Cow::Borrowed(env),
                Some(parts) => {
                    let mut out = env.clone();
                    out.content = parts.content.clone();
                    out.key_fields = parts.key_fields.clone();
                    Cow::Owned(out)
                }
            };
        }
        let out = redactor.redact_envelope(env);
        let entry = match &out {
            Cow::Borrowed(_) => Redacted(None),
            Cow::Owned(e) => Redacted(Some(std::sync::Arc::new(RedactedParts {
                content: e.content.clone(),
                key_fields: e.key_fields.clone(),
            }))),
        };
        self.caches.redacted.insert(key, entry);
        out
    }

    /// `m` with `redactor`'s rules applied, as
    /// [`Redactor::redact_message`](crate::redact::Redactor::redact_message)
    /// gives it, cached by the message's digest (`digest`, its
    /// [`message_digest`](crate::model::message_digest)) and the rule set: a
    /// roll-up re-reads every message the chunk summaries read.
    pub fn redacted_message<'a>(
        &self,
        redactor: &crate::redact::Redactor,
        m: &'a crate::model::Message,
        digest: u128,
    ) -> ReadMessage<'a> {
        let mut k = self.key();
        k.part(b"redacted-message")
            .part(redactor.id().as_bytes())
            .part(&digest.to_le_bytes());
        let key = (self.scope, k.finish());
        if let Some(Read(hit)) = self.caches.read.get(&key) {
            return match hit {
                None => ReadMessage::Same(m),
                Some(r) => ReadMessage::Redacted(r),
            };
        }
        match redactor.redact_message(m) {
            std::borrow::Cow::Borrowed(_) => {
                self.caches.read.insert(key, Read(None));
                ReadMessage::Same(m)
            }
            std::borrow::Cow::Owned(r) => {
                let r = std::sync::Arc::new(r);
                self.caches
                    .read
                    .insert(key, Read(Some(std::sync::Arc::clone(&r))));
                ReadMessage::Redacted(r)
            }
        }
    }

    /// A cached text, or `make()`.
    fn text(&self, key: u128, make: impl FnOnce() -> String) -> String {
        let key = (self.scope, key);
        if let Some(t) = self.caches.texts.get(&key) {
            return t.0.to_string();
        }
        let t = make();
        self.caches.texts.insert(key, Text(t.as_str().into()));
        t
    }

    /// A key builder for this memo (seeded per process).
    pub fn key(&self) -> KeyHasher {
        KeyHasher::seeded()
    }

    /// A cached summary, or `make()` (cached when it succeeds).
    pub fn summary<E>(
        &self,
        key: u128,
        make: impl FnOnce() -> Result<StructuredSummary, E>,
    ) -> Result<StructuredSummary, E> {
        let key = (self.scope, key);
        if let Some(s) = self.caches.summaries.get(&key) {
            return Ok(s);
        }
        let s = make()?;
        self.caches.summaries.insert(key, s.clone());
        Ok(s)
    }

    /// A cached compression result (including "not compressible"), or `make()`.
    pub fn compressed(
        &self,
        key: u128,
        make: impl FnOnce() -> Option<Compressed>,
    ) -> Option<Compressed> {
        let key = (self.scope, key);
        if let Some(c) = self.caches.compressed.get(&key) {
            return c;
        }
        let c = make();
        self.caches.compressed.insert(key, c.clone());
        c
    }
}

impl Weigh for StructuredSummary {
    fn weight(&self) -> u64 {
        let s = self;
        let span = strings_weight(&s.span.message_ids);
        let entries = entries_weight(&s.decisions, &s.open_items, &s.artifacts, &s.tool_outcomes);
        let task = s.current_task.as_ref().map_or(0, |t| t.len() as u64);
        200 + span
            + strings_weight(&s.facts)
            + entries
            + task
            + strings_weight(&s.current_plan)
            + strings_weight(&s.references)
    }
}

/// Scans kept per text and reference count: the stubs of a compaction and
/// every summary that reads an output share one scan of it.
impl crate::summarize::Scans for Memo {
    fn salient(&self, text: &str, max_refs: usize) -> Salient {
        let mut k = self.key();
        k.part(b"salient")
            .part(&(max_refs as u64).to_le_bytes())
            .part(text.as_bytes());
        // Scanning the output again on every call made warm calls slow.
        let key = (self.scope, k.finish());
        if let Some(s) = self.caches.salient.get(&key) {
            return s;
        }
        let s = crate::summarize::salient::salient(text, max_refs);
        self.caches.salient.insert(key, s.clone());
        s
    }

    fn part(
        &self,
        digest: u128,
        unanswered: bool,
        make: &dyn Fn() -> crate::summarize::extractive::MessagePart,
    ) -> std::sync::Arc<crate::summarize::extractive::MessagePart> {
        let mut k = self.key();
        k.part(b"message-part")
            .part(crate::summarize::EXTRACTIVE_ID.as_bytes())
            .part(crate::model::SUMMARY_SCHEMA_VERSION.as_bytes())
            .part(&[u8::from(unanswered)])
            .part(&digest.to_le_bytes());
        let key = (self.scope, k.finish());
        if let Some(Part(p)) = self.caches.parts.get(&key) {
            return p;
        }
        let p = std::sync::Arc::new(make());
        self.caches
            .parts
            .insert(key, Part(std::sync::Arc::clone(&p)));
        p
    }
}

impl Weigh for Salient {
    fn weight(&self) -> u64 {
        64 + self.error.as_ref().map_or(0, |e| e.len() as u64) + strings_weight(&self.references)
    }
}

impl Weigh for Option<Compressed> {
    fn weight(&self) -> u64 {
        64 + self.as_ref().map_or(0, |c| {
            c.text.len() as u64
                + c.preserved
                    .iter()
                    .map(|(k, v)| k.len() as u64 + json_weight(v))
                    .sum::<u64>()
        })
    }
}

/// A summary's message text, cached by everything in its record: a long
/// thread's summaries are rendered on every turn, and recognizing one costs
/// a fraction of rendering it.
impl crate::render::SummaryTexts for Memo {
    fn summary_text(&self, r: &crate::model::SummarizationRecord) -> String {
        let crate::model::SummarizationRecord {
            span,
            summary,
            summary_token_count,
            archive_artifact_id,
            summarizer_id,
        } = r;
        // The map is whole between calls: a panic cannot leave half an entry.
        let digests = || {
            self.caches
                .digests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let known = digests().get(summary);
        let digest = known.or_else(|| {
            let mut k = self.key();
            // Named fields: a field left out cannot shift the next one into
            // its place, so distinct summaries never stream the same bytes.
            rmp_serde::encode::write_named(&mut k, &**summary).ok()?;
            let digest = k.finish();
            digests().insert(summary, digest);
            Some(digest)
        });
        let mut k = self.key();
        k.part(b"summary message");
        k.part(crate::model::SUMMARY_RENDER_VERSION.as_bytes());
        // The rest of the record (every field, or this does not compile):
        // MessagePack is self-delimiting, so they cannot run into each other.
        // The span is most often the summary's own, which its digest
        // covers: comparing is cheaper than hashing every id again. `None`
        // cannot stand for another span (a span never encodes as nil).
        let span = (*span != summary.span).then_some(span);
        let rest = (
            span,
            summary_token_count,
            archive_artifact_id,
            summarizer_id,
        );
        let (Some(digest), Ok(())) = (digest, rmp_serde::encode::write(&mut k, &rest)) else {
            return crate::render::summary_text(r);
        };
        k.part(&digest.to_le_bytes());
        self.text(k.finish(), || crate::render::summary_text(r))
    }
}

/// Streaming key builder: every part is length-prefixed; seeded per process.
pub struct KeyHasher(xxhash_rust::xxh3::Xxh3);

/// Streams a serialization into the key (as one unprefixed part).
impl std::io::Write for KeyHasher {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl KeyHasher {
    fn seeded() -> Self {
        KeyHasher(xxhash_rust::xxh3::Xxh3::with_seed(
            crate::model::process_seed(),
        ))
    }

    /// Adds one part.
    pub fn part(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// The key.
    pub fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SpanReference;

    fn summary(n: u32) -> StructuredSummary {
        let mut s = StructuredSummary::empty(SpanReference {
            message_ids: vec![n.to_string()],
            first_turn: n,
            last_turn: n,
        });
        s.facts.push("x".repeat(500));
        s
    }

    /// A kept summary text is the record's own: any change to the record
    /// (a fact, the archive it names) is a new text, never a stale one.
    #[test]
    fn a_kept_summary_text_follows_its_record() {
        use crate::model::SummarizationRecord;
        use crate::render::SummaryTexts;
        let m = Memo::new(1 << 20).scoped(&["tenant", "thread"]);
        let mut r = SummarizationRecord {
            span: summary(3).span.clone(),
            summary: summary(3).into(),
            summary_token_count: 200,
            archive_artifact_id: None,
            summarizer_id: "extractive".into(),
        };
        for _ in 0..2 {
            assert_eq!(m.summary_text(&r), crate::render::summary_text(&r));
        }
        assert!(m.caches.texts.weight() > 0, "the text was kept");
        std::sync::Arc::make_mut(&mut r.summary)
            .facts
            .push("the deploy key rotates on Fridays".into());
        assert!(m.summary_text(&r).contains("rotates on Fridays"));
        r.archive_artifact_id = Some("art_9".into());
        assert_eq!(m.summary_text(&r), crate::render::summary_text(&r));
        assert!(m.summary_text(&r).contains("art_9"));
        // A record spanning other messages than its summary names.
        r.span.message_ids.push("m-extra".into());
        assert_eq!(m.summary_text(&r), crate::render::summary_text(&r));
    }

    /// A summary changed through a shared copy, or dropped and replaced,
    /// is digested anew; digests of dropped summaries are swept.
    #[test]
    fn summary_digests_follow_the_allocation() {
        use crate::model::SummarizationRecord;
        use crate::render::SummaryTexts;
        let m = Memo::new(1 << 20).scoped(&["tenant", "thread"]);
        let record = |s: std::sync::Arc<StructuredSummary>| SummarizationRecord {
            span: s.span.clone(),
            summary: s,
            summary_token_count: 200,
            archive_artifact_id: None,
            summarizer_id: String::new(),
        };
        let a = record(summary(4).into());
        let mut b = a.clone();
        assert_eq!(m.summary_text(&b), crate::render::summary_text(&a));
        // Shared: `make_mut` copies, and the copy is a new allocation.
        std::sync::Arc::make_mut(&mut b.summary)
            .facts
            .push("the cache is cold after a deploy".into());
        assert!(m.summary_text(&b).contains("cold after a deploy"));
        assert!(!m.summary_text(&a).contains("cold after a deploy"));
        for n in 0..5000 {
            let r = record(summary(n).into());
            assert_eq!(m.summary_text(&r), crate::render::summary_text(&r));
        }
        let held = m.caches.digests.lock().map_or(usize::MAX, |d| d.len());
        assert!(held < 5000, "dead digests are swept: {held} held");
    }

    #[test]
    fn caches_and_stays_bounded() {
        let m = Memo::new(1 << 20);
        let mut calls = 0;
        for round in 0..2 {
            for k in 0..2u32 {
                let s = m
                    .summary::<()>(u128::from(k), || {
                        calls += 1;
                        Ok(summary(k))
                    })
                    .unwrap();
                assert_eq!(s, summary(k));
            }
            assert_eq!(calls, 2, "round {round}");
        }
        let small = Memo::new(64 * 1024);
        for k in 0..1_000u32 {
            small
                .summary::<()>(u128::from(k), || Ok(summary(k)))
                .unwrap();
        }
        assert!(small.caches.summaries.weight() <= 64 * 1024);
    }

    #[test]
    fn weights_grow_with_content() {
        let a = summary(1);
        let mut b = a.clone();
        b.facts.push("y".repeat(10_000));
        assert!(b.weight() >= a.weight() + 10_000);
        assert!(
            Some(Compressed {
                kind: crate::summarize::OutputKind::FileRead,
                text: "z".repeat(4_000),
                preserved: Default::default(),
            })
            .weight()
                >= 4_000
        );
    }

    #[test]
    fn scopes_never_see_each_other_and_can_be_forgotten() {
        let m = Memo::new(1 << 20);
        let a = m.scoped(&["acme", "t1"]);
        let b = m.scoped(&["globex", "t1"]);
        // Length-prefixed parts: ("ac", "me") is not ("a", "cme").
        assert_ne!(scope_id(&["ac", "met1"]), scope_id(&["acme", "t1"]));
        let mut calls = 0;
        for view in [&a, &b, &a] {
            view.summary::<()>(7, || {
                calls += 1;
                Ok(summary(7))
            })
            .unwrap();
        }
        assert_eq!(calls, 2, "b missed a's entry; a hit its own");
        m.forget(&["acme", "t1"]);
        a.summary::<()>(7, || {
            calls += 1;
            Ok(summary(7))
        })
        .unwrap();
        b.summary::<()>(7, || {
            calls += 1;
            Ok(summary(7))
        })
        .unwrap();
        assert_eq!(calls, 3, "only the forgotten scope recomputes");
    }

    #[test]
    fn failures_are_not_cached() {
        let m = Memo::new(1 << 20);
        assert!(m.summary(1, || Err("down")).is_err());
        assert!(m.summary::<&str>(1, || Ok(summary(1))).is_ok());
    }
}
