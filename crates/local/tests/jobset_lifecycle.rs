//! Black-box tests of the JobSet lifecycle features ahead of upstream's roadmap (issue 25):
//! Jobs in `FailureTarget` counted as failed (upstream issue #979), execution attempts
//! (KEP-1282) and the JobSet's `activeDeadlineSeconds` (KEP-1186). Each creates a JobSet through
//! the API on the embedded cluster with simulated pods and waits through watches.

use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::*;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

mod common;
use common::*;

const SIM: &str = "sim.jobset.x-k8s.io/";

async fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(nodes)).await
}

/// A JobSet of one replicated job `w` of `replicas` Indexed Jobs of `pods` pods each
/// (`backoffLimit: 0`), their pods annotated with the simulation settings `sim`.
fn jobset_of(name: &str, replicas: i32, pods: i32, sim: &[(&str, &str)], spec: Value) -> JobSet {
    let annotations: serde_json::Map<String, Value> =
        sim.iter().map(|(k, v)| (format!("{SIM}{k}"), json!(v))).collect();
    let mut s = json!({
        "replicatedJobs": [{"name": "w", "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 3600,
                         "containers": [{"name": "main", "image": "busybox"}]}
            }
        }}}],
        "successPolicy": {"operator": "All"},
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true}
    });
    s.as_object_mut().unwrap().extend(spec.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({"apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": "default"}, "spec": s}))
    .unwrap()
}

fn jobsets(c: &LocalCluster) -> Api<JobSet> {
    Api::default_namespaced(c.client())
}

fn jobs_api(c: &LocalCluster) -> Api<Job> {
    Api::default_namespaced(c.client())
}

// ---------------------------------------------------------------------------------------------
// Jobs in FailureTarget (upstream issue #979).
// ---------------------------------------------------------------------------------------------

/// Pod 0 fails at once; pod 1 takes an hour to terminate, so the Job stays `FailureTarget` and
/// never reaches `Failed` in the test's life. The JobSet fails on the `FailureTarget` alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_in_failure_target_fails_the_jobset_before_its_pods_are_gone() {
    let c = cluster(2).await;
    let name = "ft";
    let sim = [("duration", "forever"), ("fail-indexes", "0"), ("fail-duration", "50ms"), ("termination-delay", "1h")];
    jobsets(&c).create(&PostParams::default(), &jobset_of(name, 1, 2, &sim, json!({}))).await.unwrap();
    let js = wait_jobset(&jobsets(&c), name, "Failed", |j| j.condition_true(COND_FAILED)).await;
    let failed = js.condition(COND_FAILED).unwrap();
    assert_eq!(
        (failed.reason.as_str(), failed.message.as_str()),
        (REASON_FAILED_JOBS, "jobset failed due to one or more job failures (first failed job: ft-w-0)")
    );
    let w = js.status.as_ref().unwrap().replicated_jobs_status.iter().find(|s| s.name == "w").cloned().unwrap();
    assert_eq!((w.failed, w.active), (1, 0), "the FailureTarget Job counts as failed: {w:?}");
    let job = jobs_api(&c).get("ft-w-0").await.unwrap();
    assert!(has_condition(&job, "FailureTarget"), "{:?}", job.status);
    assert!(!has_condition(&job, "Failed"), "its pod still terminates: {:?}", job.status);
    c.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Execution attempts (KEP-1282).
// ---------------------------------------------------------------------------------------------

fn execution_attempts(js: &JobSet) -> Option<i32> {
    js.status.as_ref().and_then(|s| s.execution_attempts)
}

fn patch_suspend(suspend: bool) -> kube::api::Patch<Value> {
    kube::api::Patch::Merge(json!({"spec": {"suspend": suspend}}))
}

/// The KEP's example with a restart first: the first run's pod fails (run 0), the failure policy
/// restarts the JobSet (run 1), a suspend and resume (as Kueue's eviction) begins run 2. Every pod
/// carries its run; `restart-attempt` does not move on the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execution_attempts_count_the_first_run_a_restart_and_a_resume_and_label_every_pod() {
    use k8s_openapi::api::core::v1::Pod;
    let c = cluster(2).await;
    let name = "ea";
    let sim = [("duration", "forever"), ("fail-attempts", "1"), ("fail-duration", "50ms")];
    let js = jobset_of(name, 1, 1, &sim, json!({"failurePolicy": {"maxRestarts": 3}}));
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let pods = record(pods_api.clone(), of_jobset(name)).await;
    let api = jobsets(&c);
    api.create(&PostParams::default(), &js).await.unwrap();
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let run_of = |p: &Pod| p.metadata.annotations.as_ref().and_then(|a| a.get(EXECUTION_ATTEMPT)).cloned();
    let restarted = wait_jobset(&api, name, "restarted", |j| j.status.as_ref().is_some_and(|s| s.restarts == 1)).await;
    assert_eq!(execution_attempts(&restarted), Some(1));
    wait_for(&pods_api, of_jobset(name), "a running pod of run 1", |p| {
        p.iter().any(|p| running(p) && run_of(p).as_deref() == Some("1"))
    })
    .await;

    let pp = kube::api::PatchParams::default();
    api.patch(name, &pp, &patch_suspend(true)).await.unwrap();
    wait_jobset(&api, name, "Suspended", |j| j.condition_true(COND_SUSPENDED)).await;
    wait_for(&pods_api, of_jobset(name), "no pods", |p| p.is_empty()).await;
    api.patch(name, &pp, &patch_suspend(false)).await.unwrap();
    let resumed = wait_jobset(&api, name, "resumed", |j| execution_attempts(j) == Some(2)).await;
    assert_eq!(resumed.status.as_ref().unwrap().restarts, 1, "a resume is no restart");
    wait_for(&pods_api, of_jobset(name), "a running pod of run 2", |p| {
        p.iter().any(|p| running(p) && run_of(p).as_deref() == Some("2"))
    })
    .await;
    let job = jobs_api(&c).get("ea-w-0").await.unwrap();
    let job_ann = job.metadata.annotations.as_ref().and_then(|a| a.get(EXECUTION_ATTEMPT)).cloned();
    assert_eq!(job_ann.as_deref(), Some("2"), "the Job carries its run too");

    // Every pod ever seen: (restart-attempt, execution-attempt).
    let seen: std::collections::BTreeSet<(Option<String>, Option<String>)> = pods
        .versions()
        .iter()
        .map(|p| (p.metadata.labels.as_ref().and_then(|l| l.get(RESTART_ATTEMPT)).cloned(), run_of(p)))
        .collect();
    let want = [("0", "0"), ("1", "1"), ("1", "2")].map(|(r, e)| (Some(r.to_string()), Some(e.to_string())));
    assert_eq!(seen, want.into_iter().collect());
    c.shutdown().await;
}

/// KEP-1282's "Example", as written: a JobSet starts and its pods carry `restart-attempt` and
/// `execution-attempt` "0"; Kueue evicts it (`suspend: true`: its pods are deleted) and readmits
/// it (`suspend: false`): the new pods carry `execution-attempt` "1" while `restart-attempt`
/// stays "0".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kep_1282_example_an_eviction_and_readmission_begin_execution_attempt_1_and_keep_restart_attempt_0() {
    use k8s_openapi::api::core::v1::Pod;
    let c = cluster(2).await;
    let name = "kep1282";
    let js = jobset_of(name, 2, 1, &[("duration", "forever")], json!({}));
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let pods = record(pods_api.clone(), of_jobset(name)).await;
    let api = jobsets(&c);
    api.create(&PostParams::default(), &js).await.unwrap();
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let attempts = |p: &Pod| {
        let restart = p.metadata.labels.as_ref().and_then(|l| l.get(RESTART_ATTEMPT)).cloned();
        let run = p.metadata.annotations.as_ref().and_then(|a| a.get(EXECUTION_ATTEMPT)).cloned();
        (restart.unwrap_or_default(), run.unwrap_or_default())
    };
    let first = wait_jobset(&api, name, "first run", |j| execution_attempts(j) == Some(0)).await;
    assert_eq!(first.status.as_ref().unwrap().restarts, 0);
    wait_for(&pods_api, of_jobset(name), "two running pods of run 0", |p| {
        p.len() == 2 && p.iter().all(|p| running(p) && attempts(p) == ("0".into(), "0".into()))
    })
    .await;

    // Preemption (eviction), then resumed execution.
    let pp = kube::api::PatchParams::default();
    api.patch(name, &pp, &patch_suspend(true)).await.unwrap();
    wait_for(&pods_api, of_jobset(name), "no pods", |p| p.is_empty()).await;
    let suspended = wait_jobset(&api, name, "Suspended", |j| j.condition_true(COND_SUSPENDED)).await;
    assert_eq!(execution_attempts(&suspended), Some(0), "an eviction begins no run");
    api.patch(name, &pp, &patch_suspend(false)).await.unwrap();
    let resumed = wait_jobset(&api, name, "resumed", |j| execution_attempts(j) == Some(1)).await;
    assert_eq!(resumed.status.as_ref().unwrap().restarts, 0, "restart-attempt remains 0");
    wait_for(&pods_api, of_jobset(name), "two running pods of run 1", |p| {
        p.len() == 2 && p.iter().all(|p| running(p) && attempts(p) == ("0".into(), "1".into()))
    })
    .await;
    let seen: std::collections::BTreeSet<(String, String)> = pods.versions().iter().map(attempts).collect();
    let want = [("0", "0"), ("0", "1")].map(|(r, e)| (r.to_string(), e.to_string()));
    assert_eq!(seen, want.into_iter().collect(), "(restart-attempt, execution-attempt) of every pod");
    c.shutdown().await;
}

/// The KEP's test plan: a JobSet created suspended has never run, so `executionAttempts` stays
/// unset (and its suspended Jobs carry "0", the KEP's default for nil) until its first resume
/// starts run 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_created_suspended_has_no_execution_attempts_until_its_first_resume_starts_run_0() {
    let c = cluster(1).await;
    let name = "late";
    let js = jobset_of(name, 1, 1, &[("duration", "forever")], json!({"suspend": true}));
    let api = jobsets(&c);
    api.create(&PostParams::default(), &js).await.unwrap();
    let jobs = wait_for(&jobs_api(&c), of_jobset(name), "a suspended Job", |j| {
        j.len() == 1 && j[0].spec.as_ref().and_then(|s| s.suspend) == Some(true)
    })
    .await;
    let run_of_job = jobs[0].metadata.annotations.as_ref().and_then(|a| a.get(EXECUTION_ATTEMPT));
    assert_eq!(run_of_job.map(String::as_str), Some("0"));
    let suspended = wait_jobset(&api, name, "Suspended", |j| j.condition_true(COND_SUSPENDED)).await;
    assert_eq!(execution_attempts(&suspended), None, "never ran");
    api.patch(name, &Default::default(), &patch_suspend(false)).await.unwrap();
    let resumed = wait_jobset(&api, name, "first run", |j| execution_attempts(j).is_some()).await;
    assert_eq!(execution_attempts(&resumed), Some(0), "the first resume starts run 0, not 1");
    c.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The JobSet's activeDeadlineSeconds (KEP-1186).
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_past_its_active_deadline_fails_and_its_jobs_and_pods_are_removed() {
    use k8s_openapi::api::core::v1::Pod;
    let c = cluster(2).await;
    let name = "deadline";
    let sim = [("duration", "forever")];
    let js = jobset_of(name, 2, 1, &sim, json!({"failurePolicy": {"maxRestarts": 3}}));
    jobsets(&c).create(&PostParams::default(), &js).await.unwrap();
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    wait_for(&pods_api, of_jobset(name), "two running pods", |p| p.iter().filter(|p| running(p)).count() == 2).await;
    // The field is mutable: set on the running JobSet (so a loaded machine cannot pass the
    // deadline before the pods run), it counts from the JobSet's start.
    let deadline = json!({"spec": {"activeDeadlineSeconds": 1}});
    jobsets(&c).patch(name, &Default::default(), &kube::api::Patch::Merge(&deadline)).await.unwrap();
    // No event comes from a wedged JobSet: only the controller's requeue can fail it.
    let failed = wait_jobset(&jobsets(&c), name, "Failed", |j| j.condition_true(COND_FAILED)).await;
    let cond = failed.condition(COND_FAILED).unwrap();
    assert_eq!(
        (cond.reason.as_str(), cond.message.as_str()),
        (REASON_DEADLINE_EXCEEDED, "JobSet was active for longer than the specified deadline of 1s")
    );
    let status = failed.status.as_ref().unwrap();
    assert_eq!((status.terminal_state.as_str(), status.restarts), ("Failed", 0));
    let start = status.start_time.as_ref().expect("the deadline's start is recorded").0;
    let failed_at = cond.last_transition_time.0;
    assert!(failed_at >= start + jiff::SignedDuration::from_secs(1), "failed at {failed_at}, started at {start}");
    wait_for(&jobs_api(&c), of_jobset(name), "no Jobs", |j| j.is_empty()).await;
    wait_for(&pods_api, of_jobset(name), "no pods", |p| p.is_empty()).await;

    // The KEP's metric, counted before the controller sends the failure's event.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(c.client());
    wait_for(&events, Default::default(), "the DeadlineExceeded event", |es| {
        es.iter().any(|e| e.reason.as_deref() == Some(REASON_DEADLINE_EXCEEDED))
    })
    .await;
    let metrics = c.client().request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let series = format!(r#"jobset_active_deadline_exceeded_total{{jobset_name="{name}",namespace="default"}} 1"#);
    assert!(metrics.contains(&series), "{series} not in\n{metrics}");

    // The KEP's printer column: `StartTime`, a date (an age, as `Age`).
    let table = http::Request::get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets")
        .header(http::header::ACCEPT, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value = serde_json::from_str(&c.client().request_text(table).await.unwrap()).unwrap();
    let columns = table["columnDefinitions"].as_array().unwrap();
    let at = columns.iter().position(|col| col["name"] == "StartTime").expect("a StartTime column");
    assert_eq!(columns[at]["type"], "date");
    let cell = &table["rows"][0]["cells"][at];
    assert!(cell.as_str().is_some_and(|age| age.ends_with('s') && age != "<unknown>"), "StartTime cell {cell}");
    c.shutdown().await;
}
