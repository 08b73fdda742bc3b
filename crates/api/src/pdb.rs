//! `policy/v1` PodDisruptionBudgets: kube-apiserver's validation (`pkg/apis/policy/validation`:
//! `ValidatePodDisruptionBudget`, `ValidatePodDisruptionBudgetStatusUpdate`) and the helpers the
//! eviction subresource and the disruption controller share (`k8s.io/component-helpers/apps/
//! poddisruptionbudget`: the `DisruptionAllowed` condition; a pod's health is its readiness).

use serde_json::{Value, json};

use crate::field::FieldError;

pub const GROUP: &str = "policy";
pub const KIND: &str = "PodDisruptionBudget";
/// `policy.DisruptionAllowedCondition`.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// `policy.SufficientPodsReason`.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// `policy.InsufficientPodsReason`.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// `policy.SyncFailedReason`.
pub const SYNC_FAILED: &str = "SyncFailed";
/// `policy.IfHealthyBudget`, the default `unhealthyPodEvictionPolicy`.
pub const IF_HEALTHY_BUDGET: &str = "IfHealthyBudget";
/// `policy.AlwaysAllow`.
pub const ALWAYS_ALLOW: &str = "AlwaysAllow";

const PERCENT_MESSAGE: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";

fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

/// `validation.IsValidPercent`: `^[0-9]+%$`.
fn is_percent(s: &str) -> bool {
    s.strip_suffix('%').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `appsvalidation.ValidatePositiveIntOrPercent` then `IsNotMoreThan100Percent`.
fn int_or_percent(v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match v {
        Value::Number(n) if n.as_i64().is_some() => {
            let n = n.as_i64().unwrap_or_default();
            if n < 0 {
                errs.push(FieldError::invalid_rendered(path, n.to_string(), "must be greater than or equal to 0"));
            }
        }
        // An IntOrString renders through its String(): the text, unquoted.
        Value::String(s) if !is_percent(s) => errs.push(FieldError::invalid_rendered(path, s.clone(), PERCENT_MESSAGE)),
        Value::String(s) => {
            if s[..s.len() - 1].parse::<u64>().map_or(true, |p| p > 100) {
                errs.push(FieldError::invalid(path, v, "must not be greater than 100%"));
            }
        }
        other => errs.push(FieldError::invalid(path, other, "must be an integer or percentage (e.g '5%')")),
    }
}

/// `ValidatePodDisruptionBudget`: the spec of a PodDisruptionBudget being created or updated.
/// `allow_invalid_label_value` as upstream's `AllowInvalidLabelValueInSelector` (an update keeps
/// a stored selector's invalid values).
pub fn validate(pdb: &Value, allow_invalid_label_value: bool) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = pdb.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    let min = field(spec, "minAvailable");
    let max = field(spec, "maxUnavailable");
    if min.is_some() && max.is_some() {
        errs.push(FieldError::invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"));
    }
    if let Some(v) = min {
        int_or_percent(v, "spec.minAvailable", &mut errs);
    }
    if let Some(v) = max {
        int_or_percent(v, "spec.maxUnavailable", &mut errs);
    }
    if let Some(selector) = field(spec, "selector") {
        crate::job::validate_label_selector(selector, allow_invalid_label_value, "spec.selector", &mut errs);
    }
    if let Some(policy) = field(spec, "unhealthyPodEvictionPolicy")
        && !matches!(policy.as_str(), Some(IF_HEALTHY_BUDGET | ALWAYS_ALLOW))
    {
        errs.push(FieldError::not_supported(
            "spec.unhealthyPodEvictionPolicy",
            policy,
            &[ALWAYS_ALLOW, IF_HEALTHY_BUDGET],
        ));
    }
    errs
}

/// Whether a selector's `matchExpressions` hold a value that is not a valid label value (an
/// update of such a stored PodDisruptionBudget keeps being allowed, as upstream's).
pub fn has_invalid_label_value(pdb: &Value) -> bool {
    let exprs = pdb.pointer("/spec/selector/matchExpressions").and_then(Value::as_array);
    exprs.into_iter().flatten().any(|e| {
        let values = e.get("values").and_then(Value::as_array);
        values
            .into_iter()
            .flatten()
            .any(|v| !crate::validation::label_value_errors(v.as_str().unwrap_or("?")).is_empty())
    })
}

/// `ValidatePodDisruptionBudgetStatusUpdate` (policy/v1): the counts are never negative.
pub fn validate_status(pdb: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in ["disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"] {
        if let Some(n) = pdb.pointer(&format!("/status/{f}")).and_then(Value::as_i64)
            && n < 0
        {
            errs.push(FieldError::invalid_rendered(
                format!("status.{f}"),
                n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    errs
}

/// `podutil.IsPodReady`: the pod's `Ready` condition is `True`. What a budget counts as healthy.
pub fn pod_ready(pod: &Value) -> bool {
    let conds = pod.pointer("/status/conditions").and_then(Value::as_array);
    conds.into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// A status count (`int32`, 0 when absent).
pub fn count(pdb: &Value, name: &str) -> i64 {
    pdb.pointer(&format!("/status/{name}")).and_then(Value::as_i64).unwrap_or(0)
}

/// `metadata.generation` (0 when absent).
pub fn generation(pdb: &Value) -> i64 {
    pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0)
}

/// `apimeta.SetStatusCondition` on `status.conditions`: `lastTransitionTime` moves (to `now`)
/// only when the status changes; reason, message and observedGeneration always follow.
pub fn set_condition(status: &mut Value, type_: &str, value: &str, reason: &str, message: &str, now: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    let observed = status.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0);
    let conds = status.as_object_mut().expect("an object").entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let list = conds.as_array_mut().expect("an array");
    let mut new =
        json!({"type": type_, "status": value, "lastTransitionTime": now, "reason": reason, "message": message});
    if observed != 0 {
        new["observedGeneration"] = json!(observed);
    }
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(c) => {
            if c["status"] == value {
                new["lastTransitionTime"] = c.get("lastTransitionTime").cloned().unwrap_or_else(|| json!(now));
            }
            *c = new;
        }
        None => list.push(new),
    }
}

/// `pdbhelper.UpdateDisruptionAllowedCondition`: `DisruptionAllowed` is True (`SufficientPods`)
/// while disruptions are allowed, else False (`InsufficientPods`).
pub fn update_disruption_allowed_condition(status: &mut Value, now: &str) {
    let allowed = status.get("disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0) > 0;
    let (value, reason) = if allowed { ("True", SUFFICIENT_PODS) } else { ("False", INSUFFICIENT_PODS) };
    set_condition(status, DISRUPTION_ALLOWED, value, reason, "", now);
}

/// `pdbhelper.ConditionsAreUpToDate`.
pub fn conditions_are_up_to_date(pdb: &Value) -> bool {
    let conds = pdb.pointer("/status/conditions").and_then(Value::as_array);
    let Some(cond) = conds.into_iter().flatten().find(|c| c["type"] == DISRUPTION_ALLOWED) else { return false };
    if pdb.pointer("/status/observedGeneration").and_then(Value::as_i64).unwrap_or(0) != generation(pdb) {
        return false;
    }
    if count(pdb, "disruptionsAllowed") > 0 {
        cond["status"] == "True" && cond["reason"] == SUFFICIENT_PODS
    } else {
        cond["status"] == "False" && cond["reason"] == INSUFFICIENT_PODS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(pdb: Value) -> Vec<String> {
        validate(&pdb, false).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation_reports_each_problem_as_kube_apiserver_words_it() {
        let sel = json!({"matchLabels": {"app": "a"}});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("integer minAvailable", json!({"minAvailable": 2, "selector": sel}), vec![]),
            ("percent maxUnavailable", json!({"maxUnavailable": "50%", "selector": sel}), vec![]),
            ("neither set", json!({"selector": sel}), vec![]),
            (
                "negative minAvailable",
                json!({"minAvailable": -1}),
                vec!["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"],
            ),
            (
                "percent without the sign",
                json!({"maxUnavailable": "50"}),
                vec![
                    "spec.maxUnavailable: Invalid value: 50: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ],
            ),
            (
                "over 100%",
                json!({"minAvailable": "120%"}),
                vec!["spec.minAvailable: Invalid value: \"120%\": must not be greater than 100%"],
            ),
            (
                "unknown eviction policy",
                json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Never"}),
                vec![
                    "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
                ],
            ),
            (
                "bad selector operator",
                json!({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}),
                vec![
                    "spec.selector.matchExpressions[0].operator: Invalid value: \"Has\": not a valid selector operator",
                ],
            ),
        ];
        for (what, spec, want) in cases {
            assert_eq!(messages(json!({"spec": spec})), want, "{what}");
        }
    }

    #[test]
    fn min_available_and_max_unavailable_together_are_refused_on_spec() {
        let errs = validate(&json!({"spec": {"minAvailable": 1, "maxUnavailable": 1}}), false);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
        assert_eq!(errs[0].detail, "minAvailable and maxUnavailable cannot be both set");
    }

    #[test]
    fn status_counts_may_not_be_negative() {
        let errs = validate_status(&json!({"status": {"disruptionsAllowed": -1, "currentHealthy": 2}}));
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(got, ["status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0"]);
    }

    #[test]
    fn the_condition_says_whether_disruptions_are_allowed_and_keeps_its_transition_time() {
        let mut status = json!({"disruptionsAllowed": 1, "observedGeneration": 2});
        update_disruption_allowed_condition(&mut status, "t1");
        assert_eq!(
            status["conditions"],
            json!([{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": "",
                    "lastTransitionTime": "t1", "observedGeneration": 2}])
        );
        update_disruption_allowed_condition(&mut status, "t2");
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "t1", "same status: the time stays");
        status["disruptionsAllowed"] = json!(0);
        update_disruption_allowed_condition(&mut status, "t3");
        assert_eq!(status["conditions"][0]["status"], "False");
        assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "t3");
    }

    #[test]
    fn conditions_are_up_to_date_only_for_the_current_generation_and_count() {
        let pdb = |generation: i64, allowed: i64, status: &str, reason: &str| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                   "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason}]}})
        };
        assert!(conditions_are_up_to_date(&pdb(1, 1, "True", "SufficientPods")));
        assert!(conditions_are_up_to_date(&pdb(1, 0, "False", "InsufficientPods")));
        assert!(!conditions_are_up_to_date(&pdb(2, 1, "True", "SufficientPods")), "a newer generation");
        assert!(!conditions_are_up_to_date(&pdb(1, 0, "True", "SufficientPods")), "count moved to 0");
    }
}
