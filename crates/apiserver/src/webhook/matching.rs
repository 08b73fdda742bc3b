//! Which webhooks a request calls, as kube-apiserver decides (k8s.io/apiserver
//! pkg/admission/plugin/webhook/{predicates/rules,predicates/namespace,predicates/object}).
//!
//! `matchPolicy` needs no work here: this server serves each resource at one version, so an
//! `Equivalent` match is an `Exact` one. `matchConditions` (CEL) are evaluated by
//! [`super::policy::conditions_hold`] when the webhook is about to be called.

use std::collections::BTreeMap;

use serde_json::Value;

use super::config::{Hook, Rule};
use crate::selector::LabelSelector;

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What the rules of a webhook are matched against.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    /// `""` for the object itself.
    pub subresource: &'a str,
    /// The request's namespace; for a Namespace object, its own name (as upstream sets it).
    pub namespace: &'a str,
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

/// `rules.Matcher.Matches`.
pub fn rule_matches(rule: &Rule, a: &Attributes<'_>) -> bool {
    let is_namespace = a.group.is_empty() && a.resource == "namespaces";
    let scope = match rule.scope.as_str() {
        "*" => true,
        "Namespaced" => !is_namespace && !a.namespace.is_empty(),
        "Cluster" => is_namespace || a.namespace.is_empty(),
        _ => false,
    };
    let operation = rule.operations.iter().any(|o| o == "*" || o == a.operation.as_str());
    let resource = rule.resources.iter().any(|rs| {
        let (res, sub) = rs.split_once('/').unwrap_or((rs, ""));
        (res == "*" || res == a.resource) && (sub == "*" || sub == a.subresource)
    });
    scope
        && operation
        && exact_or_wildcard(&rule.api_groups, a.group)
        && exact_or_wildcard(&rule.api_versions, a.version)
        && resource
}

/// Whether any rule of `hook` matches.
pub fn rules_match(hook: &Hook, a: &Attributes<'_>) -> bool {
    hook.rules.iter().any(|r| rule_matches(r, a))
}

/// The labels of an object, as a map.
pub fn labels_of(obj: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let obj = obj?;
    Some(
        obj.pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default(),
    )
}

/// `MatchNamespaceSelector`: a request for a cluster-scoped object other than a Namespace is
/// never exempted; otherwise the namespace's labels (`namespace_labels`; for a Namespace itself,
/// its object's) must match.
pub fn namespace_matches(hook: &Hook, a: &Attributes<'_>, namespace_labels: Option<&BTreeMap<String, String>>) -> bool {
    namespace_selector_matches(&hook.namespace_selector, a, namespace_labels)
}

/// [`namespace_matches`] for any namespace selector (a policy's too).
pub fn namespace_selector_matches(
    selector: &LabelSelector,
    a: &Attributes<'_>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let is_namespace = a.group.is_empty() && a.resource == "namespaces";
    if a.namespace.is_empty() && !is_namespace {
        return true;
    }
    if selector.is_empty() {
        return true;
    }
    namespace_labels.is_some_and(|l| selector.matches(l))
}

/// `MatchObjectSelector`: the new or the old object's labels match.
pub fn object_matches(hook: &Hook, object: Option<&Value>, old: Option<&Value>) -> bool {
    object_selector_matches(&hook.object_selector, object, old)
}

/// [`object_matches`] for any object selector (a policy's too).
pub fn object_selector_matches(selector: &LabelSelector, object: Option<&Value>, old: Option<&Value>) -> bool {
    if selector.is_empty() {
        return true;
    }
    [object, old].into_iter().any(|o| labels_of(o).is_some_and(|l| selector.matches(&l)))
}

/// The resources whose webhooks kube-apiserver never calls, so a bad webhook cannot lock
/// everyone out of fixing it (`IsExemptAdmissionConfigurationResource`).
pub fn exempt(group: &str) -> bool {
    group == super::GROUP
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::config::{Phase, hooks_of};
    use serde_json::json;

    fn rule(ops: &[&str], groups: &[&str], resources: &[&str], scope: &str) -> Rule {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        Rule {
            operations: s(ops),
            api_groups: s(groups),
            api_versions: s(&["*"]),
            resources: s(resources),
            scope: scope.into(),
        }
    }

    fn attrs<'a>(op: Operation, group: &'a str, resource: &'a str, sub: &'a str, ns: &'a str) -> Attributes<'a> {
        Attributes { operation: op, group, version: "v1", resource, subresource: sub, namespace: ns }
    }

    #[test]
    fn rules_match_groups_resources_subresources_operations_and_scope_as_upstream() {
        use Operation::*;
        let cases = [
            ("exact", rule(&["CREATE"], &[""], &["pods"], "*"), attrs(Create, "", "pods", "", "default"), true),
            (
                "other operation",
                rule(&["CREATE"], &[""], &["pods"], "*"),
                attrs(Update, "", "pods", "", "default"),
                false,
            ),
            ("operation wildcard", rule(&["*"], &[""], &["pods"], "*"), attrs(Delete, "", "pods", "", "default"), true),
            ("other group", rule(&["*"], &["batch"], &["pods"], "*"), attrs(Create, "", "pods", "", "default"), false),
            ("resource wildcard, main", rule(&["*"], &["*"], &["*"], "*"), attrs(Create, "", "pods", "", "d"), true),
            (
                "resource wildcard skips subresources",
                rule(&["*"], &["*"], &["*"], "*"),
                attrs(Update, "", "pods", "status", "d"),
                false,
            ),
            ("pods/status", rule(&["*"], &[""], &["pods/status"], "*"), attrs(Update, "", "pods", "status", "d"), true),
            (
                "pods/status not the pod",
                rule(&["*"], &[""], &["pods/status"], "*"),
                attrs(Update, "", "pods", "", "d"),
                false,
            ),
            ("*/*", rule(&["*"], &[""], &["*/*"], "*"), attrs(Update, "", "pods", "status", "d"), true),
            (
                "pods/* (the pod too, as upstream)",
                rule(&["*"], &[""], &["pods/*"], "*"),
                attrs(Update, "", "pods", "", "d"),
                true,
            ),
            ("*/status", rule(&["*"], &["*"], &["*/status"], "*"), attrs(Update, "batch", "jobs", "status", "d"), true),
            (
                "namespaced scope, namespaced object",
                rule(&["*"], &[""], &["*"], "Namespaced"),
                attrs(Create, "", "pods", "", "d"),
                true,
            ),
            (
                "namespaced scope, node",
                rule(&["*"], &[""], &["*"], "Namespaced"),
                attrs(Create, "", "nodes", "", ""),
                false,
            ),
            (
                "namespaced scope, a namespace",
                rule(&["*"], &[""], &["*"], "Namespaced"),
                attrs(Create, "", "namespaces", "", "ns1"),
                false,
            ),
            (
                "cluster scope, a namespace",
                rule(&["*"], &[""], &["*"], "Cluster"),
                attrs(Create, "", "namespaces", "", "ns1"),
                true,
            ),
            ("cluster scope, a pod", rule(&["*"], &[""], &["*"], "Cluster"), attrs(Create, "", "pods", "", "d"), false),
        ];
        for (what, r, a, want) in cases {
            assert_eq!(rule_matches(&r, &a), want, "{what}");
        }
    }

    fn hook_with(selectors: Value) -> Hook {
        let mut h = json!({"name": "a.b.c", "clientConfig": {"url": "https://x"}, "rules": []});
        json_patch::merge(&mut h, &selectors);
        hooks_of(&json!({"metadata": {"name": "c"}, "webhooks": [h]}), Phase::Validating).remove(0)
    }

    #[test]
    fn namespace_selectors_match_the_namespaces_labels_and_never_exempt_cluster_objects() {
        let h = hook_with(json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}));
        let labels =
            |v: &[(&str, &str)]| v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
        let pod = attrs(Operation::Create, "", "pods", "", "d");
        assert!(namespace_matches(&h, &pod, Some(&labels(&[("team", "a")]))));
        assert!(!namespace_matches(&h, &pod, Some(&labels(&[("team", "b")]))));
        assert!(!namespace_matches(&h, &pod, None), "an unknown namespace matches no selector");
        assert!(namespace_matches(&h, &attrs(Operation::Create, "", "nodes", "", ""), None), "cluster-scoped");
        assert!(
            !namespace_matches(&h, &attrs(Operation::Create, "", "namespaces", "", "n"), Some(&labels(&[]))),
            "a namespace is matched by its own labels"
        );
        assert!(namespace_matches(&hook_with(json!({})), &pod, None), "no selector");
    }

    #[test]
    fn object_selectors_match_the_new_or_the_old_object() {
        let h = hook_with(
            json!({"objectSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}}),
        );
        let with = json!({"metadata": {"labels": {"app": "x"}}});
        let without = json!({"metadata": {}});
        assert!(object_matches(&h, Some(&with), None));
        assert!(object_matches(&h, Some(&without), Some(&with)), "the old object's labels");
        assert!(!object_matches(&h, Some(&without), Some(&without)));
        assert!(!object_matches(&h, None, None));
        assert!(object_matches(&hook_with(json!({})), None, None));
    }
}
