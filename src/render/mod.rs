//! Rendering: thread + plan → request (neutral form), then the provider
//! payloads. Pure and deterministic.

pub mod anthropic;
mod body_count;
mod count;
pub mod images;

pub mod explain;
pub mod openai;
pub mod quality;
mod rehydrate;
mod renderer;
mod request;
pub mod responses;
mod tool_ids;

pub use crate::provider::Format as OutputFormat;
pub use body_count::body_tokens;
pub use count::{RequestCounter, RequestTokens};
pub use rehydrate::{
    artifact_ids_in, fit_rehydrated, named_recently, named_this_turn, AutoRehydrate,
    RehydrationBlocked, RehydrationReport,
};
pub use renderer::{
    externalization_text, render, render_message, summary_text, Rehydrated, RenderInput,
    RenderOptions, RENDER_FORMAT_VERSION,
};
pub use request::{Origin, ProviderOptions, RenderedMessage, Request};
