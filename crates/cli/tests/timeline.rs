//! `jobset timeline`: after `jobset run examples/failure-policy/restart-jobset.yaml --keep`
//! (two Recreate restarts), the timeline shows both restarts with the phase durations of the
//! JobSet's restart record, as HTML and as JSON; `describe jobset` lists them.

mod common;

use std::time::Duration;

use serde_json::Value;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/failure-policy/restart-jobset.yaml");
const LIMIT: Duration = Duration::from_secs(120);

/// Values of attribute `name` in `html`, in order.
fn attr_values<'h>(html: &'h str, name: &str) -> Vec<&'h str> {
    let key = format!(" {name}=\"");
    html.match_indices(&key).map(|(i, _)| &html[i + key.len()..]).map(|rest| &rest[..rest.find('"').unwrap()]).collect()
}

/// Microseconds since the epoch of an RFC 3339 time in `v`.
fn micros(v: &Value) -> i64 {
    v.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_microsecond()
}

/// The phase durations (name, seconds) of a `status.restartHistory` entry, as the design defines
/// them, computed here independently of jobset-ui.
fn recorded_phases(r: &Value) -> Vec<(String, f64)> {
    let t = |k: &str| r.get(k).filter(|v| !v.is_null()).map(micros);
    let (failed, decided, stopped, barrier, running) =
        (t("failedAt"), t("decidedAt"), t("stoppedAt"), t("barrierLiftedAt"), t("runningAt"));
    let ends = [
        ("detect", failed, decided),
        ("stop", decided, stopped),
        ("barrier", barrier.and(stopped), barrier),
        ("start", barrier.or(stopped), running),
        ("total", failed.or(decided), running),
    ];
    ends.into_iter().filter_map(|(n, a, b)| Some((n.to_string(), (b? - a?) as f64 / 1e6))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_of_a_jobset_restarted_twice_shows_both_restarts_and_their_phases() {
    let dir = tempfile::tempdir().unwrap();
    // Each attempt's pod fails soon after it starts: with the Job controller's 1 s batching the
    // Jobs of the first restart could fail again before their status ever showed them running.
    let args =
        ["run", "--keep", "--job-backoff", "10ms", "--job-sync-batch-period", "10ms", "--timeout", "90s", EXAMPLE];
    let mut run = common::jobset_command(&args).spawn().unwrap();
    let (seen, kubeconfig) = common::kept_cluster(&mut run, LIMIT).await;
    assert!(seen.contains("restart-jobset succeeded; restarts 2"), "{seen}");
    let kc = kubeconfig.as_str();

    let out = common::jobset(&["get", "jobset", "restart-jobset", "-o", "json", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    let jobset: Value = serde_json::from_str(&out.stdout).unwrap();
    let history = jobset["status"]["restartHistory"].as_array().cloned().unwrap_or_default();
    assert_eq!(history.len(), 2, "two restarts recorded: {:#}", jobset["status"]);
    let want: Vec<Vec<(String, f64)>> = history.iter().map(recorded_phases).collect();
    for phases in &want {
        let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["detect", "stop", "start", "total"],
            "a finished Recreate restart has every phase but the barrier"
        );
    }

    // The page, written to `<name>-timeline.html` in the current directory.
    let mut cmd = common::jobset_command(&["timeline", "restart-jobset", "--kubeconfig", kc]);
    cmd.current_dir(dir.path());
    let out = common::run_to_end(cmd, LIMIT).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "restart-jobset-timeline.html\n"), "{out:?}");
    let html = std::fs::read_to_string(dir.path().join("restart-jobset-timeline.html")).unwrap();
    assert_eq!(attr_values(&html, "data-restart"), ["0", "1"]);
    assert_eq!(html.matches("id=\"restart-table\"").count(), 1);
    let rows = attr_values(&html, "data-row");
    assert_eq!(rows, ["workers/0", "workers/0/0", "workers/0/1"]);
    let shown: Vec<(String, f64)> = attr_values(&html, "data-phase")
        .into_iter()
        .zip(attr_values(&html, "data-seconds"))
        .map(|(n, s)| (n.to_string(), s.parse().unwrap()))
        .collect();
    assert_eq!(shown, want.concat(), "the page's phase annotations are the record's");
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"), "self-contained");

    // `-o FILE`, and JSON for scripts.
    let file = dir.path().join("elsewhere.html");
    let out =
        common::jobset(&["timeline", "restart-jobset", "--kubeconfig", kc, "-o", file.to_str().unwrap()], LIMIT).await;
    assert_eq!((out.code, out.stdout.trim()), (0, file.to_str().unwrap()), "{out:?}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("data-restart=\"1\""));
    let out = common::jobset(&["timeline", "restart-jobset", "--kubeconfig", kc, "--format", "json"], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    let t: Value = serde_json::from_str(&out.stdout).unwrap();
    let json_phases: Vec<Vec<(String, f64)>> = t["restarts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["phases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p["name"].as_str().unwrap().to_string(), p["seconds"].as_f64().unwrap()))
                .collect()
        })
        .collect();
    assert_eq!(json_phases, want);
    assert_eq!(t["restarts"][0]["trigger"]["reason"], history[0]["trigger"]["reason"]);
    // The old attempts' pods are gone: their bars come from the record.
    let first_slot = &t["replicatedJobs"][0]["jobs"][0]["pods"][0];
    assert_eq!(first_slot["row"], "workers/0/0");
    assert!(
        first_slot["segments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["fromRecord"] == true && s["state"] == "Terminating"),
        "{first_slot:#}"
    );

    // describe lists the restarts.
    let out = common::jobset(&["describe", "jobset", "restart-jobset", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    let section =
        &out.stdout[out.stdout.find("Restarts:\n").unwrap_or_else(|| panic!("no Restarts section: {out:?}"))..];
    for (i, r) in history.iter().enumerate() {
        let line = section
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{i} ")))
            .unwrap_or_else(|| panic!("restart {i} in {section}"));
        assert!(line.contains(history[i]["trigger"]["reason"].as_str().unwrap()), "{line}");
        assert!(line.contains(&format!("{:.3}s", recorded_phases(r)[3].1)), "total of restart {i} in {line}");
    }

    // A JobSet that does not exist: kubectl's error, exit code 1, no file.
    let mut cmd = common::jobset_command(&["timeline", "no-such-jobset", "--kubeconfig", kc]);
    cmd.current_dir(dir.path());
    let out = common::run_to_end(cmd, LIMIT).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Error from server (NotFound): jobsets.jobset.x-k8s.io \"no-such-jobset\" not found",
        "{out:?}"
    );
    assert!(!dir.path().join("no-such-jobset-timeline.html").exists());

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.id().unwrap() as i32), nix::sys::signal::Signal::SIGINT)
        .unwrap();
    let status = tokio::time::timeout(LIMIT, run.wait()).await.expect("run exits on Ctrl-C").unwrap();
    assert_eq!(status.code(), Some(0));
}
