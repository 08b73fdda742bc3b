//! AppWrapper admission is built in: upstream's validating webhook rejects bad AppWrappers on
//! create, and changes of what it checked on update, with kube-apiserver's 422 Status.

#[path = "common/admission.rs"]
mod admission;
use admission::{Causes, invalid_for, owned, send};
use http::Method;
use jobset_apiserver::ApiServer;
use serde_json::{Value, json};

const APPWRAPPERS: &str = "/apis/workload.codeflare.dev/v1beta2/namespaces/default/appwrappers";
const IMMUTABLE: &str = "Forbidden: attempt to change immutable field";

fn pod_template() -> Value {
    json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}})
}

/// An AppWrapper under construction: upstream's `wrapped-job` sample shape.
struct Aw(Value);

impl Aw {
    /// Wraps a Job of 2 pods and declares its podSet.
    fn job(name: &str) -> Aw {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": format!("{name}-job")},
            "spec": {"parallelism": 2, "completions": 2, "template": pod_template()}});
        Aw(json!({
            "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"components": [{"podSets": [{"replicas": 2, "path": "template.spec.template"}], "template": job}]},
        }))
    }

    /// Sets the field at JSON pointer `pointer`, whose parent object exists.
    fn with(mut self, pointer: &str, value: Value) -> Aw {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let parent = self.0.pointer_mut(parent).and_then(Value::as_object_mut).unwrap_or_else(|| panic!("{pointer}"));
        parent.insert(key.to_string(), value);
        self
    }

    fn component(mut self, component: Value) -> Aw {
        self.0["spec"]["components"].as_array_mut().unwrap().push(component);
        self
    }
}

/// Asserts a 422 Invalid Status for the AppWrapper `name` and returns its causes.
fn invalid(code: u16, status: &Value, name: &str) -> Causes {
    invalid_for(code, status, "workload.codeflare.dev", "AppWrapper", name)
}

#[tokio::test]
async fn a_wrapped_job_is_accepted_as_sent() {
    let app = ApiServer::in_memory().router();
    let aw = Aw::job("ok").0;
    let (code, created) = send(&app, Method::POST, APPWRAPPERS, &aw).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"], aw["spec"]);
    // Without declared podSets the Job's are inferred, which is as good.
    let mut inferred = Aw::job("inferred").0;
    inferred["spec"]["components"][0].as_object_mut().unwrap().remove("podSets");
    let (code, created) = send(&app, Method::POST, APPWRAPPERS, &inferred).await;
    assert_eq!(code, 201, "{created}");
}

#[tokio::test]
async fn bad_appwrappers_are_rejected_with_upstream_messages() {
    let app = ApiServer::in_memory().router();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": pod_template()["spec"]});
    let nine_pods = Value::Array(vec![json!({"template": pod}); 9]);
    let shown_pod = r#"{"template":{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"image":"busybox","name":"main"}],"restartPolicy":"Never"}}}"#;
    let shown_pods = format!("[{}]", [shown_pod; 9].join(","));
    let nested = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "inner"}, "spec": {"components": []}});
    let cases: Vec<(Aw, Causes)> = vec![
        (
            Aw::job("nested").component(json!({"template": nested})),
            owned(&[(
                "FieldValueForbidden",
                "spec.components[1].template",
                "Forbidden: Nested AppWrappers are forbidden",
            )]),
        ),
        (
            Aw::job("elsewhere").with("/spec/components/0/template/metadata/namespace", json!("kube-system")),
            owned(&[(
                "FieldValueForbidden",
                "spec.components[0].template.metadata.namespace",
                "Forbidden: AppWrappers cannot create objects in other namespaces",
            )]),
        ),
        (
            Aw::job("bad-path").with("/spec/components/0/podSets/0/path", json!("template.spec.pods[0]")),
            owned(&[
                (
                    "FieldValueInvalid",
                    "spec.components[0].podSets[0].path",
                    "Invalid value: \"template.spec.pods[0]\": path does not refer to a v1.PodSpecTemplate: at path position 'template.spec.' missing field 'pods'",
                ),
                (
                    "FieldValueInvalid",
                    "spec.components[0].podSets",
                    "Invalid value: [{\"replicas\":2,\"path\":\"template.spec.pods[0]\"}]: PodSet with path 'template.spec.template' is missing",
                ),
            ]),
        ),
        (
            Aw::job("replicas").with("/spec/components/0/podSets/0/replicas", json!(4)),
            owned(&[(
                "FieldValueInvalid",
                "spec.components[0].podSets",
                "Invalid value: [{\"replicas\":4,\"path\":\"template.spec.template\"}]: replica count 4 differs from inferred count 2 for PodSet at path position 'template.spec.template'",
            )]),
        ),
        (
            Aw::job("empty").with("/spec/components", json!([])),
            owned(&[("FieldValueInvalid", "spec.components", "Invalid value: []: components contains no podspecs")]),
        ),
        (
            Aw::job("too-many").with("/spec/components", nine_pods),
            vec![(
                "FieldValueInvalid".into(),
                "spec.components".into(),
                format!("Invalid value: {shown_pods}: components contains 9 podspecs; at most 8 are allowed"),
            )],
        ),
        (
            Aw::job("shapeless").with("/spec/components", json!({"template": {}})),
            owned(&[(
                "FieldValueTypeInvalid",
                "spec.components",
                "Invalid value: \"object\": spec.components in body must be of type array: \"object\"",
            )]),
        ),
    ];
    for (aw, want) in cases {
        let name = aw.0["metadata"]["name"].as_str().unwrap().to_string();
        let (code, status) = send(&app, Method::POST, APPWRAPPERS, &aw.0).await;
        assert_eq!(invalid(code, &status, &name), want, "{name}");
        let (code, _) = send(&app, Method::GET, &format!("{APPWRAPPERS}/{name}"), &json!({})).await;
        assert_eq!(code, 404, "{name} was stored");
    }

    let (code, status) =
        send(&app, Method::POST, APPWRAPPERS, &Aw::job("msg").component(json!({"template": 7})).0).await;
    invalid(code, &status, "msg");
    assert_eq!(
        status["message"],
        // The CRD schema rejects it before the validating webhook sees it, as on a cluster.
        "AppWrapper.workload.codeflare.dev \"msg\" is invalid: spec.components[1].template: Invalid value: \"integer\": spec.components[1].template in body must be of type object: \"integer\""
    );
}

#[tokio::test]
async fn updates_may_suspend_but_not_change_templates() {
    let app = ApiServer::in_memory().router();
    let (code, created) = send(&app, Method::POST, APPWRAPPERS, &Aw::job("imm").0).await;
    assert_eq!(code, 201, "{created}");
    let uri = format!("{APPWRAPPERS}/imm");

    let mut changed = created.clone();
    changed["spec"]["components"][0]["template"]["spec"]["parallelism"] = json!(3);
    changed["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    let (code, status) = send(&app, Method::PUT, &uri, &changed).await;
    assert_eq!(
        invalid(code, &status, "imm"),
        owned(&[
            ("FieldValueForbidden", "spec.components[0].template.raw", IMMUTABLE),
            ("FieldValueForbidden", "spec.managedBy", IMMUTABLE),
        ])
    );

    // What Kueue writes to admit a workload: the suspend bit and podSetInfos.
    let mut admitted = created.clone();
    admitted["spec"]["suspend"] = json!(true);
    admitted["spec"]["components"][0]["podSetInfos"] = json!([{"nodeSelector": {"zone": "a"}}]);
    let (code, updated) = send(&app, Method::PUT, &uri, &admitted).await;
    assert_eq!(code, 200, "{updated}");
    let (code, stored) = send(&app, Method::GET, &uri, &json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(stored["spec"]["suspend"], true);
    assert_eq!(stored["spec"]["components"][0]["podSetInfos"][0]["nodeSelector"]["zone"], "a");
    assert_eq!(stored["spec"]["components"][0]["template"], created["spec"]["components"][0]["template"]);
}

/// The CRD's schema, not the webhook, rejects a spec of the wrong shape, with kube-apiserver's
/// causes (the webhook never sees it); `null` members count as absent.
#[tokio::test]
async fn a_spec_of_the_wrong_shape_is_rejected_by_the_crd_schema() {
    let app = ApiServer::in_memory().router();
    let type_invalid = |field: &str, got: &str, want: &str| {
        (
            "FieldValueTypeInvalid".to_string(),
            field.to_string(),
            format!("Invalid value: \"{got}\": {field} in body must be of type {want}: \"{got}\""),
        )
    };
    let cases: Vec<(Aw, Causes)> = vec![
        (
            Aw::job("components-not-a-list").with("/spec/components", json!("x")),
            vec![type_invalid("spec.components", "string", "array")],
        ),
        (Aw::job("spec-not-an-object").with("/spec", json!([1])), vec![type_invalid("spec", "array", "object")]),
        (
            Aw::job("component-not-an-object").with("/spec/components", json!([3])),
            vec![type_invalid("spec.components[0]", "integer", "object")],
        ),
        (
            Aw::job("pod-set-fields")
                .with("/spec/components/0/podSets", json!([{"replicas": "2", "path": 7, "annotations": {"a": 1}}])),
            vec![
                type_invalid("spec.components[0].podSets[0].annotations.a", "integer", "string"),
                type_invalid("spec.components[0].podSets[0].path", "integer", "string"),
                type_invalid("spec.components[0].podSets[0].replicas", "string", "integer"),
            ],
        ),
        (
            Aw::job("replicas-beyond-int32").with("/spec/components/0/podSets/0/replicas", json!(3_000_000_000u64)),
            owned(&[(
                "FieldValueInvalid",
                "<nil>",
                "Invalid value: \"\": Checked value must be of type integer with format int32 in spec.components[0].podSets[0].replicas",
            )]),
        ),
        (
            Aw::job("suspend-and-managed-by").with("/spec/suspend", json!("yes")).with("/spec/managedBy", json!(1)),
            vec![
                type_invalid("spec.managedBy", "integer", "string"),
                type_invalid("spec.suspend", "string", "boolean"),
            ],
        ),
        (
            Aw::job("pod-set-info").with("/spec/components/0/podSetInfos", json!([{"tolerations": "none"}])),
            vec![type_invalid("spec.components[0].podSetInfos[0].tolerations", "string", "array")],
        ),
    ];
    for (aw, want) in cases {
        let name = aw.0["metadata"]["name"].as_str().unwrap().to_string();
        let (code, status) = send(&app, Method::POST, APPWRAPPERS, &aw.0).await;
        assert_eq!(invalid(code, &status, &name), want, "{name}");
    }
    let nulls = Aw::job("nulls")
        .with("/spec/managedBy", Value::Null)
        .with("/spec/components/0/annotations", Value::Null)
        .with("/spec/components/0/podSetInfos", Value::Null)
        .with(
            "/spec/components/0/podSets",
            json!([{"replicas": 2, "path": "template.spec.template", "annotations": null}]),
        );
    let (code, created) = send(&app, Method::POST, APPWRAPPERS, &nulls.0).await;
    assert_eq!(code, 201, "{created}");
}
