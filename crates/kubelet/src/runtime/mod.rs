//! Container runtimes: what runs a pod's containers for the node agent.
//!
//! The agent decides *when* a container runs (its state machine, [`crate::pod`]); a [`Runtime`]
//! only starts a container, reports its exit, and kills it. [`simulated::SimulatedRuntime`] runs
//! nothing (behaviour comes from annotations and node rules); [`process::ProcessRuntime`] runs
//! containers as host processes.

pub mod process;
pub mod sandbox;
mod shim;
pub mod simulated;
pub mod volumes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::config::NodeConfig;

/// What role a container plays in its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    /// An init container that runs to completion before the next one.
    Init,
    /// An init container with `restartPolicy: Always`: runs beside the regular containers.
    Sidecar,
    /// A container of `spec.containers`.
    Regular,
}

/// Everything a runtime needs to start one run of one container.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub pod: Arc<Pod>,
    pub container: Container,
    pub kind: ContainerKind,
    /// How many times this container was restarted before (this run's `restartCount`).
    pub restart_count: u32,
    /// The node the pod runs on.
    pub node: Arc<NodeConfig>,
    /// How long a simulated container runs when nothing says otherwise.
    pub default_run_duration: Duration,
    /// The CRI log file of this run, when the agent keeps logs.
    pub log_path: Option<PathBuf>,
    /// The pod's IP (from [`Runtime::pod_ip`]), known before its first container starts.
    pub pod_ip: String,
    /// The ConfigMaps and Secrets the pod references, read when the pod was admitted.
    pub resources: Arc<PodResources>,
}

/// The ConfigMaps and Secrets a pod references (env, envFrom, volumes), by name; values decoded.
/// A name missing here was not found (or is optional and absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    pub config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// What a command run in a container ([`Runtime::exec`]) gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    /// stdout and stderr, interleaved, possibly truncated.
    pub output: Vec<u8>,
}

/// A runtime's name for a running container (`containerID` in the pod status).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(pub String);

impl std::fmt::Display for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a container run ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitStatus {
    pub exit_code: i32,
    /// `terminated.reason`; `None` lets the agent say `Completed` (code 0) or `Error`.
    pub reason: Option<String>,
    pub message: Option<String>,
    pub finished_at: jiff::Timestamp,
}

impl ExitStatus {
    pub fn code(exit_code: i32) -> ExitStatus {
        ExitStatus { exit_code, reason: None, message: None, finished_at: jiff::Timestamp::now() }
    }
}

/// A container that started.
pub struct Started {
    pub id: ContainerId,
    /// Whether the container counts as ready while it runs.
    pub ready: bool,
    /// Resolves when the container ends (on its own or after [`Runtime::kill`]). Dropping it
    /// abandons the container (the runtime cleans up).
    pub exit: BoxFuture<'static, ExitStatus>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started").field("id", &self.id).field("ready", &self.ready).finish_non_exhaustive()
    }
}

/// A container that outlived the agent that started it, handed to the next one
/// ([`Runtime::adopt`]).
pub struct Adopted {
    pub id: ContainerId,
    /// The container's name in its pod.
    pub container: String,
    /// The run's `restartCount`.
    pub restart_count: u32,
    pub started_at: jiff::Timestamp,
    /// Resolves when it ends; at once, with its real exit status, if it ended while no agent
    /// watched. Dropping it kills the container.
    pub exit: BoxFuture<'static, ExitStatus>,
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted")
            .field("id", &self.id)
            .field("container", &self.container)
            .field("restart_count", &self.restart_count)
            .finish_non_exhaustive()
    }
}

/// A container that could not start, and why ([`ErrorKind`]). The agent reports a
/// [`ErrorKind::Config`] error as Waiting `CreateContainerConfigError` and tries again; any other
/// as exit code 128, reason `StartError`, or, when the message ends in an OS error of the host's
/// such as `ENOSPC`, as Waiting `CreateContainerError` and tries again
/// ([`crate::pod::StartFailure::of`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub String, pub ErrorKind);

/// What kind of error a [`RuntimeError`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ErrorKind {
    /// The container's configuration could not be built from the pod and what it refers to
    /// (kubelet's `ErrCreateContainerConfig`: a missing ConfigMap or Secret, or key, an env source
    /// that cannot be resolved, `runAsNonRoot` violated). The message is kubelet's.
    Config,
    /// Anything else.
    #[default]
    Other,
}

impl RuntimeError {
    /// An error of [`ErrorKind::Other`].
    pub fn new(message: impl Into<String>) -> RuntimeError {
        RuntimeError(message.into(), ErrorKind::Other)
    }

    /// An error of [`ErrorKind::Config`].
    pub fn config(message: impl Into<String>) -> RuntimeError {
        RuntimeError(message.into(), ErrorKind::Config)
    }
}

/// Runs containers for a node agent. Shared by the agent's pod workers, possibly by many nodes.
pub trait Runtime: Send + Sync + 'static {
    /// Starts one run of a container.
    fn start(&self, req: StartRequest) -> BoxFuture<'static, Result<Started, RuntimeError>>;

    /// Asks a running container to stop within `grace` (SIGTERM, then SIGKILL). Returns at once;
    /// the container's exit future resolves when it has stopped. Unknown ids are ignored.
    fn kill(&self, id: &ContainerId, grace: Duration);

    /// Runs `argv` in a running container's environment and namespaces (exec probes and hooks),
    /// killing it after `timeout` (an error then).
    fn exec(
        &self,
        id: &ContainerId,
        argv: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, RuntimeError>>;

    /// Whether `httpGet` and `tcpSocket` probes and hooks can reach this runtime's containers at
    /// their pod IP. When not (simulated containers listen nowhere), they count as successful,
    /// unless [`Runtime::http_probe`] answers.
    fn reachable(&self) -> bool {
        false
    }

    /// Lets the runtime answer an `httpGet` probe (or hook) of container `id` itself, with the
    /// response's status code (`Err`: no response, e.g. nothing listens on `port`). `path` is the
    /// probe's path as written (with its query, if any), `port` is resolved. The answer may be
    /// held up to `wait` (a long poll: the probe's timeout) and must come within it.
    ///
    /// `None` (the default) leaves the probe to the prober: a real GET when the runtime is
    /// [`reachable`](Runtime::reachable), else success. The simulated runtime answers for the
    /// in-place restart agent's barrier endpoint.
    fn http_probe(
        &self,
        _id: &ContainerId,
        _path: &str,
        _port: u16,
        _wait: Duration,
    ) -> Option<BoxFuture<'static, Result<u16, String>>> {
        None
    }

    /// An IP for a new pod, unique among the pods of this runtime.
    fn pod_ip(&self) -> String {
        crate::next_pod_ip()
    }

    /// The containers of pod `uid` that outlived the previous agent (kept running by their
    /// supervisors), handed over once. Called when the agent takes the pod on after a start.
    fn adopt(&self, _uid: &str) -> Vec<Adopted> {
        Vec::new()
    }

    /// The agent of `node` has listed its pods (`uids`): containers kept from a previous agent
    /// for any other pod of that node (deleted meanwhile) are killed and forgotten.
    fn sweep(&self, _node: &str, _uids: &std::collections::HashSet<String>) {}

    /// The pod is gone from the node: release what the runtime keeps for it (sandbox
    /// directories). Its containers have been stopped before.
    fn remove_pod(&self, _uid: &str) {}
}

/// Where a container's log for one run lives (the layout the API server's `pods/log` reads).
pub fn log_path(log_dir: &Path, ns: &str, pod: &str, uid: &str, container: &str, restart: u32) -> PathBuf {
    log_dir.join(format!("{ns}_{pod}_{uid}")).join(container).join(format!("{restart}.log"))
}

/// Formats one CRI log line: `<RFC 3339 nano timestamp> <stream> F <text>\n`.
pub fn cri_line(ts: jiff::Timestamp, stream: &str, text: &str) -> String {
    format!("{} {stream} F {text}\n", ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
}

/// Appends lines to a CRI log file, creating its directory. Errors are logged, never fatal.
pub fn append_log(path: &Path, lines: &[String]) {
    use std::io::Write;
    let res = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        f.write_all(lines.concat().as_bytes())
    })();
    if let Err(e) = res {
        tracing::warn!(path = %path.display(), error = %e, "writing a container log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_layout_and_format() {
        let p = log_path(Path::new("/logs"), "ns", "p", "u1", "main", 2);
        assert_eq!(p, Path::new("/logs/ns_p_u1/main/2.log"));
        let ts: jiff::Timestamp = "2024-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(cri_line(ts, "stdout", "hi"), "2024-01-02T03:04:05.123456789Z stdout F hi\n");
    }
}
