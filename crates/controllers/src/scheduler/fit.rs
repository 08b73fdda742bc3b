//! Pure scheduling decisions, made as kube-scheduler's default profile makes them: the filters
//! NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit and InterPodAffinity (in that
//! order; a node reports the first one it fails), the scores NodeResourcesFit (least allocated)
//! and NodeAffinity (preferred terms) combined with the default profile's weights, ties broken by
//! fewer pods then node name, the queue order, and the `FitError` message written into the
//! `PodScheduled` condition.
//!
//! [`Cluster`] keeps per-node usage aggregated and the pod (anti-)affinity counts per distinct
//! term, and is updated incrementally as pods are placed, so placing P pods on N nodes costs
//! O(P·N) filter checks plus O(distinct affinity terms) per placed pod.
//!
//! Deliberate differences from upstream: a node without a `pods` allocatable has no pod limit; a
//! pod without `requests` for a resource it has `limits` for requests the limit (what API
//! defaulting does); a non-empty `namespaceSelector` in a pod (anti-)affinity term is matched
//! against the namespace's `kubernetes.io/metadata.name` label only; `matchLabelKeys` and
//! `mismatchLabelKeys` are merged into the term's selector here rather than at admission.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// The taint a cordoned node (`spec.unschedulable`) is treated as having.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The message when the cluster has no nodes at all (upstream `ErrNoNodesAvailable`).
pub const NO_NODES_MESSAGE: &str = "no nodes available to schedule pods";

/// Requests assumed for scoring when a container has none (upstream `DefaultMilliCPURequest`,
/// `DefaultMemoryRequest`), in thousandths.
const DEFAULT_CPU: i128 = 100;
const DEFAULT_MEMORY: i128 = 200 * 1024 * 1024 * 1000;
const MAX_NODE_SCORE: i128 = 100;
/// The default profile's score plugin weights (upstream `getDefaultPlugins`).
const NODE_RESOURCES_FIT_WEIGHT: i128 = 1;
const NODE_AFFINITY_WEIGHT: i128 = 2;

/// Why a node cannot take a pod. [`Unfit::reasons`] gives kube-scheduler's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// The node is cordoned (`spec.unschedulable`) and the pod does not tolerate that.
    Unschedulable,
    /// The first `NoSchedule`/`NoExecute` taint of the node the pod does not tolerate.
    UntoleratedTaint { key: String, value: String },
    /// `nodeSelector` or required node affinity.
    NodeAffinity,
    /// The node's `pods` allocatable is used up, and/or these resources are short.
    Resources { too_many_pods: bool, insufficient: Vec<String> },
    /// A required pod affinity term has no matching pod in the node's topology domain.
    PodAffinity,
    /// A required pod anti-affinity term has a matching pod in the node's topology domain.
    PodAntiAffinity,
    /// A pod in the node's topology domain has a required anti-affinity term matching this pod.
    ExistingPodsAntiAffinity,
}

impl Unfit {
    /// The reasons as kube-scheduler words them (several only for resources).
    pub fn reasons(&self) -> Vec<String> {
        match self {
            Unfit::Unschedulable => vec!["node(s) were unschedulable".into()],
            Unfit::UntoleratedTaint { key, value } => vec![format!("node(s) had untolerated taint {{{key}: {value}}}")],
            Unfit::NodeAffinity => vec!["node(s) didn't match Pod's node affinity/selector".into()],
            Unfit::Resources { too_many_pods, insufficient } => {
                let mut r: Vec<String> = if *too_many_pods { vec!["Too many pods".into()] } else { vec![] };
                r.extend(insufficient.iter().map(|n| format!("Insufficient {n}")));
                r
            }
            Unfit::PodAffinity => vec!["node(s) didn't match pod affinity rules".into()],
            Unfit::PodAntiAffinity => vec!["node(s) didn't match pod anti-affinity rules".into()],
            Unfit::ExistingPodsAntiAffinity => vec!["node(s) didn't satisfy existing pods anti-affinity rules".into()],
        }
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reasons().join(", "))
    }
}

impl std::error::Error for Unfit {}

/// The `PodScheduled=False` message for a pod no node fits, as upstream's `FitError`: reasons
/// counted over nodes, formatted `"<count> <reason>"` and sorted as strings. This scheduler never
/// preempts, so preemption is reported as not helpful on every node.
pub fn fit_error<'u>(num_nodes: usize, unfit: impl IntoIterator<Item = &'u Unfit>) -> String {
    if num_nodes == 0 {
        return NO_NODES_MESSAGE.into();
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for u in unfit {
        for r in u.reasons() {
            *counts.entry(r).or_default() += 1;
        }
    }
    let mut reasons: Vec<String> = counts.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
    reasons.sort();
    let mut msg = format!("0/{num_nodes} nodes are available:");
    if !reasons.is_empty() {
        msg.push_str(&format!(" {}.", reasons.join(", ")));
    }
    msg.push_str(&format!(
        " preemption: 0/{num_nodes} nodes are available: {num_nodes} Preemption is not helpful for scheduling."
    ));
    msg
}

// ---------------------------------------------------------------------------------------------
// Quantities and requests

pub use jobset_api::quantity::parse_quantity;

fn qty(q: &Quantity) -> i128 {
    parse_quantity(&q.0).unwrap_or(0)
}

type ResourceMap = BTreeMap<String, i128>;

fn container_requests(c: &Container, with_defaults: bool) -> ResourceMap {
    let r = c.resources.as_ref();
    let mut out = ResourceMap::new();
    // API defaulting: a resource with a limit and no request requests its limit.
    for list in [r.and_then(|r| r.limits.as_ref()), r.and_then(|r| r.requests.as_ref())].into_iter().flatten() {
        for (name, q) in list {
            out.insert(name.clone(), qty(q));
        }
    }
    if with_defaults {
        out.entry("cpu".into()).or_insert(DEFAULT_CPU);
        out.entry("memory".into()).or_insert(DEFAULT_MEMORY);
    }
    out
}

fn add_into(to: &mut ResourceMap, from: &ResourceMap) {
    for (k, v) in from {
        *to.entry(k.clone()).or_default() += v;
    }
}

fn max_into(to: &mut ResourceMap, from: &ResourceMap) {
    for (k, v) in from {
        let e = to.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

/// What a pod requests, in thousandths (upstream `PodRequests`): the sum over its containers
/// and sidecars (init containers with `restartPolicy: Always`), or the largest init container
/// (plus the sidecars started before it) if that is more, per resource; pod-level
/// `spec.resources` overrides cpu and memory; `spec.overhead` is added.
pub fn pod_requests(pod: &Pod) -> BTreeMap<String, i128> {
    aggregate_requests(pod, false)
}

fn aggregate_requests(pod: &Pod, with_defaults: bool) -> ResourceMap {
    let Some(spec) = pod.spec.as_ref() else { return ResourceMap::new() };
    let mut reqs = ResourceMap::new();
    for c in &spec.containers {
        add_into(&mut reqs, &container_requests(c, with_defaults));
    }
    let mut sidecars = ResourceMap::new();
    let mut init = ResourceMap::new();
    for c in spec.init_containers.iter().flatten() {
        let mut r = container_requests(c, with_defaults);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut reqs, &r);
            add_into(&mut sidecars, &r);
            r = sidecars.clone();
        } else {
            add_into(&mut r, &sidecars);
        }
        max_into(&mut init, &r);
    }
    max_into(&mut reqs, &init);
    if let Some(pod_level) = spec.resources.as_ref() {
        for list in [pod_level.limits.as_ref(), pod_level.requests.as_ref()].into_iter().flatten() {
            for name in ["cpu", "memory"] {
                if let Some(q) = list.get(name) {
                    reqs.insert(name.into(), qty(q));
                }
            }
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        *reqs.entry(name.clone()).or_default() += qty(q);
    }
    reqs
}

// ---------------------------------------------------------------------------------------------
// Pod and node predicates

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Succeeded and Failed pods hold no resources and count for no affinity.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// The node a pod is bound to, if any.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// Whether the scheduler named `scheduler_name` should place this pod: unbound, addressed to it
/// (an unset `schedulerName` means `default-scheduler`), not gated, not being deleted, not finished.
pub fn is_pending(pod: &Pod, scheduler_name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    node_name(pod).is_none()
        && spec.scheduler_name.as_deref().filter(|s| !s.is_empty()).unwrap_or(DEFAULT_SCHEDULER_NAME) == scheduler_name
        && spec.scheduling_gates.as_ref().is_none_or(Vec::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
}

/// The scheduling queue's order (upstream `PrioritySort`): higher priority first, then older, then by
/// namespace and name.
pub fn queue_order(a: &Pod, b: &Pod) -> Ordering {
    let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    prio(b)
        .cmp(&prio(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.namespace.cmp(&b.metadata.namespace))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Whether the pod already carries `PodScheduled=False`, reason `Unschedulable`, with this message.
pub fn unschedulable_reported(pod: &Pod, message: &str) -> bool {
    pod.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        })
    })
}

/// Whether `t` tolerates `taint` (upstream `Toleration.ToleratesTaint`).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    if t.key.as_deref().is_some_and(|k| !k.is_empty() && k != taint.key) {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else { return false };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) => (op == "Gt" && v > b) || (op == "Lt" && v < b),
                _ => false,
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && requirement_matches(r, Some(node_name))
        })
}

/// Whether a node satisfies the pod's `nodeSelector` and required node affinity.
fn node_affinity_matches(pod: &Pod, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    if spec.node_selector.iter().flatten().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node_name, labels)))
}

// ---------------------------------------------------------------------------------------------
// Label selectors and pod affinity terms

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector; `None` matches nothing (a null or invalid selector).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Selector(Option<Vec<Requirement>>);

impl Selector {
    fn parse(sel: Option<&LabelSelector>) -> Selector {
        let Some(sel) = sel else { return Selector(None) };
        let mut reqs: Vec<Requirement> = sel
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement { key: k.clone(), op: Op::In, values: vec![v.clone()] })
            .collect();
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" if !values.is_empty() => Op::In,
                "NotIn" if !values.is_empty() => Op::NotIn,
                "Exists" if values.is_empty() => Op::Exists,
                "DoesNotExist" if values.is_empty() => Op::DoesNotExist,
                _ => return Selector(None),
            };
            reqs.push(Requirement { key: e.key.clone(), op, values });
        }
        Selector(Some(reqs))
    }

    fn matches<'l>(&self, get: impl Fn(&str) -> Option<&'l str>) -> bool {
        let Some(reqs) = &self.0 else { return false };
        reqs.iter().all(|r| {
            let v = get(&r.key);
            match r.op {
                Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
            }
        })
    }
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &BTreeMap<String, String> {
    meta.labels.as_ref().unwrap_or(&NO_LABELS)
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// A pod (anti-)affinity term, resolved against the pod that declares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Term {
    namespaces: Vec<String>,
    namespace_selector: Option<Selector>,
    selector: Selector,
    topology_key: String,
}

impl Term {
    fn parse(t: &PodAffinityTerm, owner: &Pod) -> Term {
        let mut namespaces = t.namespaces.clone().unwrap_or_default();
        if namespaces.is_empty() && t.namespace_selector.is_none() {
            namespaces.push(namespace_of(owner).to_string());
        }
        namespaces.sort();
        namespaces.dedup();
        let mut selector = Selector::parse(t.label_selector.as_ref());
        if let Some(reqs) = selector.0.as_mut() {
            let own = labels_of(&owner.metadata);
            for (keys, op) in [(&t.match_label_keys, Op::In), (&t.mismatch_label_keys, Op::NotIn)] {
                for k in keys.iter().flatten() {
                    if let Some(v) = own.get(k) {
                        reqs.push(Requirement { key: k.clone(), op: op.clone(), values: vec![v.clone()] });
                    }
                }
            }
        }
        Term {
            namespaces,
            namespace_selector: t.namespace_selector.as_ref().map(|s| Selector::parse(Some(s))),
            selector,
            topology_key: t.topology_key.clone(),
        }
    }

    fn matches(&self, pod: &Pod) -> bool {
        let ns = namespace_of(pod);
        let in_namespace = self.namespaces.iter().any(|n| n == ns)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.matches(|k| (k == "kubernetes.io/metadata.name").then_some(ns)));
        let labels = labels_of(&pod.metadata);
        in_namespace && self.selector.matches(|k| labels.get(k).map(String::as_str))
    }
}

fn affinity_terms(pod: &Pod, anti: bool) -> Vec<Term> {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        a.and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.iter().flat_map(|ts| ts.iter()).map(|t| Term::parse(t, pod)).collect()
}

/// Matching pods per topology domain: topology key → label value → count.
type Counts = HashMap<String, HashMap<String, i64>>;

fn count(c: &Counts, key: &str, value: &str) -> i64 {
    c.get(key).and_then(|m| m.get(value)).copied().unwrap_or(0)
}

fn bump(c: &mut Counts, key: &str, labels: &BTreeMap<String, String>) {
    if let Some(v) = labels.get(key) {
        *c.entry(key.to_string()).or_default().entry(v.clone()).or_default() += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster

/// Resource names are interned; these come first, in the order upstream reports them.
const CPU: usize = 0;
const MEMORY: usize = 1;
const PODS: usize = 3;
const FIXED: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

#[derive(Debug, Clone)]
struct NodeState<'a> {
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
    taints: &'a [Taint],
    unschedulable: bool,
    allocatable: Vec<i128>,
    max_pods: Option<i128>,
    used: Vec<i128>,
    pods: i128,
    nonzero_cpu: i128,
    nonzero_memory: i128,
}

impl NodeState<'_> {
    fn allocatable(&self, id: usize) -> i128 {
        self.allocatable.get(id).copied().unwrap_or(0)
    }
    fn used(&self, id: usize) -> i128 {
        self.used.get(id).copied().unwrap_or(0)
    }
}

/// What the filters need to know about the pod being placed, computed once per pod.
struct Plan<'p> {
    pod: &'p Pod,
    tolerations: &'p [Toleration],
    /// Positive requests by resource id, in reporting order.
    requests: Vec<(usize, i128)>,
    nonzero_cpu: i128,
    nonzero_memory: i128,
    affinity: Option<AffinityPlan>,
    anti_affinity: Option<(Vec<Term>, Counts)>,
    /// Preferred node affinity terms with their weights. Upstream skips weight-0 terms; negative
    /// weights (invalid) are skipped too rather than failing the pod.
    preferred: Vec<(i128, &'p NodeSelectorTerm)>,
    /// Topology domains holding a pod whose required anti-affinity matches this pod.
    forbidden: HashMap<String, HashSet<String>>,
}

struct AffinityPlan {
    terms: Vec<Term>,
    counts: Counts,
    /// No pod anywhere matches and the pod matches its own terms: it may start the group.
    may_start: bool,
}

/// The nodes and the pods placed on them, with usage and affinity counts kept incrementally.
/// A gang is tried on a clone ([`super::gang`]).
#[derive(Clone)]
pub struct Cluster<'a> {
    resource_ids: HashMap<String, usize>,
    resource_names: Vec<String>,
    nodes: Vec<NodeState<'a>>,
    node_index: HashMap<&'a str, usize>,
    placed: Vec<(&'a Pod, usize)>,
    unschedulable_taint: Taint,
    /// Counts of pods matching all of a set of required affinity terms (cached per term set).
    affinity_counts: HashMap<Vec<Term>, Counts>,
    /// Counts of pods matching a required anti-affinity term (cached per term).
    anti_counts: HashMap<Term, Counts>,
    /// Placed pods' own required anti-affinity terms, with the domains they occupy.
    existing_anti: HashMap<Term, Counts>,
}

impl<'a> Cluster<'a> {
    /// `pods` may hold any pods: those bound (`spec.nodeName`) to one of `nodes` and not finished are placed.
    pub fn new(nodes: &[&'a Node], pods: &[&'a Pod]) -> Cluster<'a> {
        let mut c = Cluster {
            resource_ids: FIXED.iter().enumerate().map(|(i, n)| (n.to_string(), i)).collect(),
            resource_names: FIXED.iter().map(|n| n.to_string()).collect(),
            nodes: Vec::with_capacity(nodes.len()),
            node_index: HashMap::with_capacity(nodes.len()),
            placed: Vec::new(),
            unschedulable_taint: Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            },
            affinity_counts: HashMap::new(),
            anti_counts: HashMap::new(),
            existing_anti: HashMap::new(),
        };
        let mut sorted: Vec<&'a Node> = nodes.to_vec();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        sorted.dedup_by(|a, b| a.metadata.name == b.metadata.name);
        for node in sorted {
            let status = node.status.as_ref();
            let alloc = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
            let mut allocatable = vec![0; FIXED.len()];
            let mut max_pods = None;
            for (name, q) in alloc.into_iter().flatten() {
                let id = c.resource_id(name);
                if id >= allocatable.len() {
                    allocatable.resize(id + 1, 0);
                }
                allocatable[id] = qty(q);
                if id == PODS {
                    max_pods = Some(qty(q) / 1000);
                }
            }
            let spec = node.spec.as_ref();
            let name = node.metadata.name.as_deref().unwrap_or_default();
            c.node_index.insert(name, c.nodes.len());
            c.nodes.push(NodeState {
                name,
                labels: labels_of(&node.metadata),
                taints: spec.and_then(|s| s.taints.as_deref()).unwrap_or_default(),
                unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
                allocatable,
                max_pods,
                used: Vec::new(),
                pods: 0,
                nonzero_cpu: 0,
                nonzero_memory: 0,
            });
        }
        for pod in pods {
            if let Some(n) = node_name(pod) {
                c.add(pod, n);
            }
        }
        c
    }

    fn resource_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.resource_ids.get(name) {
            return id;
        }
        let id = self.resource_names.len();
        self.resource_ids.insert(name.to_string(), id);
        self.resource_names.push(name.to_string());
        id
    }

    /// Counts `pod` as placed on `node` (bound, or assumed bound), whatever its `spec.nodeName`.
    /// Finished pods and unknown nodes are ignored.
    pub fn add(&mut self, pod: &'a Pod, node: &str) {
        let Some(&i) = self.node_index.get(node) else { return };
        if is_terminal(pod) {
            return;
        }
        let requests: Vec<(usize, i128)> =
            pod_requests(pod).into_iter().map(|(name, v)| (self.resource_id(&name), v)).collect();
        let nonzero = aggregate_requests(pod, true);
        let n = &mut self.nodes[i];
        for (id, v) in requests {
            if id >= n.used.len() {
                n.used.resize(id + 1, 0);
            }
            n.used[id] += v;
        }
        n.pods += 1;
        n.nonzero_cpu += nonzero.get("cpu").copied().unwrap_or(0);
        n.nonzero_memory += nonzero.get("memory").copied().unwrap_or(0);
        let labels = n.labels;
        for (terms, counts) in &mut self.affinity_counts {
            if terms.iter().all(|t| t.matches(pod)) {
                for t in terms.iter() {
                    bump(counts, &t.topology_key, labels);
                }
            }
        }
        for (t, counts) in &mut self.anti_counts {
            if t.matches(pod) {
                bump(counts, &t.topology_key, labels);
            }
        }
        for t in affinity_terms(pod, true) {
            let key = t.topology_key.clone();
            bump(self.existing_anti.entry(t).or_default(), &key, labels);
        }
        self.placed.push((pod, i));
    }

    fn plan<'p>(&mut self, pod: &'p Pod) -> Plan<'p> {
        let mut requests: Vec<(usize, i128)> = pod_requests(pod)
            .into_iter()
            .filter(|&(ref name, v)| v > 0 && name != "pods")
            .map(|(name, v)| (self.resource_id(&name), v))
            .collect();
        requests.sort_by(|a, b| {
            (a.0.min(FIXED.len()), &self.resource_names[a.0]).cmp(&(b.0.min(FIXED.len()), &self.resource_names[b.0]))
        });
        let nonzero = aggregate_requests(pod, true);

        let terms = affinity_terms(pod, false);
        let affinity = (!terms.is_empty()).then(|| {
            let counts = match self.affinity_counts.get(&terms) {
                Some(c) => c.clone(),
                None => {
                    let mut c = Counts::new();
                    for (p, i) in &self.placed {
                        if terms.iter().all(|t| t.matches(p)) {
                            for t in &terms {
                                bump(&mut c, &t.topology_key, self.nodes[*i].labels);
                            }
                        }
                    }
                    self.affinity_counts.insert(terms.clone(), c.clone());
                    c
                }
            };
            let may_start = counts.values().all(HashMap::is_empty) && terms.iter().all(|t| t.matches(pod));
            AffinityPlan { terms, counts, may_start }
        });

        let anti_terms = affinity_terms(pod, true);
        let anti_affinity = (!anti_terms.is_empty()).then(|| {
            let mut merged = Counts::new();
            for t in &anti_terms {
                if !self.anti_counts.contains_key(t) {
                    let mut c = Counts::new();
                    for (p, i) in &self.placed {
                        if t.matches(p) {
                            bump(&mut c, &t.topology_key, self.nodes[*i].labels);
                        }
                    }
                    self.anti_counts.insert(t.clone(), c);
                }
                for (k, vs) in &self.anti_counts[t] {
                    for (v, n) in vs {
                        *merged.entry(k.clone()).or_default().entry(v.clone()).or_default() += n;
                    }
                }
            }
            (anti_terms, merged)
        });

        let mut forbidden: HashMap<String, HashSet<String>> = HashMap::new();
        for (t, counts) in &self.existing_anti {
            if counts.values().any(|m| !m.is_empty()) && t.matches(pod) {
                for (k, vs) in counts {
                    forbidden
                        .entry(k.clone())
                        .or_default()
                        .extend(vs.iter().filter(|(_, n)| **n > 0).map(|(v, _)| v.clone()));
                }
            }
        }

        let preferred = pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|t| t.weight > 0)
            .map(|t| (i128::from(t.weight), &t.preference))
            .collect();

        Plan {
            pod,
            tolerations: pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default(),
            requests,
            nonzero_cpu: nonzero.get("cpu").copied().unwrap_or(0),
            nonzero_memory: nonzero.get("memory").copied().unwrap_or(0),
            affinity,
            anti_affinity,
            forbidden,
            preferred,
        }
    }

    fn check(&self, plan: &Plan<'_>, i: usize) -> Result<(), Unfit> {
        let n = &self.nodes[i];
        let tolerated = |taint: &Taint| plan.tolerations.iter().any(|t| tolerates(t, taint));
        if n.unschedulable && !tolerated(&self.unschedulable_taint) {
            return Err(Unfit::Unschedulable);
        }
        if let Some(t) =
            n.taints.iter().find(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerated(t))
        {
            return Err(Unfit::UntoleratedTaint { key: t.key.clone(), value: t.value.clone().unwrap_or_default() });
        }
        if !node_affinity_matches(plan.pod, n.name, n.labels) {
            return Err(Unfit::NodeAffinity);
        }
        let too_many_pods = n.max_pods.is_some_and(|max| n.pods + 1 > max);
        let insufficient: Vec<String> = plan
            .requests
            .iter()
            .filter(|&&(id, v)| v > n.allocatable(id) - n.used(id))
            .map(|&(id, _)| self.resource_names[id].clone())
            .collect();
        if too_many_pods || !insufficient.is_empty() {
            return Err(Unfit::Resources { too_many_pods, insufficient });
        }
        if let Some(a) = &plan.affinity {
            let mut pods_exist = true;
            for t in &a.terms {
                match n.labels.get(&t.topology_key) {
                    None => return Err(Unfit::PodAffinity),
                    Some(v) if count(&a.counts, &t.topology_key, v) <= 0 => pods_exist = false,
                    Some(_) => {}
                }
            }
            if !pods_exist && !a.may_start {
                return Err(Unfit::PodAffinity);
            }
        }
        if let Some((terms, counts)) = &plan.anti_affinity
            && terms
                .iter()
                .any(|t| n.labels.get(&t.topology_key).is_some_and(|v| count(counts, &t.topology_key, v) > 0))
        {
            return Err(Unfit::PodAntiAffinity);
        }
        if !plan.forbidden.is_empty()
            && n.labels.iter().any(|(k, v)| plan.forbidden.get(k).is_some_and(|vs| vs.contains(v)))
        {
            return Err(Unfit::ExistingPodsAntiAffinity);
        }
        Ok(())
    }

    /// Upstream's `LeastAllocated` score over cpu and memory (requests defaulted for scoring).
    fn score(&self, plan: &Plan<'_>, i: usize) -> i128 {
        let n = &self.nodes[i];
        let least = |alloc: i128, req: i128| {
            if alloc <= 0 || req > alloc { 0 } else { (alloc - req) * MAX_NODE_SCORE / alloc }
        };
        (least(n.allocatable(CPU), n.nonzero_cpu + plan.nonzero_cpu)
            + least(n.allocatable(MEMORY), n.nonzero_memory + plan.nonzero_memory))
            / 2
    }

    /// Upstream's NodeAffinity score before normalisation: the summed weights of the preferred
    /// terms the node matches.
    fn preferred_affinity(&self, plan: &Plan<'_>, i: usize) -> i128 {
        let n = &self.nodes[i];
        plan.preferred.iter().filter(|(_, t)| term_matches(t, n.name, n.labels)).map(|(w, _)| w).sum()
    }

    /// Why `node` cannot take `pod` (`None` when there is no such node).
    pub fn filter(&mut self, pod: &Pod, node: &str) -> Option<Result<(), Unfit>> {
        let i = *self.node_index.get(node)?;
        let plan = self.plan(pod);
        Some(self.check(&plan, i))
    }

    /// The node for `pod` (the feasible node with the highest score, then the fewest pods, then the
    /// first by name),
    /// or the `FitError` message. Does not place the pod: call [`Cluster::add`] once it is bound.
    pub fn schedule(&mut self, pod: &Pod) -> Result<String, String> {
        if self.nodes.is_empty() {
            return Err(NO_NODES_MESSAGE.into());
        }
        let plan = self.plan(pod);
        // Feasible nodes with their raw NodeAffinity score, normalised once all are known.
        let mut feasible: Vec<(usize, i128)> = Vec::new();
        let mut unfit = Vec::new();
        for i in 0..self.nodes.len() {
            match self.check(&plan, i) {
                Ok(()) => {
                    let affinity = if plan.preferred.is_empty() { 0 } else { self.preferred_affinity(&plan, i) };
                    feasible.push((i, affinity));
                }
                Err(u) => unfit.push(u),
            }
        }
        // Upstream `DefaultNormalizeScore`: scaled to 0..=100 by the best node; all 0 stays 0.
        let max_affinity = feasible.iter().map(|&(_, a)| a).max().unwrap_or(0);
        let mut best: Option<((i128, i128), usize)> = None;
        for (i, affinity) in feasible {
            let affinity = if max_affinity > 0 { affinity * MAX_NODE_SCORE / max_affinity } else { 0 };
            let total = self.score(&plan, i) * NODE_RESOURCES_FIT_WEIGHT + affinity * NODE_AFFINITY_WEIGHT;
            // Equal scores go to the node with fewer pods (upstream picks at random among
            // the best; this spreads the same way, deterministically).
            let s = (total, -self.nodes[i].pods);
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, i));
            }
        }
        match best {
            Some((_, i)) => Ok(self.nodes[i].name.to_string()),
            None => Err(fit_error(self.nodes.len(), &unfit)),
        }
    }
}

/// Whether `node`, holding `pods_on_node`, can take `pod`; `all_pods` (placed by their
/// `spec.nodeName` on `nodes`) count for pod (anti-)affinity.
pub fn filter(pod: &Pod, node: &Node, pods_on_node: &[&Pod], all_pods: &[&Pod], nodes: &[&Node]) -> Result<(), Unfit> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let mut ns: Vec<&Node> = nodes.iter().copied().filter(|n| n.metadata.name.as_deref() != Some(name)).collect();
    ns.push(node);
    let key = |p: &Pod| (p.metadata.namespace.clone(), p.metadata.name.clone());
    let here: HashSet<_> = pods_on_node.iter().map(|p| key(p)).collect();
    let elsewhere: Vec<&Pod> =
        all_pods.iter().copied().filter(|p| node_name(p) != Some(name) && !here.contains(&key(p))).collect();
    let mut cluster = Cluster::new(&ns, &elsewhere);
    for p in pods_on_node {
        cluster.add(p, name);
    }
    cluster.filter(pod, name).unwrap_or(Ok(()))
}

/// The node for `pod` among `nodes`, with `pods` placed by their `spec.nodeName`, or why none fits.
pub fn schedule(pod: &Pod, nodes: &[&Node], pods: &[&Pod]) -> Result<String, String> {
    Cluster::new(nodes, pods).schedule(pod)
}

#[cfg(test)]
mod tests;
