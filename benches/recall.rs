//! Recall search over about 2 MB of evicted text (a generated thread's
//! messages as passages), against the named baseline of a case-insensitive
//! scan of every passage for the query's words, in one run.
//!
//! `cargo bench --bench recall`. Target: a warm query (index built) ≤ 20 ms.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};

use compactd::recall::{Passage, RecallIndex};
use compactd_testkit::synth::{thread, SynthParams};

/// About 2 MB of passages: every message of a generated thread, cut into
/// windows as the index cuts evicted messages.
fn passages() -> Vec<Passage> {
    let t = thread(&SynthParams {
        seed: 23,
        turns: 860,
        tool_density: 0.75,
        max_output_lines: 84,
        protected: 2,
    });
    let mut out = Vec::new();
    for m in &t.messages {
        let text = m.text();
        for (k, chunk) in text.lines().collect::<Vec<_>>().chunks(3).enumerate() {
            out.push(Passage {
                message_id: m.id.clone(),
                artifact_id: None,
                line: u32::try_from(k * 3 + 1).unwrap_or(u32::MAX),
                text: chunk.join("\n"),
                sensitivity: compactd::model::Sensitivity::Internal,
            });
        }
    }
    let bytes: usize = out.iter().map(|p| p.text.len()).sum();
    eprintln!("recall bench: {} passages, {bytes} bytes", out.len());
    out
}

/// The baseline: grep-like ranking, every passage lowercased and scanned
/// for each query word, the five that contain the most words kept.
fn scan<'a>(passages: &'a [Passage], query: &str) -> Vec<&'a Passage> {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut scored: Vec<(usize, &Passage)> = passages
        .iter()
        .map(|p| {
            let text = p.text.to_lowercase();
            (
                words.iter().filter(|w| text.contains(w.as_str())).count(),
                p,
            )
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    scored.into_iter().take(5).map(|(_, p)| p).collect()
}

fn bench(c: &mut Criterion) {
    let passages = passages();
    let query = "which worker reported the timeout in batch 412 and what was the error code";
    let mut g = c.benchmark_group("recall_2mb");
    g.sample_size(20);
    g.bench_function("baseline_scan", |b| {
        b.iter(|| black_box(scan(&passages, black_box(query))).len())
    });
    let index = RecallIndex::of(passages.clone());
    g.bench_function("search_warm", |b| {
        b.iter(|| black_box(index.search(black_box(query), 5)).len())
    });
    g.bench_function("build", |b| {
        b.iter(|| black_box(RecallIndex::of(passages.clone())).len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
