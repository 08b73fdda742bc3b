//! The admission webhooks `jobset manager` serves on every replica (controller-runtime's webhook
//! server): HTTPS on `webhook.host:webhook.port` (9443), `admission.k8s.io/v1` AdmissionReviews at
//! upstream's paths, answered as controller-runtime's admission handlers answer them.
//!
//! | path | upstream |
//! |---|---|
//! | `/mutate-jobset-x-k8s-io-v1alpha2-jobset` | JobSet defaulting (`jobset_api::jobset::default_jobset`) |
//! | `/validate-jobset-x-k8s-io-v1alpha2-jobset` | JobSet validation (`validate_jobset_in`), 422 `Invalid` |
//! | `/mutate--v1-pod`, `/validate--v1-pod` | exclusive placement ([`pod`]) |
//! | `/mutate-workload-codeflare-dev-v1beta2-appwrapper` | the requesting user's labels |
//! | `/validate-workload-codeflare-dev-v1beta2-appwrapper` | AppWrapper validation, 403 |
//!
//! How controller-runtime answers: a mutation is a JSON patch from the object as received to the
//! defaulted one (none when nothing changed); an error that is an API Status (JobSet's
//! `NewInvalid`) is the response's `status` as is; any other error is `Denied(err.Error())`
//! (403 `Forbidden`); an undecodable request is `Errored(400)`; `DELETE` is allowed. JobSet
//! validation adds the in-place restart agent warnings our built-in admission gives.
//!
//! The AdmissionReview is read into small structs of its own rather than kube's typed
//! `AdmissionRequest`, whose typed object would not be the raw object the patch must start from.

pub mod pod;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine;
use jobset_api::admission::{aggregate, default_appwrapper_user, invalid_status};
use jobset_api::jobset::{ClaimLookup, Features};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Client;
use kube::api::Api;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::certs::{self, CertConfig, ServingCert};
use crate::config::Configuration;
use crate::endpoints::{self, Endpoint};

pub const MUTATE_JOBSET: &str = "/mutate-jobset-x-k8s-io-v1alpha2-jobset";
pub const VALIDATE_JOBSET: &str = "/validate-jobset-x-k8s-io-v1alpha2-jobset";
pub const MUTATE_POD: &str = "/mutate--v1-pod";
pub const VALIDATE_POD: &str = "/validate--v1-pod";
pub const MUTATE_APPWRAPPER: &str = "/mutate-workload-codeflare-dev-v1beta2-appwrapper";
pub const VALIDATE_APPWRAPPER: &str = "/validate-workload-codeflare-dev-v1beta2-appwrapper";

/// controller-runtime's limit on a request body.
const MAX_REQUEST_SIZE: usize = 7 * 1024 * 1024;
/// controller-runtime's certwatcher polls the certificate files this often.
pub const DEFAULT_CERT_DIR_POLL: Duration = Duration::from_secs(10);
/// controller-runtime's default `CertDir`.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// The part of `admission.k8s.io/v1` `AdmissionReview` the webhooks read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionReview {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<AdmissionRequest>,
}

/// An `AdmissionRequest`: what the webhooks read of it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AdmissionRequest {
    pub uid: String,
    pub operation: String,
    pub namespace: String,
    pub user_info: UserInfo,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
}

/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// A webhook's answer (controller-runtime's `admission.Response` before `Complete`).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub allowed: bool,
    /// The `metav1.Status` (`None`: `{code: 200}` once completed).
    pub status: Option<Value>,
    pub patch: json_patch::Patch,
    pub warnings: Vec<String>,
}

impl Answer {
    /// `Allowed("")`.
    pub fn allowed() -> Answer {
        Answer { allowed: true, status: None, patch: json_patch::Patch(vec![]), warnings: vec![] }
    }

    /// `Denied(message)`: 403 `Forbidden`.
    pub fn denied(message: &str) -> Answer {
        let mut status = json!({"metadata": {}, "reason": "Forbidden", "code": 403});
        if !message.is_empty() {
            status["message"] = json!(message);
        }
        Answer { allowed: false, status: Some(status), ..Answer::allowed() }
    }

    /// `Errored(code, err)`.
    pub fn errored(code: u16, message: &str) -> Answer {
        Answer {
            allowed: false,
            status: Some(json!({"metadata": {}, "message": message, "code": code})),
            ..Answer::allowed()
        }
    }

    /// `validationResponseFromStatus(false, status)`: an API Status error as is.
    pub fn status(status: Value) -> Answer {
        Answer { allowed: false, status: Some(status), ..Answer::allowed() }
    }

    /// `PatchResponseFromRaw(original, current)`.
    pub fn patch(original: &Value, current: &Value) -> Answer {
        Answer { patch: json_patch::diff(original, current), ..Answer::allowed() }
    }

    fn with_warnings(mut self, warnings: Vec<String>) -> Answer {
        self.warnings.extend(warnings);
        self
    }

    /// The `response` of the AdmissionReview for request `uid` (`Response.Complete`).
    pub fn complete(self, uid: &str) -> Value {
        let mut status = self.status.unwrap_or_else(|| json!({"metadata": {}}));
        if status.get("code").and_then(Value::as_u64).unwrap_or(0) == 0 {
            status["code"] = json!(200);
        }
        let mut r = json!({"uid": uid, "allowed": self.allowed, "status": status});
        if !self.patch.0.is_empty() {
            let bytes = serde_json::to_vec(&self.patch).unwrap_or_default();
            r["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            r["patchType"] = json!("JSONPatch");
        }
        if !self.warnings.is_empty() {
            r["warnings"] = json!(self.warnings);
        }
        r
    }
}

/// An error of a lookup: an API Status (answered as is) or a plain message (denied).
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    Status(Value),
    Message(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(s) => f.write_str(s.get("message").and_then(Value::as_str).unwrap_or_default()),
            Failure::Message(m) => f.write_str(m),
        }
    }
}

impl Failure {
    fn into_answer(self) -> Answer {
        match self {
            Failure::Status(s) => Answer::status(s),
            Failure::Message(m) => Answer::denied(&m),
        }
    }
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Failure {
        match e {
            kube::Error::Api(s) => Failure::Status(serde_json::to_value(&*s).unwrap_or_default()),
            other => Failure::Message(other.to_string()),
        }
    }
}

/// The object of a request, which must be there (the decoder's `there is no content to decode`).
fn decode(object: Option<&Value>) -> Result<&Value, Answer> {
    match object {
        None | Some(Value::Null) => Err(Answer::errored(400, "there is no content to decode")),
        Some(v) if v.is_object() => Ok(v),
        Some(_) => Err(Answer::errored(400, "couldn't decode the object: expected a JSON object")),
    }
}

/// A validator's answer to every operation but `CREATE` when it checks creates only.
fn validate_other(req: &AdmissionRequest) -> Answer {
    match req.operation.as_str() {
        "CONNECT" => Answer::allowed(),
        "UPDATE" => match decode(req.object.as_ref()).and(decode(req.old_object.as_ref())) {
            Ok(_) => Answer::allowed(),
            Err(a) => a,
        },
        "DELETE" => match decode(req.old_object.as_ref()) {
            Ok(_) => Answer::allowed(),
            Err(a) => a,
        },
        op => Answer::errored(400, &format!("unknown operation {}", jobset_api::field::quote(op))),
    }
}

/// A defaulter: `DELETE` allowed, anything else the patch `default` makes.
fn mutate(req: &AdmissionRequest, default: impl FnOnce(&mut Value)) -> Answer {
    if req.operation == "DELETE" {
        return Answer::allowed();
    }
    match decode(req.object.as_ref()) {
        Ok(obj) => {
            let mut defaulted = obj.clone();
            default(&mut defaulted);
            Answer::patch(obj, &defaulted)
        }
        Err(a) => a,
    }
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

/// `/mutate-jobset-x-k8s-io-v1alpha2-jobset`.
pub fn mutate_jobset(req: &AdmissionRequest) -> Answer {
    mutate(req, jobset_api::jobset::default_jobset)
}

/// `/validate-jobset-x-k8s-io-v1alpha2-jobset`: `claim` finds existing PersistentVolumeClaims.
pub fn validate_jobset(req: &AdmissionRequest, features: &Features, claim: &ClaimLookup) -> Answer {
    let (obj, old) = match req.operation.as_str() {
        "CREATE" => match decode(req.object.as_ref()) {
            Ok(o) => (o, None),
            Err(a) => return a,
        },
        "UPDATE" => match (decode(req.object.as_ref()), decode(req.old_object.as_ref())) {
            (Ok(o), Ok(old)) => (o, Some(old)),
            (Err(a), _) | (_, Err(a)) => return a,
        },
        _ => return validate_other(req),
    };
    let warnings = jobset_api::jobset::agent::missing_agent_warnings(obj);
    let errs = jobset_api::jobset::validate_jobset_in(obj, old, features, claim);
    if errs.is_empty() {
        return Answer::allowed().with_warnings(warnings);
    }
    use jobset_api::jobset::keys::{GROUP, KIND};
    Answer::status(invalid_status(GROUP, KIND, name_of(obj), &errs)).with_warnings(warnings)
}

/// `/mutate-workload-codeflare-dev-v1beta2-appwrapper`.
pub fn mutate_appwrapper(req: &AdmissionRequest) -> Answer {
    mutate(req, |aw| default_appwrapper_user(aw, &req.user_info.username, &req.user_info.uid))
}

/// `/validate-workload-codeflare-dev-v1beta2-appwrapper`: errors are denied with their aggregate.
pub fn validate_appwrapper(req: &AdmissionRequest) -> Answer {
    use jobset_api::appwrapper::validation::{validate_appwrapper, validate_appwrapper_update};
    let errs = match req.operation.as_str() {
        "CREATE" => match decode(req.object.as_ref()) {
            Ok(obj) => {
                let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty());
                validate_appwrapper(obj, ns.unwrap_or(&req.namespace))
            }
            Err(a) => return a,
        },
        "UPDATE" => match (decode(req.object.as_ref()), decode(req.old_object.as_ref())) {
            (Ok(new), Ok(old)) => validate_appwrapper_update(new, old),
            (Err(a), _) | (_, Err(a)) => return a,
        },
        _ => return validate_other(req),
    };
    match errs.is_empty() {
        true => Answer::allowed(),
        false => Answer::denied(&aggregate(&errs)),
    }
}

/// Reads an AdmissionReview as controller-runtime's `ServeHTTP` does; an unreadable one is
/// answered at once.
fn read_review(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Result<(AdmissionReview, Value), Value> {
    let fail = |code: u16, m: &str| json!({"response": Answer::errored(code, m).complete("")});
    let body = match body {
        Ok(b) if b.len() >= MAX_REQUEST_SIZE => {
            return Err(fail(413, &format!("request entity is too large; limit is {MAX_REQUEST_SIZE} bytes")));
        }
        Ok(b) if b.is_empty() => return Err(fail(400, "request body is empty")),
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(fail(413, &format!("request entity is too large; limit is {MAX_REQUEST_SIZE} bytes")));
        }
        Err(e) => return Err(fail(400, &e.body_text())),
    };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type != "application/json" {
        return Err(fail(400, &format!("contentType={content_type}, expected application/json")));
    }
    let review: AdmissionReview =
        serde_json::from_slice(&body).map_err(|e| fail(400, &format!("couldn't decode the AdmissionReview: {e}")))?;
    let envelope = json!({
        "kind": review.kind.clone().unwrap_or_else(|| "AdmissionReview".into()),
        "apiVersion": review.api_version.clone().unwrap_or_else(|| "admission.k8s.io/v1".into()),
    });
    Ok((review, envelope))
}

/// What the handlers share: the cluster client and the JobSet feature gates.
#[derive(Clone)]
pub struct Webhooks {
    pub client: Client,
    pub features: Features,
}

/// Answers one review with `handle`.
async fn serve<F, Fut>(headers: HeaderMap, body: Result<Bytes, BytesRejection>, handle: F) -> axum::response::Response
where
    F: FnOnce(AdmissionRequest) -> Fut,
    Fut: Future<Output = Answer>,
{
    let (review, mut envelope) = match read_review(&headers, body) {
        Ok(r) => r,
        Err(answer) => return axum::Json(answer).into_response(),
    };
    let req = review.request.unwrap_or_default();
    let uid = req.uid.clone();
    envelope["response"] = handle(req).await.complete(&uid);
    axum::Json(envelope).into_response()
}

/// The webhooks' routes.
pub fn router(webhooks: Arc<Webhooks>) -> Router {
    type Body = Result<Bytes, BytesRejection>;
    Router::new()
        .route(MUTATE_JOBSET, post(|h: HeaderMap, b: Body| serve(h, b, |r| async move { mutate_jobset(&r) })))
        .route(
            VALIDATE_JOBSET,
            post(|State(w): State<Arc<Webhooks>>, h: HeaderMap, b: Body| {
                serve(h, b, move |r| async move {
                    // The PVC checks read the cluster from inside the (synchronous) validation.
                    let runtime = tokio::runtime::Handle::current();
                    let task = tokio::task::spawn_blocking(move || {
                        let claim = |ns: &str, name: &str| {
                            let api = Api::<PersistentVolumeClaim>::namespaced(w.client.clone(), ns);
                            let found = runtime.block_on(api.get_opt(name)).ok().flatten();
                            found.and_then(|c| serde_json::to_value(c).ok())
                        };
                        validate_jobset(&r, &w.features, &claim)
                    });
                    task.await.unwrap_or_else(|e| Answer::errored(500, &format!("validating: {e}")))
                })
            }),
        )
        .route(
            MUTATE_POD,
            post(|State(w): State<Arc<Webhooks>>, h: HeaderMap, b: Body| {
                serve(h, b, move |r| async move { pod::mutate(&r, &pod::ApiServer(&w.client)).await })
            }),
        )
        .route(
            VALIDATE_POD,
            post(|State(w): State<Arc<Webhooks>>, h: HeaderMap, b: Body| {
                serve(h, b, move |r| async move { pod::validate(&r, &pod::ApiServer(&w.client)).await })
            }),
        )
        .route(MUTATE_APPWRAPPER, post(|h: HeaderMap, b: Body| serve(h, b, |r| async move { mutate_appwrapper(&r) })))
        .route(
            VALIDATE_APPWRAPPER,
            post(|h: HeaderMap, b: Body| serve(h, b, |r| async move { validate_appwrapper(&r) })),
        )
        .layer(DefaultBodyLimit::max(MAX_REQUEST_SIZE))
        .with_state(webhooks)
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum Certificates {
    /// Internal certificate management (`internalCertManagement.enable`).
    Internal(CertConfig),
    /// `tls.crt`/`tls.key` in a directory (`webhook.certDir`), read again every `poll`.
    Dir { dir: PathBuf, poll: Duration },
}

/// The webhook listener address and certificate source of a configuration; the manager's
/// namespace is [`certs::manager_namespace`].
pub fn from_config(cfg: &Configuration) -> Result<(SocketAddr, Certificates), String> {
    let host = cfg.webhook.host.as_deref().unwrap_or("0.0.0.0");
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    let addr = endpoints::parse_bind_address("webhook.host", &format!("{host}:{}", cfg.webhook.port))?
        .ok_or_else(|| format!("webhook.host: invalid host {host:?}"))?;
    let certs = &cfg.internal_cert_management;
    let source = match (certs.enable, &certs.webhook_service_name, &certs.webhook_secret_name) {
        (true, Some(service), Some(secret)) => {
            Certificates::Internal(CertConfig::new(&certs::manager_namespace(), service, secret))
        }
        _ => Certificates::Dir {
            dir: PathBuf::from(cfg.webhook.cert_dir.as_deref().unwrap_or(DEFAULT_CERT_DIR)),
            poll: DEFAULT_CERT_DIR_POLL,
        },
    };
    Ok((addr, source))
}

/// The webhook server: bound, and serving once [`WebhookServer::serve`] runs.
pub struct WebhookServer {
    endpoint: Endpoint,
    client: Client,
    certs: Certificates,
    serving: Arc<ServingCert>,
    ready: watch::Sender<bool>,
}

impl WebhookServer {
    /// Binds `addr` now (a port in use is an error naming `webhook.port`); with a cert dir,
    /// reads its certificate now too (missing or bad files are an error, as controller-runtime's
    /// certwatcher fails the manager's start).
    pub fn bind(
        addr: SocketAddr,
        client: Client,
        features: Features,
        certs: Certificates,
    ) -> anyhow::Result<WebhookServer> {
        let serving = Arc::new(ServingCert::default());
        let (ready, _) = watch::channel(false);
        if let Certificates::Dir { dir, .. } = &certs {
            let (cert, key) = certs::read_dir(dir).map_err(|e| anyhow::anyhow!(e))?;
            serving.set(&cert, &key).map_err(|e| anyhow::anyhow!("webhook.certDir: {}: {e}", dir.display()))?;
            ready.send_replace(true);
        }
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(serving.clone());
        // HTTP/2 off, as upstream (the HTTP/2 rapid-reset CVEs).
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let router = router(Arc::new(Webhooks { client: client.clone(), features }));
        let endpoint = Endpoint::bind("webhook.port", addr, router, Some(Arc::new(tls)))?;
        Ok(WebhookServer { endpoint, client, certs, serving, ready })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.listener.local_addr()
    }

    pub fn url(&self) -> String {
        self.endpoint.url("")
    }

    /// True once the server presents a valid certificate (and, managed internally, the CA is
    /// injected): upstream's readiness check.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// Serves until `handle` shuts the server down, keeping its certificate current meanwhile.
    pub async fn serve(self, handle: axum_server::Handle<SocketAddr>) -> std::io::Result<()> {
        let WebhookServer { endpoint, client, certs, serving, ready } = self;
        let keep_current = async move {
            match certs {
                Certificates::Internal(cfg) => certs::manage(client, cfg, serving, ready).await,
                Certificates::Dir { dir, poll } => certs::watch_dir(dir, poll, serving).await,
            }
        };
        tokio::select! {
            served = endpoint.serve(handle) => served,
            _ = keep_current => Ok(()),
        }
    }
}

/// `router` with `/readyz` failing while `ready` is false (upstream's readiness check on the
/// webhook server's certificates).
pub fn gate_readiness(router: Router, ready: watch::Receiver<bool>) -> Router {
    router.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
        let ready = *ready.borrow();
        async move {
            if req.uri().path() == "/readyz" && !ready {
                let body = "[-]readyz failed: certificates are not ready\nreadyz check failed";
                return (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
            }
            next.run(req).await
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobset_api::appwrapper::keys::{USER_LABEL, USERID_LABEL};

    fn request(op: &str, obj: Option<Value>, old: Option<Value>) -> AdmissionRequest {
        AdmissionRequest {
            uid: "uid-1".into(),
            operation: op.into(),
            object: obj,
            old_object: old,
            ..Default::default()
        }
    }

    fn no_claims(_: &str, _: &str) -> Option<Value> {
        None
    }

    fn jobset(spec: Value) -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "default"}, "spec": spec})
    }

    fn rjob(name: &str) -> Value {
        json!({"name": name, "replicas": 1, "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}]}}}}})
    }

    #[test]
    fn the_default_jobset_patch_gives_upstream_s_defaults() {
        let js = jobset(json!({"replicatedJobs": [rjob("w")]}));
        let answer = mutate_jobset(&request("CREATE", Some(js.clone()), None));
        assert!(answer.allowed && answer.status.is_none(), "{answer:?}");
        let mut defaulted = js.clone();
        json_patch::patch(&mut defaulted, &answer.patch).unwrap();
        let spec = &defaulted["spec"];
        assert_eq!(spec["successPolicy"], json!({"operator": "All"}));
        assert_eq!(spec["startupPolicy"], json!({"startupPolicyOrder": "AnyOrder"}));
        assert_eq!(spec["network"], json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true}));
        let job = &spec["replicatedJobs"][0]["template"]["spec"];
        assert_eq!(job["completionMode"], "Indexed");
        assert_eq!(job["template"]["spec"]["restartPolicy"], "OnFailure");
        // Completed: base64 of the JSON patch, type JSONPatch, uid echoed, status 200.
        let r = answer.clone().complete("uid-1");
        assert_eq!(
            (&r["uid"], &r["allowed"], &r["patchType"], &r["status"]),
            (&json!("uid-1"), &json!(true), &json!("JSONPatch"), &json!({"metadata": {}, "code": 200}))
        );
        let bytes = base64::engine::general_purpose::STANDARD.decode(r["patch"].as_str().unwrap()).unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(ops, answer.patch);
    }

    #[test]
    fn a_defaulted_jobset_needs_no_patch_and_delete_is_allowed() {
        let mut js = jobset(json!({"replicatedJobs": [rjob("w")]}));
        jobset_api::jobset::default_jobset(&mut js);
        let answer = mutate_jobset(&request("CREATE", Some(js), None));
        assert_eq!(answer, Answer::allowed());
        assert_eq!(answer.complete("u"), json!({"uid": "u", "allowed": true, "status": {"metadata": {}, "code": 200}}));
        assert_eq!(mutate_jobset(&request("DELETE", None, None)), Answer::allowed());
        assert_eq!(
            mutate_jobset(&request("CREATE", None, None)),
            Answer::errored(400, "there is no content to decode")
        );
    }

    #[test]
    fn an_invalid_jobset_is_denied_with_upstream_s_422() {
        let mut second = rjob("b");
        second["dependsOn"] = json!([{"name": "missing", "status": "Ready"}]);
        let mut first = rjob("a");
        first["dependsOn"] = json!([{"name": "b", "status": "Ready"}]);
        let mut js = jobset(json!({"replicatedJobs": [first, second]}));
        jobset_api::jobset::default_jobset(&mut js);
        let answer = validate_jobset(&request("CREATE", Some(js), None), &Features::default(), &no_claims);
        assert!(!answer.allowed);
        let status = answer.status.clone().unwrap();
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["message"],
            "JobSet.jobset.x-k8s.io \"js\" is invalid: [<nil>: Internal error: DependsOn can't be set for the first ReplicatedJob, \
             <nil>: Internal error: replicatedJob: a cannot depend on replicatedJob: b, \
             <nil>: Internal error: replicatedJob: b cannot depend on replicatedJob: missing]"
        );
        assert_eq!(status["details"]["kind"], "JobSet");
        assert_eq!(status["details"]["causes"][0]["reason"], "InternalError");
    }

    #[test]
    fn a_disabled_gate_s_field_is_refused_as_upstream() {
        let mut js =
            jobset(json!({"replicatedJobs": [rjob("w")], "failurePolicy": {"restartStrategy": "InPlaceRestart"}}));
        jobset_api::jobset::default_jobset(&mut js);
        let off = Features { in_place_restart: false, ..Features::default() };
        let answer = validate_jobset(&request("CREATE", Some(js), None), &off, &no_claims);
        let message = answer.status.unwrap()["message"].as_str().unwrap().to_string();
        assert!(
            message
                .contains("InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"),
            "{message}"
        );
    }

    #[test]
    fn a_valid_jobset_is_allowed_on_create_update_and_delete() {
        let mut js = jobset(json!({"replicatedJobs": [rjob("w")]}));
        jobset_api::jobset::default_jobset(&mut js);
        let f = Features::default();
        assert_eq!(validate_jobset(&request("CREATE", Some(js.clone()), None), &f, &no_claims), Answer::allowed());
        let mut suspended = js.clone();
        suspended["spec"]["suspend"] = json!(true);
        assert_eq!(
            validate_jobset(&request("UPDATE", Some(suspended), Some(js.clone())), &f, &no_claims),
            Answer::allowed()
        );
        assert_eq!(validate_jobset(&request("DELETE", None, Some(js.clone())), &f, &no_claims), Answer::allowed());
        assert_eq!(
            validate_jobset(&request("PATCH", Some(js), None), &f, &no_claims),
            Answer::errored(400, "unknown operation \"PATCH\"")
        );
    }

    #[test]
    fn an_immutable_change_is_denied_on_update() {
        let mut old = jobset(json!({"replicatedJobs": [rjob("w")]}));
        jobset_api::jobset::default_jobset(&mut old);
        let mut new = old.clone();
        new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("nginx");
        let answer = validate_jobset(&request("UPDATE", Some(new), Some(old)), &Features::default(), &no_claims);
        let status = answer.status.unwrap();
        let message = status["message"].as_str().unwrap();
        assert!(
            message.starts_with("JobSet.jobset.x-k8s.io \"js\" is invalid: spec.replicatedJobs: Invalid value: [{"),
            "{message}"
        );
        assert!(message.ends_with("\"restartPolicy\":\"OnFailure\"}}}}}]: field is immutable"), "{message}");
        assert!(message.contains("\"image\":\"nginx\""), "the new value: {message}");
        assert_eq!((status["code"].clone(), status["reason"].clone()), (json!(422), json!("Invalid")));
    }

    fn appwrapper(components: Value) -> Value {
        json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
               "metadata": {"name": "aw", "namespace": "default"}, "spec": {"components": components}})
    }

    #[test]
    fn an_appwrapper_is_labelled_with_the_requesting_user() {
        let aw = appwrapper(json!([]));
        let mut req = request("CREATE", Some(aw.clone()), None);
        req.user_info = UserInfo { username: "system:admin".into(), uid: "u-1".into(), groups: vec![] };
        let answer = mutate_appwrapper(&req);
        let mut labelled = aw;
        json_patch::patch(&mut labelled, &answer.patch).unwrap();
        assert_eq!(labelled["metadata"]["labels"], json!({USER_LABEL: "system_admin", USERID_LABEL: "u-1"}));
    }

    #[test]
    fn an_invalid_appwrapper_is_denied_with_the_aggregate_as_controller_runtime_does() {
        let answer = validate_appwrapper(&request("CREATE", Some(appwrapper(json!([]))), None));
        assert_eq!(answer, Answer::denied("spec.components: Invalid value: []: components contains no podspecs"));
        assert_eq!(
            answer.complete("u"),
            json!({"uid": "u", "allowed": false, "status": {
                "metadata": {}, "reason": "Forbidden", "code": 403,
                "message": "spec.components: Invalid value: []: components contains no podspecs"}})
        );
    }

    #[test]
    fn a_request_controller_runtime_cannot_read_is_errored() {
        let json_ct = {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
            h
        };
        let cases: [(&str, HeaderMap, &[u8], u16, &str); 4] = [
            ("empty", json_ct.clone(), b"", 400, "request body is empty"),
            ("not JSON content", HeaderMap::new(), b"{}", 400, "contentType=, expected application/json"),
            (
                "not a review",
                json_ct.clone(),
                b"{\"request\": 1}",
                400,
                "couldn't decode the AdmissionReview: invalid type: integer `1`, expected struct AdmissionRequest at line 1 column 13",
            ),
            (
                "too large",
                json_ct.clone(),
                &[b' '; MAX_REQUEST_SIZE],
                413,
                "request entity is too large; limit is 7340032 bytes",
            ),
        ];
        for (name, headers, body, code, message) in cases {
            let got = read_review(&headers, Ok(Bytes::copy_from_slice(body))).unwrap_err();
            assert_eq!(got["response"]["status"], json!({"metadata": {}, "message": message, "code": code}), "{name}");
            assert_eq!(got["response"]["allowed"], false, "{name}");
        }
        let (review, envelope) = read_review(&json_ct, Ok(Bytes::from_static(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE"}}"#))).unwrap();
        assert_eq!(review.request.unwrap().uid, "x");
        assert_eq!(envelope, json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}));
    }

    #[tokio::test]
    async fn readyz_fails_until_the_webhook_certificates_are_ready_and_other_paths_pass() {
        use tower::ServiceExt;
        let (tx, rx) = watch::channel(false);
        let inner = Router::new()
            .route("/readyz", axum::routing::get(|| async { "ok" }))
            .route("/healthz", axum::routing::get(|| async { "ok" }));
        let app = gate_readiness(inner, rx);
        let get = |app: Router, path: &'static str| async move {
            let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
            let resp = app.oneshot(req).await.unwrap();
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        assert_eq!(
            get(app.clone(), "/readyz").await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "[-]readyz failed: certificates are not ready\nreadyz check failed".into()
            )
        );
        assert_eq!(get(app.clone(), "/healthz").await, (StatusCode::OK, "ok".into()));
        tx.send_replace(true);
        assert_eq!(get(app, "/readyz").await, (StatusCode::OK, "ok".into()));
    }

    #[test]
    fn the_configuration_gives_the_listener_and_the_certificate_source() {
        let defaults = Configuration::default();
        let (addr, certs) = from_config(&defaults).unwrap();
        assert_eq!(addr.to_string(), "0.0.0.0:9443");
        match certs {
            Certificates::Internal(c) => {
                assert_eq!(
                    (c.service_name.as_str(), c.secret_name.as_str()),
                    ("jobset-webhook-service", "jobset-webhook-server-cert")
                );
                assert_eq!(c.configurations.len(), 2);
            }
            other => panic!("internal management is upstream's default: {other:?}"),
        }
        let mut own = Configuration::default();
        own.webhook.host = Some("::1".into());
        own.webhook.port = 9444;
        own.webhook.cert_dir = Some("/certs".into());
        own.internal_cert_management.enable = false;
        let (addr, certs) = from_config(&own).unwrap();
        assert_eq!(addr.to_string(), "[::1]:9444");
        assert!(matches!(certs, Certificates::Dir { dir, .. } if dir == std::path::Path::new("/certs")));
        own.webhook.host = Some("not an address".into());
        let e = from_config(&own).unwrap_err();
        assert!(e.starts_with("webhook.host: invalid bind address"), "{e}");
    }
}
