//! Compaction quality signals, read off the thread and the plan at Render:
//! how often the agent reaches for compacted content (`read_artifact`
//! calls), and whether its latest question to the user asked for something
//! the thread already held but the prompt no longer showed verbatim — the
//! canary for a compaction that lost what the agent needed.
//!
//! The question check is a heuristic with two halves that must both hold:
//! the agent's last reply (no tool calls, answered by the user since) asks
//! for something, and the specific words of its question occur in evicted
//! messages and in no message still shown verbatim. Wording alone never
//! raises it: a question about something the thread never held does not.

use std::collections::BTreeSet;

use crate::model::{Action, CompactionPlan, Message, Role, Thread};

/// What one Render observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QualitySignals {
    /// `read_artifact` calls the agent has just made: those of its latest
    /// message, when only their results follow it. Each call is seen by
    /// exactly one Render, however many Renders a turn makes.
    pub read_artifact_calls_new: u32,
    /// `read_artifact` calls in the whole thread.
    pub read_artifact_calls_in_thread: u32,
    /// The agent asked for context the thread had (see the module doc).
    pub asked_for_compacted: Option<AskedForCompacted>,
}

/// The evidence behind an "asked for context it had" signal (ids and
/// counts only: the words themselves are content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedForCompacted {
    /// The agent's message that asked.
    pub question_message_id: String,
    /// Evicted messages that held what it asked about (first 20).
    pub evicted_message_ids: Vec<String>,
    /// How many distinct words of the question only evicted messages held.
    pub lost_terms: u32,
    /// Some of them are still in a summary the prompt shows: the agent
    /// had a summary of it (the model ignored it, or the summary was too thin).
    pub in_summary: bool,
}

/// Reads the signals; `tool` is the rehydration tool's name.
pub fn quality_signals(thread: &Thread, plan: &CompactionPlan, tool: &str) -> QualitySignals {
    let calls =
        |m: &std::sync::Arc<Message>| m.tool_calls.iter().filter(|c| c.name == tool).count() as u32;
    let mut out = QualitySignals {
        read_artifact_calls_in_thread: thread.messages.iter().map(calls).sum(),
        ..Default::default()
    };
    // The agent's latest message, if nothing but tool results came after it.
    let latest = thread
        .messages
        .iter()
        .rev()
        .find(|m| m.role != Role::Tool)
        .filter(|m| m.role == Role::Assistant);
    out.read_artifact_calls_new = latest.map_or(0, calls);
    out.asked_for_compacted = asked_for_compacted(thread, plan);
    out
}

/// Words that say nothing about *what* was asked for.
const STOP: &[&str] = &[
    "about",
    "above",
    "after",
    "again",
    "also",
    "another",
    "anything",
    "been",
    "before",
    "being",
    "below",
    "both",
    "can't",
    "cannot",
    "clarify",
    "confirm",
    "could",
    "details",
    "does",
    "doing",
    "done",
    "each",
    "earlier",
    "either",
    "else",
    "exactly",
    "from",
    "give",
    "going",
    "have",
    "having",
    "help",
    "here",
    "information",
    "into",
    "just",
    "know",
    "like",
    "look",
    "make",
    "mean",
    "mentioned",
    "more",
    "most",
    "much",
    "must",
    "need",
    "needed",
    "once",
    "only",
    "other",
    "please",
    "previous",
    "previously",
    "provide",
    "question",
    "rather",
    "really",
    "remind",
    "repeat",
    "said",
    "same",
    "send",
    "share",
    "should",
    "some",
    "something",
    "specify",
    "still",
    "sure",
    "tell",
    "than",
    "thank",
    "thanks",
    "that",
    "that's",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "thing",
    "things",
    "this",
    "those",
    "through",
    "told",
    "want",
    "wanted",
    "were",
    "what",
    "what's",
    "when",
    "where",
    "which",
    "while",
    "will",
    "with",
    "would",
    "you're",
    "your",
    "yours",
    "again?",
];

/// Openings of a request that is not phrased as a question.
const REQUEST_CUES: &[&str] = &[
    "remind me",
    "please provide",
    "please share",
    "please confirm",
    "please send",
    "please resend",
    "please re-send",
    "please paste",
    "please let me know",
    "let me know",
    "i need",
    "i'll need",
    "i will need",
    "could you",
    "can you",
    "would you",
];

fn asked_for_compacted(thread: &Thread, plan: &CompactionPlan) -> Option<AskedForCompacted> {
    if plan.is_empty() {
        return None;
    }
    // The moment to look: the agent replied without acting, the user has
    // answered, and the next model call is being rendered. Once per answer.
    let [.., question, answer] = thread.messages.as_slice() else {
        return None;
    };
    if answer.role != Role::User
        || question.role != Role::Assistant
        || !question.tool_calls.is_empty()
    {
        return None;
    }
    let text = question.content.text();
    // Bounded work whatever the request holds: the end of the reply (where
    // a question to the user is), at most MAX_TERMS words, and one pass of
    // word splitting over each message.
    let terms = request_terms(tail(&text, QUESTION_BYTES));
    if terms.is_empty() {
        return None;
    }
    let actions = plan.actions();
    let mut kept: BTreeSet<&str> = BTreeSet::new();
    let mut lost_in: Vec<(String, BTreeSet<&str>)> = Vec::new();
    for m in &thread.messages {
        if m.id == question.id || m.id == answer.id {
            continue;
        }
        let found = found_in(&m.searchable_text().to_lowercase(), &terms);
        if found.is_empty() {
            continue;
        }
        match actions.get(m.id.as_str()) {
            None | Some(Action::Include) => kept.extend(found),
            Some(_) => lost_in.push((m.id.clone(), found)),
        }
    }
    let lost: BTreeSet<&str> = lost_in
        .iter()
        .flat_map(|(_, f)| f.iter().copied())
        .filter(|t| !kept.contains(t))
        .collect();
    // One specific term (an id, a number, a name) is enough; plain words
    // need company.
    let score: usize = lost
        .iter()
        .map(|t| if is_specific(t) { 2 } else { 1 })
        .sum();
    if score < 2 {
        return None;
    }
    let lost_terms: BTreeSet<String> = lost.iter().map(|t| t.to_string()).collect();
    let in_summary = plan
        .summarizations
        .iter()
        .map(|s| &*s.summary)
        .chain(plan.externalizations.iter().map(|e| &e.summary))
        .any(|s| !found_in(&s.render_as_message().to_lowercase(), &lost_terms).is_empty());
    Some(AskedForCompacted {
        question_message_id: question.id.clone(),
        evicted_message_ids: lost_in
            .iter()
            .filter(|(_, f)| f.iter().any(|t| lost.contains(t)))
            .map(|(id, _)| id.clone())
            .take(20)
            .collect(),
        lost_terms: lost.len() as u32,
        in_summary,
    })
}

/// The end of the agent's reply that is read for questions.
const QUESTION_BYTES: usize = 4 * 1024;
/// Most words of a question that are looked for.
const MAX_TERMS: usize = 32;

/// The last `max` bytes of `s` (at a char boundary).
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The terms that occur as whole tokens of `lower` (lower-cased text).
fn found_in<'t>(lower: &str, terms: &'t BTreeSet<String>) -> BTreeSet<&'t str> {
    tokens(lower)
        .filter_map(|w| terms.get(w).map(String::as_str))
        .collect()
}

/// The words of the sentences that ask for something: a question, or a
/// request ("please share…", "I need…"); at most [`MAX_TERMS`], specific
/// ones first.
fn request_terms(text: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = BTreeSet::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let end = matches!(b, b'?' | b'.' | b'!' | b'\n')
            // A dot inside a word (a file name, a version) does not end a sentence.
            && !(b == b'.' && bytes.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()));
        if end || i + 1 == bytes.len() {
            let sentence = &text[start..=i];
            let lower = sentence.to_lowercase();
            let asks = b == b'?' || REQUEST_CUES.iter().any(|c| lower.contains(c));
            if asks {
                out.extend(words(sentence));
            }
            start = i + 1;
        }
    }
    if out.len() > MAX_TERMS {
        let mut ranked: Vec<String> = out.into_iter().collect();
        ranked.sort_by_key(|t| (!is_specific(t), std::cmp::Reverse(t.len())));
        ranked.truncate(MAX_TERMS);
        out = ranked.into_iter().collect();
    }
    out
}

/// Identifier-like tokens (letters, digits, `_-./@#$`), trimmed of
/// sentence punctuation: how both questions and messages are split.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let is_part = |c: char| c.is_alphanumeric() || "_-./@#$'".contains(c);
    text.split(move |c: char| !is_part(c))
        .map(|w| w.trim_matches(|c: char| ".-'/".contains(c)))
        .filter(|w| !w.is_empty())
}

/// Candidate words: tokens lower-cased, long enough or holding a digit,
/// not a stop word.
fn words(sentence: &str) -> impl Iterator<Item = String> + '_ {
    tokens(sentence)
        .filter(|w| {
            let digits = w.chars().any(|c| c.is_ascii_digit());
            (w.chars().count() >= 4 || (digits && w.len() >= 2)) && w.len() <= 64
        })
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
}

/// An id, a number or a long word: rare enough that a match means something.
fn is_specific(term: &str) -> bool {
    term.chars().any(|c| c.is_ascii_digit())
        || term.contains(['_', '.', '/', '@', '#', '-'])
        || term.chars().count() >= 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ClearReason, ClearRecord, Content, DropRecord, DroppedSpanIndex, MessageMetadata,
        SpanReference, ToolCall,
    };

    fn msg(id: &str, role: Role, turn: u32, text: &str) -> Message {
        Message {
            id: id.to_string(),
            role,
            content: Content::Text(text.to_string()),
            tool_calls: Vec::new(),
            tool_result: None,
            turn,
            metadata: MessageMetadata::default(),
        }
    }

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            wire: None,
            id: id.into(),
            name: name.into(),
            arguments: serde_json::json!({}),
        }
    }

    fn thread(msgs: Vec<Message>) -> Thread {
        Thread::new("t", msgs)
    }

    fn dropping(t: &Thread, ids: &[usize]) -> CompactionPlan {
        let mut p = CompactionPlan::new("t");
        p.drops.push(DropRecord {
            span: SpanReference::of(t, ids),
            reason: "over budget".into(),
            index: DroppedSpanIndex {
                keywords: Vec::new(),
                summary: String::new(),
                timestamp: None,
            },
            archive_artifact_id: None,
        });
        p
    }

    #[test]
    fn a_question_about_what_was_dropped_is_flagged() {
        let t = thread(vec![
            msg(
                "u1",
                Role::User,
                0,
                "Our travel budget is EUR 4,200 and the offsite is in Lisbon.",
            ),
            msg("a1", Role::Assistant, 0, "Noted."),
            msg("u2", Role::User, 1, "Find flights for the team."),
            msg(
                "a2",
                Role::Assistant,
                1,
                "Which city is the offsite in, and what was the budget again?",
            ),
            msg("u3", Role::User, 2, "Lisbon! I told you."),
        ]);
        let s = quality_signals(&t, &dropping(&t, &[0, 1]), "read_artifact");
        let a = s.asked_for_compacted.expect("flagged");
        assert_eq!(a.question_message_id, "a2");
        assert_eq!(a.evicted_message_ids, vec!["u1".to_string()]);
        assert!(!a.in_summary);
    }

    #[test]
    fn the_same_question_with_everything_verbatim_is_not() {
        let t = thread(vec![
            msg(
                "u1",
                Role::User,
                0,
                "Our travel budget is EUR 4,200 and the offsite is in Lisbon.",
            ),
            msg(
                "a2",
                Role::Assistant,
                1,
                "Which city is the offsite in, and what was the budget again?",
            ),
            msg("u3", Role::User, 2, "Lisbon."),
        ]);
        // The plan touches something else: u1 is still verbatim.
        let mut p = CompactionPlan::new("t");
        p.clearings.push(ClearRecord {
            span: SpanReference::of(&t, &[2]),
            preserved_fields: Default::default(),
            reason: ClearReason::Expired,
            replacement: "[cleared]".into(),
            archive_artifact_id: None,
            archive_note: None,
            strategy: String::new(),
        });
        assert_eq!(
            quality_signals(&t, &p, "read_artifact").asked_for_compacted,
            None
        );
    }

    #[test]
    fn questions_about_new_things_and_replies_that_act_are_not() {
        let t = thread(vec![
            msg(
                "u1",
                Role::User,
                0,
                "Deploy the billing service to staging.",
            ),
            msg("a1", Role::Assistant, 0, "Done."),
            msg(
                "a2",
                Role::Assistant,
                1,
                "Should the rollout include the Kubernetes canary ring?",
            ),
            msg("u3", Role::User, 2, "Yes."),
        ]);
        assert_eq!(
            quality_signals(&t, &dropping(&t, &[0, 1]), "read_artifact").asked_for_compacted,
            None
        );
        // The latest message is not the user's answer: not the moment.
        let t = thread(vec![
            msg("u1", Role::User, 0, "ticket INC-20417 is about the cache"),
            msg(
                "a2",
                Role::Assistant,
                1,
                "What is the ticket number INC-20417 about?",
            ),
        ]);
        assert_eq!(
            quality_signals(&t, &dropping(&t, &[0]), "read_artifact").asked_for_compacted,
            None
        );
    }

    #[test]
    fn read_artifact_calls_are_counted_per_turn_and_thread() {
        let mut a = msg("a1", Role::Assistant, 0, "");
        a.tool_calls.push(call("c1", "read_artifact"));
        let mut b = msg("a2", Role::Assistant, 1, "");
        b.tool_calls.push(call("c2", "read_artifact"));
        b.tool_calls.push(call("c3", "search"));
        let t = thread(vec![a, b]);
        let s = quality_signals(&t, &CompactionPlan::new("t"), "read_artifact");
        assert_eq!(s.read_artifact_calls_in_thread, 2);
        assert_eq!(s.read_artifact_calls_new, 1);
        // Once a reply follows, those calls were seen by an earlier Render.
        let mut t = t;
        t.messages.push(std::sync::Arc::new(msg(
            "a3",
            Role::Assistant,
            1,
            "Read it.",
        )));
        let s = quality_signals(&t, &CompactionPlan::new("t"), "read_artifact");
        assert_eq!(s.read_artifact_calls_new, 0);
    }

    #[test]
    fn request_terms_skip_statements_and_stop_words() {
        let t = request_terms("I ran the tests. Could you share the staging hostname? Thanks.");
        assert!(t.contains("staging") && t.contains("hostname"), "{t:?}");
        assert!(
            !t.contains("tests") && !t.contains("could") && !t.contains("share"),
            "{t:?}"
        );
        assert!(request_terms("All done, the report.pdf is attached.").is_empty());
    }
}
