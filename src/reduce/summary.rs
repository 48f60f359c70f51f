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
        let mut ahead_to = 0;
        while u < p.units.ranges.len() && p.total() > budget.target() {
            state.cancel.check()?;
            if !chunk_unit(p, u) {
                u += 1;
                continue;
            }
            if u >= ahead_to {
                ahead_to = summarize_ahead(p, state, budget, u, chunk_tokens);
            }
            // A chunk: consecutive free, unsummarized units up to the chunk
            // size, or only as much as the target still needs (with a
            // quarter to spare for what the summary itself takes): the last
            // chunk does not summarize thousands of tokens the budget has
            // room for.
            let excess = p.total().saturating_sub(budget.target());
            let enough = excess.saturating_add(excess / 4);
            let (indices, tokens) = next_chunk(p, &mut u, chunk_tokens.min(enough.max(1)));
            // The summary may take whatever the target leaves it.
            let cap = room_chars(budget.target(), p.total(), tokens, CHARS_PER_TOKEN)
                .max(state.summary_max_chars());
            if apply(p, state, &indices, cap, None, false) == Applied::Failed {
                return Ok(());
            }
        }
        // Summaries are merged down to max_summaries once the chunks are
        // done, smallest neighbours first (a Huffman order: O(n log n) over
        // the spans). Merging after every chunk merged the growing newest
        // summary again and again: quadratic in thread length.
        let max = state.policy.max_summaries as usize;
        let merge = RollUp::Merge {
            until: max,
            target: budget.target(),
        };
        roll_up(p, state, merge, &mut failed);
        if p.total() > budget.target() && p.summary_count() > 0 {
            roll_up(p, state, RollUp::Squeeze { budget }, &mut failed);
        }
        // The target is met, but a summary had to leave entries out: the
        // facts it lost are worth more than the verbatim middle still
        // standing. Summarize that too, then let the summaries grow into the
        // room it freed (one re-read of each lossy stretch, at the end: a
        // re-read per chunk made long threads quadratic).
        if p.total() <= budget.target() && lossy(p) {
            loop {
                state.cancel.check()?;
                // Only as much of the middle as the summaries need room for
                // (an estimate; the grow below fits what there is).
                if budget.target().saturating_sub(p.total()) >= room_wanted(p) {
                    break;
                }
                while u < p.units.ranges.len() && !chunk_unit(p, u) {
                    u += 1;
                }
                let (indices, _) = next_chunk(p, &mut u, chunk_tokens);
                if indices.is_empty() {
                    break;
                }
                let cap = state.summary_max_chars();
                if apply(p, state, &indices, cap, Some(budget.target()), false) == Applied::Failed {
                    break;
                }
            }
            roll_up(p, state, merge, &mut failed);
            roll_up(p, state, RollUp::Grow { budget }, &mut failed);
        }
        Ok(())
    }
}

/// Consecutive free, unsummarized units from `u` (advanced past them) until
/// they hold `limit` tokens; their message indices and tokens.
fn next_chunk(p: &Projection<'_>, u: &mut usize, limit: u32) -> (Vec<usize>, u32) {
    let mut indices = Vec::new();
    let mut tokens = 0u32;
    while *u < p.units.ranges.len() && chunk_unit(p, *u) && tokens < limit {
        let (s, e) = p.units.ranges[*u];
        for i in s..=e {
            tokens += p.cost(i);
            indices.push(i);
        }
        *u += 1;
    }
    (indices, tokens)
}

/// Tokens of the free, unsummarized units still verbatim: what the window
/// may drop.
fn droppable_tokens(p: &Projection<'_>) -> u32 {
    (0..p.units.ranges.len())
        .filter(|&u| chunk_unit(p, u))
        .map(|u| {
            let (s, e) = p.units.ranges[u];
            (s..=e).map(|i| p.cost(i)).sum::<u32>()
        })
        .sum()
}

fn chunk_unit(p: &Projection<'_>, u: usize) -> bool {
    let (s, e) = p.units.ranges[u];
    p.unit_is_free(u) && (s..=e).all(|i| !p.is_summarized(i) && !p.is_dropped(i))
}

/// Whether a summary that still renders had to leave entries out.
fn lossy(p: &Projection<'_>) -> bool {
    live_summaries(p).any(|(_, r)| r.summary.omitted > 0)
}

/// The summary records still in the plan (absorbed ones are emptied), by
/// their index in `plan.summarizations`: a pass over the records, not over
/// the thread, so it can run once per chunk.
fn live_summaries<'p>(
    p: &'p Projection<'_>,
) -> impl Iterator<Item = (usize, &'p crate::model::SummarizationRecord)> {
    p.plan
        .summarizations
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.span.message_ids.is_empty())
}

/// Tokens the summaries would need to hold what they left out: the bytes
/// they cut when this compaction fitted them, or for a summary read back
/// from a stored plan (which does not keep that), each left out entry at
/// the average size of the entries it kept.
fn room_wanted(p: &Projection<'_>) -> u32 {
    let mut wanted = 0f64;
    for (_, r) in live_summaries(p) {
        let m = &r.summary;
        if m.omitted == 0 {
            continue;
        }
        if m.omitted_bytes > 0 {
            wanted += m.omitted_bytes as f64 / CHARS_PER_TOKEN;
            continue;
        }
        let kept = m.facts.len()
            + m.decisions.len()
            + m.open_items.len()
            + m.tool_outcomes.len()
            + m.references.len()
            + m.artifacts.len();
        let each = f64::from(r.summary_token_count) / kept.max(1) as f64;
        wanted += each * f64::from(m.omitted);
    }
    wanted as u32
}

/// What became of one summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// The summarizer failed; nothing was committed (the pipeline falls
    /// back to dropping, with a warning).
    Failed,
    /// Made, but it would have grown the request (past `limit`) to
    /// `would` tokens: undone. `chars` is the summary's rendered size.
    Rejected {
        /// Request tokens with it.
        would: u32,
        /// Its rendered bytes.
        chars: usize,
    },
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
    reread: bool,
) -> Applied {
    let Inputs {
        span,
        messages,
        prior,
        externalized,
    } = inputs(p, indices, reread);
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
        rereads_prior: reread,
        scans: None,
        digests: None,
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
    // Only a re-fit under a limit rescales from the real size.
    let chars = if limit.is_some() {
        summary.render_as_message().len()
    } else {
        0
    };
    match p.summarize_within(indices, summary, limit) {
        Ok(()) => Applied::Kept,
        Err(would) => Applied::Rejected { would, chars },
    }
}

/// What a summary of `indices` reads (see [`apply`]).
struct Inputs<'p> {
    span: SpanReference,
    messages: Vec<&'p crate::model::Message>,
    prior: Vec<&'p StructuredSummary>,
    externalized: Vec<&'p crate::model::ExternalizationRecord>,
}

fn inputs<'p>(p: &'p Projection<'_>, indices: &[usize], reread: bool) -> Inputs<'p> {
    let span = SpanReference::of(p.thread, indices);
    let messages = indices
        .iter()
        .filter(|&&i| reread || !p.is_summarized(i))
        .map(|&i| p.message(i))
        .collect();
    let (prior, externalized) = p.covering(indices);
    let prior = prior.iter().map(|r| &*r.summary).collect();
    Inputs {
        span,
        messages,
        prior,
        externalized,
    }
}

/// Chunks made ahead per batch, per core.
const AHEAD_PER_CORE: usize = 8;
/// What summarizing a byte weighs against `par::map`'s threshold, which is
/// sized for scans: a summary takes about 30 µs per KB of its chunk
/// (measured on the 36 MB cold thread).
const SUMMARY_WORK_PER_BYTE: usize = 16;

/// Makes, on every core and into the memo, the summaries of the chunks
/// from unit `u` on that the loop in [`Summarize::reduce`] is certain to
/// make next, so the loop finds them made; returns the unit after the last.
/// Certain: the request stays over the target by more than a chunk even if
/// every chunk before and this one were summarized to nothing, so each is
/// a full chunk with the base cap, read from messages no earlier chunk
/// touches. A guess that still misses (a rejected summary) costs time, never
/// a different plan: the memo's key is the whole request.
fn summarize_ahead(
    p: &Projection<'_>,
    state: &PipelineState<'_>,
    budget: &TokenBudget,
    mut u: usize,
    chunk_tokens: u32,
) -> usize {
    let cores = crate::par::cores();
    if cores < 2 || !state.summarizer.may_run_ahead() {
        return u;
    }
    let target = budget.target();
    let base = state.summary_max_chars();
    let mut lowest = p.total();
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    let start = u;
    while u < p.units.ranges.len() && chunks.len() < cores * AHEAD_PER_CORE {
        if !chunk_unit(p, u) {
            u += 1;
            continue;
        }
        if lowest.saturating_sub(target) < chunk_tokens {
            break;
        }
        let from = u;
        let (indices, tokens) = next_chunk(p, &mut u, chunk_tokens);
        if indices.is_empty() || lowest.saturating_sub(tokens) < target {
            u = from;
            break;
        }
        lowest -= tokens;
        chunks.push(indices);
    }
    if chunks.len() < 2 {
        return start;
    }
    let summarizing = state.summarizing();
    let requests: Vec<Inputs<'_>> = chunks
        .iter()
        .map(|indices| inputs(p, indices, false))
        .collect();
    crate::par::map(
        &requests,
        |i| SUMMARY_WORK_PER_BYTE * i.messages.iter().map(|m| m.byte_len()).sum::<usize>(),
        |i| {
            // A failure here is met again, and reported, by the loop.
            let _ = summarizing.summarize(&SummaryRequest {
                span: i.span.clone(),
                messages: &i.messages,
                prior: &i.prior,
                max_chars: base,
                rereads_prior: false,
                scans: None,
                digests: None,
            });
        },
    );
    u
}

/// The stretch whose roll-up failed in this call, by first message and
/// length. New chunks only ever extend the oldest stretch, and a summary of
/// more messages is no smaller, so a roll-up of the same start and at least
/// that length would fail again: it is not retried. Retrying re-read the
/// whole, growing stretch once per chunk, which made compaction quadratic
/// in thread length (116 s at 100k messages; see docs/performance.md, "Growth with thread length").
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
    /// Too many summary messages: merge neighbouring pairs (see
    /// [`merge_pairs`]) until at most `until` remain.
    Merge {
        /// Summaries wanted at most.
        until: usize,
        /// The budget's target, which bounds what a merge may hold.
        target: u32,
    },
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

/// The smallest summary a squeeze asks for: a line or two of what the span
/// held; below it the window's drop notice says as much.
const MIN_SUMMARY_CHARS: usize = 96;

/// Characters per token of text not measured yet, erring small (the
/// pipeline counts the real tokens afterwards).
const CHARS_PER_TOKEN: f64 = 3.0;

/// Characters a summary replacing `replaced` tokens of a request of
/// `total` may take so that the request lands at `target`, at
/// `chars_per_token`, in steps of [`SQUEEZE_STEP_TOKENS`].
fn room_chars(target: u32, total: u32, replaced: u32, chars_per_token: f64) -> usize {
    let room = target.saturating_sub(total.saturating_sub(replaced));
    let step = squeeze_step(target);
    let room = room / step * step;
    (f64::from(room) * chars_per_token) as usize
}

/// [`SQUEEZE_STEP_TOKENS`], or under a small target a sixteenth of it (a
/// power of two, at least 8 tokens): a step as large as the whole room
/// would leave a summary nothing.
fn squeeze_step(target: u32) -> u32 {
    (target / 16)
        .max(8)
        .checked_next_power_of_two()
        .map_or(SQUEEZE_STEP_TOKENS, |s| s.min(SQUEEZE_STEP_TOKENS))
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
    if let RollUp::Merge { until, target } = how {
        merge_pairs(p, state, until, target, failed);
        return;
    }
    let all = stretches(p);
    // What every summary renders now, and what the window may still drop
    // (a re-fit changes neither): a squeeze shares the room among them.
    let summaries: u32 = all.iter().flatten().map(|&i| p.cost(i)).sum();
    let droppable = droppable_tokens(p);
    for stretch in all {
        let (covered, held) = {
            let (prior, _) = p.covering(&stretch);
            let held: usize = prior
                .iter()
                .map(|r| r.summary.render_as_message().len())
                .sum();
            (prior.len(), held)
        };
        let max_chars = match stretch_cap(
            p,
            how,
            &stretch,
            (state.summary_max_chars(), summaries, droppable),
            held,
        ) {
            StretchCap::Stop => return,
            StretchCap::Skip => continue,
            StretchCap::Chars(c) => c,
        };
        if covered == 0 {
            continue;
        }
        if failed.covers(&stretch) {
            return;
        }
        if refit(p, state, &stretch, how, max_chars) == Applied::Failed {
            failed.0 = stretch.first().map(|&first| (first, stretch.len()));
            return;
        }
    }
}

/// What one stretch's re-fitted summary may take.
enum StretchCap {
    /// Nothing more to do in this pass.
    Stop,
    /// Leave this stretch as it is.
    Skip,
    /// At most this many characters.
    Chars(usize),
}

/// A squeeze fits the stretch into what the target leaves; a grow takes
/// the room the target leaves only where the summaries left something out
/// and the gain is real. `held`: the characters its summaries take now.
fn stretch_cap(
    p: &Projection<'_>,
    how: RollUp<'_>,
    stretch: &[usize],
    (base, summaries, droppable): (usize, u32, u32),
    held: usize,
) -> StretchCap {
    let stretch_tokens: u32 = stretch.iter().map(|&i| p.cost(i)).sum();
    let ratio = measured_ratio(held, stretch_tokens);
    match how {
        // Merged pairwise.
        RollUp::Merge { .. } => StretchCap::Stop,
        RollUp::Squeeze { budget } => {
            if p.total() <= budget.target() {
                return StretchCap::Stop;
            }
            let room = room_chars(budget.target(), p.total(), stretch_tokens, ratio);
            // The verbatim middle the window may still drop goes before a
            // summary shrinks below `base`; only what even that leaves too
            // little room for goes down the ladder, each summary to its
            // share of the room, so something better than a drop notice
            // survives of every span.
            let for_all = room_chars(
                budget.target(),
                p.total().saturating_sub(droppable),
                summaries,
                ratio,
            );
            let share =
                (for_all as f64 * f64::from(stretch_tokens) / f64::from(summaries.max(1))) as usize;
            StretchCap::Chars(room.max(base.min(share).max(MIN_SUMMARY_CHARS)))
        }
        RollUp::Grow { budget } => {
            let lossy = p.covering(stretch).0.iter().any(|r| r.summary.omitted > 0);
            let room = room_chars(budget.target(), p.total(), stretch_tokens, ratio);
            // Only a real gain is worth new summary bytes.
            if !lossy || room < held + held / 8 + 256 {
                StretchCap::Skip
            } else {
                StretchCap::Chars(room)
            }
        }
    }
}

/// Re-fits the stretch's summary to `max_chars`. Only a grow re-reads the
/// stretch: it is what recovers what the summaries left out; a squeeze
/// works from the summaries (and whatever in the stretch they do not
/// cover). A grow's summary denser in tokens than the ones it replaces
/// overshoots and is undone; the cap is then scaled by how far it
/// overshot (twice at most), from the size the summary really had (a
/// re-read with nothing to leave out stays below its cap, and scaling the
/// cap would not shrink it).
fn refit(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    stretch: &[usize],
    how: RollUp<'_>,
    max_chars: usize,
) -> Applied {
    let base = state.summary_max_chars();
    let reread = matches!(how, RollUp::Grow { .. });
    let limit = match how {
        RollUp::Grow { budget } => Some(budget.target()),
        RollUp::Merge { .. } | RollUp::Squeeze { .. } => None,
    };
    let attempts = if limit.is_some() { 3 } else { 1 };
    let stretch_tokens: u32 = stretch.iter().map(|&i| p.cost(i)).sum();
    let rest = p.total().saturating_sub(stretch_tokens);
    let mut cap = max_chars;
    let mut outcome = Applied::Rejected { would: 0, chars: 0 };
    for _ in 0..attempts {
        // A re-read asks for at least the base size, but never for more
        // than its room: a lossy summary with less room than the base
        // still grows into what there is.
        let floor = if reread {
            base.min(cap)
        } else {
            MIN_SUMMARY_CHARS
        };
        outcome = apply(p, state, stretch, cap.max(floor), limit, reread);
        let Applied::Rejected { would, chars } = outcome else {
            break;
        };
        cap = cap.min(chars);
        let (Some(limit), true) = (limit, would > rest) else {
            break;
        };
        let made = f64::from(would - rest);
        let room = f64::from(limit.saturating_sub(rest));
        let scaled = (cap as f64 * room / made * 0.97) as usize;
        if scaled >= cap || scaled <= MIN_SUMMARY_CHARS {
            break;
        }
        cap = scaled;
    }
    outcome
}

/// Merges neighbouring summaries until at most `until` remain, always the
/// pair that covers the fewest messages: sizes stay balanced, like the
/// levels of an LSM tree, so a message is merged O(log n) times over a long
/// thread instead of once per new chunk (merging the whole stretch every
/// time made long threads quadratic).
fn merge_pairs(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    until: usize,
    target: u32,
    failed: &mut FailedRollUp,
) {
    let base = state.summary_max_chars();
    let mut made_ahead = crate::hash::FastSet::default();
    let mut rendered = RenderedSizes::default();
    while p.summary_count() > until {
        let Some((records, pair)) = smallest_pair(p) else {
            break;
        };
        if failed.covers(&pair) {
            break;
        }
        if !made_ahead.contains(&records) {
            merge_ahead(p, state, (until, target), &mut made_ahead, &mut rendered);
        }
        let cap = MergeCap::of(p, &pair, &mut rendered).at(base, target, p.total());
        // Fewer summary messages at no cost in tokens is a gain.
        let limit = Some(p.total());
        if apply(p, state, &pair, cap, limit, false) != Applied::Kept {
            failed.0 = pair.first().map(|&first| (first, pair.len()));
            break;
        }
    }
    if p.summary_count() > until {
        let warning = format!(
            "summaries exceed max_summaries {until}: pinned or verbatim messages lie between them, and summaries are never merged across those"
        );
        if !state.warnings.contains(&warning) {
            state.warn(warning);
        }
    }
}

/// What a merge of the summaries over `pair` may take: a tenth less than
/// what they hold (text dense in ids costs more tokens per character than
/// prose, and a merge that comes out larger is undone), and no more than
/// the target leaves them when the request has `total` tokens; what this
/// leaves out, a final grow re-reads into whatever room remains.
struct MergeCap {
    /// Characters the summaries over the pair render to now.
    held: usize,
    /// The pair's tokens now.
    pair_tokens: u32,
}

impl MergeCap {
    fn of(p: &Projection<'_>, pair: &[usize], rendered: &mut RenderedSizes) -> MergeCap {
        let held = pair
            .iter()
            .filter_map(|&i| p.summary_of(i))
            .collect::<std::collections::BTreeSet<usize>>()
            .into_iter()
            .map(|k| {
                *rendered
                    .entry(k)
                    .or_insert_with(|| p.plan.summarizations[k].summary.render_as_message().len())
            })
            .sum();
        let pair_tokens = pair.iter().map(|&i| p.cost(i)).sum();
        MergeCap { held, pair_tokens }
    }

    fn at(&self, base: usize, target: u32, total: u32) -> usize {
        let ratio = measured_ratio(self.held, self.pair_tokens);
        let room = room_chars(target, total, self.pair_tokens, ratio);
        base.max((self.held - self.held / 10).min(room))
    }
}

/// Rendered sizes of summary records by index, measured once per merge
/// pass: a record is never changed, only replaced by a new one.
type RenderedSizes = crate::hash::FastMap<usize, usize>;

/// Merges made ahead per batch, per core.
const MERGES_AHEAD_PER_CORE: usize = 16;

/// Makes, on every core and into the memo, the merges [`merge_pairs`] will
/// make next of summaries that exist now: the order of merges follows from
/// the number of messages each summary covers alone, so it is played out
/// here on those numbers. A merge is made ahead only when its cap is
/// certain: the request then has at most the tokens it has now (a merge
/// never grows it) and at least that less every pair merged before (a
/// merged summary takes at least nothing). A guess that misses (a merge
/// undone, which stops merging) costs time, never a different plan: the
/// memo's key is the whole request. Records the pairs it played out in
/// `made`.
fn merge_ahead(
    p: &Projection<'_>,
    state: &PipelineState<'_>,
    (until, target): (usize, u32),
    made: &mut crate::hash::FastSet<(usize, usize)>,
    rendered: &mut RenderedSizes,
) {
    let cores = crate::par::cores();
    let runs = summary_runs(p);
    // One node per summary in order: the record it is now (none once the
    // play-out merged it), the messages and tokens it covers, and whether
    // it may merge with the next.
    struct Node {
        record: Option<usize>,
        messages: usize,
        tokens: u32,
        adjacent_next: bool,
    }
    let mut nodes: Vec<Node> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Node {
            record: Some(r.record),
            messages: r.messages,
            tokens: r.tokens,
            adjacent_next: runs.get(i + 1).is_some_and(|n| adjacent(p, r, n)),
        })
        .collect();
    let mut live = p.summary_count();
    // (records, the least the request may have before their merge)
    let mut wave: Vec<((usize, usize), u32)> = Vec::new();
    let mut lowest = p.total();
    while live > until && wave.len() < cores * MERGES_AHEAD_PER_CORE {
        let pairs = nodes
            .windows(2)
            .map(|w| (w[0].adjacent_next).then_some(w[0].messages + w[1].messages));
        let Some((i, messages)) = first_smallest(pairs) else {
            break;
        };
        let next = nodes.remove(i + 1);
        let tokens = nodes[i].tokens + next.tokens;
        if let (Some(a), Some(b)) = (nodes[i].record, next.record) {
            wave.push(((a, b), lowest));
        }
        lowest = lowest.saturating_sub(tokens);
        nodes[i] = Node {
            record: None,
            messages,
            tokens,
            adjacent_next: next.adjacent_next,
        };
        live -= 1;
    }
    made.extend(wave.iter().map(|&(records, _)| records));
    if cores < 2 || !state.summarizer.may_run_ahead() || wave.len() < 2 {
        return;
    }
    let base = state.summary_max_chars();
    let jobs: Vec<(Inputs<'_>, usize)> = wave
        .iter()
        .filter_map(|&((a, b), lowest)| {
            let pair = pair_indices(p, &runs, a, b);
            let cap = MergeCap::of(p, &pair, rendered);
            let (now, least) = (
                cap.at(base, target, p.total()),
                cap.at(base, target, lowest),
            );
            (now == least).then(|| (inputs(p, &pair, false), now))
        })
        .collect();
    let summarizing = state.summarizing();
    crate::par::map(
        &jobs,
        |(_, cap)| MERGE_WORK_PER_BYTE * cap,
        |(i, cap)| {
            // A failure here is met again, and reported, by the loop.
            let _ = summarizing.summarize(&SummaryRequest {
                span: i.span.clone(),
                messages: &i.messages,
                prior: &i.prior,
                max_chars: *cap,
                rereads_prior: false,
                scans: None,
                digests: None,
            });
        },
    );
}

/// What merging a byte of summary weighs against `par::map`'s threshold
/// (a merge fits the pair's entries into the cap, rendering it several
/// times).
const MERGE_WORK_PER_BYTE: usize = 64;

/// A live summary's place: its first and last position, the record, and
/// how many messages it covers.
struct Run {
    first: usize,
    last: usize,
    record: usize,
    messages: usize,
    tokens: u32,
}

/// The live summaries in position order. Each record's first and last
/// position come from one pass over the slots (a message's slot names the
/// record that holds it): looking every id up again for each merge made
/// merging a long thread quadratic.
fn summary_runs(p: &Projection<'_>) -> Vec<Run> {
    let mut bounds: Vec<Option<(usize, usize, u32)>> = vec![None; p.plan.summarizations.len()];
    for i in 0..p.len() {
        if let Some(b) = p.summary_of(i).and_then(|r| bounds.get_mut(r)) {
            let cost = p.cost(i);
            *b = Some(b.map_or((i, i, cost), |(a, z, t)| (a.min(i), z.max(i), t + cost)));
        }
    }
    let mut runs: Vec<Run> = live_summaries(p)
        .filter_map(|(k, r)| {
            let (first, last, tokens) = bounds.get(k).copied().flatten()?;
            Some(Run {
                first,
                last,
                record: k,
                messages: r.span.message_ids.len(),
                tokens,
            })
        })
        .collect();
    runs.sort_unstable_by_key(|r| (r.first, r.last, r.record));
    runs
}

/// Only messages that do not render lie between `a` and `b`.
fn adjacent(p: &Projection<'_>, a: &Run, b: &Run) -> bool {
    (a.last + 1..b.first).all(|i| p.is_summarized(i) || p.is_dropped(i))
}

/// The message indices the records `a` and `b` cover.
fn pair_indices(p: &Projection<'_>, runs: &[Run], a: usize, b: usize) -> Vec<usize> {
    let (from, to) = runs
        .iter()
        .filter(|r| r.record == a || r.record == b)
        .fold((usize::MAX, 0), |(lo, hi), r| {
            (lo.min(r.first), hi.max(r.last))
        });
    (from..=to)
        .filter(|&i| matches!(p.summary_of(i), Some(r) if r == a || r == b))
        .collect()
}

/// The two neighbouring summaries (nothing that renders between them) that
/// cover the fewest messages together: their records and message indices.
fn smallest_pair(p: &Projection<'_>) -> Option<((usize, usize), Vec<usize>)> {
    let runs = summary_runs(p);
    let pairs = runs
        .windows(2)
        .map(|w| adjacent(p, &w[0], &w[1]).then_some(w[0].messages + w[1].messages));
    let (i, _) = first_smallest(pairs)?;
    let (ra, rb) = (runs[i].record, runs[i + 1].record);
    Some(((ra, rb), pair_indices(p, &runs, ra, rb)))
}

/// The position and size of the first smallest of `pairs` that may merge
/// (`None`: may not). [`merge_pairs`] and the play-out of its order in
/// [`merge_ahead`] both choose with it, so they choose alike.
fn first_smallest(pairs: impl Iterator<Item = Option<usize>>) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, n) in pairs.enumerate() {
        if let Some(n) = n {
            if best.is_none_or(|(_, m)| n < m) {
                best = Some((i, n));
            }
        }
    }
    best
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
