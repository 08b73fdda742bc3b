//! v1 ResourceQuota through kube-rs: the quota admission plugin refuses what would exceed a
//! quota with kube-apiserver's messages, and `status.used` follows creates, deletes and pods
//! reaching a terminal phase.

mod common;

use std::collections::BTreeMap;

use common::{Transport, harness};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn quota(name: &str, hard: Value) -> ResourceQuota {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"hard": hard}})).unwrap()
}

fn pod(name: &str, requests: Value, limits: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": requests, "limits": limits}}]}
    }))
    .unwrap()
}

fn used(q: &ResourceQuota) -> BTreeMap<String, String> {
    let status = q.status.clone().unwrap_or_default();
    status.used.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The API error of a request that must fail.
fn refused<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn pods_are_charged_to_the_quota_and_refused_beyond_it_with_kubernetes_messages() {
    let h = harness(Transport::InProcess).await;
    let quotas: Api<ResourceQuota> = Api::default_namespaced(h.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    let hard = json!({"pods": "2", "requests.cpu": "1", "requests.nvidia.com/gpu": "1", "limits.memory": "1024Mi"});
    let created = quotas.create(&pp, &quota("compute", hard)).await.unwrap();
    let status = created.status.clone().unwrap();
    let canonical =
        map(&[("limits.memory", "1Gi"), ("pods", "2"), ("requests.cpu", "1"), ("requests.nvidia.com/gpu", "1")]);
    let hard: BTreeMap<String, String> = status.hard.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect();
    assert_eq!(hard, canonical, "status.hard mirrors spec.hard, in canonical form");
    assert_eq!(
        used(&created),
        map(&[("limits.memory", "0"), ("pods", "0"), ("requests.cpu", "0"), ("requests.nvidia.com/gpu", "0")])
    );

    pods.create(&pp, &pod("p1", json!({"cpu": "500m"}), json!({"memory": "512Mi", "nvidia.com/gpu": "1"})))
        .await
        .unwrap();
    assert_eq!(
        used(&quotas.get("compute").await.unwrap()),
        map(&[("limits.memory", "512Mi"), ("pods", "1"), ("requests.cpu", "500m"), ("requests.nvidia.com/gpu", "1")])
    );

    let cases = [
        (
            pod("p2", json!({"cpu": "100m"}), json!({})),
            r#"pods "p2" is forbidden: failed quota: compute: must specify limits.memory for: c"#,
        ),
        (
            pod("p2", json!({"cpu": "100m"}), json!({"memory": "1Mi", "nvidia.com/gpu": "1"})),
            r#"pods "p2" is forbidden: exceeded quota: compute, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1"#,
        ),
        (
            pod("p2", json!({"cpu": "1"}), json!({"memory": "1Mi"})),
            r#"pods "p2" is forbidden: exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=500m, limited: requests.cpu=1"#,
        ),
    ];
    for (p, want) in cases {
        let s = refused(pods.create(&pp, &p).await);
        assert_eq!((s.code, s.reason.as_str(), s.message.as_str()), (403, "Forbidden", want));
    }
    pods.create(&pp, &pod("p2", json!({"cpu": "500m"}), json!({"memory": "512Mi"}))).await.unwrap();
    let s = refused(pods.create(&pp, &pod("p3", json!({"cpu": "0"}), json!({"memory": "1Mi"}))).await);
    assert_eq!(
        s.message,
        r#"pods "p3" is forbidden: exceeded quota: compute, requested: limits.memory=1Mi,pods=1, used: limits.memory=1Gi,pods=2, limited: limits.memory=1Gi,pods=2"#
    );
    assert!(pods.get_opt("p3").await.unwrap().is_none(), "a refused pod is not stored");
    assert_eq!(
        used(&quotas.get("compute").await.unwrap()),
        map(&[("limits.memory", "1Gi"), ("pods", "2"), ("requests.cpu", "1"), ("requests.nvidia.com/gpu", "1")])
    );

    // A deleted pod gives its usage back.
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        used(&quotas.get("compute").await.unwrap()),
        map(&[("limits.memory", "512Mi"), ("pods", "1"), ("requests.cpu", "500m"), ("requests.nvidia.com/gpu", "0")])
    );
    // A pod that succeeded uses no compute quota.
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status("p2", &PatchParams::default(), &Patch::Merge(&done)).await.unwrap();
    assert_eq!(
        used(&quotas.get("compute").await.unwrap()),
        map(&[("limits.memory", "0"), ("pods", "0"), ("requests.cpu", "0"), ("requests.nvidia.com/gpu", "0")])
    );
    pods.create(&pp, &pod("p3", json!({"cpu": "1"}), json!({"memory": "1Gi"}))).await.unwrap();

    // Another namespace has no quota.
    let namespaces: Api<Namespace> = Api::all(h.client.clone());
    namespaces.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap()).await.unwrap();
    let other: Api<Pod> = Api::namespaced(h.client.clone(), "other");
    other.create(&pp, &pod("free", json!({"cpu": "64"}), json!({}))).await.unwrap();
    assert_eq!(used(&quotas.get("compute").await.unwrap())["requests.cpu"], "1");
}

#[tokio::test]
async fn a_new_quota_counts_what_the_namespace_already_holds() {
    let h = harness(Transport::InProcess).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    pods.create(&pp, &pod("a", json!({"cpu": "250m", "memory": "1Gi"}), json!({}))).await.unwrap();
    pods.create(&pp, &pod("b", json!({"cpu": "250m", "memory": "512Mi"}), json!({}))).await.unwrap();
    let done = json!({"status": {"phase": "Failed"}});
    pods.patch_status("b", &PatchParams::default(), &Patch::Merge(&done)).await.unwrap();
    let quotas: Api<ResourceQuota> = Api::default_namespaced(h.client.clone());
    let hard = json!({"count/pods": "10", "pods": "10", "requests.memory": "8Gi", "cpu": "4"});
    let q = quotas.create(&pp, &quota("q", hard)).await.unwrap();
    assert_eq!(used(&q), map(&[("count/pods", "2"), ("cpu", "250m"), ("pods", "1"), ("requests.memory", "1Gi")]));
    // Raising a limit recomputes the status at once.
    let patch = json!({"spec": {"hard": {"pods": "20"}}});
    let q = quotas.patch("q", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(q.status.unwrap().hard.unwrap()["pods"].0, "20");
}

#[tokio::test]
async fn object_count_quotas_limit_any_resource() {
    let h = harness(Transport::InProcess).await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::default_namespaced(h.client.clone());
    quotas.create(&pp, &quota("objects", json!({"count/jobs.batch": "1"}))).await.unwrap();
    let jobs: Api<Job> = Api::default_namespaced(h.client.clone());
    let job = |name: &str| -> Job {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}))
        .unwrap()
    };
    jobs.create(&pp, &job("j1")).await.unwrap();
    let s = refused(jobs.create(&pp, &job("j2")).await);
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            r#"jobs.batch "j2" is forbidden: exceeded quota: objects, requested: count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1"#
        )
    );
    jobs.delete("j1", &DeleteParams::default()).await.unwrap();
    assert_eq!(used(&quotas.get("objects").await.unwrap()), map(&[("count/jobs.batch", "0")]));
    jobs.create(&pp, &job("j2")).await.unwrap();
}

#[tokio::test]
async fn invalid_quotas_are_refused_with_kubernetes_messages() {
    let h = harness(Transport::InProcess).await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::default_namespaced(h.client.clone());
    let cases = [
        (
            json!({"cpu": "-1"}),
            422,
            r#"ResourceQuota "bad" is invalid: spec.hard[cpu]: Invalid value: "-1": must be greater than or equal to 0"#,
        ),
        (
            json!({"gpus": "1"}),
            422,
            r#"ResourceQuota "bad" is invalid: spec.hard[gpus]: Invalid value: "gpus": must be a standard resource type or fully qualified"#,
        ),
        (
            json!({"cpu": "lots"}),
            400,
            r#"ResourceQuota in version "v1" cannot be handled as a ResourceQuota: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"#,
        ),
    ];
    for (hard, code, want) in cases {
        let s = refused(quotas.create(&pp, &quota("bad", hard)).await);
        assert_eq!((s.code, s.message.as_str()), (code, want));
    }
    assert!(quotas.get_opt("bad").await.unwrap().is_none());
}

#[tokio::test]
async fn a_quota_on_a_kind_served_later_counts_it_once_it_is_served() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let h = harness(Transport::InProcess).await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::default_namespaced(h.client.clone());
    let q = quotas.create(&pp, &quota("widgets", json!({"count/widgets.example.com": "1"}))).await.unwrap();
    assert_eq!(used(&q), map(&[]), "nothing serves widgets yet, so nothing is tracked");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crd_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crds: Api<DynamicObject> = Api::all_with(h.client.clone(), &crd_resource);
    crds.create(&pp, &serde_json::from_value(crd).unwrap()).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), "default", &ar);
    let widget = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}}))
            .unwrap()
    };
    widgets.create(&pp, &widget("a")).await.unwrap();
    assert_eq!(used(&quotas.get("widgets").await.unwrap()), map(&[("count/widgets.example.com", "1")]));
    let s = refused(widgets.create(&pp, &widget("b")).await);
    assert_eq!(
        s.message,
        r#"widgets.example.com "b" is forbidden: exceeded quota: widgets, requested: count/widgets.example.com=1, used: count/widgets.example.com=1, limited: count/widgets.example.com=1"#
    );
}
