//! An embedded, Kubernetes-compatible API server.
//!
//! Controllers talk to it through a `kube::Client` ([`ApiServer::client`], in-process, no socket)
//! or over HTTPS ([`serve::serve_https`]). Objects are stored as JSON, so fields this binary does
//! not know survive a round trip.

pub mod admission;
pub mod auth;
mod builtin;
pub mod crd_schema;
pub mod discovery;
pub mod error;
mod events;
pub mod fixtures;
pub mod flowcontrol;
pub mod http;
pub mod logs;
pub mod names;
pub mod object;
pub mod ops;
pub mod pdb;
pub mod persist;
pub mod pods;
pub mod priority;
pub mod protobuf;
pub mod quota;
pub mod rbac;
pub mod resources;
pub mod review;
pub mod selector;
pub mod serve;
pub mod store;
pub mod strategic_merge;
pub mod table;
pub mod tls;
mod watch;
pub mod webhook;

use std::sync::Arc;

use serde_json::json;

pub use crate::admission::{Admission, AdmissionHook, Lookup};
pub use crate::error::{ApiError, Cause};
pub use crate::http::{ApiServer, Clock, MetricsRegistry, OPENMETRICS_CONTENT_TYPE, ServerConfig};
use crate::ops::Ctx;
use crate::persist::Backend;
use crate::resources::Registry;
use crate::store::{Store, Txn};

/// `call`, its latency recorded for `class` when it completes.
async fn timed<T>(
    fc: Arc<flowcontrol::FlowControl>,
    class: flowcontrol::UserClass,
    call: impl Future<Output = T>,
) -> T {
    let started = std::time::Instant::now();
    let answer = call.await;
    fc.latency.record(class, started.elapsed());
    answer
}

/// The in-process clients' retries: kube's own client's (`RetryPolicy::server_retry`: 429, 503
/// and 504, with `Retry-After`), but a request is kept for a retry only when this server may
/// answer it with one of those: with in-flight limits or priority and fairness limiting, for
/// any request; else for reads (504 while a resourceVersion is awaited), evictions (429 from a
/// disruption budget), and while admission webhooks or policies are registered (their own
/// codes). A copy of every request cost 4k of the 318k instructions of an in-process pod create.
#[derive(Clone)]
struct InProcessRetry {
    policy: kube::client::retry::RetryPolicy,
    server: std::sync::Weak<ApiServer>,
}

impl InProcessRetry {
    fn new(server: &Arc<ApiServer>) -> InProcessRetry {
        InProcessRetry { policy: kube::client::retry::RetryPolicy::server_retry(), server: Arc::downgrade(server) }
    }
}

impl ApiServer {
    /// Whether this server may answer `method path` 429, 503 or 504 (see [`InProcessRetry`]).
    fn may_answer_retryable(&self, method: &::http::Method, path: &str) -> bool {
        self.flowcontrol.limited()
            || self.inflight.limited()
            || method == ::http::Method::GET
            || path.ends_with("/eviction")
            || {
                let r = self.webhooks.registered(&self.store);
                !r.hooks.is_empty() || !r.policies.is_empty()
            }
    }
}

type ClientRequest = ::http::Request<kube::client::Body>;

impl<Res> tower::retry::Policy<ClientRequest, ::http::Response<Res>, tower::BoxError> for InProcessRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut ClientRequest,
        result: &mut Result<::http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        self.policy.retry(req, result)
    }

    fn clone_request(&mut self, req: &ClientRequest) -> Option<ClientRequest> {
        let server = self.server.upgrade()?;
        if !server.may_answer_retryable(req.method(), req.uri().path()) {
            return None;
        }
        // The copy kube's policy makes, without rebuilding the header map.
        let mut copy = ::http::Request::new(req.body().try_clone()?);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

/// Namespaces every cluster starts with.
pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl ApiServer {
    /// A server over `backend`, with the system namespaces and preinstalled CRDs in place.
    pub fn new(
        backend: Box<dyn Backend>,
        admission: Admission,
        config: ServerConfig,
    ) -> Result<Arc<ApiServer>, String> {
        let registry = Arc::new(Registry::with_builtins());
        let store = Store::open(backend, registry, config.store.clone())?;
        let mut admission = builtin::with_builtins(admission, &config.external_admission);
        webhook::register(&mut admission);
        let inflight = http::Inflight::new(&config);
        let seats = flowcontrol::total_seats(config.max_requests_inflight, config.max_mutating_requests_inflight);
        let flowcontrol = Arc::new(flowcontrol::FlowControl::new(
            seats.filter(|_| config.enable_priority_and_fairness),
            config.priority_and_fairness_wait_limit,
        ));
        let server = Arc::new(ApiServer {
            store,
            admission,
            config,
            requests: Default::default(),
            inflight,
            flowcontrol,
            metrics: Default::default(),
            authenticator: Default::default(),
            rbac: Default::default(),
            webhooks: Default::default(),
        });
        server.bootstrap().map_err(|e| format!("bootstrapping the API server: {e}"))?;
        Ok(server)
    }

    /// An in-memory server with default settings.
    pub fn in_memory() -> Arc<ApiServer> {
        ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default())
            .expect("an empty in-memory store always opens")
    }

    fn bootstrap(&self) -> Result<(), ApiError> {
        let reg = self.registry();
        let ns_def = reg.get("", "v1", "namespaces").expect("built in");
        let crd_def = reg.get("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("built in");
        let crds = jobset_api::crds::preinstalled().map_err(ApiError::internal)?;
        let ctx = Ctx::new(&self.admission);
        self.store.write(|txn| {
            for ns in SYSTEM_NAMESPACES {
                if txn.get(&Txn::key(&ns_def, "", ns)).is_none() {
                    ops::create(txn, &ctx, &ns_def, "", json!({"metadata": {"name": ns}}))?;
                }
            }
            Ok(())
        })?;
        // kube-apiserver's start-up hook: the system PriorityClasses, when absent.
        let pc_def = reg.get(priority::GROUP, "v1", priority::PLURAL).expect("built in");
        for pc in priority::system_priority_classes() {
            let name = pc.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
            self.store.write(|txn| {
                if txn.get(&Txn::key(&pc_def, "", &name)).is_none() {
                    ops::create(txn, &ctx, &pc_def, "", pc)?;
                }
                Ok(())
            })?;
        }
        for crd in crds {
            let name = crd.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
            self.store.write(|txn| {
                match txn.get(&Txn::key(&crd_def, "", &name)) {
                    None => {
                        ops::create(txn, &ctx, &crd_def, "", crd)?;
                    }
                    // Written by another binary (an older one kept an open schema): this one's
                    // spec replaces it, as an operator upgrading CRDs would; the custom resources
                    // stay as stored.
                    Some(cur) if cur.value().get("spec") != crd.get("spec") => {
                        let mut upgraded = cur.value();
                        upgraded["spec"] = crd["spec"].clone();
                        ops::update(txn, &ctx, &crd_def, "", &name, upgraded, ops::Target::Main, Some(cur), None)?;
                    }
                    Some(_) => {}
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// A `kube::Client` bound to this server in-process: no network, no token. Needs a Tokio runtime.
    /// Like a client built from a kubeconfig, it retries 429 (an in-flight limit) and 503/504
    /// with kube's `RetryPolicy::server_retry()`, which waits the server's `Retry-After`.
    pub fn client(self: &Arc<Self>) -> kube::Client {
        let service = tower::ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(InProcessRetry::new(self)))
            .map_err(tower::BoxError::from)
            .service(self.router());
        kube::Client::new(service, "default")
    }

    /// [`ApiServer::client`] as `user` for priority and fairness (still authorized as the admin):
    /// local mode's controllers, node agents and simulated pods' agents each use one, so their
    /// requests are classified as a real cluster's components' would be. Each request's latency
    /// as this client sees it (its 429s and their `Retry-After` included) is recorded by the
    /// user's class in [`flowcontrol::FlowControl::latency`].
    pub fn client_as(self: &Arc<Self>, user: rbac::UserInfo) -> kube::Client {
        let class = flowcontrol::UserClass::of(&user);
        let requester = flowcontrol::Requester(Arc::new(user));
        let fc = self.flowcontrol.clone();
        let service = tower::ServiceBuilder::new()
            .map_future(move |call| timed(fc.clone(), class, call))
            .layer(tower::retry::RetryLayer::new(InProcessRetry::new(self)))
            .map_err(tower::BoxError::from)
            // Inside the retry layer: every attempt carries who sends it.
            .map_request(move |mut req: ::http::Request<kube::client::Body>| {
                req.extensions_mut().insert(requester.clone());
                req
            })
            .service(self.router());
        kube::Client::new(service, "default")
    }

    /// Whether the pod a token is bound to still exists (the same pod: same uid).
    pub fn pod_exists(&self, id: &auth::PodIdentity) -> bool {
        let def = self.registry().get("", "v1", "pods").expect("built in");
        self.store.get(&def, &id.namespace, &id.pod).is_some_and(|p| p.uid == id.uid)
    }

    /// Accepts `server_token`, the HTTPS listener's bearer token, as the admin's, and signs
    /// service-account tokens (and checks pod-bound ones) with keys derived from it
    /// ([`serve::authenticated_router`] calls this), so tokens outlive a restart with the same
    /// credentials. Until it is called, TokenRequests fail and TokenReviews authenticate nobody.
    pub fn set_service_account_signing_key(&self, server_token: &str) {
        let authenticator = Arc::new(auth::Authenticator::new(server_token));
        *self.authenticator.write().unwrap_or_else(|e| e.into_inner()) = Some(authenticator);
    }

    fn authenticator(&self) -> Option<Arc<auth::Authenticator>> {
        self.authenticator.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn now_seconds(&self) -> i64 {
        self.config.clock.now().as_second()
    }

    /// `POST /api/v1/namespaces/<namespace>/serviceaccounts/<name>/token`: answers a
    /// `TokenRequest` (JSON as posted) with the same object carrying `status.token` and
    /// `status.expirationTimestamp`, as kube-apiserver does. 404 when the ServiceAccount does not
    /// exist; 422 for an expiry under 10 minutes or over 2^32 seconds (default: an hour).
    pub fn create_token(
        &self,
        namespace: &str,
        name: &str,
        request: &serde_json::Value,
    ) -> Result<serde_json::Value, ApiError> {
        let req = auth::TokenRequest::parse(request, namespace, name)?;
        let def = self.registry().get("", "v1", "serviceaccounts").expect("built in");
        let sa = self.store.get(&def, namespace, name).ok_or_else(|| ApiError::not_found(&def, name))?;
        req.check(name, &sa.uid)?;
        let authenticator = self.authenticator().ok_or_else(|| {
            ApiError::internal("service account tokens are not configured: the server has no signing key")
        })?;
        let now = self.now_seconds();
        let claims = req.claims(namespace, name, &sa.uid, now);
        Ok(req.response(&claims, now, &authenticator.service_accounts().issue(&claims)))
    }

    /// A token for ServiceAccount `namespace`/`name`, valid for `expiration_seconds` (an hour when
    /// `None`): what `kubectl create token NAME -n NAMESPACE [--duration]` prints.
    pub fn issue_service_account_token(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: Option<i64>,
    ) -> Result<String, ApiError> {
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"expirationSeconds": expiration_seconds}});
        let answer = self.create_token(namespace, name, &request)?;
        Ok(answer.pointer("/status/token").and_then(|t| t.as_str()).unwrap_or_default().to_string())
    }

    /// Who bearer `token` names, as kube-apiserver's authenticators decide, for one of
    /// `audiences` (the API's when empty), with the audiences it is good for among them; or why it
    /// names nobody, worded as upstream. The server's own token is the admin; a pod-bound token
    /// holds while its pod (same uid) exists; a service-account token while it is unexpired and
    /// its ServiceAccount (same uid) exists. Requests and TokenReviews both ask this.
    pub fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<(auth::User, Vec<String>), String> {
        let authenticator = self.authenticator().ok_or_else(|| auth::INVALID_BEARER_TOKEN.to_string())?;
        let (claimed, audiences) = authenticator.read(token, self.now_seconds(), audiences)?;
        let user = match claimed {
            auth::Claimed::Admin => auth::User::Admin,
            auth::Claimed::Pod(id) => {
                let def = self.registry().get("", "v1", "pods").expect("built in");
                match self.store.get(&def, &id.namespace, &id.pod) {
                    None => return Err("service account token has been invalidated".into()),
                    Some(pod) if pod.uid != id.uid => {
                        return Err(format!(
                            "pod UID ({}) does not match service account pod ref claim ({})",
                            pod.uid, id.uid
                        ));
                    }
                    Some(_) => auth::User::Pod(id),
                }
            }
            auth::Claimed::ServiceAccount(claims) => {
                let def = self.registry().get("", "v1", "serviceaccounts").expect("built in");
                match self.store.get(&def, &claims.namespace, &claims.name) {
                    None => return Err(ApiError::not_found(&def, &claims.name).message),
                    Some(sa) if sa.uid != claims.uid => {
                        return Err(format!("service account UID ({}) does not match claim ({})", sa.uid, claims.uid));
                    }
                    Some(_) => auth::User::ServiceAccount(claims),
                }
            }
        };
        Ok((user, audiences))
    }

    /// The claims of a service-account token this server issued, if it has not expired and its
    /// ServiceAccount (same uid) still exists.
    pub fn authenticate_service_account(&self, token: &str) -> Option<auth::ServiceAccountClaims> {
        match self.authenticate_token(token, &[]) {
            Ok((auth::User::ServiceAccount(claims), _)) => Some(claims),
            _ => None,
        }
    }

    /// The identity kube-apiserver gives an authenticated caller (a pod-bound token's uid is its
    /// ServiceAccount's, when that exists).
    pub fn identity(&self, user: &auth::User) -> auth::Identity {
        let sa_uid = match user {
            auth::User::Pod(id) => {
                let def = self.registry().get("", "v1", "serviceaccounts").expect("built in");
                self.store.get(&def, &id.namespace, &id.service_account).map(|sa| sa.uid.clone())
            }
            _ => None,
        };
        user.identity(sa_uid.as_deref())
    }

    /// `POST /apis/authentication.k8s.io/v1/tokenreviews`: the posted `TokenReview` (JSON) with
    /// `status`: who `spec.token` names, or why nobody (still an answer, as kube-apiserver's).
    pub fn review_token(&self, body: &serde_json::Value) -> Result<serde_json::Value, ApiError> {
        let review = review::TokenReview::parse(body)?;
        let outcome = self
            .authenticate_token(&review.token, &review.audiences)
            .map(|(user, audiences)| (self.identity(&user), audiences));
        Ok(review.answer(&outcome))
    }

    /// `POST /apis/authorization.k8s.io/v1/{subjectaccessreviews,selfsubjectaccessreviews}`: the
    /// posted review (JSON) with `status`: whether its user (a SelfSubjectAccessReview's:
    /// `requester`) may make its request, as RBAC decides.
    pub fn review_access(
        &self,
        kind: resources::Review,
        body: &serde_json::Value,
        requester: &auth::User,
    ) -> Result<serde_json::Value, ApiError> {
        let review = review::AccessReview::parse(kind, body)?;
        let user = review.subject(&self.identity(requester).user_info());
        Ok(review.answer(&self.review(&user, &review.request())))
    }

    /// What RBAC says about `user` making request `r`, with upstream's reason (what a
    /// SubjectAccessReview answers).
    pub fn review(&self, user: &rbac::UserInfo, r: &rbac::RequestInfo) -> rbac::Verdict {
        self.rbac.policy(&self.store).review(user, r)
    }

    /// What RBAC says about `user` making request `r`, against the current Roles and bindings
    /// (parsed once per change of them, not per request).
    pub fn authorize(&self, user: &rbac::UserInfo, r: &rbac::RequestInfo) -> rbac::Decision {
        self.rbac.policy(&self.store).authorize(user, r)
    }

    /// The RBAC policy cache (for tests: which store generation the parsed policy is of).
    pub fn rbac_authorizer(&self) -> &rbac::Authorizer {
        &self.rbac
    }

    /// Deletes dependents whose owners are gone (objects created with an owner that no longer exists).
    pub fn collect_garbage(&self) -> Result<(), ApiError> {
        self.store.write(|txn| {
            let candidates = txn.orphan_candidates();
            ops::collect_orphans(txn, candidates)
        })
    }

    /// Runs the server's background deletions until the server is dropped elsewhere: the garbage
    /// collector every `gc_interval`, and the expiry of Events a TTL after their last write
    /// (`store.event_ttl`, as kube-apiserver's `--event-ttl`), each when it is due.
    pub fn spawn_gc(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.config.gc_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                let Some(next_expiry) = weak.upgrade().map(|s| s.store.next_event_expiry()) else { return };
                let expiry = async {
                    match next_expiry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => {
                        let Some(s) = weak.upgrade() else { return };
                        if let Err(e) = s.collect_garbage() {
                            tracing::warn!(error = %e, "garbage collection failed");
                        }
                    }
                    _ = expiry => {
                        let Some(s) = weak.upgrade() else { return };
                        if let Err(e) = s.store.expire_events(tokio::time::Instant::now()) {
                            tracing::warn!(error = %e, "deleting expired events failed");
                            // Not again at once: they are still due.
                            drop(s);
                            tokio::time::sleep(every).await;
                        }
                    }
                }
            }
        })
    }
}
