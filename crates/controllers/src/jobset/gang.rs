//! Extension (gang scheduling, `jobset_api::jobset::gang`): removing the PodGroups of earlier
//! attempts. Each restart that recreates Jobs makes new PodGroups (their names carry the attempt);
//! the old ones are deleted once no pod can join them any more: no Job of the JobSet, not even
//! one still being deleted, names them, and they are not the groups the next Jobs join. The
//! Workload is one per JobSet and stays.

use std::collections::BTreeSet;

use jobset_api::jobset::JobSet;
use jobset_api::jobset::gang::{self, pod_group_name};
use k8s_openapi::api::batch::v1::Job;

/// The PodGroups a gang JobSet's pods may still join: those its replicated jobs' next Jobs join
/// and those the pod templates of its Jobs name. None without a gang policy.
pub fn in_use<'a>(js: &JobSet, jobs: impl IntoIterator<Item = &'a Job>) -> Option<BTreeSet<String>> {
    gang::policy(js)?;
    let next = js.spec.replicated_jobs.iter().filter_map(|rj| pod_group_name(js, rj));
    let named = jobs.into_iter().filter_map(|j| {
        let pod = j.spec.as_ref()?.template.spec.as_ref()?;
        pod.scheduling_group.as_ref()?.pod_group_name.clone()
    });
    Some(next.chain(named).collect())
}

/// Of the JobSet's own PodGroups, those to delete: every one not in use.
pub fn stale<'a>(in_use: &BTreeSet<String>, owned: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    owned.into_iter().filter(|name| !in_use.contains(*name)).map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn js(policy: Option<&str>, status: Value) -> JobSet {
        let annotations = policy.map_or(json!({}), |p| json!({gang::GANG_POLICY: p}));
        serde_json::from_value(json!({
            "metadata": {"name": "t", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": {"replicatedJobs": [
                {"name": "a", "replicas": 1, "template": {"spec": {"template": {"spec": {}}}}},
                {"name": "b", "replicas": 1, "template": {"spec": {"template": {"spec": {}}}}}]},
            "status": status,
        }))
        .unwrap()
    }

    fn job(group: &str) -> Job {
        serde_json::from_value(json!({"metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [], "schedulingGroup": {"podGroupName": group}}}}}))
        .unwrap()
    }

    #[test]
    fn a_gang_s_pod_groups_stay_while_its_next_jobs_or_its_jobs_join_them() {
        let restarted = json!({"restarts": 1});
        let per_rj = json!({"restarts": 1, "replicatedJobsStatus": [
            {"name": "b", "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0, "active": 1, "restarts": 2}]});
        let (old, new, per_rj_old) = (job("t-all-0"), job("t-all-1"), job("t-b-1-1"));
        // (case, policy, status, Jobs, in use)
        type Case<'a> = (&'a str, Option<&'a str>, Value, Vec<&'a Job>, Option<Vec<&'a str>>);
        let cases: [Case; 5] = [
            ("no gang policy: nothing to clean", None, restarted.clone(), vec![&old], None),
            ("first attempt: its group", Some("JobSetAsGang"), json!({}), vec![], Some(vec!["t-all-0"])),
            (
                "old Jobs still being deleted keep their group",
                Some("JobSetAsGang"),
                restarted.clone(),
                vec![&old, &new],
                Some(vec!["t-all-0", "t-all-1"]),
            ),
            ("old Jobs gone: only the new group", Some("JobSetAsGang"), restarted, vec![&new], Some(vec!["t-all-1"])),
            (
                "per replicated job: each one's attempt, and what Jobs still name",
                Some("JobSetGangPerReplicatedJob"),
                per_rj,
                vec![&per_rj_old],
                Some(vec!["t-a-1-0", "t-b-1-1", "t-b-1-2"]),
            ),
        ];
        for (case, policy, status, jobs, want) in cases {
            let got = in_use(&js(policy, status), jobs.iter().copied());
            let want = want.map(|w| w.into_iter().map(String::from).collect::<BTreeSet<_>>());
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn only_pod_groups_no_pod_may_join_are_stale() {
        let in_use: BTreeSet<String> = ["t-all-2".to_string()].into();
        assert_eq!(stale(&in_use, ["t-all-0", "t-all-1", "t-all-2"]), ["t-all-0", "t-all-1"]);
        assert!(stale(&in_use, ["t-all-2"]).is_empty());
        assert!(stale(&in_use, []).is_empty());
    }
}
