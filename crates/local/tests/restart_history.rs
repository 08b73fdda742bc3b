//! The restart record (`status.restartHistory`) and the restart metrics end to end on simulated
//! nodes (issue 22): every restart, whatever its strategy and scope, is recorded once, with its
//! trigger and phase times that agree with the Jobs' and pods' own history, survives a controller
//! restart in the middle of it, is bounded by the controller's limit, and is counted at `/metrics`.
//!
//! Every wait goes through a watch with a timeout; each test records every version of its JobSet,
//! Jobs and pods from before the JobSet is created, and orders versions across objects by their
//! resourceVersion (one global, monotonic counter in the embedded server; a DELETED event carries
//! the deletion's resourceVersion).
//!
//! Times: the record's phase ends are `MicroTime`s, the pods' and Jobs' own times are `Time`s,
//! which Kubernetes truncates to the second. A `Time` is therefore at most the true instant, and
//! the checks compare `Time ≤ MicroTime` for "this happened before the record says", and compare
//! to the second where the record copies a `Time` (`failedAt`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use jobset_api::jobset::keys::*;
use jobset_api::jobset::{JobSet, RestartRecord, RestartScope, RestartStrategy};
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

mod common;
use common::*;

async fn cluster(config: LocalConfig) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), config).await
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

fn annotations(sim: &[(&str, &str)]) -> Value {
    let mut a = json!({});
    for (k, v) in sim {
        a[format!("{SIM}{k}")] = json!(v);
    }
    a
}

/// A replicated job of one-pod Indexed Jobs (`backoffLimit: 0`, so the first failed pod fails its
/// Job) whose pods carry these simulation annotations.
fn rjob(name: &str, replicas: i32, sim: &[(&str, &str)]) -> Value {
    json!({
        "name": name, "replicas": replicas,
        "template": {"spec": {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations(sim)},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
            }
        }}
    })
}

/// A driver Job running until stopped.
fn driver() -> Value {
    rjob("driver", 1, &[("duration", "forever")])
}

/// `workers`: two Jobs; the first `fail_attempts` runs of `workers-1`'s pod exit 3 after 300 ms,
/// every other run lasts `duration`.
fn failing_workers(fail_attempts: u32, duration: &str) -> Value {
    let n = fail_attempts.to_string();
    rjob(
        "workers",
        2,
        &[
            ("duration", duration),
            ("fail-job-indexes", "1"),
            ("fail-attempts", &n),
            ("fail-duration", "300ms"),
            ("exit-code", "3"),
        ],
    )
}

fn rule(name: &str, action: &str) -> Value {
    json!({"name": name, "action": action})
}

// ---------------------------------------------------------------------------------------------
// Reading objects.
// ---------------------------------------------------------------------------------------------

fn records(js: &JobSet) -> Vec<RestartRecord> {
    status(js).restart_history
}

fn rv_of(o: &impl Resource) -> u64 {
    o.meta().resource_version.as_deref().and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

fn ts(t: &MicroTime) -> Timestamp {
    t.0
}

/// `t` truncated to the second, as Kubernetes keeps a `Time`.
fn to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap()
}

fn label<'a>(o: &'a impl Resource, key: &str) -> Option<&'a str> {
    o.meta().labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(o: &'a impl Resource, key: &str) -> Option<&'a str> {
    o.meta().annotations.as_ref()?.get(key).map(String::as_str)
}

/// The uid of the Job that controls the pod.
fn owner_uid(p: &Pod) -> Option<&str> {
    p.metadata.owner_references.as_ref()?.iter().find(|o| o.kind == "Job").map(|o| o.uid.as_str())
}

/// When the container's current run started (running, or terminated since).
fn started_at(c: &ContainerStatus) -> Option<Timestamp> {
    let s = c.state.as_ref()?;
    let running = s.running.as_ref().and_then(|r| r.started_at.as_ref());
    running.or_else(|| s.terminated.as_ref()?.started_at.as_ref()).map(|t| t.0)
}

/// `finishedAt` of a run of the container that exited with `exit_code` (its current or last state).
fn failed_run_finished_at(c: &ContainerStatus, exit_code: i32) -> Option<Timestamp> {
    [c.state.as_ref(), c.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| t.exit_code == exit_code)
        .and_then(|t| t.finished_at.as_ref())
        .map(|t| t.0)
}

/// Since when the pod is Ready, if it is.
fn ready_since(p: &Pod) -> Option<Timestamp> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    c.last_transition_time.as_ref().map(|t| t.0)
}

/// The JobsReady test of the JobSet controller: every pod of the Job ready or succeeded.
fn job_ready_or_done(j: &Job) -> bool {
    let s = j.status.as_ref();
    let have = s.and_then(|s| s.ready).unwrap_or(0) + s.and_then(|s| s.succeeded).unwrap_or(0);
    have >= j.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1)
}

/// When the Job failed: its `FailureTarget` condition (the JobSet controller acts on it, and a
/// restart may delete the Job before `Failed` is set), else its `Failed` one.
fn failed_condition_time(j: &Job) -> Option<Timestamp> {
    let conds = j.status.as_ref()?.conditions.as_ref()?;
    let on = |t: &str| conds.iter().find(|c| c.type_ == t && c.status == "True");
    let c = on("FailureTarget").or_else(|| on("Failed"))?;
    c.last_transition_time.as_ref().map(|t| t.0)
}

// ---------------------------------------------------------------------------------------------
// Recording a run.
// ---------------------------------------------------------------------------------------------

/// Every version of one JobSet, its Jobs and its pods.
struct Recorded {
    name: String,
    sets: History<JobSet>,
    jobs: History<Job>,
    pods: History<Pod>,
}

impl Recorded {
    /// Starts recording, then creates the JobSet.
    async fn create(c: &LocalCluster, js: JobSet) -> Recorded {
        let name = js.name().to_string();
        let sets = record(Api::<JobSet>::default_namespaced(c.client()), by_name(&name)).await;
        let jobs = record(Api::<Job>::default_namespaced(c.client()), of_jobset(&name)).await;
        let pods = record(Api::<Pod>::default_namespaced(c.client()), of_jobset(&name)).await;
        Api::<JobSet>::default_namespaced(c.client()).create(&PostParams::default(), &js).await.unwrap();
        Recorded { name, sets, jobs, pods }
    }

    /// Waits until the JobSet satisfies `pred`, then until every recorder has seen the cluster as
    /// it was at that moment or later.
    async fn until(&self, c: &LocalCluster, what: &str, pred: impl Fn(&JobSet) -> bool) -> JobSet {
        let js = wait_jobset(&Api::default_namespaced(c.client()), &self.name, what, pred).await;
        self.sets.caught_up(&js).await;
        let selector = ListParams::default().labels(&format!("{JOBSET_NAME}={}", self.name));
        let jobs = Api::<Job>::default_namespaced(c.client()).list(&selector).await.unwrap();
        if let Some(j) = jobs.items.iter().max_by_key(|j| rv_of(*j)) {
            self.jobs.caught_up(j).await;
        }
        let pods = Api::<Pod>::default_namespaced(c.client()).list(&selector).await.unwrap();
        if let Some(p) = pods.items.iter().max_by_key(|p| rv_of(*p)) {
            self.pods.caught_up(p).await;
        }
        js
    }

    /// Waits until the `i`-th restart record (oldest first) has `runningAt`.
    async fn until_running(&self, c: &LocalCluster, i: usize) -> JobSet {
        self.until(c, &format!("restart record {i} running"), |js| {
            records(js).get(i).is_some_and(|r| r.running_at.is_some())
        })
        .await
    }

    /// resourceVersion of the first JobSet version satisfying `pred`.
    fn first_rv(&self, pred: impl Fn(&JobSet) -> bool) -> Option<u64> {
        self.sets.versions().iter().find(|v| pred(v)).map(rv_of)
    }
}

/// resourceVersion of the deletion of the object with this uid, if the recorder saw it.
fn deleted_rv<K: Obj>(h: &History<K>, uid: &str) -> Option<u64> {
    h.snapshot().iter().find(|s| s.deleted && uid_of(&s.obj) == uid).map(|s| rv_of(&s.obj))
}

/// The records in `js` of `rec`'s restart (same attempt, scope and target).
fn same_restart(js: &JobSet, rec: &RestartRecord) -> Vec<RestartRecord> {
    records(js)
        .into_iter()
        .filter(|r| r.attempt == rec.attempt && r.scope == rec.scope && r.target == rec.target)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Checking a record.
// ---------------------------------------------------------------------------------------------

/// Every phase of a finished restart stamped once and in order, and `duration` = runningAt −
/// failedAt.
fn assert_phases(rec: &RestartRecord, in_place: bool) {
    let failed = ts(rec.failed_at.as_ref().unwrap_or_else(|| panic!("failedAt: {rec:#?}")));
    let decided = ts(&rec.decided_at);
    let stopped = ts(rec.stopped_at.as_ref().unwrap_or_else(|| panic!("stoppedAt: {rec:#?}")));
    let running = ts(rec.running_at.as_ref().unwrap_or_else(|| panic!("runningAt: {rec:#?}")));
    assert!(failed <= decided, "failedAt ≤ decidedAt: {rec:#?}");
    assert!(decided <= stopped, "decidedAt ≤ stoppedAt: {rec:#?}");
    assert!(stopped <= running, "stoppedAt ≤ runningAt: {rec:#?}");
    if in_place {
        let lifted = ts(rec.barrier_lifted_at.as_ref().unwrap_or_else(|| panic!("barrierLiftedAt: {rec:#?}")));
        assert!(stopped <= lifted && lifted <= running, "stoppedAt ≤ barrierLiftedAt ≤ runningAt: {rec:#?}");
    } else {
        assert_eq!(rec.barrier_lifted_at, None, "no barrier outside in-place restarts: {rec:#?}");
    }
    assert!(!rec.superseded, "a finished restart is not superseded: {rec:#?}");
    let text = rec.duration.as_deref().unwrap_or_else(|| panic!("duration: {rec:#?}"));
    let duration: SignedDuration = text.parse().unwrap_or_else(|e| panic!("duration {text:?} is no Go duration: {e}"));
    let want = running.duration_since(failed);
    // The record's times are microseconds; allow the duration string a millisecond of rounding.
    assert!(
        (duration - want).abs() <= SignedDuration::from_millis(1),
        "duration {text} vs runningAt − failedAt = {want:?}: {rec:#?}"
    );
}

/// Checks the `i`-th record (oldest first) of a failure-policy restart (Recreate or
/// BlockingRecreate) against the recorded objects. `scope` lists the Jobs the restart recreated
/// (each must have had exactly two incarnations), `decided` tells a JobSet version that carries
/// the restart's decision (its restart counter bumped). Returns the record.
fn check_recreate(r: &Recorded, i: usize, scope: &[String], decided: impl Fn(&JobSet) -> bool) -> RestartRecord {
    let versions = r.sets.versions();
    let last = versions.last().expect("a JobSet version");
    let rec = records(last).get(i).cloned().unwrap_or_else(|| panic!("record {i}: {:#?}", last.status));
    assert_phases(&rec, false);

    // Decided in the very status write that bumped the restart counter, and never again.
    let first = versions.iter().position(|v| !same_restart(v, &rec).is_empty()).expect("a version with the record");
    assert!(decided(&versions[first]), "the record came with the counter: {:#?}", versions[first].status);
    assert!(
        first > 0 && !decided(&versions[first - 1]),
        "the counter came with the record: {:#?}",
        versions[first - 1].status
    );
    let at_decision = &same_restart(&versions[first], &rec)[0];
    assert_eq!((&at_decision.stopped_at, &at_decision.running_at), (&None, &None), "{at_decision:#?}");
    for v in &versions[first..] {
        let same = same_restart(v, &rec);
        assert_eq!(same.len(), 1, "the restart recorded once in every version: {:#?}", v.status);
        assert_eq!((&same[0].decided_at, &same[0].trigger), (&rec.decided_at, &rec.trigger), "decided once");
    }

    // The Jobs of the old and of the new attempt.
    let uids = r.jobs.uids();
    let (mut old, mut new) = (BTreeSet::new(), BTreeSet::new());
    for j in scope {
        let u = uids.get(j).unwrap_or_else(|| panic!("Job {j} never seen: {uids:#?}"));
        assert_eq!(u.len(), 2, "{j}: one Job per attempt: {uids:#?}");
        old.insert(u[0].clone());
        new.insert(u[1].clone());
    }
    let recreated: BTreeSet<&String> = uids.iter().filter(|(_, u)| u.len() > 1).map(|(n, _)| n).collect();
    assert_eq!(recreated, scope.iter().collect(), "only the Jobs of the scope were recreated");

    // Trigger: the failed Job (of the old attempt) and its failed pod's container.
    let t = &rec.trigger;
    let failed_job = t.job.clone().unwrap_or_else(|| panic!("trigger.job: {rec:#?}"));
    let failed_uid = uids.get(&failed_job).map(|u| u[0].clone()).unwrap_or_else(|| panic!("{failed_job} never seen"));
    let jobs = r.jobs.versions();
    let job_failed_at = jobs
        .iter()
        .filter(|j| uid_of(*j) == failed_uid)
        .find_map(failed_condition_time)
        .unwrap_or_else(|| panic!("{failed_job} never had a FailureTarget or Failed condition"));
    let pod_name = t.pod.clone().unwrap_or_else(|| panic!("trigger.pod: {rec:#?}"));
    let container_name = t.container.clone().unwrap_or_else(|| panic!("trigger.container: {rec:#?}"));
    let exit_code = t.exit_code.unwrap_or_else(|| panic!("trigger.exitCode: {rec:#?}"));
    let pods = r.pods.versions();
    let finished_at = pods
        .iter()
        .filter(|p| name_of(*p) == pod_name && owner_uid(p) == Some(failed_uid.as_str()))
        .filter_map(|p| container(p, &container_name))
        .find_map(|c| failed_run_finished_at(c, exit_code))
        .unwrap_or_else(|| panic!("pod {pod_name} of {failed_job} never showed {container_name} exiting {exit_code}"));
    // failedAt is the container's finishedAt, which Kubernetes keeps to the second.
    assert_eq!(to_second(ts(rec.failed_at.as_ref().unwrap())), finished_at, "failedAt vs the pod's finishedAt");
    // The decision follows the Job's Failed condition (a `Time`: truncated, so ≤ the instant).
    assert!(
        job_failed_at <= ts(&rec.decided_at),
        "decidedAt {:?} before the Job failed at {job_failed_at}",
        rec.decided_at
    );

    // stoppedAt: first stamped once every Job of the old attempt, and every pod of theirs, was gone.
    let stamped = |pick: fn(&RestartRecord) -> bool| {
        r.first_rv(|v| same_restart(v, &rec).iter().any(pick)).expect("a version with the phase stamped")
    };
    let stopped_rv = stamped(|x| x.stopped_at.is_some());
    for uid in &old {
        let deleted = deleted_rv(&r.jobs, uid).unwrap_or_else(|| panic!("old Job {uid} never deleted"));
        assert!(deleted < stopped_rv, "stoppedAt (rv {stopped_rv}) before old Job {uid} was gone (rv {deleted})");
    }
    let old_pods: BTreeSet<String> =
        pods.iter().filter(|p| owner_uid(p).is_some_and(|u| old.contains(u))).map(uid_of).collect();
    assert!(!old_pods.is_empty(), "the old attempt had pods");
    for uid in &old_pods {
        let deleted = deleted_rv(&r.pods, uid).unwrap_or_else(|| panic!("old pod {uid} never deleted"));
        assert!(deleted < stopped_rv, "stoppedAt (rv {stopped_rv}) before old pod {uid} was gone (rv {deleted})");
    }

    // runningAt: first stamped once every new Job was ready (or done), after its pods started.
    let running_rv = stamped(|x| x.running_at.is_some());
    let running = ts(rec.running_at.as_ref().unwrap());
    for uid in &new {
        let ready = jobs.iter().find(|j| &uid_of(*j) == uid && job_ready_or_done(j)).map(rv_of);
        let ready = ready.unwrap_or_else(|| panic!("new Job {uid} never ready"));
        assert!(ready < running_rv, "runningAt (rv {running_rv}) before new Job {uid} was ready (rv {ready})");
        let its_pods: Vec<&Pod> =
            pods.iter().filter(|p| owner_uid(p) == Some(uid.as_str()) && rv_of(*p) < running_rv).collect();
        // (The fixtures' pods have one container, `main`.)
        let started: Vec<Timestamp> =
            its_pods.iter().filter_map(|p| container(p, "main")).filter_map(started_at).collect();
        assert!(!started.is_empty(), "new Job {uid}: a pod started before runningAt (rv {running_rv})");
        // Pod times are truncated to the second, so each is at most the true instant.
        for s in started {
            assert!(s <= running, "runningAt {running} before a new pod's container started at {s}");
        }
        for since in its_pods.iter().filter_map(|p| ready_since(p)) {
            assert!(since <= running, "runningAt {running} before a new pod was Ready at {since}");
        }
    }
    rec
}

// ---------------------------------------------------------------------------------------------
// Metrics.
// ---------------------------------------------------------------------------------------------

async fn get_metrics(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.expect("GET /metrics")
}

/// One sample of the OpenMetrics text: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = vec![];
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = line.rfind('}').unwrap_or_else(|| panic!("unclosed labels: {line}"));
                (&line[..open], &line[open + 1..close], &line[close + 1..])
            }
            None => {
                let sp = line.find(' ').unwrap_or_else(|| panic!("no value: {line}"));
                (&line[..sp], "", &line[sp..])
            }
        };
        let mut map = BTreeMap::new();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("bad label {pair:?} in {line}"));
            map.insert(k.trim_start_matches(',').to_string(), v.trim_end_matches('"').to_string());
        }
        let value = rest.split_whitespace().next().unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line}"));
        out.push(Sample { name: name.to_string(), labels: map, value });
    }
    out
}

/// The value of the sample with exactly these labels.
fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    samples.iter().find(|s| s.name == name && s.labels == want).map(|s| s.value)
}

/// Scrapes `/metrics` until `pred` holds (the controller observes after its status write
/// succeeded, so a scrape may briefly lag the JobSet watch), at most 10 s.
async fn scrape_until(client: &kube::Client, what: &str, pred: impl Fn(&[Sample]) -> bool) -> (String, Vec<Sample>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = get_metrics(client).await;
        let samples = parse_metrics(&text);
        if pred(&samples) {
            return (text, samples);
        }
        assert!(tokio::time::Instant::now() < deadline, "metrics never showed {what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const HISTOGRAM: &str = "jobset_restart_duration_seconds";

fn phase_labels<'a>(strategy: &'a str, scope: &'a str, phase: &'a str) -> [(&'a str, &'a str); 3] {
    [("strategy", strategy), ("scope", scope), ("phase", phase)]
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_restart_is_recorded_once_with_its_trigger_and_phases_as_the_pods_saw_them() {
    let c = cluster(LocalConfig::fast(4)).await;
    let name = "rec";
    let js = jobset(
        name,
        "Recreate",
        3,
        vec![rule("restartAll", "RestartJobSet")],
        vec![driver(), failing_workers(1, "forever")],
    );
    let r = Recorded::create(&c, js).await;
    let js = r.until_running(&c, 0).await;

    let history = records(&js);
    assert_eq!(history.len(), 1, "exactly one record: {history:#?}");
    assert_eq!(status(&js).restarts, 1);
    let rec = &history[0];
    assert_eq!(
        (rec.attempt, rec.strategy, rec.scope, rec.target.as_deref()),
        (1, RestartStrategy::Recreate, RestartScope::JobSet, None)
    );
    let t = &rec.trigger;
    let failed_job = format!("{name}-workers-1");
    assert_eq!(t.job.as_deref(), Some(failed_job.as_str()));
    assert!(t.pod.as_deref().is_some_and(|p| p.starts_with(&format!("{failed_job}-0-"))), "the failed pod: {t:#?}");
    assert_eq!((t.container.as_deref(), t.exit_code), (Some("main"), Some(3)));
    assert_eq!(t.reason, "BackoffLimitExceeded");
    assert_eq!(
        (t.rule.as_deref(), t.action.as_str(), t.counts_towards_max),
        (Some("restartAll"), "RestartJobSet", true)
    );

    let every_job: Vec<String> = ["driver-0", "workers-0", "workers-1"].iter().map(|j| format!("{name}-{j}")).collect();
    check_recreate(&r, 0, &every_job, |v| status(v).restarts >= 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_policy_action_records_its_scope_target_and_budget() {
    let c = cluster(LocalConfig::fast(4)).await;
    // (name, action, scope, counts towards maxRestarts, the Jobs it recreates, what the decision bumps)
    type Decided = fn(&JobSet) -> bool;
    let job_restarted: Decided = |v| rj_status(v, "workers").job_restarts.get(1).is_some_and(|&n| n >= 1);
    let rj_restarted: Decided = |v| rj_status(v, "workers").restarts >= 1;
    let js_restarted: Decided = |v| status(v).restarts >= 1;
    let (job, rj, every): (&[&str], &[&str], &[&str]) =
        (&["workers-1"], &["workers-0", "workers-1"], &["driver-0", "workers-0", "workers-1"]);
    type Case<'a> = (&'a str, &'a str, RestartScope, bool, &'a [&'a str], Decided);
    let cases: [Case; 5] = [
        ("sc-job", "RestartJob", RestartScope::Job, true, job, job_restarted),
        ("sc-jobfree", "RestartJobAndIgnoreMaxRestarts", RestartScope::Job, false, job, job_restarted),
        ("sc-rj", "RestartReplicatedJob", RestartScope::ReplicatedJob, true, rj, rj_restarted),
        ("sc-rjfree", "RestartReplicatedJobAndIgnoreMaxRestarts", RestartScope::ReplicatedJob, false, rj, rj_restarted),
        ("sc-jsfree", "RestartJobSetAndIgnoreMaxRestarts", RestartScope::JobSet, false, every, js_restarted),
    ];
    let mut runs = vec![];
    for (name, action, ..) in &cases {
        let js =
            jobset(name, "Recreate", 3, vec![rule("theRule", action)], vec![driver(), failing_workers(1, "forever")]);
        runs.push(Recorded::create(&c, js).await);
    }
    for ((name, action, scope, counts, jobs, decided), r) in cases.iter().zip(&runs) {
        let js = r.until_running(&c, 0).await;
        let history = records(&js);
        assert_eq!(history.len(), 1, "{name}: exactly one record: {history:#?}");
        let rec = &history[0];
        // The target: the Job for scope Job, the replicated job for scope ReplicatedJob.
        let target = match scope {
            RestartScope::Job => Some(format!("{name}-workers-1")),
            RestartScope::ReplicatedJob => Some("workers".to_string()),
            RestartScope::JobSet => None,
        };
        assert_eq!(
            (rec.strategy, rec.scope, &rec.target, rec.attempt),
            (RestartStrategy::Recreate, *scope, &target, 1),
            "{name}: {rec:#?}"
        );
        let t = &rec.trigger;
        assert_eq!(t.job, Some(format!("{name}-workers-1")), "{name}");
        assert_eq!(
            (t.rule.as_deref(), t.action.as_str(), t.counts_towards_max),
            (Some("theRule"), *action, *counts),
            "{name}: {t:#?}"
        );
        assert_eq!(
            (t.container.as_deref(), t.exit_code, t.reason.as_str()),
            (Some("main"), Some(3), "BackoffLimitExceeded"),
            "{name}"
        );
        let scope_jobs: Vec<String> = jobs.iter().map(|j| format!("{name}-{j}")).collect();
        check_recreate(r, 0, &scope_jobs, decided);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_recreate_restart_is_stopped_only_once_no_old_pod_is_left() {
    let c = cluster(LocalConfig::fast(4)).await;
    let name = "blk";
    // The failer fails once after 100 ms; the sleepers take 1 s to die when killed.
    let js = jobset(
        name,
        "BlockingRecreate",
        1,
        vec![],
        vec![
            rjob("failer", 1, &[("duration", "100ms"), ("fail-attempts", "1")]),
            rjob("sleeper", 2, &[("duration", "forever"), ("termination-delay", "1s")]),
        ],
    );
    let r = Recorded::create(&c, js).await;
    let js = r.until_running(&c, 0).await;
    let history = records(&js);
    assert_eq!(history.len(), 1, "{history:#?}");
    let rec = &history[0];
    assert_eq!((rec.strategy, rec.scope, rec.attempt), (RestartStrategy::BlockingRecreate, RestartScope::JobSet, 1));
    let t = &rec.trigger;
    assert_eq!(t.job, Some(format!("{name}-failer-0")));
    assert_eq!(
        (t.exit_code, t.reason.as_str(), t.rule.as_deref(), t.action.as_str()),
        (Some(1), "BackoffLimitExceeded", None, "RestartJobSet")
    );
    let every_job: Vec<String> = ["failer-0", "sleeper-0", "sleeper-1"].iter().map(|j| format!("{name}-{j}")).collect();
    let rec = check_recreate(&r, 0, &every_job, |v| status(v).restarts >= 1);

    // The old sleepers took 1 s to die after they were deleted, which the decision preceded.
    let stop = ts(rec.stopped_at.as_ref().unwrap()).duration_since(ts(&rec.decided_at));
    assert!(
        stop >= SignedDuration::from_secs(1),
        "the stop phase lasted {stop:?}, shorter than the sleepers' 1 s to die"
    );
    // No pod of the new attempt was created before the old attempt stopped (to the second).
    let stopped = to_second(ts(rec.stopped_at.as_ref().unwrap()));
    for p in r.pods.versions().iter().filter(|p| label(*p, RESTART_ATTEMPT) == Some("1")) {
        let created = p.metadata.creation_timestamp.as_ref().expect("creationTimestamp").0;
        assert!(stopped <= created, "pod {} created at {created}, before stoppedAt {stopped}", name_of(p));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_restart_is_recorded_with_its_barrier() {
    let c = cluster(LocalConfig::fast(4)).await;
    let name = "inpl";
    // Pod 1 of `b`'s Job fails its worker once, 300 ms after the barrier first lifted.
    let b = agent_rjob(
        "b",
        &[("fail-job-indexes", "0"), ("fail-indexes", "1"), ("fail-duration", "300ms"), ("fail-attempts", "1")],
    );
    let js = jobset(name, "InPlaceRestart", 3, vec![], vec![agent_rjob("a", &[]), b]);
    let r = Recorded::create(&c, js).await;
    let js = r.until_running(&c, 0).await;

    let history = records(&js);
    assert_eq!(history.len(), 1, "{history:#?}");
    let rec = &history[0];
    assert_phases(rec, true);
    assert_eq!(
        (rec.strategy, rec.scope, rec.target.as_deref(), rec.attempt),
        (RestartStrategy::InPlaceRestart, RestartScope::JobSet, None, 1)
    );
    let t = &rec.trigger;
    let failed_job = format!("{name}-b-0");
    assert_eq!(t.job.as_deref(), Some(failed_job.as_str()));
    assert_eq!((t.container.as_deref(), t.exit_code), (Some("worker"), Some(1)), "{rec:#?}");
    assert_eq!((t.rule.as_deref(), t.action.as_str(), t.counts_towards_max), (None, "RestartJobSet", true));
    assert_eq!(status(&js).restarts, 0, "an in-place restart is not a JobSet restart");

    let pods = r.pods.versions();
    let pod_name = t.pod.clone().expect("trigger.pod");
    let failer = pods.iter().find(|p| name_of(*p) == pod_name).unwrap_or_else(|| panic!("no pod {pod_name}"));
    assert_eq!(label(failer, "batch.kubernetes.io/job-name"), Some(failed_job.as_str()));
    assert_eq!(annotation(failer, "batch.kubernetes.io/job-completion-index"), Some("1"), "the failing pod");
    let finished_at = pods
        .iter()
        .filter(|p| name_of(*p) == pod_name)
        .filter_map(|p| container(p, "worker"))
        .find_map(|c| failed_run_finished_at(c, 1))
        .expect("the worker's failed run");
    assert_eq!(to_second(ts(rec.failed_at.as_ref().unwrap())), finished_at, "failedAt vs the worker's finishedAt");

    // decidedAt in the write that deprecated attempt 0, barrierLiftedAt in the one that moved the
    // current attempt to 1.
    let versions = r.sets.versions();
    let with_record = versions.iter().position(|v| !records(v).is_empty()).unwrap();
    assert_eq!(
        status(&versions[with_record]).previous_in_place_restart_attempt,
        Some(0),
        "{:#?}",
        versions[with_record].status
    );
    assert_eq!(
        status(&versions[with_record - 1]).previous_in_place_restart_attempt,
        None,
        "{:#?}",
        versions[with_record - 1].status
    );
    let lifted =
        versions.iter().position(|v| records(v).first().is_some_and(|x| x.barrier_lifted_at.is_some())).unwrap();
    assert_eq!(status(&versions[lifted]).current_in_place_restart_attempt, Some(1), "{:#?}", versions[lifted].status);
    assert_eq!(
        status(&versions[lifted - 1]).current_in_place_restart_attempt,
        Some(0),
        "{:#?}",
        versions[lifted - 1].status
    );

    // stoppedAt: every pod had moved to attempt 1. runningAt: every pod at attempt 1 Ready.
    let stopped_rv = r.first_rv(|v| records(v).first().is_some_and(|x| x.stopped_at.is_some())).unwrap();
    let running_rv = r.first_rv(|v| records(v).first().is_some_and(|x| x.running_at.is_some())).unwrap();
    let running = ts(rec.running_at.as_ref().unwrap());
    let names: BTreeSet<String> = pods.iter().map(name_of).collect();
    assert_eq!(names.len(), 4, "no pod recreated: {names:?}");
    for pod in &names {
        let moved = pods.iter().find(|p| &name_of(*p) == pod && annotation(*p, IN_PLACE_RESTART_ATTEMPT) == Some("1"));
        let moved = moved.map(rv_of).unwrap_or_else(|| panic!("{pod} never at attempt 1"));
        assert!(moved < stopped_rv, "stoppedAt (rv {stopped_rv}) before {pod} reached attempt 1 (rv {moved})");
        let ready = pods.iter().find(|p| {
            &name_of(*p) == pod && annotation(*p, IN_PLACE_RESTART_ATTEMPT) == Some("1") && ready_since(p).is_some()
        });
        let ready = ready.unwrap_or_else(|| panic!("{pod} never Ready at attempt 1"));
        assert!(rv_of(ready) < running_rv, "runningAt (rv {running_rv}) before {pod} was Ready at attempt 1");
        let since = ready_since(ready).unwrap();
        assert!(since <= running, "runningAt {running} before {pod} was Ready at {since}");
    }
    // A worker of the current attempt failed: that is the reason, whether the controller saw the
    // failed container first or the agent's move to the next attempt it caused.
    assert_eq!(rec.trigger.reason, "WorkerFailed", "{rec:#?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_failure_under_in_place_restart_is_recorded_as_recreate() {
    let c = cluster(LocalConfig::fast(4)).await;
    let name = "inplfp";
    // No agents: the Jobs' pod failure policy fails `w-1` once (exit 3), and the JobSet's default
    // failure policy restarts it by recreating its Jobs.
    let mut w = rjob(
        "w",
        2,
        &[
            ("duration", "forever"),
            ("fail-job-indexes", "1"),
            ("fail-attempts", "1"),
            ("fail-duration", "300ms"),
            ("exit-code", "3"),
        ],
    );
    w["template"]["spec"]["backoffLimit"] = json!(i32::MAX);
    w["template"]["spec"]["podReplacementPolicy"] = json!("Failed");
    w["template"]["spec"]["podFailurePolicy"] =
        json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]});
    let r = Recorded::create(&c, jobset(name, "InPlaceRestart", 3, vec![], vec![w])).await;
    let js = r.until_running(&c, 0).await;
    let history = records(&js);
    assert_eq!(history.len(), 1, "{history:#?}");
    let rec = &history[0];
    assert_eq!(
        (rec.strategy, rec.scope, rec.attempt),
        (RestartStrategy::Recreate, RestartScope::JobSet, 1),
        "{rec:#?}"
    );
    let t = &rec.trigger;
    assert_eq!(t.job, Some(format!("{name}-w-1")));
    assert_eq!(
        (t.exit_code, t.reason.as_str(), t.rule.as_deref(), t.action.as_str()),
        (Some(3), "PodFailurePolicy", None, "RestartJobSet")
    );
    let every_job = vec![format!("{name}-w-0"), format!("{name}-w-1")];
    check_recreate(&r, 0, &every_job, |v| status(v).restarts >= 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_restart_records_the_restart_once() {
    let mut c = cluster(LocalConfig::fast(4)).await;
    let name = "crash";
    // The new attempt runs 3 s and completes; the old driver takes 500 ms to die, so the restart
    // has a stop phase to be killed in.
    let slow_driver = rjob("driver", 1, &[("duration", "3s"), ("termination-delay", "500ms")]);
    let js = jobset(name, "Recreate", 3, vec![], vec![slow_driver, failing_workers(1, "3s")]);
    let r = Recorded::create(&c, js).await;

    // Killed right after the decision was written, and again once the old attempt stopped.
    r.sets.until("the restart decided", |log| log.iter().any(|s| !records(&s.obj).is_empty())).await;
    c.restart_jobset_controller();
    let first = r.sets.versions().into_iter().find(|v| !records(v).is_empty()).unwrap();
    let decided = records(&first)[0].clone();
    assert_eq!((&decided.stopped_at, &decided.running_at), (&None, &None), "killed mid-restart: {decided:#?}");
    r.sets
        .until("the old attempt stopped", |log| {
            log.iter().any(|s| records(&s.obj).first().is_some_and(|x| x.stopped_at.is_some()))
        })
        .await;
    c.restart_jobset_controller();

    let done = r.until(&c, "Completed or Failed", JobSet::finished).await;
    assert!(done.condition_true(COND_COMPLETED), "{:#?}", done.status);
    assert_eq!(status(&done).restarts, 1, "the kills did not count the restart again");
    assert!(
        r.sets.versions().iter().all(|v| status(v).restarts <= 1 && records(v).len() <= 1),
        "never counted or recorded twice"
    );
    let history = records(&done);
    assert_eq!(history.len(), 1, "{history:#?}");
    let rec = &history[0];
    assert_eq!(
        (rec.attempt, &rec.decided_at, &rec.trigger),
        (decided.attempt, &decided.decided_at, &decided.trigger),
        "the decision kept"
    );
    let every_job: Vec<String> = ["driver-0", "workers-0", "workers-1"].iter().map(|j| format!("{name}-{j}")).collect();
    check_recreate(&r, 0, &every_job, |v| status(v).restarts >= 1);

    // At /metrics, once the completion is counted (observed after every restart phase): the
    // restart and each of its phases counted at most once. A kill right after a status write may
    // lose that write's observations, which live in memory (a crashed process loses them all);
    // the kills must never count them twice.
    let client = c.client();
    let completed = [("jobset_name", name), ("namespace", "default")];
    let (text, samples) =
        scrape_until(&client, "the completion", |s| sample(s, "jobset_completed_total", &completed).is_some()).await;
    let restarts = [
        ("jobset_name", name),
        ("namespace", "default"),
        ("action", "RestartJobSet"),
        ("reason", "BackoffLimitExceeded"),
    ];
    let n = sample(&samples, "jobset_restarts_total", &restarts).unwrap_or(0.0);
    assert!(n <= 1.0, "the restart counted {n} times:\n{text}");
    for phase in ["detect", "stop", "start", "total"] {
        let n =
            sample(&samples, &format!("{HISTOGRAM}_count"), &phase_labels("Recreate", "JobSet", phase)).unwrap_or(0.0);
        assert!(n <= 1.0, "phase {phase} observed {n} times:\n{text}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_keeps_only_the_newest_records_up_to_the_limit() {
    let mut config = LocalConfig::fast(4);
    config.jobset.restart_history_limit = 2;
    let c = cluster(config).await;
    let name = "bound";
    // `workers-1` fails its first three runs: three JobSet restarts.
    let js = jobset(name, "Recreate", 5, vec![], vec![driver(), failing_workers(3, "forever")]);
    let r = Recorded::create(&c, js).await;
    let js = r
        .until(&c, "restart 3 running", |js| {
            status(js).restarts == 3 && records(js).last().is_some_and(|x| x.attempt == 3 && x.running_at.is_some())
        })
        .await;
    let history = records(&js);
    assert_eq!(
        history.iter().map(|x| x.attempt).collect::<Vec<_>>(),
        [2, 3],
        "the newest two, oldest first: {history:#?}"
    );
    let versions = r.sets.versions();
    assert!(versions.iter().all(|v| records(v).len() <= 2), "never more than the limit");
    // The kept records are those written when their restarts were decided, not rebuilt.
    for kept in &history {
        let first = versions.iter().find_map(|v| records(v).into_iter().find(|x| x.attempt == kept.attempt)).unwrap();
        assert_eq!((&first.decided_at, &first.trigger), (&kept.decided_at, &kept.trigger), "attempt {}", kept.attempt);
    }
    assert!(
        versions.iter().any(|v| records(v).iter().any(|x| x.attempt == 1)),
        "attempt 1 was recorded before it was dropped"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_is_counted_and_its_phases_observed_at_metrics() {
    let c = cluster(LocalConfig::fast(4)).await;
    let name = "met";
    let js = jobset(name, "Recreate", 3, vec![], vec![driver(), failing_workers(1, "forever")]);
    let r = Recorded::create(&c, js).await;
    let js = r.until_running(&c, 0).await;
    let rec = records(&js)[0].clone();
    assert_phases(&rec, false);
    let client = c.client();
    let restarts = [
        ("jobset_name", name),
        ("namespace", "default"),
        ("action", "RestartJobSet"),
        ("reason", "BackoffLimitExceeded"),
    ];
    let count = format!("{HISTOGRAM}_count");
    let (text, samples) = scrape_until(&client, "the restart and its total", |s| {
        sample(s, "jobset_restarts_total", &restarts).is_some()
            && sample(s, &count, &phase_labels("Recreate", "JobSet", "total")).is_some()
    })
    .await;
    assert!(text.contains(&format!("# TYPE {HISTOGRAM} histogram")), "{text}");
    assert_eq!(sample(&samples, "jobset_restarts_total", &restarts), Some(1.0), "{text}");

    // Each phase observed once, with the record's own duration (time-to-detect is phase detect).
    let (failed, decided) = (ts(rec.failed_at.as_ref().unwrap()), ts(&rec.decided_at));
    let (stopped, running) = (ts(rec.stopped_at.as_ref().unwrap()), ts(rec.running_at.as_ref().unwrap()));
    let phases = [
        ("detect", decided.duration_since(failed)),
        ("stop", stopped.duration_since(decided)),
        ("start", running.duration_since(stopped)),
        ("total", running.duration_since(failed)),
    ];
    for (phase, want) in phases {
        let labels = phase_labels("Recreate", "JobSet", phase);
        assert_eq!(sample(&samples, &count, &labels), Some(1.0), "phase {phase} observed once:\n{text}");
        let sum =
            sample(&samples, &format!("{HISTOGRAM}_sum"), &labels).unwrap_or_else(|| panic!("{phase} sum:\n{text}"));
        assert!((sum - want.as_secs_f64()).abs() <= 0.001, "phase {phase}: observed {sum} s, the record says {want:?}");
    }
    let barrier = sample(&samples, &count, &phase_labels("Recreate", "JobSet", "barrier")).unwrap_or(0.0);
    assert_eq!(barrier, 0.0, "no barrier phase outside in-place restarts:\n{text}");

    // Buckets from 0.1 s to 30 min.
    let bounds: Vec<f64> = samples
        .iter()
        .filter(|s| {
            s.name == format!("{HISTOGRAM}_bucket") && s.labels.get("phase").map(String::as_str) == Some("total")
        })
        .filter_map(|s| s.labels.get("le")?.parse::<f64>().ok())
        .filter(|b| b.is_finite())
        .collect();
    let (lo, hi) = bounds.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    assert_eq!((lo, hi), (0.1, 1800.0), "bucket bounds {bounds:?}:\n{text}");
    c.shutdown().await;
}
