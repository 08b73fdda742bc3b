//! Execution attempts (KEP-1282): `status.executionAttempts` counts the JobSet's runs, and its
//! child Jobs and their pod templates carry it as the annotation
//! `jobset.sigs.k8s.io/execution-attempt`, so logs can be sliced per run. A run begins with the
//! first start, each resume and each failure-policy restart of the whole JobSet (`restarts`
//! bumped). Scoped restarts (one Job, one replicated job) and in-place restarts begin none: the
//! KEP counts only a recreation of every Job, and an in-place restart keeps the pods, whose
//! annotations are fixed at creation (the in-place attempt annotation slices those).
//!
//! Level-triggered: the value is derived from the status read and the status this reconcile
//! writes. A resume is the write that turns the `Suspended` condition from True to False, so it
//! is counted exactly once however many reconciles the resume takes (InOrder startup resumes
//! replicated jobs one reconcile at a time); meanwhile the Jobs resumed already carry the value
//! that write will record.

use jobset_api::jobset::JobSetStatus;
use jobset_api::jobset::keys::{COND_SUSPENDED, EXECUTION_ATTEMPT};
use serde_json::{Value, json};

fn suspended_true(s: &JobSetStatus) -> bool {
    s.conditions.iter().any(|c| c.type_ == COND_SUSPENDED && c.status == "True")
}

/// The run this reconcile's Jobs belong to and the `executionAttempts` it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// The annotation value of the Jobs this reconcile creates or resumes.
    pub annotation: i32,
    pub status: Option<i32>,
}

/// From the status read (`old`), the status this reconcile writes (`new`) and whether the spec
/// is suspended. A JobSet that never ran keeps `None` until it runs; one found running without
/// it (created before the feature) starts at its `restarts`, as the KEP's upgrade rule.
pub fn decide(old: &JobSetStatus, new: &JobSetStatus, suspended: bool) -> Attempts {
    let Some(n) = old.execution_attempts else {
        let status = (!suspended).then_some(new.restarts);
        return Attempts { annotation: status.unwrap_or(0), status };
    };
    if suspended {
        return Attempts { annotation: n, status: Some(n) };
    }
    let resuming = i32::from(suspended_true(old));
    let annotation = n + resuming + (new.restarts - old.restarts).max(0);
    let resumed = suspended_true(old) && !suspended_true(new);
    let status = if resuming == 1 && !resumed { annotation - 1 } else { annotation };
    Attempts { annotation, status: Some(status) }
}

/// Stamps the annotation on a Job to create (its metadata and pod template).
pub fn stamp_job(job: &mut Value, attempt: i32) {
    for path in ["/metadata", "/spec/template/metadata"] {
        if let Some(Value::Object(m)) = job.pointer_mut(path) {
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if let Value::Object(a) = ann {
                a.insert(EXECUTION_ATTEMPT.into(), json!(attempt.to_string()));
            }
        }
    }
}

/// Adds the annotation to a resume patch (`spec.suspend: false`), so the pods the Job creates
/// once resumed carry the run they belong to; any other patch is left alone.
pub fn stamp_resume(patch: &mut Value, attempt: i32) {
    if patch.pointer("/spec/suspend") != Some(&json!(false)) {
        return;
    }
    let v = json!(attempt.to_string());
    patch["metadata"]["annotations"][EXECUTION_ATTEMPT] = v.clone();
    patch["spec"]["template"]["metadata"]["annotations"][EXECUTION_ATTEMPT] = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(attempts: Option<i32>, restarts: i32, suspended: Option<bool>) -> JobSetStatus {
        let mut s: JobSetStatus = serde_json::from_value(json!({"restarts": restarts})).unwrap();
        s.execution_attempts = attempts;
        if let Some(b) = suspended {
            s.conditions = serde_json::from_value(json!([{"type": "Suspended",
                "status": if b { "True" } else { "False" }, "reason": "r", "message": "m",
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]))
            .unwrap();
        }
        s
    }

    #[test]
    fn the_count_begins_with_the_first_run_and_grows_with_each_resume_and_jobset_restart() {
        // (case, old, new, spec suspended, (annotation, status written))
        let cases = [
            ("a new running JobSet starts at 0", status(None, 0, None), status(None, 0, None), false, (0, Some(0))),
            ("a new suspended JobSet stays unset", status(None, 0, None), status(None, 0, Some(true)), true, (0, None)),
            (
                "suspended: unset until it runs",
                status(None, 0, Some(true)),
                status(None, 0, Some(true)),
                true,
                (0, None),
            ),
            (
                "the first resume of a JobSet created suspended: 0",
                status(None, 0, Some(true)),
                status(None, 0, Some(false)),
                false,
                (0, Some(0)),
            ),
            (
                "found running without it (upgrade): its restarts",
                status(None, 3, None),
                status(None, 3, None),
                false,
                (3, Some(3)),
            ),
            (
                "running, nothing happens",
                status(Some(2), 1, Some(false)),
                status(Some(2), 1, Some(false)),
                false,
                (2, Some(2)),
            ),
            (
                "suspended again: kept",
                status(Some(2), 1, Some(false)),
                status(Some(2), 1, Some(true)),
                true,
                (2, Some(2)),
            ),
            ("resumed: +1", status(Some(2), 1, Some(true)), status(Some(2), 1, Some(false)), false, (3, Some(3))),
            (
                "resuming in order, not all started: Jobs at +1, status unchanged",
                status(Some(2), 1, Some(true)),
                status(Some(2), 1, Some(true)),
                false,
                (3, Some(2)),
            ),
            (
                "a JobSet restart: +1",
                status(Some(2), 1, Some(false)),
                status(Some(2), 2, Some(false)),
                false,
                (3, Some(3)),
            ),
            (
                "a JobSet restart without a Suspended condition: +1",
                status(Some(0), 0, None),
                status(Some(0), 1, None),
                false,
                (1, Some(1)),
            ),
            (
                "a restart found running without it: the new restarts",
                status(None, 0, None),
                status(None, 1, None),
                false,
                (1, Some(1)),
            ),
        ];
        for (case, old, new, suspended, (annotation, st)) in cases {
            assert_eq!(decide(&old, &new, suspended), Attempts { annotation, status: st }, "{case}");
        }
    }

    #[test]
    fn the_same_state_seen_again_counts_nothing_more() {
        // The resume written: the next reconcile reads Suspended=False and the new count.
        let resumed = status(Some(3), 1, Some(false));
        assert_eq!(decide(&resumed, &resumed, false), Attempts { annotation: 3, status: Some(3) });
        // The restart written: restarts is 2 in both.
        let restarted = status(Some(3), 2, Some(false));
        assert_eq!(decide(&restarted, &restarted, false), Attempts { annotation: 3, status: Some(3) });
    }

    #[test]
    fn created_jobs_and_resume_patches_carry_the_annotation_other_patches_do_not() {
        let mut job = json!({"metadata": {"name": "j", "annotations": {"a": "1"}},
            "spec": {"template": {"metadata": {}, "spec": {}}}});
        stamp_job(&mut job, 4);
        assert_eq!(job["metadata"]["annotations"], json!({"a": "1", EXECUTION_ATTEMPT: "4"}));
        assert_eq!(job["spec"]["template"]["metadata"]["annotations"], json!({EXECUTION_ATTEMPT: "4"}));
        let mut resume = json!({"spec": {"suspend": false, "template": {"metadata": {"annotations": {"b": "2"}}}}});
        stamp_resume(&mut resume, 4);
        assert_eq!(resume["metadata"]["annotations"][EXECUTION_ATTEMPT], "4");
        assert_eq!(resume["spec"]["template"]["metadata"]["annotations"], json!({"b": "2", EXECUTION_ATTEMPT: "4"}));
        for other in [json!({"spec": {"suspend": true}}), json!({"spec": {"parallelism": 2, "completions": 2}})] {
            let mut p = other.clone();
            stamp_resume(&mut p, 4);
            assert_eq!(p, other);
        }
    }
}
