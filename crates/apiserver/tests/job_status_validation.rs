//! Writes to `jobs/status` are validated as kube-apiserver's Job status strategy does: terminal
//! conditions need their interim ones and never go away, counters never decrease, finished Jobs
//! have no pods left, and the start and completion times follow upstream's rules. The Jobs are
//! managed by another controller (`spec.managedBy`), whose status writes these rules police.

mod common;

use common::{Harness, Transport, harness};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

/// Creates Job `name`, managed by another controller, suspended or not.
async fn managed_job(h: &Harness, name: &str, suspend: bool) -> Api<Job> {
    let jobs: Api<Job> = Api::default_namespaced(h.client.clone());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"managedBy": "example.com/other", "suspend": suspend,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    jobs
}

fn cond(type_: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": T1})
}

/// Merge-patches the status of Job `name`.
async fn patch(jobs: &Api<Job>, name: &str, status: Value) -> kube::Result<Job> {
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await
}

/// The 422 message of a rejected write, or a panic naming what was stored instead.
fn rejected(what: &str, r: kube::Result<Job>) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 422 && s.reason == "Invalid" => s.message,
        Ok(job) => panic!("{what}: want a 422, the status was stored: {:?}", job.status),
        Err(e) => panic!("{what}: want a 422, got {e:?}"),
    }
}

fn status_of(job: &Job) -> Value {
    serde_json::to_value(job.status.as_ref().unwrap()).unwrap()
}

#[tokio::test]
async fn forbidden_status_writes_of_a_running_job_get_kube_apiserver_errors() {
    let h = harness(Transport::InProcess).await;
    let jobs = managed_job(&h, "run", false).await;
    let running = patch(&jobs, "run", json!({"startTime": T0, "active": 2, "ready": 1, "failed": 1})).await.unwrap();
    let prefix = "Job.batch \"run\" is invalid: ";
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "Failed without FailureTarget",
            json!({"active": 0, "ready": 0, "conditions": [cond("Failed")]}),
            "status.conditions: Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
        ),
        (
            "Complete without SuccessCriteriaMet",
            json!({"active": 0, "ready": 0, "succeeded": 1, "completionTime": T1, "conditions": [cond("Complete")]}),
            "status.conditions: Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
        ),
        (
            "a decreasing failed counter",
            json!({"failed": 0}),
            "status.failed: Invalid value: 0: cannot decrease the failed counter",
        ),
        (
            "active pods on a finished Job",
            json!({"ready": 0, "conditions": [cond("FailureTarget"), cond("Failed")]}),
            "status.active: Invalid value: 2: active>0 is invalid for finished job",
        ),
        (
            "terminating pods on a finished Job",
            json!({"active": 0, "ready": 0, "terminating": 2, "conditions": [cond("FailureTarget"), cond("Failed")]}),
            "status.terminating: Invalid value: 2: terminating>0 is invalid for finished job",
        ),
        (
            "a completion time without Complete",
            json!({"completionTime": T1}),
            "status.completionTime: Invalid value: \"2026-01-01T00:01:00Z\": cannot set completionTime when there is no Complete=True condition",
        ),
        (
            "a new start time while unsuspended",
            json!({"startTime": T1}),
            "status.startTime: Invalid value: \"2026-01-01T00:01:00Z\": field is immutable for unsuspended job once set",
        ),
        (
            "more ready than active pods",
            json!({"ready": 3}),
            "status.ready: Invalid value: 3: cannot set more ready pods than active",
        ),
    ];
    for (what, status, message) in cases {
        assert_eq!(rejected(what, patch(&jobs, "run", status).await), format!("{prefix}{message}"), "{what}");
        assert_eq!(status_of(&jobs.get("run").await.unwrap()), status_of(&running), "{what}: the status is kept");
    }

    // The way upstream's Job controller fails a Job: FailureTarget first, then Failed.
    patch(&jobs, "run", json!({"active": 0, "ready": 0, "terminating": 2, "conditions": [cond("FailureTarget")]}))
        .await
        .unwrap();
    let failed = patch(
        &jobs,
        "run",
        json!({"terminating": 0, "failed": 3, "conditions": [cond("FailureTarget"), cond("Failed")]}),
    )
    .await
    .unwrap();
    let mut revived = failed.clone();
    let conditions = revived.status.as_mut().unwrap().conditions.as_mut().unwrap();
    conditions.iter_mut().filter(|c| c.type_ == "Failed").for_each(|c| c.status = "False".into());
    let message = rejected("Failed turned False", jobs.replace_status("run", &PostParams::default(), &revived).await);
    assert_eq!(
        message,
        format!("{prefix}status.conditions: Invalid value: cannot disable the terminal Failed=True condition")
    );
    let message = rejected("conditions dropped", patch(&jobs, "run", json!({"conditions": []})).await);
    assert_eq!(
        message,
        format!(
            "{prefix}[status.conditions: Invalid value: cannot disable the terminal Failed=True condition, \
             status.conditions: Invalid value: cannot disable the terminal FailureTarget=True condition]"
        )
    );
}

#[tokio::test]
async fn a_complete_job_keeps_its_success_criteria_and_completion_time() {
    let h = harness(Transport::InProcess).await;
    let jobs = managed_job(&h, "done", false).await;
    patch(&jobs, "done", json!({"startTime": T1, "active": 1})).await.unwrap();
    let prefix = "Job.batch \"done\" is invalid: ";
    let message = rejected(
        "completion before start",
        patch(
            &jobs,
            "done",
            json!({"active": 0, "succeeded": 1, "completionTime": T0,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
        )
        .await,
    );
    assert_eq!(
        message,
        format!(
            "{prefix}status.completionTime: Invalid value: \"2026-01-01T00:00:00Z\": must be equal to or after `startTime`"
        )
    );
    let message = rejected(
        "Complete without a completion time",
        patch(
            &jobs,
            "done",
            json!({"active": 0, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
        )
        .await,
    );
    assert_eq!(
        message,
        format!("{prefix}status.completionTime: Required value: completionTime is required for Complete jobs")
    );

    // SuccessCriteriaMet then Complete, as upstream's Job controller does.
    patch(&jobs, "done", json!({"active": 0, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet")]}))
        .await
        .unwrap();
    patch(
        &jobs,
        "done",
        json!({"completionTime": "2026-01-01T00:02:00Z", "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
    )
    .await
    .unwrap();
    let message = rejected(
        "a new completion time",
        patch(&jobs, "done", json!({"completionTime": "2026-01-01T00:03:00Z"})).await,
    );
    assert_eq!(
        message,
        format!("{prefix}status.completionTime: Invalid value: \"2026-01-01T00:03:00Z\": field is immutable")
    );
    let message = rejected("a decreasing succeeded counter", patch(&jobs, "done", json!({"succeeded": 0})).await);
    assert_eq!(message, format!("{prefix}status.succeeded: Invalid value: 0: cannot decrease the succeeded counter"));
}

#[tokio::test]
async fn the_start_time_of_a_suspended_job_may_be_cleared_and_of_a_running_one_not() {
    let h = harness(Transport::InProcess).await;
    let jobs = managed_job(&h, "s", true).await;
    patch(&jobs, "s", json!({"startTime": T0})).await.unwrap();
    // What the JobSet controller does before it resumes a Job.
    let cleared = patch(&jobs, "s", json!({"startTime": null})).await.unwrap();
    assert_eq!(cleared.status.unwrap().start_time, None);

    jobs.patch("s", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    patch(&jobs, "s", json!({"startTime": T1})).await.unwrap();
    let message = rejected("start time cleared while running", patch(&jobs, "s", json!({"startTime": null})).await);
    assert_eq!(
        message,
        "Job.batch \"s\" is invalid: status.startTime: Invalid value: null: field is immutable for unsuspended job once set"
    );
}
