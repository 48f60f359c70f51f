//! Admission control, as tower layers on the HTTP/2 request path:
//!
//! - [`TenantLimitLayer`]: per-tenant concurrency (a semaphore per tenant) and
//!   request rate (a token bucket per tenant), keyed by the authenticated
//!   tenant, so one noisy tenant cannot starve the others. Over the limit →
//!   RESOURCE_EXHAUSTED (rate limits carry a `retry-after-ms` hint).
//! - [`DeadlineLayer`]: a server-side deadline per call → DEADLINE_EXCEEDED.
//!   (tonic's own `Server::timeout` answers CANCELLED, which clients do not
//!   treat as a deadline.)
//!
//! The global concurrency limit and load shedding are tower's own layers
//! (`GlobalConcurrencyLimitLayer` under `LoadShedLayer`), assembled in `mod.rs`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::Status;
use tower::{Layer, Service};

use crate::security::SecurityContext;

use super::error::ApiError;

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// Per-tenant limits; 0 disables a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantLimits {
    /// Calls in flight per tenant.
    pub concurrency: u32,
    /// Sustained calls per second per tenant.
    pub rps: f64,
    /// Bucket size: calls a tenant may make at once after being idle.
    pub burst: u32,
}

/// A token bucket: `burst` tokens, refilled at `rps` per second.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

#[derive(Debug)]
struct TenantState {
    semaphore: Arc<Semaphore>,
    bucket: Bucket,
}

/// Shared state of the per-tenant limits.
#[derive(Debug)]
pub struct TenantLimiter {
    limits: TenantLimits,
    tenants: Mutex<HashMap<String, TenantState>>,
}

/// Held while a call runs; releases the tenant's concurrency slot on drop.
#[derive(Debug)]
pub struct TenantPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// Tenants tracked before idle entries are swept; bounds memory when many
/// tenants come and go.
const SWEEP_AT: usize = 10_000;
/// A tenant with no call in flight and none for this long is forgotten (its
/// bucket would be full again by then for any sensible rate).
const IDLE_AFTER: Duration = Duration::from_secs(60);

impl TenantLimiter {
    /// A limiter enforcing `limits`.
    pub fn new(limits: TenantLimits) -> Self {
        TenantLimiter {
            limits,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Admits one call of `tenant`, or says why not.
    pub fn admit(&self, tenant: &str) -> Result<TenantPermit, ApiError> {
        let l = self.limits;
        let now = Instant::now();
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tenants.len() >= SWEEP_AT && !tenants.contains_key(tenant) {
            tenants.retain(|_, s| {
                Arc::strong_count(&s.semaphore) > 1
                    || now.saturating_duration_since(s.bucket.last) < IDLE_AFTER
            });
        }
        let state = tenants
            .entry(tenant.to_string())
            .or_insert_with(|| TenantState {
                semaphore: Arc::new(Semaphore::new(
                    (l.concurrency as usize).clamp(1, Semaphore::MAX_PERMITS),
                )),
                bucket: Bucket {
                    tokens: f64::from(l.burst.max(1)),
                    last: now,
                },
            });
        if l.rps > 0.0 {
            let b = &mut state.bucket;
            let capacity = f64::from(l.burst.max(1));
            let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
            b.tokens = (b.tokens + elapsed * l.rps).min(capacity);
            b.last = now;
            if b.tokens < 1.0 {
                let wait = (1.0 - b.tokens) / l.rps;
                return Err(ApiError::RateLimited {
                    retry_after: Duration::from_secs_f64(wait.max(0.001)),
                });
            }
            b.tokens -= 1.0;
        }
        if l.concurrency == 0 {
            return Ok(TenantPermit(None));
        }
        match Arc::clone(&state.semaphore).try_acquire_owned() {
            Ok(p) => Ok(TenantPermit(Some(p))),
            Err(_) => {
                // Give the rate token back: the call did not run.
                if l.rps > 0.0 {
                    state.bucket.tokens += 1.0;
                }
                Err(ApiError::Overloaded(format!(
                    " for this tenant (limit {})",
                    l.concurrency
                )))
            }
        }
    }
}

/// Applies [`TenantLimiter`] to calls that carry a [`SecurityContext`]
/// (health and reflection carry none and pass).
#[derive(Debug, Clone)]
pub struct TenantLimitLayer {
    limiter: Arc<TenantLimiter>,
}

impl TenantLimitLayer {
    /// A layer sharing `limiter` across connections.
    pub fn new(limiter: Arc<TenantLimiter>) -> Self {
        TenantLimitLayer { limiter }
    }
}

impl<S> Layer<S> for TenantLimitLayer {
    type Service = TenantLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenantLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// The service of [`TenantLimitLayer`].
#[derive(Debug, Clone)]
pub struct TenantLimit<S> {
    inner: S,
    limiter: Arc<TenantLimiter>,
}

impl<S, B> Service<http::Request<B>> for TenantLimit<S>
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let permit = match req.extensions().get::<SecurityContext>() {
            None => None,
            Some(ctx) => match self.limiter.admit(&ctx.tenant_id) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::debug!(tenant = %ctx.tenant_id, error = %e, "call refused by limits");
                    return Box::pin(std::future::ready(Ok(Status::from(e).into_http())));
                }
            },
        };
        // The service that was polled ready is the one that must be called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let fut = inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            drop(permit);
            out
        })
    }
}

/// Fails calls that run longer than a deadline with DEADLINE_EXCEEDED.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    deadline: Duration,
}

impl DeadlineLayer {
    /// A deadline of `deadline` per call (`Duration::ZERO` disables it).
    pub fn new(deadline: Duration) -> Self {
        DeadlineLayer { deadline }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            deadline: self.deadline,
        }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    deadline: Duration,
}

impl<S, B> Service<http::Request<B>> for Deadline<S>
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let deadline = self.deadline;
        let fut = inner.call(req);
        if deadline.is_zero() {
            return Box::pin(fut);
        }
        Box::pin(async move {
            match tokio::time::timeout(deadline, fut).await {
                Ok(out) => out,
                Err(_) => Ok(Status::from(ApiError::DeadlineExceeded(deadline)).into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_per_tenant() {
        let l = TenantLimiter::new(TenantLimits {
            concurrency: 1,
            rps: 0.0,
            burst: 0,
        });
        let a = l.admit("a").expect("first call of a");
        assert!(matches!(l.admit("a"), Err(ApiError::Overloaded(_))));
        let _b = l.admit("b").expect("b is not affected by a");
        drop(a);
        l.admit("a").expect("slot released");
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refuses_with_a_hint() {
        let l = TenantLimiter::new(TenantLimits {
            concurrency: 0,
            rps: 1.0,
            burst: 3,
        });
        for _ in 0..3 {
            l.admit("a").expect("within burst");
        }
        match l.admit("a") {
            Err(ApiError::RateLimited { retry_after }) => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1))
            }
            other => panic!("{other:?}"),
        }
        l.admit("b").expect("other tenant has its own bucket");
    }
}
