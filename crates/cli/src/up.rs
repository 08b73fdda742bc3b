//! `jobset up`: the API server over HTTPS, with a kubeconfig that kubectl and kube-rs use as is.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use jobset_apiserver::persist::{Backend, Memory, Redb};
use jobset_apiserver::{Admission, ApiServer, ServerConfig, tls};
use jobset_kubelet::NodeConfig;
use jobset_local::{LocalCluster, LocalConfig};

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
    /// How long a simulated container runs when its pod says nothing.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub default_run_duration: Duration,
    /// How often node agents renew their Lease and post their status.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub heartbeat_interval: Duration,
    /// How long a node's Lease may go unrenewed before the node counts as lost.
    #[arg(long, default_value = "40s", value_parser = crate::parse_duration)]
    pub node_grace_period: Duration,
    /// How node agents run containers: `simulated` (pod annotations say what happens) or
    /// `process` (host processes: `command`/`args` run on this machine; no isolation yet).
    #[arg(long, default_value = "simulated", value_parser = ["simulated", "process"])]
    pub runtime: String,
    /// First pod-failure back-off of the Job controller (doubling, capped at 10 min).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub job_backoff: Duration,
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
    let state_dir = args.data_dir.clone().unwrap_or_else(crate::default_state_dir);
    let backend: Box<dyn Backend> = match &args.data_dir {
        Some(dir) => Box::new(Redb::open(dir).map_err(anyhow::Error::msg).context("opening the data dir")?),
        None => Box::new(Memory),
    };
    let creds = tls::load_or_create(&state_dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut config = ServerConfig { gc_interval: args.gc_interval, ..ServerConfig::default() };
    config.store.watch_history = args.watch_history;
    config.log_dir = Some(state_dir.join("logs"));
    let server = ApiServer::new(backend, Admission::default(), config).map_err(anyhow::Error::msg)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            bail!("127.0.0.1:{} is in use (another `jobset up`?): pick another with --port", args.port)
        }
        Err(e) => return Err(e).with_context(|| format!("listening on {addr}")),
    };
    let bound = listener.local_addr()?;
    let url = format!("https://{bound}");
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| state_dir.join("kubeconfig"));
    tls::write_kubeconfig(&kubeconfig, &tls::kubeconfig_yaml(&url, &creds, "jobset"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let tls_config = tls::server_config(&creds).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster = match nodes {
        Some(nodes) => {
            let mut local = LocalConfig::with_nodes(0);
            local.nodes = nodes;
            if args.runtime == "process" {
                local.runtime = jobset_local::RuntimeKind::Process(Default::default());
            }
            local.agent.default_run_duration = args.default_run_duration;
            local.agent.heartbeat_interval = args.heartbeat_interval;
            local.agent.status_update_interval = args.heartbeat_interval;
            local.agent.log_dir = Some(state_dir.join("logs"));
            local.node_lifecycle.grace_period = args.node_grace_period;
            // Check nodes several times per grace period (upstream: every 5 s for 40 s).
            local.node_lifecycle.monitor_period =
                (args.node_grace_period / 8).clamp(Duration::from_millis(10), local.node_lifecycle.monitor_period);
            local.job.sync.backoff.base = args.job_backoff;
            Some(LocalCluster::start(server.clone(), local).await)
        }
        None => {
            server.spawn_gc();
            None
        }
    };
    // Scripts wait for this line: the server accepts connections from here on.
    println!("jobset API server listening on {url}");
    println!("export KUBECONFIG={}", kubeconfig.display());
    use std::io::Write;
    std::io::stdout().flush().ok();
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    jobset_apiserver::serve::serve_https(server, listener, tls_config, creds.token.clone(), shutdown).await?;
    if let Some(c) = cluster {
        c.shutdown().await;
    }
    tracing::info!("shut down");
    Ok(())
}
