//! Custom resources are held to their CRD's structural schema as kube-apiserver holds them:
//! unknown fields pruned and reported per `fieldValidation` (Warn by default, Strict, Ignore),
//! schema defaults applied, types, enums, bounds and CEL rules enforced, status validated on the
//! status subresource; CRDs with a non-structural schema or a CEL rule that does not compile are
//! rejected with nothing stored. kubectl shows these as it shows kube-apiserver's.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{send, send_raw};
use http::{Method, StatusCode};
use jobset_apiserver::ApiServer;
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
/// How long a kubectl run may take.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);
/// Rules were not run because the object already failed the schema (`hasBlockingErr`).
const NOT_CHECKED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

fn widget_crd(schema: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": schema}}]}})
}

/// A small schema with what the tests exercise: a required bounded integer, an enum with a
/// default, a CEL rule across fields, and a status with an enum.
fn schema() -> Value {
    json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["size"],
            "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.size", "message": "minReplicas must not exceed size"}],
            "properties": {
                "size": {"type": "integer", "minimum": 1},
                "failurePolicy": {"type": "string", "enum": ["Fail", "Ignore"], "default": "Fail"},
                "minReplicas": {"type": "integer", "default": 0}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["Running", "Done"]}}}}})
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

async fn post(server: &Arc<ApiServer>, uri: &str, body: &Value) -> (StatusCode, Vec<String>, Value) {
    send(server, Method::POST, uri, "application/json", body).await
}

async fn get(server: &Arc<ApiServer>, uri: &str) -> (StatusCode, Value) {
    let (status, _, body) = send(server, Method::GET, uri, "application/json", &Value::Null).await;
    (status, body)
}

/// A server with the widget CRD installed.
async fn with_widgets() -> Arc<ApiServer> {
    let server = ApiServer::in_memory();
    let (status, _, body) = post(&server, CRDS, &widget_crd(schema())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    server
}

#[tokio::test]
async fn a_misspelled_field_is_dropped_with_a_warning_by_default_and_the_schema_defaults_apply() {
    let server = with_widgets().await;
    let (status, warnings, body) =
        post(&server, WIDGETS, &widget("w", json!({"size": 2, "failurPolicy": "Ignore"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.failurPolicy\"""#]);
    assert_eq!(body["spec"], json!({"size": 2, "failurePolicy": "Fail", "minReplicas": 0}), "pruned and defaulted");
    let (_, stored) = get(&server, &format!("{WIDGETS}/w")).await;
    assert_eq!(stored["spec"], body["spec"]);
}

#[tokio::test]
async fn strict_field_validation_rejects_an_unknown_field_with_kube_apiservers_message() {
    let server = with_widgets().await;
    let (status, _, body) = post(
        &server,
        &format!("{WIDGETS}?fieldValidation=Strict"),
        &widget("w", json!({"size": 2, "failurPolicy": "Ignore"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["message"],
        r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.failurPolicy""#
    );
    assert_eq!(get(&server, &format!("{WIDGETS}/w")).await.0, StatusCode::NOT_FOUND, "nothing stored");
    let (status, _, body) =
        post(&server, &format!("{WIDGETS}?fieldValidation=strict"), &widget("w", json!({"size": 2}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        body["message"],
        r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": supported values: "", "Ignore", "Strict", "Warn""#
    );
}

#[tokio::test]
async fn ignore_field_validation_drops_unknown_fields_silently() {
    let server = with_widgets().await;
    let (status, warnings, body) = post(
        &server,
        &format!("{WIDGETS}?fieldValidation=Ignore"),
        &widget("w", json!({"size": 2, "failurPolicy": "Ignore"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(body["spec"].get("failurPolicy").is_none());
}

#[tokio::test]
async fn duplicate_fields_are_reported_before_unknown_ones() {
    let server = with_widgets().await;
    let body = br#"{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"size": 1, "size": 2, "sise": 3}}"#;
    let strict = format!("{WIDGETS}?fieldValidation=Strict");
    let (status, _, reply) = send_raw(&server, Method::POST, &strict, "application/json", body.to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    assert_eq!(
        reply["message"],
        r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: duplicate field "spec.size", unknown field "spec.sise""#
    );
    let (status, warnings, reply) = send_raw(&server, Method::POST, WIDGETS, "application/json", body.to_vec()).await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    assert_eq!(warnings, [r#"299 - "duplicate field \"spec.size\"""#, r#"299 - "unknown field \"spec.sise\"""#]);
    assert_eq!(reply["spec"]["size"], 2, "the last value wins");
}

#[tokio::test]
async fn patches_are_pruned_and_strict_patches_rejected_as_kube_apiserver_rejects_them() {
    let server = with_widgets().await;
    assert_eq!(post(&server, WIDGETS, &widget("w", json!({"size": 2}))).await.0, StatusCode::CREATED);
    let merge = "application/merge-patch+json";
    let patch = json!({"spec": {"sise": 3}});
    let (status, warnings, body) = send(&server, Method::PATCH, &format!("{WIDGETS}/w"), merge, &patch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.sise\"""#]);
    assert!(body["spec"].get("sise").is_none());
    let (status, _, body) =
        send(&server, Method::PATCH, &format!("{WIDGETS}/w?fieldValidation=Strict"), merge, &patch).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "{\"apiVersion\":\"example.com/v1\""#),
        "{message}"
    );
    assert!(message.ends_with(r#": strict decoding error: unknown field "spec.sise""#), "{message}");
}

#[tokio::test]
async fn wrong_types_enums_bounds_and_missing_fields_are_rejected_with_kube_apiservers_causes() {
    let server = with_widgets().await;
    let cases = [
        (
            json!({"size": "two"}),
            vec![
                r#"spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#,
                NOT_CHECKED,
            ],
        ),
        (
            json!({"size": 2, "failurePolicy": "Sometimes"}),
            vec![
                r#"spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#,
                NOT_CHECKED,
            ],
        ),
        (
            json!({"size": 0}),
            vec!["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"],
        ),
        (json!({}), vec!["spec.size: Required value", NOT_CHECKED]),
    ];
    for (spec, want) in cases {
        let (status, _, body) = post(&server, WIDGETS, &widget("w", spec.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{spec}: {body}");
        let causes: Vec<String> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
            .collect();
        assert_eq!(causes, want, "{spec}");
        let summary = if want.len() == 1 { want[0].to_string() } else { format!("[{}]", want.join(", ")) };
        assert_eq!(body["message"], format!(r#"Widget.example.com "w" is invalid: {summary}"#), "{spec}");
    }
    assert_eq!(get(&server, &format!("{WIDGETS}/w")).await.0, StatusCode::NOT_FOUND, "nothing stored");
}

#[tokio::test]
async fn a_cel_rule_is_enforced_on_create_and_update() {
    let server = with_widgets().await;
    let (status, _, body) = post(&server, WIDGETS, &widget("w", json!({"size": 2, "minReplicas": 3}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["message"],
        r#"Widget.example.com "w" is invalid: spec: Invalid value: minReplicas must not exceed size"#
    );
    assert_eq!(post(&server, WIDGETS, &widget("w", json!({"size": 2, "minReplicas": 2}))).await.0, StatusCode::CREATED);
    let (status, _, body) = send(
        &server,
        Method::PATCH,
        &format!("{WIDGETS}/w"),
        "application/merge-patch+json",
        &json!({"spec": {"size": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec");
}

#[tokio::test]
async fn the_status_subresource_validates_status_and_main_writes_leave_it_alone() {
    let server = with_widgets().await;
    assert_eq!(post(&server, WIDGETS, &widget("w", json!({"size": 2}))).await.0, StatusCode::CREATED);
    let status_uri = format!("{WIDGETS}/w/status");
    let merge = "application/merge-patch+json";
    let (status, _, body) =
        send(&server, Method::PATCH, &status_uri, merge, &json!({"status": {"phase": "Lost"}})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "status.phase");
    let (status, _, body) =
        send(&server, Method::PATCH, &status_uri, merge, &json!({"status": {"phase": "Done"}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A main write's status is ignored (the stored one is kept), so an invalid one does not matter.
    let (status, _, body) =
        send(&server, Method::PATCH, &format!("{WIDGETS}/w"), merge, &json!({"status": {"phase": "Lost"}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["phase"], "Done");
}

#[tokio::test]
async fn a_non_structural_crd_is_rejected_and_nothing_is_stored_or_served() {
    let server = ApiServer::in_memory();
    let bad = json!({"type": "object", "properties": {"spec": {"properties": {"size": {"type": "integer"}}}}});
    let (status, _, body) = post(&server, CRDS, &widget_crd(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["message"],
        r#"CustomResourceDefinition.apiextensions.k8s.io "widgets.example.com" is invalid: spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"#
    );
    assert_eq!(get(&server, &format!("{CRDS}/widgets.example.com")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(get(&server, WIDGETS).await.0, StatusCode::NOT_FOUND, "the kind is not served");
}

#[tokio::test]
async fn a_crd_whose_cel_rule_does_not_compile_is_rejected_and_a_valid_crd_cannot_be_updated_into_one() {
    let server = ApiServer::in_memory();
    let mut bad = schema();
    bad["properties"]["spec"]["x-kubernetes-validations"] = json!([{"rule": "self.size >"}]);
    let (status, _, body) = post(&server, CRDS, &widget_crd(bad.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let cause = &body["details"]["causes"][0];
    assert_eq!(cause["field"], "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule");
    assert!(
        cause["message"].as_str().unwrap().starts_with(
            r#"Invalid value: {"Rule":"self.size >","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: compilation failed: ERROR: <input>:1:12: Syntax error: "#
        ),
        "{cause}"
    );
    assert_eq!(get(&server, &format!("{CRDS}/widgets.example.com")).await.0, StatusCode::NOT_FOUND);
    // Created valid, then replaced by the bad one: refused, the stored CRD and its kind unchanged.
    let (_, _, created) = post(&server, CRDS, &widget_crd(schema())).await;
    let mut update = widget_crd(bad);
    update["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (status, _, _) =
        send(&server, Method::PUT, &format!("{CRDS}/widgets.example.com"), "application/json", &update).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _, body) = post(&server, WIDGETS, &widget("w", json!({"size": 1, "minReplicas": 2}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "the stored rule still applies: {body}");
}

#[tokio::test]
async fn odd_schemas_and_rules_that_fail_at_run_time_give_errors_not_panics() {
    let server = ApiServer::in_memory();
    for odd in [
        json!({"type": "object", "properties": {"spec": 5}}),
        json!({"type": 7}),
        json!("x"),
        json!({"type": "object", "x-kubernetes-validations": "x"}),
    ] {
        let (status, _, body) = post(&server, CRDS, &widget_crd(odd.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{odd}: {body}");
    }
    let mut failing = schema();
    failing["properties"]["spec"]["x-kubernetes-validations"] = json!([{"rule": "self.missing == 1"}]);
    assert_eq!(post(&server, CRDS, &widget_crd(failing)).await.0, StatusCode::CREATED);
    let (status, _, body) = post(&server, WIDGETS, &widget("w", json!({"size": 1}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = body["details"]["causes"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#"Invalid value: "object": "#) && message.ends_with(" evaluating rule: self.missing == 1"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// kubectl
// ---------------------------------------------------------------------------------------------

/// kubectl's default `--validate` is `strict`: it sends `fieldValidation=Strict` and prints the
/// server's error; `--validate=warn` sends Warn and prints each warning as `Warning: <text>`.
#[tokio::test]
async fn kubectl_prints_the_strict_error_by_default_and_the_warning_with_validate_warn() {
    let dir = tempfile::tempdir().unwrap();
    let creds = jobset_apiserver::tls::load_or_create(dir.path()).expect("credentials");
    let tls = jobset_apiserver::tls::server_config(&creds).expect("TLS config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let server = with_widgets().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(jobset_apiserver::serve::serve_https(server, listener, tls, creds.token.clone(), async {
        let _ = stopped.await;
    }));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, jobset_apiserver::tls::kubeconfig_yaml(&url, &creds, "t")).unwrap();
    let manifest = dir.path().join("widget.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  size: 2\n  failurPolicy: Ignore\n",
    )
    .unwrap();
    let kubectl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&kubeconfig).args(args).arg("-f").arg(&manifest).env("HOME", dir.path());
        cmd.kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(KUBECTL_TIMEOUT, cmd.output())
                .await
                .expect("kubectl finishes")
                .expect("kubectl runs");
            (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let (ok, stderr) = kubectl(&["create"]).await;
    assert!(!ok, "{stderr}");
    let file = manifest.display();
    assert!(
        stderr.contains(&format!(
            r#"Error from server (BadRequest): error when creating "{file}": Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.failurPolicy""#
        )),
        "{stderr}"
    );
    let (ok, stderr) = kubectl(&["create", "--validate=warn"]).await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains(r#"Warning: unknown field "spec.failurPolicy""#), "{stderr}");
    stop.send(()).ok();
    task.await.unwrap().unwrap();
}
