//! The AppWrapper state machine (upstream `appwrapper_controller.go` Reconcile), as a pure function
//! from the AppWrapper and what the shell observed to the status to write and the deletions to
//! make. Phases, condition reasons and messages are upstream's.
//!
//! Differences from upstream, all additive:
//! - a component counts as present when the shell finds it (by name, controlled by this
//!   AppWrapper), not only when a condition says it was created: a controller killed between a
//!   create and its status write cannot leak the object;
//! - deletion waits on the watches rather than a fixed 5 s poll (`Timing::poll` is the fallback);
//! - the `deletionOnFailureGracePeriod` pause starts once, when the AppWrapper fails (upstream
//!   restarts it on every reconcile in which deletion is still in progress).

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use jobset_api::appwrapper::keys::{
    DELETING_RESOURCES, DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, PODS_READY, QUOTA_RESERVED, RESOURCES_DEPLOYED,
    UNHEALTHY,
};
use jobset_api::appwrapper::{
    AppWrapper, AppWrapperComponentStatus, AppWrapperPhase, AppWrapperStatus, FaultTolerance, go_duration, podsets,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use AppWrapperPhase::*;

/// How often the controller looks again when no watch event is due.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// While deleting (upstream: 5 s) and while waiting for pods within a grace period.
    pub poll: Duration,
    /// Re-check of a Running AppWrapper with all pods ready (upstream: 1 min).
    pub ready_recheck: Duration,
    /// Retry of a failed component creation within the admission grace period (upstream: 1 s).
    pub create_retry: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll: Duration::from_secs(5),
            ready_recheck: Duration::from_secs(60),
            create_retry: Duration::from_secs(1),
        }
    }
}

/// What the shell found of one component (parallel to `spec.components`).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ComponentState {
    /// Not found (or never created).
    #[default]
    Absent,
    /// Found and controlled by this AppWrapper.
    Present {
        name: String,
        deleting: bool,
        /// A batch/v1 Job or kubeflow.org/v1 PyTorchJob with `Failed=True`.
        failed: bool,
    },
}

/// Counts over the pods labelled with the AppWrapper's name (upstream `getPodStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSummary {
    /// Pending pods, terminating ones included.
    pub pending: i32,
    /// Running pods not being deleted.
    pub running: i32,
    pub succeeded: i32,
    pub failed: i32,
    /// A failed pod's app container exited with a code that makes the failure terminal.
    pub terminal_failure: bool,
}

impl PodSummary {
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>, ft: &FaultTolerance) -> PodSummary {
        let mut s = PodSummary::default();
        for p in pods {
            let status = p.status.as_ref();
            match status.and_then(|s| s.phase.as_deref()) {
                Some("Pending") => s.pending += 1,
                Some("Running") if p.metadata.deletion_timestamp.is_none() => s.running += 1,
                Some("Succeeded") => s.succeeded += 1,
                Some("Failed") => {
                    s.failed += 1;
                    let codes = status
                        .and_then(|st| st.container_statuses.as_ref())
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
                        .map(|t| t.exit_code)
                        .filter(|&c| c != 0);
                    s.terminal_failure |= codes.into_iter().any(|c| ft.is_terminal_exit_code(c));
                }
                _ => {}
            }
        }
        s
    }
}

/// Everything the shell observed before deciding.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub components: Vec<ComponentState>,
    pub pods: PodSummary,
    /// Names of the labelled pods that still exist.
    pub pod_names: Vec<String>,
    /// Nodes flagged NoExecute for a resource a running pod of this AppWrapper uses.
    pub no_execute_nodes: BTreeSet<String>,
}

/// The result of trying to create component `index` this reconcile (phase Resuming).
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    Ok { index: usize, name: String, kind: String, api_version: String },
    Err { index: usize, message: String, fatal: bool },
}

/// A deletion to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Component by name; `force` = grace period 0.
    Component { index: usize, name: String, force: bool },
    /// A labelled pod, with grace period 0.
    Pod { name: String },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub status: AppWrapperStatus,
    pub deletions: Vec<Deletion>,
    pub add_finalizer: bool,
    pub remove_finalizer: bool,
    /// (reason, message) of Normal events, published after the status write.
    pub events: Vec<(&'static str, String)>,
    pub requeue_after: Option<Duration>,
    /// Phases entered this reconcile, in order (for the phase metric).
    pub transitions: Vec<AppWrapperPhase>,
}

pub struct SyncInput<'a> {
    pub aw: &'a AppWrapper,
    pub ft: &'a FaultTolerance,
    pub observed: &'a Observed,
    /// Outcomes of the creations the shell attempted (see [`to_create`]), in order.
    pub created: &'a [Created],
    pub now: Timestamp,
    pub timing: &'a Timing,
}

/// The components to create in phase Resuming: those whose own `ResourcesDeployed` is not True.
pub fn to_create(aw: &AppWrapper) -> Vec<usize> {
    let statuses = aw.status.as_ref().map(|s| s.component_status.as_slice()).unwrap_or_default();
    (0..aw.spec.components.len())
        .filter(|&i| !statuses.get(i).is_some_and(|c| cond_true(&c.conditions, RESOURCES_DEPLOYED)))
        .collect()
}

/// The status to write before the first attempt to create component `index` as `object`, as
/// upstream's `createComponent` does: the object's name, kind and apiVersion, and the component's
/// `ResourcesDeployed` Unknown (`ComponentCreationInitiated`), so what is being created is on
/// record whatever happens next. None when that condition exists already (a later attempt).
pub fn initiate(aw: &AppWrapper, index: usize, object: &Value, now: Timestamp) -> Option<AppWrapperStatus> {
    let mut status = aw.status.clone().unwrap_or_default();
    if status.component_status.get(index).is_some_and(|c| c.conditions.iter().any(|c| c.type_ == RESOURCES_DEPLOYED)) {
        return None;
    }
    if status.component_status.len() <= index {
        status.component_status.resize_with(index + 1, Default::default);
    }
    let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string();
    let cs = &mut status.component_status[index];
    cs.name = str_at("/metadata/name");
    cs.kind = str_at("/kind");
    cs.api_version = str_at("/apiVersion");
    set_condition_to(&mut cs.conditions, RESOURCES_DEPLOYED, "Unknown", "ComponentCreationInitiated", "", now);
    Some(status)
}

/// Whether the shell should create components before calling [`sync`].
pub fn creates(aw: &AppWrapper) -> bool {
    aw.metadata.deletion_timestamp.is_none() && aw.phase() == Some(Resuming) && !aw.spec.suspend
}

struct Machine<'a> {
    input: &'a SyncInput<'a>,
    plan: Plan,
}

pub fn sync(input: &SyncInput) -> Result<Plan, String> {
    let mut m =
        Machine { input, plan: Plan { status: input.aw.status.clone().unwrap_or_default(), ..Plan::default() } };
    m.run()?;
    Ok(m.plan)
}

impl Machine<'_> {
    fn now(&self) -> Timestamp {
        self.input.now
    }

    fn phase(&self) -> Option<AppWrapperPhase> {
        self.plan.status.phase
    }

    fn transition(&mut self, to: AppWrapperPhase) {
        self.plan.status.phase = Some(to);
        self.plan.transitions.push(to);
        // Our own status write triggers the next reconcile; this is the fallback.
        self.requeue(Duration::ZERO);
    }

    fn requeue(&mut self, after: Duration) {
        self.plan.requeue_after = Some(self.plan.requeue_after.map_or(after, |r| r.min(after)));
    }

    /// Requeue at `deadline` (if in the future); returns whether it is still ahead.
    fn wait_until(&mut self, deadline: Timestamp) -> bool {
        let left = deadline.duration_since(self.now());
        if left.is_positive() {
            self.requeue(left.unsigned_abs());
            true
        } else {
            false
        }
    }

    fn set(&mut self, t: &str, status: bool, reason: &str, message: &str) {
        let now = self.now();
        set_condition(&mut self.plan.status.conditions, t, status, reason, message, now);
    }

    /// Upstream `clearCondition`: False, only if it is True now.
    fn clear(&mut self, t: &str, reason: &str, message: &str) {
        if self.is_true(t) {
            self.set(t, false, reason, message);
        }
    }

    fn is_true(&self, t: &str) -> bool {
        cond_true(&self.plan.status.conditions, t)
    }

    fn since(&self, t: &str) -> Timestamp {
        self.plan
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.last_transition_time.0)
            .unwrap_or(self.now())
    }

    fn event(&mut self, reason: &'static str, message: String) {
        self.plan.events.push((reason, message));
    }

    fn suspended_externally(&mut self) -> bool {
        if !self.input.aw.spec.suspend {
            return false;
        }
        let phase = self.phase().map(|p| p.as_str()).unwrap_or_default();
        self.event("Suspending", format!("Externally suspended while in the {phase} phase"));
        self.transition(Suspending);
        true
    }

    /// Marks the AppWrapper unhealthy with `reason` and emits the matching event.
    fn unhealthy(&mut self, reason: &str, message: &str, event: String) {
        self.set(UNHEALTHY, true, reason, message);
        self.event("Unhealthy", event);
    }

    /// Upstream `resetOrFail`.
    fn reset_or_fail(&mut self, terminal: bool, increment: i32) {
        if !terminal && self.plan.status.resetting_count < self.input.ft.retry_limit {
            self.plan.status.resetting_count += increment;
            self.transition(Resetting);
        } else {
            self.transition(Failed);
        }
    }

    fn run(&mut self) -> Result<(), String> {
        let aw = self.input.aw;
        if aw.metadata.deletion_timestamp.is_some() {
            let has_finalizer =
                aw.metadata.finalizers.iter().flatten().any(|f| f == jobset_api::appwrapper::keys::FINALIZER);
            if has_finalizer {
                self.terminating();
            }
            return Ok(());
        }
        match self.phase() {
            None => {
                let mut statuses = Vec::with_capacity(aw.spec.components.len());
                for (i, c) in aw.spec.components.iter().enumerate() {
                    let pod_sets = podsets::component_pod_sets(c).map_err(|e| format!("spec.components[{i}]: {e}"))?;
                    statuses.push(AppWrapperComponentStatus { pod_sets, ..Default::default() });
                }
                self.plan.status.component_status = statuses;
                self.transition(Suspended);
            }
            Some(Suspended) => {
                if !aw.spec.suspend {
                    self.plan.add_finalizer = true;
                    for t in [QUOTA_RESERVED, RESOURCES_DEPLOYED] {
                        self.set(t, true, "Resuming", "Suspend is false");
                    }
                    for t in [PODS_READY, UNHEALTHY] {
                        self.set(t, false, "Resuming", "Suspend is false");
                    }
                    self.transition(Resuming);
                }
            }
            Some(Resuming) => self.resuming(),
            Some(Running) => self.running(),
            Some(Resetting) => self.resetting(),
            Some(Suspending) => self.suspending(),
            Some(Failed) => self.failed(),
            Some(Succeeded) => self.succeeded(),
            Some(Terminating) => {}
        }
        Ok(())
    }

    fn terminating(&mut self) {
        if self.is_true(RESOURCES_DEPLOYED) {
            if !self.delete_components() {
                if self.phase() != Some(Terminating) {
                    self.plan.status.phase = Some(Terminating);
                    self.plan.transitions.push(Terminating);
                }
                return;
            }
            self.set(RESOURCES_DEPLOYED, false, "Terminating", "Resources successfully deleted");
        }
        if self.is_true(QUOTA_RESERVED) {
            self.set(QUOTA_RESERVED, false, "Terminating", "No resources deployed");
        }
        self.plan.remove_finalizer = true;
    }

    fn resuming(&mut self) {
        if self.suspended_externally() {
            return;
        }
        let ft = self.input.ft;
        let statuses = &mut self.plan.status.component_status;
        if statuses.len() < self.input.aw.spec.components.len() {
            statuses.resize_with(self.input.aw.spec.components.len(), Default::default);
        }
        for c in self.input.created {
            match c {
                Created::Ok { index, name, kind, api_version } => {
                    let cs = &mut self.plan.status.component_status[*index];
                    cs.name = name.clone();
                    cs.kind = kind.clone();
                    cs.api_version = api_version.clone();
                    set_condition(
                        &mut cs.conditions,
                        RESOURCES_DEPLOYED,
                        true,
                        "ComponentCreatedSuccessfully",
                        "",
                        self.input.now,
                    );
                }
                Created::Err { index, message, fatal } => {
                    set_condition(
                        &mut self.plan.status.component_status[*index].conditions,
                        RESOURCES_DEPLOYED,
                        false,
                        "ComponentCreationErrored",
                        message,
                        self.input.now,
                    );
                    let deadline = self.since(RESOURCES_DEPLOYED) + ft.admission_grace_period;
                    if !fatal && self.now() < deadline {
                        let retry = self.input.timing.create_retry;
                        self.requeue(retry);
                        return;
                    }
                    let msg = format!("error creating components: {message}");
                    self.unhealthy("CreateFailed", &msg, format!("CreateFailed: {msg}"));
                    if *fatal {
                        self.transition(Failed);
                    } else {
                        self.reset_or_fail(false, 1);
                    }
                    return;
                }
            }
        }
        if to_create_in(&self.plan.status, self.input.aw.spec.components.len()).is_empty() {
            self.transition(Running);
        }
    }

    fn running(&mut self) {
        if self.suspended_externally() {
            return;
        }
        let obs = self.input.observed;
        let ft = self.input.ft;
        let expected_components = self.input.aw.spec.components.len();
        let deployed =
            obs.components.iter().filter(|c| matches!(c, ComponentState::Present { deleting: false, .. })).count();
        let failed_components =
            obs.components.iter().filter(|c| matches!(c, ComponentState::Present { failed: true, .. })).count();
        let pods = &obs.pods;
        let expected = podsets::expected_pods(&self.plan.status.component_status);

        if deployed != expected_components {
            let msg = format!("Only found {deployed} deployed components, but was expecting {expected_components}");
            self.unhealthy("MissingComponent", &msg, format!("MissingComponent: {msg}"));
            self.transition(Failed);
            return;
        }
        if failed_components > 0 {
            let msg = format!("Found {failed_components} failed components");
            self.unhealthy("FailedComponent", &msg, format!("FailedComponent: {msg}"));
            self.reset_or_fail(pods.terminal_failure, 1);
            return;
        }
        if pods.succeeded >= expected && pods.pending + pods.running + pods.failed == 0 {
            let msg = format!("{} pods succeeded and no running, pending, or failed pods", pods.succeeded);
            self.set(QUOTA_RESERVED, false, "Succeeded", &msg);
            self.set(RESOURCES_DEPLOYED, true, "Succeeded", &msg);
            self.transition(Succeeded);
            return;
        }
        if pods.failed > 0 {
            self.set(UNHEALTHY, true, "FoundFailedPods", "");
            let deadline = self.since(UNHEALTHY) + ft.failure_grace_period;
            if self.wait_until(deadline) {
                return;
            }
            self.event("Unhealthy", format!("FoundFailedPods: {} failed pods", pods.failed));
            self.reset_or_fail(pods.terminal_failure, 1);
            return;
        }
        if !obs.no_execute_nodes.is_empty() {
            let msg = super::autopilot::no_execute_message(&obs.no_execute_nodes);
            self.unhealthy("AutopilotNoExecute", &msg, format!("AutopilotNoExecute: {msg}"));
            self.reset_or_fail(false, 0);
            return;
        }
        self.clear(UNHEALTHY, "FoundNoFailedPods", "");
        if pods.running + pods.succeeded >= expected {
            let msg = format!("{} pods running; {} pods succeeded", pods.running, pods.succeeded);
            self.set(PODS_READY, true, "SufficientPodsReady", &msg);
            let recheck = self.input.timing.ready_recheck;
            self.requeue(recheck);
            return;
        }
        let msg =
            format!("{} pods pending; {} pods running; {} pods succeeded", pods.pending, pods.running, pods.succeeded);
        self.clear(PODS_READY, "InsufficientPodsReady", &msg);
        let grace = if pods.pending + pods.running + pods.succeeded >= expected {
            ft.warmup_grace_period
        } else {
            ft.admission_grace_period
        };
        let deadline = self.since(RESOURCES_DEPLOYED) + grace;
        if self.wait_until(deadline) {
            let poll = self.input.timing.poll;
            self.requeue(poll);
            return;
        }
        self.unhealthy("InsufficientPodsReady", &msg, format!("InsufficientPodsReady: {msg}"));
        self.reset_or_fail(pods.terminal_failure, 1);
    }

    fn resetting(&mut self) {
        if self.suspended_externally() {
            return;
        }
        self.clear(PODS_READY, "Resetting", "");
        if self.is_true(RESOURCES_DEPLOYED) {
            if !self.delete_components() {
                return;
            }
            self.set(RESOURCES_DEPLOYED, false, "Resetting", "Resources deleted for resetting AppWrapper");
        }
        // The pause counts from when the problem was detected, so a slow deletion eats into it.
        let deadline = self.since(UNHEALTHY) + self.input.ft.retry_pause_period;
        if self.wait_until(deadline) {
            return;
        }
        self.set(RESOURCES_DEPLOYED, true, "Resuming", "Reset complete; resuming");
        self.transition(Resuming);
    }

    fn suspending(&mut self) {
        if self.is_true(RESOURCES_DEPLOYED) {
            if !self.delete_components() {
                return;
            }
            self.set(RESOURCES_DEPLOYED, false, "Suspended", "Suspend is true");
        }
        self.set(QUOTA_RESERVED, false, "Suspended", "Suspend is true");
        self.clear(PODS_READY, "Suspended", "");
        self.clear(UNHEALTHY, "Suspended", "");
        self.transition(Suspended);
    }

    fn failed(&mut self) {
        let delay = self.input.ft.deletion_on_failure_grace_period;
        let suspend = self.input.aw.spec.suspend;
        if !delay.is_zero() && !suspend && self.is_true(RESOURCES_DEPLOYED) && !self.is_true(DELETING_RESOURCES) {
            let msg = format!("{DELETION_ON_FAILURE_GRACE_PERIOD_DURATION} has value {}", go_duration(delay));
            let paused = self
                .plan
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == DELETING_RESOURCES)
                .is_some_and(|c| c.reason == "DeletionPaused");
            if !paused {
                // A fresh pause, even if an earlier deletion left the condition False.
                self.plan.status.conditions.retain(|c| c.type_ != DELETING_RESOURCES);
            }
            self.set(DELETING_RESOURCES, false, "DeletionPaused", &msg);
            let deadline = self.since(DELETING_RESOURCES) + delay;
            if self.wait_until(deadline) {
                return;
            }
        }
        if self.is_true(RESOURCES_DEPLOYED) {
            if !self.delete_components() {
                return;
            }
            let msg = if !delay.is_zero() && suspend {
                "Kueue forced resource deletion by suspending AppWrapper"
            } else {
                "Resources deleted for failed AppWrapper"
            };
            self.set(RESOURCES_DEPLOYED, false, "Failed", msg);
        }
        self.set(QUOTA_RESERVED, false, "Failed", "No resources deployed");
    }

    fn succeeded(&mut self) {
        if !self.is_true(RESOURCES_DEPLOYED) {
            return;
        }
        let ttl = self.input.ft.success_ttl;
        // Measured from the last deployment, as upstream (success keeps the condition True).
        if self.wait_until(self.since(RESOURCES_DEPLOYED) + ttl) {
            return;
        }
        if !self.delete_components() {
            return;
        }
        let msg = format!("Time to live after success of {} expired", go_duration(ttl));
        self.set(RESOURCES_DEPLOYED, false, "Succeeded", &msg);
    }

    /// Upstream `deleteComponents`: true once no wrapped object and no labelled pod is left.
    fn delete_components(&mut self) -> bool {
        self.set(DELETING_RESOURCES, true, "DeletionInitiated", "");
        let obs = self.input.observed;
        let now = self.now();
        let deadline = self.since(DELETING_RESOURCES) + self.input.ft.forceful_deletion_grace_period;
        let expired = now > deadline;
        let mut remaining = vec![];
        for (i, c) in obs.components.iter().enumerate() {
            match c {
                ComponentState::Present { name, deleting, .. } => remaining.push((i, name.clone(), *deleting)),
                ComponentState::Absent => {
                    if let Some(cs) = self.plan.status.component_status.get_mut(i)
                        && cs.conditions.iter().any(|c| c.type_ == RESOURCES_DEPLOYED && c.status != "False")
                    {
                        set_condition(&mut cs.conditions, RESOURCES_DEPLOYED, false, "CompononetDeleted", "", now);
                    }
                }
            }
        }
        if remaining.is_empty() && obs.pod_names.is_empty() {
            self.set(DELETING_RESOURCES, false, "DeletionComplete", "");
            return true;
        }
        if expired && !obs.pod_names.is_empty() {
            self.plan.deletions.extend(obs.pod_names.iter().map(|name| Deletion::Pod { name: name.clone() }));
        }
        for (index, name, deleting) in remaining {
            // A DELETE already under way is not repeated until the grace period expires.
            let force = expired && obs.pod_names.is_empty();
            if !deleting || force {
                self.plan.deletions.push(Deletion::Component { index, name, force });
            }
        }
        let poll = self.input.timing.poll;
        self.requeue(poll);
        if !expired {
            self.wait_until(deadline + jiff::SignedDuration::from_millis(1));
        }
        false
    }
}

fn to_create_in(status: &AppWrapperStatus, n: usize) -> Vec<usize> {
    (0..n)
        .filter(|&i| !status.component_status.get(i).is_some_and(|c| cond_true(&c.conditions, RESOURCES_DEPLOYED)))
        .collect()
}

fn cond_true(conds: &[Condition], t: &str) -> bool {
    conds.iter().any(|c| c.type_ == t && c.status == "True")
}

/// `meta.SetStatusCondition`: reason and message always updated; `lastTransitionTime` only when
/// the status flips (or the condition is new).
pub fn set_condition(conds: &mut Vec<Condition>, t: &str, status: bool, reason: &str, message: &str, now: Timestamp) {
    set_condition_to(conds, t, if status { "True" } else { "False" }, reason, message, now);
}

/// [`set_condition`] with any status (`Unknown` included).
fn set_condition_to(conds: &mut Vec<Condition>, t: &str, s: &str, reason: &str, message: &str, now: Timestamp) {
    match conds.iter_mut().find(|c| c.type_ == t) {
        Some(c) => {
            if c.status != s {
                c.status = s.into();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.into();
            c.message = message.into();
        }
        None => conds.push(Condition {
            type_: t.into(),
            status: s.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
