//! kube-runtime's watcher, reflector, Controller (with `owns`), finalizer helper and event
//! Recorder, unmodified, against the embedded server; plus admission hooks and slow watchers.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Transport, fast_config, harness, harness_with, next_matching};
use futures::StreamExt;
use jobset_apiserver::{Admission, AdmissionHook, Cause, Lookup};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_relists_after_the_history_is_compacted() {
    // A tiny history: a watch resuming from an old resourceVersion gets 410 and must relist.
    let mut config = fast_config();
    config.store.watch_history = 2;
    config.store.watch_buffer = config_buffer();
    let h = harness_with(Transport::InProcess, config, Admission::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let first = api.create(&PostParams::default(), &cm("old")).await.unwrap();
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("fill{i}"))).await.unwrap();
    }
    let mut raw =
        api.watch(&WatchParams::default(), first.metadata.resource_version.as_deref().unwrap()).await.unwrap().boxed();
    let ev = next_matching(&mut raw, "ERROR", |_| true).await;
    assert!(matches!(ev, Ok(WatchEvent::Error(ref e)) if e.code == 410), "{ev:?}");

    // kube's watcher, falling behind while its stream is not polled, is sent a 410, relists, and keeps going.
    let mut w = watcher(api.clone(), watcher::Config::default()).boxed();
    next_matching(&mut w, "InitDone", |e| matches!(e, Ok(watcher::Event::InitDone))).await.unwrap();
    for i in 0..(config_buffer() * 4) {
        api.create(&PostParams::default(), &cm(&format!("more{i}"))).await.unwrap();
    }
    api.create(&PostParams::default(), &cm("last")).await.unwrap();
    next_matching(&mut w, "a relist", |e| matches!(e, Ok(watcher::Event::Init))).await.unwrap();
    next_matching(&mut w, "last", |e| matches!(e, Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) if o.metadata.name.as_deref() == Some("last")))
        .await
        .unwrap();
}

fn config_buffer() -> usize {
    8
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_listed_version_of_a_never_written_resource_is_not_expired() {
    let h = harness(Transport::InProcess).await;
    let secrets: Api<Secret> = Api::default_namespaced(h.client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let listed = secrets.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();
    // Another resource's writes move the global resourceVersion on.
    cms.create(&PostParams::default(), &cm("other")).await.unwrap();
    let mut w = secrets.watch(&WatchParams::default(), &listed).await.unwrap().boxed();
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let ev = next_matching(&mut w, "an event", |_| true).await;
    assert!(matches!(ev, Ok(WatchEvent::Added(_))), "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_never_blocks_writers_and_is_told_to_relist() {
    let mut config = fast_config();
    config.store.watch_buffer = 8;
    let h = harness_with(Transport::InProcess, config, Admission::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let start = h.server.store.current_rv().to_string();
    // Opened, never read while the writes happen.
    let mut slow = api.watch(&WatchParams::default(), &start).await.unwrap().boxed();
    let writes = async {
        for i in 0..200 {
            api.create(&PostParams::default(), &cm(&format!("c{i}"))).await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), writes).await.expect("writers were blocked by a slow watcher");
    let ev = next_matching(&mut slow, "ERROR 410", |e| matches!(e, Ok(WatchEvent::Error(_)))).await;
    assert!(matches!(ev, Ok(WatchEvent::Error(ref e)) if e.code == 410), "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_store_follows_the_server() {
    let h = harness(Transport::Https).await;
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    api.create(&PostParams::default(), &cm("r1")).await.unwrap();
    api.create(&PostParams::default(), &cm("r2")).await.unwrap();
    api.delete("r1", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let names: Vec<String> = reader.state().iter().filter_map(|o| o.metadata.name.clone()).collect();
            if names == ["r2"] {
                return;
            }
            reader.wait_until_ready().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("reflector store converged to [r2]");
    task.abort();
}

const FINALIZER: &str = "test.jobset.x-k8s.io/cleanup";

struct Ctx {
    client: kube::Client,
    recorder: Recorder,
    cleanups: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(String);

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<ConfigMap> = Api::default_namespaced(ctx.client.clone());
    finalizer(&api, FINALIZER, cm, |ev| async {
        match ev {
            Finalizer::Apply(cm) => {
                let name = cm.metadata.name.clone().unwrap();
                let secrets: Api<Secret> = Api::default_namespaced(ctx.client.clone());
                let child: Secret = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-child"), "ownerReferences": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": cm.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
                    "stringData": {"x": "y"}
                }))
                .unwrap();
                secrets
                    .patch(&format!("{name}-child"), &PatchParams::apply("test").force(), &Patch::Apply(child))
                    .await
                    .map_err(|e| Error(e.to_string()))?;
                let reference = kube::Resource::object_ref(cm.as_ref(), &());
                ctx.recorder
                    .publish(&KubeEvent { type_: EventType::Normal, reason: "Reconciled".into(), note: Some("child applied".into()), action: "Reconcile".into(), secondary: None }, &reference)
                    .await
                    .map_err(|e| Error(e.to_string()))?;
                Ok::<_, Error>(Action::await_change())
            }
            Finalizer::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error(e.to_string()))
}

fn error_policy(_: Arc<ConfigMap>, _: &Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_with_owns_finalizer_and_recorder_runs_unmodified() {
    let h = harness(Transport::InProcess).await;
    let client = h.client.clone();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), Reporter { controller: "test-controller".into(), instance: None }),
        cleanups: AtomicUsize::new(0),
    });
    let reconciled = Arc::new(AtomicUsize::new(0));
    let counter = reconciled.clone();
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .owns(secrets.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(move |r| {
            if r.is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            async {}
        });
    let task = tokio::spawn(controller);

    let created = cms.create(&PostParams::default(), &cm("owner")).await.unwrap();
    let mut w = secrets.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    next_matching(
        &mut w,
        "child secret",
        |e| matches!(e, Ok(WatchEvent::Added(s)) if s.metadata.name.as_deref() == Some("owner-child")),
    )
    .await
    .unwrap();
    let with_finalizer = cms.get("owner").await.unwrap();
    assert_eq!(with_finalizer.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
    assert_eq!(with_finalizer.metadata.uid, created.metadata.uid);

    // Deleting a child triggers the owner's reconcile through `owns`, which re-applies it.
    secrets.delete("owner-child", &DeleteParams::default()).await.unwrap();
    next_matching(
        &mut w,
        "child re-created",
        |e| matches!(e, Ok(WatchEvent::Added(s)) if s.metadata.name.as_deref() == Some("owner-child")),
    )
    .await
    .unwrap();

    // The recorder's events.k8s.io Event exists.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client.clone());
    let evs = events.list(&Default::default()).await.unwrap();
    assert!(evs.items.iter().any(|e| e.reason.as_deref() == Some("Reconciled")), "{:?}", evs.items);
    // ... and is the same object kubectl describe finds as a core/v1 Event of the owner.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client.clone());
    let selector = format!(
        "involvedObject.name=owner,involvedObject.kind=ConfigMap,involvedObject.uid={}",
        created.metadata.uid.clone().unwrap()
    );
    let described = core.list(&kube::api::ListParams::default().fields(&selector)).await.unwrap();
    let e =
        described.items.iter().find(|e| e.reason.as_deref() == Some("Reconciled")).expect("core/v1 view of the event");
    assert_eq!(e.message.as_deref(), Some("child applied"));
    assert_eq!(e.reporting_component.as_deref(), Some("test-controller"));
    let by_regarding = events.list(&kube::api::ListParams::default().fields("regarding.name=owner")).await.unwrap();
    assert!(!by_regarding.items.is_empty(), "events.k8s.io field selectors use their own names");

    // Deleting the owner runs cleanup, removes the finalizer, and the object goes.
    let mut ow = cms.watch(&WatchParams::default().fields("metadata.name=owner"), "0").await.unwrap().boxed();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    next_matching(&mut ow, "owner DELETED", |e| matches!(e, Ok(WatchEvent::Deleted(_)))).await.unwrap();
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    assert!(secrets.get_opt("owner-child").await.unwrap().is_none(), "background GC removed the child");
    assert!(reconciled.load(Ordering::SeqCst) >= 2);
    task.abort();
}

struct RequireTeam;

impl AdmissionHook for RequireTeam {
    fn default(&self, obj: &mut serde_json::Value, _old: Option<&serde_json::Value>) {
        let data = obj.get_mut("data").and_then(|d| d.as_object_mut());
        if let Some(d) = data {
            d.entry("defaulted").or_insert(json!("yes"));
        }
    }
    fn validate(&self, obj: &serde_json::Value, _old: Option<&serde_json::Value>, _: &dyn Lookup) -> Vec<Cause> {
        match obj.pointer("/metadata/labels/team") {
            Some(_) => vec![],
            None => vec![Cause::required("metadata.labels.team")],
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_hooks_default_and_reject_with_field_causes() {
    let mut admission = Admission::default();
    admission.register("", "ConfigMap", Arc::new(RequireTeam));
    let h = harness_with(Transport::InProcess, fast_config(), admission).await;
    let api: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let err = api.create(&PostParams::default(), &cm("x")).await.unwrap_err();
    let kube::Error::Api(s) = err else { panic!("{err:?}") };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(s.message, "ConfigMap \"x\" is invalid: metadata.labels.team: Required value");
    let raw = h
        .client
        .request_text(
            http::Request::post("/api/v1/namespaces/default/configmaps")
                .body(serde_json::to_vec(&cm("x")).unwrap())
                .unwrap(),
        )
        .await;
    let status: serde_json::Value = serde_json::from_str(&match raw {
        Err(kube::Error::Api(s)) => serde_json::to_string(&*s).unwrap(),
        other => panic!("{other:?}"),
    })
    .unwrap();
    assert_eq!(status["details"]["causes"][0]["field"], "metadata.labels.team", "{status}");
    let mut ok = cm("y");
    ok.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    let created = api.create(&PostParams::default(), &ok).await.unwrap();
    assert_eq!(created.data.unwrap()["defaulted"], "yes");
}
