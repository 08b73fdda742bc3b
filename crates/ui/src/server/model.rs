//! What the web view shows, computed from the objects it read (pure, so unit-tested here): a
//! row per JobSet and AppWrapper on the overview, and a JobSet's replicated jobs, Jobs and pods
//! on its page (its restarts come from the timeline, [`crate::timeline`]). The JSON routes serve
//! these as they are.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jobset_api::appwrapper::AppWrapper;
use jobset_api::jobset::keys;
use jobset_api::jobset::types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Serialize;

/// The Job label holding a pod's completion index (Kubernetes' own).
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The overview: every JobSet and AppWrapper.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    pub jobsets: Vec<JobSetRow>,
    pub appwrappers: Vec<AppWrapperRow>,
    /// Why AppWrappers could not be listed (their CRD missing from a cluster, RBAC), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appwrappers_error: Option<String>,
}

/// One JobSet, in brief.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetRow {
    pub namespace: String,
    pub name: String,
    pub status: &'static str,
    pub restarts: i32,
    pub restarts_count_towards_max: i32,
    /// Jobs ready or succeeded, of the Jobs the spec asks for.
    pub jobs_ready: i32,
    pub jobs_wanted: i32,
    /// The last restart's duration (`status.restartHistory[-1].duration`), once it is over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<Timestamp>,
}

/// One AppWrapper, in brief.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppWrapperRow {
    pub namespace: String,
    pub name: String,
    /// `status.phase`, empty before the controller's first reconcile.
    pub phase: String,
    /// Upstream's `status.resettingCount`.
    pub retries: i32,
    pub components: Vec<ComponentRef>,
}

/// A wrapped object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentRef {
    pub kind: String,
    pub name: String,
}

/// A JobSet's page.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub jobset: JobSetRow,
    pub strategy: &'static str,
    pub suspended: bool,
    pub conditions: Vec<ConditionRow>,
    pub replicated_jobs: Vec<ReplicatedJobRow>,
    pub jobs: Vec<JobRow>,
    /// The first pods (by Job and completion index), at most the page's limit.
    pub pods: Vec<PodRow>,
    /// How many pods the JobSet has (more than `pods` holds when over the limit).
    pub pods_total: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: Timestamp,
}

/// A replicated job: the spec's replicas and the status' Job counts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobRow {
    pub name: String,
    pub replicas: i32,
    pub ready: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    pub suspended: i32,
    /// The replicated job's own restarts (`RestartReplicatedJob` actions).
    pub restarts: i32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRow {
    pub name: String,
    pub replicated_job: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    /// The JobSet restart attempt the Job belongs to (its `restart-attempt` label).
    pub attempt: String,
    pub state: &'static str,
    pub active: i32,
    pub ready: i32,
    pub succeeded: i32,
    pub failed: i32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    pub name: String,
    pub job: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    /// Terminating, the pod's status reason (Evicted, ...), or its phase.
    pub state: String,
    /// Ready containers / containers.
    pub ready: String,
    /// Container restarts (in-place restarts included).
    pub restarts: i32,
    pub node: String,
    /// The in-place restart attempt its agent reported (annotation), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_place_attempt: Option<String>,
}

/// The overview of `jobsets` and `appwrappers` (or why those could not be listed), by
/// namespace and name.
pub fn overview(jobsets: &[JobSet], appwrappers: Result<&[AppWrapper], String>) -> Overview {
    let mut rows: Vec<JobSetRow> = jobsets.iter().map(jobset_row).collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let (mut wrappers, appwrappers_error) = match appwrappers {
        Ok(list) => (list.iter().map(appwrapper_row).collect::<Vec<_>>(), None),
        Err(e) => (Vec::new(), Some(e)),
    };
    wrappers.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Overview { jobsets: rows, appwrappers: wrappers, appwrappers_error }
}

/// A JobSet in brief.
pub fn jobset_row(js: &JobSet) -> JobSetRow {
    let status = js.status.clone().unwrap_or_default();
    let (jobs_ready, jobs_wanted) = job_counts(js);
    JobSetRow {
        namespace: js.namespace().to_string(),
        name: js.name().to_string(),
        status: jobset_status(js),
        restarts: status.restarts,
        restarts_count_towards_max: status.restarts_count_towards_max,
        jobs_ready,
        jobs_wanted,
        last_restart: status.restart_history.last().and_then(|r| r.duration.clone()),
        created: js.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// A word for where a JobSet is: Completed or Failed (its terminal condition), Suspended,
/// Restarting (a restart neither over nor superseded), Running (every wanted Job ready or
/// succeeded) or Starting.
pub fn jobset_status(js: &JobSet) -> &'static str {
    let status = js.status.clone().unwrap_or_default();
    let holds = |t: &str| status.conditions.iter().any(|c| c.type_ == t && c.status == "True");
    if holds(keys::COND_COMPLETED) {
        "Completed"
    } else if holds(keys::COND_FAILED) {
        "Failed"
    } else if js.suspended() || holds(keys::COND_SUSPENDED) {
        "Suspended"
    } else if status.restart_history.iter().any(|r| r.running_at.is_none() && !r.superseded) {
        "Restarting"
    } else if all_jobs_ready(js) {
        "Running"
    } else {
        "Starting"
    }
}

/// Jobs ready or succeeded, and Jobs the spec asks for.
fn job_counts(js: &JobSet) -> (i32, i32) {
    let wanted = js.spec.replicated_jobs.iter().map(|r| r.replicas).sum();
    let status = js.status.as_ref();
    let ready = status.map_or(0, |s| s.replicated_jobs_status.iter().map(|r| r.ready + r.succeeded).sum());
    (ready, wanted)
}

/// Whether every Job the spec asks for is ready or succeeded.
fn all_jobs_ready(js: &JobSet) -> bool {
    let (ready, wanted) = job_counts(js);
    ready >= wanted
}

fn appwrapper_row(aw: &AppWrapper) -> AppWrapperRow {
    let status = aw.status.clone().unwrap_or_default();
    let components = aw
        .spec
        .components
        .iter()
        .enumerate()
        .map(|(i, c)| match status.component_status.get(i).filter(|s| !s.name.is_empty()) {
            Some(s) => ComponentRef { kind: s.kind.clone(), name: s.name.clone() },
            None => {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                ComponentRef { kind: text(&c.template["kind"]), name: text(&c.template["metadata"]["name"]) }
            }
        })
        .collect();
    AppWrapperRow {
        namespace: aw.metadata.namespace.clone().unwrap_or_default(),
        name: aw.metadata.name.clone().unwrap_or_default(),
        phase: aw.phase().map(|p| p.as_str().to_string()).unwrap_or_default(),
        retries: status.resetting_count,
        components,
    }
}

/// Whether a child (Job or pod) belongs to `js`: a child of an earlier JobSet of the same name
/// (being garbage collected) carries another uid.
fn owned_by(meta: &ObjectMeta, js: &JobSet) -> bool {
    let uid = meta.labels.as_ref().and_then(|l| l.get(keys::JOBSET_UID));
    match (uid, &js.metadata.uid) {
        (Some(child), Some(parent)) => child == parent,
        _ => true,
    }
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// A JobSet's page from the JobSet, its Jobs and its pods; at most `max_pods` pod rows.
pub fn detail(js: &JobSet, jobs: &[Job], pods: &[Pod], max_pods: usize) -> Detail {
    let status = js.status.clone().unwrap_or_default();
    let by_name: BTreeMap<&str, &jobset_api::jobset::types::ReplicatedJobStatus> =
        status.replicated_jobs_status.iter().map(|r| (r.name.as_str(), r)).collect();
    let replicated_jobs = js
        .spec
        .replicated_jobs
        .iter()
        .map(|rj| {
            let s = by_name.get(rj.name.as_str());
            let count = |f: fn(&jobset_api::jobset::types::ReplicatedJobStatus) -> i32| s.map_or(0, |s| f(s));
            ReplicatedJobRow {
                name: rj.name.clone(),
                replicas: rj.replicas,
                ready: count(|s| s.ready),
                succeeded: count(|s| s.succeeded),
                failed: count(|s| s.failed),
                active: count(|s| s.active),
                suspended: count(|s| s.suspended),
                restarts: count(|s| s.restarts),
            }
        })
        .collect();
    let mut job_rows: Vec<JobRow> = jobs.iter().filter(|j| owned_by(&j.metadata, js)).map(job_row).collect();
    job_rows.sort_by(|a, b| (&a.replicated_job, a.index, &a.name).cmp(&(&b.replicated_job, b.index, &b.name)));
    let mut pod_rows: Vec<PodRow> = pods.iter().filter(|p| owned_by(&p.metadata, js)).map(pod_row).collect();
    pod_rows.sort_by(|a, b| (&a.job, a.index, &a.name).cmp(&(&b.job, b.index, &b.name)));
    let pods_total = pod_rows.len();
    pod_rows.truncate(max_pods);
    Detail {
        jobset: jobset_row(js),
        strategy: js.restart_strategy().as_str(),
        suspended: js.suspended(),
        conditions: status.conditions.iter().map(condition_row).collect(),
        replicated_jobs,
        jobs: job_rows,
        pods: pod_rows,
        pods_total,
    }
}

fn condition_row(c: &Condition) -> ConditionRow {
    ConditionRow {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_transition: c.last_transition_time.0,
    }
}

fn job_row(job: &Job) -> JobRow {
    let status = job.status.clone().unwrap_or_default();
    let holds = |t: &str| status.conditions.iter().flatten().any(|c| c.type_ == t && c.status == "True");
    let active = status.active.unwrap_or(0);
    let state = if holds("Failed") {
        "Failed"
    } else if holds("Complete") {
        "Complete"
    } else if holds("Suspended") {
        "Suspended"
    } else if job.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else if active > 0 {
        "Running"
    } else {
        "Pending"
    };
    JobRow {
        name: job.metadata.name.clone().unwrap_or_default(),
        replicated_job: label(&job.metadata, keys::REPLICATED_JOB_NAME).unwrap_or_default().to_string(),
        index: label(&job.metadata, keys::JOB_INDEX).and_then(|i| i.parse().ok()),
        attempt: label(&job.metadata, keys::RESTART_ATTEMPT).unwrap_or_default().to_string(),
        state,
        active,
        ready: status.ready.unwrap_or(0),
        succeeded: status.succeeded.unwrap_or(0),
        failed: status.failed.unwrap_or(0),
    }
}

fn pod_row(pod: &Pod) -> PodRow {
    let status = pod.status.clone().unwrap_or_default();
    let containers = status.container_statuses.unwrap_or_default();
    let state = if pod.metadata.deletion_timestamp.is_some() {
        "Terminating".to_string()
    } else if let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
        reason
    } else {
        status.phase.unwrap_or_else(|| "Pending".into())
    };
    let wanted = pod.spec.as_ref().map_or(containers.len(), |s| s.containers.len());
    let job = label(&pod.metadata, "batch.kubernetes.io/job-name")
        .or_else(|| label(&pod.metadata, "job-name"))
        .unwrap_or_default();
    PodRow {
        name: pod.metadata.name.clone().unwrap_or_default(),
        job: job.to_string(),
        index: label(&pod.metadata, COMPLETION_INDEX).and_then(|i| i.parse().ok()),
        state,
        ready: format!("{}/{wanted}", containers.iter().filter(|c| c.ready).count()),
        restarts: containers.iter().map(|c| c.restart_count).sum(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        in_place_attempt: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::IN_PLACE_RESTART_ATTEMPT))
            .cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jobset(value: serde_json::Value) -> JobSet {
        serde_json::from_value(value).unwrap()
    }

    fn two_by_two(status: serde_json::Value) -> JobSet {
        jobset(json!({
            "metadata": {"name": "js", "namespace": "ns", "uid": "u1"},
            "spec": {"replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {}},
                {"name": "workers", "replicas": 2, "template": {}},
            ]},
            "status": status,
        }))
    }

    fn record(times: serde_json::Value) -> serde_json::Value {
        let mut r = json!({
            "attempt": 1, "strategy": "Recreate", "scope": "JobSet",
            "trigger": {"reason": "BackoffLimitExceeded", "action": "RestartJobSet", "countsTowardsMax": true},
        });
        r.as_object_mut().unwrap().extend(times.as_object().unwrap().clone());
        r
    }

    #[test]
    fn status_says_terminal_then_suspended_then_restarting_then_running_or_starting() {
        let cond = |t: &str| json!({"conditions": [{"type": t, "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert_eq!(jobset_status(&two_by_two(cond("Completed"))), "Completed");
        assert_eq!(jobset_status(&two_by_two(cond("Failed"))), "Failed");
        assert_eq!(jobset_status(&two_by_two(cond("Suspended"))), "Suspended");
        let open = json!({"restartHistory": [record(json!({"decidedAt": "2026-01-01T00:00:01.000000Z"}))]});
        assert_eq!(jobset_status(&two_by_two(open)), "Restarting");
        let superseded = json!({"restartHistory": [record(json!({"decidedAt": "2026-01-01T00:00:01.000000Z", "superseded": true}))]});
        assert_eq!(jobset_status(&two_by_two(superseded)), "Starting", "a superseded restart is not in progress");
        let ready = json!({"replicatedJobsStatus": [
            {"name": "leader", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
            {"name": "workers", "ready": 1, "succeeded": 1, "failed": 0, "active": 1, "suspended": 0},
        ]});
        assert_eq!(jobset_status(&two_by_two(ready)), "Running");
        assert_eq!(jobset_status(&two_by_two(json!({}))), "Starting");
    }

    #[test]
    fn detail_sorts_children_keeps_only_this_jobsets_and_caps_the_pods() {
        let js = two_by_two(json!({"replicatedJobsStatus": [
            {"name": "workers", "ready": 1, "succeeded": 0, "failed": 1, "active": 2, "suspended": 0, "restarts": 3},
        ]}));
        let job = |name: &str, rj: &str, index: &str, uid: &str| -> Job {
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {
                keys::REPLICATED_JOB_NAME: rj, keys::JOB_INDEX: index, keys::JOBSET_UID: uid, keys::RESTART_ATTEMPT: "0",
            }}, "status": {"active": 1, "ready": 1}}))
            .unwrap()
        };
        let jobs = [
            job("js-workers-1", "workers", "1", "u1"),
            job("js-workers-0", "workers", "0", "u1"),
            job("js-leader-0", "leader", "0", "u1"),
            job("old-workers-0", "workers", "0", "u0"),
        ];
        let pod = |name: &str, job: &str, index: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-name": job, COMPLETION_INDEX: index}},
                "spec": {"nodeName": "n0", "containers": [{"name": "c"}]},
                "status": {"phase": phase, "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2, "image": "i", "imageID": ""}]},
            }))
            .unwrap()
        };
        let pods = [
            pod("b", "js-workers-0", "1", "Running"),
            pod("a", "js-workers-0", "0", "Running"),
            pod("c", "js-leader-0", "0", "Pending"),
        ];
        let d = detail(&js, &jobs, &pods, 2);
        let names: Vec<&str> = d.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names,
            ["js-leader-0", "js-workers-0", "js-workers-1"],
            "by replicated job and index; another JobSet's Job left out"
        );
        assert_eq!(d.jobs[0].state, "Running");
        assert_eq!(
            d.replicated_jobs[1],
            ReplicatedJobRow {
                name: "workers".into(),
                replicas: 2,
                ready: 1,
                succeeded: 0,
                failed: 1,
                active: 2,
                suspended: 0,
                restarts: 3
            }
        );
        assert_eq!(d.replicated_jobs[0].ready, 0, "a replicated job without status counts nothing");
        assert_eq!(d.pods_total, 3);
        let pods: Vec<(&str, &str, &str, i32)> =
            d.pods.iter().map(|p| (p.name.as_str(), p.state.as_str(), p.ready.as_str(), p.restarts)).collect();
        assert_eq!(pods, [("c", "Pending", "1/1", 2), ("a", "Running", "1/1", 2)], "by Job then index, capped at 2");
    }

    #[test]
    fn job_state_prefers_its_terminal_conditions() {
        let job = |conditions: serde_json::Value, active: i32| -> Job {
            serde_json::from_value(
                json!({"metadata": {"name": "j"}, "status": {"active": active, "conditions": conditions}}),
            )
            .unwrap()
        };
        let cond = |t: &str| json!([{"type": t, "status": "True"}]);
        assert_eq!(job_row(&job(cond("Failed"), 1)).state, "Failed");
        assert_eq!(job_row(&job(cond("Complete"), 0)).state, "Complete");
        assert_eq!(job_row(&job(cond("Suspended"), 0)).state, "Suspended");
        assert_eq!(job_row(&job(json!([{"type": "Failed", "status": "False"}]), 1)).state, "Running");
        assert_eq!(job_row(&job(json!([]), 0)).state, "Pending");
    }

    #[test]
    fn overview_sorts_and_names_wrapped_components_from_status_else_template() {
        let aw: AppWrapper = serde_json::from_value(json!({
            "metadata": {"name": "aw", "namespace": "ns"},
            "spec": {"components": [
                {"template": {"kind": "JobSet", "metadata": {"name": "from-template"}}},
                {"template": {"kind": "Job", "metadata": {"generateName": "g-"}}},
            ]},
            "status": {"phase": "Running", "resettingCount": 2, "componentStatus": [
                {"name": "", "kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2"},
                {"name": "g-x1", "kind": "Job", "apiVersion": "batch/v1"},
            ]},
        }))
        .unwrap();
        let b = jobset(json!({"metadata": {"name": "b", "namespace": "a"}, "spec": {}}));
        let a = jobset(json!({"metadata": {"name": "a", "namespace": "b"}, "spec": {}}));
        let o = overview(&[a, b], Ok(std::slice::from_ref(&aw)));
        let names: Vec<String> = o.jobsets.iter().map(|r| format!("{}/{}", r.namespace, r.name)).collect();
        assert_eq!(names, ["a/b", "b/a"]);
        let w = &o.appwrappers[0];
        assert_eq!((w.phase.as_str(), w.retries), ("Running", 2));
        assert_eq!(
            w.components,
            [
                ComponentRef { kind: "JobSet".into(), name: "from-template".into() },
                ComponentRef { kind: "Job".into(), name: "g-x1".into() }
            ]
        );
        let failed = overview(&[], Err("the server could not find the requested resource".into()));
        assert_eq!(failed.appwrappers_error.as_deref(), Some("the server could not find the requested resource"));
    }
}
