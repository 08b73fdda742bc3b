//! Autopilot integration: node-health-driven anti-affinities and NoExecute detection.
//!
//! Autopilot flags unhealthy hardware with node *labels* (`autopilot.ibm.com/gpuhealth=EVICT`),
//! not taints; the config's `resourceTaints` say which label values make which resource
//! unusable, and how (`PreferNoSchedule`, `NoSchedule`, `NoExecute`). These functions mirror
//! upstream's `hasResourceRequest`/`addNodeSelectorsToAffinity` (resource_management.go),
//! `NodeHealthMonitor.updateNoExecuteNodes` and the Running phase's NoExecute check.

use std::collections::{BTreeMap, BTreeSet};

use jobset_api::appwrapper::AutopilotConfig;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use serde_json::{Map, Value, json};

use crate::scheduler::fit::parse_quantity;

const NO_EXECUTE: &str = "NoExecute";
const NO_SCHEDULE: &str = "NoSchedule";
const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Adds upstream's Autopilot node anti-affinities to a pod spec (JSON, as found inside a wrapped
/// template) that requests a flagged resource. `NoSchedule`/`NoExecute` values become one
/// `NotIn` per label key appended to every required node selector term; `PreferNoSchedule`
/// values become one extra preferred term. Malformed affinity structures are logged and left
/// as they are (upstream logs and creates the object anyway).
pub fn inject_anti_affinities(pod_spec: &mut Value, cfg: &AutopilotConfig) {
    if !cfg.inject_anti_affinities {
        return;
    }
    // Grouped by label key in first-seen order; values in config order, duplicates kept (as upstream).
    let mut required: Vec<(String, Vec<String>)> = Vec::new();
    let mut preferred: Vec<(String, Vec<String>)> = Vec::new();
    for (resource, taints) in &cfg.resource_taints {
        if !has_resource_request(pod_spec, resource) {
            continue;
        }
        for t in taints {
            let group = match t.effect.as_str() {
                NO_EXECUTE | NO_SCHEDULE => &mut required,
                PREFER_NO_SCHEDULE => &mut preferred,
                _ => continue,
            };
            match group.iter_mut().find(|(k, _)| *k == t.key) {
                Some((_, values)) => values.push(t.value.clone()),
                None => group.push((t.key.clone(), vec![t.value.clone()])),
            }
        }
    }
    if !required.is_empty()
        && let Err(e) = add_required(pod_spec, &not_in(&required))
    {
        tracing::warn!(error = %e, "failed to inject Autopilot affinities");
    }
    if !preferred.is_empty() {
        let weight = if cfg.prefer_no_schedule_weight <= 0 { 1 } else { cfg.prefer_no_schedule_weight };
        if let Err(e) = add_preferred(pod_spec, &not_in(&preferred), weight) {
            tracing::warn!(error = %e, "failed to inject Autopilot affinities");
        }
    }
}

fn not_in(groups: &[(String, Vec<String>)]) -> Vec<Value> {
    groups.iter().map(|(key, values)| json!({"key": key, "operator": "NotIn", "values": values})).collect()
}

/// Upstream `hasResourceRequest`: a container or init container with a positive integer or a
/// non-zero quantity string for `resource` in its limits or requests. Non-integer JSON numbers
/// are not counted (Go decodes them as float64, which upstream's type switch skips).
fn has_resource_request(spec: &Value, resource: &str) -> bool {
    let positive = |q: &Value| match q {
        Value::Number(n) => n.as_i64().is_some_and(|i| i > 0),
        // Go's ParseQuantity accepts no surrounding whitespace; parse_quantity trims it.
        Value::String(s) => s.trim() == s && parse_quantity(s).is_some_and(|v| v != 0),
        _ => false,
    };
    let uses = |c: &Value| {
        ["limits", "requests"]
            .iter()
            .any(|k| c.pointer(&format!("/resources/{k}")).and_then(|l| l.get(resource)).is_some_and(positive))
    };
    ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(k)?.as_array())
        .flatten()
        .any(|c| c.is_object() && uses(c))
}

/// `spec.affinity.nodeAffinity`, created as needed; `Err` names the first part that is not an object.
fn node_affinity(spec: &mut Value) -> Result<&mut Map<String, Value>, String> {
    let spec = spec.as_object_mut().ok_or("spec is not a map")?;
    let affinity =
        spec.entry("affinity").or_insert_with(|| json!({})).as_object_mut().ok_or("spec.affinity is not a map")?;
    affinity
        .entry("nodeAffinity")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| "spec.affinity.nodeAffinity is not a map".to_string())
}

/// Appends `exprs` to every required node selector term. As upstream, a missing
/// `nodeSelectorTerms` becomes one term, and terms before a malformed one keep their additions.
fn add_required(spec: &mut Value, exprs: &[Value]) -> Result<(), String> {
    const REQUIRED: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    let selector = node_affinity(spec)?
        .entry("requiredDuringSchedulingIgnoredDuringExecution")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| format!("{REQUIRED} is not a map"))?;
    let terms = selector
        .entry("nodeSelectorTerms")
        .or_insert_with(|| json!([{}]))
        .as_array_mut()
        .ok_or_else(|| format!("{REQUIRED}.nodeSelectorTerms is not an array"))?;
    for (i, term) in terms.iter_mut().enumerate() {
        let term = term.as_object_mut().ok_or_else(|| format!("{REQUIRED}.nodeSelectorTerms[{i}] is not a map"))?;
        let matches = term
            .entry("matchExpressions")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or_else(|| format!("{REQUIRED}.nodeSelectorTerms[{i}].matchExpressions is not an array"))?;
        matches.extend(exprs.iter().cloned());
    }
    Ok(())
}

fn add_preferred(spec: &mut Value, exprs: &[Value], weight: i32) -> Result<(), String> {
    let terms = node_affinity(spec)?
        .entry("preferredDuringSchedulingIgnoredDuringExecution")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution is not an array")?;
    terms.push(json!({"weight": weight, "preference": {"matchExpressions": exprs}}));
    Ok(())
}

/// Per node, the flagged resources a `NoExecute` entry's `key=value` matches a label of
/// (upstream `noExecuteNodes`). Nodes with none are not kept. Whether to keep this at all
/// (`monitor_nodes`) is the caller's decision, as upstream only registers its monitor then.
#[derive(Default, Clone, Debug)]
pub struct NodeHealth {
    no_execute: BTreeMap<String, BTreeSet<String>>,
}

impl NodeHealth {
    /// Records the node's current labels; returns whether its entry changed. A node being
    /// deleted is forgotten, as upstream does.
    pub fn observe(&mut self, node: &Node, cfg: &AutopilotConfig) -> bool {
        let Some(name) = node.metadata.name.as_deref() else { return false };
        if node.metadata.deletion_timestamp.is_some() {
            return self.forget(name);
        }
        let labels = node.metadata.labels.as_ref();
        let resources: BTreeSet<String> = cfg
            .resource_taints
            .iter()
            .filter(|(_, taints)| {
                taints.iter().any(|t| {
                    t.effect == NO_EXECUTE && labels.and_then(|l| l.get(&t.key)).is_some_and(|v| *v == t.value)
                })
            })
            .map(|(r, _)| r.clone())
            .collect();
        if resources.is_empty() {
            return self.forget(name);
        }
        if self.no_execute.get(name) == Some(&resources) {
            return false;
        }
        self.no_execute.insert(name.to_string(), resources);
        true
    }

    /// Drops a deleted node; returns whether it had an entry.
    pub fn forget(&mut self, node_name: &str) -> bool {
        self.no_execute.remove(node_name).is_some()
    }

    /// The flagged resources of `node` that Autopilot marked NoExecute, if any.
    pub fn no_execute_resources(&self, node: &str) -> Option<&BTreeSet<String>> {
        self.no_execute.get(node)
    }
}

/// The nodes of Running, not-deleting pods that use (a non-zero request or limit in an app
/// container; init containers have finished) a resource flagged NoExecute on their node.
pub fn pods_on_no_execute_nodes<'a>(health: &NodeHealth, pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<String> {
    let mut nodes = BTreeSet::new();
    for pod in pods {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(spec) = pod.spec.as_ref() else { continue };
        let Some(node) = spec.node_name.as_deref() else { continue };
        let Some(flagged) = health.no_execute_resources(node) else { continue };
        if flagged.iter().any(|r| spec.containers.iter().any(|c| uses(c, r))) {
            nodes.insert(node.to_string());
        }
    }
    nodes
}

fn uses(c: &Container, resource: &str) -> bool {
    let Some(r) = c.resources.as_ref() else { return false };
    [r.limits.as_ref(), r.requests.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|list| list.get(resource))
        .any(|q| parse_quantity(&q.0).is_some_and(|v| v != 0))
}

/// The `AutopilotNoExecute` condition message. Upstream formats a `sets.Set[string]` (a Go map)
/// with `%v`, which prints `map[a:{} b:{}]` with the keys sorted.
pub fn no_execute_message(nodes: &BTreeSet<String>) -> String {
    let entries: Vec<String> = nodes.iter().map(|n| format!("{n}:{{}}")).collect();
    format!("Workload contains pods using NoExecute resources on Nodes: map[{}]", entries.join(" "))
}

#[cfg(test)]
mod tests {
    use jobset_api::appwrapper::ResourceTaint;

    use super::*;

    const HEALTH: &str = "autopilot.ibm.com/gpuhealth";

    fn gpu_spec(resources: Value) -> Value {
        json!({"containers": [{"name": "c", "image": "i", "resources": resources}]})
    }

    fn injected(spec: Value, cfg: &AutopilotConfig) -> Value {
        let mut spec = spec;
        inject_anti_affinities(&mut spec, cfg);
        spec
    }

    fn required_default() -> Value {
        json!({"key": HEALTH, "operator": "NotIn", "values": ["TESTING", "EVICT"]})
    }

    fn preferred_default() -> Value {
        json!({"weight": 50, "preference": {"matchExpressions": [{"key": HEALTH, "operator": "NotIn", "values": ["WARN"]}]}})
    }

    /// The affinity the default config gives a pod without one.
    fn default_affinity() -> Value {
        json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [required_default()]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [preferred_default()],
        }})
    }

    #[test]
    fn pods_requesting_a_flagged_resource_get_required_and_preferred_anti_affinities() {
        let cfg = AutopilotConfig::default();
        let cases = [
            ("integer request", json!({"requests": {"nvidia.com/gpu": 1}})),
            ("string limit", json!({"limits": {"nvidia.com/gpu": "2"}})),
            ("quantity string", json!({"requests": {"nvidia.com/gpu": "500m"}})),
            ("zero request but a limit", json!({"requests": {"nvidia.com/gpu": 0}, "limits": {"nvidia.com/gpu": 1}})),
        ];
        for (what, resources) in cases {
            let got = injected(gpu_spec(resources), &cfg);
            assert_eq!(got["affinity"], default_affinity(), "{what}");
        }
        let init = json!({"containers": [{"name": "c"}],
                          "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        assert_eq!(injected(init, &cfg)["affinity"], default_affinity(), "an init container");
    }

    #[test]
    fn pods_not_requesting_a_flagged_resource_are_left_alone() {
        let cfg = AutopilotConfig::default();
        let cases = [
            ("no resources", json!({"containers": [{"name": "c"}]})),
            ("another resource", gpu_spec(json!({"requests": {"cpu": "1"}}))),
            ("zero integer", gpu_spec(json!({"requests": {"nvidia.com/gpu": 0}}))),
            ("zero string", gpu_spec(json!({"limits": {"nvidia.com/gpu": "0"}}))),
            ("negative integer", gpu_spec(json!({"limits": {"nvidia.com/gpu": -1}}))),
            ("float (upstream's type switch skips it)", gpu_spec(json!({"limits": {"nvidia.com/gpu": 1.5}}))),
            ("malformed quantity", gpu_spec(json!({"limits": {"nvidia.com/gpu": "lots"}}))),
            ("padded quantity", gpu_spec(json!({"limits": {"nvidia.com/gpu": " 1"}}))),
            ("resources not a map", gpu_spec(json!("1 gpu"))),
            ("containers not a list", json!({"containers": {"c": {"resources": {"limits": {"nvidia.com/gpu": 1}}}}})),
        ];
        for (what, spec) in cases {
            assert_eq!(injected(spec.clone(), &cfg), spec, "{what}");
        }
    }

    #[test]
    fn nothing_is_injected_when_injection_is_disabled() {
        let cfg = AutopilotConfig { inject_anti_affinities: false, ..Default::default() };
        let spec = gpu_spec(json!({"limits": {"nvidia.com/gpu": 1}}));
        assert_eq!(injected(spec.clone(), &cfg), spec);
    }

    #[test]
    fn required_expressions_are_appended_to_every_existing_term() {
        let spec = json!({
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]}},
            "podAntiAffinity": {"kept": true}},
        });
        let got = injected(spec, &AutopilotConfig::default());
        assert_eq!(
            got["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, required_default()]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                 "matchExpressions": [required_default()]},
            ])
        );
        assert_eq!(got["affinity"]["podAntiAffinity"], json!({"kept": true}));
    }

    #[test]
    fn the_preferred_term_is_appended_to_existing_preferences() {
        let existing = json!({"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}});
        let spec = json!({
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [existing.clone()]}},
        });
        let got = injected(spec, &AutopilotConfig::default());
        assert_eq!(
            got["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
            json!([existing, preferred_default()])
        );
    }

    #[test]
    fn values_are_grouped_by_key_in_config_order_across_resources() {
        let taint = ResourceTaint::new;
        let cfg = AutopilotConfig {
            prefer_no_schedule_weight: 0,
            resource_taints: BTreeMap::from([
                (
                    "a.com/fpga".to_string(),
                    vec![taint("health", "BAD", "NoExecute"), taint("fpga", "OLD", "PreferNoSchedule")],
                ),
                (
                    "b.com/gpu".to_string(),
                    vec![
                        taint("health", "ERR", "NoSchedule"),
                        taint("gpu", "HOT", "NoSchedule"),
                        taint("health", "WARN", "PreferNoSchedule"),
                        taint("health", "IGNORED", "SomethingElse"),
                    ],
                ),
                ("c.com/unused".to_string(), vec![taint("unused", "X", "NoExecute")]),
            ]),
            ..Default::default()
        };
        let spec = json!({"containers": [
            {"name": "g", "resources": {"limits": {"b.com/gpu": 1}}},
            {"name": "f", "resources": {"requests": {"a.com/fpga": "1"}}},
        ]});
        let got = injected(spec, &cfg);
        assert_eq!(
            got["affinity"]["nodeAffinity"],
            json!({
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "health", "operator": "NotIn", "values": ["BAD", "ERR"]},
                    {"key": "gpu", "operator": "NotIn", "values": ["HOT"]},
                ]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [
                    {"key": "fpga", "operator": "NotIn", "values": ["OLD"]},
                    {"key": "health", "operator": "NotIn", "values": ["WARN"]},
                ]}}],
            })
        );
    }

    #[test]
    fn only_the_effects_present_are_injected() {
        let cfg = |effect: &str| AutopilotConfig {
            resource_taints: BTreeMap::from([("nvidia.com/gpu".into(), vec![ResourceTaint::new(HEALTH, "X", effect)])]),
            ..Default::default()
        };
        let spec = gpu_spec(json!({"limits": {"nvidia.com/gpu": 1}}));
        let got = injected(spec.clone(), &cfg("PreferNoSchedule"));
        let na = got["affinity"]["nodeAffinity"].as_object().unwrap();
        assert_eq!(na.keys().collect::<Vec<_>>(), ["preferredDuringSchedulingIgnoredDuringExecution"]);
        let got = injected(spec, &cfg("NoExecute"));
        let na = got["affinity"]["nodeAffinity"].as_object().unwrap();
        assert_eq!(na.keys().collect::<Vec<_>>(), ["requiredDuringSchedulingIgnoredDuringExecution"]);
    }

    #[test]
    fn malformed_affinities_are_left_as_they_are_without_panicking() {
        let cfg = AutopilotConfig::default();
        let with = |affinity: Value| json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}], "affinity": affinity});
        let untouched = [
            ("affinity not a map", json!("anywhere")),
            ("affinity null (not a map to Go either)", Value::Null),
            ("nodeAffinity not a map", json!({"nodeAffinity": [1, 2]})),
        ];
        for (what, affinity) in untouched {
            assert_eq!(injected(with(affinity.clone()), &cfg)["affinity"], affinity, "{what}");
        }
        // The required half fails; the preferred half is still added, as upstream does each separately.
        let got = injected(with(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 7}})), &cfg);
        assert_eq!(
            got["affinity"]["nodeAffinity"],
            json!({"requiredDuringSchedulingIgnoredDuringExecution": 7,
                   "preferredDuringSchedulingIgnoredDuringExecution": [preferred_default()]})
        );
        let got =
            injected(with(json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": {}}})), &cfg);
        assert_eq!(got["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"], json!({}));
        assert_eq!(
            got["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": [{"matchExpressions": [required_default()]}]})
        );
        // Terms before a malformed one keep what was appended (upstream mutates in place).
        let terms = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {}, "bad", {"matchExpressions": "bad"}]}}});
        let got = injected(with(terms), &cfg);
        assert_eq!(
            got["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            json!([{"matchExpressions": [required_default()]}, "bad", {"matchExpressions": "bad"}])
        );
        // An explicitly empty term list has no term to extend (the API server rejects it anyway).
        let got = injected(
            with(
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
            ),
            &cfg,
        );
        assert_eq!(
            got["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": []})
        );
        // A spec that is not an object at all.
        let mut v = json!(["not", "a", "spec"]);
        inject_anti_affinities(&mut v, &cfg);
        assert_eq!(v, json!(["not", "a", "spec"]));
    }

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn node_health_tracks_no_execute_labels_per_resource() {
        let cfg = AutopilotConfig {
            resource_taints: BTreeMap::from([
                (
                    "nvidia.com/gpu".into(),
                    vec![
                        ResourceTaint::new(HEALTH, "WARN", "PreferNoSchedule"),
                        ResourceTaint::new(HEALTH, "TESTING", "NoSchedule"),
                        ResourceTaint::new(HEALTH, "EVICT", "NoExecute"),
                    ],
                ),
                ("example.com/nic".into(), vec![ResourceTaint::new("nic", "DOWN", "NoExecute")]),
            ]),
            ..Default::default()
        };
        let mut h = NodeHealth::default();
        type Labels<'a> = &'a [(&'a str, &'a str)];
        let steps: &[(&str, Labels, bool, Option<&[&str]>)] = &[
            ("healthy", &[("zone", "a")], false, None),
            ("WARN is not NoExecute", &[(HEALTH, "WARN")], false, None),
            ("TESTING is not NoExecute", &[(HEALTH, "TESTING")], false, None),
            ("EVICT", &[(HEALTH, "EVICT")], true, Some(&["nvidia.com/gpu"])),
            ("EVICT again", &[(HEALTH, "EVICT"), ("zone", "b")], false, Some(&["nvidia.com/gpu"])),
            ("and the nic", &[(HEALTH, "EVICT"), ("nic", "DOWN")], true, Some(&["example.com/nic", "nvidia.com/gpu"])),
            ("the value must match exactly", &[(HEALTH, "evict"), ("nic", "DOWN")], true, Some(&["example.com/nic"])),
            ("healthy again", &[], true, None),
        ];
        for (what, labels, changed, want) in steps {
            assert_eq!(h.observe(&node("n1", labels), &cfg), *changed, "{what}: changed");
            assert_eq!(h.no_execute_resources("n1"), want.map(set).as_ref(), "{what}");
        }
    }

    #[test]
    fn node_health_forgets_deleted_and_deleting_nodes() {
        let cfg = AutopilotConfig::default();
        let mut h = NodeHealth::default();
        assert!(h.observe(&node("n1", &[(HEALTH, "EVICT")]), &cfg));
        assert!(h.observe(&node("n2", &[(HEALTH, "EVICT")]), &cfg));
        assert!(h.forget("n1"));
        assert!(!h.forget("n1"));
        assert_eq!(h.no_execute_resources("n1"), None);
        let mut deleting = node("n2", &[(HEALTH, "EVICT")]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::from_second(1).unwrap()));
        assert!(h.observe(&deleting, &cfg));
        assert_eq!(h.no_execute_resources("n2"), None);
        assert!(!h.observe(&Node::default(), &cfg), "a node without a name is ignored");
    }

    fn pod(name: &str, node: &str, phase: &str, extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase},
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn running_pods_using_a_no_execute_resource_name_their_nodes() {
        let cfg = AutopilotConfig::default();
        let mut h = NodeHealth::default();
        h.observe(&node("bad", &[(HEALTH, "EVICT")]), &cfg);
        h.observe(&node("warn", &[(HEALTH, "WARN")]), &cfg);
        h.observe(&node("ok", &[]), &cfg);
        let containers = |c: Value| json!({"spec": {"containers": c}});
        let cases = [
            ("a running GPU pod on the EVICT node", pod("p", "bad", "Running", json!({})), true),
            (
                "a request only",
                pod(
                    "p",
                    "bad",
                    "Running",
                    containers(json!([{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}])),
                ),
                true,
            ),
            (
                "one of several containers",
                pod(
                    "p",
                    "bad",
                    "Running",
                    containers(json!([{"name": "a"}, {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}}])),
                ),
                true,
            ),
            ("on a healthy node", pod("p", "ok", "Running", json!({})), false),
            ("on a WARN node", pod("p", "warn", "Running", json!({})), false),
            ("pending", pod("p", "bad", "Pending", json!({})), false),
            ("succeeded", pod("p", "bad", "Succeeded", json!({})), false),
            (
                "being deleted",
                pod("p", "bad", "Running", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                false,
            ),
            (
                "no GPU",
                pod("p", "bad", "Running", containers(json!([{"name": "c", "resources": {"limits": {"cpu": "1"}}}]))),
                false,
            ),
            (
                "a zero GPU limit",
                pod(
                    "p",
                    "bad",
                    "Running",
                    containers(json!([{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0"}}}])),
                ),
                false,
            ),
            (
                "only an init container uses the GPU",
                pod(
                    "p",
                    "bad",
                    "Running",
                    json!({"spec": {"containers": [{"name": "c"}],
                    "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
                ),
                false,
            ),
        ];
        for (what, p, flagged) in cases {
            let want = if flagged { set(&["bad"]) } else { set(&[]) };
            assert_eq!(pods_on_no_execute_nodes(&h, [&p]), want, "{what}");
        }
        h.observe(&node("worse", &[(HEALTH, "EVICT")]), &cfg);
        let pods = [
            pod("a", "worse", "Running", json!({})),
            pod("b", "bad", "Running", json!({})),
            pod("c", "bad", "Running", json!({})),
            pod("d", "ok", "Running", json!({})),
        ];
        assert_eq!(pods_on_no_execute_nodes(&h, &pods), set(&["bad", "worse"]));
        assert_eq!(pods_on_no_execute_nodes(&NodeHealth::default(), &pods), set(&[]));
    }

    #[test]
    fn the_message_formats_the_node_set_as_go_prints_a_set() {
        assert_eq!(
            no_execute_message(&set(&["n2", "n1"])),
            "Workload contains pods using NoExecute resources on Nodes: map[n1:{} n2:{}]"
        );
        assert_eq!(
            no_execute_message(&set(&["only"])),
            "Workload contains pods using NoExecute resources on Nodes: map[only:{}]"
        );
    }
}
