//! How much a fact weighs: its source, its cues, how specific it is, and
//! how often later turns come back to it (echoes).

use crate::hash::{FastMap, FastSet};

use super::super::shapes;
use super::super::text::words;
use crate::model::{Message, Role};

use super::*;

/// What a span keeps coming back to: per term, the turns whose typed or
/// written text (user and assistant messages, call arguments; not tool
/// output) names it. A name reused turns later is one the conversation
/// depends on; a word every turn uses says nothing. No word lists: any
/// term, any language.
#[derive(Debug, Default)]
pub struct Echoes {
    pub(super) turns: FastMap<String, (u32, u32)>,
    pub(super) total_turns: u32,
}

/// Shortest term that counts (shorter ones are mostly function words).
pub(super) const ECHO_MIN_CHARS: usize = 4;
/// Points per echoed term of an entry, and the most terms counted.
pub(super) const ECHO_POINTS: i32 = 4;
pub(super) const ECHO_MAX_TERMS: i32 = 4;

impl Echoes {
    /// The echoes of `messages`.
    pub fn of(messages: &[&Message]) -> Echoes {
        // Each message's distinct terms depend on it alone: found on every
        // core, counted in order.
        let terms = crate::par::map(
            messages,
            |m| m.byte_len(),
            |m| {
                if m.tool_result.is_some() || !matches!(m.role, Role::User | Role::Assistant) {
                    return Vec::new();
                }
                let mut text = m.content.text().into_owned();
                for c in &m.tool_calls {
                    text.push('\n');
                    text.push_str(&c.arguments_json());
                }
                let mut seen = FastSet::default();
                words(&text)
                    .into_iter()
                    .filter(|w| w.chars().count() >= ECHO_MIN_CHARS && seen.insert(w.clone()))
                    .collect()
            },
        );
        let mut e = Echoes::default();
        let mut last_turn = None;
        for (m, terms) in messages.iter().zip(terms) {
            if last_turn != Some(m.turn) {
                e.total_turns += 1;
                last_turn = Some(m.turn);
            }
            for w in terms {
                let at = e.turns.entry(w).or_insert((0, u32::MAX));
                if at.1 != m.turn {
                    at.0 += 1;
                    at.1 = m.turn;
                }
            }
        }
        e
    }

    /// Points for `text`: its terms that at least two turns name, but not
    /// a quarter of them.
    pub(super) fn bonus(&self, text: &str) -> i32 {
        if self.turns.is_empty() {
            return 0;
        }
        let common = (self.total_turns / 4).max(2);
        let mut seen = FastSet::default();
        let echoed = words(text)
            .into_iter()
            .filter(|w| seen.insert(w.clone()))
            .filter(|w| {
                self.turns
                    .get(w)
                    .is_some_and(|&(n, _)| n >= 2 && n <= common)
            })
            .count();
        ECHO_POINTS * (echoed as i32).min(ECHO_MAX_TERMS)
    }
}

/// True when `fact` carries a hard-constraint cue (never/must/budget/prefer…,
/// an amount with a limit word, a date with a deadline word). Facts are plain
/// strings, so this is recomputed from the text on every cycle: the
/// classification is stable across merges.
pub fn is_constraint(fact: &str) -> bool {
    let w = words(fact);
    cues(fact, &w).constraint
}

/// Prefix of a fact the assistant stated (user and system facts are verbatim).
pub(super) const ASSISTANT_TAG: &str = "assistant: ";
/// Prefix of a fact read from a tool's output.
pub(super) const TOOL_TAG: &str = "tool ";

/// Who a fact came from, read back from its text, so a fact ranks the same
/// after any number of merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    User,
    Assistant,
    Tool,
}

pub(super) fn source_of(fact: &str) -> Source {
    if fact.starts_with(ASSISTANT_TAG) {
        Source::Assistant
    } else if fact.starts_with(TOOL_TAG) && fact.contains(": ") {
        Source::Tool
    } else {
        Source::User
    }
}

/// How much losing `fact` would hurt when the cap forces a choice: who said
/// it (the user and the system first), whether it binds the agent, whether
/// the user said it of themselves, and how specific it is (a sentence with
/// an order id or an amount beats a generic one).
pub fn fact_score(fact: &str) -> i32 {
    // A statement of several sentences ranks as its best sentence: joined,
    // its cues and values would add up past a rule said in one.
    let source = source_of(fact);
    let (tag, body) = match source {
        Source::Assistant => (ASSISTANT_TAG, &fact[ASSISTANT_TAG.len()..]),
        Source::User => ("", fact),
        Source::Tool => return sentence_score(fact),
    };
    let sentences = split_sentences(body);
    if sentences.len() < 2 {
        return sentence_score(fact);
    }
    sentences
        .iter()
        .map(|s| sentence_score(&format!("{tag}{}", s.text)))
        .max()
        .unwrap_or(0)
}

/// [`fact_score`] of one sentence.
pub(super) fn sentence_score(fact: &str) -> i32 {
    let source = source_of(fact);
    let w = words(fact);
    let c = cues(fact, &w);
    let mut score = match source {
        Source::User => 40,
        // Tool facts are the errors a tool's output reports.
        Source::Tool => 35,
        Source::Assistant => 15,
    };
    let body = fact.strip_prefix(ASSISTANT_TAG).unwrap_or(fact);
    // A rule addressed to the agent ("Never restart ledger-db", "Do not
    // email the customer") binds; one about the speaker ("I never know how
    // these dashboards work") is small talk with a rule word in it.
    let addressed = c.imperative || decision_view(body).starts_with("do not ");
    let binds = c.hard_value || (c.rule && addressed);
    score += if binds {
        25
    } else if c.constraint {
        // A rule about the speaker, or a topic word (budget, prefer): a
        // preference lasts the whole conversation, so it outranks a task.
        12
    } else if c.imperative && source == Source::User {
        // A request: it mattered in its turn, less once it is done.
        8
    } else if c.soft {
        5
    } else {
        0
    };
    if source == Source::User && first_person(&w) {
        score += 6;
    }
    // Specific over generic: an id, an amount, a path or a name is what a
    // reader cannot reconstruct.
    let specific = specificity(fact);
    score += if specific > 0 {
        2 * specific.min(24)
    } else if binds {
        0
    } else {
        -12
    };
    score - (fact.chars().count() / 60) as i32
}

/// Points for concrete content: shaped values, numbers, names.
pub(super) fn specificity(text: &str) -> i32 {
    let shaped: i32 = shapes::scan(text)
        .iter()
        .take(4)
        .map(|(s, _)| s.weight())
        .sum();
    // A number: an amount or a count says more than an index ("dataset 2").
    let number = text
        .split_whitespace()
        .map(|t| t.trim_start_matches(['$', '€', '£', '(']))
        .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
        .map(|t| {
            if t.chars().take_while(char::is_ascii_digit).count() > 2 {
                3
            } else {
                1
            }
        })
        .max()
        .unwrap_or(0);
    // Capitalised words after the first: names of people, products, places.
    let names = text
        .split_whitespace()
        .skip(1)
        .filter(|t| {
            let t = t.trim_start_matches(['(', '"', '\'']);
            t.len() > 1
                && t.starts_with(|c: char| c.is_uppercase())
                && t.chars().skip(1).any(char::is_lowercase)
        })
        .count()
        .min(3) as i32
        * 3;
    shaped + number + names
}

pub(super) fn first_person(w: &[String]) -> bool {
    w.iter().any(|x| {
        matches!(
            x.as_str(),
            "i" | "i'm"
                | "i'd"
                | "i've"
                | "i'll"
                | "my"
                | "me"
                | "we"
                | "we're"
                | "we've"
                | "our"
                | "us"
        )
    })
}
