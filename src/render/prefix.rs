//! How much of a rendered body a provider can serve from its prompt cache:
//! the leading part that is byte-for-byte what the previous render of the
//! same thread sent.
//!
//! A body is cut into units: first everything that precedes the messages in
//! a provider's cache order (model, tools, system prompt or instructions),
//! then each element of the message array (`messages`, or `input` for the
//! Responses API) as the exact bytes of the body. Each unit is kept as a
//! 64-bit hash and its tokens; two renders share a prefix for as many
//! leading units as have equal hashes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use serde::{Deserialize, Serialize};
use serde_json::ser::{CompactFormatter, Formatter};
use serde_json::value::RawValue;

use crate::tokens::PassThrough;

/// A render, unit by unit (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrefixTrace {
    /// Per unit, in order: a 64-bit hash of its bytes and its tokens
    /// (counted on the unit's JSON text).
    pub units: Vec<(u64, u32)>,
    /// The counter the tokens are in (empty: not said, as in traces kept
    /// before it was): a later render takes them only in the same counter.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub counted_by: String,
    /// The prefixes the provider's cache holds after this render, by its
    /// rules (see [`super::cache`]): (chain hash, tokens).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cached: Vec<(u64, u32)>,
    /// Tokens of this body the provider is expected to read from its
    /// cache; `None` without a previous render. Kept so that the provider's
    /// report on this body, sent with the next call, is compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cache_read: Option<u32>,
    /// The body's own count (0: not said, as in traces kept before it was).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub body_tokens: u32,
    /// The calibration scale the count was made at (1: the counter as it
    /// is), so a report on this body is learned from as a raw estimate.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count_scale: f64,
}

impl Default for PrefixTrace {
    fn default() -> Self {
        PrefixTrace {
            units: Vec::new(),
            counted_by: String::new(),
            cached: Vec::new(),
            expected_cache_read: None,
            body_tokens: 0,
            count_scale: 1.0,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

/// Two traces are the same render when their units, counter and cache
/// are: what a render of the same body expected to be read, and counted,
/// does not make it another (a session head is not written again for it).
impl PartialEq for PrefixTrace {
    fn eq(&self, other: &Self) -> bool {
        self.units == other.units
            && self.counted_by == other.counted_by
            && self.cached == other.cached
    }
}

impl Eq for PrefixTrace {}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    input: Option<Vec<&'a RawValue>>,
}

/// A unit's JSON without the `cache_control` markers in it. Providers
/// leave the markers out of what they cache, so a mark that moves on to a
/// later message leaves the one it was on the same unit (hashed and
/// counted alike). A marker is a key with an object of plain values
/// (`{"type":"ephemeral"}`, `{"ttl":"1h","type":"ephemeral"}`); the text
/// of a JSON string cannot hold one, as its quotes would be escaped.
fn unmarked(json: &str) -> Cow<'_, str> {
    const KEY: &str = "\"cache_control\":{";
    let finder = memchr::memmem::Finder::new(KEY);
    if finder.find(json.as_bytes()).is_none() {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = finder.find(rest.as_bytes()) {
        let Some(close) = rest[at..].find('}') else {
            break;
        };
        let (before, mut after) = (&rest[..at], &rest[at + close + 1..]);
        // One comma goes with it: the one after, else the one before.
        match after.strip_prefix(',') {
            Some(a) => after = a,
            None => {
                out.push_str(before.strip_suffix(',').unwrap_or(before));
                rest = after;
                continue;
            }
        }
        out.push_str(before);
        rest = after;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// xxh3: fast over a whole body every turn, and stable across releases and
/// replicas (traces are persisted in session heads).
fn hash64(parts: &[&str]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.digest()
}

impl PrefixTrace {
    /// The trace of a provider body (JSON); `None` when it is not one.
    /// `count` gives the tokens of a unit's text.
    pub fn of_body(json: &str, count: impl Fn(&str) -> u32 + Sync) -> Option<PrefixTrace> {
        let body: Body<'_> = serde_json::from_str(json).ok()?;
        let messages = body.messages.or(body.input)?;
        let head = [body.model, body.tools, body.system, body.instructions]
            .map(|v| v.map_or("", RawValue::get));
        Some(Self::of_units(
            head,
            messages.iter().map(|m| m.get()),
            count,
            None,
        ))
    }

    /// The trace of a body whose head parts (model, tools, system,
    /// instructions; empty when absent) and message elements are given.
    /// A unit in `known` (the previous render's trace, in the same
    /// counter) takes its tokens from there: most of a turn's body was sent
    /// last turn, and looking each unit up in the ledger hashed its text a
    /// second time.
    fn of_units<'a>(
        head: [&str; 4],
        messages: impl ExactSizeIterator<Item = &'a str>,
        count: impl Fn(&str) -> u32 + Sync,
        known: Option<&PrefixTrace>,
    ) -> PrefixTrace {
        let known = Known::of(known.map_or(&[][..], |k| &k.units), messages.len() + 1);
        let mut units = Vec::with_capacity(messages.len() + 1);
        let head = head.map(unmarked);
        let h = hash64(&head.each_ref().map(|t| &**t));
        let tokens = known.get(h);
        units.push((
            h,
            tokens.unwrap_or_else(|| head.iter().map(|t| count(t)).sum()),
        ));
        // Each unit with its count from the last trace, looked up once.
        let messages: Vec<(u64, Cow<'_, str>, Option<u32>)> = messages
            .map(|m| {
                let m = unmarked(m);
                let h = hash64(&[&m]);
                (h, m, known.get(h))
            })
            .collect();
        // After a compaction most units are new text: they are counted on
        // every core (only what is left to count weighs, so a turn that
        // appended a message stays on this thread).
        let counted = crate::par::map(
            &messages,
            |(_, m, tokens)| if tokens.is_some() { 0 } else { m.len() },
            |(h, m, tokens)| (*h, tokens.unwrap_or_else(|| count(m))),
        );
        units.extend(counted);
        PrefixTrace {
            units,
            ..PrefixTrace::default()
        }
    }

    /// Tokens of the leading units `self` shares with `previous`, and how
    /// many units that is.
    pub fn unchanged_since(&self, previous: &PrefixTrace) -> (u32, usize) {
        let mut tokens = 0u32;
        let mut n = 0;
        for (a, b) in self.units.iter().zip(&previous.units) {
            if a.0 != b.0 {
                break;
            }
            tokens = tokens.saturating_add(a.1);
            n += 1;
        }
        (tokens, n)
    }
}

/// Serializes a provider body to compact JSON and traces it in the same
/// pass: the text `serde_json::to_string` writes and the trace
/// [`PrefixTrace::of_body`] finds in it, without parsing the body again
/// (a second pass over every body a turn sends). Units of `known` (the
/// previous render's trace) keep the tokens it gives them.
pub fn to_json_traced(
    body: &serde_json::Value,
    count: impl Fn(&str) -> u32 + Sync,
    known: Option<&PrefixTrace>,
) -> serde_json::Result<(String, Option<PrefixTrace>)> {
    let (json, traced) = to_json_with_elements(body, count, known)?;
    Ok((json, traced.map(|(trace, _)| trace)))
}

/// Byte spans (start, end) of a body's message elements.
pub type ElementSpans = Vec<(usize, usize)>;

/// [`to_json_traced`], with the byte span of each element of the body's
/// message list beside the trace.
pub fn to_json_with_elements(
    body: &serde_json::Value,
    count: impl Fn(&str) -> u32 + Sync,
    known: Option<&PrefixTrace>,
) -> serde_json::Result<(String, Option<(PrefixTrace, ElementSpans)>)> {
    let at = std::rc::Rc::new(std::cell::Cell::new(0));
    let writer = Tracked {
        bytes: Vec::with_capacity(128),
        at: std::rc::Rc::clone(&at),
    };
    let mut spans = Spans::new(at);
    let mut ser = serde_json::Serializer::with_formatter(writer, Recorder(&mut spans));
    serde::Serialize::serialize(body, &mut ser)?;
    let bytes = ser.into_inner().bytes;
    // serde_json writes valid UTF-8 (its strings come from `str`).
    let json = String::from_utf8(bytes).map_err(serde::ser::Error::custom)?;
    let messages = spans.messages.or(spans.input);
    let trace = messages.filter(|_| !spans.not_a_body).map(|elements| {
        let text = |(start, end): (usize, usize)| json.get(start..end).unwrap_or_default();
        let head = spans.head.map(|h| h.map_or("", text));
        let trace = PrefixTrace::of_units(head, elements.iter().copied().map(text), count, known);
        (trace, elements)
    });
    Ok((json, trace))
}

/// The last trace's units, to look new units up in.
enum Known<'a> {
    /// A turn that wrote a few units (a kept part's tail) looks each up in
    /// the last trace's thousands: building a table of all of them cost more
    /// than scanning them.
    Scan(&'a [(u64, u32)]),
    Table(HashMap<u64, u32, BuildHasherDefault<PassThrough>>),
}

/// Units looked up by scanning the last trace, at most.
const SCANNED_LOOKUPS: usize = 16;

impl<'a> Known<'a> {
    fn of(units: &'a [(u64, u32)], lookups: usize) -> Known<'a> {
        if lookups <= SCANNED_LOOKUPS {
            Known::Scan(units)
        } else {
            Known::Table(units.iter().copied().collect())
        }
    }

    /// The tokens a unit of this hash had. Equal hashes are the same text,
    /// so any of them gives the same count.
    fn get(&self, hash: u64) -> Option<u32> {
        match self {
            // The units a turn sends again were most likely sent last.
            Known::Scan(units) => units.iter().rev().find(|u| u.0 == hash).map(|u| u.1),
            Known::Table(t) => t.get(&hash).copied(),
        }
    }
}

/// A byte sink that publishes how much it holds, so the formatter can note
/// where each unit starts and ends.
struct Tracked {
    bytes: Vec<u8>,
    at: std::rc::Rc<std::cell::Cell<usize>>,
}

impl std::io::Write for Tracked {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        self.at.set(self.bytes.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compact JSON, noting the byte span of each top-level value the trace
/// reads and of each element of a top-level `messages` or `input` array.
struct Spans {
    at: std::rc::Rc<std::cell::Cell<usize>>,
    /// Objects and arrays open around the writer: the body is depth 1.
    depth: usize,
    /// The top-level key being written, and whether it is still being read.
    key: String,
    in_key: bool,
    value_start: usize,
    element_start: usize,
    /// Model, tools, system, instructions.
    head: [Option<(usize, usize)>; 4],
    messages: Option<Vec<(usize, usize)>>,
    input: Option<Vec<(usize, usize)>>,
    /// What the top-level value being written is: `null` reads as absent,
    /// and a message list that is not an array makes the body no body.
    null_value: bool,
    not_a_body: bool,
}

impl Spans {
    fn new(at: std::rc::Rc<std::cell::Cell<usize>>) -> Self {
        Spans {
            at,
            depth: 0,
            key: String::new(),
            in_key: false,
            value_start: 0,
            element_start: 0,
            head: [None; 4],
            messages: None,
            input: None,
            null_value: false,
            not_a_body: false,
        }
    }

    /// The element list the current top-level value fills, when it is one.
    fn elements(&mut self) -> Option<&mut Vec<(usize, usize)>> {
        match self.key.as_str() {
            "messages" => self.messages.as_mut(),
            "input" => self.input.as_mut(),
            _ => None,
        }
    }
}

/// The formatter: [`Spans`] borrowed, so they can be read once written.
struct Recorder<'a>(&'a mut Spans);

impl std::ops::Deref for Recorder<'_> {
    type Target = Spans;
    fn deref(&self) -> &Spans {
        self.0
    }
}

impl std::ops::DerefMut for Recorder<'_> {
    fn deref_mut(&mut self) -> &mut Spans {
        self.0
    }
}

impl Formatter for Recorder<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        if self.depth == 2 {
            match self.key.as_str() {
                "messages" => self.messages = Some(Vec::new()),
                "input" => self.input = Some(Vec::new()),
                _ => {}
            }
        }
        CompactFormatter.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        CompactFormatter.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        CompactFormatter.begin_array_value(w, first)?;
        if self.depth == 2 {
            self.element_start = self.at.get();
        }
        Ok(())
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        CompactFormatter.end_array_value(w)?;
        if self.depth == 2 {
            let span = (self.element_start, self.at.get());
            if let Some(elements) = self.elements() {
                elements.push(span);
            }
        }
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        CompactFormatter.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        CompactFormatter.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if self.depth == 1 {
            self.key.clear();
            self.in_key = true;
        }
        CompactFormatter.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.depth == 1 {
            self.in_key = false;
        }
        CompactFormatter.end_object_key(w)
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if self.in_key {
            self.key.push_str(fragment);
        }
        CompactFormatter.write_string_fragment(w, fragment)
    }
    fn write_char_escape<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> std::io::Result<()> {
        if self.in_key {
            // No key the trace reads needs escaping.
            self.key.push('\u{fffd}');
        }
        CompactFormatter.write_char_escape(w, escape)
    }
    fn write_null<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.depth == 1 {
            self.null_value = true;
        }
        CompactFormatter.write_null(w)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        CompactFormatter.begin_object_value(w)?;
        if self.depth == 1 {
            self.value_start = self.at.get();
            self.null_value = false;
        }
        Ok(())
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        CompactFormatter.end_object_value(w)?;
        if self.depth == 1 {
            let span = (!self.null_value).then_some((self.value_start, self.at.get()));
            let listed = match self.key.as_str() {
                "messages" => Some(self.messages.is_some()),
                "input" => Some(self.input.is_some()),
                _ => None,
            };
            self.not_a_body |= listed == Some(false) && !self.null_value;
            match self.key.as_str() {
                "model" => self.head[0] = span,
                "tools" => self.head[1] = span,
                "system" => self.head[2] = span,
                "instructions" => self.head[3] = span,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn words(t: &str) -> u32 {
        t.split_whitespace().count() as u32
    }

    #[test]
    fn an_appended_message_leaves_the_prefix_unchanged() {
        let a = r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"one two"}]}"#;
        let b = r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"one two"},{"role":"assistant","content":"three"}]}"#;
        let (ta, tb) = (
            PrefixTrace::of_body(a, words).unwrap(),
            PrefixTrace::of_body(b, words).unwrap(),
        );
        let (tokens, units) = tb.unchanged_since(&ta);
        assert_eq!(units, 3);
        assert_eq!(tokens, ta.units.iter().map(|u| u.1).sum::<u32>());
    }

    #[test]
    fn a_changed_head_or_message_ends_the_prefix() {
        let a = r#"{"model":"m","input":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}"#;
        let other_model = r#"{"model":"n","input":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}"#;
        let second_changed = r#"{"model":"m","input":[{"role":"user","content":"x"},{"role":"user","content":"z"}]}"#;
        let t = |j| PrefixTrace::of_body(j, words).unwrap();
        assert_eq!(t(other_model).unchanged_since(&t(a)), (0, 0));
        assert_eq!(t(second_changed).unchanged_since(&t(a)).1, 2);
        // Whitespace inside a unit is a byte change too.
        let spaced = r#"{"model":"m","input":[{"role":"user","content":"x" },{"role":"user","content":"y"}]}"#;
        assert_eq!(t(spaced).unchanged_since(&t(a)).1, 1);
    }

    /// Object keys: the ones the trace reads, often, and any other.
    fn key() -> impl Strategy<Value = String> + Clone {
        prop_oneof![
            Just("model".to_string()),
            Just("tools".to_string()),
            Just("system".to_string()),
            Just("instructions".to_string()),
            Just("messages".to_string()),
            Just("input".to_string()),
            "\\PC{0,6}",
        ]
    }

    /// Any JSON value, with the keys the trace reads likely at every level.
    /// (Bodies are objects: `of_body` would read an array as a body.)
    fn json() -> impl Strategy<Value = serde_json::Value> {
        let key = key();
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "\\PC{0,12}|[\"\\\\\n\t\u{0}-\u{1f}]{0,4}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(crate::testing::cases(256)))]
        /// The body written with its trace is `to_string`'s, and the trace
        /// is the one read back from it.
        #[test]
        fn tracing_while_writing_matches_reading_back(
            v in proptest::collection::vec((key(), json()), 0..8)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect()))
        ) {
            let (text, trace) = to_json_traced(&v, words, None).unwrap();
            proptest::prop_assert_eq!(&text, &serde_json::to_string(&v).unwrap());
            proptest::prop_assert_eq!(&trace, &PrefixTrace::of_body(&text, words));
            // Counts taken from a previous trace are the ones counting gives.
            let (again, retraced) = to_json_traced(&v, words, trace.as_ref()).unwrap();
            proptest::prop_assert_eq!(&again, &text);
            proptest::prop_assert_eq!(retraced, trace);
        }
    }

    #[test]
    fn bodies_are_traced_as_they_are_written() {
        let bodies = [
            r#"{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}],"messages":[{"role":"system","content":"a \"quoted\" \u0007 bell"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"q\":[1,2]}"}}]}]}"#,
            r#"{"model":"m","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"max_tokens":9,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
            r#"{"model":"m","instructions":"be brief","input":[{"type":"message","role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}"#,
            r#"{"model":"m","messages":[],"input":[{"a":1}]}"#,
            r#"{"model":"m"}"#,
        ];
        for b in bodies {
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            let (text, trace) = to_json_traced(&v, words, None).unwrap();
            assert_eq!(text, serde_json::to_string(&v).unwrap());
            assert_eq!(trace, PrefixTrace::of_body(&text, words), "{b}");
        }
    }

    /// A unit sent last time keeps the tokens the previous trace gave it,
    /// wherever it now stands; only new units are counted.
    #[test]
    fn units_sent_before_are_not_counted_again() {
        let before: serde_json::Value = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"a b"},{"role":"assistant","content":"c"}]}"#,
        )
        .unwrap();
        let now: serde_json::Value = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"recall d e"},{"role":"user","content":"a b"},{"role":"assistant","content":"c"},{"role":"user","content":"f g h"}]}"#,
        )
        .unwrap();
        let (_, previous) = to_json_traced(&before, |_| 100, None).unwrap();
        let counted = std::sync::Mutex::new(Vec::new());
        let (_, trace) = to_json_traced(
            &now,
            |t| {
                counted.lock().unwrap().push(t.to_string());
                words(t)
            },
            previous.as_ref(),
        )
        .unwrap();
        let tokens: Vec<u32> = trace.unwrap().units.iter().map(|u| u.1).collect();
        // The head is four parts, each counted 100 before.
        assert_eq!(tokens, [400, 3, 100, 100, 3]);
        let counted = counted.into_inner().unwrap();
        assert_eq!(counted.len(), 2, "{counted:?}");
    }

    /// The same holds for a body of many units, whose lookups go through a
    /// table of the previous trace rather than a scan of it.
    #[test]
    fn many_units_sent_before_are_not_counted_again() {
        let body = |n: usize| {
            let messages: Vec<serde_json::Value> = (0..n)
                .map(|i| serde_json::json!({"role": "user", "content": format!("m {i}")}))
                .collect();
            serde_json::json!({"model": "m", "messages": messages})
        };
        const { assert!(SCANNED_LOOKUPS < 40) };
        let (_, previous) = to_json_traced(&body(40), |_| 7, None).unwrap();
        let counted = std::sync::Mutex::new(0);
        let (_, trace) = to_json_traced(
            &body(41),
            |t| {
                *counted.lock().unwrap() += 1;
                words(t)
            },
            previous.as_ref(),
        )
        .unwrap();
        let tokens: Vec<u32> = trace.unwrap().units.iter().map(|u| u.1).collect();
        // The head is four parts, each counted 7 before.
        assert_eq!(tokens[0], 28);
        assert_eq!(tokens[1..41], [7; 40]);
        assert_eq!(tokens[41], 2);
        assert_eq!(counted.into_inner().unwrap(), 1);
    }

    #[test]
    fn a_body_counted_on_every_core_keeps_its_units_in_order() {
        // Over 64 KB of new units: counted in parallel parts, joined in order.
        let messages: Vec<serde_json::Value> = (0..300)
            .map(|i| {
                let words = "word ".repeat(i % 7 + 1);
                serde_json::json!({"role": "user", "content": format!("{i} {}", words.repeat(60))})
            })
            .collect();
        let body = serde_json::json!({"model": "m", "messages": messages});
        let (text, trace) = to_json_traced(&body, words, None).unwrap();
        assert!(text.len() > crate::par::PARALLEL_FROM_BYTES);
        let tokens: Vec<u32> = trace.unwrap().units.iter().map(|u| u.1).collect();
        let expected: Vec<u32> = messages
            .iter()
            .map(|m| words(&serde_json::to_string(m).unwrap()))
            .collect();
        assert_eq!(tokens[1..], expected[..]);
    }

    #[test]
    fn what_is_not_a_body_has_no_trace() {
        assert!(PrefixTrace::of_body("[1,2]", words).is_none());
        assert!(PrefixTrace::of_body(r#"{"model":"m"}"#, words).is_none());
    }

    #[test]
    fn cache_markers_are_not_part_of_a_unit() {
        for (marked, plain) in [
            (
                r#"{"cache_control":{"type":"ephemeral"},"text":"a","type":"text"}"#,
                r#"{"text":"a","type":"text"}"#,
            ),
            (
                r#"{"a":1,"cache_control":{"ttl":"1h","type":"ephemeral"}}"#,
                r#"{"a":1}"#,
            ),
            (
                r#"{"text":"say \"cache_control\":{} here"}"#,
                r#"{"text":"say \"cache_control\":{} here"}"#,
            ),
        ] {
            assert_eq!(unmarked(marked), plain);
        }
        // A mark that moves on leaves the message it was on the same unit.
        let body = |marked: usize| {
            let messages: Vec<serde_json::Value> = (0..3)
                .map(|i| {
                    let mut block = serde_json::json!({"type": "text", "text": format!("m{i}")});
                    if i == marked {
                        block["cache_control"] = serde_json::json!({"type": "ephemeral"});
                    }
                    serde_json::json!({"role": "user", "content": [block]})
                })
                .collect();
            serde_json::json!({"model": "m", "messages": messages})
        };
        let (_, a) = to_json_traced(&body(1), words, None).unwrap();
        let (_, b) = to_json_traced(&body(2), words, None).unwrap();
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.units, b.units);
    }
}
