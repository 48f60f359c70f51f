//! The word lists and cues the extraction reads a sentence by: what marks
//! a constraint, a limit, a deadline, a decision, an open item, a priority,
//! a date or an amount.

use super::super::text::has_phrase;
use crate::model::Priority;

use super::*;

/// Cue words that name a topic of constraints rather than state one ("the
/// budget meeting ran long"): they count as much as a rule only with an
/// amount or a date.
pub(super) const TOPIC_WORDS: &[&str] = &[
    "budget",
    "budgets",
    "deadline",
    "deadlines",
    "prefer",
    "prefers",
    "preferred",
    "preference",
    "preferences",
];
/// Rule words: with [`TOPIC_WORDS`], the cues of a constraint fact.
pub(super) const CONSTRAINT_WORDS: &[&str] = &[
    "never",
    "always",
    "must",
    "mustn't",
    "don't",
    "dont",
    "cannot",
    "can't",
    "shouldn't",
    "only",
    "require",
    "requires",
    "required",
    "requirement",
    "requirements",
    "forbidden",
    "prohibited",
    "mandatory",
    "avoid",
    "strictly",
    "banned",
    "ban",
    "disallowed",
    "blocklisted",
    "blacklisted",
    "off-limits",
    "nonnegotiable",
    "non-negotiable",
];
/// Hard-constraint cue phrases.
pub(super) const CONSTRAINT_PHRASES: &[&[&str]] = &[
    &["do", "not"],
    &["does", "not"],
    &["must", "not"],
    &["not", "allowed"],
    &["no", "more", "than"],
    &["at", "most"],
    &["at", "least"],
    &["under", "no", "circumstances"],
    &["not", "permitted"],
    &["no", "longer", "allowed"],
    &["off", "limits"],
    &["out", "of", "bounds"],
];
/// Words that turn an amount into a limit.
pub(super) const LIMIT_WORDS: &[&str] = &[
    "under", "below", "within", "max", "maximum", "limit", "cap", "capped", "exceed",
];
pub(super) const LIMIT_PHRASES: &[&[&str]] = &[&["up", "to"], &["less", "than"]];
/// Words that turn a date into a deadline.
pub(super) const DEADLINE_WORDS: &[&str] = &["by", "before", "until", "due", "latest"];
/// Softer cue words: facts, trimmed before constraints.
pub(super) const SOFT_WORDS: &[&str] =
    &["should", "ensure", "important", "remember", "want", "wants"];
/// Softer cue phrases.
pub(super) const SOFT_PHRASES: &[&[&str]] = &[
    &["need", "to"],
    &["needs", "to"],
    &["make", "sure"],
    &["would", "like"],
    &["i'd", "like"],
    &["note", "that"],
    &["my", "name", "is"],
    &["we", "use"],
    &["i", "use"],
    &["we're", "using"],
    &["i'm", "using"],
];
/// Open-item cue words.
pub(super) const OPEN_WORDS: &[&str] =
    &["todo", "fixme", "blocker", "tbd", "pending", "unresolved"];
/// Open-item cue phrases.
pub(super) const OPEN_PHRASES: &[&[&str]] = &[
    &["next", "step"],
    &["next", "steps"],
    &["blocked", "on"],
    &["blocked", "by"],
    &["follow", "up"],
    &["still", "need"],
    &["still", "needs"],
    &["open", "question"],
    &["not", "yet"],
];
pub(super) const HIGH_WORDS: &[&str] = &[
    "blocked",
    "blocker",
    "urgent",
    "asap",
    "critical",
    "immediately",
    "fixme",
    "must",
];
pub(super) const LOW_WORDS: &[&str] = &["later", "eventually", "optional", "someday", "maybe"];
pub(super) const LOW_PHRASES: &[&[&str]] = &[&["nice", "to", "have"], &["low", "priority"]];
/// Assistant sentence openings that announce a decision (after lower-casing
/// and dropping a leading "ok,"/"so"/"next," …).
pub(super) const DECISION_PREFIXES: &[&str] = &[
    "i'll ",
    "i will ",
    "we'll ",
    "we will ",
    "let's ",
    "let us ",
    "i'm going to ",
    "i am going to ",
    "we're going to ",
    "we are going to ",
    "going with ",
    "decided to ",
    "decided on ",
    "i decided ",
    "we decided ",
    "i've decided ",
    "we've decided ",
    "i have decided ",
    "we have decided ",
    "decision: ",
    "i chose ",
    "we chose ",
    "the plan is to ",
];
/// Decision cues anywhere in an assistant sentence.
pub(super) const DECISION_INFIXES: &[&str] = &[
    " decided to ",
    " decided on ",
    " going with ",
    " opted to ",
    " opted for ",
    " settled on ",
    " wins over ",
    " won out over ",
    " over the alternative",
    "that's what i'll ",
    "that's what we'll ",
    "that is what we will ",
    " we're going with ",
    " plan of record",
];
/// Decision cues that end a sentence: "pybreaker it is.", "…, final answer."
pub(super) const DECISION_SUFFIXES: &[&str] =
    &[" it is", " it is then", " final answer", " is the call"];
pub(super) const INTERJECTIONS: &[&str] = &[
    "ok",
    "okay",
    "so",
    "sure",
    "alright",
    "great",
    "then",
    "now",
    "first",
    "next",
    "perfect",
    "right",
    "yes",
    "well",
    "understood",
    "also",
    "btw",
    "ps",
    "p.s",
    "and",
    "oh",
    "actually",
];
pub(super) const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "no", "approx", "fig", "st", "inc",
];
pub(super) const MONTHS: &[&str] = &[
    "january",
    "february",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
/// Month names that are also common words: dates only next to a number.
pub(super) const MONTHS_NEAR_NUMBER: &[&str] = &[
    "march", "may", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec",
];
pub(super) const DAY_WORDS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "tomorrow",
    "tonight",
    "eod",
    "eow",
    "eom",
    "q1",
    "q2",
    "q3",
    "q4",
];
pub(super) const CURRENCY_WORDS: &[&str] = &[
    "usd", "eur", "gbp", "dollars", "dollar", "euros", "euro", "pounds", "bucks", "k",
];

/// Cues found in one sentence.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Cues {
    /// A rule word or phrase (never, must, only, at most…), as opposed to a
    /// topic word (budget, deadline, prefer) that is as often small talk.
    pub(super) rule: bool,
    /// An amount with a limit word, a date with a deadline word.
    pub(super) hard_value: bool,
    pub(super) constraint: bool,
    pub(super) soft: bool,
    pub(super) open: bool,
    /// The sentence opens with a verb: an instruction ("Keep replies short").
    pub(super) imperative: bool,
}

pub(super) fn cues(raw: &str, w: &[String]) -> Cues {
    let any_word = |list: &[&str]| w.iter().any(|x| list.contains(&x.as_str()));
    let any_phrase = |list: &[&[&str]]| list.iter().any(|p| has_phrase(w, p));
    let (money, date) = (has_money(raw, w), has_date(raw, w));
    // A bare amount or date is only a fact ("we spent $40 on Monday"); with a
    // limit or deadline word it is a constraint ("under $500", "by Friday").
    let hard_money = money && (any_word(LIMIT_WORDS) || any_phrase(LIMIT_PHRASES));
    let hard_date = date && any_word(DEADLINE_WORDS);
    // "No cloudpickle." "No force-pushes to main.": a prohibition in brief.
    let prohibition = w.first().is_some_and(|x| x == "no") && (2..=6).contains(&w.len());
    let rule = prohibition || any_word(CONSTRAINT_WORDS) || any_phrase(CONSTRAINT_PHRASES);
    Cues {
        rule,
        hard_value: hard_money || hard_date,
        constraint: any_word(CONSTRAINT_WORDS)
            || any_word(TOPIC_WORDS)
            || any_phrase(CONSTRAINT_PHRASES)
            || hard_money
            || hard_date,
        soft: any_word(SOFT_WORDS) || any_phrase(SOFT_PHRASES) || money || date,
        open: any_word(OPEN_WORDS) || any_phrase(OPEN_PHRASES),
        imperative: prohibition || opens_with_verb(raw),
    }
}

/// Words that open statements and questions but never instructions:
/// pronouns, determiners, auxiliaries, conjunctions, prepositions and
/// reactions. A sentence that opens with any other word, after "please" and
/// interjections, opens with a verb ("Use metric units", "Stick to EU
/// regions") — grammar, not a vocabulary of instructions.
pub(super) const NOT_VERBS: &[&str] = &[
    "i",
    "i'm",
    "i'd",
    "i've",
    "i'll",
    "you",
    "you're",
    "he",
    "she",
    "it",
    "it's",
    "we",
    "we're",
    "they",
    "they're",
    "this",
    "that",
    "that's",
    "these",
    "those",
    "there",
    "there's",
    "here",
    "the",
    "a",
    "an",
    "my",
    "your",
    "our",
    "their",
    "his",
    "her",
    "its",
    "what",
    "what's",
    "why",
    "how",
    "when",
    "where",
    "who",
    "which",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "am",
    "do",
    "does",
    "did",
    "have",
    "has",
    "had",
    "can",
    "could",
    "would",
    "will",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "and",
    "but",
    "or",
    "if",
    "because",
    "also",
    "just",
    "yes",
    "no",
    "not",
    "thanks",
    "thank",
    "hi",
    "hello",
    "hey",
    "in",
    "on",
    "at",
    "for",
    "with",
    "from",
    "to",
    "of",
    "as",
    "by",
    "about",
    "after",
    "before",
    "all",
    "some",
    "any",
    "every",
    "each",
    "one",
    "maybe",
    "perhaps",
    "actually",
    "looks",
    "sounds",
    "seems",
    "got",
    "nice",
    "cool",
    "good",
    "wow",
    "hmm",
    "oh",
    "yeah",
    "yep",
    "nope",
    "honestly",
    "anyway",
    "btw",
    "fyi",
    "still",
    "again",
    "too",
    "very",
    "really",
    "lol",
    "haha",
    "sorry",
    "agreed",
    "exactly",
    "interesting",
    "hm",
    "ah",
    "huh",
    "nah",
    "cheers",
    "fine",
    "done",
    "more",
    "less",
];

pub(super) fn opens_with_verb(sentence: &str) -> bool {
    let view = decision_view(sentence);
    let view = view
        .strip_prefix("please")
        .map_or(view.as_str(), |r| r.trim_start_matches([',', ' ']));
    let first: String = view
        .chars()
        .take_while(|c| c.is_alphabetic() || *c == '\'')
        .collect();
    first.len() >= 2
        && view[first.len()..].starts_with(' ')
        && !NOT_VERBS.contains(&first.as_str())
        && !first.ends_with("ly")
        && !first.ends_with("ing")
}

pub(super) fn priority_of(w: &[String]) -> Priority {
    if w.iter().any(|x| HIGH_WORDS.contains(&x.as_str())) || has_phrase(w, &["high", "priority"]) {
        Priority::High
    } else if w.iter().any(|x| LOW_WORDS.contains(&x.as_str()))
        || LOW_PHRASES.iter().any(|p| has_phrase(w, p))
    {
        Priority::Low
    } else {
        Priority::Medium
    }
}

pub(super) fn is_number(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_digit())
}

/// `$1000`, `€ 5`, `1000 USD`, `5k dollars`.
pub(super) fn has_money(raw: &str, w: &[String]) -> bool {
    let chars: Vec<char> = raw.chars().collect();
    let symbol = chars.iter().enumerate().any(|(i, c)| {
        matches!(c, '$' | '€' | '£' | '¥' | '₹')
            && chars[i + 1..]
                .iter()
                .find(|c| **c != ' ')
                .is_some_and(|c| c.is_ascii_digit())
    });
    symbol
        || w.windows(2).any(|p| {
            (is_number(&p[0]) && CURRENCY_WORDS.contains(&p[1].as_str()))
                || (is_number(&p[1]) && ["usd", "eur", "gbp"].contains(&p[0].as_str()))
        })
}

/// ISO dates, `12/31/2025`, month names, weekdays, "tomorrow", "EOD", quarters.
pub(super) fn has_date(raw: &str, w: &[String]) -> bool {
    let b = raw.as_bytes();
    let d = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let iso = (0..b.len()).any(|i| {
        d(i) && d(i + 1)
            && d(i + 2)
            && d(i + 3)
            && b.get(i + 4) == Some(&b'-')
            && d(i + 5)
            && d(i + 6)
            && b.get(i + 7) == Some(&b'-')
            && d(i + 8)
            && d(i + 9)
    });
    let slash = (0..b.len()).any(|i| {
        (i == 0 || !d(i - 1))
            && d(i)
            && d(i + 1)
            && b.get(i + 2) == Some(&b'/')
            && d(i + 3)
            && d(i + 4)
            && b.get(i + 5) == Some(&b'/')
            && d(i + 6)
            && d(i + 7)
    });
    let named = w.iter().enumerate().any(|(i, x)| {
        MONTHS.contains(&x.as_str())
            || DAY_WORDS.contains(&x.as_str())
            || (MONTHS_NEAR_NUMBER.contains(&x.as_str())
                && (w.get(i + 1).is_some_and(|n| is_number(n)) || (i > 0 && is_number(&w[i - 1]))))
    });
    iso || slash || named
}
