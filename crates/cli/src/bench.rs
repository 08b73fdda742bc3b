//! `jobset bench`: benchmarks that print figures (recorded in docs/benchmarks.md). Not tests:
//! nothing here asserts a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::resource::{UsageWho, getrusage};

use anyhow::Context;

mod appwrapper;
mod compare;
mod crd;
mod gang;
mod in_place;
mod manager;
mod phases;
mod scale;
mod timeline;
use clap::Subcommand;
use futures::StreamExt;
use jobset_apiserver::persist::{Backend, Memory, Redb};
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use tower::ServiceExt;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Another `jobset bench` of a baseline commit and of this binary, run in turn on this
    /// machine, with every figure's medians side by side and head / base. Run it from the tree to
    /// measure: `cargo run --release -p jobset-cli -- bench compare BASE -- in-place --pods 5000`.
    Compare {
        /// The baseline commit (any git revision); built once under `target/bench-compare/`.
        base: String,
        /// Runs of each, in turn (base, head, base, head, …).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The bench and its arguments, after `--`.
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// API server: create throughput, watch fan-out delay, memory, durable writes.
    Apiserver {
        /// Pods to create in memory.
        #[arg(long, default_value_t = 15_000)]
        pods: usize,
        /// Concurrent watchers for the fan-out measurement.
        #[arg(long, default_value_t = 5_000)]
        watchers: usize,
        /// Pods to create with a durable (redb) store.
        #[arg(long, default_value_t = 2_000)]
        durable_pods: usize,
        /// Concurrent client requests.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// CRD schema enforcement and webhook-configuration lookup, each against its in-run
    /// baseline: JobSet creates and status updates with the JobSet CRD's full schema, then with an
    /// open one; pod creates and status patches with no webhook configuration, then with one that
    /// does not match pods. Rounds alternate the cases.
    Crd {
        /// JobSets to create per round and schema.
        #[arg(long, default_value_t = 2_000)]
        jobsets: usize,
        /// JobSet status updates per round and schema.
        #[arg(long, default_value_t = 10_000)]
        updates: usize,
        /// Replicated jobs per JobSet (each with a pod template).
        #[arg(long, default_value_t = 10)]
        replicated_jobs: usize,
        /// Pods to create, then patch, per round and webhook case.
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        /// Rounds of each case.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Concurrent client requests (and JobSets whose status is written concurrently).
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// Job controller, scheduler and simulated nodes: one Indexed Job from create to Complete,
    /// then the same with every pod failing once.
    Job {
        #[arg(long, default_value_t = 5_000)]
        pods: i32,
        #[arg(long, default_value_t = 500)]
        nodes: usize,
        /// How long each simulated container runs.
        #[arg(long, default_value = "100ms", value_parser = crate::parse_duration)]
        run_duration: Duration,
    },
    /// Process runtime: from an empty process to every pod of a Job running (what `jobset run`
    /// does), then in-place RestartAllContainers of one pod, with zero restart back-off.
    Process {
        #[arg(long, default_value_t = 64)]
        pods: i32,
        /// In-place restarts to time.
        #[arg(long, default_value_t = 10)]
        restarts: u32,
    },
    /// JobSet controller, Job controller, scheduler and simulated nodes: a JobSet of `jobs` ×
    /// `pods-per-job` pods from create to all Running, then one pod fails and the whole JobSet is
    /// recreated (failure policy `Recreate`, then `BlockingRecreate`, a fresh cluster each).
    Jobset {
        /// Jobs in the JobSet (one replicated job).
        #[arg(long, default_value_t = 50)]
        jobs: i32,
        /// Pods per Job (Indexed, parallelism = completions).
        #[arg(long, default_value_t = 100)]
        pods_per_job: i32,
        #[arg(long, default_value_t = 500)]
        nodes: usize,
        /// Print pod and Job counts by restart attempt every `progress` (e.g. 1s).
        #[arg(long, value_parser = crate::parse_duration)]
        progress: Option<Duration>,
    },
    /// Gang scheduling (KEP-4671): one JobSet scheduled pod by pod, then as one gang
    /// (`jobset.sigs.k8s.io/gang-policy: JobSetAsGang`), each on a fresh cluster: from the last pod
    /// created to every pod bound.
    Gang {
        /// Pods in the JobSet (one Indexed Job).
        #[arg(long, default_value_t = 5_000)]
        pods: i32,
        #[arg(long, default_value_t = 500)]
        nodes: usize,
    },
    /// In-place restart: for each pod count, a JobSet (`InPlaceRestart`, every pod with the
    /// agent, run by the simulated runtime with the real agent logic) from create to all
    /// workers past the barrier, then one worker fails and every pod restarts in place: once with
    /// the agent as a sidecar, once in main-container mode keeping its watch; then the same
    /// JobSet with `Recreate` for comparison. All with kube-apiserver's in-flight limits.
    /// First, an in-place restart of process-runtime pods (`jobset agent`, shell workers). Last,
    /// at each pod count, the scoped cases: a JobSet of a `driver` replicated job (Jobs of one
    /// pod) and a `workers` one (Jobs of the rest), one worker fails: the workers restart in place
    /// (a `RestartReplicatedJob` rule) in each mode, the whole JobSet in place in each mode, and
    /// the workers are recreated (the same rule under `Recreate`).
    InPlace {
        /// Pod counts, each on a fresh cluster.
        #[arg(long, value_delimiter = ',', default_value = "1000,5000")]
        pods: Vec<i32>,
        /// Pods per Job (Indexed, parallelism = completions).
        #[arg(long, default_value_t = 100)]
        pods_per_job: i32,
        /// Simulated pods per node.
        #[arg(long, default_value_t = 10)]
        pods_per_node: i32,
        /// How long after its start the failing worker fails.
        #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
        fail_after: Duration,
        /// The API server's read-only in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 400)]
        max_requests_inflight: usize,
        /// The API server's mutating in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 200)]
        max_mutating_requests_inflight: usize,
        /// Process-runtime pods for the last measurement (0: skip it).
        #[arg(long, default_value_t = 64)]
        process_pods: i32,
        /// How long after its start the failing process-runtime worker fails.
        #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
        process_fail_after: Duration,
        /// Skip the `Recreate` comparisons (the scoped cases' too).
        #[arg(long)]
        no_recreate: bool,
        /// Where the agent runs, each measured in turn.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "sidecar,main-container")]
        modes: Vec<in_place::Mode>,
        /// Skip the scoped cases (driver/workers JobSet).
        #[arg(long, conflicts_with = "only_scoped")]
        no_scoped: bool,
        /// Run only the scoped cases.
        #[arg(long)]
        only_scoped: bool,
        /// API Priority and Fairness over the in-flight limits' sum (kube-apiserver's
        /// `--enable-priority-and-fairness`): `both` runs each simulated in-place case without
        /// then with it (the other cases without); the controllers' request latency is printed
        /// for each.
        #[arg(long, value_enum, default_value = "both")]
        priority_and_fairness: in_place::PriorityAndFairness,
    },
    /// The JobSet controller in a `jobset manager` process of its own (over HTTPS, QPS/burst
    /// 500/500) against in-process: a `Recreate` restart, then an in-place restart (main-container
    /// mode), each first with the controller in-process, then with the manager; in one run.
    Manager {
        #[arg(long, default_value_t = 5_000)]
        pods: i32,
        /// Pods per Job (Indexed, parallelism = completions).
        #[arg(long, default_value_t = 100)]
        pods_per_job: i32,
        /// Simulated pods per node.
        #[arg(long, default_value_t = 10)]
        pods_per_node: i32,
        /// How long after its start the failing in-place worker fails.
        #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
        fail_after: Duration,
        /// The API server's read-only in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 400)]
        max_requests_inflight: usize,
        /// The API server's mutating in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 200)]
        max_mutating_requests_inflight: usize,
    },
    /// The restart timeline of a large JobSet (a Recreate and an in-place restart, synthetic
    /// objects): `timeline::build` and `render::page` times, the HTML's size, and how long
    /// headless Chromium takes to load it and take a screenshot, against a trivial page (its own
    /// start and exit) measured in the same run.
    Timeline {
        #[arg(long, default_value_t = 5_000)]
        pods: i32,
        /// Pods per Job (Indexed, parallelism = completions).
        #[arg(long, default_value_t = 100)]
        pods_per_job: i32,
        /// Chromium runs of each page (alternating).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The Chromium binary (Debian's `chromium` package).
        #[arg(long, default_value = "chromium")]
        chromium: std::path::PathBuf,
        /// Window (and screenshot) size, WIDTHxHEIGHT.
        #[arg(long, default_value = "1400x900", value_parser = timeline::parse_window)]
        window: (u32, u32),
        /// Keep the pages and their screenshots in DIR (timeline.html/.png, baseline.html/.png).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Give up on a Chromium run after this long.
        #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
        timeout: Duration,
    },
    /// KEP-262's scale: a JobSet of `pods` simulated pods on `nodes` simulated nodes (each run on
    /// a fresh cluster) from create to all running, then a `Recreate` restart, an in-place
    /// restart in sidecar mode and one in main-container mode, with each run's peak RSS and API
    /// requests; then a soak: `soak-jobsets` JobSets churning (create, one pod fails, restart,
    /// complete, delete; repeated) while `watchers` watch clients stay connected.
    Scale(scale::Args),
    /// AppWrapper: for each pod count, an AppWrapper wrapping one Indexed Job on simulated
    /// nodes, from create to all pods running, then one pod fails and the whole workload is
    /// reset (zero failure grace and retry pause) until every pod runs again. Then what
    /// upstream's default grace periods would add.
    Appwrapper {
        /// Pod counts, each on a fresh cluster.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        pods: Vec<i32>,
        /// Simulated pods per node.
        #[arg(long, default_value_t = 10)]
        pods_per_node: i32,
        /// How long after its start the failing pod fails.
        #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
        fail_after: Duration,
        /// The API server's read-only in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 400)]
        max_requests_inflight: usize,
        /// The API server's mutating in-flight limit (kube-apiserver's default; 0: unlimited).
        #[arg(long, default_value_t = 200)]
        max_mutating_requests_inflight: usize,
    },
}

/// The API server's in-flight limits for a benchmark (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default)]
struct Limits {
    read_only: Option<usize>,
    mutating: Option<usize>,
    /// Priority and fairness over the two limits' sum instead of the limits.
    apf: bool,
}

impl Limits {
    /// From the flags, where 0 means unlimited (as kube-apiserver's).
    fn new(read_only: usize, mutating: usize) -> Limits {
        Limits {
            read_only: Some(read_only).filter(|n| *n > 0),
            mutating: Some(mutating).filter(|n| *n > 0),
            apf: false,
        }
    }
}

pub async fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Scale(a) => scale::bench(a.options()).await,
        BenchCommand::Compare { base, runs, args } => {
            tokio::task::spawn_blocking(move || compare::run(&base, runs, &args)).await?
        }
        BenchCommand::Apiserver { pods, watchers, durable_pods, concurrency } => {
            apiserver(pods, watchers, durable_pods, concurrency).await
        }
        BenchCommand::Crd { jobsets, updates, replicated_jobs, pods, rounds, concurrency } => {
            crd::bench(jobsets, updates, replicated_jobs, pods, rounds, concurrency).await
        }
        BenchCommand::Job { pods, nodes, run_duration } => {
            println!("jobset bench job ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
            job(pods, nodes, run_duration, false).await?;
            job(pods, nodes, run_duration, true).await
        }
        BenchCommand::Process { pods, restarts } => {
            println!(
                "jobset bench process ({} cores)",
                std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
            );
            process_startup(pods).await?;
            restart_all_containers(restarts).await
        }
        BenchCommand::Gang { pods, nodes } => gang::bench(pods, nodes).await,
        BenchCommand::Jobset { jobs, pods_per_job, nodes, progress } => {
            jobset_bench(jobs, pods_per_job, nodes, progress).await
        }
        BenchCommand::InPlace {
            pods,
            pods_per_job,
            pods_per_node,
            fail_after,
            max_requests_inflight,
            max_mutating_requests_inflight,
            process_pods,
            process_fail_after,
            no_recreate,
            modes,
            no_scoped,
            only_scoped,
            priority_and_fairness,
        } => {
            let limits = Limits::new(max_requests_inflight, max_mutating_requests_inflight);
            let apf = priority_and_fairness.settings();
            let cases = InPlaceCases { modes: &modes, recreate: !no_recreate, scoped: !no_scoped, only_scoped, apf };
            in_place_bench(
                &pods,
                pods_per_job,
                pods_per_node,
                (fail_after, process_fail_after),
                limits,
                process_pods,
                cases,
            )
            .await
        }
        BenchCommand::Manager {
            pods,
            pods_per_job,
            pods_per_node,
            fail_after,
            max_requests_inflight,
            max_mutating_requests_inflight,
        } => {
            let limits = Limits::new(max_requests_inflight, max_mutating_requests_inflight);
            manager::bench(pods, pods_per_job, pods_per_node, fail_after, limits).await
        }
        BenchCommand::Timeline { pods, pods_per_job, runs, chromium, window, out, timeout } => {
            timeline::bench(timeline::Options { pods, pods_per_job, runs, chromium, window, out, timeout }).await
        }
        BenchCommand::Appwrapper {
            pods,
            pods_per_node,
            fail_after,
            max_requests_inflight,
            max_mutating_requests_inflight,
        } => {
            let limits = Limits::new(max_requests_inflight, max_mutating_requests_inflight);
            appwrapper::appwrapper_bench(&pods, pods_per_node, fail_after, limits).await
        }
    }
}

/// A local cluster with one process-runtime node and zero restart back-off.
async fn process_cluster(dir: &std::path::Path) -> anyhow::Result<LocalCluster> {
    let mut cfg = LocalConfig::with_nodes(1);
    cfg.runtime = jobset_local::RuntimeKind::Process(Default::default());
    cfg.state_dir = Some(dir.to_path_buf());
    cfg.agent.log_dir = Some(dir.join("logs"));
    cfg.agent.restart_backoff_base = Duration::ZERO;
    let config = ServerConfig { log_dir: cfg.agent.log_dir.clone(), ..ServerConfig::default() };
    let server = ApiServer::new(Box::new(Memory), Admission::default(), config).map_err(anyhow::Error::msg)?;
    Ok(LocalCluster::start(server, cfg).await)
}

/// Waits (through a watch, at most a minute) until some pod matching `labels` satisfies `pred`.
async fn wait_pods<T>(pods: &Api<Pod>, labels: &str, mut pred: impl FnMut(&[Pod]) -> Option<T>) -> anyhow::Result<T> {
    let mut store = std::collections::BTreeMap::new();
    let mut w = watcher(pods.clone(), watcher::Config::default().labels(labels)).applied_objects().boxed();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(Ok(p)) = w.next().await {
            store.insert(p.metadata.name.clone().unwrap_or_default(), p);
            let all: Vec<Pod> = store.values().cloned().collect();
            if let Some(v) = pred(&all) {
                return Ok(v);
            }
        }
        anyhow::bail!("the pod watch ended")
    })
    .await
    .context("timed out after 60 s")?
}

fn all_running(p: &Pod) -> bool {
    let st = p.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some())))
}

/// From nothing (no API server, no node) to every pod of a `pods`-pod Job running.
async fn process_startup(pods: i32) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let start = Instant::now();
    let cluster = process_cluster(dir.path()).await?;
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "bench-process"},
        "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]}}}
    }))?;
    jobs.create(&PostParams::default(), &job).await?;
    let pods_api: Api<Pod> = Api::default_namespaced(cluster.client());
    wait_pods(&pods_api, "batch.kubernetes.io/job-name=bench-process", |all| {
        (all.iter().filter(|p| all_running(p)).count() == pods as usize).then_some(())
    })
    .await?;
    println!(
        "process startup: {pods}-pod Job, from an empty process (API server, controllers, node agent) to all pods running: {:.2} s",
        start.elapsed().as_secs_f64()
    );
    cluster.shutdown().await;
    Ok(())
}

/// The last CRI log timestamp of a container run, read from the agent's log file.
fn last_log_time(log_dir: &std::path::Path, pod: &Pod, container: &str, run: i32) -> Option<jiff::Timestamp> {
    let m = &pod.metadata;
    let path = jobset_kubelet::runtime::log_path(
        log_dir,
        m.namespace.as_deref()?,
        m.name.as_deref()?,
        m.uid.as_deref()?,
        container,
        run as u32,
    );
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().filter_map(|l| l.split(' ').next()?.parse().ok()).next_back()
}

/// In-place RestartAllContainers of one pod (an init container, a sidecar and two containers):
/// from the trainer's exit (its last log line, stamped by the runtime as it reads it) to the
/// agent reporting every container running again.
async fn restart_all_containers(restarts: u32) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = process_cluster(dir.path()).await?;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    // Each run of the trainer counts itself in the pod's /tmp and exits 42 until `restarts` runs.
    let script = format!(
        "n=$(cat /tmp/runs 2>/dev/null || echo 0); echo $((n+1)) > /tmp/runs; \
         if [ $n -ge {restarts} ]; then exec sleep 600; fi; sleep 0.2; echo exiting; exit 42"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bench-restart-all", "labels": {"bench": "restart-all"}},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                {"name": "setup", "image": "busybox", "command": ["true"]},
                {"name": "agent", "image": "busybox", "restartPolicy": "Always", "command": ["sleep", "600"]}
            ],
            "containers": [
                {"name": "trainer", "image": "busybox", "command": ["sh", "-c", script], "restartPolicy": "Never",
                 "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]},
                {"name": "logger", "image": "busybox", "command": ["sleep", "600"]}
            ]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let log_dir = dir.path().join("logs");
    let mut times = Vec::new();
    for round in 1..=restarts as i32 {
        let (exited, running_at) = wait_pods(&pods, "bench=restart-all", |all| {
            let p = all.first()?;
            let trainer = p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "trainer")?;
            (trainer.restart_count >= round && all_running(p)).then(|| (p.clone(), jiff::Timestamp::now()))
        })
        .await?;
        let exit_at = last_log_time(&log_dir, &exited, "trainer", round - 1).context("reading the trainer's log")?;
        times.push(Duration::try_from(running_at.duration_since(exit_at)).unwrap_or_default());
    }
    times.sort();
    println!(
        "RestartAllContainers (zero back-off; init + sidecar + 2 containers), trainer exit to all containers running, {} restarts: median {:.0} ms, max {:.0} ms",
        times.len(),
        percentile(&times, 0.5).as_secs_f64() * 1000.0,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );
    cluster.shutdown().await;
    Ok(())
}

/// A pod shaped like a JobSet worker's ([`jobset_apiserver::fixtures::worker_pod`]).
fn pod(i: usize) -> Pod {
    serde_json::from_value(jobset_apiserver::fixtures::worker_pod(i)).expect("static pod")
}

async fn create_pods(client: &kube::Client, n: usize, concurrency: usize) -> anyhow::Result<Duration> {
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    let start = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod(i)).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = start.elapsed();
    for r in results {
        r.context("creating a pod")?;
    }
    Ok(elapsed)
}

fn rss_mb() -> f64 {
    proc_status_mb("VmRSS:")
}

/// A memory figure of /proc/self/status (`key` with its colon, e.g. `VmHWM:`), in MB.
fn proc_status_mb(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn server(backend: Box<dyn Backend>) -> anyhow::Result<Arc<ApiServer>> {
    server_with(backend, Limits::default())
}

fn server_with(backend: Box<dyn Backend>, limits: Limits) -> anyhow::Result<Arc<ApiServer>> {
    let mut config = ServerConfig {
        max_requests_inflight: limits.read_only,
        max_mutating_requests_inflight: limits.mutating,
        enable_priority_and_fairness: limits.apf,
        ..ServerConfig::default()
    };
    // Every watcher must be able to hold a burst of the benchmark's own writes.
    config.store.watch_buffer = 1 << 16;
    ApiServer::new(backend, Admission::default(), config).map_err(anyhow::Error::msg)
}

async fn apiserver(pods: usize, watchers: usize, durable_pods: usize, concurrency: usize) -> anyhow::Result<()> {
    println!("jobset bench apiserver ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let rss_before = rss_mb();
    let s = server(Box::new(Memory))?;
    let client = s.client();
    let elapsed = create_pods(&client, pods, concurrency).await?;
    println!(
        "create, in memory, in-process kube::Client: {pods} pods in {:.2} s = {:.0} writes/s (concurrency {concurrency})",
        elapsed.as_secs_f64(),
        pods as f64 / elapsed.as_secs_f64()
    );
    println!(
        "resident memory with {pods} pods stored: {:.0} MB (process was {:.0} MB before the server)",
        rss_mb(),
        rss_before
    );
    // What the server holds once idle: the allocator returns a burst's freed memory shortly after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("resident memory with {pods} pods stored, after 0.5 s idle: {:.0} MB", rss_mb());

    // Fan-out: N raw watch streams on pods; each write's delay is measured at every watcher.
    let router = s.router();
    let rounds = 20usize;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut tasks = Vec::with_capacity(watchers);
    let rv = s.store.current_rv();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    for _ in 0..watchers {
        let router = router.clone();
        let tx = tx.clone();
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let req =
                http::Request::get(format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"))
                    .body(axum::body::Body::empty())
                    .expect("static request");
            let resp = router.oneshot(req).await.expect("router is infallible");
            let _ = ready.send(());
            let mut body = resp.into_body().into_data_stream();
            let mut seen = 0;
            while let Some(Ok(chunk)) = body.next().await {
                let now = Instant::now();
                for _ in chunk.iter().filter(|b| **b == b'\n') {
                    let _ = tx.send((seen, now));
                    seen += 1;
                }
                if seen >= rounds {
                    return;
                }
            }
        }));
    }
    drop(tx);
    for _ in 0..watchers {
        ready_rx.recv().await;
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(client.clone());
    let mut sent = Vec::with_capacity(rounds);
    let mut delays = Vec::with_capacity(rounds * watchers);
    for i in 0..rounds {
        let cm = serde_json::from_value(json!({"metadata": {"name": format!("fanout-{i}")}}))?;
        sent.push(Instant::now());
        cms.create(&PostParams::default(), &cm).await?;
        // Collect this round's deliveries before the next write, so rounds do not overlap.
        let mut got = 0;
        while got < watchers {
            let (round, at) =
                tokio::time::timeout(Duration::from_secs(30), rx.recv()).await?.context("watchers ended early")?;
            delays.push(at.saturating_duration_since(sent[round]));
            if round == i {
                got += 1;
            }
        }
    }
    delays.sort();
    println!(
        "watch fan-out to {watchers} watchers ({rounds} events, {} deliveries): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        delays.len(),
        percentile(&delays, 0.5).as_secs_f64() * 1e3,
        percentile(&delays, 0.99).as_secs_f64() * 1e3,
        percentile(&delays, 1.0).as_secs_f64() * 1e3
    );
    for t in tasks {
        t.abort();
    }
    drop(client);
    drop(router);
    drop(s);

    let dir = tempfile::tempdir()?;
    let s = server(Box::new(Redb::open(dir.path()).map_err(anyhow::Error::msg)?))?;
    let elapsed = create_pods(&s.client(), durable_pods, concurrency).await?;
    println!(
        "create, durable (redb, fsync per write), in-process: {durable_pods} pods in {:.2} s = {:.0} writes/s",
        elapsed.as_secs_f64(),
        durable_pods as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

fn cpu(who: UsageWho) -> Duration {
    getrusage(who)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000);
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or_default()
}

/// One Indexed Job of `pods` pods on `nodes` simulated nodes, from create to Complete (or Failed).
/// The Job controller runs on a thread of its own so that its CPU time can be read; that time
/// includes the in-process API handling of the controller's own requests.
async fn job(pods: i32, nodes: usize, run: Duration, fail_once: bool) -> anyhow::Result<()> {
    let server = server(Box::new(Memory))?;
    let mut cfg = LocalConfig::with_nodes(nodes);
    cfg.job_controller = false;
    cfg.agent.default_run_duration = run;
    let controller = JobControllerThread::spawn(&server, cfg.job.clone())?;
    let cluster = LocalCluster::start(server.clone(), cfg).await;
    let client = server.client();
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let name = if fail_once { "bench-fail-once" } else { "bench" };
    let mut annotations = json!({});
    let mut spec = json!({"completions": pods, "parallelism": pods, "completionMode": "Indexed"});
    if fail_once {
        annotations = json!({"sim.jobset.x-k8s.io/fail-attempts": "1"});
        spec["backoffLimitPerIndex"] = json!(1);
    }
    spec["template"] = json!({"metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example.com/ml/trainer:2026.11"}]}});
    let job: Job = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?;
    let (_, requests_before) = server.requests.snapshot();
    let cpu_before = cpu(UsageWho::RUSAGE_SELF);
    let start = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let mut w = watcher(jobs.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    let done = tokio::time::timeout(Duration::from_secs(600), async {
        while let Some(Ok(j)) = w.next().await {
            let conds = j.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            if let Some(c) = conds.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            {
                return Some((c.type_.clone(), j.status.clone().unwrap_or_default()));
            }
        }
        None
    })
    .await
    .context("the Job did not finish within 10 minutes")?
    .context("the Job watch ended")?;
    let wall = start.elapsed();
    let process_cpu = cpu(UsageWho::RUSAGE_SELF) - cpu_before;
    let (by_verb, requests_after) = server.requests.snapshot();
    let controller_cpu = controller.stop()?;
    let (kind, status) = done;
    println!(
        "{name}: {pods} pods on {nodes} nodes ({}), run {:?} each: {kind} in {:.2} s; succeeded {}, failed {}",
        if fail_once { "every pod fails once, backoffLimitPerIndex 1, default 10 s back-off" } else { "no failures" },
        run,
        wall.as_secs_f64(),
        status.succeeded.unwrap_or(0),
        status.failed.unwrap_or(0),
    );
    let verbs: Vec<String> = by_verb.iter().filter(|(_, n)| *n > 0).map(|(v, n)| format!("{v} {n}")).collect();
    println!(
        "  API requests (all components, cumulative since start): {requests_after} ({}); during the Job: {}",
        verbs.join(", "),
        requests_after - requests_before
    );
    println!(
        "  CPU: Job controller thread {:.2} s; whole process during the Job {:.2} s",
        controller_cpu.as_secs_f64(),
        process_cpu.as_secs_f64()
    );
    cluster.shutdown().await;
    Ok(())
}

// `jobset bench jobset`: a whole-JobSet restart at scale.

const JS_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const FAILED_POD: &str = "the chosen pod is Failed";
const JOBSET_RESTARTED: &str = "JobSet status.restarts = 1";

/// What the bench last saw of one pod or Job.
#[derive(Default, Clone, Copy)]
struct Seen {
    present: bool,
    /// Sticky: the pod was bound to a node.
    scheduled: bool,
    running: bool,
    /// Sticky: phase Failed (a pod) or condition Failed (a Job).
    failed: bool,
    /// Sticky: deletionTimestamp set.
    deleting: bool,
}

/// Pods or Jobs of one restart attempt.
#[derive(Default, Clone, Copy, Debug)]
struct Counts {
    seen: usize,
    present: usize,
    scheduled: usize,
    running: usize,
    failed: usize,
    deleting: usize,
}

impl Counts {
    fn apply(&mut self, old: Option<Seen>, new: Seen) {
        let o = old.unwrap_or_default();
        if old.is_none() {
            self.seen += 1;
        }
        let adj = |n: &mut usize, a: bool, b: bool| {
            *n = (*n + b as usize).saturating_sub(a as usize);
        };
        adj(&mut self.present, o.present, new.present);
        adj(&mut self.scheduled, o.scheduled, new.scheduled);
        adj(&mut self.running, o.running, new.running);
        adj(&mut self.failed, o.failed, new.failed);
        adj(&mut self.deleting, o.deleting, new.deleting);
    }
}

/// Everything the bench's watches (pods and Jobs of one JobSet, and the JobSet) have seen, and
/// when each milestone was first reached (in the order reached).
struct Tracker {
    pods_total: usize,
    jobs_total: usize,
    pods: HashMap<String, (u32, Seen)>,
    pod_counts: BTreeMap<u32, Counts>,
    jobs: HashMap<String, (u32, Seen)>,
    job_counts: BTreeMap<u32, Counts>,
    restarts: u64,
    /// The uid of the pod the bench makes fail.
    target: Option<String>,
    marks: Vec<(String, Instant)>,
}

fn label<'a>(m: &'a kube::api::ObjectMeta, k: &str) -> Option<&'a str> {
    m.labels.as_ref()?.get(k).map(String::as_str)
}

fn attempt_of(m: &kube::api::ObjectMeta) -> u32 {
    label(m, RESTART_ATTEMPT).and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Tracker {
    /// What the pods and Jobs are at, for a time-out's error.
    fn stuck(&self) -> String {
        format!("pods by attempt {:?}, Jobs by attempt {:?}", self.pod_counts, self.job_counts)
    }

    fn new(pods_total: usize, jobs_total: usize) -> Tracker {
        Tracker {
            pods_total,
            jobs_total,
            pods: HashMap::new(),
            pod_counts: BTreeMap::new(),
            jobs: HashMap::new(),
            job_counts: BTreeMap::new(),
            restarts: 0,
            target: None,
            marks: Vec::new(),
        }
    }

    fn at(&self, what: &str) -> Option<Instant> {
        self.marks.iter().find(|(m, _)| m == what).map(|(_, t)| *t)
    }

    fn mark(&mut self, what: String, now: Instant) {
        if self.at(&what).is_none() {
            self.marks.push((what, now));
        }
    }

    fn pods(&self, attempt: u32) -> Counts {
        self.pod_counts.get(&attempt).copied().unwrap_or_default()
    }

    fn pod(&mut self, p: &Pod, deleted: bool, now: Instant) {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let attempt = attempt_of(&p.metadata);
        let old = self.pods.get(&uid).map(|(_, s)| *s);
        let o = old.unwrap_or_default();
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        let new = Seen {
            present: !deleted,
            scheduled: o.scheduled || p.spec.as_ref().is_some_and(|s| s.node_name.is_some()),
            running: !deleted && all_running(p),
            failed: o.failed || phase == "Failed",
            deleting: o.deleting || p.metadata.deletion_timestamp.is_some(),
        };
        self.pod_counts.entry(attempt).or_default().apply(old, new);
        if new.failed && self.target.as_deref() == Some(uid.as_str()) {
            self.mark(FAILED_POD.into(), now);
        }
        self.pods.insert(uid, (attempt, new));
    }

    fn job(&mut self, j: &Job, deleted: bool) {
        let uid = j.metadata.uid.clone().unwrap_or_default();
        let attempt = attempt_of(&j.metadata);
        let old = self.jobs.get(&uid).map(|(_, s)| *s);
        let o = old.unwrap_or_default();
        let failed = j
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        let new = Seen {
            present: !deleted,
            failed: o.failed || failed,
            deleting: o.deleting || j.metadata.deletion_timestamp.is_some(),
            ..Seen::default()
        };
        self.job_counts.entry(attempt).or_default().apply(old, new);
        self.jobs.insert(uid, (attempt, new));
    }

    fn check(&mut self, now: Instant) {
        let (pt, jt) = (self.pods_total, self.jobs_total);
        let attempts: std::collections::BTreeSet<u32> =
            self.pod_counts.keys().chain(self.job_counts.keys()).copied().collect();
        for a in attempts {
            let c = self.pods(a);
            let j = self.job_counts.get(&a).copied().unwrap_or_default();
            let checks = [
                (j.seen >= 1, "first Job created".to_string()),
                (j.seen == jt, format!("all {jt} Jobs created")),
                (c.seen >= 1, "first pod created".to_string()),
                (c.seen == pt, format!("all {pt} pods created")),
                (c.scheduled == pt, format!("all {pt} pods scheduled")),
                (c.running == pt, format!("all {pt} pods Running")),
                (j.failed >= 1, "a Job is Failed".to_string()),
                (j.seen == jt && j.deleting == jt, "every Job being deleted".to_string()),
                (c.seen == pt && c.failed == pt, "every pod Failed (stopped)".to_string()),
                (c.seen == pt && c.present == 0, "every pod gone".to_string()),
                (j.seen == jt && j.present == 0, "every Job gone".to_string()),
            ];
            for (reached, what) in checks {
                if reached {
                    self.mark(format!("attempt {a}: {what}"), now);
                }
            }
        }
        if self.restarts >= 1 {
            self.mark(JOBSET_RESTARTED.into(), now);
        }
    }
}

enum Watched {
    Pod(Box<watcher::Event<Pod>>),
    Job(Box<watcher::Event<Job>>),
    JobSet(Box<watcher::Event<kube::api::DynamicObject>>),
}

/// Follows the pods and Jobs of JobSet `name` and the JobSet itself into `tracker`, bumping `tx`
/// after every event.
fn track(
    client: kube::Client,
    name: &str,
    tracker: Arc<Mutex<Tracker>>,
    tx: tokio::sync::watch::Sender<()>,
) -> tokio::task::JoinHandle<()> {
    let sel = format!("{JS_NAME}={name}");
    let ar = jobset_resource();
    let pods = watcher(Api::<Pod>::default_namespaced(client.clone()), watcher::Config::default().labels(&sel))
        .default_backoff()
        .filter_map(|e| async move { e.ok().map(|e| Watched::Pod(Box::new(e))) });
    let jobs = watcher(Api::<Job>::default_namespaced(client.clone()), watcher::Config::default().labels(&sel))
        .default_backoff()
        .filter_map(|e| async move { e.ok().map(|e| Watched::Job(Box::new(e))) });
    let jobsets = watcher(
        Api::<kube::api::DynamicObject>::namespaced_with(client, "default", &ar),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .filter_map(|e| async move { e.ok().map(|e| Watched::JobSet(Box::new(e))) });
    let mut events = futures::stream::select_all([pods.boxed(), jobs.boxed(), jobsets.boxed()]);
    tokio::spawn(async move {
        use watcher::Event::{Apply, Delete, InitApply};
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let mut t = tracker.lock().expect("tracker lock");
            match ev {
                Watched::Pod(e) => match *e {
                    Apply(p) | InitApply(p) => t.pod(&p, false, now),
                    Delete(p) => t.pod(&p, true, now),
                    _ => {}
                },
                Watched::Job(e) => match *e {
                    Apply(j) | InitApply(j) => t.job(&j, false),
                    Delete(j) => t.job(&j, true),
                    _ => {}
                },
                Watched::JobSet(e) => {
                    if let Apply(js) | InitApply(js) = *e {
                        t.restarts = js.data.pointer("/status/restarts").and_then(|r| r.as_u64()).unwrap_or(0);
                    }
                }
            }
            t.check(now);
            drop(t);
            tx.send_replace(());
        }
    })
}

/// Waits (at most `limit`) until `pred` gives the time a milestone was reached in the state a
/// bench's watches keep (bumped through `rx`); on time-out, the error says `what` and `stuck`.
async fn milestone<T>(
    state: &Arc<Mutex<T>>,
    rx: &mut tokio::sync::watch::Receiver<()>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&T) -> Option<Instant>,
    stuck: impl Fn(&T) -> String,
) -> anyhow::Result<Instant> {
    let wait = async {
        loop {
            if let Some(at) = pred(&state.lock().expect("bench state lock")) {
                return Ok(at);
            }
            rx.changed().await.map_err(|_| anyhow::anyhow!("the watches ended"))?;
        }
    };
    match tokio::time::timeout(limit, wait).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "timed out after {} s waiting for {what}; {}",
            limit.as_secs(),
            stuck(&state.lock().expect("bench state lock"))
        ),
    }
}

/// The Job controller on a thread (and runtime) of its own, so that its CPU time can be read
/// apart from the rest of the cluster's. Start it with `LocalConfig::job_controller` false.
struct JobControllerThread {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<Duration>,
    tid: i32,
}

impl JobControllerThread {
    fn spawn(server: &Arc<ApiServer>, config: jobset_controllers::job::JobControllerConfig) -> anyhow::Result<Self> {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let client = server.client();
        let thread = std::thread::spawn(move || {
            let _ = tid_tx.send(nix::unistd::gettid().as_raw());
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("controller runtime");
            rt.block_on(async move {
                // Its own pod watch, on its own thread, so its CPU time counts the parsing too.
                let pods = jobset_controllers::shared_pods::SharedPods::start(
                    client.clone(),
                    watcher::Config::default().labels("batch.kubernetes.io/controller-uid"),
                );
                tokio::select! {
                    _ = jobset_controllers::job::run(client, config, pods) => {}
                    _ = stop_rx => {}
                }
            });
            cpu(UsageWho::RUSAGE_THREAD)
        });
        let tid = tid_rx.recv().context("the Job controller thread")?;
        Ok(JobControllerThread { stop, thread, tid })
    }

    /// Stops the controller; returns the CPU time its thread used.
    fn stop(self) -> anyhow::Result<Duration> {
        let _ = self.stop.send(());
        self.thread.join().map_err(|_| anyhow::anyhow!("the controller thread panicked"))
    }
}

/// CPU time of one thread of this process, from /proc (clock ticks of 10 ms).
fn thread_cpu(tid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse().ok()).collect();
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

struct JobsetFigures {
    strategy: &'static str,
    startup: Duration,
    /// API requests from the create to every pod Running.
    startup_requests: u64,
    restart: Duration,
    /// From the delete request to the pod's Failed phase being seen.
    fail_seen: Duration,
    by_verb: Vec<(&'static str, u64)>,
    requests: u64,
    /// Requests answered 429 by the in-flight limits during the restart.
    rejected: u64,
    cpu: Duration,
    job_controller_cpu: Duration,
    /// CPU time of the `jobset manager` process during the restart (zero in-process).
    manager_cpu: Duration,
    rss_mb: f64,
}

async fn jobset_bench(jobs: i32, pods_per_job: i32, nodes: usize, progress: Option<Duration>) -> anyhow::Result<()> {
    println!(
        "jobset bench jobset: {jobs} Jobs x {pods_per_job} pods = {} pods on {nodes} simulated nodes ({} cores)",
        jobs * pods_per_job,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let mut figures = vec![];
    for strategy in ["Recreate", "BlockingRecreate"] {
        let c = manager::Controllers::InProcess;
        figures.push(jobset_restart(strategy, jobs, pods_per_job, nodes, progress, Limits::default(), c).await?);
    }
    println!();
    println!(
        "| restart strategy | create → all Running | pod Failed → all Running again | API requests (restart) | process CPU (restart) | Job controller CPU (restart) | RSS |"
    );
    println!("|---|---|---|---|---|---|---|");
    for f in &figures {
        let verbs: Vec<String> = f.by_verb.iter().filter(|(_, n)| *n > 0).map(|(v, n)| format!("{v} {n}")).collect();
        println!(
            "| {} | {:.2} s | {:.2} s | {} ({}) | {:.1} s | {:.1} s | {:.0} MB |",
            f.strategy,
            f.startup.as_secs_f64(),
            f.restart.as_secs_f64(),
            f.requests,
            verbs.join(", "),
            f.cpu.as_secs_f64(),
            f.job_controller_cpu.as_secs_f64(),
            f.rss_mb
        );
    }
    for f in &figures {
        println!(
            "({}: the delete request to the pod's Failed phase seen: {:.0} ms)",
            f.strategy,
            f.fail_seen.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// Prints the milestones reached between `from` and `to`, relative to `from`.
fn print_timeline(t: &Tracker, from: Instant, to: Instant) {
    for (what, at) in &t.marks {
        if *at >= from && *at <= to {
            println!("    {:>8.2} s  {what}", at.duration_since(from).as_secs_f64());
        }
    }
}

/// One JobSet on a fresh cluster: create → all Running; one pod fails → all Running again.
async fn jobset_restart(
    strategy: &'static str,
    jobs: i32,
    pods_per_job: i32,
    nodes: usize,
    progress: Option<Duration>,
    limits: Limits,
    controllers: manager::Controllers,
) -> anyhow::Result<JobsetFigures> {
    let server = server_with(Box::new(Memory), limits)?;
    let mut cfg = LocalConfig::with_nodes(nodes);
    cfg.job_controller = false;
    let external = controllers == manager::Controllers::Manager;
    cfg.jobset_controller = !external;
    cfg.appwrapper_controller = !external;
    let controller = JobControllerThread::spawn(&server, cfg.job.clone())?;
    let controller_tid = controller.tid;
    let cluster = LocalCluster::start(server.clone(), cfg).await;
    let manager = match external {
        true => Some(manager::ManagerProcess::start(&server).await?),
        false => None,
    };
    let manager_cpu = || manager.as_ref().map(|m| m.cpu()).unwrap_or_default();

    let client = server.client();
    let name = format!("bench-{}", strategy.to_lowercase());
    let total = (jobs * pods_per_job) as usize;
    let tracker = Arc::new(Mutex::new(Tracker::new(total, jobs as usize)));
    let (tx, mut rx) = tokio::sync::watch::channel(());
    let tracking = track(client.clone(), &name, tracker.clone(), tx);
    let started = Instant::now();
    let progress = progress.map(|every| {
        let tracker = tracker.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let line = {
                    let t = tracker.lock().expect("tracker lock");
                    let attempts: std::collections::BTreeSet<u32> =
                        t.pod_counts.keys().chain(t.job_counts.keys()).copied().collect();
                    attempts
                        .iter()
                        .map(|a| {
                            let (p, j) = (t.pods(*a), t.job_counts.get(a).copied().unwrap_or_default());
                            format!(
                                "attempt {a}: Jobs {}/{} present, {} deleting; pods {} created, {} present, {} scheduled, {} Running, {} Failed, {} deleting",
                                j.present, j.seen, j.deleting, p.seen, p.present, p.scheduled, p.running, p.failed, p.deleting
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(" | ")
                };
                println!("  [{:6.1} s] {line}", started.elapsed().as_secs_f64());
            }
        })
    });

    let jobsets: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &jobset_resource());
    let js: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 5, "restartStrategy": strategy},
            "replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {"spec": {
                "parallelism": pods_per_job, "completions": pods_per_job, "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "main", "image": "registry.example.com/ml/trainer:2026.11"}]}
                }
            }}}]
        }
    }))?;
    println!("{strategy}: JobSet {name:?}");
    let limit = Duration::from_secs(300);
    let (_, requests_created) = server.requests.snapshot();
    let created = Instant::now();
    jobsets.create(&PostParams::default(), &js).await?;
    let running = milestone(
        &tracker,
        &mut rx,
        limit,
        "every pod Running",
        |t| t.at(&format!("attempt 0: all {total} pods Running")),
        Tracker::stuck,
    )
    .await?;
    let startup = running.duration_since(created);
    let (_, requests_running) = server.requests.snapshot();
    println!("  create → all {total} pods Running: {:.2} s", startup.as_secs_f64());
    print_timeline(&tracker.lock().expect("tracker lock"), created, running);

    // One pod fails: pod 0 of Job 0 is deleted (as an eviction or a lost node would), its only
    // container is killed (exit 143), the node agent reports it Failed; backoffLimit 0 fails its
    // Job, which triggers the JobSet's failure policy.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let sel = format!("{JS_NAME}={name},{JOB_INDEX}=0,{COMPLETION_INDEX}=0,{RESTART_ATTEMPT}=0");
    let victim = pods.list(&kube::api::ListParams::default().labels(&sel)).await?;
    let victim = victim.items.first().context("pod 0 of Job 0")?;
    let victim_name = victim.metadata.name.clone().unwrap_or_default();
    tracker.lock().expect("tracker lock").target = victim.metadata.uid.clone();
    let (verbs_before, requests_before) = server.requests.snapshot();
    let rejected_before = server.requests.rejected();
    let cpu_before = cpu(UsageWho::RUSAGE_SELF);
    let jc_before = thread_cpu(controller_tid);
    let manager_before = manager_cpu();
    let deleted = Instant::now();
    pods.delete(&victim_name, &kube::api::DeleteParams::default()).await?;
    let restarted = milestone(
        &tracker,
        &mut rx,
        limit,
        "every pod of attempt 1 Running",
        |t| t.at(&format!("attempt 1: all {total} pods Running")),
        Tracker::stuck,
    )
    .await?;
    let (verbs_after, requests_after) = server.requests.snapshot();
    let rejected = server.requests.rejected() - rejected_before;
    let cpu_used = cpu(UsageWho::RUSAGE_SELF) - cpu_before;
    let jc_used = thread_cpu(controller_tid).saturating_sub(jc_before);
    let manager_used = manager_cpu().saturating_sub(manager_before);
    let failed = tracker.lock().expect("tracker lock").at(FAILED_POD).unwrap_or(deleted);
    let restart = restarted.duration_since(failed);
    println!(
        "  pod {victim_name} deleted; Failed seen after {:.0} ms; → all {total} pods of attempt 1 Running: {:.2} s",
        failed.duration_since(deleted).as_secs_f64() * 1e3,
        restart.as_secs_f64()
    );
    print_timeline(&tracker.lock().expect("tracker lock"), failed, restarted);
    // The controller's restart record beside the bench's own figures (after them: the wait for
    // its last phase time is no part of what was measured).
    let seen = {
        let t = tracker.lock().expect("tracker lock");
        let anchor = (Instant::now(), jiff::Timestamp::now());
        let wall = |at: Instant| phases::wall(at, anchor);
        phases::Seen {
            failure: wall(failed),
            decided: t.at(JOBSET_RESTARTED).map(wall),
            stopped: t.at("attempt 0: every Job gone").map(wall),
            barrier_lifted: None,
            running: wall(restarted),
            running_what: format!("all {total} pods of attempt 1 Running"),
            note: None,
        }
    };
    phases::print_record(client.clone(), &name, 1, limit, &seen).await;
    let by_verb: Vec<(&'static str, u64)> =
        verbs_after.iter().zip(&verbs_before).map(|((v, a), (_, b))| (*v, a - b)).collect();
    let figures = JobsetFigures {
        strategy,
        startup,
        startup_requests: requests_running - requests_created,
        restart,
        fail_seen: failed.duration_since(deleted),
        by_verb,
        requests: requests_after - requests_before,
        rejected,
        cpu: cpu_used,
        job_controller_cpu: jc_used,
        manager_cpu: manager_used,
        rss_mb: rss_mb(),
    };
    tracking.abort();
    if let Some(p) = progress {
        p.abort();
    }
    controller.stop()?;
    if let Some(m) = manager {
        m.stop().await;
    }
    cluster.shutdown().await;
    Ok(figures)
}

fn jobset_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    )
}

/// Which cases `jobset bench in-place` runs.
struct InPlaceCases<'a> {
    modes: &'a [in_place::Mode],
    recreate: bool,
    scoped: bool,
    /// Only the scoped cases.
    only_scoped: bool,
    /// Priority and fairness off / on for the simulated in-place cases, each in turn.
    apf: &'a [bool],
}

/// `jobset bench in-place`: processes, then in-place and `Recreate` restarts at each pod count,
/// then the scoped cases at each pod count.
async fn in_place_bench(
    sizes: &[i32],
    pods_per_job: i32,
    pods_per_node: i32,
    (fail_after, process_fail_after): (Duration, Duration),
    limits: Limits,
    process_pods: i32,
    cases: InPlaceCases<'_>,
) -> anyhow::Result<()> {
    let InPlaceCases { modes, recreate, scoped, only_scoped, apf } = cases;
    // Bad sizes fail before anything runs.
    let topologies = match scoped {
        true => {
            sizes.iter().map(|&p| in_place::scoped::Topology::new(p, pods_per_job)).collect::<anyhow::Result<_>>()?
        }
        false => vec![],
    };
    let limit = |n: Option<usize>| n.map_or("unlimited".to_string(), |n| n.to_string());
    println!(
        "jobset bench in-place ({} cores); API server in-flight limits: {} read-only, {} mutating",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        limit(limits.read_only),
        limit(limits.mutating)
    );
    // Processes first: forking from a process that grew to gigabytes in the simulated runs
    // (page tables, copy-on-write faults) would slow the process runtime down.
    let mut process = vec![];
    if process_pods > 0 && !only_scoped {
        for &mode in modes {
            println!();
            process.push((mode, in_place::process(process_pods, limits, process_fail_after, mode).await?));
        }
    }
    let mut rows = vec![];
    for &pods in sizes.iter().filter(|_| !only_scoped) {
        let jobs = (pods / pods_per_job).max(1);
        let ppj = pods / jobs;
        let nodes = ((jobs * ppj) / pods_per_node.max(1)).max(1) as usize;
        println!("\n{} pods: {jobs} Jobs x {ppj} pods on {nodes} simulated nodes", jobs * ppj);
        let mut in_place = vec![];
        for (&mode, &apf) in modes.iter().flat_map(|m| apf.iter().map(move |a| (m, a))) {
            let c = manager::Controllers::InProcess;
            let limits = Limits { apf, ..limits };
            in_place.push((mode, in_place::simulated(jobs, ppj, nodes, limits, fail_after, mode, c).await?));
        }
        let recreate = match recreate {
            true => {
                Some(jobset_restart("Recreate", jobs, ppj, nodes, None, limits, manager::Controllers::InProcess).await?)
            }
            false => None,
        };
        rows.push((jobs * ppj, in_place, recreate));
    }
    let mut scoped_rows = vec![];
    for topo in topologies {
        let nodes = (topo.total() as i32 / pods_per_node.max(1)).max(1) as usize;
        println!(
            "\nscoped cases, {} pods: {} Jobs × (1 driver + {} workers) on {nodes} simulated nodes",
            topo.total(),
            topo.jobs,
            topo.workers_per_job
        );
        let mut figures = vec![];
        for &mode in modes {
            for case in [in_place::scoped::Case::Scoped, in_place::scoped::Case::Whole] {
                println!();
                figures.push(in_place::scoped::run(case, topo, mode, nodes, limits, fail_after).await?);
            }
        }
        if recreate {
            println!();
            let case = in_place::scoped::Case::Recreate;
            figures.push(
                in_place::scoped::run(case, topo, in_place::Mode::MainContainer, nodes, limits, fail_after).await?,
            );
        }
        scoped_rows.push((topo, figures));
    }
    if rows.is_empty() && process.is_empty() {
        print_scoped(&scoped_rows);
        return Ok(());
    }
    println!();
    println!(
        "| pods | runtime | create → all past the barrier | in-place restart (failure → all workers past the barrier) | Recreate restart | Recreate / in-place | API requests (in-place restart) | 429s | process CPU (restart) | RSS | {} |",
        in_place::CONTROLLERS_COLUMN
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let verbs = |v: &[(&str, u64)]| {
        v.iter().filter(|(_, n)| *n > 0).map(|(v, n)| format!("{v} {n}")).collect::<Vec<_>>().join(", ")
    };
    let row = |pods: i32, runtime: &str, f: &in_place::InPlaceFigures, r: Option<&JobsetFigures>| {
        let (rec, ratio) = match r {
            Some(r) => (
                format!("{:.2} s", r.restart.as_secs_f64()),
                format!("{:.1}×", r.restart.as_secs_f64() / f.restart.as_secs_f64()),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {pods} | {runtime}{} | {:.2} s | {:.3} s | {rec} | {ratio} | {} ({}) | {} | {:.1} s | {:.0} MB | {} |",
            f.apf_label(),
            f.startup.as_secs_f64(),
            f.restart.as_secs_f64(),
            f.requests,
            verbs(&f.by_verb),
            f.rejected,
            f.cpu.as_secs_f64(),
            f.rss_mb,
            f.controllers_cell()
        );
    };
    for (pods, modes, r) in &rows {
        for (mode, f) in modes {
            row(*pods, &format!("simulated, {}", mode.label()), f, r.as_ref());
        }
    }
    for (mode, f) in &process {
        row(process_pods, &format!("process, {}", mode.label()), f, None);
    }
    print_scoped(&scoped_rows);
    Ok(())
}

/// The scoped cases' table, then, per pod count and mode, scoped / whole and Recreate / scoped.
fn print_scoped(rows: &[(in_place::scoped::Topology, Vec<in_place::scoped::ScopedFigures>)]) {
    use in_place::scoped::{Case, ratio};
    if rows.is_empty() {
        return;
    }
    let verbs = |v: &[(&str, u64)]| {
        v.iter().filter(|(_, n)| *n > 0).map(|(v, n)| format!("{v} {n}")).collect::<Vec<_>>().join(", ")
    };
    println!();
    println!(
        "| pods | runtime | case | create → all running | failure → restarted pods running | pods restarted | drivers kept running | API requests (restart) | 429s | process CPU (restart) | RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (topo, figures) in rows {
        for f in figures {
            let runtime = f.mode.map_or("simulated, no agent".to_string(), |m| format!("simulated, {}", m.label()));
            println!(
                "| {} | {runtime} | {} | {:.2} s | {:.3} s | {} ({}) | {} of {} | {} ({}) | {} | {:.1} s | {:.0} MB |",
                topo.total(),
                f.case.label(),
                f.startup.as_secs_f64(),
                f.restart.as_secs_f64(),
                f.outcome.restarted_total(),
                f.outcome.restarted.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", "),
                f.outcome.drivers_kept,
                f.outcome.drivers,
                f.requests,
                verbs(&f.by_verb),
                f.rejected,
                f.cpu.as_secs_f64(),
                f.rss_mb
            );
        }
    }
    println!(
        "(API requests: from the failure to the end; they include the simulated nodes' heartbeats when a restart spans their 10 s tick: a lease PATCH, a node GET and a node status PATCH per node)"
    );
    println!();
    println!("| pods | runtime | scoped / whole (target ≤ 1) | Recreate / scoped (target ≥ 10) |");
    println!("|---|---|---|---|");
    for (topo, figures) in rows {
        let recreate = figures.iter().find(|f| f.case == Case::Recreate);
        let modes: Vec<in_place::Mode> = figures.iter().filter_map(|f| f.mode).fold(vec![], |mut v, m| {
            if !v.contains(&m) {
                v.push(m);
            }
            v
        });
        for mode in modes {
            let of = |case: Case| figures.iter().find(|f| f.case == case && f.mode == Some(mode));
            let (Some(scoped), whole) = (of(Case::Scoped), of(Case::Whole)) else { continue };
            println!(
                "| {} | simulated, {} | {} | {} |",
                topo.total(),
                mode.label(),
                whole.map_or("-".to_string(), |w| ratio(scoped.restart, w.restart)),
                recreate.map_or("-".to_string(), |r| ratio(r.restart, scoped.restart))
            );
        }
    }
}
