//! Authentication as a tower layer: every API call is authenticated once,
//! before routing, and the resulting [`SecurityContext`](crate::security::SecurityContext) is put into the
//! request extensions where handlers (and the tenant limits) find it.
//! It wraps the API service only: health checks and reflection are routed
//! around it, so probes and tooling work without credentials (they expose no
//! tenant data).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::Status;
use tower::{Layer, Service};

use crate::security::Authenticator;

use super::access::AccessLog;
use super::error::ApiError;

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// Authenticates calls with an [`Authenticator`].
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
    access: Arc<AccessLog>,
}

impl AuthLayer {
    /// A layer sharing `auth` across connections; refusals go to `access`.
    pub fn new(auth: Arc<Authenticator>, access: Arc<AccessLog>) -> Self {
        AuthLayer { auth, access }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            auth: Arc::clone(&self.auth),
            access: Arc::clone(&self.access),
        }
    }
}

/// The service of [`AuthLayer`].
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Arc<Authenticator>,
    access: Arc<AccessLog>,
}

impl<S, B> Service<http::Request<B>> for Auth<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let certs: Option<Vec<Vec<u8>>> = req
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(|i| i.peer_certs())
            .map(|chain| chain.iter().map(|c| c.as_ref().to_vec()).collect());
        match self.auth.authenticate(req.headers(), certs.as_deref()) {
            Ok(ctx) => {
                req.extensions_mut().insert(ctx);
            }
            Err(e) => {
                tracing::debug!(path = req.uri().path(), error = %e, "authentication failed");
                let status = Status::from(ApiError::from(e));
                self.access.refused(req.uri().path(), None, status.code());
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(inner.call(req))
    }
}
