//! Admission learns who is asking: the built-in AppWrapper defaulting labels a new AppWrapper
//! with the requesting user (`workload.codeflare.dev/user`, `.../userid`, sanitized as upstream's
//! `utils.SanitizeLabel`), over values the manifest carried, as upstream's mutating webhook.

mod common;

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const USER: &str = "workload.codeflare.dev/user";
const USERID: &str = "workload.codeflare.dev/userid";

/// Creates AppWrapper `name` in `namespace` as `client`, carrying user labels of its own, and
/// returns the user labels it was stored with.
async fn create_appwrapper(client: &Client, namespace: &str, name: &str) -> BTreeMap<String, String> {
    let gvk = GroupVersionKind::gvk("workload.codeflare.dev", "v1beta2", "AppWrapper");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, "appwrappers"));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    let aw = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": name, "labels": {USER: "mallory", USERID: "forged", "team": "a"}},
        "spec": {"components": [{"template": pod}]}});
    let created = api.create(&PostParams::default(), &serde_json::from_value(aw).unwrap()).await.unwrap();
    let labels = created.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"), "other labels are kept");
    // What the server stored, not only what the create answered.
    let stored = api.get(name).await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(stored, labels);
    labels.into_iter().filter(|(k, _)| k == USER || k == USERID).collect()
}

fn user_labels(user: &str, uid: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(USER.to_string(), user.to_string()), (USERID.to_string(), uid.to_string())])
}

#[tokio::test]
async fn an_appwrapper_is_labelled_with_the_admin_over_https_and_in_process() {
    let c = common::https_cluster().await;
    let admin = c.client(&c.creds.token.clone()).await;
    // The server's token is `jobset:admin`, without a uid; `:` is not a label character.
    assert_eq!(create_appwrapper(&admin, "default", "by-token").await, user_labels("jobset_admin", ""));
    // The in-process client is the control plane, given the same admin identity.
    assert_eq!(create_appwrapper(&c.server.client(), "default", "in-process").await, user_labels("jobset_admin", ""));
}

#[tokio::test]
async fn an_appwrapper_is_labelled_with_the_service_account_that_created_it() {
    let c = common::https_cluster().await;
    let admin = c.server.client();
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "submitter", "namespace": "team"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "aw", "namespace": "team"},
               "rules": [{"apiGroups": ["workload.codeflare.dev"], "resources": ["appwrappers"], "verbs": ["create", "get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "aw", "namespace": "team"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "aw"},
               "subjects": [{"kind": "ServiceAccount", "name": "submitter", "namespace": "team"}]}),
    ];
    for obj in objects {
        common::create(&admin, obj).await.unwrap();
    }
    let sa = common::api(&admin, "ServiceAccount", Some("team")).get("submitter").await.unwrap();
    let uid = sa.metadata.uid.unwrap();
    let token = c.server.issue_service_account_token("team", "submitter", None).unwrap();
    let client = c.client(&token).await;
    assert_eq!(
        create_appwrapper(&client, "team", "by-sa").await,
        user_labels("system_serviceaccount_team_submitter", &uid)
    );
}
