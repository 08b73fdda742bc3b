//! The README's flow, as a new user runs it: `jobset up --detach` with no other flags, plain
//! `kubectl apply` (no KUBECONFIG: the context `jobset up` merged into ~/.kube/config), the
//! JobSet completes, `jobset status` shows the cluster, `jobset down` stops it and removes its
//! context, leaving the user's other contexts alone.
//!
//! HOME is a temporary directory, so ~/.kube/config and ~/.local/share/jobset are the test's.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;
use tokio::process::Command;

/// How long `jobset up --detach` may take to return (it waits for the cluster to be ready).
const UP_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a kubectl or jobset client command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the JobSet may take to complete (two restarts of two real processes).
const COMPLETE_TIMEOUT: &str = "240s";
/// How long `jobset down` may take (graceful pod termination included).
const DOWN_TIMEOUT: Duration = Duration::from_secs(150);

/// A kubeconfig of another cluster, present before `jobset up`.
const OTHER: &str = r#"apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: other
  user:
    token: other-token
contexts:
- name: other
  context:
    cluster: other
    user: other
    namespace: team
current-context: other
preferences: {}
"#;

/// Kills the background `jobset up` of a data dir if the test ends with it still running.
struct Guard(PathBuf);

impl Guard {
    fn pid(&self) -> Option<i32> {
        fs::read_to_string(self.0.join("jobset.pid")).ok()?.trim().parse().ok()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            common::kill_kept_containers(&self.0);
        }
    }
}

struct Output {
    what: String,
    success: bool,
    stdout: String,
    stderr: String,
}

impl Output {
    #[track_caller]
    fn ok(&self) -> &str {
        assert!(self.success, "{} failed:\nstdout:\n{}\nstderr:\n{}", self.what, self.stdout, self.stderr);
        &self.stdout
    }
}

/// Runs `program args` with HOME at `home` and no KUBECONFIG, XDG_DATA_HOME or JOBSET_DATA_DIR.
async fn run(program: &Path, args: &[&str], home: &Path, timeout: Duration) -> Output {
    let what = format!("{} {}", program.display(), args.join(" "));
    let child = Command::new(program)
        .args(args)
        .env("HOME", home)
        .env("JOBSET_LOG", "warn")
        .env_remove("KUBECONFIG")
        .env_remove("XDG_DATA_HOME")
        .env_remove("JOBSET_DATA_DIR")
        .current_dir(home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {timeout:?}"))
        .unwrap();
    Output {
        what,
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn jobset() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jobset"))
}

fn kubectl() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl is not on PATH: this test drives a real kubectl (`apt-get install kubernetes-client`)")
}

fn kubeconfig(home: &Path) -> Value {
    let text = fs::read_to_string(home.join(".kube/config")).expect("~/.kube/config");
    serde_saphyr::from_str(&text).expect("~/.kube/config parses")
}

fn names(config: &Value, list: &str) -> Vec<String> {
    config[list].as_array().into_iter().flatten().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread")]
async fn up_detach_then_kubectl_then_down() {
    let home = TempDir::new().unwrap();
    let home = home.path();
    fs::create_dir(home.join(".kube")).unwrap();
    fs::write(home.join(".kube/config"), OTHER).unwrap();
    fs::set_permissions(home.join(".kube/config"), fs::Permissions::from_mode(0o644)).unwrap();
    let data = home.join(".local/share/jobset/default");
    let guard = Guard(data.clone());

    let up = run(&jobset(), &["up", "--detach", "--port", "0"], home, UP_TIMEOUT).await;
    let up_out = up.ok();
    assert!(up_out.contains("is running in the background"), "{up_out}");
    let pid = guard.pid().expect("a pid file in the default data dir");

    // The context is merged and current; the other one is intact; the file is private.
    let config = kubeconfig(home);
    for list in ["clusters", "users", "contexts"] {
        assert_eq!(names(&config, list), ["other", "jobset"], "{list}");
    }
    assert_eq!(config["current-context"], "jobset");
    assert_eq!(
        config["contexts"][0]["context"],
        serde_json::json!({"cluster": "other", "user": "other", "namespace": "team"})
    );
    assert_eq!(config["users"][0]["user"]["token"], "other-token");
    assert_eq!(mode(&home.join(".kube/config")), 0o600);

    // Plain kubectl, no KUBECONFIG.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/failure-policy/restart-jobset.yaml");
    let example = example.to_str().unwrap();
    let applied = run(&kubectl(), &["--request-timeout=20s", "apply", "-f", example], home, COMMAND_TIMEOUT).await;
    assert!(applied.ok().contains("jobset.jobset.x-k8s.io/restart-jobset created"), "{}", applied.stdout);
    let timeout = format!("--timeout={COMPLETE_TIMEOUT}");
    let args = ["wait", "--for=condition=Completed", "jobset/restart-jobset", timeout.as_str()];
    let waited = run(&kubectl(), &args, home, Duration::from_secs(300)).await;
    if !waited.success {
        let log = fs::read_to_string(data.join("jobset.log")).unwrap_or_default();
        let got = run(&kubectl(), &["get", "jobsets,jobs,pods", "-o", "wide"], home, COMMAND_TIMEOUT).await;
        panic!("the JobSet did not complete: {}\n{}\n--- jobset.log ---\n{log}", waited.stderr, got.stdout);
    }
    let restarts =
        run(&kubectl(), &["get", "jobset/restart-jobset", "-o", "jsonpath={.status.restarts}"], home, COMMAND_TIMEOUT)
            .await;
    assert_eq!(restarts.ok(), "2");

    // A second `up --detach` of the same cluster is refused while it runs.
    let again = run(&jobset(), &["up", "--detach", "--port", "0"], home, UP_TIMEOUT).await;
    assert!(!again.success && again.stderr.contains(&format!("already running (pid {pid}")), "{}", again.stderr);

    let status = run(&jobset(), &["status"], home, COMMAND_TIMEOUT).await;
    let line = status.ok().lines().find(|l| l.starts_with("default ")).unwrap_or_else(|| panic!("{}", status.stdout));
    let cells: Vec<&str> = line.split_whitespace().collect();
    let pid_text = pid.to_string();
    assert_eq!(cells[1..5], ["jobset", cells[2], pid_text.as_str(), "Ready"], "{line}");
    assert!(cells[2].starts_with("https://127.0.0.1:"), "{line}");

    let down = run(&jobset(), &["down"], home, DOWN_TIMEOUT).await;
    assert!(down.ok().contains(&format!("stopped (pid {pid})")), "{}", down.stdout);
    assert!(!data.join("jobset.pid").exists(), "the pid file is removed on a clean stop");
    assert!(!common::alive(pid), "pid {pid} still runs after `jobset down`");

    // Only our entries are gone; current-context pointed at ours, so it is unset, as kind does.
    let config = kubeconfig(home);
    for list in ["clusters", "users", "contexts"] {
        assert_eq!(names(&config, list), ["other"], "{list}");
    }
    assert_eq!(config["current-context"], "");
    assert_eq!(config["preferences"], serde_json::json!({}));
    assert_eq!(mode(&home.join(".kube/config")), 0o600);

    // The data stays for the next `jobset up`, and `status` says the cluster is stopped.
    assert!(data.join("kubeconfig").is_file() && data.join("jobset.log").is_file());
    let status = run(&jobset(), &["status"], home, COMMAND_TIMEOUT).await;
    assert!(status.ok().lines().any(|l| l.starts_with("default ") && l.contains(" Stopped ")), "{}", status.stdout);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread")]
async fn up_detach_that_cannot_start_reports_the_log_and_leaves_nothing_running() {
    let home = TempDir::new().unwrap();
    let home = home.path();
    // A port taken by another listener: the background server cannot bind it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data = home.join("data");
    let guard = Guard(data.clone());
    let args = ["up", "--detach", "--nodes", "0", "--port", &port, "--data-dir", data.to_str().unwrap()];
    let up = run(&jobset(), &args, home, UP_TIMEOUT).await;
    assert!(!up.success, "{}", up.stdout);
    assert!(up.stderr.contains("exited") && up.stderr.contains("is in use"), "{}", up.stderr);
    assert_eq!(guard.pid(), None, "no pid file is left behind");
    assert!(!home.join(".kube/config").exists(), "no context is merged for a cluster that did not start");
}
