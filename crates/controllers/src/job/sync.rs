//! The Job controller's decision: from a Job and its pods to a plan (status, pod creations,
//! deletions, finalizer removals). Pure; `job::reconcile` does the I/O.
//!
//! Accounting is two-phase and crash-safe, as upstream's: a finished pod's UID (or, for
//! Indexed Jobs, its index) is first recorded in the status, and only after that status write
//! succeeded is its `batch.kubernetes.io/job-tracking` finalizer removed. A pod without the
//! finalizer is counted already, so a controller killed at any instant never counts twice.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::backoff::{self, BackoffConfig, BackoffRecord};
use super::indexes::{self, Intervals};
use super::pod_failure_policy::{Action, match_pod_failure_policy};
use super::success_policy::match_success_policy;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const CONTROLLER_NAME: &str = "kubernetes.io/job-controller";
const MAX_UNCOUNTED: usize = 500;
const MAX_POD_CHANGES: usize = 500;

#[derive(Debug, Clone, Default)]
pub struct SyncConfig {
    pub backoff: BackoffConfig,
}

pub struct SyncInput<'a> {
    pub job: &'a Job,
    /// `setConditionReason` of each podFailurePolicy rule (a local-mode extension, read from raw JSON).
    pub set_condition_reasons: Vec<Option<String>>,
    /// Pods whose controller is this Job.
    pub pods: Vec<&'a Pod>,
    pub now: Timestamp,
    pub backoff: BackoffRecord,
    pub config: &'a SyncConfig,
    /// UIDs of pods whose tracking finalizer this controller removed but the cache still shows
    /// (upstream's `expectedRmFinalizers`): they are not counted anew, so a pod the Job deleted is
    /// never counted as newly failed by a sync on a stale cache.
    pub expected_finalizer_removals: HashSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub kind: EventKind,
    pub reason: String,
    pub message: String,
}

/// What a sync decided. `status` is written first; everything else only after that write succeeded.
#[derive(Debug, Default)]
pub struct Plan {
    pub status: Option<JobStatus>,
    /// Pods to delete; those marked `uncounted` lose their finalizer first, so they never count as failed.
    pub deletes: Vec<PodDelete>,
    pub creates: Vec<Pod>,
    /// Pods whose tracking finalizer goes (their fate is recorded in the status being written).
    pub remove_finalizers: Vec<String>,
    pub requeue_after: Option<Duration>,
    pub events: Vec<PlannedEvent>,
    pub backoff: BackoffRecord,
    /// The Job reached Complete or Failed in this sync.
    pub finished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDelete {
    pub name: String,
    pub remove_finalizer_first: bool,
}

/// Whether the pod carries the `batch.kubernetes.io/job-tracking` finalizer.
pub(crate) fn has_finalizer(p: &Pod) -> bool {
    p.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER))
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

fn deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn terminal(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap_or_default()
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == type_ && c.status == "True")
}

fn new_condition(type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Appends or updates a condition; lastTransitionTime changes only when the status flips.
fn set_condition(status: &mut JobStatus, c: JobCondition) {
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) if x.status == c.status => {
            x.reason = c.reason;
            x.message = c.message;
            x.last_probe_time = c.last_probe_time;
        }
        Some(x) => *x = c,
        None => list.push(c),
    }
}

#[derive(Debug, Clone)]
struct Finish {
    failure: bool,
    reason: String,
    message: String,
}

impl Finish {
    fn interim_type(&self) -> &'static str {
        if self.failure { "FailureTarget" } else { "SuccessCriteriaMet" }
    }
    fn terminal_type(&self) -> &'static str {
        if self.failure { "Failed" } else { "Complete" }
    }
}

/// Job spec fields with their defaults applied.
struct Spec<'a> {
    parallelism: i32,
    completions: Option<i32>,
    indexed: bool,
    backoff_limit: i32,
    per_index: Option<i32>,
    max_failed_indexes: Option<i32>,
    only_replace_failed: bool,
    suspend: bool,
    deadline: Option<i64>,
    job: &'a Job,
}

impl<'a> Spec<'a> {
    fn of(job: &'a Job) -> Spec<'a> {
        let s = job.spec.as_ref();
        let pfp = s.and_then(|s| s.pod_failure_policy.as_ref());
        let per_index = s.and_then(|s| s.backoff_limit_per_index);
        Spec {
            parallelism: s.and_then(|s| s.parallelism).unwrap_or(1).max(0),
            completions: s.and_then(|s| s.completions),
            indexed: s.and_then(|s| s.completion_mode.as_deref()) == Some("Indexed"),
            backoff_limit: s.and_then(|s| s.backoff_limit).unwrap_or(if per_index.is_some() { i32::MAX } else { 6 }),
            per_index,
            max_failed_indexes: s.and_then(|s| s.max_failed_indexes),
            only_replace_failed: pfp.is_some() || s.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed"),
            suspend: s.and_then(|s| s.suspend).unwrap_or(false),
            deadline: s.and_then(|s| s.active_deadline_seconds),
            job,
        }
    }
    fn restart_policy(&self) -> &str {
        self.job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Never")
    }
}

/// A pod's index, when it is valid for this Job.
fn valid_index(spec: &Spec<'_>, p: &Pod) -> Option<i32> {
    let i = indexes::pod_index(p)?;
    (i >= 0 && i < spec.completions.unwrap_or(0)).then_some(i)
}

fn is_failed(spec: &Spec<'_>, p: &Pod) -> bool {
    phase(p) == "Failed" || (!spec.only_replace_failed && deleting(p) && phase(p) != "Succeeded")
}

/// Upstream's `getPodsWithDelayedDeletionPerIndex` (backoffLimitPerIndex): for each index with
/// no active pod that has neither succeeded nor failed, the failed pod that keeps its finalizer,
/// uncounted, until the index's replacement exists, so that the replacement's failure count
/// counts it even if someone deletes it meanwhile. Of several, the one with the highest failure
/// count (ignored ones included), the latest finished on a tie.
fn pods_with_delayed_deletion<'p>(
    spec: &Spec<'_>,
    tracked: impl Fn(&Pod) -> bool,
    pods: &[&'p Pod],
    active: &[&Pod],
    succeeded: &Intervals,
    failed: &Intervals,
) -> BTreeMap<i32, &'p Pod> {
    let active: BTreeSet<i32> = active.iter().filter_map(|p| indexes::pod_index(p)).collect();
    let absolute = |p: &Pod| {
        let (counted, ignored) = indexes::index_failure_counts(p);
        i64::from(counted) + i64::from(ignored)
    };
    let mut delayed: BTreeMap<i32, &Pod> = BTreeMap::new();
    for p in pods.iter().copied().filter(|p| tracked(p) && is_failed(spec, p)) {
        let Some(i) = valid_index(spec, p) else { continue };
        if succeeded.contains(i) || failed.contains(i) || active.contains(&i) {
            continue;
        }
        match delayed.get(&i) {
            Some(last) if absolute(last) > absolute(p) || backoff::finish_time(p) < backoff::finish_time(last) => {}
            _ => {
                delayed.insert(i, p);
            }
        }
    }
    delayed
}

pub fn sync(input: &SyncInput<'_>) -> Plan {
    let job = input.job;
    let now = input.now;
    let spec = Spec::of(job);
    let mut plan = Plan { backoff: input.backoff.clone(), ..Plan::default() };
    let managed_by = job.spec.as_ref().and_then(|s| s.managed_by.as_deref());
    if managed_by.is_some_and(|m| m != CONTROLLER_NAME) {
        return plan;
    }
    // A pod is tracked while it has the finalizer and we did not remove it ourselves already.
    let tracked = |p: &Pod| has_finalizer(p) && !input.expected_finalizer_removals.contains(uid(p));
    let old = job.status.clone().unwrap_or_default();
    let finished = condition(&old, "Complete").is_some() || condition(&old, "Failed").is_some();
    if finished || job.metadata.deletion_timestamp.is_some() {
        // Finished, or the Job itself is going: only make sure no pod keeps the tracking
        // finalizer (a deleted Job's running pods are not counted).
        plan.remove_finalizers = input.pods.iter().filter(|p| tracked(p)).map(|p| name(p).to_string()).collect();
        return plan;
    }
    let mut status = old.clone();
    let pfp = job.spec.as_ref().and_then(|s| s.pod_failure_policy.as_ref());
    let by_uid: BTreeMap<&str, &Pod> = input.pods.iter().map(|p| (uid(p), *p)).collect();

    // 1. Move recorded pods whose finalizer is gone into the counters.
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let (mut unc_succeeded, mut unc_failed) = (vec![], vec![]);
    let mut succeeded_counter = status.succeeded.unwrap_or(0);
    let mut failed_counter = status.failed.unwrap_or(0);
    // Unlike upstream, an expected removal does not count here: only the cache showing the
    // finalizer gone does, so a controller restarted on a cache that still shows it (its
    // expectations lost) finds the pod recorded, not new.
    for u in uncounted.succeeded.unwrap_or_default() {
        match by_uid.get(u.as_str()) {
            Some(p) if has_finalizer(p) => unc_succeeded.push(u),
            _ => succeeded_counter += 1,
        }
    }
    for u in uncounted.failed.unwrap_or_default() {
        match by_uid.get(u.as_str()) {
            Some(p) if has_finalizer(p) => unc_failed.push(u),
            _ => failed_counter += 1,
        }
    }
    let recorded: BTreeSet<String> = unc_succeeded.iter().chain(unc_failed.iter()).cloned().collect();

    // 2. Classify pods.
    let active: Vec<&Pod> = input.pods.iter().copied().filter(|p| !terminal(p) && !deleting(p)).collect();
    let mut terminating = input.pods.iter().filter(|p| !terminal(p) && deleting(p)).count() as i32;
    let matches: BTreeMap<&str, super::pod_failure_policy::Match> = input
        .pods
        .iter()
        .filter(|p| is_failed(&spec, p))
        .filter_map(|p| Some((uid(p), match_pod_failure_policy(pfp?, &input.set_condition_reasons, p))))
        .collect();
    let ignored = |p: &Pod| matches.get(uid(p)).is_some_and(|m| m.action == Some(Action::Ignore));
    let countable = |p: &Pod| !spec.indexed || valid_index(&spec, p).is_some();
    let new_finished: Vec<&Pod> = input
        .pods
        .iter()
        .copied()
        .filter(|p| tracked(p) && !recorded.contains(uid(p)) && countable(p))
        .filter(|p| phase(p) == "Succeeded" || is_failed(&spec, p))
        .collect();
    let new_failed_counted = new_finished.iter().filter(|p| phase(p) != "Succeeded" && !ignored(p)).count() as i32;
    let new_succeeded = new_finished.iter().filter(|p| phase(p) == "Succeeded").count() as i32;

    // 3. Terminal-state evaluation, in upstream's order.
    if status.start_time.is_none() && !spec.suspend {
        status.start_time = Some(Time(now));
    }
    let finished_times: Vec<(Timestamp, bool)> =
        new_finished.iter().map(|p| (backoff::finish_time(p).unwrap_or(now), phase(p) == "Succeeded")).collect();
    plan.backoff.update(&finished_times);
    let failed_total = failed_counter + unc_failed.len() as i32 + new_failed_counted;
    let mut finish: Option<Finish> = None;
    let success_sticky = condition(&old, "SuccessCriteriaMet").cloned();
    if let Some(c) = &success_sticky {
        finish = Some(Finish {
            failure: false,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        });
    } else if let Some(c) = condition(&old, "FailureTarget") {
        finish = Some(Finish {
            failure: true,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        });
    } else if pfp.is_some() {
        // Any failed pod of the Job (counted already or not) matching a FailJob rule.
        finish = input.pods.iter().find_map(|p| {
            let m = matches.get(uid(p))?;
            let msg = m.fail_job_message.clone()?;
            Some(Finish {
                failure: true,
                reason: m.condition_reason.clone().unwrap_or_else(|| "PodFailurePolicy".into()),
                message: msg,
            })
        });
    }
    if finish.is_none() {
        if failed_total > spec.backoff_limit || past_backoff_limit_on_failure(&spec, &input.pods) {
            finish = Some(Finish {
                failure: true,
                reason: "BackoffLimitExceeded".into(),
                message: "Job has reached the specified backoff limit".into(),
            });
        } else if let Some(ads) = spec.deadline.filter(|_| !spec.suspend) {
            let start = status.start_time.as_ref().map(|t| t.0).unwrap_or(now);
            let end = start + jiff::SignedDuration::from_secs(ads);
            if now >= end {
                finish = Some(Finish {
                    failure: true,
                    reason: "DeadlineExceeded".into(),
                    message: "Job was active longer than specified deadline".into(),
                });
            } else {
                requeue(&mut plan, end.duration_since(now).unsigned_abs());
            }
        }
    }
    let completions = spec.completions.unwrap_or(0);
    let mut succeeded_indexes = Intervals::default();
    let mut failed_indexes = Intervals::default();
    if spec.indexed {
        let prev = Intervals::parse(old.completed_indexes.as_deref().unwrap_or_default(), completions);
        let newly =
            input.pods.iter().filter(|p| tracked(p) && phase(p) == "Succeeded").filter_map(|p| valid_index(&spec, p));
        succeeded_indexes = prev.union(&Intervals::from_indexes(newly));
        if let Some(limit) = spec.per_index {
            let prev = Intervals::parse(old.failed_indexes.as_deref().unwrap_or_default(), completions);
            let newly = input.pods.iter().filter(|p| tracked(p) && is_failed(&spec, p)).filter_map(|p| {
                let i = valid_index(&spec, p)?;
                let m = matches.get(uid(p));
                let fail_index = m.is_some_and(|m| m.action == Some(Action::FailIndex));
                let counted = !ignored(p);
                (fail_index || (counted && indexes::index_failure_counts(p).0 >= limit)).then_some(i)
            });
            failed_indexes = prev.union(&Intervals::from_indexes(newly));
            if finish.is_none() && success_sticky.is_none() {
                if spec.max_failed_indexes.is_some_and(|m| failed_indexes.total() > m) {
                    finish = Some(Finish {
                        failure: true,
                        reason: "MaxFailedIndexesExceeded".into(),
                        message: "Job has exceeded the specified maximal number of failed indexes".into(),
                    });
                } else if failed_indexes.total() > 0
                    && failed_indexes.total() + succeeded_indexes.total() >= completions
                {
                    finish = Some(Finish {
                        failure: true,
                        reason: "FailedIndexes".into(),
                        message: "Job has failed indexes".into(),
                    });
                }
            }
        }
        if finish.is_none()
            && let Some(policy) = job.spec.as_ref().and_then(|s| s.success_policy.as_ref())
            && let Some(msg) = match_success_policy(policy, completions, &succeeded_indexes)
        {
            finish = Some(Finish { failure: false, reason: "SuccessPolicy".into(), message: msg });
        }
    }
    let delayed = if spec.indexed && spec.per_index.is_some() {
        pods_with_delayed_deletion(&spec, tracked, &input.pods, &active, &succeeded_indexes, &failed_indexes)
    } else {
        BTreeMap::new()
    };
    let succeeded_total = if spec.indexed {
        succeeded_indexes.total()
    } else {
        succeeded_counter + unc_succeeded.len() as i32 + new_succeeded
    };

    // 4. Pods: on a decided fate delete what still runs; otherwise manage the active set.
    let mut active_count = active.len() as i32;
    let mut ready_count = active.iter().filter(|p| ready(p)).count() as i32;
    if finish.is_some() {
        for p in &active {
            plan.deletes.push(PodDelete { name: name(p).to_string(), remove_finalizer_first: false });
        }
        terminating += active_count;
        active_count = 0;
        ready_count = 0;
    } else {
        let m = manage(
            &spec,
            input,
            &active,
            terminating,
            succeeded_total,
            &succeeded_indexes,
            &failed_indexes,
            &delayed,
            &mut plan,
            &mut status,
        );
        active_count += m.created - m.deleted;
        ready_count -= m.deleted_ready;
        terminating += m.deleted;
        let done = match spec.completions {
            None => succeeded_total > 0 && active_count == 0,
            Some(c) => succeeded_total >= c && active_count == 0,
        };
        if done {
            finish = Some(Finish {
                failure: false,
                reason: "CompletionsReached".into(),
                message: "Reached expected number of succeeded pods".into(),
            });
        }
    }

    // 5. Record finished pods (phase 1 of the accounting); their finalizers go after the write.
    let deleting_now: BTreeSet<&str> =
        plan.deletes.iter().filter(|d| !d.remove_finalizer_first).map(|d| d.name.as_str()).collect();
    let mut budget = MAX_UNCOUNTED.saturating_sub(unc_succeeded.len() + unc_failed.len());
    let mut capped = false;
    // Upstream's `canRemoveFinalizer`: while the Job's fate is open, an index's delayed pod keeps
    // its finalizer and is not counted yet.
    let delayed_now = |p: &Pod| {
        finish.is_none() && valid_index(&spec, p).and_then(|i| delayed.get(&i)).is_some_and(|d| uid(d) == uid(p))
    };
    for p in input.pods.iter().filter(|p| tracked(p) && !recorded.contains(uid(p)) && !delayed_now(p)) {
        let finishing_failed = finish.as_ref().is_some_and(|f| f.failure);
        let record_failed = countable(p)
            && ((is_failed(&spec, p) && !ignored(p))
                || (finishing_failed && !terminal(p) && (deleting(p) || deleting_now.contains(name(p)))));
        let record_succeeded = phase(p) == "Succeeded" && countable(p);
        let removable = record_failed
            || record_succeeded
            || (is_failed(&spec, p) && (ignored(p) || !countable(p)))
            || (phase(p) == "Succeeded" && !countable(p))
            || (finish.is_some() && !terminal(p) && (deleting(p) || deleting_now.contains(name(p))));
        if !removable {
            continue;
        }
        if (record_failed || (record_succeeded && !spec.indexed)) && budget == 0 {
            capped = true;
            continue;
        }
        if record_failed {
            unc_failed.push(uid(p).to_string());
            budget -= 1;
        } else if record_succeeded && !spec.indexed {
            unc_succeeded.push(uid(p).to_string());
            budget -= 1;
        }
        plan.remove_finalizers.push(name(p).to_string());
    }
    // Pods recorded by an earlier sync whose finalizer removal did not happen yet.
    for u in recorded.iter() {
        if let Some(p) = by_uid.get(u.as_str())
            && tracked(p)
            && !delayed_now(p)
        {
            plan.remove_finalizers.push(name(p).to_string());
        }
    }
    if capped {
        requeue(&mut plan, Duration::from_millis(10));
    }

    // 6. Status.
    status.active = Some(active_count);
    status.ready = Some(ready_count.max(0));
    status.terminating = Some(terminating);
    status.failed = Some(failed_counter);
    if spec.indexed {
        status.completed_indexes = Some(succeeded_indexes.to_string());
        status.succeeded = Some(succeeded_indexes.total());
        if spec.per_index.is_some() {
            status.failed_indexes = Some(failed_indexes.to_string());
        }
    } else {
        status.succeeded = Some(succeeded_counter);
    }
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!unc_succeeded.is_empty()).then_some(unc_succeeded.clone()),
        failed: (!unc_failed.is_empty()).then_some(unc_failed.clone()),
    });
    if let Some(f) = &finish {
        if condition(&status, f.interim_type()).is_none() {
            set_condition(&mut status, new_condition(f.interim_type(), "True", &f.reason, &f.message, now));
        }
        if unc_succeeded.is_empty() && unc_failed.is_empty() && terminating == 0 && !capped {
            set_condition(&mut status, new_condition(f.terminal_type(), "True", &f.reason, &f.message, now));
            status.active = Some(0);
            status.ready = Some(0);
            if f.failure {
                plan.events.push(PlannedEvent {
                    kind: EventKind::Warning,
                    reason: f.reason.clone(),
                    message: f.message.clone(),
                });
            } else {
                status.completion_time = Some(Time(now));
                plan.events.push(PlannedEvent {
                    kind: EventKind::Normal,
                    reason: "Completed".into(),
                    message: "Job completed".into(),
                });
            }
            plan.finished = true;
            plan.requeue_after = None;
        }
    }
    if status != old {
        plan.status = Some(status);
    }
    plan
}

fn requeue(plan: &mut Plan, after: Duration) {
    let after = after.max(Duration::from_millis(1));
    plan.requeue_after = Some(plan.requeue_after.map_or(after, |d| d.min(after)));
}

fn past_backoff_limit_on_failure(spec: &Spec<'_>, pods: &[&Pod]) -> bool {
    if spec.restart_policy() != "OnFailure" {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
        .map(|c| c.restart_count)
        .sum();
    if spec.backoff_limit == 0 { restarts > 0 } else { restarts >= spec.backoff_limit }
}

struct Managed {
    created: i32,
    deleted: i32,
    deleted_ready: i32,
}

/// Deletion order for surplus pods: not ready before ready, unscheduled before scheduled, pending before running.
fn surplus_order(p: &Pod) -> (bool, bool, bool, std::cmp::Reverse<i32>) {
    let scheduled = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| !n.is_empty());
    (ready(p), scheduled, phase(p) == "Running", std::cmp::Reverse(indexes::pod_index(p).unwrap_or(-1)))
}

#[allow(clippy::too_many_arguments)]
fn manage(
    spec: &Spec<'_>,
    input: &SyncInput<'_>,
    active: &[&Pod],
    terminating: i32,
    succeeded: i32,
    succeeded_indexes: &Intervals,
    failed_indexes: &Intervals,
    delayed: &BTreeMap<i32, &Pod>,
    plan: &mut Plan,
    status: &mut JobStatus,
) -> Managed {
    let now = input.now;
    let mut m = Managed { created: 0, deleted: 0, deleted_ready: 0 };
    let delete = |p: &Pod, m: &mut Managed, plan: &mut Plan| {
        plan.deletes.push(PodDelete { name: name(p).to_string(), remove_finalizer_first: true });
        m.deleted += 1;
        if ready(p) {
            m.deleted_ready += 1;
        }
    };
    if spec.suspend {
        for p in active.iter().take(MAX_POD_CHANGES) {
            delete(p, &mut m, plan);
        }
        if condition(status, "Suspended").is_none() {
            set_condition(status, new_condition("Suspended", "True", "JobSuspended", "Job suspended", now));
            plan.events.push(PlannedEvent {
                kind: EventKind::Normal,
                reason: "Suspended".into(),
                message: "Job suspended".into(),
            });
        }
        return m;
    }
    if condition(status, "Suspended").is_some() {
        set_condition(status, new_condition("Suspended", "False", "JobResumed", "Job resumed", now));
        status.start_time = Some(Time(now));
        plan.events.push(PlannedEvent {
            kind: EventKind::Normal,
            reason: "Resumed".into(),
            message: "Job resumed".into(),
        });
    }
    let active_n = active.len() as i32;
    let want = match spec.completions {
        None => {
            if succeeded > 0 {
                active_n
            } else {
                spec.parallelism
            }
        }
        Some(c) => (c - succeeded).min(spec.parallelism),
    }
    .max(0);

    // Indexed: pods that must go whatever the count (upstream's appendDuplicatedIndexPodsForRemoval:
    // no index annotation, an index ≥ completions, all but the most advanced pod of an index),
    // and those of indexes that already succeeded. Deleted uncounted.
    let mut keep: Vec<&Pod> = vec![];
    if spec.indexed {
        let (rm, left) = super::claim::duplicated_index_pods_for_removal(active, spec.completions.unwrap_or(0));
        for p in rm {
            delete(p, &mut m, plan);
        }
        for p in left {
            match valid_index(spec, p) {
                Some(i) if !succeeded_indexes.contains(i) => keep.push(p),
                _ => delete(p, &mut m, plan),
            }
        }
    } else {
        keep.extend_from_slice(active);
    }
    let remaining = keep.len() as i32;
    if remaining > want {
        keep.sort_by_key(|p| surplus_order(p));
        for p in keep.iter().take((remaining - want) as usize) {
            delete(p, &mut m, plan);
        }
        return m;
    }
    if m.deleted > 0 {
        // A sync either deletes or creates, never both.
        return m;
    }
    let mut diff = want - remaining;
    if spec.only_replace_failed {
        diff -= terminating;
    }
    if diff <= 0 {
        return m;
    }
    let diff = (diff as usize).min(MAX_POD_CHANGES);
    if spec.per_index.is_none() {
        let wait = plan.backoff.remaining(&input.config.backoff, now);
        if !wait.is_zero() {
            requeue(plan, wait);
            return m;
        }
    }
    if !spec.indexed {
        for _ in 0..diff {
            plan.creates.push(new_pod(spec.job, None, (0, 0)));
            m.created += 1;
        }
        return m;
    }
    let completions = spec.completions.unwrap_or(0);
    let held: BTreeSet<i32> = input
        .pods
        .iter()
        .filter(|p| !terminal(p) && (!deleting(p) || spec.only_replace_failed))
        .filter_map(|p| valid_index(spec, p))
        .collect();
    for i in 0..completions {
        if m.created as usize >= diff {
            break;
        }
        if succeeded_indexes.contains(i) || failed_indexes.contains(i) || held.contains(&i) {
            continue;
        }
        // The pod being replaced (upstream's `podBeingReplaced`): its counts and back-off carry over.
        let last_failed = delayed.get(&i).copied();
        let mut counts = (0, 0);
        if let Some(p) = last_failed {
            if spec.per_index.is_some() {
                let wait = backoff::index_remaining(&input.config.backoff, p, now);
                if !wait.is_zero() {
                    requeue(plan, wait);
                    continue;
                }
            }
            let (failures, ignored_failures) = indexes::index_failure_counts(p);
            let ignored = spec.job.spec.as_ref().and_then(|s| s.pod_failure_policy.as_ref()).is_some_and(|pfp| {
                match_pod_failure_policy(pfp, &input.set_condition_reasons, p).action == Some(Action::Ignore)
            });
            counts = if ignored { (failures, ignored_failures + 1) } else { (failures + 1, ignored_failures) };
        }
        plan.creates.push(new_pod(spec.job, Some((i, spec.per_index.is_some())), counts));
        m.created += 1;
    }
    m
}

/// Kubernetes' `names.MaxGeneratedNameLength`: the longest `generateName` the API server keeps
/// whole (63 less its five random characters).
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// Upstream's `podGenerateNameWithIndex`: `<job>-<index>-`, the Job name shortened so that the
/// whole prefix fits in [`MAX_GENERATED_NAME_LENGTH`] and the index survives the server's cut.
pub fn pod_generate_name_with_index(job_name: &str, index: i32) -> String {
    let append_index = format!("-{index}-");
    let prefix = format!("{job_name}{append_index}");
    if prefix.len() <= MAX_GENERATED_NAME_LENGTH {
        return prefix;
    }
    // Job names are DNS labels (ASCII), so byte slicing cannot split a character.
    let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(append_index.len());
    format!("{}{append_index}", &prefix[..keep])
}

/// A pod for the Job from its template: tracking finalizer, controller reference, and for
/// Indexed Jobs the completion index (annotation, label, env), hostname and per-index counts.
pub fn new_pod(job: &Job, index: Option<(i32, bool)>, (failures, ignored): (i32, i32)) -> Pod {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    let mut pod_spec = template.spec.unwrap_or_default();
    // The server names the pod (upstream's `GetPodFromTemplate` prefix `<job>-`, which the server
    // cuts to 58 characters; Indexed Jobs keep their index in it).
    let generate_name = match index {
        Some((i, _)) => pod_generate_name_with_index(&job_name, i),
        None => format!("{job_name}-"),
    };
    if let Some((i, per_index)) = index {
        labels.insert(indexes::COMPLETION_INDEX.into(), i.to_string());
        annotations.insert(indexes::COMPLETION_INDEX.into(), i.to_string());
        if per_index {
            annotations.insert(indexes::INDEX_FAILURE_COUNT.into(), failures.to_string());
            if ignored > 0 {
                annotations.insert(indexes::INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
            }
        }
        pod_spec.hostname = Some(format!("{job_name}-{i}"));
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.labels['{}']", indexes::COMPLETION_INDEX),
                    api_version: None,
                }),
                ..Default::default()
            }),
        };
        for c in pod_spec.containers.iter_mut().chain(pod_spec.init_containers.iter_mut().flatten()) {
            let vars = c.env.get_or_insert_with(Vec::new);
            if !vars.iter().any(|e| e.name == "JOB_COMPLETION_INDEX") {
                vars.push(env.clone());
            }
        }
    }
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job_name,
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(vec![TRACKING_FINALIZER.into()]),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::{Value, json};

    /// Builder-style fixtures, as upstream's test wrappers.
    struct JobFixture(Value);

    impl JobFixture {
        fn new() -> Self {
            JobFixture(json!({
                "metadata": {"name": "job", "namespace": "ns", "uid": "job-uid", "resourceVersion": "1"},
                "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 1,
                         "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}},
                "status": {"startTime": "2026-01-01T00:00:00Z"}
            }))
        }
        fn spec(mut self, k: &str, v: Value) -> Self {
            self.0["spec"][k] = v;
            self
        }
        fn status(mut self, k: &str, v: Value) -> Self {
            self.0["status"][k] = v;
            self
        }
        fn build(&self) -> Job {
            serde_json::from_value(self.0.clone()).unwrap()
        }
    }

    struct PodFixture(Value);

    impl PodFixture {
        fn new(name: &str) -> Self {
            PodFixture(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "finalizers": [TRACKING_FINALIZER],
                             "creationTimestamp": "2026-01-01T00:00:00Z",
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "job-uid", "controller": true}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x"}]},
                "status": {"phase": "Running"}
            }))
        }
        fn phase(mut self, p: &str) -> Self {
            self.0["status"]["phase"] = json!(p);
            self
        }
        fn exit(mut self, code: i32) -> Self {
            self.0["status"]["containerStatuses"] = json!([{"name": "main", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": code, "finishedAt": "2026-01-01T00:00:05Z"}}}]);
            self.phase(if code == 0 { "Succeeded" } else { "Failed" })
        }
        fn index(mut self, i: i32) -> Self {
            self.0["metadata"]["annotations"] = json!({indexes::COMPLETION_INDEX: i.to_string()});
            self
        }
        fn no_finalizer(mut self) -> Self {
            self.0["metadata"].as_object_mut().unwrap().remove("finalizers");
            self
        }
        /// The `job-index-failure-count` annotation (after `index`).
        fn failures(mut self, n: i32) -> Self {
            self.0["metadata"]["annotations"][indexes::INDEX_FAILURE_COUNT] = json!(n.to_string());
            self
        }
        fn deleting(mut self) -> Self {
            self.0["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
            self
        }
        fn condition(mut self, t: &str) -> Self {
            self.0["status"]["conditions"] = json!([{"type": t, "status": "True"}]);
            self
        }
        fn build(&self) -> Pod {
            serde_json::from_value(self.0.clone()).unwrap()
        }
    }

    fn run(job: &Job, pods: &[Pod]) -> Plan {
        run_with(job, pods, vec![])
    }

    fn run_with(job: &Job, pods: &[Pod], reasons: Vec<Option<String>>) -> Plan {
        run_expecting(job, pods, reasons, &[])
    }

    /// A sync whose cache still shows the finalizers of `removed` (uids) that we removed.
    fn run_expecting(job: &Job, pods: &[Pod], reasons: Vec<Option<String>>, removed: &[&str]) -> Plan {
        let config = SyncConfig::default();
        sync(&SyncInput {
            job,
            set_condition_reasons: reasons,
            pods: pods.iter().collect(),
            now: "2026-01-01T00:01:00Z".parse().unwrap(),
            backoff: BackoffRecord::default(),
            config: &config,
            expected_finalizer_removals: removed.iter().map(|u| u.to_string()).collect(),
        })
    }

    fn conditions(plan: &Plan) -> Vec<(String, String)> {
        plan.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.reason.clone().unwrap_or_default())).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_new_job_creates_parallelism_pods_with_finalizer_and_controller_reference() {
        let plan = run(&JobFixture::new().build(), &[]);
        assert_eq!(plan.creates.len(), 2);
        let p = &plan.creates[0];
        assert_eq!(p.metadata.finalizers.as_deref(), Some(&[TRACKING_FINALIZER.to_string()][..]));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller, owner.block_owner_deletion),
            ("job-uid", Some(true), Some(true))
        );
        assert_eq!((p.metadata.name.as_deref(), p.metadata.generate_name.as_deref()), (None, Some("job-")));
        assert_eq!(plan.status.unwrap().active, Some(2));
    }

    #[test]
    fn pod_generate_name_with_index_keeps_the_index_within_58_characters() {
        let long = "a".repeat(63);
        let cases = [
            ("job", 1, "job-1-".to_string()),
            // 55 + "-0-" is exactly 58: kept whole.
            (&long[..55], 0, format!("{}-0-", &long[..55])),
            (&long[..56], 0, format!("{}-0-", &long[..55])),
            (&long, 0, format!("{}-0-", &long[..55])),
            (&long, 12345, format!("{}-12345-", &long[..51])),
        ];
        for (job, index, want) in cases {
            let got = pod_generate_name_with_index(job, index);
            assert_eq!(got, want, "job name of {} characters, index {index}", job.len());
            assert!(got.len() <= MAX_GENERATED_NAME_LENGTH);
        }
    }

    #[test]
    fn indexed_pods_get_index_annotation_label_hostname_and_env() {
        let job = JobFixture::new().spec("completionMode", json!("Indexed")).spec("completions", json!(3)).build();
        let plan = run(&job, &[]);
        let idx: Vec<String> = plan.creates.iter().map(|p| p.labels()[indexes::COMPLETION_INDEX].clone()).collect();
        assert_eq!(idx, ["0", "1"]);
        let p = &plan.creates[1];
        assert_eq!(p.annotations()[indexes::COMPLETION_INDEX], "1");
        assert_eq!(p.spec.as_ref().unwrap().hostname.as_deref(), Some("job-1"));
        assert_eq!((p.metadata.name.as_deref(), p.metadata.generate_name.as_deref()), (None, Some("job-1-")));
        let env = p.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap();
        assert_eq!(env[0].name, "JOB_COMPLETION_INDEX");
    }

    #[test]
    fn a_finished_pod_is_recorded_before_its_finalizer_is_removed() {
        let job = JobFixture::new().build();
        let pods = [PodFixture::new("a").exit(1).build(), PodFixture::new("b").build()];
        let plan = run(&job, &pods);
        let status = plan.status.clone().unwrap();
        assert_eq!(status.uncounted_terminated_pods.unwrap().failed, Some(vec!["uid-a".to_string()]));
        assert_eq!(status.failed, Some(0), "not counted until the finalizer is gone");
        assert_eq!(plan.remove_finalizers, ["a"]);
        // Next sync: the finalizer is gone, the failure moves into the counter exactly once.
        let job = JobFixture::new().status("uncountedTerminatedPods", json!({"failed": ["uid-a"]})).build();
        let pods = [PodFixture::new("a").exit(1).no_finalizer().build(), PodFixture::new("b").build()];
        let plan = run(&job, &pods);
        let status = plan.status.unwrap();
        assert_eq!(status.failed, Some(1));
        assert!(status.uncounted_terminated_pods.unwrap().failed.is_none());
    }

    #[test]
    fn exceeding_the_backoff_limit_sets_failure_target_then_failed_once_pods_are_gone() {
        let job = JobFixture::new().status("failed", json!(1)).build();
        let pods = [PodFixture::new("a").exit(1).build(), PodFixture::new("b").build()];
        let plan = run(&job, &pods);
        assert_eq!(conditions(&plan), [("FailureTarget".to_string(), "BackoffLimitExceeded".to_string())]);
        assert_eq!(plan.deletes, [PodDelete { name: "b".into(), remove_finalizer_first: false }]);
        assert!(!plan.finished);
        // The running pod being deleted for the failure is counted failed too.
        let unc = plan.status.unwrap().uncounted_terminated_pods.unwrap().failed.unwrap();
        assert_eq!(unc, ["uid-a", "uid-b"]);
        let job = JobFixture::new()
            .status("failed", json!(3))
            .status("conditions", json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]))
            .build();
        let plan = run(&job, &[]);
        assert_eq!(
            conditions(&plan),
            [
                ("FailureTarget".to_string(), "BackoffLimitExceeded".to_string()),
                ("Failed".to_string(), "BackoffLimitExceeded".to_string())
            ]
        );
        assert!(plan.finished);
    }

    #[test]
    fn pod_failure_policy_fail_job_uses_the_upstream_message_and_the_extension_reason() {
        let job = JobFixture::new()
            .spec(
                "podFailurePolicy",
                json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}),
            )
            .build();
        let pods = [PodFixture::new("a").exit(3).build()];
        let plan = run(&job, &pods);
        let c = &plan.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
        assert_eq!(
            c.message.as_deref(),
            Some("Container main for pod ns/a failed with exit code 3 matching FailJob rule at index 0")
        );
        let plan = run_with(&job, &pods, vec![Some("ExitCode3".into())]);
        assert_eq!(conditions(&plan)[0], ("FailureTarget".to_string(), "ExitCode3".to_string()));
    }

    #[test]
    fn an_ignored_failure_is_not_counted_and_is_replaced() {
        let job = JobFixture::new()
            .spec("podFailurePolicy", json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}))
            .build();
        let pods = [PodFixture::new("a").exit(1).condition("DisruptionTarget").build(), PodFixture::new("b").build()];
        let plan = run(&job, &pods);
        let status = plan.status.unwrap();
        assert!(status.uncounted_terminated_pods.unwrap().failed.is_none());
        assert_eq!(plan.remove_finalizers, ["a"]);
        assert_eq!(plan.creates.len(), 1, "the ignored pod is replaced");
    }

    #[test]
    fn indexed_success_records_completed_indexes_and_completes() {
        let job = JobFixture::new().spec("completionMode", json!("Indexed")).build();
        let pods = [PodFixture::new("a").index(0).exit(0).build(), PodFixture::new("b").index(1).exit(0).build()];
        let plan = run(&job, &pods);
        let status = plan.status.clone().unwrap();
        assert_eq!((status.completed_indexes.as_deref(), status.succeeded), (Some("0,1"), Some(2)));
        assert_eq!(
            conditions(&plan),
            [
                ("SuccessCriteriaMet".to_string(), "CompletionsReached".to_string()),
                ("Complete".to_string(), "CompletionsReached".to_string())
            ]
        );
        assert!(status.completion_time.is_some());
    }

    #[test]
    fn suspending_deletes_active_pods_without_counting_them() {
        let job = JobFixture::new().spec("suspend", json!(true)).build();
        let pods = [PodFixture::new("a").build()];
        let plan = run(&job, &pods);
        assert_eq!(plan.deletes, [PodDelete { name: "a".into(), remove_finalizer_first: true }]);
        assert_eq!(conditions(&plan), [("Suspended".to_string(), "JobSuspended".to_string())]);
        assert!(plan.status.unwrap().uncounted_terminated_pods.unwrap().failed.is_none());
    }

    #[test]
    fn with_replacement_policy_failed_a_terminating_pod_blocks_its_replacement() {
        let job = JobFixture::new()
            .spec("parallelism", json!(1))
            .spec("completions", json!(1))
            .spec("podReplacementPolicy", json!("Failed"))
            .build();
        let mut p = PodFixture::new("a").build();
        p.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:30Z".parse().unwrap()));
        let plan = run(&job, &[p]);
        assert!(plan.creates.is_empty());
        assert_eq!(plan.status.unwrap().terminating, Some(1));
        let job = JobFixture::new().spec("parallelism", json!(1)).spec("completions", json!(1)).build();
        let mut p = PodFixture::new("a").build();
        p.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:30Z".parse().unwrap()));
        let plan = run(&job, &[p]);
        assert_eq!(plan.creates.len(), 1, "TerminatingOrFailed replaces at once");
    }

    #[test]
    fn indexed_pods_duplicating_an_index_or_without_a_valid_one_are_deleted_uncounted() {
        let job = JobFixture::new().spec("completionMode", json!("Indexed")).build();
        let pending = |mut p: PodFixture| {
            p.0["spec"]["nodeName"] = Value::Null;
            p.phase("Pending")
        };
        let pods = [
            PodFixture::new("a").index(0).build(),
            PodFixture::new("b").index(1).build(),
            pending(PodFixture::new("dup").index(0)).build(),
            PodFixture::new("none").build(),
            PodFixture::new("high").index(2).build(),
        ];
        let plan = run(&job, &pods);
        let mut deleted: Vec<(&str, bool)> =
            plan.deletes.iter().map(|d| (d.name.as_str(), d.remove_finalizer_first)).collect();
        deleted.sort();
        assert_eq!(deleted, [("dup", true), ("high", true), ("none", true)]);
        assert!(plan.creates.is_empty(), "a sync that deletes creates nothing");
        let status = plan.status.unwrap();
        assert_eq!((status.failed, status.uncounted_terminated_pods.unwrap().failed), (Some(0), None));
        assert_eq!((status.active, status.terminating), (Some(2), Some(3)));
    }

    #[test]
    fn a_job_managed_by_another_controller_is_left_alone() {
        let job = JobFixture::new().spec("managedBy", json!("example.com/other")).build();
        let plan = run(&job, &[]);
        assert!(plan.status.is_none() && plan.creates.is_empty());
    }

    fn blpi_job(per_index: i32) -> JobFixture {
        JobFixture::new()
            .spec("completionMode", json!("Indexed"))
            .spec("backoffLimit", Value::Null)
            .spec("backoffLimitPerIndex", json!(per_index))
    }

    /// (index, `job-index-failure-count` or "") of each pod a plan creates.
    fn created(plan: &Plan) -> Vec<(String, String)> {
        let annotation = |p: &Pod, k: &str| p.annotations().get(k).cloned().unwrap_or_default();
        plan.creates
            .iter()
            .map(|p| (annotation(p, indexes::COMPLETION_INDEX), annotation(p, indexes::INDEX_FAILURE_COUNT)))
            .collect()
    }

    fn uncounted_failed(plan: &Plan) -> Vec<String> {
        plan.status
            .as_ref()
            .and_then(|s| s.uncounted_terminated_pods.as_ref())
            .and_then(|u| u.failed.clone())
            .unwrap_or_default()
    }

    #[test]
    fn with_backoff_limit_per_index_an_index_last_failed_pod_waits_uncounted_for_its_replacement() {
        struct Case {
            name: &'static str,
            job: Job,
            pods: Vec<Pod>,
            /// (index, failure count) of the pods created.
            creates: Vec<(&'static str, &'static str)>,
            uncounted_failed: Vec<&'static str>,
            /// Pods whose finalizer goes in this sync.
            released: Vec<&'static str>,
        }
        let running = |name: &str, i: i32| PodFixture::new(name).index(i);
        let failed = |name: &str, i: i32| PodFixture::new(name).index(i).exit(1);
        let cases = [
            Case {
                name: "the failed pod keeps its finalizer and is not counted; its replacement counts it",
                job: blpi_job(1).build(),
                pods: vec![failed("a", 0).build(), running("b", 1).build()],
                creates: vec![("0", "1")],
                uncounted_failed: vec![],
                released: vec![],
            },
            Case {
                name: "a failed pod a user deleted still hands its count on",
                job: blpi_job(3).build(),
                pods: vec![failed("a", 0).failures(1).deleting().build(), running("b", 1).build()],
                creates: vec![("0", "2")],
                uncounted_failed: vec![],
                released: vec![],
            },
            Case {
                name: "once the replacement exists the failed pod is counted and released",
                job: blpi_job(1).build(),
                pods: vec![failed("a", 0).build(), running("c", 0).failures(1).build(), running("b", 1).build()],
                creates: vec![],
                uncounted_failed: vec!["uid-a"],
                released: vec!["a"],
            },
            Case {
                name: "of two failed pods of an index the one with the higher count is kept for the replacement",
                job: blpi_job(3).build(),
                pods: vec![failed("a", 0).build(), failed("a2", 0).failures(1).build(), running("b", 1).build()],
                creates: vec![("0", "2")],
                uncounted_failed: vec!["uid-a"],
                released: vec!["a"],
            },
            Case {
                name: "an index past its limit is failed, not delayed",
                job: blpi_job(0).build(),
                pods: vec![failed("a", 0).build(), running("b", 1).build()],
                creates: vec![],
                uncounted_failed: vec!["uid-a"],
                released: vec!["a"],
            },
            Case {
                name: "a Job whose failure is decided releases and counts the delayed pod",
                job: blpi_job(1)
                    .status("conditions", json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}]))
                    .build(),
                pods: vec![failed("a", 0).build()],
                creates: vec![],
                uncounted_failed: vec!["uid-a"],
                released: vec!["a"],
            },
            Case {
                name: "without backoffLimitPerIndex a failed pod is counted and released at once",
                job: JobFixture::new().spec("completionMode", json!("Indexed")).spec("backoffLimit", json!(6)).build(),
                pods: vec![failed("a", 0).build(), running("b", 1).build()],
                creates: vec![("0", "")],
                uncounted_failed: vec!["uid-a"],
                released: vec!["a"],
            },
        ];
        for c in cases {
            let plan = run(&c.job, &c.pods);
            let want: Vec<(String, String)> = c.creates.iter().map(|(i, n)| (i.to_string(), n.to_string())).collect();
            assert_eq!(created(&plan), want, "{}: creations", c.name);
            assert_eq!(uncounted_failed(&plan), c.uncounted_failed, "{}: uncounted", c.name);
            assert_eq!(plan.remove_finalizers, c.released, "{}: finalizers removed", c.name);
            assert_eq!(plan.status.as_ref().and_then(|s| s.failed), Some(0), "{}: failed", c.name);
        }
    }

    #[test]
    fn pods_whose_finalizer_we_removed_are_not_counted_again_on_a_stale_cache() {
        // Each Job decided its fate and deleted pod x (uid-x) in the previous sync; the cache
        // still shows x with the finalizer that sync removed.
        let success = JobFixture::new()
            .spec("completionMode", json!("Indexed"))
            .status("completedIndexes", json!("0"))
            .status("succeeded", json!(1))
            .status(
                "conditions",
                json!([{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy", "message": "m"}]),
            )
            .build();
        let success_pods = [
            PodFixture::new("s").index(0).exit(0).no_finalizer().build(),
            PodFixture::new("x").index(1).deleting().build(),
        ];
        let max_failed = blpi_job(0)
            .spec("completions", json!(3))
            .spec("maxFailedIndexes", json!(1))
            .status("failed", json!(2))
            .status("failedIndexes", json!("0,1"))
            .status("uncountedTerminatedPods", json!({"failed": ["uid-x"]}))
            .status("conditions", json!([{"type": "FailureTarget", "status": "True", "reason": "MaxFailedIndexesExceeded", "message": "m"}]))
            .build();
        let max_failed_pods = [PodFixture::new("x").index(2).exit(143).deleting().build()];
        // (case, job, pods, cache shows our removal?, failed, uncounted failed, failedIndexes)
        type Want = (i32, Vec<&'static str>, Option<&'static str>);
        let cases: [(&str, &Job, &[Pod], bool, Want); 4] = [
            ("success policy met, removal expected", &success, &success_pods, true, (0, vec![], None)),
            (
                "success policy met, finalizer not removed by us",
                &success,
                &success_pods,
                false,
                (0, vec!["uid-x"], None),
            ),
            // Recorded already: it stays in uncountedTerminatedPods until the cache shows the
            // finalizer gone, but its index is not counted as failed.
            (
                "max failed indexes, removal expected",
                &max_failed,
                &max_failed_pods,
                true,
                (2, vec!["uid-x"], Some("0,1")),
            ),
            (
                "max failed indexes, finalizer not removed by us",
                &max_failed,
                &max_failed_pods,
                false,
                (2, vec!["uid-x"], Some("0-2")),
            ),
        ];
        for (name, job, pods, expected, (failed, uncounted, failed_indexes)) in cases {
            let removed: &[&str] = if expected { &["uid-x"] } else { &[] };
            let plan = run_expecting(job, pods, vec![], removed);
            let status = plan.status.clone().unwrap();
            assert_eq!(status.failed, Some(failed), "{name}: failed");
            assert_eq!(uncounted_failed(&plan), uncounted, "{name}: uncounted");
            assert_eq!(status.failed_indexes.as_deref(), failed_indexes, "{name}: failedIndexes");
            if expected {
                assert!(!plan.remove_finalizers.contains(&"x".to_string()), "{name}: no second removal");
            }
        }
    }
}
