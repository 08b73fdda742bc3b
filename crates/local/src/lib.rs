//! Local mode: one process runs the embedded API server, the JobSet, Job and AppWrapper
//! controllers, the scheduler, the node lifecycle and disruption controllers and one node agent per declared node. Every component talks to the
//! server through its own in-process `kube::Client`, exactly as it would to kube-apiserver.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jobset_apiserver::{ApiServer, flowcontrol};
use jobset_controllers::appwrapper::AppWrapperControllerConfig;
use jobset_controllers::appwrapper::Metrics as AppWrapperMetrics;
use jobset_controllers::disruption::DisruptionConfig;
use jobset_controllers::job::JobControllerConfig;
use jobset_controllers::jobset::JobSetControllerConfig;
use jobset_controllers::jobset::metrics::Metrics as JobSetMetrics;
use jobset_controllers::nodelifecycle::NodeLifecycleConfig;
use jobset_controllers::scheduler::SchedulerConfig;
use jobset_controllers::shared_pods::SharedPods;
use jobset_kubelet::runtime::Runtime;
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime};
use jobset_kubelet::runtime::simulated::{SimulatedRuntime, SimulationState};
use jobset_kubelet::{AgentConfig, NodeConfig, NodeHandle, PodSource};
use kube::Client;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

/// How node agents run containers.
/// The process runtime's state directory (container records, sandboxes) under the cluster's
/// state directory, when the runtime's config names none.
pub const RUNTIME_DIR: &str = "runtime";

#[derive(Debug, Clone)]
pub enum RuntimeKind {
    /// Nothing executes; pod annotations say how containers behave. In-place restart agents run
    /// their real logic in-process against the cluster's API server.
    Simulated,
    /// Containers run as host processes.
    Process(ProcessConfig),
}

#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub nodes: Vec<NodeConfig>,
    pub runtime: RuntimeKind,
    pub agent: AgentConfig,
    pub job: JobControllerConfig,
    pub jobset: JobSetControllerConfig,
    pub appwrapper: AppWrapperControllerConfig,
    pub scheduler: SchedulerConfig,
    pub node_lifecycle: NodeLifecycleConfig,
    /// The disruption controller (PodDisruptionBudgets' status).
    pub disruption: DisruptionConfig,
    /// Start the Job controller with the rest (a benchmark may run it on a thread of its own).
    pub job_controller: bool,
    /// Start the JobSet controller (off when `jobset manager` runs it in a process of its own,
    /// as on a real cluster).
    pub jobset_controller: bool,
    /// Start the AppWrapper controller (likewise).
    pub appwrapper_controller: bool,
    /// Where the process runtime keeps pod sandboxes, claims and `/etc/hosts` files (default: a
    /// temporary directory removed with the cluster).
    pub state_dir: Option<PathBuf>,
}

impl LocalConfig {
    /// `n` identical nodes with production timings.
    pub fn with_nodes(n: usize) -> LocalConfig {
        LocalConfig {
            nodes: NodeConfig::uniform(n, "node"),
            runtime: RuntimeKind::Simulated,
            agent: AgentConfig::default(),
            job: JobControllerConfig::default(),
            jobset: JobSetControllerConfig::default(),
            appwrapper: AppWrapperControllerConfig::default(),
            scheduler: SchedulerConfig::default(),
            node_lifecycle: NodeLifecycleConfig::default(),
            disruption: DisruptionConfig::default(),
            job_controller: true,
            jobset_controller: true,
            appwrapper_controller: true,
            state_dir: None,
        }
    }

    /// Timings shrunk for tests: back-offs, heartbeats and grace periods in milliseconds.
    pub fn fast(n: usize) -> LocalConfig {
        let mut c = LocalConfig::with_nodes(n);
        c.agent.heartbeat_interval = Duration::from_millis(50);
        c.agent.lease_duration = Duration::from_secs(1);
        c.agent.status_update_interval = Duration::from_millis(200);
        c.agent.restart_backoff_base = Duration::from_millis(10);
        c.agent.restart_backoff_max = Duration::from_millis(100);
        c.agent.restart_backoff_reset = Duration::from_millis(200);
        c.agent.default_run_duration = Duration::from_millis(20);
        c.job.sync.backoff.base = Duration::from_millis(10);
        c.job.sync.backoff.max = Duration::from_millis(100);
        c.job.orphan_sweep = Duration::from_millis(100);
        c.job.error_retry = Duration::from_millis(20);
        c.job.sync_batch_period = Duration::from_millis(10);
        c.jobset.error_backoff = Duration::from_millis(50);
        c.appwrapper.error_backoff = Duration::from_millis(50);
        c.appwrapper.timing.poll = Duration::from_millis(100);
        c.appwrapper.timing.create_retry = Duration::from_millis(50);
        c.scheduler.retry_interval = Duration::from_millis(100);
        c.node_lifecycle.grace_period = Duration::from_millis(500);
        c.node_lifecycle.monitor_period = Duration::from_millis(100);
        c.disruption.error_retry = Duration::from_millis(50);
        c
    }
}

/// The client of the controllers (Job, JobSet, AppWrapper, node lifecycle, disruption): as
/// kube-controller-manager, for the API server's priority and fairness (they are this cluster's
/// controller manager). The scheduler, node agents and simulated pods' agents have their own
/// users (kube-scheduler, `system:node:<name>`, the `default` service account).
fn controllers(server: &Arc<ApiServer>) -> Client {
    server.client_as(flowcontrol::kube_controller_manager())
}

pub struct LocalCluster {
    pub server: Arc<ApiServer>,
    pub nodes: Vec<NodeHandle>,
    pub simulation: SimulationState,
    config: LocalConfig,
    /// The pod watch the controllers share; a restarted controller subscribes again.
    pods: SharedPods,
    job_controller: Option<JoinHandle<()>>,
    jobset_controller: Option<JoinHandle<()>>,
    /// The JobSet controller's metrics (they survive a controller restart).
    pub jobset_metrics: Arc<JobSetMetrics>,
    appwrapper_controller: Option<JoinHandle<()>>,
    pub appwrapper_metrics: Arc<AppWrapperMetrics>,
    tasks: Vec<JoinHandle<()>>,
    _temp_dir: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Starts every component against `server` (which keeps running its own garbage collector).
    pub async fn start(server: Arc<ApiServer>, config: LocalConfig) -> LocalCluster {
        let mut tasks = vec![server.spawn_gc()];
        // One pod watch for every controller of the process (each pod event parsed once).
        let pods = SharedPods::start(controllers(&server), watcher::Config::default());
        let job_controller = config.job_controller.then(|| {
            tokio::spawn(jobset_controllers::job::run(controllers(&server), config.job.clone(), pods.clone()))
        });
        // The controllers' series, served at the API server's `GET /metrics`; both count their
        // reconciles in one set of controller-runtime series.
        let reconcile = jobset_controllers::metrics::ReconcileMetrics::default();
        let jobset_metrics = Arc::new(JobSetMetrics::with_reconcile(reconcile.clone()));
        let appwrapper_metrics = Arc::new(AppWrapperMetrics::with_reconcile(reconcile.clone()));
        let registry = server.metrics_registry().unwrap_or_else(|| {
            let r = jobset_apiserver::MetricsRegistry::default();
            server.set_metrics_registry(r.clone());
            r
        });
        {
            let mut r = registry.lock().unwrap_or_else(|e| e.into_inner());
            jobset_metrics.register(&mut r);
            appwrapper_metrics.register(&mut r);
            reconcile.register(&mut r);
        }
        let appwrapper_controller = config.appwrapper_controller.then(|| {
            tokio::spawn(jobset_controllers::appwrapper::run(
                controllers(&server),
                config.appwrapper.clone(),
                appwrapper_metrics.clone(),
                Default::default(),
            ))
        });
        let jobset_controller = config.jobset_controller.then(|| {
            tokio::spawn(jobset_controllers::jobset::run(
                controllers(&server),
                config.jobset.clone(),
                jobset_metrics.clone(),
                pods.clone(),
                Default::default(),
            ))
        });
        tasks.push(tokio::spawn(jobset_controllers::scheduler::run(
            server.client_as(flowcontrol::kube_scheduler()),
            config.scheduler.clone(),
            pods.clone(),
        )));
        tasks.push(tokio::spawn(jobset_controllers::nodelifecycle::run(
            controllers(&server),
            config.node_lifecycle.clone(),
            pods.clone(),
        )));
        tasks.push(tokio::spawn(jobset_controllers::disruption::run(
            controllers(&server),
            config.disruption.clone(),
            pods.clone(),
        )));
        let simulation = SimulationState::new();
        let mut temp_dir = None;
        let runtime: Arc<dyn Runtime> = match &config.runtime {
            // In-place restart agents (sidecars) run in-process, with a client of their own.
            RuntimeKind::Simulated => Arc::new(
                SimulatedRuntime::new(simulation.clone())
                    .with_agent_client(server.client_as(flowcontrol::service_account("default", "default"))),
            ),
            RuntimeKind::Process(p) => {
                let mut p = p.clone();
                // Sandboxes, claims and the /etc/hosts files live in the cluster's state dir
                // (else in a temporary one removed with the cluster).
                let dir = match &config.state_dir {
                    Some(d) => d.clone(),
                    None => {
                        let t = tempfile::Builder::new().prefix("jobset-local-").tempdir().expect("a temporary dir");
                        let d = t.path().to_path_buf();
                        temp_dir = Some(t);
                        d
                    }
                };
                p.state_dir.get_or_insert_with(|| dir.join(RUNTIME_DIR));
                // Containers do not see the cluster's state (the API server's data, keys, logs).
                p.hidden.push(dir.clone());
                let hosts = p.hosts_dir.get_or_insert_with(|| dir.join("hosts")).clone();
                tasks.push(tokio::spawn(jobset_kubelet::hosts::run(server.client(), hosts)));
                Arc::new(ProcessRuntime::new(p))
            }
        };
        // The node agents follow their pods through the controllers' pod watch, as kwok's nodes
        // share one informer: one parse per pod event instead of one more per node watch.
        let mut nodes = Vec::with_capacity(config.nodes.len());
        for n in &config.nodes {
            let events = PodSource::Events(Box::pin(pods.subscribe_node(&n.name)));
            nodes.push(
                jobset_kubelet::run_node_with(
                    server.client_as(flowcontrol::node(&n.name)),
                    n.clone(),
                    config.agent.clone(),
                    runtime.clone(),
                    events,
                )
                .await,
            );
        }
        tasks.push(jobset_kubelet::follow_failure_annotations(server.client(), nodes.clone()));
        LocalCluster {
            server,
            nodes,
            simulation,
            config,
            pods,
            job_controller,
            jobset_controller,
            jobset_metrics,
            appwrapper_controller,
            appwrapper_metrics,
            tasks,
            _temp_dir: temp_dir,
        }
    }

    pub fn client(&self) -> Client {
        self.server.client()
    }

    /// Kills the Job controller (losing all its in-memory state) and starts a fresh one, as a
    /// crash and restart of kube-controller-manager would.
    pub fn restart_job_controller(&mut self) {
        if let Some(j) = &self.job_controller {
            j.abort();
        }
        self.job_controller = Some(tokio::spawn(jobset_controllers::job::run(
            controllers(&self.server),
            self.config.job.clone(),
            self.pods.clone(),
        )));
    }

    /// Kills the JobSet controller (losing its in-memory state) and starts a fresh one.
    pub fn restart_jobset_controller(&mut self) {
        if let Some(j) = &self.jobset_controller {
            j.abort();
        }
        self.jobset_controller = Some(tokio::spawn(jobset_controllers::jobset::run(
            controllers(&self.server),
            self.config.jobset.clone(),
            self.jobset_metrics.clone(),
            self.pods.clone(),
            Default::default(),
        )));
    }

    /// Kills the AppWrapper controller (losing its in-memory state) and starts a fresh one.
    pub fn restart_appwrapper_controller(&mut self) {
        if let Some(j) = &self.appwrapper_controller {
            j.abort();
        }
        self.appwrapper_controller = Some(tokio::spawn(jobset_controllers::appwrapper::run(
            controllers(&self.server),
            self.config.appwrapper.clone(),
            self.appwrapper_metrics.clone(),
            Default::default(),
        )));
    }

    pub async fn shutdown(self) {
        for c in [&self.job_controller, &self.jobset_controller, &self.appwrapper_controller].into_iter().flatten() {
            c.abort();
        }
        for t in &self.tasks {
            t.abort();
        }
        for n in &self.nodes {
            n.shutdown().await;
        }
    }
}
