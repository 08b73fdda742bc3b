//! Black-box tests of the Job controller: create a Job through the API, let simulated pods
//! succeed or fail, assert status and conditions exactly as upstream's.

use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

mod common;
use common::{has_condition, job, wait_job};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(nodes)).await
}

fn condition(j: &Job, type_: &str) -> (String, String) {
    let c = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .unwrap();
    (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default())
}

async fn finished(api: &Api<Job>, name: &str) -> Job {
    wait_job(api, name, "Complete or Failed", |j| has_condition(j, "Complete") || has_condition(j, "Failed")).await
}

fn st(j: &Job) -> k8s_openapi::api::batch::v1::JobStatus {
    j.status.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_per_index_as_in_the_blog() {
    let c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 8, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 1});
    jobs.create(
        &PostParams::default(),
        &job("blog", spec, json!({"sim.jobset.x-k8s.io/fail-indexes": "1,2", "sim.jobset.x-k8s.io/duration": "10ms"})),
    )
    .await
    .unwrap();
    let j = finished(&jobs, "blog").await;
    let s = st(&j);
    assert_eq!(s.completed_indexes.as_deref(), Some("0,3-7"));
    assert_eq!(s.failed_indexes.as_deref(), Some("1,2"));
    assert_eq!((s.succeeded, s.failed), (Some(6), Some(4)));
    assert!(has_condition(&j, "Failed"));
    assert_eq!(condition(&j, "Failed").0, "FailedIndexes");
    assert_eq!(condition(&j, "FailureTarget").0, "FailedIndexes");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_failed_indexes_fails_the_job_early() {
    let c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 6, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 0, "maxFailedIndexes": 1});
    jobs.create(
        &PostParams::default(),
        &job("mfi", spec, json!({"sim.jobset.x-k8s.io/fail-indexes": "0,1", "sim.jobset.x-k8s.io/duration": "10ms"})),
    )
    .await
    .unwrap();
    let j = finished(&jobs, "mfi").await;
    assert_eq!(
        condition(&j, "Failed"),
        ("MaxFailedIndexesExceeded".into(), "Job has exceeded the specified maximal number of failed indexes".into())
    );
    // A pod the Job deletes on failing (index 2's, when it started after index 0 failed) counts
    // in `failed`, never in `failedIndexes` (upstream's "job execution terminated early due to
    // exceeding max failed indexes").
    assert_eq!(st(&j).failed_indexes.as_deref(), Some("0,1"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_failure_policy_actions_and_operators() {
    let c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let ms = json!("10ms");
    // FailJob + In: the upstream message names container, pod and rule index.
    let pfp = |rules: Value| json!({"backoffLimit": 6, "podFailurePolicy": {"rules": rules}});
    jobs.create(
        &PostParams::default(),
        &job(
            "failjob-in",
            pfp(json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}])),
            json!({"sim.jobset.x-k8s.io/exit-code": "3", "sim.jobset.x-k8s.io/duration": ms}),
        ),
    )
    .await
    .unwrap();
    // FailJob + NotIn, with the local-mode setConditionReason extension.
    let mut notin = job(
        "failjob-notin",
        pfp(json!([])),
        json!({"sim.jobset.x-k8s.io/exit-code": "2", "sim.jobset.x-k8s.io/duration": ms}),
    );
    let mut raw = serde_json::to_value(&notin).unwrap();
    raw["spec"]["podFailurePolicy"]["rules"] = json!([{"action": "FailJob", "setConditionReason": "UnexpectedExit", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [1]}}]);
    notin = serde_json::from_value(raw.clone()).unwrap();
    let dynamic: Api<kube::core::DynamicObject> =
        Api::default_namespaced_with(c.client(), &kube::core::ApiResource::erase::<Job>(&()));
    dynamic.create(&PostParams::default(), &serde_json::from_value(raw).unwrap()).await.unwrap();
    drop(notin);
    // Count: failures count toward backoffLimit as without a policy.
    jobs.create(&PostParams::default(), &job("count", json!({"backoffLimit": 1, "podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}]}}),
        json!({"sim.jobset.x-k8s.io/exit-code": "1", "sim.jobset.x-k8s.io/duration": ms}))).await.unwrap();
    // Ignore: the first attempt's exit 42 is not a failure; the replacement succeeds.
    jobs.create(&PostParams::default(), &job("ignore", json!({"backoffLimit": 0, "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]}}),
        json!({"sim.jobset.x-k8s.io/exit-code": "42", "sim.jobset.x-k8s.io/fail-attempts": "1", "sim.jobset.x-k8s.io/duration": ms}))).await.unwrap();
    // FailIndex: index 1 fails at once despite backoffLimitPerIndex 3.
    jobs.create(&PostParams::default(), &job("failindex", json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "backoffLimitPerIndex": 3,
        "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]}}),
        json!({"sim.jobset.x-k8s.io/exit-code": "42", "sim.jobset.x-k8s.io/fail-indexes": "1", "sim.jobset.x-k8s.io/duration": ms}))).await.unwrap();

    let j = finished(&jobs, "failjob-in").await;
    let (reason, message) = condition(&j, "Failed");
    assert_eq!(reason, "PodFailurePolicy");
    assert!(
        message.starts_with("Container main for pod default/failjob-in-")
            && message.ends_with(" failed with exit code 3 matching FailJob rule at index 0"),
        "{message}"
    );
    let j = finished(&jobs, "failjob-notin").await;
    assert_eq!(condition(&j, "Failed").0, "UnexpectedExit");
    let j = finished(&jobs, "count").await;
    assert_eq!(condition(&j, "Failed").0, "BackoffLimitExceeded");
    assert_eq!(st(&j).failed, Some(2));
    let j = finished(&jobs, "ignore").await;
    assert!(has_condition(&j, "Complete"), "{:?}", j.status);
    assert_eq!((st(&j).failed, st(&j).succeeded), (Some(0), Some(1)));
    let j = finished(&jobs, "failindex").await;
    assert_eq!(condition(&j, "Failed").0, "FailedIndexes");
    assert_eq!((st(&j).failed_indexes.as_deref(), st(&j).failed), (Some("1"), Some(1)));
    c.shutdown().await;
}

/// Deletes the running pod of a one-pod Job whose pods take 400 ms to terminate, and returns
/// the order (by resourceVersion) of "the old pod reached Failed" and "a replacement appeared",
/// plus the highest `status.terminating` seen and the final Job.
async fn pod_replacement(policy: &str) -> (bool, i32, Job) {
    let c = cluster(2).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let name = format!("prp-{}", policy.to_lowercase());
    let sim = json!({"sim.jobset.x-k8s.io/duration": "forever", "sim.jobset.x-k8s.io/termination-delay": "400ms"});
    jobs.create(&PostParams::default(), &job(&name, json!({"podReplacementPolicy": policy}), sim)).await.unwrap();
    let mut w =
        watcher(pods.clone(), watcher::Config::default().labels(&format!("job-name={name}"))).applied_objects().boxed();
    let first = tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(p)) = w.next().await {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                return p.metadata.name.unwrap();
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap();
    let mut jw = watcher(jobs.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    pods.delete(&first, &DeleteParams::default()).await.unwrap();
    let (mut old_failed_at, mut replacement_at, mut max_terminating) = (None, None, 0);
    let mut seq = 0;
    let mut last_job: Option<Job> = None;
    let j = tokio::time::timeout(TIMEOUT, async {
        loop {
            tokio::select! {
                Some(Ok(p)) = w.next() => {
                    seq += 1;
                    let failed = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
                    if p.metadata.name.as_deref() == Some(first.as_str()) && failed && old_failed_at.is_none() {
                        old_failed_at = Some(seq);
                    }
                    if p.metadata.name.as_deref() != Some(first.as_str()) && replacement_at.is_none() {
                        replacement_at = Some(seq);
                    }
                }
                Some(Ok(j)) = jw.next() => {
                    let s = j.status.clone().unwrap_or_default();
                    max_terminating = max_terminating.max(s.terminating.unwrap_or(0));
                    last_job = Some(j);
                }
            }
            // The two watches deliver independently: decide on the latest of both.
            if let Some(j) = &last_job {
                let s = j.status.clone().unwrap_or_default();
                if s.terminating == Some(0)
                    && s.active == Some(1)
                    && s.failed == Some(1)
                    && replacement_at.is_some()
                    && old_failed_at.is_some()
                {
                    return j.clone();
                }
            }
        }
    })
    .await
    .expect("the pod was replaced");
    c.shutdown().await;
    (replacement_at > old_failed_at, max_terminating, j)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacement_policy_failed_waits_for_the_terminating_pod() {
    let (replaced_after_failure, max_terminating, j) = pod_replacement("Failed").await;
    assert!(replaced_after_failure, "no replacement while the old pod terminates");
    assert_eq!(max_terminating, 1, "status.terminating counts the terminating pod");
    assert_eq!(st(&j).failed, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacement_policy_terminating_or_failed_replaces_at_once() {
    let (replaced_after_failure, max_terminating, j) = pod_replacement("TerminatingOrFailed").await;
    assert!(!replaced_after_failure, "the replacement starts while the old pod terminates");
    assert_eq!(max_terminating, 1);
    assert_eq!(st(&j).failed, Some(1), "counted once, when it started terminating");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_a_running_job() {
    let c = cluster(2).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    jobs.create(
        &PostParams::default(),
        &job("ads", json!({"activeDeadlineSeconds": 1}), json!({"sim.jobset.x-k8s.io/duration": "forever"})),
    )
    .await
    .unwrap();
    let j = finished(&jobs, "ads").await;
    assert_eq!(
        condition(&j, "Failed"),
        ("DeadlineExceeded".into(), "Job was active longer than specified deadline".into())
    );
    assert_eq!((st(&j).active, st(&j).terminating), (Some(0), Some(0)));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_policy_completes_once_the_leader_succeeds() {
    let c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "successPolicy": {"rules": [{"succeededIndexes": "0"}]}});
    // Pods run 50 ms one at a time; index 0 succeeding is enough.
    let spec = {
        let mut s = spec;
        s["parallelism"] = json!(1);
        s
    };
    jobs.create(&PostParams::default(), &job("sp", spec, json!({"sim.jobset.x-k8s.io/duration": "50ms"})))
        .await
        .unwrap();
    let j = finished(&jobs, "sp").await;
    assert_eq!(condition(&j, "Complete"), ("SuccessPolicy".into(), "Matched rules at index 0".into()));
    assert_eq!(condition(&j, "SuccessCriteriaMet").0, "SuccessPolicy");
    assert_eq!(st(&j).completed_indexes.as_deref(), Some("0"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_deletes_pods_without_failures_and_resume_restarts() {
    let c = cluster(2).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    jobs.create(
        &PostParams::default(),
        &job("sus", json!({"parallelism": 2, "completions": 2}), json!({"sim.jobset.x-k8s.io/duration": "forever"})),
    )
    .await
    .unwrap();
    wait_job(&jobs, "sus", "2 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(2)).await;
    jobs.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    let j = wait_job(&jobs, "sus", "suspended with no pods", |j| {
        has_condition(j, "Suspended") && j.status.as_ref().and_then(|s| s.active) == Some(0)
    })
    .await;
    assert_eq!(condition(&j, "Suspended"), ("JobSuspended".into(), "Job suspended".into()));
    assert_eq!(st(&j).failed.unwrap_or(0), 0, "suspending is not a failure");
    jobs.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let j = wait_job(&jobs, "sus", "resumed", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2)
            && j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Suspended" && c.status == "False"))
    })
    .await;
    assert_eq!(condition(&j, "Suspended").0, "JobResumed");
    assert_eq!(
        pods.list(&ListParams::default().labels("job-name=sus"))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count(),
        2
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastic_indexed_job_scales_up_down_and_to_zero() {
    let c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed"});
    jobs.create(&PostParams::default(), &job("elastic", spec, json!({"sim.jobset.x-k8s.io/duration": "forever"})))
        .await
        .unwrap();
    wait_job(&jobs, "elastic", "4 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(4)).await;
    // Changing completions alone is rejected, as upstream.
    let err = jobs
        .patch("elastic", &PatchParams::default(), &Patch::Merge(json!({"spec": {"completions": 2}})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("can only be modified in tandem with spec.parallelism")),
        "{err:?}"
    );
    let scale = |n: i32| Patch::Merge(json!({"spec": {"completions": n, "parallelism": n}}));
    jobs.patch("elastic", &PatchParams::default(), &scale(2)).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let j = wait_job(&jobs, "elastic", "2 active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2) && j.status.as_ref().and_then(|s| s.terminating) == Some(0)
    })
    .await;
    assert_eq!(st(&j).failed.unwrap_or(0), 0, "scale-down removes the highest indexes without failures");
    let live: Vec<String> = pods
        .list(&ListParams::default().labels("job-name=elastic"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.labels.unwrap()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    let mut live = live;
    live.sort();
    assert_eq!(live, ["0", "1"]);
    jobs.patch("elastic", &PatchParams::default(), &scale(5)).await.unwrap();
    wait_job(&jobs, "elastic", "5 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(5)).await;
    jobs.patch("elastic", &PatchParams::default(), &scale(0)).await.unwrap();
    let j = finished(&jobs, "elastic").await;
    assert_eq!(condition(&j, "Complete").0, "CompletionsReached");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restart_mid_job_does_not_double_count() {
    let mut c = cluster(4).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    // 20 pods each failing once then succeeding: exactly 20 failures and 20 successes.
    let spec = json!({"completions": 20, "parallelism": 5, "backoffLimit": 100});
    jobs.create(
        &PostParams::default(),
        &job(
            "restart",
            spec,
            json!({"sim.jobset.x-k8s.io/fail-attempts": "1", "sim.jobset.x-k8s.io/duration": "20ms"}),
        ),
    )
    .await
    .unwrap();
    for threshold in [4, 8, 12, 16, 20] {
        wait_job(&jobs, "restart", "progress", |j| {
            j.status.as_ref().and_then(|s| s.failed).unwrap_or(0)
                + j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0)
                >= threshold
        })
        .await;
        c.restart_job_controller();
    }
    let j = finished(&jobs, "restart").await;
    assert!(has_condition(&j, "Complete"), "{:?}", j.status);
    assert_eq!(st(&j).succeeded, Some(20));
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let failed_pods = pods
        .list(&ListParams::default().labels("job-name=restart"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
        .count() as i32;
    assert_eq!(st(&j).failed, Some(failed_pods), "every failed pod counted exactly once");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_failed_node_are_disrupted_and_an_ignore_rule_replaces_them_uncounted() {
    let c = cluster(2).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 2, "parallelism": 2, "backoffLimit": 0,
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
    jobs.create(&PostParams::default(), &job("nodeloss", spec, json!({"sim.jobset.x-k8s.io/duration": "forever"})))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let mut running =
        watcher(pods.clone(), watcher::Config::default().labels("job-name=nodeloss")).applied_objects().boxed();
    let victim = tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(p)) = running.next().await {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("a running pod");
    let node = victim.spec.as_ref().unwrap().node_name.clone().unwrap();
    let handle = c.nodes.iter().find(|n| n.name() == node).unwrap();
    handle.fail();
    // The lost pod ends Failed with DisruptionTarget; it is replaced and not counted.
    let mut w = watcher(
        pods.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", victim.metadata.name.clone().unwrap())),
    )
    .boxed();
    let disrupted = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = w.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True"))
            {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the lost pod gets DisruptionTarget");
    assert_eq!(disrupted.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed"));
    // Let the replacement finish: make every pod of the job exit by shrinking their runtime on the healthy node.
    let j = wait_job(&jobs, "nodeloss", "replacement running", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2)
            && j.status.as_ref().and_then(|s| s.uncounted_terminated_pods.as_ref()).is_none_or(|u| u.failed.is_none())
    })
    .await;
    assert_eq!(st(&j).failed.unwrap_or(0), 0, "an ignored disruption is not a failure");
    assert!(!has_condition(&j, "Failed"));
    jobs.delete("nodeloss", &DeleteParams::foreground()).await.unwrap();
    c.shutdown().await;
}

/// The `ready` counts the Job's status went through before all `n` of its pods were ready.
fn partial_ready_counts(versions: &[Job], n: i32) -> std::collections::BTreeSet<i32> {
    versions.iter().filter_map(|j| j.status.as_ref()?.ready).filter(|r| *r > 0 && *r < n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_pods_starting_together_reach_its_status_in_one_batched_sync() {
    // Upstream's syncJobBatchPeriod: the pods' changes within a period sync the Job once, so the
    // status goes from no pod ready to all ready without the counts between (at most one, when
    // the pods' starts straddle two periods).
    let mut cfg = LocalConfig::fast(4);
    cfg.job.sync_batch_period = Duration::from_millis(500);
    let c = LocalCluster::start(ApiServer::in_memory(), cfg).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let history = common::record(jobs.clone(), watcher::Config::default()).await;
    let n = 20;
    let spec = json!({"completions": n, "parallelism": n, "completionMode": "Indexed"});
    jobs.create(&PostParams::default(), &job("together", spec, json!({"sim.jobset.x-k8s.io/duration": "forever"})))
        .await
        .unwrap();
    let all_ready = |v: &[common::Seen<Job>]| v.iter().any(|s| s.obj.status.as_ref().and_then(|s| s.ready) == Some(n));
    history.until("all pods ready", all_ready).await;
    let partial = partial_ready_counts(&history.versions(), n);
    assert!(partial.len() <= 1, "ready counts between 0 and {n}: {partial:?}");
    c.shutdown().await;
}
