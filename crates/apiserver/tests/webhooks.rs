//! Admission webhooks registered through the API are called as kube-apiserver calls them: an
//! HTTPS webhook server runs in the test (its certificate for `hooks.default.svc`, signed by a
//! CA given as `caBundle`), and ConfigMaps are written through the server's router.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use base64::Engine;
use http::{Method, Request};
use http_body_util::BodyExt;
use jobset_apiserver::ops::{self, Ctx, Target};
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use serde_json::{Value, json};
use tower::ServiceExt;

/// What the test's webhook server was sent: (path, AdmissionReview request).
type Calls = Arc<Mutex<Vec<(String, Value)>>>;

struct Webhooks {
    addr: SocketAddr,
    /// The CA, base64 (as `caBundle`).
    ca_bundle: String,
    calls: Calls,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

#[derive(Clone)]
struct HookState {
    calls: Calls,
    /// The server under test (set once it runs: its config names the webhook server's address).
    api: Arc<std::sync::OnceLock<Arc<ApiServer>>>,
}

fn allow(review: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "response": {"uid": review["request"]["uid"], "allowed": true}})
}

fn record(state: &HookState, path: &str, review: &Value) -> usize {
    let mut calls = state.calls.lock().unwrap();
    calls.push((path.to_string(), review["request"].clone()));
    calls.iter().filter(|(p, _)| p == path).count()
}

fn json_patch(ops: Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ops).unwrap())
}

/// Adds an annotation, with a warning.
async fn mutate(State(s): State<HookState>, Json(review): Json<Value>) -> Json<Value> {
    record(&s, "/mutate", &review);
    let mut out = allow(&review);
    let add = if review.pointer("/request/object/metadata/annotations").is_some() {
        json!([{"op": "add", "path": "/metadata/annotations/webhook.test~1mutated", "value": "true"}])
    } else {
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"webhook.test/mutated": "true"}}])
    };
    out["response"]["patchType"] = json!("JSONPatch");
    out["response"]["patch"] = json!(json_patch(add));
    out["response"]["warnings"] = json!(["mutating webhook was here"]);
    Json(out)
}

/// Adds a label.
async fn label(State(s): State<HookState>, Json(review): Json<Value>) -> Json<Value> {
    record(&s, "/label", &review);
    let mut out = allow(&review);
    let add = json!([{"op": "add", "path": "/metadata/labels/labelled", "value": "yes"}]);
    out["response"]["patchType"] = json!("JSONPatch");
    out["response"]["patch"] = json!(json_patch(add));
    Json(out)
}

/// Denies objects labelled `deny=true` (403, as controller-runtime's `Denied`); warns otherwise.
async fn validate(State(s): State<HookState>, Json(review): Json<Value>) -> Json<Value> {
    record(&s, "/validate", &review);
    let mut out = allow(&review);
    if review.pointer("/request/object/metadata/labels/deny") == Some(&json!("true")) {
        out["response"]["allowed"] = json!(false);
        out["response"]["status"] =
            json!({"code": 403, "reason": "Forbidden", "message": "objects labelled deny are denied"});
    } else {
        out["response"]["warnings"] = json!(["validating webhook was here"]);
    }
    Json(out)
}

/// Never answers.
async fn slow(State(s): State<HookState>, Json(review): Json<Value>) -> Json<Value> {
    record(&s, "/slow", &review);
    std::future::pending::<()>().await;
    Json(allow(&review))
}

async fn garbage(
    State(s): State<HookState>,
    Json(review): Json<Value>,
) -> ([(http::HeaderName, &'static str); 1], &'static str) {
    record(&s, "/garbage", &review);
    ([(http::header::CONTENT_TYPE, "application/json")], "garbage")
}

/// On its first call, changes the object behind the request's back (a concurrent write), then
/// adds an annotation as `/mutate` does.
async fn meddle(State(s): State<HookState>, Json(review): Json<Value>) -> Json<Value> {
    if record(&s, "/meddle", &review) == 1 {
        let api = s.api.get().expect("the server runs");
        let def = api.registry().get("", "v1", "configmaps").unwrap();
        let ctx = Ctx::new(&api.admission);
        let name = review["request"]["name"].as_str().unwrap().to_string();
        let mut current = api.store.get(&def, "default", &name).unwrap().value();
        current["metadata"]["labels"]["concurrent"] = json!("yes");
        api.store
            .write(|txn| ops::update(txn, &ctx, &def, "default", &name, current, Target::Main, None, None))
            .expect("the concurrent write");
    }
    mutate(State(s), Json(review)).await
}

/// The CA (PEM) and a serving certificate and key for `names`, signed by it.
fn pki(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Each CA its own name, as distinct CAs have.
    ca_params.distinguished_name.push(DnType::CommonName, format!("test CA for {}", names.join(",")));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

async fn webhook_server(api: Arc<std::sync::OnceLock<Arc<ApiServer>>>) -> Webhooks {
    let (ca, cert, key) = pki(&["hooks.default.svc", "webhook.default.svc"]);
    let certs = rustls_pemfile::certs(&mut cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
    let key = rustls_pemfile::private_key(&mut key.as_bytes()).unwrap().unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let calls = Calls::default();
    let app = axum::Router::new()
        .route("/mutate", axum::routing::post(mutate))
        .route("/validate", axum::routing::post(validate))
        .route("/label", axum::routing::post(label))
        .route("/slow", axum::routing::post(slow))
        .route("/garbage", axum::routing::post(garbage))
        .route("/meddle", axum::routing::post(meddle))
        .with_state(HookState { calls: calls.clone(), api });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut rx => return,
                r = listener.accept() => r.unwrap(),
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that does not trust the certificate ends the handshake.
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    app.clone().oneshot(req.map(Body::new))
                });
                let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), svc).await;
            });
        }
    });
    Webhooks { addr, ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca), calls, _shutdown: tx }
}

struct Cluster {
    api: Arc<ApiServer>,
    hooks: Webhooks,
}

/// A server whose service reference `webhook.default.svc:443` reaches the test's webhooks.
async fn cluster() -> Cluster {
    let cell = Arc::new(std::sync::OnceLock::new());
    let hooks = webhook_server(cell.clone()).await;
    let config = ServerConfig {
        webhook_service_addresses: HashMap::from([("webhook.default.svc:443".to_string(), hooks.addr.to_string())]),
        ..ServerConfig::default()
    };
    let api = ApiServer::new(Box::new(persist::Memory), Admission::default(), config).unwrap();
    let _ = cell.set(api.clone());
    Cluster { api, hooks }
}

/// A response: status code, `Warning` headers, body.
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Cluster {
    async fn send(&self, method: Method, uri: &str, content_type: &str, body: &Value) -> Answer {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        let resp = self.api.router().oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let warnings =
            resp.headers().get_all(http::header::WARNING).iter().map(|v| v.to_str().unwrap().to_string()).collect();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        Answer { code, warnings, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
    }

    async fn post(&self, uri: &str, body: Value) -> Answer {
        self.send(Method::POST, uri, "application/json", &body).await
    }

    /// Registers a configuration of `kind` with one webhook, asserting it is accepted.
    async fn register(&self, kind: &str, hook: Value) {
        let plural = format!("{}s", kind.to_lowercase());
        let mut h = json!({
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]
        });
        json_patch_merge(&mut h, &hook);
        if h.pointer("/clientConfig/caBundle").is_none() && h.get("clientConfig").is_some() {
            h["clientConfig"]["caBundle"] = json!(self.hooks.ca_bundle);
        }
        let name = h["name"].as_str().unwrap().to_string();
        let cfg = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": [h]});
        let a = self.post(&format!("/apis/admissionregistration.k8s.io/v1/{plural}"), cfg).await;
        assert_eq!(a.code, 201, "{}", a.body);
    }

    fn config_map(&self, name: &str) -> Option<Value> {
        let def = self.api.registry().get("", "v1", "configmaps").unwrap();
        self.api.store.get(&def, "default", name).map(|o| o.value())
    }

    fn calls(&self, path: &str) -> Vec<Value> {
        self.hooks.calls.lock().unwrap().iter().filter(|(p, _)| p == path).map(|(_, r)| r.clone()).collect()
    }
}

fn json_patch_merge(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

fn service(path: &str) -> Value {
    json!({"service": {"name": "webhook", "namespace": "default", "path": path}})
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_mutating_webhooks_patch_is_applied_on_create_and_its_warning_reaches_the_client() {
    let c = cluster().await;
    c.register("MutatingWebhookConfiguration", json!({"name": "mutate.test.io", "clientConfig": service("/mutate")}))
        .await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(a.body["metadata"]["annotations"]["webhook.test/mutated"], "true");
    assert_eq!(a.warnings, ["299 - \"mutating webhook was here\""]);
    let stored = c.config_map("one").expect("stored");
    assert_eq!(stored["metadata"]["annotations"]["webhook.test/mutated"], "true");
    let calls = c.calls("/mutate");
    assert_eq!(calls.len(), 1);
    let r = &calls[0];
    assert_eq!(r["operation"], "CREATE");
    assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
    assert_eq!((r["namespace"].clone(), r["name"].clone()), (json!("default"), json!("one")));
    assert_eq!(r["userInfo"]["username"], jobset_apiserver::auth::ADMIN_USERNAME);
    assert_eq!(r["options"]["kind"], "CreateOptions");
    assert!(r["oldObject"].is_null());
}

#[tokio::test]
async fn a_generated_name_and_uid_survive_the_webhook_passes() {
    let c = cluster().await;
    c.register("MutatingWebhookConfiguration", json!({"name": "mutate.test.io", "clientConfig": service("/mutate")}))
        .await;
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "validate.test.io", "clientConfig": service("/validate")}),
    )
    .await;
    let a = c.post(CMS, json!({"metadata": {"generateName": "gen-"}, "data": {}})).await;
    assert_eq!(a.code, 201, "{}", a.body);
    let name = a.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let stored = c.config_map(name).expect("stored under the name the webhooks saw");
    let (mutated, validated) = (&c.calls("/mutate")[0], &c.calls("/validate")[0]);
    for seen in [&mutated["object"], &validated["object"]] {
        assert_eq!(seen["metadata"]["name"], name);
        assert_eq!(seen["metadata"]["uid"], stored["metadata"]["uid"]);
    }
    assert_eq!(
        validated["object"]["metadata"]["annotations"]["webhook.test/mutated"], "true",
        "validation sees the mutation"
    );
    assert_eq!(a.warnings, ["299 - \"mutating webhook was here\"", "299 - \"validating webhook was here\""]);
}

#[tokio::test]
async fn a_denial_is_answered_with_kube_apiservers_message_and_the_webhooks_code() {
    let c = cluster().await;
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "validate.test.io", "clientConfig": service("/validate")}),
    )
    .await;
    let a = c.post(CMS, cm("bad", json!({"deny": "true"}))).await;
    assert_eq!(a.code, 403, "{}", a.body);
    assert_eq!(a.body["reason"], "Forbidden");
    assert_eq!(
        a.body["message"],
        "admission webhook \"validate.test.io\" denied the request: objects labelled deny are denied"
    );
    assert!(c.config_map("bad").is_none(), "nothing stored");
    // An update is validated too, with the old object.
    assert_eq!(c.post(CMS, cm("good", json!({}))).await.code, 201);
    let a = c
        .send(
            Method::PATCH,
            &format!("{CMS}/good"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"deny": "true"}}}),
        )
        .await;
    assert_eq!(a.code, 403, "{}", a.body);
    let update = c.calls("/validate").pop().unwrap();
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["options"]["kind"], "PatchOptions");
    assert!(update["oldObject"]["metadata"]["labels"].get("deny").is_none());
    assert!(c.config_map("good").unwrap()["metadata"]["labels"].get("deny").is_none(), "the update was not stored");
}

#[tokio::test]
async fn an_unreachable_webhook_fails_the_request_or_is_ignored_by_its_failure_policy() {
    let c = cluster().await;
    let port = closed_port().await;
    let url = format!("https://127.0.0.1:{port}/x");
    c.register("ValidatingWebhookConfiguration", json!({"name": "unreachable.test.io", "clientConfig": {"url": url}}))
        .await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert_eq!(a.body["reason"], "InternalError");
    assert_eq!(
        a.body["message"],
        format!(
            "Internal error occurred: failed calling webhook \"unreachable.test.io\": failed to call webhook: Post \"https://127.0.0.1:{port}/x?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    assert!(c.config_map("one").is_none(), "nothing stored");

    let ignore = json!({"name": "unreachable.test.io", "failurePolicy": "Ignore", "clientConfig": {"url": url}});
    let def = c.api.registry().get("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations").unwrap();
    c.api.store.write(|txn| ops::delete(txn, &def, "", "unreachable.test.io", &Default::default())).unwrap();
    c.register("ValidatingWebhookConfiguration", ignore).await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert!(c.config_map("one").is_some());
}

#[tokio::test]
async fn a_webhook_slower_than_its_timeout_fails_the_request() {
    let c = cluster().await;
    c.register(
        "MutatingWebhookConfiguration",
        json!({"name": "slow.test.io", "timeoutSeconds": 1, "clientConfig": service("/slow")}),
    )
    .await;
    let started = std::time::Instant::now();
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "Internal error occurred: failed calling webhook \"slow.test.io\": failed to call webhook: Post \"https://webhook.default.svc:443/slow?timeout=1s\": context deadline exceeded"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "answered at the timeout");
    assert_eq!(c.calls("/slow").len(), 1);
    assert!(c.config_map("one").is_none());
}

#[tokio::test]
async fn a_garbage_answer_is_a_failed_call() {
    let c = cluster().await;
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "garbage.test.io", "clientConfig": service("/garbage")}),
    )
    .await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    let msg = a.body["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Internal error occurred: failed calling webhook \"garbage.test.io\": failed to call webhook: couldn't get version/kind; json parse error: "),
        "{msg}"
    );
}

#[tokio::test]
async fn a_certificate_not_signed_by_the_ca_bundle_or_for_another_name_is_a_failed_call() {
    let c = cluster().await;
    let (other_ca, _, _) = pki(&["x"]);
    let other = base64::engine::general_purpose::STANDARD.encode(other_ca);
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "untrusted.test.io", "clientConfig": {"service": {"name": "webhook", "namespace": "default", "path": "/validate"}, "caBundle": other}}),
    )
    .await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert!(
        a.body["message"].as_str().unwrap().ends_with(
            "Post \"https://webhook.default.svc:443/validate?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{}",
        a.body["message"]
    );
    // The certificate is for hooks.default.svc and webhook.default.svc, not other.default.svc.
    let c = cluster().await;
    let svc =
        json!({"metadata": {"name": "other"}, "spec": {"ports": [{"port": 443, "targetPort": c.hooks.addr.port()}]}});
    assert_eq!(c.post("/api/v1/namespaces/default/services", svc).await.code, 201);
    let cc = json!({"service": {"name": "other", "namespace": "default", "path": "/validate"}});
    c.register("ValidatingWebhookConfiguration", json!({"name": "other.test.io", "clientConfig": cc})).await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert!(
        a.body["message"].as_str().unwrap().ends_with(
            "tls: failed to verify certificate: x509: certificate is valid for hooks.default.svc, webhook.default.svc, not other.default.svc"
        ),
        "{}",
        a.body["message"]
    );
    // Nor for 127.0.0.1.
    let c = cluster().await;
    let url = format!("https://127.0.0.1:{}/validate", c.hooks.addr.port());
    c.register("ValidatingWebhookConfiguration", json!({"name": "by-ip.test.io", "clientConfig": {"url": url}})).await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert!(
        a.body["message"].as_str().unwrap().ends_with(
            "tls: failed to verify certificate: x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
        ),
        "{}",
        a.body["message"]
    );
}

#[tokio::test]
async fn a_service_reference_reaches_the_services_target_port_on_this_machine() {
    let c = cluster().await;
    let port = c.hooks.addr.port();
    let svc = json!({"metadata": {"name": "hooks"}, "spec": {"ports": [{"port": 443, "targetPort": port}]}});
    assert_eq!(c.post("/api/v1/namespaces/default/services", svc).await.code, 201);
    let cc = json!({"service": {"name": "hooks", "namespace": "default", "path": "/mutate"}});
    c.register("MutatingWebhookConfiguration", json!({"name": "mutate.test.io", "clientConfig": cc})).await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(a.body["metadata"]["annotations"]["webhook.test/mutated"], "true");
    // An ExternalName Service is its external name, at the reference's port.
    let ext = cluster().await;
    let svc = json!({"metadata": {"name": "hooks"}, "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}});
    assert_eq!(ext.post("/api/v1/namespaces/default/services", svc).await.code, 201);
    let cc =
        json!({"service": {"name": "hooks", "namespace": "default", "path": "/mutate", "port": ext.hooks.addr.port()}});
    ext.register("MutatingWebhookConfiguration", json!({"name": "mutate.test.io", "clientConfig": cc})).await;
    let a = ext.post(CMS, cm("one", json!({}))).await;
    assert_eq!(
        (a.code, &a.body["metadata"]["annotations"]["webhook.test/mutated"]),
        (201, &json!("true")),
        "{}",
        a.body
    );
    // A Service that does not exist is kube-apiserver's resolver error.
    let cc = json!({"service": {"name": "missing", "namespace": "default", "path": "/mutate"}});
    c.register("MutatingWebhookConfiguration", json!({"name": "missing.test.io", "clientConfig": cc})).await;
    let a = c.post(CMS, cm("two", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "Internal error occurred: failed calling webhook \"missing.test.io\": failed to call webhook: Post \"https://missing.default.svc:443/mutate?timeout=10s\": service \"missing\" not found"
    );
}

#[tokio::test]
async fn namespace_and_object_selectors_choose_which_requests_a_webhook_sees() {
    let c = cluster().await;
    let ns = json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}});
    assert_eq!(c.post("/api/v1/namespaces", ns).await.code, 201);
    c.register(
        "MutatingWebhookConfiguration",
        json!({"name": "mutate.test.io", "clientConfig": service("/mutate"), "namespaceSelector": {"matchLabels": {"team": "a"}}}),
    )
    .await;
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "validate.test.io", "clientConfig": service("/validate"),
               "objectSelector": {"matchExpressions": [{"key": "checked", "operator": "In", "values": ["yes"]}]}}),
    )
    .await;
    let a = c.post("/api/v1/namespaces/team-a/configmaps", cm("in-a", json!({}))).await;
    assert_eq!((a.code, &a.body["metadata"]["annotations"]["webhook.test/mutated"]), (201, &json!("true")));
    let a = c.post(CMS, cm("in-default", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert!(a.body["metadata"].get("annotations").is_none(), "the namespace selector left it out: {}", a.body);
    // Denied only where the object selector lets the validating webhook see it.
    assert_eq!(c.post(CMS, cm("unchecked", json!({"deny": "true"}))).await.code, 201);
    assert_eq!(c.post(CMS, cm("checked", json!({"deny": "true", "checked": "yes"}))).await.code, 403);
    assert_eq!(c.calls("/validate").len(), 1);
}

#[tokio::test]
async fn a_write_between_the_passes_restarts_the_request_which_keeps_both_changes() {
    let c = cluster().await;
    assert_eq!(c.post(CMS, cm("one", json!({"a": "1"}))).await.code, 201);
    let hook = json!({"name": "meddle.test.io", "clientConfig": service("/meddle"),
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["configmaps"]}]});
    c.register("MutatingWebhookConfiguration", hook).await;
    let a = c
        .send(
            Method::PATCH,
            &format!("{CMS}/one"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"b": "2"}}}),
        )
        .await;
    assert_eq!(a.code, 200, "{}", a.body);
    let calls = c.calls("/meddle");
    assert_eq!(calls.len(), 2, "the webhook is called again on the changed object");
    assert!(calls[0]["oldObject"]["metadata"]["labels"].get("concurrent").is_none());
    assert_eq!(calls[1]["oldObject"]["metadata"]["labels"]["concurrent"], "yes");
    let stored = c.config_map("one").unwrap();
    assert_eq!(stored["metadata"]["labels"], json!({"a": "1", "b": "2", "concurrent": "yes"}));
    assert_eq!(stored["metadata"]["annotations"]["webhook.test/mutated"], "true");
}

#[tokio::test]
async fn webhook_configurations_are_validated_with_kube_apiservers_messages() {
    let c = cluster().await;
    let bad = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{"name": "m.test.io", "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://x/y"}}]});
    let a = c.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", bad).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "MutatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid: webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"
    );
    // Stored with kube-apiserver's defaults.
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "validate.test.io", "clientConfig": service("/validate")}),
    )
    .await;
    let def = c.api.registry().get("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations").unwrap();
    let stored = c.api.store.get(&def, "", "validate.test.io").unwrap().value();
    let h = &stored["webhooks"][0];
    assert_eq!((h["failurePolicy"].clone(), h["timeoutSeconds"].clone()), (json!("Fail"), json!(10)));
    // Writing a configuration never calls webhooks (they could lock everyone out).
    assert!(c.hooks.calls.lock().unwrap().is_empty());
}

/// The pod the shipped in-place restart policy is tried on.
fn agent_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "js-rj-0-0-abcde", "labels": {"app": "a"}, "annotations": {"keep": "1"}},
           "spec": {"serviceAccountName": "jobset-in-place-restart", "containers": [{"name": "w", "image": "busybox"}]}})
}

impl Cluster {
    /// A merge patch of pod `name` sent as `user`.
    async fn patch_pod_as(&self, user: jobset_apiserver::auth::User, name: &str, patch: Value) -> Answer {
        let mut req = Request::builder()
            .method(Method::PATCH)
            .uri(format!("/api/v1/namespaces/default/pods/{name}"))
            .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Body::from(serde_json::to_vec(&patch).unwrap()))
            .unwrap();
        req.extensions_mut().insert(user);
        let resp = self.api.router().oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        Answer { code, warnings: vec![], body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
    }
}

#[tokio::test]
async fn the_shipped_in_place_restart_policy_is_evaluated_on_pod_updates() {
    let c = cluster().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/in-place-restart/validating-admission-policy.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    for d in docs {
        let plural = format!("{}s", d["kind"].as_str().unwrap().to_lowercase()).replace("policys", "policies");
        let a = c.post(&format!("/apis/admissionregistration.k8s.io/v1/{plural}"), d).await;
        assert_eq!(a.code, 201, "{}", a.body);
    }
    assert_eq!(c.post("/api/v1/namespaces/default/pods", agent_pod()).await.code, 201);
    let agent = jobset_apiserver::auth::User::ServiceAccount(jobset_apiserver::auth::ServiceAccountClaims {
        namespace: "default".into(),
        name: "jobset-in-place-restart".into(),
        uid: "u".into(),
        exp: i64::MAX,
        aud: vec![],
    });
    let pod = "js-rj-0-0-abcde";
    let attempt = json!({"metadata": {"annotations": {"jobset.sigs.k8s.io/in-place-restart-attempt": "1"}}});
    let a = c.patch_pod_as(agent.clone(), pod, attempt).await;
    assert_eq!(a.code, 200, "the agent may write the attempt annotation: {}", a.body);
    let a = c.patch_pod_as(agent.clone(), pod, json!({"metadata": {"labels": {"app": "b"}}})).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid");
    assert_eq!(
        a.body["message"],
        "pods \"js-rj-0-0-abcde\" is forbidden: ValidatingAdmissionPolicy 'jobset-in-place-restart-attempt-only' with binding 'jobset-in-place-restart-attempt-only' denied request: the in-place restart agent may not change a pod's labels, finalizers or owners"
    );
    let def = c.api.registry().get("", "v1", "pods").unwrap();
    assert_eq!(c.api.store.get(&def, "default", pod).unwrap().value()["metadata"]["labels"]["app"], "a", "not stored");
    // Other users are not the policy's business (its match condition).
    let a =
        c.patch_pod_as(jobset_apiserver::auth::User::Admin, pod, json!({"metadata": {"labels": {"app": "b"}}})).await;
    assert_eq!(a.code, 200, "{}", a.body);
}

#[tokio::test]
async fn a_policy_bound_to_warn_warns_and_one_bound_to_deny_denies() {
    let c = cluster().await;
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "few-keys"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "variables": [{"name": "keys", "expression": "has(object.data) ? object.data.size() : 0"}],
                 "validations": [{"expression": "variables.keys <= 1", "messageExpression": "'too many keys: ' + string(variables.keys)"},
                                 {"expression": "!object.metadata.name.contains('bad')", "reason": "Forbidden"}]}});
    assert_eq!(c.post("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", policy).await.code, 201);
    let binding = |name: &str, action: &str, team: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": "few-keys", "validationActions": [action],
                        "matchResources": {"namespaceSelector": {"matchLabels": {"team": team}}}}})
    };
    for (name, action, team) in [("warn", "Warn", "a"), ("deny", "Deny", "b")] {
        let ns = json!({"metadata": {"name": format!("team-{team}"), "labels": {"team": team}}});
        assert_eq!(c.post("/api/v1/namespaces", ns).await.code, 201);
        let a = c
            .post(
                "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
                binding(name, action, team),
            )
            .await;
        assert_eq!(a.code, 201, "{}", a.body);
    }
    let two_keys = json!({"metadata": {"name": "two"}, "data": {"a": "1", "b": "2"}});
    let a = c.post("/api/v1/namespaces/team-a/configmaps", two_keys.clone()).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(
        a.warnings,
        ["299 - \"Validation failed for ValidatingAdmissionPolicy 'few-keys' with binding 'warn': too many keys: 2\""]
    );
    let a = c.post("/api/v1/namespaces/team-b/configmaps", two_keys).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "configmaps \"two\" is forbidden: ValidatingAdmissionPolicy 'few-keys' with binding 'deny' denied request: too many keys: 2"
    );
    let a = c.post("/api/v1/namespaces/team-b/configmaps", json!({"metadata": {"name": "a-bad-one"}})).await;
    assert_eq!((a.code, a.body["reason"].clone()), (403, json!("Forbidden")), "{}", a.body);
    assert!(
        a.body["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: failed expression: !object.metadata.name.contains('bad')"),
        "{}",
        a.body
    );
    // Outside both bindings' namespaces the policy does nothing.
    assert_eq!(c.post(CMS, json!({"metadata": {"name": "a-bad-one"}, "data": {"a": "1", "b": "2"}})).await.code, 201);
}

#[tokio::test]
async fn match_conditions_choose_which_requests_a_webhook_sees() {
    let c = cluster().await;
    let conditions = json!([{"name": "hooked", "expression": "object.metadata.name.startsWith('hooked-')"},
                            {"name": "not-the-admin", "expression": "request.userInfo.username != 'nobody'"}]);
    c.register(
        "MutatingWebhookConfiguration",
        json!({"name": "mutate.test.io", "clientConfig": service("/mutate"), "matchConditions": conditions}),
    )
    .await;
    let a = c.post(CMS, cm("hooked-one", json!({}))).await;
    assert_eq!(a.body["metadata"]["annotations"]["webhook.test/mutated"], "true", "{}", a.body);
    let a = c.post(CMS, cm("plain", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert!(a.body["metadata"].get("annotations").is_none(), "{}", a.body);
    assert_eq!(c.calls("/mutate").len(), 1);
    // A condition that fails to evaluate fails the request under `failurePolicy: Fail`.
    let broken = json!([{"name": "broken", "expression": "object.data.missing == 'x'"}]);
    c.register(
        "ValidatingWebhookConfiguration",
        json!({"name": "validate.test.io", "clientConfig": service("/validate"), "matchConditions": broken}),
    )
    .await;
    let a = c.post(CMS, cm("other", json!({}))).await;
    assert_eq!(a.code, 500, "{}", a.body);
    let msg = a.body["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "Internal error occurred: failed calling webhook \"validate.test.io\": matchCondition 'broken': "
        ),
        "{msg}"
    );
    assert!(c.calls("/validate").is_empty());
}

#[tokio::test]
async fn a_webhook_that_asks_to_be_reinvoked_sees_a_later_webhooks_change() {
    let c = cluster().await;
    // Configurations run in name order: "a-..." first.
    c.register(
        "MutatingWebhookConfiguration",
        json!({"name": "a-mutate.test.io", "clientConfig": service("/mutate"), "reinvocationPolicy": "IfNeeded"}),
    )
    .await;
    c.register("MutatingWebhookConfiguration", json!({"name": "b-label.test.io", "clientConfig": service("/label")}))
        .await;
    let a = c.post(CMS, cm("one", json!({}))).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(
        (
            a.body["metadata"]["labels"]["labelled"].clone(),
            a.body["metadata"]["annotations"]["webhook.test/mutated"].clone()
        ),
        (json!("yes"), json!("true"))
    );
    let calls = c.calls("/mutate");
    assert_eq!(calls.len(), 2, "reinvoked once");
    assert_eq!(calls[1]["object"]["metadata"]["labels"]["labelled"], "yes", "the reinvocation sees the later change");
    assert_eq!(c.calls("/label").len(), 1);
    // Without the policy it is called once.
    let c = cluster().await;
    c.register("MutatingWebhookConfiguration", json!({"name": "a-mutate.test.io", "clientConfig": service("/mutate")}))
        .await;
    c.register("MutatingWebhookConfiguration", json!({"name": "b-label.test.io", "clientConfig": service("/label")}))
        .await;
    assert_eq!(c.post(CMS, cm("one", json!({}))).await.code, 201);
    assert_eq!(c.calls("/mutate").len(), 1);
}

#[tokio::test]
async fn the_shipped_webhook_configurations_are_accepted_and_match_their_requests() {
    let c = cluster().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/webhook/manifests.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(!docs.is_empty());
    for d in docs {
        let plural = format!("{}s", d["kind"].as_str().unwrap().to_lowercase());
        let a = c.post(&format!("/apis/admissionregistration.k8s.io/v1/{plural}"), d).await;
        assert_eq!(a.code, 201, "{}", a.body);
    }
    // Nothing serves them here: a JobSet's create fails closed with kube-apiserver's message,
    // naming the Service the manifests reference; a ConfigMap is none of their business.
    let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
                    "spec": {"replicatedJobs": []}});
    let a = c.post("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", js).await;
    assert_eq!(a.code, 500, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "Internal error occurred: failed calling webhook \"mjobset.kb.io\": failed to call webhook: Post \"https://jobset-webhook-service.jobset-system.svc:443/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s\": service \"jobset-webhook-service\" not found"
    );
    assert_eq!(c.post(CMS, cm("one", json!({}))).await.code, 201);
}
