//! `policy/v1` PodDisruptionBudgets served as kube-apiserver serves them: discovery (`pdb`),
//! validation with upstream's messages, the status subresource, `kubectl get pdb`'s columns, and
//! evictions that honour a budget's status (the disruption controller, which computes that
//! status, runs in local mode: crates/local/tests/pod_disruption_budget.rs).

#[allow(dead_code)] // the shared helpers this binary does not use
#[path = "common/admission.rs"]
mod admission;
mod common;

use std::sync::Arc;

use http::Method;
use jobset_apiserver::ApiServer;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Expected causes: (reason, field, message).
type Causes<'a> = Vec<(&'a str, &'a str, &'a str)>;

const JSON: &str = "application/json";
const VIOLATES: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

fn budget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec})
}

async fn create_budget(server: &Arc<ApiServer>, name: &str, spec: Value) -> (u16, Value) {
    let (code, _, body) = common::send(server, Method::POST, PDBS, JSON, &budget(name, spec)).await;
    (code.as_u16(), body)
}

/// Writes a budget's status as the disruption controller would.
async fn set_status(server: &Arc<ApiServer>, name: &str, status: Value) -> (u16, Value) {
    let uri = format!("{PDBS}/{name}/status");
    let (_, _, mut current) = common::send(server, Method::GET, &uri, JSON, &Value::Null).await;
    current["status"] = status;
    let (code, _, body) = common::send(server, Method::PUT, &uri, JSON, &current).await;
    (code.as_u16(), body)
}

async fn running_pod(server: &Arc<ApiServer>, name: &str, phase: &str, ready: bool) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "guarded"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let (code, _, body) = common::send(server, Method::POST, "/api/v1/namespaces/default/pods", JSON, &pod).await;
    assert_eq!(code, 201, "{body}");
    let mut stored = body;
    stored["status"] =
        json!({"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]});
    let uri = format!("/api/v1/namespaces/default/pods/{name}/status");
    let (code, _, body) = common::send(server, Method::PUT, &uri, JSON, &stored).await;
    assert_eq!(code, 200, "{body}");
}

async fn evict(server: &Arc<ApiServer>, pod: &str) -> (u16, Value) {
    let eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "default"}});
    let uri = format!("/api/v1/namespaces/default/pods/{pod}/eviction");
    let (code, _, body) = common::send(server, Method::POST, &uri, JSON, &eviction).await;
    (code.as_u16(), body)
}

async fn get_budget(server: &Arc<ApiServer>, name: &str) -> Value {
    common::send(server, Method::GET, &format!("{PDBS}/{name}"), JSON, &Value::Null).await.2
}

/// A budget `minAvailable: 2` over pods `app=guarded` whose status says `current` are healthy.
async fn guarded(server: &Arc<ApiServer>, name: &str, current: i64) {
    let (code, body) =
        create_budget(server, name, json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}})).await;
    assert_eq!(code, 201, "{body}");
    let status = json!({"observedGeneration": 1, "currentHealthy": current, "desiredHealthy": 2, "expectedPods": current,
                        "disruptionsAllowed": (current - 2).max(0)});
    let (code, body) = set_status(server, name, status).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn discovery_serves_poddisruptionbudgets_with_their_short_name_and_status() {
    let server = ApiServer::in_memory();
    let (code, _, list) = common::send(&server, Method::GET, "/apis/policy/v1", JSON, &Value::Null).await;
    assert_eq!(code, 200);
    let resources = list["resources"].as_array().unwrap();
    let pdb = resources.iter().find(|r| r["name"] == "poddisruptionbudgets").expect("served");
    assert_eq!((pdb["kind"].as_str(), pdb["namespaced"].as_bool()), (Some("PodDisruptionBudget"), Some(true)));
    assert_eq!(pdb["shortNames"], json!(["pdb"]));
    assert!(resources.iter().any(|r| r["name"] == "poddisruptionbudgets/status"), "{list}");
}

#[tokio::test]
async fn invalid_budgets_are_refused_with_kube_apiservers_causes() {
    let server = ApiServer::in_memory();
    let percent = "Invalid value: 50: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
    let cases: Vec<(Value, Causes)> = vec![
        (
            json!({"minAvailable": -1}),
            vec![("FieldValueInvalid", "spec.minAvailable", "Invalid value: -1: must be greater than or equal to 0")],
        ),
        (json!({"maxUnavailable": "50"}), vec![("FieldValueInvalid", "spec.maxUnavailable", percent)]),
        (
            json!({"minAvailable": "101%"}),
            vec![("FieldValueInvalid", "spec.minAvailable", "Invalid value: \"101%\": must not be greater than 100%")],
        ),
        (
            json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"}),
            vec![(
                "FieldValueNotSupported",
                "spec.unhealthyPodEvictionPolicy",
                "Unsupported value: \"Sometimes\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
            )],
        ),
        (
            json!({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
            vec![(
                "FieldValueRequired",
                "spec.selector.matchExpressions[0].values",
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            )],
        ),
    ];
    for (spec, want) in cases {
        let (code, status) = create_budget(&server, "bad", spec.clone()).await;
        let got = admission::invalid_for(code, &status, "policy", "PodDisruptionBudget", "bad");
        assert_eq!(got, admission::owned(&want), "{spec}");
        let (field, message) = (want[0].1, want[0].2);
        assert_eq!(status["message"], format!("PodDisruptionBudget.policy \"bad\" is invalid: {field}: {message}"));
    }
    let (code, status) = create_budget(&server, "both", json!({"minAvailable": 1, "maxUnavailable": 1})).await;
    let got = admission::invalid_for(code, &status, "policy", "PodDisruptionBudget", "both");
    assert_eq!((got[0].0.as_str(), got[0].1.as_str()), ("FieldValueInvalid", "spec"));
    assert!(got[0].2.ends_with(": minAvailable and maxUnavailable cannot be both set"), "{got:?}");
    // The status subresource keeps its counts non-negative.
    guarded(&server, "ok", 2).await;
    let (code, status) = set_status(&server, "ok", json!({"disruptionsAllowed": -1})).await;
    let got = admission::invalid_for(code, &status, "policy", "PodDisruptionBudget", "ok");
    assert_eq!(
        got,
        admission::owned(&[(
            "FieldValueInvalid",
            "status.disruptionsAllowed",
            "Invalid value: -1: must be greater than or equal to 0"
        )])
    );
}

#[tokio::test]
async fn kubectl_get_pdb_shows_upstreams_columns() {
    let server = ApiServer::in_memory();
    guarded(&server, "min", 3).await;
    let (code, body) =
        create_budget(&server, "max", json!({"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "x"}}}))
            .await;
    assert_eq!(code, 201, "{body}");
    let req = http::Request::builder()
        .uri(PDBS)
        .header(http::header::ACCEPT, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = server.router().oneshot(req).await.unwrap();
    let table: Value =
        serde_json::from_slice(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()).unwrap();
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"]);
    let rows: Vec<Vec<Value>> =
        table["rows"].as_array().unwrap().iter().map(|r| r["cells"].as_array().unwrap()[..4].to_vec()).collect();
    assert_eq!(
        rows,
        [[json!("max"), json!("N/A"), json!("25%"), json!(0)], [json!("min"), json!("2"), json!("N/A"), json!(1)]]
    );
}

#[tokio::test]
async fn an_eviction_a_budget_cannot_afford_is_refused_with_429() {
    let server = ApiServer::in_memory();
    guarded(&server, "budget", 2).await;
    running_pod(&server, "p0", "Running", true).await;
    running_pod(&server, "p1", "Running", true).await;
    let (code, status) = evict(&server, "p0").await;
    assert_eq!(code, 429, "{status}");
    assert_eq!((status["reason"].as_str(), status["message"].as_str()), (Some("TooManyRequests"), Some(VIOLATES)));
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "DisruptionBudget", "message": "The disruption budget budget needs 2 healthy pods and has 2 currently"}])
    );
    let (code, _, pod) =
        common::send(&server, Method::GET, "/api/v1/namespaces/default/pods/p0", JSON, &Value::Null).await;
    assert_eq!(code, 200, "the pod stays");
    assert!(pod["metadata"].get("deletionTimestamp").is_none(), "{pod}");
}

#[tokio::test]
async fn an_eviction_spends_a_disruption_in_the_same_write_and_the_next_is_refused() {
    let server = ApiServer::in_memory();
    guarded(&server, "budget", 3).await;
    for p in ["p0", "p1", "p2"] {
        running_pod(&server, p, "Running", true).await;
    }
    let (code, body) = evict(&server, "p0").await;
    assert_eq!(code, 201, "{body}");
    let b = get_budget(&server, "budget").await;
    assert_eq!(b["status"]["disruptionsAllowed"], 0);
    assert!(b["status"]["disruptedPods"]["p0"].is_string(), "{b}");
    let cond = &b["status"]["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str(), cond["reason"].as_str()),
        (Some("DisruptionAllowed"), Some("False"), Some("InsufficientPods"))
    );
    // Never bound to a node, the pod goes at once.
    let (code, _, pod) =
        common::send(&server, Method::GET, "/api/v1/namespaces/default/pods/p0", JSON, &Value::Null).await;
    assert_eq!(code, 404, "the evicted pod is deleted: {pod}");
    let (code, status) = evict(&server, "p1").await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget budget needs 2 healthy pods and has 3 currently"
    );
}

#[tokio::test]
async fn terminal_pending_and_unready_pods_go_without_spending_the_budget() {
    let server = ApiServer::in_memory();
    guarded(&server, "budget", 2).await;
    running_pod(&server, "done", "Succeeded", false).await;
    running_pod(&server, "waiting", "Pending", false).await;
    running_pod(&server, "ready-1", "Running", true).await;
    running_pod(&server, "ready-2", "Running", true).await;
    running_pod(&server, "unready", "Running", false).await;
    for p in ["done", "waiting", "unready"] {
        let (code, body) = evict(&server, p).await;
        assert_eq!(code, 201, "{p}: {body}");
    }
    let b = get_budget(&server, "budget").await;
    assert_eq!(b["status"]["disruptionsAllowed"], 0);
    assert!(b["status"].get("disruptedPods").is_none(), "nothing spent: {b}");
}

#[tokio::test]
async fn a_pod_under_two_budgets_cannot_be_evicted() {
    let server = ApiServer::in_memory();
    guarded(&server, "one", 3).await;
    guarded(&server, "two", 3).await;
    running_pod(&server, "p0", "Running", true).await;
    let (code, status) = evict(&server, "p0").await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
}
