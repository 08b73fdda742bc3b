//! AppWrapper admission as upstream's validating webhook does it
//! (`internal/webhook/appwrapper_webhook.go`): on create, the checks of every component's template
//! and podSets and Kueue's limit of 1 to 8 podSets; on update, immutability of everything the create
//! checks looked at. Messages and field paths are upstream's, quirks included (`template.raw` and
//! `podsets` on update).
//!
//! Upstream's SubjectAccessReview (may the requesting user create each wrapped kind in the
//! namespace?) is not done: the embedded API server has no RBAC for users, so every user may
//! create every kind. Upstream's Kueue checks (`jobframework.ValidateJobOnCreate`) are not done
//! either: there is no Kueue here.
//!
//! The shape of the spec (`spec.components` a list, a podSet's `replicas` an int32, ...) is the
//! CRD schema's, which the API server enforces before admission; a spec that still does not
//! decode gets one `failed to decode` error here.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::keys;
use super::podsets::{check_pod_template, infer_pod_sets, validate_pod_sets};
use super::types::AppWrapperSpec;
use crate::field::FieldError;

/// Upstream's message for every immutability violation.
pub const IMMUTABLE: &str = "attempt to change immutable field";
/// Kueue's limit on the podSets of one workload.
const MAX_POD_SETS: usize = 8;
const COMPONENTS: &str = "spec.components";

/// Validates an AppWrapper on create; `namespace` is the AppWrapper's own.
pub fn validate_appwrapper(obj: &Value, namespace: &str) -> Vec<FieldError> {
    let spec = match decode(obj) {
        Ok(s) => s,
        Err(errs) => return errs,
    };
    let mut errs = Vec::new();
    let mut pod_specs = 0;
    for (i, c) in spec.components.iter().enumerate() {
        let cpath = format!("{COMPONENTS}[{i}]");
        let tpath = format!("{cpath}.template");
        let template = &c.template;
        let Some(t) = template.as_object() else {
            errs.push(FieldError::invalid(&tpath, template, "failed to decode as JSON"));
            // Not an object: nothing below can be read from it (upstream's webhook stops too).
            continue;
        };
        // An object without a kind fails to decode, but upstream goes on checking it.
        if t.get("kind").and_then(Value::as_str).is_none_or(str::is_empty) {
            errs.push(FieldError::invalid(&tpath, template, "failed to decode as JSON"));
        }
        let api_version = t.get("apiVersion").and_then(Value::as_str);
        if api_version == Some(keys::API_VERSION) && t.get("kind").and_then(Value::as_str) == Some(keys::KIND) {
            errs.push(FieldError::forbidden(&tpath, "Nested AppWrappers are forbidden"));
        }
        if let Some(ns) = template.pointer("/metadata/namespace").and_then(Value::as_str)
            && !ns.is_empty()
            && ns != namespace
        {
            errs.push(FieldError::forbidden(
                format!("{tpath}.metadata.namespace"),
                "AppWrappers cannot create objects in other namespaces",
            ));
        }
        for (j, ps) in c.declared_pod_sets.iter().enumerate() {
            let path = format!("{cpath}.podSets[{j}].path");
            if ps.path.is_empty() {
                errs.push(FieldError::required(&path, "podspec must specify path"));
            }
            // An empty path gets both errors, as upstream.
            if let Err(e) = check_pod_template(template, &ps.path) {
                errs.push(FieldError::invalid(
                    &path,
                    &json!(ps.path),
                    format!("path does not refer to a v1.PodSpecTemplate: {e}"),
                ));
            }
        }
        match infer_pod_sets(template) {
            Err(e) => errs.push(FieldError::invalid(&tpath, template, format!("error inferring PodSets: {e}"))),
            Ok(inferred) => {
                pod_specs += inferred.len().max(c.declared_pod_sets.len());
                if let Err(e) = validate_pod_sets(&inferred, &c.declared_pod_sets) {
                    errs.push(FieldError::invalid_rendered(
                        format!("{cpath}.podSets"),
                        go_json_of(&c.declared_pod_sets),
                        e,
                    ));
                }
            }
        }
    }
    if pod_specs == 0 || pod_specs > MAX_POD_SETS {
        // Upstream shows the whole list (Go's `null` when there is none).
        let shown = match obj.pointer("/spec/components") {
            None | Some(Value::Null) => "null".to_string(),
            Some(_) => go_json_of(&spec.components),
        };
        let detail = if pod_specs == 0 {
            "components contains no podspecs".to_string()
        } else {
            format!("components contains {pod_specs} podspecs; at most {MAX_POD_SETS} are allowed")
        };
        errs.push(FieldError::invalid_rendered(COMPONENTS, shown, detail));
    }
    errs
}

/// Validates an update of AppWrapper `old` to `new`: the components (their number, templates and
/// declared podSets' paths and replicas), the user labels and `spec.managedBy` are immutable.
/// `suspend` and `podSetInfos` change freely: Kueue admits and preempts through them.
pub fn validate_appwrapper_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let spec = match decode(new) {
        Ok(s) => s,
        Err(errs) => return errs,
    };
    // A stored object that does not decode cannot be compared field by field.
    let Ok(old_spec) = decode(old) else { return vec![] };
    if spec.components.len() != old_spec.components.len() {
        return vec![FieldError::forbidden(COMPONENTS, IMMUTABLE)];
    }
    let mut errs = Vec::new();
    for (i, (n, o)) in spec.components.iter().zip(&old_spec.components).enumerate() {
        let cpath = format!("{COMPONENTS}[{i}]");
        if n.template != o.template {
            errs.push(FieldError::forbidden(format!("{cpath}.template.raw"), IMMUTABLE));
        }
        if n.declared_pod_sets.len() != o.declared_pod_sets.len() {
            errs.push(FieldError::forbidden(format!("{cpath}.podsets"), IMMUTABLE));
            continue;
        }
        for (j, (np, op)) in n.declared_pod_sets.iter().zip(&o.declared_pod_sets).enumerate() {
            if np.replicas.unwrap_or(1) != op.replicas.unwrap_or(1) {
                errs.push(FieldError::forbidden(format!("{cpath}.podsets[{j}].replicas"), IMMUTABLE));
            }
            if np.path != op.path {
                errs.push(FieldError::forbidden(format!("{cpath}.podsets[{j}].path"), IMMUTABLE));
            }
        }
    }
    for label in [keys::USER_LABEL, keys::USERID_LABEL] {
        if label_value(new, label) != label_value(old, label) {
            errs.push(FieldError::forbidden(format!("metadata.labels[{label}]"), IMMUTABLE));
        }
    }
    if spec.managed_by != old_spec.managed_by {
        errs.push(FieldError::forbidden("spec.managedBy", IMMUTABLE));
    }
    errs
}

/// Label `key` of `obj`, `""` when unset (as Go reads a missing map entry).
fn label_value<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.pointer("/metadata/labels").and_then(|l| l.get(key)).and_then(Value::as_str).unwrap_or_default()
}

/// Go's `json.Marshal` of a typed value: struct fields in declaration order, HTML characters
/// escaped. (Inside strings only, so replacing them in the whole text is safe.)
fn go_json_of<T: Serialize>(v: &T) -> String {
    let s = serde_json::to_string(v).unwrap_or_else(|_| "null".to_string());
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

/// Drops `null` members, which Go decodes as absent and serde's defaults do not accept.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The spec as the typed API reads it, or the error that prevents reading it.
fn decode(obj: &Value) -> Result<AppWrapperSpec, Vec<FieldError>> {
    let Some(spec) = obj.get("spec").filter(|s| !s.is_null()) else { return Ok(AppWrapperSpec::default()) };
    // Nulls go everywhere but in templates, which are kept exactly as sent.
    let mut spec = spec.clone();
    let templates: Vec<Value> = match spec.get_mut("components").and_then(Value::as_array_mut) {
        Some(components) => components
            .iter_mut()
            .map(|c| c.as_object_mut().and_then(|c| c.remove("template")).unwrap_or_default())
            .collect(),
        None => vec![],
    };
    strip_nulls(&mut spec);
    let mut decoded = AppWrapperSpec::deserialize(&spec)
        .map_err(|e| vec![FieldError::invalid_omit("spec", format!("failed to decode: {e}"))])?;
    for (c, t) in decoded.components.iter_mut().zip(templates) {
        c.template = t;
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "default";

    fn pod_template() -> Value {
        json!({"spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    }

    fn job(parallelism: i32) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"parallelism": parallelism, "template": pod_template()}})
    }

    /// An AppWrapper in `default` wrapping a Job of 2 pods, with its podSet declared.
    fn base() -> Value {
        json!({
            "apiVersion": "workload.codeflare.dev/v1beta2",
            "kind": "AppWrapper",
            "metadata": {"name": "aw", "namespace": NS},
            "spec": {"components": [{
                "podSets": [{"replicas": 2, "path": "template.spec.template"}],
                "template": job(2),
            }]},
        })
    }

    fn rendered(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    struct Case {
        name: &'static str,
        mutate: fn(&mut Value),
        want: Vec<String>,
    }

    fn case(name: &'static str, mutate: fn(&mut Value), want: &[&str]) -> Case {
        Case { name, mutate, want: want.iter().map(|s| s.to_string()).collect() }
    }

    fn run_create(cases: Vec<Case>) {
        for c in cases {
            let mut v = base();
            (c.mutate)(&mut v);
            assert_eq!(rendered(validate_appwrapper(&v, NS)), c.want, "case {}", c.name);
        }
    }

    fn run_update(cases: Vec<Case>) {
        for c in cases {
            let old = base();
            let mut new = old.clone();
            (c.mutate)(&mut new);
            assert_eq!(rendered(validate_appwrapper_update(&new, &old)), c.want, "case {}", c.name);
        }
    }

    fn component(v: &mut Value, i: usize) -> &mut Value {
        &mut v["spec"]["components"][i]
    }

    #[test]
    fn a_wrapped_job_with_or_without_declared_pod_sets_passes() {
        assert_eq!(rendered(validate_appwrapper(&base(), NS)), Vec::<String>::new());
        let mut inferred = base();
        component(&mut inferred, 0).as_object_mut().unwrap().remove("podSets");
        assert_eq!(rendered(validate_appwrapper(&inferred, NS)), Vec::<String>::new());
    }

    #[test]
    fn create_checks_templates_with_upstream_messages() {
        run_create(vec![
            case(
                "nested_appwrapper",
                |v| {
                    let nested = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                        "metadata": {"name": "inner"}, "spec": {"components": []}});
                    v["spec"]["components"].as_array_mut().unwrap().push(json!({"template": nested}));
                },
                &["spec.components[1].template: Forbidden: Nested AppWrappers are forbidden"],
            ),
            case(
                "object_in_another_namespace",
                |v| component(v, 0)["template"]["metadata"]["namespace"] = json!("other"),
                &[
                    "spec.components[0].template.metadata.namespace: Forbidden: AppWrappers cannot create objects in other namespaces",
                ],
            ),
            case(
                "object_in_the_same_namespace",
                |v| component(v, 0)["template"]["metadata"]["namespace"] = json!(NS),
                &[],
            ),
            case(
                "template_not_an_object",
                |v| *component(v, 0) = json!({"template": "x"}),
                &[
                    r#"spec.components[0].template: Invalid value: "x": failed to decode as JSON"#,
                    r#"spec.components: Invalid value: [{"template":"x"}]: components contains no podspecs"#,
                ],
            ),
            case(
                "template_missing",
                |v| *component(v, 0) = json!({"annotations": {"a": "b"}}),
                &[
                    "spec.components[0].template: Invalid value: null: failed to decode as JSON",
                    r#"spec.components: Invalid value: [{"annotations":{"a":"b"},"template":null}]: components contains no podspecs"#,
                ],
            ),
            case(
                "template_without_kind_is_still_checked",
                |v| {
                    *component(v, 0) = json!({"template": {"apiVersion": "v1", "metadata": {"namespace": "other"}}});
                },
                &[
                    r#"spec.components[0].template: Invalid value: {"apiVersion":"v1","metadata":{"namespace":"other"}}: failed to decode as JSON"#,
                    "spec.components[0].template.metadata.namespace: Forbidden: AppWrappers cannot create objects in other namespaces",
                    r#"spec.components: Invalid value: [{"template":{"apiVersion":"v1","metadata":{"namespace":"other"}}}]: components contains no podspecs"#,
                ],
            ),
            case(
                "inference_fails",
                |v| *component(v, 0) = json!({"template": {"apiVersion": "batch/v1", "kind": "Job", "spec": {}}}),
                &[
                    r#"spec.components[0].template: Invalid value: {"apiVersion":"batch/v1","kind":"Job","spec":{}}: error inferring PodSets: template.spec.template does not refer to a v1.PodSpecTemplate: at path position 'template.spec.' missing field 'template'"#,
                    r#"spec.components: Invalid value: [{"template":{"apiVersion":"batch/v1","kind":"Job","spec":{}}}]: components contains no podspecs"#,
                ],
            ),
        ]);
    }

    #[test]
    fn create_checks_declared_pod_sets_with_upstream_messages() {
        run_create(vec![
            case(
                "empty_path",
                |v| component(v, 0)["podSets"][0]["path"] = json!(""),
                &[
                    "spec.components[0].podSets[0].path: Required value: podspec must specify path",
                    r#"spec.components[0].podSets[0].path: Invalid value: "": path does not refer to a v1.PodSpecTemplate: first element of the path must be 'template'"#,
                    r#"spec.components[0].podSets: Invalid value: [{"replicas":2,"path":""}]: PodSet with path 'template.spec.template' is missing"#,
                ],
            ),
            case(
                "path_to_nothing",
                |v| component(v, 0)["podSets"][0]["path"] = json!("template.spec.nope"),
                &[
                    r#"spec.components[0].podSets[0].path: Invalid value: "template.spec.nope": path does not refer to a v1.PodSpecTemplate: at path position 'template.spec.' missing field 'nope'"#,
                    r#"spec.components[0].podSets: Invalid value: [{"replicas":2,"path":"template.spec.nope"}]: PodSet with path 'template.spec.template' is missing"#,
                ],
            ),
            case(
                "path_to_something_without_a_spec",
                |v| component(v, 0)["podSets"][0]["path"] = json!("template.metadata"),
                &[
                    r#"spec.components[0].podSets[0].path: Invalid value: "template.metadata": path does not refer to a v1.PodSpecTemplate: content at template.metadata does not contain a spec"#,
                    r#"spec.components[0].podSets: Invalid value: [{"replicas":2,"path":"template.metadata"}]: PodSet with path 'template.spec.template' is missing"#,
                ],
            ),
            case(
                "replicas_differ_from_inferred",
                |v| component(v, 0)["podSets"][0]["replicas"] = json!(3),
                &[
                    r#"spec.components[0].podSets: Invalid value: [{"replicas":3,"path":"template.spec.template"}]: replica count 3 differs from inferred count 2 for PodSet at path position 'template.spec.template'"#,
                ],
            ),
            case(
                "more_declared_than_inferred",
                |v| {
                    let extra = json!({"path": "template.spec.template"});
                    component(v, 0)["podSets"].as_array_mut().unwrap().push(extra);
                },
                &[
                    r#"spec.components[0].podSets: Invalid value: [{"replicas":2,"path":"template.spec.template"},{"path":"template.spec.template"}]: multiple DeclaredPodSets with path 'template.spec.template'"#,
                ],
            ),
            case(
                "declared_for_a_kind_without_inference",
                |v| {
                    *component(v, 0) = json!({
                        "podSets": [{"path": "template.spec.workers.template", "replicas": 4}],
                        "template": {"apiVersion": "example.com/v1", "kind": "Trainer",
                            "spec": {"workers": {"template": pod_template()}}},
                    });
                },
                &[],
            ),
            case(
                "values_are_escaped_as_go_escapes_them",
                |v| {
                    *component(v, 0) = json!({
                        "podSets": [{"path": "template"}, {"path": "template", "annotations": {"a": "<&>"}}],
                        "template": {"apiVersion": "v1", "kind": "ConfigMap", "spec": {}},
                    });
                },
                &[
                    r#"spec.components[0].podSets: Invalid value: [{"path":"template"},{"path":"template","annotations":{"a":"\u003c\u0026\u003e"}}]: multiple DeclaredPodSets with path 'template'"#,
                ],
            ),
        ]);
    }

    #[test]
    fn an_appwrapper_needs_one_to_eight_pod_specs() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {}});
        let pods = |n: usize| Value::Array(vec![json!({"template": pod}); n]);
        let shown = |n: usize| {
            let one = r#"{"template":{"apiVersion":"v1","kind":"Pod","spec":{}}}"#;
            format!("[{}]", vec![one; n].join(","))
        };
        let check = |components: Option<Value>, want: Vec<String>| {
            let mut v = base();
            match components {
                Some(c) => v["spec"]["components"] = c,
                None => v["spec"] = json!({}),
            }
            assert_eq!(rendered(validate_appwrapper(&v, NS)), want);
        };
        check(None, vec!["spec.components: Invalid value: null: components contains no podspecs".into()]);
        check(Some(json!([])), vec!["spec.components: Invalid value: []: components contains no podspecs".into()]);
        check(Some(pods(8)), vec![]);
        check(
            Some(pods(9)),
            vec![format!(
                "spec.components: Invalid value: {}: components contains 9 podspecs; at most 8 are allowed",
                shown(9)
            )],
        );
        // A component counts the larger of its declared and inferred podSets.
        let mut seven = pods(7);
        seven.as_array_mut().unwrap().push(json!({
            "podSets": [{"path": "template.spec.a.template"}, {"path": "template.spec.b.template"}],
            "template": {"apiVersion": "example.com/v1", "kind": "Trainer",
                "spec": {"a": {"template": pod_template()}, "b": {"template": pod_template()}}},
        }));
        let mut v = base();
        v["spec"]["components"] = seven;
        let errs = rendered(validate_appwrapper(&v, NS));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].ends_with(": components contains 9 podspecs; at most 8 are allowed"), "{errs:?}");
    }

    #[test]
    fn a_spec_the_api_server_would_not_have_let_through_gets_one_decode_error_not_a_panic() {
        let malformed: Vec<fn(&mut Value)> = vec![
            |v| v["spec"]["components"] = json!("x"),
            |v| v["spec"] = json!([1]),
            |v| v["spec"]["components"][0] = json!(3),
            |v| component(v, 0)["podSets"][0] = json!({"replicas": "2", "path": 7}),
            |v| component(v, 0)["podSets"][0]["replicas"] = json!(3_000_000_000u64),
            |v| v["spec"]["suspend"] = json!("yes"),
            |v| component(v, 0)["podSetInfos"] = json!([{"tolerations": "none"}]),
        ];
        for (i, mutate) in malformed.into_iter().enumerate() {
            let mut v = base();
            mutate(&mut v);
            let errs = rendered(validate_appwrapper(&v, NS));
            assert_eq!(errs.len(), 1, "case {i}: {errs:?}");
            assert!(errs[0].starts_with("spec: Invalid value: failed to decode: "), "case {i}: {errs:?}");
            // The update checks decode the same way.
            assert_eq!(rendered(validate_appwrapper_update(&v, &base())), errs, "case {i}");
        }
        // Nulls are absent values.
        let mut v = base();
        v["spec"]["managedBy"] = Value::Null;
        component(&mut v, 0)["annotations"] = Value::Null;
        component(&mut v, 0)["podSetInfos"] = Value::Null;
        component(&mut v, 0)["podSets"][0]["annotations"] = Value::Null;
        assert_eq!(rendered(validate_appwrapper(&v, NS)), Vec::<String>::new());
    }

    #[test]
    fn updates_keep_what_create_checked_immutable() {
        let cases = vec![
            case("no_change", |_| {}, &[]),
            case("suspend", |v| v["spec"]["suspend"] = json!(true), &[]),
            case(
                "pod_set_infos_written_by_kueue",
                |v| component(v, 0)["podSetInfos"] = json!([{"nodeSelector": {"zone": "a"}}]),
                &[],
            ),
            case("component_annotations", |v| component(v, 0)["annotations"] = json!({"a": "b"}), &[]),
            case("other_labels", |v| v["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "q"}), &[]),
            case(
                "template",
                |v| component(v, 0)["template"]["spec"]["parallelism"] = json!(3),
                &["spec.components[0].template.raw: Forbidden: attempt to change immutable field"],
            ),
            case(
                "number_of_components_hides_everything_else",
                |v| {
                    v["spec"]["components"].as_array_mut().unwrap().push(json!({"template": job(1)}));
                    v["spec"]["managedBy"] = json!("someone-else");
                },
                &["spec.components: Forbidden: attempt to change immutable field"],
            ),
            case(
                "number_of_pod_sets",
                |v| {
                    component(v, 0).as_object_mut().unwrap().remove("podSets");
                },
                &["spec.components[0].podsets: Forbidden: attempt to change immutable field"],
            ),
            case(
                "pod_set_replicas_and_path",
                |v| component(v, 0)["podSets"][0] = json!({"replicas": 1, "path": "template.spec.template.x"}),
                &[
                    "spec.components[0].podsets[0].replicas: Forbidden: attempt to change immutable field",
                    "spec.components[0].podsets[0].path: Forbidden: attempt to change immutable field",
                ],
            ),
            case(
                "user_labels",
                |v| {
                    v["metadata"]["labels"] = json!({"workload.codeflare.dev/user": "mallory",
                        "workload.codeflare.dev/userid": "42"});
                },
                &[
                    "metadata.labels[workload.codeflare.dev/user]: Forbidden: attempt to change immutable field",
                    "metadata.labels[workload.codeflare.dev/userid]: Forbidden: attempt to change immutable field",
                ],
            ),
            case(
                "managed_by",
                |v| v["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue"),
                &["spec.managedBy: Forbidden: attempt to change immutable field"],
            ),
        ];
        run_update(cases);

        // Unset replicas count 1, so spelling out the default is no change.
        let mut old = base();
        component(&mut old, 0)["podSets"][0] = json!({"path": "template.spec.template"});
        let mut new = old.clone();
        component(&mut new, 0)["podSets"][0]["replicas"] = json!(1);
        assert_eq!(rendered(validate_appwrapper_update(&new, &old)), Vec::<String>::new());

        // A stored object that does not decode is not compared.
        let mut broken = base();
        broken["spec"]["components"] = json!("x");
        assert_eq!(rendered(validate_appwrapper_update(&base(), &broken)), Vec::<String>::new());
    }
}
