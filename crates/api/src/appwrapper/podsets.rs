//! Where a component's pods come from: upstream's path grammar (`getValueAtPath`), podSet inference
//! for the kinds it knows (`InferPodSets`), the check of declared against inferred podSets
//! (`ValidatePodSets`) and the expected pod count, all as `pkg/utils/utils.go` does them, messages
//! included.
//!
//! A path names a place in a component's template and starts with `template`, which is the
//! template object itself: `template.spec.template` is the pod template of a wrapped Job.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::PodSpec;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::keys;
use super::types::{AppWrapperComponent, AppWrapperComponentStatus, AppWrapperPodSet};

const TEMPLATE: &str = "template";
/// `batchv1.JobCompletionIndexAnnotation`.
const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// `kftraining.ReplicaIndexLabel`.
const PYTORCH_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";

/// One step of a resolved path.
enum Step<'p> {
    Key(&'p str),
    Index(usize),
}

/// Upstream's `getValueAtPath`: the value and the steps that reach it, or upstream's error.
///
/// Upstream's error positions are kept as they are, including a quirk: after an index the
/// position records `[n` without the closing bracket (`template.spec.replicatedJobs[0.template`).
fn walk<'v, 'p>(template: &'v Value, path: &'p str) -> Result<(&'v Value, Vec<Step<'p>>), String> {
    let Some(mut remaining) = path.strip_prefix(TEMPLATE) else {
        return Err("first element of the path must be 'template'".to_string());
    };
    let mut processed = TEMPLATE.to_string();
    let mut cursor = template;
    let mut steps = Vec::new();
    while !remaining.is_empty() {
        if remaining.starts_with('[') {
            let Some(end) = remaining.find(']') else {
                return Err(format!("at path position '{processed}' invalid array index '{remaining}'"));
            };
            let expr = &remaining[1..end];
            // Go's strconv.Atoi: an optional sign and decimal digits, within 64 bits.
            let Ok(index) = expr.parse::<i64>() else {
                return Err(format!("at path position '{processed}' invalid index expression '{expr}'"));
            };
            let Value::Array(items) = cursor else {
                return Err(format!("at path position '{processed}' found non-array value"));
            };
            let Some(item) = usize::try_from(index).ok().and_then(|i| items.get(i)) else {
                return Err(format!("at path position '{processed}' out of bounds index '{index}'"));
            };
            cursor = item;
            steps.push(Step::Index(index as usize));
            processed.push_str(&remaining[..end]);
            remaining = &remaining[end + 1..];
        } else if let Some(rest) = remaining.strip_prefix('.') {
            remaining = rest;
            processed.push('.');
            // The key runs to the next `.` or `[`; one at the very start does not end it.
            let mut end = remaining.len();
            if let Some(dot) = remaining.find('.').filter(|&d| d > 0) {
                end = dot;
            }
            if let Some(bracket) = remaining.find('[').filter(|&b| b > 0 && b < end) {
                end = bracket;
            }
            let key = &remaining[..end];
            let Value::Object(map) = cursor else {
                return Err(format!("at path position '{processed}' non-map value"));
            };
            let Some(next) = map.get(key) else {
                return Err(format!("at path position '{processed}' missing field '{key}'"));
            };
            cursor = next;
            steps.push(Step::Key(key));
            remaining = &remaining[end..];
            processed.push_str(key);
        } else {
            return Err(format!("at path position '{processed}' invalid path element '{remaining}'"));
        }
    }
    Ok((cursor, steps))
}

/// The value at `path` in a component's `template` (upstream's `getValueAtPath`).
pub fn value_at_path<'a>(template: &'a Value, path: &str) -> Result<&'a Value, String> {
    walk(template, path).map(|(v, _)| v)
}

/// [`value_at_path`] for changing the value in place (labels and scheduling hints injected into
/// the pod template at a podSet's path).
pub fn value_at_path_mut<'a>(template: &'a mut Value, path: &str) -> Result<&'a mut Value, String> {
    let steps = walk(template, path)?.1;
    let mut cursor = template;
    for step in steps {
        let next = match step {
            Step::Key(k) => cursor.get_mut(k),
            Step::Index(i) => cursor.get_mut(i),
        };
        // Unreachable: the same path was just resolved on the same value.
        cursor = next.ok_or_else(|| format!("path '{path}' changed while it was resolved"))?;
    }
    Ok(cursor)
}

/// Upstream's `GetRawTemplate`: the object at `path`.
fn raw_template<'a>(template: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    value_at_path(template, path)?.as_object().ok_or_else(|| format!("at path position '{path}' non-map value"))
}

/// Whether `path` leads to something with a `spec` that parses as a v1.PodSpec (the checks of
/// upstream's `GetPodTemplateSpec`). Unlike upstream, fields a PodSpec does not have are not
/// rejected; the wrapped kind's own validation sees them when the object is created.
pub(crate) fn check_pod_template(template: &Value, path: &str) -> Result<(), String> {
    let candidate = raw_template(template, path)?;
    let Some(spec) = candidate.get("spec").filter(|s| s.is_object()) else {
        return Err(format!("content at {path} does not contain a spec"));
    };
    PodSpec::deserialize(spec).map_err(|e| format!("content at {path}.spec not parseable as a v1.PodSpec: {e}"))?;
    Ok(())
}

/// Upstream's `GetReplicas`: an integer at `path` (int32 as Go converts it), else `None`.
fn replicas_at(template: &Value, path: &str) -> Option<i32> {
    value_at_path(template, path).ok()?.as_i64().map(|n| n as i32)
}

/// Upstream's `inferReplicas`: no path or no value (or `null`) is 1, an integer is itself,
/// anything else an error; the object holding the value must exist.
fn infer_replicas(template: &Value, path: &str) -> Result<i32, String> {
    if path.is_empty() {
        return Ok(1);
    }
    let (holder, key) = match path.rfind('.') {
        Some(i) => (raw_template(template, &path[..i])?, &path[i + 1..]),
        None => match template.as_object() {
            Some(m) => (m, path),
            None => return Ok(1),
        },
    };
    match holder.get(key) {
        None | Some(Value::Null) => Ok(1),
        Some(v) => match v.as_i64() {
            Some(n) => Ok(n as i32),
            None => Err(format!("at path position '{path}' non-int value {}", go_value(v))),
        },
    }
}

/// Go's `%v` of a value decoded from JSON.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or_default()),
        Value::Array(items) => format!("[{}]", items.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let entries: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", go_value(v))).collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// Go's `%v` of a float64: the shortest digits, in exponent form below 1e-4 and from 1e6 on.
fn go_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if f != 0.0 && !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// The (group, version, kind) of a template, as `Unstructured.GroupVersionKind()` reads it: an
/// apiVersion with more than one `/` gives nothing.
fn gvk(template: &Value) -> (&str, &str, &str) {
    let s = |k: &str| template.get(k).and_then(Value::as_str).unwrap_or("");
    let kind = s("kind");
    match s("apiVersion") {
        "" | "/" => ("", "", kind),
        av => match av.split_once('/') {
            None => ("", av, kind),
            Some((g, v)) if !v.contains('/') => (g, v, kind),
            Some(_) => ("", "", ""),
        },
    }
}

fn pod_set(path: String, replicas: i32, annotations: &[(&str, String)]) -> AppWrapperPodSet {
    AppWrapperPodSet {
        replicas: Some(replicas),
        path,
        annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<BTreeMap<_, _>>(),
    }
}

/// A Job's pod count: `min(parallelism (default 1), completions if set)`.
fn job_pods(template: &Value, job_prefix: &str) -> i32 {
    let mut pods = replicas_at(template, &format!("{job_prefix}spec.parallelism")).unwrap_or(1);
    if let Some(completions) = replicas_at(template, &format!("{job_prefix}spec.completions")) {
        pods = pods.min(completions);
    }
    pods
}

/// Upstream's `inferRayPodSets`: the head (always, 1 pod) and every worker group with a template.
fn ray_pod_sets(template: &Value, prefix: &str) -> Result<Vec<AppWrapperPodSet>, String> {
    let mut pod_sets = vec![pod_set(format!("{prefix}headGroupSpec.template"), 1, &[])];
    if let Ok(Value::Array(workers)) = value_at_path(template, &format!("{prefix}workerGroupSpecs")) {
        for i in 0..workers.len() {
            let worker = format!("{prefix}workerGroupSpecs[{i}].");
            if value_at_path(template, &format!("{worker}{TEMPLATE}")).is_ok() {
                let replicas = infer_replicas(template, &format!("{worker}replicas"))?;
                pod_sets.push(pod_set(format!("{worker}{TEMPLATE}"), replicas, &[]));
            }
        }
    }
    Ok(pod_sets)
}

/// The podSets of a component template of a kind upstream knows (`InferPodSets`); none for
/// other kinds, whose podSets must be declared. Every inferred path must lead to a pod template.
pub fn infer_pod_sets(template: &Value) -> Result<Vec<AppWrapperPodSet>, String> {
    let mut pod_sets = Vec::new();
    match gvk(template) {
        ("", "v1", "Pod") => pod_sets.push(pod_set(TEMPLATE.to_string(), 1, &[])),
        // Without a pod template, nothing.
        ("apps", "v1", "Deployment" | "StatefulSet") if value_at_path(template, "template.spec.template").is_ok() => {
            let replicas = infer_replicas(template, "template.spec.replicas")?;
            pod_sets.push(pod_set("template.spec.template".to_string(), replicas, &[]));
        }
        ("batch", "v1", "Job") => {
            let annotations = [(keys::TAS_POD_INDEX_LABEL, JOB_COMPLETION_INDEX.to_string())];
            pod_sets.push(pod_set("template.spec.template".to_string(), job_pods(template, "template."), &annotations));
        }
        ("jobset.x-k8s.io", "v1alpha2", "JobSet") => {
            if let Ok(Value::Array(jobs)) = value_at_path(template, "template.spec.replicatedJobs") {
                for i in 0..jobs.len() {
                    let job = format!("template.spec.replicatedJobs[{i}].");
                    if value_at_path(template, &format!("{job}template")).is_err() {
                        continue;
                    }
                    let pods = job_pods(template, &format!("{job}template."));
                    let replicas = replicas_at(template, &format!("{job}replicas")).unwrap_or(1);
                    let annotations = [
                        (keys::TAS_POD_INDEX_LABEL, JOB_COMPLETION_INDEX.to_string()),
                        (keys::TAS_SUB_GROUP_INDEX_LABEL, crate::jobset::keys::JOB_INDEX.to_string()),
                        (keys::TAS_SUB_GROUP_COUNT, replicas.to_string()),
                    ];
                    // int32 arithmetic, as upstream.
                    let total = replicas.wrapping_mul(pods);
                    pod_sets.push(pod_set(format!("{job}template.spec.template"), total, &annotations));
                }
            }
        }
        ("kubeflow.org", "v1", "PyTorchJob") => {
            for replica_type in ["Master", "Worker"] {
                let prefix = format!("template.spec.pytorchReplicaSpecs.{replica_type}.");
                if value_at_path(template, &format!("{prefix}{TEMPLATE}")).is_ok() {
                    let replicas = infer_replicas(template, &format!("{prefix}replicas"))?;
                    let annotations = [(keys::TAS_POD_INDEX_LABEL, PYTORCH_REPLICA_INDEX.to_string())];
                    pod_sets.push(pod_set(format!("{prefix}{TEMPLATE}"), replicas, &annotations));
                }
            }
        }
        ("ray.io", "v1", "RayCluster") => pod_sets = ray_pod_sets(template, "template.spec.")?,
        ("ray.io", "v1", "RayJob") => pod_sets = ray_pod_sets(template, "template.spec.rayClusterSpec.")?,
        _ => {}
    }
    for ps in &pod_sets {
        check_pod_template(template, &ps.path)
            .map_err(|e| format!("{} does not refer to a v1.PodSpecTemplate: {e}", ps.path))?;
    }
    Ok(pod_sets)
}

/// Upstream's `ValidatePodSets`: declared podSets must have distinct paths and, when anything was
/// inferred, match the inferred ones path for path and replica count for replica count.
pub fn validate_pod_sets(inferred: &[AppWrapperPodSet], declared: &[AppWrapperPodSet]) -> Result<(), String> {
    if declared.is_empty() {
        return Ok(());
    }
    let mut by_path: HashMap<&str, &AppWrapperPodSet> = HashMap::new();
    for p in declared {
        if by_path.insert(&p.path, p).is_some() {
            return Err(format!("multiple DeclaredPodSets with path '{}'", p.path));
        }
    }
    if inferred.is_empty() {
        return Ok(());
    }
    if inferred.len() != declared.len() {
        return Err(format!("DeclaredPodSet count {} differs from inferred count {}", declared.len(), inferred.len()));
    }
    for ips in inferred {
        let Some(dps) = by_path.get(ips.path.as_str()) else {
            return Err(format!("PodSet with path '{}' is missing", ips.path));
        };
        let (ipr, dpr) = (ips.replicas.unwrap_or(1), dps.replicas.unwrap_or(1));
        if ipr != dpr {
            return Err(format!(
                "replica count {dpr} differs from inferred count {ipr} for PodSet at path position '{}'",
                ips.path
            ));
        }
    }
    Ok(())
}

/// The podSets the controller freezes into `status.componentStatus[i].podSets`: the declared ones
/// if any (checked against the inferred ones), else the inferred ones.
///
/// Declared podSets of a template whose inference fails are taken as they are, as upstream
/// (which does not infer at all then); admission rejects such templates on create.
pub fn component_pod_sets(c: &AppWrapperComponent) -> Result<Vec<AppWrapperPodSet>, String> {
    let inferred = infer_pod_sets(&c.template);
    if c.declared_pod_sets.is_empty() {
        return inferred;
    }
    validate_pod_sets(&inferred.unwrap_or_default(), &c.declared_pod_sets)?;
    Ok(c.declared_pod_sets.clone())
}

/// How many pods an AppWrapper expects: the replicas of every frozen podSet (unset counts 1).
pub fn expected_pods(component_status: &[AppWrapperComponentStatus]) -> i32 {
    component_status.iter().flat_map(|c| &c.pod_sets).fold(0i32, |n, ps| n.saturating_add(ps.replicas.unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_template() -> Value {
        json!({"spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    }

    fn wrapped(api_version: &str, kind: &str, spec: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec})
    }

    fn job(spec: Value) -> Value {
        let mut spec = spec;
        spec["template"] = pod_template();
        wrapped("batch/v1", "Job", spec)
    }

    fn ps(path: &str, replicas: Option<i32>) -> AppWrapperPodSet {
        AppWrapperPodSet { replicas, path: path.to_string(), annotations: BTreeMap::new() }
    }

    /// (path, replicas) of each podSet.
    type Shape<'a> = Vec<(&'a str, Option<i32>)>;

    fn shape(pod_sets: &[AppWrapperPodSet]) -> Shape<'_> {
        pod_sets.iter().map(|p| (p.path.as_str(), p.replicas)).collect()
    }

    fn sample() -> Value {
        json!({"kind": "K", "spec": {"items": [{"name": "a"}, {"name": "b", "list": [1, 2]}]}})
    }

    #[test]
    fn paths_resolve_fields_and_indices_from_the_template_itself() {
        let t = sample();
        assert_eq!(value_at_path(&t, "template").unwrap(), &t);
        assert_eq!(value_at_path(&t, "template.kind").unwrap(), "K");
        assert_eq!(value_at_path(&t, "template.spec.items[1].name").unwrap(), "b");
        assert_eq!(value_at_path(&t, "template.spec.items[1].list[+1]").unwrap(), 2);
    }

    #[test]
    fn bad_paths_fail_with_upstream_messages() {
        let cases = [
            ("spec.items", "first element of the path must be 'template'"),
            ("", "first element of the path must be 'template'"),
            ("template.spec.items[0", "at path position 'template.spec.items' invalid array index '[0'"),
            ("template.spec.items[x]", "at path position 'template.spec.items' invalid index expression 'x'"),
            ("template.spec.items[]", "at path position 'template.spec.items' invalid index expression ''"),
            ("template.spec[0]", "at path position 'template.spec' found non-array value"),
            ("template.spec.items[2]", "at path position 'template.spec.items' out of bounds index '2'"),
            ("template.spec.items[-1]", "at path position 'template.spec.items' out of bounds index '-1'"),
            ("template.kind.x", "at path position 'template.kind.' non-map value"),
            ("template.spec.nope", "at path position 'template.spec.' missing field 'nope'"),
            ("templates", "at path position 'template' invalid path element 's'"),
            // Upstream records an index without its closing bracket.
            ("template.spec.items[0].nope", "at path position 'template.spec.items[0.' missing field 'nope'"),
            ("template.spec.items[0]name", "at path position 'template.spec.items[0' invalid path element 'name'"),
            // A leading `.` does not end a key: the key is `.spec`.
            ("template..spec", "at path position 'template.' missing field '.spec'"),
        ];
        let t = sample();
        for (path, want) in cases {
            assert_eq!(value_at_path(&t, path).unwrap_err(), want, "path {path:?}");
        }
    }

    #[test]
    fn the_mutable_path_changes_the_value_in_place() {
        let mut t = sample();
        *value_at_path_mut(&mut t, "template.spec.items[0].name").unwrap() = json!("z");
        assert_eq!(t["spec"]["items"][0]["name"], "z");
        value_at_path_mut(&mut t, "template.spec.items[1]").unwrap()["labels"] = json!({"k": "v"});
        assert_eq!(t["spec"]["items"][1]["labels"]["k"], "v");
        assert_eq!(
            value_at_path_mut(&mut t, "template.spec.items[5]").unwrap_err(),
            "at path position 'template.spec.items' out of bounds index '5'"
        );
    }

    #[test]
    fn pod_sets_are_inferred_for_the_kinds_upstream_knows() {
        let tmpl = pod_template();
        let cases: Vec<(&str, Value, Shape)> = vec![
            ("pod", wrapped("v1", "Pod", tmpl["spec"].clone()), vec![("template", Some(1))]),
            (
                "deployment",
                wrapped("apps/v1", "Deployment", json!({"replicas": 3, "template": tmpl})),
                vec![("template.spec.template", Some(3))],
            ),
            (
                "statefulset_without_replicas_has_one",
                wrapped("apps/v1", "StatefulSet", json!({"template": tmpl})),
                vec![("template.spec.template", Some(1))],
            ),
            ("deployment_without_template_has_none", wrapped("apps/v1", "Deployment", json!({"replicas": 3})), vec![]),
            ("job_defaults_to_one", job(json!({})), vec![("template.spec.template", Some(1))]),
            ("job_parallelism", job(json!({"parallelism": 4})), vec![("template.spec.template", Some(4))]),
            (
                "job_fewer_completions_than_parallelism",
                job(json!({"parallelism": 4, "completions": 2})),
                vec![("template.spec.template", Some(2))],
            ),
            (
                "job_more_completions_than_parallelism",
                job(json!({"parallelism": 2, "completions": 6})),
                vec![("template.spec.template", Some(2))],
            ),
            (
                "job_non_integer_parallelism_is_ignored",
                job(json!({"parallelism": "4"})),
                vec![("template.spec.template", Some(1))],
            ),
            (
                "jobset_multiplies_replicas_by_pods_per_job",
                wrapped(
                    "jobset.x-k8s.io/v1alpha2",
                    "JobSet",
                    json!({"replicatedJobs": [
                        {"name": "leader", "template": {"spec": {"template": tmpl}}},
                        {"name": "workers", "replicas": 3,
                            "template": {"spec": {"parallelism": 4, "completions": 4, "template": tmpl}}},
                    ]}),
                ),
                vec![
                    ("template.spec.replicatedJobs[0].template.spec.template", Some(1)),
                    ("template.spec.replicatedJobs[1].template.spec.template", Some(12)),
                ],
            ),
            (
                "pytorchjob_master_and_worker",
                wrapped(
                    "kubeflow.org/v1",
                    "PyTorchJob",
                    json!({"pytorchReplicaSpecs": {
                        "Master": {"template": tmpl},
                        "Worker": {"replicas": 3, "template": tmpl},
                    }}),
                ),
                vec![
                    ("template.spec.pytorchReplicaSpecs.Master.template", Some(1)),
                    ("template.spec.pytorchReplicaSpecs.Worker.template", Some(3)),
                ],
            ),
            (
                "raycluster_head_and_worker_groups",
                wrapped(
                    "ray.io/v1",
                    "RayCluster",
                    json!({"headGroupSpec": {"template": tmpl},
                        "workerGroupSpecs": [{"replicas": 2, "template": tmpl}, {"template": tmpl}, {"replicas": 5}]}),
                ),
                vec![
                    ("template.spec.headGroupSpec.template", Some(1)),
                    ("template.spec.workerGroupSpecs[0].template", Some(2)),
                    ("template.spec.workerGroupSpecs[1].template", Some(1)),
                ],
            ),
            (
                "rayjob_reads_its_cluster_spec",
                wrapped(
                    "ray.io/v1",
                    "RayJob",
                    json!({"rayClusterSpec": {"headGroupSpec": {"template": tmpl},
                        "workerGroupSpecs": [{"replicas": 4, "template": tmpl}]}}),
                ),
                vec![
                    ("template.spec.rayClusterSpec.headGroupSpec.template", Some(1)),
                    ("template.spec.rayClusterSpec.workerGroupSpecs[0].template", Some(4)),
                ],
            ),
            ("unknown_kind_has_none", wrapped("v1", "ConfigMap", json!({})), vec![]),
            ("unknown_version_has_none", wrapped("batch/v2", "Job", json!({"template": tmpl})), vec![]),
            ("malformed_api_version_has_none", wrapped("a/b/c", "Pod", json!({})), vec![]),
            ("not_an_object_has_none", json!("Job"), vec![]),
        ];
        for (name, template, want) in cases {
            let got = infer_pod_sets(&template).unwrap_or_else(|e| panic!("case {name}: {e}"));
            assert_eq!(shape(&got), want, "case {name}");
        }
    }

    #[test]
    fn inferred_pod_sets_carry_upstream_topology_annotations() {
        let j = &infer_pod_sets(&job(json!({}))).unwrap()[0];
        assert_eq!(
            j.annotations,
            BTreeMap::from([(keys::TAS_POD_INDEX_LABEL.to_string(), JOB_COMPLETION_INDEX.to_string())])
        );
        let js = wrapped(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            json!({"replicatedJobs": [{"name": "w", "replicas": 3, "template": {"spec": {"template": pod_template()}}}]}),
        );
        let js = &infer_pod_sets(&js).unwrap()[0];
        assert_eq!(js.annotations[keys::TAS_POD_INDEX_LABEL], JOB_COMPLETION_INDEX);
        assert_eq!(js.annotations[keys::TAS_SUB_GROUP_INDEX_LABEL], "jobset.sigs.k8s.io/job-index");
        assert_eq!(js.annotations[keys::TAS_SUB_GROUP_COUNT], "3");
        let pod = &infer_pod_sets(&wrapped("v1", "Pod", pod_template()["spec"].clone())).unwrap()[0];
        assert!(pod.annotations.is_empty());
    }

    #[test]
    fn inference_fails_when_a_known_path_is_not_a_pod_template() {
        let pytorch = |replicas: Value| {
            wrapped(
                "kubeflow.org/v1",
                "PyTorchJob",
                json!({"pytorchReplicaSpecs": {"Worker": {"replicas": replicas, "template": pod_template()}}}),
            )
        };
        let mut bad_containers = job(json!({}));
        bad_containers["spec"]["template"]["spec"]["containers"] = json!("main");
        let cases = [
            (
                "job_without_pod_template",
                wrapped("batch/v1", "Job", json!({"parallelism": 2})),
                "template.spec.template does not refer to a v1.PodSpecTemplate: at path position 'template.spec.' missing field 'template'",
            ),
            (
                "pod_without_spec",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
                "template does not refer to a v1.PodSpecTemplate: content at template does not contain a spec",
            ),
            (
                "ray_cluster_without_head",
                wrapped("ray.io/v1", "RayCluster", json!({"workerGroupSpecs": []})),
                "template.spec.headGroupSpec.template does not refer to a v1.PodSpecTemplate: at path position 'template.spec.' missing field 'headGroupSpec'",
            ),
            (
                "string_replicas",
                pytorch(json!("three")),
                "at path position 'template.spec.pytorchReplicaSpecs.Worker.replicas' non-int value three",
            ),
            (
                "fractional_replicas",
                pytorch(json!(2.5)),
                "at path position 'template.spec.pytorchReplicaSpecs.Worker.replicas' non-int value 2.5",
            ),
            (
                "float_replicas_print_as_go_prints_them",
                pytorch(json!(1e6)),
                "at path position 'template.spec.pytorchReplicaSpecs.Worker.replicas' non-int value 1e+06",
            ),
        ];
        for (name, template, want) in cases {
            assert_eq!(infer_pod_sets(&template).unwrap_err(), want, "case {name}");
        }
        let err = infer_pod_sets(&bad_containers).unwrap_err();
        assert!(
            err.starts_with("template.spec.template does not refer to a v1.PodSpecTemplate: content at template.spec.template.spec not parseable as a v1.PodSpec: "),
            "{err}"
        );
    }

    #[test]
    fn declared_pod_sets_are_checked_against_inferred_ones_with_upstream_messages() {
        let inferred = [ps("template.spec.template", Some(2)), ps("template.spec.other", None)];
        type Case<'a> = (&'a str, Vec<AppWrapperPodSet>, &'a [AppWrapperPodSet], Result<(), String>);
        let cases: Vec<Case> = vec![
            ("nothing_declared", vec![], &inferred, Ok(())),
            (
                "same_sets_in_another_order",
                vec![ps("template.spec.other", Some(1)), ps("template.spec.template", Some(2))],
                &inferred,
                Ok(()),
            ),
            ("nothing_inferred", vec![ps("template.x", Some(7))], &[], Ok(())),
            (
                "duplicate_paths_even_without_inference",
                vec![ps("template.x", None), ps("template.x", Some(2))],
                &[],
                Err("multiple DeclaredPodSets with path 'template.x'".into()),
            ),
            (
                "count_differs",
                vec![ps("template.spec.template", Some(2))],
                &inferred,
                Err("DeclaredPodSet count 1 differs from inferred count 2".into()),
            ),
            (
                "path_missing",
                vec![ps("template.spec.template", Some(2)), ps("template.spec.wrong", None)],
                &inferred,
                Err("PodSet with path 'template.spec.other' is missing".into()),
            ),
            (
                "replicas_differ",
                vec![ps("template.spec.template", Some(3)), ps("template.spec.other", None)],
                &inferred,
                Err("replica count 3 differs from inferred count 2 for PodSet at path position 'template.spec.template'"
                    .into()),
            ),
            (
                "unset_replicas_count_one",
                vec![ps("template.spec.template", None), ps("template.spec.other", None)],
                &inferred,
                Err("replica count 1 differs from inferred count 2 for PodSet at path position 'template.spec.template'"
                    .into()),
            ),
        ];
        for (name, declared, inferred, want) in cases {
            assert_eq!(validate_pod_sets(inferred, &declared), want, "case {name}");
        }
    }

    #[test]
    fn a_component_freezes_declared_pod_sets_else_inferred_ones() {
        let component = |template: Value, declared: Vec<AppWrapperPodSet>| AppWrapperComponent {
            template,
            declared_pod_sets: declared,
            ..Default::default()
        };
        let j = job(json!({"parallelism": 2}));
        let inferred = component_pod_sets(&component(j.clone(), vec![])).unwrap();
        assert_eq!(shape(&inferred), [("template.spec.template", Some(2))]);
        assert_eq!(inferred[0].annotations[keys::TAS_POD_INDEX_LABEL], JOB_COMPLETION_INDEX);

        // Declared ones are kept as written (no inferred annotations added).
        let declared = vec![ps("template.spec.template", Some(2))];
        assert_eq!(component_pod_sets(&component(j.clone(), declared.clone())).unwrap(), declared);
        assert_eq!(
            component_pod_sets(&component(j, vec![ps("template.spec.template", Some(5))])).unwrap_err(),
            "replica count 5 differs from inferred count 2 for PodSet at path position 'template.spec.template'"
        );

        // A kind without inference needs declared podSets.
        let custom = wrapped("example.com/v1", "Trainer", json!({"workers": {"template": pod_template()}}));
        assert_eq!(component_pod_sets(&component(custom.clone(), vec![])).unwrap(), vec![]);
        let declared = vec![ps("template.spec.workers.template", Some(4))];
        assert_eq!(component_pod_sets(&component(custom, declared.clone())).unwrap(), declared);

        assert!(component_pod_sets(&component(wrapped("batch/v1", "Job", json!({})), vec![])).is_err());
    }

    #[test]
    fn expected_pods_sum_every_frozen_pod_set() {
        let status = |pod_sets: Vec<AppWrapperPodSet>| AppWrapperComponentStatus { pod_sets, ..Default::default() };
        assert_eq!(expected_pods(&[]), 0);
        let statuses = [
            status(vec![ps("template", None)]),
            status(vec![ps("template.a", Some(3)), ps("template.b", Some(4))]),
            status(vec![]),
        ];
        assert_eq!(expected_pods(&statuses), 8);
    }
}
