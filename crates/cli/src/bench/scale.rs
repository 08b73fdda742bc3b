//! `jobset bench scale`: KEP-262's scale on one machine, then a soak.
//!
//! Scale: a JobSet of `pods` simulated pods on `nodes` simulated nodes, each run on a fresh
//! cluster with the helpers of `jobset bench jobset` and `jobset bench in-place`: create → all
//! Running then a `Recreate` restart; create → all past the barrier then an in-place restart, in
//! sidecar mode and in main-container mode (every pod with the real agent logic). The peak RSS of
//! each run is the process's VmHWM, reset before the run.
//!
//! Soak: on a fresh cluster with `jobset up`'s API server settings, `soak_jobsets` churn drivers
//! each create a small JobSet whose pod 0 fails once (so it restarts, `Recreate`), wait for it
//! to complete, delete it and start over, until `soak` has passed; `watchers` plain watch clients
//! of pods and Jobs (list, then watch from its resourceVersion, through the same in-process
//! `kube::Client` the controllers use) stay connected the whole time.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_apiserver::persist::Memory;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use nix::sys::resource::UsageWho;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::in_place::{self, InPlaceFigures, Mode};
use super::manager::Controllers;
use super::{JobsetFigures, Limits, cpu, percentile, proc_status_mb, rss_mb};

/// The label on the soak's JobSets, Jobs and pods: which churn driver's JobSet they belong to
/// (the watchers select on it).
const SOAK_SLOT: &str = "bench.jobset.x-k8s.io/soak-slot";

/// `jobset bench scale` flags.
#[derive(clap::Args)]
pub struct Args {
    /// Pods of the scale JobSet (0: skip the scale runs).
    #[arg(long, default_value_t = 15_000)]
    pods: i32,
    /// Simulated nodes (the soak's too).
    #[arg(long, default_value_t = 1_500)]
    nodes: usize,
    /// Pods per Job (Indexed, parallelism = completions).
    #[arg(long, default_value_t = 100)]
    pods_per_job: i32,
    /// How long after its start the failing in-place worker fails (more than create → all past
    /// the barrier takes).
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    fail_after: Duration,
    /// The API server's read-only in-flight limit (kube-apiserver's default; 0: unlimited).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// The API server's mutating in-flight limit (kube-apiserver's default; 0: unlimited).
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// How long the soak's drivers start new cycles (0s: no soak).
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    soak: Duration,
    /// When the RSS the soak's end is compared with is read (default: a fifth of --soak).
    #[arg(long, value_parser = crate::parse_duration)]
    soak_warmup: Option<Duration>,
    /// JobSets churning at once in the soak.
    #[arg(long, default_value_t = 100)]
    soak_jobsets: usize,
    /// Pods per soak JobSet (2 Jobs of half as many).
    #[arg(long, default_value_t = 10)]
    soak_pods: i32,
    /// How long the soak's pods run before they complete.
    #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
    soak_run: Duration,
    /// How long the failing soak pod runs before it fails.
    #[arg(long, default_value = "500ms", value_parser = crate::parse_duration)]
    soak_fail_after: Duration,
    /// Watch clients connected during the soak (half on pods, half on Jobs).
    #[arg(long, default_value_t = 5_000)]
    watchers: usize,
    /// The watchers' `timeoutSeconds` (as kube's watcher: reopened when it ends).
    #[arg(long, default_value = "290s", value_parser = crate::parse_duration)]
    watch_timeout: Duration,
    /// How often the soak prints and keeps the RSS.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    soak_sample: Duration,
    /// How long any one soak state may take (a JobSet finishing, going, the watchers connecting).
    #[arg(long, default_value = "120s", value_parser = crate::parse_duration)]
    soak_timeout: Duration,
    /// How long the soak's API server keeps Events (its `--event-ttl`; kube-apiserver's default
    /// is 1h, so a 10-minute soak only ever adds Events; a TTL under the warm-up lets their count
    /// reach its steady state before the RSS the end is compared with is read).
    #[arg(long, default_value = "1h", value_parser = crate::parse_duration)]
    soak_event_ttl: Duration,
}

impl Args {
    pub(super) fn options(&self) -> Options {
        Options {
            pods: self.pods,
            nodes: self.nodes,
            pods_per_job: self.pods_per_job,
            fail_after: self.fail_after,
            limits: Limits::new(self.max_requests_inflight, self.max_mutating_requests_inflight),
            soak: Soak {
                duration: self.soak,
                warmup: self.soak_warmup,
                jobsets: self.soak_jobsets,
                pods: self.soak_pods,
                run: self.soak_run,
                fail_after: self.soak_fail_after,
                watchers: self.watchers,
                watch_timeout: self.watch_timeout,
                sample: self.soak_sample,
                timeout: self.soak_timeout,
                event_ttl: self.soak_event_ttl,
                nodes: self.nodes,
            },
        }
    }
}

/// What `jobset bench scale` runs.
pub(super) struct Options {
    pub(super) pods: i32,
    pub(super) nodes: usize,
    pub(super) pods_per_job: i32,
    pub(super) fail_after: Duration,
    pub(super) limits: Limits,
    pub(super) soak: Soak,
}

/// The soak's settings.
#[derive(Clone, Copy)]
pub(super) struct Soak {
    /// How long drivers start new cycles (zero: no soak).
    pub(super) duration: Duration,
    /// When the RSS that the end is compared with is read (default: a fifth of `duration`).
    pub(super) warmup: Option<Duration>,
    pub(super) jobsets: usize,
    pub(super) pods: i32,
    pub(super) run: Duration,
    pub(super) fail_after: Duration,
    pub(super) watchers: usize,
    pub(super) watch_timeout: Duration,
    pub(super) sample: Duration,
    pub(super) timeout: Duration,
    pub(super) event_ttl: Duration,
    pub(super) nodes: usize,
}

pub(super) async fn bench(o: Options) -> anyhow::Result<()> {
    anyhow::ensure!(o.pods >= 0 && o.pods_per_job > 0, "--pods must not be negative, --pods-per-job must be positive");
    anyhow::ensure!(o.nodes > 0, "--nodes must be positive");
    let s = &o.soak;
    anyhow::ensure!(
        s.duration.is_zero() || (s.jobsets > 0 && s.pods >= 2),
        "--soak-jobsets must be positive and --soak-pods at least 2"
    );
    let jobs = (o.pods / o.pods_per_job).max(1);
    let ppj = o.pods / jobs;
    println!(
        "jobset bench scale ({} cores): {} pods ({jobs} Jobs x {ppj}) on {} simulated nodes; soak {} s: {} JobSets of {} pods, {} watchers",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        jobs * ppj,
        o.nodes,
        s.duration.as_secs_f64(),
        s.jobsets,
        s.pods,
        s.watchers
    );
    let peak_resets = reset_peak_rss();
    let mut runs = vec![];
    if o.pods > 0 {
        println!();
        let recreate =
            super::jobset_restart("Recreate", jobs, ppj, o.nodes, None, o.limits, Controllers::InProcess).await?;
        runs.push(Run::recreate(recreate, peak_rss_mb()));
        for mode in [Mode::Sidecar, Mode::MainContainer] {
            println!();
            reset_peak_rss();
            let c = Controllers::InProcess;
            let f = in_place::simulated(jobs, ppj, o.nodes, o.limits, o.fail_after, mode, c).await?;
            runs.push(Run::in_place(mode, f, peak_rss_mb()));
        }
    }
    let soak = match s.duration.is_zero() {
        true => None,
        false => {
            println!();
            reset_peak_rss();
            Some(soak(s, o.limits).await?)
        }
    };
    println!();
    if !runs.is_empty() {
        print_runs(jobs * ppj, &runs, peak_resets);
    }
    if let Some(f) = soak {
        if !runs.is_empty() {
            println!();
        }
        print_soak(s, &f);
    }
    Ok(())
}

/// One scale run (a fresh cluster): create → all running, then a restart.
struct Run {
    what: String,
    startup: Duration,
    /// Requests from the create to all running (`None`: not counted by the in-place runs).
    startup_requests: Option<u64>,
    restart: Duration,
    requests: u64,
    by_verb: Vec<(&'static str, u64)>,
    rejected: u64,
    cpu: Duration,
    rss_mb: f64,
    peak_mb: f64,
}

impl Run {
    fn recreate(f: JobsetFigures, peak_mb: f64) -> Run {
        Run {
            what: "Recreate (pod Failed → all Running again)".into(),
            startup: f.startup,
            startup_requests: Some(f.startup_requests),
            restart: f.restart,
            requests: f.requests,
            by_verb: f.by_verb,
            rejected: f.rejected,
            cpu: f.cpu,
            rss_mb: f.rss_mb,
            peak_mb,
        }
    }

    fn in_place(mode: Mode, f: InPlaceFigures, peak_mb: f64) -> Run {
        Run {
            what: format!("in place, {} (worker failure → all past the barrier again)", mode.label()),
            startup: f.startup,
            startup_requests: None,
            restart: f.restart,
            requests: f.requests,
            by_verb: f.by_verb,
            rejected: f.rejected,
            cpu: f.cpu,
            rss_mb: f.rss_mb,
            peak_mb,
        }
    }
}

fn verbs(v: &[(&str, u64)]) -> String {
    v.iter().filter(|(_, n)| *n > 0).map(|(v, n)| format!("{v} {n}")).collect::<Vec<_>>().join(", ")
}

fn print_runs(total: i32, runs: &[Run], peak_resets: bool) {
    println!(
        "| pods | restart | pods running (create, restart) | create → all running | restart | API requests (create) | API requests (restart) | 429s (restart) | process CPU (restart) | RSS at end | peak RSS (run) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| {total} | {} | {total} of {total}, {total} of {total} | {:.2} s | {:.3} s | {} | {} ({}) | {} | {:.1} s | {:.0} MB | {:.0} MB |",
            r.what,
            r.startup.as_secs_f64(),
            r.restart.as_secs_f64(),
            r.startup_requests.map_or("-".to_string(), |n| n.to_string()),
            r.requests,
            verbs(&r.by_verb),
            r.rejected,
            r.cpu.as_secs_f64(),
            r.rss_mb,
            r.peak_mb
        );
    }
    if !peak_resets {
        println!("(peak RSS: /proc/self/clear_refs could not reset it: each is the peak since the process started)");
    }
}

/// The process's peak resident memory so far (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    proc_status_mb("VmHWM:")
}

/// Resets the process's peak resident memory to its current RSS (`5` to /proc/self/clear_refs,
/// Linux ≥ 4.0); false if it could not.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

// ---------------------------------------------------------------------------------------------
// The soak

/// What the soak measured.
struct SoakFigures {
    elapsed: Duration,
    cycles: u64,
    divergences: Vec<String>,
    /// The churn drivers' own writes (JobSet create and delete), sorted.
    writes: Vec<Duration>,
    watchers: usize,
    watch: WatchFigures,
    /// Requests answered 429 while the watchers connected, then during the churn.
    rejected_connect: u64,
    rejected: u64,
    requests: u64,
    by_verb: Vec<(&'static str, u64)>,
    cpu: Duration,
    rss_start: f64,
    rss_warm: Option<(Duration, f64)>,
    rss_end: f64,
    peak: f64,
    /// Objects stored after the churn, by kind.
    left: [(&'static str, usize); 4],
    /// RSS every `sample`, from the churn's start.
    samples: Vec<(Duration, f64)>,
}

/// Counts kept by the watchers.
#[derive(Default)]
struct WatchStats {
    connected: AtomicU64,
    events: AtomicU64,
    /// ERROR events with code 410 (the watcher fell behind, or its resourceVersion is too old).
    gone: AtomicU64,
    /// Watchers that got at least one 410.
    behind: AtomicU64,
    /// Watches the server ended (their timeout) and the watcher reopened from its last version.
    rewatches: AtomicU64,
    /// Other errors (a failed list ends the watcher).
    errors: AtomicU64,
}

#[derive(Debug, Default, Clone, Copy)]
struct WatchFigures {
    events: u64,
    gone: u64,
    behind: u64,
    rewatches: u64,
    errors: u64,
}

impl WatchStats {
    fn figures(&self) -> WatchFigures {
        WatchFigures {
            events: self.events.load(Relaxed),
            gone: self.gone.load(Relaxed),
            behind: self.behind.load(Relaxed),
            rewatches: self.rewatches.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}

/// A pod or Job as a watcher reads it: only its metadata, as a client that needs little would.
#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "Pod")]
struct PodMeta {
    metadata: ObjectMeta,
}

#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "Job")]
struct JobMeta {
    metadata: ObjectMeta,
}

#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "Event")]
struct EventMeta {
    metadata: ObjectMeta,
}

/// How many objects of a kind the API server stores, in every namespace.
async fn count<K>(api: Api<K>) -> anyhow::Result<usize>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned,
{
    Ok(api.list(&ListParams::default()).await?.items.len())
}

/// One plain watch client: lists the objects matching `selector` for a resourceVersion, watches
/// from it, reopens the watch from the last version seen when the server ends it, and lists
/// again after an ERROR event (a 410 is counted as falling behind). Says `ready` once its first
/// watch is open. Runs until aborted or a list fails.
async fn watch_client<K>(
    api: Api<K>,
    selector: String,
    timeout: u32,
    stats: Arc<WatchStats>,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
) where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let mut ready = Some(ready);
    let mut behind = false;
    let wp = WatchParams::default().labels(&selector).timeout(timeout);
    loop {
        let mut rv = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(l) => l.metadata.resource_version.unwrap_or_default(),
            Err(_) => {
                stats.errors.fetch_add(1, Relaxed);
                return;
            }
        };
        'watch: loop {
            let mut events = match api.watch(&wp, &rv).await {
                Ok(s) => s.boxed(),
                Err(_) => {
                    stats.errors.fetch_add(1, Relaxed);
                    break 'watch;
                }
            };
            if let Some(r) = ready.take() {
                stats.connected.fetch_add(1, Relaxed);
                let _ = r.send(());
            }
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => {
                        stats.events.fetch_add(1, Relaxed);
                        if let Some(v) = &o.meta().resource_version {
                            rv.clone_from(v);
                        }
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Error(s)) => {
                        match s.code {
                            410 => {
                                stats.gone.fetch_add(1, Relaxed);
                                if !std::mem::replace(&mut behind, true) {
                                    stats.behind.fetch_add(1, Relaxed);
                                }
                            }
                            _ => {
                                stats.errors.fetch_add(1, Relaxed);
                            }
                        }
                        break 'watch;
                    }
                    Err(_) => {
                        stats.errors.fetch_add(1, Relaxed);
                        break 'watch;
                    }
                }
            }
            stats.rewatches.fetch_add(1, Relaxed);
        }
    }
}

/// What the soak's JobSet watch last saw of one JobSet.
#[derive(Debug, Default, Clone, Copy)]
struct SoakJobSet {
    completed: bool,
    failed: bool,
    restarts: u64,
    gone: bool,
    /// Seen again in the current (re)list.
    listed: bool,
}

impl SoakJobSet {
    fn of(js: &DynamicObject) -> SoakJobSet {
        let status = js.data.get("status");
        let condition = |t: &str| {
            status.and_then(|s| s.get("conditions")).and_then(|c| c.as_array()).is_some_and(|cs| {
                cs.iter().any(|c| c["type"].as_str() == Some(t) && c["status"].as_str() == Some("True"))
            })
        };
        SoakJobSet {
            completed: condition("Completed"),
            failed: condition("Failed"),
            restarts: status.and_then(|s| s.get("restarts")).and_then(|r| r.as_u64()).unwrap_or(0),
            gone: false,
            listed: true,
        }
    }
}

type SoakState = Arc<Mutex<HashMap<String, SoakJobSet>>>;

/// Follows the soak's JobSets into `state`, bumping `tx` after every event. A JobSet missing
/// from a relist is gone.
fn track_jobsets(
    client: kube::Client,
    state: SoakState,
    tx: tokio::sync::watch::Sender<()>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &super::jobset_resource());
    let mut events = watcher(api, watcher::Config::default().labels(SOAK_SLOT)).boxed();
    tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let Ok(ev) = ev else { continue };
            {
                let mut s = state.lock().expect("soak state lock");
                match ev {
                    watcher::Event::Apply(js) | watcher::Event::InitApply(js) => {
                        s.insert(js.metadata.name.clone().unwrap_or_default(), SoakJobSet::of(&js));
                    }
                    watcher::Event::Delete(js) => {
                        let seen = SoakJobSet { gone: true, ..SoakJobSet::of(&js) };
                        s.insert(js.metadata.name.clone().unwrap_or_default(), seen);
                    }
                    watcher::Event::Init => s.values_mut().for_each(|j| j.listed = false),
                    watcher::Event::InitDone => s.values_mut().filter(|j| !j.listed).for_each(|j| j.gone = true),
                }
            }
            tx.send_replace(());
        }
    })
}

/// The soak's JobSet `name` of driver `slot`: 2 Jobs × `pods / 2` pods that run `run` and exit
/// 0, except pod 0 of Job 0, whose first attempt fails after `fail_after`: the JobSet restarts
/// once (`Recreate`), then completes.
fn soak_jobset(name: &str, slot: usize, s: &Soak) -> anyhow::Result<DynamicObject> {
    let ppj = (s.pods / 2).max(1);
    let labels = json!({SOAK_SLOT: slot.to_string()});
    Ok(serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": {"maxRestarts": 3, "restartStrategy": "Recreate"},
            "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "parallelism": ppj, "completions": ppj, "completionMode": "Indexed", "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": labels, "annotations": {
                            "sim.jobset.x-k8s.io/duration": format!("{}ms", s.run.as_millis()),
                            "sim.jobset.x-k8s.io/fail-job-indexes": "0",
                            "sim.jobset.x-k8s.io/fail-indexes": "0",
                            "sim.jobset.x-k8s.io/fail-attempts": "1",
                            "sim.jobset.x-k8s.io/fail-duration": format!("{}ms", s.fail_after.as_millis()),
                        }},
                        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [
                            {"name": "main", "image": "registry.example.com/ml/trainer:2026.11"}]}
                    }
                }
            }}]
        }
    }))?)
}

/// Why a finished soak JobSet is not in the fault-free end state (Completed after exactly one
/// restart), if it is not.
fn divergence(name: &str, end: Option<SoakJobSet>) -> Option<String> {
    match end {
        Some(j) if j.completed && !j.failed && j.restarts == 1 => None,
        Some(j) => Some(format!(
            "{name}: ended with completed {}, failed {}, restarts {}, gone {}: not Completed after 1 restart",
            j.completed, j.failed, j.restarts, j.gone
        )),
        None => Some(format!("{name}: never seen")),
    }
}

/// What one churn driver did.
#[derive(Default)]
struct Churn {
    cycles: u64,
    divergences: Vec<String>,
    writes: Vec<Duration>,
}

/// One churn driver: until `deadline`, creates JobSet `soak-SLOT-CYCLE`, waits until it finished
/// (it must complete after exactly one restart), deletes it (foreground) and waits until it is
/// gone. Counts finished cycles in `cycles`.
async fn churn(
    slot: usize,
    deadline: Instant,
    s: Soak,
    api: Api<DynamicObject>,
    state: SoakState,
    mut rx: tokio::sync::watch::Receiver<()>,
    cycles: Arc<AtomicU64>,
) -> Churn {
    let mut out = Churn::default();
    let mut cycle = 0u64;
    while Instant::now() < deadline {
        let name = format!("soak-{slot}-{cycle}");
        cycle += 1;
        let js = match soak_jobset(&name, slot, &s) {
            Ok(js) => js,
            Err(e) => {
                out.divergences.push(format!("{name}: {e}"));
                return out;
            }
        };
        let t = Instant::now();
        if let Err(e) = api.create(&PostParams::default(), &js).await {
            out.divergences.push(format!("{name}: create: {e}"));
            continue;
        }
        out.writes.push(t.elapsed());
        let of = |st: &HashMap<String, SoakJobSet>| st.get(&name).copied();
        let finished = super::milestone(
            &state,
            &mut rx,
            s.timeout,
            &format!("JobSet {name} to finish"),
            |st| of(st).filter(|j| j.completed || j.failed || j.gone).map(|_| Instant::now()),
            |st| format!("{:?}", of(st)),
        )
        .await;
        let end = of(&state.lock().expect("soak state lock"));
        match finished {
            Err(e) => out.divergences.push(format!("{e}; {}", children(api.clone().into_client(), &name).await)),
            Ok(_) => out.divergences.extend(divergence(&name, end)),
        }
        let t = Instant::now();
        if let Err(e) = api.delete(&name, &DeleteParams::foreground()).await {
            out.divergences.push(format!("{name}: delete: {e}"));
            continue;
        }
        out.writes.push(t.elapsed());
        let gone = super::milestone(
            &state,
            &mut rx,
            s.timeout,
            &format!("JobSet {name} to be gone"),
            |st| of(st).filter(|j| j.gone).map(|_| Instant::now()),
            |st| format!("{:?}", of(st)),
        )
        .await;
        state.lock().expect("soak state lock").remove(&name);
        match gone {
            Ok(_) => {
                out.cycles += 1;
                cycles.fetch_add(1, Relaxed);
            }
            Err(e) => out.divergences.push(format!("{e}; {}", children(api.clone().into_client(), &name).await)),
        }
    }
    out
}

/// What a JobSet that did not get on is waiting for: its Jobs (counts, true conditions, being
/// deleted) and its pods (phase, node, being deleted), for a divergence's line.
async fn children(client: kube::Client, jobset: &str) -> String {
    let selector = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    let jobs = match Api::<Job>::namespaced(client.clone(), "default").list(&selector).await {
        Ok(l) => l.items,
        Err(e) => return format!("listing its Jobs: {e}"),
    };
    let pods = match Api::<Pod>::namespaced(client, "default").list(&selector).await {
        Ok(l) => l.items,
        Err(e) => return format!("listing its pods: {e}"),
    };
    let deleting = |m: &ObjectMeta| if m.deletion_timestamp.is_some() { " deleting" } else { "" };
    let jobs: Vec<String> = jobs
        .iter()
        .map(|j| {
            let st = j.status.clone().unwrap_or_default();
            let conditions: Vec<&str> =
                (st.conditions.iter().flatten()).filter(|c| c.status == "True").map(|c| c.type_.as_str()).collect();
            format!(
                "{} active {} ready {} succeeded {} failed {} [{}]{}",
                j.metadata.name.as_deref().unwrap_or_default(),
                st.active.unwrap_or(0),
                st.ready.unwrap_or(0),
                st.succeeded.unwrap_or(0),
                st.failed.unwrap_or(0),
                conditions.join(","),
                deleting(&j.metadata)
            )
        })
        .collect();
    let pods: Vec<String> = pods
        .iter()
        .map(|p| {
            format!(
                "{} {} on {}{}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("-"),
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("-"),
                deleting(&p.metadata)
            )
        })
        .collect();
    format!("Jobs: {}; pods: {}", jobs.join("; "), pods.join(", "))
}

/// The soak's API server: `jobset up`'s settings (watch buffer and history included) with the
/// bench's in-flight limits.
fn soak_server(limits: Limits, event_ttl: Duration) -> anyhow::Result<Arc<ApiServer>> {
    let mut config = ServerConfig {
        max_requests_inflight: limits.read_only,
        max_mutating_requests_inflight: limits.mutating,
        ..ServerConfig::default()
    };
    config.store.event_ttl = event_ttl;
    ApiServer::new(Box::new(Memory), Admission::default(), config).map_err(anyhow::Error::msg)
}

async fn soak(s: &Soak, limits: Limits) -> anyhow::Result<SoakFigures> {
    println!(
        "soak: {} JobSets of {} pods (create, pod 0 fails once: Recreate, complete, delete; repeated) for {} s on {} simulated nodes, {} watchers of pods and Jobs, Events kept {} s",
        s.jobsets,
        (s.pods / 2).max(1) * 2,
        s.duration.as_secs_f64(),
        s.nodes,
        s.watchers,
        s.event_ttl.as_secs()
    );
    let server = soak_server(limits, s.event_ttl)?;
    let cluster = LocalCluster::start(server.clone(), LocalConfig::with_nodes(s.nodes)).await;
    let client = server.client();
    let state: SoakState = Arc::default();
    let (tx, rx) = tokio::sync::watch::channel(());
    let tracking = track_jobsets(client.clone(), state.clone(), tx);

    // The watchers, half of pods and half of Jobs, each selecting one driver's objects.
    let stats = Arc::new(WatchStats::default());
    let rejected_before = server.requests.rejected();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let timeout = s.watch_timeout.as_secs().clamp(1, u32::MAX as u64) as u32;
    let mut watchers = Vec::with_capacity(s.watchers);
    for k in 0..s.watchers {
        let selector = format!("{SOAK_SLOT}={}", (k / 2) % s.jobsets);
        let (stats, ready) = (stats.clone(), ready_tx.clone());
        let task = match k % 2 {
            0 => tokio::spawn(watch_client(
                Api::<PodMeta>::default_namespaced(client.clone()),
                selector,
                timeout,
                stats,
                ready,
            )),
            _ => tokio::spawn(watch_client(
                Api::<JobMeta>::default_namespaced(client.clone()),
                selector,
                timeout,
                stats,
                ready,
            )),
        };
        watchers.push(tokio_util::task::AbortOnDropHandle::new(task));
    }
    drop(ready_tx);
    let connecting = Instant::now();
    for _ in 0..s.watchers {
        tokio::time::timeout(s.timeout, ready_rx.recv())
            .await
            .map_err(|_| {
                anyhow::anyhow!("timed out after {} s waiting for the watchers to connect", s.timeout.as_secs())
            })?
            .ok_or_else(|| anyhow::anyhow!("a watcher ended before it connected"))?;
    }
    println!("  {} watchers connected in {:.2} s", s.watchers, connecting.elapsed().as_secs_f64());
    let rejected_connect = server.requests.rejected() - rejected_before;

    let rss_start = rss_mb();
    let (verbs_before, requests_before) = server.requests.snapshot();
    let rejected_start = server.requests.rejected();
    let cpu_before = cpu(UsageWho::RUSAGE_SELF);
    let started = Instant::now();
    let deadline = started + s.duration;
    let warmup = s.warmup.unwrap_or(s.duration / 5);
    let warm = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
        tokio::time::sleep(warmup).await;
        (warmup, rss_mb())
    }));
    let cycles = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(Mutex::new(vec![]));
    let sampler = {
        let (cycles, samples, stats, server) = (cycles.clone(), samples.clone(), stats.clone(), server.clone());
        let every = s.sample;
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                let (at, rss, w) = (started.elapsed(), rss_mb(), stats.figures());
                samples.lock().expect("samples lock").push((at, rss));
                println!(
                    "  [{:6.1} s] RSS {rss:.0} MB; cycles {}; watch events {}, 410s {}, reopened {}; 429s {}",
                    at.as_secs_f64(),
                    cycles.load(Relaxed),
                    w.events,
                    w.gone,
                    w.rewatches,
                    server.requests.rejected() - rejected_start
                );
            }
        }))
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &super::jobset_resource());
    // Each driver a task of its own: its requests are handled in it (in-process client).
    let drivers = (0..s.jobsets)
        .map(|slot| tokio::spawn(churn(slot, deadline, *s, api.clone(), state.clone(), rx.clone(), cycles.clone())));
    let churned = futures::future::try_join_all(drivers).await?;
    let elapsed = started.elapsed();
    let (verbs_after, requests_after) = server.requests.snapshot();
    let rejected = server.requests.rejected() - rejected_start;
    let cpu_used = cpu(UsageWho::RUSAGE_SELF) - cpu_before;
    let rss_end = rss_mb();
    let peak = peak_rss_mb();
    drop(sampler);
    // What the churn left behind: every JobSet, Job and pod deleted; Events stay (kube-apiserver
    // keeps them for its --event-ttl, 1 h).
    let left = [
        ("JobSets", count(Api::<DynamicObject>::all_with(client.clone(), &super::jobset_resource())).await?),
        ("Jobs", count(Api::<JobMeta>::all(client.clone())).await?),
        ("pods", count(Api::<PodMeta>::all(client.clone())).await?),
        ("Events", count(Api::<EventMeta>::all(client.clone())).await?),
    ];
    let rss_warm = match warm.is_finished() {
        true => Some(warm.await?),
        false => None,
    };
    let watch = stats.figures();
    drop(watchers);
    tracking.abort();
    cluster.shutdown().await;

    let mut writes: Vec<Duration> = churned.iter().flat_map(|c| c.writes.iter().copied()).collect();
    writes.sort();
    let samples = samples.lock().expect("samples lock").clone();
    Ok(SoakFigures {
        elapsed,
        cycles: churned.iter().map(|c| c.cycles).sum(),
        divergences: churned.into_iter().flat_map(|c| c.divergences).collect(),
        writes,
        watchers: stats.connected.load(Relaxed) as usize,
        watch,
        rejected_connect,
        rejected,
        requests: requests_after - requests_before,
        by_verb: verbs_after.iter().zip(&verbs_before).map(|((v, a), (_, b))| (*v, a - b)).collect(),
        cpu: cpu_used,
        rss_start,
        rss_warm,
        rss_end,
        peak,
        left,
        samples,
    })
}

fn print_soak(s: &Soak, f: &SoakFigures) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let w = &f.watch;
    println!("| soak | value |");
    println!("|---|---|");
    println!(
        "| duration (drivers start cycles for {} s) | {:.1} s |",
        s.duration.as_secs_f64(),
        f.elapsed.as_secs_f64()
    );
    println!("| JobSets (churn drivers) | {} |", s.jobsets);
    println!("| cycles completed (create, 1 restart, Completed, deleted) | {} |", f.cycles);
    println!("| divergences | {} |", f.divergences.len());
    println!("| watchers connected | {} of {} |", f.watchers, s.watchers);
    println!("| watch events delivered | {} |", w.events);
    println!("| watchers that fell behind (410) | {} ({} 410 events) |", w.behind, w.gone);
    println!("| watches reopened after their timeout | {} |", w.rewatches);
    println!("| watch errors | {} |", w.errors);
    println!(
        "| write latency (JobSet create and delete, {} writes) | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        f.writes.len(),
        ms(percentile(&f.writes, 0.5)),
        ms(percentile(&f.writes, 0.99)),
        ms(percentile(&f.writes, 1.0))
    );
    println!("| 429s (during the churn) | {} |", f.rejected);
    println!("| 429s (while the watchers connected) | {} |", f.rejected_connect);
    println!("| API requests (during the churn) | {} ({}) |", f.requests, verbs(&f.by_verb));
    println!("| process CPU (during the churn) | {:.1} s |", f.cpu.as_secs_f64());
    println!("| RSS at start | {:.0} MB |", f.rss_start);
    match f.rss_warm {
        Some((at, rss)) => println!("| RSS at {:.0} s (after warm-up) | {rss:.0} MB |", at.as_secs_f64()),
        None => println!("| RSS after warm-up | - (the soak ended first) |"),
    }
    println!("| RSS at end | {:.0} MB |", f.rss_end);
    let base = f.rss_warm.map_or(f.rss_start, |(_, r)| r);
    println!(
        "| RSS end / {} | {:.3} |",
        if f.rss_warm.is_some() { "after warm-up" } else { "start" },
        f.rss_end / base
    );
    println!("| peak RSS (soak) | {:.0} MB |", f.peak);
    let left: Vec<String> = f.left.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    println!("| objects stored at the end | {} |", left.join(", "));
    if !f.samples.is_empty() {
        let series: Vec<String> = f.samples.iter().map(|(t, r)| format!("{:.0} s {r:.0}", t.as_secs_f64())).collect();
        println!("(RSS samples, MB: {})", series.join(", "));
    }
    for d in f.divergences.iter().take(10) {
        println!("divergence: {d}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "soak-0-0"}, "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_soak_jobset_diverges_unless_it_completed_after_exactly_one_restart() {
        let completed = json!({"type": "Completed", "status": "True"});
        let failed = json!({"type": "Failed", "status": "True"});
        let cases = [
            ("completed after one restart", json!({"restarts": 1, "conditions": [completed.clone()]}), false),
            ("completed without a restart", json!({"conditions": [completed.clone()]}), true),
            ("completed after two restarts", json!({"restarts": 2, "conditions": [completed.clone()]}), true),
            ("failed after one restart", json!({"restarts": 1, "conditions": [failed]}), true),
            (
                "a Completed condition that is False",
                json!({"restarts": 1, "conditions": [{"type": "Completed", "status": "False"}]}),
                true,
            ),
        ];
        for (what, status, diverges) in cases {
            let end = SoakJobSet::of(&jobset(status));
            assert_eq!(divergence("soak-0-0", Some(end)).is_some(), diverges, "{what}");
        }
        assert!(divergence("soak-0-0", None).is_some(), "never seen");
    }

    #[test]
    fn a_deleted_jobset_that_completed_is_still_completed() {
        let js = jobset(json!({"restarts": 1, "conditions": [{"type": "Completed", "status": "True"}]}));
        let end = SoakJobSet { gone: true, ..SoakJobSet::of(&js) };
        assert_eq!(divergence("soak-0-0", Some(end)), None);
    }
}
