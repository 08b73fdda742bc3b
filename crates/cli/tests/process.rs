//! `jobset up --runtime process`: pods run as host processes, and their real exit codes reach
//! the Job controller's pod failure policy.

mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn job(name: &str, script: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 2,
                 "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]},
                 "template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}}}
    }))
    .unwrap()
}

async fn finished(jobs: &Api<Job>, name: &str) -> Job {
    let mut w = watcher(jobs.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(j)) = w.next().await {
            let done = j.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter().any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            });
            if done {
                return j;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("job {name} did not finish"))
}

fn condition(j: &Job, t: &str) -> Option<(String, String)> {
    let c = j.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t && c.status == "True")?;
    Some((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_exit_codes_reach_the_pod_failure_policy() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--nodes", "1", "--runtime", "process", "--heartbeat-interval", "100ms", "--job-backoff", "10ms"];
    let server = common::start(dir.path(), 0, &args).await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    jobs.create(&PostParams::default(), &job("exit3", "echo starting; exit 3")).await.unwrap();
    jobs.create(&PostParams::default(), &job("ok", "echo hello from $(hostname)")).await.unwrap();

    let j = finished(&jobs, "exit3").await;
    let (reason, message) = condition(&j, "Failed").expect("Failed");
    assert_eq!(reason, "PodFailurePolicy");
    assert!(message.starts_with("Container main for pod default/exit3-"), "{message}");
    assert!(message.ends_with("failed with exit code 3 matching FailJob rule at index 0"), "{message}");

    let j = finished(&jobs, "ok").await;
    assert!(condition(&j, "Complete").is_some(), "{:?}", j.status);
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod = pods.list(&ListParams::default().labels("job-name=ok")).await.unwrap().items.remove(0);
    let log = pods.logs(&pod.metadata.name.unwrap(), &LogParams::default()).await.unwrap();
    assert!(log.starts_with("hello from "), "the process's stdout is served by pods/log: {log:?}");
    server.kill().await;
}

/// Waits (through a watch, bounded) until the pod `name` runs.
async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    let mut w = watcher(pods.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(p)) = w.next().await {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                return p;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("pod {name} did not run"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_inside_the_pods_namespaces_with_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), 0, &["--nodes", "1", "--runtime", "process"]).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shell"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "GREETING", "value": "hi"}],
            "command": ["sh", "-c", "echo only-in-this-pod > /tmp/mark; exec sleep 600"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    running(&pods, "shell").await;
    let kubeconfig = server.kubeconfig.to_str().unwrap().to_string();
    let exec = |cmd: &'static str| {
        let kubeconfig = kubeconfig.clone();
        async move {
            // The container may still be writing its file: retry briefly until it is there.
            let args = ["exec", "shell", "--kubeconfig", &kubeconfig, "--", "sh", "-c", cmd];
            common::jobset(&args, Duration::from_secs(30)).await
        }
    };
    let mut out = exec("cat /tmp/mark; echo $GREETING $HOSTNAME").await;
    for _ in 0..50 {
        if out.code == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        out = exec("cat /tmp/mark; echo $GREETING $HOSTNAME").await;
    }
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "only-in-this-pod\nhi shell\n", "{out:?}");
    assert!(!std::path::Path::new("/tmp/mark").exists(), "the file is in the pod's /tmp, not the host's");
    let out = exec("exit 5").await;
    assert_eq!(out.code, 5, "the command's exit code is exec's: {out:?}");
    let out =
        common::jobset(&["exec", "nope", "--kubeconfig", &kubeconfig, "--", "true"], Duration::from_secs(30)).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("\"nope\" not found"), "{out:?}");
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_process_survives_jobset_run_killed_with_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Each pod starts a background child and a grandchild. The test finds their host pids in the
    // host's /proc by their command line, unique to this run (a container's /proc is its own).
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let duration = format!("600.{}{nanos}", std::process::id());
    std::fs::write(
        out.join("leak.sh"),
        format!("(exec sleep {duration}) &\nsetsid sh -c 'exec sleep {duration}' &\nexec sleep {duration}\n"),
    )
    .unwrap();
    let cmdline = format!("sleep\0{duration}\0").into_bytes();
    let manifest = dir.path().join("job.yaml");
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "leaky"},
        "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "template": {"spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "out", "hostPath": {"path": out.to_str().unwrap()}}],
            "containers": [{"name": "main", "image": "busybox", "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                "command": ["sh", "/out/leak.sh"]}]}}}
    });
    std::fs::write(&manifest, serde_json::to_string(&job).unwrap()).unwrap();
    let mut run = common::jobset_command(&["run", manifest.to_str().unwrap(), "--runtime", "process"]).spawn().unwrap();
    // 2 pods × 3 processes reported.
    let pids: Vec<i32> = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let pids: Vec<i32> = std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == cmdline))
                .collect();
            if pids.len() >= 6 {
                return pids;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the pods report their processes");
    assert!(pids.iter().all(|p| common::alive(*p)), "{pids:?} run before the kill");
    run.start_kill().unwrap();
    run.wait().await.unwrap();
    let left = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let left: Vec<i32> = pids.iter().copied().filter(|p| common::alive(*p)).collect();
            if left.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let still: Vec<i32> = pids.iter().copied().filter(|p| common::alive(*p)).collect();
    assert!(left.is_ok(), "processes outlived jobset run: {still:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_to_its_documented_end() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    for (file, code, says) in [
        ("job.yaml", 1, "FailedIndexes"),
        ("indexed-pod-failure-policy.yaml", 1, "PodFailurePolicy"),
        ("restart-rules.yaml", 0, "succeeded"),
        ("sidecar-startup-probe.yaml", 0, "succeeded"),
        ("restart-all-containers.yaml", 0, "succeeded"),
    ] {
        let path = format!("{examples}/{file}");
        let args = ["run", &path, "--job-backoff", "10ms", "--timeout", "60s"];
        let out = common::jobset(&args, Duration::from_secs(90)).await;
        assert_eq!(out.code, code, "{file}: {out:?}");
        assert!(out.stdout.contains(says) || out.stderr.contains(says), "{file}: {out:?}");
    }
}
