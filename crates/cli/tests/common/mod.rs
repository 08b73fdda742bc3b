//! Starting `jobset up` as a child process, shared by the integration tests.

// Each test binary uses a subset of this module.
#![allow(dead_code)]

pub mod pair;
pub mod pods;
pub mod tracker;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

pub const LISTENING: &str = "jobset API server listening on https://127.0.0.1:";
/// How long `jobset up` may take to print its listening line (or to fail).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `jobset up`.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub kubeconfig: PathBuf,
    /// What the server wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    /// Set by [`Server::crash`] (a crash the test goes on from): its containers are left running,
    /// for the next `jobset up` on the data dir to adopt (and kill when it is dropped).
    pub crashed: bool,
}

impl Drop for Server {
    /// Kills `jobset up` and then the containers it leaves running: with `--data-dir` they outlive
    /// a `kill -9` of it by design (ARCHITECTURE.md, "supervisor"), but not a test's end, where they
    /// would go on using the machine's CPU under later tests.
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
        if let Some(dir) = self.kubeconfig.parent().filter(|_| !self.crashed) {
            kill_kept_containers(dir);
        }
    }
}

/// Stops the containers a killed `jobset up` on `data_dir` left running, as `jobset down` does.
pub fn kill_kept_containers(data_dir: &Path) {
    jobset_kubelet::runtime::process::stop_kept_containers(&data_dir.join(jobset_local::RUNTIME_DIR));
}

/// Whether `pid` runs: it exists and is not a zombie (an exited process its parent has not
/// reaped yet has ended, and cannot leak).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) != Some('Z'))
}

/// Waits (at most `wait`) until process `pid` has ended.
pub async fn gone(pid: i32, what: &str, wait: Duration) {
    tokio::time::timeout(wait, async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: process {pid} still runs"));
}

/// `jobset up --port PORT --data-dir DIR EXTRA_ARGS...`, with piped stdout and stderr, killed on drop.
pub fn command(dir: &Path, port: u16, extra_args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobset"));
    cmd.args(["up", "--port", &port.to_string(), "--data-dir"])
        .arg(dir)
        // A standalone kubeconfig: the user's ~/.kube/config is left alone.
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(extra_args)
        .env("JOBSET_LOG", "warn")
        .env_remove("JOBSET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Starts `jobset up` on `dir` and waits for its listening line.
pub async fn start(dir: &Path, port: u16, extra_args: &[&str]) -> Server {
    try_start(dir, port, extra_args).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Starts `jobset up` on `dir`: the server once it listens, or why it did not.
pub async fn try_start(dir: &Path, port: u16, extra_args: &[&str]) -> Result<Server, String> {
    let mut child = command(dir, port, extra_args).spawn().expect("spawn jobset up");
    let (stderr, drained) = drain_stderr(&mut child);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let waited = tokio::time::timeout(STARTUP_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Some(rest) = line.strip_prefix(LISTENING) {
                return Some(rest.trim().parse::<u16>().expect("port in the listening line"));
            }
        }
        None
    })
    .await;
    let bound = match waited {
        Ok(Some(p)) => p,
        Ok(None) => {
            let status = tokio::time::timeout(STARTUP_TIMEOUT, child.wait()).await;
            let _ = tokio::time::timeout(STARTUP_TIMEOUT, drained).await;
            return Err(format!("jobset up exited before listening ({status:?}); stderr:\n{}", stderr.lock().unwrap()));
        }
        Err(_) => {
            let _ = child.kill().await;
            return Err(format!(
                "jobset up did not listen within {STARTUP_TIMEOUT:?}; stderr:\n{}",
                stderr.lock().unwrap()
            ));
        }
    };
    if port != 0 {
        assert_eq!(bound, port);
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Server { child, port: bound, kubeconfig: dir.join("kubeconfig"), stderr, crashed: false })
}

/// Collects what `child` writes to its piped stderr, as it comes; the task ends with the pipe.
pub fn drain_stderr(child: &mut Child) -> (Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().expect("a piped stderr");
    let collected = stderr.clone();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            collected.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (stderr, task)
}

impl Server {
    /// A client from the server's kubeconfig, which must point at its port.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("kubeconfig loads");
        let url = config.cluster_url.to_string();
        assert!(
            url.contains(&format!("127.0.0.1:{}", self.port)),
            "kubeconfig points at {url}, not port {}",
            self.port
        );
        kube::Client::try_from(config).expect("client")
    }

    /// SIGKILL, and reap; then (on drop) its containers, as at a test's end. The server must not
    /// have panicked meanwhile.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill -9 jobset up");
        self.check();
    }

    /// A crash the test goes on from: SIGKILL and reap, leaving its process containers running
    /// for the next `jobset up` on the data dir to adopt. The server must not have panicked.
    pub async fn crash(mut self) {
        self.child.kill().await.expect("kill -9 jobset up");
        self.crashed = true;
        self.check();
    }

    /// Panics if the server logged a panic.
    pub fn check(&self) {
        let stderr = self.stderr.lock().unwrap();
        assert!(!stderr.contains("panicked"), "jobset up panicked:\n{stderr}");
    }
}

/// What a finished `jobset` command printed.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The `jobset` binary with `args`, no inherited KUBECONFIG or data dir, quiet logs.
pub fn jobset_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobset"));
    cmd.args(args)
        .env("JOBSET_LOG", "warn")
        .env_remove("KUBECONFIG")
        .env_remove("JOBSET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Reads the stdout of a `jobset run --keep` (spawned from [`jobset_command`]) up to its
/// `export KUBECONFIG=` line: what it printed until then and the kubeconfig's path. The rest of
/// its stdout is drained in the background. Panics if it ends first or takes longer than
/// `timeout`.
pub async fn kept_cluster(run: &mut Child, timeout: Duration) -> (String, String) {
    let mut lines = BufReader::new(run.stdout.take().expect("a piped stdout")).lines();
    let found = tokio::time::timeout(timeout, async {
        let mut seen = String::new();
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(path) = l.strip_prefix("export KUBECONFIG=") {
                return (seen, path.to_string());
            }
            seen.push_str(&l);
            seen.push('\n');
        }
        panic!("run ended without printing the kubeconfig:\n{seen}")
    })
    .await
    .expect("the kubeconfig line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    found
}

/// Runs `jobset ARGS...` to completion; panics if it takes longer than `timeout`.
pub async fn jobset(args: &[&str], timeout: Duration) -> Output {
    run_to_end(jobset_command(args), timeout).await
}

/// Runs `cmd` (piped, as `jobset_command` makes it) to completion; panics if it takes longer
/// than `timeout`.
pub async fn run_to_end(mut cmd: Command, timeout: Duration) -> Output {
    let child = cmd.spawn().expect("spawn jobset");
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{cmd:?} did not finish within {timeout:?}"))
        .expect("wait for jobset");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
