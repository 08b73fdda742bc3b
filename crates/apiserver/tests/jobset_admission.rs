//! JobSet admission is built in: upstream's webhook defaults on create, and the CRD schema, CEL
//! rules (the server's, before admission) and webhook checks reject bad JobSets with
//! kube-apiserver's 422 Status. A restart brings a stored JobSet CRD up to this binary's.
//! Upstream's pod webhooks of exclusive placement are built in as well, unless JobSet admission
//! is external.

mod common;

use common::{Transport, harness};
#[path = "common/admission.rs"]
mod admission;
use admission::{Causes, invalid_for, owned, send};
use http::Method;
use jobset_api::jobset::JobSet;
use jobset_apiserver::ApiServer;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const JOBSETS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets";

fn jobset(name: &str) -> Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "template": {"spec": {"parallelism": 1, "completions": 1,
                    "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2,
                    "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}},
            ],
            "failurePolicy": {"maxRestarts": 2, "rules": [{"action": "FailJobSet", "targetReplicatedJobs": ["leader"]}]},
        },
    })
}

/// Changes a JobSet in place, for a table of cases.
type Mutate = fn(&mut Value);
/// A wanted Status cause: reason, field, message.
type Cause<'a> = (&'a str, &'a str, &'a str);

/// Rules were not run because the object already failed the schema (`hasBlockingErr`).
const NOT_CHECKED: &str = "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// Asserts a 422 Invalid Status for the JobSet `name` and returns its causes.
fn invalid(code: u16, status: &Value, name: &str) -> Causes {
    invalid_for(code, status, "jobset.x-k8s.io", "JobSet", name)
}

#[tokio::test]
async fn webhook_errors_come_back_as_a_422_with_upstream_messages() {
    let app = ApiServer::in_memory().router();
    let mut bad = jobset("bad");
    bad["spec"]["failurePolicy"]["rules"][0]["targetReplicatedJobs"] = json!(["ghost"]);
    bad["spec"]["successPolicy"] = json!({"operator": "All", "targetReplicatedJobs": ["nobody"]});
    let (code, status) = send(&app, Method::POST, JOBSETS, &bad).await;
    let causes = invalid(code, &status, "bad");
    assert_eq!(
        status["message"],
        "JobSet.jobset.x-k8s.io \"bad\" is invalid: [<nil>: Internal error: invalid replicatedJob name 'nobody' does not appear in .spec.ReplicatedJobs, <nil>: Internal error: invalid replicatedJob name 'ghost' in failure policy does not appear in .spec.ReplicatedJobs]"
    );
    assert_eq!(
        causes,
        owned(&[
            (
                "InternalError",
                "<nil>",
                "Internal error: invalid replicatedJob name 'nobody' does not appear in .spec.ReplicatedJobs"
            ),
            (
                "InternalError",
                "<nil>",
                "Internal error: invalid replicatedJob name 'ghost' in failure policy does not appear in .spec.ReplicatedJobs"
            ),
        ])
    );

    let mut long = jobset("long");
    long["spec"]["replicatedJobs"][0]["groupName"] = json!("Not_A_Label");
    let (code, status) = send(&app, Method::POST, JOBSETS, &long).await;
    let causes = invalid(code, &status, "long");
    let dns1035 = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    assert_eq!(
        status["message"],
        format!(
            "JobSet.jobset.x-k8s.io \"long\" is invalid: spec.replicatedJobs[0].groupName: Invalid value: \"Not_A_Label\": {dns1035}"
        )
    );
    assert_eq!(
        causes,
        vec![(
            "FieldValueInvalid".to_string(),
            "spec.replicatedJobs[0].groupName".to_string(),
            format!("Invalid value: \"Not_A_Label\": {dns1035}")
        )]
    );
}

#[tokio::test]
async fn schema_errors_come_back_as_kube_apiserver_words_them() {
    let app = ApiServer::in_memory().router();
    let mut bad = jobset("schema");
    bad["spec"]["failurePolicy"]["rules"][0]["action"] = json!("Foo");
    bad["spec"]["replicatedJobs"][1]["replicas"] = json!("two");
    let (code, status) = send(&app, Method::POST, JOBSETS, &bad).await;
    let causes = invalid(code, &status, "schema");
    let skipped = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";
    assert_eq!(
        causes,
        owned(&[
            (
                "FieldValueNotSupported",
                "spec.failurePolicy.rules[0].action",
                "Unsupported value: \"Foo\": supported values: \"FailJobSet\", \"RestartJobSet\", \"RestartJobSetAndIgnoreMaxRestarts\", \"RestartJob\", \"RestartJobAndIgnoreMaxRestarts\", \"RestartReplicatedJob\", \"RestartReplicatedJobAndIgnoreMaxRestarts\", \"FailJob\""
            ),
            (
                "FieldValueTypeInvalid",
                "spec.replicatedJobs[1].replicas",
                "Invalid value: \"string\": spec.replicatedJobs[1].replicas in body must be of type integer: \"string\""
            ),
            // Kubernetes 1.36 renders the nil value as JSON: `null`, unquoted.
            ("FieldValueInvalid", "<nil>", &format!("Invalid value: null: {skipped}")),
        ])
    );
    assert!(
        status["message"].as_str().unwrap().starts_with(
            "JobSet.jobset.x-k8s.io \"schema\" is invalid: [spec.failurePolicy.rules[0].action: Unsupported value: \"Foo\""
        ),
        "{status}"
    );

    let mut cel = jobset("cel");
    cel["spec"]["startupPolicy"] = json!({"startupPolicyOrder": "InOrder"});
    cel["spec"]["replicatedJobs"][1]["dependsOn"] = json!([{"name": "leader", "status": "Ready"}]);
    let (code, status) = send(&app, Method::POST, JOBSETS, &cel).await;
    let causes = invalid(code, &status, "cel");
    assert_eq!(
        causes,
        owned(&[(
            "FieldValueInvalid",
            "spec",
            "Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive"
        )])
    );
}

#[tokio::test]
async fn created_jobsets_are_defaulted_and_keep_unknown_fields() {
    let h = harness(Transport::InProcess).await;
    let api: Api<kube::api::DynamicObject> =
        Api::default_namespaced_with(h.client.clone(), &kube::api::ApiResource::erase::<JobSet>(&()));
    let mut js = jobset("good");
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"] = json!({"rules": [{"action": "FailJob",
        "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]}, "setConditionReason": "ExitCode3"}]});
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    js["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] = json!(["ExitCode3"]);
    let created = api.create(&PostParams::default(), &serde_json::from_value(js).unwrap()).await.unwrap();
    let v = serde_json::to_value(&created).unwrap();
    let spec = &v["spec"];
    assert_eq!(spec["successPolicy"], json!({"operator": "All"}));
    assert_eq!(spec["startupPolicy"], json!({"startupPolicyOrder": "AnyOrder"}));
    assert_eq!(spec["network"], json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true}));
    assert_eq!(spec["failurePolicy"]["restartStrategy"], "Recreate");
    assert_eq!(spec["failurePolicy"]["rules"][0]["name"], "failurePolicyRule0");
    let leader = &spec["replicatedJobs"][0];
    assert_eq!(leader["replicas"], 1);
    assert_eq!(leader["groupName"], "default");
    assert_eq!(leader["template"]["spec"]["completionMode"], "Indexed");
    assert_eq!(leader["template"]["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(spec["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"], "OnFailure");
    assert_eq!(leader["template"]["spec"]["podFailurePolicy"]["rules"][0]["setConditionReason"], "ExitCode3");

    // The typed view reads it back.
    let typed: Api<JobSet> = Api::default_namespaced(h.client.clone());
    let got = typed.get("good").await.unwrap();
    assert_eq!(got.spec.replicated_jobs.len(), 2);
}

#[tokio::test]
async fn updates_of_immutable_fields_are_rejected() {
    let h = harness(Transport::InProcess).await;
    let api: Api<JobSet> = Api::default_namespaced(h.client.clone());
    let created = api.create(&PostParams::default(), &serde_json::from_value(jobset("imm")).unwrap()).await.unwrap();

    let mut changed = created.clone();
    changed.spec.replicated_jobs[1].replicas = 3;
    let err = api.replace("imm", &PostParams::default(), &changed).await.unwrap_err();
    let kube::Error::Api(s) = err else { panic!("{err:?}") };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    assert!(
        s.message.starts_with("JobSet.jobset.x-k8s.io \"imm\" is invalid: spec.replicatedJobs: Invalid value: "),
        "{}",
        s.message
    );
    assert!(s.message.ends_with(": field is immutable"), "{}", s.message);

    let mut changed = created.clone();
    changed.spec.failure_policy.as_mut().unwrap().max_restarts = 9;
    let err = api.replace("imm", &PostParams::default(), &changed).await.unwrap_err();
    let kube::Error::Api(s) = err else { panic!("{err:?}") };
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        // Since Kubernetes 1.35 a CEL rule's error leaves out an object's value (`OmitValueType`).
        "JobSet.jobset.x-k8s.io \"imm\" is invalid: spec.failurePolicy: Invalid value: Value is immutable"
    );

    // Suspending and elastic scaling are allowed.
    let mut changed = created.clone();
    changed.spec.suspend = Some(true);
    let tmpl = &mut changed.spec.replicated_jobs[1].template.0["spec"];
    tmpl["parallelism"] = json!(4);
    tmpl["completions"] = json!(4);
    let updated = api.replace("imm", &PostParams::default(), &changed).await.unwrap();
    assert_eq!(updated.spec.replicated_jobs[1].template.parallelism(), Some(4));
    assert!(updated.suspended());
}

#[tokio::test]
async fn a_claim_policy_checks_the_claim_that_already_exists() {
    let app = ApiServer::in_memory().router();
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-vcp"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let (code, _) = send(&app, Method::POST, "/api/v1/namespaces/default/persistentvolumeclaims", &pvc).await;
    assert_eq!(code, 201);
    let mut js = jobset("vcp");
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    js["spec"]["volumeClaimPolicies"] = json!([{"templates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}]}]);
    let (code, status) = send(&app, Method::POST, JOBSETS, &js).await;
    let causes = invalid(code, &status, "vcp");
    assert_eq!(
        causes,
        owned(&[
            (
                "FieldValueInvalid",
                "spec.volumeClaimPolicies[0].template[0]",
                "Invalid value: \"data\": spec does not match existing PVC data-vcp in namespace default"
            ),
            (
                "FieldValueInvalid",
                "spec.volumeClaimPolicies[0].template[0]",
                "Invalid value: \"data\": retentionPolicy must be retain when PVC exists"
            ),
        ])
    );
    // Retained and matching: the existing claim is reused.
    js["spec"]["volumeClaimPolicies"][0]["retentionPolicy"] = json!({"whenDeleted": "Retain"});
    js["spec"]["volumeClaimPolicies"][0]["templates"][0]["spec"]["accessModes"] = json!(["ReadWriteOnce"]);
    let (code, status) = send(&app, Method::POST, JOBSETS, &js).await;
    assert_eq!(code, 201, "{status}");
}

/// Sets the field at JSON pointer `pointer`, creating missing objects on the way.
fn set(v: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let mut cur = v;
    for seg in parent.split('/').skip(1) {
        cur = match cur {
            Value::Array(items) => &mut items[seg.parse::<usize>().unwrap()],
            other => other.as_object_mut().unwrap().entry(seg).or_insert_with(|| json!({})),
        };
    }
    match cur {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        other => {
            other.as_object_mut().unwrap_or_else(|| panic!("{pointer}")).insert(key.to_string(), value);
        }
    }
}

/// Every rule of the JobSet CRD's schema and CEL rules (type, required, enum, maxItems, minimum,
/// int32 format, list-map key, cross-field rules): the API server enforces them before admission,
/// with kube-apiserver's causes; a blocking schema error leaves the CEL rules unchecked.
#[tokio::test]
async fn the_crd_schema_and_cel_rules_reject_bad_jobsets_with_kube_apiserver_s_causes() {
    let app = ApiServer::in_memory().router();
    let not_checked = ("FieldValueInvalid", "<nil>", NOT_CHECKED);
    let actions = "\"FailJobSet\", \"RestartJobSet\", \"RestartJobSetAndIgnoreMaxRestarts\", \"RestartJob\", \"RestartJobAndIgnoreMaxRestarts\", \"RestartReplicatedJob\", \"RestartReplicatedJobAndIgnoreMaxRestarts\", \"FailJob\"";
    let action_unsupported = format!("Unsupported value: \"Foo\": supported values: {actions}");
    let cases: Vec<(&str, Mutate, Vec<Cause>)> = vec![
        (
            "action-outside-the-enum",
            |v| set(v, "/spec/failurePolicy/rules/0/action", json!("Foo")),
            vec![("FieldValueNotSupported", "spec.failurePolicy.rules[0].action", &action_unsupported), not_checked],
        ),
        (
            "fractional-ttl",
            |v| set(v, "/spec/ttlSecondsAfterFinished", json!(1.5)),
            vec![
                (
                    "FieldValueTypeInvalid",
                    "spec.ttlSecondsAfterFinished",
                    "Invalid value: \"number\": spec.ttlSecondsAfterFinished in body must be of type integer: \"number\"",
                ),
                not_checked,
            ],
        ),
        (
            "network-not-an-object",
            |v| set(v, "/spec/network", json!("x")),
            vec![
                (
                    "FieldValueTypeInvalid",
                    "spec.network",
                    "Invalid value: \"string\": spec.network in body must be of type object: \"string\"",
                ),
                not_checked,
            ],
        ),
        (
            "suspend-not-a-boolean",
            |v| set(v, "/spec/suspend", json!("yes")),
            vec![
                (
                    "FieldValueTypeInvalid",
                    "spec.suspend",
                    "Invalid value: \"string\": spec.suspend in body must be of type boolean: \"string\"",
                ),
                not_checked,
            ],
        ),
        (
            "replicated-job-without-a-name",
            |v| {
                v["spec"]["replicatedJobs"][0].as_object_mut().unwrap().remove("name");
            },
            vec![("FieldValueRequired", "spec.replicatedJobs[0].name", "Required value"), not_checked],
        ),
        (
            "rule-without-an-action",
            |v| {
                v["spec"]["failurePolicy"]["rules"][0].as_object_mut().unwrap().remove("action");
            },
            vec![("FieldValueRequired", "spec.failurePolicy.rules[0].action", "Required value"), not_checked],
        ),
        (
            "restart-strategy-outside-the-enum",
            |v| set(v, "/spec/failurePolicy/restartStrategy", json!("Never")),
            vec![
                (
                    "FieldValueNotSupported",
                    "spec.failurePolicy.restartStrategy",
                    "Unsupported value: \"Never\": supported values: \"Recreate\", \"BlockingRecreate\", \"InPlaceRestart\"",
                ),
                not_checked,
            ],
        ),
        (
            "success-operator-outside-the-enum",
            |v| set(v, "/spec/successPolicy", json!({"operator": "Some"})),
            vec![
                (
                    "FieldValueNotSupported",
                    "spec.successPolicy.operator",
                    "Unsupported value: \"Some\": supported values: \"All\", \"Any\"",
                ),
                not_checked,
            ],
        ),
        (
            "startup-order-outside-the-enum",
            |v| set(v, "/spec/startupPolicy", json!({"startupPolicyOrder": "Random"})),
            vec![
                (
                    "FieldValueNotSupported",
                    "spec.startupPolicy.startupPolicyOrder",
                    "Unsupported value: \"Random\": supported values: \"AnyOrder\", \"InOrder\"",
                ),
                not_checked,
            ],
        ),
        (
            "depends-on-status-outside-the-enum",
            |v| set(v, "/spec/replicatedJobs/1/dependsOn", json!([{"name": "leader", "status": "Done"}])),
            vec![
                (
                    "FieldValueNotSupported",
                    "spec.replicatedJobs[1].dependsOn[0].status",
                    "Unsupported value: \"Done\": supported values: \"Ready\", \"Complete\"",
                ),
                not_checked,
            ],
        ),
        (
            "when-deleted-outside-the-enum",
            |v| {
                set(
                    v,
                    "/spec/volumeClaimPolicies",
                    json!([{"templates": [], "retentionPolicy": {"whenDeleted": "Keep"}}]),
                )
            },
            vec![
                (
                    "FieldValueNotSupported",
                    "spec.volumeClaimPolicies[0].retentionPolicy.whenDeleted",
                    "Unsupported value: \"Keep\": supported values: \"Delete\", \"Retain\"",
                ),
                not_checked,
            ],
        ),
        (
            "more-than-five-depends-on",
            |v| {
                let deps = (0..6).map(|i| json!({"name": format!("d{i}"), "status": "Ready"})).collect();
                set(v, "/spec/replicatedJobs/1/dependsOn", Value::Array(deps));
            },
            vec![
                ("FieldValueTooMany", "spec.replicatedJobs[1].dependsOn", "Too many: 6: must have at most 5 items"),
                not_checked,
            ],
        ),
        // A bound does not block the CEL rules.
        (
            "negative-replicas",
            |v| set(v, "/spec/replicatedJobs/0/replicas", json!(-1)),
            vec![(
                "FieldValueInvalid",
                "spec.replicatedJobs[0].replicas",
                "Invalid value: -1: spec.replicatedJobs[0].replicas in body should be greater than or equal to 0",
            )],
        ),
        (
            "negative-ttl",
            |v| set(v, "/spec/ttlSecondsAfterFinished", json!(-5)),
            vec![(
                "FieldValueInvalid",
                "spec.ttlSecondsAfterFinished",
                "Invalid value: -5: spec.ttlSecondsAfterFinished in body should be greater than or equal to 0",
            )],
        ),
        (
            "replicas-beyond-int32",
            |v| set(v, "/spec/replicatedJobs/0/replicas", json!(4294967296i64)),
            vec![(
                "FieldValueInvalid",
                "<nil>",
                "Invalid value: \"\": Checked value must be of type integer with format int32 in spec.replicatedJobs[0].replicas",
            )],
        ),
        (
            "duplicate-replicated-job-names",
            |v| set(v, "/spec/replicatedJobs/1/name", json!("leader")),
            vec![("FieldValueDuplicate", "spec.replicatedJobs[1]", "Duplicate value: {\"name\":\"leader\"}")],
        ),
        (
            "in-order-startup-with-depends-on",
            |v| {
                set(v, "/spec/startupPolicy", json!({"startupPolicyOrder": "InOrder"}));
                set(v, "/spec/replicatedJobs/1/dependsOn", json!([{"name": "leader", "status": "Ready"}]));
            },
            vec![(
                "FieldValueInvalid",
                "spec",
                "Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive",
            )],
        ),
        (
            "volume-claim-template-with-a-namespace",
            |v| {
                set(
                    v,
                    "/spec/volumeClaimPolicies",
                    json!([{"templates": [{"metadata": {"name": "data", "namespace": "x"}}]}]),
                )
            },
            vec![(
                "FieldValueInvalid",
                "spec.volumeClaimPolicies[0]",
                "Invalid value: namespace cannot be set for VolumeClaimPolicies templates",
            )],
        ),
    ];
    for (name, mutate, want) in cases {
        let mut js = jobset(name);
        mutate(&mut js);
        let (code, status) = send(&app, Method::POST, JOBSETS, &js).await;
        assert_eq!(invalid(code, &status, name), owned(&want), "{name}");
        let (code, _) = send(&app, Method::GET, &format!("{JOBSETS}/{name}"), &json!({})).await;
        assert_eq!(code, 404, "{name} was stored");
    }
}

/// The CRD's `self == oldSelf` rules make the policies and `dependsOn` immutable, with
/// kube-apiserver's `Value is immutable`; leaving out a field the schema defaults is no change.
#[tokio::test]
async fn the_crd_s_immutability_rules_reject_updates_and_schema_defaults_apply_on_update() {
    let app = ApiServer::in_memory().router();
    let mut js = jobset("upd");
    set(&mut js, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": "data"}}]}]));
    set(
        &mut js,
        "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
        json!([{"name": "data", "mountPath": "/d"}]),
    );
    set(&mut js, "/spec/replicatedJobs/1/dependsOn", json!([{"name": "leader", "status": "Ready"}]));
    set(&mut js, "/spec/network", json!({"subdomain": "s"}));
    let (code, created) = send(&app, Method::POST, JOBSETS, &js).await;
    assert_eq!(code, 201, "{created}");
    let uri = format!("{JOBSETS}/upd");
    let immutable = |field: &'static str| ("FieldValueInvalid", field, "Invalid value: Value is immutable");
    let cases: Vec<(Mutate, Vec<Cause>)> = vec![
        (|v| set(v, "/spec/network/subdomain", json!("other")), vec![immutable("spec.network")]),
        (|v| set(v, "/spec/successPolicy/operator", json!("Any")), vec![immutable("spec.successPolicy")]),
        (|v| set(v, "/spec/failurePolicy/maxRestarts", json!(9)), vec![immutable("spec.failurePolicy")]),
        (
            |v| set(v, "/spec/startupPolicy/startupPolicyOrder", json!("InOrder")),
            vec![
                ("FieldValueInvalid", "spec", "Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive"),
                immutable("spec.startupPolicy"),
            ],
        ),
        (
            |v| set(v, "/spec/volumeClaimPolicies/0/retentionPolicy/whenDeleted", json!("Retain")),
            vec![immutable("spec.volumeClaimPolicies")],
        ),
        (
            |v| set(v, "/spec/replicatedJobs/1/dependsOn/0/status", json!("Complete")),
            vec![immutable("spec.replicatedJobs[1].dependsOn")],
        ),
    ];
    for (mutate, want) in cases {
        let mut changed = created.clone();
        mutate(&mut changed);
        let (code, status) = send(&app, Method::PUT, &uri, &changed).await;
        assert_eq!(invalid(code, &status, "upd"), owned(&want));
    }
    let mut omitted = created.clone();
    for pointer in ["/spec/replicatedJobs/0", "/spec/failurePolicy", "/spec/volumeClaimPolicies/0/retentionPolicy"] {
        let field = ["replicas", "groupName", "restartStrategy", "whenDeleted"];
        let obj = omitted.pointer_mut(pointer).and_then(Value::as_object_mut).unwrap();
        field.iter().for_each(|f| {
            obj.remove(*f);
        });
    }
    let (code, updated) = send(&app, Method::PUT, &uri, &omitted).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"], created["spec"], "the schema defaults came back");
    assert_eq!(updated["metadata"]["generation"], 1, "no change");
}

/// A data dir written by a binary whose JobSet CRD had an open schema: on the next start the
/// CRD's spec is this binary's (the schema is enforced) and the stored JobSets are kept as they
/// were; a start with the CRD already current writes nothing.
#[tokio::test]
async fn a_restart_upgrades_a_stored_preinstalled_crd_and_keeps_the_jobsets() {
    use jobset_apiserver::persist::Redb;
    let dir = tempfile::tempdir().unwrap();
    let open =
        || ApiServer::new(Box::new(Redb::open(dir.path()).unwrap()), Default::default(), Default::default()).unwrap();
    let crd_uri = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io";
    let (current_spec, old_rv) = {
        let app = open().router();
        let (code, crd) = send(&app, Method::GET, crd_uri, &json!({})).await;
        assert_eq!(code, 200, "{crd}");
        let mut old = crd.clone();
        for version in old["spec"]["versions"].as_array_mut().unwrap() {
            version["schema"] =
                json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
        }
        let (code, stored) = send(&app, Method::PUT, crd_uri, &old).await;
        assert_eq!(code, 200, "{stored}");
        let mut js = jobset("kept");
        js["spec"]["failurPolicy"] = json!({"maxRestarts": 1});
        let (code, created) = send(&app, Method::POST, JOBSETS, &js).await;
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["spec"]["failurPolicy"], json!({"maxRestarts": 1}), "the open schema keeps it");
        (crd["spec"].clone(), stored["metadata"]["resourceVersion"].clone())
    };

    let app = open().router();
    let (_, crd) = send(&app, Method::GET, crd_uri, &json!({})).await;
    assert_eq!(crd["spec"], current_spec, "upgraded");
    assert_ne!(crd["metadata"]["resourceVersion"], old_rv);
    let (code, kept) = send(&app, Method::GET, &format!("{JOBSETS}/kept"), &json!({})).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["failurPolicy"], json!({"maxRestarts": 1}), "stored objects are not rewritten");
    let mut js = jobset("new");
    js["spec"]["failurPolicy"] = json!({"maxRestarts": 1});
    let (code, created) = send(&app, Method::POST, JOBSETS, &js).await;
    assert_eq!(code, 201, "{created}");
    assert!(created["spec"].get("failurPolicy").is_none(), "the new schema prunes: {created}");
    let upgraded_rv = crd["metadata"]["resourceVersion"].clone();
    drop(app);

    let app = open().router();
    let (_, crd) = send(&app, Method::GET, crd_uri, &json!({})).await;
    assert_eq!(crd["metadata"]["resourceVersion"], upgraded_rv, "an up-to-date CRD is left alone");
}

// ---------------------------------------------------------------------------------------------
// Exclusive placement: upstream JobSet's pod webhooks, built in.

const RACK: &str = "example.com/rack";

/// A pod of Job `js-w-0` (uid `job-uid`) of an exclusive JobSet `js`, completion index `index`,
/// named by the server as the Job controller's are (`<job>-<index>-<suffix>`).
fn exclusive_pod(index: &str) -> k8s_openapi::api::core::v1::Pod {
    use jobset_api::jobset::keys::{EXCLUSIVE_TOPOLOGY, JOB_INDEX, JOB_KEY, JOBSET_NAME, REPLICATED_JOB_NAME};
    let labels = json!({JOBSET_NAME: "js", REPLICATED_JOB_NAME: "w", JOB_INDEX: "0", JOB_KEY: "k0"});
    let mut annotations = labels.clone();
    annotations[EXCLUSIVE_TOPOLOGY] = json!(RACK);
    annotations["batch.kubernetes.io/job-completion-index"] = json!(index);
    serde_json::from_value(json!({
        "metadata": {"generateName": format!("js-w-0-{index}-"), "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-w-0", "uid": "job-uid", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap()
}

fn anti_affinity_expressions(p: &k8s_openapi::api::core::v1::Pod) -> Value {
    let v = serde_json::to_value(p).unwrap();
    v.pointer("/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/labelSelector/matchExpressions")
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_follower_is_refused_until_its_leader_is_scheduled_then_pinned_to_the_leader_s_domain() {
    use jobset_api::jobset::keys::PRIORITY;
    use k8s_openapi::api::core::v1::{Node, Pod};
    let server = ApiServer::in_memory();
    let client = server.client();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {RACK: "r7"}}})).unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pp = PostParams::default();

    let leader = pods.create(&pp, &exclusive_pod("0")).await.unwrap();
    let spec = leader.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(0), "the Priority admission plugin's default");
    assert_eq!(leader.metadata.labels.as_ref().unwrap()[PRIORITY], "0");
    assert_eq!(
        anti_affinity_expressions(&leader)[2],
        json!({"key": PRIORITY, "operator": "In", "values": ["0"]}),
        "{:?}",
        spec.affinity
    );

    let refused = pods.create(&pp, &exclusive_pod("1")).await.unwrap_err();
    let kube::Error::Api(status) = refused else { panic!("{refused:?}") };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"), "{status:?}");
    assert!(status.message.ends_with("is forbidden: follower pod node selector not set"), "{}", status.message);

    let name = leader.metadata.name.clone().unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    pods.create_subresource::<_, Value>("binding", &name, &pp, &binding).await.unwrap();
    let follower = pods.create(&pp, &exclusive_pod("1")).await.unwrap();
    let spec = follower.spec.as_ref().unwrap();
    assert_eq!(spec.node_selector, Some([(RACK.to_string(), "r7".to_string())].into()));
    assert_eq!(spec.affinity, None, "a follower gets no affinity");
    assert_eq!(follower.metadata.labels.as_ref().unwrap()[PRIORITY], "0");
}

#[tokio::test]
async fn with_external_jobset_admission_the_pod_webhooks_are_the_manager_s() {
    use jobset_api::jobset::keys::PRIORITY;
    use k8s_openapi::api::core::v1::Pod;
    let config = jobset_apiserver::ServerConfig {
        external_admission: vec![("jobset.x-k8s.io".into(), "JobSet".into())],
        ..Default::default()
    };
    let server = ApiServer::new(Box::new(jobset_apiserver::persist::Memory), Default::default(), config).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let leader = pods.create(&PostParams::default(), &exclusive_pod("0")).await.unwrap();
    let spec = leader.spec.as_ref().unwrap();
    assert_eq!((spec.priority, &spec.affinity), (Some(0), &None), "only kube's own defaulting");
    assert!(!leader.metadata.labels.as_ref().unwrap().contains_key(PRIORITY));
    // Nor is a follower refused: the manager's validating webhook does that.
    pods.create(&PostParams::default(), &exclusive_pod("1")).await.unwrap();
}
