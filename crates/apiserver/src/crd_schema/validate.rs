//! Validation of a custom resource against its structural schema, with kube-apiserver's causes:
//! kube-openapi's validators turned into field errors (`kubeOpenAPIResultToFieldErrors`),
//! `x-kubernetes-list-type` set/map uniqueness (`listtype`), then the CEL rules unless an earlier
//! error blocks them (`hasBlockingErr`).

use base64::Engine as _;
use serde_json::Value;

use super::{Structural, child, go_float, index};
use crate::error::Cause;

/// Where kube-openapi says values are (`in body`).
const IN: &str = "body";

/// `field.Invalid`'s rendering of a value: strings quoted, numbers and booleans bare, the rest JSON.
fn field_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => {
            n.as_i64().map(|i| i.to_string()).unwrap_or_else(|| go_float(n.as_f64().unwrap_or_default()))
        }
        other => other.to_string(),
    }
}

/// The JSON type of a value as kube-openapi names it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_invalid(path: &str, ty: &str, got: &str) -> Cause {
    Cause {
        reason: "FieldValueTypeInvalid",
        field: path.to_string(),
        message: format!("Invalid value: {got:?}: {path} in {IN} must be of type {ty}: {got:?}"),
    }
}

/// Validates `v` at `path` against `s`, as kube-openapi's `SchemaValidator` does.
fn validate_node(s: &Structural, path: &str, v: &Value, out: &mut Vec<Cause>) {
    // typeValidator. Like upstream's, it does not stop the validators that apply to the value's
    // actual kind (an enum, say).
    let got = json_type(v);
    let integral_float =
        matches!(v, Value::Number(n) if !(n.is_i64() || n.is_u64()) && n.as_f64().is_some_and(|f| f.fract() == 0.0));
    if v.is_null() {
        if !s.ty.is_empty() && !s.nullable {
            out.push(type_invalid(path, &s.ty, "null"));
        }
    } else if s.int_or_string {
        // Upstream gives an int-or-string the types integer and string.
        if !matches!(got, "integer" | "string") && !integral_float {
            out.push(type_invalid(path, "integer,string", got));
        }
    } else if !s.ty.is_empty() {
        let ok = s.ty == got || (s.ty == "number" && got == "integer") || (s.ty == "integer" && integral_float);
        if !ok {
            out.push(type_invalid(path, &s.ty, got));
        }
    }
    if !v.is_null() {
        for b in &s.validation.all_of {
            validate_node(b, path, v, out);
        }
    }
    match v {
        Value::String(text) => string(s, path, text, out),
        Value::Number(_) => number(s, path, v, out),
        Value::Array(items) => array(s, path, items, out),
        Value::Object(o) => object(s, path, o, out),
        Value::Bool(_) | Value::Null => {}
    }
    // basicCommonValidator: enum
    if let Some(values) = &s.validation.enumeration
        && !values.iter().any(|e| e == v || numbers_equal(e, v))
    {
        let supported: Vec<String> = values
            .iter()
            .map(|e| match e {
                Value::String(s) => format!("{s:?}"),
                other => format!("{:?}", other.to_string()),
            })
            .collect();
        out.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!("Unsupported value: {}: supported values: {}", field_value(v), supported.join(", ")),
        });
    }
}

fn numbers_equal(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
}

fn invalid(path: &str, v: &Value, detail: String) -> Cause {
    Cause::invalid_rendered(path, &field_value(v), &detail)
}

fn string(s: &Structural, path: &str, text: &str, out: &mut Vec<Cause>) {
    let vv = &s.validation;
    let n = path;
    let len = text.chars().count() as i64;
    let v = Value::String(text.to_string());
    if let Some(max) = vv.max_length
        && len > max
    {
        let bytes = if max == 1 { "byte" } else { "bytes" };
        out.push(Cause {
            reason: "FieldValueTooLong",
            field: path.to_string(),
            message: format!("Too long: may not be more than {max} {bytes}"),
        });
    }
    if let Some(min) = vv.min_length
        && len < min
    {
        out.push(invalid(path, &v, format!("{n} in {IN} should be at least {min} chars long")));
    }
    if let Some((p, re)) = &vv.pattern
        && !re.is_match(text)
    {
        out.push(invalid(path, &v, format!("{n} in {IN} should match '{p}'")));
    }
    if !format_ok(&s.format, text) {
        out.push(invalid(path, &v, format!("{n} in {IN} must be of type {}: {text:?}", s.format)));
    }
}

/// The string formats kube-apiserver checks (kube-openapi's `strfmt.Default`); others pass.
fn format_ok(format: &str, text: &str) -> bool {
    match format {
        "date-time" => {
            jiff::Timestamp::strptime("%Y-%m-%dT%H:%M:%S%.f%:z", text).is_ok()
                || text.parse::<jiff::Timestamp>().is_ok()
        }
        "date" => jiff::civil::Date::strptime("%Y-%m-%d", text).is_ok(),
        "byte" => base64::engine::general_purpose::STANDARD.decode(text).is_ok(),
        "uuid" => {
            let hex: String = text.chars().filter(|c| *c != '-').collect();
            hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()) && text.len() <= 36
        }
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => text
            .split_once('/')
            .is_some_and(|(ip, bits)| ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()),
        _ => true,
    }
}

fn number(s: &Structural, path: &str, v: &Value, out: &mut Vec<Cause>) {
    let vv = &s.validation;
    let n = path;
    let f = v.as_f64().unwrap_or_default();
    // IsValueValidAgainstRange: an int32 that does not fit is a plain error upstream, reported
    // at no field.
    if s.ty == "integer" && s.format == "int32" && (f < i32::MIN as f64 || f > i32::MAX as f64) {
        out.push(Cause::invalid_rendered(
            "<nil>",
            "\"\"",
            &format!("Checked value must be of type integer with format int32 in {n}"),
        ));
        return;
    }
    if let Some(m) = vv.multiple_of
        && m > 0.0
        && (f / m).fract() != 0.0
    {
        out.push(invalid(path, v, format!("{n} in {IN} should be a multiple of {}", go_float(m))));
    }
    if let Some(max) = vv.maximum
        && (f > max || (vv.exclusive_maximum && f == max))
    {
        let cmp = if vv.exclusive_maximum { "less than" } else { "less than or equal to" };
        out.push(invalid(path, v, format!("{n} in {IN} should be {cmp} {}", go_float(max))));
    }
    if let Some(min) = vv.minimum
        && (f < min || (vv.exclusive_minimum && f == min))
    {
        let cmp = if vv.exclusive_minimum { "greater than" } else { "greater than or equal to" };
        out.push(invalid(path, v, format!("{n} in {IN} should be {cmp} {}", go_float(min))));
    }
}

fn array(s: &Structural, path: &str, items: &[Value], out: &mut Vec<Cause>) {
    let vv = &s.validation;
    if let Some(is) = &s.items {
        for (i, item) in items.iter().enumerate() {
            validate_node(is, &index(path, i), item, out);
        }
    }
    count_bounds(path, items.len(), vv.min_items, vv.max_items, "items", out);
    if vv.unique_items && items.iter().enumerate().any(|(i, a)| items[..i].contains(a)) {
        out.push(Cause::invalid_rendered(path, "\"\"", &format!("{path} in {IN} shouldn't contain duplicates")));
    }
}

/// `minItems`/`maxItems` of a list, `minProperties`/`maxProperties` of an object (`what`): too
/// few is kube-openapi's message, too many is `field.TooMany` (in items, whatever is counted).
fn count_bounds(path: &str, len: usize, min: Option<i64>, max: Option<i64>, what: &str, out: &mut Vec<Cause>) {
    let len = len as i64;
    if let Some(min) = min.filter(|m| len < *m) {
        out.push(Cause::invalid_rendered(
            path,
            &len.to_string(),
            &format!("{path} in {IN} should have at least {min} {what}"),
        ));
    }
    if let Some(max) = max.filter(|m| len > *m) {
        let word = if max == 1 { "item" } else { "items" };
        out.push(Cause {
            reason: "FieldValueTooMany",
            field: path.to_string(),
            message: format!("Too many: {len}: must have at most {max} {word}"),
        });
    }
}

fn object(s: &Structural, path: &str, o: &serde_json::Map<String, Value>, out: &mut Vec<Cause>) {
    let vv = &s.validation;
    count_bounds(path, o.len(), vv.min_properties, vv.max_properties, "properties", out);
    if let Some(ap) = s.additional_schema() {
        for (k, v) in o {
            if !s.properties.contains_key(k) {
                validate_node(ap, &child(path, k), v, out);
            }
        }
    }
    for (k, p) in &s.properties {
        if let Some(v) = o.get(k) {
            validate_node(p, &child(path, k), v, out);
        }
    }
    for r in &vv.required {
        if !o.contains_key(r) {
            out.push(Cause::required(child(path, r)));
        }
    }
}

/// `ValidateListSetsAndMaps`: duplicates in `x-kubernetes-list-type: set` and `map` lists.
fn list_types(s: &Structural, path: &str, v: &Value, out: &mut Vec<Cause>) {
    match v {
        Value::Array(items) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in duplicates(items) {
                        out.push(duplicate(index(path, i), &items[i]));
                    }
                }
                Some("map") => {
                    if let Some(i) = items.iter().position(|x| !x.is_null() && !x.is_object()) {
                        out.push(invalid(
                            &index(path, i),
                            &items[i],
                            "must be an object for an array of list-type map".into(),
                        ));
                        return;
                    }
                    let keys: Vec<Value> = items
                        .iter()
                        .map(|x| {
                            let m: serde_json::Map<String, Value> = s
                                .list_map_keys
                                .iter()
                                .filter_map(|k| x.get(k).map(|v| (k.clone(), v.clone())))
                                .collect();
                            Value::Object(m)
                        })
                        .collect();
                    for i in duplicates(&keys) {
                        out.push(duplicate(index(path, i), &keys[i]));
                    }
                }
                _ => {}
            }
            if let Some(is) = &s.items {
                for (i, x) in items.iter().enumerate() {
                    list_types(is, &index(path, i), x, out);
                }
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                if let Some(p) = s.properties.get(k) {
                    list_types(p, &child(path, k), x, out);
                } else if let Some(ap) = s.additional_schema() {
                    list_types(ap, &super::key(path, k), x, out);
                }
            }
        }
        _ => {}
    }
}

/// Indices of the second occurrence of each repeated value (`validateListSet`).
fn duplicates(items: &[Value]) -> Vec<usize> {
    let mut out = vec![];
    for (i, x) in items.iter().enumerate() {
        let before = items[..i].iter().filter(|y| *y == x).count();
        if before == 1 {
            out.push(i);
        }
    }
    out
}

fn duplicate(field: String, v: &Value) -> Cause {
    Cause { reason: "FieldValueDuplicate", field, message: format!("Duplicate value: {}", field_value(v)) }
}

/// Whether kube-apiserver stops before running CEL rules (`hasBlockingErr`).
fn blocking(causes: &[Cause]) -> bool {
    causes.iter().any(|c| {
        matches!(
            c.reason,
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        )
    })
}

/// The CEL rules of the whole object, as `celValidator.Validate` runs them after the schema:
/// not at all without rules, not when an earlier error blocks them.
fn with_rules(s: &Structural, obj: &Value, old: Option<&Value>, mut causes: Vec<Cause>) -> Vec<Cause> {
    if !s.rules_in_tree {
        return causes;
    }
    if blocking(&causes) {
        causes.push(Cause::invalid_rendered(
            "<nil>",
            "null",
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
    } else {
        super::cel::validate_tree(s, "", obj, old, &mut causes);
    }
    causes
}

/// Every problem of a custom resource (`obj`, and the stored `old` on update) against its
/// schema, as `customResourceStrategy.Validate`/`ValidateUpdate` report them.
pub fn validate_object(s: &Structural, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = vec![];
    validate_node(s, "", obj, &mut causes);
    // Upstream checks list types on update only if the old object passed (ratcheting).
    let mut old_list = vec![];
    if let Some(old) = old {
        list_types(s, "", old, &mut old_list);
    }
    if old_list.is_empty() {
        list_types(s, "", obj, &mut causes);
    }
    with_rules(s, obj, old, causes)
}

/// A write to the status subresource (`statusStrategy.ValidateUpdate`): the new `status`
/// against the schema's `status` property, with paths under `status`; list types and CEL rules
/// of the whole object.
pub fn validate_status(s: &Structural, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = vec![];
    if let (Some(status), Some(schema)) = (obj.get("status"), s.properties.get("status")) {
        validate_node(schema, "status", status, &mut causes);
    }
    let mut new_list = vec![];
    list_types(s, "", obj, &mut new_list);
    if !new_list.is_empty() {
        let mut old_list = vec![];
        if let Some(old) = old {
            list_types(s, "", old, &mut old_list);
        }
        if old_list.is_empty() {
            causes.extend(new_list);
        }
    }
    with_rules(s, obj, old, causes)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::compile;
    use super::*;

    fn schema() -> Structural {
        compile(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["mode"], "properties": {
                "mode": {"type": "string", "enum": ["Any", "All"]},
                "replicas": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1.5},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "when": {"type": "string", "format": "date-time"},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "x-kubernetes-list-type": "set"},
                "jobs": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "maybe": {"type": "string", "nullable": true}},
                "x-kubernetes-validations": [{"rule": "self.mode != 'All' || has(self.replicas)", "message": "All needs replicas"}]}}}))
    }

    fn run(spec: Value) -> Vec<String> {
        validate_object(&schema(), &json!({"spec": spec}), None)
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    const BLOCKED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

    #[test]
    fn values_are_validated_with_kube_apiserver_messages() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("valid", json!({"mode": "Any", "replicas": 3, "port": "http", "maybe": null}), vec![]),
            (
                "a wrong type is not the only error: the enum is still checked",
                json!({"mode": 5}),
                vec![
                    "spec.mode: Invalid value: \"integer\": spec.mode in body must be of type string: \"integer\"",
                    "spec.mode: Unsupported value: 5: supported values: \"Any\", \"All\"",
                    BLOCKED,
                ],
            ),
            (
                "enum",
                json!({"mode": "Some"}),
                vec!["spec.mode: Unsupported value: \"Some\": supported values: \"Any\", \"All\"", BLOCKED],
            ),
            (
                "wrong type",
                json!({"mode": "Any", "replicas": "three"}),
                vec![
                    "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
                    BLOCKED,
                ],
            ),
            ("required", json!({}), vec!["spec.mode: Required value", BLOCKED]),
            (
                "minimum",
                json!({"mode": "Any", "replicas": 0}),
                vec!["spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"],
            ),
            (
                "maximum",
                json!({"mode": "Any", "replicas": 11}),
                vec!["spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"],
            ),
            (
                "exclusive maximum",
                json!({"mode": "Any", "ratio": 1.5}),
                vec!["spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5"],
            ),
            (
                "int32 range",
                json!({"mode": "Any", "replicas": 3000000000u64}),
                vec![
                    "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.replicas",
                ],
            ),
            (
                "maxLength",
                json!({"mode": "Any", "name": "abcdef"}),
                vec!["spec.name: Too long: may not be more than 5 bytes", BLOCKED],
            ),
            (
                "minLength and pattern",
                json!({"mode": "Any", "name": "A"}),
                vec![
                    "spec.name: Invalid value: \"A\": spec.name in body should be at least 2 chars long",
                    "spec.name: Invalid value: \"A\": spec.name in body should match '^[a-z]+$'",
                ],
            ),
            (
                "date-time",
                json!({"mode": "Any", "when": "yesterday"}),
                vec![
                    "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
                ],
            ),
            ("date-time ok", json!({"mode": "Any", "when": "2026-11-27T06:00:00Z"}), vec![]),
            (
                "int-or-string",
                json!({"mode": "Any", "port": true}),
                vec![
                    "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                    BLOCKED,
                ],
            ),
            (
                "maxItems and set duplicates",
                json!({"mode": "Any", "tags": ["a", "a", "b"]}),
                vec![
                    "spec.tags: Too many: 3: must have at most 2 items",
                    "spec.tags[1]: Duplicate value: \"a\"",
                    BLOCKED,
                ],
            ),
            (
                "map list duplicates",
                json!({"mode": "Any", "jobs": [{"name": "x"}, {"name": "x"}]}),
                vec!["spec.jobs[1]: Duplicate value: {\"name\":\"x\"}"],
            ),
            ("CEL rule", json!({"mode": "All"}), vec!["spec: Invalid value: All needs replicas"]),
        ];
        for (what, spec, want) in cases {
            assert_eq!(run(spec), want, "{what}");
        }
    }

    #[test]
    fn status_writes_validate_the_status_schema_at_status_paths() {
        let s = compile(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["x"], "x-kubernetes-validations": [{"rule": "has(self.x)"}]},
            "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["Running", "Done"]}}}}}));
        let got: Vec<String> = validate_status(&s, &json!({"status": {"phase": "Lost"}}), None)
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            ["status.phase: Unsupported value: \"Lost\": supported values: \"Running\", \"Done\"", BLOCKED]
        );
        assert!(
            validate_status(&s, &json!({"status": {"phase": "Done"}}), None).is_empty(),
            "spec is not checked on a status write"
        );
    }
}
