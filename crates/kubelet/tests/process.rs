//! The process runtime with real `sh` processes, then end to end through a node agent against
//! the embedded API server. Every wait has a timeout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime};
use jobset_kubelet::runtime::{ContainerKind, ExitStatus, Runtime, StartRequest, Started};
use jobset_kubelet::{AgentConfig, NodeConfig, run_node};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(20);

fn pod() -> serde_json::Value {
    json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "demo"}},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"podIP": "10.0.0.9"}
    })
}

fn request(container: serde_json::Value, log_path: Option<PathBuf>) -> StartRequest {
    StartRequest {
        pod: Arc::new(serde_json::from_value(pod()).unwrap()),
        container: serde_json::from_value::<Container>(container).unwrap(),
        kind: ContainerKind::Regular,
        restart_count: 0,
        node: Arc::new(NodeConfig::new("n1")),
        default_run_duration: Duration::from_secs(1),
        log_path,
        pod_ip: "10.0.0.9".into(),
        resources: Arc::default(),
    }
}

fn sh(script: &str) -> serde_json::Value {
    json!({"name": "main", "image": "busybox", "command": ["sh", "-c", script]})
}

async fn start(rt: &ProcessRuntime, container: serde_json::Value, log: Option<PathBuf>) -> Started {
    tokio::time::timeout(TIMEOUT, rt.start(request(container, log))).await.expect("start in time").expect("started")
}

async fn exit(started: Started) -> ExitStatus {
    tokio::time::timeout(TIMEOUT, started.exit).await.expect("the container exits in time")
}

/// Polls `cond` (every 10 ms) until it holds; panics after [`TIMEOUT`].
async fn eventually<T>(what: &str, mut cond: impl FnMut() -> Option<T>) -> T {
    tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Some(v) = cond() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The (stream, text) pairs of a CRI log file, checking each line's format.
fn log_lines(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let (ts, stream, tag, msg) =
                (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or(""));
            ts.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("timestamp of {line:?}: {e}"));
            assert!(ts.ends_with('Z') && ts.contains('T'), "{line}");
            assert_eq!(tag, "F", "{line}");
            (stream.to_string(), msg.to_string())
        })
        .collect()
}

async fn wait_for_line(path: &Path, text: &str) -> Vec<(String, String)> {
    eventually(&format!("{text:?} in the log"), || {
        let lines = log_lines(path);
        lines.iter().any(|(_, t)| t == text).then_some(lines)
    })
    .await
}

/// Whether a pid is gone (or a zombie nobody reaped yet: it runs no more).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A runtime and a container running `script` that has printed `ready` to its log.
async fn running_and_ready(script: &str) -> (ProcessRuntime, tempfile::TempDir, PathBuf, Started) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let started = start(&rt, sh(script), Some(log.clone())).await;
    wait_for_line(&log, "ready").await;
    (rt, dir, log, started)
}

fn runtime() -> ProcessRuntime {
    ProcessRuntime::new(ProcessConfig::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signals_are_reported() {
    let rt = runtime();
    assert_eq!(exit(start(&rt, sh("exit 3"), None).await).await.exit_code, 3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let st = exit(start(&rt, sh("true"), Some(log.clone())).await).await;
    assert_eq!(st, ExitStatus { finished_at: st.finished_at, ..ExitStatus::code(0) }, "{:?}", log_lines(&log));
    // Killed by a signal: 128 + signal number. (`$$$$` is the shell's `$$` once the kubelet's
    // `$$` escape is applied.)
    assert_eq!(exit(start(&rt, sh("kill -USR1 $$$$"), None).await).await.exit_code, 128 + 10);
    assert_eq!(rt.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_working_dir_and_output_reach_the_cri_log() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ns_p_u-1/main/0.log");
    let script = r#"echo "lit=$LIT name=$NAME ns=$NS uid=$UID_ app=$APP node=$NODE ip=$IP"
echo "host=$HOSTNAME pod_ip=$POD_IP expanded=$EXPANDED"
echo "pwd=$(pwd)"
echo "to stderr" >&2
printf 'no newline'"#;
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let c = json!({
        "name": "main", "image": "busybox", "command": ["sh", "-c", script], "workingDir": dir.path(),
        "env": [
            {"name": "LIT", "value": "hello world"},
            field("NAME", "metadata.name"), field("NS", "metadata.namespace"), field("UID_", "metadata.uid"),
            field("APP", "metadata.labels['app']"), field("NODE", "spec.nodeName"), field("IP", "status.podIP"),
            {"name": "EXPANDED", "value": "$(NAME)-$(LIT)"},
        ]
    });
    let status = exit(start(&rt, c, Some(log.clone())).await).await;
    assert_eq!(status.exit_code, 0);
    let lines = log_lines(&log);
    let stdout: Vec<&str> = lines.iter().filter(|(s, _)| s == "stdout").map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        stdout,
        [
            "lit=hello world name=p ns=ns uid=u-1 app=demo node=n1 ip=10.0.0.9",
            "host=p pod_ip=10.0.0.9 expanded=p-hello world",
            &format!("pwd={}", dir.path().display()),
            "no newline",
        ]
    );
    assert!(lines.contains(&("stderr".to_string(), "to stderr".to_string())), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_lets_a_term_handler_exit_cleanly() {
    let (rt, _dir, log, started) =
        running_and_ready("trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done").await;
    let t0 = Instant::now();
    rt.kill(&started.id, Duration::from_secs(30));
    assert_eq!(exit(started).await.exit_code, 0);
    assert!(t0.elapsed() < Duration::from_secs(10), "a TERM handler ended the container long before the grace");
    assert!(log_lines(&log).iter().any(|(_, t)| t == "bye"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_escalates_to_sigkill_after_the_grace() {
    let (rt, _dir, _log, started) = running_and_ready("trap '' TERM; echo ready; sleep 30").await;
    let t0 = Instant::now();
    rt.kill(&started.id, Duration::from_millis(300));
    assert_eq!(exit(started).await.exit_code, 137);
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_kill_with_a_shorter_grace_wins() {
    let (rt, _dir, _log, started) = running_and_ready("trap '' TERM; echo ready; sleep 30").await;
    let t0 = Instant::now();
    rt.kill(&started.id, Duration::from_secs(60));
    rt.kill(&started.id, Duration::ZERO);
    assert_eq!(exit(started).await.exit_code, 137);
    assert!(t0.elapsed() < Duration::from_secs(10));
    // Unknown (or finished) ids are ignored.
    rt.kill(&jobset_kubelet::runtime::ContainerId("process://0-0".into()), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_reaches_the_whole_process_group() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    // The background child ignores TERM: only the group SIGKILL after the main process ends stops it.
    let started = start(&rt, sh("(trap '' TERM; exec sleep 100) & echo child=$!; wait"), Some(log.clone())).await;
    let lines = eventually("the child pid", || {
        let l = log_lines(&log);
        (!l.is_empty()).then_some(l)
    })
    .await;
    let child: u32 = lines[0].1.strip_prefix("child=").unwrap().parse().unwrap();
    assert!(!gone(child));
    rt.kill(&started.id, Duration::from_secs(30));
    assert_eq!(exit(started).await.exit_code, 143);
    eventually("the child to be gone", || gone(child).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_ends_with_its_main_process() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let started = start(&rt, sh("sleep 100 & echo child=$!"), Some(log.clone())).await;
    assert_eq!(exit(started).await.exit_code, 0);
    let child: u32 = log_lines(&log)[0].1.strip_prefix("child=").unwrap().parse().unwrap();
    eventually("the orphaned child to be gone", || gone(child).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_exit_future_kills_the_container() {
    let rt = runtime();
    let started = start(&rt, sh("sleep 100"), None).await;
    let pid = rt.pid(&started.id).unwrap();
    assert_eq!(rt.running(), 1);
    drop(started);
    eventually("the abandoned container to be gone", || (gone(pid) && rt.running() == 0).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_come_from_the_spec_or_the_image_mapping() {
    let images = BTreeMap::from([("busybox:1.36".to_string(), vec!["sh".to_string(), "-c".to_string()])]);
    let rt = ProcessRuntime::new(ProcessConfig { images });
    let mapped = json!({"name": "main", "image": "busybox:1.36", "args": ["exit 5"]});
    assert_eq!(exit(start(&rt, mapped, None).await).await.exit_code, 5);

    let unmapped = json!({"name": "worker", "image": "python:3", "args": ["train.py"]});
    let err = rt.start(request(unmapped, None)).await.unwrap_err();
    assert!(err.0.contains("\"worker\"") && err.0.contains("no command is set"), "{err}");
    assert!(err.0.contains("\"python:3\" is not mapped"), "{err}");

    let missing = json!({"name": "main", "command": ["/nonexistent/binary"]});
    let err = rt.start(request(missing, None)).await.unwrap_err();
    assert!(err.0.contains("starting \"/nonexistent/binary\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_exiting_3_through_the_agent_fails_with_code_3() {
    let logs = tempfile::tempdir().unwrap();
    let config = ServerConfig { log_dir: Some(logs.path().to_path_buf()), ..ServerConfig::default() };
    let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), config).unwrap();
    let def = server.registry().get("", "v1", "pods").unwrap();
    let _ = server.store.watch(&def, None);
    let client = server.client();
    let cfg = AgentConfig {
        heartbeat_interval: Duration::from_millis(100),
        status_update_interval: Duration::from_millis(100),
        log_dir: Some(logs.path().to_path_buf()),
        ..AgentConfig::default()
    };
    let node = run_node(client.clone(), NodeConfig::new("n1"), cfg, Arc::new(runtime())).await;

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bad"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "command": ["sh", "-c", "echo on $(NODE); exit 3"],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
        }]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let config = watcher::Config::default().fields("metadata.name=bad");
    let mut events = watcher(pods.clone(), config).boxed();
    let done = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                && matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
            {
                return p;
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("the pod finishes");
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert!(cs.container_id.as_deref().is_some_and(|id| id.starts_with("process://")));
    assert_eq!(pods.logs("bad", &LogParams::default()).await.unwrap(), "on n1\n");
    node.shutdown().await;
}
