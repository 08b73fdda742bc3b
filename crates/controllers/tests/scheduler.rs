//! The scheduler end to end against the in-process embedded API server: Nodes and Pods are
//! created through a `kube::Client`, the scheduler task binds or marks them, and the tests wait
//! (through watches, with a timeout) for `spec.nodeName` or the `PodScheduled=False` condition.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_api::appwrapper::AutopilotConfig;
use jobset_apiserver::ApiServer;
use jobset_controllers::appwrapper::autopilot::inject_anti_affinities;
use jobset_controllers::scheduler::{SchedulerConfig, run};
use jobset_controllers::shared_pods::SharedPods;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, wait::await_condition, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

struct Cluster {
    _server: Arc<ApiServer>,
    client: Client,
    scheduler: Option<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    fn new() -> Cluster {
        let server = ApiServer::in_memory();
        Cluster { client: server.client(), _server: server, scheduler: None }
    }

    async fn started() -> Cluster {
        let mut c = Cluster::new();
        c.start();
        c
    }

    /// Starts the scheduler. Its retry interval is long: every test here is driven by watch events.
    fn start(&mut self) {
        let cfg = SchedulerConfig { retry_interval: Duration::from_secs(600), ..SchedulerConfig::default() };
        let pods = SharedPods::start(self.client.clone(), watcher::Config::default());
        self.scheduler = Some(tokio::spawn(run(self.client.clone(), cfg, pods)));
    }

    fn pods(&self) -> Api<Pod> {
        Api::default_namespaced(self.client.clone())
    }

    async fn node(&self, name: &str, extra: Value) {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        });
        merge(&mut v, extra);
        let node: Node = serde_json::from_value(v).unwrap();
        Api::<Node>::all(self.client.clone()).create(&PostParams::default(), &node).await.unwrap();
    }

    async fn pod(&self, name: &str, extra: Value) {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        });
        merge(&mut v, extra);
        let pod: Pod = serde_json::from_value(v).unwrap();
        self.pods().create(&PostParams::default(), &pod).await.unwrap();
    }

    /// Waits for the pod to be bound and returns its node.
    async fn bound(&self, name: &str) -> String {
        let p = self.wait(name, "bound", |p| node_of(p).is_some()).await;
        node_of(&p).unwrap()
    }

    /// Waits for the pod's Unschedulable condition with a message containing `want` (the caches of
    /// Nodes and Pods are separate watches, so an earlier message may be written first).
    async fn unschedulable(&self, name: &str, want: &str) -> String {
        let want_owned = want.to_string();
        let found = tokio::time::timeout(
            WAIT,
            await_condition(self.pods(), name, move |p: Option<&Pod>| {
                p.and_then(unschedulable_message).is_some_and(|m| m.contains(&want_owned))
            }),
        )
        .await;
        let Ok(found) = found else {
            let now = self.pods().get(name).await.ok().and_then(|p| unschedulable_message(&p));
            panic!("timed out waiting for {name} to be Unschedulable with {want:?}; its message: {now:?}");
        };
        let p = found.unwrap().unwrap();
        assert_eq!(node_of(&p), None, "{name} was bound");
        unschedulable_message(&p).unwrap()
    }

    async fn wait(&self, name: &str, what: &str, cond: impl Fn(&Pod) -> bool + Send + 'static) -> Pod {
        let found =
            tokio::time::timeout(WAIT, await_condition(self.pods(), name, move |p: Option<&Pod>| p.is_some_and(&cond)))
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {name} to be {what}"));
        found.unwrap().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(s) = &self.scheduler {
            s.abort();
        }
    }
}

fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone().filter(|n| !n.is_empty())
}

fn unschedulable_message(p: &Pod) -> Option<String> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    (c.status == "False" && c.reason.as_deref() == Some("Unschedulable")).then(|| c.message.clone().unwrap_or_default())
}

fn scheduled_true(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"))
}

fn requests(r: Value) -> Value {
    json!({"spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": r, "limits": r}}]}})
}

fn gpu_node(gpus: &str) -> Value {
    json!({"metadata": {"labels": {"accelerator": "nvidia"}},
           "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}})
}

fn preemption(n: usize) -> String {
    format!("preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selector_picks_the_labelled_node() {
    let c = Cluster::started().await;
    c.node("n1", json!({"metadata": {"labels": {"zone": "a"}}})).await;
    c.node("n2", json!({"metadata": {"labels": {"zone": "b"}}})).await;
    c.pod("p", json!({"spec": {"nodeSelector": {"zone": "b"}}})).await;
    assert_eq!(c.bound("p").await, "n2");
    assert!(scheduled_true(&c.pods().get("p").await.unwrap()));
    c.pod("nowhere", json!({"spec": {"nodeSelector": {"zone": "c"}}})).await;
    let want =
        format!("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. {}", preemption(2));
    assert_eq!(c.unschedulable("nowhere", &want).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_node_affinity_is_honoured() {
    let c = Cluster::started().await;
    c.node("n1", json!({"metadata": {"labels": {"gpu-gen": "3"}}})).await;
    c.node("n2", json!({"metadata": {"labels": {"gpu-gen": "5"}}})).await;
    c.node("n3", json!({})).await;
    let affinity = |exprs: Value| {
        json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}}}})
    };
    c.pod("new-gen", affinity(json!([{"key": "gpu-gen", "operator": "Gt", "values": ["4"]}]))).await;
    c.pod("unlabelled", affinity(json!([{"key": "gpu-gen", "operator": "DoesNotExist"}]))).await;
    c.pod("in", affinity(json!([{"key": "gpu-gen", "operator": "In", "values": ["3"]}]))).await;
    assert_eq!(c.bound("new-gen").await, "n2");
    assert_eq!(c.bound("unlabelled").await, "n3");
    assert_eq!(c.bound("in").await, "n1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_keep_pods_away_unless_tolerated() {
    let c = Cluster::started().await;
    c.node("n1", json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}})).await;
    c.node("n2", json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}})).await;
    c.node("n3", json!({"spec": {"taints": [{"key": "slow", "effect": "PreferNoSchedule"}]}})).await;
    c.pod("plain", json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n3"}}})).await;
    assert_eq!(c.bound("plain").await, "n3", "PreferNoSchedule does not filter");
    c.pod(
        "infra",
        json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]}}),
    )
    .await;
    assert_eq!(c.bound("infra").await, "n1");
    c.pod(
        "maint",
        json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n2"},
        "tolerations": [{"key": "maintenance", "operator": "Exists"}]}}),
    )
    .await;
    assert_eq!(c.bound("maint").await, "n2");
    c.pod("anything", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n3"]}]}]}}},
        "tolerations": [{"operator": "Exists"}]}}))
    .await;
    assert!(["n1", "n2"].contains(&c.bound("anything").await.as_str()));
    c.pod("intolerant", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n3"]}]}]}}}}}))
    .await;
    let want = format!(
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
         1 node(s) had untolerated taint {{dedicated: infra}}, 1 node(s) had untolerated taint {{maintenance: }}. {}",
        preemption(3)
    );
    assert_eq!(c.unschedulable("intolerant", &want).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_can_never_fit_gets_a_readable_unschedulable_message() {
    let c = Cluster::started().await;
    c.node("cpu-1", json!({})).await;
    c.node("cpu-2", json!({})).await;
    c.node("gpu-1", gpu_node("4")).await;
    c.node("gpu-2", gpu_node("4")).await;
    c.pod("greedy", {
        let mut v = requests(json!({"nvidia.com/gpu": "8", "cpu": "1", "memory": "1Gi"}));
        merge(&mut v, json!({"spec": {"nodeSelector": {"accelerator": "nvidia"}}}));
        v
    })
    .await;
    let want = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. \
                preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.";
    assert_eq!(c.unschedulable("greedy", want).await, want);
    c.pod("big", requests(json!({"cpu": "16", "memory": "64Gi"}))).await;
    let want = format!("0/4 nodes are available: 4 Insufficient cpu, 4 Insufficient memory. {}", preemption(4));
    assert_eq!(c.unschedulable("big", &want).await, want);
    c.pod("fits", requests(json!({"nvidia.com/gpu": "4", "cpu": "500m", "memory": "512Mi"}))).await;
    assert!(c.bound("fits").await.starts_with("gpu-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_competing_for_the_last_gpu_one_binds_the_other_is_unschedulable() {
    let c = Cluster::started().await;
    c.node("gpu", gpu_node("2")).await;
    c.pod("holder", requests(json!({"nvidia.com/gpu": "1"}))).await;
    assert_eq!(c.bound("holder").await, "gpu");
    // Created back to back: the second is decided before the cache has seen the first bound.
    c.pod("a-first", requests(json!({"nvidia.com/gpu": "1"}))).await;
    c.pod("b-second", requests(json!({"nvidia.com/gpu": "1"}))).await;
    assert_eq!(c.bound("a-first").await, "gpu");
    let want = format!("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. {}", preemption(1));
    assert_eq!(c.unschedulable("b-second", &want).await, want);
    // Finishing a GPU pod frees its GPU and the waiting pod binds.
    c.pods()
        .patch_status("holder", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))
        .await
        .unwrap();
    assert_eq!(c.bound("b-second").await, "gpu");
    assert!(scheduled_true(&c.pods().get("b-second").await.unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_waiting_together_never_overcommit() {
    // Pods created before the scheduler starts are decided in one pass: exactly capacity bind.
    let mut c = Cluster::new();
    c.node("g1", gpu_node("2")).await;
    c.node("g2", gpu_node("1")).await;
    for i in 0..5 {
        c.pod(&format!("p{i}"), requests(json!({"nvidia.com/gpu": "1"}))).await;
    }
    c.start();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(c.bound(&format!("p{i}")).await);
    }
    nodes.sort();
    assert_eq!(nodes, ["g1", "g1", "g2"]);
    for i in 3..5 {
        c.unschedulable(&format!("p{i}"), "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_pod_binds_once_a_node_fits() {
    let c = Cluster::started().await;
    c.node("small", json!({})).await;
    c.pod("big", requests(json!({"cpu": "12"}))).await;
    let want = format!("0/1 nodes are available: 1 Insufficient cpu. {}", preemption(1));
    assert_eq!(c.unschedulable("big", &want).await, want);
    c.node("large", json!({"status": {"allocatable": {"cpu": "16"}}})).await;
    assert_eq!(c.bound("big").await, "large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordoned_nodes_and_full_nodes_are_skipped() {
    let c = Cluster::started().await;
    c.node("cordoned", json!({"spec": {"unschedulable": true}})).await;
    c.node("tiny", json!({"status": {"allocatable": {"pods": "1"}}})).await;
    c.pod("p1", json!({})).await;
    assert_eq!(c.bound("p1").await, "tiny");
    c.pod("p2", json!({})).await;
    let want = format!("0/2 nodes are available: 1 Too many pods, 1 node(s) were unschedulable. {}", preemption(2));
    assert_eq!(c.unschedulable("p2", &want).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_not_ready_nodes_are_skipped_like_cordoned_ones() {
    let c = Cluster::started().await;
    c.node("a-cordoned", json!({"spec": {"unschedulable": true}})).await;
    // The taints the node lifecycle controller (and upstream's TaintNodesByCondition) put on lost nodes.
    c.node(
        "b-unreachable",
        json!({"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
               "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
    )
    .await;
    c.node(
        "c-not-ready",
        json!({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
               "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    )
    .await;
    c.node("d-ready", json!({})).await;
    for i in 0..3 {
        c.pod(&format!("p{i}"), json!({})).await;
    }
    for i in 0..3 {
        assert_eq!(c.bound(&format!("p{i}")).await, "d-ready");
    }
    let elsewhere = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["d-ready"]}]}]}}}}});
    c.pod("elsewhere", elsewhere.clone()).await;
    let want = format!(
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
         1 node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}, \
         1 node(s) had untolerated taint {{node.kubernetes.io/unreachable: }}, 1 node(s) were unschedulable. {}",
        preemption(4)
    );
    assert_eq!(c.unschedulable("elsewhere", &want).await, want);
    let mut tolerant = elsewhere;
    merge(&mut tolerant, json!({"spec": {"tolerations": [{"operator": "Exists"}]}}));
    c.pod("tolerant", tolerant).await;
    assert!(["a-cordoned", "b-unreachable", "c-not-ready"].contains(&c.bound("tolerant").await.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autopilot_anti_affinities_keep_gpu_pods_off_flagged_nodes() {
    const HEALTH: &str = "autopilot.ibm.com/gpuhealth";
    let c = Cluster::started().await;
    for (name, health) in
        [("a-evict", Some("EVICT")), ("b-testing", Some("TESTING")), ("c-warn", Some("WARN")), ("d-ok", None)]
    {
        let mut extra = gpu_node("4");
        if let Some(h) = health {
            merge(&mut extra, json!({"metadata": {"labels": {HEALTH: h}}}));
        }
        c.node(name, extra).await;
    }
    // The pod spec as the AppWrapper controller creates it: upstream's default Autopilot config
    // adds a required NotIn [TESTING, EVICT] and a preferred NotIn [WARN] (weight 50).
    let mut spec = requests(json!({"nvidia.com/gpu": "1"}))["spec"].take();
    inject_anti_affinities(&mut spec, &AutopilotConfig::default());
    assert!(spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].is_array(), "{spec}");
    for i in 0..8 {
        c.pod(&format!("gpu-{i}"), json!({"spec": spec.clone()})).await;
    }
    // The healthy node is preferred while it has GPUs; then WARN is used; EVICT and TESTING never.
    for i in 0..8 {
        let want = if i < 4 { "d-ok" } else { "c-warn" };
        assert_eq!(c.bound(&format!("gpu-{i}")).await, want, "gpu-{i}");
    }
    c.pod("gpu-8", json!({"spec": spec.clone()})).await;
    let want = format!(
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. {}",
        preemption(4)
    );
    assert_eq!(c.unschedulable("gpu-8", &want).await, want);
    // Even pinned there, a pod with the anti-affinity does not land on the EVICT node.
    let mut pinned = json!({"spec": spec});
    merge(&mut pinned, json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "a-evict"}}}));
    c.pod("pinned", pinned).await;
    let want =
        format!("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. {}", preemption(4));
    assert_eq!(c.unschedulable("pinned", &want).await, want);
}

fn anti_affinity(app: &str, topology_key: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology_key}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_anti_affinity_spreads_over_hostnames_and_racks() {
    let c = Cluster::started().await;
    for (n, rack) in [("n1", "r1"), ("n2", "r1"), ("n3", "r2")] {
        c.node(n, json!({"metadata": {"labels": {"example.com/rack": rack}}})).await;
    }
    for i in 0..3 {
        c.pod(&format!("host-{i}"), anti_affinity("host", "kubernetes.io/hostname")).await;
    }
    let hosts: HashSet<String> =
        futures::future::join_all((0..3).map(|i| c.bound_owned(format!("host-{i}")))).await.into_iter().collect();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    c.pod("host-3", anti_affinity("host", "kubernetes.io/hostname")).await;
    let want = format!("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. {}", preemption(3));
    assert_eq!(c.unschedulable("host-3", &want).await, want);

    c.pod("rack-0", anti_affinity("rack", "example.com/rack")).await;
    c.pod("rack-1", anti_affinity("rack", "example.com/rack")).await;
    let r0 = c.bound("rack-0").await;
    let r1 = c.bound("rack-1").await;
    let rack = |n: &str| if n == "n3" { "r2" } else { "r1" };
    assert_ne!(rack(&r0), rack(&r1));
    c.pod("rack-2", anti_affinity("rack", "example.com/rack")).await;
    c.unschedulable("rack-2", "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.").await;

    // A pod without anti-affinity of its own is kept out by the existing pods' rules.
    c.pod("intruder", json!({"metadata": {"labels": {"app": "host"}}})).await;
    c.unschedulable("intruder", "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules.")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_affinity_follows_peers_into_their_topology_domain() {
    let c = Cluster::started().await;
    for (n, zone) in [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")] {
        c.node(n, json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}})).await;
    }
    let follow = json!({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}});
    c.pod("orphan", follow.clone()).await;
    let want = format!("0/4 nodes are available: 4 node(s) didn't match pod affinity rules. {}", preemption(4));
    assert_eq!(c.unschedulable("orphan", &want).await, want);
    c.pod("db", json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n3"}}})).await;
    assert_eq!(c.bound("db").await, "n3");
    // The waiting pod is retried when pods change, and lands in zone b.
    assert!(["n3", "n4"].contains(&c.bound("orphan").await.as_str()));
    c.pod("web", follow).await;
    assert!(["n3", "n4"].contains(&c.bound("web").await.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_for_other_schedulers_are_left_alone() {
    let c = Cluster::started().await;
    c.node("n1", json!({})).await;
    c.pod("other", json!({"spec": {"schedulerName": "my-scheduler"}})).await;
    c.pod("mine", json!({})).await;
    c.pod("marker", json!({"spec": {"nodeSelector": {"nowhere": "true"}}})).await;
    assert_eq!(c.bound("mine").await, "n1");
    // Unschedulable conditions are written after the round's bindings: "other" was decided by now.
    c.unschedulable("marker", "node(s) didn't match Pod's node affinity/selector").await;
    let other = c.pods().get("other").await.unwrap();
    assert_eq!(node_of(&other), None);
    assert!(other.status.and_then(|s| s.conditions).unwrap_or_default().is_empty());
}

impl Cluster {
    async fn bound_owned(&self, name: String) -> String {
        self.bound(&name).await
    }
}

/// Many pods on many nodes, spread by the least-allocated score, without overcommitting any node.
async fn many(nodes: usize, pods: usize) -> Duration {
    let mut c = Cluster::new();
    for i in 0..nodes {
        c.node(&format!("n{i:04}"), json!({"status": {"allocatable": {"cpu": "16", "pods": "110"}}})).await;
    }
    let api = c.pods();
    futures::stream::iter(0..pods)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i:05}")},
                    "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}))
                .unwrap();
                api.create(&PostParams::default(), &p).await.unwrap();
            }
        })
        .await;
    let start = Instant::now();
    c.start();
    let mut w = watcher(api.clone(), watcher::Config::default()).applied_objects().boxed();
    let mut bound: BTreeMap<String, String> = BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(120), async {
        while bound.len() < pods {
            let p = w.next().await.expect("watch ended").expect("watch error");
            if let Some(n) = node_of(&p) {
                bound.insert(p.name_any(), n);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} of {pods} pods bound", bound.len()));
    let took = start.elapsed();
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for n in bound.values() {
        *per_node.entry(n).or_default() += 1;
    }
    assert!(per_node.values().all(|&k| k <= 16), "a node got more than 16 one-cpu pods");
    assert_eq!(per_node.len(), nodes.min(pods), "least-allocated spreads the pods");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_on_a_hundred_nodes() {
    many(100, 1000).await;
}

/// The scale target: `cargo test --release -p jobset-controllers --test scheduler -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale check; run in release"]
async fn five_thousand_pods_on_five_hundred_nodes() {
    let took = many(500, 5000).await;
    eprintln!("5000 pods on 500 nodes bound in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

const RACK: &str = "example.com/rack";

/// Pod `index` of Job `job` of an exclusive JobSet (on racks), as the JobSet and Job controllers
/// make it; the API server's built-in exclusive placement (upstream's pod webhooks) gives a
/// leader its affinity terms and a follower its leader's rack, and refuses a follower before its
/// leader is bound.
fn exclusive_pod(job: usize, index: usize, class: Option<&str>) -> Pod {
    use jobset_api::jobset::keys::{EXCLUSIVE_TOPOLOGY, JOB_INDEX, JOB_KEY, JOBSET_NAME, REPLICATED_JOB_NAME};
    let labels =
        json!({JOBSET_NAME: "js", REPLICATED_JOB_NAME: "w", JOB_INDEX: job.to_string(), JOB_KEY: format!("key-{job}")});
    let mut annotations = labels.clone();
    annotations[EXCLUSIVE_TOPOLOGY] = json!(RACK);
    annotations["batch.kubernetes.io/job-completion-index"] = json!(index.to_string());
    serde_json::from_value(json!({
        "metadata": {"generateName": format!("js-w-{job}-{index}-"), "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("js-w-{job}"),
                "uid": format!("uid-{job}"), "controller": true}]},
        "spec": {"priorityClassName": class,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
    }))
    .unwrap()
}

/// Waits until `count` pods are bound; their `job-key` label and node by name.
async fn bound_pods(api: &Api<Pod>, count: usize) -> BTreeMap<String, (String, String)> {
    let mut w = watcher(api.clone(), watcher::Config::default()).applied_objects().boxed();
    let mut bound = BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(120), async {
        while bound.len() < count {
            let p = w.next().await.expect("watch ended").expect("watch error");
            if let Some(n) = node_of(&p) {
                bound.insert(p.name_any(), (p.labels()["jobset.sigs.k8s.io/job-key"].clone(), n));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} of {count} pods bound", bound.len()));
    bound
}

async fn create_all(api: &Api<Pod>, pods: Vec<Pod>) {
    futures::stream::iter(pods)
        .for_each_concurrent(16, |p| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &p).await.unwrap();
            }
        })
        .await;
}

/// Creates PriorityClass `name` of `value`.
async fn priority_class(client: &Client, name: &str, value: i32) {
    let pc = serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
    Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &pc).await.unwrap();
}

/// kube-scheduler's PrioritySort: when room appears on a full node, the pending pod of a higher
/// PriorityClass binds first, ahead of lower-priority pods that have waited longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_pod_binds_before_earlier_low_priority_pending_pods() {
    let c = Cluster::started().await;
    priority_class(&c.client, "low", 10).await;
    priority_class(&c.client, "high", 1000).await;
    c.node("n1", json!({"status": {"allocatable": {"pods": "1"}}})).await;
    c.pod("running", json!({})).await;
    assert_eq!(c.bound("running").await, "n1");
    for name in ["low-1", "low-2"] {
        c.pod(name, json!({"spec": {"priorityClassName": "low"}})).await;
        c.unschedulable(name, "1 Too many pods").await;
    }
    c.pod("urgent", json!({"spec": {"priorityClassName": "high"}})).await;
    c.unschedulable("urgent", "1 Too many pods").await;
    // The running pod finishes: its place goes to the high-priority pod.
    let done = Patch::Merge(json!({"status": {"phase": "Succeeded"}}));
    c.pods().patch_status("running", &PatchParams::default(), &done).await.unwrap();
    assert_eq!(c.bound("urgent").await, "n1");
    for name in ["low-1", "low-2"] {
        assert_eq!(node_of(&c.pods().get(name).await.unwrap()), None, "{name} was bound");
    }
}

/// JobSet exclusive placement as upstream's pod webhooks shape it: the leaders (completion index
/// 0) first, each keeping every other Job of its priority out of its rack, then the followers,
/// pinned to their leader's rack. Each job ends in one rack of its own.
async fn exclusive(jobs: usize, pods_per_job: usize, racks: usize, nodes_per_rack: usize) -> Duration {
    let mut c = Cluster::new();
    for r in 0..racks {
        for n in 0..nodes_per_rack {
            c.node(&format!("r{r:03}-n{n}"), json!({"metadata": {"labels": {RACK: format!("r{r:03}")}}})).await;
        }
    }
    let api = c.pods();
    create_all(&api, (0..jobs).map(|j| exclusive_pod(j, 0, None)).collect()).await;
    let start = Instant::now();
    c.start();
    bound_pods(&api, jobs).await;
    let followers = (0..jobs).flat_map(|j| (1..pods_per_job).map(move |i| exclusive_pod(j, i, None))).collect();
    create_all(&api, followers).await;
    let bound = bound_pods(&api, jobs * pods_per_job).await;
    let took = start.elapsed();
    let mut racks_of_job: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    let mut jobs_of_rack: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for (job, n) in bound.values() {
        let rack = &n[..4];
        racks_of_job.entry(job).or_default().insert(rack);
        jobs_of_rack.entry(rack).or_default().insert(job);
    }
    assert!(racks_of_job.values().all(|r| r.len() == 1), "a job spans racks: {racks_of_job:?}");
    assert!(jobs_of_rack.values().all(|j| j.len() == 1), "a rack holds two jobs: {jobs_of_rack:?}");
    took
}

/// The leader's anti-affinity names its priority: a Job of another priority is not kept out of a
/// rack (upstream lets the higher one preempt there), one of the same priority is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_placement_keeps_out_only_jobs_of_the_same_priority() {
    let mut c = Cluster::new();
    c.node("r000-n0", json!({"metadata": {"labels": {RACK: "r000"}}})).await;
    let api = c.pods();
    c.start();
    priority_class(&c.client, "higher", 10).await;
    let first = api.create(&PostParams::default(), &exclusive_pod(0, 0, None)).await.unwrap();
    c.bound(&first.name_any()).await;
    let same = api.create(&PostParams::default(), &exclusive_pod(1, 0, None)).await.unwrap();
    c.unschedulable(&same.name_any(), "didn't match pod anti-affinity rules").await;
    let higher = api.create(&PostParams::default(), &exclusive_pod(2, 0, Some("higher"))).await.unwrap();
    assert_eq!(c.bound(&higher.name_any()).await, "r000-n0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_placement_one_job_per_rack() {
    exclusive(10, 4, 10, 2).await;
}

/// The time includes creating the 3 900 followers through the admission that pins them (most
/// of its 3 s on a 2-core machine).
/// `cargo test --release -p jobset-controllers --test scheduler -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale check; run in release"]
async fn exclusive_placement_of_a_hundred_jobs_on_five_hundred_nodes() {
    let took = exclusive(100, 40, 100, 5).await;
    eprintln!("100 exclusive jobs of 40 pods on 500 nodes bound in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

mod gang {
    //! Gang scheduling (KEP-4671) end to end against the in-process embedded API server: PodGroups
    //! with `schedulingPolicy.gang.minCount`, pods linked by `spec.schedulingGroup.podGroupName`, the
    //! scheduler binding a gang all or nothing; the tests wait through watches, with a timeout.

    use futures::TryStreamExt;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
    use kube::api::ListParams;

    use super::*;

    impl Cluster {
        fn groups(&self) -> Api<PodGroup> {
            Api::default_namespaced(self.client.clone())
        }

        async fn gpu_node(&self, name: &str) {
            let alloc = json!({"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"});
            let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"capacity": alloc, "allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
            Api::<Node>::all(self.client.clone()).create(&PostParams::default(), &node).await.unwrap();
        }

        async fn cordon(&self, name: &str, cordoned: bool) {
            let patch = Patch::Merge(json!({"spec": {"unschedulable": cordoned}}));
            Api::<Node>::all(self.client.clone()).patch(name, &PatchParams::default(), &patch).await.unwrap();
        }

        async fn gang(&self, name: &str, min_count: i32) {
            let pg: PodGroup = serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}),
            )
            .unwrap();
            self.groups().create(&PostParams::default(), &pg).await.unwrap();
        }

        /// Creates `count` pods of `group` asking for 2 GPUs each: `<group>-0`, ...
        async fn gang_pods(&self, group: &str, count: usize) {
            for i in 0..count {
                let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{group}-{i}")},
                "spec": {"schedulingGroup": {"podGroupName": group}, "containers": [{"name": "main", "image": "busybox",
                    "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]},
            }))
            .unwrap();
                self.pods().create(&PostParams::default(), &pod).await.unwrap();
            }
        }

        /// Waits for the PodGroup's `PodGroupScheduled` condition with `status` (any status when
        /// `None`) and returns its (status, reason, message).
        async fn group_condition(&self, name: &str, status: Option<&'static str>) -> (String, String, String) {
            let cond = move |g: &PodGroup| {
                let cs = g.status.as_ref()?.conditions.as_ref()?;
                let c = cs.iter().find(|c| c.type_ == "PodGroupScheduled" && status.is_none_or(|s| c.status == s))?;
                Some((c.status.clone(), c.reason.clone(), c.message.clone()))
            };
            let found = tokio::time::timeout(
                WAIT,
                await_condition(self.groups(), name, move |g: Option<&PodGroup>| g.and_then(cond).is_some()),
            )
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for PodGroup {name} to have PodGroupScheduled={status:?}"));
            cond(&found.unwrap().unwrap()).unwrap()
        }

        /// Waits, through a watch, for an event `pred` accepts.
        async fn wait_event(&self, pred: impl Fn(&Event) -> bool) {
            let events: Api<Event> = Api::default_namespaced(self.client.clone());
            let stream = watcher(events, watcher::Config::default()).applied_objects();
            let mut stream = std::pin::pin!(stream);
            tokio::time::timeout(WAIT, async {
                while let Some(e) = stream.try_next().await.unwrap() {
                    if pred(&e) {
                        return;
                    }
                }
            })
            .await
            .expect("timed out waiting for the event");
        }

        /// The pods of `group` bound to a node.
        async fn bound_of(&self, group: &str) -> Vec<String> {
            let pods = self.pods().list(&ListParams::default()).await.unwrap();
            let mut names: Vec<String> = pods
                .items
                .iter()
                .filter(|p| p.name_any().starts_with(&format!("{group}-")))
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .map(|p| p.name_any())
                .collect();
            names.sort();
            names
        }

        async fn wait_bound(&self, group: &str, count: usize) {
            for i in 0..count {
                let name = format!("{group}-{i}");
                let bound = |p: Option<&Pod>| p.and_then(|p| p.spec.as_ref()?.node_name.as_ref()).is_some();
                tokio::time::timeout(WAIT, await_condition(self.pods(), &name, bound))
                    .await
                    .unwrap_or_else(|_| panic!("timed out waiting for {name} to be bound"))
                    .unwrap();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gang_stays_entirely_pending_while_it_cannot_fit_and_starts_together_once_it_can() {
        let mut c = Cluster::new();
        c.start();
        c.gpu_node("n1").await;
        c.gpu_node("n2").await;
        c.cordon("n2", true).await;
        c.gang("train", 3).await;
        c.gang_pods("train", 3).await;

        let (_, reason, message) = c.group_condition("train", Some("False")).await;
        assert_eq!(reason, "Unschedulable");
        assert!(
            message.starts_with("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining: 0/2 nodes are available"),
            "{message}"
        );
        assert_eq!(c.bound_of("train").await, Vec::<String>::new(), "two pods fit on n1, yet none is bound");
        c.wait_event(|e: &Event| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("train")
                && e.note.as_deref().is_some_and(|n| n.starts_with("minCount (3) cannot be satisfied"))
        })
        .await;

        c.cordon("n2", false).await;
        c.wait_bound("train", 3).await;
        let (_, reason, _) = c.group_condition("train", Some("True")).await;
        assert_eq!(reason, "Scheduled");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_two_gangs_that_each_fit_alone_one_gets_everything_and_the_other_nothing() {
        let mut c = Cluster::new();
        c.gpu_node("n1").await;
        c.gpu_node("n2").await;
        c.gang("a", 3).await;
        c.gang("b", 3).await;
        // Both gangs wait before the scheduler starts: its first round sees them together.
        c.gang_pods("a", 3).await;
        c.gang_pods("b", 3).await;
        c.start();

        // Each gang's condition is written in the round that tried both.
        let (a, _, _) = c.group_condition("a", None).await;
        let (scheduled, waiting) = if a == "True" { ("a", "b") } else { ("b", "a") };
        c.wait_bound(scheduled, 3).await;
        c.group_condition(waiting, Some("False")).await;
        c.group_condition(scheduled, Some("True")).await;
        assert_eq!(c.bound_of(scheduled).await.len(), 3);
        assert_eq!(c.bound_of(waiting).await, Vec::<String>::new(), "the other gang is not half-bound");
    }
}
