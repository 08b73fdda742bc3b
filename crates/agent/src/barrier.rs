//! The barrier that holds the pod's main containers back until every pod of the JobSet is at
//! the same attempt. In a pod it is the agent sidecar's startupProbe: the kubelet starts the
//! main containers only once a sidecar's startup probe has passed.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, Uri};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub trait Barrier: Send {
    /// Lets the main containers start. Called at most once per run.
    fn lift(&mut self);
}

/// Main-container mode: starting the worker is the barrier.
pub struct NoBarrier;

impl Barrier for NoBarrier {
    fn lift(&mut self) {}
}

/// In-process: the receivers see `true` once lifted.
impl Barrier for tokio::sync::watch::Sender<bool> {
    fn lift(&mut self) {
        self.send_replace(true);
    }
}

/// The startup-probe endpoint: `GET <path>` answers 200 once the barrier is lifted; other paths
/// are 404. While the barrier is up the answer is held for up to `hold` and is 200 the moment the
/// barrier lifts, else 503 Service Unavailable (an extension: upstream answers 503 at once). A
/// kubelet probes at most once a second, so an immediate 503 leaves the worker waiting up to a
/// whole probe period after its attempt became current; a held probe closes that gap. `hold`
/// stays under the probe's `timeoutSeconds` (1 s by default), or the kubelet counts a timeout,
/// which is a failure too. It listens from the start, so every probe gets an answer rather than
/// a connection error.
pub struct HttpBarrier {
    lifted: tokio::sync::watch::Sender<bool>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

/// How long a probe of a barrier that is still up is held by default: under the kubelet's
/// default probe timeout of 1 s.
pub const DEFAULT_BARRIER_HOLD: Duration = Duration::from_millis(900);

impl HttpBarrier {
    /// Listens on `addr` (port 0: any free port, see [`HttpBarrier::local_addr`]), holding probes
    /// of a barrier that is up for [`DEFAULT_BARRIER_HOLD`].
    pub async fn bind(addr: SocketAddr, path: String) -> std::io::Result<HttpBarrier> {
        HttpBarrier::bind_holding(addr, path, DEFAULT_BARRIER_HOLD).await
    }

    /// As [`HttpBarrier::bind`], holding probes for `hold` (zero: answer 503 at once, as upstream).
    pub async fn bind_holding(addr: SocketAddr, path: String, hold: Duration) -> std::io::Result<HttpBarrier> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (lifted, _) = tokio::sync::watch::channel(false);
        let state = lifted.clone();
        let app = Router::new().fallback(move |uri: Uri| {
            let (path, mut rx) = (path.clone(), state.subscribe());
            async move {
                if uri.path() != path {
                    return (StatusCode::NOT_FOUND, "not found\n");
                }
                match tokio::time::timeout(hold, rx.wait_for(|l| *l)).await {
                    Ok(Ok(_)) => (StatusCode::OK, "barrier lifted\n"),
                    _ => (StatusCode::SERVICE_UNAVAILABLE, "waiting for every pod to reach this attempt\n"),
                }
            }
        });
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "barrier endpoint stopped");
            }
        });
        Ok(HttpBarrier { lifted, addr, server })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Barrier for HttpBarrier {
    fn lift(&mut self) {
        self.lifted.send_replace(true);
    }
}

impl Drop for HttpBarrier {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn status(addr: SocketAddr, path: &str) -> u16 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).await.unwrap();
        resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad response {resp:?}"))
    }

    #[tokio::test]
    async fn probe_path_answers_503_until_lifted_then_200() {
        let hold = Duration::ZERO;
        let mut b =
            HttpBarrier::bind_holding(([127, 0, 0, 1], 0).into(), "/barrier-is-down".into(), hold).await.unwrap();
        let addr = b.local_addr();
        assert_eq!(status(addr, "/barrier-is-down").await, 503);
        assert_eq!(status(addr, "/other").await, 404);
        b.lift();
        assert_eq!(status(addr, "/barrier-is-down").await, 200);
        assert_eq!(status(addr, "/other").await, 404);
    }

    #[tokio::test]
    async fn a_probe_held_while_the_barrier_is_up_passes_the_moment_it_lifts() {
        let hold = Duration::from_secs(600);
        let mut b = HttpBarrier::bind_holding(([127, 0, 0, 1], 0).into(), "/b".into(), hold).await.unwrap();
        let addr = b.local_addr();
        let probe = tokio::spawn(status(addr, "/b"));
        // Another path is not held.
        assert_eq!(status(addr, "/other").await, 404);
        assert!(!probe.is_finished(), "held while the barrier is up");
        b.lift();
        // Without the lift the probe would be held for ten minutes: the test would time out.
        assert_eq!(probe.await.unwrap(), 200);
    }

    #[tokio::test]
    async fn a_held_probe_gets_503_when_its_hold_runs_out() {
        let mut b = HttpBarrier::bind_holding(([127, 0, 0, 1], 0).into(), "/b".into(), Duration::from_millis(20))
            .await
            .unwrap();
        assert_eq!(status(b.local_addr(), "/b").await, 503);
        b.lift();
        assert_eq!(status(b.local_addr(), "/b").await, 200);
    }

    #[tokio::test]
    async fn dropping_the_barrier_frees_the_port() {
        let b = HttpBarrier::bind(([127, 0, 0, 1], 0).into(), "/".into()).await.unwrap();
        let addr = b.local_addr();
        drop(b);
        // The aborted server task releases the listener once the runtime has dropped it.
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while TcpListener::bind(addr).await.is_err() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the port is free again");
    }
}
