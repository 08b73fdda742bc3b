//! The process runtime with real `sh` processes, then end to end through a node agent against
//! the embedded API server. Every wait has a timeout.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_kubelet::hosts;
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime};
use jobset_kubelet::runtime::sandbox;
use jobset_kubelet::runtime::{ContainerKind, ExitStatus, PodResources, Runtime, StartRequest, Started};
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

/// A shell fragment: runs `cmd` in the background after creating `/tmp/<tag>.started` (the
/// pod's private /tmp).
fn background(tag: &str, cmd: &str) -> String {
    format!("sh -c \"touch /tmp/{tag}.started; exec {cmd}\" &")
}

/// The host pids of the `n` descendants of `ancestor` that run `argv`, once there are `n`. Read
/// from the host's /proc: a container's own /proc has its PID namespace's pids only.
async fn descendants_running(ancestor: u32, argv: &[&str], n: usize) -> Vec<u32> {
    let cmdline: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    eventually(&format!("{n} descendants of {ancestor} running {argv:?}"), || {
        let mut parent = std::collections::HashMap::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            parent.extend(ppid.map(|pp| (pid, pp)));
        }
        let descends = |mut p: u32| {
            while let Some(&pp) = parent.get(&p) {
                if pp == ancestor {
                    return true;
                }
                p = pp;
            }
            false
        };
        let found: Vec<u32> = parent
            .keys()
            .copied()
            .filter(|&p| descends(p) && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == cmdline))
            .collect();
        (found.len() == n).then_some(found)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_reaches_the_whole_process_group() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    // The background child ignores TERM: only the group SIGKILL after the main process ends stops it.
    let script = format!("trap '' TERM; {} trap - TERM; wait", background("child", "sleep 100"));
    let started = start(&rt, sh(&script), Some(log.clone())).await;
    let child = descendants_running(rt.pid(&started.id).unwrap(), &["sleep", "100"], 1).await[0];
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
    // One child in the group, one that left it (setsid): both die with the main process, which
    // ends once the test has found them (outside /tmp: the container's /tmp is its own).
    let shared = tempfile::tempdir_in("/var/tmp").unwrap();
    let go = shared.path().join("go");
    let script = format!(
        "{} {} until [ -e /tmp/child.started ] && [ -e /tmp/escaped.started ] && [ -e {} ]; do sleep 0.01; done",
        background("child", "sleep 100"),
        background("escaped", "setsid sleep 100"),
        go.display()
    );
    let started = start(&rt, sh(&script), Some(log.clone())).await;
    let pids = descendants_running(rt.pid(&started.id).unwrap(), &["sleep", "100"], 2).await;
    std::fs::write(&go, "").unwrap();
    assert_eq!(exit(started).await.exit_code, 0);
    for pid in pids {
        eventually("the orphaned children to be gone", || gone(pid).then_some(())).await;
    }
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

/// A runtime whose containers outlive it, and the next one on the same state directory: the
/// first agent "crashes" (its runtime is leaked, its tokio runtime stopped, nothing dropped), the
/// second adopts the container of a pod it still has and sweeps the one of a pod gone meanwhile.
#[test]
fn containers_outlive_a_crashed_runtime_and_the_next_adopts_or_sweeps_them() {
    let state = tempfile::tempdir().unwrap();
    let config =
        ProcessConfig { state_dir: Some(state.path().to_path_buf()), outlive_agent: true, ..ProcessConfig::default() };
    let first = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (kept, swept) = first.block_on(async {
        let rt = ProcessRuntime::new(config.clone());
        let mut out = Vec::new();
        for (name, uid) in [("keep", "u-keep"), ("gone", "u-gone")] {
            let req = request_in(
                &pod_with(name, uid, json!({})),
                sh("sleep 100"),
                "127.1.0.1",
                PodResources::default(),
                None,
            );
            let started = tokio::time::timeout(TIMEOUT, rt.start(req)).await.unwrap().unwrap();
            out.push((started.id.clone(), rt.pid(&started.id).unwrap()));
            std::mem::forget(started);
        }
        std::mem::forget(rt);
        (out[0].clone(), out[1].clone())
    });
    first.shutdown_background();
    assert!(!gone(kept.1) && !gone(swept.1), "the containers outlive their agent");

    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let rt = ProcessRuntime::new(config);
        let mut adopted = rt.adopt("u-keep");
        assert_eq!(adopted.len(), 1, "{adopted:?}");
        let a = adopted.remove(0);
        assert_eq!((&a.id, a.container.as_str(), a.restart_count), (&kept.0, "main", 0));
        assert!(rt.adopt("u-keep").is_empty(), "a container is handed over once");
        rt.sweep("n1", &["u-keep".to_string()].into());
        eventually("the container of the pod gone meanwhile to be killed", || gone(swept.1).then_some(())).await;
        assert!(!gone(kept.1), "the adopted container runs on");
        assert!(!state.path().join("containers").join("u-gone").exists(), "the swept pod's records are removed");
        // The adopted container is the runtime's like any other: kill it, get its exit.
        rt.kill(&a.id, Duration::from_secs(5));
        assert_eq!(exit_of(a.exit).await.exit_code, 143);
    });
}

async fn exit_of(exit: futures::future::BoxFuture<'static, ExitStatus>) -> ExitStatus {
    tokio::time::timeout(TIMEOUT, exit).await.expect("the container exits in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_come_from_the_spec_or_the_image_mapping() {
    let images = BTreeMap::from([("busybox:1.36".to_string(), vec!["sh".to_string(), "-c".to_string()])]);
    let rt = ProcessRuntime::new(ProcessConfig { images, ..ProcessConfig::default() });
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
    let _ = server.store.watch(&def, None, None);
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

// ---- isolation: namespaces, volumes, hosts, exec, logs ----

/// Whether this machine lets the runtime isolate pods. As root it must (the tests below then
/// really check isolation); elsewhere they are skipped with a note.
fn isolated(rt: &ProcessRuntime) -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { nix::libc::geteuid() } == 0;
    assert!(!root || rt.isolated(), "running as root, the process runtime must isolate pods");
    if !rt.isolated() {
        eprintln!("skipped: the process runtime cannot isolate pods here");
    }
    rt.isolated()
}

fn pod_with(name: &str, uid: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut spec = spec;
    spec["nodeName"] = json!("n1");
    spec["containers"] = json!([]);
    json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": spec})
}

fn request_in(
    pod: &serde_json::Value,
    container: serde_json::Value,
    pod_ip: &str,
    resources: PodResources,
    log_path: Option<PathBuf>,
) -> StartRequest {
    StartRequest {
        pod: Arc::new(serde_json::from_value(pod.clone()).unwrap()),
        container: serde_json::from_value::<Container>(container).unwrap(),
        kind: ContainerKind::Regular,
        restart_count: 0,
        node: Arc::new(NodeConfig::new("n1")),
        default_run_duration: Duration::from_secs(1),
        log_path,
        pod_ip: pod_ip.into(),
        resources: Arc::new(resources),
    }
}

/// Runs one container of `pod` to its end; returns (exit code, stdout lines).
async fn run_in(rt: &ProcessRuntime, pod: &serde_json::Value, container: serde_json::Value) -> (i32, Vec<String>) {
    run_with(rt, pod, container, PodResources::default()).await
}

async fn run_with(
    rt: &ProcessRuntime,
    pod: &serde_json::Value,
    container: serde_json::Value,
    resources: PodResources,
) -> (i32, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let req = request_in(pod, container, "127.1.0.1", resources, Some(log.clone()));
    let started = tokio::time::timeout(TIMEOUT, rt.start(req)).await.expect("start in time").expect("started");
    let code = exit(started).await.exit_code;
    (code, log_lines(&log).into_iter().map(|(_, t)| t).collect())
}

fn container(name: &str, script: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"name": name, "image": "busybox", "command": ["sh", "-c", script]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pod_has_its_own_tmp() {
    let rt = runtime();
    if !isolated(&rt) {
        return;
    }
    let shared = tempfile::tempdir_in("/var/tmp").unwrap();
    let go = shared.path().join("go");
    let name = format!("x-{}", std::process::id());
    let mut runs = Vec::new();
    for (pod, msg) in [("a", "from-a"), ("b", "from-b")] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        // Both write before either reads back: a shared /tmp would show the later write twice.
        let script = format!(
            "echo {msg} > /tmp/{name}; echo ready; until [ -e {go} ]; do sleep 0.01; done; cat /tmp/{name}",
            go = go.display()
        );
        let p = pod_with(pod, &format!("uid-{pod}"), json!({}));
        let req = request_in(
            &p,
            container("main", &script, json!({})),
            "127.1.0.1",
            PodResources::default(),
            Some(log.clone()),
        );
        let started = rt.start(req).await.unwrap();
        runs.push((dir, log, started, msg));
    }
    for (_, log, _, _) in &runs {
        wait_for_line(log, "ready").await;
    }
    std::fs::write(&go, "").unwrap();
    for (_dir, log, started, msg) in runs {
        assert_eq!(exit(started).await.exit_code, 0);
        let lines: Vec<String> = log_lines(&log).into_iter().map(|(_, t)| t).collect();
        assert_eq!(lines, ["ready", msg]);
    }
    assert!(!Path::new("/tmp").join(&name).exists(), "the host's /tmp is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_under_the_hosts_tmp_still_runs_behind_the_pods_tmp() {
    // What an image mapped to a binary of a checkout under /tmp (the agent's `jobset`) needs.
    let rt = runtime();
    if !isolated(&rt) {
        return;
    }
    let dir = tempfile::Builder::new().prefix("program-").tempdir_in("/tmp").unwrap();
    let program = dir.path().join("hello");
    std::fs::write(&program, "#!/bin/sh\necho hello from $0\n").unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let p = pod_with("prog", "uid-prog", json!({}));
    let c = json!({"name": "main", "image": "busybox", "command": [program.to_str().unwrap()]});
    let (code, lines) = run_in(&rt, &p, c).await;
    assert_eq!((code, lines), (0, vec![format!("hello from {}", program.display())]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dirs_are_shared_by_a_pods_containers_and_removed_with_it() {
    let state = tempfile::tempdir().unwrap();
    let rt = ProcessRuntime::new(ProcessConfig { state_dir: Some(state.path().into()), ..ProcessConfig::default() });
    if !isolated(&rt) {
        return;
    }
    let pod = pod_with(
        "p",
        "u-shared",
        json!({"volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}}]}),
    );
    // A mount point outside /tmp that does not exist yet: created (on the host's filesystem).
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    let scratch = outside.path().join("not/yet/there").to_string_lossy().into_owned();
    let mounts = json!({"volumeMounts": [
        {"name": "scratch", "mountPath": scratch},
        {"name": "claim", "mountPath": "/tmp/claim"},
        {"name": "scratch", "mountPath": "/tmp/sub", "subPath": "deep/er"},
    ]});
    let (code, out) = run_in(
        &rt,
        &pod,
        container(
            "writer",
            &format!("echo hi > {scratch}/f && echo kept > /tmp/claim/k && echo sub > /tmp/sub/x"),
            mounts.clone(),
        ),
    )
    .await;
    assert_eq!((code, out), (0, vec![]));
    let (code, out) = run_in(
        &rt,
        &pod,
        container("reader", &format!("cat {scratch}/f /tmp/claim/k {scratch}/deep/er/x"), mounts.clone()),
    )
    .await;
    assert_eq!((code, out), (0, vec!["hi".to_string(), "kept".into(), "sub".into()]));
    assert!(state.path().join("pods/u-shared/volumes/scratch/f").exists());
    rt.remove_pod("u-shared");
    assert!(!state.path().join("pods/u-shared").exists(), "the sandbox goes with the pod");
    assert_eq!(std::fs::read_to_string(state.path().join("pvc/ns/data/k")).unwrap(), "kept\n", "claims stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_maps_and_secrets_reach_files_and_env() {
    let rt = runtime();
    let mut res = PodResources::default();
    res.config_maps
        .insert("cfg".into(), [("a.conf".to_string(), b"A=1\n".to_vec()), ("b".into(), b"bee".to_vec())].into());
    res.secrets.insert("sec".into(), [("token".to_string(), b"s3cr3t".to_vec())].into());
    let pod = pod_with(
        "p",
        "u-cfg",
        json!({"volumes": [
            {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "a.conf", "path": "conf/a.conf"}]}},
            {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
        ]}),
    );
    let env = json!({
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}}],
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/test-cfg"}, {"name": "sec", "mountPath": "/tmp/secret"}],
    });
    let script = "echo token=$TOKEN b=$CFG_b; if [ -d /etc/test-cfg ]; then cat /etc/test-cfg/conf/a.conf; \
                  stat -c %a /tmp/secret/token; fi";
    let (code, out) = run_with(&rt, &pod, container("main", script, env.clone()), res.clone()).await;
    assert_eq!(code, 0, "{out:?}");
    if rt.isolated() {
        assert_eq!(out, ["token=s3cr3t b=bee", "A=1", "400"]);
    } else {
        assert_eq!(out, ["token=s3cr3t b=bee"]);
    }
    // A missing ConfigMap fails the start, naming it.
    let err = rt
        .start(request_in(&pod, container("main", "true", env), "127.1.0.1", PodResources::default(), None))
        .await
        .unwrap_err();
    assert_eq!(err.0, "configmap \"cfg\" not found", "kubelet's message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mounts_refuse_writes() {
    let rt = runtime();
    if !isolated(&rt) {
        return;
    }
    let host = tempfile::tempdir_in("/var/tmp").unwrap();
    let pod = pod_with(
        "p",
        "u-ro",
        json!({"volumes": [{"name": "h", "hostPath": {"path": host.path(), "type": "Directory"}}]}),
    );
    let mounts = json!({"volumeMounts": [{"name": "h", "mountPath": "/tmp/ro", "readOnly": true}, {"name": "h", "mountPath": "/tmp/rw"}]});
    let script = "touch /tmp/ro/no 2>/dev/null && echo wrote-ro; touch /tmp/rw/yes && echo wrote-rw";
    let (code, out) = run_in(&rt, &pod, container("main", script, mounts)).await;
    assert_eq!((code, out), (0, vec!["wrote-rw".to_string()]));
    assert!(host.path().join("yes").exists() && !host.path().join("no").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_find_each_other_through_etc_hosts() {
    let hosts_dir = tempfile::tempdir().unwrap();
    let rt =
        ProcessRuntime::new(ProcessConfig { hosts_dir: Some(hosts_dir.path().into()), ..ProcessConfig::default() });
    if !isolated(&rt) {
        return;
    }
    let (ip_a, ip_b) = (rt.pod_ip(), rt.pod_ip());
    assert!(ip_a.starts_with("127.") && ip_a != ip_b, "{ip_a} {ip_b}");
    let with_status = |name: &str, ip: &str| {
        let mut p = pod_with(name, &format!("u-{name}"), json!({"hostname": name, "subdomain": "js"}));
        p["status"] = json!({"phase": "Running", "podIP": ip});
        serde_json::from_value::<Pod>(p).unwrap()
    };
    let pods = [with_status("w-0", &ip_a), with_status("w-1", &ip_b)];
    hosts::write_in_place(&hosts_dir.path().join("ns"), &hosts::render("ns", &pods, &[])).unwrap();

    let pod = pod_with("w-0", "u-w-0", json!({"hostname": "w-0", "subdomain": "js"}));
    let script =
        "echo ip=$POD_IP; cat /proc/sys/kernel/hostname; getent hosts w-1.js; getent hosts w-1.js.ns.svc.cluster.local";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let req = request_in(&pod, container("main", script, json!({})), &ip_a, PodResources::default(), Some(log.clone()));
    assert_eq!(exit(rt.start(req).await.unwrap()).await.exit_code, 0);
    let out: Vec<String> = log_lines(&log).into_iter().map(|(_, t)| t).collect();
    assert_eq!(out[0], format!("ip={ip_a}"));
    assert_eq!(out[1], "w-0", "the pod's hostname in its own UTS namespace");
    for line in &out[2..4] {
        assert!(line.starts_with(&format!("{ip_b} ")), "{out:?}");
    }
    // The host's files are untouched.
    assert!(!std::fs::read_to_string("/etc/hosts").unwrap().contains("w-1.js"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_inside_the_container() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let workdir = format!("/tmp/work-{}", std::process::id());
    let c = container(
        "main",
        "echo inside > /tmp/exec-test; echo ready; exec sleep 300",
        json!({"env": [{"name": "GREETING", "value": "hello"}], "workingDir": workdir}),
    );
    let pod = pod_with("p", "u-exec", json!({}));
    let started = rt.start(request_in(&pod, c, "127.1.0.1", PodResources::default(), Some(log.clone()))).await.unwrap();
    wait_for_line(&log, "ready").await;
    let argv = |s: &str| vec!["sh".to_string(), "-c".to_string(), s.to_string()];
    let out = rt.exec(&started.id, argv("cat /tmp/exec-test; echo $GREETING; pwd"), TIMEOUT).await.unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.output).as_ref()),
        (0, &*format!("inside\nhello\n{workdir}\n"))
    );
    let out = rt.exec(&started.id, argv("exit 7"), TIMEOUT).await.unwrap();
    assert_eq!(out.exit_code, 7);

    // What `jobset exec` uses: the pid from the container ID.
    let pid = sandbox::container_pid(&started.id.0).unwrap();
    assert_eq!(Some(pid), rt.pid(&started.id));
    let output =
        sandbox::exec_command(pid, &argv("cat /tmp/exec-test; echo $GREETING; pwd")).unwrap().output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("inside\nhello\n{workdir}\n"));
    if rt.isolated() {
        assert!(!Path::new("/tmp/exec-test").exists() && !Path::new(&workdir).exists(), "the host's /tmp is untouched");
    }
    rt.kill(&started.id, Duration::ZERO);
    exit(started).await;
}

/// The host pids of the processes whose parent chain reaches `root`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    for &pid in parent.keys() {
        let mut p = pid;
        while let Some(&pp) = parent.get(&p) {
            if pp == root {
                out.push(pid);
                break;
            }
            p = pp;
        }
    }
    out
}

fn sleeps(root: u32) -> Vec<u32> {
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    descendants(root).into_iter().filter(|&p| comm(p).trim() == "sleep" && !gone(p)).collect()
}

/// A container whose shell has two `sleep` children, one of them in its own session; returns it
/// with the host pids of the sleeps.
async fn container_with_sleepers(rt: &ProcessRuntime) -> (Started, tempfile::TempDir, Vec<u32>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let script = "sleep 300 & setsid sleep 300 & echo ready; wait";
    let started = start(rt, sh(script), Some(log.clone())).await;
    wait_for_line(&log, "ready").await;
    let pgid = rt.pgid(&started.id).unwrap();
    let pids = eventually("two sleeping descendants", || Some(sleeps(pgid)).filter(|s| s.len() == 2)).await;
    (started, dir, pids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_tree_dies_when_the_main_process_is_killed() {
    let rt = runtime();
    if !rt.namespaces().pid {
        eprintln!("skipped: no PID namespaces here");
        return;
    }
    let (started, _dir, pids) = container_with_sleepers(&rt).await;
    let main = rt.pid(&started.id).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(main as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert_eq!(exit(started).await.exit_code, 137);
    for pid in pids {
        eventually("the sleeps to be gone", || gone(pid).then_some(())).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_tree_dies_when_the_runtime_is_dropped() {
    let rt = runtime();
    if !rt.namespaces().pid {
        eprintln!("skipped: no PID namespaces here");
        return;
    }
    let (started, _dir, pids) = container_with_sleepers(&rt).await;
    let main = rt.pid(&started.id).unwrap();
    drop(rt);
    for pid in pids.into_iter().chain([main]) {
        eventually("the container's processes to be gone", || gone(pid).then_some(())).await;
    }
    drop(started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_plain_command_with_143() {
    let rt = runtime();
    let started = start(&rt, json!({"name": "main", "command": ["sleep", "300"]}), None).await;
    let pid = rt.pid(&started.id).unwrap();
    eventually("sleep to run", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().filter(|c| c.trim() == "sleep")
    })
    .await;
    let t0 = Instant::now();
    rt.kill(&started.id, Duration::from_secs(30));
    assert_eq!(exit(started).await.exit_code, 143);
    assert!(t0.elapsed() < Duration::from_secs(10), "TERM ended it, not the SIGKILL after the grace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_rotate_and_the_current_file_stays_readable() {
    let rt = ProcessRuntime::new(ProcessConfig { log_max_bytes: 2000, log_max_files: 2, ..ProcessConfig::default() });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("main/0.log");
    let script = "i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); done; echo last";
    let status = exit(start(&rt, sh(script), Some(log.clone())).await).await;
    assert_eq!(status.exit_code, 0);
    let lines = log_lines(&log);
    assert_eq!(lines.last().map(|(_, t)| t.as_str()), Some("last"), "{lines:?}");
    assert!(std::fs::metadata(&log).unwrap().len() < 2000 + 100);
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir.path().join("main"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("0.log."))
        .collect();
    rotated.sort();
    assert_eq!(rotated.len(), 2, "at most log_max_files rotated files: {rotated:?}");
    // Rotated files keep the CRI format, and their lines come before the current file's.
    let older = log_lines(&rotated[1]);
    assert!(!older.is_empty());
    let n = |t: &str| t.strip_prefix("line-").and_then(|n| n.parse::<u32>().ok());
    assert!(n(&older.last().unwrap().1).unwrap() < n(&lines[0].1).unwrap_or(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_writer_follows_pods_and_services() {
    use kube::api::{Patch, PatchParams};
    let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default()).unwrap();
    let client = server.client();
    let dir = tempfile::tempdir().unwrap();
    let writer = tokio::spawn(hosts::run(client.clone(), dir.path().to_path_buf()));
    let file = dir.path().join("default");
    let read = || std::fs::read_to_string(&file).ok();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "w-0-abc", "labels": {"app": "js"}},
        "spec": {"hostname": "w-0", "subdomain": "js", "containers": [{"name": "m", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": "127.1.9.1"}});
    pods.patch_status("w-0-abc", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, "default");
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "js"},
        "spec": {"clusterIP": "None", "selector": {"app": "js"}, "ports": [{"port": 80}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();

    let want = "127.0.0.1\tlocalhost\n127.1.9.1\tw-0.js.default.svc.cluster.local w-0.js w-0\n\
                127.1.9.1\tjs.default.svc.cluster.local js\n";
    eventually("the hosts file to name the pod and the service", || read().filter(|c| c == want)).await;
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&file).unwrap().ino();
    pods.delete("w-0-abc", &Default::default()).await.unwrap();
    // Pods are graceful: without a node agent, force the deletion.
    let _ =
        pods.delete("w-0-abc", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await;
    eventually("the pod to leave the hosts file", || read().filter(|c| c == "127.0.0.1\tlocalhost\n")).await;
    assert_eq!(std::fs::metadata(&file).unwrap().ino(), inode, "rewritten in place");
    writer.abort();
}

/// Run by [`nothing_survives_an_agent_killed_with_sigkill`] in a child process (the "agent"):
/// starts a container with sleeping descendants, writes their pids, then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the agent side of nothing_survives_an_agent_killed_with_sigkill"]
async fn agent_child_process() {
    let Ok(out) = std::env::var("JOBSET_TEST_AGENT_PIDS") else { return };
    let rt = runtime();
    let (started, _dir, mut pids) = container_with_sleepers(&rt).await;
    pids.push(rt.pid(&started.id).unwrap());
    pids.push(rt.pgid(&started.id).unwrap());
    let text: Vec<String> = pids.iter().map(u32::to_string).collect();
    std::fs::write(format!("{out}.tmp"), text.join(",")).unwrap();
    std::fs::rename(format!("{out}.tmp"), &out).unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_survives_an_agent_killed_with_sigkill() {
    if !runtime().namespaces().pid {
        eprintln!("skipped: no PID namespaces here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pids");
    let mut agent = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "agent_child_process", "--ignored", "--nocapture"])
        .env("JOBSET_TEST_AGENT_PIDS", &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids: Vec<u32> = eventually("the agent's container pids", || {
        let text = std::fs::read_to_string(&out).ok()?;
        Some(text.split(',').map(|p| p.parse().unwrap()).collect())
    })
    .await;
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|&p| !gone(p)), "{pids:?}");
    agent.kill().unwrap(); // SIGKILL
    agent.wait().unwrap();
    for pid in pids {
        eventually("every process of the container to be gone", || gone(pid).then_some(())).await;
    }
}
