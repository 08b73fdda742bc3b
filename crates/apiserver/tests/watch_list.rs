//! Streaming lists ("watch-list", KEP-3157) and `resourceVersionMatch`, as kube-apiserver serves
//! them: `validation.ValidateListOptions` word for word, the initial events of a watch with
//! `sendInitialEvents=true` ending in the `k8s.io/initial-events-end` bookmark, and lists at
//! exact or minimum resourceVersions.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use futures::StreamExt;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use jobset_apiserver::persist::Memory;
use jobset_apiserver::store::StoreConfig;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tower::ServiceExt;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const TIMEOUT: Duration = Duration::from_secs(10);
/// A watch-list's query, before its resourceVersion.
const WATCH_LIST: &str = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

fn server_with(config: ServerConfig) -> Arc<ApiServer> {
    ApiServer::new(Box::new(Memory), Admission::default(), config).expect("server starts")
}

fn server() -> Arc<ApiServer> {
    server_with(ServerConfig::default())
}

async fn get(server: &Arc<ApiServer>, uri: &str) -> (StatusCode, Value) {
    let req = Request::get(uri).body(Body::empty()).unwrap();
    let resp = tokio::time::timeout(TIMEOUT, server.router().oneshot(req)).await.expect("answered").unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{uri}: not JSON ({e})")))
}

/// Creates ConfigMaps `name` with label `app`, in order.
async fn create(server: &Arc<ApiServer>, maps: &[(&str, &str)]) {
    let api = Api::<ConfigMap>::namespaced(server.client(), "default");
    for (name, app) in maps {
        let cm = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

async fn touch(server: &Arc<ApiServer>, name: &str, value: &str) {
    let api = Api::<ConfigMap>::namespaced(server.client(), "default");
    api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"data": {"k": value}}))).await.unwrap();
}

/// A watch's events, read line by line.
struct Watch {
    body: axum::body::BodyDataStream,
    buf: Vec<u8>,
}

impl Watch {
    async fn open(server: &Arc<ApiServer>, query: &str) -> Watch {
        let req = Request::get(format!("{CONFIGMAPS}?{query}")).body(Body::empty()).unwrap();
        let resp = server.router().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{query}");
        Watch { body: resp.into_body().into_data_stream(), buf: vec![] }
    }

    async fn next(&mut self) -> Value {
        let read = async {
            loop {
                if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=i).collect();
                    return serde_json::from_slice::<Value>(&line).unwrap();
                }
                let chunk = self.body.next().await.expect("the watch goes on").unwrap();
                self.buf.extend_from_slice(&chunk);
            }
        };
        tokio::time::timeout(TIMEOUT, read).await.expect("a watch event in time")
    }

    /// (type, name or the bookmark's resourceVersion) of the events up to and including the
    /// first whose type is `last`.
    async fn until(&mut self, last: &str) -> Vec<(String, String)> {
        let mut out = vec![];
        loop {
            let ev = self.next().await;
            let kind = ev["type"].as_str().unwrap().to_string();
            let what = match kind.as_str() {
                "BOOKMARK" => format!("rv {}", ev["object"]["metadata"]["resourceVersion"].as_str().unwrap()),
                "ERROR" => ev["object"]["message"].as_str().unwrap_or_default().to_string(),
                _ => ev["object"]["metadata"]["name"].as_str().unwrap().to_string(),
            };
            let done = kind == last;
            out.push((kind, what));
            if done {
                return out;
            }
        }
    }
}

fn events(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, w)| (k.to_string(), w.to_string())).collect()
}

#[tokio::test]
async fn list_and_watch_options_are_refused_with_kube_apiservers_messages() {
    let s = server();
    create(&s, &[("a", "x"), ("b", "x")]).await;
    let (_, page) = get(&s, &format!("{CONFIGMAPS}?limit=1")).await;
    let token = page["metadata"]["continue"].as_str().expect("a second page").to_string();
    let invalid = |summary: &str| format!("ListOptions.meta.k8s.io \"\" is invalid: {summary}");
    #[rustfmt::skip]
    let cases: Vec<(&str, String, u16, String)> = vec![
        ("watch: sendInitialEvents without resourceVersionMatch",
         "watch=true&sendInitialEvents=true&allowWatchBookmarks=true".into(), 422,
         invalid("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")),
        ("watch: sendInitialEvents=false still requires NotOlderThan",
         "watch=true&sendInitialEvents=false".into(), 422,
         invalid("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")),
        ("watch: resourceVersionMatch without sendInitialEvents",
         "watch=true&resourceVersion=3&resourceVersionMatch=NotOlderThan".into(), 422,
         invalid("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")),
        ("watch: Exact with sendInitialEvents",
         "watch=true&sendInitialEvents=true&resourceVersionMatch=Exact".into(), 422,
         invalid("[resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]")),
        ("watch: Exact alone",
         "watch=true&resourceVersionMatch=Exact".into(), 422,
         invalid("[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]")),
        ("watch: with continue",
         format!("{WATCH_LIST}&continue={token}"), 422,
         invalid("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided")),
        ("list: resourceVersionMatch without resourceVersion",
         "resourceVersionMatch=NotOlderThan".into(), 422,
         invalid("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")),
        ("list: Exact at 0",
         "resourceVersion=0&resourceVersionMatch=Exact".into(), 422,
         invalid("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")),
        ("list: an unknown match",
         "resourceVersion=2&resourceVersionMatch=Newest".into(), 422,
         invalid("resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\"")),
        ("list: with continue",
         format!("resourceVersion=2&resourceVersionMatch=Exact&continue={token}"), 422,
         invalid("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided")),
        ("list: sendInitialEvents",
         "sendInitialEvents=true".into(), 422,
         invalid("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list")),
        ("list: every mistake at once",
         "resourceVersionMatch=NotOlderThan&sendInitialEvents=false".into(), 422,
         invalid("[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]")),
        ("list: a resourceVersion with continue (storage.ValidateListOptions)",
         format!("resourceVersion=2&continue={token}"), 400,
         "specifying resource version is not allowed when using continue".into()),
    ];
    for (name, query, code, message) in cases {
        let (status, v) = get(&s, &format!("{CONFIGMAPS}?{query}")).await;
        assert_eq!((status.as_u16(), v["code"].as_u64()), (code, Some(code as u64)), "{name}: {v}");
        assert_eq!(v["message"], message, "{name}");
        if code == 422 {
            assert_eq!(v["reason"], "Invalid", "{name}");
            assert_eq!(v["details"]["group"], "meta.k8s.io", "{name}");
            assert_eq!(v["details"]["kind"], "ListOptions", "{name}");
            assert!(v["details"]["causes"].as_array().is_some_and(|c| !c.is_empty()), "{name}: {v}");
        }
    }
    // A valid watch-list and valid lists are served.
    let (status, _) = get(&s, &format!("{CONFIGMAPS}?resourceVersion=2&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn without_the_watch_list_feature_gate_send_initial_events_is_refused() {
    let s = server_with(ServerConfig { watch_list: false, ..ServerConfig::default() });
    let (status, v) = get(&s, &format!("{CONFIGMAPS}?{WATCH_LIST}")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        v["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    );
    assert_eq!(v["details"]["causes"][0]["field"], "sendInitialEvents");
}

#[tokio::test]
async fn a_watch_list_sends_the_matching_objects_then_the_initial_events_end_bookmark_then_changes() {
    let s = server();
    create(&s, &[("a", "x"), ("b", "y"), ("c", "x")]).await;
    let rv = s.store.current_rv().to_string();
    let mut w = Watch::open(&s, &format!("{WATCH_LIST}&labelSelector=app%3Dx")).await;
    let initial = w.until("BOOKMARK").await;
    assert_eq!(initial, events(&[("ADDED", "a"), ("ADDED", "c"), ("BOOKMARK", &format!("rv {rv}"))]));
    touch(&s, "b", "1").await;
    touch(&s, "c", "1").await;
    assert_eq!(w.until("MODIFIED").await, events(&[("MODIFIED", "c")]), "changes after the snapshot, filtered");

    // The bookmark: an empty object of the kind, annotated.
    let mut w = Watch::open(&s, &format!("{WATCH_LIST}&fieldSelector=metadata.name%3Db")).await;
    let added = w.next().await;
    assert_eq!((added["type"].as_str(), added["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("b")));
    let bookmark = w.next().await;
    assert_eq!(
        bookmark,
        json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
            "resourceVersion": s.store.current_rv().to_string(),
            "annotations": {"k8s.io/initial-events-end": "true"}}}})
    );
}

#[tokio::test]
async fn a_watch_list_at_any_resource_version_serves_the_current_state_even_a_compacted_one() {
    // Two events of history: the first writes are compacted away.
    let s = server_with(ServerConfig {
        store: StoreConfig { watch_history: 2, ..Default::default() },
        resource_version_wait: Duration::from_millis(300),
        ..ServerConfig::default()
    });
    create(&s, &[("a", "x"), ("b", "x")]).await;
    let first = s.store.current_rv() - 1;
    for i in 0..4 {
        touch(&s, "a", &i.to_string()).await;
    }
    let now = s.store.current_rv();
    let snapshot = events(&[("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", &format!("rv {now}"))]);
    for rv in [String::new(), "0".into(), first.to_string(), now.to_string()] {
        let mut w = Watch::open(&s, &format!("{WATCH_LIST}&resourceVersion={rv}")).await;
        assert_eq!(w.until("BOOKMARK").await, snapshot, "resourceVersion {rv:?}");
    }
    // A plain watch from the compacted resourceVersion must relist.
    let mut w = Watch::open(&s, &format!("watch=true&resourceVersion={first}")).await;
    let gone = w.next().await;
    assert_eq!((gone["type"].as_str(), gone["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));

    // Newer than the store: the watch cache's wait, then its 504 as an ERROR event.
    let future = now + 5;
    let mut w = Watch::open(&s, &format!("{WATCH_LIST}&resourceVersion={future}")).await;
    let err = w.next().await;
    assert_eq!(err["type"], "ERROR");
    assert_eq!(
        err["object"],
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 504, "reason": "Timeout",
               "message": format!("Timeout: Too large resource version: {future}, current: {now}"),
               "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                           "retryAfterSeconds": 1}})
    );
}

#[tokio::test]
async fn a_watch_list_waits_for_a_resource_version_the_store_reaches_in_time() {
    let s = server_with(ServerConfig { resource_version_wait: Duration::from_secs(10), ..ServerConfig::default() });
    create(&s, &[("a", "x")]).await;
    let next = s.store.current_rv() + 1;
    let opened = tokio::spawn({
        let s = s.clone();
        async move { Watch::open(&s, &format!("{WATCH_LIST}&resourceVersion={next}")).await.until("BOOKMARK").await }
    });
    create(&s, &[("b", "x")]).await;
    let got = tokio::time::timeout(TIMEOUT, opened).await.unwrap().unwrap();
    assert_eq!(got, events(&[("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", &format!("rv {next}"))]));
}

#[tokio::test]
async fn send_initial_events_false_watches_from_now_or_from_the_given_resource_version() {
    let s = server();
    create(&s, &[("a", "x"), ("b", "x")]).await;
    let after_a = s.store.current_rv() - 1;
    for rv in ["", "0"] {
        let q = format!("watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion={rv}");
        let mut w = Watch::open(&s, &q).await;
        touch(&s, "a", rv).await;
        assert_eq!(w.until("MODIFIED").await, events(&[("MODIFIED", "a")]), "{rv:?}: no initial events");
    }
    let q = format!("watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion={after_a}");
    let mut w = Watch::open(&s, &q).await;
    assert_eq!(w.until("MODIFIED").await, events(&[("ADDED", "b"), ("MODIFIED", "a")]), "the history after it");
}

#[tokio::test]
async fn initial_events_end_with_a_bookmark_only_when_bookmarks_are_allowed() {
    for gate in [true, false] {
        let s = server_with(ServerConfig { watch_list: gate, ..ServerConfig::default() });
        create(&s, &[("a", "x")]).await;
        if gate {
            // A watch-list without bookmarks: the initial events, no bookmark.
            let q = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
            let mut w = Watch::open(&s, q).await;
            touch(&s, "a", "1").await;
            assert_eq!(w.until("MODIFIED").await, events(&[("ADDED", "a"), ("MODIFIED", "a")]));
        }
        // A legacy watch from "" or "0" is defaulted to a watch-list when the gate is on
        // (`SetListOptionsDefaults`): its initial events end with the bookmark.
        for rv in ["", "0"] {
            let end = format!("rv {}", s.store.current_rv());
            let mut w = Watch::open(&s, &format!("watch=true&allowWatchBookmarks=true&resourceVersion={rv}")).await;
            touch(&s, "a", &format!("{gate}{rv}")).await;
            let want = if gate {
                events(&[("ADDED", "a"), ("BOOKMARK", &end), ("MODIFIED", "a")])
            } else {
                events(&[("ADDED", "a"), ("MODIFIED", "a")])
            };
            assert_eq!(w.until("MODIFIED").await, want, "gate {gate}, resourceVersion {rv:?}");
        }
    }
}

#[tokio::test]
async fn lists_at_an_exact_or_minimum_resource_version() {
    let s = server_with(ServerConfig {
        store: StoreConfig { watch_history: 3, ..Default::default() },
        resource_version_wait: Duration::from_millis(200),
        ..ServerConfig::default()
    });
    create(&s, &[("a", "x")]).await;
    let only_a = s.store.current_rv();
    create(&s, &[("b", "y")]).await;
    touch(&s, "a", "1").await;
    let now = s.store.current_rv();
    let names = |v: &Value| -> Vec<(String, Value)> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), o["data"]["k"].clone()))
            .collect()
    };
    // Exact: the state then, with that resourceVersion.
    let (status, v) = get(&s, &format!("{CONFIGMAPS}?resourceVersion={only_a}&resourceVersionMatch=Exact")).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(names(&v), [("a".to_string(), Value::Null)]);
    assert_eq!(v["metadata"]["resourceVersion"], only_a.to_string());
    // The legacy exact match (a resourceVersion with a limit) pages the same state.
    let (_, v) = get(&s, &format!("{CONFIGMAPS}?resourceVersion={}&limit=1", now - 1)).await;
    assert_eq!(names(&v), [("a".to_string(), Value::Null)]);
    assert!(v["metadata"]["continue"].is_string(), "b follows: {v}");
    // NotOlderThan and "0": the current state.
    for q in [format!("resourceVersion={only_a}&resourceVersionMatch=NotOlderThan"), "resourceVersion=0".into()] {
        let (_, v) = get(&s, &format!("{CONFIGMAPS}?{q}")).await;
        assert_eq!(names(&v), [("a".to_string(), json!("1")), ("b".to_string(), Value::Null)], "{q}");
        assert_eq!(v["metadata"]["resourceVersion"], now.to_string(), "{q}");
    }
    // Compacted away (three events kept), too large for etcd (at once), too large for the cache
    // (after its wait).
    for _ in 0..3 {
        touch(&s, "b", &s.store.current_rv().to_string()).await;
    }
    let now = s.store.current_rv();
    let (status, v) = get(&s, &format!("{CONFIGMAPS}?resourceVersion={only_a}&resourceVersionMatch=Exact")).await;
    assert_eq!((status, v["reason"].as_str()), (StatusCode::GONE, Some("Expired")), "{v}");
    assert_eq!(v["message"], "The resourceVersion for the provided list is too old.");
    let future = now + 10;
    let (status, v) = get(&s, &format!("{CONFIGMAPS}?resourceVersion={future}&resourceVersionMatch=Exact")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(v["message"], format!("Timeout: Too large resource version: {future}, current: {now}"));
    assert_eq!(
        v["details"],
        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]})
    );
    let (status, v) =
        get(&s, &format!("{CONFIGMAPS}?resourceVersion={future}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(v["details"]["retryAfterSeconds"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_streaming_list_watcher_sees_the_initial_objects_then_a_change_without_a_list() {
    let s = server();
    create(&s, &[("a", "x"), ("b", "x")]).await;
    let lists = s.requests.list.load(std::sync::atomic::Ordering::Relaxed);
    let api = Api::<ConfigMap>::namespaced(s.client(), "default");
    let mut stream = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut next = async || tokio::time::timeout(TIMEOUT, stream.next()).await.expect("an event").unwrap().unwrap();
    let name = |cm: &ConfigMap| cm.metadata.name.clone().unwrap();
    assert!(matches!(next().await, watcher::Event::Init));
    let mut initial = vec![];
    loop {
        match next().await {
            watcher::Event::InitApply(cm) => initial.push(name(&cm)),
            watcher::Event::InitDone => break,
            other => panic!("during the initial events: {other:?}"),
        }
    }
    assert_eq!(initial, ["a", "b"]);
    touch(&s, "b", "changed").await;
    match next().await {
        watcher::Event::Apply(cm) => {
            assert_eq!((name(&cm), cm.data.unwrap()["k"].clone()), ("b".to_string(), "changed".to_string()))
        }
        other => panic!("expected the change, got {other:?}"),
    }
    assert_eq!(s.requests.list.load(std::sync::atomic::Ordering::Relaxed), lists, "no list request");
}
