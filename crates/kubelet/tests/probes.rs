//! Probes, lifecycle hooks and RestartAllContainers end to end with real processes (the process
//! runtime) through a node agent against the embedded API server. Files the containers and
//! probes share live in a temporary directory under Cargo's target tmpdir (not /tmp, which a
//! runtime may make private to each pod). Every wait goes through a watch with a timeout.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime};
use jobset_kubelet::{AgentConfig, NodeConfig, NodeHandle, run_node};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);

struct Env {
    pods: Api<Pod>,
    _node: NodeHandle,
    _server: Arc<ApiServer>,
    dir: tempfile::TempDir,
}

impl Env {
    async fn new() -> Env {
        // Outside /tmp (which each pod sees as its own) and outside the target dir, which may
        // itself be under /tmp.
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default()).unwrap();
        let def = server.registry().get("", "v1", "pods").unwrap();
        let _ = server.store.watch(&def, None, None);
        let client = server.client();
        let cfg = AgentConfig {
            heartbeat_interval: Duration::from_millis(100),
            status_update_interval: Duration::from_millis(100),
            restart_backoff_base: Duration::from_millis(20),
            restart_backoff_max: Duration::from_millis(100),
            min_kill_grace_after_pre_stop: Duration::from_millis(200),
            ..AgentConfig::default()
        };
        let runtime = Arc::new(ProcessRuntime::new(ProcessConfig::default()));
        let node = run_node(client.clone(), NodeConfig::new("n1"), cfg, runtime).await;
        Env { pods: Api::namespaced(client, "default"), _node: node, _server: server, dir }
    }

    /// A path in the test's directory, as a string for shell scripts.
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    async fn create(&self, pod: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        self.pods.create(&PostParams::default(), &pod).await.unwrap()
    }

    /// Waits until `cond` holds for the pod; `None` if `within` passes first.
    async fn wait_within(&self, name: &str, within: Duration, cond: impl Fn(&Pod) -> bool) -> Option<Pod> {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(self.pods.clone(), config).boxed();
        tokio::time::timeout(within, async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                    && cond(&p)
                {
                    return p;
                }
            }
            panic!("the watch of {name} ended")
        })
        .await
        .ok()
    }

    async fn wait(&self, name: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
        self.wait_within(name, TIMEOUT, cond).await.unwrap_or_else(|| panic!("timed out waiting for {name}: {what}"))
    }
}

fn status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = p.status.as_ref()?;
    s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()).find(|c| c.name == name)
}

fn running(p: &Pod, name: &str) -> bool {
    status(p, name).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

fn started(p: &Pod, name: &str) -> bool {
    status(p, name).is_some_and(|c| c.started == Some(true))
}

fn condition(p: &Pod, type_: &str) -> Option<(String, Option<String>, Option<String>)> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn sh(script: &str) -> serde_json::Value {
    json!(["sh", "-c", script])
}

fn exec_probe(script: &str) -> serde_json::Value {
    json!({"exec": {"command": sh(script)}, "periodSeconds": 1, "failureThreshold": 1})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sidecar_startup_probe_gates_the_main_container() {
    let env = Env::new().await;
    let ready = env.path("ready");
    let mut probe = exec_probe(&format!("test -f {ready}"));
    probe["failureThreshold"] = json!(1000);
    env.create(json!({
        "metadata": {"name": "gated"},
        "spec": {
            "nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "initContainers": [{"name": "proxy", "image": "busybox", "restartPolicy": "Always",
                "command": ["sleep", "600"], "startupProbe": probe}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]
        }
    }))
    .await;
    let p = env.wait("gated", "the sidecar runs", |p| running(p, "proxy")).await;
    assert!(!started(&p, "proxy"));
    // The startup probe fails (no file): main must not start while the barrier holds.
    let early = env
        .wait_within("gated", Duration::from_millis(2500), |p| {
            status(p, "main").is_some_and(|c| c.container_id.is_some())
        })
        .await;
    assert!(early.is_none(), "main started before the sidecar was Started: {early:?}");
    let p = env.pods.get("gated").await.unwrap();
    assert!(!started(&p, "proxy") && !running(&p, "main"));
    assert_eq!(condition(&p, "Initialized").map(|c| c.0), Some("False".into()));

    std::fs::write(&ready, "").unwrap();
    let p = env.wait("gated", "main runs", |p| running(p, "main")).await;
    assert!(started(&p, "proxy"));
    let p = env.wait("gated", "ready", |p| condition(p, "Ready").is_some_and(|c| c.0 == "True")).await;
    assert_eq!(condition(&p, "Initialized").map(|c| c.0), Some("True".into()));
    assert_eq!(status(&p, "proxy").unwrap().restart_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_liveness_probe_restarts_the_container() {
    let env = Env::new().await;
    let mut probe = exec_probe(&format!("test -f {}", env.path("alive")));
    probe["terminationGracePeriodSeconds"] = json!(1);
    env.create(json!({
        "metadata": {"name": "live"},
        "spec": {"nodeName": "n1", "restartPolicy": "Always", "containers": [{"name": "main", "image": "busybox",
            "command": ["sleep", "600"], "livenessProbe": probe}]}
    }))
    .await;
    let p = env.wait("live", "restarted", |p| status(p, "main").is_some_and(|c| c.restart_count >= 1)).await;
    let last = status(&p, "main").unwrap().last_state.clone().unwrap().terminated.unwrap();
    assert!(matches!(last.exit_code, 137 | 143), "{last:?}");
    assert_eq!(p.metadata.uid.as_deref(), env.pods.get("live").await.unwrap().metadata.uid.as_deref());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_startup_probe_with_never_fails_the_pod() {
    let env = Env::new().await;
    let mut probe = exec_probe("exit 1");
    probe["failureThreshold"] = json!(2);
    probe["terminationGracePeriodSeconds"] = json!(1);
    env.create(json!({
        "metadata": {"name": "nostart"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sleep", "600"], "startupProbe": probe}]}
    }))
    .await;
    let p = env.wait("nostart", "failed", |p| phase(p) == Some("Failed")).await;
    let cs = status(&p, "main").unwrap();
    assert_eq!((cs.restart_count, cs.started), (0, Some(false)));
    assert!(cs.state.as_ref().unwrap().terminated.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_drives_the_ready_condition() {
    let env = Env::new().await;
    let ready = env.path("ready");
    env.create(json!({
        "metadata": {"name": "rd"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                "readinessProbe": exec_probe(&format!("test -f {ready}"))}]}
    }))
    .await;
    let is = |want: &'static str| move |p: &Pod| condition(p, "Ready").is_some_and(|c| c.0 == want);
    let p = env.wait("rd", "running", |p| running(p, "main")).await;
    assert_eq!(condition(&p, "Ready").map(|c| c.0), Some("False".into()));
    assert!(started(&p, "main") && !status(&p, "main").unwrap().ready);
    std::fs::write(&ready, "").unwrap();
    let p = env.wait("rd", "Ready", is("True")).await;
    assert_eq!(condition(&p, "ContainersReady").map(|c| c.0), Some("True".into()));
    assert!(status(&p, "main").unwrap().ready);
    std::fs::remove_file(&ready).unwrap();
    let p = env.wait("rd", "not Ready", is("False")).await;
    assert_eq!(condition(&p, "Ready").and_then(|c| c.1), Some("ContainersNotReady".into()));
    assert_eq!(status(&p, "main").unwrap().restart_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_all_containers_with_real_processes() {
    let env = Env::new().await;
    let runs = env.path("init-runs");
    let mut events = {
        let config = watcher::Config::default().fields("metadata.name=ra");
        watcher(env.pods.clone(), config).filter_map(|e| futures::future::ready(e.ok())).boxed()
    };
    // Wait for the watch's initial list, so no event is missed.
    tokio::time::timeout(TIMEOUT, async {
        while let Some(e) = events.next().await {
            if matches!(e, watcher::Event::InitDone) {
                return;
            }
        }
    })
    .await
    .unwrap();
    let created = env
        .create(json!({
            "metadata": {"name": "ra"},
            "spec": {
                "nodeName": "n1", "restartPolicy": "Never",
                "initContainers": [
                    {"name": "setup", "image": "busybox", "command": sh(&format!("echo run >> {runs}"))},
                    {"name": "proxy", "image": "busybox", "restartPolicy": "Always", "command": ["sleep", "600"]}
                ],
                "containers": [
                    {"name": "main", "image": "busybox", "restartPolicy": "Never",
                     "command": sh(&format!("if [ $(wc -l < {runs}) -ge 2 ]; then exit 0; fi; sleep 0.2; exit 42")),
                     "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]},
                    {"name": "other", "image": "busybox", "command": ["sh", "-c", "sleep 0.5"]}
                ]
            }
        }))
        .await;
    let mut seen: Vec<(String, Option<String>, Option<String>)> = vec![];
    let done = tokio::time::timeout(TIMEOUT, async {
        while let Some(e) = events.next().await {
            let watcher::Event::Apply(p) = e else { continue };
            if let Some(c) = condition(&p, "AllContainersRestarting")
                && seen.last() != Some(&c)
            {
                seen.push(c);
            }
            if matches!(phase(&p), Some("Succeeded" | "Failed")) {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the pod finishes");
    assert_eq!(
        seen[..2],
        [
            (
                "True".to_string(),
                Some("RestartAllContainersStarted".to_string()),
                Some("container exited with restart policy rule".to_string())
            ),
            ("False".to_string(), None, None)
        ],
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap().1.as_deref(), Some("PodCompleted"));
    assert_eq!(phase(&done), Some("Succeeded"));
    assert_eq!(done.metadata.uid, created.metadata.uid);
    for name in ["setup", "proxy", "main", "other"] {
        assert_eq!(status(&done, name).unwrap().restart_count, 1, "{name}");
    }
    assert_eq!(status(&done, "main").unwrap().last_state.clone().unwrap().terminated.unwrap().exit_code, 42);
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2, "the init container ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pre_stop_hooks_run_before_the_kill_and_sidecars_stop_last() {
    let env = Env::new().await;
    let log = env.path("stop-order");
    // Each container records its preStop and its SIGTERM in one file, in order.
    let container = |name: &str| {
        json!({"name": name, "image": "busybox",
            "command": sh(&format!(
                "trap 'echo term-{name} >> {log}; exit 0' TERM; echo armed-{name} >> {log}; while true; do sleep 0.05; done"
            )),
            "lifecycle": {"preStop": {"exec": {"command": sh(&format!("echo prestop-{name} >> {log}"))}}}})
    };
    let mut proxy = container("proxy");
    proxy["restartPolicy"] = json!("Always");
    env.create(json!({
        "metadata": {"name": "stop"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
            "initContainers": [proxy], "containers": [container("main")]}
    }))
    .await;
    env.wait("stop", "running", |p| running(p, "main") && running(p, "proxy")).await;
    // Running is reported once the shell runs, maybe before it has set its trap.
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let text = std::fs::read_to_string(Path::new(&log)).unwrap_or_default();
            if text.contains("armed-main") && text.contains("armed-proxy") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("both containers set their TERM trap");
    env.pods.delete("stop", &DeleteParams::default()).await.unwrap();
    // Polled (the watch helper reports objects, not their removal).
    tokio::time::timeout(TIMEOUT, async {
        loop {
            if env.pods.get_opt("stop").await.unwrap().is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the pod is removed");
    let text = std::fs::read_to_string(Path::new(&log)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = |l: &str| lines.iter().position(|x| *x == l).unwrap_or_else(|| panic!("{l} missing: {lines:?}"));
    assert!(at("prestop-main") < at("term-main"), "{lines:?}");
    assert!(at("prestop-proxy") < at("term-proxy"), "{lines:?}");
    assert!(at("term-main") < at("term-proxy"), "the sidecar stops after the main container: {lines:?}");
}
