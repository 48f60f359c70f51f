//! `CompactionService`: thin handlers over the application layer.
//!
//! Every handler reads the same way: security context (put into the request
//! extensions by the auth layer) → authorize, before any input is looked at →
//! convert ([`crate::proto`]) → one use case ([`crate::app`]) → response.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::{App, AppError, UseCase};
use crate::proto::{pb, ConvertError};

use super::convert::{
    compact_command_reusing, compact_response, explain_command, rehydrate_command,
    render_command_reusing, render_response, search_command, ThreadReuse,
};
use crate::runtime::blocking;
use crate::security::SecurityContext;

use tracing::Instrument as _;

use super::access::AccessLog;
use super::error::ApiError;
use super::limits::TenantLimiter;
use crate::proto::pb::compaction_service_server::CompactionService;

/// Fully qualified gRPC name of the service (health status key).
pub const SERVICE_NAME: &str = "compactd.v1.CompactionService";

/// The service implementation. Cheap to clone; all state is in the [`App`].
#[derive(Clone, Debug)]
pub struct CompactionApi {
    app: App,
    limiter: Arc<TenantLimiter>,
    access: Arc<AccessLog>,
}

impl CompactionApi {
    /// A service over the application, charging request sizes to `limiter`
    /// and writing one access line per call.
    pub fn new(app: App, limiter: Arc<TenantLimiter>, access: Arc<AccessLog>) -> Self {
        CompactionApi {
            app,
            limiter,
            access,
        }
    }

    /// Waits until the server's memory for requests in flight has room for
    /// this one, charges its size to the tenant's byte and message budgets,
    /// then converts it — both on the blocking pool: measuring and
    /// converting a 100k-message thread (every tool output's JSON parsed)
    /// must not stall the async workers other tenants' calls run on.
    async fn admit_and_convert<R, T>(
        &self,
        ctx: &SecurityContext,
        request: R,
        convert: impl FnOnce(R, &App, &mut ThreadReuse) -> Result<T, ConvertError> + Send + 'static,
    ) -> Result<T, Status>
    where
        R: prost::Message + Messages + Send + 'static,
        T: Send + 'static,
    {
        let (app, limiter, tenant) = (
            self.app.clone(),
            Arc::clone(&self.limiter),
            ctx.tenant_id.clone(),
        );
        let bytes = request.encoded_len();
        // The request's working memory is admitted before any of it is
        // made, and held until the call and every job it started are gone
        // (every API call runs as one: the admission layer makes it).
        if let Some(memory) = limiter.reserve(bytes).await {
            if let Some(call) = crate::runtime::Call::current() {
                call.attach(memory);
            }
        }
        let work = move || {
            limiter.charge(&tenant, bytes, request.messages())?;
            // A thread sent in full again converts only what changed.
            let mut reuse = ThreadReuse::default();
            let mut before = None;
            if let Some(id) = request.sent_in_full() {
                let (last, mark) = app.sent_thread(&tenant, id);
                reuse = ThreadReuse::new(last);
                before = Some(mark);
            }
            let out = convert(request, &app, &mut reuse).map_err(ApiError::from)?;
            if let (Some(sent), Some(before)) = (reuse.sent, before) {
                app.keep_sent(&tenant, sent, before);
            }
            Ok::<_, ApiError>(out)
        };
        if bytes <= INLINE_CONVERT_BYTES {
            return Ok(work()?);
        }
        let converted = blocking(work).await.map_err(AppError::from)?;
        Ok(converted?)
    }
}

/// Requests up to this size are converted on the calling task: a trip to
/// the blocking pool and back (about 0.1 ms) costs more than converting an
/// append of a few messages.
const INLINE_CONVERT_BYTES: usize = 64 * 1024;

/// Thread messages a request carries, for the per-tenant message budget.
trait Messages {
    fn messages(&self) -> usize;

    /// The id of the thread the request sends in full, when its conversion
    /// may share the last one's messages (the per-turn calls).
    fn sent_in_full(&self) -> Option<&str> {
        None
    }
}

impl Messages for pb::CompactRequest {
    fn messages(&self) -> usize {
        carried(self.thread.as_ref(), self.append.as_ref())
            + self.input.as_ref().map_or(0, |i| json_items(&i.json))
    }

    fn sent_in_full(&self) -> Option<&str> {
        self.thread.as_ref().map(|t| t.id.as_str())
    }
}

impl Messages for pb::RenderRequest {
    fn messages(&self) -> usize {
        carried(self.thread.as_ref(), self.append.as_ref())
            + self.input.as_ref().map_or(0, |i| json_items(&i.json))
    }

    fn sent_in_full(&self) -> Option<&str> {
        self.thread.as_ref().map(|t| t.id.as_str())
    }
}

impl Messages for pb::RehydrateRequest {
    fn messages(&self) -> usize {
        0
    }
}

impl Messages for pb::ExplainRequest {
    fn messages(&self) -> usize {
        carried(self.thread.as_ref(), self.append.as_ref())
    }
}

impl Messages for pb::SearchContextRequest {
    fn messages(&self) -> usize {
        carried(self.thread.as_ref(), self.append.as_ref())
            + self.input.as_ref().map_or(0, |i| json_items(&i.json))
    }
}

/// The caller, as the auth layer authenticated it.
fn context<T>(req: &Request<T>) -> Result<SecurityContext, AppError> {
    req.extensions()
        .get::<SecurityContext>()
        .cloned()
        .ok_or_else(|| AppError::Unauthenticated("no authenticated caller".into()))
}

/// The thread a request names: in `thread`, or in `append`.
fn thread_id<'a>(thread: Option<&'a pb::Thread>, append: Option<&'a pb::ThreadAppend>) -> &'a str {
    thread
        .map(|t| t.id.as_str())
        .or(append.map(|a| a.thread_id.as_str()))
        .unwrap_or("")
}

/// Items of a provider body (`messages`, or Responses `input`), counted
/// by a scan that builds nothing; at least 1 when it is not a list of them
/// (the conversion then says what is wrong).
fn json_items(json: &str) -> usize {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Body {
        messages: Option<Vec<IgnoredAny>>,
        input: Option<Vec<IgnoredAny>>,
    }
    let counted = if json.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<IgnoredAny>>(json).map(|v| v.len())
    } else {
        serde_json::from_str::<Body>(json)
            .map(|b| b.messages.map_or(0, |m| m.len()) + b.input.map_or(0, |i| i.len()))
    };
    counted.unwrap_or(1)
}

/// The thread a request names: in `thread`, `append` or `input`.
fn named<'a>(
    thread: Option<&'a pb::Thread>,
    append: Option<&'a pb::ThreadAppend>,
    input: Option<&'a pb::ProviderInput>,
) -> &'a str {
    match input {
        Some(i) => i.thread_id.as_str(),
        None => thread_id(thread, append),
    }
}

/// Messages a request carries in `thread` and `append` (either form).
fn carried(thread: Option<&pb::Thread>, append: Option<&pb::ThreadAppend>) -> usize {
    let appended = |a: &pb::ThreadAppend| {
        a.messages.len()
            + if a.messages_json.is_empty() {
                0
            } else {
                json_items(&a.messages_json)
            }
    };
    thread.map_or(0, |t| t.messages.len()) + append.map_or(0, appended)
}

#[tonic::async_trait]
impl CompactionService for CompactionApi {
    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut entry = self.access.entry(
            "Compact",
            &ctx,
            named(r.thread.as_ref(), r.append.as_ref(), r.input.as_ref()),
        );
        let span = entry.span();
        let result = async {
            UseCase::Compact.authorize(&ctx, r.tenant_id.as_deref())?;
            let known = r.known_plan_version;
            let cmd = self
                .admit_and_convert(&ctx, r, |r, app, reuse| {
                    compact_command_reusing(r, &app.defaults().policy, reuse)
                })
                .await?;
            let out = self.app.compact(&ctx, cmd).await?;
            entry.plan(
                out.plan.version,
                Some(out.tokens_before()),
                Some(out.tokens_after()),
            );
            Ok(Response::new(compact_response(&out, known)))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn render(
        &self,
        request: Request<pb::RenderRequest>,
    ) -> Result<Response<pb::RenderResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut entry = self.access.entry(
            "Render",
            &ctx,
            named(r.thread.as_ref(), r.append.as_ref(), r.input.as_ref()),
        );
        let span = entry.span();
        let result = async {
            UseCase::Render {
                compact_first: r.compact_first,
                rehydrates: !r.rehydrate_artifact_ids.is_empty(),
            }
            .authorize(&ctx, r.tenant_id.as_deref())?;
            let known = r.known_plan_version;
            let cmd = self
                .admit_and_convert(&ctx, r, |r, app, reuse| {
                    render_command_reusing(r, &app.defaults().policy, reuse)
                })
                .await?;
            let out = self.app.render(&ctx, cmd).await?;
            let before = out
                .compaction
                .as_ref()
                .map_or(out.plan.original_token_count, |c| c.tokens_before());
            entry.plan(out.plan.version, Some(before), Some(out.tokens.total));
            Ok(Response::new(render_response(out, known)))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn rehydrate(
        &self,
        request: Request<pb::RehydrateRequest>,
    ) -> Result<Response<pb::RehydrateResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let entry = self.access.entry("Rehydrate", &ctx, &r.thread_id);
        let span = entry.span();
        let result = async {
            UseCase::Rehydrate.authorize(&ctx, r.tenant_id.as_deref())?;
            let cmd = self
                .admit_and_convert(&ctx, r, |r, _, _| Ok(rehydrate_command(r)))
                .await?;
            let out = self.app.rehydrate(&ctx, cmd).await?;
            Ok(Response::new(out.into()))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn explain(
        &self,
        request: Request<pb::ExplainRequest>,
    ) -> Result<Response<pb::ExplainResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut entry = self.access.entry("Explain", &ctx, &r.thread_id);
        let span = entry.span();
        let result = async {
            UseCase::Explain {
                search_artifacts: r.search_artifacts,
            }
            .authorize(&ctx, r.tenant_id.as_deref())?;
            let cmd = self
                .admit_and_convert(&ctx, r, |r, app, _| {
                    explain_command(r, &app.defaults().policy)
                })
                .await?;
            let out = self.app.explain(&ctx, cmd).await?;
            entry.plan(out.plan_version, None, None);
            Ok(Response::new(out.into()))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn search_context(
        &self,
        request: Request<pb::SearchContextRequest>,
    ) -> Result<Response<pb::SearchContextResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut entry = self.access.entry(
            "SearchContext",
            &ctx,
            named(r.thread.as_ref(), r.append.as_ref(), r.input.as_ref()),
        );
        let span = entry.span();
        let result = async {
            UseCase::SearchContext.authorize(&ctx, r.tenant_id.as_deref())?;
            let cmd = self
                .admit_and_convert(&ctx, r, |r, app, _| {
                    search_command(r, &app.defaults().policy)
                })
                .await?;
            let out = self.app.search_context(&ctx, cmd).await?;
            entry.plan(out.plan_version, None, None);
            Ok(Response::new(out.into()))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn delete_thread(
        &self,
        request: Request<pb::DeleteThreadRequest>,
    ) -> Result<Response<pb::DeleteThreadResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let entry = self.access.entry("DeleteThread", &ctx, &r.thread_id);
        let span = entry.span();
        let result = async {
            UseCase::DeleteThread.authorize(&ctx, r.tenant_id.as_deref())?;
            let out = self.app.delete_thread(&ctx, &r.thread_id).await?;
            Ok(Response::new(pb::DeleteThreadResponse {
                had_plan: out.had_plan,
                artifacts_deleted: out.removed.artifacts,
                bytes_freed: out.removed.bytes,
                had_session: out.had_session,
            }))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }

    async fn reset_plan(
        &self,
        request: Request<pb::ResetPlanRequest>,
    ) -> Result<Response<pb::ResetPlanResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        let mut entry = self.access.entry("ResetPlan", &ctx, &r.thread_id);
        let span = entry.span();
        let result = async {
            UseCase::ResetPlan.authorize(&ctx, r.tenant_id.as_deref())?;
            let out = self
                .app
                .reset_plan(&ctx, &r.thread_id, r.expected_version)
                .await?;
            entry.plan(out.version, None, None);
            Ok(Response::new(pb::ResetPlanResponse {
                previous_version: out.previous_version,
                version: out.version,
            }))
        }
        .instrument(span)
        .await;
        entry.finish(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_name_matches_the_generated_server() {
        use tonic::server::NamedService;
        assert_eq!(
            <pb::compaction_service_server::CompactionServiceServer<CompactionApi> as NamedService>::NAME,
            SERVICE_NAME
        );
    }
}

#[cfg(test)]
mod message_budget {
    use super::*;

    #[test]
    fn messages_in_a_provider_shape_count_against_the_message_budget() {
        assert_eq!(json_items(r#"[{"role":"user"},{"role":"assistant"}]"#), 2);
        assert_eq!(json_items(r#"{"model":"m","messages":[{},{},{}]}"#), 3);
        assert_eq!(json_items(r#"{"input":[{},{}],"instructions":"x"}"#), 2);
        // Not a list of messages: the conversion says why; it still costs one.
        assert_eq!(json_items(r#"{"input":"hello"}"#), 1);
        assert_eq!(json_items("not json"), 1);
        let append = pb::ThreadAppend {
            messages_json: "[{},{},{},{}]".into(),
            ..Default::default()
        };
        assert_eq!(carried(None, Some(&append)), 4);
        let request = pb::RenderRequest {
            append: Some(append),
            ..Default::default()
        };
        assert_eq!(request.messages(), 4);
    }
}
