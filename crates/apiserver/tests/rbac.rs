//! Service-account tokens from the TokenRequest API, authorized by RBAC, through the HTTPS
//! listener: what `jobset manager` relies on when it runs with a ClusterRole's rights only.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "system:serviceaccount:jobset-system:jobset-controller-manager";

type Cluster = common::HttpsCluster;

async fn cluster() -> Cluster {
    common::https_cluster().await
}

impl common::HttpsCluster {
    /// The admin, in-process.
    fn admin(&self) -> Client {
        self.server.client()
    }

    /// A token from the TokenRequest API, asked over HTTPS with the server's own token.
    async fn token(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: Option<i64>,
    ) -> Result<TokenRequest, kube::Error> {
        let admin = self.client(&self.creds.token.clone()).await;
        let tr = TokenRequest {
            spec: Some(TokenRequestSpec { expiration_seconds, ..Default::default() }),
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(admin, namespace)
            .create_token_request(name, &PostParams::default(), &tr)
            .await
    }

    /// A ServiceAccount and a client holding a token for it.
    async fn service_account(&self, namespace: &str, name: &str) -> (Client, String) {
        create(&self.admin(), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))
            .await
            .ok();
        create(
            &self.admin(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace}}),
        )
        .await
        .unwrap();
        let token = token_of(self.token(namespace, name, None).await.unwrap());
        (self.client(&token).await, token)
    }
}

fn token_of(answer: TokenRequest) -> String {
    answer.status.and_then(|s| s.token).expect("status.token")
}

use common::{api, create};

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
}

fn role(ns: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules})
}

fn sa_subject(ns: &str, name: &str) -> Value {
    json!([{"kind": "ServiceAccount", "name": name, "namespace": ns}])
}

fn cluster_binding(name: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects})
}

fn binding(ns: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}, "subjects": subjects})
}

fn jobset(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": ns},
        "spec": {"suspend": true, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}}]}})
}

fn pod(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"containers": [{"name": "c", "image": "i"}]}})
}

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    status(r.expect_err("the request should have been refused")).code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_refused_until_a_clusterrolebinding_grants_and_discovery_is_always_allowed() {
    let c = cluster().await;
    let (manager, _) = c.service_account("jobset-system", "jobset-controller-manager").await;

    // Discovery needs no binding.
    manager.apiserver_version().await.unwrap();
    manager.list_api_groups().await.unwrap();
    manager.list_api_group_resources("jobset.x-k8s.io/v1alpha2").await.unwrap();
    manager.list_core_api_versions().await.unwrap();

    let all_jobsets = api(&manager, "JobSet", None);
    let s = status(all_jobsets.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(s.code, 403);
    assert_eq!(s.reason, "Forbidden");
    assert_eq!(
        s.message,
        format!(
            "jobsets.jobset.x-k8s.io is forbidden: User \"{MANAGER}\" cannot list resource \"jobsets\" in API group \"jobset.x-k8s.io\" at the cluster scope"
        )
    );
    let details = s.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.group.as_str(), details.kind.as_str()),
        ("", "jobset.x-k8s.io", "jobsets")
    );

    // A binding to a ClusterRole that does not exist yet says so.
    create(
        &c.admin(),
        cluster_binding("manager", "jobset-manager", sa_subject("jobset-system", "jobset-controller-manager")),
    )
    .await
    .unwrap();
    assert_eq!(
        status(all_jobsets.list(&ListParams::default()).await.unwrap_err()).message,
        format!(
            "jobsets.jobset.x-k8s.io is forbidden: User \"{MANAGER}\" cannot list resource \"jobsets\" in API group \"jobset.x-k8s.io\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"jobset-manager\" not found"
        )
    );

    let rules =
        json!([{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch"]}]);
    create(&c.admin(), cluster_role("jobset-manager", rules)).await.unwrap();
    create(&c.admin(), jobset("default", "js")).await.unwrap();
    let names: Vec<String> =
        all_jobsets.list(&ListParams::default()).await.unwrap().iter().map(|o| o.name_any()).collect();
    assert_eq!(names, ["js"]);
    assert_eq!(api(&manager, "JobSet", Some("default")).get("js").await.unwrap().name_any(), "js");
    // Only what the role grants: no deletes, no pods.
    assert_eq!(code(api(&manager, "JobSet", Some("default")).delete("js", &DeleteParams::default()).await), 403);
    let s = status(api(&manager, "Pod", Some("default")).get("p").await.unwrap_err());
    assert_eq!(
        s.message,
        format!(
            "pods \"p\" is forbidden: User \"{MANAGER}\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\""
        )
    );
    let details = s.details.unwrap();
    assert_eq!((details.name.as_str(), details.group.as_str(), details.kind.as_str()), ("p", "", "pods"));

    // Non-resource paths need a rule of their own.
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let s = status(manager.request_text(req).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (403, format!("forbidden: User \"{MANAGER}\" cannot get path \"/metrics\"").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolebinding_grants_only_in_its_namespace() {
    let c = cluster().await;
    let (sa, _) = c.service_account("team", "worker").await;
    create(&c.admin(), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})).await.unwrap();
    let read_pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create"]}]);
    create(&c.admin(), cluster_role("pod-reader", read_pods.clone())).await.unwrap();
    create(&c.admin(), binding("team", "read", "ClusterRole", "pod-reader", sa_subject("team", "worker")))
        .await
        .unwrap();

    api(&sa, "Pod", Some("team")).list(&ListParams::default()).await.unwrap();
    create(&sa, pod("team", "mine")).await.unwrap();
    assert_eq!(code(api(&sa, "Pod", Some("other")).list(&ListParams::default()).await), 403);
    assert_eq!(code(create(&sa, pod("other", "theirs")).await), 403);
    assert_eq!(code(api(&sa, "Pod", None).list(&ListParams::default()).await), 403);

    // A Role of the namespace, bound there, works the same way.
    create(&c.admin(), role("other", "reader", read_pods)).await.unwrap();
    create(&c.admin(), binding("other", "read", "Role", "reader", sa_subject("team", "worker"))).await.unwrap();
    api(&sa, "Pod", Some("other")).list(&ListParams::default()).await.unwrap();
    assert_eq!(code(api(&sa, "Pod", None).list(&ListParams::default()).await), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_need_their_own_rule() {
    let c = cluster().await;
    let (sa, _) = c.service_account("jobset-system", "jobset-controller-manager").await;
    create(&c.admin(), jobset("default", "x")).await.unwrap();
    let rules = json!([
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"], "verbs": ["update"]}
    ]);
    create(&c.admin(), cluster_role("status-writer", rules)).await.unwrap();
    create(&c.admin(), cluster_binding("w", "status-writer", sa_subject("jobset-system", "jobset-controller-manager")))
        .await
        .unwrap();
    let jobsets = api(&sa, "JobSet", Some("default"));
    let mut js = jobsets.get("x").await.unwrap();
    js.data["status"] = json!({"restarts": 1});
    let updated = jobsets.replace_status("x", &PostParams::default(), &js).await.unwrap();
    assert_eq!(updated.data["status"]["restarts"], 1);

    // The object itself is another resource.
    let s = status(jobsets.replace("x", &PostParams::default(), &updated).await.unwrap_err());
    assert_eq!(
        s.message,
        format!(
            "jobsets.jobset.x-k8s.io \"x\" is forbidden: User \"{MANAGER}\" cannot update resource \"jobsets\" in API group \"jobset.x-k8s.io\" in the namespace \"default\""
        )
    );

    // Without the status rule, the status is refused too.
    let readonly = jobsets_reader(&c).await;
    let s = status(
        api(&readonly, "JobSet", Some("default")).replace_status("x", &PostParams::default(), &js).await.unwrap_err(),
    );
    assert_eq!(
        s.message,
        "jobsets.jobset.x-k8s.io \"x\" is forbidden: User \"system:serviceaccount:default:reader\" cannot update resource \"jobsets/status\" in API group \"jobset.x-k8s.io\" in the namespace \"default\""
    );
}

/// A ServiceAccount `default/reader` allowed to get JobSets.
async fn jobsets_reader(c: &Cluster) -> Client {
    let (client, _) = c.service_account("default", "reader").await;
    let rules = json!([{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]}]);
    create(&c.admin(), role("default", "jobset-getter", rules)).await.unwrap();
    create(&c.admin(), binding("default", "reader", "Role", "jobset-getter", sa_subject("default", "reader")))
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_grant_those_objects_only() {
    let c = cluster().await;
    let (sa, _) = c.service_account("default", "one").await;
    for name in ["mine", "theirs"] {
        create(&c.admin(), pod("default", name)).await.unwrap();
    }
    let rules = json!([{"apiGroups": [""], "resources": ["pods"], "resourceNames": ["mine"], "verbs": ["get", "list", "watch"]}]);
    create(&c.admin(), role("default", "one-pod", rules)).await.unwrap();
    create(&c.admin(), binding("default", "one", "Role", "one-pod", sa_subject("default", "one"))).await.unwrap();
    let pods = api(&sa, "Pod", Some("default"));
    assert_eq!(pods.get("mine").await.unwrap().name_any(), "mine");
    assert_eq!(code(pods.get("theirs").await), 403);
    // A list names no object; a list by `metadata.name` does, as upstream.
    assert_eq!(code(pods.list(&ListParams::default()).await), 403);
    let by_name = pods.list(&ListParams::default().fields("metadata.name=mine")).await.unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert_eq!(code(pods.list(&ListParams::default().fields("metadata.name=theirs")).await), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_needs_the_watch_verb() {
    let c = cluster().await;
    let (sa, _) = c.service_account("default", "watcher").await;
    create(&c.admin(), pod("default", "p")).await.unwrap();
    let list_only = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]);
    create(&c.admin(), role("default", "lister", list_only)).await.unwrap();
    create(&c.admin(), binding("default", "w", "Role", "lister", sa_subject("default", "watcher"))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sa.clone(), "default");
    pods.list(&ListParams::default()).await.unwrap();
    let s = status(pods.watch(&WatchParams::default(), "0").await.err().expect("a watch without the verb is refused"));
    assert_eq!(
        s.message,
        "pods is forbidden: User \"system:serviceaccount:default:watcher\" cannot watch resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    let watch = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}]);
    create(&c.admin(), role("default", "watch", watch)).await.unwrap();
    create(&c.admin(), binding("default", "w2", "Role", "watch", sa_subject("default", "watcher"))).await.unwrap();
    let mut events = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let added = common::next_matching(
        &mut events,
        "the pod's ADDED event",
        |e| matches!(e, Ok(WatchEvent::Added(p)) if p.name_any() == "p"),
    )
    .await;
    assert!(added.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_dies_with_its_service_account() {
    let c = cluster().await;
    let (sa, token) = c.service_account("default", "ephemeral").await;
    sa.apiserver_version().await.unwrap();
    sa.list_api_groups().await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(c.admin(), "default");
    sas.delete("ephemeral", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(sa.list_api_groups().await), 401);
    // The same name again is another ServiceAccount (another uid): the old token stays dead.
    create(&c.admin(), json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ephemeral", "namespace": "default"}}))
        .await
        .unwrap();
    assert_eq!(code(c.client(&token).await.list_api_groups().await), 401);
    // A new token for it works.
    let fresh = token_of(c.token("default", "ephemeral", None).await.unwrap());
    c.client(&fresh).await.list_api_groups().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expires_when_it_said_it_would() {
    let c = cluster().await;
    c.service_account("default", "short").await;
    let answer = c.token("default", "short", Some(600)).await.unwrap();
    let spec = answer.spec.clone().unwrap();
    assert_eq!(spec.expiration_seconds, Some(600));
    assert_eq!(spec.audiences.unwrap(), ["https://kubernetes.default.svc.cluster.local"]);
    let expires = answer.status.as_ref().and_then(|s| s.expiration_timestamp.clone()).unwrap().0;
    let left = expires.duration_since(jiff::Timestamp::now());
    assert!(left <= jiff::SignedDuration::from_secs(600) && left > jiff::SignedDuration::from_secs(590), "{left:?}");

    let client = c.client(&token_of(answer)).await;
    client.list_api_groups().await.unwrap();
    c.clock_offset.store(599, Ordering::SeqCst);
    client.list_api_groups().await.unwrap();
    c.clock_offset.store(601, Ordering::SeqCst);
    assert_eq!(code(client.list_api_groups().await), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_request_answers_as_kube_apiserver() {
    let c = cluster().await;
    let s = status(c.token("default", "nobody", None).await.unwrap_err());
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (404, "NotFound", "serviceaccounts \"nobody\" not found")
    );
    c.service_account("default", "sa").await;
    let s = status(c.token("default", "sa", Some(60)).await.unwrap_err());
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    let answer = c.token("default", "sa", None).await.unwrap();
    assert_eq!(answer.spec.as_ref().and_then(|s| s.expiration_seconds), Some(3600));
    assert_eq!(answer.metadata.name.as_deref(), Some("sa"));
    assert_eq!(answer.metadata.namespace.as_deref(), Some("default"));

    // Discovery lists the subresource; in-process the same call is one function.
    let resources = c.admin().list_core_api_resources("v1").await.unwrap();
    let token = resources.resources.iter().find(|r| r.name == "serviceaccounts/token").expect("serviceaccounts/token");
    assert_eq!(
        (token.kind.as_str(), token.group.as_deref(), token.verbs.as_slice()),
        ("TokenRequest", Some("authentication.k8s.io"), &["create".to_string()][..])
    );
    let t = c.server.issue_service_account_token("default", "sa", Some(900)).unwrap();
    c.client(&t).await.list_api_groups().await.unwrap();
    let rbac = c.admin().list_api_group_resources("rbac.authorization.k8s.io/v1").await.unwrap();
    let mut names: Vec<&str> = rbac.resources.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["clusterrolebindings", "clusterroles", "rolebindings", "roles"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_parsed_again_only_when_an_rbac_object_changes() {
    let c = cluster().await;
    let (sa, _) = c.service_account("default", "reader").await;
    create(&c.admin(), cluster_role("r", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])))
        .await
        .unwrap();
    create(&c.admin(), cluster_binding("b", "r", sa_subject("default", "reader"))).await.unwrap();
    let pods = api(&sa, "Pod", Some("default"));
    pods.list(&ListParams::default()).await.unwrap();
    let authorizer = c.server.rbac_authorizer();
    let built = authorizer.cached_generation().expect("a policy was built");
    assert_eq!(built, c.server.store.rbac_generation());
    create(&c.admin(), pod("default", "p")).await.unwrap();
    for _ in 0..3 {
        pods.list(&ListParams::default()).await.unwrap();
    }
    assert_eq!(authorizer.cached_generation(), Some(built), "other writes leave the policy alone");
    api(&c.admin(), "ClusterRoleBinding", None).delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(pods.list(&ListParams::default()).await), 403);
    assert!(authorizer.cached_generation() > Some(built));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_rbac_objects_are_refused_naming_the_field() {
    let c = cluster().await;
    let bad = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "system:bad"},
        "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "a"}]});
    let s = status(create(&c.admin(), bad).await.unwrap_err());
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "ClusterRoleBinding.rbac.authorization.k8s.io \"system:bad\" is invalid: [roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\", subjects[0].namespace: Required value]"
    );
    // Names with colons are fine, and defaults are filled in.
    let ok =
        create(&c.admin(), cluster_binding("system:ok", "r", json!([{"kind": "Group", "name": "g"}]))).await.unwrap();
    assert_eq!(ok.data["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    let mut changed = ok.clone();
    changed.data["roleRef"]["name"] = json!("other");
    let s = status(
        api(&c.admin(), "ClusterRoleBinding", None)
            .replace("system:ok", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert!(s.message.ends_with("cannot change roleRef"), "{}", s.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_grants_only_what_it_holds() {
    let c = cluster().await;
    let (sa, _) = c.service_account("team", "lead").await;
    let rbac_writer = json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]}]);
    create(&c.admin(), cluster_role("rbac-writer", rbac_writer)).await.unwrap();
    create(
        &c.admin(),
        cluster_role("pod-reader", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
    )
    .await
    .unwrap();
    create(
        &c.admin(),
        cluster_role("secret-reader", json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])),
    )
    .await
    .unwrap();
    for (name, role) in [("lead-writes-rbac", "rbac-writer"), ("lead-reads-pods", "pod-reader")] {
        create(&c.admin(), binding("team", name, "ClusterRole", role, sa_subject("team", "lead"))).await.unwrap();
    }
    create(&sa, binding("team", "member-reads-pods", "ClusterRole", "pod-reader", sa_subject("team", "member")))
        .await
        .unwrap();
    let s = status(
        create(
            &sa,
            binding("team", "member-reads-secrets", "ClusterRole", "secret-reader", sa_subject("team", "member")),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "rolebindings.rbac.authorization.k8s.io \"member-reads-secrets\" is forbidden: user \"system:serviceaccount:team:lead\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
    );
    let s = status(
        create(&sa, role("team", "everything", json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])))
            .await
            .unwrap_err(),
    );
    assert!(s.message.contains("is attempting to grant RBAC permissions not currently held"), "{}", s.message);
    assert_eq!(code(api(&c.admin(), "RoleBinding", Some("team")).get("member-reads-secrets").await), 404);
    create(&sa, role("team", "pods", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])))
        .await
        .unwrap();
}

/// The manager's shipped RBAC (config/rbac/) is valid here and grants what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_manager_rbac_applies_and_grants_the_manager_its_role() {
    let c = cluster().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut docs: Vec<Value> = vec![];
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(f).unwrap();
        docs.extend(serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
    }
    // Namespaces and ServiceAccounts first, as `kubectl apply -f config/rbac` would need them.
    docs.sort_by_key(|d| !matches!(d["kind"].as_str(), Some("Namespace")));
    for d in docs.iter().filter(|d| !d.is_null()) {
        create(&c.admin(), d.clone()).await.unwrap_or_else(|e| panic!("{}: {e}", d["metadata"]["name"]));
    }
    let token = token_of(c.token("jobset-system", "jobset-controller-manager", None).await.unwrap());
    let manager = c.client(&token).await;
    api(&manager, "JobSet", None).list(&ListParams::default()).await.unwrap();
    api(&manager, "Pod", None).list(&ListParams::default()).await.unwrap();
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(manager.clone(), "jobset-system");
    leases.list(&ListParams::default()).await.unwrap();
    let elsewhere = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(manager.clone(), "default");
    assert_eq!(code(elsewhere.list(&ListParams::default()).await), 403);
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::all(manager);
    assert_eq!(code(secrets.list(&ListParams::default()).await), 403);
}

// ---------------------------------------------------------------------------------------------
// kubectl
// ---------------------------------------------------------------------------------------------

const MANIFEST: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: team
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: reader
  namespace: team
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-reader
  namespace: team
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: reader-reads-pods
  namespace: team
subjects:
- kind: ServiceAccount
  name: reader
  namespace: team
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: pod-reader
"#;

/// `kubectl` on PATH (the CLI's kubectl tests need it too; CI installs it).
fn kubectl_path() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("kubectl is not on PATH: this test drives a real kubectl (apt-get install kubernetes-client)")
    })
}

/// Runs kubectl with `kubeconfig` and a fresh HOME; (success, stdout, stderr).
async fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--request-timeout=20s").args(args).env("KUBECONFIG", kubeconfig).env("HOME", home);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().expect("running kubectl");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_rbac_creates_a_token_and_is_held_to_the_role() {
    let c = cluster().await;
    let kubeconfig = c.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, c.kubeconfig(&c.creds.token)).unwrap();
    let manifest = c.dir.path().join("rbac.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = |args: Vec<String>| {
        let (kubeconfig, home) = (kubeconfig.clone(), home.path().to_path_buf());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = tokio::time::timeout(Duration::from_secs(60), kubectl(&kubeconfig, &home, &args))
                .await
                .expect("kubectl finished in time");
            (args.join(" "), out)
        }
    };
    let ok = |(cmd, (success, stdout, stderr)): (String, (bool, String, String))| {
        assert!(success, "kubectl {cmd} failed:\n{stdout}\n{stderr}");
        stdout
    };
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();

    let applied = ok(run(args(&format!("apply -f {}", manifest.display()))).await);
    for line in [
        "namespace/team created",
        "serviceaccount/reader created",
        "role.rbac.authorization.k8s.io/pod-reader created",
        "rolebinding.rbac.authorization.k8s.io/reader-reads-pods created",
    ] {
        assert!(applied.contains(line), "{line:?} not in\n{applied}");
    }
    // Applying again changes nothing.
    let again = ok(run(args(&format!("apply -f {}", manifest.display()))).await);
    assert!(again.contains("rolebinding.rbac.authorization.k8s.io/reader-reads-pods unchanged"), "{again}");

    let wide = ok(run(args("get rolebindings -n team -o wide")).await);
    let header: Vec<&str> = wide.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"], "{wide}");
    let row: Vec<&str> = wide.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row.last().copied()),
        ("reader-reads-pods", "Role/pod-reader", Some("team/reader")),
        "{wide}"
    );
    let roles = ok(run(args("get roles -n team")).await);
    assert!(roles.starts_with("NAME") && roles.lines().next().unwrap().contains("CREATED AT"), "{roles}");
    assert!(roles.contains("pod-reader"), "{roles}");

    let token = ok(run(args("create token reader -n team --duration=15m")).await).trim().to_string();
    assert!(token.starts_with("jssa1."), "{token}");
    create(&c.admin(), pod("team", "p")).await.unwrap();
    let pods = ok(run(args(&format!("--token={token} get pods -n team"))).await);
    assert!(pods.starts_with("NAME") && pods.lines().any(|l| l.starts_with("p ")), "{pods}");
    let (cmd, (success, stdout, stderr)) = run(args(&format!("--token={token} get pods -n default"))).await;
    assert!(!success, "kubectl {cmd} should fail: {stdout}");
    assert!(
        stderr.contains(
            "pods is forbidden: User \"system:serviceaccount:team:reader\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        ),
        "{stderr}"
    );
    let (_, (success, _, stderr)) = run(args("create token nobody -n team")).await;
    assert!(!success && stderr.contains("serviceaccounts \"nobody\" not found"), "{stderr}");
}
