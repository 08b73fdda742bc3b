//! Child Jobs of a JobSet: which attempt each belongs to, whether it finished, and the
//! `replicatedJobsStatus` counts upstream derives from them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jobset_api::jobset::keys::{
    JOB_INDEX, JOB_RESTART_ATTEMPT, REPLICATED_JOB_NAME, REPLICATED_JOB_RESTART_ATTEMPT, RESTART_ATTEMPT,
};
use jobset_api::jobset::{JobSet, JobSetStatus, ReplicatedJobStatus};
use k8s_openapi::api::batch::v1::Job;

/// A child Job with the labels the controller reads, parsed.
#[derive(Debug, Clone)]
pub struct Child<'a> {
    pub job: &'a Job,
    pub name: &'a str,
    pub rjob: Option<&'a str>,
    pub index: Option<i32>,
}

impl<'a> Child<'a> {
    pub fn of(job: &'a Job) -> Child<'a> {
        let labels = job.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        Child {
            job,
            name: job.metadata.name.as_deref().unwrap_or_default(),
            rjob: label(REPLICATED_JOB_NAME).filter(|s| !s.is_empty()),
            index: label(JOB_INDEX).and_then(|s| s.parse().ok()),
        }
    }

    /// How the Job ended: `Complete=True`, else `FailureTarget=True`, else `Failed=True`.
    /// `FailureTarget` counts as failed (upstream issue #979): the Job controller has decided the
    /// failure and only waits for its pods to terminate, so the failure policy need not wait. It
    /// is read before `Failed` because it stays True once `Failed` arrives (same reason and
    /// message, earlier time): the failure reads the same before and after.
    pub fn finished(&self) -> Option<Finished<'a>> {
        let conds = self.job.status.as_ref()?.conditions.as_ref()?;
        let on = |t: &str| conds.iter().find(|c| c.type_ == t && c.status == "True");
        let (c, failed) = match on("Complete") {
            Some(c) => (c, false),
            None => (on("FailureTarget").or_else(|| on("Failed"))?, true),
        };
        Some(Finished {
            failed,
            reason: c.reason.as_deref().unwrap_or_default(),
            message: c.message.as_deref().unwrap_or_default(),
            at: c.last_transition_time.as_ref().map(|t| t.0).unwrap_or_default(),
        })
    }

    pub fn deleting(&self) -> bool {
        self.job.metadata.deletion_timestamp.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished<'a> {
    pub failed: bool,
    pub reason: &'a str,
    pub message: &'a str,
    pub at: Timestamp,
}

/// The child Jobs sorted as upstream's `getChildJobs` does.
#[derive(Debug, Default)]
pub struct Classified<'a> {
    pub active: Vec<Child<'a>>,
    pub successful: Vec<Child<'a>>,
    pub failed: Vec<Child<'a>>,
    /// Jobs of an earlier attempt (of the JobSet, of their replicated job or of themselves).
    pub previous: Vec<Child<'a>>,
}

impl<'a> Classified<'a> {
    /// Every Job of the current attempt.
    pub fn current(&self) -> impl Iterator<Item = &Child<'a>> {
        self.active.iter().chain(&self.successful).chain(&self.failed)
    }
    /// Whether a Job of that name exists in any list (then it is not created again).
    pub fn exists(&self, name: &str) -> bool {
        self.current().chain(&self.previous).any(|c| c.name == name)
    }
}

/// Whether labels (of a Job or a pod) name an attempt older than the JobSet's: of the JobSet
/// (`restart-attempt`), of the Job (`job-restart-attempt`) or of its replicated job
/// (`replicatedjob-restart-attempt`). Absent per-Job/per-replicated-job labels are not stale.
pub fn stale(status: &JobSetStatus, labels: &BTreeMap<String, String>, what: &str) -> Result<bool, String> {
    let parse = |key: &str| -> Result<Option<i32>, String> {
        match labels.get(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| format!("{what}: label {key} is not an integer: {v:?}")),
        }
    };
    let attempt = parse(RESTART_ATTEMPT)?.ok_or_else(|| format!("{what}: missing label {RESTART_ATTEMPT}"))?;
    let rj_status =
        labels.get(REPLICATED_JOB_NAME).and_then(|r| status.replicated_jobs_status.iter().find(|s| &s.name == r));
    let mut stale = attempt < status.restarts;
    if let Some(job_attempt) = parse(JOB_RESTART_ATTEMPT)?
        && let (Some(rs), Some(i)) = (rj_status, labels.get(JOB_INDEX).and_then(|i| i.parse::<usize>().ok()))
    {
        stale |= job_attempt < rs.job_restarts.get(i).copied().unwrap_or(0);
    }
    if let Some(rj_attempt) = parse(REPLICATED_JOB_RESTART_ATTEMPT)?
        && let Some(rs) = rj_status
    {
        stale |= rj_attempt < rs.restarts;
    }
    Ok(stale)
}

/// Classifies each Job (upstream's `getChildJobs`): stale labels make it `previous`, else its
/// finished condition decides. A Job without a `restart-attempt` label is an error, as upstream.
pub fn classify<'a>(js: &JobSet, jobs: &[&'a Job]) -> Result<Classified<'a>, String> {
    let none = JobSetStatus::default();
    let status = js.status.as_ref().unwrap_or(&none);
    let empty = BTreeMap::new();
    let mut out = Classified::default();
    for job in jobs {
        let c = Child::of(job);
        if stale(status, job.metadata.labels.as_ref().unwrap_or(&empty), &format!("job {}", c.name))? {
            out.previous.push(c);
            continue;
        }
        match c.finished() {
            None => out.active.push(c),
            Some(f) if f.failed => out.failed.push(c),
            Some(_) => out.successful.push(c),
        }
    }
    Ok(out)
}

/// `replicatedJobsStatus` from the current Jobs, carrying each replicated job's restart
/// bookkeeping over from `old`; sorted by name descending, as upstream persists it.
pub fn replicated_job_statuses(
    js: &JobSet,
    c: &Classified,
    old: &[ReplicatedJobStatus],
    keep_job_restarts: bool,
) -> Vec<ReplicatedJobStatus> {
    let mut out: Vec<ReplicatedJobStatus> = js
        .spec
        .replicated_jobs
        .iter()
        .map(|rj| {
            let prev = old.iter().find(|s| s.name == rj.name);
            let mut s = ReplicatedJobStatus { name: rj.name.clone(), ..Default::default() };
            if let Some(p) = prev {
                if keep_job_restarts {
                    s.job_restarts = p.job_restarts.clone();
                    s.job_restarts_count_towards_max = p.job_restarts_count_towards_max.clone();
                }
                s.restarts = p.restarts;
                s.restarts_count_towards_max = p.restarts_count_towards_max;
                s.failed_job_indexes = p.failed_job_indexes.clone();
                // Scoped in-place restart state: pods keep their attempts across recreations.
                s.current_in_place_restart_attempt = p.current_in_place_restart_attempt;
                s.previous_in_place_restart_attempt = p.previous_in_place_restart_attempt;
                s.in_place_restarts = p.in_place_restarts;
                s.in_place_restarts_count_towards_max = p.in_place_restarts_count_towards_max;
                s.in_place_restart_jobs = p.in_place_restart_jobs.clone();
            }
            let mine = |list: &[Child]| list.iter().filter(|x| x.rjob == Some(rj.name.as_str())).count() as i32;
            s.succeeded = mine(&c.successful);
            s.failed = mine(&c.failed);
            for a in c.active.iter().filter(|x| x.rjob == Some(rj.name.as_str())) {
                let spec = a.job.spec.as_ref();
                let st = a.job.status.as_ref();
                let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
                let completions = spec.and_then(|s| s.completions).unwrap_or(parallelism);
                let done = st.and_then(|s| s.succeeded).unwrap_or(0) + st.and_then(|s| s.ready).unwrap_or(0);
                if done >= parallelism.min(completions) {
                    s.ready += 1;
                }
                if st.and_then(|s| s.active).unwrap_or(0) > 0 {
                    s.active += 1;
                }
                if spec.and_then(|s| s.suspend) == Some(true) {
                    s.suspended += 1;
                }
            }
            s
        })
        .collect();
    out.sort_by(|a, b| b.name.cmp(&a.name));
    out
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Builder-style child Jobs and pods for the decision tests (upstream's `testing/wrappers.go`).

    use jiff::Timestamp;
    use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub struct JobBuilder(pub Job);

    pub fn job(jobset: &str, rjob: &str, index: i32) -> JobBuilder {
        let mut j = Job::default();
        j.metadata.name = Some(format!("{jobset}-{rjob}-{index}"));
        j.metadata.namespace = Some("default".into());
        j.metadata.labels = Some(
            [
                ("jobset.sigs.k8s.io/jobset-name", jobset.to_string()),
                ("jobset.sigs.k8s.io/replicatedjob-name", rjob.to_string()),
                ("jobset.sigs.k8s.io/job-index", index.to_string()),
                ("jobset.sigs.k8s.io/restart-attempt", "0".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        j.spec = Some(JobSpec { parallelism: Some(1), completions: Some(1), ..Default::default() });
        JobBuilder(j)
    }

    impl JobBuilder {
        pub fn label(mut self, k: &str, v: &str) -> Self {
            self.0.metadata.labels.get_or_insert_default().insert(k.into(), v.into());
            self
        }
        pub fn attempt(self, n: i32) -> Self {
            self.label("jobset.sigs.k8s.io/restart-attempt", &n.to_string())
        }
        pub fn parallelism(mut self, p: i32, c: i32) -> Self {
            let s = self.0.spec.get_or_insert_default();
            s.parallelism = Some(p);
            s.completions = Some(c);
            self
        }
        pub fn suspend(mut self) -> Self {
            self.0.spec.get_or_insert_default().suspend = Some(true);
            self
        }
        pub fn counts(mut self, active: i32, ready: i32, succeeded: i32) -> Self {
            let s = self.0.status.get_or_insert_default();
            s.active = Some(active);
            s.ready = Some(ready);
            s.succeeded = Some(succeeded);
            self
        }
        fn condition(mut self, type_: &str, reason: &str, message: &str, at: i64) -> Self {
            let s: &mut JobStatus = self.0.status.get_or_insert_default();
            s.conditions.get_or_insert_default().push(JobCondition {
                type_: type_.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                ..Default::default()
            });
            self
        }
        pub fn failed(self, reason: &str, at: i64) -> Self {
            self.condition("Failed", reason, "Job has reached the specified backoff limit", at)
        }
        pub fn failed_with(self, reason: &str, message: &str, at: i64) -> Self {
            self.condition("Failed", reason, message, at)
        }
        /// `FailureTarget=True`, as the Job controller sets it before the pods are gone.
        pub fn failure_target(self, reason: &str, at: i64) -> Self {
            self.condition("FailureTarget", reason, "Job has reached the specified backoff limit", at)
        }
        pub fn complete(self) -> Self {
            self.condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods", 1)
        }
        pub fn obj(self) -> Job {
            self.0
        }
    }

    pub struct PodBuilder(pub Pod);

    fn container(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() }),
            ..Default::default()
        }
    }

    /// A Running pod of the first Job of `jobset`'s replicated job `w`, attempt 0, with an `agent`
    /// sidecar and a `worker` container running.
    pub fn pod(jobset: &str, name: &str) -> PodBuilder {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.labels = Some(
            [
                ("jobset.sigs.k8s.io/jobset-name", jobset),
                ("jobset.sigs.k8s.io/replicatedjob-name", "w"),
                ("jobset.sigs.k8s.io/job-index", "0"),
                ("jobset.sigs.k8s.io/restart-attempt", "0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![container("agent")]),
            container_statuses: Some(vec![container("worker")]),
            ..Default::default()
        });
        PodBuilder(p)
    }

    impl PodBuilder {
        /// The pod with its `Ready` condition True.
        pub fn ready(mut self) -> Self {
            let c = k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            };
            self.0.status.get_or_insert_default().conditions.get_or_insert_default().push(c);
            self
        }
        pub fn label(mut self, k: &str, v: &str) -> Self {
            self.0.metadata.labels.get_or_insert_default().insert(k.into(), v.into());
            self
        }
        /// The in-place restart attempt annotation, as the agent writes it.
        pub fn annotate(mut self, v: &str) -> Self {
            let key = "jobset.sigs.k8s.io/in-place-restart-attempt";
            self.0.metadata.annotations.get_or_insert_default().insert(key.into(), v.into());
            self
        }
        pub fn at(self, attempt: i32) -> Self {
            self.annotate(&attempt.to_string())
        }
        pub fn phase(mut self, phase: &str) -> Self {
            self.0.status.get_or_insert_default().phase = Some(phase.into());
            self
        }
        fn status_of(&mut self, name: &str) -> &mut ContainerStatus {
            let s = self.0.status.get_or_insert_default();
            s.init_container_statuses
                .iter_mut()
                .chain(s.container_statuses.iter_mut())
                .flatten()
                .find(|c| c.name == name)
                .expect("a container of the fixture")
        }
        pub fn restart_count(mut self, container: &str, n: i32) -> Self {
            self.status_of(container).restart_count = n;
            self
        }
        /// `container` exited with `code` at second `at`.
        pub fn terminated(mut self, container: &str, code: i32, at: i64) -> Self {
            let t = ContainerStateTerminated {
                exit_code: code,
                finished_at: Some(Time(Timestamp::from_second(at).unwrap())),
                ..Default::default()
            };
            self.status_of(container).state = Some(ContainerState { terminated: Some(t), ..Default::default() });
            self
        }
        /// The kubelet's `AllContainersRestarting` condition, last changed at second `at`.
        pub fn all_restarting(mut self, status: bool, at: i64) -> Self {
            let c = PodCondition {
                type_: "AllContainersRestarting".into(),
                status: if status { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                ..Default::default()
            };
            self.0.status.get_or_insert_default().conditions.get_or_insert_default().push(c);
            self
        }
        pub fn obj(self) -> Pod {
            self.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::job;
    use super::*;

    fn jobset(restarts: i32, rj: Vec<ReplicatedJobStatus>) -> JobSet {
        let mut js: JobSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "js", "namespace": "default"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 3}, {"name": "ps", "replicas": 1}]}
        }))
        .unwrap();
        js.status = Some(JobSetStatus { restarts, replicated_jobs_status: rj, ..Default::default() });
        js
    }

    fn names(list: &[Child]) -> Vec<String> {
        list.iter().map(|c| c.name.to_string()).collect()
    }

    #[test]
    fn jobs_are_sorted_by_attempt_and_finished_condition() {
        let jobs = [
            job("js", "w", 0).attempt(1).obj(),
            job("js", "w", 1).attempt(1).failed("BackoffLimitExceeded", 3).obj(),
            job("js", "w", 2).attempt(1).complete().obj(),
            job("js", "ps", 0).attempt(0).failed("BackoffLimitExceeded", 1).obj(),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let c = classify(&jobset(1, vec![]), &refs).unwrap();
        assert_eq!(names(&c.active), ["js-w-0"]);
        assert_eq!(names(&c.failed), ["js-w-1"]);
        assert_eq!(names(&c.successful), ["js-w-2"]);
        assert_eq!(names(&c.previous), ["js-ps-0"]);
    }

    #[test]
    fn a_job_in_failure_target_counts_as_failed_not_active() {
        // (case, Job, failed?, condition read: (reason, time))
        let cases = [
            (
                "FailureTarget while pods terminate",
                job("js", "w", 0).counts(1, 0, 0).failure_target("PodFailurePolicy", 5).obj(),
                Some((true, "PodFailurePolicy", 5)),
            ),
            (
                "FailureTarget then Failed: the FailureTarget reads the same",
                job("js", "w", 0).failure_target("BackoffLimitExceeded", 5).failed("BackoffLimitExceeded", 9).obj(),
                Some((true, "BackoffLimitExceeded", 5)),
            ),
            (
                "Failed alone",
                job("js", "w", 0).failed("BackoffLimitExceeded", 9).obj(),
                Some((true, "BackoffLimitExceeded", 9)),
            ),
            ("Complete", job("js", "w", 0).complete().obj(), Some((false, "CompletionsReached", 1))),
            ("running", job("js", "w", 0).counts(1, 1, 0).obj(), None),
        ];
        for (case, j, want) in cases {
            let got = Child::of(&j).finished().map(|f| (f.failed, f.reason, f.at.as_second()));
            assert_eq!(got, want, "{case}");
        }
        let jobs = [
            job("js", "w", 0).counts(1, 0, 0).failure_target("BackoffLimitExceeded", 5).obj(),
            job("js", "w", 1).counts(1, 1, 0).obj(),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let js = jobset(0, vec![]);
        let c = classify(&js, &refs).unwrap();
        assert_eq!((names(&c.failed), names(&c.active)), (vec!["js-w-0".to_string()], vec!["js-w-1".to_string()]));
        let w = &replicated_job_statuses(&js, &c, &[], true)[0];
        assert_eq!((w.failed, w.active, w.ready), (1, 1, 1), "the terminating Job is failed, not active");
    }

    #[test]
    fn a_job_behind_its_own_restart_count_is_previous() {
        let rj = ReplicatedJobStatus { name: "w".into(), job_restarts: vec![0, 2, 0], ..Default::default() };
        let jobs = [
            job("js", "w", 1).label(JOB_RESTART_ATTEMPT, "1").obj(),
            job("js", "w", 0).label(JOB_RESTART_ATTEMPT, "0").obj(),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let c = classify(&jobset(0, vec![rj]), &refs).unwrap();
        assert_eq!(names(&c.previous), ["js-w-1"]);
        assert_eq!(names(&c.active), ["js-w-0"]);
    }

    #[test]
    fn a_job_behind_its_replicated_jobs_restart_count_is_previous() {
        let rj = ReplicatedJobStatus { name: "w".into(), restarts: 1, ..Default::default() };
        let jobs = [
            job("js", "w", 0).label(REPLICATED_JOB_RESTART_ATTEMPT, "0").obj(),
            job("js", "ps", 0).label(REPLICATED_JOB_RESTART_ATTEMPT, "0").obj(),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let c = classify(&jobset(0, vec![rj]), &refs).unwrap();
        assert_eq!(names(&c.previous), ["js-w-0"]);
        assert_eq!(names(&c.active), ["js-ps-0"]);
    }

    #[test]
    fn a_job_without_the_restart_attempt_label_is_an_error() {
        let mut j = job("js", "w", 0).obj();
        j.metadata.labels.as_mut().unwrap().remove(RESTART_ATTEMPT);
        let refs = [&j];
        assert!(classify(&jobset(0, vec![]), &refs).unwrap_err().contains("missing label"));
    }

    #[test]
    fn counts_follow_upstream_rules_and_are_sorted_by_name_descending() {
        let jobs = [
            // ready: succeeded + ready >= min(parallelism, completions)
            job("js", "w", 0).parallelism(2, 4).counts(2, 1, 1).obj(),
            job("js", "w", 1).parallelism(2, 4).counts(2, 1, 0).obj(),
            job("js", "w", 2).suspend().obj(),
            job("js", "ps", 0).complete().obj(),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let js = jobset(0, vec![]);
        let c = classify(&js, &refs).unwrap();
        let s = replicated_job_statuses(&js, &c, &[], true);
        assert_eq!(s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["w", "ps"]);
        assert_eq!((s[0].ready, s[0].active, s[0].suspended, s[0].succeeded), (1, 2, 1, 0));
        assert_eq!((s[1].succeeded, s[1].ready), (1, 0));
    }

    #[test]
    fn restart_bookkeeping_is_carried_over() {
        let old = vec![ReplicatedJobStatus {
            name: "w".into(),
            job_restarts: vec![1, 0, 0],
            restarts: 2,
            failed_job_indexes: vec![1],
            ..Default::default()
        }];
        let js = jobset(0, vec![]);
        let c = Classified::default();
        let s = replicated_job_statuses(&js, &c, &old, true);
        assert_eq!(
            (s[0].job_restarts.clone(), s[0].restarts, s[0].failed_job_indexes.clone()),
            (vec![1, 0, 0], 2, vec![1])
        );
        assert!(replicated_job_statuses(&js, &c, &old, false)[0].job_restarts.is_empty());
    }

    #[test]
    fn scoped_in_place_restart_state_is_carried_over_with_or_without_job_restarts() {
        let jobs = vec![jobset_api::jobset::JobInPlaceRestartStatus {
            job_index: 2,
            current_in_place_restart_attempt: Some(4),
            previous_in_place_restart_attempt: Some(3),
            restarts: 2,
            restarts_count_towards_max: 1,
        }];
        let old = vec![ReplicatedJobStatus {
            name: "w".into(),
            ready: 3,
            restarts: 1,
            current_in_place_restart_attempt: Some(5),
            previous_in_place_restart_attempt: Some(4),
            in_place_restarts: 3,
            in_place_restarts_count_towards_max: 2,
            in_place_restart_jobs: jobs,
            ..Default::default()
        }];
        // A recreation of `w` is under way: none of its Jobs exists.
        let js = jobset(0, vec![]);
        for keep_job_restarts in [true, false] {
            let s = replicated_job_statuses(&js, &Classified::default(), &old, keep_job_restarts);
            let w = s.iter().find(|s| s.name == "w").unwrap();
            let want = ReplicatedJobStatus { ready: 0, ..old[0].clone() };
            assert_eq!(w, &want, "keep_job_restarts {keep_job_restarts}");
        }
    }
}
