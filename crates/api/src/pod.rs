//! Pod validation, as kube-apiserver does it: the checks of `ValidatePodCreate` and
//! `ValidatePodSpec` (`pkg/apis/core/validation/validation.go`) that concern containers and
//! restart policies, with upstream's field paths and messages. A Job's pod template gets the
//! same spec checks (`ValidatePodTemplateSpec`, called from `crate::job`).
//!
//! Covered: no containers; container names (required, DNS-1123 labels, unique across
//! `initContainers` and `containers`); an empty `image` (and, on a Pod, leading or trailing
//! blanks); `ports` (names, numbers, protocols) and host-port conflicts; unknown
//! `terminationMessagePolicy` / `imagePullPolicy`; the container `restartPolicy` and
//! `restartPolicyRules` (with the `ContainerRestartRules` and `RestartAllContainersOnContainerExits`
//! features on, so `RestartAllContainers` is an allowed action, as the node agents implement it);
//! lifecycle hooks and probes on init containers that are not sidecars; unknown pod
//! `restartPolicy` and `dnsPolicy`; `schedulingGroup` (its `podGroupName` set, a DNS-1123
//! subdomain); on create, `ephemeralContainers` and a `nodeName` set while `schedulingGates`
//! remain. On update, `ValidatePodUpdate`'s immutability: only the fields it lets change may
//! differ from the stored spec (with its messages; the diff after its `spec: Forbidden` message
//! is ours, see `validate_pod_spec_update`).
//!
//! Not covered: volumes, env, resources, probes' contents, security contexts, affinity and the
//! other fields `ValidatePodSpec` checks. The API server does not default pods, so a field
//! upstream defaults before validating (pod and port `protocol`, `restartPolicy`,
//! `terminationMessagePolicy`, `imagePullPolicy`, `dnsPolicy`) is accepted when absent or empty.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::field::{FieldError, go_json};
use crate::validation::{
    DNS1123_LABEL_FMT, dns1123_subdomain_errors, label_value_errors, matches_dns1123_label, max_len_error,
    qualified_name_errors, regex_error,
};

const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const PORT_RANGE_ERR: &str = "must be between 1 and 65535, inclusive";
const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
// `sets.List` order (sorted), as upstream passes these sets to `field.NotSupported`.
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const PORT_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const CONTAINER_RESTART_POLICIES: &[&str] = &["Always", "Never", "OnFailure"];
const RESTART_RULE_ACTIONS: &[&str] = &["Restart", "RestartAllContainers"];
const RESTART_RULE_OPERATORS: &[&str] = &["In", "NotIn"];
const MAX_RESTART_RULES: usize = 20;
const MAX_RESTART_RULE_EXIT_CODES: usize = 255;
const INIT_ONLY_WITH_RESTART_ALWAYS: &str = "may not be set for init containers without restartPolicy=Always";

/// Validates a Pod: `ValidatePodCreate` on create (`old` is `None`).
///
/// On update (of the pod itself: the `status` and `binding` subresources do not come here) only
/// a changed `spec` is checked: for problems the stored spec did not already have (so a pod
/// stored before these checks existed stays updatable), and for `ValidatePodUpdate`'s
/// immutability (`validate_pod_spec_update`). Metadata updates always pass.
pub fn validate_pod(pod: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = pod.get("spec").unwrap_or(&null);
    let Some(old) = old else {
        let mut errs = validate_pod_metadata_and_spec(spec);
        if get(spec, "ephemeralContainers").and_then(Value::as_array).is_some_and(|c| !c.is_empty()) {
            errs.push(FieldError::forbidden("spec.ephemeralContainers", "cannot be set on create"));
        }
        let node_name = str_at(spec, "nodeName").unwrap_or_default();
        if !node_name.is_empty()
            && get(spec, "schedulingGates").and_then(Value::as_array).is_some_and(|g| !g.is_empty())
        {
            errs.push(FieldError::forbidden(
                "spec.nodeName",
                "cannot be set until all schedulingGates have been cleared",
            ));
        }
        return errs;
    };
    let old_spec = old.get("spec").unwrap_or(&null);
    if spec == old_spec {
        return Vec::new();
    }
    let before: HashSet<String> = validate_pod_metadata_and_spec(old_spec).iter().map(ToString::to_string).collect();
    let mut errs: Vec<FieldError> =
        validate_pod_metadata_and_spec(spec).into_iter().filter(|e| !before.contains(&e.to_string())).collect();
    errs.extend(validate_pod_spec_update(spec, old_spec));
    errs
}

/// The fields `ValidatePodUpdate` lets an update change, as its message lists them
/// (`updatablePodSpecFields`, joined by `,`).
const UPDATABLE_POD_SPEC_FIELDS: &[&str] = &[
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const TOLERATION_OPERATORS: &[&str] = &["Equal", "Exists"];

/// The spec part of `ValidatePodUpdate`: the spec may change only in the container images,
/// `activeDeadlineSeconds` (set, or lowered), `tolerations` (additions, and new
/// `tolerationSeconds`), `terminationGracePeriodSeconds` (to 1 from a negative value),
/// `schedulingGates` (removals) and, while the stored pod is still gated, `nodeSelector`
/// (additions) and `affinity.nodeAffinity` (additions to its required terms). Anything else is
/// `spec: Forbidden: pod updates may not change fields other than ...`.
///
/// Both specs are compared as kube-apiserver compares them after defaulting (see
/// [`comparable_spec`]), so a pod we stored without kube's defaults is not changed by a client
/// that sends them.
fn validate_pod_spec_update(new_spec: &Value, old_spec: &Value) -> Vec<FieldError> {
    let old = comparable_spec(old_spec, None);
    let new = comparable_spec(new_spec, Some(&old));
    let mut errs = Vec::new();
    // `ValidateContainerUpdates` (its image checks are the create checks' own, reported above).
    for key in ["containers", "initContainers"] {
        if list(&new, key).len() != list(&old, key).len() {
            errs.push(FieldError::forbidden(format!("spec.{key}"), "pod updates may not add or remove containers"));
            return errs;
        }
    }
    let deadline = "spec.activeDeadlineSeconds";
    match (get(&new, "activeDeadlineSeconds"), get(&old, "activeDeadlineSeconds")) {
        (Some(value), old_value) => {
            let seconds = value.as_i64().filter(|s| (0..=i64::from(i32::MAX)).contains(s));
            let Some(seconds) = seconds else {
                errs.push(FieldError::invalid(deadline, value, "must be between 0 and 2147483647, inclusive"));
                return errs;
            };
            if old_value.and_then(Value::as_i64).is_some_and(|old| old < seconds) {
                errs.push(FieldError::invalid(deadline, value, "must be less than or equal to previous value"));
                return errs;
            }
        }
        (None, Some(_)) => {
            errs.push(FieldError::invalid(
                deadline,
                &Value::Null,
                "must not update from a positive integer to nil value",
            ));
        }
        (None, None) => {}
    }
    validate_only_added_tolerations(&new, &old, &mut errs);
    validate_only_deleted_scheduling_gates(&new, &old, &mut errs);
    if new == old {
        return errs;
    }

    // What may change takes the stored value; whatever differs then is refused.
    let mut munged = new.clone();
    for key in ["containers", "initContainers"] {
        let old_list = list(&old, key);
        if let Some(list) = munged.get_mut(key).and_then(Value::as_array_mut) {
            for (c, old_c) in list.iter_mut().zip(old_list) {
                set_or_remove(c, "image", old_c.get("image"));
            }
        }
    }
    for key in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        set_or_remove(&mut munged, key, old.get(key));
    }
    let grace = |spec: &Value| get(spec, "terminationGracePeriodSeconds").and_then(Value::as_i64);
    if grace(&old).is_some_and(|g| g < 0) && grace(&munged) == Some(1) {
        set_or_remove(&mut munged, "terminationGracePeriodSeconds", old.get("terminationGracePeriodSeconds"));
    }
    if !list(&old, "schedulingGates").is_empty() {
        validate_gated_pod_scheduling_update(&mut munged, &old, &mut errs);
    }
    if munged != old {
        // kube-apiserver appends `cmp.Diff(oldSpec, mungedSpec)` of its Go structs, which cannot
        // be reproduced byte for byte: the message keeps its text and list, then lists each
        // changed path with its stored (`-`) and new (`+`) value.
        let mut diff = Vec::new();
        spec_diff("spec", Some(&old), Some(&munged), &mut diff);
        errs.push(FieldError::forbidden(
            "spec",
            format!(
                "pod updates may not change fields other than {}\n{}",
                UPDATABLE_POD_SPEC_FIELDS.join(","),
                diff.join("\n")
            ),
        ));
    }
    errs
}

/// `validateOnlyAddedTolerations`: every stored toleration is still there (its
/// `tolerationSeconds` may change), and the list is valid (`ValidateTolerations`; checked only
/// when the list changed, as a stored list was never checked here).
fn validate_only_added_tolerations(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let (new_list, old_list) = (list(new, "tolerations"), list(old, "tolerations"));
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        t.as_object_mut().map(|o| o.remove("tolerationSeconds"));
        t
    };
    let kept = old_list.iter().all(|o| new_list.iter().any(|n| without_seconds(n) == without_seconds(o)));
    if !kept {
        errs.push(FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    } else if new_list != old_list {
        validate_tolerations(new_list, "spec.tolerations", errs);
    }
}

/// `ValidateTolerations`.
fn validate_tolerations(list: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    for (i, t) in list.iter().enumerate() {
        let at = |f: &str| format!("{path}[{i}].{f}");
        let text = |f: &str| str_at(t, f).unwrap_or_default();
        let (key, operator, value, effect) = (text("key"), text("operator"), text("value"), text("effect"));
        if !key.is_empty() {
            for detail in qualified_name_errors(key) {
                errs.push(FieldError::invalid(at("key"), &json!(key), detail));
            }
        } else if operator != "Exists" {
            errs.push(FieldError::invalid(
                at("operator"),
                &json!(operator),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if get(t, "tolerationSeconds").is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                at("effect"),
                &json!(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let problems = label_value_errors(value);
                if !problems.is_empty() {
                    errs.push(FieldError::invalid(at("operator"), &json!(value), problems.join(";")));
                }
            }
            "Exists" if !value.is_empty() => {
                errs.push(FieldError::invalid(
                    at("operator"),
                    &json!(value),
                    "value must be empty when `operator` is 'Exists'",
                ));
            }
            "Exists" => {}
            other => errs.push(FieldError::not_supported(at("operator"), &json!(other), TOLERATION_OPERATORS)),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            errs.push(FieldError::not_supported(at("effect"), &json!(effect), TAINT_EFFECTS));
        }
    }
}

/// `validateOnlyDeletedSchedulingGates`: no gate the stored pod did not have (each reported at
/// the last index of its name; upstream's order is a map's).
fn validate_only_deleted_scheduling_gates(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let name = |g: &Value| str_at(g, "name").unwrap_or_default().to_string();
    let old_names: HashSet<String> = list(old, "schedulingGates").iter().map(name).collect();
    let new_list = list(new, "schedulingGates");
    for (i, gate) in new_list.iter().enumerate() {
        let gate = name(gate);
        let last = new_list.iter().rposition(|g| name(g) == gate) == Some(i);
        if last && !old_names.contains(&gate) {
            errs.push(FieldError::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                format!("only deletion is allowed, but found new scheduling gate '{gate}'"),
            ));
        }
    }
}

/// What `ValidatePodUpdate` lets a pod whose stored spec still has scheduling gates change:
/// additions to `nodeSelector` (`validateNodeSelectorMutation`) and to the required terms of
/// its node affinity (`validateNodeAffinityMutation`; the preferred ones change freely). The
/// munged spec takes the stored values of both.
fn validate_gated_pod_scheduling_update(munged: &mut Value, old: &Value, errs: &mut Vec<FieldError>) {
    let old_selector = old.get("nodeSelector");
    if munged.get("nodeSelector") != old_selector {
        let new_selector = munged.get("nodeSelector").cloned().unwrap_or(Value::Null);
        let kept = old_selector
            .and_then(Value::as_object)
            .is_none_or(|o| o.iter().all(|(k, v)| new_selector.get(k) == Some(v)));
        if !kept {
            let shown = if new_selector.is_null() { json!({}) } else { new_selector };
            errs.push(FieldError::invalid(
                "spec.nodeSelector",
                &shown,
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
        }
        set_or_remove(munged, "nodeSelector", old_selector);
    }
    let old_affinity = old.pointer("/affinity/nodeAffinity");
    let new_affinity = munged.pointer("/affinity/nodeAffinity").cloned();
    if new_affinity.as_ref() == old_affinity {
        return;
    }
    validate_node_affinity_mutation(new_affinity.as_ref(), old_affinity, errs);
    let affinity = munged.get("affinity");
    let node_only = affinity.is_some_and(|a| a.get("podAffinity").is_none() && a.get("podAntiAffinity").is_none());
    match (affinity.is_some(), old_affinity) {
        (false, None) => {}
        (false, Some(na)) => munged["affinity"] = json!({"nodeAffinity": na}),
        (true, _) if old.get("affinity").is_none() && node_only => set_or_remove(munged, "affinity", None),
        (true, na) => set_or_remove(&mut munged["affinity"], "nodeAffinity", na),
    }
}

/// `validateNodeAffinityMutation`: a stored non-empty list of required node selector terms keeps
/// its length, and each term only gains requirements.
fn validate_node_affinity_mutation(new: Option<&Value>, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let terms = |na: Option<&Value>| {
        na.and_then(|na| na.pointer("/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let required = old.and_then(|na| get(na, "requiredDuringSchedulingIgnoredDuringExecution"));
    if required.is_none() {
        return;
    }
    let (old_terms, new_terms) = (terms(old), terms(new));
    let path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        errs.push(FieldError::invalid(
            path,
            &Value::Array(new_terms),
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        ));
        return;
    }
    for (i, (new_term, old_term)) in new_terms.iter().zip(&old_terms).enumerate() {
        if !node_selector_term_has_only_additions(new_term, old_term) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}]"),
                new_term,
                "only additions are allowed (no mutations or deletions)",
            ));
        }
    }
}

/// `validateNodeSelectorTermHasOnlyAdditions`.
fn node_selector_term_has_only_additions(new: &Value, old: &Value) -> bool {
    let (keys_old, keys_new) = (
        [list(old, "matchExpressions"), list(old, "matchFields")],
        [list(new, "matchExpressions"), list(new, "matchFields")],
    );
    if keys_old.iter().all(|l| l.is_empty()) && keys_new.iter().any(|l| !l.is_empty()) {
        return false;
    }
    keys_old.iter().zip(&keys_new).all(|(o, n)| n.len() >= o.len() && n[..o.len()] == o[..])
}

/// A pod spec as kube-apiserver compares two of them: with the defaults it would have set
/// (`SetDefaults_PodSpec`, `SetDefaults_Pod`, `SetDefaults_Container` and those of probes, ports,
/// volumes and `fieldRef`s; an `imagePullPolicy` left out keeps the stored container's, as a
/// stored pod has it) and the `serviceAccountName` its ServiceAccount admission sets, and
/// without what Go's semantic equality cannot tell from absent (nulls, empty strings, `false`,
/// empty lists and maps). An empty struct (`securityContext: {}`) is taken for an absent one too.
fn comparable_spec(spec: &Value, old: Option<&Value>) -> Value {
    let mut spec = spec.clone();
    let Some(obj) = spec.as_object_mut() else { return Value::Null };
    // The deprecated alias only counts when the name is left out (v1 conversion).
    if let Some(alias) = obj.remove("serviceAccount") {
        default_field(obj, "serviceAccountName", alias);
    }
    for (key, default) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("schedulerName", json!("default-scheduler")),
        ("enableServiceLinks", json!(true)),
        ("serviceAccountName", json!("default")),
    ] {
        default_field(obj, key, default);
    }
    let host_network = obj.get("hostNetwork") == Some(&Value::Bool(true));
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        let stored = old.map(|o| list(o, key)).unwrap_or_default();
        let Some(list) = obj.get_mut(key).and_then(Value::as_array_mut) else { continue };
        for (i, c) in list.iter_mut().enumerate() {
            let Some(c) = c.as_object_mut() else { continue };
            let pull = match stored.get(i).and_then(|s| s.get("imagePullPolicy")) {
                Some(p) => p.clone(),
                None => json!(default_pull_policy(c.get("image").and_then(Value::as_str).unwrap_or_default())),
            };
            default_container(c, pull, host_network);
        }
    }
    for volume in obj.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        for source in ["secret", "configMap", "downwardAPI", "projected"] {
            if let Some(v) = volume.get_mut(source).and_then(Value::as_object_mut) {
                default_field(v, "defaultMode", json!(420));
            }
        }
    }
    strip_empty(&mut spec);
    spec
}

/// `SetDefaults_Container` and the defaults of what a container holds, with the pull policy
/// `pull`; `SetDefaults_Pod`'s requests from limits and, on the host network, host ports.
fn default_container(c: &mut serde_json::Map<String, Value>, pull: Value, host_network: bool) {
    default_field(c, "imagePullPolicy", pull);
    default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(c, "terminationMessagePolicy", json!("File"));
    for port in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(p) = port.as_object_mut() else { continue };
        default_field(p, "protocol", json!("TCP"));
        if host_network && let Some(container_port) = p.get("containerPort").cloned() {
            p.entry("hostPort").or_insert(container_port);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) else { continue };
        for (k, v) in [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)] {
            default_field(p, k, json!(v));
        }
        if let Some(get) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
            default_field(get, "path", json!("/"));
            default_field(get, "scheme", json!("HTTP"));
        }
    }
    for env in c.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(r) = env.pointer_mut("/valueFrom/fieldRef").and_then(Value::as_object_mut) {
            default_field(r, "apiVersion", json!("v1"));
        }
    }
    if let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut)
        && let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned()
    {
        let requests = resources.entry("requests").or_insert_with(|| json!({}));
        if let Some(requests) = requests.as_object_mut() {
            for (name, quantity) in limits {
                requests.entry(name).or_insert(quantity);
            }
        } else {
            *requests = Value::Object(limits);
        }
    }
}

/// Sets `key` to `default` when it is absent, null or an empty string.
fn default_field(obj: &mut serde_json::Map<String, Value>, key: &str, default: Value) {
    if obj.get(key).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
        obj.insert(key.to_string(), default);
    }
}

/// `SetDefaults_Container`'s pull policy: `Always` for a `latest` or untagged image (without a
/// digest), else `IfNotPresent`.
fn default_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    let latest = !image.contains('@') && name.split_once(':').is_none_or(|(_, tag)| tag == "latest");
    if latest { "Always" } else { "IfNotPresent" }
}

/// Removes, at any depth, the object fields Go cannot tell from absent.
fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.values_mut().for_each(strip_empty);
            o.retain(|_, v| !is_empty_value(v));
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

/// Sets `key` of the object `obj` to `value`, or removes it for `None`.
fn set_or_remove(obj: &mut Value, key: &str, value: Option<&Value>) {
    let Some(o) = obj.as_object_mut() else { return };
    match value {
        Some(v) => o.insert(key.to_string(), v.clone()),
        None => o.remove(key),
    };
}

/// The changed paths between two specs: `- <path>: <stored>` and `+ <path>: <new>` lines.
fn spec_diff(path: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<String>) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                spec_diff(&format!("{path}.{k}"), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                spec_diff(&format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            out.extend(a.map(|a| format!("- {path}: {}", go_json(a))));
            out.extend(b.map(|b| format!("+ {path}: {}", go_json(b))));
        }
    }
}

/// The spec part of `validatePodMetadataAndSpec`: `ValidatePodSpec`, then the checks only Pods
/// (not templates) get.
fn validate_pod_metadata_and_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = validate_pod_spec(spec, "spec");
    for key in ["containers", "initContainers"] {
        for (i, c) in list(spec, key).iter().enumerate() {
            if let Some(image) = str_at(c, "image")
                && image.trim() != image
            {
                errs.push(FieldError::invalid(
                    format!("spec.{key}[{i}].image"),
                    &json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    errs
}

/// `ValidatePodSpec` (the checks listed in the module documentation) of the pod spec at `path`
/// (`spec` for a Pod, `spec.template.spec` for a Job's template).
pub fn validate_pod_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let regular = list(spec, "containers");
    validate_containers(regular, &format!("{path}.containers"), &mut errs);
    validate_init_containers(list(spec, "initContainers"), regular, &format!("{path}.initContainers"), &mut errs);
    not_supported_if_set(spec, "restartPolicy", RESTART_POLICIES, path, &mut errs);
    not_supported_if_set(spec, "dnsPolicy", DNS_POLICIES, path, &mut errs);
    validate_scheduling_group(spec, path, &mut errs);
    errs
}

/// `validateSchedulingGroup` (Kubernetes 1.36, KEP-4671): a set `schedulingGroup` names its
/// PodGroup (its one option), with a valid PodGroup name (`ValidatePodGroupName`, a DNS-1123
/// subdomain).
fn validate_scheduling_group(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(group) = get(spec, "schedulingGroup") else { return };
    let field = format!("{path}.schedulingGroup.podGroupName");
    match get(group, "podGroupName") {
        None => errs.push(FieldError::invalid(field, &Value::Null, "must specify one of: `podGroupName`")),
        Some(Value::String(name)) if name.is_empty() => {
            errs.push(FieldError::invalid(field, &json!(""), "must not be empty"));
        }
        Some(Value::String(name)) => {
            for detail in dns1123_subdomain_errors(name) {
                errs.push(FieldError::invalid(field.clone(), &json!(name), detail));
            }
        }
        // kube-apiserver cannot even decode it.
        Some(other) => errs.push(FieldError::invalid(field, other, "must be a string")),
    }
}

/// `validateContainers`.
fn validate_containers(list: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    if list.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let mut names = HashSet::new();
    for (i, c) in list.iter().enumerate() {
        let c_path = format!("{path}[{i}]");
        validate_container_common(c, &c_path, errs);
        // Collisions with init containers are reported on the init container.
        let name = str_at(c, "name").unwrap_or_default();
        if !names.insert(name) {
            errs.push(FieldError::duplicate(format!("{c_path}.name"), &json!(name)));
        }
        validate_container_restart_policy(c, &c_path, errs);
    }
    check_host_port_conflicts(list, path, errs);
}

/// `validateInitContainers`.
fn validate_init_containers(list: &[Value], regular: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    let mut names: HashSet<&str> = regular.iter().map(|c| str_at(c, "name").unwrap_or_default()).collect();
    for (i, c) in list.iter().enumerate() {
        let c_path = format!("{path}[{i}]");
        validate_container_common(c, &c_path, errs);
        // `validateInitContainerRestartPolicy` with both restart-rule features on comes down to
        // the regular containers' check.
        validate_container_restart_policy(c, &c_path, errs);
        let name = str_at(c, "name").unwrap_or_default();
        if names.contains(name) {
            errs.push(FieldError::duplicate(format!("{c_path}.name"), &json!(name)));
        } else if !name.is_empty() {
            names.insert(name);
        }
        // Init containers run one by one, so each is checked alone; upstream passes a one-item
        // list with the list's path, so the path always says `[0]`.
        check_host_port_conflicts(std::slice::from_ref(c), path, errs);
        if str_at(c, "restartPolicy") != Some("Always") {
            for field in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if get(c, field).is_some() {
                    errs.push(FieldError::forbidden(format!("{c_path}.{field}"), INIT_ONLY_WITH_RESTART_ALWAYS));
                }
            }
        }
    }
}

/// `validateContainerCommon`: name, image, termination message policy, ports, pull policy.
fn validate_container_common(c: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let name_path = format!("{path}.name");
    match str_at(c, "name").unwrap_or_default() {
        "" => errs.push(FieldError::required(name_path, "")),
        name => {
            for msg in dns1123_label_errors(name) {
                errs.push(FieldError::invalid(&name_path, &json!(name), msg));
            }
        }
    }
    if get(c, "image").is_none_or(|i| i.as_str() == Some("")) {
        errs.push(FieldError::required(format!("{path}.image"), ""));
    }
    not_supported_if_set(c, "terminationMessagePolicy", TERMINATION_MESSAGE_POLICIES, path, errs);
    validate_container_ports(
        get(c, "ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default(),
        path,
        errs,
    );
    not_supported_if_set(c, "imagePullPolicy", PULL_POLICIES, path, errs);
}

/// `validateContainerPorts`.
fn validate_container_ports(ports: &[Value], container_path: &str, errs: &mut Vec<FieldError>) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("{container_path}.ports[{i}]");
        if let Some(name) = str_at(port, "name").filter(|n| !n.is_empty()) {
            let msgs = port_name_errors(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(format!("{path}.name"), &json!(name), msg));
                }
            } else if !names.insert(name) {
                errs.push(FieldError::duplicate(format!("{path}.name"), &json!(name)));
            }
        }
        match get(port, "containerPort") {
            None => errs.push(FieldError::required(format!("{path}.containerPort"), "")),
            Some(v) if v.as_i64() == Some(0) => errs.push(FieldError::required(format!("{path}.containerPort"), "")),
            Some(v) if !is_port_number(v) => {
                errs.push(FieldError::invalid(format!("{path}.containerPort"), v, PORT_RANGE_ERR))
            }
            Some(_) => {}
        }
        if let Some(v) = get(port, "hostPort").filter(|v| v.as_i64() != Some(0))
            && !is_port_number(v)
        {
            errs.push(FieldError::invalid(format!("{path}.hostPort"), v, PORT_RANGE_ERR));
        }
        not_supported_if_set(port, "protocol", PORT_PROTOCOLS, &path, errs);
    }
}

fn is_port_number(v: &Value) -> bool {
    v.as_i64().is_some_and(|n| (1..=65535).contains(&n))
}

/// `checkHostPortConflicts` / `AccumulateUniqueHostPorts`: a `protocol/hostIP/hostPort` used twice.
fn check_host_port_conflicts(list: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    let mut seen = HashSet::new();
    for (ci, c) in list.iter().enumerate() {
        let ports = get(c, "ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (pi, port) in ports.iter().enumerate() {
            let host_port = get(port, "hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            // The protocol as defaulted (TCP).
            let protocol = str_at(port, "protocol").filter(|p| !p.is_empty()).unwrap_or("TCP");
            let host_ip = str_at(port, "hostIP").unwrap_or_default();
            let key = format!("{protocol}/{host_ip}/{host_port}");
            if seen.contains(&key) {
                errs.push(FieldError::duplicate(format!("{path}[{ci}].ports[{pi}].hostPort"), &json!(key)));
            } else {
                seen.insert(key);
            }
        }
    }
}

/// `validateContainerRestartPolicy`: the container-level `restartPolicy` and `restartPolicyRules`.
fn validate_container_restart_policy(c: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let rules = get(c, "restartPolicyRules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let policy_path = format!("{path}.restartPolicy");
    match get(c, "restartPolicy") {
        None if rules.is_empty() => return,
        None => errs.push(FieldError::required(policy_path, "must specify restartPolicy when restart rules are used")),
        Some(p) if !p.as_str().is_some_and(|p| CONTAINER_RESTART_POLICIES.contains(&p)) => {
            errs.push(FieldError::not_supported(policy_path, p, CONTAINER_RESTART_POLICIES))
        }
        Some(_) => {}
    }
    let rules_path = format!("{path}.restartPolicyRules");
    if rules.len() > MAX_RESTART_RULES {
        errs.push(FieldError::too_many(&rules_path, rules.len(), MAX_RESTART_RULES));
    }
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{rules_path}[{i}]");
        let action = get(rule, "action").cloned().unwrap_or(json!(""));
        if !action.as_str().is_some_and(|a| RESTART_RULE_ACTIONS.contains(&a)) {
            errs.push(FieldError::not_supported(format!("{rule_path}.action"), &action, RESTART_RULE_ACTIONS));
        }
        let Some(exit_codes) = get(rule, "exitCodes") else {
            errs.push(FieldError::required(format!("{rule_path}.exitCodes"), "must be specified"));
            continue;
        };
        let operator = get(exit_codes, "operator").cloned().unwrap_or(json!(""));
        if !operator.as_str().is_some_and(|o| RESTART_RULE_OPERATORS.contains(&o)) {
            errs.push(FieldError::not_supported(
                format!("{rule_path}.exitCodes.operator"),
                &operator,
                RESTART_RULE_OPERATORS,
            ));
        }
        let values = get(exit_codes, "values").and_then(Value::as_array).map_or(0, Vec::len);
        if values > MAX_RESTART_RULE_EXIT_CODES {
            errs.push(FieldError::too_many(
                format!("{rule_path}.exitCodes.values"),
                values,
                MAX_RESTART_RULE_EXIT_CODES,
            ));
        }
    }
}

/// `field.NotSupported` for an enum field set to something else than `supported`; an absent or
/// empty field is left alone (upstream defaults it before validating).
fn not_supported_if_set(obj: &Value, key: &str, supported: &[&str], path: &str, errs: &mut Vec<FieldError>) {
    let Some(v) = get(obj, key) else { return };
    if v.as_str().is_some_and(|s| s.is_empty() || supported.contains(&s)) {
        return;
    }
    errs.push(FieldError::not_supported(format!("{path}.{key}"), v, supported));
}

/// `validation.IsDNS1123Label`.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(value) {
        if value.split('.').all(matches_dns1123_label) {
            // A valid subdomain: it is the dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `validation.IsValidPortName` (an IANA service name).
fn port_name_errors(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !port.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// The list under `key`; empty when absent or not a list.
fn list<'a>(spec: &'a Value, key: &str) -> &'a [Value] {
    get(spec, key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// A field of an object; `None` when absent or null.
fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| !v.is_null())
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn ok_spec() -> Value {
        json!({"containers": [{"name": "c", "image": "busybox"}]})
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    /// `n` restart rules restarting on exit code 42.
    fn rules(n: usize) -> Value {
        json!(vec![json!({"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}); n])
    }

    #[test]
    fn a_scheduling_group_names_a_valid_pod_group_as_kube_apiserver_requires() {
        const SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        let field = "spec.schedulingGroup.podGroupName";
        // (case, schedulingGroup, errors)
        let cases: [(&str, Value, Vec<String>); 8] = [
            ("absent", Value::Null, vec![]),
            ("a valid name", json!({"podGroupName": "train-all-0"}), vec![]),
            ("a dotted name", json!({"podGroupName": "a.b-c"}), vec![]),
            (
                "no podGroupName",
                json!({}),
                vec![format!("{field}: Invalid value: null: must specify one of: `podGroupName`")],
            ),
            (
                "a null podGroupName",
                json!({"podGroupName": null}),
                vec![format!("{field}: Invalid value: null: must specify one of: `podGroupName`")],
            ),
            ("empty", json!({"podGroupName": ""}), vec![format!(r#"{field}: Invalid value: "": must not be empty"#)]),
            (
                "upper case",
                json!({"podGroupName": "Train_0"}),
                vec![format!(r#"{field}: Invalid value: "Train_0": {SUBDOMAIN_ERR}"#)],
            ),
            ("not a string", json!({"podGroupName": 7}), vec![format!("{field}: Invalid value: 7: must be a string")]),
        ];
        for (case, group, want) in cases {
            let mut spec = ok_spec();
            if !group.is_null() {
                spec["schedulingGroup"] = group;
            }
            assert_eq!(rendered(&validate_pod(&pod(spec.clone()), None)), want, "{case}");
            // A Job's template is checked at its own path.
            let in_template: Vec<String> = want.iter().map(|w| format!("spec.template.{w}")).collect();
            assert_eq!(rendered(&validate_pod_spec(&spec, "spec.template.spec")), in_template, "{case} in a template");
        }
        let long = "a".repeat(254);
        let errs = rendered(&validate_pod(
            &pod(json!({"containers": [{"name": "c", "image": "x"}], "schedulingGroup": {"podGroupName": long}})),
            None,
        ));
        assert_eq!(errs, [format!(r#"{field}: Invalid value: "{long}": must be no more than 253 characters"#)]);
    }

    #[test]
    fn pod_create_validation() {
        let long = "a".repeat(64);
        let cases: Vec<(&str, Value, Vec<String>)> = vec![
            ("a pod with one named container and an image is valid", ok_spec(), vec![]),
            ("no containers is required", json!({}), vec!["spec.containers: Required value".into()]),
            ("an empty container list is required", json!({"containers": []}), vec!["spec.containers: Required value".into()]),
            (
                "a missing or empty image is required",
                json!({"containers": [{"name": "a"}, {"name": "b", "image": ""}]}),
                vec!["spec.containers[0].image: Required value".into(), "spec.containers[1].image: Required value".into()],
            ),
            (
                "an image with blanks around it is invalid on a pod",
                json!({"containers": [{"name": "a", "image": " busybox"}]}),
                vec![r#"spec.containers[0].image: Invalid value: " busybox": must not have leading or trailing whitespace"#.into()],
            ),
            (
                "a container name that is not a DNS-1123 label is invalid",
                json!({"containers": [{"name": "Bad_Name", "image": "busybox"}]}),
                vec![format!(r#"spec.containers[0].name: Invalid value: "Bad_Name": {LABEL_ERR}"#)],
            ),
            (
                "a container name with dots says so",
                json!({"containers": [{"name": "a.b", "image": "busybox"}]}),
                vec![r#"spec.containers[0].name: Invalid value: "a.b": must not contain dots"#.into()],
            ),
            (
                "a container name over 63 characters is too long",
                json!({"containers": [{"name": long, "image": "busybox"}]}),
                vec![format!(r#"spec.containers[0].name: Invalid value: "{long}": must be no more than 63 characters"#)],
            ),
            (
                "a missing container name is required",
                json!({"containers": [{"image": "busybox"}]}),
                vec!["spec.containers[0].name: Required value".into()],
            ),
            (
                "duplicate container names are reported on the later one",
                json!({"containers": [{"name": "c", "image": "busybox"}, {"name": "c", "image": "busybox"}]}),
                vec![r#"spec.containers[1].name: Duplicate value: "c""#.into()],
            ),
            (
                "an init container named like a container is a duplicate",
                json!({"containers": [{"name": "c", "image": "busybox"}], "initContainers": [{"name": "c", "image": "busybox"}]}),
                vec![r#"spec.initContainers[0].name: Duplicate value: "c""#.into()],
            ),
            (
                "an unknown pod restartPolicy is not supported",
                json!({"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Sometimes"}),
                vec![r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#.into()],
            ),
            (
                "an empty pod restartPolicy defaults to Always",
                json!({"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": ""}),
                vec![],
            ),
            (
                "an unknown dnsPolicy is not supported",
                json!({"containers": [{"name": "c", "image": "busybox"}], "dnsPolicy": "Fast"}),
                vec![r#"spec.dnsPolicy: Unsupported value: "Fast": supported values: "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None""#.into()],
            ),
            (
                "unknown termination message and pull policies are not supported",
                json!({"containers": [{"name": "c", "image": "busybox", "terminationMessagePolicy": "Log", "imagePullPolicy": "Sometimes"}]}),
                vec![
                    r#"spec.containers[0].terminationMessagePolicy: Unsupported value: "Log": supported values: "File", "FallbackToLogsOnError""#.into(),
                    r#"spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#.into(),
                ],
            ),
            (
                "ephemeral containers cannot be set on create",
                json!({"containers": [{"name": "c", "image": "busybox"}], "ephemeralContainers": [{"name": "e", "image": "busybox"}]}),
                vec!["spec.ephemeralContainers: Forbidden: cannot be set on create".into()],
            ),
            (
                "a node name with scheduling gates left is forbidden",
                json!({"containers": [{"name": "c", "image": "busybox"}], "nodeName": "n1", "schedulingGates": [{"name": "g"}]}),
                vec!["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared".into()],
            ),
            (
                "errors come in upstream's order: containers, init containers, then the pod's policies",
                json!({"restartPolicy": "x", "initContainers": [{"name": "i"}], "containers": [{"name": "C"}]}),
                vec![
                    format!(r#"spec.containers[0].name: Invalid value: "C": {LABEL_ERR}"#),
                    "spec.containers[0].image: Required value".into(),
                    "spec.initContainers[0].image: Required value".into(),
                    r#"spec.restartPolicy: Unsupported value: "x": supported values: "Always", "OnFailure", "Never""#.into(),
                ],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(rendered(&validate_pod(&pod(spec), None)), want, "{name}");
        }
    }

    #[test]
    fn port_validation() {
        let with_ports = |ports: Value| json!({"containers": [{"name": "c", "image": "busybox", "ports": ports}]});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "a port with a number and a named protocol is valid",
                with_ports(json!([{"containerPort": 80, "protocol": "UDP", "name": "dns"}])),
                vec![],
            ),
            (
                "a missing containerPort is required",
                with_ports(json!([{"name": "http"}])),
                vec!["spec.containers[0].ports[0].containerPort: Required value"],
            ),
            (
                "port numbers out of range are invalid",
                with_ports(json!([{"containerPort": 70000, "hostPort": -1}])),
                vec![
                    "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                    "spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                ],
            ),
            (
                "an unknown protocol is not supported",
                with_ports(json!([{"containerPort": 80, "protocol": "HTTP"}])),
                vec![
                    r#"spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP""#,
                ],
            ),
            (
                "duplicate port names in a container are reported",
                with_ports(json!([{"containerPort": 80, "name": "http"}, {"containerPort": 81, "name": "http"}])),
                vec![r#"spec.containers[0].ports[1].name: Duplicate value: "http""#],
            ),
            (
                "a port name that is not an IANA service name is invalid",
                with_ports(json!([{"containerPort": 80, "name": "-HTTP--"}])),
                vec![
                    r#"spec.containers[0].ports[0].name: Invalid value: "-HTTP--": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"#,
                    r#"spec.containers[0].ports[0].name: Invalid value: "-HTTP--": must contain at least one letter (a-z)"#,
                    r#"spec.containers[0].ports[0].name: Invalid value: "-HTTP--": must not contain consecutive hyphens"#,
                    r#"spec.containers[0].ports[0].name: Invalid value: "-HTTP--": must not begin or end with a hyphen"#,
                ],
            ),
            (
                "the same host port twice across containers conflicts",
                json!({"containers": [
                    {"name": "a", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "image": "busybox", "ports": [{"containerPort": 81, "hostPort": 8080, "protocol": "TCP"}]},
                ]}),
                vec![r#"spec.containers[1].ports[0].hostPort: Duplicate value: "TCP//8080""#],
            ),
            (
                "the same host port on another protocol or address does not conflict",
                json!({"containers": [{"name": "a", "image": "busybox", "ports": [
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 80, "hostPort": 8080, "protocol": "UDP"},
                    {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"},
                ]}]}),
                vec![],
            ),
            (
                "init containers are checked one by one, reported at index 0 as upstream does",
                json!({"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "initContainers": [
                    {"name": "i", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "j", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 9090}, {"containerPort": 81, "hostPort": 9090}]},
                ]}),
                vec![r#"spec.initContainers[0].ports[1].hostPort: Duplicate value: "TCP//9090""#],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(rendered(&validate_pod(&pod(spec), None)), want, "{name}");
        }
    }

    #[test]
    fn container_restart_policy_and_rules() {
        let container = |extra: Value| {
            let mut c = json!({"name": "c", "image": "busybox"});
            json_merge(&mut c, extra);
            json!({"containers": [c]})
        };
        let many_codes: Vec<i64> = (1..=256).collect();
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "a container restartPolicy with rules is valid",
                container(json!({"restartPolicy": "Never", "restartPolicyRules": rules(1)})),
                vec![],
            ),
            (
                "a RestartAllContainers action is allowed",
                container(
                    json!({"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]}),
                ),
                vec![],
            ),
            (
                "rules without a container restartPolicy require one",
                container(json!({"restartPolicyRules": rules(1)})),
                vec![
                    "spec.containers[0].restartPolicy: Required value: must specify restartPolicy when restart rules are used",
                ],
            ),
            (
                "an unknown container restartPolicy is not supported",
                container(json!({"restartPolicy": "Sometimes"})),
                vec![
                    r#"spec.containers[0].restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure""#,
                ],
            ),
            (
                "more than 20 rules are too many",
                container(json!({"restartPolicy": "Never", "restartPolicyRules": rules(21)})),
                vec!["spec.containers[0].restartPolicyRules: Too many: 21: must have at most 20 items"],
            ),
            (
                "a rule without exitCodes requires them",
                container(json!({"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart"}]})),
                vec!["spec.containers[0].restartPolicyRules[0].exitCodes: Required value: must be specified"],
            ),
            (
                "more than 255 exit codes are too many",
                container(
                    json!({"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": many_codes}}]}),
                ),
                vec![
                    "spec.containers[0].restartPolicyRules[0].exitCodes.values: Too many: 256: must have at most 255 items",
                ],
            ),
            (
                "unknown actions and operators are not supported",
                container(
                    json!({"restartPolicy": "Never", "restartPolicyRules": [{"action": "Stop", "exitCodes": {"operator": "Equals", "values": [1]}}]}),
                ),
                vec![
                    r#"spec.containers[0].restartPolicyRules[0].action: Unsupported value: "Stop": supported values: "Restart", "RestartAllContainers""#,
                    r#"spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Equals": supported values: "In", "NotIn""#,
                ],
            ),
            (
                "a missing action and operator are not supported",
                container(json!({"restartPolicy": "Never", "restartPolicyRules": [{"exitCodes": {}}]})),
                vec![
                    r#"spec.containers[0].restartPolicyRules[0].action: Unsupported value: "": supported values: "Restart", "RestartAllContainers""#,
                    r#"spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "": supported values: "In", "NotIn""#,
                ],
            ),
            (
                "init containers get the same rule checks",
                json!({"containers": [{"name": "c", "image": "busybox"}], "initContainers": [{"name": "i", "image": "busybox", "restartPolicyRules": rules(1)}]}),
                vec![
                    "spec.initContainers[0].restartPolicy: Required value: must specify restartPolicy when restart rules are used",
                ],
            ),
            (
                "a sidecar may have probes and rules",
                json!({"containers": [{"name": "c", "image": "busybox"}], "initContainers": [{"name": "i", "image": "busybox", "restartPolicy": "Always",
                    "restartPolicyRules": rules(1), "readinessProbe": {"exec": {"command": ["true"]}}}]}),
                vec![],
            ),
            (
                "an init container that is not a sidecar may not have probes or lifecycle hooks",
                json!({"containers": [{"name": "c", "image": "busybox"}], "initContainers": [{"name": "i", "image": "busybox",
                    "lifecycle": {}, "startupProbe": {"exec": {"command": ["true"]}}}]}),
                vec![
                    "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always",
                    "spec.initContainers[0].startupProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
                ],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(rendered(&validate_pod(&pod(spec), None)), want, "{name}");
        }
    }

    fn json_merge(target: &mut Value, extra: Value) {
        if let (Some(t), Value::Object(e)) = (target.as_object_mut(), extra) {
            t.extend(e);
        }
    }

    #[test]
    fn a_template_spec_is_reported_under_its_path() {
        let spec = json!({"containers": [{"name": "c", "image": ""}]});
        assert_eq!(
            rendered(&validate_pod_spec(&spec, "spec.template.spec")),
            vec!["spec.template.spec.containers[0].image: Required value"]
        );
    }

    #[test]
    fn updates_only_report_new_problems_of_a_changed_spec() {
        let bad = pod(json!({"containers": [{"name": "c", "image": ""}]}));
        let mut relabelled = bad.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        relabelled["status"] = json!({"phase": "Running"});
        assert_eq!(validate_pod(&relabelled, Some(&bad)), vec![], "a stored invalid pod stays updatable");

        let mut still_bad = bad.clone();
        still_bad["spec"]["activeDeadlineSeconds"] = json!(60);
        assert_eq!(validate_pod(&still_bad, Some(&bad)), vec![], "an old problem is not reported again");

        let good = pod(ok_spec());
        let mut broken = good.clone();
        broken["spec"]["containers"][0]["image"] = json!("");
        assert_eq!(rendered(&validate_pod(&broken, Some(&good))), vec!["spec.containers[0].image: Required value"]);
    }

    /// `ValidatePodUpdate`'s message for a spec change it does not allow, without the diff.
    const IMMUTABLE: &str = "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n";

    /// The rendered errors of updating a pod of spec `old` to one of spec `new`, each
    /// immutability refusal cut to its first line (its diff is checked on its own).
    fn update(old: Value, new: Value) -> Vec<String> {
        let errs = validate_pod(&pod(new), Some(&pod(old)));
        rendered(&errs).into_iter().map(|e| if e.starts_with(IMMUTABLE) { IMMUTABLE.to_string() } else { e }).collect()
    }

    /// `ok_spec` with `extra` merged in.
    fn spec_with(extra: Value) -> Value {
        let mut spec = ok_spec();
        json_merge(&mut spec, extra);
        spec
    }

    #[test]
    fn a_pod_update_may_change_only_what_kube_apiserver_lets_change() {
        let toleration = json!({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60});
        let other = json!({"key": "other", "operator": "Equal", "value": "v", "effect": "NoSchedule"});
        let gate = |name: &str| json!({"name": name});
        let group = |name: &str| json!({"schedulingGroup": {"podGroupName": name}});
        let term = |exprs: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}}});
        let zone = json!({"key": "zone", "operator": "In", "values": ["a"]});
        let disk = json!({"key": "disk", "operator": "In", "values": ["ssd"]});
        let lost_requirement = format!(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: Invalid value: {}: only additions are allowed (no mutations or deletions)",
            go_json(&json!({"matchExpressions": [disk]}))
        );
        let gated = |extra: Value| {
            let mut s = spec_with(json!({"schedulingGates": [gate("wait")]}));
            json_merge(&mut s, extra);
            s
        };
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            ("a metadata-only update is accepted", ok_spec(), ok_spec(), vec![]),
            (
                "an image change is accepted",
                ok_spec(),
                json!({"containers": [{"name": "c", "image": "busybox:1.37"}]}),
                vec![],
            ),
            (
                "an init container's image change is accepted",
                spec_with(json!({"initContainers": [{"name": "i", "image": "a"}]})),
                spec_with(json!({"initContainers": [{"name": "i", "image": "b"}]})),
                vec![],
            ),
            (
                "a schedulingGroup change is refused",
                spec_with(group("gang-a")),
                spec_with(group("gang-b")),
                vec![IMMUTABLE],
            ),
            ("a schedulingGroup set later is refused", ok_spec(), spec_with(group("gang-a")), vec![IMMUTABLE]),
            (
                "a nodeName set by an update is refused (binding sets it)",
                ok_spec(),
                spec_with(json!({"nodeName": "n1"})),
                vec![IMMUTABLE],
            ),
            (
                "a container's command change is refused",
                ok_spec(),
                json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh"]}]}),
                vec![IMMUTABLE],
            ),
            (
                "adding a container is refused",
                ok_spec(),
                json!({"containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "busybox"}]}),
                vec!["spec.containers: Forbidden: pod updates may not add or remove containers"],
            ),
            (
                "kube's defaults sent for fields stored without them change nothing",
                ok_spec(),
                json!({"containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Always",
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "resources": {}}],
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
                    "schedulerName": "default-scheduler", "enableServiceLinks": true, "securityContext": {},
                    "tolerations": [], "nodeName": "", "hostNetwork": false}),
                vec![],
            ),
            (
                "kube's defaults of what containers and volumes hold change nothing",
                json!({"containers": [{"name": "c", "image": "busybox:1.36", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 80}], "readinessProbe": {"httpGet": {"port": 80}},
                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
                    "volumes": [{"name": "s", "secret": {"secretName": "s"}}], "hostNetwork": true}),
                json!({"containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}},
                    "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                        "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v1"}}}]}],
                    "volumes": [{"name": "s", "secret": {"secretName": "s", "defaultMode": 420}}], "hostNetwork": true,
                    "serviceAccountName": "default", "serviceAccount": "default"}),
                vec![],
            ),
            (
                "another service account is refused",
                ok_spec(),
                spec_with(json!({"serviceAccountName": "builder"})),
                vec![IMMUTABLE],
            ),
            (
                "an image changed to latest keeps the stored pull policy",
                json!({"containers": [{"name": "c", "image": "busybox:1.36"}]}),
                json!({"containers": [{"name": "c", "image": "busybox"}]}),
                vec![],
            ),
            (
                "a default changed to another value is refused",
                ok_spec(),
                spec_with(json!({"terminationGracePeriodSeconds": 5})),
                vec![IMMUTABLE],
            ),
            (
                "a negative grace period may become 1",
                spec_with(json!({"terminationGracePeriodSeconds": -1})),
                spec_with(json!({"terminationGracePeriodSeconds": 1})),
                vec![],
            ),
            ("adding a toleration is accepted", ok_spec(), spec_with(json!({"tolerations": [toleration]})), vec![]),
            (
                "an existing toleration's tolerationSeconds may change",
                spec_with(json!({"tolerations": [toleration]})),
                spec_with(
                    json!({"tolerations": [other, {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}),
                ),
                vec![],
            ),
            (
                "removing a toleration is refused",
                spec_with(json!({"tolerations": [toleration, other]})),
                spec_with(json!({"tolerations": [other]})),
                vec![
                    "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds",
                ],
            ),
            (
                "an added toleration is validated",
                ok_spec(),
                spec_with(
                    json!({"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}, {"operator": "Equal"}]}),
                ),
                vec![
                    r#"spec.tolerations[0].effect: Invalid value: "NoSchedule": effect must be 'NoExecute' when `tolerationSeconds` is set"#,
                    r#"spec.tolerations[1].operator: Invalid value: "Equal": operator must be Exists when `key` is empty, which means "match all values and all keys""#,
                ],
            ),
            (
                "removing a scheduling gate is accepted",
                spec_with(json!({"schedulingGates": [gate("a"), gate("b")]})),
                spec_with(json!({"schedulingGates": [gate("b")]})),
                vec![],
            ),
            (
                "adding a scheduling gate is refused",
                spec_with(json!({"schedulingGates": [gate("a")]})),
                spec_with(json!({"schedulingGates": [gate("a"), gate("b")]})),
                vec![
                    "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'b'",
                ],
            ),
            (
                "activeDeadlineSeconds set when unset is accepted",
                ok_spec(),
                spec_with(json!({"activeDeadlineSeconds": 60})),
                vec![],
            ),
            (
                "activeDeadlineSeconds lowered is accepted",
                spec_with(json!({"activeDeadlineSeconds": 60})),
                spec_with(json!({"activeDeadlineSeconds": 30})),
                vec![],
            ),
            (
                "activeDeadlineSeconds raised is refused",
                spec_with(json!({"activeDeadlineSeconds": 30})),
                spec_with(json!({"activeDeadlineSeconds": 60})),
                vec!["spec.activeDeadlineSeconds: Invalid value: 60: must be less than or equal to previous value"],
            ),
            (
                "activeDeadlineSeconds removed is refused",
                spec_with(json!({"activeDeadlineSeconds": 30})),
                ok_spec(),
                vec![
                    "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value",
                ],
            ),
            (
                "a negative activeDeadlineSeconds is refused",
                ok_spec(),
                spec_with(json!({"activeDeadlineSeconds": -1})),
                vec!["spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, inclusive"],
            ),
            (
                "a gated pod may gain node selector labels",
                gated(json!({"nodeSelector": {"zone": "a"}})),
                gated(json!({"nodeSelector": {"zone": "a", "disk": "ssd"}})),
                vec![],
            ),
            (
                "a gated pod may not change a node selector label",
                gated(json!({"nodeSelector": {"zone": "a"}})),
                gated(json!({"nodeSelector": {"zone": "b"}})),
                vec![
                    r#"spec.nodeSelector: Invalid value: {"zone":"b"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"#,
                ],
            ),
            (
                "an ungated pod may not gain node selector labels",
                spec_with(json!({"nodeSelector": {"zone": "a"}})),
                spec_with(json!({"nodeSelector": {"zone": "a", "disk": "ssd"}})),
                vec![IMMUTABLE],
            ),
            ("a gated pod may gain a node affinity", gated(json!({})), gated(term(json!([zone]))), vec![]),
            (
                "a gated pod's required node term may gain requirements",
                gated(term(json!([zone]))),
                gated(term(json!([zone, disk]))),
                vec![],
            ),
            (
                "a gated pod's required node term may not lose requirements",
                gated(term(json!([zone, disk]))),
                gated(term(json!([disk]))),
                vec![&lost_requirement],
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(update(old, new), want, "{name}");
        }
    }

    #[test]
    fn a_refused_spec_change_names_the_changed_paths_after_kube_apiserver_s_message() {
        let old = spec_with(json!({"schedulingGroup": {"podGroupName": "gang-a"}}));
        let new =
            json!({"containers": [{"name": "c", "image": "busybox:2"}], "schedulingGroup": {"podGroupName": "gang-b"}});
        let errs = validate_pod(&pod(new), Some(&pod(old)));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!((errs[0].field.as_str(), errs[0].reason()), ("spec", "FieldValueForbidden"));
        // The allowed image change is not part of the diff.
        assert_eq!(
            errs[0].to_string(),
            format!(
                "{IMMUTABLE}- spec.schedulingGroup.podGroupName: \"gang-a\"\n+ spec.schedulingGroup.podGroupName: \"gang-b\""
            )
        );
    }
}
