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
            // A chunk: consecutive free, unsummarized units up to the chunk size.
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
            if !apply(p, state, &indices, state.summary_max_chars()) {
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
        Ok(())
    }
}

fn chunk_unit(p: &Projection<'_>, u: usize) -> bool {
    let (s, e) = p.units.ranges[u];
    p.unit_is_free(u) && (s..=e).all(|i| !p.is_summarized(i) && !p.is_dropped(i))
}

/// Summarizes `indices` within `max_chars`; false when the summarizer
/// failed. A failed summary is never committed: the pipeline falls back to
/// dropping, with a warning.
fn apply(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    indices: &[usize],
    max_chars: usize,
) -> bool {
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
            return false;
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
    p.summarize_unless_larger(indices, summary);
    true
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
}

/// Granularity of a squeezed summary's cap, in tokens: the cap moves only
/// when the room changes by this much, so the summary (and the prompt
/// prefix after it) stays byte-stable while the room drifts a little.
const SQUEEZE_STEP_TOKENS: u32 = 256;

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
                base.max(cap)
            }
            RollUp::Squeeze { budget } => {
                if p.total() <= budget.target() {
                    return;
                }
                let stretch_tokens: u32 = stretch.iter().map(|&i| p.cost(i)).sum();
                let room = budget
                    .target()
                    .saturating_sub(p.total().saturating_sub(stretch_tokens));
                let room = room / SQUEEZE_STEP_TOKENS * SQUEEZE_STEP_TOKENS;
                base.max(room as usize * 3)
            }
        };
        if covered == 0 {
            continue;
        }
        if failed.covers(&stretch) {
            return;
        }
        if !apply(p, state, &stretch, max_chars) {
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
