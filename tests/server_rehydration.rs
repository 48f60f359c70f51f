//! Rehydration through gRPC: the sensitivity × permission matrix for the
//! explicit Rehydrate call and for Render's automatic injection of artifacts
//! the agent names; per-turn, per-artifact and reserve limits; cooldown; and
//! no rehydration loop over 20 simulated turns.

use crate::server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::transport::Channel;

type Client = pb::compaction_service_client::CompactionServiceClient<Channel>;

const LEVELS: [(pb::Sensitivity, &str); 4] = [
    (pb::Sensitivity::Public, "public"),
    (pb::Sensitivity::Internal, "internal"),
    (pb::Sensitivity::Confidential, "confidential"),
    (pb::Sensitivity::Restricted, "restricted"),
];

/// `big_thread` with its large tool result classified `s`.
fn classified_thread(id: &str, s: pb::Sensitivity) -> pb::Thread {
    let mut t = big_thread(id, 2000);
    t.messages[2].metadata = Some(pb::MessageMetadata {
        sensitivity: s as i32,
        ..Default::default()
    });
    t
}

/// Compacts `thread` so its big result is externalized; the artifact id.
async fn externalize(client: &mut Client, token: &str, thread: pb::Thread) -> String {
    let mut req = compact_req(thread, 8000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(authed(req, token)))
        .await
        .expect("compact")
        .into_inner();
    out.new_artifact_ids.first().cloned().expect("externalized")
}

/// `thread` plus a turn in which the user says `said`.
fn with_turn(mut thread: pb::Thread, said: &str) -> pb::Thread {
    let turn = thread.messages.last().map_or(1, |m| m.turn) + 1;
    thread
        .messages
        .push(text(&format!("u-extra-{turn}"), pb::Role::User, turn, said));
    thread
}

async fn render(
    client: &mut Client,
    token: &str,
    thread: pb::Thread,
    policy: pb::PolicyOverrides,
) -> pb::RenderResponse {
    within(client.render(authed(
        pb::RenderRequest {
            thread: Some(thread),
            compact_first: true,
            max_input_tokens: 8000,
            policy: Some(policy),
            ..Default::default()
        },
        token,
    )))
    .await
    .expect("render")
    .into_inner()
}

fn injected(r: &pb::RenderResponse) -> Vec<&pb::RenderedMessage> {
    r.messages
        .iter()
        .filter(|m| m.origin == pb::Origin::Rehydrated as i32)
        .collect()
}

fn report<'a>(r: &'a pb::RenderResponse, id: &str) -> &'a pb::RehydratedArtifact {
    r.rehydrated
        .iter()
        .find(|a| a.artifact_id == id)
        .unwrap_or_else(|| panic!("no report for {id}: {:?}", r.rehydrated))
}

#[tokio::test]
async fn sensitivity_and_permission_gate_explicit_and_automatic_reads() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let owner = token(
        "acme",
        &[
            "compact",
            "render",
            "rehydrate",
            "artifact:read:public",
            "artifact:read:internal",
            "artifact:read:confidential",
            "artifact:read:restricted",
        ],
    );
    for (level, name) in LEVELS {
        let thread_id = format!("t-{name}");
        let thread = classified_thread(&thread_id, level);
        let id = externalize(&mut client, &owner, thread.clone()).await;
        let needed = format!("artifact:read:{name}");
        let allowed = token("acme", &["compact", "render", "rehydrate", needed.as_str()]);
        // Every permission except the one this level needs.
        let others: Vec<String> = LEVELS
            .iter()
            .filter(|(_, n)| *n != name)
            .map(|(_, n)| format!("artifact:read:{n}"))
            .collect();
        let mut perms = vec!["compact", "render", "rehydrate"];
        perms.extend(others.iter().map(String::as_str));
        let denied = token("acme", &perms);

        // Explicit: exactly the matching permission reads it.
        let req = |t: &str| {
            authed(
                pb::RehydrateRequest {
                    thread_id: thread_id.clone(),
                    artifact_id: id.clone(),
                    max_tokens: 50_000,
                    ..Default::default()
                },
                t,
            )
        };
        let ok = within(client.rehydrate(req(&allowed)))
            .await
            .unwrap_or_else(|e| panic!("{name}: explicit read with {needed}: {e:?}"))
            .into_inner();
        assert!(ok.content.contains("INFO worker-"), "{name}");
        let e = within(client.rehydrate(req(&denied)))
            .await
            .expect_err("explicit read without the permission");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{name}: {e:?}");

        // Automatic: the agent names the artifact in its next turn.
        let next = with_turn(thread, &format!("Check {id} for batch 512 again."));
        let r = render(&mut client, &allowed, next.clone(), externalize_policy()).await;
        let a = report(&r, &id);
        assert!(a.auto, "{name}: {a:?}");
        match level {
            pb::Sensitivity::Public | pb::Sensitivity::Internal => {
                assert_eq!(a.blocked, 0, "{name}: {a:?}");
                assert!(!a.omitted, "{name}: {a:?}");
                let msgs = injected(&r);
                assert_eq!(msgs.len(), 1, "{name}");
                assert!(msgs[0].text.contains("INFO worker-"), "{name}");
                assert!(a.truncated, "{name}: the per-artifact cap applies");
            }
            _ => {
                assert_eq!(
                    a.blocked,
                    pb::RehydrationBlocked::Sensitivity as i32,
                    "{name}: even with {needed}, only an explicit read returns it"
                );
                assert!(a.omitted && injected(&r).is_empty(), "{name}");
            }
        }
        // Without the level's permission, or without `rehydrate`: blocked.
        let r = render(&mut client, &denied, next.clone(), externalize_policy()).await;
        let a = report(&r, &id);
        let expected = match level {
            pb::Sensitivity::Public | pb::Sensitivity::Internal => {
                pb::RehydrationBlocked::Permission
            }
            _ => pb::RehydrationBlocked::Sensitivity,
        };
        assert_eq!(a.blocked, expected as i32, "{name}: {a:?}");
        assert!(injected(&r).is_empty(), "{name}");
        let no_rehydrate = token("acme", &["compact", "render", "artifact:read:public"]);
        let r = render(&mut client, &no_rehydrate, next, externalize_policy()).await;
        assert_eq!(
            report(&r, &id).blocked,
            pb::RehydrationBlocked::Permission as i32,
            "{name}"
        );
    }
}

#[tokio::test]
async fn automatic_injection_respects_turn_limit_cap_reserve_and_cooldown() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    // Three artifacts on one thread: three big results, externalized.
    let mut thread = big_thread("t-limits", 600);
    for k in 2..=3u32 {
        let (c, r) = (format!("c{k}"), format!("t{k}"));
        let at = thread.messages.len();
        thread
            .messages
            .insert(at, call(&format!("a-{k}"), 4, &c, "read_file"));
        thread.messages.insert(
            at + 1,
            result(&r, 4, &c, "read_file", big_output(600 + k as usize)),
        );
        thread
            .messages
            .push(text(&format!("n{k}"), pb::Role::Assistant, 4, "Noted."));
    }
    let mut req = compact_req(thread.clone(), 8000);
    req.policy = Some(pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        ..externalize_policy()
    });
    let ids = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner()
        .new_artifact_ids;
    assert!(ids.len() >= 3, "{ids:?}");

    // Turn 5 names all three, one of them twice and one inside a word
    // (which does not count).
    let said = format!(
        "Compare {} with {} and {}; also {} again. xart_{}",
        ids[0],
        ids[1],
        ids[2],
        ids[0],
        &ids[1][4..]
    );
    let t5 = with_turn(thread.clone(), &said);
    let policy = pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        rehydration_reserve_tokens: Some(6000),
        ..externalize_policy()
    };
    let r = render(&mut client, &acme, t5.clone(), policy.clone()).await;
    assert_eq!(r.rehydrated.len(), 3, "{:?}", r.rehydrated);
    assert!(!report(&r, &ids[0]).omitted && !report(&r, &ids[1]).omitted);
    // Two per turn by default: the third is refused, and says why.
    assert_eq!(
        report(&r, &ids[2]).blocked,
        pb::RehydrationBlocked::TurnLimit as i32
    );
    // Each cut to the per-artifact cap (1500 by default).
    let tokens = r.tokens.expect("tokens");
    assert!(tokens.rehydrated <= 2 * 1600, "{tokens:?}");
    assert!(report(&r, &ids[0]).truncated);

    // A small reserve: the second gets only what the first left.
    let small = pb::PolicyOverrides {
        rehydration_reserve_tokens: Some(1700),
        ..policy.clone()
    };
    let r = render(&mut client, &acme, t5.clone(), small).await;
    let second = report(&r, &ids[1]);
    assert!(
        (second.omitted || second.truncated) && second.blocked == 0,
        "{second:?}"
    );
    assert!(r.tokens.expect("tokens").rehydrated <= 1700);

    // Turn 6 names the first again: cooldown (it was injected at turn 5).
    let t6 = with_turn(t5.clone(), &format!("What did {} say?", ids[0]));
    let r = render(&mut client, &acme, t6.clone(), policy.clone()).await;
    assert_eq!(
        report(&r, &ids[0]).blocked,
        pb::RehydrationBlocked::Cooldown as i32
    );
    assert!(injected(&r).is_empty());
    // Three quiet turns later it may come back.
    let mut t = t6;
    for _ in 0..3 {
        t = with_turn(t, "Carry on with the plan.");
    }
    let t10 = with_turn(t, &format!("Open {} once more.", ids[0]));
    let r = render(&mut client, &acme, t10, policy.clone()).await;
    assert_eq!(report(&r, &ids[0]).blocked, 0, "{:?}", r.rehydrated);
    assert_eq!(injected(&r).len(), 1);

    // Off for one request: nothing injected, nothing reported.
    let r = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(t5),
            compact_first: true,
            max_input_tokens: 8000,
            policy: Some(policy),
            auto_rehydrate: Some(false),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("render")
    .into_inner();
    assert!(r.rehydrated.is_empty() && injected(&r).is_empty());
}

/// An agent that keeps talking about an artifact for 20 turns while new
/// tool output keeps arriving: the artifact is injected once, the prompt
/// stays within budget every turn, and compaction never re-externalizes
/// what was just read back into a chain of new artifacts.
#[tokio::test]
async fn no_rehydration_loop_over_twenty_turns() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut thread = big_thread("t-loop", 2000);
    let first = externalize(&mut client, &acme, thread.clone()).await;
    let policy = externalize_policy();
    let mut injections = 0;
    let mut artifacts = std::collections::BTreeSet::from([first.clone()]);
    let mut archives = std::collections::BTreeSet::new();
    let start = thread.messages.last().map_or(1, |m| m.turn) + 1;
    for turn in start..start + 20 {
        let phrasing = [
            format!("Look at {first} and tell me about batch {turn}."),
            format!("Is {first} consistent with the new output?"),
            format!("Re-check the log ({first}) for errors."),
        ];
        thread.messages.push(text(
            &format!("u-{turn}"),
            pb::Role::User,
            turn,
            &phrasing[turn as usize % 3],
        ));
        let c = format!("c-{turn}");
        thread
            .messages
            .push(call(&format!("a-{turn}"), turn, &c, "read_file"));
        thread.messages.push(result(
            &format!("t-{turn}"),
            turn,
            &c,
            "read_file",
            big_output(150),
        ));
        thread.messages.push(text(
            &format!("b-{turn}"),
            pb::Role::Assistant,
            turn,
            &format!("I compared {first} with the output of turn {turn}."),
        ));
        let r = render(&mut client, &acme, thread.clone(), policy.clone()).await;
        let tokens = r.tokens.expect("tokens");
        assert!(tokens.total <= 8000, "turn {turn}: {tokens:?}");
        if !injected(&r).is_empty() {
            injections += 1;
        }
        if let Some(c) = &r.compaction {
            // Archives of what a summary absorbed are not copies of tool
            // output: they are counted apart.
            let plan = c.plan.as_ref().expect("plan");
            archives.extend(
                plan.summarizations
                    .iter()
                    .filter_map(|s| s.archive_artifact_id.clone()),
            );
            artifacts.extend(c.new_artifact_ids.iter().cloned());
        }
    }
    assert_eq!(
        injections, 1,
        "injected once, then held back by the cooldown"
    );
    // New artifacts only for the new tool output (one per turn at most),
    // never a copy of the rehydrated one.
    let copies = artifacts.difference(&archives).count();
    assert!(
        copies <= 21,
        "{copies} artifacts besides {} archives",
        archives.len()
    );
}

#[tokio::test]
async fn render_can_offer_the_read_artifact_tool() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    for format in [
        pb::OutputFormat::OpenaiChat,
        pb::OutputFormat::AnthropicMessages,
    ] {
        let r = within(client.render(authed(
            pb::RenderRequest {
                thread: Some(small_thread("t-tool")),
                compact_first: true,
                format: format as i32,
                read_artifact_tool: true,
                ..Default::default()
            },
            &acme,
        )))
        .await
        .expect("render")
        .into_inner();
        let body: serde_json::Value =
            serde_json::from_str(&r.provider_payload_json).expect("payload json");
        let tools = body["tools"].as_array().expect("tools");
        let tool = &tools[0];
        let (name, schema) = match format {
            pb::OutputFormat::OpenaiChat => {
                (&tool["function"]["name"], &tool["function"]["parameters"])
            }
            _ => (&tool["name"], &tool["input_schema"]),
        };
        assert_eq!(name, "read_artifact", "{format:?}: {tool}");
        assert_eq!(schema["required"][0], "artifact_id");
        assert_eq!(
            schema["properties"]["artifact_id"]["pattern"],
            "^art_[0-9a-f]{32}$"
        );
    }
}

/// An artifact is injected automatically when only the arguments of a
/// pending tool call name it (000-30): the user's words and the assistant's
/// text do not, the last assistant message's call does; the same call
/// without the id injects nothing.
#[tokio::test]
async fn a_pending_calls_arguments_naming_an_artifact_inject_it() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let thread = big_thread("t-call-args", 2000);
    let id = externalize(&mut client, &acme, thread.clone()).await;
    let with_call = |arguments: String| {
        let mut t = with_turn(thread.clone(), "Carry on with the plan.");
        let turn = t.messages.last().map_or(1, |m| m.turn);
        let mut pending = call("a-pending", turn, "c-pending", "grep_artifact");
        pending.tool_calls[0].arguments_json = arguments;
        t.messages.push(pending);
        t
    };
    // Pending calls are left out of the body; their arguments still count.
    let render_pending = |t: pb::Thread| {
        let req = authed(
            pb::RenderRequest {
                thread: Some(t),
                compact_first: true,
                max_input_tokens: 8000,
                policy: Some(externalize_policy()),
                omit_pending_calls: true,
                ..Default::default()
            },
            &acme,
        );
        let mut client = client.clone();
        async move {
            within(client.render(req))
                .await
                .expect("render")
                .into_inner()
        }
    };

    let named = with_call(format!(r#"{{"artifact_id":"{id}","pattern":"batch 512"}}"#));
    let r = render_pending(named).await;
    let a = report(&r, &id);
    assert!(a.auto, "{a:?}");
    assert_eq!(a.blocked, 0, "{a:?}");
    assert!(!a.omitted, "{a:?}");
    let msgs = injected(&r);
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].source_id, id);
    assert!(msgs[0].text.contains("INFO worker-"));

    // The same pending call without the id: nothing is read back.
    let unnamed = with_call(r#"{"pattern":"batch 512"}"#.into());
    let r = render_pending(unnamed).await;
    assert!(r.rehydrated.is_empty(), "{:?}", r.rehydrated);
    assert!(injected(&r).is_empty());
}
