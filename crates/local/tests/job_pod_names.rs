//! Job pods are named by the API server from the `generateName` the Job controller gives them,
//! as upstream's `GetPodFromTemplate` (`<job>-`) and `podGenerateNameWithIndex` (`<job>-<index>-`).

use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A Job of `n` pods that run until deleted.
fn job(name: &str, n: i32, mode: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"parallelism": n, "completions": n, "completionMode": mode,
            "template": {"metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}
    }))
    .unwrap()
}

/// Creates the Job, waits (through a watch) until it has `n` active pods and returns its pods.
async fn active_pods(c: &LocalCluster, job: Job, n: i32) -> Vec<Pod> {
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let name = job.metadata.name.clone().unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let mut s = watcher(jobs.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(j)) = s.next().await {
            if j.status.as_ref().and_then(|s| s.active) == Some(n) {
                return;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {n} active pods of job {name}"));
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"))).await.unwrap().items
}

/// Each pod's (generateName, index annotation), sorted, after checking that the server made its
/// name from the generateName and five random characters.
fn generate_names(pods: &[Pod]) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = pods
        .iter()
        .map(|p| {
            let generate_name = p.metadata.generate_name.clone().unwrap_or_default();
            let name = p.metadata.name.as_deref().unwrap_or_default();
            assert!(
                name.len() == generate_name.len() + 5 && name.starts_with(&generate_name),
                "pod {name} is not named from its generateName {generate_name:?}"
            );
            (generate_name, p.metadata.annotations.as_ref().and_then(|a| a.get(COMPLETION_INDEX)).cloned())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_pods_are_generated_from_job_name_and_index() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(3)).await;
    let pods = active_pods(&c, job("idx", 3, "Indexed"), 3).await;
    let want: Vec<(String, Option<String>)> = (0..3).map(|i| (format!("idx-{i}-"), Some(i.to_string()))).collect();
    assert_eq!(generate_names(&pods), want);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_with_a_long_name_keeps_the_index_in_58_characters() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(1)).await;
    // The longest name an Indexed Job of one completion may have: its hostname `<name>-0` is a DNS label.
    let name = format!("long{}", "x".repeat(57));
    let pods = active_pods(&c, job(&name, 1, "Indexed"), 1).await;
    assert_eq!(generate_names(&pods), [(format!("{}-0-", &name[..55]), Some("0".to_string()))]);
    assert_eq!(pods[0].metadata.name.as_deref().map(str::len), Some(63), "a DNS label, as upstream's");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_indexed_job_pods_are_generated_from_job_name() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(2)).await;
    let pods = active_pods(&c, job("plain", 2, "NonIndexed"), 2).await;
    let want: Vec<(String, Option<String>)> = vec![("plain-".into(), None); 2];
    assert_eq!(generate_names(&pods), want);
    c.shutdown().await;
}
