//! Refill: the reducers free tokens in steps — a 20,000-token result cleared
//! at once, a chunk summarized whole, the tail shrunk a round at a time — so
//! a compaction can land far below its target with recent content gone that
//! the target had room for. What that room holds is given back, newest unit
//! first: verbatim, or when that does not fit, with its tool results
//! compressed, or as stubs (the call, its arguments and any failure stay as
//! they were). Cleared, externalized and dropped units come back whole; a summary
//! gives back its newest units and the rest of its span is summarized again.
//! Records carried over from the previous plan stay as they are: their bytes
//! are the prompt cache's prefix. So do a plugin's decisions: they mean more
//! than the budget (a stale read is stale at any size).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::ClearReason;

use super::{summary, CompactError, PipelineState, Projection};

/// Attempts at giving back part of one summary (each halves the part).
const SUMMARY_ATTEMPTS: u32 = 4;

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
            if state.policy.retention.contains_key(&env.tool_name) {
                form.min_level = 2;
            }
            let compressed = super::compress::compressed_form(p, state, i, &rules)
                .map(|(text, kept)| (p.counter.cleared(m, &text), text, kept))
                .filter(|(cost, ..)| *cost < verbatim);
            // A failure's stub keeps its error text: less than the failure,
            // more than the summary it comes back from.
            let (text, kept) = super::clear::anchoring_stub(env, state.memo);
            let stub = Some((p.counter.cleared(m, &text), text, kept));
            let compressed_cost = compressed.as_ref().map_or(verbatim, |c| c.0);
            form.cost[1] += compressed_cost;
            match stub.filter(|(cost, ..)| *cost < compressed_cost) {
                Some((cost, text, kept)) => {
                    form.cost[2] += cost;
                    form.replaced[2].push((i, ClearReason::Durability, text, kept));
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
/// room holds (each verbatim or stubbed), summarizing the rest again;
/// halves the part given back when the result does not fit `limit`.
fn give_back_summary(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    span: &[usize],
    limit: u32,
) {
    let summary_tokens = p.cost(span[0]);
    let cap = p
        .summary_of(span[0])
        .map(|r| p.plan.summarizations[r].summary.render_as_message().len())
        .unwrap_or_else(|| state.summary_max_chars());
    // While part of the span stays summarized, its summary takes about what
    // it takes now (a summary of fewer messages, at the same cap, is rarely
    // larger; the check below is exact): the room is what the target has
    // free. Given back whole, the summary's own tokens are free too.
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
    let units: Vec<(usize, &Form, usize)> = chosen
        .into_iter()
        .map(|(k, level)| (forms[k].0, &forms[k].1, level))
        .collect();
    let mut fit = units.len();
    for _ in 0..SUMMARY_ATTEMPTS {
        if fit == 0 {
            return;
        }
        let keep = units[fit - 1].0;
        let before = p.plan.clone();
        let pending = p.pending.len();
        let made = if keep == 0 {
            p.restore_verbatim(span);
            true
        } else {
            let old = p
                .summary_of(span[0])
                .map(|r| p.plan.summarizations[r].summary.clone());
            let back: String = span[keep..]
                .iter()
                .map(|&i| p.message(i).content.text())
                .collect::<Vec<_>>()
                .join("\n");
            // Only while every statement of a person's the summary holds is
            // still in the prompt, in the new summary or in what came back:
            // what a person said is worth more than the newest tool output.
            summary::resummarize_within(p, state, &span[..keep], cap, u32::MAX)
                && old.is_some_and(|old| {
                    p.summary_of(span[0]).is_some_and(|r| {
                        keeps_statements(&old, &p.plan.summarizations[r].summary, &back)
                    })
                })
        };
        if made {
            for &(_, form, level) in &units[..fit] {
                form.apply(p, level);
            }
            if p.total() <= limit {
                return;
            }
        }
        p.pending.truncate(pending);
        p.restore(before);
        fit /= 2;
    }
}

/// Whether every statement of `old` that a person made (quoted requests,
/// facts not drawn from the assistant's or a tool's text, open items, the
/// current task)
/// reads in `new` or in `back`, compared by their first words with
/// whitespace collapsed (a summary stores statements cleaned and capped).
fn keeps_statements(
    old: &crate::model::StructuredSummary,
    new: &crate::model::StructuredSummary,
    back: &str,
) -> bool {
    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }
    let here = squash(&format!("{}\n{back}", new.render_as_message()));
    let said = |statement: &str| {
        let probe: String = squash(statement).chars().take(60).collect();
        probe.is_empty() || here.contains(probe.trim_end_matches('…'))
    };
    let a_persons = |f: &&String| !f.starts_with("assistant: ") && !f.starts_with("tool ");
    // A quoted request reads `(turn N) text`; what came back has the text.
    let quoted = |r: &String| {
        r.split_once(") ")
            .map_or(r.as_str(), |(_, text)| text)
            .to_string()
    };
    old.requests.iter().all(|r| said(&quoted(r)))
        && old.facts.iter().filter(a_persons).all(|f| said(f))
        && old.open_items.iter().all(|o| said(&o.description))
        && old.current_task.as_deref().is_none_or(said)
}
