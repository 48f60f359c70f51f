//! Property tests over threads shaped like the ones that break compactors
//! (`compactd_testkit::hard`): parallel calls answered out of order, a user
//! typing while tools run, reused call ids, calls still pending, images of
//! every kind, mid-thread instructions, thinking and reasoning, failures.
//! Each case compacts an earlier prefix first, so the final compaction builds
//! on a plan the thread has since outgrown, then renders for every provider.
//!
//! The runner counts how many cases rendered for every provider, and how many
//! had to compact: a generator that drifted into always refusing (or never
//! needing to compact) would otherwise pass while testing nothing.

mod common;

use compactd::provider::Format;
use std::collections::BTreeSet;

use common::{run_counted_split, Harness};
use compactd::app::{AppError, RenderedOutput};
use compactd::model::{CompactionPlan, Content, ContentPart, Role, Thread};
use compactd::provider::{anthropic, body_tokens, openai_chat, openai_responses};
use compactd::render::RequestCounter;
use compactd::tokens::{counter_for_model, TokenLedger};
use compactd_testkit::hard::{self, HardParams};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;

fn params() -> impl Strategy<Value = HardParams> {
    (
        any::<u64>(),
        2u32..14,
        1u32..=8,
        (0.0f64..0.6, 0.0f64..1.0, 0.0f64..0.5),
        (0.0f64..0.4, 0.0f64..0.8, 0.0f64..0.8, 0.0f64..0.4),
        1u32..400,
    )
        .prop_map(
            |(
                seed,
                turns,
                max_parallel,
                (interleave, pending, images),
                (mid_instructions, thinking, reuse_ids, failures),
                max_output_lines,
            )| HardParams {
                seed,
                turns,
                max_parallel,
                interleave,
                pending,
                images,
                mid_instructions,
                thinking,
                reuse_ids,
                failures,
                max_output_lines,
            },
        )
}

const TARGETS: [(Format, &str); 3] = [
    (Format::OpenAiChat, "gpt-4o"),
    (Format::AnthropicMessages, "claude-sonnet-4-5"),
    (Format::OpenAiResponses, "gpt-4.1"),
];

/// Text that must reach the body untouched, as it appears inside JSON.
fn pinned_texts(t: &Thread, h: &Harness) -> Vec<String> {
    t.messages
        .iter()
        .filter(|m| m.metadata.protected || h.policy.roles_never_prune.contains(&m.role))
        .filter_map(|m| match &m.content {
            Content::Text(s) if !s.is_empty() => Some(s.clone()),
            _ => None,
        })
        .map(|s| {
            let quoted = serde_json::to_string(&s).expect("string");
            quoted[1..quoted.len() - 1].to_string()
        })
        .collect()
}

/// Every thinking block and reasoning item the thread carries, as the
/// provider would see it: these may be dropped with their turn, never edited.
fn opaque_parts(t: &Thread) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in &t.messages {
        if let Content::Parts(parts) = &m.content {
            for p in parts {
                match p {
                    ContentPart::Thinking {
                        thinking,
                        signature,
                    } => {
                        out.insert(format!("thinking:{thinking}:{signature}"));
                    }
                    ContentPart::Reasoning {
                        encrypted_content: Some(e),
                        ..
                    } => {
                        out.insert(format!("reasoning:{e}"));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn body_opaque_parts(format: Format, body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match format {
        Format::AnthropicMessages => {
            for m in body["messages"].as_array().into_iter().flatten() {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "thinking" {
                        out.push(format!(
                            "thinking:{}:{}",
                            b["thinking"].as_str().unwrap_or_default(),
                            b["signature"].as_str().unwrap_or_default()
                        ));
                    }
                }
            }
        }
        Format::OpenAiResponses => {
            for item in body["input"].as_array().into_iter().flatten() {
                if item["type"] == "reasoning" {
                    if let Some(e) = item["encrypted_content"].as_str() {
                        out.push(format!("reasoning:{e}"));
                    }
                }
            }
        }
        _ => {}
    }
    out
}

fn check_structure(format: Format, body: &Value) -> Result<(), String> {
    match format {
        Format::OpenAiChat => openai_chat::check_pairing(body),
        Format::AnthropicMessages => anthropic::check_structure(body),
        Format::OpenAiResponses => openai_responses::check_structure(body),
        Format::Neutral => Ok(()),
    }
    .map_err(|e| e.to_string())
}

#[derive(Default)]
struct Tally {
    rendered: u32,
    compacted: u32,
    refused_budget: u32,
    with_previous: u32,
    with_pending: u32,
}

impl Tally {
    /// Adds one case's tally (cases run on two threads).
    fn add(&mut self, case: &Tally) {
        self.rendered += case.rendered;
        self.compacted += case.compacted;
        self.refused_budget += case.refused_budget;
        self.with_previous += case.with_previous;
        self.with_pending += case.with_pending;
    }
}

fn one_case(
    p: &HardParams,
    fraction: f64,
    prefix_turn: u32,
    tally: &mut Tally,
) -> Result<(), TestCaseError> {
    let t = hard::thread(p);
    let valid = t.validate(&Default::default());
    prop_assert!(valid.is_ok(), "generated thread invalid: {:?}", valid);
    let pending = hard::has_pending(&t);
    let mut h = Harness::default();
    h.policy.keep_recent_turns = 2;
    // The budget is a fraction of what the thread costs uncompacted (plus
    // the output reserve), so most cases must compact, some cannot fit.
    let full =
        RequestCounter::for_target(h.counter.as_ref(), &h.ledger, Format::openai_chat_target())
            .request(&h.render(&t, &CompactionPlan::new(t.id.clone())))
            .total;
    let max_input = ((f64::from(full) * fraction) as u32).max(1_500)
        + h.policy.response_reserve_tokens
        + h.policy.rehydration_reserve_tokens
        + h.policy.injection_reserve_tokens
        + h.policy.safety_buffer_tokens;

    // A thread with pending calls is refused unless they are to be left out,
    // and nothing is committed for it.
    if pending {
        tally.with_pending += 1;
        match h.render_as(&t, max_input, None, Format::OpenAiChat, None) {
            Err(AppError::PendingToolCall { .. }) => {}
            other => prop_assert!(
                false,
                "pending calls must be refused: {:?}",
                other.map(|_| ())
            ),
        }
        h.omit_pending_calls = true;
    }

    // Last turn's plan, built on a prefix (full turns only, so no pending
    // calls); the neutral path checks its counts against a full recount.
    let prefix = compactd_testkit::up_to(&t, prefix_turn.min(p.turns.saturating_sub(1)).max(1));
    let previous = match h.compact(&prefix, max_input, None) {
        Ok(out) => {
            tally.with_previous += 1;
            Some(out.plan)
        }
        Err(AppError::InsufficientBudget { .. }) => None,
        Err(e) => return Err(TestCaseError::fail(format!("prefix: {e}"))),
    };

    let allowed = opaque_parts(&t);
    let pinned = pinned_texts(&t, &h);
    for (format, model) in TARGETS {
        let out = match h.render_as(&t, max_input, previous.as_ref(), format, Some(model)) {
            Ok((_, out)) => out,
            Err(AppError::InsufficientBudget { .. }) => {
                tally.refused_budget += 1;
                continue;
            }
            Err(e) => return Err(TestCaseError::fail(format!("{format:?}: {e}"))),
        };
        tally.rendered += 1;
        if !out.plan.is_empty() {
            tally.compacted += 1;
        }
        let RenderedOutput::Payload(text) = &out.output else {
            return Err(TestCaseError::fail("a provider body was asked for"));
        };
        let body: Value = serde_json::from_str(text).expect("the body is JSON");
        // The provider accepts its structure: every call answered, every
        // result after its call, roles in an order it takes.
        let checked = check_structure(format, &body);
        prop_assert!(checked.is_ok(), "{format:?}: {:?}", checked);
        // Never over budget, counted independently, as sent.
        let report = out
            .compaction
            .as_ref()
            .and_then(|c| c.report.as_ref())
            .expect("a fresh tenant reports");
        let counter = counter_for_model(model);
        let ledger = TokenLedger::new(10_000);
        let rc = RequestCounter::for_target(
            counter.as_ref(),
            &ledger,
            Format::target(Some(format), model),
        );
        let sent = body_tokens(format, &body, &rc).expect("the body is countable");
        prop_assert!(
            sent <= report.budget.hard_limit,
            "{format:?}: {sent} > {}",
            report.budget.hard_limit
        );
        prop_assert!(out.tokens.total <= report.budget.hard_limit);
        // Pinned and protected text arrives untouched.
        for s in &pinned {
            prop_assert!(
                text.contains(s.as_str()),
                "{format:?}: pinned text lost: {s}"
            );
        }
        // Thinking and reasoning are passed through byte for byte or not at all.
        for part in body_opaque_parts(format, &body) {
            prop_assert!(allowed.contains(&part), "{format:?}: altered {part}");
        }
        // The committed plan is valid for the thread and normalized.
        prop_assert!(out
            .plan
            .validate_against(&t, &h.policy.roles_never_prune)
            .is_ok());
        let mut plan = (*out.plan).clone();
        prop_assert!(plan.normalize().is_empty());
        // Pending calls are never sent: the last assistant turn's calls that
        // reached the body all have their results (checked above), and none
        // of the thread's results are invented.
        let results = text.matches("\"tool_call_id\"").count()
            + text.matches("\"tool_use_id\"").count()
            + text.matches("\"function_call_output\"").count();
        let thread_results = t.messages.iter().filter(|m| m.role == Role::Tool).count();
        prop_assert!(results <= thread_results);
    }
    Ok(())
}

#[test]
fn hard_threads_render_for_every_provider() {
    let tally = std::sync::Mutex::new(Tally::default());
    let (cases, _) = run_counted_split(
        "hard threads",
        || (params(), 0.05f64..1.2, 1u32..14),
        24,
        0.6,
        |(p, fraction, prefix_turn)| {
            let mut case = Tally::default();
            let result = one_case(&p, fraction, prefix_turn, &mut case);
            tally.lock().unwrap_or_else(|e| e.into_inner()).add(&case);
            result.map(|()| case.rendered == 3)
        },
    );
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!(
        "hard threads: {} bodies rendered ({} compacted), {} refused for budget, {} with a previous plan, {} with pending calls",
        tally.rendered, tally.compacted, tally.refused_budget, tally.with_previous, tally.with_pending
    );
    // Most renders must have had to compact, and the other branches must
    // have been reached, or the properties were vacuous.
    assert!(
        tally.compacted >= tally.rendered / 2,
        "only {} of {} bodies needed compaction",
        tally.compacted,
        tally.rendered
    );
    assert!(
        tally.with_previous >= cases / 2,
        "too few cases built on a previous plan"
    );
    assert!(tally.with_pending > 0, "no case had pending calls");
}
