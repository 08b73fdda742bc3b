//! The per-pod worker: one task per pod bound to the node. It owns the pod's [`PodMachine`],
//! turns the world (pod updates, container exits, timers) into events, and carries out the
//! effects (runtime calls, status writes, deletion confirmation). Writes wait while the node is
//! failed. A pod found already finished is left alone (only its deletion is confirmed); an
//! unfinished pod found at start (an agent restart) is run again from the beginning.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::watch;

use crate::NodeContext;
use crate::node::FIELD_MANAGER;
use crate::pod::{Backoff, CRef, ConditionClock, Effect, Event, Placement, PodMachine, PodSpecSummary, step};
use crate::runtime::{ContainerId, ExitStatus, PodResources, StartRequest, log_path};

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
                    Effect::Start(c) => queue.push_back(self.start(c).await),
                    Effect::Stop(c) => {
                        if let Some(id) = &self.machine().container(c).container_id {
                            self.ctx.runtime.kill(&ContainerId(id.clone()), self.grace());
                        }
                    }
                    Effect::WriteStatus => self.dirty = !self.adopted_finished,
                    Effect::ConfirmDeletion => self.delete_pending = true,
                }
            }
        }
    }

    async fn start(&mut self, c: CRef) -> Event {
        let run = self.machine().container(c);
        let restart_count = run.restart_count;
        let kind = run.spec.kind;
        let spec = self.pod.spec.as_ref();
        let container = if c.init {
            spec.and_then(|s| s.init_containers.as_ref()).map(|v| v[c.index].clone())
        } else {
            spec.map(|s| s.containers[c.index].clone())
        }
        .unwrap_or_default();
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
                let exit = started.exit;
                self.exits.push(async move { (c, restart_count, exit.await) }.boxed());
                Event::Started { c, restart_count, id: started.id.0, ready: started.ready, at: Timestamp::now() }
            }
            Err(e) => Event::StartFailed { c, restart_count, message: e.0, at: Timestamp::now() },
        }
    }

    /// Writes what is pending, if the node is alive: the status, then the deletion confirmation.
    async fn flush(&mut self) -> Flush {
        if !*self.ctx.alive.borrow() || self.retry_at.is_some_and(|t| t > tokio::time::Instant::now()) {
            return Flush::Done;
        }
        self.retry_at = None;
        if self.dirty {
            let m = self.machine.as_ref().expect("machine present");
            let status = m.status(&self.placement, &mut self.clock, Timestamp::now());
            let patch = Patch::Strategic(json!({"status": status}));
            match self.api.patch_status(&self.placement.name, &PatchParams::apply(FIELD_MANAGER), &patch).await {
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
    let backoff = Backoff { base: ctx.cfg.restart_backoff_base, max: ctx.cfg.restart_backoff_max };
    let spec = PodSpecSummary::of(&pod);
    let phase = status.phase.as_deref();
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    let machine = if finished {
        PodMachine::finished(spec, backoff, phase == Some("Succeeded"))
    } else {
        PodMachine::new(spec, backoff)
    };
    let mut w = Worker {
        api: Api::namespaced(ctx.client.clone(), &placement.namespace),
        clock: ConditionClock::from_conditions(status.conditions.as_deref().unwrap_or_default()),
        ctx: ctx.clone(),
        pod: pod.clone(),
        machine: Some(machine),
        placement,
        exits: FuturesUnordered::new(),
        dirty: false,
        delete_pending: false,
        retry_at: None,
        adopted_finished: finished,
        resources: Arc::default(),
    };
    if !finished && !deleting(&pod) {
        match crate::resources::fetch(&ctx.client, &pod).await {
            Ok(r) => w.resources = Arc::new(r),
            Err(e) => tracing::warn!(pod = %w.placement.name, error = %e, "reading the pod's ConfigMaps and Secrets"),
        }
        w.handle(Event::Admit { at: Timestamp::now() }).await;
    }
    if deleting(&pod) {
        w.handle(Event::Delete { at: Timestamp::now() }).await;
    }
    let mut alive = ctx.alive.clone();
    loop {
        if let Flush::Gone = w.flush().await {
            break;
        }
        let wake = w.machine().next_wakeup();
        let waiting_to_write = w.dirty || w.delete_pending;
        let dead = !*alive.borrow_and_update();
        tokio::select! {
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
            _ = sleep_until_ts(wake.unwrap_or_else(Timestamp::now)), if wake.is_some() => {
                w.handle(Event::Tick { at: Timestamp::now() }).await;
            }
            r = alive.changed(), if waiting_to_write && dead => {
                if r.is_err() {
                    break;
                }
            }
            _ = tokio::time::sleep_until(w.retry_at.unwrap_or_else(tokio::time::Instant::now)), if w.retry_at.is_some() => {}
        }
    }
    w.abandon();
    ctx.runtime.remove_pod(&w.placement.uid);
}
