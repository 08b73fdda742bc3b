//! The chaos suite's CI mode (issue 24, docs/chaos.md): `jobset chaos` runs the Recreate, in-place
//! and AppWrapper scenarios 10 times with `kill -9` of `jobset up`, lost nodes and a full disk
//! (where a private mount namespace is allowed: root) at random instants (the seed printed), and
//! every run must end as the fault-free run does.

mod common;

use std::time::Duration;

/// 50 to 75 s on 2 cores (debug build).
const RUNS: u64 = 10;

/// The bound leaves room for a loaded machine.
const LIMIT: Duration = Duration::from_secs(400);

/// The `total` row of the summary table: runs, faults by kind, divergences, errors.
fn total_row(stdout: &str) -> Vec<u64> {
    let row = stdout.lines().find(|l| l.starts_with("total ")).unwrap_or_else(|| panic!("no summary table:\n{stdout}"));
    row.split_whitespace().skip(1).map(|n| n.parse().expect("a count")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_runs_under_kills_of_jobset_up_lost_nodes_and_a_full_disk_end_as_the_fault_free_run() {
    // Left out: kill-manager (its two-process runs would add to the test's time).
    let runs = RUNS.to_string();
    let variants = "recreate,in-place,appwrapper";
    let args = ["chaos", "--runs", &runs, "--faults", "kill-up,node-fail,disk-full", "--variants", variants];
    let mut cmd = common::jobset_command(&args);
    cmd.args(["--run-timeout", "40s"]);
    // The driver's requests fail by design while jobset up is down.
    cmd.env("JOBSET_LOG", "warn,kube_client=off");
    let out = common::run_to_end(cmd, LIMIT).await;
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let total = total_row(&out.stdout);
    let [runs, kill_up, node_fail, disk_full, _kill_manager, divergences, errors] = total[..] else {
        panic!("a total row of 7 counts: {total:?}\n{report}")
    };
    assert_eq!(runs, RUNS, "{report}");
    assert!(kill_up + node_fail + disk_full >= RUNS, "every run injects at least one fault\n{report}");
    assert_eq!((divergences, errors), (0, 0), "{report}");
    assert_eq!(out.code, 0, "{report}");
}
