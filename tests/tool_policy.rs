//! Per-tool policy through the public pipeline: count retention,
//! `never_evict`, must-preserve fields, a per-tool externalize threshold and
//! replay cost; and the guarantee that key fields survive every clear and
//! stub (a property over random threads).

use crate::common;

use common::{log_lines, run_counted, Harness, ThreadBuilder};
use compactd::model::{ClearReason, DeterminismMetadata, Durability, Outcome, ToolContent};
use compactd::reduce::{ReplayCost, ToolPolicy, ToolRetention};
use compactd::render::Origin;
use compactd_testkit::synth::{thread, SynthParams};
use proptest::prelude::*;
use serde_json::json;

fn origin_of(out: &common::Outcome, call_id: &str) -> Origin {
    rendered(out, call_id).origin
}

fn rendered<'a>(out: &'a common::Outcome, call_id: &str) -> &'a compactd::render::RenderedMessage {
    out.request
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("tool result {call_id} not rendered"))
}

/// Only the retention reducer runs: what it does is all that changes.
fn retention_only() -> Harness {
    let mut h = Harness::default();
    h.policy.enable.compress = false;
    h.policy.enable.clear = false;
    h.policy.enable.externalize = false;
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.render.delimit_tool_output = false;
    no_reserves(&mut h);
    h
}

/// Budgets in these tests are the thread's own arithmetic.
fn no_reserves(h: &mut Harness) {
    h.policy.rehydration_reserve_tokens = 0;
    h.policy.safety_buffer_tokens = 0;
}

#[test]
fn keep_last_keeps_only_the_newest_results_of_that_tool() {
    let mut b = ThreadBuilder::default();
    let (mut searches, mut reads) = (Vec::new(), Vec::new());
    for t in 0..6 {
        b.user(&format!("step {t}"));
        searches.push(b.tool(
            "search",
            json!({"q": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        reads.push(b.tool(
            "read_file",
            json!({"path": t}),
            ToolContent::Text(log_lines(40)),
            Outcome::Success,
            None,
        ));
        b.assistant("noted");
    }
    let t = b.build("keep-last");
    let mut h = retention_only();
    h.policy.retention.insert(
        "search".into(),
        ToolRetention {
            keep_turns: None,
            keep_last: Some(2),
            never_evict: false,
        },
    );
    let out = h.compact(&t, 9_000, None).unwrap();
    assert!(out.report.triggered, "{}", out.report.tokens_before);
    for (k, c) in searches.iter().enumerate() {
        let want = if k < 4 {
            Origin::Cleared
        } else {
            Origin::Verbatim
        };
        assert_eq!(origin_of(&out, c), want, "search result {k}");
    }
    // The rule is the search tool's own: reads keep their default (8 turns).
    for c in &reads {
        assert_eq!(origin_of(&out, c), Origin::Verbatim);
    }
    let stub = rendered(&out, &searches[0]).content.text();
    assert!(
        stub.starts_with("[result expired] search: success"),
        "{stub}"
    );
    // Without the rule, a triggered compaction that fits stubs none of them
    // (they are younger than the default 8 turns).
    let h = retention_only();
    let out = h.compact(&t, 11_000, None).unwrap();
    assert!(out.report.triggered);
    assert!(searches
        .iter()
        .all(|c| origin_of(&out, c) == Origin::Verbatim));
}

#[test]
fn never_evict_results_stay_while_older_ones_are_stubbed() {
    let mut b = ThreadBuilder::default();
    let (mut facts, mut logs) = (Vec::new(), Vec::new());
    for t in 0..12 {
        b.user(&format!("step {t}"));
        facts.push(b.tool(
            "get_account",
            json!({"n": t}),
            ToolContent::Text(log_lines(20)),
            Outcome::Success,
            None,
        ));
        logs.push(b.tool(
            "tail_logs",
            json!({"n": t}),
            ToolContent::Text(log_lines(20)),
            Outcome::Success,
            None,
        ));
        b.assistant("ok");
    }
    let t = b.build("never-evict");
    let mut h = retention_only();
    let rule = |never_evict| ToolRetention {
        keep_turns: Some(2),
        keep_last: None,
        never_evict,
    };
    h.policy.retention.insert("get_account".into(), rule(true));
    h.policy.retention.insert("tail_logs".into(), rule(false));
    let out = h.compact(&t, 9_000, None).unwrap();
    assert!(out.report.triggered);
    for c in &facts {
        assert_eq!(origin_of(&out, c), Origin::Verbatim, "never_evict result");
    }
    // The same age and size under a rule without never_evict: stubbed.
    assert!(logs[..9]
        .iter()
        .all(|c| origin_of(&out, c) == Origin::Cleared));
}

/// A thread of order results whose output names the order in JSON and in
/// text, with no key fields on the envelope (what most frameworks send).
fn orders() -> (compactd::model::Thread, Vec<String>) {
    let mut b = ThreadBuilder::default();
    let mut calls = Vec::new();
    for t in 0..10 {
        b.user(&format!("place order {t}"));
        let body = json!({
            "order": {"id": format!("ORD-{t:04}"), "status": "confirmed"},
            "lines": (0..40).map(|i| json!({"sku": format!("SKU-{i}"), "qty": i % 3 + 1, "note": "standard shipping, gift wrap declined"})).collect::<Vec<_>>(),
        });
        calls.push(b.tool(
            "place_order",
            json!({"n": t}),
            ToolContent::Text(body.to_string()),
            Outcome::Success,
            Some(Durability::Ephemeral),
        ));
        b.assistant("placed");
    }
    (b.build("orders"), calls)
}

#[test]
fn must_preserve_fields_survive_clearing_without_key_fields_on_the_envelope() {
    let (t, calls) = orders();
    let mut h = Harness::default();
    h.policy.enable.compress = false;
    h.policy.enable.externalize = false;
    h.policy.enable.summarize = false;
    h.policy.enable.retention = false;
    h.policy.keep_tool_io_pairs = 1;
    let plain = h.compact(&t, 3_000, None).unwrap();
    h.policy.tools.insert(
        "place_order".into(),
        ToolPolicy {
            must_preserve_fields: vec!["order.id".into(), "status".into()],
            ..ToolPolicy::default()
        },
    );
    let kept = h.compact(&t, 3_000, None).unwrap();
    let mut cleared = 0;
    for (k, c) in calls.iter().enumerate() {
        if origin_of(&kept, c) != Origin::Cleared {
            continue;
        }
        cleared += 1;
        let text = rendered(&kept, c).content.text();
        assert!(
            text.contains(&format!("\"order.id\":\"ORD-{k:04}\"")),
            "{text}"
        );
        assert!(text.contains("\"status\":\"confirmed\""), "{text}");
        // Without the tool's policy the stub has no key data.
        if origin_of(&plain, c) == Origin::Cleared {
            let before = rendered(&plain, c).content.text();
            assert!(!before.contains("Key data"), "{before}");
        }
    }
    assert!(cleared >= 5, "only {cleared} results were cleared");
    // The plan's record keeps them as key fields too.
    let record = kept
        .plan
        .clearings
        .iter()
        .find(|r| r.reason == ClearReason::Durability)
        .expect("a clear record");
    let kf = &record.preserved_fields["key_fields"];
    assert!(kf["order.id"].as_str().unwrap().starts_with("ORD-"), "{kf}");
    // The caller's thread is untouched.
    assert!(t
        .messages
        .iter()
        .filter_map(|m| m.tool_result.as_ref())
        .all(|e| e.key_fields.is_empty()));
}

#[test]
fn a_tools_own_externalize_threshold_decides_for_its_results() {
    let mut b = ThreadBuilder::default();
    let (mut pages, mut reads) = (Vec::new(), Vec::new());
    for t in 0..4 {
        b.user(&format!("step {t}"));
        // About 600 tokens each: under the default threshold of 1,000.
        pages.push(b.tool(
            "fetch_page",
            json!({"n": t}),
            ToolContent::Text(log_lines(30)),
            Outcome::Success,
            Some(Durability::NonReplayable),
        ));
        reads.push(b.tool(
            "read_file",
            json!({"n": t}),
            ToolContent::Text(log_lines(30)),
            Outcome::Success,
            Some(Durability::NonReplayable),
        ));
        b.assistant("ok");
    }
    for t in 0..6 {
        b.user(&format!("later {t}"));
        b.assistant("fine");
    }
    let t = b.build("threshold");
    let mut h = Harness::default();
    no_reserves(&mut h);
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.keep_tool_io_pairs = 0;
    // The budget is sized for results and user text rendered as they are.
    h.policy.render.delimit_tool_output = false;
    h.policy.render.delimit_user_content = false;
    // Triggered, and nothing may be reduced: the request stays as it is,
    // within the hard limit and over the target.
    let budget = 5_400;
    let out = h.compact(&t, budget, None).unwrap();
    assert!(out.report.triggered, "{}", out.report.tokens_before);
    assert!(pages.iter().all(|c| origin_of(&out, c) == Origin::Verbatim));
    h.policy.tools.insert(
        "fetch_page".into(),
        ToolPolicy {
            externalize_threshold_tokens: Some(100),
            ..ToolPolicy::default()
        },
    );
    let out = h.compact(&t, budget, None).unwrap();
    // Oldest first, as far as the target needs.
    assert_eq!(origin_of(&out, &pages[0]), Origin::Externalized);
    assert!(reads.iter().all(|c| origin_of(&out, c) == Origin::Verbatim));
}

/// Over the trigger with the result verbatim, within the hard limit.
const BUDGET: u32 = 2_400;

#[test]
fn an_expensive_replay_is_not_cleared_even_when_the_source_is_unchanged() {
    let mut b = ThreadBuilder::default();
    b.user("look it up");
    let call = b.tool(
        "web_search",
        json!({"q": "rates"}),
        ToolContent::Text(log_lines(100)),
        Outcome::Success,
        Some(Durability::Replayable),
    );
    b.last().tool_result.as_mut().unwrap().determinism = Some(DeterminismMetadata {
        etag: Some("e1".into()),
        ..Default::default()
    });
    for t in 0..6 {
        b.user(&format!("later {t}"));
        b.assistant("ok");
    }
    let t = b.build("replay-cost");
    let mut h = Harness::default();
    no_reserves(&mut h);
    h.policy.render.delimit_tool_output = false;
    h.policy.enable.externalize = false;
    h.policy.enable.summarize = false;
    h.policy.enable.drop = false;
    h.policy.enable.retention = false;
    h.policy.enable.compress = false;
    h.policy.keep_tool_io_pairs = 0;
    h.observations.insert(
        call.clone(),
        DeterminismMetadata {
            etag: Some("e1".into()),
            ..Default::default()
        },
    );
    let out = h.compact(&t, BUDGET, None).unwrap();
    assert!(out.report.triggered, "{}", out.report.tokens_before);
    assert_eq!(origin_of(&out, &call), Origin::Cleared);
    for cost in [ReplayCost::Free, ReplayCost::Cheap] {
        h.policy.tools.insert(
            "web_search".into(),
            ToolPolicy {
                replay_cost: Some(cost),
                ..ToolPolicy::default()
            },
        );
        let out = h.compact(&t, BUDGET, None).unwrap();
        assert_eq!(origin_of(&out, &call), Origin::Cleared, "{cost:?}");
    }
    h.policy.tools.insert(
        "web_search".into(),
        ToolPolicy {
            replay_cost: Some(ReplayCost::Expensive),
            ..ToolPolicy::default()
        },
    );
    // Kept, or externalized once that is allowed: never cleared.
    let out = h.compact(&t, BUDGET, None).unwrap();
    assert_eq!(origin_of(&out, &call), Origin::Verbatim);
    h.policy.enable.externalize = true;
    let out = h.compact(&t, BUDGET, None).unwrap();
    assert_eq!(origin_of(&out, &call), Origin::Externalized);
}

#[test]
fn an_invalid_tool_policy_names_its_field() {
    let mut h = Harness::default();
    h.policy.tools.insert(
        "x".into(),
        ToolPolicy {
            must_preserve_fields: vec!["order..id".into()],
            ..ToolPolicy::default()
        },
    );
    let e = h.policy.validate().unwrap_err();
    assert_eq!(e.field, "policy.tools[x].must_preserve_fields[0]");
    h.policy.tools.insert(
        "x".into(),
        ToolPolicy {
            externalize_threshold_tokens: Some(0),
            ..ToolPolicy::default()
        },
    );
    let e = h.policy.validate().unwrap_err();
    assert_eq!(e.field, "policy.tools[x].externalize_threshold_tokens");
}

/// Every tool result that is cleared or stubbed, for any reason, still
/// names its key fields: the envelope's own, and the values its tool's
/// `must_preserve_fields` read from its output.
#[test]
fn key_fields_survive_every_clear_and_stub() {
    let strategy = (
        any::<u64>(),
        2u32..24,
        0.3f64..1.0,
        5u32..400,
        2_000u32..30_000,
        any::<u64>(),
    );
    let stubs = std::cell::Cell::new(0u32);
    let (_, ok) = run_counted(
        "key_fields_survive_every_clear_and_stub",
        strategy,
        48,
        0.5,
        |(seed, turns, tool_density, max_output_lines, budget, marks)| {
            let mut t = thread(&SynthParams {
                seed,
                turns,
                tool_density,
                max_output_lines,
                protected: 0,
            });
            // Expected values per tool call id.
            let mut expect: Vec<(String, String)> = Vec::new();
            let mut h = Harness::default();
            for (j, m) in t.messages.iter_mut().enumerate() {
                let Some(env) = std::sync::Arc::make_mut(m).tool_result.as_mut() else {
                    continue;
                };
                match (marks >> (j % 64)) & 3 {
                    0 => {
                        let v = format!("KF-{j}");
                        env.key_fields.insert("ref".into(), json!(v));
                        expect.push((env.tool_call_id.clone(), v));
                    }
                    1 => {
                        // A text output naming a receipt on a line of its own.
                        if let ToolContent::Text(s) = &mut env.content {
                            let v = format!("RC-{j}");
                            *s = format!("receipt_id: {v}\n{s}");
                            expect.push((env.tool_call_id.clone(), v));
                            h.policy.tools.insert(
                                env.tool_name.clone(),
                                ToolPolicy {
                                    must_preserve_fields: vec!["receipt_id".into()],
                                    ..ToolPolicy::default()
                                },
                            );
                        }
                    }
                    _ => {}
                }
            }
            let out = match h.compact(&t, budget, None) {
                Ok(out) => out,
                Err(_) => return Ok(false),
            };
            for (call, value) in &expect {
                let Some(r) = out
                    .request
                    .messages
                    .iter()
                    .find(|m| m.tool_call_id.as_deref() == Some(call.as_str()))
                else {
                    continue;
                };
                if r.origin == Origin::Cleared {
                    stubs.set(stubs.get() + 1);
                    let text = r.content.text();
                    prop_assert!(
                        text.contains(value.as_str()),
                        "{call}: {value} missing from its stub:\n{text}"
                    );
                }
            }
            Ok(true)
        },
    );
    assert!(ok > 0);
    // Enough stubs for the property to mean something, whatever the cases.
    assert!(stubs.get() >= 8, "only {} stubs were checked", stubs.get());
}
