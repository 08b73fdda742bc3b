//! Pod-failure backoff of the Job controller (upstream
//! `pkg/controller/job/backoff_utils.go`): the delay before replacement pods
//! are created after failures, globally (in-memory record per Job) or per index
//! (from the `job-index-*failure-count` annotations of the index's last failed pod).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use super::indexes::index_failure_counts;

/// Backoff parameters (upstream `DefaultJobPodFailureBackOff`, `MaxJobPodFailureBackOff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    pub base: Duration,
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig { base: Duration::from_secs(10), max: Duration::from_secs(600) }
    }
}

/// The time a pod finished (upstream `getFinishedTime`):
/// 1. if all container statuses are terminated (with `finishedAt`), the latest `finishedAt`;
/// 2. else the `lastTransitionTime` of a `Ready=False` condition;
/// 3. else `deletionTimestamp - deletionGracePeriodSeconds`;
/// 4. else `creationTimestamp` (`None` when absent — upstream's zero time).
pub fn finish_time(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref();
    if let Some(t) = status.and_then(|s| {
        let statuses = s.container_statuses.as_deref()?;
        let mut latest: Option<Timestamp> = None;
        for cs in statuses {
            let t = cs.state.as_ref().and_then(|st| st.terminated.as_ref()).and_then(|t| t.finished_at.as_ref())?.0;
            latest = Some(latest.map_or(t, |l| l.max(t)));
        }
        latest
    }) {
        return Some(t);
    }
    if let Some(t) = status
        .and_then(|s| s.conditions.as_deref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref())
    {
        return Some(t.0);
    }
    if let Some(del) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        return Some(del.0.checked_sub(SignedDuration::from_secs(grace)).unwrap_or(if grace > 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        }));
    }
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// `min(base·2^(failures−1), max)`; 0 for no failures. (As upstream, the cap is
/// only applied from the second failure on.)
pub fn delay(cfg: &BackoffConfig, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let mut d = cfg.base;
    for _ in 1..failures {
        d = d.checked_mul(2).unwrap_or(cfg.max);
        if d >= cfg.max {
            d = cfg.max;
            break;
        }
    }
    d
}

/// Remaining wait after `failures` failures, the last at `last_failure`
/// (upstream `getRemainingTimeForFailuresCount`). A missing time counts as
/// long ago (upstream's zero time) ⇒ 0. A failure time in the future extends
/// the wait, as upstream.
pub fn remaining_for(cfg: &BackoffConfig, failures: u32, last_failure: Option<Timestamp>, now: Timestamp) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let Some(last) = last_failure else {
        return Duration::ZERO;
    };
    let d = delay(cfg, failures);
    let elapsed = now.duration_since(last);
    if elapsed.is_negative() {
        return d.saturating_add(elapsed.unsigned_abs());
    }
    d.saturating_sub(elapsed.unsigned_abs())
}

/// The per-Job in-memory backoff record (non-BLPI).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    pub failures_after_last_success: u32,
    pub last_failure_time: Option<Timestamp>,
}

impl BackoffRecord {
    /// Updates with the pods newly finished in this sync, given as
    /// `(finish time, succeeded)` (upstream `newBackoffRecord`):
    /// - none → unchanged;
    /// - only failures → count += n, last failure = the latest one;
    /// - successes but no failures → reset;
    /// - both → reset to the failures that finished strictly after the latest success.
    pub fn update(&mut self, newly_finished: &[(Timestamp, bool)]) {
        let mut succeeded: Vec<Timestamp> = Vec::new();
        let mut failed: Vec<Timestamp> = Vec::new();
        for &(t, ok) in newly_finished {
            if ok {
                succeeded.push(t);
            } else {
                failed.push(t);
            }
        }
        succeeded.sort();
        failed.sort();
        match (succeeded.last(), failed.last()) {
            (None, None) => {}
            (None, Some(&latest)) => {
                let n = u32::try_from(failed.len()).unwrap_or(u32::MAX);
                self.failures_after_last_success = self.failures_after_last_success.saturating_add(n);
                self.last_failure_time = Some(latest);
            }
            (Some(&last_success), _) => {
                self.failures_after_last_success = 0;
                self.last_failure_time = None;
                for &t in failed.iter().rev() {
                    if t <= last_success {
                        break;
                    }
                    if self.last_failure_time.is_none() {
                        self.last_failure_time = Some(t);
                    }
                    self.failures_after_last_success += 1;
                }
            }
        }
    }

    /// Remaining wait before replacement pods may be created.
    pub fn remaining(&self, cfg: &BackoffConfig, now: Timestamp) -> Duration {
        remaining_for(cfg, self.failures_after_last_success, self.last_failure_time, now)
    }
}

/// Per-index (BLPI) remaining wait, from the index's last failed pod:
/// `n = failure-count + ignored-failure-count + 1`, measured from its finish time
/// (upstream `getRemainingTimePerIndex`).
pub fn index_remaining(cfg: &BackoffConfig, last_failed_pod: &Pod, now: Timestamp) -> Duration {
    let (failed, ignored) = index_failure_counts(last_failed_pod);
    let n = i64::from(failed) + i64::from(ignored) + 1;
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    remaining_for(cfg, n, finish_time(last_failed_pod), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::indexes::{INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT};
    use serde_json::{Value, json};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn terminated(finished: &str) -> Value {
        json!({ "name": "c", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "terminated": { "exitCode": 1, "finishedAt": finished } } })
    }

    #[test]
    fn delay_doubles_and_caps() {
        let cfg = BackoffConfig::default();
        let cases: &[(u32, u64)] = &[(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (8, 600), (u32::MAX, 600)];
        for &(n, secs) in cases {
            assert_eq!(delay(&cfg, n), Duration::from_secs(secs), "n={n}");
        }
        let small = BackoffConfig { base: Duration::from_secs(1), max: Duration::from_secs(5) };
        assert_eq!(delay(&small, 3), Duration::from_secs(4));
        assert_eq!(delay(&small, 4), Duration::from_secs(5));
    }

    #[test]
    fn finish_time_lookup_order() {
        let created = "2024-01-01T00:00:00Z";
        let cases: Vec<(&str, Value, Option<&str>)> = vec![
            (
                "latest finishedAt when all containers terminated",
                json!({ "metadata": { "creationTimestamp": created },
                        "status": { "containerStatuses": [terminated("2024-01-01T00:01:00Z"), terminated("2024-01-01T00:02:00Z")],
                                    "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:05:00Z" }] } }),
                Some("2024-01-01T00:02:00Z"),
            ),
            (
                "Ready=False transition when a container is still running",
                json!({ "metadata": { "creationTimestamp": created },
                        "status": { "containerStatuses": [terminated("2024-01-01T00:01:00Z"),
                            { "name": "r", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": { "running": {} } }],
                                    "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:05:00Z" }] } }),
                Some("2024-01-01T00:05:00Z"),
            ),
            (
                "Ready=True is ignored; deletion timestamp minus grace period",
                json!({ "metadata": { "creationTimestamp": created, "deletionTimestamp": "2024-01-01T00:10:00Z", "deletionGracePeriodSeconds": 30 },
                        "status": { "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:05:00Z" }] } }),
                Some("2024-01-01T00:09:30Z"),
            ),
            (
                "deletion timestamp without grace period",
                json!({ "metadata": { "creationTimestamp": created, "deletionTimestamp": "2024-01-01T00:10:00Z" } }),
                Some("2024-01-01T00:10:00Z"),
            ),
            (
                "creation timestamp fallback",
                json!({ "metadata": { "creationTimestamp": created }, "status": { "containerStatuses": [] } }),
                Some(created),
            ),
            ("nothing known", json!({ "metadata": {} }), None),
        ];
        for (name, p, want) in cases {
            assert_eq!(finish_time(&pod(p)), want.map(ts), "{name}");
        }
    }

    #[test]
    fn record_update_table() {
        // (name, initial (count, last), newly finished (t, succeeded), expected (count, last))
        type Rec = (u32, Option<i64>);
        type Finished = &'static [(i64, bool)];
        let cases: &[(&str, Rec, Finished, Rec)] = &[
            ("no new pods keeps record", (2, Some(5)), &[], (2, Some(5))),
            ("only failures accumulate", (1, Some(5)), &[(20, false), (10, false)], (3, Some(20))),
            ("success resets", (4, Some(5)), &[(10, true)], (0, None)),
            (
                "failures after last success survive reset",
                (4, Some(5)),
                &[(10, false), (20, true), (30, false), (40, false), (15, true)],
                (2, Some(40)),
            ),
            ("failure at same time as success does not count", (0, None), &[(20, true), (20, false)], (0, None)),
        ];
        for (name, (c0, l0), new, (c1, l1)) in cases {
            let mut r = BackoffRecord { failures_after_last_success: *c0, last_failure_time: l0.map(at) };
            let new: Vec<(Timestamp, bool)> = new.iter().map(|&(t, ok)| (at(t), ok)).collect();
            r.update(&new);
            assert_eq!(r, BackoffRecord { failures_after_last_success: *c1, last_failure_time: l1.map(at) }, "{name}");
        }
    }

    #[test]
    fn record_remaining() {
        let cfg = BackoffConfig::default();
        // (failures, last failure at, now, remaining secs)
        let cases: &[(u32, Option<i64>, i64, u64)] = &[
            (0, None, 100, 0),
            (1, Some(0), 0, 10),
            (1, Some(0), 4, 6),
            (1, Some(0), 10, 0),
            (1, Some(0), 11, 0),
            (3, Some(0), 15, 25),
            (10, Some(0), 100, 500),
            (1, Some(10), 5, 15),
            (2, None, 0, 0),
        ];
        for &(n, last, now, want) in cases {
            let r = BackoffRecord { failures_after_last_success: n, last_failure_time: last.map(at) };
            assert_eq!(r.remaining(&cfg, at(now)), Duration::from_secs(want), "n={n} last={last:?} now={now}");
        }
    }

    #[test]
    fn record_reset_after_success_clears_remaining() {
        let cfg = BackoffConfig::default();
        let mut r = BackoffRecord::default();
        r.update(&[(at(0), false), (at(1), false)]);
        assert_eq!(r.remaining(&cfg, at(1)), Duration::from_secs(20));
        r.update(&[(at(2), true)]);
        assert_eq!(r, BackoffRecord::default());
        assert_eq!(r.remaining(&cfg, at(2)), Duration::ZERO);
    }

    #[test]
    fn per_index_remaining_uses_annotations() {
        let cfg = BackoffConfig::default();
        let finished = "2024-01-01T00:00:00Z";
        let now = ts("2024-01-01T00:00:05Z");
        let cases: &[(&[(&str, &str)], u64)] = &[
            (&[], 5),                                                                // n=1: 10s - 5s
            (&[(INDEX_FAILURE_COUNT, "1")], 15),                                     // n=2: 20s - 5s
            (&[(INDEX_FAILURE_COUNT, "1"), (INDEX_IGNORED_FAILURE_COUNT, "1")], 35), // n=3
            (&[(INDEX_FAILURE_COUNT, "20")], 595),                                   // capped
            (&[(INDEX_FAILURE_COUNT, "garbage")], 5),
        ];
        for (ann, want) in cases {
            let annotations: serde_json::Map<String, Value> =
                ann.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            let p = pod(json!({ "metadata": { "annotations": annotations },
                                "status": { "containerStatuses": [terminated(finished)] } }));
            assert_eq!(index_remaining(&cfg, &p, now), Duration::from_secs(*want), "{ann:?}");
        }
    }
}
