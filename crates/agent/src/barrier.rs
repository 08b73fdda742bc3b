//! The barrier that holds the pod's main containers back until every pod of the JobSet is at
//! the same attempt. In a pod it is the agent sidecar's startupProbe: the kubelet starts the
//! main containers only once a sidecar's startup probe has passed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// The startup-probe endpoint: `GET <path>` answers 503 Service Unavailable while the barrier is
/// up and 200 once it is lifted; other paths are 404. It listens from the start, so every probe
/// gets a prompt answer rather than a connection error or a timeout.
pub struct HttpBarrier {
    lifted: Arc<AtomicBool>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl HttpBarrier {
    /// Listens on `addr` (port 0: any free port, see [`HttpBarrier::local_addr`]).
    pub async fn bind(addr: SocketAddr, path: String) -> std::io::Result<HttpBarrier> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let lifted = Arc::new(AtomicBool::new(false));
        let state = lifted.clone();
        let app = Router::new().fallback(move |uri: Uri| {
            let answer = if uri.path() != path {
                (StatusCode::NOT_FOUND, "not found\n")
            } else if state.load(Ordering::Acquire) {
                (StatusCode::OK, "barrier lifted\n")
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "waiting for every pod to reach this attempt\n")
            };
            std::future::ready(answer)
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
        self.lifted.store(true, Ordering::Release);
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
        let mut b = HttpBarrier::bind(([127, 0, 0, 1], 0).into(), "/barrier-is-down".into()).await.unwrap();
        let addr = b.local_addr();
        assert_eq!(status(addr, "/barrier-is-down").await, 503);
        assert_eq!(status(addr, "/other").await, 404);
        b.lift();
        assert_eq!(status(addr, "/barrier-is-down").await, 200);
        assert_eq!(status(addr, "/other").await, 404);
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
