//! The pipeline itself (see the module documentation of [`super`] for its
//! steps): the starting plan, the reducers in order, the shrinking rounds
//! and the finish.

use crate::model::{CompactionPlan, Thread, ThreadLimits, ToolSchema};
use crate::render::RequestCounter;

use super::*;

/// Builds the budget for a request: the safety margin applies when the
/// counter estimates, the rehydration reserve when this turn reads back.
pub fn budget_for(
    policy: &Policy,
    max_input_tokens: u32,
    counter: &RequestCounter<'_>,
    system: Option<&str>,
    tools: &[ToolSchema],
    rehydrating: bool,
) -> TokenBudget {
    TokenBudget::for_policy(
        policy,
        max_input_tokens,
        counter.fixed(system, tools),
        ReserveUse {
            estimated_counts: !counter.counter.is_exact(),
            rehydrating,
        },
    )
}

/// The default reducers, cheap → expensive, as enabled by the policy.
pub fn default_reducers(policy: &Policy) -> Vec<Box<dyn Reducer>> {
    let e = policy.enable;
    let mut out: Vec<Box<dyn Reducer>> = Vec::new();
    if e.retention {
        out.push(Box::new(Retention));
    }
    if e.compress {
        out.push(Box::new(Compress::default()));
    }
    if e.clear {
        out.push(Box::new(Clear));
    }
    if e.externalize {
        out.push(Box::new(Externalize));
    }
    if e.summarize {
        out.push(Box::new(Summarize));
    }
    if e.drop {
        out.push(Box::new(Window));
    }
    out
}

/// Runs the pipeline with the default reducers.
pub fn compact(req: &CompactRequest<'_>, engine: &Engine<'_>) -> Result<Compaction, CompactError> {
    compact_with(req, engine, &default_reducers(req.policy))
}

/// Runs the pipeline with the given reducers (plugins insert theirs by
/// aggressiveness), in four steps:
/// 1. check the request and size the budget for its fixed parts;
/// 2. start from the previous plan (what it evicted stays evicted: its
///    bytes are the prompt cache's prefix) or from a fresh one;
/// 3. above the trigger, `shrink`; below it, keep everything;
/// 4. `finish`: purge, normalize and validate the plan, keep only the
///    artifacts it still references, fingerprint it.
pub fn compact_with(
    req: &CompactRequest<'_>,
    engine: &Engine<'_>,
    reducers: &[Box<dyn Reducer>],
) -> Result<Compaction, CompactError> {
    let (thread, policy) = (req.thread, req.policy);
    thread.validate(&req.limits)?;
    policy.validate()?;
    if req.max_input_tokens == 0 {
        return Err(CompactError::ZeroBudget);
    }
    let counter = RequestCounter::for_target(engine.counter, engine.ledger, req.target);
    let mut budget = budget_for(
        policy,
        req.max_input_tokens,
        &counter,
        req.system,
        req.tools,
        req.skip_aggressive,
    );
    budget.workspace_tokens = req.workspace.map_or(0, |w| counter.message(w));
    let mut warnings = oversize_warnings(thread, &req.limits);
    let start = starting_plan(req, &mut warnings);
    let pinned = partition::pinned(thread, policy);
    let fixed = budget.fixed_tokens();
    let enriched = preserve::enriched(thread, policy);
    let mut p = Projection::new(
        thread,
        counter,
        &policy.render,
        engine.redactor,
        start,
        pinned,
        fixed,
    )
    .reading(&enriched);
    let tokens_before = p.verbatim_total();
    // What each message cost under the plan this call started from: a
    // record that absorbs earlier ones frees only what they still took.
    let start_costs: Vec<u32> = (0..p.len()).map(|i| p.cost(i)).collect();
    let mut state = PipelineState::new(
        thread,
        policy,
        engine,
        req.observations,
        req.skip_aggressive,
    );
    state.warnings = warnings;
    let mut steps = Steps::new(reducers, &budget);
    // Not in a turn that reads back: what was just read is not evicted again.
    if let (Some(w), false) = (policy.window, req.skip_aggressive) {
        window::standing(&mut p, &w);
        if policy.enable.archive {
            p.archive_evictions(state.redactor);
        }
    }
    let mut tail = partition::TailShare::new(policy, budget.target()).within(p.len());
    let tool_results_before = p.tool_results_total();
    let tier_over = budget
        .tool_results_cap
        .is_some_and(|cap| tool_results_before > cap);
    // Over the cap: tool results go first, down to their target. What the
    // tier pass evicted is frozen before the shrink starts, so the refill
    // never gives it back past the cap.
    if tier_over {
        cap_tool_results(&mut p, &mut state, &mut steps, &tail)?;
    }
    let over_trigger = p.total() > budget.trigger();
    if over_trigger {
        shrink(&mut p, &mut state, &mut steps, &mut tail)?;
    } else if p.total() > budget.hard_limit() {
        // The trigger is never above the hard limit, so this cannot happen.
        return Err(CompactError::Internal(
            "untriggered request over the hard limit".into(),
        ));
    }
    let report = Report {
        tokens_before,
        tokens_after: 0,
        budget: BudgetReport {
            counting: crate::tokens::calibration::Counting::of(engine.counter),
            ..budget_report(
                &budget,
                fixed,
                (tool_results_before, p.tool_results_total()),
            )
        },
        triggered: over_trigger || tier_over,
        tier_triggered: tier_over,
        keep_recent_turns: tail.turns,
        keep_tool_io_pairs: tail.pairs,
        per_reducer: steps.reports,
        warnings: Vec::new(),
        developer_tokens: (0..p.len())
            .filter(|&i| p.message(i).role == crate::model::Role::Developer)
            .map(|i| p.verbatim_cost(i))
            .sum(),
        pinned_messages: p.pinned.iter().filter(|&&x| x).count() as u32,
        pinned_labels: pinned_labels(thread, &p.pinned),
        records: Vec::new(),
    };
    finish(req, engine, p, state, report, &start_costs)
}

/// The budget as the report gives it; the tool-result tier's tokens
/// before and after, when it has a cap.
fn budget_report(budget: &TokenBudget, fixed: u32, (before, after): (u32, u32)) -> BudgetReport {
    BudgetReport {
        max_input_tokens: budget.max_input_tokens,
        hard_limit: budget.hard_limit(),
        trigger: budget.trigger(),
        target: budget.target(),
        fixed_tokens: fixed,
        system_tokens: budget.system_tokens,
        tool_tokens: budget.tool_tokens,
        workspace_tokens: budget.workspace_tokens,
        counting: Default::default(),
        tool_results: budget.tool_results_cap.map(|cap| TierReport {
            cap,
            target: budget.tool_results_target().unwrap_or(cap),
            tokens_before: before,
            tokens_after: after,
        }),
    }
}

/// One warning naming the items of a type compactd does not know, carried
/// as they came (the first three and how many in all): every call on the
/// thread gives it, for the response and the audit record.
pub fn unknown_item_warnings(thread: &Thread) -> Vec<String> {
    let unknown: Vec<String> = thread
        .messages
        .iter()
        .flat_map(|m| {
            m.unknown_parts()
                .map(|(k, p)| format!("{} part {k} ({} {:?})", m.id, p.dialect.as_str(), p.kind))
        })
        .collect();
    if unknown.is_empty() {
        return Vec::new();
    }
    let more = match unknown.len() {
        1..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    vec![format!(
        "input: {}{more} of a type compactd does not know, carried as it came and sent back only in its own format",
        unknown[..unknown.len().min(3)].join(", ")
    )]
}

/// One warning naming the messages over `limits.warn_message_bytes` (the
/// first three and how many in all).
pub(super) fn oversize_warnings(thread: &Thread, limits: &ThreadLimits) -> Vec<String> {
    let over: Vec<(&str, usize)> = thread
        .messages
        .iter()
        // Images are large by nature; the warning is about text.
        .map(|m| {
            let images: usize = match &m.content {
                crate::model::Content::Parts(parts) => parts
                    .iter()
                    .filter(|p| match p {
                        crate::model::ContentPart::Image { .. } => true,
                        crate::model::ContentPart::Provider(p) => !p.media().is_empty(),
                        _ => false,
                    })
                    .map(crate::model::ContentPart::byte_len)
                    .sum(),
                crate::model::Content::Text(_) => 0,
            };
            (m.id.as_str(), m.byte_len() - images)
        })
        .filter(|&(_, n)| n > limits.warn_message_bytes)
        .collect();
    if over.is_empty() {
        return Vec::new();
    }
    let named: Vec<String> = over
        .iter()
        .take(3)
        .map(|(id, n)| format!("{id} ({} KB)", n.div_ceil(1024)))
        .collect();
    let more = match over.len() {
        1..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    vec![format!(
        "input: {}{more} over {} KB; a message this large is often a dump or a payload cut off on its way",
        named.join(", "),
        limits.warn_message_bytes / 1024
    )]
}

/// The plan to start from: the previous one normalized, or a fresh one when
/// there is none or it no longer fits the thread.
pub(super) fn starting_plan(
    req: &CompactRequest<'_>,
    warnings: &mut Vec<String>,
) -> CompactionPlan {
    let thread = req.thread;
    let Some(prev) = req.previous else {
        return CompactionPlan::new(thread.id.clone());
    };
    let mut prev = prev.clone();
    let normalized = prev.normalize();
    match prev.validate_against(thread, &req.policy.roles_never_prune) {
        Ok(()) => {
            warnings.extend(normalized.iter().map(ToString::to_string));
            prev
        }
        // The client edited history (a message the plan names is gone or
        // now pinned). Failing would fail every later turn the same way; a
        // fresh plan supersedes the stale one instead.
        Err(e) => {
            warnings.push(format!(
                "previous plan version {} no longer fits the thread ({e}); superseded by a fresh plan",
                prev.version
            ));
            CompactionPlan::new(thread.id.clone())
        }
    }
}

/// The reducers of one call, what each freed, and the budget they work to.
pub(super) struct Steps<'r> {
    reducers: &'r [Box<dyn Reducer>],
    reports: Vec<ReducerReport>,
    budget: &'r TokenBudget,
}

impl<'r> Steps<'r> {
    /// The reducers in order, each with a report of what it freed.
    pub(super) fn new(reducers: &'r [Box<dyn Reducer>], budget: &'r TokenBudget) -> Self {
        Steps {
            reducers,
            reports: reducers
                .iter()
                .map(|r| ReducerReport {
                    name: r.name().to_string(),
                    tokens_freed: 0,
                })
                .collect(),
            budget,
        }
    }
}

impl Steps<'_> {
    /// Runs the reducers at `which`, in order, until the target is met.
    pub(super) fn run(
        &mut self,
        which: &[usize],
        p: &mut Projection<'_>,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        let budget = *self.budget;
        self.run_to(which, p, state, &budget)
    }

    /// Runs the reducers at `which`, in order, until `budget`'s target is met.
    pub(super) fn run_to(
        &mut self,
        which: &[usize],
        p: &mut Projection<'_>,
        state: &mut PipelineState<'_>,
        budget: &TokenBudget,
    ) -> Result<(), CompactError> {
        for &i in which {
            if p.total() <= budget.target() {
                break;
            }
            state.cancel.check()?;
            let before = p.total();
            self.reducers[i].reduce(p, budget, state)?;
            // What a reducer evicted is archived at once, so the next one
            // sees what naming the archives costs and reduces for it.
            if state.policy.enable.archive {
                p.archive_evictions(state.redactor);
            }
            self.reports[i].tokens_freed += before.saturating_sub(p.total());
        }
        Ok(())
    }
}

/// The reducers that only ever replace tool results (externalize, told so
/// by [`PipelineState::only_tool_results`]): the ones a tier pass runs.
pub(super) const TOOL_RESULT_REDUCERS: [&str; 4] =
    ["retention", "compress", "clear", "externalize"];

/// Tool results over their cap: the tool-result reducers, with the recent
/// tail kept, aim the total as far down as the tier is over its target, so
/// only tool results go (oldest first) and dialogue stays. What cannot go
/// (pinned, recent, non-replayable with externalization off) is named in a
/// warning: the cap is a guard, the single total stays the hard ceiling.
pub(super) fn cap_tool_results(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    steps: &mut Steps<'_>,
    tail: &partition::TailShare,
) -> Result<(), CompactError> {
    let budget = *steps.budget;
    let (Some(cap), Some(target)) = (budget.tool_results_cap, budget.tool_results_target()) else {
        return Ok(());
    };
    let which: Vec<usize> = (0..steps.reducers.len())
        .filter(|&i| TOOL_RESULT_REDUCERS.contains(&steps.reducers[i].name()))
        .collect();
    partition::mark_kept(p, tail.turns, tail.pairs, tail.tokens);
    p.tail_tool_results_reducible = false;
    state.only_tool_results = true;
    // Reducers free in steps (a result at a time) and naming archives costs
    // a little: each round aims anew from where the last left the tier,
    // until it is at its target or a round frees nothing more.
    let mut last = u32::MAX;
    loop {
        let now = p.tool_results_total();
        let over = now.saturating_sub(target);
        if over == 0 || now >= last {
            break;
        }
        last = now;
        let pass = TokenBudget {
            goal: Some(p.total().saturating_sub(over)),
            ..budget
        };
        steps.run_to(&which, p, state, &pass)?;
    }
    state.only_tool_results = false;
    if p.tool_results_total() > target {
        state.warn(format!(
            "tool results take {} tokens, over their target of {target} (cap {cap}): the rest is pinned, recent or may not be evicted",
            p.tool_results_total()
        ));
    }
    Ok(())
}

/// Above the trigger: the reducers with a tail that shrinks until the
/// target is met or the tail is at its floor; then the window (dropping is
/// the last resort); then give back what the target has room for; refuse
/// only what cannot fit even with everything free dropped.
pub(super) fn shrink(
    p: &mut Projection<'_>,
    state: &mut PipelineState<'_>,
    steps: &mut Steps<'_>,
    tail: &mut partition::TailShare,
) -> Result<(), CompactError> {
    let budget = steps.budget;
    let archive = state.policy.enable.archive;
    // What the previous plan evicted stays evicted (the cache's prefix).
    let frozen: Vec<bool> = (0..p.len()).map(|i| !p.is_included(i)).collect();
    let (window, rest): (Vec<usize>, Vec<usize>) =
        (0..steps.reducers.len()).partition(|&i| steps.reducers[i].name() == "window");
    loop {
        partition::mark_kept(p, tail.turns, tail.pairs, tail.tokens);
        p.tail_tool_results_reducible = tail.at_floor;
        if tail.escalated() {
            partition::excerpt_last_user(p, tail.user_share(budget.target()));
            if archive {
                p.archive_evictions(state.redactor);
            }
        }
        steps.run(&rest, p, state)?;
        if p.total() <= budget.target() || tail.at_floor {
            break;
        }
        tail.shrink();
    }
    steps.run(&window, p, state)?;
    // `run` archives what each step evicted; naming the window's own
    // archives can tip the request over the hard limit, and then the window
    // frees more (its new drops archived in turn).
    for _ in 0..3 {
        if !archive || p.total() <= budget.hard_limit() {
            break;
        }
        steps.run(&window, p, state)?;
    }
    if p.total() < budget.target() {
        fill_target(p, budget, state, &frozen)?;
    }
    // The last resort is a drop, so it is the drop reducer's to make: with
    // it switched off the request is refused rather than cut.
    if p.total() > budget.hard_limit() && state.policy.enable.drop {
        window::drop_all_free(p);
        if archive {
            p.archive_evictions(state.redactor);
        }
    }
    if p.total() > budget.hard_limit() {
        let (pinned, tail) = p.locked_tokens();
        return Err(CompactError::InsufficientBudget {
            required: p.total(),
            limit: budget.hard_limit(),
            pinned,
            tail,
            fixed: budget.fixed_tokens(),
        });
    }
    if p.total() > budget.target() {
        state.warn(format!(
            "target of {} tokens not reached ({} tokens); within the hard limit of {}",
            budget.target(),
            p.total(),
            budget.hard_limit()
        ));
    }
    Ok(())
}

/// The plan out of the projection: purged, drops indexed (redacted),
/// normalized and validated; only the artifacts it still references are
/// written; counts and fingerprint set.
pub(super) fn finish(
    req: &CompactRequest<'_>,
    engine: &Engine<'_>,
    mut p: Projection<'_>,
    mut state: PipelineState<'_>,
    mut report: Report,
    start_costs: &[u32],
) -> Result<Compaction, CompactError> {
    p.purge();
    window::index_drops(&mut p);
    let tokens_after = p.total();
    let mut plan = p.take_plan();
    // Dropped spans' indexes are kept in the plan (never rendered).
    for d in &mut plan.drops {
        engine.redactor.redact_drop_index(&mut d.index);
    }
    let mut pending = std::mem::take(&mut p.pending);
    for w in plan.normalize() {
        state.warn(w.to_string());
    }
    plan.validate_against(req.thread, &req.policy.roles_never_prune)
        .map_err(|e| CompactError::Internal(format!("pipeline produced an invalid plan: {e}")))?;
    report.records = record_tokens(&plan, &p, start_costs);
    let referenced = referenced_artifacts(&plan);
    pending.retain(|a| referenced.contains(&a.placeholder));
    plan.original_token_count = report.tokens_before;
    plan.compacted_token_count = tokens_after;
    if report.triggered {
        plan.compacted_at_turn = Some(req.thread.current_turn());
    }
    plan.fingerprint = request_fingerprint(req, engine);
    report.tokens_after = tokens_after;
    report.warnings = state.warnings;
    Ok(Compaction {
        plan,
        pending,
        message_tokens: (0..p.len()).map(|i| p.cost(i)).collect(),
        fixed_tokens: report.budget.fixed_tokens,
        target: req.target,
        report,
    })
}

/// Gives back what the target has room for (see [`refill`]), then names the
/// archives of what it re-made. Naming them costs a few tokens the refill
/// cannot see: when that pushes the request over the target, the refill is
/// undone and run once more with what the naming cost kept spare, and
/// undone for good if it overshoots again.
pub(super) fn fill_target(
    p: &mut Projection<'_>,
    budget: &TokenBudget,
    state: &mut PipelineState<'_>,
    frozen: &[bool],
) -> Result<(), CompactError> {
    let mut spare = 0;
    for _ in 0..2 {
        let before = p.plan.clone();
        let pending = p.pending.len();
        refill::refill(p, budget.target().saturating_sub(spare), state, frozen)?;
        let refilled = p.total();
        if state.policy.enable.archive {
            p.archive_evictions(state.redactor);
        }
        if p.total() <= budget.target() {
            return Ok(());
        }
        // What naming the archives cost, and a little more, kept spare.
        spare = p.total().saturating_sub(refilled) + 32;
        p.pending.truncate(pending);
        p.restore(before);
    }
    Ok(())
}
