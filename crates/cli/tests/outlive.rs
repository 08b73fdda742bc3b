//! Containers outlive `jobset up --data-dir` (issue 24): a `kill -9` leaves process pods running
//! under their supervisors, the next `jobset up` on the same data dir adopts them, and an exit
//! that happened while it was down is reported with the container's real exit code.

mod common;
use common::pods::{main_container, main_status, running, wait_for};

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// A pod whose container reports its start, and exits 3 on SIGUSR1 (after saying so).
fn pod(name: &str) -> Pod {
    let script = "echo started; trap 'echo exiting; exit 3' USR1; while true; do sleep 0.05; done";
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}
    }))
    .unwrap()
}

/// `(exit code, reason, container ID)` once the container has terminated.
fn terminated(p: &Pod) -> Option<(i32, String, String)> {
    let t = main_status(p)?.state.as_ref()?.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default(), t.container_id.clone().unwrap_or_default()))
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("signal the container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_pods_outlive_a_kill_of_jobset_up_and_are_adopted_with_their_real_exits() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--nodes", "1", "--runtime", "process", "--heartbeat-interval", "100ms"];
    let server = common::start(dir.path(), 0, &args).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    for name in ["adopted", "ended-while-down", "stopped-with-up"] {
        pods.create(&PostParams::default(), &pod(name)).await.unwrap();
    }
    let mut before = std::collections::BTreeMap::new();
    for name in ["adopted", "ended-while-down", "stopped-with-up"] {
        let p = wait_for(&pods, name, "running", WAIT, running).await;
        before.insert(name, main_container(&p));
    }
    server.crash().await;
    for (name, (_, pid)) in &before {
        assert!(common::alive(*pid), "{name}: the container died with jobset up");
    }
    // One container ends while nothing watches it.
    let (down_id, down_pid) = before["ended-while-down"].clone();
    signal(down_pid, nix::sys::signal::Signal::SIGUSR1);
    common::gone(down_pid, "ended-while-down after SIGUSR1", WAIT).await;

    let server = common::start(dir.path(), 0, &args).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    // Its real exit code, under the container ID it had: not the 137 of a lost container.
    let p = wait_for(&pods, "ended-while-down", "terminated", WAIT, |p| terminated(p).is_some()).await;
    assert_eq!(terminated(&p), Some((3, "Error".into(), down_id)), "{:?}", p.status);
    assert_eq!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed"));
    // What it printed while jobset up was down is in its log.
    let log = pods.logs("ended-while-down", &LogParams::default()).await.unwrap();
    assert_eq!(log, "started\nexiting\n", "the supervisor kept the log");

    // The adopted container runs on, with the same ID and no restart; its exit reaches the API.
    let (adopted_id, adopted_pid) = before["adopted"].clone();
    let p = pods.get("adopted").await.unwrap();
    assert!(running(&p), "{:?}", p.status);
    assert_eq!(main_container(&p).0, adopted_id);
    assert_eq!(main_status(&p).unwrap().restart_count, 0);
    signal(adopted_pid, nix::sys::signal::Signal::SIGUSR1);
    let p = wait_for(&pods, "adopted", "terminated", WAIT, |p| terminated(p).is_some()).await;
    assert_eq!(terminated(&p), Some((3, "Error".into(), adopted_id)), "{:?}", p.status);

    // A graceful stop of jobset up still stops everything.
    let (_, last_pid) = before["stopped-with-up"].clone();
    assert!(common::alive(last_pid));
    let mut server = server;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::time::timeout(WAIT, server.child.wait()).await.expect("jobset up stops on SIGTERM").unwrap();
    server.check();
    common::gone(last_pid, "stopped-with-up after jobset up stopped", WAIT).await;
}
