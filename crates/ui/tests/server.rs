//! The web view against an embedded API server (in-process, no controllers: the objects are
//! exactly those a test creates): who may see what, what the pages show, and the live events.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use jobset_api::jobset::types::JobSet;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_ui::server::{self, Config};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tower::ServiceExt;

const TOKEN: &str = "s3cret-token";
/// How long a test waits for anything (a page, an event).
const WAIT: Duration = Duration::from_secs(20);

fn cluster() -> (Arc<ApiServer>, Client, Router) {
    let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default())
        .expect("server starts");
    let client = server.client();
    let config =
        Config { debounce: Duration::from_millis(20), keep_alive: Duration::from_secs(1), ..Config::default() };
    let router = server::router_with(client.clone(), Arc::new(|t: &str| t == TOKEN), config);
    (server, client, router)
}

fn jobset(name: &str) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
        }}}]},
    }))
    .unwrap()
}

async fn create_jobset(client: &Client, name: &str) -> JobSet {
    Api::<JobSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &jobset(name))
        .await
        .expect("JobSet created")
}

/// A Job and a pod of JobSet `js`, labelled as the controller labels them.
async fn create_children(client: &Client, js: &JobSet) {
    let name = js.metadata.name.clone().unwrap();
    let uid = js.metadata.uid.clone().unwrap();
    let labels = json!({
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": uid,
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": "0",
    });
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-workers-0"), "namespace": "default", "labels": labels},
        "spec": {"template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<Job>::namespaced(client.clone(), "default").create(&PostParams::default(), &job).await.expect("Job created");
    let mut pod_labels = labels.clone();
    pod_labels["batch.kubernetes.io/job-name"] = json!(format!("{name}-workers-0"));
    pod_labels["batch.kubernetes.io/job-completion-index"] = json!("0");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-workers-0-0-abcde"), "namespace": "default", "labels": pod_labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.expect("pod created");
}

/// How a request presents (or fails to present) the token.
#[derive(Clone, Copy, Debug)]
enum Creds {
    None,
    Bearer(&'static str),
    Cookie(&'static str),
}

fn get(path: &str, creds: Creds) -> Request<Body> {
    let req = Request::get(path);
    let req = match creds {
        Creds::None => req,
        Creds::Bearer(t) => req.header(header::AUTHORIZATION, format!("Bearer {t}")),
        Creds::Cookie(t) => req.header(header::COOKIE, format!("{}={t}", server::COOKIE)),
    };
    req.body(Body::empty()).unwrap()
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
    let res = tokio::time::timeout(WAIT, router.clone().oneshot(req)).await.expect("answered in time").unwrap();
    let (parts, body) = res.into_parts();
    let bytes = tokio::time::timeout(WAIT, body.collect()).await.expect("body in time").unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

/// Only the head of an event stream's response: its body never ends.
async fn status_of(router: &Router, req: Request<Body>) -> (StatusCode, Body) {
    let res = tokio::time::timeout(WAIT, router.clone().oneshot(req)).await.expect("answered in time").unwrap();
    (res.status(), res.into_body())
}

/// Reads an event stream until an event named `name` whose data satisfies `data`; returns the
/// data. `pending` keeps what was read past that event, for the next wait.
async fn next_event(body: &mut Body, pending: &mut String, name: &str, data: impl Fn(&str) -> bool) -> String {
    tokio::time::timeout(WAIT, async {
        loop {
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                let field = |key: &str| event.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
                let payload = field("data:").unwrap_or_default();
                if field("event:") == Some(name) && data(payload) {
                    return payload.to_string();
                }
            }
            let frame = body.frame().await.expect("the stream goes on").expect("a frame");
            if let Ok(bytes) = frame.into_data() {
                pending.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no `{name}` event within {WAIT:?}"))
}

/// Every route serving cluster data, for JobSet `default/<name>`.
fn data_routes(name: &str) -> Vec<String> {
    vec![
        "/ui".into(),
        "/ui/".into(),
        format!("/ui/jobsets/default/{name}"),
        "/ui/partial/overview".into(),
        format!("/ui/partial/jobsets/default/{name}"),
        "/ui/api/overview".into(),
        format!("/ui/api/jobsets/default/{name}"),
        "/ui/events".into(),
        format!("/ui/events?namespace=default&jobset={name}"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_route_answers_401_and_no_data_without_the_token() {
    let (_server, client, router) = cluster();
    let js = create_jobset(&client, "classified").await;
    create_children(&client, &js).await;
    for path in data_routes("classified") {
        for creds in [Creds::None, Creds::Bearer("wrong"), Creds::Cookie("wrong"), Creds::Bearer(""), Creds::Cookie("")]
        {
            let (status, headers, body) = send(&router, get(&path, creds)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with {creds:?}");
            assert!(!body.contains("classified"), "{path} with {creds:?} leaked data: {body}");
            assert!(!headers.contains_key(header::SET_COOKIE), "{path}");
        }
        // With the token the same route answers (an event stream only its head: it never ends).
        let (status, _) = status_of(&router, get(&path, Creds::Bearer(TOKEN))).await;
        assert_eq!(status, StatusCode::OK, "{path} with the token");
    }
    // A page without the token is the login page, which says nothing of the cluster.
    let (_, _, body) = send(&router, get("/ui/jobsets/default/classified", Creds::None)).await;
    assert!(body.contains(r#"<form id="login""#), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_page_shows_no_cluster_data() {
    let (_server, client, router) = cluster();
    create_jobset(&client, "classified").await;
    let (status, _, body) = send(&router, get("/ui/login", Creds::None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"<form id="login" method="post" action="/ui/login">"#), "{body}");
    assert!(!body.contains("classified") && !body.contains("default"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_with_the_token_sets_a_strict_http_only_cookie_that_opens_the_data_routes() {
    let (_server, client, router) = cluster();
    create_jobset(&client, "visible").await;
    let post = |body: String| {
        Request::post("/ui/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap()
    };

    let (status, headers, body) = send(&router, post("token=nope&next=%2Fui%2F".into())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!headers.contains_key(header::SET_COOKIE));
    assert!(body.contains("That token is not valid.") && !body.contains("visible"), "{body}");

    let next = "%2Fui%2Fjobsets%2Fdefault%2Fvisible";
    let (status, headers, _) = send(&router, post(format!("token={TOKEN}&next={next}"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "/ui/jobsets/default/visible");
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    assert_eq!(cookie, format!("{}={TOKEN}; Path=/ui; HttpOnly; Secure; SameSite=Strict", server::COOKIE));

    let (status, _, body) = send(&router, get("/ui/api/overview", Creds::Cookie(TOKEN))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#""name":"visible""#), "{body}");

    // Another site is never a login's destination.
    let (_, headers, _) = send(&router, post(format!("token={TOKEN}&next=https%3A%2F%2Fevil.example%2F"))).await;
    assert_eq!(headers[header::LOCATION], "/ui/");

    let (status, headers, _) = send(&router, Request::post("/ui/logout").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));

    // Another site's forms can neither log the browser in (even with a valid token: login CSRF)
    // nor out.
    for path in ["/ui/login", "/ui/logout"] {
        let req = Request::post(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "cross-site")
            .header(header::ORIGIN, "https://evil.example")
            .body(Body::from(format!("token={TOKEN}")))
            .unwrap();
        let (status, headers, _) = send(&router, req).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(!headers.contains_key(header::SET_COOKIE), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_lists_a_created_jobset_and_its_page_shows_its_jobs_pods_and_restarts() {
    let (_server, client, router) = cluster();
    let js = create_jobset(&client, "train").await;
    create_children(&client, &js).await;
    let status = json!({"status": {"restarts": 1, "restartHistory": [{
        "attempt": 1, "strategy": "Recreate", "scope": "JobSet",
        "trigger": {"job": "train-workers-0", "pod": "train-workers-0-0-old", "exitCode": 3, "reason": "BackoffLimitExceeded", "action": "RestartJobSet", "countsTowardsMax": true},
        "failedAt": "2026-01-01T00:00:01.000000Z", "decidedAt": "2026-01-01T00:00:01.500000Z",
        "stoppedAt": "2026-01-01T00:00:02.000000Z", "runningAt": "2026-01-01T00:00:04.000000Z", "duration": "3s",
    }]}});
    Api::<JobSet>::namespaced(client.clone(), "default")
        .patch_status("train", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status patched");

    let (code, headers, overview) = send(&router, get("/ui/", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    assert!(overview.contains(r#"<tr data-jobset="default/train" data-state="Starting">"#), "{overview}");
    assert!(overview.contains(r#"href="/ui/jobsets/default/train""#), "{overview}");
    assert!(
        overview.contains(r#"data-fragment="/ui/partial/overview""#),
        "the page refreshes its fragment: {overview}"
    );
    assert!(overview.contains(r#"data-events="/ui/events""#), "{overview}");
    assert!(headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("connect-src 'self'"));

    // A snapshot opens no event stream (a headless browser waits for the network to go idle).
    let (code, _, snapshot) = send(&router, get("/ui/jobsets/default/train?live=0", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        !snapshot.contains("data-events") && snapshot.contains(r#"<span id="live" data-state="off">"#),
        "{snapshot}"
    );

    let (code, _, page) = send(&router, get("/ui/jobsets/default/train", Creds::Cookie(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    for hook in [
        r#"<table id="jobs">"#,
        r#"data-name="train-workers-0""#,
        r#"<table id="pods">"#,
        r#"data-name="train-workers-0-0-abcde""#,
        r#"<table id="restart-history" data-restarts="1">"#,
        r#"data-restart-row="0""#,
        r#"data-phase="detect" data-seconds="0.5""#,
        r#"data-phase="total" data-seconds="3""#,
        r#"<section id="timeline">"#,
        r#"data-row="workers/0/0""#,
        r#"data-events="/ui/events?namespace=default&amp;jobset=train""#,
    ] {
        assert!(page.contains(hook), "{hook} missing from {page}");
    }

    let (code, _, fragment) = send(&router, get("/ui/partial/jobsets/default/train", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    assert!(fragment.contains(r#"data-name="train-workers-0-0-abcde""#) && !fragment.contains("<html"), "{fragment}");

    let (code, _, text) = send(&router, get("/ui/api/jobsets/default/train", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["jobs"][0]["name"], "train-workers-0");
    assert_eq!(v["pods"][0]["name"], "train-workers-0-0-abcde");
    assert_eq!(v["jobset"]["restarts"], 1);
    assert_eq!(v["timeline"]["jobset"], "train");
    assert_eq!(v["timeline"]["restarts"][0]["trigger"]["exitCode"], 3);

    let (code, _, text) = send(&router, get("/ui/api/overview", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["jobsets"][0]["name"], "train");
    assert_eq!(v["jobsets"][0]["lastRestart"], "3s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_jobset_is_404_but_its_fragment_says_so_for_an_open_page() {
    let (_server, _client, router) = cluster();
    let (code, _, page) = send(&router, get("/ui/jobsets/default/gone", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(page.contains(r#"id="missing""#), "{page}");
    let (code, _, json) = send(&router, get("/ui/api/jobsets/default/gone", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(json.contains("jobset default/gone not found"), "{json}");
    let (code, _, fragment) = send(&router, get("/ui/partial/jobsets/default/gone", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    assert!(fragment.contains(r#"id="missing""#), "{fragment}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_is_ready_then_tells_of_a_jobset_change() {
    let (_server, client, router) = cluster();
    let (code, mut body) = status_of(&router, get("/ui/events", Creds::Bearer(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    let mut seen = String::new();
    // With data: a browser's EventSource drops an event without any.
    let kinds = next_event(&mut body, &mut seen, "ready", |_| true).await;
    assert_eq!(kinds, "AppWrapper,Job,JobSet,Pod");
    create_jobset(&client, "watched").await;
    let kinds = next_event(&mut body, &mut seen, "change", |d| d.split(',').any(|k| k == "JobSet")).await;
    assert!(kinds.contains("JobSet"), "{kinds}");

    // A JobSet's page hears of its own JobSet's children.
    let js = Api::<JobSet>::namespaced(client.clone(), "default").get("watched").await.unwrap();
    let (code, mut body) =
        status_of(&router, get("/ui/events?namespace=default&jobset=watched", Creds::Cookie(TOKEN))).await;
    assert_eq!(code, StatusCode::OK);
    let mut seen = String::new();
    next_event(&mut body, &mut seen, "ready", |_| true).await;
    create_children(&client, &js).await;
    next_event(&mut body, &mut seen, "change", |d| d.split(',').any(|k| k == "Pod" || k == "Job")).await;
}
