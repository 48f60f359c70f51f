//! The soak the seeds ask for: 1,000 compaction cycles of agent sessions
//! with random tool-I/O density at realistic budgets. Each session grows a
//! thread one turn at a time and compacts before every model call on top of
//! the plan it committed last turn, as an agent loop does. Every cycle must
//! succeed within the hard limit (no `InsufficientBudget` at these budgets),
//! and memory must stay flat from session to session.
//!
//! `COMPACTD_SOAK_CYCLES` changes the number of cycles (default 1,000).

mod common;

use std::collections::BTreeMap;

use common::Harness;
use compactd::reduce::{compact, CompactError, CompactRequest};
use compactd_testkit::synth::{thread, SynthParams};
use compactd_testkit::up_to;

/// Resident set size of this process in bytes (Linux), for the flatness check.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A small deterministic generator for the sessions' shapes.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn a_thousand_compaction_cycles_succeed_within_budget_with_flat_memory() {
    let cycles: u32 = std::env::var("COMPACTD_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    const TURNS: u32 = 50;
    let sessions = cycles.div_ceil(TURNS);
    let mut h = Harness::default();
    // A small summary cache, so that a leak would show against its bound.
    h.memo = compactd::reduce::Memo::new(4 * 1024 * 1024);
    // What agents run at: small models' windows to a large share of a big
    // one's. Sessions fill them within their 50 turns.
    let budgets = [8_000u32, 16_000, 32_000, 64_000];
    let (mut ran, mut ok, mut insufficient, mut triggered, mut compacted) =
        (0u32, 0u32, 0u32, 0u32, 0u32);
    let mut failures: Vec<String> = Vec::new();
    let mut rss_after_warmup = 0;
    let mut rss_peak = 0;
    for s in 0..sessions {
        let r = mix(u64::from(s));
        let params = SynthParams {
            seed: r,
            turns: TURNS,
            // Random tool-I/O density, from chat-only to a call every turn.
            tool_density: 0.2 + 0.8 * (r % 1000) as f64 / 1000.0,
            max_output_lines: 40 + (mix(r) % 460) as u32,
            protected: (mix(r ^ 1) % 3) as u32,
        };
        let budget = budgets[(mix(r ^ 2) % budgets.len() as u64) as usize];
        let whole = thread(&params);
        let mut previous = None;
        for turn in 1..=TURNS {
            if ran >= cycles {
                break;
            }
            ran += 1;
            let t = up_to(&whole, turn);
            let observations = BTreeMap::new();
            let req = CompactRequest {
                thread: &t,
                policy: &h.policy,
                max_input_tokens: budget,
                system: h.system.as_deref(),
                tools: &h.tools,
                workspace: None,
                previous: previous.as_ref(),
                observations: &observations,
                skip_aggressive: false,
                limits: Default::default(),
                target: compactd::provider::Format::openai_chat_target(),
            };
            match compact(&req, &h.engine()) {
                Ok(mut c) => {
                    // The store's ids, as the service binds them.
                    let ids: BTreeMap<String, String> = c
                        .pending
                        .iter()
                        .enumerate()
                        .map(|(i, a)| (a.placeholder.clone(), format!("art_{:032x}", i + 1)))
                        .collect();
                    let exact = c.bind(&ids, &t, &h.policy.render, &h.engine());
                    let limit = c.report.budget.hard_limit;
                    triggered += u32::from(c.report.triggered);
                    compacted += u32::from(!c.plan.is_empty());
                    if exact <= limit {
                        ok += 1;
                    } else {
                        failures.push(format!("session {s} turn {turn}: {exact} > {limit}"));
                    }
                    previous = Some(c.plan);
                }
                Err(CompactError::InsufficientBudget {
                    required, limit, ..
                }) => {
                    insufficient += 1;
                    failures.push(format!(
                        "session {s} turn {turn} at {budget}: insufficient ({required} > {limit})"
                    ));
                }
                Err(e) => failures.push(format!("session {s} turn {turn}: {e}")),
            }
        }
        let rss = rss_bytes();
        if s == 1 {
            rss_after_warmup = rss;
        }
        rss_peak = rss_peak.max(rss);
    }
    println!(
        "soak: {ran} cycles in {sessions} sessions, {ok} within budget, {triggered} triggered, \
         {compacted} under a plan, {insufficient} insufficient; RSS {} MB after two sessions, peak {} MB",
        rss_after_warmup >> 20,
        rss_peak >> 20
    );
    assert_eq!(ran, cycles);
    assert_eq!(insufficient, 0, "{failures:?}");
    assert!(
        f64::from(ok) > 0.95 * f64::from(ran),
        "{ok} of {ran}: {failures:?}"
    );
    assert!(failures.is_empty(), "{failures:?}");
    // A good share of the cycles must run under a plan that evicts, or the
    // soak checks nothing; the trigger itself is crossed rarely (each
    // compaction goes down to the target, so the next turns fit).
    assert!(
        compacted * 3 > ran,
        "only {compacted} of {ran} cycles ran under a plan"
    );
    assert!(triggered > 0);
    // Flat: sessions are independent, so after the first ones nothing may
    // keep growing (the cache is bounded at a few MB).
    assert!(
        rss_peak <= rss_after_warmup + 96 * 1024 * 1024,
        "RSS grew from {} MB to {} MB",
        rss_after_warmup >> 20,
        rss_peak >> 20
    );
}
