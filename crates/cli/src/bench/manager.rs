//! `jobset bench manager`: the 5,000-pod `Recreate` and in-place restarts with the JobSet
//! controller in-process, then with `jobset manager` as an OS process of its own talking HTTPS to
//! the benchmark's API server (upstream's QPS/burst 500/500), in one run.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use jobset_apiserver::{ApiServer, tls};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{JobsetFigures, Limits, in_place};

/// Where a benchmark's JobSet controller runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Controllers {
    /// In the benchmark's process, with an in-process client (local mode).
    InProcess,
    /// In a `jobset manager` process, over HTTPS.
    Manager,
}

impl Controllers {
    pub(super) fn label(self) -> &'static str {
        match self {
            Controllers::InProcess => "in-process",
            Controllers::Manager => "jobset manager (HTTPS)",
        }
    }
}

/// A `jobset manager` serving a benchmark's cluster, whose own JobSet and AppWrapper controllers
/// are off: the API server listens on loopback over HTTPS for it, as `jobset up` does.
pub(super) struct ManagerProcess {
    child: Child,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl ManagerProcess {
    /// Serves `server` over HTTPS and starts the manager against it; returns once the manager's
    /// `/readyz` answers 200 (its caches have synced).
    pub(super) async fn start(server: &Arc<ApiServer>) -> anyhow::Result<ManagerProcess> {
        let dir = tempfile::Builder::new().prefix("jobset-bench-manager-").tempdir()?;
        let creds = tls::load_or_create(dir.path()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://{}", listener.local_addr()?);
        let kubeconfig = dir.path().join("kubeconfig");
        tls::write_kubeconfig(&kubeconfig, &tls::kubeconfig_yaml(&url, &creds, "bench"))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let tls_config = tls::server_config(&creds).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(jobset_apiserver::serve::serve_https(
            server.clone(),
            listener,
            tls_config,
            creds.token.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        let mut child = Command::new(std::env::current_exe()?)
            .arg("manager")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--leader-elect=false", "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0"])
            .env("JOBSET_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting jobset manager")?;
        let mut lines = BufReader::new(child.stdout.take().context("manager stdout")?).lines();
        let health = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("health probes listening on http://") {
                    return Ok(url.trim_end_matches("/healthz").to_string());
                }
            }
            anyhow::bail!("jobset manager exited before listening")
        })
        .await
        .context("jobset manager did not listen within 60 s")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // A benchmark may poll: nothing here is a test.
        let deadline = Instant::now() + Duration::from_secs(60);
        while get_status(&health, "/readyz").await != Some(200) {
            anyhow::ensure!(Instant::now() < deadline, "jobset manager not ready within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(ManagerProcess { child, stop, serving, _dir: dir })
    }

    /// CPU time the manager process has used (from /proc, clock ticks of 10 ms).
    pub(super) fn cpu(&self) -> Duration {
        let Some(pid) = self.child.id() else { return Duration::ZERO };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse().ok()).collect();
        Duration::from_millis(f.iter().sum::<u64>() * 10)
    }

    pub(super) async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = self.stop.send(());
        let _ = self.serving.await;
    }
}

async fn get_status(host: &str, path: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// Both restarts at `pods` pods, each with the controllers in-process and then in a manager.
pub(super) async fn bench(
    pods: i32,
    pods_per_job: i32,
    pods_per_node: i32,
    fail_after: Duration,
    limits: Limits,
) -> anyhow::Result<()> {
    let jobs = (pods / pods_per_job).max(1);
    let ppj = pods / jobs;
    let nodes = ((jobs * ppj) / pods_per_node.max(1)).max(1) as usize;
    println!(
        "jobset bench manager ({} cores): {} pods, {jobs} Jobs x {ppj} pods on {nodes} simulated nodes",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        jobs * ppj
    );
    let mut recreate: Vec<(Controllers, JobsetFigures)> = vec![];
    let mut in_place: Vec<(Controllers, in_place::InPlaceFigures)> = vec![];
    for c in [Controllers::InProcess, Controllers::Manager] {
        println!("\nJobSet controller {}", c.label());
        recreate.push((c, super::jobset_restart("Recreate", jobs, ppj, nodes, None, limits, c).await?));
        let mode = in_place::Mode::MainContainer;
        in_place.push((c, in_place::simulated(jobs, ppj, nodes, limits, fail_after, mode, c).await?));
    }
    println!();
    println!(
        "| restart | JobSet controller | create → all running | restart | vs in-process | API requests (restart) | benchmark process CPU (restart) | manager CPU (restart) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // (restart, controllers, startup, restart time, requests, benchmark CPU, manager CPU)
    type Row = (String, Controllers, Duration, Duration, u64, Duration, Duration);
    let mut rows: Vec<Row> = vec![];
    for (c, f) in &recreate {
        rows.push(("Recreate".into(), *c, f.startup, f.restart, f.requests, f.cpu, f.manager_cpu));
    }
    let label = format!("in-place, {}", in_place::Mode::MainContainer.label());
    for (c, f) in &in_place {
        rows.push((label.clone(), *c, f.startup, f.restart, f.requests, f.cpu, f.manager_cpu));
    }
    for (what, c, startup, restart, requests, cpu, manager_cpu) in &rows {
        // The baseline: the same restart in-process, measured in this run.
        let base = rows.iter().find(|r| r.0 == *what && r.1 == Controllers::InProcess).map_or(*restart, |r| r.3);
        println!(
            "| {what} | {} | {:.2} s | {:.3} s | {:.2}× | {requests} | {:.1} s | {:.1} s |",
            c.label(),
            startup.as_secs_f64(),
            restart.as_secs_f64(),
            restart.as_secs_f64() / base.as_secs_f64(),
            cpu.as_secs_f64(),
            manager_cpu.as_secs_f64()
        );
    }
    Ok(())
}
