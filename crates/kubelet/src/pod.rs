//! The per-pod state machine (krustlet style): explicit states, and transitions as a pure
//! function [`step`]`(machine, event) -> (machine, effects)`. The agent's pod worker feeds it
//! events (the pod was admitted, a container started or exited, a timer fired, the pod is being
//! deleted) and carries out the effects (start or stop a container, write the status, confirm the
//! deletion). Nothing here does I/O or reads the clock: every event carries its time.
//!
//! Semantics follow kubelet (job-semantics.md §4):
//! - init containers run first, in order; a sidecar (init container with `restartPolicy: Always`)
//!   counts as done once Started (its postStart hook completed and its startup probe, if any,
//!   succeeded: the KEP-753 barrier) and keeps running beside the regular containers;
//! - probes (run by [`crate::probe`], reported as [`Event::Probe`]): a container with a startup
//!   probe is not Started until it succeeds; a container is ready when Started, its readiness
//!   probe (if any) last succeeded and the runtime says so; a startup or liveness failure kills
//!   the run ([`Effect::Kill`], with the probe's `terminationGracePeriodSeconds`), which is then
//!   restarted (or not) like any exit;
//! - a container that exits is restarted in place (`restartCount`+1) when its container-level
//!   `restartPolicy`/`restartPolicyRules` or else the pod's `restartPolicy` says so (§4.2
//!   `ContainerShouldRestart`); init containers are only restarted after a failure; the first
//!   restart is immediate, later ones wait a CrashLoopBackOff delay doubling from the base up to
//!   the cap, reset once the previous restart is longer ago than [`Backoff::reset`];
//! - `RestartAllContainers` (§4.3, alias `RestartPod`): condition `AllContainersRestarting`
//!   True, every container killed at once ([`Effect::KillNow`]), condition False, then the whole
//!   pod starts over in place (every container that ran counts a restart; the back-off of the
//!   container that triggered it delays repeated pod restarts); phase Pending meanwhile;
//! - phase (§4.1): Pending until the regular containers start; Running; once every regular
//!   container has terminated for good, Succeeded if all exited 0, else Failed; a non-restartable
//!   init failure fails the pod; sidecars are then stopped, after the other containers, one by
//!   one in reverse order (§4.4);
//! - a pod being deleted is never restarted: running containers are stopped (preStop hooks, then
//!   a kill, by the worker; a simulated kill exits 143), the pod ends Failed unless it had
//!   already finished, its final status is written, then the deletion is confirmed;
//! - `activeDeadlineSeconds`: stopped and Failed with reason `DeadlineExceeded`;
//! - a pod the agent finds unfinished after a restart with containers that had started is
//!   Failed ([`PodMachine::after_agent_restart`]);
//! - a run the runtime could not create for a reason of the host's (a full disk, too many open
//!   files: [`start_error_is_transient`]) did not happen: the container is Waiting
//!   `CreateContainerError` and tried again after [`Backoff::create_retry`], its `restartCount`
//!   unchanged, whatever the restart policy (kubelet counts only the containers it created); so
//!   is a container whose config could not be built (a missing ConfigMap or Secret, or key,
//!   `runAsNonRoot` violated: [`StartFailure::Config`]), Waiting `CreateContainerConfigError`
//!   with kubelet's message; a start the pod itself makes fail (a command not found) is a run
//!   that ended at once, exit code 128, reason `StartError`;
//! - the pod's volumes are mounted before any container starts (kubelet's volume manager): while
//!   a configMap, secret or projected volume lacks its ConfigMap or Secret (or key), the worker
//!   reports [`Event::MountFailed`] instead of [`Event::Admit`]; the pod stays Pending, every
//!   container Waiting `ContainerCreating` (`PodInitializing` with init containers),
//!   `PodReadyToStartContainers` False and no pod IP (no sandbox yet), and the mount is tried
//!   again ([`Effect::Mount`]) after [`Backoff::create_retry`]; `activeDeadlineSeconds` counts
//!   from the first try.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::runtime::{ContainerKind, ErrorKind};

/// `spec.restartPolicy` of a pod or a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub fn parse(s: &str) -> Option<RestartPolicy> {
        match s {
            "Always" => Some(RestartPolicy::Always),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Never" => Some(RestartPolicy::Never),
            _ => None,
        }
    }

    fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// The action of a `restartPolicyRules` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// Restart this container in place.
    Restart,
    /// `RestartAllContainers` (alias `RestartPod`): restart the whole pod in place (§4.3).
    RestartAllContainers,
    /// An action this agent does not know: falls through to the container policy.
    Other,
}

impl RuleAction {
    pub fn parse(s: &str) -> RuleAction {
        match s {
            "Restart" => RuleAction::Restart,
            "RestartAllContainers" | "RestartPod" => RuleAction::RestartAllContainers,
            _ => RuleAction::Other,
        }
    }
}

/// One entry of a container's `restartPolicyRules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartRule {
    pub action: RuleAction,
    /// `Some(true)`: `In`; `Some(false)`: `NotIn`; `None`: an operator this agent does not know (skipped).
    pub operator_in: Option<bool>,
    pub values: Vec<i32>,
}

impl RestartRule {
    fn matches(&self, code: i32) -> bool {
        match self.operator_in {
            Some(is_in) => self.values.contains(&code) == is_in,
            None => false,
        }
    }
}

/// What the state machine needs to know of a container's probes and hooks (the prober runs them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeFlags {
    /// A `startupProbe`: the container is not Started until it succeeds.
    pub startup: bool,
    /// A `readinessProbe`: the container is not ready until it succeeds.
    pub readiness: bool,
    /// A `postStart` hook: the container is not Started until it completes.
    pub post_start: bool,
    /// Probe-level `terminationGracePeriodSeconds` of the startup and liveness probes.
    pub startup_grace: Option<Duration>,
    pub liveness_grace: Option<Duration>,
}

impl ProbeFlags {
    pub fn of(c: &Container) -> ProbeFlags {
        let grace = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
            p.and_then(|p| p.termination_grace_period_seconds).map(|s| Duration::from_secs(s.max(0) as u64))
        };
        ProbeFlags {
            startup: c.startup_probe.is_some(),
            readiness: c.readiness_probe.is_some(),
            post_start: c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some()),
            startup_grace: grace(c.startup_probe.as_ref()),
            liveness_grace: grace(c.liveness_probe.as_ref()),
        }
    }
}

/// Which probe a result is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Readiness,
    Liveness,
}

/// What the state machine needs of a container's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub kind: ContainerKind,
    pub restart_policy: Option<RestartPolicy>,
    pub rules: Vec<RestartRule>,
    pub probes: ProbeFlags,
}

impl ContainerSpec {
    pub fn of(c: &Container, init: bool) -> ContainerSpec {
        let restart_policy = c.restart_policy.as_deref().and_then(RestartPolicy::parse);
        let kind = match (init, restart_policy) {
            (true, Some(RestartPolicy::Always)) => ContainerKind::Sidecar,
            (true, _) => ContainerKind::Init,
            (false, _) => ContainerKind::Regular,
        };
        let rules = c
            .restart_policy_rules
            .iter()
            .flatten()
            .map(|r| {
                let ec = r.exit_codes.as_ref();
                RestartRule {
                    action: RuleAction::parse(&r.action),
                    operator_in: match ec.map(|e| e.operator.as_str()) {
                        Some("In") => Some(true),
                        Some("NotIn") => Some(false),
                        _ => None,
                    },
                    values: ec.and_then(|e| e.values.clone()).unwrap_or_default(),
                }
            })
            .collect();
        ContainerSpec {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            kind,
            restart_policy,
            rules,
            probes: ProbeFlags::of(c),
        }
    }
}

/// kubelet's `ContainerShouldRestart` (§4.2): container-level rules and policy when the container
/// sets a `restartPolicy`, else the pod's policy.
pub fn should_restart(c: &ContainerSpec, pod_policy: RestartPolicy, exit_code: i32) -> bool {
    match c.restart_policy {
        Some(policy) => {
            if let Some(rule) = c.rules.iter().find(|r| r.matches(exit_code))
                && rule.action == RuleAction::Restart
            {
                return true;
            }
            policy.restarts(exit_code)
        }
        None => pod_policy.restarts(exit_code),
    }
}

/// Whether the container's first rule matching `exit_code` is `RestartAllContainers` (rules only
/// count when the container sets a `restartPolicy`, §4.2).
pub fn restarts_all(c: &ContainerSpec, exit_code: i32) -> bool {
    c.restart_policy.is_some()
        && c.rules.iter().find(|r| r.matches(exit_code)).is_some_and(|r| r.action == RuleAction::RestartAllContainers)
}

/// What the state machine needs of a pod's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpecSummary {
    pub restart_policy: RestartPolicy,
    pub init: Vec<ContainerSpec>,
    pub containers: Vec<ContainerSpec>,
    pub active_deadline: Option<Duration>,
}

impl PodSpecSummary {
    pub fn of(pod: &Pod) -> PodSpecSummary {
        let spec = pod.spec.clone().unwrap_or_default();
        PodSpecSummary {
            restart_policy: spec
                .restart_policy
                .as_deref()
                .and_then(RestartPolicy::parse)
                .unwrap_or(RestartPolicy::Always),
            init: spec.init_containers.iter().flatten().map(|c| ContainerSpec::of(c, true)).collect(),
            containers: spec.containers.iter().map(|c| ContainerSpec::of(c, false)).collect(),
            active_deadline: spec.active_deadline_seconds.map(|s| Duration::from_secs(s.max(0) as u64)),
        }
    }
}

/// CrashLoopBackOff settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    /// The delay starts over when a container's previous restart is longer ago than this.
    pub reset: Duration,
    /// How long a container the runtime could not create waits before the next try (kubelet:
    /// its pod worker's back-off period, 10 s).
    pub create_retry: Duration,
}

/// Which container: an init container (sidecars included) or a regular one, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CRef {
    pub init: bool,
    pub index: usize,
}

impl CRef {
    pub fn init(index: usize) -> CRef {
        CRef { init: true, index }
    }
    pub fn regular(index: usize) -> CRef {
        CRef { init: false, index }
    }
}

/// How a container run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

/// The state of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CState {
    /// Not started yet.
    Waiting,
    /// The runtime was asked to start it.
    Starting {
        stop: bool,
    },
    Running {
        started_at: Timestamp,
        /// The runtime's view (a simulated container may never be ready).
        ready: bool,
        stopping: bool,
        /// The postStart hook completed (or there is none).
        post_started: bool,
        /// The startup probe succeeded (or there is none).
        startup_ok: bool,
        /// The readiness probe's result (`true` without one).
        probe_ready: bool,
    },
    /// CrashLoopBackOff: restarts at `until`.
    BackOff {
        until: Timestamp,
        delay: Duration,
    },
    /// The runtime could not create the run, for a reason of the host's
    /// ([`start_error_is_transient`]) or because its config could not be built
    /// ([`StartFailure::Config`]): Waiting `reason` ([`CREATE_CONTAINER_ERROR`] or
    /// [`CREATE_CONTAINER_CONFIG_ERROR`]) with the runtime's `message`, tried again at `until`.
    /// `restart`: the run was a restart, counted again when it is tried again (the failed try is
    /// not counted).
    CreateFailed {
        until: Timestamp,
        reason: &'static str,
        message: String,
        restart: bool,
    },
    Terminated(Termination),
}

/// One container and its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRun {
    pub spec: ContainerSpec,
    pub state: CState,
    /// The previous run's termination (`lastState`).
    pub last: Option<Termination>,
    pub restart_count: u32,
    pub container_id: Option<String>,
    /// The container was Started (postStart done, startup probe passed) since the pod (re)started:
    /// the barrier a sidecar holds the next init container behind.
    pub started_once: bool,
    /// The delay the next non-immediate restart waits (zero: the next restart is immediate).
    backoff: Duration,
    backoff_at: Option<Timestamp>,
}

impl ContainerRun {
    fn new(spec: ContainerSpec) -> ContainerRun {
        ContainerRun {
            spec,
            state: CState::Waiting,
            last: None,
            restart_count: 0,
            container_id: None,
            started_once: false,
            backoff: Duration::ZERO,
            backoff_at: None,
        }
    }

    /// Running, its postStart hook done and its startup probe passed (`ContainerStatus.started`).
    pub fn is_started(&self) -> bool {
        matches!(self.state, CState::Running { post_started: true, startup_ok: true, .. })
    }

    fn is_active(&self) -> bool {
        matches!(self.state, CState::Starting { .. } | CState::Running { .. })
    }

    fn has_started(&self) -> bool {
        !matches!(self.state, CState::Waiting | CState::Starting { .. } | CState::CreateFailed { .. })
            || self.restart_count > 0
            || self.last.is_some()
    }

    fn is_ready(&self) -> bool {
        match &self.state {
            CState::Running { ready, stopping, probe_ready, .. } => {
                *ready && *probe_ready && !*stopping && self.is_started()
            }
            CState::Terminated(t) => self.spec.kind == ContainerKind::Init && t.exit_code == 0,
            _ => false,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, CState::Terminated(t) if t.exit_code == 0)
    }

    /// A create retry that will not happen (the pod stops or restarts): the container shows its
    /// last run, or stays Waiting if it never ran.
    fn give_up_create(&mut self) {
        self.state = match self.last.clone() {
            Some(last) => CState::Terminated(last),
            None => CState::Waiting,
        };
    }
}

/// The pod's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Known but not admitted yet.
    New,
    /// Running init container `current` (or waiting to restart it).
    Initializing {
        current: usize,
    },
    /// Init done; regular containers (and sidecars) run.
    Running,
    /// Stopping every container (deletion or deadline); no restarts.
    Terminating,
    /// `RestartAllContainers` (§4.3): every container is being killed; once none runs and
    /// `until` (the back-off of the container that triggered it) has passed, the pod starts over.
    Restarting {
        until: Timestamp,
    },
    Succeeded,
    Failed,
}

impl Stage {
    pub fn is_terminal(self) -> bool {
        matches!(self, Stage::Succeeded | Stage::Failed)
    }
}

/// An input of the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The agent takes the pod on, its volumes mounted: start it.
    Admit { at: Timestamp },
    /// The pod's volumes could not be mounted (a ConfigMap or Secret they project is missing):
    /// nothing starts; the mount is tried again after [`Backoff::create_retry`].
    MountFailed { at: Timestamp },
    /// A run the machine asked for is up.
    Started { c: CRef, restart_count: u32, id: String, ready: bool, at: Timestamp },
    /// A run the machine asked for could not start, for the reason `failure` says.
    StartFailed { c: CRef, restart_count: u32, message: String, failure: StartFailure, at: Timestamp },
    /// A run ended. `reason: None` means `Completed` for code 0, else `Error`.
    Exited {
        c: CRef,
        restart_count: u32,
        exit_code: i32,
        reason: Option<String>,
        message: Option<String>,
        at: Timestamp,
    },
    /// A probe's result changed for a run (reported by the prober).
    Probe { c: CRef, restart_count: u32, kind: ProbeKind, success: bool, at: Timestamp },
    /// A run's postStart hook completed (`error: None`) or failed.
    PostStart { c: CRef, restart_count: u32, error: Option<String>, at: Timestamp },
    /// Time passed (backoff delays, the active deadline).
    Tick { at: Timestamp },
    /// The pod got a deletionTimestamp.
    Delete { at: Timestamp },
}

impl Event {
    pub fn at(&self) -> Timestamp {
        match self {
            Event::Admit { at }
            | Event::MountFailed { at }
            | Event::Started { at, .. }
            | Event::StartFailed { at, .. }
            | Event::Exited { at, .. }
            | Event::Probe { at, .. }
            | Event::PostStart { at, .. }
            | Event::Tick { at }
            | Event::Delete { at } => *at,
        }
    }
}

/// An output of the state machine, for the worker to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Mount the pod's volumes again (the last try failed): the worker answers with
    /// [`Event::Admit`] or [`Event::MountFailed`].
    Mount,
    /// Start a run of the container (its `restart_count` is the run's number).
    Start(CRef),
    /// Stop the running container gracefully (pod termination, deadline): its preStop hook,
    /// then SIGTERM with what is left of the pod's grace period.
    Stop(CRef),
    /// Kill the container because a liveness or startup probe (or its postStart hook) failed:
    /// preStop, then SIGTERM with this grace (`None`: the pod's `terminationGracePeriodSeconds`).
    /// It is restarted per its restart policy.
    Kill { c: CRef, grace: Option<Duration> },
    /// Kill at once, no grace, no preStop (`RestartAllContainers`).
    KillNow(CRef),
    /// The status changed: write it.
    WriteStatus,
    /// Everything has stopped and the final status is out: delete the pod with grace 0.
    ConfirmDeletion,
}

/// The whole state of one pod on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMachine {
    pub spec: PodSpecSummary,
    pub backoff: Backoff,
    pub stage: Stage,
    pub init: Vec<ContainerRun>,
    pub containers: Vec<ContainerRun>,
    pub start_time: Option<Timestamp>,
    /// All init containers completed (sidecars started).
    pub initialized: bool,
    pub deletion_requested: bool,
    pub deletion_confirmed: bool,
    /// `status.reason`/`status.message` (e.g. `DeadlineExceeded`).
    pub reason: Option<(String, String)>,
    /// `status.message` without a reason (the agent restarted and lost the containers).
    pub message: Option<String>,
    /// The `AllContainersRestarting` condition: `None` until a `RestartAllContainers` rule fired.
    pub all_restarting: Option<bool>,
    /// A pod-level restart is under way: the phase is Pending until the regular containers run again.
    pub pod_restarting: bool,
    /// Every container is being stopped for good (sidecars last, in reverse order).
    stopping_all: bool,
    /// Not admitted yet because its volumes could not be mounted: when to try again (`None` once
    /// the try is under way).
    mount_retry: Option<Timestamp>,
    /// A pod restart began in this step: the condition's True goes out (one status write) before
    /// the restart goes on, even when nothing else was running.
    restart_announced_now: bool,
}

impl PodMachine {
    pub fn new(spec: PodSpecSummary, backoff: Backoff) -> PodMachine {
        PodMachine {
            init: spec.init.iter().cloned().map(ContainerRun::new).collect(),
            containers: spec.containers.iter().cloned().map(ContainerRun::new).collect(),
            spec,
            backoff,
            stage: Stage::New,
            start_time: None,
            initialized: false,
            deletion_requested: false,
            deletion_confirmed: false,
            reason: None,
            message: None,
            all_restarting: None,
            pod_restarting: false,
            restart_announced_now: false,
            stopping_all: false,
            mount_retry: None,
        }
    }

    /// A pod that had already finished when the agent found it: nothing runs, nothing to report
    /// until it is deleted.
    pub fn finished(spec: PodSpecSummary, backoff: Backoff, succeeded: bool) -> PodMachine {
        let mut m = PodMachine::new(spec, backoff);
        m.stage = if succeeded { Stage::Succeeded } else { Stage::Failed };
        m
    }

    pub fn container(&self, c: CRef) -> &ContainerRun {
        if c.init { &self.init[c.index] } else { &self.containers[c.index] }
    }

    fn container_mut(&mut self, c: CRef) -> &mut ContainerRun {
        if c.init { &mut self.init[c.index] } else { &mut self.containers[c.index] }
    }

    /// The first container whose run matches.
    pub fn refs_of(&self, f: impl Fn(&ContainerRun) -> bool) -> Option<CRef> {
        self.refs().find(|c| f(self.container(*c)))
    }

    fn refs(&self) -> impl Iterator<Item = CRef> + use<> {
        let (i, r) = (self.init.len(), self.containers.len());
        (0..i).map(CRef::init).chain((0..r).map(CRef::regular))
    }

    /// Whether some container is starting or running.
    pub fn any_active(&self) -> bool {
        self.init.iter().chain(&self.containers).any(ContainerRun::is_active)
    }

    /// The pod phase this state reports.
    pub fn phase(&self) -> &'static str {
        match self.stage {
            Stage::New | Stage::Initializing { .. } | Stage::Restarting { .. } => "Pending",
            Stage::Running | Stage::Terminating => {
                if !self.pod_restarting && self.containers.iter().any(ContainerRun::has_started) {
                    "Running"
                } else {
                    "Pending"
                }
            }
            Stage::Succeeded => "Succeeded",
            Stage::Failed => "Failed",
        }
    }

    /// When the machine wants a [`Event::Tick`]: the earliest backoff expiry, the end of a
    /// pod restart's back-off, or the active deadline.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        let restart = match self.stage {
            Stage::New => return self.mount_retry.into_iter().chain(self.deadline()).min(),
            Stage::Restarting { until } if !self.any_active() => Some(until),
            Stage::Restarting { .. } | Stage::Initializing { .. } | Stage::Running => None,
            _ => return None,
        };
        let backoffs = self.init.iter().chain(&self.containers).filter_map(|c| match c.state {
            CState::BackOff { until, .. } | CState::CreateFailed { until, .. } => Some(until),
            _ => None,
        });
        let deadline = self.deadline();
        backoffs.chain(deadline).chain(restart).min()
    }

    fn deadline(&self) -> Option<Timestamp> {
        Some(self.start_time? + self.spec.active_deadline?)
    }

    fn live(&self) -> bool {
        matches!(self.stage, Stage::Initializing { .. } | Stage::Running)
    }

    fn start(&mut self, c: CRef, fx: &mut Vec<Effect>) {
        self.container_mut(c).state = CState::Starting { stop: false };
        fx.push(Effect::Start(c));
    }

    /// Moves init forward: starts the next init container, or the regular containers once all
    /// are done. A sidecar is done once Started (postStart done, startup probe passed).
    fn advance(&mut self, fx: &mut Vec<Effect>) {
        let pending = self.init.iter().position(|c| match c.spec.kind {
            ContainerKind::Sidecar => !c.started_once,
            _ => !c.succeeded(),
        });
        match pending {
            Some(i) => {
                self.stage = Stage::Initializing { current: i };
                if self.init[i].state == CState::Waiting {
                    self.start(CRef::init(i), fx);
                }
            }
            None => {
                self.stage = Stage::Running;
                self.initialized = true;
                for i in 0..self.containers.len() {
                    if self.containers[i].state == CState::Waiting {
                        self.start(CRef::regular(i), fx);
                    }
                }
            }
        }
    }

    /// The CrashLoopBackOff delay of the container's next restart (zero: immediate), moving its
    /// back-off forward.
    fn next_delay(&mut self, c: CRef, at: Timestamp) -> Duration {
        let Backoff { base, max, reset, .. } = self.backoff;
        let run = self.container_mut(c);
        if run.backoff_at.is_some_and(|prev| {
            at.duration_since(prev) > jiff::SignedDuration::try_from(reset).unwrap_or(jiff::SignedDuration::MAX)
        }) {
            run.backoff = Duration::ZERO;
        }
        let delay = run.backoff;
        run.backoff = if delay.is_zero() { base } else { (delay * 2).min(max) };
        run.backoff_at = Some(at);
        delay
    }

    fn schedule_restart(&mut self, c: CRef, term: Termination, at: Timestamp, fx: &mut Vec<Effect>) {
        let delay = self.next_delay(c, at);
        let run = self.container_mut(c);
        run.last = Some(term);
        if delay.is_zero() {
            run.restart_count += 1;
            self.start(c, fx);
        } else {
            run.state = CState::BackOff { until: at + delay, delay };
        }
    }

    /// Ends the pod: stops what still runs (sidecars), no more restarts.
    fn finish(&mut self, succeeded: bool, fx: &mut Vec<Effect>) {
        self.stage = if succeeded { Stage::Succeeded } else { Stage::Failed };
        self.pod_restarting = false;
        self.stop_all(fx);
    }

    /// Stops one container for good; one waiting for a restart stays down.
    fn stop_one(&mut self, c: CRef, fx: &mut Vec<Effect>) {
        let run = self.container_mut(c);
        match &mut run.state {
            CState::Running { stopping, .. } if !*stopping => {
                *stopping = true;
                fx.push(Effect::Stop(c));
            }
            CState::Starting { stop } => *stop = true,
            CState::BackOff { .. } => {
                if let Some(last) = run.last.clone() {
                    run.state = CState::Terminated(last);
                }
            }
            CState::CreateFailed { .. } => run.give_up_create(),
            _ => {}
        }
    }

    /// Stops every container: init and regular containers at once; sidecars after them, one
    /// by one in reverse order (§4.4), see [`PodMachine::stop_sidecars`].
    fn stop_all(&mut self, fx: &mut Vec<Effect>) {
        self.stopping_all = true;
        for c in self.refs() {
            let run = self.container(c);
            if run.spec.kind != ContainerKind::Sidecar
                || matches!(run.state, CState::BackOff { .. } | CState::CreateFailed { .. })
            {
                self.stop_one(c, fx);
            }
        }
        self.stop_sidecars(fx);
    }

    /// Stops the last sidecar still active once nothing started after it runs.
    fn stop_sidecars(&mut self, fx: &mut Vec<Effect>) {
        let others = self.refs().filter(|c| self.container(*c).spec.kind != ContainerKind::Sidecar);
        if others.into_iter().any(|c| self.container(c).is_active()) {
            return;
        }
        for i in (0..self.init.len()).rev() {
            let run = &self.init[i];
            if run.spec.kind != ContainerKind::Sidecar {
                continue;
            }
            match run.state {
                CState::Running { stopping: true, .. } | CState::Starting { stop: true } => return,
                CState::Running { .. } | CState::Starting { .. } => {
                    self.stop_one(CRef::init(i), fx);
                    return;
                }
                _ => {}
            }
        }
    }

    fn begin_termination(&mut self, fx: &mut Vec<Effect>) {
        self.stage = Stage::Terminating;
        self.stop_all(fx);
    }

    /// `RestartAllContainers` fired on `c`'s exit: kill everything at once (no grace, no
    /// preStop), then [`PodMachine::restart_pod`] once nothing runs.
    fn begin_pod_restart(&mut self, c: CRef, term: Termination, at: Timestamp, fx: &mut Vec<Effect>) {
        let delay = self.next_delay(c, at);
        self.container_mut(c).state = CState::Terminated(term);
        self.all_restarting = Some(true);
        self.restart_announced_now = true;
        self.pod_restarting = true;
        self.stage = Stage::Restarting { until: at + delay };
        for c in self.refs() {
            let run = self.container_mut(c);
            match &mut run.state {
                CState::Running { stopping, .. } if !*stopping => {
                    *stopping = true;
                    fx.push(Effect::KillNow(c));
                }
                CState::Starting { stop } => *stop = true,
                CState::BackOff { .. } => {
                    if let Some(last) = run.last.clone() {
                        run.state = CState::Terminated(last);
                    }
                }
                CState::CreateFailed { .. } => run.give_up_create(),
                _ => {}
            }
        }
    }

    /// Starts the pod over in place: every container that ran gets `restartCount`+1 and its
    /// last termination as `lastState`; init containers, sidecars, then regular containers.
    fn restart_pod(&mut self, fx: &mut Vec<Effect>) {
        for run in self.init.iter_mut().chain(self.containers.iter_mut()) {
            if let CState::Terminated(t) = &run.state {
                run.last = Some(t.clone());
                run.restart_count += 1;
            }
            run.state = CState::Waiting;
            run.started_once = false;
        }
        self.advance(fx);
        fx.push(Effect::WriteStatus);
    }

    /// The runtime could not create run `c` (for a reason of the host's, or its config could not
    /// be built; Waiting `reason`): the run did not happen. It is tried again after
    /// [`Backoff::create_retry`] while the pod is live, whatever the restart policy; a run that
    /// was to be stopped is not.
    fn create_failed(&mut self, c: CRef, reason: &'static str, message: String, at: Timestamp, fx: &mut Vec<Effect>) {
        fx.push(Effect::WriteStatus);
        let (live, retry) = (self.live(), self.backoff.create_retry);
        let run = self.container_mut(c);
        let stop = matches!(run.state, CState::Starting { stop: true });
        // kubelet counts the containers it created: this try is not one.
        let restart = run.last.is_some() && run.restart_count > 0;
        if restart {
            run.restart_count -= 1;
        }
        if live && !stop {
            run.state = CState::CreateFailed { until: at + retry, reason, message, restart };
        } else {
            run.give_up_create();
        }
    }

    fn on_exit(&mut self, c: CRef, term: Termination, at: Timestamp, fx: &mut Vec<Effect>) {
        fx.push(Effect::WriteStatus);
        let code = term.exit_code;
        let pod_policy = self.spec.restart_policy;
        let run = self.container(c);
        let stopping = matches!(run.state, CState::Running { stopping: true, .. } | CState::Starting { stop: true });
        let live = self.live();
        if live && !stopping && restarts_all(&run.spec, code) {
            self.begin_pod_restart(c, term, at, fx);
            return;
        }
        let restart = live
            && !stopping
            && match run.spec.kind {
                ContainerKind::Sidecar => true,
                ContainerKind::Init => code != 0 && should_restart(&run.spec, pod_policy, code),
                ContainerKind::Regular => should_restart(&run.spec, pod_policy, code),
            };
        if restart {
            self.schedule_restart(c, term, at, fx);
            return;
        }
        let kind = run.spec.kind;
        self.container_mut(c).state = CState::Terminated(term);
        if !live {
            return;
        }
        match kind {
            ContainerKind::Init if code == 0 => self.advance(fx),
            ContainerKind::Init => self.finish(false, fx),
            ContainerKind::Sidecar => {}
            ContainerKind::Regular => {
                if self.containers.iter().all(|c| matches!(c.state, CState::Terminated(_))) {
                    let ok = self.containers.iter().all(ContainerRun::succeeded);
                    self.finish(ok, fx);
                }
            }
        }
    }

    /// A run made progress towards Started (it started, its postStart hook or startup probe
    /// passed): the first time it is Started, a sidecar lets init move on.
    fn on_progress(&mut self, c: CRef, fx: &mut Vec<Effect>) {
        fx.push(Effect::WriteStatus);
        let run = self.container_mut(c);
        if !run.is_started() || run.started_once {
            return;
        }
        run.started_once = true;
        if run.spec.kind == ContainerKind::Sidecar && matches!(self.stage, Stage::Initializing { .. }) {
            self.advance(fx);
        }
    }

    /// A pod restart is over (the phase leaves Pending) once every regular container ran again.
    fn check_pod_restart_done(&mut self) {
        if self.pod_restarting
            && self.stage == Stage::Running
            && self
                .containers
                .iter()
                .all(|c| !matches!(c.state, CState::Waiting | CState::Starting { .. } | CState::CreateFailed { .. }))
        {
            self.pod_restarting = false;
        }
    }

    /// Sidecars are stopped in order; a pod restart goes on once everything stopped; Terminating
    /// ends when nothing runs; a requested deletion is confirmed once the pod is terminal and
    /// nothing runs.
    fn settle(&mut self, at: Timestamp, fx: &mut Vec<Effect>) {
        if self.stopping_all {
            self.stop_sidecars(fx);
        }
        if let Stage::Restarting { until } = self.stage
            && !self.any_active()
            && !self.restart_announced_now
        {
            if self.all_restarting == Some(true) {
                self.all_restarting = Some(false);
                fx.push(Effect::WriteStatus);
            }
            if until <= at {
                self.restart_pod(fx);
            }
        }
        if self.any_active() {
            return;
        }
        if self.stage == Stage::Terminating {
            let ok = self.reason.is_none() && self.containers.iter().all(ContainerRun::succeeded);
            self.stage = if ok { Stage::Succeeded } else { Stage::Failed };
            fx.push(Effect::WriteStatus);
        }
        if self.stage.is_terminal() && self.deletion_requested && !self.deletion_confirmed {
            self.deletion_confirmed = true;
            fx.push(Effect::WriteStatus);
            fx.push(Effect::ConfirmDeletion);
        }
    }
}

fn termination(
    exit_code: i32,
    reason: Option<String>,
    message: Option<String>,
    started_at: Option<Timestamp>,
    at: Timestamp,
    id: Option<String>,
) -> Termination {
    Termination {
        exit_code,
        reason: reason.unwrap_or_else(|| if exit_code == 0 { "Completed" } else { "Error" }.to_string()),
        message,
        started_at,
        finished_at: at,
        container_id: id,
    }
}

/// The transition function.
pub fn step(mut m: PodMachine, event: Event) -> (PodMachine, Vec<Effect>) {
    let mut fx = Vec::new();
    m.restart_announced_now = false;
    let now = event.at();
    match event {
        Event::Admit { at } => {
            if m.stage == Stage::New {
                m.start_time.get_or_insert(at);
                m.mount_retry = None;
                m.advance(&mut fx);
                fx.push(Effect::WriteStatus);
            }
        }
        Event::MountFailed { at } => {
            if m.stage == Stage::New && !m.deletion_requested {
                // The first failure shows the pod waiting; later ones change nothing in it.
                if m.start_time.is_none() {
                    m.start_time = Some(at);
                    fx.push(Effect::WriteStatus);
                }
                m.mount_retry = Some(at + m.backoff.create_retry);
            }
        }
        Event::Started { c, restart_count, id, ready, at } => {
            let restarting = matches!(m.stage, Stage::Restarting { .. });
            let run = m.container_mut(c);
            if let CState::Starting { stop } = run.state
                && run.restart_count == restart_count
            {
                let p = &run.spec.probes;
                run.container_id = Some(id);
                run.state = CState::Running {
                    started_at: at,
                    ready,
                    stopping: stop,
                    post_started: !p.post_start,
                    startup_ok: !p.startup,
                    probe_ready: !p.readiness,
                };
                if stop {
                    fx.push(if restarting { Effect::KillNow(c) } else { Effect::Stop(c) });
                } else {
                    m.on_progress(c, &mut fx);
                }
                m.check_pod_restart_done();
                fx.push(Effect::WriteStatus);
            }
        }
        Event::StartFailed { c, restart_count, message, failure, at } => {
            let run = m.container(c);
            if matches!(run.state, CState::Starting { .. }) && run.restart_count == restart_count {
                match failure {
                    StartFailure::Config => m.create_failed(c, CREATE_CONTAINER_CONFIG_ERROR, message, at, &mut fx),
                    StartFailure::Create => m.create_failed(c, CREATE_CONTAINER_ERROR, message, at, &mut fx),
                    StartFailure::Start => {
                        let term = termination(128, Some("StartError".into()), Some(message), None, at, None);
                        m.on_exit(c, term, at, &mut fx);
                    }
                }
            }
        }
        Event::Exited { c, restart_count, exit_code, reason, message, at } => {
            let run = m.container(c);
            if run.restart_count == restart_count
                && let CState::Running { started_at, .. } = run.state
            {
                let term = termination(exit_code, reason, message, Some(started_at), at, run.container_id.clone());
                m.on_exit(c, term, at, &mut fx);
                m.check_pod_restart_done();
            }
        }
        Event::PostStart { c, restart_count, error, .. } => {
            let run = m.container_mut(c);
            if run.restart_count == restart_count
                && let CState::Running { stopping: false, post_started, .. } = &mut run.state
                && !*post_started
            {
                match error {
                    None => {
                        *post_started = true;
                        m.on_progress(c, &mut fx);
                    }
                    Some(_) => fx.push(Effect::Kill { c, grace: None }),
                }
            }
        }
        Event::Probe { c, restart_count, kind, success, .. } => {
            let run = m.container_mut(c);
            let probes = run.spec.probes.clone();
            if run.restart_count == restart_count
                && let CState::Running { stopping: false, startup_ok, probe_ready, .. } = &mut run.state
            {
                match (kind, success) {
                    (ProbeKind::Startup, true) if !*startup_ok => {
                        *startup_ok = true;
                        m.on_progress(c, &mut fx);
                    }
                    (ProbeKind::Startup, false) if !*startup_ok => {
                        fx.push(Effect::Kill { c, grace: probes.startup_grace })
                    }
                    (ProbeKind::Liveness, false) => fx.push(Effect::Kill { c, grace: probes.liveness_grace }),
                    (ProbeKind::Readiness, ok) if *probe_ready != ok => {
                        *probe_ready = ok;
                        fx.push(Effect::WriteStatus);
                    }
                    _ => {}
                }
            }
        }
        Event::Tick { at } if m.stage == Stage::New => {
            if m.deadline().is_some_and(|d| d <= at) {
                // Nothing runs yet: the pod fails at once.
                m.reason = Some((
                    "DeadlineExceeded".into(),
                    "Pod was active on the node longer than the specified deadline".into(),
                ));
                m.stage = Stage::Failed;
                m.mount_retry = None;
                fx.push(Effect::WriteStatus);
            } else if m.mount_retry.is_some_and(|r| r <= at) {
                m.mount_retry = None;
                fx.push(Effect::Mount);
            }
        }
        Event::Tick { at } => {
            if matches!(m.stage, Stage::Initializing { .. } | Stage::Running | Stage::Restarting { .. }) {
                if m.deadline().is_some_and(|d| d <= at) {
                    m.reason = Some((
                        "DeadlineExceeded".into(),
                        "Pod was active on the node longer than the specified deadline".into(),
                    ));
                    m.begin_termination(&mut fx);
                    fx.push(Effect::WriteStatus);
                } else if m.live() {
                    for c in m.refs() {
                        let run = m.container_mut(c);
                        match run.state {
                            CState::BackOff { until, .. } if until <= at => {
                                run.restart_count += 1;
                                m.start(c, &mut fx);
                                fx.push(Effect::WriteStatus);
                            }
                            // No status write: the try's outcome writes one.
                            CState::CreateFailed { until, restart, .. } if until <= at => {
                                run.restart_count += u32::from(restart);
                                m.start(c, &mut fx);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        Event::Delete { .. } => {
            if !m.deletion_requested {
                m.deletion_requested = true;
                match m.stage {
                    Stage::New => {
                        m.stage = Stage::Failed;
                        fx.push(Effect::WriteStatus);
                    }
                    Stage::Initializing { .. } | Stage::Running | Stage::Restarting { .. } => {
                        m.begin_termination(&mut fx);
                        fx.push(Effect::WriteStatus);
                    }
                    Stage::Terminating | Stage::Succeeded | Stage::Failed => {}
                }
            }
        }
    }
    m.settle(now, &mut fx);
    let mut seen_write = false;
    fx.retain(|e| {
        if *e == Effect::WriteStatus {
            let keep = !seen_write;
            seen_write = true;
            keep
        } else {
            true
        }
    });
    // The status goes out before the deletion is confirmed.
    if let Some(i) = fx.iter().position(|e| *e == Effect::ConfirmDeletion) {
        let e = fx.remove(i);
        fx.push(e);
    }
    (m, fx)
}

/// The pod condition of a `RestartAllContainers` restart (§4.3).
pub const ALL_RESTARTING: &str = "AllContainersRestarting";

/// kubelet's Waiting reason for a container the runtime could not create (`ErrCreateContainer`).
pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";

/// kubelet's Waiting reason for a container whose config could not be built
/// (`ErrCreateContainerConfig`).
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";

/// How a start failed, which decides what the container shows and whether it is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFailure {
    /// Its config could not be built from the pod and what it refers to (kubelet's
    /// `generateContainerConfig` failing: a missing ConfigMap or Secret, or key, `runAsNonRoot`
    /// violated): Waiting [`CREATE_CONTAINER_CONFIG_ERROR`], tried again after
    /// [`Backoff::create_retry`] (kubelet retries at its pod worker's next sync, after the same
    /// back-off period: the container never exited, so no CrashLoopBackOff applies), as the
    /// missing object may appear.
    Config,
    /// The runtime could not create it for a reason of the host's ([`start_error_is_transient`]):
    /// Waiting [`CREATE_CONTAINER_ERROR`], tried again after [`Backoff::create_retry`].
    Create,
    /// Any other: the run ended at once, exit code 128, reason `StartError`.
    Start,
}

impl StartFailure {
    /// Classifies a runtime's start error from its kind and message. Pure.
    pub fn of(kind: ErrorKind, message: &str) -> StartFailure {
        match kind {
            ErrorKind::Config => StartFailure::Config,
            ErrorKind::Other if start_error_is_transient(message) => StartFailure::Create,
            ErrorKind::Other => StartFailure::Start,
        }
    }
}

/// The OS errors after which creating a container is worth trying again: the host lacked a
/// resource for a while (disk space or quota, a failing disk, file descriptors, processes,
/// memory). Any other error, or none (a command not found, a missing ConfigMap key), is the
/// pod's own and fails the same way every time.
const TRANSIENT_OS_ERRORS: [nix::errno::Errno; 7] = {
    use nix::errno::Errno::*;
    [ENOSPC, EDQUOT, EIO, EMFILE, ENFILE, EAGAIN, ENOMEM]
};

/// Whether a runtime's start error is for a reason of the host's that may pass, so the start is
/// tried again: the last OS error the message names (std's `(os error N)`) is one of
/// [`TRANSIENT_OS_ERRORS`]. The process runtime's messages carry the failed step's I/O error
/// that way, from the agent or from the container's supervisor.
pub fn start_error_is_transient(message: &str) -> bool {
    let code = message
        .rsplit_once("(os error ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(n, _)| n.parse::<i32>().ok());
    code.is_some_and(|n| TRANSIENT_OS_ERRORS.iter().any(|e| *e as i32 == n))
}

/// `status.message` of a pod whose containers were lost when the agent restarted.
pub const LOST_POD_MESSAGE: &str = "the node agent restarted and the pod's containers are gone";
/// kubelet's words for a container it cannot find any more.
pub const LOST_CONTAINER_REASON: &str = "ContainerStatusUnknown";
pub const LOST_CONTAINER_MESSAGE: &str = "The container could not be located when the pod was terminated";

/// Takes a run's restart count, container ID and last termination from its reported status;
/// returns its reported state.
fn seed(run: &mut ContainerRun, cs: &k8s_openapi::api::core::v1::ContainerStatus, at: Timestamp) -> ApiState {
    run.restart_count = cs.restart_count.max(0) as u32;
    run.container_id = cs.container_id.clone().filter(|id| !id.is_empty());
    run.last = cs.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| from_api_termination(t, at));
    cs.state.clone().unwrap_or_default()
}

fn from_api_termination(t: &ContainerStateTerminated, at: Timestamp) -> Termination {
    Termination {
        exit_code: t.exit_code,
        reason: t.reason.clone().unwrap_or_else(|| if t.exit_code == 0 { "Completed" } else { "Error" }.into()),
        message: t.message.clone(),
        started_at: t.started_at.as_ref().map(|t| t.0),
        finished_at: t.finished_at.as_ref().map(|t| t.0).unwrap_or(at),
        container_id: t.container_id.clone(),
    }
}

/// What the agent makes of an unfinished pod it finds when it starts (an agent restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Nothing had started: the pod is started normally.
    Fresh,
    /// Containers had started and are gone with the old agent: the pod is Failed.
    Lost(PodMachine),
    /// The pod runs on: every container its status shows running is still held by the runtime
    /// (adopted, see [`crate::Runtime::adopt`]).
    Adopted(PodMachine),
}

impl PodMachine {
    /// A pod found unfinished when the agent starts; `kept` are the IDs of the containers the
    /// runtime still holds (running, or ended with a known exit status).
    ///
    /// - The pod was initialized (condition `Initialized`), is not restarting all its
    ///   containers, and each of its containers the status shows running is in `kept`:
    ///   [`Found::Adopted`]. Those containers run on (their ready and started flags as last
    ///   reported; the prober takes over); terminated ones keep their termination; one waiting
    ///   to restart (a last termination, nothing running) restarts at once.
    /// - Otherwise, if its status shows that containers had started (a containerID, a running
    ///   or terminated state, or phase Running), their processes are gone, so the pod is
    ///   [`Found::Lost`], Failed: each container that was running is terminated with exit code
    ///   137, reason `ContainerStatusUnknown` (kubelet's words); containers that had already
    ///   terminated keep that termination (a container waiting to restart gets its last one).
    /// - Else [`Found::Fresh`].
    ///
    /// A pod restart (`RestartAllContainers`) under way (phase Pending with the condition) goes
    /// on from where it was: what still runs is stopped, then the pod starts over.
    ///
    /// A pod caught while initializing (for the first time, or again after a pod restart) is
    /// adopted when an init container or sidecar of it runs and is kept, those before it done and
    /// everything after it Waiting: it goes on initializing. Otherwise it is Lost.
    pub fn after_agent_restart(
        spec: PodSpecSummary,
        backoff: Backoff,
        status: &PodStatus,
        at: Timestamp,
        kept: &std::collections::HashSet<String>,
    ) -> Found {
        if let Some(m) = Self::adopted(spec.clone(), backoff, status, at, kept) {
            return Found::Adopted(m);
        }
        match Self::lost(spec, backoff, status, at) {
            Some(m) => Found::Lost(m),
            None => Found::Fresh,
        }
    }

    /// A pod that had not started when the agent started ([`Found::Fresh`]): started normally,
    /// keeping the `startTime` the API shows (a previous agent's, set while it waited for its
    /// volumes), as kubelet's status manager keeps a pod's first `StartTime` across restarts.
    pub fn fresh(spec: PodSpecSummary, backoff: Backoff, status: &PodStatus) -> PodMachine {
        let mut m = PodMachine::new(spec, backoff);
        m.start_time = status.start_time.as_ref().map(|t| t.0);
        m
    }

    fn adopted(
        spec: PodSpecSummary,
        backoff: Backoff,
        status: &PodStatus,
        at: Timestamp,
        kept: &std::collections::HashSet<String>,
    ) -> Option<PodMachine> {
        let condition = |t: &str| status.conditions.iter().flatten().any(|c| c.type_ == t && c.status == "True");
        let has_condition = |t: &str| status.conditions.iter().flatten().any(|c| c.type_ == t);
        let phase = status.phase.as_deref();
        // Pending with the condition (True, or False again once everything is down): a pod
        // restart (`RestartAllContainers`) under way.
        if !kept.is_empty() && phase == Some("Pending") && has_condition(ALL_RESTARTING) {
            if !condition(ALL_RESTARTING)
                && let Some(m) = Self::adopted_started_over(spec.clone(), backoff, status, at, kept)
            {
                return Some(m);
            }
            return Some(Self::adopted_restarting(spec, backoff, status, at, kept, condition(ALL_RESTARTING)));
        }
        // Initializing for the first time, an init container or sidecar running (an in-place
        // restart agent behind its startup probe): it goes on initializing, as a pod that started
        // over does. Failing it would replace it, and its replacement's in-place restart agent
        // would announce one more attempt.
        if !kept.is_empty()
            && phase == Some("Pending")
            && !has_condition(ALL_RESTARTING)
            && let Some(mut m) = Self::adopted_started_over(spec.clone(), backoff, status, at, kept)
        {
            m.pod_restarting = false;
            m.all_restarting = None;
            return Some(m);
        }
        if kept.is_empty() || phase != Some("Running") || !condition("Initialized") || condition(ALL_RESTARTING) {
            return None;
        }
        let policy = spec.restart_policy;
        let mut m = PodMachine::new(spec, backoff);
        let groups = [(&mut m.init, &status.init_container_statuses), (&mut m.containers, &status.container_statuses)];
        for (runs, statuses) in groups {
            for run in runs.iter_mut() {
                let cs = statuses.iter().flatten().find(|s| s.name == run.spec.name)?;
                let state = seed(run, cs, at);
                run.started_once = cs.started == Some(true) || run.spec.kind == ContainerKind::Sidecar;
                run.state = if let Some(t) = &state.terminated {
                    let t = from_api_termination(t, at);
                    // Ended and about to restart when the agent went: it restarts now.
                    let restarts = match run.spec.kind {
                        ContainerKind::Sidecar => true,
                        ContainerKind::Init => false,
                        ContainerKind::Regular => should_restart(&run.spec, policy, t.exit_code),
                    };
                    if restarts {
                        run.last = Some(t);
                        CState::BackOff { until: at, delay: Duration::ZERO }
                    } else {
                        CState::Terminated(t)
                    }
                } else if let Some(r) = &state.running {
                    if !run.container_id.as_ref().is_some_and(|id| kept.contains(id)) {
                        return None;
                    }
                    CState::Running {
                        started_at: r.started_at.as_ref().map(|t| t.0).unwrap_or(at),
                        ready: true,
                        stopping: false,
                        post_started: true,
                        startup_ok: cs.started == Some(true),
                        probe_ready: cs.ready || !run.spec.probes.readiness,
                    }
                } else if run.last.is_some() {
                    CState::BackOff { until: at, delay: Duration::ZERO }
                } else {
                    return None;
                };
                if run.spec.kind == ContainerKind::Init && !run.succeeded() {
                    return None;
                }
            }
        }
        m.stage = Stage::Running;
        m.initialized = true;
        m.start_time = status.start_time.as_ref().map(|t| t.0).or(Some(at));
        Some(m)
    }

    /// A pod whose restart (`RestartAllContainers`) was over: it had started over and was
    /// initializing again (phase Pending, the condition False, an init container running: an
    /// in-place restart agent held behind its startup probe, say). It goes on initializing.
    /// Restarting it once more would count a second restart for one, and its in-place restart
    /// agent, started afresh, would announce one more attempt. `None` unless the status shows
    /// exactly that: the init containers before the running one done (sidecars Started, others
    /// succeeded, each sidecar's run kept), the running one kept, everything after it Waiting.
    fn adopted_started_over(
        spec: PodSpecSummary,
        backoff: Backoff,
        status: &PodStatus,
        at: Timestamp,
        kept: &std::collections::HashSet<String>,
    ) -> Option<PodMachine> {
        let mut m = PodMachine::new(spec, backoff);
        let mut current = None;
        for (i, run) in m.init.iter_mut().enumerate() {
            let cs = status.init_container_statuses.iter().flatten().find(|s| s.name == run.spec.name)?;
            let state = seed(run, cs, at);
            if current.is_some() {
                // Not reached yet in this start.
                state.waiting.as_ref()?;
                continue;
            }
            let sidecar = run.spec.kind == ContainerKind::Sidecar;
            if let Some(r) = &state.running {
                if !run.container_id.as_ref().is_some_and(|id| kept.contains(id)) {
                    return None;
                }
                run.started_once = sidecar && cs.started == Some(true);
                run.state = CState::Running {
                    started_at: r.started_at.as_ref().map(|t| t.0).unwrap_or(at),
                    ready: true,
                    stopping: false,
                    post_started: true,
                    startup_ok: cs.started == Some(true),
                    probe_ready: cs.ready || !run.spec.probes.readiness,
                };
                if !run.started_once {
                    current = Some(i);
                }
            } else if let Some(t) = state.terminated.as_ref().filter(|t| !sidecar && t.exit_code == 0) {
                run.state = CState::Terminated(from_api_termination(t, at));
            } else {
                return None;
            }
        }
        let current = current?;
        for run in m.containers.iter_mut() {
            let cs = status.container_statuses.iter().flatten().find(|s| s.name == run.spec.name)?;
            seed(run, cs, at).waiting.as_ref()?;
        }
        m.stage = Stage::Initializing { current };
        m.pod_restarting = true;
        m.all_restarting = Some(false);
        m.initialized = status.conditions.iter().flatten().any(|c| c.type_ == "Initialized" && c.status == "True");
        m.start_time = status.start_time.as_ref().map(|t| t.0).or(Some(at));
        Some(m)
    }

    /// A pod restart found under way: it goes on from where it is. Everything still running is
    /// stopped (kept runs are killed by the worker: `Running` with `stopping`; others are gone),
    /// then the pod starts over as [`PodMachine::restart_pod`] does; containers already waiting
    /// to start again (the restart had begun) keep their count.
    fn adopted_restarting(
        spec: PodSpecSummary,
        backoff: Backoff,
        status: &PodStatus,
        at: Timestamp,
        kept: &std::collections::HashSet<String>,
        announced: bool,
    ) -> PodMachine {
        let mut m = PodMachine::new(spec, backoff);
        let groups = [(&mut m.init, &status.init_container_statuses), (&mut m.containers, &status.container_statuses)];
        for (runs, statuses) in groups {
            for run in runs.iter_mut() {
                let Some(cs) = statuses.iter().flatten().find(|s| s.name == run.spec.name) else { continue };
                let state = seed(run, cs, at);
                run.state = if let Some(t) = &state.terminated {
                    CState::Terminated(from_api_termination(t, at))
                } else if let Some(r) = &state.running {
                    let started_at = r.started_at.as_ref().map(|t| t.0);
                    if run.container_id.as_ref().is_some_and(|id| kept.contains(id)) {
                        CState::Running {
                            started_at: started_at.unwrap_or(at),
                            ready: false,
                            stopping: true,
                            post_started: true,
                            startup_ok: cs.started == Some(true),
                            probe_ready: false,
                        }
                    } else {
                        CState::Terminated(Termination {
                            exit_code: 137,
                            reason: LOST_CONTAINER_REASON.into(),
                            message: Some(LOST_CONTAINER_MESSAGE.into()),
                            started_at,
                            finished_at: at,
                            container_id: run.container_id.clone(),
                        })
                    }
                } else {
                    CState::Waiting
                };
            }
        }
        m.stage = Stage::Restarting { until: at };
        m.pod_restarting = true;
        m.all_restarting = Some(announced);
        m.initialized = status.conditions.iter().flatten().any(|c| c.type_ == "Initialized" && c.status == "True");
        m.start_time = status.start_time.as_ref().map(|t| t.0).or(Some(at));
        m
    }

    /// See [`PodMachine::after_agent_restart`]: `None` when nothing had started.
    fn lost(spec: PodSpecSummary, backoff: Backoff, status: &PodStatus, at: Timestamp) -> Option<PodMachine> {
        let mut m = PodMachine::new(spec, backoff);
        let mut had_started = status.phase.as_deref() == Some("Running");
        let groups = [(&mut m.init, &status.init_container_statuses), (&mut m.containers, &status.container_statuses)];
        for (runs, statuses) in groups {
            for run in runs.iter_mut() {
                let Some(cs) = statuses.iter().flatten().find(|s| s.name == run.spec.name) else { continue };
                let state = seed(run, cs, at);
                if let Some(t) = &state.terminated {
                    run.state = CState::Terminated(from_api_termination(t, at));
                } else if state.running.is_some() || run.container_id.is_some() {
                    let started_at = state.running.as_ref().and_then(|r| r.started_at.as_ref()).map(|t| t.0);
                    run.state = CState::Terminated(Termination {
                        exit_code: 137,
                        reason: LOST_CONTAINER_REASON.into(),
                        message: Some(LOST_CONTAINER_MESSAGE.into()),
                        started_at,
                        finished_at: at,
                        container_id: run.container_id.clone(),
                    });
                } else if let Some(last) = run.last.clone() {
                    run.state = CState::Terminated(last);
                } else {
                    continue;
                }
                had_started = true;
            }
        }
        if !had_started {
            return None;
        }
        m.stage = Stage::Failed;
        m.start_time = status.start_time.as_ref().map(|t| t.0).or(Some(at));
        m.initialized = status.conditions.iter().flatten().any(|c| c.type_ == "Initialized" && c.status == "True");
        m.message = Some(LOST_POD_MESSAGE.into());
        Some(m)
    }
}

/// Remembers when each pod condition last changed status.
#[derive(Debug, Clone, Default)]
pub struct ConditionClock(BTreeMap<String, (String, Timestamp)>);

impl ConditionClock {
    /// Seeds the clock from conditions already on the pod (so a restart keeps transition times).
    pub fn from_conditions(conditions: &[PodCondition]) -> ConditionClock {
        ConditionClock(
            conditions
                .iter()
                .filter_map(|c| Some((c.type_.clone(), (c.status.clone(), c.last_transition_time.as_ref()?.0))))
                .collect(),
        )
    }

    fn stamp(&mut self, type_: &str, status: &str, now: Timestamp) -> Timestamp {
        match self.0.get(type_) {
            Some((s, t)) if s == status => *t,
            _ => {
                self.0.insert(type_.to_string(), (status.to_string(), now));
                now
            }
        }
    }
}

/// Where the pod runs, for its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub host_ip: String,
    pub pod_ip: String,
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(time),
        finished_at: Some(time(t.finished_at)),
        container_id: t.container_id.clone(),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<String>) -> ApiState {
    ApiState { waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message }), ..Default::default() }
}

fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms >= 60_000 {
        format!("{}m0s", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl PodMachine {
    fn container_status(&self, run: &ContainerRun, at: &Placement) -> ContainerStatus {
        // kubelet's default Waiting reason: PodInitializing while a pod with init containers has
        // not finished them, else ContainerCreating.
        let initializing =
            matches!(self.stage, Stage::Initializing { .. }) || (self.stage == Stage::New && !self.init.is_empty());
        let state = match &run.state {
            CState::Waiting if initializing || run.spec.kind != ContainerKind::Regular => {
                waiting("PodInitializing", None)
            }
            CState::Waiting | CState::Starting { .. } => waiting("ContainerCreating", None),
            CState::Running { started_at, .. } => ApiState {
                running: Some(ContainerStateRunning { started_at: Some(time(*started_at)) }),
                ..Default::default()
            },
            CState::BackOff { delay, .. } => waiting(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off {} restarting failed container={} pod={}_{}({})",
                    go_duration(*delay),
                    run.spec.name,
                    at.name,
                    at.namespace,
                    at.uid
                )),
            ),
            CState::CreateFailed { reason, message, .. } => waiting(reason, Some(message.clone())),
            CState::Terminated(t) => ApiState { terminated: Some(terminated(t)), ..Default::default() },
        };
        ContainerStatus {
            name: run.spec.name.clone(),
            image: run.spec.image.clone(),
            image_id: if run.container_id.is_some() { format!("sim://{}", run.spec.image) } else { String::new() },
            container_id: run.container_id.clone(),
            ready: run.is_ready(),
            started: Some(run.is_started()),
            restart_count: run.restart_count as i32,
            state: Some(state),
            last_state: Some(
                run.last
                    .as_ref()
                    .map(|t| ApiState { terminated: Some(terminated(t)), ..Default::default() })
                    .unwrap_or_default(),
            ),
            ..Default::default()
        }
    }

    /// The pod status to write. Conditions the agent does not own are left to the API server's
    /// strategic merge (by `type`).
    pub fn status(&self, at: &Placement, clock: &mut ConditionClock, now: Timestamp) -> PodStatus {
        let terminal = self.stage.is_terminal();
        let mut conditions = Vec::new();
        let mut cond = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
            let status = if ok { "True" } else { "False" };
            let t = clock.stamp(type_, status, now);
            conditions.push(PodCondition {
                type_: type_.into(),
                status: status.into(),
                reason: reason.map(str::to_string),
                message,
                last_transition_time: Some(time(t)),
                ..Default::default()
            });
        };
        // The sandbox (and its IP) comes after the volumes are mounted.
        let sandboxed = self.stage != Stage::New;
        cond("PodReadyToStartContainers", !terminal && sandboxed, None, None);
        let incomplete: Vec<&str> = self
            .init
            .iter()
            .filter(|c| match c.spec.kind {
                ContainerKind::Sidecar => !c.started_once,
                _ => !c.succeeded(),
            })
            .map(|c| c.spec.name.as_str())
            .collect();
        if self.initialized || incomplete.is_empty() {
            cond("Initialized", true, None, None);
        } else {
            cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!("containers with incomplete status: [{}]", incomplete.join(" "))),
            );
        }
        let unready: Vec<&str> = self
            .init
            .iter()
            .filter(|c| c.spec.kind == ContainerKind::Sidecar && !c.is_ready())
            .chain(self.containers.iter().filter(|c| !c.is_ready()))
            .map(|c| c.spec.name.as_str())
            .collect();
        let ready = unready.is_empty() && !terminal;
        for type_ in ["ContainersReady", "Ready"] {
            if ready {
                cond(type_, true, None, None);
            } else if self.stage == Stage::Succeeded {
                cond(type_, false, Some("PodCompleted"), None);
            } else {
                let msg = format!("containers with unready status: [{}]", unready.join(" "));
                cond(type_, false, Some("ContainersNotReady"), Some(msg));
            }
        }
        cond("PodScheduled", true, None, None);
        if let Some(on) = self.all_restarting {
            match self.stage {
                Stage::Succeeded => cond(ALL_RESTARTING, false, Some("PodCompleted"), None),
                Stage::Failed => cond(ALL_RESTARTING, false, Some("PodFailed"), None),
                _ if on => cond(
                    ALL_RESTARTING,
                    true,
                    Some("RestartAllContainersStarted"),
                    Some("container exited with restart policy rule".into()),
                ),
                _ => cond(ALL_RESTARTING, false, None, None),
            }
        }
        let statuses = |runs: &[ContainerRun]| runs.iter().map(|r| self.container_status(r, at)).collect::<Vec<_>>();
        PodStatus {
            phase: Some(self.phase().into()),
            conditions: Some(conditions),
            host_ip: Some(at.host_ip.clone()),
            host_ips: Some(vec![HostIP { ip: at.host_ip.clone() }]),
            pod_ip: sandboxed.then(|| at.pod_ip.clone()),
            pod_ips: sandboxed.then(|| vec![PodIP { ip: at.pod_ip.clone() }]),
            start_time: self.start_time.map(time),
            container_statuses: Some(statuses(&self.containers)),
            init_container_statuses: (!self.init.is_empty()).then(|| statuses(&self.init)),
            reason: self.reason.as_ref().map(|r| r.0.clone()),
            message: self.reason.as_ref().map(|r| r.1.clone()).or_else(|| self.message.clone()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerKind::*;
    use Effect::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn spec(name: &str, kind: ContainerKind) -> ContainerSpec {
        let restart_policy = (kind == Sidecar).then_some(RestartPolicy::Always);
        ContainerSpec {
            name: name.into(),
            image: "img".into(),
            kind,
            restart_policy,
            rules: vec![],
            probes: ProbeFlags::default(),
        }
    }

    fn backoff() -> Backoff {
        Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset: Duration::from_secs(600),
            create_retry: Duration::from_secs(5),
        }
    }

    fn summary(policy: RestartPolicy, init: Vec<ContainerSpec>, containers: Vec<ContainerSpec>) -> PodSpecSummary {
        PodSpecSummary { restart_policy: policy, init, containers, active_deadline: None }
    }

    fn pod(policy: RestartPolicy, init: Vec<ContainerSpec>, containers: Vec<ContainerSpec>) -> PodMachine {
        PodMachine::new(summary(policy, init, containers), backoff())
    }

    fn one(policy: RestartPolicy) -> PodMachine {
        pod(policy, vec![], vec![spec("main", Regular)])
    }

    /// Feeds events; returns the machine and the effects of the last one.
    fn run(m: PodMachine, events: Vec<Event>) -> (PodMachine, Vec<Effect>) {
        events.into_iter().fold((m, vec![]), |(m, _), e| step(m, e))
    }

    fn started(c: CRef, rc: u32, at: i64) -> Event {
        Event::Started { c, restart_count: rc, id: format!("sim://{rc}"), ready: true, at: t(at) }
    }

    fn exited(c: CRef, rc: u32, code: i32, at: i64) -> Event {
        Event::Exited { c, restart_count: rc, exit_code: code, reason: None, message: None, at: t(at) }
    }

    const MAIN: CRef = CRef { init: false, index: 0 };

    fn terminated_code(m: &PodMachine, c: CRef) -> Option<(i32, String)> {
        match &m.container(c).state {
            CState::Terminated(t) => Some((t.exit_code, t.reason.clone())),
            _ => None,
        }
    }

    #[test]
    fn should_restart_table() {
        use RestartPolicy::*;
        let rule = |restart: bool, op: Option<bool>, values: &[i32]| RestartRule {
            action: if restart { RuleAction::Restart } else { RuleAction::Other },
            operator_in: op,
            values: values.to_vec(),
        };
        let c = |policy: Option<RestartPolicy>, rules: Vec<RestartRule>| ContainerSpec {
            name: "c".into(),
            image: String::new(),
            kind: Regular,
            restart_policy: policy,
            rules,
            probes: ProbeFlags::default(),
        };
        // (container, pod policy, exit code, restart?)
        let cases = vec![
            (c(None, vec![]), Always, 0, true),
            (c(None, vec![]), Always, 1, true),
            (c(None, vec![]), OnFailure, 0, false),
            (c(None, vec![]), OnFailure, 1, true),
            (c(None, vec![]), Never, 1, false),
            // Rules are ignored without a container restartPolicy.
            (c(None, vec![rule(true, Some(true), &[42])]), Never, 42, false),
            (c(Some(Never), vec![rule(true, Some(true), &[42])]), Never, 42, true),
            (c(Some(Never), vec![rule(true, Some(true), &[42])]), Never, 1, false),
            (c(Some(Never), vec![rule(true, Some(false), &[0])]), Never, 3, true),
            (c(Some(Never), vec![rule(true, Some(false), &[0])]), Never, 0, false),
            // First matching rule wins; a non-Restart action falls through to the container policy.
            (c(Some(Never), vec![rule(false, Some(true), &[42]), rule(true, Some(true), &[42])]), Never, 42, false),
            (c(Some(OnFailure), vec![rule(false, Some(true), &[42])]), Never, 42, true),
            // Unknown operators are skipped.
            (c(Some(Never), vec![rule(true, None, &[42]), rule(true, Some(true), &[42])]), Never, 42, true),
            (c(Some(Always), vec![]), Never, 0, true),
            (c(Some(OnFailure), vec![]), Always, 0, false),
        ];
        for (i, (c, policy, code, want)) in cases.into_iter().enumerate() {
            assert_eq!(should_restart(&c, policy, code), want, "case {i}");
        }
    }

    #[test]
    fn admit_starts_containers_and_success_completes() {
        let (m, fx) = step(one(RestartPolicy::Never), Event::Admit { at: t(0) });
        assert_eq!(fx, [Start(MAIN), WriteStatus]);
        assert_eq!(m.phase(), "Pending");
        let (m, fx) = step(m, started(MAIN, 0, 1));
        assert_eq!(fx, [WriteStatus]);
        assert_eq!(m.phase(), "Running");
        let (m, fx) = step(m, exited(MAIN, 0, 0, 50));
        assert_eq!(fx, [WriteStatus]);
        assert_eq!(m.stage, Stage::Succeeded);
        assert_eq!(terminated_code(&m, MAIN), Some((0, "Completed".into())));
    }

    #[test]
    fn phase_table() {
        use RestartPolicy::*;
        // (policy, exit code) → (stage after the first exit, restart count)
        let cases = [
            (Never, 0, Stage::Succeeded, 0),
            (Never, 3, Stage::Failed, 0),
            (OnFailure, 0, Stage::Succeeded, 0),
            (OnFailure, 3, Stage::Running, 1),
            (Always, 0, Stage::Running, 1),
            (Always, 3, Stage::Running, 1),
        ];
        for (policy, code, stage, restarts) in cases {
            let (m, _) =
                run(one(policy), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, code, 2)]);
            assert_eq!((m.stage, m.container(MAIN).restart_count), (stage, restarts), "{policy:?} {code}");
        }
    }

    #[test]
    fn never_pod_fails_only_when_all_containers_stopped() {
        let side = CRef::regular(1);
        let m = pod(RestartPolicy::Never, vec![], vec![spec("main", Regular), spec("b", Regular)]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), started(side, 0, 1)]);
        assert_eq!(fx, [WriteStatus]);
        let (m, _) = step(m, exited(MAIN, 0, 3, 5));
        assert_eq!((m.stage, m.phase()), (Stage::Running, "Running"));
        let (m, _) = step(m, exited(side, 0, 0, 6));
        assert_eq!(m.stage, Stage::Failed);
    }

    #[test]
    fn crash_loop_backoff() {
        let (m, fx) = run(
            one(RestartPolicy::OnFailure),
            vec![Event::Admit { at: t(0) }, started(MAIN, 0, 0), exited(MAIN, 0, 1, 100)],
        );
        // The first restart is immediate.
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        assert_eq!(m.container(MAIN).restart_count, 1);
        assert_eq!(m.container(MAIN).last.as_ref().map(|l| l.exit_code), Some(1));
        // The second waits the base delay: 10s.
        let (m, fx) = run(m, vec![started(MAIN, 1, 100), exited(MAIN, 1, 1, 200)]);
        assert_eq!(fx, [WriteStatus]);
        assert_eq!(m.container(MAIN).state, CState::BackOff { until: t(10_200), delay: Duration::from_secs(10) });
        assert_eq!(m.next_wakeup(), Some(t(10_200)));
        let status = m.status(&placement(), &mut ConditionClock::default(), t(300));
        let cs = &status.container_statuses.unwrap()[0];
        let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(w.message.as_deref(), Some("back-off 10s restarting failed container=main pod=p_ns(u)"));
        assert_eq!(cs.restart_count, 1);
        // Too early: nothing. Then the restart.
        let (m, fx) = step(m, Event::Tick { at: t(10_000) });
        assert_eq!(fx, []);
        let (m, fx) = step(m, Event::Tick { at: t(10_200) });
        assert_eq!(fx, [Start(MAIN), WriteStatus]);
        assert_eq!(m.container(MAIN).restart_count, 2);
        // Then 20s, 40s, ... capped at 300s.
        let mut m = m;
        let mut now = 10_200;
        let mut delays = vec![];
        for rc in 2..9 {
            let (m2, _) = run(m, vec![started(MAIN, rc, now), exited(MAIN, rc, 1, now + 1)]);
            let CState::BackOff { until, delay } = m2.container(MAIN).state else {
                panic!("{:?}", m2.container(MAIN).state)
            };
            delays.push(delay.as_secs());
            now = until.as_millisecond() - 1_700_000_000_000;
            m = step(m2, Event::Tick { at: until }).0;
        }
        assert_eq!(delays, [20, 40, 80, 160, 300, 300, 300]);
        // A container that ran longer than twice the cap restarts at once again.
        let (m, fx) = run(m, vec![started(MAIN, 9, now), exited(MAIN, 9, 1, now + 700_000)]);
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        assert_eq!(m.container(MAIN).restart_count, 10);
    }

    #[test]
    fn stale_events_are_ignored() {
        let (m, _) = run(one(RestartPolicy::OnFailure), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 0)]);
        let (m2, fx) = step(m.clone(), exited(MAIN, 7, 1, 5));
        assert_eq!((m2, fx), (m.clone(), vec![]));
        let (m2, fx) = step(m.clone(), started(MAIN, 0, 3));
        assert_eq!((m2, fx), (m, vec![]));
    }

    #[test]
    fn init_containers_run_in_order() {
        let (i0, i1) = (CRef::init(0), CRef::init(1));
        let m = pod(RestartPolicy::Never, vec![spec("a", Init), spec("b", Init)], vec![spec("main", Regular)]);
        let (m, fx) = step(m, Event::Admit { at: t(0) });
        assert_eq!(fx, [Start(i0), WriteStatus]);
        assert_eq!(m.stage, Stage::Initializing { current: 0 });
        let (m, fx) = run(m, vec![started(i0, 0, 1), exited(i0, 0, 0, 2)]);
        assert_eq!(fx, [WriteStatus, Start(i1)]);
        let status = m.status(&placement(), &mut ConditionClock::default(), t(2));
        let init = cond(&status, "Initialized");
        assert_eq!(
            (init.status.as_str(), init.message.as_deref()),
            ("False", Some("containers with incomplete status: [b]"))
        );
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let main_state = status.container_statuses.as_ref().unwrap()[0].state.clone().unwrap();
        assert_eq!(main_state.waiting.unwrap().reason.as_deref(), Some("PodInitializing"));
        let (m, fx) = run(m, vec![started(i1, 0, 3), exited(i1, 0, 0, 4)]);
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        assert_eq!(m.stage, Stage::Running);
        let status = m.status(&placement(), &mut ConditionClock::default(), t(4));
        assert_eq!(cond(&status, "Initialized").status, "True");
        assert!(status.init_container_statuses.unwrap().iter().all(|s| s.ready));
    }

    #[test]
    fn failed_init_container() {
        let i0 = CRef::init(0);
        // Never: the pod fails, the regular containers never start.
        let m = pod(RestartPolicy::Never, vec![spec("a", Init)], vec![spec("main", Regular)]);
        let (m, _) = run(m, vec![Event::Admit { at: t(0) }, started(i0, 0, 1), exited(i0, 0, 2, 2)]);
        assert_eq!(m.stage, Stage::Failed);
        assert_eq!(m.container(MAIN).state, CState::Waiting);
        // OnFailure (and Always): the init container is retried; exit 0 never restarts it.
        let m = pod(RestartPolicy::Always, vec![spec("a", Init)], vec![spec("main", Regular)]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(i0, 0, 1), exited(i0, 0, 2, 2)]);
        assert_eq!(fx, [WriteStatus, Start(i0)]);
        let (m, fx) = run(m, vec![started(i0, 1, 3), exited(i0, 1, 0, 4)]);
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        assert_eq!(m.container(i0).restart_count, 1);
    }

    #[test]
    fn sidecars_start_before_the_next_init_and_stop_at_completion() {
        let (side, i1) = (CRef::init(0), CRef::init(1));
        let m =
            pod(RestartPolicy::Never, vec![spec("proxy", Sidecar), spec("setup", Init)], vec![spec("main", Regular)]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(side, 0, 1)]);
        assert_eq!(fx, [WriteStatus, Start(i1)]);
        let (m, _) = run(m, vec![started(i1, 0, 2), exited(i1, 0, 0, 3), started(MAIN, 0, 4)]);
        // A sidecar is restarted whatever the pod policy.
        let (m, fx) = step(m, exited(side, 0, 1, 5));
        assert_eq!(fx, [WriteStatus, Start(side)]);
        let (m, _) = step(m, started(side, 1, 6));
        // The main container's exit ends the pod (phase from regular containers) and stops the sidecar.
        let (m, fx) = step(m, exited(MAIN, 0, 0, 7));
        assert_eq!(fx, [WriteStatus, Stop(side)]);
        assert_eq!(m.stage, Stage::Succeeded);
        let (m, fx) = step(m, exited(side, 1, 143, 8));
        assert_eq!(fx, [WriteStatus]);
        assert_eq!(m.stage, Stage::Succeeded);
        assert_eq!(m.container(side).restart_count, 1);
    }

    #[test]
    fn container_restart_rules_restart_in_place_under_never() {
        let mut c = spec("main", Regular);
        c.restart_policy = Some(RestartPolicy::Never);
        c.rules = vec![RestartRule { action: RuleAction::Restart, operator_in: Some(true), values: vec![42] }];
        let m = pod(RestartPolicy::Never, vec![], vec![c]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 42, 2)]);
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        assert_eq!(m.stage, Stage::Running);
        let (m, _) = run(m, vec![started(MAIN, 1, 3), exited(MAIN, 1, 1, 4)]);
        assert_eq!((m.stage, m.container(MAIN).restart_count), (Stage::Failed, 1));
    }

    #[test]
    fn deletion_of_a_running_pod() {
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1)]);
        let (m, fx) = step(m, Event::Delete { at: t(5) });
        assert_eq!(fx, [Stop(MAIN), WriteStatus]);
        assert_eq!(m.stage, Stage::Terminating);
        assert_eq!(m.phase(), "Running");
        // Stopped containers are not restarted, even with Always; the pod fails; then the deletion is confirmed.
        let (m, fx) = step(m, exited(MAIN, 0, 143, 6));
        assert_eq!(fx, [WriteStatus, ConfirmDeletion]);
        assert_eq!(m.stage, Stage::Failed);
        assert_eq!(terminated_code(&m, MAIN), Some((143, "Error".into())));
        // Confirmed once.
        let (_, fx) = step(m, Event::Delete { at: t(7) });
        assert_eq!(fx, []);

        let (m, _) = run(
            one(RestartPolicy::Always),
            vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), Event::Delete { at: t(2) }],
        );
        let (m, fx) = step(m, exited(MAIN, 0, 143, 3));
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
    }

    #[test]
    fn deletion_of_finished_waiting_and_backing_off_pods() {
        // Finished: confirm at once.
        let (m, _) =
            run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 0, 2)]);
        let (m, fx) = step(m, Event::Delete { at: t(3) });
        assert_eq!((m.stage, fx), (Stage::Succeeded, vec![WriteStatus, ConfirmDeletion]));
        // Never admitted.
        let (m, fx) = step(one(RestartPolicy::Never), Event::Delete { at: t(0) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
        // In CrashLoopBackOff: nothing to stop; the last termination becomes the state.
        let (m, _) = run(
            one(RestartPolicy::OnFailure),
            vec![
                Event::Admit { at: t(0) },
                started(MAIN, 0, 1),
                exited(MAIN, 0, 1, 2),
                started(MAIN, 1, 3),
                exited(MAIN, 1, 2, 4),
            ],
        );
        assert!(matches!(m.container(MAIN).state, CState::BackOff { .. }));
        let (m, fx) = step(m, Event::Delete { at: t(5) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
        assert_eq!(terminated_code(&m, MAIN), Some((2, "Error".into())));
        assert_eq!(m.next_wakeup(), None);
    }

    #[test]
    fn start_failures_and_active_deadline() {
        let (m, fx) = run(
            one(RestartPolicy::Never),
            vec![
                Event::Admit { at: t(0) },
                Event::StartFailed {
                    c: MAIN,
                    restart_count: 0,
                    message: "bad".into(),
                    failure: StartFailure::Start,
                    at: t(1),
                },
            ],
        );
        assert_eq!(fx, [WriteStatus]);
        assert_eq!((m.stage, terminated_code(&m, MAIN)), (Stage::Failed, Some((128, "StartError".into()))));

        let mut m = one(RestartPolicy::Never);
        m.spec.active_deadline = Some(Duration::from_secs(2));
        let (m, _) = run(m, vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1)]);
        assert_eq!(m.next_wakeup(), Some(t(2000)));
        let (m, fx) = step(m, Event::Tick { at: t(2000) });
        assert_eq!(fx, [Stop(MAIN), WriteStatus]);
        let (m, _) = step(m, exited(MAIN, 0, 143, 2001));
        assert_eq!(m.stage, Stage::Failed);
        let status = m.status(&placement(), &mut ConditionClock::default(), t(2001));
        assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    }

    #[test]
    fn start_errors_of_the_host_are_tried_again_and_those_of_the_pod_are_not() {
        let table = [
            ("a full disk", "container \"main\": creating /d/pods/u/tmp: No space left on device (os error 28)", true),
            ("a disk quota", "opening the supervisor's log /d/1.shim.log: Disk quota exceeded (os error 122)", true),
            ("a failing disk", "container \"main\": volume \"v\": writing /d/x: Input/output error (os error 5)", true),
            ("no file descriptor left", "creating a pipe: Too many open files (os error 24)", true),
            (
                "no file left in the system",
                "starting its supervisor: Too many open files in system (os error 23)",
                true,
            ),
            ("a fork that failed", "starting its supervisor: Resource temporarily unavailable (os error 11)", true),
            ("no memory", "starting its supervisor: Cannot allocate memory (os error 12)", true),
            (
                "the last error counts",
                "a: No space left on device (os error 28), then b: Permission denied (os error 13)",
                false,
            ),
            (
                "a command not found",
                "container \"main\": starting \"nosuch\": No such file or directory (os error 2)",
                false,
            ),
            ("a command not executable", "starting \"/x\": Permission denied (os error 13)", false),
            ("a missing ConfigMap", "configmap \"c\" not found", false),
            ("no command", "container \"main\": no command and no image entrypoint", false),
            ("a malformed number", "x (os error twenty-eight)", false),
        ];
        for (what, message, transient) in table {
            assert_eq!(start_error_is_transient(message), transient, "{what}: {message}");
        }
    }

    #[test]
    fn start_failures_are_told_apart_as_kubelet_does() {
        let enospc = "creating /d/tmp: No space left on device (os error 28)";
        let table = [
            (
                "a missing ConfigMap key",
                ErrorKind::Config,
                "couldn't find key k in ConfigMap ns/c",
                StartFailure::Config,
            ),
            ("a missing Secret", ErrorKind::Config, "secret \"s\" not found", StartFailure::Config),
            (
                "runAsNonRoot violated",
                ErrorKind::Config,
                "container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", container: main)",
                StartFailure::Config,
            ),
            ("a config error that names an OS error", ErrorKind::Config, enospc, StartFailure::Config),
            ("a full disk", ErrorKind::Other, enospc, StartFailure::Create),
            (
                "a command not found",
                ErrorKind::Other,
                "starting \"x\": No such file or directory (os error 2)",
                StartFailure::Start,
            ),
            ("an unknown capability", ErrorKind::Other, "unknown capability \"FLY\"", StartFailure::Start),
        ];
        for (what, kind, message, want) in table {
            assert_eq!(StartFailure::of(kind, message), want, "{what}");
        }
    }

    fn start_failed(c: CRef, rc: u32, transient: bool, at: i64) -> Event {
        let message = if transient { "creating /d/tmp: No space left on device (os error 28)" } else { "bad" };
        let failure = if transient { StartFailure::Create } else { StartFailure::Start };
        Event::StartFailed { c, restart_count: rc, message: message.into(), failure, at: t(at) }
    }

    fn config_failed(c: CRef, rc: u32, at: i64) -> Event {
        let message = "couldn't find key k in ConfigMap ns/c".into();
        Event::StartFailed { c, restart_count: rc, message, failure: StartFailure::Config, at: t(at) }
    }

    #[test]
    fn a_container_whose_config_cannot_be_built_waits_with_kubelets_reason_and_is_tried_again() {
        // restartPolicy Never: the pod stays Pending, the container never ran.
        let (m, fx) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, config_failed(MAIN, 0, 1)]);
        assert_eq!(fx, [WriteStatus]);
        assert_eq!((m.stage, m.phase()), (Stage::Running, "Pending"));
        let (reason, message, restarts) = waiting_of(&m, MAIN);
        assert_eq!(reason.as_deref(), Some(CREATE_CONTAINER_CONFIG_ERROR));
        assert_eq!(message.as_deref(), Some("couldn't find key k in ConfigMap ns/c"));
        assert_eq!((restarts, m.container(MAIN).last.clone()), (0, None));
        assert_eq!(m.next_wakeup(), Some(t(5001)), "tried again after create_retry");
        let (m, fx) = step(m, Event::Tick { at: t(5001) });
        assert_eq!(fx, [Start(MAIN)]);
        let (m, _) = step(m, config_failed(MAIN, 0, 5002));
        assert_eq!(m.next_wakeup(), Some(t(10_002)), "failed again: the same wait");
        // The ConfigMap got its key: the container runs, its first run.
        let (m, _) = run(m, vec![Event::Tick { at: t(10_002) }, started(MAIN, 0, 10_003), exited(MAIN, 0, 0, 10_004)]);
        assert_eq!((m.stage, m.container(MAIN).restart_count), (Stage::Succeeded, 0));

        // A restart whose config cannot be built: Running (it ran before), the count unchanged
        // until the run happens, lastState the run that ended.
        let (m, _) = run(
            one(RestartPolicy::Always),
            vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 1, 2), config_failed(MAIN, 1, 3)],
        );
        let (reason, _, restarts) = waiting_of(&m, MAIN);
        assert_eq!((reason.as_deref(), restarts, m.phase()), (Some(CREATE_CONTAINER_CONFIG_ERROR), 0, "Running"));
        assert_eq!(m.container(MAIN).last.as_ref().map(|l| l.exit_code), Some(1));

        // Deleted while waiting: nothing runs, the pod ends Failed.
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, config_failed(MAIN, 0, 1)]);
        let (m, fx) = step(m, Event::Delete { at: t(2) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
    }

    #[test]
    fn a_pod_whose_volumes_cannot_be_mounted_waits_pending_and_starts_once_they_can() {
        // restartPolicy Never: nothing ran, so nothing failed.
        let (m, fx) = step(one(RestartPolicy::Never), Event::MountFailed { at: t(1) });
        assert_eq!(fx, [WriteStatus], "the first failure shows the pod waiting");
        assert_eq!((m.stage, m.phase(), m.start_time), (Stage::New, "Pending", Some(t(1))));
        let (reason, message, restarts) = waiting_of(&m, MAIN);
        assert_eq!((reason.as_deref(), message, restarts), (Some("ContainerCreating"), None, 0));
        let status = m.status(&placement(), &mut ConditionClock::default(), t(1));
        assert_eq!(cond(&status, "PodReadyToStartContainers").status, "False", "no sandbox before the volumes");
        assert_eq!((status.pod_ip, status.start_time.map(|s| s.0)), (None, Some(t(1))));
        assert_eq!(m.next_wakeup(), Some(t(5001)), "tried again after create_retry");
        let (m, fx) = step(m, Event::Tick { at: t(5000) });
        assert_eq!((fx, m.next_wakeup()), (vec![], Some(t(5001))), "too early: nothing");
        let (m, fx) = step(m, Event::Tick { at: t(5001) });
        assert_eq!((fx, m.next_wakeup()), (vec![Mount], None), "the try is under way");
        let (m, fx) = step(m, Event::MountFailed { at: t(5002) });
        assert_eq!((fx, m.next_wakeup()), (vec![], Some(t(10_002))), "failed again: the same wait, no write");
        // A new node agent finds it still waiting: the startTime the API shows stays.
        let shown = m.status(&placement(), &mut ConditionClock::default(), t(5003));
        let one_spec = || summary(RestartPolicy::Never, vec![], vec![spec("main", Regular)]);
        let found = PodMachine::after_agent_restart(one_spec(), backoff(), &shown, t(5004), &Default::default());
        assert!(matches!(found, Found::Fresh), "nothing had started");
        let (m2, fx) = step(PodMachine::fresh(one_spec(), backoff(), &shown), Event::MountFailed { at: t(5005) });
        assert_eq!((fx, m2.start_time), (vec![], Some(t(1))), "already shown waiting: no write");
        let (m2, _) = step(m2, Event::Admit { at: t(5006) });
        assert_eq!(
            m2.status(&placement(), &mut ConditionClock::default(), t(5006)).start_time.map(|s| s.0),
            Some(t(1))
        );

        // The ConfigMap appeared: the pod starts, startTime that of the first try.
        let (m, fx) = run(m, vec![Event::Tick { at: t(10_002) }, Event::Admit { at: t(10_003) }]);
        assert_eq!(fx, [Start(MAIN), WriteStatus]);
        assert_eq!((m.start_time, m.next_wakeup()), (Some(t(1)), None));
        let (m, _) = run(m, vec![started(MAIN, 0, 10_004), exited(MAIN, 0, 0, 10_005)]);
        assert_eq!((m.stage, m.container(MAIN).restart_count), (Stage::Succeeded, 0));

        // With init containers every container shows PodInitializing, as kubelet's default.
        let m = pod(RestartPolicy::Never, vec![spec("i", Init)], vec![spec("main", Regular)]);
        let (m, _) = step(m, Event::MountFailed { at: t(1) });
        assert_eq!(waiting_of(&m, CRef::init(0)).0.as_deref(), Some("PodInitializing"));
        assert_eq!(waiting_of(&m, MAIN).0.as_deref(), Some("PodInitializing"));

        // Deleted while waiting: Failed, the deletion confirmed; a late outcome changes nothing.
        let (m, _) = step(one(RestartPolicy::Never), Event::MountFailed { at: t(1) });
        let (m, fx) = step(m, Event::Delete { at: t(2) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
        let (m, fx) = run(m, vec![Event::MountFailed { at: t(3) }, Event::Admit { at: t(4) }]);
        assert_eq!((m.stage, fx, m.next_wakeup()), (Stage::Failed, vec![], None));

        // activeDeadlineSeconds counts from the first try: past it, the pod fails, nothing ran.
        let mut m = one(RestartPolicy::Never);
        m.spec.active_deadline = Some(Duration::from_secs(2));
        let (m, _) = step(m, Event::MountFailed { at: t(0) });
        assert_eq!(m.next_wakeup(), Some(t(2000)), "the deadline comes before the retry");
        let (m, fx) = step(m, Event::Tick { at: t(2000) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus]));
        let status = m.status(&placement(), &mut ConditionClock::default(), t(2000));
        assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(m.next_wakeup(), None);
    }

    fn waiting_of(m: &PodMachine, c: CRef) -> (Option<String>, Option<String>, i32) {
        let s = m.status(&placement(), &mut ConditionClock::default(), t(0));
        let cs = if c.init { s.init_container_statuses.unwrap() } else { s.container_statuses.unwrap() };
        let cs = &cs[c.index];
        let w = cs.state.as_ref().and_then(|s| s.waiting.clone()).unwrap_or_default();
        (w.reason, w.message, cs.restart_count)
    }

    #[test]
    fn a_run_the_runtime_could_not_create_waits_and_is_tried_again_without_failing_the_pod() {
        // restartPolicy Never: the pod does not fail, the try is not counted.
        let (m, fx) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, start_failed(MAIN, 0, true, 1)]);
        assert_eq!(fx, [WriteStatus]);
        assert_eq!((m.stage, m.phase()), (Stage::Running, "Pending"));
        let (reason, message, restarts) = waiting_of(&m, MAIN);
        assert_eq!(reason.as_deref(), Some(CREATE_CONTAINER_ERROR));
        assert_eq!(message.as_deref(), Some("creating /d/tmp: No space left on device (os error 28)"));
        assert_eq!(restarts, 0);
        assert_eq!(m.next_wakeup(), Some(t(5001)), "tried again after create_retry");
        let (m, fx) = step(m, Event::Tick { at: t(5000) });
        assert_eq!(fx, [], "not yet");
        let (m, fx) = step(m, Event::Tick { at: t(5001) });
        assert_eq!(fx, [Start(MAIN)], "the outcome of the try writes the status");
        let (m, fx) = run(m, vec![start_failed(MAIN, 0, true, 5002)]);
        assert_eq!((fx, m.next_wakeup()), (vec![WriteStatus], Some(t(10_002))), "failed again: the same wait");
        let (m, _) = run(m, vec![Event::Tick { at: t(10_002) }, started(MAIN, 0, 10_003), exited(MAIN, 0, 0, 10_004)]);
        assert_eq!((m.stage, m.container(MAIN).restart_count), (Stage::Succeeded, 0));
        assert_eq!(m.container(MAIN).last, None);

        // A failed start of the pod's own (a command not found) ends the run: Never fails the pod.
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, start_failed(MAIN, 0, false, 1)]);
        assert_eq!((m.stage, terminated_code(&m, MAIN)), (Stage::Failed, Some((128, "StartError".into()))));
    }

    #[test]
    fn a_restart_the_runtime_could_not_create_keeps_the_count_and_last_state_until_it_runs() {
        let (m, fx) = run(
            one(RestartPolicy::Always),
            vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 1, 2)],
        );
        assert_eq!((fx, m.container(MAIN).restart_count), (vec![WriteStatus, Start(MAIN)], 1), "first restart at once");
        let (m, _) = step(m, start_failed(MAIN, 1, true, 3));
        let (reason, _, restarts) = waiting_of(&m, MAIN);
        assert_eq!((reason.as_deref(), restarts), (Some(CREATE_CONTAINER_ERROR), 0), "the try is not counted");
        assert_eq!(m.container(MAIN).last.as_ref().map(|l| l.exit_code), Some(1), "lastState: the run that ended");
        assert_eq!(m.phase(), "Running", "the container ran before");
        let (m, fx) = step(m, Event::Tick { at: t(5003) });
        assert_eq!((fx, m.container(MAIN).restart_count), (vec![Start(MAIN)], 1), "counted when tried again");
        let (m, _) = step(m, started(MAIN, 1, 5004));
        assert!(matches!(m.container(MAIN).state, CState::Running { .. }));
        // Its CrashLoopBackOff did not move: the next exit waits the base delay, as before.
        let (m, _) = step(m, exited(MAIN, 1, 1, 5005));
        assert!(matches!(m.container(MAIN).state, CState::BackOff { delay, .. } if delay == Duration::from_secs(10)));
    }

    #[test]
    fn a_create_retry_that_will_not_happen_shows_the_last_run_or_waiting() {
        // Deleted while waiting to try again: nothing runs, the pod ends Failed, the deletion is
        // confirmed.
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, start_failed(MAIN, 0, true, 1)]);
        let (m, fx) = step(m, Event::Delete { at: t(2) });
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));
        assert_eq!((m.container(MAIN).state.clone(), m.next_wakeup()), (CState::Waiting, None));

        // A start that was to be stopped (deleted meanwhile) and failed: not tried again.
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, Event::Delete { at: t(1) }]);
        let (m, fx) = step(m, start_failed(MAIN, 0, true, 2));
        assert_eq!((m.stage, fx), (Stage::Failed, vec![WriteStatus, ConfirmDeletion]));

        // A pod restart (RestartAllContainers) while containers wait to try again: they start
        // over with the others, each counted once per run it had.
        let (m, _) = run(
            restart_all_pod(),
            vec![
                Event::Admit { at: t(0) },
                started(SIDE, 0, 1),
                started(SETUP, 0, 2),
                exited(SETUP, 0, 0, 3),
                started(MAIN, 0, 4),
                start_failed(OTHER, 0, true, 4),
                exited(SIDE, 0, 1, 5),
                start_failed(SIDE, 1, true, 6),
            ],
        );
        assert!(matches!(m.container(OTHER).state, CState::CreateFailed { restart: false, .. }));
        assert!(matches!(m.container(SIDE).state, CState::CreateFailed { restart: true, .. }));
        let (m, fx) = step(m, exited(MAIN, 0, 42, 7));
        assert_eq!(fx, [WriteStatus], "nothing else runs to kill");
        let (m, fx) = step(m, Event::Tick { at: t(8) });
        assert_eq!(fx, [WriteStatus, Start(SIDE)], "the pod starts over");
        let counts: Vec<u32> = [SIDE, SETUP, MAIN, OTHER].iter().map(|c| m.container(*c).restart_count).collect();
        assert_eq!(counts, [1, 1, 1, 0], "OTHER never ran");
    }

    fn probe(c: CRef, rc: u32, kind: ProbeKind, success: bool, at: i64) -> Event {
        Event::Probe { c, restart_count: rc, kind, success, at: t(at) }
    }

    fn with_probes(mut c: ContainerSpec, f: impl FnOnce(&mut ProbeFlags)) -> ContainerSpec {
        f(&mut c.probes);
        c
    }

    /// (started, ready) as the status reports them.
    fn started_ready(m: &PodMachine, c: CRef) -> (bool, bool) {
        let s = m.status(&placement(), &mut ConditionClock::default(), t(0));
        let list = if c.init { s.init_container_statuses.unwrap() } else { s.container_statuses.unwrap() };
        let cs = &list[c.index];
        (cs.started == Some(true), cs.ready)
    }

    #[test]
    fn probes_drive_started_ready_and_kills() {
        use ProbeKind::*;
        let startup = |p: &mut ProbeFlags| {
            p.startup = true;
            p.startup_grace = Some(Duration::from_secs(5));
        };
        let readiness = |p: &mut ProbeFlags| p.readiness = true;
        let liveness = |p: &mut ProbeFlags| p.liveness_grace = Some(Duration::from_secs(7));
        let post_start = |p: &mut ProbeFlags| p.post_start = true;
        type Flags = fn(&mut ProbeFlags);
        // (behaviour, policy, probes, events after Admit+Started, (started, ready), last effects)
        type Case = (&'static str, RestartPolicy, Flags, Vec<Event>, (bool, bool), Vec<Effect>);
        let cases: Vec<Case> = vec![
            (
                "no_probe_is_started_and_ready_at_once",
                RestartPolicy::Never,
                |_| {},
                vec![],
                (true, true),
                vec![WriteStatus],
            ),
            (
                "startup_probe_holds_started_and_ready",
                RestartPolicy::Never,
                startup,
                vec![],
                (false, false),
                vec![WriteStatus],
            ),
            (
                "startup_success_starts_it",
                RestartPolicy::Never,
                startup,
                vec![probe(MAIN, 0, Startup, true, 5)],
                (true, true),
                vec![WriteStatus],
            ),
            (
                "startup_failure_kills_with_probe_grace",
                RestartPolicy::Always,
                startup,
                vec![probe(MAIN, 0, Startup, false, 5)],
                (false, false),
                vec![Kill { c: MAIN, grace: Some(Duration::from_secs(5)) }],
            ),
            ("readiness_probe_holds_ready", RestartPolicy::Never, readiness, vec![], (true, false), vec![WriteStatus]),
            (
                "readiness_success_makes_ready",
                RestartPolicy::Never,
                readiness,
                vec![probe(MAIN, 0, Readiness, true, 5)],
                (true, true),
                vec![WriteStatus],
            ),
            (
                "readiness_failure_makes_unready",
                RestartPolicy::Never,
                readiness,
                vec![probe(MAIN, 0, Readiness, true, 5), probe(MAIN, 0, Readiness, false, 6)],
                (true, false),
                vec![WriteStatus],
            ),
            (
                "liveness_failure_kills_with_probe_grace",
                RestartPolicy::Always,
                liveness,
                vec![probe(MAIN, 0, Liveness, false, 5)],
                (true, true),
                vec![Kill { c: MAIN, grace: Some(Duration::from_secs(7)) }],
            ),
            (
                "stale_probe_results_are_ignored",
                RestartPolicy::Always,
                liveness,
                vec![probe(MAIN, 3, Liveness, false, 5)],
                (true, true),
                vec![],
            ),
            ("post_start_holds_started", RestartPolicy::Never, post_start, vec![], (false, false), vec![WriteStatus]),
            (
                "post_start_done_starts_it",
                RestartPolicy::Never,
                post_start,
                vec![Event::PostStart { c: MAIN, restart_count: 0, error: None, at: t(5) }],
                (true, true),
                vec![WriteStatus],
            ),
            (
                "post_start_failure_kills",
                RestartPolicy::Never,
                post_start,
                vec![Event::PostStart { c: MAIN, restart_count: 0, error: Some("x".into()), at: t(5) }],
                (false, false),
                vec![Kill { c: MAIN, grace: None }],
            ),
        ];
        for (name, policy, flags, events, want, want_fx) in cases {
            let m = pod(policy, vec![], vec![with_probes(spec("main", Regular), flags)]);
            let mut all = vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1)];
            all.extend(events);
            let (m, fx) = run(m, all);
            assert_eq!(started_ready(&m, MAIN), want, "{name}");
            assert_eq!(fx, want_fx, "{name}");
        }
    }

    #[test]
    fn liveness_kill_restarts_per_policy_and_probes_start_over() {
        use ProbeKind::*;
        let c = with_probes(spec("main", Regular), |p| p.startup = true);
        // Always: the killed run is restarted; the new run is not Started until its own startup probe passes.
        let (m, fx) = run(
            pod(RestartPolicy::Always, vec![], vec![c.clone()]),
            vec![
                Event::Admit { at: t(0) },
                started(MAIN, 0, 1),
                probe(MAIN, 0, Startup, true, 2),
                probe(MAIN, 0, Liveness, false, 3),
                exited(MAIN, 0, 137, 4),
            ],
        );
        assert_eq!(fx, [WriteStatus, Start(MAIN)]);
        let (m, _) = step(m, started(MAIN, 1, 5));
        assert_eq!((m.container(MAIN).restart_count, started_ready(&m, MAIN)), (1, (false, false)));
        // Never: the pod fails.
        let (m, _) = run(
            pod(RestartPolicy::Never, vec![], vec![c]),
            vec![
                Event::Admit { at: t(0) },
                started(MAIN, 0, 1),
                probe(MAIN, 0, Liveness, false, 3),
                exited(MAIN, 0, 137, 4),
            ],
        );
        assert_eq!(m.stage, Stage::Failed);
    }

    #[test]
    fn sidecar_startup_probe_gates_the_next_init_container() {
        use ProbeKind::*;
        let (side, i1) = (CRef::init(0), CRef::init(1));
        let proxy = with_probes(spec("proxy", Sidecar), |p| p.startup = true);
        let m = pod(RestartPolicy::Never, vec![proxy, spec("setup", Init)], vec![spec("main", Regular)]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(side, 0, 1)]);
        // Running but not Started: the barrier holds.
        assert_eq!(fx, [WriteStatus]);
        assert_eq!((m.stage, started_ready(&m, side)), (Stage::Initializing { current: 0 }, (false, false)));
        let s = m.status(&placement(), &mut ConditionClock::default(), t(1));
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [proxy setup]")
        );
        // A crash before it is Started: restarted, still gating.
        let (m, fx) = step(m, exited(side, 0, 1, 2));
        assert_eq!(fx, [WriteStatus, Start(side)]);
        let (m, fx) = step(m, started(side, 1, 3));
        assert_eq!(fx, [WriteStatus]);
        // A result of the old run changes nothing.
        let (m, fx) = step(m, probe(side, 0, Startup, true, 4));
        assert_eq!(fx, []);
        let (m, fx) = step(m, probe(side, 1, Startup, true, 5));
        assert_eq!(fx, [WriteStatus, Start(i1)]);
        assert_eq!(started_ready(&m, side), (true, true));
        // Once passed, the barrier stays open.
        let (m, _) = run(m, vec![started(i1, 0, 6), exited(i1, 0, 0, 7)]);
        assert_eq!(m.stage, Stage::Running);
        assert_eq!(m.container(MAIN).state, CState::Starting { stop: false });
    }

    #[test]
    fn sidecars_stop_after_regular_containers_in_reverse_order() {
        let (s0, s1) = (CRef::init(0), CRef::init(1));
        let m = pod(RestartPolicy::Never, vec![spec("a", Sidecar), spec("b", Sidecar)], vec![spec("main", Regular)]);
        let (m, _) = run(m, vec![Event::Admit { at: t(0) }, started(s0, 0, 1), started(s1, 0, 2), started(MAIN, 0, 3)]);
        // Deletion: the regular container first.
        let (m, fx) = step(m, Event::Delete { at: t(4) });
        assert_eq!(fx, [Stop(MAIN), WriteStatus]);
        // Then the last sidecar, then the first.
        let (m, fx) = step(m, exited(MAIN, 0, 143, 5));
        assert_eq!(fx, [WriteStatus, Stop(s1)]);
        let (m, fx) = step(m, exited(s1, 0, 143, 6));
        assert_eq!(fx, [WriteStatus, Stop(s0)]);
        let (m, fx) = step(m, exited(s0, 0, 143, 7));
        assert_eq!(fx, [WriteStatus, ConfirmDeletion]);
        assert_eq!(m.stage, Stage::Failed);
    }

    fn restart_all_rule(c: &mut ContainerSpec, code: i32) {
        c.restart_policy.get_or_insert(RestartPolicy::Never);
        c.rules.push(RestartRule {
            action: RuleAction::RestartAllContainers,
            operator_in: Some(true),
            values: vec![code],
        });
    }

    /// proxy (sidecar), setup (init), main + other (regular; main restarts all on 42).
    fn restart_all_pod() -> PodMachine {
        let mut main = spec("main", Regular);
        restart_all_rule(&mut main, 42);
        pod(RestartPolicy::Never, vec![spec("proxy", Sidecar), spec("setup", Init)], vec![main, spec("other", Regular)])
    }

    const SIDE: CRef = CRef { init: true, index: 0 };
    const SETUP: CRef = CRef { init: true, index: 1 };
    const OTHER: CRef = CRef { init: false, index: 1 };

    fn restart_all_running() -> PodMachine {
        run(
            restart_all_pod(),
            vec![
                Event::Admit { at: t(0) },
                started(SIDE, 0, 1),
                started(SETUP, 0, 2),
                exited(SETUP, 0, 0, 3),
                started(MAIN, 0, 4),
                started(OTHER, 0, 4),
            ],
        )
        .0
    }

    fn all_restarting(m: &PodMachine) -> Option<(String, Option<String>, Option<String>)> {
        let s = m.status(&placement(), &mut ConditionClock::default(), t(0));
        let c = s.conditions.unwrap().into_iter().find(|c| c.type_ == ALL_RESTARTING)?;
        Some((c.status, c.reason, c.message))
    }

    #[test]
    fn restart_all_containers_restarts_the_pod_in_place() {
        let m = restart_all_running();
        assert_eq!(all_restarting(&m), None);
        // main exits 42: condition True, everything else killed at once (no grace, no preStop).
        let (m, fx) = step(m, exited(MAIN, 0, 42, 10));
        assert_eq!(fx, [WriteStatus, KillNow(SIDE), KillNow(OTHER)]);
        assert_eq!(m.phase(), "Pending");
        assert_eq!(
            all_restarting(&m),
            Some((
                "True".into(),
                Some("RestartAllContainersStarted".into()),
                Some("container exited with restart policy rule".into())
            ))
        );
        let (m, fx) = step(m, exited(OTHER, 0, 137, 11));
        assert_eq!(fx, [WriteStatus]);
        // The last one gone: condition False (no reason), and the pod starts over from init.
        let (m, fx) = step(m, exited(SIDE, 0, 137, 12));
        assert_eq!(fx, [WriteStatus, Start(SIDE)]);
        assert_eq!(all_restarting(&m), Some(("False".into(), None, None)));
        assert_eq!(m.stage, Stage::Initializing { current: 0 });
        let s = m.status(&placement(), &mut ConditionClock::default(), t(12));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "ContainersReady").status, "False");
        // Every container that ran counts a restart and keeps its last termination.
        for (c, code) in [(SIDE, 137), (SETUP, 0), (MAIN, 42), (OTHER, 137)] {
            let run = m.container(c);
            assert_eq!((run.restart_count, run.last.as_ref().map(|l| l.exit_code)), (1, Some(code)), "{c:?}");
        }
        // Init in order, sidecar gated, then the regular containers; Running again.
        let (m, fx) = step(m, started(SIDE, 1, 13));
        assert_eq!(fx, [WriteStatus, Start(SETUP)]);
        let (m, fx) = run(m, vec![started(SETUP, 1, 14), exited(SETUP, 1, 0, 15)]);
        assert_eq!(fx, [WriteStatus, Start(MAIN), Start(OTHER)]);
        let (m, _) = step(m, started(MAIN, 1, 16));
        assert_eq!(m.phase(), "Pending");
        let (m, _) = step(m, started(OTHER, 1, 16));
        assert_eq!((m.stage, m.phase()), (Stage::Running, "Running"));
        // A second pod restart waits the triggering container's back-off.
        let (m, fx) = step(m, exited(MAIN, 1, 42, 20));
        assert_eq!(fx, [WriteStatus, KillNow(SIDE), KillNow(OTHER)]);
        let (m, _) = run(m, vec![exited(OTHER, 1, 137, 21), exited(SIDE, 1, 137, 22)]);
        assert_eq!(m.stage, Stage::Restarting { until: t(10_020) });
        assert_eq!(m.next_wakeup(), Some(t(10_020)));
        assert_eq!(all_restarting(&m).unwrap().0, "False");
        let (m, fx) = step(m, Event::Tick { at: t(10_020) });
        assert_eq!(fx, [Start(SIDE), WriteStatus]);
        assert!(m.init.iter().chain(&m.containers).all(|c| c.restart_count == 2));
        // A completed pod reports PodCompleted.
        let (m, _) = run(m, vec![started(SIDE, 2, 30), started(SETUP, 2, 31), exited(SETUP, 2, 0, 32)]);
        let (m, _) =
            run(m, vec![started(MAIN, 2, 33), started(OTHER, 2, 33), exited(MAIN, 2, 0, 34), exited(OTHER, 2, 0, 35)]);
        assert_eq!(m.stage, Stage::Succeeded);
        assert_eq!(all_restarting(&m), Some(("False".into(), Some("PodCompleted".into()), None)));
    }

    #[test]
    fn restart_all_containers_edge_cases() {
        // Deletion during the restart: no restart, the pod fails; condition PodFailed.
        let (m, _) = step(restart_all_running(), exited(MAIN, 0, 42, 10));
        let (m, fx) = step(m, Event::Delete { at: t(11) });
        assert_eq!(fx, [WriteStatus]);
        let (m, fx) = run(m, vec![exited(OTHER, 0, 137, 12), exited(SIDE, 0, 137, 13)]);
        assert_eq!(fx, [WriteStatus, ConfirmDeletion]);
        assert_eq!(m.stage, Stage::Failed);
        assert_eq!(all_restarting(&m), Some(("False".into(), Some("PodFailed".into()), None)));
        assert!(m.containers.iter().all(|c| c.restart_count == 0));

        // A non-matching exit code: the container policy (Never) applies.
        let (m, _) = step(restart_all_running(), exited(MAIN, 0, 1, 10));
        assert_eq!((m.stage, all_restarting(&m)), (Stage::Running, None));

        // On an init container; the regular containers never ran, so their counts stay 0.
        let mut setup = spec("setup", Init);
        restart_all_rule(&mut setup, 3);
        let m = pod(RestartPolicy::Never, vec![setup], vec![spec("main", Regular)]);
        let (m, fx) =
            run(m, vec![Event::Admit { at: t(0) }, started(CRef::init(0), 0, 1), exited(CRef::init(0), 0, 3, 2)]);
        // Nothing else ran: the condition's True is written first, the restart goes on at the next tick.
        assert_eq!(fx, [WriteStatus]);
        assert_eq!(all_restarting(&m).unwrap().0, "True");
        assert_eq!(m.next_wakeup(), Some(t(2)));
        let (m, fx) = step(m, Event::Tick { at: t(2) });
        assert_eq!(fx, [WriteStatus, Start(CRef::init(0))]);
        assert_eq!(all_restarting(&m), Some(("False".into(), None, None)));
        assert_eq!((m.container(CRef::init(0)).restart_count, m.container(MAIN).restart_count), (1, 0));

        // On a sidecar; a container starting when the restart begins is killed once up.
        let mut proxy = spec("proxy", Sidecar);
        restart_all_rule(&mut proxy, 9);
        let m = pod(RestartPolicy::Never, vec![proxy], vec![spec("main", Regular)]);
        let (m, fx) = run(m, vec![Event::Admit { at: t(0) }, started(SIDE, 0, 1), exited(SIDE, 0, 9, 2)]);
        assert_eq!(fx, [WriteStatus]);
        assert!(matches!(m.stage, Stage::Restarting { .. }));
        let (m, fx) = step(m, started(MAIN, 0, 3));
        assert_eq!(fx, [KillNow(MAIN), WriteStatus]);
        let (m, fx) = step(m, exited(MAIN, 0, 137, 4));
        assert_eq!(fx, [WriteStatus, Start(SIDE)]);
        assert_eq!(m.container(MAIN).restart_count, 1);

        // The alias RestartPod parses as RestartAllContainers.
        assert_eq!(RuleAction::parse("RestartPod"), RuleAction::RestartAllContainers);
        assert_eq!(RuleAction::parse("Restart"), RuleAction::Restart);
        assert_eq!(RuleAction::parse("Frobnicate"), RuleAction::Other);
    }

    #[test]
    fn backoff_reset_is_configurable() {
        // (reset after, gap between the two failures in ms, restart immediate?)
        let cases = [("within_reset_backs_off", 600, 100_000, false), ("after_reset_starts_over", 60, 100_000, true)];
        for (name, reset, gap, immediate) in cases {
            let mut m = one(RestartPolicy::Always);
            m.backoff.reset = Duration::from_secs(reset);
            let (m, _) = run(m, vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 1, 2)]);
            let (m, fx) = run(m, vec![started(MAIN, 1, 3), exited(MAIN, 1, 1, 2 + gap)]);
            assert_eq!(fx.contains(&Start(MAIN)), immediate, "{name}");
            assert_eq!(m.container(MAIN).restart_count, if immediate { 2 } else { 1 }, "{name}");
        }
    }

    #[test]
    fn a_pod_whose_running_containers_the_runtime_kept_is_adopted_else_lost() {
        let s = |v: serde_json::Value| -> PodStatus { serde_json::from_value(v).unwrap() };
        let spec_ = summary(RestartPolicy::Never, vec![spec("agent", Sidecar)], vec![spec("main", Regular)]);
        let backoff = backoff();
        let cs = |name: &str, id: &str, rc: i32, state: serde_json::Value, last: serde_json::Value| {
            serde_json::json!({"name": name, "image": "", "imageID": "", "ready": true, "started": true,
                "restartCount": rc, "containerID": id, "state": state, "lastState": last})
        };
        let running = serde_json::json!({"running": {"startedAt": "2024-01-01T00:00:00Z"}});
        let failed = serde_json::json!({"terminated": {"exitCode": 3, "reason": "Error"}});
        let none = serde_json::json!({});
        let initialized = serde_json::json!([{"type": "Initialized", "status": "True"}]);
        let status = |conditions: &serde_json::Value, agent: serde_json::Value, main: serde_json::Value| {
            s(serde_json::json!({"phase": "Running", "conditions": conditions,
                "initContainerStatuses": [agent], "containerStatuses": [main]}))
        };
        let kept = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<std::collections::HashSet<_>>();
        let both_running = status(
            &initialized,
            cs("agent", "process://1-1", 0, running.clone(), none.clone()),
            cs("main", "process://2-2", 1, running.clone(), failed.clone()),
        );
        // (behaviour, status, kept, adopted?)
        let cases = [
            (
                "every_running_container_kept_is_adopted",
                both_running.clone(),
                kept(&["process://1-1", "process://2-2"]),
                true,
            ),
            ("a_running_container_not_kept_loses_the_pod", both_running.clone(), kept(&["process://1-1"]), false),
            (
                "a_pod_still_initializing_is_not_adopted",
                status(
                    &serde_json::json!([{"type": "Initialized", "status": "False"}]),
                    cs("agent", "process://1-1", 0, running.clone(), none.clone()),
                    serde_json::json!({"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                        "state": {"waiting": {"reason": "PodInitializing"}}}),
                ),
                kept(&["process://1-1"]),
                false,
            ),
            (
                "a_pod_restarting_all_its_containers_is_not_adopted",
                status(
                    &serde_json::json!([{"type": "Initialized", "status": "True"}, {"type": ALL_RESTARTING, "status": "True"}]),
                    cs("agent", "process://1-1", 0, running.clone(), none.clone()),
                    cs("main", "process://2-2", 1, running.clone(), none.clone()),
                ),
                kept(&["process://1-1", "process://2-2"]),
                false,
            ),
            (
                "a_pending_pod_without_a_pod_restart_under_way_is_not_adopted",
                {
                    let mut st = status(
                        &initialized,
                        cs("agent", "process://1-1", 0, failed.clone(), none.clone()),
                        cs("main", "process://2-2", 1, failed.clone(), none.clone()),
                    );
                    st.phase = Some("Pending".into());
                    st
                },
                kept(&["process://1-1", "process://2-2"]),
                false,
            ),
        ];
        for (name, status, kept, adopted) in cases {
            match PodMachine::after_agent_restart(spec_.clone(), backoff, &status, t(100), &kept) {
                Found::Adopted(m) => {
                    assert!(adopted, "{name}: adopted");
                    assert_eq!(m.stage, Stage::Running, "{name}");
                    let main = m.container(MAIN);
                    assert!(matches!(main.state, CState::Running { startup_ok: true, .. }), "{name}: {main:?}");
                    assert_eq!(
                        (main.restart_count, main.container_id.as_deref()),
                        (1, Some("process://2-2")),
                        "{name}"
                    );
                    assert_eq!(main.last.as_ref().map(|l| l.exit_code), Some(3), "{name}");
                    let out = m.status(&placement(), &mut ConditionClock::default(), t(100));
                    assert_eq!(out.phase.as_deref(), Some("Running"), "{name}");
                    // An exit while no agent watched is handled as any exit: main (Never) ends the pod.
                    let (m, _) = run(m, vec![exited(MAIN, 1, 7, 101)]);
                    assert_eq!(terminated_code(&m, MAIN), Some((7, "Error".into())), "{name}");
                    assert_eq!(m.stage, Stage::Failed, "{name}");
                }
                Found::Lost(m) => {
                    assert!(!adopted, "{name}: lost");
                    assert_eq!(m.stage, Stage::Failed, "{name}");
                }
                Found::Fresh => panic!("{name}: fresh"),
            }
        }
    }

    #[test]
    fn a_pod_restart_under_way_is_adopted_stops_what_still_runs_then_starts_over() {
        let spec_ = summary(RestartPolicy::Never, vec![spec("agent", Sidecar)], vec![spec("main", Regular)]);
        let status: PodStatus = serde_json::from_value(serde_json::json!({"phase": "Pending",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": ALL_RESTARTING, "status": "True"}],
            "initContainerStatuses": [{"name": "agent", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "containerID": "process://1-1", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}],
            "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "started": true,
                "restartCount": 0, "containerID": "process://2-2",
                "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]}))
        .unwrap();
        let kept = ["process://1-1".to_string(), "process://2-2".to_string()].into_iter().collect();
        let Found::Adopted(m) = PodMachine::after_agent_restart(spec_, backoff(), &status, t(100), &kept) else {
            panic!("adopted")
        };
        assert_eq!(m.stage, Stage::Restarting { until: t(100) });
        assert!(matches!(m.container(MAIN).state, CState::Running { stopping: true, .. }), "main is to be stopped");
        assert_eq!(m.next_wakeup(), None, "nothing starts while main still runs");
        // Main's kill lands: the pod starts over, every container counting a restart.
        let (m, fx) = run(m, vec![exited(MAIN, 0, 137, 101)]);
        assert!(fx.contains(&Start(CRef::init(0))), "the sidecar starts first: {fx:?}");
        assert_eq!((m.container(CRef::init(0)).restart_count, m.container(MAIN).restart_count), (1, 1));
        let out = m.status(&placement(), &mut ConditionClock::default(), t(101));
        let restarting = out.conditions.unwrap().into_iter().find(|c| c.type_ == ALL_RESTARTING).unwrap();
        assert_eq!(restarting.status, "False");
    }

    /// The status of an agent (sidecar, startup probe) + main pod once its restart is over or
    /// under way: the condition's status, the agent's state (and containerID), main's state.
    fn restarted_status(
        condition: &str,
        agent: serde_json::Value,
        agent_id: &str,
        main: serde_json::Value,
    ) -> PodStatus {
        let last = serde_json::json!({"terminated": {"exitCode": 137, "reason": "Error"}});
        serde_json::from_value(serde_json::json!({"phase": "Pending",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": ALL_RESTARTING, "status": condition}],
            "initContainerStatuses": [{"name": "agent", "image": "", "imageID": "", "ready": false, "started": false,
                "restartCount": 1, "containerID": agent_id, "state": agent, "lastState": last}],
            "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "started": false,
                "restartCount": 1, "containerID": "process://2-1", "state": main,
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}))
        .unwrap()
    }

    #[test]
    fn a_pod_that_had_started_over_after_its_restart_goes_on_initializing_and_is_not_restarted_again() {
        let agent = with_probes(spec("agent", Sidecar), |p| p.startup = true);
        let spec_ = summary(RestartPolicy::Never, vec![agent], vec![spec("main", Regular)]);
        let running = serde_json::json!({"running": {"startedAt": "2024-01-01T00:00:00Z"}});
        let waiting = serde_json::json!({"waiting": {"reason": "PodInitializing"}});
        let killed = serde_json::json!({"terminated": {"exitCode": 137, "reason": "Error"}});
        let kept: std::collections::HashSet<String> = ["process://1-2".to_string()].into_iter().collect();
        // (case, status, adopted initializing: the agent's run goes on; else the restart starts over)
        let cases = [
            (
                "the agent runs again behind its startup probe, main waits",
                restarted_status("False", running.clone(), "process://1-2", waiting.clone()),
                true,
            ),
            (
                "the restart is under way (condition True)",
                restarted_status("True", running.clone(), "process://1-2", waiting.clone()),
                false,
            ),
            (
                "everything is down, the pod not started over yet",
                restarted_status("False", killed.clone(), "process://1-1", killed.clone()),
                false,
            ),
            (
                "the agent's run is not kept by the runtime",
                restarted_status("False", running.clone(), "process://1-3", waiting.clone()),
                false,
            ),
            (
                "main shows a run of its own",
                restarted_status("False", running.clone(), "process://1-2", running.clone()),
                false,
            ),
        ];
        for (name, status, initializing) in cases {
            let Found::Adopted(m) = PodMachine::after_agent_restart(spec_.clone(), backoff(), &status, t(100), &kept)
            else {
                panic!("{name}: adopted")
            };
            assert_eq!(matches!(m.stage, Stage::Initializing { current: 0 }), initializing, "{name}: {:?}", m.stage);
            if !initializing {
                continue;
            }
            let side = CRef::init(0);
            assert!(matches!(m.container(side).state, CState::Running { stopping: false, startup_ok: false, .. }));
            assert_eq!(m.next_wakeup(), None, "{name}: nothing to restart");
            let out = m.status(&placement(), &mut ConditionClock::default(), t(100));
            assert_eq!(out.phase.as_deref(), Some("Pending"), "{name}");
            // The barrier lifts: main starts, each container counting the one restart it had.
            let (m, fx) = run(m, vec![probe(side, 1, ProbeKind::Startup, true, 101)]);
            assert!(fx.contains(&Start(MAIN)), "{name}: main starts: {fx:?}");
            assert!(!fx.iter().any(|e| matches!(e, KillNow(_) | Kill { .. } | Stop(_))), "{name}: {fx:?}");
            assert_eq!((m.container(side).restart_count, m.container(MAIN).restart_count), (1, 1), "{name}");
            let (m, _) = run(m, vec![started(MAIN, 1, 102)]);
            let out = m.status(&placement(), &mut ConditionClock::default(), t(102));
            assert_eq!(out.phase.as_deref(), Some("Running"), "{name}: the restart is over");
        }
        // The first initialization (no pod restart yet) goes on the same way.
        let mut first = restarted_status("False", running, "process://1-2", waiting);
        first.conditions = Some(vec![]);
        for cs in first.init_container_statuses.iter_mut().chain(first.container_statuses.iter_mut()).flatten() {
            (cs.restart_count, cs.last_state) = (0, None);
        }
        let Found::Adopted(m) = PodMachine::after_agent_restart(spec_, backoff(), &first, t(100), &kept) else {
            panic!("the first initialization: adopted")
        };
        assert_eq!((m.stage, m.all_restarting, m.pod_restarting), (Stage::Initializing { current: 0 }, None, false));
        let (m, fx) = run(m, vec![probe(CRef::init(0), 0, ProbeKind::Startup, true, 101)]);
        assert!(fx.contains(&Start(MAIN)), "the first initialization: main starts: {fx:?}");
        assert_eq!(m.container(MAIN).restart_count, 0);
    }

    #[test]
    fn an_adopted_pod_restarts_a_sidecar_that_ended_while_the_agent_was_down() {
        let spec_ = summary(RestartPolicy::Never, vec![spec("agent", Sidecar)], vec![spec("main", Regular)]);
        let backoff = backoff();
        let status: PodStatus = serde_json::from_value(serde_json::json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "agent", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "containerID": "process://1-1", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": true, "started": true,
                "restartCount": 0, "containerID": "process://2-2",
                "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]}))
        .unwrap();
        let kept = ["process://1-1".to_string(), "process://2-2".to_string()].into_iter().collect();
        let Found::Adopted(m) = PodMachine::after_agent_restart(spec_, backoff, &status, t(100), &kept) else {
            panic!("adopted")
        };
        let (m, fx) = run(m, vec![Event::Tick { at: t(100) }]);
        assert!(fx.contains(&Start(CRef::init(0))), "the sidecar restarts: {fx:?}");
        assert_eq!(m.container(CRef::init(0)).restart_count, 1);
        assert!(matches!(m.container(MAIN).state, CState::Running { .. }));
    }

    #[test]
    fn an_adopted_container_that_was_waiting_to_restart_restarts_at_once() {
        let spec_ = summary(RestartPolicy::Always, vec![], vec![spec("main", Regular)]);
        let backoff = backoff();
        let status: PodStatus = serde_json::from_value(serde_json::json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "containerID": "process://9-9"}}}]}))
        .unwrap();
        let kept = ["process://9-9".to_string()].into_iter().collect();
        let Found::Adopted(m) = PodMachine::after_agent_restart(spec_, backoff, &status, t(100), &kept) else {
            panic!("adopted")
        };
        assert_eq!(m.next_wakeup(), Some(t(100)));
        let (m, fx) = run(m, vec![Event::Tick { at: t(100) }]);
        assert!(fx.contains(&Start(MAIN)), "{fx:?}");
        assert_eq!(m.container(MAIN).restart_count, 3);
    }

    #[test]
    fn after_agent_restart_table() {
        let s = |v: serde_json::Value| -> PodStatus { serde_json::from_value(v).unwrap() };
        let spec_ = PodSpecSummary {
            restart_policy: RestartPolicy::Never,
            init: vec![spec("setup", Init)],
            containers: vec![spec("main", Regular)],
            active_deadline: None,
        };
        let backoff = backoff();
        let running = serde_json::json!({"running": {"startedAt": "2024-01-01T00:00:00Z"}});
        let done = serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let waiting = serde_json::json!({"waiting": {"reason": "PodInitializing"}});
        // (behaviour, status, failed?, main's (code, reason) when failed)
        let cases = vec![
            ("nothing_reported_starts_normally", s(serde_json::json!({"phase": "Pending"})), None),
            (
                "init_not_started_starts_normally",
                s(
                    serde_json::json!({"phase": "Pending", "initContainerStatuses": [{"name": "setup", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": waiting}]}),
                ),
                None,
            ),
            (
                "running_main_is_lost",
                s(serde_json::json!({"phase": "Running",
                    "initContainerStatuses": [{"name": "setup", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": done}],
                    "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": true, "restartCount": 2, "containerID": "sim://1", "state": running}]})),
                Some((137, LOST_CONTAINER_REASON.to_string(), 2)),
            ),
            (
                "running_init_is_lost_main_stays_waiting",
                s(serde_json::json!({"phase": "Pending",
                    "initContainerStatuses": [{"name": "setup", "image": "", "imageID": "", "ready": false, "restartCount": 0, "containerID": "sim://2", "state": running}],
                    "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": waiting}]})),
                Some((-1, String::new(), 0)),
            ),
        ];
        for (name, status, want) in cases {
            let m = match PodMachine::after_agent_restart(spec_.clone(), backoff, &status, t(100), &Default::default())
            {
                Found::Fresh => None,
                Found::Lost(m) => Some(m),
                Found::Adopted(m) => panic!("{name}: adopted with nothing kept: {m:?}"),
            };
            match (m, want) {
                (None, None) => {}
                (Some(m), Some((code, reason, rc))) => {
                    assert_eq!(m.stage, Stage::Failed, "{name}");
                    let out = m.status(&placement(), &mut ConditionClock::default(), t(100));
                    assert_eq!(out.phase.as_deref(), Some("Failed"), "{name}");
                    assert_eq!(out.message.as_deref(), Some(LOST_POD_MESSAGE), "{name}");
                    assert_eq!(out.reason, None, "{name}");
                    let main = &out.container_statuses.unwrap()[0];
                    if code < 0 {
                        assert_eq!(terminated_code(&m, MAIN), None, "{name}");
                        let it = terminated_code(&m, CRef::init(0)).unwrap();
                        assert_eq!(it, (137, LOST_CONTAINER_REASON.into()), "{name}");
                        assert!(main.state.as_ref().unwrap().waiting.is_some(), "{name}");
                    } else {
                        let t = main.state.clone().unwrap().terminated.unwrap();
                        assert_eq!((t.exit_code, t.reason.unwrap(), main.restart_count), (code, reason, rc), "{name}");
                        assert_eq!(t.message.as_deref(), Some(LOST_CONTAINER_MESSAGE), "{name}");
                        assert_eq!(terminated_code(&m, CRef::init(0)), Some((0, "Completed".into())), "{name}");
                    }
                }
                (m, want) => panic!("{name}: got {:?}, want {want:?}", m.map(|m| m.stage)),
            }
        }
    }

    fn placement() -> Placement {
        Placement {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            host_ip: "172.18.0.2".into(),
            pod_ip: "10.0.1.1".into(),
        }
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn status_rendering() {
        let mut clock = ConditionClock::default();
        let (m, _) = run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 10)]);
        let s = m.status(&placement(), &mut clock, t(10));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.1.1"));
        assert_eq!(s.host_ip.as_deref(), Some("172.18.0.2"));
        assert_eq!(s.start_time, Some(Time(t(0))));
        for c in ["PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"] {
            assert_eq!(cond(&s, c).status, "True", "{c}");
        }
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready && cs.started == Some(true));
        assert_eq!(cs.container_id.as_deref(), Some("sim://0"));
        assert_eq!(cs.last_state, Some(ApiState::default()));

        let (m, _) = step(m, exited(MAIN, 0, 3, 60));
        let s = m.status(&placement(), &mut clock, t(60));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let ready = cond(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ContainersNotReady")));
        assert_eq!(ready.last_transition_time, Some(Time(t(60))));
        // Unchanged conditions keep their transition time.
        assert_eq!(cond(&s, "PodScheduled").last_transition_time, Some(Time(t(10))));
        let term = s.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(term.exit_code, 3);
        assert_eq!(term.reason.as_deref(), Some("Error"));
        assert_eq!(term.started_at, Some(Time(t(10))));
        assert_eq!(term.finished_at, Some(Time(t(60))));

        let (m, _) =
            run(one(RestartPolicy::Never), vec![Event::Admit { at: t(0) }, started(MAIN, 0, 1), exited(MAIN, 0, 0, 2)]);
        let s = m.status(&placement(), &mut ConditionClock::default(), t(2));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn spec_summary_from_a_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "restartPolicy": "OnFailure",
                "activeDeadlineSeconds": 30,
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}],
                "containers": [{"name": "main", "image": "busybox", "restartPolicy": "Never",
                    "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}]
            }
        }))
        .unwrap();
        let s = PodSpecSummary::of(&pod);
        assert_eq!(s.restart_policy, RestartPolicy::OnFailure);
        assert_eq!(s.active_deadline, Some(Duration::from_secs(30)));
        assert_eq!(s.init.iter().map(|c| c.kind).collect::<Vec<_>>(), [Sidecar, Init]);
        assert_eq!(
            s.containers[0].rules,
            [RestartRule { action: RuleAction::Restart, operator_in: Some(true), values: vec![42] }]
        );
        assert_eq!(s.containers[0].image, "busybox");
        assert_eq!(PodSpecSummary::of(&Pod::default()).restart_policy, RestartPolicy::Always);
    }
}
