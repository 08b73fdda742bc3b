//! Events expire a TTL after their last write, as kube-apiserver's `--event-ttl` (an etcd lease
//! per write): the server deletes them and watchers see DELETED.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use jobset_apiserver::persist::Memory;
use jobset_apiserver::store::StoreConfig;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const TTL: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(30);

fn server(event_ttl: Duration) -> Arc<ApiServer> {
    let config = ServerConfig {
        store: StoreConfig { event_ttl, ..StoreConfig::default() },
        // Far later than the TTL: expiry does not wait for the garbage collector's tick.
        gc_interval: Duration::from_secs(3600),
        ..ServerConfig::default()
    };
    ApiServer::new(Box::new(Memory), Admission::default(), config).expect("server starts")
}

fn event(name: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started", "message": "started", "type": "Normal"
    }))
    .expect("an Event")
}

#[tokio::test]
async fn an_event_is_deleted_a_ttl_after_its_last_write_and_watchers_see_it_go() {
    let server = server(TTL);
    let _gc = server.spawn_gc();
    let api: Api<Event> = Api::namespaced(server.client(), "default");
    let first = api.create(&PostParams::default(), &event("first")).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    api.create(&PostParams::default(), &event("second")).await.unwrap();
    // Written again after "second": its TTL starts over, so it goes last although created first.
    api.patch("first", &PatchParams::default(), &Patch::Merge(json!({"count": 2}))).await.unwrap();
    let rewritten = Instant::now();
    let mut events = api.watch(&WatchParams::default().timeout(290), &rv).await.unwrap().boxed();
    let mut deleted = vec![];
    tokio::time::timeout(TIMEOUT, async {
        while deleted.len() < 2 {
            if let Some(WatchEvent::Deleted(e)) = events.try_next().await.unwrap() {
                deleted.push(e.metadata.name.unwrap());
            }
        }
    })
    .await
    .expect("both Events expire");
    assert!(rewritten.elapsed() >= TTL, "deleted {:?} after the last write, before the TTL", rewritten.elapsed());
    assert_eq!(deleted, ["second", "first"], "in the order of their last writes");
    assert!(api.list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn events_through_events_k8s_io_expire_too() {
    let server = server(TTL);
    let _gc = server.spawn_gc();
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(server.client(), "default");
    let e = serde_json::from_value(json!({
        "metadata": {"name": "e", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c", "reportingInstance": "i",
        "action": "Sync", "reason": "Synced", "type": "Normal", "regarding": {"kind": "Pod", "name": "p"}
    }))
    .unwrap();
    let created = v1.create(&PostParams::default(), &e).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let core: Api<Event> = Api::namespaced(server.client(), "default");
    let mut events = core.watch(&WatchParams::default().timeout(290), &rv).await.unwrap().boxed();
    let gone = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Some(WatchEvent::Deleted(e)) = events.try_next().await.unwrap() {
                return e.metadata.name.unwrap();
            }
        }
    })
    .await
    .expect("the Event expires");
    assert_eq!(gone, "e");
}

#[tokio::test]
async fn with_a_ttl_of_zero_events_are_kept_and_other_kinds_never_expire() {
    let kept = server(Duration::ZERO);
    assert_eq!(kept.store.next_event_expiry(), None, "zero: no expiry, as kube-apiserver's");
    let server = server(TTL);
    let api: Api<Event> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &event("e")).await.unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(server.client(), "default");
    let cm = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let due = server.store.next_event_expiry().expect("the Event's deadline");
    assert_eq!(server.store.expire_events(due - Duration::from_millis(1)).unwrap(), 0, "not due yet");
    assert!(api.get_opt("e").await.unwrap().is_some());
    assert_eq!(server.store.expire_events(due + Duration::from_secs(3600)).unwrap(), 1);
    assert!(api.get_opt("e").await.unwrap().is_none());
    assert!(cms.get_opt("c").await.unwrap().is_some(), "only Events have a TTL");
}
