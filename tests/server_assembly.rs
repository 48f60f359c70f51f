//! Context assembly (seed 003) through gRPC: bootstrap files join the
//! system prompt, workspace files are one message after the last summary
//! and before the recent turns, both are budgeted as fixed parts (never
//! compacted), every provider format accepts the result, and bad files are
//! refused naming the field.

use crate::server_common;

use compactd::proto::pb;
use server_common::*;
use tonic::Code;

const SYSTEM: &str = "You are a careful agent.";
const BOOTSTRAP: &str = "Run the test suite before every commit.";
const WORKSPACE: &str = "TODO: migrate shard 7; shard 3 is read-only.";

/// Long enough at 4,000 tokens that older turns are summarized.
fn dialogue(id: &str, turns: u32) -> pb::Thread {
    let mut messages = Vec::new();
    for t in 1..=turns {
        messages.push(text(
            &format!("u{t}"),
            pb::Role::User,
            t,
            &format!(
                "Question {t}: how do the batches of shard {t} look? {}",
                "Please explain the retry behaviour in detail. ".repeat(6)
            ),
        ));
        messages.push(text(
            &format!("a{t}"),
            pb::Role::Assistant,
            t,
            &format!(
                "Answer {t}: shard {t} processed its batches; retries stayed under three. {}",
                "Each retry waited for the backoff window before trying again. ".repeat(6)
            ),
        ));
    }
    pb::Thread {
        id: id.into(),
        messages,
    }
}

fn file(name: &str, text: &str) -> pb::ContextFile {
    pb::ContextFile {
        name: name.into(),
        text: text.into(),
    }
}

fn context() -> pb::AssemblyContext {
    pb::AssemblyContext {
        bootstrap: vec![file("AGENTS.md", BOOTSTRAP)],
        workspace: vec![file("todo.md", WORKSPACE)],
    }
}

fn render(thread: pb::Thread, format: pb::OutputFormat, max: u32) -> pb::RenderRequest {
    pb::RenderRequest {
        thread: Some(thread),
        compact_first: true,
        format: format as i32,
        model: "gpt-4o".into(),
        max_input_tokens: max,
        system_prompt: Some(SYSTEM.into()),
        policy: Some(pb::PolicyOverrides {
            keep_recent_turns: Some(2),
            ..Default::default()
        }),
        context: Some(context()),
        ..Default::default()
    }
}

/// Where `needle` starts in `hay` (panics naming it when absent).
fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the body {hay}"))
}

#[tokio::test]
async fn assembled_context_comes_in_the_seeds_order_in_every_format() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    // Neutral: the origins say where each slot went.
    let out = within(client.render(authed(
        render(dialogue("t-asm", 30), pb::OutputFormat::Unspecified, 4_000),
        &tok,
    )))
    .await
    .expect("render")
    .into_inner();
    let system = out.system_prompt.clone().expect("a system prompt");
    assert!(
        system.starts_with(&format!(
            "{SYSTEM}\n\n<bootstrap name=\"AGENTS.md\">\n{BOOTSTRAP}\n</bootstrap>"
        )),
        "{system}"
    );
    let origins: Vec<i32> = out.messages.iter().map(|m| m.origin).collect();
    assert!(
        origins.contains(&(pb::Origin::Summary as i32)),
        "older turns are summarized at this budget: {origins:?}"
    );
    let compacted = out
        .messages
        .iter()
        .rposition(|m| {
            m.origin == pb::Origin::Summary as i32 || m.text.contains("earlier messages (")
        })
        .expect("compacted history");
    let workspace = origins
        .iter()
        .position(|&o| o == pb::Origin::Workspace as i32)
        .expect("the workspace slot");
    assert_eq!(
        workspace,
        compacted + 1,
        "right after the compacted history"
    );
    let slot = &out.messages[workspace];
    assert_eq!(slot.role, pb::Role::User as i32);
    assert_eq!(
        slot.text,
        format!("<workspace_file name=\"todo.md\">\n{WORKSPACE}\n</workspace_file>")
    );
    // The recent turns follow it, the latest question verbatim and last.
    let rest = &out.messages[workspace + 1..];
    assert!(
        rest.iter().all(|m| m.origin != pb::Origin::Summary as i32),
        "{origins:?}"
    );
    assert_eq!(rest.last().map(|m| m.source_id.as_str()), Some("a30"));
    let compaction = out.compaction.expect("compact_first reports");
    let budget = compaction.budget.expect("budget");
    assert!(budget.workspace_tokens > 0);
    assert!(budget.fixed_tokens >= budget.system_tokens + budget.workspace_tokens);
    assert!(out.tokens.expect("tokens").total <= 4_000);

    // Every provider body keeps the order: system, bootstrap, compacted
    // history (a summary, or a dropped span's notice where the provider's
    // counting left no room for one), workspace, recent turns; the server
    // checked each body against its provider's rules.
    for format in [
        pb::OutputFormat::OpenaiChat,
        pb::OutputFormat::AnthropicMessages,
        pb::OutputFormat::OpenaiResponses,
    ] {
        let out = within(client.render(authed(render(dialogue("t-asm", 30), format, 4_000), &tok)))
            .await
            .unwrap_or_else(|e| panic!("{format:?}: {e}"))
            .into_inner();
        let body: serde_json::Value =
            serde_json::from_str(&out.provider_payload_json).expect("a JSON body");
        // The system part: Anthropic's `system`, Responses' `instructions`,
        // Chat's first message.
        let system = body
            .get("system")
            .or_else(|| body.get("instructions"))
            .unwrap_or(&body["messages"][0])
            .to_string();
        assert!(
            at(&system, SYSTEM) < at(&system, "<bootstrap name=\\\"AGENTS.md\\\">"),
            "{format:?}: {system}"
        );
        let conversation = body
            .get("messages")
            .or_else(|| body.get("input"))
            .expect("a conversation")
            .to_string();
        // The last piece of compacted history, wherever there are several.
        let compacted = conversation
            .rfind("[Context Summary - Turns")
            .max(conversation.rfind("earlier messages (turns"))
            .unwrap_or_else(|| panic!("{format:?}: no compacted history in {conversation}"));
        let order = [
            compacted,
            at(&conversation, "<workspace_file name=\\\"todo.md\\\">"),
            at(&conversation, "Question 30:"),
        ];
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{format:?}: {order:?}"
        );
    }
}

#[tokio::test]
async fn with_nothing_summarized_the_workspace_opens_the_conversation() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let mut thread = dialogue("t-asm-small", 2);
    thread
        .messages
        .insert(0, text("d0", pb::Role::Developer, 1, "Answer in English."));
    let out = within(client.render(authed(
        render(thread, pb::OutputFormat::Unspecified, 100_000),
        &tok,
    )))
    .await
    .expect("render")
    .into_inner();
    let ids: Vec<&str> = out.messages.iter().map(|m| m.source_id.as_str()).collect();
    assert_eq!(ids, ["d0", "workspace", "u1", "a1", "u2", "a2"]);
}

#[tokio::test]
async fn workspace_files_are_budgeted_before_compaction_and_never_compacted() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    // Fits without the workspace: nothing is compacted.
    let mut bare = render(dialogue("t-asm-b", 8), pb::OutputFormat::OpenaiChat, 4_000);
    bare.context = None;
    let out = within(client.render(authed(bare, &tok)))
        .await
        .expect("render")
        .into_inner();
    let plain = out.compaction.expect("report");
    assert!(!plain.triggered);
    // A large workspace takes room the turns had: now they are compacted,
    // the workspace is whole and the request fits.
    let notes = "Shard 7 notes: the migration runs at night. ".repeat(250);
    let mut with = render(dialogue("t-asm-w", 8), pb::OutputFormat::OpenaiChat, 4_000);
    with.context = Some(pb::AssemblyContext {
        bootstrap: Vec::new(),
        workspace: vec![file("notes.md", &notes)],
    });
    let out = within(client.render(authed(with, &tok)))
        .await
        .expect("render")
        .into_inner();
    let report = out.compaction.expect("report");
    assert!(report.triggered, "the workspace counts against the budget");
    assert!(report.budget.expect("budget").workspace_tokens > 1_000);
    assert!(out.provider_payload_json.contains(notes.trim_end()));
    assert!(out.tokens.expect("tokens").total <= 4_000);
    // One that cannot fit at all is refused, not truncated.
    let mut huge = render(dialogue("t-asm-h", 8), pb::OutputFormat::OpenaiChat, 4_000);
    huge.context = Some(pb::AssemblyContext {
        bootstrap: Vec::new(),
        workspace: vec![file("dump.txt", &notes.repeat(4))],
    });
    let e = within(client.render(authed(huge, &tok)))
        .await
        .expect_err("over the window");
    assert_status(&e, Code::FailedPrecondition, Some("max_input_tokens"));
    assert!(e.message().contains("workspace"), "{}", e.message());
}

#[tokio::test]
async fn bad_context_files_are_refused_naming_the_field() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let cases = [
        (
            pb::AssemblyContext {
                bootstrap: vec![file("AGENTS.md", "ok"), file("a\"b", "x")],
                workspace: Vec::new(),
            },
            "context.bootstrap[1].name",
        ),
        (
            pb::AssemblyContext {
                bootstrap: Vec::new(),
                workspace: vec![file("todo.md", "  ")],
            },
            "context.workspace[0].text",
        ),
    ];
    for (ctx, field) in cases {
        let mut req = render(
            dialogue("t-asm-bad", 2),
            pb::OutputFormat::OpenaiChat,
            4_000,
        );
        req.context = Some(ctx.clone());
        let e = within(client.render(authed(req, &tok)))
            .await
            .expect_err("refused");
        assert_status(&e, Code::InvalidArgument, Some(field));
        // Compact reads the same field.
        let mut c = compact_req(dialogue("t-asm-bad", 2), 4_000);
        c.context = Some(ctx);
        let e = within(client.compact(authed(c, &tok)))
            .await
            .expect_err("refused");
        assert_status(&e, Code::InvalidArgument, Some(field));
    }
}
