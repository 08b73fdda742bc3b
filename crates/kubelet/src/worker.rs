//! The per-pod worker: one task per pod bound to the node. It owns the pod's [`PodMachine`],
//! turns the world (pod updates, container exits, timers) into events, and carries out the
//! effects (runtime calls, status writes, deletion confirmation). Writes wait while the node is
//! failed. A pod found already finished is left alone (only its deletion is confirmed). An
//! unfinished pod found at start (an agent restart) whose status shows started containers is
//! marked Failed (its processes went with the old agent, see
//! [`PodMachine::after_agent_restart`]); one that had started nothing is started normally. A pod
//! is admitted once its volumes can be mounted ([`mount_errors`]); until then each try that fails
//! publishes kubelet's `FailedMount` Warning events.
//!
//! Per container run, a prober task ([`crate::probe::supervise`]) runs the postStart hook and the
//! probes and sends their result changes back as events; it is aborted when the run ends. A
//! graceful stop runs the container's preStop hook first (in a task of its own), bounded by the
//! grace period, then kills with what is left of it (at least
//! [`AgentConfig::min_kill_grace_after_pre_stop`](crate::AgentConfig) after a preStop hook).
//! A sidecar's preStop hook starts with the pod's termination, beside the regular containers';
//! the sidecar's own kill comes later and waits for that hook.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use crate::NodeContext;
use crate::node::FIELD_MANAGER;
use crate::pod::{
    Backoff, CRef, CState, ConditionClock, Effect, Event, Found, Placement, PodMachine, PodSpecSummary, StartFailure,
    step,
};
use crate::probe::{Action, ContainerProbes, Target};
use crate::runtime::volumes::{FAILED_MOUNT, mount_errors};
use crate::runtime::{Adopted, ContainerId, ContainerKind, ExitStatus, PodResources, StartRequest, log_path};

type Exit = BoxFuture<'static, (CRef, u32, ExitStatus)>;

/// How long to wait before retrying a failed write.
const RETRY: Duration = Duration::from_secs(1);

struct Worker {
    ctx: Arc<NodeContext>,
    api: Api<Pod>,
    pod: Arc<Pod>,
    machine: Option<PodMachine>,
    clock: ConditionClock,
    placement: Placement,
    exits: FuturesUnordered<Exit>,
    dirty: bool,
    delete_pending: bool,
    retry_at: Option<tokio::time::Instant>,
    /// The pod had finished before this worker saw it: its status is not ours to rewrite.
    adopted_finished: bool,
    resources: Arc<PodResources>,
    /// A start or mount failed for want of a ConfigMap or Secret: `resources` are read again
    /// before the next try.
    stale_resources: bool,
    /// Publishes the pod's events (as kubelet: reporting controller `kubelet`, the node as
    /// instance); made on first use.
    recorder: Option<kube::runtime::events::Recorder>,
    /// The prober task of each container's current run, by run number.
    probers: HashMap<CRef, (u32, AbortHandle)>,
    probe_tx: mpsc::UnboundedSender<Event>,
    /// preStop hooks under way (aborted if the pod is abandoned).
    stoppers: Vec<AbortHandle>,
    /// When the pod's grace period ends (set by its first graceful stop).
    term_deadline: Option<tokio::time::Instant>,
    /// Runs whose preStop hook already ran (sidecars' run beside the regular containers').
    pre_stopped: HashSet<(CRef, u32)>,
    /// Sidecars' preStop hooks started with the pod's termination: the sidecar's kill waits for
    /// its hook, as a container's SIGTERM always follows its preStop.
    early_pre_stops: HashMap<(CRef, u32), tokio::task::JoinHandle<()>>,
}

enum Flush {
    Done,
    Gone,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

impl Worker {
    fn machine(&self) -> &PodMachine {
        self.machine.as_ref().expect("the machine is only taken during a step")
    }

    fn container_spec(&self, c: CRef) -> k8s_openapi::api::core::v1::Container {
        let spec = self.pod.spec.as_ref();
        if c.init {
            spec.and_then(|s| s.init_containers.as_ref()).and_then(|v| v.get(c.index).cloned())
        } else {
            spec.and_then(|s| s.containers.get(c.index).cloned())
        }
        .unwrap_or_default()
    }

    /// The pod's `terminationGracePeriodSeconds` (probe and hook kills without their own).
    fn spec_grace(&self) -> Duration {
        let secs = self.pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| self.pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    /// Feeds one event, and the events its effects produce, through the machine.
    async fn handle(&mut self, event: Event) {
        let mut queue = VecDeque::from([event]);
        while let Some(ev) = queue.pop_front() {
            let (m, effects) = step(self.machine.take().expect("machine present"), ev);
            self.machine = Some(m);
            for e in effects {
                match e {
                    Effect::Mount => queue.push_back(self.mount().await),
                    Effect::Start(c) => queue.push_back(self.start(c).await),
                    Effect::Stop(c) => {
                        let now = tokio::time::Instant::now();
                        let first = self.term_deadline.is_none();
                        let deadline = *self.term_deadline.get_or_insert(now + self.grace());
                        let mut grace = deadline.saturating_duration_since(now);
                        if grace.is_zero() && !self.grace().is_zero() {
                            // The pod's grace period is over (sidecars stopped last): a short window.
                            grace = self.ctx.cfg.min_kill_grace_after_pre_stop;
                        }
                        if first {
                            self.pre_stop_sidecars(c, grace);
                        }
                        self.stop_probes(c);
                        self.stop(c, grace, true);
                    }
                    Effect::Kill { c, grace } => {
                        let grace = grace.unwrap_or_else(|| self.spec_grace());
                        self.stop(c, grace, true);
                    }
                    Effect::KillNow(c) => {
                        self.stop_probes(c);
                        self.stop(c, Duration::ZERO, false);
                    }
                    Effect::WriteStatus => self.dirty = !self.adopted_finished,
                    Effect::ConfirmDeletion => self.delete_pending = true,
                }
            }
        }
    }

    fn target(&self, c: CRef, id: String) -> Target {
        Target {
            runtime: self.ctx.runtime.clone(),
            id: ContainerId(id),
            pod_ip: self.placement.pod_ip.clone(),
            container: self.container_spec(c),
        }
    }

    fn stop_probes(&mut self, c: CRef) {
        if let Some((_, h)) = self.probers.remove(&c) {
            h.abort();
        }
    }

    /// Stops a run: its preStop hook first when `pre_stop` (and it has one, and it has not run
    /// yet), bounded by `grace`, then a kill with the rest of `grace`.
    fn stop(&mut self, c: CRef, grace: Duration, pre_stop: bool) {
        let run = self.machine().container(c);
        let Some(id) = run.container_id.clone() else { return };
        let restart_count = run.restart_count;
        let min = self.ctx.cfg.min_kill_grace_after_pre_stop;
        if let Some(hook_task) = self.early_pre_stops.remove(&(c, restart_count))
            && !grace.is_zero()
        {
            let target = self.target(c, id);
            let task = tokio::spawn(async move {
                let began = tokio::time::Instant::now();
                let _ = tokio::time::timeout(grace, hook_task).await;
                let rest = grace.saturating_sub(began.elapsed()).max(min);
                target.runtime.kill(&target.id, rest);
            });
            self.stoppers.push(task.abort_handle());
            return;
        }
        let hook = self.container_spec(c).lifecycle.and_then(|l| l.pre_stop).map(|h| Action::of_handler(&h));
        // No grace (a force deletion): no hook either.
        let hook = hook.filter(|_| pre_stop && !grace.is_zero() && self.pre_stopped.insert((c, restart_count)));
        let Some(hook) = hook else {
            self.ctx.runtime.kill(&ContainerId(id), grace);
            return;
        };
        let target = self.target(c, id);
        let task = tokio::spawn(async move {
            let began = tokio::time::Instant::now();
            if let Err(e) = crate::probe::run_handler(&target, &hook, grace).await {
                tracing::info!(container = %target.container.name, error = %e, "preStop hook failed");
            }
            let rest = grace.saturating_sub(began.elapsed()).max(min);
            target.runtime.kill(&target.id, rest);
        });
        self.stoppers.push(task.abort_handle());
    }

    /// At the start of a pod's termination, the sidecars' preStop hooks run beside the regular
    /// containers' (§4.4); the sidecars themselves are stopped last.
    fn pre_stop_sidecars(&mut self, stopping: CRef, grace: Duration) {
        let m = self.machine();
        let sidecars: Vec<(CRef, u32, String)> = (0..m.init.len())
            .map(CRef::init)
            .filter(|c| *c != stopping)
            .filter_map(|c| {
                let run = m.container(c);
                let running = matches!(run.state, crate::pod::CState::Running { stopping: false, .. });
                (run.spec.kind == ContainerKind::Sidecar && running)
                    .then(|| Some((c, run.restart_count, run.container_id.clone()?)))
                    .flatten()
            })
            .collect();
        for (c, rc, id) in sidecars {
            let Some(hook) = self.container_spec(c).lifecycle.and_then(|l| l.pre_stop) else { continue };
            self.pre_stopped.insert((c, rc));
            let target = self.target(c, id);
            let hook = Action::of_handler(&hook);
            let task = tokio::spawn(async move {
                if let Err(e) = crate::probe::run_handler(&target, &hook, grace).await {
                    tracing::info!(container = %target.container.name, error = %e, "preStop hook failed");
                }
            });
            self.stoppers.push(task.abort_handle());
            self.early_pre_stops.insert((c, rc), task);
        }
    }

    /// Reads the pod's ConfigMaps and Secrets again if a try failed for want of one.
    async fn refresh_resources(&mut self) {
        if self.stale_resources {
            match crate::resources::fetch(&self.ctx.client, &self.pod).await {
                Ok(r) => {
                    self.resources = Arc::new(r);
                    self.stale_resources = false;
                }
                Err(e) => {
                    tracing::warn!(pod = %self.placement.name, error = %e, "reading the pod's ConfigMaps and Secrets")
                }
            }
        }
    }

    /// kubelet's volume manager before any container starts: the volumes the containers mount
    /// must have their ConfigMaps and Secrets ([`mount_errors`]). If not, each failing volume
    /// goes out as a Warning event `FailedMount` and the machine waits to try again.
    async fn mount(&mut self) -> Event {
        self.refresh_resources().await;
        let failed = mount_errors(&self.pod, &self.resources);
        if failed.is_empty() {
            return Event::Admit { at: Timestamp::now() };
        }
        self.stale_resources = true;
        for f in &failed {
            tracing::info!(pod = %self.placement.name, volume = %f.volume, error = %f.message, "mounting a volume");
            self.warn(FAILED_MOUNT, "MountVolume", f.event_message()).await;
        }
        Event::MountFailed { at: Timestamp::now() }
    }

    /// Publishes a Warning event about the pod (not while the node is failed: nothing is written
    /// then); a failure is only logged. kubelet's events carry no `action`; events.k8s.io
    /// requires one.
    async fn warn(&mut self, reason: &str, action: &str, message: String) {
        use kube::Resource;
        use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
        if !*self.ctx.alive.borrow() {
            return;
        }
        let (client, node) = (&self.ctx.client, &self.ctx.node.name);
        let recorder = self.recorder.get_or_insert_with(|| {
            Recorder::new(client.clone(), Reporter { controller: "kubelet".into(), instance: Some(node.clone()) })
        });
        let ev = KubeEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &self.pod.object_ref(&())).await {
            tracing::warn!(pod = %self.placement.name, error = %e, "publishing an event failed");
        }
    }

    async fn start(&mut self, c: CRef) -> Event {
        self.refresh_resources().await;
        let run = self.machine().container(c);
        let restart_count = run.restart_count;
        let kind = run.spec.kind;
        let container = self.container_spec(c);
        let probes = ContainerProbes::of(&container);
        let p = &self.placement;
        let log = self
            .ctx
            .cfg
            .log_dir
            .as_ref()
            .map(|d| log_path(d, &p.namespace, &p.name, &p.uid, &container.name, restart_count));
        let req = StartRequest {
            pod: self.pod.clone(),
            container,
            kind,
            restart_count,
            node: self.ctx.node.clone(),
            default_run_duration: self.ctx.cfg.default_run_duration,
            log_path: log,
            pod_ip: self.placement.pod_ip.clone(),
            resources: self.resources.clone(),
        };
        match self.ctx.runtime.start(req).await {
            Ok(started) => {
                self.follow(c, restart_count, &started.id, started.exit, probes, tokio::time::Instant::now());
                Event::Started { c, restart_count, id: started.id.0, ready: started.ready, at: Timestamp::now() }
            }
            Err(e) => {
                let failure = StartFailure::of(e.1, &e.0);
                // The missing ConfigMap or Secret (or key) may be there for the next try.
                self.stale_resources |= failure == StartFailure::Config;
                let container = &self.machine().container(c).spec.name;
                tracing::info!(pod = %self.placement.name, %container, ?failure, error = %e, "starting a container");
                Event::StartFailed { c, restart_count, message: e.0, failure, at: Timestamp::now() }
            }
        }
    }

    /// Follows a run: its exit, and its hooks and probes (a prober task; `began` is when the
    /// container started, for initial delays).
    fn follow(
        &mut self,
        c: CRef,
        restart_count: u32,
        id: &ContainerId,
        exit: BoxFuture<'static, ExitStatus>,
        probes: ContainerProbes,
        began: tokio::time::Instant,
    ) {
        self.exits.push(async move { (c, restart_count, exit.await) }.boxed());
        self.stop_probes(c);
        if !probes.is_empty() {
            let target = self.target(c, id.0.clone());
            let task = crate::probe::supervise(target, probes, c, restart_count, began, self.probe_tx.clone());
            self.probers.insert(c, (restart_count, tokio::spawn(task).abort_handle()));
        }
    }

    /// Takes over the runs a previous agent left running (the machine shows them Running with
    /// their IDs); their postStart hooks already ran. Runs that do not match are dropped, which
    /// kills them.
    fn follow_adopted(&mut self, adopted: Vec<Adopted>) {
        for a in adopted {
            let m = self.machine();
            let Some(c) = m.refs_of(|run| run.container_id.as_deref() == Some(a.id.0.as_str())) else { continue };
            let run = m.container(c);
            if !matches!(run.state, CState::Running { .. }) || run.restart_count != a.restart_count {
                continue;
            }
            // A pod restart under way stops what still runs.
            let stop = matches!(run.state, CState::Running { stopping: true, .. });
            let mut probes = ContainerProbes::of(&self.container_spec(c));
            probes.post_start = None;
            let age = Timestamp::now().duration_since(a.started_at);
            let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
            let now = tokio::time::Instant::now();
            self.follow(c, a.restart_count, &a.id, a.exit, probes, now.checked_sub(age).unwrap_or(now));
            if stop {
                self.ctx.runtime.kill(&a.id, Duration::ZERO);
            }
        }
    }

    /// Something is to be written, the node is alive, and no failed write waits for its retry.
    fn can_flush(&self) -> bool {
        (self.dirty || self.delete_pending)
            && *self.ctx.alive.borrow()
            && self.retry_at.is_none_or(|t| t <= tokio::time::Instant::now())
    }

    /// Patches the pod's status, leaving the returned pod unparsed: nothing reads it, and at
    /// thousands of pods restarting at once parsing it was a noticeable share of the CPU.
    fn patch_status(&self, patch: &Patch<serde_json::Value>) -> BoxFuture<'static, kube::Result<()>> {
        let url = <Pod as kube::Resource>::url_path(&(), Some(&self.placement.namespace));
        let req = kube::core::Request::new(url).patch_subresource(
            "status",
            &self.placement.name,
            &PatchParams::apply(FIELD_MANAGER),
            patch,
        );
        let client = self.ctx.client.clone();
        async move { client.request_text(req.map_err(kube::Error::BuildRequest)?).await.map(drop) }.boxed()
    }

    /// Writes what is pending: the status, then the deletion confirmation.
    async fn flush(&mut self) -> Flush {
        self.retry_at = None;
        if self.dirty {
            let m = self.machine.as_ref().expect("machine present");
            let status = m.status(&self.placement, &mut self.clock, Timestamp::now());
            let mut status = serde_json::to_value(&status).unwrap_or_default();
            // kubelet's generateAPIPodStatus: a pod never leaves a terminal phase. One the API
            // shows Failed (the node lifecycle failed it while this node was cut off) stays so,
            // else the Job would see its replacement's predecessor active again.
            if let Some(phase) = api_terminal_phase(&self.pod)
                && status.get("phase").and_then(|p| p.as_str()) != Some(phase)
            {
                tracing::warn!(pod = %self.placement.name, phase, "pod attempted an illegal phase transition out of a terminal phase; keeping the API's");
                status["phase"] = json!(phase);
            }
            // Conditions merge by type: a reason or message that no longer applies is removed.
            if let Some(conds) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
                for c in conds.iter_mut().filter_map(|c| c.as_object_mut()) {
                    for key in ["reason", "message"] {
                        c.entry(key).or_insert(serde_json::Value::Null);
                    }
                }
            }
            let patch = Patch::Strategic(json!({"status": status}));
            match self.patch_status(&patch).await {
                Ok(_) => self.dirty = false,
                Err(e) if is_status(&e, 404) => return Flush::Gone,
                Err(e) => {
                    tracing::warn!(pod = %self.placement.name, error = %e, "writing the pod status");
                    self.retry_at = Some(tokio::time::Instant::now() + RETRY);
                    return Flush::Done;
                }
            }
        }
        if self.delete_pending {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(self.placement.uid.clone()), resource_version: None }),
                ..Default::default()
            };
            match self.api.delete(&self.placement.name, &dp).await {
                Ok(_) => self.delete_pending = false,
                Err(e) if is_status(&e, 404) || is_status(&e, 409) => self.delete_pending = false,
                Err(e) => {
                    tracing::warn!(pod = %self.placement.name, error = %e, "confirming the pod deletion");
                    self.retry_at = Some(tokio::time::Instant::now() + RETRY);
                }
            }
        }
        Flush::Done
    }

    /// Stops whatever still runs (the pod is gone or the agent shuts down).
    fn abandon(&mut self) {
        for (_, (_, h)) in self.probers.drain() {
            h.abort();
        }
        for h in self.stoppers.drain(..) {
            h.abort();
        }
        let m = self.machine();
        for c in m.init.iter().chain(&m.containers) {
            if matches!(c.state, crate::pod::CState::Running { .. })
                && let Some(id) = &c.container_id
            {
                self.ctx.runtime.kill(&ContainerId(id.clone()), Duration::ZERO);
            }
        }
    }
}

/// The pod's phase as the API shows it, when terminal (`Succeeded` or `Failed`).
fn api_terminal_phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref().filter(|p| matches!(*p, "Succeeded" | "Failed"))
}

fn sleep_until_ts(ts: Timestamp) -> tokio::time::Sleep {
    let d = ts.duration_since(Timestamp::now());
    // A millisecond late rather than early: the machine compares with the wall clock.
    let d = Duration::try_from(d).unwrap_or(Duration::ZERO) + Duration::from_millis(1);
    tokio::time::sleep(d)
}

/// Runs one pod until it is gone from the API (its sender is dropped) or the agent shuts down.
pub(crate) async fn run(ctx: Arc<NodeContext>, mut updates: watch::Receiver<Arc<Pod>>) {
    let pod = updates.borrow_and_update().clone();
    let meta = &pod.metadata;
    let status = pod.status.clone().unwrap_or_default();
    let placement = Placement {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        host_ip: ctx.node_ip.clone(),
        pod_ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| ctx.runtime.pod_ip()),
    };
    let backoff = Backoff {
        base: ctx.cfg.restart_backoff_base,
        max: ctx.cfg.restart_backoff_max,
        reset: ctx.cfg.restart_backoff_reset,
        create_retry: ctx.cfg.create_retry,
    };
    let spec = PodSpecSummary::of(&pod);
    let phase = status.phase.as_deref();
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    // Containers a previous agent left for a finished pod (a sidecar it had not stopped yet)
    // are taken too, and dropped below, which kills them.
    let adopted = ctx.runtime.adopt(&placement.uid);
    let kept: HashSet<String> = adopted.iter().map(|a| a.id.0.clone()).collect();
    let found = if finished {
        Found::Fresh
    } else {
        PodMachine::after_agent_restart(spec.clone(), backoff, &status, Timestamp::now(), &kept)
    };
    let was_lost = matches!(found, Found::Lost(_));
    let was_adopted = matches!(found, Found::Adopted(_));
    let machine = match found {
        _ if finished => PodMachine::finished(spec, backoff, phase == Some("Succeeded")),
        Found::Lost(m) | Found::Adopted(m) => m,
        Found::Fresh => PodMachine::fresh(spec, backoff, &status),
    };
    let (probe_tx, mut probe_rx) = mpsc::unbounded_channel();
    let mut w = Worker {
        api: Api::namespaced(ctx.client.clone(), &placement.namespace),
        clock: ConditionClock::from_conditions(status.conditions.as_deref().unwrap_or_default()),
        ctx: ctx.clone(),
        pod: pod.clone(),
        machine: Some(machine),
        placement,
        exits: FuturesUnordered::new(),
        dirty: was_lost,
        delete_pending: false,
        retry_at: None,
        adopted_finished: finished,
        resources: Arc::default(),
        stale_resources: false,
        recorder: None,
        probers: HashMap::new(),
        probe_tx,
        stoppers: Vec::new(),
        term_deadline: None,
        pre_stopped: HashSet::new(),
        early_pre_stops: HashMap::new(),
    };
    if was_lost {
        tracing::info!(pod = %w.placement.name, "the pod's containers are gone after an agent restart: failing it");
    }
    if was_adopted {
        tracing::info!(pod = %w.placement.name, "adopting the pod's containers after an agent restart");
        w.follow_adopted(adopted);
    } else {
        // Containers kept for a pod that is not adopted are killed.
        drop(adopted);
    }
    if !finished && !was_lost && !deleting(&pod) {
        match crate::resources::fetch(&ctx.client, &pod).await {
            Ok(r) => w.resources = Arc::new(r),
            Err(e) => tracing::warn!(pod = %w.placement.name, error = %e, "reading the pod's ConfigMaps and Secrets"),
        }
        if !was_adopted {
            let admit = w.mount().await;
            w.handle(admit).await;
        }
    }
    if deleting(&pod) {
        w.handle(Event::Delete { at: Timestamp::now() }).await;
    }
    let mut alive = ctx.alive.clone();
    loop {
        let wake = w.machine().next_wakeup();
        let waiting_to_write = w.dirty || w.delete_pending;
        let dead = !*alive.borrow_and_update();
        let flush = w.can_flush();
        // Biased: events that are already there (a killed container's exit, the restart that
        // follows) are handled before the status is written, so one write carries them all, as
        // kubelet's status manager writes only the latest status.
        tokio::select! {
            biased;
            changed = updates.changed() => {
                if changed.is_err() {
                    break;
                }
                let pod = updates.borrow_and_update().clone();
                let newly_deleting = deleting(&pod) && !w.machine().deletion_requested;
                w.pod = pod;
                if newly_deleting {
                    w.handle(Event::Delete { at: Timestamp::now() }).await;
                }
            }
            Some((c, restart_count, exit)) = w.exits.next(), if !w.exits.is_empty() => {
                if w.probers.get(&c).is_some_and(|(rc, _)| *rc == restart_count) {
                    w.stop_probes(c);
                }
                w.handle(Event::Exited {
                    c,
                    restart_count,
                    exit_code: exit.exit_code,
                    reason: exit.reason,
                    message: exit.message,
                    at: exit.finished_at,
                })
                .await;
            }
            Some(ev) = probe_rx.recv() => w.handle(ev).await,
            _ = sleep_until_ts(wake.unwrap_or_else(Timestamp::now)), if wake.is_some() => {
                w.handle(Event::Tick { at: Timestamp::now() }).await;
            }
            r = alive.changed(), if waiting_to_write && dead => {
                if r.is_err() {
                    break;
                }
            }
            _ = tokio::time::sleep_until(w.retry_at.unwrap_or_else(tokio::time::Instant::now)), if w.retry_at.is_some() => {
                w.retry_at = None;
            }
            _ = std::future::ready(()), if flush => {
                if let Flush::Gone = w.flush().await {
                    break;
                }
            }
        }
    }
    w.abandon();
    ctx.runtime.remove_pod(&w.placement.uid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_terminal_phase_the_api_shows_is_kept_over_the_agents_own() {
        let cases = [
            ("Failed by the node lifecycle", Some("Failed"), Some("Failed")),
            ("Succeeded", Some("Succeeded"), Some("Succeeded")),
            ("Running", Some("Running"), None),
            ("Pending", Some("Pending"), None),
            ("no phase", None, None),
        ];
        for (name, phase, kept) in cases {
            let pod: Pod =
                serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"phase": phase}})).unwrap();
            assert_eq!(api_terminal_phase(&pod), kept, "{name}");
        }
    }
}
