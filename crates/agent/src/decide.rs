//! What the agent does on each JobSet event or worker exit: upstream's agent reconcile
//! (`cmd/in-place-restart-agent`, spec §8.3) as a pure state machine. The async shell
//! ([`crate::run`]) feeds it inputs and carries out the actions in order.

use jobset_api::jobset::keys::DISABLE_IN_PLACE_RESTART;
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

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub current_in_place_restart_attempt: Option<i32>,
    pub previous_in_place_restart_attempt: Option<i32>,
}

/// What the agent reads from its JobSet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// In-place restart is off for this JobSet: annotation `disable-in-place-restart`, no
    /// failurePolicy, or a restartStrategy other than `InPlaceRestart`.
    pub bypass: bool,
    /// `status.currentInPlaceRestartAttempt` (the design doc's `syncedEpoch`).
    pub current: Option<i32>,
    /// `status.previousInPlaceRestartAttempt` (the design doc's `deprecatedEpoch`).
    pub previous: Option<i32>,
}

impl Observed {
    pub fn of(js: &JobSetView) -> Observed {
        let disabled = js.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(DISABLE_IN_PLACE_RESTART));
        let strategy = js.spec.failure_policy.as_ref().map(|f| f.restart_strategy);
        let bypass = disabled || strategy != Some(RestartStrategy::InPlaceRestart);
        let status = js.status.as_ref();
        Observed {
            bypass,
            current: status.and_then(|s| s.current_in_place_restart_attempt),
            previous: status.and_then(|s| s.previous_in_place_restart_attempt),
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

/// The attempt a (re)starting pod announces: the first one, or one past the synced attempt,
/// which tells the controller a group restart is needed.
fn next_attempt(current: Option<i32>) -> i32 {
    current.map_or(0, |c| c.saturating_add(1))
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
                None => {
                    let n = next_attempt(o.current);
                    out.push(Action::Annotate(n));
                    *s.attempt.insert(n)
                }
            };
            // 3. Deprecated: restart in place.
            if o.previous.is_some_and(|prev| own <= prev) {
                if s.worker == WorkerState::Running {
                    out.push(Action::KillWorker);
                    s.worker = WorkerState::Stopped;
                }
                if p.keep_watch {
                    // What a restarted agent would do in step 2, without leaving the process.
                    s.barrier_active = true;
                    let n = next_attempt(o.current);
                    if n != own {
                        out.push(Action::Annotate(n));
                        s.attempt = Some(n);
                    }
                } else {
                    out.push(Action::Exit(p.exit_code));
                }
                return (s, out);
            }
            // 4. Every pod is at this attempt: go.
            if s.barrier_active && o.current == Some(own) {
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
            let n = next_attempt(s.seen.and_then(|o| o.current));
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

    fn seen(current: Option<i32>, previous: Option<i32>) -> Input {
        Input::JobSet(Observed { bypass: false, current, previous })
    }

    fn bypassed() -> Input {
        Input::JobSet(Observed { bypass: true, current: None, previous: None })
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
             vec![Input::JobSet(Observed { bypass: true, current: Some(1), previous: Some(0) })],
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
            assert_eq!(Observed::of(&js(v)).bypass, bypass, "{name}");
        }
        let o = Observed::of(&js(serde_json::json!({
            "spec": {"failurePolicy": in_place},
            "status": {"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 1}
        })));
        assert_eq!(o, Observed { bypass: false, current: Some(2), previous: Some(1) });
    }
}
