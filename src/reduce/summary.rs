//! Summarization: the only lossy, possibly model-calling reducer, so it runs
//! after the free ones. It collapses the *oldest* span in chunks and never
//! the tail: rewriting the middle of a prompt would invalidate the provider's
//! prompt cache for everything after it. New chunks append new summary
//! messages (the prefix before them stays byte-stable); when there are more
//! than `max_summaries`, neighbouring summaries roll into one, carrying every
//! fact forward. A roll-up never reaches across a message that still renders
//! (a pinned instruction, above all): the merged summary renders where its
//! first span was, so anything it absorbed from beyond that message would
//! appear before it.

use crate::model::{ArtifactReference, SpanReference, StructuredSummary};
use crate::summarize::SummaryRequest;

use super::{CompactError, PipelineState, Projection, Reducer, TokenBudget};

/// Summarizes the oldest free spans, chunk by chunk, until the target is met.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summarize;

impl Reducer for Summarize {
    fn name(&self) -> &'static str {
        "summarize"
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        let chunk_tokens = state.policy.summary_chunk_tokens;
        let mut failed = FailedRollUp::default();
        let mut u = 0;
        while u < p.units.ranges.len() && p.total() > budget.target() {
            state.cancel.check()?;
            if !chunk_unit(p, u) {
                u += 1;
                continue;
            }
            // A chunk: consecutive free, unsummarized units up to the chunk
            // size, or only as much as the target still needs (with a
            // quarter to spare for what the summary itself takes): the last
            // chunk does not summarize thousands of tokens the budget has
            // room for.
            let excess = p.total().saturating_sub(budget.target());
            let enough = excess.saturating_add(excess / 4);
            let mut indices = Vec::new();
            let mut tokens = 0u32;
            while u < p.units.ranges.len()
                && chunk_unit(p, u)
                && tokens < chunk_tokens
                && tokens < enough
            {
                let (s, e) = p.units.ranges[u];
                for i in s..=e {
                    tokens += p.cost(i);
                    indices.push(i);
                }
                u += 1;
            }
            // The summary may take whatever the target leaves it.
            let cap = room_chars(budget.target(), p.total(), tokens, CHARS_PER_TOKEN)
                .max(state.summary_max_chars());
            if apply(p, state, &indices, cap, None) == Applied::Failed {
                return Ok(());
            }
            let max = state.policy.max_summaries as usize;
            if p.summary_count() > max {
                roll_up(p, state, RollUp::Merge { until: max }, &mut failed);
            }
        }
        if p.total() > budget.target() && p.summary_count() > 0 {
            roll_up(p, state, RollUp::Squeeze { budget }, &mut failed);
        }
        // The target is met, but a summary had to leave entries out: the
        // facts it lost are worth more than the verbatim middle still
        // standing. Summarize that too, a chunk at a time, and let the
        // summaries grow into the room it frees, until nothing is left out
        // or only the tail remains.
        let max = state.policy.max_summaries as usize;
        while p.total() <= budget.target() && lossy(p) {
            state.cancel.check()?;
            while u < p.units.ranges.len() && !chunk_unit(p, u) {
                u += 1;
            }
            let mut indices = Vec::new();
            let mut tokens = 0u32;
            while u < p.units.ranges.len() && chunk_unit(p, u) && tokens < chunk_tokens {
                let (s, e) = p.units.ranges[u];
                for i in s..=e {
                    tokens += p.cost(i);
                    indices.push(i);
                }
                u += 1;
            }
            if indices.is_empty() {
                // Only the tail is left: the summaries may still grow into
                // what room there is.
                roll_up(p, state, RollUp::Grow { budget }, &mut failed);
                break;
            }
            let cap = room_chars(budget.target(), p.total(), tokens, CHARS_PER_TOKEN)
                .max(state.summary_max_chars());
            if apply(p, state, &indices, cap, Some(budget.target())) == Applied::Failed {
                break;
            }
            if p.summary_count() > max {
                roll_up(p, state, RollUp::Merge { until: max }, &mut failed);
            }
            roll_up(p, state, RollUp::Grow { budget }, &mut failed);
        }
        Ok(())
    }
}

fn chunk_unit(p: &Projection<'_>, u: usize) -> bool {
    let (s, e) = p.units.ranges[u];
    p.unit_is_free(u) && (s..=e).all(|i| !p.is_summarized(i) && !p.is_dropped(i))
}

/// Whether a summary that still renders had to leave entries out.
fn lossy(p: &Projection<'_>) -> bool {
    stretches(p)
        .iter()
        .any(|s| p.covering(s).0.iter().any(|r| r.summary.omitted > 0))
}

/// What became of one summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// The summarizer failed; nothing was committed (the pipeline falls
    /// back to dropping, with a warning).
    Failed,
    /// Made, but it would have grown the request (past `limit`): undone.
    Rejected,
    /// In the plan.
    Kept,
}

/// Summarizes `indices` within `max_chars`. The summary is kept when the
/// request gets smaller, or (with `limit`) when it stays within `limit`.
fn apply(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    indices: &[usize],
    max_chars: usize,
    limit: Option<u32>,
) -> Applied {
    let span = SpanReference::of(p.thread, indices);
    let messages: Vec<&crate::model::Message> = indices.iter().map(|&i| p.message(i)).collect();
    let (prior, externalized) = p.covering(indices);
    let prior: Vec<&StructuredSummary> = prior.iter().map(|r| &r.summary).collect();
    let artifacts: Vec<ArtifactReference> = externalized
        .iter()
        .map(|r| ArtifactReference {
            artifact_id: r.artifact_id.clone(),
            description: format!("content of message {}", r.span.start_message_id()),
            rehydrate_hint: r.rehydrate_hint.clone(),
        })
        .collect();
    let req = SummaryRequest {
        span,
        messages: &messages,
        prior: &prior,
        max_chars,
    };
    let mut summary = match state.summarize(&req) {
        Ok(s) => s,
        Err(e) => {
            state.warn(format!("summarize: {e}; falling back to dropping"));
            return Applied::Failed;
        }
    };
    for a in artifacts {
        if !summary
            .artifacts
            .iter()
            .any(|x| x.artifact_id == a.artifact_id)
        {
            summary.artifacts.push(a);
        }
    }
    // When the summary is not smaller than what it replaces, the span stays
    // as it was.
    if p.summarize_within(indices, summary, limit) {
        Applied::Kept
    } else {
        Applied::Rejected
    }
}

/// The stretch whose roll-up failed in this call, by first message and
/// length. New chunks only ever extend the oldest stretch, and a summary of
/// more messages is no smaller, so a roll-up of the same start and at least
/// that length would fail again: it is not retried. Retrying re-read the
/// whole, growing stretch once per chunk, which made compaction quadratic
/// in thread length (116 s at 100k messages; see README "Growth").
#[derive(Debug, Default)]
struct FailedRollUp(Option<(usize, usize)>);

impl FailedRollUp {
    fn covers(&self, stretch: &[usize]) -> bool {
        self.0
            .is_some_and(|(first, len)| stretch.first() == Some(&first) && stretch.len() >= len)
    }
}

/// Why summaries are rolled together.
#[derive(Clone, Copy)]
enum RollUp<'b> {
    /// Too many summary messages: merge neighbours into one, keeping what
    /// they hold (the cap is their combined size), until at most `until`
    /// remain.
    Merge { until: usize },
    /// Everything old is summarized and the request is still over the
    /// target: each stretch is re-summarized into the room the target
    /// leaves it, so the summaries use the budget instead of the window
    /// dropping them.
    Squeeze { budget: &'b TokenBudget },
    /// A stretch whose summaries left entries out is re-summarized into the
    /// room the target leaves it, which may be larger than it is now.
    Grow { budget: &'b TokenBudget },
}

/// Granularity of a squeezed summary's cap, in tokens: the cap moves only
/// when the room changes by this much, so the summary (and the prompt
/// prefix after it) stays byte-stable while the room drifts a little.
const SQUEEZE_STEP_TOKENS: u32 = 256;

/// Characters per token of text not measured yet, erring small (the
/// pipeline counts the real tokens afterwards).
const CHARS_PER_TOKEN: f64 = 3.0;

/// Characters a summary replacing `replaced` tokens of a request of
/// `total` may take so that the request lands at `target`, at
/// `chars_per_token`, in steps of [`SQUEEZE_STEP_TOKENS`].
fn room_chars(target: u32, total: u32, replaced: u32, chars_per_token: f64) -> usize {
    let room = target.saturating_sub(total.saturating_sub(replaced));
    let room = room / SQUEEZE_STEP_TOKENS * SQUEEZE_STEP_TOKENS;
    (f64::from(room) * chars_per_token) as usize
}

/// Characters per token of the summaries a stretch holds, measured (less
/// 5%), so a re-fitted summary is sized in its own text's terms.
fn measured_ratio(held_chars: usize, stretch_tokens: u32) -> f64 {
    if stretch_tokens == 0 || held_chars == 0 {
        return CHARS_PER_TOKEN;
    }
    (held_chars as f64 / f64::from(stretch_tokens) * 0.95).max(CHARS_PER_TOKEN)
}

/// Rolls neighbouring summaries into one, oldest stretch first: a stretch
/// ends at any message that still renders on its own (verbatim, cleared or
/// a pointer). Stops once the goal of `how` is met, or at the first
/// roll-up that fails.
fn roll_up(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    how: RollUp<'_>,
    failed: &mut FailedRollUp,
) {
    let base = state.summary_max_chars();
    for stretch in stretches(p) {
        let (covered, cap) = {
            let (prior, _) = p.covering(&stretch);
            let held: usize = prior
                .iter()
                .map(|r| r.summary.render_as_message().len())
                .sum();
            (prior.len(), held)
        };
        let max_chars = match how {
            RollUp::Merge { until } => {
                if p.summary_count() <= until {
                    return;
                }
                if covered < 2 {
                    continue;
                }
                // A tenth less than what they hold: re-reading the span
                // recovers what each left out, and text dense in ids costs
                // more tokens per character than prose, so the merge is
                // sized to come out no larger (it is undone if it does not).
                base.max(cap - cap / 10)
            }
            RollUp::Squeeze { budget } => {
                if p.total() <= budget.target() {
                    return;
                }
                let stretch_tokens: u32 = stretch.iter().map(|&i| p.cost(i)).sum();
                let ratio = measured_ratio(cap, stretch_tokens);
                base.max(room_chars(
                    budget.target(),
                    p.total(),
                    stretch_tokens,
                    ratio,
                ))
            }
            RollUp::Grow { budget } => {
                let lossy = p.covering(&stretch).0.iter().any(|r| r.summary.omitted > 0);
                let stretch_tokens: u32 = stretch.iter().map(|&i| p.cost(i)).sum();
                let ratio = measured_ratio(cap, stretch_tokens);
                let room = room_chars(budget.target(), p.total(), stretch_tokens, ratio);
                // Only a real gain is worth new summary bytes.
                if !lossy || room < cap + cap / 8 + 256 {
                    continue;
                }
                room
            }
        };
        let limit = match how {
            RollUp::Grow { budget } => Some(budget.target()),
            // Fewer summary messages at no cost in tokens is a gain.
            RollUp::Merge { .. } => Some(p.total()),
            RollUp::Squeeze { .. } => None,
        };
        if covered == 0 {
            continue;
        }
        if failed.covers(&stretch) {
            return;
        }
        // A re-fitted summary denser in tokens than the ones it replaces
        // overshoots and is undone; a smaller cap is tried, twice at most.
        let attempts = if limit.is_some() { 3 } else { 1 };
        let mut outcome = Applied::Rejected;
        for k in 0..attempts {
            let cap = max_chars - max_chars * k / 6;
            outcome = apply(p, state, &stretch, cap.max(base), limit);
            if outcome != Applied::Rejected {
                break;
            }
        }
        if outcome == Applied::Failed {
            failed.0 = stretch.first().map(|&first| (first, stretch.len()));
            return;
        }
    }
    if let RollUp::Merge { until: max } = how {
        if p.summary_count() > max {
            let warning = format!(
                "summaries exceed max_summaries {max}: pinned or verbatim messages lie between them, and summaries are never merged across those"
            );
            if !state.warnings.contains(&warning) {
                state.warn(warning);
            }
        }
    }
}

/// Summarized messages grouped into stretches that no rendering message
/// interrupts (dropped messages do not render, so they do not interrupt).
fn stretches(p: &Projection<'_>) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    for i in 0..p.len() {
        if p.is_summarized(i) {
            cur.push(i);
        } else if !p.is_dropped(i) && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}
