//! `jobset bench in-place`: an in-place group restart of a JobSet whose every pod runs the real
//! agent logic (simulated runtime), next to the `Recreate` restart of the same JobSet, both with
//! kube-apiserver's in-flight limits; then the same in-place restart with real processes. The
//! scoped cases (a driver/workers JobSet restarting a part of itself) are in [`scoped`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use jobset_api::jobset::agent::AGENT_IMAGE;
use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use jobset_apiserver::flowcontrol::{self, LatencySnapshot, UserClass};
use jobset_kubelet::runtime::simulated::WorkerRuns;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::resource::UsageWho;
use serde_json::{Value, json};
use tokio_util::task::AbortOnDropHandle;

use super::{JS_NAME, Limits, cpu, rss_mb};

pub(super) mod scoped;

/// The worker container's name in the benchmark's pods.
const WORKER: &str = "worker";

/// What one in-place group restart measured.
pub(super) struct InPlaceFigures {
    pub startup: Duration,
    pub restart: Duration,
    pub requests: u64,
    pub by_verb: Vec<(&'static str, u64)>,
    pub rejected: u64,
    pub cpu: Duration,
    /// CPU time of the `jobset manager` process during the restart (zero in-process).
    pub manager_cpu: Duration,
    pub rss_mb: f64,
    /// API Priority and Fairness was on.
    pub apf: bool,
    /// The latencies of the controllers' requests (kube-controller-manager's and
    /// kube-scheduler's, in-process) during the restart, as their clients saw them (429s and
    /// `Retry-After` included).
    pub controllers: LatencySnapshot,
    /// The number and p99 of the [`Probe`]'s writes before the failure (idle) and during the
    /// restart.
    pub probe_p99: ((usize, Option<Duration>), (usize, Option<Duration>)),
}

/// The table column of [`InPlaceFigures::controllers_cell`].
pub(super) const CONTROLLERS_COLUMN: &str =
    "controllers' requests in the restart: count, p99 (probe write p99: idle → restart)";

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1} ms", d.as_secs_f64() * 1000.0))
}

impl InPlaceFigures {
    /// `, APF on` or `, APF off`, after the runtime in the table.
    pub(super) fn apf_label(&self) -> &'static str {
        if self.apf { ", APF on" } else { ", APF off" }
    }

    pub(super) fn controllers_cell(&self) -> String {
        let ((_, idle), (_, restart)) = self.probe_p99;
        format!(
            "{}, p99 {} (probe {} → {})",
            self.controllers.count(),
            ms(self.controllers.quantile(0.99)),
            ms(idle),
            ms(restart)
        )
    }
}

/// `jobset bench in-place --priority-and-fairness`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PriorityAndFairness {
    On,
    Off,
    /// Each simulated in-place case without, then with.
    Both,
}

impl PriorityAndFairness {
    /// The settings of the simulated in-place cases, in turn.
    pub(super) fn settings(self) -> &'static [bool] {
        match self {
            PriorityAndFairness::On => &[true],
            PriorityAndFairness::Off => &[false],
            PriorityAndFairness::Both => &[false, true],
        }
    }
}

/// How often the [`Probe`] writes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// A controller-like write paced at [`PROBE_INTERVAL`]: a merge patch of a ConfigMap's
/// annotation as kube-controller-manager, each one's latency noted with its start, so that the
/// same request is measured idle and during the restart.
struct Probe {
    samples: Arc<Mutex<Vec<(Instant, Duration)>>>,
    _task: AbortOnDropHandle<()>,
}

impl Probe {
    async fn start(server: &Arc<jobset_apiserver::ApiServer>) -> anyhow::Result<Probe> {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "bench-probe"}}))?;
        Api::<ConfigMap>::default_namespaced(server.client()).create(&PostParams::default(), &cm).await?;
        let api: Api<ConfigMap> = Api::default_namespaced(server.client_as(flowcontrol::kube_controller_manager()));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let noted = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for n in 0u64.. {
                tick.tick().await;
                let patch = json!({"metadata": {"annotations": {"bench.jobset.x-k8s.io/probe": n.to_string()}}});
                let started = Instant::now();
                if api.patch("bench-probe", &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                    noted.lock().expect("probe lock").push((started, started.elapsed()));
                }
            }
        });
        Ok(Probe { samples, _task: AbortOnDropHandle::new(task) })
    }

    /// How many writes started from `from` to `to`, and their p99.
    fn p99(&self, from: Instant, to: Instant) -> (usize, Option<Duration>) {
        let mut d: Vec<Duration> = self
            .samples
            .lock()
            .expect("probe lock")
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, d)| *d)
            .collect();
        d.sort();
        (d.len(), (!d.is_empty()).then(|| super::percentile(&d, 0.99)))
    }
}

/// The pod template's agent sidecar and worker, as upstream's sidecar-mode example has them.
fn pod_spec(worker: Value) -> Value {
    let agent = json!({
        "name": "agent",
        "image": format!("{AGENT_IMAGE}:v0.11.0"),
        "restartPolicy": "Always",
        "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}],
        "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": 8081}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 600},
        "env": [
            {"name": "JOBSET_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]
    });
    json!({"terminationGracePeriodSeconds": 0, "initContainers": [agent], "containers": [worker]})
}

/// Where each pod's agent runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Upstream's sidecar mode: the agent is a sidecar, the worker a container of its own.
    Sidecar,
    /// Main-container mode keeping its watch across restarts (`WORKER_COMMAND`,
    /// `KEEP_WATCH_ACROSS_RESTARTS=true`): one container runs the agent and, as its child, the
    /// worker, as in the design doc's benchmark prototype; a group restart restarts workers, not
    /// containers.
    MainContainer,
}

impl Mode {
    pub(super) fn label(self) -> &'static str {
        match self {
            Mode::Sidecar => "sidecar",
            Mode::MainContainer => "main container, keep watch",
        }
    }
}

/// The pod template of main-container mode: the agent runs `command` itself, with `env` too.
fn main_container_spec(command: &str, env: &[Value]) -> Value {
    let mut all = vec![
        json!({"name": "JOBSET_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "WORKER_COMMAND", "value": command}),
        json!({"name": "KEEP_WATCH_ACROSS_RESTARTS", "value": "true"}),
    ];
    all.extend_from_slice(env);
    json!({"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "trainer",
        "image": format!("{AGENT_IMAGE}:v0.11.0"),
        "restartPolicy": "Never",
        "restartPolicyRules": worker_rules(),
        "env": all
    }]})
}

/// A JobSet of `jobs` Jobs × `pods_per_job` pods restarting in place.
fn jobset(name: &str, jobs: i32, pods_per_job: i32, annotations: Value, spec: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {"spec": {
                "parallelism": pods_per_job, "completions": pods_per_job, "completionMode": "Indexed",
                "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
                "template": {"metadata": {"annotations": annotations}, "spec": spec}
            }}}]
        }
    }))?)
}

fn worker_rules() -> Value {
    json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}])
}

/// The part of a pod the benchmark reads. Its watch parses only this, so that the benchmark's
/// own watch costs little of the CPU it measures.
#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "Pod")]
struct BenchPod {
    metadata: ObjectMeta,
    status: Option<BenchPodStatus>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct BenchPodStatus {
    #[serde(default)]
    conditions: Vec<BenchCondition>,
    #[serde(default)]
    container_statuses: Vec<BenchContainerStatus>,
    #[serde(default)]
    init_container_statuses: Vec<BenchContainerStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct BenchCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct BenchContainerStatus {
    name: String,
    #[serde(default)]
    restart_count: i32,
    #[serde(default)]
    state: BenchContainerState,
}

/// Which of the states is set, and when a running container started (the scoped cases show
/// with it that the drivers were never restarted).
#[derive(Clone, Debug, Default, serde::Deserialize)]
struct BenchContainerState {
    running: Option<BenchRunning>,
    terminated: Option<serde::de::IgnoredAny>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct BenchRunning {
    started_at: Option<String>,
}

/// What the benchmark follows of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodView {
    attempt: Option<u32>,
    worker_running: bool,
    worker_restarts: i32,
    /// The worker ended or the pod is restarting its containers.
    worker_failed: bool,
}

impl PodView {
    fn of(p: &BenchPod) -> PodView {
        let attempt =
            p.metadata.annotations.as_ref().and_then(|a| a.get(IN_PLACE_RESTART_ATTEMPT)).and_then(|v| v.parse().ok());
        let none = BenchPodStatus::default();
        let st = p.status.as_ref().unwrap_or(&none);
        let worker = st.container_statuses.iter().find(|c| c.name == WORKER);
        let restarting = st.conditions.iter().any(|c| c.type_ == "AllContainersRestarting" && c.status == "True");
        let terminated = worker.is_some_and(|w| w.state.terminated.is_some());
        PodView {
            attempt,
            worker_running: worker.is_some_and(|w| w.state.running.is_some()),
            worker_restarts: worker.map(|w| w.restart_count).unwrap_or(0),
            worker_failed: restarting || terminated || worker.is_some_and(|w| w.restart_count > 0),
        }
    }

    /// Past the barrier at `attempt`, its worker running for the `attempt`-th time.
    fn at(&self, attempt: u32) -> bool {
        self.attempt == Some(attempt) && self.worker_running && self.worker_restarts == attempt as i32
    }
}

/// The JobSet's pods (by uid) and in-place status, with the time each milestone was first seen.
/// Counts are kept per event, so following thousands of pods stays cheap.
#[derive(Default)]
struct Follow {
    pods: BTreeMap<String, PodView>,
    /// Pods that announced attempt 0 / 1.
    announced: [usize; 2],
    /// Pods past the barrier at attempt 0 / 1 ([`PodView::at`]).
    running: [usize; 2],
    current: Option<i64>,
    previous: Option<i64>,
    restarts: i64,
    marks: Marks,
    /// Every pod uid ever seen.
    uids: BTreeSet<String>,
    /// Main-container mode: the simulated worker runs (the pods' status does not show them).
    worker_runs: Option<WorkerRuns>,
}

/// The time each milestone of a run was first seen, by name (the scoped cases' too).
#[derive(Default)]
struct Marks(Vec<(String, Instant)>);

impl Marks {
    /// Notes `what` at `now`, unless it was seen before.
    fn mark(&mut self, what: String, now: Instant) {
        if !self.0.iter().any(|(w, _)| *w == what) {
            self.0.push((what, now));
        }
    }

    /// When `what` was first seen.
    fn at(&self, what: &str) -> Option<Instant> {
        self.0.iter().find(|(w, _)| w == what).map(|(_, t)| *t)
    }

    /// Prints the milestones seen from `from` to `to`, in order, as seconds since `from`.
    fn print_timeline(&self, from: Instant, to: Instant) {
        let mut marks: Vec<&(String, Instant)> = self.0.iter().filter(|(_, t)| *t >= from && *t <= to).collect();
        marks.sort_by_key(|(_, t)| *t);
        for (what, at) in marks {
            println!("    {:>8.3} s  {what}", at.duration_since(from).as_secs_f64());
        }
    }
}

impl Follow {
    /// Replaces what is known of pod `uid` (`None`: it is gone), keeping the counts.
    fn set(&mut self, uid: String, view: Option<PodView>) {
        let mut count = |v: &PodView, by: isize| {
            for a in 0..2 {
                if v.attempt == Some(a as u32) {
                    self.announced[a] = self.announced[a].saturating_add_signed(by);
                }
                if v.at(a as u32) {
                    self.running[a] = self.running[a].saturating_add_signed(by);
                }
            }
        };
        let old = match view {
            Some(v) => {
                count(&v, 1);
                self.pods.insert(uid, v)
            }
            None => self.pods.remove(&uid),
        };
        if let Some(old) = old {
            count(&old, -1);
        }
    }

    fn check(&mut self, total: usize, failed: bool, now: Instant) {
        for attempt in [0, 1] {
            if self.announced[attempt] == total {
                self.marks.mark(announced(total, attempt as u32), now);
            }
            if self.running[attempt] == total {
                self.marks.mark(all_at(total, attempt as u32), now);
            }
        }
        if self.announced[1] > 0 {
            self.marks.mark("first agent announced attempt 1".into(), now);
        }
        // Main-container mode: every worker started once, then once more after the failure, the
        // agent starting each only once its attempt is current.
        if let Some(r) = self.worker_runs {
            for attempt in [0, 1] {
                if r.started >= (attempt + 1) * total as u64 {
                    self.marks.mark(all_at(total, attempt as u32), now);
                }
            }
        }
        if failed || self.worker_runs.is_some_and(|r| r.failed > 0) {
            self.marks.mark(FAILURE.into(), now);
        }
        if let Some(c) = self.current {
            self.marks.mark(current_is(c), now);
        }
        if let Some(p) = self.previous {
            self.marks.mark(previous_is(p), now);
        }
    }
}

const FAILURE: &str = "a worker failed";

/// The JobSet status write that lifts the barrier at attempt `c`.
fn current_is(c: i64) -> String {
    format!("JobSet currentInPlaceRestartAttempt = {c}")
}

/// The JobSet status write that deprecates attempt `p` (decides the restart).
fn previous_is(p: i64) -> String {
    format!("JobSet previousInPlaceRestartAttempt = {p}")
}

fn announced(total: usize, attempt: u32) -> String {
    format!("all {total} agents announced attempt {attempt}")
}

fn all_at(total: usize, attempt: u32) -> String {
    format!("all {total} workers running past the barrier at attempt {attempt}")
}

/// What a bench run follows: its JobSet's pods, the JobSet, and the simulated worker runs.
enum Seen {
    Pod(Box<watcher::Event<BenchPod>>),
    JobSet(Box<watcher::Event<DynamicObject>>),
    Workers(WorkerRuns),
}

/// The events of JobSet `name`'s pods (until `pods_until` fires), of the JobSet itself, and of the
/// simulated worker runs (main-container mode), merged.
fn run_events(
    client: kube::Client,
    name: &str,
    worker_runs: Option<tokio::sync::watch::Receiver<WorkerRuns>>,
    pods_until: tokio::sync::oneshot::Receiver<()>,
) -> futures::stream::SelectAll<futures::stream::BoxStream<'static, Seen>> {
    let pods = watcher(
        Api::<BenchPod>::default_namespaced(client.clone()),
        watcher::Config::default().labels(&format!("{JS_NAME}={name}")),
    )
    .default_backoff()
    // Only a sent stop ends it, not a dropped sender.
    .take_until(async move {
        if pods_until.await.is_err() {
            std::future::pending::<()>().await
        }
    })
    .filter_map(|e| async move { e.ok().map(|e| Seen::Pod(Box::new(e))) });
    let jobsets = watcher(
        Api::<DynamicObject>::namespaced_with(client, "default", &super::jobset_resource()),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .filter_map(|e| async move { e.ok().map(|e| Seen::JobSet(Box::new(e))) });
    let workers = match worker_runs {
        Some(rx) => tokio_stream::wrappers::WatchStream::new(rx).map(Seen::Workers).boxed(),
        None => futures::stream::pending().boxed(),
    };
    futures::stream::select_all([pods.boxed(), jobsets.boxed(), workers])
}

/// Follows the pods of JobSet `name` (until `pods_until` fires), its status and the simulated
/// worker runs (main-container mode) into `follow`, bumping `tx` after each event.
fn track(
    client: kube::Client,
    name: &str,
    total: usize,
    worker_runs: Option<tokio::sync::watch::Receiver<WorkerRuns>>,
    pods_until: tokio::sync::oneshot::Receiver<()>,
    follow: Arc<Mutex<Follow>>,
    tx: tokio::sync::watch::Sender<()>,
) -> tokio::task::JoinHandle<()> {
    let mut events = run_events(client, name, worker_runs, pods_until);
    tokio::spawn(async move {
        use watcher::Event::{Apply, Delete, InitApply};
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let mut f = follow.lock().expect("follow lock");
            let mut failed = false;
            match ev {
                Seen::Pod(e) => match *e {
                    Apply(p) | InitApply(p) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        let view = PodView::of(&p);
                        failed = view.worker_failed;
                        f.uids.insert(uid.clone());
                        f.set(uid, Some(view));
                    }
                    Delete(p) => f.set(p.metadata.uid.clone().unwrap_or_default(), None),
                    _ => {}
                },
                Seen::Workers(r) => f.worker_runs = Some(r),
                Seen::JobSet(e) => {
                    if let Apply(js) | InitApply(js) = *e {
                        let st = |k: &str| js.data.pointer(&format!("/status/{k}")).and_then(Value::as_i64);
                        (f.current, f.previous) =
                            (st("currentInPlaceRestartAttempt"), st("previousInPlaceRestartAttempt"));
                        f.restarts = st("restarts").unwrap_or(0);
                    }
                }
            }
            f.check(total, failed, now);
            drop(f);
            tx.send_replace(());
        }
    })
}

/// Waits (at most `limit`) until `what` was marked.
async fn milestone(
    follow: &Arc<Mutex<Follow>>,
    rx: &mut tokio::sync::watch::Receiver<()>,
    limit: Duration,
    what: &str,
) -> anyhow::Result<Instant> {
    super::milestone(
        follow,
        rx,
        limit,
        &format!("{what:?}"),
        |f| f.marks.at(what),
        |f| {
            let mut by: BTreeMap<String, usize> = BTreeMap::new();
            for v in f.pods.values() {
                *by.entry(format!("{v:?}")).or_default() += 1;
            }
            format!("pods: {by:?}")
        },
    )
    .await
}

/// Creates the JobSet on `server`, waits until every worker runs at attempt 0, waits for the
/// worker failure the template schedules, then until every worker runs again at attempt 1.
async fn measure(
    server: &Arc<jobset_apiserver::ApiServer>,
    js: DynamicObject,
    total: usize,
    worker_runs: Option<tokio::sync::watch::Receiver<WorkerRuns>>,
    limit: Duration,
    manager: Option<&super::manager::ManagerProcess>,
) -> anyhow::Result<InPlaceFigures> {
    let manager_cpu = || manager.map(|m| m.cpu()).unwrap_or_default();
    let client = server.client();
    let name = js.metadata.name.clone().unwrap_or_default();
    let follow = Arc::new(Mutex::new(Follow::default()));
    let (tx, mut rx) = tokio::sync::watch::channel(());
    let (stop_pods, pods_until) = tokio::sync::oneshot::channel();
    // Main-container mode: the workers' runs show the restart, and the pods' status does not
    // change; the pods are checked once after it, so that the benchmark's own parsing of 5,000
    // pod events does not take CPU from the restart it measures.
    let pods_during_restart = worker_runs.is_none();
    let tracking = track(client.clone(), &name, total, worker_runs, pods_until, follow.clone(), tx);
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &super::jobset_resource());
    let probe = Probe::start(server).await?;
    let created = Instant::now();
    jobsets.create(&PostParams::default(), &js).await?;
    let (mut rx_sync, mut rx_fail, all_synced) = (rx.clone(), rx.clone(), all_at(total, 0));
    let synced = tokio::select! {
        at = milestone(&follow, &mut rx_sync, limit, &all_synced) => at?,
        _ = milestone(&follow, &mut rx_fail, limit, FAILURE) => {
            anyhow::bail!("the worker failed before every pod was in sync: raise --fail-after")
        }
    };
    let startup = synced.duration_since(created);
    println!("  create → all {total} workers running past the barrier: {:.2} s", startup.as_secs_f64());
    follow.lock().expect("follow lock").marks.print_timeline(created, synced);
    if !pods_during_restart {
        // The workers' runs can be ahead of the benchmark's pod watch: it stops once it has seen
        // every pod at attempt 0, whose uids show after the restart that none was recreated.
        milestone(&follow, &mut rx.clone(), limit, &announced(total, 0)).await?;
        let _ = stop_pods.send(());
    }
    let cpu_before = cpu(UsageWho::RUSAGE_SELF);
    let manager_before = manager_cpu();
    let failed = milestone(&follow, &mut rx, limit, FAILURE).await?;
    println!("  a worker failed; restarting in place");
    // Requests and CPU from here on are the restart's.
    let (verbs_failed, requests_failed) = server.requests.snapshot();
    let rejected_failed = server.requests.rejected();
    let controllers_failed = server.flowcontrol.latency.snapshot(UserClass::Controllers);
    let restarted = milestone(&follow, &mut rx, limit, &all_at(total, 1)).await?;
    let controllers = server.flowcontrol.latency.snapshot(UserClass::Controllers).since(&controllers_failed);
    let (verbs_after, requests_after) = server.requests.snapshot();
    let rejected = server.requests.rejected() - rejected_failed;
    let cpu_used = cpu(UsageWho::RUSAGE_SELF) - cpu_before;
    let manager_used = manager_cpu().saturating_sub(manager_before);
    let restart = restarted.duration_since(failed);
    println!(
        "  worker failure → all {total} workers running past the barrier at attempt 1: {:.3} s",
        restart.as_secs_f64()
    );
    let apf = server.config.enable_priority_and_fairness;
    let probe_p99 = (probe.p99(synced, failed), probe.p99(failed, restarted));
    println!(
        "  controllers' requests during the restart (priority and fairness {}): {}, p50 {}, p99 {}; probe (a kube-controller-manager write every {} ms): p99 idle {} ({} writes) → restart {} ({} writes)",
        if apf { "on" } else { "off" },
        controllers.count(),
        ms(controllers.quantile(0.5)),
        ms(controllers.quantile(0.99)),
        PROBE_INTERVAL.as_millis(),
        ms(probe_p99.0.1),
        probe_p99.0.0,
        ms(probe_p99.1.1),
        probe_p99.1.0
    );
    let uids = {
        let f = follow.lock().expect("follow lock");
        f.marks.print_timeline(failed, restarted);
        // Nothing was recreated, and the restart spent no JobSet restart.
        anyhow::ensure!(f.uids.len() == total, "{} pods were created for {total}: some were recreated", f.uids.len());
        anyhow::ensure!(f.restarts == 0, "status.restarts = {}", f.restarts);
        f.uids.clone()
    };
    if !pods_during_restart {
        let pods = Api::<BenchPod>::default_namespaced(client.clone())
            .list(&kube::api::ListParams::default().labels(&format!("{JS_NAME}={name}")))
            .await?;
        let at_1 = pods.items.iter().filter(|p| PodView::of(p).attempt == Some(1)).count();
        let kept = pods.items.iter().filter(|p| p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u))).count();
        anyhow::ensure!(
            (pods.items.len(), kept, at_1) == (total, total, total),
            "after the restart: {} pods, {kept} of them the original ones, {at_1} at attempt 1",
            pods.items.len()
        );
    }
    // The controller's restart record beside the bench's own figures (after them: the wait for
    // its last phase time is no part of what was measured).
    let seen = {
        let f = follow.lock().expect("follow lock");
        let anchor = (Instant::now(), jiff::Timestamp::now());
        let wall = |at: Instant| super::phases::wall(at, anchor);
        super::phases::Seen {
            failure: wall(failed),
            decided: f.marks.at(&previous_is(0)).map(wall),
            // Main-container mode stops the pod watch before the restart: no pod milestones.
            stopped: f.marks.at(&announced(total, 1)).map(wall),
            barrier_lifted: f.marks.at(&current_is(1)).map(wall),
            running: wall(restarted),
            running_what: all_at(total, 1),
            note: (!pods_during_restart).then_some(
                "main-container mode: the workers are the agents' children, which no pod status shows: the record's runningAt is every pod Ready at attempt 1 (the barrier lifted), the bench's end every worker started after it",
            ),
        }
    };
    super::phases::print_record(client.clone(), &name, 1, limit, &seen).await;
    tracking.abort();
    Ok(InPlaceFigures {
        startup,
        restart,
        requests: requests_after - requests_failed,
        by_verb: verbs_after.iter().zip(&verbs_failed).map(|((v, a), (_, b))| (*v, a - b)).collect(),
        rejected,
        cpu: cpu_used,
        manager_cpu: manager_used,
        rss_mb: rss_mb(),
        apf,
        controllers,
        probe_p99,
    })
}

/// The pod spec of a simulated pod in `mode`, with `agent_env` added to the agent's env.
fn simulated_spec(mode: Mode, agent_env: &[Value]) -> Value {
    match mode {
        Mode::Sidecar => {
            let worker = json!({"name": WORKER, "image": "registry.example.com/ml/trainer:2026.11",
                                "restartPolicy": "Never", "restartPolicyRules": worker_rules()});
            let mut spec = pod_spec(worker);
            if let Some(env) = spec.pointer_mut("/initContainers/0/env").and_then(Value::as_array_mut) {
                env.extend_from_slice(agent_env);
            }
            spec
        }
        Mode::MainContainer => main_container_spec("python train.py", agent_env),
    }
}

/// In-place group restart of `jobs` × `pods_per_job` simulated pods: pod 0 of Job 0 fails once,
/// `fail_after` after its worker started.
pub(super) async fn simulated(
    jobs: i32,
    pods_per_job: i32,
    nodes: usize,
    limits: Limits,
    fail_after: Duration,
    mode: Mode,
    controllers: super::manager::Controllers,
) -> anyhow::Result<InPlaceFigures> {
    let server = super::server_with(Box::new(jobset_apiserver::persist::Memory), limits)?;
    let mut config = LocalConfig::with_nodes(nodes);
    let external = controllers == super::manager::Controllers::Manager;
    config.jobset_controller = !external;
    config.appwrapper_controller = !external;
    let cluster = LocalCluster::start(server.clone(), config).await;
    let manager = match external {
        true => Some(super::manager::ManagerProcess::start(&server).await?),
        false => None,
    };
    let spec = simulated_spec(mode, &[]);
    let worker_runs = (mode == Mode::MainContainer).then(|| cluster.simulation.worker_runs());
    let annotations = json!({
        "sim.jobset.x-k8s.io/duration": "forever",
        "sim.jobset.x-k8s.io/fail-job-indexes": "0",
        "sim.jobset.x-k8s.io/fail-indexes": "0",
        "sim.jobset.x-k8s.io/fail-attempts": "1",
        "sim.jobset.x-k8s.io/fail-duration": format!("{}ms", fail_after.as_millis()),
    });
    let js = jobset("bench-in-place", jobs, pods_per_job, annotations, spec)?;
    println!("InPlaceRestart: {} simulated pods, each with the agent ({})", jobs * pods_per_job, mode.label());
    let total = (jobs * pods_per_job) as usize;
    let figures = measure(&server, js, total, worker_runs, Duration::from_secs(300), manager.as_ref()).await;
    if let Some(m) = manager {
        m.stop().await;
    }
    cluster.shutdown().await;
    figures
}

/// In-place group restart of `pods` process-runtime pods on one node (`jobset agent` talking
/// HTTPS with pod-bound tokens, shell workers); one worker fails once, `fail_after` after it
/// started, keeping a marker in an emptyDir (which survives in-place restarts). In main-container
/// mode the workers are the agents' children, invisible in the pods' status: each worker start
/// and failure appends a line to a hostPath file that the benchmark follows.
pub(super) async fn process(
    pods: i32,
    limits: Limits,
    fail_after: Duration,
    mode: Mode,
) -> anyhow::Result<InPlaceFigures> {
    let dir = tempfile::Builder::new().prefix("jobset-bench-").tempdir()?;
    let opts = crate::cluster::ClusterOptions {
        data_dir: None,
        state_dir: dir.path().to_path_buf(),
        port: 0,
        kubeconfig: dir.path().join("kubeconfig"),
        gc_interval: Duration::from_secs(5),
        watch_history: 100_000,
        event_ttl: jobset_apiserver::store::StoreConfig::default().event_ttl,
        nodes: Some(jobset_kubelet::NodeConfig::uniform(1, "node")),
        runtime: "process".into(),
        timing: crate::cluster::TimingArgs {
            default_run_duration: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(10),
            node_grace_period: Duration::from_secs(40),
            job_backoff: Duration::from_secs(10),
            job_sync_batch_period: jobset_controllers::job::JobControllerConfig::default().sync_batch_period,
            restart_history_limit: jobset_controllers::jobset::restart_history::DEFAULT_LIMIT,
        },
        inflight: crate::up::InflightArgs {
            max_requests_inflight: limits.read_only,
            max_mutating_requests_inflight: limits.mutating,
            enable_priority_and_fairness: limits.apf,
        },
        external: vec![],
    };
    let embedded = crate::cluster::start(&opts).await?;
    let server = embedded.server().context("the embedded cluster")?;
    let runs_file = dir.path().join("worker-runs");
    std::fs::write(&runs_file, "")?;
    let (log_start, log_fail) = match mode {
        Mode::Sidecar => ("", ""),
        Mode::MainContainer => ("echo s >> /bench/worker-runs; ", "echo f >> /bench/worker-runs; "),
    };
    let script = format!(
        "{log_start}if [ \"$JOB_INDEX\" = 0 ] && [ \"$JOB_COMPLETION_INDEX\" = 0 ] && [ ! -f /state/failed ]; then \
           sleep {}; touch /state/failed; {log_fail}exit 1; fi; exec sleep 100000",
        fail_after.as_secs_f64()
    );
    let env = [
        json!({"name": "JOB_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}}),
        json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}),
    ];
    let (mut spec, worker_runs) = match mode {
        Mode::Sidecar => {
            let worker = json!({
                "name": WORKER, "image": "busybox", "command": ["sh", "-c", script],
                "restartPolicy": "Never", "restartPolicyRules": worker_rules(), "env": env,
                "volumeMounts": [{"name": "state", "mountPath": "/state"}]
            });
            (pod_spec(worker), None)
        }
        Mode::MainContainer => {
            let mut spec = main_container_spec(&script, &env);
            spec["containers"][0]["volumeMounts"] =
                json!([{"name": "state", "mountPath": "/state"}, {"name": "bench", "mountPath": "/bench"}]);
            (spec, Some(follow_worker_runs(runs_file)))
        }
    };
    let mut volumes = vec![json!({"name": "state", "emptyDir": {}})];
    if mode == Mode::MainContainer {
        volumes.push(
            json!({"name": "bench", "hostPath": {"path": dir.path().display().to_string(), "type": "Directory"}}),
        );
    }
    spec["volumes"] = json!(volumes);
    let js = jobset("bench-in-place-process", 1, pods, json!({}), spec)?;
    println!("InPlaceRestart: {pods} process-runtime pods on one node (jobset agent, {}, sh workers)", mode.label());
    let figures = measure(
        &server,
        js,
        pods as usize,
        worker_runs.as_ref().map(|(rx, _)| rx.clone()),
        Duration::from_secs(120),
        None,
    )
    .await;
    drop(worker_runs);
    embedded.shutdown().await?;
    figures
}

/// Follows `file`, a line per worker start (`s`) or failure (`f`), polling it every 2 ms (a
/// benchmark, not a test: the resolution is part of the figure). Stops with the returned guard.
fn follow_worker_runs(file: std::path::PathBuf) -> (tokio::sync::watch::Receiver<WorkerRuns>, AbortOnDropHandle<()>) {
    let (tx, rx) = tokio::sync::watch::channel(WorkerRuns::default());
    let task = tokio::spawn(async move {
        loop {
            if let Ok(text) = tokio::fs::read_to_string(&file).await {
                let count = |c: &str| text.lines().filter(|l| *l == c).count() as u64;
                let runs = WorkerRuns { started: count("s"), failed: count("f") };
                tx.send_if_modified(|r| std::mem::replace(r, runs) != runs);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    (rx, AbortOnDropHandle::new(task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milestone_keeps_the_time_it_was_first_seen() {
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        let mut m = Marks::default();
        m.mark(FAILURE.into(), t1);
        m.mark(FAILURE.into(), t2);
        m.mark(current_is(1), t2);
        assert_eq!((m.at(FAILURE), m.at(&current_is(1)), m.at(&previous_is(0))), (Some(t1), Some(t2), None));
    }
}
