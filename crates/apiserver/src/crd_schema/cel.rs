//! `x-kubernetes-validations`: CEL rules compiled with kube-cel when a CRD is registered and
//! evaluated per node with `self` (and `oldSelf` on updates where the node correlates), worded as
//! k8s.io/apiextensions-apiserver pkg/apiserver/schema/cel/validation.go words its errors.

use std::error::Error as _;

use serde_json::Value;

use super::{child, index};
use crate::error::Cause;

/// One rule as written in the schema.
#[derive(Debug, Clone, Default)]
struct Rule {
    rule: String,
    message: String,
    message_expression: String,
    reason: Option<String>,
    field_path: String,
    optional_old_self: Option<bool>,
}

impl Rule {
    fn parse(v: &Value) -> Rule {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        Rule {
            rule: s("rule"),
            message: s("message"),
            message_expression: s("messageExpression"),
            reason: v.get("reason").and_then(Value::as_str).map(str::to_string),
            field_path: s("fieldPath"),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// The rule as Go renders the internal `apiextensions.ValidationRule` in a `field.Invalid`
    /// (JSON, with its untagged field names).
    fn rendered(&self) -> String {
        // Built by hand: upstream's field order, which a JSON map would sort.
        fn j<T: serde::Serialize>(v: &T) -> String {
            serde_json::to_string(v).unwrap_or_default()
        }
        format!(
            "{{\"Rule\":{},\"Message\":{},\"MessageExpression\":{},\"Reason\":{},\"FieldPath\":{},\"OptionalOldSelf\":{}}}",
            j(&self.rule),
            j(&self.message),
            j(&self.message_expression),
            j(&self.reason),
            j(&self.field_path),
            j(&self.optional_old_self),
        )
    }

    /// `ruleErrorString`.
    fn error_string(&self) -> &str {
        if self.message.trim().is_empty() { self.rule.trim() } else { self.message.trim() }
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule.trim())
        } else {
            self.message.trim().to_string()
        }
    }
}

/// The rules of one schema node, compiled. The CEL programs are those of a copy of the node
/// that keeps its own rules and drops its descendants', so evaluating it runs exactly this
/// node's rules, with values converted by the node's schema (formats, escaped field names).
pub struct Rules {
    rules: Vec<Rule>,
    compiled: kube_cel::CompiledSchema,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").field("rules", &self.rules).finish()
    }
}

/// A copy of `s` without the rules of anything below it.
fn without_nested_rules(s: &Value, keep_own: bool) -> Value {
    match s {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| keep_own || k.as_str() != "x-kubernetes-validations")
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" => match v {
                            Value::Object(p) => Value::Object(
                                p.iter().map(|(k, v)| (k.clone(), without_nested_rules(v, false))).collect(),
                            ),
                            other => other.clone(),
                        },
                        "items" | "additionalProperties" => without_nested_rules(v, false),
                        "allOf" | "anyOf" | "oneOf" => match v {
                            Value::Array(a) => Value::Array(a.iter().map(|b| without_nested_rules(b, false)).collect()),
                            other => other.clone(),
                        },
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

impl Rules {
    /// The node's rules, compiled; `None` when it has none.
    pub fn compile(s: &Value) -> Option<Rules> {
        let raw = s.get("x-kubernetes-validations")?.as_array()?;
        if raw.is_empty() {
            return None;
        }
        Some(Rules {
            rules: raw.iter().map(Rule::parse).collect(),
            compiled: kube_cel::compile_schema(&without_nested_rules(s, true)),
        })
    }

    /// Evaluates the rules against `value` (and `old` where the node correlates with the old
    /// object), as `Validator.validateExpressions` does. `ty` is the node's schema type.
    pub fn validate(&self, path: &str, ty: &str, value: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
        if value.is_null() {
            return;
        }
        let Err(errors) = kube_cel::validate_compiled(&self.compiled, value, old) else { return };
        // kube-cel reports each rule once, in order; map each back to its rule for the reason
        // and the wording.
        for e in errors.iter() {
            let Some(rule) = self.rules.iter().find(|r| r.rule == e.rule) else {
                // A compile error kube-cel reports at run time (a CRD stored before rules were
                // checked): upstream's "rule compile error".
                out.push(Cause::invalid_rendered(
                    path,
                    &format!("{ty:?}"),
                    &format!("rule compile error: {}", e.message),
                ));
                continue;
            };
            match e.kind {
                kube_cel::ErrorKind::ValidationFailure => {
                    let at = if rule.field_path.is_empty() {
                        path.to_string()
                    } else {
                        let fp = rule.field_path.trim();
                        if fp.starts_with('.') || fp.starts_with('[') {
                            format!("{path}{}", fp)
                        } else {
                            child(path, fp)
                        }
                    };
                    // messageExpression's result, else the message, else "failed rule: <rule>".
                    let detail = if !rule.message_expression.is_empty() && e.message != rule.message {
                        e.message.clone()
                    } else {
                        rule.message_or_default()
                    };
                    // Objects and arrays are not printed (`field.OmitValueType`); scalars are.
                    let value_text = match value {
                        Value::Object(_) | Value::Array(_) => None,
                        Value::String(s) => Some(format!("{s:?}")),
                        other => Some(other.to_string()),
                    };
                    out.push(match rule.reason.as_deref() {
                        Some("FieldValueForbidden") => Cause::forbidden(at, &detail),
                        Some("FieldValueRequired") => Cause::required_because(at, &detail),
                        Some("FieldValueDuplicate") => Cause {
                            reason: "FieldValueDuplicate",
                            field: at,
                            message: match value_text {
                                Some(v) => format!("Duplicate value: {v}"),
                                None => "Duplicate value".into(),
                            },
                        },
                        _ => match value_text {
                            Some(v) => Cause::invalid_rendered(at, &v, &detail),
                            None => Cause {
                                reason: "FieldValueInvalid",
                                field: at,
                                message: format!("Invalid value: {detail}"),
                            },
                        },
                    });
                }
                _ => {
                    // Evaluation errors: "<error> evaluating rule: <rule>", with the node's type.
                    let cause = e.source().map(|s| s.to_string()).unwrap_or_else(|| e.message.clone());
                    out.push(Cause::invalid_rendered(
                        path,
                        &format!("{ty:?}"),
                        &format!("{cause} evaluating rule: {}", rule.error_string()),
                    ));
                }
            }
        }
    }
}

/// The compile errors of a node's rules, at `<path>.x-kubernetes-validations[i].rule` (or
/// `.messageExpression`), as kube-apiserver reports them when the CRD is written.
pub(super) fn compile_errors(s: &Value, path: &str) -> Vec<Cause> {
    let Some(raw) = s.get("x-kubernetes-validations") else { return vec![] };
    let at = child(path, "x-kubernetes-validations");
    let Some(raw) = raw.as_array() else {
        return vec![Cause::invalid_rendered(at, "\"\"", "must be a list of validation rules")];
    };
    let mut causes = vec![];
    for (i, r) in raw.iter().enumerate() {
        let rule = Rule::parse(r);
        let at = index(&at, i);
        if !r.is_object() || !r.get("rule").is_some_and(Value::is_string) {
            causes.push(Cause::required(child(&at, "rule")));
            continue;
        }
        if rule.rule.trim().is_empty() {
            continue;
        }
        if let Err(e) = kube_cel::cel::Program::compile(&rule.rule) {
            causes.push(Cause::invalid_rendered(
                child(&at, "rule"),
                &rule.rendered(),
                &format!("compilation failed: {e}"),
            ));
        }
        if !rule.message_expression.is_empty()
            && let Err(e) = kube_cel::cel::Program::compile(&rule.message_expression)
        {
            causes.push(Cause::invalid_rendered(
                child(&at, "messageExpression"),
                &rule.rendered(),
                &format!("messageExpression compilation failed: {e}"),
            ));
        }
    }
    causes
}

/// Walks `value` along `s`, evaluating every node's rules: `oldSelf` reaches a node through
/// object properties and map keys, and through `x-kubernetes-list-type: map` items matched by
/// their keys (upstream's correlation); elsewhere transition rules are skipped.
pub(super) fn validate_tree(
    s: &super::Structural,
    path: &str,
    value: &Value,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    if let Some(rules) = &s.rules {
        rules.validate(path, &s.ty, value, old, out);
    }
    for branch in &s.validation.all_of {
        if let Some(rules) = &branch.rules {
            rules.validate(path, &s.ty, value, old, out);
        }
    }
    match value {
        Value::Object(o) => {
            let correlatable = s.map_type.as_deref().is_none_or(|t| t == "granular" || t == "atomic");
            for (k, v) in o {
                let old_v = old.filter(|_| correlatable).and_then(|o| o.get(k));
                if let Some(p) = s.properties.get(k) {
                    validate_tree(p, &child(path, k), v, old_v, out);
                } else if let Some(ap) = s.additional_schema() {
                    validate_tree(ap, &super::key(path, k), v, old_v, out);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = &s.items else { return };
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_item = match (s.list_type.as_deref(), old_items) {
                    (Some("map"), Some(olds)) => {
                        let key_of = |x: &Value| -> Vec<Value> {
                            s.list_map_keys.iter().map(|k| x.get(k).cloned().unwrap_or(Value::Null)).collect()
                        };
                        let want = key_of(item);
                        olds.iter().find(|o| key_of(o) == want)
                    }
                    _ => None,
                };
                validate_tree(item_schema, &index(path, i), item, old_item, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::compile;
    use super::*;

    fn run(schema: Value, obj: Value, old: Option<Value>) -> Vec<String> {
        let s = compile(&schema);
        let mut out = vec![];
        validate_tree(&s, "", &obj, old.as_ref(), &mut out);
        out.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn rules_report_their_message_as_kube_apiserver_does() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self < 100"}]}},
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "self.min > 0", "messageExpression": "'min is ' + string(self.min)", "fieldPath": ".min"},
                {"rule": "self.max != 7", "reason": "FieldValueForbidden", "message": "not seven"}]}}});
        let cases = [
            ("valid", json!({"spec": {"min": 1, "max": 2}}), vec![]),
            (
                "message, messageExpression with fieldPath, scalar value printed",
                json!({"spec": {"min": 0, "max": -1}}),
                vec!["spec: Invalid value: min must not exceed max", "spec.min: Invalid value: min is 0"],
            ),
            ("reason", json!({"spec": {"min": 1, "max": 7}}), vec!["spec: Forbidden: not seven"]),
            (
                "default message on a scalar",
                json!({"spec": {"min": 1, "max": 200}}),
                vec!["spec.max: Invalid value: 200: failed rule: self < 100"],
            ),
        ];
        for (what, obj, want) in cases {
            assert_eq!(run(schema.clone(), obj, None), want, "{what}");
        }
    }

    #[test]
    fn transition_rules_run_only_on_update_and_through_map_list_keys() {
        let schema = json!({"type": "object", "properties": {"items": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]}}}}}});
        let new = json!({"items": [{"name": "b", "size": 1}, {"name": "a", "size": 5}]});
        assert_eq!(run(schema.clone(), new.clone(), None), Vec::<String>::new(), "create: no oldSelf");
        let old = json!({"items": [{"name": "a", "size": 3}, {"name": "b", "size": 2}]});
        assert_eq!(run(schema, new, Some(old)), ["items[0].size: Invalid value: 1: may not shrink"]);
    }

    #[test]
    fn a_rule_that_fails_at_run_time_is_an_error_naming_the_rule() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-validations": [{"rule": "self.missing > 1"}]}}});
        let got = run(schema, json!({"spec": {}}), None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("spec: Invalid value: \"object\": "), "{got:?}");
        assert!(got[0].ends_with(" evaluating rule: self.missing > 1"), "{got:?}");
    }
}
