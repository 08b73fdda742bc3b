//! `jobset agent`: the in-place restart agent, run as a sidecar (or as the main container) of a
//! JobSet pod. Configured by environment variables (docs/in-place-restart.md); exits with the
//! code the agent decides (the in-place restart code, the worker's code, 128+signal).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use jobset_agent::config::DEFAULT_SERVICE_ACCOUNT_DIR;
use jobset_agent::{AgentConfig, Endpoint, HttpBarrier, NoBarrier, NoWorker, ProcessWorker};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{Failure, USAGE};

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Kubeconfig to use instead of the pod's service account (default: $KUBECONFIG when set,
    /// else the in-cluster configuration).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<i32> {
    // First, so that a SIGTERM during start-up already ends the agent with 143.
    let stop = jobset_agent::termination_signal().context("installing the SIGTERM/SIGINT handlers")?;
    let mut stop = pin!(stop);
    let cfg = AgentConfig::from_env(|k| std::env::var(k).ok(), Path::new(DEFAULT_SERVICE_ACCOUNT_DIR))
        .map_err(|e| Failure::new(USAGE, format!("error: {e}")))?;
    if let Some(worker) = cfg.worker.clone() {
        let client = client(args.kubeconfig).await?;
        return Ok(jobset_agent::run(cfg, client, NoBarrier, Some(ProcessWorker::new(worker)), stop).await);
    }
    // Listen before talking to the API server when the endpoint is known (configured, or read
    // from the pod by this pod's previous agent): the kubelet's startup probe then gets its 503 at once.
    let known = cfg.barrier.clone().or_else(|| jobset_agent::saved_endpoint(&cfg));
    let early = match &known {
        Some(e) => Some(bind(e, cfg.barrier_hold).await?),
        None => None,
    };
    let client = client(args.kubeconfig).await?;
    let barrier = match early {
        Some(b) => b,
        None => {
            let endpoint = tokio::select! {
                code = &mut stop => return Ok(code),
                e = jobset_agent::barrier_endpoint(&cfg, &client) => e,
            };
            bind(&endpoint, cfg.barrier_hold).await?
        }
    };
    Ok(jobset_agent::run(cfg, client, barrier, None::<NoWorker>, stop).await)
}

/// `$POD_IP` when set, else all addresses, IPv6 and IPv4 where the host has IPv6 (as Go's
/// `:port`), else IPv4 only. Pods of the process runtime share the host's network, each with its
/// own loopback address in `POD_IP` (where the kubelet's probe goes): binding it lets every pod
/// serve upstream's fixed barrier port. A probe of a barrier that is up is held for `hold`
/// (`BARRIER_HOLD`).
async fn bind(e: &Endpoint, hold: Duration) -> anyhow::Result<HttpBarrier> {
    if let Some(ip) = std::env::var("POD_IP").ok().and_then(|ip| ip.trim().parse::<IpAddr>().ok()) {
        return HttpBarrier::bind_holding(SocketAddr::from((ip, e.port)), e.path.clone(), hold)
            .await
            .with_context(|| format!("listening on {ip} port {} for the startup probe", e.port));
    }
    let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, e.port));
    match HttpBarrier::bind_holding(v6, e.path.clone(), hold).await {
        Ok(b) => Ok(b),
        Err(_) => HttpBarrier::bind_holding(SocketAddr::from((Ipv4Addr::UNSPECIFIED, e.port)), e.path.clone(), hold)
            .await
            .with_context(|| format!("listening on port {} for the startup probe", e.port)),
    }
}

async fn client(kubeconfig: Option<PathBuf>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc =
                Kubeconfig::read_from(&path).with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .context("loading the kubeconfig")?
        }
        None if std::env::var_os("KUBECONFIG").is_some() => {
            kube::Config::from_kubeconfig(&KubeConfigOptions::default()).await.context("loading $KUBECONFIG")?
        }
        None => kube::Config::incluster()
            .context("the in-cluster configuration (service-account token, KUBERNETES_SERVICE_HOST/PORT)")?,
    };
    Client::try_from(config).context("building the client")
}
