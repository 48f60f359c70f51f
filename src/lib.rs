//! compactd: keeps LLM agent threads inside their context window without editing them.
//!
//! The core (`model`, `tokens`, `reduce`, `render`, `summarize`) is pure: no I/O,
//! no async runtime. It can be tested and benchmarked alone.

pub mod model;
pub mod render;
pub mod summarize;
pub mod tokens;
