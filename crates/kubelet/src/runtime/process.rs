//! The process runtime: each container runs as a host process (no image pulls, no isolation), so
//! a pod's commands really execute on the agent's machine.
//!
//! What a container runs, with Kubernetes' rules:
//! - `command` replaces the entrypoint; without one, the image's entry in
//!   [`ProcessConfig::images`] (image string → argv, matched exactly) is the entrypoint. `args`
//!   follow the entrypoint. With neither, [`Runtime::start`] fails with a message naming the
//!   container (the agent reports it as `StartError`).
//! - `$(VAR)` in `command`, `args` and env values expands to the container's variables (`$$` is a
//!   literal `$`, unknown references stay as written), as the kubelet does.
//! - The environment is not inherited: a container gets `PATH` and `HOME` of the agent,
//!   `HOSTNAME` (the pod's `spec.hostname`, else its name), `POD_IP` when the pod object carries
//!   `status.podIP`, then its `env`: literal values and downward API `fieldRef`s
//!   (`metadata.name|namespace|uid`, `metadata.labels['k']`, `metadata.annotations['k']`,
//!   `spec.nodeName`, `spec.serviceAccountName`, `status.podIP`, `status.podIPs`,
//!   `status.hostIP`; read from the pod object of the [`StartRequest`], so a field the agent has
//!   not written yet is empty). Other `valueFrom` kinds and `envFrom` fail the start with a
//!   clear message.
//! - `workingDir` is the process's working directory (default: the agent's).
//!
//! Each container is its own process group, created with a parent-death signal (SIGKILL) and
//! `kill_on_drop`. When the main process ends, what is left of its group is killed (the
//! container ends with its main process). [`Runtime::kill`] sends SIGTERM to the group, then
//! SIGKILL after the grace period. Dropping the exit future or the runtime kills the group.
//! stdout and stderr are appended, line by line, to the run's CRI log file.
//!
//! Processes are spawned from one dedicated thread per runtime: the parent-death signal fires
//! when the *thread* that forked the child ends, and tokio's blocking threads come and go.
//!
//! Not covered yet: probes, lifecycle hooks, `stopSignal`, resources (cgroups), volumes, user and
//! security contexts, partial (`P`) log lines, and descendants that leave the group (`setsid`)
//! or that survive an agent killed with SIGKILL (the parent-death signal reaches only the main
//! process).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::{ContainerId, ExecOutput, ExitStatus, Runtime, RuntimeError, StartRequest, Started, cri_line};

/// How long the log of a finished container may take to drain (a descendant that escaped its
/// group may hold the pipes open).
const LOG_DRAIN: Duration = Duration::from_secs(2);

/// Used when the agent has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Settings of a [`ProcessRuntime`].
#[derive(Debug, Clone, Default)]
pub struct ProcessConfig {
    /// The entrypoint (argv) of an image, for containers without `command`; keyed by the image
    /// string exactly as the pod spec writes it (`busybox:1.36`).
    pub images: BTreeMap<String, Vec<String>>,
}

/// What a container run executes: the outcome of the pod spec, the image mapping and the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<PathBuf>,
}

/// Expands `$(VAR)` references like the kubelet: `$$` is a literal `$`, a reference to an
/// unknown variable (or an unclosed one) stays as written.
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Resolves a downward API `fieldRef` path against the pod (empty when the pod lacks the field).
pub fn field_ref(pod: &Pod, node_name: &str, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let subscript = |prefix: &str| path.strip_prefix(prefix)?.strip_suffix("']");
    let value = if let Some(key) = subscript("metadata.labels['") {
        meta.labels.as_ref().and_then(|m| m.get(key)).cloned()
    } else if let Some(key) = subscript("metadata.annotations['") {
        meta.annotations.as_ref().and_then(|m| m.get(key)).cloned()
    } else {
        match path {
            "metadata.name" => meta.name.clone(),
            "metadata.namespace" => meta.namespace.clone(),
            "metadata.uid" => meta.uid.clone(),
            "spec.nodeName" => {
                Some(spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()).unwrap_or(node_name.into()))
            }
            "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
            "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
            "status.hostIP" => status.and_then(|s| s.host_ip.clone()),
            "status.podIPs" => status
                .and_then(|s| s.pod_ips.as_ref())
                .map(|ips| ips.iter().map(|ip| ip.ip.as_str()).collect::<Vec<_>>().join(",")),
            _ => return Err(format!("unsupported fieldRef fieldPath {path:?}")),
        }
    };
    Ok(value.unwrap_or_default())
}

fn env_value(pod: &Pod, node_name: &str, var: &EnvVar, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let Some(from) = &var.value_from else {
        return Ok(expand(var.value.as_deref().unwrap_or_default(), vars));
    };
    if let Some(f) = &from.field_ref {
        return field_ref(pod, node_name, &f.field_path);
    }
    let kind = if from.config_map_key_ref.is_some() {
        "configMapKeyRef"
    } else if from.secret_key_ref.is_some() {
        "secretKeyRef"
    } else if from.resource_field_ref.is_some() {
        "resourceFieldRef"
    } else {
        "this valueFrom source"
    };
    Err(format!("valueFrom.{kind} is not supported by the process runtime"))
}

/// Works out what a run executes. Pure, so the rules are tested without processes.
pub fn plan(req: &StartRequest, images: &BTreeMap<String, Vec<String>>) -> Result<Plan, RuntimeError> {
    let c = &req.container;
    let pod = &req.pod;
    let fail = |what: String| RuntimeError(format!("container {:?}: {what}", c.name));
    let image = c.image.as_deref().unwrap_or_default();
    let entrypoint = match (c.command.as_ref().filter(|v| !v.is_empty()), images.get(image).filter(|v| !v.is_empty())) {
        (Some(command), _) => command.clone(),
        (None, Some(mapped)) => mapped.clone(),
        (None, None) => {
            return Err(fail(format!(
                "no command is set and the image {image:?} is not mapped to a command in the process runtime"
            )));
        }
    };
    if c.env_from.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(fail("envFrom is not supported by the process runtime".into()));
    }

    let mut env = BTreeMap::new();
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into());
    env.insert("PATH".to_string(), path);
    if let Ok(home) = std::env::var("HOME") {
        env.insert("HOME".into(), home);
    }
    let hostname = pod.spec.as_ref().and_then(|s| s.hostname.clone()).or_else(|| pod.metadata.name.clone());
    env.insert("HOSTNAME".into(), hostname.unwrap_or_default());
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()) {
        env.insert("POD_IP".into(), ip);
    }
    for var in c.env.iter().flatten() {
        let value = env_value(pod, &req.node.name, var, &env).map_err(|e| fail(format!("env {:?}: {e}", var.name)))?;
        env.insert(var.name.clone(), value);
    }

    let argv = entrypoint.iter().chain(c.args.iter().flatten()).map(|a| expand(a, &env)).collect();
    let working_dir = c.working_dir.as_ref().filter(|d| !d.is_empty()).map(PathBuf::from);
    Ok(Plan { argv, env, working_dir })
}

/// A running container, as [`Runtime::kill`] reaches it.
struct Entry {
    pgid: Pid,
    kills: mpsc::UnboundedSender<Duration>,
    /// What the container runs with, for commands run in it.
    plan: Arc<Plan>,
}

type Running = Arc<Mutex<HashMap<ContainerId, Entry>>>;

/// Removes a container from the running table when its supervisor ends.
struct Forget(Running, ContainerId);

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&self.1);
        }
    }
}

/// A spawn request for the spawner thread.
struct Spawn {
    cmd: tokio::process::Command,
    reply: oneshot::Sender<std::io::Result<tokio::process::Child>>,
}

/// Runs containers as host processes (see the module docs).
pub struct ProcessRuntime {
    config: ProcessConfig,
    running: Running,
    spawner: Mutex<Option<std::sync::mpsc::Sender<Spawn>>>,
    next_id: AtomicU64,
}

impl ProcessRuntime {
    pub fn new(config: ProcessConfig) -> ProcessRuntime {
        ProcessRuntime { config, running: Arc::default(), spawner: Mutex::new(None), next_id: AtomicU64::new(1) }
    }

    /// How many containers are running.
    pub fn running(&self) -> usize {
        self.running.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// The pid (and process group id) of a running container's main process.
    pub fn pid(&self, id: &ContainerId) -> Option<u32> {
        let m = self.running.lock().ok()?;
        m.get(id).map(|e| e.pgid.as_raw() as u32)
    }

    /// The spawner thread's queue, started on first use inside the caller's tokio runtime.
    fn spawner(&self) -> Result<std::sync::mpsc::Sender<Spawn>, RuntimeError> {
        let mut guard = self.spawner.lock().map_err(|_| RuntimeError("process runtime: lock poisoned".into()))?;
        if let Some(tx) = guard.as_ref() {
            return Ok(tx.clone());
        }
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| RuntimeError("process runtime: start called outside a tokio runtime".into()))?;
        let (tx, rx) = std::sync::mpsc::channel::<Spawn>();
        std::thread::Builder::new()
            .name("process-runtime".into())
            .spawn(move || {
                // Children are reaped by the tokio runtime the agent runs in.
                let _enter = handle.enter();
                for mut job in rx {
                    let _ = job.reply.send(job.cmd.spawn());
                }
            })
            .map_err(|e| RuntimeError(format!("process runtime: starting the spawner thread: {e}")))?;
        *guard = Some(tx.clone());
        Ok(tx)
    }
}

impl Drop for ProcessRuntime {
    fn drop(&mut self) {
        if let Ok(m) = self.running.lock() {
            for e in m.values() {
                signal_group(e.pgid, Signal::SIGKILL);
            }
        }
    }
}

fn signal_group(pgid: Pid, sig: Signal) {
    if let Err(e) = killpg(pgid, sig)
        && e != nix::errno::Errno::ESRCH
    {
        tracing::warn!(pgid = pgid.as_raw(), signal = %sig, error = %e, "signalling a container");
    }
}

fn command(plan: &Plan, logs: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&plan.argv[0]);
    cmd.args(&plan.argv[1..])
        .env_clear()
        .envs(&plan.env)
        .stdin(Stdio::null())
        .stdout(if logs { Stdio::piped() } else { Stdio::null() })
        .stderr(if logs { Stdio::piped() } else { Stdio::null() })
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = &plan.working_dir {
        cmd.current_dir(dir);
    }
    let agent = Pid::this();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl(2) and getppid(2) are plain system calls, and the error paths
    // build `io::Error`s from an errno without allocating.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The agent may have died before the signal was armed.
            if nix::unistd::getppid() != agent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
    cmd
}

/// Forwards the lines of one stream to the log writer.
async fn read_lines(stream: impl AsyncRead + Unpin, name: &'static str, out: mpsc::UnboundedSender<String>) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                let line = cri_line(jiff::Timestamp::now(), name, &String::from_utf8_lossy(&buf));
                if out.send(line).is_err() {
                    return;
                }
            }
        }
    }
}

/// Appends the lines of both streams to the log file, in the order they were read.
async fn write_log(path: PathBuf, mut lines: mpsc::UnboundedReceiver<String>) {
    let open = async {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        tokio::fs::OpenOptions::new().create(true).append(true).open(&path).await
    };
    let mut file = match open.await {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "opening a container log");
            None
        }
    };
    while let Some(line) = lines.recv().await {
        let Some(f) = file.as_mut() else { continue };
        // A tokio file completes writes in the background: flush whenever nothing else is
        // queued, so readers of the log (and the exit report) see every line.
        let written = match f.write_all(line.as_bytes()).await {
            Ok(()) if lines.is_empty() => f.flush().await,
            r => r,
        };
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "writing a container log");
            file = None;
        }
    }
    if let Some(mut f) = file {
        let _ = f.flush().await;
    }
}

fn exit_status(status: std::io::Result<std::process::ExitStatus>, finished_at: jiff::Timestamp) -> ExitStatus {
    match status {
        Ok(s) => {
            let exit_code = s.code().or_else(|| s.signal().map(|sig| 128 + sig)).unwrap_or(128);
            ExitStatus { exit_code, reason: None, message: None, finished_at }
        }
        Err(e) => ExitStatus {
            exit_code: 128,
            reason: Some("Unknown".into()),
            message: Some(format!("waiting for the process: {e}")),
            finished_at,
        },
    }
}

/// Owns one container's process until it ends: applies kills, reaps it, kills what is left of
/// its group, lets the log drain and reports the exit.
async fn supervise(
    mut child: tokio::process::Child,
    pgid: Pid,
    mut kills: mpsc::UnboundedReceiver<Duration>,
    mut exit_tx: oneshot::Sender<ExitStatus>,
    log: Option<tokio::task::JoinHandle<()>>,
    forget: Forget,
) {
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut abandoned = false;
    let status = loop {
        let sigkill_at = deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            s = child.wait() => break s,
            Some(grace) = kills.recv() => {
                signal_group(pgid, Signal::SIGTERM);
                let at = tokio::time::Instant::now() + grace;
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
            _ = tokio::time::sleep_until(sigkill_at), if deadline.is_some() => {
                signal_group(pgid, Signal::SIGKILL);
                deadline = None;
            }
            _ = exit_tx.closed(), if !abandoned => {
                abandoned = true;
                signal_group(pgid, Signal::SIGKILL);
            }
        }
    };
    let finished_at = jiff::Timestamp::now();
    // The container ends with its main process: the rest of its group goes too. A group id stays
    // reserved while any member lives; an empty group's id could only be reused by a new group
    // after the kernel's cyclic pid allocation wrapped around, between the reap and this call.
    signal_group(pgid, Signal::SIGKILL);
    if let Some(log) = log
        && tokio::time::timeout(LOG_DRAIN, log).await.is_err()
    {
        tracing::warn!(pgid = pgid.as_raw(), "a container's log did not drain after it exited");
    }
    drop(forget);
    let _ = exit_tx.send(exit_status(status, finished_at));
}

impl Runtime for ProcessRuntime {
    fn start(&self, req: StartRequest) -> BoxFuture<'static, Result<Started, RuntimeError>> {
        let ready = |r| futures::future::ready(r).boxed();
        let plan = match plan(&req, &self.config.images) {
            Ok(p) => p,
            Err(e) => return ready(Err(e)),
        };
        let spawner = match self.spawner() {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let running = self.running.clone();
        let name = req.container.name.clone();
        let log_path = req.log_path.clone();
        async move {
            let (reply, spawned) = oneshot::channel();
            let cmd = command(&plan, log_path.is_some());
            let stopped = || RuntimeError("process runtime: the spawner thread is gone".into());
            spawner.send(Spawn { cmd, reply }).map_err(|_| stopped())?;
            let mut child = spawned
                .await
                .map_err(|_| stopped())?
                .map_err(|e| RuntimeError(format!("container {name:?}: starting {:?}: {e}", plan.argv[0])))?;
            let pid = child.id().expect("a child that was not waited for has a pid");
            let pgid = Pid::from_raw(pid as i32);
            let log = log_path.map(|path| {
                let (tx, rx) = mpsc::unbounded_channel();
                if let Some(out) = child.stdout.take() {
                    tokio::spawn(read_lines(out, "stdout", tx.clone()));
                }
                if let Some(err) = child.stderr.take() {
                    tokio::spawn(read_lines(err, "stderr", tx));
                }
                tokio::spawn(write_log(path, rx))
            });
            let id = ContainerId(format!("process://{pid}-{n}"));
            let (kill_tx, kill_rx) = mpsc::unbounded_channel();
            let entry = Entry { pgid, kills: kill_tx, plan: Arc::new(plan) };
            running.lock().expect("running table lock").insert(id.clone(), entry);
            let (exit_tx, exit_rx) = oneshot::channel();
            tokio::spawn(supervise(child, pgid, kill_rx, exit_tx, log, Forget(running, id.clone())));
            let exit = async move {
                exit_rx.await.unwrap_or_else(|_| ExitStatus {
                    exit_code: 137,
                    reason: Some("Unknown".into()),
                    message: Some("the process runtime lost the container".into()),
                    finished_at: jiff::Timestamp::now(),
                })
            }
            .boxed();
            Ok(Started { id, ready: true, exit })
        }
        .boxed()
    }

    fn kill(&self, id: &ContainerId, grace: Duration) {
        let m = self.running.lock();
        if let Some(e) = m.ok().as_ref().and_then(|m| m.get(id)) {
            let _ = e.kills.send(grace);
        }
    }

    fn exec(
        &self,
        id: &ContainerId,
        argv: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, RuntimeError>> {
        let ready = |r| futures::future::ready(r).boxed();
        let container = self.running.lock().ok().and_then(|m| m.get(id).map(|e| e.plan.clone()));
        let Some(container) = container else {
            return ready(Err(RuntimeError(format!("container {id} is not running"))));
        };
        if argv.is_empty() {
            return ready(Err(RuntimeError("exec: no command given".into())));
        }
        let spawner = match self.spawner() {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        async move {
            let plan = Plan { argv, env: container.env.clone(), working_dir: container.working_dir.clone() };
            let mut cmd = command(&plan, true);
            cmd.stderr(Stdio::piped());
            let (reply, spawned) = oneshot::channel();
            let stopped = || RuntimeError("process runtime: the spawner thread is gone".into());
            spawner.send(Spawn { cmd, reply }).map_err(|_| stopped())?;
            let child = spawned
                .await
                .map_err(|_| stopped())?
                .map_err(|e| RuntimeError(format!("exec {:?}: {e}", plan.argv[0])))?;
            let pgid = child.id().map(|p| Pid::from_raw(p as i32));
            match tokio::time::timeout(timeout, child.wait_with_output()).await {
                Ok(Ok(out)) => {
                    let mut output = out.stdout;
                    output.extend_from_slice(&out.stderr);
                    Ok(ExecOutput { exit_code: exit_status(Ok(out.status), jiff::Timestamp::now()).exit_code, output })
                }
                Ok(Err(e)) => Err(RuntimeError(format!("exec {:?}: {e}", plan.argv[0]))),
                Err(_) => {
                    if let Some(pgid) = pgid {
                        signal_group(pgid, Signal::SIGKILL);
                    }
                    Err(RuntimeError(format!("exec {:?}: timed out after {timeout:?}", plan.argv[0])))
                }
            }
        }
        .boxed()
    }

    fn reachable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Container;
    use serde_json::json;

    use super::*;
    use crate::config::NodeConfig;
    use crate::runtime::ContainerKind;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn expansion_follows_the_kubelet() {
        let v = vars(&[("A", "1"), ("IDX", "7")]);
        for (input, want) in [
            ("plain", "plain"),
            ("$(A)", "1"),
            ("x-$(IDX)-$(A)", "x-7-1"),
            ("$$(A)", "$(A)"),
            ("$(MISSING)", "$(MISSING)"),
            ("$(A", "$(A"),
            ("cost $5", "cost $5"),
            ("$$", "$"),
            ("end$", "end$"),
        ] {
            assert_eq!(expand(input, &v), want, "{input}");
        }
    }

    fn request(pod: serde_json::Value, container: serde_json::Value) -> StartRequest {
        StartRequest {
            pod: Arc::new(serde_json::from_value(pod).unwrap()),
            container: serde_json::from_value::<Container>(container).unwrap(),
            kind: ContainerKind::Regular,
            restart_count: 0,
            node: Arc::new(NodeConfig::new("n1")),
            default_run_duration: Duration::from_secs(1),
            log_path: None,
            pod_ip: "10.0.0.5".into(),
            resources: Arc::default(),
        }
    }

    #[test]
    fn command_args_and_image_mapping() {
        let images: BTreeMap<String, Vec<String>> =
            [("busybox".to_string(), vec!["sh".to_string(), "-c".to_string()])].into();
        let pod = json!({"metadata": {"name": "p"}});
        let argv = |c| plan(&request(pod.clone(), c), &images).map(|p| p.argv);
        let cmd = json!({"name": "m", "image": "busybox", "command": ["echo"], "args": ["a", "$(HOSTNAME)"]});
        assert_eq!(argv(cmd).unwrap(), ["echo", "a", "p"]);
        assert_eq!(argv(json!({"name": "m", "image": "busybox", "args": ["exit 2"]})).unwrap(), ["sh", "-c", "exit 2"]);
        let err = argv(json!({"name": "main", "image": "alpine", "args": ["x"]})).unwrap_err();
        assert_eq!(
            err.0,
            "container \"main\": no command is set and the image \"alpine\" is not mapped to a command in the process runtime"
        );
    }

    #[test]
    fn env_literals_field_refs_and_defaults() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}, "annotations": {"a/b": "c"}},
            "spec": {"containers": []},
            "status": {"podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}]}
        });
        let field = |path: &str| json!({"name": path.replace(['.', '[', ']', '\'', '/'], "_"), "valueFrom": {"fieldRef": {"fieldPath": path}}});
        let c = json!({"name": "m", "command": ["true"], "workingDir": "/tmp", "env": [
            {"name": "LIT", "value": "v-$(HOSTNAME)"},
            field("metadata.name"), field("metadata.namespace"), field("metadata.uid"),
            field("metadata.labels['app']"), field("metadata.labels['none']"), field("metadata.annotations['a/b']"),
            field("spec.nodeName"), field("status.podIP"), field("status.podIPs"),
        ]});
        let p = plan(&request(pod.clone(), c), &BTreeMap::new()).unwrap();
        let e = |k: &str| p.env.get(k).map(String::as_str);
        assert_eq!(e("LIT"), Some("v-p"));
        assert_eq!(e("metadata_name"), Some("p"));
        assert_eq!(e("metadata_namespace"), Some("ns"));
        assert_eq!(e("metadata_uid"), Some("u1"));
        assert_eq!(e("metadata_labels__app__"), Some("x"));
        assert_eq!(e("metadata_labels__none__"), Some(""));
        assert_eq!(e("metadata_annotations__a_b__"), Some("c"));
        assert_eq!(e("spec_nodeName"), Some("n1"));
        assert_eq!(e("status_podIP"), Some("10.0.0.5"));
        assert_eq!(e("status_podIPs"), Some("10.0.0.5"));
        assert_eq!((e("HOSTNAME"), e("POD_IP")), (Some("p"), Some("10.0.0.5")));
        assert!(e("PATH").is_some());
        assert_eq!(p.working_dir, Some(PathBuf::from("/tmp")));

        for (c, want) in [
            (json!({"name": "m", "command": ["true"], "env": [field("spec.nope")]}), "unsupported fieldRef"),
            (
                json!({"name": "m", "command": ["true"], "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}),
                "container \"m\": env \"S\": valueFrom.secretKeyRef is not supported",
            ),
            (json!({"name": "m", "command": ["true"], "envFrom": [{"configMapRef": {"name": "c"}}]}), "envFrom"),
        ] {
            let err = plan(&request(pod.clone(), c), &BTreeMap::new()).unwrap_err();
            assert!(err.0.contains(want), "{err}");
        }
    }
}
