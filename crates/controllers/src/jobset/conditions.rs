//! upstream's `updateCondition`: idempotent condition changes on a JobSet status.

use jiff::Timestamp;
use jobset_api::jobset::JobSetStatus;
use jobset_api::jobset::keys::{COND_STARTUP_COMPLETED, COND_STARTUP_IN_PROGRESS};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition to set, and whether a change of it is a Warning event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
    pub warning: bool,
}

impl Cond {
    pub fn new(type_: &'static str, status: bool, reason: impl Into<String>, message: impl Into<String>) -> Cond {
        Cond { type_, status, reason: reason.into(), message: message.into(), warning: false }
    }
    pub fn warning(mut self) -> Cond {
        self.warning = true;
        self
    }
}

fn status_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Applies `c` as upstream does and returns whether anything changed:
/// - same status, reason and message: no-op;
/// - different status: replaced, `lastTransitionTime` = now;
/// - same status, other reason/message: replaced, keeping `lastTransitionTime`;
/// - absent: appended only when True (a False condition is never added);
/// - `StartupPolicyCompleted=True` flips an existing `StartupPolicyInProgress` to False, and
///   vice versa.
pub fn update_condition(status: &mut JobSetStatus, c: &Cond, now: Timestamp) -> bool {
    let wanted = status_str(c.status);
    let changed = match status.conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(existing) => {
            if existing.status == wanted && existing.reason == c.reason && existing.message == c.message {
                false
            } else {
                if existing.status != wanted {
                    existing.last_transition_time = Time(now);
                }
                existing.status = wanted.into();
                existing.reason = c.reason.clone();
                existing.message = c.message.clone();
                true
            }
        }
        None if c.status => {
            status.conditions.push(Condition {
                type_: c.type_.into(),
                status: wanted.into(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: Time(now),
                observed_generation: None,
            });
            true
        }
        None => false,
    };
    if changed && c.status {
        let opposite = match c.type_ {
            COND_STARTUP_COMPLETED => Some(COND_STARTUP_IN_PROGRESS),
            COND_STARTUP_IN_PROGRESS => Some(COND_STARTUP_COMPLETED),
            _ => None,
        };
        if let Some(o) = opposite
            && let Some(x) = status.conditions.iter_mut().find(|x| x.type_ == o && x.status == "True")
        {
            x.status = "False".into();
            x.last_transition_time = Time(now);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn one(status: &JobSetStatus, type_: &str) -> Condition {
        status.conditions.iter().find(|c| c.type_ == type_).cloned().unwrap()
    }

    #[test]
    fn a_false_condition_is_never_added() {
        let mut s = JobSetStatus::default();
        assert!(!update_condition(
            &mut s,
            &Cond::new("RestartingJobSet", false, "JobsReady", "all jobs are ready"),
            t(1)
        ));
        assert!(s.conditions.is_empty());
    }

    #[test]
    fn a_true_condition_is_added_with_the_transition_time() {
        let mut s = JobSetStatus::default();
        assert!(update_condition(&mut s, &Cond::new("Suspended", true, "SuspendedJobs", "jobset is suspended"), t(5)));
        let c = one(&s, "Suspended");
        assert_eq!((c.status.as_str(), c.last_transition_time.0), ("True", t(5)));
    }

    #[test]
    fn an_identical_condition_is_a_no_op() {
        let mut s = JobSetStatus::default();
        let c = Cond::new("Suspended", true, "SuspendedJobs", "jobset is suspended");
        update_condition(&mut s, &c, t(1));
        assert!(!update_condition(&mut s, &c, t(2)));
        assert_eq!(one(&s, "Suspended").last_transition_time.0, t(1));
    }

    #[test]
    fn a_status_change_moves_the_transition_time() {
        let mut s = JobSetStatus::default();
        update_condition(&mut s, &Cond::new("Suspended", true, "SuspendedJobs", "jobset is suspended"), t(1));
        assert!(update_condition(&mut s, &Cond::new("Suspended", false, "ResumeJobs", "jobset is resumed"), t(7)));
        let c = one(&s, "Suspended");
        assert_eq!((c.status.as_str(), c.reason.as_str(), c.last_transition_time.0), ("False", "ResumeJobs", t(7)));
    }

    #[test]
    fn a_new_reason_with_the_same_status_keeps_the_transition_time() {
        let mut s = JobSetStatus::default();
        update_condition(&mut s, &Cond::new("RestartingJobSet", true, "DefaultFailurePolicy", "a"), t(1));
        assert!(update_condition(&mut s, &Cond::new("RestartingJobSet", true, "FailurePolicy_r", "b"), t(9)));
        let c = one(&s, "RestartingJobSet");
        assert_eq!((c.reason.as_str(), c.last_transition_time.0), ("FailurePolicy_r", t(1)));
    }

    #[test]
    fn startup_completed_flips_in_progress_to_false() {
        let mut s = JobSetStatus::default();
        update_condition(&mut s, &Cond::new(COND_STARTUP_IN_PROGRESS, true, "r", "m"), t(1));
        update_condition(&mut s, &Cond::new(COND_STARTUP_COMPLETED, true, "r2", "m2"), t(2));
        assert_eq!(one(&s, COND_STARTUP_IN_PROGRESS).status, "False");
        assert_eq!(one(&s, COND_STARTUP_COMPLETED).status, "True");
    }
}
