//! compactd: keeps LLM agent threads inside their context window without editing them.
//!
//! Layers, innermost first:
//! - the core (`model`, `tokens`, `reduce`, `render`, `summarize`, `recall`) is pure:
//!   no I/O, no async runtime, so it can be tested and benchmarked alone;
//! - `store` and `security` are the stores and the caller's identity;
//!   `llm` is the LLM summarizer's endpoint client, `plugin` loads strategy
//!   plugins and runs them as pipeline steps;
//! - `app` holds the use cases (Compact, Render, Rehydrate) over the core,
//!   the stores and the security context;
//! - `provider` holds what each wire format knows (import, encode, check,
//!   count), one file per format;
//! - `proto` is the wire (generated types and strict conversions), `server`
//!   the gRPC edge, `client` a Rust client; `settings` the service's
//!   settings and their one validation, `config` reads them from files and
//!   the environment, `startup` wires stores, plugins and use cases.

pub mod app;
mod cache;
pub mod client;
pub mod config;
pub mod hash;
pub mod llm;
pub mod model;
pub mod par;
pub mod plugin;
pub mod proto;
pub mod provider;
pub mod recall;
pub mod redact;
pub mod reduce;
pub mod render;
pub mod runtime;
pub mod security;
pub mod server;
pub mod settings;
pub mod startup;
pub mod store;
pub mod summarize;
pub mod telemetry;
pub mod tokens;

/// Test support shared by unit tests.
#[cfg(test)]
pub(crate) mod testing {
    /// Cases per property: `default`, or `COMPACTD_PROPTEST_CASES` when set
    /// (the long release-mode run sets it; see `scripts/proptest-long.sh`).
    pub(crate) fn cases(default: u32) -> u32 {
        std::env::var("COMPACTD_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}
