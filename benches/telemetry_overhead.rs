//! What telemetry export costs a Compact call, through gRPC, in one run: the
//! same calls with no subscriber and no meter provider (baseline), and with
//! OTLP trace and metric export to a local receiver (the protocol's own
//! services, served by tonic on 127.0.0.1), each in a process of its own.
//! Each call compacts a new thread, so every span carries the full set of
//! lifecycle events and child spans.
//!
//! `cargo bench --bench telemetry_overhead` (`--bench` off: a smoke run of
//! a few calls).

use std::time::{Duration, Instant};

use compactd::proto::pb;
use compactd::security::AuthConfig;
use compactd::settings::Settings;
use compactd::telemetry::{export_layer, Telemetry, TelemetrySettings};
use compactd_testkit::otlp::Receiver;
use compactd_testkit::synth::{thread, SynthParams};
use tracing_subscriber::layer::SubscriberExt as _;

/// Median Compact latency over `calls` calls against a fresh in-process
/// server; with `sink`, then also the median time from a call's return
/// until its span has reached the collector (over a few more calls).
async fn run(calls: usize, sink: Option<&Receiver>) -> (Duration, Option<Duration>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = Settings {
        data_dir: dir.path().join("data"),
        auth: AuthConfig {
            dev: true,
            ..AuthConfig::default()
        },
        access_log: compactd::server::access::AccessLogSink::Off,
        ..Settings::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(compactd::startup::serve(settings, listener, async {
        let _ = stopped.await;
    }));
    let mut client = compactd::client::connect(&format!("http://{addr}"))
        .await
        .expect("connect");
    let base = pb::Thread::from(&thread(&SynthParams {
        seed: 5,
        turns: 120,
        tool_density: 0.8,
        max_output_lines: 120,
        protected: 0,
    }));
    let mut times = Vec::with_capacity(calls);
    for k in 0..calls + 3 {
        let mut t = base.clone();
        t.id = format!("bench-{k}");
        let req = pb::CompactRequest {
            thread: Some(t),
            model: "gpt-4o".into(),
            max_input_tokens: 32_000,
            ..Default::default()
        };
        let start = Instant::now();
        client.compact(req).await.expect("compact");
        // The first calls warm the tokenizer tables and the ledger.
        if k >= 3 {
            times.push(start.elapsed());
        }
    }
    // Export latency: one call at a time, polling the collector until the
    // call's span is there.
    let visible = match sink {
        None => None,
        Some(sink) => {
            let compacts = || {
                sink.spans()
                    .iter()
                    .filter(|s| s.name.ends_with("/Compact"))
                    .count()
            };
            let mut waits = Vec::new();
            for k in 0..15 {
                // Whatever is still queued arrives first.
                tokio::time::sleep(Duration::from_millis(400)).await;
                let before = compacts();
                let mut t = base.clone();
                t.id = format!("probe-{k}");
                let req = pb::CompactRequest {
                    thread: Some(t),
                    model: "gpt-4o".into(),
                    max_input_tokens: 32_000,
                    ..Default::default()
                };
                client.compact(req).await.expect("compact");
                let returned = Instant::now();
                while compacts() == before && returned.elapsed() < Duration::from_secs(10) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                waits.push(returned.elapsed());
            }
            waits.sort();
            Some(waits[waits.len() / 2])
        }
    };
    let _ = stop.send(());
    let _ = server.await;
    times.sort();
    (times[times.len() / 2], visible)
}

/// One configuration, in a process of its own: the subscriber and the
/// meter provider are process-global, so "off" must never have seen them.
fn child(mode: &str, calls: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (median, exported, visible) = rt.block_on(async {
        if mode == "off" {
            return (run(calls, None).await.0, 0, None);
        }
        let (sink, endpoint) = Receiver::start().await;
        let settings = TelemetrySettings {
            otlp_endpoint: Some(endpoint),
            ..TelemetrySettings::default()
        };
        let provider = Telemetry::provider(&settings)
            .expect("exporter")
            .expect("endpoint");
        let meter = Telemetry::meter_provider(&settings)
            .expect("metric exporter")
            .expect("endpoint");
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(export_layer(&provider)),
        )
        .expect("one subscriber");
        opentelemetry::global::set_meter_provider(meter.clone());
        let (median, visible) = run(calls, Some(&sink)).await;
        tokio::task::spawn_blocking(move || {
            let _ = provider.force_flush();
            let _ = meter.force_flush();
        })
        .await
        .expect("join");
        (median, sink.spans().len(), visible)
    });
    println!(
        "{} {exported} {}",
        median.as_nanos(),
        visible.map_or(0, |v| v.as_nanos())
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let calls = if bench { 120 } else { 3 };
    if let Ok(mode) = std::env::var("TELEMETRY_BENCH_MODE") {
        child(&mode, calls);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let measure = |mode: &str| -> (f64, usize, f64) {
        let mut cmd = std::process::Command::new(&exe);
        cmd.env("TELEMETRY_BENCH_MODE", mode);
        if bench {
            cmd.arg("--bench");
        }
        let out = cmd.output().expect("run a child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or_default();
        let mut parts = last.split_whitespace();
        let nanos: f64 = parts.next().and_then(|v| v.parse().ok()).expect("median");
        let spans: usize = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let visible: f64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        (nanos / 1e6, spans, visible / 1e6)
    };
    // Alternated, so drift of the machine hits both alike.
    let rounds = if bench { 2 } else { 1 };
    let (mut off, mut on, mut exported, mut visible) = (0.0, 0.0, 0, 0.0);
    for _ in 0..rounds {
        off += measure("off").0 / rounds as f64;
        let (ms, spans, seen) = measure("on");
        on += ms / rounds as f64;
        exported += spans;
        visible += seen / rounds as f64;
    }
    println!(
        "telemetry_overhead: median Compact over gRPC, {calls} calls each, 120-turn thread, current-thread runtime, {rounds} alternated rounds"
    );
    println!("  no subscriber, no meter (baseline)  {off:8.2} ms  1.00x");
    println!(
        "  OTLP traces + metrics export on     {on:8.2} ms  {:.3}x  ({exported} spans exported)",
        on / off
    );
    let delay = TelemetrySettings::default().export_delay_ms;
    println!(
        "  a call's span at the collector      {visible:8.2} ms after the call returned (median of 15; export_delay_ms {delay})"
    );
}
