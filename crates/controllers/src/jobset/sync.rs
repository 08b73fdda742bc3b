//! One reconcile of a JobSet as a pure function (upstream's `reconcile`, step by step): from the
//! JobSet, its child Jobs and its pods to a [`Plan`] that the async shell carries out.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use jobset_api::jobset::keys::*;
use jobset_api::jobset::{
    Features, JobInPlaceRestartStatus, JobSet, JobSetStatus, ReplicatedJob, RestartScope, RestartStrategy, job_name,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use super::children::{self, Child, Classified};
use super::conditions::Cond;
use super::construct::construct_job;
use super::deadline::{self, Deadline};
use super::execution_attempts;
use super::failure_policy::{self, FailedJob};
use super::in_place_restart::{self, Change, Outcome, Scope, Tally};
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
    /// The pods the trigger of each restart record opened by this reconcile needs, one entry a
    /// record in the order they were opened: the shell reads them and fills every trigger in
    /// before the status write ([`restart_history::complete_triggers`]).
    pub trigger_pods: Vec<TriggerPods>,
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
            trigger_pods: vec![],
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
        if input.features.execution_attempts && !input.js.finished() {
            execution_attempts(input, &mut plan);
        }
        // KEP-1186: a restart of the whole JobSet is a fresh run; its clock starts again.
        let restarts = input.js.status.as_ref().map_or(0, |s| s.restarts);
        let u = &mut plan.update;
        if input.features.active_deadline
            && !input.js.finished()
            && u.status.restarts > restarts
            && deadline::maintain_start_time(input.js, &mut u.status, true, input.now)
        {
            u.mark();
        }
    }
    Ok(plan)
}

/// KEP-1282: the count of runs this reconcile writes, stamped on the Jobs it creates or resumes.
fn execution_attempts(input: &SyncInput, plan: &mut Plan) {
    let none = JobSetStatus::default();
    let old = input.js.status.as_ref().unwrap_or(&none);
    let a = execution_attempts::decide(old, &plan.update.status, input.js.suspended());
    if plan.update.status.execution_attempts != a.status {
        plan.update.status.execution_attempts = a.status;
        plan.update.mark();
    }
    for j in &mut plan.create_jobs {
        execution_attempts::stamp_job(j, a.annotation);
    }
    for p in &mut plan.patch_jobs {
        execution_attempts::stamp_resume(&mut p.patch, a.annotation);
    }
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

    // KEP-1186: a deadline passed ends the JobSet before the failure policy could restart it
    // (and start the clock again), unless it completed.
    if input.features.active_deadline {
        if deadline::maintain_start_time(js, &mut plan.update.status, false, input.now) {
            plan.update.mark();
        }
        match deadline::check(js, plan.update.status.start_time.as_ref(), input.now) {
            Deadline::None => {}
            Deadline::Remaining(d) => plan.requeue_after = Some(d),
            Deadline::Exceeded(message) => {
                if success_policy::satisfied(js, &c.successful) {
                    complete(&mut plan.update);
                } else {
                    plan.delete_jobs.extend(c.active.iter().filter(|j| !j.deleting()).map(|j| j.name.to_string()));
                    failure_policy::fail(&mut plan.update, REASON_DEADLINE_EXCEEDED, message);
                    plan.update.metrics.push(Metric::DeadlineExceeded);
                }
                return Ok(plan);
            }
        }
    }

    // Failed Jobs a FailJob rule already handled stay failed without another decision.
    let left_failed = |j: &Child| {
        let (Some(rj), Some(i)) = (j.rjob, j.index) else { return false };
        statuses.iter().any(|s| s.name == rj && s.failed_job_indexes.contains(&i))
    };
    let unhandled: Vec<FailedJob> = c.failed.iter().filter(|j| !left_failed(j)).filter_map(FailedJob::of).collect();
    if !unhandled.is_empty() {
        plan.trigger_pods =
            failure_policy::execute(js, &unhandled, &mut plan.update, input.history_limit)?.into_iter().collect();
        return Ok(plan);
    }

    if success_policy::satisfied(js, &c.successful) {
        complete(&mut plan.update);
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
        starting |= resume(js, &c, &statuses, input.features.mutable_pod_resources, &mut plan);
    }
    // Upstream returns before this while an InOrder startup waits for a replicated job.
    if js.restart_strategy() == RestartStrategy::InPlaceRestart && input.features.in_place_restart && !starting {
        plan.trigger_pods = in_place(js, input.in_place, &mut plan.update, input.history_limit)?;
    }
    Ok(plan)
}

/// Completes the JobSet: `Completed=True`, `terminalState: Completed`, `RestartingJobSet=False`.
fn complete(u: &mut Update) {
    u.set(Cond::new(COND_COMPLETED, true, REASON_ALL_JOBS_COMPLETED, MSG_ALL_JOBS_COMPLETED));
    u.status.terminal_state = COND_COMPLETED.into();
    u.mark();
    u.set(Cond::new(COND_RESTARTING, false, REASON_JOBSET_COMPLETED, MSG_ALL_JOBS_COMPLETED));
}

/// upstream's `reconcileInPlaceRestart`, with faster failure detection (see [`in_place_restart`]).
/// A deprecated attempt opens a restart record in the same write; the answer says which pods its
/// trigger needs.
fn in_place(js: &JobSet, tally: &Tally, u: &mut Update, history_limit: usize) -> Result<Vec<TriggerPods>, String> {
    if in_place_restart::scoped(js) {
        return in_place_scoped(js, tally, u, history_limit);
    }
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
                return Ok((history_limit > 0).then_some(TriggerPods::InPlace { deprecated: a }).into_iter().collect());
            }
        }
    }
    Ok(vec![])
}

/// The attempts of an in-place scope in the status: the JobSet's, a replicated job's or a Job's
/// entry (added when absent, Jobs kept by index).
fn scope_attempts<'u>(
    u: &'u mut Update,
    js: &JobSet,
    scope: Scope,
) -> Result<(&'u mut Option<i32>, &'u mut Option<i32>), String> {
    Ok(match scope {
        Scope::JobSet => {
            (&mut u.status.current_in_place_restart_attempt, &mut u.status.previous_in_place_restart_attempt)
        }
        Scope::ReplicatedJob(rjob) => {
            let s = failure_policy::rj_status(u, js, rjob)?;
            (&mut s.current_in_place_restart_attempt, &mut s.previous_in_place_restart_attempt)
        }
        Scope::Job(rjob, i) => {
            let jobs = &mut failure_policy::rj_status(u, js, rjob)?.in_place_restart_jobs;
            let at = match jobs.binary_search_by_key(&i, |j| j.job_index) {
                Ok(at) => at,
                Err(at) => {
                    jobs.insert(at, JobInPlaceRestartStatus { job_index: i, ..Default::default() });
                    at
                }
            };
            let j = &mut jobs[at];
            (&mut j.current_in_place_restart_attempt, &mut j.previous_in_place_restart_attempt)
        }
    })
}

/// Counts one restart of `scope` (`counted`: towards `maxRestarts` too).
fn count_in_place_restart(u: &mut Update, js: &JobSet, scope: Scope, counted: bool) -> Result<(), String> {
    match scope {
        Scope::JobSet => u.status.in_place_restarts += 1,
        Scope::ReplicatedJob(rjob) => {
            let s = failure_policy::rj_status(u, js, rjob)?;
            s.in_place_restarts += 1;
            s.in_place_restarts_count_towards_max += i32::from(counted);
        }
        Scope::Job(rjob, i) => {
            let s = failure_policy::rj_status(u, js, rjob)?;
            if let Some(j) = s.in_place_restart_jobs.iter_mut().find(|j| j.job_index == i) {
                j.restarts += 1;
                j.restarts_count_towards_max += i32::from(counted);
            }
        }
    }
    Ok(())
}

/// Scoped in-place restart ([`in_place_restart::decide_scoped`]): applies its changes to the
/// status in order. A restart spends the budget as its rule's Recreate form would (past it, the
/// JobSet fails as that form would), is counted in its scope's status, announced by that form's
/// event and metric, and recorded with the attempt its agents will announce. A deprecation that a
/// recreation under way brought about only moves the attempts (as upstream's bookkeeping). The
/// answer has the trigger pods of each record opened, in order.
fn in_place_scoped(
    js: &JobSet,
    tally: &Tally,
    u: &mut Update,
    history_limit: usize,
) -> Result<Vec<TriggerPods>, String> {
    let d = in_place_restart::decide_scoped(js, tally)?;
    for (pod, value) in &d.malformed {
        tracing::warn!(jobset = %js.name(), %pod, %value, "ignoring a pod whose {IN_PLACE_RESTART_ATTEMPT} annotation is not a non-negative integer");
    }
    let max_restarts = js.spec.failure_policy.as_ref().map_or(0, |f| f.max_restarts);
    let mut restarts = vec![];
    for change in d.changes {
        match change {
            Change::Current(scope, a) => {
                *scope_attempts(u, js, scope)?.0 = Some(a);
                u.mark();
            }
            Change::Restart(scope, r) => {
                let (restart_scope, target) = match scope {
                    Scope::JobSet => (RestartScope::JobSet, None),
                    Scope::ReplicatedJob(rjob) => (RestartScope::ReplicatedJob, Some(rjob.to_string())),
                    Scope::Job(rjob, i) => (RestartScope::Job, Some(job_name(js.name(), rjob, i))),
                };
                let history = &u.status.restart_history;
                let restart = restart_history::scoped_in_place_is_a_restart(
                    js,
                    history,
                    restart_scope,
                    target.as_deref(),
                    r.worker_failed,
                );
                if restart && r.kind.counted() && failure_policy::counted_restarts(&u.status) >= i64::from(max_restarts)
                {
                    let message = failure_policy::with_job(MSG_REACHED_MAX_RESTARTS, &r.job);
                    failure_policy::fail(u, REASON_REACHED_MAX_RESTARTS, message);
                    return Ok(vec![]);
                }
                if restart
                    && let Some((rule, max)) = r.kind.budget()
                    && !failure_policy::spend_rule_budget(u, rule, max, &r.job)
                {
                    return Ok(vec![]);
                }
                *scope_attempts(u, js, scope)?.1 = Some(r.previous);
                u.mark();
                if restart {
                    count_in_place_restart(u, js, scope, r.kind.counted())?;
                    restarts.push((scope, restart_scope, target, r));
                }
            }
        }
    }
    if d.restart_count_exceeded {
        failure_policy::fail(u, REASON_REACHED_MAX_RESTARTS, MSG_REACHED_MAX_RESTARTS.into());
        return Ok(vec![]);
    }
    // Once every change is in: the agents that restart announce one past every attempt named.
    let attempt = in_place_restart::global_max(&u.status).map_or(0, |m| m + 1);
    let mut needs = vec![];
    for (scope, restart_scope, target, r) in restarts {
        let action = r.kind.action();
        if let Some((reason, message)) = failure_policy::restart_event(action) {
            u.event(true, reason, failure_policy::with_job(message, &r.job));
        }
        let rec = restart_history::scoped_in_place_record(
            restart_history::ScopedRecord {
                scope: restart_scope,
                target,
                attempt,
                worker_failed: r.worker_failed,
                rule: r.kind.rule.map(|rule| rule.name.as_str()),
                action: action.as_str(),
                counted: r.kind.counted(),
                job: matches!(scope, Scope::Job(..)).then(|| r.job.clone()),
            },
            u.now,
        );
        u.metrics.push(Metric::Restart { action: action.as_str(), reason: rec.trigger.reason.clone() });
        restart_history::open(js, &mut u.status.restart_history, rec, history_limit);
        let job_index = match scope {
            Scope::Job(_, i) => Some(i),
            Scope::JobSet | Scope::ReplicatedJob(_) => None,
        };
        let replicated_jobs = r.trigger_rjobs.iter().map(|r| r.to_string()).collect();
        needs.push(TriggerPods::InPlaceScoped { attempt: r.trigger_attempt, replicated_jobs, job_index });
    }
    if history_limit == 0 {
        needs.clear();
    }
    Ok(needs)
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
/// upstream's `resumeJobsIfNecessary`; with `resources` (KEP-1150) a resumed Job also takes its
/// replicated job's container resources.
fn resume(
    js: &JobSet,
    c: &Classified,
    statuses: &[jobset_api::jobset::ReplicatedJobStatus],
    resources: bool,
    plan: &mut Plan,
) -> bool {
    let (rjs, waiting) = replicated_jobs_to_start(js, statuses, in_order(js));
    for rj in rjs {
        let pod = rj.template.pod_template().cloned().unwrap_or_default();
        for j in c.active.iter().filter(|j| j.rjob == Some(rj.name.as_str())) {
            if j.job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
                plan.patch_jobs.push(JobPatch {
                    name: j.name.to_string(),
                    patch: resume_patch(j.job, &pod, resources),
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

fn resume_patch(job: &Job, rj_pod: &Value, resources: bool) -> Value {
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
    let mut patch = json!({"spec": {"suspend": false, "template": {
        "metadata": {"labels": merged_map(["metadata", "labels"]), "annotations": merged_map(["metadata", "annotations"])},
        "spec": {"nodeSelector": merged_map(["spec", "nodeSelector"]), "tolerations": union("tolerations"),
                 "schedulingGates": union("schedulingGates")}
    }}});
    for key in ["containers", "initContainers"].into_iter().filter(|_| resources) {
        if let Some(list) = with_template_resources(&job_pod, rj_pod, key) {
            patch["spec"]["template"]["spec"][key] = list;
        }
    }
    patch
}

/// KEP-1150's `mergeContainerResources`: the Job's containers (`key`: `containers` or
/// `initContainers`), each with the `resources.requests` and `resources.limits` of the template's
/// container of the same name; `resources.claims` and every other field stay the Job's. `None`
/// when nothing differs, so a Job whose resources did not change is patched as before (a merge
/// patch replaces a whole list).
fn with_template_resources(job_pod: &Value, rj_pod: &Value, key: &str) -> Option<Value> {
    let mut list = job_pod.get("spec")?.get(key)?.as_array()?.clone();
    let template = rj_pod.get("spec")?.get(key)?.as_array()?;
    let field = |c: &Value, f: &str| c.get("resources").and_then(|r| r.get(f)).filter(|v| !is_empty(v)).cloned();
    let mut changed = false;
    for c in &mut list {
        let Some(t) = template.iter().find(|t| t.get("name") == c.get("name")) else { continue };
        for f in ["requests", "limits"] {
            let want = field(t, f);
            if field(c, f) == want {
                continue;
            }
            changed = true;
            let Some(obj) = c.as_object_mut() else { continue };
            let resources = obj.entry("resources").or_insert_with(|| json!({}));
            match (resources.as_object_mut(), want) {
                (Some(r), Some(v)) => {
                    r.insert(f.to_string(), v);
                }
                (Some(r), None) => {
                    r.remove(f);
                }
                (None, _) => {}
            }
        }
    }
    changed.then_some(Value::Array(list))
}

fn is_empty(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(Map::is_empty)
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::{PodBuilder, job, pod};
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
    fn execution_attempts_are_written_once_per_run_and_stamped_on_created_and_resumed_jobs() {
        let suspended = json!({"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
            "message": "jobset is suspended", "lastTransitionTime": "2020-01-01T00:00:00Z"});
        let ann = |j: &Value| {
            let a =
                |p: &str| j.pointer(p).and_then(|m| m.get(EXECUTION_ATTEMPT)).and_then(Value::as_str).map(String::from);
            (a("/metadata/annotations"), a("/spec/template/metadata/annotations"))
        };
        let both = |v: Option<&str>| (v.map(String::from), v.map(String::from));
        let new_jobs = [job("js", "a", 0).counts(1, 1, 0).obj()];
        let failed = [job("js", "a", 0).failed("BackoffLimitExceeded", 5).obj()];
        let held = [job("js", "a", 0).suspend().obj()];
        // (case, spec, status, Jobs, status written, annotation on the created or patched Jobs)
        type Case<'a> = (&'a str, Value, Value, &'a [Job], Option<i32>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            ("a new JobSet: run 0 on every Job it creates", json!({}), json!({}), &[], Some(0), Some("0")),
            ("created suspended: unset, its Jobs at 0", json!({"suspend": true}), json!({}), &[], None, Some("0")),
            ("the first resume: run 0", json!({}), json!({"conditions": [suspended]}), &held, Some(0), Some("0")),
            (
                "a resume: one more",
                json!({}),
                json!({"executionAttempts": 1, "conditions": [suspended]}),
                &held,
                Some(2),
                Some("2"),
            ),
            (
                "a later Job of the run: the same",
                json!({}),
                json!({"executionAttempts": 2}),
                &new_jobs,
                Some(2),
                Some("2"),
            ),
            (
                "a JobSet restart: one more",
                json!({"failurePolicy": {"maxRestarts": 3}}),
                json!({"executionAttempts": 2}),
                &failed,
                Some(3),
                None,
            ),
            (
                "a Job restart: none",
                json!({"failurePolicy": {"maxRestarts": 3, "rules": [{"name": "r", "action": "RestartJob"}]}}),
                json!({"executionAttempts": 2}),
                &failed,
                Some(2),
                None,
            ),
        ];
        for (case, spec, status, jobs, want, stamp) in cases {
            let p = plan(&js(spec, status), jobs, &[]);
            assert_eq!(p.update.status.execution_attempts, want, "{case}");
            for j in &p.create_jobs {
                assert_eq!(ann(j), both(stamp), "{case}: {}", j["metadata"]["name"]);
            }
            for patch in p.patch_jobs.iter().map(|p| &p.patch) {
                assert_eq!(ann(patch), both(stamp), "{case}: {patch}");
            }
            assert!(!p.create_jobs.is_empty() || !p.patch_jobs.is_empty() || stamp.is_none(), "{case}");
            // Seen again after the write: nothing more is counted.
            if want.is_some() && p.update.status.execution_attempts == want {
                let j = js(json!({}), serde_json::to_value(&p.update.status).unwrap());
                assert_eq!(plan(&j, jobs, &[]).update.status.execution_attempts, want, "{case}, seen again");
            }
        }
        // Gate off: nothing written, nothing stamped.
        let features = Features { execution_attempts: false, ..Features::default() };
        let j = js(json!({}), json!({}));
        let input = SyncInput {
            js: &j,
            jobs: vec![],
            pods: vec![],
            in_place: &Tally::default(),
            now: Timestamp::from_second(1_000).unwrap(),
            features: &features,
            history_limit: 10,
        };
        let p = sync(&input).unwrap();
        assert_eq!(p.update.status.execution_attempts, None);
        assert!(p.create_jobs.iter().all(|j| ann(j) == (None, None)));
    }

    #[test]
    fn kep_1150_a_resumed_job_takes_its_templates_container_resources() {
        let c = |name: &str, resources: Value| json!({"name": name, "image": "busybox", "resources": resources});
        let cpu = |n: &str| json!({"requests": {"cpu": n}});
        let gpu_claim = json!({"requests": {"cpu": "4"}, "claims": [{"name": "gpu"}]});
        let right_sized = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}});
        /// (case, key, the Job's containers, the template's, gate, the patched list)
        type Case<'a> = (&'a str, &'a str, Value, Value, bool, Option<Value>);
        let cases: Vec<Case> = vec![
            (
                "unchanged resources leave the list out",
                "containers",
                json!([c("main", cpu("4"))]),
                json!([c("main", cpu("4"))]),
                true,
                None,
            ),
            (
                "new requests and limits, the Job's claims kept",
                "containers",
                json!([c("main", gpu_claim.clone())]),
                json!([c("main", right_sized.clone())]),
                true,
                Some(json!([c(
                    "main",
                    json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}, "claims": [{"name": "gpu"}]})
                )])),
            ),
            (
                "limits the template dropped are dropped",
                "containers",
                json!([c("main", json!({"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}))]),
                json!([c("main", cpu("4"))]),
                true,
                Some(json!([c("main", cpu("4"))])),
            ),
            (
                "a container the template does not name keeps its own",
                "containers",
                json!([c("main", cpu("4")), c("sidecar", cpu("1"))]),
                json!([c("main", cpu("2"))]),
                true,
                Some(json!([c("main", cpu("2")), c("sidecar", cpu("1"))])),
            ),
            (
                "init containers too",
                "initContainers",
                json!([c("init", cpu("1"))]),
                json!([c("init", cpu("3"))]),
                true,
                Some(json!([c("init", cpu("3"))])),
            ),
            (
                "the gate off",
                "containers",
                json!([c("main", gpu_claim.clone())]),
                json!([c("main", right_sized.clone())]),
                false,
                None,
            ),
        ];
        for (case, key, job_containers, template_containers, gate, want) in cases {
            let job: Job = serde_json::from_value(json!({"metadata": {"name": "js-a-0"},
                "spec": {"suspend": true, "template": {"spec": {key: job_containers}}}}))
            .unwrap();
            let patch = resume_patch(&job, &json!({"spec": {key: template_containers}}), gate);
            assert_eq!(patch["spec"]["template"]["spec"].get(key), want.as_ref(), "{case}");
            assert_eq!(patch["spec"]["suspend"], false, "{case}");
        }
    }

    #[test]
    fn kep_1186_a_passed_deadline_fails_the_jobset_and_deletes_its_active_jobs_unless_it_completed() {
        let start = |s: &str| json!({"startTime": s});
        // now = 1000 s = 00:16:40; a start at 00:16:30 is 10 s ago.
        let (ten_ago, five_ago) = (start("1970-01-01T00:16:30Z"), start("1970-01-01T00:16:35Z"));
        let restart_job = json!({"maxRestarts": 3, "rules": [{"name": "r", "action": "RestartJob"}]});
        let deadline = |s: i64, fp: Value| json!({"activeDeadlineSeconds": s, "failurePolicy": fp});
        let running = || job("js", "a", 0).counts(1, 1, 0);
        let all_running = [running().obj(), job("js", "a", 1).counts(1, 1, 0).obj(), job("js", "b", 0).obj()];
        let one_failed =
            [running().obj(), job("js", "a", 1).failed("BackoffLimitExceeded", 995).obj(), job("js", "b", 0).obj()];
        let all_done = [
            job("js", "a", 0).complete().obj(),
            job("js", "a", 1).complete().obj(),
            job("js", "b", 0).complete().obj(),
        ];
        let (rs, rj) = (json!({"maxRestarts": 3}), restart_job.clone());
        // (case, spec, status, Jobs, (Failed reason, Completed), restarts, startTime written, deleted, requeue)
        type Want = (Option<&'static str>, bool, i32, Option<i64>, Vec<&'static str>, Option<u64>);
        let cases: Vec<(&str, Value, Value, &[Job], Want)> = vec![
            (
                "running, 5 s of 10 left",
                deadline(10, rs.clone()),
                five_ago.clone(),
                &all_running,
                (None, false, 0, Some(995), vec![], Some(5)),
            ),
            (
                "first start: the clock starts",
                deadline(10, rs.clone()),
                json!({}),
                &all_running,
                (None, false, 0, Some(1000), vec![], Some(10)),
            ),
            (
                "passed: failed, active Jobs deleted",
                deadline(10, rs.clone()),
                ten_ago.clone(),
                &all_running,
                (Some("DeadlineExceeded"), false, 0, Some(990), vec!["js-a-0", "js-a-1", "js-b-0"], None),
            ),
            (
                "passed with a failed Job: the deadline first, no restart",
                deadline(10, rs.clone()),
                ten_ago.clone(),
                &one_failed,
                (Some("DeadlineExceeded"), false, 0, Some(990), vec!["js-a-0", "js-b-0"], None),
            ),
            (
                "passed but complete: completed",
                deadline(10, rs.clone()),
                ten_ago.clone(),
                &all_done,
                (None, true, 0, Some(990), vec![], None),
            ),
            (
                "a JobSet restart: the clock starts again",
                deadline(10, rs.clone()),
                five_ago.clone(),
                &one_failed,
                (None, false, 1, Some(1000), vec![], Some(5)),
            ),
            (
                "a Job restart: the clock goes on",
                deadline(10, rj),
                five_ago.clone(),
                &one_failed,
                (None, false, 0, Some(995), vec![], Some(5)),
            ),
            (
                "no deadline: a start time, no requeue",
                json!({"failurePolicy": rs}),
                ten_ago.clone(),
                &all_running,
                (None, false, 0, Some(990), vec![], None),
            ),
            (
                "suspended: no start time",
                json!({"activeDeadlineSeconds": 10, "suspend": true}),
                ten_ago,
                &all_running,
                (None, false, 0, None, vec![], None),
            ),
        ];
        for (case, spec, status, jobs, want) in cases {
            let p = plan(&js(spec, status), jobs, &[]);
            let st = &p.update.status;
            let failed = st.conditions.iter().find(|c| c.type_ == "Failed" && c.status == "True");
            let by_deadline = failed.is_some_and(|f| f.reason == "DeadlineExceeded");
            assert_eq!(p.update.metrics.contains(&Metric::DeadlineExceeded), by_deadline, "{case}: the metric");
            if let Some(f) = failed.filter(|f| f.reason == "DeadlineExceeded") {
                assert_eq!(f.message, "JobSet was active for longer than the specified deadline of 10s", "{case}");
                assert_eq!(st.terminal_state, "Failed", "{case}");
            }
            let got = (
                failed.map(|c| if c.reason == "DeadlineExceeded" { "DeadlineExceeded" } else { "other" }),
                cond(&p, "Completed") == Some(("True", "AllJobsCompleted")),
                st.restarts,
                st.start_time.as_ref().map(|t| t.0.as_second()),
                p.delete_jobs.iter().map(String::as_str).collect(),
                p.requeue_after.map(|d| d.as_secs()),
            );
            assert_eq!(got, want, "{case}");
        }
        // Gate off: no start time, no deadline.
        let features = Features { active_deadline: false, ..Features::default() };
        let j = js(deadline(10, restart_job), json!({}));
        let p = sync(&SyncInput {
            js: &j,
            jobs: all_running.iter().collect(),
            pods: vec![],
            in_place: &Tally::default(),
            now: Timestamp::from_second(1_000).unwrap(),
            features: &features,
            history_limit: 10,
        })
        .unwrap();
        assert_eq!((p.update.status.start_time, p.requeue_after), (None, None));
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
        let recorded = json!({"currentInPlaceRestartAttempt": 0, "executionAttempts": 0, "startTime": "1970-01-01T00:16:40Z", "replicatedJobsStatus": [
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
            assert_eq!(p.trigger_pods, [TriggerPods::Job("js-a-1".into())], "{strategy} {action}");
            let counted = |m: &Metric| matches!(m, Metric::Restart { action: a, reason } if *a == action && reason == "PodFailurePolicy");
            assert!(p.update.metrics.iter().any(counted), "{strategy} {action}");
        }
        for (what, spec) in [
            ("FailJob", json!({"failurePolicy": {"rules": [{"name": "r", "action": "FailJob"}]}})),
            ("FailJobSet", json!({"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet"}]}})),
            ("no failure policy", json!({})),
        ] {
            let p = plan(&js(spec, json!({})), &failed, &[]);
            assert!(p.update.status.restart_history.is_empty() && p.trigger_pods.is_empty(), "{what}");
        }
    }

    #[test]
    fn a_failure_target_job_triggers_the_policy_once_and_its_later_failed_condition_counts_nothing() {
        // Jobs as constructed: every attempt label at 0.
        let made = |i| job("js", "a", i).label(JOB_RESTART_ATTEMPT, "0").label(REPLICATED_JOB_RESTART_ATTEMPT, "0");
        let ft = || made(1).counts(1, 0, 0).failure_target("BackoffLimitExceeded", 40);
        // The Job controller adds Failed once the pods are gone; the JobSet's Jobs stay as they were
        // (a slow controller has not deleted or recreated them yet).
        let both = [made(0).counts(1, 1, 0).obj(), ft().failed("BackoffLimitExceeded", 45).obj()];
        let pending = [made(0).counts(1, 1, 0).obj(), ft().obj()];
        let restart_counters = |p: &Plan| {
            let s = &p.update.status;
            let a = s.replicated_jobs_status.iter().find(|r| r.name == "a").cloned().unwrap_or_default();
            (s.restarts, s.restarts_count_towards_max, a.restarts, a.job_restarts, a.failed_job_indexes)
        };
        // (action, counters after the FailureTarget: restarts, counted, rjob restarts, jobRestarts, left failed)
        type Counters = (i32, i32, i32, Vec<i32>, Vec<i32>);
        let cases: [(&str, Counters); 4] = [
            ("RestartJobSet", (1, 1, 0, vec![], vec![])),
            ("RestartReplicatedJob", (0, 0, 1, vec![], vec![])),
            ("RestartJob", (0, 0, 0, vec![0, 1], vec![])),
            ("FailJob", (0, 0, 0, vec![], vec![1])),
        ];
        for (action, want) in cases {
            let j =
                js(json!({"failurePolicy": {"maxRestarts": 3, "rules": [{"name": "r", "action": action}]}}), json!({}));
            let first = plan_at(&j, &pending, &[], 50);
            assert_eq!(restart_counters(&first), want, "{action}: decided on FailureTarget, pods still terminating");
            assert_eq!(first.update.status.restart_history.len(), usize::from(action != "FailJob"), "{action}");
            for (what, jobs) in [("FailureTarget again", &pending), ("Failed arrived", &both)] {
                let p = plan_at(&after(&j, &first), jobs, &[], 51);
                assert_eq!(restart_counters(&p), want, "{action}, {what}: counted once");
                assert!(restart_metrics(&p).is_empty() && p.update.events.is_empty(), "{action}, {what}");
                assert_eq!(
                    p.update.status.restart_history.len(),
                    first.update.status.restart_history.len(),
                    "{action}, {what}"
                );
            }
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
        assert!(second.trigger_pods.is_empty());
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
            assert_eq!(p.trigger_pods, [TriggerPods::InPlace { deprecated: 0 }], "{case}");
            let again = plan(&after(&j, &p), &running_jobs(), pods);
            assert_eq!(again.update.status.restart_history.len(), 1, "{case}: once");
        }
    }

    /// Driver/workers: replicated job `driver` (1 Job of 1 pod) and `workers` (2 Jobs of 2 pods),
    /// `maxRestarts: 2`, a rule `workers-in-place` with `action` for `workers` (none: no rule).
    fn driver_workers(action: Option<&str>, status: Value) -> JobSet {
        let rj = |name: &str, replicas: i32, pods: i32| json!({"name": name, "replicas": replicas, "template": {"spec": {"parallelism": pods, "completions": pods}}});
        let rules = match action {
            Some(a) => json!([{"name": "workers-in-place", "action": a, "targetReplicatedJobs": ["workers"]}]),
            None => json!([]),
        };
        js(
            json!({"failurePolicy": {"maxRestarts": 2, "restartStrategy": "InPlaceRestart", "rules": rules},
                   "replicatedJobs": [rj("driver", 1, 1), rj("workers", 2, 2)]}),
            status,
        )
    }

    fn dw_jobs() -> [Job; 3] {
        [
            job("js", "driver", 0).counts(1, 1, 0).obj(),
            job("js", "workers", 0).parallelism(2, 2).counts(2, 2, 0).obj(),
            job("js", "workers", 1).parallelism(2, 2).counts(2, 2, 0).obj(),
        ]
    }

    /// A pod of Job `index` of `rjob`.
    fn dw_pod(rjob: &str, index: i32, n: i32) -> PodBuilder {
        pod("js", &format!("js-{rjob}-{index}-{n}"))
            .label(REPLICATED_JOB_NAME, rjob)
            .label(JOB_INDEX, &index.to_string())
            .label(jobset_api::job::JOB_NAME_LABEL, &format!("js-{rjob}-{index}"))
    }

    /// The driver's pod at `driver`, the workers' (Job 0's two, then Job 1's two) at `workers`.
    fn dw_pods(driver: i32, workers: [i32; 4]) -> Vec<PodBuilder> {
        let mut out = vec![dw_pod("driver", 0, 0).at(driver)];
        out.extend(workers.iter().enumerate().map(|(k, a)| dw_pod("workers", k as i32 / 2, k as i32 % 2).at(*a)));
        out
    }

    fn objs(pods: Vec<PodBuilder>) -> Vec<Pod> {
        pods.into_iter().map(PodBuilder::obj).collect()
    }

    /// `pods` with the worker of the one at `k` (0: the driver's) exited 1.
    fn failing(pods: Vec<PodBuilder>, k: usize) -> Vec<Pod> {
        failing_with(pods, &[(k, 1)])
    }

    /// `pods` with the worker of each one at `k` exited with its code.
    fn failing_with(pods: Vec<PodBuilder>, exits: &[(usize, i32)]) -> Vec<Pod> {
        let exit = |k| exits.iter().find(|(at, _)| *at == k).map(|(_, code)| *code);
        let pods = pods.into_iter().enumerate();
        objs(
            pods.map(|(k, p)| match exit(k) {
                Some(code) => p.terminated("worker", code, 900),
                None => p,
            })
            .collect(),
        )
    }

    fn rj_entry<'a>(p: &'a Plan, name: &str) -> &'a jobset_api::jobset::ReplicatedJobStatus {
        p.update.status.replicated_jobs_status.iter().find(|s| s.name == name).unwrap()
    }

    /// (current, previous) of the JobSet, of `workers`, of `driver`.
    type Attempts3 = [(Option<i32>, Option<i32>); 3];
    fn attempts(p: &Plan) -> Attempts3 {
        let s = &p.update.status;
        let rj = |n: &str| {
            let e = rj_entry(p, n);
            (e.current_in_place_restart_attempt, e.previous_in_place_restart_attempt)
        };
        [(s.current_in_place_restart_attempt, s.previous_in_place_restart_attempt), rj("workers"), rj("driver")]
    }

    fn events(p: &Plan) -> Vec<(&str, &str)> {
        p.update.events.iter().map(|e| (e.reason.as_str(), e.message.as_str())).collect()
    }

    fn restart_metrics(p: &Plan) -> Vec<(&'static str, &str)> {
        let m = p.update.metrics.iter();
        m.filter_map(|m| match m {
            Metric::Restart { action, reason } => Some((*action, reason.as_str())),
            _ => None,
        })
        .collect()
    }

    /// (scope, target, strategy, attempt, reason, rule, action, counted) of a record.
    type RecordRow<'a> = (
        jobset_api::jobset::RestartScope,
        Option<&'a str>,
        RestartStrategy,
        i32,
        &'a str,
        Option<&'a str>,
        &'a str,
        bool,
    );
    fn records(p: &Plan) -> Vec<RecordRow<'_>> {
        let h = p.update.status.restart_history.iter();
        h.map(|r| {
            let t = &r.trigger;
            (
                r.scope,
                r.target.as_deref(),
                r.strategy,
                r.attempt,
                t.reason.as_str(),
                t.rule.as_deref(),
                t.action.as_str(),
                t.counts_towards_max,
            )
        })
        .collect()
    }

    fn failed_cond(p: &Plan) -> Option<(&str, &str)> {
        let c = p.update.status.conditions.iter().find(|c| c.type_ == "Failed" && c.status == "True");
        c.map(|c| (c.reason.as_str(), c.message.as_str()))
    }

    const WORKERS_SYNCED: &str = r#"{"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0,
        "currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0, "inPlaceRestarts": 1, "inPlaceRestartsCountTowardsMax": 1}"#;

    /// The status after one in-place restart of the workers, synced at attempt 1.
    fn workers_restarted_once() -> Value {
        json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [serde_json::from_str::<Value>(WORKERS_SYNCED).unwrap()]})
    }

    #[test]
    fn a_failed_worker_restarts_only_the_workers_in_place() {
        use jobset_api::jobset::RestartScope;
        let j = driver_workers(Some("RestartReplicatedJob"), json!({"currentInPlaceRestartAttempt": 0}));
        let p = plan(&j, &dw_jobs(), &failing(dw_pods(0, [0; 4]), 3));
        assert_eq!(attempts(&p), [(Some(0), None), (None, Some(0)), (None, None)], "only the workers' previous moves");
        let w = rj_entry(&p, "workers");
        assert_eq!((w.in_place_restarts, w.in_place_restarts_count_towards_max, w.restarts), (1, 1, 0));
        assert_eq!((p.update.status.in_place_restarts, p.update.status.restarts), (0, 0));
        assert_eq!(
            events(&p),
            [(
                "RestartReplicatedJobFailurePolicyAction",
                "applying RestartReplicatedJob failure policy action (first failed job: js-workers-1)"
            )]
        );
        assert_eq!(restart_metrics(&p), [("RestartReplicatedJob", "WorkerFailed")]);
        assert_eq!(
            records(&p),
            [(
                RestartScope::ReplicatedJob,
                Some("workers"),
                RestartStrategy::InPlaceRestart,
                1,
                "WorkerFailed",
                Some("workers-in-place"),
                "RestartReplicatedJob",
                true
            )]
        );
        let want = TriggerPods::InPlaceScoped { attempt: 0, replicated_jobs: vec!["workers".into()], job_index: None };
        assert_eq!(p.trigger_pods, [want]);
    }

    #[test]
    fn the_workers_in_sync_again_lift_their_own_barrier_and_nothing_else_moves() {
        let restarted = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0,
             "previousInPlaceRestartAttempt": 0, "inPlaceRestarts": 1, "inPlaceRestartsCountTowardsMax": 1}]});
        // (case, pods, (JobSet, workers) attempts after)
        type Want = [(Option<i32>, Option<i32>); 2];
        let cases: Vec<(&str, Vec<Pod>, Want)> = vec![
            ("the workers restarting", objs(dw_pods(0, [0, 1, 0, 1])), [(Some(0), None), (None, Some(0))]),
            (
                "every worker announced the next attempt",
                objs(dw_pods(0, [1; 4])),
                [(Some(0), None), (Some(1), Some(0))],
            ),
            (
                "a worker not back yet",
                objs(dw_pods(0, [1; 4]).into_iter().take(4).collect()),
                [(Some(0), None), (None, Some(0))],
            ),
        ];
        for (case, pods, want) in cases {
            let p = plan(&driver_workers(Some("RestartReplicatedJob"), restarted.clone()), &dw_jobs(), &pods);
            assert_eq!(attempts(&p)[..2], want, "{case}");
            assert!(restart_metrics(&p).is_empty() && p.trigger_pods.is_empty(), "{case}: no restart");
            assert_eq!(rj_entry(&p, "workers").in_place_restarts, 1, "{case}");
        }
    }

    #[test]
    fn attempts_announced_past_a_gap_are_no_second_restart() {
        // Both replicated jobs restart alone; the driver's restarts took its attempt to 3, so the
        // workers' agents, deprecated at 0, announce 4.
        let status = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0,
             "previousInPlaceRestartAttempt": 0, "inPlaceRestarts": 1, "inPlaceRestartsCountTowardsMax": 1},
            {"name": "driver", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0,
             "currentInPlaceRestartAttempt": 3, "previousInPlaceRestartAttempt": 2}]});
        let mut j = driver_workers(Some("RestartReplicatedJobAndIgnoreMaxRestarts"), status);
        j.spec.failure_policy.as_mut().unwrap().rules[0].target_replicated_jobs.clear();
        let p = plan(&j, &dw_jobs(), &objs(dw_pods(3, [0, 4, 0, 4])));
        assert!(restart_metrics(&p).is_empty(), "the workers at 0 restart already");
        assert_eq!(attempts(&p)[1], (None, Some(0)));
        let p = plan(&j, &dw_jobs(), &objs(dw_pods(3, [4; 4])));
        assert_eq!(attempts(&p)[1], (Some(4), Some(0)), "in sync at 4");
    }

    #[test]
    fn a_replacement_worker_pod_restarts_the_rest_of_the_workers() {
        use jobset_api::jobset::RestartScope;
        let j = driver_workers(Some("RestartReplicatedJob"), workers_restarted_once());
        // The pod of a lost node came back new and announced the global maximum + 1.
        let p = plan(&j, &dw_jobs(), &objs(dw_pods(0, [1, 1, 1, 2])));
        assert_eq!(attempts(&p), [(Some(0), None), (Some(1), Some(1)), (None, None)]);
        assert_eq!(rj_entry(&p, "workers").in_place_restarts_count_towards_max, 2);
        assert_eq!(restart_metrics(&p), [("RestartReplicatedJob", "PodRestartedInPlace")]);
        let r = &records(&p)[0];
        assert_eq!((r.0, r.1, r.3, r.4), (RestartScope::ReplicatedJob, Some("workers"), 2, "PodRestartedInPlace"));
        let want = TriggerPods::InPlaceScoped { attempt: 1, replicated_jobs: vec!["workers".into()], job_index: None };
        assert_eq!(p.trigger_pods, [want]);
        assert_eq!(
            events(&p)[0].1,
            "applying RestartReplicatedJob failure policy action (first failed job: js-workers-1)"
        );
    }

    #[test]
    fn a_spent_budget_fails_the_jobset_as_the_recreate_form_would() {
        let counted = |extra: Value| {
            let mut s = workers_restarted_once();
            s.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            s
        };
        let mut spent_by_workers = workers_restarted_once();
        spent_by_workers["replicatedJobsStatus"][0]["inPlaceRestartsCountTowardsMax"] = json!(2);
        let cases = [
            ("the workers' own restarts", spent_by_workers),
            ("a JobSet recreation and the workers'", counted(json!({"restarts": 1, "restartsCountTowardsMax": 1}))),
            ("a JobSet in-place restart and the workers'", counted(json!({"inPlaceRestarts": 1}))),
        ];
        for (case, status) in cases {
            let j = driver_workers(Some("RestartReplicatedJob"), status);
            let p = plan(&j, &dw_jobs(), &failing(dw_pods(0, [1; 4]), 1));
            assert_eq!(
                failed_cond(&p),
                Some((
                    "ReachedMaxRestarts",
                    "jobset failed due to reaching max number of restarts (first failed job: js-workers-0)"
                )),
                "{case}"
            );
            assert_eq!(p.update.status.terminal_state, "Failed", "{case}");
            assert_eq!(rj_entry(&p, "workers").previous_in_place_restart_attempt, Some(0), "{case}: no restart");
            assert!(records(&p).is_empty() && restart_metrics(&p).is_empty(), "{case}");
        }
        let j = driver_workers(Some("RestartReplicatedJob"), workers_restarted_once());
        let p = plan(&j, &dw_jobs(), &failing(dw_pods(0, [1; 4]), 1));
        assert_eq!(failed_cond(&p), None, "one restart of two spent: the second goes ahead");
        assert_eq!(rj_entry(&p, "workers").in_place_restarts_count_towards_max, 2);
    }

    #[test]
    fn ignore_max_restarts_never_spends_the_budget() {
        let action = "RestartReplicatedJobAndIgnoreMaxRestarts";
        let mut status = workers_restarted_once();
        status["restartsCountTowardsMax"] = json!(5);
        status["restarts"] = json!(5);
        let j = driver_workers(Some(action), status);
        // A worker container restarted past maxRestarts: the count check is off too.
        let pods = dw_pods(0, [1; 4])
            .into_iter()
            .enumerate()
            .map(|(k, p)| if k == 2 { p.restart_count("worker", 7) } else { p });
        let p = plan(&j, &dw_jobs(), &failing(pods.collect(), 1));
        assert_eq!(failed_cond(&p), None);
        let w = rj_entry(&p, "workers");
        assert_eq!(
            (w.previous_in_place_restart_attempt, w.in_place_restarts, w.in_place_restarts_count_towards_max),
            (Some(1), 2, 1)
        );
        assert_eq!(events(&p)[0].0, "RestartReplicatedJobAndIgnoreMaxRestartsFailurePolicyAction");
        assert_eq!(restart_metrics(&p), [(action, "WorkerFailed")]);
        assert!(!records(&p)[0].7, "the record says it is not counted");
    }

    #[test]
    fn an_in_place_restart_by_a_rule_with_its_own_budget_spends_that_budget_alone() {
        let reached = "jobset failed due to reaching max number of restarts of failure policy rule workers-in-place (first failed job: js-workers-1)";
        // (case, the rule's restarts before, after, failed)
        for (case, before, after, fails) in
            [("within the rule's budget", 0, 1, false), ("the rule's budget spent", 1, 1, true)]
        {
            let mut status = workers_restarted_once();
            // maxRestarts (2) is spent: it no longer concerns this rule.
            status["restartsCountTowardsMax"] = json!(5);
            status["restarts"] = json!(5);
            if before > 0 {
                status["failurePolicyRulesStatus"] = json!([{"name": "workers-in-place", "restarts": before}]);
            }
            let mut j = driver_workers(Some("RestartReplicatedJob"), status);
            j.spec.failure_policy.as_mut().unwrap().rules[0].max_restarts = Some(1);
            // A worker container restarted past maxRestarts: upstream's count check is off too.
            let pods = dw_pods(0, [1; 4])
                .into_iter()
                .enumerate()
                .map(|(k, p)| if k == 2 { p.restart_count("worker", 7) } else { p });
            let p = plan(&j, &dw_jobs(), &failing(pods.collect(), 3));
            let s = &p.update.status;
            assert_eq!(failure_policy::rule_restarts(s, "workers-in-place"), after, "{case}");
            let w = rj_entry(&p, "workers");
            if fails {
                let failed = s.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
                assert_eq!(
                    (failed.reason.as_str(), failed.message.as_str()),
                    ("ReachedMaxRestarts", reached),
                    "{case}"
                );
                assert_eq!(w.in_place_restarts, 1, "{case}: no restart");
            } else {
                assert_eq!(failed_cond(&p), None, "{case}");
                assert_eq!((w.in_place_restarts, w.in_place_restarts_count_towards_max), (2, 1), "{case}: not counted");
                assert_eq!(events(&p)[0].0, "RestartReplicatedJobFailurePolicyAction", "{case}");
                assert!(!records(&p)[0].7, "{case}: the record says it is not counted towards maxRestarts");
            }
        }
    }

    #[test]
    fn a_container_restarted_past_max_restarts_fails_a_jobset_whose_scoped_rules_all_count() {
        let j = driver_workers(Some("RestartReplicatedJob"), workers_restarted_once());
        let pods = dw_pods(1, [1; 4])
            .into_iter()
            .enumerate()
            .map(|(k, p)| if k == 2 { p.restart_count("worker", 3) } else { p });
        let p = plan(&j, &dw_jobs(), &objs(pods.collect()));
        assert_eq!(
            failed_cond(&p),
            Some(("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"))
        );
    }

    #[test]
    fn a_driver_failure_in_scoped_mode_restarts_every_pod_and_is_counted() {
        use jobset_api::jobset::RestartScope;
        let j = driver_workers(Some("RestartReplicatedJob"), workers_restarted_once());
        let p = plan(&j, &dw_jobs(), &failing(dw_pods(0, [1; 4]), 0));
        assert_eq!(
            attempts(&p),
            [(Some(0), Some(1)), (Some(1), Some(0)), (None, None)],
            "previous ≥ every pod's attempt"
        );
        assert_eq!((p.update.status.in_place_restarts, rj_entry(&p, "workers").in_place_restarts), (1, 1));
        assert_eq!(
            events(&p),
            [(
                "RestartJobSetFailurePolicyAction",
                "applying RestartJobSet failure policy action (first failed job: js-driver-0)"
            )]
        );
        assert_eq!(restart_metrics(&p), [("RestartJobSet", "WorkerFailed")]);
        assert_eq!(
            records(&p),
            [(
                RestartScope::JobSet,
                None,
                RestartStrategy::InPlaceRestart,
                2,
                "WorkerFailed",
                None,
                "RestartJobSet",
                true
            )]
        );
        let want = TriggerPods::InPlaceScoped { attempt: 0, replicated_jobs: vec!["driver".into()], job_index: None };
        assert_eq!(p.trigger_pods, [want]);
        // Every pod back at 2: the JobSet's current covers them all, the workers' entry stays.
        let again = plan(&after(&j, &p), &dw_jobs(), &objs(dw_pods(2, [2; 4])));
        assert_eq!(attempts(&again), [(Some(2), Some(1)), (Some(1), Some(0)), (None, None)]);
        assert!(restart_metrics(&again).is_empty());
    }

    #[test]
    fn until_the_jobset_is_in_sync_at_its_newest_attempt_every_pod_waits_for_all_the_others() {
        let js_restarting = json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 1,
            "replicatedJobsStatus": [serde_json::from_str::<Value>(WORKERS_SYNCED).unwrap()]});
        // (case, status, pods, attempts after: JobSet, workers)
        type Want = [(Option<i32>, Option<i32>); 2];
        let cases: Vec<(&str, Value, Vec<Pod>, Want)> = vec![
            (
                "startup: the workers in sync, the driver not there yet",
                json!({}),
                objs(dw_pods(0, [0; 4]).into_iter().skip(1).collect()),
                [(None, None), (None, None)],
            ),
            ("startup: every pod in sync", json!({}), objs(dw_pods(0, [0; 4])), [(Some(0), None), (None, None)]),
            (
                "a JobSet-wide restart: the workers back first",
                js_restarting.clone(),
                objs(dw_pods(1, [2; 4])),
                [(Some(0), Some(1)), (Some(1), Some(0))],
            ),
            (
                "a JobSet-wide restart: every pod back",
                js_restarting.clone(),
                objs(dw_pods(2, [2; 4])),
                [(Some(2), Some(1)), (Some(1), Some(0))],
            ),
            (
                // The workers' pods once at 3 all failed and were replaced: the agents announce 4.
                "a JobSet-wide restart: agents announcing past a gap",
                {
                    let mut s = js_restarting.clone();
                    s["replicatedJobsStatus"][0]["currentInPlaceRestartAttempt"] = json!(3);
                    s
                },
                objs(dw_pods(4, [1, 4, 4, 4])),
                [(Some(0), Some(1)), (Some(3), Some(0))],
            ),
        ];
        for (case, status, pods, want) in cases {
            let p = plan(&driver_workers(Some("RestartReplicatedJob"), status), &dw_jobs(), &pods);
            assert_eq!(attempts(&p)[..2], want, "{case}");
            assert!(restart_metrics(&p).is_empty(), "{case}");
        }
        // A worker's pod replaced before the first sync: upstream's hybrid restart of every pod.
        let p =
            plan(&driver_workers(Some("RestartReplicatedJob"), json!({})), &dw_jobs(), &objs(dw_pods(0, [0, 0, 0, 1])));
        assert_eq!(attempts(&p)[..2], [(None, Some(0)), (None, None)]);
        assert_eq!(
            (restart_metrics(&p), p.update.status.in_place_restarts),
            (vec![("RestartJobSet", "PodRestartedInPlace")], 1)
        );
        let every = vec!["driver".into(), "workers".into()];
        assert_eq!(
            p.trigger_pods,
            [TriggerPods::InPlaceScoped { attempt: 0, replicated_jobs: every, job_index: None }]
        );
        assert_eq!(events(&p)[0].1, "applying RestartJobSet failure policy action (first failed job: js-workers-1)");
        // A worker's pod replaced during a JobSet-wide restart: every pod again, none left behind.
        let p = plan(
            &driver_workers(Some("RestartReplicatedJob"), js_restarting),
            &dw_jobs(),
            &objs(dw_pods(2, [2, 2, 2, 3])),
        );
        assert_eq!(attempts(&p)[..2], [(Some(0), Some(2)), (Some(1), Some(0))]);
    }

    #[test]
    fn a_replaced_driver_pod_restarts_every_pod() {
        let j = driver_workers(Some("RestartReplicatedJob"), workers_restarted_once());
        // The only driver pod came back new at the global maximum + 1: the workers must join it.
        let p = plan(&j, &dw_jobs(), &objs(dw_pods(2, [1; 4])));
        assert_eq!(attempts(&p)[0], (Some(0), Some(1)));
        assert_eq!(restart_metrics(&p), [("RestartJobSet", "PodRestartedInPlace")]);
    }

    #[test]
    fn restart_job_in_place_restarts_only_that_jobs_pods() {
        use jobset_api::jobset::{JobInPlaceRestartStatus, RestartScope};
        let j = driver_workers(Some("RestartJob"), json!({"currentInPlaceRestartAttempt": 0}));
        let p = plan(&j, &dw_jobs(), &failing(dw_pods(0, [0; 4]), 3));
        let w = rj_entry(&p, "workers");
        let entry = JobInPlaceRestartStatus {
            job_index: 1,
            previous_in_place_restart_attempt: Some(0),
            restarts: 1,
            restarts_count_towards_max: 1,
            ..Default::default()
        };
        assert_eq!(w.in_place_restart_jobs, [entry]);
        assert_eq!(attempts(&p), [(Some(0), None), (None, None), (None, None)]);
        assert_eq!(
            events(&p),
            [(
                "RestartJobFailurePolicyAction",
                "applying RestartJob failure policy action (first failed job: js-workers-1)"
            )]
        );
        let r = &records(&p)[0];
        assert_eq!((r.0, r.1, r.3, r.6), (RestartScope::Job, Some("js-workers-1"), 1, "RestartJob"));
        assert_eq!(p.update.status.restart_history[0].trigger.job.as_deref(), Some("js-workers-1"));
        let want =
            TriggerPods::InPlaceScoped { attempt: 0, replicated_jobs: vec!["workers".into()], job_index: Some(1) };
        assert_eq!(p.trigger_pods, [want]);
        // Job 1's pods back at 1: its own current; Job 0's pods stayed at 0.
        let again = plan(&after(&j, &p), &dw_jobs(), &objs(dw_pods(0, [0, 0, 1, 1])));
        let jobs = &rj_entry(&again, "workers").in_place_restart_jobs;
        assert_eq!((jobs.len(), jobs[0].current_in_place_restart_attempt), (1, Some(1)));
        assert!(restart_metrics(&again).is_empty());
    }

    #[test]
    fn two_scopes_restarted_in_one_reconcile_each_get_their_trigger() {
        let every_rjob = |action: &str| {
            let mut j = driver_workers(Some(action), json!({"currentInPlaceRestartAttempt": 0}));
            j.spec.failure_policy.as_mut().unwrap().rules[0].target_replicated_jobs.clear();
            j
        };
        // (case, JobSet, failed workers (pod, exit code), per record: (target, pod, exit code))
        type Want = [(&'static str, &'static str, i32); 2];
        type Case = (&'static str, JobSet, [(usize, i32); 2], Want);
        let cases: [Case; 2] = [
            (
                "two Jobs of a replicated job",
                driver_workers(Some("RestartJob"), json!({"currentInPlaceRestartAttempt": 0})),
                [(1, 3), (3, 4)],
                [("js-workers-0", "js-workers-0-0", 3), ("js-workers-1", "js-workers-1-0", 4)],
            ),
            (
                "two replicated jobs",
                every_rjob("RestartReplicatedJob"),
                [(0, 3), (4, 4)],
                [("driver", "js-driver-0-0", 3), ("workers", "js-workers-1-1", 4)],
            ),
        ];
        for (case, j, exits, want) in cases {
            let pods = failing_with(dw_pods(0, [0; 4]), &exits);
            let mut p = plan(&j, &dw_jobs(), &pods);
            restart_history::complete_triggers(&mut p.update, &p.trigger_pods, &pods);
            let got: Vec<_> = (p.update.status.restart_history.iter())
                .map(|r| {
                    let t = &r.trigger;
                    (r.target.as_deref(), t.pod.as_deref(), t.container.as_deref(), t.exit_code)
                })
                .collect();
            let want: Vec<_> =
                want.iter().map(|(tg, pod, code)| (Some(*tg), Some(*pod), Some("worker"), Some(*code))).collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn the_same_state_twice_restarts_and_counts_once() {
        let cases = [
            ("a failed worker", Some("RestartReplicatedJob"), failing(dw_pods(0, [1; 4]), 1)),
            ("a replacement worker", Some("RestartReplicatedJob"), objs(dw_pods(0, [1, 1, 1, 2]))),
            ("a failed driver", Some("RestartReplicatedJob"), failing(dw_pods(0, [1; 4]), 0)),
            ("a failed worker of a Job", Some("RestartJob"), failing(dw_pods(0, [1; 4]), 1)),
        ];
        for (case, action, pods) in cases {
            let j = driver_workers(action, workers_restarted_once());
            let first = plan_at(&j, &dw_jobs(), &pods, 50);
            assert_eq!(first.update.status.restart_history.len(), 1, "{case}");
            let second = plan_at(&after(&j, &first), &dw_jobs(), &pods, 51);
            let s = |p: &Plan| {
                let st = &p.update.status;
                (
                    st.in_place_restarts,
                    st.replicated_jobs_status.clone(),
                    st.restart_history.len(),
                    st.previous_in_place_restart_attempt,
                )
            };
            assert_eq!(s(&second), s(&first), "{case}");
            assert!(
                restart_metrics(&second).is_empty()
                    && second.update.events.is_empty()
                    && second.trigger_pods.is_empty(),
                "{case}"
            );
        }
    }

    #[test]
    fn a_jobset_with_only_upstream_rules_restarts_in_place_as_upstream() {
        let rule = |r: Value| {
            driver_workers(None, json!({})).spec.failure_policy.map(|mut f| {
                f.rules = serde_json::from_value(json!([r])).unwrap();
                f
            })
        };
        let policies = [
            ("RestartJobSet", rule(json!({"name": "r", "action": "RestartJobSet"}))),
            ("FailJobSet", rule(json!({"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["workers"]}))),
            (
                "RestartReplicatedJob with reasons",
                rule(
                    json!({"name": "r", "action": "RestartReplicatedJob", "onJobFailureReasons": ["PodFailurePolicy"]}),
                ),
            ),
            (
                "RestartJob with patterns",
                rule(json!({"name": "r", "action": "RestartJob", "onJobFailureMessagePatterns": ["x"]})),
            ),
        ];
        let states: Vec<(&str, Value, Vec<Pod>)> = vec![
            ("startup", json!({}), objs(dw_pods(0, [0; 4]))),
            ("a failed worker", json!({"currentInPlaceRestartAttempt": 0}), failing(dw_pods(0, [0; 4]), 2)),
            ("an agent moved on", json!({"currentInPlaceRestartAttempt": 0}), objs(dw_pods(0, [0, 1, 0, 0]))),
            ("beyond maxRestarts", json!({"currentInPlaceRestartAttempt": 2}), objs(dw_pods(3, [2; 4]))),
        ];
        for (state, status, pods) in &states {
            let upstream = plan(&driver_workers(None, status.clone()), &dw_jobs(), pods);
            for (policy, fp) in &policies {
                let mut j = driver_workers(None, status.clone());
                j.spec.failure_policy = fp.clone();
                let p = plan(&j, &dw_jobs(), pods);
                assert_eq!(p.update.status, upstream.update.status, "{state}, {policy}");
                assert_eq!(
                    (&p.update.events, &p.update.metrics, &p.trigger_pods),
                    (&upstream.update.events, &upstream.update.metrics, &upstream.trigger_pods),
                    "{state}, {policy}"
                );
            }
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
        assert!(p.update.status.restart_history.is_empty() && p.trigger_pods.is_empty());
    }
}
