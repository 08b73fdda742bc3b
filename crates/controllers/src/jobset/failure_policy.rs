//! The failure policy (upstream's `failure_policy.go` plus KEP-262's future-work actions):
//! which rule applies to the failed Jobs, and what its action does to the status.

use jobset_api::jobset::keys::*;
use jobset_api::jobset::{
    FailurePolicyAction, FailurePolicyRule, FailurePolicyRuleStatus, JobSet, JobSetStatus, ReplicatedJobStatus,
    RestartScope, RestartStrategy, RestartTrigger,
};

use super::children::{Child, Finished};
use super::conditions::Cond;
use super::restart_history::{self, TriggerPods};
use super::update::{Metric, Update};

/// A failed Job with its `Failed` condition.
#[derive(Debug, Clone)]
pub struct FailedJob<'a> {
    pub child: Child<'a>,
    pub finished: Finished<'a>,
}

impl<'a> FailedJob<'a> {
    pub fn of(child: &Child<'a>) -> Option<FailedJob<'a>> {
        let finished = child.finished().filter(|f| f.failed)?;
        Some(FailedJob { child: child.clone(), finished })
    }
}

/// Whether `rule` applies to `job` (reasons, message patterns, target replicated jobs).
/// An invalid pattern never matches (upstream logs it and goes on).
pub fn rule_applies(rule: &FailurePolicyRule, job: &FailedJob) -> bool {
    let reason_ok =
        rule.on_job_failure_reasons.is_empty() || rule.on_job_failure_reasons.iter().any(|r| r == job.finished.reason);
    let message_ok = rule.on_job_failure_message_patterns.is_empty()
        || rule.on_job_failure_message_patterns.iter().any(|p| match regex::Regex::new(p) {
            Ok(re) => re.is_match(job.finished.message),
            Err(e) => {
                tracing::warn!(pattern = %p, error = %e, "invalid onJobFailureMessagePatterns entry; it matches nothing");
                false
            }
        });
    let Some(rjob) = job.child.rjob else { return false };
    let target_ok = rule.target_replicated_jobs.is_empty() || rule.target_replicated_jobs.iter().any(|t| t == rjob);
    reason_ok && message_ok && target_ok
}

/// The earliest-failed Job (strictly earlier `Failed` time wins; ties keep list order).
pub fn earliest<'a, 'b>(jobs: impl IntoIterator<Item = &'b FailedJob<'a>>) -> Option<&'b FailedJob<'a>> {
    let mut best: Option<&FailedJob> = None;
    for j in jobs {
        if best.is_none_or(|b| j.finished.at < b.finished.at) {
            best = Some(j);
        }
    }
    best
}

/// Rule-major matching: the first rule that applies to any failed Job wins, with the
/// earliest-failed Job it applies to.
pub fn find_rule<'r, 'a, 'b>(
    rules: &'r [FailurePolicyRule],
    failed: &'b [FailedJob<'a>],
) -> Option<(&'r FailurePolicyRule, &'b FailedJob<'a>)> {
    rules.iter().find_map(|r| earliest(failed.iter().filter(|j| rule_applies(r, j))).map(|j| (r, j)))
}

/// Restarts that count towards `maxRestarts`: the JobSet's own, each replicated job's and each
/// Job's, recreated or (scoped in-place restart, whose counters stay 0 otherwise) in place.
pub fn counted_restarts(status: &JobSetStatus) -> i64 {
    let per_rj: i64 = status
        .replicated_jobs_status
        .iter()
        .map(|s| {
            s.restarts_count_towards_max as i64
                + s.job_restarts_count_towards_max.iter().map(|&x| x as i64).sum::<i64>()
                + s.in_place_restarts_count_towards_max as i64
                + s.in_place_restart_jobs.iter().map(|j| j.restarts_count_towards_max as i64).sum::<i64>()
        })
        .sum();
    status.restarts_count_towards_max as i64 + status.in_place_restarts as i64 + per_rj
}

/// The restarts failure-policy rule `name` made (`status.failurePolicyRulesStatus`).
pub fn rule_restarts(status: &JobSetStatus, name: &str) -> i32 {
    status.failure_policy_rules_status.iter().find(|r| r.name == name).map_or(0, |r| r.restarts)
}

/// Extension (per-rule restart budget): a restart by `rule`, whose own `maxRestarts` is `max`.
/// Once the rule's restarts reached it the JobSet fails (`ReachedMaxRestarts`, naming the rule
/// and `job`); otherwise the restart is counted for the rule, in the same status write. Answers
/// whether the restart goes on.
pub fn spend_rule_budget(u: &mut Update, rule: &FailurePolicyRule, max: i32, job: &str) -> bool {
    if rule_restarts(&u.status, &rule.name) >= max {
        let message = format!("{MSG_REACHED_MAX_RESTARTS} of failure policy rule {}", rule.name);
        fail(u, REASON_REACHED_MAX_RESTARTS, with_job(&message, job));
        return false;
    }
    let list = &mut u.status.failure_policy_rules_status;
    match list.iter_mut().find(|r| r.name == rule.name) {
        Some(r) => r.restarts += 1,
        None => list.push(FailurePolicyRuleStatus { name: rule.name.clone(), restarts: 1 }),
    }
    u.mark();
    true
}

/// `<base> (first failed job: <job>)`, as upstream's messages name the failed Job.
pub fn with_job(base: &str, job: &str) -> String {
    format!("{base} (first failed job: {job})")
}

/// The event (reason, message) of a restart action, as the failure policy emits it.
pub fn restart_event(action: FailurePolicyAction) -> Option<(&'static str, &'static str)> {
    use FailurePolicyAction::*;
    Some(match action {
        RestartJobSet => (REASON_RESTART_JOBSET_ACTION, MSG_RESTART_JOBSET_ACTION),
        RestartJobSetAndIgnoreMaxRestarts => (REASON_RESTART_JOBSET_IGNORE_ACTION, MSG_RESTART_JOBSET_IGNORE_ACTION),
        RestartJob => (REASON_RESTART_JOB_ACTION, MSG_RESTART_JOB_ACTION),
        RestartJobAndIgnoreMaxRestarts => (REASON_RESTART_JOB_IGNORE_ACTION, MSG_RESTART_JOB_IGNORE_ACTION),
        RestartReplicatedJob => (REASON_RESTART_REPLICATED_JOB_ACTION, MSG_RESTART_REPLICATED_JOB_ACTION),
        RestartReplicatedJobAndIgnoreMaxRestarts => {
            (REASON_RESTART_REPLICATED_JOB_IGNORE_ACTION, MSG_RESTART_REPLICATED_JOB_IGNORE_ACTION)
        }
        FailJobSet | FailJob => return None,
    })
}

/// Fails the JobSet: `Failed=True`, `terminalState: Failed`, `RestartingJobSet=False`.
pub fn fail(u: &mut Update, reason: &str, message: String) {
    u.set(Cond::new(COND_FAILED, true, reason, message).warning());
    u.status.terminal_state = COND_FAILED.into();
    u.mark();
    u.set(Cond::new(COND_RESTARTING, false, REASON_JOBSET_FAILED, MSG_JOBSET_FAILED));
}

/// The status entry of replicated job `rjob`, added when absent.
pub fn rj_status<'s>(u: &'s mut Update, js: &JobSet, rjob: &str) -> Result<&'s mut ReplicatedJobStatus, String> {
    if js.replicated_job(rjob).is_none() {
        return Err(format!("replicated job {rjob} is not in the JobSet spec"));
    }
    let list = &mut u.status.replicated_jobs_status;
    if let Some(i) = list.iter().position(|s| s.name == rjob) {
        return Ok(&mut list[i]);
    }
    list.push(ReplicatedJobStatus { name: rjob.to_string(), ..Default::default() });
    Ok(list.last_mut().expect("just pushed"))
}

/// Bumps `jobRestarts[index]` and, for a counted restart only, `jobRestartsCountTowardsMax[index]`,
/// creating each array as zeros of length `replicas` when absent. As upstream's
/// `failurePolicyRecreateJob`, an uncounted restart leaves the counted array as it was (absent
/// until a counted restart of that replicated job).
fn bump_job(u: &mut Update, js: &JobSet, rjob: &str, index: i32, counted: bool) -> Result<(), String> {
    let replicas = js.replicated_job(rjob).map(|r| r.replicas).unwrap_or(0).max(0) as usize;
    let s = rj_status(u, js, rjob)?;
    let i = usize::try_from(index).map_err(|_| format!("job index {index} is negative"))?;
    if i >= replicas.max(s.job_restarts.len()) {
        return Err(format!("job index {index} is out of bounds for replicated job {rjob} ({replicas} replicas)"));
    }
    let mut arrays = vec![&mut s.job_restarts];
    if counted {
        arrays.push(&mut s.job_restarts_count_towards_max);
    }
    for arr in arrays {
        if arr.len() <= i {
            arr.resize(replicas.max(i + 1), 0);
        }
        arr[i] += 1;
    }
    s.failed_job_indexes.retain(|&x| x != index);
    Ok(())
}

/// Runs the failure policy over the failed Jobs of the current attempt (never empty). A restart
/// is appended to `restartHistory` (at most `history_limit` records kept); the answer names the
/// failed Job whose pods its trigger needs.
pub fn execute(
    js: &JobSet,
    failed: &[FailedJob],
    u: &mut Update,
    history_limit: usize,
) -> Result<Option<TriggerPods>, String> {
    let first = earliest(failed).ok_or("failure policy run without a failed job")?;
    let Some(policy) = js.spec.failure_policy.as_ref() else {
        fail(u, REASON_FAILED_JOBS, with_job(MSG_FAILED_JOBS, first.child.name));
        return Ok(None);
    };
    let (rule, job) = match find_rule(&policy.rules, failed) {
        Some((r, j)) => (Some(r), j),
        None => (None, first),
    };
    let action = rule.map(|r| r.action).unwrap_or(FailurePolicyAction::RestartJobSet);
    let name = job.child.name;
    let budget_spent = counted_restarts(&u.status) >= policy.max_restarts as i64;
    let ignore = matches!(
        action,
        FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts
            | FailurePolicyAction::RestartJobAndIgnoreMaxRestarts
            | FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts
    );
    let restarts = !matches!(action, FailurePolicyAction::FailJobSet | FailurePolicyAction::FailJob);
    // A rule with its own budget spends it instead of `maxRestarts`.
    let budget = rule.and_then(|r| Some((r, r.max_restarts?))).filter(|_| restarts);
    let counted = restarts && !ignore && budget.is_none();
    if counted && budget_spent {
        fail(u, REASON_REACHED_MAX_RESTARTS, with_job(MSG_REACHED_MAX_RESTARTS, name));
        return Ok(None);
    }
    if let Some((r, max)) = budget
        && !spend_rule_budget(u, r, max, name)
    {
        return Ok(None);
    }
    let rjob = || job.child.rjob.ok_or_else(|| format!("job {name} has no {REPLICATED_JOB_NAME} label"));
    let index = || job.child.index.ok_or_else(|| format!("job {name} has no integer {JOB_INDEX} label"));
    // The restart's scope, target and the attempt it begins.
    let restarted: Option<(RestartScope, Option<String>, i32)> = match action {
        FailurePolicyAction::FailJobSet => {
            fail(u, REASON_FAIL_JOBSET_ACTION, with_job(MSG_FAIL_JOBSET_ACTION, name));
            return Ok(None);
        }
        FailurePolicyAction::RestartJobSet | FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts => {
            let (msg, event) = if !ignore {
                (MSG_RESTART_JOBSET_ACTION, REASON_RESTART_JOBSET_ACTION)
            } else {
                (MSG_RESTART_JOBSET_IGNORE_ACTION, REASON_RESTART_JOBSET_IGNORE_ACTION)
            };
            u.status.restarts += 1;
            if counted {
                u.status.restarts_count_towards_max += 1;
            }
            // Every Job is recreated: none stays left failed.
            for s in &mut u.status.replicated_jobs_status {
                s.failed_job_indexes.clear();
            }
            let reason = rule
                .map(|r| format!("{REASON_FAILURE_POLICY_PREFIX}{}", r.name))
                .unwrap_or_else(|| REASON_DEFAULT_FAILURE_POLICY.to_string());
            u.set(Cond::new(COND_RESTARTING, true, reason, with_job(msg, name)).warning());
            u.event(true, event, with_job(msg, name));
            Some((RestartScope::JobSet, None, u.status.restarts))
        }
        FailurePolicyAction::RestartJob | FailurePolicyAction::RestartJobAndIgnoreMaxRestarts => {
            let (rjob, index) = (rjob()?, index()?);
            bump_job(u, js, rjob, index, counted)?;
            let (msg, event) = if !ignore {
                (MSG_RESTART_JOB_ACTION, REASON_RESTART_JOB_ACTION)
            } else {
                (MSG_RESTART_JOB_IGNORE_ACTION, REASON_RESTART_JOB_IGNORE_ACTION)
            };
            u.event(true, event, with_job(msg, name));
            let s = rj_status(u, js, rjob)?;
            let attempt = s.job_restarts.get(index as usize).copied().unwrap_or_default();
            Some((RestartScope::Job, Some(name.to_string()), attempt))
        }
        FailurePolicyAction::RestartReplicatedJob | FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts => {
            let rjob = rjob()?;
            let s = rj_status(u, js, rjob)?;
            s.restarts += 1;
            if counted {
                s.restarts_count_towards_max += 1;
            }
            s.failed_job_indexes.clear();
            let attempt = s.restarts;
            let (msg, event) = if !ignore {
                (MSG_RESTART_REPLICATED_JOB_ACTION, REASON_RESTART_REPLICATED_JOB_ACTION)
            } else {
                (MSG_RESTART_REPLICATED_JOB_IGNORE_ACTION, REASON_RESTART_REPLICATED_JOB_IGNORE_ACTION)
            };
            u.event(true, event, with_job(msg, name));
            Some((RestartScope::ReplicatedJob, Some(rjob.to_string()), attempt))
        }
        FailurePolicyAction::FailJob => {
            let i = index()?;
            let s = rj_status(u, js, rjob()?)?;
            if let Err(at) = s.failed_job_indexes.binary_search(&i) {
                s.failed_job_indexes.insert(at, i);
            }
            u.event(true, REASON_FAIL_JOB_ACTION, format!("{MSG_FAIL_JOB_ACTION} (failed job: {name})"));
            None
        }
    };
    u.mark();
    let Some((scope, target, attempt)) = restarted else { return Ok(None) };
    let reason = job.finished.reason.to_string();
    u.metrics.push(Metric::Restart { action: action.as_str(), reason: reason.clone() });
    let trigger = RestartTrigger {
        job: Some(name.to_string()),
        reason,
        message: Some(job.finished.message.to_string()).filter(|m| !m.is_empty()),
        rule: rule.map(|r| r.name.clone()).filter(|n| !n.is_empty()),
        action: action.as_str().to_string(),
        counts_towards_max: counted,
        ..Default::default()
    };
    // A failure-policy restart recreates Jobs, whatever the strategy says of in-place restarts.
    let strategy = match js.restart_strategy() {
        RestartStrategy::BlockingRecreate => RestartStrategy::BlockingRecreate,
        RestartStrategy::Recreate | RestartStrategy::InPlaceRestart => RestartStrategy::Recreate,
    };
    // No Failed condition time: the Job's pods tell it, or nothing does.
    let failed_at = Some(job.finished.at).filter(|t| *t != jiff::Timestamp::UNIX_EPOCH);
    let r = restart_history::record(attempt, strategy, scope, target, trigger, failed_at, u.now);
    restart_history::open(js, &mut u.status.restart_history, r, history_limit);
    Ok((history_limit > 0).then(|| TriggerPods::Job(name.to_string())))
}

#[cfg(test)]
mod tests {
    use super::super::children::fixtures::job;
    use super::*;
    use jiff::Timestamp;
    use k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    fn js(policy: serde_json::Value) -> JobSet {
        serde_json::from_value(json!({
            "metadata": {"name": "js"},
            "spec": {"failurePolicy": policy, "replicatedJobs": [
                {"name": "workers", "replicas": 3}, {"name": "ps", "replicas": 1}]}
        }))
        .unwrap()
    }

    /// (type, status, reason, message) of a condition.
    type CondRow = (String, String, String, String);

    /// Runs the policy over `failed` on a JobSet with `status`; returns the new status and the
    /// `(type, status, reason, message)` of every condition, plus event reasons.
    fn run(js: &JobSet, status: JobSetStatus, failed: &[Job]) -> (JobSetStatus, Vec<CondRow>, Vec<String>) {
        let children: Vec<Child> = failed.iter().map(Child::of).collect();
        let f: Vec<FailedJob> = children.iter().filter_map(FailedJob::of).collect();
        let mut u = Update::new(status, Timestamp::from_second(1000).unwrap());
        execute(js, &f, &mut u, 10).unwrap();
        let conds = u
            .status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()))
            .collect();
        (u.status, conds, u.events.iter().map(|e| e.reason.clone()).collect())
    }

    fn cond(t: &str, s: &str, r: &str, m: &str) -> CondRow {
        (t.into(), s.into(), r.into(), m.into())
    }

    #[test]
    fn no_failure_policy_fails_at_once_naming_the_earliest_failed_job() {
        let jobs = [
            job("js", "workers", 1).failed("BackoffLimitExceeded", 20).obj(),
            job("js", "ps", 0).failed("X", 10).obj(),
        ];
        let mut j = js(json!(null));
        j.spec.failure_policy = None;
        let (s, conds, _) = run(&j, JobSetStatus::default(), &jobs);
        assert_eq!(
            conds,
            [cond(
                "Failed",
                "True",
                "FailedJobs",
                "jobset failed due to one or more job failures (first failed job: js-ps-0)"
            )]
        );
        assert_eq!(s.terminal_state, "Failed");
    }

    #[test]
    fn rules_match_rule_major_over_the_earliest_failed_job() {
        // Rule 0 applies to the later failure only; it still wins over rule 1.
        let p = json!({"maxRestarts": 5, "rules": [
            {"name": "ps", "action": "FailJobSet", "targetReplicatedJobs": ["ps"]},
            {"name": "any", "action": "RestartJobSet"}]});
        let jobs = [
            job("js", "workers", 0).failed("BackoffLimitExceeded", 10).obj(),
            job("js", "ps", 0).failed("BackoffLimitExceeded", 20).obj(),
        ];
        let (_, conds, _) = run(&js(p), JobSetStatus::default(), &jobs);
        assert_eq!(
            conds[0],
            cond(
                "Failed",
                "True",
                "FailJobSetFailurePolicyAction",
                "applying FailJobSet failure policy action (first failed job: js-ps-0)"
            )
        );
    }

    #[test]
    fn rule_matching_on_reasons_message_patterns_and_targets() {
        let failed = job("js", "workers", 0)
            .failed_with("PodFailurePolicy", "Container main for pod x failed with exit code 3", 1)
            .obj();
        let child = Child::of(&failed);
        let f = FailedJob::of(&child).unwrap();
        let rule = |v: serde_json::Value| -> FailurePolicyRule {
            let mut r = json!({"name": "r", "action": "FailJobSet"});
            r.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
            serde_json::from_value(r).unwrap()
        };
        for (case, r, applies) in [
            ("empty rule applies to any failure", json!({}), true),
            ("listed reason", json!({"onJobFailureReasons": ["PodFailurePolicy"]}), true),
            ("other reason", json!({"onJobFailureReasons": ["BackoffLimitExceeded"]}), false),
            ("unanchored pattern", json!({"onJobFailureMessagePatterns": ["exit code [0-9]"]}), true),
            ("pattern not matching", json!({"onJobFailureMessagePatterns": ["^exit"]}), false),
            ("invalid pattern matches nothing", json!({"onJobFailureMessagePatterns": ["("]}), false),
            ("one of several patterns", json!({"onJobFailureMessagePatterns": ["nope", "code 3$"]}), true),
            ("targeted replicated job", json!({"targetReplicatedJobs": ["workers"]}), true),
            ("other replicated job", json!({"targetReplicatedJobs": ["ps"]}), false),
        ] {
            assert_eq!(rule_applies(&rule(r), &f), applies, "{case}");
        }
    }

    #[test]
    fn no_matching_rule_falls_back_to_restart_jobset() {
        let p = json!({"maxRestarts": 3, "rules": [{"name": "ps", "action": "FailJobSet", "targetReplicatedJobs": ["ps"]}]});
        let (s, conds, events) =
            run(&js(p), JobSetStatus::default(), &[job("js", "workers", 2).failed("BackoffLimitExceeded", 1).obj()]);
        assert_eq!((s.restarts, s.restarts_count_towards_max), (1, 1));
        assert_eq!(
            conds,
            [cond(
                "RestartingJobSet",
                "True",
                "DefaultFailurePolicy",
                "applying RestartJobSet failure policy action (first failed job: js-workers-2)"
            )]
        );
        assert_eq!(
            events,
            [
                "RestartingJobSet".replace("RestartingJobSet", "DefaultFailurePolicy"),
                "RestartJobSetFailurePolicyAction".into()
            ]
        );
    }

    #[test]
    fn restart_actions_bump_their_counters() {
        let failed = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        for (action, restarts, counted, job_restarts, job_counted, rj_restarts, rj_counted) in [
            ("RestartJobSet", 1, 1, vec![], vec![], 0, 0),
            ("RestartJobSetAndIgnoreMaxRestarts", 1, 0, vec![], vec![], 0, 0),
            ("RestartJob", 0, 0, vec![0, 1, 0], vec![0, 1, 0], 0, 0),
            ("RestartJobAndIgnoreMaxRestarts", 0, 0, vec![0, 1, 0], vec![], 0, 0),
            ("RestartReplicatedJob", 0, 0, vec![], vec![], 1, 1),
            ("RestartReplicatedJobAndIgnoreMaxRestarts", 0, 0, vec![], vec![], 1, 0),
        ] {
            let p = json!({"maxRestarts": 1, "rules": [{"name": "r", "action": action}]});
            let (s, _, events) = run(&js(p), JobSetStatus::default(), &failed);
            let w = s.replicated_jobs_status.iter().find(|r| r.name == "workers").cloned().unwrap_or_default();
            assert_eq!((s.restarts, s.restarts_count_towards_max), (restarts, counted), "{action}");
            assert_eq!((w.job_restarts, w.job_restarts_count_towards_max), (job_restarts, job_counted), "{action}");
            assert_eq!((w.restarts, w.restarts_count_towards_max), (rj_restarts, rj_counted), "{action}");
            assert_eq!(events.last().unwrap(), &format!("{action}FailurePolicyAction"), "{action}");
        }
    }

    #[test]
    fn restart_job_and_ignore_max_restarts_leaves_job_restarts_count_towards_max_absent_until_a_counted_restart() {
        let rule = |action: &str| json!({"maxRestarts": 5, "rules": [{"name": "r", "action": action}]});
        let workers =
            |s: &JobSetStatus| s.replicated_jobs_status.iter().find(|r| r.name == "workers").cloned().unwrap();
        // (case, action, failed index, expected jobRestarts, expected jobRestartsCountTowardsMax)
        let steps = [
            ("uncounted restart writes only jobRestarts", "RestartJobAndIgnoreMaxRestarts", 1, vec![0, 1, 0], vec![]),
            (
                "a second uncounted restart still leaves it absent",
                "RestartJobAndIgnoreMaxRestarts",
                2,
                vec![0, 1, 1],
                vec![],
            ),
            ("a counted restart creates it", "RestartJob", 0, vec![1, 1, 1], vec![1, 0, 0]),
            (
                "an uncounted restart keeps it unchanged",
                "RestartJobAndIgnoreMaxRestarts",
                0,
                vec![2, 1, 1],
                vec![1, 0, 0],
            ),
        ];
        let mut status = JobSetStatus::default();
        for (case, action, index, job_restarts, counted) in steps {
            let failed = [job("js", "workers", index).failed("BackoffLimitExceeded", 1).obj()];
            (status, _, _) = run(&js(rule(action)), status, &failed);
            let w = workers(&status);
            let wire = serde_json::to_value(&w).unwrap();
            assert_eq!(wire.get("jobRestartsCountTowardsMax").is_some(), !counted.is_empty(), "{case}: {wire}");
            assert_eq!((w.job_restarts, w.job_restarts_count_towards_max), (job_restarts, counted), "{case}");
        }
    }

    #[test]
    fn a_global_restart_is_the_only_one_that_sets_restarting_jobset() {
        let failed = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        for (action, restarting) in
            [("RestartJobSet", true), ("RestartJob", false), ("RestartReplicatedJob", false), ("FailJob", false)]
        {
            let p = json!({"maxRestarts": 1, "rules": [{"name": "r", "action": action}]});
            let (_, conds, _) = run(&js(p), JobSetStatus::default(), &failed);
            assert_eq!(conds.iter().any(|c| c.0 == "RestartingJobSet"), restarting, "{action}");
        }
    }

    #[test]
    fn scoped_in_place_restarts_spend_the_budget_of_recreations_too() {
        use jobset_api::jobset::{JobInPlaceRestartStatus, ReplicatedJobStatus};
        let failed = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        let job_entry = |n: i32| JobInPlaceRestartStatus {
            job_index: 0,
            restarts: 3,
            restarts_count_towards_max: n,
            ..Default::default()
        };
        let rj = |counted: i32, jobs: Vec<JobInPlaceRestartStatus>| ReplicatedJobStatus {
            name: "workers".into(),
            in_place_restarts: 3,
            in_place_restarts_count_towards_max: counted,
            in_place_restart_jobs: jobs,
            ..Default::default()
        };
        // (case, status, counted restarts)
        let cases = [
            ("the JobSet's", JobSetStatus { in_place_restarts: 2, ..Default::default() }, 2),
            (
                "a replicated job's",
                JobSetStatus { replicated_jobs_status: vec![rj(2, vec![])], ..Default::default() },
                2,
            ),
            (
                "a Job's",
                JobSetStatus { replicated_jobs_status: vec![rj(0, vec![job_entry(2)])], ..Default::default() },
                2,
            ),
            (
                "of every level",
                JobSetStatus {
                    in_place_restarts: 1,
                    replicated_jobs_status: vec![rj(1, vec![job_entry(1)])],
                    ..Default::default()
                },
                3,
            ),
            (
                "the uncounted ones are not",
                JobSetStatus { replicated_jobs_status: vec![rj(1, vec![job_entry(0)])], ..Default::default() },
                1,
            ),
        ];
        for (case, status, counted) in cases {
            assert_eq!(counted_restarts(&status), counted, "{case}");
            let p = json!({"maxRestarts": 2, "rules": [{"name": "r", "action": "RestartJob"}]});
            let (s, _, _) = run(&js(p), status.clone(), &failed);
            assert_eq!(s.terminal_state == "Failed", counted >= 2, "{case}");
        }
    }

    #[test]
    fn counted_restarts_fail_the_jobset_once_the_budget_is_spent_by_any_level() {
        let failed = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        let spent = |f: &dyn Fn(&mut JobSetStatus)| {
            let mut s = JobSetStatus::default();
            f(&mut s);
            s
        };
        let budgets = [
            ("by the jobset", spent(&|s| s.restarts_count_towards_max = 2)),
            (
                "by a job",
                spent(&|s| {
                    s.replicated_jobs_status = vec![jobset_api::jobset::ReplicatedJobStatus {
                        name: "ps".into(),
                        job_restarts: vec![2],
                        job_restarts_count_towards_max: vec![2],
                        ..Default::default()
                    }]
                }),
            ),
            (
                "by a replicated job",
                spent(&|s| {
                    s.replicated_jobs_status = vec![
                        jobset_api::jobset::ReplicatedJobStatus {
                            name: "ps".into(),
                            restarts: 1,
                            restarts_count_towards_max: 1,
                            ..Default::default()
                        },
                        jobset_api::jobset::ReplicatedJobStatus {
                            name: "workers".into(),
                            restarts_count_towards_max: 1,
                            ..Default::default()
                        },
                    ]
                }),
            ),
        ];
        for action in ["RestartJobSet", "RestartJob", "RestartReplicatedJob"] {
            for (case, status) in &budgets {
                let p = json!({"maxRestarts": 2, "rules": [{"name": "r", "action": action}]});
                let (s, conds, _) = run(&js(p), status.clone(), &failed);
                assert_eq!(
                    conds[0],
                    cond(
                        "Failed",
                        "True",
                        "ReachedMaxRestarts",
                        "jobset failed due to reaching max number of restarts (first failed job: js-workers-1)"
                    ),
                    "{action} {case}"
                );
                assert_eq!(s.terminal_state, "Failed");
            }
        }
    }

    #[test]
    fn a_rule_with_its_own_budget_counts_apart_from_max_restarts_and_fails_once_it_is_spent() {
        use jobset_api::jobset::FailurePolicyRuleStatus;
        let failed = [job("js", "workers", 1).failed("PodFailurePolicy", 1).obj()];
        let policy = |action: &str| {
            json!({"maxRestarts": 1, "rules": [
                {"name": "infra", "action": action, "maxRestarts": 2, "onJobFailureReasons": ["PodFailurePolicy"]},
                {"name": "app", "action": "RestartJobSet"}]})
        };
        let spent = |restarts: i32, global: i32| JobSetStatus {
            restarts_count_towards_max: global,
            failure_policy_rules_status: vec![FailurePolicyRuleStatus { name: "infra".into(), restarts }]
                .into_iter()
                .filter(|r| r.restarts > 0)
                .collect(),
            ..Default::default()
        };
        let reached = "jobset failed due to reaching max number of restarts of failure policy rule infra (first failed job: js-workers-1)";
        for action in ["RestartJobSet", "RestartJob", "RestartReplicatedJob"] {
            // (case, status before, the rule's restarts after, failed with this message)
            let cases = [
                ("the first restart opens the rule's count", spent(0, 0), 1, None),
                ("a spent maxRestarts does not stop the rule", spent(1, 1), 2, None),
                ("the rule's budget spent fails the JobSet", spent(2, 0), 2, Some(reached)),
            ];
            for (case, status, restarts, fails) in cases {
                let (s, conds, events) = run(&js(policy(action)), status.clone(), &failed);
                assert_eq!(rule_restarts(&s, "infra"), restarts, "{action}: {case}");
                // Nothing counts towards maxRestarts.
                assert_eq!(counted_restarts(&s), counted_restarts(&status), "{action}: {case}");
                let failed_cond = conds.iter().find(|c| c.0 == "Failed");
                assert_eq!(
                    failed_cond.map(|c| (c.2.as_str(), c.3.as_str())),
                    fails.map(|m| ("ReachedMaxRestarts", m)),
                    "{action}: {case}"
                );
                if fails.is_none() {
                    // The action's own event, not its `...AndIgnoreMaxRestarts` form's.
                    assert_eq!(events.last().unwrap(), &format!("{action}FailurePolicyAction"), "{action}: {case}");
                    let record = s.restart_history.last().unwrap();
                    assert!(!record.trigger.counts_towards_max, "{action}: {case}");
                }
            }
        }
        // A rule without a budget still spends maxRestarts.
        let app = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        let (s, conds, _) = run(&js(policy("RestartJobSet")), spent(1, 1), &app);
        assert_eq!(conds[0].2, "ReachedMaxRestarts");
        assert_eq!(rule_restarts(&s, "infra"), 1);
    }

    #[test]
    fn ignore_max_restarts_actions_never_fail_on_the_budget() {
        let failed = [job("js", "workers", 1).failed("BackoffLimitExceeded", 1).obj()];
        for action in [
            "RestartJobSetAndIgnoreMaxRestarts",
            "RestartJobAndIgnoreMaxRestarts",
            "RestartReplicatedJobAndIgnoreMaxRestarts",
        ] {
            let p = json!({"maxRestarts": 0, "rules": [{"name": "r", "action": action}]});
            let (s, _, _) = run(&js(p), JobSetStatus { restarts: 7, ..Default::default() }, &failed);
            assert_ne!(s.terminal_state, "Failed", "{action}");
        }
    }

    #[test]
    fn fail_job_records_the_index_and_a_restart_clears_it() {
        let p = json!({"rules": [{"name": "r", "action": "FailJob"}]});
        let (s, conds, events) = run(&js(p), JobSetStatus::default(), &[job("js", "workers", 2).failed("X", 1).obj()]);
        assert!(conds.is_empty());
        assert_eq!(events, ["FailJobFailurePolicyAction"]);
        let w = s.replicated_jobs_status.iter().find(|r| r.name == "workers").unwrap();
        assert_eq!(w.failed_job_indexes, [2]);
        let p = json!({"maxRestarts": 3, "rules": [{"name": "r", "action": "RestartJobSet"}]});
        let (s, _, _) = run(&js(p), s.clone(), &[job("js", "ps", 0).failed("X", 2).obj()]);
        assert!(s.replicated_jobs_status.iter().all(|r| r.failed_job_indexes.is_empty()));
    }

    #[test]
    fn failing_sets_restarting_false_when_a_restart_was_in_progress() {
        let p = json!({"maxRestarts": 0});
        let mut status = JobSetStatus::default();
        status.conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "RestartingJobSet".into(),
            status: "True".into(),
            reason: "DefaultFailurePolicy".into(),
            message: "m".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        });
        let (_, conds, _) = run(&js(p), status, &[job("js", "ps", 0).failed("X", 2).obj()]);
        assert!(conds.contains(&cond("RestartingJobSet", "False", "JobSetFailed", "jobset failed")), "{conds:?}");
    }
}
