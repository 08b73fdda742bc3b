//! The HTTP face of the server: one fallback handler that parses Kubernetes paths by hand
//! (`/api/v1/namespaces/x` is both an object and a prefix, which route tables handle badly).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{Method, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::admission::Admission;
use crate::auth::{ResourceRequest, User};
use crate::discovery;
use crate::error::{ApiError, Result};
use crate::object::Obj;
use crate::ops::{self, Ctx, DeleteOptions, PatchType, Target};
use crate::resources::{Registry, ResourceDef, Review, Subresource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Store, StoreConfig, Txn};
use crate::table;
use crate::watch::{Filter, ListAt, ListOptions, Render, WatchFrom, WatchStream, bookmark_interval};
use crate::webhook::matching::Operation;

/// Every duration and limit of the server, so tests can run fast.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub store: StoreConfig,
    /// Request bodies over this size are answered 413 (kube-apiserver: 3 MiB).
    pub max_body_bytes: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Watch length when the client gives no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// How often the garbage collector looks for dependents whose owners are gone.
    pub gc_interval: Duration,
    /// Where node agents write container logs (`<ns>_<pod>_<uid>/<container>/<restart>.log`).
    pub log_dir: Option<std::path::PathBuf>,
    /// How often a followed log is polled for new lines.
    pub log_poll_interval: Duration,
    /// Read-only requests served at once; more are answered 429 (kube-apiserver's
    /// `--max-requests-inflight`, 400 there). `None` (or 0, as there): unlimited. Long-running
    /// requests (watches, pods/log, exec, attach, port-forward, proxy) are never counted.
    pub max_requests_inflight: Option<usize>,
    /// POST, PUT, PATCH and DELETE requests served at once (`--max-mutating-requests-inflight`,
    /// 200 there). `None` (or 0): unlimited.
    pub max_mutating_requests_inflight: Option<usize>,
    /// The `Retry-After` of a 429 (kube-apiserver: 1).
    pub retry_after_seconds: u32,
    /// kube-apiserver's `--enable-priority-and-fairness`: requests are classified into
    /// FlowSchemas and priority levels that share the in-flight limits' sum as seats, and queued
    /// fairly by flow ([`crate::flowcontrol`]); the two limits then no longer apply on their own.
    /// With either limit unlimited, nothing is limited or queued (requests are only classified).
    /// Off here (the in-flight limits as they are); `jobset up` turns it on, as kube-apiserver's
    /// default.
    pub enable_priority_and_fairness: bool,
    /// How long a request may wait in its priority level's queue before it is answered 429
    /// (kube-apiserver: a quarter of the request timeout, at least 15 s).
    pub priority_and_fairness_wait_limit: Duration,
    /// What time it is, for the expiry of service-account tokens (tests move it forward).
    pub clock: Clock,
    /// Where admission webhooks' service references are reached, by
    /// `<name>.<namespace>.svc:<port>` → `host:port`, before the Service is looked up
    /// ([`crate::webhook::resolve_service`]).
    pub webhook_service_addresses: HashMap<String, String>,
    /// Custom kinds, as `(group, kind)`, whose built-in admission (upstream's webhook defaulting
    /// and validation of JobSet and AppWrapper, run in-process) is left out because a
    /// `jobset manager` serves those webhooks and the registered webhook configurations call it,
    /// as on a real cluster. Their CRD schemas are still enforced. Empty: all built in.
    pub external_admission: Vec<(String, String)>,
    /// kube-apiserver's `WatchList` feature gate (on by default since 1.34): watches with
    /// `sendInitialEvents` (streaming lists). Off, they are refused as a server with the gate
    /// off refuses them.
    pub watch_list: bool,
    /// How long a read that must be at least as new as a resourceVersion the store has not
    /// reached yet waits for it before answering 504 "Too large resource version"
    /// (kube-apiserver's watch cache: 3 s, `blockTimeout`).
    pub resource_version_wait: Duration,
}

/// A source of the current time (the system clock unless a test injects another).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>);

impl Clock {
    pub fn system() -> Clock {
        Clock(Arc::new(jiff::Timestamp::now))
    }
    /// A clock reading `now()`.
    pub fn new(now: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }
    pub fn now(&self) -> jiff::Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            store: StoreConfig::default(),
            max_body_bytes: 3 * 1024 * 1024,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            gc_interval: Duration::from_secs(5),
            log_dir: None,
            log_poll_interval: Duration::from_millis(200),
            max_requests_inflight: None,
            max_mutating_requests_inflight: None,
            retry_after_seconds: 1,
            enable_priority_and_fairness: false,
            priority_and_fairness_wait_limit: Duration::from_secs(15),
            clock: Clock::system(),
            webhook_service_addresses: HashMap::new(),
            external_admission: Vec::new(),
            watch_list: true,
            resource_version_wait: Duration::from_secs(3),
        }
    }
}

pub struct ApiServer {
    pub store: Store,
    pub admission: Admission,
    pub config: ServerConfig,
    /// Requests served so far, by verb, and those rejected by the in-flight limits (for
    /// benchmarks and metrics).
    pub requests: RequestCounts,
    /// The in-flight limits of `config`.
    pub(crate) inflight: Inflight,
    /// Priority and fairness (applied when `config.enable_priority_and_fairness`), and the
    /// in-process clients' latencies.
    pub flowcontrol: Arc<crate::flowcontrol::FlowControl>,
    /// What `GET /metrics` serves (404 while unset): a Prometheus registry shared with the
    /// components that register into it.
    pub(crate) metrics: std::sync::RwLock<Option<MetricsRegistry>>,
    /// Checks the server token, pod-bound and service-account tokens, and signs the latter; set
    /// from the server token by [`ApiServer::set_service_account_signing_key`] (the HTTPS listener
    /// does).
    pub(crate) authenticator: std::sync::RwLock<Option<Arc<crate::auth::Authenticator>>>,
    /// The parsed RBAC policy service-account requests are authorized against.
    pub(crate) rbac: crate::rbac::Authorizer,
    /// The admission webhooks of the stored configurations, parsed.
    pub(crate) webhooks: crate::webhook::Cache,
}

/// A Prometheus registry shared between the components that register series and the server.
pub type MetricsRegistry = Arc<std::sync::Mutex<prometheus_client::registry::Registry>>;

/// The content type of the OpenMetrics text encoding.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Requests served, per verb (a request answered 429 by an in-flight limit is in `rejected_*`
/// only; a retry that is then served counts once more).
#[derive(Default, Debug)]
pub struct RequestCounts {
    pub get: std::sync::atomic::AtomicU64,
    pub list: std::sync::atomic::AtomicU64,
    pub watch: std::sync::atomic::AtomicU64,
    pub create: std::sync::atomic::AtomicU64,
    pub update: std::sync::atomic::AtomicU64,
    pub patch: std::sync::atomic::AtomicU64,
    pub delete: std::sync::atomic::AtomicU64,
    pub other: std::sync::atomic::AtomicU64,
    /// Read-only requests answered 429 (kube-apiserver's `apiserver_dropped_requests_total{request_kind="readOnly"}`).
    pub rejected_read_only: std::sync::atomic::AtomicU64,
    /// Mutating requests answered 429 (`apiserver_dropped_requests_total{request_kind="mutating"}`).
    pub rejected_mutating: std::sync::atomic::AtomicU64,
}

impl RequestCounts {
    fn count(&self, method: &Method, q: Option<&str>, is_collection_get: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = match *method {
            Method::GET
                if is_collection_get && q.is_some_and(|q| q.contains("watch=true") || q.contains("watch=1")) =>
            {
                &self.watch
            }
            Method::GET if is_collection_get => &self.list,
            Method::GET => &self.get,
            Method::POST => &self.create,
            Method::PUT => &self.update,
            Method::PATCH => &self.patch,
            Method::DELETE => &self.delete,
            _ => &self.other,
        };
        c.fetch_add(1, Relaxed);
    }

    /// (verb, count) pairs, and the total.
    pub fn snapshot(&self) -> (Vec<(&'static str, u64)>, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let v = vec![
            ("get", self.get.load(Relaxed)),
            ("list", self.list.load(Relaxed)),
            ("watch", self.watch.load(Relaxed)),
            ("create", self.create.load(Relaxed)),
            ("update", self.update.load(Relaxed)),
            ("patch", self.patch.load(Relaxed)),
            ("delete", self.delete.load(Relaxed)),
            ("other", self.other.load(Relaxed)),
        ];
        let total = v.iter().map(|(_, n)| n).sum();
        (v, total)
    }

    /// Requests answered 429 by the in-flight limits, read-only and mutating together.
    pub fn rejected(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.rejected_read_only.load(Relaxed) + self.rejected_mutating.load(Relaxed)
    }
}

/// The in-flight limits: one semaphore per class, taken without waiting (kube-apiserver's
/// `WithMaxInFlightLimit`).
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    read_only: Option<Arc<tokio::sync::Semaphore>>,
    mutating: Option<Arc<tokio::sync::Semaphore>>,
}

impl Inflight {
    /// Whether either limit is set (a request may be answered 429).
    pub(crate) fn limited(&self) -> bool {
        self.read_only.is_some() || self.mutating.is_some()
    }

    pub(crate) fn new(config: &ServerConfig) -> Inflight {
        let limit = |n: Option<usize>| {
            n.filter(|&n| n > 0)
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.min(tokio::sync::Semaphore::MAX_PERMITS))))
        };
        Inflight {
            read_only: limit(config.max_requests_inflight),
            mutating: limit(config.max_mutating_requests_inflight),
        }
    }
}

/// The subresources kube-apiserver treats as long-running (`BasicLongRunningRequestCheck`).
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "proxy", "log", "portforward"];

/// Whether kube-apiserver counts `req` as long-running: a watch (`?watch=true`, or a
/// `/watch/` path), a proxy, or one of [`LONG_RUNNING_SUBRESOURCES`]. The in-flight limits skip it.
fn long_running(method: &Method, path: &str, query: Option<&str>) -> bool {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return false,
    };
    if matches!(rest.first(), Some(&"watch" | &"proxy")) {
        return true;
    }
    let watch = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "watch" && matches!(&*v, "true" | "1"));
    if *method == Method::GET && watch {
        return true;
    }
    let rest = match rest {
        ["namespaces", _, r, tail @ ..] if *r != "status" && *r != "finalize" => tail,
        [_, tail @ ..] => tail,
        [] => rest,
    };
    // `rest` is now `[name, subresource, ..]`.
    matches!(rest, [_, sub, ..] if LONG_RUNNING_SUBRESOURCES.contains(sub))
}

/// kube-apiserver's answer beyond an in-flight limit (`tooManyRequests` in
/// `k8s.io/apiserver/pkg/server/filters/maxinflight.go`: `http.Error`, so plain text, not a Status).
fn too_many_requests(retry_after_seconds: u32) -> Response {
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(header::RETRY_AFTER, retry_after_seconds.to_string())
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .body(Body::from(TOO_MANY_REQUESTS_MESSAGE))
        .expect("static response parts")
}

/// The body of a 429 from an in-flight limit (Go's `http.Error` appends the newline).
pub const TOO_MANY_REQUESTS_MESSAGE: &str = "Too many requests, please try again later.\n";

/// In front of every handler: priority and fairness when enabled, else the in-flight limits.
async fn limit_requests(State(server): State<Arc<ApiServer>>, req: Request, next: axum::middleware::Next) -> Response {
    if server.config.enable_priority_and_fairness {
        // Boxed: its future is large, and the middleware's own box of this one would otherwise
        // be that large for every request (a large allocation costs more than a small one).
        Box::pin(priority_and_fairness(server, req, next)).await
    } else {
        limit_inflight(server, req, next).await
    }
}

/// Holds `guard` until the response body has been sent (or dropped).
fn hold_until_sent<G: Send + 'static>(response: Response, guard: G) -> Response {
    let (parts, body) = response.into_parts();
    let body = body.map_frame(move |frame| {
        let _held: &G = &guard;
        frame
    });
    Response::from_parts(parts, Body::new(body))
}

/// Who sent `req`, as priority and fairness classifies it: an in-process client's declared user
/// ([`crate::flowcontrol::Requester`]), a token's user, else (the server's token, in-process
/// callers) the admin.
fn requester(req: &Request) -> std::borrow::Cow<'_, crate::rbac::UserInfo> {
    use std::borrow::Cow;
    if let Some(r) = req.extensions().get::<crate::flowcontrol::Requester>() {
        return Cow::Borrowed(&r.0);
    }
    Cow::Owned(req.extensions().get::<User>().unwrap_or(&User::Admin).identity(None).user_info())
}

/// kube-apiserver's priority-and-fairness filter (`WithPriorityAndFairness`): the request is
/// classified, waits for a seat of its priority level (or is answered 429 as by the in-flight
/// limits), and holds the seat until its response has been sent. A watch gives its seat back
/// once established (its response started); other long-running requests take none. Every
/// classified response carries the `X-Kubernetes-PF-*` headers.
async fn priority_and_fairness(server: Arc<ApiServer>, req: Request, next: axum::middleware::Next) -> Response {
    let info = crate::rbac::RequestInfo::parse(req.method(), req.uri().path(), req.uri().query()).unwrap_or_default();
    let c = crate::flowcontrol::classify(&requester(&req), &info);
    let watch = info.verb == "watch";
    // An unlimited server (or a long-running request other than a watch) takes no seat.
    let unlimited = !server.flowcontrol.limited();
    if unlimited || !watch && long_running(req.method(), req.uri().path(), req.uri().query()) {
        let mut resp = next.run(req).await;
        crate::flowcontrol::set_headers(resp.headers_mut(), &c);
        return resp;
    }
    let seat = match server.flowcontrol.admit(&c).await {
        Ok(seat) => seat,
        Err(_) => {
            use std::sync::atomic::Ordering::Relaxed;
            let mutating = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
            let counter =
                if mutating { &server.requests.rejected_mutating } else { &server.requests.rejected_read_only };
            counter.fetch_add(1, Relaxed);
            let mut resp = too_many_requests(server.config.retry_after_seconds);
            crate::flowcontrol::set_headers(resp.headers_mut(), &c);
            return resp;
        }
    };
    let mut resp = next.run(req).await;
    crate::flowcontrol::set_headers(resp.headers_mut(), &c);
    if watch {
        drop(seat);
        return resp;
    }
    hold_until_sent(resp, seat)
}

/// The in-flight limits. A permit is held until the response body has been sent (or dropped),
/// as kube-apiserver holds its slot until the handler has written it.
async fn limit_inflight(server: Arc<ApiServer>, req: Request, next: axum::middleware::Next) -> Response {
    let mutating = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    let sem = if mutating { &server.inflight.mutating } else { &server.inflight.read_only };
    let Some(sem) = sem else { return next.run(req).await };
    if long_running(req.method(), req.uri().path(), req.uri().query()) {
        return next.run(req).await;
    }
    let Ok(permit) = sem.clone().try_acquire_owned() else {
        use std::sync::atomic::Ordering::Relaxed;
        let counter = if mutating { &server.requests.rejected_mutating } else { &server.requests.rejected_read_only };
        counter.fetch_add(1, Relaxed);
        return too_many_requests(server.config.retry_after_seconds);
    };
    hold_until_sent(next.run(req).await, permit)
}

impl ApiServer {
    pub fn registry(&self) -> &Registry {
        &self.store.registry
    }

    /// The whole API as a tower Service (what the in-process client and the listeners serve).
    /// A handler that panicked would take the in-process client's worker down with it, so a
    /// panic becomes a 500 Status instead.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .fallback(handle)
            .with_state(self.clone())
            .layer(axum::middleware::from_fn_with_state(self.clone(), limit_requests))
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_response))
    }

    /// The context of a request by `user` (none: in-process, the admin identity).
    fn ctx(&self, user: Option<&User>) -> Ctx<'_> {
        let ctx = Ctx::new(&self.admission);
        match user {
            Some(user) => ctx.with_requester(self.identity(user)),
            None => ctx,
        }
    }

    /// Serves `registry` at `GET /metrics` (replacing any registry set before), with the
    /// `apiserver_flowcontrol_*` series in it when priority and fairness is on.
    pub fn set_metrics_registry(&self, registry: MetricsRegistry) {
        if self.config.enable_priority_and_fairness {
            self.flowcontrol.register(&mut registry.lock().unwrap_or_else(|e| e.into_inner()));
        }
        *self.metrics.write().unwrap_or_else(|e| e.into_inner()) = Some(registry);
    }

    /// The registry `GET /metrics` serves, if one was set.
    pub fn metrics_registry(&self) -> Option<MetricsRegistry> {
        self.metrics.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `GET /metrics`: the registry in the OpenMetrics text encoding.
    fn metrics_response(&self) -> Result<Response> {
        let registry = self.metrics_registry().ok_or_else(ApiError::not_found_path)?;
        let mut text = String::new();
        {
            let r = registry.lock().unwrap_or_else(|e| e.into_inner());
            prometheus_client::encoding::text::encode(&mut text, &r)
                .map_err(|e| ApiError::internal(format!("encoding metrics: {e}")))?;
        }
        Ok((StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response())
    }
}

fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    tracing::error!(panic = %what, "request handler panicked");
    ApiError::internal(format!("the server panicked handling this request: {what}")).into_response()
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn value_response(code: StatusCode, v: &Value) -> Response {
    json_response(code, Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
}

async fn handle(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    match route(server, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

type Query = HashMap<String, String>;

fn parse_query(q: Option<&str>) -> Query {
    form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned().collect()
}

fn flag(q: &Query, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

/// What the client asked for in `Accept`.
struct Accept {
    table: bool,
}

fn accept(req: &Request) -> Accept {
    let a = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    Accept { table: a.split(',').next().is_some_and(|first| first.contains("as=Table")) }
}

async fn read_body(server: &ApiServer, body: Body) -> Result<Bytes> {
    let limit = server.config.max_body_bytes;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::bad_request(format!("reading request body: {e}"))),
    }
}

fn parse_json(body: &[u8], def: &ResourceDef) -> Result<Value> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {e}",
            def.kind
        ))
    })
}

/// A request body as JSON: JSON as is, Kubernetes' protobuf decoded (`crate::protobuf`).
fn parse_body(body: &[u8], def: &ResourceDef, content_type: &str) -> Result<Value> {
    if crate::protobuf::is_protobuf(content_type) {
        return crate::protobuf::decode(body, def);
    }
    parse_json(body, def)
}

async fn route(server: Arc<ApiServer>, req: Request) -> Result<Response> {
    let path = req.uri().path().to_string();
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let reg = server.registry();
    let get = req.method() == Method::GET;
    match segs.as_slice() {
        ["version"] if get => return Ok(value_response(StatusCode::OK, &discovery::version())),
        ["healthz" | "readyz" | "livez", ..] if get => {
            return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response());
        }
        ["metrics"] if get => return server.metrics_response(),
        ["openapi", "v2"] if get => {
            return Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                discovery::OPENAPI_V2_PB,
            )
                .into_response());
        }
        ["api"] if get => return Ok(value_response(StatusCode::OK, &discovery::core_versions())),
        ["apis"] if get => return Ok(value_response(StatusCode::OK, &discovery::group_list(reg))),
        ["api", "v1"] if get => {
            return discovery::resource_list(reg, "", "v1")
                .map(|v| value_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::not_found_path);
        }
        ["apis", g] if get => {
            return discovery::group(reg, g)
                .map(|v| value_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::not_found_path);
        }
        ["apis", g, v] if get => {
            return discovery::resource_list(reg, g, v)
                .map(|v| value_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::not_found_path);
        }
        ["api", "v1", rest @ ..] => {
            let rp = resource_path(reg, "", "v1", rest)?;
            return resource(server.clone(), rp, req).await;
        }
        ["apis", g, v, rest @ ..] => {
            let rp = resource_path(reg, g, v, rest)?;
            return resource(server.clone(), rp, req).await;
        }
        _ => {}
    }
    Err(ApiError::not_found_path())
}

struct ResPath {
    def: Arc<ResourceDef>,
    /// The namespace in the path (None for cluster-scoped kinds and all-namespace lists).
    ns: Option<String>,
    name: Option<String>,
    sub: Option<Subresource>,
}

fn resource_path(reg: &Registry, group: &str, version: &str, rest: &[&str]) -> Result<ResPath> {
    let (ns, rest) = match rest {
        ["namespaces", ns, r, tail @ ..] if !r.is_empty() && *r != "status" && *r != "finalize" => {
            (Some(ns.to_string()), {
                let mut v = vec![*r];
                v.extend_from_slice(tail);
                v
            })
        }
        _ => (None, rest.to_vec()),
    };
    let Some((plural, tail)) = rest.split_first() else { return Err(ApiError::not_found_path()) };
    let def = reg.get(group, version, plural).ok_or_else(ApiError::not_found_path)?;
    if ns.is_some() && !def.namespaced {
        return Err(ApiError::not_found_path());
    }
    let (name, sub) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] => {
            let s = def.subresources.iter().copied().find(|s| s.name() == *sub).ok_or_else(ApiError::not_found_path)?;
            (Some(name.to_string()), Some(s))
        }
        _ => return Err(ApiError::not_found_path()),
    };
    if def.namespaced && ns.is_none() && name.is_some() {
        return Err(ApiError::not_found_path());
    }
    Ok(ResPath { def, ns, name, sub })
}

fn filter_from(def: &ResourceDef, storage: &Arc<ResourceDef>, ns: Option<String>, q: &Query) -> Result<Filter> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let mut selector = q.get("fieldSelector").cloned().unwrap_or_default();
    let mut fields =
        FieldSelector::parse(&selector).map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
    for f in fields.fields() {
        if f != "metadata.name" && f != "metadata.namespace" && def.field_pointer(f).is_none() {
            return Err(ApiError::bad_request(format!("field label not supported: {f}")));
        }
    }
    if let Some(view) = def.view {
        // A view's field labels, in the stored resource's names.
        let names: Vec<String> = fields.fields().map(str::to_string).collect();
        for f in names {
            let stored = view.storage_field(&f);
            if stored != f {
                selector = selector.replace(&f, &stored);
            }
        }
        fields = FieldSelector::parse(&selector)
            .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
    }
    Ok(Filter { storage: storage.clone(), namespace: ns, labels, fields })
}

/// The object as served under this resource's version (stored custom resources may carry another).
fn served_bytes(def: &ResourceDef, o: &Obj) -> Bytes {
    if let Some(view) = def.view {
        return Bytes::from(serde_json::to_vec(&view.to_view(o.value())).unwrap_or_default());
    }
    if def.builtin {
        return o.raw.clone();
    }
    let want = format!("\"apiVersion\":\"{}\"", def.api_version());
    let head = &o.raw[..o.raw.len().min(want.len() + 2)];
    if head.windows(want.len()).any(|w| w == want.as_bytes()) {
        return o.raw.clone();
    }
    let mut v = o.value();
    v["apiVersion"] = json!(def.api_version());
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

fn object_response(code: StatusCode, def: &ResourceDef, o: &Obj, acc: &Accept, q: &Query) -> Response {
    if acc.table {
        let t = to_table(def, &[o], &o.rv.to_string(), q);
        return value_response(code, &t);
    }
    json_response(code, served_bytes(def, o))
}

fn table_columns(def: &ResourceDef) -> table::Columns {
    if def.builtin {
        return table::Columns::for_kind(&def.kind);
    }
    // Custom resources: their printer columns, or apiextensions-apiserver's lone `Age`.
    let crd = json!({"spec": {"versions": [{"name": def.version, "additionalPrinterColumns": def.printer_columns}]}});
    table::Columns::for_crd_version(&crd, &def.version)
}

fn to_table(def: &ResourceDef, objs: &[&Obj], rv: &str, q: &Query) -> Value {
    let include = match q.get("includeObject").map(String::as_str) {
        Some("None") => table::IncludeObject::None,
        Some("Object") => table::IncludeObject::Object,
        _ => table::IncludeObject::Metadata,
    };
    let values: Vec<Value> = objs.iter().map(|o| o.value()).collect();
    table::table(&table_columns(def), &values, include, rv, jiff::Timestamp::now())
}

fn list_response(
    def: &ResourceDef,
    objs: &[Arc<Obj>],
    rv: u64,
    cont: Option<String>,
    acc: &Accept,
    q: &Query,
) -> Response {
    if acc.table {
        let refs: Vec<&Obj> = objs.iter().map(|o| o.as_ref()).collect();
        let mut t = to_table(def, &refs, &rv.to_string(), q);
        if let Some(c) = cont {
            t["metadata"]["continue"] = json!(c);
        }
        return value_response(StatusCode::OK, &t);
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    let head = json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": meta});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    // Splice the stored bytes in rather than re-serializing every object.
    let mut body = Vec::with_capacity(head.len() + objs.iter().map(|o| o.raw.len() + 1).sum::<usize>() + 16);
    body.extend_from_slice(&head[..head.len() - 1]);
    body.extend_from_slice(b",\"items\":[");
    for (i, o) in objs.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&served_bytes(def, o));
    }
    body.extend_from_slice(b"]}");
    json_response(StatusCode::OK, Bytes::from(body))
}

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&json!([ns, name])).unwrap_or_default())
}

fn decode_continue(token: &str) -> Result<(String, String)> {
    use base64::Engine;
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let (ns, name): (String, String) = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((ns, name))
}

/// Serves a resource request; admission's warnings become `Warning` headers of the response,
/// whatever its status (as kube-apiserver's warning recorder writes them).
async fn resource(server: Arc<ApiServer>, rp: ResPath, req: Request) -> Result<Response> {
    let ctx = server.ctx(req.extensions().get::<User>());
    // Boxed: its future is kilobytes, and each async fn around it would move it whole once more
    // (4 copies, 9k instructions of a pod create's 212k, before).
    let mut resp =
        Box::pin(serve_resource(server.clone(), &ctx, rp, req)).await.unwrap_or_else(IntoResponse::into_response);
    for w in crate::admission::warning_headers(&ctx.take_warnings()) {
        if let Ok(v) = http::HeaderValue::from_bytes(w.as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    Ok(resp)
}

async fn serve_resource(server: Arc<ApiServer>, ctx: &Ctx<'_>, rp: ResPath, req: Request) -> Result<Response> {
    server.requests.count(req.method(), req.uri().query(), rp.name.is_none());
    let q = parse_query(req.uri().query());
    let acc = accept(&req);
    let method = req.method().clone();
    let options = match method {
        Method::POST => Some("CreateOptions"),
        Method::PUT => Some("UpdateOptions"),
        Method::PATCH => Some("PatchOptions"),
        _ => None,
    };
    if let Some(options) = options {
        let directive = q.get("fieldValidation").map(String::as_str);
        ctx.set_field_validation(crate::crd_schema::field_validation_param(options, directive)?);
    }
    let content_type =
        req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
    let ResPath { def, ns, name, sub } = rp;
    // In-process callers carry no user: they are the control plane itself.
    let pod_user = match req.extensions().get::<User>() {
        Some(User::Pod(id)) => {
            let r = ResourceRequest {
                method: &method,
                def: &def,
                namespace: ns.as_deref(),
                name: name.as_deref(),
                subresource: sub.map(|s| s.name()),
                watch: flag(&q, "watch"),
                field_selector: q.get("fieldSelector").map(String::as_str),
            };
            crate::auth::authorize(id, &r)?;
            Some(id.clone())
        }
        _ => None,
    };

    if let Some(kind) = def.review {
        return review(&server, kind, &def, name.is_some(), &content_type, req).await;
    }

    // Writes and reads go to the stored resource; responses are rendered as `def`.
    let view = def.view;
    let sdef = match view {
        Some(v) => {
            let (g, ver, p) = v.storage();
            server.registry().get(g, ver, p).ok_or_else(ApiError::not_found_path)?
        }
        None => def.clone(),
    };
    let to_storage = |v: Value| match view {
        Some(view) => view.from_view(v),
        None => v,
    };
    let nsv = ns.clone().unwrap_or_default();
    // A service account writing an RBAC object may grant only what it holds itself (checked
    // against the policy as of now: the store is locked while the write is checked).
    let rbac_writer = match req.extensions().get::<User>() {
        Some(User::ServiceAccount(sa)) if def.group == crate::rbac::GROUP => {
            Some((sa.user_info(), server.rbac.policy(&server.store)))
        }
        _ => None,
    };
    let path_name = name.clone().unwrap_or_default();
    // Writes go through the admission webhooks that apply to them.
    let user = matches!(method, Method::POST | Method::PUT | Method::PATCH)
        .then(|| req.extensions().get::<User>().cloned())
        .flatten();
    let field_manager = q.get("fieldManager").cloned();
    let admitting = |operations, options_kind| crate::webhook::Request {
        server: &server,
        ctx,
        def: &def,
        namespace: &nsv,
        subresource: sub.map_or("", |s| s.name()),
        operations,
        user: user.as_ref(),
        options_kind,
        field_manager: field_manager.as_deref(),
    };
    // What a pod's own token writes to its pod, and what a service account grants in an RBAC
    // object, is checked before the change is committed.
    let check_write = |txn: &Txn<'_>, o: &Arc<Obj>| -> Result<()> {
        let old = || txn.committed(&Txn::key(&sdef, &nsv, &o.name)).map(|p| p.value());
        if let Some(id) = &pod_user {
            crate::auth::check_pod_write(id, &def, &old().unwrap_or_default(), &o.value())?;
        }
        if let Some((user, policy)) = &rbac_writer {
            crate::rbac::check_escalation(policy, user, &def.kind, &nsv, &path_name, &o.value(), old().as_ref())
                .map_err(|why| ApiError::forbidden(&def, &o.name, why))?;
        }
        Ok(())
    };
    match (method.clone(), name, sub) {
        (Method::GET, None, None) => {
            let is_watch = flag(&q, "watch");
            let opts = ListOptions::from_query(&q, is_watch).checked(server.config.watch_list)?;
            let filter = filter_from(&def, &sdef, ns, &q)?;
            if is_watch {
                return watch(server, def, sdef, filter, &q, &opts, &acc).await;
            }
            list(&server, &def, &sdef, filter, &q, &opts, &acc).await
        }
        (Method::GET, Some(name), None | Some(Subresource::Status)) => {
            let o = server.store.get(&sdef, &nsv, &name).ok_or_else(|| ApiError::not_found(&def, &name))?;
            Ok(object_response(StatusCode::OK, &def, &o, &acc, &q))
        }
        (Method::GET, Some(name), Some(Subresource::Log)) => crate::logs::serve(server, &def, &nsv, &name, &q).await,
        (Method::POST, None, None) => {
            if def.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed("POST"));
            }
            let body = read_body(&server, req.into_body()).await?;
            let v = to_storage(parse_body(&body, &def, &content_type)?);
            if sdef.schema.is_some() {
                ctx.set_duplicate_fields(crate::crd_schema::duplicate_fields(&body));
            }
            let o = crate::webhook::write(
                admitting(&[Operation::Create], "CreateOptions"),
                v,
                Value::clone,
                |txn, v| {
                    let o = ops::create(txn, ctx, &sdef, &nsv, v)?;
                    // Pod tokens never get here (they may not create).
                    check_write(txn, &o)?;
                    Ok(o)
                },
                stored_object,
            )
            .await?;
            Ok(object_response(StatusCode::CREATED, &def, &o, &acc, &q))
        }
        (Method::POST, Some(name), Some(Subresource::Binding)) => {
            let body = read_body(&server, req.into_body()).await?;
            let v = parse_body(&body, &def, &content_type)?;
            write(&server, |txn| crate::pods::bind(txn, &def, &nsv, &name, &v)).await?;
            Ok(value_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (Method::POST, Some(name), Some(Subresource::Eviction)) => {
            let body = read_body(&server, req.into_body()).await?;
            let v = parse_body(&body, &def, &content_type)?;
            let opts = DeleteOptions::from_json(v.get("deleteOptions").unwrap_or(&Value::Null))?;
            write(&server, |txn| crate::pods::evict(txn, ctx, &def, &nsv, &name, &opts)).await?;
            Ok(value_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (Method::POST, Some(name), Some(Subresource::Token)) => {
            let body = read_body(&server, req.into_body()).await?;
            // client-go's typed clients (`kubectl create token`) post protobuf.
            let v: Value = if content_type.starts_with(crate::auth::PROTOBUF_CONTENT_TYPE) {
                crate::auth::token_request_from_protobuf(&body).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the object provided is unrecognized (must be of type TokenRequest): {e}"
                    ))
                })?
            } else {
                serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the object provided is unrecognized (must be of type TokenRequest): couldn't get version/kind; json parse error: {e}"
                    ))
                })?
            };
            let out = server.create_token(&nsv, &name, &v)?;
            Ok(value_response(StatusCode::CREATED, &out))
        }
        (Method::PUT, Some(name), None | Some(Subresource::Status)) => {
            let target = if sub.is_some() { Target::Status } else { Target::Main };
            let body = read_body(&server, req.into_body()).await?;
            let v = to_storage(parse_body(&body, &def, &content_type)?);
            if sdef.schema.is_some() {
                ctx.set_duplicate_fields(crate::crd_schema::duplicate_fields(&body));
            }
            let o = crate::webhook::write(
                admitting(&[Operation::Update], "UpdateOptions"),
                v,
                Value::clone,
                |txn, v| {
                    let o = ops::update(txn, ctx, &sdef, &nsv, &name, v, target, None, None)?;
                    check_write(txn, &o)?;
                    Ok(o)
                },
                stored_object,
            )
            .await?;
            Ok(object_response(StatusCode::OK, &def, &o, &acc, &q))
        }
        (Method::PATCH, Some(name), None | Some(Subresource::Status)) => {
            let target = if sub.is_some() { Target::Status } else { Target::Main };
            let mut kind = PatchType::from_content_type(&content_type)
                .ok_or_else(|| ApiError::unsupported_media(&content_type))?;
            if let PatchType::Apply { force } = &mut kind {
                *force = flag(&q, "force");
                if !q.contains_key("fieldManager") {
                    return Err(ApiError::bad_request(
                        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                    ));
                }
            }
            let body = read_body(&server, req.into_body()).await?;
            if sdef.schema.is_some() && kind == PatchType::Merge {
                ctx.set_duplicate_fields(crate::crd_schema::duplicate_fields(&body));
            }
            let body = ops::PatchBody::prepare(&server.store, ctx, &sdef, &nsv, &name, kind, &body, target, view)?;
            // A server-side apply creates a missing object.
            let operations: &[Operation] = if let PatchType::Apply { .. } = kind {
                &[Operation::Create, Operation::Update]
            } else {
                &[Operation::Update]
            };
            let (o, created) = crate::webhook::write(
                admitting(operations, "PatchOptions"),
                body,
                ops::PatchBody::again,
                |txn, body| {
                    let out = ops::patch(txn, ctx, &sdef, &nsv, &name, kind, body, target, view)?;
                    check_write(txn, &out.0)?;
                    Ok(out)
                },
                |out| &out.0,
            )
            .await?;
            Ok(object_response(if created { StatusCode::CREATED } else { StatusCode::OK }, &def, &o, &acc, &q))
        }
        (Method::DELETE, name, None) => {
            let body = read_body(&server, req.into_body()).await?;
            let mut opts = if body.iter().all(u8::is_ascii_whitespace) {
                DeleteOptions::default()
            } else {
                DeleteOptions::from_json(&parse_body(&body, &def, &content_type)?)?
            };
            if let Some(p) = q.get("propagationPolicy") {
                opts.propagation = Some(ops::parse_propagation(p)?);
            }
            if let Some(g) = q.get("gracePeriodSeconds") {
                opts.grace_period = Some(
                    g.parse().map_err(|_| ApiError::bad_request(format!("gracePeriodSeconds: invalid value {g:?}")))?,
                );
            }
            match name {
                Some(name) => {
                    // kube-apiserver's PriorityClass storage refuses this (a collection's deletion
                    // does not ask).
                    if let Some(why) = crate::priority::refuse_delete_of(&def, &name) {
                        return Err(ApiError::forbidden(&def, &name, why));
                    }
                    let d = write(&server, |txn| ops::delete(txn, &sdef, &nsv, &name, &opts)).await?;
                    Ok(object_response(StatusCode::OK, &def, &d.obj, &acc, &q))
                }
                None => {
                    if def.namespaced && ns.is_none() {
                        return Err(ApiError::method_not_allowed("DELETE"));
                    }
                    let filter = filter_from(&def, &sdef, ns, &q)?;
                    let (objs, _, _) =
                        server.store.list(&sdef, filter.namespace.as_deref(), None, |o| filter.matches(o), None);
                    let mut deleted = vec![];
                    for o in objs {
                        match write(&server, |txn| ops::delete(txn, &sdef, &nsv, &o.name, &opts)).await {
                            Ok(d) => deleted.push(d.obj),
                            Err(e) if e.code == 404 => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let rv = server.store.current_rv();
                    Ok(list_response(&def, &deleted, rv, None, &Accept { table: false }, &q))
                }
            }
        }
        (m, _, _) => Err(ApiError::method_not_allowed(m.as_str())),
    }
}

/// The stored object of a create or update (for [`crate::webhook::write`]).
fn stored_object(o: &Arc<Obj>) -> &Arc<Obj> {
    o
}

/// A review API (`crate::review`): `POST` to the collection, answered 201 with the posted
/// review and its `status`; nothing is stored. The requester is the admin unless a
/// service-account token (already authorized by RBAC to create the review) says otherwise; pod
/// tokens never get here.
async fn review(
    server: &Arc<ApiServer>,
    kind: Review,
    def: &ResourceDef,
    named: bool,
    content_type: &str,
    req: Request,
) -> Result<Response> {
    if named {
        return Err(ApiError::not_found_path());
    }
    if req.method() != Method::POST {
        return Err(ApiError::method_not_allowed(req.method().as_str()));
    }
    let requester = req.extensions().get::<User>().cloned().unwrap_or(User::Admin);
    let body = read_body(server, req.into_body()).await?;
    // client-go's typed clients (`kubectl auth can-i`) post protobuf.
    let mut v = if content_type.starts_with(crate::auth::PROTOBUF_CONTENT_TYPE) {
        crate::review::from_protobuf(kind, &body).map_err(|e| {
            ApiError::bad_request(format!("the object provided is unrecognized (must be of type {}): {e}", def.kind))
        })?
    } else {
        parse_json(&body, def)?
    };
    ops::check_type(def, server.registry(), &mut v)?;
    let out = match kind {
        Review::Token => server.review_token(&v)?,
        Review::SubjectAccess | Review::SelfSubjectAccess => server.review_access(kind, &v, &requester)?,
    };
    Ok(value_response(StatusCode::CREATED, &out))
}

/// Runs a store write. A durable write waits for fsync, so on a multi-threaded runtime it tells
/// Tokio to move other tasks off this worker meanwhile.
pub async fn write<R>(server: &Arc<ApiServer>, f: impl FnOnce(&mut Txn<'_>) -> Result<R>) -> Result<R> {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi && server.store.durable() {
        tokio::task::block_in_place(|| server.store.write(f))
    } else {
        server.store.write(f)
    }
}

async fn list(
    server: &ApiServer,
    def: &Arc<ResourceDef>,
    sdef: &Arc<ResourceDef>,
    filter: Filter,
    q: &Query,
    opts: &ListOptions,
    acc: &Accept,
) -> Result<Response> {
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        Some(Ok(0)) | None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return Err(ApiError::bad_request(format!("limit: invalid value {:?}", q["limit"]))),
    };
    let after = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    match opts.list_at(opts.parsed_rv()?, limit.unwrap_or(0))? {
        ListAt::Current => {}
        ListAt::NotOlderThan(rv) => {
            // The watch cache's wait for a resourceVersion it has not seen yet.
            if let Err(current) = server.store.wait_for_rv(rv, server.config.resource_version_wait).await {
                return Err(crate::watch::too_large_resource_version(rv, current, 1));
            }
        }
        ListAt::Exact(rv) => {
            // As etcd reads at a revision: the history undone back to it.
            let objs = server.store.list_at(sdef, filter.namespace.as_deref(), rv, |o| filter.matches(o)).map_err(
                |e| match e {
                    crate::store::ListAtError::Compacted => crate::watch::list_too_old(),
                    crate::store::ListAtError::TooLarge(current) => {
                        crate::watch::too_large_resource_version(rv, current, 0)
                    }
                },
            )?;
            let more = limit.is_some_and(|l| objs.len() > l);
            let objs = &objs[..limit.map_or(objs.len(), |l| l.min(objs.len()))];
            let cont = more.then(|| objs.last().map(|o| encode_continue(&o.namespace, &o.name))).flatten();
            return Ok(list_response(def, objs, rv, cont, acc, q));
        }
    }
    // An exact name selects one object without a scan.
    if let (Some(name), Some(ns)) =
        (filter.fields.exact_value("metadata.name"), filter.namespace.as_deref().or((!def.namespaced).then_some("")))
    {
        let rv = server.store.current_rv();
        let objs: Vec<Arc<Obj>> = server.store.get(sdef, ns, name).into_iter().filter(|o| filter.matches(o)).collect();
        return Ok(list_response(def, &objs, rv, None, acc, q));
    }
    let (objs, rv, more) = server.store.list(
        sdef,
        filter.namespace.as_deref(),
        after.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
        |o| filter.matches(o),
        limit,
    );
    let cont = more.then(|| objs.last().map(|o| encode_continue(&o.namespace, &o.name))).flatten();
    Ok(list_response(def, &objs, rv, cont, acc, q))
}

async fn watch(
    server: Arc<ApiServer>,
    def: Arc<ResourceDef>,
    sdef: Arc<ResourceDef>,
    filter: Filter,
    q: &Query,
    opts: &ListOptions,
    acc: &Accept,
) -> Result<Response> {
    let plan = opts.watch_plan(opts.parsed_rv()?);
    let timeout = match q.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse().map_err(|_| ApiError::bad_request(format!("timeoutSeconds: invalid value {t:?}")))?,
        ),
        None => server.config.default_watch_timeout,
    };
    let render: Render = if acc.table {
        let q = q.clone();
        Box::new(move |def, o| {
            Bytes::from(serde_json::to_vec(&to_table(def, &[o], &o.rv.to_string(), &q)).unwrap_or_default())
        })
    } else {
        Box::new(served_bytes)
    };
    let bookmarks = opts.allow_watch_bookmarks.then(|| bookmark_interval(server.config.bookmark_interval));
    // Not older than the resourceVersion asked for: wait for the store to reach it, as the watch
    // cache does, and answer as it does (an ERROR event) when it does not in time.
    if let Some(min) = plan.min_rv
        && let Err(current) = server.store.wait_for_rv(min, server.config.resource_version_wait).await
    {
        let e = crate::watch::too_large_resource_version(min, current, 1);
        return Ok(json_response_body(Body::from(crate::watch::error_line(&e))));
    }
    let from = match plan.start {
        WatchFrom::Initial => None,
        WatchFrom::Now => Some(server.store.current_rv()),
        WatchFrom::After(rv) => Some(rv),
    };
    let (replay, rx, start_rv, done, end_bookmark) = match server.store.watch(&sdef, from, filter.fields.first_exact())
    {
        Ok(w) => (w.replay.into(), w.rx, from.unwrap_or(w.rv).max(w.rv), false, plan.end_bookmark.then_some(w.rv)),
        // kube's watcher relists on an ERROR event, not on an HTTP 410: answer 200 and say it in the stream.
        Err(e) => {
            let body = Body::from(crate::watch::error_line(&e));
            return Ok(json_response_body(body));
        }
    };
    let st = WatchStream {
        server: server.clone(),
        def,
        filter,
        replay,
        rx,
        start_rv,
        deadline: Box::pin(tokio::time::sleep(timeout)),
        bookmarks,
        render,
        done,
        end_bookmark,
    };
    Ok(json_response_body(Body::from_stream(st.into_stream())))
}

fn json_response_body(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .expect("static response parts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_running_requests_are_kube_apiservers() {
        let get = Method::GET;
        for (method, path, query, want) in [
            (&get, "/api/v1/namespaces/default/pods", Some("watch=true&resourceVersion=5"), true),
            (&get, "/api/v1/pods", Some("watch=1"), true),
            (&get, "/apis/batch/v1/namespaces/default/jobs", Some("watch=false"), false),
            (&get, "/api/v1/watch/namespaces/default/pods", None, true),
            (&get, "/api/v1/namespaces/default/pods/p/log", Some("follow=true"), true),
            (&get, "/api/v1/namespaces/default/pods/p/log", None, true),
            (&Method::POST, "/api/v1/namespaces/default/pods/p/exec", Some("command=ls"), true),
            (&get, "/api/v1/namespaces/default/pods/p/attach", None, true),
            (&Method::POST, "/api/v1/namespaces/default/pods/p/portforward", None, true),
            (&get, "/api/v1/namespaces/default/services/s/proxy", None, true),
            (&get, "/api/v1/nodes/n/proxy", None, true),
            // A pod named like a subresource, and ordinary requests, count.
            (&get, "/api/v1/namespaces/default/pods/log", None, false),
            (&get, "/api/v1/namespaces/default/pods/p/status", None, false),
            (&get, "/api/v1/namespaces/log", None, false),
            (&get, "/api/v1/namespaces/default/finalize", None, false),
            (&Method::POST, "/api/v1/namespaces/default/pods", Some("watch=true"), false),
            (&get, "/healthz", None, false),
            (&get, "/apis", None, false),
        ] {
            assert_eq!(long_running(method, path, query), want, "{method} {path}?{query:?}");
        }
    }
}
