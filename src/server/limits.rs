//! Admission control, as tower layers on the API's request path (health and
//! reflection never pass through them, so probes are never shed):
//!
//! - [`TenantLimitLayer`]: a server-wide concurrency cap (excess calls are
//!   shed at once with RESOURCE_EXHAUSTED, never queued), then per-tenant
//!   concurrency (a semaphore per tenant) and call rate (a token bucket per
//!   tenant), keyed by the authenticated tenant, so one noisy tenant cannot
//!   starve the others. The admitted call runs as a [`Call`]: its slots are
//!   released when the last blocking job it started ends, not when a
//!   deadline drops its future.
//! - [`TenantLimiter::charge`]: once the request is decoded, its size is
//!   charged to the tenant's byte and message buckets (a few large requests
//!   cost as much as many small ones).
//! - [`DeadlineLayer`]: a server-side deadline per call → DEADLINE_EXCEEDED.
//!   (tonic's own `Server::timeout` answers CANCELLED, which clients do not
//!   treat as a deadline.)

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

use crate::app::AppError;
use crate::runtime::Call;
use crate::security::SecurityContext;

use super::access::AccessLog;
use super::error::ApiError;

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

pub use crate::settings::TenantLimits;

/// A token bucket: `capacity` tokens, refilled at `rate` per second.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(capacity: f64, now: Instant) -> Self {
        Bucket {
            tokens: capacity,
            last: now,
        }
    }

    /// Takes `cost` tokens, or says how long until they would be there. A
    /// cost above the capacity is charged as the capacity, so the largest
    /// request the server accepts can always pass a full bucket.
    fn take(&mut self, now: Instant, rate: f64, capacity: f64, cost: f64) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(capacity);
        self.last = now;
        let cost = cost.min(capacity);
        if self.tokens < cost {
            let wait = (cost - self.tokens) / rate;
            // A tiny configured rate can make the wait unrepresentable.
            return Err(Duration::try_from_secs_f64(wait.max(0.001)).unwrap_or(Duration::MAX));
        }
        self.tokens -= cost;
        Ok(())
    }
}

#[derive(Debug)]
struct TenantState {
    semaphore: Arc<Semaphore>,
    calls: Bucket,
    bytes: Bucket,
    messages: Bucket,
    last_seen: Instant,
}

/// Shared state of the admission limits.
#[derive(Debug)]
pub struct TenantLimiter {
    limits: TenantLimits,
    global: Arc<Semaphore>,
    /// KiB of request bytes in flight, when `in_flight_bytes` is set.
    memory: Option<Arc<Semaphore>>,
    tenants: Mutex<HashMap<String, TenantState>>,
}

/// The memory a call's request was admitted with; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
}

/// Held while a call (and every job it started) runs; releases the server's
/// and the tenant's concurrency slots on drop.
#[derive(Debug)]
pub struct Admission {
    _global: OwnedSemaphorePermit,
    _tenant: Option<OwnedSemaphorePermit>,
}

/// Tenants tracked before idle entries are swept; bounds memory when many
/// tenants come and go.
const SWEEP_AT: usize = 10_000;
/// A tenant with no call in flight and none for this long is forgotten (its
/// buckets would be full again by then for any sensible rate).
const IDLE_AFTER: Duration = Duration::from_secs(60);

impl TenantLimiter {
    /// A limiter enforcing `limits`.
    pub fn new(limits: TenantLimits) -> Self {
        TenantLimiter {
            limits,
            global: Arc::new(Semaphore::new(
                limits.global_concurrency.clamp(1, Semaphore::MAX_PERMITS),
            )),
            memory: (limits.in_flight_bytes > 0)
                .then(|| Arc::new(Semaphore::new(kib(limits.in_flight_bytes) as usize))),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on `tenant`'s state, creating it (full buckets) if needed.
    fn with_tenant<T>(&self, tenant: &str, f: impl FnOnce(&mut TenantState, Instant) -> T) -> T {
        let l = self.limits;
        let now = Instant::now();
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tenants.len() >= SWEEP_AT && !tenants.contains_key(tenant) {
            tenants.retain(|_, s| {
                Arc::strong_count(&s.semaphore) > 1
                    || now.saturating_duration_since(s.last_seen) < IDLE_AFTER
            });
        }
        let state = tenants
            .entry(tenant.to_string())
            .or_insert_with(|| TenantState {
                semaphore: Arc::new(Semaphore::new(
                    (l.concurrency as usize).clamp(1, Semaphore::MAX_PERMITS),
                )),
                calls: Bucket::full(f64::from(l.burst.max(1)), now),
                bytes: Bucket::full(l.bytes_burst.max(1) as f64, now),
                messages: Bucket::full(l.messages_burst.max(1) as f64, now),
                last_seen: now,
            });
        state.last_seen = now;
        f(state, now)
    }

    /// Admits one call of `tenant`, or says why not. The server-wide cap
    /// is checked first and sheds at once: a call waits for nothing.
    pub fn admit(&self, tenant: &str) -> Result<Admission, ApiError> {
        let l = self.limits;
        let global = Arc::clone(&self.global).try_acquire_owned().map_err(|_| {
            ApiError::Overloaded(format!(" on this server (limit {})", l.global_concurrency))
        })?;
        self.with_tenant(tenant, |state, now| {
            if l.rps > 0.0 {
                let capacity = f64::from(l.burst.max(1));
                state
                    .calls
                    .take(now, l.rps, capacity, 1.0)
                    .map_err(|retry_after| ApiError::RateLimited {
                        limit: RateLimit::Calls,
                        retry_after,
                    })?;
            }
            if l.concurrency == 0 {
                return Ok(Admission {
                    _global: global,
                    _tenant: None,
                });
            }
            match Arc::clone(&state.semaphore).try_acquire_owned() {
                Ok(p) => Ok(Admission {
                    _global: global,
                    _tenant: Some(p),
                }),
                Err(_) => {
                    // Give the rate token back: the call did not run.
                    if l.rps > 0.0 {
                        state.calls.tokens += 1.0;
                    }
                    Err(ApiError::Overloaded(format!(
                        " for this tenant (limit {})",
                        l.concurrency
                    )))
                }
            }
        })
    }

    /// Waits until `bytes` of request fit in the server's memory for calls
    /// in flight, first come first served; `None` without that limit. A
    /// request larger than the whole limit waits until it runs alone, so the
    /// largest request accepted can always run.
    pub async fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let memory = Arc::clone(self.memory.as_ref()?);
        let want = kib(bytes as u64).min(kib(self.limits.in_flight_bytes));
        // The semaphore is never closed, so acquiring only waits.
        let permit = memory.acquire_many_owned(want).await.ok()?;
        Some(Reservation { _permit: permit })
    }

    /// Charges a decoded request's size to the tenant's byte and message
    /// buckets; RESOURCE_EXHAUSTED with a retry hint when either is empty.
    pub fn charge(&self, tenant: &str, bytes: usize, messages: usize) -> Result<(), ApiError> {
        let l = self.limits;
        self.with_tenant(tenant, |state, now| {
            // Check both before taking from either, so a refusal costs nothing.
            let mut bytes_bucket = None;
            if l.bytes_per_second > 0.0 {
                let capacity = l.bytes_burst.max(1) as f64;
                let mut probe = Bucket {
                    tokens: state.bytes.tokens,
                    last: state.bytes.last,
                };
                probe
                    .take(now, l.bytes_per_second, capacity, bytes as f64)
                    .map_err(|retry_after| ApiError::RateLimited {
                        limit: RateLimit::Bytes,
                        retry_after,
                    })?;
                bytes_bucket = Some(probe);
            }
            if l.messages_per_second > 0.0 {
                let capacity = l.messages_burst.max(1) as f64;
                state
                    .messages
                    .take(now, l.messages_per_second, capacity, messages as f64)
                    .map_err(|retry_after| ApiError::RateLimited {
                        limit: RateLimit::Messages,
                        retry_after,
                    })?;
            }
            if let Some(b) = bytes_bucket {
                state.bytes = b;
            }
            Ok(())
        })
    }
}

/// `bytes` in whole KiB, at least one (the memory semaphore's unit: its
/// permits fit `u32` up to 4 TiB).
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

/// Which per-tenant rate ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    /// Calls per second (`per_tenant_rps`).
    Calls,
    /// Request bytes per second (`per_tenant_bytes_per_second`).
    Bytes,
    /// Thread messages per second (`per_tenant_messages_per_second`).
    Messages,
}

impl RateLimit {
    /// The setting that sets it.
    pub fn setting(self) -> &'static str {
        match self {
            RateLimit::Calls => "per_tenant_rps",
            RateLimit::Bytes => "per_tenant_bytes_per_second",
            RateLimit::Messages => "per_tenant_messages_per_second",
        }
    }
}

/// Applies [`TenantLimiter`] to API calls, which the auth layer has given a
/// [`SecurityContext`], and runs each admitted call as a [`Call`].
#[derive(Debug, Clone)]
pub struct TenantLimitLayer {
    limiter: Arc<TenantLimiter>,
    access: Arc<AccessLog>,
}

impl TenantLimitLayer {
    /// A layer sharing `limiter` across connections; refusals go to `access`.
    pub fn new(limiter: Arc<TenantLimiter>, access: Arc<AccessLog>) -> Self {
        TenantLimitLayer { limiter, access }
    }
}

impl<S> Layer<S> for TenantLimitLayer {
    type Service = TenantLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenantLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
            access: Arc::clone(&self.access),
        }
    }
}

/// The service of [`TenantLimitLayer`].
#[derive(Debug, Clone)]
pub struct TenantLimit<S> {
    inner: S,
    limiter: Arc<TenantLimiter>,
    access: Arc<AccessLog>,
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
        let refuse = |e: ApiError| -> Self::Future {
            Box::pin(std::future::ready(Ok(Status::from(e).into_http())))
        };
        let Some(ctx) = req.extensions().get::<SecurityContext>() else {
            // The auth layer runs first; a call without a caller is refused.
            return refuse(AppError::Unauthenticated("no authenticated caller".into()).into());
        };
        let admission = match self.limiter.admit(&ctx.tenant_id) {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(tenant = %ctx.tenant_id, error = %e, "call refused by limits");
                let status = Status::from(e);
                self.access
                    .refused(req.uri().path(), Some(ctx), status.code());
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        };
        // The service that was polled ready is the one that must be called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let fut = inner.call(req);
        Box::pin(Call::new(admission).scope(fut))
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

    fn limits() -> TenantLimits {
        TenantLimits {
            global_concurrency: 100,
            concurrency: 0,
            rps: 0.0,
            burst: 0,
            bytes_per_second: 0.0,
            bytes_burst: 0,
            messages_per_second: 0.0,
            messages_burst: 0,
            in_flight_bytes: 0,
        }
    }

    /// Whether `fut` is still waiting after the runtime had a chance to run it.
    fn waits<F: std::future::Future>(fut: &mut std::pin::Pin<Box<F>>) -> bool {
        let waker = std::task::Waker::noop();
        fut.as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_pending()
    }

    #[tokio::test]
    async fn requests_wait_for_memory_in_flight_first_come_first_served() {
        let l = TenantLimiter::new(TenantLimits {
            in_flight_bytes: 10 << 20,
            ..limits()
        });
        let six = l.reserve(6 << 20).await.expect("fits");
        // 6 + 6 MiB does not fit 10: the second waits, and a small one
        // behind it waits too (no overtaking, so a large one is never
        // starved by small ones).
        let mut second = Box::pin(l.reserve(6 << 20));
        assert!(waits(&mut second));
        let mut small = Box::pin(l.reserve(1024));
        assert!(waits(&mut small));
        drop(six);
        let second = second.await.expect("room again");
        let small = small.await.expect("room for it too");
        drop((second, small));
        // Larger than the whole limit: it runs once it runs alone.
        let huge = l.reserve(64 << 20).await.expect("alone");
        let mut next = Box::pin(l.reserve(1));
        assert!(waits(&mut next));
        drop(huge);
        assert!(next.await.is_some());
        // No limit, no reservation.
        assert!(TenantLimiter::new(limits())
            .reserve(1 << 30)
            .await
            .is_none());
    }

    #[test]
    fn concurrency_is_per_tenant_under_a_global_cap() {
        let l = TenantLimiter::new(TenantLimits {
            concurrency: 1,
            global_concurrency: 2,
            ..limits()
        });
        let a = l.admit("a").expect("first call of a");
        assert!(matches!(l.admit("a"), Err(ApiError::Overloaded(_))));
        let b = l.admit("b").expect("b is not affected by a");
        match l.admit("c") {
            Err(ApiError::Overloaded(m)) => assert!(m.contains("server"), "{m}"),
            other => panic!("{other:?}"),
        }
        drop(a);
        drop(b);
        l.admit("a").expect("slot released");
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refuses_with_a_hint() {
        let l = TenantLimiter::new(TenantLimits {
            rps: 1.0,
            burst: 3,
            ..limits()
        });
        for _ in 0..3 {
            drop(l.admit("a").expect("within burst"));
        }
        match l.admit("a") {
            Err(ApiError::RateLimited { retry_after, limit }) => {
                assert_eq!(limit, RateLimit::Calls);
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1))
            }
            other => panic!("{other:?}"),
        }
        l.admit("b").expect("other tenant has its own bucket");
    }

    #[test]
    fn bytes_and_messages_are_charged_per_tenant() {
        let l = TenantLimiter::new(TenantLimits {
            bytes_per_second: 1000.0,
            bytes_burst: 10_000,
            messages_per_second: 10.0,
            messages_burst: 100,
            ..limits()
        });
        l.charge("a", 6_000, 10).expect("within the byte burst");
        match l.charge("a", 6_000, 10) {
            Err(ApiError::RateLimited { limit, retry_after }) => {
                assert_eq!(limit, RateLimit::Bytes);
                assert!(retry_after >= Duration::from_secs(1), "{retry_after:?}");
            }
            other => panic!("{other:?}"),
        }
        // A refusal costs nothing: the message bucket was not charged.
        l.charge("a", 100, 90).expect("messages left: 90");
        match l.charge("a", 1, 5) {
            Err(ApiError::RateLimited { limit, .. }) => assert_eq!(limit, RateLimit::Messages),
            other => panic!("{other:?}"),
        }
        l.charge("b", 10_000, 100).expect("b has its own buckets");
        // Larger than the burst: charged as the burst, so it can pass at all.
        l.charge("c", 1_000_000, 1)
            .expect("oversized request on a full bucket");
    }
}
