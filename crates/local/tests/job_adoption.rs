//! Black-box tests of which pods a Job controls (issue 20, items 6 and 7): adoption and release
//! by selector, uncounted removal of duplicate-index pods, and the tracking finalizers of pods
//! no Job controls. Names follow upstream's integration tests (`test/integration/job/job_test.go`)
//! where one exists.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::ApiServer;
use jobset_controllers::shared_pods::SharedPods;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::watcher;
use serde_json::{Value, json};

mod common;
use common::{has_condition, job, wait_job};

const TIMEOUT: Duration = Duration::from_secs(30);
const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

async fn cluster(config: LocalConfig) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), config).await
}

/// A pod created by hand (no owner unless `meta` gives one).
fn bare_pod(name: &str, meta: Value, spec: Value) -> Pod {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}});
    json_merge(&mut v["metadata"], meta);
    json_merge(&mut v["spec"], spec);
    serde_json::from_value(v).unwrap()
}

fn json_merge(a: &mut Value, b: Value) {
    if let (Value::Object(a), Value::Object(b)) = (a, b) {
        a.extend(b);
    }
}

fn has_finalizer(p: &Pod) -> bool {
    p.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

fn controller_uid(p: &Pod) -> Option<&str> {
    p.owner_references().iter().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
}

/// Waits (through a watch of the pods `labels` selects, bounded) until the pods as they stand
/// satisfy `pred`; returns them by name.
async fn wait_pods(
    api: &Api<Pod>,
    labels: &str,
    what: &str,
    pred: impl Fn(&BTreeMap<String, Pod>) -> bool,
) -> BTreeMap<String, Pod> {
    let mut s = watcher(api.clone(), watcher::Config::default().labels(labels)).boxed();
    let mut pods = BTreeMap::new();
    let mut listing = BTreeMap::new();
    let mut listed = false;
    let last = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = s.next().await {
            match ev.expect("pod watch") {
                watcher::Event::Init => listing.clear(),
                watcher::Event::InitApply(p) => {
                    listing.insert(p.name_any(), p);
                }
                watcher::Event::InitDone => {
                    pods = std::mem::take(&mut listing);
                    listed = true;
                }
                watcher::Event::Apply(p) => {
                    pods.insert(p.name_any(), p);
                }
                watcher::Event::Delete(p) => {
                    pods.remove(&p.name_any());
                }
            }
            if listed && pred(&pods) {
                return Some(pods.clone());
            }
        }
        None
    })
    .await;
    match last {
        Ok(Some(p)) => p,
        Ok(None) => panic!("pod watch ended waiting for {what}"),
        Err(_) => panic!("timed out waiting for pods {labels}: {what}"),
    }
}

fn selector_of(j: &Job) -> String {
    let labels =
        j.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(|s| s.match_labels.clone()).unwrap_or_default();
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// Upstream's `validateNoOrphanPodsWithFinalizers`: no pod the Job's selector matches keeps the
/// tracking finalizer.
async fn validate_no_orphan_pods_with_finalizers(pods: &Api<Pod>, j: &Job) {
    wait_pods(pods, &selector_of(j), "no pod with the tracking finalizer", |ps| !ps.values().any(has_finalizer)).await;
}

/// Upstream's TestOrphanPodsFinalizersClearedWithGC: whatever the propagation policy, the Job's
/// pods end without the tracking finalizer once it is deleted (with `Orphan` they stay, released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_pods_finalizers_cleared_with_gc() {
    let c = cluster(LocalConfig::fast(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    for policy in [PropagationPolicy::Orphan, PropagationPolicy::Background, PropagationPolicy::Foreground] {
        let name = format!("gc-{policy:?}").to_lowercase();
        let j = jobs
            .create(
                &PostParams::default(),
                &job(&name, json!({"parallelism": 2}), json!({"sim.jobset.x-k8s.io/duration": "forever"})),
            )
            .await
            .unwrap();
        wait_job(&jobs, &name, "2 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(2)).await;
        jobs.delete(&name, &DeleteParams { propagation_policy: Some(policy.clone()), ..Default::default() })
            .await
            .unwrap();
        validate_no_orphan_pods_with_finalizers(&pods, &j).await;
        if matches!(policy, PropagationPolicy::Orphan) {
            // Released, they can be deleted like any pod instead of staying Terminating.
            pods.delete_collection(
                &DeleteParams::default(),
                &kube::api::ListParams::default().labels(&selector_of(&j)),
            )
            .await
            .unwrap();
            wait_pods(&pods, &selector_of(&j), "orphaned pods gone once deleted", |ps| ps.is_empty()).await;
        }
    }
    c.shutdown().await;
}

/// Upstream's TestOrphanPodsFinalizersClearedOnRestart: a Job deleted (orphaning its pods, the
/// default for Jobs) while the controller is down; the restarted controller releases them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_pods_finalizers_cleared_on_restart() {
    let mut config = LocalConfig::fast(2);
    config.job_controller = false;
    let job_config = config.job.clone();
    let c = cluster(config).await;
    let start = || {
        let shared = SharedPods::start(c.client(), watcher::Config::default());
        tokio::spawn(jobset_controllers::job::run(c.client(), job_config.clone(), shared))
    };
    let controller = start();
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let j = jobs
        .create(
            &PostParams::default(),
            &job("restart", json!({"parallelism": 1}), json!({"sim.jobset.x-k8s.io/duration": "forever"})),
        )
        .await
        .unwrap();
    wait_job(&jobs, "restart", "1 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(1)).await;
    controller.abort();
    let _ = controller.await;
    jobs.delete("restart", &DeleteParams::default()).await.unwrap();
    let orphaned = wait_pods(&pods, &selector_of(&j), "the pod orphaned", |ps| {
        ps.len() == 1 && ps.values().all(|p| controller_uid(p).is_none() && has_finalizer(p))
    })
    .await;
    assert_eq!(orphaned.len(), 1);
    let controller = start();
    validate_no_orphan_pods_with_finalizers(&pods, &j).await;
    controller.abort();
    c.shutdown().await;
}

/// A pod that only names a running Job as a non-controller owner is not the Job's (its labels do
/// not match the selector): it loses the tracking finalizer, and a delete then removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_only_a_non_controller_reference_to_a_running_job_loses_the_tracking_finalizer() {
    let c = cluster(LocalConfig::fast(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let j = jobs
        .create(
            &PostParams::default(),
            &job("runner", json!({"parallelism": 1}), json!({"sim.jobset.x-k8s.io/duration": "forever"})),
        )
        .await
        .unwrap();
    wait_job(&jobs, "runner", "1 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(1)).await;
    let owner = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "runner", "uid": j.uid().unwrap(), "controller": false}]);
    let meta = json!({"labels": {"app": "bystander"}, "ownerReferences": owner, "finalizers": [TRACKING_FINALIZER],
        "annotations": {"sim.jobset.x-k8s.io/duration": "forever"}});
    pods.create(&PostParams::default(), &bare_pod("bystander", meta, json!({}))).await.unwrap();
    let p = wait_pods(&pods, "app=bystander", "the finalizer removed", |ps| {
        ps.get("bystander").is_some_and(|p| !has_finalizer(p))
    })
    .await
    .remove("bystander")
    .unwrap();
    assert_eq!(controller_uid(&p), None, "not adopted: its labels do not match the selector");
    assert_eq!(p.owner_references().len(), 1, "its reference is left as it was");
    pods.delete("bystander", &DeleteParams::default()).await.unwrap();
    wait_pods(&pods, "app=bystander", "the pod gone once deleted", |ps| ps.is_empty()).await;
    let j = jobs.get("runner").await.unwrap();
    assert_eq!(j.status.and_then(|s| s.active), Some(1), "the Job's own pod is untouched");
    c.shutdown().await;
}

/// Upstream's getPodsForJob adopts an orphan its selector matches (controller reference and
/// tracking finalizer) and counts it: a pod that already succeeded completes the Job, which
/// creates none of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_pod_matching_the_selector_is_adopted_and_counted() {
    let c = cluster(LocalConfig::fast(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let meta = json!({"labels": {"app": "adopt-me"}, "annotations": {"sim.jobset.x-k8s.io/duration": "10ms"}});
    pods.create(&PostParams::default(), &bare_pod("early", meta, json!({}))).await.unwrap();
    wait_pods(&pods, "app=adopt-me", "the orphan succeeded", |ps| {
        ps.get("early").and_then(|p| p.status.as_ref()).and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await;
    // Its own pods would never finish: only the adopted one can complete it.
    let spec = json!({"manualSelector": true, "selector": {"matchLabels": {"app": "adopt-me"}},
        "completions": 1, "parallelism": 1, "template": {"metadata": {"labels": {"app": "adopt-me"}}}});
    let created = jobs
        .create(&PostParams::default(), &job("adopter", spec, json!({"sim.jobset.x-k8s.io/duration": "forever"})))
        .await
        .unwrap();
    let j =
        wait_job(&jobs, "adopter", "Complete", |j| has_condition(j, "Complete") || has_condition(j, "Failed")).await;
    assert!(has_condition(&j, "Complete"), "{:?}", j.status);
    let s = j.status.unwrap();
    assert_eq!((s.succeeded, s.failed), (Some(1), Some(0)));
    let all = wait_pods(&pods, "app=adopt-me", "the adopted pod released from tracking", |ps| {
        !ps.values().any(has_finalizer)
    })
    .await;
    assert_eq!(all.keys().collect::<Vec<_>>(), ["early"], "the Job created no pod of its own");
    let early = &all["early"];
    assert_eq!(controller_uid(early), created.uid().as_deref(), "adopted as upstream's AdoptPod");
    let owner = &early.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.block_owner_deletion), ("Job", "adopter", Some(true)));
    c.shutdown().await;
}

/// Upstream's ClaimPods releases a pod whose labels stop matching the selector (controller
/// reference and tracking finalizer removed) and the Job replaces it, counting no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_relabelled_out_of_the_selector_is_released_and_replaced() {
    let c = cluster(LocalConfig::fast(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let j = jobs
        .create(
            &PostParams::default(),
            &job(
                "rel",
                json!({"parallelism": 1, "completions": 1}),
                json!({"sim.jobset.x-k8s.io/duration": "forever"}),
            ),
        )
        .await
        .unwrap();
    wait_job(&jobs, "rel", "1 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(1)).await;
    let first = wait_pods(&pods, "job-name=rel", "the Job's pod", |ps| ps.len() == 1).await.into_keys().next().unwrap();
    let relabel = json!({"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "someone-else"}}});
    pods.patch(&first, &PatchParams::default(), &Patch::Merge(relabel)).await.unwrap();
    let uid = j.uid().unwrap();
    let now = wait_pods(&pods, "job-name=rel", "released and replaced", |ps| {
        let released = ps.get(&first).is_some_and(|p| p.owner_references().is_empty() && !has_finalizer(p));
        let replacement =
            ps.values().any(|p| p.name_any() != first && controller_uid(p) == Some(uid.as_str()) && has_finalizer(p));
        released && replacement
    })
    .await;
    assert_eq!(now.len(), 2);
    let j = wait_job(&jobs, "rel", "1 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(1)).await;
    assert_eq!(j.status.unwrap().failed.unwrap_or(0), 0, "a released pod is not a failure");
    c.shutdown().await;
}

/// Upstream's appendDuplicatedIndexPodsForRemoval: pods an Indexed Job adopts with no
/// completion-index annotation, an index ≥ completions or an index that has an active pod are
/// deleted without counting as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_deletes_adopted_pods_of_duplicate_or_invalid_indexes_uncounted() {
    let c = cluster(LocalConfig::fast(2)).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let spec = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"});
    let j = jobs
        .create(&PostParams::default(), &job("idx", spec, json!({"sim.jobset.x-k8s.io/duration": "forever"})))
        .await
        .unwrap();
    wait_job(&jobs, "idx", "2 active", |j| j.status.as_ref().and_then(|s| s.active) == Some(2)).await;
    let own: Vec<String> =
        wait_pods(&pods, "job-name=idx", "the Job's pods", |ps| ps.len() == 2).await.into_keys().collect();
    let uid = j.uid().unwrap();
    // Never scheduled (no node has the label), so the one kept of index 0 is the Job's own.
    let unschedulable = json!({"nodeSelector": {"no-such-node": "x"}});
    for (name, index) in [("dup", Some("0")), ("no-index", None), ("too-high", Some("5"))] {
        let mut meta = json!({"labels": {"batch.kubernetes.io/controller-uid": uid, "extra": "yes"}});
        if let Some(i) = index {
            meta["annotations"] = json!({"batch.kubernetes.io/job-completion-index": i});
        }
        pods.create(&PostParams::default(), &bare_pod(name, meta, unschedulable.clone())).await.unwrap();
    }
    wait_pods(&pods, "extra=yes", "the three deleted", |ps| ps.is_empty()).await;
    let j = wait_job(&jobs, "idx", "settled", |j| {
        let s = j.status.clone().unwrap_or_default();
        s.active == Some(2) && s.terminating.unwrap_or(0) == 0
    })
    .await;
    let s = j.status.unwrap();
    assert_eq!(s.failed.unwrap_or(0), 0, "deleted uncounted");
    assert!(s.uncounted_terminated_pods.and_then(|u| u.failed).is_none_or(|f| f.is_empty()));
    let left: Vec<String> =
        wait_pods(&pods, "job-name=idx", "the Job's pods", |ps| ps.len() == 2).await.into_keys().collect();
    assert_eq!(left, own, "the Job's own pods are kept");
    c.shutdown().await;
}
