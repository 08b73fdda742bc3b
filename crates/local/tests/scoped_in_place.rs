//! Scoped in-place restart (issue 23) end to end on simulated nodes: a failure-policy rule whose
//! action is `RestartReplicatedJob` or `RestartJob` (no Job failure reason or message) restarts in
//! place only the pods of its replicated job or Job, while the other pods keep running untouched.
//! Every pod runs the real in-place restart agent as a sidecar (the simulated runtime runs
//! `jobset_agent::run` for the agent image, configured from the container's env, downward API
//! included) whose startup probe is its barrier; the workers are simulated (their failures come
//! from the pods' simulation annotations). The real-process run of the shipped example is in
//! crates/cli/tests/scoped_in_place.rs.
//!
//! Every wait goes through a watch with a timeout; each test records every version of its JobSet
//! and pods from before the JobSet is created, and orders versions across objects by their
//! resourceVersion (one global, monotonic counter in the embedded server).

use std::collections::{BTreeMap, BTreeSet};

use jobset_api::jobset::keys::*;
use jobset_api::jobset::{JobInPlaceRestartStatus, JobSet, RestartRecord, RestartScope, RestartStrategy};
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

mod common;
use common::*;

async fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(nodes)).await
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// `replicas` Jobs of `parallelism` pods, each with the agent sidecar (told its scope by
/// `AGENT_REPLICATED_JOB_NAME` and `AGENT_JOB_INDEX` from the pod's labels, as the shipped examples do) and a
/// simulated worker running until stopped unless `sim` says otherwise.
fn scoped_rjob(name: &str, replicas: i32, parallelism: i32, sim: &[(&str, &str)]) -> Value {
    let mut rj = agent_rjob(name, sim);
    rj["replicas"] = json!(replicas);
    let spec = &mut rj["template"]["spec"];
    spec["parallelism"] = json!(parallelism);
    spec["completions"] = json!(parallelism);
    let env = spec["template"]["spec"]["initContainers"][0]["env"].as_array_mut().unwrap();
    for (var, label) in [("AGENT_REPLICATED_JOB_NAME", REPLICATED_JOB_NAME), ("AGENT_JOB_INDEX", JOB_INDEX)] {
        env.push(json!({"name": var, "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{label}']")}}}));
    }
    rj
}

/// The driver: one Job of one pod.
fn driver(sim: &[(&str, &str)]) -> Value {
    scoped_rjob("driver", 1, 1, sim)
}

/// The workers: two Jobs of two pods.
fn workers(sim: &[(&str, &str)]) -> Value {
    scoped_rjob("workers", 2, 2, sim)
}

/// The worker of pod 0 of Job 1 fails (exit 1) 300 ms after it starts, `attempts` times (`None`:
/// every time).
fn worker_1_0_fails(attempts: Option<&str>) -> Vec<(&str, &str)> {
    let mut sim = vec![("fail-job-indexes", "1"), ("fail-indexes", "0"), ("fail-duration", "300ms")];
    if let Some(n) = attempts {
        sim.push(("fail-attempts", n));
    }
    sim
}

fn rule(name: &str, action: &str, targets: &[&str]) -> Value {
    json!({"name": name, "action": action, "targetReplicatedJobs": targets})
}

/// An InPlaceRestart JobSet with everything the webhook would default set explicitly.
fn jobset(name: &str, max_restarts: i32, rules: Vec<Value>, rjobs: Vec<Value>) -> JobSet {
    common::jobset(name, "InPlaceRestart", max_restarts, rules, rjobs)
}

// ---------------------------------------------------------------------------------------------
// Reading objects.
// ---------------------------------------------------------------------------------------------

/// The rjob's scoped `(currentInPlaceRestartAttempt, previousInPlaceRestartAttempt)`.
fn rj_attempts(js: &JobSet, rj: &str) -> (Option<i32>, Option<i32>) {
    let s = rj_status(js, rj);
    (s.current_in_place_restart_attempt, s.previous_in_place_restart_attempt)
}

fn job_entry(js: &JobSet, rj: &str, index: i32) -> Option<JobInPlaceRestartStatus> {
    rj_status(js, rj).in_place_restart_jobs.into_iter().find(|j| j.job_index == index)
}

fn rv_of(o: &impl Resource) -> u64 {
    o.meta().resource_version.as_deref().and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn attempt(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(IN_PLACE_RESTART_ATTEMPT).map(String::as_str)
}

fn rjob_of(p: &Pod) -> &str {
    label(p, REPLICATED_JOB_NAME).unwrap_or_default()
}

fn job_index_of(p: &Pod) -> &str {
    label(p, JOB_INDEX).unwrap_or_default()
}

/// The pod's completion index in its Indexed Job.
fn completion_index(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get("batch.kubernetes.io/job-completion-index").map(String::as_str)
}

/// The pod is at `attempt` with its worker running after `restarts` restarts of each container.
fn at(p: &Pod, attempt_: &str, restarts: i32) -> bool {
    attempt(p) == Some(attempt_)
        && running(p, "worker")
        && restart_count(p, "worker") == Some(restarts)
        && restart_count(p, "agent") == Some(restarts)
}

fn records(js: &JobSet) -> Vec<RestartRecord> {
    status(js).restart_history
}

// ---------------------------------------------------------------------------------------------
// Recording a run.
// ---------------------------------------------------------------------------------------------

/// Every version of one JobSet and its pods.
struct Recorded {
    name: String,
    jobsets: Api<JobSet>,
    pods_api: Api<Pod>,
    sets: History<JobSet>,
    pods: History<Pod>,
}

impl Recorded {
    /// Starts recording, then creates the JobSet.
    async fn create(c: &LocalCluster, js: JobSet) -> Recorded {
        let name = js.name().to_string();
        let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
        let pods_api: Api<Pod> = Api::default_namespaced(c.client());
        let sets = record(jobsets.clone(), by_name(&name)).await;
        let pods = record(pods_api.clone(), of_jobset(&name)).await;
        jobsets.create(&PostParams::default(), &js).await.unwrap();
        Recorded { name, jobsets, pods_api, sets, pods }
    }

    /// Waits until the JobSet's pods satisfy `pred`, then until the JobSet satisfies `js_pred`;
    /// then until both recorders have seen the cluster as it was at that moment or later.
    async fn until(&self, what: &str, pred: impl Fn(&[Pod]) -> bool, js_pred: impl Fn(&JobSet) -> bool) -> JobSet {
        wait_for(&self.pods_api, of_jobset(&self.name), what, pred).await;
        let js = wait_jobset(&self.jobsets, &self.name, what, js_pred).await;
        self.caught_up(&js).await;
        js
    }

    async fn caught_up(&self, js: &JobSet) {
        self.sets.caught_up(js).await;
        let selector = ListParams::default().labels(&format!("{JOBSET_NAME}={}", self.name));
        let pods = self.pods_api.list(&selector).await.unwrap();
        if let Some(p) = pods.items.iter().max_by_key(|p| rv_of(*p)) {
            self.pods.caught_up(p).await;
        }
    }

    /// Every recorded version of the pods of `rjob`.
    fn pods_of(&self, rjob: &str) -> Vec<Pod> {
        self.pods.versions().into_iter().filter(|p| rjob_of(p) == rjob).collect()
    }

    /// The JobSet's in-place `(current, previous)` pairs, repeats dropped.
    fn jobset_attempts(&self) -> Vec<(Option<i32>, Option<i32>)> {
        in_place_history(&self.sets.versions())
    }
}

/// Pod name → every (uid, node) it had in the recorded versions where it is bound.
fn identities(history: &[Pod]) -> BTreeMap<String, BTreeSet<(String, String)>> {
    let mut out: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for p in history {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            out.entry(name_of(p)).or_default().insert((uid_of(p), node));
        }
    }
    out
}

/// Every pod kept its uid and node through the whole run: nothing was recreated or rescheduled.
fn assert_same_pods(r: &Recorded, n: usize) {
    let ids = identities(&r.pods.versions());
    assert_eq!(ids.len(), n, "{n} pods, never replaced: {ids:#?}");
    assert!(ids.values().all(|ids| ids.len() == 1), "every pod keeps its uid and node: {ids:#?}");
}

/// The pods in `history` (versions of untouched pods) never restarted anything and never left
/// attempt 0: each container started once (one `startedAt`), `restartCount` 0, the agent's
/// startup probe (its barrier) never failed again once passed, the attempt annotation only "0".
fn assert_untouched(history: &[Pod], what: &str) {
    assert!(!history.is_empty(), "{what}: no pod recorded");
    let mut starts: BTreeMap<(String, &str), BTreeSet<String>> = BTreeMap::new();
    let mut barrier_passed: BTreeSet<String> = BTreeSet::new();
    for p in history {
        let name = name_of(p);
        assert!(matches!(attempt(p), None | Some("0")), "{what}: {name} left attempt 0: {:?}", p.metadata.annotations);
        for c in ["agent", "worker"] {
            let Some(s) = container(p, c) else { continue };
            assert_eq!(s.restart_count, 0, "{what}: {name}'s {c} restarted: {s:#?}");
            let terminated = s.state.as_ref().and_then(|st| st.terminated.as_ref());
            assert!(terminated.is_none(), "{what}: {name}'s {c} stopped: {s:#?}");
            if let Some(at) = s.state.as_ref().and_then(|st| st.running.as_ref()).and_then(|r| r.started_at.as_ref()) {
                starts.entry((name.clone(), c)).or_default().insert(format!("{:?}", at.0));
            }
        }
        match container(p, "agent").and_then(|a| a.started) {
            Some(true) => {
                barrier_passed.insert(name);
            }
            _ if barrier_passed.contains(&name) => panic!("{what}: {name}'s barrier went back up: {:#?}", p.status),
            _ => {}
        }
    }
    for ((pod, c), at) in &starts {
        assert_eq!(at.len(), 1, "{what}: {pod}'s {c} started more than once: {at:?}");
    }
}

/// The record of the newest restart, once it is running again (`runningAt` stamped).
async fn newest_record_running(r: &Recorded, n: usize) -> RestartRecord {
    let js = wait_jobset(&r.jobsets, &r.name, &format!("{n} restart records, the last running"), |js| {
        let recs = records(js);
        recs.len() == n && recs.last().is_some_and(|x| x.running_at.is_some())
    })
    .await;
    records(&js).pop().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_worker_restarts_only_the_workers_in_place() {
    let c = cluster(3).await;
    let name = "scoped";
    let rules = vec![rule("RestartWorkersInPlace", "RestartReplicatedJob", &["workers"])];
    let js = jobset(name, 3, rules, vec![driver(&[]), workers(&worker_1_0_fails(Some("1")))]);
    let r = Recorded::create(&c, js).await;

    let is_worker = |p: &Pod| rjob_of(p) == "workers";
    let js = r
        .until(
            "the 4 workers restarted once in place to attempt 1, the driver running at attempt 0",
            |pods| {
                pods.len() == 5
                    && pods.iter().filter(|p| is_worker(p)).all(|p| at(p, "1", 1))
                    && pods.iter().filter(|p| !is_worker(p)).all(|p| at(p, "0", 0))
            },
            |js| rj_attempts(js, "workers").0 == Some(1),
        )
        .await;

    assert_same_pods(&r, 5);
    assert_untouched(&r.pods_of("driver"), "the driver");
    assert_eq!(rj_attempts(&js, "workers"), (Some(1), Some(0)), "{:#?}", js.status);
    let w = rj_status(&js, "workers");
    assert_eq!((w.in_place_restarts, w.in_place_restarts_count_towards_max), (1, 1), "{w:#?}");
    assert_eq!(rj_attempts(&js, "driver"), (None, None), "the driver never restarted alone: {:#?}", js.status);
    // The JobSet-wide attempts never moved past the first sync: no pod but the workers' was told
    // to restart.
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None)]);
    let s = status(&js);
    assert_eq!((s.restarts, s.restarts_count_towards_max, s.in_place_restarts), (0, 0, 0), "{s:#?}");
    assert_eq!((w.restarts, w.job_restarts.iter().sum::<i32>()), (0, 0), "in place, no Job was recreated: {w:#?}");
    assert!(js.condition(COND_FAILED).is_none(), "{:#?}", js.status);

    // One restart recorded: the workers, in place, by the rule.
    let rec = newest_record_running(&r, 1).await;
    assert_eq!(
        (rec.strategy, rec.scope, rec.target.as_deref(), rec.attempt),
        (RestartStrategy::InPlaceRestart, RestartScope::ReplicatedJob, Some("workers"), 1),
        "{rec:#?}"
    );
    let t = &rec.trigger;
    assert_eq!(
        (t.rule.as_deref(), t.action.as_str(), t.counts_towards_max),
        (Some("RestartWorkersInPlace"), "RestartReplicatedJob", true),
        "{rec:#?}"
    );
    // Which the controller sees first, the node agent's failed container or the restarted
    // agent's next attempt, is a race (as on a real cluster): WorkerFailed or
    // PodRestartedInPlace, the failed worker's pod named either way.
    assert!(["WorkerFailed", "PodRestartedInPlace"].contains(&t.reason.as_str()), "{rec:#?}");
    assert_eq!(t.job.as_deref(), Some(format!("{name}-workers-1").as_str()), "{rec:#?}");
    // The event of the rule's Recreate form.
    let events: Api<Event> = Api::default_namespaced(c.client());
    let is_it = |e: &Event| e.reason.as_deref() == Some(REASON_RESTART_REPLICATED_JOB_ACTION);
    let seen = wait_for(
        &events,
        watcher::Config::default().fields(&format!("involvedObject.name={name}")),
        "the event",
        |v| v.iter().any(is_it),
    )
    .await;
    let want = format!("applying RestartReplicatedJob failure policy action (first failed job: {name}-workers-1)");
    assert_eq!(seen.into_iter().find(is_it).unwrap().message.as_deref(), Some(want.as_str()));
    // Still nothing happened to the driver while the workers got back to running.
    let js = r.jobsets.get(name).await.unwrap();
    r.caught_up(&js).await;
    assert_untouched(&r.pods_of("driver"), "the driver");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_failing_beyond_max_restarts_fail_the_jobset() {
    let c = cluster(3).await;
    let name = "budget";
    let rules = vec![rule("RestartWorkersInPlace", "RestartReplicatedJob", &["workers"])];
    // maxRestarts 2: the workers restart in place twice, the third failure fails the JobSet.
    let js = jobset(name, 2, rules, vec![driver(&[]), workers(&worker_1_0_fails(None))]);
    let r = Recorded::create(&c, js).await;

    let done = wait_jobset(&r.jobsets, name, "Completed or Failed", JobSet::finished).await;
    r.caught_up(&done).await;
    let failed = done.condition(COND_FAILED).unwrap_or_else(|| panic!("a Failed condition: {:#?}", done.status));
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("True", REASON_REACHED_MAX_RESTARTS), "{failed:#?}");
    assert!(failed.message.starts_with(MSG_REACHED_MAX_RESTARTS), "{failed:#?}");
    let s = status(&done);
    assert_eq!(s.terminal_state, COND_FAILED);
    assert_eq!((s.restarts, s.restarts_count_towards_max, s.in_place_restarts), (0, 0, 0), "{s:#?}");
    let w = rj_status(&done, "workers");
    assert_eq!((w.in_place_restarts, w.in_place_restarts_count_towards_max), (2, 2), "two restarts spent: {w:#?}");
    // The workers went through attempts 0, 1 and 2, where the worker failed a third time (its pod,
    // restarted in place by its own restartPolicyRules, may have announced 3 before the JobSet
    // failed; no other pod was told to restart again); the driver never restarted.
    let failing = |p: &Pod| job_index_of(p) == "1" && completion_index(p) == Some("0");
    let attempts =
        |pods: Vec<Pod>| -> BTreeSet<String> { pods.iter().filter_map(|p| attempt(p).map(str::to_string)).collect() };
    let (failer, others): (Vec<Pod>, Vec<Pod>) = r.pods_of("workers").into_iter().partition(|p| failing(p));
    assert_eq!(attempts(others), ["0", "1", "2"].map(String::from).into(), "the other workers' attempts");
    let failer = attempts(failer);
    assert!(failer.is_superset(&["0", "1", "2"].map(String::from).into()) && failer.len() <= 4, "{failer:?}");
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None)], "no JobSet-wide restart");
    let driver_before_failure: Vec<Pod> =
        r.pods_of("driver").into_iter().filter(|p| rv_of(p) <= rv_of(&done)).collect();
    assert_untouched(&driver_before_failure, "the driver");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_job_in_place_restarts_only_that_jobs_pods() {
    let c = cluster(3).await;
    let name = "perjob";
    let rules = vec![rule("RestartFailedJobInPlace", "RestartJob", &["workers"])];
    let js = jobset(name, 3, rules, vec![driver(&[]), workers(&worker_1_0_fails(Some("1")))]);
    let r = Recorded::create(&c, js).await;

    let in_job_1 = |p: &Pod| rjob_of(p) == "workers" && job_index_of(p) == "1";
    let js = r
        .until(
            "Job 1's 2 pods restarted once in place to attempt 1, the other 3 pods running at attempt 0",
            |pods| {
                pods.len() == 5
                    && pods.iter().filter(|p| in_job_1(p)).all(|p| at(p, "1", 1))
                    && pods.iter().filter(|p| !in_job_1(p)).all(|p| at(p, "0", 0))
            },
            |js| job_entry(js, "workers", 1).is_some_and(|j| j.current_in_place_restart_attempt == Some(1)),
        )
        .await;

    assert_same_pods(&r, 5);
    assert_untouched(&r.pods_of("driver"), "the driver");
    let job_0: Vec<Pod> = r.pods_of("workers").into_iter().filter(|p| job_index_of(p) == "0").collect();
    assert_untouched(&job_0, "Job 0 of the workers");
    let entry = job_entry(&js, "workers", 1).unwrap();
    assert_eq!(
        entry,
        JobInPlaceRestartStatus {
            job_index: 1,
            current_in_place_restart_attempt: Some(1),
            previous_in_place_restart_attempt: Some(0),
            restarts: 1,
            restarts_count_towards_max: 1,
        }
    );
    let w = rj_status(&js, "workers");
    assert_eq!(w.in_place_restart_jobs.len(), 1, "only Job 1 restarted: {w:#?}");
    assert_eq!(rj_attempts(&js, "workers"), (None, None), "the replicated job did not restart as a whole: {w:#?}");
    assert_eq!((w.in_place_restarts, w.restarts, w.job_restarts.iter().sum::<i32>()), (0, 0, 0), "{w:#?}");
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None)]);
    assert_eq!((status(&js).restarts, status(&js).in_place_restarts), (0, 0));

    let rec = newest_record_running(&r, 1).await;
    let job_1 = format!("{name}-workers-1");
    assert_eq!(
        (rec.strategy, rec.scope, rec.target.as_deref(), rec.attempt),
        (RestartStrategy::InPlaceRestart, RestartScope::Job, Some(job_1.as_str()), 1),
        "{rec:#?}"
    );
    assert_eq!(
        (rec.trigger.rule.as_deref(), rec.trigger.action.as_str()),
        (Some("RestartFailedJobInPlace"), "RestartJob"),
        "{rec:#?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_driver_still_restarts_every_pod_in_place() {
    let c = cluster(3).await;
    let name = "wide";
    let rules = vec![rule("RestartWorkersInPlace", "RestartReplicatedJob", &["workers"])];
    // The driver's worker fails once, 300 ms after it starts. No rule scopes `driver`: its failure
    // restarts the whole JobSet in place.
    let js = jobset(
        name,
        3,
        rules,
        vec![driver(&[("fail-attempts", "1"), ("fail-duration", "300ms"), ("exit-code", "1")]), workers(&[])],
    );
    let r = Recorded::create(&c, js).await;

    let js = r
        .until(
            "every pod restarted once in place to attempt 1",
            |pods| pods.len() == 5 && pods.iter().all(|p| at(p, "1", 1)),
            |js| in_place_attempts(js).0 == Some(1),
        )
        .await;
    assert_same_pods(&r, 5);
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None), (Some(0), Some(0)), (Some(1), Some(0))]);
    let s = status(&js);
    assert_eq!((s.restarts, s.in_place_restarts), (0, 1), "one JobSet-wide in-place restart: {s:#?}");
    let w = rj_status(&js, "workers");
    assert_eq!(w.in_place_restarts, 0, "not a restart of the workers alone: {w:#?}");
    let rec = newest_record_running(&r, 1).await;
    assert_eq!(
        (rec.strategy, rec.scope, rec.target.as_deref(), rec.attempt),
        (RestartStrategy::InPlaceRestart, RestartScope::JobSet, None, 1),
        "{rec:#?}"
    );
    assert_eq!(rec.trigger.job.as_deref(), Some(format!("{name}-driver-0").as_str()), "{rec:#?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_jobset_wide_attempt_the_workers_wait_for_the_driver() {
    let c = cluster(3).await;
    let name = "together";
    let rules = vec![rule("RestartWorkersInPlace", "RestartReplicatedJob", &["workers"])];
    // The driver's pod spends 1 s in an init container before its agent starts (at every start,
    // in-place restarts included), so the workers' agents are at attempt 0 first; the driver's
    // worker fails once. Whatever the workers' own scope, a JobSet-wide attempt lifts no barrier
    // before every pod of the JobSet is at it.
    let mut d = driver(&[
        ("fail-attempts", "1"),
        ("fail-duration", "300ms"),
        ("exit-code", "1"),
        ("duration-slow-start", "1s"),
    ]);
    let spec = &mut d["template"]["spec"]["template"]["spec"];
    spec["initContainers"].as_array_mut().unwrap().insert(0, json!({"name": "slow-start", "image": "busybox"}));
    let r = Recorded::create(&c, jobset(name, 3, rules, vec![d, workers(&[])])).await;

    // Once the driver has failed and every pod runs again at the JobSet's current attempt (the
    // waits do not presume which attempt that is, so a wrong one fails the checks below, not a
    // timeout).
    let driver_restarted = |p: &Pod| rjob_of(p) == "driver" && restart_count(p, "worker").is_some_and(|n| n >= 1);
    let js = r
        .until(
            "the driver restarted, every pod running",
            |pods| pods.len() == 5 && pods.iter().any(driver_restarted) && pods.iter().all(|p| running(p, "worker")),
            |js| in_place_attempts(js).0 >= Some(1),
        )
        .await;
    // The set-up holds at the first start: every worker announced attempt 0 before the driver.
    // (After the driver's failure its agent may come back first: when the controller misses the
    // failed container, which the kubelet may report already restarted, the workers only restart
    // once the driver's agent announces attempt 1.)
    let first_announce = |rj: &str| -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for p in r.pods_of(rj).iter().filter(|p| attempt(p) == Some("0")) {
            m.entry(name_of(p)).or_insert(rv_of(p));
        }
        m
    };
    let (workers, driver) = (first_announce("workers"), first_announce("driver"));
    assert!(
        workers.len() == 4 && workers.values().max() < driver.values().min(),
        "the driver was meant to announce attempt 0 last: workers {workers:?}, driver {driver:?}"
    );
    // At the first start and after the driver's failure, no worker ran at an attempt before the
    // JobSet's current attempt reached it.
    let versions = r.sets.versions();
    for a in [0, 1] {
        let synced =
            versions.iter().filter(|js| in_place_attempts(js).0 >= Some(a)).map(rv_of).min().unwrap_or(u64::MAX);
        let early: Vec<(String, u64)> = r
            .pods_of("workers")
            .iter()
            // (The run of attempt `a` is the worker's restart `a`: a version that shows the new
            // annotation may still show the previous run, before the kubelet reported the restart.)
            .filter(|p| {
                attempt(p) == Some(&a.to_string())
                    && running(p, "worker")
                    && restart_count(p, "worker") == Some(a)
                    && rv_of(*p) < synced
            })
            .map(|p| (name_of(p), rv_of(p)))
            .collect();
        assert!(
            early.is_empty(),
            "workers ran at attempt {a} before the whole JobSet was at it (rv {synced}): {early:?}; the JobSet went \
             through {:?}, the workers' scope through {:?}",
            r.jobset_attempts(),
            versions.iter().map(|v| rj_attempts(v, "workers")).collect::<BTreeSet<_>>()
        );
    }
    // One failure, one restart of every pod.
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None), (Some(0), Some(0)), (Some(1), Some(0))]);
    assert_eq!(status(&js).in_place_restarts, 1, "{:#?}", js.status);
    let pods = r.pods_api.list(&ListParams::default().labels(&format!("{JOBSET_NAME}={name}"))).await.unwrap().items;
    assert!(pods.iter().all(|p| at(p, "1", 1)), "every pod restarted once, to attempt 1: {pods:#?}");
    c.shutdown().await;
}

/// Every pod of the JobSet on a node of its own (required pod anti-affinity on the hostname).
fn one_pod_per_node(rj: &mut Value, jobset: &str) {
    rj["template"]["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {JOBSET_NAME: jobset}},
            "topologyKey": "kubernetes.io/hostname"
        }]
    }});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_node_replaces_its_pod_and_restarts_the_other_workers_in_place() {
    // 5 pods on 5 of the 6 nodes; the spare takes the replacement.
    let c = cluster(6).await;
    let name = "lostnode";
    let rules = vec![rule("RestartWorkersInPlace", "RestartReplicatedJob", &["workers"])];
    let (mut d, mut w) = (driver(&[]), workers(&[]));
    one_pod_per_node(&mut d, name);
    one_pod_per_node(&mut w, name);
    let r = Recorded::create(&c, jobset(name, 3, rules, vec![d, w])).await;
    r.until(
        "5 pods running at attempt 0",
        |p| p.len() == 5 && p.iter().all(|p| at(p, "0", 0)),
        |js| in_place_attempts(js).0 == Some(0),
    )
    .await;
    let pods = r.pods_api.list(&ListParams::default().labels(&format!("{JOBSET_NAME}={name}"))).await.unwrap().items;
    let lost =
        pods.iter().find(|p| job_index_of(p) == "1" && completion_index(p) == Some("0") && rjob_of(p) == "workers");
    let lost = lost.cloned().expect("pod 0 of Job 1 of the workers");
    let lost_node = lost.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    c.nodes.iter().find(|n| n.name() == lost_node).expect("the pod's node").fail();

    // The Job replaces the lost pod; its agent announces attempt 1, which restarts the other
    // workers in place; the driver runs on.
    let lost_uid = uid_of(&lost);
    let js = r
        .until(
            "the replacement at attempt 1, the other workers restarted once in place, the driver untouched",
            |pods| {
                pods.len() == 5
                    && pods.iter().all(|p| match rjob_of(p) {
                        "driver" => at(p, "0", 0),
                        _ if name_of(p) == name_of(&lost) => false,
                        _ if job_index_of(p) == "1" && completion_index(p) == Some("0") => {
                            uid_of(p) != lost_uid && at(p, "1", 0)
                        }
                        _ => at(p, "1", 1),
                    })
            },
            |js| rj_attempts(js, "workers").0 == Some(1),
        )
        .await;
    let ids = identities(&r.pods.versions());
    let survivors: Vec<_> = ids.iter().filter(|(n, _)| **n != name_of(&lost)).collect();
    assert_eq!(survivors.len(), 5, "4 pods kept, 1 replacement: {ids:#?}");
    assert!(survivors.iter().all(|(_, ids)| ids.len() == 1), "no other pod was recreated or moved: {ids:#?}");
    assert_untouched(&r.pods_of("driver"), "the driver");
    assert_eq!(rj_attempts(&js, "workers"), (Some(1), Some(0)), "{:#?}", js.status);
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None)], "no JobSet-wide restart");
    c.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The shipped example.
// ---------------------------------------------------------------------------------------------

/// examples/in-place-restart/driver-workers.yaml as the webhook would admit it, its containers
/// simulated: every container runs until stopped and `sim` applies to the workers' pods.
fn driver_workers_example(sim: &[(&str, &str)]) -> JobSet {
    let path = format!("{}/../../examples/in-place-restart/driver-workers.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut js: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    jobset_api::jobset::default_jobset(&mut js);
    for rj in js["spec"]["replicatedJobs"].as_array_mut().unwrap() {
        let mut annotations = json!({format!("{SIM}duration"): "forever"});
        if rj["name"] == "workers" {
            for (k, v) in sim {
                annotations[format!("{SIM}{k}")] = json!(v);
            }
        }
        rj["template"]["spec"]["template"]["metadata"]["annotations"] = annotations;
    }
    js["metadata"]["namespace"] = json!("default");
    serde_json::from_value(js).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_workers_example_restarts_only_its_workers_in_place() {
    let c = cluster(2).await;
    let js = driver_workers_example(&worker_1_0_fails(Some("1")));
    assert_eq!(js.name(), "driver-workers");
    let r = Recorded::create(&c, js).await;

    let js = r
        .until(
            "the 4 workers restarted once in place to attempt 1",
            |pods| {
                pods.len() == 5
                    && pods.iter().all(|p| if rjob_of(p) == "workers" { at(p, "1", 1) } else { at(p, "0", 0) })
            },
            |js| rj_attempts(js, "workers").0 == Some(1),
        )
        .await;
    assert_same_pods(&r, 5);
    assert_untouched(&r.pods_of("driver"), "the driver");
    assert_eq!(rj_attempts(&js, "workers"), (Some(1), Some(0)));
    assert_eq!(rj_status(&js, "workers").in_place_restarts, 1);
    assert_eq!(r.jobset_attempts(), [(None, None), (Some(0), None)]);
    c.shutdown().await;
}
