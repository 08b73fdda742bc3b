//! The success policy (upstream's `success_policy.go`).

use jobset_api::jobset::{JobSet, Operator};

use super::children::Child;

/// Whether the successful Jobs satisfy the success policy: `Any` needs one targeted Job, `All`
/// as many as the targeted replicated jobs have replicas (so `All` over zero replicas never
/// completes, as upstream). No policy means `All` over every replicated job.
pub fn satisfied(js: &JobSet, successful: &[Child]) -> bool {
    let (operator, targets) = match &js.spec.success_policy {
        Some(p) => (p.operator, p.target_replicated_jobs.as_slice()),
        None => (Operator::All, &[][..]),
    };
    let targeted = |rj: &str| targets.is_empty() || targets.iter().any(|t| t == rj);
    let done = successful.iter().filter(|c| c.rjob.is_some_and(targeted)).count() as i64;
    if done == 0 {
        return false;
    }
    let expected = match operator {
        Operator::Any => 1,
        Operator::All => {
            js.spec.replicated_jobs.iter().filter(|r| targeted(&r.name)).map(|r| r.replicas.max(0) as i64).sum()
        }
    };
    done >= expected
}

#[cfg(test)]
mod tests {
    use super::super::children::Child;
    use super::super::children::fixtures::job;
    use super::*;
    use k8s_openapi::api::batch::v1::Job;

    fn js(policy: serde_json::Value) -> JobSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "js"},
            "spec": {"successPolicy": policy,
                     "replicatedJobs": [{"name": "driver", "replicas": 1}, {"name": "workers", "replicas": 2}]}
        }))
        .unwrap()
    }

    fn check(policy: serde_json::Value, done: &[(&str, i32)]) -> bool {
        let jobs: Vec<Job> = done.iter().map(|(r, i)| job("js", r, *i).complete().obj()).collect();
        let children: Vec<Child> = jobs.iter().map(Child::of).collect();
        satisfied(&js(policy), &children)
    }

    #[test]
    fn all_needs_every_replica_of_every_replicated_job() {
        let all = serde_json::json!({"operator": "All"});
        assert!(!check(all.clone(), &[("workers", 0), ("workers", 1)]));
        assert!(check(all, &[("workers", 0), ("workers", 1), ("driver", 0)]));
    }

    #[test]
    fn all_with_targets_ignores_the_other_replicated_jobs() {
        let p = serde_json::json!({"operator": "All", "targetReplicatedJobs": ["workers"]});
        assert!(!check(p.clone(), &[("workers", 0), ("driver", 0)]));
        assert!(check(p, &[("workers", 0), ("workers", 1)]));
    }

    #[test]
    fn any_needs_one_targeted_job() {
        let p = serde_json::json!({"operator": "Any", "targetReplicatedJobs": ["driver"]});
        assert!(!check(p.clone(), &[("workers", 0)]));
        assert!(check(p, &[("driver", 0)]));
    }

    #[test]
    fn no_success_means_no_completion() {
        assert!(!check(serde_json::json!({"operator": "Any"}), &[]));
    }
}
