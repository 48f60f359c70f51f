//! The provider's prompt cache across an agent session through gRPC: each
//! Anthropic body compactd renders is answered by a stand-in for the
//! Messages API's cache, which implements its published rules and counts
//! with a tokenizer other than compactd's (cl100k_base). Between
//! compactions nearly every input token is a cache read, and the share
//! compactd expects to be read is the share the stand-in reads.

use std::collections::HashSet;

use crate::server_common;

use compactd::proto::pb;
use serde_json::Value;
use server_common::*;

type Client = pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>;

const MODEL: &str = "claude-sonnet-4-5";

/// The Messages API's prompt cache, by its documentation: the prompt is
/// tools, then system blocks, then each message's content blocks; a request
/// reads the longest prefix written before that ends at one of its marked
/// blocks or at most 20 blocks before one, and writes the prefix up to each
/// marked block that is at least the model's minimum (1,024 tokens here).
/// The marker itself is not cached content. Lifetimes are not modelled:
/// the session's turns follow each other within five minutes.
#[derive(Default)]
struct AnthropicCache {
    written: HashSet<u64>,
}

/// What the stand-in reports, as `usage` does.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    input_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
}

impl Usage {
    fn total(&self) -> u64 {
        self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens
    }
}

const MINIMUM: u64 = 1024;
const LOOKBACK: usize = 20;

/// One block of a prompt: where it sits (so a block moved to another
/// message is another prefix), its text without the marker, its mark.
fn blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |at: String, b: &Value| {
        let mut b = b.clone();
        let marked = b
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        out.push((format!("{at}{b}"), marked));
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        push("tool".into(), t);
    }
    match &body["system"] {
        Value::String(s) => push(
            "system".into(),
            &serde_json::json!({"type": "text", "text": s}),
        ),
        Value::Array(a) => a.iter().for_each(|b| push("system".into(), b)),
        _ => {}
    }
    for (i, m) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = m["role"].as_str().unwrap_or_default().to_string();
        match &m["content"] {
            Value::String(s) => push(
                format!("{i}{role}"),
                &serde_json::json!({"type": "text", "text": s}),
            ),
            Value::Array(a) => a.iter().for_each(|b| push(format!("{i}{role}"), b)),
            _ => {}
        }
    }
    out
}

impl AnthropicCache {
    fn answer(&mut self, body: &Value) -> Usage {
        let counter = compactd::tokens::cl100k();
        let blocks = blocks(body);
        let (mut chain, mut cum) = (Vec::new(), Vec::new());
        let (mut h, mut tokens) = (0u64, 0u64);
        for (text, _) in &blocks {
            h = xxhash_rust::xxh3::xxh3_64(format!("{h}:{text}").as_bytes());
            tokens += counter.count(text) as u64;
            chain.push(h);
            cum.push(tokens);
        }
        let marks: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].1).collect();
        assert!(
            marks.len() <= 4,
            "the API refuses {} breakpoints",
            marks.len()
        );
        let read = marks
            .iter()
            .filter_map(|&m| {
                (m.saturating_sub(LOOKBACK)..=m)
                    .rev()
                    .find(|&p| self.written.contains(&chain[p]))
            })
            .map(|p| cum[p])
            .max()
            .unwrap_or(0);
        let mut written_to = None;
        for &m in &marks {
            if cum[m] >= MINIMUM {
                self.written.insert(chain[m]);
                written_to = Some(cum[m]);
            }
        }
        let creation = written_to.map_or(0, |w| w.saturating_sub(read));
        Usage {
            input_tokens: tokens - read - creation,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: creation,
        }
    }
}

fn render_req(max_input_tokens: u32) -> pb::RenderRequest {
    pb::RenderRequest {
        compact_first: true,
        format: pb::OutputFormat::AnthropicMessages as i32,
        model: MODEL.into(),
        max_input_tokens,
        system_prompt: Some(
            "You are a careful operator of the batch fleet. Check each shard you are asked \
             about, read its log with read_file, and report what you find."
                .into(),
        ),
        tools: vec![pb::ToolSchema {
            name: "read_file".into(),
            description: "Read a file of the workspace".into(),
            parameters_json: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#.into(),
        }],
        ..Default::default()
    }
}

/// One model call of the session: `messages` appended to the session, the
/// body rendered.
async fn call_model(
    client: &mut Client,
    token: &str,
    base: Option<u64>,
    messages: Vec<pb::Message>,
    tweak: impl Fn(&mut pb::RenderRequest),
) -> pb::RenderResponse {
    let mut req = render_req(24_000);
    match base {
        None => {
            req.thread = Some(pb::Thread {
                id: "cached".into(),
                messages,
            });
            req.start_session = true;
        }
        Some(base_version) => {
            req.append = Some(pb::ThreadAppend {
                thread_id: "cached".into(),
                base_version,
                messages,
                ..Default::default()
            })
        }
    }
    tweak(&mut req);
    within(client.render(authed(req, token)))
        .await
        .expect("render")
        .into_inner()
}

/// Per model call: the stand-in's usage, compactd's expectation and its
/// count of the body, and whether a compaction made the body.
struct Call {
    usage: Usage,
    expected: u64,
    counted: u64,
    compacted: bool,
    /// How compactd counted the body.
    counting: Option<pb::Counting>,
}

/// The session's model calls: per turn, one after the user's request (the
/// model calls a tool) and one after the tool's result (it answers).
async fn session(turns: u32, tweak: impl Fn(&mut pb::RenderRequest) + Copy) -> Vec<Call> {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", &["compact", "render", "rehydrate"]);
    let mut cache = AnthropicCache::default();
    let (mut base, mut calls, mut answer) = (None, Vec::new(), Vec::new());
    // The stand-in's report on the last body, sent with the next call.
    let mut report: Option<pb::ProviderUsage> = None;
    for n in 1..=turns {
        let turn = agent_turn(n, 40, "worker processed batch");
        let (user, call_and_result, last) = (turn[0].clone(), turn[1..3].to_vec(), turn[3].clone());
        let opening = [std::mem::take(&mut answer), vec![user]].concat();
        for append in [opening, call_and_result] {
            let usage: Vec<pb::ProviderUsage> = report.take().into_iter().collect();
            let out = call_model(&mut client, &token, base, append, |r| {
                r.usage = usage.clone();
                tweak(r)
            })
            .await;
            let warnings = out
                .audit
                .as_ref()
                .map(|a| a.warnings.clone())
                .unwrap_or_default();
            assert!(
                warnings.iter().all(|w| !w.starts_with("usage")),
                "{warnings:?}"
            );
            base = out.session.as_ref().map(|s| s.version);
            let body: Value = serde_json::from_str(&out.provider_payload_json).expect("a body");
            let usage = cache.answer(&body);
            report = Some(pb::ProviderUsage {
                body_digest: out.body_digest.clone(),
                input_tokens: u32::try_from(usage.total()).expect("fits"),
                cache_read_tokens: u32::try_from(usage.cache_read_input_tokens).expect("fits"),
                cache_write_tokens: u32::try_from(usage.cache_creation_input_tokens).expect("fits"),
            });
            calls.push(Call {
                usage,
                expected: out.expected_cache_read_tokens.map_or(0, u64::from),
                counted: out.tokens.as_ref().map_or(0, |t| u64::from(t.total)),
                compacted: out
                    .compaction
                    .as_ref()
                    .is_some_and(|c| !c.reused && c.triggered),
                counting: out.counting,
            });
        }
        answer = vec![last];
    }
    calls
}

/// Shares over the calls after the first compaction: (read by the
/// stand-in of its count, expected by compactd of its own).
fn shares(calls: &[Call]) -> (f64, f64) {
    let first = calls
        .iter()
        .position(|c| c.compacted)
        .expect("the session compacts");
    let after = &calls[first + 1..];
    let sum = |f: &dyn Fn(&Call) -> u64| after.iter().map(f).sum::<u64>() as f64;
    (
        sum(&|c| c.usage.cache_read_input_tokens) / sum(&|c| c.usage.total()),
        sum(&|c| c.expected) / sum(&|c| c.counted),
    )
}

/// Reads over the calls after the first compaction: (read by the stand-in,
/// expected by compactd), in tokens.
fn reads(calls: &[Call]) -> (u64, u64) {
    let first = calls.iter().position(|c| c.compacted).expect("compacts");
    let after = &calls[first + 1..];
    (
        after.iter().map(|c| c.usage.cache_read_input_tokens).sum(),
        after.iter().map(|c| c.expected).sum(),
    )
}

const LIMIT: u32 = 60_000;

#[tokio::test]
async fn an_agent_session_is_read_from_the_cache_as_compactd_expects() {
    let calls = session(100, |r| r.max_input_tokens = LIMIT).await;
    // The budget holds by the provider's count, not only compactd's.
    let over: Vec<(usize, u64)> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.usage.total() > u64::from(LIMIT))
        .map(|(i, c)| (i, c.usage.total()))
        .collect();
    assert!(
        over.is_empty(),
        "over the limit by the provider's count: {over:?}"
    );
    // Counted with the learned bound once three reports are in.
    let basis = |c: &Call| c.counting.as_ref().map(|k| k.basis());
    assert_eq!(basis(&calls[0]), Some(pb::counting::Basis::Estimate));
    let calibrated = calls
        .iter()
        .position(|c| basis(c) == Some(pb::counting::Basis::Calibrated))
        .expect("calibrated");
    assert!(calibrated <= 6, "calibrated from call {calibrated}");
    let scale = calls[calibrated].counting.as_ref().map_or(1.0, |k| k.scale);
    assert!(scale < 0.9, "a bound of {scale} per estimated token");
    let compactions = calls.iter().filter(|c| c.compacted).count();
    assert!(compactions >= 2, "{compactions} compactions");
    if std::env::var_os("PROMPT_CACHE_TRACE").is_some() {
        for (i, c) in calls.iter().enumerate() {
            eprintln!(
                "{i}: {} read {}/{} expected {}/{}",
                if c.compacted { "C" } else { " " },
                c.usage.cache_read_input_tokens,
                c.usage.total(),
                c.expected,
                c.counted
            );
        }
    }
    let (read, expected) = shares(&calls);
    let (read_tokens, expected_tokens) = reads(&calls);
    let agreement = expected_tokens as f64 / read_tokens as f64 - 1.0;
    eprintln!(
        "{} calls, {compactions} compactions, calibrated from call {calibrated} (scale {scale:.3}): \
         {:.1}% read from the cache, {:.1}% expected; {read_tokens} tokens read, {expected_tokens} expected ({:+.2}%)",
        calls.len(),
        100.0 * read,
        100.0 * expected,
        100.0 * agreement
    );
    assert!(
        agreement.abs() <= 0.02,
        "{read_tokens} tokens read, {expected_tokens} expected"
    );
    assert!(
        read >= 0.90,
        "{:.1}% of input tokens read from the cache",
        100.0 * read
    );
}

#[tokio::test]
async fn without_breakpoints_nothing_is_read() {
    let calls = session(12, |r| r.cache_breakpoints = Some(false)).await;
    assert!(calls.iter().all(|c| c.usage.cache_read_input_tokens == 0));
    assert!(calls.iter().skip(1).all(|c| c.expected == 0));
}

#[tokio::test]
async fn a_report_names_its_body_or_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", &["compact", "render"]);
    let first = call_model(&mut client, &token, None, agent_turn(1, 4, "ok"), |_| {}).await;
    assert_eq!(first.body_digest.len(), 16);
    let base = first.session.as_ref().map(|s| s.version);
    let report = |digest: &str, input: u32| pb::ProviderUsage {
        body_digest: digest.into(),
        input_tokens: input,
        cache_read_tokens: 100,
        cache_write_tokens: 20,
    };
    // Another body's digest is not counted, and the response says so.
    let other = call_model(&mut client, &token, base, Vec::new(), |r| {
        r.usage = vec![report("00000000000000ff", 500)];
    })
    .await;
    let warnings = other.audit.expect("audit").warnings;
    assert!(
        warnings.iter().any(|w| w.starts_with("usage[0]")),
        "{warnings:?}"
    );
    for (bad, field) in [
        (report("not hex at all!!", 500), "usage[0].body_digest"),
        (report(&first.body_digest, 50), "usage[0].input_tokens"),
    ] {
        let mut req = render_req(24_000);
        req.append = Some(pb::ThreadAppend {
            thread_id: "cached".into(),
            base_version: other.session.as_ref().map_or(0, |s| s.version),
            ..Default::default()
        });
        req.usage = vec![bad];
        let status = within(client.render(authed(req, &token)))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(field), "{}", status.message());
    }
}

#[tokio::test]
async fn a_report_above_the_learned_bound_tightens_it_before_the_next_render() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let token = token("acme", &["compact", "render"]);
    let thread = "tightened";
    let mut out = claude_render(&mut client, &token, (thread, 4), None).await;
    assert_eq!(counting(&out), (pb::counting::Basis::Estimate, 1.0));
    // Three reports at half the estimate calibrate it.
    for turns in 5..=7 {
        let report = report_on(&out, 0.5 / counting(&out).1);
        out = claude_render(&mut client, &token, (thread, turns), Some(report)).await;
    }
    let (basis, learned) = counting(&out);
    assert_eq!(basis, pb::counting::Basis::Calibrated);
    assert!((0.5..0.6).contains(&learned), "learned {learned}");
    let calibrated_total = out.tokens.as_ref().map_or(0, |t| t.total);
    // The provider counts 0.8 of the estimate on this body: the very
    // render that carries the report counts with a bound that covers it.
    let report = report_on(&out, 0.8 / learned);
    let next = claude_render(&mut client, &token, (thread, 7), Some(report)).await;
    let (basis, tightened) = counting(&next);
    assert_eq!(basis, pb::counting::Basis::Calibrated);
    assert!(tightened >= 0.8 * 1.05, "tightened to {tightened}");
    // Text counts scale with the bound; the format's fixed framing does not.
    let total = next.tokens.as_ref().map_or(0, |t| t.total);
    assert!(
        f64::from(total) >= f64::from(calibrated_total) * tightened / learned * 0.9,
        "{total} tokens at {tightened}, {calibrated_total} at {learned}"
    );
    // Explain lists the last renders: each body's expected cache read,
    // beside the provider's report once the next call brought it.
    let explained = within(client.explain(authed(
        pb::ExplainRequest {
            thread_id: thread.into(),
            text: "Step 1".into(),
            ..Default::default()
        },
        &token,
    )))
    .await
    .expect("explain")
    .into_inner();
    let turns = &explained.cache_turns;
    assert!(turns.len() >= 4, "{turns:?}");
    // The newest entry for the body the report answered holds it (a body
    // rendered twice in a row is one entry).
    let answered = turns
        .iter()
        .rev()
        .find(|t| t.body_digest == out.body_digest)
        .expect("the reported body is listed");
    assert_eq!(
        answered.reported.as_ref().map(|r| r.input_tokens),
        Some(report_on(&out, 0.8 / learned).input_tokens)
    );
    let last = turns.last().expect("a turn");
    assert_eq!(last.body_digest, next.body_digest);
    assert_eq!(
        last.expected_cache_read_tokens,
        next.expected_cache_read_tokens
    );
    if next.body_digest != out.body_digest {
        assert!(last.reported.is_none(), "{last:?}");
    }
    assert!(
        turns[..turns.len() - 1]
            .iter()
            .all(|t| t.reported.is_some()),
        "every earlier render was answered: {turns:?}"
    );
    // A report that cannot be a count of the body is named and not learned.
    let absurd = report_on(&next, 100.0);
    let refused = claude_render(&mut client, &token, (thread, 7), Some(absurd)).await;
    assert_eq!(counting(&refused).1, tightened);
    let warnings = refused.audit.expect("audit").warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("usage[0]: not learned")),
        "{warnings:?}"
    );
}
