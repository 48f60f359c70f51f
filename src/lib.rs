//! compactd: keeps LLM agent threads inside their context window without editing them.
//!
//! Layers, innermost first:
//! - the core (`model`, `tokens`, `reduce`, `render`, `summarize`) is pure:
//!   no I/O, no async runtime, so it can be tested and benchmarked alone;
//! - `store` and `security` are the stores and the caller's identity;
//! - `app` holds the use cases (Compact, Render, Rehydrate) over the core,
//!   the stores and the security context;
//! - `proto` is the wire (generated types and strict conversions), `server`
//!   the gRPC edge, `client` a Rust client, `config` the settings.

pub mod app;
mod cache;
pub mod client;
pub mod config;
pub mod model;
pub mod proto;
pub mod reduce;
pub mod render;
mod runtime;
pub mod security;
pub mod server;
pub mod store;
pub mod summarize;
pub mod tokens;
