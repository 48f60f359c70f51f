//! Growth with thread length: every pass the server makes over one thread
//! on a Compact/Render call, timed on generated threads of about 1k, 4k,
//! 16k, 64k and 100k messages, against the named baseline of a bare token
//! count of the same thread, in one run. After the criterion groups the
//! growth exponent of each pass (least-squares slope of log(time) against
//! log(messages)) is printed; 1.0 is linear, and every pass must stay near
//! it (O(n log n) or better).
//!
//! `cargo bench --bench growth`. Environment knobs for quick looks:
//! `GROWTH_SIZES=1000,4000` (message counts), `GROWTH_QUICK=1` (skip the
//! criterion groups, print only the plain timing loop and the exponents).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion};

use compactd::model::{DeterminismMetadata, Role, Thread, ThreadLimits};
use compactd::proto::pb;
use compactd::provider::Format;
use compactd::reduce::{
    compact, request_fingerprint, Cancel, CompactRequest, Compaction, Engine, Memo, Policy,
};
use compactd::render::{render, RenderInput, RenderOptions, RequestCounter};
use compactd::server::convert::compact_command;
use compactd::summarize::ExtractiveSummarizer;
use compactd::tokens::{o200k, TokenCounter, TokenLedger};
use compactd_testkit::synth::{thread, SynthParams};

/// Fixed budget: the thread grows, the window does not.
const MAX_INPUT_TOKENS: u32 = 128_000;
const SYSTEM: &str = "You are a careful engineering agent.";
/// Message counts (the largest is the thread limit).
const SIZES: &[usize] = &[1_000, 4_000, 16_000, 64_000, 100_000];

/// Messages per synth turn at these parameters (measured: 258 turns ≈ 997).
const MESSAGES_PER_TURN: f64 = 3.86;

/// A synth thread of about `n` messages (at most `n`, ending after a reply,
/// so no call is left without its result).
fn sized_thread(n: usize) -> Thread {
    let turns = ((n as f64 / MESSAGES_PER_TURN).ceil() as u32).max(1) + 4;
    let mut t = thread(&SynthParams {
        seed: 11 + n as u64,
        turns,
        tool_density: 0.75,
        max_output_lines: 84,
        protected: 2,
    });
    t.messages.truncate(n);
    while t
        .messages
        .last()
        .is_some_and(|m| !(m.role == Role::Assistant && m.tool_calls.is_empty()))
    {
        t.messages.pop();
    }
    t
}

/// The baseline: tokenize every message once, nothing else.
fn bare_count(counter: &dyn TokenCounter, t: &Thread) -> usize {
    t.messages.iter().map(|m| counter.count(&m.text())).sum()
}

/// Everything one size needs.
struct Fixture {
    n: usize,
    thread: Thread,
    wire: pb::CompactRequest,
    policy: Policy,
    observations: BTreeMap<String, DeterminismMetadata>,
    /// Warm: populated by one compaction (as the call's own ledger is by the
    /// time it binds, renders and recounts).
    ledger: TokenLedger,
    memo: Memo,
    compaction: Compaction,
    ids: BTreeMap<String, String>,
    options: RenderOptions,
    /// How long the fixture's own (cold) compaction took.
    compact_time: Duration,
}

fn request<'a>(f: &'a Fixture) -> CompactRequest<'a> {
    CompactRequest {
        thread: &f.thread,
        policy: &f.policy,
        max_input_tokens: MAX_INPUT_TOKENS,
        system: Some(SYSTEM),
        tools: &[],
        workspace: None,
        previous: None,
        observations: &f.observations,
        skip_aggressive: false,
        limits: ThreadLimits::default(),
        target: Format::openai_chat_target(),
    }
}

fn engine<'a>(
    counter: &'a dyn TokenCounter,
    ledger: &'a TokenLedger,
    memo: &'a Memo,
    summarizer: &'a ExtractiveSummarizer,
) -> Engine<'a> {
    Engine {
        cancel: Cancel::never(),
        redactor: compactd::redact::Redactor::standard(),
        counter,
        ledger,
        summarizer,
        memo,
    }
}

fn fixture(n: usize, counter: &dyn TokenCounter) -> Fixture {
    let t = sized_thread(n);
    let wire = pb::CompactRequest {
        thread: Some(pb::Thread::from(&t)),
        system_prompt: Some(SYSTEM.into()),
        max_input_tokens: MAX_INPUT_TOKENS,
        ..Default::default()
    };
    let mut f = Fixture {
        n: t.messages.len(),
        thread: t,
        wire,
        policy: Policy::default(),
        observations: BTreeMap::new(),
        ledger: TokenLedger::new(1 << 21),
        memo: Memo::default(),
        compaction: Compaction {
            plan: Default::default(),
            pending: Vec::new(),
            message_tokens: Vec::new(),
            fixed_tokens: 0,
            report: compactd::reduce::Report {
                tokens_before: 0,
                tokens_after: 0,
                budget: compactd::reduce::BudgetReport {
                    max_input_tokens: 0,
                    hard_limit: 0,
                    trigger: 0,
                    target: 0,
                    fixed_tokens: 0,
                    system_tokens: 0,
                    tool_tokens: 0,
                    tool_results: None,
                    workspace_tokens: 0,
                    counting: Default::default(),
                },
                triggered: false,
                tier_triggered: false,
                keep_recent_turns: 0,
                keep_tool_io_pairs: 0,
                per_reducer: Vec::new(),
                warnings: Vec::new(),
                developer_tokens: 0,
                pinned_messages: 0,
                pinned_labels: Vec::new(),
                records: Vec::new(),
            },
            target: Format::openai_chat_target(),
        },
        ids: BTreeMap::new(),
        options: RenderOptions::default(),
        compact_time: Duration::ZERO,
    };
    let summarizer = ExtractiveSummarizer;
    let t0 = Instant::now();
    let c = compact(
        &request(&f),
        &engine(counter, &f.ledger, &f.memo, &summarizer),
    )
    .expect("bench thread compacts");
    f.compact_time = t0.elapsed();
    f.ids = c
        .pending
        .iter()
        .enumerate()
        .map(|(i, a)| (a.placeholder.clone(), format!("art_{i:032x}")))
        .collect();
    f.compaction = c;
    let content = bare_count(counter, &f.thread);
    eprintln!(
        "size {n}: {} messages, {content} content tokens; compacted to {} tokens ({} summaries, {} drops, {} clears, {} pointers)",
        f.n,
        f.compaction.report.tokens_after,
        f.compaction.plan.summarizations.len(),
        f.compaction.plan.drops.len(),
        f.compaction.plan.clearings.len(),
        f.compaction.plan.externalizations.len(),
    );
    f
}

/// The passes, by name. Each runs one pass once on fixture `f`; the first
/// is the baseline.
const PASSES: &[&str] = &[
    "baseline_bare_count",
    "proto_to_command",
    "validate",
    "compact_cold",
    "bind",
    "render",
    "count_rendered",
    "request_fingerprint",
];

/// Runs pass `name` once and returns the time of the pass alone (inputs it
/// consumes are prepared outside the timed part).
fn time_pass(name: &str, f: &Fixture, counter: &dyn TokenCounter) -> Duration {
    let summarizer = ExtractiveSummarizer;
    let warm = engine(counter, &f.ledger, &f.memo, &summarizer);
    match name {
        "baseline_bare_count" => {
            let t0 = Instant::now();
            black_box(bare_count(counter, &f.thread));
            t0.elapsed()
        }
        "proto_to_command" => {
            let wire = f.wire.clone();
            let t0 = Instant::now();
            let cmd = compact_command(wire, &f.policy).expect("converts");
            let d = t0.elapsed();
            drop(black_box(cmd));
            d
        }
        "validate" => {
            let t0 = Instant::now();
            black_box(f.thread.validate(&ThreadLimits::default())).expect("valid");
            t0.elapsed()
        }
        "compact_cold" => {
            let (ledger, memo) = (TokenLedger::new(1 << 21), Memo::default());
            let cold = engine(counter, &ledger, &memo, &summarizer);
            let t0 = Instant::now();
            let c = compact(&request(f), &cold).expect("compacts");
            let d = t0.elapsed();
            drop(black_box(c));
            d
        }
        "bind" => {
            let mut c = f.compaction.clone();
            let t0 = Instant::now();
            black_box(c.bind(&f.ids, &f.thread, &f.options, &warm));
            t0.elapsed()
        }
        "render" => {
            let plan = bound_plan(f, &warm);
            let t0 = Instant::now();
            let r = render(&f.thread, &plan, &render_input(f));
            let d = t0.elapsed();
            drop(black_box(r));
            d
        }
        "count_rendered" => {
            let plan = bound_plan(f, &warm);
            let r = render(&f.thread, &plan, &render_input(f));
            let rc = RequestCounter::for_target(counter, &f.ledger, Format::openai_chat_target());
            let t0 = Instant::now();
            black_box(rc.request(&r));
            t0.elapsed()
        }
        "request_fingerprint" => {
            let t0 = Instant::now();
            black_box(request_fingerprint(&request(f), &warm));
            t0.elapsed()
        }
        other => unreachable!("unknown pass {other}"),
    }
}

fn render_input(f: &Fixture) -> RenderInput<'_> {
    RenderInput {
        system: Some(SYSTEM),
        tools: &[],
        rehydrated: &[],
        options: &f.options,
        omit_pending_calls: false,
        summaries: None,
        workspace: None,
    }
}

fn bound_plan(f: &Fixture, e: &Engine<'_>) -> compactd::model::CompactionPlan {
    let mut c = f.compaction.clone();
    c.bind(&f.ids, &f.thread, &f.options, e);
    c.plan
}

fn criterion_groups(c: &mut Criterion, fixtures: &[Fixture], counter: &dyn TokenCounter) {
    let summarizer = ExtractiveSummarizer;
    let mut g = c.benchmark_group("growth");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for f in fixtures {
        let warm = engine(counter, &f.ledger, &f.memo, &summarizer);
        let n = f.n;
        g.bench_with_input(BenchmarkId::new("baseline_bare_count", n), f, |b, f| {
            b.iter(|| black_box(bare_count(counter, &f.thread)))
        });
        g.bench_with_input(BenchmarkId::new("proto_to_command", n), f, |b, f| {
            b.iter_batched(
                || f.wire.clone(),
                |w| compact_command(w, &f.policy).expect("converts"),
                BatchSize::PerIteration,
            )
        });
        g.bench_with_input(BenchmarkId::new("validate", n), f, |b, f| {
            b.iter(|| black_box(f.thread.validate(&ThreadLimits::default())))
        });
        if f.compact_time > SLOW {
            eprintln!(
                "growth/compact_cold/{n}: left out of the criterion group (one run took {}); see the timing loop",
                fmt(f.compact_time)
            );
        } else {
            g.bench_with_input(BenchmarkId::new("compact_cold", n), f, |b, f| {
                b.iter_batched(
                    || (TokenLedger::new(1 << 21), Memo::default()),
                    |(ledger, memo)| {
                        compact(&request(f), &engine(counter, &ledger, &memo, &summarizer))
                            .expect("compacts")
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.bench_with_input(BenchmarkId::new("bind", n), f, |b, f| {
            b.iter_batched(
                || f.compaction.clone(),
                |mut c| {
                    black_box(c.bind(&f.ids, &f.thread, &f.options, &warm));
                    c
                },
                BatchSize::PerIteration,
            )
        });
        let plan = bound_plan(f, &warm);
        g.bench_with_input(BenchmarkId::new("render", n), f, |b, f| {
            b.iter(|| render(&f.thread, &plan, &render_input(f)))
        });
        let rendered = render(&f.thread, &plan, &render_input(f));
        let rc = RequestCounter::for_target(counter, &f.ledger, Format::openai_chat_target());
        g.bench_with_input(BenchmarkId::new("count_rendered", n), f, |b, _| {
            b.iter(|| black_box(rc.request(&rendered)))
        });
        g.bench_with_input(BenchmarkId::new("request_fingerprint", n), f, |b, f| {
            b.iter(|| black_box(request_fingerprint(&request(f), &warm)))
        });
    }
    g.finish();
}

/// Least-squares slope of log(y) against log(x).
fn slope(points: &[(f64, f64)]) -> f64 {
    let k = points.len() as f64;
    let (lx, ly): (Vec<f64>, Vec<f64>) = points.iter().map(|&(x, y)| (x.ln(), y.ln())).unzip();
    let mx = lx.iter().sum::<f64>() / k;
    let my = ly.iter().sum::<f64>() / k;
    let num: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    num / den
}

/// Median time of pass `name` on `f` over a few runs (fewer on big
/// threads; one when a run takes more than [`SLOW`]).
fn median_time(name: &str, f: &Fixture, counter: &dyn TokenCounter) -> Duration {
    let first = time_pass(name, f, counter);
    if first > SLOW {
        return first;
    }
    let runs = if f.n >= 50_000 { 3 } else { 7 };
    let mut times: Vec<Duration> = std::iter::once(first)
        .chain((1..runs).map(|_| time_pass(name, f, counter)))
        .collect();
    times.sort();
    times[runs / 2]
}

/// A pass slower than this is timed once, and left out of the criterion
/// groups (ten samples of it would take minutes).
const SLOW: Duration = Duration::from_secs(3);

fn fmt(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// The plain timing loop: a table of median times and ratios to the
/// baseline per size, and the growth exponent of each pass.
fn growth_report(fixtures: &[Fixture], counter: &dyn TokenCounter) {
    let times: Vec<Vec<Duration>> = PASSES
        .iter()
        .map(|p| {
            fixtures
                .iter()
                .map(|f| median_time(p, f, counter))
                .collect()
        })
        .collect();
    let sizes: Vec<String> = fixtures.iter().map(|f| f.n.to_string()).collect();
    eprintln!("\ngrowth: median time per pass (ratio to baseline_bare_count at the same size)");
    eprintln!("| pass | {} | exponent |", sizes.join(" | "));
    eprintln!("|---|{}---|", "---|".repeat(sizes.len()));
    for (p, row) in PASSES.iter().zip(&times) {
        let cells: Vec<String> = row
            .iter()
            .zip(&times[0])
            .map(|(t, base)| format!("{} ({:.3}×)", fmt(*t), t.as_secs_f64() / base.as_secs_f64()))
            .collect();
        let points: Vec<(f64, f64)> = fixtures
            .iter()
            .zip(row)
            .map(|(f, t)| (f.n as f64, t.as_secs_f64().max(1e-9)))
            .collect();
        let e = if points.len() > 1 {
            format!("{:.2}", slope(&points))
        } else {
            "-".into()
        };
        eprintln!("| `{p}` | {} | {e} |", cells.join(" | "));
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("GROWTH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| SIZES.to_vec());
    let quick = std::env::var_os("GROWTH_QUICK").is_some();
    let counter = o200k();
    let fixtures: Vec<Fixture> = sizes
        .iter()
        .map(|&n| fixture(n, counter.as_ref()))
        .collect();
    if !quick {
        let mut c = Criterion::default().configure_from_args();
        criterion_groups(&mut c, &fixtures, counter.as_ref());
        c.final_summary();
    }
    growth_report(&fixtures, counter.as_ref());
}
