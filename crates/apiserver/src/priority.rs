//! `scheduling.k8s.io/v1` PriorityClass and kube-apiserver's Priority admission plugin
//! (`plugin/pkg/admission/priority`):
//!
//! - [`PriorityClassAdmission`] defaults a class's `preemptionPolicy`
//!   (`SetDefaults_PriorityClass`), validates it as `pkg/apis/scheduling/validation`
//!   (`ValidatePriorityClass`, `ValidatePriorityClassUpdate`) and refuses a second
//!   `globalDefault` class (the plugin's `validatePriorityClass`, 403);
//! - [`PodPriority`] resolves a new pod's `priorityClassName` (or the global default class) to
//!   `spec.priority` and `spec.preemptionPolicy`, refusing an unknown class and a priority or
//!   policy the class does not give (403), and keeps the stored ones on update;
//! - [`system_priority_classes`] are the two classes kube-apiserver creates at start.
//!
//! The plugin's decisions are the pure functions [`admit_pod`] and [`admit_priority_class`];
//! they read the classes through [`Lookup`], within the request's transaction.

use serde_json::{Value, json};

use crate::admission::{AdmissionHook, Lookup};
use crate::error::Cause;

/// The API group of PriorityClasses.
pub const GROUP: &str = "scheduling.k8s.io";
/// The resource name of PriorityClasses.
pub const PLURAL: &str = "priorityclasses";
/// The highest value a class not named `system-...` may have (`HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// `system-cluster-critical`'s value (`SystemCriticalPriority`).
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// Names with this prefix are reserved for the system classes.
pub const SYSTEM_PRIORITY_CLASS_PREFIX: &str = "system-";
/// The priority of a pod without a class when no class is the global default
/// (`DefaultPriorityWhenNoDefaultClassExists`).
pub const DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS: i64 = 0;
/// The default `preemptionPolicy` of classes, and of pods when no class is the global default.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";
/// The `preemptionPolicy` of a class whose pods never preempt others.
pub const PREEMPT_NEVER: &str = "Never";

/// kube-apiserver's system classes (`SystemPriorityClasses`): name, value, description.
const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        SYSTEM_CRITICAL_PRIORITY + 1000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        SYSTEM_CRITICAL_PRIORITY,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The system classes as kube-apiserver's start-up hook creates them when absent (before
/// defaulting: `preemptionPolicy` comes from [`default_priority_class`]).
pub fn system_priority_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                   "value": value, "description": description})
        })
        .collect()
}

/// Why deleting object `name` of `def` is refused: a system class, as kube-apiserver's
/// PriorityClass storage says it.
pub fn refuse_delete_of(def: &crate::resources::ResourceDef, name: &str) -> Option<&'static str> {
    (def.group == GROUP && def.plural == PLURAL).then(|| refuse_delete(name)).flatten()
}

fn refuse_delete(name: &str) -> Option<&'static str> {
    SYSTEM_CLASSES.iter().any(|(n, _, _)| *n == name).then_some("this is a system priority class and cannot be deleted")
}

/// A class's `value` (0 when unset, as Go decodes it).
fn value_of(pc: &Value) -> i64 {
    pc.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn global_default(pc: &Value) -> bool {
    pc.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

/// `SetDefaults_PriorityClass`: an unset `preemptionPolicy` is `PreemptLowerPriority`.
pub fn default_priority_class(pc: &mut Value) {
    if let Some(o) = pc.as_object_mut()
        && o.get("preemptionPolicy").is_none_or(Value::is_null)
    {
        o.insert("preemptionPolicy".into(), json!(PREEMPT_LOWER_PRIORITY));
    }
}

/// `IsKnownSystemPriorityClass`: whether a `system-` class is one of kube-apiserver's, as it is.
fn known_system_class(name: &str, value: i64, global_default: bool) -> Result<(), String> {
    let Some((n, v, _)) = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name) else {
        return Err(format!("{name} is not a known system priority class"));
    };
    if *v != value {
        return Err(format!("value of {n} PriorityClass must be {v}"));
    }
    if global_default {
        return Err(format!("globalDefault of {n} PriorityClass must be false"));
    }
    Ok(())
}

/// The fields' types, which kube-apiserver's decoder checks (answered as causes naming them).
fn type_causes(pc: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    match pc.get("value") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => {}
        Some(v) => causes.push(Cause::invalid_rendered("value", &v.to_string(), "must be a 32-bit integer")),
    }
    for (key, ok, what) in [
        ("globalDefault", Value::is_boolean as fn(&Value) -> bool, "must be a boolean"),
        ("description", Value::is_string, "must be a string"),
        ("preemptionPolicy", Value::is_string, "must be a string"),
    ] {
        if let Some(v) = pc.get(key).filter(|v| !v.is_null() && !ok(v)) {
            causes.push(Cause::invalid_rendered(key, &v.to_string(), what));
        }
    }
    causes
}

/// `ValidatePriorityClass` (create) and `ValidatePriorityClassUpdate` (update: `value` and
/// `preemptionPolicy` are immutable); metadata is checked by the server for every kind.
pub fn validate_priority_class(pc: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = type_causes(pc);
    if !causes.is_empty() {
        return causes;
    }
    let policy = pc.get("preemptionPolicy").filter(|p| !p.is_null());
    if let Some(old) = old {
        if value_of(pc) != value_of(old) {
            causes.push(Cause::forbidden("value", "may not be changed in an update."));
        }
        let old_policy = old.get("preemptionPolicy").filter(|p| !p.is_null());
        if policy != old_policy {
            let rendered = policy.map_or("null".to_string(), Value::to_string);
            causes.push(Cause::invalid_rendered("preemptionPolicy", &rendered, "field is immutable"));
        }
        return causes;
    }
    let name = name_of(pc);
    if name.starts_with(SYSTEM_PRIORITY_CLASS_PREFIX) {
        if let Err(e) = known_system_class(name, value_of(pc), global_default(pc)) {
            causes.push(Cause::forbidden(
                "metadata.name",
                &format!(
                    "priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved for system use only. error: {e}"
                ),
            ));
        }
    } else if value_of(pc) > HIGHEST_USER_DEFINABLE_PRIORITY {
        causes.push(Cause::forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"),
        ));
    }
    // `ValidatePreemptionPolicy`.
    match policy.and_then(Value::as_str) {
        None | Some(PREEMPT_LOWER_PRIORITY | PREEMPT_NEVER) => {}
        Some("") => causes.push(Cause::required("preemptionPolicy")),
        Some(other) => {
            causes.push(Cause::not_supported("preemptionPolicy", other, &[PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER]))
        }
    }
    causes
}

/// `getDefaultPriorityClass`: of the classes marked `globalDefault`, the one of lowest value
/// (more than one can exist after a race); the first in name order among equals.
fn default_class(lookup: &dyn Lookup) -> Option<Value> {
    let mut found: Option<Value> = None;
    // Every pod create asks: only the classes whose bytes may mark them default are parsed.
    for pc in lookup.list_containing(GROUP, PLURAL, "", br#""globalDefault":true"#) {
        if global_default(&pc) && found.as_ref().is_none_or(|d| value_of(d) > value_of(&pc)) {
            found = Some(pc);
        }
    }
    found
}

/// The plugin's `admitPod` on create: the pod's class (its `priorityClassName`, else the global
/// default class) gives `spec.priority` (0 without a class) and `spec.preemptionPolicy`
/// (`PreemptLowerPriority` without a class); the default class's name is written to the pod.
/// `Err` is why the pod is refused (403): an unknown class, or a priority or policy the pod
/// sets that differs from the class's.
pub fn admit_pod(pod: &mut Value, lookup: &dyn Lookup) -> Result<(), String> {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    let named = spec.get("priorityClassName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string);
    let (priority, policy) = match &named {
        None => match default_class(lookup) {
            Some(dpc) => {
                spec.insert("priorityClassName".into(), json!(name_of(&dpc)));
                (value_of(&dpc), dpc.get("preemptionPolicy").and_then(Value::as_str).map(str::to_string))
            }
            None => (DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS, Some(PREEMPT_LOWER_PRIORITY.to_string())),
        },
        Some(name) => match lookup.get(GROUP, PLURAL, "", name) {
            Some(pc) => (value_of(&pc), pc.get("preemptionPolicy").and_then(Value::as_str).map(str::to_string)),
            None => return Err(format!("no PriorityClass with name {name} was found")),
        },
    };
    if let Some(asked) = spec.get("priority").filter(|p| !p.is_null())
        && asked.as_i64() != Some(priority)
    {
        return Err(format!(
            "the integer value of priority ({asked}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
        ));
    }
    spec.insert("priority".into(), json!(priority));
    if let Some(policy) = policy {
        if let Some(asked) = spec.get("preemptionPolicy").filter(|p| !p.is_null())
            && asked.as_str() != Some(policy.as_str())
        {
            let asked = asked.as_str().map_or_else(|| asked.to_string(), str::to_string);
            return Err(format!(
                "the string value of PreemptionPolicy ({asked}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}

/// The plugin's `admitPod` on update: a request that leaves out `spec.priority` or
/// `spec.preemptionPolicy` keeps the stored ones.
pub fn keep_pod_priority(pod: &mut Value, old: &Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for key in ["priority", "preemptionPolicy"] {
        if spec.get(key).is_none_or(Value::is_null)
            && let Some(stored) = old.pointer(&format!("/spec/{key}")).filter(|v| !v.is_null())
        {
            spec.insert(key.into(), stored.clone());
        }
    }
}

/// The plugin's `validatePriorityClass`: a class marked `globalDefault` is refused (403) while
/// another class is the default (on update: another than itself).
pub fn admit_priority_class(pc: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Result<(), String> {
    if !global_default(pc) {
        return Ok(());
    }
    match default_class(lookup) {
        Some(dpc) if old.is_none() || name_of(&dpc) != name_of(pc) => {
            Err(format!("PriorityClass {} is already marked as default. Only one default can exist", name_of(&dpc)))
        }
        _ => Ok(()),
    }
}

/// PriorityClass admission: defaulting, validation, and the Priority plugin's one-default rule.
pub struct PriorityClassAdmission;

impl AdmissionHook for PriorityClassAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        default_priority_class(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        validate_priority_class(obj, old)
    }
    fn validate_admission(&self, obj: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Result<(), String> {
        admit_priority_class(obj, old, lookup)
    }
}

/// The Priority plugin for pods: [`admit_pod`] on create, [`keep_pod_priority`] on update.
pub struct PodPriority;

impl AdmissionHook for PodPriority {
    // The stored priority stays when the spec does not change.
    fn sees_metadata_patches(&self) -> bool {
        false
    }
    fn default(&self, obj: &mut Value, old: Option<&Value>) {
        if let Some(old) = old {
            keep_pod_priority(obj, old);
        }
    }
    fn admit_create(&self, obj: &mut Value, lookup: &dyn Lookup) -> Result<(), String> {
        admit_pod(obj, lookup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    /// Stored PriorityClasses, as the store's lookup answers for them.
    struct Classes(Vec<Value>);

    impl Lookup for Classes {
        fn get(&self, group: &str, plural: &str, _ns: &str, name: &str) -> Option<Value> {
            assert_eq!((group, plural), (GROUP, PLURAL));
            self.0.iter().find(|c| name_of(c) == name).cloned()
        }
        fn list(&self, group: &str, plural: &str, _ns: &str, _selector: &LabelSelector) -> Vec<Value> {
            assert_eq!((group, plural), (GROUP, PLURAL));
            self.0.clone()
        }
    }

    fn class(name: &str, value: i64, global_default: bool, policy: &str) -> Value {
        json!({"metadata": {"name": name}, "value": value, "globalDefault": global_default, "preemptionPolicy": policy})
    }

    fn pod(spec: Value) -> Value {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn pods_get_their_class_s_priority_and_policy_or_are_refused_as_the_plugin_does() {
        let high = class("high", 1000, false, PREEMPT_NEVER);
        let low_default = class("low", -5, true, PREEMPT_LOWER_PRIORITY);
        let lower_default = class("lower", -10, true, PREEMPT_NEVER);
        // (what, classes, the pod's spec, the admitted (priorityClassName, priority, preemptionPolicy) or the refusal)
        type Want = Result<(Option<&'static str>, i64, &'static str), &'static str>;
        let cases: Vec<(&str, Vec<Value>, Value, Want)> = vec![
            ("no class and no default: 0", vec![high.clone()], json!({}), Ok((None, 0, PREEMPT_LOWER_PRIORITY))),
            (
                "a named class",
                vec![high.clone()],
                json!({"priorityClassName": "high"}),
                Ok((Some("high"), 1000, PREEMPT_NEVER)),
            ),
            (
                "no class: the default class, named on the pod",
                vec![high.clone(), low_default.clone()],
                json!({}),
                Ok((Some("low"), -5, PREEMPT_LOWER_PRIORITY)),
            ),
            (
                "two defaults: the lowest value",
                vec![low_default.clone(), lower_default.clone()],
                json!({}),
                Ok((Some("lower"), -10, PREEMPT_NEVER)),
            ),
            (
                "an empty name is no name",
                vec![low_default.clone()],
                json!({"priorityClassName": ""}),
                Ok((Some("low"), -5, PREEMPT_LOWER_PRIORITY)),
            ),
            (
                "the class's own priority may be set",
                vec![high.clone()],
                json!({"priorityClassName": "high", "priority": 1000}),
                Ok((Some("high"), 1000, PREEMPT_NEVER)),
            ),
            (
                "the computed policy may be set",
                vec![],
                json!({"preemptionPolicy": PREEMPT_LOWER_PRIORITY}),
                Ok((None, 0, PREEMPT_LOWER_PRIORITY)),
            ),
            (
                "an unknown class",
                vec![high.clone()],
                json!({"priorityClassName": "x"}),
                Err("no PriorityClass with name x was found"),
            ),
            (
                "another priority than the class's",
                vec![high.clone()],
                json!({"priorityClassName": "high", "priority": 7}),
                Err(
                    "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name",
                ),
            ),
            (
                "a priority without a class",
                vec![],
                json!({"priority": 10}),
                Err(
                    "the integer value of priority (10) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name",
                ),
            ),
            (
                "another policy than the class's",
                vec![high.clone()],
                json!({"priorityClassName": "high", "preemptionPolicy": PREEMPT_LOWER_PRIORITY}),
                Err(
                    "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name",
                ),
            ),
        ];
        for (what, classes, spec, want) in cases {
            let mut p = pod(spec);
            let got = admit_pod(&mut p, &Classes(classes)).map(|()| {
                let s = &p["spec"];
                (
                    s.get("priorityClassName").and_then(Value::as_str).map(str::to_string),
                    s["priority"].as_i64().unwrap(),
                    s["preemptionPolicy"].as_str().unwrap().to_string(),
                )
            });
            let want = want.map(|(n, p, pp)| (n.map(str::to_string), p, pp.to_string())).map_err(str::to_string);
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn an_update_keeps_the_stored_priority_and_policy_when_left_out() {
        let stored = json!({"spec": {"priority": 3, "preemptionPolicy": PREEMPT_NEVER}});
        // (the request's spec, the admitted priority and policy)
        let cases = [
            (json!({}), json!(3), json!(PREEMPT_NEVER)),
            (json!({"priority": null}), json!(3), json!(PREEMPT_NEVER)),
            (json!({"priority": 9, "preemptionPolicy": "X"}), json!(9), json!("X")),
        ];
        for (spec, priority, policy) in cases {
            let mut p = json!({"spec": spec});
            keep_pod_priority(&mut p, &stored);
            assert_eq!((&p["spec"]["priority"], &p["spec"]["preemptionPolicy"]), (&priority, &policy), "{spec}");
        }
        let mut unset = json!({"spec": {}});
        keep_pod_priority(&mut unset, &json!({"spec": {}}));
        assert_eq!(unset, json!({"spec": {}}), "nothing stored, nothing kept");
    }

    fn messages(causes: Vec<Cause>) -> Vec<String> {
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn classes_are_validated_with_kube_s_messages() {
        let pc = |name: &str, rest: Value| {
            let mut v = rest;
            v["metadata"] = json!({"name": name});
            v
        };
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a user class", pc("high", json!({"value": 1_000_000_000, "preemptionPolicy": "Never"})), vec![]),
            ("no value is 0", pc("zero", json!({})), vec![]),
            ("negative values are fine", pc("neg", json!({"value": -2_147_483_648i64})), vec![]),
            (
                "above the user maximum",
                pc("big", json!({"value": 1_000_000_001})),
                vec!["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"],
            ),
            ("a system class as kube's", pc("system-node-critical", json!({"value": 2_000_001_000})), vec![]),
            (
                "a system class with another value",
                pc("system-cluster-critical", json!({"value": 5})),
                vec![
                    "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must be 2000000000",
                ],
            ),
            (
                "a system class as the default",
                pc("system-cluster-critical", json!({"value": 2_000_000_000, "globalDefault": true})),
                vec![
                    "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: globalDefault of system-cluster-critical PriorityClass must be false",
                ],
            ),
            (
                "an unknown system- name",
                pc("system-mine", json!({"value": 1})),
                vec![
                    "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class",
                ],
            ),
            (
                "an unknown policy",
                pc("p", json!({"preemptionPolicy": "Sometimes"})),
                vec![
                    r#"preemptionPolicy: Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never""#,
                ],
            ),
            ("an empty policy", pc("p", json!({"preemptionPolicy": ""})), vec!["preemptionPolicy: Required value"]),
            (
                "a value beyond int32",
                pc("p", json!({"value": 3_000_000_000i64})),
                vec!["value: Invalid value: 3000000000: must be a 32-bit integer"],
            ),
            (
                "a string value",
                pc("p", json!({"value": "1"})),
                vec![r#"value: Invalid value: "1": must be a 32-bit integer"#],
            ),
            (
                "a string globalDefault",
                pc("p", json!({"globalDefault": "yes"})),
                vec![r#"globalDefault: Invalid value: "yes": must be a boolean"#],
            ),
        ];
        for (what, obj, want) in cases {
            assert_eq!(messages(validate_priority_class(&obj, None)), want, "{what}");
        }
    }

    #[test]
    fn value_and_preemption_policy_are_immutable() {
        let old = class("c", 10, false, PREEMPT_LOWER_PRIORITY);
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "description and globalDefault may change",
                json!({"metadata": {"name": "c"}, "value": 10, "globalDefault": true, "description": "d", "preemptionPolicy": PREEMPT_LOWER_PRIORITY}),
                vec![],
            ),
            (
                "value",
                class("c", 11, false, PREEMPT_LOWER_PRIORITY),
                vec!["value: Forbidden: may not be changed in an update."],
            ),
            (
                "policy",
                class("c", 10, false, PREEMPT_NEVER),
                vec![r#"preemptionPolicy: Invalid value: "Never": field is immutable"#],
            ),
        ];
        for (what, new, want) in cases {
            assert_eq!(messages(validate_priority_class(&new, Some(&old))), want, "{what}");
        }
    }

    #[test]
    fn an_unset_preemption_policy_defaults_to_preempt_lower_priority() {
        let cases = [
            (json!({}), PREEMPT_LOWER_PRIORITY),
            (json!({"preemptionPolicy": null}), PREEMPT_LOWER_PRIORITY),
            (json!({"preemptionPolicy": "Never"}), PREEMPT_NEVER),
        ];
        for (mut pc, want) in cases {
            default_priority_class(&mut pc);
            assert_eq!(pc["preemptionPolicy"], want);
        }
    }

    #[test]
    fn only_one_class_may_be_the_global_default() {
        let existing = class("first", 1, true, PREEMPT_LOWER_PRIORITY);
        let refused = "PriorityClass first is already marked as default. Only one default can exist";
        // (what, the stored classes, the written class, its stored version, the answer)
        type Case = (&'static str, Vec<Value>, Value, Option<Value>, Result<(), &'static str>);
        let cases: Vec<Case> = vec![
            (
                "a second default",
                vec![existing.clone()],
                class("second", 2, true, PREEMPT_LOWER_PRIORITY),
                None,
                Err(refused),
            ),
            ("a first default", vec![], class("second", 2, true, PREEMPT_LOWER_PRIORITY), None, Ok(())),
            ("not a default", vec![existing.clone()], class("second", 2, false, PREEMPT_LOWER_PRIORITY), None, Ok(())),
            (
                "another class made the default",
                vec![existing.clone(), class("second", 2, false, PREEMPT_LOWER_PRIORITY)],
                class("second", 2, true, PREEMPT_LOWER_PRIORITY),
                Some(class("second", 2, false, PREEMPT_LOWER_PRIORITY)),
                Err(refused),
            ),
            (
                "the default updated",
                vec![existing.clone()],
                class("first", 1, true, PREEMPT_LOWER_PRIORITY),
                Some(existing.clone()),
                Ok(()),
            ),
        ];
        for (what, stored, pc, old, want) in cases {
            assert_eq!(
                admit_priority_class(&pc, old.as_ref(), &Classes(stored)),
                want.map_err(str::to_string),
                "{what}"
            );
        }
    }

    #[test]
    fn the_system_classes_are_kube_apiserver_s_and_valid_and_cannot_be_deleted() {
        let classes = system_priority_classes();
        let got: Vec<(&str, i64)> = classes.iter().map(|c| (name_of(c), value_of(c))).collect();
        assert_eq!(got, [("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)]);
        for c in &classes {
            assert_eq!(validate_priority_class(c, None), vec![], "{c}");
            assert_eq!(refuse_delete(name_of(c)), Some("this is a system priority class and cannot be deleted"));
        }
        assert_eq!(refuse_delete("high"), None);
    }
}
