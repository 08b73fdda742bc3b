//! batch/v1 Job status validation: what kube-apiserver checks on a write to `jobs/status`.
//!
//! Sources: `pkg/registry/batch/job/strategy.go` (`jobStatusStrategy.ValidateUpdate`,
//! `getStatusValidationOptions` with `JobManagedBy` GA) and `pkg/apis/batch/validation/validation.go`
//! (`ValidateJobStatusUpdate`, `validateJobStatus`). Error texts and field paths are upstream's.
//!
//! Most rules ratchet, as upstream's options do: a rule runs only when a status field it reads
//! changes in this write, so a Job whose stored status already breaks a rule can still have its
//! other fields updated, while a write that changes the field must leave the status valid. The
//! non-negative counters, the `uncountedTerminatedPods` UIDs, the terminal conditions that may
//! never be dropped and the `SuccessCriteriaMet` combinations are checked on every write.
//!
//! Not covered here: `ValidateObjectMetaUpdate` (the status path keeps the stored metadata).

use serde_json::Value;

use crate::field::{FieldError, go_json, quote};
use crate::job::{NONNEGATIVE, parse_index_interval, validate_indexes_format};

/// Validates a write to a Job's status subresource: `new` is the stored Job with the written
/// status, `old` the stored Job. Returns every problem, in upstream's order; none admits it.
pub fn validate_job_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let (job, old_job) = (Job::of(new), Job::of(old));
    let opts = Options::new(&job, &old_job);
    let mut errs = Vec::new();
    validate_job_status(&job, &opts, &mut errs);
    validate_job_status_update_rules(&job, &old_job, &opts, &mut errs);
    errs
}

/// A `metav1.Time` as written: its text and, when it parses, the instant.
#[derive(Clone, Copy)]
struct Time<'a> {
    raw: &'a Value,
    at: Option<jiff::Timestamp>,
}

impl<'a> Time<'a> {
    fn of(v: Option<&'a Value>) -> Option<Time<'a>> {
        let raw = v.filter(|v| !v.is_null())?;
        Some(Time { raw, at: raw.as_str().and_then(|s| s.parse().ok()) })
    }

    /// `json.Marshal` of a `metav1.Time`: RFC 3339 in UTC, whole seconds.
    fn render(t: Option<Time<'_>>) -> String {
        match t {
            None => "null".into(),
            Some(Time { at: Some(at), .. }) => quote(&at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            Some(Time { raw, .. }) => go_json(raw),
        }
    }

    /// `ptr.Equal` of two times: the same instant (or the same text, when one does not parse).
    fn equal(a: Option<Time<'_>>, b: Option<Time<'_>>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(Time { at: Some(x), .. }), Some(Time { at: Some(y), .. })) => x == y,
            (Some(x), Some(y)) => x.raw == y.raw,
            _ => false,
        }
    }
}

/// `status.uncountedTerminatedPods`; a list is `None` when absent or null.
struct Uncounted<'a> {
    succeeded: Option<Vec<&'a Value>>,
    failed: Option<Vec<&'a Value>>,
}

impl Uncounted<'_> {
    fn count(&self) -> usize {
        self.succeeded.as_ref().map_or(0, Vec::len) + self.failed.as_ref().map_or(0, Vec::len)
    }

    /// `json.Marshal` of the internal `batch.UncountedTerminatedPods` (Go field names).
    fn render(&self) -> String {
        let list = |l: &Option<Vec<&Value>>| match l {
            None => "null".to_string(),
            Some(items) => format!("[{}]", items.iter().map(|v| go_json(v)).collect::<Vec<_>>().join(",")),
        };
        format!("{{\"Succeeded\":{},\"Failed\":{}}}", list(&self.succeeded), list(&self.failed))
    }

    /// `apiequality.Semantic.DeepEqual`: an empty list equals an absent one.
    fn semantic_eq(a: &Option<Uncounted<'_>>, b: &Option<Uncounted<'_>>) -> bool {
        let eq = |x: &Option<Vec<&Value>>, y: &Option<Vec<&Value>>| {
            x.as_deref().unwrap_or_default() == y.as_deref().unwrap_or_default()
        };
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => eq(&a.succeeded, &b.succeeded) && eq(&a.failed, &b.failed),
            _ => false,
        }
    }
}

/// What the rules read of a Job.
struct Job<'a> {
    // spec
    completions: Option<i64>,
    parallelism: Option<i64>,
    indexed: bool,
    backoff_limit_per_index: bool,
    suspend: bool,
    success_policy: bool,
    // status
    active: i64,
    succeeded: i64,
    failed: i64,
    ready: Option<i64>,
    terminating: Option<i64>,
    conditions: Vec<(&'a str, &'a str)>,
    start_time: Option<Time<'a>>,
    completion_time: Option<Time<'a>>,
    completed_indexes: &'a str,
    failed_indexes: Option<&'a str>,
    uncounted: Option<Uncounted<'a>>,
}

impl<'a> Job<'a> {
    fn of(job: &'a Value) -> Job<'a> {
        let get = |v: Option<&'a Value>, k: &str| v.and_then(|v| v.get(k)).filter(|v| !v.is_null());
        let spec = job.get("spec");
        let status = job.get("status");
        let int = |k: &str| get(status, k).and_then(Value::as_i64);
        let list = |v: Option<&'a Value>, k: &str| get(v, k).and_then(Value::as_array).map(|l| l.iter().collect());
        Job {
            completions: get(spec, "completions").and_then(Value::as_i64),
            parallelism: get(spec, "parallelism").and_then(Value::as_i64),
            indexed: get(spec, "completionMode").and_then(Value::as_str) == Some("Indexed"),
            backoff_limit_per_index: get(spec, "backoffLimitPerIndex").is_some(),
            suspend: get(spec, "suspend").and_then(Value::as_bool) == Some(true),
            success_policy: get(spec, "successPolicy").is_some(),
            active: int("active").unwrap_or(0),
            succeeded: int("succeeded").unwrap_or(0),
            failed: int("failed").unwrap_or(0),
            ready: int("ready"),
            terminating: int("terminating"),
            conditions: get(status, "conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| Some((c.get("type")?.as_str()?, c.get("status")?.as_str()?)))
                .collect(),
            start_time: Time::of(get(status, "startTime")),
            completion_time: Time::of(get(status, "completionTime")),
            completed_indexes: get(status, "completedIndexes").and_then(Value::as_str).unwrap_or_default(),
            failed_indexes: get(status, "failedIndexes").and_then(Value::as_str),
            uncounted: get(status, "uncountedTerminatedPods")
                .map(|u| Uncounted { succeeded: list(Some(u), "succeeded"), failed: list(Some(u), "failed") }),
        }
    }

    /// `IsConditionTrue`.
    fn is_true(&self, type_: &str) -> bool {
        self.conditions.iter().any(|&(t, s)| t == type_ && s == "True")
    }

    /// `IsConditionFalse`.
    fn is_false(&self, type_: &str) -> bool {
        self.conditions.iter().any(|&(t, s)| t == type_ && s == "False")
    }

    fn complete(&self) -> bool {
        self.is_true("Complete")
    }

    fn failed_cond(&self) -> bool {
        self.is_true("Failed")
    }

    fn failure_target(&self) -> bool {
        self.is_true("FailureTarget")
    }

    fn success_criteria_met(&self) -> bool {
        self.is_true("SuccessCriteriaMet")
    }

    /// `IsJobFinished`.
    fn finished(&self) -> bool {
        self.complete() || self.failed_cond()
    }
}

/// `JobStatusValidationOptions` as `getStatusValidationOptions` computes them (`JobManagedBy` GA).
struct Options {
    reject_decreasing_succeeded_counter: bool,
    reject_decreasing_failed_counter: bool,
    reject_disabling_terminal_condition: bool,
    reject_invalid_completed_indexes: bool,
    reject_invalid_failed_indexes: bool,
    reject_completed_indexes_for_non_indexed_job: bool,
    reject_failed_indexes_for_no_backoff_limit_per_index: bool,
    reject_failed_indexes_overlapping_completed: bool,
    reject_failed_job_without_failure_target: bool,
    reject_complete_job_without_success_criteria_met: bool,
    reject_finished_job_with_active_pods: bool,
    reject_finished_job_without_start_time: bool,
    reject_finished_job_with_uncounted_terminated_pods: bool,
    reject_start_time_update_for_unsuspended_job: bool,
    reject_completion_time_before_start_time: bool,
    reject_mutating_completion_time: bool,
    reject_not_complete_job_with_completion_time: bool,
    reject_complete_job_without_completion_time: bool,
    reject_complete_job_with_failed_condition: bool,
    reject_complete_job_with_failure_target_condition: bool,
    reject_more_ready_than_active_pods: bool,
    reject_finished_job_with_terminating_pods: bool,
}

impl Options {
    fn new(new: &Job<'_>, old: &Job<'_>) -> Options {
        let finished_changed = old.finished() != new.finished();
        let complete_changed = old.complete() != new.complete();
        let failed_changed = old.failed_cond() != new.failed_cond();
        let failure_target_changed = old.failure_target() != new.failure_target();
        let success_criteria_met_changed = old.success_criteria_met() != new.success_criteria_met();
        let completed_indexes_changed = old.completed_indexes != new.completed_indexes;
        let failed_indexes_changed = old.failed_indexes != new.failed_indexes;
        let active_changed = old.active != new.active;
        let start_time_changed = !Time::equal(old.start_time, new.start_time);
        let completion_time_changed = !Time::equal(old.completion_time, new.completion_time);
        let uncounted_changed = !Uncounted::semantic_eq(&old.uncounted, &new.uncounted);
        let ready_changed = old.ready != new.ready;
        let terminating_changed = old.terminating != new.terminating;
        let suspended_with_zero_completions = new.suspend && new.completions == Some(0);
        // A resume: the Job controller sets a new startTime as it flips Suspended to False.
        let resuming = old.is_true("Suspended") && new.is_false("Suspended");
        Options {
            // An Indexed Job with completions equal to parallelism may be scaled down.
            reject_decreasing_succeeded_counter: !new.indexed || new.completions != new.parallelism,
            reject_decreasing_failed_counter: true,
            reject_disabling_terminal_condition: true,
            reject_invalid_completed_indexes: completed_indexes_changed,
            reject_invalid_failed_indexes: failed_indexes_changed,
            reject_completed_indexes_for_non_indexed_job: completed_indexes_changed,
            reject_failed_indexes_for_no_backoff_limit_per_index: failed_indexes_changed,
            reject_failed_indexes_overlapping_completed: failed_indexes_changed || completed_indexes_changed,
            // Upstream's own condition: a change of Failed or of failedIndexes (not of FailureTarget).
            reject_failed_job_without_failure_target: failed_changed || failed_indexes_changed,
            reject_complete_job_without_success_criteria_met: complete_changed || success_criteria_met_changed,
            reject_finished_job_with_active_pods: finished_changed || active_changed,
            reject_finished_job_without_start_time: (finished_changed || start_time_changed)
                && !suspended_with_zero_completions,
            reject_finished_job_with_uncounted_terminated_pods: finished_changed || uncounted_changed,
            reject_start_time_update_for_unsuspended_job: start_time_changed && !resuming,
            reject_completion_time_before_start_time: start_time_changed || completion_time_changed,
            reject_mutating_completion_time: true,
            reject_not_complete_job_with_completion_time: complete_changed || completion_time_changed,
            reject_complete_job_without_completion_time: complete_changed || completion_time_changed,
            reject_complete_job_with_failed_condition: complete_changed || failed_changed,
            reject_complete_job_with_failure_target_condition: complete_changed || failure_target_changed,
            reject_more_ready_than_active_pods: ready_changed || active_changed,
            reject_finished_job_with_terminating_pods: finished_changed || terminating_changed,
        }
    }
}

const CONDITIONS: &str = "status.conditions";

/// `validateJobStatus`.
fn validate_job_status(job: &Job<'_>, opts: &Options, errs: &mut Vec<FieldError>) {
    let nonnegative = |path: &str, v: i64, errs: &mut Vec<FieldError>| {
        if v < 0 {
            errs.push(FieldError::invalid(path, &v.into(), NONNEGATIVE));
        }
    };
    nonnegative("status.active", job.active, errs);
    nonnegative("status.succeeded", job.succeeded, errs);
    nonnegative("status.failed", job.failed, errs);
    if let Some(ready) = job.ready {
        nonnegative("status.ready", ready, errs);
    }
    if let Some(terminating) = job.terminating {
        nonnegative("status.terminating", terminating, errs);
    }
    if let Some(u) = &job.uncounted {
        let mut seen = std::collections::HashSet::new();
        for (list, name) in [(&u.succeeded, "succeeded"), (&u.failed, "failed")] {
            for (i, uid) in list.iter().flatten().enumerate() {
                let path = format!("status.uncountedTerminatedPods.{name}[{i}]");
                if uid.as_str() == Some("") {
                    errs.push(FieldError::invalid_rendered(path, go_json(uid), "must not be empty"));
                } else if !seen.insert(*uid) {
                    // `types.UID` is not a Go string: its value renders as JSON.
                    let mut e = FieldError::duplicate(path, uid);
                    e.value = Some(go_json(uid));
                    errs.push(e);
                }
            }
        }
    }
    if opts.reject_complete_job_with_failed_condition && job.complete() && job.failed_cond() {
        errs.push(FieldError::invalid_omit(CONDITIONS, "cannot set Complete=True and Failed=true conditions"));
    }
    if opts.reject_complete_job_with_failure_target_condition && job.complete() && job.failure_target() {
        errs.push(FieldError::invalid_omit(CONDITIONS, "cannot set Complete=True and FailureTarget=true conditions"));
    }
    if opts.reject_not_complete_job_with_completion_time && job.completion_time.is_some() && !job.complete() {
        errs.push(FieldError::invalid_rendered(
            "status.completionTime",
            Time::render(job.completion_time),
            "cannot set completionTime when there is no Complete=True condition",
        ));
    }
    if opts.reject_complete_job_without_completion_time && job.completion_time.is_none() && job.complete() {
        errs.push(FieldError::required("status.completionTime", "completionTime is required for Complete jobs"));
    }
    if opts.reject_completion_time_before_start_time
        && let (Some(Time { at: Some(start), .. }), Some(Time { at: Some(end), .. })) =
            (job.start_time, job.completion_time)
        && end < start
    {
        errs.push(FieldError::invalid_rendered(
            "status.completionTime",
            Time::render(job.completion_time),
            "must be equal to or after `startTime`",
        ));
    }
    if opts.reject_failed_job_without_failure_target && job.failed_cond() && !job.failure_target() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set Failed=True condition without the FailureTarget=true condition",
        ));
    }
    if opts.reject_complete_job_without_success_criteria_met && job.complete() && !job.success_criteria_met() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
        ));
    }
    let finished = job.finished();
    if opts.reject_finished_job_with_active_pods && job.active > 0 && finished {
        errs.push(FieldError::invalid("status.active", &job.active.into(), "active>0 is invalid for finished job"));
    }
    if opts.reject_finished_job_without_start_time && job.start_time.is_none() && finished {
        errs.push(FieldError::required("status.startTime", "startTime is required for finished job"));
    }
    if opts.reject_finished_job_with_uncounted_terminated_pods
        && finished
        && let Some(u) = job.uncounted.as_ref().filter(|u| u.count() > 0)
    {
        errs.push(FieldError::invalid_rendered(
            "status.uncountedTerminatedPods",
            u.render(),
            "must be empty for finished job",
        ));
    }
    if opts.reject_invalid_completed_indexes
        && let Some(completions) = job.completions
        && let Err(e) = validate_indexes_format(job.completed_indexes, completions)
    {
        errs.push(FieldError::invalid(
            "status.completedIndexes",
            &job.completed_indexes.into(),
            format!("error parsing completedIndexes: {e}"),
        ));
    }
    if opts.reject_invalid_failed_indexes
        && let Some(completions) = job.completions
        && job.backoff_limit_per_index
        && let Some(failed) = job.failed_indexes
        && let Err(e) = validate_indexes_format(failed, completions)
    {
        // The value is a `*string`: JSON, not Go-quoted.
        errs.push(FieldError::invalid_rendered(
            "status.failedIndexes",
            go_json(&failed.into()),
            format!("error parsing failedIndexes: {e}"),
        ));
    }
    if opts.reject_completed_indexes_for_non_indexed_job && !job.completed_indexes.is_empty() && !job.indexed {
        errs.push(FieldError::invalid(
            "status.completedIndexes",
            &job.completed_indexes.into(),
            "cannot set non-empty completedIndexes when non-indexed completion mode",
        ));
    }
    // Also keeps failedIndexes off NonIndexed Jobs, which have no backoffLimitPerIndex.
    if opts.reject_failed_indexes_for_no_backoff_limit_per_index
        && !job.backoff_limit_per_index
        && let Some(failed) = job.failed_indexes
    {
        errs.push(FieldError::invalid(
            "status.failedIndexes",
            &failed.into(),
            "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
        ));
    }
    if opts.reject_failed_indexes_overlapping_completed
        && let Some(completions) = job.completions
        && let Some(failed) = job.failed_indexes
        && let Some(e) = failed_indexes_overlap_completed(job.completed_indexes, failed, completions)
    {
        errs.push(FieldError::invalid("status.failedIndexes", &failed.into(), e));
    }
    if opts.reject_finished_job_with_terminating_pods
        && let Some(terminating) = job.terminating.filter(|t| *t > 0)
        && finished
    {
        errs.push(FieldError::invalid(
            "status.terminating",
            &terminating.into(),
            "terminating>0 is invalid for finished job",
        ));
    }
    if opts.reject_more_ready_than_active_pods
        && let Some(ready) = job.ready.filter(|r| *r > job.active)
    {
        errs.push(FieldError::invalid("status.ready", &ready.into(), "cannot set more ready pods than active"));
    }
    if job.success_criteria_met() && job.failed_cond() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set SuccessCriteriaMet=True and Failed=true conditions",
        ));
    }
    if job.success_criteria_met() && job.failure_target() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
        ));
    }
    if job.success_policy && !job.success_criteria_met() && job.complete() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True",
        ));
    }
}

/// The rules of `ValidateJobStatusUpdate` that compare with the stored status.
fn validate_job_status_update_rules(job: &Job<'_>, old: &Job<'_>, opts: &Options, errs: &mut Vec<FieldError>) {
    if opts.reject_disabling_terminal_condition {
        for t in ["Failed", "Complete", "FailureTarget"] {
            if old.is_true(t) && !job.is_true(t) {
                errs.push(FieldError::invalid_omit(
                    CONDITIONS,
                    format!("cannot disable the terminal {t}=True condition"),
                ));
            }
        }
    }
    if opts.reject_decreasing_failed_counter && job.failed < old.failed {
        errs.push(FieldError::invalid("status.failed", &job.failed.into(), "cannot decrease the failed counter"));
    }
    if opts.reject_decreasing_succeeded_counter && job.succeeded < old.succeeded {
        errs.push(FieldError::invalid(
            "status.succeeded",
            &job.succeeded.into(),
            "cannot decrease the succeeded counter",
        ));
    }
    // Only a change to another time: clearing completionTime of an unfinished Job is allowed
    // (and of a Complete one caught by reject_complete_job_without_completion_time).
    if opts.reject_mutating_completion_time
        && job.completion_time.is_some()
        && old.completion_time.is_some()
        && !Time::equal(job.completion_time, old.completion_time)
    {
        errs.push(FieldError::invalid_rendered(
            "status.completionTime",
            Time::render(job.completion_time),
            "field is immutable",
        ));
    }
    // Setting the first startTime is allowed; changing or removing it only while suspended.
    if opts.reject_start_time_update_for_unsuspended_job
        && old.start_time.is_some()
        && !Time::equal(old.start_time, job.start_time)
        && !job.suspend
    {
        errs.push(FieldError::invalid_rendered(
            "status.startTime",
            Time::render(job.start_time),
            "field is immutable for unsuspended job once set",
        ));
    }
    if old.success_criteria_met() && !job.success_criteria_met() {
        errs.push(FieldError::invalid_omit(CONDITIONS, "cannot disable the SuccessCriteriaMet=True condition"));
    }
    if old.complete() && !old.success_criteria_met() && job.success_criteria_met() {
        errs.push(FieldError::invalid_omit(
            CONDITIONS,
            "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions",
        ));
    }
}

/// `validateFailedIndexesNotOverlapCompleted`: walks both sorted interval lists, skipping the
/// intervals that do not parse (their format is reported by the other rules).
fn failed_indexes_overlap_completed(completed: &str, failed: &str, completions: i64) -> Option<String> {
    if completed.is_empty() || failed.is_empty() {
        return None;
    }
    let completed: Vec<&str> = completed.split(',').collect();
    let failed: Vec<&str> = failed.split(',').collect();
    let (mut c_pos, mut f_pos) = (0, 0);
    let mut c = parse_index_interval(completed[0], completions).ok();
    let mut f = parse_index_interval(failed[0], completions).ok();
    while c_pos < completed.len() && f_pos < failed.len() {
        let advance_completed = match (c, f) {
            (None, _) => true,
            (_, None) => false,
            (Some((cx, cy)), Some((fx, fy))) => {
                if cx <= fy && fx <= cy {
                    return Some(format!("failedIndexes and completedIndexes overlap at index: {}", cx.max(fx)));
                }
                cx <= fx
            }
        };
        if advance_completed {
            c_pos += 1;
            if c_pos < completed.len() {
                c = parse_index_interval(completed[c_pos], completions).ok();
            }
        } else {
            f_pos += 1;
            if f_pos < failed.len() {
                f = parse_index_interval(failed[f_pos], completions).ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";

    fn cond(type_: &str, status: &str) -> Value {
        json!({"type": type_, "status": status})
    }

    /// A Job with `spec` (defaults: NonIndexed, completions = parallelism = 1) and `status`.
    fn job(spec: Value, status: Value) -> Value {
        let mut s = json!({"completions": 1, "parallelism": 1, "completionMode": "NonIndexed", "suspend": false});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        json!({"metadata": {"name": "j"}, "spec": s, "status": status})
    }

    fn plain(status: Value) -> Value {
        job(json!({}), status)
    }

    fn check(name: &str, old: Value, new: Value, want: &[&str]) {
        let got: Vec<String> = validate_job_status_update(&new, &old).iter().map(ToString::to_string).collect();
        assert_eq!(got, want, "{name}");
    }

    fn running() -> Value {
        json!({"active": 1, "ready": 1, "startTime": T0})
    }

    #[test]
    fn terminal_conditions_need_their_interim_condition_and_stay_set() {
        let failed = json!({"startTime": T0, "conditions": [cond("FailureTarget", "True"), cond("Failed", "True")]});
        let complete = json!({"startTime": T0, "completionTime": T1, "succeeded": 1,
            "conditions": [cond("SuccessCriteriaMet", "True"), cond("Complete", "True")]});
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "Failed without FailureTarget",
                plain(running()),
                plain(json!({"startTime": T0, "conditions": [cond("Failed", "True")]})),
                vec![
                    "status.conditions: Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
                ],
            ),
            ("FailureTarget then Failed", plain(running()), plain(failed.clone()), vec![]),
            (
                "FailureTarget alone while pods still run",
                plain(running()),
                plain(json!({"active": 1, "ready": 1, "startTime": T0, "conditions": [cond("FailureTarget", "True")]})),
                vec![],
            ),
            (
                "Complete without SuccessCriteriaMet",
                plain(running()),
                plain(
                    json!({"startTime": T0, "completionTime": T1, "succeeded": 1, "conditions": [cond("Complete", "True")]}),
                ),
                vec![
                    "status.conditions: Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
                ],
            ),
            ("SuccessCriteriaMet then Complete", plain(running()), plain(complete.clone()), vec![]),
            (
                "Failed flipped back to False",
                plain(failed.clone()),
                plain(json!({"startTime": T0, "conditions": [cond("FailureTarget", "True"), cond("Failed", "False")]})),
                vec!["status.conditions: Invalid value: cannot disable the terminal Failed=True condition"],
            ),
            (
                "all terminal conditions dropped",
                plain(failed.clone()),
                plain(json!({"startTime": T0})),
                vec![
                    "status.conditions: Invalid value: cannot disable the terminal Failed=True condition",
                    "status.conditions: Invalid value: cannot disable the terminal FailureTarget=True condition",
                ],
            ),
            (
                "Complete dropped",
                plain(complete.clone()),
                plain(
                    json!({"startTime": T0, "completionTime": T1, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet", "True")]}),
                ),
                vec![
                    "status.completionTime: Invalid value: \"2026-01-01T00:01:00Z\": cannot set completionTime when there is no Complete=True condition",
                    "status.conditions: Invalid value: cannot disable the terminal Complete=True condition",
                ],
            ),
            (
                "SuccessCriteriaMet dropped",
                plain(json!({"startTime": T0, "conditions": [cond("SuccessCriteriaMet", "True")]})),
                plain(json!({"startTime": T0})),
                vec!["status.conditions: Invalid value: cannot disable the SuccessCriteriaMet=True condition"],
            ),
            (
                "Complete and Failed together",
                plain(running()),
                plain(json!({"startTime": T0, "completionTime": T1, "conditions": [
                    cond("SuccessCriteriaMet", "True"), cond("Complete", "True"), cond("FailureTarget", "True"), cond("Failed", "True")]})),
                vec![
                    "status.conditions: Invalid value: cannot set Complete=True and Failed=true conditions",
                    "status.conditions: Invalid value: cannot set Complete=True and FailureTarget=true conditions",
                    "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True and Failed=true conditions",
                    "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
                ],
            ),
            (
                "SuccessCriteriaMet after Complete",
                plain(json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete", "True")]})),
                plain(
                    json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete", "True"), cond("SuccessCriteriaMet", "True")]}),
                ),
                vec![
                    "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions",
                ],
            ),
            (
                "Complete with a success policy but without SuccessCriteriaMet, already stored",
                job(
                    json!({"completionMode": "Indexed", "successPolicy": {"rules": [{"succeededCount": 1}]}}),
                    json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete", "True")]}),
                ),
                job(
                    json!({"completionMode": "Indexed", "successPolicy": {"rules": [{"succeededCount": 1}]}}),
                    json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete", "True")], "failed": 1}),
                ),
                vec![
                    "status.conditions: Invalid value: cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True",
                ],
            ),
        ];
        for (name, old, new, want) in cases {
            check(name, old, new, &want);
        }
    }

    #[test]
    fn rules_of_unchanged_fields_ratchet() {
        // Stored before these rules: Failed without FailureTarget, a finished Job with active pods.
        let legacy = json!({"active": 2, "startTime": T0, "conditions": [cond("Failed", "True")]});
        let mut relabelled = legacy.clone();
        relabelled["conditions"] = json!([{"type": "Failed", "status": "True", "reason": "Other"}]);
        check("an unrelated change to a stored invalid status", plain(legacy.clone()), plain(relabelled), &[]);
        let mut more_active = legacy.clone();
        more_active["active"] = json!(3);
        check(
            "a change to the field a rule reads",
            plain(legacy),
            plain(more_active),
            &["status.active: Invalid value: 3: active>0 is invalid for finished job"],
        );
    }

    #[test]
    fn counters_never_go_negative_or_down() {
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "negative counters",
                plain(json!({})),
                plain(json!({"active": -1, "succeeded": -2, "failed": -3, "ready": -4, "terminating": -5})),
                vec![
                    "status.active: Invalid value: -1: must be greater than or equal to 0",
                    "status.succeeded: Invalid value: -2: must be greater than or equal to 0",
                    "status.failed: Invalid value: -3: must be greater than or equal to 0",
                    "status.ready: Invalid value: -4: must be greater than or equal to 0",
                    "status.terminating: Invalid value: -5: must be greater than or equal to 0",
                    "status.failed: Invalid value: -3: cannot decrease the failed counter",
                    "status.succeeded: Invalid value: -2: cannot decrease the succeeded counter",
                ],
            ),
            (
                "failed decreases",
                plain(json!({"failed": 2})),
                plain(json!({"failed": 1})),
                vec!["status.failed: Invalid value: 1: cannot decrease the failed counter"],
            ),
            (
                "succeeded decreases",
                plain(json!({"succeeded": 2})),
                plain(json!({})),
                vec!["status.succeeded: Invalid value: 0: cannot decrease the succeeded counter"],
            ),
            (
                "succeeded of an elastic Indexed Job decreases",
                job(
                    json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2}),
                    json!({"succeeded": 2, "completedIndexes": "0-1"}),
                ),
                job(
                    json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2}),
                    json!({"succeeded": 1, "completedIndexes": "0"}),
                ),
                vec![],
            ),
            (
                "more ready than active",
                plain(json!({"active": 1, "ready": 1})),
                plain(json!({"active": 1, "ready": 2})),
                vec!["status.ready: Invalid value: 2: cannot set more ready pods than active"],
            ),
        ];
        for (name, old, new, want) in cases {
            check(name, old, new, &want);
        }
    }

    #[test]
    fn finished_jobs_have_no_pods_left_and_a_start_time() {
        let failed = |extra: Value| {
            let mut s = json!({"startTime": T0, "conditions": [cond("FailureTarget", "True"), cond("Failed", "True")]});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            plain(s)
        };
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "active pods",
                plain(running()),
                failed(json!({"active": 1})),
                vec!["status.active: Invalid value: 1: active>0 is invalid for finished job"],
            ),
            (
                "terminating pods",
                plain(running()),
                failed(json!({"terminating": 2})),
                vec!["status.terminating: Invalid value: 2: terminating>0 is invalid for finished job"],
            ),
            (
                "uncounted pods",
                plain(running()),
                failed(json!({"uncountedTerminatedPods": {"failed": ["u1"]}})),
                vec![
                    r#"status.uncountedTerminatedPods: Invalid value: {"Succeeded":null,"Failed":["u1"]}: must be empty for finished job"#,
                ],
            ),
            (
                "emptied uncounted pods",
                plain(running()),
                failed(json!({"uncountedTerminatedPods": {"failed": []}})),
                vec![],
            ),
            (
                "no start time",
                plain(json!({})),
                plain(json!({"conditions": [cond("FailureTarget", "True"), cond("Failed", "True")]})),
                vec!["status.startTime: Required value: startTime is required for finished job"],
            ),
            (
                "no start time, suspended with zero completions",
                job(json!({"suspend": true, "completions": 0}), json!({})),
                job(
                    json!({"suspend": true, "completions": 0}),
                    json!({"completionTime": T1, "conditions": [cond("SuccessCriteriaMet", "True"), cond("Complete", "True")]}),
                ),
                vec![],
            ),
            (
                "bad and repeated uncounted UIDs",
                plain(json!({})),
                plain(json!({"uncountedTerminatedPods": {"succeeded": ["", "a"], "failed": ["a"]}})),
                vec![
                    r#"status.uncountedTerminatedPods.succeeded[0]: Invalid value: "": must not be empty"#,
                    r#"status.uncountedTerminatedPods.failed[0]: Duplicate value: "a""#,
                ],
            ),
        ];
        for (name, old, new, want) in cases {
            check(name, old, new, &want);
        }
    }

    #[test]
    fn start_and_completion_times_follow_upstream_rules() {
        let complete = |start: &str, end: &str| {
            plain(json!({"startTime": start, "completionTime": end, "succeeded": 1,
                "conditions": [cond("SuccessCriteriaMet", "True"), cond("Complete", "True")]}))
        };
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "completion before start",
                plain(json!({"active": 1, "startTime": T1})),
                complete(T1, T0),
                vec![
                    r#"status.completionTime: Invalid value: "2026-01-01T00:00:00Z": must be equal to or after `startTime`"#,
                ],
            ),
            (
                "Complete without completion time",
                plain(running()),
                plain(
                    json!({"startTime": T0, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet", "True"), cond("Complete", "True")]}),
                ),
                vec!["status.completionTime: Required value: completionTime is required for Complete jobs"],
            ),
            (
                "completion time without Complete",
                plain(running()),
                plain(json!({"active": 1, "ready": 1, "startTime": T0, "completionTime": T1})),
                vec![
                    r#"status.completionTime: Invalid value: "2026-01-01T00:01:00Z": cannot set completionTime when there is no Complete=True condition"#,
                ],
            ),
            (
                "completion time changed",
                complete(T0, T1),
                complete(T0, "2026-01-01T00:02:00Z"),
                vec![r#"status.completionTime: Invalid value: "2026-01-01T00:02:00Z": field is immutable"#],
            ),
            (
                "completion time rewritten in another offset",
                complete(T0, T1),
                complete(T0, "2026-01-01T01:01:00+01:00"),
                vec![],
            ),
            (
                "start time removed from an unsuspended Job",
                plain(running()),
                plain(json!({"active": 1, "ready": 1})),
                vec!["status.startTime: Invalid value: null: field is immutable for unsuspended job once set"],
            ),
            (
                "start time changed on an unsuspended Job",
                plain(running()),
                plain(json!({"active": 1, "ready": 1, "startTime": T1})),
                vec![
                    r#"status.startTime: Invalid value: "2026-01-01T00:01:00Z": field is immutable for unsuspended job once set"#,
                ],
            ),
            ("start time set first", plain(json!({})), plain(running()), vec![]),
            (
                "start time removed from a suspended Job",
                job(json!({"suspend": true}), json!({"startTime": T0})),
                job(json!({"suspend": true}), json!({})),
                vec![],
            ),
            (
                "start time reset by the resume",
                plain(json!({"startTime": T0, "conditions": [cond("Suspended", "True")]})),
                plain(json!({"startTime": T1, "conditions": [cond("Suspended", "False")]})),
                vec![],
            ),
        ];
        for (name, old, new, want) in cases {
            check(name, old, new, &want);
        }
    }

    #[test]
    fn indexes_follow_upstream_rules() {
        let per_index =
            json!({"completionMode": "Indexed", "completions": 4, "parallelism": 4, "backoffLimitPerIndex": 1});
        let indexed = json!({"completionMode": "Indexed", "completions": 4, "parallelism": 4});
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "completed indexes out of range",
                job(indexed.clone(), json!({})),
                job(indexed.clone(), json!({"completedIndexes": "0,4"})),
                vec![
                    r#"status.completedIndexes: Invalid value: "0,4": error parsing completedIndexes: too large index: "4""#,
                ],
            ),
            (
                "completed indexes of a NonIndexed Job",
                plain(json!({})),
                plain(json!({"completedIndexes": "0"})),
                vec![
                    r#"status.completedIndexes: Invalid value: "0": cannot set non-empty completedIndexes when non-indexed completion mode"#,
                ],
            ),
            (
                "failed indexes out of order",
                job(per_index.clone(), json!({})),
                job(per_index.clone(), json!({"failedIndexes": "2,1"})),
                vec![
                    r#"status.failedIndexes: Invalid value: "2,1": error parsing failedIndexes: non-increasing order, previous: 2, current: 1"#,
                ],
            ),
            (
                "failed indexes without backoffLimitPerIndex",
                job(indexed.clone(), json!({})),
                job(indexed.clone(), json!({"failedIndexes": "1"})),
                vec![
                    r#"status.failedIndexes: Invalid value: "1": cannot set non-null failedIndexes when backoffLimitPerIndex is null"#,
                ],
            ),
            (
                "failed indexes overlapping completed ones",
                job(per_index.clone(), json!({"succeeded": 2, "completedIndexes": "0,2"})),
                job(per_index.clone(), json!({"succeeded": 2, "completedIndexes": "0,2", "failedIndexes": "1-3"})),
                vec![
                    r#"status.failedIndexes: Invalid value: "1-3": failedIndexes and completedIndexes overlap at index: 2"#,
                ],
            ),
            (
                "disjoint failed and completed indexes",
                job(per_index.clone(), json!({"succeeded": 2, "completedIndexes": "0,2"})),
                job(per_index.clone(), json!({"succeeded": 2, "completedIndexes": "0,2", "failedIndexes": "1,3"})),
                vec![],
            ),
            (
                "Failed without FailureTarget, stored, as failed indexes change",
                job(per_index.clone(), json!({"startTime": T0, "conditions": [cond("Failed", "True")]})),
                job(
                    per_index.clone(),
                    json!({"startTime": T0, "failedIndexes": "1", "conditions": [cond("Failed", "True")]}),
                ),
                vec![
                    "status.conditions: Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
                ],
            ),
        ];
        for (name, old, new, want) in cases {
            check(name, old, new, &want);
        }
    }

    #[test]
    fn overlap_walk_skips_unparsable_intervals() {
        assert_eq!(
            failed_indexes_overlap_completed("x,3", "1,3", 5).as_deref(),
            Some("failedIndexes and completedIndexes overlap at index: 3")
        );
        assert_eq!(failed_indexes_overlap_completed("0-1", "2-4", 5), None);
        assert_eq!(failed_indexes_overlap_completed("", "2-4", 5), None);
    }
}
