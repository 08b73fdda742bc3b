//! `scheduling.k8s.io/v1alpha2` Workloads and PodGroups (KEP-4671) through kube-rs: discovery,
//! create/read/update/delete, watch, the PodGroup status subresource and kube-apiserver's
//! validation (a Workload's spec immutable, one scheduling policy, `minCount` > 0).

mod common;

use common::{Transport, harness};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};

fn workload(name: &str, min_count: i64) -> Workload {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
        "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}]}}))
    .unwrap()
}

fn pod_group(name: &str, policy: Value) -> PodGroup {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"schedulingPolicy": policy,
        "podGroupTemplateRef": {"workload": {"workloadName": "wl", "podGroupTemplateName": "workers"}}}}))
    .unwrap()
}

/// The refusal's HTTP code and message.
fn refusal<T: std::fmt::Debug>(r: kube::Result<T>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn discovery_lists_workloads_and_pod_groups_in_v1alpha2_and_keeps_v1_preferred() {
    let h = harness(Transport::InProcess).await;
    let discovery = Discovery::new(h.client.clone()).run().await.unwrap();
    let group = discovery.get("scheduling.k8s.io").expect("scheduling.k8s.io served");
    assert_eq!(group.preferred_version(), Some("v1"));
    let kinds: Vec<(String, String)> = group
        .versioned_resources("v1alpha2")
        .into_iter()
        .map(|(r, caps)| {
            (r.kind, caps.subresources.iter().map(|(s, _)| s.plural.clone()).collect::<Vec<_>>().join(","))
        })
        .collect();
    assert_eq!(kinds, [("Workload".to_string(), String::new()), ("PodGroup".to_string(), "status".to_string())]);
}

#[tokio::test]
async fn workloads_and_pod_groups_are_created_watched_updated_and_deleted() {
    let h = harness(Transport::InProcess).await;
    let workloads: Api<Workload> = Api::default_namespaced(h.client.clone());
    let groups: Api<PodGroup> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    let mut watch = groups.watch(&WatchParams::default(), "0").await.unwrap().boxed();

    let wl = workloads.create(&pp, &workload("wl", 3)).await.unwrap();
    assert_eq!(wl.spec.pod_group_templates[0].scheduling_policy.gang.as_ref().unwrap().min_count, 3);
    let pg = groups.create(&pp, &pod_group("pg", json!({"gang": {"minCount": 3}}))).await.unwrap();
    let added = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match watch.try_next().await.unwrap() {
                Some(WatchEvent::Bookmark(_)) => continue,
                other => break other,
            }
        }
    })
    .await
    .unwrap();
    assert!(matches!(added, Some(WatchEvent::Added(ref g)) if g.metadata.name.as_deref() == Some("pg")), "{added:?}");

    // The status subresource writes the status only; the main resource keeps it.
    let status = json!({"status": {"conditions": [{"type": "PodGroupScheduled", "status": "False",
        "reason": "Unschedulable", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        "spec": {"schedulingPolicy": {"basic": {}}}});
    let written = groups.patch_status("pg", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    let conditions = written.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(conditions.iter().map(|c| c.reason.as_str()).collect::<Vec<_>>(), ["Unschedulable"]);
    assert!(written.spec.scheduling_policy.gang.is_some(), "a status write leaves the spec alone");
    assert!(written.metadata.resource_version != pg.metadata.resource_version);

    // Labels of a Workload may change; its spec may not (below).
    let labelled = workloads
        .patch("wl", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.labels.unwrap()["a"], "b");

    groups.delete("pg", &DeleteParams::default()).await.unwrap();
    workloads.delete("wl", &DeleteParams::default()).await.unwrap();
    assert!(groups.get_opt("pg").await.unwrap().is_none());
    assert!(workloads.get_opt("wl").await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_workloads_and_pod_groups_are_refused_as_kube_apiserver() {
    let h = harness(Transport::InProcess).await;
    let workloads: Api<Workload> = Api::default_namespaced(h.client.clone());
    let groups: Api<PodGroup> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();

    let (code, message) = refusal(workloads.create(&pp, &workload("zero", 0)).await);
    assert_eq!(code, 422);
    assert_eq!(
        message,
        r#"Workload.scheduling.k8s.io "zero" is invalid: spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Required value"#
    );
    let (code, message) =
        refusal(groups.create(&pp, &pod_group("both", json!({"basic": {}, "gang": {"minCount": 2}}))).await);
    assert_eq!(code, 422);
    assert!(message.contains("exactly one of `basic`, `gang` is required, but multiple fields are set"), "{message}");

    workloads.create(&pp, &workload("wl", 2)).await.unwrap();
    let bigger = Patch::Merge(json!({"spec": {"podGroupTemplates": [{"name": "workers",
        "schedulingPolicy": {"gang": {"minCount": 4}}}]}}));
    let (code, message) = refusal(workloads.patch("wl", &PatchParams::default(), &bigger).await);
    assert_eq!(code, 422);
    assert!(
        message.starts_with(r#"Workload.scheduling.k8s.io "wl" is invalid: spec.podGroupTemplates: Invalid value: "#)
            && message.ends_with("field is immutable"),
        "{message}"
    );
    groups.create(&pp, &pod_group("pg", json!({"gang": {"minCount": 2}}))).await.unwrap();
    let policy = Patch::Merge(json!({"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}));
    let (code, message) = refusal(groups.patch("pg", &PatchParams::default(), &policy).await);
    assert_eq!(code, 422);
    assert!(message.contains("spec.schedulingPolicy: Invalid value: "), "{message}");
}
