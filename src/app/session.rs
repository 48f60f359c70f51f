//! Append sessions: a client sends the messages appended since its last
//! call, with the session version that call returned; the server adds them
//! to its copy of the thread.
//!
//! The copy lives in the thread store (sealed per tenant, shared by every
//! replica on S3) and, for threads in use, in memory: a turn reads the
//! session's header (to learn whether another replica appended), reads the
//! segments it has not seen — usually none — and writes the head again with
//! what was appended in its tail (a segment of its own once the tail is
//! large). A stale or unknown base is refused with the current version, so
//! the client resends the thread in full (which restarts the session). The
//! append is kept only when the call succeeds.

use std::sync::Arc;

use crate::runtime::blocking;

use sha2::{Digest, Sha256};

use crate::cache::Weigh;
use crate::model::{memory_weight, Message, Thread};
use crate::store::{
    idle_past, Peek, PrefixTrace, SegmentRef, SessionWrite, StoreError, ThreadStore, MAX_SEGMENTS,
    MAX_TAIL_BYTES,
};

use super::error::store_error;
use super::thread_state::ThreadStates;
use super::{App, AppError, Result};

/// How a request gives its thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SessionInput {
    /// In full; nothing is kept.
    #[default]
    Off,
    /// In full, kept: starts (or restarts) an append session.
    Start,
    /// Only the messages appended to session version `base_version`.
    Append {
        /// The version the previous call returned.
        base_version: u64,
        /// The appended messages in a provider's shape (JSON text, and the
        /// shape when the caller says), read continuing the session's
        /// thread; `None`: they are the sent thread's.
        json: Option<(Arc<str>, Option<crate::provider::Format>)>,
    },
}

/// A session after a call, for the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// What the next call appends to.
    pub version: u64,
    /// SHA-256 (hex) over the thread's messages, in order.
    pub digest: String,
    /// Messages in the thread.
    pub messages: u64,
}

/// Settings of append sessions (`lifecycle.sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    /// A session not written to for this long reads as unknown, and the
    /// sweeper removes it (0: kept until DeleteThread).
    pub idle_ttl_seconds: u64,
    /// Memory for the copies of threads in use, in bytes: added to what
    /// the per-thread state of the process may hold in all.
    pub cache_bytes: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            idle_ttl_seconds: 7 * 24 * 3600,
            cache_bytes: 512 * 1024 * 1024,
        }
    }
}

/// The server's copy of a session's thread, as of one version.
pub(in crate::app) struct Copy {
    session: String,
    version: u64,
    digest: [u8; 32],
    thread: Arc<Thread>,
    segments: Vec<SegmentRef>,
    /// The messages after the segments, encoded one per line (the head's
    /// tail).
    tail: String,
    /// The digest after the segments' messages, and how many they hold: a
    /// replica that reads a newer head starts there.
    at_segments: ([u8; 32], usize),
    prefix: Option<PrefixTrace>,
    bytes: u64,
    /// The head's tag and last write: a copy this replica wrote (or read)
    /// serves an append on its version without reading the head again.
    tag: Option<String>,
    updated_at_unix_ms: u64,
}

impl Weigh for Arc<Copy> {
    fn weight(&self) -> u64 {
        self.bytes
    }
}

/// What a call took from its session, to write back when it succeeds.
pub(crate) struct Ticket {
    tenant: String,
    thread_id: String,
    /// The copy appended to and the head it was checked against; `None`
    /// for a start.
    base: Option<(Arc<Copy>, Peek)>,
    digest: [u8; 32],
    /// The appended messages, encoded (all of them for a start).
    appended: Vec<Vec<u8>>,
}

impl Ticket {
    /// The render trace of the base, if the previous call left one.
    fn prefix(&self) -> Option<&PrefixTrace> {
        self.base.as_ref().and_then(|(c, _)| c.prefix.as_ref())
    }

    /// An error about `thread.messages[i]` of the combined thread, renamed
    /// to what the request sent: `append.messages[i - base]`.
    fn rename(&self, e: AppError) -> AppError {
        let Some((base, _)) = &self.base else {
            return e;
        };
        let base_messages = base.thread.messages.len();
        let rename = |field: String| -> String {
            let Some(rest) = field.strip_prefix("thread.messages[") else {
                return field;
            };
            let Some((index, tail)) = rest.split_once(']') else {
                return field;
            };
            match index.parse::<usize>() {
                Ok(i) if i >= base_messages => {
                    format!("append.messages[{}]{tail}", i - base_messages)
                }
                _ => format!("thread.messages[{index}]{tail}"),
            }
        };
        match e {
            AppError::InvalidArgument { field, message } => AppError::InvalidArgument {
                field: rename(field),
                message,
            },
            AppError::PendingToolCall {
                field,
                call_id,
                tool_name,
            } => AppError::PendingToolCall {
                field: rename(field),
                call_id,
                tool_name,
            },
            other => other,
        }
    }
}

/// A use case's outcome with what its session adds.
pub(super) struct InSession<T> {
    /// The use case's own outcome.
    pub(super) out: T,
    /// The session after the call, when the request used one.
    pub(super) session: Option<SessionState>,
    /// The thread's previous render trace, when the call rendered and one
    /// is known.
    pub(super) previous: Option<Arc<PrefixTrace>>,
}

impl App {
    /// Runs a use case on the thread a request gives (`sent`, in full or
    /// appended to a session) and the previous render's trace, then keeps
    /// the append (and the render trace `trace` finds in the outcome) once
    /// it succeeded. Every session-aware use case goes through here.
    pub(super) async fn in_session<T, Fut>(
        &self,
        tenant: &str,
        sent: Arc<Thread>,
        input: SessionInput,
        run: impl FnOnce(Arc<Thread>, Option<Arc<Thread>>, Option<Arc<PrefixTrace>>) -> Fut,
        trace: impl Fn(&T) -> Option<&PrefixTrace>,
    ) -> Result<InSession<T>>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        let sessions = &self.inner.sessions;
        let (thread, ticket) = sessions.open(tenant, sent, input).await?;
        let Some(ticket) = ticket else {
            let thread_id = thread.id.clone();
            let previous = sessions.trace(tenant, &thread_id);
            let out = run(thread, None, previous.clone()).await?;
            // Only a render that traced a body has a previous one to report.
            let previous = trace(&out).and_then(|now| {
                sessions.keep_trace(tenant, &thread_id, Arc::new(now.clone()));
                previous
            });
            return Ok(InSession {
                out,
                session: None,
                previous,
            });
        };
        let extends = ticket.base.as_ref().map(|(c, _)| Arc::clone(&c.thread));
        let previous = ticket.prefix().cloned().map(Arc::new);
        let out = match run(Arc::clone(&thread), extends, previous.clone()).await {
            Ok(out) => out,
            Err(e) => return Err(sessions.failed(&ticket, e).await),
        };
        let session = sessions
            .commit(ticket, thread, trace(&out).cloned())
            .await?;
        Ok(InSession {
            out,
            session: Some(session),
            previous,
        })
    }
}

/// Sessions: the store and the copies in memory.
pub(crate) struct Sessions {
    store: Arc<ThreadStore>,
    /// Where the copies (and the traces of threads sent in full) are kept.
    threads: Arc<ThreadStates>,
    settings: SessionSettings,
}

impl Weigh for Arc<PrefixTrace> {
    fn weight(&self) -> u64 {
        64 + 12 * (self.units.len() + self.cached.len()) as u64
    }
}

const DIGEST_SEED: &[u8] = b"compactd-thread-digest v1";

/// The digest after `messages` (each already encoded) are appended.
fn extend_digest<'a>(
    mut digest: [u8; 32],
    encoded: impl IntoIterator<Item = &'a [u8]>,
) -> [u8; 32] {
    for m in encoded {
        let mut h = Sha256::new();
        h.update(digest);
        h.update((m.len() as u64).to_le_bytes());
        h.update(m);
        digest = h.finalize().into();
    }
    digest
}

fn seed() -> [u8; 32] {
    Sha256::digest(DIGEST_SEED).into()
}

fn encode(messages: &[Arc<Message>]) -> Result<Vec<Vec<u8>>> {
    messages
        .iter()
        .map(|m| {
            serde_json::to_vec(m)
                .map_err(|e| AppError::Internal(format!("message does not serialize: {e}")))
        })
        .collect()
}

/// A segment's content: one JSON message per line.
fn segment_bytes(encoded: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded.iter().map(|m| m.len() + 1).sum());
    for m in encoded {
        out.extend_from_slice(m);
        out.push(b'\n');
    }
    out
}

/// A segment's lines: its messages, encoded.
fn segment_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

fn parse_segment(bytes: &[u8]) -> Result<Vec<Arc<Message>>> {
    segment_lines(bytes)
        .map(|l| {
            serde_json::from_slice(l)
                .map_err(|e| AppError::Internal(format!("session segment does not parse: {e}")))
        })
        .collect()
}

fn stale(thread_id: &str, base: u64, current: u64) -> AppError {
    AppError::SessionStale {
        message: if current == 0 {
            format!("append.base_version {base}: thread {thread_id:?} has no append session (it expired, was deleted, or never started); send the thread in full with start_session")
        } else {
            format!("append.base_version {base} is stale: the append session of thread {thread_id:?} is at version {current}; send the thread in full with start_session")
        },
        current,
    }
}

fn session_error(e: StoreError, thread_id: &str, base: u64) -> AppError {
    match e {
        StoreError::Conflict { current, .. } => stale(thread_id, base, current),
        StoreError::NotFound => stale(thread_id, base, 0),
        other => store_error(other, "append session"),
    }
}

/// [`session_error`] for reading the session: a head or segment that does
/// not open (a head torn by a crash, as heads are not synced) is a session
/// the server no longer has, and the client sends its thread in full.
fn read_error(e: StoreError, thread_id: &str, base: u64) -> AppError {
    if let StoreError::Corrupt(detail) = &e {
        tracing::warn!(error = %detail, "an append session does not open; answered as unknown");
        return stale(thread_id, base, 0);
    }
    session_error(e, thread_id, base)
}

impl Sessions {
    pub(super) fn new(
        store: Arc<ThreadStore>,
        settings: SessionSettings,
        threads: Arc<ThreadStates>,
    ) -> Self {
        Sessions {
            store,
            threads,
            settings,
        }
    }

    /// The copy of the session kept in memory.
    fn copy(&self, tenant: &str, thread_id: &str) -> Option<Arc<Copy>> {
        self.threads.read(tenant, thread_id, |s| s.session.clone())
    }

    /// Keeps `copy` as the session's.
    fn keep_copy(&self, tenant: &str, thread_id: &str, copy: Arc<Copy>) {
        self.threads
            .update(tenant, thread_id, |s| s.session = Some(copy));
    }

    fn ttl_ms(&self) -> u64 {
        self.settings.idle_ttl_seconds.saturating_mul(1000)
    }

    /// The thread the call works on, and what to write back when it
    /// succeeds. `sent` is the thread as the request gave it: in full, or
    /// only the appended messages.
    async fn open(
        &self,
        tenant: &str,
        sent: Arc<Thread>,
        input: SessionInput,
    ) -> Result<(Arc<Thread>, Option<Ticket>)> {
        match input {
            SessionInput::Off => Ok((sent, None)),
            SessionInput::Start => {
                let encoded = encode(&sent.messages)?;
                let ticket = Ticket {
                    tenant: tenant.to_owned(),
                    thread_id: sent.id.clone(),
                    base: None,
                    digest: extend_digest(seed(), encoded.iter().map(Vec::as_slice)),
                    appended: encoded,
                };
                Ok((sent, Some(ticket)))
            }
            SessionInput::Append { base_version, json } => {
                let (base, peek) = self.base(tenant, &sent.id, base_version).await?;
                let sent = match json {
                    Some((json, shape)) => {
                        // Parsing may take a while: off the async workers.
                        let prefix = Arc::clone(&base.thread);
                        let messages =
                            blocking(move || appended_from_json(&json, shape, &prefix)).await??;
                        Arc::new(Thread {
                            id: sent.id.clone(),
                            messages,
                        })
                    }
                    None => sent,
                };
                let encoded = encode(&sent.messages)?;
                let mut messages = Vec::with_capacity(base.thread.messages.len() + encoded.len());
                messages.extend(base.thread.messages.iter().cloned());
                let sent = Arc::try_unwrap(sent).unwrap_or_else(|a| (*a).clone());
                messages.extend(sent.messages);
                let ticket = Ticket {
                    tenant: tenant.to_owned(),
                    thread_id: sent.id.clone(),
                    digest: extend_digest(base.digest, encoded.iter().map(Vec::as_slice)),
                    appended: encoded,
                    base: Some((base, peek)),
                };
                Ok((
                    Arc::new(Thread {
                        id: sent.id,
                        messages,
                    }),
                    Some(ticket),
                ))
            }
        }
    }

    /// The copy of the session at `version` and the head it matches: from
    /// memory when it is current, else completed (or read) from the store.
    async fn base(&self, tenant: &str, thread_id: &str, version: u64) -> Result<(Arc<Copy>, Peek)> {
        // The copy of the head this replica last wrote or read, at the
        // version the client appends to: the head is not read again (a
        // trip to the store every turn). Another writer that has replaced
        // it since makes the commit's compare-and-swap fail, which answers
        // the client as a stale base, as reading it first would have.
        if let Some(copy) = self
            .copy(tenant, thread_id)
            .filter(|c| c.version == version && !idle_past(c.updated_at_unix_ms, self.ttl_ms()))
        {
            if let Some(tag) = copy.tag.clone() {
                let peek = Peek::written(copy.session.clone(), version, tag);
                return Ok((copy, peek));
            }
        }
        let peek = self
            .store
            .peek(tenant, thread_id, self.ttl_ms())
            .await
            .map_err(|e| read_error(e, thread_id, version))?
            .ok_or_else(|| stale(thread_id, version, 0))?;
        if peek.version != version {
            return Err(stale(thread_id, version, peek.version));
        }
        let cached = self
            .copy(tenant, thread_id)
            .filter(|c| c.session == peek.session);
        if let Some(c) = cached.as_ref().filter(|c| c.version == version) {
            return Ok((Arc::clone(c), peek));
        }
        // Another replica (or a restart) moved the session on: read what
        // this copy lacks; a segment removed meanwhile means the head moved
        // again, which makes the client's base stale anyway.
        let head = self
            .store
            .open_head(tenant, thread_id, &peek)
            .await
            .map_err(|e| read_error(e, thread_id, version))?;
        let (mut messages, mut digest, have) = match cached
            .as_ref()
            .filter(|c| head.segments.starts_with(&c.segments))
        {
            Some(c) => (
                c.thread.messages[..c.at_segments.1].to_vec(),
                c.at_segments.0,
                c.segments.len(),
            ),
            None => (Vec::new(), seed(), 0),
        };
        for segment in &head.segments[have..] {
            let bytes = self
                .store
                .segment(tenant, thread_id, segment)
                .await
                .map_err(|e| read_error(e, thread_id, version))?;
            digest = extend_digest(digest, segment_lines(&bytes));
            messages.extend(parse_segment(&bytes)?);
        }
        let at_segments = (digest, messages.len());
        digest = extend_digest(digest, segment_lines(head.tail.as_bytes()));
        messages.extend(parse_segment(head.tail.as_bytes())?);
        if hex::encode(digest) != head.digest || messages.len() as u64 != head.messages {
            return Err(AppError::Internal(
                "an append session's segments do not match its head".into(),
            ));
        }
        let copy = Arc::new(Copy {
            bytes: memory_weight(&messages) + head.tail.len() as u64,
            tag: head.tag,
            updated_at_unix_ms: head.updated_at_unix_ms,
            session: head.session,
            version,
            digest,
            thread: Arc::new(Thread {
                id: thread_id.to_owned(),
                messages,
            }),
            segments: head.segments,
            tail: head.tail,
            at_segments,
            prefix: head.prefix,
        });
        self.keep_copy(tenant, thread_id, Arc::clone(&copy));
        Ok((copy, peek))
    }

    /// Writes the call's append (and the render's trace) once the call
    /// succeeded. A session another call moved on meanwhile is refused
    /// like a stale base.
    async fn commit(
        &self,
        ticket: Ticket,
        thread: Arc<Thread>,
        prefix: Option<PrefixTrace>,
    ) -> Result<SessionState> {
        // A call that renders nothing leaves the last render's trace.
        let prefix = prefix.or_else(|| ticket.prefix().cloned());
        let base = ticket.base.as_ref().map(|(copy, _)| copy);
        if let Some(base) = base.filter(|b| ticket.appended.is_empty() && b.prefix == prefix) {
            return Ok(SessionState {
                version: base.version,
                digest: hex::encode(base.digest),
                messages: base.thread.messages.len() as u64,
            });
        }
        let layout = Layout::after(base.map(|b| &**b), &ticket, &thread)?;
        // What the copy weighs: the base's, plus what was appended.
        let bytes = layout.tail.len() as u64
            + base.map_or_else(
                || memory_weight(&thread.messages),
                |b| {
                    b.bytes.saturating_sub(b.tail.len() as u64)
                        + memory_weight(&thread.messages[b.thread.messages.len()..])
                },
            );
        let base_version = ticket.base.as_ref().map_or(0, |(_, p)| p.version);
        let write = SessionWrite {
            base: ticket.base.map(|(_, peek)| peek),
            digest: hex::encode(ticket.digest),
            messages: thread.messages.len() as u64,
            keep: layout.keep,
            segment: layout.segment,
            tail: layout.tail.clone(),
            prefix: prefix.clone(),
            retire: layout.retire,
        };
        let head = self
            .store
            .write(&ticket.tenant, &ticket.thread_id, write)
            .await
            .map_err(|e| session_error(e, &ticket.thread_id, base_version))?;
        let copy = Arc::new(Copy {
            bytes,
            tag: head.tag,
            updated_at_unix_ms: head.updated_at_unix_ms,
            session: head.session.clone(),
            version: head.version,
            digest: ticket.digest,
            thread,
            segments: head.segments,
            tail: layout.tail,
            at_segments: layout.at_segments,
            prefix,
        });
        self.keep_copy(&ticket.tenant, &ticket.thread_id, copy);
        Ok(SessionState {
            version: head.version,
            digest: head.digest,
            messages: head.messages,
        })
    }

    /// The error a session call failed with, as the client should see it:
    /// errors about messages name the appended ones, and a plan conflict
    /// caused by another append to the same base (two replicas, two
    /// clients) is that base going stale.
    async fn failed(&self, ticket: &Ticket, e: AppError) -> AppError {
        let e = ticket.rename(e);
        let (AppError::VersionConflict { .. }, Some((_, base))) = (&e, &ticket.base) else {
            return e;
        };
        match self.store.peek(&ticket.tenant, &ticket.thread_id, 0).await {
            Ok(Some(now)) if now.tag != base.tag => stale(
                &ticket.thread_id,
                base.version,
                if now.session == base.session {
                    now.version
                } else {
                    0
                },
            ),
            Ok(None) => stale(&ticket.thread_id, base.version, 0),
            _ => e,
        }
    }

    /// The last render of a thread sent in full, when one is kept.
    pub(super) fn trace(&self, tenant: &str, thread_id: &str) -> Option<Arc<PrefixTrace>> {
        self.threads.read(tenant, thread_id, |s| s.trace.clone())
    }

    /// Keeps `trace` as the last render of a thread sent in full.
    pub(super) fn keep_trace(&self, tenant: &str, thread_id: &str, trace: Arc<PrefixTrace>) {
        self.threads
            .update(tenant, thread_id, |s| s.trace = Some(trace));
    }

    /// Forgets the thread's session (DeleteThread).
    pub(crate) async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool> {
        self.forget(tenant, thread_id);
        self.store
            .delete(tenant, thread_id)
            .await
            .map_err(|e| store_error(e, "append session"))
    }

    /// Forgets the copy and trace kept in memory.
    fn forget(&self, tenant: &str, thread_id: &str) {
        self.threads.update(tenant, thread_id, |s| {
            s.session = None;
            s.trace = None;
        });
    }

    /// Removes sessions idle past the TTL; how many.
    pub(crate) async fn sweep(&self) -> Result<u64> {
        self.store
            .sweep(self.ttl_ms())
            .await
            .map_err(|e| store_error(e, "append session"))
    }
}

/// Where a write puts the session's messages: the segments kept and
/// retired, the new segment and the head's tail.
struct Layout {
    keep: Vec<SegmentRef>,
    retire: Vec<SegmentRef>,
    segment: Option<(Vec<u8>, u64)>,
    tail: String,
    /// The digest after the segments, and their messages.
    at_segments: ([u8; 32], usize),
}

impl Layout {
    /// The layout after `ticket` appends to `base` (`None`: a start), for
    /// the combined `thread`. An append joins the base's tail while the
    /// tail stays under [`MAX_TAIL_BYTES`]; past it, the tail and the
    /// append become one segment; past [`MAX_SEGMENTS`], the whole thread.
    fn after(base: Option<&Copy>, ticket: &Ticket, thread: &Thread) -> Result<Layout> {
        let whole = (ticket.digest, thread.messages.len());
        let Some(base) = base else {
            return Ok(Layout {
                keep: Vec::new(),
                retire: Vec::new(),
                segment: Some((
                    segment_bytes(&ticket.appended),
                    ticket.appended.len() as u64,
                )),
                tail: String::new(),
                at_segments: whole,
            });
        };
        if base.segments.len() >= MAX_SEGMENTS {
            let encoded = encode(&thread.messages)?;
            return Ok(Layout {
                keep: Vec::new(),
                retire: base.segments.clone(),
                segment: Some((segment_bytes(&encoded), encoded.len() as u64)),
                tail: String::new(),
                at_segments: whole,
            });
        }
        let appended = String::from_utf8(segment_bytes(&ticket.appended))
            .map_err(|e| AppError::Internal(format!("an encoded message is not UTF-8: {e}")))?;
        let tail = base.tail.clone() + &appended;
        if tail.len() <= MAX_TAIL_BYTES {
            return Ok(Layout {
                keep: base.segments.clone(),
                retire: Vec::new(),
                segment: None,
                tail,
                at_segments: base.at_segments,
            });
        }
        let messages = (thread.messages.len() - base.at_segments.1) as u64;
        Ok(Layout {
            keep: base.segments.clone(),
            retire: Vec::new(),
            segment: Some((tail.into_bytes(), messages)),
            tail: String::new(),
            at_segments: whole,
        })
    }
}

/// Messages appended in a provider's shape, read after `prefix`.
fn appended_from_json(
    json: &str,
    shape: Option<crate::provider::Format>,
    prefix: &Thread,
) -> Result<Vec<Arc<Message>>> {
    const FIELD: &str = "append.messages_json";
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| AppError::invalid(FIELD, format!("is not JSON: {e}")))?;
    crate::provider::appended_from_json(&value, prefix, shape)
        .map_err(|e| AppError::invalid(e.field_under(FIELD), e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(id: &str, bytes: usize) -> Arc<Message> {
        let text = format!("{id} {}", "x".repeat(bytes));
        Arc::new(
            serde_json::from_value(serde_json::json!({"id": id, "role": "user", "content": text}))
                .expect("a message"),
        )
    }

    fn sent(ids: &[String], bytes: usize) -> Arc<Thread> {
        Arc::new(Thread {
            id: "t".into(),
            messages: ids.iter().map(|id| said(id, bytes)).collect(),
        })
    }

    async fn append(sessions: &Sessions, version: u64, ids: &[String]) -> (Arc<Thread>, u64) {
        let input = SessionInput::Append {
            base_version: version,
            json: None,
        };
        let (thread, ticket) = sessions
            .open("acme", sent(ids, 4000), input)
            .await
            .expect("open");
        let state = sessions
            .commit(ticket.expect("a ticket"), Arc::clone(&thread), None)
            .await
            .expect("commit");
        (thread, state.version)
    }

    /// One replica's sessions on `store`.
    fn replica(store: &Arc<ThreadStore>) -> Sessions {
        let threads = ThreadStates::new(64 * 1024 * 1024);
        Sessions::new(
            Arc::clone(store),
            SessionSettings::default(),
            Arc::new(threads),
        )
    }

    /// Two replicas' sessions on one store, and the version of a session
    /// of thread "t" (one message, "m0") the first one started.
    async fn two_replicas_on_one_session() -> (Arc<ThreadStore>, Sessions, Sessions, u64) {
        let store = Arc::new(ThreadStore::memory());
        let (one, two) = (replica(&store), replica(&store));
        let start = sent(&["m0".into()], 10);
        let (_, ticket) = one
            .open("acme", Arc::clone(&start), SessionInput::Start)
            .await
            .expect("start");
        let version = one
            .commit(ticket.expect("a ticket"), start, None)
            .await
            .expect("commit")
            .version;
        (store, one, two, version)
    }

    /// A replica appends on the version it wrote without reading the head
    /// again; when another replica has moved the session on meanwhile, the
    /// commit's compare-and-swap refuses the append as stale, with the
    /// version the session is at, and nothing is written. A version the
    /// copy is not at is read from the store as before.
    #[tokio::test]
    async fn a_copy_at_the_base_is_not_read_again_and_a_replaced_head_is_still_stale() {
        let (store, one, two, v1) = two_replicas_on_one_session().await;
        // The other replica moves the session on.
        let (_, v2) = append(&two, v1, &["m1".into()]).await;
        // The first still holds v1: the append opens from memory, and the
        // write behind it is refused.
        let input = SessionInput::Append {
            base_version: v1,
            json: None,
        };
        let (thread, ticket) = one
            .open("acme", sent(&["m2".into()], 10), input)
            .await
            .expect("opened from the copy at v1, without reading the head");
        let refused = one
            .commit(ticket.expect("a ticket"), thread, None)
            .await
            .expect_err("the head was replaced");
        assert!(
            matches!(refused, AppError::SessionStale { current, .. } if current == v2),
            "{refused:?}"
        );
        let head = store
            .head("acme", "t", 0)
            .await
            .expect("head")
            .expect("some");
        assert_eq!(
            (head.version, head.messages),
            (v2, 2),
            "nothing was written"
        );
        // On v2, which its copy is not at, the first replica reads the
        // head and appends.
        let (thread, v3) = append(&one, v2, &["m3".into()]).await;
        let ids: Vec<&str> = thread.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m0", "m1", "m3"]);
        assert!(v3 > v2);
    }

    /// Appends ride in the head's tail until it is full, then move to a
    /// segment; a replica that did not see them reads the same thread from
    /// the head and its segments, and appends on top.
    #[tokio::test]
    async fn appends_ride_in_the_head_until_they_fill_a_segment() {
        let (store, one, two, version) = two_replicas_on_one_session().await;
        let (mut version, mut n) = (version, 1);
        let head = || async {
            store
                .head("acme", "t", 0)
                .await
                .expect("head")
                .expect("some")
        };
        let mut flushed = None;
        for turn in 0..40 {
            let ids: Vec<String> = (n..n + 2).map(|i| format!("m{i}")).collect();
            n += 2;
            // Alternate replicas every few turns.
            let at = if turn % 6 < 3 { &one } else { &two };
            let (thread, v) = append(at, version, &ids).await;
            version = v;
            let h = head().await;
            assert_eq!(h.messages as usize, thread.messages.len());
            assert_eq!(h.messages as usize, n);
            assert!(h.tail.len() <= MAX_TAIL_BYTES);
            if h.segments.len() > 1 && flushed.is_none() {
                flushed = Some(turn);
                assert!(h.tail.is_empty(), "the tail moved into the segment");
            }
            if flushed.is_none() {
                assert_eq!(h.segments.len(), 1, "turn {turn}: only the start's segment");
                assert_eq!(segment_lines(h.tail.as_bytes()).count(), n - 1);
            }
            // The other replica reads the same thread from the store.
            let other = if std::ptr::eq(at, &one) { &two } else { &one };
            let (copy, _) = other.base("acme", "t", version).await.expect("base");
            assert_eq!(copy.thread.messages, thread.messages);
            assert_eq!(hex::encode(copy.digest), h.digest);
        }
        let flushed = flushed.expect("the tail filled a segment within 40 turns");
        assert!(
            flushed >= 5,
            "a tail of {MAX_TAIL_BYTES} bytes holds several turns"
        );
    }
}
