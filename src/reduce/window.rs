//! Sliding window / drop: the last resort. Drops the oldest free call groups
//! and dialogue until the target is met. Summaries, and call groups whose
//! tool failed, are dropped only when the request would otherwise exceed the
//! hard limit: summaries carry the constraints, and an error the model no
//! longer sees is an error it repeats. Every drop keeps a keyword index for
//! later recall.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Outcome;

use super::{CompactError, PipelineState, Projection, Reducer, TokenBudget};

/// Drops the oldest free units.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window;

impl Reducer for Window {
    fn name(&self) -> &'static str {
        "window"
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        if state.skip_aggressive {
            return Ok(());
        }
        // First every other free unit, oldest first, down to the target;
        // then, only if the request is still over the hard limit, the
        // precious ones, oldest first, just until it fits. Deciding per
        // unit on the running total dropped an old summary whenever the
        // walk began over the hard limit, though the newer units after it
        // would have been enough.
        for precious_pass in [false, true] {
            for u in 0..p.units.ranges.len() {
                let done = if precious_pass {
                    p.total() <= budget.hard_limit()
                } else {
                    p.total() <= budget.target()
                };
                if done {
                    break;
                }
                if !p.unit_is_free(u) {
                    continue;
                }
                let (s, e) = p.units.ranges[u];
                if (s..=e).all(|i| p.is_dropped(i)) {
                    continue;
                }
                let precious = (s..=e).any(|i| {
                    p.is_summarized(i)
                        || p.message(i)
                            .tool_result
                            .as_ref()
                            .is_some_and(|env| env.outcome == Outcome::Failure && !p.is_dropped(i))
                });
                if precious != precious_pass {
                    continue;
                }
                let mut indices: BTreeSet<usize> = (s..=e).collect();
                // Each summary the unit touches is dropped whole (looked up
                // once: summaries are made of whole units, so there is
                // rarely more than one).
                let mut seen: Vec<usize> = Vec::new();
                for i in s..=e {
                    if let Some(r) = p.summary_of(i).filter(|r| !seen.contains(r)) {
                        seen.push(r);
                        indices.extend(p.summary_span_of(i).unwrap_or_default());
                    }
                }
                let indices: Vec<usize> = indices.into_iter().collect();
                p.drop_messages(&indices, "window");
            }
        }
        Ok(())
    }
}

/// The standing window: units wholly in turns before the window are
/// dropped (pinned ones stay), once the window has grown a quarter past its
/// cap, down to the cap. Deterministic, no model call.
pub fn standing(p: &mut Projection<'_>, w: &crate::reduce::StandingWindow) {
    let Some(last) = (0..p.len()).last() else {
        return;
    };
    let current = p.message(last).turn;
    // The task's own words stay wherever they stand, as the tail keeps them.
    let last_user = super::partition::last_user(p);
    // The dialogue turns still shown as themselves (verbatim or as a
    // placeholder), newest first, with what they cost now: summaries and
    // pointers stay whatever the window, so they do not count.
    let mut turns: Vec<(u32, u32)> = Vec::new();
    for i in (0..p.len()).rev() {
        if !p.renders_itself(i) || p.pinned[i] {
            continue;
        }
        let t = p.message(i).turn;
        match turns.last_mut() {
            Some((turn, tokens)) if *turn == t => *tokens += p.cost(i),
            _ => turns.push((t, p.cost(i))),
        }
    }
    let slack = |cap: u32| cap.saturating_add((cap / 4).max(1));
    // The oldest turn the window keeps (`None`: keep everything).
    let mut keep_from: Option<u32> = None;
    if let Some(max) = w.max_turns {
        if turns.len() as u32 > slack(max) {
            keep_from = turns.get(max as usize - 1).map(|t| t.0);
        }
    }
    if let Some(max) = w.max_tokens {
        let shown: u32 = turns.iter().map(|t| t.1).sum();
        if shown > slack(max) {
            let mut sum = 0u32;
            let mut from = current;
            for (k, &(turn, tokens)) in turns.iter().enumerate() {
                sum = sum.saturating_add(tokens);
                if sum > max && k > 0 {
                    break;
                }
                from = turn;
            }
            keep_from = Some(keep_from.map_or(from, |f| f.max(from)));
        }
    }
    let Some(from) = keep_from else { return };
    let mut out: Vec<usize> = Vec::new();
    for u in 0..p.units.ranges.len() {
        let (s, e) = p.units.ranges[u];
        let before = (s..=e).all(|i| p.message(i).turn < from);
        // Summaries and pointers stay: they carry what the old turns
        // decided, which is what a window on the dialogue keeps.
        let shown = (s..=e).all(|i| p.is_dropped(i) || p.renders_itself(i));
        let task = last_user.is_some_and(|l| (s..=e).contains(&l));
        if before && shown && !task && p.unit_is_free(u) {
            out.extend((s..=e).filter(|&i| !p.is_dropped(i)));
        }
    }
    if out.is_empty() {
        return;
    }
    let mut run: Vec<usize> = Vec::new();
    for &i in &out {
        if run.last().is_some_and(|&j| j + 1 != i) {
            p.drop_messages(&std::mem::take(&mut run), "standing window");
        }
        run.push(i);
    }
    p.drop_messages(&run, "standing window");
}

/// The smallest body the pipeline can build, the last resort before a
/// refusal: every message nothing locks is dropped (summaries, failures and
/// earlier records too), each contiguous run of them one record, so one
/// notice stands for it once archived.
pub fn drop_all_free(p: &mut Projection<'_>) {
    let free: Vec<usize> = (0..p.units.ranges.len())
        .filter(|&u| p.unit_is_free(u))
        .flat_map(|u| {
            let (s, e) = p.units.ranges[u];
            s..=e
        })
        .collect();
    if free.is_empty() {
        return;
    }
    // Back to verbatim first, so the runs are dropped whole and merge.
    p.restore_verbatim(&free);
    let mut run: Vec<usize> = Vec::new();
    for &i in &free {
        if run.last().is_some_and(|&j| j + 1 != i) {
            p.drop_messages(&std::mem::take(&mut run), "window");
        }
        run.push(i);
    }
    p.drop_messages(&run, "window");
}

/// Fills each drop record's keyword index from the dropped messages' text.
pub fn index_drops(p: &mut Projection<'_>) {
    let thread = p.thread;
    let positions: Vec<Vec<usize>> = p
        .plan
        .drops
        .iter()
        .map(|r| {
            r.span
                .message_ids
                .iter()
                .filter_map(|id| p.position(id))
                .collect()
        })
        .collect();
    for (rec, positions) in p.plan.drops.iter_mut().zip(positions) {
        let mut freq: BTreeMap<String, u32> = BTreeMap::new();
        rec.index.timestamp = positions
            .iter()
            .rev()
            .find_map(|&i| thread.messages[i].metadata.created_at.clone());
        for i in positions {
            for w in words(&thread.messages[i].text()) {
                *freq.entry(w).or_insert(0) += 1;
            }
        }
        let mut ranked: Vec<(String, u32)> = freq.into_iter().collect();
        // Most frequent first; ties alphabetical, so the index is deterministic.
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        rec.index.keywords = ranked.into_iter().take(12).map(|(w, _)| w).collect();
        rec.index.summary = format!(
            "{} message(s) from turns {}-{} dropped",
            rec.span.message_ids.len(),
            rec.span.first_turn,
            rec.span.last_turn
        );
    }
}

const STOPWORDS: &[&str] = &[
    "about", "after", "again", "also", "because", "been", "before", "being", "could", "does",
    "doing", "from", "have", "here", "into", "just", "like", "more", "most", "much", "only",
    "other", "over", "same", "should", "some", "such", "than", "that", "their", "them", "then",
    "there", "these", "they", "this", "those", "through", "very", "want", "were", "what", "when",
    "where", "which", "while", "will", "with", "would", "your", "null", "true", "false",
];

/// Index words: four characters or more with at least two letters, so the
/// pieces of timestamps and numbers (`01t00`, `2024`) are not taken for
/// topics, while identifiers (`sha256`, `ord1234`) are.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.chars().count() >= 4 && w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn index_words_skip_timestamp_pieces_and_keep_identifiers() {
        let w: Vec<String> =
            words("2024-01-01T00:00:00Z deploy sha256 ORD1234 finished 8080 Überprüfung").collect();
        assert_eq!(
            w,
            ["deploy", "sha256", "ord1234", "finished", "überprüfung"]
        );
    }
}
