//! The stable part of a render: what the next render of the same thread
//! sends again byte for byte, kept so that render works only on what
//! follows it.
//!
//! Between compactions a turn appends messages, and the per-turn content
//! (recall, read-back content, the caller's injections) goes just before
//! the latest user message. Everything before that position renders,
//! encodes and counts as it did last turn; so does the tool loop after that
//! user message, when the turn added no user message. A part keeps both:
//! the messages before the cut (the latest user message) and those after
//! it up to `end`, each as body elements with what the render computed on
//! them. The next render renders the cut message and what follows `end`,
//! and splices. Both ranges are closed: every call in them is answered in
//! them and every result in them answers a call in them
//! ([`super::renderer::pairs_closed_within`]), so they render the same
//! whatever follows. Only formats whose messages each encode to their own
//! elements are kept ([`crate::provider::Format::elements_of`]).

use std::ops::Range;
use std::sync::Arc;

use crate::model::{Pairing, Thread};

use super::renderer::{canonical_order, pairs_closed_within};
use super::request::{Origin, RenderedMessage};

/// Body elements' JSON joined by commas, held as shared pieces: a part's
/// `before` grows by a turn's elements whenever the cut moves, and copying
/// it whole on each such turn was a twentieth of an append turn.
#[derive(Debug, Clone, Default)]
pub struct Elements {
    /// Non-empty runs of elements, each joined by commas.
    pieces: Vec<Arc<str>>,
    /// Bytes of the pieces joined by commas.
    len: usize,
}

/// Pieces an [`Elements`] holds before they are joined into one: joining
/// every so many appends keeps both the copy per append and the pieces
/// written per body small.
const MAX_PIECES: usize = 48;

impl Elements {
    /// Bytes, joined.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `other`'s elements after these.
    fn extend(&mut self, other: &Elements) {
        if other.is_empty() {
            return;
        }
        self.len += other.len + usize::from(!self.is_empty());
        self.pieces.extend(other.pieces.iter().cloned());
        if self.pieces.len() > MAX_PIECES {
            let mut joined = String::with_capacity(self.len);
            self.write_to(&mut joined);
            self.pieces = vec![Arc::from(joined)];
        }
    }

    /// Appends the elements to `out` (with a comma first when `out` holds
    /// elements).
    fn write_to(&self, out: &mut String) {
        for piece in &self.pieces {
            push_json(out, piece);
        }
    }
}

impl From<String> for Elements {
    fn from(json: String) -> Elements {
        if json.is_empty() {
            return Elements::default();
        }
        Elements {
            len: json.len(),
            pieces: vec![Arc::from(json)],
        }
    }
}

impl Elements {
    /// The joined text, piece by piece (commas included), without joining.
    fn chunks(&self) -> impl Iterator<Item = &str> {
        self.pieces
            .iter()
            .enumerate()
            .flat_map(|(i, p)| [if i == 0 { "" } else { "," }, &**p])
    }
}

impl std::fmt::Display for Elements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.chunks().try_for_each(|c| f.write_str(c))
    }
}

/// The same elements, however they are split into pieces.
impl PartialEq for Elements {
    fn eq(&self, other: &Elements) -> bool {
        self.len == other.len
            && self
                .chunks()
                .flat_map(str::bytes)
                .eq(other.chunks().flat_map(str::bytes))
    }
}

impl Eq for Elements {}

/// Rendered messages kept as body elements, with what the render computed
/// on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segment {
    /// The elements' JSON.
    pub json: Elements,
    /// How many elements.
    pub elements: usize,
    /// Each element's trace unit (hash, tokens).
    pub units: Vec<(u64, u32)>,
    /// The messages' tokens, as a request counts its messages.
    pub tokens: u32,
    /// The elements' tokens, as the body's count adds them.
    pub body_tokens: u32,
    /// The messages' stand-in text ([`stand_in_text`]).
    pub stand_in: String,
    /// The notes rendering the messages made (tool results moved).
    pub notes: Vec<String>,
}

impl Segment {
    /// `other` after `self`.
    fn extend(&mut self, other: &Segment) {
        self.json.extend(&other.json);
        self.elements += other.elements;
        self.units.extend_from_slice(&other.units);
        self.tokens += other.tokens;
        self.body_tokens += other.body_tokens;
        self.stand_in.push_str(&other.stand_in);
        self.notes.extend(other.notes.iter().cloned());
    }
}

/// Appends `json` (elements joined by commas) to `out`, with a comma
/// between when both hold elements.
fn push_json(out: &mut String, json: &str) {
    if json.is_empty() {
        return;
    }
    if !out.is_empty() && !out.ends_with('[') {
        out.push(',');
    }
    out.push_str(json);
}

/// What a render keeps for the next one (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct StablePart {
    /// A hash of everything but the thread and plan that shapes the body
    /// (format, model, system prompt, tools, policy, counter).
    pub key: u64,
    /// The plan rendered: its version and fingerprint.
    pub plan: (u64, String),
    /// The thread rendered (as rendered: after settling).
    pub thread: Arc<Thread>,
    /// The user message the per-turn content went before.
    pub cut: usize,
    /// The body before its first element (`{…"messages":[`).
    pub head: String,
    /// The trace unit of the body's head.
    pub head_unit: (u64, u32),
    /// The messages before the cut (and the system prompt, when the body
    /// carries it as an element); shared by the parts of a tool loop's
    /// turns, which all keep it.
    pub before: Arc<Segment>,
    /// The messages after the cut message up to `end`.
    pub after: Segment,
    /// Where `after` ends in the thread.
    pub end: usize,
    /// About the memory `thread` holds. A thread sent in full lives only in
    /// its part; a session's is shared with the session's copy, and so
    /// counted twice, which keeps the cache's bound a bound.
    pub thread_bytes: u64,
}

/// A rendered message as the part needs it once the request is encoded.
#[derive(Debug, Clone)]
pub struct Written {
    /// The thread message it renders.
    pub source_id: String,
    /// Whether it renders that message verbatim.
    pub verbatim: bool,
    /// How many body elements it became.
    pub elements: usize,
    /// Its tokens, as a request counts its messages.
    pub tokens: u32,
    /// Its stand-in text, when it stands in for evicted content.
    pub stand_in: Option<String>,
}

impl Written {
    /// `m` as written: `elements` body elements.
    pub fn of(m: &RenderedMessage, elements: usize, tokens: u32) -> Written {
        Written {
            source_id: m.source_id.clone(),
            verbatim: m.origin == Origin::Verbatim,
            elements,
            tokens,
            stand_in: (m.origin != Origin::Verbatim)
                .then(|| stand_in_text(std::slice::from_ref(m))),
        }
    }
}

/// One render's messages and body, for the part the next render keeps.
pub struct Rendered<'a> {
    /// The rendered messages, per-turn content included.
    pub messages: &'a [Written],
    /// Where the per-turn content went (before it was placed).
    pub at: usize,
    /// How many messages were placed there.
    pub placed: usize,
    /// Elements written before the first rendered message's (the system
    /// prompt of a body written whole).
    pub lead: usize,
    /// The body written (whole, or what follows the kept part).
    pub json: &'a str,
    /// Each element's byte span in `json`.
    pub spans: &'a [(usize, usize)],
    /// The body's trace units: the head, then each element.
    pub units: &'a [(u64, u32)],
    /// Tokens of a range of `json`'s elements, as the body's count adds
    /// them.
    pub body_tokens: &'a dyn Fn(Range<usize>) -> u32,
}

impl Rendered<'_> {
    /// Elements the rendered messages before `i` became, after the lead.
    fn elements_before(&self, i: usize) -> usize {
        self.messages[..i.min(self.messages.len())]
            .iter()
            .map(|w| w.elements)
            .sum()
    }

    /// The segment of rendered messages `range`, which render thread
    /// messages `thread_range` (for the notes); with the lead elements when
    /// `lead`.
    fn segment(
        &self,
        range: Range<usize>,
        (thread, pairing, thread_range): (&Thread, &Pairing, Range<usize>),
        lead: bool,
    ) -> Option<Segment> {
        let messages = self.messages.get(range.clone())?;
        let first = self.elements_before(range.start) + if lead { 0 } else { self.lead };
        let last = self.elements_before(range.end) + self.lead;
        let spans = self.spans.get(first..last)?;
        let json = match (spans.first(), spans.last()) {
            (Some(a), Some(b)) => self.json.get(a.0..b.1)?.to_string(),
            _ => String::new(),
        }
        .into();
        let notes = if thread_range.is_empty() {
            Vec::new()
        } else {
            canonical_order(thread, pairing, thread_range).1
        };
        let mut stand_in = String::new();
        for w in messages {
            if let Some(s) = &w.stand_in {
                stand_in.push_str(s);
            }
        }
        Some(Segment {
            json,
            elements: last - first,
            units: self.units.get(1 + first..1 + last)?.to_vec(),
            tokens: messages.iter().map(|w| w.tokens).sum(),
            body_tokens: (self.body_tokens)(first..last),
            stand_in,
            notes,
        })
    }
}

impl StablePart {
    /// Memory it holds, for the cache that keeps it.
    pub fn weight(&self) -> u64 {
        let segment = |s: &Segment| {
            s.json.len()
                + s.stand_in.len()
                + 12 * s.units.len()
                + s.notes.iter().map(String::len).sum::<usize>()
        };
        (self.head.len() + segment(&self.before) + segment(&self.after) + 256) as u64
            + self.thread_bytes
    }

    /// The whole body: the part's head and messages before the cut, then
    /// the elements of `json` (a body written from the same head with only
    /// the messages from the cut on, per-turn content included) with
    /// `after` spliced in after the first `through_cut` of them, then the
    /// rest of `json`. `None` when `json`'s text before its elements is not
    /// the part's head (something besides the messages changed).
    pub fn body_with(
        &self,
        json: &str,
        spans: &[(usize, usize)],
        through_cut: usize,
    ) -> Option<String> {
        let (first, last) = (spans.first()?, spans.last()?);
        if json.get(..first.0)? != self.head {
            return None;
        }
        let mut out = String::with_capacity(
            self.head.len() + self.before.json.len() + self.after.json.len() + json.len(),
        );
        out.push_str(&self.head);
        self.before.json.write_to(&mut out);
        let split = spans.get(through_cut.checked_sub(1)?)?.1;
        push_json(&mut out, json.get(first.0..split)?);
        self.after.json.write_to(&mut out);
        if let Some(next) = spans.get(through_cut) {
            push_json(&mut out, json.get(next.0..last.1)?);
        }
        out.push_str(json.get(last.1..)?);
        Some(out)
    }

    /// The trace units of [`StablePart::body_with`]'s body, from `units`
    /// (the head, then each element of `json`).
    pub fn units_with(&self, units: &[(u64, u32)], through_cut: usize) -> Vec<(u64, u32)> {
        let written = units.get(1..).unwrap_or_default();
        let (to_cut, rest) = written.split_at(through_cut.min(written.len()));
        let mut out = Vec::with_capacity(
            1 + self.before.units.len() + self.after.units.len() + written.len(),
        );
        out.push(self.head_unit);
        out.extend_from_slice(&self.before.units);
        out.extend_from_slice(to_cut);
        out.extend_from_slice(&self.after.units);
        out.extend_from_slice(rest);
        out
    }

    /// The part the next render keeps: what `base` kept (or nothing, when
    /// this render rendered the whole thread) and what this render added
    /// (`now`, whose first rendered message is `base`'s cut message).
    /// `None` when no part can be cut.
    pub fn next(
        base: Option<&StablePart>,
        (key, plan): (u64, (u64, String)),
        (thread, pairing): (&Arc<Thread>, &Pairing),
        now: Rendered<'_>,
    ) -> Option<StablePart> {
        let n = thread.messages.len();
        // The cut message: the first after the per-turn content.
        let cut_message = now.messages.get(now.at + now.placed)?;
        let from = base.map_or(0, |b| b.cut);
        if !cut_message.verbatim {
            return None;
        }
        let cut = from
            + thread
                .messages
                .get(from..)?
                .iter()
                .rposition(|m| m.id == cut_message.source_id)?;
        let after_cut = now.at + now.placed + 1..now.messages.len();
        // The loop after the cut message, kept when it is closed.
        let loop_closed = |start: usize| pairs_closed_within(pairing, start..n);
        let (before, after, end) = match base {
            // The turn added no user message: the cut and what precedes it
            // stay; the loop grows by what was rendered after the cut.
            Some(b) if cut == b.cut => {
                let mut after = b.after.clone();
                if loop_closed(b.end) {
                    after.extend(&now.segment(after_cut, (thread, pairing, b.end..n), false)?);
                    (Arc::clone(&b.before), after, n)
                } else {
                    (Arc::clone(&b.before), after, b.end)
                }
            }
            _ => {
                if !pairs_closed_within(pairing, from..cut) {
                    return None;
                }
                let mut before = base.map_or_else(Segment::default, |b| (*b.before).clone());
                match base {
                    // The old cut message, the old loop, and what the turn
                    // rendered up to the new cut.
                    Some(b) => {
                        let old_cut =
                            now.segment(0..1, (thread, pairing, b.cut..b.cut + 1), false)?;
                        before.extend(&old_cut);
                        before.extend(&b.after);
                        before.extend(&now.segment(
                            1..now.at,
                            (thread, pairing, b.end..cut),
                            false,
                        )?);
                    }
                    None => {
                        before.extend(&now.segment(0..now.at, (thread, pairing, 0..cut), true)?)
                    }
                }
                let (after, end) = if loop_closed(cut + 1) {
                    let after = now.segment(after_cut, (thread, pairing, cut + 1..n), false)?;
                    (after, n)
                } else {
                    (Segment::default(), cut + 1)
                };
                (Arc::new(before), after, end)
            }
        };
        let head_end = now.spans.first()?.0;
        // What the base weighed, plus the messages appended since; the open
        // loop it held may have differed, which only makes this "about".
        let thread_bytes = match base {
            Some(b) if b.thread.messages.len() <= n => {
                b.thread_bytes
                    + crate::model::memory_weight(&thread.messages[b.thread.messages.len()..])
            }
            _ => crate::model::memory_weight(&thread.messages),
        };
        Some(StablePart {
            key,
            plan,
            thread: Arc::clone(thread),
            cut,
            head: base.map_or_else(
                || now.json.get(..head_end).map(str::to_string),
                |b| Some(b.head.clone()),
            )?,
            head_unit: base.map_or_else(|| now.units.first().copied(), |b| Some(b.head_unit))?,
            before,
            after,
            end,
            thread_bytes,
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

#[cfg(test)]
mod tests {
    use super::{push_json, Elements, MAX_PIECES};

    /// Elements extended piece by piece write what the same elements joined
    /// as one string write, through and past the point where pieces are
    /// joined, and compare equal to it however they are split.
    #[test]
    fn elements_in_pieces_write_as_joined() {
        let mut pieces = Elements::default();
        let mut joined = String::new();
        for i in 0..3 * MAX_PIECES {
            let run: String = match i % 3 {
                0 => format!("{{\"n\":{i}}}"),
                1 => format!("{{\"a\":{i}}},{{\"b\":\"é{i}\"}}"),
                _ => String::new(),
            };
            push_json(&mut joined, &run);
            pieces.extend(&Elements::from(run));
            assert!(pieces.pieces.len() <= MAX_PIECES);
            assert_eq!(pieces.len(), joined.len(), "after {i}");
            assert_eq!(pieces.to_string(), joined, "after {i}");
            assert_eq!(pieces, Elements::from(joined.clone()));
            let mut body = String::from("{\"messages\":[");
            pieces.write_to(&mut body);
            assert_eq!(body, format!("{{\"messages\":[{joined}"));
        }
        assert_ne!(pieces, Elements::from(format!("{joined},{{}}")));
        // Extended by elements in many pieces (a part's loop joining its
        // `before`), past the point where they are joined into one.
        let mut many = Elements::default();
        for i in 0..MAX_PIECES - 1 {
            many.extend(&Elements::from(format!("{{\"k\":{i}}}")));
        }
        let mut twice = pieces.clone();
        twice.extend(&many);
        let expected = format!("{joined},{many}");
        assert_eq!(twice.to_string(), expected);
        assert_eq!(twice.len(), expected.len());
        assert_eq!(twice, Elements::from(expected));
        assert!(twice.pieces.len() <= MAX_PIECES);
        assert!(Elements::from(String::new()).is_empty());
    }
}
