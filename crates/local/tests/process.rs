//! Local mode with the process runtime: the examples of `examples/` and the kubelet semantics
//! they show, with real processes (`sh`, `python3`) on this machine.

use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::ApiServer;
use jobset_kubelet::runtime::process::ProcessConfig;
use jobset_local::{LocalCluster, LocalConfig, RuntimeKind};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster(nodes: usize) -> (LocalCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LocalConfig::fast(nodes);
    cfg.runtime = RuntimeKind::Process(ProcessConfig::default());
    cfg.state_dir = Some(dir.path().to_path_buf());
    (LocalCluster::start(ApiServer::in_memory(), cfg).await, dir)
}

/// The documents of `examples/<file>`.
fn example(file: &str) -> Vec<Value> {
    let path = format!("{}/../../examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.split("\n---\n").map(|doc| serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{path}: {e}"))).collect()
}

/// Creates the objects of an example; returns the Job's name.
async fn create_example(c: &LocalCluster, file: &str) -> String {
    let mut job_name = None;
    for doc in example(file) {
        match doc["kind"].as_str() {
            Some("Job") => {
                let job: Job = serde_json::from_value(doc).unwrap();
                job_name = job.metadata.name.clone();
                Api::<Job>::default_namespaced(c.client()).create(&PostParams::default(), &job).await.unwrap();
            }
            Some("PersistentVolumeClaim") => {
                let pvc: PersistentVolumeClaim = serde_json::from_value(doc).unwrap();
                Api::<PersistentVolumeClaim>::default_namespaced(c.client())
                    .create(&PostParams::default(), &pvc)
                    .await
                    .unwrap();
            }
            other => panic!("{file}: unexpected kind {other:?}"),
        }
    }
    job_name.expect("the example has a Job")
}

fn condition(j: &Job, type_: &str) -> Option<(String, String)> {
    let c = j.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_ && c.status == "True")?;
    Some((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Waits (through a watch, bounded) until the Job is Complete or Failed.
async fn finished(c: &LocalCluster, name: &str) -> Job {
    let api: Api<Job> = Api::default_namespaced(c.client());
    let mut s =
        watcher(api, watcher::Config::default().fields(&format!("metadata.name={name}"))).applied_objects().boxed();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(j)) = s.next().await {
            if condition(&j, "Complete").is_some() || condition(&j, "Failed").is_some() {
                return j;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for job {name} to finish"))
}

async fn job_pods(c: &LocalCluster, job: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::default_namespaced(c.client());
    api.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await.unwrap().items
}

fn status_of<'a>(p: &'a Pod, container: &str) -> &'a ContainerStatus {
    let s = p.status.as_ref().unwrap();
    s.container_statuses.iter().chain(s.init_container_statuses.iter()).flatten().find(|c| c.name == container).unwrap()
}

/// Dumps what a failed Job's pods said, for the assertion message.
async fn describe(c: &LocalCluster, job: &Job) -> String {
    let pods = job_pods(c, job.metadata.name.as_deref().unwrap()).await;
    format!("{:#?}\n{:#?}", job.status, pods.iter().map(|p| &p.status).collect::<Vec<_>>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blog_backoff_limit_per_index_example_with_real_python() {
    let (c, _dir) = cluster(2).await;
    let name = create_example(&c, "job.yaml").await;
    let j = finished(&c, &name).await;
    let s = j.status.clone().unwrap();
    assert_eq!(s.completed_indexes.as_deref(), Some("0,3-7"), "{}", describe(&c, &j).await);
    assert_eq!(s.failed_indexes.as_deref(), Some("1,2"));
    assert_eq!((s.succeeded, s.failed), (Some(6), Some(4)));
    assert_eq!(condition(&j, "Failed").unwrap().0, "FailedIndexes");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_exit_code_reaches_the_pod_failure_policy() {
    let (c, _dir) = cluster(1).await;
    let name = create_example(&c, "indexed-pod-failure-policy.yaml").await;
    let j = finished(&c, &name).await;
    let (reason, message) = condition(&j, "Failed").unwrap_or_else(|| panic!("{:#?}", j.status));
    assert_eq!(reason, "PodFailurePolicy");
    assert!(message.contains("failed with exit code 3 matching FailJob rule at index 0"), "{message}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_startup_probe_holds_back_the_main_container() {
    let (c, _dir) = cluster(1).await;
    let name = create_example(&c, "sidecar-startup-probe.yaml").await;
    let j = finished(&c, &name).await;
    // The trainer exits 1 when it starts before the sidecar's file exists (backoffLimit 0).
    assert!(condition(&j, "Complete").is_some(), "{}", describe(&c, &j).await);
    let pods = job_pods(&c, &name).await;
    assert_eq!(pods.len(), 1);
    let agent = status_of(&pods[0], "agent");
    assert_eq!(agent.restart_count, 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_rules_restart_only_on_the_listed_codes() {
    let (c, _dir) = cluster(1).await;
    let name = create_example(&c, "restart-rules.yaml").await;
    let j = finished(&c, &name).await;
    assert!(condition(&j, "Complete").is_some(), "{}", describe(&c, &j).await);
    let pods = job_pods(&c, &name).await;
    assert_eq!(pods.len(), 1, "restarted in place, not replaced");
    let trainer = status_of(&pods[0], "trainer");
    assert_eq!(trainer.restart_count, 1);
    let last = trainer.last_state.as_ref().and_then(|s| s.terminated.as_ref()).unwrap();
    assert_eq!(last.exit_code, 42);

    // The same rules, a code that is not listed: no restart, the pod (and the Job) fail.
    let mut doc = example("restart-rules.yaml").remove(0);
    doc["metadata"]["name"] = json!("restart-rules-other-code");
    doc["spec"]["template"]["spec"]["containers"][0]["command"] = json!(["sh", "-c", "exit 7"]);
    let job: Job = serde_json::from_value(doc).unwrap();
    Api::<Job>::default_namespaced(c.client()).create(&PostParams::default(), &job).await.unwrap();
    let j = finished(&c, "restart-rules-other-code").await;
    assert_eq!(condition(&j, "Failed").unwrap().0, "BackoffLimitExceeded");
    let pods = job_pods(&c, "restart-rules-other-code").await;
    assert_eq!(status_of(&pods[0], "trainer").restart_count, 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_all_containers_restarts_the_pod_in_place() {
    let (c, _dir) = cluster(1).await;
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let mut w = watcher(pods_api, watcher::Config::default().labels("batch.kubernetes.io/job-name")).boxed();
    // The watch is established (its initial list is done) before the pod exists.
    tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = w.next().await {
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                return;
            }
        }
    })
    .await
    .unwrap();
    let name = create_example(&c, "restart-all-containers.yaml").await;
    // Every value the AllContainersRestarting condition takes, in order, until it is back to False.
    let seen = tokio::time::timeout(TIMEOUT, async {
        let mut seen: Vec<(String, Option<String>, Option<String>)> = Vec::new();
        while let Some(Ok(ev)) = w.next().await {
            let watcher::Event::Apply(p) = ev else { continue };
            let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
            if let Some(cond) = conds.into_iter().find(|c| c.type_ == "AllContainersRestarting") {
                let entry = (cond.status, cond.reason, cond.message);
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
                if seen.len() >= 2 {
                    return seen;
                }
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the AllContainersRestarting condition went True, then False");
    assert_eq!(
        seen,
        [
            (
                "True".to_string(),
                Some("RestartAllContainersStarted".to_string()),
                Some("container exited with restart policy rule".to_string())
            ),
            ("False".to_string(), None, None)
        ]
    );
    let j = finished(&c, &name).await;
    assert!(condition(&j, "Complete").is_some(), "{}", describe(&c, &j).await);
    let pods = job_pods(&c, &name).await;
    assert_eq!(pods.len(), 1, "restarted in place, not replaced");
    assert_eq!(status_of(&pods[0], "trainer").restart_count, 1);
    assert_eq!(status_of(&pods[0], "setup").restart_count, 1, "the init container ran again");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_of_one_job_have_their_own_tmp() {
    let (c, _dir) = cluster(1).await;
    // Both pods write their index to /tmp/whoami, wait for the other to have written, read back.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "private-tmp"},
        "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c",
                "echo $JOB_COMPLETION_INDEX > /tmp/whoami; sleep 1; test \"$(cat /tmp/whoami)\" = \"$JOB_COMPLETION_INDEX\""]}]}}}
    }))
    .unwrap();
    Api::<Job>::default_namespaced(c.client()).create(&PostParams::default(), &job).await.unwrap();
    let j = finished(&c, "private-tmp").await;
    assert!(condition(&j, "Complete").is_some(), "{}", describe(&c, &j).await);
    assert!(!std::path::Path::new("/tmp/whoami").exists(), "the host's /tmp is untouched");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_sends_sigterm_then_sigkill_after_the_grace_period() {
    let (c, _dir) = cluster(1).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let pod = |name: &str, script: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"test": "grace"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}
        }))
        .unwrap()
    };
    // One handles SIGTERM and exits 7; the other ignores it and is killed after the grace period.
    pods.create(&PostParams::default(), &pod("polite", "trap 'exit 7' TERM; while :; do sleep 0.05; done"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("stubborn", "trap '' TERM; while :; do sleep 0.05; done")).await.unwrap();
    let mut w = watcher(pods.clone(), watcher::Config::default().labels("test=grace")).applied_objects().boxed();
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let mut up = std::collections::BTreeSet::new();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(p)) = w.next().await {
            if running(&p) {
                up.insert(p.metadata.name.clone().unwrap());
            }
            if up.len() == 2 {
                return;
            }
        }
    })
    .await
    .expect("both pods run");
    for name in ["polite", "stubborn"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // The final statuses are written before the pods disappear.
    let mut codes = std::collections::BTreeMap::new();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(p)) = w.next().await {
            let term = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c[0].state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
            if let Some(code) = term {
                codes.insert(p.metadata.name.clone().unwrap(), code);
            }
            if codes.len() == 2 {
                return;
            }
        }
    })
    .await
    .expect("both pods report their exit");
    assert_eq!(codes.get("polite"), Some(&7));
    assert_eq!(codes.get("stubborn"), Some(&137));
    c.shutdown().await;
}
