//! `jobset up`: the API server over HTTPS, with a kubeconfig that kubectl and kube-rs use as is.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use jobset_kubelet::NodeConfig;

use crate::cluster::{self, ClusterOptions};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Keep every object in DIR (a redb file), plus the CA, certificates and token. Without it
    /// the cluster lives in memory and ends with the process.
    #[arg(long, env = "JOBSET_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Where to write the kubeconfig (default: DATA_DIR/kubeconfig, or a temporary directory).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How often the garbage collector looks for orphaned dependents.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub gc_interval: Duration,
    /// Events of history kept per resource for watches that resume from a resourceVersion.
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
    /// Run this many identical simulated nodes (node-0, node-1, ...) with the controllers.
    #[arg(long, conflicts_with = "nodes_file")]
    pub nodes: Option<usize>,
    /// Run the simulated nodes declared in this YAML file (names, labels, capacity, taints, rules).
    #[arg(long)]
    pub nodes_file: Option<PathBuf>,
    /// How node agents run containers: `simulated` (pod annotations say what happens) or
    /// `process` (host processes: `command`/`args` run on this machine, in per-pod sandboxes).
    #[arg(long, default_value = "simulated", value_parser = ["simulated", "process"])]
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
}

/// The local nodes asked for on the command line, if any.
fn declared_nodes(args: &UpArgs) -> anyhow::Result<Option<Vec<NodeConfig>>> {
    if let Some(path) = &args.nodes_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let nodes = NodeConfig::parse_list(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.0))?;
        return Ok(Some(nodes));
    }
    Ok(args.nodes.map(|n| NodeConfig::uniform(n, "node")))
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // Bad input is reported before anything listens.
    let nodes = declared_nodes(&args)?;
    let appwrapper = args.appwrapper.load()?;
    let state_dir = args.data_dir.clone().unwrap_or_else(crate::default_state_dir);
    let opts = ClusterOptions {
        data_dir: args.data_dir.clone(),
        kubeconfig: args.kubeconfig.clone().unwrap_or_else(|| state_dir.join("kubeconfig")),
        state_dir,
        port: args.port,
        gc_interval: args.gc_interval,
        watch_history: args.watch_history,
        nodes,
        runtime: args.runtime.clone(),
        timing: args.timing.clone(),
        inflight: args.inflight.clone(),
        external: args.external_controllers.clone(),
    };
    let embedded = cluster::start_with(&opts, appwrapper).await?;
    let interrupted = cluster::interrupted();
    // Scripts wait for this line: the server accepts connections from here on.
    println!("jobset API server listening on {}", embedded.url);
    println!("export KUBECONFIG={}", embedded.kubeconfig.display());
    use std::io::Write;
    std::io::stdout().flush().ok();
    interrupted.await;
    embedded.shutdown().await?;
    tracing::info!("shut down");
    Ok(())
}
