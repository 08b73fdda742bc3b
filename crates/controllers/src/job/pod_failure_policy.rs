//! Matching failed pods against `spec.podFailurePolicy` (upstream
//! `pkg/controller/job/pod_failure_policy.go`, `matchPodFailurePolicy`).

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};

/// Job condition reason used for FailJob matches without a `setConditionReason`.
pub const REASON_POD_FAILURE_POLICY: &str = "PodFailurePolicy";

/// A pod failure policy rule action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

impl Action {
    /// Parse the API spelling; unknown actions yield `None`.
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "FailJob" => Some(Action::FailJob),
            "FailIndex" => Some(Action::FailIndex),
            "Ignore" => Some(Action::Ignore),
            "Count" => Some(Action::Count),
            _ => None,
        }
    }

    /// The API spelling (also the metric label of
    /// `pod_failures_handled_by_failure_policy_total{action}`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::FailJob => "FailJob",
            Action::FailIndex => "FailIndex",
            Action::Ignore => "Ignore",
            Action::Count => "Count",
        }
    }
}

/// Result of matching one failed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// FailJob message (only for a FailJob match).
    pub fail_job_message: Option<String>,
    /// FailureTarget/Failed condition reason (only for a FailJob match):
    /// the rule's `setConditionReason`, else `PodFailurePolicy`.
    pub condition_reason: Option<String>,
    /// Whether the failure counts towards backoffLimit / backoffLimitPerIndex
    /// (false only for Ignore).
    pub count_failed: bool,
    /// The matched rule's action; `None` when no rule matched.
    pub action: Option<Action>,
}

impl Default for Match {
    /// No rule matched (or no policy): the failure counts.
    fn default() -> Self {
        Match { fail_job_message: None, condition_reason: None, count_failed: true, action: None }
    }
}

/// Reads the local-mode extension `spec.podFailurePolicy.rules[i].setConditionReason`
/// from a raw Job JSON object (k8s-openapi drops unknown fields). The result is
/// indexed like the rules; missing/non-string/empty values are `None`.
pub fn set_condition_reasons_from_json(job: &serde_json::Value) -> Vec<Option<String>> {
    job.pointer("/spec/podFailurePolicy/rules")
        .and_then(|r| r.as_array())
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    r.get("setConditionReason").and_then(|v| v.as_str()).filter(|s| !s.is_empty()).map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Matches a failed pod against the policy: rules in order, first match wins;
/// a rule with an unknown action falls through to the next rule.
/// `set_condition_reasons[i]` is the `setConditionReason` of rule `i` (may be shorter
/// than the rule list).
pub fn match_pod_failure_policy(
    policy: &PodFailurePolicy,
    set_condition_reasons: &[Option<String>],
    pod: &Pod,
) -> Match {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    for (index, rule) in policy.rules.iter().enumerate() {
        // The FailJob message of this rule if its requirement matches.
        let message = if let Some(req) = &rule.on_exit_codes {
            let Some(cs) = status.and_then(|s| {
                match_on_exit_codes(
                    s.container_statuses.as_deref().unwrap_or_default(),
                    s.init_container_statuses.as_deref().unwrap_or_default(),
                    req,
                )
            }) else {
                continue;
            };
            let exit_code = terminated_exit_code(cs).unwrap_or_default();
            format!(
                "Container {} for pod {namespace}/{name} failed with exit code {exit_code} matching FailJob rule at index {index}",
                cs.name
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let Some(cond) =
                status.and_then(|s| match_on_pod_conditions(s.conditions.as_deref().unwrap_or_default(), patterns))
            else {
                continue;
            };
            format!("Pod {namespace}/{name} has condition {} matching FailJob rule at index {index}", cond.type_)
        } else {
            continue;
        };
        match Action::parse(&rule.action) {
            Some(Action::Ignore) => {
                return Match { count_failed: false, action: Some(Action::Ignore), ..Match::default() };
            }
            Some(action @ (Action::Count | Action::FailIndex)) => {
                return Match { action: Some(action), ..Match::default() };
            }
            Some(Action::FailJob) => {
                let reason = set_condition_reasons
                    .get(index)
                    .and_then(|r| r.as_deref())
                    .filter(|r| !r.is_empty())
                    .unwrap_or(REASON_POD_FAILURE_POLICY);
                return Match {
                    fail_job_message: Some(message),
                    condition_reason: Some(reason.to_string()),
                    count_failed: true,
                    action: Some(Action::FailJob),
                };
            }
            // Unknown action: falls through to the next rule.
            None => continue,
        }
    }
    Match::default()
}

fn terminated_exit_code(cs: &ContainerStatus) -> Option<i32> {
    cs.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code)
}

/// First terminated container status (app containers, then init containers)
/// with a non-zero exit code matching the requirement.
fn match_on_exit_codes<'a>(
    containers: &'a [ContainerStatus],
    init_containers: &'a [ContainerStatus],
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    let matching = |list: &'a [ContainerStatus]| {
        list.iter().find(|cs| {
            let Some(code) = terminated_exit_code(cs) else {
                return false; // still running / waiting: no exit code yet
            };
            req.container_name.as_ref().is_none_or(|n| *n == cs.name) && code != 0 && operator_matches(code, req)
        })
    };
    matching(containers).or_else(|| matching(init_containers))
}

fn operator_matches(code: i32, req: &PodFailurePolicyOnExitCodesRequirement) -> bool {
    match req.operator.as_str() {
        "In" => req.values.contains(&code),
        "NotIn" => !req.values.contains(&code),
        _ => false,
    }
}

/// First pod condition (in status order) matching any pattern; a pattern's
/// status defaults to `True`.
fn match_on_pod_conditions<'a>(
    conditions: &'a [PodCondition],
    patterns: &[PodFailurePolicyOnPodConditionsPattern],
) -> Option<&'a PodCondition> {
    conditions
        .iter()
        .find(|c| patterns.iter().any(|p| c.type_ == p.type_ && c.status == p.status.as_deref().unwrap_or("True")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn policy(rules: Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    fn failed_pod(status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "mypod", "namespace": "default" },
            "status": status,
        }))
        .unwrap()
    }

    fn terminated(name: &str, code: i32) -> Value {
        json!({ "name": name, "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "terminated": { "exitCode": code } } })
    }

    fn running(name: &str) -> Value {
        json!({ "name": name, "image": "", "imageID": "", "ready": true, "restartCount": 0,
                "state": { "running": {} } })
    }

    fn fail_job(msg: &str) -> Match {
        Match {
            fail_job_message: Some(msg.to_string()),
            condition_reason: Some("PodFailurePolicy".to_string()),
            count_failed: true,
            action: Some(Action::FailJob),
        }
    }

    fn action(a: Action) -> Match {
        Match { count_failed: a != Action::Ignore, action: Some(a), ..Match::default() }
    }

    #[test]
    fn matching_table() {
        let exit_42_fail_job = json!([
            { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } }
        ]);
        let cases: Vec<(&str, Value, Value, Match)> = vec![
            (
                "exit code In matches FailJob with container message",
                exit_42_fail_job.clone(),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 42)] }),
                fail_job(
                    "Container main for pod default/mypod failed with exit code 42 matching FailJob rule at index 0",
                ),
            ),
            (
                "exit code 0 is skipped",
                json!([{ "action": "FailJob", "onExitCodes": { "operator": "NotIn", "values": [1] } }]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 0)] }),
                Match::default(),
            ),
            (
                "non-terminated container is skipped",
                exit_42_fail_job.clone(),
                json!({ "phase": "Failed", "containerStatuses": [running("main")] }),
                Match::default(),
            ),
            (
                "init container fallback when no app container matches",
                exit_42_fail_job.clone(),
                json!({ "phase": "Failed",
                        "containerStatuses": [terminated("main", 1)],
                        "initContainerStatuses": [terminated("init", 42)] }),
                fail_job(
                    "Container init for pod default/mypod failed with exit code 42 matching FailJob rule at index 0",
                ),
            ),
            (
                "app containers are checked before init containers",
                json!([{ "action": "FailJob", "onExitCodes": { "operator": "NotIn", "values": [5] } }]),
                json!({ "phase": "Failed",
                        "initContainerStatuses": [terminated("init", 3)],
                        "containerStatuses": [terminated("a", 0), terminated("b", 7)] }),
                fail_job("Container b for pod default/mypod failed with exit code 7 matching FailJob rule at index 0"),
            ),
            (
                "NotIn matches codes outside the list",
                json!([{ "action": "Count", "onExitCodes": { "operator": "NotIn", "values": [1, 2] } }]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 3)] }),
                action(Action::Count),
            ),
            (
                "NotIn does not match listed code",
                json!([{ "action": "Ignore", "onExitCodes": { "operator": "NotIn", "values": [1, 2] } }]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 2)] }),
                Match::default(),
            ),
            (
                "unknown operator never matches",
                json!([{ "action": "Ignore", "onExitCodes": { "operator": "Bogus", "values": [2] } }]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 2)] }),
                Match::default(),
            ),
            (
                "containerName restricts the match",
                json!([
                    { "action": "FailJob", "onExitCodes": { "containerName": "side", "operator": "In", "values": [42] } },
                    { "action": "FailIndex", "onExitCodes": { "operator": "In", "values": [42] } }
                ]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 42)] }),
                action(Action::FailIndex),
            ),
            (
                "onPodConditions DisruptionTarget Ignore",
                json!([{ "action": "Ignore", "onPodConditions": [{ "type": "DisruptionTarget" }] }]),
                json!({ "phase": "Failed", "conditions": [
                    { "type": "Ready", "status": "False" },
                    { "type": "DisruptionTarget", "status": "True" } ] }),
                action(Action::Ignore),
            ),
            (
                "onPodConditions FailJob message",
                json!([
                    { "action": "Count", "onExitCodes": { "operator": "In", "values": [9] } },
                    { "action": "FailJob", "onPodConditions": [
                        { "type": "Other", "status": "True" },
                        { "type": "DisruptionTarget", "status": "True" } ] }
                ]),
                json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True" }],
                        "containerStatuses": [terminated("main", 1)] }),
                fail_job("Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 1"),
            ),
            (
                "onPodConditions status must match",
                json!([{ "action": "Ignore", "onPodConditions": [{ "type": "DisruptionTarget", "status": "False" }] }]),
                json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True" }] }),
                Match::default(),
            ),
            (
                "first matching rule wins",
                json!([
                    { "action": "Ignore", "onExitCodes": { "operator": "In", "values": [1] } },
                    { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [1] } }
                ]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 1)] }),
                action(Action::Ignore),
            ),
            (
                "unknown action falls through to next rule",
                json!([
                    { "action": "Explode", "onExitCodes": { "operator": "In", "values": [1] } },
                    { "action": "Count", "onExitCodes": { "operator": "In", "values": [1] } }
                ]),
                json!({ "phase": "Failed", "containerStatuses": [terminated("main", 1)] }),
                action(Action::Count),
            ),
            ("no status means no match", exit_42_fail_job.clone(), Value::Null, Match::default()),
        ];
        for (name, rules, status, want) in cases {
            let got = match_pod_failure_policy(&policy(rules), &[], &failed_pod(status));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn fail_job_uses_set_condition_reason_of_matching_rule() {
        let job = json!({ "spec": { "podFailurePolicy": { "rules": [
            { "action": "Ignore", "onExitCodes": { "operator": "In", "values": [3] }, "setConditionReason": "Nope" },
            { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] }, "setConditionReason": "BadExit" },
            { "action": "FailJob", "onPodConditions": [{ "type": "DisruptionTarget" }] }
        ] } } });
        let reasons = set_condition_reasons_from_json(&job);
        assert_eq!(reasons, vec![Some("Nope".to_string()), Some("BadExit".to_string()), None]);
        let pol: PodFailurePolicy = serde_json::from_value(job["spec"]["podFailurePolicy"].clone()).unwrap();

        let by_exit = failed_pod(json!({ "containerStatuses": [terminated("main", 42)] }));
        let m = match_pod_failure_policy(&pol, &reasons, &by_exit);
        assert_eq!(m.condition_reason.as_deref(), Some("BadExit"));
        assert_eq!(m.action, Some(Action::FailJob));

        let by_cond = failed_pod(json!({ "conditions": [{ "type": "DisruptionTarget", "status": "True" }] }));
        let m = match_pod_failure_policy(&pol, &reasons, &by_cond);
        assert_eq!(m.condition_reason.as_deref(), Some("PodFailurePolicy"));

        let ignored = failed_pod(json!({ "containerStatuses": [terminated("main", 3)] }));
        let m = match_pod_failure_policy(&pol, &reasons, &ignored);
        assert_eq!(m, action(Action::Ignore));
        assert_eq!(set_condition_reasons_from_json(&json!({})), Vec::<Option<String>>::new());
    }

    #[test]
    fn action_round_trip() {
        for a in [Action::FailJob, Action::FailIndex, Action::Ignore, Action::Count] {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Action::parse("failjob"), None);
    }
}
