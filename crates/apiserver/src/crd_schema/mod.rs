//! CRD structural schemas, enforced as kube-apiserver's apiextensions-apiserver does: a CRD whose
//! `openAPIV3Schema` is not structural is rejected (`check_crd`, `ValidateStructural`'s
//! messages); a custom resource is pruned of unknown fields and defaulted on decode
//! (`prune`, with `fieldValidation` deciding whether unknown fields are errors, warnings or
//! nothing), then validated against the schema (`validate`: kube-openapi's messages, list types,
//! `x-kubernetes-validations` CEL rules).
//!
//! Simplifications: `anyOf`/`oneOf`/`not` are checked for structurality but not evaluated as value
//! validations (`allOf` is); defaults are applied when an object is written, not again when it is
//! read; validation ratcheting (errors an unchanged field had before are forgiven) is not done;
//! CEL rules are not type-checked when the CRD is created (the `cel` crate has no checker), so a
//! rule that does not evaluate to a bool is reported when it runs.

mod cel;
mod check;
mod duplicates;
mod prune;
mod validate;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{ApiError, Cause};
use crate::resources::ResourceDef;

pub use check::check_crd;
pub use duplicates::duplicate_fields;
pub use prune::{decode, default, prune};
pub use validate::{validate_object, validate_status};

/// One compiled node of a structural schema (`structuralschema.Structural`); each field is the
/// schema keyword of the same name.
#[derive(Debug, Default)]
pub struct Structural {
    /// `type`; empty when unset (int-or-string, preserved unknown fields).
    pub ty: String,
    pub format: String,
    pub nullable: bool,
    pub properties: BTreeMap<String, Structural>,
    pub additional: Option<Additional>,
    pub items: Option<Box<Structural>>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub embedded: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub validation: ValueValidation,
    /// `x-kubernetes-validations` of this node, compiled.
    pub rules: Option<cel::Rules>,
    /// Whether this node or any below it has rules (upstream runs CEL, and reports rules it
    /// could not run, only then).
    pub rules_in_tree: bool,
}

/// `additionalProperties`: a schema for every other key, or `true`/`false`.
#[derive(Debug)]
pub enum Additional {
    Allows(bool),
    Schema(Box<Structural>),
}

impl Structural {
    /// The schema of unlisted keys, if any.
    pub fn additional_schema(&self) -> Option<&Structural> {
        match &self.additional {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }
}

/// The value validations of a node (kube-openapi's validators), named after their keywords.
#[derive(Debug, Default)]
pub struct ValueValidation {
    pub enumeration: Option<Vec<Value>>,
    pub required: Vec<String>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: Option<(String, regex::Regex)>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    /// `allOf` branches, each validated against the same value.
    pub all_of: Vec<Structural>,
}

/// The compiled schema of one served CRD version, and whether it has a status subresource.
#[derive(Debug)]
pub struct CrdSchema {
    pub root: Structural,
    /// Whether `spec.preserveUnknownFields` keeps everything (never true for v1 CRDs with a schema).
    pub preserve_unknown: bool,
}

/// The schema of `version` of a CRD object, compiled; `None` when the version has none (or it does
/// not compile, for a CRD stored before schemas were checked: it is then served as before).
pub fn for_version(crd: &Value, version: &str) -> Option<CrdSchema> {
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let v = versions.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(version))?;
    let schema = v.pointer("/schema/openAPIV3Schema").or_else(|| crd.pointer("/spec/validation/openAPIV3Schema"))?;
    if !check::structural_errors(schema, "").is_empty() {
        return None;
    }
    Some(CrdSchema {
        root: compile(schema),
        preserve_unknown: crd.pointer("/spec/preserveUnknownFields").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// Builds the [`Structural`] of a schema that [`check`] found structural. Malformed parts (a
/// `minimum` that is not a number) are ignored rather than trusted.
pub fn compile(s: &Value) -> Structural {
    let str_of = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    let int = |k: &str| s.get(k).and_then(Value::as_i64);
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    let properties: BTreeMap<String, Structural> = s
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), compile(v))).collect())
        .unwrap_or_default();
    let additional = match s.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(Additional::Allows(*b)),
        Some(v @ Value::Object(_)) => Some(Additional::Schema(Box::new(compile(v)))),
        _ => None,
    };
    let validation = ValueValidation {
        enumeration: s.get("enum").and_then(Value::as_array).cloned(),
        required: s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default(),
        maximum: num("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: num("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        multiple_of: num("multipleOf"),
        max_length: int("maxLength"),
        min_length: int("minLength"),
        pattern: s
            .get("pattern")
            .and_then(Value::as_str)
            .and_then(|p| regex::Regex::new(p).ok().map(|r| (p.to_string(), r))),
        max_items: int("maxItems"),
        min_items: int("minItems"),
        unique_items: flag("uniqueItems"),
        max_properties: int("maxProperties"),
        min_properties: int("minProperties"),
        all_of: s.get("allOf").and_then(Value::as_array).map(|a| a.iter().map(compile).collect()).unwrap_or_default(),
    };
    let rules = cel::Rules::compile(s);
    let rules_in_tree = rules.is_some()
        || properties.values().any(|p| p.rules_in_tree)
        || matches!(&additional, Some(Additional::Schema(a)) if a.rules_in_tree)
        || validation.all_of.iter().any(|b| b.rules_in_tree);
    let items = s.get("items").filter(|i| i.is_object()).map(|i| Box::new(compile(i)));
    let rules_in_tree = rules_in_tree || items.as_ref().is_some_and(|i| i.rules_in_tree);
    Structural {
        ty: str_of("type"),
        format: str_of("format"),
        nullable: flag("nullable"),
        properties,
        additional,
        items,
        default: s.get("default").cloned(),
        preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
        embedded: flag("x-kubernetes-embedded-resource"),
        int_or_string: flag("x-kubernetes-int-or-string"),
        list_type: s.get("x-kubernetes-list-type").and_then(Value::as_str).map(str::to_string),
        list_map_keys: s
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default(),
        map_type: s.get("x-kubernetes-map-type").and_then(Value::as_str).map(str::to_string),
        validation,
        rules,
        rules_in_tree,
    }
}

/// Decodes a custom resource written with POST or PUT to `def` (pruned, defaulted), returning
/// the warnings to give under Warn; under Strict an unknown field is kube-apiserver's 400
/// (`JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: unknown
/// field "spec.x"`).
/// `duplicates` are the body's repeated keys ([`duplicate_fields`]), reported first as upstream's
/// JSON decoder reports them.
pub fn decode_body(
    def: &ResourceDef,
    body: &mut Value,
    directive: FieldValidation,
    duplicates: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    let Some(schema) = &def.schema else { return Ok(vec![]) };
    let errors = strict_errors(duplicates, decode(body, schema, directive), directive);
    if directive == FieldValidation::Strict && !errors.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            errors.join(", "),
            kind = def.kind,
            version = def.version,
        )));
    }
    Ok(errors)
}

/// [`decode_body`] for the result of a patch: under Strict kube-apiserver's 422 naming the
/// patched object (`"" is invalid: patch: Invalid value: "{...}": strict decoding error: ...`).
pub fn decode_patched(
    def: &ResourceDef,
    doc: &mut Value,
    directive: FieldValidation,
    duplicates: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    let Some(schema) = &def.schema else { return Ok(vec![]) };
    let patched = doc.to_string();
    let errors = strict_errors(duplicates, decode(doc, schema, directive), directive);
    if directive == FieldValidation::Strict && !errors.is_empty() {
        let cause = Cause::invalid_rendered(
            "patch",
            &format!("{patched:?}"),
            &format!("strict decoding error: {}", errors.join(", ")),
        );
        return Err(ApiError::invalid_kind("", "", "", vec![cause]));
    }
    Ok(errors)
}

/// The strict decoding errors of a body: its duplicate fields, then the unknown ones; none
/// under Ignore.
fn strict_errors(duplicates: Vec<String>, unknown: Vec<String>, directive: FieldValidation) -> Vec<String> {
    if directive == FieldValidation::Ignore {
        return vec![];
    }
    duplicates.into_iter().map(|p| format!("duplicate field {p:?}")).chain(unknown).collect()
}

/// The schema's problems with a write of a custom resource (`new`, replacing `old` on update):
/// the whole object, or only its `status` for a write to the status subresource.
pub fn validate_write(def: &ResourceDef, new: &Value, old: Option<&Value>, status_only: bool) -> Vec<Cause> {
    let Some(schema) = &def.schema else { return vec![] };
    if status_only { validate_status(&schema.root, new, old) } else { validate_object(&schema.root, new, old) }
}

/// `field.Path.Child`: `a.b`.
fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// `field.Path.Key`: `a[b]`.
fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// `field.Path.Index`: `a[0]`.
fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// How unknown and duplicate fields of a request are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// kube-apiserver's default when the parameter is absent.
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter; `None` for a value kube-apiserver rejects.
    pub fn parse(v: Option<&str>) -> Option<FieldValidation> {
        match v.unwrap_or_default() {
            "" | "Warn" => Some(FieldValidation::Warn),
            "Ignore" => Some(FieldValidation::Ignore),
            "Strict" => Some(FieldValidation::Strict),
            _ => None,
        }
    }
}

/// The `fieldValidation` query parameter of a write whose options are `options`
/// (`CreateOptions`, `UpdateOptions`, `PatchOptions`), or kube-apiserver's 422 for a value it
/// does not know.
pub fn field_validation_param(options: &str, v: Option<&str>) -> Result<FieldValidation, ApiError> {
    FieldValidation::parse(v).ok_or_else(|| {
        let cause = Cause::not_supported("fieldValidation", v.unwrap_or_default(), &["", "Ignore", "Strict", "Warn"]);
        ApiError::invalid_kind("meta.k8s.io", options, "", vec![cause])
    })
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): `1`, `1.5`, `1e+06`.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return "0".into();
    }
    // Shortest digits and exponent, as Rust prints them: `1.5e6`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        // %e form with at least two exponent digits.
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (f, want) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.0, "-2"),
        ] {
            assert_eq!(go_float(f), want, "{f}");
        }
    }

    #[test]
    fn field_validation_defaults_to_warn_and_rejects_unknown_values() {
        assert_eq!(FieldValidation::parse(None), Some(FieldValidation::Warn));
        assert_eq!(FieldValidation::parse(Some("Strict")), Some(FieldValidation::Strict));
        assert_eq!(FieldValidation::parse(Some("Ignore")), Some(FieldValidation::Ignore));
        assert_eq!(FieldValidation::parse(Some("strict")), None);
    }
}
