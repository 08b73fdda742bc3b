//! `ttlSecondsAfterFinished` (upstream's `ttl_after_finished.go`).

use std::time::Duration;

use jiff::Timestamp;
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::{COND_COMPLETED, COND_FAILED};

/// What to do with a finished JobSet that has a TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ttl {
    /// No TTL set.
    Keep,
    Delete,
    RequeueAfter(Duration),
}

/// The finish time is the transition time of the first True `Completed`/`Failed` condition.
pub fn decide(js: &JobSet, now: Timestamp) -> Result<Ttl, String> {
    let Some(ttl) = js.spec.ttl_seconds_after_finished else { return Ok(Ttl::Keep) };
    let who = format!("{}/{}", js.namespace(), js.name());
    let cond = js
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| (c.type_ == COND_COMPLETED || c.type_ == COND_FAILED) && c.status == "True")
        .ok_or_else(|| format!("unable to find the status of the finished JobSet {who}"))?;
    let finished = cond.last_transition_time.0;
    if finished == Timestamp::UNIX_EPOCH {
        return Err(format!("unable to find the time when the JobSet {who} finished"));
    }
    let left = finished.as_millisecond() + i64::from(ttl) * 1000 - now.as_millisecond();
    Ok(if left <= 0 { Ttl::Delete } else { Ttl::RequeueAfter(Duration::from_millis(left as u64)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished_at(ttl: Option<i32>, at: i64) -> JobSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "js", "namespace": "ns"},
            "spec": {"ttlSecondsAfterFinished": ttl, "replicatedJobs": []},
            "status": {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                "message": "jobset completed successfully",
                "lastTransitionTime": Timestamp::from_second(at).unwrap().to_string()}]}
        }))
        .unwrap()
    }

    fn now(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn without_ttl_the_jobset_is_kept() {
        assert_eq!(decide(&finished_at(None, 100), now(10_000)), Ok(Ttl::Keep));
    }

    #[test]
    fn before_expiry_it_requeues_for_the_rest_of_the_ttl() {
        assert_eq!(decide(&finished_at(Some(30), 100), now(110)), Ok(Ttl::RequeueAfter(Duration::from_secs(20))));
    }

    #[test]
    fn at_or_after_expiry_it_is_deleted() {
        assert_eq!(decide(&finished_at(Some(30), 100), now(130)), Ok(Ttl::Delete));
        assert_eq!(decide(&finished_at(Some(0), 100), now(100)), Ok(Ttl::Delete));
    }

    #[test]
    fn a_finished_jobset_without_a_finish_condition_is_an_error() {
        let mut js = finished_at(Some(1), 100);
        js.status.as_mut().unwrap().conditions.clear();
        assert_eq!(decide(&js, now(1)).unwrap_err(), "unable to find the status of the finished JobSet ns/js");
    }
}
