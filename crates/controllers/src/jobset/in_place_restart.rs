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

use std::collections::BTreeMap;

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
pub struct Decision<'t> {
    pub outcome: Outcome,
    /// Pods whose annotation is not a non-negative integer, as (pod, value). Upstream fails the
    /// reconcile over one; here the pod is left out (as if its agent had not annotated yet, which
    /// holds every barrier) and the caller logs it, so the rest of the reconcile and the other
    /// pods go on and a fixed annotation is picked up by the next reconcile.
    pub malformed: Vec<(&'t str, &'t str)>,
}

/// What one pod contributes to its JobSet's [`Tally`], read once per pod event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDigest {
    restart_count: i32,
    /// The attempt annotation of a pod that has not failed: parsed, or malformed as (pod, value).
    attempt: Option<Result<i32, (String, String)>>,
    worker_failed: bool,
    /// The pod's `Ready` condition is True (the restart record's `runningAt`, in place).
    ready: bool,
}

/// Counts over a JobSet's pods, kept up to date as pod events arrive (the pod index adds and
/// removes each pod's [`PodDigest`]), so a reconcile decides without reading thousands of pods:
/// in a group restart the controller reconciles for every burst of their events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// restartCount (the highest of each pod's containers) → pods.
    restart_counts: BTreeMap<i32, usize>,
    /// Attempt → pods at it (pods not Failed, with a well-formed annotation).
    attempts: BTreeMap<i32, usize>,
    /// Attempt → pods at it with a failed worker.
    failed_workers: BTreeMap<i32, usize>,
    /// Attempt → pods at it that are Ready.
    ready: BTreeMap<i32, usize>,
    /// Pod → its malformed annotation.
    malformed: BTreeMap<String, String>,
}

fn count(m: &mut BTreeMap<i32, usize>, k: i32, add: bool) {
    if add {
        *m.entry(k).or_default() += 1;
    } else if let Some(n) = m.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            m.remove(&k);
        }
    }
}

impl PodDigest {
    pub fn of(p: &Pod) -> PodDigest {
        let attempt = (phase(p) != Some("Failed"))
            .then(|| p.metadata.annotations.as_ref()?.get(IN_PLACE_RESTART_ATTEMPT))
            .flatten()
            .map(|v| {
                let name = || p.metadata.name.clone().unwrap_or_default();
                v.parse::<i32>().ok().filter(|a| *a >= 0).ok_or_else(|| (name(), v.clone()))
            });
        PodDigest {
            restart_count: restart_count(p),
            worker_failed: matches!(attempt, Some(Ok(_))) && worker_failed(p),
            ready: pod_ready(p),
            attempt,
        }
    }
}

impl Tally {
    /// The tally of `pods`, as the pod index keeps it.
    pub fn of<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> Tally {
        let mut t = Tally::default();
        pods.into_iter().for_each(|p| t.apply(&PodDigest::of(p), true));
        t
    }

    fn apply(&mut self, d: &PodDigest, add: bool) {
        count(&mut self.restart_counts, d.restart_count, add);
        match &d.attempt {
            Some(Ok(a)) => {
                count(&mut self.attempts, *a, add);
                if d.worker_failed {
                    count(&mut self.failed_workers, *a, add);
                }
                if d.ready {
                    count(&mut self.ready, *a, add);
                }
            }
            Some(Err((pod, v))) if add => {
                self.malformed.insert(pod.clone(), v.clone());
            }
            Some(Err((pod, _))) => {
                self.malformed.remove(pod);
            }
            None => {}
        }
    }
}

impl Tally {
    /// The lowest attempt any (not Failed, well-annotated) pod is at.
    pub fn lowest_attempt(&self) -> Option<i32> {
        self.attempts.first_key_value().map(|(a, _)| *a)
    }

    /// Whether a pod at `attempt` shows a failed worker.
    pub fn worker_failed_at(&self, attempt: i32) -> bool {
        self.failed_workers.contains_key(&attempt)
    }

    /// The Ready pods at `attempt`.
    pub fn ready_at(&self, attempt: i32) -> usize {
        self.ready.get(&attempt).copied().unwrap_or(0)
    }
}

impl crate::pod_index::Summary for Tally {
    type Digest = PodDigest;
    fn digest(p: &Pod) -> PodDigest {
        PodDigest::of(p)
    }
    fn add(&mut self, d: &PodDigest) {
        self.apply(d, true);
    }
    fn remove(&mut self, d: &PodDigest) {
        self.apply(d, false);
    }
}

/// Decides from the JobSet (spec and current status) and the tally of all its pods.
pub fn decide<'t>(js: &JobSet, tally: &'t Tally) -> Result<Decision<'t>, String> {
    let max_restarts = js.spec.failure_policy.as_ref().map(|f| f.max_restarts).unwrap_or(0);
    let none = JobSetStatus::default();
    let status = js.status.as_ref().unwrap_or(&none);
    let (current, previous) = (status.current_in_place_restart_attempt, status.previous_in_place_restart_attempt);
    if tally.restart_counts.last_key_value().is_some_and(|(rc, _)| *rc > max_restarts) {
        return Ok(Decision { outcome: Outcome::ReachedMaxRestarts, malformed: vec![] });
    }
    let malformed = tally.malformed.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    let mut d = Decision { outcome: Outcome::Unchanged, malformed };
    let max = tally.attempts.last_key_value().map_or(0, |(a, _)| *a);
    // In-place attempts include the JobSet restarts that recreated the pods; those that did not
    // count towards maxRestarts do not count here either.
    let not_counted = i64::from(status.restarts) - i64::from(status.restarts_count_towards_max);
    if i64::from(max) - not_counted > i64::from(max_restarts) {
        d.outcome = Outcome::ReachedMaxRestarts;
        return Ok(d);
    }

    let total = expected_pods(js)?;
    let annotated: usize = tally.attempts.values().sum();
    // The attempt every pod is at, if they all are at the same one.
    let in_sync = (tally.attempts.len() == 1 && annotated as i64 == total).then_some(max);
    if let Some(a) = in_sync
        && current != Some(a)
    {
        d.outcome = Outcome::Current(a);
        return Ok(d);
    }
    let current_failed = current.is_some_and(|c| tally.failed_workers.contains_key(&c));
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

fn pod_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The highest `restartCount` of any container of the pod, init containers and sidecars included.
fn restart_count(p: &Pod) -> i32 {
    let Some(s) = p.status.as_ref() else { return 0 };
    s.init_container_statuses.iter().chain(&s.container_statuses).flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

/// Σ replicas × parallelism; in-place restart needs `completions == parallelism`, both set.
pub fn expected_pods(js: &JobSet) -> Result<i64, String> {
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
/// A pod being deleted has not failed: its workers are being killed (e.g. by the Job controller
/// when another pod failed its Job, which the failure policy then handles).
fn worker_failed(p: &Pod) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    if p.metadata.deletion_timestamp.is_some() {
        return false;
    }
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
        decide(js, &Tally::of(&pods)).unwrap().outcome
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
                "a worker killed because its pod is being deleted",
                current_0.clone(),
                with_first(
                    {
                        let mut p = pod("js", "p0").at(0).terminated("worker", 143, 10);
                        p.0.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            jiff::Timestamp::from_second(10).unwrap(),
                        ));
                        p
                    },
                    0,
                ),
                Unchanged,
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
        let tally = Tally::of(&pods);
        let d = decide(&js(json!({})), &tally).unwrap();
        assert_eq!(d.outcome, Outcome::Unchanged, "four of six pods annotated: not in sync");
        assert_eq!(d.malformed, [("p0", "x"), ("p1", "-1")]);
    }

    #[test]
    fn the_tally_counts_ready_pods_and_the_lowest_attempt() {
        let pods: Vec<Pod> = [pod("js", "a").at(1).ready(), pod("js", "b").at(2).ready(), pod("js", "c").at(2)]
            .into_iter()
            .map(PodBuilder::obj)
            .collect();
        let t = Tally::of(&pods);
        assert_eq!((t.ready_at(1), t.ready_at(2), t.ready_at(3)), (1, 1, 0));
        assert_eq!(t.lowest_attempt(), Some(1));
        assert_eq!(Tally::default().lowest_attempt(), None);
    }

    #[test]
    fn a_pod_removed_from_the_tally_leaves_it_as_if_it_had_never_been_counted() {
        let base: Vec<Pod> = all_at(1).into_iter().map(PodBuilder::obj).collect();
        let extras = [
            pod("js", "x").at(1).terminated("worker", 3, 10),
            pod("js", "x").annotate("x"),
            pod("js", "x").at(4).restart_count("worker", 7),
            pod("js", "x").at(2).phase("Failed"),
            pod("js", "x").at(3).ready(),
        ];
        for extra in extras {
            let extra = PodDigest::of(&extra.obj());
            let mut t = Tally::of(&base);
            crate::pod_index::Summary::add(&mut t, &extra);
            assert_ne!(t, Tally::of(&base), "{extra:?} is counted");
            crate::pod_index::Summary::remove(&mut t, &extra);
            assert_eq!(t, Tally::of(&base), "{extra:?} is uncounted");
        }
    }

    #[test]
    fn completions_unequal_to_parallelism_is_an_error() {
        let mut j = js(json!({}));
        j.spec.replicated_jobs[1].template.0["spec"]["completions"] = json!(3);
        let err = decide(&j, &Tally::default()).unwrap_err();
        assert_eq!(
            err,
            "ps: in-place restart requires jobTemplate.spec.completions == jobTemplate.spec.parallelism != nil"
        );
    }
}
