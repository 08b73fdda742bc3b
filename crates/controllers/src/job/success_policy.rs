//! Matching `spec.successPolicy` of Indexed Jobs (upstream
//! `pkg/controller/job/success_policy.go`, `matchSuccessPolicy`).

use k8s_openapi::api::batch::v1::SuccessPolicy;

use super::indexes::Intervals;

/// Job condition reason of `SuccessCriteriaMet` when a success policy matched.
pub const REASON_SUCCESS_POLICY: &str = "SuccessPolicy";

/// Returns `Matched rules at index <i>` for the first satisfied rule, or `None`.
///
/// Only evaluated when at least one index succeeded. A rule with
/// `succeededIndexes` (parsed like the controller parses status, against
/// `completions`; an empty/unparsable list skips the rule) is satisfied when all
/// its indexes succeeded, or when `succeededCount` is set and at least that many
/// of its indexes succeeded. A rule with only `succeededCount` is satisfied when
/// at least that many indexes succeeded.
pub fn match_success_policy(policy: &SuccessPolicy, completions: i32, succeeded: &Intervals) -> Option<String> {
    if succeeded.is_empty() {
        return None;
    }
    policy
        .rules
        .iter()
        .position(|rule| {
            if let Some(s) = &rule.succeeded_indexes {
                let required = Intervals::parse(s, completions);
                if required.is_empty() {
                    return false;
                }
                let contained = required.intersection_total(succeeded);
                contained == required.total() || rule.succeeded_count.is_some_and(|c| contained >= c)
            } else if let Some(c) = rule.succeeded_count {
                succeeded.total() >= c
            } else {
                false
            }
        })
        .map(|i| format!("Matched rules at index {i}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn success_policy_table() {
        let cases: &[(&str, Value, i32, &str, Option<&str>)] = &[
            ("no succeeded index never matches", json!([{ "succeededCount": 0 }]), 5, "", None),
            (
                "indexes only: all required succeeded",
                json!([{ "succeededIndexes": "0,2-3" }]),
                5,
                "0-3",
                Some("Matched rules at index 0"),
            ),
            ("indexes only: one required missing", json!([{ "succeededIndexes": "0,2-3" }]), 5, "0,1,3,4", None),
            (
                "count only: enough succeeded",
                json!([{ "succeededCount": 3 }]),
                5,
                "0,2,4",
                Some("Matched rules at index 0"),
            ),
            ("count only: not enough succeeded", json!([{ "succeededCount": 4 }]), 5, "0,2,4", None),
            (
                "indexes and count: count reached within the indexes",
                json!([{ "succeededIndexes": "1-4", "succeededCount": 2 }]),
                5,
                "0,3,4",
                Some("Matched rules at index 0"),
            ),
            (
                "indexes and count: successes outside the indexes do not count",
                json!([{ "succeededIndexes": "1-3", "succeededCount": 2 }]),
                5,
                "0,3,4",
                None,
            ),
            (
                "first satisfied rule wins",
                json!([
                    { "succeededIndexes": "4" },
                    { "succeededCount": 1 },
                    { "succeededIndexes": "0" }
                ]),
                5,
                "0",
                Some("Matched rules at index 1"),
            ),
            (
                "unparsable succeededIndexes skips the rule",
                json!([{ "succeededIndexes": "x", "succeededCount": 1 }, { "succeededIndexes": "0" }]),
                5,
                "0",
                Some("Matched rules at index 1"),
            ),
            (
                "succeededIndexes beyond completions is empty and skipped",
                json!([{ "succeededIndexes": "7-9" }]),
                5,
                "0-4",
                None,
            ),
            (
                "succeededIndexes clamped to completions",
                json!([{ "succeededIndexes": "3-9" }]),
                5,
                "3,4",
                Some("Matched rules at index 0"),
            ),
        ];
        for (name, rules, completions, succeeded, want) in cases {
            let policy: SuccessPolicy = serde_json::from_value(json!({ "rules": rules })).unwrap();
            let succeeded = Intervals::parse(succeeded, *completions);
            assert_eq!(match_success_policy(&policy, *completions, &succeeded).as_deref(), *want, "{name}");
        }
    }
}
