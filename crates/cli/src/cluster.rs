//! The embedded control plane: API server over HTTPS on loopback (token + kubeconfig), and the
//! local nodes with the controllers. Shared by `jobset up` and `jobset run`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use jobset_api::appwrapper::config::AppWrapperConfig;
use jobset_api::jobset::agent::AGENT_IMAGE;
use jobset_apiserver::auth::{PodIdentity, PodTokens};
use jobset_apiserver::persist::{Backend, Memory, Redb};
use jobset_apiserver::{Admission, ApiServer, ServerConfig, tls};
use jobset_kubelet::NodeConfig;
use jobset_kubelet::runtime::process::{ProcessConfig, ServiceAccountSource};
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Failure, USAGE};

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Keep every object here (redb); `None`: in memory.
    pub data_dir: Option<PathBuf>,
    /// Where the CA, certificates, token, logs live (DATA_DIR or a temporary directory).
    pub state_dir: PathBuf,
    pub port: u16,
    pub kubeconfig: PathBuf,
    pub gc_interval: Duration,
    pub watch_history: usize,
    /// How long an Event is kept after its last write (`--event-ttl`; zero: kept).
    pub event_ttl: Duration,
    /// Local nodes (and the controllers); `None`: only the API server (and its GC).
    pub nodes: Option<Vec<NodeConfig>>,
    pub runtime: String,
    pub timing: TimingArgs,
    pub inflight: crate::up::InflightArgs,
    /// Controllers left to a `jobset manager` of their own, as on a real cluster.
    pub external: Vec<External>,
}

/// A controller `jobset up` can leave to a separate `jobset manager`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum External {
    Jobset,
    Appwrapper,
}

impl External {
    /// The `(group, kind)` whose controller and admission webhooks the manager runs.
    fn kind(self) -> (String, String) {
        let (group, kind) = match self {
            External::Jobset => (jobset_api::jobset::keys::GROUP, jobset_api::jobset::keys::KIND),
            External::Appwrapper => (jobset_api::appwrapper::keys::GROUP, jobset_api::appwrapper::keys::KIND),
        };
        (group.to_string(), kind.to_string())
    }
}

/// The local cluster's timings, shared by `jobset up` and `jobset run`.
#[derive(clap::Args, Debug, Clone)]
pub struct TimingArgs {
    /// How long a simulated container runs when its pod says nothing.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub default_run_duration: Duration,
    /// How often node agents renew their Lease and post their status.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub heartbeat_interval: Duration,
    /// How long a node's Lease may go unrenewed before the node counts as lost.
    #[arg(long, default_value = "40s", value_parser = crate::parse_duration)]
    pub node_grace_period: Duration,
    /// First pod-failure back-off of the Job controller (doubling, capped at 10 min).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub job_backoff: Duration,
    /// How long the Job controller waits after a change of a Job's pods before it syncs the Job,
    /// once for all the changes in between (kube-controller-manager's `syncJobBatchPeriod`).
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub job_sync_batch_period: Duration,
    /// The restarts a JobSet's `status.restartHistory` keeps, the newest (0: none).
    #[arg(long, default_value_t = jobset_controllers::jobset::restart_history::DEFAULT_LIMIT)]
    pub restart_history_limit: usize,
}

/// The AppWrapper controller's configuration, shared by `jobset up` and `jobset run`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AppWrapperArgs {
    /// The AppWrapper controller's configuration: upstream's OperatorConfig YAML (its
    /// `appwrapper.faultTolerance`, `.autopilot` and `.schedulerName`; other keys are ignored)
    /// or the ConfigMap holding it. Durations are nanoseconds, as in upstream's ConfigMap, or Go
    /// durations such as 90s.
    #[arg(long, value_name = "FILE")]
    pub appwrapper_config: Option<PathBuf>,
}

impl AppWrapperArgs {
    /// The configuration (upstream's defaults without a file), validated as upstream does; a
    /// bad file is bad input: `error: FILE: message`.
    pub fn load(&self) -> Result<AppWrapperConfig, Failure> {
        let Some(path) = &self.appwrapper_config else {
            return Ok(AppWrapperConfig::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::new(USAGE, format!("error: reading {}: {e}", path.display())))?;
        AppWrapperConfig::from_yaml(&text).map_err(|e| Failure::new(USAGE, format!("error: {}: {e}", path.display())))
    }
}

/// A started control plane.
pub struct Embedded {
    pub url: String,
    /// The web view's login address, the token in its fragment ([`ui_login_url`]).
    pub ui_url: String,
    pub kubeconfig: PathBuf,
    serving: JoinHandle<anyhow::Result<()>>,
    stop: oneshot::Sender<()>,
    cluster: Option<LocalCluster>,
}

/// Starts the API server (listening when this returns) and the local nodes.
pub async fn start(opts: &ClusterOptions) -> anyhow::Result<Embedded> {
    start_with(opts, AppWrapperConfig::default()).await
}

/// [`start`], the AppWrapper controller configured by `appwrapper`.
pub async fn start_with(opts: &ClusterOptions, appwrapper: AppWrapperConfig) -> anyhow::Result<Embedded> {
    let backend: Box<dyn Backend> = match &opts.data_dir {
        Some(dir) => Box::new(Redb::open(dir).map_err(anyhow::Error::msg).context("opening the data dir")?),
        None => Box::new(Memory),
    };
    let creds = tls::load_or_create(&opts.state_dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut config = ServerConfig { gc_interval: opts.gc_interval, ..ServerConfig::default() };
    config.store.watch_history = opts.watch_history;
    config.store.event_ttl = opts.event_ttl;
    config.log_dir = Some(opts.state_dir.join("logs"));
    config.max_requests_inflight = opts.inflight.max_requests_inflight;
    config.max_mutating_requests_inflight = opts.inflight.max_mutating_requests_inflight;
    config.enable_priority_and_fairness = opts.inflight.enable_priority_and_fairness;
    // As on a real cluster, the external manager's webhooks admit its kinds, once the webhook
    // configurations that call them are applied (config/webhook/); the CRD schemas still apply.
    config.external_admission = opts.external.iter().map(|e| e.kind()).collect();
    let server = ApiServer::new(backend, Admission::default(), config).map_err(anyhow::Error::msg)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], opts.port));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            bail!("127.0.0.1:{} is in use (another `jobset up`?): pick another with --port", opts.port)
        }
        Err(e) => return Err(e).with_context(|| format!("listening on {addr}")),
    };
    let bound = listener.local_addr()?;
    let url = format!("https://{bound}");
    tls::write_kubeconfig(&opts.kubeconfig, &tls::kubeconfig_yaml(&url, &creds, "jobset"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let tls_config = tls::server_config(&creds).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster = match &opts.nodes {
        Some(nodes) => {
            let mut local = LocalConfig::with_nodes(0);
            local.nodes = nodes.clone();
            if opts.runtime == "process" {
                // Pods reach this server with a token bound to them (the in-place restart agent
                // uses the standard in-cluster configuration).
                let tokens = std::sync::Arc::new(PodTokens::new(&creds.token));
                let service_account = ServiceAccountSource {
                    host: bound.ip().to_string(),
                    port: bound.port(),
                    ca_pem: creds.ca_cert_pem.clone(),
                    token: std::sync::Arc::new(move |pod: &Pod| {
                        tokens.issue(&PodIdentity::of(&serde_json::to_value(pod).unwrap_or_default()))
                    }),
                };
                let process = ProcessConfig {
                    service_account: Some(service_account),
                    images: images(),
                    // With a data dir the cluster's state survives `jobset up`: so do its
                    // containers, adopted by the next `up` on the same dir.
                    outlive_agent: opts.data_dir.is_some(),
                    ..ProcessConfig::default()
                };
                local.runtime = jobset_local::RuntimeKind::Process(process);
            }
            local.agent.default_run_duration = opts.timing.default_run_duration;
            local.agent.heartbeat_interval = opts.timing.heartbeat_interval;
            local.agent.status_update_interval = opts.timing.heartbeat_interval;
            local.agent.log_dir = Some(opts.state_dir.join("logs"));
            local.state_dir = Some(opts.state_dir.clone());
            local.node_lifecycle.grace_period = opts.timing.node_grace_period;
            // Check nodes several times per grace period (upstream: every 5 s for 40 s).
            local.node_lifecycle.monitor_period = (opts.timing.node_grace_period / 8)
                .clamp(Duration::from_millis(10), local.node_lifecycle.monitor_period);
            local.job.sync.backoff.base = opts.timing.job_backoff;
            local.job.sync_batch_period = opts.timing.job_sync_batch_period;
            local.jobset.restart_history_limit = opts.timing.restart_history_limit;
            local.appwrapper.appwrapper = appwrapper;
            local.jobset_controller = !opts.external.contains(&External::Jobset);
            local.appwrapper_controller = !opts.external.contains(&External::Appwrapper);
            Some(LocalCluster::start(server.clone(), local).await)
        }
        None => {
            server.spawn_gc();
            None
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let token = creds.token.clone();
    // The web view reads the cluster in-process and lets in the holder of the server's token.
    let ui_token = creds.token.clone();
    let auth: jobset_ui::server::Authenticator = std::sync::Arc::new(move |t: &str| tls::token_is(&ui_token, t));
    let ui = jobset_ui::server::router(server.client(), auth);
    let serving = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        jobset_apiserver::serve::serve_https_with(server, listener, tls_config, token, Some(ui), shutdown).await?;
        Ok(())
    });
    let ui_url = ui_login_url(&url, &creds.token);
    Ok(Embedded { url, ui_url, kubeconfig: opts.kubeconfig.clone(), serving, stop, cluster })
}

/// Makes every file and directory this process creates from now on private to its user (umask
/// 077), for `jobset up`, whose data dir holds the store (Secrets), the CA key and token,
/// container logs and records: so is whatever a later version writes there. The process runtime gives
/// containers the usual 022 before exec; files written for pods to read set their modes.
/// (`jobset run` keeps its state in a temporary directory of mode 0700.)
pub fn private_files() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// The address that opens the web view served beside the API at `url`: its login page with the
/// token in the URL fragment, which a browser keeps to itself (the page's script posts it to the
/// login form, then drops it from the address bar and the history), so the token never shows
/// in a request line or a server log, as a query would.
pub fn ui_login_url(url: &str, token: &str) -> String {
    format!("{url}{}/login#token={token}", jobset_apiserver::serve::UI_PATH)
}

impl Embedded {
    /// The API server, in-process (for benchmarks that count its requests); `None` without nodes.
    pub fn server(&self) -> Option<std::sync::Arc<ApiServer>> {
        self.cluster.as_ref().map(|c| c.server.clone())
    }

    /// Stops serving, then the nodes and controllers.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        let served = self.serving.await.context("the API server task")?;
        if let Some(c) = self.cluster {
            c.shutdown().await;
        }
        served
    }
}

/// The process runtime's image entrypoints: the in-place restart agent's image (any tag) runs
/// this very binary's `jobset agent`, so upstream's manifests need only their `image:` set.
fn images() -> BTreeMap<String, Vec<String>> {
    match std::env::current_exe() {
        Ok(exe) => [(AGENT_IMAGE.to_string(), vec![exe.to_string_lossy().into_owned(), "agent".to_string()])].into(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot locate the jobset binary: the agent image {AGENT_IMAGE} is not mapped");
            BTreeMap::new()
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed by this call, not when the future
/// is first polled: call it before announcing readiness, so that a signal sent right after the
/// announcement stops the process cleanly instead of killing it.
pub fn interrupted() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
