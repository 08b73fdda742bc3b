//! What the agent does on each JobSet event or worker exit: upstream's agent reconcile
//! (`cmd/in-place-restart-agent`, spec §8.3) as a pure state machine. The async shell
//! ([`crate::run`]) feeds it inputs and carries out the actions in order.

use std::collections::BTreeMap;

use jobset_api::jobset::keys::{DISABLE_IN_PLACE_RESTART, JOB_INDEX, REPLICATED_JOB_NAME};
use jobset_api::jobset::{JobSet, RestartStrategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// The part of its JobSet the agent reads. Its watch parses only this: every agent of the JobSet
/// parses each change of it, and the pod templates are most of a JobSet's bytes.
#[derive(kube::Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "JobSet")]
pub struct JobSetView {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecView,
    pub status: Option<StatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecView {
    pub failure_policy: Option<FailurePolicyView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyView {
    #[serde(default)]
    pub restart_strategy: RestartStrategy,
}

/// The attempt fields of the status: upstream's JobSet-wide pair and the scoped entries of the
/// extension (docs/in-place-restart.md). Every other status field is ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub current_in_place_restart_attempt: Option<i32>,
    pub previous_in_place_restart_attempt: Option<i32>,
    #[serde(default)]
    pub replicated_jobs_status: Vec<ReplicatedJobView>,
}

/// `status.replicatedJobsStatus[]`: the attempts of a replicated job that restarts in place alone,
/// and those of its Jobs that restart in place alone.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobView {
    #[serde(default)]
    pub name: String,
    pub current_in_place_restart_attempt: Option<i32>,
    pub previous_in_place_restart_attempt: Option<i32>,
    #[serde(default)]
    pub in_place_restart_jobs: Vec<JobView>,
}

/// `status.replicatedJobsStatus[].inPlaceRestartJobs[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    /// Optional here so that an entry without one covers no pod rather than Job 0.
    pub job_index: Option<i32>,
    pub current_in_place_restart_attempt: Option<i32>,
    pub previous_in_place_restart_attempt: Option<i32>,
}

impl StatusView {
    /// Whether any replicated job or Job entry carries an attempt: only then does the pod's scope
    /// matter, so only then does an agent that was not told its scope read its pod.
    pub fn has_scoped_entries(&self) -> bool {
        self.replicated_jobs_status.iter().any(|r| {
            r.current_in_place_restart_attempt.is_some()
                || r.previous_in_place_restart_attempt.is_some()
                || !r.in_place_restart_jobs.is_empty()
        })
    }

    /// Every attempt number of the status, of every scope.
    fn attempts(&self) -> impl Iterator<Item = i32> + '_ {
        let rjobs = self.replicated_jobs_status.iter().flat_map(|r| {
            let jobs = r.in_place_restart_jobs.iter();
            [r.current_in_place_restart_attempt, r.previous_in_place_restart_attempt]
                .into_iter()
                .chain(jobs.flat_map(|j| [j.current_in_place_restart_attempt, j.previous_in_place_restart_attempt]))
        });
        [self.current_in_place_restart_attempt, self.previous_in_place_restart_attempt]
            .into_iter()
            .chain(rjobs)
            .flatten()
    }

    /// The (current, previous) pairs of the entries that cover a pod of `scope`: the JobSet's, its
    /// replicated job's and its Job's. Without a scope, the JobSet's alone.
    fn covering(&self, scope: Option<&Scope>) -> [(Option<i32>, Option<i32>); 3] {
        let rjob = scope.and_then(|s| self.replicated_jobs_status.iter().find(|r| r.name == s.replicated_job));
        let job = rjob
            .zip(scope)
            .and_then(|(r, s)| r.in_place_restart_jobs.iter().find(|j| j.job_index == Some(s.job_index)));
        [
            (self.current_in_place_restart_attempt, self.previous_in_place_restart_attempt),
            rjob.map_or((None, None), |r| (r.current_in_place_restart_attempt, r.previous_in_place_restart_attempt)),
            job.map_or((None, None), |j| (j.current_in_place_restart_attempt, j.previous_in_place_restart_attempt)),
        ]
    }
}

/// The pod's place in its JobSet, which selects the status entries that cover it: its replicated
/// job (label `jobset.sigs.k8s.io/replicatedjob-name`) and its Job's index within it (label
/// `jobset.sigs.k8s.io/job-index`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub replicated_job: String,
    pub job_index: i32,
}

impl Scope {
    /// The scope the JobSet controller's labels give a pod; `None` without both labels or with a
    /// job index that is not a non-negative integer.
    pub fn of_labels(labels: &BTreeMap<String, String>) -> Option<Scope> {
        let replicated_job = labels.get(REPLICATED_JOB_NAME).filter(|n| !n.is_empty())?;
        let job_index = labels.get(JOB_INDEX)?.parse::<i32>().ok().filter(|i| *i >= 0)?;
        Some(Scope { replicated_job: replicated_job.clone(), job_index })
    }
}

/// What the agent reads from its JobSet, for its own pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// In-place restart is off for this JobSet: annotation `disable-in-place-restart`, no
    /// failurePolicy, or a restartStrategy other than `InPlaceRestart`.
    pub bypass: bool,
    /// The attempt a pod without one announces: 0 when the status holds no attempt number, else one
    /// past the highest of all (every scope's current and previous). Without scoped entries that
    /// is upstream's `currentInPlaceRestartAttempt + 1`, as the controller never deprecates an
    /// attempt above the current one.
    pub announce: i32,
    /// The highest `previousInPlaceRestartAttempt` of the covering entries (the design doc's
    /// `deprecatedEpoch`): a pod at or below it restarts.
    pub deprecated: Option<i32>,
    /// The `currentInPlaceRestartAttempt` of each covering entry (the design doc's `syncedEpoch`):
    /// a pod at any of them lifts its barrier.
    pub synced: [Option<i32>; 3],
}

impl Observed {
    /// `js` as seen by a pod of `scope`. The covering entries are the JobSet's, the pod's
    /// replicated job's and its Job's. With an unknown scope (`None`) only the JobSet's covers,
    /// which is safe while the agent learns its scope: a scoped deprecation it misses leaves its
    /// pod running and a scoped sync it misses keeps its barrier up, until the scope is known; it
    /// never lifts a barrier, nor restarts a pod, that it should not.
    pub fn of(js: &JobSetView, scope: Option<&Scope>) -> Observed {
        let disabled = js.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(DISABLE_IN_PLACE_RESTART));
        let strategy = js.spec.failure_policy.as_ref().map(|f| f.restart_strategy);
        let bypass = disabled || strategy != Some(RestartStrategy::InPlaceRestart);
        let Some(status) = js.status.as_ref() else { return Observed { bypass, ..Observed::default() } };
        let covering = status.covering(scope);
        Observed {
            bypass,
            announce: status.attempts().max().map_or(0, |max| max.saturating_add(1)),
            deprecated: covering.iter().filter_map(|(_, previous)| *previous).max(),
            synced: covering.map(|(current, _)| current),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    /// Sidecar mode: the pod's own containers are the workers.
    Absent,
    Stopped,
    Running,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// This pod's attempt (annotation `in-place-restart-attempt`), once chosen.
    pub attempt: Option<i32>,
    pub barrier_active: bool,
    pub worker: WorkerState,
    /// The JobSet as last observed (a worker failure in keep-watch mode announces from it).
    pub seen: Option<Observed>,
}

impl State {
    pub fn initial(has_worker: bool) -> State {
        let worker = if has_worker { WorkerState::Stopped } else { WorkerState::Absent };
        State { attempt: None, barrier_active: true, worker, seen: None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The exit code that makes the kubelet restart the pod (or container) in place.
    pub exit_code: i32,
    /// Extension `KEEP_WATCH_ACROSS_RESTARTS` (main-container mode).
    pub keep_watch: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    JobSet(Observed),
    WorkerExited(i32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Server-side apply the pod annotation `in-place-restart-attempt=<n>`.
    Annotate(i32),
    /// Let the pod's main containers start (answer the startup probe).
    LiftBarrier,
    StartWorker,
    /// Stop the worker (SIGTERM, SIGKILL after the grace).
    KillWorker,
    /// End the agent with this code; nothing after it runs.
    Exit(i32),
}

pub fn step(mut s: State, input: Input, p: &Policy) -> (State, Vec<Action>) {
    let mut out = Vec::new();
    match input {
        Input::JobSet(o) => {
            s.seen = Some(o);
            // 1. In-place restart off: just let the workload run.
            if o.bypass {
                if s.barrier_active {
                    lift(&mut s, &mut out);
                }
                return (s, out);
            }
            // 2. Announce this pod's attempt once.
            let own = match s.attempt {
                Some(a) => a,
                // The first attempt, or one past every attempt of the status, which tells the
                // controller a restart of the pod's scope is needed.
                None => {
                    let n = o.announce;
                    out.push(Action::Annotate(n));
                    *s.attempt.insert(n)
                }
            };
            // 3. Deprecated by a covering entry: restart in place.
            if o.deprecated.is_some_and(|prev| own <= prev) {
                if s.worker == WorkerState::Running {
                    out.push(Action::KillWorker);
                    s.worker = WorkerState::Stopped;
                }
                if p.keep_watch {
                    // What a restarted agent would do in step 2, without leaving the process.
                    s.barrier_active = true;
                    let n = o.announce;
                    if n != own {
                        out.push(Action::Annotate(n));
                        s.attempt = Some(n);
                    }
                } else {
                    out.push(Action::Exit(p.exit_code));
                }
                return (s, out);
            }
            // 4. Every pod of a covering scope is at this attempt: go.
            if s.barrier_active && o.synced.contains(&Some(own)) {
                lift(&mut s, &mut out);
            }
        }
        Input::WorkerExited(code) => {
            s.worker = WorkerState::Stopped;
            let bypass = s.seen.is_some_and(|o| o.bypass);
            if !p.keep_watch || code == 0 || bypass {
                out.push(Action::Exit(code));
                return (s, out);
            }
            // Keep-watch: the failure starts a group restart, as a restarted agent's announcement would.
            s.barrier_active = true;
            let n = s.seen.map_or(0, |o| o.announce);
            if s.attempt != Some(n) {
                out.push(Action::Annotate(n));
                s.attempt = Some(n);
            }
        }
    }
    (s, out)
}

fn lift(s: &mut State, out: &mut Vec<Action>) {
    s.barrier_active = false;
    out.push(Action::LiftBarrier);
    if s.worker == WorkerState::Stopped {
        out.push(Action::StartWorker);
        s.worker = WorkerState::Running;
    }
}

#[cfg(test)]
mod tests {
    use super::Action::*;
    use super::*;

    const SIDECAR: Policy = Policy { exit_code: 42, keep_watch: false };
    const KEEP_WATCH: Policy = Policy { exit_code: 42, keep_watch: true };

    fn jobset(status: serde_json::Value) -> JobSetView {
        serde_json::from_value(serde_json::json!({
            "spec": {"failurePolicy": {"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}},
            "status": status,
        }))
        .unwrap()
    }

    /// Upstream's status: the JobSet-wide pair only, seen by a pod whose scope is unknown.
    fn observed(current: Option<i32>, previous: Option<i32>) -> Observed {
        let status = serde_json::json!({
            "currentInPlaceRestartAttempt": current, "previousInPlaceRestartAttempt": previous,
        });
        Observed::of(&jobset(status), None)
    }

    fn seen(current: Option<i32>, previous: Option<i32>) -> Input {
        Input::JobSet(observed(current, previous))
    }

    fn bypassed() -> Input {
        Input::JobSet(Observed { bypass: true, ..Observed::default() })
    }

    fn at(attempt: Option<i32>, barrier_active: bool, worker: WorkerState) -> State {
        State { attempt, barrier_active, worker, seen: None }
    }

    /// Runs `inputs` in order from `start`; returns the actions of each step and the final state.
    fn run(start: State, inputs: &[Input], p: &Policy) -> (Vec<Vec<Action>>, State) {
        let mut s = start;
        let mut all = Vec::new();
        for i in inputs {
            let (next, actions) = step(s, *i, p);
            s = next;
            all.push(actions);
        }
        (all, s)
    }

    /// Name, start state, policy, inputs in order, the actions expected after each.
    type Case = (&'static str, State, Policy, Vec<Input>, Vec<Vec<Action>>);

    #[test]
    fn agent_reactions_to_jobset_status_changes() {
        use WorkerState::*;
        let fresh = State::initial(false);
        let fresh_main = State::initial(true);
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("fresh start with no status announces attempt 0 and holds the barrier",
             fresh, SIDECAR, vec![seen(None, None)], vec![vec![Annotate(0)]]),
            ("fresh start after a group restart announces current+1 and holds the barrier",
             fresh, SIDECAR, vec![seen(Some(3), None)], vec![vec![Annotate(4)]]),
            ("fresh start while the previous attempt is deprecated is not itself deprecated",
             fresh, SIDECAR, vec![seen(Some(3), Some(3))], vec![vec![Annotate(4)]]),
            ("current catching up lifts the barrier once, repeated events do nothing",
             fresh, SIDECAR, vec![seen(None, None), seen(Some(0), None), seen(Some(0), None)],
             vec![vec![Annotate(0)], vec![LiftBarrier], vec![]]),
            ("a status older than the own attempt keeps the barrier",
             at(Some(4), true, Absent), SIDECAR, vec![seen(Some(3), Some(3))], vec![vec![]]),
            ("deprecated attempt exits with the configured code",
             at(Some(0), false, Absent), SIDECAR, vec![seen(Some(0), Some(0))], vec![vec![Exit(42)]]),
            ("deprecated attempt exits even while the barrier is still up",
             at(Some(2), true, Absent), SIDECAR, vec![seen(Some(1), Some(3))], vec![vec![Exit(42)]]),
            ("previous below the own attempt does nothing",
             at(Some(4), false, Absent), SIDECAR, vec![seen(Some(4), Some(3))], vec![vec![]]),
            ("bypass annotation lifts without announcing an attempt",
             fresh, SIDECAR, vec![bypassed(), bypassed()], vec![vec![LiftBarrier], vec![]]),
            ("bypass wins over a deprecated attempt",
             at(Some(0), true, Absent), SIDECAR,
             vec![Input::JobSet(Observed { bypass: true, ..observed(Some(1), Some(0)) })],
             vec![vec![LiftBarrier]]),
            ("main mode: lifting starts the worker",
             fresh_main, SIDECAR, vec![seen(None, None), seen(Some(0), None)],
             vec![vec![Annotate(0)], vec![LiftBarrier, StartWorker]]),
            ("main mode: deprecation stops the worker before exiting",
             at(Some(0), false, Running), SIDECAR, vec![seen(Some(0), Some(0))],
             vec![vec![KillWorker, Exit(42)]]),
            ("main mode: the worker's exit code is the agent's",
             at(Some(0), false, Running), SIDECAR, vec![Input::WorkerExited(3)], vec![vec![Exit(3)]]),
            ("keep-watch deprecation kills the worker, announces current+1 and holds the barrier again",
             at(Some(0), false, Running), KEEP_WATCH, vec![seen(Some(0), Some(0)), seen(Some(0), Some(0)), seen(Some(1), Some(0))],
             vec![vec![KillWorker, Annotate(1)], vec![], vec![LiftBarrier, StartWorker]]),
            ("keep-watch worker failure announces current+1 and waits for the others",
             at(Some(2), false, Running), KEEP_WATCH, vec![seen(Some(2), Some(1)), Input::WorkerExited(1), seen(Some(2), Some(2)), seen(Some(3), Some(2))],
             vec![vec![], vec![Annotate(3)], vec![], vec![LiftBarrier, StartWorker]]),
            ("keep-watch worker success ends the agent with 0",
             at(Some(0), false, Running), KEEP_WATCH, vec![seen(Some(0), None), Input::WorkerExited(0)],
             vec![vec![], vec![Exit(0)]]),
            ("keep-watch worker failure with in-place restart off ends the agent with its code",
             fresh_main, KEEP_WATCH, vec![bypassed(), Input::WorkerExited(5)],
             vec![vec![LiftBarrier, StartWorker], vec![Exit(5)]]),
        ];
        for (name, start, policy, inputs, want) in cases {
            let (got, _) = run(start, &inputs, &policy);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn keep_watch_state_after_deprecation_is_a_fresh_announcement() {
        let (_, s) = run(at(Some(0), false, WorkerState::Running), &[seen(Some(0), Some(0))], &KEEP_WATCH);
        assert_eq!((s.attempt, s.barrier_active, s.worker), (Some(1), true, WorkerState::Stopped));
    }

    #[test]
    fn observed_reads_bypass_conditions_and_status() {
        let js = |v: serde_json::Value| -> JobSetView { serde_json::from_value(v).unwrap() };
        let in_place = serde_json::json!({"maxRestarts": 3, "restartStrategy": "InPlaceRestart"});
        let cases = [
            ("InPlaceRestart", serde_json::json!({"spec": {"failurePolicy": in_place}}), false),
            ("no failurePolicy", serde_json::json!({"spec": {}}), true),
            ("Recreate", serde_json::json!({"spec": {"failurePolicy": {"restartStrategy": "Recreate"}}}), true),
            (
                "disable annotation, whatever its value",
                serde_json::json!({"metadata": {"annotations": {DISABLE_IN_PLACE_RESTART: "false"}},
                                   "spec": {"failurePolicy": in_place}}),
                true,
            ),
        ];
        for (name, v, bypass) in cases {
            assert_eq!(Observed::of(&js(v), None).bypass, bypass, "{name}");
        }
        let o = Observed::of(
            &js(serde_json::json!({
                "spec": {"failurePolicy": in_place},
                "status": {"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 1}
            })),
            None,
        );
        assert_eq!(o, Observed { bypass: false, announce: 3, deprecated: Some(1), synced: [Some(2), None, None] });
    }

    fn scope(replicated_job: &str, job_index: i32) -> Option<Scope> {
        Some(Scope { replicated_job: replicated_job.into(), job_index })
    }

    /// The status as seen by a pod of `scope`.
    fn seen_by(scope: &Option<Scope>, status: &serde_json::Value) -> Input {
        Input::JobSet(Observed::of(&jobset(status.clone()), scope.as_ref()))
    }

    /// Name, the pod's scope, start state, policy, statuses (or worker exits) in order, the actions
    /// expected after each.
    type ScopedCase =
        (&'static str, Option<Scope>, State, Policy, Vec<Result<serde_json::Value, i32>>, Vec<Vec<Action>>);

    #[test]
    fn agent_follows_the_entries_of_its_scope() {
        use WorkerState::*;
        use serde_json::json;
        let fresh = State::initial(false);
        // driver-workers: the JobSet synced at 0, then the workers restart in place alone.
        let workers_deprecated = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "driver", "ready": 1}, {"name": "workers", "ready": 2, "previousInPlaceRestartAttempt": 0}]});
        let workers_synced = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}]});
        let job1_deprecated = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "inPlaceRestartJobs": [{"jobIndex": 1, "previousInPlaceRestartAttempt": 0}]}]});
        let job1_synced = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "inPlaceRestartJobs": [
                {"jobIndex": 1, "currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}]}]});
        // After the workers' restart to 1, the whole JobSet restarts.
        let jobset_deprecated = json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 1,
            "replicatedJobsStatus": [{"name": "workers", "currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}]});
        let workers_above_jobset = json!({"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 0,
            "replicatedJobsStatus": [{"name": "workers", "previousInPlaceRestartAttempt": 2}]});
        let everywhere = json!({"currentInPlaceRestartAttempt": 0, "replicatedJobsStatus": [
            {"name": "workers", "currentInPlaceRestartAttempt": 3, "previousInPlaceRestartAttempt": 2},
            {"name": "other", "inPlaceRestartJobs": [{"jobIndex": 0, "currentInPlaceRestartAttempt": 5}]}]});
        #[rustfmt::skip]
        let cases: Vec<ScopedCase> = vec![
            ("a driver is untouched by a deprecation of the workers",
             scope("driver", 0), at(Some(0), false, Absent), SIDECAR, vec![Ok(workers_deprecated.clone())], vec![vec![]]),
            ("a worker is deprecated by its replicated job's entry",
             scope("workers", 1), at(Some(0), false, Absent), SIDECAR, vec![Ok(workers_deprecated.clone())], vec![vec![Exit(42)]]),
            ("a restarted worker announces one past the highest attempt and holds the barrier",
             scope("workers", 1), fresh, SIDECAR, vec![Ok(workers_deprecated.clone())], vec![vec![Annotate(1)]]),
            ("a worker is synced by its replicated job's current",
             scope("workers", 1), at(Some(1), true, Absent), SIDECAR, vec![Ok(workers_synced.clone())], vec![vec![LiftBarrier]]),
            ("a driver is not synced by the workers' current",
             scope("driver", 0), at(Some(1), true, Absent), SIDECAR, vec![Ok(workers_synced.clone())], vec![vec![]]),
            ("a Job's entry deprecates the pods of that Job",
             scope("workers", 1), at(Some(0), false, Absent), SIDECAR, vec![Ok(job1_deprecated.clone())], vec![vec![Exit(42)]]),
            ("a Job's entry leaves the other Jobs of its replicated job alone",
             scope("workers", 0), at(Some(0), false, Absent), SIDECAR, vec![Ok(job1_deprecated.clone())], vec![vec![]]),
            ("a Job's entry leaves the Job of the same index of another replicated job alone",
             scope("driver", 1), at(Some(0), false, Absent), SIDECAR, vec![Ok(job1_deprecated.clone())], vec![vec![]]),
            ("a Job's current lifts the barrier of that Job's pods only",
             scope("workers", 1), at(Some(1), true, Absent), SIDECAR, vec![Ok(job1_synced.clone())], vec![vec![LiftBarrier]]),
            ("a Job's current does not lift the barrier of another Job's pods",
             scope("workers", 0), at(Some(1), true, Absent), SIDECAR, vec![Ok(job1_synced.clone())], vec![vec![]]),
            ("a JobSet-wide deprecation covers the driver",
             scope("driver", 0), at(Some(0), false, Absent), SIDECAR, vec![Ok(jobset_deprecated.clone())], vec![vec![Exit(42)]]),
            ("a JobSet-wide deprecation covers the workers past their own restart",
             scope("workers", 0), at(Some(1), false, Absent), SIDECAR, vec![Ok(jobset_deprecated.clone())], vec![vec![Exit(42)]]),
            ("the highest previous of the covering entries deprecates",
             scope("workers", 0), at(Some(2), false, Absent), SIDECAR, vec![Ok(workers_above_jobset.clone())], vec![vec![Exit(42)]]),
            ("a higher previous of another scope does not",
             scope("driver", 0), at(Some(2), false, Absent), SIDECAR, vec![Ok(workers_above_jobset.clone())], vec![vec![]]),
            ("a fresh pod announces one past every attempt of every scope",
             scope("driver", 0), fresh, SIDECAR, vec![Ok(everywhere.clone())], vec![vec![Annotate(6)]]),
            ("an unknown scope is covered by the JobSet's entry alone: no scoped deprecation",
             None, at(Some(0), false, Absent), SIDECAR, vec![Ok(workers_deprecated.clone())], vec![vec![]]),
            ("an unknown scope is covered by the JobSet's entry alone: no scoped sync",
             None, at(Some(1), true, Absent), SIDECAR, vec![Ok(workers_synced.clone())], vec![vec![]]),
            ("an unknown scope still announces one past the highest attempt",
             None, fresh, SIDECAR, vec![Ok(everywhere.clone())], vec![vec![Annotate(6)]]),
            ("keep-watch: a scoped deprecation stops the worker and announces one past the highest attempt",
             scope("workers", 1), at(Some(0), false, Running), KEEP_WATCH,
             vec![Ok(workers_deprecated.clone()), Ok(workers_synced.clone())],
             vec![vec![KillWorker, Annotate(1)], vec![LiftBarrier, StartWorker]]),
            ("keep-watch: a worker failure announces one past the highest attempt",
             scope("workers", 1), at(Some(1), false, Running), KEEP_WATCH, vec![Ok(workers_synced.clone()), Err(1)],
             vec![vec![], vec![Annotate(2)]]),
            ("keep-watch: a driver is untouched by a deprecation of the workers",
             scope("driver", 0), at(Some(0), false, Running), KEEP_WATCH, vec![Ok(workers_deprecated.clone())], vec![vec![]]),
        ];
        for (name, scope, start, policy, events, want) in cases {
            let inputs: Vec<Input> = events
                .iter()
                .map(|e| match e {
                    Ok(status) => seen_by(&scope, status),
                    Err(code) => Input::WorkerExited(*code),
                })
                .collect();
            let (got, _) = run(start, &inputs, &policy);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn observed_computes_announce_deprecated_and_synced_over_the_covering_entries() {
        use serde_json::json;
        let status = json!({
            "currentInPlaceRestartAttempt": 0, "restarts": 1, "inPlaceRestarts": 2,
            "replicatedJobsStatus": [
                {"name": "driver", "ready": 1, "jobRestarts": [0]},
                {"name": "workers", "currentInPlaceRestartAttempt": 3, "previousInPlaceRestartAttempt": 2,
                 "inPlaceRestarts": 1,
                 "inPlaceRestartJobs": [{"jobIndex": 0, "currentInPlaceRestartAttempt": 5, "previousInPlaceRestartAttempt": 4,
                                         "restarts": 1}]},
                {"name": "other", "previousInPlaceRestartAttempt": 7},
            ],
        });
        let o = |announce, deprecated, synced| Observed { bypass: false, announce, deprecated, synced };
        let cases = [
            (
                "a Job's pod: the JobSet's, its replicated job's and its Job's entries",
                scope("workers", 0),
                o(8, Some(4), [Some(0), Some(3), Some(5)]),
            ),
            (
                "another Job of that replicated job: no Job entry",
                scope("workers", 1),
                o(8, Some(2), [Some(0), Some(3), None]),
            ),
            (
                "a replicated job without attempts: the JobSet's entry",
                scope("driver", 0),
                o(8, None, [Some(0), None, None]),
            ),
            ("a replicated job absent from the status", scope("nowhere", 0), o(8, None, [Some(0), None, None])),
            ("an unknown scope", None, o(8, None, [Some(0), None, None])),
        ];
        for (name, scope, want) in cases {
            assert_eq!(Observed::of(&jobset(status.clone()), scope.as_ref()), want, "{name}");
        }
        let no_attempts = json!({"replicatedJobsStatus": [{"name": "workers", "ready": 2}]});
        assert_eq!(
            Observed::of(&jobset(no_attempts), scope("workers", 0).as_ref()),
            Observed::default(),
            "no attempt: 0"
        );
        let no_index = json!({"replicatedJobsStatus": [{"name": "workers", "inPlaceRestartJobs": [{"previousInPlaceRestartAttempt": 0}]}]});
        assert_eq!(
            Observed::of(&jobset(no_index), scope("workers", 0).as_ref()).deprecated,
            None,
            "an entry without a jobIndex covers no Job"
        );
    }

    #[test]
    fn scoped_entries_are_those_with_an_attempt() {
        use serde_json::json;
        let cases = [
            ("no status fields", json!({}), false),
            (
                "the JobSet's pair only",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                false,
            ),
            (
                "replicated job counts only",
                json!({"replicatedJobsStatus": [{"name": "w", "ready": 1, "restarts": 2}]}),
                false,
            ),
            (
                "a replicated job's current",
                json!({"replicatedJobsStatus": [{"name": "w", "currentInPlaceRestartAttempt": 0}]}),
                true,
            ),
            (
                "a replicated job's previous",
                json!({"replicatedJobsStatus": [{"name": "w", "previousInPlaceRestartAttempt": 0}]}),
                true,
            ),
            (
                "a Job entry",
                json!({"replicatedJobsStatus": [{"name": "w", "inPlaceRestartJobs": [{"jobIndex": 0}]}]}),
                true,
            ),
        ];
        for (name, status, want) in cases {
            let status: StatusView = serde_json::from_value(status).unwrap();
            assert_eq!(status.has_scoped_entries(), want, "{name}");
        }
    }

    #[test]
    fn scope_from_the_pod_labels_needs_both_and_a_valid_index() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let cases = [
            ("both labels", labels(&[(REPLICATED_JOB_NAME, "workers"), (JOB_INDEX, "3")]), scope("workers", 3)),
            ("no job index", labels(&[(REPLICATED_JOB_NAME, "workers")]), None),
            ("no replicated job", labels(&[(JOB_INDEX, "0")]), None),
            ("an empty replicated job", labels(&[(REPLICATED_JOB_NAME, ""), (JOB_INDEX, "0")]), None),
            ("a negative index", labels(&[(REPLICATED_JOB_NAME, "workers"), (JOB_INDEX, "-1")]), None),
            ("an index that is no integer", labels(&[(REPLICATED_JOB_NAME, "workers"), (JOB_INDEX, "x")]), None),
        ];
        for (name, labels, want) in cases {
            assert_eq!(Scope::of_labels(&labels), want, "{name}");
        }
    }
}
