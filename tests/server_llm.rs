//! The LLM summarizer configured on the real server, called through gRPC:
//! the plan in the response names the LLM that wrote each summary, a
//! request's `summary_style` reaches the endpoint, a bad style is refused by
//! field, and an endpoint that would receive content in cleartext is refused
//! at start-up.

use crate::server_common;

use compactd::llm::{SummarizerKind, SummarizerSettings};
use compactd::proto::pb;
use compactd::provider::thread_from_json;
use compactd::settings::Settings;
use compactd::summarize::llm::Style;
use compactd_testkit::fake_llm::{Behavior, FakeLlm};
use serde_json::{json, Value};
use server_common::*;
use tonic::Code;

/// Tool-heavy turns with a constraint said in passing.
fn thread(id: &str) -> pb::Thread {
    let mut msgs = Vec::new();
    for t in 0..30 {
        let call = format!("c{t}");
        let ask = if t == 3 {
            "Keep refunds under 200 EUR without a manager's approval.".to_string()
        } else {
            format!("Check shipment batch {t} please.")
        };
        let log: String = (0..15)
            .map(|k| format!("batch {t} parcel {k} scanned at hub {} ok\n", 40 + k))
            .collect();
        msgs.push(json!({"role": "user", "content": ask}));
        msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "scan", "arguments": "{}"}}
        ]}));
        msgs.push(json!({"role": "tool", "tool_call_id": call, "content": log}));
        msgs.push(json!({"role": "assistant", "content": format!("Batch {t} is fine.")}));
    }
    let t = thread_from_json(&Value::Array(msgs), id)
        .expect("thread")
        .thread;
    pb::Thread::from(&t)
}

fn overrides(style: i32) -> pb::PolicyOverrides {
    pb::PolicyOverrides {
        enable_retention: Some(false),
        enable_compress: Some(false),
        enable_clear: Some(false),
        enable_externalize: Some(false),
        keep_recent_turns: Some(2),
        keep_recent_tokens: Some(1_500),
        summary_style: style,
        ..Default::default()
    }
}

#[tokio::test]
async fn the_plan_names_the_llm_and_the_requested_style_reaches_it() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let base_url = fake.base_url();
    let server = TestServer::start_with(|s| {
        s.summarizer = SummarizerSettings {
            kind: SummarizerKind::Llm,
            base_url,
            model: "summary-mini".into(),
            api_key_env: None,
            backoff_ms: 5,
            ..SummarizerSettings::default()
        };
    })
    .await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut req = compact_req(thread("t-llm"), 8_000);
    req.policy = Some(overrides(pb::SummaryStyle::DecisionLog as i32));
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    let expected = format!("llm:summary-mini:{}", Style::DecisionLog.prompt_version());
    assert!(
        plan.summarizations
            .iter()
            .any(|r| r.summarizer_id == expected),
        "{:?}",
        plan.summarizations
            .iter()
            .map(|r| &r.summarizer_id)
            .collect::<Vec<_>>()
    );
    let requests = fake.requests();
    assert!(!requests.is_empty());
    assert!(requests
        .iter()
        .all(|r| r.body["messages"][0]["content"] == Style::DecisionLog.template()));

    // An unknown style is refused by field, before anything is sent.
    let before = fake.request_count();
    let mut bad = compact_req(thread("t-bad"), 8_000);
    bad.policy = Some(overrides(99));
    let e = within(client.compact(authed(bad, &acme)))
        .await
        .expect_err("unknown style");
    assert_status(&e, Code::InvalidArgument, Some("policy.summary_style"));
    assert_eq!(fake.request_count(), before);
    server.stop().await.expect("clean stop");
}

#[test]
fn cleartext_to_a_remote_endpoint_is_refused_at_startup() {
    let mut s = Settings::default();
    s.auth.dev = true;
    s.summarizer = SummarizerSettings {
        kind: SummarizerKind::Llm,
        base_url: "http://llm.corp.example:8000/v1".into(),
        ..SummarizerSettings::default()
    };
    let e = s.validate().expect_err("refused");
    assert!(e.to_string().contains("summarizer.base_url"), "{e}");
    s.summarizer.base_url = "https://llm.corp.example/v1".into();
    assert!(s.validate().is_ok());
}
