//! Explain: where a piece of text went under the committed plan (verbatim,
//! a summary, an artifact, a dropped span), for operators answering "was X
//! compacted out, or did the model ignore it?".

use std::sync::Arc;

use crate::model::{CompactionPlan, Sensitivity, Thread};
use crate::reduce::referenced_artifacts;
use crate::render::explain::{contains, explain, Explanation, Verdict};
use crate::runtime::blocking;
use crate::security::SecurityContext;
use crate::store::StoreError;

use super::{App, AppError, Result, UseCase};

/// Longest text Explain looks for, in characters.
pub const MAX_EXPLAIN_TEXT_CHARS: usize = 1_000;
/// Most artifacts one Explain decrypts and searches.
pub const MAX_EXPLAIN_ARTIFACTS: usize = 256;

/// An Explain call.
#[derive(Debug, Clone)]
pub struct ExplainCommand {
    /// The thread.
    pub thread_id: String,
    /// The plan version asked about (0: the current one).
    pub plan_version: u64,
    /// What to look for.
    pub text: String,
    /// The thread snapshot, when the caller sends it.
    pub thread: Option<Thread>,
    /// Decrypt and search the plan's artifacts too.
    pub search_artifacts: bool,
    /// Whether `thread` is the whole thread or what was appended to an
    /// append session.
    pub session: super::SessionInput,
}

/// An artifact whose content holds the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactHit {
    /// The artifact.
    pub artifact_id: String,
    /// The messages whose content it holds.
    pub message_ids: Vec<String>,
    /// Its classification.
    pub sensitivity: Sensitivity,
}

/// What Explain found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainOutcome {
    /// The plan version searched.
    pub plan_version: u64,
    /// The short answer.
    pub verdict: Verdict,
    /// Messages and summaries holding the text.
    pub explanation: Explanation,
    /// Artifacts holding it.
    pub artifacts: Vec<ArtifactHit>,
    /// Artifacts not searched (permission, expired, over the limit).
    pub not_searched: Vec<String>,
    /// What the thread sent holds that no request carries (abandoned calls).
    pub warnings: Vec<String>,
    /// The append session after the call, when the request used one.
    pub session: Option<super::SessionState>,
    /// The thread's last renders on this replica: the cache read compactd
    /// expected of each body, and the provider's report on it once sent.
    pub cache_turns: Vec<crate::render::cache::CacheTurn>,
}

impl App {
    /// Explains where `cmd.text` went for the caller's tenant.
    pub async fn explain(
        &self,
        ctx: &SecurityContext,
        cmd: ExplainCommand,
    ) -> Result<ExplainOutcome> {
        UseCase::Explain {
            search_artifacts: cmd.search_artifacts,
        }
        .authorize(ctx, None)?;
        self.held(async move {
            let mut cmd = cmd;
            let Some(sent) = cmd.thread.take() else {
                return self.explain_thread(ctx, cmd).await;
            };
            let input = std::mem::take(&mut cmd.session);
            let run = |thread: Arc<Thread>, _, _| {
                let thread = Arc::try_unwrap(thread).unwrap_or_else(|t| (*t).clone());
                self.explain_thread(
                    ctx,
                    ExplainCommand {
                        thread: Some(thread),
                        ..cmd
                    },
                )
            };
            let done = self
                .in_session(&ctx.tenant_id, Arc::new(sent), input, run, |_| None)
                .await?;
            Ok(ExplainOutcome {
                session: done.session,
                ..done.out
            })
        })
        .await
    }

    /// [`App::explain`] with the whole thread, or none.
    async fn explain_thread(
        &self,
        ctx: &SecurityContext,
        cmd: ExplainCommand,
    ) -> Result<ExplainOutcome> {
        self.validate_explain(&cmd)?;
        let plan = self.plan_to_explain(ctx, &cmd).await?;
        let ids: Vec<String> = if cmd.search_artifacts {
            referenced_artifacts(&plan).into_iter().collect()
        } else {
            Vec::new()
        };
        let plan_version = plan.version;
        let text = cmd.text.clone();
        let mut thread = cmd.thread;
        let mut warnings = Vec::new();
        if let Some((view, w)) = thread.as_ref().and_then(Thread::provider_view) {
            thread = Some(view);
            warnings = w;
        }
        let explanation = blocking(move || explain(thread.as_ref(), &plan, &text)).await?;
        let (artifacts, not_searched) = self
            .search_artifacts(ctx, &cmd.thread_id, ids, &cmd.text.to_lowercase())
            .await?;
        let verdict = explanation.verdict_with(!artifacts.is_empty());
        crate::telemetry::events::explain(
            plan_version,
            verdict.as_str(),
            (
                explanation.messages.len(),
                explanation.summaries.len(),
                artifacts.len(),
            ),
        );
        Ok(ExplainOutcome {
            plan_version,
            verdict,
            explanation,
            artifacts,
            not_searched,
            warnings,
            session: None,
            cache_turns: self
                .inner
                .threads
                .read(&ctx.tenant_id, &cmd.thread_id, |s| {
                    Some(s.cache_turns.clone())
                })
                .unwrap_or_default(),
        })
    }

    fn validate_explain(&self, cmd: &ExplainCommand) -> Result<()> {
        if cmd.thread_id.is_empty() {
            return Err(AppError::invalid("thread_id", "must not be empty"));
        }
        Self::validate_text("text", &cmd.text, MAX_EXPLAIN_TEXT_CHARS)?;
        if let Some(t) = &cmd.thread {
            if t.id != cmd.thread_id {
                return Err(AppError::invalid("thread.id", "must equal thread_id"));
            }
            self.check_thread(t, 0)?;
        }
        Ok(())
    }

    /// The committed plan, or a past turn's (the stores keep the last
    /// `PLAN_HISTORY`).
    async fn plan_to_explain(
        &self,
        ctx: &SecurityContext,
        cmd: &ExplainCommand,
    ) -> Result<CompactionPlan> {
        if cmd.plan_version == 0 {
            return self
                .current_plan(&ctx.tenant_id, &cmd.thread_id)
                .await?
                .map(Arc::unwrap_or_clone)
                .ok_or_else(|| AppError::NotFound("plan for this thread".into()));
        }
        self.inner
            .plans
            .get_version(&ctx.tenant_id, &cmd.thread_id, cmd.plan_version)
            .await
            .map_err(super::error::plan_store_error)?
            .map(|p| Arc::unwrap_or_clone(p.plan))
            .ok_or_else(|| {
                AppError::NotFound(format!(
                    "plan version {} of this thread (the last {} versions are kept)",
                    cmd.plan_version,
                    crate::store::PLAN_HISTORY
                ))
            })
    }

    /// The artifacts of `ids` that hold `needle` (lowercased), and the ids
    /// not searched: beyond [`MAX_EXPLAIN_ARTIFACTS`], gone, or above what
    /// the caller may read (whose content is never decrypted).
    async fn search_artifacts(
        &self,
        ctx: &SecurityContext,
        thread_id: &str,
        ids: Vec<String>,
        needle: &str,
    ) -> Result<(Vec<ArtifactHit>, Vec<String>)> {
        let mut hits = Vec::new();
        let mut not_searched = Vec::new();
        let store = &self.inner.artifacts;
        for (k, id) in ids.into_iter().enumerate() {
            if k >= MAX_EXPLAIN_ARTIFACTS {
                not_searched.push(id);
                continue;
            }
            let read = |e| super::error::artifact_read_error(e, "search_artifacts");
            let meta = match store.get_metadata(&ctx.tenant_id, thread_id, &id).await {
                Ok(m) if ctx.can_read(m.sensitivity) => m,
                Ok(_) | Err(StoreError::NotFound | StoreError::KeyDeleted(_)) => {
                    not_searched.push(id);
                    continue;
                }
                Err(e) => return Err(read(e)),
            };
            let bytes = match store.get(&ctx.tenant_id, thread_id, &id).await {
                Ok((_, b)) => b,
                Err(StoreError::NotFound | StoreError::KeyDeleted(_)) => {
                    not_searched.push(id);
                    continue;
                }
                Err(e) => return Err(read(e)),
            };
            let needle = needle.to_string();
            let found =
                blocking(move || contains(&String::from_utf8_lossy(&bytes), &needle)).await?;
            if found {
                hits.push(ArtifactHit {
                    artifact_id: id,
                    message_ids: meta.message_ids,
                    sensitivity: meta.sensitivity,
                });
            }
        }
        Ok((hits, not_searched))
    }
}
