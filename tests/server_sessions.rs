//! Append sessions through gRPC: a client sends only what it appended since
//! its last call; the server's copy of the thread (sealed in the data
//! directory) makes up the rest. Stale bases, errors about appended
//! messages, DeleteThread, and the unchanged prefix each render reports;
//! and a thread sent in full again, converted only where it changed.

use crate::server_common;

use compactd::proto::pb;
use compactd::proto::status::ErrorDescription;
use serde_json::value::RawValue;
use server_common::*;
use tonic::Code;

type Client = pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>;

const TOKEN_PERMS: &[&str] = &[
    "compact",
    "render",
    "rehydrate",
    "delete",
    "explain",
    "artifact:read:public",
    "artifact:read:internal",
];

/// A long agent session: turns of a question, a call, a sizeable result and
/// an answer.
fn turn(n: u32) -> Vec<pb::Message> {
    agent_turn(n, 40, "worker processed batch")
}

fn render_req(max_input_tokens: u32) -> pb::RenderRequest {
    pb::RenderRequest {
        compact_first: true,
        format: pb::OutputFormat::OpenaiChat as i32,
        max_input_tokens,
        system_prompt: Some("You are a careful operator.".into()),
        ..Default::default()
    }
}

async fn start(client: &mut Client, token: &str, thread: pb::Thread) -> pb::RenderResponse {
    let mut req = render_req(6_000);
    req.thread = Some(thread);
    req.start_session = true;
    within(client.render(authed(req, token)))
        .await
        .expect("start the session")
        .into_inner()
}

/// Starts session `id` with turn 1; its version.
async fn start_turn_one(client: &mut Client, token: &str, id: &str) -> u64 {
    let thread = pb::Thread {
        id: id.into(),
        messages: turn(1),
    };
    start(client, token, thread)
        .await
        .session
        .expect("state")
        .version
}

async fn append(
    client: &mut Client,
    token: &str,
    thread_id: &str,
    base_version: u64,
    messages: Vec<pb::Message>,
) -> Result<pb::RenderResponse, tonic::Status> {
    let mut req = render_req(6_000);
    req.append = Some(pb::ThreadAppend {
        thread_id: thread_id.into(),
        base_version,
        messages,
        ..Default::default()
    });
    within(client.render(authed(req, token)))
        .await
        .map(tonic::Response::into_inner)
}

/// The leading units two bodies share byte for byte, counted independently
/// of the server: head fields, then message elements.
fn shared_prefix_tokens(previous: &str, now: &str) -> u32 {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        model: &'a RawValue,
        #[serde(borrow, default)]
        tools: Option<&'a RawValue>,
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    let counter = compactd::tokens::counter_for_model("gpt-4o");
    let (a, b): (Body<'_>, Body<'_>) = (
        serde_json::from_str(previous).expect("body"),
        serde_json::from_str(now).expect("body"),
    );
    let head = |x: &Body<'_>| {
        (
            x.model.get().to_string(),
            x.tools.map(|t| t.get().to_string()),
        )
    };
    if head(&a) != head(&b) {
        return 0;
    }
    let mut tokens: usize =
        counter.count(b.model.get()) + b.tools.map_or(0, |t| counter.count(t.get()));
    for (x, y) in a.messages.iter().zip(&b.messages) {
        if x.get() != y.get() {
            break;
        }
        tokens += counter.count(y.get());
    }
    u32::try_from(tokens).expect("fits")
}

#[tokio::test]
async fn an_append_session_renders_exactly_what_the_whole_thread_renders() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let mut whole = pb::Thread {
        id: "sess-1".into(),
        messages: (1..=3).flat_map(turn).collect(),
    };
    let first = start(&mut client, &token, whole.clone()).await;
    let mut state = first.session.expect("a session was started");
    assert_eq!(state.messages as usize, whole.messages.len());
    assert_eq!(
        first.unchanged_prefix_tokens, None,
        "no render before the first"
    );
    let mut previous_body = first.provider_payload_json;
    let mut reused = 0;
    for n in 4..=30 {
        let new = turn(n);
        whole.messages.extend(new.clone());
        let out = append(&mut client, &token, &whole.id, state.version, new)
            .await
            .unwrap_or_else(|s| panic!("append of turn {n}: {s:?}"));
        let next = out.session.expect("session state");
        assert_eq!(next.version, state.version + 1);
        assert_eq!(next.messages as usize, whole.messages.len());
        // The same thread sent in full renders the same committed plan to
        // the same bytes.
        let mut full = render_req(6_000);
        full.compact_first = false;
        full.thread = Some(whole.clone());
        let full = within(client.render(authed(full, &token)))
            .await
            .expect("full render")
            .into_inner();
        assert_eq!(
            full.provider_payload_json, out.provider_payload_json,
            "turn {n}"
        );
        // What is reported unchanged is what a byte comparison finds.
        let measured = shared_prefix_tokens(&previous_body, &out.provider_payload_json);
        assert_eq!(out.unchanged_prefix_tokens, Some(measured), "turn {n}");
        if out.compaction.as_ref().is_some_and(|c| !c.triggered) {
            reused += 1;
            assert!(
                measured > 0,
                "turn {n}: nothing compacted, yet no prefix kept"
            );
        }
        previous_body = out.provider_payload_json;
        state = next;
    }
    assert!(
        reused > 0,
        "every turn compacted: the test shows nothing about prefixes"
    );
    // Both requests ended on the same thread: the digests agree.
    let mut digest_check = render_req(6_000);
    digest_check.append = Some(pb::ThreadAppend {
        thread_id: whole.id.clone(),
        base_version: state.version,
        messages: Vec::new(),
        ..Default::default()
    });
    let same = within(client.render(authed(digest_check, &token)))
        .await
        .expect("empty append")
        .into_inner();
    let same = same.session.expect("state");
    assert_eq!(
        same.version, state.version,
        "an empty append writes nothing"
    );
    assert_eq!(same.digest, state.digest);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_caller_holding_the_plan_is_not_sent_it_again() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let first = start(
        &mut client,
        &token,
        pb::Thread {
            id: "sess-known".into(),
            messages: turn(1),
        },
    )
    .await;
    let compaction = first.compaction.expect("compact_first reports it");
    let mut held = compaction.plan.expect("a first call is sent the plan");
    assert!(!compaction.plan_omitted);
    let mut version = first.session.expect("state").version;
    let (mut omitted, mut sent) = (0, 0);
    for n in 2..=30 {
        let mut req = render_req(6_000);
        req.known_plan_version = Some(held.version);
        req.append = Some(pb::ThreadAppend {
            thread_id: "sess-known".into(),
            base_version: version,
            messages: turn(n),
            ..Default::default()
        });
        let out = within(client.render(authed(req, &token)))
            .await
            .unwrap_or_else(|s| panic!("turn {n}: {s:?}"))
            .into_inner();
        version = out.session.expect("state").version;
        let c = out.compaction.expect("compaction");
        assert_eq!(c.version, out.plan_version, "turn {n}");
        if c.version == held.version {
            assert!(c.plan_omitted && c.plan.is_none(), "turn {n}: {c:?}");
            assert!(c.tokens_after > 0, "turn {n}: the counts are still sent");
            omitted += 1;
        } else {
            assert!(!c.plan_omitted, "turn {n}");
            held = c.plan.expect("a new version is sent");
            assert_eq!(held.version, c.version);
            sent += 1;
        }
    }
    assert!(omitted > 0 && sent > 0, "omitted {omitted}, sent {sent}");
    // A version the caller does not hold (or none) gets the plan.
    let mut req = render_req(6_000);
    req.known_plan_version = Some(held.version + 100);
    req.append = Some(pb::ThreadAppend {
        thread_id: "sess-known".into(),
        base_version: version,
        messages: Vec::new(),
        ..Default::default()
    });
    let out = within(client.render(authed(req, &token)))
        .await
        .expect("render")
        .into_inner();
    let c = out.compaction.expect("compaction");
    assert!(!c.plan_omitted);
    assert_eq!(c.plan.expect("sent").version, held.version);
    // Compact answers the same way (its plan is counted without a format,
    // so the first Compact makes a version of its own).
    let mut version = out.session.expect("state").version;
    let mut known = None;
    for call in 0..2 {
        let mut req = compact_req(pb::Thread::default(), 6_000);
        req.thread = None;
        req.known_plan_version = known;
        req.append = Some(pb::ThreadAppend {
            thread_id: "sess-known".into(),
            base_version: version,
            messages: Vec::new(),
            ..Default::default()
        });
        let c = within(client.compact(authed(req, &token)))
            .await
            .expect("compact")
            .into_inner();
        assert_eq!(c.plan_omitted, call == 1, "call {call}");
        assert_eq!(c.plan.is_none(), call == 1, "call {call}");
        version = c.session.expect("state").version;
        known = Some(c.version);
    }
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_stale_or_unknown_base_is_refused_with_the_current_version() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let v1 = start_turn_one(&mut client, &token, "sess-2").await;
    let v2 = append(&mut client, &token, "sess-2", v1, turn(2))
        .await
        .expect("append")
        .session
        .expect("state")
        .version;
    // A second client still at v1.
    let stale = append(&mut client, &token, "sess-2", v1, turn(3))
        .await
        .expect_err("stale base");
    assert_status(
        &stale,
        Code::FailedPrecondition,
        Some("append.base_version"),
    );
    let d = ErrorDescription::of(&stale);
    assert_eq!(d.reason, "SESSION_STALE");
    assert_eq!(d.current_version, Some(v2));
    // No session for that thread (or another tenant's): current version 0.
    for (thread, tok) in [
        ("never-started", token.clone()),
        ("sess-2", token_for_globex()),
    ] {
        let unknown = append(&mut client, &tok, thread, 1, turn(1))
            .await
            .expect_err("unknown session");
        assert_eq!(unknown.code(), Code::FailedPrecondition, "{unknown:?}");
        assert_eq!(ErrorDescription::of(&unknown).current_version, Some(0));
    }
    server.stop().await.expect("clean stop");
}

fn token_for_globex() -> String {
    token("globex", TOKEN_PERMS)
}

#[tokio::test]
async fn errors_name_the_appended_message_and_keep_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let v1 = start_turn_one(&mut client, &token, "sess-3").await;
    let mut bad = turn(2);
    bad[1].role = pb::Role::Unspecified as i32;
    let e = append(&mut client, &token, "sess-3", v1, bad)
        .await
        .expect_err("bad role");
    assert_status(&e, Code::InvalidArgument, Some("append.messages[1].role"));
    // A duplicate of a message already in the session.
    let dup = vec![text("u1", pb::Role::User, 2, "again")];
    let e = append(&mut client, &token, "sess-3", v1, dup)
        .await
        .expect_err("duplicate id");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        ErrorDescription::of(&e)
            .field
            .starts_with("append.messages[0]"),
        "{e:?}"
    );
    // A result whose call is in the base is fine; one without a call is not.
    let orphan = vec![result("t9", 2, "c-none", "read_file", "x".into())];
    let e = append(&mut client, &token, "sess-3", v1, orphan)
        .await
        .expect_err("orphaned result");
    assert!(
        ErrorDescription::of(&e)
            .field
            .starts_with("append.messages[0]"),
        "{e:?}"
    );
    // Nothing of the failed calls was kept: the base still takes a good append.
    let ok = append(&mut client, &token, "sess-3", v1, turn(2))
        .await
        .expect("good append");
    assert_eq!(ok.session.expect("state").version, v1 + 1);
    // Both forms at once, or a start from an append, are refused by name.
    let mut both = render_req(6_000);
    both.thread = Some(pb::Thread {
        id: "sess-3".into(),
        messages: turn(1),
    });
    both.append = Some(pb::ThreadAppend {
        thread_id: "sess-3".into(),
        base_version: v1,
        messages: vec![],
        ..Default::default()
    });
    let e = within(client.render(authed(both.clone(), &token)))
        .await
        .expect_err("both");
    assert_status(&e, Code::InvalidArgument, Some("append"));
    both.thread = None;
    both.start_session = true;
    let e = within(client.render(authed(both, &token)))
        .await
        .expect_err("start from append");
    assert_status(&e, Code::InvalidArgument, Some("start_session"));
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn delete_thread_removes_the_session_and_its_files() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let v1 = start_turn_one(&mut client, &token, "sess-4").await;
    append(&mut client, &token, "sess-4", v1, turn(2))
        .await
        .expect("append");
    let folder = server
        .data_dir
        .join("tenants/acme/threads")
        .join(hex_of("sess-4"))
        .join("session");
    let files: Vec<_> = std::fs::read_dir(&folder)
        .expect("session folder")
        .collect();
    assert_eq!(
        files.len(),
        2,
        "a head (carrying the append) and the start's segment"
    );
    // Sealed: no conversation text in any of them.
    for f in &files {
        let bytes = std::fs::read(f.as_ref().expect("entry").path()).expect("read");
        assert!(!String::from_utf8_lossy(&bytes).contains("processed batch"));
    }
    let out = within(client.delete_thread(authed(
        pb::DeleteThreadRequest {
            thread_id: "sess-4".into(),
            tenant_id: None,
        },
        &token,
    )))
    .await
    .expect("delete")
    .into_inner();
    assert!(out.had_session);
    assert!(!folder.exists());
    let e = append(&mut client, &token, "sess-4", v1 + 1, turn(3))
        .await
        .expect_err("deleted");
    assert_eq!(ErrorDescription::of(&e).current_version, Some(0));
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn compact_explain_and_search_context_take_appends_too() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let mut req = compact_req(
        pb::Thread {
            id: "sess-5".into(),
            messages: (1..=2).flat_map(turn).collect(),
        },
        6_000,
    );
    req.start_session = true;
    let out = within(client.compact(authed(req, &token)))
        .await
        .expect("compact")
        .into_inner();
    let v = out.session.expect("state").version;
    let mut req = compact_req(pb::Thread::default(), 3_000);
    req.thread = None;
    req.append = Some(pb::ThreadAppend {
        thread_id: "sess-5".into(),
        base_version: v,
        messages: (3..=12).flat_map(turn).collect(),
        ..Default::default()
    });
    let out = within(client.compact(authed(req, &token)))
        .await
        .expect("compact by append")
        .into_inner();
    let state = out.session.expect("state");
    assert_eq!(state.messages, 48);
    let explain = within(client.explain(authed(
        pb::ExplainRequest {
            thread_id: "sess-5".into(),
            text: "shard 12".into(),
            append: Some(pb::ThreadAppend {
                thread_id: "sess-5".into(),
                base_version: state.version,
                messages: vec![],
                ..Default::default()
            }),
            ..Default::default()
        },
        &token,
    )))
    .await
    .expect("explain")
    .into_inner();
    assert!(
        explain.messages.iter().any(|m| m.message_id == "u12"),
        "the session's messages were searched: {explain:?}"
    );
    let found = within(client.search_context(authed(
        pb::SearchContextRequest {
            query: "turn 2 line 7".into(),
            append: Some(pb::ThreadAppend {
                thread_id: "sess-5".into(),
                base_version: state.version,
                messages: vec![],
                ..Default::default()
            }),
            ..Default::default()
        },
        &token,
    )))
    .await
    .expect("search")
    .into_inner();
    assert_eq!(
        found.session.as_ref().expect("state").version,
        state.version
    );
    assert!(
        !found.passages.is_empty(),
        "early turns were compacted and are found: {found:?} {:?}",
        out.plan
    );
    server.stop().await.expect("clean stop");
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Turn `n` of a session whose turns take the shapes that decide where a
/// render can be cut: results out of call order, a call answered only in
/// the next append, reasoning another provider made, a system message in
/// the middle, two user messages in a row.
fn odd_turn(n: u32) -> Vec<pb::Message> {
    let said = |id: &str, role, t: &str| text(&format!("{id}{n}"), role, n, t);
    let lines = |k: u32| -> String {
        (0..12 + k)
            .map(|i| format!("turn {n} line {i}: worker read shard {i}\n"))
            .collect()
    };
    // A result for call `call_id`, as message `id`.
    let log = |id: &str, call_id: &str, k: u32| result(id, n, call_id, "read_file", lines(k));
    match n % 5 {
        1 => {
            let mut two = call(&format!("a{n}"), n, &format!("c{n}x"), "read_file");
            two.tool_calls.push(pb::ToolCall {
                wire: None,
                id: format!("c{n}y"),
                name: "read_file".into(),
                arguments_json: r#"{"path":"/srv/app/other.txt"}"#.into(),
            });
            // The second call's result arrives first.
            let y = log(&format!("y{n}"), &format!("c{n}y"), 0);
            let x = log(&format!("x{n}"), &format!("c{n}x"), 1);
            vec![
                said(
                    "u",
                    pb::Role::User,
                    &format!("Step {n}: compare the two logs."),
                ),
                two,
                y,
                x,
                said("b", pb::Role::Assistant, "The logs agree."),
            ]
        }
        2 => {
            let reasoning = pb::Message {
                id: format!("r{n}"),
                role: pb::Role::Assistant as i32,
                turn: n,
                parts: vec![pb::ContentPart {
                    kind: Some(pb::content_part::Kind::Reasoning(pb::ReasoningItem {
                        id: format!("rs_{n}"),
                        summary: vec!["Thinking about shard order.".into()],
                        encrypted_content: None,
                        rest_json: None,
                    })),
                }],
                ..Default::default()
            };
            vec![
                said(
                    "u",
                    pb::Role::User,
                    &format!("Step {n}: which shard is slowest?"),
                ),
                reasoning,
                said("b", pb::Role::Assistant, "Shard 3, by a little."),
                said("s", pb::Role::System, "Policy: answer in one line."),
            ]
        }
        3 => vec![
            said(
                "u",
                pb::Role::User,
                &format!("Step {n}: read the next log."),
            ),
            said("v", pb::Role::User, "And keep it short."),
            call(&format!("a{n}"), n, &format!("c{n}"), "read_file"),
        ],
        4 => {
            // The call of the last turn is answered here.
            vec![
                log(&format!("t{n}"), &format!("c{}", n - 1), 3),
                said("b", pb::Role::Assistant, "Read it; nothing new."),
            ]
        }
        _ => agent_turn(n, 30, "worker processed batch"),
    }
}

/// Every turn of a session, rendered from the part of the last render the
/// server kept, is what the whole thread renders: the same body and the
/// same counts, through every turn shape, recall, injections, compactions,
/// and calls left pending.
#[tokio::test]
async fn each_turn_renders_as_the_whole_thread_whatever_its_shape() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", TOKEN_PERMS);
    let request = |n: u32| {
        let mut req = render_req(5_000);
        req.omit_pending_calls = true;
        req.policy = Some(pb::PolicyOverrides {
            injection_reserve_tokens: Some(64),
            ..Default::default()
        });
        if n.is_multiple_of(3) {
            req.injections = vec![pb::Injection {
                hook: "clock".into(),
                text: format!("It is turn {n}."),
            }];
        }
        req
    };
    let mut whole = pb::Thread {
        id: "sess-odd".into(),
        messages: (1..=2).flat_map(odd_turn).collect(),
    };
    let mut req = request(2);
    req.thread = Some(whole.clone());
    req.start_session = true;
    let first = within(client.render(authed(req, &token)))
        .await
        .expect("start")
        .into_inner();
    let mut version = first.session.expect("state").version;
    let mut compactions = 0;
    for n in 3..=40 {
        let new = odd_turn(n);
        whole.messages.extend(new.clone());
        let mut req = request(n);
        req.append = Some(pb::ThreadAppend {
            thread_id: whole.id.clone(),
            base_version: version,
            messages: new,
            ..Default::default()
        });
        let out = within(client.render(authed(req, &token)))
            .await
            .unwrap_or_else(|s| panic!("turn {n}: {s:?}"))
            .into_inner();
        version = out.session.as_ref().expect("state").version;
        if out.compaction.as_ref().is_some_and(|c| c.triggered) {
            compactions += 1;
        }
        let mut full = request(n);
        full.compact_first = false;
        full.thread = Some(whole.clone());
        let full = within(client.render(authed(full, &token)))
            .await
            .unwrap_or_else(|s| panic!("turn {n} in full: {s:?}"))
            .into_inner();
        assert_eq!(
            out.provider_payload_json, full.provider_payload_json,
            "turn {n}"
        );
        assert_eq!(out.tokens, full.tokens, "turn {n}");
        let warnings = |r: &pb::RenderResponse| r.audit.as_ref().map(|a| a.warnings.clone());
        assert_eq!(warnings(&out), warnings(&full), "turn {n}");
    }
    assert!(compactions > 1, "the session compacted {compactions} times");
    server.stop().await.expect("clean stop");
}

/// The session's head is not synced to disk: a crash may bring back an
/// earlier version, or leave it torn. Either costs the client at most one
/// full resend, and never a thread other than its own. Each "restart" is a
/// new server on the first one's data directory (nothing in memory).
#[tokio::test]
async fn a_head_lost_in_a_crash_costs_one_full_resend() {
    let first = TestServer::start().await;
    let restart = || {
        let data_dir = first.data_dir.clone();
        TestServer::start_with(move |s| s.data_dir = data_dir)
    };
    let token = token("acme", TOKEN_PERMS);
    let id = "sess-crash";
    let head = first
        .data_dir
        .join("tenants/acme/threads")
        .join(hex_of(id))
        .join("session/head");
    let full_render = |turns: u32| {
        let mut req = render_req(6_000);
        req.compact_first = false;
        req.thread = Some(pb::Thread {
            id: id.into(),
            messages: (1..=turns).flat_map(turn).collect(),
        });
        req
    };
    let mut client = first.client().await;
    let v1 = start_turn_one(&mut client, &token, id).await;
    let at_v1 = std::fs::read(&head).expect("head at v1");
    let v2 = append(&mut client, &token, id, v1, turn(2))
        .await
        .expect("append turn 2")
        .session
        .expect("state")
        .version;
    // The head went back to v1: the client's v2 is stale, and v1 is where
    // the server is. Appending turn 2 again (what the client sent last)
    // makes the same thread.
    std::fs::write(&head, &at_v1).expect("roll back");
    let server = restart().await;
    let mut client = server.client().await;
    let e = append(&mut client, &token, id, v2, turn(3))
        .await
        .expect_err("v2 is gone");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(ErrorDescription::of(&e).current_version, Some(v1));
    let again = append(&mut client, &token, id, v1, turn(2))
        .await
        .expect("the retried append");
    let full = within(client.render(authed(full_render(2), &token)))
        .await
        .expect("full render")
        .into_inner();
    assert_eq!(again.provider_payload_json, full.provider_payload_json);
    let mut version = again.session.expect("state").version;
    server.stop().await.expect("clean stop");
    // Torn: empty, then cut inside the sealed body. No session; a start
    // replaces it (numbered past every version before) and appends go on.
    for (short_by, turns) in [(usize::MAX, 2), (7, 3)] {
        let bytes = std::fs::read(&head).expect("head");
        std::fs::write(&head, &bytes[..bytes.len().saturating_sub(short_by)]).expect("tear");
        let server = restart().await;
        let mut client = server.client().await;
        let e = append(&mut client, &token, id, version, turn(turns + 1))
            .await
            .expect_err("torn head");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert_eq!(ErrorDescription::of(&e).current_version, Some(0));
        let restarted = start(
            &mut client,
            &token,
            pb::Thread {
                id: id.into(),
                messages: (1..=turns).flat_map(turn).collect(),
            },
        )
        .await
        .session
        .expect("state")
        .version;
        assert!(restarted > version, "versions only grow");
        let out = append(&mut client, &token, id, restarted, turn(turns + 1))
            .await
            .expect("append after the restart");
        let full = within(client.render(authed(full_render(turns + 1), &token)))
            .await
            .expect("full render")
            .into_inner();
        assert_eq!(out.provider_payload_json, full.provider_payload_json);
        version = out.session.expect("state").version;
        server.stop().await.expect("clean stop");
    }
    first.stop().await.expect("clean stop");
}

/// The rendered body of `thread` sent in full.
async fn body_of(client: &mut Client, token: &str, thread: &pb::Thread) -> String {
    let mut req = render_req(100_000);
    req.thread = Some(thread.clone());
    within(client.render(authed(req, token)))
        .await
        .expect("render")
        .into_inner()
        .provider_payload_json
}

/// A thread sent in full again is converted only where it changed (the
/// server shares the rest with the last one sent under its id): every
/// change still shows, whatever field it is in, and nothing is shared
/// across tenants or outlives DeleteThread.
#[tokio::test]
async fn a_thread_sent_in_full_again_shows_every_change() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", TOKEN_PERMS);
    let mut thread = pb::Thread {
        id: "resent".into(),
        messages: vec![
            text("u1", pb::Role::User, 1, "Deploy the alpha build."),
            call("a1", 1, "c1", "read_file"),
            result("r1", 1, "c1", "read_file", "the log says ok".into()),
            text("a2", pb::Role::Assistant, 1, "Done."),
        ],
    };
    let first = body_of(&mut client, &acme, &thread).await;
    assert!(first.contains("alpha build"));
    assert_eq!(body_of(&mut client, &acme, &thread).await, first);
    // The first message edited under its id.
    thread.messages[0].text = "Deploy the beta build.".into();
    let body = body_of(&mut client, &acme, &thread).await;
    assert!(body.contains("beta build") && !body.contains("alpha build"));
    // A call's arguments, then a result's content.
    thread.messages[1].tool_calls[0].arguments_json = r#"{"path":"/srv/app/other.txt"}"#.into();
    let body = body_of(&mut client, &acme, &thread).await;
    assert!(body.contains("other.txt") && !body.contains("log.txt"));
    let content = pb::tool_result_envelope::Content::ContentText("the log says failed".into());
    thread.messages[2]
        .tool_result
        .as_mut()
        .expect("result")
        .content = Some(content);
    let body = body_of(&mut client, &acme, &thread).await;
    assert!(body.contains("says failed") && !body.contains("says ok"));
    // Appended.
    thread
        .messages
        .push(text("u2", pb::Role::User, 2, "And the gamma build?"));
    let body = body_of(&mut client, &acme, &thread).await;
    assert!(body.contains("beta build") && body.contains("gamma build"));
    // Another tenant's thread under the same id and message ids.
    let globex = token("globex", TOKEN_PERMS);
    let mut theirs = thread.clone();
    theirs.messages[0].text = "Deploy the delta build.".into();
    let body = body_of(&mut client, &globex, &theirs).await;
    assert!(body.contains("delta build") && !body.contains("beta build"));
    let body = body_of(&mut client, &acme, &thread).await;
    assert!(body.contains("beta build") && !body.contains("delta build"));
    // Deleted, then sent again: converted anew, the same body.
    within(client.delete_thread(authed(
        pb::DeleteThreadRequest {
            thread_id: "resent".into(),
            tenant_id: None,
        },
        &acme,
    )))
    .await
    .expect("delete");
    assert_eq!(body_of(&mut client, &acme, &thread).await, body);
    server.stop().await.expect("clean stop");
}
