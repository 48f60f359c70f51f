//! Token accounting: the per-message shortcuts the pipeline uses must equal
//! the cost of the message it would actually render.

use compactd::model::{Action, ClearReason, ClearRecord, SpanReference};
use compactd::render::{render_message, RenderOptions, RequestCounter};
use compactd::tokens::{o200k, TokenLedger};
use compactd_testkit::synth::{thread, SynthParams};

#[test]
fn verbatim_and_cleared_costs_equal_the_rendered_message_cost() {
    let counter = o200k();
    let ledger = TokenLedger::new(10_000);
    let c = RequestCounter::for_target(
        counter.as_ref(),
        &ledger,
        compactd::provider::Format::openai_chat_target(),
    );
    let t = thread(&SynthParams::default());
    for options in [
        RenderOptions::default(),
        RenderOptions {
            delimit_user_content: true,
            delimit_tool_output: true,
            tool_result_max_chars: Some(100),
        },
        RenderOptions {
            delimit_user_content: false,
            delimit_tool_output: false,
            tool_result_max_chars: None,
        },
    ] {
        for m in &t.messages {
            let rendered = render_message(m, Action::Include, &options).expect("renders");
            assert_eq!(c.verbatim(m, &options), c.message(&rendered), "{}", m.id);
            let record = ClearRecord {
                span: SpanReference::of(&t, &[0]),
                preserved_fields: Default::default(),
                reason: ClearReason::Expired,
                replacement: "[result expired] tool: success".into(),
                archive_artifact_id: None,
                archive_note: None,
                strategy: String::new(),
            };
            let cleared = render_message(m, Action::Clear(&record), &options).expect("renders");
            assert_eq!(c.cleared(m, &record.replacement), c.message(&cleared));
        }
    }
}

use crate::common;

/// A request may not lower the safety buffer below the configured floor:
/// it absorbs what an estimated count can miss. Exact counts (o200k for
/// gpt-4o, everything unknown at its worst case) need no margin, and a
/// reserve for content read back counts only when something is read back.
#[test]
fn no_request_pushes_the_safety_buffer_below_the_floor() {
    let t = thread(&SynthParams::default());
    let mut h = common::Harness::default();
    h.policy.safety_buffer_tokens = 0;
    h.policy.rehydration_reserve_tokens = 0;
    let (_, out) = h
        .render_as(
            &t,
            50_000,
            None,
            compactd::provider::Format::Neutral,
            Some("gemini-2.5-pro"),
        )
        .expect("compacts");
    let budget = out
        .compaction
        .and_then(|c| c.report)
        .expect("reports")
        .budget;
    assert_eq!(budget.hard_limit, 50_000 - 256, "{budget:?}");

    h.policy.safety_buffer_tokens = 500;
    h.policy.rehydration_reserve_tokens = 2_000;
    let exact = h.compact(&t, 50_000, None).expect("compacts").report.budget;
    assert_eq!(exact.hard_limit, 50_000, "{exact:?}");
}
