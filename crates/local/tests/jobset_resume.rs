//! Resuming a JobSet whose pod template changed while it was suspended (the Kueue flow: suspend,
//! change node selectors, resume). Kubernetes lets a Job's scheduling directives change only while
//! it is suspended and `status.startTime` is unset, so the JobSet controller clears the started
//! Jobs' `startTime` first, as upstream's `resumeJob` does.

use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::*;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::*;

fn suspended(j: &Job) -> Option<bool> {
    j.spec.as_ref().and_then(|s| s.suspend)
}

fn node_selector(spec: Option<&k8s_openapi::api::core::v1::PodSpec>, key: &str) -> Option<String> {
    spec?.node_selector.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_after_a_node_selector_change_while_suspended_runs_the_jobs_with_the_new_selector() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(3)).await;
    let name = "kueue";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let js: JobSet = serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
            }
        }}}]}
    }))
    .unwrap();
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    // The Jobs start (status.startTime set) and their pods run.
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    wait_for(&pods, of_jobset(name), "two running pods", |p| p.iter().filter(|p| running(p)).count() == 2).await;
    wait_for(&jobs, of_jobset(name), "two started Jobs", |j| {
        j.len() == 2 && j.iter().all(|j| j.status.as_ref().is_some_and(|s| s.start_time.is_some()))
    })
    .await;

    // Suspend, as Kueue does on preemption.
    let pp = PatchParams::default();
    jobsets.patch(name, &pp, &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    wait_for(&jobs, of_jobset(name), "both Jobs suspended", |j| {
        j.len() == 2 && j.iter().all(|j| suspended(j) == Some(true))
    })
    .await;
    wait_for(&pods, of_jobset(name), "no pods", |p| p.is_empty()).await;

    // Admit onto one node: change the replicated job's nodeSelector while suspended, then resume.
    let nodes: Api<Node> = Api::all(c.client());
    let listed = nodes.list(&ListParams::default()).await.unwrap();
    let target = name_of(listed.items.last().expect("a node"));
    // A JSON patch carries no resourceVersion, so the controller's concurrent status writes cannot
    // make it conflict (a read-modify-replace here raced them: 409 in CI).
    let set_selector: json_patch::Patch = serde_json::from_value(json!([{
        "op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/nodeSelector",
        "value": {"kubernetes.io/hostname": target}
    }]))
    .unwrap();
    jobsets.patch(name, &pp, &Patch::Json::<()>(set_selector)).await.expect("template change while suspended");
    jobsets.patch(name, &pp, &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();

    // The Jobs resume with the new nodeSelector and their pods run on the chosen node.
    let resumed = wait_for(&jobs, of_jobset(name), "both Jobs resumed", |j| {
        j.len() == 2 && j.iter().all(|j| suspended(j) == Some(false))
    })
    .await;
    for j in &resumed {
        let pod_spec = j.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        assert_eq!(node_selector(pod_spec, "kubernetes.io/hostname").as_deref(), Some(target.as_str()), "{j:?}");
    }
    let ran =
        wait_for(&pods, of_jobset(name), "two running pods again", |p| p.iter().filter(|p| running(p)).count() == 2)
            .await;
    for p in ran.iter().filter(|p| running(p)) {
        assert_eq!(node_selector(p.spec.as_ref(), "kubernetes.io/hostname").as_deref(), Some(target.as_str()), "{p:?}");
        assert_eq!(p.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(target.as_str()), "{p:?}");
    }
    let s = jobsets.get(name).await.unwrap();
    let cond = s.condition(COND_SUSPENDED).map(|x| (x.status.as_str(), x.reason.as_str()));
    assert_eq!(cond, Some(("False", REASON_RESUMED)));
    c.shutdown().await;
}
