//! Per-turn content of the caller's hooks (`RenderRequest.injections`):
//! placed next to the latest user message, after the history, paid from the
//! injection reserve that compaction leaves free, and a loud error naming
//! the hook when it does not fit. Compaction is never re-run for them.

use crate::server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::Code;

fn render(thread: pb::Thread, reserve: u32, injections: Vec<pb::Injection>) -> pb::RenderRequest {
    pb::RenderRequest {
        thread: Some(thread),
        compact_first: true,
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 6_000,
        system_prompt: Some("You are a careful agent.".into()),
        policy: Some(pb::PolicyOverrides {
            injection_reserve_tokens: Some(reserve),
            ..externalize_policy()
        }),
        injections,
        ..Default::default()
    }
}

fn hook(name: &str, text: &str) -> pb::Injection {
    pb::Injection {
        hook: name.into(),
        text: text.into(),
    }
}

#[tokio::test]
async fn hooks_content_goes_next_to_the_latest_user_message_within_the_reserve() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let memory = "User memory: prefers answers in bullet points.";
    let date = "Today is 2026-11-26.";
    let out = within(client.render(authed(
        render(
            big_thread("t-inj", 3000),
            400,
            vec![hook("memory", memory), hook("date", date)],
        ),
        &tok,
    )))
    .await
    .expect("render")
    .into_inner();
    let body: serde_json::Value = serde_json::from_str(&out.provider_payload_json).expect("body");
    let messages = body["messages"].as_array().expect("messages");
    let last_user = messages
        .iter()
        .rposition(|m| {
            said(m["content"].as_str().unwrap_or("")) == "Question number 4 about the log?"
        })
        .expect("the latest user message");
    // …memory, date, then the latest user message, in the order given;
    // only what came after that message follows.
    assert_eq!(messages[last_user - 2]["content"], memory);
    assert_eq!(messages[last_user - 1]["content"], date);
    assert_eq!(messages.len() - last_user, 2);
    let tokens = out.tokens.expect("tokens");
    assert!(tokens.total <= 6_000, "{}", tokens.total);
    // The same render without them is smaller by exactly what they cost,
    // and compaction did not run again for them: the same plan.
    let plain = within(client.render(authed(
        render(big_thread("t-inj", 3000), 400, Vec::new()),
        &tok,
    )))
    .await
    .expect("render")
    .into_inner();
    assert_eq!(plain.plan_version, out.plan_version);
    assert!(plain.tokens.expect("tokens").total < tokens.total);
    // The neutral form names them.
    let mut neutral = render(big_thread("t-inj", 3000), 400, vec![hook("memory", memory)]);
    neutral.format = pb::OutputFormat::Unspecified as i32;
    let out = within(client.render(authed(neutral, &tok)))
        .await
        .expect("render")
        .into_inner();
    let injected = out
        .messages
        .iter()
        .find(|m| m.origin == pb::Origin::Injected as i32)
        .expect("an injected message");
    assert_eq!(injected.source_id, "injection:memory");
}

#[tokio::test]
async fn a_hook_that_blows_the_reserve_is_refused_by_name() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let long = "context ".repeat(400);
    let e = within(client.render(authed(
        render(
            big_thread("t-inj2", 3000),
            300,
            vec![hook("date", "Today is 2026-11-26."), hook("rag", &long)],
        ),
        &tok,
    )))
    .await
    .expect_err("over the reserve");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("\"rag\""), "{}", e.message());
    let d = compactd::proto::status::ErrorDescription::of(&e);
    assert_eq!(d.field, "injections[1]");
    // Nothing of the kind is refused for an empty hook name either way.
    let e = within(client.render(authed(
        render(big_thread("t-inj3", 3000), 300, vec![hook(" ", "x")]),
        &tok,
    )))
    .await
    .expect_err("no hook name");
    assert_eq!(
        compactd::proto::status::ErrorDescription::of(&e).field,
        "injections[0].hook"
    );
}
