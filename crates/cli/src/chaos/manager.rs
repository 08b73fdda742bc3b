//! The two-process setup of the `kill-manager` fault, as on a real cluster: `jobset up
//! --external-controllers jobset,appwrapper` plays a cluster without JobSet installed (API
//! server, Job controller, scheduler, nodes; no JobSet or AppWrapper admission of its own), and
//! `jobset manager` runs the JobSet and AppWrapper controllers and admission webhooks in a
//! process of its own. A task stands in for the manager's Deployment: it starts the process
//! again when it exits on its own, and carries out the driver's `kill -9`.
//!
//! The manager uses the cluster's admin credentials (its ServiceAccount and RBAC are the subject
//! of crates/cli/tests/manager.rs); the webhook Service leads to the manager's webhook port on
//! loopback, which stays the same across its restarts.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use super::scenario::MARKER_ENV;

/// What the manager's webhooks need in the cluster, from config/webhook/: the serving
/// certificate's Secret (filled by the manager's internal certificate management), the Service
/// the webhook configurations call, and the configurations.
const WEBHOOK_CONFIG: [(&str, &str); 3] = [
    ("config/webhook/secret.yaml", include_str!("../../../../config/webhook/secret.yaml")),
    ("config/webhook/service.yaml", include_str!("../../../../config/webhook/service.yaml")),
    ("config/webhook/manifests.yaml", include_str!("../../../../config/webhook/manifests.yaml")),
];

/// The manager's identity in its leader election Lease (`--leader-election-id`): the same after
/// a restart, so the new process renews the Lease at once instead of waiting for it to expire.
const IDENTITY: &str = "chaos-manager";
/// The manager's namespace (config/): its Lease, webhook Service and Secret are there.
const NAMESPACE: &str = "jobset-system";
/// How soon a manager that exited on its own is started again.
const RESTART_DELAY: Duration = Duration::from_millis(200);
/// How often `/readyz` is asked while the manager is not ready.
const READY_POLL: Duration = Duration::from_millis(50);

/// Applies [`WEBHOOK_CONFIG`], the Service's target port being `webhook_port` (where the
/// manager's webhook server listens on loopback).
pub async fn install(client: &kube::Client, webhook_port: u16) -> anyhow::Result<()> {
    // The manager's namespace (config/rbac/service_account.yaml's, created with it there).
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    namespaces
        .patch(NAMESPACE, &PatchParams::apply("jobset-chaos").force(), &Patch::Apply(&namespace))
        .await
        .with_context(|| format!("creating namespace {NAMESPACE}"))?;
    let resources = crate::kinds::discover(client).await?;
    for (file, text) in WEBHOOK_CONFIG {
        let docs = jobset_api::manifest::parse(file, text).map_err(|e| anyhow!("{e}"))?;
        let targets = crate::apply::plan(&docs, &resources, "default").map_err(|e| anyhow!("{e}"))?;
        for t in targets {
            let mut object = t.object();
            if object["kind"] == "Service" {
                object["spec"]["ports"] = json!([{"name": "webhook", "port": 443, "targetPort": webhook_port}]);
            }
            let params = PatchParams::apply("jobset-chaos").force();
            t.api(client)
                .patch(t.doc.name(), &params, &Patch::Apply(&object))
                .await
                .with_context(|| format!("applying {} from {file}", t.reference()))?;
        }
    }
    Ok(())
}

/// The manager's configuration (upstream's `Configuration`): webhook server and health probes
/// on the given loopback ports, metrics off, leader election with short timings (upstream's
/// 15 s, 10 s, 2 s, shrunk as the manager's tests do), internal certificate management.
pub fn config_yaml(webhook_port: u16, health_port: u16) -> String {
    format!(
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n\
         leaderElection:\n  leaderElect: true\n  leaseDuration: 5s\n  renewDeadline: 3500ms\n  retryPeriod: 400ms\n  resourceNamespace: {NAMESPACE}\n\
         health:\n  healthProbeBindAddress: 127.0.0.1:{health_port}\n\
         metrics:\n  bindAddress: \"0\"\n\
         webhook:\n  host: 127.0.0.1\n  port: {webhook_port}\n\
         internalCertManagement:\n  enable: true\n"
    )
}

/// How to start the manager.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kubeconfig: PathBuf,
    pub config: PathBuf,
    pub health_port: u16,
    /// Its stderr (appended to across restarts).
    pub log: PathBuf,
    /// The run's marker, in its environment (the orphan check finds it by it).
    pub marker: String,
    /// How long it may take to be ready, and to stop on SIGTERM.
    pub startup_timeout: Duration,
}

impl Spec {
    /// Starts `jobset manager` and waits until its `/readyz` answers 200 (the caches synced,
    /// the webhook server serving).
    async fn start(&self) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("manager")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--config")
            .arg(&self.config)
            .args(["--leader-election-id", IDENTITY, "--graceful-shutdown-timeout", "5s"])
            .env("JOBSET_LOG", "warn")
            .env(MARKER_ENV, &self.marker)
            .env_remove("KUBECONFIG")
            .env_remove(super::NAMESPACE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("starting jobset manager")?;
        let ready = async {
            loop {
                if readyz(self.health_port).await == Some(200) {
                    return Ok(());
                }
                if let Some(status) = child.try_wait()? {
                    bail!("jobset manager exited before it was ready ({status}; see {})", self.log.display());
                }
                tokio::time::sleep(READY_POLL).await;
            }
        };
        match tokio::time::timeout(self.startup_timeout, ready).await {
            Ok(Ok(())) => Ok(child),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                let _ = child.kill().await;
                bail!("jobset manager was not ready within {:?} (see {})", self.startup_timeout, self.log.display())
            }
        }
    }
}

/// The status code of `GET /readyz` on the loopback `port`; `None` if nothing answers.
async fn readyz(port: u16) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

enum Order {
    /// `kill -9`, down for `hold`, then started again (answered once it is ready).
    Kill { hold: Duration, done: oneshot::Sender<anyhow::Result<()>> },
}

/// The running manager and the task that keeps it running.
pub struct Manager {
    commands: mpsc::UnboundedSender<Order>,
    task: tokio::task::JoinHandle<Vec<String>>,
    stop: tokio_util::sync::CancellationToken,
}

impl Manager {
    /// Starts the manager (returns once it is ready) and the task that keeps it running.
    pub async fn start(spec: Spec) -> anyhow::Result<Manager> {
        let child = spec.start().await?;
        let (commands, rx) = mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(keep(spec, child, rx, stop.clone()));
        Ok(Manager { commands, task, stop })
    }

    /// `kill -9` of the manager; it stays down for `hold`, then is started again: returns once
    /// it is ready.
    pub async fn kill(&self, hold: Duration) -> anyhow::Result<()> {
        let (done, answer) = oneshot::channel();
        self.commands.send(Order::Kill { hold, done }).map_err(|_| anyhow!("the manager's keeper is gone"))?;
        answer.await.map_err(|_| anyhow!("the manager's keeper is gone"))?
    }

    /// Stops the manager with SIGTERM (as its Deployment's deletion would): what happened to it
    /// meanwhile (exits on its own, a stop that did not come within the startup timeout).
    pub async fn stop(self) -> Vec<String> {
        self.stop.cancel();
        self.task.await.unwrap_or_else(|e| vec![format!("the manager's keeper failed: {e}")])
    }

    /// Kills the manager at once (cleanup after a driver error).
    pub fn abort(self) {
        // Dropping the task's child kills it (kill_on_drop).
        self.task.abort();
    }
}

/// Keeps the manager running until stopped, as its Deployment would: started again when it
/// exits on its own (noted), killed and started again on [`Order::Kill`].
async fn keep(
    spec: Spec,
    child: Child,
    mut commands: mpsc::UnboundedReceiver<Order>,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<String> {
    let mut notes = Vec::new();
    let mut child = Some(child);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(Order::Kill { hold, done }) = commands.recv() => {
                if let Some(mut c) = child.take() {
                    let _ = c.kill().await;
                }
                tokio::time::sleep(hold).await;
                let started = spec.start().await;
                let _ = done.send(started.map(|c| {
                    child = Some(c);
                }));
            }
            status = async { child.as_mut().expect("guarded").wait().await }, if child.is_some() => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                notes.push(format!("jobset manager exited on its own ({status}), started again"));
                child = None;
            }
            _ = tokio::time::sleep(RESTART_DELAY), if child.is_none() => {
                match spec.start().await {
                    Ok(c) => child = Some(c),
                    Err(e) => notes.push(format!("starting jobset manager again: {e:#}")),
                }
            }
        }
    }
    if let Some(mut c) = child {
        if let Some(pid) = c.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        if tokio::time::timeout(spec.startup_timeout, c.wait()).await.is_err() {
            notes.push(format!("jobset manager did not stop on SIGTERM within {:?}", spec.startup_timeout));
            let _ = c.kill().await;
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_configuration_is_upstreams_with_the_runs_ports_and_leader_election() {
        let cfg = jobset_manager::config::parse(&config_yaml(9555, 9556), "chaos.yaml").expect("a valid Configuration");
        assert_eq!(cfg.webhook.port, 9555);
        assert_eq!(cfg.webhook.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(cfg.health.health_probe_bind_address, "127.0.0.1:9556");
        assert_eq!(cfg.metrics.bind_address, "0");
        assert!(cfg.leader_election.leader_elect);
        assert!(cfg.internal_cert_management.enable);
    }

    #[test]
    fn the_webhook_config_is_the_shipped_one_and_parses() {
        let kinds: Vec<String> = WEBHOOK_CONFIG
            .iter()
            .flat_map(|(file, text)| jobset_api::manifest::parse(file, text).expect("parses"))
            .map(|d| d.kind().to_string())
            .collect();
        assert_eq!(kinds, ["Secret", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]);
    }
}
