//! JobSet validation: upstream's validating webhook (`pkg/webhooks/jobset_webhook.go`),
//! `ValidateCreate` or `ValidateUpdate`. Its plain (non-field) errors are wrapped as upstream wraps
//! them, `field.InternalError(nil, err)`, which renders `<nil>: Internal error: <message>`.
//!
//! The CRD's OpenAPI schema (types, enums, bounds, list-map keys, defaults) and its CEL rules
//! (StartupPolicy/DependsOn exclusion, VolumeClaimPolicy template namespaces, `Value is immutable`)
//! are not checked here: the API server enforces them before admission, kube-apiserver on a
//! cluster and `crates/apiserver`'s `crd_schema` locally. The object given here is therefore
//! decoded and schema-defaulted already; one that does not decode as a `JobSetSpec` gets a single
//! internal error rather than field checks.
//!
//! Extensions of jobset-rs: the actions `RestartReplicatedJob`,
//! `RestartReplicatedJobAndIgnoreMaxRestarts` (gated like `RestartJob`) and `FailJob` are
//! accepted; a rule's `onJobFailureReasons` may also name the `setConditionReason` of a `FailJob`
//! rule of some replicated job's podFailurePolicy (KEP-262's HPC story); a rule's own
//! `maxRestarts` (per-rule restart budget) must be non-negative and is only for the counted restart
//! actions.
//!
//! KEP-1150 (`MutablePodResourcesForSuspendedJobSets`, alpha upstream, on here): while the JobSet
//! is or is being suspended, its containers' and init containers' `resources.requests` and
//! `resources.limits` may change too.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::keys;
use super::types::{FailurePolicyAction, JobSetSpec, ReplicatedJob, RestartStrategy};
use crate::field::{FieldError, quote, render};
use crate::validation::{
    dns1035_label_errors, dns1123_subdomain_errors, label_value_errors, validate_domain_prefixed_path,
};

/// The alpha feature gates the webhook consults. jobset-rs enables all of them by default.
#[derive(Clone, Debug)]
pub struct Features {
    /// `InPlaceRestart`: the `InPlaceRestart` restart strategy.
    pub in_place_restart: bool,
    /// `RestartJob`: the `RestartJob*` (and, here, `RestartReplicatedJob*`) actions.
    pub restart_job: bool,
    /// `ElasticJobSet`: mutable parallelism/completions of Indexed replicated jobs.
    pub elastic_jobset: bool,
    /// `MutablePodResourcesForSuspendedJobSets` (KEP-1150): mutable container and init-container
    /// `resources.requests`/`limits` of a suspended JobSet.
    pub mutable_pod_resources: bool,
    /// `ExecutionAttemptsTracking` (KEP-1282): `status.executionAttempts` and the
    /// `jobset.sigs.k8s.io/execution-attempt` annotation.
    pub execution_attempts: bool,
    /// `JobSetActiveDeadlineSeconds` (KEP-1186): `spec.activeDeadlineSeconds` and
    /// `status.startTime`.
    pub active_deadline: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            in_place_restart: true,
            restart_job: true,
            elastic_jobset: true,
            mutable_pod_resources: true,
            execution_attempts: true,
            active_deadline: true,
        }
    }
}

impl Features {
    /// Every gate off: upstream's stable API alone.
    pub fn none() -> Self {
        Features {
            in_place_restart: false,
            restart_job: false,
            elastic_jobset: false,
            mutable_pod_resources: false,
            execution_attempts: false,
            active_deadline: false,
        }
    }
}

/// The field of errors upstream reports without a path (`field.InternalError(nil, err)`).
const NIL_PATH: &str = "<nil>";
const IMMUTABLE: &str = "field is immutable";
const MAX_INT32: i64 = i32::MAX as i64;
const MAX_MANAGED_BY_LENGTH: usize = 63;
const MAX_VOLUME_CLAIM_LENGTH: usize = 63;
const MAX_REPLICAS_PER_REPLICATED_JOB: i32 = 1024;
const SUBDOMAIN_TOO_LONG: &str = ".spec.network.subdomain is too long, must be less than 63 characters";
const GROUP_NAME_TOO_LONG: &str = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters";
const JOB_NAME_TOO_LONG: &str =
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters";
const POD_NAME_TOO_LONG: &str =
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters";
const DNS1035_MAX_LEN: &str = "must be no more than 63 characters";

/// KEP-1186's guard: with `JobSetActiveDeadlineSeconds` off, `activeDeadlineSeconds` may not be
/// set or changed (an unchanged value and clearing it are allowed).
fn active_deadline_gate(spec: &JobSetSpec, old: Option<&JobSetSpec>, features: &Features) -> Option<FieldError> {
    let value = spec.active_deadline_seconds?;
    let unchanged = old.is_some_and(|o| o.active_deadline_seconds == Some(value));
    (!features.active_deadline && !unchanged).then(|| {
        FieldError::forbidden(
            "spec.activeDeadlineSeconds",
            "may not be set when the JobSetActiveDeadlineSeconds feature gate is disabled",
        )
    })
}

/// Validates a JobSet on create (`old` is `None`) or update.
pub fn validate_jobset(obj: &Value, old: Option<&Value>, features: &Features) -> Vec<FieldError> {
    validate_jobset_in(obj, old, features, &|_, _| None)
}

/// An existing PersistentVolumeClaim, by (namespace, name), as stored.
pub type ClaimLookup<'a> = dyn Fn(&str, &str) -> Option<Value> + 'a;

/// [`validate_jobset`] in a cluster whose existing claims `claim` returns, for the checks a
/// VolumeClaimPolicy makes against a claim of the same name.
pub fn validate_jobset_in(
    obj: &Value,
    old: Option<&Value>,
    features: &Features,
    claim: &ClaimLookup,
) -> Vec<FieldError> {
    let spec: JobSetSpec = match serde_json::from_value(obj.get("spec").cloned().unwrap_or_else(|| json!({}))) {
        Ok(s) => s,
        Err(e) => return vec![FieldError::internal(NIL_PATH, e.to_string())],
    };
    let mut errs = match old {
        None => validate_create(obj, &spec, features, claim),
        Some(old) => {
            // An old object that does not parse cannot be compared field by field.
            match serde_json::from_value::<JobSetSpec>(old.get("spec").cloned().unwrap_or_else(|| json!({}))) {
                Ok(old_spec) => validate_update(obj, &spec, old, &old_spec, features),
                Err(_) => vec![],
            }
        }
    };
    // Extension: the gang-scheduling annotation (`super::gang`).
    errs.extend(super::gang::validate(obj, old));
    errs
}

/// A plain (non-field) webhook error, as `toFieldErrorList` wraps it.
fn plain(message: impl Into<String>) -> FieldError {
    FieldError::internal(NIL_PATH, message)
}

/// A nil pointer as `ErrorBody()` renders it: the string `"null"`.
fn render_opt<T: Into<Value>>(v: Option<T>) -> String {
    match v {
        Some(v) => render(&v.into()),
        None => quote("null"),
    }
}

/// `getJobSetNameForValidation`: the name, else `generateName` plus 5 characters (the prefix cut to
/// 58 as the name generator does), else "".
fn name_for_validation(obj: &Value) -> String {
    let meta = |k: &str| obj.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default();
    if !meta("name").is_empty() {
        return meta("name").to_string();
    }
    let generate = meta("generateName");
    if generate.is_empty() {
        return String::new();
    }
    let mut base = generate.to_string();
    if base.len() > 58 {
        let mut cut = 58;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    format!("{base}xxxxx")
}

fn pod_spec(rjob: &ReplicatedJob) -> Option<&Value> {
    rjob.template.0.pointer("/spec/template/spec")
}

fn items<'a>(v: Option<&'a Value>, key: &str) -> &'a [Value] {
    v.and_then(|v| v.get(key)).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The `setConditionReason` of every `FailJob` rule of every replicated job's podFailurePolicy.
fn user_failure_reasons(spec: &JobSetSpec) -> BTreeSet<&str> {
    spec.replicated_jobs
        .iter()
        .flat_map(|r| items(r.template.0.pointer("/spec/podFailurePolicy"), "rules"))
        .filter(|rule| rule.get("action").and_then(Value::as_str) == Some("FailJob"))
        .filter_map(|rule| rule.get("setConditionReason").and_then(Value::as_str))
        .collect()
}

/// `ValidateCreate`.
fn validate_create(obj: &Value, spec: &JobSetSpec, features: &Features, claim: &ClaimLookup) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let js_name = name_for_validation(obj);
    let in_place = spec.failure_policy.as_ref().is_some_and(|f| f.restart_strategy == RestartStrategy::InPlaceRestart);

    if !features.in_place_restart && in_place {
        errs.push(plain("InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"));
    }
    errs.extend(active_deadline_gate(spec, None, features));
    if spec.replicated_jobs.first().is_some_and(|r| !r.depends_on.is_empty()) {
        errs.push(plain("DependsOn can't be set for the first ReplicatedJob"));
    }

    if let Some(subdomain) = spec.network.as_ref().and_then(|n| n.subdomain.as_deref()).filter(|s| !s.is_empty()) {
        let path = "spec.network.subdomain";
        for msg in dns1123_subdomain_errors(subdomain) {
            errs.push(FieldError::invalid(path, &json!(subdomain), msg));
        }
        for msg in dns1035_label_errors(subdomain) {
            let msg = if msg.contains(DNS1035_MAX_LEN) { SUBDOMAIN_TOO_LONG.to_string() } else { msg };
            errs.push(FieldError::invalid(path, &json!(subdomain), msg));
        }
    }

    if let Some(manager) = &spec.managed_by {
        validate_domain_prefixed_path("spec.managedBy", manager, &mut errs);
        if manager.len() > MAX_MANAGED_BY_LENGTH {
            errs.push(FieldError::too_long("spec.managedBy", MAX_MANAGED_BY_LENGTH));
        }
    }

    let mut rjob_names: BTreeSet<&str> = BTreeSet::new();
    for (i, rjob) in spec.replicated_jobs.iter().enumerate() {
        let path = format!("spec.replicatedJobs[{i}]");
        rjob_names.insert(&rjob.name);

        let parallelism = rjob.template.parallelism().unwrap_or(1);
        if parallelism as i64 * rjob.replicas as i64 > MAX_INT32 {
            errs.push(plain(format!(
                "the product of replicas and parallelism must not exceed {MAX_INT32} for replicatedJob '{}'",
                rjob.name
            )));
        }

        for msg in dns1035_label_errors(&rjob.group_name) {
            let msg = if msg.contains(DNS1035_MAX_LEN) { GROUP_NAME_TOO_LONG.to_string() } else { msg };
            errs.push(FieldError::invalid(format!("{path}.groupName"), &json!(rjob.group_name), msg));
        }
        let longest_job_name = format!("{js_name}-{}-{}", rjob.name, rjob.replicas - 1);
        for msg in dns1035_label_errors(&longest_job_name) {
            let msg = if msg.contains(DNS1035_MAX_LEN) { JOB_NAME_TOO_LONG.to_string() } else { msg };
            errs.push(FieldError::invalid(format!("{path}.name"), &json!(longest_job_name), msg));
        }
        if let (true, Some(completions)) = (rjob.template.is_indexed(), rjob.template.completions()) {
            let longest_pod_name = format!("{longest_job_name}-{}-abcde", completions - 1);
            for msg in dns1035_label_errors(&longest_pod_name) {
                let msg = if msg.contains(DNS1035_MAX_LEN) { POD_NAME_TOO_LONG.to_string() } else { msg };
                // Upstream reports the job name as the value here.
                errs.push(FieldError::invalid(format!("{path}.name"), &json!(longest_job_name), msg));
            }
        }

        for dep in &rjob.depends_on {
            if !rjob_names.contains(dep.name.as_str()) {
                errs.push(plain(format!("replicatedJob: {} cannot depend on replicatedJob: {}", rjob.name, dep.name)));
            }
        }

        if features.in_place_restart && in_place {
            let job_spec = rjob.template.0.get("spec");
            let backoff_limit = job_spec.and_then(|s| s.get("backoffLimit")).and_then(Value::as_i64);
            if backoff_limit != Some(MAX_INT32) {
                errs.push(FieldError::invalid_rendered(
                    format!("{path}.template.spec.backoffLimit"),
                    render_opt(backoff_limit),
                    format!(
                        "replicatedJob {}: must be set to {MAX_INT32} (MaxInt32) when in-place restart is enabled",
                        rjob.name
                    ),
                ));
            }
            let replacement = job_spec.and_then(|s| s.get("podReplacementPolicy")).and_then(Value::as_str);
            if replacement != Some("Failed") {
                errs.push(FieldError::invalid_rendered(
                    format!("{path}.template.spec.podReplacementPolicy"),
                    render_opt(replacement),
                    format!("replicatedJob {}: must be set to Failed when in-place restart is enabled", rjob.name),
                ));
            }
            let completions = rjob.template.completions();
            if completions.is_none() || completions != rjob.template.parallelism() {
                errs.push(FieldError::invalid_rendered(
                    format!("{path}.template.spec.completions"),
                    render_opt(completions),
                    format!(
                        "replicatedJob {}: completions and parallelism must be set and equal to each other when in-place restart is enabled",
                        rjob.name
                    ),
                ));
            }
        }
    }

    if let Some(sp) = &spec.success_policy {
        for target in &sp.target_replicated_jobs {
            if !rjob_names.contains(target.as_str()) {
                errs.push(plain(format!(
                    "invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs"
                )));
            }
        }
    }

    if spec.failure_policy.is_some() {
        validate_failure_policy(spec, &rjob_names, features, &mut errs);
    }

    if let Some(coordinator) = &spec.coordinator {
        if let Some(msg) = coordinator_error(spec) {
            errs.push(plain(msg));
        }
        let subdomain = spec.network.as_ref().and_then(|n| n.subdomain.as_deref()).filter(|s| !s.is_empty());
        let endpoint = format!(
            "{js_name}-{}-{}-{}.{}",
            coordinator.replicated_job,
            coordinator.job_index,
            coordinator.pod_index,
            subdomain.unwrap_or(&js_name)
        );
        let label_errs = label_value_errors(&endpoint);
        if !label_errs.is_empty() {
            errs.push(plain(format!(
                "spec will lead to invalid label value {} for coordinator label {} (long JobSet / ReplicatedJob / SubDomain name?): {}",
                quote(&endpoint),
                quote(keys::COORDINATOR),
                label_errs.join(", ")
            )));
        }
    }

    if !spec.volume_claim_policies.is_empty() {
        validate_volume_claim_policies(obj, spec, &js_name, claim, &mut errs);
    }
    errs
}

fn validate_failure_policy(
    spec: &JobSetSpec,
    rjob_names: &BTreeSet<&str>,
    features: &Features,
    errs: &mut Vec<FieldError>,
) {
    let Some(fp) = &spec.failure_policy else { return };
    use FailurePolicyAction as A;
    let has = |actions: &[A]| fp.rules.iter().any(|r| actions.contains(&r.action));
    let restart_job = has(&[A::RestartJob, A::RestartJobAndIgnoreMaxRestarts]);
    let restart_replicated_job = has(&[A::RestartReplicatedJob, A::RestartReplicatedJobAndIgnoreMaxRestarts]);
    if (restart_job || restart_replicated_job) && !features.restart_job {
        errs.push(plain(
            "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when RestartJob feature gate is disabled",
        ));
        return;
    }
    if restart_job && spec.replicated_jobs.iter().any(|r| r.replicas > MAX_REPLICAS_PER_REPLICATED_JOB) {
        errs.push(plain(format!(
            "JobSet cannot have a failure policy rule with RestartJob or RestartJobAndIgnoreMaxRestarts action and a replicated job with replicas > {MAX_REPLICAS_PER_REPLICATED_JOB}"
        )));
    }

    let user_reasons = user_failure_reasons(spec);
    let mut by_name: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, rule) in fp.rules.iter().enumerate() {
        let len = rule.name.len();
        if !(1..=128).contains(&len) {
            errs.push(plain(format!(
                "invalid failure policy rule name of length {len}, the rule name must be at least 1 characters long and at most 128 characters long"
            )));
        }
        match by_name.iter_mut().find(|(n, _)| *n == rule.name) {
            Some((_, idx)) => idx.push(i),
            None => by_name.push((&rule.name, vec![i])),
        }
        if !crate::validation::is_condition_reason(&rule.name) {
            errs.push(plain(format!(
                "invalid failure policy rule name '{}', a failure policy rule name must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
                rule.name
            )));
        }
        if let Some(max) = rule.max_restarts {
            let path = format!("spec.failurePolicy.rules[{i}].maxRestarts");
            if max < 0 {
                errs.push(FieldError::invalid(&path, &json!(max), "must be greater than or equal to 0"));
            }
            // An `...AndIgnoreMaxRestarts` rule spends no budget, a failing one restarts nothing.
            if !matches!(rule.action, A::RestartJobSet | A::RestartJob | A::RestartReplicatedJob) {
                errs.push(FieldError::forbidden(
                    &path,
                    format!(
                        "may not be set for action {}: only RestartJobSet, RestartJob and RestartReplicatedJob rules have a restart budget",
                        rule.action.as_str()
                    ),
                ));
            }
        }
        for target in &rule.target_replicated_jobs {
            if !rjob_names.contains(target.as_str()) {
                errs.push(plain(format!(
                    "invalid replicatedJob name '{target}' in failure policy does not appear in .spec.ReplicatedJobs"
                )));
            }
        }
        for reason in &rule.on_job_failure_reasons {
            if !keys::JOB_FAILURE_REASONS.contains(&reason.as_str()) && !user_reasons.contains(reason.as_str()) {
                errs.push(plain(format!(
                    "invalid job failure reason '{reason}' in failure policy is not a recognized job failure reason"
                )));
            }
        }
    }
    // Upstream walks a Go map (random order); first-occurrence order here.
    for (name, indices) in by_name.iter().filter(|(_, idx)| idx.len() > 1) {
        let list: Vec<String> = indices.iter().map(usize::to_string).collect();
        errs.push(plain(format!(
            "rule names are not unique, rules with indices [{}] all have the same name '{name}'",
            list.join(" ")
        )));
    }
}

/// `validateCoordinator`: the first problem only.
fn coordinator_error(spec: &JobSetSpec) -> Option<String> {
    let c = spec.coordinator.as_ref()?;
    let Some(rjob) = spec.replicated_jobs.iter().find(|r| r.name == c.replicated_job) else {
        return Some(format!("coordinator replicatedJob {} does not exist", c.replicated_job));
    };
    if c.job_index < 0 || c.job_index >= rjob.replicas {
        return Some(format!("coordinator job index {} is invalid for replicatedJob {}", c.job_index, rjob.name));
    }
    let Some(completions) = rjob.template.completions().filter(|_| rjob.template.is_indexed()) else {
        return Some(
            "job for coordinator pod must be indexed completion mode, and completions number must be set".into(),
        );
    };
    if c.pod_index < 0 || c.pod_index >= completions {
        return Some(format!(
            "coordinator pod index {} is invalid for replicatedJob {} job index {}",
            c.pod_index, c.replicated_job, c.job_index
        ));
    }
    None
}

/// `validateVolumeClaimPolicies`. An existing claim `<template>-<jobset>` is reused only with the
/// `Retain` policy and a matching spec; "matching" here means every field the template's spec sets
/// has the existing claim's value (upstream compares the whole spec, which fields the cluster fills
/// in, like `volumeName` once bound, make unequal).
fn validate_volume_claim_policies(
    obj: &Value,
    spec: &JobSetSpec,
    js_name: &str,
    claim: &ClaimLookup,
    errs: &mut Vec<FieldError>,
) {
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let mut claim_names: BTreeSet<String> = BTreeSet::new();
    for (i, policy) in spec.volume_claim_policies.iter().enumerate() {
        for (j, template) in policy.templates.iter().enumerate() {
            let path = format!("spec.volumeClaimPolicies[{i}].template[{j}].name");
            let name = template.metadata.name.clone().unwrap_or_default();
            if claim_names.contains(&name) {
                errs.push(FieldError::invalid(
                    &path,
                    &json!(name),
                    "names must be unique for VolumeClaimPolicies template",
                ));
            }
            for msg in dns1123_subdomain_errors(&name) {
                errs.push(FieldError::invalid(&path, &json!(name), msg));
            }
            if format!("{name}-{js_name}").len() > MAX_VOLUME_CLAIM_LENGTH {
                errs.push(FieldError::invalid(&path, &json!(name), "VolumeClaimPolicies template name is too long"));
            }
            validate_replicated_jobs_volume_claims(obj, spec, &name, errs);
            let pvc = format!("{name}-{js_name}");
            if let Some(existing) = claim(ns, &pvc) {
                let path = format!("spec.volumeClaimPolicies[{i}].template[{j}]");
                let wanted = serde_json::to_value(&template.spec).unwrap_or_default();
                if !subset(&wanted, existing.get("spec").unwrap_or(&Value::Null)) {
                    let detail = format!("spec does not match existing PVC {pvc} in namespace {ns}");
                    errs.push(FieldError::invalid(&path, &json!(name), detail));
                }
                let retain = policy.retention_policy.as_ref().and_then(|r| r.when_deleted)
                    == Some(super::RetentionPolicyAction::Retain);
                if !retain {
                    errs.push(FieldError::invalid(
                        &path,
                        &json!(name),
                        "retentionPolicy must be retain when PVC exists",
                    ));
                }
            }
            claim_names.insert(name);
        }
    }
}

/// Whether every field set in `a` has the same value in `b` (objects recursively; `null`/absent
/// fields of `a` are unset).
fn subset(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, _) => true,
        (Value::Object(a), Value::Object(b)) => a.iter().all(|(k, v)| subset(v, b.get(k).unwrap_or(&Value::Null))),
        (Value::Object(a), Value::Null) => a.values().all(Value::is_null),
        (a, b) => a == b,
    }
}

fn validate_replicated_jobs_volume_claims(obj: &Value, spec: &JobSetSpec, claim: &str, errs: &mut Vec<FieldError>) {
    let mut has_mount = false;
    for (r, rjob) in spec.replicated_jobs.iter().enumerate() {
        let pod = pod_spec(rjob);
        for (v, volume) in items(pod, "volumes").iter().enumerate() {
            if volume.get("name").and_then(Value::as_str) == Some(claim) {
                errs.push(FieldError::invalid(
                    format!("spec.replicatedJobs[{r}].template.spec.template.spec.volumes[{v}].name"),
                    &json!(claim),
                    format!("volume name conflicts with VolumeClaimPolicy template name: {claim}"),
                ));
            }
        }
        has_mount = has_mount
            || items(pod, "initContainers")
                .iter()
                .chain(items(pod, "containers"))
                .flat_map(|c| items(Some(c), "volumeMounts"))
                .any(|m| m.get("name").and_then(Value::as_str) == Some(claim));
    }
    if !has_mount {
        let rjobs = obj.pointer("/spec/replicatedJobs").cloned().unwrap_or(Value::Null);
        errs.push(FieldError::invalid(
            "spec.replicatedJobs",
            &rjobs,
            format!("replicatedJob containers don't have a matching volumeMount: {claim} from VolumeClaimPolicies"),
        ));
    }
}

/// `ValidateUpdate`.
fn validate_update(
    obj: &Value,
    spec: &JobSetSpec,
    old: &Value,
    old_spec: &JobSetSpec,
    features: &Features,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(active_deadline_gate(spec, Some(old_spec), features));
    let old_by_name: HashMap<&str, &ReplicatedJob> =
        old_spec.replicated_jobs.iter().map(|r| (r.name.as_str(), r)).collect();
    let old_raw: HashMap<&str, &Value> = old
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| Some((r.get("name")?.as_str()?, r)))
        .collect();
    let mut munged: Vec<Value> =
        obj.pointer("/spec/replicatedJobs").and_then(Value::as_array).cloned().unwrap_or_default();

    if features.elastic_jobset {
        let terminal = old.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|conds| {
            conds.iter().any(|c| {
                let t = c.get("type").and_then(Value::as_str);
                (t == Some(keys::COND_COMPLETED) || t == Some(keys::COND_FAILED))
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        });
        for (i, rjob) in spec.replicated_jobs.iter().enumerate() {
            let Some(prev) = old_by_name.get(rjob.name.as_str()) else { continue };
            if !rjob.template.is_indexed() {
                continue;
            }
            let path = format!("spec.replicatedJobs[{i}].template.spec");
            let (parallelism, completions) = (rjob.template.parallelism(), rjob.template.completions());
            let parallelism_changed = parallelism != prev.template.parallelism();
            let completions_changed = completions != prev.template.completions();
            if parallelism_changed || completions_changed {
                if terminal {
                    errs.push(FieldError::forbidden(
                        &path,
                        "Cannot mutate parallelism or completions when JobSet is in a terminal state (Completed or Failed)",
                    ));
                } else {
                    if let Some(p) = parallelism.filter(|p| parallelism_changed && *p < 1) {
                        errs.push(FieldError::invalid(
                            format!("{path}.parallelism"),
                            &json!(p),
                            "parallelism must be >= 1",
                        ));
                    }
                    if let Some(c) = completions.filter(|c| completions_changed && *c < 1) {
                        errs.push(FieldError::invalid(
                            format!("{path}.completions"),
                            &json!(c),
                            "completions must be >= 1",
                        ));
                    }
                    if let (Some(p), Some(c)) = (parallelism, completions)
                        && p != c
                    {
                        errs.push(FieldError::invalid(
                            format!("{path}.completions"),
                            &json!(c),
                            "completions must be equal to parallelism for Elastic Indexed Jobs",
                        ));
                    }
                }
            }
            if let (Some(m), Some(prev_raw)) = (munged.get_mut(i), old_raw.get(rjob.name.as_str())) {
                for key in ["parallelism", "completions"] {
                    copy_from(m, prev_raw, &["template", "spec", key]);
                }
            }
        }
    }

    if spec.suspend == Some(true) || old_spec.suspend == Some(true) {
        for (i, rjob) in spec.replicated_jobs.iter().enumerate() {
            let (Some(m), Some(prev_raw)) = (munged.get_mut(i), old_raw.get(rjob.name.as_str())) else { continue };
            for p in [
                &["template", "spec", "template", "metadata", "annotations"][..],
                &["template", "spec", "template", "metadata", "labels"],
                &["template", "spec", "template", "spec", "nodeSelector"],
                &["template", "spec", "template", "spec", "tolerations"],
                &["template", "spec", "template", "spec", "schedulingGates"],
            ] {
                copy_from(m, prev_raw, p);
            }
            if features.mutable_pod_resources {
                munge_container_resources(m, prev_raw);
            }
        }
    }

    let old_rjobs = old.pointer("/spec/replicatedJobs").cloned().unwrap_or(Value::Null);
    let munged = Value::Array(munged);
    if normalize(&munged) != normalize(&old_rjobs) {
        errs.push(FieldError::invalid("spec.replicatedJobs", &munged, IMMUTABLE));
    }
    if spec.managed_by != old_spec.managed_by {
        errs.push(FieldError::invalid_rendered("spec.managedBy", render_opt(spec.managed_by.clone()), IMMUTABLE));
    }
    errs
}

/// KEP-1150's `mungeContainerResources`: each container and init container of the replicated job
/// `target` takes the `resources.requests` and `resources.limits` of the container of the same
/// name in `source`, so that only those may differ; `resources.claims`, a container added or
/// removed and every other field still count as changes.
fn munge_container_resources(target: &mut Value, source: &Value) {
    for key in ["containers", "initContainers"] {
        let path = ["template", "spec", "template", "spec", key];
        let Some(old) = path.iter().try_fold(source, |v, k| v.get(*k)).and_then(Value::as_array) else { continue };
        let Some(new) = path.iter().try_fold(&mut *target, |v, k| v.get_mut(*k)).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in new {
            let name = c.get("name").cloned();
            if let Some(o) = old.iter().find(|o| o.get("name") == name.as_ref()) {
                for field in ["requests", "limits"] {
                    copy_from(c, o, &["resources", field]);
                }
            }
        }
    }
}

/// Sets `path` in `target` to its value in `source`, or removes it when `source` lacks it.
fn copy_from(target: &mut Value, source: &Value, path: &[&str]) {
    let value = path.iter().try_fold(source, |v, k| v.get(*k)).cloned();
    let (last, parents) = path.split_last().expect("non-empty path");
    let mut cur = target;
    for key in parents {
        let Some(m) = cur.as_object_mut() else { return };
        if value.is_none() && !m.contains_key(*key) {
            return;
        }
        cur = m.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    }
    let Some(m) = cur.as_object_mut() else { return };
    match value {
        Some(v) => m.insert(last.to_string(), v),
        None => m.remove(*last),
    };
}

/// Semantic equality as apimachinery's `Semantic.DeepEqual` sees typed objects: absent, null,
/// empty lists and empty maps are all the same.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).filter(|(_, v)| !is_empty(v)).collect())
        }
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::go_json;
    use crate::jobset::defaults::default_jobset;

    const DNS1035: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    const DNS1123: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    /// An upstream-style JobSet (leader + workers, a FailJobSet rule, a targeted success policy),
    /// defaulted as admission defaults it.
    fn base() -> Value {
        let mut v = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "default"},
            "spec": {
                "replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": {
                        "parallelism": 1, "completions": 1, "backoffLimit": 0,
                        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}},
                    {"name": "workers", "replicas": 2, "template": {"spec": {
                        "parallelism": 2, "completions": 2,
                        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}},
                ],
                "failurePolicy": {"maxRestarts": 3, "rules": [{"name": "failFast", "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"], "targetReplicatedJobs": ["leader"]}]},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["workers"]},
            },
        });
        default_jobset(&mut v);
        v
    }

    /// Sets the value at a JSON pointer, creating missing objects on the way.
    fn set(v: &mut Value, pointer: &str, value: Value) {
        let mut cur = v;
        let segs: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        let (last, parents) = segs.split_last().unwrap();
        for s in parents {
            cur = match cur {
                Value::Array(a) => &mut a[s.parse::<usize>().unwrap()],
                Value::Object(m) => m.entry(s.to_string()).or_insert_with(|| json!({})),
                _ => panic!("{pointer}"),
            };
        }
        match cur {
            Value::Array(a) => a[last.parse::<usize>().unwrap()] = value,
            Value::Object(m) => {
                m.insert(last.to_string(), value);
            }
            _ => panic!("{pointer}"),
        }
    }

    fn remove(v: &mut Value, pointer: &str) {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        v.pointer_mut(parent).unwrap().as_object_mut().unwrap().remove(key);
    }

    fn rendered(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn all_on() -> Features {
        Features::default()
    }

    struct Case {
        name: &'static str,
        mutate: fn(&mut Value),
        want: Vec<String>,
    }

    fn case(name: &'static str, mutate: fn(&mut Value), want: &[&str]) -> Case {
        Case { name, mutate, want: want.iter().map(|s| s.to_string()).collect() }
    }

    /// `{rjobs}` in a wanted message stands for Go's JSON of the object's `spec.replicatedJobs`.
    fn expand(want: &[String], obj: &Value) -> Vec<String> {
        let rjobs = go_json(&obj["spec"]["replicatedJobs"]);
        want.iter().map(|w| w.replace("{rjobs}", &rjobs)).collect()
    }

    fn run_create(cases: Vec<Case>, features: &Features) {
        for c in cases {
            let mut v = base();
            (c.mutate)(&mut v);
            let got = rendered(validate_jobset(&v, None, features));
            assert_eq!(got, expand(&c.want, &v), "case {}", c.name);
        }
    }

    fn run_update(cases: Vec<Case>, old: fn(&mut Value)) {
        for c in cases {
            let mut before = base();
            old(&mut before);
            let mut after = before.clone();
            (c.mutate)(&mut after);
            let got = rendered(validate_jobset(&after, Some(&before), &all_on()));
            assert_eq!(got, expand(&c.want, &after), "case {}", c.name);
        }
    }

    fn no_change(_: &mut Value) {}

    #[test]
    fn a_valid_upstream_style_jobset_passes() {
        assert_eq!(rendered(validate_jobset(&base(), None, &all_on())), Vec::<String>::new());
        let mut gated = Features::none();
        assert!(validate_jobset(&base(), None, &gated).is_empty());
        gated.elastic_jobset = true;
        assert!(validate_jobset(&base(), Some(&base()), &gated).is_empty());
    }

    #[test]
    fn the_kep_262_hpc_example_passes() {
        let mut v = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "restart-replicated-job-example",
                "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}},
            "spec": {
                "failurePolicy": {"rules": [
                    {"action": "RestartJob", "onJobFailureReasons": ["ExitCode3"]},
                    {"action": "FailJob"},
                ]},
                "replicatedJobs": [{"name": "simulations", "replicas": 10, "template": {"spec": {
                    "parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "podFailurePolicy": {"rules": [{"action": "FailJob",
                        "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]},
                        "setConditionReason": "ExitCode3"}]},
                    "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "python:3.10"}]}},
                }}}],
            },
        });
        default_jobset(&mut v);
        assert_eq!(rendered(validate_jobset(&v, None, &all_on())), Vec::<String>::new());
        // The reason is only recognized because a FailJob podFailurePolicy rule sets it.
        set(&mut v, "/spec/replicatedJobs/0/template/spec/podFailurePolicy/rules/0/action", json!("Ignore"));
        assert_eq!(
            rendered(validate_jobset(&v, None, &all_on())),
            [
                "<nil>: Internal error: invalid job failure reason 'ExitCode3' in failure policy is not a recognized job failure reason"
            ]
        );
    }

    #[test]
    fn webhook_create_checks() {
        let long_subdomain = "a".repeat(64);
        let cases = vec![
            case(
                "depends_on_for_the_first_replicated_job_is_rejected",
                |v| set(v, "/spec/replicatedJobs/0/dependsOn", json!([{"name": "leader", "status": "Ready"}])),
                &["<nil>: Internal error: DependsOn can't be set for the first ReplicatedJob"],
            ),
            case(
                "depending_on_a_later_replicated_job_is_rejected",
                |v| {
                    let mut third = v["spec"]["replicatedJobs"][1].clone();
                    third["name"] = json!("third");
                    v["spec"]["replicatedJobs"].as_array_mut().unwrap().push(third);
                    set(v, "/spec/replicatedJobs/1/dependsOn", json!([{"name": "third", "status": "Complete"}]));
                },
                &["<nil>: Internal error: replicatedJob: workers cannot depend on replicatedJob: third"],
            ),
            Case {
                name: "subdomain_that_is_not_a_dns_name_is_rejected",
                mutate: |v| set(v, "/spec/network/subdomain", json!("Bad_Sub")),
                want: vec![
                    format!("spec.network.subdomain: Invalid value: \"Bad_Sub\": {DNS1123}"),
                    format!("spec.network.subdomain: Invalid value: \"Bad_Sub\": {DNS1035}"),
                ],
            },
            Case {
                name: "subdomain_longer_than_63_is_rejected",
                mutate: |v| set(v, "/spec/network/subdomain", json!("a".repeat(64))),
                want: vec![format!(
                    "spec.network.subdomain: Invalid value: \"{long_subdomain}\": .spec.network.subdomain is too long, must be less than 63 characters"
                )],
            },
            case(
                "managed_by_that_is_not_a_domain_prefixed_path_is_rejected",
                |v| set(v, "/spec/managedBy", json!("nodomain")),
                &[
                    "spec.managedBy: Invalid value: \"nodomain\": must be a domain-prefixed path (such as \"acme.io/foo\")",
                ],
            ),
            case(
                "managed_by_longer_than_63_is_too_long",
                |v| set(v, "/spec/managedBy", json!(format!("example.com/{}", "a".repeat(60)))),
                &["spec.managedBy: Too long: may not be more than 63 bytes"],
            ),
            case(
                "replicas_times_parallelism_beyond_int32_is_rejected",
                |v| set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(2147483647)),
                &[
                    "<nil>: Internal error: the product of replicas and parallelism must not exceed 2147483647 for replicatedJob 'workers'",
                ],
            ),
            Case {
                name: "group_name_that_is_not_a_dns_label_is_rejected",
                mutate: |v| set(v, "/spec/replicatedJobs/0/groupName", json!("Group_1")),
                want: vec![format!("spec.replicatedJobs[0].groupName: Invalid value: \"Group_1\": {DNS1035}")],
            },
            Case {
                name: "group_name_longer_than_63_is_rejected",
                mutate: |v| set(v, "/spec/replicatedJobs/0/groupName", json!("g".repeat(64))),
                want: vec![format!(
                    "spec.replicatedJobs[0].groupName: Invalid value: \"{}\": .spec.replicatedJob[].groupName is too long, must be less than 63 characters",
                    "g".repeat(64)
                )],
            },
            Case {
                name: "replicated_job_name_giving_invalid_job_and_pod_names_is_rejected",
                mutate: |v| {
                    set(v, "/spec/replicatedJobs/1/name", json!("Workers"));
                    set(v, "/spec/successPolicy/targetReplicatedJobs", json!(["Workers"]));
                },
                want: vec![
                    format!("spec.replicatedJobs[1].name: Invalid value: \"js-Workers-1\": {DNS1035}"),
                    format!("spec.replicatedJobs[1].name: Invalid value: \"js-Workers-1\": {DNS1035}"),
                ],
            },
            Case {
                name: "long_jobset_name_gives_too_long_job_and_pod_names",
                mutate: |v| set(v, "/metadata/name", json!("a".repeat(55))),
                want: vec![
                    format!(
                        "spec.replicatedJobs[0].name: Invalid value: \"{}-leader-0\": {JOB_NAME_TOO_LONG}",
                        "a".repeat(55)
                    ),
                    format!(
                        "spec.replicatedJobs[0].name: Invalid value: \"{}-leader-0\": {POD_NAME_TOO_LONG}",
                        "a".repeat(55)
                    ),
                    format!(
                        "spec.replicatedJobs[1].name: Invalid value: \"{}-workers-1\": {JOB_NAME_TOO_LONG}",
                        "a".repeat(55)
                    ),
                    format!(
                        "spec.replicatedJobs[1].name: Invalid value: \"{}-workers-1\": {POD_NAME_TOO_LONG}",
                        "a".repeat(55)
                    ),
                ],
            },
            Case {
                name: "generate_name_plus_five_characters_is_used_for_derived_names",
                mutate: |v| {
                    remove(v, "/metadata/name");
                    set(v, "/metadata/generateName", json!("a".repeat(50)));
                },
                want: vec![
                    format!(
                        "spec.replicatedJobs[0].name: Invalid value: \"{}xxxxx-leader-0\": {JOB_NAME_TOO_LONG}",
                        "a".repeat(50)
                    ),
                    format!(
                        "spec.replicatedJobs[0].name: Invalid value: \"{}xxxxx-leader-0\": {POD_NAME_TOO_LONG}",
                        "a".repeat(50)
                    ),
                    format!(
                        "spec.replicatedJobs[1].name: Invalid value: \"{}xxxxx-workers-1\": {JOB_NAME_TOO_LONG}",
                        "a".repeat(50)
                    ),
                    format!(
                        "spec.replicatedJobs[1].name: Invalid value: \"{}xxxxx-workers-1\": {POD_NAME_TOO_LONG}",
                        "a".repeat(50)
                    ),
                ],
            },
            case(
                "in_place_restart_requires_max_backoff_failed_replacement_and_equal_counts",
                |v| {
                    set(v, "/spec/failurePolicy/restartStrategy", json!("InPlaceRestart"));
                    set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(3));
                },
                &[
                    "spec.replicatedJobs[0].template.spec.backoffLimit: Invalid value: 0: replicatedJob leader: must be set to 2147483647 (MaxInt32) when in-place restart is enabled",
                    "spec.replicatedJobs[0].template.spec.podReplacementPolicy: Invalid value: \"null\": replicatedJob leader: must be set to Failed when in-place restart is enabled",
                    "spec.replicatedJobs[1].template.spec.backoffLimit: Invalid value: \"null\": replicatedJob workers: must be set to 2147483647 (MaxInt32) when in-place restart is enabled",
                    "spec.replicatedJobs[1].template.spec.podReplacementPolicy: Invalid value: \"null\": replicatedJob workers: must be set to Failed when in-place restart is enabled",
                    "spec.replicatedJobs[1].template.spec.completions: Invalid value: 2: replicatedJob workers: completions and parallelism must be set and equal to each other when in-place restart is enabled",
                ],
            ),
            case(
                "in_place_restart_with_the_required_job_settings_passes",
                |v| {
                    set(v, "/spec/failurePolicy/restartStrategy", json!("InPlaceRestart"));
                    for i in 0..2 {
                        set(v, &format!("/spec/replicatedJobs/{i}/template/spec/backoffLimit"), json!(2147483647));
                        set(
                            v,
                            &format!("/spec/replicatedJobs/{i}/template/spec/podReplacementPolicy"),
                            json!("Failed"),
                        );
                    }
                },
                &[],
            ),
            case(
                "success_policy_targeting_an_unknown_replicated_job_is_rejected",
                |v| set(v, "/spec/successPolicy/targetReplicatedJobs", json!(["nope"])),
                &["<nil>: Internal error: invalid replicatedJob name 'nope' does not appear in .spec.ReplicatedJobs"],
            ),
            case(
                "restart_job_with_more_than_1024_replicas_is_rejected",
                |v| {
                    set(v, "/spec/failurePolicy/rules/0/action", json!("RestartJob"));
                    set(v, "/spec/replicatedJobs/1/replicas", json!(1025));
                },
                &[
                    "<nil>: Internal error: JobSet cannot have a failure policy rule with RestartJob or RestartJobAndIgnoreMaxRestarts action and a replicated job with replicas > 1024",
                ],
            ),
            case(
                "restart_replicated_job_with_more_than_1024_replicas_passes",
                |v| {
                    set(v, "/spec/failurePolicy/rules/0/action", json!("RestartReplicatedJob"));
                    set(v, "/spec/replicatedJobs/1/replicas", json!(1025));
                },
                &[],
            ),
            case(
                "extension_actions_are_accepted",
                |v| {
                    set(
                        v,
                        "/spec/failurePolicy/rules",
                        json!([
                            {"name": "a", "action": "RestartReplicatedJob"},
                            {"name": "b", "action": "RestartReplicatedJobAndIgnoreMaxRestarts"},
                            {"name": "c", "action": "RestartJobAndIgnoreMaxRestarts"},
                            {"name": "d", "action": "FailJob"},
                        ]),
                    )
                },
                &[],
            ),
            case(
                "rule_name_longer_than_128_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/name", json!("r".repeat(129))),
                &[
                    "<nil>: Internal error: invalid failure policy rule name of length 129, the rule name must be at least 1 characters long and at most 128 characters long",
                ],
            ),
            case(
                "empty_rule_name_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/name", json!("")),
                &[
                    "<nil>: Internal error: invalid failure policy rule name of length 0, the rule name must be at least 1 characters long and at most 128 characters long",
                    "<nil>: Internal error: invalid failure policy rule name '', a failure policy rule name must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
                ],
            ),
            case(
                "rule_name_not_matching_the_pattern_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/name", json!("1bad-")),
                &[
                    "<nil>: Internal error: invalid failure policy rule name '1bad-', a failure policy rule name must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
                ],
            ),
            case(
                "rule_targeting_an_unknown_replicated_job_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/targetReplicatedJobs", json!(["ghost"])),
                &[
                    "<nil>: Internal error: invalid replicatedJob name 'ghost' in failure policy does not appear in .spec.ReplicatedJobs",
                ],
            ),
            case(
                "unrecognized_job_failure_reason_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/onJobFailureReasons", json!(["PodFailurePolicy", "OOM"])),
                &[
                    "<nil>: Internal error: invalid job failure reason 'OOM' in failure policy is not a recognized job failure reason",
                ],
            ),
            case(
                "duplicate_rule_names_are_rejected",
                |v| {
                    set(
                        v,
                        "/spec/failurePolicy/rules",
                        json!([
                            {"name": "dup", "action": "FailJobSet"}, {"name": "ok", "action": "FailJob"},
                            {"name": "dup", "action": "RestartJobSet"},
                        ]),
                    )
                },
                &[
                    "<nil>: Internal error: rule names are not unique, rules with indices [0 2] all have the same name 'dup'",
                ],
            ),
            case(
                "coordinator_naming_an_unknown_replicated_job_is_rejected",
                |v| set(v, "/spec/coordinator", json!({"replicatedJob": "ghost"})),
                &["<nil>: Internal error: coordinator replicatedJob ghost does not exist"],
            ),
            case(
                "coordinator_job_index_out_of_range_is_rejected",
                |v| set(v, "/spec/coordinator", json!({"replicatedJob": "workers", "jobIndex": 2})),
                &["<nil>: Internal error: coordinator job index 2 is invalid for replicatedJob workers"],
            ),
            case(
                "coordinator_in_a_non_indexed_job_is_rejected",
                |v| {
                    set(v, "/spec/coordinator", json!({"replicatedJob": "workers"}));
                    set(v, "/spec/replicatedJobs/1/template/spec/completionMode", json!("NonIndexed"));
                },
                &[
                    "<nil>: Internal error: job for coordinator pod must be indexed completion mode, and completions number must be set",
                ],
            ),
            case(
                "coordinator_pod_index_out_of_range_is_rejected",
                |v| set(v, "/spec/coordinator", json!({"replicatedJob": "workers", "jobIndex": 1, "podIndex": 2})),
                &["<nil>: Internal error: coordinator pod index 2 is invalid for replicatedJob workers job index 1"],
            ),
            Case {
                name: "coordinator_endpoint_too_long_for_a_label_is_rejected",
                mutate: |v| {
                    set(v, "/spec/coordinator", json!({"replicatedJob": "leader"}));
                    set(v, "/spec/network/subdomain", json!("s".repeat(60)));
                },
                want: vec![format!(
                    "<nil>: Internal error: spec will lead to invalid label value \"js-leader-0-0.{}\" for coordinator label \"jobset.sigs.k8s.io/coordinator\" (long JobSet / ReplicatedJob / SubDomain name?): must be no more than 63 characters",
                    "s".repeat(60)
                )],
            },
            case(
                "volume_claim_template_without_a_volume_mount_is_rejected",
                |v| set(v, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": "data"}}]}])),
                &[
                    "spec.replicatedJobs: Invalid value: {rjobs}: replicatedJob containers don't have a matching volumeMount: data from VolumeClaimPolicies",
                ],
            ),
            case(
                "volume_claim_template_mounted_somewhere_passes",
                |v| {
                    set(v, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": "data"}}]}]));
                    set(
                        v,
                        "/spec/replicatedJobs/1/template/spec/template/spec/initContainers",
                        json!([{"name": "i", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]),
                    );
                },
                &[],
            ),
            case(
                "duplicate_volume_claim_template_names_are_rejected",
                |v| {
                    set(
                        v,
                        "/spec/volumeClaimPolicies",
                        json!([{"templates": [{"metadata": {"name": "data"}}]},
                        {"templates": [{"metadata": {"name": "data"}}]}]),
                    );
                    set(
                        v,
                        "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
                        json!([{"name": "data", "mountPath": "/d"}]),
                    );
                },
                &[
                    "spec.volumeClaimPolicies[1].template[0].name: Invalid value: \"data\": names must be unique for VolumeClaimPolicies template",
                ],
            ),
            Case {
                name: "volume_claim_template_name_that_is_not_a_subdomain_is_rejected",
                mutate: |v| {
                    set(v, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": "Data_1"}}]}]));
                    set(
                        v,
                        "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
                        json!([{"name": "Data_1", "mountPath": "/d"}]),
                    );
                },
                want: vec![format!(
                    "spec.volumeClaimPolicies[0].template[0].name: Invalid value: \"Data_1\": {DNS1123}"
                )],
            },
            Case {
                name: "volume_claim_template_name_giving_a_too_long_pvc_name_is_rejected",
                mutate: |v| {
                    let name = "d".repeat(61);
                    set(v, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": name}}]}]));
                    set(
                        v,
                        "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
                        json!([{"name": name, "mountPath": "/d"}]),
                    );
                },
                want: vec![format!(
                    "spec.volumeClaimPolicies[0].template[0].name: Invalid value: \"{}\": VolumeClaimPolicies template name is too long",
                    "d".repeat(61)
                )],
            },
            case(
                "pod_volume_named_like_a_volume_claim_template_is_rejected",
                |v| {
                    set(v, "/spec/volumeClaimPolicies", json!([{"templates": [{"metadata": {"name": "data"}}]}]));
                    set(
                        v,
                        "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
                        json!([{"name": "data", "mountPath": "/d"}]),
                    );
                    set(
                        v,
                        "/spec/replicatedJobs/1/template/spec/template/spec/volumes",
                        json!([{"name": "data", "emptyDir": {}}]),
                    );
                },
                &[
                    "spec.replicatedJobs[1].template.spec.template.spec.volumes[0].name: Invalid value: \"data\": volume name conflicts with VolumeClaimPolicy template name: data",
                ],
            ),
        ];
        run_create(cases, &all_on());
    }

    #[test]
    fn a_rule_restart_budget_is_non_negative_and_only_for_counted_restart_actions() {
        let budget = |action: &str, max: i64| json!({"maxRestarts": 3, "rules": [{"name": "infra", "action": action, "maxRestarts": max}]});
        let forbidden = |action: &str| {
            format!(
                "spec.failurePolicy.rules[0].maxRestarts: Forbidden: may not be set for action {action}: only RestartJobSet, RestartJob and RestartReplicatedJob rules have a restart budget"
            )
        };
        // (case, failurePolicy, errors)
        let cases: Vec<(&str, Value, Vec<String>)> = vec![
            ("a RestartJobSet budget", budget("RestartJobSet", 100), vec![]),
            ("a RestartJob budget", budget("RestartJob", 2), vec![]),
            ("a RestartReplicatedJob budget of 0", budget("RestartReplicatedJob", 0), vec![]),
            (
                "a negative budget names the field",
                budget("RestartJobSet", -1),
                vec![
                    "spec.failurePolicy.rules[0].maxRestarts: Invalid value: -1: must be greater than or equal to 0"
                        .into(),
                ],
            ),
            (
                "an ignoring action spends no budget",
                budget("RestartJobSetAndIgnoreMaxRestarts", 5),
                vec![forbidden("RestartJobSetAndIgnoreMaxRestarts")],
            ),
            ("FailJobSet restarts nothing", budget("FailJobSet", 5), vec![forbidden("FailJobSet")]),
            ("FailJob restarts nothing", budget("FailJob", 5), vec![forbidden("FailJob")]),
        ];
        for (case, policy, want) in cases {
            let mut v = base();
            set(&mut v, "/spec/failurePolicy", policy);
            assert_eq!(rendered(validate_jobset(&v, None, &all_on())), want, "{case}");
        }
    }

    #[test]
    fn kep_1186_active_deadline_seconds_may_not_be_set_or_changed_with_its_gate_off() {
        let with = |v: Option<i64>| {
            let mut o = base();
            if let Some(v) = v {
                o["spec"]["activeDeadlineSeconds"] = json!(v);
            }
            o
        };
        let off = Features { active_deadline: false, ..Features::default() };
        let err = "spec.activeDeadlineSeconds: Forbidden: may not be set when the JobSetActiveDeadlineSeconds feature gate is disabled";
        // (case, old, new, gate on, errors)
        type Case<'a> = (&'a str, Option<Option<i64>>, Option<i64>, bool, &'a [&'a str]);
        let cases: [Case; 7] = [
            ("created with the gate on", None, Some(60), true, &[]),
            ("created with the gate off", None, Some(60), false, &[err]),
            ("changed with the gate on (mutable)", Some(Some(60)), Some(5), true, &[]),
            ("added with the gate off", Some(None), Some(60), false, &[err]),
            ("changed with the gate off", Some(Some(60)), Some(5), false, &[err]),
            ("unchanged with the gate off", Some(Some(60)), Some(60), false, &[]),
            ("cleared with the gate off", Some(Some(60)), None, false, &[]),
        ];
        for (case, old, new, gate, want) in cases {
            let features = if gate { Features::default() } else { off.clone() };
            let old = old.map(with);
            assert_eq!(rendered(validate_jobset(&with(new), old.as_ref(), &features)), want, "{case}");
        }
    }

    #[test]
    fn gated_features_are_rejected_when_their_gate_is_off() {
        let off = Features::none();
        let gate = "<nil>: Internal error: RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when RestartJob feature gate is disabled";
        let cases = vec![
            case(
                "in_place_restart_with_the_gate_off_is_rejected",
                |v| set(v, "/spec/failurePolicy/restartStrategy", json!("InPlaceRestart")),
                &[
                    "<nil>: Internal error: InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled",
                ],
            ),
            case(
                "restart_job_with_the_gate_off_is_rejected_and_stops_failure_policy_checks",
                |v| {
                    set(v, "/spec/failurePolicy/rules/0/action", json!("RestartJobAndIgnoreMaxRestarts"));
                    set(v, "/spec/failurePolicy/rules/0/targetReplicatedJobs", json!(["ghost"]));
                },
                &[gate],
            ),
            case(
                "restart_replicated_job_with_the_gate_off_is_rejected",
                |v| set(v, "/spec/failurePolicy/rules/0/action", json!("RestartReplicatedJob")),
                &[gate],
            ),
            case("fail_job_needs_no_gate", |v| set(v, "/spec/failurePolicy/rules/0/action", json!("FailJob")), &[]),
        ];
        run_create(cases, &off);
    }

    #[test]
    fn update_immutability() {
        let cases = vec![
            case("unchanged_jobset_passes", no_change, &[]),
            case(
                "suspend_and_metadata_are_mutable",
                |v| {
                    set(v, "/spec/suspend", json!(true));
                    set(v, "/metadata/labels", json!({"a": "b"}));
                },
                &[],
            ),
            case(
                "changing_replicas_is_rejected",
                |v| set(v, "/spec/replicatedJobs/1/replicas", json!(3)),
                &["spec.replicatedJobs: Invalid value: {rjobs}: field is immutable"],
            ),
            case(
                "changing_an_unknown_template_field_is_rejected",
                |v| set(v, "/spec/replicatedJobs/0/template/spec/futureField", json!("x")),
                &["spec.replicatedJobs: Invalid value: {rjobs}: field is immutable"],
            ),
            case(
                "changing_the_pod_template_of_a_running_jobset_is_rejected",
                |v| set(v, "/spec/replicatedJobs/0/template/spec/template/spec/nodeSelector", json!({"a": "b"})),
                &["spec.replicatedJobs: Invalid value: {rjobs}: field is immutable"],
            ),
            case(
                "setting_managed_by_is_rejected",
                |v| set(v, "/spec/managedBy", json!("example.com/foo")),
                &["spec.managedBy: Invalid value: \"example.com/foo\": field is immutable"],
            ),
            // `Value is immutable` is the CRD's CEL rule, which the API server checks.
            case(
                "changing_the_failure_policy_is_left_to_the_crd",
                |v| set(v, "/spec/failurePolicy/maxRestarts", json!(4)),
                &[],
            ),
        ];
        run_update(cases, no_change);
    }

    #[test]
    fn a_spec_the_api_server_would_not_have_let_through_gets_one_internal_error() {
        let mut v = base();
        set(&mut v, "/spec/replicatedJobs/0/replicas", json!("two"));
        let errs = rendered(validate_jobset(&v, None, &all_on()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("<nil>: Internal error: invalid type: string \"two\""), "{errs:?}");
        assert_eq!(rendered(validate_jobset(&v, Some(&base()), &all_on())), errs, "on update too");
        // A stored object that does not decode is not compared.
        assert_eq!(rendered(validate_jobset(&base(), Some(&v), &all_on())), Vec::<String>::new());
    }

    #[test]
    fn kep_1150_container_resources_are_mutable_only_while_suspended() {
        const C: &str = "/spec/replicatedJobs/1/template/spec/template/spec/containers/0";
        const IMMUTABLE: &str = "spec.replicatedJobs: field is immutable";
        let with = |suspend: bool, resources: Value| -> Value {
            let mut v = base();
            set(&mut v, "/spec/suspend", json!(suspend));
            set(&mut v, &format!("{C}/resources"), resources);
            set(
                &mut v,
                "/spec/replicatedJobs/1/template/spec/template/spec/initContainers",
                json!([{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]),
            );
            v
        };
        let old = json!({"requests": {"cpu": "4", "nvidia.com/gpu": "1"}, "claims": [{"name": "gpu"}]});
        let right_sized = json!({"requests": {"cpu": "2", "nvidia.com/gpu": "1"}, "limits": {"cpu": "2"}, "claims": [{"name": "gpu"}]});
        /// (case, old suspended, new suspended, new resources, edit, gate on, errors)
        type Case<'a> = (&'a str, bool, bool, Value, fn(&mut Value), bool, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (
                "the KEP's story: requests and limits of a suspended JobSet",
                true,
                true,
                right_sized.clone(),
                |_| {},
                true,
                &[],
            ),
            (
                "an init container's",
                true,
                true,
                old.clone(),
                |v| {
                    set(
                        v,
                        "/spec/replicatedJobs/1/template/spec/template/spec/initContainers/0/resources/requests/cpu",
                        json!("2"),
                    )
                },
                true,
                &[],
            ),
            ("resized and resumed in one update", true, false, right_sized.clone(), |_| {}, true, &[]),
            (
                "a running JobSet keeps upstream's message",
                false,
                false,
                right_sized.clone(),
                |_| {},
                true,
                &[IMMUTABLE],
            ),
            ("the gate off", true, true, right_sized.clone(), |_| {}, false, &[IMMUTABLE]),
            (
                "claims stay immutable",
                true,
                true,
                json!({"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}),
                |_| {},
                true,
                &[IMMUTABLE],
            ),
            (
                "another container field stays immutable",
                true,
                true,
                right_sized.clone(),
                |v| set(v, &format!("{C}/image"), json!("other")),
                true,
                &[IMMUTABLE],
            ),
            (
                "an added container is a change",
                true,
                true,
                old.clone(),
                |v| {
                    let c = v.pointer(C).unwrap().clone();
                    let list = v.pointer_mut("/spec/replicatedJobs/1/template/spec/template/spec/containers").unwrap();
                    list.as_array_mut()
                        .unwrap()
                        .push(json!({"name": "extra", "image": "busybox", "resources": c["resources"]}));
                },
                true,
                &[IMMUTABLE],
            ),
        ];
        for (case, old_suspended, new_suspended, resources, edit, gate, want) in cases {
            let before = with(old_suspended, old.clone());
            let mut after = with(new_suspended, resources);
            edit(&mut after);
            let features = Features { mutable_pod_resources: gate, ..Features::default() };
            // The value shown is the masked copy, as upstream's: only the field and message count.
            let got: Vec<String> = rendered(validate_jobset(&after, Some(&before), &features))
                .iter()
                .map(|e| {
                    e.split_once(": Invalid value: ")
                        .map_or(e.clone(), |(f, v)| format!("{f}: {}", &v[v.rfind(": ").unwrap() + 2..]))
                })
                .collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn update_of_the_template_of_a_suspended_jobset() {
        let masked = |v: &mut Value| {
            let t = "/spec/replicatedJobs/0/template/spec/template";
            set(v, &format!("{t}/metadata/labels"), json!({"kueue": "yes"}));
            set(v, &format!("{t}/metadata/annotations"), json!({"a": "b"}));
            set(v, &format!("{t}/spec/nodeSelector"), json!({"pool": "x"}));
            set(v, &format!("{t}/spec/tolerations"), json!([{"key": "k", "operator": "Exists"}]));
            set(v, &format!("{t}/spec/schedulingGates"), json!([{"name": "g"}]));
        };
        let cases = vec![
            case(
                "scheduling_fields_of_a_suspended_jobset_are_mutable",
                |v| {
                    let t = "/spec/replicatedJobs/0/template/spec/template";
                    set(v, &format!("{t}/metadata/labels"), json!({"kueue": "yes"}));
                    set(v, &format!("{t}/metadata/annotations"), json!({"a": "b"}));
                    set(v, &format!("{t}/spec/nodeSelector"), json!({"pool": "x"}));
                    set(v, &format!("{t}/spec/tolerations"), json!([{"key": "k", "operator": "Exists"}]));
                    set(v, &format!("{t}/spec/schedulingGates"), json!([{"name": "g"}]));
                },
                &[],
            ),
            case(
                "resuming_with_scheduling_changes_is_allowed",
                |v| {
                    set(v, "/spec/suspend", json!(false));
                    set(v, "/spec/replicatedJobs/1/template/spec/template/spec/nodeSelector", json!({"pool": "y"}));
                },
                &[],
            ),
            case(
                "other_pod_fields_of_a_suspended_jobset_stay_immutable",
                |v| set(v, "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image", json!("other")),
                &["spec.replicatedJobs: Invalid value: {rjobs}: field is immutable"],
            ),
        ];
        run_update(cases, |v| set(v, "/spec/suspend", json!(true)));
        // Removing what a suspended JobSet had set is allowed too.
        let mut before = base();
        set(&mut before, "/spec/suspend", json!(true));
        masked(&mut before);
        let mut after = base();
        set(&mut after, "/spec/suspend", json!(true));
        assert!(validate_jobset(&after, Some(&before), &all_on()).is_empty());
    }

    #[test]
    fn elastic_parallelism_and_completions_updates() {
        let cases = vec![
            case(
                "scaling_an_indexed_job_with_equal_counts_passes",
                |v| {
                    set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(4));
                    set(v, "/spec/replicatedJobs/1/template/spec/completions", json!(4));
                },
                &[],
            ),
            case(
                "parallelism_different_from_completions_is_rejected",
                |v| set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(3)),
                &[
                    "spec.replicatedJobs[1].template.spec.completions: Invalid value: 2: completions must be equal to parallelism for Elastic Indexed Jobs",
                ],
            ),
            case(
                "scaling_to_zero_is_rejected",
                |v| {
                    set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(0));
                    set(v, "/spec/replicatedJobs/1/template/spec/completions", json!(0));
                },
                &[
                    "spec.replicatedJobs[1].template.spec.parallelism: Invalid value: 0: parallelism must be >= 1",
                    "spec.replicatedJobs[1].template.spec.completions: Invalid value: 0: completions must be >= 1",
                ],
            ),
        ];
        run_update(cases, no_change);

        // A finished JobSet cannot be scaled.
        let cases = vec![case(
            "scaling_a_finished_jobset_is_forbidden",
            |v| {
                set(v, "/spec/replicatedJobs/1/template/spec/parallelism", json!(4));
                set(v, "/spec/replicatedJobs/1/template/spec/completions", json!(4));
            },
            &[
                "spec.replicatedJobs[1].template.spec: Forbidden: Cannot mutate parallelism or completions when JobSet is in a terminal state (Completed or Failed)",
            ],
        )];
        run_update(cases, |v| set(v, "/status", json!({"conditions": [{"type": "Completed", "status": "True"}]})));

        // NonIndexed jobs, and every job with the gate off, keep the counts immutable.
        let mut before = base();
        set(&mut before, "/spec/replicatedJobs/1/template/spec/completionMode", json!("NonIndexed"));
        let mut after = before.clone();
        set(&mut after, "/spec/replicatedJobs/1/template/spec/parallelism", json!(4));
        assert_eq!(
            rendered(validate_jobset(&after, Some(&before), &all_on())),
            [format!(
                "spec.replicatedJobs: Invalid value: {}: field is immutable",
                go_json(&after["spec"]["replicatedJobs"])
            )]
        );
        let before = base();
        let mut after = before.clone();
        set(&mut after, "/spec/replicatedJobs/1/template/spec/parallelism", json!(4));
        set(&mut after, "/spec/replicatedJobs/1/template/spec/completions", json!(4));
        let off = Features { elastic_jobset: false, ..Features::default() };
        assert_eq!(
            rendered(validate_jobset(&after, Some(&before), &off)),
            [format!(
                "spec.replicatedJobs: Invalid value: {}: field is immutable",
                go_json(&after["spec"]["replicatedJobs"])
            )]
        );
    }

    #[test]
    fn an_existing_claim_is_reused_only_when_retained_and_matching() {
        let mut v = base();
        set(
            &mut v,
            "/spec/volumeClaimPolicies",
            json!([{
            "templates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
            "retentionPolicy": {"whenDeleted": "Retain"}}]),
        );
        set(
            &mut v,
            "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/volumeMounts",
            json!([{"name": "data", "mountPath": "/data"}]),
        );
        let existing = |spec: Value| {
            move |ns: &str, name: &str| (ns == "default" && name == "data-js").then(|| json!({"spec": spec.clone()}))
        };
        let matching = existing(json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}));
        assert_eq!(rendered(validate_jobset_in(&v, None, &all_on(), &matching)), Vec::<String>::new());
        let other = existing(json!({"accessModes": ["ReadWriteMany"]}));
        assert_eq!(
            rendered(validate_jobset_in(&v, None, &all_on(), &other)),
            [
                "spec.volumeClaimPolicies[0].template[0]: Invalid value: \"data\": spec does not match existing PVC data-js in namespace default"
            ]
        );
        set(&mut v, "/spec/volumeClaimPolicies/0/retentionPolicy/whenDeleted", json!("Delete"));
        assert_eq!(
            rendered(validate_jobset_in(&v, None, &all_on(), &matching)),
            [
                "spec.volumeClaimPolicies[0].template[0]: Invalid value: \"data\": retentionPolicy must be retain when PVC exists"
            ]
        );
        assert_eq!(rendered(validate_jobset(&v, None, &all_on())), Vec::<String>::new(), "no claim exists");
    }
}
