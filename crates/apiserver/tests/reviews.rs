//! The review APIs over HTTPS: TokenReview, SubjectAccessReview and SelfSubjectAccessReview, as
//! `jobset manager`'s protected `/metrics` (controller-runtime's
//! `filters.WithAuthenticationAndAuthorization`) and `kubectl auth can-i` use them.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jobset_apiserver::auth::{PodIdentity, PodTokens};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const SELF_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const SA_GROUPS: fn(&str) -> Value =
    |ns| json!(["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"]);

type Cluster = common::HttpsCluster;

async fn cluster() -> Cluster {
    common::https_cluster().await
}

impl common::HttpsCluster {
    /// The admin over HTTPS (the server's own token).
    async fn admin(&self) -> Client {
        self.client(&self.creds.token.clone()).await
    }

    /// A ServiceAccount (and its namespace), and a token for it from the TokenRequest API.
    async fn service_account(&self, namespace: &str, name: &str, expiration_seconds: Option<i64>) -> String {
        let admin = self.server.client();
        create(&admin, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})).await.ok();
        create(
            &admin,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}),
        )
        .await
        .ok();
        self.server.issue_service_account_token(namespace, name, expiration_seconds).unwrap()
    }

    /// Applies manifests of config/rbac/ as the admin, in-process.
    async fn apply_shipped(&self, files: &[&str]) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac");
        for f in files {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|d| !d.is_null()) {
                match create(&self.server.client(), doc).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => panic!("{f}: {e}"),
                }
            }
        }
    }
}

use common::{api, create};

/// A token bound to a new pod `p` in `namespace`, as the node agent mounts it.
async fn pod_token(c: &Cluster, namespace: &str) -> String {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}});
    create(&c.server.client(), pod).await.unwrap();
    let pod = api(&c.server.client(), "Pod", Some(namespace)).get("p").await.unwrap();
    PodTokens::new(&c.creds.token).issue(&PodIdentity::of(&serde_json::to_value(&pod).unwrap()))
}

/// A ClusterRoleBinding of ClusterRole `role` to ServiceAccount `ns`/`sa`.
fn cluster_binding(name: &str, role: &str, ns: &str, sa: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
}

/// POSTs `body` (JSON) to `path`: the answer and its status code, or the refusal's Status.
async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, kube::core::Status> {
    let req = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    client.request::<Value>(req).await.map_err(|e| match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API answer, got {other}"),
    })
}

fn token_review(token: &str) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
}

/// A SubjectAccessReview of `user` in `groups` for `attributes` (`resourceAttributes` or
/// `nonResourceAttributes`).
fn access_review(user: &str, groups: Value, attributes: Value) -> Value {
    let mut spec = attributes;
    spec["user"] = json!(user);
    spec["groups"] = groups;
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
}

fn get_metrics() -> Value {
    json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_review_names_the_admin_a_service_account_and_a_pod() {
    let c = cluster().await;
    let admin = c.admin().await;

    let answer = post(&admin, TOKEN_REVIEWS, &token_review(&c.creds.token)).await.unwrap();
    assert_eq!(
        answer,
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null},
               "spec": {"token": c.creds.token},
               "status": {"authenticated": true, "audiences": [API_AUDIENCE],
                          "user": {"username": "jobset:admin", "groups": ["system:masters", "system:authenticated"]}}})
    );

    let token = c.service_account("team", "scraper", None).await;
    let sa_uid = api(&c.server.client(), "ServiceAccount", Some("team")).get("scraper").await.unwrap().metadata.uid;
    let answer = post(&admin, TOKEN_REVIEWS, &token_review(&token)).await.unwrap();
    assert_eq!(
        answer["status"],
        json!({"authenticated": true, "audiences": [API_AUDIENCE],
               "user": {"username": "system:serviceaccount:team:scraper", "uid": sa_uid, "groups": SA_GROUPS("team")}})
    );
    assert_eq!(answer["spec"], json!({"token": token}));

    // A pod-bound token: its ServiceAccount's user, with the pod in `extra`.
    create(
        &c.server.client(),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0", "namespace": "team"},
        "spec": {"serviceAccountName": "scraper", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .await
    .unwrap();
    let pod = api(&c.server.client(), "Pod", Some("team")).get("w-0").await.unwrap();
    let pod_token = PodTokens::new(&c.creds.token).issue(&PodIdentity::of(&serde_json::to_value(&pod).unwrap()));
    let answer = post(&admin, TOKEN_REVIEWS, &token_review(&pod_token)).await.unwrap();
    assert_eq!(
        answer["status"],
        json!({"authenticated": true, "audiences": [API_AUDIENCE],
               "user": {"username": "system:serviceaccount:team:scraper", "uid": sa_uid, "groups": SA_GROUPS("team"),
                        "extra": {"authentication.kubernetes.io/pod-name": ["w-0"],
                                  "authentication.kubernetes.io/pod-uid": [pod.metadata.uid.unwrap()]}}})
    );

    // Garbage is still a 201, with the error and no `authenticated`.
    let answer = post(&admin, TOKEN_REVIEWS, &token_review("garbage")).await.unwrap();
    assert_eq!(answer["status"], json!({"user": {}, "error": "invalid bearer token"}));

    // The typed client reads the answers.
    let reviews: Api<k8s_openapi::api::authentication::v1::TokenReview> = Api::all(admin.clone());
    let tr = serde_json::from_value(token_review(&token)).unwrap();
    let status = reviews.create(&PostParams::default(), &tr).await.unwrap().status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.user.unwrap().username.as_deref(), Some("system:serviceaccount:team:scraper"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_review_of_a_dead_token_says_why_as_kube_apiserver() {
    let c = cluster().await;
    let admin = c.admin().await;
    let error = |answer: Value| {
        assert_eq!(answer["status"]["authenticated"], Value::Null, "{answer}");
        answer["status"]["error"].as_str().unwrap_or_default().to_string()
    };

    // Expired.
    let short = c.service_account("default", "short", Some(600)).await;
    c.clock_offset.store(601, Ordering::SeqCst);
    assert_eq!(
        error(post(&admin, TOKEN_REVIEWS, &token_review(&short)).await.unwrap()),
        "service account token has expired"
    );
    c.clock_offset.store(0, Ordering::SeqCst);

    // Its ServiceAccount deleted, then created again under the same name (another uid).
    let token = c.service_account("default", "gone", None).await;
    let sas = api(&c.server.client(), "ServiceAccount", Some("default"));
    let old_uid = sas.get("gone").await.unwrap().metadata.uid.unwrap();
    sas.delete("gone", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        error(post(&admin, TOKEN_REVIEWS, &token_review(&token)).await.unwrap()),
        "serviceaccounts \"gone\" not found"
    );
    c.service_account("default", "gone", None).await;
    let new_uid = sas.get("gone").await.unwrap().metadata.uid.unwrap();
    assert_eq!(
        error(post(&admin, TOKEN_REVIEWS, &token_review(&token)).await.unwrap()),
        format!("service account UID ({new_uid}) does not match claim ({old_uid})")
    );

    // A pod-bound token whose pod is gone.
    let pod_token = pod_token(&c, "default").await;
    let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    api(&c.server.client(), "Pod", Some("default")).delete("p", &dp).await.unwrap();
    assert_eq!(
        error(post(&admin, TOKEN_REVIEWS, &token_review(&pod_token)).await.unwrap()),
        "service account token has been invalidated"
    );

    // Audiences: a token is good for those it was issued for.
    c.service_account("default", "vault", None).await;
    let vault = c
        .server
        .create_token("default", "vault", &json!({"spec": {"audiences": ["vault"]}}))
        .unwrap()
        .pointer("/status/token")
        .and_then(Value::as_str)
        .unwrap()
        .to_string();
    let mut review = token_review(&vault);
    assert_eq!(
        error(post(&admin, TOKEN_REVIEWS, &review).await.unwrap()),
        format!("token audiences [\"vault\"] is invalid for the target audiences [\"{API_AUDIENCE}\"]")
    );
    review["spec"]["audiences"] = json!(["other", "vault"]);
    let answer = post(&admin, TOKEN_REVIEWS, &review).await.unwrap();
    assert_eq!((&answer["status"]["authenticated"], &answer["status"]["audiences"]), (&json!(true), &json!(["vault"])));
    // The server's own token is for the API only.
    let mut review = token_review(&c.creds.token);
    review["spec"]["audiences"] = json!(["vault"]);
    assert_eq!(error(post(&admin, TOKEN_REVIEWS, &review).await.unwrap()), "invalid bearer token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_refused_without_rbac_and_the_shipped_metrics_auth_role_grants_both() {
    let c = cluster().await;
    c.apply_shipped(&["service_account.yaml"]).await;
    let manager_token =
        c.server.issue_service_account_token("jobset-system", "jobset-controller-manager", None).unwrap();
    let manager = c.client(&manager_token).await;
    let scraper = c.service_account("monitoring", "prometheus", None).await;
    let user = "system:serviceaccount:jobset-system:jobset-controller-manager";

    let s = post(&manager, TOKEN_REVIEWS, &token_review(&scraper)).await.unwrap_err();
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        format!(
            "tokenreviews.authentication.k8s.io is forbidden: User \"{user}\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
        )
    );
    let review = access_review("system:serviceaccount:monitoring:prometheus", json!([]), get_metrics());
    let s = post(&manager, ACCESS_REVIEWS, &review).await.unwrap_err();
    assert_eq!(
        (s.code, s.message),
        (
            403,
            format!(
                "subjectaccessreviews.authorization.k8s.io is forbidden: User \"{user}\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
            )
        )
    );

    c.apply_shipped(&["metrics_auth_role.yaml"]).await;
    let answer = post(&manager, TOKEN_REVIEWS, &token_review(&scraper)).await.unwrap();
    assert_eq!(answer["status"]["user"]["username"], "system:serviceaccount:monitoring:prometheus");
    let answer = post(&manager, ACCESS_REVIEWS, &review).await.unwrap();
    assert_eq!(answer["status"], json!({"allowed": false}));
    // The role grants reviews, nothing else.
    let s =
        post(&manager, SELF_ACCESS_REVIEWS, &json!({"spec": {"nonResourceAttributes": {"path": "/x", "verb": "get"}}}))
            .await
            .unwrap();
    assert_eq!(s["status"], json!({"allowed": false}));
    let s = api(&manager, "ClusterRole", None).get("jobset-metrics-reader").await.unwrap_err();
    assert!(matches!(s, kube::Error::Api(s) if s.code == 403));
}

/// What `jobset manager` does per scrape, as controller-runtime's
/// `filters.WithAuthenticationAndAuthorization`: a TokenReview of the scraper's token, then a
/// SubjectAccessReview of `get /metrics` for the user it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_filter_flow_allows_a_scraper_bound_to_the_shipped_metrics_reader() {
    let c = cluster().await;
    c.apply_shipped(&["service_account.yaml", "metrics_auth_role.yaml", "metrics_reader_role.yaml"]).await;
    let manager = c
        .client(&c.server.issue_service_account_token("jobset-system", "jobset-controller-manager", None).unwrap())
        .await;
    let scraper = c.service_account("monitoring", "prometheus", None).await;

    let scrape = || async {
        let tr = post(&manager, TOKEN_REVIEWS, &token_review(&scraper)).await.unwrap();
        let user = &tr["status"]["user"];
        let review = access_review(user["username"].as_str().unwrap(), user["groups"].clone(), get_metrics());
        post(&manager, ACCESS_REVIEWS, &review).await.unwrap()["status"].clone()
    };
    assert_eq!(scrape().await, json!({"allowed": false}));
    create(
        &c.server.client(),
        cluster_binding("prometheus-metrics", "jobset-metrics-reader", "monitoring", "prometheus"),
    )
    .await
    .unwrap();
    assert_eq!(
        scrape().await,
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"prometheus-metrics\" of ClusterRole \"jobset-metrics-reader\" to ServiceAccount \"prometheus/monitoring\""})
    );
    // Another path, or another verb, is not granted.
    let user = "system:serviceaccount:monitoring:prometheus";
    for attrs in [
        json!({"nonResourceAttributes": {"path": "/metrics/extra", "verb": "get"}}),
        json!({"nonResourceAttributes": {"path": "/metrics", "verb": "post"}}),
    ] {
        let answer =
            post(&manager, ACCESS_REVIEWS, &access_review(user, SA_GROUPS("monitoring"), attrs)).await.unwrap();
        assert_eq!(answer["status"], json!({"allowed": false}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_access_review_decides_resources_by_rbac_and_is_validated_as_kube_apiserver() {
    let c = cluster().await;
    let admin = c.admin().await;
    c.service_account("team", "reader", None).await;
    create(&c.server.client(), json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}))
    .await
    .unwrap();
    create(
        &c.server.client(),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader"}]}),
    )
    .await
    .unwrap();
    let user = "system:serviceaccount:team:reader";
    let pods =
        |ns: &str, verb: &str| json!({"resourceAttributes": {"namespace": ns, "verb": verb, "resource": "pods"}});
    let answer =
        post(&admin, ACCESS_REVIEWS, &access_review(user, SA_GROUPS("team"), pods("team", "list"))).await.unwrap();
    assert_eq!(
        answer,
        json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "metadata": {"creationTimestamp": null},
               "spec": {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"},
                        "user": user, "groups": SA_GROUPS("team")},
               "status": {"allowed": true, "reason": "RBAC: allowed by RoleBinding \"read/team\" of ClusterRole \"pod-reader\" to ServiceAccount \"reader/team\""}})
    );
    for (ns, verb) in [("other", "list"), ("team", "delete")] {
        let answer =
            post(&admin, ACCESS_REVIEWS, &access_review(user, SA_GROUPS("team"), pods(ns, verb))).await.unwrap();
        assert_eq!(answer["status"], json!({"allowed": false}), "{verb} in {ns}");
    }
    // The user alone, without its groups, is what RBAC sees too: the binding names the user.
    let answer = post(&admin, ACCESS_REVIEWS, &access_review(user, json!([]), pods("team", "get"))).await.unwrap();
    assert_eq!(answer["status"]["allowed"], true);
    // `system:masters` may do anything.
    let answer = post(&admin, ACCESS_REVIEWS, &access_review("root", json!(["system:masters"]), pods("x", "delete")))
        .await
        .unwrap();
    assert_eq!(answer["status"], json!({"allowed": true}));

    // Neither or both kinds of attributes: kube-apiserver's 422.
    let neither = access_review(user, json!([]), json!({}));
    let s = post(&admin, ACCESS_REVIEWS, &neither).await.unwrap_err();
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"
    );
    let mut both = access_review(user, json!([]), pods("team", "get"));
    both["spec"]["nonResourceAttributes"] = json!({"path": "/metrics", "verb": "get"});
    let s = post(&admin, ACCESS_REVIEWS, &both).await.unwrap_err();
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            422,
            ".authorization.k8s.io \"\" is invalid: spec.nonResourceAttributes: Invalid value: {\"Path\":\"/metrics\",\"Verb\":\"get\"}: cannot be specified in combination with resourceAttributes"
        )
    );
    let details = s.details.unwrap();
    assert_eq!(details.group, "authorization.k8s.io");
    assert_eq!(details.causes[0].field, "spec.nonResourceAttributes");
    let s = post(&admin, ACCESS_REVIEWS, &access_review("", json!([]), pods("team", "get"))).await.unwrap_err();
    assert_eq!(
        s.message,
        ".authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    // A mistyped field is a 400 naming it.
    let mut mistyped = access_review(user, json!([]), pods("team", "get"));
    mistyped["spec"]["groups"] = json!("g");
    let s = post(&admin, ACCESS_REVIEWS, &mistyped).await.unwrap_err();
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            400,
            "SubjectAccessReview in version \"v1\" cannot be handled as a SubjectAccessReview: spec.groups: must be a list of strings"
        )
    );
    let s = post(&admin, TOKEN_REVIEWS, &json!({"spec": {}})).await.unwrap_err();
    assert_eq!((s.code, s.message.as_str()), (400, "token is required for TokenReview in authentication"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_subject_access_review_needs_no_grant_and_asks_about_the_requester() {
    let c = cluster().await;
    let token = c.service_account("team", "reader", None).await;
    let sa = c.client(&token).await;
    let ask = |attrs: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attrs});
    let answer = post(
        &sa,
        SELF_ACCESS_REVIEWS,
        &ask(json!({"resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"}})),
    )
    .await
    .unwrap();
    assert_eq!(answer["status"], json!({"allowed": false}));
    assert_eq!(answer["kind"], "SelfSubjectAccessReview");
    let answer =
        post(&sa, SELF_ACCESS_REVIEWS, &ask(json!({"nonResourceAttributes": {"path": "/apis", "verb": "get"}})))
            .await
            .unwrap();
    assert_eq!(
        answer["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""})
    );
    // The admin may do anything.
    let answer = post(
        &c.admin().await,
        SELF_ACCESS_REVIEWS,
        &ask(json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}})),
    )
    .await
    .unwrap();
    assert_eq!(answer["status"], json!({"allowed": true}));
    // A pod-bound token may not ask (its rights are fixed, not RBAC's).
    let pod_client = c.client(&pod_token(&c, "team").await).await;
    let s = post(
        &pod_client,
        SELF_ACCESS_REVIEWS,
        &ask(json!({"nonResourceAttributes": {"path": "/apis", "verb": "get"}})),
    )
    .await
    .unwrap_err();
    assert_eq!(s.code, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_review_apis_as_create_only() {
    let c = cluster().await;
    let admin = c.admin().await;
    let create = vec!["create".to_string()];
    for (gv, names) in [
        ("authentication.k8s.io/v1", vec!["tokenreviews"]),
        ("authorization.k8s.io/v1", vec!["selfsubjectaccessreviews", "subjectaccessreviews"]),
    ] {
        let list = admin.list_api_group_resources(gv).await.unwrap();
        let mut got: Vec<(&str, &Vec<String>, bool)> =
            list.resources.iter().map(|r| (r.name.as_str(), &r.verbs, r.namespaced)).collect();
        got.sort();
        let want: Vec<(&str, &Vec<String>, bool)> = names.iter().map(|n| (*n, &create, false)).collect();
        assert_eq!(got, want, "{gv}");
    }
    let groups: Vec<String> = admin.list_api_groups().await.unwrap().groups.into_iter().map(|g| g.name).collect();
    assert!(
        groups.contains(&"authentication.k8s.io".to_string()) && groups.contains(&"authorization.k8s.io".to_string())
    );
    // Create only: nothing to list or get.
    let s = admin.request::<Value>(http::Request::get(TOKEN_REVIEWS).body(vec![]).unwrap()).await.unwrap_err();
    assert!(matches!(s, kube::Error::Api(s) if s.code == 405), "list");
    let s = admin
        .request::<Value>(http::Request::get(format!("{TOKEN_REVIEWS}/x")).body(vec![]).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(s, kube::Error::Api(s) if s.code == 404), "get");
    let s = admin
        .request::<Value>(
            http::Request::post("/apis/authorization.k8s.io/v1/namespaces/default/subjectaccessreviews")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(s, kube::Error::Api(s) if s.code == 404), "namespaced");
}

// ---------------------------------------------------------------------------------------------
// kubectl
// ---------------------------------------------------------------------------------------------

/// `kubectl` on PATH (the CLI's kubectl tests need it too; CI installs it).
fn kubectl_path() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("kubectl is not on PATH: this test drives a real kubectl (apt-get install kubernetes-client)")
    })
}

/// Runs kubectl with `kubeconfig` and a fresh HOME; (exit code, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--request-timeout=20s").args(args).env("KUBECONFIG", kubeconfig).env("HOME", home.path());
    let out = tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(move || cmd.output()))
        .await
        .expect("kubectl finished in time")
        .unwrap()
        .expect("running kubectl");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_answers_for_a_service_account_token() {
    let c = cluster().await;
    let token = c.service_account("team", "reader", None).await;
    create(
        &c.server.client(),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    )
    .await
    .unwrap();
    create(
        &c.server.client(),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team"}]}),
    )
    .await
    .unwrap();
    let kubeconfig = c.dir.path().join("reader.kubeconfig");
    std::fs::write(&kubeconfig, c.kubeconfig(&token)).unwrap();

    let (code, stdout, stderr) = kubectl(&kubeconfig, &["auth", "can-i", "get", "pods", "-n", "team"]).await;
    assert_eq!((code, stdout.trim()), (0, "yes"), "{stderr}");
    let (code, stdout, stderr) = kubectl(&kubeconfig, &["auth", "can-i", "get", "pods", "-n", "default"]).await;
    assert_eq!((code, stdout.trim()), (1, "no"), "{stderr}");
    let (code, stdout, stderr) = kubectl(&kubeconfig, &["auth", "can-i", "delete", "pods", "-n", "team"]).await;
    assert_eq!((code, stdout.trim()), (1, "no"), "{stderr}");
    let (code, stdout, stderr) = kubectl(&kubeconfig, &["auth", "can-i", "get", "/apis"]).await;
    assert_eq!((code, stdout.trim()), (0, "yes"), "{stderr}");

    // The admin may do anything.
    let admin = c.dir.path().join("admin.kubeconfig");
    std::fs::write(&admin, c.kubeconfig(&c.creds.token)).unwrap();
    let (code, stdout, stderr) = kubectl(&admin, &["auth", "can-i", "delete", "nodes"]).await;
    assert_eq!((code, stdout.trim()), (0, "yes"), "{stderr}");
}
