//! `jobset chaos`: runs a restart-heavy scenario (scenario.rs) on `jobset up --data-dir` many
//! times, each run with faults at random instants drawn from a printed seed (schedule.rs):
//! `kill -9` of `jobset up` (started again on the same data dir), a node lost past the node
//! grace period, a full disk under the data dir, `kill -9` of `jobset manager` (the two-process
//! setup, manager.rs). Each run must end as the fault-free run does
//! (verdict.rs): same condition, reason and restart counts, no Job or pod created twice for one
//! attempt, every acknowledged write present, no host process of the run left. docs/chaos.md.

mod manager;
mod scenario;
mod schedule;
mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use scenario::{FAILING_ATTEMPTS, MARKER_ENV, NAME, Variant};
use schedule::{Fault, FaultKind, Limits};
use verdict::{Divergence, EndState, GapEnd, JobSeen, Observed, Outage, PodSeen};

/// Set when the chaos driver runs in a private mount namespace of its own (for disk faults).
const NAMESPACE_ENV: &str = "JOBSET_CHAOS_NAMESPACE";
/// What `jobset up` prints first once it listens.
const LISTENING: &str = "jobset API server listening on https://127.0.0.1:";
/// How soon the driver's watches try again while `jobset up` is down.
const RETRY: Duration = Duration::from_millis(50);
/// The node annotation `jobset node fail` sets.
const FAILED_ANNOTATION: &str = crate::node::FAILED_ANNOTATION;

#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// How many runs (default: 100, or 10 with --short).
    #[arg(long)]
    pub runs: Option<usize>,
    /// The CI mode: 10 runs (unless --runs is given too).
    #[arg(long)]
    pub short: bool,
    /// The first run's seed (run i has seed+i); default: from the clock. A run's seed replays
    /// its variant and faults: `--seed S --runs 1`.
    #[arg(long)]
    pub seed: Option<u64>,
    /// The scenarios, taken in turn by seed.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "recreate,in-place,appwrapper")]
    pub variants: Vec<Variant>,
    /// The faults to inject (`--max-faults 0` gives fault-free runs).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kill-up,node-fail,disk-full,kill-manager")]
    pub faults: Vec<FaultKind>,
    /// At most this many faults per run (0: fault-free runs).
    #[arg(long, default_value_t = 3)]
    pub max_faults: usize,
    /// Faults start within this long after the scenario is created.
    #[arg(long, default_value = "4s", value_parser = crate::parse_duration)]
    pub window: Duration,
    /// How long `jobset up` or `jobset manager` stays down after a kill, at most.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub max_down: Duration,
    /// How long the disk stays full, at most.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub max_full: Duration,
    /// The size of the data dir's filesystem (a tmpfs), for disk faults.
    #[arg(long, default_value = "256m")]
    pub disk_size: String,
    /// How long each worker runs before exiting (its `sleep`).
    #[arg(long, default_value = "0.5")]
    pub work: String,
    /// Give up on a run whose workload has not finished this long after the last fault.
    #[arg(long, default_value = "90s", value_parser = crate::parse_duration)]
    pub run_timeout: Duration,
    /// How long `jobset up` may take to listen, and to stop on SIGTERM.
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    pub startup_timeout: Duration,
    /// How long the run's processes may take to end once `jobset up` stopped.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub orphan_grace: Duration,
    /// How often the driver writes a ConfigMap whose acknowledgement it remembers.
    #[arg(long, default_value = "100ms", value_parser = crate::parse_duration)]
    pub ack_interval: Duration,
    /// The number of nodes.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// `jobset up --heartbeat-interval`.
    #[arg(long, default_value = "100ms", value_parser = crate::parse_duration)]
    pub heartbeat_interval: Duration,
    /// `jobset up --node-grace-period`.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub node_grace_period: Duration,
    /// `jobset up --job-sync-batch-period`.
    #[arg(long, default_value = "10ms", value_parser = crate::parse_duration)]
    pub job_sync_batch_period: Duration,
    /// `jobset up --job-backoff`.
    #[arg(long, default_value = "10ms", value_parser = crate::parse_duration)]
    pub job_backoff: Duration,
    /// `JOBSET_LOG` of `jobset up` (its log is `up.log` in the run's directory).
    #[arg(long, default_value = "warn")]
    pub up_log: String,
    /// Where runs keep their data dirs and `jobset up` logs (default: a temporary directory,
    /// removed at the end).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub seed: u64,
    pub variant: Variant,
    pub faults: Vec<FaultKind>,
    pub took: Duration,
    pub divergences: Vec<Divergence>,
    /// The driver could not carry the run out (not a finding about the product).
    pub error: Option<String>,
    /// The distinct errors of the writes the server refused (while the disk was full).
    pub refused: Vec<String>,
    /// What else happened that is not a divergence (a manager that exited on its own when it
    /// lost its Lease while `jobset up` was down, and was started again).
    pub notes: Vec<String>,
    /// Faults of the plan not injected (a node-fail in place once the last attempt began).
    pub skipped: usize,
    /// The run could not end and its end is not defined (in place, a pod lost after another
    /// one succeeded: [`verdict::lost_after_success`]).
    pub undefined: bool,
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

pub async fn run(mut args: ChaosArgs) -> anyhow::Result<i32> {
    if args.variants.is_empty() {
        bail!("--variants: at least one scenario");
    }
    let runs = args.runs.unwrap_or(if args.short { 10 } else { 100 });
    if args.max_faults == 0 {
        args.faults.clear();
    }
    if args.faults.contains(&FaultKind::DiskFull) && std::env::var_os(NAMESPACE_ENV).is_none() {
        // The data dirs go on tmpfs mounts only this process tree sees.
        if private_namespace_works().await {
            return reexec_in_private_namespace().await;
        }
        eprintln!("disk-full faults need a private mount namespace (`unshare -m`, as root): left out");
        args.faults.retain(|f| *f != FaultKind::DiskFull);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    });
    let faults: Vec<&str> = args.faults.iter().map(|f| f.name()).collect();
    println!(
        "chaos: {runs} runs from seed {seed}, faults: {}",
        if faults.is_empty() { "none".into() } else { faults.join(", ") }
    );
    let temp = tempfile::Builder::new().prefix("jobset-chaos-").tempdir()?;
    let work = args.work_dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let started = Instant::now();
    let mut results = Vec::new();
    for i in 0..runs {
        let run_seed = seed.wrapping_add(i as u64);
        let variant = args.variants[(run_seed % args.variants.len() as u64) as usize];
        let r = one_run(&args, &work, run_seed, variant).await;
        let verdict = match (&r.error, r.divergences.len()) {
            (Some(e), _) => format!("ERROR: {e}"),
            (None, 0) => "ok".into(),
            (None, n) => format!("{n} DIVERGENCES"),
        };
        let faults: Vec<&str> = r.faults.iter().map(|f| f.name()).collect();
        println!(
            "run {:>3} seed {} {:<10} faults [{}] {:.1}s: {verdict}",
            i + 1,
            r.seed,
            r.variant.name(),
            faults.join(" "),
            r.took.as_secs_f64()
        );
        for d in &r.divergences {
            println!("    {d}");
        }
        for e in &r.refused {
            println!("    write refused: {e}");
        }
        for n in &r.notes {
            println!("    note: {n}");
        }
        results.push(r);
    }
    print!("{}", summary(&results, started.elapsed()));
    let bad = results.iter().any(|r| r.error.is_some() || !r.divergences.is_empty());
    Ok(if bad { 1 } else { 0 })
}

/// Whether `unshare -m` works here (root, and not forbidden by a container's seccomp profile).
async fn private_namespace_works() -> bool {
    tokio::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// This command again, in a private mount namespace: its exit code.
async fn reexec_in_private_namespace() -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("finding the jobset executable")?;
    let status = tokio::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(NAMESPACE_ENV, "1")
        .status()
        .await
        .context("running unshare")?;
    Ok(status.code().unwrap_or(1))
}

/// The table printed at the end: runs and faults by variant, divergences, time.
pub fn summary(results: &[RunResult], took: Duration) -> String {
    let kinds = [FaultKind::KillUp, FaultKind::NodeFail, FaultKind::DiskFull, FaultKind::KillManager];
    let mut out = format!("\n{:<12}{:>6}", "variant", "runs");
    for k in kinds {
        out.push_str(&format!("{:>13}", k.name()));
    }
    out.push_str(&format!("{:>13}{:>8}\n", "divergences", "errors"));
    let mut variants: Vec<Variant> = results.iter().map(|r| r.variant).collect();
    variants.sort();
    variants.dedup();
    let row = |label: &str, rs: &[&RunResult]| {
        let mut line = format!("{label:<12}{:>6}", rs.len());
        for k in kinds {
            line.push_str(&format!(
                "{:>13}",
                rs.iter().map(|r| r.faults.iter().filter(|f| **f == k).count()).sum::<usize>()
            ));
        }
        let divergences: usize = rs.iter().map(|r| r.divergences.len()).sum();
        let errors = rs.iter().filter(|r| r.error.is_some()).count();
        line.push_str(&format!("{divergences:>13}{errors:>8}\n"));
        line
    };
    for v in &variants {
        let rs: Vec<&RunResult> = results.iter().filter(|r| r.variant == *v).collect();
        out.push_str(&row(v.name(), &rs));
    }
    out.push_str(&row("total", &results.iter().collect::<Vec<_>>()));
    out.push_str(&format!("{} runs in {:.0}s\n", results.len(), took.as_secs_f64()));
    let skipped: usize = results.iter().map(|r| r.skipped).sum();
    if skipped > 0 {
        out.push_str(&format!("{skipped} node-fail faults skipped (in place, once the last attempt began)\n"));
    }
    let undefined = results.iter().filter(|r| r.undefined).count();
    if undefined > 0 {
        out.push_str(&format!(
            "{undefined} runs without a defined end (in place, a pod lost after another succeeded)\n"
        ));
    }
    for r in results {
        let replay = format!("--seed {} --runs 1 --variants {}", r.seed, r.variant.name());
        for d in &r.divergences {
            out.push_str(&format!("divergence, seed {} ({replay}): {d}\n", r.seed));
        }
        if let Some(e) = &r.error {
            out.push_str(&format!("error, seed {} ({replay}): {e}\n", r.seed));
        }
    }
    out
}

/// Runs one seed: never fails, the driver's own errors are in [`RunResult::error`].
async fn one_run(args: &ChaosArgs, work: &Path, seed: u64, variant: Variant) -> RunResult {
    let limits = Limits {
        kinds: args.faults.clone(),
        window: args.window,
        max_faults: args.max_faults,
        max_down: args.max_down,
        node_grace: args.node_grace_period,
        max_full: args.max_full,
        nodes: args.nodes,
    };
    let plan = schedule::plan(seed, &limits);
    let started = Instant::now();
    let mut r = RunResult {
        seed,
        variant,
        faults: plan.iter().map(|f| f.kind).collect(),
        took: Duration::ZERO,
        divergences: vec![],
        error: None,
        refused: vec![],
        notes: vec![],
        skipped: 0,
        undefined: false,
    };
    let dir = work.join(format!("run-{seed}"));
    let disk = args.faults.contains(&FaultKind::DiskFull);
    // Runs with a manager fault run the two-process setup; the others, `jobset up` alone.
    let pair = plan.iter().any(|f| f.kind == FaultKind::KillManager);
    match Run::new(args, &dir, seed, disk, pair).await {
        Ok(mut run) => {
            match run.execute(variant, &plan).await {
                Ok((observed, refused)) => {
                    r.divergences = verdict::divergences(&variant.expected(), &observed);
                    r.refused = refused;
                    if variant == Variant::InPlace
                        && observed.end.is_none()
                        && let Some((lost, succeeded)) = verdict::lost_after_success(&observed.pods)
                    {
                        r.undefined = true;
                        run.notes.push(format!(
                            "no defined end: pod {lost} was lost after pod {succeeded} succeeded (in place, its \
                             replacement waits for a pod that can never join)"
                        ));
                    }
                }
                Err(e) => r.error = Some(format!("{e:#}")),
            }
            // The table counts the faults injected.
            for k in &run.skipped {
                if let Some(i) = r.faults.iter().position(|f| f == k) {
                    r.faults.remove(i);
                }
            }
            r.skipped = run.skipped.len();
            r.notes = std::mem::take(&mut run.notes);
            run.cleanup().await;
        }
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    r.took = started.elapsed();
    r
}

/// What the driver's watches saw, kept across restarts of `jobset up`.
struct Seen {
    /// When the run began: times below are seconds since then.
    began: Instant,
    pods: BTreeMap<String, PodSeen>,
    /// Per pod not ended: the node, in-place attempt and time of its last version seen.
    active: BTreeMap<String, (String, Option<i64>, f64)>,
    /// A list under way after a gap of the watch: the pods listed so far, and the highest in-place
    /// attempt among them.
    relist: Option<(BTreeSet<String>, Option<i64>)>,
    /// Pods active before a gap and deleted or `Failed` after it.
    gap_ends: Vec<GapEnd>,
    /// The highest in-place attempt (annotation) of any pod version seen.
    in_place_attempt: Option<i64>,
    jobs: BTreeMap<String, JobSeen>,
    /// Each pod's last version seen, in a line (written to `pods.txt` in the run's directory).
    last: BTreeMap<String, String>,
    /// Every pod version seen, in order, each line prefixed by the seconds since the run began
    /// and the resourceVersion (`pods-history.txt`).
    history: Vec<String>,
}

impl Seen {
    fn new(began: Instant) -> Seen {
        Seen {
            began,
            pods: BTreeMap::new(),
            active: BTreeMap::new(),
            relist: None,
            gap_ends: vec![],
            in_place_attempt: None,
            jobs: BTreeMap::new(),
            last: BTreeMap::new(),
            history: vec![],
        }
    }

    fn at(&self) -> f64 {
        self.began.elapsed().as_secs_f64()
    }

    /// A pod version: `relisted` when it came in the list after a gap of the watch.
    fn pod(&mut self, pod: &Pod, relisted: bool) {
        let Some(p) = pod_seen(pod, relisted) else { return };
        let line = pod_line(pod);
        let at = self.at();
        self.history.push(format!("{at:7.3} rv={} {line}", p.first_rv));
        self.last.insert(p.uid.clone(), line);
        let attempt = in_place_attempt(pod);
        self.in_place_attempt = self.in_place_attempt.max(attempt);
        // A pod listed Failed after a gap ended in it: left out of the list, it is taken for
        // one deleted in the gap once the list is complete (with the list's highest attempt).
        let failed_in_gap = relisted && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
        if let Some((listed, most)) = self.relist.as_mut() {
            if !failed_in_gap {
                listed.insert(p.uid.clone());
            }
            *most = (*most).max(attempt);
        }
        if p.end_rv.is_some() || p.end_in_gap {
            if !failed_in_gap {
                self.active.remove(&p.uid);
            }
        } else {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            self.active.insert(p.uid.clone(), (node, attempt, at));
        }
        self.pods.entry(p.uid.clone()).or_insert(p.clone()).merge(&p);
    }

    /// The list after a gap is complete: pods active before it and not listed were deleted in it.
    fn relisted(&mut self) {
        let Some((listed, most)) = self.relist.take() else { return };
        let relisted = self.at();
        let gone: Vec<String> = self.active.keys().filter(|uid| !listed.contains(*uid)).cloned().collect();
        for uid in gone {
            if let Some((node, attempt, last_active)) = self.active.remove(&uid) {
                self.gap_ends.push(GapEnd { uid, node, last_active, relisted, attempt: attempt.max(most) });
            }
        }
    }
}

/// One run's cluster and the driver's tasks around it.
struct Run<'a> {
    args: &'a ChaosArgs,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    marker: String,
    port: u16,
    mounted: bool,
    up: Option<tokio::process::Child>,
    /// `jobset up` ended without the driver killing it.
    crashes: Vec<String>,
    stop: CancellationToken,
    /// The two-process setup: `jobset up --external-controllers` and `jobset manager`.
    pair: bool,
    manager: Option<manager::Manager>,
    /// The manager's webhook and health ports (fixed for the run: its restarts keep them).
    webhook_port: u16,
    health_port: u16,
    notes: Vec<String>,
    /// The nodes failed so far, and the faults of the plan left out.
    outages: Vec<Outage>,
    skipped: Vec<FaultKind>,
    /// Told by the pod recorder after each pod version.
    pods_changed: Arc<tokio::sync::Notify>,
}

impl<'a> Run<'a> {
    async fn new(args: &'a ChaosArgs, dir: &Path, seed: u64, disk: bool, pair: bool) -> anyhow::Result<Run<'a>> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
        let mut run = Run {
            args,
            dir: dir.to_path_buf(),
            log: dir.join("up.log"),
            data,
            marker: format!("chaos-{seed}-{}", std::process::id()),
            port: free_port()?,
            mounted: false,
            up: None,
            crashes: vec![],
            stop: CancellationToken::new(),
            pair,
            manager: None,
            webhook_port: free_port()?,
            health_port: free_port()?,
            notes: vec![],
            outages: vec![],
            skipped: vec![],
            pods_changed: Arc::new(tokio::sync::Notify::new()),
        };
        if disk {
            let size = format!("size={}", args.disk_size);
            let out = tokio::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
                .arg(&run.data)
                .output()
                .await?;
            if !out.status.success() {
                bail!("mounting a tmpfs on {}: {}", run.data.display(), String::from_utf8_lossy(&out.stderr).trim());
            }
            run.mounted = true;
        }
        Ok(run)
    }

    /// Installs the manager's webhook configuration and starts `jobset manager` (two-process
    /// runs); returns once it is ready.
    async fn start_manager(&mut self, client: &kube::Client) -> anyhow::Result<()> {
        manager::install(client, self.webhook_port).await.context("installing the manager's webhooks")?;
        let config = self.dir.join("manager.yaml");
        std::fs::write(&config, manager::config_yaml(self.webhook_port, self.health_port))?;
        let spec = manager::Spec {
            kubeconfig: self.dir.join("kubeconfig"),
            config,
            health_port: self.health_port,
            log: self.dir.join("manager.log"),
            marker: self.marker.clone(),
            startup_timeout: self.args.startup_timeout,
        };
        self.manager = Some(manager::Manager::start(spec).await?);
        Ok(())
    }

    /// Starts `jobset up` on the data dir and waits for it to listen.
    async fn start_up(&mut self) -> anyhow::Result<()> {
        let a = self.args;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("up")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--port", &self.port.to_string(), "--kubeconfig"])
            .arg(self.dir.join("kubeconfig"))
            .args(["--nodes", &a.nodes.to_string(), "--runtime", "process"])
            .args(["--heartbeat-interval", &ms(a.heartbeat_interval)])
            .args(["--node-grace-period", &ms(a.node_grace_period)])
            .args(["--job-sync-batch-period", &ms(a.job_sync_batch_period)])
            .args(["--job-backoff", &ms(a.job_backoff)])
            .args(self.pair.then_some(["--external-controllers", "jobset,appwrapper"]).into_iter().flatten())
            .env("JOBSET_LOG", &a.up_log)
            .env(MARKER_ENV, &self.marker)
            .env_remove(NAMESPACE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("starting jobset up")?;
        let mut lines = BufReader::new(child.stdout.take().context("jobset up's stdout")?).lines();
        let listening = tokio::time::timeout(a.startup_timeout, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with(LISTENING) {
                    return true;
                }
            }
            false
        })
        .await;
        if !matches!(listening, Ok(true)) {
            let _ = child.kill().await;
            bail!("jobset up did not listen (see {})", self.log.display());
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.up = Some(child);
        Ok(())
    }

    async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(self.dir.join("kubeconfig"))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Notes a `jobset up` that ended on its own, and starts it again.
    async fn check_up(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.up.as_mut()
            && let Some(status) = child.try_wait()?
        {
            self.crashes.push(format!("jobset up exited on its own ({status})"));
            self.up = None;
            self.start_up().await?;
        }
        Ok(())
    }

    /// Runs the scenario through the faults: what was observed, and the errors of refused writes.
    async fn execute(&mut self, variant: Variant, plan: &[Fault]) -> anyhow::Result<(Observed, Vec<String>)> {
        self.start_up().await?;
        let client = self.client().await?;
        if self.pair {
            self.start_manager(&client).await?;
        }
        let seen = Arc::new(Mutex::new(Seen::new(Instant::now())));
        self.record(client.clone(), seen.clone());
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let refused = Arc::new(Mutex::new(Vec::<String>::new()));
        let acker = self.acknowledge(client.clone(), acked.clone(), refused.clone());

        let (resource, plural) = match variant {
            Variant::Appwrapper => {
                use jobset_api::appwrapper::keys;
                (GroupVersionKind::gvk(keys::GROUP, keys::VERSION, keys::KIND), keys::PLURAL)
            }
            _ => (GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets"),
        };
        let api: Api<DynamicObject> =
            Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk_with_plural(&resource, plural));
        let manifest: DynamicObject = serde_json::from_value(variant.manifest(&self.marker, &self.args.work))?;
        api.create(&PostParams::default(), &manifest).await.map_err(|e| match e {
            kube::Error::Api(s) => anyhow::anyhow!("creating the scenario: {}", s.message),
            e => anyhow::anyhow!("creating the scenario: {e}"),
        })?;
        let created = Instant::now();

        for fault in plan {
            tokio::time::sleep_until((created + fault.at).into()).await;
            self.check_up().await?;
            // In place, a node lost in the last attempt may take a pod whose peer has succeeded
            // (each worker succeeds 0.5 s into it, before a loss is noticed): its replacement
            // would wait at the barrier for ever (docs/chaos.md, finding 11).
            let reached = seen.lock().unwrap().in_place_attempt;
            if fault.kind == FaultKind::NodeFail && variant == Variant::InPlace && reached >= Some(FAILING_ATTEMPTS) {
                let reached = reached.unwrap_or_default();
                self.notes
                    .push(format!("node-fail of node-{} skipped: the last attempt ({reached}) began", fault.node));
                self.skipped.push(fault.kind);
                continue;
            }
            let from = seen.lock().unwrap().at();
            self.inject(fault, &client).await?;
            if fault.kind == FaultKind::NodeFail {
                let until = seen.lock().unwrap().at() + self.args.node_grace_period.as_secs_f64();
                self.outages.push(Outage { node: format!("node-{}", fault.node), from, until });
            }
        }
        self.check_up().await?;

        let end = self.end_state(&client, variant, &seen).await?;
        self.stop.cancel();
        let _ = acker.await;
        let acknowledged = acked.lock().unwrap().clone();
        let present = present_configmaps(&client).await?;
        let mut orphans = self.stop_up().await;
        orphans.extend(self.crashes.iter().cloned());
        if std::fs::read_to_string(&self.log).is_ok_and(|l| l.contains("panicked")) {
            orphans.push(format!("jobset up panicked (see {})", self.log.display()));
        }
        let seen = seen.lock().unwrap();
        let lines: Vec<&str> = seen.last.values().map(String::as_str).collect();
        let _ = std::fs::write(self.dir.join("pods.txt"), lines.join("\n"));
        let _ = std::fs::write(self.dir.join("pods-history.txt"), seen.history.join("\n"));
        let observed = Observed {
            end,
            pods: seen.pods.values().cloned().collect(),
            jobs: seen.jobs.values().cloned().collect(),
            acknowledged,
            present,
            orphans,
            gap_ends: seen.gap_ends.clone(),
            outages: self.outages.clone(),
        };
        Ok((observed, refused.lock().unwrap().clone()))
    }

    /// Watches pods and Jobs for the whole run: the watches resume (or list again) after each
    /// restart of `jobset up`, on the same port, CA and token.
    fn record(&self, client: kube::Client, seen: Arc<Mutex<Seen>>) {
        let pods: Api<Pod> = Api::default_namespaced(client.clone());
        let stop = self.stop.clone();
        let s = seen.clone();
        let changed = self.pods_changed.clone();
        tokio::spawn(async move {
            let mut w = watcher(pods, watcher::Config::default()).boxed();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = w.next() => match ev {
                        Some(Ok(ev)) => {
                            let mut s = s.lock().unwrap();
                            match ev {
                                // A version listed again after a restart of `jobset up` may be
                                // the first seen after the pod's end, which fell into the gap.
                                watcher::Event::InitApply(pod) => s.pod(&pod, true),
                                watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => s.pod(&pod, false),
                                watcher::Event::Init => s.relist = Some((BTreeSet::new(), None)),
                                watcher::Event::InitDone => s.relisted(),
                            }
                            changed.notify_one();
                        }
                        // Down: ask again soon (kube's default backoff would wait up to
                        // seconds and miss pods created and deleted meanwhile).
                        Some(Err(_)) => tokio::time::sleep(RETRY).await,
                        None => return,
                    }
                }
            }
        });
        let jobs: Api<Job> = Api::default_namespaced(client);
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let mut w = watcher(jobs, watcher::Config::default()).touched_objects().boxed();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = w.next() => match ev {
                        Some(Ok(j)) => { if let Some(j) = job_seen(&j) { seen.lock().unwrap().jobs.insert(j.uid.clone(), j); } }
                        // Down: ask again soon (kube's default backoff would wait up to
                        // seconds and miss pods created and deleted meanwhile).
                        Some(Err(_)) => tokio::time::sleep(RETRY).await,
                        None => return,
                    }
                }
            }
        });
    }

    /// Writes a ConfigMap every `--ack-interval`, remembering those the server acknowledged (and
    /// the distinct errors of those it refused).
    fn acknowledge(
        &self,
        client: kube::Client,
        acked: Arc<Mutex<Vec<String>>>,
        refused: Arc<Mutex<Vec<String>>>,
    ) -> tokio::task::JoinHandle<()> {
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        let (stop, every) = (self.stop.clone(), self.args.ack_interval);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            for n in 0.. {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let name = format!("ack-{n}");
                let cm: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": n.to_string()}})).unwrap();
                match tokio::time::timeout(every * 20, api.create(&PostParams::default(), &cm)).await {
                    Ok(Ok(_)) => acked.lock().unwrap().push(name),
                    Ok(Err(kube::Error::Api(e))) => {
                        let mut r = refused.lock().unwrap();
                        if !r.contains(&e.message) {
                            r.push(e.message);
                        }
                    }
                    _ => {}
                }
            }
        })
    }

    async fn inject(&mut self, fault: &Fault, client: &kube::Client) -> anyhow::Result<()> {
        match fault.kind {
            FaultKind::KillUp => {
                if let Some(mut child) = self.up.take() {
                    child.kill().await.context("kill -9 jobset up")?;
                }
                tokio::time::sleep(fault.hold).await;
                self.start_up().await
            }
            FaultKind::NodeFail => {
                let node = format!("node-{}", fault.node);
                let nodes: Api<Node> = Api::all(client.clone());
                let set = |v: Value| json!({"metadata": {"annotations": {FAILED_ANNOTATION: v}}});
                nodes.patch(&node, &PatchParams::default(), &Patch::Merge(set(json!("true")))).await?;
                tokio::time::sleep(fault.hold).await;
                nodes.patch(&node, &PatchParams::default(), &Patch::Merge(set(Value::Null))).await?;
                Ok(())
            }
            FaultKind::KillManager => {
                self.manager.as_ref().context("no jobset manager in this run")?.kill(fault.hold).await
            }
            FaultKind::DiskFull => {
                let filler = self.data.join("chaos-filler");
                let f = filler.clone();
                tokio::task::spawn_blocking(move || fill(&f)).await??;
                tokio::time::sleep(fault.hold).await;
                std::fs::remove_file(&filler).with_context(|| format!("removing {}", filler.display()))
            }
        }
    }

    /// Waits for the workload's final status; `None` if it did not come within `--run-timeout`,
    /// or, in place, once a pod was lost after another one succeeded: it cannot come then.
    async fn end_state(
        &self,
        client: &kube::Client,
        variant: Variant,
        seen: &Mutex<Seen>,
    ) -> anyhow::Result<Option<EndState>> {
        let jobsets = jobset_api_of(client);
        let wrappers: Api<DynamicObject> = Api::default_namespaced_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(
                    jobset_api::appwrapper::keys::GROUP,
                    jobset_api::appwrapper::keys::VERSION,
                    jobset_api::appwrapper::keys::KIND,
                ),
                jobset_api::appwrapper::keys::PLURAL,
            ),
        );
        let deadline = Instant::now() + self.args.run_timeout;
        let wanted = |js: &Option<Value>, aw: &Option<Value>| {
            let end = verdict::end_state(js.as_ref()?, aw.as_ref())?;
            (variant != Variant::Appwrapper
                || end.wrapper.as_ref().is_some_and(|(p, _)| p == "Succeeded" || p == "Failed"))
            .then_some(end)
        };
        // Both objects are watched; whichever changes, both are read again.
        let mut changes = futures::stream::select(
            watcher(jobsets.clone(), watcher::Config::default().fields(&format!("metadata.name={NAME}")))
                .default_backoff()
                .map_ok(|_| ())
                .boxed(),
            watcher(wrappers.clone(), watcher::Config::default().fields(&format!("metadata.name={NAME}")))
                .default_backoff()
                .map_ok(|_| ())
                .boxed(),
        );
        loop {
            let js = jobsets.get_opt(NAME).await.ok().flatten().map(|o| o.data);
            let aw = match variant {
                Variant::Appwrapper => wrappers.get_opt(NAME).await.ok().flatten().map(|o| o.data),
                _ => None,
            };
            if let Some(end) = wanted(&js, &aw) {
                return Ok(Some(end));
            }
            let pods: Vec<PodSeen> = seen.lock().unwrap().pods.values().cloned().collect();
            if variant == Variant::InPlace && verdict::lost_after_success(&pods).is_some() {
                return Ok(None);
            }
            let next = tokio::time::timeout_at(deadline.into(), async {
                tokio::select! {
                    change = changes.next() => change.is_some(),
                    // The pod recorder saw a pod change.
                    () = self.pods_changed.notified() => true,
                }
            });
            match next.await {
                Ok(true) => {}
                Ok(false) | Err(_) => return Ok(None),
            }
        }
    }

    /// Stops `jobset up` gracefully (as `jobset down`), then lists the run's host processes left
    /// once `--orphan-grace` has passed (and kills them).
    async fn stop_up(&mut self) -> Vec<String> {
        let mut found = Vec::new();
        // The manager first, as a cluster's workloads go before its control plane.
        if let Some(m) = self.manager.take() {
            self.notes.extend(m.stop().await);
        }
        let manager_log = self.dir.join("manager.log");
        if std::fs::read_to_string(&manager_log).is_ok_and(|l| l.contains("panicked")) {
            found.push(format!("jobset manager panicked (see {})", manager_log.display()));
        }
        if let Some(mut child) = self.up.take() {
            if let Some(pid) = child.id() {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            }
            if tokio::time::timeout(self.args.startup_timeout, child.wait()).await.is_err() {
                found.push(format!("jobset up did not stop on SIGTERM within {:?}", self.args.startup_timeout));
                let _ = child.kill().await;
            }
        }
        let deadline = Instant::now() + self.args.orphan_grace;
        let mut left = run_processes(&self.marker, &self.data);
        while !left.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = run_processes(&self.marker, &self.data);
        }
        for (pid, cmd) in left {
            found.push(format!("{pid} {cmd}"));
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        found
    }

    async fn cleanup(&mut self) {
        self.stop.cancel();
        if let Some(m) = self.manager.take() {
            m.abort();
        }
        if let Some(mut child) = self.up.take() {
            let _ = child.kill().await;
        }
        if self.mounted {
            let _ = tokio::process::Command::new("umount").arg("-l").arg(&self.data).status().await;
        }
        if self.args.work_dir.is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A loopback port free now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn jobset_api_of(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet");
    Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "jobsets"))
}

/// Fills the filesystem of `file` with it: Ok once the filesystem said it is full.
fn fill(file: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
    let chunk = vec![0u8; 1 << 20];
    loop {
        match f.write_all(&chunk).and_then(|()| f.sync_data()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("filling {}", file.display())),
        }
    }
}

async fn present_configmaps(client: &kube::Client) -> anyhow::Result<BTreeSet<String>> {
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let list = api.list_metadata(&ListParams::default()).await.context("listing the acknowledged ConfigMaps")?;
    Ok(list.items.into_iter().filter_map(|m| m.metadata.name).collect())
}

/// What a version of a pod shows; `relisted`: it came in a list after a gap of the watch.
fn pod_seen(p: &Pod, relisted: bool) -> Option<PodSeen> {
    let labels = p.metadata.labels.as_ref()?;
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let rv: u64 = p.metadata.resource_version.as_deref()?.parse().ok()?;
    let terminal = matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    let ended = terminal || p.metadata.deletion_timestamp.is_some();
    let job_uid = p.metadata.owner_references.iter().flatten().find(|o| o.kind == "Job").map(|o| o.uid.clone())?;
    Some(PodSeen {
        uid: p.metadata.uid.clone()?,
        job: label("batch.kubernetes.io/job-name"),
        job_uid,
        attempt: label(jobset_api::jobset::keys::RESTART_ATTEMPT),
        index: label("batch.kubernetes.io/job-completion-index"),
        first_rv: rv,
        end_rv: (ended && !relisted).then_some(rv),
        end_in_gap: ended && relisted,
        lost_at_attempt: lost(p).then(|| in_place_attempt(p)).flatten(),
        lost_rv: lost(p).then_some(rv),
        succeeded_rv: (p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")).then_some(rv),
    })
}

/// Whether the pod has the condition `DisruptionTarget` (a lost node).
fn lost(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True"))
}

/// The pod's in-place restart attempt (annotation).
fn in_place_attempt(p: &Pod) -> Option<i64> {
    p.metadata.annotations.as_ref()?.get(jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT)?.parse().ok()
}

/// `name phase [reason] container=state(reason, exit code)...`, for a look after the run.
fn pod_line(p: &Pod) -> String {
    let name = p.metadata.name.clone().unwrap_or_default();
    let Some(s) = &p.status else { return name };
    let mut line = format!(
        "{name} {} node={}",
        s.phase.as_deref().unwrap_or("-"),
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("-")
    );
    if let Some(r) = &s.reason {
        line.push_str(&format!(" reason={r}"));
    }
    for c in s.conditions.iter().flatten().filter(|c| c.status == "True") {
        line.push_str(&format!(" {}", c.type_));
    }
    for c in s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()) {
        let state = match c.state.as_ref() {
            Some(st) if st.running.is_some() => "running".to_string(),
            Some(st) if st.terminated.is_some() => {
                let t = st.terminated.as_ref().unwrap();
                format!(
                    "terminated({}, {}, {})",
                    t.reason.as_deref().unwrap_or(""),
                    t.exit_code,
                    t.message.as_deref().unwrap_or("")
                )
            }
            Some(st) if st.waiting.is_some() => {
                format!("waiting({})", st.waiting.as_ref().unwrap().reason.as_deref().unwrap_or(""))
            }
            _ => "-".into(),
        };
        line.push_str(&format!(" {}={state} restarts={}", c.name, c.restart_count));
    }
    line
}

fn job_seen(j: &Job) -> Option<JobSeen> {
    Some(JobSeen {
        uid: j.metadata.uid.clone()?,
        name: j.metadata.name.clone()?,
        attempt: j
            .metadata
            .labels
            .as_ref()?
            .get(jobset_api::jobset::keys::RESTART_ATTEMPT)
            .cloned()
            .unwrap_or_default(),
    })
}

/// Host processes of the run: those carrying its marker in their environment (`jobset up`, the
/// containers and their children) or whose stderr goes into its data dir (the supervisors,
/// whose environment is cleared). `(pid, command line)`.
fn run_processes(marker: &str, data: &Path) -> Vec<(i32, String)> {
    let needle = format!("{MARKER_ENV}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let base = e.path();
        // Zombies wait for their parent, they run nothing.
        if std::fs::read_to_string(base.join("stat"))
            .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| r.starts_with('Z')))
        {
            continue;
        }
        let marked = std::fs::read(base.join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()));
        let inside = std::fs::read_link(base.join("fd/2")).is_ok_and(|p| p.starts_with(data));
        if marked || inside {
            let cmd = std::fs::read(base.join("cmdline")).unwrap_or_default();
            let mut cmd = String::from_utf8_lossy(&cmd).replace('\0', " ").trim().to_string();
            if let Ok(stderr) = std::fs::read_link(base.join("fd/2")) {
                cmd.push_str(&format!(" (stderr {})", stderr.display()));
            }
            out.push((pid, cmd));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(variant: Variant, faults: &[FaultKind], divergences: Vec<Divergence>) -> RunResult {
        RunResult {
            seed: 7,
            variant,
            faults: faults.to_vec(),
            took: Duration::from_secs(3),
            divergences,
            error: None,
            refused: vec![],
            notes: vec![],
            skipped: 0,
            undefined: false,
        }
    }

    /// A pod of Job `j` (index `index`) on `node`, in `phase`, at in-place attempt `attempt`.
    fn pod(uid: &str, index: &str, node: &str, phase: &str, attempt: i64, rv: u64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": uid, "uid": uid, "resourceVersion": rv.to_string(),
                "labels": {"batch.kubernetes.io/job-completion-index": index},
                "annotations": {(jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT): attempt.to_string()},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j"}],
            },
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn pods_active_before_a_gap_and_deleted_or_failed_after_it_ended_in_the_gap() {
        let mut s = Seen::new(Instant::now());
        s.relist = Some((BTreeSet::new(), None));
        s.relisted();
        for p in [
            pod("kept", "0", "node-0", "Running", 1, 10),
            pod("deleted", "1", "node-1", "Running", 1, 11),
            pod("failed", "2", "node-1", "Running", 1, 12),
            pod("done", "3", "node-0", "Running", 1, 13),
            pod("ended-before", "4", "node-0", "Failed", 1, 14),
        ] {
            s.pod(&p, false);
        }
        assert!(s.gap_ends.is_empty());
        // `jobset up` restarted: the watch lists again.
        s.relist = Some((BTreeSet::new(), None));
        for p in [
            pod("kept", "0", "node-0", "Running", 2, 20),
            pod("failed", "2", "node-1", "Failed", 1, 21),
            pod("done", "3", "node-0", "Succeeded", 2, 22),
            pod("ended-before", "4", "node-0", "Failed", 1, 14),
            pod("new", "1", "node-0", "Pending", 3, 23),
        ] {
            s.pod(&p, true);
        }
        s.relisted();
        let ends: Vec<(&str, &str, Option<i64>)> =
            s.gap_ends.iter().map(|e| (e.uid.as_str(), e.node.as_str(), e.attempt)).collect();
        // The attempt each may have reached: the most listed after the gap.
        assert_eq!(ends, [("deleted", "node-1", Some(3)), ("failed", "node-1", Some(3))]);
        assert!(s.relist.is_none() && s.active.contains_key("kept") && s.active.contains_key("new"));
        assert_eq!(s.in_place_attempt, Some(3));
    }

    #[test]
    fn the_summary_counts_faults_by_kind_and_lists_each_divergence_with_its_seed() {
        let results = [
            result(Variant::Recreate, &[FaultKind::KillUp, FaultKind::KillUp], vec![]),
            result(Variant::InPlace, &[FaultKind::NodeFail, FaultKind::DiskFull, FaultKind::KillManager], vec![]),
            result(Variant::Recreate, &[FaultKind::DiskFull], vec![Divergence::LostWrites(vec!["ack-3".into()])]),
        ];
        let text = summary(&results, Duration::from_secs(12));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["variant", "runs", "kill-up", "node-fail", "disk-full", "kill-manager", "divergences", "errors"]
        );
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["recreate", "2", "2", "0", "1", "0", "1", "0"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["in-place", "1", "0", "1", "1", "1", "0", "0"]);
        assert_eq!(lines[4].split_whitespace().collect::<Vec<_>>(), ["total", "3", "2", "1", "2", "1", "1", "0"]);
        assert_eq!(lines[5], "3 runs in 12s");
        assert_eq!(
            lines[6],
            "divergence, seed 7 (--seed 7 --runs 1 --variants recreate): acknowledged writes lost: ack-3"
        );
        // Node faults left out and runs without a defined end are counted.
        let mut more = results.to_vec();
        more[1].skipped = 2;
        more[1].undefined = true;
        let text = summary(&more, Duration::from_secs(12));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[6], "2 node-fail faults skipped (in place, once the last attempt began)");
        assert_eq!(lines[7], "1 runs without a defined end (in place, a pod lost after another succeeded)");
    }
}
