//! `jobset run FILE...`: apply the files (to an embedded cluster, or to the server of a
//! kubeconfig), then show progress until every Job, JobSet and AppWrapper among them has
//! finished.

use std::collections::{BTreeSet, HashMap};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::client::{self, ClientArgs};
use crate::cluster::{self, ClusterOptions, Embedded};
use crate::progress::{self, FailedPods, Outcome, Row};
use crate::{Failure, USAGE, apply, kinds};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Manifest files (YAML, multi-document, or JSON; `-` reads stdin), applied in order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Submit to the server of this kubeconfig instead of starting an embedded cluster. Only
    /// this flag does: $KUBECONFIG alone never sends a `run` to a cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of objects that name none (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Give up after this long (exit code 2), e.g. 30s, 5m.
    #[arg(long, value_parser = crate::parse_duration)]
    pub timeout: Option<Duration>,
    /// After the workload finishes, leave the embedded cluster running until Ctrl-C.
    #[arg(long)]
    pub keep: bool,
    /// Embedded cluster: this many identical nodes.
    #[arg(long, default_value_t = 1, conflicts_with = "nodes_file")]
    pub nodes: usize,
    /// Embedded cluster: the nodes declared in this YAML file.
    #[arg(long)]
    pub nodes_file: Option<PathBuf>,
    /// Embedded cluster: `process` (containers' command/args run on this machine) or `simulated`.
    #[arg(long, default_value = "process", value_parser = ["simulated", "process"])]
    pub runtime: String,
    /// Embedded cluster: port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    #[command(flatten)]
    pub timing: crate::cluster::TimingArgs,
    /// Embedded cluster: the API server's in-flight limits.
    #[command(flatten)]
    pub inflight: crate::up::InflightArgs,
    /// Embedded cluster: the AppWrapper controller's configuration.
    #[command(flatten)]
    pub appwrapper: crate::cluster::AppWrapperArgs,
}

/// How often progress is polled.
const TICK: Duration = Duration::from_millis(200);

/// What kind of workload `run` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Job,
    JobSet,
    AppWrapper,
}

impl Workload {
    fn of(resource: &kinds::Resource) -> Option<Workload> {
        match (resource.group.as_str(), resource.kind.as_str()) {
            ("batch", "Job") => Some(Workload::Job),
            ("jobset.x-k8s.io", "JobSet") => Some(Workload::JobSet),
            (jobset_api::appwrapper::keys::GROUP, jobset_api::appwrapper::keys::KIND) => Some(Workload::AppWrapper),
            _ => None,
        }
    }
}

/// A created object that `run` waits for.
struct Waited {
    reference: String,
    name: String,
    namespace: Option<String>,
    api: Api<DynamicObject>,
    workload: Workload,
    /// AppWrappers: every version, from a watch (a phase can last less than a tick).
    versions: Option<Versions>,
    /// AppWrappers: the failed pods of the current attempt, for the summary.
    failed: FailedPods,
    row: Row,
}

/// The versions of one object as a watch delivers them, in order; the watch ends when this is
/// dropped.
struct Versions {
    rx: mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
    /// The last version received.
    last: Option<Value>,
}

impl Versions {
    fn watch(api: Api<DynamicObject>, name: &str) -> Versions {
        let (tx, rx) = mpsc::unbounded_channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            let mut objects = std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
            while let Some(item) = objects.next().await {
                let Ok(obj) = item else { continue };
                if tx.send(serde_json::to_value(&obj).unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        Versions { rx, task, last: None }
    }

    /// The versions received since the last call, oldest first, leaving out any not newer than
    /// the last one (by resourceVersion, when it is a number).
    fn next(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(v) = self.rx.try_recv() {
            self.offer(v, &mut out);
        }
        out
    }

    /// Makes `v` the last version (and adds it to `out`) if it is newer.
    fn offer(&mut self, v: Value, out: &mut Vec<Value>) {
        let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str()?.parse::<u64>().ok();
        if let Some((new, old)) = rv(&v).zip(self.last.as_ref().and_then(rv))
            && new <= old
        {
            return;
        }
        self.last = Some(v.clone());
        out.push(v);
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let docs = apply::read_files(&args.files)?;
    let remote = args.kubeconfig.is_some();
    let mut embedded: Option<(Embedded, tempfile::TempDir)> = None;
    let client_args = if remote {
        ClientArgs { kubeconfig: args.kubeconfig.clone(), namespace: args.namespace.clone() }
    } else {
        let nodes = match &args.nodes_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Failure::new(USAGE, format!("error: reading {}: {e}", path.display())))?;
                jobset_kubelet::NodeConfig::parse_list(&text)
                    .map_err(|e| Failure::new(USAGE, format!("error: {}: {}", path.display(), e.0)))?
            }
            None => {
                let mut nodes = jobset_kubelet::NodeConfig::uniform(args.nodes, "node");
                for n in &mut nodes {
                    n.capacity.insert("cpu".into(), "1000".into());
                    n.capacity.insert("memory".into(), "4Ti".into());
                    n.capacity.insert("pods".into(), "1000".into());
                }
                nodes
            }
        };
        let appwrapper = args.appwrapper.load()?;
        let dir = tempfile::Builder::new().prefix("jobset-run-").tempdir()?;
        let opts = ClusterOptions {
            data_dir: None,
            state_dir: dir.path().to_path_buf(),
            port: args.port,
            kubeconfig: dir.path().join("kubeconfig"),
            gc_interval: Duration::from_secs(5),
            watch_history: 10_000,
            event_ttl: jobset_apiserver::store::StoreConfig::default().event_ttl,
            nodes: Some(nodes),
            runtime: args.runtime.clone(),
            timing: args.timing.clone(),
            inflight: args.inflight.clone(),
            external: vec![],
        };
        let e = cluster::start_with(&opts, appwrapper).await?;
        let kubeconfig = e.kubeconfig.clone();
        embedded = Some((e, dir));
        ClientArgs { kubeconfig: Some(kubeconfig), namespace: args.namespace.clone() }
    };
    // Every client is gone when this returns: the embedded server then shuts down at once.
    let code = submit_and_wait(&client_args, remote, &docs, args.timeout).await?;
    if let Some((e, dir)) = embedded {
        if args.keep {
            let interrupted = cluster::interrupted();
            println!("the cluster keeps running: Ctrl-C to stop it");
            println!("export KUBECONFIG={}", e.kubeconfig.display());
            println!("then e.g.: jobset get jobs,  jobset get pods,  jobset logs job/NAME");
            std::io::stdout().flush().ok();
            interrupted.await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), e.shutdown()).await;
        drop(dir);
    }
    Ok(code)
}

/// Applies the objects and waits for the Jobs, JobSets and AppWrappers among them: the exit code.
async fn submit_and_wait(
    client_args: &ClientArgs,
    remote: bool,
    docs: &[crate::manifest::Doc],
    timeout: Option<Duration>,
) -> anyhow::Result<i32> {
    let conn = client::connect(client_args).await?;
    if remote {
        println!("submitting to {}", conn.server);
    }
    let resources = kinds::discover(&conn.client).await?;
    let targets = apply::plan(docs, &resources, &conn.namespace).map_err(|m| Failure::new(USAGE, m))?;
    let namespaces: BTreeSet<String> = targets.iter().filter_map(|t| t.namespace.clone()).collect();
    let mut events = Warnings::new(conn.client.clone(), namespaces);
    events.poll(false).await;
    let created = apply::create_all(&conn.client, &targets).await?;
    let mut waited: Vec<Waited> = targets
        .iter()
        .zip(&created)
        .filter_map(|(t, o)| {
            let workload = Workload::of(&t.resource)?;
            Some(Waited {
                reference: format!("{}/{}", t.resource.singular_ref(), o.name_any()),
                name: o.name_any(),
                namespace: t.namespace.clone(),
                api: t.api(&conn.client),
                workload,
                versions: (workload == Workload::AppWrapper)
                    .then(|| Versions::watch(t.api(&conn.client), &o.name_any())),
                failed: FailedPods::default(),
                row: Row { name: format!("{}/{}", t.resource.singular_ref(), o.name_any()), ..Row::default() },
            })
        })
        .collect();
    let code = if waited.is_empty() {
        0
    } else {
        let watch = watch(&conn.client, &mut waited, &mut events);
        match timeout {
            Some(t) => match tokio::time::timeout(t, watch).await {
                Ok(code) => code,
                Err(_) => {
                    let pending: Vec<&str> =
                        waited.iter().filter(|w| w.row.outcome.is_none()).map(|w| w.reference.as_str()).collect();
                    eprintln!("error: timed out after {}: not finished: {}", humantime(t), pending.join(", "));
                    2
                }
            },
            None => watch.await,
        }
    };
    Ok(code)
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

impl Waited {
    /// An AppWrapper's row from its last version and its pods now; the rows of the versions that
    /// the watch delivered before that one since the last call (a phase such as Resetting can
    /// come and go within a tick), with the pod counts of the previous row: the pods were not
    /// listed at those versions, and the ones before are as close as the ones now.
    async fn refresh_appwrapper(&mut self, client: &Client) -> Vec<Row> {
        let Some(versions) = &mut self.versions else { return vec![] };
        let mut fresh = versions.next();
        // The watch may be late (or failing): the current version counts too, if newer.
        if let Ok(obj) = self.api.get(&self.name).await {
            versions.offer(serde_json::to_value(&obj).unwrap_or_default(), &mut fresh);
        }
        let Some(last) = versions.last.clone() else { return vec![] };
        let selector = format!("{}={}", jobset_api::appwrapper::keys::APPWRAPPER_LABEL, self.name);
        let pods = pods(client, self.namespace.as_deref(), &selector).await;
        let mut passed = Vec::new();
        for v in fresh.iter().take(fresh.len().saturating_sub(1)) {
            let r = progress::appwrapper_row(&self.reference, v, &[], &self.failed);
            let prev = &self.row;
            passed.push(Row {
                active: prev.active,
                ready: prev.ready,
                succeeded: prev.succeeded,
                failed: prev.failed,
                ..r
            });
        }
        self.failed.observe(&last, &pods);
        self.row = progress::appwrapper_row(&self.reference, &last, &pods, &self.failed);
        passed
    }
}

/// Polls until every waited object has finished; renders progress; the exit code.
async fn watch(client: &Client, waited: &mut [Waited], events: &mut Warnings) -> i32 {
    let tty = std::io::stdout().is_terminal();
    let mut drawn = 0usize;
    let mut printed: HashMap<String, String> = HashMap::new();
    let mut tick = 0usize;
    loop {
        // Rows of AppWrapper versions that came and went since the last tick.
        let mut passed: Vec<Row> = Vec::new();
        for w in waited.iter_mut() {
            if w.workload == Workload::AppWrapper {
                passed.extend(w.refresh_appwrapper(client).await);
            } else if let Ok(obj) = w.api.get(&w.name).await {
                let value = serde_json::to_value(&obj).unwrap_or_default();
                w.row = if w.workload == Workload::Job {
                    let restarts = restarts(client, w.namespace.as_deref(), &w.name).await;
                    progress::job_row(&w.reference, &value, restarts)
                } else {
                    progress::jobset_row(&w.reference, &value)
                };
            }
        }
        let warnings = events.poll(true).await;
        let rows: Vec<Row> = waited.iter().map(|w| w.row.clone()).collect();
        let done = rows.iter().all(|r| r.outcome.is_some());
        let mut out = std::io::stdout().lock();
        if tty {
            if drawn > 0 {
                let _ = write!(out, "\x1b[{drawn}A\x1b[J");
            }
            for w in &warnings {
                let _ = writeln!(out, "{w}");
            }
            let mut lines = progress::table(&rows);
            if !done {
                lines.push(format!("{} waiting for {} to finish", progress::SPINNER[tick % 10], pending(&rows)));
            }
            for l in &lines {
                let _ = writeln!(out, "{l}");
            }
            drawn = lines.len();
        } else {
            for w in &warnings {
                let _ = writeln!(out, "{w}");
            }
            for r in passed.iter().filter(|r| r.outcome.is_none()).chain(&rows) {
                let l = progress::line(r);
                if printed.get(&r.name) != Some(&l) {
                    let _ = writeln!(out, "{l}");
                    printed.insert(r.name.clone(), l);
                }
            }
        }
        let _ = out.flush();
        drop(out);
        if done {
            // The controllers post the final events after the status they report.
            for w in events.poll(true).await {
                println!("{w}");
            }
            let mut code = 0;
            for r in &rows {
                if matches!(r.outcome, Some(Outcome::Failed { .. })) {
                    code = 1;
                }
                println!("{}", progress::summary(r));
            }
            return code;
        }
        tick += 1;
        tokio::time::sleep(TICK).await;
    }
}

fn pending(rows: &[Row]) -> String {
    let names: Vec<&str> = rows.iter().filter(|r| r.outcome.is_none()).map(|r| r.name.as_str()).collect();
    names.join(", ")
}

/// The pods matching a label selector, as JSON (none if the list fails).
async fn pods(client: &Client, namespace: Option<&str>, selector: &str) -> Vec<serde_json::Value> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
    let Ok(list) = api.list(&ListParams::default().labels(selector)).await else { return vec![] };
    list.items.iter().filter_map(|p| serde_json::to_value(p).ok()).collect()
}

/// Sum of the container restarts of a Job's pods.
async fn restarts(client: &Client, namespace: Option<&str>, job: &str) -> i64 {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
    let Ok(list) = pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await
    else {
        return 0;
    };
    list.items
        .iter()
        .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
        .map(|c| i64::from(c.restart_count))
        .sum()
}

/// Warning events of some namespaces, each shown once (again when its count grows).
struct Warnings {
    client: Client,
    namespaces: BTreeSet<String>,
    seen: HashMap<String, i32>,
}

impl Warnings {
    fn new(client: Client, namespaces: BTreeSet<String>) -> Self {
        Warnings { client, namespaces, seen: HashMap::new() }
    }

    /// The new warnings since the last poll (the first poll only records what exists).
    async fn poll(&mut self, report: bool) -> Vec<String> {
        let mut out = Vec::new();
        for ns in &self.namespaces {
            let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
            let Ok(list) = api.list(&ListParams::default().fields("type=Warning")).await else { continue };
            for e in list.items {
                let key = e.metadata.uid.clone().unwrap_or_else(|| e.name_any());
                let count = e.count.unwrap_or(1);
                if self.seen.insert(key, count).is_some_and(|c| c >= count) {
                    continue;
                }
                if report && e.type_.as_deref() == Some("Warning") {
                    out.push(warning_line(&e));
                }
            }
        }
        out
    }
}

/// `WARNING pod/x: BackOff: Back-off restarting failed container`.
pub fn warning_line(e: &Event) -> String {
    let o = &e.involved_object;
    format!(
        "WARNING {}/{}: {}: {}",
        o.kind.as_deref().unwrap_or_default().to_ascii_lowercase(),
        o.name.as_deref().unwrap_or_default(),
        e.reason.as_deref().unwrap_or_default(),
        e.message.as_deref().unwrap_or_default().trim_end()
    )
}
