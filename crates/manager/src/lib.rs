//! `jobset manager`: the JobSet and AppWrapper controllers run against a cluster's API server, as
//! upstream's controller-runtime manager does: configuration file and flags, client-side rate
//! limits, leader election on a Lease, health probes and metrics on every replica, graceful
//! shutdown. The cluster runs its own Job controller, scheduler and kubelets.

pub mod certs;
pub mod config;
pub mod election;
mod endpoints;
mod metrics;
mod metrics_auth;
mod ratelimit;
pub mod webhook;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow};
use jobset_api::appwrapper::AppWrapper;
use jobset_api::appwrapper::config::AppWrapperConfig;
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::JOBSET_NAME;
use jobset_controllers::Lifecycle;
use jobset_controllers::appwrapper::{AppWrapperControllerConfig, Metrics as AppWrapperMetrics};
use jobset_controllers::jobset::JobSetControllerConfig;
use jobset_controllers::jobset::metrics::Metrics as JobSetMetrics;
use jobset_controllers::shared_pods::SharedPods;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Configuration;
use crate::election::{ElectionConfig, LeaderElector};
use crate::endpoints::Endpoint;
use crate::metrics::LeaderMetric;

/// `jobset manager`'s flags: upstream's, which override the configuration file's values.
#[derive(clap::Args, Debug, Clone)]
pub struct ManagerArgs {
    /// The cluster's kubeconfig (default: $KUBECONFIG, else ~/.kube/config, else the pod's
    /// service account when run in a cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Upstream JobSet's controller configuration file (`config.jobset.x-k8s.io/v1alpha1`
    /// `Configuration`); flags given on the command line override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The address the metrics endpoint binds to (default `:8443`; `0` disables it).
    #[arg(long, value_name = "ADDR")]
    pub metrics_bind_address: Option<String>,
    /// Serve metrics over HTTPS with a self-signed certificate, to scrapers whose token the
    /// cluster authenticates (TokenReview) and authorizes for `get /metrics`
    /// (SubjectAccessReview), as upstream; `false`: plain HTTP to anyone who can connect.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub metrics_secure: bool,
    /// The address the health probes (`/healthz`, `/readyz`) bind to (default `:8081`; `0`
    /// disables them).
    #[arg(long, value_name = "ADDR")]
    pub health_probe_bind_address: Option<String>,
    /// Leader election: only the replica holding the Lease reconciles (`--leader-elect=false`
    /// to run without it).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// This replica's identity in the Lease (default: host name, `_`, a random UUID, as
    /// controller-runtime's).
    #[arg(long, value_name = "ID")]
    pub leader_election_id: Option<String>,
    /// Maximum requests a second to the API server (default 500).
    #[arg(long, value_name = "QPS")]
    pub kube_api_qps: Option<f64>,
    /// Maximum burst of requests to the API server (default 500).
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<u32>,
    /// How long in-flight reconciles may take to finish on SIGTERM before the manager stops
    /// anyway (controller-runtime's gracefulShutdownTimeout).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = config::parse_duration_flag)]
    pub graceful_shutdown_timeout: Duration,
    /// The AppWrapper controller's configuration: upstream AppWrapper's OperatorConfig YAML (or
    /// the ConfigMap holding it), as `jobset up --appwrapper-config`.
    #[arg(long, value_name = "FILE")]
    pub appwrapper_config: Option<PathBuf>,
    /// Extension: the restarts a JobSet's `status.restartHistory` keeps, the newest (0: none).
    #[arg(long, value_name = "N", default_value_t = jobset_controllers::jobset::restart_history::DEFAULT_LIMIT)]
    pub restart_history_limit: usize,
}

/// The manager's settings: the configuration file (or upstream's defaults) with the flags
/// given applied over it.
fn settings(args: &ManagerArgs) -> anyhow::Result<Configuration> {
    let mut cfg = match &args.config {
        Some(path) => config::load(path).map_err(|e| anyhow!("{e}"))?,
        None => Configuration::default(),
    };
    if let Some(a) = &args.metrics_bind_address {
        cfg.metrics.bind_address = a.clone();
    }
    if let Some(a) = &args.health_probe_bind_address {
        cfg.health.health_probe_bind_address = a.clone();
    }
    if let Some(l) = args.leader_elect {
        cfg.leader_election.leader_elect = l;
    }
    if let Some(q) = args.kube_api_qps {
        cfg.client_connection.qps = q;
    }
    if let Some(b) = args.kube_api_burst {
        cfg.client_connection.burst = b;
    }
    Ok(cfg)
}

/// The client of the cluster: the kubeconfig given, else kube's inference (`$KUBECONFIG`,
/// `~/.kube/config`, in-cluster), rate-limited as configured; and the server's URL.
async fn client(args: &ManagerArgs, cfg: &Configuration) -> anyhow::Result<(Client, String)> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| anyhow!("kubeconfig {}: {e}", path.display()))?;
            let kc = Kubeconfig::from_yaml(&text).map_err(|e| anyhow!("kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow!("kubeconfig {}: {e}", path.display()))?
        }
        None => Config::infer().await.map_err(|e| anyhow!("no cluster configuration: {e}"))?,
    };
    let url = config.cluster_url.to_string();
    let builder = kube::client::ClientBuilder::try_from(config).context("building the API client")?;
    let client = match ratelimit::RateLimitLayer::new(cfg.client_connection.qps, cfg.client_connection.burst) {
        Some(limit) => builder.with_layer(&limit).build(),
        None => builder.build(),
    };
    Ok((client, url))
}

/// One line saying why the cluster cannot be used, from the first request's error.
fn unusable(url: &str, what: &str, e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 401 => {
            anyhow!("the API server at {url} rejected our credentials (401 {}): check the kubeconfig's token", s.reason)
        }
        kube::Error::Api(s) if s.code == 403 => anyhow!("the API server at {url} forbids {what}: {}", s.message),
        kube::Error::Api(s) if s.code == 404 => {
            anyhow!("the API server at {url} does not serve {what}: install the CRDs first (config/crd)")
        }
        kube::Error::Api(s) => anyhow!("the API server at {url} answered {} to {what}: {}", s.code, s.message),
        other => anyhow!("cannot reach the API server at {url}: {}", error_chain(&other)),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = c.source();
    }
    s
}

/// Checks, before anything starts, that the cluster answers, accepts our credentials and serves
/// JobSets; says whether it serves AppWrappers (their controller runs only then).
async fn preflight(client: &Client, url: &str) -> anyhow::Result<bool> {
    let one = ListParams::default().limit(1);
    Api::<JobSet>::all(client.clone()).list_metadata(&one).await.map_err(|e| unusable(url, "listing JobSets", e))?;
    match Api::<AppWrapper>::all(client.clone()).list_metadata(&one).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::warn!(
                "the cluster does not serve AppWrappers (workload.codeflare.dev CRD not installed): the AppWrapper controller does not run"
            );
            Ok(false)
        }
        Err(e) => Err(unusable(url, "listing AppWrappers", e)),
    }
}

/// What the controllers need, built once: they are started again on each new leadership.
struct Controllers {
    client: Client,
    jobset: JobSetControllerConfig,
    appwrapper: Option<AppWrapperControllerConfig>,
    jobset_metrics: Arc<JobSetMetrics>,
    appwrapper_metrics: Arc<AppWrapperMetrics>,
}

/// Controllers running: stopped gracefully (in-flight reconciles finish) or aborted at once.
struct Running {
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl Controllers {
    /// Starts the controllers; `ready` is set once every cache they read has synced.
    fn start(&self, ready: watch::Sender<bool>) -> Running {
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let mut synced = Vec::new();
        let mut lifecycle = || {
            let (tx, rx) = oneshot::channel();
            synced.push(rx);
            Lifecycle { ready: Some(tx), shutdown: Some(shutdown.clone()) }
        };
        // Only JobSet pods: the cluster's other pods are not ours to cache.
        let pods = SharedPods::start(self.client.clone(), watcher::Config::default().labels(JOBSET_NAME));
        tasks.spawn(jobset_controllers::jobset::run(
            self.client.clone(),
            self.jobset.clone(),
            self.jobset_metrics.clone(),
            pods,
            lifecycle(),
        ));
        if let Some(aw) = &self.appwrapper {
            tasks.spawn(jobset_controllers::appwrapper::run(
                self.client.clone(),
                aw.clone(),
                self.appwrapper_metrics.clone(),
                lifecycle(),
            ));
        }
        tasks.spawn(async move {
            if futures::future::try_join_all(synced).await.is_ok() {
                tracing::info!("caches synced; reconciling");
                ready.send_replace(true);
            }
            std::future::pending::<()>().await
        });
        Running { tasks, shutdown }
    }
}

impl Running {
    /// Lets in-flight reconciles finish (at most `timeout`), then ends every task.
    async fn stop(mut self, timeout: Duration) {
        self.shutdown.cancel();
        // The readiness task never ends by itself: wait for the controllers, not for it.
        let controllers = async { while self.tasks.len() > 1 && self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(timeout, controllers).await.is_err() {
            tracing::warn!(?timeout, "reconciles still running at the graceful shutdown timeout; stopping them");
        }
        self.tasks.shutdown().await;
    }

    /// Stops acting at once (leadership lost): every reconcile is dropped where it stands;
    /// level-triggered reconciles leave nothing half-counted for the next leader.
    async fn abort(mut self) {
        self.tasks.shutdown().await;
    }
}

/// The election's Lease namespace: the configuration's, else the pod's own (in a cluster), else
/// the kubeconfig context's.
fn lease_namespace(cfg: &Configuration, client: &Client) -> String {
    if let Some(ns) = cfg.leader_election.resource_namespace.as_deref().filter(|n| !n.is_empty()) {
        return ns.to_string();
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_string())
}

fn default_identity() -> String {
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "jobset".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    match term {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs the manager until SIGTERM (`Ok`) or until its leadership is lost (`Err`, so the
/// process exits non-zero and its Deployment starts it again, as controller-runtime's).
pub async fn run(args: ManagerArgs) -> anyhow::Result<()> {
    // Bad input is reported before anything connects or listens.
    let cfg = settings(&args)?;
    let features = cfg.features().map_err(|e| anyhow!("{e}"))?;
    let health_addr =
        endpoints::parse_bind_address("health.healthProbeBindAddress", &cfg.health.health_probe_bind_address)
            .map_err(|e| anyhow!(e))?;
    let metrics_addr =
        endpoints::parse_bind_address("metrics.bindAddress", &cfg.metrics.bind_address).map_err(|e| anyhow!(e))?;
    let (webhook_addr, webhook_certs) = webhook::from_config(&cfg).map_err(|e| anyhow!(e))?;
    let appwrapper_config = match &args.appwrapper_config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
            AppWrapperConfig::from_yaml(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?
        }
        None => AppWrapperConfig::default(),
    };

    let (client, url) = client(&args, &cfg).await?;
    let serves_appwrappers = preflight(&client, &url).await?;

    let reconcile = jobset_controllers::metrics::ReconcileMetrics::default();
    let jobset_metrics = Arc::new(JobSetMetrics::with_reconcile(reconcile.clone()));
    let appwrapper_metrics = Arc::new(AppWrapperMetrics::with_reconcile(reconcile.clone()));
    let leader_metric = LeaderMetric::default();
    let registry = {
        let mut r = Registry::default();
        jobset_metrics.register(&mut r);
        appwrapper_metrics.register(&mut r);
        reconcile.register(&mut r);
        metrics::register(&mut r, &leader_metric);
        Arc::new(Mutex::new(r))
    };

    // Webhooks, probes and metrics serve on every replica, leader or standby.
    let (ready_tx, ready_rx) = watch::channel(false);
    let handle = axum_server::Handle::new();
    let mut servers = JoinSet::new();
    let webhooks = webhook::WebhookServer::bind(webhook_addr, client.clone(), features.clone(), webhook_certs)?;
    let webhooks_ready = webhooks.ready();
    println!("webhooks listening on {}", webhooks.url());
    servers.spawn(webhooks.serve(handle.clone()));
    if let Some(addr) = health_addr {
        let router = webhook::gate_readiness(endpoints::health_router(ready_rx), webhooks_ready);
        let ep = Endpoint::bind("health.healthProbeBindAddress", addr, router, None)?;
        println!("health probes listening on {}", ep.url("/healthz"));
        servers.spawn(ep.serve(handle.clone()));
    }
    if let Some(addr) = metrics_addr {
        // Served securely, as upstream: HTTPS, and only to scrapers the cluster authenticates and
        // authorizes (controller-runtime's WithAuthenticationAndAuthorization).
        let (router, tls) = match args.metrics_secure {
            true => {
                let auth = axum::middleware::from_fn_with_state(
                    Arc::new(client.clone()),
                    metrics_auth::authenticate_and_authorize,
                );
                (endpoints::metrics_router(registry.clone()).layer(auth), Some(endpoints::self_signed_tls()?))
            }
            false => (endpoints::metrics_router(registry.clone()), None),
        };
        let ep = Endpoint::bind("metrics.bindAddress", addr, router, tls)?;
        println!("metrics listening on {}", ep.url("/metrics"));
        servers.spawn(ep.serve(handle.clone()));
    }
    use std::io::Write;
    std::io::stdout().flush().ok();

    let controllers = Controllers {
        client: client.clone(),
        jobset: JobSetControllerConfig {
            features,
            restart_history_limit: args.restart_history_limit,
            ..JobSetControllerConfig::default()
        },
        appwrapper: serves_appwrappers.then(|| AppWrapperControllerConfig {
            appwrapper: appwrapper_config,
            ..AppWrapperControllerConfig::default()
        }),
        jobset_metrics,
        appwrapper_metrics,
    };
    let le = &cfg.leader_election;
    let result = if le.leader_elect {
        let election = ElectionConfig {
            namespace: lease_namespace(&cfg, &client),
            name: le.resource_name.clone(),
            identity: args.leader_election_id.clone().unwrap_or_else(default_identity),
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
        };
        let lease = election.name.clone();
        let elector = LeaderElector::new(client.clone(), election).map_err(|e| anyhow!("leaderElection: {e}"))?;
        // A standby has no caches to wait for.
        ready_tx.send_replace(true);
        lead(elector, &controllers, ready_tx, &leader_metric, &lease, args.graceful_shutdown_timeout).await
    } else {
        tracing::info!("leader election off: reconciling at once");
        let running = controllers.start(ready_tx);
        terminated().await;
        tracing::info!("stopping: waiting for in-flight reconciles");
        running.stop(args.graceful_shutdown_timeout).await;
        Ok(())
    };
    // After a lost election, exit at once: the standby takes over a lease duration after our
    // last renewal, and nothing of ours may still run then.
    match &result {
        Ok(()) => handle.graceful_shutdown(Some(Duration::from_secs(1))),
        Err(_) => handle.shutdown(),
    }
    while servers.join_next().await.is_some() {}
    result
}

/// Waits for the Lease, reconciles while holding it, stops at once when it is lost.
async fn lead(
    mut elector: LeaderElector,
    controllers: &Controllers,
    ready: watch::Sender<bool>,
    leader_metric: &LeaderMetric,
    lease: &str,
    graceful: Duration,
) -> anyhow::Result<()> {
    leader_metric.set(lease, false);
    let stop = terminated();
    tokio::pin!(stop);
    tokio::select! {
        _ = elector.acquire() => {}
        _ = &mut stop => {
            // The acquiring write may have landed as we stopped: give it back.
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "releasing the lease on shutdown");
            }
            return Ok(());
        }
    }
    leader_metric.set(lease, true);
    // Not ready again until the new caches have synced.
    ready.send_replace(false);
    let running = controllers.start(ready);
    tokio::select! {
        lost = elector.renew_until_lost() => {
            running.abort().await;
            leader_metric.set(lease, false);
            return Err(anyhow!("leader election lost: {lost}"));
        }
        _ = &mut stop => {}
    }
    tracing::info!("stopping: waiting for in-flight reconciles, then releasing the lease");
    // The lease is renewed while reconciles finish: losing it still stops everything at once.
    let finished = tokio::select! {
        _ = running.stop(graceful) => true,
        lost = elector.renew_until_lost() => {
            tracing::error!(%lost, "leader election lost while stopping");
            false
        }
    };
    leader_metric.set(lease, false);
    if finished && let Err(e) = elector.release().await {
        tracing::warn!(error = %e, "releasing the lease failed; a standby takes over once it expires");
    }
    Ok(())
}
