//! Renders of append sessions that keep part of the last render
//! ([`StablePart`]) against renders of the whole thread.

use super::*;
use crate::app::{Defaults, SessionInput};
use crate::reduce::Policy;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One turn's OpenAI messages, by kind: the shapes that decide where a
/// render can be cut (calls answered out of order, a call answered a
/// turn later or never, two user messages in a row, a system message
/// in the middle).
fn turn(kind: u8, n: usize, lines: usize, pending: &mut Option<String>) -> Vec<Value> {
    let log = |tag: &str| -> String {
        (0..lines)
            .map(|i| {
                format!(
                    "{tag} {n}.{i}: worker-{} read {} rows\n",
                    i % 5,
                    i * 37 % 1000
                )
            })
            .collect()
    };
    let user = json!({"role": "user", "content": format!("Step {n}: look at shard {}.", n % 7)});
    let mut out = Vec::new();
    if let Some(id) = pending.take() {
        if kind.is_multiple_of(2) {
            out.push(json!({"role": "tool", "tool_call_id": id, "content": log("late")}));
        }
    }
    match kind {
        0 => out.extend([
            user,
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("c{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": format!("c{n}"), "content": log("log")}),
            json!({"role": "assistant", "content": format!("Shard {n} is fine.")}),
        ]),
        1 => out.extend([
            user,
            json!({"role": "assistant", "content": "Reading both.", "tool_calls": [
                {"id": format!("c{n}a"), "type": "function", "function": {"name": "read", "arguments": "{\"f\":1}"}},
                {"id": format!("c{n}b"), "type": "function", "function": {"name": "read", "arguments": "{\"f\":2}"}}]}),
            json!({"role": "tool", "tool_call_id": format!("c{n}b"), "content": log("second")}),
            json!({"role": "tool", "tool_call_id": format!("c{n}a"), "content": log("first")}),
            json!({"role": "assistant", "content": "Both agree."}),
        ]),
        2 => out.extend([
            user,
            json!({"role": "user", "content": "And keep it short."}),
            json!({"role": "assistant", "content": "Short it is."}),
        ]),
        3 => {
            out.extend([
                user,
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": format!("p{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
            ]);
            *pending = Some(format!("p{n}"));
        }
        4 => out.extend([
            json!({"role": "system", "content": format!("Policy {n}: answer in one line.")}),
            user,
            json!({"role": "assistant", "content": "Noted."}),
        ]),
        // A step of a tool loop: no user message.
        _ => out.extend([
            json!({"role": "assistant", "content": "Next file.", "tool_calls": [
                {"id": format!("l{n}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": format!("l{n}"), "content": log("step")}),
        ]),
    }
    out
}

fn render_cmd(thread: Thread, budget: u32, session: SessionInput) -> RenderCommand {
    let mut request = CompactCommand::new(thread, Policy::default());
    request.model = Some("gpt-4o".into());
    request.max_input_tokens = Some(budget);
    request.system = Some("You are a careful operator.".into());
    request.session = session;
    RenderCommand {
        request,
        compact_first: true,
        plan_version: 0,
        format: Format::OpenAiChat,
        max_output_tokens: Some(512),
        prompt_cache: Default::default(),
        rehydrate_artifact_ids: Vec::new(),
        omit_pending_calls: true,
        auto_rehydrate: None,
        read_artifact_tool: true,
        search_context_tool: false,
        recall: None,
        injections: Vec::new(),
    }
}

/// Runs a session of `kinds` turns, appended in chunks of `chunks`
/// messages (or, with `resend`, the thread sent in full each time);
/// checks each turn against the whole thread rendered on its own.
/// Returns the turns that kept part of the last render.
async fn session(kinds: &[(u8, usize)], chunks: &[usize], budget: u32, resend: bool) -> usize {
    let mut pending = None;
    let messages: Vec<Value> = kinds
        .iter()
        .enumerate()
        .flat_map(|(n, &(kind, lines))| turn(kind, n, lines, &mut pending))
        .collect();
    let whole = crate::provider::thread_from_json(&Value::Array(messages), "kept")
        .expect("a thread")
        .thread;
    session_of(&whole, chunks, (budget, Format::OpenAiChat), resend).await
}

/// [`session`] of the thread `whole`, rendered in `format`.
async fn session_of(
    whole: &Thread,
    chunks: &[usize],
    (budget, format): (u32, Format),
    resend: bool,
) -> usize {
    let app = App::offline(Defaults::default());
    let ctx = SecurityContext::dev();
    let (mut at, mut version, mut kept) = (0, 0, 0);
    for (i, &size) in chunks.iter().enumerate() {
        let end = (at + size).min(whole.messages.len());
        if at == end {
            break;
        }
        let chunk = Thread {
            id: whole.id.clone(),
            messages: whole.messages[at..end].to_vec(),
        };
        let so_far = Thread {
            id: whole.id.clone(),
            messages: whole.messages[..end].to_vec(),
        };
        let (sent, input) = match (resend, i) {
            (true, _) => (so_far.clone(), SessionInput::Off),
            (false, 0) => (chunk, SessionInput::Start),
            (false, _) => (
                chunk,
                SessionInput::Append {
                    base_version: version,
                    json: None,
                },
            ),
        };
        // A window too small for the thread fails the turn (and the
        // session stops there); a turn that rendered is rendered again
        // alone, under the plan it committed, without the part the
        // turn left (put back for the next turn).
        let mut cmd = render_cmd(sent, budget, input);
        cmd.format = format;
        let Ok(out) = app.render(&ctx, cmd).await else {
            return kept;
        };
        let key = (ctx.tenant_id.clone(), whole.id.clone());
        let threads = &app.inner.threads;
        let part = threads.read(&key.0, &key.1, |s| s.stable.clone());
        // The cache weighs a part with the thread it holds (for a
        // thread sent in full, nothing else holds it).
        if let Some(p) = &part {
            let bytes: usize = so_far.messages.iter().map(|m| m.byte_len_bound()).sum();
            assert!(p.weight() >= bytes as u64, "messages ..{end}");
        }
        threads.update(&key.0, &key.1, |s| s.stable = None);
        let mut full = render_cmd(so_far, budget, SessionInput::Off);
        full.compact_first = false;
        full.format = format;
        let alone = app
            .render(&ctx, full)
            .await
            .unwrap_or_else(|e| panic!("messages ..{end} alone: {e}"));
        assert_eq!(alone.kept, 0, "rendered in full");
        threads.update(&key.0, &key.1, |s| s.stable = part);
        assert_eq!(out.output, alone.output, "messages ..{end}");
        assert_eq!(out.tokens, alone.tokens, "messages ..{end}");
        assert_eq!(out.audit.warnings, alone.audit.warnings, "messages ..{end}");
        assert_eq!(out.recalled, alone.recalled, "messages ..{end}");
        kept += usize::from(out.kept > 0);
        if !resend {
            version = out.session.expect("a session").version;
        }
        at = end;
    }
    kept
}

#[test]
fn a_steady_session_keeps_its_render_between_compactions() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Five kinds of turn, then a tool loop of six steps.
    let kinds: Vec<(u8, usize)> = (0..33)
        .map(|n| (if n % 11 < 5 { n % 11 } else { 5 }, 12))
        .map(|(k, l)| (k as u8, l))
        .collect();
    let chunks = vec![4; 40];
    // 33 turns in about 100 messages: about 25 appends of 4; all but
    // the compactions keep a part, whether the thread is appended to or
    // sent in full again.
    for resend in [false, true] {
        let kept = rt.block_on(session(&kinds, &chunks, 6_000, resend));
        assert!(
            kept >= 14,
            "{kept} turns kept part of the last render ({resend})"
        );
    }
}

/// The public agent logs in `tests/data`, replayed as sessions that
/// append three messages a call, in every format, at a small and a
/// larger window: every turn renders as its whole thread does.
#[test]
fn real_logs_replayed_as_sessions_render_as_their_whole_threads() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut kept = 0;
    for name in [
        "claude_code_rust_port.json",
        "openhands_vue_todo.json",
        "swe_agent_marshmallow.json",
        "tau_bench_airline.json",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("a log");
        let messages: Value = serde_json::from_str(&text).expect("json");
        let messages = messages.get("messages").cloned().unwrap_or(messages);
        let whole = crate::provider::thread_from_json(&messages, "log")
            .expect("imports")
            .thread;
        let chunks = vec![3; whole.messages.len() / 3 + 1];
        for format in Format::ALL {
            for budget in [4_000, 16_000] {
                let k = rt.block_on(session_of(&whole, &chunks, (budget, format), false));
                if format == Format::OpenAiChat {
                    kept += k;
                }
            }
        }
    }
    assert!(kept > 50, "{kept} turns kept part of the last render");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn a_session_renders_what_its_whole_thread_renders(
        kinds in proptest::collection::vec((0u8..7, 1usize..40), 4..16),
        chunks in proptest::collection::vec(1usize..9, 2..30),
        budget in 1_200u32..5_000,
        resend in any::<bool>(),
    ) {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(session(&kinds, &chunks, budget, resend));
    }
}
