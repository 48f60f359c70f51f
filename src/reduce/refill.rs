//! Refill: the reducers free tokens in steps — a 20,000-token result cleared
//! at once, a chunk summarized whole, the tail shrunk a round at a time — so
//! a compaction can land far below its target with recent content gone that
//! the target had room for. What that room holds is given back, newest unit
//! first: verbatim, or when that does not fit, with its tool results
//! compressed, or as stubs (the call, its arguments and any failure stay as
//! they were). Cleared, externalized and dropped units come back whole; a
//! summary gives back its newest units and names the shorter span.
//! Records carried over from the previous plan stay as they are: their bytes
//! are the prompt cache's prefix. So do a plugin's decisions: they mean more
//! than the budget (a stale read is stale at any size).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::ClearReason;

use super::{CompactError, PipelineState, Projection};

/// Gives back what room there is under `limit`, newest unit first.
/// `frozen` marks the messages the previous plan had already evicted.
pub fn refill(
    p: &mut Projection<'_>,
    limit: u32,
    state: &mut PipelineState<'_>,
    frozen: &[bool],
) -> Result<(), CompactError> {
    let mut u = p.units.ranges.len();
    while u > 0 && p.total() < limit {
        u -= 1;
        let (s, e) = p.units.ranges[u];
        if (s..=e).any(|i| frozen[i] || p.is_pinned(i) || p.decided_by_plugin(i)) {
            continue;
        }
        state.cancel.check()?;
        if (s..=e).any(|i| p.is_summarized(i)) {
            let Some(span) = p.summary_span_of(e).or_else(|| p.summary_span_of(s)) else {
                continue;
            };
            // What stays summarized is not looked at again; older content
            // may still fit what room is left.
            if !span.iter().any(|&i| frozen[i] || p.decided_by_plugin(i)) {
                give_back_summary(p, state, &span, limit);
            }
            u = p.units.unit_of[span[0]];
            continue;
        }
        if (s..=e).all(|i| p.is_included(i)) {
            continue;
        }
        let form = Form::of(p, state, s, e);
        let now: u32 = (s..=e).map(|i| p.cost(i)).sum();
        let room = limit.saturating_sub(p.total()).saturating_add(now);
        // A stub in place of a stub or a pointer gains nothing: only a
        // dropped unit comes back as stubs.
        let leanest = if (s..=e).any(|i| p.is_dropped(i)) {
            2
        } else {
            1
        };
        let fuller = form
            .best(room)
            .filter(|&l| l <= leanest && form.cost[l] > now);
        if let Some(level) = fuller {
            p.restore_verbatim(&(s..=e).collect::<Vec<_>>());
            form.apply(p, level);
        }
    }
    Ok(())
}

/// The forms a unit can be given back in, fullest first: verbatim, its
/// tool results compressed, its results as stubs (a failure's with its error).
struct Form {
    /// Tokens of the unit in each form.
    cost: [u32; 3],
    /// Per form, the results that render other than verbatim.
    replaced: [Vec<Replacement>; 3],
    /// The fullest form allowed: a tool's own retention rule applies
    /// wholly, so its results come back only as stubs.
    min_level: usize,
}

/// A result's position, why it is replaced, its text and preserved fields.
type Replacement = (usize, ClearReason, String, BTreeMap<String, Value>);

impl Form {
    fn of(p: &Projection<'_>, state: &PipelineState<'_>, s: usize, e: usize) -> Form {
        let mut form = Form {
            cost: [0; 3],
            replaced: [Vec::new(), Vec::new(), Vec::new()],
            min_level: 0,
        };
        let rules = crate::summarize::CompressRules::default();
        for i in s..=e {
            let m = p.message(i);
            let verbatim = p.verbatim_cost(i);
            form.cost[0] += verbatim;
            let Some(env) = &m.tool_result else {
                form.cost[1] += verbatim;
                form.cost[2] += verbatim;
                continue;
            };
            let enable = state.policy.enable;
            // A tool's own retention rule applies only while retention may run.
            let ruled = enable.retention && state.policy.retention.contains_key(&env.tool_name);
            if ruled {
                form.min_level = 2;
            }
            // Only the forms of reducers that may run: a switched-off
            // reducer leaves no record of its kind, refilled ones included.
            let compressed = enable
                .compress
                .then(|| super::compress::compressed_form(p, state, i, &rules))
                .flatten()
                .map(|(text, kept)| (p.counter.cleared(m, &text), text, kept))
                .filter(|(cost, ..)| *cost < verbatim);
            // A failure's stub keeps its error text: less than the failure,
            // more than the summary it comes back from.
            // (A tool's own retention rule stubs its results as retention.)
            let stub_reason = if enable.clear {
                Some(ClearReason::Durability)
            } else {
                ruled.then_some(ClearReason::Expired)
            };
            let stub = stub_reason.map(|reason| {
                let (text, kept) = super::clear::anchoring_stub(env, state.memo, state.redactor);
                (p.counter.cleared(m, &text), text, kept, reason)
            });
            let compressed_cost = compressed.as_ref().map_or(verbatim, |c| c.0);
            form.cost[1] += compressed_cost;
            match stub.filter(|(cost, ..)| *cost < compressed_cost) {
                Some((cost, text, kept, reason)) => {
                    form.cost[2] += cost;
                    form.replaced[2].push((i, reason, text, kept));
                }
                None => {
                    form.cost[2] += compressed_cost;
                    if let Some((_, text, kept)) = &compressed {
                        form.replaced[2].push((
                            i,
                            ClearReason::Compressed,
                            text.clone(),
                            kept.clone(),
                        ));
                    }
                }
            }
            if let Some((_, text, kept)) = compressed {
                form.replaced[1].push((i, ClearReason::Compressed, text, kept));
            }
        }
        form
    }

    /// The fullest form within `room` tokens.
    fn best(&self, room: u32) -> Option<usize> {
        (self.min_level..3).find(|&l| self.cost[l] <= room)
    }

    /// Renders the unit (verbatim now) in form `level`.
    fn apply(&self, p: &mut Projection<'_>, level: usize) {
        for (i, reason, text, kept) in &self.replaced[level] {
            p.clear(*i, *reason, text.clone(), kept.clone());
        }
    }
}

/// Gives the newest units of the summary over `span` back, as many as the
/// room holds (each in the fullest form that fits): the summary names a
/// shorter span and keeps what it says (its entries about what came back are
/// redundant, never wrong, and re-summarizing a span of thousands of
/// messages would cost more than the whole compaction). Given back whole
/// when every unit fits in the room the summary itself frees. Halves the
/// part given back when the result does not fit `limit`.
fn give_back_summary(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    span: &[usize],
    limit: u32,
) {
    let summary_tokens = p.cost(span[0]);
    // While part of the span stays summarized the summary keeps its size
    // (its header's turns aside; the check below is exact); given back
    // whole, its tokens are free too.
    let room = limit.saturating_sub(p.total());
    let whole_room = room + summary_tokens;
    // The span's units, newest first, while their leanest forms fit.
    let mut forms: Vec<(usize, Form)> = Vec::new();
    let mut at = span.len();
    let mut leanest = 0u32;
    while at > 0 && leanest <= whole_room {
        let (s, e) = p.units.ranges[p.units.unit_of[span[at - 1]]];
        let start = span[..at].partition_point(|&i| i < s);
        let form = Form::of(p, state, s, e);
        leanest = leanest.saturating_add(form.cost[2]);
        forms.push((start, form));
        at = start;
    }
    // Each unit in the fullest form that still fits, newest first: within
    // the whole room when the whole span comes back, else within the room
    // the summary leaves.
    let choose = |room: u32| -> Vec<(usize, usize)> {
        let mut used = 0u32;
        let mut out = Vec::new();
        for (k, (_, form)) in forms.iter().enumerate() {
            let Some(level) = form.best(room.saturating_sub(used)) else {
                break;
            };
            used += form.cost[level];
            out.push((k, level));
        }
        out
    };
    let whole = choose(whole_room);
    let chosen = if at == 0 && whole.len() == forms.len() {
        whole
    } else {
        choose(room)
    };
    let mut fit = chosen.len();
    while fit > 0 {
        let keep = forms[chosen[fit - 1].0].0;
        let before = p.plan.clone();
        let pending = p.pending.len();
        if keep == 0 {
            p.restore_verbatim(span);
        } else {
            p.release_from_summary(span[keep]);
        }
        for &(k, level) in &chosen[..fit] {
            forms[k].1.apply(p, level);
        }
        if p.total() <= limit {
            return;
        }
        p.pending.truncate(pending);
        p.restore(before);
        fit /= 2;
    }
}
