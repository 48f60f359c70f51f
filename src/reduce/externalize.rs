//! Externalization: content above the threshold moves to the artifact store;
//! the prompt keeps a pointer and a summary, and the agent can read it back
//! with `read_artifact`. The pipeline only proposes the write (a pending
//! artifact); the caller writes it and binds the real id before the plan is
//! committed, so a plan never points at an artifact that was not written.

use crate::model::{Role, SpanReference};
use crate::summarize::SummaryRequest;

use super::{CompactError, PipelineState, Projection, Reducer, TokenBudget};

/// Externalizes large messages, oldest first, until the target is met.
#[derive(Debug, Clone, Copy, Default)]
pub struct Externalize;

impl Reducer for Externalize {
    fn name(&self) -> &'static str {
        "externalize"
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        if state.skip_aggressive {
            return Ok(());
        }
        for i in 0..p.len() {
            if p.total() <= budget.target() {
                break;
            }
            let reducible = if p.is_tool_result(i) {
                state.tool_result_reducible(p, i)
            } else {
                !p.is_locked(i) && !state.only_tool_results
            };
            if !reducible || !p.is_included(i) {
                continue;
            }
            let m = p.message(i);
            // Assistant messages with tool calls keep their calls verbatim.
            if !m.tool_calls.is_empty() {
                continue;
            }
            let (content, tokens) = Self::content(p, i);
            let threshold = match &m.tool_result {
                Some(env) => state.policy.externalize_threshold_for(&env.tool_name),
                None => state.policy.externalize_threshold_tokens,
            };
            if tokens <= threshold {
                continue;
            }
            Self::message(p, i, state, (content, tokens), None, None);
        }
        Ok(())
    }
}

impl Externalize {
    /// What externalizing message `i` moves to the store, and its tokens:
    /// every part (images as references), and what the model reads of it,
    /// which decides whether moving it pays off.
    pub(crate) fn content(p: &Projection<'_>, i: usize) -> (String, u32) {
        let text = p.message(i).archived_text().into_owned();
        let tokens = p.counter.text(&text);
        (text, tokens)
    }

    /// Externalizes message `i`: `content` (redacted) to the store, a pointer
    /// with `summary` (the pointer summary made here when `None`) and `hint`
    /// (the default for the message's kind when `None`) in its place. Undone
    /// when the pointer is not cheaper than the message; true when it stays.
    /// The core step and plugin proposals share it, so both store and
    /// redact alike.
    pub(crate) fn message(
        p: &mut Projection<'_>,
        i: usize,
        state: &mut PipelineState<'_>,
        (content, tokens): (String, u32),
        summary: Option<crate::model::StructuredSummary>,
        hint: Option<String>,
    ) -> bool {
        let summary = match summary {
            Some(s) => s,
            None => pointer_summary(p, i, state),
        };
        let hint = hint.unwrap_or_else(|| self::hint(p.message(i)));
        let before = p.cost(i);
        // The store gets the content with secrets redacted; the tokens
        // freed are those of what the model read.
        let redacted = match state.redactor.redact(&content) {
            std::borrow::Cow::Owned(s) => Some(s),
            std::borrow::Cow::Borrowed(_) => None,
        };
        let stored = redacted.unwrap_or(content);
        p.externalize(i, summary, hint, stored, tokens);
        if p.cost(i) >= before {
            p.undo_last_externalize(i);
            return false;
        }
        true
    }
}

/// The pointer's short summary of message `i`; when summarizing fails the
/// pointer carries an empty one and the report says so.
fn pointer_summary(
    p: &Projection<'_>,
    i: usize,
    state: &mut PipelineState<'_>,
) -> crate::model::StructuredSummary {
    let m = p.message(i);
    let span = SpanReference::of(p.thread, &[i]);
    let msgs = [m];
    let req = SummaryRequest {
        span: span.clone(),
        messages: &msgs,
        prior: &[],
        max_chars: state.summary_max_chars() / 2,
        rereads_prior: false,
        scans: None,
        digests: None,
    };
    match state.summarize(&req) {
        Ok(s) => s,
        Err(e) => {
            state.warn(format!(
                "externalize: summary of message {} failed ({e}); pointer has an empty summary",
                m.id
            ));
            crate::model::StructuredSummary::empty(span)
        }
    }
}

/// When the model should read the artifact back.
fn hint(m: &crate::model::Message) -> String {
    match (&m.tool_result, m.role) {
        (Some(env), _) => format!("read when you need the full output of {}", env.tool_name),
        (None, Role::User) => format!(
            "read when you need the user's full message from turn {}",
            m.turn
        ),
        (None, role) => format!(
            "read when you need the full {} message from turn {}",
            role.as_str(),
            m.turn
        ),
    }
}
