//! gRPC round trips of the per-turn call against the transport floor, in one run.
//!
//! `cargo bench --bench grpc_roundtrip`
//!
//! Starts the real server in-process on 127.0.0.1:0 (dev mode, embedded stores
//! in a temp dir) and a bare tonic echo of `compactd.v1.RenderRequest`
//! (`proto/compactd/bench/v1/echo.proto`) with the same HTTP/2 windows and
//! message limit. Both get the same 500-message request, built with
//! `compactd_testkit::synth` and converted with `pb::Thread::from`, over one shared HTTP/2
//! channel each, at concurrency 1, 16 and 64. Measured:
//!
//! - **echo**: the request there and back; decode + encode, nothing else.
//! - **render, unchanged**: `Render` with `compact_first` on a thread that did
//!   not change since the last call: the committed plan answers it
//!   (`reused`), so the call is validate → compare with the thread the plan
//!   was counted for → plan load → render → count. The target is a p50 at
//!   concurrency 1 within 1.5× of the echo once the ledger is warm.
//! - **render, +1 msg**: each call appends one message first, as a live agent
//!   does between turns. Below the trigger the committed plan is carried
//!   (`reused`: its counts plus the new message's, no pipeline, no new
//!   version); a call that crosses the trigger compacts and commits.
//!
//! Every concurrent worker has its own thread id (one agent = one thread), and
//! every thread is compacted once before timing (warm-up), which also fills
//! the token ledger. Without `--bench` (as under `cargo test --all-targets`)
//! it runs a few calls per level as a smoke test.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

use compactd::client::{connect, endpoint, MAX_MESSAGE_BYTES};
use compactd::proto::pb;
use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::security::AuthConfig;
use compactd::settings::Settings;
use compactd_testkit::synth::{thread, SynthParams};

/// The allocator the `compactd` binary ships with (src/main.rs), so the
/// server measured here is the one that runs; the echo runs on it too.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(clippy::all, clippy::pedantic)]
mod echo_pb {
    tonic::include_proto!("compactd.bench.v1");
}

use echo_pb::echo_client::EchoClient;
use echo_pb::echo_server::{Echo, EchoServer};

/// Messages in the request.
const MESSAGES: usize = 500;
/// The model's input limit: well under the thread, so there is a real plan.
const MAX_INPUT_TOKENS: u32 = 64_000;
const MODEL: &str = "gpt-4o";
const SYSTEM: &str = "You are a careful engineering agent.";
/// (concurrency, calls) per level.
const LEVELS: &[(usize, usize)] = &[(1, 200), (16, 800), (64, 1600)];
/// Levels in smoke mode (no `--bench`): debug builds run the pipeline far
/// slower, and every worker's thread is compacted once.
const SMOKE_LEVELS: &[(usize, usize)] = &[(1, 4), (4, 8)];

struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(
        &self,
        request: Request<pb::RenderRequest>,
    ) -> Result<Response<pb::RenderRequest>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

/// The synthetic thread, cut at a turn boundary and topped up with short
/// dialogue to exactly [`MESSAGES`] messages, ending with a user message (the
/// state of a thread right before a model call).
fn bench_thread() -> pb::Thread {
    let t = thread(&SynthParams {
        seed: 5,
        turns: 200,
        tool_density: 0.6,
        max_output_lines: 120,
        protected: 2,
    });
    let mut t = pb::Thread::from(&t);
    let mut cut = MESSAGES - 2;
    while cut > 0 && t.messages[cut].role != pb::Role::User as i32 {
        cut -= 1;
    }
    t.messages.truncate(cut);
    let mut turn = t.messages.last().map_or(0, |m| m.turn);
    while t.messages.len() < MESSAGES {
        let user = (MESSAGES - t.messages.len()) % 2 == 1;
        if user {
            turn += 1;
        }
        let n = t.messages.len();
        t.messages.push(pb::Message {
            id: format!("pad-{n:04}"),
            role: if user {
                pb::Role::User
            } else {
                pb::Role::Assistant
            } as i32,
            text: if user {
                format!("Turn {turn}: what is the status of step {n}?")
            } else {
                format!("Step {n} is done; the checks passed.")
            },
            turn,
            ..Default::default()
        });
    }
    t.id = "bench".into();
    t
}

fn render_request(thread: pb::Thread) -> pb::RenderRequest {
    pb::RenderRequest {
        thread: Some(thread),
        compact_first: true,
        system_prompt: Some(SYSTEM.into()),
        format: pb::OutputFormat::OpenaiChat as i32,
        model: MODEL.into(),
        max_input_tokens: MAX_INPUT_TOKENS,
        ..Default::default()
    }
}

/// One level's latencies (sorted) and wall time.
struct Sample {
    latencies: Vec<Duration>,
    wall: Duration,
    /// Render calls whose compaction reused the committed plan.
    reused: usize,
}

impl Sample {
    fn pct(&self, p: f64) -> Duration {
        let n = self.latencies.len();
        let i = ((n as f64 - 1.0) * p).round() as usize;
        self.latencies[i.min(n - 1)]
    }
    fn rps(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// Runs `calls` calls split over `workers` tasks; `make(w)` builds worker
/// `w`'s call loop body, which returns one call's latency and whether the plan
/// was reused.
async fn run<F, Fut>(workers: usize, calls: usize, make: F) -> Sample
where
    F: Fn(usize) -> Box<dyn FnMut() -> Fut + Send>,
    Fut: Future<Output = (Duration, bool)> + Send + 'static,
{
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let n = calls / workers + usize::from(w < calls % workers);
        let mut next = make(w);
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(next().await);
            }
            out
        }));
    }
    let mut latencies = Vec::with_capacity(calls);
    let mut reused = 0;
    for t in tasks {
        for (d, r) in t.await.expect("worker") {
            latencies.push(d);
            reused += usize::from(r);
        }
    }
    let wall = start.elapsed();
    latencies.sort();
    Sample {
        latencies,
        wall,
        reused,
    }
}

async fn echo_level(
    client: &EchoClient<Channel>,
    req: &pb::RenderRequest,
    c: usize,
    n: usize,
) -> Sample {
    run(c, n, |_| {
        let client = client.clone();
        let req = req.clone();
        Box::new(move || {
            let mut client = client.clone();
            let req = req.clone();
            async move {
                let t = Instant::now();
                let out = client.echo(req).await.expect("echo");
                let d = t.elapsed();
                drop(out);
                (d, false)
            }
        })
    })
    .await
}

/// Render on per-worker threads `{prefix}-{w}`; with `append`, each call adds
/// one message first. The threads must have been warmed up.
async fn render_level(
    client: &CompactionServiceClient<Channel>,
    base: &pb::RenderRequest,
    prefix: &str,
    append: bool,
    c: usize,
    n: usize,
) -> Sample {
    run(c, n, |w| {
        let client = client.clone();
        let mut req = base.clone();
        if let Some(t) = req.thread.as_mut() {
            t.id = format!("{prefix}-{w}");
        }
        let mut k = 0usize;
        Box::new(move || {
            if append {
                push_message(&mut req, k);
                k += 1;
            }
            let mut client = client.clone();
            let req = req.clone();
            async move {
                let t = Instant::now();
                let out = client.render(req).await.expect("render").into_inner();
                let d = t.elapsed();
                let reused = out.compaction.as_ref().is_some_and(|c| c.reused);
                drop(out);
                (d, reused)
            }
        })
    })
    .await
}

/// Appends message `k`: an assistant answer, then a user question (new turn).
fn push_message(req: &mut pb::RenderRequest, k: usize) {
    let Some(t) = req.thread.as_mut() else { return };
    let last_turn = t.messages.last().map_or(0, |m| m.turn);
    let user = k % 2 == 1;
    t.messages.push(pb::Message {
        id: format!("live-{k:05}"),
        role: if user {
            pb::Role::User
        } else {
            pb::Role::Assistant
        } as i32,
        text: if user {
            format!("Follow-up {k}: can you also check the retry config of the billing service?")
        } else {
            format!("Checked item {k}: latency is within budget and the retry policy is unchanged.")
        },
        turn: if user { last_turn + 1 } else { last_turn },
        ..Default::default()
    });
}

/// Commits a plan for each worker's thread (and fills the ledger).
async fn warm_up(
    client: &CompactionServiceClient<Channel>,
    base: &pb::RenderRequest,
    prefix: &str,
    workers: usize,
) -> pb::CompactResponse {
    let mut first = None;
    for w in 0..workers {
        let mut req = base.clone();
        if let Some(t) = req.thread.as_mut() {
            t.id = format!("{prefix}-{w}");
        }
        let out = client
            .clone()
            .render(req)
            .await
            .expect("warm-up render")
            .into_inner();
        let compaction = out
            .compaction
            .expect("compact_first reports the compaction");
        first.get_or_insert(compaction);
    }
    first.expect("at least one worker")
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn row(name: &str, c: usize, s: &Sample, echo_p50: Option<Duration>) -> String {
    let ratio = echo_p50.map_or_else(
        || "-".to_string(),
        |e| format!("{:.2}x", s.pct(0.5).as_secs_f64() / e.as_secs_f64()),
    );
    format!(
        "| {name:<17} | {c:>3} | {:>5} | {:>7} | {:>7} | {:>7} | {:>7.0} | {:>9} | {ratio:>8} |",
        s.latencies.len(),
        ms(s.pct(0.5)),
        ms(s.pct(0.9)),
        ms(s.pct(0.99)),
        s.rps(),
        format!("{}/{}", s.reused, s.latencies.len()),
    )
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(full));
}

async fn bench(full: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = Settings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().join("data"),
        // Measure the service, not the tenant limiter.
        per_tenant_concurrency: 0,
        per_tenant_rps: 0.0,
        per_tenant_bytes_per_second: 0.0,
        per_tenant_messages_per_second: 0.0,
        auth: AuthConfig {
            dev: true,
            ..Default::default()
        },
        // One line per call would measure the terminal.
        access_log: compactd::server::access::AccessLogSink::Off,
        ..Settings::default()
    };

    // The real server.
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_api, api_stopped) = oneshot::channel::<()>();
    let api = tokio::spawn(compactd::startup::serve(
        settings.clone(),
        listener,
        async {
            let _ = api_stopped.await;
        },
    ));

    // The echo, with the real server's transport settings.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let echo_addr = listener.local_addr().expect("addr");
    let (stop_echo, echo_stopped) = oneshot::channel::<()>();
    let echo = tokio::spawn(
        Server::builder()
            .initial_stream_window_size(settings.http2_stream_window_bytes)
            .initial_connection_window_size(settings.http2_connection_window_bytes)
            .tcp_nodelay(true)
            .add_service(
                EchoServer::new(EchoService).max_decoding_message_size(settings.max_message_bytes),
            )
            .serve_with_incoming_shutdown(
                // `Server::tcp_nodelay` is ignored for a caller-supplied
                // incoming stream: accepted sockets need it set here, or
                // multi-segment responses wait out the peer's delayed ACK
                // (~40 ms) whenever a call runs alone on its connection.
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = echo_stopped.await;
                },
            ),
    );

    let client = connect(&format!("http://{addr}")).await.expect("connect");
    let echo_channel = endpoint(&format!("http://{echo_addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect echo");
    let echo_client = EchoClient::new(echo_channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);

    let thread = bench_thread();
    let base = render_request(thread);
    let bytes = prost::Message::encoded_len(&base);
    let first = warm_up(&client, &base, "warm", 1).await;
    let rendered = client
        .clone()
        .render(base.clone())
        .await
        .expect("render")
        .into_inner();
    println!("grpc_roundtrip: {MESSAGES}-message RenderRequest, {:.0} KB encoded; thread {} tokens -> {} after compaction (max_input_tokens {MAX_INPUT_TOKENS}); OpenAI payload {:.0} KB",
        bytes as f64 / 1024.0,
        first.tokens_before,
        first.tokens_after,
        rendered.provider_payload_json.len() as f64 / 1024.0,
    );
    // Warm the echo path too (connection windows, allocator).
    for _ in 0..20 {
        echo_client.clone().echo(base.clone()).await.expect("echo");
    }

    let header =
        "| call              |   c | calls | p50 ms  | p90 ms  | p99 ms  | calls/s | reused    | p50/echo |";
    let rule =
        "|-------------------|-----|-------|---------|---------|---------|---------|-----------|----------|";
    let mut lines = vec![header.to_string(), rule.to_string()];
    let started = Instant::now();
    // `GRPC_ROUNDTRIP_SESSION_ONLY=1`: only the append-session section.
    let levels = match std::env::var_os("GRPC_ROUNDTRIP_SESSION_ONLY") {
        Some(_) => &[][..],
        None if full => LEVELS,
        None => SMOKE_LEVELS,
    };
    for &(c, n) in levels {
        warm_up(&client, &base, &format!("same-c{c}"), c).await;
        warm_up(&client, &base, &format!("append-c{c}"), c).await;
        let e = echo_level(&echo_client, &base, c, n).await;
        let same = render_level(&client, &base, &format!("same-c{c}"), false, c, n).await;
        let append = render_level(&client, &base, &format!("append-c{c}"), true, c, n).await;
        let p50 = e.pct(0.5);
        lines.push(row("echo", c, &e, None));
        lines.push(row("render, unchanged", c, &same, Some(p50)));
        lines.push(row("render, +1 msg", c, &append, Some(p50)));
        eprintln!(
            "level c={c} done after {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    println!();
    for l in &lines {
        println!("{l}");
    }
    println!();
    println!("render = Render(compact_first=true, OpenAI format) on the real server; echo = bare tonic echo of the same RenderRequest.");
    println!("reused = calls answered from the committed plan (the same request, or only appended below the trigger). Reproduce: cargo bench --bench grpc_roundtrip");
    session_section(&client, &echo_client, full).await;
    println!();
    if !full {
        println!("(smoke mode: a few calls per level; run with `cargo bench` for the numbers)");
    }

    let _ = stop_api.send(());
    let _ = stop_echo.send(());
    api.await.expect("server task").expect("server");
    echo.await.expect("echo task").expect("echo server");
}

/// A thread of about `bytes` encoded: the synthetic agent session, longer.
fn session_thread(bytes: usize) -> pb::Thread {
    let mut turns = 200;
    loop {
        let t = pb::Thread::from(&thread(&SynthParams {
            seed: 9,
            turns,
            tool_density: 0.6,
            max_output_lines: 120,
            protected: 2,
        }));
        if prost::Message::encoded_len(&t) >= bytes || turns > 20_000 {
            let mut t = t;
            t.id = "session".into();
            // End on a user message, the state right before a model call.
            while t
                .messages
                .last()
                .is_some_and(|m| m.role != pb::Role::User as i32)
            {
                t.messages.pop();
            }
            return t;
        }
        turns = turns * 3 / 2;
    }
}

/// One agent turn after turn `n`: the answer to the pending request, a tool
/// call and its result, and the next request.
fn session_turn(n: usize, turn: u32) -> Vec<pb::Message> {
    let output: String = (0..24)
        .map(|i| {
            format!(
                "{n:04}-{i:02} GET /api/orders/{} 200 {} ms cache=hit\n",
                n * 31 + i,
                (n + i) % 97
            )
        })
        .collect();
    vec![
        pb::Message {
            id: format!("s{n}-a"),
            role: pb::Role::Assistant as i32,
            turn,
            tool_calls: vec![pb::ToolCall {
                wire: None,
                id: format!("s{n}-c"),
                name: "http_log".into(),
                arguments_json: format!(r#"{{"since":"T{n}"}}"#),
            }],
            ..Default::default()
        },
        pb::Message {
            id: format!("s{n}-r"),
            role: pb::Role::Tool as i32,
            turn,
            tool_result: Some(pb::ToolResultEnvelope {
                tool_name: "http_log".into(),
                tool_call_id: format!("s{n}-c"),
                outcome: pb::Outcome::Success as i32,
                content: Some(pb::tool_result_envelope::Content::ContentText(output)),
                ..Default::default()
            }),
            ..Default::default()
        },
        pb::Message {
            id: format!("s{n}-b"),
            role: pb::Role::Assistant as i32,
            turn,
            text: format!("Batch {n} of the log is clean."),
            ..Default::default()
        },
        pb::Message {
            id: format!("s{n}-u"),
            role: pb::Role::User as i32,
            turn: turn + 1,
            text: format!("Now check batch {}.", n + 1),
            ..Default::default()
        },
    ]
}

/// Tokens of the leading message elements two OpenAI bodies share byte for
/// byte (model and tools first), found by comparing the bodies.
fn byte_shared_prefix(previous: &str, now: &str) -> (u32, usize, usize) {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        model: &'a serde_json::value::RawValue,
        #[serde(borrow, default)]
        tools: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        messages: Vec<&'a serde_json::value::RawValue>,
    }
    let counter = compactd::tokens::counter_for_model(MODEL);
    let (Ok(a), Ok(b)) = (
        serde_json::from_str::<Body<'_>>(previous),
        serde_json::from_str::<Body<'_>>(now),
    ) else {
        return (0, 0, 0);
    };
    if a.model.get() != b.model.get() || a.tools.map(|t| t.get()) != b.tools.map(|t| t.get()) {
        return (0, 0, a.messages.len());
    }
    let mut tokens = counter.count(b.model.get()) + b.tools.map_or(0, |t| counter.count(t.get()));
    let mut n = 0;
    for (x, y) in a.messages.iter().zip(&b.messages) {
        if x.get() != y.get() {
            break;
        }
        tokens += counter.count(y.get());
        n += 1;
    }
    (
        u32::try_from(tokens).unwrap_or(u32::MAX),
        n,
        a.messages.len(),
    )
}

/// Append sessions on a ~2 MB thread: the per-turn call against echoes of
/// the same bytes, a 200-turn session's per-turn time and prefix reuse.
async fn session_section(
    client: &CompactionServiceClient<Channel>,
    echo: &EchoClient<Channel>,
    full: bool,
) {
    let thread = session_thread(2 * 1024 * 1024);
    let mut base = render_request(thread.clone());
    base.max_input_tokens = 128_000;
    let bytes = prost::Message::encoded_len(&base);
    let mut start = base.clone();
    start.start_session = true;
    let out = client
        .clone()
        .render(start)
        .await
        .expect("start session")
        .into_inner();
    let mut version = out.session.expect("session").version;
    // The client keeps the plan it was sent and says so each turn.
    let mut held_plan = out.plan_version;
    let mut body = out.provider_payload_json;
    // Full-thread renders, warm, against echoing the full request.
    let reps = if full { 30 } else { 2 };
    let mut full_times = Vec::new();
    let mut echo_full = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let _ = client
            .clone()
            .render(base.clone())
            .await
            .expect("full render");
        full_times.push(t.elapsed());
        let t = Instant::now();
        let _ = echo.clone().echo(base.clone()).await.expect("echo");
        echo_full.push(t.elapsed());
    }
    // The session: each turn appends four messages.
    // `GRPC_ROUNDTRIP_TURNS=N`: a longer session, for profiling the turn.
    let turns = std::env::var("GRPC_ROUNDTRIP_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 200 } else { 6 });
    let first_turn = thread.messages.last().map_or(1, |m| m.turn);
    // `GRPC_ROUNDTRIP_TOOL_LOOP=1`: each turn is a step of one tool loop
    // (a call and its result) after the thread's last user message.
    let tool_loop = std::env::var_os("GRPC_ROUNDTRIP_TOOL_LOOP").is_some();
    let (mut per_turn, mut echo_turn) = (Vec::new(), Vec::new());
    let (mut reuse, mut matches, mut in_bytes) = (0usize, 0usize, 0usize);
    let (mut out_bytes, mut body_bytes) = (0usize, 0usize);
    let mut compactions = 0;
    for (n, turn) in (0..turns).zip(first_turn..) {
        let mut req = render_request(pb::Thread::default());
        req.thread = None;
        req.max_input_tokens = 128_000;
        req.known_plan_version = Some(held_plan);
        let mut messages = session_turn(n, turn);
        if tool_loop {
            // A step of a tool loop: the call and its result, no user
            // message (the model is called again with the result).
            messages.truncate(2);
        }
        req.append = Some(pb::ThreadAppend {
            thread_id: thread.id.clone(),
            base_version: version,
            messages,
            ..Default::default()
        });
        in_bytes += prost::Message::encoded_len(&req);
        // The transport floor for this turn: the request and a body the
        // size of the one returned, each echoed.
        let mut floor = req.clone();
        floor.system_prompt = Some("x".repeat(body.len()));
        let t = Instant::now();
        let out = client
            .clone()
            .render(req)
            .await
            .expect("append render")
            .into_inner();
        per_turn.push(t.elapsed());
        let t = Instant::now();
        let _ = echo.clone().echo(floor).await.expect("echo");
        echo_turn.push(t.elapsed());
        out_bytes += prost::Message::encoded_len(&out);
        version = out.session.expect("session").version;
        held_plan = out.plan_version;
        body_bytes += out.provider_payload_json.len();
        if out.compaction.as_ref().is_some_and(|c| c.triggered) {
            compactions += 1;
        }
        let (tokens, shared, previous) = byte_shared_prefix(&body, &out.provider_payload_json);
        if out.unchanged_prefix_tokens == Some(tokens) {
            matches += 1;
        }
        // Reused: everything the previous render sent, but for the turn's
        // own tail (the recall block and the latest request), is still there.
        if shared + 2 >= previous {
            reuse += 1;
        }
        body = out.provider_payload_json;
    }
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let mean_ms =
        |v: &[Duration]| v.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / v.len() as f64;
    let k = (turns / 10).max(1);
    println!();
    println!(
        "append sessions: thread {:.2} MB ({} messages), max_input_tokens 128000, {turns} turns of {}",
        bytes as f64 / 1048576.0,
        thread.messages.len(),
        if tool_loop {
            "a tool call and its result each (one tool loop)"
        } else {
            "4 messages each"
        }
    );
    println!("| call | p50 ms | vs its echo |");
    println!("|---|---:|---:|");
    println!(
        "| full-thread Render, warm | {} | {:.2}x (echo of the {:.1} MB request {} ms) |",
        ms(median(&full_times)),
        median(&full_times).as_secs_f64() / median(&echo_full).as_secs_f64(),
        bytes as f64 / 1048576.0,
        ms(median(&echo_full)),
    );
    println!(
        "| append-session Render of one turn | {} | {:.2}x (echo of request + body {} ms) |",
        ms(median(&per_turn)),
        median(&per_turn).as_secs_f64() / median(&echo_turn).as_secs_f64(),
        ms(median(&echo_turn)),
    );
    // Means count the turns that compacted; medians show the usual turn.
    let median_ms = |v: &[Duration]| median(v).as_secs_f64() * 1e3;
    println!(
        "bytes in per turn: {:.1} KB (the thread: {:.0} KB); per-turn time, first {k} turns {:.2} ms, last {k} {:.2} ms ({:.2}x; medians {:.2} and {:.2} ms, {:.2}x); compactions {compactions}",
        in_bytes as f64 / turns as f64 / 1024.0,
        bytes as f64 / 1024.0,
        mean_ms(&per_turn[..k]),
        mean_ms(&per_turn[turns - k..]),
        mean_ms(&per_turn[turns - k..]) / mean_ms(&per_turn[..k]),
        median_ms(&per_turn[..k]),
        median_ms(&per_turn[turns - k..]),
        median_ms(&per_turn[turns - k..]) / median_ms(&per_turn[..k]),
    );
    println!(
        "bytes out per turn: {:.1} KB, of which the body {:.1} KB (the plan is sent only when its version changed)",
        out_bytes as f64 / turns as f64 / 1024.0,
        body_bytes as f64 / turns as f64 / 1024.0,
    );
    println!(
        "prefix: {reuse}/{turns} turns kept the previous render but its last two messages byte for byte; reported unchanged-prefix tokens equal the byte comparison on {matches}/{turns}"
    );
}
