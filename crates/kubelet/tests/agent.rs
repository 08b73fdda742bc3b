//! The node agent end to end against the embedded API server (in-process client). Pods are bound
//! by setting `spec.nodeName` at creation; every wait goes through a watch with a timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_kubelet::runtime::simulated::{SimulatedRuntime, SimulationState};
use jobset_kubelet::{
    AgentConfig, NODE_FAILED_ANNOTATION, NodeConfig, NodeHandle, follow_failure_annotations, run_node,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(20);

struct Env {
    client: Client,
    runtime: Arc<SimulatedRuntime>,
    _server: Arc<ApiServer>,
    logs: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let logs = tempfile::tempdir().unwrap();
        let config = ServerConfig { log_dir: Some(logs.path().to_path_buf()), ..ServerConfig::default() };
        let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), config).unwrap();
        // The server creates a resource's watch history lazily, at its first write or watch; a
        // watch that starts from a list made before that is told 410 and relists (harmless for the
        // agent, but the tests want to see every event).
        let def = server.registry().get("", "v1", "pods").unwrap();
        let _ = server.store.watch(&def, None, None);
        Env {
            client: server.client(),
            runtime: Arc::new(SimulatedRuntime::new(SimulationState::new())),
            _server: server,
            logs,
        }
    }

    fn agent_config(&self) -> AgentConfig {
        AgentConfig {
            heartbeat_interval: Duration::from_millis(50),
            lease_duration: Duration::from_secs(1),
            status_update_interval: Duration::from_millis(100),
            restart_backoff_base: Duration::from_millis(20),
            restart_backoff_max: Duration::from_millis(100),
            restart_backoff_reset: Duration::from_secs(600),
            create_retry: Duration::from_millis(20),
            min_kill_grace_after_pre_stop: Duration::from_millis(100),
            default_run_duration: Duration::from_millis(20),
            log_dir: Some(self.logs.path().to_path_buf()),
        }
    }

    async fn node(&self, name: &str) -> NodeHandle {
        run_node(self.client.clone(), NodeConfig::new(name), self.agent_config(), self.runtime.clone()).await
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create(&self, pod: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        self.pods().create(&PostParams::default(), &pod).await.unwrap()
    }

    async fn create_pod(&self, name: &str, node: &str, policy: &str, annotations: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": node, "restartPolicy": policy, "containers": [{"name": "main", "image": "busybox"}]}
        }))
        .unwrap();
        self.pods().create(&PostParams::default(), &pod).await.unwrap()
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn finished(p: Option<&Pod>) -> bool {
    p.is_some_and(|p| matches!(phase(p), Some("Succeeded" | "Failed")))
}

/// Waits (through a watch of the one object) until `cond` holds; `None` if `within` passes first.
/// Watch errors are skipped: the watcher relists by itself.
async fn wait_within<K>(
    api: &Api<K>,
    name: &str,
    within: Duration,
    cond: impl Fn(Option<&K>) -> bool,
) -> Option<Option<K>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api.clone(), config).boxed();
    tokio::time::timeout(within, async {
        let mut obj: Option<K> = None;
        let mut listing = false;
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Init) => {
                    obj = None;
                    listing = true;
                }
                Ok(watcher::Event::InitApply(o)) => obj = Some(o),
                Ok(watcher::Event::InitDone) => listing = false,
                Ok(watcher::Event::Apply(o)) => obj = Some(o),
                Ok(watcher::Event::Delete(_)) => obj = None,
                Err(_) => continue,
            }
            if !listing && cond(obj.as_ref()) {
                return obj;
            }
        }
        panic!("the watch of {name} ended")
    })
    .await
    .ok()
}

async fn wait<K>(api: &Api<K>, name: &str, what: &str, cond: impl Fn(Option<&K>) -> bool) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    wait_within(api, name, TIMEOUT, cond).await.unwrap_or_else(|| panic!("timed out waiting for {name}: {what}"))
}

/// A watch on one pod that has finished its initial list (so nothing after this call is missed).
async fn watch_pod(api: &Api<Pod>, name: &str) -> futures::stream::BoxStream<'static, watcher::Event<Pod>> {
    let mut events = watcher(api.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .filter_map(|e| futures::future::ready(e.ok()))
        .boxed();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(e) = events.next().await {
            if matches!(e, watcher::Event::InitDone) {
                return;
            }
        }
    })
    .await
    .expect("the watch starts");
    events
}

fn main_status(p: &Pod) -> &ContainerStatus {
    &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
}

fn condition<'a>(p: &'a Pod, type_: &str) -> (&'a str, Option<&'a str>) {
    let c = p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == type_).unwrap();
    (c.status.as_str(), c.reason.as_deref())
}

async fn renew_time(leases: &Api<Lease>, name: &str) -> jiff::Timestamp {
    leases.get(name).await.unwrap().spec.unwrap().renew_time.unwrap().0
}

/// Whether the Lease is renewed within `within`.
async fn renewed_within(leases: &Api<Lease>, name: &str, within: Duration) -> bool {
    let since = renew_time(leases, name).await;
    let cond =
        move |l: Option<&Lease>| l.and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).is_some_and(|t| t.0 > since);
    wait_within(leases, name, within, cond).await.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_registers_and_its_lease_renews() {
    let env = Env::new();
    let mut cfg = NodeConfig::new("n1");
    cfg.labels.insert("zone".into(), "a".into());
    cfg.capacity.insert("nvidia.com/gpu".into(), "8".into());
    cfg.taints.push(jobset_kubelet::config::parse_taint("gpu=true:NoSchedule").unwrap());
    let handle = run_node(env.client.clone(), cfg, env.agent_config(), env.runtime.clone()).await;

    let nodes: Api<Node> = Api::all(env.client.clone());
    let node = wait(&nodes, "n1", "registered", |n: Option<&Node>| n.is_some()).await.unwrap();
    let labels = node.labels();
    assert_eq!(labels["kubernetes.io/hostname"], "n1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["zone"], "a");
    assert_eq!(node.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "gpu");
    let status = node.status.as_ref().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["nvidia.com/gpu"].0, "8");
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(status.node_info.as_ref().unwrap().kubelet_version, jobset_kubelet::node::KUBELET_VERSION);
    let ready = status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref(), ready.message.as_deref()),
        ("True", Some("KubeletReady"), Some("kubelet is posting ready status"))
    );

    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    let lease = wait(&leases, "n1", "lease", |l: Option<&Lease>| l.is_some()).await.unwrap();
    let spec = lease.spec.as_ref().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(lease.owner_references()[0].uid, node.uid().unwrap());
    assert!(renewed_within(&leases, "n1", TIMEOUT).await, "the lease is renewed");

    // The node status heartbeat moves too.
    let beat = ready.last_heartbeat_time.clone().unwrap().0;
    wait(&nodes, "n1", "a newer heartbeat", move |n: Option<&Node>| {
        n.and_then(|n| {
            n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?.last_heartbeat_time.clone()
        })
        .is_some_and(|t| t.0 > beat)
    })
    .await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_runs_and_succeeds() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let pods = env.pods();
    // Watch from before the pod exists, to see every phase it goes through.
    let mut events = watch_pod(&pods, "ok").await;
    let created = env.create_pod("ok", "n1", "Never", json!({"sim.jobset.x-k8s.io/duration": "50ms"})).await;
    let mut phases: Vec<String> = vec![];
    let done = tokio::time::timeout(TIMEOUT, async {
        while let Some(e) = events.next().await {
            let watcher::Event::Apply(p) = e else { continue };
            if let Some(ph) = phase(&p)
                && phases.last().map(String::as_str) != Some(ph)
            {
                phases.push(ph.to_string());
            }
            if finished(Some(&p)) {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the pod finishes");
    assert_eq!(phases, ["Pending", "Running", "Succeeded"]);

    let status = done.status.as_ref().unwrap();
    assert!(status.start_time.is_some());
    assert!(status.host_ip.as_deref().is_some_and(|ip| ip.starts_with("172.18.")));
    assert!(status.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.")));
    assert_eq!(condition(&done, "PodScheduled").0, "True");
    assert_eq!(condition(&done, "Initialized").0, "True");
    assert_eq!(condition(&done, "Ready"), ("False", Some("PodCompleted")));
    assert_eq!(condition(&done, "ContainersReady"), ("False", Some("PodCompleted")));
    let cs = main_status(&done);
    assert_eq!((cs.restart_count, cs.ready, cs.started), (0, false, Some(false)));
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let (start, end) = (t.started_at.clone().unwrap().0, t.finished_at.clone().unwrap().0);
    assert!(start <= end);

    // The log the runtime wrote is what the API server serves.
    let log = pods.logs("ok", &LogParams::default()).await.unwrap();
    assert_eq!(log, "simulated container main started\nsimulated container main exited with code 0\n");
    let file = env.logs.path().join(format!("default_ok_{}", created.uid().unwrap())).join("main/0.log");
    assert!(file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_code_3_with_restart_policy_never_fails_the_pod() {
    let env = Env::new();
    let _n = env.node("n1").await;
    env.create_pod("bad", "n1", "Never", json!({"sim.jobset.x-k8s.io/exit-code": "3"})).await;
    let p = wait(&env.pods(), "bad", "finished", finished).await.unwrap();
    assert_eq!(phase(&p), Some("Failed"));
    let cs = main_status(&p);
    assert_eq!(cs.restart_count, 0);
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(condition(&p, "Ready"), ("False", Some("ContainersNotReady")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_failure_restarts_in_place_until_the_attempts_succeed() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let ann = json!({"sim.jobset.x-k8s.io/fail-attempts": "2", "sim.jobset.x-k8s.io/exit-code": "1"});
    env.create_pod("flaky", "n1", "OnFailure", ann).await;
    let p = wait(&env.pods(), "flaky", "finished", finished).await.unwrap();
    assert_eq!(phase(&p), Some("Succeeded"));
    let cs = main_status(&p);
    assert_eq!(cs.restart_count, 2);
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    let now = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(now.exit_code, 0);
    // One log file per run.
    let previous = env.pods().logs("flaky", &LogParams { previous: true, ..Default::default() }).await.unwrap();
    assert!(previous.ends_with("exited with code 1\n"), "{previous}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fail_indexes_fail_only_the_listed_completion_indexes() {
    let env = Env::new();
    let _n = env.node("n1").await;
    for i in 0..3 {
        let ann = json!({
            "sim.jobset.x-k8s.io/fail-indexes": "1",
            "sim.jobset.x-k8s.io/exit-code": "42",
            "batch.kubernetes.io/job-completion-index": i.to_string(),
        });
        env.create_pod(&format!("idx-{i}"), "n1", "Never", ann).await;
    }
    for (i, (want, code)) in [("Succeeded", 0), ("Failed", 42), ("Succeeded", 0)].into_iter().enumerate() {
        let p = wait(&env.pods(), &format!("idx-{i}"), "finished", finished).await.unwrap();
        assert_eq!(phase(&p), Some(want), "index {i}");
        assert_eq!(main_status(&p).state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, code);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn init_containers_run_before_the_main_container() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "init"},
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [{"name": "main", "image": "busybox"}]
        }
    }))
    .unwrap();
    env.pods().create(&PostParams::default(), &pod).await.unwrap();
    let p = wait(&env.pods(), "init", "finished", finished).await.unwrap();
    assert_eq!(phase(&p), Some("Succeeded"));
    let init = &p.status.as_ref().unwrap().init_container_statuses.as_ref().unwrap()[0];
    let (it, mt) = (
        init.state.as_ref().unwrap().terminated.clone().unwrap(),
        main_status(&p).state.as_ref().unwrap().terminated.clone().unwrap(),
    );
    assert_eq!((it.reason.as_deref(), init.ready), (Some("Completed"), true));
    assert!(it.finished_at.unwrap().0 <= mt.started_at.unwrap().0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_running_pod_fails_it_then_removes_it() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let pods = env.pods();
    env.create_pod("long", "n1", "Always", json!({"sim.jobset.x-k8s.io/duration": "forever"})).await;
    wait(&pods, "long", "running", |p: Option<&Pod>| p.is_some_and(|p| phase(p) == Some("Running"))).await;
    assert_eq!(env.runtime.running(), 1);

    let mut events = watch_pod(&pods, "long").await;
    pods.delete("long", &DeleteParams::default()).await.unwrap();
    let mut final_status = None;
    tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = events.next().await {
            match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) if phase(&p) == Some("Failed") => {
                    assert!(p.metadata.deletion_timestamp.is_some());
                    final_status = Some(p);
                }
                watcher::Event::Delete(_) => return,
                _ => {}
            }
        }
    })
    .await
    .expect("the pod is removed");
    let p = final_status.expect("the terminal status was written before the pod went away");
    let t = main_status(&p).state.clone().unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (143, Some("Error")));
    assert_eq!(main_status(&p).restart_count, 0);
    assert!(pods.get_opt("long").await.unwrap().is_none());
    assert_eq!(env.runtime.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_node_stops_renewing_its_lease_until_it_recovers() {
    let env = Env::new();
    let handle = env.node("n1").await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    wait(&leases, "n1", "lease", |l: Option<&Lease>| l.is_some()).await;
    assert!(renewed_within(&leases, "n1", TIMEOUT).await);

    handle.fail();
    assert!(handle.is_failed());
    // A renewal in flight when fail() was called may still land: allow one.
    let mut quiet = false;
    for _ in 0..3 {
        if !renewed_within(&leases, "n1", Duration::from_millis(500)).await {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "a failed node keeps renewing its lease");

    // A pod bound to a dead node is not run (nor reported) until the node recovers.
    env.create_pod("later", "n1", "Never", json!({})).await;
    let started = |p: Option<&Pod>| p.is_some_and(|p| phase(p) != Some("Pending"));
    let touched = wait_within(&env.pods(), "later", Duration::from_millis(300), started).await;
    assert!(touched.is_none(), "a failed node reported a pod");

    handle.recover();
    assert!(renewed_within(&leases, "n1", TIMEOUT).await, "the lease is renewed after recovery");
    let p = wait(&env.pods(), "later", "finished", finished).await.unwrap();
    assert_eq!(phase(&p), Some("Succeeded"));

    // The node annotation `jobset node fail` sets reaches the agent too.
    let follower = follow_failure_annotations(env.client.clone(), vec![handle.clone()]);
    let nodes: Api<Node> = Api::all(env.client.clone());
    let mut alive = handle.watch_alive();
    let annotate = |v: serde_json::Value| json!({"metadata": {"annotations": {NODE_FAILED_ANNOTATION: v}}});
    nodes.patch("n1", &PatchParams::default(), &Patch::Merge(annotate(json!("true")))).await.unwrap();
    tokio::time::timeout(TIMEOUT, alive.wait_for(|a| !*a)).await.unwrap().unwrap();
    nodes.patch("n1", &PatchParams::default(), &Patch::Merge(annotate(json!(null)))).await.unwrap();
    tokio::time::timeout(TIMEOUT, alive.wait_for(|a| *a)).await.unwrap().unwrap();
    follower.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_nodes_in_one_process() {
    let env = Env::new();
    let mut cfg = env.agent_config();
    cfg.heartbeat_interval = Duration::from_secs(2);
    cfg.status_update_interval = Duration::from_secs(5);
    let mut handles = vec![];
    for node in NodeConfig::uniform(500, "node") {
        handles.push(run_node(env.client.clone(), node, cfg.clone(), env.runtime.clone()).await);
    }
    for i in 0..500 {
        env.create_pod(&format!("p{i}"), &format!("node-{i}"), "Never", json!({})).await;
    }
    for i in 0..500 {
        let p = wait(&env.pods(), &format!("p{i}"), "finished", finished).await.unwrap();
        assert_eq!(phase(&p), Some("Succeeded"));
        assert_eq!(p.status.as_ref().unwrap().host_ip, {
            let n: Api<Node> = Api::all(env.client.clone());
            let node = n.get(&format!("node-{i}")).await.unwrap();
            Some(node.status.unwrap().addresses.unwrap()[0].address.clone())
        });
    }
    for h in handles {
        h.shutdown().await;
    }
}

fn status_of<'a>(p: &'a Pod, name: &str) -> &'a ContainerStatus {
    let s = p.status.as_ref().unwrap();
    s.init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
}

fn has_condition(p: &Pod, type_: &str) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == type_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_restart_fails_pods_whose_containers_had_started() {
    let env = Env::new();
    let first = env.node("n1").await;
    let pods = env.pods();
    env.create_pod("long", "n1", "Always", json!({"sim.jobset.x-k8s.io/duration": "forever"})).await;
    wait(&pods, "long", "running", |p: Option<&Pod>| p.is_some_and(|p| phase(p) == Some("Running"))).await;
    first.shutdown().await;
    assert_eq!(env.runtime.running(), 0, "the old agent's containers are gone");
    // Bound while no agent runs: nothing of it started.
    env.create_pod("fresh", "n1", "Never", json!({"sim.jobset.x-k8s.io/duration": "50ms"})).await;

    let _second = env.node("n1").await;
    let p =
        wait(&pods, "long", "failed", |p: Option<&Pod>| p.is_some_and(|p| phase(p) == Some("Failed"))).await.unwrap();
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.message.as_deref(), Some("the node agent restarted and the pod's containers are gone"));
    assert_eq!(status.reason, None);
    let cs = main_status(&p);
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref(), t.message.as_deref()),
        (137, Some("ContainerStatusUnknown"), Some("The container could not be located when the pod was terminated"))
    );
    assert_eq!(cs.restart_count, 0);
    assert!(t.started_at.is_some() && t.container_id.is_some());
    assert_eq!(condition(&p, "Ready").0, "False");
    // The pod that had not started runs normally.
    let p = wait(&pods, "fresh", "finished", finished).await.unwrap();
    assert_eq!(phase(&p), Some("Succeeded"));
    assert_eq!(main_status(&p).state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 0);
    // Nothing of the failed pod runs.
    assert_eq!(env.runtime.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_all_containers_restarts_the_pod_in_place() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let pods = env.pods();
    let mut events = watch_pod(&pods, "ra").await;
    let created = env
        .create(json!({
            "metadata": {"name": "ra", "annotations": {
                "sim.jobset.x-k8s.io/exit-code-main": "42",
                "sim.jobset.x-k8s.io/fail-attempts": "1",
                "sim.jobset.x-k8s.io/duration-main": "100ms",
            }},
            "spec": {
                "nodeName": "n1",
                "restartPolicy": "Never",
                "initContainers": [
                    {"name": "proxy", "image": "busybox", "restartPolicy": "Always"},
                    {"name": "setup", "image": "busybox"}
                ],
                "containers": [{"name": "main", "image": "busybox", "restartPolicy": "Never",
                    "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]}]
            }
        }))
        .await;
    // (condition status, reason, phase) as they change.
    let mut seen: Vec<(String, Option<String>, String)> = vec![];
    let done = tokio::time::timeout(TIMEOUT, async {
        while let Some(e) = events.next().await {
            let watcher::Event::Apply(p) = e else { continue };
            if let Some(c) = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "AllContainersRestarting"))
            {
                let entry = (c.status.clone(), c.reason.clone(), phase(&p).unwrap_or_default().to_string());
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
            }
            if finished(Some(&p)) {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the pod finishes");
    let entries: Vec<(&str, Option<&str>)> = seen.iter().map(|(s, r, _)| (s.as_str(), r.as_deref())).collect();
    // Simulated containers die at once when killed, so the status that has them killed (the
    // condition True, RestartAllContainersStarted) is written together with the one that has them
    // restarting, as kubelet's status manager writes only the latest status: the condition is
    // first seen False. Real processes take a moment to die: local/tests/process.rs sees the True.
    assert_eq!(entries.first(), Some(&("False", None)), "{seen:?}");
    assert_eq!(entries.last(), Some(&("False", Some("PodCompleted"))), "{seen:?}");
    assert!(seen.iter().any(|(s, _, ph)| s == "False" && ph == "Pending"), "Pending during the restart: {seen:?}");
    assert_eq!(phase(&done), Some("Succeeded"));
    assert_eq!(done.metadata.uid, created.metadata.uid);
    for name in ["proxy", "setup", "main"] {
        assert_eq!(status_of(&done, name).restart_count, 1, "{name}");
    }
    let last = status_of(&done, "main").last_state.clone().unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 42);
    let last = status_of(&done, "setup").last_state.clone().unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 0);
    assert_eq!(condition(&done, "Initialized").0, "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probes_and_hooks_pass_with_the_simulated_runtime() {
    let env = Env::new();
    let _n = env.node("n1").await;
    let pods = env.pods();
    let probes = json!({
        "startupProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
        "readinessProbe": {"httpGet": {"port": "http", "path": "/ready"}, "periodSeconds": 1},
        "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        "lifecycle": {"postStart": {"exec": {"command": ["true"]}}, "preStop": {"sleep": {"seconds": 0}}},
        "ports": [{"name": "http", "containerPort": 8080}]
    });
    let with = |name: &str, extra: serde_json::Value| {
        let mut c = probes.clone();
        c["name"] = json!(name);
        c["image"] = json!("busybox");
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    env.create(json!({
        "metadata": {"name": "probed", "annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "initContainers": [with("proxy", json!({"restartPolicy": "Always"}))],
            "containers": [with("main", json!({}))]
        }
    }))
    .await;
    let ready = |p: Option<&Pod>| p.is_some_and(|p| has_condition(p, "Ready") && condition(p, "Ready").0 == "True");
    let p = wait(&pods, "probed", "ready", ready).await.unwrap();
    for name in ["proxy", "main"] {
        let cs = status_of(&p, name);
        assert_eq!((cs.started, cs.ready, cs.restart_count), (Some(true), true, 0), "{name}");
    }
    assert_eq!(condition(&p, "ContainersReady").0, "True");
    // Deletion runs the preStop hooks and stops everything.
    pods.delete("probed", &DeleteParams::default()).await.unwrap();
    wait(&pods, "probed", "gone", |p: Option<&Pod>| p.is_none()).await;
    assert_eq!(env.runtime.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_never_ready_container_keeps_the_pod_unready_with_a_passing_probe() {
    let env = Env::new();
    let _n = env.node("n1").await;
    env.create(json!({
        "metadata": {"name": "nr", "annotations": {"sim.jobset.x-k8s.io/duration": "forever", "sim.jobset.x-k8s.io/never-ready": "true"}},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}]}
    }))
    .await;
    let started = |p: Option<&Pod>| {
        p.is_some_and(|p| {
            p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c[0].started == Some(true))
        })
    };
    let p = wait(&env.pods(), "nr", "started", started).await.unwrap();
    assert_eq!(phase(&p), Some("Running"));
    assert_eq!(condition(&p, "Ready"), ("False", Some("ContainersNotReady")));
}
