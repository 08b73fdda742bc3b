//! `jobset bench scale` at tiny sizes: every run reaches all its pods running, the soak churns
//! with no divergence while its watchers stay connected, and the tables show every row.

mod common;

use std::time::Duration;

/// How long the whole command may take (generous: the machine is shared).
const WAIT: Duration = Duration::from_secs(180);

/// The cells of the first table row whose first cell starts with `first`.
fn row<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("| {first}")))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{out}"));
    line.trim_matches('|').split(" | ").map(str::trim).collect()
}

/// The number that starts `cell` (`"1.25 s"` → 1.25).
fn number(cell: &str) -> f64 {
    let n = cell.split_whitespace().next().unwrap_or_default();
    n.parse().unwrap_or_else(|_| panic!("{cell:?} does not start with a number"))
}

/// The number after `label` in `cell` (`"p50 1.2 ms, p99 3.4 ms"`, `"p99"` → 3.4).
fn after(cell: &str, label: &str) -> f64 {
    let rest = cell.split_once(label).unwrap_or_else(|| panic!("no {label:?} in {cell:?}")).1;
    number(rest.trim_start())
}

#[tokio::test]
async fn bench_scale_at_tiny_sizes_prints_every_row_with_every_pod_running_and_no_divergence() {
    let args = [
        "bench",
        "scale",
        "--pods",
        "40",
        "--nodes",
        "4",
        "--pods-per-job",
        "10",
        "--fail-after",
        "2s",
        "--soak",
        "3s",
        "--soak-warmup",
        "1s",
        "--soak-sample",
        "1s",
        "--soak-jobsets",
        "3",
        "--soak-pods",
        "4",
        "--soak-run",
        "200ms",
        "--soak-fail-after",
        "100ms",
        "--watchers",
        "20",
    ];
    let run = common::jobset_command(&args).output();
    let out = tokio::time::timeout(WAIT, run).await.expect("the bench finished in time").expect("jobset runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "jobset bench scale failed:\n{stdout}\n{stderr}");

    // The scale runs: one row each, every pod running after the create and after the restart.
    let runs: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| 40 |"))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    assert_eq!(runs.len(), 3, "three scale rows (Recreate, sidecar, main container):\n{stdout}");
    for (r, want) in runs.iter().zip(["Recreate", "in place, sidecar", "in place, main container"]) {
        assert!(r[1].starts_with(want), "row {r:?} is not {want:?}");
        assert_eq!(r[2], "40 of 40, 40 of 40", "{r:?}");
        assert!(number(r[3]) > 0.0 && number(r[4]) > 0.0, "create and restart times: {r:?}");
        assert!(number(r[6]) > 0.0, "the restart's API requests: {r:?}");
        assert!(number(r[10]) > 0.0 && number(r[10]) >= number(r[9]), "peak RSS at least the RSS at the end: {r:?}");
    }
    assert!(number(runs[0][5]) > 0.0, "the create's API requests (Recreate run): {:?}", runs[0]);

    // The soak.
    let value = |label: &str| row(&stdout, label)[1].to_string();
    assert!(number(&value("cycles completed (create, 1 restart, Completed, deleted)")) >= 3.0, "{stdout}");
    assert_eq!(value("divergences"), "0", "{stdout}");
    assert_eq!(value("watchers connected"), "20 of 20", "{stdout}");
    assert!(number(&value("watch events delivered")) > 0.0, "{stdout}");
    assert_eq!(value("watch errors"), "0", "{stdout}");
    number(&value("watchers that fell behind (410)"));
    number(&value("429s (during the churn)"));
    let latency = value("write latency");
    assert!(after(&latency, "p50") > 0.0 && after(&latency, "p99") >= after(&latency, "p50"), "{latency}");
    assert!(number(&value("RSS at end")) > 0.0, "{stdout}");
    assert!(number(&value("RSS end / after warm-up")) > 0.0, "{stdout}");
}
