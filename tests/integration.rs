//! Most integration tests, as modules of one test binary: each `tests/*.rs`
//! linked on its own repeated the whole service's link and its generic code,
//! and cargo runs test binaries one after another, so one binary builds
//! faster and runs its tests side by side.
//!
//! Kept as binaries of their own (`Cargo.toml`, `[[test]]`): the property and
//! fuzz runs the optimized scripts name (`invariants`, `hard_threads`,
//! `unicode`, `fuzz`), the tests that install a process-wide tracing
//! subscriber or meter provider (`telemetry`, `telemetry_plugins`,
//! `server_s3`), and the soak, which measures this process's memory.
//!
//! Run one file's tests with `cargo test --test integration <module>::`.

mod common;
mod server_common;

mod accounting;
mod cli;
mod cli_inspect;
mod cycles;
mod format_pins;
mod golden;
mod llm;
mod offline_matches_server;
mod outcomes;
mod pinning;
mod pipeline;
mod plugins;
mod prompt_cache;
mod real_logs;
mod real_world;
mod recall;
mod seed_guarantees;
mod server_api;
mod server_archive;
mod server_assembly;
mod server_concurrency;
mod server_errors;
mod server_explain;
mod server_injections;
mod server_lifecycle;
mod server_llm;
mod server_mtls;
mod server_ops;
mod server_plugins;
mod server_provider_input;
mod server_redaction;
mod server_rehydration;
mod server_search;
mod server_sessions;
mod server_tier_caps;
mod server_tls;
mod task_continuation;
mod tool_policy;
