//! The Job controller's accounting with `backoffLimitPerIndex` and of the pods a Job deletes
//! itself, as upstream's integration tests (`test/integration/job/job_test.go`) check it:
//! the last failed pod of an index keeps its tracking finalizer, uncounted, until its
//! replacement exists (`TestBackoffLimitPerIndex_DelayedPodDeletion`, `TestBackoffLimitPerIndex`),
//! and a Job that decided its fate never counts the pods it deleted as newly failed.
//!
//! The mirrored upstream tests run without kubelets and set pod phases through the status
//! subresource: here a cluster without nodes does the same (its pods stay Pending).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

mod common;
use common::has_condition;

const TIMEOUT: Duration = Duration::from_secs(30);
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// A cluster without nodes whose per-index pod-failure back-off starts at `backoff`.
async fn driven_cluster(backoff: Duration) -> LocalCluster {
    let mut config = LocalConfig::fast(0);
    config.job.sync.backoff.base = backoff;
    config.job.sync.backoff.max = backoff.max(config.job.sync.backoff.max);
    LocalCluster::start(ApiServer::in_memory(), config).await
}

/// An Indexed Job with `spec` merged over upstream's test template.
fn indexed_job(name: &str, spec: Value) -> Job {
    let mut v = json!({"metadata": {"name": name}, "spec": {"completionMode": "Indexed",
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main-container", "image": "foo"}]}}}});
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn st(j: &Job) -> JobStatus {
    j.status.clone().unwrap_or_default()
}

/// A Job version in short: resourceVersion, conditions, active, failed, terminating, uncounted
/// failed, failedIndexes.
fn summary(j: &Job) -> String {
    let s = st(j);
    let conditions: Vec<&str> = s.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
    let uncounted = s.uncounted_terminated_pods.as_ref().and_then(|u| u.failed.as_ref()).map_or(0, Vec::len);
    format!(
        "rv {} {conditions:?} active {:?} failed {:?} terminating {:?} uncounted failed {uncounted} failedIndexes {:?}",
        rv(&j.metadata),
        s.active,
        s.failed,
        s.terminating,
        s.failed_indexes
    )
}

/// The pods of a Job whose recorded events show `DisruptionTarget` (a node lost under load).
fn disrupted(history: &History, job: &str) -> Vec<String> {
    let events = history.pods.lock().unwrap();
    let mut names: Vec<String> = events
        .iter()
        .map(|(_, p)| p)
        .filter(|p| {
            p.metadata.labels.as_ref().and_then(|l| l.get("batch.kubernetes.io/job-name")).map(String::as_str)
                == Some(job)
        })
        .filter(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "DisruptionTarget"))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// A watch of one Job whose initial list was received: started before the test acts, it sees
/// every later version, the passing ones too.
struct JobWatch {
    name: String,
    events: futures::stream::BoxStream<'static, Result<watcher::Event<Job>, watcher::Error>>,
    current: Option<Job>,
}

impl JobWatch {
    async fn start(api: &Api<Job>, name: &str) -> JobWatch {
        let events = watcher(api.clone(), watcher::Config::default().fields(&format!("metadata.name={name}"))).boxed();
        let mut w = JobWatch { name: name.into(), events, current: None };
        tokio::time::timeout(TIMEOUT, async {
            while let Some(ev) = w.events.next().await {
                match ev {
                    Ok(watcher::Event::InitApply(j)) => w.current = Some(j),
                    Ok(watcher::Event::InitDone) => return,
                    _ => {}
                }
            }
            panic!("watch ended")
        })
        .await
        .unwrap_or_else(|_| panic!("timed out listing job {name}"));
        w
    }

    /// Waits (bounded) until the Job, as last seen or in a later version, satisfies `pred`.
    async fn until(&mut self, what: &str, pred: impl Fn(&Job) -> bool) -> Job {
        if let Some(j) = self.current.as_ref().filter(|j| pred(j)) {
            return j.clone();
        }
        let name = self.name.clone();
        tokio::time::timeout(TIMEOUT, async {
            while let Some(ev) = self.events.next().await {
                if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = ev {
                    let found = pred(&j);
                    self.current = Some(j);
                    if found {
                        return self.current.clone().unwrap();
                    }
                }
            }
            panic!("watch ended")
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "timed out waiting for job {name}: {what}; last seen: {:?}",
                self.current.as_ref().and_then(|j| j.status.as_ref())
            )
        })
    }
}

/// Upstream's `podsByStatus` and `validateIndexedJobPods` in one: the counters, and the
/// completed and failed indexes, of one Job status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Counts {
    active: i32,
    failed: i32,
    succeeded: i32,
    /// `None`: any. Upstream counts the pods a finishing Job deletes in the same sync that
    /// deletes them and writes both; here the next sync counts them, when they may be gone.
    terminating: Option<i32>,
    completed_indexes: String,
    failed_indexes: Option<String>,
}

impl Counts {
    fn of(j: &Job) -> Counts {
        let s = st(j);
        Counts {
            active: s.active.unwrap_or(0),
            failed: s.failed.unwrap_or(0),
            succeeded: s.succeeded.unwrap_or(0),
            terminating: Some(s.terminating.unwrap_or(0)),
            completed_indexes: s.completed_indexes.unwrap_or_default(),
            failed_indexes: s.failed_indexes,
        }
    }

    /// Whether the Job shows these counts.
    fn shown_by(&self, j: &Job) -> bool {
        let got = Counts::of(j);
        *self == Counts { terminating: self.terminating.and(got.terminating), ..got }
    }
}

fn pod_index(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(COMPLETION_INDEX).map(String::as_str)
}

fn active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn has_finalizer(p: &Pod) -> bool {
    p.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER)
}

/// Upstream's `getActivePodForIndex`: waits (through a watch) for the active pod of the index.
async fn active_pod_for_index(pods: &Api<Pod>, job: &str, index: i32) -> Pod {
    let mut s =
        watcher(pods.clone(), watcher::Config::default().labels(&format!("job-name={job}"))).applied_objects().boxed();
    let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(p)) = s.next().await {
            seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
            if let Some(p) = seen.values().find(|p| active(p) && pod_index(p) == Some(&index.to_string())) {
                return p.clone();
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for an active pod of {job} index {index}"))
}

/// Sets a pod's status through the status subresource, as a kubelet (or upstream's test) does.
async fn set_status(pods: &Api<Pod>, p: &Pod, status: Value) {
    let name = p.metadata.name.as_deref().unwrap();
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
}

/// A failed pod's status: its container exited 1 now (the pod's finish time).
fn failed_now() -> Value {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({"phase": "Failed", "containerStatuses": [{"name": "main-container", "image": "foo", "imageID": "",
        "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "finishedAt": now}}}]})
}

/// Upstream's `validateFinishedPodsNoFinalizer`, waiting (through a watch): the finished Job's
/// last finalizers go just after the status write that finished it.
async fn no_pod_keeps_the_finalizer(pods: &Api<Pod>, job: &str) {
    let mut w = watcher(pods.clone(), watcher::Config::default().labels(&format!("job-name={job}"))).boxed();
    let mut kept: BTreeMap<String, bool> = BTreeMap::new();
    let mut listed = false;
    let waited = tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(ev)) = w.next().await {
            match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    kept.insert(p.metadata.name.clone().unwrap_or_default(), has_finalizer(&p));
                }
                watcher::Event::Delete(p) => {
                    kept.remove(p.metadata.name.as_deref().unwrap_or_default());
                }
                watcher::Event::InitDone => listed = true,
                watcher::Event::Init => {}
            }
            if listed && kept.values().all(|k| !k) {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "pods of {job} keep the tracking finalizer: {kept:?}");
}

/// Every watch event of some pods (`true`: deleted) and every version of some Jobs, in order,
/// recorded by background tasks from the moment [`History::record`] returns.
struct History {
    pods: Arc<Mutex<Vec<(bool, Pod)>>>,
    jobs: Arc<Mutex<Vec<JobVersion>>>,
    /// Bumped on every pod event recorded.
    pod_events: tokio::sync::watch::Receiver<usize>,
    /// Bumped on every Job version recorded.
    job_versions: tokio::sync::watch::Receiver<usize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl History {
    /// Records the pods (by label selector) and Jobs (by field selector) selected.
    async fn record(c: &LocalCluster, pods: &str, jobs: &str) -> History {
        let (pod_events, job_versions) = (Arc::default(), Arc::default());
        let (pod_bump, pod_bumped) = tokio::sync::watch::channel(0);
        let (pod_list, pod_task) = Self::follow(
            Api::default_namespaced(c.client()),
            watcher::Config::default().labels(pods),
            Arc::clone(&pod_events),
            pod_bump,
        );
        let (bump, bumped) = tokio::sync::watch::channel(0);
        let (job_list, job_task) = Self::follow(
            Api::<Job>::default_namespaced(c.client()),
            watcher::Config::default().fields(jobs),
            Arc::clone(&job_versions),
            bump,
        );
        let history = History {
            pods: pod_events,
            jobs: job_versions,
            pod_events: pod_bumped,
            job_versions: bumped,
            tasks: vec![pod_task, job_task],
        };
        tokio::time::timeout(TIMEOUT, async { (pod_list.await.unwrap(), job_list.await.unwrap()) })
            .await
            .expect("the history's watches list");
        history
    }

    /// Follows `api` into `into`, bumping `recorded`; the receiver answers once the initial
    /// list is in.
    fn follow<K, T>(
        api: Api<K>,
        config: watcher::Config,
        into: Arc<Mutex<Vec<T>>>,
        recorded: tokio::sync::watch::Sender<usize>,
    ) -> (tokio::sync::oneshot::Receiver<()>, tokio::task::JoinHandle<()>)
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
        T: From<(bool, K)> + Send + 'static,
    {
        let (listed, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut w = watcher(api, config).boxed();
            while let Some(Ok(ev)) = w.next().await {
                match ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        into.lock().unwrap().push((false, o).into());
                        recorded.send_modify(|n| *n += 1);
                    }
                    watcher::Event::Delete(o) => {
                        into.lock().unwrap().push((true, o).into());
                        recorded.send_modify(|n| *n += 1);
                    }
                    watcher::Event::InitDone => {
                        if let Some(l) = listed.take() {
                            let _ = l.send(());
                        }
                    }
                    watcher::Event::Init => {}
                }
            }
        });
        (rx, task)
    }

    /// Waits (bounded) until the Job versions recorded satisfy `pred`.
    async fn until_jobs(&mut self, what: &str, pred: impl Fn(&[JobVersion]) -> bool) {
        Self::until(&self.jobs, &mut self.job_versions, what, pred).await
    }

    /// Waits (bounded) until the pod events recorded satisfy `pred`.
    async fn until_pods(&mut self, what: &str, pred: impl Fn(&[(bool, Pod)]) -> bool) {
        Self::until(&self.pods, &mut self.pod_events, what, pred).await
    }

    async fn until<T>(
        recorded: &Mutex<Vec<T>>,
        bumped: &mut tokio::sync::watch::Receiver<usize>,
        what: &str,
        pred: impl Fn(&[T]) -> bool,
    ) {
        let done = tokio::time::timeout(TIMEOUT, async {
            loop {
                if pred(&recorded.lock().unwrap()) {
                    return;
                }
                bumped.changed().await.expect("the history is recorded");
            }
        })
        .await;
        assert!(done.is_ok(), "timed out waiting for {what}");
    }
}

/// A Job as a watch showed it (deletions are not recorded apart).
struct JobVersion(Job);

impl From<(bool, Job)> for JobVersion {
    fn from((_, j): (bool, Job)) -> Self {
        JobVersion(j)
    }
}

impl Drop for History {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Mirrors upstream's `TestBackoffLimitPerIndex_DelayedPodDeletion`: a failed pod that a user
/// deletes before its replacement exists still hands its failure on (the replacement carries
/// failure count 1), because it keeps its finalizer, uncounted, until the replacement exists.
/// The per-index back-off (2 s here) holds the replacement back past the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_per_index_delayed_pod_deletion() {
    let c = driven_cluster(Duration::from_secs(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let spec = json!({"parallelism": 1, "completions": 1, "backoffLimitPerIndex": 1});
    jobs.create(&PostParams::default(), &indexed_job("delayed", spec)).await.unwrap();
    let first = active_pod_for_index(&pods, "delayed", 0).await;
    let mut history = History::record(&c, "job-name=delayed", "metadata.name=delayed").await;
    let mut job = JobWatch::start(&jobs, "delayed").await;
    // The first pod of index 0 fails, and a user deletes it.
    set_status(&pods, &first, failed_now()).await;
    let first_name = first.metadata.name.clone().unwrap();
    pods.delete(&first_name, &DeleteParams::default()).await.unwrap();

    let want =
        Counts { active: 1, failed: 1, terminating: Some(0), failed_indexes: Some("".into()), ..Counts::default() };
    job.until("active 1, failed 1", |j| want.shown_by(j)).await;
    let replacement = active_pod_for_index(&pods, "delayed", 0).await;
    assert_eq!(
        replacement.metadata.annotations.as_ref().unwrap().get(INDEX_FAILURE_COUNT).map(String::as_str),
        Some("1"),
        "the replacement counts the deleted pod's failure"
    );
    // Until the replacement existed, the failed pod kept its finalizer and went uncounted.
    let replacement_name = replacement.metadata.name.clone().unwrap();
    let released =
        |(deleted, p): &(bool, Pod)| p.metadata.name.as_deref() == Some(&first_name) && (*deleted || !has_finalizer(p));
    history.until_pods("the failed pod's release", |events| events.iter().any(released)).await;
    history.until_jobs("failed 1", |versions| versions.iter().any(|v| st(&v.0).failed == Some(1))).await;
    let created = {
        let events = history.pods.lock().unwrap();
        let created = events.iter().position(|(_, p)| p.metadata.name.as_deref() == Some(&replacement_name));
        let released = events.iter().position(released);
        let (Some(created), Some(released)) = (created, released) else {
            panic!("both the replacement's creation and the failed pod's release are seen: {created:?}, {released:?}")
        };
        assert!(
            created < released,
            "the failed pod lost its finalizer (event {released}) before its replacement existed (event {created})"
        );
        rv(&events[created].1.metadata)
    };
    let first_uid = first.metadata.uid.clone().unwrap();
    for JobVersion(v) in history.jobs.lock().unwrap().iter().filter(|v| rv(&v.0.metadata) < created) {
        let s = st(v);
        let uncounted = s.uncounted_terminated_pods.clone().and_then(|u| u.failed).unwrap_or_default();
        assert!(
            s.failed.unwrap_or(0) == 0 && !uncounted.contains(&first_uid),
            "the failure was counted before the replacement existed: {s:?}"
        );
    }

    set_status(&pods, &replacement, json!({"phase": "Succeeded"})).await;
    let j = job.until("Complete", |j| has_condition(j, "Complete")).await;
    assert_eq!(
        Counts::of(&j),
        Counts {
            succeeded: 1,
            failed: 1,
            terminating: Some(0),
            completed_indexes: "0".into(),
            failed_indexes: Some("".into()),
            ..Counts::default()
        }
    );
    no_pod_keeps_the_finalizer(&pods, "delayed").await;
    drop(history);
    c.shutdown().await;
}

/// One pod termination of upstream's `TestBackoffLimitPerIndex` and what the Job shows after it.
struct Termination {
    index: i32,
    status: Value,
    want: Counts,
    replacement_failure_count: Option<&'static str>,
}

/// Mirrors upstream's `TestBackoffLimitPerIndex` (its cases by name): each termination is set
/// on the index's active pod, then the Job's counters, indexes and the replacement's failure
/// count are awaited; the remaining active pods then succeed and the Job ends with the condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_per_index() {
    let c = driven_cluster(Duration::from_millis(100)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let failed = || json!({"phase": "Failed"});
    let counts = |active, failed, succeeded, terminating: Option<i32>, completed: &str, failed_indexes: &str| Counts {
        active,
        failed,
        succeeded,
        terminating,
        completed_indexes: completed.into(),
        failed_indexes: Some(failed_indexes.into()),
    };
    let t =
        |index, status, want, replacement_failure_count| Termination { index, status, want, replacement_failure_count };
    let cases: Vec<(&str, Value, Vec<Termination>, &str)> = vec![
        (
            "job succeeded",
            json!({"parallelism": 2, "completions": 2, "backoffLimitPerIndex": 1}),
            vec![t(0, failed(), counts(2, 1, 0, Some(0), "", ""), Some("1"))],
            "Complete",
        ),
        (
            "job index fails due to exceeding backoff limit per index",
            json!({"parallelism": 2, "completions": 2, "backoffLimitPerIndex": 2}),
            vec![
                t(0, failed(), counts(2, 1, 0, Some(0), "", ""), Some("1")),
                t(0, failed(), counts(2, 2, 0, Some(0), "", ""), Some("2")),
                t(0, failed(), counts(1, 3, 0, Some(0), "", "0"), None),
            ],
            "Failed",
        ),
        (
            "job index fails due to exceeding the global backoff limit first",
            json!({"parallelism": 3, "completions": 3, "backoffLimitPerIndex": 1, "backoffLimit": 2}),
            vec![
                t(0, failed(), counts(3, 1, 0, Some(0), "", ""), None),
                t(1, failed(), counts(3, 2, 0, Some(0), "", ""), None),
                t(2, failed(), counts(0, 5, 0, None, "", ""), None),
            ],
            "Failed",
        ),
        (
            "job continues execution after a failed index, the job is marked Failed due to the failed index",
            json!({"parallelism": 2, "completions": 2, "backoffLimitPerIndex": 0}),
            vec![
                t(0, failed(), counts(1, 1, 0, Some(0), "", "0"), None),
                t(1, json!({"phase": "Succeeded"}), counts(0, 1, 1, Some(0), "1", "0"), None),
            ],
            "Failed",
        ),
        (
            "job execution terminated early due to exceeding max failed indexes",
            json!({"parallelism": 3, "completions": 3, "backoffLimitPerIndex": 0, "maxFailedIndexes": 1}),
            vec![
                t(0, failed(), counts(2, 1, 0, Some(0), "", "0"), None),
                t(1, failed(), counts(0, 3, 0, None, "", "0,1"), None),
            ],
            "Failed",
        ),
        (
            "pod failure matching pod failure policy rule with FailIndex action",
            json!({"parallelism": 2, "completions": 2, "backoffLimitPerIndex": 1, "podFailurePolicy": {"rules": [
                {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [13]}},
                {"action": "FailIndex", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}}),
            vec![
                t(
                    0,
                    json!({"phase": "Failed", "containerStatuses": [{"name": "main-container", "image": "foo", "imageID": "",
                        "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 13}}}]}),
                    counts(1, 1, 0, Some(0), "", "0"),
                    None,
                ),
                t(
                    1,
                    json!({"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}),
                    counts(0, 2, 0, Some(0), "", "0,1"),
                    None,
                ),
            ],
            "Failed",
        ),
    ];
    for (n, (case, spec, terminations, condition)) in cases.into_iter().enumerate() {
        let name = format!("blpi-{n}");
        let parallelism = spec["parallelism"].as_i64().unwrap() as i32;
        jobs.create(&PostParams::default(), &indexed_job(&name, spec)).await.unwrap();
        let mut job = JobWatch::start(&jobs, &name).await;
        job.until("all pods active", |j| Counts::of(j).active == parallelism).await;
        let mut remaining = parallelism;
        for (step, term) in terminations.into_iter().enumerate() {
            let pod = active_pod_for_index(&pods, &name, term.index).await;
            set_status(&pods, &pod, term.status).await;
            let want = term.want.clone();
            job.until(&format!("{case}: step {step}: {want:?}"), |j| want.shown_by(j)).await;
            if let Some(count) = term.replacement_failure_count {
                let replacement = active_pod_for_index(&pods, &name, term.index).await;
                let got = replacement.metadata.annotations.as_ref().and_then(|a| a.get(INDEX_FAILURE_COUNT)).cloned();
                assert_eq!(got.as_deref(), Some(count), "{case}: step {step}: the replacement's failure count");
            }
            remaining = term.want.active;
        }
        // Upstream's `setJobPodsPhase(..., Succeeded, remainingActive)`.
        let list = pods.list(&ListParams::default().labels(&format!("job-name={name}"))).await.unwrap();
        for p in list.items.iter().filter(|p| active(p)).take(remaining as usize) {
            set_status(&pods, p, json!({"phase": "Succeeded"})).await;
        }
        job.until(&format!("{case}: {condition}"), |j| has_condition(j, condition)).await;
        no_pod_keeps_the_finalizer(&pods, &name).await;
    }
    c.shutdown().await;
}

/// A Job that decided its fate deletes its remaining pods and never counts them again as newly
/// failed, whatever the cache still shows of them (upstream's finalizer-removal expectations):
/// Jobs meeting their success policy end `Complete` with `failed: 0`, Jobs exceeding
/// `maxFailedIndexes` list only the indexes that failed, in every version of their status.
/// Several of each run at once (pods simulated on nodes), so that syncs on a cache that still
/// shows a removed finalizer are likely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_counts_the_pods_it_deleted_on_deciding_its_fate_as_newly_failed() {
    const EACH: usize = 4;
    let mut config = LocalConfig::fast(4);
    // Under load a node can miss the fast configuration's heartbeat deadline, and its pods really
    // fail (DisruptionTarget): that is not what this test is about.
    config.node_lifecycle.grace_period = Duration::from_secs(60);
    let c = LocalCluster::start(ApiServer::in_memory(), config).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let mut history = History::record(&c, "batch.kubernetes.io/job-name", "metadata.namespace=default").await;
    for i in 0..EACH {
        // Index 0 succeeds after 30 ms; the others run until deleted.
        let mut success = indexed_job(
            &format!("success-{i}"),
            json!({"completions": 6, "parallelism": 6, "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
        );
        // Indexes 0 and 1 fail after 30 ms; the others run until deleted.
        let mut max_failed = indexed_job(
            &format!("max-failed-{i}"),
            json!({"completions": 6, "parallelism": 6, "backoffLimitPerIndex": 0, "maxFailedIndexes": 1}),
        );
        for (job, annotations) in [
            (
                &mut success,
                json!({"sim.jobset.x-k8s.io/duration": "30ms", "sim.jobset.x-k8s.io/fail-indexes": "1-5",
                "sim.jobset.x-k8s.io/exit-code": "1", "sim.jobset.x-k8s.io/fail-duration": "forever"}),
            ),
            (
                &mut max_failed,
                json!({"sim.jobset.x-k8s.io/duration": "forever", "sim.jobset.x-k8s.io/fail-indexes": "0,1",
                "sim.jobset.x-k8s.io/exit-code": "1", "sim.jobset.x-k8s.io/fail-duration": "30ms"}),
            ),
        ] {
            job.spec.as_mut().unwrap().template.metadata =
                serde_json::from_value(json!({"annotations": annotations})).unwrap();
            jobs.create(&PostParams::default(), job).await.unwrap();
        }
    }
    history
        .until_jobs("every Job Complete or Failed", |versions| {
            let finished: std::collections::BTreeSet<&str> = versions
                .iter()
                .filter(|v| has_condition(&v.0, "Complete") || has_condition(&v.0, "Failed"))
                .filter_map(|v| v.0.metadata.name.as_deref())
                .collect();
            finished.len() == 2 * EACH
        })
        .await;
    let versions: Vec<Job> = history.jobs.lock().unwrap().iter().map(|v| v.0.clone()).collect();
    let of = |name: String| versions.iter().filter(move |j| j.metadata.name.as_deref() == Some(&name));
    for i in 0..EACH {
        let name = format!("success-{i}");
        for j in of(name.clone()) {
            let s = st(j);
            let uncounted = s.uncounted_terminated_pods.and_then(|u| u.failed).unwrap_or_default();
            assert!(
                s.failed.unwrap_or(0) == 0 && uncounted.is_empty(),
                "{name} counted a pod it deleted: {:?}; its pods disrupted: {:?}",
                j.status,
                disrupted(&history, &name)
            );
        }
        let last = of(name.clone()).next_back().unwrap();
        assert!(has_condition(last, "Complete"), "{name}: {:?}", last.status);
        let want = Counts { succeeded: 1, terminating: Some(0), completed_indexes: "0".into(), ..Counts::default() };
        assert_eq!(Counts::of(last), want, "{name}");

        let name = format!("max-failed-{i}");
        for j in of(name.clone()) {
            let failed = st(j).failed_indexes.unwrap_or_default();
            assert!(
                ["", "0", "1", "0,1"].contains(&failed.as_str()),
                "{name} lists an index it deleted: {failed}; its versions: {:#?}; its pods disrupted: {:?}",
                of(name.clone()).map(summary).collect::<Vec<_>>(),
                disrupted(&history, &name)
            );
        }
        let last = of(name.clone()).next_back().unwrap();
        assert!(has_condition(last, "Failed"), "{name}: {:?}", last.status);
        let want = Counts { failed: 6, terminating: Some(0), failed_indexes: Some("0,1".into()), ..Counts::default() };
        assert_eq!(Counts::of(last), want, "{name}");
    }
    drop(history);
    c.shutdown().await;
}
