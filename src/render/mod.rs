//! Rendering: thread + plan → request. Pure and deterministic.

pub mod anthropic;
pub mod openai;
mod request;

pub use request::{Origin, ProviderOptions, RenderedMessage, Request};
