use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::model::{Content, MessageMetadata, Priority, ToolContent, ToolResultEnvelope};
use serde_json::Value;

fn msg(id: &str, role: Role, turn: u32, text: &str) -> Message {
    Message {
        id: id.to_string(),
        role,
        content: Content::Text(text.to_string()),
        tool_calls: Vec::new(),
        tool_result: None,
        turn,
        metadata: MessageMetadata::default(),
    }
}

fn tool(id: &str, turn: u32, name: &str, outcome: Outcome, content: &str, kf: Value) -> Message {
    let key_fields: BTreeMap<String, Value> = kf
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    Message {
        id: id.to_string(),
        role: Role::Tool,
        content: Content::default(),
        tool_calls: Vec::new(),
        tool_result: Some(ToolResultEnvelope {
            wire: None,
            tool_name: name.to_string(),
            tool_call_id: format!("call-{id}"),
            outcome,
            content: ToolContent::Text(content.to_string()),
            key_fields,
            durability: None,
            determinism: None,
            started_at: None,
            completed_at: None,
        }),
        turn,
        metadata: MessageMetadata::default(),
    }
}

fn span_of(msgs: &[Message]) -> SpanReference {
    SpanReference {
        message_ids: msgs.iter().map(|m| m.id.clone()).collect(),
        first_turn: msgs.first().map(|m| m.turn).unwrap_or(0),
        last_turn: msgs.last().map(|m| m.turn).unwrap_or(0),
    }
}

fn run(
    msgs: &[Message],
    prior: &[&StructuredSummary],
    max_chars: usize,
) -> Result<StructuredSummary, SummarizeError> {
    let refs: Vec<&Message> = msgs.iter().collect();
    ExtractiveSummarizer.summarize(&SummaryRequest {
        span: span_of(msgs),
        messages: &refs,
        prior,
        max_chars,
        rereads_prior: false,
        scans: None,
        digests: None,
    })
}

const BIG: usize = 1 << 20;

#[test]
fn id_is_stable() {
    assert_eq!(ExtractiveSummarizer.id(), "extractive-v2");
}

#[test]
fn captures_protected_constraints_verbatim() {
    let msgs = vec![
        msg(
            "s",
            Role::System,
            0,
            "You are a coding agent. Never delete production data.",
        ),
        msg("d", Role::Developer, 0, "The user prefers Python."),
        msg(
            "u",
            Role::User,
            1,
            "I'm building a data pipeline.\nThe budget is $1000.  Please keep it   simple.",
        ),
    ];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert!(
        s.facts
            .contains(&"Never delete production data.".to_string()),
        "{:?}",
        s.facts
    );
    assert!(s.facts.contains(&"The user prefers Python.".to_string()));
    // A statement is the unit: from its first fact to its end, what leads
    // up to it left out. An instruction is kept as said, though it names
    // no rule word.
    assert!(
        s.facts
            .contains(&"The budget is $1000. Please keep it simple.".to_string()),
        "{:?}",
        s.facts
    );
    assert!(
        !s.facts.iter().any(|f| f.contains("data pipeline")),
        "no cue, not a fact"
    );
    assert!(!s.facts.iter().any(|f| f.contains("coding agent")));
}

#[test]
fn cue_detection() {
    for c in [
        "Don't touch the billing tables",
        "Do not email customers",
        "We need it by 2025-03-01",
        "Ship before Friday",
        "Keep spend under 500 USD",
        "Only use approved libraries",
        "Deliver by March 3",
        "Tests are required for every change",
    ] {
        assert!(is_constraint(c), "{c}");
    }
    for c in [
        "We may want to look",
        "The pipeline reads CSV files",
        "march forward",
    ] {
        assert!(!is_constraint(c), "{c}");
    }
}

fn cycle_messages(cycle: u32) -> Vec<Message> {
    let t = cycle * 3 + 1;
    let p = format!("c{cycle}-");
    vec![
        msg(&format!("{p}u"), Role::User, t, &format!(
            "Now handle dataset {cycle}. We should log progress for dataset {cycle}. \
             Can you check the schema of table_{cycle}?"
        )),
        msg(&format!("{p}a"), Role::Assistant, t, &format!(
            "I'll load table_{cycle} with pandas because it is already installed. \
             Let's validate the rows of table_{cycle} before writing anything. \
             TODO: add retries to loader {cycle}.\n\nPlan:\n1. Load table_{cycle}\n2. Validate\n3. Write report {cycle}"
        )),
        tool(&format!("{p}t1"), t, "run_query", Outcome::Success, "rows=42",
            json!({"query_id": format!("q-{cycle}"), "rows": 42})),
        tool(&format!("{p}t2"), t + 1, "write_file", Outcome::Failure,
            &format!("PermissionError: /data/out_{cycle}.csv is read-only\n  at line 3"), json!({})),
        msg(&format!("{p}a2"), Role::Assistant, t + 1, &format!(
            "We will write report {cycle} to the scratch bucket instead, since the data dir is read-only."
        )),
    ]
}

/// Facts and constraints survive N rolling cycles (an agent must not forget
/// them after summarization), even under a cap that
/// forces trimming on every cycle.
fn rolling(cycles: u32, max_chars: usize) -> StructuredSummary {
    let mut first = vec![
        msg("s0", Role::System, 0, "Never delete production data."),
        msg(
            "u0",
            Role::User,
            0,
            "Hi! The user prefers Python.\n\nThe budget is $1000.",
        ),
    ];
    first.extend(cycle_messages(0));
    let mut summary = run(&first, &[], max_chars).expect("cycle 0 fits");
    for c in 1..cycles {
        let msgs = cycle_messages(c);
        summary = run(&msgs, &[&summary], max_chars).expect("cycle fits");
        let r = summary.render_as_message();
        assert!(r.len() <= max_chars, "cycle {c}: {} > {max_chars}", r.len());
        assert!(r.contains("Python"), "cycle {c}: {r}");
        assert!(r.contains("1000"), "cycle {c}: {r}");
        assert!(r.contains("Never delete production data"), "cycle {c}: {r}");
    }
    summary
}

#[test]
fn facts_survive_5_cycles() {
    for max in [400, 900, 4000, BIG] {
        rolling(5, max);
    }
}

#[test]
fn facts_survive_10_cycles_without_drift() {
    for max in [400, 900, 4000, BIG] {
        let s = rolling(10, max);
        // Verbatim, not paraphrased, and in their original order.
        let i = s
            .facts
            .iter()
            .position(|f| f == "Never delete production data.");
        let j = s.facts.iter().position(|f| f == "The user prefers Python.");
        let k = s.facts.iter().position(|f| f == "The budget is $1000.");
        assert!(i < j && j < k && i.is_some(), "{:?}", s.facts);
    }
    // With room, everything accumulates: ten cycles of tool outcomes.
    let s = rolling(10, BIG);
    assert_eq!(s.tool_outcomes.len(), 20);
    assert_eq!(
        s.current_plan,
        vec!["Load table_9", "Validate", "Write report 9"]
    );
}

#[test]
fn deterministic() {
    let mut msgs = vec![msg(
        "u0",
        Role::User,
        0,
        "The budget is $1000. Never delete production data.",
    )];
    msgs.extend(cycle_messages(1));
    msgs.extend(cycle_messages(2));
    let a = run(&msgs, &[], 700).expect("fits");
    let b = run(&msgs.clone(), &[], 700).expect("fits");
    assert_eq!(a, b);
    assert_eq!(a.render_as_message(), b.render_as_message());
    let pa = run(&cycle_messages(3), &[&a], 700).expect("fits");
    let pb = run(&cycle_messages(3), &[&b], 700).expect("fits");
    assert_eq!(pa.render_as_message(), pb.render_as_message());
}

#[test]
fn tool_outcomes_and_artifacts() {
    let msgs = vec![
        tool(
            "t1",
            1,
            "create_order",
            Outcome::Success,
            "{\"ok\":true}",
            json!({"order_id": "ord_9"}),
        ),
        tool(
            "t2",
            1,
            "deploy",
            Outcome::Failure,
            "\n  Error: quota exceeded  \nstack...",
            json!({}),
        ),
        tool(
            "t3",
            2,
            "fetch",
            Outcome::Partial,
            "half",
            json!({"artifact_id": "art_123"}),
        ),
    ];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(s.tool_outcomes.len(), 3);
    assert_eq!(s.tool_outcomes[0].tool_name, "create_order");
    assert_eq!(
        s.tool_outcomes[0].key_fields.get("order_id"),
        Some(&json!("ord_9"))
    );
    assert_eq!(s.tool_outcomes[0].error_message, None);
    assert_eq!(s.tool_outcomes[1].outcome, Outcome::Failure);
    assert_eq!(
        s.tool_outcomes[1].error_message.as_deref(),
        Some("Error: quota exceeded")
    );
    assert_eq!(s.tool_outcomes[2].outcome, Outcome::Partial);
    assert_eq!(s.artifacts.len(), 1);
    assert_eq!(s.artifacts[0].artifact_id, "art_123");
    // Carried forward by the next cycle, not duplicated.
    let next = run(&msgs[..1], &[&s], BIG).expect("fits");
    assert_eq!(next.artifacts.len(), 1);
    assert_eq!(next.tool_outcomes.len(), 4);
}

#[test]
fn json_tool_error_message() {
    let mut m = tool("t", 1, "api", Outcome::Failure, "", json!({}));
    if let Some(env) = m.tool_result.as_mut() {
        env.content = ToolContent::json(json!({"error": {"message": "not found", "code": 404}}));
    }
    let s = run(&[m], &[], BIG).expect("fits");
    assert_eq!(
        s.tool_outcomes[0].error_message.as_deref(),
        Some("[404] not found")
    );
}

#[test]
fn decisions_open_items_task_plan() {
    let msgs = vec![
        msg("u1", Role::User, 1, "What database should we use? It must run on-prem."),
        msg(
            "a1",
            Role::Assistant,
            1,
            "OK, I'll use PostgreSQL because it supports JSONB. We decided to skip Redis. \
             Here is some analysis. Next step: blocked on DBA access.",
        ),
        msg("u2", Role::User, 2, "Great, thanks. Could you also add an index later? TODO maybe rename the table later."),
        msg("a2", Role::Assistant, 2, "Steps:\n- create schema\n- add index\n\nSome prose.\n1. first\n2. second\n```\n- not a list\n- really not\n```"),
        msg("u3", Role::User, 3, "Deploy it to staging by Friday. Then tell me."),
        msg("u4", Role::User, 3, "thanks!"),
    ];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(s.decisions.len(), 2, "{:?}", s.decisions);
    assert_eq!(s.decisions[0].decision, "OK, I'll use PostgreSQL");
    assert_eq!(s.decisions[0].rationale, "it supports JSONB");
    assert_eq!(s.decisions[0].turn, 1);
    assert_eq!(s.decisions[1].decision, "We decided to skip Redis.");
    // The first question was answered by a later assistant message; the blocked
    // item is high priority; the TODO is low.
    let descs: Vec<&str> = s
        .open_items
        .iter()
        .map(|o| o.description.as_str())
        .collect();
    assert!(
        !descs.iter().any(|d| d.contains("What database")),
        "{descs:?}"
    );
    let blocked = s
        .open_items
        .iter()
        .find(|o| o.description.contains("blocked on DBA"))
        .expect("blocked item");
    assert_eq!(blocked.priority, Priority::High);
    assert_eq!(blocked.context, "assistant, turn 1");
    let todo = s
        .open_items
        .iter()
        .find(|o| o.description.starts_with("TODO"))
        .expect("todo");
    assert_eq!(todo.priority, Priority::Low);
    assert!(s.facts.contains(&"It must run on-prem.".to_string()));
    assert!(s
        .facts
        .contains(&"Deploy it to staging by Friday. Then tell me.".to_string()));
    // A short message after the person's own request adds to it.
    assert_eq!(
        s.current_task.as_deref(),
        Some("Deploy it to staging by Friday. Then tell me. (then \"thanks!\")")
    );
    assert_eq!(s.current_plan, vec!["first", "second"]);
}

#[test]
fn unanswered_question_is_open() {
    let msgs = vec![
        msg("a", Role::Assistant, 1, "Done."),
        msg("u", Role::User, 2, "Which region is cheapest?"),
    ];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(s.open_items.len(), 1);
    assert_eq!(s.open_items[0].description, "Which region is cheapest?");
    assert_eq!(s.open_items[0].context, "user, turn 2");
    assert_eq!(s.current_task.as_deref(), Some("Which region is cheapest?"));
}

#[test]
fn prior_task_and_plan_carry_when_span_has_none() {
    let first = vec![
        msg("u", Role::User, 1, "Migrate the users table."),
        msg("a", Role::Assistant, 1, "Plan:\n1. dump\n2. load"),
    ];
    let s1 = run(&first, &[], BIG).expect("fits");
    let s2 = run(
        &[tool("t", 2, "ls", Outcome::Success, "a b", json!({}))],
        &[&s1],
        BIG,
    )
    .expect("fits");
    assert_eq!(s2.current_task.as_deref(), Some("Migrate the users table."));
    assert_eq!(s2.current_plan, vec!["dump", "load"]);
}

#[test]
fn code_fences_are_not_facts() {
    let msgs = vec![msg(
        "u",
        Role::User,
        1,
        "Look:\n```\n// must never be null\nlet x = 1;\n```\nthat's it",
    )];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert!(s.facts.is_empty(), "{:?}", s.facts);
}

#[test]
fn long_facts_are_capped() {
    let long = format!("Never {}", "touch the cluster ".repeat(50));
    let s = run(&[msg("u", Role::User, 1, &long)], &[], BIG).expect("fits");
    assert_eq!(s.facts.len(), 1);
    assert!(s.facts[0].chars().count() <= FACT_MAX_CHARS);
    assert!(s.facts[0].starts_with("Never touch the cluster"));
}

#[test]
fn empty_input() {
    let span = SpanReference {
        message_ids: vec![],
        first_turn: 0,
        last_turn: 0,
    };
    let req = SummaryRequest {
        span: span.clone(),
        messages: &[],
        prior: &[],
        max_chars: 100,
        rereads_prior: false,
        scans: None,
        digests: None,
    };
    let s = ExtractiveSummarizer.summarize(&req).expect("empty fits");
    assert_eq!(s, StructuredSummary::empty(span.clone()));
    assert_eq!(s.render_as_message(), "[Summary v3]");
    // Below the size of an empty summary nothing smaller exists: the empty
    // summary is the answer, never an error.
    let tiny = SummaryRequest {
        max_chars: 3,
        ..req
    };
    assert_eq!(ExtractiveSummarizer.summarize(&tiny), Ok(s));
}

/// Smallest cap the fitting always meets: an empty summary saying how many
/// entries were left out.
const FLOOR_CHARS: usize = 64;

#[test]
fn size_cap_leaves_out_the_least_valuable_first() {
    let mut msgs = vec![msg(
        "u0",
        Role::User,
        0,
        "Never delete production data. We should keep logs tidy.",
    )];
    for c in 0..6 {
        msgs.extend(cycle_messages(c));
    }
    let full = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(full.omitted, 0);
    let constraints: Vec<&String> = full.facts.iter().filter(|f| is_constraint(f)).collect();
    assert!(!constraints.is_empty());
    let mut trimmed = 0;
    for max in (0..full.render_as_message().len() + 10).step_by(7) {
        let s = run(&msgs, &[], max).expect("never fails");
        if max >= FLOOR_CHARS {
            assert!(s.render_as_message().len() <= max, "max {max}");
        }
        let lost_constraint = constraints.iter().any(|c| !s.facts.contains(c));
        if lost_constraint {
            // A user's constraint goes only after every decision and every
            // tool outcome, which are worth less.
            assert!(s.decisions.is_empty(), "max {max}: {s:#?}");
            assert!(s.tool_outcomes.is_empty(), "max {max}: {s:#?}");
        }
        if s != full {
            trimmed += 1;
            assert!(
                s.omitted > 0,
                "max {max}: entries left out without saying so"
            );
            assert!(s.render_as_message().contains("left out for size"));
        }
    }
    assert!(trimmed > 10, "{trimmed}");
}

#[test]
fn a_specific_constraint_outranks_a_generic_one() {
    let msgs = vec![msg(
        "u",
        Role::User,
        1,
        "Never be sloppy.\n\nAlways be careful.\n\nThe monthly budget is capped at $3,750 for ORD-58213.",
    )];
    let full = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(full.facts.len(), 3, "{full:#?}");
    let mut only = StructuredSummary::empty(full.span.clone());
    only.facts = vec![full.facts[2].clone()];
    // The two generic rules, the current task and the quote of the whole
    // message are left out; the id is still spelled out in the kept fact,
    // so dropping its reference loses nothing and is not counted.
    only.omitted = 4;
    let cap = only.render_as_message().len();
    let s = run(&msgs, &[], cap).expect("never fails");
    assert_eq!(s.facts, only.facts, "{s:#?}");
    assert!(s.requests.is_empty(), "{s:#?}");
    assert_eq!(s.omitted, 4);
}

#[test]
fn merge_dedups_facts_keeping_prior_first() {
    let span = SpanReference {
        message_ids: vec!["x".into()],
        first_turn: 0,
        last_turn: 0,
    };
    let mut a = StructuredSummary::empty(span.clone());
    a.facts = vec!["Never delete production data.".into(), "Use UTC.".into()];
    let mut b = StructuredSummary::empty(span.clone());
    b.facts = vec![
        "never delete  production data".into(),
        "Budget is $1000".into(),
    ];
    let m = merge_summaries(span, &[&a], &b);
    assert_eq!(
        m.facts,
        vec![
            "Never delete production data.",
            "Use UTC.",
            "Budget is $1000"
        ]
    );
}

// ---------------------------------------------------------------- property test

const POOL: &[&str] = &[
    "The user prefers Python.",
    "The budget is $1000.",
    "Never delete production data.",
    "We should add caching.",
    "I'll refactor the parser because it is slow.",
    "Let's ship on Monday.",
    "What is the status of ticket 42?",
    "TODO: write docs.",
    "Blocked on legal review.",
    "The weather is nice.",
    "1. step one\n2. step two",
    "Please make sure to always run tests.",
    "```\nmust not parse\n```",
];

fn arb_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(POOL).prop_map(String::from),
            1 => "[a-zA-Z$ .?!\n]{0,60}",
        ],
        0..6,
    )
    .prop_map(|v| v.join(" "))
}

fn arb_message() -> impl Strategy<Value = Message> {
    (0u8..5, 0u32..20, arb_text(), any::<bool>()).prop_map(|(r, turn, text, ok)| {
        let role = [
            Role::System,
            Role::Developer,
            Role::User,
            Role::Assistant,
            Role::Tool,
        ][r as usize];
        if role == Role::Tool {
            let outcome = if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            tool("t", turn, "tool_x", outcome, &text, json!({"id": turn}))
        } else {
            msg("m", role, turn, &text)
        }
    })
}

fn arb_summary() -> impl Strategy<Value = StructuredSummary> {
    (
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(POOL).prop_map(String::from),
                "[a-zA-Z0-9$ ]{1,50}",
            ],
            0..8,
        ),
        prop::collection::vec("[a-z ]{1,40}", 0..4),
        prop::collection::vec(("[a-z_]{1,10}", any::<bool>()), 0..5),
        prop::option::of("[a-z ]{1,40}"),
    )
        .prop_map(|(facts, decisions, tools, task)| {
            let span = SpanReference {
                message_ids: vec!["p".into()],
                first_turn: 0,
                last_turn: 0,
            };
            let mut s = StructuredSummary::empty(span);
            s.facts = facts;
            s.decisions = decisions
                .into_iter()
                .enumerate()
                .map(|(i, d)| Decision {
                    decision: d,
                    rationale: String::new(),
                    turn: i as u32,
                    timestamp: None,
                })
                .collect();
            s.tool_outcomes = tools
                .into_iter()
                .map(|(name, ok)| ToolOutcome {
                    tool_name: name,
                    outcome: if ok {
                        Outcome::Success
                    } else {
                        Outcome::Failure
                    },
                    key_fields: BTreeMap::new(),
                    error_message: (!ok).then(|| "boom".to_string()),
                })
                .collect();
            s.current_task = task;
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]

    #[test]
    fn prop_cap_and_prior_facts(
        msgs in prop::collection::vec(arb_message(), 0..12),
        priors in prop::collection::vec(arb_summary(), 0..3),
        max_chars in 0usize..2500,
    ) {
        let msgs: Vec<Message> = msgs
            .into_iter()
            .enumerate()
            .map(|(i, mut m)| { m.id = format!("m{i}"); m })
            .collect();
        let prior: Vec<&StructuredSummary> = priors.iter().collect();
        let refs: Vec<&Message> = msgs.iter().collect();
        let span = span_of(&msgs);
        let result = run(&msgs, &prior, max_chars);
        let again = run(&msgs, &prior, max_chars);
        prop_assert_eq!(&result, &again);

        let merged = merge_summaries(span.clone(), &prior, &extract(span.clone(), &refs, None, None));
        let s = result.expect("the extractive summarizer never fails");
        if max_chars >= FLOOR_CHARS {
            prop_assert!(s.render_as_message().len() <= max_chars);
        }
        if merged.render_as_message().len() <= max_chars {
            // Everything fits: nothing is left out.
            prop_assert_eq!(&s, &merged);
        } else {
            // Something was left out and said so, unless nothing could be
            // (an empty summary over a cap smaller than its header).
            prop_assert!(
                s.omitted > 0
                    || s.tool_outcomes.len() < merged.tool_outcomes.len()
                    || s == merged
            );
        }
        // Facts are left out least valuable first: by their score and what
        // the span came back to.
        let echoes = Echoes::of(&refs);
        let value = |f: &String| fact_score(f) + echoes.bonus(f);
        let kept: HashSet<&String> = s.facts.iter().collect();
        let min_kept = s.facts.iter().map(value).min();
        let max_lost = merged
            .facts
            .iter()
            .filter(|f| !kept.contains(f))
            .map(value)
            .max();
        if let (Some(k), Some(l)) = (min_kept, max_lost) {
            prop_assert!(l <= k, "lost a fact scored {} but kept one scored {}", l, k);
        }
        let _ = &refs;
    }
}

/// The current task is the latest request a person made; a short reply
/// after it is shown with what it answers. Cases from unrelated kinds of
/// text: a coding session, a support chat, a CJK exchange.
#[test]
fn current_task_is_the_latest_request_and_what_a_short_reply_answers() {
    let task = |msgs: &[Message]| {
        run(msgs, &[], BIG)
            .expect("fits")
            .current_task
            .unwrap_or_default()
    };
    // A typo'd "continue" after a long assistant turn.
    let coding = [
        msg(
            "u1",
            Role::User,
            1,
            "Port the CSV importer to the streaming parser and keep the old flags working.",
        ),
        msg(
            "a1",
            Role::Assistant,
            1,
            "I ported the reader. The flag --legacy-quotes still needs a shim. Shall I add it now?",
        ),
        msg("u2", Role::User, 2, "comtinue"),
    ];
    let t = task(&coding);
    assert!(t.starts_with("Port the CSV importer"), "{t}");
    assert!(t.contains("\"comtinue\""), "{t}");
    assert!(t.contains("Shall I add it now?"), "{t}");

    // A number picks an option of a numbered list.
    let options = [
        msg("u1", Role::User, 1, "The nightly export keeps timing out, what can we do?"),
        msg("a1", Role::Assistant, 1, "Three ways out:\n1. Raise the timeout to 20 min\n2. Split the export by region\n3) Move it to the replica at db-ro-2\nWhich one?"),
        msg("u2", Role::User, 2, "3"),
    ];
    let t = task(&options);
    assert!(t.starts_with("The nightly export keeps timing out"), "{t}");
    assert!(t.contains("3. Move it to the replica at db-ro-2"), "{t}");
    assert!(!t.contains("Split the export"), "{t}");

    // A short message that names something is a request of its own.
    let named = [
        msg("u1", Role::User, 1, "Review the retry logic please."),
        msg("a1", Role::Assistant, 1, "Reviewed; two issues found."),
        msg("u2", Role::User, 2, "fix src/retry.rs"),
    ];
    assert_eq!(task(&named), "fix src/retry.rs");

    // CJK text has no spaces: a sentence is long in characters, a reply is not.
    let cjk = [
        msg("u1", Role::User, 1, "请修复登录页面在手机上显示错误的问题"),
        msg(
            "a1",
            Role::Assistant,
            1,
            "我找到了原因，是样式表的问题。要我现在提交修改吗？",
        ),
        msg("u2", Role::User, 2, "好的"),
    ];
    let t = task(&cjk);
    assert!(t.starts_with("请修复登录页面"), "{t}");
    assert!(
        t.contains("\"好的\"") && t.contains("要我现在提交修改吗"),
        "{t}"
    );

    // Only a reply in the span: it and what it answers.
    let only_reply = [
        msg(
            "a1",
            Role::Assistant,
            1,
            "Want me to open the pull request?",
        ),
        msg("u1", Role::User, 2, "go for it"),
    ];
    assert_eq!(
        task(&only_reply),
        "\"go for it\", answering: Want me to open the pull request?"
    );
}

/// What later turns come back to counts: a term two turns name is an
/// echo, one that nearly every turn names is not, and tool output never
/// echoes (a log repeating a word is not the conversation depending on it).
#[test]
fn echoes_count_turns_that_name_a_term_again() {
    let log = tool(
        "t1",
        2,
        "tail",
        Outcome::Success,
        "kestrel kestrel kestrel replica lag",
        json!({}),
    );
    let msgs = [
        msg(
            "u1",
            Role::User,
            1,
            "Move the nightly job to the kestrel cluster.",
        ),
        msg(
            "a1",
            Role::Assistant,
            1,
            "Scheduled on kestrel; the job config is job.yaml.",
        ),
        log,
        msg("u2", Role::User, 2, "Does the job still run?"),
        msg("u3", Role::User, 3, "And is kestrel fine on disk?"),
        msg("u4", Role::User, 4, "Check the job once more."),
        msg("u5", Role::User, 5, "The job is noisy; the pager woke me."),
        msg("u6", Role::User, 6, "One more job question."),
        msg("u7", Role::User, 7, "Last job thing, promise."),
        msg("u8", Role::User, 8, "Thanks."),
    ];
    let refs: Vec<&Message> = msgs.iter().collect();
    let e = Echoes::of(&refs);
    // "kestrel": turns 1 and 3 (the log in turn 2 does not count).
    assert_eq!(e.bonus("the kestrel cluster"), ECHO_POINTS);
    // "job" is too short to count; "replica" only the log names; "pager" once.
    assert_eq!(e.bonus("job replica pager"), 0);
    // Every term counted once however often the entry repeats it.
    assert_eq!(e.bonus("kestrel Kestrel KESTREL"), ECHO_POINTS);
    assert_eq!(Echoes::default().bonus("kestrel"), 0);
}

/// Of two facts alike in form, the one the conversation came back to is
/// left out last. Prose, a code review and a log-reading session: the same
/// behaviour, whatever the wording. The echoed fact is listed second, where
/// a tie would drop it first.
#[test]
fn a_fact_the_conversation_refers_back_to_outlives_its_twin() {
    let cases = [
        (
            "The spare lives at /srv/spare/bravo.",
            "The mirror lives at /srv/mirror/alpha.",
            "Is alpha synced yet?",
        ),
        (
            "encode_body in src/wire/body.rs pads twice.",
            "parse_header in src/wire/frame.rs drops the flags.",
            "Let me fix parse_header first.",
        ),
        (
            "The log shows ERR_DISK_FULL on node-22.",
            "The log shows ERR_LEASE_LOST on node-14.",
            "Why would ERR_LEASE_LOST happen under load?",
        ),
    ];
    for (twin, echoed, later) in cases {
        let mut msgs = vec![msg("u1", Role::User, 1, &format!("{twin} {echoed}"))];
        for turn in 2..9u32 {
            msgs.push(msg(&format!("u{turn}"), Role::User, turn, "Any news?"));
        }
        msgs.push(msg("u9", Role::User, 9, later));
        let refs: Vec<&Message> = msgs.iter().collect();
        let mut s = StructuredSummary::empty(span_of(&msgs));
        s.facts = vec![twin.to_string(), echoed.to_string()];
        let at = |order: &[Entry], fact: usize| {
            order
                .iter()
                .position(|e| matches!(e, Entry::Fact(i) if *i == fact))
                .expect("listed")
        };
        let plain = removal_order(&s, &Echoes::default());
        assert!(
            at(&plain, 1) < at(&plain, 0),
            "{echoed}: a tie drops the later fact first"
        );
        let order = removal_order(&s, &Echoes::of(&refs));
        assert!(
            at(&order, 0) < at(&order, 1),
            "{echoed} left out before {twin}"
        );
    }
}

/// A rule stated in several sentences is one fact, without the greeting
/// before it or the thanks after it.
#[test]
fn a_statement_is_one_fact_without_its_greeting() {
    let msgs = vec![msg(
        "u",
        Role::User,
        1,
        "Hi there! Only Python 3.11. No external network calls from the sandbox. Thanks!",
    )];
    let s = run(&msgs, &[], BIG).expect("fits");
    assert_eq!(
        s.facts,
        vec!["Only Python 3.11. No external network calls from the sandbox.".to_string()]
    );
}

/// A later statement of the same subject with a new value replaces the
/// earlier, in facts and in quotes; a repeated quote is kept once, at its
/// latest; a tool's repeated errors are all kept, and statements of other
/// subjects stay.
#[test]
fn a_later_value_replaces_the_earlier() {
    let msgs = vec![
        msg(
            "u1",
            Role::User,
            1,
            "The spend cap for the project is $300 total.",
        ),
        msg(
            "u2",
            Role::User,
            2,
            "Run the smoke tests against the staging cluster.",
        ),
        msg(
            "u3",
            Role::User,
            3,
            "The spend cap for the conference is $200 total.",
        ),
        msg(
            "u4",
            Role::User,
            4,
            "Run the smoke tests against the staging cluster.",
        ),
        msg(
            "u5",
            Role::User,
            5,
            "The spend cap for the project is $450 total.",
        ),
    ];
    let s = run(&msgs, &[], BIG).expect("fits");
    let text = s.render_as_message();
    assert!(!text.contains("$300"), "{text}");
    assert!(text.contains("$450") && text.contains("$200"), "{text}");
    assert_eq!(text.matches("Run the smoke tests").count(), 1, "{text}");
    assert!(text.contains("(turn 4) Run the smoke tests"), "{text}");
    // Across summaries too: the prior's value is the stale one.
    let later = vec![msg(
        "u6",
        Role::User,
        6,
        "The spend cap for the conference is $250 total.",
    )];
    let next = run(&later, &[&s], BIG).expect("fits");
    let text = next.render_as_message();
    assert!(!text.contains("$200") && text.contains("$250"), "{text}");
    assert!(text.contains("$450"), "{text}");
    let mut tool_facts = StructuredSummary::empty(s.span.clone());
    tool_facts.facts = vec![
        "tool deploy: \"exit 1 at step 3 of the rollout\"".into(),
        "tool deploy: \"exit 1 at step 7 of the rollout\"".into(),
    ];
    let merged = merge_summaries(s.span.clone(), &[], &tool_facts);
    assert_eq!(merged.facts.len(), 2, "{:?}", merged.facts);
}

/// compactd's own summary handed back as an assistant message (a framework
/// that stores the compacted prompt as its history) is read as the summary
/// it is: its rules stay the user's, whole, and merge with what follows.
#[test]
fn a_summary_handed_back_is_read_not_resummarized() {
    let first = vec![
        msg(
            "u1",
            Role::User,
            1,
            "Only Python 3.11. No external network calls from the sandbox.",
        ),
        msg(
            "u2",
            Role::User,
            2,
            "The spend cap is $300 total for the whole project.",
        ),
    ];
    let s = run(&first, &[], BIG).expect("fits");
    let text = format!(
        "[Context Summary - Turns 1-2 · originals: art_1]\n{}",
        s.render_as_message()
    );
    let back = vec![
        msg("b", Role::Assistant, 1, &text),
        msg(
            "u3",
            Role::User,
            2,
            "The spend cap is $450 total for the whole project.",
        ),
    ];
    let again = run(&back, &[], BIG).expect("fits");
    assert!(
        again
            .facts
            .contains(&"Only Python 3.11. No external network calls from the sandbox.".to_string()),
        "{:?}",
        again.facts
    );
    assert!(
        !again.facts.iter().any(|f| f.starts_with("assistant: ")),
        "{:?}",
        again.facts
    );
    let rendered = again.render_as_message();
    assert!(
        !rendered.contains("$300") && rendered.contains("$450"),
        "{rendered}"
    );
    assert!(!rendered.contains("Context Summary"), "{rendered}");
}
