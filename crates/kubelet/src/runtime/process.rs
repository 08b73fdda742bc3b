//! The process runtime: each container runs as a host process (no image pulls), so a pod's
//! commands really execute on the agent's machine, isolated where the kernel allows it.
//!
//! What a container runs, with Kubernetes' rules:
//! - `command` replaces the entrypoint; without one, the image's entry in
//!   [`ProcessConfig::images`] (image string → argv: the image exactly as written, else the
//!   image without its `:tag` and `@digest`) is the entrypoint. `args` follow the entrypoint.
//!   With neither, [`Runtime::start`] fails with a message naming the container (the agent
//!   reports it as `StartError`).
//! - `$(VAR)` in `command`, `args`, env values and `subPathExpr` expands to the container's
//!   variables (`$$` is a literal `$`, unknown references stay as written), as the kubelet does.
//! - The environment is not inherited: a container gets `PATH` and `HOME` of the agent,
//!   `HOSTNAME` (the pod's `spec.hostname`, else its name), `POD_IP` (the pod's address, see
//!   below), then its `envFrom` (ConfigMaps and Secrets, with `prefix`), then its `env`: literal
//!   values, `configMapKeyRef`/`secretKeyRef` (from the pod's [`PodResources`](super::PodResources);
//!   a missing object or key fails the start unless `optional`) and downward API `fieldRef`s
//!   (`metadata.name|namespace|uid`, `metadata.labels['k']`, `metadata.annotations['k']`,
//!   `spec.nodeName`, `spec.serviceAccountName`, `status.podIP(s)` (the pod's address),
//!   `status.hostIP`). `resourceFieldRef` fails the start.
//! - `workingDir` is the process's working directory (created when missing; default: the agent's).
//!
//! # Isolation
//!
//! With [`ProcessConfig::isolation`] (the default) and where the kernel permits it (root, or
//! enough capabilities; [`ProcessRuntime::isolated`] tells), each container process gets:
//! - its own mount namespace (`/` made private), in which the pod's sandbox directory
//!   `<state_dir>/pods/<uid>/tmp` is bind-mounted on `/tmp` (shared by the pod's containers,
//!   different per pod), the pod's volumes at their `mountPath`s (see [`super::volumes`];
//!   `readOnly` and `subPath` honoured; missing mount points are created, on the host unless
//!   they are under `/tmp`) and, with [`ProcessConfig::hosts_dir`], `<hosts_dir>/<namespace>`
//!   (written by [`crate::hosts::run`]) read-only on `/etc/hosts`;
//! - its own UTS namespace with the pod's hostname;
//! - its own PID namespace, so that nothing it started outlives it (see [`super::sandbox`] for the
//!   process tree). SIGTERM still reaches the command (exit code 143, `trap` handlers run).
//!
//! Pods do not reach each other's files (nor the cluster's) through the host's filesystem:
//! - once the sources of its own mounts are open, the container's mount namespace covers the
//!   state directory (every pod's sandbox, `/tmp`, emptyDirs, the run records) and
//!   [`ProcessConfig::hidden`] (`jobset up`'s data directory: the API server's database, its
//!   keys, the logs) with an empty read-only tmpfs: another pod finds nothing there. Paths
//!   under `/tmp` need no cover (the pod's own `/tmp` replaces the host's). A container without
//!   `workingDir` whose agent works in a hidden directory starts in `/`.
//! - secret and projected volumes (and the service account token) never touch the host's disk:
//!   their bytes go to the container's supervisor on its stdin, and the container's child
//!   mounts a tmpfs in its own mount namespace (staged on the state directory, then covered),
//!   writes the files there with plain system calls and binds them at their `mountPath`s. Each
//!   container run has its own copy, written when it starts (the runtime never rewrites a
//!   running container's volumes: a restarted container gets the current Secret and a fresh
//!   token); the tmpfs lives as long as the container's processes, so it outlives the agent
//!   with them, and `exec` (joining the container's mount namespace) sees it.
//! - `securityContext`: `runAsUser`, `runAsGroup`, `supplementalGroups` and `fsGroup` (pod and
//!   container, the container's fields winning; see [`security`]) become the command's user and
//!   groups (`setgroups`, `setgid`, `setuid` just before `exec`; only as root, else ignored with
//!   a warning); commands run in the container ([`Runtime::exec`], `jobset exec`) take its user
//!   and groups too. `fsGroup` owns the emptyDir, configMap, secret, projected and downwardAPI
//!   volumes (see [`super::volumes`]). `runAsNonRoot` with a container that would run as root
//!   fails its start with kubelet's message, a config error ([`super::ErrorKind::Config`]: the
//!   agent shows the container Waiting `CreateContainerConfigError` and tries again, as for a
//!   missing ConfigMap or Secret key). `readOnlyRootFilesystem` remounts `/` (this
//!   mount only, in the container's namespace) and the pod's `/tmp` read-only; writable volumes
//!   stay writable.
//!
//! - with a PID namespace, the container's `/proc` is a procfs of that namespace: it shows the
//!   container's processes only, so `/proc/<pid>/root` does not lead into another pod.
//! - containerd's default masked paths (`/proc/kcore`, `/proc/keys`, `/sys/firmware`...:
//!   [`sandbox::MASKED_PATHS`]) are covered (`/dev/null` on a file, an empty read-only tmpfs on
//!   a directory) and its read-only paths (`/proc/sys`, `/proc/sysrq-trigger`...:
//!   [`sandbox::READ_ONLY_PATHS`]) bound read-only, as runc does; not for a `privileged`
//!   container nor with `procMount: Unmasked`.
//! - as root, the runtime drops the capabilities a container does not get (see [`capabilities`]):
//!   containerd's default set, changed by `securityContext.capabilities` `add`/`drop`, all with
//!   `privileged: true`. Without CAP_SYS_ADMIN a root container cannot unmount the cover or its
//!   `/proc`. They leave the bounding set (no program gains them, even setuid) and, for root,
//!   the effective and permitted sets; a `runAsUser` other than 0 has none (no ambient ones, as
//!   with containerd). `allowPrivilegeEscalation: false` sets `no_new_privs`. A command run in
//!   the container ([`Runtime::exec`]) joins its PID namespace too and keeps the caller's
//!   capabilities (the in-place restart examples `mount` a tmpfs through `jobset exec`).
//!
//! What this does not stop: a `privileged` container (or one given CAP_SYS_ADMIN) can unmount
//! the covers and the masks.
//!
//! Without permission the runtime warns once and runs containers as plain host processes: no
//! private `/tmp`, no volumes (they are still checked, then left out), the host's hostname, and
//! descendants that leave the container's process group may survive it.
//!
//! # Networking
//!
//! Pods share the host's network stack. Each pod gets its own loopback address
//! ([`Runtime::pod_ip`]: in 127.1.0.1-127.254.255.254, from a base spread by the process id), exported as `POD_IP`: **servers must bind to
//! `$POD_IP`** (not 0.0.0.0, and not a fixed port on 127.0.0.1) for two pods to serve the same
//! port, and clients reach other pods through the names in `/etc/hosts`.
//!
//! # Processes, signals and logs
//!
//! Each container runs under a supervisor of its own ([`super::shim`]: this executable run again,
//! spawned with `posix_spawn`, so that nothing copies the agent's memory). The supervisor forks
//! the container (its process tree in [`super::sandbox`]), holds its stdout and stderr, which it
//! appends line by line to the run's CRI log file (rotated to `<n>.log.<timestamp>` past
//! [`ProcessConfig::log_max_bytes`]), and writes its exit status to
//! `<state_dir>/containers/<pod uid>/<n>.exit` when it ends. The agent records each run beside it
//! (`<n>.json`: pids, the supervisor's start time, what the container runs) and follows the
//! supervisor until it exits.
//!
//! Each container is its own process group (its id is the intermediate process's pid). When the
//! main process ends, what is left of the container is killed. [`Runtime::kill`] sends SIGTERM
//! to the group, then SIGKILL after the grace period. Dropping the exit future or the runtime
//! kills the group; so does a pod's removal.
//!
//! Without [`ProcessConfig::outlive_agent`] the supervisor has a parent-death signal (SIGKILL),
//! so containers die with the agent. With it, they outlive a `kill -9` of the agent, and a new
//! runtime on the same state directory finds them: a supervisor still running (checked by pid
//! and start time, then followed through a pidfd) is adopted with its container
//! ([`Runtime::adopt`]); a container that ended meanwhile reports the exit status its supervisor
//! wrote; one whose supervisor was killed reports exit code 137. Containers of pods that are no
//! longer on the node are killed ([`Runtime::sweep`]).
//!
//! The container ID is `process://<pid>-<n>`: `<pid>` is the host pid of the process running
//! the container's command (the one whose namespaces [`Runtime::exec`] and
//! [`sandbox::exec_command`] join), `<n>` numbers the runs of the state directory. A command run
//! in a container joins its mount, UTS and PID namespaces, with the container's environment and
//! working directory (it dies with the container's PID namespace).
//!
//! Processes are spawned from one dedicated thread per runtime: the parent-death signal fires
//! when the *thread* that spawned the child ends, and tokio's blocking threads come and go.
//!
//! Not covered yet: `stopSignal`, resources (cgroups), seccomp and AppArmor profiles, user
//! namespaces, network isolation, partial (`P`) log lines.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use jobset_api::jobset::agent::image_repository;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::sandbox::{self, Bind, BindSource, Identity, MemoryFile, MemoryVolume, Namespaces, SandboxPlan};
use super::shim::{self, ContainerRecord, LogSpec, RunRecord, SHIM_ENV, ShimReport, ShimSpec, container_id};
use super::volumes::{self, Dirs, Mount, Prepare, VolumePlan, owned_mode};
use super::{
    Adopted, ContainerId, ExecOutput, ExitStatus, PodResources, Runtime, RuntimeError, StartRequest, Started, cri_line,
};

/// How long the log of a finished container may take to drain (a descendant that escaped its
/// group may hold the pipes open).
pub(super) const LOG_DRAIN: Duration = Duration::from_secs(2);

/// Used when the agent has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Settings of a [`ProcessRuntime`].
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// The entrypoint (argv) of an image, for containers without `command`; keyed by the image
    /// string as the pod spec writes it (`busybox:1.36`), or by the image without tag and digest
    /// (`busybox`: any tag), which is used when there is no exact entry.
    pub images: BTreeMap<String, Vec<String>>,
    /// Where pods' sandboxes (`<state_dir>/pods/<uid>/`: `/tmp`, emptyDir, configMap and secret
    /// volumes; removed with the pod) and claims' directories (`<state_dir>/pvc/<ns>/<claim>/`;
    /// kept) live. `None`: a temporary directory owned by the runtime, removed when it is dropped.
    pub state_dir: Option<PathBuf>,
    /// Use mount, UTS and PID namespaces where the kernel allows it (default `true`). `false`
    /// runs containers as plain host processes (no private `/tmp`, no volumes, no PID namespace).
    pub isolation: bool,
    /// Per-namespace hosts files (`<hosts_dir>/<namespace>`, kept up to date by
    /// [`crate::hosts::run`]), bind-mounted on each isolated container's `/etc/hosts`. `None`:
    /// containers see the host's `/etc/hosts`.
    pub hosts_dir: Option<PathBuf>,
    /// A container's log file is rotated once it exceeds this size (default 10 MiB; 0: never).
    pub log_max_bytes: u64,
    /// How many rotated log files (`<n>.log.<timestamp>`) are kept per run (default 5).
    pub log_max_files: usize,
    /// An API identity for pods, as Kubernetes gives them: `token`, `ca.crt` and `namespace`
    /// read-only at [`SERVICE_ACCOUNT_DIR`] (isolated containers only) and
    /// `KUBERNETES_SERVICE_HOST`/`_PORT`, unless the pod sets `automountServiceAccountToken:
    /// false` or mounts something there itself. `None`: pods get no identity.
    pub service_account: Option<ServiceAccountSource>,
    /// Containers outlive the agent (default `false`): a `kill -9` or an upgrade of the agent
    /// leaves them running under their supervisors ([`super::shim`]), and a runtime created on
    /// the same [`state_dir`](ProcessConfig::state_dir) adopts them ([`Runtime::adopt`]),
    /// including the exit status of those that ended meanwhile. For an agent whose API state
    /// survives it (`jobset up --data-dir`). Otherwise containers die with the agent.
    pub outlive_agent: bool,
    /// Host directories isolated containers must not see, besides the state directory (always
    /// hidden): each is covered by an empty read-only tmpfs in the container's mount namespace.
    /// `jobset up` hides its whole data directory (the API server's database with every
    /// Secret, its keys, the logs).
    pub hidden: Vec<PathBuf>,
}

/// Where Kubernetes mounts a pod's service-account credentials (what in-cluster clients read).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The API server pods reach and the tokens bound to them.
#[derive(Clone)]
pub struct ServiceAccountSource {
    pub host: String,
    pub port: u16,
    /// PEM of the CA the API server's certificate chains to.
    pub ca_pem: String,
    /// Issues a token bound to the pod.
    pub token: std::sync::Arc<dyn Fn(&Pod) -> String + Send + Sync>,
}

impl std::fmt::Debug for ServiceAccountSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccountSource({}:{})", self.host, self.port)
    }
}

/// What gives a container its pod's API identity.
#[derive(Debug)]
pub struct ServiceAccountPlan {
    pub volume: VolumePlan,
    pub mount: Mount,
    pub env: [(String, String); 2],
}

/// The volume, mount and environment that give a container its pod's API identity, if it gets one.
pub fn service_account_plan(
    req: &StartRequest,
    sa: &ServiceAccountSource,
    sandbox: &Path,
) -> Option<ServiceAccountPlan> {
    let spec = req.pod.spec.as_ref();
    let own_mount =
        req.container.volume_mounts.iter().flatten().any(|m| m.mount_path.trim_end_matches('/') == SERVICE_ACCOUNT_DIR);
    if spec.and_then(|s| s.automount_service_account_token) == Some(false) || own_mount {
        return None;
    }
    let namespace = req.pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let file = |path: &str, data: Vec<u8>| volumes::VolumeFile { path: path.into(), data, mode: 0o644 };
    let source = sandbox.join("volumes").join("kube-api-access");
    let volume = VolumePlan {
        name: "kube-api-access".into(),
        source: source.clone(),
        // On a tmpfs of the container's only, as kubelet's projected kube-api-access volume.
        prepare: volumes::Prepare::Memory(vec![
            file("token", (sa.token)(&req.pod).into_bytes()),
            file("ca.crt", sa.ca_pem.clone().into_bytes()),
            file("namespace", namespace.into_bytes()),
        ]),
        read_only: true,
    };
    let mount = Mount {
        volume: volume.name.clone(),
        source,
        target: PathBuf::from(SERVICE_ACCOUNT_DIR),
        read_only: true,
        sub_path: None,
    };
    let env =
        [("KUBERNETES_SERVICE_HOST".into(), sa.host.clone()), ("KUBERNETES_SERVICE_PORT".into(), sa.port.to_string())];
    Some(ServiceAccountPlan { volume, mount, env })
}

impl Default for ProcessConfig {
    fn default() -> ProcessConfig {
        ProcessConfig {
            images: BTreeMap::new(),
            state_dir: None,
            isolation: true,
            hosts_dir: None,
            log_max_bytes: 10 << 20,
            log_max_files: 5,
            service_account: None,
            outlive_agent: false,
            hidden: Vec::new(),
        }
    }
}

/// What a container run executes: the outcome of the pod spec, the image mapping and the pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// What env values and downward API volumes are read from.
struct Sources<'a> {
    pod: &'a Pod,
    node: &'a str,
    /// The pod's address ([`StartRequest::pod_ip`]): wins over `status.podIP`, which the agent
    /// may not have written yet.
    pod_ip: &'a str,
    resources: &'a PodResources,
}

impl Sources<'_> {
    fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    fn field(&self, path: &str) -> Result<String, String> {
        match path {
            "status.podIP" | "status.podIPs" if !self.pod_ip.is_empty() => Ok(self.pod_ip.to_string()),
            _ => field_ref(self.pod, self.node, path),
        }
    }

    /// A key of a ConfigMap (`secret` false) or Secret; `None` when optional and missing.
    fn key(&self, secret: bool, name: &str, key: &str, optional: bool) -> Result<Option<String>, String> {
        let (kind, objects) =
            if secret { ("Secret", &self.resources.secrets) } else { ("ConfigMap", &self.resources.config_maps) };
        match objects.get(name).map(|data| data.get(key)) {
            Some(Some(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            _ if optional => Ok(None),
            None => Err(format!("{} {name:?} not found", kind.to_lowercase())),
            Some(None) => Err(format!("couldn't find key {key} in {kind} {}/{name}", self.namespace())),
        }
    }

    fn env_value(&self, var: &EnvVar, vars: &BTreeMap<String, String>) -> Result<Option<String>, String> {
        let Some(from) = &var.value_from else {
            return Ok(Some(expand(var.value.as_deref().unwrap_or_default(), vars)));
        };
        if let Some(f) = &from.field_ref {
            return self.field(&f.field_path).map(Some);
        }
        if let Some(r) = &from.config_map_key_ref {
            return self.key(false, &r.name, &r.key, r.optional == Some(true));
        }
        if let Some(r) = &from.secret_key_ref {
            return self.key(true, &r.name, &r.key, r.optional == Some(true));
        }
        let kind = if from.resource_field_ref.is_some() { "resourceFieldRef" } else { "this valueFrom source" };
        Err(format!("valueFrom.{kind} is not supported by the process runtime"))
    }
}

/// An environment variable name the process runtime passes on (what `envFrom` may bring in).
fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// Works out what a run executes. Pure, so the rules are tested without processes.
pub fn plan(req: &StartRequest, images: &BTreeMap<String, Vec<String>>) -> Result<Plan, RuntimeError> {
    let c = &req.container;
    let fail = |what: String| RuntimeError::new(format!("container {:?}: {what}", c.name));
    let image = c.image.as_deref().unwrap_or_default();
    let mapped = |key: &str| images.get(key).filter(|v| !v.is_empty());
    let mapped = mapped(image).or_else(|| mapped(image_repository(image)));
    let entrypoint = match (c.command.as_ref().filter(|v| !v.is_empty()), mapped) {
        (Some(command), _) => command.clone(),
        (None, Some(mapped)) => mapped.clone(),
        (None, None) => {
            return Err(fail(format!(
                "no command is set and the image {image:?} is not mapped to a command in the process runtime"
            )));
        }
    };
    let env = container_env(req)?;

    let argv = entrypoint.iter().chain(c.args.iter().flatten()).map(|a| expand(a, &env)).collect();
    // Without a workingDir the agent's own directory is used, unless the pod's private /tmp
    // would hide it: then `/`, as most images' WORKDIR.
    let working_dir = c
        .working_dir
        .as_ref()
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok().filter(|d| d.starts_with("/tmp")).map(|_| PathBuf::from("/")));
    Ok(Plan { argv, env, working_dir })
}

/// The environment of a run of `req`'s container, as a kubelet builds it: `PATH`, `HOME`,
/// `HOSTNAME`, `POD_IP`, then `envFrom`, then `env` (literal values with `$(VAR)` expanded,
/// downward API, ConfigMap and Secret keys). The simulated runtime configures its in-process
/// in-place restart agents from it too. Errors are [`ErrorKind::Config`](super::ErrorKind::Config), with
/// kubelet's messages (`makeEnvironmentVariables`: `configmap "c" not found`, `couldn't find key
/// k in ConfigMap ns/c`, as is, without the container's name).
pub fn container_env(req: &StartRequest) -> Result<BTreeMap<String, String>, RuntimeError> {
    let c = &req.container;
    let pod = &req.pod;
    let sources = Sources { pod, node: &req.node.name, pod_ip: &req.pod_ip, resources: &req.resources };

    let mut env = BTreeMap::new();
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into());
    env.insert("PATH".to_string(), path);
    if let Ok(home) = std::env::var("HOME") {
        env.insert("HOME".into(), home);
    }
    env.insert("HOSTNAME".into(), hostname(pod));
    let pod_ip = Some(req.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
        .or_else(|| pod.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .filter(|ip| !ip.is_empty());
    if let Some(ip) = pod_ip {
        env.insert("POD_IP".into(), ip);
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let (kind, objects, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => ("configmap", &req.resources.config_maps, &r.name, r.optional == Some(true)),
            (None, Some(r)) => ("secret", &req.resources.secrets, &r.name, r.optional == Some(true)),
            (None, None) => continue,
        };
        match objects.get(name) {
            None if optional => {}
            None => return Err(RuntimeError::config(format!("{kind} {name:?} not found"))),
            Some(data) => {
                for (k, v) in data {
                    let var = format!("{prefix}{k}");
                    if valid_env_name(&var) {
                        env.insert(var, String::from_utf8_lossy(v).into_owned());
                    }
                }
            }
        }
    }
    for var in c.env.iter().flatten() {
        let value = sources.env_value(var, &env).map_err(RuntimeError::config)?;
        if let Some(value) = value {
            env.insert(var.name.clone(), value);
        }
    }

    Ok(env)
}

/// The pod's hostname: `spec.hostname`, else its name.
fn hostname(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}

/// The user, groups and root filesystem of a container, from its pod's and its own
/// `securityContext` (the container's `runAsUser`, `runAsGroup` and `runAsNonRoot` win over the
/// pod's, as in Kubernetes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// `None` when no field asks for another user or group: the runtime's own.
    pub identity: Option<Identity>,
    /// The pod's `fsGroup`: owns the volumes the runtime makes.
    pub fs_group: Option<u32>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// The capabilities kept ([`capabilities`]); `None`: all (`privileged`).
    pub capabilities: Option<u64>,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    /// Mask containerd's default `/proc` and `/sys` paths and make its read-only ones so
    /// ([`sandbox::MASKED_PATHS`], [`sandbox::READ_ONLY_PATHS`]): unless `privileged` or
    /// `procMount: Unmasked`.
    pub mask_paths: bool,
}

/// The capabilities of Linux by number (`linux/capability.h`), without their `CAP_` prefix.
const CAPABILITY_NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// containerd's default capabilities (`oci.DefaultCaps`, what CRI gives a container).
const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The bit of capability `name` (`SYS_ADMIN` or `CAP_SYS_ADMIN`, any case).
fn capability_bit(name: &str) -> Option<u64> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPABILITY_NAMES.iter().position(|c| *c == bare).map(|i| 1 << i)
}

/// The capabilities a container keeps, as a bit set (bit `n`: capability `n`); `None` for all
/// (`privileged: true`). As containerd's CRI plugin: its default set, then `add: [ALL]`,
/// `drop: [ALL]`, then the other names of `add`, then those of `drop`. Names go with or without
/// `CAP_`, in any case; an unknown one is an error naming the field. Pure.
pub fn capabilities(container: &Container) -> Result<Option<u64>, RuntimeError> {
    let sc = container.security_context.as_ref();
    if sc.and_then(|s| s.privileged) == Some(true) {
        return Ok(None);
    }
    let all = (1u64 << CAPABILITY_NAMES.len()) - 1;
    let mut set = DEFAULT_CAPABILITIES.iter().filter_map(|c| capability_bit(c)).fold(0, |a, b| a | b);
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let add = caps.and_then(|c| c.add.as_deref()).unwrap_or_default();
    let drop = caps.and_then(|c| c.drop.as_deref()).unwrap_or_default();
    let is_all = |c: &String| c.eq_ignore_ascii_case("ALL");
    if add.iter().any(is_all) {
        set = all;
    }
    if drop.iter().any(is_all) {
        set = 0;
    }
    for (field, names, adding) in [("add", add, true), ("drop", drop, false)] {
        for name in names.iter().filter(|c| !is_all(c)) {
            let bit = capability_bit(name).ok_or_else(|| {
                RuntimeError::new(format!(
                    "container {:?}: securityContext.capabilities.{field}: unknown capability {name:?}",
                    container.name
                ))
            })?;
            set = if adding { set | bit } else { set & !bit };
        }
    }
    Ok(Some(set))
}

/// kubelet's name for a pod in messages (`format.Pod`): `<name>_<namespace>(<uid>)`.
fn pod_desc(pod: &Pod) -> String {
    let m = &pod.metadata;
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    format!("{}_{}({})", s(&m.name), s(&m.namespace), s(&m.uid))
}

/// Works out a container's [`Security`]; `runtime` is the user and group the container would run
/// as without one (the runtime's: its "image user"). Fails, with kubelet's messages, when
/// `runAsNonRoot` is set and the container would run as root. Pure.
///
/// Without `runAsGroup`, a `runAsUser` runs with group 0 (runc's default for a user not in the
/// image's `/etc/passwd`: the host's is not read). The supplementary groups are
/// `supplementalGroups` then `fsGroup`.
pub fn security(pod: &Pod, container: &Container, runtime: (u32, u32)) -> Result<Security, RuntimeError> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let id = |field: &str, v: Option<i64>| -> Result<Option<u32>, RuntimeError> {
        match v {
            None => Ok(None),
            Some(v) if (0..=i64::from(i32::MAX)).contains(&v) => Ok(Some(v as u32)),
            Some(v) => Err(RuntimeError::new(format!(
                "container {:?}: securityContext.{field}: Invalid value: {v}: must be between 0 and 2147483647, inclusive",
                container.name
            ))),
        }
    };
    let run_as_user = id("runAsUser", csc.and_then(|c| c.run_as_user).or(psc.and_then(|p| p.run_as_user)))?;
    let run_as_group = id("runAsGroup", csc.and_then(|c| c.run_as_group).or(psc.and_then(|p| p.run_as_group)))?;
    let fs_group = id("fsGroup", psc.and_then(|p| p.fs_group))?;
    let mut groups = Vec::new();
    for g in psc.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default() {
        groups.extend(id("supplementalGroups", Some(g))?);
    }
    groups.extend(fs_group);
    let mut seen = std::collections::BTreeSet::new();
    groups.retain(|g| seen.insert(*g));

    if csc.and_then(|c| c.run_as_non_root).or(psc.and_then(|p| p.run_as_non_root)) == Some(true) {
        let (pod, name) = (pod_desc(pod), &container.name);
        match run_as_user {
            Some(0) => {
                return Err(RuntimeError::config(format!(
                    "container's runAsUser breaks non-root policy (pod: {pod:?}, container: {name})"
                )));
            }
            None if runtime.0 == 0 => {
                return Err(RuntimeError::config(format!(
                    "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {name})"
                )));
            }
            _ => {}
        }
    }
    let identity = (run_as_user.is_some() || run_as_group.is_some() || !groups.is_empty()).then(|| Identity {
        uid: run_as_user.unwrap_or(runtime.0),
        gid: run_as_group.unwrap_or(if run_as_user.is_some() { 0 } else { runtime.1 }),
        groups,
    });
    let read_only_root = csc.and_then(|c| c.read_only_root_filesystem) == Some(true);
    let no_new_privs = csc.and_then(|c| c.allow_privilege_escalation) == Some(false);
    let privileged = csc.and_then(|c| c.privileged) == Some(true);
    let unmasked = csc.and_then(|c| c.proc_mount.as_deref()) == Some("Unmasked");
    Ok(Security {
        identity,
        fs_group,
        read_only_root,
        capabilities: capabilities(container)?,
        no_new_privs,
        mask_paths: !privileged && !unmasked,
    })
}

/// The host directories to hide from a container: of `paths` (absolute, symlinks resolved),
/// those the pod's private `/tmp` does not cover already, outermost only (hiding a directory
/// hides what is inside), sorted. `/` itself is never hidden. Pure.
pub fn hidden_paths(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        paths.iter().filter(|p| p.is_absolute() && p.parent().is_some() && !p.starts_with("/tmp")).cloned().collect();
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    out
}

/// An in-memory volume as the container's child writes it: modes and group after `fsGroup`,
/// and the directories the container's subPaths into it name (those that are no file). Pure.
pub fn memory_volume(
    v: &VolumePlan,
    files: &[volumes::VolumeFile],
    mounts: &[Mount],
    fs_group: Option<u32>,
) -> MemoryVolume {
    let files: Vec<MemoryFile> = files
        .iter()
        .map(|f| MemoryFile {
            path: PathBuf::from(&f.path),
            data: f.data.clone(),
            mode: owned_mode(f.mode, fs_group, false, true),
        })
        .collect();
    let dirs = mounts
        .iter()
        .filter(|m| m.volume == v.name)
        .filter_map(|m| m.sub_path.clone())
        .filter(|sub| !files.iter().any(|f| f.path == *sub))
        .collect();
    MemoryVolume { name: v.name.clone(), files, dir_mode: owned_mode(0o755, fs_group, true, true), gid: fs_group, dirs }
}

/// The volumes a run mounts and its bind mounts (see [`volumes::plan_mounts`]).
pub fn plan_volumes(req: &StartRequest, state_dir: &Path) -> Result<(Vec<VolumePlan>, Vec<Mount>), RuntimeError> {
    let sources = Sources { pod: &req.pod, node: &req.node.name, pod_ip: &req.pod_ip, resources: &req.resources };
    let sandbox = sandbox_dir(state_dir, &req.pod);
    let dirs = Dirs { sandbox: &sandbox, state_dir };
    let env = plan_env_for_subpaths(req, &sources);
    volumes::plan_mounts(&req.pod, &req.container, &req.resources, dirs, &env, &|p| sources.field(p))
        .map_err(|e| RuntimeError::new(format!("container {:?}: {e}", req.container.name)))
}

/// The variables `subPathExpr` may use: the container's literal and downward API env.
fn plan_env_for_subpaths(req: &StartRequest, sources: &Sources<'_>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in req.container.env.iter().flatten() {
        if let Ok(Some(v)) = sources.env_value(var, &env) {
            env.insert(var.name.clone(), v);
        }
    }
    env
}

/// A pod's directory name: its uid (its name when it has no usable uid).
fn pod_key(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty() && !u.contains('/') && *u != "." && *u != "..");
    uid.map(str::to_string).unwrap_or_else(|| format!("name-{}", pod.metadata.name.as_deref().unwrap_or("pod")))
}

/// `<state_dir>/pods/<pod key>`.
fn sandbox_dir(state_dir: &Path, pod: &Pod) -> PathBuf {
    state_dir.join("pods").join(pod_key(pod))
}

static NEXT_LOOPBACK: AtomicU32 = AtomicU32::new(0);

/// Pod addresses there are: 127.1-254.0-255.1-254.
const LOOPBACK_ADDRESSES: u32 = 254 * 256 * 254;

/// Where a process's pod addresses start: spread by its pid (Fibonacci hashing: the golden
/// ratio of the address space, so the bases of any 500 consecutive pids lie over 25,000 apart),
/// so that two `jobset up` on one machine (tests run several at once), or a new one beside the
/// containers an old one left running, do not hand out the same addresses, whose ports would
/// then be taken.
fn loopback_base(pid: u32) -> u32 {
    (u64::from(pid) * 10_207_481 % u64::from(LOOPBACK_ADDRESSES)) as u32
}

/// The `n`th pod address in 127.0.0.0/8: never a `.0` or `.255` last octet, nor 127.0.x.x.
fn loopback_ip(n: u32) -> String {
    let n = n % LOOPBACK_ADDRESSES;
    let host = n % 254 + 1;
    let net = n / 254;
    format!("127.{}.{}.{host}", 1 + (net / 256) % 254, net % 256)
}

/// The next pod address, unique within the process (upward from the process's base).
pub fn next_loopback_ip() -> String {
    let n = NEXT_LOOPBACK.fetch_add(1, Ordering::Relaxed);
    loopback_ip(loopback_base(std::process::id()).wrapping_add(n))
}

/// A running container, as [`Runtime::kill`] and [`Runtime::exec`] reach it.
struct Entry {
    pgid: Pid,
    /// Host pid of the process running the command (in the container ID).
    pid: u32,
    pod_uid: String,
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

/// The supervisor of a container: our child, or adopted from a previous agent (a pidfd, which
/// becomes readable when the process ends).
enum Shim {
    Child(tokio::process::Child),
    Adopted(tokio::io::unix::AsyncFd<OwnedFd>),
}

impl Shim {
    async fn wait(&mut self) {
        match self {
            Shim::Child(c) => {
                let _ = c.wait().await;
            }
            Shim::Adopted(fd) => {
                let _ = fd.readable().await;
            }
        }
    }
}

/// A container found in the state directory when the runtime started, until it is adopted.
struct Kept {
    record: ContainerRecord,
    /// Its supervisor (a pidfd), while it runs.
    running: Option<OwnedFd>,
    exit_file: PathBuf,
}

/// `pidfd_open(2)`: a descriptor of process `pid` that cannot name another process later.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: the system call returns a new descriptor that we own, or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The containers of the previous agents on `state_dir`: what their records say, with the
/// supervisors still running opened as pidfds. Unreadable records are skipped (logged).
fn kept_containers(state_dir: &Path) -> Vec<Kept> {
    let mut out = Vec::new();
    let Ok(pods) = std::fs::read_dir(containers_dir(state_dir)) else { return out };
    for pod in pods.flatten() {
        let Ok(files) = std::fs::read_dir(pod.path()) else { continue };
        for f in files.flatten() {
            let path = f.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let record = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<ContainerRecord>(&b).map_err(|e| e.to_string()))
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "skipping an unreadable container record");
                    continue;
                }
            };
            let exit_file = path.with_extension("exit");
            let running = pidfd_open(record.shim_pid)
                .ok()
                .filter(|_| shim::process_start(record.shim_pid) == Some(record.shim_start));
            out.push(Kept { record, running, exit_file });
        }
    }
    out
}

/// Stops the containers that agents on `state_dir` left running (their supervisor still runs with
/// the recorded start time): what `jobset down` does for a `jobset up` that was killed. Each
/// supervisor records its container's exit (killed), as for any stop. Returns how many.
pub fn stop_kept_containers(state_dir: &Path) -> usize {
    let running: Vec<Kept> = kept_containers(state_dir).into_iter().filter(|k| k.running.is_some()).collect();
    for k in &running {
        signal_group(Pid::from_raw(k.record.pgid as i32), Signal::SIGKILL);
    }
    running.len()
}

/// `<state_dir>/containers`: the records of container runs, by pod.
fn containers_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("containers")
}

/// What a container whose supervisor ended without an exit status (killed) reports.
fn lost_exit() -> ExitStatus {
    ExitStatus {
        exit_code: 137,
        reason: Some("Unknown".into()),
        message: Some("the container's supervisor ended without recording its exit".into()),
        finished_at: jiff::Timestamp::now(),
    }
}

type Spawned = (std::io::Result<tokio::process::Child>, Vec<u8>);

/// A spawn request for the spawner thread.
struct Spawn {
    cmd: tokio::process::Command,
    /// The read end of the child's report pipe (see [`ChildSetup::run`]), read once spawned.
    report: Option<OwnedFd>,
    reply: oneshot::Sender<Spawned>,
}

/// Runs containers as host processes (see the module docs).
pub struct ProcessRuntime {
    config: ProcessConfig,
    /// The namespaces containers get (none when isolation is off or not permitted).
    ns: Namespaces,
    state_dir: PathBuf,
    running: Running,
    spawner: Mutex<Option<std::sync::mpsc::Sender<Spawn>>>,
    next_id: AtomicU64,
    /// Containers of previous agents not adopted yet, by pod uid.
    kept: Mutex<HashMap<String, Vec<Kept>>>,
    /// The state directory when the config has none (dropped last).
    _temp: Option<tempfile::TempDir>,
}

/// Temporary state directories are `<tmp>/jobset-process-runtime-<agent pid>-<random>`.
const TEMP_PREFIX: &str = "jobset-process-runtime-";

/// Removes the temporary state directories of agents that are gone (a runtime that is never
/// dropped, as at process exit, leaves its directory behind). Once per process.
fn remove_stale_temp_dirs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let tmp = std::env::temp_dir();
        let Ok(entries) = std::fs::read_dir(&tmp) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(TEMP_PREFIX).and_then(|r| r.split_once('-')).map(|(p, _)| p) else {
                continue;
            };
            let Ok(pid) = pid.parse::<u32>() else { continue };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
}

static WARN_NO_ISOLATION: Once = Once::new();
static WARN_NO_PID_NS: Once = Once::new();
static WARN_NO_VOLUMES: Once = Once::new();
static WARN_NO_IDENTITY: Once = Once::new();

impl ProcessRuntime {
    /// A runtime; probes (once per process) which namespaces may be created. Panics when no
    /// temporary state directory can be created ([`ProcessConfig::state_dir`] unset).
    pub fn new(config: ProcessConfig) -> ProcessRuntime {
        let ns = if config.isolation { sandbox::probe() } else { Namespaces::default() };
        if config.isolation && !ns.mount {
            WARN_NO_ISOLATION.call_once(|| {
                tracing::warn!(
                    "the process runtime cannot create mount namespaces here (not root?): pods run without \
                     isolation (no private /tmp, volumes are not mounted, the host's /etc/hosts)"
                )
            });
        }
        if config.isolation && !ns.pid {
            WARN_NO_PID_NS.call_once(|| {
                tracing::warn!(
                    "the process runtime cannot create PID namespaces here: processes that leave a container's \
                     process group may outlive it"
                )
            });
        }
        let (state_dir, temp) = match &config.state_dir {
            Some(d) => (d.clone(), None),
            None => {
                remove_stale_temp_dirs();
                let t = tempfile::Builder::new()
                    .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
                    .tempdir()
                    .expect("creating the process runtime's temporary state directory");
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut kept: HashMap<String, Vec<Kept>> = HashMap::new();
        if config.outlive_agent {
            for k in kept_containers(&state_dir) {
                kept.entry(k.record.run.pod_uid.clone()).or_default().push(k);
            }
        }
        // Run numbers go on from the kept ones: IDs and file names stay unique.
        let next = kept.values().flatten().map(|k| k.record.run.n + 1).max().unwrap_or(1);
        ProcessRuntime {
            config,
            ns,
            state_dir,
            running: Arc::default(),
            spawner: Mutex::new(None),
            next_id: AtomicU64::new(next),
            kept: Mutex::new(kept),
            _temp: temp,
        }
    }

    /// Whether containers run isolated (own mount namespace: private `/tmp`, volumes,
    /// `/etc/hosts`; see the module docs). `false` when disabled or not permitted.
    pub fn isolated(&self) -> bool {
        self.ns.mount
    }

    /// The namespaces containers get.
    pub fn namespaces(&self) -> Namespaces {
        self.ns
    }

    /// Where sandboxes and claims live (`<state_dir>/pods/<uid>`, `<state_dir>/pvc/<ns>/<claim>`).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// How many containers are running.
    pub fn running(&self) -> usize {
        self.running.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// The host pid of the process running a container's command (the pid in its ID).
    pub fn pid(&self, id: &ContainerId) -> Option<u32> {
        let m = self.running.lock().ok()?;
        m.get(id).map(|e| e.pid)
    }

    /// The process group of a running container (every process of it, unless one left it).
    pub fn pgid(&self, id: &ContainerId) -> Option<u32> {
        let m = self.running.lock().ok()?;
        m.get(id).map(|e| e.pgid.as_raw() as u32)
    }

    /// Removes a pod's sandbox and its containers' records.
    fn remove_pod_dirs(&self, uid: &str) {
        if uid.is_empty() || uid.contains('/') || uid == "." || uid == ".." {
            return;
        }
        for dir in [self.state_dir.join("pods").join(uid), containers_dir(&self.state_dir).join(uid)] {
            if let Err(e) = std::fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), error = %e, "removing a pod's directory");
            }
        }
    }

    /// The spawner thread's queue, started on first use inside the caller's tokio runtime.
    fn spawner(&self) -> Result<std::sync::mpsc::Sender<Spawn>, RuntimeError> {
        let mut guard = self.spawner.lock().map_err(|_| RuntimeError::new("process runtime: lock poisoned"))?;
        if let Some(tx) = guard.as_ref() {
            return Ok(tx.clone());
        }
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| RuntimeError::new("process runtime: start called outside a tokio runtime"))?;
        let (tx, rx) = std::sync::mpsc::channel::<Spawn>();
        std::thread::Builder::new()
            .name("process-runtime".into())
            .spawn(move || {
                // Children are reaped by the tokio runtime the agent runs in.
                let _enter = handle.enter();
                for Spawn { mut cmd, report, reply } in rx {
                    let spawned = cmd.spawn();
                    // Closes our write end of the report pipe (held by the pre_exec closure).
                    drop(cmd);
                    let report = report.map(sandbox::read_report).unwrap_or_default();
                    let _ = reply.send((spawned, report));
                }
            })
            .map_err(|e| RuntimeError::new(format!("process runtime: starting the spawner thread: {e}")))?;
        *guard = Some(tx.clone());
        Ok(tx)
    }
}

impl Drop for ProcessRuntime {
    /// An agent shutting down (not killed) stops every container, adopted or not.
    fn drop(&mut self) {
        if let Ok(m) = self.running.lock() {
            for e in m.values() {
                signal_group(e.pgid, Signal::SIGKILL);
            }
        }
        if let Ok(kept) = self.kept.lock() {
            for k in kept.values().flatten().filter(|k| k.running.is_some()) {
                signal_group(Pid::from_raw(k.record.pgid as i32), Signal::SIGKILL);
            }
        }
    }
}

pub(super) fn signal_group(pgid: Pid, sig: Signal) {
    if let Err(e) = killpg(pgid, sig)
        && e != nix::errno::Errno::ESRCH
    {
        tracing::warn!(pgid = pgid.as_raw(), signal = %sig, error = %e, "signalling a container");
    }
}

/// The command of a container or exec, without its pre_exec part.
pub(super) fn command(argv: &[String], env: &BTreeMap<String, String>, logs: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(if logs { Stdio::piped() } else { Stdio::null() })
        .stderr(if logs { Stdio::piped() } else { Stdio::null() })
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// What [`prepare`] makes a container's sandbox from.
struct SandboxInput {
    ns: Namespaces,
    /// The pod's sandbox directory (`<state_dir>/pods/<uid>`).
    sandbox: PathBuf,
    state_dir: PathBuf,
    /// [`ProcessConfig::hidden`].
    hidden: Vec<PathBuf>,
    volumes: Vec<VolumePlan>,
    mounts: Vec<Mount>,
    hosts: Option<(PathBuf, String)>,
    hostname: String,
    security: Security,
}

/// Creates the pod's sandbox, its volumes and the hosts file, and works out what the container's
/// child does before exec (the supervisor builds it). Blocking.
fn prepare(input: &SandboxInput, plan: &Plan) -> Result<SandboxPlan, String> {
    let SandboxInput { ns, sandbox, state_dir, hidden, volumes, mounts, hosts, hostname, security } = input;
    let program = Path::new(&plan.argv[0]);
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    let mut binds = Vec::new();
    let mut memory = Vec::new();
    let mut hide = Vec::new();
    let mut stage = None;
    let mut working_dir = plan.working_dir.clone();
    if ns.mount {
        let tmp = sandbox.join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| io("creating", &tmp, e))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).map_err(|e| io("chmod", &tmp, e))?;
        let bind = |what: String, source: &Path, target: &Path, read_only: bool| Bind {
            what,
            source: BindSource::Host(source.to_path_buf()),
            target: target.to_path_buf(),
            read_only,
        };
        // With readOnlyRootFilesystem the pod's /tmp is read-only too: in Kubernetes it is part of
        // the container's root filesystem (pods that need a writable /tmp mount an emptyDir).
        binds.push(bind("mounting the pod's /tmp".into(), &tmp, Path::new("/tmp"), security.read_only_root));
        // A program under the host's /tmp (a mapped image such as the agent's `jobset` binary
        // built in a checkout there) would be hidden by the pod's /tmp: bind it at its path.
        if program.is_absolute() && program.starts_with("/tmp") && program.is_file() {
            let what = format!("mounting the program {}", program.display());
            binds.push(bind(what, program, program, true));
        }
        if let Some((dir, namespace)) = hosts {
            let file = crate::hosts::ensure(dir, namespace).map_err(|e| io("creating the hosts file in", dir, e))?;
            binds.push(bind("mounting /etc/hosts".into(), &file, Path::new("/etc/hosts"), true));
        }
        // Other pods' sandboxes (their /tmp, volumes) and whatever else must stay out of sight.
        let hidden: Vec<PathBuf> =
            std::iter::once(state_dir).chain(hidden).filter_map(|p| std::fs::canonicalize(p).ok()).collect();
        hide = hidden_paths(&hidden);
        // A working directory inherited from the agent stays reachable through the process's
        // cwd even once covered: start where the agent's would be hidden at `/`.
        if working_dir.is_none()
            && let Ok(cwd) = std::env::current_dir()
            && (cwd.starts_with("/tmp") || hidden.iter().any(|h| cwd.starts_with(h)))
        {
            working_dir = Some(PathBuf::from("/"));
        }
        let mut in_memory = HashMap::new();
        for v in volumes {
            match &v.prepare {
                Prepare::Memory(files) => {
                    in_memory.insert(v.name.as_str(), memory.len());
                    memory.push(memory_volume(v, files, mounts, security.fs_group));
                }
                _ => volumes::prepare(v, security.fs_group)?,
            }
        }
        for m in mounts {
            let what = format!("mounting volume {:?} at {}", m.volume, m.target.display());
            if let Some(&i) = in_memory.get(m.volume.as_str()) {
                let path = m.sub_path.clone().unwrap_or_default();
                let file = memory.get(i).is_some_and(|v: &MemoryVolume| v.files.iter().any(|f| f.path == path));
                let source = BindSource::Memory { volume: i, path, file };
                binds.push(Bind { what, source, target: m.target.clone(), read_only: m.read_only });
                continue;
            }
            if m.sub_path.is_some() && std::fs::symlink_metadata(&m.source).is_err() {
                std::fs::create_dir_all(&m.source).map_err(|e| io("creating the subPath", &m.source, e))?;
                // A subPath of an emptyDir is writable by the container's user as the volume is.
                if volumes.iter().any(|v| v.name == m.volume && v.prepare == Prepare::EmptyDir) {
                    if let Some(gid) = security.fs_group {
                        std::os::unix::fs::chown(&m.source, None, Some(gid))
                            .map_err(|e| io("changing the group of", &m.source, e))?;
                    }
                    let mode = owned_mode(volumes::EMPTY_DIR_MODE, security.fs_group, true, false);
                    std::fs::set_permissions(&m.source, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| io("chmod", &m.source, e))?;
                }
            }
            binds.push(bind(what, &m.source, &m.target, m.read_only));
        }
        if !memory.is_empty() {
            // Hidden itself: covered by the pod's /tmp or in `hide`.
            stage = Some(std::fs::canonicalize(state_dir).map_err(|e| io("resolving", state_dir, e))?);
        }
    } else if !mounts.is_empty() {
        WARN_NO_VOLUMES.call_once(|| {
            tracing::warn!("the process runtime runs without isolation: containers start without their volumes")
        });
    }
    Ok(SandboxPlan {
        mount_ns: ns.mount,
        hostname: if ns.mount && ns.uts { Some(hostname.to_string()) } else { None },
        binds,
        pid_ns: ns.pid,
        working_dir,
        hide,
        stage,
        memory,
        read_only_root: security.read_only_root,
        identity: security.identity.clone(),
        capabilities: security.capabilities,
        no_new_privs: security.no_new_privs,
        mask_paths: security.mask_paths,
    })
}

/// Forwards the lines of one stream to the log writer.
pub(super) async fn read_lines(stream: impl AsyncRead + Unpin, name: &'static str, out: mpsc::UnboundedSender<String>) {
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

/// How a container's log is rotated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rotation {
    pub max_bytes: u64,
    pub max_files: usize,
}

async fn open_log(path: &Path) -> std::io::Result<tokio::fs::File> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::OpenOptions::new().create(true).append(true).open(path).await
}

/// The name a rotated log gets: `<n>.log.<UTC timestamp with nanoseconds>` (sorts by age).
fn rotated_name(path: &Path, ts: jiff::Timestamp) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stamp = format!("{}{:09}", ts.strftime("%Y%m%d-%H%M%S."), ts.subsec_nanosecond());
    path.with_file_name(format!("{name}.{stamp}"))
}

/// Moves the current log aside and removes the oldest rotated files beyond `max_files`.
async fn rotate(path: &Path, max_files: usize) -> std::io::Result<()> {
    let mut target = rotated_name(path, jiff::Timestamp::now());
    while tokio::fs::try_exists(&target).await.unwrap_or(false) {
        target = rotated_name(path, jiff::Timestamp::now());
    }
    tokio::fs::rename(path, &target).await?;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Ok(()) };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut rotated = Vec::new();
    let mut entries = tokio::fs::read_dir(dir).await?;
    while let Some(e) = entries.next_entry().await? {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&prefix) {
            rotated.push(n);
        }
    }
    rotated.sort();
    let excess = rotated.len().saturating_sub(max_files);
    for n in &rotated[..excess] {
        let _ = tokio::fs::remove_file(dir.join(n)).await;
    }
    Ok(())
}

/// Appends the lines of both streams to the log file, in the order they were read, rotating it.
pub(super) async fn write_log(path: PathBuf, mut lines: mpsc::UnboundedReceiver<String>, rotation: Rotation) {
    let mut file = match open_log(&path).await {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "opening a container log");
            None
        }
    };
    let mut size = match &file {
        Some(f) => f.metadata().await.map(|m| m.len()).unwrap_or(0),
        None => 0,
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
            continue;
        }
        size += line.len() as u64;
        if rotation.max_bytes > 0 && size >= rotation.max_bytes {
            let _ = f.flush().await;
            file = None;
            if let Err(e) = rotate(&path, rotation.max_files).await {
                tracing::warn!(path = %path.display(), error = %e, "rotating a container log");
            }
            match open_log(&path).await {
                Ok(f) => file = Some(f),
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "reopening a container log"),
            }
            size = 0;
        }
    }
    if let Some(mut f) = file {
        let _ = f.flush().await;
    }
}

pub(super) fn exit_status(
    status: std::io::Result<std::process::ExitStatus>,
    finished_at: jiff::Timestamp,
) -> ExitStatus {
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

/// Follows one container until its supervisor ends: applies kills to the container's group,
/// then reports the exit status the supervisor recorded.
async fn supervise(
    mut shim: Shim,
    pgid: Pid,
    mut kills: mpsc::UnboundedReceiver<Duration>,
    mut exit_tx: oneshot::Sender<ExitStatus>,
    exit_file: PathBuf,
    forget: Forget,
) {
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut abandoned = false;
    loop {
        let sigkill_at = deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            () = shim.wait() => break,
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
    }
    drop(forget);
    let _ = exit_tx.send(shim::read_exit(&exit_file).unwrap_or_else(lost_exit));
}

/// Tracks a running container: in the running table (for kills and execs) with a task that
/// follows its supervisor; the future resolves with its exit.
fn track(
    running: &Running,
    id: ContainerId,
    shim: Shim,
    exit_file: PathBuf,
    entry: impl FnOnce(mpsc::UnboundedSender<Duration>) -> Entry,
) -> BoxFuture<'static, ExitStatus> {
    let (kill_tx, kill_rx) = mpsc::unbounded_channel();
    let entry = entry(kill_tx);
    let pgid = entry.pgid;
    running.lock().expect("running table lock").insert(id.clone(), entry);
    let (exit_tx, exit_rx) = oneshot::channel();
    tokio::spawn(supervise(shim, pgid, kill_rx, exit_tx, exit_file, Forget(running.clone(), id)));
    async move { exit_rx.await.unwrap_or_else(|_| lost_exit()) }.boxed()
}

impl Runtime for ProcessRuntime {
    fn start(&self, req: StartRequest) -> BoxFuture<'static, Result<Started, RuntimeError>> {
        let ready = |r| futures::future::ready(r).boxed();
        let plan = match plan(&req, &self.config.images) {
            Ok(p) => p,
            Err(e) => return ready(Err(e)),
        };
        let (mut volumes, mut mounts) = match plan_volumes(&req, &self.state_dir) {
            Ok(v) => v,
            Err(e) => return ready(Err(e)),
        };
        // SAFETY: geteuid(2) and getegid(2) cannot fail.
        let runtime_user = unsafe { (nix::libc::geteuid(), nix::libc::getegid()) };
        let mut security = match security(&req.pod, &req.container, runtime_user) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        if runtime_user.0 != 0 && (security.identity.is_some() || security.fs_group.is_some()) {
            // Only root may change users and give files away.
            WARN_NO_IDENTITY.call_once(|| {
                tracing::warn!(
                    "the process runtime does not run as root: securityContext users and groups (runAsUser, \
                     runAsGroup, fsGroup, supplementalGroups) are ignored"
                )
            });
            security.identity = None;
            security.fs_group = None;
        }
        if runtime_user.0 != 0 {
            // Not root: no capabilities to drop (and none that could be dropped).
            security.capabilities = None;
        }
        let mut plan = plan;
        let sa = self.config.service_account.as_ref();
        if let Some(ServiceAccountPlan { volume, mount, env }) =
            sa.and_then(|sa| service_account_plan(&req, sa, &sandbox_dir(&self.state_dir, &req.pod)))
        {
            volumes.push(volume);
            mounts.push(mount);
            for (k, v) in env {
                plan.env.entry(k).or_insert(v);
            }
        }
        let spawner = match self.spawner() {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let running = self.running.clone();
        let name = req.container.name.clone();
        let log_path = req.log_path.clone();
        let rotation = Rotation { max_bytes: self.config.log_max_bytes, max_files: self.config.log_max_files };
        let namespace = req.pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let input = SandboxInput {
            ns: self.ns,
            sandbox: sandbox_dir(&self.state_dir, &req.pod),
            state_dir: self.state_dir.clone(),
            hidden: self.config.hidden.clone(),
            volumes,
            mounts,
            hosts: self.config.hosts_dir.clone().map(|d| (d, namespace)),
            hostname: hostname(&req.pod),
            security,
        };
        let pod_uid = req.pod.metadata.uid.clone().unwrap_or_default();
        let dir = containers_dir(&self.state_dir).join(pod_key(&req.pod));
        let detach = self.config.outlive_agent;
        let node_name = req.node.name.clone();
        let restart_count = req.restart_count;
        async move {
            let fail = |what: String| RuntimeError::new(format!("container {name:?}: {what}"));
            let for_setup = plan.clone();
            let shim_log_path = dir.join(format!("{n}.shim.log"));
            let (setup, shim_log) = tokio::task::spawn_blocking(move || {
                let setup = prepare(&input, &for_setup)?;
                let log = shim_log_path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(&shim_log_path));
                let log = log.map_err(|e| format!("opening the supervisor's log {}: {e}", shim_log_path.display()))?;
                Ok::<_, String>((setup, log))
            })
            .await
            .map_err(|e| fail(format!("preparing the sandbox: {e}")))?
            .map_err(fail)?;
            let exit_file = dir.join(format!("{n}.exit"));
            let spec = ShimSpec {
                sandbox: setup,
                log: log_path.map(|path| LogSpec {
                    path,
                    max_bytes: rotation.max_bytes,
                    max_files: rotation.max_files,
                }),
                exit_file: exit_file.clone(),
                record_file: dir.join(format!("{n}.json")),
                record: RunRecord {
                    n,
                    node: node_name,
                    pod_uid: pod_uid.clone(),
                    container: name.clone(),
                    restart_count,
                    plan: plan.clone(),
                },
                detach,
                parent: Pid::this().as_raw(),
            };
            let spec = serde_json::to_vec(&spec).map_err(|e| fail(format!("the supervisor's spec: {e}")))?;
            // No pre_exec: std spawns with posix_spawn, without copying the agent's memory.
            let mut cmd = tokio::process::Command::new("/proc/self/exe");
            cmd.env_clear().env(SHIM_ENV, "1").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(shim_log);
            let (reply, spawned) = oneshot::channel();
            let stopped = || RuntimeError::new("process runtime: the spawner thread is gone");
            spawner.send(Spawn { cmd, report: None, reply }).map_err(|_| stopped())?;
            let mut child =
                spawned.await.map_err(|_| stopped())?.0.map_err(|e| fail(format!("starting its supervisor: {e}")))?;
            let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(fail("the supervisor's pipes are missing".into()));
            };
            let gone =
                |what: &str, e: std::io::Error| fail(format!("{what} its supervisor (see {}): {e}", dir.display()));
            stdin.write_all(&spec).await.map_err(|e| gone("writing to", e))?;
            drop(stdin);
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).await.map_err(|e| gone("reading from", e))?;
            let (pgid_raw, pid) = match serde_json::from_str::<ShimReport>(&line) {
                Ok(ShimReport::Started { pgid, pid }) => (pgid, pid),
                Ok(ShimReport::Failed { message }) => return Err(fail(message)),
                Err(_) => {
                    let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("it said {line:?}"));
                    return Err(gone("starting", e));
                }
            };
            let id = ContainerId(container_id(pid, n));
            let plan = Arc::new(plan);
            let pgid = Pid::from_raw(pgid_raw as i32);
            let exit = track(&running, id.clone(), Shim::Child(child), exit_file, |kills| Entry {
                pgid,
                pid,
                pod_uid,
                kills,
                plan,
            });
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
        let container = self.running.lock().ok().and_then(|m| m.get(id).map(|e| (e.plan.clone(), e.pid)));
        let Some((container, pid)) = container else {
            return ready(Err(RuntimeError::new(format!("container {id} is not running"))));
        };
        if argv.is_empty() {
            return ready(Err(RuntimeError::new("exec: no command given")));
        }
        let spawner = match self.spawner() {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        async move {
            let mut cmd = command(&argv, &container.env, true);
            let agent = Pid::this();
            // SAFETY: prctl(2) and getppid(2) are plain system calls; errors are built from an
            // errno without allocating.
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
            sandbox::join(cmd.as_std_mut(), pid, true)
                .map_err(|e| RuntimeError::new(format!("exec: entering container {pid}: {e}")))?;
            let (reply, spawned) = oneshot::channel();
            let stopped = || RuntimeError::new("process runtime: the spawner thread is gone");
            spawner.send(Spawn { cmd, report: None, reply }).map_err(|_| stopped())?;
            let child = spawned
                .await
                .map_err(|_| stopped())?
                .0
                .map_err(|e| RuntimeError::new(format!("exec {:?}: {e}", argv[0])))?;
            let pgid = child.id().map(|p| Pid::from_raw(p as i32));
            match tokio::time::timeout(timeout, child.wait_with_output()).await {
                Ok(Ok(out)) => {
                    let mut output = out.stdout;
                    output.extend_from_slice(&out.stderr);
                    Ok(ExecOutput { exit_code: exit_status(Ok(out.status), jiff::Timestamp::now()).exit_code, output })
                }
                Ok(Err(e)) => Err(RuntimeError::new(format!("exec {:?}: {e}", argv[0]))),
                Err(_) => {
                    if let Some(pgid) = pgid {
                        signal_group(pgid, Signal::SIGKILL);
                    }
                    Err(RuntimeError::new(format!("exec {:?}: timed out after {timeout:?}", argv[0])))
                }
            }
        }
        .boxed()
    }

    fn reachable(&self) -> bool {
        true
    }

    fn pod_ip(&self) -> String {
        next_loopback_ip()
    }

    fn adopt(&self, uid: &str) -> Vec<Adopted> {
        let kept = self.kept.lock().ok().and_then(|mut k| k.remove(uid)).unwrap_or_default();
        let mut out = Vec::with_capacity(kept.len());
        for Kept { record, running, exit_file } in kept {
            let id = ContainerId(record.id.clone());
            // SAFETY: the `AsyncFd` owns the descriptor (an `OwnedFd`) for its whole life.
            let registered = running.map(|fd| unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
                    .map_err(|e| e.into_parts().1)
            });
            let exit = match registered {
                Some(Ok(pidfd)) => {
                    let ContainerRecord { pgid, pid, run: RunRecord { pod_uid, plan, .. }, .. } = record.clone();
                    let pgid = Pid::from_raw(pgid as i32);
                    track(&self.running, id.clone(), Shim::Adopted(pidfd), exit_file, |kills| Entry {
                        pgid,
                        pid,
                        pod_uid,
                        kills,
                        plan: Arc::new(plan),
                    })
                }
                Some(Err(e)) => {
                    tracing::warn!(container = %id, error = %e, "following an adopted container");
                    signal_group(Pid::from_raw(record.pgid as i32), Signal::SIGKILL);
                    futures::future::ready(lost_exit()).boxed()
                }
                None => futures::future::ready(shim::read_exit(&exit_file).unwrap_or_else(lost_exit)).boxed(),
            };
            out.push(Adopted {
                id,
                container: record.run.container,
                restart_count: record.run.restart_count,
                started_at: record.started_at,
                exit,
            });
        }
        out
    }

    fn sweep(&self, node: &str, uids: &HashSet<String>) {
        let Ok(mut kept) = self.kept.lock() else { return };
        let gone: Vec<String> = kept
            .iter()
            .filter(|(uid, ks)| !uids.contains(*uid) && ks.iter().any(|k| k.record.run.node == node))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            for k in kept.remove(&uid).into_iter().flatten() {
                if k.running.is_some() {
                    signal_group(Pid::from_raw(k.record.pgid as i32), Signal::SIGKILL);
                }
            }
            self.remove_pod_dirs(&uid);
        }
    }

    fn remove_pod(&self, uid: &str) {
        if let Ok(m) = self.running.lock() {
            for e in m.values().filter(|e| e.pod_uid == uid) {
                signal_group(e.pgid, Signal::SIGKILL);
            }
        }
        // Kept from a previous agent and never adopted: they go with the pod too.
        let kept = self.kept.lock().ok().and_then(|mut k| k.remove(uid)).unwrap_or_default();
        for k in kept.iter().filter(|k| k.running.is_some()) {
            signal_group(Pid::from_raw(k.record.pgid as i32), Signal::SIGKILL);
        }
        self.remove_pod_dirs(uid);
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
    use jobset_api::jobset::agent::AGENT_IMAGE;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kept_containers_are_running_only_with_a_live_supervisor_of_the_recorded_start_time() {
        let state = tempfile::tempdir().unwrap();
        let dir = containers_dir(state.path()).join("u-1");
        std::fs::create_dir_all(&dir).unwrap();
        // This test process stands for a live supervisor.
        let me = std::process::id();
        let started = shim::process_start(me).unwrap();
        let record = |n: u64, shim_start: u64| ContainerRecord {
            id: shim::container_id(me, n),
            run: RunRecord {
                n,
                node: "n1".into(),
                pod_uid: "u-1".into(),
                container: "main".into(),
                restart_count: 0,
                plan: Plan { argv: vec!["true".into()], env: BTreeMap::new(), working_dir: None },
            },
            started_at: jiff::Timestamp::now(),
            shim_pid: me,
            shim_start,
            pgid: me,
            pid: me,
        };
        let write = |n: u64, shim_start: u64| {
            std::fs::write(dir.join(format!("{n}.json")), serde_json::to_vec(&record(n, shim_start)).unwrap()).unwrap()
        };
        // (run, what is on disk, running?)
        write(1, started);
        write(3, started + 1);
        let mut kept = kept_containers(state.path());
        kept.sort_by_key(|k| k.record.run.n);
        let seen: Vec<(u64, bool)> = kept.iter().map(|k| (k.record.run.n, k.running.is_some())).collect();
        assert_eq!(
            seen,
            [(1, true), (3, false)],
            "1: its supervisor runs; 3: the pid now names another process; 4: unreadable, skipped"
        );
        assert_eq!((&kept[0].record.id, &kept[0].record.run), (&record(1, started).id, &record(1, started).run));
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
    fn pods_get_their_bound_token_ca_and_namespace_unless_they_opt_out() {
        let sa = ServiceAccountSource {
            host: "127.0.0.1".into(),
            port: 6443,
            ca_pem: "CA".into(),
            token: Arc::new(|p: &Pod| format!("token-of-{}", p.metadata.name.clone().unwrap_or_default())),
        };
        let sandbox = Path::new("/state/pods/u1");
        let c = json!({"name": "agent", "image": "i"});
        let req = request(json!({"metadata": {"name": "w-0", "namespace": "ns"}}), c.clone());
        let ServiceAccountPlan { volume, mount, env } =
            service_account_plan(&req, &sa, sandbox).expect("mounted by default");
        let volumes::Prepare::Memory(files) = &volume.prepare else { panic!("{:?}", volume.prepare) };
        let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.path.as_str(), f.data.as_slice())).collect();
        assert_eq!(files, [("token", &b"token-of-w-0"[..]), ("ca.crt", b"CA"), ("namespace", b"ns")]);
        assert!(volume.read_only && mount.read_only);
        assert_eq!(mount.target, Path::new(SERVICE_ACCOUNT_DIR));
        assert_eq!(mount.source, sandbox.join("volumes/kube-api-access"));
        assert_eq!(env[0], ("KUBERNETES_SERVICE_HOST".to_string(), "127.0.0.1".to_string()));
        assert_eq!(env[1], ("KUBERNETES_SERVICE_PORT".to_string(), "6443".to_string()));

        let opted_out = request(
            json!({"metadata": {"name": "w-0"}, "spec": {"containers": [], "automountServiceAccountToken": false}}),
            c,
        );
        assert!(service_account_plan(&opted_out, &sa, sandbox).is_none());
        let own = json!({"name": "agent", "image": "i", "volumeMounts": [{"name": "v", "mountPath": format!("{SERVICE_ACCOUNT_DIR}/")}]});
        assert!(service_account_plan(&request(json!({"metadata": {"name": "w-0"}}), own), &sa, sandbox).is_none());
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
    fn an_image_without_an_exact_entry_falls_back_to_its_repository() {
        let entry = |argv: &[&str]| argv.iter().map(|a| a.to_string()).collect::<Vec<String>>();
        let images: BTreeMap<String, Vec<String>> = [
            (AGENT_IMAGE.to_string(), entry(&["/bin/jobset", "agent"])),
            ("busybox".to_string(), entry(&["sh", "-c"])),
            ("busybox:1.36".to_string(), entry(&["ash", "-c"])),
            ("empty".to_string(), vec![]),
        ]
        .into();
        let pod = json!({"metadata": {"name": "p"}});
        let argv =
            |image: &str| plan(&request(pod.clone(), json!({"name": "m", "image": image})), &images).map(|p| p.argv);
        for tagged in [
            format!("{AGENT_IMAGE}:v0.11.0"),
            format!("{AGENT_IMAGE}@sha256:0123"),
            format!("{AGENT_IMAGE}:v0.11.0@sha256:0123"),
            AGENT_IMAGE.to_string(),
        ] {
            assert_eq!(argv(&tagged).unwrap(), ["/bin/jobset", "agent"], "{tagged}");
        }
        assert_eq!(argv("busybox:1.36").unwrap(), ["ash", "-c"], "an exact entry wins");
        assert_eq!(argv("busybox:1.37").unwrap(), ["sh", "-c"]);
        assert!(argv("empty:1").is_err(), "an empty entry maps nothing");
        assert!(argv("registry.k8s.io/jobset/in-place-restart-agent-2:v1").is_err(), "not a prefix match");
        let err = argv("alpine:3").unwrap_err();
        assert_eq!(
            err.0,
            "container \"m\": no command is set and the image \"alpine:3\" is not mapped to a command in the process runtime"
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
                "secret \"s\" not found",
            ),
            (
                json!({"name": "m", "command": ["true"], "envFrom": [{"configMapRef": {"name": "c"}}]}),
                "configmap \"c\" not found",
            ),
        ] {
            let err = plan(&request(pod.clone(), c), &BTreeMap::new()).unwrap_err();
            assert!(err.0.contains(want), "{err}");
            assert_eq!(err.1, crate::runtime::ErrorKind::Config, "{err}");
        }
    }

    #[test]
    fn env_from_config_maps_and_secrets() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}});
        let mut req = request(
            pod,
            json!({"name": "m", "command": ["true"],
            "envFrom": [
                {"configMapRef": {"name": "cfg"}},
                {"secretRef": {"name": "sec"}, "prefix": "S_"},
                {"configMapRef": {"name": "absent", "optional": true}},
            ],
            "env": [
                {"name": "ONE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "one"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nope", "optional": true}}},
                {"name": "OPT2", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                {"name": "two", "value": "overridden"},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ]}),
        );
        let mut res = PodResources::default();
        res.config_maps
            .insert("cfg".into(), [("one".to_string(), b"1".to_vec()), ("two".into(), b"2".to_vec())].into());
        res.secrets
            .insert("sec".into(), [("token".to_string(), b"t0k".to_vec()), ("bad=name".into(), b"x".to_vec())].into());
        req.resources = Arc::new(res);
        req.pod_ip = "127.1.0.9".into();
        let p = plan(&req, &BTreeMap::new()).unwrap();
        let e = |k: &str| p.env.get(k).map(String::as_str);
        assert_eq!((e("one"), e("two"), e("S_token")), (Some("1"), Some("overridden"), Some("t0k")));
        assert_eq!((e("ONE"), e("TOKEN"), e("OPT"), e("OPT2")), (Some("1"), Some("t0k"), None, None));
        assert_eq!(e("S_bad=name"), None, "invalid names are skipped");
        assert_eq!((e("IP"), e("POD_IP")), (Some("127.1.0.9"), Some("127.1.0.9")), "the request's pod IP wins");

        let key_missing = |c: serde_json::Value| {
            plan(&request(json!({"metadata": {"name": "p", "namespace": "ns"}}), c), &BTreeMap::new())
        };
        let mut r = request(
            json!({"metadata": {"name": "p", "namespace": "ns"}}),
            json!({"name": "m", "command": ["true"],
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
        );
        r.resources =
            Arc::new(PodResources { config_maps: [("cfg".to_string(), BTreeMap::new())].into(), ..Default::default() });
        let err = plan(&r, &BTreeMap::new()).unwrap_err();
        assert_eq!(err, RuntimeError::config("couldn't find key k in ConfigMap ns/cfg"), "kubelet's message, as is");
        let err = key_missing(json!({"name": "m", "command": ["true"],
            "env": [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}))
        .unwrap_err();
        assert!(err.0.contains("resourceFieldRef is not supported"), "{err}");
    }

    #[test]
    fn pod_ips_are_loopback_addresses() {
        let ips: Vec<String> = (0..600).map(|_| next_loopback_ip()).collect();
        let unique: std::collections::BTreeSet<&String> = ips.iter().collect();
        assert_eq!(unique.len(), ips.len());
        for ip in &ips {
            let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
            assert_eq!(o[0], 127, "{ip}");
            assert!(o[1] >= 1 && o[3] != 0 && o[3] != 255, "{ip}");
        }
        let last = loopback_ip(LOOPBACK_ADDRESSES - 1);
        assert_eq!((last.as_str(), loopback_ip(LOOPBACK_ADDRESSES).as_str()), ("127.254.255.254", "127.1.0.1"));
    }

    #[test]
    fn processes_with_neighbouring_pids_hand_out_different_pod_ips() {
        // Each of 500 processes started one after another may hand out 20,000 addresses before
        // one of them reaches another's.
        for first in [2, 300_000, 4_193_800] {
            let mut bases: Vec<u32> = (first..first + 500).map(loopback_base).collect();
            bases.sort();
            let wrap = bases[0] + LOOPBACK_ADDRESSES - bases[bases.len() - 1];
            let gap = bases.windows(2).map(|w| w[1] - w[0]).chain([wrap]).min().unwrap();
            assert!(gap > 20_000, "pids from {first}: two bases only {gap} apart");
        }
    }

    fn secured(
        pod_sc: serde_json::Value,
        container_sc: serde_json::Value,
        runtime: (u32, u32),
    ) -> Result<Security, String> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [], "securityContext": pod_sc}
        }))
        .unwrap();
        let c: Container = serde_json::from_value(json!({"name": "main", "securityContext": container_sc})).unwrap();
        security(&pod, &c, runtime).map_err(|e| e.0)
    }

    #[test]
    fn the_containers_security_context_wins_over_the_pods() {
        let id = |uid, gid, groups: &[u32]| Some(Identity { uid, gid, groups: groups.to_vec() });
        // (pod securityContext, container securityContext, identity)
        for (pod_sc, c_sc, want) in [
            (json!({}), json!({}), None),
            (json!({"runAsUser": 1000}), json!({}), id(1000, 0, &[])),
            (json!({"runAsUser": 1000, "runAsGroup": 3000}), json!({"runAsUser": 1001}), id(1001, 3000, &[])),
            (json!({"runAsGroup": 3000}), json!({"runAsGroup": 3001}), id(0, 3001, &[])),
            (
                json!({"fsGroup": 2000, "supplementalGroups": [4000, 2000, 5000]}),
                json!({}),
                id(0, 0, &[4000, 2000, 5000]),
            ),
            (
                json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]}),
                json!({}),
                id(1000, 3000, &[4000, 2000]),
            ),
        ] {
            let got = secured(pod_sc.clone(), c_sc.clone(), (0, 0)).unwrap();
            assert_eq!(got.identity, want, "pod {pod_sc} container {c_sc}");
        }
        let s = secured(json!({"fsGroup": 2000}), json!({"readOnlyRootFilesystem": true}), (0, 0)).unwrap();
        assert_eq!((s.fs_group, s.read_only_root), (Some(2000), true));
        assert!(!secured(json!({}), json!({"readOnlyRootFilesystem": false}), (0, 0)).unwrap().read_only_root);
        let only_group = secured(json!({"fsGroup": 2000}), json!({}), (1000, 1000)).unwrap();
        assert_eq!(only_group.identity, id(1000, 1000, &[2000]), "the runtime's user and group stay");
    }

    #[test]
    fn capabilities_are_containerds_defaults_changed_by_add_and_drop_and_all_when_privileged() {
        const DEFAULT: u64 = 0xa80425fb; // A containerd or Docker container's CapBnd.
        const SYS_ADMIN: u64 = 1 << 21;
        const NET_ADMIN: u64 = 1 << 12;
        const CHOWN: u64 = 1;
        const ALL: u64 = (1 << 41) - 1;
        // (container securityContext, capabilities kept)
        for (sc, want) in [
            (json!({}), Some(DEFAULT)),
            (json!({"privileged": false}), Some(DEFAULT)),
            (json!({"privileged": true, "capabilities": {"drop": ["ALL"]}}), None),
            (json!({"capabilities": {"add": ["SYS_ADMIN"]}}), Some(DEFAULT | SYS_ADMIN)),
            (
                json!({"capabilities": {"add": ["cap_net_admin", "CAP_SYS_ADMIN"]}}),
                Some(DEFAULT | NET_ADMIN | SYS_ADMIN),
            ),
            (json!({"capabilities": {"drop": ["CHOWN", "SYS_ADMIN"]}}), Some(DEFAULT & !CHOWN)),
            (json!({"capabilities": {"drop": ["ALL"]}}), Some(0)),
            (json!({"capabilities": {"drop": ["all"], "add": ["CHOWN"]}}), Some(CHOWN)),
            (json!({"capabilities": {"add": ["ALL"], "drop": ["CHOWN"]}}), Some(ALL & !CHOWN)),
            (json!({"capabilities": {"add": ["ALL"], "drop": ["ALL"]}}), Some(0)),
        ] {
            let c: Container = serde_json::from_value(json!({"name": "main", "securityContext": sc})).unwrap();
            assert_eq!(capabilities(&c).map_err(|e| e.0), Ok(want), "{sc}");
        }
        let c: Container =
            serde_json::from_value(json!({"name": "main", "securityContext": {"capabilities": {"add": ["FLY"]}}}))
                .unwrap();
        assert_eq!(
            capabilities(&c).unwrap_err().0,
            "container \"main\": securityContext.capabilities.add: unknown capability \"FLY\""
        );
        let s = secured(json!({}), json!({"allowPrivilegeEscalation": false}), (0, 0)).unwrap();
        assert!(s.no_new_privs);
        assert!(!secured(json!({}), json!({"allowPrivilegeEscalation": true}), (0, 0)).unwrap().no_new_privs);
        assert!(!secured(json!({}), json!({}), (0, 0)).unwrap().no_new_privs);
    }

    #[test]
    fn proc_paths_are_masked_unless_privileged_or_unmasked() {
        for (sc, masked) in [
            (json!({}), true),
            (json!({"privileged": false}), true),
            (json!({"procMount": "Default"}), true),
            (json!({"capabilities": {"add": ["SYS_ADMIN"]}}), true),
            (json!({"privileged": true}), false),
            (json!({"procMount": "Unmasked"}), false),
        ] {
            assert_eq!(secured(json!({}), sc.clone(), (0, 0)).unwrap().mask_paths, masked, "{sc}");
        }
    }

    #[test]
    fn run_as_non_root_refuses_root_with_kubelets_messages() {
        // (pod securityContext, container securityContext, runtime user, error)
        for (pod_sc, c_sc, runtime, want) in [
            (
                json!({"runAsNonRoot": true}),
                json!({}),
                (0, 0),
                Some("container has runAsNonRoot and image will run as root (pod: \"p_ns(u-1)\", container: main)"),
            ),
            (
                json!({}),
                json!({"runAsNonRoot": true, "runAsUser": 0}),
                (1000, 1000),
                Some("container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: main)"),
            ),
            (json!({"runAsNonRoot": true, "runAsUser": 0}), json!({"runAsUser": 1000}), (0, 0), None),
            (json!({"runAsNonRoot": true}), json!({"runAsNonRoot": false}), (0, 0), None),
            (json!({"runAsNonRoot": true}), json!({}), (1000, 1000), None),
        ] {
            let got = secured(pod_sc.clone(), c_sc.clone(), runtime).err();
            assert_eq!(got.as_deref(), want, "pod {pod_sc} container {c_sc} runtime {runtime:?}");
        }
        // A config error (kubelet: Waiting CreateContainerConfigError), unlike an id out of range.
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "securityContext": {"runAsNonRoot": true}}}))
        .unwrap();
        let c: Container = serde_json::from_value(json!({"name": "main"})).unwrap();
        assert_eq!(security(&pod, &c, (0, 0)).unwrap_err().1, crate::runtime::ErrorKind::Config);
        let c: Container =
            serde_json::from_value(json!({"name": "main", "securityContext": {"runAsUser": -1}})).unwrap();
        assert_eq!(security(&pod, &c, (0, 0)).unwrap_err().1, crate::runtime::ErrorKind::Other);
    }

    #[test]
    fn ids_out_of_range_name_their_field() {
        for (pod_sc, c_sc, field) in [
            (json!({}), json!({"runAsUser": -1}), "securityContext.runAsUser: Invalid value: -1"),
            (json!({"runAsGroup": 2147483648u64}), json!({}), "securityContext.runAsGroup: Invalid value: 2147483648"),
            (json!({"fsGroup": -5}), json!({}), "securityContext.fsGroup"),
            (json!({"supplementalGroups": [1, -2]}), json!({}), "securityContext.supplementalGroups"),
        ] {
            let err = secured(pod_sc, c_sc, (0, 0)).unwrap_err();
            assert!(err.starts_with("container \"main\": ") && err.contains(field), "{err}");
        }
    }

    #[test]
    fn hidden_paths_are_the_outermost_outside_tmp() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        for (given, want) in [
            (p(&["/var/lib/jobset/runtime", "/var/lib/jobset"]), p(&["/var/lib/jobset"])),
            (p(&["/data/runtime"]), p(&["/data/runtime"])),
            (p(&["/tmp/jobset-1/runtime", "/tmp/jobset-1"]), p(&[])),
            (p(&["/", "relative/dir", "/srv/b", "/srv/a", "/srv/a"]), p(&["/srv/a", "/srv/b"])),
            (p(&["/srv/ab", "/srv/a"]), p(&["/srv/a", "/srv/ab"])),
        ] {
            assert_eq!(hidden_paths(&given), want, "{given:?}");
        }
    }

    #[test]
    fn in_memory_volumes_take_the_fs_group_and_their_sub_path_directories() {
        let file = |path: &str, mode| volumes::VolumeFile { path: path.into(), data: b"x".to_vec(), mode };
        let files = [file("token", 0o600), file("ca.crt", 0o644)];
        let v = VolumePlan {
            name: "sec".into(),
            source: PathBuf::from("/s/pods/u/volumes/sec"),
            prepare: Prepare::Memory(files.to_vec()),
            read_only: true,
        };
        let mount = |volume: &str, sub: Option<&str>| Mount {
            volume: volume.into(),
            source: PathBuf::new(),
            target: PathBuf::from("/m"),
            read_only: true,
            sub_path: sub.map(PathBuf::from),
        };
        let mounts = [
            mount("sec", Some("token")),
            mount("sec", Some("nested/dir")),
            mount("sec", None),
            mount("other", Some("x")),
        ];
        let m = memory_volume(&v, &files, &mounts, Some(2000));
        let modes: Vec<(&Path, u32)> = m.files.iter().map(|f| (f.path.as_path(), f.mode)).collect();
        assert_eq!(modes, [(Path::new("token"), 0o640), (Path::new("ca.crt"), 0o644)]);
        assert_eq!((m.dir_mode, m.gid), (0o2755, Some(2000)));
        assert_eq!(m.dirs, [PathBuf::from("nested/dir")], "a subPath naming a file is no directory");
        let plain = memory_volume(&v, &files, &[], None);
        assert_eq!((plain.files[0].mode, plain.dir_mode, plain.gid), (0o600, 0o755, None));
    }

    #[test]
    fn rotated_log_names_sort_by_age() {
        let a: jiff::Timestamp = "2024-01-02T03:04:05.000000009Z".parse().unwrap();
        let b: jiff::Timestamp = "2024-01-02T03:04:05.1Z".parse().unwrap();
        let (na, nb) = (rotated_name(Path::new("/l/0.log"), a), rotated_name(Path::new("/l/0.log"), b));
        assert_eq!(na, Path::new("/l/0.log.20240102-030405.000000009"));
        assert!(na < nb);
    }
}
