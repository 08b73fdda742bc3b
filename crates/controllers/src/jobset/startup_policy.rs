//! `startupPolicy: InOrder` and `dependsOn` (upstream's `startup_policy.go`, `depends_on.go`):
//! both read the replicated job statuses this reconcile computed.

use jobset_api::jobset::{DependsOnStatus, JobSet, ReplicatedJob, ReplicatedJobStatus, StartupPolicyOrder};

fn status_of<'a>(statuses: &'a [ReplicatedJobStatus], name: &str) -> Option<&'a ReplicatedJobStatus> {
    statuses.iter().find(|s| s.name == name)
}

pub fn in_order(js: &JobSet) -> bool {
    js.spec.startup_policy.as_ref().is_some_and(|p| p.startup_policy_order == StartupPolicyOrder::InOrder)
}

/// Every Job of the replicated job started: `ready + succeeded + failed == replicas`.
pub fn all_replicas_started(rj: &ReplicatedJob, statuses: &[ReplicatedJobStatus]) -> bool {
    status_of(statuses, &rj.name).is_some_and(|s| s.ready + s.succeeded + s.failed == rj.replicas)
}

/// Every `dependsOn` entry holds (entries are ANDed): `Ready` = ready + succeeded + failed ==
/// replicas of the dependency, `Complete` = succeeded == replicas.
pub fn depends_on_satisfied(js: &JobSet, rj: &ReplicatedJob, statuses: &[ReplicatedJobStatus]) -> bool {
    rj.depends_on.iter().all(|d| {
        let replicas = js.replicated_job(&d.name).map(|r| r.replicas).unwrap_or(0);
        let Some(s) = status_of(statuses, &d.name) else { return false };
        match d.status {
            DependsOnStatus::Ready => s.ready + s.succeeded + s.failed == replicas,
            DependsOnStatus::Complete => s.succeeded == replicas,
        }
    })
}

/// Whether `dependsOn` can never hold any more: a `Complete` dependency has Jobs a `FailJob`
/// rule left failed, or depends on such a replicated job itself.
pub fn depends_on_unreachable(js: &JobSet, rj: &ReplicatedJob, statuses: &[ReplicatedJobStatus]) -> bool {
    rj.depends_on.iter().any(|d| {
        let Some(dep) = js.replicated_job(&d.name) else { return true };
        let left_failed = status_of(statuses, &d.name).is_some_and(|s| !s.failed_job_indexes.is_empty());
        (d.status == DependsOnStatus::Complete && left_failed)
            || (dep.name != rj.name && depends_on_unreachable(js, dep, statuses))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js() -> JobSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [
                {"name": "init", "replicas": 2},
                {"name": "server", "replicas": 1, "dependsOn": [{"name": "init", "status": "Complete"}]},
                {"name": "client", "replicas": 1,
                 "dependsOn": [{"name": "init", "status": "Complete"}, {"name": "server", "status": "Ready"}]}
            ]}
        }))
        .unwrap()
    }

    fn st(name: &str, ready: i32, succeeded: i32, failed: i32) -> ReplicatedJobStatus {
        ReplicatedJobStatus { name: name.into(), ready, succeeded, failed, ..Default::default() }
    }

    #[test]
    fn complete_needs_every_replica_succeeded() {
        let js = js();
        let server = &js.spec.replicated_jobs[1];
        assert!(!depends_on_satisfied(&js, server, &[st("init", 1, 1, 0)]));
        assert!(depends_on_satisfied(&js, server, &[st("init", 0, 2, 0)]));
    }

    #[test]
    fn several_entries_are_anded() {
        let js = js();
        let client = &js.spec.replicated_jobs[2];
        assert!(!depends_on_satisfied(&js, client, &[st("init", 0, 2, 0), st("server", 0, 0, 0)]));
        assert!(depends_on_satisfied(&js, client, &[st("init", 0, 2, 0), st("server", 1, 0, 0)]));
    }

    #[test]
    fn ready_counts_failed_and_succeeded_jobs_as_started() {
        let js = js();
        let client = &js.spec.replicated_jobs[2];
        assert!(depends_on_satisfied(&js, client, &[st("init", 0, 2, 0), st("server", 0, 0, 1)]));
    }

    #[test]
    fn all_replicas_started_counts_ready_succeeded_and_failed() {
        let js = js();
        let init = &js.spec.replicated_jobs[0];
        assert!(!all_replicas_started(init, &[st("init", 1, 0, 0)]));
        assert!(all_replicas_started(init, &[st("init", 1, 0, 1)]));
    }

    #[test]
    fn a_complete_dependency_with_jobs_left_failed_is_unreachable_transitively() {
        let js = js();
        let mut init = st("init", 0, 1, 1);
        init.failed_job_indexes = vec![1];
        assert!(depends_on_unreachable(&js, &js.spec.replicated_jobs[2], std::slice::from_ref(&init)));
        assert!(!depends_on_unreachable(&js, &js.spec.replicated_jobs[2], &[st("init", 0, 1, 1)]));
    }
}
