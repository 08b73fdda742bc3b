//! `scheduling.k8s.io/v1alpha2` Workloads and PodGroups (KEP-4671, gang scheduling): kube-
//! apiserver's validation (`pkg/apis/scheduling/validation`: `ValidateWorkload`,
//! `ValidateWorkloadUpdate`, `ValidatePodGroup`, `ValidatePodGroupUpdate`) and the names the
//! scheduler and the controllers share.

use serde_json::{Value, json};

use crate::field::FieldError;
use crate::validation::dns1123_subdomain_errors;

pub const GROUP: &str = "scheduling.k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const API_VERSION: &str = "scheduling.k8s.io/v1alpha2";
pub const WORKLOAD_KIND: &str = "Workload";
pub const POD_GROUP_KIND: &str = "PodGroup";
pub const WORKLOADS: &str = "workloads";
pub const POD_GROUPS: &str = "podgroups";
/// `scheduling.WorkloadMaxPodGroupTemplates`.
pub const MAX_POD_GROUP_TEMPLATES: usize = 8;
/// `PodGroupScheduled`: whether the group's scheduling requirement has been satisfied.
pub const POD_GROUP_SCHEDULED: &str = "PodGroupScheduled";
/// The `PodGroupScheduled` reason of a group that does not fit (capacity, affinity, gang size).
pub const UNSCHEDULABLE: &str = "Unschedulable";

const IMMUTABLE: &str = "field is immutable";

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn spec(obj: &Value) -> &Value {
    static NULL: Value = Value::Null;
    get(obj, "spec").unwrap_or(&NULL)
}

/// A name field holding a DNS subdomain (`ValidatePodGroupName` on a set value).
fn name(v: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    match v.and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(path, "")),
        Some(s) => {
            for msg in dns1123_subdomain_errors(s) {
                errs.push(FieldError::invalid(path, &json!(s), msg));
            }
        }
    }
}

/// `content.IsPathSegmentName`.
fn path_segment(v: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let s = match v.and_then(Value::as_str) {
        None | Some("") => return errs.push(FieldError::required(path, "")),
        Some(s) => s,
    };
    let mut problems = vec![];
    if s == "." || s == ".." {
        problems.push(format!("may not be '{s}'"));
    }
    for bad in ['/', '%'] {
        if s.contains(bad) {
            problems.push(format!("may not contain '{bad}'"));
        }
    }
    for p in problems {
        errs.push(FieldError::invalid(path, &json!(s), p));
    }
}

/// `validateControllerRef`.
fn controller_ref(r: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(group) = get(r, "apiGroup").and_then(Value::as_str).filter(|g| !g.is_empty()) {
        for msg in dns1123_subdomain_errors(group) {
            errs.push(FieldError::invalid(format!("{path}.apiGroup"), &json!(group), msg));
        }
    }
    path_segment(get(r, "kind"), &format!("{path}.kind"), errs);
    path_segment(get(r, "name"), &format!("{path}.name"), errs);
}

/// `validatePodGroupSchedulingPolicy`: exactly one of `basic`, `gang`; a gang's `minCount` > 0.
fn scheduling_policy(policy: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    let policy = policy.unwrap_or(&null);
    match (get(policy, "basic"), get(policy, "gang")) {
        (None, None) => errs.push(FieldError::invalid(path, &json!(""), "must specify one of: `basic`, `gang`")),
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path,
            &json!("{`basic`, `gang`}"),
            "exactly one of `basic`, `gang` is required, but multiple fields are set",
        )),
        (Some(_), None) => {}
        (None, Some(gang)) => {
            let path = format!("{path}.gang.minCount");
            match get(gang, "minCount") {
                None => errs.push(FieldError::required(path, "")),
                Some(n) if n.as_i64() == Some(0) => errs.push(FieldError::required(path, "")),
                Some(n) if n.as_i64().is_some_and(|n| n < 0) => {
                    errs.push(FieldError::invalid(path, n, "must be greater than zero"))
                }
                Some(n) if n.as_i64().is_none_or(|n| n > i64::from(i32::MAX)) => {
                    errs.push(FieldError::invalid(path, n, "must be a 32-bit integer"))
                }
                Some(_) => {}
            }
        }
    }
}

/// `validatePodGroupTemplates`: at least one, at most 8; each template (on create only: the list
/// is immutable after) named uniquely, with a valid policy.
fn pod_group_templates(spec: &Value, create: bool, errs: &mut Vec<FieldError>) {
    let path = "spec.podGroupTemplates";
    let templates = get(spec, "podGroupTemplates").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if templates.is_empty() {
        return errs.push(FieldError::required(path, "must have at least one item"));
    }
    if templates.len() > MAX_POD_GROUP_TEMPLATES {
        return errs.push(FieldError::too_many(path, templates.len(), MAX_POD_GROUP_TEMPLATES));
    }
    if !create {
        return;
    }
    let mut seen = std::collections::HashSet::new();
    for (i, t) in templates.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let n = get(t, "name");
        name(n, &format!("{at}.name"), errs);
        let n = n.and_then(Value::as_str).unwrap_or_default();
        if !seen.insert(n) {
            errs.push(FieldError::duplicate(&at, &json!(n)));
        }
        scheduling_policy(get(t, "schedulingPolicy"), &format!("{at}.schedulingPolicy"), errs);
    }
}

fn immutable(new: Option<&Value>, old: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    if new != old {
        errs.push(FieldError::invalid(path, new.unwrap_or(&Value::Null), IMMUTABLE));
    }
}

/// `ValidateWorkload` (`old` None) or `ValidateWorkloadUpdate`: the spec is immutable, but a
/// missing `controllerRef` may be set once.
pub fn validate_workload(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = vec![];
    let s = spec(obj);
    match old.map(spec) {
        None => {
            if let Some(r) = get(s, "controllerRef") {
                controller_ref(r, "spec.controllerRef", &mut errs);
            }
            pod_group_templates(s, true, &mut errs);
        }
        Some(old) => {
            let path = "spec.controllerRef";
            match (get(old, "controllerRef"), get(s, "controllerRef")) {
                (Some(was), now) => immutable(now, Some(was), path, &mut errs),
                (None, Some(now)) => controller_ref(now, path, &mut errs),
                (None, None) => {}
            }
            let path = "spec.podGroupTemplates";
            immutable(get(s, "podGroupTemplates"), get(old, "podGroupTemplates"), path, &mut errs);
            pod_group_templates(s, false, &mut errs);
        }
    }
    errs
}

/// `ValidatePodGroup` (`old` None) or `ValidatePodGroupUpdate`: `podGroupTemplateRef` and
/// `schedulingPolicy` are immutable.
pub fn validate_pod_group(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = vec![];
    let s = spec(obj);
    if let Some(old) = old.map(spec) {
        for field in ["podGroupTemplateRef", "schedulingPolicy"] {
            immutable(get(s, field), get(old, field), &format!("spec.{field}"), &mut errs);
        }
        return errs;
    }
    if let Some(r) = get(s, "podGroupTemplateRef") {
        let path = "spec.podGroupTemplateRef";
        match get(r, "workload") {
            // A union of one member so far.
            None => errs.push(FieldError::invalid(path, &json!(""), "must specify one of: `workload`")),
            Some(w) => {
                name(get(w, "workloadName"), &format!("{path}.workload.workloadName"), &mut errs);
                name(get(w, "podGroupTemplateName"), &format!("{path}.workload.podGroupTemplateName"), &mut errs);
            }
        }
    }
    scheduling_policy(get(s, "schedulingPolicy"), "spec.schedulingPolicy", &mut errs);
    errs
}

/// The gang size of a PodGroup: `spec.schedulingPolicy.gang.minCount`, None under `basic`.
pub fn gang_min_count(pod_group: &Value) -> Option<u32> {
    pod_group
        .pointer("/spec/schedulingPolicy/gang/minCount")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// The PodGroup a pod belongs to: `spec.schedulingGroup.podGroupName`.
pub fn pod_group_of(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/schedulingGroup/podGroupName").and_then(Value::as_str).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn gang(n: Value) -> Value {
        json!({"gang": {"minCount": n}})
    }

    #[test]
    fn workload_creation_is_validated_as_kube_apiserver_words_it() {
        let template = |name: &str, policy: Value| json!({"name": name, "schedulingPolicy": policy});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("one gang template", json!({"podGroupTemplates": [template("workers", gang(json!(4)))]}), vec![]),
            (
                "a basic template and a controllerRef",
                json!({"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "j"},
                    "podGroupTemplates": [template("driver", json!({"basic": {}}))]}),
                vec![],
            ),
            ("no templates", json!({}), vec!["spec.podGroupTemplates: Required value: must have at least one item"]),
            (
                "nine templates",
                json!({"podGroupTemplates": (0..9).map(|i| template(&format!("t{i}"), gang(json!(1)))).collect::<Vec<_>>()}),
                vec!["spec.podGroupTemplates: Too many: 9: must have at most 8 items"],
            ),
            (
                "minCount zero, then negative",
                json!({"podGroupTemplates": [template("a", gang(json!(0))), template("b", gang(json!(-1)))]}),
                vec![
                    "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Required value",
                    "spec.podGroupTemplates[1].schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than zero",
                ],
            ),
            (
                "no policy, then both",
                json!({"podGroupTemplates": [template("a", json!({})),
                    template("b", json!({"basic": {}, "gang": {"minCount": 2}}))]}),
                vec![
                    "spec.podGroupTemplates[0].schedulingPolicy: Invalid value: \"\": must specify one of: `basic`, `gang`",
                    "spec.podGroupTemplates[1].schedulingPolicy: Invalid value: \"{`basic`, `gang`}\": exactly one of `basic`, `gang` is required, but multiple fields are set",
                ],
            ),
            (
                "duplicate and missing names",
                json!({"podGroupTemplates": [template("a", gang(json!(1))), template("a", gang(json!(1))),
                    json!({"schedulingPolicy": {"basic": {}}})]}),
                vec![
                    "spec.podGroupTemplates[1]: Duplicate value: \"a\"",
                    "spec.podGroupTemplates[2].name: Required value",
                ],
            ),
            (
                "controllerRef without kind, name with a slash",
                json!({"controllerRef": {"name": "a/b"}, "podGroupTemplates": [template("a", gang(json!(1)))]}),
                vec![
                    "spec.controllerRef.kind: Required value",
                    "spec.controllerRef.name: Invalid value: \"a/b\": may not contain '/'",
                ],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(messages(validate_workload(&json!({"spec": spec}), None)), want, "{name}");
        }
    }

    #[test]
    fn a_workload_spec_is_immutable_but_a_missing_controller_ref_may_be_set() {
        let old =
            json!({"spec": {"podGroupTemplates": [{"name": "w", "schedulingPolicy": {"gang": {"minCount": 2}}}]}});
        let mut same_plus_ref = old.clone();
        same_plus_ref["spec"]["controllerRef"] = json!({"apiGroup": "batch", "kind": "Job", "name": "j"});
        assert_eq!(messages(validate_workload(&same_plus_ref, Some(&old))), Vec::<String>::new());
        let mut changed_ref = same_plus_ref.clone();
        changed_ref["spec"]["controllerRef"]["name"] = json!("k");
        assert_eq!(
            messages(validate_workload(&changed_ref, Some(&same_plus_ref))),
            [
                "spec.controllerRef: Invalid value: {\"apiGroup\":\"batch\",\"kind\":\"Job\",\"name\":\"k\"}: field is immutable"
            ]
        );
        let mut bigger = old.clone();
        bigger["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] = json!(3);
        let got = messages(validate_workload(&bigger, Some(&old)));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("spec.podGroupTemplates: Invalid value: ") && got[0].ends_with("field is immutable")
        );
    }

    #[test]
    fn pod_groups_need_one_policy_and_keep_their_spec() {
        let pg = |policy: Value| {
            json!({"spec": {"schedulingPolicy": policy,
            "podGroupTemplateRef": {"workload": {"workloadName": "wl", "podGroupTemplateName": "workers"}}}})
        };
        assert_eq!(messages(validate_pod_group(&pg(gang(json!(3))), None)), Vec::<String>::new());
        assert_eq!(
            messages(validate_pod_group(&pg(gang(json!(0))), None)),
            ["spec.schedulingPolicy.gang.minCount: Required value"]
        );
        assert_eq!(
            messages(validate_pod_group(
                &json!({"spec": {"podGroupTemplateRef": {"workload": {"workloadName": "Wl"}}}}),
                None
            )),
            [
                "spec.podGroupTemplateRef.workload.workloadName: Invalid value: \"Wl\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.podGroupTemplateRef.workload.podGroupTemplateName: Required value",
                "spec.schedulingPolicy: Invalid value: \"\": must specify one of: `basic`, `gang`",
            ]
        );
        let got = messages(validate_pod_group(&pg(gang(json!(4))), Some(&pg(gang(json!(3))))));
        assert_eq!(got, ["spec.schedulingPolicy: Invalid value: {\"gang\":{\"minCount\":4}}: field is immutable"]);
    }

    #[test]
    fn gang_size_and_pod_group_membership_are_read_from_their_fields() {
        assert_eq!(gang_min_count(&json!({"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})), Some(3));
        assert_eq!(gang_min_count(&json!({"spec": {"schedulingPolicy": {"basic": {}}}})), None);
        assert_eq!(pod_group_of(&json!({"spec": {"schedulingGroup": {"podGroupName": "pg"}}})), Some("pg"));
        assert_eq!(pod_group_of(&json!({"spec": {}})), None);
    }
}
