//! The JobSet's `activeDeadlineSeconds` (KEP-1186): how long a JobSet may be continuously
//! active. `status.startTime` is when it last became active, kept as `batch/v1` Job keeps its
//! own: set when the JobSet runs without one, cleared while it is suspended (so a resume starts
//! the clock again), and reset by a restart of the whole JobSet (a fresh run). A restart of one
//! Job or replicated job leaves it, as a pod retry leaves a Job's.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use jobset_api::jobset::{JobSet, JobSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `now` in whole seconds, as a `Time` is stored: what is decided from is what is written.
fn seconds(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// `status.startTime` maintenance; whether it changed. `restarted`: this reconcile restarted the
/// whole JobSet.
pub fn maintain_start_time(js: &JobSet, status: &mut JobSetStatus, restarted: bool, now: Timestamp) -> bool {
    let want = if js.suspended() {
        None
    } else if restarted || status.start_time.is_none() {
        Some(seconds(now))
    } else {
        status.start_time.clone()
    };
    let changed = status.start_time != want;
    status.start_time = want;
    changed
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadline {
    /// No deadline, suspended, or not started.
    None,
    /// Look again then: no event may come from a wedged JobSet.
    Remaining(Duration),
    /// Passed: the JobSet fails with this message.
    Exceeded(String),
}

/// upstream's `executeActiveDeadlinePolicy` decision. A start time in the future (clock skew) is
/// not expired.
pub fn check(js: &JobSet, start: Option<&Time>, now: Timestamp) -> Deadline {
    let (Some(secs), Some(start)) = (js.spec.active_deadline_seconds, start) else { return Deadline::None };
    if js.suspended() {
        return Deadline::None;
    }
    let remaining = start.0 + SignedDuration::from_secs(secs) - now;
    match remaining.try_into() {
        Ok(d) if !remaining.is_zero() && !remaining.is_negative() => Deadline::Remaining(d),
        _ => Deadline::Exceeded(format!("JobSet was active for longer than the specified deadline of {secs}s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn js(spec: serde_json::Value) -> JobSet {
        let mut s = json!({"replicatedJobs": [{"name": "a", "replicas": 1}]});
        s.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        serde_json::from_value(json!({"metadata": {"name": "js"}, "spec": s})).unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn t(s: i64) -> Time {
        Time(at(s))
    }

    #[test]
    fn start_time_is_set_when_running_cleared_while_suspended_and_reset_by_a_jobset_restart() {
        let now = Timestamp::from_microsecond(100_700_000).unwrap();
        // (case, suspended, start time read, restarted, start time written, changed)
        let cases = [
            ("first start", false, None, false, Some(t(100)), true),
            ("running: kept", false, Some(t(40)), false, Some(t(40)), false),
            ("suspended: cleared", true, Some(t(40)), false, None, true),
            ("suspended without one", true, None, false, None, false),
            ("resumed (cleared by the suspend): now", false, None, false, Some(t(100)), true),
            ("a JobSet restart: now", false, Some(t(40)), true, Some(t(100)), true),
        ];
        for (case, suspended, start, restarted, want, changed) in cases {
            let j = js(json!({"suspend": suspended}));
            let mut status = JobSetStatus { start_time: start, ..Default::default() };
            assert_eq!(maintain_start_time(&j, &mut status, restarted, now), changed, "{case}");
            assert_eq!(status.start_time, want, "{case}");
        }
    }

    #[test]
    fn the_deadline_counts_from_the_start_time_and_never_while_suspended() {
        let exceeded = Deadline::Exceeded("JobSet was active for longer than the specified deadline of 10s".into());
        // (case, spec, start time, now, decision)
        let cases = [
            ("no deadline", json!({}), Some(t(0)), 100, Deadline::None),
            ("not started", json!({"activeDeadlineSeconds": 10}), None, 100, Deadline::None),
            ("suspended", json!({"activeDeadlineSeconds": 10, "suspend": true}), Some(t(0)), 100, Deadline::None),
            (
                "before",
                json!({"activeDeadlineSeconds": 10}),
                Some(t(0)),
                4,
                Deadline::Remaining(Duration::from_secs(6)),
            ),
            ("at", json!({"activeDeadlineSeconds": 10}), Some(t(0)), 10, exceeded.clone()),
            ("after", json!({"activeDeadlineSeconds": 10}), Some(t(0)), 11, exceeded),
            (
                "a start in the future",
                json!({"activeDeadlineSeconds": 10}),
                Some(t(50)),
                45,
                Deadline::Remaining(Duration::from_secs(15)),
            ),
        ];
        for (case, spec, start, now, want) in cases {
            assert_eq!(check(&js(spec), start.as_ref(), at(now)), want, "{case}");
        }
    }
}
