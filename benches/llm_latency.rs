//! What an LLM summarizer costs a Compact call, against the extractive
//! summarizer in the same run: the endpoint is testkit's local fake with a
//! fixed 2 s delay per answer (a slow model), so the numbers show the
//! latency each mode adds, not a model's speed.
//!
//! `cargo bench --bench llm_latency` (set `LLM_BENCH_DELAY_MS` to change the delay).

use std::time::{Duration, Instant};

use compactd::app::{App, CompactCommand, LlmSummaries};
use compactd::llm::{LlmSummarizer, SummarizerKind, SummarizerSettings, SummaryMode};
use compactd::reduce::Policy;
use compactd::security::SecurityContext;
use compactd_testkit::fake_llm::{Behavior, FakeLlm};
use compactd_testkit::synth::{thread, SynthParams};

const RUNS: usize = 3;

fn app(llm: Option<SummarizerSettings>) -> App {
    compactd_testkit::memory_app(compactd::app::Extensions {
        llm: llm.map(|s| LlmSummaries::new(LlmSummarizer::new(s).expect("settings"))),
        ..Default::default()
    })
}

fn command(run: usize) -> CompactCommand {
    let mut t = thread(&SynthParams {
        seed: 7,
        turns: 40,
        tool_density: 0.8,
        max_output_lines: 60,
        protected: 0,
    });
    // A new thread each run: no plan to reuse, no cached summary.
    t.id = format!("bench-{run}");
    let mut p = Policy::default();
    p.enable.externalize = false;
    p.enable.clear = false;
    let mut cmd = CompactCommand::new(t, p);
    cmd.max_input_tokens = Some(8_000);
    cmd
}

/// Mean Compact latency over `RUNS`, and (background) the mean time until
/// the LLM summaries were committed.
async fn measure(app: &App) -> (Duration, Option<Duration>) {
    let ctx = SecurityContext::dev();
    let (mut call, mut ready) = (Duration::ZERO, Duration::ZERO);
    for run in 0..RUNS {
        let start = Instant::now();
        let out = app.compact(&ctx, command(run)).await.expect("compacts");
        call += start.elapsed();
        assert!(!out.plan.summarizations.is_empty(), "nothing summarized");
        app.drain_summaries(Duration::from_secs(60)).await;
        ready += start.elapsed();
    }
    let n = RUNS as u32;
    let background = app
        .llm_summaries()
        .is_some_and(|l| l.settings().mode == SummaryMode::Background);
    (call / n, background.then_some(ready / n))
}

fn main() {
    let delay = std::env::var("LLM_BENCH_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000u64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let fake = FakeLlm::start(Behavior::Delay(Duration::from_millis(delay)))
            .await
            .expect("fake llm");
        let settings = |mode| SummarizerSettings {
            kind: SummarizerKind::Llm,
            base_url: fake.base_url(),
            api_key_env: None,
            timeout_ms: delay * 3,
            mode,
            ..SummarizerSettings::default()
        };
        // Warm-up: tokenizer tables, allocator, code paths.
        measure(&app(None)).await;
        let (base, _) = measure(&app(None)).await;
        let (sync, _) = measure(&app(Some(settings(SummaryMode::Sync)))).await;
        let (bg, ready) = measure(&app(Some(settings(SummaryMode::Background)))).await;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let ratio = |d: Duration| ms(d) / ms(base).max(1e-9);
        println!(
            "llm_latency: fake endpoint delay {delay} ms, {RUNS} runs each, {} requests",
            fake.request_count()
        );
        println!(
            "  extractive only (baseline)     {:9.1} ms  1.00x",
            ms(base)
        );
        println!(
            "  llm sync                       {:9.1} ms  {:.2}x",
            ms(sync),
            ratio(sync)
        );
        println!(
            "  llm background: Compact        {:9.1} ms  {:.2}x",
            ms(bg),
            ratio(bg)
        );
        if let Some(r) = ready {
            println!(
                "  llm background: summary ready  {:9.1} ms  {:.2}x",
                ms(r),
                ratio(r)
            );
        }
    });
}
