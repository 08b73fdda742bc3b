//! The disruption controller: keeps each PodDisruptionBudget's status (`currentHealthy`,
//! `desiredHealthy`, `expectedPods`, `disruptionsAllowed`, `disruptedPods`,
//! `observedGeneration`, the `DisruptionAllowed` condition) as kube-controller-manager's
//! (`pkg/controller/disruption/disruption.go`) does; the eviction subresource spends what it
//! allows. A pod is healthy when Ready. The expected count is the number of selected pods for an
//! integer `minAvailable`, else the sum of the scales of the pods' controllers, where only
//! Deployments have one here (pods of a Job, JobSet or any other kind without a scale
//! subresource make the sync fail, as upstream's `getScaleController` does).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use jobset_api::pdb;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::core::{GroupVersionKind, Selector, SelectorExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::shared_pods::SharedPods;

/// Settings of the disruption controller.
#[derive(Debug, Clone)]
pub struct DisruptionConfig {
    /// How long an eviction's entry in `disruptedPods` waits for its pod to be deleted before
    /// the pod counts again (upstream's `DeletionTimeout`: 2 minutes).
    pub deletion_timeout: Duration,
    /// When a failed sync is retried.
    pub error_retry: Duration,
}

impl Default for DisruptionConfig {
    fn default() -> Self {
        DisruptionConfig { deletion_timeout: Duration::from_secs(120), error_retry: Duration::from_secs(1) }
    }
}

/// A pod's controller and its scale, as `getExpectedScale`'s finders report it: `Ok(None)` when
/// no controller of that reference exists.
pub type ScaleOf<'a> = dyn Fn(&OwnerReference) -> Result<Option<(String, i32)>, String> + 'a;

/// What a sync writes: the new status (`None` when the stored one is current) and when to look
/// again (the first pending eviction's deadline).
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub status: Option<Value>,
    pub recheck_after: Option<Duration>,
}

fn controller_of(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))
}

fn ready(pod: &Pod) -> bool {
    let conds = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conds.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `getExpectedScale`: the summed scale of the controllers of `pods` (pods nothing controls are
/// left out).
fn expected_scale(pods: &[&Pod], scale_of: &ScaleOf<'_>) -> Result<i32, String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    for p in pods {
        let Some(r) = controller_of(p) else { continue };
        if scales.contains_key(&r.uid) {
            continue;
        }
        match scale_of(r)? {
            Some((uid, n)) => scales.insert(uid, n),
            None => return Err(format!("found no controllers for pod {:?}", p.name_any())),
        };
    }
    Ok(scales.values().sum())
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp: true)`.
fn scaled(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            Ok(((p * i64::from(total) + 99) / 100) as i32)
        }
    }
}

/// `getExpectedPodCount`: (expected pods, desired healthy).
fn expected_and_desired(
    budget: &PodDisruptionBudget,
    pods: &[&Pod],
    scale_of: &ScaleOf<'_>,
) -> Result<(i32, i32), String> {
    let spec = budget.spec.as_ref();
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        let expected = expected_scale(pods, scale_of)?;
        return Ok((expected, (expected - scaled(max, expected)?).max(0)));
    }
    match spec.and_then(|s| s.min_available.as_ref()) {
        Some(IntOrString::Int(n)) => Ok((pods.len() as i32, *n)),
        Some(pct) => {
            let expected = expected_scale(pods, scale_of)?;
            Ok((expected, scaled(pct, expected)?))
        }
        None => Ok((0, 0)),
    }
}

fn to_jiff(t: &Time) -> Timestamp {
    t.0
}

fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `failSafe`: a sync that failed leaves no disruption allowed, and says why in a
/// `DisruptionAllowed=False` condition (`SyncFailed`); the sync is retried.
pub fn fail_safe(budget: &PodDisruptionBudget, err: &str, now: Timestamp, cfg: &DisruptionConfig) -> Plan {
    let stored = serde_json::to_value(budget).unwrap_or_default();
    let mut status = stored.get("status").cloned().unwrap_or_else(|| json!({}));
    status["disruptionsAllowed"] = json!(0);
    pdb::set_condition(&mut status, pdb::DISRUPTION_ALLOWED, "False", pdb::SYNC_FAILED, err, &rfc3339(now));
    let changed = stored.get("status") != Some(&status);
    Plan { status: changed.then_some(status), recheck_after: Some(cfg.error_retry) }
}

/// One sync of `budget` over the pods its selector picks (`trySync`, with `failSafe` when it
/// fails): the status kube's disruption controller would write, if it differs.
pub fn plan(
    budget: &PodDisruptionBudget,
    pods: &[&Pod],
    scale_of: &ScaleOf<'_>,
    now: Timestamp,
    cfg: &DisruptionConfig,
) -> Plan {
    let stored = serde_json::to_value(budget).unwrap_or_default();
    let now_text = rfc3339(now);
    let generation = budget.metadata.generation.unwrap_or(0);
    let (expected, desired) = match expected_and_desired(budget, pods, scale_of) {
        Ok(v) => v,
        Err(e) => return fail_safe(budget, &e, now, cfg),
    };
    let timeout = jiff::SignedDuration::try_from(cfg.deletion_timeout).unwrap_or(jiff::SignedDuration::MAX);
    let recorded = budget.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    let mut disrupted: BTreeMap<String, Time> = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    for p in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let Some(at) = recorded.and_then(|m| m.get(&p.name_any())) else { continue };
        let deadline = to_jiff(at).checked_add(timeout).unwrap_or(Timestamp::MAX);
        if deadline >= now {
            recheck = Some(recheck.map_or(deadline, |r| r.min(deadline)));
            disrupted.insert(p.name_any(), at.clone());
        }
    }
    let current = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !disrupted.contains_key(&p.name_any()) && ready(p))
        .count() as i32;
    let allowed = if expected <= 0 { 0 } else { (current - desired).max(0) };
    let recheck_after = recheck.map(|r| Duration::try_from(r.duration_since(now)).unwrap_or_default());
    let s = budget.status.as_ref();
    let same = s.is_some_and(|s| {
        [s.current_healthy, s.desired_healthy, s.expected_pods, s.disruptions_allowed].map(|n| n.unwrap_or(0))
            == [current, desired, expected, allowed]
            && s.disrupted_pods.clone().unwrap_or_default() == disrupted
            && s.observed_generation.unwrap_or(0) == generation
    });
    if same && pdb::conditions_are_up_to_date(&stored) {
        return Plan { status: None, recheck_after };
    }
    let mut status = json!({
        "currentHealthy": current,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation,
    });
    if !disrupted.is_empty() {
        status["disruptedPods"] = serde_json::to_value(&disrupted).unwrap_or_default();
    }
    if let Some(c) = stored.pointer("/status/conditions") {
        status["conditions"] = c.clone();
    }
    pdb::update_disruption_allowed_condition(&mut status, &now_text);
    Plan { status: Some(status), recheck_after }
}

/// What a reconcile fails with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube API: {0}")]
    Kube(#[from] kube::Error),
}

/// What the reconciler shares: the client, the process's pod watch, the settings.
pub struct Ctx {
    client: Client,
    pods: SharedPods,
    config: DisruptionConfig,
}

/// A budget's selector (`metav1.LabelSelectorAsSelector`; `None`: no selector, which picks no pod).
fn selector(budget: &PodDisruptionBudget) -> Result<Option<Selector>, String> {
    let Some(s) = budget.spec.as_ref().and_then(|s| s.selector.clone()) else { return Ok(None) };
    Selector::try_from(s).map(Some).map_err(|e| e.to_string())
}

fn picks(budget: &PodDisruptionBudget, selector: &Selector, p: &Pod) -> bool {
    let none = BTreeMap::new();
    p.namespace() == budget.namespace() && selector.matches(p.metadata.labels.as_ref().unwrap_or(&none))
}

/// The pods a budget's selector picks in its namespace (`getPodsForPdb`).
fn selected(budget: &PodDisruptionBudget, pods: &[Arc<Pod>]) -> Result<Vec<Arc<Pod>>, String> {
    let Some(selector) = selector(budget)? else { return Ok(vec![]) };
    Ok(pods.iter().filter(|p| picks(budget, &selector, p)).cloned().collect())
}

/// The scale finders the shell can answer: a Deployment's `spec.replicas`; any other served kind
/// has no scale subresource here; an unserved one has no mapping.
async fn scales(
    client: &Client,
    ns: &str,
    pods: &[Arc<Pod>],
) -> BTreeMap<String, Result<Option<(String, i32)>, String>> {
    let mut out = BTreeMap::new();
    for r in pods.iter().filter_map(|p| controller_of(p)) {
        if out.contains_key(&r.uid) {
            continue;
        }
        let (group, version) = r.api_version.split_once('/').unwrap_or(("", &r.api_version));
        let found = if group == "apps" && r.kind == "Deployment" {
            match Api::<Deployment>::namespaced(client.clone(), ns).get_opt(&r.name).await {
                Ok(Some(d)) if d.uid().as_deref() == Some(r.uid.as_str()) => {
                    Ok(Some((r.uid.clone(), d.spec.and_then(|s| s.replicas).unwrap_or(1))))
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        } else {
            match kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, &r.kind)).await {
                Ok((res, _)) => {
                    let gr = if res.group.is_empty() { res.plural } else { format!("{}.{}", res.plural, res.group) };
                    Err(format!("{gr} does not implement the scale subresource"))
                }
                Err(_) => Err(format!("no matches for kind {:?} in version {:?}", r.kind, r.api_version)),
            }
        };
        out.insert(r.uid.clone(), found);
    }
    out
}

/// Syncs one budget: its selected pods and their controllers' scales in, its status out.
pub async fn reconcile(budget: Arc<PodDisruptionBudget>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = budget.namespace().unwrap_or_default();
    let now = Timestamp::now();
    let plan = match selected(&budget, &ctx.pods.state()) {
        Ok(pods) => {
            let scales = scales(&ctx.client, &ns, &pods).await;
            let scale_of = |r: &OwnerReference| scales.get(&r.uid).cloned().unwrap_or(Ok(None));
            let refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
            plan(&budget, &refs, &scale_of, now, &ctx.config)
        }
        Err(e) => fail_safe(&budget, &e, now, &ctx.config),
    };
    if let Some(status) = plan.status {
        let mut obj = serde_json::to_value(budget.as_ref()).unwrap_or_default();
        obj["status"] = status;
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
        let updated: PodDisruptionBudget = serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
        api.replace_status(&budget.name_any(), &PostParams::default(), &updated).await?;
    }
    Ok(plan.recheck_after.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// A failed sync (a conflicting status write, an API error) is retried after `error_retry`.
pub fn error_policy(_budget: Arc<PodDisruptionBudget>, err: &Error, ctx: Arc<Ctx>) -> Action {
    tracing::debug!(error = %err, "disruption budget sync failed; retrying");
    Action::requeue(ctx.config.error_retry)
}

/// The budgets a pod event concerns: those of its namespace whose selector picks it.
fn budgets_of_pod(budgets: &Store<PodDisruptionBudget>, p: &Pod) -> Vec<ObjectRef<PodDisruptionBudget>> {
    budgets
        .state()
        .iter()
        .filter(|b| selector(b).ok().flatten().is_some_and(|s| picks(b, &s, p)))
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

/// Runs the disruption controller until the stream of reconciles ends; its pods come from `pods`.
pub async fn run(client: Client, config: DisruptionConfig, pods: SharedPods) {
    let budgets: Api<PodDisruptionBudget> = Api::all(client.clone());
    let ctx = Arc::new(Ctx { client, pods: pods.clone(), config });
    let controller = Controller::new(budgets, watcher::Config::default());
    let store = controller.store();
    let pod_events = pods.subscribe(|_| true).filter_map(|e| async move {
        match e {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) => Some(p),
            _ => None,
        }
    });
    controller
        .watches_shared_stream(pod_events, move |p: Arc<Pod>| budgets_of_pod(&store, &p))
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "disruption budget reconcile");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(spec: Value, status: Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "default", "generation": 1}, "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn pod(name: &str, ready: bool, owner: Option<&str>) -> Pod {
        let mut p = json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "a"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(uid) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(p).unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn no_scale(_: &OwnerReference) -> Result<Option<(String, i32)>, String> {
        Err("jobs.batch does not implement the scale subresource".into())
    }

    fn counts(status: &Value) -> [i64; 4] {
        ["currentHealthy", "desiredHealthy", "expectedPods", "disruptionsAllowed"]
            .map(|f| status[f].as_i64().unwrap_or(-1))
    }

    #[test]
    fn integer_min_available_counts_the_selected_pods_and_their_readiness() {
        let sel = json!({"matchLabels": {"app": "a"}});
        // (ready pods, unready pods, minAvailable, [current, desired, expected, allowed], condition)
        let cases = [
            (2, 0, 2, [2, 2, 2, 0], "InsufficientPods"),
            (3, 0, 2, [3, 2, 3, 1], "SufficientPods"),
            (3, 1, 1, [3, 1, 4, 2], "SufficientPods"),
            (0, 0, 0, [0, 0, 0, 0], "InsufficientPods"),
        ];
        for (ready, unready, min, want, reason) in cases {
            let pods: Vec<Pod> = (0..ready)
                .map(|i| pod(&format!("r{i}"), true, None))
                .chain((0..unready).map(|i| pod(&format!("u{i}"), false, None)))
                .collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            let b = budget(json!({"minAvailable": min, "selector": sel}), json!({}));
            let p = plan(&b, &refs, &no_scale, now(), &DisruptionConfig::default());
            let status = p.status.expect("a status is written");
            assert_eq!(counts(&status), want, "{ready} ready, {unready} unready, minAvailable {min}");
            assert_eq!(status["observedGeneration"], 1);
            assert_eq!(status["conditions"][0]["reason"], reason);
        }
    }

    #[test]
    fn a_current_status_is_not_written_again() {
        let pods = [pod("a", true, None), pod("b", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let b = budget(json!({"minAvailable": 1}), json!({}));
        let first = plan(&b, &refs, &no_scale, now(), &DisruptionConfig::default()).status.unwrap();
        let b = budget(json!({"minAvailable": 1}), first);
        assert_eq!(
            plan(&b, &refs, &no_scale, now(), &DisruptionConfig::default()),
            Plan { status: None, recheck_after: None }
        );
    }

    #[test]
    fn pods_recorded_as_disrupted_do_not_count_until_their_deadline_passes() {
        let pods = [pod("a", true, None), pod("b", true, None), pod("c", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let cfg = DisruptionConfig::default();
        // Evicted a minute ago: still pending, looked at again when its two minutes are up.
        let recent = budget(json!({"minAvailable": 2}), json!({"disruptedPods": {"a": "2026-01-01T00:09:00Z"}}));
        let p = plan(&recent, &refs, &no_scale, now(), &cfg);
        let status = p.status.unwrap();
        assert_eq!(counts(&status), [2, 2, 3, 0]);
        assert_eq!(status["disruptedPods"], json!({"a": "2026-01-01T00:09:00Z"}));
        assert_eq!(p.recheck_after, Some(Duration::from_secs(60)));
        // Evicted five minutes ago and never deleted: counted again, the entry dropped.
        let stale = budget(json!({"minAvailable": 2}), json!({"disruptedPods": {"a": "2026-01-01T00:05:00Z"}}));
        let status = plan(&stale, &refs, &no_scale, now(), &cfg).status.unwrap();
        assert_eq!(counts(&status), [3, 2, 3, 1]);
        assert!(status.get("disruptedPods").is_none());
    }

    #[test]
    fn percentages_and_max_unavailable_need_the_controllers_scale() {
        let pods = [pod("a", true, Some("u1")), pod("b", true, Some("u1")), pod("c", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let scale_4 = |r: &OwnerReference| Ok(Some((r.uid.clone(), 4)));
        let cfg = DisruptionConfig::default();
        // The unmanaged pod adds nothing to the expected count: 4 from the one controller.
        let status =
            plan(&budget(json!({"maxUnavailable": 1}), json!({})), &refs, &scale_4, now(), &cfg).status.unwrap();
        assert_eq!(counts(&status), [3, 3, 4, 0]);
        let status =
            plan(&budget(json!({"minAvailable": "50%"}), json!({})), &refs, &scale_4, now(), &cfg).status.unwrap();
        assert_eq!(counts(&status), [3, 2, 4, 1]);
        let status =
            plan(&budget(json!({"maxUnavailable": "30%"}), json!({})), &refs, &scale_4, now(), &cfg).status.unwrap();
        assert_eq!(counts(&status), [3, 2, 4, 1], "30% of 4 rounds up to 2");
    }

    #[test]
    fn a_controller_without_a_scale_fails_the_sync_safe() {
        let pods = [pod("a", true, Some("u1"))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let b = budget(json!({"maxUnavailable": 1}), json!({"disruptionsAllowed": 3}));
        let p = plan(&b, &refs, &no_scale, now(), &DisruptionConfig::default());
        let status = p.status.unwrap();
        assert_eq!(status["disruptionsAllowed"], 0);
        let cond = &status["conditions"][0];
        assert_eq!(
            (cond["type"].as_str(), cond["status"].as_str(), cond["reason"].as_str()),
            (Some("DisruptionAllowed"), Some("False"), Some("SyncFailed"))
        );
        assert_eq!(cond["message"], "jobs.batch does not implement the scale subresource");
        let missing = |_: &OwnerReference| Ok(None);
        let status = plan(&b, &refs, &missing, now(), &DisruptionConfig::default()).status.unwrap();
        assert_eq!(status["conditions"][0]["message"], "found no controllers for pod \"a\"");
    }
}
