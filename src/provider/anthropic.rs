//! Anthropic Messages request body.
//!
//! The Messages API is stricter than Chat Completions: only `user` and
//! `assistant` roles, strict alternation starting with `user`, tool results as
//! blocks of the *next* user message, and no blank text anywhere. The neutral
//! [`Request`] is adapted without dropping any content:
//!
//! 1. **System.** `req.system` and every *leading* `system`/`developer` message
//!    (before the first other message) go, in order, into the top-level
//!    `system` string, joined by a blank line (`"\n\n"`). Blank pieces are
//!    skipped; `system` is omitted when nothing is left.
//! 2. **Later system/developer messages** become user-side text: the first
//!    text block is prefixed with `"[system] "` or `"[developer] "` (or a text
//!    block `"[system]"`/`"[developer]"` is put before a leading image). They
//!    merge with neighbouring user messages like any user content.
//! 3. **Tool calls** become `tool_use` blocks after the message's other blocks;
//!    `input` is the arguments object, `{}` for null, and `{"value": v}` for any
//!    other non-object value (the API requires an object).
//! 4. **Tool messages** become `tool_result` blocks (`is_error: true` only when
//!    the result is an error) in a user message.
//! 5. **Merging.** Consecutive messages that map to the same role become one
//!    message. In a user message all `tool_result` blocks come first (the API
//!    requires the results to open the message that follows the `tool_use`),
//!    then the other blocks in order; in an assistant message thinking blocks
//!    come first (in their order) and all `tool_use` blocks last.
//! 6. **First turn.** If the conversation would start with `assistant` (e.g. a
//!    summary, which compactd renders as assistant) or be empty, a user message
//!    with the text `"(continuing conversation)"` is inserted first.
//! 7. **Blank text.** Text blocks that are empty or whitespace-only are not
//!    sent (the API rejects them). A message left without blocks gets the text
//!    block `"(empty)"`; a blank tool result gets the content `"(empty)"`.
//! 8. **Final assistant turn.** If the last message is `assistant` (a
//!    prefill), trailing whitespace of its last text block is trimmed (the API
//!    rejects a final assistant turn ending in whitespace).
//! 9. **Images.** Only user-side content (user, later system/developer, tool
//!    results) may hold images: `https:`-style URLs become
//!    `{"type":"url","url":..}` sources, `data:<media type>;base64,<data>`
//!    URLs become base64 sources. Images elsewhere (assistant, system) and
//!    data URLs that are not base64 JPEG/PNG/GIF/WebP are sent as a short
//!    text reference (`[image: {url}]`, or the type and size of inline data;
//!    see [`crate::render::images`]).
//! 10. `max_tokens` is `opts.max_output_tokens`, or 4096 when unset (required).
//! 11. **Tool ids.** The API accepts only `[a-zA-Z0-9_-]` in tool ids and one
//!     use of an id per request. An id with other characters (`functions.Read:3`
//!     from some model servers) is sent as `toolu_` + 24 hex digits of its
//!     SHA-256; an id the request uses more than once (local servers name
//!     every call `call_0`) keeps it on its last use and gets `_<n>` on the
//!     n-th earlier one. A result always carries its call's id.
//!     [`tool_id_rewrites`] lists the rewrites for the audit record.
//!
//! Output is a `serde_json::Value` whose maps are BTreeMaps, so the serialized
//! body is byte-identical for identical input.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::body::{array, BodyCounter};
use crate::model::{Content, ContentPart, Dialect, Role, ToolCall, ToolSchema};
use crate::render::tool_ids::{self, IdRules, ToolIds};
use crate::render::wire::{input_schema, CONTINUATION_TEXT, EMPTY_TEXT};
use crate::render::{images, ProviderOptions, RenderedMessage, Request};
use crate::tokens::{normalize_model, BlankFiller, ChatOverhead, Framing, IdGrowth, TokenizerRule};

/// `max_tokens` when the caller sets none; the API requires the field.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Anthropic Messages request body: {"model","max_tokens","system"?, "messages":[...], "tools"?: [{name, description, input_schema}]}.
pub fn to_anthropic(req: &Request, opts: &ProviderOptions) -> Value {
    let mut system: Vec<String> = Vec::new();
    if let Some(s) = req.system.as_deref().filter(|s| !is_blank(s)) {
        system.push(s.to_string());
    }
    let lead = req
        .messages
        .iter()
        .take_while(|m| matches!(m.role, Role::System | Role::Developer))
        .count();
    for m in &req.messages[..lead] {
        let text = m.content.flat_text();
        if !is_blank(&text) {
            system.push(text);
        }
    }

    // (is_assistant, blocks) per output message, merged as we go.
    let ids = ToolIds::of(req, IdRules::PlainCharset);
    // With the range of request messages each turn holds.
    let mut turns: Vec<(bool, Vec<Value>)> = Vec::new();
    let mut sources: Vec<std::ops::Range<usize>> = Vec::new();
    for (k, m) in req.messages[lead..].iter().enumerate() {
        let (assistant, blocks) = blocks(m, &ids, lead + k);
        match (turns.last_mut(), sources.last_mut()) {
            (Some((last, existing)), Some(s)) if *last == assistant => {
                existing.extend(blocks);
                s.end = lead + k + 1;
            }
            _ => {
                turns.push((assistant, blocks));
                sources.push(lead + k..lead + k + 1);
            }
        }
    }
    if turns.first().is_none_or(|(assistant, _)| *assistant) {
        turns.insert(0, (false, vec![text_block(CONTINUATION_TEXT)]));
        sources.insert(0, lead..lead);
    }
    let last = turns.len() - 1;
    let messages: Vec<Value> = turns
        .into_iter()
        .enumerate()
        .map(|(i, (assistant, blocks))| turn(assistant, blocks, assistant && i == last))
        .collect();

    let mut body = Map::new();
    body.insert("model".into(), Value::String(opts.model.clone()));
    body.insert(
        "max_tokens".into(),
        json!(opts.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    if !system.is_empty() {
        body.insert("system".into(), Value::String(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool).collect()),
        );
    }
    let mut body = Value::Object(body);
    if opts.prompt_cache.breakpoints {
        let wanted = super::anthropic_cache::wanted(req, &sources);
        super::anthropic_cache::place(&mut body, &wanted);
    }
    body
}

/// One turn's message. Stable partition: results open a user turn; an
/// assistant turn opens with its thinking (the API rejects one that does
/// not, e.g. when a summary or earlier text merged in before it) and closes
/// with its calls; a final assistant turn's text is trimmed.
fn turn(assistant: bool, mut blocks: Vec<Value>, final_assistant: bool) -> Value {
    let key = |b: &Value| {
        let t = b["type"].as_str();
        if assistant {
            match t {
                Some("thinking" | "redacted_thinking") => 0,
                Some("tool_use") => 2,
                _ => 1,
            }
        } else {
            u8::from(t != Some("tool_result"))
        }
    };
    blocks.sort_by_key(key);
    if blocks.is_empty() {
        blocks.push(text_block(EMPTY_TEXT));
    }
    if final_assistant {
        trim_final_text(&mut blocks);
    }
    let role = if assistant { "assistant" } else { "user" };
    json!({"role": role, "content": blocks})
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// Content blocks without blank text. Images become image blocks only where
/// the API accepts them (user side). Thinking blocks are passed through byte
/// for byte, first, in their order: the API rejects a tool-loop turn whose
/// thinking was changed, dropped or moved. Responses reasoning items have no
/// Anthropic form and are left out.
fn content_blocks(c: &Content, images_allowed: bool) -> Vec<Value> {
    match c {
        Content::Text(s) if is_blank(s) => Vec::new(),
        Content::Text(s) => vec![text_block(s)],
        Content::Parts(parts) => {
            let thinking = parts.iter().filter_map(|p| match p {
                ContentPart::Thinking {
                    thinking,
                    signature,
                } => {
                    Some(json!({"type": "thinking", "thinking": thinking, "signature": signature}))
                }
                ContentPart::RedactedThinking { data } => {
                    Some(json!({"type": "redacted_thinking", "data": data}))
                }
                _ => None,
            });
            let visible = parts.iter().filter_map(|p| match p {
                ContentPart::Text { text } if is_blank(text) => None,
                ContentPart::Text { text } => Some(text_block(text)),
                ContentPart::Image { url } => Some(match image_source(url) {
                    Some(source) if images_allowed => json!({"type": "image", "source": source}),
                    _ => text_block(&images::reference(url)),
                }),
                ContentPart::Provider(p) => match super::sent(p, Dialect::AnthropicMessages)? {
                    // A blank text block goes as a plain one does: not at all.
                    super::Sent::Raw(v)
                        if v["type"] == "text" && v["text"].as_str().is_some_and(is_blank) =>
                    {
                        None
                    }
                    super::Sent::Raw(v) => Some(v),
                    super::Sent::Text(t) if is_blank(&t) => None,
                    super::Sent::Text(t) => Some(text_block(&t)),
                },
                ContentPart::Thinking { .. }
                | ContentPart::RedactedThinking { .. }
                | ContentPart::Reasoning { .. } => None,
            });
            thinking.chain(visible).collect()
        }
    }
}

/// A URL source, or a base64 source for inline data of an accepted type;
/// `None` for an image that cannot be sent as one.
fn image_source(url: &str) -> Option<Value> {
    use images::{sendable_form, Sendable};
    Some(match sendable_form(url)? {
        Sendable::Url(url) => json!({"type": "url", "url": url}),
        Sendable::Inline { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    })
}

/// One neutral message (at index `i`) as (is_assistant, blocks).
fn blocks(m: &RenderedMessage, ids: &ToolIds, i: usize) -> (bool, Vec<Value>) {
    match m.role {
        Role::User => (false, content_blocks(&m.content, true)),
        Role::System | Role::Developer => {
            let mut blocks = content_blocks(&m.content, true);
            let label = format!("[{}]", m.role.as_str());
            match blocks.first_mut() {
                Some(Value::Object(first)) if first["type"] == "text" => {
                    let text = first["text"].as_str().unwrap_or_default();
                    let prefixed = format!("{label} {text}");
                    first.insert("text".into(), Value::String(prefixed));
                }
                Some(_) => blocks.insert(0, text_block(&label)),
                None => {}
            }
            (false, blocks)
        }
        Role::Assistant => {
            let mut blocks = content_blocks(&m.content, false);
            blocks.extend(
                m.tool_calls
                    .iter()
                    .zip(&ids.calls[i])
                    .map(|(c, id)| tool_use(c, id)),
            );
            (true, blocks)
        }
        Role::Tool => (false, vec![tool_result(m, ids.results[i].as_deref())]),
    }
}

/// The longest form `id` can take in an Anthropic body, but for a `_<n>`
/// reuse suffix: itself, or its hashed replacement when the API would refuse it.
pub fn sent_id(id: &str) -> std::borrow::Cow<'_, str> {
    tool_ids::sent_id(id, IdRules::PlainCharset)
}

/// The tool ids the Anthropic body sends differently from the request, as
/// (sent by the caller, sent to Anthropic), in request order.
pub fn tool_id_rewrites(req: &Request) -> Vec<(String, String)> {
    ToolIds::of(req, IdRules::PlainCharset).rewrites
}

fn tool_use(c: &ToolCall, id: &str) -> Value {
    use crate::render::wire::set;
    let input = match &c.arguments {
        Value::Object(_) => c.arguments.clone(),
        Value::Null => json!({}),
        other => json!({"value": other}),
    };
    match c
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::AnthropicMessages && w.kind == "tool_use")
    {
        // As it came (`cache_control`, `caller`), its fields updated.
        Some(w) => {
            let mut v = w.value();
            set(&mut v, "id", json!(id));
            set(&mut v, "name", json!(c.name));
            set(&mut v, "input", input);
            v
        }
        None => json!({"type": "tool_use", "id": id, "name": c.name, "input": input}),
    }
}

/// A result in its provider form when it came in this format: its content
/// as it came while the rendered text is that content (between the
/// delimiter's lines as text blocks), else the rendered text.
fn tool_result(m: &RenderedMessage, id: Option<&str>) -> Value {
    use crate::render::wire::{delimited_parts, kept_as, set, Kept};
    let Some(w) = m
        .wire
        .as_deref()
        .filter(|w| w.dialect == Dialect::AnthropicMessages && w.kind == "tool_result")
    else {
        return plain_tool_result(m, id);
    };
    let mut v = w.value();
    set(&mut v, "tool_use_id", json!(id.unwrap_or_default()));
    let rendered = m.content.flat_text();
    let original = import::result_text(v.get("content"), "").unwrap_or_default();
    match (kept_as(&rendered, &original), v.get("content")) {
        (Kept::Same, Some(_)) => {}
        (Kept::Delimited { open, close }, Some(Value::Array(blocks))) => {
            let blocks = delimited_parts(blocks, &open, &close, "text");
            set(&mut v, "content", blocks);
        }
        _ if is_blank(&rendered) => set(&mut v, "content", json!(EMPTY_TEXT)),
        _ => set(&mut v, "content", json!(rendered)),
    }
    if m.is_error {
        set(&mut v, "is_error", json!(true));
    }
    v
}

fn plain_tool_result(m: &RenderedMessage, id: Option<&str>) -> Value {
    let content = match &m.content {
        Content::Text(s) if !is_blank(s) => Value::String(s.clone()),
        Content::Parts(_) => {
            let blocks = content_blocks(&m.content, true);
            if blocks.is_empty() {
                Value::String(EMPTY_TEXT.into())
            } else {
                Value::Array(blocks)
            }
        }
        Content::Text(_) => Value::String(EMPTY_TEXT.into()),
    };
    let mut block = Map::new();
    block.insert("type".into(), json!("tool_result"));
    // A missing id stays visible (empty) so `check_structure` names it.
    block.insert(
        "tool_use_id".into(),
        Value::String(id.unwrap_or_default().to_string()),
    );
    block.insert("content".into(), content);
    if m.is_error {
        block.insert("is_error".into(), Value::Bool(true));
    }
    Value::Object(block)
}

fn trim_final_text(blocks: &mut [Value]) {
    if let Some(Value::Object(last)) = blocks.last_mut() {
        if last["type"] == "text" {
            if let Some(text) = last["text"].as_str() {
                let trimmed = text.trim_end().to_string();
                last.insert("text".into(), Value::String(trimmed));
            }
        }
    }
}

fn tool(t: &ToolSchema) -> Value {
    let schema = input_schema(t);
    let mut out = Map::new();
    out.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        out.insert("description".into(), Value::String(t.description.clone()));
    }
    out.insert("input_schema".into(), schema);
    Value::Object(out)
}

/// Checks an Anthropic body: first message role user, roles strictly alternate user/assistant, every tool_use id answered by a tool_result block in the immediately following user message (tool_result blocks first in that message), no tool_result without a tool_use in the immediately preceding assistant message, no empty content.
///
/// Also checks what the API rejects besides: a missing `max_tokens`, blank
/// text blocks or system prompt, and a final assistant turn ending in whitespace.
pub fn check_structure(body: &Value) -> Result<(), String> {
    let messages = messages_of(body)?;
    let marks = super::anthropic_cache::count_marks(body);
    if marks > super::anthropic_cache::MAX_BREAKPOINTS {
        return Err(format!(
            "{marks} cache_control breakpoints (the API takes at most {})",
            super::anthropic_cache::MAX_BREAKPOINTS
        ));
    }
    // tool_use ids of the previous assistant message, still to be answered.
    let mut open: BTreeSet<String> = BTreeSet::new();
    let mut seen_ids: BTreeSet<String> = BTreeSet::new();
    let mut previous: Option<&str> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        check_role(previous, role, i)?;
        previous = Some(role);
        let blocks = content_as_blocks(m.get("content"), i)?;
        let answered = check_blocks(&blocks, role, i, &open, &mut seen_ids)?;
        if role == "user" {
            if let Some(id) = open.iter().find(|id| !answered.contains(*id)) {
                return Err(format!(
                    "tool_use {id:?} of messages[{}] has no tool_result in messages[{i}]",
                    i - 1
                ));
            }
            open.clear();
            continue;
        }
        open = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["id"].as_str().map(str::to_string))
            .collect();
        if i == messages.len() - 1 {
            check_final_assistant(&blocks, &open, i)?;
        }
    }
    Ok(())
}

/// The body's `messages`, once `max_tokens` and `system` are as required.
fn messages_of(body: &Value) -> Result<&Vec<Value>, String> {
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err("body has no integer \"max_tokens\"".into());
    }
    match body.get("system") {
        None => {}
        Some(Value::String(s)) if !is_blank(s) => {}
        Some(Value::Array(a)) if !a.is_empty() => {}
        Some(_) => return Err("\"system\" is empty or not a string".into()),
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("body has no \"messages\" array")?;
    if messages.is_empty() {
        return Err("\"messages\" is empty".into());
    }
    Ok(messages)
}

/// The first message is the user's, and roles alternate.
fn check_role(previous: Option<&str>, role: &str, i: usize) -> Result<(), String> {
    match (previous, role) {
        (None, "user") => Ok(()),
        (None, r) => Err(format!(
            "messages[0] has role {r:?}; the first must be user"
        )),
        (Some(p), r) if (r == "user" || r == "assistant") && r != p => Ok(()),
        (Some(_), r) => Err(format!(
            "messages[{i}] has role {r:?}; roles must alternate user/assistant"
        )),
    }
}

/// Each block of messages[`i`] is allowed in its role and well formed;
/// tool_result blocks come first and answer `open` calls once each.
/// Returns the ids answered.
fn check_blocks(
    blocks: &[Value],
    role: &str,
    i: usize,
    open: &BTreeSet<String>,
    seen_ids: &mut BTreeSet<String>,
) -> Result<BTreeSet<String>, String> {
    let mut answered: BTreeSet<String> = BTreeSet::new();
    let mut past_results = false;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        let kind = b.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "text" => {
                let text = b.get("text").and_then(Value::as_str).unwrap_or_default();
                if is_blank(text) {
                    return Err(format!("{at} is a blank text block"));
                }
            }
            "tool_use" if role == "assistant" => check_tool_use(b, &at, seen_ids)?,
            "tool_result" if role == "user" => {
                if past_results {
                    return Err(format!(
                        "{at} is a tool_result after other blocks; tool_result blocks must come first"
                    ));
                }
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !open.contains(id) {
                    return Err(format!(
                        "{at} is a tool_result for {id:?} with no tool_use in the preceding assistant message"
                    ));
                }
                if !answered.insert(id.to_string()) {
                    return Err(format!("{at} answers {id:?} twice"));
                }
                if let Some(c) = b.get("content") {
                    content_as_blocks(Some(c), i)?;
                }
            }
            "thinking" | "redacted_thinking" if role == "assistant" => {
                let field = if kind == "thinking" {
                    "signature"
                } else {
                    "data"
                };
                if !b.get(field).is_some_and(Value::is_string) {
                    return Err(format!("{at} is a {kind} block without {field}"));
                }
            }
            "tool_use" | "tool_result" | "thinking" | "redacted_thinking" => {
                return Err(format!("{at} is a {kind} block in a {role} message"))
            }
            _ => {}
        }
        past_results |= kind != "tool_result";
    }
    Ok(answered)
}

/// A tool_use block: an id Anthropic accepts, used once per request, and
/// an object input.
fn check_tool_use(b: &Value, at: &str, seen_ids: &mut BTreeSet<String>) -> Result<(), String> {
    let id = b.get("id").and_then(Value::as_str).unwrap_or_default();
    if !tool_ids::plain_charset(id) {
        return Err(format!("{at} tool_use id {id:?} is not [a-zA-Z0-9_-]+"));
    }
    if !b.get("input").is_some_and(Value::is_object) {
        return Err(format!("{at}.input is not an object"));
    }
    if !seen_ids.insert(id.to_string()) {
        return Err(format!("{at} repeats tool_use id {id:?}"));
    }
    Ok(())
}

/// A final assistant turn (a prefill) calls nothing and does not end in
/// whitespace.
fn check_final_assistant(
    blocks: &[Value],
    open: &BTreeSet<String>,
    i: usize,
) -> Result<(), String> {
    if let Some(id) = open.iter().next() {
        return Err(format!(
            "tool_use {id:?} of messages[{i}] is never answered"
        ));
    }
    let ends_in_space = blocks
        .last()
        .filter(|b| b["type"] == "text")
        .and_then(|b| b["text"].as_str())
        .is_some_and(|t| t.ends_with(char::is_whitespace));
    if ends_in_space {
        return Err(format!(
            "messages[{i}] is a final assistant turn ending in whitespace"
        ));
    }
    Ok(())
}

/// A `content` value as blocks; a string counts as one text block.
fn content_as_blocks(content: Option<&Value>, i: usize) -> Result<Vec<Value>, String> {
    match content {
        Some(Value::String(s)) if !is_blank(s) => Ok(vec![text_block(s)]),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a.clone()),
        _ => Err(format!("messages[{i}] has empty or missing content")),
    }
}

/// Anthropic Messages: thinking is sent; later instructions are labelled;
/// ids it refuses are hashed; scalar tool input is wrapped; blank content
/// is filled; a conversation may need a continuation message; counted as
/// Claude's text whatever the model is called.
pub(super) const FRAMING: Framing = Framing {
    name: "anthropic",
    sends_thinking: true,
    labels_late_instructions: true,
    id_growth: IdGrowth::HashedSuffix,
    wraps_scalar_input: true,
    blank_filler: BlankFiller::Always,
    tools_as_sent: true,
    continuation: true,
    tokenizer: TokenizerRule::ClaudeEstimate,
    ..super::openai_chat::FRAMING
};

/// Anthropic Messages. Anthropic publishes no per-message framing; its
/// token-counting example (a system prompt and one message, 14 tokens)
/// implies about 6, so 8 per message and per block. A tool use gets 16
/// and a tool result's id 4: the adapter may add a `_<n>` suffix to a
/// reused id. Once per request 8 for the reply header (the
/// `(continuing conversation)` message the adapter may add is counted
/// with the request's fixed part). A request with tools pays
/// Anthropic's hidden tool-use system prompt: 804 tokens at most in its
/// published table (Opus 4.7, `tool_choice: any`), so 810.
pub(super) fn overhead(model: &str) -> ChatOverhead {
    ChatOverhead {
        per_message: 8,
        per_name: 4,
        reply_priming: 8,
        per_tool_call: 16,
        per_image: image_tokens(model),
        per_block: 8,
        tools_preamble: 810,
    }
}

/// Worst-case tokens of one image for a Claude model (Anthropic's vision
/// guide: 28 px patches, capped at 1568 visual tokens, 4784 from Opus 4.7 on).
/// Models known to predate the larger cap get 1600 (the older documented
/// ceiling); any other Claude model gets 4784.
pub(super) fn image_tokens(model: &str) -> u32 {
    let m = normalize_model(model);
    let older = m.contains("claude-3")
        || m.contains("claude-sonnet-4")
        || m.contains("claude-haiku-4")
        || minor_of_4(&m, "opus").is_some_and(|n| n < 7);
    if older {
        1600
    } else {
        super::MAX_IMAGE_TOKENS
    }
}

/// The minor version of a Claude 4 `family` (`opus`, `sonnet`, `haiku`) in
/// a normalized model name: `claude-opus-4-5` is 5; `claude-opus-4`, or a
/// date after the 4 (`claude-opus-4-20250514`), is 0 (4.0); `None` when the
/// name is not of that family's 4 line.
pub(super) fn minor_of_4(normalized: &str, family: &str) -> Option<u32> {
    let rest = normalized.split(&format!("{family}-4")).nth(1)?;
    let v: String = rest
        .strip_prefix('-')
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(if v.len() == 1 {
        v.parse().unwrap_or(0)
    } else {
        0
    })
}

/// Tokens of an Anthropic Messages body as sent (see [`super::body_tokens`]).
pub fn count_body(body: &Value, bc: &BodyCounter<'_>) -> u32 {
    let o = bc.overhead();
    let text = |v: &Value| bc.text(v);
    let mut n = o.reply_priming;
    // A marked system prompt is one text block.
    match body.get("system") {
        Some(Value::Array(blocks)) => {
            n += o.per_message + blocks.iter().map(|b| text(&b["text"])).sum::<u32>();
        }
        Some(system) => n += o.per_message + text(system),
        None => {}
    }
    let blocks_tokens = |blocks: &[Value]| -> u32 {
        blocks
            .iter()
            .map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => text(&b["text"]),
                Some("image") => o.per_image,
                Some("thinking") => o.per_block + text(&b["thinking"]),
                Some("redacted_thinking") => o.per_block + text(&b["data"]),
                _ => bc.provider(b),
            })
            .sum()
    };
    for m in array(body, "messages") {
        n += o.per_message;
        let blocks: &[Value] = match m.get("content") {
            Some(Value::Array(blocks)) => blocks,
            Some(c) => {
                n += text(c);
                &[]
            }
            None => &[],
        };
        for b in blocks {
            n += match b.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    o.per_tool_call + text(&b["name"]) + text(&b["id"]) + bc.json_text(&b["input"])
                }
                Some("tool_result") => {
                    o.per_name
                        + text(&b["tool_use_id"])
                        + match b.get("content") {
                            Some(Value::Array(inner)) => blocks_tokens(inner),
                            Some(c) => text(c),
                            None => 0,
                        }
                }
                _ => blocks_tokens(std::slice::from_ref(b)),
            };
        }
    }
    n += bc.tools(body, "input_schema", true);
    n
}

/// Reading Anthropic Messages bodies (or their `messages` arrays) as
/// threads: `tool_use` blocks become calls, each `tool_result` block a tool
/// message (`is_error` a failure), thinking blocks stay with their turn.
pub(super) mod import {
    use serde_json::{Map, Value};

    use crate::model::{Content, ContentPart, Dialect, Role, Thread, ToolCall, ToolContent};
    use crate::provider::import::{
        carried, content_of, err, only_keys, protect_before_compaction, str_field, wire_unless,
        Builder, ImportError, Marks,
    };

    /// Anthropic blocks that Chat Completions never has; a text-only Anthropic
    /// conversation reads the same either way.
    pub(in crate::provider) fn recognizes(
        messages: &[Value],
        obj: Option<&Map<String, Value>>,
    ) -> bool {
        const ONLY_ANTHROPIC: &[&str] =
            &["tool_use", "tool_result", "thinking", "redacted_thinking"];
        obj.and_then(|o| o.get("system"))
            .is_some_and(Value::is_array)
            || messages.iter().any(|m| {
                m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|blocks| {
                        blocks.iter().any(|b| {
                            let t = b.get("type").and_then(Value::as_str).unwrap_or_default();
                            ONLY_ANTHROPIC.contains(&t)
                                || (t == "image" && b.get("source").is_some())
                                || (t != "text"
                                    && t != "image"
                                    && Dialect::AnthropicMessages.knows(t))
                                // Only Anthropic's blocks carry these.
                                || b.get("cache_control").is_some()
                                || b.get("citations").is_some()
                        })
                    })
            })
    }

    /// A block-array system prompt as one string.
    pub(in crate::provider) fn system_text(blocks: &[Value]) -> Result<String, ImportError> {
        let mut texts = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            texts.push(str_field(b, "text", &format!("system[{i}]"))?.to_string());
        }
        Ok(texts.join("\n\n"))
    }

    pub(in crate::provider) fn thread(
        messages: &[Value],
        id: String,
    ) -> Result<Thread, ImportError> {
        thread_in(messages, id, Builder::default())
    }

    /// The messages, built on `b` (a continued import's).
    pub(in crate::provider) fn thread_in(
        messages: &[Value],
        id: String,
        mut b: Builder,
    ) -> Result<Thread, ImportError> {
        for (i, m) in messages.iter().enumerate() {
            let path = format!("messages[{i}]");
            b.marks = Marks::of(m, &path)?;
            let role = str_field(m, "role", &path)?;
            let blocks: Vec<Value> = match m.get("content") {
                Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
                Some(Value::Array(a)) => a.clone(),
                _ => {
                    return Err(err(
                        format!("{path}.content"),
                        "must be a string or an array",
                    ))
                }
            };
            match role {
                "user" => user(&mut b, &blocks, &path)?,
                "assistant" => assistant(&mut b, &blocks, &path)?,
                other => {
                    return Err(err(
                        format!("{path}.role"),
                        format!("{other:?} is not user or assistant"),
                    ))
                }
            }
        }
        protect_before_compaction(&mut b.messages);
        Ok(b.thread(id))
    }

    /// Tool results first (one tool message each), then the user's own
    /// blocks as one user message.
    fn user(b: &mut Builder, blocks: &[Value], path: &str) -> Result<(), ImportError> {
        let mut own = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let bpath = format!("{path}.content[{j}]");
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    let call_id = str_field(block, "tool_use_id", &bpath)?;
                    let text = result_text(block.get("content"), &bpath)?;
                    let failed = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    b.result(
                        call_id,
                        ToolContent::Text(text),
                        failed,
                        &format!("{bpath}.tool_use_id"),
                    )?;
                    // Blocks (images, documents, search results) and keys
                    // such as `cache_control` go back as they came.
                    let plain = !block.get("content").is_some_and(Value::is_array);
                    let modelled: &[&str] = if plain {
                        &["type", "tool_use_id", "content", "is_error"]
                    } else {
                        &[]
                    };
                    b.set_result_wire(
                        wire_unless(Dialect::AnthropicMessages, "tool_result", block, modelled)
                            .map(|p| ContentPart::Provider(*p)),
                    );
                }
                _ => own.push(part(block, &bpath)?),
            }
        }
        if !own.is_empty() {
            b.push(Role::User, content_of(own));
        }
        Ok(())
    }

    fn assistant(b: &mut Builder, blocks: &[Value], path: &str) -> Result<(), ImportError> {
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let bpath = format!("{path}.content[{j}]");
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => calls.push(ToolCall {
                    wire: wire_unless(
                        Dialect::AnthropicMessages,
                        "tool_use",
                        block,
                        &["type", "id", "name", "input"],
                    ),
                    id: str_field(block, "id", &bpath)?.to_string(),
                    name: str_field(block, "name", &bpath)?.to_string(),
                    arguments: block.get("input").cloned().unwrap_or(Value::Null),
                }),
                _ => parts.push(part(block, &bpath)?),
            }
        }
        b.push(Role::Assistant, content_of(parts));
        let at = b.messages.len() - 1;
        for c in calls {
            b.call(at, c);
        }
        Ok(())
    }

    /// A tool result's text: a string as it is, blocks as text with
    /// images (screenshots) as short references, never inline data.
    pub(in crate::provider) fn result_text(
        content: Option<&Value>,
        path: &str,
    ) -> Result<String, ImportError> {
        Ok(match content {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => Content::Parts(
                parts
                    .iter()
                    .enumerate()
                    .map(|(k, p)| part(p, &format!("{path}.content[{k}]")))
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .flat_text(),
            Some(_) => {
                return Err(err(
                    format!("{path}.content"),
                    "must be a string or an array",
                ))
            }
        })
    }

    fn part(block: &Value, path: &str) -> Result<ContentPart, ImportError> {
        let kind = block.get("type").and_then(Value::as_str);
        // A block compactd sends back otherwise than it came (with
        // `cache_control`, citations, a url-less image…) is carried as is.
        let modelled: &[&str] = match kind {
            Some("text") => &["type", "text"],
            Some("image") => &["type", "source"],
            Some("thinking") => &["type", "thinking", "signature"],
            Some("redacted_thinking") => &["type", "data"],
            _ => &[],
        };
        if let Some(k) = kind.filter(|_| !only_keys(block, modelled)) {
            return Ok(carried(Dialect::AnthropicMessages, k, block));
        }
        match kind {
            Some("text") => Ok(ContentPart::Text {
                text: str_field(block, "text", path)?.to_string(),
            }),
            Some("image") => {
                let source = block
                    .get("source")
                    .ok_or_else(|| err(format!("{path}.source"), "is required"))?;
                let url = match source.get("type").and_then(Value::as_str) {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        str_field(source, "media_type", &format!("{path}.source"))?,
                        str_field(source, "data", &format!("{path}.source"))?
                    ),
                    Some("url") => str_field(source, "url", &format!("{path}.source"))?.to_string(),
                    other => {
                        return Err(err(
                            format!("{path}.source.type"),
                            format!("{other:?} is not base64 or url"),
                        ))
                    }
                };
                Ok(ContentPart::Image { url })
            }
            Some("thinking") => Ok(ContentPart::Thinking {
                thinking: str_field(block, "thinking", path)?.to_string(),
                signature: str_field(block, "signature", path)?.to_string(),
            }),
            Some("redacted_thinking") => Ok(ContentPart::RedactedThinking {
                data: str_field(block, "data", path)?.to_string(),
            }),
            Some(other) => Ok(carried(Dialect::AnthropicMessages, other, block)),
            None => Err(err(format!("{path}.type"), "is required")),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::testgen::{self, calls, msg, opts, result, summary};
    use super::*;
    use crate::render::Origin;

    #[test]
    fn snapshots() {
        for (name, req) in testgen::fixtures() {
            let body = to_anthropic(&req, &opts());
            check_structure(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_json_snapshot!(name, body);
        }
    }

    #[test]
    fn deterministic_bytes() {
        for (_, req) in testgen::fixtures() {
            let a = serde_json::to_string(&to_anthropic(&req, &opts())).unwrap();
            let b = serde_json::to_string(&to_anthropic(&req.clone(), &opts())).unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn max_tokens_default_and_override() {
        let req = Request {
            system: None,
            messages: vec![msg(Role::User, "hi")],
            tools: Vec::new(),
            notes: Vec::new(),
        };
        assert_eq!(to_anthropic(&req, &opts())["max_tokens"], json!(4096));
        let o = ProviderOptions {
            max_output_tokens: Some(100),
            ..opts()
        };
        assert_eq!(to_anthropic(&req, &o)["max_tokens"], json!(100));
    }

    #[test]
    fn empty_and_summary_first_get_a_user_turn() {
        let empty = Request {
            system: Some("  ".into()),
            messages: Vec::new(),
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_anthropic(&empty, &opts());
        assert!(body.get("system").is_none());
        assert_eq!(body["messages"][0]["content"][0]["text"], CONTINUATION_TEXT);
        check_structure(&body).unwrap();

        let req = Request {
            system: None,
            messages: vec![msg(Role::Developer, "rules"), summary("sum")],
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_anthropic(&req, &opts());
        assert_eq!(body["system"], "rules");
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["messages"][1]["content"][0]["text"], "sum");
    }

    #[test]
    fn results_first_even_when_user_text_precedes_them() {
        // A rehydrated user message rendered between a call and its result.
        let req = Request {
            system: None,
            messages: vec![
                msg(Role::User, "go"),
                calls("", &[("c1", "f", json!(3))]),
                RenderedMessage {
                    origin: Origin::Rehydrated,
                    ..msg(Role::User, "artifact text")
                },
                result("c1", "f", "  ", false),
            ],
            tools: Vec::new(),
            notes: Vec::new(),
        };
        let body = to_anthropic(&req, &opts());
        check_structure(&body).unwrap();
        assert_eq!(
            body["messages"][1]["content"][0]["input"],
            json!({"value": 3})
        );
        let user = &body["messages"][2]["content"];
        assert_eq!(user[0]["type"], "tool_result");
        assert_eq!(user[0]["content"], EMPTY_TEXT);
        assert_eq!(user[1]["text"], "artifact text");
    }

    #[test]
    fn image_sources() {
        assert_eq!(
            image_source("data:image/webp;charset=x;base64,AAAA"),
            Some(json!({"type": "base64", "media_type": "image/webp", "data": "AAAA"}))
        );
        assert_eq!(image_source("data:image/svg+xml,<svg/>"), None);
        assert_eq!(image_source("data:;base64,AAAA"), None);
        assert_eq!(
            image_source("data:image/JPG;base64,/9j/"),
            Some(json!({"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}))
        );
        assert_eq!(
            image_source("https://x/y.png"),
            Some(json!({"type": "url", "url": "https://x/y.png"}))
        );
    }

    fn body(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 10, "messages": messages})
    }

    fn use_block(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "f", "input": {}})
    }

    fn result_block(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
    }

    #[test]
    fn rejects_orphan_tool_result() {
        let err = check_structure(&body(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [result_block("x")]},
        ])))
        .unwrap_err();
        assert!(err.contains("no tool_use"), "{err}");
    }

    #[test]
    fn rejects_unanswered_tool_use() {
        let err = check_structure(&body(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use_block("a"), use_block("b")]},
            {"role": "user", "content": [result_block("a")]},
        ])))
        .unwrap_err();
        assert!(err.contains("\"b\""), "{err}");
        let err = check_structure(&body(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use_block("a")]},
        ])))
        .unwrap_err();
        assert!(err.contains("never answered"), "{err}");
    }

    #[test]
    fn rejects_non_alternating_and_assistant_first() {
        let err = check_structure(&body(json!([
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
        ])))
        .unwrap_err();
        assert!(err.contains("alternate"), "{err}");
        let err = check_structure(&body(json!([
            {"role": "assistant", "content": "a"},
        ])))
        .unwrap_err();
        assert!(err.contains("first must be user"), "{err}");
        let err = check_structure(&body(json!([
            {"role": "user", "content": "a"},
            {"role": "system", "content": "b"},
        ])))
        .unwrap_err();
        assert!(err.contains("alternate"), "{err}");
    }

    #[test]
    fn rejects_results_after_text_and_blank_content() {
        let err = check_structure(&body(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use_block("a")]},
            {"role": "user", "content": [{"type": "text", "text": "x"}, result_block("a")]},
        ])))
        .unwrap_err();
        assert!(err.contains("must come first"), "{err}");
        let err = check_structure(&body(json!([
            {"role": "user", "content": [{"type": "text", "text": " "}]},
        ])))
        .unwrap_err();
        assert!(err.contains("blank"), "{err}");
        let err = check_structure(&body(json!([{"role": "user", "content": []}]))).unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let err = check_structure(&body(json!([
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b "},
        ])))
        .unwrap_err();
        assert!(err.contains("whitespace"), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]
        #[test]
        fn well_formed_requests_pass_and_keep_all_text(req in testgen::request()) {
            let body = to_anthropic(&req, &opts());
            prop_assert_eq!(check_structure(&body), Ok(()));
            prop_assert_eq!(testgen::assert_no_loss(&req, &body), Ok(()));
            // Every call and every result survives as exactly one block.
            let blocks: Vec<&Value> = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["content"].as_array().unwrap())
                .collect();
            let uses = blocks.iter().filter(|b| b["type"] == "tool_use").count();
            let results = blocks.iter().filter(|b| b["type"] == "tool_result").count();
            let calls: usize = req.messages.iter().map(|m| m.tool_calls.len()).sum();
            let tools = req.messages.iter().filter(|m| m.role == Role::Tool).count();
            prop_assert_eq!(uses, calls);
            prop_assert_eq!(results, tools);
        }
    }
}
