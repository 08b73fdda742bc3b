//! Two processes, as on a real cluster: `jobset up --external-controllers jobset,appwrapper`
//! plays a cluster with no JobSet installed (API server, Job controller, scheduler, nodes), and
//! `jobset manager` runs the JobSet and AppWrapper controllers and their admission webhooks in an
//! OS process of its own, over HTTPS, with the identity of the ServiceAccount that config/rbac/
//! binds to the shipped ClusterRole (the embedded server enforces RBAC for it).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{Output, Server};

pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The manager's namespace and ServiceAccount (config/rbac/).
pub const NAMESPACE: &str = "jobset-system";
pub const SERVICE_ACCOUNT: &str = "jobset-controller-manager";
/// The webhook Service the webhook configurations call (config/webhook/).
pub const WEBHOOK_SERVICE: &str = "jobset-webhook-service";
/// Upstream's leader election Lease name.
pub const LEASE: &str = "6d4f6a47.jobset.x-k8s.io";
/// Lease timings of these tests (upstream: 15 s, 10 s, 2 s): short, with room for a renewal
/// delayed by a loaded CI machine.
pub const LEASE_DURATION: Duration = Duration::from_secs(5);
pub const RENEW_DEADLINE: Duration = Duration::from_millis(3500);
pub const RETRY_PERIOD: Duration = Duration::from_millis(400);
/// Bound on any one state the tests wait for.
pub const WAIT: Duration = Duration::from_secs(60);
/// How often a manager's `/readyz` is asked while it is not ready.
const READY_POLL: Duration = Duration::from_millis(100);

pub fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets")
}

/// `jobset up` with process nodes and no JobSet or AppWrapper controller or admission, on `dir`.
pub async fn up(dir: &Path) -> Server {
    let args = [
        "--nodes",
        "2",
        "--runtime",
        "process",
        "--external-controllers",
        "jobset,appwrapper",
        "--job-backoff",
        "10ms",
    ];
    super::start(&dir.join("data"), 0, &args).await
}

/// The cluster and the manager's credentials and configuration.
pub struct Cluster {
    pub server: Server,
    pub dir: tempfile::TempDir,
    /// A kubeconfig with the manager's ServiceAccount token instead of the admin token.
    pub manager_kubeconfig: PathBuf,
    /// Where the webhook Service leads, when every manager started is one of its endpoints.
    pub endpoints: Option<Endpoints>,
}

/// The cluster with the pieces of config/ the managers need: the ServiceAccount and its roles,
/// the webhook Secret, Service and configurations, the Service leading to every manager started
/// ([`Endpoints`]).
pub async fn cluster() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let server = up(dir.path()).await;
    for f in [
        "rbac/service_account.yaml",
        "rbac/role.yaml",
        "rbac/system_leader_election_role.yaml",
        "rbac/metrics_auth_role.yaml",
        "rbac/metrics_reader_role.yaml",
        "rbac/system_manager_secrets_role.yaml",
        // The Secret the manager's internal certificate management fills.
        "webhook/secret.yaml",
        "webhook/service.yaml",
        "webhook/manifests.yaml",
    ] {
        let out = apply(&server, &format!("{REPO}/config/{f}")).await;
        assert_eq!(out.code, 0, "apply config/{f}: {out:?}");
    }
    let endpoints = Endpoints::start().await;
    let services: Api<Service> = Api::namespaced(server.client().await, NAMESPACE);
    let ports =
        serde_json::json!({"spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": endpoints.port}]}});
    services
        .patch(WEBHOOK_SERVICE, &PatchParams::default(), &Patch::Merge(&ports))
        .await
        .expect("patch the webhook Service");
    let mut c = Cluster::with_manager_token(server, dir).await;
    c.endpoints = Some(endpoints);
    c
}

pub async fn apply(server: &Server, file: &str) -> Output {
    let mut cmd = super::jobset_command(&["apply", "-f", file]);
    cmd.env("KUBECONFIG", &server.kubeconfig);
    super::run_to_end(cmd, WAIT).await
}

/// A token of ServiceAccount `ns/name`, through the TokenRequest API (`kubectl create token`).
pub async fn token_of(admin: &kube::Client, ns: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}
    }))
    .unwrap();
    let answer: TokenRequest =
        api.create_subresource("token", name, &PostParams::default(), &request).await.expect("TokenRequest");
    answer.status.and_then(|s| s.token).expect("a token in the TokenRequest's status")
}

/// `from`'s kubeconfig with every user's token replaced by `token`.
pub fn write_kubeconfig_with_token(from: &Path, to: &Path, token: &str) {
    let mut kc: Value = serde_json::to_value(kube::config::Kubeconfig::read_from(from).unwrap()).unwrap();
    for user in kc["users"].as_array_mut().expect("kubeconfig users") {
        user["user"]["token"] = Value::String(token.to_string());
    }
    std::fs::write(to, serde_json::to_string(&kc).unwrap()).unwrap();
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    /// `server`, where the manager's ServiceAccount exists, with a kubeconfig of its token.
    pub async fn with_manager_token(server: Server, dir: tempfile::TempDir) -> Cluster {
        let token = token_of(&server.client().await, NAMESPACE, SERVICE_ACCOUNT).await;
        let manager_kubeconfig = dir.path().join("manager.kubeconfig");
        write_kubeconfig_with_token(&server.kubeconfig, &manager_kubeconfig, &token);
        Cluster { server, dir, manager_kubeconfig, endpoints: None }
    }

    /// The manager's configuration: upstream's Configuration with fast lease timings, probe and
    /// metrics listeners on free loopback ports, and the webhook server on a port free now (an
    /// endpoint of the webhook Service when the cluster has [`Endpoints`]).
    pub fn config(&self, leader_elect: bool) -> PathBuf {
        // Upstream's configuration has no "any port": one free now, for this manager alone.
        let port = free_port();
        if let Some(e) = &self.endpoints {
            e.add(port);
        }
        self.config_with_webhook_port(leader_elect, port)
    }

    /// The manager's configuration with its webhook server on `port`, internal certificate
    /// management on.
    pub fn config_with_webhook_port(&self, leader_elect: bool, port: u16) -> PathBuf {
        let path = self.dir.path().join(format!("config-{leader_elect}-{port}.yaml"));
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let text = format!(
            "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n\
             leaderElection:\n  leaderElect: {leader_elect}\n  leaseDuration: {}\n  renewDeadline: {}\n  retryPeriod: {}\n  resourceNamespace: {NAMESPACE}\n\
             health:\n  healthProbeBindAddress: 127.0.0.1:0\n\
             metrics:\n  bindAddress: 127.0.0.1:0\n\
             webhook:\n  host: 127.0.0.1\n  port: {port}\n\
             internalCertManagement:\n  enable: true\n",
            ms(LEASE_DURATION),
            ms(RENEW_DEADLINE),
            ms(RETRY_PERIOD),
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    pub async fn manager(&self, id: &str) -> Manager {
        Manager::start(&self.manager_kubeconfig, &self.config(true), id, &[]).await
    }

    pub async fn admin(&self) -> kube::Client {
        self.server.client().await
    }

    pub async fn jobset_command(&self, args: &[&str]) -> Output {
        let mut cmd = super::jobset_command(args);
        cmd.env("KUBECONFIG", &self.server.kubeconfig);
        super::run_to_end(cmd, Duration::from_secs(120)).await
    }

    /// Waits until the Lease names `holder`; returns when that was seen.
    pub async fn lease_held_by(&self, holder: &str, within: Duration) -> Instant {
        let api: Api<Lease> = Api::namespaced(self.admin().await, NAMESPACE);
        let held = await_condition(api, LEASE, |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(holder)
        });
        tokio::time::timeout(within, held)
            .await
            .unwrap_or_else(|_| panic!("the lease was not held by {holder} within {within:?}"))
            .expect("lease watch");
        Instant::now()
    }

    /// Waits until JobSet `name` satisfies `cond`, and returns it.
    pub async fn jobset_until(&self, name: &str, what: &str, cond: impl Fn(&DynamicObject) -> bool) -> DynamicObject {
        let api: Api<DynamicObject> = Api::namespaced_with(self.admin().await, "default", &jobset_resource());
        let found = await_condition(api, name, move |o: Option<&DynamicObject>| o.is_some_and(&cond));
        tokio::time::timeout(WAIT, found)
            .await
            .unwrap_or_else(|_| panic!("JobSet {name} was not {what} within {WAIT:?}"))
            .expect("jobset watch")
            .expect("the JobSet exists")
    }
}

/// The webhook Service's endpoints, standing in for kube-proxy in front of the manager
/// Deployment's replicas: a connection goes to the first replica's webhook port that accepts it
/// (all serve the Secret's one certificate, so TLS passes through as it is).
pub struct Endpoints {
    pub port: u16,
    replicas: Arc<Mutex<Vec<u16>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoints {
    async fn start() -> Endpoints {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let replicas = Arc::new(Mutex::new(Vec::<u16>::new()));
        let ports = replicas.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let ports = ports.lock().unwrap().clone();
                tokio::spawn(async move {
                    for p in ports {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", p)).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
            }
        });
        Endpoints { port, replicas, task }
    }

    fn add(&self, port: u16) {
        self.replicas.lock().unwrap().push(port);
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The final summary line `jobset run` printed for JobSet `name`.
pub fn summary(out: &Output, name: &str) -> String {
    let prefix = format!("jobset.jobset.x-k8s.io/{name} ");
    out.stdout
        .lines()
        .rfind(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no summary of {name}: {out:?}"))
        .into()
}

pub fn status_i64(js: &DynamicObject, field: &str) -> i64 {
    js.data.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0)
}

pub fn has_condition(js: &DynamicObject, type_: &str) -> bool {
    js.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

/// A running `jobset manager`.
pub struct Manager {
    pub child: Child,
    pub id: String,
    pub metrics: String,
    pub health: String,
    pub stderr: Arc<Mutex<String>>,
    /// The task collecting `stderr`; it ends when the process closed the pipe.
    drain: Option<tokio::task::JoinHandle<()>>,
}

impl Manager {
    /// Starts `jobset manager` and waits until it is ready: listening, and its webhook server
    /// serving the Secret's certificate whose CA the webhook configurations carry.
    pub async fn start(kubeconfig: &Path, config: &Path, id: &str, extra: &[&str]) -> Manager {
        let mut child = Command::new(env!("CARGO_BIN_EXE_jobset"))
            .args(["manager", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--config")
            .arg(config)
            .args(["--leader-election-id", id, "--graceful-shutdown-timeout", "5s"])
            // Plain-HTTP metrics unless a test asks for upstream's secure serving.
            .args(extra.iter().all(|a| !a.starts_with("--metrics-secure")).then_some("--metrics-secure=false"))
            .args(extra)
            .env("JOBSET_LOG", "info,kube=warn")
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn jobset manager");
        let (stderr, drain) = super::drain_stderr(&mut child);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut health, mut metrics) = (None, None);
        let listening = tokio::time::timeout(super::STARTUP_TIMEOUT, async {
            while let Some(line) = lines.next_line().await.expect("read manager stdout") {
                if let Some(url) = line.strip_prefix("health probes listening on ") {
                    health = Some(url.trim_end_matches("/healthz").to_string());
                }
                if let Some(url) = line.strip_prefix("metrics listening on ") {
                    metrics = Some(url.to_string());
                }
                if health.is_some() && metrics.is_some() {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            matches!(listening, Ok(true)),
            "jobset manager {id} did not start listening; stderr:\n{}",
            stderr.lock().unwrap()
        );
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let m = Manager {
            child,
            id: id.to_string(),
            metrics: metrics.unwrap(),
            health: health.unwrap(),
            stderr,
            drain: Some(drain),
        };
        m.until_ready().await;
        m
    }

    /// Polls `/readyz` until it answers 200.
    pub async fn until_ready(&self) {
        let url = format!("{}/readyz", self.health);
        let ready = async {
            let mut poll = tokio::time::interval(READY_POLL);
            loop {
                poll.tick().await;
                if http_get(&url).await.0 == 200 {
                    return;
                }
            }
        };
        tokio::time::timeout(WAIT, ready).await.unwrap_or_else(|_| {
            panic!("jobset manager {} was not ready within {WAIT:?}; stderr:\n{}", self.id, self.stderr.lock().unwrap())
        });
    }

    pub async fn scrape(&self) -> String {
        let (status, body) = http_get(&self.metrics).await;
        assert_eq!(status, 200, "GET {}: {body}", self.metrics);
        body
    }

    /// How many JobSet reconciles this manager has run.
    pub async fn jobset_reconciles(&self) -> u64 {
        let body = self.scrape().await;
        body.lines()
            .find_map(|l| l.strip_prefix("controller_runtime_reconcile_time_seconds_count{controller=\"jobset\"} "))
            .map(|v| v.trim().parse().expect("a count"))
            .unwrap_or(0)
    }

    /// kill -9, and reap.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill -9 jobset manager");
        self.check();
    }

    /// Waits (up to `limit`) for the process to exit and for everything it wrote to stderr to be
    /// collected (the exit can be seen before the pipe's last bytes are read): its exit status and
    /// whole stderr.
    pub async fn exit(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} kept running:\n{}", self.id, self.stderr.lock().unwrap()))
            .expect("wait for jobset manager");
        if let Some(drain) = self.drain.take() {
            tokio::time::timeout(limit, drain).await.ok();
        }
        (status, self.stderr.lock().unwrap().clone())
    }

    pub fn check(&self) {
        let stderr = self.stderr.lock().unwrap();
        assert!(!stderr.contains("panicked"), "jobset manager {} panicked:\n{stderr}", self.id);
    }
}

/// `host:port` and `/path` of a URL without its scheme.
pub fn host_and_path(rest: &str) -> (&str, String) {
    rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()))
}

/// The status and body of a whole HTTP/1 response.
pub fn response(out: &str) -> (u16, String) {
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((out, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("an HTTP status");
    (status, body.to_string())
}

/// A plain-HTTP GET: (status, body).
pub async fn http_get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = host_and_path(rest);
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    response(&out)
}
