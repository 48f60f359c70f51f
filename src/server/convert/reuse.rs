//! A thread sent in full again is converted only where it changed.
//!
//! Most clients send the whole thread on every call, and from one call to
//! the next it grows by a message or two. Converting it (every tool call's
//! arguments and every JSON output parsed, every outcome inferred) cost as
//! much as the rest of a warm render. Each message as sent is digested
//! instead, and a message at the position and with the digest it had in
//! the last thread this tenant sent under that id is the message converted
//! then, shared. A thread that starts with all of the last one's messages
//! is known to extend it, which lets the per-turn path treat it as an
//! append session's thread (checking, pairing and counting only what
//! follows).
//!
//! The digest is xxh3-128 seeded per process over every field, each
//! length-prefixed; the fields are destructured exhaustively, so a field
//! added to the API does not compile until it is digested.

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_128_with_seed;

use super::Result;
use crate::app::SentThread;
use crate::model::{memory_weight, Message, Thread};
use crate::proto::{each, pb};

/// The last conversion of the thread a request names, and what this
/// request's conversion leaves for the next.
#[derive(Debug, Default)]
pub struct ThreadReuse {
    /// The last thread sent in full under the request's tenant and id.
    pub last: Option<Arc<SentThread>>,
    /// Whether this conversion is kept for the next (else a thread without
    /// a `last` converts as it always did, without digests).
    keep: bool,
    /// This request's thread, when it was sent in full.
    pub sent: Option<Arc<SentThread>>,
    /// `last`'s thread, when this request's holds all of its messages
    /// first (shared), followed only by new ones.
    pub(crate) extends: Option<Arc<Thread>>,
}

impl ThreadReuse {
    /// Reuse of `last`, the conversion kept in [`ThreadReuse::sent`].
    pub fn new(last: Option<Arc<SentThread>>) -> Self {
        ThreadReuse {
            last,
            keep: true,
            sent: None,
            extends: None,
        }
    }
}

/// Converts `t`, sharing the messages of `reuse.last` it sent again at the
/// same positions.
pub(crate) fn thread_reusing(t: pb::Thread, reuse: &mut ThreadReuse) -> Result<Arc<Thread>> {
    let seed = crate::model::process_seed();
    let last = reuse.last.take().filter(|l| l.thread.id == t.id);
    if last.is_none() && !reuse.keep {
        return Ok(Arc::new(Thread::new(t.id, each(t.messages, "messages")?)));
    }
    let mut digests = Vec::with_capacity(t.messages.len());
    let mut messages = Vec::with_capacity(t.messages.len());
    // The leading messages that are the last thread's, shared.
    let mut shared = 0;
    for (i, m) in t.messages.into_iter().enumerate() {
        let digest = digest(&m, seed);
        digests.push(digest);
        let kept = last
            .as_ref()
            .filter(|l| shared == i && l.digests.get(i) == Some(&digest))
            .map(|l| Arc::clone(&l.thread.messages[i]));
        match kept {
            Some(m) => {
                shared += 1;
                messages.push(m);
            }
            None => {
                let converted =
                    Message::try_from(m).map_err(|e| e.within(&format!("messages[{i}]")))?;
                messages.push(Arc::new(converted));
            }
        }
    }
    // All of the last thread's messages first: it is extended.
    let last = last.filter(|l| shared == l.thread.messages.len());
    let thread = match &last {
        // The same messages: the same thread.
        Some(l) if shared == messages.len() => Arc::clone(&l.thread),
        _ => Arc::new(Thread { id: t.id, messages }),
    };
    reuse.extends = last.as_ref().map(|l| Arc::clone(&l.thread));
    reuse.sent = reuse.keep.then(|| {
        // Weighing walks every message: only the new ones when the last
        // thread's are all there.
        let messages_weight = match &last {
            Some(l) => l.messages_weight + memory_weight(&thread.messages[shared..]),
            None => memory_weight(&thread.messages),
        };
        Arc::new(SentThread {
            thread: Arc::clone(&thread),
            digests,
            messages_weight,
        })
    });
    Ok(thread)
}

/// The digest of everything `m` sends (see the module doc).
pub(crate) fn digest(m: &pb::Message, seed: u64) -> u128 {
    /// Fields up to this long go in as they are; longer ones as their
    /// one-shot xxh3-128 (faster per byte than feeding them in).
    const SMALL: usize = 256;
    let mut buf = Vec::with_capacity(512);
    let mut field = |b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
        if b.len() <= SMALL {
            buf.extend_from_slice(b);
        } else {
            buf.extend_from_slice(&xxh3_128_with_seed(b, seed).to_le_bytes());
        }
    };
    let pb::Message {
        id,
        role,
        text,
        parts,
        tool_calls,
        tool_result,
        turn,
        metadata,
    } = m;
    field(id.as_bytes());
    field(&role.to_le_bytes());
    field(text.as_bytes());
    field(&turn.to_le_bytes());
    field(&(parts.len() as u64).to_le_bytes());
    for pb::ContentPart { kind } in parts {
        digest_part(&mut field, kind.as_ref());
    }
    field(&(tool_calls.len() as u64).to_le_bytes());
    for pb::ToolCall {
        id,
        name,
        arguments_json,
        wire,
    } in tool_calls
    {
        field(id.as_bytes());
        field(name.as_bytes());
        field(arguments_json.as_bytes());
        provider(&mut field, wire.as_ref());
    }
    match tool_result {
        None => field(b"no result"),
        Some(r) => digest_result(&mut field, r),
    }
    match metadata {
        None => field(b"no metadata"),
        Some(pb::MessageMetadata {
            protected,
            label,
            sensitivity,
            source,
            created_at,
        }) => {
            field(b"metadata");
            field(&[u8::from(*protected)]);
            optional(&mut field, label.as_deref());
            field(&sensitivity.to_le_bytes());
            optional(&mut field, source.as_deref());
            optional(&mut field, created_at.as_deref());
        }
    }
    xxh3_128_with_seed(&buf, seed)
}

/// A content part's fields (see [`digest`]).
fn digest_part(field: &mut impl FnMut(&[u8]), kind: Option<&pb::content_part::Kind>) {
    use pb::content_part::Kind;
    match kind {
        None => field(b"none"),
        Some(Kind::Text(t)) => {
            field(b"text");
            field(t.as_bytes());
        }
        Some(Kind::ImageUrl(u)) => {
            field(b"image");
            field(u.as_bytes());
        }
        Some(Kind::Thinking(pb::ThinkingBlock {
            thinking,
            signature,
        })) => {
            field(b"thinking");
            field(thinking.as_bytes());
            field(signature.as_bytes());
        }
        Some(Kind::RedactedThinking(pb::RedactedThinkingBlock { data })) => {
            field(b"redacted");
            field(data.as_bytes());
        }
        Some(Kind::Reasoning(pb::ReasoningItem {
            id,
            summary,
            encrypted_content,
            rest_json,
        })) => {
            field(b"reasoning");
            field(id.as_bytes());
            field(&(summary.len() as u64).to_le_bytes());
            for s in summary {
                field(s.as_bytes());
            }
            optional(field, encrypted_content.as_deref());
            optional(field, rest_json.as_deref());
        }
        Some(Kind::Provider(pb::ProviderPart {
            format,
            r#type,
            json,
        })) => {
            field(b"provider");
            field(format.as_bytes());
            field(r#type.as_bytes());
            field(json.as_bytes());
        }
    }
}

/// A tool result's fields (see [`digest`]).
fn digest_result(field: &mut impl FnMut(&[u8]), r: &pb::ToolResultEnvelope) {
    use pb::tool_result_envelope::Content;
    let pb::ToolResultEnvelope {
        tool_name,
        tool_call_id,
        outcome,
        key_fields,
        durability,
        determinism,
        started_at,
        completed_at,
        content,
        wire,
    } = r;
    field(b"result");
    provider(field, wire.as_ref());
    field(tool_name.as_bytes());
    field(tool_call_id.as_bytes());
    field(&outcome.to_le_bytes());
    // A map's order on the wire means nothing.
    let mut keys: Vec<_> = key_fields.iter().collect();
    keys.sort_unstable();
    field(&(keys.len() as u64).to_le_bytes());
    for (k, v) in keys {
        field(k.as_bytes());
        field(v.as_bytes());
    }
    field(&durability.to_le_bytes());
    match determinism {
        None => field(b"no determinism"),
        Some(pb::DeterminismMetadata {
            content_hash,
            etag,
            mtime,
            version,
        }) => {
            field(b"determinism");
            optional(field, content_hash.as_deref());
            optional(field, etag.as_deref());
            match mtime {
                None => field(b"no mtime"),
                Some(t) => field(&t.to_bits().to_le_bytes()),
            }
            optional(field, version.as_deref());
        }
    }
    optional(field, started_at.as_deref());
    optional(field, completed_at.as_deref());
    match content {
        None => field(b"no content"),
        Some(Content::ContentText(t)) => {
            field(b"content text");
            field(t.as_bytes());
        }
        Some(Content::ContentJson(j)) => {
            field(b"content json");
            field(j.as_bytes());
        }
    }
}

/// An optional text: absent and empty differ.
/// A provider form, or its absence.
fn provider(field: &mut impl FnMut(&[u8]), p: Option<&pb::ProviderPart>) {
    match p {
        None => field(b"no wire"),
        Some(pb::ProviderPart {
            format,
            r#type,
            json,
        }) => {
            field(b"wire");
            field(format.as_bytes());
            field(r#type.as_bytes());
            field(json.as_bytes());
        }
    }
}

fn optional(field: &mut impl FnMut(&[u8]), s: Option<&str>) {
    match s {
        None => field(b"absent"),
        Some(s) => {
            field(b"present");
            field(s.as_bytes());
        }
    }
}
