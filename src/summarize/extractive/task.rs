//! The current task, and the requests of a person quoted as they were
//! typed (long ones cut in the middle, saying how much was left out).

use super::super::shapes;
use super::super::text::{cap_chars, clean, collapse_ws, words};
use crate::model::{Message, Role, ToolResultEnvelope};

use super::*;

/// Longest message that reads as a reply to the assistant rather than a
/// request of its own, in characters and words ("3", "go for it",
/// "comtinue", "好的"): judged by size and by naming nothing, in any
/// language, never by a list of words.
pub(super) const REPLY_MAX_CHARS: usize = 24;
pub(super) const REPLY_MAX_WORDS: usize = 3;
/// Characters of CJK text that still read as a short reply (no spaces
/// between its words, so it is one "word").
pub(super) const REPLY_MAX_CJK_CHARS: usize = 4;
/// Of the request and of the assistant text a reply answers: what is kept.
pub(super) const TASK_PART_CHARS: usize = 200;

/// A message too short to be a request on its own: it answers whatever the
/// assistant said before it.
pub(super) fn is_short_reply(text: &str) -> bool {
    let chars = text.chars().count();
    if chars > REPLY_MAX_CHARS || words(text).len() > REPLY_MAX_WORDS {
        return false;
    }
    if text.chars().any(crate::recall::tokenize::is_cjk) && chars > REPLY_MAX_CJK_CHARS {
        return false;
    }
    !shapes::scan(text).iter().any(|(sh, _)| sh.is_reference())
}

/// What the span's work is about: the latest substantive request (its
/// opening sentences), and when a person's latest message is a short
/// reply, that reply with what it answers (the numbered option it picks,
/// else the end of the assistant message before it).
pub(super) fn current_task(messages: &[&Message]) -> Option<String> {
    let typed: Vec<(usize, String)> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User && m.tool_result.is_none())
        .map(|(i, m)| (i, collapse_ws(&m.content.text())))
        .filter(|(_, t)| !t.is_empty())
        .collect();
    let (last_at, last) = typed.last()?;
    let request = typed
        .iter()
        .rev()
        .find(|(_, t)| !is_short_reply(t))
        .map(|(_, t)| opening(t, TASK_PART_CHARS));
    if !is_short_reply(last) {
        return request;
    }
    // The assistant text since the person's previous message: a reply
    // that follows their own request adds to it, it answers nothing.
    let since = typed.len().checked_sub(2).map_or(0, |k| typed[k].0 + 1);
    let answered = messages[since..*last_at]
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant && m.tool_result.is_none())
        .map(|m| m.content.text())
        .find(|t| !t.trim().is_empty())
        .map(|t| answered_part(&t, last));
    let reply = match answered {
        Some(a) => format!("\"{last}\", answering: {a}"),
        None => format!("\"{last}\""),
    };
    let task = match request {
        Some(r) => format!("{r} (then {reply})"),
        None => reply,
    };
    Some(cap_chars(&task, TASK_MAX_CHARS))
}

/// The opening sentences of `text`, up to `max` characters.
pub(super) fn opening(text: &str, max: usize) -> String {
    let mut out = String::new();
    for s in sentences(text) {
        if !out.is_empty() && out.chars().count() + s.text.chars().count() > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s.text);
    }
    if out.is_empty() {
        out = text.to_string();
    }
    cap_chars(&out, max)
}

/// What a short reply answers in the assistant's `text`: the item of a
/// numbered list it names by number, else the closing sentences.
pub(super) fn answered_part(text: &str, reply: &str) -> String {
    let digits = reply.trim_matches(|c: char| !c.is_ascii_digit());
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        for line in text.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix(digits) else {
                continue;
            };
            if let Some(item) = rest.strip_prefix(['.', ')', ':']) {
                return cap_chars(
                    &collapse_ws(&format!("{digits}. {}", item.trim())),
                    TASK_PART_CHARS,
                );
            }
        }
    }
    let all = sentences(text);
    let mut out: Vec<&str> = Vec::new();
    let mut chars = 0;
    for s in all.iter().rev() {
        let n = s.text.chars().count();
        if !out.is_empty() && chars + n > TASK_PART_CHARS {
            break;
        }
        chars += n + 1;
        out.push(&s.text);
    }
    out.reverse();
    let joined = out.join(" ");
    if joined.chars().count() <= TASK_PART_CHARS {
        return joined;
    }
    // One long closing sentence: its end is what was asked.
    let skip = joined.chars().count() - TASK_PART_CHARS;
    format!("… {}", joined.chars().skip(skip).collect::<String>())
}

pub(super) fn error_line(env: &ToolResultEnvelope) -> Option<String> {
    let line = crate::model::error_message(&env.content)?;
    let line = clean(&line, ERROR_MAX_CHARS);
    (!line.is_empty()).then_some(line)
}

pub(super) fn is_artifact_key(k: &str) -> bool {
    k == "artifact_id" || k.ends_with("_artifact_id") || k == "artifactId"
}

/// A message quoted whole up to this many characters (whitespace
/// collapsed); a longer one keeps its opening and its end.
pub(super) const REQUEST_WHOLE_CHARS: usize = 320;
/// Of a long message: the opening kept (what the request is; the facts in
/// its body are the facts section's, and the whole is in the archive) …
pub(super) const REQUEST_HEAD_CHARS: usize = 200;
/// … and its end (where a long message usually puts the actual ask).
pub(super) const REQUEST_TAIL_CHARS: usize = 60;
/// What marks the middle left out of a long quote.
pub(super) const CUT_MARK: &str = " characters left out) … ";

/// What a person typed in `messages`, in order, as `(turn N) text`: user
/// messages that are not tool results, whitespace collapsed, short ones
/// whole and long ones by their opening. No cue words, no ranking: a
/// request in any language or wording is quoted the same way. Usable by any
/// summarizer.
pub fn quote_requests(messages: &[&Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User && m.tool_result.is_none())
        .filter_map(|m| {
            let text = collapse_ws(&m.content.text());
            (!text.is_empty()).then(|| format!("(turn {}) {}", m.turn, excerpt(&text)))
        })
        .collect()
}

/// `text` whole when short, else its opening and its end with how much
/// was left out between them, cut at char boundaries.
pub(super) fn excerpt(text: &str) -> std::borrow::Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= REQUEST_WHOLE_CHARS {
        return std::borrow::Cow::Borrowed(text);
    }
    let head: String = text.chars().take(REQUEST_HEAD_CHARS).collect();
    let tail: String = text.chars().skip(chars - REQUEST_TAIL_CHARS).collect();
    std::borrow::Cow::Owned(format!(
        "{} … ({}{CUT_MARK}{}",
        head.trim_end(),
        chars - REQUEST_HEAD_CHARS - REQUEST_TAIL_CHARS,
        tail.trim_start()
    ))
}
