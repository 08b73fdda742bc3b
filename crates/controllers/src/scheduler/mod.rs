//! Binds pending pods to nodes through the `pods/binding` subresource, as kube-scheduler does.
//!
//! The decisions are pure functions in [`fit`]; this module only does I/O. It keeps reflectors of
//! Nodes and Pods and, whenever either changes (or every `retry_interval`), runs a round: build a
//! [`fit::Cluster`] from the caches plus the pods it bound that the cache has not seen bound yet
//! (the "assumed" pods, so two pods never both take the last GPU), walk the pending pods in queue
//! order placing each one, then send the bindings and the `PodScheduled=False` conditions (only
//! those whose message changed) concurrently.
//!
//! Pods of a gang (a PodGroup with `schedulingPolicy.gang`, KEP-4671) are placed all or nothing
//! by [`gang`]; the round then writes each tried gang's `PodGroupScheduled` condition (only when
//! it changed) and, with it, an event on the PodGroup: `FailedScheduling` (Warning) or
//! `Scheduled`, kube-scheduler's reasons.

pub mod fit;
pub mod gang;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, future, stream};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use crate::shared_pods::SharedPods;

/// How many bindings and status writes are in flight at once.
const CONCURRENT_WRITES: usize = 32;

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Pods whose `spec.schedulerName` is this (unset means `default-scheduler`) are scheduled.
    pub scheduler_name: String,
    /// How often unschedulable pods are retried when nothing changes.
    pub retry_interval: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig { scheduler_name: fit::DEFAULT_SCHEDULER_NAME.into(), retry_interval: Duration::from_secs(10) }
    }
}

/// Schedules pods until the future is dropped; its pods come from `pods` (every pod).
pub async fn run(client: Client, cfg: SchedulerConfig, pods: SharedPods) {
    let changed = Arc::new(Notify::new());
    let (nodes, _nodes_task) = node_cache(Api::all(client.clone()), changed.clone());
    let (groups, _groups_task) = pod_group_cache(Api::all(client.clone()), changed.clone());
    let pod_changes = pods.subscribe(|_| true);
    let notify = changed.clone();
    let pending = Arc::new(std::sync::Mutex::new(Pending::default()));
    let (tracked, name) = (pending.clone(), cfg.scheduler_name.clone());
    let _pods_task = AbortOnDropHandle::new(tokio::spawn(pod_changes.for_each(move |ev| {
        tracked.lock().unwrap_or_else(|e| e.into_inner()).apply(&ev, &name);
        if may_change_a_round(&ev) {
            notify.notify_one();
        }
        future::ready(())
    })));
    if nodes.wait_until_ready().await.is_err()
        || groups.wait_until_ready().await.is_err()
        || !pods.wait_until_ready().await
    {
        return;
    }
    let retry = cfg.retry_interval;
    let recorder = Recorder::new(client.clone(), Reporter { controller: cfg.scheduler_name.clone(), instance: None });
    let mut s = Scheduler {
        client,
        cfg,
        recorder,
        assumed: HashMap::new(),
        reported: HashMap::new(),
        groups_reported: HashMap::new(),
    };
    loop {
        // Most rounds (a pod deleted, a node changed) find nothing to place: skip copying the
        // caches (15,000 pods at KEP-262's scale) when no pod waits and none is assumed.
        if s.assumed.is_empty() && pending.lock().unwrap_or_else(|e| e.into_inner()).0.is_empty() {
            s.reported.clear();
        } else {
            s.round(&nodes.state(), &pods.state(), &groups.state()).await;
        }
        // Changes during the round left a permit: the next round starts at once.
        let _ = tokio::time::timeout(retry, changed.notified()).await;
    }
}

/// Whether a pod event can change what a round does: an unbound pod (to place), one that frees
/// its node (terminating, finished, gone), a relist. An update of a running pod (its status, its
/// annotations, its binding, which leaves an assumption that the next round drops) cannot: a
/// group restart in place annotates thousands of them, and each round costs a pass over every pod.
fn may_change_a_round(ev: &watcher::Event<Arc<Pod>>) -> bool {
    match ev {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            fit::node_name(p).is_none() || p.metadata.deletion_timestamp.is_some() || fit::is_terminal(p)
        }
        watcher::Event::Delete(_) | watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

/// The keys of the pods waiting for this scheduler ([`fit::is_pending`]), kept from the pod events.
#[derive(Debug, Default)]
struct Pending(HashSet<String>);

impl Pending {
    fn apply(&mut self, ev: &watcher::Event<Arc<Pod>>, scheduler_name: &str) {
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                if fit::is_pending(p, scheduler_name) {
                    self.0.insert(key(p));
                } else {
                    self.0.remove(&key(p));
                }
            }
            watcher::Event::Delete(p) => {
                self.0.remove(&key(p));
            }
            watcher::Event::Init => self.0.clear(),
            watcher::Event::InitDone => {}
        }
    }
}

/// What of a Node a scheduling round depends on. kube-scheduler requeues pods on a Node update
/// only when one of these changed (`nodeSchedulingPropertiesChange`), not on a heartbeat: 1,500
/// simulated nodes write their status every 10 s.
#[derive(Debug, PartialEq)]
struct NodeDigest {
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    unschedulable: Option<bool>,
    taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    allocatable: Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    /// Each condition's type and status (not its heartbeat and transition times).
    conditions: Vec<(String, String)>,
    deleting: bool,
}

impl NodeDigest {
    fn of(n: &Node) -> NodeDigest {
        let spec = n.spec.as_ref();
        let status = n.status.as_ref();
        NodeDigest {
            labels: n.metadata.labels.clone(),
            annotations: n.metadata.annotations.clone(),
            unschedulable: spec.and_then(|s| s.unschedulable),
            taints: spec.and_then(|s| s.taints.clone()),
            allocatable: status.and_then(|s| s.allocatable.clone()),
            conditions: (status.and_then(|s| s.conditions.as_ref()).into_iter().flatten())
                .map(|c| (c.type_.clone(), c.status.clone()))
                .collect(),
            deleting: n.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The digests of the nodes seen; [`NodeDigests::changes_a_round`] says whether a node event may
/// change what a round does.
#[derive(Debug, Default)]
struct NodeDigests(HashMap<String, NodeDigest>);

impl NodeDigests {
    fn changes_a_round(&mut self, ev: &watcher::Event<Node>) -> bool {
        match ev {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                let digest = NodeDigest::of(n);
                let name = n.name_any();
                if self.0.get(&name) == Some(&digest) {
                    return false;
                }
                self.0.insert(name, digest);
                true
            }
            watcher::Event::Delete(n) => {
                self.0.remove(&n.name_any());
                true
            }
            watcher::Event::Init => {
                self.0.clear();
                true
            }
            watcher::Event::InitDone => true,
        }
    }
}

struct Scheduler {
    client: Client,
    cfg: SchedulerConfig,
    recorder: Recorder,
    /// Pods bound by this scheduler that the cache still shows unbound: pod key → node.
    assumed: HashMap<String, String>,
    /// The Unschedulable message last written per pod, until the cache shows it.
    reported: HashMap<String, String>,
    /// The outcome last written per PodGroup, until the cache shows it.
    groups_reported: HashMap<gang::GroupKey, gang::GroupOutcome>,
}

fn key(p: &Pod) -> String {
    match &p.metadata.uid {
        Some(uid) => uid.clone(),
        None => format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
    }
}

impl Scheduler {
    async fn round(&mut self, nodes: &[Arc<Node>], pods: &[Arc<Pod>], pod_groups: &[Arc<PodGroup>]) {
        let by_key: HashMap<String, &Arc<Pod>> = pods.iter().map(|p| (key(p), p)).collect();
        // Forget assumptions the cache has caught up with (or whose pod is gone).
        self.assumed.retain(|k, _| by_key.get(k).is_some_and(|p| fit::node_name(p).is_none()));

        let node_refs: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
        let pod_refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
        let mut cluster = fit::Cluster::new(&node_refs, &pod_refs);
        for (k, node) in &self.assumed {
            cluster.add(by_key[k], node);
        }
        let mut pending: Vec<&Pod> = pods
            .iter()
            .map(AsRef::as_ref)
            .filter(|p| fit::is_pending(p, &self.cfg.scheduler_name) && !self.assumed.contains_key(&key(p)))
            .collect();
        pending.sort_by(|a, b| fit::queue_order(a, b));
        let pending_keys: HashSet<String> = pending.iter().map(|p| key(p)).collect();
        self.reported.retain(|k, _| pending_keys.contains(k));

        let groups: HashMap<gang::GroupKey, &PodGroup> =
            pod_groups.iter().map(|g| ((g.namespace().unwrap_or_default(), g.name_any()), g.as_ref())).collect();
        let sizes: gang::Groups = groups
            .iter()
            .map(|(k, g)| (k.clone(), g.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count.max(0) as u32)))
            .collect();
        let mut placed_in_group: HashMap<gang::GroupKey, usize> = HashMap::new();
        // Only pods of a group count, and a round without PodGroups (the common case, at up to
        // 15,000 pods) walks none of them.
        for p in pods.iter().filter(|_| !groups.is_empty()) {
            let Some(k) = gang::group_key(p) else { continue };
            let placed = fit::node_name(p).is_some() || self.assumed.contains_key(&key(p));
            if placed && !fit::is_terminal(p) {
                *placed_in_group.entry(k).or_default() += 1;
            }
        }
        let decisions = gang::place(&mut cluster, &pending, &sizes, &placed_in_group);

        let mut binds = Vec::new();
        for (p, node) in decisions.binds {
            let k = key(p);
            self.assumed.insert(k.clone(), node.clone());
            binds.push(bind(self.client.clone(), by_key[&k].clone(), node));
        }
        let mut unschedulable = Vec::new();
        for (p, msg) in decisions.unschedulable {
            let k = key(p);
            if fit::unschedulable_reported(p, &msg) {
                self.reported.remove(&k);
            } else if self.reported.get(&k) != Some(&msg) {
                unschedulable.push(mark_unschedulable(self.client.clone(), by_key[&k].clone(), msg));
            }
        }
        let mut group_writes = Vec::new();
        for (k, outcome) in decisions.groups {
            let Some(&g) = groups.get(&k) else { continue };
            if gang_reported(g, &outcome) {
                self.groups_reported.remove(&k);
            } else if self.groups_reported.get(&k) != Some(&outcome) {
                group_writes.push(write_group(self.client.clone(), &self.recorder, g.clone(), k, outcome));
            }
        }

        let bound: Vec<(String, bool)> = stream::iter(binds).buffer_unordered(CONCURRENT_WRITES).collect().await;
        for (k, ok) in bound {
            if !ok {
                self.assumed.remove(&k);
            }
        }
        let marked: Vec<(String, Option<String>)> =
            stream::iter(unschedulable).buffer_unordered(CONCURRENT_WRITES).collect().await;
        for (k, msg) in marked {
            if let Some(msg) = msg {
                self.reported.insert(k, msg);
            }
        }
        for (k, outcome) in future::join_all(group_writes).await.into_iter().flatten() {
            self.groups_reported.insert(k, outcome);
        }
    }
}

/// The `PodGroupScheduled` condition an outcome writes: (status, reason, message).
fn condition_of(outcome: &gang::GroupOutcome) -> (&'static str, &'static str, &str) {
    use jobset_api::workload::UNSCHEDULABLE;
    match outcome {
        gang::GroupOutcome::Scheduled => ("True", "Scheduled", ""),
        gang::GroupOutcome::Unschedulable(m) => ("False", UNSCHEDULABLE, m),
    }
}

/// Whether the cached PodGroup already shows `outcome`.
fn gang_reported(g: &PodGroup, outcome: &gang::GroupOutcome) -> bool {
    let (status, reason, message) = condition_of(outcome);
    let conditions = g.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| {
        c.type_ == jobset_api::workload::POD_GROUP_SCHEDULED
            && c.status == status
            && c.reason == reason
            && c.message == message
    })
}

/// Writes the PodGroup's `PodGroupScheduled` condition (its transition time kept while the status
/// stays), then its event; returns the key and outcome once written.
async fn write_group(
    client: Client,
    recorder: &Recorder,
    g: PodGroup,
    k: gang::GroupKey,
    outcome: gang::GroupOutcome,
) -> Option<(gang::GroupKey, gang::GroupOutcome)> {
    use jobset_api::workload::POD_GROUP_SCHEDULED;
    let (status, reason, message) = condition_of(&outcome);
    let mut conditions = g.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let since = conditions
        .iter()
        .find(|c| c.type_ == POD_GROUP_SCHEDULED && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(Timestamp::now()));
    conditions.retain(|c| c.type_ != POD_GROUP_SCHEDULED);
    conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: POD_GROUP_SCHEDULED.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: g.metadata.generation,
    });
    let api: Api<PodGroup> = Api::namespaced(client, &k.0);
    let patch = Patch::Merge(json!({"status": {"conditions": conditions}}));
    match api.patch_status(&k.1, &PatchParams::default(), &patch).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return None,
        Err(e) => {
            tracing::warn!(podgroup = %k.1, namespace = %k.0, error = %e, "updating the PodGroupScheduled condition failed");
            return None;
        }
    }
    let (warning, reason, note) = match &outcome {
        gang::GroupOutcome::Scheduled => (false, "Scheduled", format!("all pods of gang {}/{} placed", k.0, k.1)),
        gang::GroupOutcome::Unschedulable(m) => (true, "FailedScheduling", m.clone()),
    };
    crate::publish_event(recorder, &g, warning, reason, &note).await;
    Some((k, outcome))
}

/// Binds the pod; returns its key and whether that worked.
async fn bind(client: Client, pod: Arc<Pod>, node: String) -> (String, bool) {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client, &ns);
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let r = api.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding).await;
    match &r {
        Ok(_) => tracing::debug!(pod = %name, namespace = %ns, %node, "bound"),
        // The pod went, or began to go, or was bound, since the round's view of it: kube-scheduler
        // skips such pods quietly (`skipPodSchedule`, "Pod doesn't exist in informer cache").
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {
            tracing::debug!(pod = %name, namespace = %ns, %node, error = %s, "binding raced a change of the pod")
        }
        Err(e) => tracing::warn!(pod = %name, namespace = %ns, %node, error = %e, "binding failed"),
    }
    (key(&pod), r.is_ok())
}

/// Sets `PodScheduled=False, reason Unschedulable`; returns the key and the message once written.
async fn mark_unschedulable(client: Client, pod: Arc<Pod>, message: String) -> (String, Option<String>) {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client, &ns);
    let since = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(Timestamp::now()));
    let condition = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": message, "lastTransitionTime": since});
    let patch = Patch::Strategic(json!({"status": {"conditions": [condition]}}));
    let written = match api.patch_status(&name, &PatchParams::default(), &patch).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => {
            tracing::warn!(pod = %name, namespace = %ns, error = %e, "updating the PodScheduled condition failed");
            false
        }
    };
    (key(&pod), written.then_some(message))
}

/// A reflector of the PodGroups whose task stops with [`run`]; it starts a round when a group
/// appears, goes or changes its gang size (not on the status writes of the rounds themselves).
fn pod_group_cache(api: Api<PodGroup>, changed: Arc<Notify>) -> (Store<PodGroup>, AbortOnDropHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let mut sizes: HashMap<String, Option<i32>> = HashMap::new();
    let task = tokio::spawn(stream.for_each(move |ev| {
        let size = |g: &PodGroup| g.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count);
        let key = |g: &PodGroup| format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any());
        let matters = match &ev {
            Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) => {
                sizes.insert(key(g), size(g)) != Some(size(g))
            }
            Ok(watcher::Event::Delete(g)) => sizes.remove(&key(g)).is_some(),
            Ok(watcher::Event::Init) => {
                sizes.clear();
                true
            }
            Ok(watcher::Event::InitDone) | Err(_) => true,
        };
        if matters {
            changed.notify_one();
        }
        future::ready(())
    }));
    (reader, AbortOnDropHandle::new(task))
}

/// A reflector of the Nodes whose task stops with [`run`]; it starts a round when a node changes
/// in a way that matters to one ([`NodeDigests`]).
fn node_cache(api: Api<Node>, changed: Arc<Notify>) -> (Store<Node>, AbortOnDropHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let mut digests = NodeDigests::default();
    let task = tokio::spawn(stream.for_each(move |ev| {
        if ev.as_ref().map_or(true, |ev| digests.changes_a_round(ev)) {
            changed.notify_one();
        }
        future::ready(())
    }));
    (reader, AbortOnDropHandle::new(task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, deleting: bool, phase: &str) -> Arc<Pod> {
        let deletion = deleting.then_some("2026-11-26T00:00:00Z");
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns", "deletionTimestamp": deletion},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_pending_set_follows_the_pod_events() {
        use watcher::Event::{Apply, Delete, Init, InitApply};
        let named = |uid: &str, node: Option<&str>, scheduler: &str| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": uid, "namespace": "ns", "uid": uid},
                    "spec": {"nodeName": node, "schedulerName": scheduler, "containers": []},
                    "status": {"phase": "Pending"}
                }))
                .unwrap(),
            )
        };
        type Step = (&'static str, watcher::Event<Arc<Pod>>, Vec<&'static str>);
        let mut p = Pending::default();
        let steps: Vec<Step> = vec![
            ("an unbound pod waits", Apply(named("a", None, "default-scheduler")), vec!["a"]),
            ("one listed waits too", InitApply(named("b", None, "default-scheduler")), vec!["a", "b"]),
            ("another scheduler's pod does not", Apply(named("c", None, "other")), vec!["a", "b"]),
            ("a bound pod waits no more", Apply(named("a", Some("n1"), "default-scheduler")), vec!["b"]),
            ("a deleted one neither", Delete(named("b", None, "default-scheduler")), vec![]),
            ("an unbound pod again", Apply(named("d", None, "default-scheduler")), vec!["d"]),
            ("a relist starts over", Init, vec![]),
        ];
        for (what, ev, want) in steps {
            p.apply(&ev, fit::DEFAULT_SCHEDULER_NAME);
            let mut got: Vec<&str> = p.0.iter().map(String::as_str).collect();
            got.sort();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_node_heartbeat_starts_no_round_but_a_change_that_matters_does() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let node = |labels: serde_json::Value, ready: &str, heartbeat: &str, extra: serde_json::Value| -> Node {
            let mut n = json!({
                "metadata": {"name": "n1", "labels": labels},
                "spec": {},
                "status": {"allocatable": {"cpu": "4"}, "conditions": [
                    {"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}
                ]}
            });
            json_patch::merge(&mut n, &extra);
            serde_json::from_value(n).unwrap()
        };
        let base = || node(json!({"zone": "a"}), "True", "2026-11-28T00:00:00Z", json!({}));
        let cases: Vec<(&str, watcher::Event<Node>, bool)> = vec![
            ("first seen", InitApply(base()), true),
            ("the list done", InitDone, true),
            ("the same again", Apply(base()), false),
            ("a heartbeat", Apply(node(json!({"zone": "a"}), "True", "2026-11-28T00:00:10Z", json!({}))), false),
            ("not ready", Apply(node(json!({"zone": "a"}), "False", "2026-11-28T00:00:20Z", json!({}))), true),
            ("ready again", Apply(base()), true),
            ("a label", Apply(node(json!({"zone": "b"}), "True", "2026-11-28T00:00:00Z", json!({}))), true),
            ("back", Apply(base()), true),
            (
                "cordoned",
                Apply(node(
                    json!({"zone": "a"}),
                    "True",
                    "2026-11-28T00:00:00Z",
                    json!({"spec": {"unschedulable": true}}),
                )),
                true,
            ),
            ("back", Apply(base()), true),
            (
                "tainted",
                Apply(node(
                    json!({"zone": "a"}),
                    "True",
                    "2026-11-28T00:00:00Z",
                    json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
                )),
                true,
            ),
            ("back", Apply(base()), true),
            (
                "allocatable",
                Apply(node(
                    json!({"zone": "a"}),
                    "True",
                    "2026-11-28T00:00:00Z",
                    json!({"status": {"allocatable": {"cpu": "8"}}}),
                )),
                true,
            ),
            ("deleted", Delete(base()), true),
            ("seen again", Apply(base()), true),
            ("a relist", Init, true),
            ("listed again", InitApply(base()), true),
        ];
        let mut d = NodeDigests::default();
        for (what, ev, want) in cases {
            assert_eq!(d.changes_a_round(&ev), want, "{what}");
        }
    }

    #[test]
    fn only_pod_events_that_can_change_a_round_start_one() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let cases = [
            ("an unbound pod", Apply(pod(None, false, "Pending")), true),
            ("an unbound pod listed", InitApply(pod(None, false, "Pending")), true),
            ("a running pod updated", Apply(pod(Some("n1"), false, "Running")), false),
            ("a pod just bound", Apply(pod(Some("n1"), false, "Pending")), false),
            ("a running pod terminating", Apply(pod(Some("n1"), true, "Running")), true),
            ("a pod finished", Apply(pod(Some("n1"), false, "Succeeded")), true),
            ("a pod failed", Apply(pod(Some("n1"), false, "Failed")), true),
            ("a pod gone", Delete(pod(Some("n1"), false, "Running")), true),
            ("a relist", Init, true),
            ("a relist done", InitDone, true),
        ];
        for (what, ev, want) in cases {
            assert_eq!(may_change_a_round(&ev), want, "{what}");
        }
    }
}
