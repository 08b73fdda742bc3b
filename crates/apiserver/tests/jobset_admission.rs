//! JobSet admission is built in: upstream's webhook defaults on create, and the CRD schema, CEL
//! rules and webhook checks reject bad JobSets with kube-apiserver's 422 Status.

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
