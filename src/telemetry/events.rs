//! The structured events compactd emits on a call's span (target
//! [`EVENTS`]), named as the seeds' event schema names them: a compaction's
//! lifecycle, a render's audit record, rehydration and quality signals.
//! Counts, ids, sizes and reasons; content only where capture is opted into,
//! redacted again and bounded. Use cases hand over what happened; what is
//! measured and how it is spelled is decided here.

use std::collections::{HashMap, HashSet};

use super::{events_enabled, int, metrics, EVENTS};
use crate::model::{
    ActionKind, AuditRecord, CompactionPlan, Eviction, Sensitivity, SummarizationRecord, Thread,
};
use crate::redact::Redactor;
use crate::reduce::{Policy, RecordTokens, Report};
use crate::render::quality::QualitySignals;
use crate::render::RehydrationReport;

/// Most bytes of content one captured event attribute carries.
const CAPTURED_BYTES: usize = 8 * 1024;

/// Most evictions listed in one audit event; the response carries them all.
const AUDIT_EVENT_EVICTIONS: usize = 200;

/// A committed compaction, as its events describe it.
pub struct Compacted<'a> {
    /// The model counted for.
    pub model: &'a str,
    /// The thread compacted.
    pub thread: &'a Thread,
    /// The effective policy.
    pub policy: &'a Policy,
    /// The committed plan.
    pub plan: &'a CompactionPlan,
    /// What the pipeline did.
    pub report: &'a Report,
    /// The plan it was made on top of, if any (its summaries are not new).
    pub previous: Option<&'a CompactionPlan>,
    /// With content capture on: the redactor captured text passes again.
    pub capture: Option<&'a Redactor>,
}

/// The compaction's events and its per-strategy metrics.
pub fn compaction(c: &Compacted<'_>) {
    let report = c.report;
    for r in report.per_reducer.iter().filter(|r| r.tokens_freed > 0) {
        metrics().tokens_freed(&r.name, u64::from(r.tokens_freed));
    }
    // The sizes and summaries below are measured only for someone listening.
    if !events_enabled() {
        return;
    }
    let b = &report.budget;
    let max = f64::from(b.max_input_tokens.max(1));
    tracing::info!(
        target: EVENTS,
        model = %c.model,
        t_est = int(report.tokens_before),
        max_tokens = int(b.max_input_tokens),
        usage_pct = f64::from(report.tokens_before) / max,
        fixed_tokens = int(b.fixed_tokens),
        system_tokens = int(b.system_tokens),
        tools_schema_tokens = int(b.tool_tokens),
        framing_tokens = int(
            b.fixed_tokens
                .saturating_sub(b.system_tokens + b.tool_tokens + b.workspace_tokens)
        ),
        workspace_tokens = int(b.workspace_tokens),
        developer_tokens = int(report.developer_tokens),
        message_tokens = int(
            report
                .tokens_before
                .saturating_sub(b.fixed_tokens)
                .saturating_sub(report.developer_tokens)
        ),
        "compact.token_estimate"
    );
    tracing::info!(
        target: EVENTS,
        triggered = report.triggered,
        reason = match (
            report.tier_triggered,
            report.tokens_before > b.trigger,
            report.triggered,
        ) {
            (true, true, _) => "tokens above the trigger and tool results above their cap",
            (true, false, _) => "tool results above their cap",
            (false, _, true) => "tokens above the trigger",
            (false, _, false) => "tokens at or below the trigger",
        },
        tool_results_tokens = b.tool_results.map(|t| int(t.tokens_before)),
        tool_results_cap_tokens = b.tool_results.map(|t| int(t.cap)),
        trigger_tokens = int(b.trigger),
        target_tokens = int(b.target),
        hard_limit_tokens = int(b.hard_limit),
        trigger_ratio = c.policy.trigger_ratio,
        target_ratio = c.policy.target_ratio,
        "compact.trigger_decision"
    );
    for r in report.per_reducer.iter().filter(|r| r.tokens_freed > 0) {
        tracing::info!(
            target: EVENTS,
            strategy = %r.name,
            tokens_freed = int(r.tokens_freed),
            "compact.strategy_applied"
        );
    }
    summaries_created(c);
    let (records, left_out) = records_created(c);
    pruned(c.plan, report);
    tracing::info!(
        target: EVENTS,
        tokens_before = int(report.tokens_before),
        tokens_after = int(report.tokens_after),
        target_use = report.target_use(),
        warnings = int(report.warnings.len()),
        records_created = int(records),
        record_events_left_out = int(left_out),
        kept_pinned = int(report.pinned_messages),
        // Labels are the caller's names for its rules ("Refund policy"):
        // bounded, like ids.
        kept_pinned_labels = %report
            .pinned_labels
            .iter()
            .take(20)
            .map(|l| crate::summarize::text::head(l, 80))
            .collect::<Vec<_>>()
            .join(";"),
        kept_recent_turns = int(report.keep_recent_turns),
        kept_tool_pairs = int(report.keep_tool_io_pairs),
        "compact.completed"
    );
}

/// A lifecycle event per record the plan did not have before
/// (`compact.externalized`, `compact.summarized`, `compact.cleared`,
/// `compact.dropped`), at most [`AUDIT_EVENT_EVICTIONS`]: what it did, which
/// strategy, its span, its tokens verbatim, under the previous plan and
/// now, and what it freed beyond the previous plan (so a span summarized
/// again is not counted as freed twice). Returns how many records are new
/// and how many of them got no event.
fn records_created(c: &Compacted<'_>) -> (usize, usize) {
    let old: HashSet<(ActionKind, &[String])> = c
        .previous
        .map(|p| {
            let e = p.externalizations.iter();
            let s = p.summarizations.iter();
            let cl = p.clearings.iter();
            let d = p.drops.iter();
            e.map(|r| (ActionKind::Externalize, r.span.message_ids.as_slice()))
                .chain(s.map(|r| (ActionKind::Summarize, r.span.message_ids.as_slice())))
                .chain(cl.map(|r| (ActionKind::Clear, r.span.message_ids.as_slice())))
                .chain(d.map(|r| (ActionKind::Drop, r.span.message_ids.as_slice())))
                .collect()
        })
        .unwrap_or_default();
    let spans = c
        .plan
        .externalizations
        .iter()
        .map(|r| &r.span)
        .chain(c.plan.summarizations.iter().map(|r| &r.span))
        .chain(c.plan.clearings.iter().map(|r| &r.span))
        .chain(c.plan.drops.iter().map(|r| &r.span));
    // `Eviction::of` lists the records in the same order as `spans`.
    let evictions = Eviction::of(c.plan, crate::summarize::EXTRACTIVE_ID);
    let tokens: HashMap<(ActionKind, &str), &RecordTokens> = c
        .report
        .records
        .iter()
        .map(|r| ((r.action, r.first_message_id.as_str()), r))
        .collect();
    let mut created = 0;
    for (e, span) in evictions.iter().zip(spans) {
        if old.contains(&(e.action, span.message_ids.as_slice())) {
            continue;
        }
        created += 1;
        if created > AUDIT_EVENT_EVICTIONS {
            continue;
        }
        let record = tokens.get(&(e.action, e.first_message_id.as_str()));
        let (before, after, previous, freed) = record.map_or((0, 0, 0, 0), |r| {
            (
                r.tokens_before,
                r.tokens_after,
                r.tokens_previous,
                r.tokens_freed(),
            )
        });
        let fields = (
            e.strategy.as_str(),
            e.reason.as_str(),
            e.first_message_id.as_str(),
            e.last_message_id.as_str(),
        );
        let artifact = e.artifact_id.as_str();
        let (count, freed) = (int(e.message_count), int(freed));
        macro_rules! record_event {
            ($name:literal) => {
                tracing::info!(
                    target: EVENTS,
                    strategy = %fields.0,
                    reason = %fields.1,
                    first_message_id = %fields.2,
                    last_message_id = %fields.3,
                    message_count = count,
                    tokens_before = int(before),
                    tokens_after = int(after),
                    tokens_previous = int(previous),
                    tokens_freed = freed,
                    artifact_id = %artifact,
                    $name
                )
            };
        }
        match e.action {
            ActionKind::Externalize => record_event!("compact.externalized"),
            ActionKind::Summarize => record_event!("compact.summarized"),
            ActionKind::Clear => record_event!("compact.cleared"),
            ActionKind::Drop => record_event!("compact.dropped"),
            ActionKind::Include => {}
        }
    }
    (created, created.saturating_sub(AUDIT_EVENT_EVICTIONS))
}

/// Most `compact.proposal` events one plugin call writes; the plugin span's
/// `compactd.proposal_events_left_out` counts the rest.
pub const PROPOSAL_EVENTS: usize = AUDIT_EVENT_EVICTIONS;

/// A plugin proposal the host applied, as `compact.proposal` reports it.
/// Counts only: never the rationale (it may quote content) or message ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProposalApplied<'a> {
    /// The plugin, `name@version`.
    pub strategy: &'a str,
    /// `clear`, `summarize`, `drop` or `externalize`.
    pub action: &'static str,
    /// Messages it names.
    pub message_count: usize,
    /// The plugin's estimate of the tokens it frees (0: none given).
    pub estimated_tokens_freed: u32,
    /// What it freed, measured on the request total.
    pub tokens_freed: u32,
    /// False when the host undid it (its replacement was no smaller) or
    /// left it out (an externalization right after a rehydration).
    pub accepted: bool,
}

/// `compact.proposal` on the plugin's span, and how far the estimate was
/// from the measure (only when the plugin gave one).
pub fn proposal(a: &ProposalApplied<'_>) {
    if a.estimated_tokens_freed > 0 {
        metrics().plugin_estimate_error(
            a.strategy,
            a.action,
            a.estimated_tokens_freed.abs_diff(a.tokens_freed),
        );
    }
    tracing::info!(
        target: EVENTS,
        strategy = %a.strategy,
        action = a.action,
        message_count = int(a.message_count),
        estimated_tokens_freed = int(a.estimated_tokens_freed),
        tokens_freed = int(a.tokens_freed),
        accepted = a.accepted,
        "compact.proposal"
    );
}

/// A task outcome the caller reported: the metric, labelled with whether
/// the prompt the task ran on (the plan committed before this call) was
/// compacted, and an event with that plan's version and turn.
pub fn task_outcome(outcome: &'static str, basis: Option<&CompactionPlan>, tenant: &str) {
    let compacted = basis.is_some_and(|p| !p.is_empty());
    metrics().task_outcome(outcome, compacted, tenant);
    tracing::info!(
        target: EVENTS,
        outcome,
        compacted,
        plan_version = basis.map(|p| int(p.version)),
        compacted_at_turn = basis.and_then(|p| p.compacted_at_turn).map(int),
        "compact.task_outcome"
    );
}

/// A `compact.summary_created` event per summary the plan did not have.
fn summaries_created(c: &Compacted<'_>) {
    let old: HashSet<&[String]> = c
        .previous
        .map(|p| {
            p.summarizations
                .iter()
                .map(|r| r.span.message_ids.as_slice())
                .collect()
        })
        .unwrap_or_default();
    let created: Vec<&SummarizationRecord> = c
        .plan
        .summarizations
        .iter()
        .filter(|s| !old.contains(s.span.message_ids.as_slice()))
        .collect();
    // Sizes by id, only when there is a summary to measure.
    let sizes: HashMap<&str, usize> = if created.is_empty() {
        Default::default()
    } else {
        c.thread
            .messages
            .iter()
            .map(|m| (m.id.as_str(), m.byte_len()))
            .collect()
    };
    for s in created {
        let input_bytes: usize = s
            .span
            .message_ids
            .iter()
            .filter_map(|id| sizes.get(id.as_str()))
            .sum();
        let rendered = s.summary.render_as_message();
        let summary_bytes = rendered.len().max(1);
        // Opt-in content capture: the summary as the prompt shows it,
        // redacted again and bounded.
        let payload = c.capture.map(|r| {
            crate::summarize::text::head(&r.redact(&rendered), CAPTURED_BYTES).to_string()
        });
        tracing::info!(
            target: EVENTS,
            strategy = if s.summarizer_id.is_empty() {
                crate::summarize::EXTRACTIVE_ID
            } else {
                s.summarizer_id.as_str()
            },
            input_messages = int(s.span.message_ids.len()),
            summary_tokens = int(s.summary_token_count),
            first_message_id = %s.span.start_message_id(),
            last_message_id = %s.span.end_message_id(),
            entries_left_out = int(s.summary.omitted),
            input_bytes = int(input_bytes),
            summary_bytes = int(summary_bytes),
            // As the seeds define it: summary size over input size (by bytes).
            compression_ratio = summary_bytes as f64 / input_bytes.max(1) as f64,
            payload = payload.as_deref(),
            "compact.summary_created"
        );
    }
}

/// `compact.pruned_messages`: the ids the plan drops (at most 50).
fn pruned(plan: &CompactionPlan, report: &Report) {
    let dropped: Vec<&str> = plan
        .drops
        .iter()
        .flat_map(|d| d.span.message_ids.iter().map(String::as_str))
        .collect();
    if !dropped.is_empty() {
        // At most 50 ids: enough to find a message, bounded in size.
        let ids: Vec<&str> = dropped.iter().copied().take(50).collect();
        tracing::info!(
            target: EVENTS,
            pruned_count = int(dropped.len()),
            pruned_ids = %ids.join(","),
            kept_recent_turns = int(report.keep_recent_turns),
            kept_tool_pairs = int(report.keep_tool_io_pairs),
            "compact.pruned_messages"
        );
    }
}

/// A `compact.rehydration` event per artifact injected and a
/// `compact.rehydration_blocked` one per artifact refused, with the metrics.
pub fn rehydration(reports: &[RehydrationReport], tenant: &str) {
    let metrics = metrics();
    for r in reports {
        let mode = if r.auto { "auto" } else { "explicit" };
        match &r.blocked {
            Some(why) => {
                let reason = why.as_str();
                tracing::info!(
                    target: EVENTS,
                    artifact_id = %r.artifact_id,
                    mode,
                    reason,
                    "compact.rehydration_blocked"
                );
                metrics.rehydration(mode, Some(reason), tenant);
            }
            None if r.omitted => {
                tracing::info!(
                    target: EVENTS,
                    artifact_id = %r.artifact_id,
                    mode,
                    reason = "RESERVE",
                    "compact.rehydration_blocked"
                );
                metrics.rehydration(mode, Some("RESERVE"), tenant);
            }
            None => {
                tracing::info!(
                    target: EVENTS,
                    artifact_id = %r.artifact_id,
                    mode,
                    truncated = r.truncated,
                    "compact.rehydration"
                );
                metrics.rehydration(mode, None, tenant);
            }
        }
    }
}

/// The quality signals as an event and metrics.
pub fn quality(q: &QualitySignals, tenant: &str) {
    let metrics = metrics();
    metrics.rehydration_requests(
        "read_artifact_call",
        u64::from(q.read_artifact_calls_new),
        tenant,
    );
    metrics.thread_rehydration_requests(u64::from(q.read_artifact_calls_in_thread), tenant);
    if let Some(a) = &q.asked_for_compacted {
        metrics.asked_for_compacted_context(tenant);
        tracing::warn!(
            target: EVENTS,
            question_message_id = %a.question_message_id,
            evicted_message_ids = %a.evicted_message_ids.join(","),
            lost_terms = int(a.lost_terms),
            in_summary = a.in_summary,
            read_artifact_calls_in_thread = int(q.read_artifact_calls_in_thread),
            "compact.quality.asked_for_compacted_context"
        );
    }
}

/// The audit record as a structured event on the call's span: what an
/// operator searches to answer "was X compacted out, or did the model ignore
/// it?" for any past turn. Ids, reasons and versions; never content.
pub fn audit(a: &AuditRecord) {
    // Formatting every eviction is only worth it for someone listening.
    if !events_enabled() {
        return;
    }
    let evicted: Vec<String> = a
        .evicted
        .iter()
        .take(AUDIT_EVENT_EVICTIONS)
        .map(|e| {
            format!(
                "{}:{}..{}({}):{}:{}",
                e.action.done(),
                e.first_message_id,
                e.last_message_id,
                e.message_count,
                e.strategy,
                if e.artifact_id.is_empty() {
                    "-"
                } else {
                    &e.artifact_id
                }
            )
        })
        .collect();
    tracing::info!(
        target: EVENTS,
        plan_version = int(a.plan_version),
        plan_fingerprint = %a.plan_fingerprint,
        requester = %super::tenant_label(&a.requester),
        summarizer_id = %a.summarizer_id,
        tokenizer = %a.tokenizer,
        externalized = int(a.evictions.externalized),
        summarized = int(a.evictions.summarized),
        cleared = int(a.evictions.cleared),
        dropped = int(a.evictions.dropped),
        evicted = %evicted.join(";"),
        evicted_truncated = a.evicted.len() > AUDIT_EVENT_EVICTIONS,
        artifact_ids = %a.artifact_ids.join(","),
        rehydrated_artifact_ids = %a.rehydrated_artifact_ids.join(","),
        strategies = %a.strategies.join(","),
        warnings = int(a.warnings.len()),
        turns_since_compaction = a.turns_since_compaction.map(i64::from),
        "compact.audit"
    );
}

/// `compact.explain`: the verdict and how many messages, summaries and
/// artifacts matched.
pub fn explain(
    plan_version: u64,
    verdict: &str,
    (messages, summaries, artifacts): (usize, usize, usize),
) {
    tracing::info!(
        target: EVENTS,
        plan_version = int(plan_version),
        verdict,
        message_hits = int(messages),
        summary_hits = int(summaries),
        artifact_hits = int(artifacts),
        "compact.explain"
    );
}

/// A Rehydrate call's `compact.rehydration` event (tokens returned, cut or
/// not), or its `compact.rehydration_blocked` one with the reason; and the
/// metric.
pub fn rpc_rehydration(
    artifact_id: &str,
    sensitivity: Sensitivity,
    outcome: Result<(u32, bool), &'static str>,
    tenant: &str,
) {
    match outcome {
        Ok((tokens, truncated)) => {
            tracing::info!(
                target: EVENTS,
                artifact_id,
                mode = "rpc",
                sensitivity = sensitivity.as_str(),
                tokens = int(tokens),
                truncated,
                "compact.rehydration"
            );
            metrics().rehydration("rpc", None, tenant);
        }
        Err(reason) => {
            tracing::info!(
                target: EVENTS,
                artifact_id,
                mode = "rpc",
                reason,
                sensitivity = sensitivity.as_str(),
                "compact.rehydration_blocked"
            );
            metrics().rehydration("rpc", Some(reason), tenant);
        }
    }
}

/// `compact.recall`: how many passages the recall block carries, from which
/// messages and artifacts (ids only).
pub fn recall(passages: &[crate::recall::RecalledPassage]) {
    if passages.is_empty() {
        return;
    }
    let (messages, artifacts) = id_lists(
        passages
            .iter()
            .map(|p| (p.message_id.as_str(), p.artifact_id.as_deref())),
    );
    tracing::info!(
        target: EVENTS,
        passages = int(passages.len()),
        message_ids = %messages,
        artifact_ids = %artifacts,
        "compact.recall"
    );
}

/// A SearchContext answered: which messages and artifacts it returned, and
/// how many matches the caller may not read (never the query or passages).
pub fn search_context(
    plan_version: u64,
    query_chars: usize,
    passages: &[crate::recall::FoundPassage],
    withheld: u32,
) {
    let (messages, artifacts) = id_lists(
        passages
            .iter()
            .map(|p| (p.message_id.as_str(), p.artifact_id.as_deref())),
    );
    tracing::info!(
        target: EVENTS,
        plan_version = int(plan_version),
        query_chars = int(query_chars),
        passages = int(passages.len()),
        withheld = int(withheld),
        message_ids = %messages,
        artifact_ids = %artifacts,
        "compact.search_context"
    );
}

/// Comma-joined message ids and artifact ids of passages (ids only).
fn id_lists<'a>(passages: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> (String, String) {
    let (mut messages, mut artifacts) = (Vec::new(), Vec::new());
    for (m, a) in passages {
        messages.push(m);
        artifacts.extend(a);
    }
    (messages.join(","), artifacts.join(","))
}
