//! In-place restart (`restartStrategy: InPlaceRestart`, KEP-467, upstream's
//! `reconcileInPlaceRestart`): the controller's half of a group restart. The agent sidecar of every
//! pod writes the attempt its pod is at into the annotation
//! `jobset.sigs.k8s.io/in-place-restart-attempt`; from those the controller sets
//! `status.currentInPlaceRestartAttempt` once every pod is at the same attempt (the agents at it
//! lift their barriers) and `status.previousInPlaceRestartAttempt` to the attempt before the newest
//! one (the agents at or below it restart their pods in place), and fails the JobSet once restarts
//! exceed `maxRestarts`.
//!
//! Extension (the design doc's future improvement "speed up failure detection"): upstream notices
//! a failure only once the failed pod's agent has restarted and annotated the next attempt. Here,
//! as soon as a pod of the current attempt shows a failed worker, the current attempt is deprecated
//! (`previous = current`) and every agent restarts its pod at once. A failed worker is a regular
//! container (not an init container or sidecar) whose `state.terminated.exitCode` is non-zero, or
//! a pod whose `AllContainersRestarting` condition is True (the kubelet is restarting it in place).
//! A pod counts only while its annotation equals `current`, and `previous` only grows: a
//! deprecated attempt cannot be deprecated again, and the pods of the next attempt are judged only
//! once `current` moved on to it. A terminated state that ended no later than the pod's last
//! in-place restart (the `AllContainersRestarting` condition's last transition) is left over from
//! before it: the kubelet keeps it until the container runs again, which behind the barrier is
//! only after `current` moved on, so counting it would deprecate every new attempt at once.

use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use jobset_api::jobset::{JobSet, JobSetStatus};
use k8s_openapi::api::core::v1::Pod;

/// The kubelet's pod condition while it restarts every container of a pod (KEP-5532).
const ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

/// What the pods say about the JobSet's in-place restart state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    /// Fail the JobSet: `ReachedMaxRestarts`, `jobset failed due to reaching max number of restarts`.
    ReachedMaxRestarts,
    /// Set `currentInPlaceRestartAttempt`: every pod is at this attempt.
    Current(i32),
    /// Set `previousInPlaceRestartAttempt` (it only ever grows).
    Previous(i32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'p> {
    pub outcome: Outcome,
    /// Pods whose annotation is not a non-negative integer, with its value. Upstream fails the
    /// reconcile over one; here the pod is left out (as if its agent had not annotated yet, which
    /// holds every barrier) and the caller logs it, so the rest of the reconcile and the other
    /// pods go on and a fixed annotation is picked up by the next reconcile.
    pub malformed: Vec<(&'p str, &'p str)>,
}

/// Decides from the JobSet (spec and current status) and all its pods.
pub fn decide<'p>(js: &JobSet, pods: &[&'p Pod]) -> Result<Decision<'p>, String> {
    let max_restarts = js.spec.failure_policy.as_ref().map(|f| f.max_restarts).unwrap_or(0);
    let none = JobSetStatus::default();
    let status = js.status.as_ref().unwrap_or(&none);
    let (current, previous) = (status.current_in_place_restart_attempt, status.previous_in_place_restart_attempt);
    let mut d = Decision { outcome: Outcome::Unchanged, malformed: vec![] };
    // One pass and no allocation: a reconcile runs this over thousands of pods for each burst
    // of their events in a group restart.
    let (mut annotated, mut max, mut first, mut same) = (0i64, 0, None, true);
    let mut current_failed = false;
    for &p in pods {
        if restart_count(p) > max_restarts {
            return Ok(Decision { outcome: Outcome::ReachedMaxRestarts, malformed: vec![] });
        }
        if phase(p) == Some("Failed") {
            continue;
        }
        let Some(v) = p.metadata.annotations.as_ref().and_then(|a| a.get(IN_PLACE_RESTART_ATTEMPT)) else { continue };
        match v.parse::<i32>() {
            Ok(a) if a >= 0 => {
                annotated += 1;
                max = max.max(a);
                same &= *first.get_or_insert(a) == a;
                current_failed = current_failed || (current == Some(a) && worker_failed(p));
            }
            _ => d.malformed.push((p.metadata.name.as_deref().unwrap_or_default(), v.as_str())),
        }
    }
    // In-place attempts include the JobSet restarts that recreated the pods; those that did not
    // count towards maxRestarts do not count here either.
    let not_counted = i64::from(status.restarts) - i64::from(status.restarts_count_towards_max);
    if i64::from(max) - not_counted > i64::from(max_restarts) {
        d.outcome = Outcome::ReachedMaxRestarts;
        return Ok(d);
    }

    let total = expected_pods(js)?;
    // The attempt every pod is at, if they all are at the same one.
    let in_sync = first.filter(|_| same && annotated == total);
    if let Some(a) = in_sync
        && current != Some(a)
    {
        d.outcome = Outcome::Current(a);
        return Ok(d);
    }
    // Upstream: out of sync, past the initial startup (some pod beyond attempt 0).
    let behind_newest = (in_sync.is_none() && max > 0).then(|| max - 1);
    d.outcome = match behind_newest.max(current.filter(|_| current_failed)) {
        Some(a) if previous.is_none_or(|p| a > p) => Outcome::Previous(a),
        _ => Outcome::Unchanged,
    };
    Ok(d)
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

/// The highest `restartCount` of any container of the pod, init containers and sidecars included.
fn restart_count(p: &Pod) -> i32 {
    let Some(s) = p.status.as_ref() else { return 0 };
    s.init_container_statuses.iter().chain(&s.container_statuses).flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

/// Σ replicas × parallelism; in-place restart needs `completions == parallelism`, both set.
fn expected_pods(js: &JobSet) -> Result<i64, String> {
    js.spec.replicated_jobs.iter().try_fold(0i64, |sum, rj| {
        match (rj.template.completions(), rj.template.parallelism()) {
            (Some(c), Some(p)) if c == p => Ok(sum + i64::from(rj.replicas) * i64::from(p)),
            _ => Err(format!(
                "{}: in-place restart requires jobTemplate.spec.completions == jobTemplate.spec.parallelism != nil",
                rj.name
            )),
        }
    })
}

/// Whether a worker of the pod failed since the pod last restarted in place (see the module doc).
fn worker_failed(p: &Pod) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    let restarting = s.conditions.iter().flatten().find(|c| c.type_ == ALL_CONTAINERS_RESTARTING);
    if restarting.is_some_and(|c| c.status == "True") {
        return true;
    }
    let restarted_at = restarting.and_then(|c| c.last_transition_time.as_ref());
    s.container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .any(|t| t.exit_code != 0 && restarted_at.is_none_or(|r| t.finished_at.as_ref().is_some_and(|f| f.0 > r.0)))
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::{PodBuilder, pod};
    use super::*;
    use serde_json::json;

    /// `maxRestarts: 2`; replicated jobs `w` (2 replicas) and `ps` (1 replica), 2 pods each:
    /// 6 pods in all.
    fn js(status: serde_json::Value) -> JobSet {
        let rj = |name: &str, replicas: i32| {
            json!({"name": name, "replicas": replicas,
                   "template": {"spec": {"parallelism": 2, "completions": 2, "template": {"spec": {}}}}})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "js", "namespace": "default"},
            "spec": {"failurePolicy": {"maxRestarts": 2, "restartStrategy": "InPlaceRestart"},
                     "replicatedJobs": [rj("w", 2), rj("ps", 1)]},
            "status": status
        }))
        .unwrap()
    }

    /// The six pods at these attempts (`None`: not annotated yet).
    fn pods_at(attempts: [Option<i32>; 6]) -> Vec<PodBuilder> {
        attempts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let p = pod("js", &format!("p{i}"));
                match a {
                    Some(a) => p.at(*a),
                    None => p,
                }
            })
            .collect()
    }

    fn all_at(a: i32) -> Vec<PodBuilder> {
        pods_at([Some(a); 6])
    }

    fn outcome(js: &JobSet, pods: Vec<PodBuilder>) -> Outcome {
        let pods: Vec<Pod> = pods.into_iter().map(PodBuilder::obj).collect();
        decide(js, &pods.iter().collect::<Vec<_>>()).unwrap().outcome
    }

    #[test]
    fn attempts_decide_current_and_previous() {
        use Outcome::*;
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "initial startup: not every pod annotated yet",
                json!({}),
                pods_at([Some(0), Some(0), None, None, None, None]),
                Unchanged,
            ),
            ("initial startup: a pod missing", json!({}), all_at(0).into_iter().take(5).collect(), Unchanged),
            ("pods just became in sync", json!({}), all_at(0), Current(0)),
            ("all pods in sync", json!({"currentInPlaceRestartAttempt": 0}), all_at(0), Unchanged),
            (
                "in sync, then one pod restarted into a new attempt",
                json!({"currentInPlaceRestartAttempt": 0}),
                pods_at([Some(0), Some(1), Some(0), Some(0), Some(0), Some(0)]),
                Previous(0),
            ),
            (
                "lost sync, a second pod restarted but not all",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                pods_at([Some(1), Some(1), Some(0), Some(0), Some(0), Some(0)]),
                Unchanged,
            ),
            (
                "in sync again at the new attempt",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                all_at(1),
                Current(1),
            ),
            (
                "one pod restarted into a new attempt while another is not annotated yet",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                pods_at([Some(2), Some(1), Some(1), Some(1), Some(1), None]),
                Previous(1),
            ),
            (
                "previous never decreases",
                json!({"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 2}),
                pods_at([Some(2), Some(2), Some(2), Some(2), Some(2), None]),
                Unchanged,
            ),
            (
                "a Failed pod is left out of the attempts",
                json!({"currentInPlaceRestartAttempt": 0}),
                {
                    let mut p = all_at(0);
                    p.push(pod("js", "old").at(2).phase("Failed"));
                    p
                },
                Unchanged,
            ),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn restarts_beyond_max_restarts_fail_the_jobset() {
        use Outcome::*;
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "a worker restarted maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("worker", 2)],
                Unchanged,
            ),
            (
                "a worker restarted more than maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("worker", 3)],
                ReachedMaxRestarts,
            ),
            (
                "a sidecar restarted more than maxRestarts times",
                json!({}),
                vec![pod("js", "p").at(0).restart_count("agent", 3)],
                ReachedMaxRestarts,
            ),
            (
                "restart counts of a Failed pod count too",
                json!({}),
                vec![pod("js", "p").phase("Failed").restart_count("worker", 3)],
                ReachedMaxRestarts,
            ),
            ("an attempt at maxRestarts", json!({}), vec![pod("js", "p").at(2)], Previous(1)),
            ("an attempt beyond maxRestarts", json!({}), vec![pod("js", "p").at(3)], ReachedMaxRestarts),
            (
                "JobSet restarts that did not count towards maxRestarts are taken off the attempts",
                json!({"restarts": 2, "restartsCountTowardsMax": 1}),
                vec![pod("js", "p").at(3)],
                Previous(2),
            ),
            (
                "JobSet restarts that counted are not taken off",
                json!({"restarts": 1, "restartsCountTowardsMax": 1}),
                vec![pod("js", "p").at(3)],
                ReachedMaxRestarts,
            ),
            ("a Failed pod's attempt does not count", json!({}), vec![pod("js", "p").at(3).phase("Failed")], Unchanged),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn a_failed_worker_of_the_current_attempt_deprecates_it_at_once() {
        use Outcome::*;
        let current_0 = json!({"currentInPlaceRestartAttempt": 0});
        let with_first = |p: PodBuilder, rest: i32| {
            let mut pods = vec![p];
            pods.extend(all_at(rest).into_iter().skip(1));
            pods
        };
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Outcome)> = vec![
            (
                "a worker of the current attempt exited non-zero",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("worker", 1, 10), 0),
                Previous(0),
            ),
            (
                "a pod of the current attempt is restarting all its containers",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).all_restarting(true, 10), 0),
                Previous(0),
            ),
            (
                "a worker that succeeded",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("worker", 0, 10), 0),
                Unchanged,
            ),
            (
                "only a sidecar failed",
                current_0.clone(),
                with_first(pod("js", "p0").at(0).terminated("agent", 1, 10), 0),
                Unchanged,
            ),
            (
                "a failed worker while not every pod is there yet",
                current_0.clone(),
                vec![pod("js", "p0").at(0).terminated("worker", 1, 10)],
                Previous(0),
            ),
            (
                "a pod of an older attempt with a terminated worker",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(0).terminated("worker", 137, 10), 1),
                Unchanged,
            ),
            (
                "the current attempt is already deprecated",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(0).terminated("worker", 1, 10), 0),
                Unchanged,
            ),
            (
                "a worker failed before the pods became in sync at a new attempt",
                json!({"currentInPlaceRestartAttempt": 0, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 10), 1),
                Current(1),
            ),
            (
                "a terminated state left over from before the pod's in-place restart",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 10).all_restarting(false, 11), 1),
                Unchanged,
            ),
            (
                "a worker failed after the pod's in-place restart",
                json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}),
                with_first(pod("js", "p0").at(1).terminated("worker", 1, 12).all_restarting(false, 11), 1),
                Previous(1),
            ),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(outcome(&js(status), pods), want, "{name}");
        }
    }

    #[test]
    fn a_malformed_annotation_leaves_its_pod_out_and_is_reported() {
        let pods: Vec<Pod> = pods_at([Some(0); 6])
            .into_iter()
            .enumerate()
            .map(|(i, p)| match i {
                0 => p.annotate("x"),
                1 => p.annotate("-1"),
                _ => p,
            })
            .map(PodBuilder::obj)
            .collect();
        let d = decide(&js(json!({})), &pods.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(d.outcome, Outcome::Unchanged, "four of six pods annotated: not in sync");
        assert_eq!(d.malformed, [("p0", "x"), ("p1", "-1")]);
    }

    #[test]
    fn completions_unequal_to_parallelism_is_an_error() {
        let mut j = js(json!({}));
        j.spec.replicated_jobs[1].template.0["spec"]["completions"] = json!(3);
        let err = decide(&j, &[]).unwrap_err();
        assert_eq!(
            err,
            "ps: in-place restart requires jobTemplate.spec.completions == jobTemplate.spec.parallelism != nil"
        );
    }
}
