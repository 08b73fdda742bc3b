//! Scoped in-place restart (issue 23) with real processes: examples/in-place-restart/
//! driver-workers.yaml on `jobset up --runtime process`, which runs the agent image as `jobset
//! agent` in every pod (a sidecar whose startupProbe is the barrier) and the containers' shell
//! commands on this machine. A test fails a container as the example's header says (a file
//! `/tmp/exitN` in the pod, written here through the pod's sandbox on the host) and follows the
//! pods and the JobSet through watches. The simulated-node tests of the same behaviour, with
//! budgets and restart records in detail, are crates/local/tests/scoped_in_place.rs.
//!
//! Every `jobset up` numbers its pods' addresses from 127.1.0.1, and every agent listens on port
//! 8081 of its pod's address: two clusters at once would collide, so these tests run one at a time.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use common::tracker::Tracker;
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::{
    COND_FAILED, IN_PLACE_RESTART_ATTEMPT, JOB_INDEX, REASON_REACHED_MAX_RESTARTS, REPLICATED_JOB_NAME,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// How long any one state may take to be reached (generous: the machine is shared).
const WAIT: Duration = Duration::from_secs(60);
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/in-place-restart/driver-workers.yaml");
const NAME: &str = "driver-workers";

/// One cluster at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `jobset up --runtime process --nodes 2` with watches on its pods and JobSets.
struct Cluster {
    pods: Tracker<Pod>,
    jobsets: Tracker<JobSet>,
    api: Api<JobSet>,
    server: common::Server,
    dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn cluster() -> Cluster {
    let serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), 0, &["--runtime", "process", "--job-backoff", "10ms", "--nodes", "2"]).await;
    let client = server.client().await;
    let api: Api<JobSet> = Api::default_namespaced(client.clone());
    let pods = Tracker::new(Api::default_namespaced(client), "pods", WAIT).await;
    let jobsets = Tracker::new(api.clone(), "jobsets", WAIT).await;
    Cluster { pods, jobsets, api, server, dir, _serial: serial }
}

impl Cluster {
    /// `jobset apply -f examples/in-place-restart/driver-workers.yaml`.
    async fn apply_example(&self) {
        let child = common::jobset_command(&["apply", "-f", EXAMPLE])
            .env("KUBECONFIG", &self.server.kubeconfig)
            .spawn()
            .unwrap();
        let out = tokio::time::timeout(WAIT, child.wait_with_output()).await.expect("jobset apply finished").unwrap();
        assert!(out.status.success(), "jobset apply: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Creates the example's JobSet after `edit` (through the API, admission included).
    async fn create_edited_example(&self, edit: impl Fn(&mut Value)) {
        let text = std::fs::read_to_string(EXAMPLE).unwrap();
        let mut js: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{EXAMPLE}: {e}"));
        edit(&mut js);
        let js: JobSet = serde_json::from_value(js).unwrap();
        self.api.create(&PostParams::default(), &js).await.unwrap_or_else(|e| panic!("creating the JobSet: {e}"));
    }

    /// Makes the container `worker` of `pod` exit `code`, as the example's header says (the file
    /// `/tmp/exitN` in the pod, written here through its sandbox `<data dir>/runtime/pods/<uid>/tmp`).
    fn fail(&self, pod: &Pod, code: i32) {
        let tmp: PathBuf = self.dir.path().join("runtime/pods").join(pod.uid().unwrap()).join("tmp");
        assert!(tmp.is_dir(), "{} has no sandbox at {}", pod.name_any(), tmp.display());
        std::fs::write(tmp.join(format!("exit{code}")), b"").unwrap();
    }

    /// Waits until the 5 live pods satisfy `pred` (pods by name), and returns them.
    async fn pods_until(&self, what: &str, pred: impl Fn(&BTreeMap<String, Pod>) -> bool) -> BTreeMap<String, Pod> {
        self.pods
            .until(what, |s| {
                let live: BTreeMap<String, Pod> = s
                    .current
                    .iter()
                    .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
                    .map(|(n, p)| (n.clone(), p.clone()))
                    .collect();
                (live.len() == 5 && pred(&live)).then_some(live)
            })
            .await
    }

    async fn jobset_until(&self, what: &str, pred: impl Fn(&JobSet) -> bool) -> JobSet {
        self.jobsets.until(what, |s| s.current.get(NAME).filter(|js| pred(js)).cloned()).await
    }

    /// Every recorded version of the pods of replicated job `rjob`.
    fn versions_of(&self, rjob: &str) -> Vec<Pod> {
        let seen = self.pods.seen();
        seen.history.iter().map(|(_, p)| p).filter(|p| rjob_of(p) == rjob).cloned().collect()
    }
}

fn rjob_of(p: &Pod) -> &str {
    p.labels().get(REPLICATED_JOB_NAME).map_or("", String::as_str)
}

fn attempt(p: &Pod) -> Option<&str> {
    p.annotations().get(IN_PLACE_RESTART_ATTEMPT).map(String::as_str)
}

fn node(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

fn status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses.iter().chain(s.init_container_statuses.iter()).flatten().find(|c| c.name == name)
}

/// At `attempt_`, both containers running (the agent past its barrier) after `restarts` restarts.
fn at(p: &Pod, attempt_: &str, restarts: i32) -> bool {
    let runs = |c: &ContainerStatus| {
        c.restart_count == restarts && c.state.as_ref().is_some_and(|s| s.running.is_some()) && c.started != Some(false)
    };
    attempt(p) == Some(attempt_) && status(p, "agent").is_some_and(runs) && status(p, "worker").is_some_and(runs)
}

/// The replicated job's scoped `(currentInPlaceRestartAttempt, previousInPlaceRestartAttempt)`.
fn rj_attempts(js: &JobSet, rj: &str) -> (Option<i32>, Option<i32>) {
    let s = js.status.as_ref().and_then(|s| s.replicated_jobs_status.iter().find(|s| s.name == rj));
    (s.and_then(|s| s.current_in_place_restart_attempt), s.and_then(|s| s.previous_in_place_restart_attempt))
}

fn js_attempts(js: &JobSet) -> (Option<i32>, Option<i32>) {
    let s = js.status.as_ref();
    (s.and_then(|s| s.current_in_place_restart_attempt), s.and_then(|s| s.previous_in_place_restart_attempt))
}

/// The pods of `before` are the pods of `after`: same uids, same nodes.
fn assert_same_pods(before: &BTreeMap<String, Pod>, after: &BTreeMap<String, Pod>) {
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "pods were replaced");
    for (name, p) in after {
        let b = &before[name];
        assert_eq!((p.uid(), node(p)), (b.uid(), node(b)), "{name} was recreated or moved");
    }
}

/// No version of the driver's pod shows a restart or a second start of its containers, or its
/// barrier going back up, or an attempt other than 0.
fn assert_driver_untouched(versions: &[Pod]) {
    assert!(!versions.is_empty(), "the driver's pod was seen");
    let mut starts: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut passed = false;
    for p in versions {
        assert!(matches!(attempt(p), None | Some("0")), "the driver left attempt 0: {:?}", p.metadata.annotations);
        for c in ["agent", "worker"] {
            let Some(s) = status(p, c) else { continue };
            assert_eq!(s.restart_count, 0, "the driver's {c} restarted: {s:#?}");
            if let Some(t) = s.state.as_ref().and_then(|st| st.running.as_ref()).and_then(|r| r.started_at.as_ref()) {
                starts.entry(c).or_default().insert(format!("{:?}", t.0));
            }
        }
        match status(p, "agent").and_then(|a| a.started) {
            Some(true) => passed = true,
            _ if passed => panic!("the driver's barrier went back up: {:#?}", p.status),
            _ => {}
        }
    }
    for (c, at) in &starts {
        assert_eq!(at.len(), 1, "the driver's {c} started more than once: {at:?}");
    }
}

/// A worker pod of Job 1 of `workers`.
fn a_worker_of_job_1(pods: &BTreeMap<String, Pod>) -> Pod {
    let w = pods.values().find(|p| rjob_of(p) == "workers" && p.labels().get(JOB_INDEX).is_some_and(|i| i == "1"));
    w.cloned().expect("a pod of Job 1 of workers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_workers_example_restarts_only_the_workers_in_place() {
    let c = cluster().await;
    c.apply_example().await;
    let before = c.pods_until("5 pods running at attempt 0", |p| p.values().all(|p| at(p, "0", 0))).await;
    c.fail(&a_worker_of_job_1(&before), 1);

    let after = c
        .pods_until("the 4 workers restarted once in place to attempt 1, the driver untouched", |p| {
            p.values().all(|p| if rjob_of(p) == "workers" { at(p, "1", 1) } else { at(p, "0", 0) })
        })
        .await;
    let js = c.jobset_until("workers at current attempt 1", |js| rj_attempts(js, "workers").0 == Some(1)).await;
    assert_same_pods(&before, &after);
    assert_driver_untouched(&c.versions_of("driver"));
    assert_eq!(rj_attempts(&js, "workers"), (Some(1), Some(0)), "{:#?}", js.status);
    let s = js.status.clone().unwrap_or_default();
    assert_eq!(js_attempts(&js), (Some(0), None), "the JobSet-wide attempt did not move: {s:#?}");
    assert_eq!((s.restarts, s.in_place_restarts), (0, 0), "{s:#?}");
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_workers_example_fails_once_the_workers_exhaust_max_restarts() {
    let c = cluster().await;
    c.apply_example().await;
    let mut pods = c.pods_until("5 pods running at attempt 0", |p| p.values().all(|p| at(p, "0", 0))).await;
    // maxRestarts 2: two failures restart the workers in place, the third fails the JobSet.
    for n in 1..=2 {
        c.fail(&a_worker_of_job_1(&pods), 1);
        let a = n.to_string();
        pods = c
            .pods_until(&format!("the workers restarted in place to attempt {n}"), |p| {
                p.values().all(|p| if rjob_of(p) == "workers" { at(p, &a, n) } else { at(p, "0", 0) })
            })
            .await;
    }
    c.fail(&a_worker_of_job_1(&pods), 1);
    let js = c.jobset_until("Failed", |js| js.condition(COND_FAILED).is_some()).await;
    let failed = js.condition(COND_FAILED).unwrap();
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("True", REASON_REACHED_MAX_RESTARTS), "{failed:#?}");
    let w = js.status.as_ref().unwrap().replicated_jobs_status.iter().find(|s| s.name == "workers").cloned().unwrap();
    assert_eq!(w.in_place_restarts, 2, "{w:#?}");
    let before_failure: Vec<Pod> = {
        let rv = |o: &Pod| o.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap();
        let failed_rv: u64 = js.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap();
        c.versions_of("driver").into_iter().filter(|p| rv(p) <= failed_rv).collect()
    };
    assert_driver_untouched(&before_failure);
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_job_in_place_restarts_only_the_failed_jobs_pods() {
    let c = cluster().await;
    c.create_edited_example(|js| {
        js["spec"]["failurePolicy"]["rules"] =
            json!([{"name": "RestartFailedJobInPlace", "action": "RestartJob", "targetReplicatedJobs": ["workers"]}]);
    })
    .await;
    let before = c.pods_until("5 pods running at attempt 0", |p| p.values().all(|p| at(p, "0", 0))).await;
    let failing = a_worker_of_job_1(&before);
    c.fail(&failing, 1);

    let in_job_1 = |p: &Pod| rjob_of(p) == "workers" && p.labels().get(JOB_INDEX).is_some_and(|i| i == "1");
    let after = c
        .pods_until("Job 1's 2 pods restarted once in place to attempt 1, the 3 others untouched", |p| {
            p.values().all(|p| if in_job_1(p) { at(p, "1", 1) } else { at(p, "0", 0) })
        })
        .await;
    let js = c
        .jobset_until("Job 1 of workers at current attempt 1", |js| {
            let w = js.status.as_ref().and_then(|s| s.replicated_jobs_status.iter().find(|s| s.name == "workers"));
            w.is_some_and(|w| {
                w.in_place_restart_jobs
                    .iter()
                    .any(|j| j.job_index == 1 && j.current_in_place_restart_attempt == Some(1))
            })
        })
        .await;
    assert_same_pods(&before, &after);
    assert_driver_untouched(&c.versions_of("driver"));
    assert_eq!(rj_attempts(&js, "workers"), (None, None), "{:#?}", js.status);
    assert_eq!(js_attempts(&js), (Some(0), None), "{:#?}", js.status);
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_workers_example_restarts_every_pod_in_place_when_the_driver_fails() {
    let c = cluster().await;
    c.apply_example().await;
    let before = c.pods_until("5 pods running at attempt 0", |p| p.values().all(|p| at(p, "0", 0))).await;
    let driver = before.values().find(|p| rjob_of(p) == "driver").cloned().unwrap();
    c.fail(&driver, 1);
    let after =
        c.pods_until("every pod restarted once in place to attempt 1", |p| p.values().all(|p| at(p, "1", 1))).await;
    let js = c.jobset_until("current attempt 1", |js| js_attempts(js).0 == Some(1)).await;
    assert_same_pods(&before, &after);
    assert_eq!(js_attempts(&js), (Some(1), Some(0)), "{:#?}", js.status);
    assert_eq!(js.status.as_ref().unwrap().restarts, 0);
    c.server.check();
}
