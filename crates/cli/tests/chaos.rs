//! The chaos suite's CI mode (issue 24, docs/chaos.md): `jobset chaos --short` runs the Recreate
//! and AppWrapper scenarios 10 times with `kill -9` of `jobset up` and lost nodes at random
//! instants (the seed printed), and every run must end as the fault-free run does.

mod common;

use std::time::Duration;

/// 10 runs take about 80 s on 2 cores (debug build); the bound leaves room for a loaded machine.
const LIMIT: Duration = Duration::from_secs(400);

/// The `total` row of the summary table: runs, faults by kind, divergences, errors.
fn total_row(stdout: &str) -> Vec<u64> {
    let row = stdout.lines().find(|l| l.starts_with("total ")).unwrap_or_else(|| panic!("no summary table:\n{stdout}"));
    row.split_whitespace().skip(1).map(|n| n.parse().expect("a count")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_runs_under_kills_of_jobset_up_and_lost_nodes_end_as_the_fault_free_run() {
    // Left out until the node agent's findings in docs/chaos.md are fixed: disk faults (a
    // container's supervisor loses the exit status it cannot write to a full disk) and the
    // in-place scenario (an in-place restart under way at a kill -9 of jobset up is not resumed).
    let args = ["chaos", "--short", "--faults", "kill-up,node-fail", "--variants", "recreate,appwrapper"];
    let mut cmd = common::jobset_command(&args);
    cmd.args(["--run-timeout", "40s"]);
    // The driver's requests fail by design while jobset up is down.
    cmd.env("JOBSET_LOG", "warn,kube_client=off");
    let out = common::run_to_end(cmd, LIMIT).await;
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let total = total_row(&out.stdout);
    let [runs, kill_up, node_fail, _disk_full, divergences, errors] = total[..] else {
        panic!("a total row of 6 counts: {total:?}\n{report}")
    };
    assert_eq!(runs, 10, "{report}");
    assert!(kill_up + node_fail >= 10, "every run injects at least one fault\n{report}");
    assert_eq!((divergences, errors), (0, 0), "{report}");
    assert_eq!(out.code, 0, "{report}");
}
