//! `policy/v1` PodDisruptionBudgets in the server: validation on every write (the rules live in
//! `jobset_api::pdb`) and the eviction subresource's budget check, as kube-apiserver's
//! `EvictionREST` (`pkg/registry/core/pod/storage/eviction.go`).

use serde_json::{Value, json};

use crate::admission::{AdmissionHook, Lookup};
use crate::error::{ApiError, Cause};
use jobset_api::pdb;

/// Where PodDisruptionBudgets are stored.
pub const STORAGE_KEY: &str = "policy/poddisruptionbudgets";

/// `MaxDisruptedPodSize`: evictions approved but not yet seen by the disruption controller.
const MAX_DISRUPTED_POD_SIZE: usize = 2000;

const VIOLATES_BUDGET: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn causes(errors: Vec<jobset_api::field::FieldError>) -> Vec<Cause> {
    errors.into_iter().map(|e| Cause { reason: e.reason(), message: e.message(), field: e.field }).collect()
}

/// Validation of PodDisruptionBudgets (spec on create and update, counts on status writes).
pub struct PdbAdmission;

impl AdmissionHook for PdbAdmission {
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(pdb::validate(obj, old.is_some_and(pdb::has_invalid_label_value)))
    }
    fn validates_status(&self) -> bool {
        true
    }
    fn validate_status(&self, obj: &Value, _old: &Value) -> Vec<Cause> {
        causes(pdb::validate_status(obj))
    }
}

/// What an eviction does about the budgets of its pod.
#[derive(Debug, PartialEq)]
pub enum Budget {
    /// Delete the pod without touching a budget.
    Unguarded,
    /// Write this status to PodDisruptionBudget `name` (one disruption fewer, the pod recorded
    /// in `disruptedPods`), then delete the pod.
    Spend { name: String, status: Value },
}

/// `canIgnorePDB`: a pod that is terminal, pending or already being deleted is evicted without
/// looking at budgets.
pub fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed" | "Pending"))
        || pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// `getPodDisruptionBudgets`: the budgets whose selector matches the pod (a budget with an
/// empty, absent or invalid selector matches nothing).
fn matching<'a>(pod: &Value, budgets: &'a [Value]) -> Vec<&'a Value> {
    let labels = pod.pointer("/metadata/labels");
    budgets
        .iter()
        .filter(|b| {
            let selector = b.pointer("/spec/selector").unwrap_or(&Value::Null);
            match crate::selector::from_label_selector_json(selector) {
                Ok(s) if !selector.is_null() && !s.is_empty() => s.matches_json(labels),
                _ => false,
            }
        })
        .collect()
}

fn too_many_requests(cause: String, retry_after: u32) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError { code: 429, reason: "TooManyRequests", message: VIOLATES_BUDGET.into(), details: Some(details) }
}

/// The eviction of `pod` (not one [`can_ignore_pdb`] lets through) against the budgets of its
/// namespace, as `EvictionREST.Create` decides: refused with 500 when more than one budget
/// covers it, 429 when its budget allows no disruption (or the disruption controller has not
/// seen the budget's generation yet), 403 for a budget whose status is corrupt. An unready pod is
/// evicted without spending a disruption when its budget is healthy (`IfHealthyBudget`) or says
/// `AlwaysAllow`.
pub fn check(pod: &Value, budgets: &[Value], now: &str) -> Result<Budget, ApiError> {
    let found = matching(pod, budgets);
    let budget = match found.as_slice() {
        [] => return Ok(Budget::Unguarded),
        [one] => *one,
        _ => {
            return Err(ApiError::new(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let name = budget.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let (current, desired) = (pdb::count(budget, "currentHealthy"), pdb::count(budget, "desiredHealthy"));
    if !pdb::pod_ready(pod) {
        let policy = budget.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str);
        if policy == Some(pdb::ALWAYS_ALLOW) || (current >= desired && desired > 0) {
            return Ok(Budget::Unguarded);
        }
    }
    // checkAndDecrement
    if pdb::count(budget, "observedGeneration") < pdb::generation(budget) {
        return Err(too_many_requests(
            format!("The disruption budget {name} is still being processed by the server."),
            10,
        ));
    }
    let allowed = pdb::count(budget, "disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden_resource(
            "policy",
            "poddisruptionbudget",
            &name,
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = budget.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_POD_SIZE {
        return Err(ApiError::forbidden_resource(
            "policy",
            "poddisruptionbudget",
            &name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently"),
            0,
        ));
    }
    let mut status = budget.get("status").cloned().unwrap_or_else(|| json!({}));
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        pdb::update_disruption_allowed_condition(&mut status, now);
    }
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if !status.get("disruptedPods").is_some_and(Value::is_object) {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod_name] = json!(now);
    Ok(Budget::Spend { name, status })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, ready: bool) -> Value {
        json!({"metadata": {"name": "p", "labels": {"app": "a"}},
               "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    fn budget(name: &str, allowed: i64, current: i64, desired: i64) -> Value {
        json!({"metadata": {"name": name, "generation": 1}, "spec": {"minAvailable": desired, "selector": {"matchLabels": {"app": "a"}}},
               "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": current, "desiredHealthy": desired, "expectedPods": current}})
    }

    fn refusal(r: Result<Budget, ApiError>) -> (u16, String, Value) {
        let e = r.expect_err("refused");
        (e.code, e.message, e.details.unwrap_or_default())
    }

    #[test]
    fn terminal_pending_and_deleted_pods_ignore_budgets() {
        for (phase, deleting, ignored) in [
            ("Succeeded", false, true),
            ("Failed", false, true),
            ("Pending", false, true),
            ("Running", true, true),
            ("Running", false, false),
        ] {
            let mut p = pod(phase, true);
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            assert_eq!(can_ignore_pdb(&p), ignored, "{phase} deleting={deleting}");
        }
    }

    #[test]
    fn a_budget_with_no_disruption_left_refuses_with_429_and_its_cause() {
        let (code, message, details) = refusal(check(&pod("Running", true), &[budget("b", 0, 2, 2)], "now"));
        assert_eq!((code, message.as_str()), (429, VIOLATES_BUDGET));
        assert_eq!(
            details,
            json!({"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget b needs 2 healthy pods and has 2 currently"}]})
        );
    }

    #[test]
    fn a_budget_with_room_is_spent_and_records_the_pod() {
        let Budget::Spend { name, status } = check(&pod("Running", true), &[budget("b", 1, 3, 2)], "now").unwrap()
        else {
            panic!("not spent")
        };
        assert_eq!(name, "b");
        assert_eq!(status["disruptionsAllowed"], 0);
        assert_eq!(status["disruptedPods"], json!({"p": "now"}));
        assert_eq!(status["conditions"][0]["reason"], "InsufficientPods", "the last disruption flips the condition");
    }

    #[test]
    fn an_unready_pod_under_a_healthy_budget_goes_without_spending() {
        let cases = [
            ("healthy budget", budget("b", 0, 2, 2), Budget::Unguarded),
            (
                "always allow",
                {
                    let mut b = budget("b", 0, 1, 2);
                    b["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
                    b
                },
                Budget::Unguarded,
            ),
        ];
        for (what, b, want) in cases {
            assert_eq!(check(&pod("Running", false), &[b], "now").unwrap(), want, "{what}");
        }
        let (code, ..) = refusal(check(&pod("Running", false), &[budget("b", 0, 1, 2)], "now"));
        assert_eq!(code, 429, "an unhealthy budget protects unready pods too");
    }

    #[test]
    fn other_refusals_are_worded_as_upstream() {
        let two = [budget("a", 1, 3, 2), budget("b", 1, 3, 2)];
        let (code, message, _) = refusal(check(&pod("Running", true), &two, "now"));
        assert_eq!(
            (code, message.as_str()),
            (500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
        );
        let mut stale = budget("b", 1, 3, 2);
        stale["metadata"]["generation"] = json!(2);
        let (code, _, details) = refusal(check(&pod("Running", true), &[stale], "now"));
        assert_eq!(code, 429);
        assert_eq!(details["causes"][0]["message"], "The disruption budget b is still being processed by the server.");
        assert_eq!(details["retryAfterSeconds"], 10);
        let (code, message, _) = refusal(check(&pod("Running", true), &[budget("b", -1, 3, 2)], "now"));
        assert_eq!(
            (code, message.as_str()),
            (403, "poddisruptionbudget.policy \"b\" is forbidden: pdb disruptions allowed is negative")
        );
    }

    #[test]
    fn budgets_with_empty_absent_or_other_selectors_do_not_guard_the_pod() {
        let mut empty = budget("e", 0, 0, 2);
        empty["spec"]["selector"] = json!({});
        let mut absent = budget("n", 0, 0, 2);
        absent["spec"].as_object_mut().unwrap().remove("selector");
        let mut other = budget("o", 0, 0, 2);
        other["spec"]["selector"] = json!({"matchLabels": {"app": "b"}});
        assert_eq!(check(&pod("Running", true), &[empty, absent, other], "now").unwrap(), Budget::Unguarded);
    }
}
