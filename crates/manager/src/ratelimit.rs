//! Client-side rate limiting of the manager's API requests, as client-go's token bucket
//! (`rest.Config.QPS`/`Burst`, upstream's `clientConnection.qps`/`burst`, 500/500): a request
//! waits for a token before it is sent. Watches take one token when they start, as in client-go.
//! Without it a 500-QPS controller is throttled by kube-apiserver's priority and fairness
//! instead, with 429s and retries.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tower::{Layer, Service};

/// A token bucket refilled at `qps` tokens a second, holding at most `burst`.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl RateLimitLayer {
    /// client-go's reading of `QPS`/`Burst`: 0 means its defaults (5 and 10), a negative or
    /// infinite QPS means no limit (`None`).
    pub fn new(qps: f64, burst: u32) -> Option<RateLimitLayer> {
        let qps = if qps == 0.0 { 5.0 } else { qps };
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::new(10)?);
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / qps))?.allow_burst(burst);
        Some(RateLimitLayer { limiter: Arc::new(RateLimiter::direct(quota)) })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited { inner, limiter: self.limiter.clone(), wait: None, permitted: false }
    }
}

/// The service behind the layer: `poll_ready` is pending until a token is taken, so kube's
/// request buffer holds further requests back in order, as client-go's limiter blocks callers.
pub struct RateLimited<S> {
    inner: S,
    limiter: Arc<DefaultDirectRateLimiter>,
    wait: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    permitted: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.permitted {
            let limiter = self.limiter.clone();
            let wait = self.wait.get_or_insert_with(|| Box::pin(async move { limiter.until_ready().await }));
            match wait.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.wait = None;
                    self.permitted = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        // Each call spends the token its poll_ready took.
        self.permitted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use tower::ServiceExt;

    use super::*;

    #[test]
    fn no_limit_with_a_negative_or_infinite_rate_as_client_go() {
        for (qps, burst, limited) in [
            (500.0, 500, true),
            (0.5, 1, true),
            // client-go's defaults stand in for zeroes.
            (0.0, 500, true),
            (500.0, 0, true),
            (-1.0, 500, false),
            (f64::NAN, 500, false),
            (f64::INFINITY, 500, false),
        ] {
            assert_eq!(RateLimitLayer::new(qps, burst).is_some(), limited, "qps {qps} burst {burst}");
        }
    }

    /// The limit holds: a burst passes at once, every later request waits for its token. The
    /// assertion is a lower bound the bucket guarantees (requests can be slower, never faster).
    #[tokio::test]
    async fn requests_beyond_the_burst_wait_for_the_rate() {
        let (qps, burst, total) = (50.0, 5u32, 20usize);
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let inner = tower::service_fn(move |_: ()| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut svc = RateLimitLayer::new(qps, burst).unwrap().layer(inner);
        let start = Instant::now();
        for _ in 0..total {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        let took = start.elapsed();
        assert_eq!(sent.load(Ordering::SeqCst), total);
        let floor = Duration::from_secs_f64((total - burst as usize) as f64 / qps);
        // GCRA may grant the first token past the burst a little early: allow one period.
        let slack = Duration::from_secs_f64(1.0 / qps);
        assert!(took + slack >= floor, "{total} requests at {qps}/s, burst {burst}: took {took:?}, floor {floor:?}");
    }

    #[tokio::test]
    async fn a_burst_is_ready_at_once_and_the_next_request_is_not() {
        use futures::FutureExt;
        // One token a second: nothing refills while the test polls.
        let inner = tower::service_fn(|_: ()| async { Ok::<_, std::convert::Infallible>(()) });
        let mut svc = RateLimitLayer::new(1.0, 3).unwrap().layer(inner);
        for i in 0..3 {
            let ready = svc.ready().now_or_never();
            assert!(ready.is_some(), "request {i} of the burst waited");
            svc.call(()).await.unwrap();
        }
        assert!(svc.ready().now_or_never().is_none(), "a fourth request passed a burst of 3");
    }
}
