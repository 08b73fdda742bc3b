//! The JobSet examples (`examples/failure-policy/`, `examples/upstream/`) run through `jobset
//! run` with real host processes, each to the end its header comment documents.

mod common;

use std::time::Duration;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
/// The reference of a JobSet in `jobset run`'s output.
const JOBSET: &str = "jobset.jobset.x-k8s.io/";

/// `jobset run examples/FILE --job-backoff 10ms --timeout TIMEOUT`.
async fn run(file: &str, timeout: &str) -> common::Output {
    let path = format!("{EXAMPLES}/{file}");
    let args = ["run", &path, "--job-backoff", "10ms", "--timeout", timeout];
    common::jobset(&args, Duration::from_secs(120)).await
}

/// The final line `jobset run` printed for JobSet `name` (`... succeeded; restarts N (M towards
/// maxRestarts)` or `... failed: REASON: MESSAGE; restarts ...`).
fn summary<'a>(out: &'a common::Output, name: &str) -> &'a str {
    let prefix = format!("{JOBSET}{name} ");
    out.stdout.lines().rfind(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no summary of {name}: {out:?}"))
}

/// Runs FILE, which must end with exit code `code` and a summary of JobSet `name` containing
/// every one of `says`.
async fn ends(file: &str, name: &str, code: i32, says: &[&str]) -> common::Output {
    let out = run(file, "60s").await;
    assert_eq!(out.code, code, "{file}: {out:?}");
    let line = summary(&out, name);
    for s in says {
        assert!(line.contains(s), "{file}: {line:?} does not say {s:?}; {out:?}");
    }
    out
}

/// Runs FILE, which must not end by itself: `jobset run` gives up after `timeout` (exit code 2)
/// with JobSet `name` still running.
async fn keeps_running(file: &str, name: &str, timeout: &str) -> common::Output {
    let out = run(file, timeout).await;
    assert_eq!(out.code, 2, "{file}: {out:?}");
    assert!(out.stderr.contains(&format!("not finished: {JOBSET}{name}")), "{file}: {out:?}");
    assert!(!out.stdout.contains(" failed:"), "{file}: {out:?}");
    out
}

/// The highest `restarts N` of JobSet `name`'s progress lines.
fn most_restarts(out: &common::Output, name: &str) -> i64 {
    let prefix = format!("{JOBSET}{name}: ");
    out.stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit_once(", restarts ")?.1.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

// examples/failure-policy: the user stories of KEP-262.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_1_an_application_bug_fails_the_jobset_without_restarts() {
    ends(
        "failure-policy/fail-jobset.yaml",
        "fail-jobset",
        1,
        &[
            "failed: FailJobSetFailurePolicyAction: applying FailJobSet failure policy action",
            "fail-jobset-buggy-job-0",
            "; restarts 0 (0 towards maxRestarts)",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_2_a_failing_worker_restarts_the_jobset_until_it_succeeds() {
    ends("failure-policy/restart-jobset.yaml", "restart-jobset", 0, &["succeeded; restarts 2 (2 towards maxRestarts)"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_3_host_maintenance_restarts_do_not_spend_max_restarts() {
    ends(
        "failure-policy/ignore-max-restarts.yaml",
        "ignore-max-restarts",
        0,
        &["succeeded; restarts 1 (0 towards maxRestarts)"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_4_workers_restart_freely_and_the_parameter_server_spends_the_budget() {
    ends(
        "failure-policy/different-policies.yaml",
        "different-policies",
        1,
        &[
            "failed: ReachedMaxRestarts: jobset failed due to reaching max number of restarts",
            "different-policies-parameter-server-0",
            "; restarts 3 (1 towards maxRestarts)",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_gpu_worker_restarts_only_its_replicated_job() {
    ends(
        "failure-policy/restart-replicated-job.yaml",
        "restart-replicated-job",
        0,
        &["succeeded; restarts 0 (0 towards maxRestarts)"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulation_left_failed_fails_the_jobset_once_the_others_are_done() {
    let out = ends(
        "failure-policy/fail-job-restart-job.yaml",
        "fail-job-restart-job",
        1,
        &["failed: FailedJobs: ", "fail-job-restart-job-simulations-1", "; restarts 0 ("],
    )
    .await;
    // Simulation 2 was restarted (RestartJob), not left failed.
    let line = summary(&out, "fail-job-restart-job");
    assert!(!line.contains("fail-job-restart-job-simulations-2"), "{line}");
}

// examples/upstream: kubernetes-sigs/jobset's documentation examples.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_simple_examples_complete() {
    for (file, name) in [
        ("upstream/simple/group.yaml", "group-example"),
        ("upstream/simple/paralleljobs.yaml", "paralleljobs"),
        ("upstream/simple/ttl-after-finished.yaml", "jobset-with-ttl"),
    ] {
        ends(file, name, 0, &["succeeded; restarts 0"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_simple_failure_policy_restarts_three_times_then_fails() {
    ends(
        "upstream/simple/failure-policy.yaml",
        "failure-policy",
        1,
        &[
            "failed: ReachedMaxRestarts: jobset failed due to reaching max number of restarts",
            "; restarts 3 (3 towards",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_jobset_with_network_runs_until_stopped() {
    let out = keeps_running("upstream/simple/jobset-with-network.yaml", "network-jobset", "10s").await;
    assert!(out.stdout.contains(&format!("{JOBSET}network-jobset: Running, active 2")), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failjobset_action_fails_at_the_first_leader_failure() {
    ends(
        "upstream/failure-policy/failjobset-action.yaml",
        "failjobset-action-example",
        1,
        &["failed: FailJobSetFailurePolicyAction: applying FailJobSet failure policy action", "; restarts 0"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_host_maintenance_model_fails_a_plain_failure_with_max_restarts_0() {
    // Index 0 exits 1: not a DisruptionTarget, so the second rule (RestartJobSet) applies, and
    // maxRestarts 0 is reached at once.
    ends(
        "upstream/failure-policy/host-maintenance-event-model.yaml",
        "host-maintenance-event-model",
        1,
        &["failed: ReachedMaxRestarts: ", "; restarts 0 (0 towards maxRestarts)"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_restartjobset_action_restarts_three_times_then_fails() {
    ends(
        "upstream/failure-policy/restartjobset-action.yaml",
        "restartjobset-action-example",
        1,
        &["failed: ReachedMaxRestarts: ", "; restarts 3 (3 towards maxRestarts)"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_restartjobsetandignoremaxrestarts_action_restarts_past_max_restarts() {
    let name = "rjimr-action-example";
    let out = keeps_running("upstream/failure-policy/restartjobsetandignoremaxrestarts-action.yaml", name, "40s").await;
    // maxRestarts is 3: a fourth restart shows it is ignored.
    assert!(most_restarts(&out, name) >= 4, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_interactive_restartjob_actions_wait_for_a_pod_to_be_failed_by_hand() {
    for file in [
        "upstream/failure-policy/restartjob-action.yaml",
        "upstream/failure-policy/restartjobandignoremaxrestarts-action.yaml",
    ] {
        let out = keeps_running(file, "js", "8s").await;
        assert!(out.stdout.contains(&format!("{JOBSET}js: Running, active 2")), "{file}: {out:?}");
        assert_eq!(most_restarts(&out, "js"), 0, "{file}: {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_depends_on_and_startup_policy_examples_complete() {
    for (file, name) in [
        ("upstream/depends-on/depends-on.yaml", "depends-on"),
        ("upstream/depends-on/multiple-depends-on.yaml", "multiple-depends-on"),
        ("upstream/startup-policy/startup-driver-ready.yaml", "startup-driver-ready"),
    ] {
        ends(file, name, 0, &["succeeded; restarts 0"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_volume_claim_policy_example_completes() {
    ends("upstream/volume-claim-policy/single-pvc.yaml", "volume-claim-trainjob", 0, &["succeeded; restarts 0"]).await;
}

// examples/jobset: the JobSet features beyond the failure policy.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_reach_the_leader_by_its_jobset_hostname() {
    ends("jobset/network.yaml", "network", 0, &["succeeded"]).await;
}
