//! compactd: keeps LLM agent threads inside their context window without editing them.
//!
//! The core (`model`, `tokens`, `reduce`, `render`, `summarize`) is pure: no I/O,
//! no async runtime. It can be tested and benchmarked alone. `store`,
//! `security` and `server` make it a multi-tenant gRPC service.

pub mod config;
pub mod model;
pub mod reduce;
pub mod render;
pub mod security;
pub mod server;
pub mod store;
pub mod summarize;
pub mod synth;
pub mod tokens;
