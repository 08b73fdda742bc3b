//! Bad input through the in-process router and the HTTPS listener: every rejection is a
//! `metav1.Status` with the right code and reason, nothing answers 5xx, and the server keeps
//! serving afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use jobset_apiserver::ApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{Value, json};
use tower::ServiceExt;

const PODS: &str = "/api/v1/namespaces/default/pods";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const NAMESPACES: &str = "/api/v1/namespaces";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const JOBSETS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets";

/// A timeout for every single request: nothing here should take long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

struct Reply {
    status: StatusCode,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a `metav1.Status` failure with this code and reason, and returns it.
    fn status(&self, code: u16, reason: &str) -> Value {
        let v = self.json();
        assert_eq!(self.status.as_u16(), code, "HTTP status of {v}");
        assert_eq!(v["kind"], "Status", "{v}");
        assert_eq!(v["apiVersion"], "v1", "{v}");
        assert_eq!(v["status"], "Failure", "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert_eq!(v["reason"], reason, "{v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "Status without a message: {v}");
        v
    }

    fn message(&self, code: u16, reason: &str) -> String {
        self.status(code, reason)["message"].as_str().unwrap_or_default().to_string()
    }
}

struct Harness {
    app: axum::Router,
    seq: AtomicUsize,
}

impl Harness {
    fn new() -> Harness {
        Harness { app: ApiServer::in_memory().router(), seq: AtomicUsize::new(0) }
    }

    async fn send(&self, method: Method, uri: &str, content_type: Option<&str>, body: impl Into<Body>) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(ct) = content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let req = req.body(body.into()).expect("valid request");
        let fut = async {
            let resp = self.app.clone().oneshot(req).await.expect("infallible");
            let status = resp.status();
            let body = resp.into_body().collect().await.expect("body").to_bytes().to_vec();
            Reply { status, body }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, fut).await.unwrap_or_else(|_| panic!("request to {uri} timed out"))
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, Body::empty()).await
    }

    async fn post(&self, uri: &str, body: impl Into<Body>) -> Reply {
        self.send(Method::POST, uri, Some("application/json"), body).await
    }

    async fn post_json(&self, uri: &str, v: &Value) -> Reply {
        self.post(uri, serde_json::to_vec(v).unwrap()).await
    }

    async fn patch(&self, uri: &str, content_type: &str, body: impl Into<Body>) -> Reply {
        self.send(Method::PATCH, uri, Some(content_type), body).await
    }

    /// A good read and a good write still work.
    async fn still_serving(&self) {
        let r = self.get("/api/v1/namespaces/default").await;
        assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let r =
            self.post_json(CONFIGMAPS, &json!({"metadata": {"name": format!("alive-{n}")}, "data": {"k": "v"}})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["metadata"]["name"], format!("alive-{n}"));
    }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    })
}

fn jobset(name: &str) -> Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]
        }}}}}]}
    })
}

/// The causes of a 422, as (field, message) pairs.
fn causes(status: &Value) -> Vec<(String, String)> {
    status["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("422 without details.causes: {status}"))
        .iter()
        .map(|c| {
            (c["field"].as_str().unwrap_or_default().to_string(), c["message"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

#[tokio::test]
async fn malformed_json_is_a_bad_request_naming_the_parse_error() {
    let h = Harness::new();
    for (body, needle) in [
        (&b"{\"metadata\": {"[..], "EOF while parsing"),
        (b"{\"metadata\": {\"name\": \"a\",}}", "trailing comma"),
        (b"not json at all", "expected"),
        (b"\xff\xfe\x00", "expected value"),
    ] {
        let r = h.post(PODS, body).await;
        let msg = r.message(400, "BadRequest");
        assert!(
            msg.contains("json parse error") && msg.contains(needle),
            "message {msg:?} should name the parse error {needle:?}"
        );
        h.still_serving().await;
    }
    // A body that is JSON but not an object.
    for body in ["[]", "null", "42", "\"pod\""] {
        let r = h.post(PODS, body).await;
        r.status(400, "BadRequest");
        h.still_serving().await;
    }
    // Empty body.
    let r = h.post(PODS, "").await;
    r.status(400, "BadRequest");
    h.still_serving().await;
}

#[tokio::test]
async fn wrong_api_version_or_kind_is_a_bad_request() {
    let h = Harness::new();
    let cases: Vec<(&str, Value, &str)> = vec![
        (PODS, json!({"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "a"}}), "apps/v1"),
        (PODS, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}}), "Service"),
        (PODS, json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}}), "batch/v1"),
        (JOBS, json!({"apiVersion": "v1", "kind": "Job", "metadata": {"name": "a"}}), "v1"),
        (JOBS, json!({"apiVersion": "batch/v1", "kind": "Pod", "metadata": {"name": "a"}}), "Pod"),
        (JOBSETS, json!({"apiVersion": "batch/v1", "kind": "JobSet", "metadata": {"name": "a"}}), "batch/v1"),
        (JOBSETS, json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "Job", "metadata": {"name": "a"}}), "Job"),
        (NAMESPACES, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}), "Pod"),
        // Versions of the right group that are not served.
        (PODS, json!({"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "a"}}), "v2"),
        (JOBS, json!({"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "a"}}), "batch/v2"),
        (
            JOBSETS,
            json!({"apiVersion": "jobset.x-k8s.io/v9", "kind": "JobSet", "metadata": {"name": "a"}}),
            "jobset.x-k8s.io/v9",
        ),
        // Not strings at all.
        (PODS, json!({"apiVersion": 5, "kind": "Pod", "metadata": {"name": "a"}}), "apiVersion"),
        (PODS, json!({"apiVersion": "v1", "kind": ["Pod"], "metadata": {"name": "a"}}), "kind"),
    ];
    for (path, body, needle) in cases {
        let r = h.post_json(path, &body).await;
        let msg = r.message(400, "BadRequest");
        assert!(msg.contains(needle), "POST {path} {body}: message {msg:?} should name {needle:?}");
        h.still_serving().await;
    }
    // Nothing was created on the way.
    let r = h.get("/api/v1/namespaces/default/pods/a").await;
    r.status(404, "NotFound");
    // Empty (or absent) apiVersion and kind are unset: the URL says what the object is.
    for (i, (av, kind)) in [(json!(""), json!("")), (Value::Null, Value::Null)].into_iter().enumerate() {
        let name = format!("typed-by-url-{i}");
        let spec = json!({"containers": [{"name": "main", "image": "busybox"}]});
        let r =
            h.post_json(PODS, &json!({"apiVersion": av, "kind": kind, "metadata": {"name": name}, "spec": spec})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!((r.json()["apiVersion"].clone(), r.json()["kind"].clone()), (json!("v1"), json!("Pod")));
    }
    // A merge patch may not turn the object into another version or kind either.
    let p = format!("{PODS}/typed-by-url-0");
    for patch in [json!({"apiVersion": "v2"}), json!({"kind": "Service"}), json!({"apiVersion": "apps/v1"})] {
        h.patch(&p, "application/merge-patch+json", patch.to_string()).await.status(400, "BadRequest");
    }
    h.still_serving().await;
}

#[tokio::test]
async fn invalid_names_are_invalid_at_metadata_name() {
    let h = Harness::new();
    let long = "a".repeat(254);
    let cases: Vec<(&str, Value)> = vec![
        (PODS, pod("Bad_Name")),
        (PODS, pod(&long)),
        (PODS, pod("")),
        (PODS, json!({"metadata": {}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}})),
        (PODS, json!({"metadata": {"generateName": ""}})),
        (JOBSETS, jobset("Bad_Name")),
        (JOBS, json!({"metadata": {"name": "-leading-dash"}})),
        (NAMESPACES, json!({"metadata": {"name": "a".repeat(64)}})),
        (NAMESPACES, json!({"metadata": {"name": "has.dot"}})),
        (CONFIGMAPS, json!({"metadata": {"name": "with/slash"}})),
    ];
    for (path, body) in cases {
        let r = h.post_json(path, &body).await;
        let status = r.status(422, "Invalid");
        let cs = causes(&status);
        assert!(cs.iter().any(|(f, _)| f == "metadata.name"), "POST {path}: causes {cs:?} should name metadata.name");
        h.still_serving().await;
    }
}

#[tokio::test]
async fn invalid_labels_are_invalid_at_metadata_labels() {
    let h = Harness::new();
    let cases = [
        json!({"app": "bad value!"}),
        json!({"app": "x".repeat(64)}),
        json!({"bad key!": "v"}),
        json!({"app": 5}),
        json!(["not", "a", "map"]),
    ];
    for labels in cases {
        let mut body = pod("labelled");
        body["metadata"]["labels"] = labels.clone();
        let r = h.post_json(PODS, &body).await;
        let status = r.status(422, "Invalid");
        let cs = causes(&status);
        assert!(
            cs.iter().any(|(f, _)| f.starts_with("metadata.labels")),
            "labels {labels}: causes {cs:?} should name metadata.labels"
        );
        assert!(status["message"].as_str().unwrap().contains("metadata.labels"), "{status}");
        h.still_serving().await;
    }
    // Annotations too.
    let mut body = pod("annotated");
    body["metadata"]["annotations"] = json!({"bad key!": "v"});
    let status = h.post_json(PODS, &body).await.status(422, "Invalid");
    assert!(causes(&status).iter().any(|(f, _)| f.starts_with("metadata.annotations")), "{status}");
    h.still_serving().await;
}

#[tokio::test]
async fn bodies_over_3_mib_are_too_large() {
    let h = Harness::new();
    let big = "x".repeat(3 * 1024 * 1024 + 1);
    let body = serde_json::to_vec(&json!({"metadata": {"name": "big"}, "data": {"k": big}})).unwrap();
    let r = h.post(CONFIGMAPS, body.clone()).await;
    r.status(413, "RequestEntityTooLarge");
    h.still_serving().await;
    // Also as a streamed body without a known length, and on PUT and PATCH.
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
        body.chunks(64 * 1024).map(|c| Ok(bytes::Bytes::copy_from_slice(c))).collect();
    let streamed = Body::from_stream(futures::stream::iter(chunks));
    let r = h.post(CONFIGMAPS, streamed).await;
    r.status(413, "RequestEntityTooLarge");
    h.still_serving().await;
    let r = h.send(Method::PUT, &format!("{CONFIGMAPS}/alive-0"), Some("application/json"), body.clone()).await;
    r.status(413, "RequestEntityTooLarge");
    let r = h.patch(&format!("{CONFIGMAPS}/alive-0"), "application/merge-patch+json", body).await;
    r.status(413, "RequestEntityTooLarge");
    h.still_serving().await;
    assert_eq!(h.get(&format!("{CONFIGMAPS}/big")).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_paths_are_not_found() {
    let h = Harness::new();
    for path in [
        "/api/v1/namespaces/default/widgets",
        "/api/v1/widgets",
        "/api/v2/pods",
        "/apis/nope.example.com/v1/things",
        "/apis/batch/v9/jobs",
        "/apis/batch/v1/namespaces/default/jobs/a/bogus",
        "/api/v1/namespaces/default/pods/a/b/c/d",
        "/foo",
        "/api/v1/namespaces/default/namespaces",
    ] {
        let r = h.get(path).await;
        r.status(404, "NotFound");
        let r = h.post(path, "{}").await;
        assert!(r.status.is_client_error(), "POST {path}: {}", r.status);
        r.status(r.status.as_u16(), if r.status == StatusCode::NOT_FOUND { "NotFound" } else { "MethodNotAllowed" });
        h.still_serving().await;
    }
    // A missing object is NotFound with details.
    let v = h.get(&format!("{PODS}/missing")).await.status(404, "NotFound");
    assert_eq!(v["details"]["name"], "missing", "{v}");
}

#[tokio::test]
async fn bad_selectors_are_bad_requests_naming_the_problem() {
    let h = Harness::new();
    let cases = [
        ("labelSelector=app%20in%20(a", "unable to parse requirement"),
        ("labelSelector=a%3D%3D%3Db", "unable to parse requirement"),
        ("labelSelector=!!", "unable to parse requirement"),
        ("labelSelector=bad%20key!%3Dv", "unable to parse requirement"),
        ("fieldSelector=metadata.name", "invalid field selector"),
        ("fieldSelector=metadata.name%3D%3D%3Dx", "invalid field selector"),
        ("fieldSelector=spec.bogus%3Dx", "field label not supported: spec.bogus"),
        ("fieldSelector=metadata.labels%3Dx", "field label not supported: metadata.labels"),
    ];
    for (q, needle) in cases {
        for base in [PODS, "/api/v1/pods"] {
            let uri = format!("{base}?{q}");
            let msg = h.get(&uri).await.message(400, "BadRequest");
            assert!(msg.contains(needle), "GET {uri}: message {msg:?} should contain {needle:?}");
            // Watches check the selectors before streaming.
            let msg = h.get(&format!("{uri}&watch=true")).await.message(400, "BadRequest");
            assert!(msg.contains(needle), "watch {uri}: message {msg:?} should contain {needle:?}");
        }
        // Collection deletes too, and they delete nothing.
        let msg =
            h.send(Method::DELETE, &format!("{CONFIGMAPS}?{q}"), None, Body::empty()).await.message(400, "BadRequest");
        assert!(msg.contains(needle), "DELETE collection ?{q}: {msg:?}");
        h.still_serving().await;
    }
    // Supported field selectors do work.
    assert_eq!(h.get(&format!("{PODS}?fieldSelector=spec.nodeName%3Dn1")).await.status, StatusCode::OK);
    assert_eq!(h.get(&format!("{CONFIGMAPS}?labelSelector=app%20in%20(a,b)")).await.status, StatusCode::OK);
    let list = h.get(CONFIGMAPS).await.json();
    assert!(!list["items"].as_array().unwrap().is_empty(), "a rejected collection delete deleted something: {list}");
}

#[tokio::test]
async fn bad_patches() {
    let h = Harness::new();
    let r = h.post_json(JOBSETS, &jobset("js")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
    let r = h.post_json(PODS, &pod("p")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
    let js = format!("{JOBSETS}/js");
    let p = format!("{PODS}/p");
    let before = h.get(&p).await.json();

    // Strategic merge patch on a custom resource.
    let msg = h
        .patch(&js, "application/strategic-merge-patch+json", r#"{"metadata":{"labels":{"a":"b"}}}"#)
        .await
        .message(415, "UnsupportedMediaType");
    assert!(msg.contains("strategic-merge-patch"), "{msg}");
    h.still_serving().await;
    // An unknown patch content type.
    h.patch(&p, "text/plain", "{}").await.status(415, "UnsupportedMediaType");
    h.still_serving().await;

    // JSON patch whose test fails, or that is not a patch at all.
    let msg = h
        .patch(&p, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/name","value":"other"}]"#)
        .await
        .message(422, "Invalid");
    assert!(msg.contains("operation 0"), "{msg}");
    h.patch(&p, "application/json-patch+json", r#"[{"op":"remove","path":"/spec/nope/deeper"}]"#)
        .await
        .status(422, "Invalid");
    h.patch(&p, "application/json-patch+json", r#"[{"op":"frobnicate","path":"/a"}]"#).await.status(400, "BadRequest");
    h.patch(&p, "application/json-patch+json", r#"{"op":"add"}"#).await.status(400, "BadRequest");
    h.patch(&p, "application/json-patch+json", "[").await.status(400, "BadRequest");
    h.patch(&p, "application/merge-patch+json", "{").await.status(400, "BadRequest");
    h.patch(&p, "application/merge-patch+json", "[1]").await.status(400, "BadRequest");
    h.patch(&p, "application/strategic-merge-patch+json", "[1]").await.status(400, "BadRequest");
    // A patch that makes the object invalid is rejected as a whole.
    let v = h
        .patch(&p, "application/merge-patch+json", r#"{"metadata":{"labels":{"a":"bad value!"}}}"#)
        .await
        .status(422, "Invalid");
    assert!(causes(&v).iter().any(|(f, _)| f.starts_with("metadata.labels")), "{v}");
    // A stale resourceVersion precondition.
    h.patch(&p, "application/merge-patch+json", r#"{"metadata":{"resourceVersion":"1"}}"#)
        .await
        .status(409, "Conflict");
    h.still_serving().await;

    // Server-side apply with a body that is not YAML (or not an object), or without a field manager.
    let apply = format!("{p}?fieldManager=t");
    for body in ["{{{: : -", "a: [1, 2", "key: \"unterminated", "\t- : ["] {
        let msg = h.patch(&apply, "application/apply-patch+yaml", body).await.message(400, "BadRequest");
        assert!(msg.contains("YAML"), "apply {body:?}: {msg}");
        h.still_serving().await;
    }
    h.patch(&apply, "application/apply-patch+yaml", &b"\xff\xfe"[..]).await.status(400, "BadRequest");
    h.patch(&apply, "application/apply-patch+yaml", "- a\n- b\n").await.status(400, "BadRequest");
    h.patch(&apply, "application/apply-patch+yaml", "metadata: {name: p}\n").await.status(400, "BadRequest");
    h.patch(&p, "application/apply-patch+yaml", "apiVersion: v1\nkind: Pod\n").await.status(400, "BadRequest");
    h.still_serving().await;

    // The object is unchanged by all of this.
    let after = h.get(&p).await.json();
    assert_eq!(after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"], "{after}");
    assert!(after["metadata"].get("labels").is_none(), "{after}");
}

#[tokio::test]
async fn unknown_query_parameters_are_ignored() {
    let h = Harness::new();
    h.still_serving().await;
    for uri in [
        format!("{CONFIGMAPS}?foo=bar&pretty=true&zzz"),
        format!("{CONFIGMAPS}/alive-0?frobnicate=1&&=&%zz"),
        "/api/v1/namespaces?unknown=%E2%9C%93".to_string(),
        format!("{JOBSETS}?x=y"),
    ] {
        let r = h.get(&uri).await;
        assert_eq!(r.status, StatusCode::OK, "GET {uri}: {}", String::from_utf8_lossy(&r.body));
    }
    let r = h.post_json(&format!("{CONFIGMAPS}?dryRunX=1&bogus"), &json!({"metadata": {"name": "q"}})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn delete_with_an_unknown_propagation_policy_is_a_bad_request() {
    let h = Harness::new();
    h.still_serving().await;
    let target = format!("{CONFIGMAPS}/alive-0");
    let msg = h
        .send(Method::DELETE, &format!("{target}?propagationPolicy=Sideways"), None, Body::empty())
        .await
        .message(400, "BadRequest");
    assert!(msg.contains("Sideways") && msg.contains("propagationPolicy"), "{msg}");
    let body = r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Sideways"}"#;
    h.send(Method::DELETE, &target, Some("application/json"), body).await.status(400, "BadRequest");
    h.send(Method::DELETE, &target, Some("application/json"), "{not json").await.status(400, "BadRequest");
    h.send(Method::DELETE, &format!("{target}?gracePeriodSeconds=soon"), None, Body::empty())
        .await
        .status(400, "BadRequest");
    h.send(Method::DELETE, &format!("{CONFIGMAPS}?propagationPolicy=Sideways"), None, Body::empty())
        .await
        .status(400, "BadRequest");
    // Nothing was deleted on the way.
    assert_eq!(h.get(&target).await.status, StatusCode::OK);
    h.still_serving().await;
    let r = h.send(Method::DELETE, &format!("{target}?propagationPolicy=Background"), None, Body::empty()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(h.get(&target).await.status, StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------------------------------------------
// Property-style: random bodies never produce a 5xx.
// ---------------------------------------------------------------------------------------------

fn random_string(rng: &mut StdRng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "b",
        "-",
        ".",
        "_",
        "/",
        "%",
        "..",
        " ",
        "x",
        "Z",
        "0",
        "9",
        "é",
        "\u{0}",
        "\\",
        "\"",
        "ñ",
        "app",
        "kubernetes.io/",
        "$patch",
        "$setElementOrder/containers",
        "delete",
        "replace",
        "default",
        "foregroundDeletion",
        "orphan",
        "{",
        "[",
    ];
    let n = rng.random_range(0..8);
    let mut s: String = (0..n).map(|_| PIECES[rng.random_range(0..PIECES.len())]).collect();
    if rng.random_bool(0.05) {
        s = "a".repeat(rng.random_range(60..300));
    }
    s
}

fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    let pick = if depth >= 4 { rng.random_range(0..5) } else { rng.random_range(0..8) };
    match pick {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => match rng.random_range(0..4) {
            0 => json!(rng.random::<i64>()),
            1 => json!(rng.random::<u64>()),
            2 => json!(rng.random::<f64>() * 1e300),
            _ => json!(rng.random_range(-3i64..5)),
        },
        3 | 4 => json!(random_string(rng)),
        5 => Value::Array((0..rng.random_range(0..4)).map(|_| random_value(rng, depth + 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.random_range(0..5) {
                m.insert(random_string(rng), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

/// A plausible object with random pieces in the places the server looks at.
fn random_object(rng: &mut StdRng, template: &Value) -> Value {
    let mut v = template.clone();
    let fields = [
        "/metadata/name",
        "/metadata/generateName",
        "/metadata/namespace",
        "/metadata/labels",
        "/metadata/annotations",
        "/metadata/finalizers",
        "/metadata/ownerReferences",
        "/metadata/resourceVersion",
        "/metadata/uid",
        "/metadata/deletionTimestamp",
        "/metadata/deletionGracePeriodSeconds",
        "/metadata",
        "/spec",
        "/status",
        "/apiVersion",
        "/kind",
        "/spec/replicatedJobs",
        "/spec/template",
        "/spec/containers",
        "/spec/finalizers",
        "/spec/nodeName",
    ];
    for _ in 0..rng.random_range(1..4) {
        let ptr = fields[rng.random_range(0..fields.len())];
        let new = match rng.random_range(0..4) {
            0 => random_string(rng).into(),
            1 => {
                json!([{"uid": random_string(rng), "name": random_string(rng), "blockOwnerDeletion": rng.random_bool(0.5)}])
            }
            2 => {
                let mut m = serde_json::Map::new();
                m.insert(random_string(rng), random_value(rng, 3));
                Value::Object(m)
            }
            _ => random_value(rng, 1),
        };
        set_pointer(&mut v, ptr, new);
    }
    v
}

fn set_pointer(v: &mut Value, ptr: &str, new: Value) {
    let mut cur = v;
    let parts: Vec<&str> = ptr.split('/').skip(1).collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let m = cur.as_object_mut().unwrap();
        if i == parts.len() - 1 {
            m.insert(p.to_string(), new);
            return;
        }
        cur = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

fn random_body(rng: &mut StdRng, template: &Value) -> Vec<u8> {
    match rng.random_range(0..4) {
        0 => {
            let mut b = vec![0u8; rng.random_range(0..512)];
            rng.fill_bytes(&mut b);
            b
        }
        1 => serde_json::to_vec(&random_value(rng, 0)).unwrap(),
        2 => {
            // A valid object, truncated or with a byte flipped.
            let mut b = serde_json::to_vec(&random_object(rng, template)).unwrap();
            if !b.is_empty() {
                let i = rng.random_range(0..b.len());
                if rng.random_bool(0.5) {
                    b.truncate(i);
                } else {
                    b[i] = rng.random();
                }
            }
            b
        }
        _ => serde_json::to_vec(&random_object(rng, template)).unwrap(),
    }
}

fn check_reply(what: &str, r: &Reply) {
    assert!(!r.status.is_server_error(), "{what}: {} {}", r.status, String::from_utf8_lossy(&r.body));
    if r.status.is_client_error() {
        // Every error is a Status with the code it was sent with.
        let v: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e}): {}", String::from_utf8_lossy(&r.body)));
        assert_eq!(v["kind"], "Status", "{what}: {v}");
        assert_eq!(v["apiVersion"], "v1", "{what}: {v}");
        assert_eq!(v["code"], r.status.as_u16(), "{what}: {v}");
        assert!(v["reason"].as_str().is_some_and(|s| !s.is_empty()), "{what}: {v}");
    }
}

#[tokio::test]
async fn random_bodies_never_cause_a_server_error() {
    let seed: u64 = std::env::var("BAD_INPUT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (rerun with BAD_INPUT_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let h = Harness::new();
    let targets: Vec<(&str, Value)> = vec![
        (PODS, pod("p")),
        (
            JOBS,
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (JOBSETS, jobset("js")),
        (NAMESPACES, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})),
    ];
    // Targets for updates, which exercise the update path with the same random bodies.
    for (path, template) in &targets {
        let r = h.post_json(path, template).await;
        assert_eq!(r.status, StatusCode::CREATED, "{path}: {}", String::from_utf8_lossy(&r.body));
    }
    let patch_types = [
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    for i in 0..200 {
        for (path, template) in &targets {
            let body = random_body(&mut rng, template);
            let shown = String::from_utf8_lossy(&body).chars().take(400).collect::<String>();
            let r = h.post(path, body).await;
            check_reply(&format!("#{i} POST {path} {shown}"), &r);

            let name = template["metadata"]["name"].as_str().unwrap();
            let uri = format!("{path}/{name}");
            let body = random_body(&mut rng, template);
            let shown = String::from_utf8_lossy(&body).chars().take(400).collect::<String>();
            let r = match rng.random_range(0..3) {
                0 => h.send(Method::PUT, &uri, Some("application/json"), body).await,
                1 => h.send(Method::PUT, &format!("{uri}/status"), Some("application/json"), body).await,
                _ => {
                    let ct = patch_types[rng.random_range(0..patch_types.len())];
                    let uri = if ct.contains("apply") { format!("{uri}?fieldManager=fuzz") } else { uri };
                    h.patch(&uri, ct, body).await
                }
            };
            check_reply(&format!("#{i} update {path} {shown}"), &r);
        }
    }
    h.still_serving().await;
    // Everything stored is still listable and every listed object is JSON with a name.
    for (path, _) in &targets {
        let list = h.get(path).await;
        assert_eq!(list.status, StatusCode::OK);
        for item in list.json()["items"].as_array().unwrap() {
            assert!(item["metadata"]["name"].as_str().is_some_and(|n| !n.is_empty()), "{item}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Over HTTPS: authentication.
// ---------------------------------------------------------------------------------------------

struct Https {
    url: String,
    creds: jobset_apiserver::tls::Credentials,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn start_https() -> Https {
    let dir = tempfile::tempdir().unwrap();
    let creds = jobset_apiserver::tls::load_or_create(dir.path()).expect("credentials");
    let tls = jobset_apiserver::tls::server_config(&creds).expect("TLS config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = ApiServer::in_memory();
    let task = tokio::spawn(jobset_apiserver::serve::serve_https(server, listener, tls, creds.token.clone(), async {
        let _ = stopped.await;
    }));
    Https { url, creds, stop: Some(stop), task, _dir: dir }
}

impl Https {
    async fn client(&self, token: Option<&str>) -> kube::Client {
        let mut creds = self.creds.clone();
        if let Some(t) = token {
            creds.token = t.to_string();
        }
        let yaml = jobset_apiserver::tls::kubeconfig_yaml(&self.url, &creds, "t");
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig parses");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("kubeconfig loads");
        kube::Client::try_from(config).expect("client")
    }

    /// One HTTPS request sending exactly the given Authorization header (kube::Client would add its own).
    async fn raw(&self, path: &str, authorization: Option<&str>) -> Reply {
        raw_https(&self.url, &self.creds.ca_cert_pem, path, authorization).await
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(REQUEST_TIMEOUT, &mut self.task).await.expect("listener stops").unwrap().unwrap();
    }
}

/// A GET over HTTP/1.1 (`Connection: close`) and TLS trusting `ca_pem`, with exactly the given headers.
async fn raw_https(url: &str, ca_pem: &str, path: &str, authorization: Option<&str>) -> Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let addr = url.trim_start_matches("https://").to_string();
    let fut = async {
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(server_name, tcp).await.expect("TLS handshake");
        let mut head =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n");
        if let Some(a) = authorization {
            head.push_str(&format!("Authorization: {a}\r\n"));
        }
        head.push_str("\r\n");
        tls.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        // The server may close without a TLS close_notify; what was read is what counts.
        let _ = tls.read_to_end(&mut raw).await;
        parse_http_response(&raw)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, fut).await.expect("HTTPS request timed out")
}

fn parse_http_response(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    if head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked"))
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).expect("chunk size");
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = out;
    }
    Reply { status: StatusCode::from_u16(code).unwrap(), body }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_requires_the_token_except_for_public_paths() {
    let s = start_https().await;
    let token = s.creds.token.clone();
    let bearer = format!("Bearer {token}");
    let wrong = format!("Bearer {}x", token);
    for (auth, what) in [
        (None, "no token"),
        (Some(wrong.as_str()), "wrong token"),
        (Some("Bearer "), "empty token"),
        (Some(&token[..]), "token without scheme"),
        (Some("Basic YWRtaW46YWRtaW4="), "basic auth"),
    ] {
        for path in
            ["/api/v1/namespaces/default/configmaps", "/api", "/apis", "/api/v1/namespaces", "/openapi/v2", "/nope"]
        {
            let r = s.raw(path, auth).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what} {path}: {}", String::from_utf8_lossy(&r.body));
            r.status(401, "Unauthorized");
        }
    }
    for path in ["/version", "/healthz", "/readyz", "/livez"] {
        let r = s.raw(path, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&r.body));
        let r = s.raw(path, Some(&wrong)).await;
        assert_eq!(r.status, StatusCode::OK, "{path} with a wrong token: {}", String::from_utf8_lossy(&r.body));
    }
    assert!(s.raw("/version", None).await.json()["gitVersion"].as_str().is_some());
    let r = s.raw("/api/v1/namespaces/default/configmaps", Some(&bearer)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));

    // kube::Client with a wrong token: 401 as a kube API error.
    let bad: Api<ConfigMap> = Api::namespaced(s.client(Some("nope")).await, "default");
    match tokio::time::timeout(REQUEST_TIMEOUT, bad.list(&Default::default())).await.expect("timely") {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 401, "{e:?}"),
        other => panic!("expected a 401, got {other:?}"),
    }

    // kube::Client from the kubeconfig: create and get a ConfigMap.
    let api: Api<ConfigMap> = Api::namespaced(s.client(None).await, "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("over-https".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let created = tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &cm))
        .await
        .expect("timely")
        .expect("create");
    assert!(created.metadata.uid.is_some());
    let got = tokio::time::timeout(REQUEST_TIMEOUT, api.get("over-https")).await.expect("timely").expect("get");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.data.unwrap()["k"], "v");
    // Errors through kube are Status errors too.
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &cm)).await.expect("timely") {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"), "{e:?}")
        }
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    s.stop().await;
}
