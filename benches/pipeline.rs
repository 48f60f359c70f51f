//! Compact+render on a generated 1,000-message, ~128k-token thread, against
//! the named baseline of a bare token count of the same thread, in one run.
//!
//! `cargo bench --bench pipeline`. Targets: cold ≤ 1.3× the bare count,
//! warm (ledger populated) ≤ 5% of it.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

use compactd::model::Thread;
use compactd::reduce::{compact, CompactRequest, Engine, Memo, Policy};
use compactd::render::{render, RenderInput, RenderOptions};
use compactd::summarize::ExtractiveSummarizer;
use compactd::tokens::{o200k, TokenCounter, TokenLedger};
use compactd_testkit::synth::{thread, SynthParams};

/// About 1,000 messages and 128k tokens (printed once so the docs/performance.md numbers
/// can be checked).
fn bench_thread(counter: &dyn TokenCounter) -> Thread {
    let t = thread(&SynthParams {
        seed: 11,
        turns: 258,
        tool_density: 0.75,
        max_output_lines: 84,
        protected: 2,
    });
    let tokens: usize = t.messages.iter().map(|m| counter.count(&m.text())).sum();
    eprintln!(
        "bench thread: {} messages, {} content tokens",
        t.messages.len(),
        tokens
    );
    t
}

/// The baseline: tokenize every message once, nothing else.
fn bare_count(counter: &dyn TokenCounter, t: &Thread) -> usize {
    t.messages.iter().map(|m| counter.count(&m.text())).sum()
}

/// What a caller does per turn: compact, bind artifact ids, render, count.
fn compact_render(
    t: &Thread,
    engine: &Engine<'_>,
    policy: &Policy,
    observations: &BTreeMap<String, compactd::model::DeterminismMetadata>,
) -> u32 {
    let req = CompactRequest {
        thread: t,
        policy,
        max_input_tokens: 96_000,
        system: Some("You are a careful engineering agent."),
        tools: &[],
        workspace: None,
        previous: None,
        observations,
        skip_aggressive: false,
        limits: Default::default(),
        target: compactd::provider::Format::openai_chat_target(),
    };
    let mut c = compact(&req, engine).expect("bench thread compacts");
    let ids: BTreeMap<String, String> = c
        .pending
        .iter()
        .enumerate()
        .map(|(i, a)| (a.placeholder.clone(), format!("art_{i:032x}")))
        .collect();
    let options = policy.render.clone();
    // Exact tokens after binding (only pointers and summaries are recounted).
    let tokens = c.bind(&ids, t, &options, engine);
    let request = render(
        t,
        &c.plan,
        &RenderInput {
            system: req.system,
            tools: &[],
            rehydrated: &[],
            options: &options,
            omit_pending_calls: false,
            summaries: None,
            workspace: None,
        },
    );
    black_box(&request);
    tokens
}

fn benches(c: &mut Criterion) {
    let counter = o200k();
    let t = bench_thread(counter.as_ref());
    let policy = Policy::default();
    let summarizer = ExtractiveSummarizer;
    let observations = BTreeMap::new();
    let mut g = c.benchmark_group("thread_1000_messages");
    g.sample_size(20);
    g.bench_function("baseline_bare_count", |b| {
        b.iter(|| black_box(bare_count(counter.as_ref(), &t)))
    });
    g.bench_function("compact_render_cold", |b| {
        b.iter_batched(
            || (TokenLedger::new(1 << 20), Memo::default()),
            |(ledger, memo)| {
                let engine = Engine {
                    cancel: compactd::reduce::Cancel::never(),
                    redactor: compactd::redact::Redactor::standard(),
                    counter: counter.as_ref(),
                    ledger: &ledger,
                    summarizer: &summarizer,
                    memo: &memo,
                };
                black_box(compact_render(&t, &engine, &policy, &observations))
            },
            BatchSize::PerIteration,
        )
    });
    let ledger = TokenLedger::new(1 << 20);
    let memo = Memo::default();
    let engine = Engine {
        cancel: compactd::reduce::Cancel::never(),
        redactor: compactd::redact::Redactor::standard(),
        counter: counter.as_ref(),
        ledger: &ledger,
        summarizer: &summarizer,
        memo: &memo,
    };
    let tokens = compact_render(&t, &engine, &policy, &observations);
    eprintln!("rendered request: {tokens} tokens");
    g.bench_function("compact_render_warm", |b| {
        b.iter(|| black_box(compact_render(&t, &engine, &policy, &observations)))
    });
    // The same with tool output rendered as it is (no data blocks, no cap):
    // what the injection defences cost per warm call.
    let plain = Policy {
        render: RenderOptions {
            delimit_tool_output: false,
            tool_result_max_chars: None,
            ..RenderOptions::default()
        },
        ..Policy::default()
    };
    compact_render(&t, &engine, &plain, &observations);
    g.bench_function("compact_render_warm_undelimited", |b| {
        b.iter(|| black_box(compact_render(&t, &engine, &plain, &observations)))
    });
    g.finish();
}

criterion_group!(pipeline, benches);
criterion_main!(pipeline);
