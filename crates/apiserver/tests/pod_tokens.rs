//! A pod-bound token over HTTPS: the in-place restart agent's least privilege.

mod common;

use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::auth::{IN_PLACE_RESTART_ATTEMPT, PodIdentity, PodTokens};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

async fn cluster() -> common::HttpsCluster {
    common::https_cluster().await
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .unwrap()
}

fn jobsets(client: Client) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets");
    Api::namespaced_with(client, "default", &ar)
}

fn status_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_token_reads_its_jobset_and_changes_only_its_attempt_annotation() {
    let c = cluster().await;
    let admin = c.server.client();
    let pods: Api<Pod> = Api::default_namespaced(admin.clone());
    let mine = pods.create(&PostParams::default(), &pod("w-0")).await.unwrap();
    pods.create(&PostParams::default(), &pod("w-1")).await.unwrap();
    let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}}]}});
    jobsets(admin.clone()).create(&PostParams::default(), &serde_json::from_value(js).unwrap()).await.unwrap();

    let token = PodTokens::new(&c.creds.token).issue(&PodIdentity::of(&serde_json::to_value(&mine).unwrap()));
    let agent = c.client(&token).await;
    let agent_pods: Api<Pod> = Api::default_namespaced(agent.clone());

    // Its own pod: read, and the attempt annotation server-side-applied.
    assert_eq!(agent_pods.get("w-0").await.unwrap().uid(), mine.uid());
    let apply = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0",
        "annotations": {IN_PLACE_RESTART_ATTEMPT: "0"}}});
    let pp = PatchParams::apply("jobset-in-place-restart-agent").force();
    agent_pods.patch("w-0", &pp, &Patch::Apply(&apply)).await.unwrap();
    assert_eq!(
        pods.get("w-0").await.unwrap().annotations().get(IN_PLACE_RESTART_ATTEMPT).map(String::as_str),
        Some("0")
    );

    // Anything else about its pod, another pod, other kinds: 403, and nothing stored changes.
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    assert_eq!(status_code(agent_pods.patch("w-0", &PatchParams::default(), &label).await.unwrap_err()), 403);
    assert!(!pods.get("w-0").await.unwrap().labels().contains_key("x"));
    let other = Patch::Merge(json!({"metadata": {"annotations": {IN_PLACE_RESTART_ATTEMPT: "9"}}}));
    match agent_pods.patch("w-1", &PatchParams::default(), &other).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(
            s.message,
            "pods \"w-1\" is forbidden: User \"system:serviceaccount:default:default\" cannot patch resource \"pods\" in API group \"\" in the namespace \"default\""
        ),
        e => panic!("{e}"),
    }
    assert!(pods.get("w-1").await.unwrap().annotations().get(IN_PLACE_RESTART_ATTEMPT).is_none());
    let secrets: Api<Secret> = Api::default_namespaced(agent.clone());
    assert_eq!(status_code(secrets.list(&ListParams::default()).await.unwrap_err()), 403);
    assert_eq!(status_code(jobsets(agent.clone()).list(&ListParams::default()).await.unwrap_err()), 403);

    // Its own JobSet, watched by name.
    let mut w =
        jobsets(agent.clone()).watch(&WatchParams::default().fields("metadata.name=js"), "0").await.unwrap().boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), w.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first, WatchEvent::Added(ref o) if o.name_any() == "js"), "{first:?}");

    // Once its pod is gone, the token is worth nothing.
    pods.delete("w-0", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert_eq!(status_code(agent_pods.get("w-1").await.unwrap_err()), 401);
}
