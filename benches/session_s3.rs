//! Append-session turns with the session in S3 + KMS (moto), against the
//! same turns with the session on the local filesystem (the embedded
//! default) in the same run.
//!
//! `cargo bench --bench session_s3` (about a minute; needs moto in the
//! test venv, as `scripts/test.sh` installs it)
//!
//! Two in-process servers: one with plans, artifacts and sessions on one
//! moto bucket with KMS data keys, one on a temp data directory. Each
//! starts an append session with the first turns of a generated agent
//! thread, then appends the rest one turn at a time (`Render` with
//! `compact_first`, OpenAI format), alternating servers turn by turn so
//! both see the same machine. Printed: p50 and mean per turn of each and
//! their ratio. No assertion. Without `--bench` it runs a few turns as a
//! smoke test.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use compactd::proto::pb;
use compactd::store::backend::ArtifactsSettings;
use compactd_testkit::synth::{thread, SynthParams};

#[path = "common/server.rs"]
mod server;

use server::Client;

struct Server {
    name: &'static str,
    client: Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn start(name: &'static str, artifacts: ArtifactsSettings) -> Server {
    let (client, stop, dir) = server::start(&artifacts).await;
    Server {
        name,
        client,
        _stop: stop,
        _dir: dir,
    }
}

fn render(thread: Option<pb::Thread>, append: Option<pb::ThreadAppend>) -> pb::RenderRequest {
    pb::RenderRequest {
        start_session: thread.is_some(),
        thread,
        append,
        compact_first: true,
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 32_000,
        ..Default::default()
    }
}

/// The thread's messages grouped by turn, in order.
fn turns(t: &pb::Thread) -> Vec<Vec<pb::Message>> {
    let mut out: Vec<Vec<pb::Message>> = Vec::new();
    for m in &t.messages {
        match out.last_mut() {
            Some(last) if last.last().is_some_and(|l| l.turn == m.turn) => last.push(m.clone()),
            _ => out.push(vec![m.clone()]),
        }
    }
    out
}

async fn bench(full: bool) {
    let (moto, s3, key) = server::moto_with_key().await;
    let on_s3 = server::on_bucket(&moto, &s3, &key, "bench-sessions").await;
    let mut servers = [
        start("S3 + KMS (moto)", on_s3).await,
        start("filesystem", ArtifactsSettings::default()).await,
    ];
    let appended = if full { 150 } else { 4 };
    let all = turns(&pb::Thread::from(&thread(&SynthParams {
        seed: 25,
        turns: 60 + appended,
        tool_density: 0.8,
        max_output_lines: 60,
        protected: 2,
    })));
    let first = all.len() - appended as usize;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); servers.len()];
    let mut versions = Vec::new();
    for s in &mut servers {
        let whole = pb::Thread {
            id: "bench-session".into(),
            messages: all[..first].concat(),
        };
        let out = s
            .client
            .render(render(Some(whole), None))
            .await
            .expect("start")
            .into_inner();
        versions.push(out.session.expect("session").version);
    }
    for turn in &all[first..] {
        for (k, s) in servers.iter_mut().enumerate() {
            let append = pb::ThreadAppend {
                thread_id: "bench-session".into(),
                base_version: versions[k],
                messages: turn.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            let out = s
                .client
                .render(render(None, Some(append)))
                .await
                .expect("append")
                .into_inner();
            times[k].push(t.elapsed());
            versions[k] = out.session.expect("session").version;
        }
    }
    let mean = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64;
    let base = (
        server::percentile(&mut times[1], 0.5).as_secs_f64(),
        mean(&times[1]),
    );
    println!(
        "append session: {first} turns started, {appended} appended one at a time; max_input_tokens 32000"
    );
    println!("| session store | p50 ms | mean ms | p50 vs filesystem | mean vs filesystem |");
    println!("|---|---:|---:|---:|---:|");
    for (k, s) in servers.iter().enumerate() {
        let p50 = server::percentile(&mut times[k], 0.5).as_secs_f64();
        let m = mean(&times[k]);
        println!(
            "| {} | {:.2} | {:.2} | {:.2}x | {:.2}x |",
            s.name,
            p50 * 1e3,
            m * 1e3,
            p50 / base.0,
            m / base.1
        );
    }
}

fn main() {
    server::main(bench);
}
