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

/// When this controller last saw each node alive, by its own clock: upstream's
/// `nodeHealthData.probeTimestamp`. A node seen for the first time counts as seen now ("Missing
/// timestamp for Node %s. Assuming now as a timestamp."), and so does a Lease whose renewTime
/// moved on since the last look; the renewTime itself is never compared with the clock. So a
/// restarted controller (a restarted `jobset up`, down longer than the grace period) gives every
/// node a whole grace period to heartbeat again instead of taking it for lost at once.
#[derive(Debug, Default)]
pub struct Probes {
    /// Per node: the renewTime last seen and when it was seen.
    seen: HashMap<String, (Option<Timestamp>, Timestamp)>,
}

impl Probes {
    /// The last time `node` was seen alive, given its Lease's renewTime `renewed` at `now`.
    pub fn observe(&mut self, node: &str, renewed: Option<Timestamp>, now: Timestamp) -> Timestamp {
        let (saved, probed) = self.seen.entry(node.to_string()).or_insert((renewed, now));
        if renewed > *saved {
            *saved = renewed;
            *probed = now;
        }
        *probed
    }

    /// Forgets the nodes not in `nodes` (deleted ones).
    pub fn retain(&mut self, nodes: &[String]) {
        self.seen.retain(|n, _| nodes.contains(n));
    }
}

/// What to do about one node, last seen alive at `probed` ([`Probes::observe`]), and its pods.
pub fn decide(node: &Node, probed: Timestamp, pods: &[&Pod], now: Timestamp, cfg: &NodeLifecycleConfig) -> NodeActions {
    let mut a = NodeActions::default();
    let grace = jiff::SignedDuration::try_from(cfg.grace_period).unwrap_or(jiff::SignedDuration::MAX);
    let lost = now.duration_since(probed) > grace;
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
    let mut probes = Probes::default();
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
        let current = nodes.state();
        probes.retain(&current.iter().map(|n| n.name_any()).collect::<Vec<_>>());
        for node in current {
            let name = node.name_any();
            let pods_here = by_node.get(name.as_str()).cloned().unwrap_or_default();
            let renewed = leases.get(&name).and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).map(|t| t.0);
            let probed = probes.observe(&name, renewed, now);
            let actions = decide(&node, probed, &pods_here, now, &cfg);
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
        let a = decide(&node(json!([]), "True"), at("2026-01-01T00:10:00Z"), &[&p], at("2026-01-01T00:10:30Z"), &cfg());
        assert_eq!(a, NodeActions::default());
    }

    #[test]
    fn a_stale_lease_marks_the_node_unknown_taints_it_and_force_evicts_running_pods() {
        let (run, done) = (pod("run", json!([]), "Running"), pod("done", json!([]), "Succeeded"));
        let a = decide(
            &node(json!([]), "True"),
            at("2026-01-01T00:10:00Z"),
            &[&run, &done],
            at("2026-01-01T00:10:41Z"),
            &cfg(),
        );
        assert!(a.mark_unknown && a.add_unreachable_taint && !a.remove_unreachable_taint);
        assert_eq!(a.evict, vec![Eviction { pod: "run".into(), namespace: "default".into(), force: true }]);
    }

    #[test]
    fn a_node_counts_as_seen_when_first_observed_and_whenever_its_lease_is_renewed_by_the_controllers_clock() {
        let mut p = Probes::default();
        let t = |s: &str| Some(at(s));
        // (what, renewTime, now, last seen alive)
        let steps = [
            // A restarted controller: the Lease was last renewed long ago (jobset up was down).
            ("first look at a stale Lease", t("2026-01-01T00:10:00Z"), "2026-01-01T00:20:00Z", "2026-01-01T00:20:00Z"),
            ("not renewed since", t("2026-01-01T00:10:00Z"), "2026-01-01T00:20:05Z", "2026-01-01T00:20:00Z"),
            (
                "renewed (whatever its clock says)",
                t("2026-01-01T00:10:01Z"),
                "2026-01-01T00:20:06Z",
                "2026-01-01T00:20:06Z",
            ),
            ("a renewTime that went back", t("2026-01-01T00:09:00Z"), "2026-01-01T00:20:09Z", "2026-01-01T00:20:06Z"),
        ];
        for (what, renewed, now, want) in steps {
            assert_eq!(p.observe("n1", renewed, at(now)), at(want), "{what}");
        }
        assert_eq!(p.observe("n2", None, at("2026-01-01T00:20:10Z")), at("2026-01-01T00:20:10Z"), "no Lease yet");
        assert_eq!(p.observe("n2", None, at("2026-01-01T00:20:11Z")), at("2026-01-01T00:20:10Z"), "still none");
        p.retain(&["n2".to_string()]);
        assert_eq!(
            p.observe("n1", None, at("2026-01-01T00:30:00Z")),
            at("2026-01-01T00:30:00Z"),
            "forgotten when gone"
        );
        // So a restart gives the node its grace period: not lost at once, lost once it passes.
        let n = node(json!([]), "True");
        let mut p = Probes::default();
        let probed = p.observe("n1", t("2026-01-01T00:10:00Z"), at("2026-01-01T00:20:00Z"));
        assert_eq!(decide(&n, probed, &[], at("2026-01-01T00:20:00Z"), &cfg()), NodeActions::default());
        let probed = p.observe("n1", t("2026-01-01T00:10:00Z"), at("2026-01-01T00:20:41Z"));
        assert!(decide(&n, probed, &[], at("2026-01-01T00:20:41Z"), &cfg()).mark_unknown);
    }

    #[test]
    fn a_recovered_node_loses_the_unreachable_taint() {
        let t = json!([{"key": UNREACHABLE_TAINT, "effect": "NoSchedule"}, {"key": UNREACHABLE_TAINT, "effect": "NoExecute"},
            {"key": "x", "effect": "NoSchedule"}]);
        let n = node(t, "True");
        let now = at("2026-01-01T00:10:01Z");
        let a = decide(&n, at("2026-01-01T00:10:00Z"), &[], now, &cfg());
        assert!(a.remove_unreachable_taint && !a.mark_unknown);
        let left: Vec<(String, String)> = next_taints(&n, &a, now).into_iter().map(|t| (t.key, t.effect)).collect();
        assert_eq!(left, [("x".to_string(), "NoSchedule".to_string())]);
    }

    #[test]
    fn a_lost_node_is_tainted_unreachable_for_both_scheduling_and_execution() {
        let n = node(json!([{"key": "x", "effect": "NoSchedule"}]), "True");
        let now = at("2026-01-01T00:10:41Z");
        let a = decide(&n, at("2026-01-01T00:10:00Z"), &[], now, &cfg());
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
            at("2026-01-01T00:10:00Z"),
            &[&plain, &tolerant, &exists],
            at("2026-01-01T00:10:01Z"),
            &cfg(),
        );
        assert_eq!(a.evict, vec![Eviction { pod: "plain".into(), namespace: "default".into(), force: false }]);
    }
}
