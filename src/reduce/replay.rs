//! Which replayable tool results are verifiably unchanged: an index of
//! every result by tool and arguments, so "did a later call of the same
//! tool with the same arguments see the same metadata" is a lookup, not a
//! scan of the rest of the thread (which was quadratic).

use serde_json::Value;

use crate::model::DeterminismMetadata;

use super::PipelineState;

/// Tool results grouped by tool name and call arguments, and for every way
/// an earlier result's metadata can be compared with a later one's, the
/// latest result that compares equal.
///
/// [`DeterminismMetadata::has_changed`] compares the first field (content
/// hash, etag, mtime, version) both sides have. So for an earlier result
/// with fields `S` (a mask) and a later one with fields `D`, the comparison
/// is on field `k`, the first of `S ∩ D`, and "unchanged" means the two
/// values of `k` are equal. Each later result is filed under
/// `(group, S, k, its value of k)` for every `S` (15 masks), keeping the
/// latest; an earlier result then looks up `(group, S, k, its value)` for
/// each of its fields `k`.
pub(super) struct ReplayIndex<'a> {
    /// Group of each message (tool results only).
    group: Vec<Option<usize>>,
    /// `(group, S, k, value)` → latest result filed under it.
    latest: std::collections::HashMap<(usize, u8, u8, FieldValue<'a>), usize>,
}

/// A comparable metadata value (mtime by its bits, -0.0 as 0.0; NaN, which
/// equals nothing, has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FieldValue<'a> {
    Text(&'a str),
    Time(u64),
}

/// Tool name and call arguments of a group.
type GroupKey<'a> = (&'a str, Option<&'a Value>);

impl<'a> ReplayIndex<'a> {
    pub(super) fn new(state: &PipelineState<'a>) -> Self {
        use std::hash::BuildHasher;
        let thread = state.thread;
        // Seeded, so nobody can line up arguments that share a bucket.
        let hasher = std::collections::hash_map::RandomState::new();
        // Hash → the groups with it; equality decides among them.
        let mut buckets: std::collections::HashMap<u64, Vec<(GroupKey<'a>, usize)>> =
            std::collections::HashMap::new();
        let mut count = 0;
        let mut group = vec![None; thread.messages.len()];
        for (j, m) in thread.messages.iter().enumerate() {
            let Some(env) = &m.tool_result else { continue };
            let key: GroupKey<'a> = (env.tool_name.as_str(), state.call_arguments(j));
            let h = hasher.hash_one((key.0, key.1.map(value_hash)));
            let bucket = buckets.entry(h).or_default();
            let g = match bucket.iter().find(|(k, _)| *k == key) {
                Some(&(_, g)) => g,
                None => {
                    bucket.push((key, count));
                    count += 1;
                    count - 1
                }
            };
            group[j] = Some(g);
        }
        let mut latest = std::collections::HashMap::new();
        for (j, m) in thread.messages.iter().enumerate() {
            let (Some(g), Some(d)) = (
                group[j],
                m.tool_result.as_ref().and_then(|e| e.determinism.as_ref()),
            ) else {
                continue;
            };
            let fields = field_mask(d);
            for s in 1u8..16 {
                let common = s & fields;
                if common == 0 {
                    continue;
                }
                let k = common.trailing_zeros() as u8;
                if let Some(v) = field_value(d, k) {
                    // Ascending j: the last insert is the latest.
                    latest.insert((g, s, k, v), j);
                }
            }
        }
        ReplayIndex { group, latest }
    }

    /// Whether a result after `i` in `i`'s group has metadata that `seen`
    /// (result `i`'s) does not count as changed.
    pub(super) fn later_unchanged(&self, i: usize, seen: &DeterminismMetadata) -> bool {
        let Some(g) = self.group.get(i).copied().flatten() else {
            return false;
        };
        let s = field_mask(seen);
        (0u8..4).filter(|k| s & (1 << k) != 0).any(|k| {
            field_value(seen, k)
                .is_some_and(|v| self.latest.get(&(g, s, k, v)).is_some_and(|&j| j > i))
        })
    }
}

/// Which of content hash, etag, mtime, version (bits 0-3) are present.
fn field_mask(d: &DeterminismMetadata) -> u8 {
    u8::from(d.content_hash.is_some())
        | (u8::from(d.etag.is_some()) << 1)
        | (u8::from(d.mtime.is_some()) << 2)
        | (u8::from(d.version.is_some()) << 3)
}

fn field_value(d: &DeterminismMetadata, k: u8) -> Option<FieldValue<'_>> {
    match k {
        0 => d.content_hash.as_deref().map(FieldValue::Text),
        1 => d.etag.as_deref().map(FieldValue::Text),
        2 => d
            .mtime
            .filter(|t| !t.is_nan())
            .map(|t| FieldValue::Time(if t == 0.0 { 0 } else { t.to_bits() })),
        _ => d.version.as_deref().map(FieldValue::Text),
    }
}

/// A hash of a JSON value that agrees with its `==`: numbers by kind and
/// value (0.0 and -0.0 alike), object members in any order.
fn value_hash(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    type H = std::collections::hash_map::DefaultHasher;
    fn feed(v: &Value, h: &mut H) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    (2u8, u).hash(h);
                } else if let Some(i) = n.as_i64() {
                    (3u8, i).hash(h);
                } else {
                    let f = n.as_f64().unwrap_or(0.0);
                    (4u8, if f == 0.0 { 0 } else { f.to_bits() }).hash(h);
                }
            }
            Value::String(s) => (5u8, s).hash(h),
            Value::Array(a) => {
                (6u8, a.len()).hash(h);
                a.iter().for_each(|x| feed(x, h));
            }
            Value::Object(m) => {
                (7u8, m.len()).hash(h);
                let members = m.iter().fold(0u64, |acc, (k, x)| {
                    let mut e = H::new();
                    k.hash(&mut e);
                    feed(x, &mut e);
                    acc.wrapping_add(e.finish())
                });
                members.hash(h);
            }
        }
    }
    let mut h = H::new();
    feed(v, &mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Thread;
    use crate::model::{Content, Message, MessageMetadata, Role, ToolCall, ToolContent};
    use crate::model::{Outcome, ToolResultEnvelope};
    use crate::reduce::{Cancel, Engine, Memo, Policy};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// The definition the index replaces: scan every later result.
    fn naive(state: &PipelineState<'_>, thread: &Thread, i: usize) -> bool {
        let Some(env) = &thread.messages[i].tool_result else {
            return false;
        };
        let Some(seen) = env.determinism.as_ref().filter(|d| !d.is_empty()) else {
            return false;
        };
        let args = state.call_arguments(i);
        (i + 1..thread.messages.len()).any(|j| {
            thread.messages[j]
                .tool_result
                .as_ref()
                .is_some_and(|later| {
                    later.tool_name == env.tool_name
                        && state.call_arguments(j) == args
                        && later
                            .determinism
                            .as_ref()
                            .is_some_and(|d| !seen.has_changed(d))
                })
        })
    }

    #[test]
    fn the_replay_index_agrees_with_a_scan_of_later_results() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let args = [
            json!({"path": "a", "n": 1}),
            json!({"n": 1, "path": "a"}),
            json!({"path": "a", "n": 1.0}),
            json!({"x": 0.0}),
            json!({"x": -0.0}),
            json!(null),
        ];
        let mut outcomes = [0usize; 2];
        for _ in 0..40 {
            let mut messages = Vec::new();
            for k in 0..60 {
                let call = format!("c{k}");
                let tool = ["read_file", "http_get"][next(2) as usize].to_string();
                messages.push(Message {
                    id: format!("a{k}"),
                    role: Role::Assistant,
                    content: Content::Text(String::new()),
                    tool_calls: vec![ToolCall {
                        wire: None,
                        id: call.clone(),
                        name: tool.clone(),
                        arguments: args[next(args.len() as u64) as usize].clone(),
                    }],
                    tool_result: None,
                    turn: k,
                    metadata: MessageMetadata::default(),
                });
                let pick = |n: u64, v: u64| (v < n).then(|| ["h1", "h2"][v as usize].to_string());
                let determinism = (next(5) != 0).then(|| DeterminismMetadata {
                    content_hash: pick(2, next(4)),
                    etag: pick(2, next(4)),
                    mtime: [None, Some(1.0), Some(0.0), Some(-0.0), Some(f64::NAN)]
                        [next(5) as usize],
                    version: pick(2, next(4)),
                });
                messages.push(Message {
                    id: format!("r{k}"),
                    role: Role::Tool,
                    content: Content::Text(String::new()),
                    tool_calls: vec![],
                    tool_result: Some(ToolResultEnvelope {
                        wire: None,
                        tool_name: tool,
                        tool_call_id: call,
                        outcome: Outcome::Success,
                        content: ToolContent::Text("ok".into()),
                        key_fields: Default::default(),
                        durability: None,
                        determinism,
                        started_at: None,
                        completed_at: None,
                    }),
                    turn: k,
                    metadata: MessageMetadata::default(),
                });
            }
            let thread = Thread::new("t", messages);
            let policy = Policy::default();
            let memo = Memo::default();
            let observations = BTreeMap::new();
            let summarizer = crate::summarize::ExtractiveSummarizer;
            let counter = crate::tokens::o200k();
            let ledger = crate::tokens::TokenLedger::new(100);
            let engine = Engine {
                cancel: Cancel::never(),
                redactor: crate::redact::Redactor::standard(),
                counter: counter.as_ref(),
                ledger: &ledger,
                summarizer: &summarizer,
                memo: &memo,
            };
            let state = PipelineState::new(&thread, &policy, &engine, &observations, false);
            let index = ReplayIndex::new(&state);
            for (i, m) in thread.messages.iter().enumerate() {
                let fast = m
                    .tool_result
                    .as_ref()
                    .and_then(|e| e.determinism.as_ref().filter(|d| !d.is_empty()))
                    .is_some_and(|seen| index.later_unchanged(i, seen));
                assert_eq!(fast, naive(&state, &thread, i), "message {i}");
                outcomes[usize::from(fast)] += 1;
            }
        }
        // Both answers occur, so the comparison means something.
        assert!(outcomes[0] > 100 && outcomes[1] > 100, "{outcomes:?}");
    }
}
