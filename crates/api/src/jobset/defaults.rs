//! JobSet defaulting: upstream's mutating webhook (`jobSetWebhook.Default`, create only), exactly.
//! The CRD schema's defaults (`replicas: 1`, `groupName: default`,
//! `failurePolicy.restartStrategy: Recreate`, `retentionPolicy.whenDeleted: Delete`) are not
//! applied here: the API server applies them when it decodes a JobSet, before admission.
//!
//! Works on the JSON object as stored, so fields a typed client does not know (for instance the
//! `setConditionReason` of a Job's podFailurePolicy rule inside a replicated job template)
//! survive untouched. A value of the wrong JSON type is left alone for validation to report.

use serde_json::{Map, Value, json};

/// `failurePolicyRule<i>`, upstream's `defaultRuleNameFmt`.
pub fn default_rule_name(index: usize) -> String {
    format!("failurePolicyRule{index}")
}

/// Applies the webhook's defaults to `obj` (a whole JobSet).
pub fn default_jobset(obj: &mut Value) {
    let Some(root) = obj.as_object_mut() else { return };
    let Some(spec) = child(root, "spec") else { return };

    // Success policy: operator All, targeting every replicated job.
    set_if_unset(spec, "successPolicy", json!({"operator": "All"}));
    // Startup policy: AnyOrder.
    set_if_unset(spec, "startupPolicy", json!({"startupPolicyOrder": "AnyOrder"}));

    if let Some(rjobs) = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut) {
        for rjob in rjobs.iter_mut().filter_map(Value::as_object_mut) {
            // Indexed completion mode and an OnFailure pod restart policy.
            let Some(job_spec) = child(rjob, "template").and_then(|t| child(t, "spec")) else { continue };
            set_if_unset(job_spec, "completionMode", json!("Indexed"));
            if let Some(pod_spec) = child(job_spec, "template").and_then(|t| child(t, "spec"))
                && is_unset_or_empty(pod_spec.get("restartPolicy"))
            {
                pod_spec.insert("restartPolicy".into(), json!("OnFailure"));
            }
        }
    }

    // Network: DNS hostnames on, not-ready addresses published.
    if let Some(network) = child(spec, "network") {
        set_if_unset(network, "enableDNSHostnames", json!(true));
        set_if_unset(network, "publishNotReadyAddresses", json!(true));
    }

    if let Some(rules) = spec.get_mut("failurePolicy").and_then(|f| f.get_mut("rules")).and_then(Value::as_array_mut) {
        for (i, rule) in rules.iter_mut().enumerate() {
            let Some(rule) = rule.as_object_mut() else { continue };
            if is_unset_or_empty(rule.get("name")) {
                rule.insert("name".into(), Value::String(default_rule_name(i)));
            }
        }
    }

    if let Some(policies) = spec.get_mut("volumeClaimPolicies").and_then(Value::as_array_mut) {
        for policy in policies.iter_mut().filter_map(Value::as_object_mut) {
            set_if_unset(policy, "retentionPolicy", json!({"whenDeleted": "Delete"}));
        }
    }
}

fn is_unset_or_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

fn set_if_unset(m: &mut Map<String, Value>, key: &str, value: Value) {
    if is_unset(m.get(key)) {
        m.insert(key.into(), value);
    }
}

/// The object at `key`, created (empty) when absent or null; `None` when it is not an object.
fn child<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    if is_unset(m.get(key)) {
        m.insert(key.into(), Value::Object(Map::new()));
    }
    m.get_mut(key)?.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(v: Value) -> Value {
        let mut v = v;
        default_jobset(&mut v);
        v
    }

    #[test]
    fn an_empty_jobset_gets_the_policies_and_network_defaults() {
        let got = defaulted(json!({"metadata": {"name": "js"}}));
        assert_eq!(
            got["spec"],
            json!({
                "successPolicy": {"operator": "All"},
                "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true},
            })
        );
    }

    #[test]
    fn replicated_jobs_get_the_webhook_defaults_and_not_the_schema_s() {
        let got = defaulted(json!({"spec": {"replicatedJobs": [
            {"name": "a", "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}},
            {"name": "b"},
        ]}}));
        assert_eq!(
            got["spec"]["replicatedJobs"][0],
            json!({"name": "a", "template": {"spec": {
                "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "i"}]}},
            }}})
        );
        assert_eq!(
            got["spec"]["replicatedJobs"][1],
            json!({"name": "b", "template": {"spec": {
                "completionMode": "Indexed", "template": {"spec": {"restartPolicy": "OnFailure"}},
            }}})
        );
    }

    #[test]
    fn explicit_values_are_kept() {
        let spec = json!({
            "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["a"]},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "network": {"enableDNSHostnames": false, "publishNotReadyAddresses": false, "subdomain": "s"},
            "failurePolicy": {"restartStrategy": "BlockingRecreate", "rules": [{"name": "r", "action": "FailJobSet"}]},
            "replicatedJobs": [{"name": "a", "replicas": 0, "groupName": "g", "template": {"spec": {
                "completionMode": "NonIndexed", "template": {"spec": {"restartPolicy": "Never"}}}}}],
            "volumeClaimPolicies": [{"templates": [], "retentionPolicy": {"whenDeleted": "Retain"}}],
        });
        let got = defaulted(json!({"spec": spec.clone()}));
        assert_eq!(got["spec"], spec);
    }

    #[test]
    fn failure_policy_rules_are_named_by_index_and_the_strategy_is_left_to_the_schema() {
        let got = defaulted(json!({"spec": {"failurePolicy": {"rules": [
            {"action": "FailJobSet"}, {"name": "keep", "action": "RestartJobSet"}, {"name": "", "action": "FailJob"},
        ]}}}));
        assert_eq!(
            got["spec"]["failurePolicy"],
            json!({"rules": [
                {"name": "failurePolicyRule0", "action": "FailJobSet"},
                {"name": "keep", "action": "RestartJobSet"},
                {"name": "failurePolicyRule2", "action": "FailJob"},
            ]})
        );
    }

    #[test]
    fn no_failure_policy_is_added_when_absent() {
        let got = defaulted(json!({"spec": {}}));
        assert!(got["spec"].get("failurePolicy").is_none());
    }

    #[test]
    fn only_volume_claim_policies_without_a_retention_policy_get_delete() {
        let got = defaulted(json!({"spec": {"volumeClaimPolicies": [
            {"templates": [{"metadata": {"name": "d"}}]},
            {"templates": [], "retentionPolicy": {}},
        ]}}));
        assert_eq!(got["spec"]["volumeClaimPolicies"][0]["retentionPolicy"], json!({"whenDeleted": "Delete"}));
        // Upstream checks `RetentionPolicy == nil`; the schema defaults `whenDeleted` inside.
        assert_eq!(got["spec"]["volumeClaimPolicies"][1]["retentionPolicy"], json!({}));
    }

    #[test]
    fn defaulting_keeps_unknown_fields_such_as_set_condition_reason() {
        let got = defaulted(json!({"spec": {
            "futureField": {"x": 1},
            "replicatedJobs": [{"name": "sim", "extra": true, "template": {"spec": {
                "podFailurePolicy": {"rules": [{"action": "FailJob",
                    "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]},
                    "setConditionReason": "ExitCode3"}]},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "i"}]}},
            }}}],
        }}));
        assert_eq!(got["spec"]["futureField"], json!({"x": 1}));
        assert_eq!(got["spec"]["replicatedJobs"][0]["extra"], json!(true));
        assert_eq!(
            got.pointer("/spec/replicatedJobs/0/template/spec/podFailurePolicy/rules/0/setConditionReason"),
            Some(&json!("ExitCode3"))
        );
        assert_eq!(
            got.pointer("/spec/replicatedJobs/0/template/spec/template/spec/restartPolicy"),
            Some(&json!("Never"))
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_left_for_validation() {
        let spec = json!({"network": "x", "replicatedJobs": [{"name": "a", "template": "t"}], "failurePolicy": 3});
        let got = defaulted(json!({"spec": spec.clone()}));
        assert_eq!(got["spec"]["network"], json!("x"));
        assert_eq!(got["spec"]["replicatedJobs"][0]["template"], json!("t"));
        assert_eq!(got["spec"]["failurePolicy"], json!(3));
        let got = defaulted(json!({"spec": "nope"}));
        assert_eq!(got["spec"], json!("nope"));
    }
}
