//! The render use case and its output checks.

use super::*;
use crate::model::Role;
use crate::provider::testgen::{self, calls, msg};
use crate::render::{ProviderOptions, RenderedMessage};

fn call(id: &str) -> RenderedMessage {
    calls("", &[(id, "search", serde_json::json!({}))])
}

fn result(id: &str) -> RenderedMessage {
    testgen::result(id, "search", "found", false)
}

fn request(messages: Vec<RenderedMessage>) -> Request {
    Request {
        system: None,
        messages,
        tools: Vec::new(),
        notes: Vec::new(),
    }
}

fn rc() -> RequestCounter<'static> {
    static LEDGER: std::sync::LazyLock<crate::tokens::TokenLedger> =
        std::sync::LazyLock::new(|| crate::tokens::TokenLedger::new(1000));
    static COUNTER: std::sync::LazyLock<std::sync::Arc<dyn crate::tokens::TokenCounter>> =
        std::sync::LazyLock::new(crate::tokens::o200k);
    RequestCounter::for_target(
        COUNTER.as_ref(),
        &LEDGER,
        crate::provider::Format::openai_chat_target(),
    )
}

/// `request` as `format`'s output, unbounded and with no earlier trace.
fn output_as(request: Request, format: Format) -> Result<RenderedOutput> {
    let budget = (&mut RequestTokens::default(), u32::MAX);
    output(
        request,
        format,
        ProviderOptions {
            model: "gpt-4o".into(),
            ..ProviderOptions::default()
        },
        &rc(),
        budget,
        None,
        (None, None),
    )
    .map(|(o, _, _)| o)
}

/// A trace's counts are reused only in the counter that made them: a
/// thread rendered for another model is counted again.
#[test]
fn a_trace_counted_by_another_counter_is_counted_again() {
    let req = request(vec![
        msg(
            Role::User,
            "Deploy the worker to eu-west-1 and check the logs.",
        ),
        msg(Role::Assistant, "Deployed; the logs show two warnings."),
    ]);
    let traced = |rc: &RequestCounter<'_>, known: Option<&PrefixTrace>| {
        let budget = (&mut RequestTokens::default(), u32::MAX);
        let (_, trace, _) = output(
            req.clone(),
            Format::OpenAiChat,
            ProviderOptions {
                model: "gpt-4o".into(),
                ..ProviderOptions::default()
            },
            rc,
            budget,
            known,
            (None, None),
        )
        .expect("a body");
        trace.expect("a provider body has a trace")
    };
    let o200k = traced(&rc(), None);
    let ledger = crate::tokens::TokenLedger::new(1000);
    let cl100k = crate::tokens::cl100k();
    let other = RequestCounter::for_target(
        cl100k.as_ref(),
        &ledger,
        crate::provider::Format::openai_chat_target(),
    );
    let fresh = traced(&other, None);
    assert_eq!(fresh.counted_by, "cl100k_base");
    assert_ne!(fresh.units, o200k.units, "the counters differ on this text");
    // (Taking o200k's counts would fail the check every debug build
    // makes: the trace must be what counting the body gives.)
    assert_eq!(traced(&other, Some(&o200k)), fresh);
    let again = traced(&other, Some(&fresh));
    assert_eq!(
        (again.units, again.counted_by),
        (fresh.units, fresh.counted_by)
    );
    assert_eq!(again.expected_cache_read, Some(0), "under OpenAI's minimum");
}

fn refused(r: Result<RenderedOutput>) -> bool {
    matches!(r, Err(AppError::Internal(m)) if m.contains("structure check"))
}

/// Requests the renderer never produces: no format may hand them out.
#[test]
fn a_body_that_breaks_provider_rules_is_never_returned() {
    // A result whose call is not in the request at all.
    let orphan = request(vec![msg(Role::User, "hi"), result("c9")]);
    for format in Format::ALL {
        assert!(refused(output_as(orphan.clone(), format)), "{format:?}");
    }
    // A message between a call and its result: refused where the format
    // cannot repair it; Anthropic's merge and Responses' items can.
    let interleaved = request(vec![
        msg(Role::User, "hi"),
        call("c1"),
        msg(Role::User, "also"),
        result("c1"),
    ]);
    for format in Format::ALL {
        let r = output_as(interleaved.clone(), format);
        let repairable = matches!(format, Format::AnthropicMessages | Format::OpenAiResponses);
        assert_eq!(refused(r), !repairable, "{format:?}");
    }
}

fn render_first(request: CompactCommand) -> RenderCommand {
    RenderCommand {
        request,
        compact_first: true,
        plan_version: 0,
        format: Format::OpenAiChat,
        max_output_tokens: None,
        prompt_cache: Default::default(),
        rehydrate_artifact_ids: Vec::new(),
        omit_pending_calls: false,
        auto_rehydrate: None,
        read_artifact_tool: false,
        search_context_tool: false,
        recall: None,
        injections: Vec::new(),
    }
}

/// Render with `compact_first` is one step: a call that fails commits
/// no plan and leaves no artifact; one that succeeds returns the plan
/// it committed, with its version.
#[tokio::test]
async fn render_compact_first_commits_only_what_it_rendered() {
    use crate::app::compact::tests::long_result_command;
    let app = App::offline(crate::app::Defaults::default());
    let ctx = SecurityContext::dev();
    let mut unreadable = render_first(long_result_command());
    unreadable.rehydrate_artifact_ids = vec![format!("art_{}", "0".repeat(32))];
    let e = app.render(&ctx, unreadable).await.unwrap_err();
    assert!(
        matches!(&e, AppError::NotFound(m) if m.contains("rehydrate_artifact_ids[0]")),
        "{e:?}"
    );
    assert!(app
        .current_plan(&ctx.tenant_id, "long")
        .await
        .unwrap()
        .is_none());
    assert!(app.inner.artifacts.scan(None).await.unwrap().is_empty());

    let out = app
        .render(&ctx, render_first(long_result_command()))
        .await
        .expect("renders");
    let committed = app
        .current_plan(&ctx.tenant_id, "long")
        .await
        .unwrap()
        .expect("committed");
    let compaction = out.compaction.expect("compacted");
    assert!(!compaction.artifacts.is_empty());
    assert_eq!(committed.version, 1);
    assert_eq!((out.plan.version, out.audit.plan_version), (1, 1));
    assert_eq!(*compaction.plan, *committed);
    assert_eq!(*out.plan, *committed);
    assert!(out.tokens.total <= 2_000);
}

/// A deletion while a call runs is forgotten again when the calls that
/// began before it end: what they put in the caches as they end (here,
/// a later render's entries stand for it) does not outlive them.
#[tokio::test]
async fn a_deletion_during_a_call_is_forgotten_again_when_it_ends() {
    use crate::app::compact::tests::long_result_command;
    let app = App::offline(crate::app::Defaults::default());
    let ctx = SecurityContext::dev();
    let key = (ctx.tenant_id.clone(), "long".to_string());
    let held = |app: &App| {
        let parts = |s: &crate::app::thread_state::ThreadState| {
            Some([
                s.carry.is_some(),
                s.stable.is_some(),
                s.recall.is_some(),
                s.trace.is_some(),
            ])
        };
        let threads = &app.inner.threads;
        threads.read(&key.0, &key.1, parts).unwrap_or_default()
    };
    let render = || app.render(&ctx, render_first(long_result_command()));
    render().await.expect("renders");
    assert_eq!(held(&app), [true; 4], "carry, part, recall, trace");
    let call = app.running();
    app.delete_thread(&ctx, "long").await.expect("deleted");
    assert_eq!(held(&app), [false; 4]);
    render().await.expect("renders again");
    assert_eq!(held(&app), [true; 4]);
    drop(call);
    assert_eq!(held(&app), [false; 4], "forgotten when the call ended");
    // With no call from before it running, a deletion is forgotten
    // once: later calls keep what they cache. (The render's background
    // work is waited for: one still running at the deletion would make
    // it wait, and forget again what later calls cached, once it ends.)
    render().await.expect("renders");
    for _ in 0..5_000 {
        if app.inner.in_flight.idle() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(
        app.inner.in_flight.idle(),
        "the render's background work ends"
    );
    app.delete_thread(&ctx, "long").await.expect("deleted");
    render().await.expect("renders");
    let later = app.running();
    drop(later);
    assert_eq!(held(&app), [true; 4]);
}

/// A thread's recall index follows its plans: a later render indexes
/// what the new plan evicts, and the cache re-weighs the grown index.
#[tokio::test]
async fn recall_follows_the_thread_across_plans() {
    use crate::app::compact::tests::long_result_command;
    use crate::model::{Content, Message, MessageMetadata, Role};
    let app = App::offline(crate::app::Defaults::default());
    let ctx = SecurityContext::dev();
    let first = app
        .render(&ctx, render_first(long_result_command()))
        .await
        .expect("renders");
    let mut grown = long_result_command();
    let thread = Arc::make_mut(&mut grown.thread);
    let turn = thread.messages.last().map_or(0, |m| m.turn);
    for (k, (role, text)) in [
        (
            Role::Assistant,
            "worker-3 was slowest, at 499 ms in batch 617.".to_string(),
        ),
        (
            Role::User,
            "Thanks. Which batch finished in 482 ms?".to_string(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        thread.messages.push(std::sync::Arc::new(Message {
            id: format!("late{k}"),
            role,
            content: Content::Text(text),
            tool_calls: Vec::new(),
            tool_result: None,
            turn: turn + 1,
            metadata: MessageMetadata::default(),
        }));
    }
    let second = app
        .render(&ctx, render_first(grown))
        .await
        .expect("renders");
    // Appended below the trigger: the committed plan carries over.
    assert_eq!(second.plan.version, first.plan.version);
    assert!(second.compaction.as_ref().is_some_and(|c| c.reused));
    assert!(!second.recalled.is_empty(), "the question matches the log");
    assert!(second.tokens.total <= 2_000);
    let RenderedOutput::Payload(body) = &second.output else {
        panic!("OpenAI output")
    };
    assert!(body.contains("[Recalled context"), "{body}");
}
