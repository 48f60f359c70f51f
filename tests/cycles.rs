//! Facts and constraints survive repeated
//! compaction cycles (the agent must not "forget" them after summarization).

use crate::common;

use common::{request_text, Harness};
use compactd::model::CompactionPlan;
use compactd_testkit::synth::{thread, SynthParams};
use compactd_testkit::up_to;

fn run_cycles(cycles: u32) {
    let full = thread(&SynthParams {
        seed: 42,
        turns: 3 + 6 * cycles,
        tool_density: 0.8,
        max_output_lines: 300,
        protected: 0,
    });
    let h = Harness::default();
    let mut plan: Option<CompactionPlan> = None;
    let mut summarized_cycles = 0;
    for cycle in 1..=cycles {
        let t = up_to(&full, 3 + 6 * cycle);
        let out = h
            .compact(&t, 6_000, plan.as_ref())
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        let text = request_text(&out.request);
        for fact in ["prefers Python", "$1000", "Never delete production data"] {
            assert!(text.contains(fact), "cycle {cycle}: {fact:?} lost:\n{text}");
        }
        if !out.plan.summarizations.is_empty() {
            summarized_cycles += 1;
        }
        plan = Some(out.plan);
    }
    assert!(
        summarized_cycles >= cycles / 2,
        "summarization ran in only {summarized_cycles} of {cycles} cycles; the test would prove nothing"
    );
}

#[test]
fn facts_survive_five_cycles() {
    run_cycles(5);
}

#[test]
fn facts_survive_ten_cycles() {
    run_cycles(10);
}
