//! Summaries: the Summarizer trait, the extractive summarizer, tool-output post-processing.
//!
//! Everything here is pure (no I/O, no runtime) so the reducer can call it on the
//! hot path and tests can pin its output byte for byte.

pub mod extractive;
pub mod llm;
pub mod salient;
pub mod shapes;
pub(crate) mod text;
pub mod tool_output;

pub use extractive::{
    fact_score, fit_to_size, is_constraint, merge_summaries, ExtractiveSummarizer, EXTRACTIVE_ID,
};
pub use tool_output::{
    compress_tool_output, CompressRules, Compressed, OutputKind, STRUCTURED_KEEP_TOKENS,
};

use crate::model::{Message, SpanReference, StructuredSummary};

/// One summarization job: a span of the thread plus the summaries it replaces.
#[derive(Debug, Clone)]
pub struct SummaryRequest<'a> {
    /// What the summary covers.
    pub span: SpanReference,
    /// The span's messages in thread order (may include tool calls and results).
    pub messages: &'a [&'a Message],
    /// Earlier summaries this one replaces (rolling re-summarization); their
    /// content must be carried forward, or facts drift away over cycles.
    pub prior: &'a [&'a StructuredSummary],
    /// Cap on `render_as_message().len()` of the result, in bytes (which also
    /// bounds chars, so a char-based caller is never exceeded).
    pub max_chars: usize,
    /// `messages` include every message the `prior` summaries cover, so
    /// what they left out for size can be recovered (a summary re-fitted
    /// into more room). Otherwise `messages` are only what the priors do
    /// not cover, and their omissions stand.
    pub rereads_prior: bool,
    /// Where scans of tool outputs are kept across the summaries of one
    /// compaction (a roll-up re-reads what the first summaries read), when
    /// the caller keeps them.
    pub scans: Option<&'a dyn Scans>,
    /// [`message_digest`](crate::model::message_digest) of each of
    /// `messages`, when the caller has them: what a kept part is found by.
    pub digests: Option<&'a [u128]>,
}

/// A keeper of tool-output scans: [`salient::salient`] of a text, computed
/// once. Implementations return exactly what the function returns.
pub trait Scans: Sync + std::fmt::Debug {
    /// `salient::salient(text, max_refs)`, perhaps kept from an earlier call.
    fn salient(&self, text: &str, max_refs: usize) -> salient::Salient;

    /// `make()`, the extractive summarizer's part of the message whose
    /// [`message_digest`](crate::model::message_digest) is `digest`
    /// (`unanswered` as [`extractive::MessagePart`] says), perhaps kept from
    /// an earlier call: a roll-up that re-reads a stretch finds every
    /// message already read by the chunk summaries before it.
    fn part(
        &self,
        digest: u128,
        unanswered: bool,
        make: &dyn Fn() -> extractive::MessagePart,
    ) -> std::sync::Arc<extractive::MessagePart> {
        let _ = (digest, unanswered);
        std::sync::Arc::new(make())
    }
}

/// Why no summary was produced. The reducer falls back to cheaper strategies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummarizeError {
    /// The backend declined to summarize (model refusal, policy).
    #[error("summarizer refused: {0}")]
    Refused(String),
    /// The backend failed (network, bad response).
    #[error("summarizer backend failed: {0}")]
    Backend(String),
}

/// Turns a span (and the summaries it replaces) into one structured summary.
pub trait Summarizer: Send + Sync {
    /// Identifies the summarizer in cache keys ("extractive-v1", "gpt-4o-mini@prompt-v3").
    fn id(&self) -> &str;
    /// Summarizes `req`; the result renders within `req.max_chars`.
    fn summarize(&self, req: &SummaryRequest<'_>) -> Result<StructuredSummary, SummarizeError>;
    /// Pure CPU and free to call: the pipeline may then make the summaries
    /// of chunks it is certain to summarize ahead of time, on every core,
    /// and drop any it ends up not using. A summarizer that calls a model
    /// (cost, rate limits) keeps the default.
    fn may_run_ahead(&self) -> bool {
        false
    }
}
