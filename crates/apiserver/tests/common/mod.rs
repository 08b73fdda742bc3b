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

/// A server on its HTTPS listener, as clients outside the process reach it, whose clock a test
/// can move ahead (token expiry).
pub struct HttpsCluster {
    pub server: Arc<ApiServer>,
    pub url: String,
    pub creds: tls::Credentials,
    /// Seconds the server's clock is ahead of the system clock.
    pub clock_offset: Arc<std::sync::atomic::AtomicI64>,
    pub dir: tempfile::TempDir,
}

pub async fn https_cluster() -> HttpsCluster {
    use std::sync::atomic::{AtomicI64, Ordering};
    let clock_offset = Arc::new(AtomicI64::new(0));
    let offset = clock_offset.clone();
    let config = ServerConfig {
        clock: jobset_apiserver::Clock::new(move || {
            jiff::Timestamp::now() + jiff::SignedDuration::from_secs(offset.load(Ordering::SeqCst))
        }),
        ..fast_config()
    };
    let server = server_with(config, Admission::default());
    let dir = tempfile::tempdir().unwrap();
    let creds = tls::load_or_create(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let cfg = tls::server_config(&creds).unwrap();
    // What serving sets up too, here before it starts: the tests issue tokens at once, before the
    // spawned server task may have run.
    server.set_service_account_signing_key(&creds.token);
    tokio::spawn(serve::serve_https(server.clone(), listener, cfg, creds.token.clone(), std::future::pending()));
    HttpsCluster { server, url, creds, clock_offset, dir }
}

impl HttpsCluster {
    /// A kubeconfig for the listener holding `token`.
    pub fn kubeconfig(&self, token: &str) -> String {
        let creds = tls::Credentials { token: token.to_string(), ..self.creds.clone() };
        tls::kubeconfig_yaml(&self.url, &creds, "t")
    }

    /// A client over HTTPS holding `token`.
    pub async fn client(&self, token: &str) -> Client {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig(token)).unwrap();
        Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap()
    }
}

/// The API resource of each kind the HTTPS tests write, and whether it is namespaced.
pub fn resource(kind: &str) -> (kube::core::ApiResource, bool) {
    let (group, version, plural, namespaced) = match kind {
        "Namespace" => ("", "v1", "namespaces", false),
        "ServiceAccount" => ("", "v1", "serviceaccounts", true),
        "Pod" => ("", "v1", "pods", true),
        "Role" => ("rbac.authorization.k8s.io", "v1", "roles", true),
        "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings", true),
        "ClusterRole" => ("rbac.authorization.k8s.io", "v1", "clusterroles", false),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", false),
        "JobSet" => ("jobset.x-k8s.io", "v1alpha2", "jobsets", true),
        other => panic!("no resource for {other}"),
    };
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    (kube::core::ApiResource::from_gvk_with_plural(&gvk, plural), namespaced)
}

/// Objects of `kind`, in `namespace` when the kind is namespaced.
pub fn api(client: &Client, kind: &str, namespace: Option<&str>) -> kube::Api<kube::api::DynamicObject> {
    let (ar, namespaced) = resource(kind);
    match namespace {
        Some(ns) if namespaced => kube::Api::namespaced_with(client.clone(), ns, &ar),
        _ => kube::Api::all_with(client.clone(), &ar),
    }
}

/// Creates `obj` (JSON with `kind` and, if namespaced, `metadata.namespace`).
pub async fn create(client: &Client, obj: serde_json::Value) -> Result<kube::api::DynamicObject, kube::Error> {
    let kind = obj["kind"].as_str().unwrap().to_string();
    let ns = obj.pointer("/metadata/namespace").and_then(serde_json::Value::as_str).map(str::to_string);
    let obj: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    api(client, &kind, ns.as_deref()).create(&kube::api::PostParams::default(), &obj).await
}

/// Sends a JSON request to the router: status, `Warning` headers, body (`null` when not JSON).
pub async fn send(
    server: &Arc<ApiServer>,
    method: http::Method,
    uri: &str,
    ct: &str,
    body: &serde_json::Value,
) -> (http::StatusCode, Vec<String>, serde_json::Value) {
    send_raw(server, method, uri, ct, serde_json::to_vec(body).unwrap()).await
}

/// [`send`] with the body's bytes as given.
pub async fn send_raw(
    server: &Arc<ApiServer>,
    method: http::Method,
    uri: &str,
    ct: &str,
    body: Vec<u8>,
) -> (http::StatusCode, Vec<String>, serde_json::Value) {
    use tower::ServiceExt;
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, ct)
        .body(axum::body::Body::from(body))
        .unwrap();
    let resp = server.router().oneshot(req).await.unwrap();
    let status = resp.status();
    let warnings = resp
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| String::from_utf8(v.as_bytes().to_vec()).unwrap())
        .collect();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, warnings, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
}
