//! A client-side limit on our writes to the apiserver, as the `--kube-api-qps` and
//! `--kube-api-burst` of kube-controller-manager limit its client (client-go's token bucket
//! in `util/flowcontrol`). Unlike client-go's, only writes wait: reads (the fresh GETs of
//! convergence, lists and watches of the view) are never held back, and neither are the Lease
//! writes of leader election, so that a queue of writes never costs the Lease.
//!
//! It is a tower layer on the API client, so every write of the process passes it whatever
//! feature makes it: claim patches, status and annotation patches, journal writes, pod and
//! StatefulSet deletions, Events, certificate Secrets.
//!
//! A write may wait here for seconds, and what allowed it may not hold any more when its
//! token comes: the controller's executor runs its calls under a check
//! ([`checked_after_wait`], the controller's fence), asked after the wait, immediately before
//! the request is sent.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Method, Request};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use prometheus_client::metrics::counter::Counter;
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service};

tokio::task_local! {
    /// The check the writes of the current call pass after their wait for a token.
    static AFTER_WAIT: AfterWait;
}

/// A check asked after the wait; an error refuses the write (nothing is sent).
pub type AfterWait = Arc<dyn Fn() -> Result<(), BoxError> + Send + Sync>;

/// Runs `call` (API requests of this task) with `check` asked for each of its writes after
/// the wait for a token, immediately before the write is sent.
pub async fn checked_after_wait<F: Future>(check: AfterWait, call: F) -> F::Output {
    AFTER_WAIT.scope(check, call).await
}

/// kube-controller-manager's defaults.
pub const DEFAULT_QPS: f32 = 20.0;
pub const DEFAULT_BURST: u32 = 30;

/// A token bucket of `qps` writes per second on average, `burst` at once.
#[derive(Clone)]
pub struct WriteLimit {
    limiter: Arc<DefaultDirectRateLimiter>,
    /// Writes that had to wait for a token.
    throttled: Counter,
}

impl std::fmt::Debug for WriteLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLimit").finish_non_exhaustive()
    }
}

impl WriteLimit {
    /// `qps` must be positive and finite, `burst` at least 1.
    pub fn new(qps: f32, burst: u32) -> Result<Self, String> {
        if !qps.is_finite() || qps <= 0.0 {
            return Err(format!("qps must be a positive number, not {qps}"));
        }
        let burst = NonZeroU32::new(burst).ok_or("burst must be at least 1")?;
        let period = Duration::from_secs_f64(1.0 / f64::from(qps));
        let quota = Quota::with_period(period)
            .ok_or("qps is too large")?
            .allow_burst(burst);
        Ok(Self {
            limiter: Arc::new(RateLimiter::direct(quota)),
            throttled: Counter::default(),
        })
    }
}

impl WriteLimit {
    /// Registers `kube_api_writes_throttled`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "kube_api_writes_throttled",
            "Writes to the apiserver that waited for the client-side rate limit (--kube-api-qps, --kube-api-burst)",
            self.throttled.clone(),
        );
    }
}

/// Whether a request waits for a token: writes, except those of leader election.
pub fn is_limited<B>(request: &Request<B>) -> bool {
    let read = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    !read
        && !request
            .uri()
            .path()
            .starts_with("/apis/coordination.k8s.io/")
}

impl<S> Layer<S> for WriteLimit
where
    S: Service<Request<kube::client::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = WriteLimited<Buffer<Request<kube::client::Body>, S::Future>>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteLimited {
            // A cheap clone of the inner service for each request that waits (the one made
            // ready is the one called, as tower asks).
            inner: Buffer::new(inner, 1024),
            limit: self.clone(),
        }
    }
}

/// The service [`WriteLimit`] wraps around the client's stack.
#[derive(Clone)]
pub struct WriteLimited<S> {
    inner: S,
    limit: WriteLimit,
}

impl<S, B> Service<Request<B>> for WriteLimited<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: From<BoxError>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !is_limited(&request) {
            return Box::pin(self.inner.call(request));
        }
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit.clone();
        Box::pin(async move {
            if limit.limiter.check().is_err() {
                limit.throttled.inc();
                limit.limiter.until_ready().await;
            }
            // Outside a checked call (the Lease aside, nothing of ours writes there) there
            // is nothing to ask.
            if let Ok(Err(refused)) = AFTER_WAIT.try_with(|check| check()) {
                return Err(refused.into());
            }
            ready.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .expect("request")
    }

    #[test]
    fn writes_wait_reads_and_leases_do_not() {
        let claim = "/api/v1/namespaces/db/persistentvolumeclaims/data-web-0";
        assert!(is_limited(&request(Method::PATCH, claim)));
        assert!(is_limited(&request(
            Method::POST,
            "/api/v1/namespaces/db/configmaps"
        )));
        assert!(is_limited(&request(
            Method::DELETE,
            "/api/v1/namespaces/db/pods/web-0"
        )));
        assert!(is_limited(&request(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/db/events"
        )));
        assert!(!is_limited(&request(Method::GET, claim)));
        assert!(!is_limited(&request(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/sa/leases/stateful-admission-controller"
        )));
    }

    #[test]
    fn limits_must_be_positive() {
        assert!(WriteLimit::new(20.0, 30).is_ok());
        assert!(WriteLimit::new(0.5, 1).is_ok());
        for (qps, burst) in [
            (0.0, 30),
            (-1.0, 30),
            (f32::NAN, 30),
            (f32::INFINITY, 30),
            (20.0, 0),
        ] {
            assert!(WriteLimit::new(qps, burst).is_err(), "{qps} {burst}");
        }
    }

    #[tokio::test]
    async fn a_write_is_checked_after_its_wait_and_refused_writes_are_not_sent() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        let inner = tower::service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, BoxError>("sent") }
        });
        let limit = WriteLimit::new(1000.0, 1).expect("limit");
        let mut service = WriteLimited {
            inner: Buffer::new(inner, 8),
            limit: limit.clone(),
        };
        let allowed = Arc::new(AtomicBool::new(true));
        let asked = Arc::new(AtomicUsize::new(0));
        let check: AfterWait = {
            let (allowed, asked) = (allowed.clone(), asked.clone());
            Arc::new(move || {
                asked.fetch_add(1, Ordering::SeqCst);
                if allowed.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("fenced".into())
                }
            })
        };
        let claim = "/api/v1/namespaces/db/persistentvolumeclaims/data-web-0";
        // The first write takes the only token; the second waits for one, and meanwhile
        // what allowed it stopped holding.
        let first = checked_after_wait(
            check.clone(),
            service
                .ready()
                .await
                .expect("ready")
                .call(request(Method::PATCH, claim)),
        );
        assert_eq!(first.await.expect("sent"), "sent");
        allowed.store(false, Ordering::SeqCst);
        let second = checked_after_wait(
            check.clone(),
            service
                .ready()
                .await
                .expect("ready")
                .call(request(Method::PATCH, claim)),
        );
        let refused = second.await.expect_err("refused after the wait");
        assert_eq!(refused.to_string(), "fenced");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "the refused write was not sent"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert_eq!(limit.throttled.get(), 1, "the second write waited");
        // Reads are never checked; nor is anything outside a checked call.
        let read = checked_after_wait(
            check,
            service
                .ready()
                .await
                .expect("ready")
                .call(request(Method::GET, claim)),
        );
        assert_eq!(read.await.expect("read"), "sent");
        let unchecked = service
            .ready()
            .await
            .expect("ready")
            .call(request(Method::PATCH, claim));
        assert_eq!(unchecked.await.expect("sent"), "sent");
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_burst_passes_at_once_then_writes_wait_for_tokens() {
        let limit = WriteLimit::new(1000.0, 3).expect("limit");
        for _ in 0..3 {
            assert!(limit.limiter.check().is_ok());
        }
        assert!(limit.limiter.check().is_err(), "the burst is spent");
        limit.limiter.until_ready().await;
    }
}
