//! Rehydrate: an explicit artifact read (`read_artifact`), scoped to the
//! caller's tenant, gated by the artifact's sensitivity and cut to a token cap.

use tracing::Instrument as _;

use crate::model::Sensitivity;
use crate::provider::Format;
use crate::runtime::blocking;
use crate::security::SecurityContext;
use crate::telemetry::events;
use crate::tokens::truncate_to_tokens;

use super::error::artifact_read_error;
use super::{App, AppError, Result, UseCase};

/// A Rehydrate call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RehydrateCommand {
    /// The artifact's thread.
    pub thread_id: String,
    /// The artifact.
    pub artifact_id: String,
    /// Token cap on the content; `None` = the policy's rehydration reserve.
    pub max_tokens: Option<u32>,
    /// Tokenizer for the cap; `None` = the default model's.
    pub model: Option<String>,
}

/// An artifact read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RehydrateOutcome {
    /// The artifact.
    pub artifact_id: String,
    /// Its content, possibly cut.
    pub content: String,
    /// The content was cut to the cap.
    pub truncated: bool,
    /// Tokens of `content`.
    pub tokens: u32,
    /// Its classification.
    pub sensitivity: Sensitivity,
    /// The messages whose content it holds.
    pub message_ids: Vec<String>,
    /// SHA-256 of the full stored content.
    pub content_hash: String,
}

impl App {
    /// Reads one artifact back for the caller's tenant.
    pub async fn rehydrate(
        &self,
        ctx: &SecurityContext,
        cmd: RehydrateCommand,
    ) -> Result<RehydrateOutcome> {
        UseCase::Rehydrate.authorize(ctx, None)?;
        if cmd.thread_id.is_empty() {
            return Err(AppError::invalid("thread_id", "must not be empty"));
        }
        if cmd.artifact_id.is_empty() {
            return Err(AppError::invalid("artifact_id", "must not be empty"));
        }
        crate::telemetry::metrics().rehydration_requests("rehydrate_rpc", 1, &ctx.tenant_id);
        let span = tracing::info_span!(
            "compactd.artifact",
            otel.name = "artifact get",
            compactd.artifact_id = %crate::summarize::text::head(&cmd.artifact_id, 64),
        );
        let (meta, bytes) = self
            .inner
            .artifacts
            .get(&ctx.tenant_id, &cmd.thread_id, &cmd.artifact_id)
            .instrument(span)
            .await
            .map_err(|e| artifact_read_error(e, "artifact_id"))?;
        if let Err(e) = check_sensitivity(ctx, meta.sensitivity) {
            events::rpc_rehydration(
                &cmd.artifact_id,
                meta.sensitivity,
                Err("PERMISSION"),
                &ctx.tenant_id,
            );
            return Err(e);
        }
        let cap = cmd
            .max_tokens
            .unwrap_or(self.inner.defaults.policy.rehydration_reserve_tokens);
        let model = self.model(cmd.model)?;
        let parts = self.engine_parts(
            &model,
            &Format::target(None, &model),
            &ctx.tenant_id,
            &cmd.thread_id,
        );
        let (content, truncated, tokens) = blocking(move || {
            let text = String::from_utf8_lossy(&bytes);
            let counter = parts.counter.as_ref();
            // Most artifacts fit: one (cached) count, no search.
            let whole = parts.ledger.count(counter, &text);
            if whole <= cap {
                return (text.into_owned(), false, whole);
            }
            let (content, truncated) = truncate_to_tokens(counter, &text, cap);
            let tokens = parts.ledger.count(counter, &content);
            (content, truncated, tokens)
        })
        .await?;
        events::rpc_rehydration(
            &cmd.artifact_id,
            meta.sensitivity,
            Ok((tokens, truncated)),
            &ctx.tenant_id,
        );
        Ok(RehydrateOutcome {
            artifact_id: cmd.artifact_id,
            content,
            truncated,
            tokens,
            sensitivity: meta.sensitivity,
            message_ids: meta.message_ids,
            content_hash: meta.content_hash,
        })
    }
}

/// `PermissionDenied` unless the caller may read artifacts of sensitivity `s`.
pub(super) fn check_sensitivity(ctx: &SecurityContext, s: Sensitivity) -> Result<()> {
    if ctx.can_read(s) {
        Ok(())
    } else {
        Err(AppError::PermissionDenied(format!(
            "permission denied: reading this artifact needs `artifact:read:{}`",
            s.as_str()
        )))
    }
}
