//! ResourceQuota (`v1 resourcequotas`): kube-apiserver's quota admission plugin and the quota
//! controller's accounting, run inside the store transaction of each write.
//!
//! - Admission (`plugin/pkg/admission/resourcequota`, `CheckRequest`): a namespaced object
//!   created where ResourceQuotas exist is measured by its resource's evaluator
//!   (`pkg/quota/v1/evaluator/core`: pods, services, persistentvolumeclaims, and an object count
//!   `count/<resource>.<group>` for everything else), checked against every quota it matches, and
//!   the quotas' `status.used` grows in the same transaction; or the write is refused with 403
//!   and upstream's message (`exceeded quota: ...`, `failed quota: ...: must specify ...`).
//! - Accounting (the quota controller): a quota's `status` (`hard` = `spec.hard`, `used` summed
//!   over the namespace) is computed whenever the quota is written; a removed object gives its
//!   usage back, and a pod that reaches `Succeeded`/`Failed` gives back all but `count/pods`.
//!
//! Cost: a namespaced create looks up its namespace's quotas (one range of the quota table; a
//! hash lookup when no quota exists anywhere), a pod status write compares two phases, and a
//! removal makes the same lookup. Only namespaces with quotas pay for evaluation.
//!
//! Simplified: a pod being deleted counts until it is gone or terminal (upstream stops counting
//! it once its deletion time plus grace period has passed); usage is not re-checked on updates
//! (upstream re-checks pods only on the `resize` subresource, which is not served, and services
//! and claims on update); a write to a quota's `/status` is replaced by the computed status;
//! `LimitedResources` admission configuration does not exist.

use std::collections::BTreeMap;
use std::sync::Arc;

use jobset_api::quantity::Quantity;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause, Result};
use crate::object::Obj;
use crate::resources::ResourceDef;
use crate::store::Txn;

/// Resource names and their quantities (`corev1.ResourceList`), in name order.
pub type ResourceList = BTreeMap<String, Quantity>;

const STORAGE_KEY: &str = "/resourcequotas";
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// `podResources`: what the pod evaluator measures, besides prefixed and extended resources.
const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];
const SERVICE_RESOURCES: &[&str] = &["count/services", "services", "services.loadbalancers", "services.nodeports"];
const CLAIM_RESOURCES: &[&str] = &["count/persistentvolumeclaims", "persistentvolumeclaims", "requests.storage"];
/// `legacyObjectCountAliases`: object counts with a name of their own.
const LEGACY_ALIASES: &[&str] = &["configmaps", "resourcequotas", "replicationcontrollers", "secrets"];
/// `validationSet`: quota'd resources every container must state ("it was a mistake").
const MUST_SPECIFY: &[&str] = &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

// ---------------------------------------------------------------------------------------------
// Evaluators: which resource's objects a quota resource name measures, and how much an object uses

/// (group, plural) of the resource whose objects `name` measures, or `None` when no evaluator
/// tracks it (a quota may still hold it; it is then neither counted nor enforced).
pub fn resource_for(name: &str) -> Option<(String, String)> {
    let core = |plural: &str| Some((String::new(), plural.to_string()));
    if POD_RESOURCES.contains(&name)
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
        || is_extended_for_quota(name)
    {
        return core("pods");
    }
    if SERVICE_RESOURCES.contains(&name) {
        return core("services");
    }
    if CLAIM_RESOURCES.contains(&name)
        || name
            .split_once(STORAGE_CLASS_SUFFIX)
            .is_some_and(|(_, r)| r == "requests.storage" || r == "persistentvolumeclaims")
    {
        return core("persistentvolumeclaims");
    }
    if LEGACY_ALIASES.contains(&name) {
        return core(name);
    }
    let counted = name.strip_prefix("count/")?;
    let (plural, group) = counted.split_once('.').unwrap_or((counted, ""));
    (!plural.is_empty()).then(|| (group.to_string(), plural.to_string()))
}

/// `helper.IsNativeResource`: unprefixed, or in the `kubernetes.io/` domain.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// `isExtendedResourceNameForQuota`: `requests.<extended resource>`, as `requests.nvidia.com/gpu`.
fn is_extended_for_quota(name: &str) -> bool {
    !is_native(name) && name.starts_with("requests.")
}

/// `helper.IsExtendedResourceName`: a resource a pod may request that is quota'd as `requests.<name>`.
fn is_extended(name: &str) -> bool {
    !is_native(name)
        && !name.starts_with("requests.")
        && crate::names::qualified_name(&format!("requests.{name}")).is_empty()
}

/// `ObjectCountQuotaResourceNameFor`: `count/pods`, `count/jobs.batch`.
pub fn object_count_name(group: &str, plural: &str) -> String {
    if group.is_empty() { format!("count/{plural}") } else { format!("count/{plural}.{group}") }
}

/// The names of `names` that objects of `group`/`plural` are measured by (`MatchingResources`).
fn matching<'n>(group: &str, plural: &str, names: impl Iterator<Item = &'n String>) -> Vec<&'n String> {
    names.filter(|n| resource_for(n).is_some_and(|(g, p)| g == group && p == plural)).collect()
}

/// Whether measuring an object of this resource reads the object (object counts do not).
fn reads_object(group: &str, plural: &str) -> bool {
    group.is_empty() && matches!(plural, "pods" | "services" | "persistentvolumeclaims")
}

/// What an object uses (`Evaluator.Usage`).
pub fn usage(group: &str, plural: &str, obj: &Value) -> ResourceList {
    match (group, plural) {
        ("", "pods") => pod_usage(obj, !is_terminal(obj.pointer("/status/phase").and_then(Value::as_str))),
        ("", "services") => service_usage(obj),
        ("", "persistentvolumeclaims") => claim_usage(obj),
        _ => {
            let mut out = ResourceList::from([(object_count_name(group, plural), Quantity::from_int(1))]);
            if group.is_empty() && LEGACY_ALIASES.contains(&plural) {
                out.insert(plural.to_string(), Quantity::from_int(1));
            }
            out
        }
    }
}

/// Whether a pod phase is terminal (`Succeeded`, `Failed`): such a pod uses no compute quota.
pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// `PodUsageFunc`: `count/pods` always; while the pod is not terminal (`counted`), also `pods`
/// and what it requests and limits (`podComputeUsageHelper` of `PodRequests`/`PodLimits`).
fn pod_usage(pod: &Value, counted: bool) -> ResourceList {
    let mut out = ResourceList::from([("count/pods".to_string(), Quantity::from_int(1))]);
    if counted {
        let spec = pod.get("spec").unwrap_or(&Value::Null);
        for (k, v) in compute_usage(&pod_resources(spec, Kind::Requests), &pod_resources(spec, Kind::Limits)) {
            add_into(&mut out, &k, &v);
        }
    }
    out
}

/// `podComputeUsageHelper`: quota names for requests and limits.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::from([("pods".to_string(), Quantity::from_int(1))]);
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.to_string(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *q);
            out.insert(format!("requests.{name}"), *q);
        }
        if is_extended(name) {
            out.insert(format!("requests.{name}"), *q);
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Requests,
    Limits,
}

/// A quantity map (`requests`, `hard`, ...): strings or JSON numbers, as `Quantity` decodes;
/// what does not parse is left out here (validation reports it where it matters).
fn list_of(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), quantity_of(v).ok()?))).collect())
        .unwrap_or_default()
}

fn quantity_of(v: &Value) -> std::result::Result<Quantity, String> {
    match v {
        Value::String(s) => Quantity::parse(s).map_err(|e| e.to_string()),
        Value::Number(n) => Quantity::parse(&n.to_string()).map_err(|e| e.to_string()),
        _ => Err("cannot unmarshal into a quantity: must be a string or a number".into()),
    }
}

/// A container's requests or limits; requests default to limits, as API defaulting does.
fn container_resources(c: &Value, kind: Kind) -> ResourceList {
    let limits = list_of(c.pointer("/resources/limits"));
    if kind == Kind::Limits {
        return limits;
    }
    let mut requests = list_of(c.pointer("/resources/requests"));
    for (k, v) in limits {
        requests.entry(k).or_insert(v);
    }
    requests
}

fn add_into(to: &mut ResourceList, name: &str, q: &Quantity) {
    match to.get_mut(name) {
        Some(v) => v.add(q),
        None => {
            to.insert(name.to_string(), *q);
        }
    }
}

fn add_list(to: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        add_into(to, k, v);
    }
}

fn max_list(to: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        if to.get(k).is_none_or(|cur| v > cur) {
            to.insert(k.clone(), *v);
        }
    }
}

/// `PodRequests`/`PodLimits`: containers summed; the largest init container (plus the sidecars
/// started before it) if more; sidecars (`restartPolicy: Always`) added; pod-level cpu/memory
/// overriding; `overhead` added (to limits only where there is a limit).
fn pod_resources(spec: &Value, kind: Kind) -> ResourceList {
    let list = |key: &str| spec.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut total = ResourceList::new();
    for c in list("containers") {
        add_list(&mut total, &container_resources(c, kind));
    }
    let (mut sidecars, mut init) = (ResourceList::new(), ResourceList::new());
    for c in list("initContainers") {
        let mut r = container_resources(c, kind);
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            add_list(&mut total, &r);
            add_list(&mut sidecars, &r);
            r = sidecars.clone();
        } else {
            add_list(&mut r, &sidecars);
        }
        max_list(&mut init, &r);
    }
    max_list(&mut total, &init);
    let pod_level = container_resources(spec, kind);
    for r in ["cpu", "memory"] {
        if let Some(q) = pod_level.get(r) {
            total.insert(r.to_string(), *q);
        }
    }
    for (k, v) in list_of(spec.get("overhead")) {
        if kind == Kind::Requests || total.contains_key(&k) {
            add_into(&mut total, &k, &v);
        }
    }
    total
}

/// The services evaluator: a `LoadBalancer` is a load balancer and, like a `NodePort`, uses a
/// node port per port (with `allocateLoadBalancerNodePorts: false`, only the ports that name one).
fn service_usage(svc: &Value) -> ResourceList {
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let (load_balancers, node_ports) = match svc.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => (0, ports.len()),
        Some("LoadBalancer") => {
            let explicit = svc.pointer("/spec/allocateLoadBalancerNodePorts") == Some(&Value::Bool(false));
            let with_node_port = ports.iter().filter(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0);
            (1, if explicit { with_node_port.count() } else { ports.len() })
        }
        _ => (0, 0),
    };
    ResourceList::from([
        ("count/services".to_string(), Quantity::from_int(1)),
        ("services".to_string(), Quantity::from_int(1)),
        ("services.loadbalancers".to_string(), Quantity::from_int(load_balancers)),
        ("services.nodeports".to_string(), Quantity::from_int(node_ports as i64)),
    ])
}

/// The claims evaluator: the claim, its requested storage, and both again per storage class.
fn claim_usage(claim: &Value) -> ResourceList {
    let mut out = ResourceList::from([
        ("count/persistentvolumeclaims".to_string(), Quantity::from_int(1)),
        ("persistentvolumeclaims".to_string(), Quantity::from_int(1)),
    ]);
    let class = claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .or_else(|| claim.pointer("/spec/storageClassName"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !class.is_empty() {
        out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), Quantity::from_int(1));
    }
    if let Some(q) = list_of(claim.pointer("/spec/resources/requests")).get("storage") {
        out.insert("requests.storage".into(), *q);
        if !class.is_empty() {
            out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), *q);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Scopes

/// One `scopes` entry (operator `Exists`) or `scopeSelector.matchExpressions` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeSelector {
    pub scope: String,
    pub operator: String,
    pub values: Vec<String>,
}

fn selectors_of(quota: &Value) -> Vec<ScopeSelector> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut out: Vec<ScopeSelector> = strings(quota.pointer("/spec/scopes"))
        .into_iter()
        .map(|scope| ScopeSelector { scope, operator: "Exists".into(), values: vec![] })
        .collect();
    for e in quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        out.push(ScopeSelector {
            scope: text("scopeName"),
            operator: text("operator"),
            values: strings(e.get("values")),
        });
    }
    out
}

/// Whether an object is within every scope of a quota. Only pods have scopes; any other
/// object is outside a scoped quota (`MatchesNoScopeFunc`).
fn in_scopes(group: &str, plural: &str, selectors: &[ScopeSelector], obj: &Value) -> bool {
    selectors.is_empty() || ((group, plural) == ("", "pods") && selectors.iter().all(|s| pod_in_scope(s, obj)))
}

/// `podMatchesScopeFunc`.
fn pod_in_scope(s: &ScopeSelector, pod: &Value) -> bool {
    match s.scope.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or_default();
            let present = !class.is_empty();
            match s.operator.as_str() {
                "Exists" => present,
                "DoesNotExist" => !present,
                "In" => present && s.values.iter().any(|v| v == class),
                "NotIn" => !present || !s.values.iter().any(|v| v == class),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        _ => false,
    }
}

fn is_terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|s| s >= 0)
}

/// `qos.GetPodQOS(pod) == BestEffort`: no container (nor the pod) requests or limits any cpu or memory.
fn is_best_effort(pod: &Value) -> bool {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let positive = |c: &Value| {
        ["/resources/requests", "/resources/limits"].iter().any(|p| {
            let l = list_of(c.pointer(p));
            ["cpu", "memory"].iter().any(|r| l.get(*r).is_some_and(|q| !q.is_zero() && !q.is_negative()))
        })
    };
    let containers = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten());
    !positive(spec) && !containers.into_iter().any(positive)
}

fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |t: &Value| {
        t.get("namespaces").and_then(Value::as_array).is_some_and(|n| !n.is_empty())
            || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|a| {
        let Some(aff) = pod.pointer(&format!("/spec/affinity/{a}")) else { return false };
        let required = aff.get("requiredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_array);
        let preferred = aff.get("preferredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_array);
        required.into_iter().flatten().any(cross)
            || preferred.into_iter().flatten().filter_map(|w| w.get("podAffinityTerm")).any(cross)
    })
}

// ---------------------------------------------------------------------------------------------
// Admission

/// What admission reads of a ResourceQuota.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaState {
    pub name: String,
    /// `status.hard`: what is enforced.
    pub hard: ResourceList,
    pub used: ResourceList,
    pub selectors: Vec<ScopeSelector>,
}

impl QuotaState {
    pub fn of(quota: &Value) -> QuotaState {
        QuotaState {
            name: quota.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string(),
            hard: list_of(quota.pointer("/status/hard")),
            used: list_of(quota.pointer("/status/used")),
            selectors: selectors_of(quota),
        }
    }
}

/// Why admission refused an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The quota at this index has no usage for a resource it enforces: its status must be
    /// computed first (upstream: `status unknown for quota`, until the controller syncs it).
    StatusUnknown(usize),
    /// The request is forbidden; the message follows `<resource> "<name>" is forbidden: `.
    Forbidden(String),
}

/// `prettyPrint`: `name=quantity` pairs in name order, joined by `,`.
fn pretty(list: &ResourceList) -> String {
    list.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn mask<'a>(list: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    names.into_iter().filter_map(|n| Some((n.clone(), *list.get(n)?))).collect()
}

/// `podEvaluator.Constraints`: when a quota limits cpu or memory, every container must state it.
fn must_specify(required: &[&String], pod: &Value) -> std::result::Result<(), String> {
    let required: Vec<&str> = required.iter().map(|s| s.as_str()).filter(|r| MUST_SPECIFY.contains(r)).collect();
    let mut missing: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    for c in ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
    {
        let has = compute_usage(&container_resources(c, Kind::Requests), &container_resources(c, Kind::Limits));
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        for r in required.iter().filter(|r| !has.contains_key(**r)) {
            missing.entry(r).or_default().insert(name);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| format!("{r} for: {}", names.iter().copied().collect::<Vec<_>>().join(",")))
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

/// `CheckRequest` for a create: the new `status.used` of each quota the object is charged to
/// (by index), or why it is refused.
pub fn check_create(
    quotas: &[QuotaState],
    group: &str,
    plural: &str,
    obj: &Value,
) -> std::result::Result<Vec<(usize, ResourceList)>, Refusal> {
    let mut interesting = vec![];
    for (i, q) in quotas.iter().enumerate() {
        let restricted = matching(group, plural, q.hard.keys());
        if restricted.is_empty() || !in_scopes(group, plural, &q.selectors, obj) {
            continue;
        }
        if (group, plural) == ("", "pods") {
            must_specify(&restricted, obj).map_err(|e| Refusal::Forbidden(format!("failed quota: {}: {e}", q.name)))?;
        }
        if restricted.iter().any(|r| !q.used.contains_key(*r)) {
            return Err(Refusal::StatusUnknown(i));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(vec![]);
    }
    let usage = usage(group, plural, obj);
    let negative: Vec<&str> = usage.iter().filter(|(_, v)| v.is_negative()).map(|(k, _)| k.as_str()).collect();
    if !negative.is_empty() {
        return Err(Refusal::Forbidden(format!("quota usage is negative for resource(s): {}", negative.join(","))));
    }
    let delta: ResourceList = usage.into_iter().filter(|(_, v)| !v.is_zero()).collect();
    if delta.is_empty() {
        return Ok(vec![]);
    }
    let mut out = vec![];
    for i in interesting {
        let q = &quotas[i];
        let requested = mask(&delta, q.hard.keys());
        let mut used = q.used.clone();
        for (k, v) in &requested {
            add_into(&mut used, k, v);
        }
        let exceeded: Vec<&String> =
            requested.keys().filter(|k| used.get(*k).zip(q.hard.get(*k)).is_some_and(|(u, h)| u > h)).collect();
        if !exceeded.is_empty() {
            return Err(Refusal::Forbidden(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                q.name,
                pretty(&mask(&requested, exceeded.iter().copied())),
                pretty(&mask(&q.used, exceeded.iter().copied())),
                pretty(&mask(&q.hard, exceeded.iter().copied())),
            )));
        }
        if !requested.is_empty() {
            out.push((i, used));
        }
    }
    Ok(out)
}

/// `used` less what an object used, for the names `hard` enforces (never below zero), or
/// `None` when nothing changes.
fn released(used: &ResourceList, hard: &ResourceList, usage: &ResourceList) -> Option<ResourceList> {
    let mut out = used.clone();
    let mut changed = false;
    for (k, v) in usage.iter().filter(|(k, v)| hard.contains_key(*k) && !v.is_zero()) {
        if let Some(cur) = out.get_mut(k) {
            cur.sub(v);
            if cur.is_negative() {
                *cur = Quantity::default();
            }
            changed = true;
        }
    }
    changed.then_some(out)
}

// ---------------------------------------------------------------------------------------------
// Validation (`ValidateResourceQuota`)

const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];
const SCOPES: &[&str] =
    &["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity"];

fn is_quota_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

/// `ValidateResourceQuotaResourceName`.
fn validate_resource_name(name: &str, field: &str) -> Vec<Cause> {
    let problems = crate::names::qualified_name(name);
    if !problems.is_empty() {
        return problems.iter().map(|p| Cause::invalid(field, name, p)).collect();
    }
    if !name.contains('/') {
        if !STANDARD_RESOURCES.contains(&name) && !is_quota_hugepages(name) {
            return vec![Cause::invalid(field, name, "must be a standard resource type or fully qualified")];
        }
        // The standard resources less `storage`.
        if name == "storage" {
            return vec![Cause::invalid(field, name, "must be a standard resource for quota")];
        }
    }
    vec![]
}

/// `ValidateResourceQuantityValue`.
fn validate_quantity(name: &str, q: &Quantity, field: &str) -> Vec<Cause> {
    let mut causes = vec![];
    if q.is_negative() {
        causes.push(Cause::invalid(field, q, "must be greater than or equal to 0"));
    }
    if (INTEGER_RESOURCES.contains(&name) || is_extended(name)) && q.milli_value() % 1000 != 0 {
        causes.push(Cause::invalid(field, q, "must be an integer"));
    }
    causes
}

/// Go's `%#v` of a list of scopes (`[]core.ResourceQuotaScope{"BestEffort"}`), as field errors print it.
fn scopes_rendered(scopes: &[String]) -> String {
    let items: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
    format!("[]core.ResourceQuotaScope{{{}}}", items.join(", "))
}

/// Go's `%#v` of a list of strings (`[]string{"a", "b"}`).
fn go_strings(v: Option<&Value>) -> String {
    let items: Vec<String> =
        v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

fn scope_valid_for(scope: &str, resource: &str) -> bool {
    const COMPUTE: &[&str] = &["cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"];
    match scope {
        "Terminating" | "NotTerminating" | "NotBestEffort" | "PriorityClass" | "CrossNamespacePodAffinity" => {
            resource == "pods" || COMPUTE.contains(&resource)
        }
        "BestEffort" => resource == "pods",
        _ => true,
    }
}

/// The quantities of `spec.hard`, or the decode error kube-apiserver answers (400) for one
/// that is not a quantity.
fn decode_hard(quota: &Value) -> Result<ResourceList> {
    let mut out = ResourceList::new();
    let Some(hard) = quota.pointer("/spec/hard") else { return Ok(out) };
    let decode_error = |why: String| {
        ApiError::bad_request(format!("ResourceQuota in version \"v1\" cannot be handled as a ResourceQuota: {why}"))
    };
    let Some(hard) = hard.as_object() else {
        return if hard.is_null() { Ok(out) } else { Err(decode_error("spec.hard: must be an object".into())) };
    };
    for (k, v) in hard {
        out.insert(k.clone(), quantity_of(v).map_err(decode_error)?);
    }
    Ok(out)
}

/// `ValidateResourceQuotaSpec` (and, given the stored quota, `ValidateResourceQuotaUpdate`'s
/// immutable `spec.scopes`).
pub fn validate(quota: &Value, hard: &ResourceList, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = vec![];
    for (k, v) in hard {
        let field = format!("spec.hard[{k}]");
        causes.extend(validate_resource_name(k, &field));
        causes.extend(validate_quantity(k, v, &field));
    }
    let scopes: Vec<String> = selectors_of(&json!({"spec": {"scopes": quota.pointer("/spec/scopes")}}))
        .into_iter()
        .map(|s| s.scope)
        .collect();
    let standard = |r: &str| (STANDARD_RESOURCES.contains(&r) && r != "storage") || is_quota_hugepages(r);
    let mut seen: Vec<&str> = vec![];
    for scope in &scopes {
        if !SCOPES.contains(&scope.as_str()) {
            causes.push(Cause::invalid_rendered("spec.scopes", &scopes_rendered(&scopes), "unsupported scope"));
        }
        for _ in hard.keys().filter(|k| standard(k) && !scope_valid_for(scope, k)) {
            causes.push(Cause::invalid_rendered(
                "spec.scopes",
                &scopes_rendered(&scopes),
                "unsupported scope applied to resource",
            ));
        }
        seen.push(scope);
    }
    for pair in [["BestEffort", "NotBestEffort"], ["Terminating", "NotTerminating"]] {
        if pair.iter().all(|p| seen.contains(p)) {
            causes.push(Cause::invalid_rendered("spec.scopes", &scopes_rendered(&scopes), "conflicting scopes"));
        }
    }
    let expressions = quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array);
    for e in expressions.into_iter().flatten() {
        let field = "spec.scopeSelector.matchExpressions";
        let scope = e.get("scopeName").and_then(Value::as_str).unwrap_or_default();
        let operator = e.get("operator").and_then(Value::as_str).unwrap_or_default();
        let values = e.get("values").and_then(Value::as_array).map_or(0, Vec::len);
        if !SCOPES.contains(&scope) {
            causes.push(Cause::invalid(format!("{field}.scopeName"), scope, "unsupported scope"));
        }
        if scope != "PriorityClass" && SCOPES.contains(&scope) && operator != "Exists" {
            causes.push(Cause::invalid(
                format!("{field}.operator"),
                operator,
                "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ));
        }
        match operator {
            "In" | "NotIn" if values == 0 => causes.push(Cause::required_because(
                format!("{field}.values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "In" | "NotIn" => {}
            "Exists" | "DoesNotExist" if values != 0 => causes.push(Cause::invalid_rendered(
                format!("{field}.values"),
                &go_strings(e.get("values")),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "Exists" | "DoesNotExist" => {}
            _ => causes.push(Cause::invalid(format!("{field}.operator"), operator, "not a valid selector operator")),
        }
    }
    if let Some(old) = old {
        let before: std::collections::BTreeSet<String> =
            selectors_of(&json!({"spec": {"scopes": old.pointer("/spec/scopes")}}))
                .into_iter()
                .map(|s| s.scope)
                .collect();
        if before != scopes.iter().cloned().collect() {
            causes.push(Cause::invalid_rendered("spec.scopes", &scopes_rendered(&scopes), "field is immutable"));
        }
    }
    causes
}

fn list_json(list: &ResourceList) -> Value {
    Value::Object(list.iter().map(|(k, v)| (k.clone(), Value::String(v.to_string()))).collect::<Map<_, _>>())
}

// ---------------------------------------------------------------------------------------------
// Store glue

fn is_quota(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.plural == "resourcequotas"
}

/// (group, plural) under which objects of `def` are stored and counted.
fn counted_as(def: &ResourceDef) -> (&str, &str) {
    match def.view {
        Some(v) => (v.storage().0, v.storage().2),
        None => (def.group.as_str(), def.plural.as_str()),
    }
}

fn quota_def(txn: &Txn<'_>) -> Arc<ResourceDef> {
    txn.registry.get("", "v1", "resourcequotas").expect("resourcequotas are built in")
}

/// The controller's `CalculateUsage` for a quota of `ns`: every resource of `hard` some
/// evaluator tracks (and this server serves), summed over the namespace's objects in the
/// quota's scopes; `pending` is an object being created in the same write.
fn calculate(
    txn: &Txn<'_>,
    ns: &str,
    hard: &ResourceList,
    selectors: &[ScopeSelector],
    pending: Option<(&str, &str, &Value)>,
) -> ResourceList {
    let mut by_resource: BTreeMap<(String, String), Vec<&String>> = BTreeMap::new();
    for name in hard.keys() {
        if let Some(r) = resource_for(name)
            && txn.registry.by_storage_key(&format!("{}/{}", r.0, r.1)).is_some_and(|d| d.namespaced)
        {
            by_resource.entry(r).or_default().push(name);
        }
    }
    let mut used = ResourceList::new();
    for ((group, plural), names) in by_resource {
        for n in &names {
            used.insert((*n).clone(), Quantity::default());
        }
        let stored = txn.objects_in(&format!("{group}/{plural}"), ns);
        let stored = stored.iter().map(|o| if reads_object(&group, &plural) { o.value() } else { Value::Null });
        let pending =
            pending.filter(|(g, p, _)| (*g, *p) == (group.as_str(), plural.as_str())).map(|(_, _, v)| v.clone());
        for obj in stored.chain(pending) {
            if !in_scopes(&group, &plural, selectors, &obj) {
                continue;
            }
            let u = usage(&group, &plural, &obj);
            for n in &names {
                if let Some(q) = u.get(*n) {
                    add_into(&mut used, n, q);
                }
            }
        }
    }
    used
}

/// A quota's status as the controller writes it: `hard` = `spec.hard`, `used` recalculated.
fn set_status(txn: &Txn<'_>, ns: &str, quota: &mut Value, hard: &ResourceList, pending: Option<(&str, &str, &Value)>) {
    let used = calculate(txn, ns, hard, &selectors_of(quota), pending);
    quota["status"] = json!({"hard": list_json(hard), "used": list_json(&used)});
}

/// Stores a quota with `used` as its `status.used`.
fn store_used(txn: &mut Txn<'_>, quota: &Obj, used: &ResourceList) {
    let mut v = quota.value();
    if !v.get("status").is_some_and(Value::is_object) {
        v["status"] = json!({});
    }
    v["status"]["used"] = list_json(used);
    let def = quota_def(txn);
    txn.put(&def, v);
}

/// Called on create, after validation and before the object is stored. A ResourceQuota is
/// validated (422), its `spec.hard` written in canonical form and its status computed. Any
/// namespaced object is charged to its namespace's quotas, or refused (403) when one would be
/// exceeded or a pod does not state what a quota limits.
pub fn admit_create(txn: &mut Txn<'_>, def: &ResourceDef, ns: &str, name: &str, body: &mut Value) -> Result<()> {
    if !def.namespaced {
        return Ok(());
    }
    let quota_hard = if is_quota(def) {
        let hard = decode_hard(body)?;
        let causes = validate(body, &hard, None);
        if !causes.is_empty() {
            return Err(ApiError::invalid(def, name, causes));
        }
        if body.pointer("/spec/hard").is_some_and(Value::is_object) {
            body["spec"]["hard"] = list_json(&hard);
        }
        Some(hard)
    } else {
        None
    };
    let (group, plural) = counted_as(def);
    let quotas = txn.objects_in(STORAGE_KEY, ns);
    if !quotas.is_empty() {
        let mut states: Vec<QuotaState> = quotas.iter().map(|q| QuotaState::of(&q.value())).collect();
        // Each quota gets its status computed at most once (as the controller would sync it);
        // then its usage is known.
        let mut recalculated: Vec<Option<Value>> = vec![None; states.len()];
        let changes = loop {
            match check_create(&states, group, plural, body) {
                Ok(changes) => break changes,
                Err(Refusal::Forbidden(why)) => return Err(ApiError::forbidden(def, name, why)),
                Err(Refusal::StatusUnknown(i)) if recalculated[i].is_none() => {
                    let mut v = quotas[i].value();
                    let hard = list_of(v.pointer("/spec/hard"));
                    set_status(txn, ns, &mut v, &hard, None);
                    states[i] = QuotaState::of(&v);
                    recalculated[i] = Some(v);
                }
                Err(Refusal::StatusUnknown(i)) => {
                    let q = &states[i];
                    let names: Vec<&str> = matching(group, plural, q.hard.keys()).iter().map(|s| s.as_str()).collect();
                    return Err(ApiError::forbidden(
                        def,
                        name,
                        format!("status unknown for quota: {}, resources: {}", q.name, names.join(",")),
                    ));
                }
            }
        };
        let qdef = quota_def(txn);
        for (i, used) in changes {
            let mut v = recalculated[i].take().unwrap_or_else(|| quotas[i].value());
            if !v.get("status").is_some_and(Value::is_object) {
                v["status"] = json!({});
            }
            v["status"]["used"] = list_json(&used);
            txn.put(&qdef, v);
        }
        // A status computed on the way is kept even when this object is not charged to it.
        for v in recalculated.into_iter().flatten() {
            txn.put(&qdef, v);
        }
    }
    if let Some(hard) = quota_hard {
        let pending = body.clone();
        set_status(txn, ns, body, &hard, Some(("", "resourcequotas", &pending)));
    }
    Ok(())
}

/// Whether [`admit_update`] leaves an update of `cur` whose new status phase is `phase` alone,
/// without reading the new object: it is not a ResourceQuota, nor a pod whose phase turns
/// terminal or back (a status write that may skip building the whole object).
pub(crate) fn ignores_status_update(def: &ResourceDef, cur: &Obj, phase: Option<&str>) -> bool {
    if is_quota(def) {
        return false;
    }
    !(def.group.is_empty() && def.plural == "pods")
        || is_terminal(cur.field(def, "status.phase").filter(|p| !p.is_empty())) == is_terminal(phase)
}

/// Called on update, before `new` replaces `cur`. A ResourceQuota is validated (422; `spec.scopes`
/// is immutable) and its status recomputed (also on a `/status` write). A pod whose phase
/// becomes terminal gives back its compute usage (and takes it again if it leaves it).
pub fn admit_update(txn: &mut Txn<'_>, def: &ResourceDef, ns: &str, cur: &Obj, new: &mut Value) -> Result<()> {
    if is_quota(def) {
        let old = cur.value();
        let hard = decode_hard(new)?;
        let causes = validate(new, &hard, Some(&old));
        if !causes.is_empty() {
            return Err(ApiError::invalid(def, &cur.name, causes));
        }
        if new.pointer("/spec/hard").is_some_and(Value::is_object) {
            new["spec"]["hard"] = list_json(&hard);
        }
        set_status(txn, ns, new, &hard, None);
        return Ok(());
    }
    if !(def.group.is_empty() && def.plural == "pods") {
        return Ok(());
    }
    let was = !is_terminal(cur.field(def, "status.phase").filter(|p| !p.is_empty()));
    let is = !is_terminal(new.pointer("/status/phase").and_then(Value::as_str));
    if was == is {
        return Ok(());
    }
    let quotas = txn.objects_in(STORAGE_KEY, ns);
    if quotas.is_empty() {
        return Ok(());
    }
    // The compute part of the pod's usage, given back (or taken).
    let compute: ResourceList = pod_usage(new, true).into_iter().filter(|(k, _)| k != "count/pods").collect();
    for quota in &quotas {
        let q = QuotaState::of(&quota.value());
        if !in_scopes("", "pods", &q.selectors, new) {
            continue;
        }
        let used = if was {
            released(&q.used, &q.hard, &compute)
        } else {
            let mut used = q.used.clone();
            let mut changed = false;
            for (k, v) in compute.iter().filter(|(k, v)| q.hard.contains_key(*k) && !v.is_zero()) {
                add_into(&mut used, k, v);
                changed = true;
            }
            changed.then_some(used)
        };
        if let Some(used) = used {
            store_used(txn, quota, &used);
        }
    }
    Ok(())
}

/// Called when an object is removed from the store: it gives its usage back to its namespace's
/// quotas.
pub fn released_by(txn: &mut Txn<'_>, def: &ResourceDef, obj: &Obj) {
    if !def.namespaced || obj.namespace.is_empty() {
        return;
    }
    let quotas = txn.objects_in(STORAGE_KEY, &obj.namespace);
    if quotas.is_empty() {
        return;
    }
    let (group, plural) = counted_as(def);
    let value = if reads_object(group, plural) { obj.value() } else { Value::Null };
    let usage = usage(group, plural, &value);
    for quota in &quotas {
        let q = QuotaState::of(&quota.value());
        if matching(group, plural, q.hard.keys()).is_empty() || !in_scopes(group, plural, &q.selectors, &value) {
            continue;
        }
        if let Some(used) = released(&q.used, &q.hard, &usage) {
            store_used(txn, quota, &used);
        }
    }
}

#[cfg(test)]
mod tests;
