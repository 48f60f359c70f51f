//! Token counting throughput: bpe-openai vs tiktoken-rs per encoding, the
//! estimator, the ledger's cold vs warm cost on a 1000-message thread, and
//! the prompt-cache trace of a body none of whose units were sent before
//! (what a render after a compaction counts).
//!
//! `cargo bench --bench tokens` (all), or filter: `cargo bench --bench tokens -- backend`.

use std::hint::black_box;
use std::time::Duration;

use compactd::render::prefix::to_json_traced;
use compactd::tokens::{cl100k, o200k, Estimator, TokenCounter, TokenLedger};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};

#[path = "../src/tokens/corpus.rs"]
mod corpus;

/// Bytes of each corpus part (prose, code, json, unicode, ops): ~5 MB in all.
const PART_BYTES: usize = 1 << 20;

fn mixed() -> String {
    corpus::parts(PART_BYTES)
        .into_iter()
        .map(|p| p.text)
        .collect()
}

fn backends(c: &mut Criterion) {
    let text = mixed();
    let tt_o200k = tiktoken_rs::o200k_base_singleton();
    let tt_cl100k = tiktoken_rs::cl100k_base_singleton();
    let (o, cl) = (o200k(), cl100k());
    assert_eq!(o.count(&text), tt_o200k.encode_ordinary(&text).len());
    assert_eq!(cl.count(&text), tt_cl100k.encode_ordinary(&text).len());

    let mut g = c.benchmark_group("backend");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("o200k/bpe-openai", |b| b.iter(|| o.count(black_box(&text))));
    g.bench_function("o200k/tiktoken-rs", |b| {
        b.iter(|| tt_o200k.encode_ordinary(black_box(&text)).len())
    });
    g.bench_function("cl100k/bpe-openai", |b| {
        b.iter(|| cl.count(black_box(&text)))
    });
    g.bench_function("cl100k/tiktoken-rs", |b| {
        b.iter(|| tt_cl100k.encode_ordinary(black_box(&text)).len())
    });
    let e = Estimator::default();
    g.bench_function("estimator", |b| b.iter(|| e.count(black_box(&text))));
    g.finish();
}

/// Per content kind, o200k only: where each backend is fast or slow.
fn by_kind(c: &mut Criterion) {
    let tt = tiktoken_rs::o200k_base_singleton();
    let o = o200k();
    let mut g = c.benchmark_group("kind");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for part in corpus::parts(PART_BYTES / 4) {
        g.throughput(Throughput::Bytes(part.text.len() as u64));
        g.bench_function(format!("{}/bpe-openai", part.name), |b| {
            b.iter(|| o.count(black_box(&part.text)))
        });
        g.bench_function(format!("{}/tiktoken-rs", part.name), |b| {
            b.iter(|| tt.encode_ordinary(black_box(&part.text)).len())
        });
    }
    g.finish();
}

/// A ~128k-token thread of 1000 messages, counted message by message.
fn ledger(c: &mut Criterion) {
    let o = o200k();
    let msgs = corpus::messages(1000, 42);
    let tokens: usize = msgs.iter().map(|m| o.count(m)).sum();
    let bytes: usize = msgs.iter().map(String::len).sum();
    eprintln!(
        "thread: {} messages, {bytes} bytes, {tokens} o200k tokens",
        msgs.len()
    );

    let mut g = c.benchmark_group("ledger");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("thread/no-ledger", |b| {
        b.iter(|| msgs.iter().map(|m| o.count(black_box(m))).sum::<usize>())
    });
    g.bench_function("thread/cold", |b| {
        b.iter_batched(
            || TokenLedger::new(1 << 16),
            |l| msgs.iter().map(|m| l.count(o.as_ref(), m)).sum::<u32>(),
            BatchSize::PerIteration,
        )
    });
    let warm = TokenLedger::new(1 << 16);
    for m in &msgs {
        warm.count(o.as_ref(), m);
    }
    g.sampling_mode(SamplingMode::Auto);
    g.bench_function("thread/warm", |b| {
        b.iter(|| {
            msgs.iter()
                .map(|m| warm.count(o.as_ref(), black_box(m)))
                .sum::<u32>()
        })
    });
    g.finish();

    // Small texts: direct count vs a warm hit of the shortest cached size,
    // which is what caching them would cost (hashing 16 bytes or 64 is the
    // same few nanoseconds; the lock and lookup dominate).
    let mut g = c.benchmark_group("small");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let sample = &msgs
        .iter()
        .find(|m| m.len() > 2048)
        .expect("a long message")[..];
    for n in [1, 4, 8, 16, 32, 64, 128, 256, 2048] {
        let mut end = n;
        while !sample.is_char_boundary(end) {
            end += 1;
        }
        let t = &sample[..end];
        g.bench_function(format!("count/{n}B"), |b| b.iter(|| o.count(black_box(t))));
        if n >= compactd::tokens::MIN_CACHED_BYTES {
            let l = TokenLedger::new(1024);
            l.count(o.as_ref(), t);
            g.bench_function(format!("ledger-hit/{n}B"), |b| {
                b.iter(|| l.count(o.as_ref(), black_box(t)))
            });
        }
    }
    g.bench_function("xxh3_128/2048B", |b| {
        let t = &sample.as_bytes()[..2048];
        b.iter(|| xxhash_rust::xxh3::xxh3_128(black_box(t)))
    });
    g.finish();
}

/// The body's prefix trace when no unit is known from the last render (the
/// render after a compaction): serialize and count every unit, against
/// serializing alone and against counting the body's text as one string
/// on one thread, in the same run.
fn trace(c: &mut Criterion) {
    let o = o200k();
    let msgs = corpus::messages(1000, 42);
    let body = serde_json::json!({
        "model": "gpt-4o",
        "messages": msgs
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                serde_json::json!({"role": role, "content": m})
            })
            .collect::<Vec<_>>(),
    });
    let text = serde_json::to_string(&body).expect("serializes");
    eprintln!("body: {} bytes", text.len());
    let mut g = c.benchmark_group("trace");
    g.sample_size(20)
        .throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("serialize", |b| {
        b.iter(|| serde_json::to_string(black_box(&body)).map(|t| t.len()))
    });
    g.bench_function("count-whole-body", |b| b.iter(|| o.count(black_box(&text))));
    // The units counted on one thread and split over two: whether counting
    // scales with the cores (a shared regex cache pool kept it from it).
    let units: Vec<String> = msgs
        .iter()
        .map(|m| serde_json::json!({"role": "user", "content": m}).to_string())
        .collect();
    g.bench_function("units/one-thread", |b| {
        b.iter(|| units.iter().map(|u| o.count(u)).sum::<usize>())
    });
    g.bench_function("units/two-threads", |b| {
        b.iter(|| {
            let (first, second) = units.split_at(units.len() / 2);
            std::thread::scope(|s| {
                let other = s.spawn(|| second.iter().map(|u| o.count(u)).sum::<usize>());
                let here: usize = first.iter().map(|u| o.count(u)).sum();
                here + other.join().unwrap_or_default()
            })
        })
    });
    g.bench_function("serialize-and-trace/cold", |b| {
        b.iter_batched(
            || TokenLedger::new(1 << 16),
            |l| {
                let (json, trace) =
                    to_json_traced(black_box(&body), |t| l.count(o.as_ref(), t), None)
                        .expect("serializes");
                (json.len(), trace.map(|t| t.units.len()))
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, backends, by_kind, ledger, trace);
criterion_main!(benches);
