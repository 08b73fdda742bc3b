//! The restart record (extension): each restart of a JobSet is appended to
//! `status.restartHistory` in the status write that decides it (the write that bumps a restart
//! counter or sets `previousInPlaceRestartAttempt`, a replace guarded by resourceVersion), so a
//! restarted controller can neither lose nor repeat it; the reconciles that first observe the end
//! of each phase stamp its time. See docs/restart-timeline.md.
//!
//! Pure: the failure policy and the in-place decision [`open`] records, [`fill_trigger`] reads the
//! failed pod the shell looked up for each record just opened, [`advance`] stamps phases from what
//! a reconcile observes, and [`observations`] turns a status write into the
//! `jobset_restart_duration_seconds` observations.

use jiff::{SignedDuration, Timestamp};
use jobset_api::job::JOB_NAME_LABEL;
use jobset_api::jobset::keys::{IN_PLACE_RESTART_ATTEMPT, JOB_INDEX, REPLICATED_JOB_NAME};
use jobset_api::jobset::{JobSet, JobSetStatus, RestartRecord, RestartScope, RestartStrategy, RestartTrigger};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::children::{self, Child};
use super::in_place_restart::{self, Tally};
use super::update::{Metric, Update};

/// The controller's default `restart_history_limit`.
pub const DEFAULT_LIMIT: usize = 10;

/// In-place trigger reason: a worker container of the current attempt failed.
pub const REASON_WORKER_FAILED: &str = "WorkerFailed";
/// In-place trigger reason: an agent moved its pod past the current attempt.
pub const REASON_POD_RESTARTED_IN_PLACE: &str = "PodRestartedInPlace";

/// The `action` of in-place restarts, as of the default failure policy.
pub const ACTION_RESTART_JOBSET: &str = "RestartJobSet";

/// Whether a record still waits for phase times: not running yet, not cut short.
pub fn is_open(r: &RestartRecord) -> bool {
    r.running_at.is_none() && !r.superseded
}

/// Which pods the trigger of a record just opened needs; the shell looks them up on that one
/// reconcile (a Recreate reconcile reads no pods otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerPods {
    /// The pods of this failed Job.
    Job(String),
    /// In place: the pods at the deprecated attempt (`WorkerFailed`) or past it
    /// (`PodRestartedInPlace`).
    InPlace { deprecated: i32 },
    /// A scoped in-place restart: as `InPlace` from `attempt` (the failed worker's, or the one
    /// the agent moved past), over the pods of these replicated jobs only (of their Job
    /// `job_index` when set).
    InPlaceScoped { attempt: i32, replicated_jobs: Vec<String>, job_index: Option<i32> },
}

/// A record decided at `now`, with no phase ended yet.
pub fn record(
    attempt: i32,
    strategy: RestartStrategy,
    scope: RestartScope,
    target: Option<String>,
    trigger: RestartTrigger,
    failed_at: Option<Timestamp>,
    now: Timestamp,
) -> RestartRecord {
    RestartRecord {
        attempt,
        strategy,
        scope,
        target,
        trigger,
        failed_at: failed_at.map(MicroTime),
        decided_at: MicroTime(now),
        stopped_at: None,
        barrier_lifted_at: None,
        running_at: None,
        duration: None,
        superseded: false,
    }
}

/// The replicated job and index of a child Job's name (`<jobset>-<replicated job>-<index>`).
fn job_of<'j>(js: &'j JobSet, job: &str) -> Option<(&'j str, i32)> {
    js.spec.replicated_jobs.iter().map(|rj| rj.name.as_str()).find_map(|rj| {
        let i = job
            .strip_prefix(js.name())
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_prefix(rj))
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|i| i.parse::<i32>().ok())?;
        Some((rj, i))
    })
}

/// The replicated job a child Job's name belongs to.
fn replicated_job_of<'j>(js: &'j JobSet, job: &str) -> Option<&'j str> {
    job_of(js, job).map(|(rj, _)| rj)
}

/// Whether a restart of scope `new` (with its target) restarts everything one of scope `old`
/// restarts (the same or a wider scope).
fn covers_scope(js: &JobSet, new: (RestartScope, Option<&str>), old: (RestartScope, Option<&str>)) -> bool {
    use RestartScope::*;
    match (new.0, old.0) {
        (JobSet, _) => true,
        (ReplicatedJob, ReplicatedJob) | (Job, Job) => new.1 == old.1,
        (ReplicatedJob, Job) => old.1.and_then(|j| replicated_job_of(js, j)) == new.1,
        (Job, _) | (ReplicatedJob, JobSet) => false,
    }
}

/// Whether a restart `new` restarts everything `old` restarts.
fn covers(js: &JobSet, new: &RestartRecord, old: &RestartRecord) -> bool {
    covers_scope(js, (new.scope, new.target.as_deref()), (old.scope, old.target.as_deref()))
}

/// Appends `new`: the open records it covers are superseded, and the oldest records beyond
/// `limit` dropped.
pub fn open(js: &JobSet, history: &mut Vec<RestartRecord>, new: RestartRecord, limit: usize) {
    for r in history.iter_mut().filter(|r| is_open(r) && covers(js, &new, r)) {
        r.superseded = true;
    }
    history.push(new);
    if history.len() > limit {
        history.drain(..history.len() - limit);
    }
}

/// Marks every open record superseded (the JobSet finished); whether one was.
pub fn supersede_open(history: &mut [RestartRecord]) -> bool {
    let mut changed = false;
    for r in history.iter_mut().filter(|r| is_open(r)) {
        r.superseded = true;
        changed = true;
    }
    changed
}

/// Whether an in-place deprecation is a restart of its own. Not while a JobSet-wide recreation
/// is under way: its new pods announce the next in-place attempt while the others (old or new)
/// are not there yet, which deprecates the attempt before it (upstream's bookkeeping; no pod
/// restarts for it). A failed worker always is.
pub fn in_place_is_a_restart(history: &[RestartRecord], worker_failed: bool) -> bool {
    worker_failed
        || !history
            .iter()
            .any(|r| is_open(r) && r.scope == RestartScope::JobSet && r.strategy != RestartStrategy::InPlaceRestart)
}

/// [`in_place_is_a_restart`] for a scoped in-place restart of `scope` (`target`): not while a
/// recreation of that scope or a wider one is under way, whose new pods announce new attempts.
pub fn scoped_in_place_is_a_restart(
    js: &JobSet,
    history: &[RestartRecord],
    scope: RestartScope,
    target: Option<&str>,
    worker_failed: bool,
) -> bool {
    worker_failed
        || !history.iter().any(|r| {
            is_open(r)
                && r.strategy != RestartStrategy::InPlaceRestart
                && covers_scope(js, (r.scope, r.target.as_deref()), (scope, target))
        })
}

/// The record of a scoped in-place restart of `scope` (`target`): `attempt` is the one its
/// agents announce, `job` the Job it names when known for sure (a Job's restart).
pub struct ScopedRecord<'a> {
    pub scope: RestartScope,
    pub target: Option<String>,
    pub attempt: i32,
    pub worker_failed: bool,
    pub rule: Option<&'a str>,
    pub action: &'a str,
    pub counted: bool,
    pub job: Option<String>,
}

/// The record a [`ScopedRecord`] describes, decided at `now`.
pub fn scoped_in_place_record(r: ScopedRecord, now: Timestamp) -> RestartRecord {
    let reason = if r.worker_failed { REASON_WORKER_FAILED } else { REASON_POD_RESTARTED_IN_PLACE };
    let trigger = RestartTrigger {
        job: r.job,
        reason: reason.into(),
        rule: r.rule.filter(|n| !n.is_empty()).map(String::from),
        action: r.action.into(),
        counts_towards_max: r.counted,
        ..Default::default()
    };
    record(r.attempt, RestartStrategy::InPlaceRestart, r.scope, r.target, trigger, None, now)
}

/// The record of an in-place restart that deprecated attempt `deprecated`.
pub fn in_place_record(deprecated: i32, worker_failed: bool, now: Timestamp) -> RestartRecord {
    let reason = if worker_failed { REASON_WORKER_FAILED } else { REASON_POD_RESTARTED_IN_PLACE };
    let trigger = RestartTrigger {
        reason: reason.into(),
        action: ACTION_RESTART_JOBSET.into(),
        counts_towards_max: true,
        ..Default::default()
    };
    record(deprecated + 1, RestartStrategy::InPlaceRestart, RestartScope::JobSet, None, trigger, None, now)
}

/// A container's failure: (container, exit code, finishedAt).
type Failure<'p> = (&'p str, i32, Option<Timestamp>);

/// Which terminations of a pod's containers tell its failure.
#[derive(Clone, Copy)]
enum Look {
    /// A failed Job's pod: the earliest of its regular and (non-sidecar) init containers' current
    /// and last terminations.
    Job,
    /// A pod of the current attempt: the earliest current termination of a worker (a regular
    /// container) after the pod's last in-place restart; while the pod restarts in place, the
    /// latest termination that ended by the restart's start (the one that set it off).
    Current,
    /// A pod restarted in place: the latest last termination of a worker, or a current one that
    /// ended by the pod's last `AllContainersRestarting` transition (its agent announced the
    /// restart before the kubelet reported the containers restarted).
    Restarted,
}

/// Ordering of failures: earlier first (unknown last); at the same time (the API keeps whole
/// seconds), an exit of the process's own before a kill (128 + signal) that followed it.
fn earlier(a: &Failure, b: &Failure) -> bool {
    (a.2.is_none(), a.2, a.1 >= 128) < (b.2.is_none(), b.2, b.1 >= 128)
}

fn failure(p: &Pod, look: Look) -> Option<Failure<'_>> {
    let status = p.status.as_ref()?;
    let sidecars: Vec<&str> = (p.spec.as_ref().map(|s| s.init_containers.iter().flatten()).into_iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let inits = (status.init_container_statuses.iter().flatten())
        .filter(|c| matches!(look, Look::Job) && !sidecars.contains(&c.name.as_str()));
    let restarting = all_restarting(p);
    // (current state, last state, the latest rather than the earliest, ended after, ended by)
    let (current, last, latest, after, by) = match (look, restarting) {
        (Look::Job, _) => (true, true, false, None, None),
        // Every container is being killed: what set it off ended by the condition's time.
        (Look::Current, Some((true, at))) => (true, true, true, None, at),
        (Look::Current, Some((false, at))) => (true, false, false, at, None),
        (Look::Current, None) => (true, false, false, None, None),
        (Look::Restarted, Some((_, at))) => (true, true, true, None, at),
        (Look::Restarted, None) => (false, true, true, None, None),
    };
    let mut out: Option<Failure> = None;
    for c in status.container_statuses.iter().flatten().chain(inits) {
        let states = [c.state.as_ref().filter(|_| current), c.last_state.as_ref().filter(|_| last)];
        for t in states.into_iter().flatten().filter_map(|s| s.terminated.as_ref()) {
            let at = t.finished_at.as_ref().map(|f| f.0);
            let left_over = after.is_some_and(|a| at.is_none_or(|f| f <= a));
            let kill = by.is_some_and(|b| at.is_some_and(|f| f > b));
            if t.exit_code == 0 || left_over || kill {
                continue;
            }
            let f = (c.name.as_str(), t.exit_code, at);
            let better = match &out {
                None => true,
                Some(o) if f.2 == o.2 => f.1 < 128 && o.1 >= 128,
                Some(o) if latest => f.2.is_some() && o.2.is_none_or(|o| f.2 > Some(o)),
                Some(o) => earlier(&f, o),
            };
            if better {
                out = Some(f);
            }
        }
    }
    out
}

/// The pod's `AllContainersRestarting` condition: (status True, lastTransitionTime).
fn all_restarting(p: &Pod) -> Option<(bool, Option<Timestamp>)> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "AllContainersRestarting")?;
    Some((c.status == "True", c.last_transition_time.as_ref().map(|t| t.0)))
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn attempt(p: &Pod) -> Option<i32> {
    p.metadata.annotations.as_ref()?.get(IN_PLACE_RESTART_ATTEMPT)?.parse().ok()
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

/// The first failure among the pods (ties: the pod name first).
fn first<'p>(pods: &[&'p Pod], look: Look) -> Option<(&'p Pod, Failure<'p>)> {
    let mut out: Option<(&Pod, Failure)> = None;
    let mut sorted = pods.to_vec();
    sorted.sort_by_key(|p| name(p));
    for p in sorted {
        if let Some(f) = failure(p, look)
            && out.as_ref().is_none_or(|(_, o)| earlier(&f, o))
        {
            out = Some((p, f));
        }
    }
    out
}

/// An in-place record's failed pod and failure among `pods`: a failed worker of those at
/// `attempt` (`WorkerFailed`), else the first pod past it, whose worker's last failure, if any,
/// makes the reason `WorkerFailed` too.
fn in_place_trigger<'p>(
    r: &mut RestartRecord,
    at_attempt: i32,
    pods: Vec<&'p Pod>,
) -> (Option<&'p Pod>, Option<Failure<'p>>) {
    if r.trigger.reason == REASON_WORKER_FAILED {
        let at: Vec<&Pod> = pods.into_iter().filter(|p| attempt(p) == Some(at_attempt)).collect();
        return match first(&at, Look::Current) {
            Some((p, f)) => (Some(p), Some(f)),
            None => {
                let restarting = at.iter().filter_map(|p| match all_restarting(p)? {
                    (true, when) => Some((*p, when)),
                    _ => None,
                });
                match restarting.min_by_key(|(p, when)| (when.is_none(), *when, name(p))) {
                    Some((p, when)) => {
                        r.failed_at = when.map(MicroTime);
                        (Some(p), None)
                    }
                    None => (None, None),
                }
            }
        };
    }
    let past: Vec<&Pod> = pods.into_iter().filter(|p| attempt(p).is_some_and(|a| a > at_attempt)).collect();
    match first(&past, Look::Restarted) {
        Some((p, f)) => {
            // Its worker failed: the controller saw the agent's move before the failed
            // container, the reason is the same.
            r.trigger.reason = REASON_WORKER_FAILED.into();
            (Some(p), Some(f))
        }
        None => (past.iter().min_by_key(|p| name(p)).copied(), None),
    }
}

/// Fills the trigger of a record just opened from the pods the shell looked up: the first
/// failed pod, its failed container and exit code, and `failedAt` from the container's
/// `finishedAt` (a Job's record keeps its `Failed` condition time when no pod tells more).
pub fn fill_trigger<'p>(r: &mut RestartRecord, need: &TriggerPods, pods: impl IntoIterator<Item = &'p Pod>) {
    let pods = pods.into_iter();
    let (pod, failure): (Option<&Pod>, Option<Failure>) = match need {
        TriggerPods::Job(job) => {
            let label = |p: &&Pod| p.metadata.labels.as_ref().and_then(|l| l.get(JOB_NAME_LABEL)) == Some(job);
            let mine: Vec<&Pod> = pods.filter(label).collect();
            match first(&mine, Look::Job) {
                Some((p, f)) => (Some(p), Some(f)),
                None => {
                    let failed = mine.into_iter().filter(|p| phase(p) == Some("Failed"));
                    (failed.min_by_key(|p| name(p)), None)
                }
            }
        }
        TriggerPods::InPlace { deprecated } => in_place_trigger(r, *deprecated, pods.collect()),
        TriggerPods::InPlaceScoped { attempt, replicated_jobs, job_index } => {
            let label = |p: &Pod, k: &str| p.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
            let in_scope = |p: &&Pod| {
                label(p, REPLICATED_JOB_NAME).is_some_and(|r| replicated_jobs.contains(&r))
                    && job_index.is_none_or(|i| label(p, JOB_INDEX) == Some(i.to_string()))
            };
            in_place_trigger(r, *attempt, pods.filter(in_scope).collect())
        }
    };
    if let Some(p) = pod {
        r.trigger.pod = Some(name(p).to_string());
        if r.trigger.job.is_none() {
            r.trigger.job = p.metadata.labels.as_ref().and_then(|l| l.get(JOB_NAME_LABEL)).cloned();
        }
    }
    if let Some((container, exit_code, at)) = failure {
        r.trigger.container = Some(container.to_string());
        r.trigger.exit_code = Some(exit_code);
        if let Some(at) = at {
            r.failed_at = Some(MicroTime(at));
        }
    }
}

/// [`fill_trigger`] for each record the update just opened: `needs` holds one entry per record,
/// in the order they were opened (the last entry fills the last record); one the history limit
/// already dropped is skipped. Each record's restart metric, pushed with it in the same order,
/// keeps its reason in step with the record's.
pub fn complete_triggers<'p>(u: &mut Update, needs: &[TriggerPods], pods: impl IntoIterator<Item = &'p Pod>) {
    let pods: Vec<&Pod> = pods.into_iter().collect();
    let restarts: Vec<usize> =
        (u.metrics.iter().enumerate()).filter_map(|(i, m)| matches!(m, Metric::Restart { .. }).then_some(i)).collect();
    for (k, need) in needs.iter().enumerate() {
        // How far from the end its record and its metric stand (1: the last).
        let back = needs.len() - k;
        let Some(at) = u.status.restart_history.len().checked_sub(back) else { continue };
        let r = &mut u.status.restart_history[at];
        let before = r.trigger.reason.clone();
        fill_trigger(r, need, pods.iter().copied());
        if r.trigger.reason == before {
            continue;
        }
        if let Some(&m) = restarts.len().checked_sub(back).and_then(|i| restarts.get(i))
            && let Metric::Restart { reason, .. } = &mut u.metrics[m]
            && *reason == before
        {
            *reason = r.trigger.reason.clone();
        }
    }
}

/// A child Job as the phases see it.
struct JobView<'a> {
    name: &'a str,
    rjob: Option<&'a str>,
    /// Of an earlier attempt than the status names.
    stale: bool,
    /// Every pod ready or succeeded (`ready + succeeded >= min(parallelism, completions)`, as the
    /// JobsReady condition counts), or complete.
    running: bool,
}

fn view<'a>(status: &JobSetStatus, job: &'a Job) -> JobView<'a> {
    let c = Child::of(job);
    let empty = std::collections::BTreeMap::new();
    // A Job whose labels cannot be read is the reconcile's error, not the record's.
    let stale = children::stale(status, job.metadata.labels.as_ref().unwrap_or(&empty), "job").unwrap_or(false);
    let finished = c.finished();
    let (spec, st) = (job.spec.as_ref(), job.status.as_ref());
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
    let completions = spec.and_then(|s| s.completions).unwrap_or(parallelism);
    let done = st.and_then(|s| s.succeeded).unwrap_or(0) + st.and_then(|s| s.ready).unwrap_or(0);
    let running = match finished {
        Some(f) => !f.failed,
        None => done >= parallelism.min(completions),
    };
    JobView { name: c.name, rjob: c.rjob, stale, running }
}

/// Stamps the phases of the open records that this reconcile observes ended, all with `now`,
/// from the status this reconcile writes (its restart counters and in-place attempts), the
/// JobSet's Jobs and its pod tally; whether it stamped any. Each phase is stamped once, in order:
/// a later phase seen ended stamps the earlier ones not yet stamped with the same time.
pub fn advance(js: &JobSet, jobs: &[&Job], tally: &Tally, status: &mut JobSetStatus, now: Timestamp) -> bool {
    if !status.restart_history.iter().any(is_open) {
        return false;
    }
    // In place, the pods tell everything: the Jobs are looked at only for a recreation.
    let recreating = status.restart_history.iter().any(|r| is_open(r) && r.strategy != RestartStrategy::InPlaceRestart);
    let jobs: Vec<JobView> = jobs.iter().filter(|_| recreating).map(|j| view(status, j)).collect();
    let current = status.current_in_place_restart_attempt;
    let pods = in_place_restart::expected_pods(js).ok();
    let mut changed = false;
    let rjob_entries = &status.replicated_jobs_status;
    for r in status.restart_history.iter_mut().filter(|r| is_open(r)) {
        let (stopped, barrier, running) = match r.strategy {
            RestartStrategy::InPlaceRestart if r.scope == RestartScope::JobSet => {
                let barrier = current.is_some_and(|c| c >= r.attempt);
                let stopped = barrier || tally.lowest_attempt().is_none_or(|l| l >= r.attempt);
                let ready = current.map_or(0, |c| tally.ready_at(c)) as i64;
                (stopped, barrier, barrier && pods.is_some_and(|n| n > 0 && ready >= n))
            }
            // A scoped in-place restart: its scope's pods and attempts (the JobSet's current
            // lifts its barrier too).
            RestartStrategy::InPlaceRestart => {
                let scope = match r.scope {
                    RestartScope::Job => r.target.as_deref().and_then(|t| job_of(js, t)).map(|(rj, i)| (rj, Some(i))),
                    _ => r.target.as_deref().map(|t| (t, None)),
                };
                let Some((rjob, index)) = scope else { continue };
                let entry = rjob_entries.iter().find(|s| s.name == rjob);
                let own = match index {
                    None => entry.and_then(|s| s.current_in_place_restart_attempt),
                    Some(i) => entry
                        .and_then(|s| s.in_place_restart_jobs.iter().find(|j| j.job_index == i))
                        .and_then(|j| j.current_in_place_restart_attempt),
                };
                let lifted = [own, current].into_iter().flatten().find(|c| *c >= r.attempt);
                let counts = tally.scope(rjob, index);
                let stopped = lifted.is_some() || counts.and_then(|c| c.lowest()).is_none_or(|l| l >= r.attempt);
                let ready = lifted.and_then(|c| Some(counts?.ready_at(c))).unwrap_or(0) as i64;
                let expected =
                    js.replicated_job(rjob).map_or(0, |rj| in_place_restart::scope_pods(rj, index.is_some()));
                (stopped, lifted.is_some(), lifted.is_some() && expected > 0 && ready >= expected)
            }
            RestartStrategy::Recreate | RestartStrategy::BlockingRecreate => {
                let in_scope = |j: &&JobView| match r.scope {
                    RestartScope::JobSet => true,
                    RestartScope::ReplicatedJob => j.rjob == r.target.as_deref(),
                    RestartScope::Job => Some(j.name) == r.target.as_deref(),
                };
                let expected: i32 = match r.scope {
                    RestartScope::JobSet => js.spec.replicated_jobs.iter().map(|rj| rj.replicas).sum(),
                    RestartScope::ReplicatedJob => {
                        r.target.as_deref().and_then(|t| js.replicated_job(t)).map_or(0, |rj| rj.replicas)
                    }
                    RestartScope::Job => 1,
                };
                let stopped = !jobs.iter().filter(in_scope).any(|j| j.stale);
                let up = jobs.iter().filter(in_scope).filter(|j| !j.stale && j.running).count() as i64;
                (stopped, false, stopped && expected > 0 && up >= i64::from(expected))
            }
        };
        let mut stamp = |slot: &mut Option<MicroTime>, ended: bool| {
            if ended && slot.is_none() {
                *slot = Some(MicroTime(now));
                changed = true;
            }
        };
        stamp(&mut r.stopped_at, stopped || barrier || running);
        stamp(&mut r.barrier_lifted_at, barrier || (running && r.strategy == RestartStrategy::InPlaceRestart));
        stamp(&mut r.running_at, running);
        if running && r.duration.is_none() {
            let from = r.failed_at.as_ref().unwrap_or(&r.decided_at).0;
            r.duration = Some(go_duration(now.duration_since(from)));
        }
    }
    changed
}

/// A duration as Go's `time.Duration.String()` writes it: `1h2m3.5s`, `2.345s`, `1.5ms`, `0s`.
pub fn go_duration(d: SignedDuration) -> String {
    let nanos = d.as_nanos();
    let u = nanos.unsigned_abs();
    // The fraction of u / 10^prec without trailing zeros (nothing when whole).
    let frac = |u: u128, prec: u32| {
        let f = u % 10u128.pow(prec);
        if f == 0 {
            String::new()
        } else {
            format!(".{:0width$}", f, width = prec as usize).trim_end_matches('0').to_string()
        }
    };
    let body = if u == 0 {
        "0s".to_string()
    } else if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}{}µs", u / 1_000, frac(u, 3))
    } else if u < 1_000_000_000 {
        format!("{}{}ms", u / 1_000_000, frac(u, 6))
    } else {
        let secs = u / 1_000_000_000;
        let (h, m, s, f) = (secs / 3600, secs / 60 % 60, secs % 60, frac(u, 9));
        match (h, m) {
            (0, 0) => format!("{s}{f}s"),
            (0, _) => format!("{m}m{s}{f}s"),
            _ => format!("{h}h{m}m{s}{f}s"),
        }
    };
    if nanos < 0 { format!("-{body}") } else { body }
}

/// One observation of `jobset_restart_duration_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub strategy: RestartStrategy,
    pub scope: RestartScope,
    /// `detect`, `stop`, `barrier`, `start` or `total`.
    pub phase: &'static str,
    pub seconds: f64,
}

fn seconds(from: &MicroTime, to: &MicroTime) -> f64 {
    to.0.duration_since(from.0).as_secs_f64()
}

/// The phase durations a status write of `new` over `old` completes: each phase once, when the
/// write stamps its end (`detect` when the record is written with its `failedAt`).
pub fn observations(old: &[RestartRecord], new: &[RestartRecord]) -> Vec<Observation> {
    let mut out = vec![];
    for r in new {
        let before = old.iter().find(|o| {
            o.decided_at == r.decided_at && o.scope == r.scope && o.target == r.target && o.attempt == r.attempt
        });
        let fresh = |get: fn(&RestartRecord) -> Option<&MicroTime>| get(r).filter(|_| before.and_then(get).is_none());
        let mut observe = |phase: &'static str, from: &MicroTime, to: &MicroTime| {
            out.push(Observation { strategy: r.strategy, scope: r.scope, phase, seconds: seconds(from, to) });
        };
        if let Some(failed) = fresh(|r| r.failed_at.as_ref()) {
            observe("detect", failed, &r.decided_at);
        }
        if let Some(stopped) = fresh(|r| r.stopped_at.as_ref()) {
            observe("stop", &r.decided_at, stopped);
        }
        if let (Some(lifted), Some(stopped)) = (fresh(|r| r.barrier_lifted_at.as_ref()), r.stopped_at.as_ref()) {
            observe("barrier", stopped, lifted);
        }
        if let Some(running) = fresh(|r| r.running_at.as_ref()) {
            let started = r.barrier_lifted_at.as_ref().or(r.stopped_at.as_ref()).unwrap_or(&r.decided_at);
            observe("start", started, running);
            observe("total", r.failed_at.as_ref().unwrap_or(&r.decided_at), running);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::{PodBuilder, job, pod};
    use super::*;
    use jobset_api::jobset::keys::{JOB_RESTART_ATTEMPT, REPLICATED_JOB_RESTART_ATTEMPT};
    use serde_json::json;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn micro(s: i64) -> Option<MicroTime> {
        Some(MicroTime(at(s)))
    }

    /// Replicated jobs `a` (2 Jobs) and `b` (1 Job), one pod each.
    fn js(strategy: &str, status: serde_json::Value) -> JobSet {
        let rj = |name: &str, replicas: i32| json!({"name": name, "replicas": replicas, "template": {"spec": {"parallelism": 1, "completions": 1}}});
        serde_json::from_value(json!({
            "metadata": {"name": "js", "namespace": "default"},
            "spec": {"failurePolicy": {"maxRestarts": 5, "restartStrategy": strategy},
                     "replicatedJobs": [rj("a", 2), rj("b", 1)]},
            "status": status
        }))
        .unwrap()
    }

    fn rec(scope: RestartScope, target: Option<&str>, decided: i64) -> RestartRecord {
        let trigger =
            RestartTrigger { reason: "BackoffLimitExceeded".into(), action: "X".into(), ..Default::default() };
        record(1, RestartStrategy::Recreate, scope, target.map(String::from), trigger, None, at(decided))
    }

    #[test]
    fn a_restart_supersedes_the_open_records_of_the_same_or_a_narrower_scope() {
        use RestartScope::*;
        let j = js("Recreate", json!({}));
        // (case, open record, new restart, superseded)
        let cases = [
            ("a JobSet restart, any record", (Job, Some("js-a-1")), (JobSet, None), true),
            ("a JobSet restart, a JobSet record", (JobSet, None), (JobSet, None), true),
            ("the same replicated job", (ReplicatedJob, Some("a")), (ReplicatedJob, Some("a")), true),
            ("another replicated job", (ReplicatedJob, Some("b")), (ReplicatedJob, Some("a")), false),
            ("a Job of the replicated job", (Job, Some("js-a-1")), (ReplicatedJob, Some("a")), true),
            ("a Job of another replicated job", (Job, Some("js-b-0")), (ReplicatedJob, Some("a")), false),
            ("the same Job", (Job, Some("js-a-1")), (Job, Some("js-a-1")), true),
            ("another Job", (Job, Some("js-a-0")), (Job, Some("js-a-1")), false),
            ("a Job restart, a replicated job record", (ReplicatedJob, Some("a")), (Job, Some("js-a-1")), false),
            ("a replicated job restart, a JobSet record", (JobSet, None), (ReplicatedJob, Some("a")), false),
        ];
        for (case, (old_scope, old_target), (scope, target), superseded) in cases {
            let mut history = vec![rec(old_scope, old_target, 10)];
            open(&j, &mut history, rec(scope, target, 20), 10);
            assert_eq!(history.len(), 2, "{case}");
            assert_eq!(history[0].superseded, superseded, "{case}");
            assert!(!history[1].superseded, "{case}");
        }
        let mut finished = rec(JobSet, None, 10);
        finished.running_at = micro(15);
        let mut history = vec![finished];
        open(&j, &mut history, rec(JobSet, None, 20), 10);
        assert!(!history[0].superseded, "a record that ran is left as it was");
    }

    #[test]
    fn the_history_keeps_the_newest_records_up_to_the_limit() {
        let j = js("Recreate", json!({}));
        for (limit, kept) in [(3, vec![3, 4, 5]), (1, vec![5]), (0, vec![]), (10, vec![1, 2, 3, 4, 5])] {
            let mut history = vec![];
            for i in 1..=5 {
                open(&j, &mut history, rec(RestartScope::JobSet, None, i), limit);
            }
            let decided: Vec<i64> = history.iter().map(|r| r.decided_at.0.as_second()).collect();
            assert_eq!(decided, kept, "limit {limit}");
        }
    }

    #[test]
    fn a_jobset_that_finishes_supersedes_only_the_open_records() {
        let mut ran = rec(RestartScope::JobSet, None, 1);
        ran.running_at = micro(2);
        let mut history = vec![ran, rec(RestartScope::Job, Some("js-a-0"), 3)];
        assert!(supersede_open(&mut history));
        assert_eq!((history[0].superseded, history[1].superseded), (false, true));
        assert!(!supersede_open(&mut history), "nothing left open");
    }

    /// The phase times of a record, in seconds.
    fn phases(r: &RestartRecord) -> [Option<i64>; 3] {
        let s = |t: &Option<MicroTime>| t.as_ref().map(|t| t.0.as_second());
        [s(&r.stopped_at), s(&r.barrier_lifted_at), s(&r.running_at)]
    }

    #[test]
    fn recreate_phases_are_stamped_once_and_in_order_for_each_scope() {
        use RestartScope::*;
        // (scope, target, status after the restart, reconciles: (Jobs, phases expected after it))
        type Step = (Vec<k8s_openapi::api::batch::v1::Job>, [Option<i64>; 3]);
        let up = |rj: &str, i: i32, attempt: i32| job("js", rj, i).attempt(attempt).counts(1, 1, 0).obj();
        let starting = |rj: &str, i: i32, attempt: i32| job("js", rj, i).attempt(attempt).counts(1, 0, 0).obj();
        let old = |rj: &str, i: i32| job("js", rj, i).attempt(0).failed("BackoffLimitExceeded", 5).obj();
        let rj_attempt = |rj: &str, i: i32, a: &str| job("js", rj, i).label(REPLICATED_JOB_RESTART_ATTEMPT, a).obj();
        let rj_up =
            |rj: &str, i: i32, a: &str| job("js", rj, i).label(REPLICATED_JOB_RESTART_ATTEMPT, a).counts(1, 1, 0).obj();
        let job_attempt =
            |i: i32, a: &str, ready: i32| job("js", "a", i).label(JOB_RESTART_ATTEMPT, a).counts(1, ready, 0).obj();
        type Case<'a> = (&'a str, RestartScope, Option<&'a str>, serde_json::Value, Vec<Step>);
        let cases: Vec<Case> = vec![
            (
                "JobSet",
                JobSet,
                None,
                json!({"restarts": 1}),
                vec![
                    (vec![old("a", 0), old("a", 1), up("b", 0, 0)], [None, None, None]),
                    (vec![old("a", 1), starting("a", 0, 1)], [None, None, None]),
                    (vec![starting("a", 0, 1), starting("a", 1, 1), starting("b", 0, 1)], [Some(30), None, None]),
                    (vec![up("a", 0, 1), up("a", 1, 1), starting("b", 0, 1)], [Some(30), None, None]),
                    (vec![up("a", 0, 1), up("a", 1, 1), up("b", 0, 1)], [Some(30), None, Some(50)]),
                    (vec![up("a", 0, 1), up("a", 1, 1), up("b", 0, 1)], [Some(30), None, Some(50)]),
                ],
            ),
            (
                "JobSet, every Job seen ready at once",
                JobSet,
                None,
                json!({"restarts": 1}),
                vec![
                    (vec![old("b", 0)], [None, None, None]),
                    (vec![up("a", 0, 1), up("a", 1, 1), up("b", 0, 1)], [Some(20), None, Some(20)]),
                ],
            ),
            (
                "a completed Job counts as running",
                JobSet,
                None,
                json!({"restarts": 1}),
                vec![(
                    vec![up("a", 0, 1), up("a", 1, 1), job("js", "b", 0).attempt(1).complete().obj()],
                    [Some(10), None, Some(10)],
                )],
            ),
            (
                "ReplicatedJob: only its own Jobs",
                ReplicatedJob,
                Some("a"),
                json!({"replicatedJobsStatus": [{"name": "a", "restarts": 1, "ready": 0, "succeeded": 0,
                    "failed": 0, "active": 0, "suspended": 0}]}),
                vec![
                    (vec![rj_attempt("a", 0, "0"), rj_up("a", 1, "1"), starting("b", 0, 0)], [None, None, None]),
                    (vec![rj_up("a", 0, "1"), rj_up("a", 1, "1"), starting("b", 0, 0)], [Some(20), None, Some(20)]),
                ],
            ),
            (
                "Job: only itself",
                Job,
                Some("js-a-1"),
                json!({"replicatedJobsStatus": [{"name": "a", "jobRestarts": [0, 1], "ready": 0, "succeeded": 0,
                    "failed": 0, "active": 0, "suspended": 0}]}),
                vec![
                    (vec![job_attempt(0, "0", 0), job_attempt(1, "0", 1)], [None, None, None]),
                    (vec![job_attempt(0, "0", 0)], [Some(20), None, None]),
                    (vec![job_attempt(0, "0", 0), job_attempt(1, "1", 0)], [Some(20), None, None]),
                    (vec![job_attempt(0, "0", 0), job_attempt(1, "1", 1)], [Some(20), None, Some(40)]),
                ],
            ),
        ];
        for (case, scope, target, status, steps) in cases {
            let j = js("Recreate", status.clone());
            let mut status: JobSetStatus = serde_json::from_value(status).unwrap();
            status.restart_history = vec![rec(scope, target, 1)];
            for (i, (jobs, want)) in steps.iter().enumerate() {
                let refs: Vec<&k8s_openapi::api::batch::v1::Job> = jobs.iter().collect();
                let now = at(10 * (i as i64 + 1));
                let before = status.restart_history.clone();
                let changed = advance(&j, &refs, &Tally::default(), &mut status, now);
                assert_eq!(phases(&status.restart_history[0]), *want, "{case}: reconcile {i}");
                assert_eq!(changed, status.restart_history != before, "{case}: reconcile {i} reports a change");
            }
        }
    }

    #[test]
    fn the_duration_runs_from_the_failure_else_the_decision_to_running() {
        let up = [job("js", "a", 0).counts(1, 1, 0).obj(), job("js", "a", 1).counts(1, 1, 0).obj()];
        let up_b = job("js", "b", 0).counts(1, 1, 0).obj();
        let refs = [&up[0], &up[1], &up_b];
        for (failed_at, want) in [(Some(3), "1m2.5s"), (None, "1m1.5s")] {
            let j = js("Recreate", json!({}));
            let mut status = JobSetStatus::default();
            let mut r = rec(RestartScope::JobSet, None, 4);
            r.failed_at = failed_at.map(|s| MicroTime(at(s)));
            status.restart_history = vec![r];
            let now = at(65).checked_add(SignedDuration::from_millis(500)).unwrap();
            advance(&j, &refs, &Tally::default(), &mut status, now);
            assert_eq!(status.restart_history[0].duration.as_deref(), Some(want), "{failed_at:?}");
        }
    }

    /// A pod of Job `index` of replicated job `rjob` at `attempt`.
    fn scoped_pod(rjob: &str, index: i32, attempt: i32) -> PodBuilder {
        pod("js", &format!("js-{rjob}-{index}-0"))
            .label(REPLICATED_JOB_NAME, rjob)
            .label(JOB_INDEX, &index.to_string())
            .label(JOB_NAME_LABEL, &format!("js-{rjob}-{index}"))
            .at(attempt)
    }

    #[test]
    fn a_scoped_in_place_restart_is_timed_by_its_own_pods_and_attempts() {
        use RestartScope::*;
        let p = scoped_pod;
        // Status: (JobSet current, replicated job a's current, Job a-1's current).
        type Status = (Option<i32>, Option<i32>, Option<i32>);
        type Step = (Vec<PodBuilder>, Status, [Option<i64>; 3]);
        // (case, scope, target, attempt, reconciles at 10, 20, ...)
        let cases: Vec<(&str, RestartScope, &str, Vec<Step>)> = vec![
            (
                "a replicated job",
                ReplicatedJob,
                "a",
                vec![
                    (vec![p("a", 0, 2), p("a", 1, 3), p("b", 0, 0)], (Some(0), None, None), [None; 3]),
                    // b's pod stays at 0: it is not restarted.
                    (vec![p("a", 0, 3), p("a", 1, 3), p("b", 0, 0)], (Some(0), None, None), [Some(20), None, None]),
                    (
                        vec![p("a", 0, 3), p("a", 1, 3).ready(), p("b", 0, 0)],
                        (Some(0), Some(3), None),
                        [Some(20), Some(30), None],
                    ),
                    (
                        vec![p("a", 0, 3).ready(), p("a", 1, 3).ready(), p("b", 0, 0)],
                        (Some(0), Some(3), None),
                        [Some(20), Some(30), Some(40)],
                    ),
                ],
            ),
            (
                "a replicated job synced by the JobSet's current",
                ReplicatedJob,
                "a",
                vec![(
                    vec![p("a", 0, 3).ready(), p("a", 1, 3).ready(), p("b", 0, 3).ready()],
                    (Some(3), Some(1), None),
                    [Some(10); 3],
                )],
            ),
            (
                "a Job",
                Job,
                "js-a-1",
                vec![
                    (vec![p("a", 0, 0), p("a", 1, 2)], (Some(0), None, None), [None; 3]),
                    (vec![p("a", 0, 0), p("a", 1, 3)], (Some(0), None, None), [Some(20), None, None]),
                    (vec![p("a", 0, 0), p("a", 1, 3)], (Some(0), None, Some(3)), [Some(20), Some(30), None]),
                    (
                        vec![p("a", 0, 0), p("a", 1, 3).ready()],
                        (Some(0), None, Some(3)),
                        [Some(20), Some(30), Some(40)],
                    ),
                ],
            ),
        ];
        for (case, scope, target, steps) in cases {
            let j = js("InPlaceRestart", json!({}));
            let trigger =
                RestartTrigger { reason: REASON_WORKER_FAILED.into(), action: "X".into(), ..Default::default() };
            let r = record(3, RestartStrategy::InPlaceRestart, scope, Some(target.into()), trigger, None, at(5));
            let mut status = JobSetStatus { restart_history: vec![r], ..Default::default() };
            for (i, (pods, (js_current, rj_current, job_current), want)) in steps.into_iter().enumerate() {
                let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
                status.current_in_place_restart_attempt = js_current;
                let jobs = job_current.map(|c| {
                    vec![jobset_api::jobset::JobInPlaceRestartStatus {
                        job_index: 1,
                        current_in_place_restart_attempt: Some(c),
                        ..Default::default()
                    }]
                });
                status.replicated_jobs_status = vec![jobset_api::jobset::ReplicatedJobStatus {
                    name: "a".into(),
                    current_in_place_restart_attempt: rj_current,
                    in_place_restart_jobs: jobs.unwrap_or_default(),
                    ..Default::default()
                }];
                advance(&j, &[], &Tally::of(&pods), &mut status, at(10 * (i as i64 + 1)));
                assert_eq!(phases(&status.restart_history[0]), want, "{case}: reconcile {i}");
            }
        }
    }

    #[test]
    fn a_scoped_in_place_trigger_looks_at_its_scopes_pods_only() {
        let pods: Vec<Pod> = [
            scoped_pod("a", 0, 1).terminated("worker", 2, 30),
            scoped_pod("a", 1, 1).terminated("worker", 3, 20),
            scoped_pod("b", 0, 1).terminated("worker", 1, 10),
            scoped_pod("b", 1, 2),
        ]
        .into_iter()
        .map(PodBuilder::obj)
        .collect();
        // (case, worker failed, replicated jobs, job index, (pod, job, exit code))
        type Want = (Option<&'static str>, Option<&'static str>, Option<i32>);
        type Case = (&'static str, bool, &'static [&'static str], Option<i32>, Want);
        let cases: [Case; 5] = [
            ("every pod", true, &["a", "b"], None, (Some("js-b-0-0"), Some("js-b-0"), Some(1))),
            ("a replicated job", true, &["a"], None, (Some("js-a-1-0"), Some("js-a-1"), Some(3))),
            ("a Job", true, &["a"], Some(0), (Some("js-a-0-0"), Some("js-a-0"), Some(2))),
            ("an agent moved on", false, &["b"], None, (Some("js-b-1-0"), Some("js-b-1"), None)),
            ("nobody moved on in scope", false, &["a"], None, (None, None, None)),
        ];
        for (case, worker_failed, rjobs, job_index, want) in cases {
            let mut r = in_place_record(0, worker_failed, at(60));
            let need = TriggerPods::InPlaceScoped {
                attempt: 1,
                replicated_jobs: rjobs.iter().map(|r| r.to_string()).collect(),
                job_index,
            };
            fill_trigger(&mut r, &need, &pods);
            let t = &r.trigger;
            assert_eq!((t.pod.as_deref(), t.job.as_deref(), t.exit_code), want, "{case}");
        }
    }

    #[test]
    fn a_scoped_in_place_deprecation_during_a_recreation_of_its_scope_is_that_recreations_doing() {
        use RestartScope::*;
        let j = js("InPlaceRestart", json!({}));
        // (case, open records, scope of the deprecation, its target, worker failed, a restart)
        let cases = [
            ("nothing open", vec![], ReplicatedJob, Some("a"), false, true),
            ("a JobSet recreation", vec![rec(JobSet, None, 1)], ReplicatedJob, Some("a"), false, false),
            (
                "the replicated job's recreation",
                vec![rec(ReplicatedJob, Some("a"), 1)],
                ReplicatedJob,
                Some("a"),
                false,
                false,
            ),
            (
                "another replicated job's recreation",
                vec![rec(ReplicatedJob, Some("b"), 1)],
                ReplicatedJob,
                Some("a"),
                false,
                true,
            ),
            (
                "its replicated job's recreation, for a Job",
                vec![rec(ReplicatedJob, Some("a"), 1)],
                Job,
                Some("js-a-1"),
                false,
                false,
            ),
            (
                "one Job's recreation, for its replicated job",
                vec![rec(Job, Some("js-a-1"), 1)],
                ReplicatedJob,
                Some("a"),
                false,
                true,
            ),
            ("a failed worker all the same", vec![rec(JobSet, None, 1)], ReplicatedJob, Some("a"), true, true),
            ("an open in-place restart", vec![in_place_record(0, false, at(1))], ReplicatedJob, Some("a"), false, true),
        ];
        for (case, history, scope, target, worker_failed, restart) in cases {
            assert_eq!(scoped_in_place_is_a_restart(&j, &history, scope, target, worker_failed), restart, "{case}");
        }
    }

    #[test]
    fn superseded_and_finished_records_get_no_more_phases() {
        let j = js("Recreate", json!({}));
        let mut superseded = rec(RestartScope::JobSet, None, 1);
        superseded.superseded = true;
        let mut ran = rec(RestartScope::JobSet, None, 1);
        ran.stopped_at = micro(2);
        ran.running_at = micro(3);
        let mut status = JobSetStatus { restart_history: vec![superseded.clone(), ran.clone()], ..Default::default() };
        let none: [&k8s_openapi::api::batch::v1::Job; 0] = [];
        assert!(!advance(&j, &none, &Tally::default(), &mut status, at(10)));
        assert_eq!(status.restart_history, [superseded, ran]);
    }

    fn in_place_status(current: Option<i32>) -> JobSetStatus {
        let mut r = in_place_record(0, true, at(1));
        r.failed_at = micro(1);
        JobSetStatus {
            current_in_place_restart_attempt: current,
            previous_in_place_restart_attempt: Some(0),
            restart_history: vec![r],
            ..Default::default()
        }
    }

    #[test]
    fn in_place_phases_follow_the_pod_tally_and_the_barrier() {
        let j = js("InPlaceRestart", json!({}));
        // Three pods; (case, pods, currentInPlaceRestartAttempt, phases)
        let p = |n: &str, a: i32| pod("js", n).at(a);
        type Case<'a> = (&'a str, Vec<PodBuilder>, Option<i32>, [Option<i64>; 3]);
        let cases: Vec<Case> = vec![
            ("every pod still at the deprecated attempt", vec![p("x", 0), p("y", 0), p("z", 0)], Some(0), [None; 3]),
            ("one pod left at it", vec![p("x", 1), p("y", 1), p("z", 0)], Some(0), [None; 3]),
            (
                "every pod restarted, behind the barrier",
                vec![p("x", 1), p("y", 1), p("z", 1)],
                Some(0),
                [Some(10), None, None],
            ),
            (
                "the barrier lifted, not every pod ready",
                vec![p("x", 1).ready(), p("y", 1).ready(), p("z", 1)],
                Some(1),
                [Some(10), Some(10), None],
            ),
            (
                "every pod ready at the new attempt",
                vec![p("x", 1).ready(), p("y", 1).ready(), p("z", 1).ready()],
                Some(1),
                [Some(10), Some(10), Some(10)],
            ),
            (
                "ready pods of the old attempt do not count",
                vec![p("x", 0).ready(), p("y", 0).ready(), p("z", 0).ready()],
                Some(0),
                [None; 3],
            ),
        ];
        let j = {
            let mut j = j;
            j.spec.replicated_jobs[1].replicas = 0;
            j.spec.replicated_jobs[0].replicas = 3;
            j
        };
        for (case, pods, current, want) in cases {
            let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
            let mut status = in_place_status(current);
            advance(&j, &[], &Tally::of(&pods), &mut status, at(10));
            assert_eq!(phases(&status.restart_history[0]), want, "{case}");
        }
        // Stamped once: a later reconcile keeps the first times.
        let stopped: Vec<Pod> = [p("x", 1), p("y", 1), p("z", 1)].into_iter().map(PodBuilder::obj).collect();
        let up: Vec<Pod> =
            [p("x", 1).ready(), p("y", 1).ready(), p("z", 1).ready()].into_iter().map(PodBuilder::obj).collect();
        let mut status = in_place_status(Some(0));
        advance(&j, &[], &Tally::of(&stopped), &mut status, at(10));
        status.current_in_place_restart_attempt = Some(1);
        advance(&j, &[], &Tally::of(&stopped), &mut status, at(20));
        advance(&j, &[], &Tally::of(&up), &mut status, at(30));
        advance(&j, &[], &Tally::of(&up), &mut status, at(40));
        assert_eq!(phases(&status.restart_history[0]), [Some(10), Some(20), Some(30)]);
        assert_eq!(status.restart_history[0].duration.as_deref(), Some("29s"));
    }

    #[test]
    fn an_in_place_deprecation_during_a_jobset_recreation_is_that_recreations_doing() {
        let recreating = rec(RestartScope::JobSet, None, 1);
        let mut stopped = recreating.clone();
        stopped.stopped_at = micro(2);
        let mut running = stopped.clone();
        running.running_at = micro(3);
        let mut superseded = stopped.clone();
        superseded.superseded = true;
        let in_place = in_place_record(0, false, at(1));
        let cases = [
            ("nothing open", vec![], false, true),
            ("a JobSet recreation not yet stopped", vec![recreating.clone()], false, false),
            ("a JobSet recreation stopped, its new Jobs not yet running", vec![stopped.clone()], false, false),
            ("a failed worker all the same", vec![recreating.clone()], true, true),
            ("a JobSet recreation that ran", vec![running], false, true),
            ("a JobSet recreation superseded", vec![superseded], false, true),
            ("a Job recreation", vec![rec(RestartScope::Job, Some("js-a-0"), 1)], false, true),
            ("an open in-place restart", vec![in_place], false, true),
        ];
        for (case, history, worker_failed, restart) in cases {
            assert_eq!(in_place_is_a_restart(&history, worker_failed), restart, "{case}");
        }
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (250_000_000, "250ms"),
            (1_000_000_000, "1s"),
            (2_345_000_000, "2.345s"),
            (63_200_000_000, "1m3.2s"),
            (120_000_000_000, "2m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (7_200_000_000_000, "2h0m0s"),
            (-1_500_000_000, "-1.5s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(go_duration(SignedDuration::from_nanos(nanos)), want, "{nanos}");
        }
    }

    /// The pod's `agent` init container declared a sidecar (`restartPolicy: Always`).
    fn sidecar(mut p: PodBuilder) -> PodBuilder {
        let agent = k8s_openapi::api::core::v1::Container {
            name: "agent".into(),
            restart_policy: Some("Always".into()),
            ..Default::default()
        };
        p.0.spec.get_or_insert_default().init_containers = Some(vec![agent]);
        p
    }

    fn failed_pod(name: &str, job: &str) -> PodBuilder {
        pod("js", name).label(JOB_NAME_LABEL, job).phase("Failed")
    }

    #[test]
    fn a_jobs_trigger_names_its_first_failed_pod_and_container() {
        // (case, pods, (pod, container, exit code, failedAt))
        type Want = (Option<&'static str>, Option<&'static str>, Option<i32>, Option<i64>);
        let cases: Vec<(&str, Vec<PodBuilder>, Want)> = vec![
            (
                "the earliest failed container",
                vec![
                    failed_pod("p1", "js-a-0").terminated("worker", 2, 40),
                    failed_pod("p0", "js-a-0").terminated("worker", 1, 30),
                ],
                (Some("p0"), Some("worker"), Some(1), Some(30)),
            ),
            (
                "pods of other Jobs are not looked at",
                vec![
                    failed_pod("q", "js-a-1").terminated("worker", 1, 10),
                    failed_pod("p", "js-a-0").terminated("worker", 3, 40),
                ],
                (Some("p"), Some("worker"), Some(3), Some(40)),
            ),
            (
                "a succeeded container is no failure",
                vec![failed_pod("p", "js-a-0").terminated("worker", 0, 10)],
                (Some("p"), None, None, Some(50)),
            ),
            (
                "a failed pod without a failed container",
                vec![failed_pod("p", "js-a-0")],
                (Some("p"), None, None, Some(50)),
            ),
            (
                "a failed init container",
                vec![failed_pod("p", "js-a-0").terminated("agent", 3, 45)],
                (Some("p"), Some("agent"), Some(3), Some(45)),
            ),
            (
                "a sidecar is no failed init container",
                vec![sidecar(failed_pod("p", "js-a-0").terminated("agent", 1, 40).terminated("worker", 2, 45))],
                (Some("p"), Some("worker"), Some(2), Some(45)),
            ),
            (
                "in the same second, the exit before the kill that followed it",
                vec![failed_pod("p", "js-a-0").terminated("worker", 137, 45).terminated("agent", 3, 45)],
                (Some("p"), Some("agent"), Some(3), Some(45)),
            ),
            ("no pod left: the Job's Failed time", vec![], (None, None, None, Some(50))),
            (
                "a running pod is no failure",
                vec![pod("js", "p").label(JOB_NAME_LABEL, "js-a-0")],
                (None, None, None, Some(50)),
            ),
        ];
        for (case, pods, want) in cases {
            let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
            let trigger = RestartTrigger { job: Some("js-a-0".into()), ..Default::default() };
            let mut r = record(1, RestartStrategy::Recreate, RestartScope::JobSet, None, trigger, Some(at(50)), at(60));
            fill_trigger(&mut r, &TriggerPods::Job("js-a-0".into()), &pods);
            let t = &r.trigger;
            let got =
                (t.pod.as_deref(), t.container.as_deref(), t.exit_code, r.failed_at.as_ref().map(|f| f.0.as_second()));
            assert_eq!(got, want, "{case}");
            assert_eq!(t.job.as_deref(), Some("js-a-0"), "{case}");
        }
    }

    #[test]
    fn an_in_place_trigger_names_the_pod_that_failed_or_restarted_first() {
        type Want = (Option<&'static str>, Option<&'static str>, Option<i32>, Option<i64>);
        let last_failed = |p: PodBuilder, code: i32, at_s: i64| {
            let mut p = p.obj();
            let c = &mut p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
            c.last_state = Some(k8s_openapi::api::core::v1::ContainerState {
                terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                    exit_code: code,
                    finished_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(at_s))),
                    ..Default::default()
                }),
                ..Default::default()
            });
            PodBuilder(p)
        };
        // (case, worker failed, pods, want); the deprecated attempt is 1.
        let cases: Vec<(&str, bool, Vec<PodBuilder>, Want)> = vec![
            (
                "a failed worker of the deprecated attempt",
                true,
                vec![
                    pod("js", "p0").at(1),
                    pod("js", "p1").at(1).terminated("worker", 3, 20),
                    pod("js", "old").at(0).terminated("worker", 1, 5),
                ],
                (Some("p1"), Some("worker"), Some(3), Some(20)),
            ),
            (
                "a termination from before the pod's in-place restart is left over",
                true,
                vec![
                    pod("js", "p0").at(1).terminated("worker", 1, 10).all_restarting(false, 11),
                    pod("js", "p1").at(1).terminated("worker", 2, 30),
                ],
                (Some("p1"), Some("worker"), Some(2), Some(30)),
            ),
            (
                "a pod restarting all its containers",
                true,
                vec![pod("js", "p0").at(1).all_restarting(true, 12)],
                (Some("p0"), None, None, Some(12)),
            ),
            (
                "a pod restarting in place: the last termination that set it off",
                true,
                vec![last_failed(pod("js", "p0").at(1).all_restarting(true, 12), 1, 11)],
                (Some("p0"), Some("worker"), Some(1), Some(11)),
            ),
            (
                "a pod restarting in place: the failure, not the kill after it",
                true,
                vec![last_failed(pod("js", "p0").at(1).all_restarting(true, 12), 1, 8).terminated("worker", 137, 13)],
                (Some("p0"), Some("worker"), Some(1), Some(8)),
            ),
            (
                "an agent restarted its pod: its worker's last termination",
                false,
                vec![
                    pod("js", "p0").at(1),
                    last_failed(pod("js", "p1").at(2), 1, 25),
                    last_failed(pod("js", "p2").at(2), 137, 26),
                ],
                (Some("p1"), Some("worker"), Some(1), Some(25)),
            ),
            (
                "an agent restarted its pod before the kubelet reported the restart",
                false,
                vec![pod("js", "p1").at(2).terminated("worker", 1, 25).all_restarting(false, 26)],
                (Some("p1"), Some("worker"), Some(1), Some(25)),
            ),
            (
                "an agent restarted its pod: a failure after the restart is the next attempt's",
                false,
                vec![last_failed(pod("js", "p1").at(2).terminated("worker", 2, 40).all_restarting(false, 26), 1, 25)],
                (Some("p1"), Some("worker"), Some(1), Some(25)),
            ),
            (
                "a failed sidecar is no worker failure",
                true,
                vec![pod("js", "p0").at(1).terminated("agent", 1, 20)],
                (None, None, None, None),
            ),
            (
                "an agent restarted its pod, nothing terminated",
                false,
                vec![pod("js", "p2").at(2), pod("js", "p1").at(2)],
                (Some("p1"), None, None, None),
            ),
        ];
        for (case, worker_failed, pods, want) in cases {
            let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
            let mut r = in_place_record(1, worker_failed, at(60));
            fill_trigger(&mut r, &TriggerPods::InPlace { deprecated: 1 }, &pods);
            let reason = if worker_failed || want.1.is_some() { "WorkerFailed" } else { "PodRestartedInPlace" };
            assert_eq!(r.trigger.reason, reason, "{case}");
            let t = &r.trigger;
            let got =
                (t.pod.as_deref(), t.container.as_deref(), t.exit_code, r.failed_at.as_ref().map(|f| f.0.as_second()));
            assert_eq!(got, want, "{case}");
            assert_eq!((r.attempt, t.action.as_str(), t.counts_towards_max), (2, "RestartJobSet", true), "{case}");
        }
    }

    #[test]
    fn each_phase_is_observed_once_by_the_write_that_stamps_it() {
        let decided = rec(RestartScope::JobSet, None, 10);
        let mut detected = decided.clone();
        detected.failed_at = micro(8);
        let mut stopped = detected.clone();
        stopped.stopped_at = micro(13);
        let mut running = stopped.clone();
        running.running_at = micro(20);
        let mut in_place = in_place_record(0, true, at(10));
        in_place.failed_at = micro(9);
        in_place.stopped_at = micro(11);
        let mut lifted = in_place.clone();
        lifted.barrier_lifted_at = micro(14);
        lifted.running_at = micro(15);
        let obs = |old: &[RestartRecord], new: &[RestartRecord]| -> Vec<(&'static str, f64)> {
            observations(old, new).into_iter().map(|o| (o.phase, o.seconds)).collect()
        };
        type Case<'a> = (&'a str, Vec<RestartRecord>, Vec<RestartRecord>, Vec<(&'a str, f64)>);
        let cases: Vec<Case> = vec![
            ("opened without a failure time", vec![], vec![decided.clone()], vec![]),
            ("opened with one", vec![], vec![detected.clone()], vec![("detect", 2.0)]),
            ("stopped", vec![detected.clone()], vec![stopped.clone()], vec![("stop", 3.0)]),
            ("running", vec![stopped.clone()], vec![running.clone()], vec![("start", 7.0), ("total", 12.0)]),
            ("nothing new", vec![running.clone()], vec![running.clone()], vec![]),
            (
                "in place, the barrier and running in one write",
                vec![in_place.clone()],
                vec![lifted.clone()],
                vec![("barrier", 3.0), ("start", 1.0), ("total", 6.0)],
            ),
            ("a record dropped by the bound", vec![running.clone()], vec![], vec![]),
        ];
        for (case, old, new, want) in cases {
            assert_eq!(obs(&old, &new), want, "{case}");
        }
        let o = &observations(&[], &[lifted])[0];
        assert_eq!((o.strategy, o.scope), (RestartStrategy::InPlaceRestart, RestartScope::JobSet));
    }

    #[test]
    fn the_record_reads_as_the_committed_json() {
        let mut r = in_place_record(0, true, at(10));
        r.failed_at = Some(MicroTime(at(9).checked_add(SignedDuration::from_micros(250)).unwrap()));
        r.trigger.pod = Some("p".into());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            json!({"attempt": 1, "strategy": "InPlaceRestart", "scope": "JobSet",
                   "trigger": {"pod": "p", "reason": "WorkerFailed", "action": "RestartJobSet", "countsTowardsMax": true},
                   "failedAt": "1970-01-01T00:00:09.000250Z", "decidedAt": "1970-01-01T00:00:10.000000Z"})
        );
    }

    /// `p` restarted in place after its worker exited with `code` at 20.
    fn restarted(p: PodBuilder, code: i32) -> Pod {
        let mut p = p.obj();
        let c = &mut p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
        c.last_state = Some(k8s_openapi::api::core::v1::ContainerState {
            terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                exit_code: code,
                finished_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(20))),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn an_agents_move_caused_by_a_failed_worker_is_recorded_and_counted_as_worker_failed() {
        // (case, the pod past the deprecated attempt, reason recorded and counted)
        let cases = [
            ("its worker failed", restarted(pod("js", "p0").at(1), 1), "WorkerFailed"),
            ("nothing failed", pod("js", "p0").at(1).obj(), "PodRestartedInPlace"),
        ];
        for (case, moved, want) in cases {
            let mut u = Update::new(JobSetStatus::default(), at(30));
            let r = in_place_record(0, false, at(30));
            u.metrics.push(Metric::Restart { action: ACTION_RESTART_JOBSET, reason: r.trigger.reason.clone() });
            u.metrics.push(Metric::Completed);
            u.status.restart_history.push(r);
            complete_triggers(&mut u, &[TriggerPods::InPlace { deprecated: 0 }], [&moved]);
            assert_eq!(u.status.restart_history[0].trigger.reason, want, "{case}");
            assert_eq!(
                u.metrics,
                [Metric::Restart { action: ACTION_RESTART_JOBSET, reason: want.into() }, Metric::Completed],
                "{case}"
            );
        }
    }

    #[test]
    fn each_record_opened_in_one_reconcile_gets_its_own_trigger_and_metric_reason() {
        // Scopes `a` and `b` restarted for an agent's move; only `b`'s worker had failed.
        let pods = [scoped_pod("a", 0, 1).obj(), restarted(scoped_pod("b", 0, 1), 2)];
        let need =
            |rjob: &str| TriggerPods::InPlaceScoped { attempt: 0, replicated_jobs: vec![rjob.into()], job_index: None };
        let moved = REASON_POD_RESTARTED_IN_PLACE;
        // (case, history limit, records kept: (target, reason, pod), metric reasons)
        type Want = (Vec<(&'static str, &'static str, &'static str)>, [&'static str; 2]);
        let cases: [(&str, usize, Want); 2] = [
            (
                "both kept",
                10,
                (vec![("a", moved, "js-a-0-0"), ("b", "WorkerFailed", "js-b-0-0")], [moved, "WorkerFailed"]),
            ),
            ("the first dropped by the limit", 1, (vec![("b", "WorkerFailed", "js-b-0-0")], [moved, "WorkerFailed"])),
        ];
        for (case, limit, want) in cases {
            let j = js("InPlaceRestart", json!({}));
            let mut u = Update::new(JobSetStatus::default(), at(30));
            for rjob in ["a", "b"] {
                let r = scoped_in_place_record(
                    ScopedRecord {
                        scope: RestartScope::ReplicatedJob,
                        target: Some(rjob.into()),
                        attempt: 2,
                        worker_failed: false,
                        rule: None,
                        action: "RestartReplicatedJob",
                        counted: true,
                        job: None,
                    },
                    at(30),
                );
                u.metrics.push(Metric::Restart { action: "RestartReplicatedJob", reason: r.trigger.reason.clone() });
                open(&j, &mut u.status.restart_history, r, limit);
            }
            complete_triggers(&mut u, &[need("a"), need("b")], &pods);
            let records: Vec<_> = (u.status.restart_history.iter())
                .map(|r| (r.target.as_deref().unwrap(), r.trigger.reason.as_str(), r.trigger.pod.as_deref().unwrap()))
                .collect();
            let metrics =
                want.1.map(|reason| Metric::Restart { action: "RestartReplicatedJob", reason: reason.into() });
            assert_eq!((records, u.metrics), (want.0, metrics.to_vec()), "{case}");
        }
    }
}
