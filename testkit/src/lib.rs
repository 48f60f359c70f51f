//! Test and benchmark support for compactd: kept out of the service's public
//! API so nothing test-only ships with it. Used as a dev-dependency only.

pub mod fake_llm;
pub mod hard;
pub mod moto;
pub mod plugins;
mod rng;
pub mod synth;

/// Cases per property test: `default`, or `COMPACTD_PROPTEST_CASES` when set
/// (the long release-mode run sets it; see `scripts/proptest-long.sh`).
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("COMPACTD_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The thread as it looked when its last turn was `turn`: a prefix, so
/// message ids match. Calls of that turn whose results came later are pending.
pub fn up_to(t: &compactd::model::Thread, turn: u32) -> compactd::model::Thread {
    compactd::model::Thread {
        id: t.id.clone(),
        messages: t
            .messages
            .iter()
            .filter(|m| m.turn <= turn)
            .cloned()
            .collect(),
    }
}
