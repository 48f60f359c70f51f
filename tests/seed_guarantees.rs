//! Scenario tests for seed guarantees (docs/seeds.md) that had code but no
//! test: the anchoring gist, per-tool durability overrides, the window's
//! last-resort drop order, the kept tool call/result pairs and the
//! `max_summaries` cap.

use crate::common;

use common::{log_lines, Harness, ThreadBuilder};
use compactd::model::{ClearReason, Durability, Outcome, Role, ToolContent};
use compactd::render::{Origin, RenderedMessage};
use serde_json::json;

fn rendered<'a>(out: &'a common::Outcome, call_id: &str) -> &'a RenderedMessage {
    out.request
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("tool result {call_id} not rendered"))
}

/// Only durability clearing may act: what it does is all that changes.
fn clear_only() -> Harness {
    let mut h = Harness::default();
    h.policy.enable.retention = false;
    h.policy.enable.compress = false;
    h.policy.enable.externalize = false;
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.keep_recent_turns = 1;
    h.policy.keep_tool_io_pairs = 0;
    h
}

/// ANCHORING results cleared by durability keep their key fields and a
/// one-line gist: the first non-empty line of the output, cut at 200
/// characters with '…' when longer (000-22).
#[test]
fn anchoring_results_keep_key_fields_and_a_one_line_gist_when_cleared() {
    // 250 characters, two bytes each: the cut counts characters.
    let long_line: String = "é".repeat(250);
    let short_line = "deploy finished: 3 services updated, 0 failed";
    let mut b = ThreadBuilder::default();
    b.user("check the logs first");
    let ephemeral = b.tool(
        "list_logs",
        json!({}),
        ToolContent::Text(format!("{short_line}\n{}", log_lines(60))),
        Outcome::Success,
        Some(Durability::Ephemeral),
    );
    b.user("deploy the services and check the release");
    let long = b.tool(
        "deploy",
        json!({"env": "staging"}),
        ToolContent::Text(format!("\n   \n{long_line}\n{}", log_lines(60))),
        Outcome::Success,
        Some(Durability::Anchoring),
    );
    b.last()
        .tool_result
        .as_mut()
        .unwrap()
        .key_fields
        .insert("release_id".into(), json!("REL-4471"));
    b.user("and the second one");
    let short = b.tool(
        "deploy",
        json!({"env": "prod"}),
        ToolContent::Text(format!("{short_line}\n{}", log_lines(60))),
        Outcome::Success,
        None, // the default durability: ANCHORING
    );
    for t in 0..3 {
        b.user(&format!("later question {t}"));
        b.assistant("ok");
    }
    let t = b.build("anchoring-gist");
    let h = clear_only();
    let out = h.compact(&t, 2_000, None).unwrap();
    assert!(out.report.triggered);

    let stub = rendered(&out, &long);
    assert_eq!(stub.origin, Origin::Cleared);
    let text = stub.content.text();
    let gists: Vec<&str> = text.lines().filter(|l| l.starts_with("Gist: ")).collect();
    let cut: String = long_line.chars().take(200).collect();
    assert_eq!(gists, [format!("Gist: {cut}…")], "{text}");
    assert!(text.contains("REL-4471"), "key field lost: {text}");
    let record = out
        .plan
        .clearings
        .iter()
        .find(|r| r.span.message_ids[0] == stub.source_id)
        .expect("a clearing record");
    assert_eq!(record.reason, ClearReason::Durability);
    assert_eq!(record.preserved_fields["durability"], json!("anchoring"));
    assert_eq!(
        record.preserved_fields["key_fields"]["release_id"],
        json!("REL-4471")
    );

    // A line within 200 characters is the gist whole, without '…'.
    let stub = rendered(&out, &short);
    assert_eq!(stub.origin, Origin::Cleared);
    let text = stub.content.text();
    let gists: Vec<&str> = text.lines().filter(|l| l.starts_with("Gist: ")).collect();
    assert_eq!(gists, [format!("Gist: {short_line}")], "{text}");

    // An EPHEMERAL result is cleared without a gist.
    let stub = rendered(&out, &ephemeral);
    assert_eq!(stub.origin, Origin::Cleared);
    let text = stub.content.text();
    assert!(!text.contains("Gist: "), "{text}");
    assert!(!text.contains(short_line), "{text}");
}

/// A per-tool durability override (`policy.durability.<tool>`) decides how
/// that tool's results are treated when their envelopes do not say (000-27):
/// the same results are cleared as EPHEMERAL (no gist) under one override
/// and externalized, never cleared, as NON_REPLAYABLE under another, while
/// a tool without an override keeps the ANCHORING default.
#[test]
fn a_per_tool_durability_override_decides_how_its_results_are_reduced() {
    let mut b = ThreadBuilder::default();
    let (mut pages, mut docs) = (Vec::new(), Vec::new());
    for t in 0..2 {
        b.user(&format!("fetch page {t} and the matching doc"));
        pages.push(b.tool(
            "fetch_page",
            json!({"page": t}),
            ToolContent::Text(log_lines(60)),
            Outcome::Success,
            None,
        ));
        docs.push(b.tool(
            "read_doc",
            json!({"doc": t}),
            ToolContent::Text(log_lines(60)),
            Outcome::Success,
            None,
        ));
    }
    for t in 0..3 {
        b.user(&format!("later question {t}"));
        b.assistant("ok");
    }
    let t = b.build("durability-override");
    let run = |d: Durability| {
        let mut h = clear_only();
        h.policy.enable.externalize = true;
        h.policy.durability.insert("fetch_page".into(), d);
        h.compact(&t, 1_800, None).unwrap()
    };
    let record = |out: &common::Outcome, call: &str| {
        let id = &rendered(out, call).source_id;
        out.plan
            .clearings
            .iter()
            .find(|r| &r.span.message_ids[0] == id)
            .cloned()
    };

    let out = run(Durability::Ephemeral);
    assert!(out.report.triggered);
    assert!(out.plan.externalizations.is_empty());
    for c in &pages {
        let m = rendered(&out, c);
        assert_eq!(m.origin, Origin::Cleared, "{c}");
        assert!(!m.content.text().contains("Gist: "), "{}", m.content.text());
        let r = record(&out, c).expect("a clearing record");
        assert_eq!(r.reason, ClearReason::Durability);
        assert_eq!(r.preserved_fields["durability"], json!("ephemeral"));
    }

    let out = run(Durability::NonReplayable);
    assert!(out.report.triggered);
    for c in &pages {
        assert_eq!(rendered(&out, c).origin, Origin::Externalized, "{c}");
        assert!(record(&out, c).is_none(), "{c} was cleared");
    }
    assert_eq!(out.plan.externalizations.len(), pages.len());

    // The tool without an override keeps the default, under either.
    for out in [run(Durability::Ephemeral), out] {
        for c in &docs {
            let r = record(&out, c).expect("the default ANCHORING result is cleared");
            assert_eq!(r.preserved_fields["durability"], json!("anchoring"));
            assert!(rendered(&out, c).content.text().contains("Gist: "));
        }
    }
}

/// One turn of agent work: a request, a call with its result, an answer.
fn work_turn(b: &mut ThreadBuilder, t: usize, lines: usize) -> String {
    b.user(&format!(
        "turn {t}: inspect shard {t} of the ingest cluster"
    ));
    let call = b.tool(
        "read_shard",
        json!({"shard": t}),
        ToolContent::Text(log_lines(lines)),
        Outcome::Success,
        None,
    );
    b.assistant(&format!(
        "Shard {t} is healthy; the ingest backlog is {} items.",
        t * 7
    ));
    call
}

/// Positions in `t` of the messages `ids` names.
fn positions(t: &compactd::model::Thread, ids: &[String]) -> Vec<usize> {
    ids.iter()
        .map(|id| t.messages.iter().position(|m| &m.id == id).unwrap())
        .collect()
}

/// Ten turns summarized by a first compaction, then `extra` more turns,
/// compacted again with only the window able to act: the thread, the first
/// plan and the second.
fn summarized_then_windowed(
    extra: usize,
    budget: u32,
) -> (
    compactd::model::Thread,
    compactd::model::CompactionPlan,
    common::Outcome,
) {
    let mut b = ThreadBuilder::default();
    for t in 0..10 {
        work_turn(&mut b, t, 30);
    }
    let first = b.build("window-order");
    // Summaries first, of the oldest turns (nothing else may act).
    let mut h = Harness::default();
    h.policy.enable.retention = false;
    h.policy.enable.compress = false;
    h.policy.enable.clear = false;
    h.policy.enable.externalize = false;
    h.policy.enable.drop = false;
    let before = h.compact(&first, budget, None).unwrap();
    assert!(!before.plan.summarizations.is_empty());
    assert!(before.plan.drops.is_empty());
    for t in 10..10 + extra {
        work_turn(&mut b, t, 30);
    }
    let t = b.build("window-order");
    // Now only the window may act.
    h.policy.enable.summarize = false;
    h.policy.enable.drop = true;
    let out = h.compact(&t, budget, Some(&before.plan)).unwrap();
    assert!(out.report.triggered);
    (t, before.plan, out)
}

/// Checks what the window did to `out`: whole call groups, oldest first
/// among the units no summary covers, and every earlier summary kept.
fn assert_window_order(
    t: &compactd::model::Thread,
    before: &compactd::model::CompactionPlan,
    out: &common::Outcome,
) {
    // The earlier summaries stand, unchanged.
    assert_eq!(
        out.plan.summarizations.len(),
        before.summarizations.len(),
        "a summary was dropped: {:?}",
        out.plan
            .drops
            .iter()
            .map(|d| &d.span.message_ids)
            .collect::<Vec<_>>()
    );
    for (now, then) in out.plan.summarizations.iter().zip(&before.summarizations) {
        assert_eq!(now.span.message_ids, then.span.message_ids);
    }
    let summarized: std::collections::BTreeSet<usize> = out
        .plan
        .summarizations
        .iter()
        .flat_map(|s| positions(t, &s.span.message_ids))
        .collect();
    assert!(!out.plan.drops.is_empty(), "the window dropped nothing");
    let dropped: std::collections::BTreeSet<usize> = out
        .plan
        .drops
        .iter()
        .inspect(|d| assert_eq!(d.reason, "window"))
        .flat_map(|d| positions(t, &d.span.message_ids))
        .collect();
    // Oldest first: no call group older than the newest dropped one still
    // renders verbatim (each is dropped, summarized or, given back by the
    // refill, a stub). The refill may give back small messages newest
    // first, so the order is checked on the call groups the window cut.
    let groups: Vec<(usize, usize)> = t
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.tool_calls.is_empty())
        .map(|(i, m)| {
            let id = &m.tool_calls[0].id;
            let result = t
                .messages
                .iter()
                .position(|r| {
                    r.tool_result
                        .as_ref()
                        .is_some_and(|e| &e.tool_call_id == id)
                })
                .unwrap();
            (i, result)
        })
        .collect();
    let cut: Vec<&(usize, usize)> = groups.iter().filter(|g| dropped.contains(&g.0)).collect();
    assert!(cut.len() >= 2, "the window cut {} call groups", cut.len());
    let newest = cut.last().unwrap().0;
    let cleared: std::collections::BTreeSet<usize> = out
        .plan
        .clearings
        .iter()
        .flat_map(|c| positions(t, &c.span.message_ids))
        .collect();
    for &(call, result) in groups.iter().filter(|g| g.0 < newest) {
        let gone =
            |i: usize| dropped.contains(&i) || summarized.contains(&i) || cleared.contains(&i);
        assert!(
            gone(call) && gone(result),
            "{} still renders while the newer {} was dropped",
            t.messages[call].id,
            t.messages[newest].id
        );
    }
    // And the drop stopped at the target: newer call groups stay.
    assert!(groups
        .iter()
        .any(|g| g.0 > newest && !dropped.contains(&g.0)));
    // Whole units: a call is dropped exactly when its result is.
    for (i, m) in t.messages.iter().enumerate() {
        for c in &m.tool_calls {
            let result = t
                .messages
                .iter()
                .position(|r| {
                    r.tool_result
                        .as_ref()
                        .is_some_and(|e| e.tool_call_id == c.id)
                })
                .unwrap();
            assert_eq!(dropped.contains(&i), dropped.contains(&result), "{}", c.id);
        }
    }
}

/// The last-resort drop (the window reducer) removes whole units, oldest
/// first, and keeps the summaries an earlier compaction wrote, although
/// they are the oldest units of all, while dropping the free middle brings
/// the request within its limit (000-77): whether the request starts below
/// the hard limit (3 more turns) or far above it (14 more; the window once
/// dropped the oldest summary first then, weighing the running total).
#[test]
fn the_window_drops_whole_units_oldest_first_and_keeps_summaries() {
    for extra in [3, 14] {
        let (t, before, out) = summarized_then_windowed(extra, 6_000);
        assert_window_order(&t, &before, &out);
    }
}

/// The last `keep_tool_io_pairs` call/result pairs stay verbatim under
/// pressure, though older than the kept turns: older results are cleared
/// and the dialogue summarized instead, where without the setting clearing
/// reaches into those pairs too (002-19).
#[test]
fn the_last_tool_io_pairs_stay_verbatim_under_pressure() {
    let mut b = ThreadBuilder::default();
    for t in 0..6 {
        b.user(&format!(
            "Question {t} about the migration plan. {}",
            "We discussed the rollout order and the fallback path at length. ".repeat(40)
        ));
        b.assistant(&format!(
            "Answer {t}: {}",
            "The rollout goes region by region with a fallback at each step. ".repeat(40)
        ));
    }
    let mut calls = Vec::new();
    for t in 6..16 {
        b.user(&format!("step {t}: read the shard report"));
        calls.push(b.tool(
            "read_report",
            json!({"shard": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        b.assistant("noted");
    }
    b.user("thanks, wrap up");
    b.assistant("done");
    let t = b.build("kept-pairs");
    let run = |pairs: u32| {
        let mut h = Harness::default();
        h.policy.enable.retention = false;
        h.policy.enable.compress = false;
        h.policy.enable.externalize = false;
        h.policy.enable.drop = false;
        h.policy.keep_recent_turns = 1;
        h.policy.keep_tool_io_pairs = pairs;
        h.compact(&t, 10_000, None).unwrap()
    };
    let out = run(3);
    assert!(out.report.triggered);
    let origin = |out: &common::Outcome, c: &String| rendered(out, c).origin;
    for c in &calls[7..] {
        assert_eq!(
            origin(&out, c),
            Origin::Verbatim,
            "{c} is one of the last 3 pairs"
        );
        // Its call renders too, with its arguments.
        assert!(out
            .request
            .messages
            .iter()
            .any(|m| m.tool_calls.iter().any(|tc| &tc.id == c)));
    }
    for c in &calls[..5] {
        assert_eq!(origin(&out, c), Origin::Cleared, "{c}");
    }
    assert!(!out.plan.summarizations.is_empty(), "the dialogue gave way");
    // The same pressure without kept pairs reaches into them.
    let out = run(0);
    assert!(
        calls[7..]
            .iter()
            .any(|c| origin(&out, c) != Origin::Verbatim),
        "no pressure on the last pairs: the test would prove nothing"
    );
}

/// `max_summaries` caps the summaries: many summarized chunks leave at
/// most that many summary records (and summary messages), and the rolled-up
/// summary keeps the facts of the ones it absorbed (002-24).
#[test]
fn max_summaries_caps_the_summaries_and_the_roll_up_keeps_their_facts() {
    let mut b = ThreadBuilder::default();
    for t in 0..16 {
        b.user(&format!(
            "Topic {t}: the export job. I require that the archive bucket is bucket-{t}x7 for region {t}."
        ));
        b.assistant(&format!(
            "Noted for topic {t}. {}",
            "The job batches rows, checkpoints progress and reports its lag. ".repeat(30)
        ));
    }
    let t = b.build("max-summaries");
    let run = |max: u32, budget: u32| {
        let mut h = Harness::default();
        h.policy.enable.retention = false;
        h.policy.enable.compress = false;
        h.policy.enable.clear = false;
        h.policy.enable.externalize = false;
        h.policy.enable.drop = false;
        h.policy.keep_recent_turns = 2;
        h.policy.summary_chunk_tokens = 600;
        h.policy.max_summaries = max;
        h.compact(&t, budget, None).unwrap()
    };
    for budget in [6_000, 4_500] {
        // Uncapped, the chunks stand as separate summaries…
        let free = run(100, budget);
        assert!(
            free.plan.summarizations.len() > 2,
            "budget {budget}: only {} chunks: the cap would not bind",
            free.plan.summarizations.len()
        );
        // …capped at 2, they are rolled up.
        let capped = run(2, budget);
        let records = &capped.plan.summarizations;
        assert!(
            (1..=2).contains(&records.len()),
            "budget {budget}: {} summaries",
            records.len()
        );
        let messages = capped
            .request
            .messages
            .iter()
            .filter(|m| m.origin == Origin::Summary)
            .count();
        assert_eq!(messages, records.len(), "budget {budget}");
        // Every chunk a capped record absorbed keeps its facts there.
        let mut absorbed = 0;
        for chunk in &free.plan.summarizations {
            let Some(roll_up) = records.iter().find(|r| {
                chunk
                    .span
                    .message_ids
                    .iter()
                    .all(|id| r.span.message_ids.contains(id))
            }) else {
                continue;
            };
            absorbed += 1;
            for fact in &chunk.summary.facts {
                assert!(
                    roll_up.summary.facts.contains(fact),
                    "budget {budget}: {fact:?} lost in the roll-up: {:?}",
                    roll_up.summary.facts
                );
            }
        }
        assert!(
            absorbed > records.len(),
            "budget {budget}: no record absorbed two chunks"
        );
        // And each summarized request's own requirement is in its summary.
        for r in records {
            for id in &r.span.message_ids {
                let m = t.messages.iter().find(|m| &m.id == id).unwrap();
                if m.role == Role::User {
                    let code = format!("bucket-{}x7", m.turn - 1);
                    assert!(
                        r.summary.render_as_message().contains(&code),
                        "budget {budget}: {code} missing"
                    );
                }
            }
        }
    }
}
