//! The restart timeline of a JobSet as data: one row per pod slot, grouped by replicated job and
//! Job, each a list of coloured segments (pending, running, terminating, ...), and the restarts
//! with their phase durations. [`build`] is pure: the CLI and the live view fetch the objects.

use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;

use jobset_api::jobset::{JobSet, RestartRecord, RestartTrigger, job_name, keys};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// What a timeline is built from: a JobSet (its spec and `status.restartHistory`), its Jobs and
/// their pods as listed now, and the time to draw up to.
pub struct Inputs<'a> {
    pub jobset: &'a JobSet,
    pub jobs: &'a [Job],
    pub pods: &'a [Pod],
    pub now: Timestamp,
}

/// A JobSet's restart timeline (the `jobset timeline --format json` output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub jobset: String,
    pub namespace: String,
    /// `spec.failurePolicy.restartStrategy`.
    pub strategy: String,
    /// The left and right ends of the chart.
    pub start: Timestamp,
    pub end: Timestamp,
    /// Whether pod rows are folded under their Job's aggregate row (more than
    /// [`AGGREGATE_ABOVE`] pod slots).
    pub aggregated: bool,
    /// The recorded restarts, oldest first.
    pub restarts: Vec<Restart>,
    pub replicated_jobs: Vec<ReplicatedJobRows>,
}

/// Above this many pod slots, the chart shows one aggregate row per Job and folds its pods.
pub const AGGREGATE_ABOVE: usize = 200;

/// One restart of `status.restartHistory` with its phases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    /// Position in `status.restartHistory` (0: the oldest kept).
    pub index: usize,
    pub attempt: i32,
    pub strategy: String,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub trigger: RestartTrigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<Timestamp>,
    pub decided_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_lifted_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default)]
    pub superseded: bool,
    /// The row of the failed pod (or Job), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_row: Option<String>,
    /// The phases whose both ends are recorded, in order, then `total`.
    pub phases: Vec<Phase>,
}

/// One phase of a restart: `detect`, `stop`, `barrier`, `start` or `total`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Phase {
    pub name: String,
    pub start: Timestamp,
    pub end: Timestamp,
    /// `end - start` in seconds (microsecond resolution, as the record).
    pub seconds: f64,
}

/// The Jobs of one replicated job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobRows {
    pub name: String,
    pub jobs: Vec<JobRows>,
}

/// One Job slot: its aggregate row and its pod rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRows {
    /// `<jobset>-<replicatedJob>-<jobIndex>`.
    pub name: String,
    pub index: i32,
    /// The aggregate row's key: `<replicatedJob>/<jobIndex>`.
    pub row: String,
    /// At each moment, the least advanced state any of its pods is in.
    pub aggregate: Vec<Segment>,
    pub pods: Vec<Row>,
}

/// One pod slot (replicated job / Job index / completion index) over every attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `<replicatedJob>/<jobIndex>/<completionIndex>`.
    pub row: String,
    pub completion_index: i32,
    /// The slot's newest live pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    pub segments: Vec<Segment>,
}

/// A stretch of time a slot (or, aggregated, a Job) spent in one state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub start: Timestamp,
    pub end: Timestamp,
    pub state: State,
    /// The slot's attempt: how many recorded restarts of the slot came before (0: before the
    /// oldest recorded restart).
    pub attempt: i32,
    /// Drawn from the restart record rather than a live pod (Recreate deletes old pods).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_record: bool,
}

/// The state a segment is coloured by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum State {
    Pending,
    Running,
    Terminating,
    Failed,
    RestartingInPlace,
    WaitingAtBarrier,
}

impl State {
    /// How much a state says about a Job when its pods differ: an aggregate row shows, at each
    /// moment, its pods' highest-ranked state (a Job is running only once all its pods are).
    fn rank(self) -> u8 {
        match self {
            State::Running => 0,
            State::Pending => 1,
            State::WaitingAtBarrier => 2,
            State::RestartingInPlace => 3,
            State::Terminating => 4,
            State::Failed => 5,
        }
    }

    /// The name shown in the legend and used as CSS class suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Terminating => "terminating",
            State::Failed => "failed",
            State::RestartingInPlace => "restarting in place",
            State::WaitingAtBarrier => "waiting at the barrier",
        }
    }

    /// Every state, in legend order.
    pub const ALL: [State; 6] = [
        State::Pending,
        State::Running,
        State::Terminating,
        State::Failed,
        State::RestartingInPlace,
        State::WaitingAtBarrier,
    ];
}

/// The annotation (and label) the Job controller puts on an Indexed Job's pods.
const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The timeline of `inputs.jobset` up to `inputs.now`.
pub fn build(inputs: &Inputs) -> Timeline {
    let js = inputs.jobset;
    let restarts: Vec<Restart> =
        js.status.iter().flat_map(|s| s.restart_history.iter()).enumerate().map(|(i, r)| restart(i, r)).collect();

    // Slots: those the spec asks for, plus any a Job or pod shows (a spec may have changed).
    let mut slots = Slots::default();
    for rjob in &js.spec.replicated_jobs {
        let per_job = rjob.template.completions().or(rjob.template.parallelism()).unwrap_or(1).max(0);
        for index in 0..rjob.replicas.max(0) {
            slots.job(js.name(), &rjob.name, index);
            for c in 0..per_job {
                slots.pod(js.name(), &rjob.name, index, c);
            }
        }
    }
    for job in inputs.jobs {
        if let (Some(rj), Some(index)) = (
            label(&job.metadata, keys::REPLICATED_JOB_NAME),
            label(&job.metadata, keys::JOB_INDEX).and_then(|v| v.parse().ok()),
        ) {
            slots.job(js.name(), rj, index);
        }
    }
    let mut unindexed: BTreeMap<(String, i32), i32> = BTreeMap::new();
    let mut pods: Vec<&Pod> = inputs.pods.iter().collect();
    pods.sort_by_key(|p| (created(p), p.metadata.name.clone()));
    for pod in pods {
        let (Some(rj), Some(index)) = (
            label(&pod.metadata, keys::REPLICATED_JOB_NAME),
            label(&pod.metadata, keys::JOB_INDEX).and_then(|v| v.parse::<i32>().ok()),
        ) else {
            continue;
        };
        let completion = match annotation(&pod.metadata, JOB_COMPLETION_INDEX)
            .or(label(&pod.metadata, JOB_COMPLETION_INDEX))
            .and_then(|v| v.parse().ok())
        {
            Some(c) => c,
            // A NonIndexed Job's pods have no slot of their own: one row each, in creation order.
            None => {
                let next = unindexed.entry((rj.to_string(), index)).or_default();
                *next += 1;
                *next - 1
            }
        };
        slots.pod(js.name(), rj, index, completion).pods.push(pod);
    }

    let mut start = js.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(inputs.now);
    // A finished JobSet's chart ends with it, not when it is drawn: by the end of the second its
    // condition gives (whole seconds: it finished in that second, the record's times may already
    // be later in it).
    let finished = [keys::COND_COMPLETED, keys::COND_FAILED]
        .into_iter()
        .filter_map(|c| js.condition(c))
        .find(|c| c.status == "True")
        .map(|c| c.last_transition_time.0 + SignedDuration::from_secs(1));
    let mut end = if finished.is_some() { start } else { inputs.now };
    for t in restarts
        .iter()
        .flat_map(|r| [r.failed_at, Some(r.decided_at), r.stopped_at, r.barrier_lifted_at, r.running_at])
        .flatten()
        .chain(inputs.pods.iter().flat_map(pod_times))
        .chain(finished)
    {
        start = start.min(t);
        end = end.max(t);
    }
    let restarts: Vec<Restart> = restarts
        .into_iter()
        .map(|r| Restart { failure_row: failure_row(&r.trigger, &slots, inputs.pods), ..r })
        .collect();

    let aggregated = slots.pod_count() > AGGREGATE_ABOVE;
    let mut replicated_jobs: Vec<ReplicatedJobRows> = Vec::new();
    for ((rj_order, index), job) in &slots.jobs {
        let rj = &slots.rjobs[*rj_order];
        let rows: Vec<Row> = job
            .pods
            .iter()
            .map(|(completion, slot)| {
                let row = format!("{rj}/{index}/{completion}");
                let affecting: Vec<&Restart> = restarts.iter().filter(|r| r.affects(rj, &job.name)).collect();
                let segments =
                    slot_segments(&SlotInputs { row: &row, pods: &slot.pods, restarts: &affecting, begin: start, end });
                Row {
                    row,
                    completion_index: *completion,
                    pod: slot.pods.iter().rev().find_map(|p| p.metadata.name.clone()),
                    segments,
                }
            })
            .collect();
        let job_rows = JobRows {
            name: job.name.clone(),
            index: *index,
            row: format!("{rj}/{index}"),
            aggregate: aggregate(&rows),
            pods: rows,
        };
        match replicated_jobs.last_mut() {
            Some(last) if last.name == *rj => last.jobs.push(job_rows),
            _ => replicated_jobs.push(ReplicatedJobRows { name: rj.clone(), jobs: vec![job_rows] }),
        }
    }

    Timeline {
        jobset: js.name().to_string(),
        namespace: js.namespace().to_string(),
        strategy: js.restart_strategy().as_str().to_string(),
        start,
        end,
        aggregated,
        restarts,
        replicated_jobs,
    }
}

/// Record `r` (number `index` of `status.restartHistory`) with its phases.
pub fn restart(index: usize, r: &RestartRecord) -> Restart {
    let failed_at = r.failed_at.as_ref().map(|t| t.0);
    let decided_at = r.decided_at.0;
    let stopped_at = r.stopped_at.as_ref().map(|t| t.0);
    let barrier_lifted_at = r.barrier_lifted_at.as_ref().map(|t| t.0);
    let running_at = r.running_at.as_ref().map(|t| t.0);
    let ends = [
        ("detect", failed_at, Some(decided_at)),
        ("stop", Some(decided_at), stopped_at),
        ("barrier", stopped_at.filter(|_| barrier_lifted_at.is_some()), barrier_lifted_at),
        ("start", barrier_lifted_at.or(stopped_at), running_at),
        ("total", failed_at.or(Some(decided_at)), running_at),
    ];
    let phases = ends
        .into_iter()
        .filter_map(|(name, start, end)| {
            let (start, end) = (start?, end?);
            Some(Phase { name: name.to_string(), start, end, seconds: seconds(start, end) })
        })
        .collect();
    Restart {
        index,
        attempt: r.attempt,
        strategy: r.strategy.as_str().to_string(),
        scope: r.scope.as_str().to_string(),
        target: r.target.clone(),
        trigger: r.trigger.clone(),
        failed_at,
        decided_at,
        stopped_at,
        barrier_lifted_at,
        running_at,
        duration: r.duration.clone(),
        superseded: r.superseded,
        failure_row: None,
        phases,
    }
}

/// `end - start` in seconds, exact to the microsecond (the record's resolution).
pub fn seconds(start: Timestamp, end: Timestamp) -> f64 {
    (end.as_microsecond() - start.as_microsecond()) as f64 / 1e6
}

impl Restart {
    /// `done` (every pod running again), `superseded` (cut short) or `in progress`.
    pub fn progress(&self) -> &'static str {
        if self.superseded {
            "superseded"
        } else if self.running_at.is_some() {
            "done"
        } else {
            "in progress"
        }
    }

    /// Whether this restart restarted the Job `job` of replicated job `rj`.
    pub fn affects(&self, rj: &str, job: &str) -> bool {
        match self.scope.as_str() {
            "ReplicatedJob" => self.target.as_deref() == Some(rj),
            "Job" => self.target.as_deref() == Some(job),
            _ => true,
        }
    }
}

#[derive(Default)]
struct Slots<'a> {
    /// Replicated job names, spec order first.
    rjobs: Vec<String>,
    jobs: BTreeMap<(usize, i32), JobSlot<'a>>,
}

struct JobSlot<'a> {
    name: String,
    pods: BTreeMap<i32, PodSlot<'a>>,
}

#[derive(Default)]
struct PodSlot<'a> {
    /// Oldest first.
    pods: Vec<&'a Pod>,
}

impl<'a> Slots<'a> {
    fn job(&mut self, jobset: &str, rj: &str, index: i32) -> &mut JobSlot<'a> {
        let order = match self.rjobs.iter().position(|r| r == rj) {
            Some(o) => o,
            None => {
                self.rjobs.push(rj.to_string());
                self.rjobs.len() - 1
            }
        };
        self.jobs
            .entry((order, index))
            .or_insert_with(|| JobSlot { name: job_name(jobset, rj, index), pods: BTreeMap::new() })
    }
    fn pod(&mut self, jobset: &str, rj: &str, index: i32, completion: i32) -> &mut PodSlot<'a> {
        self.job(jobset, rj, index).pods.entry(completion).or_default()
    }
    fn pod_count(&self) -> usize {
        self.jobs.values().map(|j| j.pods.len()).sum()
    }
    /// The replicated job and index of the Job named `name`.
    fn find_job(&self, name: &str) -> Option<(&str, i32)> {
        self.jobs.iter().find(|(_, j)| j.name == name).map(|((o, i), _)| (self.rjobs[*o].as_str(), *i))
    }
}

/// The row of a restart's failed pod: the live pod's slot, else the completion index in the
/// pod's name (`<job>-<index>-<suffix>`), else the failed Job's aggregate row.
fn failure_row(trigger: &RestartTrigger, slots: &Slots, pods: &[Pod]) -> Option<String> {
    if let Some(pod) =
        trigger.pod.as_deref().and_then(|name| pods.iter().find(|p| p.metadata.name.as_deref() == Some(name)))
    {
        let rj = label(&pod.metadata, keys::REPLICATED_JOB_NAME)?;
        let index = label(&pod.metadata, keys::JOB_INDEX)?;
        if let Some(c) = annotation(&pod.metadata, JOB_COMPLETION_INDEX).or(label(&pod.metadata, JOB_COMPLETION_INDEX))
        {
            return Some(format!("{rj}/{index}/{c}"));
        }
    }
    let job = trigger.job.as_deref().or_else(|| {
        // An in-place trigger may name only the pod: its Job is the longest Job name it extends.
        let pod = trigger.pod.as_deref()?;
        slots
            .jobs
            .values()
            .map(|j| j.name.as_str())
            .filter(|j| pod.starts_with(&format!("{j}-")))
            .max_by_key(|j| j.len())
    })?;
    let (rj, index) = slots.find_job(job)?;
    let completion = trigger
        .pod
        .as_deref()
        .and_then(|p| p.strip_prefix(job)?.strip_prefix('-')?.split('-').next()?.parse::<i32>().ok());
    Some(match completion {
        Some(c) => format!("{rj}/{index}/{c}"),
        None => format!("{rj}/{index}"),
    })
}

struct SlotInputs<'a, 'b> {
    row: &'b str,
    /// The slot's live pods, oldest first.
    pods: &'b [&'a Pod],
    /// The restarts of the slot's Job, oldest first.
    restarts: &'b [&'b Restart],
    begin: Timestamp,
    end: Timestamp,
}

/// A slot's segments: earlier attempts whose pods are gone drawn from the restart record, live
/// pods from their own timestamps, in-place restarts' windows from the record over them.
fn slot_segments(s: &SlotInputs) -> Vec<Segment> {
    let mut paint = Painter::default();
    let decided = |k: usize| s.restarts.get(k).map_or(s.end, |r| r.decided_at);
    let recreates: Vec<usize> = (0..s.restarts.len()).filter(|k| s.restarts[*k].strategy != "InPlaceRestart").collect();
    // A pod's attempt: one past the last restart that recreated it (it carries that restart's
    // counter), 0 before any.
    let attempt_of =
        |pod: &Pod| recreates.iter().rev().find(|k| recreated_by(pod, s.restarts[**k])).map_or(0, |k| k + 1);

    // Each recreated attempt from the record: pending from the old attempt's end until the
    // restart saw every pod running. Live pods of the attempt paint over it.
    for &k in &recreates {
        let r = s.restarts[k];
        if let (Some(stopped), Some(running)) = (r.stopped_at, r.running_at) {
            paint.add(stopped, running.min(decided(k + 1)), State::Pending, k as i32 + 1, true);
        }
    }

    // Earlier attempts that no live pod shows (Recreate deleted them): the attempt restart k
    // ended ran from the previous restart's end (or the JobSet's creation) until restart k
    // decided, then terminated until it stopped.
    for (n, &k) in recreates.iter().enumerate() {
        let r = s.restarts[k];
        let first = n.checked_sub(1).map_or(0, |m| recreates[m] + 1);
        if s.pods.iter().any(|p| (first..=k).contains(&attempt_of(p))) {
            continue;
        }
        let attempt = k as i32;
        let mut t = s.begin;
        if let Some(prev) = k.checked_sub(1).map(|j| s.restarts[j]) {
            t = prev
                .running_at
                .or(prev.barrier_lifted_at)
                .or(prev.stopped_at)
                .unwrap_or(prev.decided_at)
                .min(r.decided_at);
        }
        let failed = r.failed_at.filter(|_| r.failure_row.as_deref() == Some(s.row)).map(|f| f.clamp(t, r.decided_at));
        paint.add(t, failed.unwrap_or(r.decided_at), State::Running, attempt, true);
        if let Some(f) = failed {
            paint.add(f, r.decided_at, State::Failed, attempt, true);
        }
        let stopped = r.stopped_at.unwrap_or(if r.superseded { decided(k + 1) } else { s.end });
        paint.add(r.decided_at, stopped, State::Terminating, attempt, true);
    }

    for pod in s.pods {
        let attempt = attempt_of(pod);
        let record = attempt.checked_sub(1).map(|k| s.restarts[k]);
        let restarted_in_place = s
            .restarts
            .iter()
            .filter(|r| r.strategy == "InPlaceRestart")
            .map(|r| r.failed_at.unwrap_or(r.decided_at))
            .filter(|t| created(pod).is_some_and(|c| c <= *t))
            .min();
        for (from, to, state) in pod_segments(pod, s.end, record, restarted_in_place) {
            paint.add(from, to, state, attempt as i32, false);
        }
    }

    // In place: the pod stays; the record says when it restarted and waited at the barrier.
    for (k, r) in s.restarts.iter().enumerate() {
        if r.strategy != "InPlaceRestart" {
            continue;
        }
        let (old, new) = (k as i32, k as i32 + 1);
        let cut = if r.superseded { decided(k + 1) } else { s.end };
        if let Some(f) = r.failed_at.filter(|_| r.failure_row.as_deref() == Some(s.row)) {
            paint.add(f.min(r.decided_at), r.decided_at, State::Failed, old, true);
        }
        let stopped = r.stopped_at.unwrap_or(cut);
        paint.add(r.decided_at, stopped, State::RestartingInPlace, new, true);
        if r.stopped_at.is_some() {
            paint.add(stopped, r.barrier_lifted_at.unwrap_or(cut), State::WaitingAtBarrier, new, true);
        }
        paint.relabel(r.decided_at, decided(k + 1), new);
    }
    paint.finish(s.begin, s.end)
}

/// Whether `pod` was created by restart `r` or later: its label of the restart counter `r`
/// bumped (by scope) has reached `r.attempt`. Without the label, whether it was created no earlier
/// than the second `r` was decided in (creation times have whole seconds).
fn recreated_by(pod: &Pod, r: &Restart) -> bool {
    let key = match r.scope.as_str() {
        "ReplicatedJob" => keys::REPLICATED_JOB_RESTART_ATTEMPT,
        "Job" => keys::JOB_RESTART_ATTEMPT,
        _ => keys::RESTART_ATTEMPT,
    };
    match label(&pod.metadata, key).and_then(|v| v.parse::<i32>().ok()) {
        Some(attempt) => attempt >= r.attempt,
        None => created(pod).is_some_and(|c| c.as_second() >= r.decided_at.as_second()),
    }
}

/// A live pod's own segments: pending from creation to its first container start, running until
/// it finished or failed, failed from the failure until deleted, terminating once deleted.
fn pod_segments(
    pod: &Pod,
    now: Timestamp,
    record: Option<&Restart>,
    restarted_in_place: Option<Timestamp>,
) -> Vec<(Timestamp, Timestamp, State)> {
    let Some(created) = created(pod) else { return vec![] };
    // Pod times have whole seconds, the record microseconds: a pod of the attempt `record`
    // began cannot precede the old attempt's end, nor start after the record saw it running.
    let not_before = record.map(|r| r.stopped_at.unwrap_or(r.decided_at));
    let running_by = record.and_then(|r| r.running_at);
    let created = not_before.map_or(created, |b| created.max(b));
    let deleted = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let alive_until = deleted.unwrap_or(now);
    let statuses: Vec<_> = pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).collect();
    let started = statuses
        .iter()
        .flat_map(|c| {
            let state = c.state.as_ref();
            let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.started_at.as_ref());
            [
                state.and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.as_ref()),
                state.and_then(|s| s.terminated.as_ref()).and_then(|t| t.started_at.as_ref()),
                last,
            ]
        })
        .flatten()
        .map(|t| t.0)
        .min()
        .map(|t| match running_by {
            Some(by) if t.subsec_nanosecond() == 0 && by >= t && by < t + SignedDuration::from_secs(1) => by,
            _ => t,
        });
    // A container restarted more than once no longer shows its first start (`lastState` keeps
    // one run): the pod's start (the kubelet took it) is the best guess, else it was running by
    // the first in-place restart.
    let pod_started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
    let started = match pod_started.or(restarted_in_place) {
        Some(r) if statuses.iter().any(|c| c.restart_count >= 2) => Some(started.map_or(r, |s| s.min(r))),
        _ => started,
    };
    let terminated: Vec<_> = statuses.iter().filter_map(|c| c.state.as_ref()?.terminated.as_ref()).collect();
    let all_done = !statuses.is_empty() && terminated.len() == statuses.len();
    let failed_at =
        terminated.iter().filter(|t| t.exit_code != 0).filter_map(|t| t.finished_at.as_ref()).map(|t| t.0).min();
    let finished_at =
        all_done.then(|| terminated.iter().filter_map(|t| t.finished_at.as_ref()).map(|t| t.0).max()).flatten();
    let pod_failed = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
    let failed_at = failed_at.or(if pod_failed { finished_at.or(deleted).or(Some(now)) } else { None });

    // A whole-second time in the same second as the (sharper) start lies between the start and
    // the next second: a failure is drawn at the start (no run is shown that may not have
    // happened), a finish at the end of that second (the latest it can be: the run is shown, and
    // a pod that succeeded does not read as one that never ran).
    let same_second = |t: Timestamp| {
        started.filter(|s| t.subsec_nanosecond() == 0 && *s > t && *s < t + SignedDuration::from_secs(1))
    };
    let failed_at = failed_at.map(|t| same_second(t).unwrap_or(t));
    let finished_at =
        finished_at.map(|t| same_second(t).map_or(t, |s| (t + SignedDuration::from_secs(1)).min(alive_until).max(s)));

    let mut out = Vec::new();
    let run_from = started.unwrap_or(alive_until).max(created);
    out.push((created, run_from.min(alive_until), State::Pending));
    if started.is_some() {
        let run_to = [failed_at, finished_at, Some(alive_until)].into_iter().flatten().min().unwrap_or(alive_until);
        out.push((run_from, run_to, State::Running));
    }
    if let Some(f) = failed_at {
        out.push((f, alive_until, State::Failed));
    }
    if let Some(d) = deleted {
        out.push((d, now, State::Terminating));
    }
    out
}

/// Segments painted one over another: a later one wins where they overlap.
#[derive(Default)]
struct Painter {
    segments: Vec<Segment>,
}

impl Painter {
    fn add(&mut self, start: Timestamp, end: Timestamp, state: State, attempt: i32, from_record: bool) {
        if end <= start {
            return;
        }
        self.cut(start, end);
        self.segments.push(Segment { start, end, state, attempt, from_record });
        self.segments.sort_by_key(|s| s.start);
    }

    /// Splits segments at `start` and `end` and removes what lies between.
    fn cut(&mut self, start: Timestamp, end: Timestamp) {
        let mut out = Vec::with_capacity(self.segments.len() + 1);
        for s in self.segments.drain(..) {
            if s.end <= start || s.start >= end {
                out.push(s);
                continue;
            }
            if s.start < start {
                out.push(Segment { end: start, ..s.clone() });
            }
            if s.end > end {
                out.push(Segment { start: end, ..s });
            }
        }
        self.segments = out;
    }

    /// Gives the pending and running stretches within `[start, end)` attempt `attempt` (an
    /// in-place restart keeps the pod and starts a new attempt in it).
    fn relabel(&mut self, start: Timestamp, end: Timestamp, attempt: i32) {
        let inside: Vec<Segment> = self
            .segments
            .iter()
            .filter(|s| {
                matches!(s.state, State::Pending | State::Running)
                    && s.attempt < attempt
                    && s.end > start
                    && s.start < end
            })
            .cloned()
            .collect();
        for s in inside {
            let (from, to) = (s.start.max(start), s.end.min(end));
            self.add(from, to, s.state, attempt, s.from_record);
        }
    }

    /// The segments within `[begin, end]`, in order, neighbours alike merged.
    fn finish(self, begin: Timestamp, end: Timestamp) -> Vec<Segment> {
        let mut out: Vec<Segment> = Vec::with_capacity(self.segments.len());
        for mut s in self.segments {
            s.start = s.start.max(begin);
            s.end = s.end.min(end);
            if s.end <= s.start {
                continue;
            }
            match out.last_mut() {
                Some(last)
                    if last.end == s.start
                        && last.state == s.state
                        && last.attempt == s.attempt
                        && last.from_record == s.from_record =>
                {
                    last.end = s.end
                }
                _ => out.push(s),
            }
        }
        out
    }
}

/// A Job's aggregate row: at each moment, the highest-ranked state of its pods (and, among
/// those, the newest attempt).
fn aggregate(rows: &[Row]) -> Vec<Segment> {
    let mut events: Vec<(Timestamp, i64, State, i32, bool)> = Vec::new();
    for s in rows.iter().flat_map(|r| &r.segments) {
        events.push((s.start, 1, s.state, s.attempt, s.from_record));
        events.push((s.end, -1, s.state, s.attempt, s.from_record));
    }
    events.sort_by_key(|e| e.0);
    let mut live: BTreeMap<(u8, i32, State, bool), i64> = BTreeMap::new();
    let mut out: Vec<Segment> = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            let (_, d, state, attempt, rec) = events[i];
            *live.entry((state.rank(), attempt, state, rec)).or_default() += d;
            i += 1;
        }
        live.retain(|_, n| *n > 0);
        let Some(next) = events.get(i).map(|e| e.0) else { break };
        if let Some((&(_, attempt, state, from_record), _)) = live.iter().next_back() {
            match out.last_mut() {
                Some(last)
                    if last.end == t
                        && last.state == state
                        && last.attempt == attempt
                        && last.from_record == from_record =>
                {
                    last.end = next
                }
                _ => out.push(Segment { start: t, end: next, state, attempt, from_record }),
            }
        }
    }
    out
}

fn label<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Every time a pod carries, to fit the chart around.
fn pod_times(pod: &Pod) -> Vec<Timestamp> {
    let mut out: Vec<Timestamp> = [pod.metadata.creation_timestamp.as_ref(), pod.metadata.deletion_timestamp.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .collect();
    for c in pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()) {
        for state in [c.state.as_ref(), c.last_state.as_ref()].into_iter().flatten() {
            out.extend(state.running.as_ref().and_then(|r| r.started_at.as_ref()).map(|t| t.0));
            if let Some(t) = &state.terminated {
                out.extend([t.started_at.as_ref(), t.finished_at.as_ref()].into_iter().flatten().map(|t| t.0));
            }
        }
    }
    out
}

/// Objects as a cluster shows them during restarts, for the tests of this crate.
#[cfg(test)]
pub(crate) mod fixtures {
    use jiff::{SignedDuration, Timestamp};
    use jobset_api::jobset::JobSet;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    /// The fixtures' time 0.
    pub const T0: &str = "2026-11-27T10:00:00Z";

    /// `secs` after [`T0`].
    pub fn at(secs: f64) -> Timestamp {
        T0.parse::<Timestamp>().unwrap() + SignedDuration::from_secs_f64(secs)
    }

    fn micro(secs: f64) -> String {
        at(secs).strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }

    fn whole(secs: f64) -> String {
        at(secs).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// A JobSet `train` created at 0 with `rjobs` (name, replicas, parallelism) and `history`
    /// (`status.restartHistory`).
    pub fn jobset(strategy: &str, rjobs: &[(&str, i32, i32)], history: Vec<Value>) -> JobSet {
        let rjobs: Vec<Value> = rjobs
            .iter()
            .map(|(name, replicas, parallelism)| {
                json!({"name": name, "replicas": replicas, "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed", "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "default", "creationTimestamp": whole(0.0)},
            "spec": {"replicatedJobs": rjobs, "failurePolicy": {"maxRestarts": 3, "restartStrategy": strategy}},
            "status": {"restarts": history.len(), "restartHistory": history},
        }))
        .unwrap()
    }

    /// A restart record: `times` are failedAt, decidedAt, stoppedAt, barrierLiftedAt, runningAt
    /// (seconds after [`T0`], `None` when not reached).
    pub fn record(attempt: i32, strategy: &str, pod: &str, times: [Option<f64>; 5]) -> Value {
        let job = pod.rsplitn(3, '-').nth(2).unwrap_or_default();
        let mut r = json!({
            "attempt": attempt, "strategy": strategy, "scope": "JobSet",
            "trigger": {"job": job, "pod": pod, "container": "main", "exitCode": 1, "reason": "BackoffLimitExceeded", "action": "RestartJobSet", "countsTowardsMax": true},
            "decidedAt": micro(times[1].unwrap()),
        });
        for (key, t) in
            [("failedAt", times[0]), ("stoppedAt", times[2]), ("barrierLiftedAt", times[3]), ("runningAt", times[4])]
        {
            if let Some(t) = t {
                r[key] = json!(micro(t));
            }
        }
        r
    }

    /// Pod `name` of slot `rj`/`job`/`completion`: created, its container started, finished
    /// with `exit` (if), deleted (if), seconds after [`T0`].
    pub fn pod(
        name: &str,
        (rj, job, completion): (&str, i32, i32),
        created: f64,
        started: Option<f64>,
        finished: Option<(f64, i32)>,
        deleted: Option<f64>,
    ) -> Pod {
        let state = match (started, finished) {
            (Some(s), Some((f, exit))) => {
                json!({"terminated": {"startedAt": whole(s), "finishedAt": whole(f), "exitCode": exit}})
            }
            (Some(s), None) => json!({"running": {"startedAt": whole(s)}}),
            _ => json!({"waiting": {"reason": "ContainerCreating"}}),
        };
        let phase = match finished {
            Some((_, 0)) => "Succeeded",
            Some(_) => "Failed",
            None if started.is_some() => "Running",
            None => "Pending",
        };
        let mut p = json!({
            "metadata": {
                "name": name, "namespace": "default", "creationTimestamp": whole(created),
                "labels": {"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": rj, "jobset.sigs.k8s.io/job-index": job.to_string(), "batch.kubernetes.io/job-completion-index": completion.to_string()},
                "annotations": {"batch.kubernetes.io/job-completion-index": completion.to_string()},
            },
            "status": {"phase": phase, "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "", "ready": started.is_some() && finished.is_none(), "restartCount": 0, "state": state}]},
        });
        if let Some(d) = deleted {
            p["metadata"]["deletionTimestamp"] = json!(whole(d));
        }
        serde_json::from_value(p).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn timeline(js: &JobSet, pods: &[Pod], now: f64) -> Timeline {
        build(&Inputs { jobset: js, jobs: &[], pods, now: at(now) })
    }

    fn row<'t>(t: &'t Timeline, key: &str) -> &'t Row {
        t.replicated_jobs
            .iter()
            .flat_map(|r| &r.jobs)
            .flat_map(|j| &j.pods)
            .find(|r| r.row == key)
            .unwrap_or_else(|| panic!("no row {key}"))
    }

    /// Segments as (start, end, state, attempt, from_record), seconds after T0.
    fn spans(segments: &[Segment]) -> Vec<(f64, f64, State, i32, bool)> {
        segments
            .iter()
            .map(|s| (seconds(at(0.0), s.start), seconds(at(0.0), s.end), s.state, s.attempt, s.from_record))
            .collect()
    }

    #[test]
    fn rows_are_pod_slots_grouped_by_replicated_job_and_job_in_spec_order() {
        let js = jobset("Recreate", &[("workers", 2, 2), ("leader", 1, 1)], vec![]);
        let t = timeline(&js, &[], 10.0);
        // (replicated job, [(Job, its row, its pod rows)])
        type Shape = Vec<(String, Vec<(String, String, Vec<String>)>)>;
        let shape: Shape = t
            .replicated_jobs
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    r.jobs
                        .iter()
                        .map(|j| (j.name.clone(), j.row.clone(), j.pods.iter().map(|p| p.row.clone()).collect()))
                        .collect(),
                )
            })
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shape,
            vec![
                (
                    "workers".into(),
                    vec![
                        ("train-workers-0".into(), "workers/0".into(), s(&["workers/0/0", "workers/0/1"])),
                        ("train-workers-1".into(), "workers/1".into(), s(&["workers/1/0", "workers/1/1"]))
                    ]
                ),
                ("leader".into(), vec![("train-leader-0".into(), "leader/0".into(), s(&["leader/0/0"]))]),
            ]
        );
    }

    #[test]
    fn a_pod_of_a_slot_the_spec_does_not_list_still_gets_a_row() {
        let js = jobset("Recreate", &[("workers", 1, 1)], vec![]);
        let pods = [pod("train-workers-3-0-abcde", ("workers", 3, 0), 1.0, Some(2.0), None, None)];
        let t = timeline(&js, &pods, 10.0);
        assert_eq!(row(&t, "workers/3/0").pod.as_deref(), Some("train-workers-3-0-abcde"));
    }

    #[test]
    fn pods_are_folded_under_their_job_above_the_aggregation_threshold() {
        for (replicas, parallelism, aggregated) in [
            (1, 1, false),
            (2, 100, false),
            (1, AGGREGATE_ABOVE as i32, false),
            (1, AGGREGATE_ABOVE as i32 + 1, true),
            (10, 500, true),
        ] {
            let js = jobset("Recreate", &[("workers", replicas, parallelism)], vec![]);
            let t = timeline(&js, &[], 10.0);
            assert_eq!(t.aggregated, aggregated, "{replicas} x {parallelism}");
            let rows: usize = t.replicated_jobs.iter().flat_map(|r| &r.jobs).map(|j| j.pods.len()).sum();
            assert_eq!(rows, (replicas * parallelism) as usize, "every pod slot keeps its row");
        }
    }

    #[test]
    fn phase_seconds_are_the_differences_of_the_recorded_times() {
        type Want = Vec<(&'static str, f64)>;
        let cases: [(&str, [Option<f64>; 5], bool, Want); 4] = [
            (
                "Recreate",
                [Some(10.0), Some(10.25), Some(12.5), None, Some(15.125)],
                false,
                vec![("detect", 0.25), ("stop", 2.25), ("start", 2.625), ("total", 5.125)],
            ),
            (
                "InPlaceRestart",
                [Some(10.0), Some(10.5), Some(11.0), Some(11.000125), Some(13.0)],
                false,
                vec![("detect", 0.5), ("stop", 0.5), ("barrier", 0.000125), ("start", 1.999875), ("total", 3.0)],
            ),
            // No failure time: the total starts at the decision.
            (
                "Recreate",
                [None, Some(10.0), Some(11.0), None, Some(12.5)],
                false,
                vec![("stop", 1.0), ("start", 1.5), ("total", 2.5)],
            ),
            // Cut short: only the phases both of whose ends were recorded.
            ("Recreate", [Some(10.0), Some(10.75), None, None, None], true, vec![("detect", 0.75)]),
        ];
        for (strategy, times, superseded, want) in cases {
            let mut r = record(1, strategy, "train-workers-0-0-abcde", times);
            if superseded {
                r["superseded"] = true.into();
            }
            let t = timeline(&jobset(strategy, &[("workers", 1, 1)], vec![r]), &[], 20.0);
            let got: Vec<(&str, f64)> = t.restarts[0].phases.iter().map(|p| (p.name.as_str(), p.seconds)).collect();
            assert_eq!(got, want, "{strategy} {times:?}");
            assert_eq!(t.restarts[0].superseded, superseded);
        }
    }

    #[test]
    fn old_attempt_of_a_recreate_restart_whose_pods_are_gone_is_drawn_from_the_record() {
        // Pod 0 failed at 10; the restart was decided at 10.5, the old Jobs were gone at 12, the
        // new pods were created at 13, ran from 14 and 15, all ready at 15.25 (so pod 1, whose
        // start time says "15", the second it started in, started by 15.25).
        let js = jobset(
            "Recreate",
            &[("workers", 1, 2)],
            vec![record(
                1,
                "Recreate",
                "train-workers-0-0-old00",
                [Some(10.0), Some(10.5), Some(12.0), None, Some(15.25)],
            )],
        );
        let pods = [
            pod("train-workers-0-0-new00", ("workers", 0, 0), 13.0, Some(14.0), None, None),
            pod("train-workers-0-1-new01", ("workers", 0, 1), 13.0, Some(15.0), None, None),
        ];
        let t = timeline(&js, &pods, 20.0);
        assert_eq!(t.restarts[0].failure_row.as_deref(), Some("workers/0/0"));
        use State::*;
        assert_eq!(
            spans(&row(&t, "workers/0/0").segments),
            vec![
                (0.0, 10.0, Running, 0, true),
                (10.0, 10.5, Failed, 0, true),
                (10.5, 12.0, Terminating, 0, true),
                (12.0, 13.0, Pending, 1, true),
                (13.0, 14.0, Pending, 1, false),
                (14.0, 20.0, Running, 1, false)
            ]
        );
        assert_eq!(
            spans(&row(&t, "workers/0/1").segments),
            vec![
                (0.0, 10.5, Running, 0, true),
                (10.5, 12.0, Terminating, 0, true),
                (12.0, 13.0, Pending, 1, true),
                (13.0, 15.25, Pending, 1, false),
                (15.25, 20.0, Running, 1, false)
            ]
        );
    }

    #[test]
    fn second_recreate_restart_draws_the_middle_attempt_from_both_records() {
        let js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![
                record(
                    1,
                    "Recreate",
                    "train-workers-0-0-aaaaa",
                    [Some(10.0), Some(10.5), Some(12.0), None, Some(14.0)],
                ),
                record(2, "Recreate", "train-workers-0-0-bbbbb", [Some(20.0), Some(20.5), Some(22.0), None, None]),
            ],
        );
        let t = timeline(&js, &[], 23.0);
        use State::*;
        assert_eq!(
            spans(&row(&t, "workers/0/0").segments),
            vec![
                (0.0, 10.0, Running, 0, true),
                (10.0, 10.5, Failed, 0, true),
                (10.5, 12.0, Terminating, 0, true),
                (12.0, 14.0, Pending, 1, true),
                (14.0, 20.0, Running, 1, true),
                (20.0, 20.5, Failed, 1, true),
                (20.5, 22.0, Terminating, 1, true),
            ]
        );
    }

    #[test]
    fn a_pods_attempt_comes_from_its_restart_attempt_label_else_its_creation_second() {
        // Restart 1 decided at 10.25 s, restart 2 at 20.5 s; pods created in those same seconds
        // (creation times have whole seconds).
        let js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![
                record(
                    1,
                    "Recreate",
                    "train-workers-0-0-aaaaa",
                    [Some(10.0), Some(10.25), Some(10.5), None, Some(10.75)],
                ),
                record(
                    2,
                    "Recreate",
                    "train-workers-0-0-bbbbb",
                    [Some(20.0), Some(20.5), Some(20.75), None, Some(20.875)],
                ),
            ],
        );
        for (label, created, want) in [
            (Some("0"), 10.0, 0),
            (Some("1"), 10.0, 1),
            (Some("1"), 20.0, 1),
            (Some("2"), 20.0, 2),
            (None, 9.0, 0),
            (None, 10.0, 1),
            (None, 20.0, 2),
        ] {
            let mut p = pod("train-workers-0-0-xxxxx", ("workers", 0, 0), created, None, None, None);
            if let Some(l) = label {
                p.metadata.labels.as_mut().unwrap().insert(keys::RESTART_ATTEMPT.into(), l.into());
            }
            let t = timeline(&js, &[p], 30.0);
            let own: Vec<i32> =
                row(&t, "workers/0/0").segments.iter().filter(|s| !s.from_record).map(|s| s.attempt).collect();
            assert_eq!(own, [want], "label {label:?}, created at {created}");
        }
    }

    #[test]
    fn whole_second_pod_times_are_sharpened_by_the_record() {
        // Everything within one second, as on one machine: the pod of attempt 1 says created,
        // started and finished "at 11", the record says the old attempt was stopped at 11.25 and
        // the new one running at 11.5; so it finished in [11.5, 12), drawn to 12.
        let js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![record(
                1,
                "Recreate",
                "train-workers-0-0-aaaaa",
                [Some(11.0), Some(11.125), Some(11.25), None, Some(11.5)],
            )],
        );
        let mut p = pod("train-workers-0-0-bbbbb", ("workers", 0, 0), 11.0, Some(11.0), Some((11.0, 0)), None);
        p.metadata.labels.as_mut().unwrap().insert(keys::RESTART_ATTEMPT.into(), "1".into());
        let t = timeline(&js, &[p], 12.0);
        use State::*;
        assert_eq!(
            spans(&row(&t, "workers/0/0").segments),
            vec![
                (0.0, 11.0, Running, 0, true),
                (11.0, 11.125, Failed, 0, true),
                (11.125, 11.25, Terminating, 0, true),
                (11.25, 11.5, Pending, 1, false),
                (11.5, 12.0, Running, 1, false)
            ]
        );
    }

    #[test]
    fn old_attempt_pod_still_listed_is_drawn_from_its_own_timestamps() {
        // The restart is under way: the old pod is terminating, not yet gone.
        let js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![record(1, "Recreate", "train-workers-0-0-old00", [Some(10.0), Some(10.5), None, None, None])],
        );
        let pods = [pod("train-workers-0-0-old00", ("workers", 0, 0), 1.0, Some(2.0), Some((10.0, 1)), Some(11.0))];
        let t = timeline(&js, &pods, 12.0);
        use State::*;
        assert_eq!(
            spans(&row(&t, "workers/0/0").segments),
            vec![
                (1.0, 2.0, Pending, 0, false),
                (2.0, 10.0, Running, 0, false),
                (10.0, 11.0, Failed, 0, false),
                (11.0, 12.0, Terminating, 0, false)
            ]
        );
    }

    #[test]
    fn in_place_restart_paints_restarting_and_barrier_windows_over_the_kept_pod() {
        let js = jobset(
            "InPlaceRestart",
            &[("workers", 1, 2)],
            vec![record(
                1,
                "InPlaceRestart",
                "train-workers-0-0-aaaaa",
                [Some(10.0), Some(10.5), Some(11.5), Some(12.0), Some(13.0)],
            )],
        );
        let pods = [
            pod("train-workers-0-0-aaaaa", ("workers", 0, 0), 1.0, Some(2.0), None, None),
            pod("train-workers-0-1-bbbbb", ("workers", 0, 1), 1.0, Some(2.0), None, None),
        ];
        let t = timeline(&js, &pods, 20.0);
        use State::*;
        assert_eq!(
            spans(&row(&t, "workers/0/0").segments),
            vec![
                (1.0, 2.0, Pending, 0, false),
                (2.0, 10.0, Running, 0, false),
                (10.0, 10.5, Failed, 0, true),
                (10.5, 11.5, RestartingInPlace, 1, true),
                (11.5, 12.0, WaitingAtBarrier, 1, true),
                (12.0, 20.0, Running, 1, false)
            ]
        );
        assert_eq!(
            spans(&row(&t, "workers/0/1").segments),
            vec![
                (1.0, 2.0, Pending, 0, false),
                (2.0, 10.5, Running, 0, false),
                (10.5, 11.5, RestartingInPlace, 1, true),
                (11.5, 12.0, WaitingAtBarrier, 1, true),
                (12.0, 20.0, Running, 1, false)
            ]
        );
    }

    #[test]
    fn a_narrower_restart_draws_only_the_rows_it_restarted() {
        for (scope, target, restarted) in [
            ("JobSet", None, vec!["leader/0/0", "workers/0/0", "workers/1/0"]),
            ("ReplicatedJob", Some("workers"), vec!["workers/0/0", "workers/1/0"]),
            ("Job", Some("train-workers-1"), vec!["workers/1/0"]),
        ] {
            let mut r = record(
                1,
                "Recreate",
                "train-workers-1-0-aaaaa",
                [Some(10.0), Some(10.5), Some(12.0), None, Some(13.0)],
            );
            r["scope"] = scope.into();
            if let Some(t) = target {
                r["target"] = t.into();
            }
            let t = timeline(&jobset("Recreate", &[("leader", 1, 1), ("workers", 2, 1)], vec![r]), &[], 20.0);
            let terminated: Vec<&str> = t
                .replicated_jobs
                .iter()
                .flat_map(|r| &r.jobs)
                .flat_map(|j| &j.pods)
                .filter(|r| r.segments.iter().any(|s| s.state == State::Terminating))
                .map(|r| r.row.as_str())
                .collect();
            assert_eq!(terminated, restarted, "{scope}");
        }
    }

    #[test]
    fn a_pod_restarted_in_place_twice_ran_from_its_start_time_else_by_its_first_restart() {
        // The container's first run is no longer in its status: lastState is the second run.
        let js = jobset(
            "InPlaceRestart",
            &[("workers", 1, 1)],
            vec![
                record(
                    1,
                    "InPlaceRestart",
                    "train-workers-0-0-aaaaa",
                    [Some(10.0), Some(10.5), Some(11.0), Some(11.5), Some(12.0)],
                ),
                record(
                    2,
                    "InPlaceRestart",
                    "train-workers-0-0-aaaaa",
                    [Some(20.0), Some(20.5), Some(21.0), Some(21.5), Some(22.0)],
                ),
            ],
        );
        use State::*;
        for (start_time, running_from) in [(Some(2.0), 2.0), (None, 10.0)] {
            let mut p = pod("train-workers-0-0-aaaaa", ("workers", 0, 0), 1.0, Some(22.0), None, None);
            let status = p.status.as_mut().unwrap();
            status.start_time = start_time.map(|t| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(t)));
            let container = &mut status.container_statuses.as_mut().unwrap()[0];
            container.restart_count = 2;
            container.last_state = Some(
                serde_json::from_value(
                    serde_json::json!({"terminated": {"exitCode": 1, "startedAt": at(12.0), "finishedAt": at(20.0)}}),
                )
                .unwrap(),
            );
            let t = timeline(&js, &[p], 30.0);
            let mut want = vec![(1.0, running_from, Pending, 0, false)];
            if running_from < 10.0 {
                want.push((running_from, 10.0, Running, 0, false));
            }
            want.extend([
                (10.0, 10.5, Failed, 0, true),
                (10.5, 11.0, RestartingInPlace, 1, true),
                (11.0, 11.5, WaitingAtBarrier, 1, true),
                (11.5, 20.0, Running, 1, false),
                (20.0, 20.5, Failed, 1, true),
                (20.5, 21.0, RestartingInPlace, 2, true),
                (21.0, 21.5, WaitingAtBarrier, 2, true),
                (21.5, 30.0, Running, 2, false),
            ]);
            assert_eq!(spans(&row(&t, "workers/0/0").segments), want, "startTime {start_time:?}");
        }
    }

    #[test]
    fn aggregate_row_shows_the_least_advanced_state_of_the_jobs_pods() {
        let js = jobset("Recreate", &[("workers", 1, 2)], vec![]);
        let pods = [
            pod("train-workers-0-0-aaaaa", ("workers", 0, 0), 1.0, Some(2.0), None, None),
            pod("train-workers-0-1-bbbbb", ("workers", 0, 1), 1.0, Some(5.0), Some((8.0, 1)), None),
        ];
        let t = timeline(&js, &pods, 10.0);
        use State::*;
        assert_eq!(
            spans(&t.replicated_jobs[0].jobs[0].aggregate),
            vec![(1.0, 5.0, Pending, 0, false), (5.0, 8.0, Running, 0, false), (8.0, 10.0, Failed, 0, false)]
        );
    }

    #[test]
    fn failure_row_is_found_from_the_pod_name_when_the_pod_is_gone() {
        for (pod_name, job, want) in [
            ("train-workers-1-3-zzzzz", Some("train-workers-1"), Some("workers/1/3")),
            ("train-workers-1-3-zzzzz", None, Some("workers/1/3")),
            ("weird", Some("train-workers-1"), Some("workers/1")),
            ("weird", Some("elsewhere"), None),
        ] {
            let mut r = record(1, "Recreate", pod_name, [Some(1.0), Some(2.0), None, None, None]);
            r["trigger"]["job"] = job.map_or(serde_json::Value::Null, Into::into);
            let t = timeline(&jobset("Recreate", &[("workers", 2, 4)], vec![r]), &[], 3.0);
            assert_eq!(t.restarts[0].failure_row.as_deref(), want, "{pod_name} {job:?}");
        }
    }

    #[test]
    fn chart_spans_the_jobset_creation_to_now_or_the_latest_time_seen() {
        let js = jobset("Recreate", &[("workers", 1, 1)], vec![]);
        let pods = [pod("train-workers-0-0-aaaaa", ("workers", 0, 0), 1.0, Some(30.0), None, None)];
        let t = timeline(&js, &pods, 20.0);
        assert_eq!((t.start, t.end), (at(0.0), at(30.0)));
    }

    #[test]
    fn finished_jobsets_chart_ends_with_the_last_time_seen_not_now() {
        let mut js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![record(
                1,
                "Recreate",
                "train-workers-0-0-aaaaa",
                [Some(10.0), Some(10.5), Some(11.0), None, Some(11.5)],
            )],
        );
        let pods = [pod("train-workers-0-0-bbbbb", ("workers", 0, 0), 11.0, Some(11.0), Some((12.0, 0)), None)];
        assert_eq!(timeline(&js, &pods, 600.0).end, at(600.0), "running: until now");
        js.status.as_mut().unwrap().conditions = vec![serde_json::from_value(serde_json::json!({"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "", "lastTransitionTime": at(13.0)})).unwrap()];
        // It finished within second 13 (whole seconds): until the end of that second.
        assert_eq!(timeline(&js, &pods, 600.0).end, at(14.0), "finished: until it finished");
    }

    #[test]
    fn a_run_within_one_second_of_a_finished_jobset_is_drawn_to_that_seconds_end() {
        // On one machine: the last attempt runs from 11.5 (the record) and its pod says started
        // and finished "at 11", the JobSet Completed "at 11".
        let mut js = jobset(
            "Recreate",
            &[("workers", 1, 1)],
            vec![record(
                1,
                "Recreate",
                "train-workers-0-0-aaaaa",
                [Some(11.0), Some(11.1), Some(11.2), None, Some(11.5)],
            )],
        );
        js.status.as_mut().unwrap().conditions = vec![serde_json::from_value(serde_json::json!({"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "", "lastTransitionTime": at(11.0)})).unwrap()];
        let mut p = pod("train-workers-0-0-bbbbb", ("workers", 0, 0), 11.0, Some(11.0), Some((11.0, 0)), None);
        p.metadata.labels.as_mut().unwrap().insert(keys::RESTART_ATTEMPT.into(), "1".into());
        let t = timeline(&js, &[p], 600.0);
        let last = row(&t, "workers/0/0").segments.last().cloned().unwrap();
        assert_eq!((last.start, last.end, last.state), (at(11.5), at(12.0), State::Running));
    }

    #[test]
    fn timeline_round_trips_through_json() {
        let js = jobset(
            "Recreate",
            &[("workers", 1, 2)],
            vec![record(
                1,
                "Recreate",
                "train-workers-0-0-old00",
                [Some(10.0), Some(10.5), Some(12.0), None, Some(14.0)],
            )],
        );
        let pods = [pod("train-workers-0-0-new00", ("workers", 0, 0), 12.5, Some(13.0), None, None)];
        let t = timeline(&js, &pods, 20.0);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timeline>(&json).unwrap(), t);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["restarts"][0]["phases"][0],
            serde_json::json!({"name": "detect", "start": "2026-11-27T10:00:10Z", "end": "2026-11-27T10:00:10.5Z", "seconds": 0.5})
        );
    }
}
