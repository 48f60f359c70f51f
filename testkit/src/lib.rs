//! Test and benchmark support for compactd: kept out of the service's public
//! API so nothing test-only ships with it. Used as a dev-dependency only.

pub mod fake_llm;
pub mod fuzz;
pub mod hard;
pub mod moto;
pub mod otlp;
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

/// An application over in-memory stores (content-addressed artifacts), the
/// default policy and redaction, with `extensions` (an LLM summarizer,
/// plugins): what the LLM and plugin tests and benches run against.
pub fn memory_app(extensions: compactd::app::Extensions) -> compactd::app::App {
    memory_app_on(
        std::sync::Arc::new(compactd::store::MemoryArtifactStore::content_addressed()),
        extensions,
    )
}

/// [`memory_app`] over a given artifact store (shared by several apps, as
/// by replicas).
pub fn memory_app_on(
    artifacts: std::sync::Arc<dyn compactd::store::ArtifactStore>,
    extensions: compactd::app::Extensions,
) -> compactd::app::App {
    compactd::app::App::new(
        compactd::app::Defaults::default(),
        std::sync::Arc::new(compactd::store::MemoryPlanStore::default()),
        artifacts,
        100_000,
        compactd::app::Lifecycle::default(),
        std::sync::Arc::new(compactd::redact::Redactor::standard().clone()),
        extensions,
    )
}
