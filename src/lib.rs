//! compactd: keeps LLM agent threads inside their context window without editing them.
//!
//! The core (`model`, `tokens`, `reduce`, `render`, `summarize`) is pure: no I/O,
//! no async runtime. It can be tested and benchmarked alone.

pub mod config;
pub mod model;
pub mod reduce;
pub mod render;
pub mod summarize;
pub mod synth;
pub mod tokens;
