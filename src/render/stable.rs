//! The stable part of a render: what the next render of the same thread
//! sends again byte for byte, kept so that render works only on what
//! follows it.
//!
//! Between compactions a turn appends messages below the per-turn position
//! (the latest user message, where recall and read-back content go), and
//! everything above it renders, encodes and counts as it did last turn.
//! The part is cut at a message before which every tool call is answered
//! and after which no result answers an earlier call, so those messages
//! render the same whatever follows ([`super::renderer::pairs_closed_within`]).
//! Only formats whose messages each encode to their own elements are kept
//! ([`crate::provider::Format::elements_of`]).

use std::sync::Arc;

use crate::model::{Pairing, Thread};

use super::prefix::PrefixTrace;
use super::renderer::{canonical_order, pairs_closed_within};
use super::request::{Origin, RenderedMessage};

/// What a render keeps for the next one (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct StablePart {
    /// A hash of everything but the thread and plan that shapes the body
    /// (format, model, system prompt, tools, policy, counter).
    pub key: u64,
    /// The plan rendered: its version and fingerprint.
    pub plan: (u64, String),
    /// The thread rendered; a render that extends it may use this part.
    pub thread: Arc<Thread>,
    /// Where the part ends in the thread: the next render renders
    /// `messages[cut..]`.
    pub cut: usize,
    /// The notes rendering the messages before `cut` made.
    pub notes: Vec<String>,
    /// Their stand-in text ([`stand_in_text`]).
    pub stand_in: String,
    /// Their tokens, as a request counts its messages.
    pub tokens: u32,
    /// The body, through the last kept element of its message list.
    pub body: String,
    /// Where in `body` the message list's elements start.
    pub array_at: usize,
    /// How many elements are kept.
    pub elements: usize,
    /// The body's trace units: the head, then each kept element.
    pub units: Vec<(u64, u32)>,
    /// The kept elements' tokens, as the body's count adds them.
    pub body_tokens: u32,
}

/// What a render found on its way that the next part is made of: the
/// messages it rendered up to the per-turn position, and its body.
#[derive(Debug)]
pub struct Rendered<'a> {
    /// The stand-in text of the rendered messages before the per-turn
    /// position ([`stand_in_text`]).
    pub stand_in: String,
    /// The source message of the first rendered message at that position.
    pub at_source: &'a str,
    /// The tokens of `before`.
    pub tokens: u32,
    /// How many body elements `before` (and, when nothing was kept, the
    /// system prompt) became.
    pub elements: usize,
    /// The body written (whole, or only what follows the kept part).
    pub json: &'a str,
    /// Its trace.
    pub trace: &'a PrefixTrace,
    /// Each element's byte span in `json`.
    pub spans: &'a [(usize, usize)],
    /// The tokens of the first `elements` elements, as the body's count
    /// adds them.
    pub body_tokens: u32,
}

impl StablePart {
    /// Memory it holds, for the cache that keeps it.
    pub fn weight(&self) -> u64 {
        (self.body.len() + self.stand_in.len() + 12 * self.units.len() + 256) as u64
            + self.notes.iter().map(|n| n.len() as u64).sum::<u64>()
    }

    /// The whole body: the kept part, then the elements (and the rest) of
    /// `json`, a body written from the same head with only what follows.
    /// `None` when that body's text before its elements is not the kept
    /// one's (something besides the messages changed).
    pub fn body_with(&self, json: &str, spans: &[(usize, usize)]) -> Option<String> {
        let (first, last) = (spans.first()?, spans.last()?);
        if json.get(..first.0)? != self.body.get(..self.array_at)? {
            return None;
        }
        let mut out = String::with_capacity(self.body.len() + json.len() - first.0 + 1);
        out.push_str(&self.body);
        if self.elements > 0 {
            out.push(',');
        }
        out.push_str(json.get(first.0..last.1)?);
        out.push_str(json.get(last.1..)?);
        Some(out)
    }

    /// The part the next render keeps: `base` (or nothing, when this render
    /// rendered the whole thread) and what this render added up to its
    /// per-turn position. `None` when no part can be cut there.
    #[allow(clippy::too_many_arguments)]
    pub fn next(
        base: Option<&StablePart>,
        key: u64,
        plan: (u64, String),
        thread: &Arc<Thread>,
        pairing: &Pairing,
        now: Rendered<'_>,
    ) -> Option<StablePart> {
        let from = base.map_or(0, |b| b.cut);
        let rest = thread.messages.get(from..)?;
        let cut = from + rest.iter().rposition(|m| m.id == now.at_source)?;
        if !pairs_closed_within(pairing, from..cut) {
            return None;
        }
        let k = now.elements;
        let spans = now.spans;
        let kept = spans.get(..k)?;
        // The units added: the head is the first only when nothing was kept.
        let units = now.trace.units.get(1..1 + k)?;
        let mut notes = base.map_or_else(Vec::new, |b| b.notes.clone());
        notes.extend(canonical_order(thread, pairing, from..cut).1);
        let mut stand_in = base.map_or_else(String::new, |b| b.stand_in.clone());
        stand_in.push_str(&now.stand_in);
        let (body, array_at, elements, mut all_units, body_tokens) = match base {
            Some(b) => {
                let mut body = b.body.clone();
                if let (Some(first), Some(last)) = (kept.first(), kept.last()) {
                    if b.elements > 0 {
                        body.push(',');
                    }
                    body.push_str(now.json.get(first.0..last.1)?);
                }
                (
                    body,
                    b.array_at,
                    b.elements + k,
                    b.units.clone(),
                    b.body_tokens + now.body_tokens,
                )
            }
            None => {
                let array_at = spans.first()?.0;
                let end = kept.last().map_or(array_at, |s| s.1);
                (
                    now.json.get(..end)?.to_string(),
                    array_at,
                    k,
                    vec![*now.trace.units.first()?],
                    now.body_tokens,
                )
            }
        };
        all_units.extend_from_slice(units);
        Some(StablePart {
            key,
            plan,
            thread: Arc::clone(thread),
            cut,
            notes,
            stand_in,
            tokens: base.map_or(0, |b| b.tokens) + now.tokens,
            body,
            array_at,
            elements,
            units: all_units,
            body_tokens,
        })
    }
}

/// The text of what stands in for evicted messages among `messages`
/// (summaries, stubs, pointers, excerpts, read-back content), each after a
/// newline: what recall reads as already shown.
pub fn stand_in_text(messages: &[RenderedMessage]) -> String {
    let mut out = String::new();
    for m in messages.iter().filter(|m| m.origin != Origin::Verbatim) {
        out.push('\n');
        out.push_str(&m.content.flat_text());
    }
    out
}
