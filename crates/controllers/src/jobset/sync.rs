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
use super::restart_history::{self, TriggerPods};
use super::startup_policy::{all_replicas_started, depends_on_satisfied, depends_on_unreachable, in_order};
use super::success_policy;
use super::ttl::{self, Ttl};
use super::update::{Metric, Update};

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
    /// The restarts `status.restartHistory` keeps.
    pub history_limit: usize,
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
    /// The pods the trigger of the restart record opened by this reconcile needs (the last
    /// record): the shell reads them and fills the trigger in before the status write.
    pub trigger_pods: Option<TriggerPods>,
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
            trigger_pods: None,
        }
    }
}

/// Whether another controller owns this JobSet (`spec.managedBy`).
pub fn managed_elsewhere(js: &JobSet) -> bool {
    js.spec.managed_by.as_deref().is_some_and(|m| m != JOBSET_CONTROLLER_NAME)
}

pub fn sync(input: &SyncInput) -> Result<Plan, String> {
    let mut plan = decide(input)?;
    if !managed_elsewhere(input.js) {
        record_phases(input, &mut plan.update);
    }
    Ok(plan)
}

/// Stamps the phases of the open restart records this reconcile sees ended, judged by the status
/// it writes; a JobSet that finishes cuts the records still open short.
fn record_phases(input: &SyncInput, u: &mut Update) {
    if restart_history::advance(input.js, &input.jobs, input.in_place, &mut u.status, input.now) {
        u.mark();
    }
    if !u.status.terminal_state.is_empty() && restart_history::supersede_open(&mut u.status.restart_history) {
        u.mark();
    }
}

fn decide(input: &SyncInput) -> Result<Plan, String> {
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
        plan.trigger_pods = failure_policy::execute(js, &unhandled, &mut plan.update, input.history_limit)?;
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
        plan.trigger_pods = in_place(js, input.in_place, &mut plan.update, input.history_limit)?;
    }
    Ok(plan)
}

/// upstream's `reconcileInPlaceRestart`, with faster failure detection (see [`in_place_restart`]).
/// A deprecated attempt opens a restart record in the same write; the answer says which pods its
/// trigger needs.
fn in_place(js: &JobSet, tally: &Tally, u: &mut Update, history_limit: usize) -> Result<Option<TriggerPods>, String> {
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
            let current = js.status.as_ref().and_then(|s| s.current_in_place_restart_attempt);
            let worker_failed = current.is_some_and(|c| tally.worker_failed_at(c));
            if restart_history::in_place_is_a_restart(&u.status.restart_history, worker_failed) {
                let r = restart_history::in_place_record(a, worker_failed, u.now);
                let reason = r.trigger.reason.clone();
                u.metrics.push(Metric::Restart { action: restart_history::ACTION_RESTART_JOBSET, reason });
                restart_history::open(js, &mut u.status.restart_history, r, history_limit);
                return Ok((history_limit > 0).then_some(TriggerPods::InPlace { deprecated: a }));
            }
        }
    }
    Ok(None)
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
        plan_at(js, jobs, pods, 1_000)
    }

    fn plan_at(js: &JobSet, jobs: &[Job], pods: &[Pod], now: i64) -> Plan {
        let features = Features::default();
        sync(&SyncInput {
            js,
            jobs: jobs.iter().collect(),
            pods: pods.iter().collect(),
            in_place: &Tally::of(pods),
            now: Timestamp::from_second(now).unwrap(),
            features: &features,
            history_limit: 10,
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
                history_limit: 10,
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

    /// The JobSet with the status a plan writes.
    fn after(js: &JobSet, p: &Plan) -> JobSet {
        let mut next = js.clone();
        next.status = Some(p.update.status.clone());
        next
    }

    #[test]
    fn each_failure_policy_restart_opens_one_record_with_its_trigger() {
        use jobset_api::jobset::{RestartScope::*, RestartStrategy::*};
        let failed = [job("js", "a", 1).failed_with("PodFailurePolicy", "Container main exited 3", 40).obj()];
        // (strategy, action, (attempt, recorded strategy, scope, target, counted))
        type Want = (i32, RestartStrategy, jobset_api::jobset::RestartScope, Option<&'static str>, bool);
        let cases: [(&str, &str, Want); 7] = [
            ("Recreate", "RestartJobSet", (1, Recreate, JobSet, None, true)),
            ("BlockingRecreate", "RestartJobSet", (1, BlockingRecreate, JobSet, None, true)),
            ("InPlaceRestart", "RestartJobSet", (1, Recreate, JobSet, None, true)),
            ("Recreate", "RestartJobSetAndIgnoreMaxRestarts", (1, Recreate, JobSet, None, false)),
            ("Recreate", "RestartReplicatedJob", (1, Recreate, ReplicatedJob, Some("a"), true)),
            ("BlockingRecreate", "RestartJob", (1, BlockingRecreate, Job, Some("js-a-1"), true)),
            ("Recreate", "RestartJobAndIgnoreMaxRestarts", (1, Recreate, Job, Some("js-a-1"), false)),
        ];
        for (strategy, action, want) in cases {
            let spec = json!({"failurePolicy": {"maxRestarts": 3, "restartStrategy": strategy,
                "rules": [{"name": "r", "action": action}]}});
            let p = plan_at(&js(spec, json!({})), &failed, &[], 50);
            let history = &p.update.status.restart_history;
            assert_eq!(history.len(), 1, "{strategy} {action}");
            let r = &history[0];
            assert_eq!(
                (r.attempt, r.strategy, r.scope, r.target.as_deref(), r.trigger.counts_towards_max),
                want,
                "{strategy} {action}"
            );
            let t = &r.trigger;
            assert_eq!(
                (t.job.as_deref(), t.reason.as_str(), t.message.as_deref(), t.rule.as_deref(), t.action.as_str()),
                (Some("js-a-1"), "PodFailurePolicy", Some("Container main exited 3"), Some("r"), action),
                "{strategy} {action}"
            );
            let secs = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
                t.as_ref().map(|t| t.0.as_second())
            };
            assert_eq!((secs(&r.failed_at), r.decided_at.0.as_second()), (Some(40), 50), "{strategy} {action}");
            assert_eq!(p.trigger_pods, Some(TriggerPods::Job("js-a-1".into())), "{strategy} {action}");
            let counted = |m: &Metric| matches!(m, Metric::Restart { action: a, reason } if *a == action && reason == "PodFailurePolicy");
            assert!(p.update.metrics.iter().any(counted), "{strategy} {action}");
        }
        for (what, spec) in [
            ("FailJob", json!({"failurePolicy": {"rules": [{"name": "r", "action": "FailJob"}]}})),
            ("FailJobSet", json!({"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet"}]}})),
            ("no failure policy", json!({})),
        ] {
            let p = plan(&js(spec, json!({})), &failed, &[]);
            assert!(p.update.status.restart_history.is_empty() && p.trigger_pods.is_none(), "{what}");
        }
    }

    #[test]
    fn a_second_reconcile_over_the_same_state_opens_no_other_record() {
        let spec = json!({"failurePolicy": {"maxRestarts": 3}});
        let jobs = [job("js", "a", 0).failed("BackoffLimitExceeded", 40).obj(), job("js", "a", 1).obj()];
        let first = plan_at(&js(spec.clone(), json!({})), &jobs, &[], 50);
        assert_eq!(first.update.status.restart_history.len(), 1);
        let second = plan_at(&after(&js(spec, json!({})), &first), &jobs, &[], 51);
        assert_eq!(second.update.status.restart_history, first.update.status.restart_history);
        assert!(second.trigger_pods.is_none());
        assert!(!second.update.metrics.iter().any(|m| matches!(m, Metric::Restart { .. })));
    }

    #[test]
    fn a_recreate_restart_is_recorded_from_its_decision_to_every_new_job_running() {
        let spec = json!({"failurePolicy": {"maxRestarts": 3}});
        let old = || {
            [
                job("js", "a", 0).failed("BackoffLimitExceeded", 40).obj(),
                job("js", "a", 1).obj(),
                job("js", "b", 0).obj(),
            ]
        };
        let up = |rj: &str, i: i32| job("js", rj, i).attempt(1).counts(1, 1, 0).obj();
        let mut j = js(spec, json!({}));
        // (now, Jobs, phases (stopped, running) after the reconcile)
        type Step = (i64, Vec<Job>, (Option<i64>, Option<i64>));
        let steps: Vec<Step> = vec![
            (50, old().to_vec(), (None, None)),
            (51, old().to_vec(), (None, None)),
            (52, vec![old()[2].clone(), up("a", 0)], (None, None)),
            (53, vec![up("a", 0), up("a", 1)], (Some(53), None)),
            (54, vec![up("a", 0), up("a", 1), up("b", 0)], (Some(53), Some(54))),
        ];
        for (now, jobs, want) in steps {
            let p = plan_at(&j, &jobs, &[], now);
            let r = &p.update.status.restart_history[0];
            let secs = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
                t.as_ref().map(|t| t.0.as_second())
            };
            assert_eq!((secs(&r.stopped_at), secs(&r.running_at)), want, "at {now}");
            assert_eq!(p.update.status.restart_history.len(), 1, "at {now}");
            j = after(&j, &p);
        }
        assert_eq!(j.status.unwrap().restart_history[0].duration.as_deref(), Some("14s"));
    }

    #[test]
    fn a_finished_jobset_cuts_open_records_short() {
        let spec = json!({"failurePolicy": {"maxRestarts": 1}});
        let jobs = [job("js", "a", 0).failed("BackoffLimitExceeded", 40).obj()];
        let first = plan(&js(spec.clone(), json!({})), &jobs, &[]);
        let failed_again = [job("js", "a", 0).attempt(1).failed("BackoffLimitExceeded", 60).obj()];
        let p = plan(&after(&js(spec, json!({})), &first), &failed_again, &[]);
        assert_eq!(cond(&p, "Failed"), Some(("True", REASON_REACHED_MAX_RESTARTS)));
        let r = &p.update.status.restart_history[0];
        assert!(r.superseded && r.running_at.is_none(), "{r:?}");
    }

    #[test]
    fn an_in_place_deprecation_opens_one_record_in_the_same_write() {
        let worker_failed =
            [pod("js", "js-a-0-0").at(0).terminated("worker", 3, 900).obj(), pod("js", "js-a-1-0").at(0).obj()];
        let restarted = [pod("js", "js-a-0-0").at(1).obj(), pod("js", "js-a-1-0").at(0).obj()];
        for (case, pods, reason) in [
            ("a failed worker", &worker_failed, "WorkerFailed"),
            ("an agent restarted its pod", &restarted, "PodRestartedInPlace"),
        ] {
            let j = in_place(json!({}), json!({"currentInPlaceRestartAttempt": 0}));
            let p = plan(&j, &running_jobs(), pods);
            assert_eq!(p.update.status.previous_in_place_restart_attempt, Some(0), "{case}");
            let history = &p.update.status.restart_history;
            assert_eq!(history.len(), 1, "{case}");
            let r = &history[0];
            assert_eq!(
                (r.attempt, r.strategy, r.scope),
                (1, RestartStrategy::InPlaceRestart, jobset_api::jobset::RestartScope::JobSet),
                "{case}"
            );
            assert_eq!((r.trigger.reason.as_str(), r.trigger.action.as_str()), (reason, "RestartJobSet"), "{case}");
            assert_eq!(p.trigger_pods, Some(TriggerPods::InPlace { deprecated: 0 }), "{case}");
            let again = plan(&after(&j, &p), &running_jobs(), pods);
            assert_eq!(again.update.status.restart_history.len(), 1, "{case}: once");
        }
    }

    #[test]
    fn a_history_limit_of_zero_records_nothing() {
        let features = Features::default();
        let j = js(json!({"failurePolicy": {"maxRestarts": 3}}), json!({}));
        let jobs = [job("js", "a", 0).failed("BackoffLimitExceeded", 40).obj()];
        let p = sync(&SyncInput {
            js: &j,
            jobs: jobs.iter().collect(),
            pods: vec![],
            in_place: &Tally::default(),
            now: Timestamp::from_second(50).unwrap(),
            features: &features,
            history_limit: 0,
        })
        .unwrap();
        assert_eq!(p.update.status.restarts, 1);
        assert!(p.update.status.restart_history.is_empty() && p.trigger_pods.is_none());
    }
}
