//! `jobset bench in-place`'s scoped cases (issue 23): a driver/workers JobSet, replicated job
//! `driver` (Jobs of one pod) and `workers` (Jobs of the rest), every pod simulated; one worker
//! fails, and the same JobSet restarts three ways, each on a fresh cluster: only the workers in
//! place (a `RestartReplicatedJob` rule targeting `workers` under `InPlaceRestart`), the whole
//! JobSet in place (no rule), and the workers recreated (the same rule under `Recreate`). Each
//! case reports the time from the failure to every restarted pod's worker running again, how many
//! pods restarted, how many drivers kept running untouched (same pod, same container start times,
//! one worker run), and the restart's API requests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_api::jobset::keys::{REPLICATED_JOB_NAME, REPLICATED_JOB_RESTART_ATTEMPT, RESTART_ATTEMPT};
use jobset_kubelet::runtime::simulated::{AttemptKey, SimulationState, WorkerRuns};
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use nix::sys::resource::UsageWho;
use serde_json::{Value, json};

use super::super::{JS_NAME, Limits, cpu, jobset_resource, phases, rss_mb};
use super::{BenchPod, Marks, Mode, PodView, Seen, WORKER, simulated_spec};

/// The replicated job whose pods must keep running.
pub(in crate::bench) const DRIVER: &str = "driver";
/// The replicated job one of whose pods fails.
pub(in crate::bench) const WORKERS: &str = "workers";
/// The main-container-mode container (see [`super::main_container_spec`]), whose simulated
/// worker runs count as `<container>/worker`.
const MAIN_CONTAINER: &str = "trainer";
/// How long to wait for the controller's restart record once the bench has its figures.
const RECORD_WAIT: Duration = Duration::from_secs(30);

/// The driver/workers split of a pod count: `jobs` Jobs in each replicated job, a driver Job of
/// one pod and a workers Job of `workers_per_job` pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::bench) struct Topology {
    pub jobs: i32,
    pub workers_per_job: i32,
}

impl Topology {
    /// `pods` in `pods / pods_per_job` (at least one) Job indexes of `pods_per_job` pods each: one
    /// driver, the rest workers (5,000 in 100s: 50 drivers and 50 × 99 workers).
    pub fn new(pods: i32, pods_per_job: i32) -> anyhow::Result<Topology> {
        let jobs = (pods / pods_per_job.max(1)).max(1);
        let per_index = pods / jobs;
        anyhow::ensure!(
            per_index >= 2,
            "--pods {pods} with --pods-per-job {pods_per_job}: the scoped cases need at least 2 pods per Job index (a driver and a worker); or skip them with --no-scoped"
        );
        Ok(Topology { jobs, workers_per_job: per_index - 1 })
    }

    pub fn drivers(&self) -> usize {
        self.jobs as usize
    }

    pub fn workers(&self) -> usize {
        (self.jobs * self.workers_per_job) as usize
    }

    pub fn total(&self) -> usize {
        self.drivers() + self.workers()
    }

    /// Pods per replicated job.
    fn sizes(&self) -> BTreeMap<String, usize> {
        BTreeMap::from([(DRIVER.to_string(), self.drivers()), (WORKERS.to_string(), self.workers())])
    }
}

/// One of the three ways the JobSet restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::bench) enum Case {
    /// `InPlaceRestart` with a `RestartReplicatedJob` rule targeting the workers.
    Scoped,
    /// `InPlaceRestart` without a rule: every pod restarts in place.
    Whole,
    /// `Recreate` with the same rule: the workers' Jobs are recreated.
    Recreate,
}

impl Case {
    pub fn label(self) -> &'static str {
        match self {
            Case::Scoped => "workers in place (RestartReplicatedJob rule)",
            Case::Whole => "whole JobSet in place (no rule)",
            Case::Recreate => "workers recreated (RestartReplicatedJob, Recreate)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Case::Scoped => "bench-scoped",
            Case::Whole => "bench-whole",
            Case::Recreate => "bench-recreate-workers",
        }
    }

    fn in_place(self) -> bool {
        self != Case::Recreate
    }

    /// The failure policy of the case (rule names as upstream's validation allows: no `-`).
    fn failure_policy(self) -> Value {
        let rule =
            |name: &str| json!([{"name": name, "action": "RestartReplicatedJob", "targetReplicatedJobs": [WORKERS]}]);
        match self {
            Case::Scoped => {
                json!({"maxRestarts": 5, "restartStrategy": "InPlaceRestart", "rules": rule("workers_in_place")})
            }
            Case::Whole => json!({"maxRestarts": 5, "restartStrategy": "InPlaceRestart"}),
            Case::Recreate => {
                json!({"maxRestarts": 5, "restartStrategy": "Recreate", "rules": rule("workers_recreate")})
            }
        }
    }
}

/// The agent's scope from its pod's labels (downward API), as the shipped examples set it.
fn scope_env() -> [Value; 2] {
    let label = |k: &str| json!({"fieldRef": {"fieldPath": format!("metadata.labels['{k}']")}});
    [
        json!({"name": "AGENT_REPLICATED_JOB_NAME", "valueFrom": label(REPLICATED_JOB_NAME)}),
        json!({"name": "AGENT_JOB_INDEX", "valueFrom": label(jobset_api::jobset::keys::JOB_INDEX)}),
    ]
}

/// The pod spec of `case` in `mode` (`Recreate`: a plain worker container, as the other
/// `Recreate` comparisons have it).
fn pod_spec(case: Case, mode: Mode) -> Value {
    match case {
        Case::Recreate => json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [
            {"name": WORKER, "image": "registry.example.com/ml/trainer:2026.11"}]}),
        Case::Scoped | Case::Whole => simulated_spec(mode, &scope_env()),
    }
}

/// The JobSet of `case`: every pod runs `spec`; pod 0 of workers Job 0 fails once, `fail_after`
/// after its worker started (the simulated runtime's annotations).
fn jobset(case: Case, topo: Topology, spec: &Value, fail_after: Duration) -> anyhow::Result<DynamicObject> {
    let forever = json!({"sim.jobset.x-k8s.io/duration": "forever"});
    let failing = json!({
        "sim.jobset.x-k8s.io/duration": "forever",
        "sim.jobset.x-k8s.io/fail-job-indexes": "0",
        "sim.jobset.x-k8s.io/fail-indexes": "0",
        "sim.jobset.x-k8s.io/fail-attempts": "1",
        "sim.jobset.x-k8s.io/fail-duration": format!("{}ms", fail_after.as_millis()),
    });
    let rjob = |name: &str, pods: i32, annotations: &Value| {
        let mut job = json!({
            "parallelism": pods, "completions": pods, "completionMode": "Indexed",
            "template": {"metadata": {"annotations": annotations}, "spec": spec}
        });
        match case.in_place() {
            // As in the other in-place cases: a failed worker never fails its Job.
            true => {
                job["backoffLimit"] = json!(i32::MAX);
                job["podReplacementPolicy"] = json!("Failed");
            }
            // The failed pod fails its Job, which the rule acts on.
            false => job["backoffLimit"] = json!(0),
        }
        json!({"name": name, "replicas": topo.jobs, "template": {"spec": job}})
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": case.name()},
        "spec": {
            "failurePolicy": case.failure_policy(),
            "replicatedJobs": [rjob(DRIVER, 1, &forever), rjob(WORKERS, topo.workers_per_job, &failing)]
        }
    }))?)
}

/// The replicated jobs that a restart decided in JobSet `status` covers: all of them once the
/// JobSet-wide attempt is deprecated or the JobSet restarted; else those whose own in-place
/// attempt is deprecated or whose own restarts grew.
fn restarted_replicated_jobs(status: &Value, all: &BTreeMap<String, usize>) -> BTreeSet<String> {
    let deprecated = |s: &Value| s.get("previousInPlaceRestartAttempt").is_some_and(|v| !v.is_null());
    let restarted = |s: &Value| s.get("restarts").and_then(Value::as_i64).unwrap_or(0) > 0;
    if deprecated(status) || restarted(status) {
        return all.keys().cloned().collect();
    }
    let rjobs = status.get("replicatedJobsStatus").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    rjobs
        .iter()
        .filter(|r| deprecated(r) || restarted(r))
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .filter(|n| all.contains_key(*n))
        .map(str::to_string)
        .collect()
}

/// The restart fields of JobSet `status` as timeline milestones (restart counts only once above
/// zero).
fn status_marks(status: &Value) -> Vec<String> {
    let fields = |s: &Value, whose: &str, out: &mut Vec<String>| {
        for k in ["currentInPlaceRestartAttempt", "previousInPlaceRestartAttempt", "restarts"] {
            match s.get(k).and_then(Value::as_i64) {
                Some(v) if k != "restarts" || v > 0 => out.push(format!("{whose} {k} = {v}")),
                _ => {}
            }
        }
    };
    let mut out = vec![];
    fields(status, "JobSet", &mut out);
    for r in status.get("replicatedJobsStatus").and_then(Value::as_array).into_iter().flatten() {
        if let Some(name) = r.get("name").and_then(Value::as_str) {
            fields(r, &format!("replicated job {name}"), &mut out);
        }
    }
    out
}

/// `a / b` as a ratio to print, "-" when `b` is zero.
pub(in crate::bench) fn ratio(a: Duration, b: Duration) -> String {
    match b.is_zero() {
        true => "-".into(),
        false => format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64()),
    }
}

/// What the bench follows of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScopedPod {
    rjob: String,
    /// In place: its attempt; `Recreate`: the JobSet's and its replicated job's restarts when it
    /// was created.
    generation: Option<u32>,
    /// Its worker runs at its generation (in place: past the barrier, restarted once per attempt).
    ready: bool,
    failed: bool,
    /// When each of its running containers started (init containers first; `None`: not running).
    started: Vec<Option<String>>,
}

impl ScopedPod {
    fn of(p: &BenchPod, in_place: bool) -> ScopedPod {
        let view = PodView::of(p);
        let labels = p.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k));
        let number = |k: &str| label(k).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        let (generation, ready) = match in_place {
            true => (view.attempt, view.attempt.is_some_and(|a| view.at(a))),
            false => (Some(number(RESTART_ATTEMPT) + number(REPLICATED_JOB_RESTART_ATTEMPT)), view.worker_running),
        };
        let started = p
            .status
            .iter()
            .flat_map(|s| s.init_container_statuses.iter().chain(&s.container_statuses))
            .map(|c| c.state.running.as_ref().and_then(|r| r.started_at.clone()))
            .collect();
        ScopedPod {
            rjob: label(REPLICATED_JOB_NAME).cloned().unwrap_or_default(),
            generation,
            ready,
            failed: view.worker_failed,
            started,
        }
    }

    fn all_started(&self) -> bool {
        !self.started.is_empty() && self.started.iter().all(Option::is_some)
    }
}

/// A pod as the bench sees it once the restart is over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Final {
    uid: String,
    rjob: String,
    started: Vec<Option<String>>,
    /// How many times its worker ran (main-container mode: the simulated runs; else 1 + the
    /// worker container's restarts).
    worker_runs: u32,
}

/// What a restart did to the pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::bench) struct Outcome {
    pub pods: usize,
    /// Pods present before the restart (same uid).
    pub kept_pods: usize,
    /// Pods recreated or whose worker ran again, by replicated job.
    pub restarted: BTreeMap<String, usize>,
    pub drivers: usize,
    /// Drivers of before the restart with the same container start times and one worker run.
    pub drivers_kept: usize,
}

impl Outcome {
    pub fn restarted_total(&self) -> usize {
        self.restarted.values().sum()
    }
}

/// Compares the pods after the restart with their container start times before it (by uid).
fn tally(before: &BTreeMap<String, Vec<Option<String>>>, after: &[Final]) -> Outcome {
    let mut o = Outcome { pods: after.len(), ..Outcome::default() };
    for p in after {
        let was = before.get(&p.uid);
        o.kept_pods += usize::from(was.is_some());
        if was.is_none() || p.worker_runs > 1 {
            *o.restarted.entry(p.rjob.clone()).or_default() += 1;
        }
        if p.rjob == DRIVER {
            o.drivers += 1;
            o.drivers_kept += usize::from(was == Some(&p.started) && p.worker_runs == 1);
        }
    }
    o
}

const SYNCED: &str = "every worker running at attempt 0";
const STARTED: &str = "every pod's containers started (status)";
const FAILURE: &str = "a worker failed";
const DONE: &str = "every restarted pod's worker running again";
const ANNOUNCED: &str = "every pod of the restarted replicated jobs at attempt 1 (Recreate: created anew)";

fn decided(scope: &BTreeSet<String>) -> String {
    format!("restart decided for replicated jobs {}", scope.iter().cloned().collect::<Vec<_>>().join(", "))
}

/// The JobSet's pods and restart status, with the time each milestone was first seen; counts
/// kept per event, as in [`super::Follow`].
#[derive(Default)]
struct Follow {
    in_place: bool,
    /// Pods per replicated job.
    sizes: BTreeMap<String, usize>,
    pods: BTreeMap<String, ScopedPod>,
    /// Pods by (replicated job, generation).
    present: BTreeMap<(String, u32), usize>,
    /// Ready pods by (replicated job, generation).
    ready: BTreeMap<(String, u32), usize>,
    all_started: usize,
    failed: bool,
    /// The replicated jobs the controller decided to restart.
    scope: BTreeSet<String>,
    /// Main-container mode: the simulated worker runs.
    worker_runs: Option<WorkerRuns>,
    marks: Marks,
}

impl Follow {
    fn set(&mut self, uid: String, view: Option<ScopedPod>) {
        let mut count = |v: &ScopedPod, by: isize| {
            if let Some(g) = v.generation {
                let n = self.present.entry((v.rjob.clone(), g)).or_default();
                *n = n.saturating_add_signed(by);
                if v.ready {
                    let n = self.ready.entry((v.rjob.clone(), g)).or_default();
                    *n = n.saturating_add_signed(by);
                }
            }
            if v.all_started() {
                self.all_started = self.all_started.saturating_add_signed(by);
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

    fn sum(&self, counts: &BTreeMap<(String, u32), usize>, generation: u32, rjobs: &BTreeSet<String>) -> usize {
        rjobs.iter().map(|r| counts.get(&(r.clone(), generation)).copied().unwrap_or(0)).sum()
    }

    fn check(&mut self, now: Instant) {
        let all: BTreeSet<String> = self.sizes.keys().cloned().collect();
        let total: usize = self.sizes.values().sum();
        let synced = match self.worker_runs {
            Some(r) => r.started >= total as u64,
            None => self.sum(&self.ready, 0, &all) == total,
        };
        if synced {
            self.marks.mark(SYNCED.into(), now);
        }
        if self.all_started == total && (!self.in_place || self.sum(&self.present, 0, &all) == total) {
            self.marks.mark(STARTED.into(), now);
        }
        if self.failed || self.worker_runs.is_some_and(|r| r.failed > 0) {
            self.marks.mark(FAILURE.into(), now);
        }
        if self.scope.is_empty() {
            return;
        }
        self.marks.mark(decided(&self.scope), now);
        let expected: usize = self.scope.iter().filter_map(|r| self.sizes.get(r)).sum();
        if self.sum(&self.present, 1, &self.scope) == expected {
            self.marks.mark(ANNOUNCED.into(), now);
        }
        let done = match self.worker_runs {
            Some(r) => r.started >= (total + expected) as u64,
            None => self.sum(&self.ready, 1, &self.scope) == expected,
        };
        if done {
            self.marks.mark(DONE.into(), now);
        }
    }

    fn stuck(&self) -> String {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for v in self.pods.values() {
            *by.entry(format!("{} generation {:?} ready {} failed {}", v.rjob, v.generation, v.ready, v.failed))
                .or_default() += 1;
        }
        format!("scope {:?}, worker runs {:?}, pods: {by:?}", self.scope, self.worker_runs)
    }
}

/// Follows JobSet `name`'s pods (until `pods_until` fires), its status and the simulated worker
/// runs into `follow`, bumping `tx` after each event.
fn track(
    client: kube::Client,
    name: &str,
    worker_runs: Option<tokio::sync::watch::Receiver<WorkerRuns>>,
    pods_until: tokio::sync::oneshot::Receiver<()>,
    follow: Arc<Mutex<Follow>>,
    tx: tokio::sync::watch::Sender<()>,
) -> tokio::task::JoinHandle<()> {
    let mut events = super::run_events(client, name, worker_runs, pods_until);
    tokio::spawn(async move {
        use watcher::Event::{Apply, Delete, InitApply};
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let mut f = follow.lock().expect("follow lock");
            match ev {
                Seen::Pod(e) => match *e {
                    Apply(p) | InitApply(p) => {
                        let view = ScopedPod::of(&p, f.in_place);
                        f.failed |= view.failed && view.generation == Some(0) && view.rjob == WORKERS;
                        f.set(p.metadata.uid.clone().unwrap_or_default(), Some(view));
                    }
                    Delete(p) => f.set(p.metadata.uid.clone().unwrap_or_default(), None),
                    _ => {}
                },
                Seen::Workers(r) => f.worker_runs = Some(r),
                Seen::JobSet(e) => {
                    if let Apply(js) | InitApply(js) = *e {
                        let status = js.data.get("status").cloned().unwrap_or(Value::Null);
                        let scope = restarted_replicated_jobs(&status, &f.sizes);
                        f.scope.extend(scope);
                        for m in status_marks(&status) {
                            f.marks.mark(m, now);
                        }
                    }
                }
            }
            f.check(now);
            drop(f);
            tx.send_replace(());
        }
    })
}

async fn milestone(
    follow: &Arc<Mutex<Follow>>,
    rx: &mut tokio::sync::watch::Receiver<()>,
    limit: Duration,
    what: &str,
) -> anyhow::Result<Instant> {
    super::super::milestone(follow, rx, limit, &format!("{what:?}"), |f| f.marks.at(what), Follow::stuck).await
}

/// What one scoped case measured.
pub(in crate::bench) struct ScopedFigures {
    pub case: Case,
    /// Where the agent ran (`None`: `Recreate`, no agent).
    pub mode: Option<Mode>,
    pub startup: Duration,
    pub restart: Duration,
    pub outcome: Outcome,
    pub requests: u64,
    pub by_verb: Vec<(&'static str, u64)>,
    pub rejected: u64,
    pub cpu: Duration,
    pub rss_mb: f64,
}

/// Creates the JobSet, waits until every worker runs, waits for the failure, then until every pod
/// of the replicated jobs the controller restarted runs its worker again; then compares the pods
/// with before. `simulation`: main-container mode's worker runs.
async fn measure(
    server: &Arc<jobset_apiserver::ApiServer>,
    js: DynamicObject,
    (case, mode): (Case, Option<Mode>),
    topo: Topology,
    simulation: Option<&SimulationState>,
    limit: Duration,
) -> anyhow::Result<ScopedFigures> {
    let client = server.client();
    let name = js.metadata.name.clone().unwrap_or_default();
    let follow = Arc::new(Mutex::new(Follow { in_place: case.in_place(), sizes: topo.sizes(), ..Follow::default() }));
    let (tx, mut rx) = tokio::sync::watch::channel(());
    let (stop_pods, pods_until) = tokio::sync::oneshot::channel();
    // Main-container mode: as in the whole-JobSet case, the pod watch stops before the restart
    // (the worker runs show it), so that its parsing takes no CPU from the restart.
    let main = simulation.is_some();
    let tracking = track(client.clone(), &name, simulation.map(|s| s.worker_runs()), pods_until, follow.clone(), tx);
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &jobset_resource());
    let created = Instant::now();
    jobsets.create(&PostParams::default(), &js).await?;
    let (mut rx_sync, mut rx_fail) = (rx.clone(), rx.clone());
    let synced = tokio::select! {
        at = milestone(&follow, &mut rx_sync, limit, SYNCED) => at?,
        _ = milestone(&follow, &mut rx_fail, limit, FAILURE) => {
            anyhow::bail!("the worker failed before every pod was in sync: raise --fail-after")
        }
    };
    let startup = synced.duration_since(created);
    println!("  create → all {} workers running: {:.2} s", topo.total(), startup.as_secs_f64());
    // Every container's start time, to compare the drivers' with after the restart.
    milestone(&follow, &mut rx.clone(), limit, STARTED).await?;
    let before: BTreeMap<String, Vec<Option<String>>> = {
        let f = follow.lock().expect("follow lock");
        f.marks.print_timeline(created, synced);
        f.pods.iter().map(|(uid, p)| (uid.clone(), p.started.clone())).collect()
    };
    if main {
        let _ = stop_pods.send(());
    }
    let cpu_before = cpu(UsageWho::RUSAGE_SELF);
    let failed = milestone(&follow, &mut rx, limit, FAILURE).await?;
    println!("  a worker failed; restarting");
    let (verbs_failed, requests_failed) = server.requests.snapshot();
    let rejected_failed = server.requests.rejected();
    let done = milestone(&follow, &mut rx, limit, DONE).await?;
    let (verbs_after, requests_after) = server.requests.snapshot();
    let rejected = server.requests.rejected() - rejected_failed;
    let cpu_used = cpu(UsageWho::RUSAGE_SELF) - cpu_before;
    let restart = done.duration_since(failed);
    let (scope, expected) = {
        let f = follow.lock().expect("follow lock");
        (f.scope.clone(), f.scope.iter().filter_map(|r| f.sizes.get(r)).sum::<usize>())
    };
    println!(
        "  worker failure → all {expected} pods of replicated jobs {} running their worker again: {:.3} s",
        scope.iter().cloned().collect::<Vec<_>>().join(", "),
        restart.as_secs_f64()
    );
    follow.lock().expect("follow lock").marks.print_timeline(failed, done);
    // The pods after the restart against before it (the simulated worker runs in main-container
    // mode, whose pod status does not show them).
    let pods = Api::<Pod>::default_namespaced(client.clone())
        .list(&ListParams::default().labels(&format!("{JS_NAME}={name}")))
        .await?;
    let after: Vec<Final> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let bench: BenchPod = serde_json::from_value(serde_json::to_value(p)?)?;
            let view = ScopedPod::of(&bench, case.in_place());
            let worker_runs = match simulation {
                Some(s) => s.attempts(&AttemptKey::of(p, &format!("{MAIN_CONTAINER}/worker"))),
                None => 1 + PodView::of(&bench).worker_restarts.max(0) as u32,
            };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            Ok(Final { uid, rjob: view.rjob, started: view.started, worker_runs })
        })
        .collect::<anyhow::Result<_>>()?;
    let outcome = tally(&before, &after);
    println!(
        "  pods restarted: {} of {} ({}); drivers kept running: {} of {} (same pod, container start times, one worker run)",
        outcome.restarted_total(),
        topo.total(),
        outcome.restarted.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", "),
        outcome.drivers_kept,
        outcome.drivers
    );
    if case.in_place() {
        anyhow::ensure!(
            (outcome.pods, outcome.kept_pods) == (topo.total(), topo.total()),
            "after the in-place restart: {} pods, {} of them the original ones: some were recreated",
            outcome.pods,
            outcome.kept_pods
        );
    }
    let seen = {
        let f = follow.lock().expect("follow lock");
        let anchor = (Instant::now(), jiff::Timestamp::now());
        let wall = |at: Instant| phases::wall(at, anchor);
        let lifted = ["JobSet".to_string()]
            .into_iter()
            .chain(scope.iter().map(|r| format!("replicated job {r}")))
            .filter_map(|whose| f.marks.at(&format!("{whose} currentInPlaceRestartAttempt = 1")))
            .min();
        phases::Seen {
            failure: wall(failed),
            decided: f.marks.at(&decided(&scope)).map(wall),
            stopped: (case.in_place() && !main).then(|| f.marks.at(ANNOUNCED)).flatten().map(wall),
            barrier_lifted: lifted.map(wall),
            running: wall(done),
            running_what: DONE.into(),
            note: main.then_some(
                "main-container mode: the workers are the agents' children, which no pod status shows: the record's runningAt is every pod Ready at attempt 1, the bench's end every worker started after it",
            ),
        }
    };
    phases::print_record(client.clone(), &name, 1, RECORD_WAIT, &seen).await;
    tracking.abort();
    Ok(ScopedFigures {
        case,
        mode,
        startup,
        restart,
        outcome,
        requests: requests_after - requests_failed,
        by_verb: verbs_after.iter().zip(&verbs_failed).map(|((v, a), (_, b))| (*v, a - b)).collect(),
        rejected,
        cpu: cpu_used,
        rss_mb: rss_mb(),
    })
}

/// One scoped case on a fresh cluster of `nodes` simulated nodes (`mode`: where the agent runs;
/// ignored by `Recreate`, whose pods have none).
pub(in crate::bench) async fn run(
    case: Case,
    topo: Topology,
    mode: Mode,
    nodes: usize,
    limits: Limits,
    fail_after: Duration,
) -> anyhow::Result<ScopedFigures> {
    let server = super::super::server_with(Box::new(jobset_apiserver::persist::Memory), limits)?;
    let cluster = LocalCluster::start(server.clone(), LocalConfig::with_nodes(nodes)).await;
    let js = jobset(case, topo, &pod_spec(case, mode), fail_after)?;
    let mode = case.in_place().then_some(mode);
    println!(
        "{}: {} drivers + {} workers ({} Jobs × 1 + {} Jobs × {}) simulated, {}",
        case.label(),
        topo.drivers(),
        topo.workers(),
        topo.jobs,
        topo.jobs,
        topo.workers_per_job,
        mode.map_or("plain pods".to_string(), |m| format!("each with the agent ({})", m.label()))
    );
    let simulation = (mode == Some(Mode::MainContainer)).then_some(&cluster.simulation);
    let figures = measure(&server, js, (case, mode), topo, simulation, Duration::from_secs(300)).await;
    cluster.shutdown().await;
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_splits_pods_into_one_driver_and_the_rest_workers_per_job_index() {
        // (pods, pods per Job, want jobs, want workers per Job, drivers, workers)
        let cases = [
            (5_000, 100, 50, 99, 50, 4_950),
            (1_000, 100, 10, 99, 10, 990),
            (50, 100, 1, 49, 1, 49),
            (250, 10, 25, 9, 25, 225),
        ];
        for (pods, ppj, jobs, wpj, drivers, workers) in cases {
            let t = Topology::new(pods, ppj).unwrap();
            assert_eq!(t, Topology { jobs, workers_per_job: wpj }, "{pods}/{ppj}");
            assert_eq!((t.drivers(), t.workers(), t.total()), (drivers, workers, drivers + workers), "{pods}/{ppj}");
        }
    }

    #[test]
    fn topology_without_room_for_a_worker_is_an_error_naming_the_flags() {
        for (pods, ppj) in [(1, 100), (100, 1), (5, 0)] {
            let err = Topology::new(pods, ppj).unwrap_err().to_string();
            assert!(err.contains("--pods") && err.contains("--pods-per-job"), "{pods}/{ppj}: {err}");
        }
    }

    fn spec_of(js: &DynamicObject) -> &Value {
        &js.data["spec"]
    }

    #[test]
    fn jobset_has_a_driver_and_a_failing_workers_replicated_job_and_each_case_its_policy() {
        let topo = Topology { jobs: 50, workers_per_job: 99 };
        let rule =
            |name: &str| json!([{"name": name, "action": "RestartReplicatedJob", "targetReplicatedJobs": ["workers"]}]);
        // (case, want failure policy, want backoffLimit)
        let cases = [
            (
                Case::Scoped,
                json!({"maxRestarts": 5, "restartStrategy": "InPlaceRestart", "rules": rule("workers_in_place")}),
                json!(i32::MAX),
            ),
            (Case::Whole, json!({"maxRestarts": 5, "restartStrategy": "InPlaceRestart"}), json!(i32::MAX)),
            (
                Case::Recreate,
                json!({"maxRestarts": 5, "restartStrategy": "Recreate", "rules": rule("workers_recreate")}),
                json!(0),
            ),
        ];
        for (case, policy, backoff) in cases {
            let js = jobset(case, topo, &pod_spec(case, Mode::MainContainer), Duration::from_secs(3)).unwrap();
            let spec = spec_of(&js);
            assert_eq!(spec["failurePolicy"], policy, "{case:?}");
            let rjobs = spec["replicatedJobs"].as_array().unwrap();
            let shape: Vec<(&str, i64, i64, i64)> = rjobs
                .iter()
                .map(|r| {
                    let job = &r["template"]["spec"];
                    let n = |k: &str| job[k].as_i64().unwrap();
                    (r["name"].as_str().unwrap(), r["replicas"].as_i64().unwrap(), n("parallelism"), n("completions"))
                })
                .collect();
            assert_eq!(shape, [("driver", 50, 1, 1), ("workers", 50, 99, 99)], "{case:?}");
            for r in rjobs {
                assert_eq!(r["template"]["spec"]["backoffLimit"], backoff, "{case:?}");
            }
            // Only the workers fail: pod 0 of Job 0, once, after 3 s.
            let annotations = |i: usize| &rjobs[i]["template"]["spec"]["template"]["metadata"]["annotations"];
            assert_eq!(annotations(0), &json!({"sim.jobset.x-k8s.io/duration": "forever"}), "{case:?}");
            let w = annotations(1);
            let fail: Vec<&str> = ["fail-job-indexes", "fail-indexes", "fail-attempts", "fail-duration"]
                .iter()
                .map(|k| w[format!("sim.jobset.x-k8s.io/{k}")].as_str().unwrap())
                .collect();
            assert_eq!(fail, ["0", "0", "1", "3000ms"], "{case:?}");
        }
    }

    #[test]
    fn in_place_pods_run_the_agent_with_its_scope_from_the_labels_and_recreated_ones_do_not() {
        let names = |env: &Value| -> Vec<String> {
            env.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
        };
        let main = pod_spec(Case::Scoped, Mode::MainContainer);
        let env = names(&main["containers"][0]["env"]);
        assert!(env.iter().any(|n| n == "WORKER_COMMAND"), "{env:?}");
        let side = pod_spec(Case::Whole, Mode::Sidecar);
        let agent_env = names(&side["initContainers"][0]["env"]);
        for env in [&env, &agent_env] {
            assert!(
                env.ends_with(&["AGENT_REPLICATED_JOB_NAME".to_string(), "AGENT_JOB_INDEX".to_string()]),
                "{env:?}"
            );
        }
        assert_eq!(
            side["initContainers"][0]["env"][3]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['jobset.sigs.k8s.io/job-index']"
        );
        let recreate = pod_spec(Case::Recreate, Mode::Sidecar);
        assert!(recreate.get("initContainers").is_none());
        assert_eq!(recreate["containers"].as_array().unwrap().len(), 1);
        assert_eq!(recreate["containers"][0]["name"], WORKER);
    }

    #[test]
    fn restarted_replicated_jobs_follow_the_scope_the_status_deprecated_or_restarted() {
        let all = Topology { jobs: 2, workers_per_job: 3 }.sizes();
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let cases = [
            ("no decision yet", json!({"currentInPlaceRestartAttempt": 0, "restarts": 0}), set(&[])),
            ("JobSet attempt deprecated", json!({"previousInPlaceRestartAttempt": 0}), set(&["driver", "workers"])),
            ("JobSet restarted", json!({"restarts": 1}), set(&["driver", "workers"])),
            (
                "workers' attempt deprecated",
                json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
                    {"name": "driver", "ready": 2}, {"name": "workers", "previousInPlaceRestartAttempt": 0}]}),
                set(&["workers"]),
            ),
            (
                "workers recreated",
                json!({"replicatedJobsStatus": [{"name": "driver", "restarts": 0}, {"name": "workers", "restarts": 1}]}),
                set(&["workers"]),
            ),
            (
                "an unknown replicated job is ignored",
                json!({"replicatedJobsStatus": [{"name": "other", "restarts": 1}]}),
                set(&[]),
            ),
            ("a null previous attempt is none", json!({"previousInPlaceRestartAttempt": null}), set(&[])),
        ];
        for (case, status, want) in cases {
            assert_eq!(restarted_replicated_jobs(&status, &all), want, "{case}");
        }
    }

    #[test]
    fn status_marks_name_each_scope_and_skip_zero_restarts() {
        let status = json!({
            "currentInPlaceRestartAttempt": 0, "restarts": 0,
            "replicatedJobsStatus": [
                {"name": "driver", "restarts": 0},
                {"name": "workers", "previousInPlaceRestartAttempt": 0, "currentInPlaceRestartAttempt": 1, "restarts": 2}
            ]
        });
        assert_eq!(
            status_marks(&status),
            [
                "JobSet currentInPlaceRestartAttempt = 0",
                "replicated job workers currentInPlaceRestartAttempt = 1",
                "replicated job workers previousInPlaceRestartAttempt = 0",
                "replicated job workers restarts = 2",
            ]
        );
    }

    #[test]
    fn ratio_prints_two_decimals_and_a_dash_for_a_zero_divisor() {
        let ms = Duration::from_millis;
        assert_eq!(ratio(ms(450), ms(500)), "0.90×");
        assert_eq!(ratio(ms(5_600), ms(480)), "11.67×");
        assert_eq!(ratio(ms(1), Duration::ZERO), "-");
    }

    #[test]
    fn tally_counts_restarted_pods_and_drivers_that_kept_running() {
        let t = |s: &str| vec![Some(s.to_string())];
        let before = BTreeMap::from([
            ("d0".to_string(), t("10:00")),
            ("d1".to_string(), t("10:00")),
            ("d2".to_string(), t("10:00")),
            ("w0".to_string(), t("10:00")),
            ("w1".to_string(), t("10:00")),
        ]);
        let p = |uid: &str, rjob: &str, started: &str, runs: u32| Final {
            uid: uid.into(),
            rjob: rjob.into(),
            started: t(started),
            worker_runs: runs,
        };
        let after = [
            p("d0", DRIVER, "10:00", 1),  // kept
            p("d1", DRIVER, "10:05", 1),  // its containers restarted
            p("d2", DRIVER, "10:00", 2),  // its worker ran again (main-container mode)
            p("w0", WORKERS, "10:00", 2), // restarted in place
            p("w9", WORKERS, "10:06", 1), // recreated
        ];
        let o = tally(&before, &after);
        assert_eq!(
            o,
            Outcome {
                pods: 5,
                kept_pods: 4,
                restarted: BTreeMap::from([(DRIVER.to_string(), 1), (WORKERS.to_string(), 2)]),
                drivers: 3,
                drivers_kept: 1,
            }
        );
        assert_eq!(o.restarted_total(), 3);
    }
}
