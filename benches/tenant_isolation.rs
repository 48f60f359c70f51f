//! A noisy tenant against a quiet one, on one server, in one run.
//!
//! `cargo bench --bench tenant_isolation` (about 30 s)
//!
//! Starts the real server in-process on 127.0.0.1:0 with two API-key
//! tenants; the server, the quiet client and the noisy client each run on
//! their own tokio runtime, as separate processes would. The quiet tenant
//! makes one call every 40 ms (about 10 MB/s of requests): `Render` with
//! `compact_first` of its 500-message thread, unchanged since the last turn
//! (the per-turn call of a live agent). The noisy tenant runs 4 workers
//! (backing off exponentially, 25 ms to 400 ms, when refused), each
//! compacting a fresh 1,000-message thread per call (a new thread id every
//! time, so nothing is reused), as fast as the server lets it.
//!
//! Four phases, the same quiet workload in each:
//! - **alone**: the quiet tenant alone (the baseline);
//! - **noisy, c=1 + bytes**: per-tenant concurrency 1 (half the cores of a
//!   2-core replica) and 16 MiB/s of request bytes per tenant;
//! - **noisy, c=1**: concurrency 1, the other limits at their defaults;
//! - **noisy, unlimited**: per-tenant limits off (the named comparison: what
//!   isolation buys).
//!
//! Printed: the quiet tenant's p50/p90 per phase and the ratio to "alone",
//! and the noisy tenant's completed and refused calls. No assertion: the
//! numbers go into docs/performance.md and the closing note. Without `--bench` (under
//! `cargo test --all-targets`) it runs a few calls per phase as a smoke test.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::Request;

use compactd::client::connect;
use compactd::proto::pb;
use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::security::{hash_api_key, ApiKeyEntry};
use compactd::server::access::AccessLogSink;
use compactd::settings::Settings;
use compactd_testkit::synth::{thread, SynthParams};

const QUIET_KEY: &str = "quiet-key-0123456789";
const NOISY_KEY: &str = "noisy-key-0123456789";
const NOISY_WORKERS: usize = 4;
/// The quiet tenant's pace.
const QUIET_INTERVAL: Duration = Duration::from_millis(40);

fn key(secret: &str, tenant: &str) -> ApiKeyEntry {
    ApiKeyEntry {
        sha256: hash_api_key(secret),
        tenant: tenant.into(),
        requester: format!("{tenant}-bench"),
        permissions: vec!["compact".into(), "render".into()],
    }
}

fn synth(seed: u64, turns: u32, messages: usize) -> pb::Thread {
    let t = thread(&SynthParams {
        seed,
        turns,
        tool_density: 0.6,
        max_output_lines: 120,
        protected: 2,
    });
    let mut t = pb::Thread::from(&t);
    let mut cut = messages.min(t.messages.len()) - 1;
    while cut > 0 && t.messages[cut].role != pb::Role::User as i32 {
        cut -= 1;
    }
    t.messages.truncate(cut + 1);
    t
}

fn with_key<T>(msg: T, secret: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("x-api-key", MetadataValue::try_from(secret).expect("key"));
    r
}

/// Per-tenant limits of a phase.
#[derive(Clone, Copy)]
enum Limits {
    /// Concurrency 1 and 16 MiB/s of request bytes per tenant (burst 32 MiB).
    Bytes,
    /// Concurrency 1 only.
    Concurrency,
    /// None.
    Off,
}

/// The server, the quiet client and the noisy client each run on their own
/// runtime, as separate processes would: a 1 MB encode in the noisy client
/// must not hold up a worker the quiet client or the server polls on.
#[derive(Clone)]
struct Runtimes {
    server: tokio::runtime::Handle,
    noise: tokio::runtime::Handle,
}

async fn start(
    limits: Limits,
    rt: &Runtimes,
) -> (std::net::SocketAddr, oneshot::Sender<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().join("data"),
        access_log: AccessLogSink::Off,
        ..Settings::default()
    };
    settings.auth.api_keys = vec![key(QUIET_KEY, "quiet"), key(NOISY_KEY, "noisy")];
    if let Limits::Concurrency | Limits::Bytes = limits {
        // Half the cores of a 2-core replica.
        settings.per_tenant_concurrency = 1;
    }
    if let Limits::Bytes = limits {
        // What one tenant may send to a 2-core replica; the quiet tenant's
        // paced calls stay well inside it.
        settings.per_tenant_bytes_per_second = 16.0 * 1024.0 * 1024.0;
        settings.per_tenant_bytes_burst = 32 * 1024 * 1024;
    }
    if let Limits::Off = limits {
        settings.per_tenant_concurrency = 0;
        settings.per_tenant_rps = 0.0;
        settings.per_tenant_bytes_per_second = 0.0;
        settings.per_tenant_messages_per_second = 0.0;
    }
    let std_listener = std::net::TcpListener::bind(settings.listen).expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    rt.server.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
        compactd::startup::serve(settings, listener, async {
            let _ = stopped.await;
        })
        .await
    });
    (addr, stop, dir)
}

/// The quiet tenant's sequential calls; sorted latencies.
async fn quiet(
    client: &CompactionServiceClient<Channel>,
    req: &pb::RenderRequest,
    calls: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(calls);
    // One call every QUIET_INTERVAL, like a busy agent platform's tenant
    // (about 10 MB/s of requests), not a tight loop.
    let mut tick = tokio::time::interval(QUIET_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..calls {
        tick.tick().await;
        let t = Instant::now();
        client
            .clone()
            .render(with_key(req.clone(), QUIET_KEY))
            .await
            .expect("quiet render");
        out.push(t.elapsed());
    }
    out.sort();
    out
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Noise {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn noise(
    client: &CompactionServiceClient<Channel>,
    base: &pb::Thread,
    rt: &tokio::runtime::Handle,
) -> Noise {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let tasks = (0..NOISY_WORKERS)
        .map(|w| {
            let (client, base) = (client.clone(), base.clone());
            let (stop, done, refused) =
                (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&refused));
            rt.spawn(async move {
                let mut n = 0usize;
                let mut backoff = Duration::from_millis(25);
                while !stop.load(Ordering::Relaxed) {
                    let mut t = base.clone();
                    t.id = format!("noise-{w}-{n}");
                    n += 1;
                    let req = pb::CompactRequest {
                        thread: Some(t),
                        model: "gpt-4o".into(),
                        max_input_tokens: 32_000,
                        ..Default::default()
                    };
                    match client.clone().compact(with_key(req, NOISY_KEY)).await {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            backoff = Duration::from_millis(25);
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            // Exponential backoff on RESOURCE_EXHAUSTED, as a
                            // gRPC retry policy does (25 ms doubling to 400 ms).
                            // Every attempt costs this process a 1 MB clone
                            // and encode on the cores the server shares, so a
                            // hot retry loop would measure the client.
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_millis(400));
                        }
                    }
                }
            })
        })
        .collect();
    Noise {
        stop,
        done,
        refused,
        tasks,
    }
}

/// The same in every phase.
struct Workload {
    calls: usize,
    quiet_thread: pb::Thread,
    noisy_thread: pb::Thread,
}

async fn phase(
    rt: &Runtimes,
    w: &Workload,
    name: &str,
    limits: Limits,
    noisy: bool,
    alone: Option<Duration>,
) -> Duration {
    let (calls, quiet_thread, noisy_thread) = (w.calls, &w.quiet_thread, &w.noisy_thread);
    let (addr, stop, _dir) = start(limits, rt).await;
    let client = connect(&format!("http://{addr}")).await.expect("connect");
    // The noisy client's channel lives on its runtime.
    let noisy_addr = format!("http://{addr}");
    let noisy_client = rt
        .noise
        .spawn(async move { connect(&noisy_addr).await.expect("connect") })
        .await
        .expect("noisy connect");
    let req = pb::RenderRequest {
        thread: Some(quiet_thread.clone()),
        compact_first: true,
        model: "gpt-4o".into(),
        max_input_tokens: 32_000,
        format: pb::OutputFormat::OpenaiChat as i32,
        ..Default::default()
    };
    // Warm: the quiet thread's plan is committed and its counts cached.
    quiet(&client, &req, 5).await;
    let n = noisy.then(|| noise(&noisy_client, noisy_thread, &rt.noise));
    if n.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let started = Instant::now();
    let lat = quiet(&client, &req, calls).await;
    let wall = started.elapsed();
    let p50 = pct(&lat, 0.5);
    let ratio = alone.map_or("1.00".to_string(), |a| {
        format!("{:.2}", p50.as_secs_f64() / a.as_secs_f64())
    });
    let (done, refused) = match n {
        Some(n) => {
            n.stop.store(true, Ordering::Relaxed);
            for t in n.tasks {
                let _ = t.await;
            }
            (
                n.done.load(Ordering::Relaxed).to_string(),
                n.refused.load(Ordering::Relaxed).to_string(),
            )
        }
        None => ("-".into(), "-".into()),
    };
    println!(
        "| {name:<17} | {:>7} | {:>7} | {ratio:>8} | {:>12} | {:>13} |",
        ms(p50),
        ms(pct(&lat, 0.9)),
        format!("{done} in {:.1}s", wall.as_secs_f64()),
        refused,
    );
    let _ = stop.send(());
    p50
}

async fn bench(full: bool, rt: &Runtimes) {
    let calls = if full { 150 } else { 5 };
    let quiet_thread = synth(3, 200, 500);
    let noisy_thread = synth(9, 400, if full { 1000 } else { 200 });
    println!(
        "tenant_isolation: quiet = Render(compact_first) of an unchanged {}-message thread, one at a time; noisy = {NOISY_WORKERS} workers compacting fresh {}-message threads ({:.0} KB each)",
        quiet_thread.messages.len(),
        noisy_thread.messages.len(),
        prost::Message::encoded_len(&noisy_thread) as f64 / 1024.0
    );
    println!(
        "| phase             | p50 ms  | p90 ms  | p50/alone | noisy done   | noisy refused |"
    );
    println!(
        "|-------------------|---------|---------|-----------|--------------|---------------|"
    );
    let w = Workload {
        calls,
        quiet_thread,
        noisy_thread,
    };
    let alone = phase(rt, &w, "alone", Limits::Bytes, false, None).await;
    for (name, limits) in [
        ("noisy, c=1 + bytes", Limits::Bytes),
        ("noisy, c=1", Limits::Concurrency),
        ("noisy, unlimited", Limits::Off),
    ] {
        phase(rt, &w, name, limits, true, Some(alone)).await;
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let runtime = |workers: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("runtime")
    };
    // The server gets a default-sized runtime; each client one worker.
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let (server, noise, quiet) = (runtime(cores), runtime(1), runtime(1));
    let rt = Runtimes {
        server: server.handle().clone(),
        noise: noise.handle().clone(),
    };
    quiet.block_on(bench(full, &rt));
    noise.shutdown_background();
    server.shutdown_background();
}
