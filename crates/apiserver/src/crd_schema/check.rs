//! Whether a CRD's schemas are structural (`ValidateStructural` of
//! k8s.io/apiextensions-apiserver pkg/apiserver/schema/validation.go and complete.go), and
//! whether their CEL rules compile, with kube-apiserver's field paths and messages.

use serde_json::{Map, Value};

use super::{child, index, key};
use crate::error::Cause;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn required(field: String, detail: &str) -> Cause {
    Cause::required_because(field, detail)
}

fn forbidden(field: String, detail: &str) -> Cause {
    Cause::forbidden(field, detail)
}

/// `field.Invalid` with a value Go would print as a quoted string.
fn invalid_str(field: String, value: &str, detail: &str) -> Cause {
    Cause::invalid_rendered(field, &format!("{value:?}"), detail)
}

/// Every problem kube-apiserver finds in the schemas of a CRD object (`spec.versions[*].schema`):
/// a missing schema, a schema that is not structural, a CEL rule that does not compile. Paths
/// are those of kube-apiserver's internal CRD: `spec.validation.openAPIV3Schema` when every
/// version has the same schema (it is hoisted there), `spec.versions[i].schema.openAPIV3Schema`
/// otherwise.
pub fn check_crd(crd: &Value) -> Vec<Cause> {
    let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array) else { return vec![] };
    let schemas: Vec<Option<&Value>> = versions.iter().map(|v| v.get("schema")).collect();
    let identical = schemas.windows(2).all(|w| w[0] == w[1]);
    let mut causes = vec![];
    let mut check = |schema: Option<&Value>, path: String| match schema.and_then(|s| s.get("openAPIV3Schema")) {
        Some(s) => causes.extend(check_schema(s, &path)),
        None => causes.push(Cause::required(path)),
    };
    if identical && schemas.first().is_some_and(Option::is_some) {
        check(schemas[0], "spec.validation.openAPIV3Schema".into());
    } else {
        for (i, s) in schemas.iter().enumerate() {
            check(*s, format!("spec.versions[{i}].schema.openAPIV3Schema"));
        }
    }
    causes
}

/// The problems of one `openAPIV3Schema` at `path`: structural errors first (sorted, as
/// upstream sorts them); only a structural schema has its CEL rules compiled.
fn check_schema(s: &Value, path: &str) -> Vec<Cause> {
    let mut causes = vec![];
    if s.get("nullable").and_then(Value::as_bool) == Some(true) {
        causes.push(forbidden(child(path, "nullable"), "nullable cannot be true at the root"));
    }
    let structural = structural_errors(s, path);
    if !structural.is_empty() {
        causes.extend(structural);
        return causes;
    }
    rule_errors(s, path, &mut causes);
    causes
}

/// `ValidateStructural`: the invariants and completeness of a structural schema, sorted by
/// their text as upstream sorts them.
pub(super) fn structural_errors(s: &Value, path: &str) -> Vec<Cause> {
    let mut errs = vec![];
    invariants(s, Level::Root, path, &mut errs);
    if let Some(o) = s.as_object() {
        completeness(o, o, path, path, &mut errs);
    }
    errs.sort_by_key(|c| format!("{}: {}", c.field, c.message));
    errs.dedup();
    errs
}

fn str_field<'a>(s: &'a Map<String, Value>, k: &str) -> &'a str {
    s.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn flag(s: &Map<String, Value>, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn invariants(s: &Value, lvl: Level, path: &str, errs: &mut Vec<Cause>) {
    let Some(s) = s.as_object() else {
        errs.push(invalid_str(path.to_string(), "", "must be a JSON schema object"));
        return;
    };
    if let Some(t) = s.get("type")
        && !t.is_string()
    {
        errs.push(invalid_str(child(path, "type"), "", "must be a string"));
    }
    let ty = str_field(s, "type");
    if ty == "array" && !s.contains_key("items") {
        errs.push(required(child(path, "items"), "must be specified"));
    }
    match s.get("items") {
        Some(items @ Value::Object(_)) => invariants(items, Level::Item, &child(path, "items"), errs),
        Some(Value::Array(_)) => {
            errs.push(forbidden(child(path, "items"), "items must be a schema object and not an array"))
        }
        Some(_) => errs.push(invalid_str(child(path, "items"), "", "must be a JSON schema object")),
        None => {}
    }
    match s.get("properties") {
        Some(Value::Object(props)) => {
            for (k, v) in props {
                invariants(v, Level::Field, &key(&child(path, "properties"), k), errs);
            }
        }
        Some(_) => errs.push(invalid_str(child(path, "properties"), "", "must be a map of JSON schema objects")),
        None => {}
    }
    if let Some(ap) = s.get("additionalProperties") {
        if lvl == Level::Root {
            errs.push(forbidden(child(path, "additionalProperties"), "must not be used at the root"));
        }
        if ap.is_object() {
            invariants(ap, Level::Field, &child(path, "additionalProperties"), errs);
        }
    }
    let (int_or_string, preserve, embedded) = (
        flag(s, "x-kubernetes-int-or-string"),
        flag(s, "x-kubernetes-preserve-unknown-fields"),
        flag(s, "x-kubernetes-embedded-resource"),
    );
    if int_or_string && preserve {
        errs.push(Cause::invalid_rendered(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(Cause::invalid_rendered(
            child(path, "x-kubernetes-embedded-resource"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    value_validation(s, int_or_string_any_of(s), int_or_string_all_of(s), lvl, path, errs);
    if embedded && ty != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if ty.is_empty() {
            errs.push(required(child(path, "type"), detail));
        } else {
            errs.push(invalid_str(child(path, "type"), ty, detail));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(required(child(path, "type"), detail));
    }
    if embedded && s.contains_key("additionalProperties") {
        errs.push(forbidden(
            child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(invalid_str(child(path, "type"), ty, "must be object at the root"));
    }
    let check_metadata = lvl == Level::Root || embedded;
    let props = s.get("properties").and_then(Value::as_object);
    let prop = |k: &str| props.and_then(|p| p.get(k)).and_then(Value::as_object);
    if check_metadata {
        for k in ["kind", "apiVersion"] {
            if let Some(p) = prop(k)
                && str_field(p, "type") != "string"
            {
                let at = child(&key(&child(path, "properties"), k), "type");
                errs.push(invalid_str(at, str_field(p, "type"), "must be string"));
            }
        }
    }
    if let Some(meta) = prop("metadata") {
        let at = key(&child(path, "properties"), "metadata");
        if check_metadata && str_field(meta, "type") != "object" {
            errs.push(invalid_str(child(&at, "type"), str_field(meta, "type"), "must be object"));
        }
        if lvl == Level::Root && !root_metadata_allowed(meta) {
            errs.push(forbidden(
                at,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && props.is_none_or(Map::is_empty) {
        errs.push(required(
            child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// Root `metadata` may say it is an object, have a default, and restrict `name` and
/// `generateName`; nothing else.
fn root_metadata_allowed(meta: &Map<String, Value>) -> bool {
    meta.iter().all(|(k, v)| match k.as_str() {
        "type" | "default" => true,
        "properties" => {
            v.as_object().is_some_and(|p| !p.is_empty() && p.keys().all(|k| k == "name" || k == "generateName"))
        }
        _ => false,
    })
}

fn is_int_or_string_pair(any_of: Option<&Value>) -> bool {
    let want = [serde_json::json!({"type": "integer"}), serde_json::json!({"type": "string"})];
    any_of.and_then(Value::as_array).is_some_and(|a| a.as_slice() == want)
}

fn int_or_string_any_of(s: &Map<String, Value>) -> bool {
    is_int_or_string_pair(s.get("anyOf"))
}

fn int_or_string_all_of(s: &Map<String, Value>) -> bool {
    s.get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .is_some_and(|f| is_int_or_string_pair(f.get("anyOf")))
}

/// `validateValueValidation`: the logic junctors, and the pattern.
fn value_validation(
    s: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: Level,
    path: &str,
    errs: &mut Vec<Cause>,
) {
    for junctor in ["anyOf", "allOf", "oneOf"] {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        match s.get(junctor) {
            Some(Value::Array(branches)) => {
                for (i, b) in branches.iter().enumerate() {
                    let skip = junctor == "allOf" && skip_first_all_of_any_of && i == 0;
                    nested(b, skip, lvl, &index(&child(path, junctor), i), errs);
                }
            }
            Some(_) => errs.push(invalid_str(child(path, junctor), "", "must be a list of JSON schema objects")),
            None => {}
        }
    }
    if let Some(not) = s.get("not") {
        nested(not, false, lvl, &child(path, "not"), errs);
    }
    match s.get("pattern") {
        Some(Value::String(p)) => {
            if let Err(e) = regex::Regex::new(p) {
                errs.push(invalid_str(
                    child(path, "pattern"),
                    p,
                    &format!("must be a valid regular expression, but isn't: {e}"),
                ));
            }
        }
        Some(_) => errs.push(invalid_str(child(path, "pattern"), "", "must be a string")),
        None => {}
    }
}

/// `validateNestedValueValidation`: what a branch of a junctor may not say to stay structural.
fn nested(v: &Value, skip_any_of: bool, lvl: Level, path: &str, errs: &mut Vec<Cause>) {
    let Some(v) = v.as_object() else {
        errs.push(invalid_str(path.to_string(), "", "must be a JSON schema object"));
        return;
    };
    value_validation(v, skip_any_of, false, lvl, path, errs);
    if let Some(items) = v.get("items") {
        nested(items, false, lvl, &child(path, "items"), errs);
    }
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            nested(p, false, Level::Field, &key(&child(path, "properties"), k), errs);
        }
        if props.contains_key("metadata") {
            errs.push(forbidden(
                key(&child(path, "properties"), "metadata"),
                "must not be specified in a nested context",
            ));
        }
    }
    let set = |k: &str| v.get(k).is_some_and(|x| !x.is_null());
    if !str_field(v, "type").is_empty() {
        errs.push(forbidden(child(path, "type"), "must be empty to be structural"));
    }
    if set("additionalProperties") {
        errs.push(forbidden(child(path, "additionalProperties"), "must be undefined to be structural"));
    }
    if set("default") {
        errs.push(forbidden(child(path, "default"), "must be undefined to be structural"));
    }
    for k in ["title", "description"] {
        if !str_field(v, k).is_empty() {
            errs.push(forbidden(child(path, k), "must be empty to be structural"));
        }
    }
    for k in [
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(v, k) {
            errs.push(forbidden(child(path, k), "must be false to be structural"));
        }
    }
    if v.get("x-kubernetes-list-map-keys").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        errs.push(forbidden(child(path, "x-kubernetes-list-map-keys"), "must be empty to be structural"));
    }
    for k in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if set(k) {
            errs.push(forbidden(child(path, k), "must be undefined to be structural"));
        }
    }
    if v.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        errs.push(forbidden(child(path, "x-kubernetes-validations"), "must be empty to be structural"));
    }
}

/// `validateStructuralCompleteness`: every property or item a junctor talks about exists in the
/// structural part of the schema.
fn completeness(v: &Map<String, Value>, s: &Map<String, Value>, s_path: &str, v_path: &str, errs: &mut Vec<Cause>) {
    if let Some(not) = v.get("not").and_then(Value::as_object) {
        nested_completeness(not, Some(s), s_path, &child(v_path, "not"), errs);
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        for (i, b) in v.get(junctor).and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(b) = b.as_object() {
                nested_completeness(b, Some(s), s_path, &index(&child(v_path, junctor), i), errs);
            }
        }
    }
}

fn nested_completeness(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<Cause>,
) {
    let Some(s) = s else {
        errs.push(required(s_path.to_string(), &format!("because it is defined in {v_path}")));
        return;
    };
    completeness(v, s, s_path, v_path, errs);
    if let Some(items) = v.get("items").and_then(Value::as_object) {
        let s_items = s.get("items").and_then(Value::as_object);
        nested_completeness(items, s_items, &child(s_path, "items"), &child(v_path, "items"), errs);
    }
    for (k, p) in v.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let Some(p) = p.as_object() else { continue };
        let sp = key(&child(s_path, "properties"), k);
        let vp = key(&child(v_path, "properties"), k);
        match s.get("properties").and_then(Value::as_object).and_then(|sp| sp.get(k)).and_then(Value::as_object) {
            Some(sf) => nested_completeness(p, Some(sf), &sp, &vp, errs),
            None => errs.push(required(sp, &format!("because it is defined in {vp}"))),
        }
    }
}

/// The compile errors of every node's `x-kubernetes-validations`.
fn rule_errors(s: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(o) = s.as_object() else { return };
    causes.extend(super::cel::compile_errors(s, path));
    for (k, v) in o.get("properties").and_then(Value::as_object).into_iter().flatten() {
        rule_errors(v, &key(&child(path, "properties"), k), causes);
    }
    if let Some(items) = o.get("items") {
        rule_errors(items, &child(path, "items"), causes);
    }
    if let Some(ap) = o.get("additionalProperties") {
        rule_errors(ap, &child(path, "additionalProperties"), causes);
    }
    for (i, b) in o.get("allOf").and_then(Value::as_array).into_iter().flatten().enumerate() {
        rule_errors(b, &index(&child(path, "allOf"), i), causes);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}}]}})
    }

    fn rendered(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn non_structural_schemas_are_reported_as_kube_apiserver_reports_them() {
        let cases = [
            (
                "a property without a type",
                json!({"type": "object", "properties": {"spec": {"properties": {"x": {"type": "string"}}}}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
                ],
            ),
            (
                "no type at the root",
                json!({"properties": {}}),
                vec!["spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root"],
            ),
            (
                "an array without items",
                json!({"type": "object", "properties": {"l": {"type": "array"}}}),
                vec!["spec.validation.openAPIV3Schema.properties[l].items: Required value: must be specified"],
            ),
            (
                "array items without a type",
                json!({"type": "object", "properties": {"l": {"type": "array", "items": {}}}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[l].items.type: Required value: must not be empty for specified array items",
                ],
            ),
            (
                "a type inside anyOf",
                json!({"type": "object", "properties": {"x": {"type": "string", "anyOf": [{"type": "string"}, {"maxLength": 3}]}}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[x].anyOf[0].type: Forbidden: must be empty to be structural",
                ],
            ),
            (
                "a property only a junctor names",
                json!({"type": "object", "allOf": [{"properties": {"y": {"minLength": 1}}}]}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[y]: Required value: because it is defined in spec.validation.openAPIV3Schema.allOf[0].properties[y]",
                ],
            ),
            (
                "additionalProperties at the root",
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                vec!["spec.validation.openAPIV3Schema.additionalProperties: Forbidden: must not be used at the root"],
            ),
            (
                "metadata restricted beyond name",
                json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
                ],
            ),
            (
                "an invalid pattern",
                json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[x].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: regex parse error:\n    (\n    ^\nerror: unclosed group",
                ],
            ),
            (
                "odd content where a schema belongs",
                json!({"type": "object", "properties": {"x": 5}}),
                vec![
                    "spec.validation.openAPIV3Schema.properties[x]: Invalid value: \"\": must be a JSON schema object",
                ],
            ),
        ];
        for (what, schema, want) in cases {
            assert_eq!(rendered(&check_crd(&crd(schema))), want, "{what}");
        }
    }

    #[test]
    fn structural_schemas_pass_including_int_or_string_and_embedded_resources() {
        let schema = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}},
            "spec": {"type": "object", "properties": {
                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}});
        assert_eq!(rendered(&check_crd(&crd(schema))), Vec::<String>::new());
    }

    #[test]
    fn versions_with_different_schemas_are_checked_at_their_own_paths() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "schema": {"openAPIV3Schema": {"type": "string"}}},
            {"name": "v3"}]}});
        assert_eq!(
            rendered(&check_crd(&crd)),
            [
                "spec.versions[1].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root",
                "spec.versions[2].schema.openAPIV3Schema: Required value"
            ]
        );
    }

    #[test]
    fn a_cel_rule_that_does_not_compile_is_reported_with_the_rule() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.x >", "message": "m"}]}}});
        let got = rendered(&check_crd(&crd(schema)));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with(
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: {\"Rule\":\"self.x >\",\"Message\":\"m\",\"MessageExpression\":\"\",\"Reason\":null,\"FieldPath\":\"\",\"OptionalOldSelf\":null}: compilation failed: "
            ),
            "{got:?}"
        );
    }
}
