//! In-place restart (`restartStrategy: InPlaceRestart`, KEP-467, upstream's
//! `reconcileInPlaceRestart`): the controller's half of a group restart. The agent sidecar of every
//! pod writes the attempt its pod is at into the annotation
//! `jobset.sigs.k8s.io/in-place-restart-attempt`; from those the controller sets
//! `status.currentInPlaceRestartAttempt` once every pod is at the same attempt (the agents at it
//! lift their barriers) and `status.previousInPlaceRestartAttempt` to the attempt before the newest
//! one (the agents at or below it restart their pods in place), and fails the JobSet once restarts
//! exceed `maxRestarts`.
//!
//! Extension (the design doc's future improvement "speed up failure detection"): upstream notices
//! a failure only once the failed pod's agent has restarted and annotated the next attempt. Here,
//! as soon as a pod of the current attempt shows a failed worker, the current attempt is deprecated
//! (`previous = current`) and every agent restarts its pod at once. A failed worker is a regular
//! container (not an init container or sidecar) whose `state.terminated.exitCode` is non-zero, or
//! a pod whose `AllContainersRestarting` condition is True (the kubelet is restarting it in place).
//! A pod counts only while its annotation equals `current`, and `previous` only grows: a
//! deprecated attempt cannot be deprecated again, and the pods of the next attempt are judged only
//! once `current` moved on to it. A terminated state that ended no later than the pod's last
//! in-place restart (the `AllContainersRestarting` condition's last transition) is left over from
//! before it: the kubelet keeps it until the container runs again, which behind the barrier is
//! only after `current` moved on, so counting it would deprecate every new attempt at once.
//!
//! Extension (scoped in-place restart, [`decide_scoped`]): when a failure-policy rule restarts a
//! replicated job (`RestartReplicatedJob*`) or its Jobs (`RestartJob*`) and in-place failures
//! apply to it ([`kind`]), that replicated job (or each of its Jobs) keeps its own current and
//! previous attempts in `replicatedJobsStatus`, decided from its own pods' counts, and restarts
//! in place without the others. The JobSet's attempts still cover every pod: at startup and in a
//! JobSet-wide restart every pod waits for all the others, as upstream.

use std::collections::BTreeMap;

use jobset_api::jobset::keys::{IN_PLACE_RESTART_ATTEMPT, JOB_INDEX, REPLICATED_JOB_NAME};
use jobset_api::jobset::{FailurePolicyAction, FailurePolicyRule, JobSet, JobSetStatus, RestartScope, RestartStrategy};
use k8s_openapi::api::core::v1::Pod;

/// The kubelet's pod condition while it restarts every container of a pod (KEP-5532).
const ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

/// What the pods say about the JobSet's in-place restart state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    /// Fail the JobSet: `ReachedMaxRestarts`, `jobset failed due to reaching max number of restarts`.
    ReachedMaxRestarts,
    /// Set `currentInPlaceRestartAttempt`: every pod is at this attempt.
    Current(i32),
    /// Set `previousInPlaceRestartAttempt` (it only ever grows).
    Previous(i32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'t> {
    pub outcome: Outcome,
    /// Pods whose annotation is not a non-negative integer, as (pod, value). Upstream fails the
    /// reconcile over one; here the pod is left out (as if its agent had not annotated yet, which
    /// holds every barrier) and the caller logs it, so the rest of the reconcile and the other
    /// pods go on and a fixed annotation is picked up by the next reconcile.
    pub malformed: Vec<(&'t str, &'t str)>,
}

/// What one pod contributes to its JobSet's [`Tally`], read once per pod event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDigest {
    restart_count: i32,
    /// The attempt annotation of a pod that has not failed: parsed, or malformed as (pod, value).
    attempt: Option<Result<i32, (String, String)>>,
    worker_failed: bool,
    /// The pod's `Ready` condition is True (the restart record's `runningAt`, in place).
    ready: bool,
    /// The pod's replicated job (label `jobset.sigs.k8s.io/replicatedjob-name`).
    rjob: Option<String>,
    /// The pod's Job index (label `jobset.sigs.k8s.io/job-index`).
    index: Option<i32>,
}

/// Counts over some pods (not Failed, with a well-formed annotation) by attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Attempt → pods at it.
    attempts: BTreeMap<i32, usize>,
    /// Attempt → pods at it with a failed worker.
    failed_workers: BTreeMap<i32, usize>,
    /// Attempt → pods at it that are Ready.
    ready: BTreeMap<i32, usize>,
}

impl Counts {
    fn apply(&mut self, attempt: i32, worker_failed: bool, ready: bool, add: bool) {
        count(&mut self.attempts, attempt, add);
        if worker_failed {
            count(&mut self.failed_workers, attempt, add);
        }
        if ready {
            count(&mut self.ready, attempt, add);
        }
    }

    /// The lowest attempt any of the pods is at.
    pub fn lowest(&self) -> Option<i32> {
        self.attempts.first_key_value().map(|(a, _)| *a)
    }

    /// The highest attempt any of the pods is at.
    pub fn newest(&self) -> Option<i32> {
        self.attempts.last_key_value().map(|(a, _)| *a)
    }

    /// The attempt the pods are all at, if there are `expected` of them and they are.
    fn in_sync(&self, expected: i64) -> Option<i32> {
        let annotated: usize = self.attempts.values().sum();
        (self.attempts.len() == 1 && annotated as i64 == expected).then(|| self.newest()).flatten()
    }

    /// Whether a pod at `attempt` shows a failed worker.
    pub fn worker_failed_at(&self, attempt: i32) -> bool {
        self.failed_workers.contains_key(&attempt)
    }

    /// The Ready pods at `attempt`.
    pub fn ready_at(&self, attempt: i32) -> usize {
        self.ready.get(&attempt).copied().unwrap_or(0)
    }

    /// Whether a pod is at an attempt strictly between `above` (none: any) and `below`.
    fn any_between(&self, above: Option<i32>, below: i32) -> bool {
        self.attempts.range(..below).next_back().is_some_and(|(a, _)| Some(*a) > above)
    }
}

/// Counts over a JobSet's pods, kept up to date as pod events arrive (the pod index adds and
/// removes each pod's [`PodDigest`]), so a reconcile decides without reading thousands of pods:
/// in a group restart the controller reconciles for every burst of their events. Besides the
/// JobSet-wide counts it keeps those of each replicated job and of each Job, which a scoped
/// in-place restart decides from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// restartCount (the highest of each pod's containers) → pods.
    restart_counts: BTreeMap<i32, usize>,
    /// Every pod of the JobSet.
    all: Counts,
    /// The pods of each replicated job.
    by_rjob: BTreeMap<String, Counts>,
    /// The pods of each Job, by replicated job and index.
    by_job: BTreeMap<(String, i32), Counts>,
    /// Pod → its malformed annotation.
    malformed: BTreeMap<String, String>,
}

fn count(m: &mut BTreeMap<i32, usize>, k: i32, add: bool) {
    if add {
        *m.entry(k).or_default() += 1;
    } else if let Some(n) = m.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            m.remove(&k);
        }
    }
}

impl PodDigest {
    pub fn of(p: &Pod) -> PodDigest {
        let attempt = (phase(p) != Some("Failed"))
            .then(|| p.metadata.annotations.as_ref()?.get(IN_PLACE_RESTART_ATTEMPT))
            .flatten()
            .map(|v| {
                let name = || p.metadata.name.clone().unwrap_or_default();
                v.parse::<i32>().ok().filter(|a| *a >= 0).ok_or_else(|| (name(), v.clone()))
            });
        let label = |k: &str| p.metadata.labels.as_ref()?.get(k);
        PodDigest {
            restart_count: restart_count(p),
            worker_failed: matches!(attempt, Some(Ok(_))) && worker_failed(p),
            ready: pod_ready(p),
            attempt,
            rjob: label(REPLICATED_JOB_NAME).filter(|r| !r.is_empty()).cloned(),
            index: label(JOB_INDEX).and_then(|i| i.parse().ok()),
        }
    }
}

/// Applies a pod's counts to a sub-tally, dropping it once it counts no pod (so that a tally's
/// pods removed leave it equal to one that never had them).
fn apply_sub<K: Ord>(m: &mut BTreeMap<K, Counts>, key: K, d: &PodDigest, attempt: i32, add: bool) {
    if add {
        m.entry(key).or_default().apply(attempt, d.worker_failed, d.ready, true);
    } else if let Some(c) = m.get_mut(&key) {
        c.apply(attempt, d.worker_failed, d.ready, false);
        if c.attempts.is_empty() {
            m.remove(&key);
        }
    }
}

impl Tally {
    /// The tally of `pods`, as the pod index keeps it.
    pub fn of<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> Tally {
        let mut t = Tally::default();
        pods.into_iter().for_each(|p| t.apply(&PodDigest::of(p), true));
        t
    }

    fn apply(&mut self, d: &PodDigest, add: bool) {
        count(&mut self.restart_counts, d.restart_count, add);
        match &d.attempt {
            Some(Ok(a)) => {
                self.all.apply(*a, d.worker_failed, d.ready, add);
                if let Some(rjob) = &d.rjob {
                    apply_sub(&mut self.by_rjob, rjob.clone(), d, *a, add);
                    if let Some(i) = d.index {
                        apply_sub(&mut self.by_job, (rjob.clone(), i), d, *a, add);
                    }
                }
            }
            Some(Err((pod, v))) if add => {
                self.malformed.insert(pod.clone(), v.clone());
            }
            Some(Err((pod, _))) => {
                self.malformed.remove(pod);
            }
            None => {}
        }
    }
}

impl Tally {
    /// The lowest attempt any (not Failed, well-annotated) pod is at.
    pub fn lowest_attempt(&self) -> Option<i32> {
        self.all.lowest()
    }

    /// Whether a pod at `attempt` shows a failed worker.
    pub fn worker_failed_at(&self, attempt: i32) -> bool {
        self.all.worker_failed_at(attempt)
    }

    /// The Ready pods at `attempt`.
    pub fn ready_at(&self, attempt: i32) -> usize {
        self.all.ready_at(attempt)
    }

    /// The counts of a replicated job's pods (`index` none) or of one of its Jobs' (none when no
    /// such pod is counted).
    pub fn scope(&self, rjob: &str, index: Option<i32>) -> Option<&Counts> {
        match index {
            None => self.by_rjob.get(rjob),
            Some(i) => self.by_job.get(&(rjob.to_string(), i)),
        }
    }
}

impl crate::pod_index::Summary for Tally {
    type Digest = PodDigest;
    fn digest(p: &Pod) -> PodDigest {
        PodDigest::of(p)
    }
    fn add(&mut self, d: &PodDigest) {
        self.apply(d, true);
    }
    fn remove(&mut self, d: &PodDigest) {
        self.apply(d, false);
    }
}

/// Decides from the JobSet (spec and current status) and the tally of all its pods.
pub fn decide<'t>(js: &JobSet, tally: &'t Tally) -> Result<Decision<'t>, String> {
    let max_restarts = js.spec.failure_policy.as_ref().map(|f| f.max_restarts).unwrap_or(0);
    let none = JobSetStatus::default();
    let status = js.status.as_ref().unwrap_or(&none);
    let (current, previous) = (status.current_in_place_restart_attempt, status.previous_in_place_restart_attempt);
    if tally.restart_counts.last_key_value().is_some_and(|(rc, _)| *rc > max_restarts) {
        return Ok(Decision { outcome: Outcome::ReachedMaxRestarts, malformed: vec![] });
    }
    let malformed = tally.malformed.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    let mut d = Decision { outcome: Outcome::Unchanged, malformed };
    let max = tally.all.newest().unwrap_or(0);
    // In-place attempts include the JobSet restarts that recreated the pods; those that did not
    // count towards maxRestarts do not count here either.
    let not_counted = i64::from(status.restarts) - i64::from(status.restarts_count_towards_max);
    if i64::from(max) - not_counted > i64::from(max_restarts) {
        d.outcome = Outcome::ReachedMaxRestarts;
        return Ok(d);
    }

    let total = expected_pods(js)?;
    // The attempt every pod is at, if they all are at the same one.
    let in_sync = tally.all.in_sync(total);
    if let Some(a) = in_sync
        && current != Some(a)
    {
        d.outcome = Outcome::Current(a);
        return Ok(d);
    }
    let current_failed = current.is_some_and(|c| tally.all.worker_failed_at(c));
    // Upstream: out of sync, past the initial startup (some pod beyond attempt 0).
    let behind_newest = (in_sync.is_none() && max > 0).then(|| max - 1);
    d.outcome = match behind_newest.max(current.filter(|_| current_failed)) {
        Some(a) if previous.is_none_or(|p| a > p) => Outcome::Previous(a),
        _ => Outcome::Unchanged,
    };
    Ok(d)
}

/// The scope a replicated job restarts in place in, from the failure policy: the first rule (in
/// spec order) with neither `onJobFailureReasons` nor `onJobFailureMessagePatterns` (an in-place
/// failure has no Job failure reason or message) whose `targetReplicatedJobs` is empty or names
/// the replicated job. `RestartReplicatedJob*` restarts the replicated job alone, `RestartJob*`
/// each Job alone; any other action, or no such rule, the whole JobSet (the rule is not applied,
/// as upstream applies no rule to in-place restarts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kind<'j> {
    pub scope: RestartScope,
    /// The rule that restarts the replicated job (scope `ReplicatedJob`) or its Jobs (scope `Job`).
    pub rule: Option<&'j FailurePolicyRule>,
}

impl Kind<'_> {
    /// The action a restart of this kind takes (`RestartJobSet` for the whole JobSet).
    pub fn action(&self) -> FailurePolicyAction {
        self.rule.map_or(FailurePolicyAction::RestartJobSet, |r| r.action)
    }

    /// Whether a restart of this kind counts towards `maxRestarts` (not when its rule has a budget
    /// of its own, [`Self::budget`]).
    pub fn counted(&self) -> bool {
        self.budget().is_none()
            && !matches!(
                self.action(),
                FailurePolicyAction::RestartJobAndIgnoreMaxRestarts
                    | FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts
            )
    }

    /// Extension (per-rule restart budget): the rule and its own `maxRestarts`, if it has one.
    pub fn budget(&self) -> Option<(&'_ FailurePolicyRule, i32)> {
        self.rule.and_then(|r| Some((r, r.max_restarts?)))
    }
}

/// The [`Kind`] of replicated job `rjob`.
pub fn kind<'j>(js: &'j JobSet, rjob: &str) -> Kind<'j> {
    let rules = js.spec.failure_policy.as_ref().map(|f| f.rules.as_slice()).unwrap_or_default();
    let rule = rules.iter().find(|r| {
        r.on_job_failure_reasons.is_empty()
            && r.on_job_failure_message_patterns.is_empty()
            && (r.target_replicated_jobs.is_empty() || r.target_replicated_jobs.iter().any(|t| t == rjob))
    });
    let scope = match rule.map(|r| r.action) {
        Some(
            FailurePolicyAction::RestartReplicatedJob | FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts,
        ) => RestartScope::ReplicatedJob,
        Some(FailurePolicyAction::RestartJob | FailurePolicyAction::RestartJobAndIgnoreMaxRestarts) => {
            RestartScope::Job
        }
        _ => return Kind { scope: RestartScope::JobSet, rule: None },
    };
    Kind { scope, rule }
}

/// Scoped mode: `restartStrategy: InPlaceRestart` and some replicated job restarts in place
/// alone (or Job by Job). Without it, in-place restart is upstream's ([`decide`]).
pub fn scoped(js: &JobSet) -> bool {
    js.restart_strategy() == RestartStrategy::InPlaceRestart
        && js.spec.replicated_jobs.iter().any(|rj| kind(js, &rj.name).scope != RestartScope::JobSet)
}

/// The highest attempt number the status names (the JobSet's, every replicated job's and every
/// Job's current and previous attempts): an agent without an attempt announces one more.
pub fn global_max(status: &JobSetStatus) -> Option<i32> {
    let rjobs = status.replicated_jobs_status.iter().flat_map(|s| {
        let jobs = s.in_place_restart_jobs.iter();
        [s.current_in_place_restart_attempt, s.previous_in_place_restart_attempt]
            .into_iter()
            .chain(jobs.flat_map(|j| [j.current_in_place_restart_attempt, j.previous_in_place_restart_attempt]))
    });
    [status.current_in_place_restart_attempt, status.previous_in_place_restart_attempt]
        .into_iter()
        .chain(rjobs)
        .flatten()
        .max()
}

/// A scope of a scoped in-place restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'j> {
    JobSet,
    ReplicatedJob(&'j str),
    /// A Job: its replicated job and index.
    Job(&'j str, i32),
}

/// A scope's attempts: `current` (its pods lift their barriers at it) and `previous` (its pods
/// at or below it restart in place).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    pub current: Option<i32>,
    pub previous: Option<i32>,
}

/// A restart of one scope in place.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopedRestart<'j> {
    /// The scope's new `previousInPlaceRestartAttempt`.
    pub previous: i32,
    /// A worker failed (else an agent moved its pod past the scope's pods).
    pub worker_failed: bool,
    /// The attempt of the pods that set it off: the failed worker's pod is at it, the agent
    /// moved its pod past it.
    pub trigger_attempt: i32,
    /// The Job of the pod that set it off (the first by spec order and index).
    pub job: String,
    /// The replicated jobs whose pods may have set it off.
    pub trigger_rjobs: Vec<&'j str>,
    pub kind: Kind<'j>,
}

/// One change of a scope's attempts, in the order decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<'j> {
    /// Every pod of the scope is at this attempt: its `currentInPlaceRestartAttempt`.
    Current(Scope<'j>, i32),
    Restart(Scope<'j>, ScopedRestart<'j>),
}

/// What the pods say in scoped mode.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopedDecision<'j, 't> {
    pub changes: Vec<Change<'j>>,
    /// A container restarted more than `maxRestarts` times while every scoped rule counts
    /// towards it: the JobSet fails (upstream's check, kept where no restart is free).
    pub restart_count_exceeded: bool,
    /// As [`Decision::malformed`].
    pub malformed: Vec<(&'t str, &'t str)>,
}

/// Rules 1–3 of one scope (a replicated job or a Job), over its pods' counts and `expected` pods:
/// its `current` when its pods are in sync past its deprecated attempt (and not at the JobSet's
/// current, which covers them already), and a restart when a pod of it shows a failed worker at
/// a settled attempt or an agent moved past some of its pods that are not deprecated.
fn scope_step(
    counts: Option<&Counts>,
    expected: i64,
    js: Attempts,
    x: &mut Attempts,
) -> (Option<i32>, Option<(i32, bool, i32)>) {
    let Some(counts) = counts else { return (None, None) };
    let deprecated = js.previous.max(x.previous);
    let mut synced = None;
    if let Some(a) = counts.in_sync(expected)
        && Some(a) > deprecated
        && x.current != Some(a)
        && js.current != Some(a)
    {
        x.current = Some(a);
        synced = Some(a);
    }
    (synced, trigger(counts, counts, [x.current, js.current], deprecated).inspect(|(p, _, _)| x.previous = Some(*p)))
}

/// Rules 2 and 3: a failed worker of `own` at a settled attempt above `deprecated` restarts every
/// pod of `scope` (up to its newest attempt); a pod of `own` whose agent moved past pods of
/// `scope` that are not deprecated restarts those. Answers (previous, worker failed, the trigger's
/// attempt).
fn trigger(
    own: &Counts,
    scope: &Counts,
    settled: [Option<i32>; 2],
    deprecated: Option<i32>,
) -> Option<(i32, bool, i32)> {
    let failed = settled.into_iter().flatten().find(|s| Some(*s) > deprecated && own.worker_failed_at(*s));
    let by_failure = failed.and_then(|s| Some((scope.newest()?.max(s), s)));
    let newest = own.newest();
    let by_move = newest.filter(|n| scope.any_between(deprecated, *n)).map(|n| n - 1);
    match (by_failure, by_move) {
        (Some((p, s)), m) => Some((p.max(m.unwrap_or(p)), true, s)),
        (None, Some(m)) => Some((m, false, m)),
        (None, None) => None,
    }
}

/// The counts of several replicated jobs' pods together.
fn merged<'c>(parts: impl IntoIterator<Item = &'c Counts>) -> Counts {
    let mut out = Counts::default();
    for c in parts {
        for (m, from) in
            [(&mut out.attempts, &c.attempts), (&mut out.failed_workers, &c.failed_workers), (&mut out.ready, &c.ready)]
        {
            for (a, n) in from {
                *m.entry(*a).or_default() += n;
            }
        }
    }
    out
}

/// The first Job (spec order, then index) among `rjobs` with a pod that `hit` picks.
fn first_job(js: &JobSet, tally: &Tally, rjobs: &[&str], hit: impl Fn(&Counts) -> bool) -> String {
    let found = rjobs.iter().find_map(|r| {
        tally
            .by_job
            .range((r.to_string(), i32::MIN)..=(r.to_string(), i32::MAX))
            .find(|(_, c)| hit(c))
            .map(|((r, i), _)| (r.clone(), *i))
    });
    // Pods without a job-index label: the replicated job's first Job.
    let (r, i) = found.unwrap_or_else(|| (rjobs.first().map(|r| r.to_string()).unwrap_or_default(), 0));
    jobset_api::jobset::job_name(js.name(), &r, i)
}

/// The Job a restart names: that of a failed worker at `trigger_attempt`, else of a pod at the
/// newest attempt.
fn culprit(js: &JobSet, tally: &Tally, rjobs: &[&str], worker_failed: bool, trigger_attempt: i32) -> String {
    if worker_failed {
        first_job(js, tally, rjobs, |c| c.worker_failed_at(trigger_attempt))
    } else {
        first_job(js, tally, rjobs, |c| c.newest() > Some(trigger_attempt))
    }
}

/// The pods of a replicated job (replicas × parallelism), or of one of its Jobs (`per_job`:
/// parallelism).
pub fn scope_pods(rj: &jobset_api::jobset::ReplicatedJob, per_job: bool) -> i64 {
    let parallelism = i64::from(rj.template.parallelism().unwrap_or(1));
    if per_job { parallelism } else { i64::from(rj.replicas) * parallelism }
}

/// Scoped mode's decision (the design's rules 1–3 and 5, see docs/in-place-restart.md): the JobSet
/// scope first, in sync as upstream over every pod. While it is not in sync at its newest attempt
/// (startup, a JobSet-wide restart) it is the only scope and upstream's algorithm decides;
/// otherwise it restarts only for the pods of replicated jobs that restart with the JobSet, and
/// then each replicated job that restarts alone, and each Job of each replicated job that
/// restarts Job by Job, decides over its own pods. Each scope sees the changes decided before
/// it, so a scope whose pods a wider restart deprecates does not also restart.
pub fn decide_scoped<'j, 't>(js: &'j JobSet, tally: &'t Tally) -> Result<ScopedDecision<'j, 't>, String> {
    let policy = js.spec.failure_policy.as_ref();
    let max_restarts = policy.map(|f| f.max_restarts).unwrap_or(0);
    let none = JobSetStatus::default();
    let status = js.status.as_ref().unwrap_or(&none);
    let kinds: Vec<(&'j jobset_api::jobset::ReplicatedJob, Kind<'j>)> =
        js.spec.replicated_jobs.iter().map(|rj| (rj, kind(js, &rj.name))).collect();
    let free = kinds.iter().any(|(_, k)| k.scope != RestartScope::JobSet && !k.counted());
    let restart_count_exceeded =
        !free && tally.restart_counts.last_key_value().is_some_and(|(rc, _)| *rc > max_restarts);
    let malformed = tally.malformed.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    let mut changes = vec![];

    // The JobSet: in sync as upstream.
    let mut jsa = Attempts {
        current: status.current_in_place_restart_attempt,
        previous: status.previous_in_place_restart_attempt,
    };
    if let Some(a) = tally.all.in_sync(expected_pods(js)?)
        && jsa.current != Some(a)
    {
        jsa.current = Some(a);
        changes.push(Change::Current(Scope::JobSet, a));
    }
    let kind = Kind { scope: RestartScope::JobSet, rule: None };
    let every: Vec<&str> = kinds.iter().map(|(rj, _)| rj.name.as_str()).collect();
    // Until every pod is in sync at the JobSet's newest attempt (at startup, in a JobSet-wide
    // restart), the JobSet is one scope, upstream's: every pod waits for all the others, and a
    // pod moving past some that are not deprecated (a new pod announcing) restarts them all.
    if jsa.current <= jsa.previous {
        if let Some((previous, worker_failed, at)) = trigger(&tally.all, &tally.all, [None, None], jsa.previous) {
            let job = culprit(js, tally, &every, worker_failed, at);
            let r = ScopedRestart { previous, worker_failed, trigger_attempt: at, job, trigger_rjobs: every, kind };
            changes.push(Change::Restart(Scope::JobSet, r));
        }
        return Ok(ScopedDecision { changes, restart_count_exceeded, malformed });
    }
    // Then the JobSet restarts (every pod) for a failed worker at its current attempt of a pod
    // that restarts with the JobSet, or for such a pod's agent moving past pods not deprecated.
    let whole: Vec<&str> =
        kinds.iter().filter(|(_, k)| k.scope == RestartScope::JobSet).map(|(rj, _)| rj.name.as_str()).collect();
    let own = merged(whole.iter().filter_map(|r| tally.by_rjob.get(*r)));
    if let Some((previous, worker_failed, at)) = trigger(&own, &tally.all, [jsa.current, None], jsa.previous) {
        let job = culprit(js, tally, &whole, worker_failed, at);
        let r = ScopedRestart { previous, worker_failed, trigger_attempt: at, job, trigger_rjobs: whole, kind };
        changes.push(Change::Restart(Scope::JobSet, r));
        // Every pod is deprecated: no scope restarts on its own as well.
        return Ok(ScopedDecision { changes, restart_count_exceeded, malformed });
    }

    for (rj, k) in kinds.iter().filter(|(_, k)| k.scope == RestartScope::ReplicatedJob) {
        let name = rj.name.as_str();
        let old = status.replicated_jobs_status.iter().find(|s| s.name == name);
        let mut x = old.map_or_else(Attempts::default, |s| Attempts {
            current: s.current_in_place_restart_attempt,
            previous: s.previous_in_place_restart_attempt,
        });
        let (synced, restart) = scope_step(tally.by_rjob.get(name), scope_pods(rj, false), jsa, &mut x);
        changes.extend(synced.map(|a| Change::Current(Scope::ReplicatedJob(name), a)));
        if let Some((previous, worker_failed, at)) = restart {
            let job = culprit(js, tally, &[name], worker_failed, at);
            let r = ScopedRestart {
                previous,
                worker_failed,
                trigger_attempt: at,
                job,
                trigger_rjobs: vec![name],
                kind: *k,
            };
            changes.push(Change::Restart(Scope::ReplicatedJob(name), r));
        }
    }

    for (rj, k) in kinds.iter().filter(|(_, k)| k.scope == RestartScope::Job) {
        let name = rj.name.as_str();
        let old = status.replicated_jobs_status.iter().find(|s| s.name == name);
        for i in 0..rj.replicas {
            let entry = old.and_then(|s| s.in_place_restart_jobs.iter().find(|j| j.job_index == i));
            let mut x = entry.map_or_else(Attempts::default, |j| Attempts {
                current: j.current_in_place_restart_attempt,
                previous: j.previous_in_place_restart_attempt,
            });
            let (synced, restart) = scope_step(tally.scope(name, Some(i)), scope_pods(rj, true), jsa, &mut x);
            changes.extend(synced.map(|a| Change::Current(Scope::Job(name, i), a)));
            if let Some((previous, worker_failed, at)) = restart {
                let job = jobset_api::jobset::job_name(js.name(), name, i);
                let r = ScopedRestart {
                    previous,
                    worker_failed,
                    trigger_attempt: at,
                    job,
                    trigger_rjobs: vec![name],
                    kind: *k,
                };
                changes.push(Change::Restart(Scope::Job(name, i), r));
            }
        }
    }
    Ok(ScopedDecision { changes, restart_count_exceeded, malformed })
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn pod_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The highest `restartCount` of any container of the pod, init containers and sidecars included.
fn restart_count(p: &Pod) -> i32 {
    let Some(s) = p.status.as_ref() else { return 0 };
    s.init_container_statuses.iter().chain(&s.container_statuses).flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

/// Σ replicas × parallelism; in-place restart needs `completions == parallelism`, both set.
pub fn expected_pods(js: &JobSet) -> Result<i64, String> {
    js.spec.replicated_jobs.iter().try_fold(0i64, |sum, rj| {
        match (rj.template.completions(), rj.template.parallelism()) {
            (Some(c), Some(p)) if c == p => Ok(sum + i64::from(rj.replicas) * i64::from(p)),
            _ => Err(format!(
                "{}: in-place restart requires jobTemplate.spec.completions == jobTemplate.spec.parallelism != nil",
                rj.name
            )),
        }
    })
}

/// Whether a worker of the pod failed since the pod last restarted in place (see the module doc).
/// A pod being deleted has not failed: its workers are being killed (e.g. by the Job controller
/// when another pod failed its Job, which the failure policy then handles).
fn worker_failed(p: &Pod) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    if p.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let restarting = s.conditions.iter().flatten().find(|c| c.type_ == ALL_CONTAINERS_RESTARTING);
    if restarting.is_some_and(|c| c.status == "True") {
        return true;
    }
    let restarted_at = restarting.and_then(|c| c.last_transition_time.as_ref());
    s.container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .any(|t| t.exit_code != 0 && restarted_at.is_none_or(|r| t.finished_at.as_ref().is_some_and(|f| f.0 > r.0)))
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::{PodBuilder, pod};
    use super::*;
    use serde_json::json;

    /// `maxRestarts: 2`; replicated jobs `w` (2 replicas) and `ps` (1 replica), 2 pods each:
    /// 6 pods in all.
    fn js(status: serde_json::Value) -> JobSet {
        let rj = |name: &str, replicas: i32| {
            json!({"name": name, "replicas": replicas,
                   "template": {"spec": {"parallelism": 2, "completions": 2, "template": {"spec": {}}}}})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "js", "namespace": "default"},
            "spec": {"failurePolicy": {"maxRestarts": 2, "restartStrategy": "InPlaceRestart"},
                     "replicatedJobs": [rj("w", 2), rj("ps", 1)]},
            "status": status
        }))
        .unwrap()
    }

    /// The six pods at these attempts (`None`: not annotated yet).
    fn pods_at(attempts: [Option<i32>; 6]) -> Vec<PodBuilder> {
        attempts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let p = pod("js", &format!("p{i}"));
                match a {
                    Some(a) => p.at(*a),
                    None => p,
                }
            })
            .collect()
    }

    fn all_at(a: i32) -> Vec<PodBuilder> {
        pods_at([Some(a); 6])
    }

    fn outcome(js: &JobSet, pods: Vec<PodBuilder>) -> Outcome {
        let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
        decide(js, &Tally::of(&pods)).unwrap().outcome
    }

    #[test]
    fn attempts_decide_current_and_previous() {
        use Outcome::*;
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "initial startup: not every pod annotated yet",
                json!({}),
                pods_at([Some(0), Some(0), None, None, None, None]),
                Unchanged,
            ),
            ("initial startup: a pod missing", json!({}), all_at(0).into_iter().take(5).collect(), Unchanged),
            ("pods just became in sync", json!({}), all_at(0), Current(0)),
            ("all pods in sync", json!({"currentInPlaceRestartAttempt": 0}), all_at(0), Unchanged),
            (
                "in sync, then one pod restarted into a new attempt",
                json!({"currentInPlaceRestartAttempt": 0}),
                pods_at([Some(0), Some(1), Some(0), Some(0), Some(0), Some(0)]),
                Previous(0),
            ),
            (
                "lost sync, a second pod restarted but not all",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                pods_at([Some(1), Some(1), Some(0), Some(0), Some(0), Some(0)]),
                Unchanged,
            ),
            (
                "in sync again at the new attempt",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                all_at(1),
                Current(1),
            ),
            (
                "one pod restarted into a new attempt while another is not annotated yet",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                pods_at([Some(2), Some(1), Some(1), Some(1), Some(1), None]),
                Previous(1),
            ),
            (
                "previous never decreases",
                json!({"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 2}),
                pods_at([Some(2), Some(2), Some(2), Some(2), Some(2), None]),
                Unchanged,
            ),
            (
                "a Failed pod is left out of the attempts",
                json!({"currentInPlaceRestartAttempt": 0}),
                {
                    let mut p = all_at(0);
                    p.push(pod("js", "old").at(2).phase("Failed"));
                    p
                },
                Unchanged,
            ),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn restarts_beyond_max_restarts_fail_the_jobset() {
        use Outcome::*;
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "a worker restarted maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("worker", 2)],
                Unchanged,
            ),
            (
                "a worker restarted more than maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("worker", 3)],
                ReachedMaxRestarts,
            ),
            (
                "a sidecar restarted more than maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("agent", 3)],
                ReachedMaxRestarts,
            ),
            (
                "restart counts of a Failed pod count too",
                json!({}),
                vec![pod("js", "p").phase("Failed").restart_count("worker", 3)],
                ReachedMaxRestarts,
            ),
            ("an attempt at maxRestarts", json!({}), vec![pod("js", "p").at(2)], Previous(1)),
            ("an attempt beyond maxRestarts", json!({}), vec![pod("js", "p").at(3)], ReachedMaxRestarts),
            (
                "JobSet restarts that did not count towards maxRestarts are taken off the attempts",
                json!({"restarts": 2, "restartsCountTowardsMax": 1}),
                vec![pod("js", "p").at(3)],
                Previous(2),
            ),
            (
                "JobSet restarts that counted are not taken off",
                json!({"restarts": 1, "restartsCountTowardsMax": 1}),
                vec![pod("js", "p").at(3)],
                ReachedMaxRestarts,
            ),
            ("a Failed pod's attempt does not count", json!({}), vec![pod("js", "p").at(3).phase("Failed")], Unchanged),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn a_failed_worker_of_the_current_attempt_deprecates_it_at_once() {
        use Outcome::*;
        let current_0 = json!({"currentInPlaceRestartAttempt": 0});
        let with_first = |p: PodBuilder, rest: i32| {
            let mut pods = vec![p];
            pods.extend(all_at(rest).into_iter().skip(1));
            pods
        };
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "a worker of the current attempt exited non-zero",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("worker", 1, 10), 0),
                Previous(0),
            ),
            (
                "a pod of the current attempt is restarting all its containers",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).all_restarting(true, 10), 0),
                Previous(0),
            ),
            (
                "a worker that succeeded",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("worker", 0, 10), 0),
                Unchanged,
            ),
            (
                "only a sidecar failed",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("agent", 1, 10), 0),
                Unchanged,
            ),
            (
                "a failed worker while not every pod is there yet",
                current_0.clone(),
                vec![pod("js", "p0").at(0).terminated("worker", 1, 10)],
                Previous(0),
            ),
            (
                "a worker killed because its pod is being deleted",
                current_0.clone(),
                with_first(
                    {
                        let mut p = pod("js", "p0").at(0).terminated("worker", 143, 10);
                        p.0.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            jiff::Timestamp::from_second(10).unwrap(),
                        ));
                        p
                    },
                    0,
                ),
                Unchanged,
            ),
            (
                "a pod of an older attempt with a terminated worker",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(0).terminated("worker", 137, 10), 1),
                Unchanged,
            ),
            (
                "the current attempt is already deprecated",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(0).terminated("worker", 1, 10), 0),
                Unchanged,
            ),
            (
                "a worker failed before the pods became in sync at a new attempt",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 10), 1),
                Current(1),
            ),
            (
                "a terminated state left over from before the pod's in-place restart",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 10).all_restarting(false, 11), 1),
                Unchanged,
            ),
            (
                "a worker failed after the pod's in-place restart",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 12).all_restarting(false, 11), 1),
                Previous(1),
            ),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn a_malformed_annotation_leaves_its_pod_out_and_is_reported() {
        let pods: Vec<Pod> = pods_at([Some(0); 6])
            .into_iter()
            .enumerate()
            .map(|(i, p)| match i {
                0 => p.annotate("x"),
                1 => p.annotate("-1"),
                _ => p,
            })
            .map(PodBuilder::obj)
            .collect();
        let tally = Tally::of(&pods);
        let d = decide(&js(json!({})), &tally).unwrap();
        assert_eq!(d.outcome, Outcome::Unchanged, "four of six pods annotated: not in sync");
        assert_eq!(d.malformed, [("p0", "x"), ("p1", "-1")]);
    }

    #[test]
    fn the_tally_counts_ready_pods_and_the_lowest_attempt() {
        let pods: Vec<Pod> = [pod("js", "a").at(1).ready(), pod("js", "b").at(2).ready(), pod("js", "c").at(2)]
            .into_iter()
            .map(PodBuilder::obj)
            .collect();
        let t = Tally::of(&pods);
        assert_eq!((t.ready_at(1), t.ready_at(2), t.ready_at(3)), (1, 1, 0));
        assert_eq!(t.lowest_attempt(), Some(1));
        assert_eq!(Tally::default().lowest_attempt(), None);
    }

    #[test]
    fn a_pod_removed_from_the_tally_leaves_it_as_if_it_had_never_been_counted() {
        let base: Vec<Pod> = all_at(1).into_iter().map(PodBuilder::obj).collect();
        let extras = [
            pod("js", "x").at(1).terminated("worker", 3, 10),
            pod("js", "x").annotate("x"),
            pod("js", "x").at(4).restart_count("worker", 7),
            pod("js", "x").at(2).phase("Failed"),
            pod("js", "x").at(3).ready(),
        ];
        for extra in extras {
            let extra = PodDigest::of(&extra.obj());
            let mut t = Tally::of(&base);
            crate::pod_index::Summary::add(&mut t, &extra);
            assert_ne!(t, Tally::of(&base), "{extra:?} is counted");
            crate::pod_index::Summary::remove(&mut t, &extra);
            assert_eq!(t, Tally::of(&base), "{extra:?} is uncounted");
        }
    }

    #[test]
    fn the_first_rule_without_reasons_or_patterns_for_a_replicated_job_gives_its_kind() {
        use FailurePolicyAction::*;
        use RestartScope::*;
        let rule = |name: &str, action: &str, extra: serde_json::Value| {
            let mut r = json!({"name": name, "action": action});
            r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            r
        };
        let none = json!({});
        // (case, rules, the kind of `w`: (scope, rule name, action, counted))
        type Want = (RestartScope, Option<&'static str>, FailurePolicyAction, bool);
        let cases: Vec<(&str, Vec<serde_json::Value>, Want)> = vec![
            ("no rules", vec![], (JobSet, None, RestartJobSet, true)),
            (
                "RestartReplicatedJob",
                vec![rule("r", "RestartReplicatedJob", none.clone())],
                (ReplicatedJob, Some("r"), RestartReplicatedJob, true),
            ),
            (
                "RestartReplicatedJobAndIgnoreMaxRestarts",
                vec![rule("r", "RestartReplicatedJobAndIgnoreMaxRestarts", none.clone())],
                (ReplicatedJob, Some("r"), RestartReplicatedJobAndIgnoreMaxRestarts, false),
            ),
            ("RestartJob", vec![rule("r", "RestartJob", none.clone())], (Job, Some("r"), RestartJob, true)),
            (
                "RestartJobAndIgnoreMaxRestarts",
                vec![rule("r", "RestartJobAndIgnoreMaxRestarts", none.clone())],
                (Job, Some("r"), RestartJobAndIgnoreMaxRestarts, false),
            ),
            (
                "RestartJobSet is the JobSet's own",
                vec![rule("r", "RestartJobSet", none.clone())],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "FailJobSet is not applied in place",
                vec![rule("r", "FailJobSet", none.clone())],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "FailJob is not applied in place",
                vec![rule("r", "FailJob", none.clone())],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a rule with failure reasons is not for in-place failures",
                vec![rule("r", "RestartReplicatedJob", json!({"onJobFailureReasons": ["PodFailurePolicy"]}))],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a rule with message patterns is not for in-place failures",
                vec![rule("r", "RestartJob", json!({"onJobFailureMessagePatterns": [".*"]}))],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a rule targeting another replicated job",
                vec![rule("r", "RestartReplicatedJob", json!({"targetReplicatedJobs": ["ps"]}))],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a RestartJobSet rule for another replicated job",
                vec![rule("r", "RestartJobSet", json!({"targetReplicatedJobs": ["ps"]}))],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a rule targeting this one",
                vec![rule("r", "RestartJob", json!({"targetReplicatedJobs": ["ps", "w"]}))],
                (Job, Some("r"), RestartJob, true),
            ),
            (
                "the first applicable rule wins, in spec order",
                vec![
                    rule("reasons", "RestartJob", json!({"onJobFailureReasons": ["X"]})),
                    rule("first", "FailJobSet", none.clone()),
                    rule("second", "RestartReplicatedJob", none.clone()),
                ],
                (JobSet, None, RestartJobSet, true),
            ),
            (
                "a later rule applies when the earlier ones do not",
                vec![
                    rule("other", "RestartJob", json!({"targetReplicatedJobs": ["ps"]})),
                    rule("mine", "RestartReplicatedJob", json!({"targetReplicatedJobs": ["w"]})),
                ],
                (ReplicatedJob, Some("mine"), RestartReplicatedJob, true),
            ),
        ];
        for (case, rules, want) in cases {
            let mut j = js(json!({}));
            j.spec.failure_policy.as_mut().unwrap().rules = serde_json::from_value(json!(rules)).unwrap();
            let k = kind(&j, "w");
            assert_eq!((k.scope, k.rule.map(|r| r.name.as_str()), k.action(), k.counted()), want, "{case}");
            let ps_scoped = kind(&j, "ps").scope != JobSet;
            assert_eq!(scoped(&j), want.0 != JobSet || ps_scoped, "{case}: scoped mode");
            j.spec.failure_policy.as_mut().unwrap().restart_strategy = RestartStrategy::Recreate;
            assert!(!scoped(&j), "{case}: no scoped mode without InPlaceRestart");
        }
    }

    #[test]
    fn the_global_max_is_the_highest_attempt_the_status_names() {
        let cases = [
            ("nothing yet", json!({}), None),
            ("the JobSet's", json!({"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 1}), Some(2)),
            (
                "a replicated job's",
                json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
                    {"name": "w", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0, "previousInPlaceRestartAttempt": 3}]}),
                Some(3),
            ),
            (
                "a Job's",
                json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
                    {"name": "w", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0, "currentInPlaceRestartAttempt": 1,
                     "inPlaceRestartJobs": [{"jobIndex": 1, "currentInPlaceRestartAttempt": 5, "previousInPlaceRestartAttempt": 4}]}]}),
                Some(5),
            ),
        ];
        for (case, status, want) in cases {
            assert_eq!(global_max(js(status).status.as_ref().unwrap()), want, "{case}");
        }
    }

    #[test]
    fn the_tally_counts_each_replicated_job_and_job_apart() {
        let at = |name: &str, rjob: &str, index: &str, a: i32| {
            pod("js", name).label(REPLICATED_JOB_NAME, rjob).label(JOB_INDEX, index).at(a)
        };
        let pods: Vec<Pod> = [
            at("w0", "w", "0", 1).ready(),
            at("w1", "w", "1", 2).terminated("worker", 1, 10),
            at("ps", "ps", "0", 0),
            pod("js", "unlabelled").at(7),
        ]
        .into_iter()
        .map(PodBuilder::obj)
        .collect();
        let mut unlabelled = pods[3].clone();
        unlabelled.metadata.labels = None;
        let pods = [&pods[0], &pods[1], &pods[2], &unlabelled];
        let t = Tally::of(pods);
        let w = t.scope("w", None).unwrap();
        assert_eq!((w.lowest(), w.newest(), w.ready_at(1), w.worker_failed_at(2)), (Some(1), Some(2), 1, true));
        let w1 = t.scope("w", Some(1)).unwrap();
        assert_eq!((w1.lowest(), w1.ready_at(1), w1.worker_failed_at(2)), (Some(2), 0, true));
        assert_eq!(t.scope("ps", Some(0)).and_then(Counts::newest), Some(0));
        assert!(t.scope("w", Some(2)).is_none() && t.scope("x", None).is_none());
        assert_eq!((t.lowest_attempt(), t.all.newest()), (Some(0), Some(7)), "the JobSet-wide counts take every pod");
    }

    #[test]
    fn completions_unequal_to_parallelism_is_an_error() {
        let mut j = js(json!({}));
        j.spec.replicated_jobs[1].template.0["spec"]["completions"] = json!(3);
        let err = decide(&j, &Tally::default()).unwrap_err();
        assert_eq!(
            err,
            "ps: in-place restart requires jobTemplate.spec.completions == jobTemplate.spec.parallelism != nil"
        );
    }
}
