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

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A render, unit by unit (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixTrace {
    /// Per unit, in order: a 64-bit hash of its bytes and its tokens
    /// (counted on the unit's JSON text).
    pub units: Vec<(u64, u32)>,
}

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
    pub fn of_body(json: &str, mut count: impl FnMut(&str) -> u32) -> Option<PrefixTrace> {
        let body: Body<'_> = serde_json::from_str(json).ok()?;
        let messages = body.messages.or(body.input)?;
        let head: Vec<&str> = [body.model, body.tools, body.system, body.instructions]
            .iter()
            .map(|v| v.map_or("", RawValue::get))
            .collect();
        let mut units = Vec::with_capacity(messages.len() + 1);
        units.push((hash64(&head), head.iter().map(|t| count(t)).sum()));
        for m in messages {
            units.push((hash64(&[m.get()]), count(m.get())));
        }
        Some(PrefixTrace { units })
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

#[cfg(test)]
mod tests {
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

    #[test]
    fn what_is_not_a_body_has_no_trace() {
        assert!(PrefixTrace::of_body("[1,2]", words).is_none());
        assert!(PrefixTrace::of_body(r#"{"model":"m"}"#, words).is_none());
    }
}
