//! Node lifecycle: a node whose Lease stops being renewed is marked `Ready=Unknown` and tainted
//! `node.kubernetes.io/unreachable` (NoSchedule and NoExecute); pods that do not tolerate a node's NoExecute taints
//! are evicted with the `DisruptionTarget` condition (as kube-controller-manager's node lifecycle
//! and taint-eviction controllers do), and pods on an unreachable node are failed and removed (as
//! PodGC does), since no kubelet will ever confirm their termination.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector as reflect;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::shared_pods::SharedPods;

pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

#[derive(Debug, Clone)]
pub struct NodeLifecycleConfig {
    /// How long a Lease may go unrenewed before its node counts as lost (upstream: 40 s).
    pub grace_period: Duration,
    /// How often nodes are checked.
    pub monitor_period: Duration,
}

impl Default for NodeLifecycleConfig {
    fn default() -> Self {
        NodeLifecycleConfig { grace_period: Duration::from_secs(40), monitor_period: Duration::from_secs(5) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub pod: String,
    pub namespace: String,
    /// The node is gone: fail the pod and remove it at once instead of waiting for a kubelet.
    pub force: bool,
}

#[derive(Debug, Default, PartialEq)]
pub struct NodeActions {
    pub mark_unknown: bool,
    pub add_unreachable_taint: bool,
    pub remove_unreachable_taint: bool,
    pub evict: Vec<Eviction>,
}

fn taints(node: &Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default()
}

fn ready_status(node: &Node) -> Option<&str> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.as_str())
}

/// Whether `t` tolerates `taint` (same rules as the scheduler's for NoExecute).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    match t.operator.as_deref() {
        Some("Exists") => t.key.as_deref().is_none_or(|k| k.is_empty() || k == taint.key),
        _ => {
            t.key.as_deref() == Some(taint.key.as_str())
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

fn tolerated(pod: &Pod, taint: &Taint) -> bool {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).is_some_and(|ts| ts.iter().any(|t| tolerates(t, taint)))
}

fn terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// What to do about one node, from its Lease and its pods.
pub fn decide(
    node: &Node,
    lease: Option<&Lease>,
    pods: &[&Pod],
    now: Timestamp,
    cfg: &NodeLifecycleConfig,
) -> NodeActions {
    let mut a = NodeActions::default();
    let renewed = lease.and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).map(|t| t.0);
    // creationTimestamp holds whole seconds (truncated): the node may be up to a second younger,
    // so a node whose first Lease is not seen yet is not lost under a sub-second grace period.
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.checked_add(jiff::SignedDuration::from_secs(1)).unwrap_or(t.0))
        .unwrap_or(now);
    let last = renewed.unwrap_or(created);
    let grace = jiff::SignedDuration::try_from(cfg.grace_period).unwrap_or(jiff::SignedDuration::MAX);
    let lost = now.duration_since(last) > grace;
    let has_unreachable = taints(node).iter().any(|t| t.key == UNREACHABLE_TAINT);
    if lost {
        a.mark_unknown = ready_status(node) != Some("Unknown");
        a.add_unreachable_taint = !has_unreachable;
    } else if has_unreachable {
        a.remove_unreachable_taint = true;
    }
    let mut no_execute: Vec<Taint> = taints(node).iter().filter(|t| t.effect == "NoExecute").cloned().collect();
    if lost && !has_unreachable {
        no_execute.push(unreachable_taint(now));
    }
    for p in pods.iter().filter(|p| !terminal(p)) {
        let untolerated = no_execute.iter().any(|t| !(tolerated(p, t) || (!lost && t.key == UNREACHABLE_TAINT)));
        if lost || untolerated {
            if p.metadata.deletion_timestamp.is_some() && !lost {
                continue;
            }
            a.evict.push(Eviction { pod: p.name_any(), namespace: p.namespace().unwrap_or_default(), force: lost });
        }
    }
    a
}

fn unreachable_taint(now: Timestamp) -> Taint {
    Taint { key: UNREACHABLE_TAINT.into(), value: None, effect: "NoExecute".into(), time_added: Some(Time(now)) }
}

/// The node's taints after `a`: as upstream's node lifecycle controller, a lost node gets the
/// unreachable taint with both effects (NoSchedule keeps new pods off even when they tolerate
/// NoExecute for a while, as pods with the default 300 s tolerations do); a recovered one loses both.
fn next_taints(node: &Node, a: &NodeActions, now: Timestamp) -> Vec<Taint> {
    let mut ts: Vec<Taint> = taints(node).iter().filter(|t| t.key != UNREACHABLE_TAINT).cloned().collect();
    if a.add_unreachable_taint {
        ts.push(Taint { effect: "NoSchedule".into(), time_added: None, ..unreachable_taint(now) });
        ts.push(unreachable_taint(now));
    }
    ts
}

/// Runs the node lifecycle controller until the future is dropped; its pods come from `pods`
/// (every pod).
pub async fn run(client: Client, cfg: NodeLifecycleConfig, pods: SharedPods) {
    let nodes = store::<Node>(Api::all(client.clone()));
    let leases = store::<Lease>(Api::namespaced(client.clone(), "kube-node-lease"));
    let mut tick = tokio::time::interval(cfg.monitor_period);
    loop {
        tick.tick().await;
        if nodes.wait_until_ready().await.is_err()
            || leases.wait_until_ready().await.is_err()
            || !pods.wait_until_ready().await
        {
            return;
        }
        let leases: HashMap<String, Arc<Lease>> = leases.state().into_iter().map(|l| (l.name_any(), l)).collect();
        let all_pods = pods.state();
        let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for p in &all_pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(n).or_default().push(p);
            }
        }
        let now = Timestamp::now();
        for node in nodes.state() {
            let name = node.name_any();
            let pods_here = by_node.get(name.as_str()).cloned().unwrap_or_default();
            let actions = decide(&node, leases.get(&name).map(|l| l.as_ref()), &pods_here, now, &cfg);
            if let Err(e) = act(&client, &node, actions, now).await {
                tracing::warn!(node = %name, error = %e, "node lifecycle");
            }
        }
    }
}

fn store<K>(api: Api<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflect(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(futures::StreamExt::for_each(stream, |_| async {}));
    reader
}

async fn act(client: &Client, node: &Node, a: NodeActions, now: Timestamp) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = node.name_any();
    if a.mark_unknown {
        let conds: Vec<_> = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|mut c| {
                if c.type_ == "Ready" {
                    c.status = "Unknown".into();
                    c.reason = Some("NodeStatusUnknown".into());
                    c.message = Some("Kubelet stopped posting node status.".into());
                    c.last_transition_time = Some(Time(now));
                }
                c
            })
            .collect();
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": conds}})))
            .await?;
    }
    if a.add_unreachable_taint || a.remove_unreachable_taint {
        let ts = next_taints(node, &a, now);
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": ts}}))).await?;
    }
    for e in a.evict {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &e.namespace);
        let cond = json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                          "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": now.to_string()});
        let Some(pod) = pods.get_opt(&e.pod).await? else { continue };
        let mut conds = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .unwrap_or(json!([]));
        if let Some(list) = conds.as_array_mut() {
            list.retain(|c| c["type"] != "DisruptionTarget");
            list.push(cond);
        }
        let mut status = json!({"conditions": conds});
        if e.force {
            // No kubelet will report this pod again: fail it, as PodGC does for pods on lost nodes.
            status["phase"] = json!("Failed");
        }
        match pods.patch_status(&e.pod, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(err) => return Err(err),
        }
        let dp = if e.force {
            DeleteParams { grace_period_seconds: Some(0), ..Default::default() }
        } else {
            DeleteParams::default()
        };
        match pods.delete(&e.pod, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: serde_json::Value, ready: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"taints": taints}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}))
        .unwrap()
    }
    fn lease(renewed: &str) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "spec": {"renewTime": renewed}})).unwrap()
    }
    fn pod(name: &str, tolerations: serde_json::Value, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "tolerations": tolerations, "containers": []}, "status": {"phase": phase}}))
        .unwrap()
    }
    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }
    fn cfg() -> NodeLifecycleConfig {
        NodeLifecycleConfig { grace_period: Duration::from_secs(40), monitor_period: Duration::from_secs(1) }
    }

    #[test]
    fn a_fresh_lease_keeps_the_node_and_its_pods() {
        let p = pod("a", json!([]), "Running");
        let a = decide(
            &node(json!([]), "True"),
            Some(&lease("2026-01-01T00:10:00Z")),
            &[&p],
            at("2026-01-01T00:10:30Z"),
            &cfg(),
        );
        assert_eq!(a, NodeActions::default());
    }

    #[test]
    fn a_stale_lease_marks_the_node_unknown_taints_it_and_force_evicts_running_pods() {
        let (run, done) = (pod("run", json!([]), "Running"), pod("done", json!([]), "Succeeded"));
        let a = decide(
            &node(json!([]), "True"),
            Some(&lease("2026-01-01T00:10:00Z")),
            &[&run, &done],
            at("2026-01-01T00:10:41Z"),
            &cfg(),
        );
        assert!(a.mark_unknown && a.add_unreachable_taint && !a.remove_unreachable_taint);
        assert_eq!(a.evict, vec![Eviction { pod: "run".into(), namespace: "default".into(), force: true }]);
    }

    #[test]
    fn a_new_node_without_a_lease_gets_its_grace_period_despite_second_timestamps() {
        let cfg = NodeLifecycleConfig { grace_period: Duration::from_millis(600), ..cfg() };
        let n = node(json!([]), "True"); // created at 00:00:00, i.e. up to 00:00:00.999
        assert_eq!(decide(&n, None, &[], at("2026-01-01T00:00:00.9Z"), &cfg), NodeActions::default());
        assert!(decide(&n, None, &[], at("2026-01-01T00:00:01.7Z"), &cfg).mark_unknown);
    }

    #[test]
    fn a_recovered_node_loses_the_unreachable_taint() {
        let t = json!([{"key": UNREACHABLE_TAINT, "effect": "NoSchedule"}, {"key": UNREACHABLE_TAINT, "effect": "NoExecute"},
            {"key": "x", "effect": "NoSchedule"}]);
        let n = node(t, "True");
        let now = at("2026-01-01T00:10:01Z");
        let a = decide(&n, Some(&lease("2026-01-01T00:10:00Z")), &[], now, &cfg());
        assert!(a.remove_unreachable_taint && !a.mark_unknown);
        let left: Vec<(String, String)> = next_taints(&n, &a, now).into_iter().map(|t| (t.key, t.effect)).collect();
        assert_eq!(left, [("x".to_string(), "NoSchedule".to_string())]);
    }

    #[test]
    fn a_lost_node_is_tainted_unreachable_for_both_scheduling_and_execution() {
        let n = node(json!([{"key": "x", "effect": "NoSchedule"}]), "True");
        let now = at("2026-01-01T00:10:41Z");
        let a = decide(&n, Some(&lease("2026-01-01T00:10:00Z")), &[], now, &cfg());
        let ts: Vec<(String, String)> = next_taints(&n, &a, now).into_iter().map(|t| (t.key, t.effect)).collect();
        let u = UNREACHABLE_TAINT.to_string();
        assert_eq!(ts, [("x".into(), "NoSchedule".into()), (u.clone(), "NoSchedule".into()), (u, "NoExecute".into())]);
    }

    #[test]
    fn no_execute_taints_evict_only_pods_that_do_not_tolerate_them() {
        let t = json!([{"key": "maintenance", "value": "yes", "effect": "NoExecute"}, {"key": "x", "effect": "NoSchedule"}]);
        let plain = pod("plain", json!([]), "Running");
        let tolerant = pod(
            "tolerant",
            json!([{"key": "maintenance", "operator": "Equal", "value": "yes", "effect": "NoExecute"}]),
            "Running",
        );
        let exists = pod("exists", json!([{"operator": "Exists"}]), "Running");
        let a = decide(
            &node(t, "True"),
            Some(&lease("2026-01-01T00:10:00Z")),
            &[&plain, &tolerant, &exists],
            at("2026-01-01T00:10:01Z"),
            &cfg(),
        );
        assert_eq!(a.evict, vec![Eviction { pod: "plain".into(), namespace: "default".into(), force: false }]);
    }
}
