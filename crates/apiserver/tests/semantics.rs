//! Storage and API semantics, driven through `kube::Client` in-process and over HTTPS.

mod common;

use common::{Harness, next_matching};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})).unwrap()
}

fn jobset_api(client: &kube::Client) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets");
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn jobset(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}}}}]}
    }))
    .unwrap()
}

fn rv(o: &impl kube::Resource) -> u64 {
    o.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

async fn create_fills_server_metadata_and_resource_versions_increase(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let a = api.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    let b = api.create(&PostParams::default(), &cm("b", json!({}))).await.unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_eq!(a.metadata.generation, Some(1));
    assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
    assert!(rv(&b) > rv(&a));
    let err = api.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"), "{err:?}");
}

async fn generate_name_gives_unique_names(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let mut o = cm("", json!({}));
    o.metadata.name = None;
    o.metadata.generate_name = Some("gen-".into());
    let x = api.create(&PostParams::default(), &o).await.unwrap();
    let y = api.create(&PostParams::default(), &o).await.unwrap();
    let (xn, yn) = (x.metadata.name.unwrap(), y.metadata.name.unwrap());
    assert!(xn.starts_with("gen-") && xn.len() == 9, "{xn}");
    assert_ne!(xn, yn);
}

async fn stale_resource_version_update_is_a_conflict(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let first = api.create(&PostParams::default(), &cm("c", json!({}))).await.unwrap();
    let mut newer = first.clone();
    newer.data = Some([("k".to_string(), "v2".to_string())].into());
    api.replace("c", &PostParams::default(), &newer).await.unwrap();
    let mut stale = first.clone();
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let err = api.replace("c", &PostParams::default(), &stale).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(s.message.contains("the object has been modified"), "{}", s.message);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["k"], "v2");
}

async fn generation_bumps_on_spec_change_only(h: Harness) {
    let api = jobset_api(&h.client);
    let js = api.create(&PostParams::default(), &jobset("g")).await.unwrap();
    assert_eq!(js.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let labeled = api.patch("g", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    assert_eq!(labeled.metadata.generation, Some(1), "metadata-only change");
    let status = api.patch_status("g", &pp, &Patch::Merge(json!({"status": {"restarts": 1}}))).await.unwrap();
    assert_eq!(status.metadata.generation, Some(1), "status-only change");
    let spec = api.patch("g", &pp, &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
    // A patch that changes nothing writes nothing: same resourceVersion.
    let again = api.patch("g", &pp, &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    assert_eq!(again.metadata.resource_version, spec.metadata.resource_version);
}

async fn status_subresource_is_isolated(h: Harness) {
    let api = jobset_api(&h.client);
    api.create(&PostParams::default(), &jobset("s")).await.unwrap();
    let pp = PatchParams::default();
    // Writes to the object ignore .status ...
    let o = api
        .patch("s", &pp, &Patch::Merge(json!({"spec": {"suspend": true}, "status": {"restarts": 5}})))
        .await
        .unwrap();
    assert!(o.data.get("status").is_none(), "{:?}", o.data);
    // ... and writes to /status ignore everything else.
    let o = api
        .patch_status("s", &pp, &Patch::Merge(json!({"spec": {"suspend": false}, "status": {"restarts": 2}})))
        .await
        .unwrap();
    assert_eq!(o.data["status"]["restarts"], 2);
    assert_eq!(o.data["spec"]["suspend"], true);
    let mut replaced = api.get("s").await.unwrap();
    replaced.data["status"] = json!({"restarts": 9});
    replaced.data["spec"]["suspend"] = json!(false);
    let o = api.replace("s", &PostParams::default(), &replaced).await.unwrap();
    assert_eq!((o.data["status"]["restarts"].clone(), o.data["spec"]["suspend"].clone()), (json!(2), json!(false)));
}

async fn json_patch_test_of_a_missing_path_against_null_succeeds(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    api.create(&PostParams::default(), &cm("j", json!({}))).await.unwrap();
    // What kube-runtime's finalizer helper sends for an object without finalizers.
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/f"]}
    ]))
    .unwrap();
    let o = api.patch("j", &PatchParams::default(), &Patch::Json::<()>(p)).await.unwrap();
    assert_eq!(o.metadata.finalizers, Some(vec!["example.com/f".to_string()]));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "other"}])).unwrap();
    let err = api.patch("j", &PatchParams::default(), &Patch::Json::<()>(failing)).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 422), "{err:?}");
}

async fn server_side_apply_creates_then_merges(h: Harness) {
    let api = jobset_api(&h.client);
    let pp = PatchParams::apply("test").force();
    let created = api.patch("ssa", &pp, &Patch::Apply(jobset("ssa"))).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let mut changed = jobset("ssa");
    changed.data["spec"]["suspend"] = json!(true);
    let o = api.patch("ssa", &pp, &Patch::Apply(changed)).await.unwrap();
    assert_eq!(o.data["spec"]["suspend"], true);
    assert_eq!(o.metadata.uid, created.metadata.uid);
}

async fn strategic_merge_patch_merges_containers_by_name_and_is_415_for_custom_resources(h: Harness) {
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "one"}, {"name": "b", "image": "two"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "b", "image": "three"}]}})),
        )
        .await
        .unwrap();
    let images: Vec<_> = patched.spec.unwrap().containers.into_iter().map(|c| (c.name, c.image.unwrap())).collect();
    assert_eq!(images, [("a".to_string(), "one".to_string()), ("b".to_string(), "three".to_string())]);
    let api = jobset_api(&h.client);
    api.create(&PostParams::default(), &jobset("smp")).await.unwrap();
    let err = api.patch("smp", &PatchParams::default(), &Patch::Strategic(json!({"spec": {}}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 415 && s.reason == "UnsupportedMediaType"), "{err:?}");
}

async fn list_filters_by_label_and_field_selectors_and_pages(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    for (n, app, tier) in [("l1", "a", "web"), ("l2", "a", "db"), ("l3", "b", "web"), ("l4", "c", "")] {
        let labels = if tier.is_empty() { json!({"app": app}) } else { json!({"app": app, "tier": tier}) };
        api.create(&PostParams::default(), &cm(n, labels)).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items.into_iter().filter_map(|o| o.metadata.name).collect()
    };
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(api.list(&q("app=a")).await.unwrap()), ["l1", "l2"]);
    assert_eq!(names(api.list(&q("app!=a")).await.unwrap()), ["l3", "l4"]);
    assert_eq!(names(api.list(&q("app in (b,c)")).await.unwrap()), ["l3", "l4"]);
    assert_eq!(names(api.list(&q("app notin (a),tier")).await.unwrap()), ["l3"]);
    assert_eq!(names(api.list(&q("!tier")).await.unwrap()), ["l4"]);
    assert_eq!(names(api.list(&ListParams::default().fields("metadata.name=l2")).await.unwrap()), ["l2"]);
    assert_eq!(
        names(api.list(&ListParams::default().fields("metadata.name!=l2").labels("app=a")).await.unwrap()),
        ["l1"]
    );
    // Paging: limit + continue walks every object exactly once.
    let mut seen = vec![];
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = api.list(&lp).await.unwrap();
        let cont = page.metadata.continue_.clone();
        seen.extend(names(page));
        match cont {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen, ["l1", "l2", "l3", "l4"]);
    // All namespaces: objects of another namespace show up too.
    let nss: Api<Namespace> = Api::all(h.client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap())
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(h.client.clone(), "other")
        .create(&PostParams::default(), &cm("l5", json!({"app": "a"})))
        .await
        .unwrap();
    let all: Api<ConfigMap> = Api::all(h.client.clone());
    assert_eq!(names(all.list(&q("app=a")).await.unwrap()), ["l1", "l2", "l5"]);
}

async fn pod_field_selectors_on_node_and_phase(h: Harness) {
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    for n in ["p1", "p2"] {
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": n}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}});
    let req = http::Request::post("/api/v1/namespaces/default/pods/p1/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    let status: serde_json::Value = h.client.request(req).await.unwrap();
    assert_eq!(status["status"], "Success");
    pods.patch_status("p2", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items.into_iter().filter_map(|o| o.metadata.name).collect()
    };
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=n1")).await.unwrap()), ["p1"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("status.phase=Running")).await.unwrap()), ["p2"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=")).await.unwrap()), ["p2"]);
    let bound = pods.get("p1").await.unwrap();
    let scheduled = bound.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(scheduled.status, "True");
}

async fn watch_from_zero_replays_state_then_streams_changes(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    api.create(&PostParams::default(), &cm("w1", json!({}))).await.unwrap();
    let mut w = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = next_matching(&mut w, "synthetic ADDED", |e| matches!(e, Ok(WatchEvent::Added(_)))).await;
    let Ok(WatchEvent::Added(o)) = first else { unreachable!() };
    assert_eq!(o.metadata.name.as_deref(), Some("w1"));
    api.create(&PostParams::default(), &cm("w2", json!({}))).await.unwrap();
    let ev = next_matching(
        &mut w,
        "ADDED w2",
        |e| matches!(e, Ok(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("w2")),
    )
    .await;
    drop(ev);
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let ev = next_matching(&mut w, "DELETED w1", |e| matches!(e, Ok(WatchEvent::Deleted(_)))).await;
    let Ok(WatchEvent::Deleted(d)) = ev else { unreachable!() };
    assert_eq!(d.metadata.name.as_deref(), Some("w1"));
    assert!(d.metadata.resource_version.is_some());
}

async fn watch_from_a_resource_version_sends_only_later_events(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let a = api.create(&PostParams::default(), &cm("r1", json!({}))).await.unwrap();
    api.create(&PostParams::default(), &cm("r2", json!({}))).await.unwrap();
    let mut w = api.watch(&WatchParams::default(), &rv(&a).to_string()).await.unwrap().boxed();
    let ev = next_matching(&mut w, "an event", |_| true).await;
    assert!(matches!(ev, Ok(WatchEvent::Added(ref o)) if o.metadata.name.as_deref() == Some("r2")), "{ev:?}");
}

async fn watch_sends_bookmarks_and_honours_label_selectors(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let mut w = api
        .watch(
            &{
                let mut p = WatchParams::default().labels("app=x");
                p.bookmarks = true;
                p
            },
            "0",
        )
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("other", json!({"app": "y"}))).await.unwrap();
    api.create(&PostParams::default(), &cm("mine", json!({"app": "x"}))).await.unwrap();
    let ev = next_matching(&mut w, "a non-bookmark event", |e| !matches!(e, Ok(WatchEvent::Bookmark(_)))).await;
    assert!(matches!(ev, Ok(WatchEvent::Added(ref o)) if o.metadata.name.as_deref() == Some("mine")), "{ev:?}");
    // Relabelling out of the selector is a DELETED for this watcher.
    api.patch("mine", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "z"}}})))
        .await
        .unwrap();
    let ev = next_matching(&mut w, "DELETED", |e| !matches!(e, Ok(WatchEvent::Bookmark(_)))).await;
    assert!(matches!(ev, Ok(WatchEvent::Deleted(_))), "{ev:?}");
    next_matching(&mut w, "BOOKMARK", |e| matches!(e, Ok(WatchEvent::Bookmark(_)))).await.unwrap();
}

async fn watch_ends_after_timeout_seconds(h: Harness) {
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let mut w = api.watch(&WatchParams::default().timeout(1), "0").await.unwrap().boxed();
    let end =
        tokio::time::timeout(std::time::Duration::from_secs(10), async { while w.next().await.is_some() {} }).await;
    assert!(end.is_ok(), "watch did not end after timeoutSeconds");
}

async fn foreground_delete_removes_dependents_first(h: Harness) {
    let api = jobset_api(&h.client);
    let owner = api.create(&PostParams::default(), &jobset("fg")).await.unwrap();
    let oref = json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "fg",
                       "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let mut child = cm("fg-child", json!({}));
    child.metadata.owner_references = Some(serde_json::from_value(oref).unwrap());
    // The child has a finalizer, so the owner must wait for it.
    child.metadata.finalizers = Some(vec!["test/hold".into()]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    let mut w =
        api.watch(&WatchParams::default().fields("metadata.name=fg"), &rv(&owner).to_string()).await.unwrap().boxed();
    api.delete("fg", &DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..Default::default() })
        .await
        .unwrap();
    let o = api.get("fg").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));
    let c = cms.get("fg-child").await.unwrap();
    assert!(c.metadata.deletion_timestamp.is_some(), "dependent is being deleted");
    cms.patch("fg-child", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    next_matching(&mut w, "owner DELETED", |e| matches!(e, Ok(WatchEvent::Deleted(_)))).await.unwrap();
    assert!(cms.get_opt("fg-child").await.unwrap().is_none());
    assert!(api.get_opt("fg").await.unwrap().is_none());
}

async fn background_and_orphan_propagation(h: Harness) {
    let api = jobset_api(&h.client);
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    for (owner, policy) in [("bg", PropagationPolicy::Background), ("or", PropagationPolicy::Orphan)] {
        let o = api.create(&PostParams::default(), &jobset(owner)).await.unwrap();
        let mut child = cm(&format!("{owner}-child"), json!({}));
        child.metadata.owner_references = Some(
            serde_json::from_value(json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": owner, "uid": o.metadata.uid}]))
                .unwrap(),
        );
        cms.create(&PostParams::default(), &child).await.unwrap();
        api.delete(owner, &DeleteParams { propagation_policy: Some(policy), ..Default::default() }).await.unwrap();
        assert!(api.get_opt(owner).await.unwrap().is_none());
    }
    assert!(cms.get_opt("bg-child").await.unwrap().is_none(), "background deletes dependents");
    let orphan = cms.get("or-child").await.unwrap();
    assert!(orphan.metadata.owner_references.unwrap_or_default().is_empty(), "orphan drops the owner reference");
}

async fn garbage_collector_deletes_dependents_of_missing_owners(h: Harness) {
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let mut child = cm("dangling", json!({}));
    child.metadata.owner_references = Some(
        serde_json::from_value(
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "no-such-uid"}]),
        )
        .unwrap(),
    );
    let c = cms.create(&PostParams::default(), &child).await.unwrap();
    let _gc = h.server.spawn_gc();
    let mut w =
        cms.watch(&WatchParams::default().fields("metadata.name=dangling"), &rv(&c).to_string()).await.unwrap().boxed();
    next_matching(&mut w, "DELETED by the garbage collector", |e| matches!(e, Ok(WatchEvent::Deleted(_))))
        .await
        .unwrap();
}

async fn bound_pod_stays_terminating_until_force_deleted(h: Harness) {
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "t"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.delete("t", &DeleteParams::default()).await.unwrap();
    let p = pods.get("t").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("t", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert!(pods.get_opt("t").await.unwrap().is_none());
    // An unbound pod goes at once.
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "u"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("u").await.unwrap().is_none());
}

async fn creating_a_crd_serves_its_kind_with_status(h: Harness) {
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds: Api<DynamicObject> = Api::all_with(
        h.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), "default", &ar);
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}, "status": {"ok": true}})).unwrap();
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert!(created.data.get("status").is_none(), "status is not set on create");
    let s = widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(json!({"status": {"ok": true}})))
        .await
        .unwrap();
    assert_eq!(s.data["status"]["ok"], true);
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    let err = widgets.get("w").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");
}

async fn deleting_a_namespace_deletes_its_content(h: Harness) {
    let nss: Api<Namespace> = Api::all(h.client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "gone"}})).unwrap())
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), "gone");
    cms.create(&PostParams::default(), &cm("x", json!({}))).await.unwrap();
    nss.delete("gone", &DeleteParams::default()).await.unwrap();
    assert!(nss.get_opt("gone").await.unwrap().is_none());
    assert!(cms.get_opt("x").await.unwrap().is_none());
    let err = cms.create(&PostParams::default(), &cm("y", json!({}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");
    let err = nss.delete("default", &DeleteParams::default()).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403), "{err:?}");
}

both_transports!(
    create_fills_server_metadata_and_resource_versions_increase,
    generate_name_gives_unique_names,
    stale_resource_version_update_is_a_conflict,
    generation_bumps_on_spec_change_only,
    status_subresource_is_isolated,
    json_patch_test_of_a_missing_path_against_null_succeeds,
    server_side_apply_creates_then_merges,
    strategic_merge_patch_merges_containers_by_name_and_is_415_for_custom_resources,
    list_filters_by_label_and_field_selectors_and_pages,
    pod_field_selectors_on_node_and_phase,
    watch_from_zero_replays_state_then_streams_changes,
    watch_from_a_resource_version_sends_only_later_events,
    watch_sends_bookmarks_and_honours_label_selectors,
    watch_ends_after_timeout_seconds,
    foreground_delete_removes_dependents_first,
    background_and_orphan_propagation,
    garbage_collector_deletes_dependents_of_missing_owners,
    bound_pod_stays_terminating_until_force_deleted,
    creating_a_crd_serves_its_kind_with_status,
    deleting_a_namespace_deletes_its_content,
);
