//! Admission warnings reach the client as kube-apiserver sends them: one `Warning: 299 - "<text>"`
//! response header each. The JobSet hook warns about an `InPlaceRestart` JobSet whose replicated
//! jobs run no in-place restart agent.

mod common;

use std::sync::Arc;

use common::send;
use http::{Method, StatusCode};
use jobset_apiserver::error::Cause;
use jobset_apiserver::{Admission, AdmissionHook, ApiServer, Lookup};
use serde_json::{Value, json};

const JOBSETS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets";

fn warning(i: usize) -> String {
    format!(
        r#"299 - "spec.replicatedJobs[{i}].template.spec.template.spec: no container runs the in-place restart agent (image registry.k8s.io/jobset/in-place-restart-agent, \"jobset agent\", or env JOBSET_NAME and POD_NAME); its pods will not take part in in-place restarts""#
    )
}

/// A valid InPlaceRestart JobSet whose replicated jobs run `pods` (their pod specs).
fn in_place_jobset(name: &str, pods: &[Value]) -> Value {
    let rjobs: Vec<Value> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            json!({"name": format!("r{i}"), "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
                "template": {"spec": pod}}}})
        })
        .collect();
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"suspend": true, "failurePolicy": {"restartStrategy": "InPlaceRestart", "maxRestarts": 3}, "replicatedJobs": rjobs},
    })
}

fn plain() -> Value {
    json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]})
}

fn with_agent() -> Value {
    json!({"restartPolicy": "Never",
        "initContainers": [{"name": "agent", "image": "registry.k8s.io/jobset/in-place-restart-agent:v0.11.0", "restartPolicy": "Always"}],
        "containers": [{"name": "main", "image": "busybox"}]})
}

#[tokio::test]
async fn an_in_place_restart_jobset_without_agents_is_created_with_a_warning_per_replicated_job() {
    let server = ApiServer::in_memory();
    let js = in_place_jobset("no-agents", &[plain(), with_agent(), plain()]);
    let (status, warnings, body) = send(&server, Method::POST, JOBSETS, "application/json", &js).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(warnings, [warning(0), warning(2)]);

    // An update warns again (upstream's webhook runs on update too), a status write does not.
    let mut updated = body.clone();
    updated["metadata"]["labels"] = json!({"a": "b"});
    let one = format!("{JOBSETS}/no-agents");
    let (status, warnings, body) = send(&server, Method::PUT, &one, "application/json", &updated).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(warnings, [warning(0), warning(2)]);
    let (status, warnings, _) =
        send(&server, Method::PATCH, &format!("{one}/status"), "application/merge-patch+json", &json!({"status": {}}))
            .await;
    assert_eq!(status, StatusCode::OK);
    assert!(warnings.is_empty(), "{warnings:?}");

    // Server-side apply of a new object creates it, with the warnings.
    let applied = in_place_jobset("applied", &[plain()]);
    let (status, warnings, _) = send(
        &server,
        Method::PATCH,
        &format!("{JOBSETS}/applied?fieldManager=test"),
        "application/apply-patch+yaml",
        &applied,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(warnings, [warning(0)]);

    // Errors after admission keep them, as kube-apiserver's recorder does.
    let (status, warnings, body) = send(&server, Method::POST, JOBSETS, "application/json", &js).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["reason"], "AlreadyExists");
    assert_eq!(warnings, [warning(0), warning(2)]);
}

#[tokio::test]
async fn jobsets_whose_pods_run_the_agent_or_that_recreate_get_no_warning() {
    let server = ApiServer::in_memory();
    let js = in_place_jobset("agents", &[with_agent(), with_agent()]);
    let (status, warnings, body) = send(&server, Method::POST, JOBSETS, "application/json", &js).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");

    let mut recreate = in_place_jobset("recreate", &[plain()]);
    recreate["spec"]["failurePolicy"]["restartStrategy"] = json!("Recreate");
    let (status, warnings, body) = send(&server, Method::POST, JOBSETS, "application/json", &recreate).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");

    // An invalid JobSet is refused with its causes only.
    let mut invalid = in_place_jobset("invalid", &[plain()]);
    invalid["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = json!(0);
    let (status, warnings, _) = send(&server, Method::POST, JOBSETS, "application/json", &invalid).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// Any hook's warnings: escaped, deduplicated, in order, alongside its validation.
struct Warns;

impl AdmissionHook for Warns {
    fn validate(&self, _obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        vec![]
    }
    fn warnings(&self, obj: &Value, _old: Option<&Value>) -> Vec<String> {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        vec![format!(r#"configmap "{name}" \ is deprecated"#), "second".into(), "second".into()]
    }
}

#[tokio::test]
async fn a_hooks_warnings_are_escaped_and_deduplicated() {
    let mut admission = Admission::default();
    admission.register("", "ConfigMap", Arc::new(Warns));
    let server = common::server_with(common::fast_config(), admission);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let (status, warnings, _) =
        send(&server, Method::POST, "/api/v1/namespaces/default/configmaps", "application/json", &cm).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(warnings, [r#"299 - "configmap \"c\" \\ is deprecated""#, r#"299 - "second""#]);
}
