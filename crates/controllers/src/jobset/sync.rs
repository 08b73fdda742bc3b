//! One reconcile of a JobSet as a pure function (upstream's `reconcile`, step by step): from the
//! JobSet, its child Jobs and its pods to a [`Plan`] that the async shell carries out.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use jobset_api::jobset::keys::*;
use jobset_api::jobset::{Features, JobSet, JobSetStatus, ReplicatedJob, RestartStrategy};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use super::children::{self, Child, Classified};
use super::conditions::Cond;
use super::construct::construct_job;
use super::failure_policy::{self, FailedJob};
use super::in_place_restart::{self, Outcome, Tally};
use super::startup_policy::{all_replicas_started, depends_on_satisfied, depends_on_unreachable, in_order};
use super::success_policy;
use super::ttl::{self, Ttl};
use super::update::Update;

pub struct SyncInput<'a> {
    pub js: &'a JobSet,
    /// Jobs whose controller is this JobSet.
    pub jobs: Vec<&'a Job>,
    /// The JobSet's pods: BlockingRecreate waits for those of earlier attempts. Other restart
    /// strategies need none.
    pub pods: Vec<&'a Pod>,
    /// The tally of the JobSet's pods that InPlaceRestart decides from.
    pub in_place: &'a Tally,
    pub now: Timestamp,
    pub features: &'a Features,
}

/// A merge patch for one child Job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPatch {
    pub name: String,
    pub patch: Value,
    /// Clear `status.startTime` through the status subresource before patching: Kubernetes lets a
    /// suspended Job's scheduling directives change only while `startTime` is unset.
    pub clear_start_time: bool,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub update: Update,
    /// Jobs to delete with foreground propagation.
    pub delete_jobs: Vec<String>,
    pub create_jobs: Vec<Value>,
    pub patch_jobs: Vec<JobPatch>,
    /// The headless Service to create when absent.
    pub service: Option<Value>,
    /// Claims to create when absent.
    pub claims: Vec<Value>,
    pub delete_jobset: bool,
    pub requeue_after: Option<Duration>,
}

impl Plan {
    fn new(update: Update) -> Plan {
        Plan {
            update,
            delete_jobs: vec![],
            create_jobs: vec![],
            patch_jobs: vec![],
            service: None,
            claims: vec![],
            delete_jobset: false,
            requeue_after: None,
        }
    }
}

/// Whether another controller owns this JobSet (`spec.managedBy`).
pub fn managed_elsewhere(js: &JobSet) -> bool {
    js.spec.managed_by.as_deref().is_some_and(|m| m != JOBSET_CONTROLLER_NAME)
}

pub fn sync(input: &SyncInput) -> Result<Plan, String> {
    let js = input.js;
    let old = js.status.clone().unwrap_or_default();
    let mut plan = Plan::new(Update::new(old.clone(), input.now));
    if managed_elsewhere(js) {
        return Ok(plan);
    }
    let c = children::classify(js, &input.jobs)?;
    let statuses = children::replicated_job_statuses(js, &c, &old.replicated_jobs_status, input.features.restart_job);
    if statuses != old.replicated_jobs_status {
        plan.update.status.replicated_jobs_status = statuses.clone();
        plan.update.mark();
    }

    if js.finished() {
        plan.delete_jobs = c.active.iter().filter(|j| !j.deleting()).map(|j| j.name.to_string()).collect();
        match ttl::decide(js, input.now)? {
            Ttl::Keep => {}
            Ttl::Delete => plan.delete_jobset = true,
            Ttl::RequeueAfter(d) => plan.requeue_after = Some(d),
        }
        return Ok(plan);
    }

    plan.delete_jobs = c.previous.iter().filter(|j| !j.deleting()).map(|j| j.name.to_string()).collect();

    let total: i32 = js.spec.replicated_jobs.iter().map(|r| r.replicas).sum();
    let ready: i32 = statuses.iter().map(|s| s.ready + s.succeeded).sum();
    if !js.suspended() && ready == total {
        plan.update.set(Cond::new(COND_RESTARTING, false, REASON_JOBS_READY, MSG_JOBS_READY));
    }

    // Failed Jobs a FailJob rule already handled stay failed without another decision.
    let left_failed = |j: &Child| {
        let (Some(rj), Some(i)) = (j.rjob, j.index) else { return false };
        statuses.iter().any(|s| s.name == rj && s.failed_job_indexes.contains(&i))
    };
    let unhandled: Vec<FailedJob> = c.failed.iter().filter(|j| !left_failed(j)).filter_map(FailedJob::of).collect();
    if !unhandled.is_empty() {
        failure_policy::execute(js, &unhandled, &mut plan.update)?;
        return Ok(plan);
    }

    if success_policy::satisfied(js, &c.successful) {
        plan.update.set(Cond::new(COND_COMPLETED, true, REASON_ALL_JOBS_COMPLETED, MSG_ALL_JOBS_COMPLETED));
        plan.update.status.terminal_state = COND_COMPLETED.into();
        plan.update.mark();
        plan.update.set(Cond::new(COND_RESTARTING, false, REASON_JOBSET_COMPLETED, MSG_ALL_JOBS_COMPLETED));
        return Ok(plan);
    }

    if let Some(message) = stuck_with_failed_jobs(js, &c, &statuses, left_failed) {
        failure_policy::fail(&mut plan.update, REASON_FAILED_JOBS, message);
        return Ok(plan);
    }

    if js.dns_hostnames() {
        plan.service = Some(headless_service(js));
    }
    plan.claims = claims(js);
    if input.features.elastic_jobset {
        plan.patch_jobs.extend(elastic_patches(js, &c));
    }

    let mut starting = create_jobs(input, &c, &statuses, &mut plan);

    if js.suspended() {
        for j in c.active.iter().filter(|j| j.job.spec.as_ref().and_then(|s| s.suspend) != Some(true)) {
            plan.patch_jobs.push(JobPatch {
                name: j.name.to_string(),
                patch: json!({"spec": {"suspend": true}}),
                clear_start_time: false,
            });
        }
        plan.update.set(Cond::new(COND_SUSPENDED, true, REASON_SUSPENDED, MSG_SUSPENDED));
        if plan.update.status.conditions.iter().any(|x| x.type_ == COND_RESTARTING) {
            plan.update.set(Cond::new(COND_RESTARTING, false, REASON_JOBSET_SUSPENDED, MSG_SUSPENDED));
        }
    } else {
        starting |= resume(js, &c, &statuses, &mut plan);
    }
    // Upstream returns before this while an InOrder startup waits for a replicated job.
    if js.restart_strategy() == RestartStrategy::InPlaceRestart && input.features.in_place_restart && !starting {
        in_place(js, input.in_place, &mut plan.update)?;
    }
    Ok(plan)
}

/// upstream's `reconcileInPlaceRestart`, with faster failure detection (see [`in_place_restart`]).
fn in_place(js: &JobSet, tally: &Tally, u: &mut Update) -> Result<(), String> {
    let d = in_place_restart::decide(js, tally)?;
    for (pod, value) in &d.malformed {
        tracing::warn!(jobset = %js.name(), %pod, %value, "ignoring a pod whose {IN_PLACE_RESTART_ATTEMPT} annotation is not a non-negative integer");
    }
    match d.outcome {
        Outcome::Unchanged => {}
        Outcome::ReachedMaxRestarts => {
            failure_policy::fail(u, REASON_REACHED_MAX_RESTARTS, MSG_REACHED_MAX_RESTARTS.into());
        }
        Outcome::Current(a) => {
            u.status.current_in_place_restart_attempt = Some(a);
            u.mark();
        }
        Outcome::Previous(a) => {
            u.status.previous_in_place_restart_attempt = Some(a);
            u.mark();
        }
    }
    Ok(())
}

/// With Jobs left failed by `FailJob`, the JobSet ends once nothing can change any more: no
/// Job of the current attempt is active and every Job that can still be created exists.
fn stuck_with_failed_jobs(
    js: &JobSet,
    c: &Classified,
    statuses: &[jobset_api::jobset::ReplicatedJobStatus],
    left_failed: impl Fn(&Child) -> bool,
) -> Option<String> {
    let mut failed: Vec<&Child> = c.failed.iter().filter(|j| left_failed(j)).collect();
    let position = |j: &Child| js.spec.replicated_jobs.iter().position(|r| Some(r.name.as_str()) == j.rjob);
    failed.sort_by_key(|j| (position(j), j.index));
    let failed: Vec<&str> = failed.into_iter().map(|j| j.name).collect();
    if failed.is_empty() || !c.active.is_empty() {
        return None;
    }
    let expected: i32 = js
        .spec
        .replicated_jobs
        .iter()
        .filter(|rj| !depends_on_unreachable(js, rj, statuses))
        .map(|rj| rj.replicas)
        .sum();
    let existing = c.current().count() as i32;
    (existing >= expected).then(|| format!("{MSG_FAILED_JOBS} (jobs left failed: {})", failed.join(", ")))
}

fn headless_service(js: &JobSet) -> Value {
    let publish = js.spec.network.as_ref().and_then(|n| n.publish_not_ready_addresses).unwrap_or(true);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": js.subdomain(), "namespace": js.namespace(), "ownerReferences": [owner(js)]},
        "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: js.name()}, "publishNotReadyAddresses": publish}
    })
}

fn owner(js: &JobSet) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND, "name": js.name(),
           "uid": js.metadata.uid.clone().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true})
}

/// One claim `<template>-<jobset>` per VolumeClaimPolicy template; `Delete` retention makes the
/// JobSet its owner.
fn claims(js: &JobSet) -> Vec<Value> {
    let mut out = vec![];
    for p in &js.spec.volume_claim_policies {
        let retain = p.retention_policy.as_ref().and_then(|r| r.when_deleted)
            == Some(jobset_api::jobset::RetentionPolicyAction::Retain);
        for t in &p.templates {
            let mut v = serde_json::to_value(t).unwrap_or_default();
            let name = format!("{}-{}", t.metadata.name.clone().unwrap_or_default(), js.name());
            let meta = v.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({})));
            if let Some(Value::Object(m)) = meta {
                m.insert("name".into(), json!(name));
                m.insert("namespace".into(), json!(js.namespace()));
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert(JOBSET_NAME.into(), json!(js.name()));
                }
                if !retain {
                    m.insert("ownerReferences".into(), json!([owner(js)]));
                }
            }
            v["apiVersion"] = json!("v1");
            v["kind"] = json!("PersistentVolumeClaim");
            out.push(v);
        }
    }
    out
}

/// Elastic JobSets: an active Job follows its template's `parallelism`/`completions` when they
/// are set and equal.
fn elastic_patches(js: &JobSet, c: &Classified) -> Vec<JobPatch> {
    let mut out = vec![];
    for j in &c.active {
        let Some(rj) = j.rjob.and_then(|r| js.replicated_job(r)) else { continue };
        let (Some(p), Some(n)) = (rj.template.parallelism(), rj.template.completions()) else { continue };
        let spec = j.job.spec.as_ref();
        if p == n && (spec.and_then(|s| s.parallelism) != Some(p) || spec.and_then(|s| s.completions) != Some(n)) {
            out.push(JobPatch {
                name: j.name.to_string(),
                patch: json!({"spec": {"parallelism": p, "completions": n}}),
                clear_start_time: false,
            });
        }
    }
    out
}

/// upstream's `reconcileReplicatedJobs`: creates missing Jobs in spec order, honouring
/// BlockingRecreate, dependsOn and InOrder startup. Returns whether the startup waits for a
/// replicated job.
fn create_jobs(
    input: &SyncInput,
    c: &Classified,
    statuses: &[jobset_api::jobset::ReplicatedJobStatus],
    plan: &mut Plan,
) -> bool {
    let js = input.js;
    let blocked = js.restart_strategy() == RestartStrategy::BlockingRecreate
        && (!c.previous.is_empty() || input.pods.iter().any(|p| stale_pod(js, p)));
    let ordered = !js.suspended() && in_order(js);
    let (rjs, waiting) = replicated_jobs_to_start(js, statuses, ordered);
    for rj in rjs.into_iter().filter(|_| !blocked) {
        for i in 0..rj.replicas {
            if !c.exists(&jobset_api::jobset::job_name(js.name(), &rj.name, i)) {
                plan.create_jobs.push(construct_job(js, rj, i, input.features.restart_job));
            }
        }
    }
    if waiting {
        plan.update.set(startup_in_progress());
    } else if ordered {
        plan.update.set(Cond::new(COND_STARTUP_COMPLETED, true, REASON_STARTUP_COMPLETED, MSG_STARTUP_COMPLETED));
    }
    waiting
}

/// Whether a pod's labels name an earlier attempt; one whose labels cannot be read does not hold
/// up the next attempt.
fn stale_pod(js: &JobSet, p: &Pod) -> bool {
    let (none, empty) = (JobSetStatus::default(), BTreeMap::new());
    let labels = p.metadata.labels.as_ref().unwrap_or(&empty);
    children::stale(js.status.as_ref().unwrap_or(&none), labels, "pod").unwrap_or(false)
}

/// The replicated jobs a pass acts on, in spec order: those whose `dependsOn` holds, and under
/// InOrder startup only up to the first one not yet started (then `true`: startup goes on).
fn replicated_jobs_to_start<'a>(
    js: &'a JobSet,
    statuses: &[jobset_api::jobset::ReplicatedJobStatus],
    ordered: bool,
) -> (Vec<&'a ReplicatedJob>, bool) {
    let mut out = vec![];
    for rj in &js.spec.replicated_jobs {
        if !depends_on_satisfied(js, rj, statuses) || (ordered && all_replicas_started(rj, statuses)) {
            continue;
        }
        out.push(rj);
        if ordered {
            return (out, true);
        }
    }
    (out, false)
}

fn startup_in_progress() -> Cond {
    Cond::new(COND_STARTUP_IN_PROGRESS, true, REASON_STARTUP_IN_PROGRESS, MSG_STARTUP_IN_PROGRESS)
}

/// upstream's `resumeJobsIfNecessary`: suspended Jobs resume in spec order with their
/// replicated job's pod-template labels, annotations, nodeSelector, tolerations and
/// schedulingGates merged in, after clearing the `status.startTime` of a Job that has started
/// (upstream's `resumeJob`). Returns whether the startup waits for a replicated job.
fn resume(js: &JobSet, c: &Classified, statuses: &[jobset_api::jobset::ReplicatedJobStatus], plan: &mut Plan) -> bool {
    let (rjs, waiting) = replicated_jobs_to_start(js, statuses, in_order(js));
    for rj in rjs {
        let pod = rj.template.pod_template().cloned().unwrap_or_default();
        for j in c.active.iter().filter(|j| j.rjob == Some(rj.name.as_str())) {
            if j.job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
                plan.patch_jobs.push(JobPatch {
                    name: j.name.to_string(),
                    patch: resume_patch(j.job, &pod),
                    clear_start_time: j.job.status.as_ref().is_some_and(|s| s.start_time.is_some()),
                });
            }
        }
    }
    if waiting {
        plan.update.set(startup_in_progress());
    } else {
        plan.update.set(Cond::new(COND_SUSPENDED, false, REASON_RESUMED, MSG_RESUMED));
    }
    waiting
}

fn resume_patch(job: &Job, rj_pod: &Value) -> Value {
    let job_pod = serde_json::to_value(job.spec.as_ref().map(|s| &s.template)).unwrap_or_default();
    let merged_map = |path: [&str; 2]| -> Value {
        let mut m: Map<String, Value> =
            job_pod.get(path[0]).and_then(|x| x.get(path[1])).and_then(Value::as_object).cloned().unwrap_or_default();
        if let Some(t) = rj_pod.get(path[0]).and_then(|x| x.get(path[1])).and_then(Value::as_object) {
            m.extend(t.clone());
        }
        Value::Object(m)
    };
    let union = |key: &str| -> Value {
        let mut list: Vec<Value> =
            job_pod.get("spec").and_then(|s| s.get(key)).and_then(Value::as_array).cloned().unwrap_or_default();
        for t in rj_pod.get("spec").and_then(|s| s.get(key)).and_then(Value::as_array).into_iter().flatten() {
            if !list.contains(t) {
                list.push(t.clone());
            }
        }
        Value::Array(list)
    };
    json!({"spec": {"suspend": false, "template": {
        "metadata": {"labels": merged_map(["metadata", "labels"]), "annotations": merged_map(["metadata", "annotations"])},
        "spec": {"nodeSelector": merged_map(["spec", "nodeSelector"]), "tolerations": union("tolerations"),
                 "schedulingGates": union("schedulingGates")}
    }}})
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::{job, pod};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn js(spec: Value, status: Value) -> JobSet {
        let mut s = json!({"replicatedJobs": [
            {"name": "a", "replicas": 2, "template": {"spec": {"parallelism": 1, "completions": 1,
                "template": {"metadata": {"labels": {"l": "1"}}, "spec": {"nodeSelector": {"zone": "z1"}}}}}},
            {"name": "b", "replicas": 1, "template": {"spec": {"template": {"spec": {}}}}}]});
        s.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        serde_json::from_value(
            json!({"metadata": {"name": "js", "namespace": "ns", "uid": "u"}, "spec": s, "status": status}),
        )
        .unwrap()
    }

    fn plan(js: &JobSet, jobs: &[Job], pods: &[Pod]) -> Plan {
        let features = Features::default();
        sync(&SyncInput {
            js,
            jobs: jobs.iter().collect(),
            pods: pods.iter().collect(),
            in_place: &Tally::of(pods),
            now: Timestamp::from_second(1_000).unwrap(),
            features: &features,
        })
        .unwrap()
    }

    fn created(p: &Plan) -> Vec<&str> {
        p.create_jobs.iter().map(|j| j["metadata"]["name"].as_str().unwrap()).collect()
    }

    fn cond<'a>(p: &'a Plan, t: &str) -> Option<(&'a str, &'a str)> {
        p.update.status.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status.as_str(), c.reason.as_str()))
    }

    #[test]
    fn a_new_jobset_creates_every_job_and_its_headless_service() {
        let p = plan(&js(json!({"network": {"enableDNSHostnames": true}}), json!({})), &[], &[]);
        assert_eq!(created(&p), ["js-a-0", "js-a-1", "js-b-0"]);
        assert_eq!(p.service.as_ref().unwrap()["spec"]["clusterIP"], "None");
        assert!(p.update.changed, "replicatedJobsStatus is written");
    }

    #[test]
    fn a_jobset_managed_elsewhere_is_left_alone() {
        let p = plan(&js(json!({"managedBy": "kueue.x-k8s.io/multikueue"}), json!({})), &[], &[]);
        assert!(p.create_jobs.is_empty() && !p.update.changed);
    }

    #[test]
    fn recreate_deletes_stale_jobs_and_creates_each_name_once_it_is_gone() {
        let jobs = [job("js", "a", 0).attempt(0).obj(), job("js", "a", 1).attempt(1).obj()];
        let p = plan(&js(json!({}), json!({"restarts": 1})), &jobs, &[]);
        assert_eq!(p.delete_jobs, ["js-a-0"]);
        assert_eq!(created(&p), ["js-b-0"], "js-a-0 still exists, js-a-1 is current");
    }

    #[test]
    fn blocking_recreate_creates_nothing_while_a_stale_job_or_pod_exists() {
        let spec = json!({"failurePolicy": {"restartStrategy": "BlockingRecreate"}});
        let stale = [job("js", "a", 0).attempt(0).obj()];
        assert!(plan(&js(spec.clone(), json!({"restarts": 1})), &stale, &[]).create_jobs.is_empty());
        let stale_pod = [pod("js", "js-a-0-0").obj()];
        assert!(plan(&js(spec.clone(), json!({"restarts": 1})), &[], &stale_pod).create_jobs.is_empty());
        let current_pod = [pod("js", "js-a-0-0").label(RESTART_ATTEMPT, "1").obj()];
        let p = plan(&js(spec, json!({"restarts": 1})), &[], &current_pod);
        assert_eq!(created(&p), ["js-a-0", "js-a-1", "js-b-0"]);
    }

    #[test]
    fn a_finished_jobset_deletes_its_active_jobs_and_creates_none() {
        let status = json!({"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let jobs = [job("js", "a", 0).obj(), job("js", "a", 1).complete().obj()];
        let p = plan(&js(json!({}), status), &jobs, &[]);
        assert_eq!(p.delete_jobs, ["js-a-0"]);
        assert!(p.create_jobs.is_empty());
    }

    #[test]
    fn all_jobs_ready_ends_a_restart() {
        let status = json!({"restarts": 1, "conditions": [{"type": "RestartingJobSet", "status": "True",
            "reason": "DefaultFailurePolicy", "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let jobs = [
            job("js", "a", 0).attempt(1).counts(1, 1, 0).obj(),
            job("js", "a", 1).attempt(1).counts(1, 1, 0).obj(),
            job("js", "b", 0).attempt(1).counts(1, 1, 0).obj(),
        ];
        assert_eq!(cond(&plan(&js(json!({}), status), &jobs, &[]), "RestartingJobSet"), Some(("False", "JobsReady")));
    }

    #[test]
    fn success_completes_the_jobset() {
        let jobs = [
            job("js", "a", 0).complete().obj(),
            job("js", "a", 1).complete().obj(),
            job("js", "b", 0).complete().obj(),
        ];
        let p = plan(&js(json!({"successPolicy": {"operator": "All"}}), json!({})), &jobs, &[]);
        assert_eq!(cond(&p, "Completed"), Some(("True", "AllJobsCompleted")));
        assert_eq!(p.update.status.terminal_state, "Completed");
    }

    #[test]
    fn jobs_left_failed_end_the_jobset_only_once_nothing_is_active() {
        let spec = json!({"failurePolicy": {"rules": [{"name": "r", "action": "FailJob"}]}});
        let status = json!({"replicatedJobsStatus": [{"name": "a", "ready": 0, "succeeded": 0, "failed": 1, "active": 0,
            "suspended": 0, "failedJobIndexes": [1]}]});
        let running =
            [job("js", "a", 0).complete().obj(), job("js", "a", 1).failed("X", 1).obj(), job("js", "b", 0).obj()];
        let p = plan(&js(spec.clone(), status.clone()), &running, &[]);
        assert_eq!(cond(&p, "Failed"), None);
        assert!(p.update.events.is_empty(), "no new failure-policy decision for a Job left failed");
        let done = [
            job("js", "a", 0).complete().obj(),
            job("js", "a", 1).failed("X", 1).obj(),
            job("js", "b", 0).complete().obj(),
        ];
        let p = plan(&js(spec, status), &done, &[]);
        assert_eq!(cond(&p, "Failed"), Some(("True", "FailedJobs")));
        let msg = &p.update.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap().message;
        assert_eq!(msg, "jobset failed due to one or more job failures (jobs left failed: js-a-1)");
    }

    #[test]
    fn in_order_startup_waits_for_each_replicated_job_to_start() {
        let spec = json!({"startupPolicy": {"startupPolicyOrder": "InOrder"}});
        let p = plan(&js(spec.clone(), json!({})), &[], &[]);
        assert_eq!(created(&p), ["js-a-0", "js-a-1"]);
        assert_eq!(cond(&p, "StartupPolicyInProgress"), Some(("True", "InOrderStartupPolicyInProgress")));
        let started = [job("js", "a", 0).counts(1, 1, 0).obj(), job("js", "a", 1).counts(1, 1, 0).obj()];
        let p = plan(&js(spec.clone(), json!({})), &started, &[]);
        assert_eq!(created(&p), ["js-b-0"]);
        let all = [
            job("js", "a", 0).counts(1, 1, 0).obj(),
            job("js", "a", 1).counts(1, 1, 0).obj(),
            job("js", "b", 0).counts(1, 1, 0).obj(),
        ];
        let p = plan(&js(spec, json!({})), &all, &[]);
        assert_eq!(cond(&p, "StartupPolicyCompleted"), Some(("True", "InOrderStartupPolicyCompleted")));
    }

    #[test]
    fn depends_on_holds_back_creation() {
        let mut j = js(json!({}), json!({}));
        j.spec.replicated_jobs[1].depends_on = vec![jobset_api::jobset::DependsOn {
            name: "a".into(),
            status: jobset_api::jobset::DependsOnStatus::Complete,
        }];
        assert_eq!(created(&plan(&j, &[], &[])), ["js-a-0", "js-a-1"]);
        let done = [job("js", "a", 0).complete().obj(), job("js", "a", 1).complete().obj()];
        assert_eq!(created(&plan(&j, &done, &[])), ["js-b-0"]);
    }

    #[test]
    fn suspending_suspends_active_jobs_and_says_so() {
        let p = plan(&js(json!({"suspend": true}), json!({})), &[job("js", "a", 0).obj()], &[]);
        assert_eq!(
            p.patch_jobs,
            [JobPatch { name: "js-a-0".into(), patch: json!({"spec": {"suspend": true}}), clear_start_time: false }]
        );
        assert_eq!(cond(&p, "Suspended"), Some(("True", "SuspendedJobs")));
        assert!(p.create_jobs.iter().all(|j| j["spec"]["suspend"] == true));
    }

    #[test]
    fn resuming_merges_the_pod_template_and_unsuspends() {
        let status = json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
            "message": "jobset is suspended", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let p = plan(&js(json!({}), status), &[job("js", "a", 0).suspend().obj()], &[]);
        let patch = &p.patch_jobs[0].patch;
        assert_eq!(patch["spec"]["suspend"], false);
        assert_eq!(patch["spec"]["template"]["metadata"]["labels"]["l"], "1");
        assert_eq!(patch["spec"]["template"]["spec"]["nodeSelector"]["zone"], "z1");
        assert_eq!(cond(&p, "Suspended"), Some(("False", "ResumeJobs")));
    }

    #[test]
    fn resuming_clears_the_start_time_only_of_jobs_that_started() {
        let status = json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
            "message": "jobset is suspended", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let mut started = job("js", "a", 1).suspend().obj();
        started.status.get_or_insert_default().start_time = Some(Time(Timestamp::from_second(500).unwrap()));
        let cases = [("never started", job("js", "a", 0).suspend().obj(), false), ("started", started, true)];
        for (name, j, want) in cases {
            let p = plan(&js(json!({}), status.clone()), &[j], &[]);
            assert_eq!(p.patch_jobs.len(), 1, "{name}");
            assert_eq!(p.patch_jobs[0].clear_start_time, want, "{name}");
        }
    }

    #[test]
    fn elastic_jobs_follow_the_template() {
        let mut j = js(json!({}), json!({}));
        j.spec.replicated_jobs[0].template.0["spec"]["parallelism"] = json!(3);
        j.spec.replicated_jobs[0].template.0["spec"]["completions"] = json!(3);
        let p = plan(&j, &[job("js", "a", 0).obj()], &[]);
        assert_eq!(
            p.patch_jobs,
            [JobPatch {
                name: "js-a-0".into(),
                patch: json!({"spec": {"parallelism": 3, "completions": 3}}),
                clear_start_time: false
            }]
        );
    }

    #[test]
    fn a_failed_job_runs_the_failure_policy_and_creates_nothing() {
        let status = JobSetStatus::default();
        let mut j = js(json!({"failurePolicy": {"maxRestarts": 1}}), json!({}));
        j.status = Some(status);
        let p = plan(&j, &[job("js", "a", 0).failed("BackoffLimitExceeded", 1).obj()], &[]);
        assert_eq!(p.update.status.restarts, 1);
        assert!(p.create_jobs.is_empty());
    }

    /// An InPlaceRestart JobSet (`maxRestarts: 1`) of two one-pod Jobs.
    fn in_place(extra: Value, status: Value) -> JobSet {
        let mut spec = json!({
            "failurePolicy": {"maxRestarts": 1, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "a", "replicas": 2, "template": {"spec": {"parallelism": 1, "completions": 1}}}]
        });
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        js(spec, status)
    }

    fn running_jobs() -> [Job; 2] {
        [job("js", "a", 0).counts(1, 1, 0).obj(), job("js", "a", 1).counts(1, 1, 0).obj()]
    }

    fn pods_at(attempt: i32) -> [Pod; 2] {
        [pod("js", "js-a-0-0").at(attempt).obj(), pod("js", "js-a-1-0").at(attempt).obj()]
    }

    #[test]
    fn in_place_restart_attempts_go_into_the_status_write() {
        let p = plan(&in_place(json!({}), json!({})), &running_jobs(), &pods_at(0));
        assert_eq!(p.update.status.current_in_place_restart_attempt, Some(0));
        assert!(p.update.changed);
        let recorded = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "a", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]});
        let p = plan(&in_place(json!({}), recorded), &running_jobs(), &pods_at(0));
        assert!(!p.update.changed, "in sync and already recorded: nothing to write");
        let pods = [pod("js", "js-a-0-0").at(0).obj(), pod("js", "js-a-1-0").at(1).obj()];
        let p = plan(&in_place(json!({}), json!({"currentInPlaceRestartAttempt": 0})), &running_jobs(), &pods);
        assert_eq!(p.update.status.previous_in_place_restart_attempt, Some(0));
    }

    #[test]
    fn in_place_restart_beyond_max_restarts_fails_the_jobset() {
        let p = plan(&in_place(json!({}), json!({})), &running_jobs(), &pods_at(2));
        let failed = p.update.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
        assert_eq!(
            (failed.reason.as_str(), failed.message.as_str()),
            (REASON_REACHED_MAX_RESTARTS, MSG_REACHED_MAX_RESTARTS)
        );
        assert_eq!(p.update.status.terminal_state, "Failed");
        assert!(p.update.events.iter().any(|e| e.warning && e.reason == REASON_REACHED_MAX_RESTARTS));
    }

    #[test]
    fn in_place_restart_is_left_out_of_reconciles_that_end_early_or_are_gated_off() {
        let finished = json!({"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let failed_job = [job("js", "a", 0).failed("PodFailurePolicy", 1).obj(), job("js", "a", 1).obj()];
        let in_order = json!({"startupPolicy": {"startupPolicyOrder": "InOrder"}});
        let (on, off) = (Features::default(), Features { in_place_restart: false, ..Features::default() });
        let cases: Vec<(&str, JobSet, Vec<Job>, &Features)> = vec![
            ("a finished JobSet", in_place(json!({}), finished), running_jobs().to_vec(), &on),
            ("a reconcile that ran the failure policy", in_place(json!({}), json!({})), failed_job.to_vec(), &on),
            ("an InOrder startup waiting for its Jobs", in_place(in_order, json!({})), vec![], &on),
            ("the InPlaceRestart gate off", in_place(json!({}), json!({})), running_jobs().to_vec(), &off),
        ];
        for (name, j, jobs, features) in cases {
            let pods = pods_at(0);
            let p = sync(&SyncInput {
                js: &j,
                jobs: jobs.iter().collect(),
                pods: pods.iter().collect(),
                in_place: &Tally::of(&pods),
                now: Timestamp::from_second(1_000).unwrap(),
                features,
            })
            .unwrap();
            assert_eq!(p.update.status.current_in_place_restart_attempt, None, "{name}");
        }
    }

    #[test]
    fn a_failed_job_under_in_place_restart_follows_the_failure_policy_as_with_recreate() {
        let failed = [job("js", "a", 0).failed("PodFailurePolicy", 1).obj(), job("js", "a", 1).counts(1, 1, 0).obj()];
        let p = plan(&in_place(json!({}), json!({})), &failed, &pods_at(0));
        assert_eq!(p.update.status.restarts, 1, "the default RestartJobSet");
        let p = plan(&in_place(json!({}), json!({"restarts": 1})), &failed, &[]);
        assert_eq!(p.delete_jobs, ["js-a-0", "js-a-1"]);
        assert!(p.create_jobs.is_empty());
        let fresh = [job("js", "a", 0).attempt(1).obj()];
        let p = plan(&in_place(json!({}), json!({"restarts": 1})), &fresh, &pods_at(0));
        assert_eq!(created(&p), ["js-a-1"], "each Job is recreated as soon as its old one is gone");
        let rule = json!({"failurePolicy": {"maxRestarts": 1, "restartStrategy": "InPlaceRestart",
            "rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]}});
        let p = plan(&in_place(rule, json!({})), &failed, &pods_at(0));
        assert_eq!(cond(&p, "Failed"), Some(("True", REASON_FAIL_JOBSET_ACTION)));
    }
}
