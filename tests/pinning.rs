//! Pinned messages stay where they are and keep everything after them after
//! them; externalized content keeps every part; a stale plan never blocks a
//! thread.

use crate::common;

use common::{log_lines, request_text, Harness, ThreadBuilder};
use compactd::model::{
    Content, ContentPart, DropRecord, DroppedSpanIndex, Outcome, PlanError, Role, SpanReference,
    StructuredSummary, SummarizationRecord, ToolContent,
};
use serde_json::json;

/// A long dialogue with a developer instruction in the middle of it.
fn pinned_in_the_middle() -> compactd::model::Thread {
    let mut b = ThreadBuilder::default();
    let topics = [
        "the billing export",
        "the retry queue",
        "the nightly backfill",
        "the audit trail",
        "the cache warmer",
        "the rate limiter",
        "the schema migration",
        "the webhook relay",
    ];
    for (t, topic) in topics.iter().enumerate() {
        b.user(&format!(
            "Walk me through {topic}. Remember that fact F{t} holds for it."
        ));
        b.assistant(&format!(
            "{topic} works as follows. {}",
            "It batches work, checkpoints progress and reports lag. ".repeat(200)
        ));
        if t == 3 {
            b.developer("From here on, answer in German.");
        }
    }
    b.build("pinned-middle")
}

#[test]
fn plans_never_touch_or_straddle_pinned_roles() {
    let t = pinned_in_the_middle();
    let pinned = t
        .messages
        .iter()
        .position(|m| m.role == Role::Developer)
        .unwrap();
    let span = |ids: &[usize]| SpanReference::of(&t, ids);
    let summary = |ids: &[usize]| SummarizationRecord {
        span: span(ids),
        summary: StructuredSummary::empty(span(ids)).into(),
        summary_token_count: 10,
        archive_artifact_id: None,
        summarizer_id: String::new(),
    };
    let roles = [Role::System, Role::Developer];

    // The developer message itself, though not flagged `protected`.
    let mut plan = compactd::model::CompactionPlan::new(t.id.clone());
    plan.drops.push(DropRecord {
        span: span(&[pinned]),
        reason: "window".into(),
        index: DroppedSpanIndex {
            keywords: vec![],
            summary: String::new(),
            timestamp: None,
        },
        archive_artifact_id: None,
    });
    assert!(matches!(
        plan.validate_against(&t, &roles),
        Err(PlanError::PinnedRole { .. })
    ));
    // A summary of messages on both sides of it.
    let mut plan = compactd::model::CompactionPlan::new(t.id.clone());
    plan.summarizations
        .push(summary(&[pinned - 2, pinned - 1, pinned + 1, pinned + 2]));
    assert!(matches!(
        plan.validate_against(&t, &roles),
        Err(PlanError::StraddlesPinned { .. })
    ));
    // Without the pinned role both are fine.
    assert!(plan.validate_against(&t, &[Role::System]).is_ok());
}

#[test]
fn roll_ups_never_move_later_facts_before_a_pinned_instruction() {
    let t = pinned_in_the_middle();
    let mut h = Harness::default();
    h.policy.summary_chunk_tokens = 300;
    h.policy.max_summaries = 1;
    h.policy.keep_recent_turns = 1;
    // Summaries, not pointers, so spans on both sides of the instruction
    // would have to roll into one to meet max_summaries.
    h.policy.enable.externalize = false;
    let full = h.compact(&t, 1_000_000, None).unwrap().tokens.total;
    for budget in [full * 2 / 3, full / 2, full / 3] {
        let out = match h.compact(&t, budget, None) {
            Ok(out) => out,
            Err(compactd::app::AppError::InsufficientBudget { .. }) => continue,
            Err(e) => panic!("budget {budget}: {e}"),
        };
        let at = out
            .request
            .messages
            .iter()
            .position(|m| m.role == Role::Developer)
            .expect("the pinned instruction renders");
        let before: String = out.request.messages[..at]
            .iter()
            .map(|m| m.content.text().into_owned())
            .collect();
        for later in ["F4", "F5", "F6", "F7"] {
            assert!(
                !before.contains(later),
                "budget {budget}: fact {later} from after the instruction renders before it"
            );
        }
        assert!(
            out.plan.summarizations.len() >= 2,
            "budget {budget}: summaries on both sides of the instruction"
        );
    }
}

#[test]
fn an_externalized_multipart_message_keeps_its_images() {
    let mut b = ThreadBuilder::default();
    b.user("Here is the incident report with the dashboard screenshot.");
    b.last().content = Content::Parts(vec![
        ContentPart::Text {
            text: format!("Incident report.\n{}", log_lines(300)),
        },
        ContentPart::Image {
            url: "https://dashboards.example.com/snap/latency-p99.png".into(),
        },
        ContentPart::Text {
            text: "Second page of the report.".into(),
        },
    ]);
    for t in 0..8 {
        b.user(&format!("Question {t} about the report?"));
        b.tool(
            "lookup",
            json!({"q": t}),
            ToolContent::Text("short answer".into()),
            Outcome::Success,
            None,
        );
        b.assistant("Answered.");
    }
    let t = b.build("multipart");
    let mut h = Harness::default();
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.keep_recent_turns = 2;
    // Half the thread is then the report alone (the data blocks around the
    // small results would tip a second one over).
    h.policy.render.delimit_tool_output = false;
    let full = h.compact(&t, 1_000_000, None).unwrap().tokens.total;
    let out = h.compact(&t, full / 2, None).expect("compacts");
    assert_eq!(out.contents.len(), 1, "the report was externalized");
    let stored = &out.contents[0];
    assert!(
        stored.contains("[image: https://dashboards.example.com/snap/latency-p99.png]"),
        "the image vanished from the artifact"
    );
    assert!(stored.contains("Second page of the report."));
}

#[test]
fn a_plan_the_thread_outgrew_is_superseded_not_a_dead_end() {
    let mut b = ThreadBuilder::default();
    for t in 0..14 {
        b.user(&format!("Check shard {t} for drift."));
        b.tool(
            "scan_shard",
            json!({"shard": t}),
            ToolContent::Text(log_lines(80)),
            Outcome::Success,
            None,
        );
        b.assistant(&format!("Shard {t} is in sync."));
    }
    let t = b.build("edited");
    let h = Harness::default();
    let full = h.compact(&t, 1_000_000, None).unwrap().tokens.total;
    let first = h.compact(&t, full / 2, None).expect("first plan");
    assert!(!first.plan.is_empty());

    // The client edits history: a message the plan names is now protected.
    let named = first
        .plan
        .clearings
        .first()
        .map(|r| r.span.message_ids[0].clone())
        .or_else(|| {
            first
                .plan
                .summarizations
                .first()
                .map(|r| r.span.message_ids[0].clone())
        })
        .expect("the plan names a message");
    let mut edited = t.clone();
    std::sync::Arc::make_mut(edited.messages.iter_mut().find(|m| m.id == named).unwrap())
        .metadata
        .protected = true;
    let second = h
        .compact(&edited, full / 2, Some(&first.plan))
        .expect("a stale plan is superseded, not an error");
    assert!(
        second
            .report
            .warnings
            .iter()
            .any(|w| w.contains("no longer fits")),
        "{:?}",
        second.report.warnings
    );
    assert!(renders_verbatim(&second, &named));
}

/// The edited (now protected) message renders verbatim.
fn renders_verbatim(out: &common::Outcome, id: &str) -> bool {
    out.request
        .messages
        .iter()
        .any(|m| m.source_id == id && m.origin == compactd::render::Origin::Verbatim)
        && !request_text(&out.request).is_empty()
}
