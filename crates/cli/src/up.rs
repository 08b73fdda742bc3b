//! `jobset up`: the API server over HTTPS, with a kubeconfig that kubectl and kube-rs use as is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use jobset_kubelet::NodeConfig;
use jobset_kubelet::machine::{self, Machine};

use crate::cluster::{self, ClusterOptions, External};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Keep every object in DIR (a redb file), plus the CA, certificates and token. Without it
    /// the cluster lives in memory and ends with the process.
    #[arg(long, env = "JOBSET_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Write a standalone kubeconfig to FILE (and leave the user's alone). Without it, the
    /// cluster's context is merged into the kubeconfig kubectl uses ($KUBECONFIG, else
    /// ~/.kube/config) and made current, as kind does, and DATA_DIR/kubeconfig (or one in a
    /// temporary directory) is written too.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The cluster's name: its kubeconfig context is `jobset-NAME` (`jobset` for `default`), its
    /// data directory with --detach NAME under $XDG_DATA_HOME/jobset (else ~/.local/share/jobset).
    #[arg(long, default_value = crate::lifecycle::DEFAULT_NAME, value_parser = crate::lifecycle::parse_name)]
    pub name: String,
    /// Merge the context without making it the current one (nothing is merged with --kubeconfig).
    #[arg(long)]
    pub no_switch: bool,
    /// Run in the background: return once the cluster is ready, leaving it running (log in
    /// DATA_DIR/jobset.log) until `jobset down`. DATA_DIR defaults to the name's directory.
    #[arg(long)]
    pub detach: bool,
    /// Set by --detach on the background process, whose stdout is its log: the summary points at
    /// the token's file instead of showing the token in the web UI's address.
    #[arg(long, hide = true)]
    pub background: bool,
    /// How long --detach waits for the cluster to be ready.
    #[arg(long, default_value = "2m", value_parser = crate::parse_duration)]
    pub ready_timeout: Duration,
    /// How often the garbage collector looks for orphaned dependents.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub gc_interval: Duration,
    /// Events of history kept per resource for watches that resume from a resourceVersion.
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
    /// Amount of time to retain events (kube-apiserver's `--event-ttl`): an Event is deleted this
    /// long after its last write; 0s keeps them.
    #[arg(long, default_value = "1h", value_parser = crate::parse_duration)]
    pub event_ttl: Duration,
    /// Run this many identical nodes (node-0, node-1, ...) with the controllers; 0 runs the API
    /// server alone. Without it (and without --nodes-file), one node named after this host.
    /// Process nodes get this machine's capacity, simulated ones 32 CPUs, 256Gi and 110 pods.
    #[arg(long, conflicts_with = "nodes_file")]
    pub nodes: Option<usize>,
    /// Run the nodes declared in this YAML file (names, labels, capacity, taints, rules).
    #[arg(long)]
    pub nodes_file: Option<PathBuf>,
    /// How node agents run containers: `process` (host processes: `command`/`args` run on this
    /// machine, in per-pod sandboxes) or `simulated` (pod annotations say what happens).
    #[arg(long, default_value = "process", value_parser = ["simulated", "process"])]
    pub runtime: String,
    /// Controllers not to run, because a `jobset manager` runs them in a process of its own, as
    /// on a real cluster with JobSet installed (comma-separated). Their kinds' defaulting and
    /// validation is left to the manager's admission webhooks too: apply config/ (its webhook
    /// configurations) before creating JobSets or AppWrappers, or they are admitted by their
    /// CRD schemas alone. The API server, the Job controller, the scheduler and the nodes run
    /// as before.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "CONTROLLERS")]
    pub external_controllers: Vec<crate::cluster::External>,
    #[command(flatten)]
    pub timing: crate::cluster::TimingArgs,
    #[command(flatten)]
    pub inflight: InflightArgs,
    #[command(flatten)]
    pub appwrapper: crate::cluster::AppWrapperArgs,
}

/// The API server's in-flight limits, as kube-apiserver's flags of the same names: a request
/// beyond them is answered 429 with `Retry-After: 1`, which kube clients and kubectl retry.
/// Watches, logs and exec are never counted. 0, as for kube-apiserver, means unlimited.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InflightArgs {
    /// Read-only requests served at once (default: unlimited; kube-apiserver's is 400).
    #[arg(long, value_name = "N")]
    pub max_requests_inflight: Option<usize>,
    /// Mutating requests (POST, PUT, PATCH, DELETE) served at once (default: unlimited;
    /// kube-apiserver's is 200).
    #[arg(long, value_name = "N")]
    pub max_mutating_requests_inflight: Option<usize>,
    /// API Priority and Fairness, as kube-apiserver's flag (on by default, as there): requests
    /// are classified by who sends them (controllers, node agents, pods' service accounts, users)
    /// into priority levels that share the two limits' sum as seats, each flow queued fairly;
    /// the limits then no longer apply on their own. Without both limits nothing is queued.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub enable_priority_and_fairness: bool,
}

/// The local nodes to run (`None`: the API server alone). Process nodes are measured on this
/// machine; its state directory `state_dir` is where their ephemeral storage lives.
fn declared_nodes(args: &UpArgs, state_dir: &Path) -> anyhow::Result<Option<Vec<NodeConfig>>> {
    if let Some(path) = &args.nodes_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let nodes = NodeConfig::parse_list(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.0))?;
        return Ok(Some(nodes));
    }
    if args.nodes == Some(0) {
        return Ok(None);
    }
    let machine = match args.runtime.as_str() {
        "process" => Some(Machine::measure(state_dir)?),
        _ => None,
    };
    let hostname = match (&machine, args.nodes) {
        (Some(m), _) => m.hostname.clone(),
        (None, None) => machine::hostname()?,
        (None, Some(_)) => String::new(),
    };
    Ok(Some(local_nodes(args.nodes, &hostname, machine.as_ref())))
}

/// `count` nodes named `node-0`, `node-1`, ..., or without a count one node named after
/// `hostname`; with this `machine`'s capacity (process nodes), else the simulated defaults.
fn local_nodes(count: Option<usize>, hostname: &str, machine: Option<&Machine>) -> Vec<NodeConfig> {
    let mut nodes = match count {
        Some(n) => NodeConfig::uniform(n, "node"),
        None => vec![NodeConfig::new(machine::node_name(hostname))],
    };
    if let Some(m) = machine {
        nodes.iter_mut().for_each(|n| m.apply(n));
    }
    nodes
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // Bad input is reported before anything listens.
    let appwrapper = args.appwrapper.load()?;
    // Before the first file of the data dir (or the background log) is written.
    cluster::private_files();
    if args.detach {
        return crate::lifecycle::detach(&args).await;
    }
    // One `jobset up` serves a data dir at a time; `jobset status` and `down` find it by this.
    let _claim = match &args.data_dir {
        Some(dir) => Some(crate::lifecycle::PidFile::claim(dir, &args.name)?),
        None => None,
    };
    let state_dir = args.data_dir.clone().unwrap_or_else(crate::default_state_dir);
    let nodes = declared_nodes(&args, &state_dir)?;
    let opts = ClusterOptions {
        data_dir: args.data_dir.clone(),
        kubeconfig: args.kubeconfig.clone().unwrap_or_else(|| state_dir.join("kubeconfig")),
        state_dir,
        port: args.port,
        gc_interval: args.gc_interval,
        watch_history: args.watch_history,
        event_ttl: args.event_ttl,
        nodes,
        runtime: args.runtime.clone(),
        timing: args.timing.clone(),
        inflight: args.inflight.clone(),
        external: args.external_controllers.clone(),
    };
    let embedded = cluster::start_with(&opts, appwrapper).await?;
    let interrupted = cluster::interrupted();
    let context = match &args.kubeconfig {
        // As kind: the context goes into the user's kubeconfig, unless a file was asked for.
        None => {
            let name = crate::lifecycle::context_name(&args.name);
            let file = tokio::task::block_in_place(|| {
                crate::kubeconfig::merge_standalone(&embedded.kubeconfig, &name, !args.no_switch)
            })?;
            Some((name, file))
        }
        // `jobset status` reads the endpoint from the data dir's kubeconfig.
        Some(file) => {
            if let Some(own) = args.data_dir.as_ref().map(|d| d.join(crate::lifecycle::KUBECONFIG_FILE))
                && own != *file
            {
                let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
                jobset_apiserver::tls::write_kubeconfig(&own, &text).map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            None
        }
    };
    // The background process's stdout is its log: no token in it.
    let ui = if args.background {
        let token = opts.state_dir.join(jobset_apiserver::tls::TOKEN_FILE);
        format!("{}{}/login (token in {})", embedded.url, jobset_apiserver::serve::UI_PATH, token.display())
    } else {
        embedded.ui_url.clone()
    };
    print!(
        "{}",
        summary(&Summary {
            url: &embedded.url,
            ui: &ui,
            kubeconfig: &embedded.kubeconfig,
            nodes: opts.nodes.as_deref(),
            runtime: &opts.runtime,
            external: &opts.external,
            context: context.as_ref().map(|(name, file)| (name.as_str(), file.as_path(), !args.no_switch)),
        })
    );
    use std::io::Write;
    std::io::stdout().flush().ok();
    interrupted.await;
    embedded.shutdown().await?;
    tracing::info!("shut down");
    Ok(())
}

/// What a started `jobset up` runs, for [`summary`].
#[derive(Debug, Clone, Copy)]
pub struct Summary<'a> {
    pub url: &'a str,
    /// The web view's address, the token in its fragment.
    pub ui: &'a str,
    pub kubeconfig: &'a Path,
    /// `None`: the API server alone (`--nodes 0`).
    pub nodes: Option<&'a [NodeConfig]>,
    pub runtime: &'a str,
    pub external: &'a [External],
    /// The context merged into the user's kubeconfig: its name, the file, whether it is current
    /// (`None`: a standalone kubeconfig, `--kubeconfig`).
    pub context: Option<(&'a str, &'a Path, bool)>,
}

/// Nodes named (and nodes whose capacity is shown) before the summary says "...".
const SUMMARY_NODES: usize = 3;

/// The start-up summary, a few lines: the endpoint (first: scripts wait for
/// `jobset API server listening on `, the server accepts connections from then on), the nodes and
/// their runtime, their capacity, the controllers running here and those left to a `jobset
/// manager`, and how to reach the cluster and its web view.
pub fn summary(s: &Summary) -> String {
    let mut out = format!("jobset API server listening on {}\n", s.url);
    match s.nodes {
        None => out.push_str("nodes: none (--nodes 0): the API server alone\ncontrollers: garbage-collector\n"),
        Some(nodes) => {
            let mut names: Vec<&str> = nodes.iter().take(SUMMARY_NODES).map(|n| n.name.as_str()).collect();
            if nodes.len() > SUMMARY_NODES {
                names.push("...");
            }
            out.push_str(&format!("nodes: {} ({}), runtime {}\n", nodes.len(), names.join(", "), s.runtime));
            let capacities: Vec<String> = nodes.iter().map(|n| capacity_text(&n.effective_capacity())).collect();
            if capacities.windows(2).all(|w| w[0] == w[1]) {
                if let Some(c) = capacities.first() {
                    out.push_str(&format!("capacity per node: {c}\n"));
                }
            } else {
                for (n, c) in nodes.iter().zip(&capacities).take(SUMMARY_NODES) {
                    out.push_str(&format!("capacity of {}: {c}\n", n.name));
                }
                if nodes.len() > SUMMARY_NODES {
                    out.push_str(&format!(
                        "capacity of {} more: kubectl describe nodes\n",
                        nodes.len() - SUMMARY_NODES
                    ));
                }
            }
            let mut running = vec!["job"];
            for (external, name) in [(External::Jobset, "jobset"), (External::Appwrapper, "appwrapper")] {
                if !s.external.contains(&external) {
                    running.push(name);
                }
            }
            running.extend(["scheduler", "node-lifecycle", "garbage-collector"]);
            out.push_str(&format!("controllers: {}", running.join(", ")));
            if !s.external.is_empty() {
                use clap::ValueEnum;
                let external: Vec<String> =
                    s.external.iter().filter_map(|e| e.to_possible_value().map(|v| v.get_name().to_string())).collect();
                out.push_str(&format!("; external (left to a jobset manager): {}", external.join(", ")));
            }
            out.push('\n');
        }
    }
    out.push_str(&format!("web UI: {}\n", s.ui));
    match s.context {
        Some((name, file, current)) => {
            let current = if current { ", current" } else { "" };
            out.push_str(&format!("kubectl context: {name} (in {}{current})\n", file.display()));
        }
        None => out.push_str(&format!("export KUBECONFIG={}\n", s.kubeconfig.display())),
    }
    out
}

/// `cpu: 2, memory: 24684096Ki, pods: 110`.
fn capacity_text(capacity: &std::collections::BTreeMap<String, String>) -> String {
    capacity.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine { hostname: "Build_Box".into(), cpus: 2, memory_bytes: 4 << 30, storage_bytes: None, gpus: 1 }
    }

    #[test]
    fn local_nodes_without_a_count_is_one_node_named_after_the_host() {
        let m = machine();
        let names = |nodes: &[NodeConfig]| nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        let host = local_nodes(None, "Build_Box", Some(&m));
        assert_eq!(names(&host), ["build-box"]);
        assert_eq!(host[0].effective_capacity(), m.capacity(), "process nodes are measured");
        assert_eq!(host[0].effective_allocatable(), m.allocatable());
        let process = local_nodes(Some(2), "", Some(&m));
        assert_eq!(names(&process), ["node-0", "node-1"]);
        assert!(process.iter().all(|n| n.effective_capacity() == m.capacity()));
        let simulated = local_nodes(Some(2), "", None);
        assert_eq!(simulated[1].effective_capacity()["cpu"], "32", "simulated nodes keep the defaults");
        assert_eq!(local_nodes(None, "vm", None)[0].name, "vm");
    }

    #[test]
    fn summary_says_what_runs() {
        let m = machine();
        let host = local_nodes(None, "vm", Some(&m));
        let s = Summary {
            url: "https://127.0.0.1:6443",
            ui: "https://127.0.0.1:6443/ui/login#token=t0k",
            kubeconfig: Path::new("/d/kubeconfig"),
            nodes: Some(&host),
            runtime: "process",
            external: &[],
            context: None,
        };
        assert_eq!(
            summary(&s),
            "jobset API server listening on https://127.0.0.1:6443\n\
             nodes: 1 (vm), runtime process\n\
             capacity per node: cpu: 2, memory: 4Gi, nvidia.com/gpu: 1, pods: 110\n\
             controllers: job, jobset, appwrapper, scheduler, node-lifecycle, garbage-collector\n\
             web UI: https://127.0.0.1:6443/ui/login#token=t0k\n\
             export KUBECONFIG=/d/kubeconfig\n"
        );

        let many = local_nodes(Some(5), "", None);
        let external = [External::Jobset, External::Appwrapper];
        let s = Summary { nodes: Some(&many), runtime: "simulated", external: &external, ..s };
        assert_eq!(
            summary(&s).lines().skip(1).take(3).collect::<Vec<_>>(),
            [
                "nodes: 5 (node-0, node-1, node-2, ...), runtime simulated",
                "capacity per node: cpu: 32, memory: 256Gi, pods: 110",
                "controllers: job, scheduler, node-lifecycle, garbage-collector; \
                 external (left to a jobset manager): jobset, appwrapper",
            ]
        );

        let mut varied = local_nodes(Some(4), "", None);
        varied[0].capacity.insert("nvidia.com/gpu".into(), "8".into());
        let s = Summary { nodes: Some(&varied), external: &[], ..s };
        let text = summary(&s);
        assert!(text.contains("capacity of node-0: cpu: 32, memory: 256Gi, nvidia.com/gpu: 8, pods: 110\n"), "{text}");
        assert!(text.contains("capacity of node-2: cpu: 32, memory: 256Gi, pods: 110\n"), "{text}");
        assert!(text.contains("capacity of 1 more: kubectl describe nodes\n"), "{text}");

        let s = Summary { nodes: None, ..s };
        assert_eq!(
            summary(&s).lines().collect::<Vec<_>>(),
            [
                "jobset API server listening on https://127.0.0.1:6443",
                "nodes: none (--nodes 0): the API server alone",
                "controllers: garbage-collector",
                "web UI: https://127.0.0.1:6443/ui/login#token=t0k",
                "export KUBECONFIG=/d/kubeconfig",
            ]
        );
    }

    #[test]
    fn summary_names_the_merged_context_instead_of_the_standalone_file() {
        let base = Summary {
            url: "https://127.0.0.1:6443",
            ui: "https://127.0.0.1:6443/ui/login#token=t0k",
            kubeconfig: Path::new("/d/kubeconfig"),
            nodes: None,
            runtime: "process",
            external: &[],
            context: Some(("jobset", Path::new("/home/u/.kube/config"), true)),
        };
        assert_eq!(summary(&base).lines().last(), Some("kubectl context: jobset (in /home/u/.kube/config, current)"));
        let s = Summary { context: Some(("jobset-dev", Path::new("/k"), false)), ..base };
        assert_eq!(summary(&s).lines().last(), Some("kubectl context: jobset-dev (in /k)"));
    }
}
