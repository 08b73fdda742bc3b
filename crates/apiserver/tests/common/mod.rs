//! Test harness: a fresh embedded server reached in-process or over its HTTPS listener.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist, serve, tls};
use kube::Client;

pub struct Harness {
    pub server: Arc<ApiServer>,
    pub client: Client,
    _dir: Option<tempfile::TempDir>,
    _shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

pub fn fast_config() -> ServerConfig {
    ServerConfig {
        bookmark_interval: Duration::from_millis(100),
        gc_interval: Duration::from_millis(50),
        log_poll_interval: Duration::from_millis(20),
        ..ServerConfig::default()
    }
}

pub fn server_with(config: ServerConfig, admission: Admission) -> Arc<ApiServer> {
    ApiServer::new(Box::new(persist::Memory), admission, config).expect("server starts")
}

#[derive(Clone, Copy, Debug)]
pub enum Transport {
    InProcess,
    Https,
}

pub async fn harness(t: Transport) -> Harness {
    harness_with(t, fast_config(), Admission::default()).await
}

pub async fn harness_with(t: Transport, config: ServerConfig, admission: Admission) -> Harness {
    let server = server_with(config, admission);
    match t {
        Transport::InProcess => Harness { client: server.client(), server, _dir: None, _shutdown: None },
        Transport::Https => {
            let dir = tempfile::tempdir().unwrap();
            let creds = tls::load_or_create(dir.path()).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}", listener.local_addr().unwrap());
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let cfg = tls::server_config(&creds).unwrap();
            tokio::spawn(serve::serve_https(server.clone(), listener, cfg, creds.token.clone(), async {
                let _ = rx.await;
            }));
            let kc = kube::config::Kubeconfig::from_yaml(&tls::kubeconfig_yaml(&url, &creds, "test")).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
            let client = Client::try_from(config).unwrap();
            Harness { server, client, _dir: Some(dir), _shutdown: Some(tx) }
        }
    }
}

/// Waits (bounded) for the first stream item satisfying `pred`.
pub async fn next_matching<S, T>(stream: &mut S, what: &str, mut pred: impl FnMut(&T) -> bool) -> T
where
    S: Stream<Item = T> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.next().await {
                Some(item) if pred(&item) => return item,
                Some(_) => {}
                None => panic!("stream ended while waiting for {what}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Generates one test per transport from an `async fn(Harness)`.
#[macro_export]
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::common::harness(super::common::Transport::InProcess).await).await;
                }
            )*
        }
        mod over_https {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::common::harness(super::common::Transport::Https).await).await;
                }
            )*
        }
    };
}
