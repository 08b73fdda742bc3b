//! The cost of the pod writes of a sidecar-mode in-place restart, through the HTTP router
//! in-process (routing, admission, the store's write and the response included): node-agent
//! status patches (strategic merge, `PATCH .../pods/NAME/status` with the whole status, as
//! `jobset_kubelet`'s worker sends them) and the agent's attempt annotation (server-side apply
//! of one annotation, as `jobset_agent` sends it), on pods as the simulated runtime runs them
//! (`patch_cost_pod.json`: a JobSet pod with an agent sidecar and a worker).
//!
//! Deterministic, for `valgrind --tool=callgrind`: each kind of patch runs in its own function,
//! so instructions can be counted per kind:
//!
//! ```text
//! cargo build --release -p jobset-apiserver --example patch_cost
//! valgrind --tool=callgrind --toggle-collect='*patch_cost::status_patches*' \
//!     target/release/examples/patch_cost 1000 500    # Ir / 500 = instructions per status patch
//! valgrind --tool=callgrind --toggle-collect='*patch_cost::annotation_patches*' \
//!     target/release/examples/patch_cost 1000 500
//! ```
//!
//! Arguments: pods (default 1000), patches of each kind (default 500). It prints a digest of
//! every response body and of the stored pods, which a change that keeps behaviour keeps.

use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use jobset_apiserver::ApiServer;
use ring::digest::Context;
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tower::ServiceExt;

const POD: &str = include_str!("patch_cost_pod.json");
const ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("arguments: PODS PATCHES"));
    let pods = args.next().unwrap_or(1000).max(1);
    let patches = args.next().unwrap_or(500);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let server = ApiServer::in_memory();
    let template: Value = serde_json::from_str(POD).expect("the pod fixture is JSON");
    let def = server.registry().get("", "v1", "pods").expect("pods are built in");
    server
        .store
        .write(|txn| {
            for i in 0..pods {
                let mut pod = template.clone();
                pod["metadata"]["name"] = json!(name(i));
                pod["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
                txn.put(&def, pod);
            }
            Ok(())
        })
        .expect("the pods are stored");
    let status = status_requests(&template["status"], pods, patches);
    let annotation = annotation_requests(pods, patches);
    let router = server.router();
    let mut digest = Context::new(&ring::digest::SHA256);

    let start = Instant::now();
    let status_bodies = status_patches(&rt, &router, status);
    let status_time = start.elapsed();
    let start = Instant::now();
    let annotation_bodies = annotation_patches(&rt, &router, annotation);
    let annotation_time = start.elapsed();
    for body in status_bodies.iter().chain(&annotation_bodies) {
        digest.update(body);
    }

    let (stored, _, _) = server.store.list(&def, Some("default"), None, |_| true, None);
    for o in &stored {
        digest.update(&o.raw);
    }
    let per = |t: std::time::Duration| t.as_secs_f64() * 1e6 / patches.max(1) as f64;
    println!("pods {pods}, patches of each kind {patches}");
    println!("status patch: {:.1} µs (wall)", per(status_time));
    println!("annotation patch: {:.1} µs (wall)", per(annotation_time));
    let hex: String = digest.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    println!("digest of the responses and stored pods: {hex}");
}

fn name(i: usize) -> String {
    format!("js-rj-0-{i}-abcde")
}

/// The node agent's status patches: pod `k % pods` goes through the steps of an in-place
/// restart (worker failed, both containers restarting, running, ready), one step a patch.
fn status_requests(stored: &Value, pods: usize, patches: usize) -> Vec<Request<Body>> {
    (0..patches)
        .map(|k| {
            let pod = k % pods;
            let round = k / pods;
            let status = restart_step(stored, round);
            let uri = format!("/api/v1/namespaces/default/pods/{}/status", name(pod));
            request(&uri, "application/strategic-merge-patch+json", &json!({"status": status}))
        })
        .collect()
}

/// The status in step `round % 4` of restart `round / 4`: 0 ready, 1 the worker failed, 2 both
/// containers restarted and not ready, 3 running.
fn restart_step(stored: &Value, round: usize) -> Value {
    let mut s = stored.clone();
    let at = |secs: usize| format!("2026-11-27T17:{:02}:{:02}Z", 10 + secs / 60 % 50, secs % 60);
    let step = round % 4;
    let restarts = (round / 4) as i64 + i64::from(step >= 2);
    let ready = matches!(step, 0 | 3);
    let unready = if step == 1 { "[worker]" } else { "[in-place-restart-agent worker]" };
    let agent = &mut s["initContainerStatuses"][0];
    agent["restartCount"] = json!(restarts);
    if step == 2 {
        agent["ready"] = json!(false);
        agent["started"] = json!(false);
        agent["state"] = json!({"running": {"startedAt": at(round)}});
    }
    let w = &mut s["containerStatuses"][0];
    w["restartCount"] = json!(restarts);
    match step {
        1 => {
            w["ready"] = json!(false);
            w["started"] = json!(false);
            w["state"] = json!({"terminated": {"containerID": w["containerID"].clone(), "exitCode": 1,
                "finishedAt": at(round), "reason": "Error", "startedAt": at(0)}});
        }
        2 => {
            w["ready"] = json!(false);
            w["started"] = json!(false);
            w["lastState"] = json!({"terminated": {"containerID": w["containerID"].clone(), "exitCode": 1,
                "finishedAt": at(round), "reason": "Error", "startedAt": at(0)}});
            w["state"] = json!({"waiting": {"reason": "PodInitializing"}});
        }
        3 => w["state"] = json!({"running": {"startedAt": at(round)}}),
        _ => {}
    }
    if let Some(conds) = s["conditions"].as_array_mut() {
        for c in conds.iter_mut() {
            let kind = c["type"].as_str().unwrap_or_default().to_string();
            if kind == "Ready" || kind == "ContainersReady" {
                c["lastTransitionTime"] = json!(at(round));
                if !ready {
                    c["status"] = json!("False");
                    c["reason"] = json!("ContainersNotReady");
                    c["message"] = json!(format!("containers with unready status: {unready}"));
                }
            }
            // As the worker sends them: a reason or message that no longer applies is removed.
            if let Some(c) = c.as_object_mut() {
                for key in ["reason", "message"] {
                    c.entry(key).or_insert(Value::Null);
                }
                c.remove("lastProbeTime");
            }
        }
    }
    s
}

/// The agent's announcements: pod `k % pods` applies attempt `k / pods + 1`.
fn annotation_requests(pods: usize, patches: usize) -> Vec<Request<Body>> {
    (0..patches)
        .map(|k| {
            let pod = name(k % pods);
            let body = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "annotations": {ATTEMPT: (k / pods + 1).to_string()}},
            });
            let uri = format!("/api/v1/namespaces/default/pods/{pod}?fieldManager=in-place-restart-agent&force=true");
            request(&uri, "application/apply-patch+yaml", &body)
        })
        .collect()
}

fn request(uri: &str, content_type: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(Method::PATCH)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("a JSON body")))
        .expect("a request")
}

// Not inlined: callgrind counts each kind by its function (`--toggle-collect`).
#[inline(never)]
fn status_patches(rt: &Runtime, router: &axum::Router, reqs: Vec<Request<Body>>) -> Vec<Bytes> {
    rt.block_on(send_all(router, reqs))
}

#[inline(never)]
fn annotation_patches(rt: &Runtime, router: &axum::Router, reqs: Vec<Request<Body>>) -> Vec<Bytes> {
    rt.block_on(send_all(router, reqs))
}

/// The response bodies, in order (digested after the count).
async fn send_all(router: &axum::Router, reqs: Vec<Request<Body>>) -> Vec<Bytes> {
    let mut bodies = Vec::with_capacity(reqs.len());
    for req in reqs {
        let resp = router.clone().oneshot(req).await.expect("the router answers");
        let code = resp.status();
        let body = resp.into_body().collect().await.expect("a body").to_bytes();
        assert_eq!(code, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        bodies.push(body);
    }
    bodies
}
