//! Scenario tests of the reducers through the public pipeline.

use crate::common;

use common::{log_lines, said, Harness, ThreadBuilder};
use compactd::model::{ActionKind, DeterminismMetadata, Durability, Outcome, ToolContent};
use compactd::provider::openai_chat;
use compactd::render::{Origin, ProviderOptions};
use serde_json::json;

fn opts() -> ProviderOptions {
    ProviderOptions {
        model: "gpt-4o".into(),
        max_output_tokens: None,
        ..Default::default()
    }
}

fn rendered_tool<'a>(
    out: &'a common::Outcome,
    call_id: &str,
) -> &'a compactd::render::RenderedMessage {
    out.request
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("tool result {call_id} not rendered"))
}

#[test]
fn retention_stubs_old_results_and_keeps_the_pair() {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    for t in 0..12 {
        b.user(&format!("step {t}: check the worker logs"));
        calls.push(b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        b.assistant("looked at them");
    }
    let t = b.build("retention");
    let h = Harness::default();
    let out = h.compact(&t, 9_000, None).unwrap();
    assert!(out.report.triggered);
    // Turns 1-4 are older than the default 8-turn retention.
    for call in &calls[..4] {
        let m = rendered_tool(&out, call);
        assert_eq!(m.origin, Origin::Cleared);
        assert!(m
            .content
            .text()
            .starts_with("[result expired] list_logs: success"));
    }
    // The recent tail (6 turns) is untouched.
    for call in &calls[6..] {
        assert_eq!(rendered_tool(&out, call).origin, Origin::Verbatim);
    }
    assert!(openai_chat::check_pairing(&openai_chat::to_openai(&out.request, &opts())).is_ok());
    assert!(out.tokens.total <= out.report.budget.hard_limit);
}

#[test]
fn failures_are_never_cleared() {
    let mut b = ThreadBuilder::default();
    b.user("run the tests");
    let failed = b.tool(
        "run_tests",
        json!({}),
        ToolContent::Text(format!("Error: test_login failed\n{}", log_lines(60))),
        Outcome::Failure,
        Some(Durability::Ephemeral),
    );
    let mut others = Vec::new();
    for t in 0..8 {
        b.user(&format!("step {t}"));
        others.push(b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(60)),
            Outcome::Success,
            Some(Durability::Ephemeral),
        ));
    }
    let t = b.build("failures");
    let mut h = Harness::default();
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.enable.externalize = false;
    h.policy.keep_recent_turns = 2;
    h.policy.keep_tool_io_pairs = 1;
    let out = h.compact(&t, 6_500, None).unwrap();
    let m = rendered_tool(&out, &failed);
    assert_eq!(m.origin, Origin::Verbatim);
    assert!(m.is_error);
    assert!(others[..6]
        .iter()
        .all(|c| rendered_tool(&out, c).origin == Origin::Cleared));
}

#[test]
fn non_replayable_results_are_externalized_not_cleared() {
    let mut b = ThreadBuilder::default();
    b.user("search the web for the release notes");
    let body = log_lines(600);
    let search = b.tool(
        "paid_search",
        json!({"q": "release notes"}),
        ToolContent::Text(body.clone()),
        Outcome::Success,
        Some(Durability::NonReplayable),
    );
    for t in 0..7 {
        b.user(&format!("follow-up {t}"));
        b.assistant("ok");
    }
    let t = b.build("nonreplayable");
    let h = Harness::default();
    let out = h.compact(&t, 6_000, None).unwrap();
    let m = rendered_tool(&out, &search);
    assert_eq!(m.origin, Origin::Externalized);
    let text = m.content.text();
    assert!(
        text.starts_with("[Externalized Content - artifact:art_"),
        "{text}"
    );
    assert!(text.contains("read_artifact(\"art_"));
    assert_eq!(out.artifacts.len(), 1);
    assert_eq!(out.contents, [body]);
    assert_eq!(out.plan.externalizations.len(), 1);
    assert_eq!(
        out.plan.externalizations[0].artifact_id,
        out.artifacts[0].artifact_id
    );
    assert!(out
        .plan
        .clearings
        .iter()
        .all(|r| r.span.message_ids[0] != m.source_id));
}

#[test]
fn replayable_results_are_cleared_only_when_verified_unchanged() {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    for (i, hash) in ["aaa", "bbb"].iter().enumerate() {
        b.user(&format!("read file {i}"));
        let id = b.tool(
            "read_file",
            json!({"path": format!("f{i}.py")}),
            ToolContent::Text(log_lines(100)),
            Outcome::Success,
            Some(Durability::Replayable),
        );
        b.last().tool_result.as_mut().unwrap().determinism = Some(DeterminismMetadata {
            content_hash: Some((*hash).into()),
            ..Default::default()
        });
        calls.push(id);
    }
    for t in 0..6 {
        b.user(&format!("later {t}"));
        b.assistant("ok");
    }
    let t = b.build("replayable");
    let mut h = Harness::default();
    h.policy.enable.externalize = false;
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.enable.retention = false;
    h.policy.enable.compress = false;
    h.policy.keep_tool_io_pairs = 0;
    // The first file is unchanged, the second changed since it was read.
    h.observations.insert(
        calls[0].clone(),
        DeterminismMetadata {
            content_hash: Some("aaa".into()),
            ..Default::default()
        },
    );
    h.observations.insert(
        calls[1].clone(),
        DeterminismMetadata {
            content_hash: Some("changed".into()),
            ..Default::default()
        },
    );
    let out = h.compact(&t, 3_500, None).unwrap();
    assert!(out.report.triggered);
    let first = rendered_tool(&out, &calls[0]);
    assert_eq!(first.origin, Origin::Cleared);
    assert!(first.content.text().contains("source is unchanged"));
    assert_eq!(rendered_tool(&out, &calls[1]).origin, Origin::Verbatim);
}

#[test]
fn a_huge_result_in_the_last_turn_is_externalized() {
    let mut b = ThreadBuilder::default();
    b.user("read the big file");
    let big = b.tool(
        "read_file",
        json!({"path": "big.log"}),
        ToolContent::Text(log_lines(5_000)),
        Outcome::Success,
        Some(Durability::NonReplayable),
    );
    let t = b.build("huge-tail");
    let h = Harness::default();
    let out = h.compact(&t, 16_000, None).unwrap();
    assert_eq!(rendered_tool(&out, &big).origin, Origin::Externalized);
    assert!(out.tokens.total <= out.report.budget.hard_limit);
    assert!(openai_chat::check_pairing(&openai_chat::to_openai(&out.request, &opts())).is_ok());
}

#[test]
fn a_previous_plan_is_extended_and_the_prefix_stays_byte_stable() {
    let mut b = ThreadBuilder::default();
    for t in 0..14 {
        b.user(&format!("turn {t}: analyse the worker logs"));
        b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(150)),
            Outcome::Success,
            None,
        );
        b.assistant("analysed");
    }
    let t1 = b.build("stable");
    let h = Harness::default();
    let first = h.compact(&t1, 14_000, None).unwrap();
    assert!(!first.plan.is_empty());
    b.user("one more small question");
    b.assistant("a small answer");
    let t2 = b.build("stable");
    let second = h.compact(&t2, 14_000, Some(&first.plan)).unwrap();
    // Below the trigger with the old plan applied: the plan is reused as is…
    assert!(!second.report.triggered);
    assert_eq!(second.plan.clearings, first.plan.clearings);
    // …so every message rendered last turn renders byte-identically now.
    let n = first.request.messages.len();
    assert_eq!(
        serde_json::to_string(&second.request.messages[..n]).unwrap(),
        serde_json::to_string(&first.request.messages).unwrap()
    );
}

#[test]
fn rehydration_turns_skip_externalize_and_drop() {
    let mut b = ThreadBuilder::default();
    for t in 0..10 {
        b.user(&format!("turn {t}"));
        b.tool(
            "paid_search",
            json!({"n": t}),
            ToolContent::Text(log_lines(200)),
            Outcome::Success,
            Some(Durability::NonReplayable),
        );
    }
    let t = b.build("skip");
    let h = Harness::default();
    match h.core_compact(&t, 12_000, true) {
        Ok(c) => {
            assert!(c.plan.externalizations.is_empty());
            assert!(c.plan.drops.is_empty());
        }
        Err(compactd::reduce::CompactError::InsufficientBudget { .. }) => {}
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn the_plan_names_every_action_once() {
    let t = compactd_testkit::synth::thread(&compactd_testkit::synth::SynthParams {
        seed: 3,
        turns: 30,
        tool_density: 0.9,
        max_output_lines: 400,
        protected: 1,
    });
    let h = Harness::default();
    let out = h.compact(&t, 10_000, None).unwrap();
    let plan = &out.plan;
    let actions = plan.actions();
    let mut seen = std::collections::HashSet::new();
    for r in &plan.clearings {
        for id in &r.span.message_ids {
            assert!(seen.insert(id.clone()));
            assert_eq!(actions[id.as_str()].kind(), ActionKind::Clear);
        }
    }
    for r in &plan.summarizations {
        for id in &r.span.message_ids {
            assert!(seen.insert(id.clone()));
        }
    }
    // The plan survives a serde round trip unchanged.
    let json = serde_json::to_string(plan).unwrap();
    let back: compactd::model::CompactionPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, plan);
}

#[test]
fn default_retention_evicts_the_oldest_first_and_only_to_the_target() {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    let mut audits = Vec::new();
    for t in 0..16 {
        b.user(&format!("step {t}: check the worker logs"));
        calls.push(b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        audits.push(b.tool(
            "audit_log",
            json!({"n": t}),
            ToolContent::Text(log_lines(4)),
            Outcome::Success,
            None,
        ));
        b.assistant("looked at them");
    }
    let t = b.build("retention-order");
    let mut h = Harness::default();
    // audit_log has its own rule: a rule applies wholly.
    h.policy.retention.insert(
        "audit_log".into(),
        compactd::reduce::ToolRetention {
            keep_turns: Some(8),
            keep_last: None,
            never_evict: false,
        },
    );
    // The budget is sized for results and user text rendered as they are.
    h.policy.render.delimit_tool_output = false;
    h.policy.render.delimit_user_content = false;
    let out = h.compact(&t, 14_000, None).unwrap();
    assert!(out.report.triggered);
    let origin = |c: &String| rendered_tool(&out, c).origin;
    // Turns 1-8 are past the default 8-turn retention; only as many of them
    // as the target needs are stubbed, oldest first.
    let stubbed: Vec<bool> = calls[..8]
        .iter()
        .map(|c| origin(c) == Origin::Cleared)
        .collect();
    assert!(stubbed[0], "the oldest result goes first: {stubbed:?}");
    assert!(
        !stubbed[7],
        "the target was met before the newest expired result: {stubbed:?}"
    );
    let first_kept = stubbed.iter().position(|s| !s).unwrap_or(8);
    assert!(
        stubbed[first_kept..].iter().all(|s| !s),
        "stubs form a prefix: {stubbed:?}"
    );
    for c in &audits[..8] {
        assert_eq!(
            origin(c),
            Origin::Cleared,
            "a tool's own rule applies wholly"
        );
    }
    assert!(out.tokens.total <= out.report.budget.target);
    assert!(
        out.report.target_use() >= 0.9,
        "use {}",
        out.report.target_use()
    );
}

#[test]
fn the_tail_is_bounded_by_tokens_but_keeps_the_last_user_message() {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    for t in 0..6 {
        b.user(&format!("step {t}: dump the worker logs"));
        calls.push(b.tool(
            "dump_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(300)),
            Outcome::Success,
            Some(Durability::Replayable),
        ));
        b.assistant("dumped");
    }
    let t = b.build("token-tail");
    let mut h = Harness::default();
    h.policy.keep_recent_turns = 6;
    h.policy.keep_tool_io_pairs = 6;
    h.policy.keep_recent_tokens = 2_000;
    let out = h.compact(&t, 40_000, None).unwrap();
    assert!(out.report.triggered);
    // Six turns are within keep_recent_turns, but only the last fits the
    // token bound: the earlier results are reduced.
    assert!(
        calls[..5]
            .iter()
            .any(|c| rendered_tool(&out, c).origin != Origin::Verbatim),
        "the token bound did not shrink the tail"
    );
    // The floor: the last user message and its call stay verbatim, even
    // though the result alone is over the bound.
    assert_eq!(rendered_tool(&out, &calls[5]).origin, Origin::Verbatim);
    assert!(common::request_text(&out.request).contains("step 5: dump the worker logs"));
}

/// A summary that has to leave entries out is a reason to summarize more
/// of the verbatim middle, not to stop at the target: the room it frees
/// goes to the summary, so the user's facts from every turn are kept.
#[test]
fn lossy_summaries_grow_into_the_room_the_middle_frees() {
    let mut b = ThreadBuilder::default();
    let regions = ["eu-west-1", "us-east-2", "ap-south-1", "sa-east-1"];
    for t in 0..40 {
        b.user(&format!(
            "Ticket OPS-{} must stay in {} until 2027-01-{:02}; escalate to team-{t} only.",
            4100 + t,
            regions[t % 4],
            t % 28 + 1
        ));
        b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(60)),
            Outcome::Success,
            Some(Durability::Replayable),
        );
        b.assistant("Noted, checking the logs.");
    }
    let t = b.build("lossy");
    let mut h = Harness::default();
    h.policy.rehydration_reserve_tokens = 0;
    h.policy.summary_max_tokens = 200;
    let out = h.compact(&t, 6000, None).unwrap();
    assert!(out.report.triggered);
    assert!(!out.plan.summarizations.is_empty());
    let text = common::request_text(&out.request);
    let kept = (0..40)
        .filter(|t| text.contains(&format!("OPS-{}", 4100 + t)))
        .count();
    assert_eq!(kept, 40, "{text}");
    assert!(out.tokens.total <= out.report.budget.target);
}

/// The redaction rules are an input of the plan: a plan made under other
/// rules (whose stored summaries and stubs were redacted differently) is
/// never reused as if it were current.
#[test]
fn the_redaction_rules_are_part_of_the_plan_fingerprint() {
    use compactd::redact::{RedactionConfig, RedactionPattern, Redactor};
    use compactd::reduce::{request_fingerprint, CompactRequest, Policy};
    let mut b = ThreadBuilder::default();
    b.user("Read the log.");
    b.tool(
        "read_file",
        json!({"path": "/var/log/app.log"}),
        ToolContent::Text(log_lines(20)),
        Outcome::Success,
        None,
    );
    b.assistant("Done.");
    let t = b.build("fp");
    let h = Harness::default();
    let policy = Policy::default();
    let observations = std::collections::BTreeMap::new();
    let req = CompactRequest {
        thread: &t,
        policy: &policy,
        max_input_tokens: 96_000,
        system: None,
        tools: &[],
        workspace: None,
        previous: None,
        observations: &observations,
        skip_aggressive: false,
        limits: Default::default(),
        target: compactd::provider::Format::openai_chat_target(),
    };
    let custom = Redactor::from_config(&RedactionConfig {
        patterns: vec![RedactionPattern {
            name: "employee_id".into(),
            regex: r"\bEMP-\d{6}\b".into(),
        }],
        ..RedactionConfig::default()
    })
    .expect("rules");
    let standard = request_fingerprint(&req, &h.engine());
    assert_eq!(standard, request_fingerprint(&req, &h.engine()), "stable");
    let mut other = h.engine();
    other.redactor = &custom;
    assert_ne!(standard, request_fingerprint(&req, &other));
}

/// A previous plan whose records overlap (a clear and a drop of the same
/// tool result, as a plan from another version may have) is normalized
/// before it is extended: the drop wins, the report names the message and
/// both actions, and the pair goes together.
#[test]
fn an_overlapping_previous_plan_is_normalized_and_the_report_says_so() {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    for t in 0..12 {
        b.user(&format!("step {t}: check the worker logs"));
        calls.push(b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        b.assistant("looked at them");
    }
    let t = b.build("overlap");
    let h = Harness::default();
    let first = h.compact(&t, 9_000, None).unwrap();
    let cleared = first
        .plan
        .clearings
        .iter()
        .find(|r| r.reason == compactd::model::ClearReason::Expired)
        .expect("a stubbed result")
        .span
        .message_ids[0]
        .clone();
    let at = t.messages.iter().position(|m| m.id == cleared).unwrap();
    let call = t.messages[at - 1].id.clone();
    let mut prev = first.plan.clone();
    prev.drops.push(compactd::model::DropRecord {
        span: compactd::model::SpanReference::of(&t, &[at - 1, at]),
        reason: "merged from another plan".into(),
        index: compactd::model::DroppedSpanIndex {
            keywords: vec![],
            summary: String::new(),
            timestamp: None,
        },
        archive_artifact_id: None,
    });
    // Not the plan this request fingerprints to (as after an upgrade), so
    // it is built on rather than returned as it is.
    prev.fingerprint.clear();
    let mut out = h.compact(&t, 9_000, Some(&prev)).unwrap();
    let want = format!("message {cleared} is in both Clear and Drop; Drop takes precedence");
    assert!(
        out.report.warnings.contains(&want),
        "{:?}",
        out.report.warnings
    );
    assert!(!out
        .request
        .messages
        .iter()
        .any(|m| m.source_id == cleared || m.source_id == call));
    assert!(out.plan.normalize().is_empty());
}

/// A text message over 256 KB is accepted, compacted, and named in a
/// warning; an image of that size is not.
#[test]
fn a_message_over_256_kb_is_named_in_a_warning() {
    let mut b = ThreadBuilder::default();
    b.user("dump the table");
    b.tool(
        "dump",
        json!({}),
        ToolContent::Text(log_lines(6_000)),
        Outcome::Success,
        None,
    );
    b.user("thanks");
    b.assistant("ok");
    let t = b.build("oversize");
    let big = &t.messages[2];
    assert!(big.byte_len() > 256 * 1024);
    let h = Harness::default();
    let out = h.compact(&t, 16_000, None).unwrap();
    let warning = out
        .report
        .warnings
        .iter()
        .find(|w| w.starts_with("input: "))
        .expect("an oversize warning");
    assert!(
        warning.contains(&format!("{} (", big.id)) && warning.contains("over 256 KB"),
        "{warning}"
    );
    // The same bytes as an image part: no warning.
    let mut b = ThreadBuilder::default();
    b.user("look at this");
    b.last().content = compactd::model::Content::Parts(vec![
        compactd::model::ContentPart::Text {
            text: "the screenshot".into(),
        },
        compactd::model::ContentPart::Image {
            url: format!("data:image/png;base64,{}", "A".repeat(300 * 1024)),
        },
    ]);
    b.assistant("seen");
    let out = h.compact(&b.build("image"), 400_000, None).unwrap();
    assert!(
        !out.report.warnings.iter().any(|w| w.starts_with("input: ")),
        "{:?}",
        out.report.warnings
    );
}

/// The first turn of an agent may have no transcript yet: compacting and
/// rendering it gives, in every format, a body its provider accepts, with
/// or without a system prompt (a Chat body with neither has nothing to
/// send and is refused).
#[test]
fn an_empty_transcript_renders_a_body_each_provider_accepts() {
    use compactd::app::RenderedOutput;
    use compactd::provider::{openai_responses, Format};
    let t = compactd::model::Thread {
        id: "first-turn".into(),
        messages: vec![],
    };
    for system in [Some("You are a helpful agent."), None] {
        let mut h = Harness::default();
        h.system = system.map(str::to_string);
        for format in [
            Format::OpenAiChat,
            Format::AnthropicMessages,
            Format::OpenAiResponses,
        ] {
            let out = h.render_as(&t, 8_000, None, format, None);
            if system.is_none() && format == Format::OpenAiChat {
                // Nothing at all to send: refused, naming the field, rather
                // than a body Chat Completions would answer with a 400.
                match out {
                    Err(compactd::app::AppError::InvalidArgument { field, .. }) => {
                        assert_eq!(field, "thread.messages");
                        continue;
                    }
                    other => panic!("{other:?}"),
                }
            }
            let (_, out) = out.unwrap_or_else(|e| panic!("{format:?}, system {system:?}: {e}"));
            let RenderedOutput::Payload(body) = out.output else {
                panic!("a payload");
            };
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            let ok = match format {
                Format::OpenAiChat => {
                    let n = body["messages"].as_array().map_or(0, Vec::len);
                    // Chat Completions refuses an empty `messages`.
                    if n == 0 {
                        Err("no messages".to_string())
                    } else {
                        openai_chat::check_pairing(&body)
                    }
                }
                Format::AnthropicMessages => compactd::provider::anthropic::check_structure(&body),
                _ => openai_responses::check_structure(&body),
            };
            assert!(ok.is_ok(), "{format:?}, system {system:?}: {ok:?}\n{body}");
        }
    }
}

/// Messages that say when they were said date what is made of them: a
/// summary's decisions carry the time of the message they were taken in,
/// a dropped span's index the time of its last message, beside keywords
/// from its text; a time that is not RFC 3339 is refused, naming the field.
#[test]
fn decisions_and_dropped_spans_carry_the_time_of_their_messages() {
    let dated = |b: &mut ThreadBuilder, t: u32| {
        b.last().metadata.created_at =
            Some(format!("2026-03-0{}T10:{:02}:00Z", 1 + t / 10, t % 60));
    };
    let mut b = ThreadBuilder::default();
    for t in 0..14 {
        b.user(&format!(
            "turn {t}: the pelican migration report needs another look"
        ));
        dated(&mut b, t);
        b.assistant(&format!(
            "We decided to keep the heron dataset because turn {t} showed it is complete. {}",
            log_lines(12)
        ));
        dated(&mut b, t);
    }
    let t = b.build("dated");
    // Summaries: the decision taken in a summarized turn carries its time.
    let h = Harness::default();
    let out = h.compact(&t, 3_000, None).unwrap();
    let decisions: Vec<_> = out
        .plan
        .summarizations
        .iter()
        .flat_map(|r| &r.summary.decisions)
        .collect();
    assert!(
        !decisions.is_empty(),
        "no decision in {:?}",
        out.plan.summarizations.len()
    );
    for d in &decisions {
        let ts = d.timestamp.as_deref().expect("a dated decision");
        assert!(compactd::model::is_rfc3339(ts), "{ts}");
        let rendered = out
            .plan
            .summarizations
            .iter()
            .map(|r| r.summary.render_as_message())
            .collect::<String>();
        assert!(
            rendered.contains(&format!("(turn {}, {ts})", d.turn)),
            "{rendered}"
        );
    }
    // Drops: only the window may act.
    let mut h = Harness::default();
    h.policy.enable.summarize = false;
    h.policy.enable.externalize = false;
    h.policy.enable.clear = false;
    h.policy.enable.compress = false;
    h.policy.enable.retention = false;
    let out = h.compact(&t, 3_000, None).unwrap();
    let drop = out.plan.drops.first().expect("a dropped span");
    let last = drop.span.end_message_id();
    let last = t.messages.iter().find(|m| m.id == last).unwrap();
    assert_eq!(drop.index.timestamp, last.metadata.created_at);
    for word in ["heron", "dataset"] {
        assert!(
            drop.index.keywords.iter().any(|k| k == word),
            "{word} not in {:?}",
            drop.index.keywords
        );
    }
    // A time that is not RFC 3339 is refused, naming the field.
    let mut bad = t.clone();
    std::sync::Arc::make_mut(&mut bad.messages[3])
        .metadata
        .created_at = Some("March 1st".into());
    match h.compact(&bad, 3_000, None) {
        Err(compactd::app::AppError::InvalidArgument { field, .. }) => {
            assert_eq!(field, "thread.messages[3].metadata.created_at")
        }
        other => panic!("{:?}", other.map(|o| o.plan.version)),
    }
}

/// The plan remembers the turn compaction last ran at: a later turn that
/// only extends the plan keeps it, and the audit of a render says how many
/// turns the compacted form has stood.
#[test]
fn the_plan_keeps_the_turn_it_was_compacted_at() {
    let mut b = ThreadBuilder::default();
    for t in 0..14 {
        b.user(&format!("turn {t}: analyse the worker logs"));
        b.tool(
            "list_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(150)),
            Outcome::Success,
            None,
        );
        b.assistant("analysed");
    }
    let t1 = b.build("since");
    let h = Harness::default();
    let first = h.compact(&t1, 14_000, None).unwrap();
    assert!(first.report.triggered);
    assert_eq!(first.plan.compacted_at_turn, Some(14));
    b.user("one more small question");
    b.assistant("a small answer");
    b.user("and another");
    b.assistant("another answer");
    let t2 = b.build("since");
    let second = h.compact(&t2, 14_000, Some(&first.plan)).unwrap();
    assert!(!second.report.triggered);
    assert_eq!(second.plan.compacted_at_turn, Some(14));
    assert_eq!(
        second.plan.turns_since_compaction(t2.current_turn()),
        Some(2)
    );
    let (_, out) = h
        .render_as(
            &t2,
            14_000,
            Some(&first.plan),
            compactd::provider::Format::OpenAiChat,
            None,
        )
        .unwrap();
    assert_eq!(out.audit.turns_since_compaction, Some(2));
    // Nothing evicted: nothing has stood in.
    let small = ThreadBuilder::default().build("none");
    assert_eq!(
        compactd::model::CompactionPlan::new(&small.id).turns_since_compaction(5),
        None
    );
}

/// A standing window shows only the newest turns whatever the trigger says,
/// cut in chunks (it may grow a quarter past its cap before older turns
/// go, down to the cap), keeping pinned messages; a token cap does the same
/// by size.
#[test]
fn a_standing_window_keeps_the_newest_turns_before_any_trigger() {
    let thread_of = |turns: u32| {
        let mut b = ThreadBuilder::default();
        for t in 0..turns {
            if t == 1 {
                b.protected_user("Never deploy on Fridays.");
            } else {
                b.user(&format!("turn {t}: what next?"));
            }
            b.assistant(&format!("answer {t}"));
        }
        b.build("window")
    };
    let mut h = Harness::default();
    h.policy.window = Some(compactd::reduce::StandingWindow {
        max_turns: Some(8),
        max_tokens: None,
    });
    let shown_turns = |out: &common::Outcome, t: &compactd::model::Thread| {
        let mut turns: Vec<u32> = out
            .request
            .messages
            .iter()
            // Verbatim: a dropped span's notice names its first message.
            .filter(|m| m.origin == Origin::Verbatim)
            .filter_map(|m| t.messages.iter().find(|x| x.id == m.source_id))
            .filter(|m| !m.metadata.protected)
            .map(|m| m.turn)
            .collect();
        turns.dedup();
        turns
    };
    // Within cap plus slack (8 + 2): nothing goes, far under any trigger.
    let t = thread_of(10);
    let out = h.compact(&t, 100_000, None).unwrap();
    assert!(!out.report.triggered);
    assert!(out.plan.drops.is_empty());
    // Past it: cut back to the newest 8 turns; the pinned rule stays.
    let t = thread_of(11);
    let out = h.compact(&t, 100_000, None).unwrap();
    assert!(!out.report.triggered);
    assert_eq!(shown_turns(&out, &t), (4..=11).collect::<Vec<u32>>());
    assert!(out.plan.drops.iter().all(|d| d.reason == "standing window"));
    assert!(out
        .request
        .messages
        .iter()
        .any(|m| m.content.text().contains("Never deploy on Fridays.")));
    // The next turns extend the plan and keep the cut until the slack is
    // used up again.
    let t12 = thread_of(12);
    let next = h.compact(&t12, 100_000, Some(&out.plan)).unwrap();
    assert_eq!(next.plan.drops, out.plan.drops, "no cut at 9 turns shown");
    // By tokens: the newest turns that fit 120 tokens (a turn renders to
    // about 40, its user text delimited).
    let mut h = Harness::default();
    h.policy.window = Some(compactd::reduce::StandingWindow {
        max_turns: None,
        max_tokens: Some(120),
    });
    let t = thread_of(30);
    let out = h.compact(&t, 100_000, None).unwrap();
    let turns = shown_turns(&out, &t);
    assert!(turns.len() >= 2 && turns.len() < 20, "{turns:?}");
    assert_eq!(turns.last(), Some(&30));
    // An empty window is refused, naming the field.
    h.policy.window = Some(compactd::reduce::StandingWindow::default());
    assert_eq!(h.policy.validate().unwrap_err().field, "policy.window");
}

/// A reducer switched off leaves no record of its kind, whatever the others
/// do (the seeds' debug verbosity, "no compression", is `enable.compress:
/// false`); with every reducer on, the same thread gets records of most
/// kinds, so the check is not vacuous.
#[test]
fn a_switched_off_reducer_leaves_no_record_of_its_kind() {
    use compactd::model::ClearReason;
    use compactd_testkit::synth::{thread, SynthParams};
    let t = thread(&SynthParams {
        seed: 27,
        turns: 30,
        tool_density: 0.9,
        max_output_lines: 220,
        protected: 1,
    });
    let kinds = |plan: &compactd::model::CompactionPlan| {
        let reason = |r: ClearReason| plan.clearings.iter().any(|c| c.reason == r);
        [
            ("retention", reason(ClearReason::Expired)),
            ("compress", reason(ClearReason::Compressed)),
            ("clear", reason(ClearReason::Durability)),
            ("externalize", !plan.externalizations.is_empty()),
            ("summarize", !plan.summarizations.is_empty()),
            ("drop", plan.drops.iter().any(|d| d.reason == "window")),
        ]
    };
    let budget = 12_000;
    let all = Harness::default().compact(&t, budget, None).unwrap();
    let present = kinds(&all.plan).iter().filter(|k| k.1).count();
    assert!(present >= 4, "{:?}", kinds(&all.plan));
    for off in [
        "retention",
        "compress",
        "clear",
        "externalize",
        "summarize",
        "drop",
    ] {
        let mut h = Harness::default();
        let e = &mut h.policy.enable;
        match off {
            "retention" => e.retention = false,
            "compress" => e.compress = false,
            "clear" => e.clear = false,
            "externalize" => e.externalize = false,
            "summarize" => e.summarize = false,
            _ => e.drop = false,
        }
        let out = h.compact(&t, budget, None).unwrap();
        let found = kinds(&out.plan);
        let (_, made) = found.iter().find(|k| k.0 == off).unwrap();
        assert!(!made, "{off} is off but its records are in the plan");
        assert!(out.tokens.total <= out.report.budget.hard_limit);
    }
}

/// A per-tier cap on tool results: far below the total's trigger, tool
/// output over its share of the window is reduced (oldest first) down to
/// the cap with the total's hysteresis, and only tool output: every user and
/// assistant message stays verbatim, the recent tail's results too. The
/// next turns reuse the plan while the tier stays under its cap. When the
/// total triggers too, giving back room never brings tool output back past
/// the cap (without the cap it would). Without a cap the thread is left
/// alone.
#[test]
fn a_tool_results_cap_evicts_tool_output_early_and_only_tool_output() {
    let build = |turns: u32| {
        let mut b = ThreadBuilder::default();
        let mut calls = Vec::new();
        for t in 0..turns {
            b.user(&format!("step {t}: check the worker logs"));
            calls.push(b.tool(
                "list_logs",
                json!({"n": t}),
                ToolContent::Text(log_lines(40)),
                Outcome::Success,
                None,
            ));
            b.assistant(&format!("looked at them ({t})"));
        }
        (b.build("tier"), calls)
    };
    let (t, calls) = build(12);
    let plain = Harness::default();
    let out = plain.compact(&t, 100_000, None).unwrap();
    assert!(!out.report.triggered, "no cap, far under the trigger");
    assert!(out.plan.clearings.is_empty() && out.plan.externalizations.is_empty());
    assert_eq!(out.report.budget.tool_results, None);

    let mut h = Harness::default();
    // Below what the recent tail's six results take: the cap is a guard,
    // not a promise; what it cannot reach is said.
    h.policy.tier_caps.tool_results_ratio = Some(0.04);
    let out = h.compact(&t, 100_000, None).unwrap();
    assert!(
        out.report
            .warnings
            .iter()
            .any(|w| w.contains("over their target of 3294 (cap 4000)")),
        "{:?}",
        out.report.warnings
    );
    h.policy.tier_caps.tool_results_ratio = Some(0.08);
    let out = h.compact(&t, 100_000, None).unwrap();
    let tier = out.report.budget.tool_results.expect("a cap is reported");
    assert_eq!(tier.cap, 8_000);
    assert!(
        tier.tokens_before > tier.cap,
        "{tier:?}: the thread must be over"
    );
    assert!(out.report.triggered && out.report.tier_triggered);
    assert!(
        out.tokens.total < out.report.budget.trigger,
        "the total alone would not trigger"
    );
    assert!(tier.tokens_after <= tier.target, "{tier:?}");
    // Measured on the prompt: what the tool results render to, counted as
    // the request counts them.
    let rc = compactd::render::RequestCounter::for_target(
        h.counter.as_ref(),
        &h.ledger,
        compactd::provider::Format::openai_chat_target(),
    );
    let rendered: u32 = out
        .request
        .messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .map(|m| rc.message(m))
        .sum();
    // The pipeline's count is an upper bound until artifact ids are bound
    // (each pending id is counted at its longest): close, never under.
    assert!(
        rendered <= tier.tokens_after && tier.tokens_after - rendered < tier.tokens_after / 20,
        "{rendered} vs {tier:?}"
    );
    // The oldest results went, the recent tail's stayed.
    assert_ne!(rendered_tool(&out, &calls[0]).origin, Origin::Verbatim);
    for call in &calls[6..] {
        assert_eq!(rendered_tool(&out, call).origin, Origin::Verbatim);
    }
    // Only tool output: no summary, drop or pointer to a dialogue message.
    assert!(out.plan.summarizations.is_empty() && out.plan.drops.is_empty());
    for m in t.messages.iter().filter(|m| m.tool_result.is_none()) {
        assert!(
            out.request.messages.iter().any(|r| r.source_id == m.id
                && r.origin == Origin::Verbatim
                && said(&r.content.text()) == m.content.text()),
            "{} is not verbatim",
            m.id
        );
    }
    assert!(openai_chat::check_pairing(&openai_chat::to_openai(&out.request, &opts())).is_ok());
    assert!(out.report.per_reducer.iter().any(
        |r| r.tokens_freed > 0 && ["retention", "clear", "compress"].contains(&r.name.as_str())
    ));

    // A next turn under the cap reuses the plan: the prefix stays.
    let (t13, _) = build(13);
    let next = h.compact(&t13, 100_000, Some(&out.plan)).unwrap();
    let next_tier = next.report.budget.tool_results.unwrap();
    assert!(next_tier.tokens_before <= next_tier.cap, "{next_tier:?}");
    assert!(!next.report.tier_triggered);
    assert_eq!(next.plan.clearings.len(), out.plan.clearings.len());

    // Over the total's trigger too: after compaction and refill, tool
    // results are still within their target.
    let (big, _) = build(40);
    h.policy.tier_caps.tool_results_ratio = Some(0.35);
    let out = h.compact(&big, 20_000, None).unwrap();
    let tier = out.report.budget.tool_results.unwrap();
    assert!(out.report.triggered);
    assert!(tier.tokens_after <= tier.target, "{tier:?}");
    // Without the cap the same compaction leaves (gives back) more tool
    // output than the cap allows: the cap is what held it.
    let mut uncapped = Harness::default();
    uncapped.policy.tier_caps.tool_results_ratio = None;
    let free = uncapped.compact(&big, 20_000, None).unwrap();
    let free_tool: u32 = free
        .request
        .messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .map(|m| h.counter.count(&m.content.text()) as u32)
        .sum();
    assert!(free_tool > tier.cap, "{free_tool} vs {tier:?}");
    assert!(out.tokens.total <= out.report.budget.hard_limit);

    // A cap outside (0, 1] is refused, naming the field.
    h.policy.tier_caps.tool_results_ratio = Some(1.5);
    assert_eq!(
        h.policy.validate().unwrap_err().field,
        "policy.tier_caps.tool_results_ratio"
    );
}

/// The last resort over the hard limit is a drop, so it belongs to the drop
/// reducer: switched off, a thread that cannot fit any other way is refused
/// with InsufficientBudget rather than cut (with it on, the same thread is
/// cut and fits).
#[test]
fn with_drop_switched_off_an_unfittable_thread_is_refused_not_cut() {
    let mut b = ThreadBuilder::default();
    for t in 0..40 {
        b.user(&format!(
            "question {t}: {}",
            "why does the build fail? ".repeat(20)
        ));
        b.assistant(&format!(
            "answer {t}: {}",
            "the cache is stale. ".repeat(20)
        ));
    }
    let t = b.build("no-drop");
    let mut h = Harness::default();
    h.policy.enable.summarize = false;
    let cut = h.compact(&t, 3_000, None).expect("dropping makes it fit");
    assert!(!cut.plan.drops.is_empty());
    h.policy.enable.drop = false;
    match h.compact(&t, 3_000, None) {
        Err(compactd::app::AppError::InsufficientBudget { .. }) => {}
        other => panic!(
            "expected InsufficientBudget, got {:?}",
            other.map(|o| o.plan.drops.len())
        ),
    }
}

/// A span summarized again (rolled up with what follows it) frees only what
/// its earlier summary still took: each new record says what its messages
/// cost under the previous plan, and lifecycle events report what it freed
/// beyond that, so their sum over a thread counts each token once.
#[test]
fn a_record_that_absorbs_earlier_ones_frees_only_what_they_still_took() {
    use compactd::model::CompactionPlan;
    use std::collections::{BTreeMap, HashMap};
    let whole = compactd_testkit::synth::thread(&compactd_testkit::synth::SynthParams {
        seed: 11,
        turns: 60,
        tool_density: 0.6,
        max_output_lines: 120,
        protected: 0,
    });
    let h = Harness::default();
    // The last plan, and each of its records' tokens as that call rendered them.
    type Last = (CompactionPlan, HashMap<(ActionKind, String), u32>);
    let mut previous: Option<Last> = None;
    let mut absorbing = 0;
    for turn in 1..=60 {
        let t = compactd_testkit::up_to(&whole, turn);
        let mut c = h
            .core_compact_after(&t, 6_000, false, previous.as_ref().map(|(p, _)| p))
            .unwrap();
        let ids: BTreeMap<String, String> = c
            .pending
            .iter()
            .enumerate()
            .map(|(i, a)| (a.placeholder.clone(), format!("art_{turn:016x}{i:016x}")))
            .collect();
        c.bind(&ids, &t, &h.policy.render, &h.engine());
        let spans = |p: &CompactionPlan| -> Vec<(ActionKind, Vec<String>)> {
            let e = p
                .externalizations
                .iter()
                .map(|r| (ActionKind::Externalize, &r.span));
            let s = p
                .summarizations
                .iter()
                .map(|r| (ActionKind::Summarize, &r.span));
            let cl = p.clearings.iter().map(|r| (ActionKind::Clear, &r.span));
            let d = p.drops.iter().map(|r| (ActionKind::Drop, &r.span));
            e.chain(s)
                .chain(cl)
                .chain(d)
                .map(|(a, span)| (a, span.message_ids.clone()))
                .collect()
        };
        let records: HashMap<(ActionKind, String), &compactd::reduce::RecordTokens> = c
            .report
            .records
            .iter()
            .map(|r| ((r.action, r.first_message_id.clone()), r))
            .collect();
        if let Some((old, old_after)) = &previous {
            let old_spans = spans(old);
            let evicted = old.actions();
            for (action, ids) in spans(&c.plan) {
                if old_spans.contains(&(action, ids.clone())) {
                    continue;
                }
                let r = records[&(action, ids[0].clone())];
                assert_eq!(
                    r.tokens_freed(),
                    r.tokens_previous.saturating_sub(r.tokens_after)
                );
                let absorbed: Vec<&(ActionKind, Vec<String>)> = old_spans
                    .iter()
                    .filter(|(_, o)| o.iter().all(|id| ids.contains(id)))
                    .collect();
                let untouched = ids.iter().all(|id| !evicted.contains_key(id.as_str()));
                if untouched {
                    // Every message was verbatim under the previous plan.
                    assert_eq!(r.tokens_previous, r.tokens_before, "{action:?} {ids:?}");
                }
                let summaries: Vec<_> = absorbed
                    .iter()
                    .filter(|(a, _)| *a == ActionKind::Summarize)
                    .collect();
                let covered = absorbed.iter().map(|(_, o)| o.len()).sum::<usize>();
                if !summaries.is_empty() && covered == ids.len() {
                    // Wholly made of earlier records: what they took then
                    // (counted before their artifact ids were bound, an
                    // upper bound), not what the messages took verbatim.
                    absorbing += 1;
                    let then: u32 = absorbed
                        .iter()
                        .map(|(a, o)| old_after[&(*a, o[0].clone())])
                        .sum();
                    assert!(r.tokens_previous <= then, "{} > {then}", r.tokens_previous);
                    assert!(
                        r.tokens_previous < r.tokens_before,
                        "a roll-up counted as freeing its messages verbatim again"
                    );
                }
            }
        }
        let after = c
            .report
            .records
            .iter()
            .map(|r| ((r.action, r.first_message_id.clone()), r.tokens_after))
            .collect();
        previous = Some((c.plan, after));
    }
    assert!(absorbing > 0, "no roll-up of earlier summaries happened");
}
