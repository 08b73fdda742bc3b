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
