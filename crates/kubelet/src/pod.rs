//! The per-pod state machine (krustlet style): explicit states, and transitions as a pure
//! function [`step`]`(machine, event) -> (machine, effects)`. The agent's pod worker feeds it
//! events (the pod was admitted, a container started or exited, a timer fired, the pod is being
//! deleted) and carries out the effects (start or stop a container, write the status, confirm the
//! deletion). Nothing here does I/O or reads the clock: every event carries its time.
//!
//! Semantics follow kubelet (job-semantics.md §4):
//! - init containers run first, in order; a sidecar (init container with `restartPolicy: Always`)
//!   counts as done once started and keeps running beside the regular containers;
//! - a container that exits is restarted in place (`restartCount`+1) when its container-level
//!   `restartPolicy`/`restartPolicyRules` or else the pod's `restartPolicy` says so (§4.2
//!   `ContainerShouldRestart`); init containers are only restarted after a failure; the first
//!   restart is immediate, later ones wait a CrashLoopBackOff delay doubling from the base up to
//!   the cap, reset once a container ran twice the cap;
//! - phase (§4.1): Pending until the regular containers start; Running; once every regular
//!   container has terminated for good, Succeeded if all exited 0, else Failed; a non-restartable
//!   init failure fails the pod; sidecars are then stopped;
//! - a pod being deleted is never restarted: running containers are stopped (a simulated kill
//!   exits 143), the pod ends Failed unless it had already finished, its final status is
//!   written, then the deletion is confirmed;
//! - `activeDeadlineSeconds`: stopped and Failed with reason `DeadlineExceeded`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::runtime::ContainerKind;

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

/// One entry of a container's `restartPolicyRules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartRule {
    /// The action is `Restart` (other actions fall through to the container policy).
    pub restart: bool,
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

/// What the state machine needs of a container's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub kind: ContainerKind,
    pub restart_policy: Option<RestartPolicy>,
    pub rules: Vec<RestartRule>,
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
                    restart: r.action == "Restart",
                    operator_in: match ec.map(|e| e.operator.as_str()) {
                        Some("In") => Some(true),
                        Some("NotIn") => Some(false),
                        _ => None,
                    },
                    values: ec.and_then(|e| e.values.clone()).unwrap_or_default(),
                }
            })
            .collect();
        ContainerSpec { name: c.name.clone(), image: c.image.clone().unwrap_or_default(), kind, restart_policy, rules }
    }
}

/// kubelet's `ContainerShouldRestart` (§4.2): container-level rules and policy when the container
/// sets a `restartPolicy`, else the pod's policy.
pub fn should_restart(c: &ContainerSpec, pod_policy: RestartPolicy, exit_code: i32) -> bool {
    match c.restart_policy {
        Some(policy) => {
            if let Some(rule) = c.rules.iter().find(|r| r.matches(exit_code))
                && rule.restart
            {
                return true;
            }
            policy.restarts(exit_code)
        }
        None => pod_policy.restarts(exit_code),
    }
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
        ready: bool,
        stopping: bool,
    },
    /// CrashLoopBackOff: restarts at `until`.
    BackOff {
        until: Timestamp,
        delay: Duration,
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
            backoff: Duration::ZERO,
            backoff_at: None,
        }
    }

    fn is_active(&self) -> bool {
        matches!(self.state, CState::Starting { .. } | CState::Running { .. })
    }

    fn has_started(&self) -> bool {
        !matches!(self.state, CState::Waiting | CState::Starting { .. }) || self.restart_count > 0
    }

    fn is_ready(&self) -> bool {
        match &self.state {
            CState::Running { ready, stopping, .. } => *ready && !*stopping,
            CState::Terminated(t) => self.spec.kind == ContainerKind::Init && t.exit_code == 0,
            _ => false,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, CState::Terminated(t) if t.exit_code == 0)
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
    /// The agent takes the pod on: start it.
    Admit { at: Timestamp },
    /// A run the machine asked for is up.
    Started { c: CRef, restart_count: u32, id: String, ready: bool, at: Timestamp },
    /// A run the machine asked for could not start.
    StartFailed { c: CRef, restart_count: u32, message: String, at: Timestamp },
    /// A run ended. `reason: None` means `Completed` for code 0, else `Error`.
    Exited {
        c: CRef,
        restart_count: u32,
        exit_code: i32,
        reason: Option<String>,
        message: Option<String>,
        at: Timestamp,
    },
    /// Time passed (backoff delays, the active deadline).
    Tick { at: Timestamp },
    /// The pod got a deletionTimestamp.
    Delete { at: Timestamp },
}

impl Event {
    pub fn at(&self) -> Timestamp {
        match self {
            Event::Admit { at }
            | Event::Started { at, .. }
            | Event::StartFailed { at, .. }
            | Event::Exited { at, .. }
            | Event::Tick { at }
            | Event::Delete { at } => *at,
        }
    }
}

/// An output of the state machine, for the worker to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Start a run of the container (its `restart_count` is the run's number).
    Start(CRef),
    /// Stop the running container.
    Stop(CRef),
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
            Stage::New | Stage::Initializing { .. } => "Pending",
            Stage::Running | Stage::Terminating => {
                if self.containers.iter().any(ContainerRun::has_started) {
                    "Running"
                } else {
                    "Pending"
                }
            }
            Stage::Succeeded => "Succeeded",
            Stage::Failed => "Failed",
        }
    }

    /// When the machine wants a [`Event::Tick`]: the earliest backoff expiry or the active deadline.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        if !matches!(self.stage, Stage::Initializing { .. } | Stage::Running) {
            return None;
        }
        let backoffs = self.init.iter().chain(&self.containers).filter_map(|c| match c.state {
            CState::BackOff { until, .. } => Some(until),
            _ => None,
        });
        let deadline = self.deadline();
        backoffs.chain(deadline).min()
    }

    fn deadline(&self) -> Option<Timestamp> {
        Some(self.start_time? + self.spec.active_deadline?)
    }

    fn start(&mut self, c: CRef, fx: &mut Vec<Effect>) {
        self.container_mut(c).state = CState::Starting { stop: false };
        fx.push(Effect::Start(c));
    }

    /// Moves init forward: starts the next init container, or the regular containers once all are done.
    fn advance(&mut self, fx: &mut Vec<Effect>) {
        let pending = self.init.iter().position(|c| match c.spec.kind {
            ContainerKind::Sidecar => !c.has_started(),
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

    fn schedule_restart(&mut self, c: CRef, term: Termination, at: Timestamp, fx: &mut Vec<Effect>) {
        let Backoff { base, max } = self.backoff;
        let run = self.container_mut(c);
        if run.backoff_at.is_some_and(|prev| {
            at.duration_since(prev) > jiff::SignedDuration::try_from(max * 2).unwrap_or(jiff::SignedDuration::MAX)
        }) {
            run.backoff = Duration::ZERO;
        }
        let delay = run.backoff;
        run.backoff = if delay.is_zero() { base } else { (delay * 2).min(max) };
        run.backoff_at = Some(at);
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
        self.stop_all(fx);
    }

    /// Stops every running container; containers waiting for a restart stay down.
    fn stop_all(&mut self, fx: &mut Vec<Effect>) {
        for c in self.refs() {
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
                _ => {}
            }
        }
    }

    fn begin_termination(&mut self, fx: &mut Vec<Effect>) {
        self.stage = Stage::Terminating;
        self.stop_all(fx);
    }

    fn on_exit(&mut self, c: CRef, term: Termination, at: Timestamp, fx: &mut Vec<Effect>) {
        fx.push(Effect::WriteStatus);
        let code = term.exit_code;
        let pod_policy = self.spec.restart_policy;
        let run = self.container(c);
        let stopping = matches!(run.state, CState::Running { stopping: true, .. } | CState::Starting { stop: true });
        let live = matches!(self.stage, Stage::Initializing { .. } | Stage::Running);
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

    /// Terminating ends when nothing runs; a requested deletion is confirmed once the pod is
    /// terminal and nothing runs.
    fn settle(&mut self, fx: &mut Vec<Effect>) {
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
    match event {
        Event::Admit { at } => {
            if m.stage == Stage::New {
                m.start_time = Some(at);
                m.advance(&mut fx);
                fx.push(Effect::WriteStatus);
            }
        }
        Event::Started { c, restart_count, id, ready, at } => {
            let run = m.container_mut(c);
            if let CState::Starting { stop } = run.state
                && run.restart_count == restart_count
            {
                run.container_id = Some(id);
                run.state = CState::Running { started_at: at, ready, stopping: stop };
                if stop {
                    fx.push(Effect::Stop(c));
                }
                fx.push(Effect::WriteStatus);
                if run.spec.kind == ContainerKind::Sidecar && matches!(m.stage, Stage::Initializing { .. }) {
                    m.advance(&mut fx);
                }
            }
        }
        Event::StartFailed { c, restart_count, message, at } => {
            let run = m.container(c);
            if matches!(run.state, CState::Starting { .. }) && run.restart_count == restart_count {
                let term = termination(128, Some("StartError".into()), Some(message), None, at, None);
                m.on_exit(c, term, at, &mut fx);
            }
        }
        Event::Exited { c, restart_count, exit_code, reason, message, at } => {
            let run = m.container(c);
            if run.restart_count == restart_count
                && let CState::Running { started_at, .. } = run.state
            {
                let term = termination(exit_code, reason, message, Some(started_at), at, run.container_id.clone());
                m.on_exit(c, term, at, &mut fx);
            }
        }
        Event::Tick { at } => {
            if matches!(m.stage, Stage::Initializing { .. } | Stage::Running) {
                if m.deadline().is_some_and(|d| d <= at) {
                    m.reason = Some((
                        "DeadlineExceeded".into(),
                        "Pod was active on the node longer than the specified deadline".into(),
                    ));
                    m.begin_termination(&mut fx);
                    fx.push(Effect::WriteStatus);
                } else {
                    for c in m.refs() {
                        let run = m.container_mut(c);
                        if matches!(run.state, CState::BackOff { until, .. } if until <= at) {
                            run.restart_count += 1;
                            m.start(c, &mut fx);
                            fx.push(Effect::WriteStatus);
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
                    Stage::Initializing { .. } | Stage::Running => {
                        m.begin_termination(&mut fx);
                        fx.push(Effect::WriteStatus);
                    }
                    Stage::Terminating | Stage::Succeeded | Stage::Failed => {}
                }
            }
        }
    }
    m.settle(&mut fx);
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
        let initializing = matches!(self.stage, Stage::New | Stage::Initializing { .. });
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
            CState::Terminated(t) => ApiState { terminated: Some(terminated(t)), ..Default::default() },
        };
        ContainerStatus {
            name: run.spec.name.clone(),
            image: run.spec.image.clone(),
            image_id: if run.container_id.is_some() { format!("sim://{}", run.spec.image) } else { String::new() },
            container_id: run.container_id.clone(),
            ready: run.is_ready(),
            started: Some(matches!(run.state, CState::Running { .. })),
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
        cond("PodReadyToStartContainers", !terminal, None, None);
        let incomplete: Vec<&str> = self
            .init
            .iter()
            .filter(|c| match c.spec.kind {
                ContainerKind::Sidecar => !c.has_started(),
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
        let statuses = |runs: &[ContainerRun]| runs.iter().map(|r| self.container_status(r, at)).collect::<Vec<_>>();
        PodStatus {
            phase: Some(self.phase().into()),
            conditions: Some(conditions),
            host_ip: Some(at.host_ip.clone()),
            host_ips: Some(vec![HostIP { ip: at.host_ip.clone() }]),
            pod_ip: Some(at.pod_ip.clone()),
            pod_ips: Some(vec![PodIP { ip: at.pod_ip.clone() }]),
            start_time: self.start_time.map(time),
            container_statuses: Some(statuses(&self.containers)),
            init_container_statuses: (!self.init.is_empty()).then(|| statuses(&self.init)),
            reason: self.reason.as_ref().map(|r| r.0.clone()),
            message: self.reason.as_ref().map(|r| r.1.clone()),
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
        ContainerSpec { name: name.into(), image: "img".into(), kind, restart_policy, rules: vec![] }
    }

    fn pod(policy: RestartPolicy, init: Vec<ContainerSpec>, containers: Vec<ContainerSpec>) -> PodMachine {
        PodMachine::new(
            PodSpecSummary { restart_policy: policy, init, containers, active_deadline: None },
            Backoff { base: Duration::from_secs(10), max: Duration::from_secs(300) },
        )
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
        let rule = |restart, op: Option<bool>, values: &[i32]| RestartRule {
            restart,
            operator_in: op,
            values: values.to_vec(),
        };
        let c = |policy: Option<RestartPolicy>, rules: Vec<RestartRule>| ContainerSpec {
            name: "c".into(),
            image: String::new(),
            kind: Regular,
            restart_policy: policy,
            rules,
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
        c.rules = vec![RestartRule { restart: true, operator_in: Some(true), values: vec![42] }];
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
                Event::StartFailed { c: MAIN, restart_count: 0, message: "bad".into(), at: t(1) },
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
        assert_eq!(s.containers[0].rules, [RestartRule { restart: true, operator_in: Some(true), values: vec![42] }]);
        assert_eq!(s.containers[0].image, "busybox");
        assert_eq!(PodSpecSummary::of(&Pod::default()).restart_policy, RestartPolicy::Always);
    }
}
