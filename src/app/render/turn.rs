//! The mechanics of one render turn: render the plan's prompt (keeping the
//! stable part of the last render where it still holds), count it, and
//! encode it in the requested format, checked against the window.

use crate::provider::{body_tokens, Encoded, Format};
use std::sync::Arc;

use crate::model::{
    AuditRecord, CompactionPlan, EvictionCounts, PLAN_FORMAT_VERSION, SUMMARY_RENDER_VERSION,
    SUMMARY_SCHEMA_VERSION,
};
use crate::model::{Eviction, Pairing, Thread};
use crate::recall::RecalledPassage;
use crate::reduce::{referenced_artifacts, ReserveUse, TokenBudget};
use crate::render::prefix::PrefixTrace;
use crate::render::stable::{stand_in_text, Rendered, StablePart, Written};
use crate::render::{
    render_from, ProviderOptions, RehydrationReport, RenderInput, Request, RequestCounter,
    RequestTokens, RENDER_FORMAT_VERSION,
};

use super::super::recall::fit_recall;
use super::super::{AppError, Result};

use super::*;

/// A rendered and counted turn: the request, its tokens, what was read back
/// and recalled, and where per-turn content starts (with how many messages
/// the render placed).
pub(super) type Counted = (
    Request,
    RequestTokens,
    Vec<RehydrationReport>,
    Vec<RecalledPassage>,
    (usize, usize),
);

/// Renders with the rehydrated content fitted in, and counts the request as
/// rendered: what is sent is recounted, never taken from the plan (pending
/// calls left out, the order repaired). A committed plan rendered against a
/// thread that has grown since may no longer fit: it is refused, never handed
/// out over budget; a plan compacted in this call that does not fit is a bug,
/// reported as one.
///
/// With the stable `part` of the last render, only the messages after it
/// are rendered: the request returned holds those (and the per-turn
/// content), its tokens count the part's messages too, and its notes start
/// with the part's. Returns also where the per-turn position was before
/// anything was placed there, and the tokens of the messages before it.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub(super) fn render_and_count(
    cmd: &RenderCommand,
    pairing: &Pairing,
    plan: &CompactionPlan,
    rc: &RequestCounter<'_>,
    extras: TurnExtras,
    max_input_tokens: u32,
    summaries: &dyn crate::render::SummaryTexts,
    part: Option<&StablePart>,
) -> Result<Counted> {
    let policy = &cmd.request.policy;
    let kept = part.map_or(0..0, |p| p.cut..p.end);
    let render_with = |rehydrated: &[crate::render::Rehydrated]| {
        render_from(
            &cmd.request.thread,
            pairing,
            plan,
            &RenderInput {
                system: cmd.request.system.as_deref(),
                tools: &cmd.request.tools,
                rehydrated,
                options: &policy.render,
                omit_pending_calls: cmd.omit_pending_calls,
                summaries: Some(summaries),
                workspace: cmd.request.workspace.as_ref(),
            },
            kept.clone(),
        )
    };
    let mut request = render_with(&[]);
    // Where this turn's content goes, before any is placed there: what
    // precedes it is what the next turn may keep.
    let turn_at = crate::render::per_turn_position(&request);
    let rendered = request.messages.len();
    // The kept part's messages count as the request's.
    let with_part = |mut t: RequestTokens| {
        if let Some(p) = part {
            let kept = p.before.tokens + p.after.tokens;
            t.messages += kept;
            t.total += kept;
        }
        t
    };
    let mut tokens = with_part(rc.request(&request));
    // The fixed parts were just counted with the request. Without anything
    // read back the whole window is the ceiling; content read back takes
    // what the reserve and the room left allow.
    let budget = turn_budget(policy, max_input_tokens, &tokens, rc);
    let ceiling = budget.ceiling();
    if tokens.total > ceiling {
        return Err(over_the_limit(
            cmd,
            plan,
            tokens.total,
            ceiling,
            max_input_tokens,
        ));
    }
    let room = policy
        .rehydration_reserve_tokens
        .min(ceiling - tokens.total);
    let options = &cmd.request.policy.render;
    let TurnExtras {
        fetched,
        auto,
        auto_cap,
        recall,
    } = extras;
    let (injected, report) = fit_read_backs(rc, fetched, auto, auto_cap, room, options);
    if !injected.is_empty() {
        request = render_with(&injected);
        tokens = with_part(rc.request(&request));
        if tokens.total > ceiling {
            return Err(AppError::Internal(format!(
                "read-back content fitted into {room} tokens renders to {} tokens, over the limit {ceiling}",
                tokens.total
            )));
        }
    }
    let recalled = match recall {
        Some(recall) => {
            let room = recall
                .1
                .reserve_tokens
                .min(budget.trigger().min(ceiling).saturating_sub(tokens.total));
            let at = (pairing, part, room, ceiling);
            add_recall(cmd, &mut request, &mut tokens, rc, recall, at)?
        }
        None => Vec::new(),
    };
    add_injections(cmd, &mut request, &mut tokens, rc)?;
    if let Some(p) = part {
        let kept = p.before.notes.iter().chain(&p.after.notes).cloned();
        request.notes.splice(0..0, kept);
    }
    Ok((request, tokens, report, recalled, (turn_at, rendered)))
}

/// The budget of a turn, its fixed parts just counted: without anything
/// read back the whole window is the ceiling.
fn turn_budget(
    policy: &crate::reduce::Policy,
    max_input_tokens: u32,
    tokens: &RequestTokens,
    rc: &RequestCounter<'_>,
) -> TokenBudget {
    TokenBudget::for_policy(
        policy,
        max_input_tokens,
        (tokens.system, tokens.tools, tokens.framing),
        ReserveUse {
            estimated_counts: !rc.counter.is_exact(),
            rehydrating: false,
        },
    )
}

/// A plan that renders over the ceiling: a bug when it was compacted for
/// this very request, the caller's to fix (compact) otherwise.
fn over_the_limit(
    cmd: &RenderCommand,
    plan: &CompactionPlan,
    total: u32,
    ceiling: u32,
    max_input_tokens: u32,
) -> AppError {
    if cmd.compact_first {
        return AppError::Internal(format!(
            "plan version {} was compacted for this request but renders to {total} tokens, over the limit {ceiling}",
            plan.version
        ));
    }
    AppError::InsufficientBudget {
        message: format!(
            "plan version {} renders this thread to {total} tokens, over the limit of {ceiling} for max_input_tokens {max_input_tokens}; call Compact or set compact_first",
            plan.version
        ),
    }
}

/// The recall block, placed where per-turn content goes when it fits
/// `room` (under the trigger: a caller that keeps the compacted prompt as
/// its history is not compacted again for it) and the ceiling; the
/// passages it carries.
fn add_recall(
    cmd: &RenderCommand,
    request: &mut Request,
    tokens: &mut RequestTokens,
    rc: &RequestCounter<'_>,
    (index, settings): (RecallIndexRef, crate::recall::RecallSettings),
    (pairing, part, room, ceiling): (&Pairing, Option<&StablePart>, u32, u32),
) -> Result<Vec<RecalledPassage>> {
    let mut index = index
        .lock()
        .map_err(|_| AppError::Internal("recall index poisoned".into()))?;
    let thread = &cmd.request.thread;
    let Some((text, hits)) = fit_recall(
        &mut index,
        (thread, pairing),
        shown_text(request, part)?,
        rc,
        settings,
        room,
        cmd.request.policy.render.delimit_tool_output,
    ) else {
        return Ok(Vec::new());
    };
    // Where the renderer puts per-turn content; counted alone, as the
    // request's count is the sum of its messages'.
    let block = crate::render::recall_message(&text);
    let cost = rc.message(&block);
    if tokens.total + cost > ceiling {
        return Ok(Vec::new());
    }
    let at = crate::render::per_turn_position(request);
    request.messages.insert(at, block);
    tokens.recalled += cost;
    tokens.total += cost;
    Ok(hits
        .iter()
        .map(|h| RecalledPassage {
            message_id: h.passage.message_id.clone(),
            artifact_id: h.passage.artifact_id.clone(),
            line: h.passage.line,
        })
        .collect())
}

/// The caller's hooks, last, next to the latest user message, paid from
/// the reserve compaction left free (the ceiling is below the window by
/// that much): the first that does not fit is an error naming it.
fn add_injections(
    cmd: &RenderCommand,
    request: &mut Request,
    tokens: &mut RequestTokens,
    rc: &RequestCounter<'_>,
) -> Result<()> {
    let reserve = cmd.request.policy.injection_reserve_tokens;
    let mut used = 0u32;
    // One position for all, in the order given (a user message placed
    // there makes the next lookup land before it).
    let at = crate::render::per_turn_position(request);
    for (i, inj) in cmd.injections.iter().enumerate() {
        let m = crate::render::injected_message(&inj.hook, &inj.text);
        let cost = rc.message(&m);
        used = used.saturating_add(cost);
        if used > reserve {
            return Err(AppError::invalid(
                format!("injections[{i}]"),
                format!(
                    "hook {:?} needs {cost} tokens, over what is left of the injection reserve ({} of policy.injection_reserve_tokens {reserve}); raise the reserve or shorten what the hook adds",
                    inj.hook,
                    reserve.saturating_sub(used - cost)
                ),
            ));
        }
        request.messages.insert(at + i, m);
        tokens.messages += cost;
        tokens.total += cost;
    }
    Ok(())
}

/// One render of the plan with what the turn adds, in the requested form.
pub(super) struct Turn {
    pub(super) output: RenderedOutput,
    pub(super) trace: Option<PrefixTrace>,
    pub(super) tokens: RequestTokens,
    pub(super) rehydrated: Vec<RehydrationReport>,
    pub(super) recalled: Vec<RecalledPassage>,
    /// What rendering changed to satisfy the provider.
    pub(super) warnings: Vec<String>,
    /// What the next render of the thread may keep.
    pub(super) next: Option<StablePart>,
}

/// What names the part a render keeps: the hash of what shapes
/// the body, and the plan's version and fingerprint.
type PartId<'a> = (u64, &'a (u64, String));

/// Renders, counts and encodes one turn: the whole thread, or only what
/// follows the stable `part` of the last render.
#[allow(clippy::too_many_arguments)]
pub(super) fn render_turn(
    cmd: &RenderCommand,
    (pairing, (key, plan_id)): (&Pairing, PartId<'_>),
    plan: &CompactionPlan,
    rc: &RequestCounter<'_>,
    extras: TurnExtras,
    (max_input_tokens, model): (u32, String),
    summaries: &dyn crate::render::SummaryTexts,
    (previous, part): (Option<&PrefixTrace>, Option<&StablePart>),
) -> Result<Turn> {
    let (request, mut tokens, rehydrated, recalled, (at, rendered)) = render_and_count(
        cmd,
        pairing,
        plan,
        rc,
        extras,
        max_input_tokens,
        summaries,
        part,
    )?;
    let warnings = render_warnings(&request, cmd.format);
    // What the body may count as sent: the window less the reserves; the
    // safety margin is there for what an estimate of the parts misses in
    // the whole.
    let window = TokenBudget::for_policy(
        &cmd.request.policy,
        max_input_tokens,
        (tokens.system, tokens.tools, tokens.framing),
        ReserveUse::default(),
    )
    .ceiling();
    let next = Some(Next {
        key,
        plan: plan_id.clone(),
        thread: &cmd.request.thread,
        pairing,
        at,
        rendered,
    });
    let (output, trace, next) = output(
        request,
        cmd.format,
        ProviderOptions {
            model,
            max_output_tokens: cmd.max_output_tokens,
            prompt_cache: cmd.prompt_cache.clone(),
        },
        rc,
        (&mut tokens, window),
        previous,
        (part, next),
    )?;
    Ok(Turn {
        output,
        trace,
        tokens,
        rehydrated,
        recalled,
        warnings,
        next,
    })
}

/// Whether the messages after `part` render on their own: the thread (as
/// rendered, after settling) holds the messages the part rendered, the cut
/// message (the user message the per-turn content went before) and its
/// loop included; no result after the part answers a call in it; the format
/// encodes message by message; and there is no workspace slot (it goes
/// after the last summary, which may lie in the part).
pub(super) fn extends_part(cmd: &RenderCommand, part: &StablePart, pairing: &Pairing) -> bool {
    let (old, now) = (&part.thread.messages, &cmd.request.thread.messages);
    let same = |(a, b): (&Arc<crate::model::Message>, &Arc<crate::model::Message>)| {
        Arc::ptr_eq(a, b) || a == b
    };
    // A part's loop always ends past its cut message.
    let end = part.end;
    cmd.request.workspace.is_none()
        && cmd.format.elements_of(None, &[]).is_some()
        && end <= old.len()
        && end <= now.len()
        // Usually the same messages (an append session's copy); settling
        // (reasoning before the last user message left out) makes new ones
        // with the same content.
        && old[..end].iter().zip(&now[..end]).all(same)
        && crate::render::results_answer_within(pairing, end..now.len())
}

/// Where the message at `part`'s cut is in a request rendered after the
/// part (the kept loop goes right after it).
pub(super) fn cut_position(request: &Request, part: &StablePart) -> Option<usize> {
    let id = &part.thread.messages.get(part.cut)?.id;
    request
        .messages
        .iter()
        .position(|m| m.origin == crate::render::Origin::Verbatim && m.source_id == *id)
}

/// The stand-in text of the whole prompt (what recall reads as shown), in
/// prompt order: the part's messages before the cut, the request through
/// the cut message, the part's loop, the rest of the request.
pub(super) fn shown_text(request: &Request, part: Option<&StablePart>) -> Result<String> {
    let Some(p) = part else {
        return Ok(stand_in_text(&request.messages));
    };
    let at = cut_position(request, p).ok_or_else(unkept)? + 1;
    let mut out = p.before.stand_in.clone();
    out.push_str(&stand_in_text(&request.messages[..at]));
    out.push_str(&p.after.stand_in);
    out.push_str(&stand_in_text(&request.messages[at..]));
    Ok(out)
}

/// A render that could not extend its stable part (it is rendered in full
/// instead).
pub(super) fn unkept() -> AppError {
    AppError::Internal("the body does not extend its stable part".into())
}

/// A hash of everything besides the thread and plan that shapes a body:
/// a stable part is kept only under the same.
pub(super) fn stable_key(cmd: &RenderCommand, model: &str, counter: &str) -> u64 {
    let r = &cmd.request;
    let shape = serde_json::to_vec(&(
        cmd.format.name(),
        model,
        cmd.max_output_tokens,
        &cmd.prompt_cache,
        r.system.as_deref(),
        r.tools.as_slice(),
        &r.policy,
        cmd.omit_pending_calls,
        counter,
    ))
    .unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(&shape)
}

/// Checked builds render every turn that kept a part in full as well: the
/// two must agree on everything the caller sees and on the next part.
#[cfg(debug_assertions)]
pub(super) fn same_as_rendered_in_full(kept: &Turn, full: Result<Turn>, part: &StablePart) {
    let full = match full {
        Ok(full) => full,
        Err(e) => panic!("the thread renders with its stable part but not in full: {e}"),
    };
    let at = format!(
        "cut at message {} of {}",
        part.cut,
        part.thread.messages.len()
    );
    assert_eq!(kept.output, full.output, "body, {at}");
    assert_eq!(kept.trace, full.trace, "trace, {at}");
    assert_eq!(kept.tokens, full.tokens, "tokens, {at}");
    assert_eq!(kept.rehydrated, full.rehydrated, "read-backs, {at}");
    assert_eq!(kept.recalled, full.recalled, "recall, {at}");
    assert_eq!(kept.warnings, full.warnings, "warnings, {at}");
    // The two may end a loop that is not closed yet at different points
    // (each part is checked when the next turn renders with it).
    match (&kept.next, &full.next) {
        (Some(a), Some(b)) if (a.cut, a.end) == (b.cut, b.end) => {
            assert_eq!(a.before, b.before, "next part before its cut, {at}");
            assert_eq!(a.after, b.after, "next part's loop, {at}");
            assert_eq!(a, b, "next part, {at}");
        }
        (Some(_), Some(_)) => {}
        (a, b) => assert_eq!(a.is_some(), b.is_some(), "next part, {at}"),
    }
}

/// What a render starts from besides the plan: the warnings and the tool
/// pairing of admission, and the last render's trace (its units need not be
/// counted again).
pub(super) struct Known {
    pub(super) warnings: Vec<String>,
    pub(super) paired: Option<Paired>,
    pub(super) previous: Option<Arc<PrefixTrace>>,
    /// The stable part of the thread's last render.
    pub(super) stable: Option<Arc<StablePart>>,
}

/// A thread's tool pairing, found once per turn (at admission) for the
/// render that follows.
pub(super) struct Paired {
    pub(super) thread: Arc<Thread>,
    pub(super) pairing: Arc<crate::model::PairingState>,
}

/// A thread's recall index, shared with the cache that keeps it.
pub(super) type RecallIndexRef = Arc<std::sync::Mutex<crate::app::recall::Recall>>;

/// What a turn adds to the plan's prompt: content read back, and recall.
#[derive(Clone)]
pub(super) struct TurnExtras {
    pub(super) fetched: Vec<(String, String)>,
    pub(super) auto: AutoRehydration,
    pub(super) auto_cap: u32,
    pub(super) recall: Option<(RecallIndexRef, crate::recall::RecallSettings)>,
}

/// FAILED_PRECONDITION naming the first pending call: one of the last
/// assistant message without a result (earlier ones are abandoned and left
/// out). Checked on the thread as sent, so the field path is the caller's.
pub(super) fn refuse_pending(
    thread: &crate::model::Thread,
    pairing: &crate::model::Pairing,
    abandoned: &[(usize, usize)],
) -> Result<()> {
    let pending = pairing.pending().find(|c| !abandoned.contains(c));
    match pending {
        Some((i, j)) => {
            let call = &thread.messages[i].tool_calls[j];
            Err(AppError::PendingToolCall {
                field: format!("thread.messages[{i}].tool_calls[{j}].id"),
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
            })
        }
        None => Ok(()),
    }
}

/// What rendering changed to satisfy the provider, for the audit record.
pub(super) fn render_warnings(request: &Request, format: Format) -> Vec<String> {
    let mut out = request.notes.clone();
    out.extend(
        format
            .tool_id_rewrites(request)
            .into_iter()
            .map(|(from, to)| {
                format!(
                    "tool call id {from:?} sent to {} as {to:?}",
                    format.display_name()
                )
            }),
    );
    out
}

/// The request in the requested form; the request is consumed, so its text
/// moves into the payload rather than being copied. Every provider body
/// passes that provider's structure check first (pairing, adjacency,
/// alternation, non-empty content): a body that fails it is an internal
/// error, never a payload. So is a body that, recounted as it will be sent,
/// needs more than `window` tokens. A body that counts more as sent than
/// the `budgeted` sum of its parts (an estimate is capped at the byte length
/// of what it counts, and Anthropic's system prompt is sent joined) reports
/// the difference as framing, so the reported total is what was sent.
#[allow(clippy::type_complexity)]
pub(super) fn output(
    request: Request,
    format: Format,
    opts: ProviderOptions,
    rc: &RequestCounter<'_>,
    (budgeted, window): (&mut RequestTokens, u32),
    known: Option<&PrefixTrace>,
    (part, next): (Option<&StablePart>, Option<Next<'_>>),
) -> Result<(RenderedOutput, Option<PrefixTrace>, Option<StablePart>)> {
    let mut request = request;
    // The system prompt is the first element of a body written whole, and
    // was sent with a kept part.
    if part.is_some() {
        request.system = None;
    }
    let lead = format.elements_of(request.system.as_deref(), &[]);
    // What the next render may keep, and where the kept loop goes, read
    // before encoding takes the text.
    let written: Option<Vec<Written>> = next.as_ref().and_then(|_| {
        request
            .messages
            .iter()
            .map(|m| {
                let elements = format.elements_of(None, std::slice::from_ref(m))?;
                Some(Written::of(m, elements, rc.message(m)))
            })
            .collect()
    });
    let through_cut = match part {
        Some(p) => {
            let at = cut_position(&request, p).ok_or_else(unkept)?;
            format
                .elements_of(None, &request.messages[..=at])
                .ok_or_else(unkept)?
        }
        None => 0,
    };
    let payload = match format
        .encode(request, &opts)
        .map_err(|e| broken(format, &e))?
    {
        Encoded::Neutral(request) => return Ok((RenderedOutput::Neutral(request), None, None)),
        Encoded::Body(body) => body,
    };
    check_sent(format, &payload, rc, part, (budgeted, window))?;
    // Written as bytes directly (`Value`'s `Display` goes through `fmt` and
    // was 1.5× slower on a 340 KB payload), and traced for the prompt
    // cache as it is written; units the last render sent keep its counts
    // (when it counted with the same counter), the others are counted
    // through the ledger.
    let counter = rc.counter.name();
    // The cache reckons on content hashes in any counter; units are reused
    // only from a trace in this one.
    let previous = known;
    let known = known.filter(|k| k.counted_by == counter);
    let (json, traced) =
        crate::render::prefix::to_json_with_elements(&payload, |t| rc.text(t), known)
            .map_err(|e| AppError::Internal(format!("payload serialization: {e}")))?;
    let body_tokens_of = |r: std::ops::Range<usize>| format.element_tokens(&payload, r, rc);
    let next = match (next, written, lead, &traced) {
        (Some(n), Some(written), Some(lead), Some((trace, spans))) => StablePart::next(
            part,
            (n.key, n.plan),
            (n.thread, n.pairing),
            Rendered {
                messages: &written,
                at: n.at,
                placed: written.len().saturating_sub(n.rendered),
                lead,
                json: &json,
                spans,
                units: &trace.units,
                body_tokens: &|r| body_tokens_of(r).unwrap_or_default(),
            },
        ),
        _ => None,
    };
    let (json, trace) = joined(json, traced, part, through_cut)?;
    debug_assert_eq!(
        trace,
        PrefixTrace::of_body(&json, |t| rc.text(t)),
        "the trace written with the body is the one read from it"
    );
    let trace = trace.map(|t| {
        let calibration = rc.counter.calibration();
        let mut t = PrefixTrace {
            counted_by: counter.to_string(),
            body_tokens: budgeted.total,
            count_scale: calibration.map_or(1.0, |c| c.scale),
            ..t
        };
        if let Some(rules) = format.cache_rules(&opts.model) {
            let layout = format.cache_layout(&payload);
            // Reckoned in the provider's count as far as the reports tell it.
            let per_token = calibration.map_or(1.0, |c| c.provider_per_counted());
            let provider = (f64::from(budgeted.total) * per_token).round() as u32;
            crate::render::cache::reckon(&mut t, &layout, rules, previous, Some(provider));
        }
        t
    });
    Ok((RenderedOutput::Payload(json), trace, next))
}

/// Checks the body as it will be sent (with a kept part's share) against
/// the window; what it counts beyond the budgeted sum of its parts is
/// reported as framing.
fn check_sent(
    format: Format,
    payload: &serde_json::Value,
    rc: &RequestCounter<'_>,
    part: Option<&StablePart>,
    (budgeted, window): (&mut RequestTokens, u32),
) -> Result<()> {
    let Some(sent) = body_tokens(format, payload, rc) else {
        return Ok(());
    };
    let sent = sent + part.map_or(0, |p| p.before.body_tokens + p.after.body_tokens);
    if sent > window {
        return Err(AppError::Internal(format!(
            "rendered {format:?} body counts {sent} tokens as sent, more than the {window} the window allows (budgeted at {})",
            budgeted.total
        )));
    }
    if sent > budgeted.total {
        budgeted.framing += sent - budgeted.total;
        budgeted.total = sent;
    }
    Ok(())
}

/// The body and its trace as sent: the kept part's elements joined with
/// what was rendered after the cut, or the render alone.
fn joined(
    json: String,
    traced: Option<(PrefixTrace, crate::render::prefix::ElementSpans)>,
    part: Option<&StablePart>,
    through_cut: usize,
) -> Result<(String, Option<PrefixTrace>)> {
    let Some(p) = part else {
        return Ok((json, traced.map(|(trace, _)| trace)));
    };
    let (tail, spans) = traced.ok_or_else(unkept)?;
    if tail.units.first() != Some(&p.head_unit) {
        return Err(unkept());
    }
    let json = p.body_with(&json, &spans, through_cut).ok_or_else(unkept)?;
    let trace = PrefixTrace {
        units: p.units_with(&tail.units, through_cut),
        ..PrefixTrace::default()
    };
    Ok((json, Some(trace)))
}

impl crate::cache::Weigh for Arc<StablePart> {
    fn weight(&self) -> u64 {
        StablePart::weight(self)
    }
}

/// What [`output`] needs to cut the next stable part.
pub(super) struct Next<'a> {
    pub(super) key: u64,
    pub(super) plan: (u64, String),
    pub(super) thread: &'a Arc<Thread>,
    pub(super) pairing: &'a Pairing,
    /// The per-turn position in the request, before anything was placed
    /// there, and how many messages were rendered before any was.
    pub(super) at: usize,
    pub(super) rendered: usize,
}

pub(super) fn audit(
    plan: &CompactionPlan,
    tokenizer: &str,
    summarizer_id: &str,
    rehydrated: &[RehydrationReport],
) -> AuditRecord {
    AuditRecord {
        plan_version: plan.version,
        plan_fingerprint: plan.fingerprint.clone(),
        plan_format_version: PLAN_FORMAT_VERSION.to_string(),
        summary_schema_version: SUMMARY_SCHEMA_VERSION.to_string(),
        summary_render_version: SUMMARY_RENDER_VERSION.to_string(),
        render_format_version: RENDER_FORMAT_VERSION.to_string(),
        summarizer_id: summarizer_id.to_string(),
        tokenizer: tokenizer.to_string(),
        evictions: EvictionCounts::of(plan),
        artifact_ids: referenced_artifacts(plan).into_iter().collect(),
        rehydrated_artifact_ids: rehydrated
            .iter()
            .filter(|r| !r.omitted)
            .map(|r| r.artifact_id.clone())
            .collect(),
        warnings: Vec::new(),
        strategies: AuditRecord::strategies_of(plan),
        requester: String::new(),
        turns_since_compaction: None,
        evicted: Eviction::of(plan, summarizer_id),
    }
}

/// An internal error for a body that failed its provider check; the problem
/// names positions and ids, never content.
pub(super) fn broken(format: Format, problem: &str) -> AppError {
    AppError::Internal(format!(
        "rendered {format:?} request failed the provider structure check: {problem}"
    ))
}
