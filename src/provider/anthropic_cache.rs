//! Prompt-cache breakpoints for Anthropic bodies.
//!
//! Anthropic caches a prompt only up to blocks marked with `cache_control`
//! (at most four per request), and on a later request reads the longest
//! marked prefix written before, looking back up to 20 blocks from each of
//! that request's own marks. The marker itself is not part of the cached
//! content, so a mark can move from turn to turn. compactd places its marks
//! where the next render is known to repeat the body byte for byte:
//!
//! 1. **The newest message**: the whole body, read back by the next turn
//!    when nothing before it changed (incremental caching).
//! 2. **Before this turn's own content**: the end of the message before the
//!    first per-turn message (recall, read-back content, the caller's
//!    injections), or before the latest user message when there is none.
//!    Per-turn content is replaced next turn; what precedes it is not.
//! 3. **Before the previous user message**: where the previous render's
//!    mark 2 stood, so the next render reads it exactly, however many blocks
//!    its tool loop added since (a lookback of 20 blocks would miss them).
//! 4. **The head**: the end of the system prompt, else of the tools, which
//!    survives a compaction.
//! 5. **The end of the compacted prefix** (the last summary, stub or
//!    pointer), when a slot is left.
//!
//! The caller's own marks in carried blocks count against the four and are
//! kept; when they alone are more than four (a conversation whose every
//! message kept the mark it was sent with), the earliest go, since the API
//! refuses such a request. A mark goes only on a block whose count ignores
//! extra keys (text, image, tool use, tool result), so a mark never changes
//! what the body counts; a message whose last block is another kind (a
//! thinking block, a server tool's block) is not marked.

use std::ops::Range;

use serde_json::{json, Map, Value};

use crate::model::Role;
use crate::render::cache::Layout;
use crate::render::{Origin, Request};
use crate::tokens::normalize_model;

/// Marks a request may carry (the API refuses more).
pub const MAX_BREAKPOINTS: usize = 4;

/// Where a mark goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Anchor {
    /// The end of the system prompt, else of the tools.
    Head,
    /// The last block of this element of `messages`.
    Message(usize),
}

/// The marks compactd wants, best first, without repeats. `sources[j]` is
/// the range of `req.messages` that body message `j` holds (empty for a
/// message the encoder added).
pub(super) fn wanted(req: &Request, sources: &[Range<usize>]) -> Vec<Anchor> {
    let per_turn =
        |o: Origin| matches!(o, Origin::Recalled | Origin::Rehydrated | Origin::Injected);
    let users: Vec<usize> = (0..req.messages.len())
        .filter(|&i| {
            let m = &req.messages[i];
            m.role == Role::User && m.origin == Origin::Verbatim
        })
        .collect();
    // The body message holding everything before request message `x`.
    let before = |x: usize| {
        sources
            .iter()
            .rposition(|s| s.end <= x)
            .map(Anchor::Message)
    };
    let first_per_turn = req.messages.iter().position(|m| per_turn(m.origin));
    let this_turn = first_per_turn.or(users.last().copied()).and_then(before);
    let previous_turn = users.len().checked_sub(2).and_then(|i| before(users[i]));
    let compacted = req
        .messages
        .iter()
        .rposition(|m| {
            matches!(
                m.origin,
                Origin::Summary | Origin::Cleared | Origin::Externalized
            )
        })
        .filter(|&c| first_per_turn.is_none_or(|f| c < f))
        .and_then(|c| before(c + 1));
    let newest = sources.len().checked_sub(1).map(Anchor::Message);
    let mut out = Vec::with_capacity(5);
    for a in [
        newest,
        this_turn,
        previous_turn,
        Some(Anchor::Head),
        compacted,
    ]
    .into_iter()
    .flatten()
    {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// Places the `wanted` marks on `body` (an encoded Anthropic body) in the
/// slots the caller's own marks leave.
pub(super) fn place(body: &mut Value, wanted: &[Anchor]) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    let callers = keep_callers(obj);
    let mut free = MAX_BREAKPOINTS.saturating_sub(callers);
    for &a in wanted {
        if free == 0 {
            break;
        }
        let target = match a {
            Anchor::Head => head_target(obj),
            Anchor::Message(j) => obj
                .get_mut("messages")
                .and_then(|m| m.get_mut(j))
                .and_then(|m| m.get_mut("content"))
                .and_then(Value::as_array_mut)
                .and_then(|blocks| blocks.last_mut())
                .and_then(Value::as_object_mut)
                .filter(|b| markable(b)),
        };
        if let Some(block) = target {
            if !block.contains_key("cache_control") {
                block.insert("cache_control".into(), ephemeral());
                free -= 1;
            }
        }
    }
}

/// The marker compactd writes.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Whether a mark may go on this block: a kind whose count reads only its
/// own fields, with something to cache.
fn markable(b: &Map<String, Value>) -> bool {
    match b.get("type").and_then(Value::as_str) {
        Some("text") => b
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.trim().is_empty()),
        Some("image" | "tool_use" | "tool_result") => true,
        _ => false,
    }
}

/// The block the head mark goes on: the system prompt as one text block
/// (its count is the string's), else the last tool.
fn head_target(obj: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    if let Some(Value::String(s)) = obj.get("system") {
        let block = json!([{"type": "text", "text": s}]);
        obj.insert("system".into(), block);
    }
    if obj.contains_key("system") {
        return obj
            .get_mut("system")
            .and_then(Value::as_array_mut)
            .and_then(|b| b.last_mut())
            .and_then(Value::as_object_mut);
    }
    obj.get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|t| t.last_mut())
        .and_then(Value::as_object_mut)
}

/// Where a block that may carry a mark sits among the messages: (message,
/// block, block inside a tool result).
type BlockAt = (usize, usize, Option<usize>);

/// The message blocks (and tool results' inner blocks) that carry a mark,
/// in body order.
fn marked_blocks(messages: &[Value]) -> Vec<BlockAt> {
    let has = |b: &Value| b.get("cache_control").is_some();
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = m.get("content").and_then(Value::as_array);
        for (j, b) in blocks.into_iter().flatten().enumerate() {
            if let Some(Value::Array(inner)) = b.get("content") {
                out.extend(
                    (0..inner.len())
                        .filter(|&k| has(&inner[k]))
                        .map(|k| (i, j, Some(k))),
                );
            }
            if has(b) {
                out.push((i, j, None));
            }
        }
    }
    out
}

/// Counts the caller's marks in the messages, dropping the earliest beyond
/// [`MAX_BREAKPOINTS`]; how many are left.
fn keep_callers(obj: &mut Map<String, Value>) -> usize {
    let Some(Value::Array(messages)) = obj.get_mut("messages") else {
        return 0;
    };
    let marked = marked_blocks(messages);
    let extra = marked.len().saturating_sub(MAX_BREAKPOINTS);
    for &(i, j, k) in &marked[..extra] {
        let block = messages
            .get_mut(i)
            .and_then(|m| m.get_mut("content"))
            .and_then(|c| c.get_mut(j));
        let block = match k {
            Some(k) => block
                .and_then(|b| b.get_mut("content"))
                .and_then(|c| c.get_mut(k)),
            None => block,
        };
        if let Some(b) = block.and_then(Value::as_object_mut) {
            b.remove("cache_control");
        }
    }
    marked.len() - extra
}

/// Marks in an Anthropic body: on its system blocks, its tools, its
/// messages' blocks and its tool results' blocks (what the API counts
/// against its limit).
pub fn count_marks(body: &Value) -> usize {
    let top = |key: &str| {
        body.get(key).and_then(Value::as_array).map_or(0, |a| {
            a.iter()
                .filter(|b| b.get("cache_control").is_some())
                .count()
        })
    };
    let messages = body.get("messages").and_then(Value::as_array);
    top("system") + top("tools") + messages.map_or(0, |m| marked_blocks(m).len())
}

/// The body's blocks and marks unit by unit, as [`crate::render::prefix`]
/// cuts it: the head (tools, then system blocks), then each message.
pub fn layout(body: &Value) -> Layout {
    let arr = |k: &str| body.get(k).and_then(Value::as_array);
    let marked = |b: Option<&Value>| b.is_some_and(|b| b.get("cache_control").is_some());
    let (tools, system) = (arr("tools"), body.get("system"));
    let system_blocks = match system {
        Some(Value::Array(a)) => a.len(),
        Some(_) => 1,
        None => 0,
    };
    let head_marked = match system {
        Some(Value::Array(a)) => marked(a.last()),
        Some(_) => false,
        None => marked(tools.and_then(|t| t.last())),
    };
    let mut out = Layout {
        blocks: vec![(tools.map_or(0, Vec::len) + system_blocks) as u32],
        marks: Vec::new(),
    };
    if head_marked {
        out.marks.push(0);
    }
    for (i, m) in arr("messages").into_iter().flatten().enumerate() {
        let content = m.get("content");
        let blocks = content.and_then(Value::as_array);
        out.blocks.push(blocks.map_or(1, Vec::len) as u32);
        if marked(blocks.and_then(|b| b.last())) {
            out.marks.push(i + 1);
        }
    }
    out
}

/// The shortest prefix Anthropic caches for a model, by its published
/// table: 4,096 tokens for Opus 4.5 and later and Haiku 4.5 and later,
/// 2,048 for Sonnet 4.6 and later and the Haiku 3 models, 1,024 for the
/// others.
pub fn minimum_cacheable(model: &str) -> u32 {
    let m = normalize_model(model);
    let minor = |family: &str| super::anthropic::minor_of_4(&m, family);
    if m.contains("haiku-3") || m.contains("3-haiku") || m.contains("3-5-haiku") {
        2048
    } else if minor("opus").is_some_and(|v| v >= 5) || minor("haiku").is_some() {
        4096
    } else if minor("sonnet").is_some_and(|v| v >= 6) {
        2048
    } else {
        1024
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;
    use crate::model::{Content, ContentPart, Dialect, ProviderPart};
    use crate::provider::anthropic::{check_structure, to_anthropic};
    use crate::provider::testgen::{self, msg, summary};
    use crate::provider::{body_tokens, Format};
    use crate::render::RequestCounter;
    use crate::render::{PromptCache, ProviderOptions, RenderedMessage};
    use crate::tokens::{counter_for_model, TokenLedger};

    fn opts(breakpoints: bool) -> ProviderOptions {
        ProviderOptions {
            model: "claude-sonnet-4-5".into(),
            prompt_cache: PromptCache {
                breakpoints,
                ..PromptCache::default()
            },
            ..ProviderOptions::default()
        }
    }

    fn recalled(text: &str) -> RenderedMessage {
        RenderedMessage {
            origin: Origin::Recalled,
            ..msg(Role::User, text)
        }
    }

    fn marked(body: &Value) -> Vec<String> {
        let mut out = Vec::new();
        if body["system"][0].get("cache_control").is_some() {
            out.push("system".to_string());
        }
        for (i, m) in body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
                if b.get("cache_control").is_some() {
                    out.push(format!("messages[{i}][{j}]"));
                }
            }
        }
        out
    }

    /// `messages` under the system prompt "rules", encoded with marks and
    /// checked.
    fn encoded(messages: Vec<RenderedMessage>) -> (Value, Request) {
        let req = Request {
            system: Some("rules".into()),
            messages,
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_anthropic(&req, &opts(true));
        check_structure(&body).unwrap();
        (body, req)
    }

    #[test]
    fn marks_go_where_the_next_render_repeats_the_body() {
        let (body, req) = encoded(vec![
            summary("earlier"),
            msg(Role::User, "u1"),
            msg(Role::Assistant, "a1"),
            msg(Role::User, "u2"),
            msg(Role::Assistant, "a2"),
            recalled("passage"),
            msg(Role::User, "u3"),
        ]);
        // messages: continuation, summary, u1, a1, u2, a2, recall + u3.
        assert_eq!(
            marked(&body),
            [
                "system",
                "messages[3][0]",
                "messages[5][0]",
                "messages[6][1]"
            ],
            "newest, before the recall, before u2, the system prompt"
        );
        assert_eq!(body["system"][0]["text"], "rules");
        let plain = to_anthropic(&req, &opts(false));
        assert!(marked(&plain).is_empty());
        assert_eq!(plain["system"], "rules");
    }

    #[test]
    fn the_callers_latest_marks_are_kept_within_four() {
        let text = |t: &str| {
            let v = json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}});
            Content::Parts(vec![ContentPart::Provider(ProviderPart::new(
                Dialect::AnthropicMessages,
                "text",
                &v,
            ))])
        };
        let messages = (0..12)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                RenderedMessage {
                    content: text(&format!("turn {i}")),
                    ..msg(role, "")
                }
            })
            .collect();
        let (body, _) = encoded(messages);
        assert_eq!(
            marked(&body),
            [
                "messages[8][0]",
                "messages[9][0]",
                "messages[10][0]",
                "messages[11][0]"
            ]
        );
        assert_eq!(body["system"], "rules", "no slot left for a mark of ours");
    }

    #[test]
    fn layout_reads_blocks_and_marks_by_unit() {
        let body = json!({
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "a"}, {"name": "b"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "y"},
                    {"type": "tool_use", "id": "t", "name": "a", "input": {}, "cache_control": {"type": "ephemeral"}}]},
            ],
        });
        let l = layout(&body);
        assert_eq!(l.blocks, vec![3, 1, 2]);
        assert_eq!(l.marks, vec![0, 2]);
        assert_eq!(count_marks(&body), 2);
    }

    #[test]
    fn minimums_follow_the_published_table() {
        for (model, min) in [
            ("claude-sonnet-4-5-20250929", 1024),
            ("claude-opus-4-1", 1024),
            ("claude-opus-4-20250514", 1024),
            ("claude-3-7-sonnet-latest", 1024),
            ("claude-opus-4-5", 4096),
            ("claude-opus-4-6", 4096),
            ("claude-haiku-4-5-20251001", 4096),
            ("claude-3-5-haiku-latest", 2048),
            ("claude-sonnet-4-6", 2048),
        ] {
            assert_eq!(minimum_cacheable(model), min, "{model}");
        }
    }

    /// The body without any mark, the system prompt as a string.
    fn unmarked(mut body: Value) -> Value {
        fn strip(v: &mut Value) {
            match v {
                Value::Object(o) => {
                    o.remove("cache_control");
                    o.values_mut().for_each(strip);
                }
                Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        for key in ["system", "tools", "messages"] {
            if let Some(v) = body.get_mut(key) {
                strip(v);
            }
        }
        if let Some(text) = body["system"][0]["text"].as_str().map(str::to_string) {
            body["system"] = Value::String(text);
        }
        body
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]

        /// Marks change nothing the model reads or the budget counts, stay
        /// within the API's four, and sit only on blocks that take one.
        #[test]
        fn marks_change_nothing_but_the_marks(req in testgen::request()) {
            let on = to_anthropic(&req, &opts(true));
            let off = to_anthropic(&req, &opts(false));
            prop_assert_eq!(check_structure(&on), Ok(()));
            prop_assert!(count_marks(&on) <= MAX_BREAKPOINTS);
            prop_assert_eq!(unmarked(on.clone()), unmarked(off.clone()));
            let counter = counter_for_model("claude-sonnet-4-5");
            let ledger = TokenLedger::new(1_000);
            let target = Format::target(Some(Format::AnthropicMessages), "claude-sonnet-4-5");
            let rc = RequestCounter::for_target(counter.as_ref(), &ledger, target);
            prop_assert_eq!(
                body_tokens(Format::AnthropicMessages, &on, &rc),
                body_tokens(Format::AnthropicMessages, &off, &rc)
            );
            for m in on["messages"].as_array().into_iter().flatten() {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b.get("cache_control").is_some() {
                        prop_assert!(markable(b.as_object().unwrap()), "{}", b);
                    }
                }
            }
        }
    }
}
