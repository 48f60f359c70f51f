//! `CompactionService`: thin handlers over the application layer.
//!
//! Every handler reads the same way: security context (put into the request
//! extensions by the auth layer) → authorize, before any input is looked at →
//! convert ([`crate::proto`]) → one use case ([`crate::app`]) → response.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::{App, AppError, UseCase};
use crate::proto::{compact_command, pb, rehydrate_command, render_command, ConvertError};
use crate::runtime::blocking;
use crate::security::SecurityContext;

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
}

impl CompactionApi {
    /// A service over the application, charging request sizes to `limiter`.
    pub fn new(app: App, limiter: Arc<TenantLimiter>) -> Self {
        CompactionApi { app, limiter }
    }

    /// Charges the request's size to the tenant's byte and message budgets,
    /// then converts it — both on the blocking pool: measuring and
    /// converting a 100k-message thread (every tool output's JSON parsed)
    /// must not stall the async workers other tenants' calls run on.
    async fn admit_and_convert<R, T>(
        &self,
        ctx: &SecurityContext,
        request: R,
        convert: impl FnOnce(R, &App) -> Result<T, ConvertError> + Send + 'static,
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
        let converted = blocking(move || {
            limiter.charge(&tenant, request.encoded_len(), request.messages())?;
            convert(request, &app).map_err(ApiError::from)
        })
        .await
        .map_err(AppError::from)?;
        Ok(converted?)
    }
}

/// Thread messages a request carries, for the per-tenant message budget.
trait Messages {
    fn messages(&self) -> usize;
}

impl Messages for pb::CompactRequest {
    fn messages(&self) -> usize {
        self.thread.as_ref().map_or(0, |t| t.messages.len())
    }
}

impl Messages for pb::RenderRequest {
    fn messages(&self) -> usize {
        self.thread.as_ref().map_or(0, |t| t.messages.len())
    }
}

impl Messages for pb::RehydrateRequest {
    fn messages(&self) -> usize {
        0
    }
}

/// The caller, as the auth layer authenticated it.
fn context<T>(req: &Request<T>) -> Result<SecurityContext, AppError> {
    req.extensions()
        .get::<SecurityContext>()
        .cloned()
        .ok_or_else(|| AppError::Unauthenticated("no authenticated caller".into()))
}

#[tonic::async_trait]
impl CompactionService for CompactionApi {
    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        UseCase::Compact.authorize(&ctx, r.tenant_id.as_deref())?;
        let cmd = self
            .admit_and_convert(&ctx, r, |r, app| {
                compact_command(r, &app.defaults().policy)
            })
            .await?;
        let out = self.app.compact(&ctx, cmd).await?;
        Ok(Response::new((&out).into()))
    }

    async fn render(
        &self,
        request: Request<pb::RenderRequest>,
    ) -> Result<Response<pb::RenderResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        UseCase::Render {
            compact_first: r.compact_first,
            rehydrates: !r.rehydrate_artifact_ids.is_empty(),
        }
        .authorize(&ctx, r.tenant_id.as_deref())?;
        let cmd = self
            .admit_and_convert(&ctx, r, |r, app| {
                render_command(r, &app.defaults().policy)
            })
            .await?;
        let out = self.app.render(&ctx, cmd).await?;
        Ok(Response::new(out.into()))
    }

    async fn rehydrate(
        &self,
        request: Request<pb::RehydrateRequest>,
    ) -> Result<Response<pb::RehydrateResponse>, Status> {
        let ctx = context(&request)?;
        let r = request.into_inner();
        UseCase::Rehydrate.authorize(&ctx, r.tenant_id.as_deref())?;
        let cmd = self
            .admit_and_convert(&ctx, r, |r, _| Ok(rehydrate_command(r)))
            .await?;
        let out = self.app.rehydrate(&ctx, cmd).await?;
        Ok(Response::new(out.into()))
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
