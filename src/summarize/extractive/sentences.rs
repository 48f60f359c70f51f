//! Sentences and blocks of a message, and what a sentence says: a request,
//! a decision, a code block, a list.

use super::super::text::{clean, collapse_ws, find_ascii_ci, strip_list_marker};
use crate::model::{Decision, Message};

use super::*;

/// A sentence of a message, whitespace-collapsed.
#[derive(Debug, Clone)]
pub(super) struct Sentence {
    pub(super) text: String,
    pub(super) question: bool,
}

/// Blocks of prose: paragraphs, list items and headings, with fenced code skipped
/// (a `must` in a code comment is not a user constraint).
pub(super) fn blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_code = false;
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.trim().is_empty() {
            out.push(collapse_ws(cur));
        }
        cur.clear();
    };
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with("```") || line.starts_with("~~~") {
            flush(&mut cur, &mut out);
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if line.is_empty() {
            flush(&mut cur, &mut out);
            continue;
        }
        let heading = line.starts_with('#');
        let (item, body) = strip_list_marker(line);
        if item || heading {
            flush(&mut cur, &mut out);
        }
        cur.push(' ');
        cur.push_str(if heading {
            line.trim_start_matches('#')
        } else {
            body
        });
        if heading {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// Splits a block at `.`, `!`, `?` followed by whitespace (or the end), except
/// after common abbreviations; closing quotes and brackets stay with the sentence.
pub(super) fn split_sentences(block: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = block.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        if matches!(c, '.' | '!' | '?') {
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j].1, '"' | '\'' | ')' | ']' | '”' | '’') {
                j += 1;
            }
            let at_break = j >= chars.len() || chars[j].1.is_whitespace();
            if at_break && !(c == '.' && is_abbreviation(&block[start..pos])) {
                let end = chars.get(j).map(|&(p, _)| p).unwrap_or(block.len());
                push_sentence(&mut out, &block[start..end]);
                start = end;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    push_sentence(&mut out, &block[start..]);
    out
}

pub(super) fn push_sentence(out: &mut Vec<Sentence>, s: &str) {
    let text = s.trim();
    if text.chars().any(char::is_alphanumeric) {
        out.push(Sentence {
            text: text.to_string(),
            question: text
                .trim_end_matches(['"', '\'', ')', ']', '”', '’'])
                .ends_with('?'),
        });
    }
}

pub(super) fn is_abbreviation(before: &str) -> bool {
    let last = before.rsplit(char::is_whitespace).next().unwrap_or("");
    let last = last.trim_start_matches(['(', '"', '\'']).to_lowercase();
    (last.chars().count() == 1 && last.chars().all(char::is_alphabetic))
        || ABBREVIATIONS.contains(&last.as_str())
}

pub(super) fn sentences(text: &str) -> Vec<Sentence> {
    blocks(text)
        .iter()
        .flat_map(|b| split_sentences(b))
        .collect()
}

/// A question phrased as a request ("Can you make sure we never…?") still states
/// what the user wants, so its constraint cues count.
pub(super) fn is_request_question(lower: &str) -> bool {
    REQUEST_PREFIXES.iter().any(|p| lower.starts_with(p))
}

/// How a request in question form opens.
pub(super) const REQUEST_PREFIXES: &[&str] = &[
    "can you ",
    "could you ",
    "would you ",
    "will you ",
    "please ",
    "can we ",
];

/// The request after its "Could you" / "Can we" / "Please".
pub(super) fn request_body(sentence: &str) -> &str {
    let lower = sentence.to_ascii_lowercase();
    for p in REQUEST_PREFIXES {
        if lower.starts_with(p) && sentence.is_char_boundary(p.len()) {
            return &sentence[p.len()..];
        }
    }
    sentence
}

/// Lower case with `’` folded and leading interjections ("OK, so next,") removed.
pub(super) fn decision_view(sentence: &str) -> String {
    let lower = sentence.to_lowercase().replace('’', "'");
    let mut s = lower.as_str();
    for _ in 0..3 {
        let Some(w) = INTERJECTIONS.iter().find(|w| {
            s.strip_prefix(**w)
                .is_some_and(|r| r.starts_with([',', ' ', '!', '.', ':']))
        }) else {
            break;
        };
        s = s[w.len()..].trim_start_matches([',', ' ', '!', '.', ':']);
    }
    s.to_string()
}

/// The decision `sentence` of message `m` states, if it states one: dated
/// by the message.
pub(super) fn decision_of(sentence: &str, m: &Message) -> Option<Decision> {
    let view = decision_view(sentence);
    let padded = format!(" {view}");
    let end = view.trim_end_matches(['.', '!', ' ']);
    let is_decision = DECISION_PREFIXES.iter().any(|p| view.starts_with(p))
        || DECISION_INFIXES.iter().any(|p| padded.contains(p))
        || DECISION_SUFFIXES.iter().any(|p| end.ends_with(p));
    if !is_decision {
        return None;
    }
    let split = find_ascii_ci(sentence, " because ")
        .map(|i| (i, " because ".len()))
        .or_else(|| find_ascii_ci(sentence, ", since ").map(|i| (i, ", since ".len())));
    let (decision, rationale) = match split {
        Some((i, n)) => (&sentence[..i], &sentence[i + n..]),
        None => (sentence, ""),
    };
    let decision = decision.trim().trim_end_matches(',');
    let rationale = rationale.trim().trim_end_matches(['.', '!']);
    Some(Decision {
        decision: clean(decision, DECISION_MAX_CHARS),
        rationale: clean(rationale, RATIONALE_MAX_CHARS),
        turn: m.turn,
        timestamp: m.metadata.created_at.clone(),
    })
}

/// The contents of a message's fenced code blocks, joined.
pub(super) fn fenced_code(text: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The last list (≥ 2 top-level items) of a message, outside code fences.
pub(super) fn last_list(text: &str) -> Option<Vec<String>> {
    let mut lists: Vec<Vec<String>> = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut in_code = false;
    for raw in text.lines() {
        let trimmed = raw.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        if in_code || trimmed.is_empty() {
            continue;
        }
        let indent = raw.len() - raw.trim_start().len();
        let (item, body) = strip_list_marker(trimmed);
        if item && indent < 2 {
            cur.push(clean(body, PLAN_STEP_MAX_CHARS));
        } else if indent >= 2 && !cur.is_empty() {
            // A nested item or continuation line belongs to the current step.
        } else if !cur.is_empty() {
            lists.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        lists.push(cur);
    }
    lists.into_iter().rev().find(|l| l.len() >= 2).map(|mut l| {
        l.truncate(PLAN_MAX_STEPS);
        l
    })
}
