//! Property tests of the pipeline's invariants over random threads: never over
//! budget, never an orphaned tool call or result in any output form, protected
//! messages never removed, every eviction archived where the prompt names it,
//! deterministic rendering, idempotent normalization.

mod common;

use common::{run_counted, Harness};
use compactd::app::AppError;
use compactd::model::{Content, Role};
use compactd::provider::{anthropic, openai_chat};
use compactd::reduce::CompactError;
use compactd::render::{artifact_ids_in, delimit_user, Origin, ProviderOptions};
use compactd_testkit::synth::{thread, SynthParams};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn params() -> impl Strategy<Value = SynthParams> {
    (any::<u64>(), 1u32..30, 0.0f64..1.0, 1u32..500, 0u32..3).prop_map(
        |(seed, turns, tool_density, max_output_lines, protected)| SynthParams {
            seed,
            turns,
            tool_density,
            max_output_lines,
            protected,
        },
    )
}

/// The pipeline's invariants on one random thread; `Ok(true)` when it
/// compacted and rendered, `Ok(false)` when it was refused for budget (and
/// the core agrees).
fn compaction_invariants(
    p: SynthParams,
    max_input: u32,
    keep: u32,
    pairs: u32,
) -> Result<bool, TestCaseError> {
    let t = thread(&p);
    let mut h = Harness::default();
    h.policy.keep_recent_turns = keep;
    h.policy.keep_tool_io_pairs = pairs;
    match h.compact(&t, max_input, None) {
        Ok(out) => {
            let report = &out.report;
            // Never over budget: the exact count after binding real ids.
            prop_assert!(
                out.tokens.total <= report.budget.hard_limit,
                "{} > {}",
                out.tokens.total,
                report.budget.hard_limit
            );
            prop_assert!(out.tokens.total <= out.report.tokens_after);
            // Never an orphan, in any output form.
            let opts = ProviderOptions {
                model: "gpt-4o".into(),
                max_output_tokens: None,
                ..Default::default()
            };
            let oa = openai_chat::to_openai(&out.request, &opts);
            prop_assert!(
                openai_chat::check_pairing(&oa).is_ok(),
                "{:?}",
                openai_chat::check_pairing(&oa)
            );
            let an = anthropic::to_anthropic(&out.request, &opts);
            prop_assert!(
                anthropic::check_structure(&an).is_ok(),
                "{:?}",
                anthropic::check_structure(&an)
            );
            // Protected and never-prune messages are rendered verbatim (a
            // user's words in their delimiting block).
            for m in &t.messages {
                if m.metadata.protected || matches!(m.role, Role::System | Role::Developer) {
                    let rendered = out.request.messages.iter().find(|r| r.source_id == m.id);
                    let expected = match m.role {
                        Role::User if m.tool_result.is_none() => delimit_user(m),
                        _ => m.content.clone(),
                    };
                    prop_assert!(
                        rendered
                            .is_some_and(|r| r.origin == Origin::Verbatim && r.content == expected),
                        "protected message {} lost",
                        m.id
                    );
                }
            }
            // Every eviction is retrievable: each message renders verbatim
            // or is held by an artifact whose id the prompt names.
            let named: std::collections::BTreeSet<String> = out
                .request
                .messages
                .iter()
                .flat_map(|r| {
                    artifact_ids_in(&r.content.text())
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect();
            let held: std::collections::BTreeSet<&str> = out
                .artifacts
                .iter()
                .filter(|a| named.contains(&a.artifact_id))
                .flat_map(|a| a.message_ids.iter().map(String::as_str))
                .collect();
            for m in &t.messages {
                let verbatim = out
                    .request
                    .messages
                    .iter()
                    .any(|r| r.source_id == m.id && r.origin == Origin::Verbatim);
                prop_assert!(
                    verbatim || held.contains(m.id.as_str()),
                    "message {} left the prompt without an archive the prompt names",
                    m.id
                );
            }
            // Deterministic rendering.
            let again = h.render(&t, &out.plan);
            prop_assert_eq!(
                serde_json::to_string(&again).unwrap(),
                serde_json::to_string(&out.request).unwrap()
            );
            // Normalization is idempotent on pipeline plans.
            let mut plan = out.plan.clone();
            prop_assert!(plan.normalize().is_empty());
            prop_assert_eq!(&plan, &out.plan);
            prop_assert!(plan
                .validate_against(&t, &h.policy.roles_never_prune)
                .is_ok());
            Ok(true)
        }
        Err(AppError::InsufficientBudget { .. }) => {
            // The core agrees, and its numbers say why.
            match h.core_compact(&t, max_input, false) {
                Err(CompactError::InsufficientBudget {
                    required, limit, ..
                }) => {
                    prop_assert!(required > limit);
                }
                Err(e) => prop_assert!(false, "the core failed otherwise: {e}"),
                Ok(_) => prop_assert!(false, "the core fits what the app refused"),
            }
            Ok(false)
        }
        Err(e) => Err(TestCaseError::fail(format!("unexpected error {e}"))),
    }
}

#[test]
fn compaction_invariants_hold() {
    run_counted(
        "compaction invariants",
        (params(), 1_500u32..40_000, 1u32..6, 0u32..4),
        96,
        0.6,
        |(p, max_input, keep, pairs)| compaction_invariants(p, max_input, keep, pairs),
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: compactd_testkit::proptest_cases(96), .. ProptestConfig::default() })]

    #[test]
    fn a_fitting_thread_is_left_alone(p in params()) {
        let t = thread(&p);
        let h = Harness::default();
        let out = h.compact(&t, 2_000_000, None).unwrap();
        prop_assert!(out.plan.is_empty());
        prop_assert!(!out.report.triggered);
        prop_assert!(out.request.messages.iter().all(|m| m.origin == Origin::Verbatim));
        prop_assert_eq!(out.request.messages.len(), t.messages.len());
    }
}

#[test]
fn protected_content_beyond_the_budget_is_insufficient_budget() {
    let mut t = thread(&SynthParams::default());
    std::sync::Arc::make_mut(&mut t.messages[1])
        .metadata
        .protected = true;
    std::sync::Arc::make_mut(&mut t.messages[1]).content =
        Content::Text("constraint ".repeat(5_000));
    let h = Harness::default();
    match h.core_compact(&t, 3_000, false) {
        Err(CompactError::InsufficientBudget { pinned, limit, .. }) => assert!(pinned > limit),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a protected message larger than the budget cannot fit"),
    }
}

/// Secrets of every detector class, each in the text it is planted in.
const SECRETS: &[(&str, &str)] = &[
    ("AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("Pa55w0rd-db9", "postgres://app:Pa55w0rd-db9@db.internal:5432/main"),
    ("ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U", "token ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U"),
    ("glpat-a1B2c3D4e5F6g7H8i9J0", "PRIVATE-TOKEN: glpat-a1B2c3D4e5F6g7H8i9J0"),
    ("xoxb-2048-1024-AbCdEfGhIjKlMnOp", "SLACK=xoxb-2048-1024-AbCdEfGhIjKlMnOp"),
    ("sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4", "stripe sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4"),
    ("sk-proj-abcdefghijklmnop1234", "OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234"),
    ("eyJzdWIiOiIxMjM0NTY3ODkwIn0", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"),
    ("4111 1111 1111 1111", "card 4111 1111 1111 1111 exp 12/29"),
];

/// Where a secret is planted.
#[derive(Debug, Clone, Copy)]
enum Place {
    UserText,
    ArgumentValue,
    ArgumentUnderSecretKey,
    ResultAcrossLines,
    NestedJsonUnderSecretKey,
    KeyField,
}

fn place() -> impl Strategy<Value = Place> {
    prop_oneof![
        Just(Place::UserText),
        Just(Place::ArgumentValue),
        Just(Place::ArgumentUnderSecretKey),
        Just(Place::ResultAcrossLines),
        Just(Place::NestedJsonUnderSecretKey),
        Just(Place::KeyField),
    ]
}

proptest! {
    // A fixed count: each case runs the whole pipeline twice, and the long
    // run's 2,000 cases would add minutes for little (the placements and
    // classes are few; the detectors have their own unit tests).
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Wherever a secret of any class sits in the compacted part of a
    /// thread, no plan record and no artifact compactd keeps holds it raw.
    #[test]
    fn no_secret_reaches_a_plan_or_an_artifact(
        class in 0..SECRETS.len(),
        at in place(),
        turns in 3u32..8,
        lines in 20usize..200,
        ratio in 2u32..8,
    ) {
        use compactd::model::{Outcome as ToolOutcomeKind, ToolContent};
        let (secret, text) = SECRETS[class];
        let mut b = common::ThreadBuilder::default();
        b.user(if matches!(at, Place::UserText) { text } else { "Look at the service." });
        let args = match at {
            Place::ArgumentValue => serde_json::json!({"path": "/etc/app.env", "note": text}),
            Place::ArgumentUnderSecretKey => serde_json::json!({"path": "/etc/app.env", "db_password": secret}),
            _ => serde_json::json!({"path": "/etc/app.env"}),
        };
        let logs = common::log_lines(lines);
        let output = match at {
            Place::ResultAcrossLines => ToolContent::Text(format!("{logs}\n{text}\n{logs}")),
            Place::NestedJsonUnderSecretKey => ToolContent::Text(
                serde_json::json!({"log": logs, "service": {"credentials": {"token": secret}}}).to_string(),
            ),
            _ => ToolContent::Text(logs.clone()),
        };
        b.tool("read_file", args, output, ToolOutcomeKind::Success, None);
        if matches!(at, Place::KeyField) {
            if let Some(env) = b.last().tool_result.as_mut() {
                env.key_fields.insert("api_key".into(), serde_json::json!(secret));
            }
        }
        b.assistant("I read it.");
        for t in 0..turns {
            b.user(&format!("Next question {t}?"));
            b.tool(
                "read_file",
                serde_json::json!({"n": t}),
                ToolContent::Text(common::log_lines(lines / 2 + 1)),
                ToolOutcomeKind::Success,
                None,
            );
            b.assistant("Done.");
        }
        let thread = b.build("planted");
        let h = Harness::default();
        let full = h.compact(&thread, 10_000_000, None).expect("fits").tokens.total;
        let out = match h.compact(&thread, (full / ratio).max(1200), None) {
            Ok(out) => out,
            // A budget the thread cannot be brought under is another test's.
            Err(AppError::InsufficientBudget { .. }) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        let plan = serde_json::to_string(&out.plan).expect("plan json");
        prop_assert!(!plan.contains(secret), "{secret} in the plan ({at:?})");
        for c in &out.contents {
            prop_assert!(!c.contains(secret), "{secret} in an artifact ({at:?})");
        }
    }
}
