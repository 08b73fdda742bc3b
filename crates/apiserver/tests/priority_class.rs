//! `scheduling.k8s.io/v1` PriorityClasses and the Priority admission plugin, through kube-rs:
//! a pod's class resolved to `spec.priority` and `spec.preemptionPolicy`, the global default
//! class, kube-apiserver's refusals and validation messages, and its two system classes.

mod common;

use common::{Transport, harness};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn class(name: &str, value: i64, rest: Value) -> PriorityClass {
    let mut v = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
    for (k, x) in rest.as_object().cloned().unwrap_or_default() {
        v[k] = x;
    }
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The refusal's HTTP code and message.
fn refusal<T: std::fmt::Debug>(r: kube::Result<T>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// (priorityClassName, priority, preemptionPolicy) of a stored pod.
fn priority_of(p: &Pod) -> (Option<String>, Option<i32>, Option<String>) {
    let s = p.spec.as_ref().unwrap();
    (s.priority_class_name.clone(), s.priority, s.preemption_policy.clone())
}

#[tokio::test]
async fn a_pod_s_class_gives_its_priority_and_preemption_policy() {
    let h = harness(Transport::InProcess).await;
    let classes: Api<PriorityClass> = Api::all(h.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    let high = classes.create(&pp, &class("high", 1000, json!({"preemptionPolicy": "Never"}))).await.unwrap();
    assert_eq!(high.preemption_policy.as_deref(), Some("Never"));
    let low = classes.create(&pp, &class("low", -10, json!({}))).await.unwrap();
    assert_eq!(low.preemption_policy.as_deref(), Some("PreemptLowerPriority"), "defaulted");

    let p = pods.create(&pp, &pod("hi", json!({"priorityClassName": "high"}))).await.unwrap();
    assert_eq!(priority_of(&p), (Some("high".into()), Some(1000), Some("Never".into())));
    let p = pods.create(&pp, &pod("lo", json!({"priorityClassName": "low"}))).await.unwrap();
    assert_eq!(priority_of(&p), (Some("low".into()), Some(-10), Some("PreemptLowerPriority".into())));
    // No class and no default class: priority 0.
    let p = pods.create(&pp, &pod("plain", json!({}))).await.unwrap();
    assert_eq!(priority_of(&p), (None, Some(0), Some("PreemptLowerPriority".into())));
    // The class's own value may be written.
    let p = pods.create(&pp, &pod("same", json!({"priorityClassName": "high", "priority": 1000}))).await.unwrap();
    assert_eq!(p.spec.unwrap().priority, Some(1000));
    // An update that leaves them out keeps them.
    let patch = Patch::Merge(json!({"spec": {"priority": null, "preemptionPolicy": null}}));
    let p = pods.patch("hi", &PatchParams::default(), &patch).await.unwrap();
    assert_eq!(priority_of(&p), (Some("high".into()), Some(1000), Some("Never".into())));
}

#[tokio::test]
async fn unknown_classes_and_priorities_the_class_does_not_give_are_refused_as_kube_apiserver() {
    let h = harness(Transport::InProcess).await;
    let classes: Api<PriorityClass> = Api::all(h.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    classes.create(&pp, &class("high", 1000, json!({"preemptionPolicy": "Never"}))).await.unwrap();
    let cases = [
        (
            pod("p", json!({"priorityClassName": "x"})),
            r#"pods "p" is forbidden: no PriorityClass with name x was found"#,
        ),
        (
            pod("p", json!({"priorityClassName": "high", "priority": 5})),
            r#"pods "p" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"#,
        ),
        (
            pod("p", json!({"priority": 7})),
            r#"pods "p" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"#,
        ),
        (
            pod("p", json!({"priorityClassName": "high", "preemptionPolicy": "PreemptLowerPriority"})),
            r#"pods "p" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name"#,
        ),
    ];
    for (p, want) in cases {
        assert_eq!(refusal(pods.create(&pp, &p).await), (403, want.to_string()));
    }
    assert!(pods.get_opt("p").await.unwrap().is_none(), "nothing stored");
}

#[tokio::test]
async fn the_global_default_class_applies_to_pods_without_one_and_only_one_may_exist() {
    let h = harness(Transport::InProcess).await;
    let classes: Api<PriorityClass> = Api::all(h.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pp = PostParams::default();
    classes.create(&pp, &class("normal", 100, json!({"globalDefault": true}))).await.unwrap();
    classes.create(&pp, &class("batch", 10, json!({"preemptionPolicy": "Never"}))).await.unwrap();
    let p = pods.create(&pp, &pod("p", json!({}))).await.unwrap();
    assert_eq!(priority_of(&p), (Some("normal".into()), Some(100), Some("PreemptLowerPriority".into())));
    let p = pods.create(&pp, &pod("b", json!({"priorityClassName": "batch"}))).await.unwrap();
    assert_eq!(priority_of(&p), (Some("batch".into()), Some(10), Some("Never".into())));

    let refused = "is forbidden: PriorityClass normal is already marked as default. Only one default can exist";
    let second = classes.create(&pp, &class("second", 5, json!({"globalDefault": true}))).await;
    assert_eq!(refusal(second), (403, format!(r#"priorityclasses.scheduling.k8s.io "second" {refused}"#)));
    let marked = classes.patch("batch", &PatchParams::default(), &Patch::Merge(json!({"globalDefault": true}))).await;
    assert_eq!(refusal(marked), (403, format!(r#"priorityclasses.scheduling.k8s.io "batch" {refused}"#)));
    // The default itself may be updated.
    let d = Patch::Merge(json!({"description": "most pods"}));
    assert!(classes.patch("normal", &PatchParams::default(), &d).await.unwrap().global_default.unwrap());
}

#[tokio::test]
async fn the_system_classes_are_there_and_cannot_be_deleted() {
    let h = harness(Transport::InProcess).await;
    let classes: Api<PriorityClass> = Api::all(h.client.clone());
    for (name, value) in [("system-cluster-critical", 2_000_000_000), ("system-node-critical", 2_000_001_000)] {
        let pc = classes.get(name).await.unwrap();
        assert_eq!((pc.value, pc.global_default.unwrap_or(false)), (Some(value), false), "{name}");
        assert_eq!(pc.preemption_policy.as_deref(), Some("PreemptLowerPriority"), "{name}");
        let deleted = classes.delete(name, &DeleteParams::default()).await;
        let want = format!(
            r#"priorityclasses.scheduling.k8s.io "{name}" is forbidden: this is a system priority class and cannot be deleted"#
        );
        assert_eq!(refusal(deleted), (403, want));
    }
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "kube-system");
    let p = pods
        .create(&PostParams::default(), &pod("dns", json!({"priorityClassName": "system-cluster-critical"})))
        .await
        .unwrap();
    assert_eq!(p.spec.unwrap().priority, Some(2_000_000_000));
}

#[tokio::test]
async fn classes_are_validated_with_kube_apiserver_s_messages() {
    let h = harness(Transport::InProcess).await;
    let classes: Api<PriorityClass> = Api::all(h.client.clone());
    let pp = PostParams::default();
    let cases = [
        (
            class("big", 1_000_000_001, json!({})),
            r#"PriorityClass.scheduling.k8s.io "big" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000"#,
        ),
        (
            class("system-mine", 1, json!({})),
            r#"PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"#,
        ),
        (
            class("p", 1, json!({"preemptionPolicy": "Sometimes"})),
            r#"PriorityClass.scheduling.k8s.io "p" is invalid: preemptionPolicy: Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never""#,
        ),
    ];
    for (pc, want) in cases {
        assert_eq!(refusal(classes.create(&pp, &pc).await), (422, want.to_string()));
    }
    classes.create(&pp, &class("c", 1, json!({}))).await.unwrap();
    let changed = classes.patch("c", &PatchParams::default(), &Patch::Merge(json!({"value": 2}))).await;
    let want = r#"PriorityClass.scheduling.k8s.io "c" is invalid: value: Forbidden: may not be changed in an update."#;
    assert_eq!(refusal(changed), (422, want.to_string()));
    let changed =
        classes.patch("c", &PatchParams::default(), &Patch::Merge(json!({"preemptionPolicy": "Never"}))).await;
    let want = r#"PriorityClass.scheduling.k8s.io "c" is invalid: preemptionPolicy: Invalid value: "Never": field is immutable"#;
    assert_eq!(refusal(changed), (422, want.to_string()));
}

#[tokio::test]
async fn discovery_lists_priority_classes_cluster_scoped_with_short_name_pc() {
    let h = harness(Transport::InProcess).await;
    let discovery = kube::Discovery::new(h.client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "priorityclasses")
        .expect("priorityclasses are discovered");
    assert_eq!(
        (ar.group.as_str(), ar.version.as_str(), ar.kind.as_str()),
        ("scheduling.k8s.io", "v1", "PriorityClass")
    );
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let list: Value =
        h.client.request(http::Request::get("/apis/scheduling.k8s.io/v1").body(vec![]).unwrap()).await.unwrap();
    let resource = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == "priorityclasses").unwrap();
    assert_eq!(resource["shortNames"], json!(["pc"]));
}
