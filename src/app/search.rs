//! SearchContext: the agent's own look-up over what the plan took out of
//! its prompt. The same index as Render's recall block (one per thread,
//! following its plans), queried with the agent's words instead of the
//! latest request.

use std::sync::Arc;

use crate::model::{Thread, ToolSchema};
use crate::recall::FoundPassage;
use crate::runtime::blocking;
use crate::security::SecurityContext;

use super::{App, AppError, Result, UseCase};

/// Longest query, in characters.
pub const MAX_SEARCH_QUERY_CHARS: usize = 1_000;
/// Passages returned when the caller does not say.
pub const DEFAULT_SEARCH_RESULTS: u32 = 5;
/// Passages one call returns at most.
pub const MAX_SEARCH_RESULTS: u32 = 50;

/// A SearchContext call.
#[derive(Debug, Clone)]
pub struct SearchCommand {
    /// The thread snapshot the committed plan applies to.
    pub thread: Arc<Thread>,
    /// What to look for.
    pub query: String,
    /// Passages wanted (0: the default).
    pub max_results: u32,
    /// Whether `thread` is the whole thread or what was appended to an
    /// append session.
    pub session: super::SessionInput,
}

/// What SearchContext found.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome {
    /// The plan version searched.
    pub plan_version: u64,
    /// Best first.
    pub passages: Vec<FoundPassage>,
    /// Matches left out: the caller may not read their sensitivity.
    pub withheld: u32,
    /// The append session after the call, when the request used one.
    pub session: Option<super::SessionState>,
}

impl App {
    /// Searches what the committed plan evicts from `cmd.thread` for the
    /// caller's tenant.
    pub async fn search_context(
        &self,
        ctx: &SecurityContext,
        cmd: SearchCommand,
    ) -> Result<SearchOutcome> {
        UseCase::SearchContext.authorize(ctx, None)?;
        self.held(async move {
            let (sent, input) = (Arc::clone(&cmd.thread), cmd.session.clone());
            let run = |thread, _, _| self.search_thread(ctx, SearchCommand { thread, ..cmd });
            let done = self
                .in_session(&ctx.tenant_id, sent, input, run, |_| None)
                .await?;
            Ok(SearchOutcome {
                session: done.session,
                ..done.out
            })
        })
        .await
    }

    /// [`App::search_context`] of the whole thread.
    async fn search_thread(
        &self,
        ctx: &SecurityContext,
        cmd: SearchCommand,
    ) -> Result<SearchOutcome> {
        self.validate_thread(&ctx.tenant_id, &cmd.thread, None)?;
        Self::validate_text("query", &cmd.query, MAX_SEARCH_QUERY_CHARS)?;
        if cmd.max_results > MAX_SEARCH_RESULTS {
            return Err(AppError::invalid(
                "max_results",
                format!(
                    "must be at most {MAX_SEARCH_RESULTS} (got {})",
                    cmd.max_results
                ),
            ));
        }
        let wanted = match cmd.max_results {
            0 => DEFAULT_SEARCH_RESULTS,
            n => n,
        } as usize;
        let plan = self
            .current_plan(&ctx.tenant_id, &cmd.thread.id)
            .await?
            .ok_or_else(|| AppError::NotFound("plan for this thread".into()))?;
        let mut thread = cmd.thread;
        Self::settle_thread(&mut thread, &mut None);
        let (app, ctx2) = (self.clone(), ctx.clone());
        let plan_version = plan.version;
        let query_chars = cmd.query.chars().count();
        let (passages, withheld) = blocking(move || {
            let threads = &app.inner.threads;
            let index = threads.recall(&ctx2.tenant_id, &thread, None, &plan, &app.inner.redactor);
            let recall = index
                .lock()
                .map_err(|_| AppError::Internal("recall index poisoned".into()))?;
            let mut withheld = 0u32;
            let mut passages = Vec::new();
            // Every match is looked at, so what the caller may not read is
            // counted, never silently dropped.
            for h in recall.index.search(&cmd.query, usize::MAX) {
                let p = h.passage;
                if !ctx2.can_read(p.sensitivity) {
                    withheld += 1;
                } else if passages.len() < wanted {
                    passages.push(FoundPassage {
                        message_id: p.message_id.clone(),
                        artifact_id: p.artifact_id.clone(),
                        line: p.line,
                        text: p.text.clone(),
                        score: h.score,
                        sensitivity: p.sensitivity,
                    });
                }
            }
            Ok::<_, AppError>((passages, withheld))
        })
        .await??;
        crate::telemetry::events::search_context(plan_version, query_chars, &passages, withheld);
        Ok(SearchOutcome {
            plan_version,
            passages,
            withheld,
            session: None,
        })
    }
}

/// The name of the tool [`search_context_tool`] defines.
pub const SEARCH_CONTEXT_TOOL: &str = "search_context";

/// The `search_context` tool: what an agent calls to look through what was
/// compacted out of its prompt. The platform answers it with the
/// SearchContext RPC.
pub fn search_context_tool() -> ToolSchema {
    ToolSchema {
        name: SEARCH_CONTEXT_TOOL.to_string(),
        description: "Search earlier parts of this conversation that were compacted out of \
            your context (old tool outputs, files, logs, messages). Returns the best matching \
            passages, each with the artifact id that holds the whole original (read it with \
            read_artifact). Name exact identifiers, paths, error codes or distinctive words."
            .to_string(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_SEARCH_QUERY_CHARS,
                    "description": "What to look for."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_RESULTS,
                    "description": "Passages to return (default 5)."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    }
}
