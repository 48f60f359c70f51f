//! What archiving every eviction costs per compaction, on S3 + KMS (moto).
//!
//! `cargo bench --bench archive_cost` (about a minute; needs moto in the
//! test venv, as `scripts/test.sh` installs it)
//!
//! One in-process server per mode, each on its own bucket of one moto
//! server: artifacts and plans on S3, data keys from KMS. Each call
//! compacts a fresh copy of the same agent thread (a new thread id, so
//! nothing is reused) with `Compact`, archiving on and then off (the named
//! baseline), alternating so both see the same machine. Printed per thread
//! shape and budget: p50 latency of each mode and their ratio, S3 PUTs per
//! compaction (artifacts + the plan) and bytes stored per compaction. No
//! assertion. Without `--bench` it runs two calls per mode as a smoke test.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use compactd::proto::pb;
use compactd_testkit::moto::Moto;
use compactd_testkit::synth::{thread, SynthParams};

#[path = "common/server.rs"]
mod server;

struct Mode {
    name: &'static str,
    archive: bool,
    bucket: &'static str,
    client: server::Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn start(
    moto: &Moto,
    s3: &aws_sdk_s3::Client,
    key: &str,
    name: &'static str,
    bucket: &'static str,
    archive: bool,
) -> Mode {
    let artifacts = server::on_bucket(moto, s3, key, bucket).await;
    let (client, stop, dir) = server::start(&artifacts).await;
    Mode {
        name,
        archive,
        bucket,
        client,
        _stop: stop,
        _dir: dir,
    }
}

/// Objects and bytes in `bucket` now.
async fn usage(s3: &aws_sdk_s3::Client, bucket: &str) -> (u64, u64) {
    let (mut n, mut bytes) = (0, 0);
    let mut token = None;
    loop {
        let out = s3
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .expect("list");
        for o in out.contents() {
            n += 1;
            bytes += o.size().unwrap_or(0) as u64;
        }
        match out.next_continuation_token {
            Some(t) if out.is_truncated == Some(true) => token = Some(t),
            _ => return (n, bytes),
        }
    }
}

async fn bench(full: bool) {
    let (moto, s3, key) = server::moto_with_key().await;
    let mut modes = vec![
        start(&moto, &s3, &key, "archive on", "bench-archive-on", true).await,
        start(&moto, &s3, &key, "archive off", "bench-archive-off", false).await,
    ];
    let calls = if full { 15 } else { 2 };
    println!(
        "{:<44} {:>12} {:>10} {:>12} {:>12}",
        "thread / budget / mode", "p50", "vs off", "PUTs/call", "KiB/call"
    );
    for (turns, budget) in [(240u32, 64_000u32), (240, 16_000), (60, 16_000)] {
        let t = pb::Thread::from(&thread(&SynthParams {
            seed: 480,
            turns,
            tool_density: 0.8,
            max_output_lines: 400,
            protected: 2,
        }));
        let shape = format!("{} msgs", t.messages.len());
        let mut p50 = Vec::new();
        let mut rows = Vec::new();
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
        let before: Vec<(u64, u64)> = {
            let mut v = Vec::new();
            for m in &modes {
                v.push(usage(&s3, m.bucket).await);
            }
            v
        };
        for call in 0..calls {
            for (k, m) in modes.iter_mut().enumerate() {
                let mut thread = t.clone();
                thread.id = format!("{}-{turns}-{budget}-{call}", m.name.replace(' ', "-"));
                let req = pb::CompactRequest {
                    thread: Some(thread),
                    max_input_tokens: budget,
                    policy: Some(pb::PolicyOverrides {
                        enable_archive: Some(m.archive),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                let start = Instant::now();
                m.client.compact(req).await.expect("compact");
                times[k].push(start.elapsed());
            }
        }
        for (k, m) in modes.iter().enumerate() {
            let (n, bytes) = usage(&s3, m.bucket).await;
            let puts = (n - before[k].0) as f64 / calls as f64;
            let kib = (bytes - before[k].1) as f64 / calls as f64 / 1024.0;
            let median = server::percentile(&mut times[k], 0.5);
            p50.push(median);
            rows.push((m.name, median, puts, kib));
        }
        let off = p50[1].as_secs_f64();
        for (name, median, puts, kib) in rows {
            println!(
                "{:<44} {:>10.1}ms {:>9.2}x {:>12.1} {:>12.0}",
                format!("{shape} / {}k / {name}", budget / 1000),
                median.as_secs_f64() * 1000.0,
                median.as_secs_f64() / off,
                puts,
                kib
            );
        }
    }
}

fn main() {
    server::main(bench);
}
