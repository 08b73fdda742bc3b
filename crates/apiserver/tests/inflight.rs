//! The in-flight limits (kube-apiserver's `--max-requests-inflight` and
//! `--max-mutating-requests-inflight`): a request beyond its class's limit gets kube-apiserver's
//! 429, long-running requests are not counted, and kube clients retry after `Retry-After`.
//!
//! A request is held in flight by not reading its response body: the server keeps the slot until
//! the body has been sent, as kube-apiserver keeps it until its handler has written the response.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use common::{Transport, fast_config, harness_with, server_with};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use jobset_apiserver::http::TOO_MANY_REQUESTS_MESSAGE;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use serde_json::json;
use tower::ServiceExt;

fn limited(read_only: Option<usize>, mutating: Option<usize>, retry_after_seconds: u32) -> ServerConfig {
    ServerConfig {
        max_requests_inflight: read_only,
        max_mutating_requests_inflight: mutating,
        retry_after_seconds,
        ..fast_config()
    }
}

/// Sends a request straight to the server's router; the response body is left unread.
async fn send(server: &Arc<ApiServer>, method: Method, uri: &str, body: Option<serde_json::Value>) -> Response<Body> {
    let mut req = Request::builder().method(method).uri(uri);
    let body = match body {
        Some(v) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&v).unwrap())
        }
        None => Body::empty(),
    };
    server.router().oneshot(req.body(body).unwrap()).await.unwrap()
}

fn get(server: &Arc<ApiServer>, uri: &str) -> impl Future<Output = Response<Body>> {
    send(server, Method::GET, uri, None)
}

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}})
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Asserts kube-apiserver's answer beyond an in-flight limit.
async fn assert_too_many_requests(resp: Response<Body>, retry_after: &str) {
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = resp.headers();
    assert_eq!(h.get(header::RETRY_AFTER).unwrap(), retry_after);
    assert_eq!(h.get(header::CONTENT_TYPE).unwrap(), "text/plain; charset=utf-8");
    assert_eq!(h.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "Too many requests, please try again later.\n");
    assert_eq!(body, TOO_MANY_REQUESTS_MESSAGE);
}

fn rejected(server: &ApiServer) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (server.requests.rejected_read_only.load(Relaxed), server.requests.rejected_mutating.load(Relaxed))
}

#[tokio::test]
async fn a_read_only_request_over_the_limit_gets_429_while_writes_and_watches_pass() {
    let server = server_with(limited(Some(1), None, 1), Admission::default());
    let held = get(&server, "/api/v1/namespaces").await;
    assert_eq!(held.status(), StatusCode::OK);

    assert_too_many_requests(get(&server, "/api/v1/namespaces/default").await, "1").await;
    assert_too_many_requests(get(&server, "/healthz").await, "1").await;
    assert_eq!(rejected(&server), (2, 0));
    assert_eq!(server.requests.rejected(), 2);

    // Mutating requests have their own (here: no) limit.
    assert_eq!(send(&server, Method::POST, CONFIGMAPS, Some(configmap("a"))).await.status(), StatusCode::CREATED);
    // Watches are long-running: never counted, never refused.
    let watch = get(&server, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=5").await;
    assert_eq!(watch.status(), StatusCode::OK);
    let (verbs, _) = server.requests.snapshot();
    assert!(verbs.contains(&("get", 0)), "a refused request is not served: {verbs:?}");

    // The slot is free once the held response has been read.
    let body = held.into_body().collect().await.unwrap().to_bytes();
    assert!(!body.is_empty());
    assert_eq!(get(&server, "/api/v1/namespaces/default").await.status(), StatusCode::OK);
    // The watch, still open, holds nothing.
    assert_eq!(get(&server, "/api/v1/namespaces/default").await.status(), StatusCode::OK);
    drop(watch);
    assert_eq!(rejected(&server), (2, 0));
}

#[tokio::test]
async fn the_mutating_limit_is_separate_and_covers_post_put_patch_and_delete() {
    let server = server_with(limited(None, Some(1), 0), Admission::default());
    assert_eq!(send(&server, Method::POST, CONFIGMAPS, Some(configmap("a"))).await.status(), StatusCode::CREATED);
    let held = send(&server, Method::POST, CONFIGMAPS, Some(configmap("b"))).await;
    assert_eq!(held.status(), StatusCode::CREATED);

    let one = format!("{CONFIGMAPS}/a");
    assert_too_many_requests(send(&server, Method::POST, CONFIGMAPS, Some(configmap("c"))).await, "0").await;
    assert_too_many_requests(send(&server, Method::PUT, &one, Some(configmap("a"))).await, "0").await;
    let patch = Request::patch(&one)
        .header(header::CONTENT_TYPE, "application/merge-patch+json")
        .body(Body::from(r#"{"data":{"a":"c"}}"#))
        .unwrap();
    assert_too_many_requests(server.router().oneshot(patch).await.unwrap(), "0").await;
    assert_too_many_requests(send(&server, Method::DELETE, &one, None).await, "0").await;
    assert_eq!(rejected(&server), (0, 4));

    // Reads are not limited meanwhile, and nothing refused was done.
    let list: serde_json::Value =
        serde_json::from_slice(&get(&server, CONFIGMAPS).await.into_body().collect().await.unwrap().to_bytes())
            .unwrap();
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().filter_map(|o| o["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["a", "b"]);

    drop(held);
    assert_eq!(send(&server, Method::DELETE, &one, None).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_unlimited_server_never_answers_429() {
    let server = server_with(fast_config(), Admission::default());
    let mut held = Vec::new();
    for i in 0..64 {
        held.push(get(&server, "/api/v1/namespaces").await);
        held.push(send(&server, Method::POST, CONFIGMAPS, Some(configmap(&format!("c{i}")))).await);
    }
    held.push(get(&server, "/api/v1/namespaces/default").await);
    held.push(send(&server, Method::DELETE, &format!("{CONFIGMAPS}/c0"), None).await);
    let codes: Vec<u16> = held.iter().map(|r| r.status().as_u16()).collect();
    assert!(codes.iter().all(|c| [200, 201].contains(c)), "{codes:?}");
    assert_eq!(server.requests.rejected(), 0);
}

/// Lets other tasks run until the server has refused `n` requests (bounded).
async fn until_rejected(server: &ApiServer, n: u64) {
    let refused = async {
        while server.requests.rejected() < n {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), refused)
        .await
        .unwrap_or_else(|_| panic!("the server refused {} requests, not {n}", server.requests.rejected()));
}

/// The in-process client retries a 429 after the server's `Retry-After` (kube's
/// `RetryPolicy::server_retry()`), and succeeds once the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_process_client_retries_after_retry_after() {
    let server = server_with(limited(Some(1), Some(1), 1), Admission::default());
    let held = get(&server, "/api/v1/namespaces").await;
    let client = server.client();
    let started = std::time::Instant::now();
    let listing = tokio::spawn({
        let client = client.clone();
        async move { Api::<Namespace>::all(client).list(&ListParams::default()).await }
    });
    until_rejected(&server, 1).await;
    assert!(!listing.is_finished());
    drop(held);
    let list = listing.await.unwrap().expect("the retried list succeeds");
    assert!(list.items.iter().any(|n| n.metadata.name.as_deref() == Some("default")));
    // The first try was refused after `started`; kube waited its Retry-After from then on.
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}, before Retry-After");
    assert_eq!(rejected(&server), (1, 0));

    // A write is retried the same way (its body is sent again).
    let held = send(&server, Method::POST, CONFIGMAPS, Some(configmap("held"))).await;
    let creating = tokio::spawn(async move {
        let cm: ConfigMap = serde_json::from_value(configmap("retried")).unwrap();
        Api::<ConfigMap>::default_namespaced(client).create(&Default::default(), &cm).await
    });
    until_rejected(&server, 2).await;
    drop(held);
    let cm = creating.await.unwrap().expect("the retried create succeeds");
    assert_eq!(cm.data.unwrap()["a"], "b");
    assert_eq!(rejected(&server), (1, 1));
}

/// A kube client built from a kubeconfig (as the `jobset` CLI's) retries a 429 by default too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_client_over_https_retries_too() {
    let h = harness_with(Transport::Https, limited(Some(1), None, 0), Admission::default()).await;
    let held = get(&h.server, "/api/v1/namespaces").await;
    let listing = tokio::spawn({
        let client = h.client.clone();
        async move { Api::<Namespace>::all(client).list(&ListParams::default()).await }
    });
    until_rejected(&h.server, 1).await;
    drop(held);
    let list = tokio::time::timeout(Duration::from_secs(20), listing).await.unwrap().unwrap().expect("retried");
    assert!(!list.items.is_empty());
}
