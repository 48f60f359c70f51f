//! Rendering: thread + plan → request. Pure and deterministic.

mod request;

pub use request::{Origin, ProviderOptions, RenderedMessage, Request};
