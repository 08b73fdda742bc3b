//! The worker of main-container mode: the agent itself runs `$SHELL -c "$WORKER_COMMAND"` once
//! the barrier is lifted.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::config::WorkerConfig;

pub trait Worker: Send {
    fn start(&mut self) -> std::io::Result<()>;
    /// The exit code of the running worker (128+signal when killed by one); never resolves while
    /// none runs. Cancel-safe.
    fn wait(&mut self) -> impl Future<Output = i32> + Send;
    /// Stops the running worker, if any.
    fn stop(&mut self) -> impl Future<Output = ()> + Send;
}

/// Sidecar mode: `run(.., None::<NoWorker>, ..)`.
pub enum NoWorker {}

impl Worker for NoWorker {
    fn start(&mut self) -> std::io::Result<()> {
        match *self {}
    }
    async fn wait(&mut self) -> i32 {
        match *self {}
    }
    async fn stop(&mut self) {
        match *self {}
    }
}

/// A shell command in its own process group, so that stopping it reaches everything it started.
pub struct ProcessWorker {
    cfg: WorkerConfig,
    child: Option<Child>,
}

impl ProcessWorker {
    pub fn new(cfg: WorkerConfig) -> ProcessWorker {
        ProcessWorker { cfg, child: None }
    }
}

fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

impl Worker for ProcessWorker {
    fn start(&mut self) -> std::io::Result<()> {
        let child = Command::new(&self.cfg.shell)
            .arg("-c")
            .arg(&self.cfg.command)
            .process_group(0)
            // The agent exiting on a signal must not leave the worker behind.
            .kill_on_drop(true)
            .spawn()?;
        tracing::info!(pid = child.id(), command = %self.cfg.command, "worker started");
        self.child = Some(child);
        Ok(())
    }

    async fn wait(&mut self) -> i32 {
        let Some(child) = self.child.as_mut() else { return std::future::pending().await };
        let code = match child.wait().await {
            Ok(status) => code(status),
            Err(e) => {
                tracing::error!(error = %e, "waiting for the worker");
                1
            }
        };
        self.child = None;
        tracing::info!(code, "worker exited");
        code
    }

    /// SIGTERM to the group, SIGKILL after the grace; then SIGKILL to whatever of the group is left,
    /// as a container stop leaves nothing running.
    async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let Some(pid) = child.id() else { return };
        let group = Pid::from_raw(pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        if tokio::time::timeout(self.cfg.kill_grace, child.wait()).await.is_err() {
            tracing::warn!(grace = ?self.cfg.kill_grace, "worker did not stop on SIGTERM; killing it");
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn worker(command: &str, grace: Duration) -> ProcessWorker {
        ProcessWorker::new(WorkerConfig {
            shell: "/bin/sh".into(),
            command: command.into(),
            keep_watch: false,
            kill_grace: grace,
        })
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn wait_returns_the_exit_code() {
        let mut w = worker("exit 3", LONG);
        w.start().unwrap();
        assert_eq!(tokio::time::timeout(LONG, w.wait()).await.unwrap(), 3);
    }

    #[tokio::test]
    async fn wait_never_resolves_without_a_running_worker() {
        let mut w = worker("true", LONG);
        assert!(tokio::time::timeout(Duration::from_millis(50), w.wait()).await.is_err());
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        // The shell ignores SIGTERM; its background child must not outlive the stop either.
        let mut w = worker(
            &format!("trap '' TERM; sleep 300 & echo $! > {}; wait", pidfile.display()),
            Duration::from_millis(200),
        );
        w.start().unwrap();
        let grandchild = tokio::time::timeout(LONG, async {
            loop {
                if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
                    return pid;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the worker wrote its child's pid");
        tokio::time::timeout(LONG, w.stop()).await.expect("stop returns after the grace");
        // Gone (reaped by init) or a zombie once SIGKILL has been delivered.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        };
        tokio::time::timeout(Duration::from_secs(5), async {
            while alive() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the worker's background process was left running");
        assert!(tokio::time::timeout(Duration::from_millis(50), w.wait()).await.is_err(), "nothing runs any more");
    }
}
