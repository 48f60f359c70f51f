//! Rendering: thread + plan → request (neutral form), then the provider
//! payloads. Pure and deterministic.

pub mod assembly;
pub mod cache;
mod count;
pub mod images;

pub mod explain;
pub mod prefix;
pub mod quality;
mod rehydrate;
mod renderer;
mod request;
pub mod stable;
pub(crate) mod tool_ids;
pub(crate) mod wire;

pub use assembly::{system_with_bootstrap, workspace_message, ContextFile};
pub use count::{RequestCounter, RequestTokens};
pub use rehydrate::{
    artifact_ids_in, fit_rehydrated, hinted, named_recently, named_this_turn, request_identifiers,
    AutoRehydrate, RehydrationBlocked, RehydrationReport,
};
pub use renderer::{
    delimit_data, delimit_user, delimit_user_text, externalization_text, injected_message,
    pairs_closed_within, per_turn_position, recall_message, render, render_from, render_message,
    render_paired, results_answer_within, summary_text, undelimit_user_text, Rehydrated,
    RenderInput, RenderOptions, SummaryTexts, DEFAULT_TOOL_RESULT_MAX_CHARS, RENDER_FORMAT_VERSION,
};
pub use request::{Origin, PromptCache, ProviderOptions, RenderedMessage, Request};
