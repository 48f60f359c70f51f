//! `CompactionService`: thin handlers over the application layer.
//!
//! Every handler reads the same way: security context (put into the request
//! extensions by the auth layer) → authorize, before any input is looked at →
//! convert ([`crate::proto`]) → one use case ([`crate::app`]) → response.

use tonic::{Request, Response, Status};

use crate::app::{App, AppError, UseCase};
use crate::proto::{compact_command, pb, rehydrate_command, render_command};
use crate::security::SecurityContext;

use crate::proto::pb::compaction_service_server::CompactionService;

/// Fully qualified gRPC name of the service (health status key).
pub const SERVICE_NAME: &str = "compactd.v1.CompactionService";

/// The service implementation. Cheap to clone; all state is in the [`App`].
#[derive(Clone, Debug)]
pub struct CompactionApi {
    app: App,
}

impl CompactionApi {
    /// A service over the application.
    pub fn new(app: App) -> Self {
        CompactionApi { app }
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
        let cmd = compact_command(r, &self.app.defaults().policy)?;
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
        let cmd = render_command(r, &self.app.defaults().policy)?;
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
        let out = self.app.rehydrate(&ctx, rehydrate_command(r)).await?;
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
