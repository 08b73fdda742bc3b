//! Pods, and Jobs' pod templates, get kube-apiserver's pod spec validation: a 422 Invalid Status
//! with upstream's causes at create time, not a runtime failure later. JobSets' templates do not
//! (upstream's JobSet webhook leaves them to the Jobs' creation). A pod's spec then changes only
//! as `ValidatePodUpdate` allows.

mod common;

use common::{Transport, harness};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn container(extra: Value) -> Value {
    let mut c = json!({"name": "c", "image": "busybox"});
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    c
}

/// The 422 Status of a refused create: its message and its causes as (reason, field, message).
fn refused<T: std::fmt::Debug>(result: kube::Result<T>) -> (String, Vec<(String, String, String)>) {
    let err = result.expect_err("the server should refuse it");
    let kube::Error::Api(status) = err else { panic!("not an API error: {err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{status:?}");
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    (status.message, causes.into_iter().map(|c| (c.reason, c.field, c.message)).collect())
}

/// Expected causes: (reason, field, message).
type Want<'a> = Vec<(&'a str, &'a str, &'a str)>;

fn causes(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    list.iter().map(|(r, f, m)| (r.to_string(), f.to_string(), m.to_string())).collect()
}

#[tokio::test]
async fn an_empty_image_is_refused_with_kube_apiserver_s_status() {
    let h = harness(Transport::InProcess).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let (message, got) =
        refused(pods.create(&PostParams::default(), &pod("p", json!({"containers": [{"name": "c"}]}))).await);
    assert_eq!(message, r#"Pod "p" is invalid: spec.containers[0].image: Required value"#);
    assert_eq!(got, causes(&[("FieldValueRequired", "spec.containers[0].image", "Required value")]));
    assert!(pods.get_opt("p").await.unwrap().is_none(), "nothing is stored");
}

#[tokio::test]
async fn malformed_pods_are_refused_with_upstream_s_causes() {
    let h = harness(Transport::Https).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let c = |name: &str| json!({"name": name, "image": "busybox"});
    let exit_codes: Vec<i64> = (1..=256).collect();
    let rule = json!({"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}});
    let bad_name = format!(r#"Invalid value: "Bad_Name": {LABEL_ERR}"#);
    let cases: Vec<(&str, Value, Want)> = vec![
        ("no containers", json!({"containers": []}), vec![("FieldValueRequired", "spec.containers", "Required value")]),
        (
            "a container name that is not a DNS-1123 label",
            json!({"containers": [c("Bad_Name")]}),
            vec![("FieldValueInvalid", "spec.containers[0].name", &bad_name)],
        ),
        (
            "duplicate container names",
            json!({"containers": [c("c"), c("c")]}),
            vec![("FieldValueDuplicate", "spec.containers[1].name", r#"Duplicate value: "c""#)],
        ),
        (
            "an init container named like a container",
            json!({"initContainers": [c("c")], "containers": [c("c")]}),
            vec![("FieldValueDuplicate", "spec.initContainers[0].name", r#"Duplicate value: "c""#)],
        ),
        (
            "an unknown pod restartPolicy",
            json!({"containers": [c("c")], "restartPolicy": "Sometimes"}),
            vec![(
                "FieldValueNotSupported",
                "spec.restartPolicy",
                r#"Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
            )],
        ),
        (
            "the same host port twice",
            json!({"containers": [
                container(json!({"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]})),
                container(json!({"name": "b", "ports": [{"containerPort": 80, "hostPort": 8080}]})),
            ]}),
            vec![("FieldValueDuplicate", "spec.containers[1].ports[0].hostPort", r#"Duplicate value: "TCP//8080""#)],
        ),
        (
            "duplicate port names",
            json!({"containers": [container(json!({"ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81, "name": "http"}]}))]}),
            vec![("FieldValueDuplicate", "spec.containers[0].ports[1].name", r#"Duplicate value: "http""#)],
        ),
        (
            "an unknown container restartPolicy",
            json!({"containers": [container(json!({"restartPolicy": "Sometimes"}))]}),
            vec![(
                "FieldValueNotSupported",
                "spec.containers[0].restartPolicy",
                r#"Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure""#,
            )],
        ),
        (
            "restart rules without a container restartPolicy",
            json!({"containers": [container(json!({"restartPolicyRules": [rule]}))]}),
            vec![(
                "FieldValueRequired",
                "spec.containers[0].restartPolicy",
                "Required value: must specify restartPolicy when restart rules are used",
            )],
        ),
        (
            "more than 20 restart rules",
            json!({"containers": [container(json!({"restartPolicy": "Never", "restartPolicyRules": vec![rule.clone(); 21]}))]}),
            vec![(
                "FieldValueTooMany",
                "spec.containers[0].restartPolicyRules",
                "Too many: 21: must have at most 20 items",
            )],
        ),
        (
            "a restart rule without exitCodes",
            json!({"containers": [container(json!({"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart"}]}))]}),
            vec![(
                "FieldValueRequired",
                "spec.containers[0].restartPolicyRules[0].exitCodes",
                "Required value: must be specified",
            )],
        ),
        (
            "more than 255 exit codes",
            json!({"containers": [container(json!({"restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": exit_codes}}]}))]}),
            vec![(
                "FieldValueTooMany",
                "spec.containers[0].restartPolicyRules[0].exitCodes.values",
                "Too many: 256: must have at most 255 items",
            )],
        ),
        (
            "an unknown exit code operator",
            json!({"containers": [container(json!({"restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "Equals", "values": [1]}}]}))]}),
            vec![(
                "FieldValueNotSupported",
                "spec.containers[0].restartPolicyRules[0].exitCodes.operator",
                r#"Unsupported value: "Equals": supported values: "In", "NotIn""#,
            )],
        ),
    ];
    for (i, (what, spec, want)) in cases.into_iter().enumerate() {
        let (_, got) = refused(pods.create(&PostParams::default(), &pod(&format!("p{i}"), spec)).await);
        assert_eq!(got, causes(&want), "{what}");
    }
}

#[tokio::test]
async fn a_valid_pod_stays_writable_by_agents_and_controllers() {
    let h = harness(Transport::InProcess).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let spec = json!({"containers": [container(json!({"restartPolicy": "Never",
        "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]}))]});
    pods.create(&PostParams::default(), &pod("ok", spec)).await.expect("a valid pod is created");
    let params = PatchParams::default();
    pods.patch_status("ok", &params, &Patch::Merge(json!({"status": {"phase": "Running"}}))).await.unwrap();
    pods.patch("ok", &params, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    // A spec change is checked as a create is.
    let broken = json!({"spec": {"containers": [{"name": "c", "image": ""}]}});
    let (_, got) = refused(pods.patch("ok", &params, &Patch::Strategic(broken)).await);
    assert_eq!(got, causes(&[("FieldValueRequired", "spec.containers[0].image", "Required value")]));
}

#[tokio::test]
async fn a_job_s_pod_template_is_validated_and_a_jobset_s_is_not() {
    let h = harness(Transport::InProcess).await;
    let template = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": ""}]}});
    let jobs: Api<Job> = Api::default_namespaced(h.client.clone());
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": template}})).unwrap();
    let (message, got) = refused(jobs.create(&PostParams::default(), &job).await);
    assert_eq!(message, r#"Job.batch "j" is invalid: spec.template.spec.containers[0].image: Required value"#);
    assert_eq!(got, causes(&[("FieldValueRequired", "spec.template.spec.containers[0].image", "Required value")]));

    // Upstream's JobSet webhook leaves the template to the Job's creation.
    let gvk = GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet");
    let jobsets: Api<DynamicObject> =
        Api::default_namespaced_with(h.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "jobsets"));
    let jobset: DynamicObject = serde_json::from_value(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js"}, "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": template}}}]}}))
    .unwrap();
    jobsets.create(&PostParams::default(), &jobset).await.expect("a JobSet with an empty image is stored");
}

#[tokio::test]
async fn a_scheduling_group_without_a_valid_pod_group_name_is_refused_naming_the_field() {
    let h = harness(Transport::InProcess).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let field = "spec.schedulingGroup.podGroupName";
    let subdomain_err = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let bad_name = format!(r#"Invalid value: "Gang_0": {subdomain_err}"#);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("no podGroupName", json!({}), "Invalid value: null: must specify one of: `podGroupName`"),
        ("an empty podGroupName", json!({"podGroupName": ""}), r#"Invalid value: "": must not be empty"#),
        ("a podGroupName that is no DNS subdomain", json!({"podGroupName": "Gang_0"}), &bad_name),
    ];
    for (case, group, want) in cases {
        let spec = json!({"containers": [container(json!({}))], "schedulingGroup": group});
        let (message, got) = refused(pods.create(&PostParams::default(), &pod("p", spec)).await);
        assert_eq!(message, format!(r#"Pod "p" is invalid: {field}: {want}"#), "{case}");
        assert_eq!(got, causes(&[("FieldValueInvalid", field, want)]), "{case}");
    }
    let spec = json!({"containers": [container(json!({}))], "schedulingGroup": {"podGroupName": "gang-0"}});
    pods.create(&PostParams::default(), &pod("p", spec)).await.expect("a pod in a valid group is created");

    // A Job's template is checked at its own path.
    let jobs: Api<Job> = Api::default_namespaced(h.client.clone());
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [container(json!({}))], "schedulingGroup": {"podGroupName": ""}}}}}))
    .unwrap();
    let (_, got) = refused(jobs.create(&PostParams::default(), &job).await);
    let template_field = format!("spec.template.{field}");
    assert_eq!(got, causes(&[("FieldValueInvalid", &template_field, r#"Invalid value: "": must not be empty"#)]));
}

#[tokio::test]
async fn a_pod_s_gang_link_cannot_be_changed_by_an_update_but_its_labels_can() {
    let h = harness(Transport::InProcess).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let spec = json!({"containers": [container(json!({}))], "schedulingGroup": {"podGroupName": "gang-0"}});
    let created = pods.create(&PostParams::default(), &pod("g", spec)).await.expect("a pod in a group is created");
    let group = |p: &Pod| serde_json::to_value(p).unwrap().pointer("/spec/schedulingGroup/podGroupName").cloned();
    assert_eq!(group(&created), Some(json!("gang-0")));

    let params = PatchParams::default();
    let moved = json!({"spec": {"schedulingGroup": {"podGroupName": "gang-1"}}});
    let (message, got) = refused(pods.patch("g", &params, &Patch::Merge(moved)).await);
    let prefix = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n";
    assert!(message.starts_with(&format!(r#"Pod "g" is invalid: spec: Forbidden: {prefix}"#)), "{message}");
    assert_eq!(got.len(), 1, "{got:?}");
    let (reason, field, cause) = &got[0];
    assert_eq!((reason.as_str(), field.as_str()), ("FieldValueForbidden", "spec"));
    assert!(cause.starts_with(&format!("Forbidden: {prefix}")), "{cause}");
    assert!(cause.contains(r#"+ spec.schedulingGroup.podGroupName: "gang-1""#), "the diff names the change: {cause}");
    let stored = pods.get("g").await.unwrap();
    assert_eq!(group(&stored), Some(json!("gang-0")), "the stored pod is unchanged");
    assert_eq!(stored.metadata.resource_version, created.metadata.resource_version);

    let labelled = pods.patch("g", &params, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    assert_eq!(labelled.metadata.labels.as_ref().and_then(|l| l.get("a")).map(String::as_str), Some("b"));
    assert_eq!(group(&labelled), Some(json!("gang-0")));
}
