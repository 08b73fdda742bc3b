//! The agent against the embedded API server, in-process: a JobSet and a pod created directly (no
//! controllers), the JobSet status written by the test in the controller's place, and the agent's
//! reactions observed through its pod annotation, its barrier and its exit code.
mod common;
use common::{NS, POD};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jobset_agent::{AgentConfig, BackoffConfig, Endpoint, NoWorker, Worker, WorkerConfig};
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use jobset_apiserver::auth::{PodIdentity, PodTokens};
use jobset_apiserver::{ApiServer, serve, tls};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_secs(20);
const EXIT_CODE: i32 = 42;

struct Env {
    server: Arc<ApiServer>,
    /// The control plane's view (the test acts as the controller through it).
    client: Client,
    /// What the agent uses: the same in-process client, or a pod-bound token over HTTPS.
    agent: Client,
    _tls_dir: Option<tempfile::TempDir>,
}

impl Env {
    /// A server holding the JobSet `train` (InPlaceRestart) and its pod `train-workers-0-0`.
    async fn start() -> Env {
        let server = ApiServer::in_memory();
        let client = server.client();
        common::populate(&client).await;
        Env { agent: client.clone(), server, client, _tls_dir: None }
    }

    /// As [`Env::start`], the agent reaching the server over HTTPS with the token local mode
    /// mounts into the pod: the least privilege the agent must work with.
    async fn start_with_pod_token() -> Env {
        let mut env = Env::start().await;
        let dir = tempfile::tempdir().unwrap();
        let creds = tls::load_or_create(dir.path()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let cfg = tls::server_config(&creds).unwrap();
        tokio::spawn(serve::serve_https(
            env.server.clone(),
            listener,
            cfg,
            creds.token.clone(),
            std::future::pending(),
        ));
        let pod = Api::<Pod>::namespaced(env.client.clone(), NS).get(POD).await.unwrap();
        let token = PodTokens::new(&creds.token).issue(&PodIdentity::of(&serde_json::to_value(&pod).unwrap()));
        let creds = tls::Credentials { token, ..creds };
        let kc = kube::config::Kubeconfig::from_yaml(&tls::kubeconfig_yaml(&url, &creds, "agent")).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        env.agent = Client::try_from(config).unwrap();
        env._tls_dir = Some(dir);
        env
    }

    fn config(&self) -> AgentConfig {
        let mut cfg = AgentConfig::new(NS, "train", POD);
        cfg.exit_code = EXIT_CODE;
        cfg.backoff =
            BackoffConfig { initial: Duration::from_millis(10), max: Duration::from_millis(100), jitter: 1.0 };
        cfg
    }

    /// What the controller would write.
    async fn set_status(&self, status: Value) {
        Api::<JobSet>::namespaced(self.client.clone(), NS)
            .patch_status("train", &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }

    /// Waits until the pod's attempt annotation is `want`.
    async fn attempt_is(&self, want: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let mut events = watcher(pods, watcher::Config::default().fields(&format!("metadata.name={POD}"))).boxed();
        let seen = tokio::time::timeout(TIMEOUT, async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                    && p.metadata.annotations.as_ref().and_then(|a| a.get(IN_PLACE_RESTART_ATTEMPT)).map(String::as_str)
                        == Some(want)
                {
                    return;
                }
            }
        })
        .await;
        assert!(seen.is_ok(), "the pod was not annotated with attempt {want}");
    }
}

async fn lifted(rx: &mut watch::Receiver<bool>) {
    tokio::time::timeout(TIMEOUT, rx.wait_for(|l| *l)).await.expect("barrier lifted in time").unwrap();
}

async fn exit_code(handle: JoinHandle<i32>) -> i32 {
    tokio::time::timeout(TIMEOUT, handle).await.expect("the agent exits in time").unwrap()
}

/// A sidecar-mode agent in a task, with its barrier's receiver.
fn spawn_sidecar(
    env: &Env,
    stop: impl Future<Output = i32> + Send + 'static,
) -> (JoinHandle<i32>, watch::Receiver<bool>) {
    let (tx, rx) = watch::channel(false);
    let handle = tokio::spawn(jobset_agent::run(env.config(), env.agent.clone(), tx, None::<NoWorker>, stop));
    (handle, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_announces_attempt_lifts_barrier_when_synced_and_exits_when_deprecated() {
    sidecar_lifecycle(Env::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_lifecycle_needs_no_more_than_a_pod_bound_token() {
    let env = Env::start_with_pod_token().await;
    let mut cfg = env.config();
    cfg.barrier = None;
    let endpoint = tokio::time::timeout(TIMEOUT, jobset_agent::barrier_endpoint(&cfg, &env.agent)).await.unwrap();
    assert_eq!(endpoint, Endpoint { path: "/barrier-is-lifted".into(), port: 8080 }, "read from its own pod");
    sidecar_lifecycle(env).await;
}

async fn sidecar_lifecycle(env: Env) {
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());

    env.attempt_is("0").await;
    assert!(!*barrier.borrow(), "the barrier holds until the controller reports attempt 0 synced");

    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    lifted(&mut barrier).await;

    env.set_status(json!({"previousInPlaceRestartAttempt": 0})).await;
    assert_eq!(exit_code(agent).await, EXIT_CODE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restarted_into_a_group_restart_announces_current_plus_one_and_waits_for_it() {
    let env = Env::start().await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());

    env.attempt_is("1").await;
    // The controller deprecates attempt 0 (the other pods); this pod is past it.
    env.set_status(json!({"previousInPlaceRestartAttempt": 0})).await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 1})).await;
    lifted(&mut barrier).await;
    assert!(!agent.is_finished(), "events are handled in order: the deprecation of 0 did not end it");
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypassed_jobset_lifts_the_barrier_without_announcing() {
    let env = Env::start().await;
    Api::<JobSet>::namespaced(env.client.clone(), NS)
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"jobset.sigs.k8s.io/disable-in-place-restart": "true"}}}),
            ),
        )
        .await
        .unwrap();
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());
    lifted(&mut barrier).await;
    let pod = Api::<Pod>::namespaced(env.client.clone(), NS).get("train-workers-0-0").await.unwrap();
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(IN_PLACE_RESTART_ATTEMPT), "{annotations:?}");
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_signal_ends_the_agent_with_its_code() {
    let env = Env::start().await;
    let (tx, rx) = oneshot::channel::<()>();
    let (agent, barrier) = spawn_sidecar(&env, async move {
        let _ = rx.await;
        143
    });
    env.attempt_is("0").await;
    tx.send(()).unwrap();
    assert_eq!(exit_code(agent).await, 143);
    assert!(!*barrier.borrow());
}

async fn started(starts: &mut mpsc::UnboundedReceiver<()>) {
    tokio::time::timeout(TIMEOUT, starts.recv()).await.expect("worker started in time").unwrap();
}

/// A worker the test drives: it reports each start and exits with the codes it is sent.
struct FakeWorker {
    starts: mpsc::UnboundedSender<()>,
    exits: mpsc::UnboundedReceiver<i32>,
    running: bool,
}

impl Worker for FakeWorker {
    fn start(&mut self) -> std::io::Result<()> {
        self.running = true;
        self.starts.send(()).unwrap();
        Ok(())
    }
    async fn wait(&mut self) -> i32 {
        if !self.running {
            return std::future::pending().await;
        }
        let code = self.exits.recv().await.expect("the test keeps the sender");
        self.running = false;
        code
    }
    async fn stop(&mut self) {
        self.running = false;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_watch_worker_failure_announces_a_new_attempt_and_restarts_the_worker_in_process() {
    let env = Env::start().await;
    let mut cfg = env.config();
    cfg.worker = Some(WorkerConfig {
        shell: "/bin/sh".into(),
        command: "unused by the fake".into(),
        keep_watch: true,
        kill_grace: Duration::from_secs(1),
    });
    let (starts_tx, mut starts) = mpsc::unbounded_channel();
    let (exit, exits) = mpsc::unbounded_channel();
    let worker = FakeWorker { starts: starts_tx, exits, running: false };
    let agent = tokio::spawn(jobset_agent::run(
        cfg,
        env.agent.clone(),
        jobset_agent::NoBarrier,
        Some(worker),
        std::future::pending(),
    ));

    env.attempt_is("0").await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    started(&mut starts).await;

    exit.send(1).unwrap();
    env.attempt_is("1").await;
    assert!(starts.is_empty(), "the worker waits for the group at attempt 1");
    env.set_status(json!({"currentInPlaceRestartAttempt": 1})).await;
    started(&mut starts).await;

    exit.send(0).unwrap();
    assert_eq!(exit_code(agent).await, 0);
}

impl Env {
    /// Gives the pod the labels of Job `job_index` of replicated job `replicated_job`.
    async fn label_pod(&self, replicated_job: &str, job_index: i32) {
        let labels = json!({"jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
                            "jobset.sigs.k8s.io/job-index": job_index.to_string()});
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .patch(POD, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": labels}})))
            .await
            .unwrap();
    }

    /// Single-object GETs served so far (the agent's reads of its pod; the tests make none).
    fn gets(&self) -> u64 {
        self.server.requests.get.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until at least `n` single-object GETs were served.
    async fn gets_reach(&self, n: u64) {
        let reached = tokio::time::timeout(TIMEOUT, async {
            while self.gets() < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(reached.is_ok(), "{} GETs, expected at least {n}", self.gets());
    }
}

/// The JobSet synced at 0 with the workers' attempt 0 deprecated in the same write.
fn workers_restarting() -> Value {
    json!({"currentInPlaceRestartAttempt": 0,
           "replicatedJobsStatus": [{"name": "workers", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
                                     "suspended": 0, "previousInPlaceRestartAttempt": 0}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_reads_its_scope_once_a_scoped_entry_appears_and_follows_it() {
    let env = Env::start().await;
    env.label_pod("workers", 0).await;
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());
    env.attempt_is("0").await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    lifted(&mut barrier).await;
    assert_eq!(env.gets(), 0, "no request for the scope while the status has no scoped entry");

    env.set_status(workers_restarting()).await;
    assert_eq!(exit_code(agent).await, EXIT_CODE, "deprecated by its replicated job's entry");
    assert_eq!(env.gets(), 1, "the pod read once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_is_untouched_by_a_deprecation_of_the_workers() {
    let env = Env::start().await;
    env.label_pod("driver", 0).await;
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());
    env.attempt_is("0").await;
    // Synced by the JobSet's entry in the write that deprecates the workers: a driver that took
    // the workers' deprecation for its own would exit instead of lifting its barrier.
    env.set_status(workers_restarting()).await;
    lifted(&mut barrier).await;
    assert!(!agent.is_finished());
    assert_eq!(env.gets(), 1, "the pod read once");
    env.set_status(json!({"previousInPlaceRestartAttempt": 0})).await;
    assert_eq!(exit_code(agent).await, EXIT_CODE, "a JobSet-wide deprecation covers the driver");
    assert_eq!(env.gets(), 1, "the scope is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_scope_needs_no_pod_read() {
    let env = Env::start().await;
    let (tx, _rx) = watch::channel(false);
    let cfg = env.config().with_scope("workers", 0);
    let agent = tokio::spawn(jobset_agent::run(cfg, env.agent.clone(), tx, None::<NoWorker>, std::future::pending()));
    env.attempt_is("0").await;
    env.set_status(workers_restarting()).await;
    assert_eq!(exit_code(agent).await, EXIT_CODE, "the pod has no labels: the configured scope applies");
    assert_eq!(env.gets(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_scope_read_is_retried_with_back_off_without_a_new_jobset_event() {
    let env = Env::start().await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), NS);
    let (agent, mut barrier) = spawn_sidecar(&env, std::future::pending());
    env.attempt_is("0").await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    lifted(&mut barrier).await;
    // The pod goes away (the agent watches only its JobSet): its reads fail.
    let mut pod = pods.get(POD).await.unwrap();
    pods.delete(POD, &kube::api::DeleteParams::default().grace_period(0)).await.unwrap();
    let gets = env.gets();
    env.set_status(workers_restarting()).await;
    env.gets_reach(gets + 2).await;
    assert!(!agent.is_finished(), "with its scope unknown only the JobSet's entry covers the pod");

    pod.metadata = kube::api::ObjectMeta {
        name: pod.metadata.name.take(),
        namespace: pod.metadata.namespace.take(),
        labels: Some(
            [
                ("jobset.sigs.k8s.io/replicatedjob-name".to_string(), "workers".to_string()),
                ("jobset.sigs.k8s.io/job-index".to_string(), "0".to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(exit_code(agent).await, EXIT_CODE, "the retry read the scope and applied the status seen");
}
