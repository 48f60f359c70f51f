//! Merging summaries: a later value of the same subject replaces the
//! earlier, and a quote repeated word for word is kept once, at its latest.

use crate::hash::{FastMap, FastSet};

use super::super::text::{dedup_key, update_key, updates};
use crate::model::{SpanReference, StructuredSummary};

use super::*;

/// Merges `prior` summaries (in order) and then `fresh` field by field: facts,
/// decisions, open items and references are de-duplicated keeping the first
/// occurrence, so older content comes first and nothing is lost by merging.
/// `current_task` and `current_plan` take the newest non-empty value; the
/// counts of entries left out add up. Usable by any summarizer.
pub fn merge_summaries(
    span: SpanReference,
    prior: &[&StructuredSummary],
    fresh: &StructuredSummary,
) -> StructuredSummary {
    let mut out = StructuredSummary::empty(span);
    let all = || prior.iter().copied().chain(std::iter::once(fresh));

    let mut seen = FastSet::default();
    for r in all().flat_map(|s| &s.requests) {
        if seen.insert(r.as_str()) {
            out.requests.push(r.clone());
        }
    }
    out.requests = latest_per_subject(std::mem::take(&mut out.requests), |r| Some(quoted(r)));
    out.requests = latest_of_each(std::mem::take(&mut out.requests));

    let mut seen = FastSet::default();
    for f in all().flat_map(|s| &s.facts) {
        if !f.trim().is_empty() && seen.insert(dedup_key(f)) {
            out.facts.push(f.clone());
        }
    }
    // A tool's results are events (the first of several errors matters);
    // what a person or the assistant states is updated by a later value.
    out.facts = latest_per_subject(std::mem::take(&mut out.facts), |f| {
        (source_of(f) != Source::Tool).then_some(f)
    });
    let mut seen = FastSet::default();
    for d in all().flat_map(|s| &s.decisions) {
        if seen.insert(dedup_key(&d.decision)) {
            out.decisions.push(d.clone());
        }
    }
    let mut seen = FastSet::default();
    for o in all().flat_map(|s| &s.open_items) {
        if seen.insert(dedup_key(&o.description)) {
            out.open_items.push(o.clone());
        }
    }
    let mut seen = FastSet::default();
    for a in all().flat_map(|s| &s.artifacts) {
        if seen.insert(a.artifact_id.clone()) {
            out.artifacts.push(a.clone());
        }
    }
    let mut seen = FastSet::default();
    for r in all().flat_map(|s| &s.references) {
        if !r.is_empty() && seen.insert(r.as_str()) {
            out.references.push(r.clone());
        }
    }
    // Tool outcomes are events, not statements: two identical calls are two outcomes.
    out.tool_outcomes = all()
        .flat_map(|s| s.tool_outcomes.iter().cloned())
        .collect();
    out.current_task = all().filter_map(|s| s.current_task.clone()).next_back();
    out.current_plan = all()
        .map(|s| &s.current_plan)
        .rfind(|p| !p.is_empty())
        .cloned()
        .unwrap_or_default();
    out.omitted = all().fold(0u32, |n, s| n.saturating_add(s.omitted));
    out.omitted_bytes = all().fold(0u64, |n, s| n.saturating_add(s.omitted_bytes));
    out
}

/// `items` in order, each statement that a later one restates with
/// another value (the same [`update_key`] subject, see [`updates`]) left
/// out: the summary carries the current value, not the history of it. A
/// quote repeated word for word in a later turn is the same subject too,
/// and is kept once, at its latest. `subject` gives the text an item is
/// compared by (`None`: not compared).
pub(super) fn latest_per_subject(
    items: Vec<String>,
    subject: impl Fn(&str) -> Option<&str>,
) -> Vec<String> {
    let keys: Vec<Option<(String, Vec<&str>)>> = items
        .iter()
        .map(|t| subject(t).and_then(update_key))
        .collect();
    let mut by_key: FastMap<&str, Vec<usize>> = FastMap::default();
    for (i, k) in keys.iter().enumerate() {
        if let Some((k, _)) = k {
            by_key.entry(k.as_str()).or_default().push(i);
        }
    }
    let mut stale = vec![false; items.len()];
    for group in by_key.values() {
        for (n, &i) in group.iter().enumerate() {
            let Some((_, earlier)) = &keys[i] else {
                continue;
            };
            // The latest few restatements are enough to tell.
            stale[i] = group[n + 1..].iter().take(UPDATE_LOOKAHEAD).any(|&j| {
                keys[j]
                    .as_ref()
                    .is_some_and(|(_, later)| updates(earlier, later))
            });
        }
    }
    items
        .into_iter()
        .zip(stale)
        .filter_map(|(t, stale)| (!stale).then_some(t))
        .collect()
}

/// `quotes` with a quote said again word for word in a later turn kept
/// only at its latest.
pub(super) fn latest_of_each(quotes: Vec<String>) -> Vec<String> {
    let mut last: FastMap<&str, usize> = FastMap::default();
    for (i, q) in quotes.iter().enumerate() {
        last.insert(quoted(q), i);
    }
    let keep: Vec<bool> = (0..quotes.len())
        .map(|i| last.get(quoted(&quotes[i])) == Some(&i))
        .collect();
    quotes
        .into_iter()
        .zip(keep)
        .filter_map(|(q, keep)| keep.then_some(q))
        .collect()
}

/// Later statements of a subject compared with each (a thread that says
/// one thing a thousand times is not compared a million times).
pub(super) const UPDATE_LOOKAHEAD: usize = 64;

/// A quote without its `(turn N) ` label: the turn is not a value of what
/// was said.
pub(super) fn quoted(r: &str) -> &str {
    split_quote(r).1
}

/// A quote [`quote_requests`] wrote, as its turn and what was said.
pub(super) fn split_quote(r: &str) -> (Option<u32>, &str) {
    r.strip_prefix("(turn ")
        .and_then(|rest| rest.split_once(") "))
        .and_then(|(n, text)| Some((Some(n.parse().ok()?), text)))
        .unwrap_or((None, r))
}
