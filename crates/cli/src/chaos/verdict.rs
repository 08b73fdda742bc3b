//! Whether a chaos run ended as the fault-free run does: the comparison, a pure function of what
//! the driver observed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// A workload's final status: what must be the same with and without faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndState {
    /// The JobSet's terminal condition (`Completed` or `Failed`) and its reason.
    pub condition: String,
    pub reason: String,
    /// `status.restarts` (Recreate restarts).
    pub restarts: i64,
    /// `status.currentInPlaceRestartAttempt` (in-place restarts; `None` when never set).
    pub in_place_attempt: Option<i64>,
    /// The wrapping AppWrapper's `status.phase` and `status.retries` (AppWrapper variant).
    pub wrapper: Option<(String, i64)>,
}

impl fmt::Display for EndState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}), restarts {}", self.condition, self.reason, self.restarts)?;
        if let Some(a) = self.in_place_attempt {
            write!(f, ", in-place attempt {a}")?;
        }
        if let Some((phase, retries)) = &self.wrapper {
            write!(f, ", AppWrapper {phase} with {retries} retries")?;
        }
        Ok(())
    }
}

/// The final status of JobSet `js` and of the AppWrapper `wrapper` around it: `None` while the
/// JobSet has no terminal condition (`Completed` or `Failed`, status True).
pub fn end_state(js: &Value, wrapper: Option<&Value>) -> Option<EndState> {
    let status = js.get("status")?;
    let terminal = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| matches!(c["type"].as_str(), Some("Completed" | "Failed")) && c["status"] == "True")?;
    Some(EndState {
        condition: terminal["type"].as_str()?.into(),
        reason: terminal["reason"].as_str().unwrap_or_default().into(),
        restarts: status["restarts"].as_i64().unwrap_or(0),
        in_place_attempt: status["currentInPlaceRestartAttempt"].as_i64(),
        wrapper: wrapper.map(|w| {
            let phase = w.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default().to_string();
            (phase, w.pointer("/status/retries").and_then(Value::as_i64).unwrap_or(0))
        }),
    })
}

/// A pod the driver's watch saw, merged over its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSeen {
    pub uid: String,
    /// Its Job (`batch.kubernetes.io/job-name`) and that Job's UID, its JobSet restart attempt and
    /// its completion index.
    pub job: String,
    pub job_uid: String,
    pub attempt: String,
    pub index: String,
    /// The resourceVersion of the first version seen (its creation, when the watch was up).
    pub first_rv: u64,
    /// The resourceVersion of the first version seen terminal (Succeeded or Failed) or
    /// terminating (a deletionTimestamp): from then on the Job may replace it. `None`: never seen
    /// ending (still active at the end, or it ended while the watch was down).
    pub end_rv: Option<u64>,
    /// It was first seen ended in a list after a gap of the watch (a restart of `jobset up`):
    /// when it ended is not known, so it is not compared.
    pub end_in_gap: bool,
    /// The in-place restart attempt (annotation) of a version seen lost: with the condition
    /// `DisruptionTarget` (a lost node); or, for a pod lost in a gap of the watch, the highest
    /// attempt it may have been at ([`lost_in_gaps`]).
    pub lost_at_attempt: Option<i64>,
    /// The resourceVersions of the first versions seen lost (`DisruptionTarget`) and `Succeeded`.
    pub lost_rv: Option<u64>,
    pub succeeded_rv: Option<u64>,
}

impl PodSeen {
    /// Merges a later version of the same pod.
    pub fn merge(&mut self, later: &PodSeen) {
        self.first_rv = self.first_rv.min(later.first_rv);
        self.lost_at_attempt = self.lost_at_attempt.max(later.lost_at_attempt);
        self.lost_rv = first_of(self.lost_rv, later.lost_rv);
        self.succeeded_rv = first_of(self.succeeded_rv, later.succeeded_rv);
        if self.end_in_gap {
            return;
        }
        self.end_rv = match (self.end_rv, later.end_rv) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (Some(a), None) => Some(a),
            (None, _) if later.end_in_gap => {
                self.end_in_gap = true;
                None
            }
            (None, b) => b,
        };
    }
}

/// The earlier of two resourceVersions, either of which may be unknown.
fn first_of(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A pod the watch saw active before a gap (a restart of `jobset up`) and deleted or `Failed`
/// after it, with no version in between: whether it was lost with its node is not seen.
/// Times are seconds since the run began.
#[derive(Debug, Clone, PartialEq)]
pub struct GapEnd {
    pub uid: String,
    /// The node of its last version seen active, and when that version was seen.
    pub node: String,
    pub last_active: f64,
    /// When the watch listed again.
    pub relisted: f64,
    /// The highest in-place attempt it may have reached: the most of its last attempt seen and
    /// those of the pods listed after the gap.
    pub attempt: Option<i64>,
}

/// A node the driver failed (`jobset node fail`), from `from` to `until` seconds since the run
/// began; `until` includes the time the control plane may take to act on the loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    pub node: String,
    pub from: f64,
    pub until: f64,
}

/// The pods of `ends` lost with a node the driver failed, and the in-place attempt each may
/// have been lost at: a pod whose node was down at some instant between its last version seen
/// active and the list after the gap (it may have been lost and removed then). A pod that ended
/// in a gap on a node that was never down, or not while the pod could have been lost, is not:
/// its end is the product's doing, and an attempt it added diverges.
pub fn lost_in_gaps(ends: &[GapEnd], outages: &[Outage]) -> Vec<(String, i64)> {
    ends.iter()
        .filter(|e| outages.iter().any(|o| o.node == e.node && o.from < e.relisted && e.last_active < o.until))
        .filter_map(|e| Some((e.uid.clone(), e.attempt?)))
        .collect()
}

/// A pod lost (with its node) after another pod of the run had `Succeeded`, by resourceVersion:
/// in place, the lost pod's replacement waits at the barrier for every pod to join its attempt,
/// which a `Succeeded` pod never does, so the run cannot end (upstream's in-place restart has the
/// same limit). The fault-free end state is not defined there. `(lost, succeeded)` pod UIDs.
pub fn lost_after_success(pods: &[PodSeen]) -> Option<(String, String)> {
    let done = pods.iter().filter_map(|p| Some((p.succeeded_rv?, p))).min_by_key(|(rv, _)| *rv)?;
    let lost = pods.iter().find(|p| p.uid != done.1.uid && p.lost_rv.is_some_and(|l| l > done.0))?;
    Some((lost.uid.clone(), done.1.uid.clone()))
}

/// A Job the driver's watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSeen {
    pub uid: String,
    pub name: String,
    /// Its `jobset.sigs.k8s.io/restart-attempt` label.
    pub attempt: String,
}

/// Everything a run observed.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The final status, `None` if the workload did not finish in time.
    pub end: Option<EndState>,
    pub pods: Vec<PodSeen>,
    pub jobs: Vec<JobSeen>,
    /// Objects whose creation the API server acknowledged, and those present at the end.
    pub acknowledged: Vec<String>,
    pub present: BTreeSet<String>,
    /// Host processes of the run still alive after `jobset up` stopped (pid and command line).
    pub orphans: Vec<String>,
    /// Pods whose end fell into a gap of the watch, and the nodes the driver failed.
    pub gap_ends: Vec<GapEnd>,
    pub outages: Vec<Outage>,
}

/// The in-place end state to compare `got` with, once lost pods are taken into account. A pod
/// lost with its node is replaced, and the new pod's agent announces one past the attempts of
/// the JobSet's status, which restarts every other pod in place (upstream's in-place restart: a
/// recreated pod joins at `current + 1`). Before the last failing attempt that changes nothing
/// (the workers key on the attempt number: a loss only ends a failing attempt early); at or past
/// it, each attempt that ended with a lost pod may add one (not when the pod was lost before the
/// status reached its attempt: its replacement announces that attempt again). So the attempt
/// `got` may lie between the expected one and that plus the attempts with a lost pod.
pub fn with_lost_pods(expected: &EndState, pods: &[PodSeen], got: Option<&EndState>) -> EndState {
    let Some(base) = expected.in_place_attempt else { return expected.clone() };
    let lost: BTreeSet<i64> = pods.iter().filter_map(|p| p.lost_at_attempt).filter(|a| *a >= base).collect();
    let most = base + lost.len() as i64;
    let attempt = match got.and_then(|g| g.in_place_attempt) {
        Some(g) if (base..=most).contains(&g) => g,
        Some(g) if g > most => most,
        _ => base,
    };
    EndState { in_place_attempt: Some(attempt), ..expected.clone() }
}

/// How a run differs from the fault-free run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Divergence {
    NotFinished {
        expected: EndState,
    },
    EndState {
        expected: EndState,
        got: EndState,
    },
    JobCreatedTwice {
        name: String,
        attempt: String,
        uids: usize,
    },
    /// A pod created for a Job's index while an earlier pod of that index was still active.
    PodCreatedTwice {
        job: String,
        attempt: String,
        index: String,
        active: String,
        created: String,
    },
    LostWrites(Vec<String>),
    Orphans(Vec<String>),
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::NotFinished { expected } => write!(f, "did not finish (expected {expected})"),
            Divergence::EndState { expected, got } => write!(f, "ended {got}, expected {expected}"),
            Divergence::JobCreatedTwice { name, attempt, uids } => {
                write!(f, "Job {name} created {uids} times for restart attempt {attempt}")
            }
            Divergence::PodCreatedTwice { job, attempt, index, active, created } => write!(
                f,
                "pod {created} created for index {index} of Job {job} (restart attempt {attempt}) \
                 while pod {active} was active"
            ),
            Divergence::LostWrites(names) => write!(f, "acknowledged writes lost: {}", names.join(", ")),
            Divergence::Orphans(procs) => write!(f, "orphan processes: {}", procs.join("; ")),
        }
    }
}

/// The ways `observed` differs from a run that ended in `expected`: the final status (condition,
/// reason, restart counts), a Job created twice for one restart attempt, a pod created for a
/// Job's index while the previous one was still active (neither terminal nor terminating: the
/// Job replaces a pod only once it failed or is deleted), an acknowledged write missing, an
/// orphan process. Pods whose end the watch missed are not compared. The expected in-place
/// attempt counts the group restarts of lost nodes ([`with_lost_pods`]), pods lost in a gap of
/// the watch with a node the driver failed among them ([`lost_in_gaps`]); an in-place run that
/// did not finish because a pod was lost after another one succeeded ([`lost_after_success`])
/// has no defined end to compare.
pub fn divergences(expected: &EndState, observed: &Observed) -> Vec<Divergence> {
    let mut out = Vec::new();
    let mut pods = observed.pods.clone();
    for (uid, attempt) in lost_in_gaps(&observed.gap_ends, &observed.outages) {
        if let Some(p) = pods.iter_mut().find(|p| p.uid == uid) {
            p.lost_at_attempt = p.lost_at_attempt.max(Some(attempt));
        }
    }
    // In place, a run that cannot end for a pod lost after another succeeded has no defined end.
    let undefined = expected.in_place_attempt.is_some() && lost_after_success(&pods).is_some();
    let expected = &with_lost_pods(expected, &pods, observed.end.as_ref());
    match &observed.end {
        None if undefined => {}
        None => out.push(Divergence::NotFinished { expected: expected.clone() }),
        Some(got) if got != expected => out.push(Divergence::EndState { expected: expected.clone(), got: got.clone() }),
        Some(_) => {}
    }
    let mut jobs: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for j in &observed.jobs {
        jobs.entry((&j.name, &j.attempt)).or_default().insert(&j.uid);
    }
    for ((name, attempt), uids) in jobs {
        if uids.len() > 1 {
            out.push(Divergence::JobCreatedTwice { name: name.into(), attempt: attempt.into(), uids: uids.len() });
        }
    }
    let mut pods: BTreeMap<(&str, &str), Vec<&PodSeen>> = BTreeMap::new();
    for p in &observed.pods {
        pods.entry((&p.job_uid, &p.index)).or_default().push(p);
    }
    for mut same in pods.into_values() {
        same.sort_by_key(|p| p.first_rv);
        for (i, earlier) in same.iter().enumerate() {
            let Some(end) = earlier.end_rv else { continue };
            if let Some(later) = same[i + 1..].iter().find(|l| l.first_rv < end) {
                out.push(Divergence::PodCreatedTwice {
                    job: earlier.job.clone(),
                    attempt: earlier.attempt.clone(),
                    index: earlier.index.clone(),
                    active: earlier.uid.clone(),
                    created: later.uid.clone(),
                });
            }
        }
    }
    let lost: Vec<String> = observed.acknowledged.iter().filter(|n| !observed.present.contains(*n)).cloned().collect();
    if !lost.is_empty() {
        out.push(Divergence::LostWrites(lost));
    }
    if !observed.orphans.is_empty() {
        out.push(Divergence::Orphans(observed.orphans.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(restarts: i64) -> EndState {
        EndState {
            condition: "Completed".into(),
            reason: "AllJobsCompleted".into(),
            restarts,
            in_place_attempt: None,
            wrapper: None,
        }
    }

    /// A pod of Job `js-w-0` (UID `j<attempt>`) seen from `first` to its end at `end`.
    fn pod(uid: &str, index: &str, attempt: &str, first: u64, end: Option<u64>) -> PodSeen {
        PodSeen {
            uid: uid.into(),
            job: "js-w-0".into(),
            job_uid: format!("j{attempt}"),
            attempt: attempt.into(),
            index: index.into(),
            first_rv: first,
            end_rv: end,
            end_in_gap: false,
            lost_at_attempt: None,
            lost_rv: None,
            succeeded_rv: None,
        }
    }

    fn job(uid: &str, attempt: &str) -> JobSeen {
        JobSeen { uid: uid.into(), name: "js-w-0".into(), attempt: attempt.into() }
    }

    fn clean() -> Observed {
        Observed {
            end: Some(completed(2)),
            pods: vec![
                pod("a", "0", "0", 10, Some(20)),
                pod("b", "0", "1", 30, Some(40)),
                pod("c", "0", "2", 50, None),
            ],
            jobs: vec![job("j0", "0"), job("j1", "1"), job("j2", "2")],
            acknowledged: vec!["ack-0".into(), "ack-1".into()],
            present: ["ack-0".to_string(), "ack-1".to_string(), "ack-2".to_string()].into(),
            orphans: vec![],
            gap_ends: vec![],
            outages: vec![],
        }
    }

    #[test]
    fn a_run_like_the_fault_free_one_has_no_divergence() {
        assert_eq!(divergences(&completed(2), &clean()), []);
        // A pod replaced once it ended (failed, or deleted by a lost node's eviction); another
        // index at the same time; a pod whose end was not seen.
        let mut o = clean();
        o.pods.extend([pod("a2", "0", "0", 20, Some(25)), pod("a3", "0", "0", 26, None), pod("x", "1", "0", 11, None)]);
        o.pods.push(pod("y", "1", "0", 12, None));
        assert_eq!(divergences(&completed(2), &o), []);
    }

    #[test]
    fn versions_of_a_pod_merge_to_its_first_sighting_and_first_end() {
        let mut p = pod("a", "0", "0", 30, None);
        p.merge(&pod("a", "0", "0", 35, Some(40)));
        p.merge(&pod("a", "0", "0", 45, Some(45)));
        assert_eq!((p.first_rv, p.end_rv), (30, Some(40)));
        let gap = |rv: u64| PodSeen { end_in_gap: true, ..pod("a", "0", "0", rv, None) };
        // First seen ended in a list after a gap: when it ended is unknown, whatever follows.
        let mut p = pod("a", "0", "0", 30, None);
        p.merge(&gap(50));
        p.merge(&pod("a", "0", "0", 55, Some(55)));
        assert_eq!((p.end_rv, p.end_in_gap), (None, true), "its end fell into the gap");
        let mut p = pod("a", "0", "0", 30, Some(40));
        p.merge(&gap(50));
        assert_eq!((p.end_rv, p.end_in_gap), (Some(40), false), "its end was seen before the gap");
        // Not compared: a pod created before the version listed is no second pod.
        let mut o = clean();
        o.pods[2] = PodSeen { end_in_gap: true, ..pod("c", "0", "2", 50, None) };
        o.pods.push(pod("c2", "0", "2", 45, None));
        assert_eq!(divergences(&completed(2), &o), []);
    }

    #[test]
    fn each_difference_is_a_divergence() {
        type Case = (&'static str, fn(&mut Observed), Divergence);
        let table: [Case; 7] = [
            ("not finished", |o| o.end = None, Divergence::NotFinished { expected: completed(2) }),
            (
                "one restart more",
                |o| o.end = Some(completed(3)),
                Divergence::EndState { expected: completed(2), got: completed(3) },
            ),
            (
                "another reason",
                |o| o.end.as_mut().unwrap().reason = "FailedJobs".into(),
                Divergence::EndState {
                    expected: completed(2),
                    got: EndState { reason: "FailedJobs".into(), ..completed(2) },
                },
            ),
            (
                "a Job created twice for an attempt",
                |o| o.jobs.push(job("j1b", "1")),
                Divergence::JobCreatedTwice { name: "js-w-0".into(), attempt: "1".into(), uids: 2 },
            ),
            (
                "a second pod for an index while the first was active",
                |o| o.pods.push(pod("b2", "0", "1", 35, Some(45))),
                Divergence::PodCreatedTwice {
                    job: "js-w-0".into(),
                    attempt: "1".into(),
                    index: "0".into(),
                    active: "b".into(),
                    created: "b2".into(),
                },
            ),
            ("a lost write", |o| o.acknowledged.push("ack-9".into()), Divergence::LostWrites(vec!["ack-9".into()])),
            ("an orphan", |o| o.orphans.push("123 sleep 5".into()), Divergence::Orphans(vec!["123 sleep 5".into()])),
        ];
        for (what, change, want) in table {
            let mut o = clean();
            change(&mut o);
            assert_eq!(divergences(&completed(2), &o), [want], "{what}");
        }
    }

    #[test]
    fn restart_counts_in_place_attempts_and_the_wrapper_must_all_match() {
        let expected = EndState { in_place_attempt: Some(2), wrapper: Some(("Succeeded".into(), 0)), ..completed(0) };
        let mut o = clean();
        o.end = Some(expected.clone());
        assert_eq!(divergences(&expected, &o), []);
        for got in [
            EndState { in_place_attempt: Some(3), ..expected.clone() },
            EndState { in_place_attempt: None, ..expected.clone() },
            EndState { wrapper: Some(("Succeeded".into(), 1)), ..expected.clone() },
            EndState { wrapper: Some(("Failed".into(), 0)), ..expected.clone() },
        ] {
            o.end = Some(got.clone());
            assert_eq!(divergences(&expected, &o), [Divergence::EndState { expected: expected.clone(), got }]);
        }
    }

    #[test]
    fn each_in_place_attempt_from_the_last_failing_one_on_that_lost_a_pod_may_add_one() {
        let lost =
            |uid: &str, attempt: Option<i64>| PodSeen { lost_at_attempt: attempt, ..pod(uid, "0", "0", 1, Some(2)) };
        let in_place = EndState { in_place_attempt: Some(2), ..completed(0) };
        let got = |a: i64| EndState { in_place_attempt: Some(a), ..completed(0) };
        // (case, lost pods, the attempt ended at, the attempt expected)
        let cases: Vec<(&str, Vec<PodSeen>, i64, i64)> = vec![
            ("no pod lost", vec![lost("a", None)], 2, 2),
            ("no pod lost, one attempt too many", vec![lost("a", None)], 3, 2),
            (
                "lost during a failing attempt: it only ends it early",
                vec![lost("a", Some(0)), lost("b", Some(1))],
                3,
                2,
            ),
            ("lost during the last attempt, which it restarted", vec![lost("a", Some(2))], 3, 3),
            ("lost during the last attempt before the status reached it", vec![lost("a", Some(2))], 2, 2),
            ("two pods lost in one attempt: one group restart", vec![lost("a", Some(2)), lost("b", Some(2))], 4, 3),
            ("lost in two attempts", vec![lost("a", Some(2)), lost("b", Some(3))], 4, 4),
            ("fewer than the attempts allow is too few still", vec![lost("a", Some(2))], 1, 2),
        ];
        for (name, pods, ended, want) in cases {
            assert_eq!(with_lost_pods(&in_place, &pods, Some(&got(ended))).in_place_attempt, Some(want), "{name}");
        }
        let recreate = completed(2);
        assert_eq!(with_lost_pods(&recreate, &[lost("a", Some(2))], Some(&got(3))), recreate, "no in-place attempt");
        assert_eq!(with_lost_pods(&in_place, &[lost("a", Some(2))], None), in_place, "not finished");
        // The verdict takes them into account.
        let mut o = clean();
        o.pods.push(lost("z", Some(2)));
        o.end = Some(got(3));
        assert_eq!(divergences(&in_place, &o), []);
        o.end = Some(got(4));
        assert_eq!(divergences(&in_place, &o), [Divergence::EndState { expected: got(3), got: got(4) }]);
    }

    #[test]
    fn a_pod_ended_in_a_gap_is_lost_only_if_the_driver_failed_its_node_while_it_could_have_been_lost() {
        let end = |node: &str, last_active: f64, relisted: f64, attempt: Option<i64>| GapEnd {
            uid: "a".into(),
            node: node.into(),
            last_active,
            relisted,
            attempt,
        };
        let outage = Outage { node: "node-1".into(), from: 2.0, until: 5.0 };
        // (case, the pod's end, lost at)
        let cases: Vec<(&str, GapEnd, Option<i64>)> = vec![
            ("its node was down before the list", end("node-1", 1.0, 3.0, Some(2)), Some(2)),
            ("down since before it was last seen active", end("node-1", 4.0, 6.0, Some(2)), Some(2)),
            ("another node was down", end("node-0", 1.0, 3.0, Some(2)), None),
            ("its node went down after the list", end("node-1", 0.5, 1.5, Some(2)), None),
            ("its node was back before it was last seen active", end("node-1", 5.5, 7.0, Some(2)), None),
            ("no attempt known", end("node-1", 1.0, 3.0, None), None),
        ];
        for (case, e, want) in cases {
            let got = lost_in_gaps(std::slice::from_ref(&e), std::slice::from_ref(&outage));
            assert_eq!(got.first().map(|(_, a)| *a), want, "{case}");
        }
        // The verdict: the attempt a pod lost in a gap adds is allowed with its failed node
        // only; an attempt too many with no pod lost still diverges.
        let in_place = EndState { in_place_attempt: Some(2), ..completed(0) };
        let got3 = EndState { in_place_attempt: Some(3), ..completed(0) };
        let mut o = clean();
        o.end = Some(got3.clone());
        o.outages = vec![outage];
        let too_many = vec![Divergence::EndState { expected: in_place.clone(), got: got3.clone() }];
        assert_eq!(divergences(&in_place, &o), too_many, "no pod ended in a gap");
        o.gap_ends = vec![end("node-0", 1.0, 3.0, Some(2))];
        assert_eq!(divergences(&in_place, &o), too_many, "ended in a gap on a node never failed");
        o.gap_ends = vec![end("node-1", 1.0, 3.0, Some(2))];
        assert_eq!(divergences(&in_place, &o), [], "ended in a gap while its node was failed");
    }

    #[test]
    fn in_place_a_pod_lost_after_another_succeeded_leaves_the_end_undefined() {
        let at = |uid: &str, succeeded: Option<u64>, lost: Option<u64>| PodSeen {
            succeeded_rv: succeeded,
            lost_rv: lost,
            ..pod(uid, uid, "0", 1, Some(2))
        };
        // (case, pods, (lost, succeeded))
        type Case = (&'static str, Vec<PodSeen>, Option<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                "lost after the other succeeded",
                vec![at("a", Some(10), None), at("b", None, Some(12))],
                Some(("b", "a")),
            ),
            ("lost before", vec![at("a", Some(10), None), at("b", None, Some(8))], None),
            ("none succeeded", vec![at("a", None, None), at("b", None, Some(8))], None),
            ("none lost", vec![at("a", Some(10), None), at("b", Some(11), None)], None),
        ];
        for (case, pods, want) in cases {
            let got = lost_after_success(&pods);
            assert_eq!(got.as_ref().map(|(l, s)| (l.as_str(), s.as_str())), want, "{case}");
        }
        // Not finishing is then no divergence, in place only; ending wrong still is.
        let mut o = clean();
        o.pods.extend([at("a", Some(10), None), at("b", None, Some(12))]);
        o.end = None;
        let in_place = EndState { in_place_attempt: Some(2), ..completed(0) };
        assert_eq!(divergences(&in_place, &o), []);
        assert_eq!(divergences(&completed(2), &o), [Divergence::NotFinished { expected: completed(2) }]);
        o.end = Some(EndState { in_place_attempt: Some(5), ..completed(0) });
        assert_eq!(divergences(&in_place, &o).len(), 1);
    }

    #[test]
    fn the_end_state_is_read_from_the_terminal_condition_only() {
        let js = |conds: Value| serde_json::json!({"status": {"restarts": 2, "conditions": conds}});
        let restarting = serde_json::json!({"type": "RestartingJobSet", "status": "True", "reason": "JobsReady"});
        let done = serde_json::json!({"type": "Completed", "status": "True", "reason": "AllJobsCompleted"});
        let failed_false = serde_json::json!({"type": "Failed", "status": "False", "reason": "X"});
        assert_eq!(end_state(&js(serde_json::json!([restarting])), None), None, "not finished");
        assert_eq!(end_state(&js(serde_json::json!([failed_false])), None), None, "a False condition");
        assert_eq!(end_state(&serde_json::json!({}), None), None, "no status");
        assert_eq!(end_state(&js(serde_json::json!([restarting, done])), None), Some(completed(2)));
        let aw = serde_json::json!({"status": {"phase": "Succeeded", "retries": 1}});
        let got = end_state(&js(serde_json::json!([done])), Some(&aw)).unwrap();
        assert_eq!(got.wrapper, Some(("Succeeded".into(), 1)));
        let in_place = serde_json::json!({"status": {"currentInPlaceRestartAttempt": 2, "conditions": [done]}});
        assert_eq!(end_state(&in_place, None).unwrap().in_place_attempt, Some(2));
    }

    #[test]
    fn divergences_say_what_differs() {
        let d = Divergence::PodCreatedTwice {
            job: "j".into(),
            attempt: "1".into(),
            index: "0".into(),
            active: "a".into(),
            created: "b".into(),
        };
        assert_eq!(d.to_string(), "pod b created for index 0 of Job j (restart attempt 1) while pod a was active");
        let e = Divergence::EndState { expected: completed(2), got: completed(3) };
        assert_eq!(
            e.to_string(),
            "ended Completed (AllJobsCompleted), restarts 3, expected Completed (AllJobsCompleted), restarts 2"
        );
    }
}
