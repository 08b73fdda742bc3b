//! `jobset bench timeline`: how big the timeline of a large JobSet is and how long headless
//! Chromium takes to show it. A synthetic JobSet of `pods` pods (Jobs of `pods_per_job`) that
//! went through a Recreate restart and then an in-place restart, with its Jobs and live pods as
//! `jobset timeline` would list them, goes through `timeline::build` and `render::page` into a
//! file; then Chromium loads it and takes a screenshot, `runs` times, alternating with a trivial
//! page measured the same way (the baseline: Chromium's own start and exit).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use jiff::{SignedDuration, Timestamp};
use jobset_api::jobset::JobSet;
use jobset_ui::{render, timeline};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// What the benchmark measures (`jobset bench timeline` flags).
pub struct Options {
    pub pods: i32,
    pub pods_per_job: i32,
    pub runs: usize,
    pub chromium: PathBuf,
    pub window: (u32, u32),
    /// Keep the page and a screenshot here (else a temporary directory).
    pub out: Option<PathBuf>,
    pub timeout: Duration,
}

pub async fn bench(o: Options) -> anyhow::Result<()> {
    anyhow::ensure!(o.pods > 0 && o.pods_per_job > 0, "--pods and --pods-per-job must be positive");
    anyhow::ensure!(o.runs > 0, "--runs must be positive");
    anyhow::ensure!(
        o.pods % o.pods_per_job == 0,
        "--pods ({}) must be a multiple of --pods-per-job ({})",
        o.pods,
        o.pods_per_job
    );
    let jobs_n = o.pods / o.pods_per_job;
    println!(
        "jobset bench timeline ({} cores): {} pods in {jobs_n} Jobs, a Recreate and an in-place restart",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        o.pods
    );
    let now = Timestamp::now();
    let (jobset, jobs, pods) = objects(o.pods, o.pods_per_job, now)?;

    let t = Instant::now();
    let tl = timeline::build(&timeline::Inputs { jobset: &jobset, jobs: &jobs, pods: &pods, now });
    let built = t.elapsed();
    let t = Instant::now();
    let html = render::page(&tl);
    let rendered = t.elapsed();
    let rows: usize = tl.replicated_jobs.iter().flat_map(|r| &r.jobs).map(|j| 1 + j.pods.len()).sum();
    println!(
        "  timeline::build {:.1} ms ({rows} rows, aggregated {}), render::page {:.1} ms, HTML {} bytes ({:.2} MB)",
        ms(built),
        tl.aggregated,
        ms(rendered),
        html.len(),
        html.len() as f64 / 1e6
    );

    let temp = tempfile::tempdir()?;
    let dir = match &o.out {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let page = dir.join("timeline.html");
    let baseline = dir.join("baseline.html");
    std::fs::write(&page, &html).with_context(|| format!("writing {}", page.display()))?;
    std::fs::write(
        &baseline,
        "<!DOCTYPE html><html><head><title>baseline</title></head><body><p>baseline</p></body></html>",
    )
    .with_context(|| format!("writing {}", baseline.display()))?;

    // The page as Chromium built it: every row made it into the DOM.
    let dom = chromium(&o, &page, None, true).await?.1;
    println!("  Chromium's DOM: {} bytes, {} elements with data-row", dom.len(), dom.matches(" data-row=\"").count());

    let shot = dir.join("timeline.png");
    let (mut base_t, mut page_t) = (Vec::new(), Vec::new());
    for _ in 0..o.runs {
        base_t.push(chromium(&o, &baseline, Some(&dir.join("baseline.png")), false).await?.0);
        page_t.push(chromium(&o, &page, Some(&shot), false).await?.0);
    }
    let (b, p) = (stats(&mut base_t), stats(&mut page_t));
    println!(
        "  Chromium load + screenshot ({}x{}), {} runs: baseline page min {:.0} / median {:.0} / max {:.0} ms; \
         timeline min {:.0} / median {:.0} / max {:.0} ms; the timeline's own cost (median − baseline median) {:.0} ms",
        o.window.0,
        o.window.1,
        o.runs,
        b.0,
        b.1,
        b.2,
        p.0,
        p.1,
        p.2,
        p.1 - b.1
    );
    if o.out.is_some() {
        println!("  kept {} and {}", page.display(), shot.display());
    }
    Ok(())
}

/// `WIDTHxHEIGHT` (`--window`).
pub fn parse_window(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("invalid window size {s:?}: expected WIDTHxHEIGHT, e.g. 1400x900");
    let (w, h) = s.split_once('x').ok_or_else(bad)?;
    let (w, h) = (w.parse::<u32>().map_err(|_| bad())?, h.parse::<u32>().map_err(|_| bad())?);
    if w == 0 || h == 0 {
        return Err(bad());
    }
    Ok((w, h))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// min, median, max in milliseconds.
fn stats(v: &mut [Duration]) -> (f64, f64, f64) {
    v.sort();
    (ms(v[0]), ms(super::percentile(v, 0.5)), ms(v[v.len() - 1]))
}

/// One Chromium run on `file` (a screenshot to `shot`, or the DOM on stdout): its wall time
/// from start to exit, and what it printed.
async fn chromium(o: &Options, file: &Path, shot: Option<&Path>, dump_dom: bool) -> anyhow::Result<(Duration, String)> {
    let profile = tempfile::tempdir()?;
    let mut cmd = tokio::process::Command::new(&o.chromium);
    cmd.args(jobset_ui::HEADLESS_CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={},{}", o.window.0, o.window.1));
    if let Some(s) = shot {
        cmd.arg(format!("--screenshot={}", s.display()));
    }
    if dump_dom {
        cmd.arg("--dump-dom");
    }
    let file = std::path::absolute(file)?;
    cmd.arg(format!("file://{}", file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let start = Instant::now();
    let child = cmd.spawn().with_context(|| {
        format!("starting {} (install Debian's `chromium`, or pass --chromium)", o.chromium.display())
    })?;
    let out = tokio::time::timeout(o.timeout, child.wait_with_output())
        .await
        .with_context(|| format!("Chromium took longer than {:?} on {}", o.timeout, file.display()))??;
    let took = start.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "Chromium failed on {} ({}): {}",
        file.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(s) = shot {
        anyhow::ensure!(s.is_file(), "Chromium wrote no screenshot to {}", s.display());
    }
    Ok((took, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn micro(t: Timestamp) -> String {
    format!("{t:.6}")
}

/// A JobSet `big` (one replicated job `workers`, `pods / per_job` Indexed Jobs of `per_job` pods) created 300 s
/// before `now`, its restart history, its Jobs and its live pods:
/// - a Recreate restart: pod 42 of Job 7 failed at +60 s, decided +60.8, old Jobs gone +64,
///   every new pod running +70;
/// - an in-place restart (all pods): pod 3 of Job 1 failed at +200 s, decided +200.3, every pod
///   restarted +203, barrier lifted +204, every pod running again +206.
///
/// The live pods are those of the Recreate's attempt, each restarted once in place.
fn objects(pods: i32, per_job: i32, now: Timestamp) -> anyhow::Result<(JobSet, Vec<Job>, Vec<Pod>)> {
    let jobs_n = pods / per_job;
    let t0 = now - SignedDuration::from_secs(300);
    let at = |s: f64| micro(t0 + SignedDuration::from_secs_f64(s));
    // Spread pods' own times a little, as a real restart would.
    let jitter = |i: i32, span: f64| (i % 97) as f64 / 97.0 * span;
    let (fail_job, fail_index) = (7.min(jobs_n - 1), 42.min(per_job - 1));
    let (ip_job, ip_index) = (1.min(jobs_n - 1), 3.min(per_job - 1));
    let jobset: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": "default", "uid": "bench-uid", "creationTimestamp": at(0.0)},
        "spec": {
            "failurePolicy": {"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "workers", "replicas": jobs_n, "template": {"spec": {
                "parallelism": per_job, "completions": per_job, "completionMode": "Indexed",
                "template": {"spec": {"containers": [{"name": "worker", "image": "busybox"}]}}}}}],
        },
        "status": {
            "restarts": 1,
            "restartsCountTowardsMax": 1,
            "currentInPlaceRestartAttempt": 2,
            "previousInPlaceRestartAttempt": 1,
            "restartHistory": [
                {
                    "attempt": 1, "strategy": "Recreate", "scope": "JobSet",
                    "trigger": {"job": format!("big-workers-{fail_job}"), "pod": format!("big-workers-{fail_job}-{fail_index}-abcde"),
                                "container": "worker", "exitCode": 1, "reason": "BackoffLimitExceeded",
                                "message": "Job has reached the specified backoff limit", "action": "RestartJobSet", "countsTowardsMax": true},
                    "failedAt": at(60.0), "decidedAt": at(60.8), "stoppedAt": at(64.0), "runningAt": at(70.0), "duration": "10s",
                },
                {
                    "attempt": 2, "strategy": "InPlaceRestart", "scope": "JobSet",
                    "trigger": {"job": format!("big-workers-{ip_job}"), "pod": format!("big-workers-{ip_job}-{ip_index}-x{ip_index:04}"),
                                "container": "worker", "exitCode": 1, "reason": "WorkerFailed", "action": "RestartJobSet", "countsTowardsMax": true},
                    "failedAt": at(200.0), "decidedAt": at(200.3), "stoppedAt": at(203.0), "barrierLiftedAt": at(204.0),
                    "runningAt": at(206.0), "duration": "6s",
                },
            ],
        },
    }))
    .context("the synthetic JobSet")?;

    let labels = |j: i32| {
        json!({
            "jobset.sigs.k8s.io/jobset-name": "big",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": j.to_string(),
            "jobset.sigs.k8s.io/restart-attempt": "1",
        })
    };
    let mut jobs = Vec::with_capacity(jobs_n as usize);
    let mut out = Vec::with_capacity(pods as usize);
    for j in 0..jobs_n {
        let job = format!("big-workers-{j}");
        jobs.push(serde_json::from_value::<Job>(json!({
            "metadata": {"name": job, "namespace": "default", "labels": labels(j), "creationTimestamp": at(64.2)},
            "spec": {"parallelism": per_job, "completions": per_job, "completionMode": "Indexed", "template": {"spec": {"containers": []}}},
            "status": {"active": per_job, "ready": per_job, "startTime": at(64.2)},
        }))?);
        for c in 0..per_job {
            let i = j * per_job + c;
            let mut l = labels(j);
            l["batch.kubernetes.io/job-name"] = Value::from(job.clone());
            l["batch.kubernetes.io/job-completion-index"] = Value::from(c.to_string());
            let exit = if (j, c) == (ip_job, ip_index) { 1 } else { 137 };
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("{job}-{c}-x{c:04}"), "namespace": "default", "labels": l,
                    "annotations": {"batch.kubernetes.io/job-completion-index": c.to_string(),
                                    "jobset.sigs.k8s.io/in-place-restart-attempt": "2"},
                    "creationTimestamp": at(64.3 + jitter(i, 1.0)),
                },
                "spec": {"nodeName": format!("node-{}", i / 10), "containers": [{"name": "worker", "image": "busybox"}]},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(204.5 + jitter(i, 1.4))}],
                    "containerStatuses": [{
                        "name": "worker", "image": "busybox", "imageID": "", "ready": true, "restartCount": 1,
                        "started": true,
                        "state": {"running": {"startedAt": at(204.2 + jitter(i, 1.6))}},
                        "lastState": {"terminated": {"exitCode": exit, "reason": "Error",
                                      "startedAt": at(66.0 + jitter(i, 3.8)), "finishedAt": at(200.0 + jitter(i, 2.9))}},
                    }],
                },
            }))?;
            out.push(pod);
        }
    }
    Ok((jobset, jobs, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_size_is_width_x_height() {
        assert_eq!(parse_window("1400x900"), Ok((1400, 900)));
        for bad in ["1400", "x900", "0x900", "1400x", "a x b"] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn synthetic_jobset_has_every_pod_and_both_restarts_in_its_timeline() {
        let now = Timestamp::now();
        let (js, jobs, pods) = objects(300, 100, now).unwrap();
        assert_eq!((jobs.len(), pods.len()), (3, 300));
        let tl = timeline::build(&timeline::Inputs { jobset: &js, jobs: &jobs, pods: &pods, now });
        let strategies: Vec<&str> = tl.restarts.iter().map(|r| r.strategy.as_str()).collect();
        assert_eq!(strategies, ["Recreate", "InPlaceRestart"]);
        let rows: usize = tl.replicated_jobs.iter().flat_map(|r| &r.jobs).map(|j| j.pods.len()).sum();
        assert_eq!(rows, 300);
        assert!(tl.aggregated, "300 pods are more than the aggregation threshold");
        let total = |i: usize| tl.restarts[i].phases.iter().find(|p| p.name == "total").map(|p| p.seconds);
        assert_eq!((total(0), total(1)), (Some(10.0), Some(6.0)));
    }
}
