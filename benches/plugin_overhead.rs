//! What a strategy plugin costs per call: Compact of the same thread with
//! the C no-op plugin configured (it proposes nothing, so everything it
//! costs is the ABI: the request encoded, a call thread, the answer
//! decoded) against the same pipeline without it, in the same run.
//!
//! `cargo bench --bench plugin_overhead`

use std::sync::Arc;
use std::time::Duration;

use compactd::app::{App, CompactCommand, Extensions};
use compactd::plugin::{load_all, PluginSettings, PluginsSettings};
use compactd::reduce::Policy;
use compactd::security::SecurityContext;
use compactd_testkit::plugins::{build_c_plugin, PluginDir};
use compactd_testkit::synth::{thread, SynthParams};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn app(plugins: Vec<Arc<compactd::plugin::LoadedPlugin>>) -> App {
    compactd_testkit::memory_app(Extensions {
        plugins,
        ..Default::default()
    })
}

fn bench(c: &mut Criterion) {
    let build = tempfile::tempdir().expect("tempdir");
    let lib = build_c_plugin(build.path(), "c_noop", &[]);
    let dir = PluginDir::install(&[("libc_noop.so", &lib)]);
    let plugins = load_all(&PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![PluginSettings {
            name: "c-noop".into(),
            path: "libc_noop.so".into(),
            sha256: dir.sha256("libc_noop.so"),
            after: "compress".into(),
            aggressiveness: 50,
            config: serde_json::json!({}),
            timeout_ms: 1_000,
            required: false,
        }],
    })
    .expect("load the no-op plugin");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let t = thread(&SynthParams {
        seed: 11,
        turns: 120,
        tool_density: 0.8,
        max_output_lines: 120,
        protected: 0,
    });
    let mut group = c.benchmark_group("plugin_overhead");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(6));
    for (name, plugins) in [
        ("baseline_no_plugin", Vec::new()),
        ("c_noop_plugin", plugins),
    ] {
        let app = app(plugins);
        let mut run = 0u64;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                // A new thread id each time: a real compaction, not a reuse.
                run += 1;
                let mut t = t.clone();
                t.id = format!("bench-{run}");
                let mut cmd = CompactCommand::new(t, Policy::default());
                cmd.max_input_tokens = Some(32_000);
                rt.block_on(app.compact(&SecurityContext::dev(), cmd))
                    .expect("compacts")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
