//! Structural schema checks as kube-apiserver applies a CRD's OpenAPI schema before admission:
//! types, enums, bounds, list sizes and map keys, with its messages. Shared by the JobSet and
//! AppWrapper validators.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::field::{FieldError, quote};

const MAX_INT32: i64 = i32::MAX as i64;

/// The part of an OpenAPI schema a validator enforces.
pub(crate) enum Schema {
    Object {
        props: Vec<(&'static str, Schema)>,
        required: &'static [&'static str],
    },
    /// An object whose content is not checked (`x-kubernetes-preserve-unknown-fields`).
    OpenObject,
    Array {
        items: Box<Schema>,
        max_items: Option<usize>,
        map_key: Option<&'static str>,
    },
    String {
        one_of: Option<Vec<&'static str>>,
    },
    Int32 {
        minimum: Option<i64>,
    },
    Int,
    Bool,
    /// An object of strings (labels, annotations, nodeSelector).
    StringMap,
    /// Anything (raw JSON the caller checks itself).
    Any,
    /// A check of the caller's own.
    Custom(fn(&Value, &str, &mut Vec<FieldError>)),
}

pub(crate) fn obj(props: Vec<(&'static str, Schema)>, required: &'static [&'static str]) -> Schema {
    Schema::Object { props, required }
}
pub(crate) fn arr(items: Schema) -> Schema {
    Schema::Array { items: Box::new(items), max_items: None, map_key: None }
}
pub(crate) fn string() -> Schema {
    Schema::String { one_of: None }
}
pub(crate) fn one_of(values: &[&'static str]) -> Schema {
    Schema::String { one_of: Some(values.to_vec()) }
}

/// The OpenAPI type name of a JSON value, as kube-openapi reports it.
pub(crate) fn type_name(v: &Value) -> &'static str {
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

pub(crate) fn type_error(path: &str, v: &Value, want: &str) -> FieldError {
    let got = type_name(v);
    FieldError::type_invalid(path, &json!(got), format!("{path} in body must be of type {want}: {}", quote(got)))
}

/// Appends to `errs` every way `v` (at `path`) does not fit `schema`, with kube-apiserver's
/// messages; `null` members count as absent.
pub(crate) fn check(v: &Value, schema: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    match schema {
        Schema::Object { props, required } => {
            let Some(m) = v.as_object() else { return errs.push(type_error(path, v, "object")) };
            for (key, sub) in props {
                if let Some(child) = m.get(*key).filter(|c| !c.is_null()) {
                    check(child, sub, &format!("{path}.{key}"), errs);
                }
            }
            for key in *required {
                if m.get(*key).is_none_or(Value::is_null) {
                    errs.push(FieldError::required(format!("{path}.{key}"), ""));
                }
            }
        }
        Schema::OpenObject => {
            if !v.is_object() {
                errs.push(type_error(path, v, "object"));
            }
        }
        Schema::Array { items, max_items, map_key } => {
            let Some(list) = v.as_array() else { return errs.push(type_error(path, v, "array")) };
            if let Some(max) = max_items.filter(|m| list.len() > *m) {
                errs.push(FieldError::too_many(path, list.len(), max));
            }
            for (i, item) in list.iter().enumerate() {
                check(item, items, &format!("{path}[{i}]"), errs);
            }
            if let Some(key) = map_key {
                let mut seen = BTreeSet::new();
                for (i, item) in list.iter().enumerate() {
                    if let Some(k) = item.get(*key).and_then(Value::as_str)
                        && !seen.insert(k)
                    {
                        errs.push(FieldError::duplicate(format!("{path}[{i}]"), &json!({ *key: k })));
                    }
                }
            }
        }
        Schema::String { one_of } => match v.as_str() {
            None => errs.push(type_error(path, v, "string")),
            Some(s) => {
                if let Some(values) = one_of.as_ref().filter(|vals| !vals.contains(&s)) {
                    errs.push(FieldError::not_supported(path, v, values));
                }
            }
        },
        Schema::Int32 { minimum } => match v.as_i64() {
            None => errs.push(type_error(path, v, "integer")),
            Some(n) => {
                if let Some(min) = minimum.filter(|m| n < *m) {
                    errs.push(FieldError::invalid(
                        path,
                        v,
                        format!("{path} in body should be greater than or equal to {min}"),
                    ));
                } else if n < i32::MIN as i64 {
                    errs.push(FieldError::invalid(
                        path,
                        v,
                        format!("{path} in body should be greater than or equal to {}", i32::MIN),
                    ));
                }
                if n > MAX_INT32 {
                    errs.push(FieldError::invalid(
                        path,
                        v,
                        format!("{path} in body should be less than or equal to {MAX_INT32}"),
                    ));
                }
            }
        },
        Schema::Int => {
            if v.as_i64().is_none() {
                errs.push(type_error(path, v, "integer"));
            }
        }
        Schema::Bool => {
            if !v.is_boolean() {
                errs.push(type_error(path, v, "boolean"));
            }
        }
        Schema::StringMap => {
            let Some(m) = v.as_object() else { return errs.push(type_error(path, v, "object")) };
            for (k, item) in m {
                if !item.is_string() {
                    errs.push(type_error(&format!("{path}.{k}"), item, "string"));
                }
            }
        }
        Schema::Any => {}
        Schema::Custom(f) => f(v, path, errs),
    }
}
