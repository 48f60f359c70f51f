//! Golden prompts: the rendered request for a fixed thread and budget, in
//! each output form. Any byte change in rendering shows up as a snapshot diff.

use crate::common;

use common::Harness;
use compactd::provider::thread_from_json;
use compactd::provider::{anthropic, openai_chat};
use compactd::render::ProviderOptions;

fn incident() -> (Harness, compactd::model::Thread) {
    let text = include_str!("../examples/threads/incident.json");
    let input = thread_from_json(&serde_json::from_str(text).unwrap(), "incident").unwrap();
    let mut h = Harness::default();
    h.system = input.system.clone();
    (h, input.thread)
}

fn opts() -> ProviderOptions {
    ProviderOptions {
        model: "gpt-4o".into(),
        max_output_tokens: Some(1024),
        ..Default::default()
    }
}

#[test]
fn golden_neutral() {
    let (h, t) = incident();
    let out = h.compact(&t, 6_000, None).unwrap();
    // The fingerprint is an opaque hash: checked for stability below, not pinned.
    let mut plan = out.plan.clone();
    plan.fingerprint = "[fingerprint]".into();
    insta::assert_json_snapshot!("incident_plan", plan);
    insta::assert_json_snapshot!("incident_neutral", out.request);
}

#[test]
fn golden_openai() {
    let (h, t) = incident();
    let out = h.compact(&t, 6_000, None).unwrap();
    let body = openai_chat::to_openai(&out.request, &opts());
    openai_chat::check_pairing(&body).unwrap();
    insta::assert_json_snapshot!("incident_openai", body);
}

#[test]
fn golden_anthropic() {
    let (h, t) = incident();
    let out = h.compact(&t, 6_000, None).unwrap();
    let body = anthropic::to_anthropic(&out.request, &opts());
    anthropic::check_structure(&body).unwrap();
    insta::assert_json_snapshot!("incident_anthropic", body);
}

/// A budget tight enough that the old turns are summarized: the summary's
/// rendered form (sections, references, the archive it names) is pinned.
#[test]
fn golden_summary() {
    let (mut h, t) = incident();
    h.policy.rehydration_reserve_tokens = 0;
    let out = h.compact(&t, 1200, None).unwrap();
    assert!(
        !out.plan.summarizations.is_empty(),
        "the budget must force a summary"
    );
    let body = openai_chat::to_openai(&out.request, &opts());
    openai_chat::check_pairing(&body).unwrap();
    insta::assert_json_snapshot!("incident_summary_openai", body);
}

#[test]
fn golden_openai_import() {
    let text = include_str!("../examples/threads/openai_messages.json");
    let input = thread_from_json(&serde_json::from_str(text).unwrap(), "openai_messages").unwrap();
    let h = Harness::default();
    // Reserves count only when used: 1,500 tokens is room enough.
    let small = h.compact(&input.thread, 1_500, None).unwrap();
    assert!(small.tokens.total <= 1_500, "{:?}", small.tokens);
    // Below the smallest valid body (the last user message, one notice for
    // the rest): a clear error.
    assert!(matches!(
        h.compact(&input.thread, 30, None),
        Err(compactd::app::AppError::InsufficientBudget { .. })
    ));
    let out = h.compact(&input.thread, 4_000, None).unwrap();
    insta::assert_json_snapshot!(
        "openai_import_openai",
        openai_chat::to_openai(&out.request, &opts())
    );
}

#[test]
fn the_fingerprint_is_stable_and_content_sensitive() {
    let (h, t) = incident();
    let a = h.compact(&t, 6_000, None).unwrap().plan.fingerprint;
    let b = h.compact(&t, 6_000, None).unwrap().plan.fingerprint;
    assert_eq!(a, b);
    assert_eq!(a.len(), 64);
    let mut changed = t.clone();
    std::sync::Arc::make_mut(&mut changed.messages[5]).content =
        compactd::model::Content::Text("Which orders failed?".into());
    let c = h.compact(&changed, 6_000, None).unwrap().plan.fingerprint;
    assert_ne!(a, c);
    let d = h.compact(&t, 7_000, None).unwrap().plan.fingerprint;
    assert_ne!(a, d, "the budget is part of the fingerprint");
}
