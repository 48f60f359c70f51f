//! What trace export costs a Compact call, through gRPC, in one run: the
//! same calls with no subscriber (baseline) and with the OTLP export layer
//! sending to a local receiver (the protocol's own service, served by
//! tonic on 127.0.0.1). Each call compacts a new thread, so every span
//! carries the full set of lifecycle events.
//!
//! `cargo bench --bench telemetry_overhead` (`--bench` off: a smoke run of
//! a few calls).

use std::time::{Duration, Instant};

use compactd::proto::pb;
use compactd::security::AuthConfig;
use compactd::server::ServerSettings;
use compactd::telemetry::{export_layer, Telemetry, TelemetrySettings};
use compactd_testkit::otlp::Receiver;
use compactd_testkit::synth::{thread, SynthParams};
use tracing_subscriber::layer::SubscriberExt as _;

/// Median Compact latency over `calls` calls against a fresh in-process server.
async fn run(calls: usize) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = ServerSettings {
        data_dir: dir.path().join("data"),
        auth: AuthConfig {
            dev: true,
            ..AuthConfig::default()
        },
        access_log: compactd::server::access::AccessLogSink::Off,
        ..ServerSettings::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(compactd::server::serve(settings, listener, async {
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
    let _ = stop.send(());
    let _ = server.await;
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let calls = if bench { 120 } else { 3 };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    // Baseline: no subscriber at all.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let off = rt.block_on(run(calls));

    // Export: spans and events to a local OTLP receiver.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (on, exported) = rt.block_on(async {
        let (sink, endpoint) = Receiver::start().await;
        let provider = Telemetry::provider(&TelemetrySettings {
            otlp_endpoint: Some(endpoint),
            ..TelemetrySettings::default()
        })
        .expect("exporter")
        .expect("endpoint");
        let subscriber = tracing_subscriber::registry().with(export_layer(&provider));
        let guard = tracing::subscriber::set_default(subscriber);
        let on = run(calls).await;
        drop(guard);
        let flusher = provider.clone();
        tokio::task::spawn_blocking(move || flusher.force_flush())
            .await
            .expect("join")
            .expect("flush");
        (on, sink.spans().len())
    });
    println!(
        "telemetry_overhead: median Compact over gRPC, {calls} calls each, 120-turn thread, current-thread runtime"
    );
    println!("  no subscriber (baseline)   {:8.2} ms  1.00x", ms(off));
    println!(
        "  OTLP export on             {:8.2} ms  {:.3}x  ({exported} spans exported)",
        ms(on),
        ms(on) / ms(off)
    );
}
