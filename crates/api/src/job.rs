//! batch/v1 Job admission: defaulting and validation, as kube-apiserver does it.
//!
//! Works on the JSON object as stored (`serde_json::Value`), so fields unknown to typed clients
//! survive. Sources: `pkg/apis/batch/v1/defaults.go` (`SetDefaults_Job`, `SetDefaults_PodSpec`,
//! `SetDefaults_Container`), `pkg/registry/batch/job/strategy.go` (`generateSelector`, validation
//! options) and `pkg/apis/batch/validation/validation.go` (`ValidateJob`, `ValidateJobUpdate`),
//! with every Job feature gate in its GA state. Error texts and field paths are upstream's.
//!
//! Not covered here: generic `ObjectMeta` validation (names, labels, annotations, owner
//! references; the API server does that for every kind) and, of `ValidatePodTemplateSpec`, all
//! but the pod spec checks of [`crate::pod::validate_pod_spec`].
//!
//! **Local-mode extension.** A `podFailurePolicy` rule may carry `setConditionReason`: a Kubernetes
//! condition reason (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024 bytes) that the Job
//! controller uses as the reason of the `FailureTarget`/`Failed` conditions when that rule fails
//! the Job. It is only allowed on a `FailJob` rule (else
//! `Forbidden: setConditionReason is only supported for the FailJob action`). Like the rest of
//! the policy it is immutable.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::field::{FieldError, go_json, quote, write_go_json_str};
use crate::validation::*;

/// Label with the Job name on the pod template (and selector generation).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Label with the Job UID on the pod template; the generated selector selects it.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// Legacy unprefixed form of [`JOB_NAME_LABEL`].
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// Legacy unprefixed form of [`CONTROLLER_UID_LABEL`].
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";

const MAX_PARALLELISM_FOR_INDEXED_JOB: i64 = 100_000;
const MAX_FAILED_INDEXES_FOR_INDEXED_JOB: i64 = 100_000;
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
const PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS: i64 = 10_000;
const MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS: i64 = 10_000;
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
const MAX_ON_EXIT_CODES_VALUES: usize = 255;
const MAX_ON_POD_CONDITIONS_PATTERNS: usize = 20;
const MAX_MANAGED_BY_LENGTH: usize = 63;
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;
const MAX_SUCCESS_POLICY_RULES: usize = 20;
const MAX_CONDITION_REASON_LENGTH: usize = 1024;

const ACTIONS: &[&str] = &["Count", "FailIndex", "FailJob", "Ignore"];
const OPERATORS: &[&str] = &["In", "NotIn"];
const CONDITION_STATUSES: &[&str] = &["False", "True", "Unknown"];
const IMMUTABLE: &str = "field is immutable";
pub(crate) const NONNEGATIVE: &str = "must be greater than or equal to 0";

// ---------------------------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------------------------

/// Applies the defaults kube-apiserver gives a Job: `SetDefaults_Job`, the pod-template defaults
/// (`SetDefaults_PodSpec`, `SetDefaults_Container`) and, unless `spec.manualSelector` is true,
/// the generated selector and template labels (`generateSelector`, from `metadata.name` and
/// `metadata.uid`, which must already be set). Values already present are kept.
///
/// Upstream generates the selector only on create; here labels and selector entries are only
/// ever added when missing, so calling it on an update is harmless.
pub fn default_job(job: &mut Value) {
    let Some(obj) = job.as_object_mut() else { return };
    let meta = obj.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or_default().to_string();
    let uid = meta.and_then(|m| m.get("uid")).and_then(Value::as_str).unwrap_or_default().to_string();
    let Some(spec) = child_obj(obj, "spec") else { return };

    if is_unset(spec.get("completions")) && is_unset(spec.get("parallelism")) {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_if_unset(spec, "parallelism", json!(1));
    if is_unset(spec.get("backoffLimit")) {
        let limit = if is_unset(spec.get("backoffLimitPerIndex")) { 6 } else { i32::MAX as i64 };
        spec.insert("backoffLimit".into(), json!(limit));
    }
    set_if_unset(spec, "completionMode", json!("NonIndexed"));
    set_if_unset(spec, "suspend", json!(false));
    let has_pfp = !is_unset(spec.get("podFailurePolicy"));
    if let Some(rules) = spec.get_mut("podFailurePolicy").and_then(|p| p.get_mut("rules")).and_then(Value::as_array_mut)
    {
        for rule in rules {
            let patterns = rule.get_mut("onPodConditions").and_then(Value::as_array_mut);
            for pattern in patterns.into_iter().flatten().filter_map(Value::as_object_mut) {
                set_if_empty_str(pattern, "status", "True");
            }
        }
    }
    set_if_unset(spec, "podReplacementPolicy", json!(if has_pfp { "Failed" } else { "TerminatingOrFailed" }));
    set_if_unset(spec, "manualSelector", json!(false));

    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if let Some(template) = child_obj(spec, "template")
        && let Some(pod_spec) = child_obj(template, "spec")
    {
        default_pod_spec(pod_spec);
    }
    if !manual {
        generate_selector(spec, &name, &uid);
    }

    // SetDefaults_Job: a Job without labels gets its template's labels.
    let template_labels = spec.get("template").and_then(|t| t.get("metadata")).and_then(|m| m.get("labels")).cloned();
    if let Some(labels) = template_labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        && let Some(meta) = child_obj(obj, "metadata")
        && meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty)
    {
        meta.insert("labels".into(), labels);
    }
}

/// `generateSelector`: template labels (user values win; validation rejects mismatches) and the
/// `batch.kubernetes.io/controller-uid` selector entry.
fn generate_selector(spec: &mut Map<String, Value>, name: &str, uid: &str) {
    if let Some(template) = child_obj(spec, "template")
        && let Some(meta) = child_obj(template, "metadata")
        && let Some(labels) = child_obj(meta, "labels")
    {
        for (key, value) in [
            (LEGACY_JOB_NAME_LABEL, name),
            (JOB_NAME_LABEL, name),
            (LEGACY_CONTROLLER_UID_LABEL, uid),
            (CONTROLLER_UID_LABEL, uid),
        ] {
            set_if_unset(labels, key, json!(value));
        }
    }
    if let Some(selector) = child_obj(spec, "selector")
        && let Some(match_labels) = child_obj(selector, "matchLabels")
    {
        set_if_unset(match_labels, CONTROLLER_UID_LABEL, json!(uid));
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_if_empty_str(spec, "dnsPolicy", "ClusterFirst");
    set_if_empty_str(spec, "restartPolicy", "Always");
    set_if_unset(spec, "securityContext", json!({}));
    set_if_unset(spec, "terminationGracePeriodSeconds", json!(30));
    set_if_empty_str(spec, "schedulerName", "default-scheduler");
    for key in ["initContainers", "containers"] {
        let containers = spec.get_mut(key).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten().filter_map(Value::as_object_mut) {
            set_if_empty_str(c, "terminationMessagePath", "/dev/termination-log");
            set_if_empty_str(c, "terminationMessagePolicy", "File");
            let pull = image_pull_policy(c.get("image").and_then(Value::as_str).unwrap_or_default());
            set_if_empty_str(c, "imagePullPolicy", pull);
            let ports = c.get_mut("ports").and_then(Value::as_array_mut);
            for p in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
                set_if_empty_str(p, "protocol", "TCP");
            }
        }
    }
}

/// `Always` for a `:latest` or untagged image, else `IfNotPresent` (a digest without tag counts as tagged).
fn image_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = match last.split_once(':') {
        Some((_, t)) => t,
        None if digest.is_some() => "",
        None => "latest",
    };
    if tag == "latest" { "Always" } else { "IfNotPresent" }
}

fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

fn set_if_unset(m: &mut Map<String, Value>, key: &str, value: Value) {
    if is_unset(m.get(key)) {
        m.insert(key.into(), value);
    }
}

/// Go defaults string fields when they are `""`.
fn set_if_empty_str(m: &mut Map<String, Value>, key: &str, value: &str) {
    if matches!(m.get(key), None | Some(Value::Null)) || m.get(key).and_then(Value::as_str) == Some("") {
        m.insert(key.into(), json!(value));
    }
}

/// The object under `key`, created when absent or null; `None` when it holds something else.
fn child_obj<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    if is_unset(m.get(key)) {
        m.insert(key.into(), Value::Object(Map::new()));
    }
    m.get_mut(key).and_then(Value::as_object_mut)
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// Validates a (defaulted) Job. `old` is the stored Job on update, `None` on create.
///
/// On create this is `ValidateJob`; on update `ValidateJob` followed by `ValidateJobUpdate`, as
/// the registry strategy does. Like upstream, an update therefore reports each problem of the new
/// spec twice (both functions run `ValidateJobSpec`): keep all of them as Status causes, and drop
/// repeated `Display` texts when building the Status message (`ErrorList.ToAggregate`).
pub fn validate_job(job: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = job.get("spec").unwrap_or(&null);
    let opts = Options::new(old);
    let mut errs = Vec::new();

    validate_generated_selector(job, spec, opts.require_prefixed_labels, &mut errs);
    validate_job_spec(spec, &opts, &mut errs);
    if str_at(spec, "completionMode") == Some("Indexed")
        && let Some(completions) = get(spec, "completions").and_then(Value::as_i64)
        && completions > 0
    {
        let name = get(job, "metadata").and_then(|m| str_at(m, "name")).unwrap_or_default();
        let hostname = format!("{name}-{}", completions - 1);
        if !is_dns1123_label(&hostname) {
            errs.push(FieldError::invalid(
                "metadata.name",
                &json!(name),
                format!("will not able to create pod with invalid DNS label: {hostname}"),
            ));
        }
    }

    if let Some(old) = old {
        let old_spec = old.get("spec").unwrap_or(&null);
        validate_job_spec_update(spec, old_spec, &opts, &mut errs);
    }
    errs
}

/// `JobValidationOptions` as `validationOptionsForJob` computes them.
struct Options {
    require_prefixed_labels: bool,
    allow_mutable_scheduling_directives: bool,
    /// KEP-5440 `MutablePodResourcesForSuspendedJobs` (beta, on, since Kubernetes 1.36).
    allow_mutable_pod_resources: bool,
    allow_invalid_label_value_in_selector: bool,
}

impl Options {
    fn new(old: Option<&Value>) -> Self {
        let Some(old) = old else {
            return Options {
                require_prefixed_labels: true,
                allow_mutable_scheduling_directives: false,
                allow_mutable_pod_resources: false,
                allow_invalid_label_value_in_selector: false,
            };
        };
        let spec = get(old, "spec");
        let suspended = spec.and_then(|s| get(s, "suspend")).and_then(Value::as_bool) == Some(true);
        let status = get(old, "status");
        let not_started = status.and_then(|s| get(s, "startTime")).is_none();
        // KEP-5440 (Kubernetes 1.36, with the fix of kubernetes#139287): a suspended Job whose
        // pods are all gone (`Suspended=True`, `active` 0) is as safe to change as one that never
        // started; the scheduling directives and the pod resources share the condition.
        let suspended_condition =
            status.and_then(|s| get(s, "conditions")).and_then(Value::as_array).is_some_and(|c| {
                c.iter().any(|c| str_at(c, "type") == Some("Suspended") && str_at(c, "status") == Some("True"))
            });
        let active = status.and_then(|s| get(s, "active")).and_then(Value::as_i64).unwrap_or(0);
        let mutable = suspended && (not_started || (suspended_condition && active == 0));
        let old_labels = spec.and_then(|s| ptr(s, &["template", "metadata", "labels"]));
        let has = |k: &str| old_labels.and_then(|l| l.get(k)).is_some();
        let selector = spec.and_then(|s| get(s, "selector"));
        Options {
            require_prefixed_labels: has(JOB_NAME_LABEL) && has(CONTROLLER_UID_LABEL),
            allow_mutable_scheduling_directives: mutable,
            allow_mutable_pod_resources: mutable,
            allow_invalid_label_value_in_selector: selector.is_some_and(selector_has_invalid_label_value),
        }
    }
}

/// `validateGeneratedSelector`.
fn validate_generated_selector(job: &Value, spec: &Value, require_prefixed: bool, errs: &mut Vec<FieldError>) {
    if get(spec, "manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let Some(selector) = get(spec, "selector") else { return };
    let meta = get(job, "metadata");
    let uid = meta.and_then(|m| str_at(m, "uid")).unwrap_or_default();
    let name = meta.and_then(|m| str_at(m, "name")).unwrap_or_default();
    if uid.is_empty() {
        errs.push(FieldError::required("metadata.uid", ""));
    }
    let labels = ptr(spec, &["template", "metadata", "labels"]);
    let mut expected = vec![(LEGACY_CONTROLLER_UID_LABEL, uid), (LEGACY_JOB_NAME_LABEL, name)];
    if require_prefixed {
        expected.extend([(CONTROLLER_UID_LABEL, uid), (JOB_NAME_LABEL, name)]);
    }
    for (key, value) in &expected {
        validate_has_label(labels, "spec.template.metadata", key, value, errs);
    }
    let expected: BTreeMap<String, String> = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    if selector_matches(selector, &expected) == Some(false) {
        errs.push(FieldError::invalid_rendered(
            "spec.selector",
            render_selector(Some(selector)),
            "`selector` not auto-generated",
        ));
    }
}

/// `ValidateHasLabel`.
fn validate_has_label(labels: Option<&Value>, path: &str, key: &str, expected: &str, errs: &mut Vec<FieldError>) {
    let field = format!("{path}.labels[{key}]");
    match labels.and_then(|l| l.get(key)) {
        None => errs.push(FieldError::required(field, format!("must be '{expected}'"))),
        Some(v) if v.as_str() != Some(expected) => {
            errs.push(FieldError::invalid(field, labels.unwrap_or(&Value::Null), format!("must be '{expected}'")))
        }
        Some(_) => {}
    }
}

/// `ValidateJobSpec` (= `validateJobSpec` + selector checks).
fn validate_job_spec(spec: &Value, opts: &Options, errs: &mut Vec<FieldError>) {
    let parallelism = int_field(spec, "parallelism", errs);
    let completions = int_field(spec, "completions", errs);
    let _ = int_field(spec, "activeDeadlineSeconds", errs);
    let _ = int_field(spec, "backoffLimit", errs);
    let _ = int_field(spec, "ttlSecondsAfterFinished", errs);
    let blpi = int_field(spec, "backoffLimitPerIndex", errs);
    let max_failed = int_field(spec, "maxFailedIndexes", errs);
    let has_blpi = get(spec, "backoffLimitPerIndex").is_some();
    let has_max_failed = get(spec, "maxFailedIndexes").is_some();
    if has_max_failed && !has_blpi {
        errs.push(FieldError::required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"));
    }
    if let Some(managed_by) = get(spec, "managedBy") {
        match managed_by.as_str() {
            Some(m) => {
                validate_domain_prefixed_path("spec.managedBy", m, errs);
                if m.len() > MAX_MANAGED_BY_LENGTH {
                    errs.push(FieldError::too_long("spec.managedBy", MAX_MANAGED_BY_LENGTH));
                }
            }
            None => errs.push(FieldError::invalid("spec.managedBy", managed_by, "must be a string")),
        }
    }

    let mode_value = get(spec, "completionMode");
    let mode = mode_value.map(|m| m.as_str().unwrap_or_default());
    if let (Some(mode_value), Some(mode)) = (mode_value, mode) {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(FieldError::not_supported("spec.completionMode", mode_value, &["NonIndexed", "Indexed"]));
        }
        if mode == "Indexed" {
            if get(spec, "completions").is_none() {
                errs.push(FieldError::required("spec.completions", "when completion mode is Indexed"));
            }
            if let Some(p) = parallelism
                && p > MAX_PARALLELISM_FOR_INDEXED_JOB
            {
                errs.push(FieldError::invalid(
                    "spec.parallelism",
                    &json!(p),
                    format!("must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"),
                ));
            }
            if let (Some(c), Some(m)) = (completions, max_failed)
                && m > c
            {
                errs.push(FieldError::invalid(
                    "spec.maxFailedIndexes",
                    &json!(m),
                    "must be less than or equal to completions",
                ));
            }
            if let Some(m) = max_failed
                && m > MAX_FAILED_INDEXES_FOR_INDEXED_JOB
            {
                errs.push(FieldError::invalid(
                    "spec.maxFailedIndexes",
                    &json!(m),
                    format!("must be less than or equal to {MAX_FAILED_INDEXES_FOR_INDEXED_JOB}"),
                ));
            }
            if let Some(c) = completions
                && c > COMPLETIONS_SOFT_LIMIT
                && has_blpi
            {
                let high = format!(
                    "when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                );
                if !has_max_failed {
                    errs.push(FieldError::required(
                        "spec.maxFailedIndexes",
                        format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
                    ));
                }
                if let Some(p) = parallelism
                    && p > PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS
                {
                    errs.push(FieldError::invalid(
                        "spec.parallelism",
                        &json!(p),
                        format!("must be less than or equal to {PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS} {high}"),
                    ));
                }
                if let Some(m) = max_failed
                    && m > MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS
                {
                    errs.push(FieldError::invalid(
                        "spec.maxFailedIndexes",
                        &json!(m),
                        format!("must be less than or equal to {MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS} {high}"),
                    ));
                }
            }
        }
    }
    if mode.is_none_or(|m| m == "NonIndexed") {
        if let Some(b) = blpi {
            errs.push(FieldError::invalid("spec.backoffLimitPerIndex", &json!(b), "requires indexed completion mode"));
        }
        if let Some(m) = max_failed {
            errs.push(FieldError::invalid("spec.maxFailedIndexes", &json!(m), "requires indexed completion mode"));
        }
    }

    let pfp = get(spec, "podFailurePolicy");
    if let Some(pfp) = pfp {
        validate_pod_failure_policy(spec, pfp, has_blpi, errs);
    }
    if let Some(sp) = get(spec, "successPolicy") {
        if mode != Some("Indexed") {
            errs.push(FieldError::invalid_rendered(
                "spec.successPolicy",
                render_internal_success_policy(Some(sp)),
                "requires indexed completion mode",
            ));
        } else {
            validate_success_policy(sp, completions, errs);
        }
    }
    if let Some(policy) = get(spec, "podReplacementPolicy") {
        let value = policy.as_str().unwrap_or_default();
        if pfp.is_some() {
            if value != "Failed" {
                errs.push(FieldError::not_supported("spec.podReplacementPolicy", policy, &["Failed"]));
            }
        } else if value != "Failed" && value != "TerminatingOrFailed" {
            errs.push(FieldError::not_supported(
                "spec.podReplacementPolicy",
                policy,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }

    // `ValidatePodTemplateSpec`'s pod spec checks come right before the Job's restartPolicy check.
    let template_spec = ptr(spec, &["template", "spec"]).unwrap_or(&Value::Null);
    errs.extend(crate::pod::validate_pod_spec(template_spec, "spec.template.spec"));

    // restartPolicy is defaulted to Always for pod templates, so Always and "" get the same error.
    let restart_path = "spec.template.spec.restartPolicy";
    let restart_value = ptr(spec, &["template", "spec", "restartPolicy"]).cloned().unwrap_or(json!(""));
    let restart = restart_value.as_str().unwrap_or("?");
    if restart == "Always" || restart.is_empty() {
        errs.push(FieldError::required(restart_path, r#"valid values: "OnFailure", "Never""#));
    } else if restart != "OnFailure" && restart != "Never" {
        errs.push(FieldError::not_supported(restart_path, &restart_value, &["OnFailure", "Never"]));
    } else if pfp.is_some() && restart != "Never" {
        errs.push(FieldError::invalid(
            restart_path,
            &restart_value,
            r#"only "Never" is supported when podFailurePolicy is specified"#,
        ));
    }

    let selector = get(spec, "selector");
    match selector {
        None => errs.push(FieldError::required("spec.selector", "")),
        Some(s) => validate_label_selector(s, opts.allow_invalid_label_value_in_selector, "spec.selector", errs),
    }
    let labels = ptr(spec, &["template", "metadata", "labels"]);
    let label_set = label_map(labels);
    let matches = match selector {
        None => Some(false), // a nil selector selects nothing
        Some(s) => selector_matches(s, &label_set),
    };
    if matches == Some(false) {
        errs.push(FieldError::invalid(
            "spec.template.metadata.labels",
            labels.unwrap_or(&Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
}

/// Reads an optional int32 field, reporting a non-integer and a negative value.
fn int_field(spec: &Value, key: &str, errs: &mut Vec<FieldError>) -> Option<i64> {
    let v = get(spec, key)?;
    let path = format!("spec.{key}");
    match v.as_i64() {
        Some(n) if (i32::MIN as i64..=i32::MAX as i64).contains(&n) => {
            if n < 0 {
                errs.push(FieldError::invalid(path, v, NONNEGATIVE));
            }
            Some(n)
        }
        _ => {
            errs.push(FieldError::invalid(path, v, "must be a 32-bit integer"));
            None
        }
    }
}

/// `validatePodFailurePolicy`.
fn validate_pod_failure_policy(spec: &Value, pfp: &Value, has_blpi: bool, errs: &mut Vec<FieldError>) {
    let rules_path = "spec.podFailurePolicy.rules";
    let rules = get(pfp, "rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        errs.push(FieldError::too_many(rules_path, rules.len(), MAX_POD_FAILURE_POLICY_RULES));
    }
    let mut container_names = Vec::new();
    for key in ["containers", "initContainers"] {
        let containers = ptr(spec, &["template", "spec", key]).and_then(Value::as_array);
        container_names.extend(containers.into_iter().flatten().filter_map(|c| str_at(c, "name")));
    }
    for (i, rule) in rules.iter().enumerate() {
        validate_pod_failure_policy_rule(rule, &format!("{rules_path}[{i}]"), has_blpi, &container_names, errs);
    }
}

/// `validatePodFailurePolicyRule`, plus the `setConditionReason` extension.
fn validate_pod_failure_policy_rule(
    rule: &Value,
    path: &str,
    has_blpi: bool,
    container_names: &[&str],
    errs: &mut Vec<FieldError>,
) {
    let action_path = format!("{path}.action");
    let action_value = get(rule, "action").cloned().unwrap_or(json!(""));
    let action = action_value.as_str().unwrap_or("?");
    if action.is_empty() {
        errs.push(FieldError::required(action_path, format!("valid values: {}", go_quoted_list(ACTIONS))));
    } else if action == "FailIndex" {
        if !has_blpi {
            errs.push(FieldError::invalid(action_path, &action_value, "requires the backoffLimitPerIndex to be set"));
        }
    } else if !ACTIONS.contains(&action) {
        errs.push(FieldError::not_supported(action_path, &action_value, ACTIONS));
    }
    let on_exit_codes = get(rule, "onExitCodes");
    let on_pod_conditions =
        get(rule, "onPodConditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if let Some(oec) = on_exit_codes {
        validate_on_exit_codes(oec, &format!("{path}.onExitCodes"), container_names, errs);
    }
    if !on_pod_conditions.is_empty() {
        validate_on_pod_conditions(on_pod_conditions, &format!("{path}.onPodConditions"), errs);
    }
    if on_exit_codes.is_some() && !on_pod_conditions.is_empty() {
        errs.push(FieldError::invalid_omit(path, "specifying both OnExitCodes and OnPodConditions is not supported"));
    }
    if on_exit_codes.is_none() && on_pod_conditions.is_empty() {
        errs.push(FieldError::invalid_omit(path, "specifying one of OnExitCodes and OnPodConditions is required"));
    }

    if let Some(reason) = get(rule, "setConditionReason") {
        let reason_path = format!("{path}.setConditionReason");
        if action != "FailJob" {
            errs.push(FieldError::forbidden(
                reason_path,
                "setConditionReason is only supported for the FailJob action",
            ));
        } else {
            validate_condition_reason(reason, &reason_path, errs);
        }
    }
}

/// The `reason` part of metav1 `ValidateCondition`.
fn validate_condition_reason(reason: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(s) = reason.as_str() else {
        errs.push(FieldError::invalid(path, reason, "must be a string"));
        return;
    };
    if s.is_empty() {
        errs.push(FieldError::required(path, "must be set"));
        return;
    }
    if !is_condition_reason(s) {
        errs.push(FieldError::invalid(
            path,
            reason,
            regex_error(
                "a condition reason must start with alphabetic character, optionally followed by a string of \
                 alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
                "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?",
                &["my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"],
            ),
        ));
    }
    if s.len() > MAX_CONDITION_REASON_LENGTH {
        errs.push(FieldError::too_long(path, MAX_CONDITION_REASON_LENGTH));
    }
}

/// `validatePodFailurePolicyRuleOnExitCodes`.
fn validate_on_exit_codes(oec: &Value, path: &str, container_names: &[&str], errs: &mut Vec<FieldError>) {
    let operator_path = format!("{path}.operator");
    let operator_value = get(oec, "operator").cloned().unwrap_or(json!(""));
    let operator = operator_value.as_str().unwrap_or("?");
    if operator.is_empty() {
        errs.push(FieldError::required(operator_path, format!("valid values: {}", go_quoted_list(OPERATORS))));
    } else if !OPERATORS.contains(&operator) {
        errs.push(FieldError::not_supported(operator_path, &operator_value, OPERATORS));
    }
    if let Some(name) = get(oec, "containerName")
        && !name.as_str().is_some_and(|n| container_names.contains(&n))
    {
        errs.push(FieldError::invalid(
            format!("{path}.containerName"),
            name,
            "must be one of the container or initContainer names in the pod template",
        ));
    }
    let values_path = format!("{path}.values");
    let values_value = get(oec, "values").cloned().unwrap_or(Value::Null);
    let values = values_value.as_array().map(Vec::as_slice).unwrap_or_default();
    if values.is_empty() {
        errs.push(FieldError::invalid(&values_path, &values_value, "at least one value is required"));
    } else if values.len() > MAX_ON_EXIT_CODES_VALUES {
        errs.push(FieldError::too_many(&values_path, values.len(), MAX_ON_EXIT_CODES_VALUES));
    }
    let mut ordered = true;
    let mut seen = std::collections::BTreeSet::new();
    let mut previous: Option<i64> = None;
    for (j, v) in values.iter().enumerate() {
        let value_path = format!("{values_path}[{j}]");
        let Some(code) = v.as_i64().filter(|c| (i32::MIN as i64..=i32::MAX as i64).contains(c)) else {
            errs.push(FieldError::invalid(value_path, v, "must be a 32-bit integer"));
            continue;
        };
        if operator == "In" && code == 0 {
            errs.push(FieldError::invalid(&value_path, v, "must not be 0 for the In operator"));
        }
        if !seen.insert(code) {
            errs.push(FieldError::duplicate(&value_path, v));
        }
        if previous.is_some_and(|p| p > code) {
            ordered = false;
        }
        previous = Some(code);
    }
    if !ordered {
        errs.push(FieldError::invalid(values_path, &values_value, "must be ordered"));
    }
}

/// `validatePodFailurePolicyRuleOnPodConditions`.
fn validate_on_pod_conditions(patterns: &[Value], path: &str, errs: &mut Vec<FieldError>) {
    if patterns.len() > MAX_ON_POD_CONDITIONS_PATTERNS {
        errs.push(FieldError::too_many(path, patterns.len(), MAX_ON_POD_CONDITIONS_PATTERNS));
    }
    for (j, pattern) in patterns.iter().enumerate() {
        let pattern_path = format!("{path}[{j}]");
        let type_value = get(pattern, "type").cloned().unwrap_or(json!(""));
        for msg in qualified_name_errors(type_value.as_str().unwrap_or("?")) {
            errs.push(FieldError::invalid(format!("{pattern_path}.type"), &type_value, msg));
        }
        let status_path = format!("{pattern_path}.status");
        let status_value = get(pattern, "status").cloned().unwrap_or(json!(""));
        let status = status_value.as_str().unwrap_or("?");
        if status.is_empty() {
            errs.push(FieldError::required(
                status_path,
                format!("valid values: {}", go_quoted_list(CONDITION_STATUSES)),
            ));
        } else if !CONDITION_STATUSES.contains(&status) {
            errs.push(FieldError::not_supported(status_path, &status_value, CONDITION_STATUSES));
        }
    }
}

/// `validateSuccessPolicy` (Indexed jobs only).
fn validate_success_policy(sp: &Value, completions: Option<i64>, errs: &mut Vec<FieldError>) {
    let rules_path = "spec.successPolicy.rules";
    let rules = get(sp, "rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if rules.is_empty() {
        errs.push(FieldError::required(
            rules_path,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if rules.len() > MAX_SUCCESS_POLICY_RULES {
        errs.push(FieldError::too_many(rules_path, rules.len(), MAX_SUCCESS_POLICY_RULES));
    }
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{rules_path}[{i}]");
        let indexes = get(rule, "succeededIndexes");
        let count = get(rule, "succeededCount");
        if indexes.is_none() && count.is_none() {
            errs.push(FieldError::required(
                &rule_path,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total = 0;
        if let Some(indexes) = indexes {
            let indexes_path = format!("{rule_path}.succeededIndexes");
            let s = indexes.as_str().unwrap_or_default();
            if s.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                errs.push(FieldError::too_long(&indexes_path, MAX_SUCCEEDED_INDEXES_LENGTH));
            }
            if let Some(c) = completions {
                match validate_indexes_format(s, c) {
                    Ok(n) => total = n,
                    Err(e) => errs.push(FieldError::invalid(
                        indexes_path,
                        indexes,
                        format!("error parsing succeededIndexes: {e}"),
                    )),
                }
            }
        }
        if let Some(count_value) = count {
            let count_path = format!("{rule_path}.succeededCount");
            let Some(n) = count_value.as_i64() else {
                errs.push(FieldError::invalid(count_path, count_value, "must be a 32-bit integer"));
                continue;
            };
            if n < 0 {
                errs.push(FieldError::invalid(&count_path, count_value, NONNEGATIVE));
            }
            if let Some(c) = completions
                && n > c
            {
                errs.push(FieldError::invalid(
                    &count_path,
                    count_value,
                    format!("must be less than or equal to {c} (the number of specified completions)"),
                ));
            }
            if indexes.is_some() && n > total {
                errs.push(FieldError::invalid(
                    &count_path,
                    count_value,
                    format!(
                        "must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"
                    ),
                ));
            }
        }
    }
}

/// `validateIndexesFormat`: the number of indexes in an interval list like `1,3-5`.
pub(crate) fn validate_indexes_format(s: &str, completions: i64) -> Result<i64, String> {
    if s.is_empty() {
        return Ok(0);
    }
    let mut last: Option<i64> = None;
    let mut total = 0;
    for interval in s.split(',') {
        let (x, y) = parse_index_interval(interval, completions)?;
        if let Some(l) = last
            && l >= x
        {
            return Err(format!("non-increasing order, previous: {l}, current: {x}"));
        }
        total += y - x + 1;
        last = Some(y);
    }
    Ok(total)
}

pub(crate) fn parse_index_interval(interval: &str, completions: i64) -> Result<(i64, i64), String> {
    let limits: Vec<&str> = interval.split('-').collect();
    if limits.len() > 2 {
        return Err(format!(
            "the fragment {} violates the requirement that an index interval can have at most two parts separated by '-'",
            quote(interval)
        ));
    }
    let parse = |s: &str| -> Result<i64, String> {
        let x = go_atoi(s).ok_or_else(|| format!("cannot convert string to integer for index: {}", quote(s)))?;
        if x >= completions {
            return Err(format!("too large index: {}", quote(s)));
        }
        Ok(x)
    };
    let x = parse(limits[0])?;
    if limits.len() == 1 {
        return Ok((x, x));
    }
    let y = parse(limits[1])?;
    if x >= y {
        return Err(format!("non-increasing order, previous: {x}, current: {y}"));
    }
    Ok((x, y))
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, 64-bit range.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `ValidateJobSpecUpdate`.
fn validate_job_spec_update(spec: &Value, old: &Value, opts: &Options, errs: &mut Vec<FieldError>) {
    validate_job_spec(spec, opts, errs);

    // validateCompletions (ElasticIndexedJob GA).
    let completions = get(spec, "completions");
    let old_completions = get(old, "completions");
    if str_at(spec, "completionMode") != Some("Indexed") {
        immutable(completions, old_completions, "spec.completions", errs);
    } else if !semantic_eq(completions, old_completions)
        && let Some(c) = completions
        && Some(c) != get(spec, "parallelism")
    {
        errs.push(FieldError::invalid("spec.completions", c, "can only be modified in tandem with spec.parallelism"));
    }

    let selector = get(spec, "selector");
    if !semantic_eq(selector, get(old, "selector")) {
        errs.push(FieldError::invalid_rendered("spec.selector", render_selector(selector), IMMUTABLE));
    }
    validate_pod_template_update(spec, old, opts, errs);
    immutable(get(spec, "completionMode"), get(old, "completionMode"), "spec.completionMode", errs);
    let pfp = get(spec, "podFailurePolicy");
    if !semantic_eq(pfp, get(old, "podFailurePolicy")) {
        errs.push(FieldError::invalid_rendered(
            "spec.podFailurePolicy",
            render_internal_pod_failure_policy(pfp),
            IMMUTABLE,
        ));
    }
    immutable(get(spec, "backoffLimitPerIndex"), get(old, "backoffLimitPerIndex"), "spec.backoffLimitPerIndex", errs);
    immutable(get(spec, "managedBy"), get(old, "managedBy"), "spec.managedBy", errs);
    let sp = get(spec, "successPolicy");
    if !semantic_eq(sp, get(old, "successPolicy")) {
        errs.push(FieldError::invalid_rendered("spec.successPolicy", render_internal_success_policy(sp), IMMUTABLE));
    }
}

fn immutable(new: Option<&Value>, old: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    if !semantic_eq(new, old) {
        errs.push(FieldError::invalid(path, new.unwrap_or(&Value::Null), IMMUTABLE));
    }
}

/// `validatePodTemplateUpdate`: the template is immutable, except, for a Job that is suspended
/// and never started or whose pods are all gone ([`Options`]), the scheduling directives (node
/// affinity, node selector, tolerations, labels, annotations, scheduling gates) and (KEP-5440) the
/// `resources` of its containers and init containers.
fn validate_pod_template_update(spec: &Value, old: &Value, opts: &Options, errs: &mut Vec<FieldError>) {
    let template = get(spec, "template");
    let mut old_template = get(old, "template").cloned().unwrap_or(Value::Null);
    if opts.allow_mutable_pod_resources
        && let Some(old_spec) = old_template.get_mut("spec").and_then(Value::as_object_mut)
    {
        let new_spec = template.and_then(|t| get(t, "spec"));
        for key in ["containers", "initContainers"] {
            let new = new_spec.and_then(|s| get(s, key)).and_then(Value::as_array);
            let old = old_spec.get_mut(key).and_then(Value::as_array_mut);
            let (Some(new), Some(old)) = (new, old) else { continue };
            // Only a container that is still there, as it was, may take its new resources.
            for (o, n) in old.iter_mut().zip(new).filter(|(o, n)| get(o, "name") == get(n, "name")) {
                if let Some(o) = o.as_object_mut() {
                    replace(o, "resources", get(n, "resources").cloned());
                }
            }
        }
    }
    if opts.allow_mutable_scheduling_directives
        && let Some(old_t) = old_template.as_object_mut()
    {
        let new_spec = template.and_then(|t| get(t, "spec"));
        let new_field = |key: &str| new_spec.and_then(|s| get(s, key)).cloned();
        if let Some(old_spec) = child_obj(old_t, "spec") {
            let new_affinity = new_field("affinity");
            let new_node_affinity = new_affinity.as_ref().and_then(|a| get(a, "nodeAffinity")).cloned();
            match (new_affinity.is_some(), get_map(old_spec, "affinity").is_some()) {
                (false, true) => {
                    let affinity = old_spec.get_mut("affinity").and_then(Value::as_object_mut);
                    if let Some(a) = affinity {
                        a.remove("nodeAffinity");
                        if a.values().all(|v| v.is_null()) {
                            old_spec.remove("affinity");
                        }
                    }
                }
                (true, false) => {
                    let mut a = Map::new();
                    if let Some(na) = new_node_affinity {
                        a.insert("nodeAffinity".into(), na);
                    }
                    old_spec.insert("affinity".into(), Value::Object(a));
                }
                (true, true) => {
                    if let Some(a) = old_spec.get_mut("affinity").and_then(Value::as_object_mut) {
                        replace(a, "nodeAffinity", new_node_affinity);
                    }
                }
                (false, false) => {}
            }
            for key in ["nodeSelector", "tolerations", "schedulingGates"] {
                replace(old_spec, key, new_field(key));
            }
        }
        let new_meta = template.and_then(|t| get(t, "metadata"));
        if let Some(old_meta) = child_obj(old_t, "metadata") {
            for key in ["annotations", "labels"] {
                replace(old_meta, key, new_meta.and_then(|m| get(m, key)).cloned());
            }
        }
    }
    if !semantic_eq(template, Some(&old_template)) {
        errs.push(FieldError::invalid("spec.template", template.unwrap_or(&Value::Null), IMMUTABLE));
    }
}

fn replace(m: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(v) => m.insert(key.into(), v),
        None => m.remove(key),
    };
}

fn get_map<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// `apiequality.Semantic.DeepEqual` on JSON: null, `[]` and `{}` equal an absent field.
fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    normalize(a) == normalize(b)
}

fn normalize(v: Option<&Value>) -> Option<Value> {
    match v? {
        Value::Null => None,
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => {
            Some(Value::Array(items.iter().map(|i| normalize(Some(i)).unwrap_or(Value::Null)).collect()))
        }
        Value::Object(map) => {
            let m: Map<String, Value> =
                map.iter().filter_map(|(k, v)| normalize(Some(v)).map(|v| (k.clone(), v))).collect();
            if m.is_empty() { None } else { Some(Value::Object(m)) }
        }
        other => Some(other.clone()),
    }
}

// ---------------------------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------------------------

/// metav1 `ValidateLabelSelector`.
pub(crate) fn validate_label_selector(
    selector: &Value,
    allow_invalid_values: bool,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(labels) = get(selector, "matchLabels").and_then(Value::as_object) {
        validate_labels(labels, &format!("{path}.matchLabels"), errs);
    }
    let exprs = get(selector, "matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, expr) in exprs.iter().enumerate() {
        let expr_path = format!("{path}.matchExpressions[{i}]");
        let operator_value = get(expr, "operator").cloned().unwrap_or(json!(""));
        let values = get(expr, "values").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        match operator_value.as_str().unwrap_or_default() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                format!("{expr_path}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                format!("{expr_path}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => errs.push(FieldError::invalid(
                format!("{expr_path}.operator"),
                &operator_value,
                "not a valid selector operator",
            )),
        }
        let key_value = get(expr, "key").cloned().unwrap_or(json!(""));
        for msg in qualified_name_errors(key_value.as_str().unwrap_or("?")) {
            errs.push(FieldError::invalid(format!("{expr_path}.key"), &key_value, msg));
        }
        if !allow_invalid_values {
            for (j, v) in values.iter().enumerate() {
                for msg in label_value_errors(v.as_str().unwrap_or("?")) {
                    errs.push(FieldError::invalid(format!("{expr_path}.values[{j}]"), v, msg));
                }
            }
        }
    }
}

/// metav1 `ValidateLabels` (map order is random upstream; keys are sorted here).
fn validate_labels(labels: &Map<String, Value>, path: &str, errs: &mut Vec<FieldError>) {
    let mut keys: Vec<&String> = labels.keys().collect();
    keys.sort();
    for k in keys {
        for msg in qualified_name_errors(k) {
            errs.push(FieldError::invalid(path, &json!(k), msg));
        }
        let v = &labels[k.as_str()];
        for msg in label_value_errors(v.as_str().unwrap_or("?")) {
            errs.push(FieldError::invalid(path, v, msg));
        }
    }
}

fn selector_has_invalid_label_value(selector: &Value) -> bool {
    let exprs = get(selector, "matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    exprs.iter().any(|e| {
        let values = get(e, "values").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        values.iter().any(|v| !label_value_errors(v.as_str().unwrap_or("?")).is_empty())
    })
}

fn label_map(labels: Option<&Value>) -> BTreeMap<String, String> {
    let entries = labels.and_then(Value::as_object).into_iter().flatten();
    entries.filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()
}

/// `metav1.LabelSelectorAsSelector(sel).Matches(labels)`; `None` when the selector does not
/// convert (invalid operator, key or value), in which case upstream skips the match check.
fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> Option<bool> {
    let match_labels = get(selector, "matchLabels").and_then(Value::as_object);
    let exprs = get(selector, "matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut matched = true;
    for (k, v) in match_labels.into_iter().flatten() {
        let v = v.as_str()?;
        if !qualified_name_errors(k).is_empty() || !label_value_errors(v).is_empty() {
            return None;
        }
        matched &= labels.get(k).map(String::as_str) == Some(v);
    }
    for expr in exprs {
        let key = str_at(expr, "key")?;
        let values: Vec<&str> = match get(expr, "values") {
            None => vec![],
            Some(v) => v.as_array()?.iter().map(Value::as_str).collect::<Option<_>>()?,
        };
        if !qualified_name_errors(key).is_empty() || values.iter().any(|v| !label_value_errors(v).is_empty()) {
            return None;
        }
        let actual = labels.get(key).map(String::as_str);
        matched &= match str_at(expr, "operator")? {
            "In" if !values.is_empty() => actual.is_some_and(|a| values.contains(&a)),
            "NotIn" if !values.is_empty() => actual.is_none_or(|a| !values.contains(&a)),
            "Exists" if values.is_empty() => actual.is_some(),
            "DoesNotExist" if values.is_empty() => actual.is_none(),
            _ => return None,
        };
    }
    Some(matched)
}

// ---------------------------------------------------------------------------------------------
// Value rendering (what Go's json.Marshal writes for the typed values upstream passes)
// ---------------------------------------------------------------------------------------------

/// A `*metav1.LabelSelector` (json tags, omitempty, struct field order).
fn render_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector else { return "null".into() };
    let mut out = String::from("{");
    let mut first = true;
    let mut field = |out: &mut String, name: &str| {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        out.push_str(&format!("\"{name}\":"));
    };
    if let Some(labels) = get(selector, "matchLabels").filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
        field(&mut out, "matchLabels");
        out.push_str(&go_json(labels));
    }
    let exprs = get(selector, "matchExpressions").and_then(Value::as_array).filter(|e| !e.is_empty());
    if let Some(exprs) = exprs {
        field(&mut out, "matchExpressions");
        let rendered: Vec<String> = exprs
            .iter()
            .map(|e| {
                let mut s = format!(
                    "{{\"key\":{},\"operator\":{}",
                    go_json(get(e, "key").unwrap_or(&json!(""))),
                    go_json(get(e, "operator").unwrap_or(&json!("")))
                );
                if let Some(values) = get(e, "values").filter(|v| v.as_array().is_some_and(|a| !a.is_empty())) {
                    s.push_str(&format!(",\"values\":{}", go_json(values)));
                }
                s.push('}');
                s
            })
            .collect();
        out.push_str(&format!("[{}]", rendered.join(",")));
    }
    out.push('}');
    out
}

/// Go-style JSON object from (field name, rendered value) pairs, in order.
fn go_struct(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| {
            let mut key = String::new();
            write_go_json_str(k, &mut key);
            format!("{key}:{v}")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

fn render_or_null(v: Option<&Value>) -> String {
    v.map(go_json).unwrap_or_else(|| "null".into())
}

fn render_string_field(v: Option<&Value>) -> String {
    go_json(v.unwrap_or(&json!("")))
}

/// A `batch.SuccessPolicy` (internal type: Go field names, no omitempty).
fn render_internal_success_policy(sp: Option<&Value>) -> String {
    let Some(sp) = sp else { return "null".into() };
    let rules = get(sp, "rules").and_then(Value::as_array).map(|rules| {
        let items: Vec<String> = rules
            .iter()
            .map(|r| {
                go_struct(&[
                    ("SucceededIndexes", render_or_null(get(r, "succeededIndexes"))),
                    ("SucceededCount", render_or_null(get(r, "succeededCount"))),
                ])
            })
            .collect();
        format!("[{}]", items.join(","))
    });
    go_struct(&[("Rules", rules.unwrap_or_else(|| "null".into()))])
}

/// A `batch.PodFailurePolicy` (internal type: Go field names, no omitempty).
fn render_internal_pod_failure_policy(pfp: Option<&Value>) -> String {
    let Some(pfp) = pfp else { return "null".into() };
    let rules = get(pfp, "rules").and_then(Value::as_array).map(|rules| {
        let items: Vec<String> = rules
            .iter()
            .map(|r| {
                let oec = get(r, "onExitCodes").map(|o| {
                    go_struct(&[
                        ("ContainerName", render_or_null(get(o, "containerName"))),
                        ("Operator", render_string_field(get(o, "operator"))),
                        ("Values", render_or_null(get(o, "values"))),
                    ])
                });
                let opc = get(r, "onPodConditions").and_then(Value::as_array).map(|ps| {
                    let items: Vec<String> = ps
                        .iter()
                        .map(|p| {
                            go_struct(&[
                                ("Type", render_string_field(get(p, "type"))),
                                ("Status", render_string_field(get(p, "status"))),
                            ])
                        })
                        .collect();
                    format!("[{}]", items.join(","))
                });
                let mut fields = vec![
                    ("Action", render_string_field(get(r, "action"))),
                    ("OnExitCodes", oec.unwrap_or_else(|| "null".into())),
                    ("OnPodConditions", opc.unwrap_or_else(|| "null".into())),
                ];
                if let Some(reason) = get(r, "setConditionReason") {
                    fields.push(("SetConditionReason", go_json(reason)));
                }
                go_struct(&fields)
            })
            .collect();
        format!("[{}]", items.join(","))
    });
    go_struct(&[("Rules", rules.unwrap_or_else(|| "null".into()))])
}

// ---------------------------------------------------------------------------------------------
// JSON access
// ---------------------------------------------------------------------------------------------

/// A field of an object; `None` when absent or null.
fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| !v.is_null())
}

fn ptr<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| get(v, k))
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NONNEG: &str = "must be greater than or equal to 0";
    const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const SUBDOMAIN: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const REASON: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";
    /// Placeholder: `Invalid value: <new template JSON>: field is immutable`.
    const TEMPLATE_IMMUTABLE: &str = "<template immutable>";

    fn raw_job() -> Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default", "uid": "uid-1"},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "main", "image": "busybox"}],
            }}},
        })
    }

    /// Sets the value at a JSON pointer, creating objects on the way.
    fn set(v: &mut Value, pointer: &str, value: Value) {
        let segs: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        set_at(v, &segs, value);
    }

    fn set_at(v: &mut Value, segs: &[&str], value: Value) {
        let Some((seg, rest)) = segs.split_first() else {
            *v = value;
            return;
        };
        let next = match v {
            Value::Array(arr) => &mut arr[seg.parse::<usize>().unwrap()],
            _ => {
                if !v.is_object() {
                    *v = json!({});
                }
                v.as_object_mut().unwrap().entry(seg.to_string()).or_insert(Value::Null)
            }
        };
        set_at(next, rest, value);
    }

    fn remove(v: &mut Value, pointer: &str) {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        if let Some(obj) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
            obj.remove(key);
        }
    }

    fn indexed(job: &mut Value, completions: i64) {
        set(job, "/spec/completionMode", json!("Indexed"));
        set(job, "/spec/completions", json!(completions));
        set(job, "/spec/parallelism", json!(completions));
    }

    fn pfp(job: &mut Value, rules: Value) {
        set(job, "/spec/podFailurePolicy", json!({"rules": rules}));
    }

    fn exit_rule(action: &str, operator: &str, values: Value) -> Value {
        json!({"action": action, "onExitCodes": {"operator": operator, "values": values}})
    }

    fn none(_: &mut Value) {}

    struct Case {
        name: &'static str,
        /// Edits the user's Job before defaulting (create) or the old Job before defaulting (update).
        before: fn(&mut Value),
        /// Edits the defaulted Job (create) or the new Job, a copy of the defaulted old one (update).
        after: fn(&mut Value),
        want: Vec<(&'static str, String)>,
    }

    fn case(name: &'static str, before: fn(&mut Value), want: &[(&'static str, &str)]) -> Case {
        Case { name, before, after: none, want: want.iter().map(|(f, m)| (*f, m.to_string())).collect() }
    }

    fn case_after(
        name: &'static str,
        before: fn(&mut Value),
        after: fn(&mut Value),
        want: &[(&'static str, &str)],
    ) -> Case {
        Case { name, before, after, want: want.iter().map(|(f, m)| (*f, m.to_string())).collect() }
    }

    fn messages(errs: &[FieldError]) -> Vec<(String, String)> {
        errs.iter().map(|e| (e.field.clone(), e.message())).collect()
    }

    fn expected(c: &Case, job: &Value) -> Vec<(String, String)> {
        let template = go_json(&job["spec"]["template"]);
        c.want
            .iter()
            .map(|(f, m)| {
                let m = if m == TEMPLATE_IMMUTABLE {
                    format!("Invalid value: {template}: field is immutable")
                } else {
                    m.clone()
                };
                (f.to_string(), m)
            })
            .collect()
    }

    fn run_create(cases: Vec<Case>) {
        let mut failures = Vec::new();
        for c in &cases {
            let mut job = raw_job();
            (c.before)(&mut job);
            default_job(&mut job);
            (c.after)(&mut job);
            let got = messages(&validate_job(&job, None));
            let want = expected(c, &job);
            if got != want {
                failures.push(format!("{}:\n  got:  {got:#?}\n  want: {want:#?}", c.name));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    fn run_update(cases: Vec<Case>) {
        let mut failures = Vec::new();
        for c in &cases {
            let mut old = raw_job();
            (c.before)(&mut old);
            default_job(&mut old);
            let mut new = old.clone();
            (c.after)(&mut new);
            default_job(&mut new);
            let got = messages(&validate_job(&new, Some(&old)));
            let want = expected(c, &new);
            if got != want {
                failures.push(format!("{}:\n  got:  {got:#?}\n  want: {want:#?}", c.name));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn create_validation_counters_and_restart_policy() {
        run_create(vec![
            case("a valid job has no errors", none, &[]),
            case(
                "negative counters must be non-negative",
                |j| {
                    set(j, "/spec/parallelism", json!(-1));
                    set(j, "/spec/completions", json!(-2));
                    set(j, "/spec/activeDeadlineSeconds", json!(-3));
                    set(j, "/spec/backoffLimit", json!(-4));
                    set(j, "/spec/ttlSecondsAfterFinished", json!(-5));
                },
                &[
                    ("spec.parallelism", &format!("Invalid value: -1: {NONNEG}")),
                    ("spec.completions", &format!("Invalid value: -2: {NONNEG}")),
                    ("spec.activeDeadlineSeconds", &format!("Invalid value: -3: {NONNEG}")),
                    ("spec.backoffLimit", &format!("Invalid value: -4: {NONNEG}")),
                    ("spec.ttlSecondsAfterFinished", &format!("Invalid value: -5: {NONNEG}")),
                ],
            ),
            case(
                "a counter that is not an integer is rejected",
                |j| set(j, "/spec/parallelism", json!("2")),
                &[("spec.parallelism", r#"Invalid value: "2": must be a 32-bit integer"#)],
            ),
            case(
                "restartPolicy Always is rejected with the valid values",
                |j| set(j, "/spec/template/spec/restartPolicy", json!("Always")),
                &[("spec.template.spec.restartPolicy", r#"Required value: valid values: "OnFailure", "Never""#)],
            ),
            case(
                "a missing restartPolicy defaults to Always and is rejected",
                |j| remove(j, "/spec/template/spec/restartPolicy"),
                &[("spec.template.spec.restartPolicy", r#"Required value: valid values: "OnFailure", "Never""#)],
            ),
            case(
                "an unknown restartPolicy is not supported",
                |j| set(j, "/spec/template/spec/restartPolicy", json!("Sometimes")),
                &[
                    // The pod template's own check, then the Job's.
                    (
                        "spec.template.spec.restartPolicy",
                        r#"Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
                    ),
                    (
                        "spec.template.spec.restartPolicy",
                        r#"Unsupported value: "Sometimes": supported values: "OnFailure", "Never""#,
                    ),
                ],
            ),
            case(
                "the pod template is validated as a pod spec",
                |j| set(j, "/spec/template/spec/containers/0/image", json!("")),
                &[("spec.template.spec.containers[0].image", "Required value")],
            ),
            case(
                "restartPolicy OnFailure is valid without a podFailurePolicy",
                |j| set(j, "/spec/template/spec/restartPolicy", json!("OnFailure")),
                &[],
            ),
            case(
                "an unknown completionMode is not supported",
                |j| set(j, "/spec/completionMode", json!("Sometimes")),
                &[(
                    "spec.completionMode",
                    r#"Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed""#,
                )],
            ),
            case(
                "an unknown podReplacementPolicy is not supported",
                |j| set(j, "/spec/podReplacementPolicy", json!("Never")),
                &[(
                    "spec.podReplacementPolicy",
                    r#"Unsupported value: "Never": supported values: "Failed", "TerminatingOrFailed""#,
                )],
            ),
            case(
                "with a podFailurePolicy only the Failed replacement policy is supported",
                |j| {
                    pfp(j, json!([exit_rule("FailJob", "In", json!([1]))]));
                    set(j, "/spec/podReplacementPolicy", json!("TerminatingOrFailed"));
                },
                &[(
                    "spec.podReplacementPolicy",
                    r#"Unsupported value: "TerminatingOrFailed": supported values: "Failed""#,
                )],
            ),
        ]);
    }

    #[test]
    fn create_validation_pod_failure_policy() {
        run_create(vec![
            case(
                "a FailJob exit-code rule is valid",
                |j| pfp(j, json!([exit_rule("FailJob", "In", json!([1, 2]))])),
                &[],
            ),
            case(
                "a podFailurePolicy requires restartPolicy Never",
                |j| {
                    set(j, "/spec/template/spec/restartPolicy", json!("OnFailure"));
                    pfp(j, json!([exit_rule("FailJob", "In", json!([1]))]));
                },
                &[(
                    "spec.template.spec.restartPolicy",
                    r#"Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified"#,
                )],
            ),
            case(
                "more than 20 rules are too many",
                |j| {
                    let rule = json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]});
                    pfp(j, Value::Array(vec![rule; 21]));
                },
                &[("spec.podFailurePolicy.rules", "Too many: 21: must have at most 20 items")],
            ),
            case(
                "an empty action is required with the valid values",
                |j| pfp(j, json!([exit_rule("", "In", json!([1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].action",
                    r#"Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]"#,
                )],
            ),
            case(
                "an unknown action is not supported",
                |j| pfp(j, json!([exit_rule("Foo", "In", json!([1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].action",
                    r#"Unsupported value: "Foo": supported values: "Count", "FailIndex", "FailJob", "Ignore""#,
                )],
            ),
            case(
                "FailIndex requires backoffLimitPerIndex",
                |j| pfp(j, json!([exit_rule("FailIndex", "In", json!([1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].action",
                    r#"Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set"#,
                )],
            ),
            case(
                "FailIndex with backoffLimitPerIndex on an Indexed job is valid",
                |j| {
                    indexed(j, 2);
                    set(j, "/spec/backoffLimitPerIndex", json!(1));
                    pfp(j, json!([exit_rule("FailIndex", "In", json!([1]))]));
                },
                &[],
            ),
            case(
                "specifying both onExitCodes and onPodConditions is not supported",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]},
                                "onPodConditions": [{"type": "DisruptionTarget"}]}]),
                    )
                },
                &[(
                    "spec.podFailurePolicy.rules[0]",
                    "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
                )],
            ),
            case(
                "a rule needs onExitCodes or onPodConditions",
                |j| pfp(j, json!([{"action": "Ignore"}])),
                &[(
                    "spec.podFailurePolicy.rules[0]",
                    "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
                )],
            ),
            case(
                "an empty operator is required with the valid values",
                |j| pfp(j, json!([exit_rule("Count", "", json!([1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.operator",
                    r#"Required value: valid values: ["In" "NotIn"]"#,
                )],
            ),
            case(
                "an unknown operator is not supported",
                |j| pfp(j, json!([exit_rule("Count", "Between", json!([1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.operator",
                    r#"Unsupported value: "Between": supported values: "In", "NotIn""#,
                )],
            ),
            case(
                "containerName must name a container of the template",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "Count", "onExitCodes": {"containerName": "nope", "operator": "In", "values": [1]}}]),
                    )
                },
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
                    r#"Invalid value: "nope": must be one of the container or initContainer names in the pod template"#,
                )],
            ),
            case(
                "containerName may name an init container",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "Count", "onExitCodes": {"containerName": "init", "operator": "In", "values": [1]}}]),
                    )
                },
                &[],
            ),
            case(
                "empty exit code values need at least one value",
                |j| pfp(j, json!([exit_rule("Count", "In", json!([]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.values",
                    "Invalid value: []: at least one value is required",
                )],
            ),
            case(
                "missing exit code values need at least one value",
                |j| pfp(j, json!([{"action": "Count", "onExitCodes": {"operator": "In"}}])),
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.values",
                    "Invalid value: null: at least one value is required",
                )],
            ),
            case(
                "more than 255 exit code values are too many",
                |j| pfp(j, json!([exit_rule("Count", "In", json!((1..=256).collect::<Vec<i64>>()))])),
                &[("spec.podFailurePolicy.rules[0].onExitCodes.values", "Too many: 256: must have at most 255 items")],
            ),
            case(
                "exit code 0 is not allowed with In",
                |j| pfp(j, json!([exit_rule("Count", "In", json!([0, 1]))])),
                &[(
                    "spec.podFailurePolicy.rules[0].onExitCodes.values[0]",
                    "Invalid value: 0: must not be 0 for the In operator",
                )],
            ),
            case(
                "exit code 0 is allowed with NotIn",
                |j| pfp(j, json!([exit_rule("Count", "NotIn", json!([0]))])),
                &[],
            ),
            case(
                "a repeated exit code is a duplicate",
                |j| pfp(j, json!([exit_rule("Count", "In", json!([1, 3, 3]))])),
                &[("spec.podFailurePolicy.rules[0].onExitCodes.values[2]", "Duplicate value: 3")],
            ),
            case(
                "exit codes must be ordered",
                |j| pfp(j, json!([exit_rule("Count", "In", json!([5, 3]))])),
                &[("spec.podFailurePolicy.rules[0].onExitCodes.values", "Invalid value: [5,3]: must be ordered")],
            ),
            case_after(
                "an empty condition status is required with the valid values",
                |j| pfp(j, json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}])),
                |j| set(j, "/spec/podFailurePolicy/rules/0/onPodConditions/0/status", json!("")),
                &[(
                    "spec.podFailurePolicy.rules[0].onPodConditions[0].status",
                    r#"Required value: valid values: ["False" "True" "Unknown"]"#,
                )],
            ),
            case(
                "an unknown condition status is not supported",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}]),
                    )
                },
                &[(
                    "spec.podFailurePolicy.rules[0].onPodConditions[0].status",
                    r#"Unsupported value: "Maybe": supported values: "False", "True", "Unknown""#,
                )],
            ),
            case(
                "a condition type must be a qualified name",
                |j| pfp(j, json!([{"action": "Ignore", "onPodConditions": [{"type": "bad type!"}]}])),
                &[(
                    "spec.podFailurePolicy.rules[0].onPodConditions[0].type",
                    &format!(r#"Invalid value: "bad type!": {NAME_PART}"#),
                )],
            ),
            case(
                "more than 20 condition patterns are too many",
                |j| {
                    let pattern = json!({"type": "DisruptionTarget"});
                    pfp(j, json!([{"action": "Ignore", "onPodConditions": vec![pattern; 21]}]));
                },
                &[("spec.podFailurePolicy.rules[0].onPodConditions", "Too many: 21: must have at most 20 items")],
            ),
            case(
                "setConditionReason on a FailJob rule is valid",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "FailJob", "setConditionReason": "NodeLost",
                                "onExitCodes": {"operator": "In", "values": [42]}}]),
                    )
                },
                &[],
            ),
            case(
                "setConditionReason is forbidden on other actions",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "Count", "setConditionReason": "NodeLost",
                                "onExitCodes": {"operator": "In", "values": [42]}}]),
                    )
                },
                &[(
                    "spec.podFailurePolicy.rules[0].setConditionReason",
                    "Forbidden: setConditionReason is only supported for the FailJob action",
                )],
            ),
            case(
                "setConditionReason must be a condition reason",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "FailJob", "setConditionReason": "bad reason",
                                "onExitCodes": {"operator": "In", "values": [42]}}]),
                    )
                },
                &[(
                    "spec.podFailurePolicy.rules[0].setConditionReason",
                    &format!(r#"Invalid value: "bad reason": {REASON}"#),
                )],
            ),
            case(
                "setConditionReason may not exceed 1024 bytes",
                |j| {
                    pfp(
                        j,
                        json!([{"action": "FailJob", "setConditionReason": "A".repeat(1025),
                                "onExitCodes": {"operator": "In", "values": [42]}}]),
                    )
                },
                &[("spec.podFailurePolicy.rules[0].setConditionReason", "Too long: may not be more than 1024 bytes")],
            ),
        ]);
    }

    #[test]
    fn create_validation_indexed_jobs_and_success_policy() {
        run_create(vec![
            case("a valid Indexed job has no errors", |j| indexed(j, 3), &[]),
            case(
                "backoffLimitPerIndex requires Indexed completion mode",
                |j| set(j, "/spec/backoffLimitPerIndex", json!(1)),
                &[("spec.backoffLimitPerIndex", "Invalid value: 1: requires indexed completion mode")],
            ),
            case(
                "maxFailedIndexes requires backoffLimitPerIndex and Indexed completion mode",
                |j| set(j, "/spec/maxFailedIndexes", json!(1)),
                &[
                    ("spec.backoffLimitPerIndex", "Required value: when maxFailedIndexes is specified"),
                    ("spec.maxFailedIndexes", "Invalid value: 1: requires indexed completion mode"),
                ],
            ),
            case(
                "a successPolicy requires Indexed completion mode",
                |j| set(j, "/spec/successPolicy", json!({"rules": [{"succeededCount": 1}]})),
                &[(
                    "spec.successPolicy",
                    r#"Invalid value: {"Rules":[{"SucceededIndexes":null,"SucceededCount":1}]}: requires indexed completion mode"#,
                )],
            ),
            case(
                "Indexed completion mode requires completions",
                |j| {
                    set(j, "/spec/completionMode", json!("Indexed"));
                    set(j, "/spec/parallelism", json!(2));
                },
                &[("spec.completions", "Required value: when completion mode is Indexed")],
            ),
            case(
                "Indexed parallelism is limited to 100000",
                |j| {
                    indexed(j, 3);
                    set(j, "/spec/parallelism", json!(100_001));
                },
                &[(
                    "spec.parallelism",
                    "Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed",
                )],
            ),
            case(
                "maxFailedIndexes may not exceed completions",
                |j| {
                    indexed(j, 3);
                    set(j, "/spec/backoffLimitPerIndex", json!(1));
                    set(j, "/spec/maxFailedIndexes", json!(4));
                },
                &[("spec.maxFailedIndexes", "Invalid value: 4: must be less than or equal to completions")],
            ),
            case(
                "above 100000 completions with backoffLimitPerIndex the limits are 10000",
                |j| {
                    indexed(j, 200_000);
                    set(j, "/spec/parallelism", json!(10_001));
                    set(j, "/spec/backoffLimitPerIndex", json!(1));
                    set(j, "/spec/maxFailedIndexes", json!(100_001));
                },
                &[
                    ("spec.maxFailedIndexes", "Invalid value: 100001: must be less than or equal to 100000"),
                    (
                        "spec.parallelism",
                        "Invalid value: 10001: must be less than or equal to 10000 when completions are above 100000 and used with backoff limit per index",
                    ),
                    (
                        "spec.maxFailedIndexes",
                        "Invalid value: 100001: must be less than or equal to 10000 when completions are above 100000 and used with backoff limit per index",
                    ),
                ],
            ),
            case(
                "above 100000 completions with backoffLimitPerIndex maxFailedIndexes is required",
                |j| {
                    indexed(j, 200_000);
                    set(j, "/spec/parallelism", json!(1));
                    set(j, "/spec/backoffLimitPerIndex", json!(1));
                },
                &[("spec.maxFailedIndexes", "Required value: must be specified when completions is above 100000")],
            ),
            case(
                "an Indexed job name must give DNS-label hostnames",
                |j| {
                    set(j, "/metadata/name", json!("Pi"));
                    indexed(j, 3);
                },
                &[(
                    "metadata.name",
                    r#"Invalid value: "Pi": will not able to create pod with invalid DNS label: Pi-2"#,
                )],
            ),
            case(
                "a valid successPolicy has no errors",
                |j| {
                    indexed(j, 5);
                    set(
                        j,
                        "/spec/successPolicy",
                        json!({"rules": [{"succeededIndexes": "0,2-4", "succeededCount": 3}]}),
                    );
                },
                &[],
            ),
            case(
                "a successPolicy needs rules",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": []}));
                },
                &[(
                    "spec.successPolicy.rules",
                    "Required value: at least one rules must be specified when the successPolicy is specified",
                )],
            ),
            case(
                "more than 20 successPolicy rules are too many",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": vec![json!({"succeededCount": 1}); 21]}));
                },
                &[("spec.successPolicy.rules", "Too many: 21: must have at most 20 items")],
            ),
            case(
                "a successPolicy rule needs succeededCount or succeededIndexes",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{}]}));
                },
                &[(
                    "spec.successPolicy.rules[0]",
                    "Required value: at least one of succeededCount or succeededIndexes must be specified",
                )],
            ),
            case(
                "an index interval has at most two parts",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededIndexes": "1-2-3"}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededIndexes",
                    r#"Invalid value: "1-2-3": error parsing succeededIndexes: the fragment "1-2-3" violates the requirement that an index interval can have at most two parts separated by '-'"#,
                )],
            ),
            case(
                "an index must be an integer",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededIndexes": "0,a"}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededIndexes",
                    r#"Invalid value: "0,a": error parsing succeededIndexes: cannot convert string to integer for index: "a""#,
                )],
            ),
            case(
                "an index must be below completions",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededIndexes": "2-7"}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededIndexes",
                    r#"Invalid value: "2-7": error parsing succeededIndexes: too large index: "7""#,
                )],
            ),
            case(
                "indexes must increase",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededIndexes": "3,1"}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededIndexes",
                    r#"Invalid value: "3,1": error parsing succeededIndexes: non-increasing order, previous: 3, current: 1"#,
                )],
            ),
            case(
                "succeededCount may not exceed completions",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededCount": 6}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededCount",
                    "Invalid value: 6: must be less than or equal to 5 (the number of specified completions)",
                )],
            ),
            case(
                "succeededCount may not exceed the number of succeededIndexes",
                |j| {
                    indexed(j, 5);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededIndexes": "0-1", "succeededCount": 3}]}));
                },
                &[(
                    "spec.successPolicy.rules[0].succeededCount",
                    "Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)",
                )],
            ),
        ]);
    }

    #[test]
    fn create_validation_selector_labels_and_managed_by() {
        run_create(vec![
            case(
                "a manual selector must match the template labels",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchLabels": {"app": "a"}}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[(
                    "spec.template.metadata.labels",
                    r#"Invalid value: {"app":"b"}: `selector` does not match template `labels`"#,
                )],
            ),
            case(
                "a manual selector is required",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[
                    ("spec.selector", "Required value"),
                    (
                        "spec.template.metadata.labels",
                        r#"Invalid value: {"app":"b"}: `selector` does not match template `labels`"#,
                    ),
                ],
            ),
            case(
                "a manual selector with matching expressions is valid",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(
                        j,
                        "/spec/selector",
                        json!({"matchExpressions": [
                            {"key": "app", "operator": "In", "values": ["b"]},
                            {"key": "tier", "operator": "DoesNotExist"},
                        ]}),
                    );
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[],
            ),
            case(
                "a selector operator must be valid",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchExpressions": [{"key": "app", "operator": "Foo"}]}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[(
                    "spec.selector.matchExpressions[0].operator",
                    r#"Invalid value: "Foo": not a valid selector operator"#,
                )],
            ),
            case(
                "a selector In expression needs values",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchExpressions": [{"key": "app", "operator": "In"}]}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[(
                    "spec.selector.matchExpressions[0].values",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                )],
            ),
            case(
                "a selector Exists expression may not have values",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(
                        j,
                        "/spec/selector",
                        json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["b"]}]}),
                    );
                    set(j, "/spec/template/metadata/labels", json!({"app": "b"}));
                },
                &[(
                    "spec.selector.matchExpressions[0].values",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )],
            ),
            case(
                "a selector label value must be valid",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchLabels": {"app": "b c"}}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "b c"}));
                },
                &[("spec.selector.matchLabels", &format!(r#"Invalid value: "b c": {LABEL_VALUE}"#))],
            ),
            case(
                "a user job-name template label must be the job name",
                |j| set(j, "/spec/template/metadata/labels", json!({"job-name": "other"})),
                &[(
                    "spec.template.metadata.labels[job-name]",
                    r#"Invalid value: {"batch.kubernetes.io/controller-uid":"uid-1","batch.kubernetes.io/job-name":"pi","controller-uid":"uid-1","job-name":"other"}: must be 'pi'"#,
                )],
            ),
            case_after(
                "a generated selector requires the generated template labels",
                none,
                |j| remove(j, "/spec/template/metadata/labels/controller-uid"),
                &[("spec.template.metadata.labels[controller-uid]", "Required value: must be 'uid-1'")],
            ),
            case(
                "a user selector without manualSelector is not auto-generated",
                |j| {
                    set(j, "/spec/selector", json!({"matchLabels": {"app": "a"}}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "a"}));
                },
                &[(
                    "spec.selector",
                    r#"Invalid value: {"matchLabels":{"app":"a","batch.kubernetes.io/controller-uid":"uid-1"}}: `selector` not auto-generated"#,
                )],
            ),
            case(
                "a generated selector needs metadata.uid",
                |j| remove(j, "/metadata/uid"),
                &[("metadata.uid", "Required value")],
            ),
            case(
                "a valid managedBy has no errors",
                |j| set(j, "/spec/managedBy", json!("kueue.x-k8s.io/multikueue")),
                &[],
            ),
            case(
                "an empty managedBy is required",
                |j| set(j, "/spec/managedBy", json!("")),
                &[("spec.managedBy", "Required value")],
            ),
            case(
                "managedBy must be a domain-prefixed path",
                |j| set(j, "/spec/managedBy", json!("foo")),
                &[(
                    "spec.managedBy",
                    r#"Invalid value: "foo": must be a domain-prefixed path (such as "acme.io/foo")"#,
                )],
            ),
            case(
                "the managedBy domain must be a DNS subdomain",
                |j| set(j, "/spec/managedBy", json!("Acme.io/foo")),
                &[("spec.managedBy", &format!(r#"Invalid value: "Acme.io": {SUBDOMAIN}"#))],
            ),
            case(
                "the managedBy path must use HTTP path characters",
                |j| set(j, "/spec/managedBy", json!("acme.io/a b")),
                &[(
                    "spec.managedBy",
                    r#"Invalid value: "a b": Invalid path (regex used for validation is '[A-Za-z0-9/\-._~%!$&'()*+,;=:]+')"#,
                )],
            ),
            case(
                "managedBy may not exceed 63 bytes",
                |j| set(j, "/spec/managedBy", json!(format!("acme.io/{}", "a".repeat(60)))),
                &[("spec.managedBy", "Too long: may not be more than 63 bytes")],
            ),
        ]);
    }

    #[test]
    fn update_validation_mutability() {
        run_update(vec![
            case_after("parallelism is mutable", none, |j| set(j, "/spec/parallelism", json!(3)), &[]),
            case_after(
                "completions is immutable for NonIndexed jobs",
                none,
                |j| set(j, "/spec/completions", json!(3)),
                &[("spec.completions", "Invalid value: 3: field is immutable")],
            ),
            case_after(
                "Indexed completions may change in tandem with parallelism",
                |j| indexed(j, 3),
                |j| {
                    set(j, "/spec/completions", json!(5));
                    set(j, "/spec/parallelism", json!(5));
                },
                &[],
            ),
            case_after(
                "Indexed completions may not change alone",
                |j| indexed(j, 3),
                |j| set(j, "/spec/completions", json!(5)),
                &[("spec.completions", "Invalid value: 5: can only be modified in tandem with spec.parallelism")],
            ),
            case_after(
                "Indexed completions may not be cleared (reported by both spec validations)",
                |j| indexed(j, 3),
                |j| remove(j, "/spec/completions"),
                &[
                    ("spec.completions", "Required value: when completion mode is Indexed"),
                    ("spec.completions", "Required value: when completion mode is Indexed"),
                ],
            ),
            case_after(
                "spec errors are reported twice on update, as upstream does",
                none,
                |j| set(j, "/spec/parallelism", json!(-1)),
                &[
                    ("spec.parallelism", &format!("Invalid value: -1: {NONNEG}")),
                    ("spec.parallelism", &format!("Invalid value: -1: {NONNEG}")),
                ],
            ),
            case_after(
                "completionMode is immutable",
                none,
                |j| set(j, "/spec/completionMode", json!("Indexed")),
                &[("spec.completionMode", r#"Invalid value: "Indexed": field is immutable"#)],
            ),
            case_after(
                "podFailurePolicy is immutable",
                |j| pfp(j, json!([exit_rule("FailJob", "In", json!([1]))])),
                |j| set(j, "/spec/podFailurePolicy/rules/0/onExitCodes/values", json!([2])),
                &[(
                    "spec.podFailurePolicy",
                    r#"Invalid value: {"Rules":[{"Action":"FailJob","OnExitCodes":{"ContainerName":null,"Operator":"In","Values":[2]},"OnPodConditions":null}]}: field is immutable"#,
                )],
            ),
            case_after(
                "backoffLimitPerIndex is immutable",
                |j| {
                    indexed(j, 3);
                    set(j, "/spec/backoffLimitPerIndex", json!(1));
                },
                |j| set(j, "/spec/backoffLimitPerIndex", json!(2)),
                &[("spec.backoffLimitPerIndex", "Invalid value: 2: field is immutable")],
            ),
            case_after("backoffLimit is mutable", none, |j| set(j, "/spec/backoffLimit", json!(1)), &[]),
            case_after(
                "managedBy is immutable",
                none,
                |j| set(j, "/spec/managedBy", json!("example.com/other")),
                &[("spec.managedBy", r#"Invalid value: "example.com/other": field is immutable"#)],
            ),
            case_after(
                "successPolicy is immutable",
                |j| {
                    indexed(j, 3);
                    set(j, "/spec/successPolicy", json!({"rules": [{"succeededCount": 1}]}));
                },
                |j| set(j, "/spec/successPolicy/rules/0/succeededCount", json!(2)),
                &[(
                    "spec.successPolicy",
                    r#"Invalid value: {"Rules":[{"SucceededIndexes":null,"SucceededCount":2}]}: field is immutable"#,
                )],
            ),
            case_after(
                "selector is immutable",
                |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchLabels": {"app": "a"}}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "a", "tier": "x"}));
                },
                |j| set(j, "/spec/selector", json!({"matchLabels": {"app": "a", "tier": "x"}})),
                &[("spec.selector", r#"Invalid value: {"matchLabels":{"app":"a","tier":"x"}}: field is immutable"#)],
            ),
            case_after(
                "the template is immutable for a running job",
                none,
                |j| set(j, "/spec/template/spec/nodeSelector", json!({"disk": "ssd"})),
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "a suspended job that never started may change its scheduling directives",
                |j| {
                    set(j, "/spec/suspend", json!(true));
                    set(j, "/spec/template/spec/affinity", json!({"nodeAffinity": {"a": 1}}));
                },
                |j| {
                    set(j, "/spec/template/spec/nodeSelector", json!({"disk": "ssd"}));
                    set(j, "/spec/template/spec/tolerations", json!([{"key": "k", "operator": "Exists"}]));
                    set(j, "/spec/template/spec/schedulingGates", json!([{"name": "gate"}]));
                    set(j, "/spec/template/spec/affinity", json!({"nodeAffinity": {"b": 2}}));
                    set(j, "/spec/template/metadata/labels/queue", json!("q"));
                    set(j, "/spec/template/metadata/annotations", json!({"note": "x"}));
                },
                &[],
            ),
            case_after(
                "a suspended job that never started may drop an affinity holding only nodeAffinity",
                |j| {
                    set(j, "/spec/suspend", json!(true));
                    set(j, "/spec/template/spec/affinity", json!({"nodeAffinity": {"a": 1}}));
                },
                |j| remove(j, "/spec/template/spec/affinity"),
                &[],
            ),
            case_after(
                "a suspended job may not drop a podAffinity",
                |j| {
                    set(j, "/spec/suspend", json!(true));
                    set(j, "/spec/template/spec/affinity", json!({"nodeAffinity": {"a": 1}, "podAffinity": {"p": 1}}));
                },
                |j| remove(j, "/spec/template/spec/affinity"),
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "a suspended job that never started may not change its containers",
                |j| set(j, "/spec/suspend", json!(true)),
                |j| set(j, "/spec/template/spec/containers/0/image", json!("busybox:2")),
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "a suspended job that already started keeps its template",
                |j| {
                    set(j, "/spec/suspend", json!(true));
                    set(j, "/status/startTime", json!("2026-01-01T00:00:00Z"));
                },
                |j| set(j, "/spec/template/spec/nodeSelector", json!({"disk": "ssd"})),
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
        ]);
    }

    #[test]
    fn kep_5440_resources_are_mutable_only_while_suspended_with_no_pods_of_the_old_template() {
        fn suspended(j: &mut Value) {
            set(j, "/spec/suspend", json!(true));
        }
        fn started(j: &mut Value) {
            set(j, "/status/startTime", json!("2026-01-01T00:00:00Z"));
        }
        fn suspended_condition(j: &mut Value) {
            set(j, "/status/conditions", json!([{"type": "Suspended", "status": "True"}]));
        }
        fn resize(j: &mut Value) {
            set(
                j,
                "/spec/template/spec/containers/0/resources",
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}),
            );
            set(j, "/spec/template/spec/initContainers/0/resources/requests", json!({"memory": "1Gi"}));
        }
        run_update(vec![
            case_after("a running job keeps its resources", none, resize, &[("spec.template", TEMPLATE_IMMUTABLE)]),
            case_after("a suspended job that never started may change them", suspended, resize, &[]),
            case_after(
                "a suspended job that started keeps them while its pods may run",
                |j| {
                    suspended(j);
                    started(j);
                },
                resize,
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "a suspended job whose pods are gone may change them",
                |j| {
                    suspended(j);
                    started(j);
                    suspended_condition(j);
                },
                resize,
                &[],
            ),
            case_after(
                "not while pods are still active",
                |j| {
                    suspended(j);
                    started(j);
                    suspended_condition(j);
                    set(j, "/status/active", json!(1));
                },
                resize,
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "the condition without spec.suspend is not enough",
                |j| {
                    started(j);
                    suspended_condition(j);
                },
                resize,
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "other container fields stay immutable",
                suspended,
                |j| {
                    resize(j);
                    set(j, "/spec/template/spec/containers/0/image", json!("busybox:2"));
                },
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
            case_after(
                "a renamed container does not take new resources",
                suspended,
                |j| {
                    resize(j);
                    set(j, "/spec/template/spec/containers/0/name", json!("other"));
                },
                &[("spec.template", TEMPLATE_IMMUTABLE)],
            ),
        ]);
    }

    #[test]
    fn defaults() {
        struct DefaultCase {
            name: &'static str,
            edit: fn(&mut Value),
            want: Vec<(&'static str, Value)>,
        }
        let generated_labels = json!({
            "batch.kubernetes.io/controller-uid": "uid-1",
            "batch.kubernetes.io/job-name": "pi",
            "controller-uid": "uid-1",
            "job-name": "pi",
        });
        let cases = vec![
            DefaultCase {
                name: "an empty spec gets upstream's defaults",
                edit: none,
                want: vec![
                    ("/spec/completions", json!(1)),
                    ("/spec/parallelism", json!(1)),
                    ("/spec/backoffLimit", json!(6)),
                    ("/spec/completionMode", json!("NonIndexed")),
                    ("/spec/suspend", json!(false)),
                    ("/spec/manualSelector", json!(false)),
                    ("/spec/podReplacementPolicy", json!("TerminatingOrFailed")),
                    ("/spec/template/spec/dnsPolicy", json!("ClusterFirst")),
                    ("/spec/template/spec/schedulerName", json!("default-scheduler")),
                    ("/spec/template/spec/terminationGracePeriodSeconds", json!(30)),
                    ("/spec/template/spec/securityContext", json!({})),
                    ("/spec/template/spec/restartPolicy", json!("Never")),
                ],
            },
            DefaultCase {
                name: "a missing restartPolicy defaults to Always",
                edit: |j| remove(j, "/spec/template/spec/restartPolicy"),
                want: vec![("/spec/template/spec/restartPolicy", json!("Always"))],
            },
            DefaultCase {
                name: "completions alone keeps it and defaults parallelism to 1",
                edit: |j| set(j, "/spec/completions", json!(5)),
                want: vec![("/spec/completions", json!(5)), ("/spec/parallelism", json!(1))],
            },
            DefaultCase {
                name: "parallelism alone leaves completions unset (work queue)",
                edit: |j| set(j, "/spec/parallelism", json!(3)),
                want: vec![("/spec/completions", Value::Null), ("/spec/parallelism", json!(3))],
            },
            DefaultCase {
                name: "backoffLimitPerIndex makes the backoffLimit default MaxInt32",
                edit: |j| set(j, "/spec/backoffLimitPerIndex", json!(1)),
                want: vec![("/spec/backoffLimit", json!(2147483647))],
            },
            DefaultCase {
                name: "a podFailurePolicy makes podReplacementPolicy Failed and condition status True",
                edit: |j| pfp(j, json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}])),
                want: vec![
                    ("/spec/podReplacementPolicy", json!("Failed")),
                    ("/spec/podFailurePolicy/rules/0/onPodConditions/0/status", json!("True")),
                ],
            },
            DefaultCase {
                name: "explicit values are kept",
                edit: |j| {
                    set(j, "/spec/backoffLimit", json!(0));
                    set(j, "/spec/suspend", json!(true));
                    set(j, "/spec/podReplacementPolicy", json!("Failed"));
                    set(j, "/spec/template/spec/dnsPolicy", json!("Default"));
                    set(j, "/spec/template/spec/terminationGracePeriodSeconds", json!(5));
                    pfp(j, json!([{"action": "Ignore", "onPodConditions": [{"type": "X", "status": "False"}]}]));
                },
                want: vec![
                    ("/spec/backoffLimit", json!(0)),
                    ("/spec/suspend", json!(true)),
                    ("/spec/podReplacementPolicy", json!("Failed")),
                    ("/spec/template/spec/dnsPolicy", json!("Default")),
                    ("/spec/template/spec/terminationGracePeriodSeconds", json!(5)),
                    ("/spec/podFailurePolicy/rules/0/onPodConditions/0/status", json!("False")),
                ],
            },
            DefaultCase {
                name: "the selector and template labels are generated and copied to the job labels",
                edit: none,
                want: vec![
                    ("/spec/selector", json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}})),
                    ("/spec/template/metadata/labels", generated_labels.clone()),
                    ("/metadata/labels", generated_labels.clone()),
                ],
            },
            DefaultCase {
                name: "user template labels are kept",
                edit: |j| set(j, "/spec/template/metadata/labels", json!({"app": "x", "job-name": "mine"})),
                want: vec![
                    ("/spec/template/metadata/labels/app", json!("x")),
                    ("/spec/template/metadata/labels/job-name", json!("mine")),
                    ("/metadata/labels/app", json!("x")),
                ],
            },
            DefaultCase {
                name: "existing job labels are kept",
                edit: |j| set(j, "/metadata/labels", json!({"team": "a"})),
                want: vec![("/metadata/labels", json!({"team": "a"}))],
            },
            DefaultCase {
                name: "a manual selector generates nothing",
                edit: |j| {
                    set(j, "/spec/manualSelector", json!(true));
                    set(j, "/spec/selector", json!({"matchLabels": {"app": "x"}}));
                    set(j, "/spec/template/metadata/labels", json!({"app": "x"}));
                },
                want: vec![
                    ("/spec/selector", json!({"matchLabels": {"app": "x"}})),
                    ("/spec/template/metadata/labels", json!({"app": "x"})),
                    ("/metadata/labels", json!({"app": "x"})),
                ],
            },
            DefaultCase {
                name: "containers get pull policy, termination message and port protocol defaults",
                edit: |j| {
                    set(
                        j,
                        "/spec/template/spec/containers",
                        json!([
                            {"name": "a", "image": "busybox", "ports": [{"containerPort": 80}]},
                            {"name": "b", "image": "busybox:1.36"},
                            {"name": "c", "image": "registry:5000/busybox:latest"},
                            {"name": "d", "image": "registry:5000/busybox"},
                            {"name": "e", "image": "busybox@sha256:abc"},
                            {"name": "f", "image": "busybox", "imagePullPolicy": "Never"},
                        ]),
                    );
                },
                want: vec![
                    ("/spec/template/spec/containers/0/imagePullPolicy", json!("Always")),
                    ("/spec/template/spec/containers/0/terminationMessagePath", json!("/dev/termination-log")),
                    ("/spec/template/spec/containers/0/terminationMessagePolicy", json!("File")),
                    ("/spec/template/spec/containers/0/ports/0/protocol", json!("TCP")),
                    ("/spec/template/spec/containers/1/imagePullPolicy", json!("IfNotPresent")),
                    ("/spec/template/spec/containers/2/imagePullPolicy", json!("Always")),
                    ("/spec/template/spec/containers/3/imagePullPolicy", json!("Always")),
                    ("/spec/template/spec/containers/4/imagePullPolicy", json!("IfNotPresent")),
                    ("/spec/template/spec/containers/5/imagePullPolicy", json!("Never")),
                    ("/spec/template/spec/initContainers/0/imagePullPolicy", json!("Always")),
                ],
            },
        ];
        let mut failures = Vec::new();
        for c in &cases {
            let mut job = raw_job();
            (c.edit)(&mut job);
            default_job(&mut job);
            for (pointer, want) in &c.want {
                let got = job.pointer(pointer).cloned().unwrap_or(Value::Null);
                if &got != want {
                    failures.push(format!("{}: {pointer}: got {got}, want {want}", c.name));
                }
            }
            let again = {
                let mut j = job.clone();
                default_job(&mut j);
                j
            };
            if again != job {
                failures.push(format!("{}: defaulting is not idempotent", c.name));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn prefixed_template_labels_are_required_unless_the_old_job_lacked_them() {
        let mut old = raw_job();
        default_job(&mut old);
        set(&mut old, "/spec/selector", json!({"matchLabels": {"controller-uid": "uid-1"}}));
        set(&mut old, "/spec/template/metadata/labels", json!({"controller-uid": "uid-1", "job-name": "pi"}));
        let mut new = old.clone();
        set(&mut new, "/spec/parallelism", json!(2));
        assert_eq!(messages(&validate_job(&new, Some(&old))), vec![]);
        assert_eq!(
            messages(&validate_job(&new, None)),
            vec![
                (
                    "spec.template.metadata.labels[batch.kubernetes.io/controller-uid]".to_string(),
                    "Required value: must be 'uid-1'".to_string()
                ),
                (
                    "spec.template.metadata.labels[batch.kubernetes.io/job-name]".to_string(),
                    "Required value: must be 'pi'".to_string()
                ),
            ]
        );
    }

    #[test]
    fn every_defaulted_example_job_validates() {
        let mut job = raw_job();
        default_job(&mut job);
        assert_eq!(validate_job(&job, None), vec![]);
        assert_eq!(validate_job(&job, Some(&job)), vec![]);
    }
}
