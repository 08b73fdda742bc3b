//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`), as kube-apiserver's
//! `k8s.io/apiserver/pkg/util/flowcontrol`: each request is classified by its user and what it
//! asks for into a FlowSchema ([`bootstrap::FLOW_SCHEMAS`]), whose priority level
//! ([`bootstrap::PRIORITY_LEVELS`]) owns a share of the server's seats
//! (`--max-requests-inflight` + `--max-mutating-requests-inflight`); within a level, flows (the
//! schema and its distinguisher: the user or the namespace) are queued fairly
//! ([`queueset`]). The decisions are pure ([`classify`], [`nominal_limits`], the
//! [`queueset::QueueSet`]); [`FlowControl`] holds them behind locks for the HTTP filter.

pub mod bootstrap;
pub mod queueset;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::rbac::{AUTHENTICATED, RequestInfo, UserInfo};
use bootstrap::{Distinguisher, FLOW_SCHEMAS, FlowSchema, NonResourceRule, PRIORITY_LEVELS, ResourceRule, Subject};
use queueset::{Arrival, Dispatch, QueueSet, Reason};

/// The response header naming the matched FlowSchema's uid.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
/// The response header naming the matched PriorityLevelConfiguration's uid.
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// What a request was classified as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// Index into [`FLOW_SCHEMAS`].
    pub schema: usize,
    /// Index into [`PRIORITY_LEVELS`].
    pub level: usize,
    /// The flow within the schema: the user, the namespace, or nothing.
    pub distinguisher: String,
}

impl Classification {
    pub fn flow_schema(&self) -> &'static FlowSchema {
        &FLOW_SCHEMAS[self.schema]
    }

    pub fn priority_level(&self) -> &'static str {
        PRIORITY_LEVELS[self.level].name
    }

    /// The flow's hash, which deals its hand of queues (upstream's `hashFlowID`: SHA-256 of
    /// the schema name, a zero byte and the distinguisher; the first 8 bytes, little-endian).
    pub fn hash(&self) -> u64 {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(self.flow_schema().name.as_bytes());
        ctx.update(&[0]);
        ctx.update(self.distinguisher.as_bytes());
        let sum = ctx.finish();
        u64::from_le_bytes(sum.as_ref()[..8].try_into().expect("a SHA-256 sum has 32 bytes"))
    }
}

fn matches_subject(s: &Subject, user: &UserInfo) -> bool {
    match *s {
        Subject::User(name) => name == "*" || name == user.name,
        Subject::Group(g) => g == "*" || user.groups.iter().any(|ug| ug == g),
        Subject::ServiceAccount { namespace, name } => {
            let Some(rest) = user.name.strip_prefix("system:serviceaccount:") else { return false };
            let Some((ns, sa)) = rest.split_once(':') else { return false };
            ns == namespace && (name == "*" || name == sa)
        }
    }
}

fn has(list: &[&str], x: &str) -> bool {
    list.iter().any(|v| *v == "*" || *v == x)
}

fn matches_resource(rule: &ResourceRule, r: &RequestInfo) -> bool {
    let resource_ok = if r.subresource.is_empty() {
        has(rule.resources, &r.resource)
    } else {
        rule.resources.iter().any(|v| *v == "*" || v.split_once('/') == Some((&r.resource, &r.subresource)))
    };
    let namespace_ok = if r.namespace.is_empty() { rule.cluster_scope } else { has(rule.namespaces, &r.namespace) };
    has(rule.verbs, &r.verb) && has(rule.api_groups, &r.api_group) && resource_ok && namespace_ok
}

fn matches_non_resource(rule: &NonResourceRule, r: &RequestInfo) -> bool {
    let url_ok = rule.non_resource_urls.iter().any(|u| {
        *u == "*" || *u == r.path || u.strip_suffix('*').is_some_and(|p| p.ends_with('/') && r.path.starts_with(p))
    });
    has(rule.verbs, &r.verb) && url_ok
}

/// The FlowSchema (the first by precedence, then name) whose subjects include `user` and whose
/// rules cover request `r`, its priority level and the request's flow distinguisher. The
/// mandatory `catch-all` matches everyone, so there always is one.
pub fn classify(user: &UserInfo, r: &RequestInfo) -> Classification {
    let schema = FLOW_SCHEMAS
        .iter()
        .position(|fs| {
            fs.subjects.iter().any(|s| matches_subject(s, user))
                && if r.is_resource_request {
                    fs.resource_rules.iter().any(|rule| matches_resource(rule, r))
                } else {
                    fs.non_resource_rules.iter().any(|rule| matches_non_resource(rule, r))
                }
        })
        .unwrap_or(FLOW_SCHEMAS.len() - 1);
    let fs = &FLOW_SCHEMAS[schema];
    let level = PRIORITY_LEVELS.iter().position(|l| l.name == fs.priority_level).expect("a bootstrap level");
    let distinguisher = match fs.distinguisher {
        Some(Distinguisher::ByUser) => user.name.clone(),
        Some(Distinguisher::ByNamespace) => r.namespace.clone(),
        None => String::new(),
    };
    Classification { schema, level, distinguisher }
}

/// Each priority level's seats out of a server's `total`, in [`PRIORITY_LEVELS`] order:
/// `ceil(total × shares / Σ shares)` (upstream's NominalCL); 0 for the exempt level, which is
/// never limited.
pub fn nominal_limits(total: usize) -> Vec<usize> {
    let sum: u64 = PRIORITY_LEVELS.iter().map(|l| l.shares as u64).sum();
    PRIORITY_LEVELS.iter().map(|l| (total as u64 * l.shares as u64).div_ceil(sum) as usize).collect()
}

/// The server's seats with APF on: both in-flight limits summed, as kube-apiserver does;
/// unlimited (`None`) when either is (the embedded server's default), so that APF never limits
/// a server that was not limited before.
pub fn total_seats(
    max_requests_inflight: Option<usize>,
    max_mutating_requests_inflight: Option<usize>,
) -> Option<usize> {
    let r = max_requests_inflight.filter(|n| *n > 0)?;
    let m = max_mutating_requests_inflight.filter(|n| *n > 0)?;
    Some(r + m)
}

/// A stable uid for a bootstrap object (this server keeps no objects for them): a name-based
/// (SHA-1-style, version 5) UUID of its kind and name.
fn uid(kind: &str, name: &str) -> String {
    let sum =
        ring::digest::digest(&ring::digest::SHA256, format!("flowcontrol.apiserver.k8s.io/{kind}/{name}").as_bytes());
    let bytes: [u8; 16] = sum.as_ref()[..16].try_into().expect("16 of 32 bytes");
    uuid::Builder::from_bytes(bytes)
        .with_variant(uuid::Variant::RFC4122)
        .with_version(uuid::Version::Sha1)
        .into_uuid()
        .to_string()
}

static SCHEMA_UIDS: LazyLock<Vec<http::HeaderValue>> = LazyLock::new(|| {
    FLOW_SCHEMAS.iter().map(|fs| http::HeaderValue::from_str(&uid("flowschemas", fs.name)).expect("a uuid")).collect()
});
static LEVEL_UIDS: LazyLock<Vec<http::HeaderValue>> = LazyLock::new(|| {
    PRIORITY_LEVELS
        .iter()
        .map(|l| http::HeaderValue::from_str(&uid("prioritylevelconfigurations", l.name)).expect("a uuid"))
        .collect()
});

/// Sets the `X-Kubernetes-PF-*` headers of classification `c` (on served and refused responses).
pub fn set_headers(headers: &mut http::HeaderMap, c: &Classification) {
    headers.insert(FLOW_SCHEMA_UID_HEADER, SCHEMA_UIDS[c.schema].clone());
    headers.insert(PRIORITY_LEVEL_UID_HEADER, LEVEL_UIDS[c.level].clone());
}

/// The uid the `X-Kubernetes-PF-FlowSchema-UID` header gives for FlowSchema `name`.
pub fn flow_schema_uid(name: &str) -> Option<String> {
    let i = FLOW_SCHEMAS.iter().position(|fs| fs.name == name)?;
    SCHEMA_UIDS[i].to_str().ok().map(str::to_string)
}

/// The uid the `X-Kubernetes-PF-PriorityLevel-UID` header gives for priority level `name`.
pub fn priority_level_uid(name: &str) -> Option<String> {
    let i = PRIORITY_LEVELS.iter().position(|l| l.name == name)?;
    LEVEL_UIDS[i].to_str().ok().map(str::to_string)
}

// --- who in-process callers are --------------------------------------------------------------

/// Who an in-process caller is, for priority and fairness only (in-process callers are
/// authorized as the admin): a request extension set by [`crate::ApiServer::client_as`].
#[derive(Debug, Clone)]
pub struct Requester(pub Arc<UserInfo>);

/// kube-controller-manager's user (local mode's controllers run as it).
pub fn kube_controller_manager() -> UserInfo {
    UserInfo { name: bootstrap::users::KUBE_CONTROLLER_MANAGER.into(), groups: vec![AUTHENTICATED.into()] }
}

/// kube-scheduler's user.
pub fn kube_scheduler() -> UserInfo {
    UserInfo { name: bootstrap::users::KUBE_SCHEDULER.into(), groups: vec![AUTHENTICATED.into()] }
}

/// A kubelet's user: `system:node:<name>` in `system:nodes`.
pub fn node(name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:node:{name}"),
        groups: vec![bootstrap::users::NODES_GROUP.into(), AUTHENTICATED.into()],
    }
}

/// A service account's user, in its groups.
pub fn service_account(namespace: &str, name: &str) -> UserInfo {
    UserInfo {
        name: crate::rbac::service_account_username(namespace, name),
        groups: vec![
            bootstrap::users::SERVICE_ACCOUNTS_GROUP.into(),
            format!("{}:{namespace}", bootstrap::users::SERVICE_ACCOUNTS_GROUP),
            AUTHENTICATED.into(),
        ],
    }
}

/// Kinds of callers whose request latency the in-process clients record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserClass {
    /// kube-controller-manager and kube-scheduler.
    Controllers,
    /// Kubelets (`system:nodes`).
    Nodes,
    /// Service accounts (pods' agents).
    ServiceAccounts,
    Other,
}

impl UserClass {
    pub const ALL: [UserClass; 4] =
        [UserClass::Controllers, UserClass::Nodes, UserClass::ServiceAccounts, UserClass::Other];

    pub fn of(user: &UserInfo) -> UserClass {
        let in_group = |g: &str| user.groups.iter().any(|ug| ug == g);
        if user.name == bootstrap::users::KUBE_CONTROLLER_MANAGER || user.name == bootstrap::users::KUBE_SCHEDULER {
            UserClass::Controllers
        } else if in_group(bootstrap::users::NODES_GROUP) {
            UserClass::Nodes
        } else if in_group(bootstrap::users::SERVICE_ACCOUNTS_GROUP) {
            UserClass::ServiceAccounts
        } else {
            UserClass::Other
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            UserClass::Controllers => "controllers",
            UserClass::Nodes => "nodes",
            UserClass::ServiceAccounts => "service accounts",
            UserClass::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

// --- latency as in-process callers see it ----------------------------------------------------

/// Histogram buckets per doubling of the latency (about 9 % apart).
const STEPS_PER_DOUBLING: f64 = 8.0;
/// From 1 µs to 2^26 µs (67 s), the last bucket open-ended.
const LATENCY_BUCKETS: usize = 26 * STEPS_PER_DOUBLING as usize + 1;

/// Request latencies by [`UserClass`], as in-process clients see them: from the call to the
/// response, through every 429 and its `Retry-After` (lock-free buckets; snapshots subtract).
#[derive(Debug)]
pub struct ClientLatency {
    classes: Vec<Vec<AtomicU64>>,
}

impl Default for ClientLatency {
    fn default() -> Self {
        ClientLatency {
            classes: UserClass::ALL.iter().map(|_| (0..LATENCY_BUCKETS).map(|_| AtomicU64::new(0)).collect()).collect(),
        }
    }
}

/// The bucket of a latency: ceil(8·log2(µs)).
fn latency_bucket(d: Duration) -> usize {
    let us = d.as_secs_f64() * 1e6;
    if us <= 1.0 {
        return 0;
    }
    ((us.log2() * STEPS_PER_DOUBLING).ceil() as usize).min(LATENCY_BUCKETS - 1)
}

/// The upper bound of bucket `i`.
fn bucket_bound(i: usize) -> Duration {
    Duration::from_secs_f64(2f64.powf(i as f64 / STEPS_PER_DOUBLING) / 1e6)
}

impl ClientLatency {
    pub fn record(&self, class: UserClass, d: Duration) {
        self.classes[class.index()][latency_bucket(d)].fetch_add(1, Relaxed);
    }

    /// The counts so far of `class`.
    pub fn snapshot(&self, class: UserClass) -> LatencySnapshot {
        LatencySnapshot(self.classes[class.index()].iter().map(|c| c.load(Relaxed)).collect())
    }
}

/// Counts per latency bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencySnapshot(Vec<u64>);

impl LatencySnapshot {
    /// What was recorded after `earlier`.
    pub fn since(&self, earlier: &LatencySnapshot) -> LatencySnapshot {
        LatencySnapshot(self.0.iter().zip(&earlier.0).map(|(a, b)| a.saturating_sub(*b)).collect())
    }

    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The `q` quantile (0..=1), as its bucket's upper bound; `None` without requests.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64 * q).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        self.0.iter().enumerate().find_map(|(i, c)| {
            seen += c;
            (seen >= rank).then(|| bucket_bound(i))
        })
    }
}

// --- metrics -----------------------------------------------------------------------------------

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    flow_schema: &'static str,
    priority_level: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    flow_schema: &'static str,
    priority_level: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    execute: &'static str,
    flow_schema: &'static str,
    priority_level: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    priority_level: &'static str,
}

/// `apiserver_flowcontrol_request_wait_duration_seconds` buckets (upstream's).
const WAIT_BUCKETS: [f64; 13] = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0];

type WaitFamily = Family<WaitLabels, Histogram, fn() -> Histogram>;

/// kube-apiserver's `apiserver_flowcontrol_*` series (those this server has).
#[derive(Debug, Clone)]
struct Metrics {
    rejected: Family<RejectLabels, Counter>,
    dispatched: Family<FlowLabels, Counter>,
    inqueue: Family<FlowLabels, Gauge>,
    executing: Family<FlowLabels, Gauge>,
    wait: WaitFamily,
    nominal: Family<LevelLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            rejected: Family::default(),
            dispatched: Family::default(),
            inqueue: Family::default(),
            executing: Family::default(),
            wait: Family::new_with_constructor(|| Histogram::new(WAIT_BUCKETS)),
            nominal: Family::default(),
        }
    }
}

fn flow_labels(c: &Classification) -> FlowLabels {
    FlowLabels { flow_schema: c.flow_schema().name, priority_level: c.priority_level() }
}

// --- the shell's state ---------------------------------------------------------------------

/// One limited priority level: its queue set and the waiting requests' wake-ups.
struct LevelState {
    set: QueueSet,
    waiters: HashMap<u64, tokio::sync::oneshot::Sender<usize>>,
    next_id: u64,
}

/// Priority and fairness for one server.
pub struct FlowControl {
    /// `None` for the exempt level, and for every level of an unlimited server.
    levels: Vec<Option<Mutex<LevelState>>>,
    origin: Instant,
    wait_limit: Duration,
    metrics: Metrics,
    /// Latencies seen by in-process clients (recorded whether APF is on or not).
    pub latency: ClientLatency,
}

impl std::fmt::Debug for FlowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowControl").field("limited", &self.limited()).finish_non_exhaustive()
    }
}

/// A refused request: why, for the 429 and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected(pub Reason);

impl FlowControl {
    /// Priority levels sharing `total` seats (`None`: unlimited, nothing is queued); a request
    /// waits in its queue at most `wait_limit`.
    pub fn new(total: Option<usize>, wait_limit: Duration) -> FlowControl {
        let metrics = Metrics::default();
        let limits = total.map(nominal_limits);
        let levels = PRIORITY_LEVELS
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let limit = limits.as_ref().filter(|_| !l.exempt)?[i];
                metrics.nominal.get_or_create(&LevelLabels { priority_level: l.name }).set(limit as i64);
                let set = QueueSet::new(limit.max(1), l.queuing).expect("the bootstrap queuing parameters are valid");
                Some(Mutex::new(LevelState { set, waiters: HashMap::new(), next_id: 0 }))
            })
            .collect();
        FlowControl { levels, origin: Instant::now(), wait_limit, metrics, latency: ClientLatency::default() }
    }

    /// Whether any level is limited (else requests are only classified).
    pub fn limited(&self) -> bool {
        self.levels.iter().any(Option::is_some)
    }

    /// Registers the `apiserver_flowcontrol_*` series.
    pub fn register(&self, registry: &mut Registry) {
        let m = &self.metrics;
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by API Priority and Fairness subsystem",
            m.rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_dispatched_requests",
            "Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            m.inqueue.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            m.executing.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "Length of time a request spent waiting in its queue",
            m.wait.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level",
            m.nominal.clone(),
        );
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// Requests waiting in priority level `name`'s queues.
    pub fn waiting(&self, level: &str) -> usize {
        self.level_state(level).map_or(0, |s| s.set.waiting())
    }

    /// Requests executing in priority level `name` (0 for an unlimited one).
    pub fn executing(&self, level: &str) -> usize {
        self.level_state(level).map_or(0, |s| s.set.executing())
    }

    fn level_state(&self, level: &str) -> Option<std::sync::MutexGuard<'_, LevelState>> {
        let i = PRIORITY_LEVELS.iter().position(|l| l.name == level)?;
        self.levels[i].as_ref().map(lock)
    }

    /// Waits for a seat for a request classified `c`: at once when its level is exempt,
    /// unlimited or has a free seat; else in its flow's queue, at most the wait limit; or
    /// refused.
    pub async fn admit(self: &Arc<Self>, c: &Classification) -> Result<Seat, Rejected> {
        let labels = flow_labels(c);
        let Some(state) = &self.levels[c.level] else {
            return Ok(self.seated(c, None, Instant::now()));
        };
        let arrived = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (id, queue) = {
            let mut st = lock(state);
            let id = st.next_id;
            st.next_id += 1;
            let (arrival, dispatched) = st.set.arrive(self.now(), c.hash(), id, 1);
            self.wake(&mut st, dispatched);
            match arrival {
                Arrival::Executing { queue } => {
                    drop(st);
                    self.observe_wait(&labels, true, Duration::ZERO);
                    return Ok(self.seated(c, Some(queue), arrived));
                }
                Arrival::Rejected(reason) => {
                    drop(st);
                    self.reject(&labels, reason);
                    return Err(Rejected(reason));
                }
                Arrival::Queued { queue } => {
                    st.waiters.insert(id, tx);
                    (id, queue)
                }
            }
        };
        self.metrics.inqueue.get_or_create(&labels).inc();
        let mut waiting = Waiting { fc: self.clone(), level: c.level, id, queue, rx, labels, done: false };
        let woken = tokio::time::timeout(self.wait_limit, &mut waiting.rx).await;
        let dispatched_from = match woken {
            Ok(Ok(queue)) => Some(queue),
            // Timed out (or, never, forgotten): out of the queue, unless seated meanwhile.
            _ => waiting.leave_queue(),
        };
        waiting.done = true;
        self.metrics.inqueue.get_or_create(&waiting.labels).dec();
        match dispatched_from {
            Some(queue) => {
                self.observe_wait(&waiting.labels, true, arrived.elapsed());
                Ok(self.seated(c, Some(Some(queue)), Instant::now()))
            }
            None => {
                self.observe_wait(&waiting.labels, false, arrived.elapsed());
                self.reject(&waiting.labels, Reason::TimeOut);
                Err(Rejected(Reason::TimeOut))
            }
        }
    }

    fn seated(self: &Arc<Self>, c: &Classification, queue: Option<Option<usize>>, started: Instant) -> Seat {
        let labels = flow_labels(c);
        self.metrics.executing.get_or_create(&labels).inc();
        self.metrics.dispatched.get_or_create(&labels).inc();
        Seat { fc: self.clone(), level: c.level, queue, started, labels }
    }

    fn observe_wait(&self, l: &FlowLabels, execute: bool, d: Duration) {
        let labels = WaitLabels {
            execute: if execute { "true" } else { "false" },
            flow_schema: l.flow_schema,
            priority_level: l.priority_level,
        };
        self.metrics.wait.get_or_create(&labels).observe(d.as_secs_f64());
    }

    fn reject(&self, l: &FlowLabels, reason: Reason) {
        let labels =
            RejectLabels { flow_schema: l.flow_schema, priority_level: l.priority_level, reason: reason.as_str() };
        self.metrics.rejected.get_or_create(&labels).inc();
    }

    /// Tells dispatched waiters their queue; a waiter already gone gives its seat straight back.
    fn wake(&self, st: &mut LevelState, mut dispatched: Vec<Dispatch>) {
        while let Some(d) = dispatched.pop() {
            let sent = st.waiters.remove(&d.id).is_some_and(|tx| tx.send(d.queue).is_ok());
            if !sent {
                let more = st.set.finish(self.now(), Some(d.queue), 1, 0.0);
                dispatched.extend(more);
            }
        }
    }

    fn release(&self, level: usize, queue: Option<usize>, service: Duration) {
        let Some(state) = &self.levels[level] else { return };
        let mut st = lock(state);
        let dispatched = st.set.finish(self.now(), queue, 1, service.as_secs_f64());
        self.wake(&mut st, dispatched);
    }
}

fn lock(m: &Mutex<LevelState>) -> std::sync::MutexGuard<'_, LevelState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A queued request; dropped before it is seated (its client went away), it leaves its queue.
struct Waiting {
    fc: Arc<FlowControl>,
    level: usize,
    id: u64,
    queue: usize,
    rx: tokio::sync::oneshot::Receiver<usize>,
    labels: FlowLabels,
    done: bool,
}

impl Waiting {
    /// Takes the request out of its queue; `Some(queue)` when it was seated first after all.
    fn leave_queue(&mut self) -> Option<usize> {
        let state = self.fc.levels[self.level].as_ref().expect("a queued request's level is limited");
        let mut st = lock(state);
        if st.set.cancel(self.fc.now(), self.id, self.queue) {
            st.waiters.remove(&self.id);
            return None;
        }
        drop(st);
        self.rx.try_recv().ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.fc.metrics.inqueue.get_or_create(&self.labels).dec();
        if let Some(queue) = self.leave_queue() {
            self.fc.release(self.level, Some(queue), Duration::ZERO);
        }
    }
}

/// A request's seat, given back (to the next waiting request) when dropped.
pub struct Seat {
    fc: Arc<FlowControl>,
    level: usize,
    /// `None`: an unlimited level; `Some(None)`: a level without queues.
    queue: Option<Option<usize>>,
    started: Instant,
    labels: FlowLabels,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.fc.metrics.executing.get_or_create(&self.labels).dec();
        if let Some(queue) = self.queue {
            self.fc.release(self.level, queue, self.started.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn info(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(method, path, query).unwrap()
    }

    fn admin() -> UserInfo {
        UserInfo { name: "jobset:admin".into(), groups: vec!["system:masters".into(), AUTHENTICATED.into()] }
    }

    #[test]
    fn requests_are_classified_by_user_and_request_as_kube_apiservers_bootstrap_schemas() {
        let get = Method::GET;
        let put = Method::PUT;
        let alice = UserInfo { name: "alice".into(), groups: vec![AUTHENTICATED.into()] };
        let anonymous = UserInfo { name: "system:anonymous".into(), groups: vec!["system:unauthenticated".into()] };
        let pods = "/api/v1/namespaces/default/pods";
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-0";
        for (user, method, path, query, schema, level, flow) in [
            (admin(), &get, pods, None, "exempt", "exempt", ""),
            (alice.clone(), &get, "/healthz", None, "probes", "exempt", ""),
            (kube_controller_manager(), &get, pods, None, "kube-controller-manager", "workload-high", "default"),
            (kube_controller_manager(), &get, "/api/v1/nodes", None, "kube-controller-manager", "workload-high", ""),
            (
                kube_controller_manager(),
                &put,
                lease,
                None,
                "system-leader-election",
                "leader-election",
                "system:kube-controller-manager",
            ),
            (
                kube_controller_manager(),
                &put,
                "/api/v1/namespaces/default/endpoints/e",
                None,
                "endpoint-controller",
                "workload-high",
                "system:kube-controller-manager",
            ),
            (
                kube_scheduler(),
                &Method::POST,
                "/api/v1/namespaces/ns/pods/p/binding",
                None,
                "kube-scheduler",
                "workload-high",
                "ns",
            ),
            (node("node-0"), &put, lease, None, "system-node-high", "node-high", "system:node:node-0"),
            (
                node("node-0"),
                &Method::PATCH,
                "/api/v1/nodes/node-0/status",
                None,
                "system-node-high",
                "node-high",
                "system:node:node-0",
            ),
            (
                node("node-0"),
                &Method::PATCH,
                "/api/v1/namespaces/default/pods/p/status",
                None,
                "system-nodes",
                "system",
                "system:node:node-0",
            ),
            (node("node-0"), &get, pods, Some("watch=true"), "system-nodes", "system", "system:node:node-0"),
            (
                service_account("default", "default"),
                &Method::PATCH,
                "/api/v1/namespaces/default/pods/p",
                None,
                "service-accounts",
                "workload-low",
                "system:serviceaccount:default:default",
            ),
            (
                service_account("default", "default"),
                &get,
                "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/js",
                None,
                "service-accounts",
                "workload-low",
                "system:serviceaccount:default:default",
            ),
            (
                service_account("kube-system", "job-controller"),
                &put,
                "/apis/batch/v1/namespaces/a/jobs/j/status",
                None,
                "kube-system-service-accounts",
                "workload-high",
                "a",
            ),
            (
                service_account("kube-system", "x"),
                &put,
                lease,
                None,
                "system-leader-election",
                "leader-election",
                "system:serviceaccount:kube-system:x",
            ),
            (alice.clone(), &get, pods, None, "global-default", "global-default", "alice"),
            (alice, &get, "/version", None, "global-default", "global-default", "alice"),
            (anonymous.clone(), &get, "/readyz", None, "probes", "exempt", ""),
            (anonymous, &get, pods, None, "global-default", "global-default", "system:anonymous"),
            // Nobody's groups: only the mandatory catch-all is left.
            (UserInfo { name: "x".into(), groups: vec![] }, &get, pods, None, "catch-all", "catch-all", "x"),
        ] {
            let c = classify(&user, &info(method, path, query));
            assert_eq!(
                (c.flow_schema().name, c.priority_level(), c.distinguisher.as_str()),
                (schema, level, flow),
                "{} {method} {path}",
                user.name
            );
        }
    }

    #[test]
    fn the_bootstrap_schemas_are_in_matching_order_and_name_existing_levels() {
        for w in FLOW_SCHEMAS.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!((a.matching_precedence, a.name) < (b.matching_precedence, b.name), "{} before {}", a.name, b.name);
        }
        for fs in FLOW_SCHEMAS {
            assert!(PRIORITY_LEVELS.iter().any(|l| l.name == fs.priority_level), "{}", fs.name);
        }
    }

    #[test]
    fn seats_are_shared_by_nominal_concurrency_shares() {
        // kube-apiserver's defaults: 400 + 200 seats over 245 shares.
        let names: Vec<&str> = PRIORITY_LEVELS.iter().map(|l| l.name).collect();
        assert_eq!(
            names,
            [
                "exempt",
                "system",
                "node-high",
                "leader-election",
                "workload-high",
                "workload-low",
                "global-default",
                "catch-all"
            ]
        );
        assert_eq!(nominal_limits(600), [0, 74, 98, 25, 98, 245, 49, 13]);
        assert_eq!(nominal_limits(49), [0, 6, 8, 2, 8, 20, 4, 1]);
        assert_eq!(nominal_limits(1), [0, 1, 1, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn the_total_is_both_inflight_limits_and_unlimited_stays_unlimited() {
        for (r, m, total) in [
            (Some(400), Some(200), Some(600)),
            (None, None, None),
            (Some(400), None, None),
            (None, Some(200), None),
            (Some(0), Some(200), None),
        ] {
            assert_eq!(total_seats(r, m), total, "{r:?} + {m:?}");
        }
    }

    #[test]
    fn a_flow_hashes_by_schema_and_distinguisher() {
        let sa = |n: &str| classify(&service_account("default", n), &info(&Method::GET, "/api/v1/pods", None));
        assert_eq!(sa("a").hash(), sa("a").hash());
        assert_ne!(sa("a").hash(), sa("b").hash());
        // ByNamespace: every user of a namespace is one flow.
        let kcm = |ns: &str| {
            classify(&kube_controller_manager(), &info(&Method::GET, &format!("/api/v1/namespaces/{ns}/pods"), None))
        };
        assert_eq!(kcm("a").distinguisher, "a");
        assert_ne!(kcm("a").hash(), kcm("b").hash());
    }

    #[test]
    fn headers_carry_stable_uids_not_names() {
        let c = classify(&kube_controller_manager(), &info(&Method::GET, "/api/v1/pods", None));
        let mut h = http::HeaderMap::new();
        set_headers(&mut h, &c);
        let fs = h.get(FLOW_SCHEMA_UID_HEADER).unwrap().to_str().unwrap();
        assert_eq!(Some(fs.to_string()), flow_schema_uid("kube-controller-manager"));
        assert_eq!(
            h.get(PRIORITY_LEVEL_UID_HEADER).unwrap().to_str().unwrap(),
            priority_level_uid("workload-high").unwrap()
        );
        assert_eq!(uuid::Uuid::parse_str(fs).unwrap().get_version_num(), 5);
        assert_ne!(flow_schema_uid("exempt"), priority_level_uid("exempt"));
    }

    #[test]
    fn users_fall_into_classes() {
        for (user, class) in [
            (kube_controller_manager(), UserClass::Controllers),
            (kube_scheduler(), UserClass::Controllers),
            (node("n"), UserClass::Nodes),
            (service_account("a", "b"), UserClass::ServiceAccounts),
            (admin(), UserClass::Other),
        ] {
            assert_eq!(UserClass::of(&user), class, "{}", user.name);
        }
    }

    #[test]
    fn latency_quantiles_come_from_buckets_about_nine_percent_apart() {
        let l = ClientLatency::default();
        let before = l.snapshot(UserClass::Controllers);
        for ms in 1..=100 {
            l.record(UserClass::Controllers, Duration::from_millis(ms));
        }
        l.record(UserClass::Nodes, Duration::from_secs(5));
        let s = l.snapshot(UserClass::Controllers).since(&before);
        assert_eq!(s.count(), 100);
        let p99 = s.quantile(0.99).unwrap();
        assert!(p99 >= Duration::from_millis(99) && p99 <= Duration::from_millis(108), "{p99:?}");
        let p50 = s.quantile(0.5).unwrap();
        assert!(p50 >= Duration::from_millis(50) && p50 <= Duration::from_millis(55), "{p50:?}");
        assert_eq!(l.snapshot(UserClass::ServiceAccounts).quantile(0.99), None);
        assert_eq!(latency_bucket(Duration::from_secs(1000)), LATENCY_BUCKETS - 1);
    }

    #[tokio::test]
    async fn a_full_level_queues_and_a_freed_seat_seats_the_next() {
        // 49 seats: workload-low has 20.
        let fc = Arc::new(FlowControl::new(Some(49), Duration::from_secs(30)));
        let c = classify(&service_account("default", "a"), &info(&Method::GET, "/api/v1/pods", None));
        let mut seats = vec![];
        for _ in 0..20 {
            seats.push(fc.admit(&c).await.unwrap());
        }
        assert_eq!(fc.executing("workload-low"), 20);
        let fc2 = fc.clone();
        let c2 = c.clone();
        let waiting = tokio::spawn(async move { fc2.admit(&c2).await.map(|_| ()) });
        while fc.waiting("workload-low") == 0 {
            tokio::task::yield_now().await;
        }
        seats.pop();
        waiting.await.unwrap().unwrap();
        assert_eq!((fc.waiting("workload-low"), fc.executing("workload-low")), (0, 19));
        // Exempt requests never wait.
        let a = classify(&admin(), &info(&Method::GET, "/api/v1/pods", None));
        let _exempt = fc.admit(&a).await.unwrap();
        assert_eq!(fc.executing("exempt"), 0);
    }

    #[tokio::test]
    async fn a_request_that_waits_past_the_limit_is_refused_and_leaves_its_queue() {
        let fc = Arc::new(FlowControl::new(Some(1), Duration::from_millis(20)));
        let c = classify(&service_account("default", "a"), &info(&Method::GET, "/api/v1/pods", None));
        let _held = fc.admit(&c).await.unwrap();
        assert_eq!(fc.admit(&c).await.err(), Some(Rejected(Reason::TimeOut)));
        assert_eq!(fc.waiting("workload-low"), 0);
    }
}
