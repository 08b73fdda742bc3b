//! Tests of the generated CRDs: against upstream's shipped CRDs (every schema keyword but
//! descriptions, on every property path), structural-schema rules, and the generator's rewrites.
//! The deliberate differences are [`ALLOWED`], also listed in docs/crds.md.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// Upstream's shipped CRDs, beside the repository (`/work/shared` in development and CI).
const UPSTREAM_JOBSET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/spec/reference/upstream/jobset/crd_bases_jobset.x-k8s.io_jobsets.yaml"
);
const UPSTREAM_APPWRAPPER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/spec/reference/upstream/appwrapper/crd_bases_workload.codeflare.dev_appwrappers.yaml"
);

/// What a difference is about.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    /// The property (and its subtree) is only in our schema.
    OnlyOurs,
    /// The property (and its subtree) is only in upstream's schema.
    OnlyUpstream,
    /// The schema keyword differs (upstream's value, ours; null when absent).
    Keyword(String, Value, Value),
}

/// A difference between the schemas at a property path (`.spec.replicatedJobs[].name`; `[]` is
/// an array's items, `{}` a map's values).
#[derive(Clone, Debug, PartialEq)]
struct Difference {
    path: String,
    kind: Kind,
}

/// A deliberate difference: the path, the keyword ("" for a property only in ours, with its
/// subtree), and why.
struct Allowed {
    path: &'static str,
    keyword: &'static str,
    reason: &'static str,
}

/// Every deliberate difference from upstream JobSet's CRD (AppWrapper's has none).
const ALLOWED: &[Allowed] = &[
    Allowed {
        path: ".spec.failurePolicy.rules[].action",
        keyword: "enum",
        reason: "extension actions RestartReplicatedJob, RestartReplicatedJobAndIgnoreMaxRestarts and FailJob (KEP-262 future work) are accepted",
    },
    Allowed {
        path: ".spec.replicatedJobs[].template.spec.podFailurePolicy.rules[].setConditionReason",
        keyword: "",
        reason: "local-mode extension: the reason a FailJob rule writes on the Job's Failed condition; kept so the API server does not prune it",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].restarts",
        keyword: "",
        reason: "extension status: RestartReplicatedJob* restarts of the replicated job",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].restartsCountTowardsMax",
        keyword: "",
        reason: "extension status: the replicated job's restarts that count towards maxRestarts",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].failedJobIndexes",
        keyword: "",
        reason: "extension status: the Jobs a FailJob rule left failed",
    },
    Allowed {
        path: ".status.restartHistory",
        keyword: "",
        reason: "extension status: the last restarts, their triggers and phase times",
    },
    Allowed {
        path: ".status.inPlaceRestarts",
        keyword: "",
        reason: "extension status: JobSet-wide in-place restarts while some replicated job restarts in place alone",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].currentInPlaceRestartAttempt",
        keyword: "",
        reason: "extension status: the synced in-place attempt of a replicated job that restarts in place alone",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].previousInPlaceRestartAttempt",
        keyword: "",
        reason: "extension status: the deprecated in-place attempt of a replicated job that restarts in place alone",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].inPlaceRestarts",
        keyword: "",
        reason: "extension status: in-place restarts of the replicated job alone",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].inPlaceRestartsCountTowardsMax",
        keyword: "",
        reason: "extension status: those that count towards maxRestarts",
    },
    Allowed {
        path: ".status.replicatedJobsStatus[].inPlaceRestartJobs",
        keyword: "",
        reason: "extension status: the in-place restart state of each Job that restarts in place alone",
    },
    Allowed {
        path: ".spec.failurePolicy.rules[].maxRestarts",
        keyword: "",
        reason: "extension: a failure-policy rule's own restart budget (upstream issue #976)",
    },
    Allowed {
        path: ".status.failurePolicyRulesStatus",
        keyword: "",
        reason: "extension status: the restarts of each failure-policy rule with its own budget",
    },
    Allowed {
        path: ".status.executionAttempts",
        keyword: "",
        reason: "KEP-1282 (execution attempts): designed upstream, not in its shipped CRD yet",
    },
    Allowed {
        path: ".spec.activeDeadlineSeconds",
        keyword: "",
        reason: "KEP-1186 (JobSet activeDeadlineSeconds): designed upstream, not in its shipped CRD yet",
    },
    Allowed {
        path: ".status.startTime",
        keyword: "",
        reason: "KEP-1186: when the JobSet last became active, the deadline's start",
    },
];

/// Keywords not compared: documentation, and the children walked separately.
const NOT_COMPARED: [&str; 4] = ["description", "properties", "items", "additionalProperties"];

/// Every difference between two schemas, ignoring descriptions (`required` compared as a set).
fn differences(upstream: &Value, ours: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk(upstream, ours, String::new(), &mut out);
    out
}

fn walk(up: &Value, ours: &Value, path: String, out: &mut Vec<Difference>) {
    let keys: BTreeSet<&String> = up.as_object().into_iter().chain(ours.as_object()).flat_map(|o| o.keys()).collect();
    for key in keys.into_iter().filter(|k| !NOT_COMPARED.contains(&k.as_str())) {
        let (u, o) = (up.get(key).cloned().unwrap_or(Value::Null), ours.get(key).cloned().unwrap_or(Value::Null));
        let same = if key == "required" { as_set(&u) == as_set(&o) } else { u == o };
        if !same {
            out.push(Difference { path: path.clone(), kind: Kind::Keyword(key.clone(), u, o) });
        }
    }
    let empty = serde_json::Map::new();
    let (up_props, our_props) = (
        up.get("properties").and_then(Value::as_object).unwrap_or(&empty),
        ours.get("properties").and_then(Value::as_object).unwrap_or(&empty),
    );
    let names: BTreeSet<&String> = up_props.keys().chain(our_props.keys()).collect();
    for name in names {
        let p = format!("{path}.{name}");
        match (up_props.get(name), our_props.get(name)) {
            (Some(u), Some(o)) => walk(u, o, p, out),
            (Some(_), None) => out.push(Difference { path: p, kind: Kind::OnlyUpstream }),
            (None, _) => out.push(Difference { path: p, kind: Kind::OnlyOurs }),
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        let p = format!("{path}{suffix}");
        match (up.get(key), ours.get(key)) {
            (Some(u), Some(o)) => walk(u, o, p, out),
            (Some(_), None) => out.push(Difference { path: p, kind: Kind::OnlyUpstream }),
            (None, Some(_)) => out.push(Difference { path: p, kind: Kind::OnlyOurs }),
            (None, None) => {}
        }
    }
}

fn as_set(v: &Value) -> BTreeSet<String> {
    v.as_array().into_iter().flatten().map(|s| s.to_string()).collect()
}

fn is_allowed(d: &Difference, allowed: &[Allowed]) -> bool {
    allowed.iter().any(|a| match &d.kind {
        Kind::OnlyOurs => a.keyword.is_empty() && a.path == d.path,
        Kind::Keyword(k, _, _) => a.keyword == k && a.path == d.path,
        Kind::OnlyUpstream => false,
    })
}

fn not_allowed(upstream: &Value, ours: &Value, allowed: &[Allowed]) -> Vec<Difference> {
    differences(upstream, ours).into_iter().filter(|d| !is_allowed(d, allowed)).collect()
}

fn read_upstream(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("upstream CRD {path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("upstream CRD {path}: {e}"))
}

fn schema(crd: &Value) -> &Value {
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema").expect("CRD has a schema")
}

/// The CRD without its schema, controller-gen's version annotation and our additive printer
/// columns (KEP-1186's `StartTime` is not in upstream's released CRD yet).
fn envelope(crd: &Value) -> Value {
    let mut c = crd.clone();
    if let Some(v) = c.pointer_mut("/spec/versions/0").and_then(Value::as_object_mut) {
        v.remove("schema");
        if let Some(Value::Array(cols)) = v.get_mut("additionalPrinterColumns") {
            let ours = [crate::crdgen::LAST_RESTART_COLUMN, crate::crdgen::START_TIME_COLUMN];
            cols.retain(|col| !ours.iter().any(|name| col["name"] == *name));
        }
    }
    if let Some(m) = c.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        m.remove("annotations");
    }
    c
}

#[test]
fn jobset_schema_matches_upstream_but_for_the_allowed_differences() {
    let upstream = read_upstream(UPSTREAM_JOBSET);
    let ours = jobset_crd().unwrap();
    assert_eq!(not_allowed(schema(&upstream), schema(&ours), ALLOWED), [], "differences not in ALLOWED (docs/crds.md)");
}

#[test]
fn appwrapper_schema_matches_upstream_exactly() {
    let upstream = read_upstream(UPSTREAM_APPWRAPPER);
    let ours = appwrapper_crd().unwrap();
    assert_eq!(differences(schema(&upstream), schema(&ours)), []);
}

#[test]
fn every_allowed_difference_still_exists() {
    // An entry whose difference is gone must leave the list (and docs/crds.md).
    let upstream = read_upstream(UPSTREAM_JOBSET);
    let diffs = differences(schema(&upstream), schema(&jobset_crd().unwrap()));
    for a in ALLOWED {
        assert!(
            diffs.iter().any(|d| is_allowed(d, std::slice::from_ref(a))),
            "stale allow-list entry {} {}",
            a.path,
            a.keyword
        );
        assert!(!a.reason.is_empty());
    }
}

#[test]
fn every_allowed_difference_is_documented() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/crds.md")).expect("docs/crds.md");
    for a in ALLOWED {
        assert!(doc.contains(&format!("`{}`", a.path)), "docs/crds.md does not list {}", a.path);
    }
}

#[test]
fn names_scope_version_subresources_and_printer_columns_match_upstream() {
    for (path, ours) in [(UPSTREAM_JOBSET, jobset_crd().unwrap()), (UPSTREAM_APPWRAPPER, appwrapper_crd().unwrap())] {
        assert_eq!(envelope(&ours), envelope(&read_upstream(path)), "{path}");
    }
}

#[test]
fn the_comparison_reports_a_changed_keyword_a_missing_property_and_an_extra_one() {
    let upstream = json!({"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "format": "int32", "description": "x"},
        "gone": {"type": "string"},
    }});
    let ours = json!({"type": "object", "required": ["b", "a"], "properties": {
        "a": {"type": "integer", "format": "int64", "description": "y"},
        "extra": {"type": "array", "items": {"type": "string"}},
    }});
    assert_eq!(
        differences(&upstream, &ours),
        [
            Difference { path: ".a".into(), kind: Kind::Keyword("format".into(), json!("int32"), json!("int64")) },
            Difference { path: ".extra".into(), kind: Kind::OnlyOurs },
            Difference { path: ".gone".into(), kind: Kind::OnlyUpstream },
        ]
    );
    let allowed = [Allowed { path: ".extra", keyword: "", reason: "r" }];
    assert_eq!(not_allowed(&upstream, &ours, &allowed).len(), 2);
}

#[test]
fn the_comparison_reports_changed_cel_rules_and_list_types() {
    let upstream = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "Value is immutable"}], "items": {"type": "object"}});
    let ours = json!({"type": "array", "x-kubernetes-list-type": "atomic",
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "value is immutable"}], "items": {"type": "object"}});
    let keys: Vec<String> = differences(&upstream, &ours)
        .into_iter()
        .map(|d| match d.kind {
            Kind::Keyword(k, _, _) => k,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, ["x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-validations"]);
}

/// Structural-schema violations kube-apiserver rejects a CRD for, and keywords it does not allow.
fn structural_violations(s: &Value, path: &str, out: &mut Vec<String>) {
    let Some(o) = s.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    let int_or_string = o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if o.get("type").and_then(Value::as_str).is_none() && !int_or_string && !preserve {
        out.push(format!("{path}: no type"));
    }
    if o.contains_key("properties") && o.contains_key("additionalProperties") {
        out.push(format!("{path}: properties with additionalProperties"));
    }
    for k in ["$ref", "$defs", "$schema", "oneOf", "allOf", "not", "const", "title", "nullable", "definitions"] {
        if o.contains_key(k) {
            out.push(format!("{path}: {k}"));
        }
    }
    if o.contains_key("anyOf") && !int_or_string {
        out.push(format!("{path}: anyOf outside int-or-string"));
    }
    for (name, p) in o.get("properties").and_then(Value::as_object).into_iter().flatten() {
        structural_violations(p, &format!("{path}.{name}"), out);
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(c) = o.get(key) {
            structural_violations(c, &format!("{path}{suffix}"), out);
        }
    }
}

fn paths_with(s: &Value, keyword: &str, path: &str, out: &mut Vec<String>) {
    if s.get(keyword).is_some() {
        out.push(path.to_string());
    }
    for (name, p) in s.get("properties").and_then(Value::as_object).into_iter().flatten() {
        paths_with(p, keyword, &format!("{path}.{name}"), out);
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(c) = s.get(key) {
            paths_with(c, keyword, &format!("{path}{suffix}"), out);
        }
    }
}

#[test]
fn generated_schemas_are_structural() {
    for g in generate().unwrap() {
        let mut violations = Vec::new();
        structural_violations(schema(&g.crd), "", &mut violations);
        assert_eq!(violations, Vec::<String>::new(), "{}", g.file);
    }
}

#[test]
fn unknown_fields_are_preserved_only_in_an_appwrapper_component_template() {
    let mut jobset = Vec::new();
    paths_with(schema(&jobset_crd().unwrap()), "x-kubernetes-preserve-unknown-fields", "", &mut jobset);
    assert_eq!(jobset, Vec::<String>::new());
    let mut appwrapper = Vec::new();
    paths_with(schema(&appwrapper_crd().unwrap()), "x-kubernetes-preserve-unknown-fields", "", &mut appwrapper);
    assert_eq!(appwrapper, [".spec.components[].template"]);
}

#[test]
fn the_job_template_has_batch_v1_job_template_spec_schema_with_the_pod_template() {
    let crd = jobset_crd().unwrap();
    let t = schema(&crd).pointer("/properties/spec/properties/replicatedJobs/items/properties/template").unwrap();
    assert!(
        t.pointer("/properties/spec/properties/template/properties/spec/properties/containers/items/properties/image")
            .is_some()
    );
    assert_eq!(t.pointer("/properties/spec/required"), Some(&json!(["template"])));
    let meta: Vec<&String> =
        t.pointer("/properties/metadata/properties").and_then(Value::as_object).unwrap().keys().collect();
    assert_eq!(meta, EMBEDDED_OBJECT_META_FIELDS);
}

#[test]
fn zero_defaults_are_dropped_and_deliberate_ones_kept() {
    let mut s = json!({"type": "object", "default": {"replicatedJobs": []}, "properties": {
        "maxRestarts": {"type": "integer", "default": 0},
        "replicas": {"type": "integer", "default": 1},
        "groupName": {"type": "string", "default": "default"},
        "name": {"type": "string", "default": ""},
    }});
    strip_zero_defaults(&mut s);
    assert_eq!(
        s,
        json!({"type": "object", "properties": {
            "maxRestarts": {"type": "integer"},
            "replicas": {"type": "integer", "default": 1},
            "groupName": {"type": "string", "default": "default"},
            "name": {"type": "string"},
        }})
    );
}

#[test]
fn option_alternatives_and_documented_enum_variants_become_one_structural_node() {
    let mut s = json!({"properties": {
        "a": {"type": ["integer", "null"], "format": "int32"},
        "b": {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}], "x-kubernetes-validations": []},
        "c": {"oneOf": [{"type": "string", "enum": ["A", "B"]}, {"type": "string", "const": "C", "description": "d"}]},
        "q": {"x-kubernetes-int-or-string": true},
    }});
    make_structural(&mut s);
    assert_eq!(
        s,
        json!({"properties": {
            "a": {"type": "integer", "format": "int32"},
            "b": {"type": "object", "properties": {}, "x-kubernetes-validations": []},
            "c": {"type": "string", "enum": ["A", "B", "C"]},
            "q": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        }})
    );
}

#[test]
fn k8s_markers_add_keys_and_a_null_removes_one() {
    let mut def = json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}});
    apply_k8s_markers("io.k8s.api.core.v1.LocalObjectReference", &mut def);
    assert_eq!(
        def,
        json!({"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"name": {"type": "string", "default": ""}}})
    );
}

#[test]
fn every_k8s_marker_is_valid_json_naming_a_property_of_its_definition() {
    let settings = SchemaSettings::draft2020_12();
    let mut generator = settings.into_generator();
    let _ = generator.subschema_for::<crate::jobset::JobSet>();
    let _ = generator.subschema_for::<crate::appwrapper::AppWrapper>();
    let defs = generator.take_definitions(false);
    for (def, field, keys) in K8S_MARKERS {
        assert!(serde_json::from_str::<serde_json::Map<String, Value>>(keys).is_ok(), "{def} {field}: {keys}");
        let d = defs.get(*def).unwrap_or_else(|| panic!("{def} is not embedded in our CRDs"));
        assert!(field.is_empty() || d.pointer(&format!("/properties/{field}")).is_some(), "{def} has no {field}");
    }
}

#[test]
fn an_unresolvable_reference_is_an_error_naming_it() {
    let defs = serde_json::Map::new();
    let err = inline(json!({"$ref": "#/$defs/Missing"}), &defs, &mut Vec::new()).unwrap_err();
    assert_eq!(err, "undefined schema reference #/$defs/Missing");
    let mut defs = serde_json::Map::new();
    defs.insert("Loop".into(), json!({"type": "object", "properties": {"next": {"$ref": "#/$defs/Loop"}}}));
    let err = inline(json!({"$ref": "#/$defs/Loop"}), &defs, &mut Vec::new()).unwrap_err();
    assert_eq!(err, "recursive type Loop cannot be inlined into a structural schema");
}

#[test]
fn generated_yaml_parses_back_to_the_same_crd() {
    // Quoting and line folding of the writer must not change a CEL rule or a description.
    for g in generate().unwrap() {
        let back: Value = serde_saphyr::from_str(&g.to_yaml().unwrap()).unwrap();
        assert!(back == g.crd, "{} does not round-trip", g.file);
    }
}
