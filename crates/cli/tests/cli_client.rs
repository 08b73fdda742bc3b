//! The kubectl-style client commands (`apply`, `get`, `describe`, `logs`, `delete`, `events`)
//! against a `jobset up` child process.

mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(60);

const JOBS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: hello}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "echo hello from jobset; echo second line"]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, labels: {app: demo}}
data: {a: b}
---
apiVersion: batch/v1
kind: Job
metadata: {name: exit3}
spec:
  backoffLimit: 0
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {operator: In, values: [3]}
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "exit 3"]}]
"#;

/// Waits until the Job has a Complete or Failed condition.
async fn finished(jobs: &Api<Job>, name: &str) {
    let mut w = watcher(jobs.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    tokio::time::timeout(LIMIT, async {
        while let Some(Ok(j)) = w.next().await {
            let done = j.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter().any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            });
            if done {
                return;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("job {name} did not finish"))
}

/// Waits until the Job has a Warning event with `reason` (posted after the status it reports).
async fn warned(server: &common::Server, job: &str, reason: &str) {
    let events: Api<Event> = Api::default_namespaced(server.client().await);
    let lp = ListParams::default().fields(&format!("involvedObject.name={job}"));
    let found = tokio::time::timeout(LIMIT, async {
        loop {
            let list = events.list(&lp).await.unwrap();
            if list.items.iter().any(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "no {reason} warning for job {job}; server stderr:\n{}", server.stderr.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_commands_work_against_jobset_up() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--nodes", "1", "--runtime", "process", "--heartbeat-interval", "100ms", "--job-backoff", "10ms"];
    let server = common::start(&dir.path().join("data"), 0, &args).await;
    let kc = server.kubeconfig.to_str().unwrap().to_string();
    let jobset = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--kubeconfig", kc.as_str()]);
        let all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        async move {
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            common::jobset(&refs, LIMIT).await
        }
    };
    let file = dir.path().join("jobs.yaml");
    std::fs::write(&file, JOBS).unwrap();
    let f = file.to_str().unwrap();

    // apply: created, then configured or unchanged; stdin works too.
    let out = jobset(&["apply", "-f", f]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "job.batch/hello created\nconfigmap/cfg created\njob.batch/exit3 created\n", "{out:?}");
    let out = jobset(&["apply", "-f", f]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for line in out.stdout.lines() {
        assert!(line.ends_with(" configured") || line.ends_with(" unchanged"), "{out:?}");
    }
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    finished(&jobs, "hello").await;
    finished(&jobs, "exit3").await;
    warned(&server, "exit3", "PodFailurePolicy").await;

    // get: the server's table, aligned; -A; -o wide; -o name/yaml/json; -l; NotFound.
    let out = jobset(&["get", "jobs"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME    STATUS     COMPLETIONS   DURATION   AGE"), "{out:?}");
    assert!(lines.iter().any(|l| l.starts_with("exit3   Failed     0/1")), "{out:?}");
    assert!(lines.iter().any(|l| l.starts_with("hello   Complete   1/1")), "{out:?}");
    let out = jobset(&["get", "job.batch", "hello"]).await;
    assert!(out.stdout.lines().nth(1).unwrap().starts_with("hello   Complete   1/1"), "{out:?}");
    let out = jobset(&["get", "job.batch", "hello", "-A"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    // A reader that stops early (`jobset get jobs | head -0`) ends it quietly, as a pipe does
    // kubectl, not with a panic.
    let mut child = common::jobset_command(&["get", "jobs", "--kubeconfig", &kc]).spawn().unwrap();
    drop(child.stdout.take());
    let out = tokio::time::timeout(LIMIT, child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(13), "SIGPIPE: {stderr}");
    let out = jobset(&["get", "jobs", "-A"]).await;
    assert!(out.stdout.starts_with("NAMESPACE   NAME    STATUS"), "{out:?}");
    assert!(out.stdout.lines().nth(1).unwrap().starts_with("default     "), "{out:?}");
    let out = jobset(&["get", "po", "-o", "wide"]).await;
    assert!(out.stdout.lines().next().unwrap().contains("   NODE   "), "{out:?}");
    assert!(out.stdout.contains("node-0"), "{out:?}");
    let out = jobset(&["get", "jobs", "-o", "name"]).await;
    assert_eq!(out.stdout, "job.batch/exit3\njob.batch/hello\n", "{out:?}");
    let out = jobset(&["get", "cm", "-l", "app=demo", "-o", "name"]).await;
    assert_eq!(out.stdout, "configmap/cfg\n", "{out:?}");
    let out = jobset(&["get", "job", "hello", "-o", "yaml"]).await;
    assert!(out.stdout.contains("kind: Job\n") && out.stdout.contains("  name: hello\n"), "{out:?}");
    let out = jobset(&["get", "jobs", "-o", "json"]).await;
    let list: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!((list["kind"].as_str(), list["items"][0]["kind"].as_str()), (Some("List"), Some("Job")));
    let out = jobset(&["get", "jobs", "nope"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stderr, "Error from server (NotFound): jobs.batch \"nope\" not found\n", "{out:?}");
    let out = jobset(&["get", "foos"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (1, "error: the server doesn't have a resource type \"foos\"\n"));

    // describe: spec essentials, pod counts, conditions, events.
    let out = jobset(&["describe", "job", "exit3"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for want in [
        "Name:                exit3\n",
        "Completion Mode:     NonIndexed\n",
        "Pod Failure Policy:  FailJob on exit codes In [3]\n",
        "Pods Statuses:       0 Active (0 Ready) / 0 Succeeded / 1 Failed\n",
        "\nConditions:\n",
        "  Failed          True     PodFailurePolicy",
        "\nEvents:\n",
        "  Warning   PodFailurePolicy",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in\n{}", out.stdout);
    }
    let pod = jobset(&["get", "pods", "-l", "job-name=hello", "-o", "name"]).await.stdout;
    let pod = pod.trim().strip_prefix("pod/").expect("a pod").to_string();
    let out = jobset(&["describe", "po", &pod]).await;
    for want in [
        "Controlled By:      Job/hello\n",
        "Node:               node-0",
        "Status:             Succeeded\n",
        "    State:          Terminated\n",
        "      Exit Code:    0\n",
        "    Restart Count:  0\n",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in\n{}", out.stdout);
    }

    // logs: by pod, by job, --tail, --timestamps.
    let out = jobset(&["logs", &pod]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "hello from jobset\nsecond line\n"), "{out:?}");
    let out = jobset(&["logs", "job/hello", "--tail", "1"]).await;
    assert_eq!(out.stdout, "second line\n", "{out:?}");
    let out = jobset(&["logs", "job/hello", "-c", "main", "--timestamps"]).await;
    let first = out.stdout.lines().next().unwrap();
    let (ts, rest) = first.split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok() && rest == "hello from jobset", "{out:?}");
    let out = jobset(&["logs", "job/nope"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (1, "error: job \"nope\" has no pods\n"), "{out:?}");

    // events: kubectl events' columns.
    let out = jobset(&["events"]).await;
    assert!(out.stdout.starts_with("LAST SEEN   TYPE      REASON"), "{out:?}");
    assert!(
        out.stdout.lines().any(|l| l.contains("   Warning   PodFailurePolicy   Job/exit3   Container main")),
        "{out:?}"
    );
    let out = jobset(&["events", "-A"]).await;
    assert!(out.stdout.starts_with("NAMESPACE   LAST SEEN"), "{out:?}");

    // get -w: the table, then a row per change.
    let mut watch = common::jobset_command(&["get", "jobs", "-w", "--kubeconfig", &kc]).spawn().unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let header = tokio::time::timeout(LIMIT, lines.next_line()).await.unwrap().unwrap().unwrap();
    assert!(header.starts_with("NAME"), "{header}");
    let late = dir.path().join("late.yaml");
    std::fs::write(&late, JOBS.split("---").next().unwrap().replace("hello", "late")).unwrap();
    let out = jobset(&["apply", "-f", late.to_str().unwrap()]).await;
    assert_eq!(out.stdout, "job.batch/late created\n", "{out:?}");
    tokio::time::timeout(LIMIT, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.starts_with("late ") {
                return;
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("a row for the new job");
    watch.kill().await.unwrap();

    // delete: kubectl's lines; NotFound names the object and exits 1.
    let out = jobset(&["delete", "job", "hello", "nope"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stdout, "job.batch \"hello\" deleted\n", "{out:?}");
    assert_eq!(out.stderr, "Error from server (NotFound): jobs.batch \"nope\" not found\n", "{out:?}");
    let out = jobset(&["get", "job", "hello"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    let out = jobset(&["delete", "cm", "--all"]).await;
    assert!(out.stdout.contains("configmap \"cfg\" deleted\n"), "{out:?}");
    let out = jobset(&["delete", "job"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    server.kill().await;
}
