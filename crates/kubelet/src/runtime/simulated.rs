//! The simulated runtime (in the spirit of kwok's stages): containers do not execute; each run
//! waits for a duration and exits with a code, both taken from pod annotations or node rules, so
//! thousands of pods fit on one machine.
//!
//! Pod annotations (prefix [`PREFIX`] = `sim.jobset.x-k8s.io/`):
//!
//! | annotation | meaning |
//! |---|---|
//! | `duration` | how long containers run: `100ms`, `2s`, `1m30s`, `forever` (default: the agent's `default_run_duration`) |
//! | `duration-<container>` | the same for one container (init containers and sidecars included) |
//! | `exit-code` | exit code of the regular containers (default 0) |
//! | `exit-code-<container>` | exit code of one container (init containers included) |
//! | `fail-indexes` | `1,3-5`: the non-zero exit code applies only to pods whose `batch.kubernetes.io/job-completion-index` is listed; others exit 0 |
//! | `fail-job-indexes` | `0,2-3`: the non-zero exit code applies only to pods whose label `jobset.sigs.k8s.io/job-index` (the child Job's index in its JobSet replicated job) is listed; others exit 0 |
//! | `fail-attempts` | `N`: only the first N attempts exit non-zero |
//! | `fail-duration` | how long a run that exits non-zero runs before it exits (default: its duration as above) |
//! | `never-ready` | `true`: running containers never become ready |
//! | `termination-delay` | how long a killed container takes to exit (at most the grace period; default 0) |
//!
//! `fail-indexes`, `fail-job-indexes` and `fail-attempts` combine by AND: a run exits non-zero
//! only if every one of them that is set says so. With any of them and no exit code, failing runs
//! exit 1. Init containers and sidecars ignore the pod-wide `exit-code`. Sidecars run until stopped
//! unless `duration-<name>` says otherwise. `fail-duration` replaces the duration of every run that
//! exits non-zero, so one worker can fail once while the others run forever: `duration: forever`,
//! `fail-job-indexes: 0`, `fail-indexes: 0`, `fail-attempts: 1`, `fail-duration: 2s` fails pod 0
//! of Job 0 once, after 2 s.
//!
//! **The in-place restart agent.** A container that runs the agent
//! ([`jobset_api::jobset::agent::runs_agent`]: the agent image, `jobset agent`, or the env vars
//! `JOBSET_NAME` and `POD_NAME`) runs the real agent logic ([`jobset_agent::run`])
//! in-process instead of a timer; the annotations above do not apply to it. It is configured from
//! the container's `env` as the `jobset agent` command would be ([`agent_config`]; the namespace
//! defaults to the pod's) and talks to the API server through the client given with
//! [`SimulatedRuntime::with_agent_client`] (without one, the container fails to start). It exits
//! with the agent's code (the in-place restart code once its attempt is deprecated); a kill stops
//! it at once (143). Its barrier answers `httpGet` probes ([`Runtime::http_probe`]) like the
//! agent's endpoint: on the barrier's path and port (from `STARTUP_PROBE_PATH`/`_PORT`, else
//! the container's own startupProbe) 200 once lifted, else 503 after holding the answer up to the
//! probe's timeout (a long poll, so the startup probe passes the moment the barrier lifts); 404
//! on another path, no connection on another port.
//!
//! In main-container mode (`WORKER_COMMAND`, the design doc's benchmark shape: one container runs
//! the agent and the worker) the agent starts and stops a simulated worker instead of a shell
//! command: each worker run resolves its duration and exit code from the annotations above as a
//! regular container named `<container>/worker` would, attempts included, so `fail-attempts: 1`
//! fails the first run only. With `KEEP_WATCH_ACROSS_RESTARTS=true` a group restart restarts the
//! worker without restarting the container. Worker runs are counted in
//! [`SimulationState::worker_runs`], since the pod's status does not show them.
//!
//! An attempt counts every earlier run of the same container of the same (namespace, owner,
//! completion index), in-place restarts included; the counts live in a [`SimulationState`] shared
//! by all simulated nodes of a process. The owner is:
//!
//! - for a pod labelled `workload.codeflare.dev/appwrapper` with a Job name (label or controlling
//!   Job): `appwrapper/<AppWrapper name>/<Job name>`, so attempts go on counting across
//!   AppWrapper resets, which recreate the Jobs;
//! - for a pod of a JobSet (label `jobset.sigs.k8s.io/jobset-uid`): `jobset/<jobset uid>/<Job
//!   name>`, the Job name taken from the label `batch.kubernetes.io/job-name` or else the
//!   controlling Job's name. A JobSet restart recreates its Jobs under the same names with new
//!   uids, so attempts go on counting across restarts and `fail-attempts: 1` fails only once;
//! - else the controlling Job's uid (`job/<uid>`);
//! - else the pod's name (`pod/<name>`).
//!
//! A pod with none of these annotations takes the first [`SimRule`] of its node whose
//! `matchLabels` match its labels.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use jobset_agent::{Endpoint, MemoryStore, NoBarrier, NoWorker, ResumeStore, Worker};
use jobset_api::appwrapper::keys::APPWRAPPER_LABEL;
use jobset_api::job::JOB_NAME_LABEL as JOB_NAME;
use jobset_api::jobset::agent::runs_agent;
use jobset_api::jobset::keys::{JOB_INDEX, JOBSET_UID};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{oneshot, watch};
use tokio_util::task::AbortOnDropHandle;

use super::{
    ContainerId, ContainerKind, ExecOutput, ExitStatus, Runtime, RuntimeError, StartRequest, Started, append_log,
    cri_line, process,
};
use crate::config::SimRule;

/// Prefix of the simulation annotations.
pub const PREFIX: &str = "sim.jobset.x-k8s.io/";
/// The Job completion index annotation (and label) on Indexed Job pods.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Exit code of a container that was stopped (SIGTERM).
pub const KILLED_EXIT_CODE: i32 = 143;

/// Identifies the runs that make up "attempts" of one container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptKey {
    pub namespace: String,
    /// `appwrapper/<AppWrapper name>/<Job name>` for pods of a Job an AppWrapper created (directly
    /// or through a JobSet), else `jobset/<jobset uid>/<Job name>` for pods of a JobSet, else `job/<controlling Job uid>`,
    /// else `pod/<pod name>`.
    pub owner: String,
    pub index: Option<u32>,
    pub container: String,
}

impl AttemptKey {
    pub fn of(pod: &Pod, container: &str) -> AttemptKey {
        let meta = &pod.metadata;
        let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).filter(|v| !v.is_empty());
        let job = meta.owner_references.iter().flatten().find(|o| o.controller == Some(true) && o.kind == "Job");
        let job_name = label(JOB_NAME).map(String::as_str).or(job.map(|o| o.name.as_str()));
        // An AppWrapper reset recreates its Jobs (and JobSets) under the same names with new
        // uids: its pods count attempts by AppWrapper name, so `fail-attempts` spans resets.
        let owner = match (label(APPWRAPPER_LABEL), label(JOBSET_UID), job_name, job) {
            (Some(aw), _, Some(name), _) => format!("appwrapper/{aw}/{name}"),
            (_, Some(uid), Some(name), _) => format!("jobset/{uid}/{name}"),
            (_, _, _, Some(o)) => format!("job/{}", o.uid),
            _ => format!("pod/{}", meta.name.as_deref().unwrap_or_default()),
        };
        AttemptKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            owner,
            index: completion_index(pod),
            container: container.to_string(),
        }
    }
}

/// Attempt counts and worker runs shared by every simulated node of a process.
#[derive(Debug, Clone)]
pub struct SimulationState {
    attempts: Arc<Mutex<HashMap<AttemptKey, u32>>>,
    workers: Arc<watch::Sender<WorkerRuns>>,
}

/// How many main-container-mode worker runs started, and how many of them ended with a non-zero
/// exit code of their own (not stopped by the agent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerRuns {
    pub started: u64,
    pub failed: u64,
}

impl Default for SimulationState {
    fn default() -> SimulationState {
        SimulationState { attempts: Arc::default(), workers: Arc::new(watch::Sender::new(WorkerRuns::default())) }
    }
}

impl SimulationState {
    pub fn new() -> SimulationState {
        SimulationState::default()
    }

    /// The worker runs of main-container-mode agents so far, updated as they start and fail.
    pub fn worker_runs(&self) -> watch::Receiver<WorkerRuns> {
        self.workers.subscribe()
    }

    /// Records a run and returns how many runs of `key` came before it.
    pub fn next_attempt(&self, key: AttemptKey) -> u32 {
        let mut m = self.attempts.lock().expect("attempt counts lock");
        let n = m.entry(key).or_insert(0);
        *n += 1;
        *n - 1
    }

    /// How many runs of `key` were recorded.
    pub fn attempts(&self, key: &AttemptKey) -> u32 {
        self.attempts.lock().expect("attempt counts lock").get(key).copied().unwrap_or(0)
    }
}

/// What one run of a container does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    /// `None`: runs until stopped.
    pub duration: Option<Duration>,
    pub exit_code: i32,
    pub ready: bool,
    /// How long a kill takes to end the container (capped by the grace period).
    pub termination_delay: Duration,
}

/// The pod's completion index (annotation, else label).
pub fn completion_index(pod: &Pod) -> Option<u32> {
    let m = &pod.metadata;
    [m.annotations.as_ref(), m.labels.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|map| map.get(COMPLETION_INDEX))
        .and_then(|v| v.parse().ok())
}

/// The index of the pod's Job within its JobSet replicated job (label
/// `jobset.sigs.k8s.io/job-index`).
pub fn job_index(pod: &Pod) -> Option<u32> {
    pod.metadata.labels.as_ref()?.get(JOB_INDEX)?.trim().parse().ok()
}

/// Parses a duration: `forever`/`inf` (→ `None`) or Go-style `1h2m3s`, `1.5s`, `100ms`, `250us`, `0`.
pub fn parse_duration(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if matches!(s, "forever" | "inf" | "infinite" | "never") {
        return Ok(None);
    }
    if s == "0" {
        return Ok(Some(Duration::ZERO));
    }
    let bad = || format!("invalid duration {s:?} (expected e.g. 100ms, 2s, 1m30s or forever)");
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if num_end == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let secs = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += n * secs;
        rest = &rest[unit_end..];
    }
    Ok(Some(Duration::from_secs_f64(total)))
}

/// Parses an interval list like `1,2` or `0-3,7`.
pub fn parse_indexes(s: &str) -> Result<Vec<(u32, u32)>, String> {
    let bad = || format!("invalid index list {s:?} (expected e.g. 1,2 or 0-3)");
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
                if a > b { Err(bad()) } else { Ok((a, b)) }
            }
            None => {
                let a = p.parse().map_err(|_| bad())?;
                Ok((a, a))
            }
        })
        .collect()
}

fn rule_annotations(rule: &SimRule) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Some(d) = &rule.duration {
        m.insert("duration".into(), d.clone());
    }
    if let Some(c) = rule.exit_code {
        m.insert("exit-code".into(), c.to_string());
    }
    if let Some(i) = &rule.fail_indexes {
        m.insert("fail-indexes".into(), i.clone());
    }
    if let Some(n) = rule.fail_attempts {
        m.insert("fail-attempts".into(), n.to_string());
    }
    if rule.never_ready {
        m.insert("never-ready".into(), "true".into());
    }
    m
}

/// The simulation settings that apply to `pod`: its `sim.jobset.x-k8s.io/` annotations (prefix
/// stripped), or else those of the first matching node rule.
pub fn settings(pod: &Pod, rules: &[SimRule]) -> BTreeMap<String, String> {
    let own: BTreeMap<String, String> = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.strip_prefix(PREFIX)?.to_string(), v.clone())))
        .collect();
    if !own.is_empty() {
        return own;
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    rules
        .iter()
        .find(|r| r.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(rule_annotations)
        .unwrap_or_default()
}

/// Resolves what one run of `container` does. `index` is the pod's completion index, `job_index`
/// its Job's index in a JobSet replicated job, `attempt` counts the earlier runs (see
/// [`AttemptKey`]). Pure: the table-driven tests pin the rules down.
pub fn resolve(
    settings: &BTreeMap<String, String>,
    index: Option<u32>,
    job_index: Option<u32>,
    container: &str,
    kind: ContainerKind,
    attempt: u32,
    default_duration: Duration,
) -> Result<Behaviour, String> {
    let get = |k: &str| settings.get(k).map(String::as_str);
    let duration = match (get(&format!("duration-{container}")), kind) {
        (Some(d), _) => parse_duration(d)?,
        (None, ContainerKind::Sidecar) => None,
        (None, _) => match get("duration") {
            Some(d) => parse_duration(d)?,
            None => Some(default_duration),
        },
    };
    let parse_code = |s: &str| s.trim().parse::<i32>().map_err(|_| format!("invalid exit code {s:?}"));
    let explicit = match (get(&format!("exit-code-{container}")), kind) {
        (Some(c), _) => Some(parse_code(c)?),
        (None, ContainerKind::Regular) => get("exit-code").map(parse_code).transpose()?,
        (None, _) => None,
    };
    let fail_indexes = get("fail-indexes").map(parse_indexes).transpose()?;
    let fail_job_indexes = get("fail-job-indexes").map(parse_indexes).transpose()?;
    let fail_attempts = get("fail-attempts")
        .map(|s| s.trim().parse::<u32>().map_err(|_| format!("invalid fail-attempts {s:?}")))
        .transpose()?;
    let gated = fail_indexes.is_some() || fail_job_indexes.is_some() || fail_attempts.is_some();
    let failing_code = if gated && (explicit.is_some() || kind == ContainerKind::Regular) {
        explicit.unwrap_or(1)
    } else {
        explicit.unwrap_or(0)
    };
    let listed = |ranges: &Option<Vec<(u32, u32)>>, i: Option<u32>| match ranges {
        Some(ranges) => i.is_some_and(|i| ranges.iter().any(|(a, b)| (*a..=*b).contains(&i))),
        None => true,
    };
    let index_fails = listed(&fail_indexes, index);
    let job_index_fails = listed(&fail_job_indexes, job_index);
    let attempt_fails = fail_attempts.is_none_or(|n| attempt < n);
    let exit_code = if index_fails && job_index_fails && attempt_fails { failing_code } else { 0 };
    let fail_duration = get("fail-duration").map(parse_duration).transpose()?;
    let duration = match fail_duration {
        Some(d) if exit_code != 0 => d,
        _ => duration,
    };
    let ready = !matches!(get("never-ready"), Some("true" | "1" | "yes"));
    let termination_delay = match get("termination-delay") {
        Some(d) => parse_duration(d)?.unwrap_or(Duration::MAX),
        None => Duration::ZERO,
    };
    Ok(Behaviour { duration, exit_code, ready, termination_delay })
}

/// A running container: how to kill it and, for an in-place restart agent, its barrier.
struct Running {
    /// Taken by the first kill; the container stays listed until its run ends (an agent's
    /// barrier keeps answering probes, never falling back to "no answer": success).
    kill: Option<oneshot::Sender<Duration>>,
    barrier: Option<BarrierProbe>,
}

/// What an agent's barrier endpoint answers from.
#[derive(Clone)]
struct BarrierProbe {
    endpoint: Endpoint,
    /// `true` once the agent lifted its barrier.
    lifted: watch::Receiver<bool>,
}

type RunningMap = Arc<Mutex<HashMap<ContainerId, Running>>>;

/// Removes a container from the running ones when its run ends or is abandoned.
struct Forget(RunningMap, ContainerId);

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&self.1);
        }
    }
}

/// Containers that only pretend to run. Cheap: one timer per running container (one task per
/// running in-place restart agent).
pub struct SimulatedRuntime {
    state: SimulationState,
    running: RunningMap,
    next_id: AtomicU64,
    agent_client: Option<kube::Client>,
    /// Each sidecar agent's watch resume point, by pod uid and container, kept across the
    /// agent's restarts as a file in its pod would be (dropped with the pod).
    resume: Mutex<HashMap<(String, String), MemoryStore>>,
}

impl SimulatedRuntime {
    pub fn new(state: SimulationState) -> SimulatedRuntime {
        SimulatedRuntime {
            state,
            running: Arc::default(),
            next_id: AtomicU64::new(1),
            agent_client: None,
            resume: Mutex::default(),
        }
    }

    /// The client the in-place restart agents run with (see the module doc). Without one, a
    /// container that runs the agent fails to start.
    pub fn with_agent_client(mut self, client: kube::Client) -> SimulatedRuntime {
        self.agent_client = Some(client);
        self
    }

    pub fn state(&self) -> &SimulationState {
        &self.state
    }

    /// How many containers are running (a killed one until it has exited).
    pub fn running(&self) -> usize {
        self.running.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Registers a new run; returns its id, its kill receiver and the guard that forgets it.
    fn register(&self, barrier: Option<BarrierProbe>) -> (ContainerId, oneshot::Receiver<Duration>, Forget) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = ContainerId(format!("sim://{n:016x}"));
        let (kill, rx) = oneshot::channel();
        let run = Running { kill: Some(kill), barrier };
        self.running.lock().expect("running containers lock").insert(id.clone(), run);
        (id.clone(), rx, Forget(self.running.clone(), id))
    }

    /// Where the agent of `container` in pod `uid` keeps its watch's resume point: the same for
    /// each run of that container, until the pod is removed.
    fn resume_store(&self, uid: &str, container: &str) -> MemoryStore {
        let mut m = self.resume.lock().expect("resume points lock");
        m.entry((uid.to_string(), container.to_string())).or_default().clone()
    }

    /// Starts the in-place restart agent for `req` (see the module doc).
    fn start_agent(&self, req: StartRequest) -> Result<Started, RuntimeError> {
        let name = req.container.name.clone();
        let Some(client) = self.agent_client.clone() else {
            return Err(RuntimeError::new(format!(
                "container {name:?}: runs the in-place restart agent but the simulated runtime has no API client"
            )));
        };
        let mut cfg = agent_config(&req)?;
        if cfg.resume != ResumeStore::Off {
            cfg.resume =
                ResumeStore::Memory(self.resume_store(req.pod.metadata.uid.as_deref().unwrap_or_default(), &name));
        }
        // A kill stops the agent at once (a simulated worker stops at once too); a dropped switch
        // is no kill.
        let stop = |kill: oneshot::Receiver<Duration>| async move {
            match kill.await {
                Ok(_) => KILLED_EXIT_CODE,
                Err(_) => std::future::pending().await,
            }
        };
        let (id, task, forget, mode) = if cfg.worker.is_some() {
            let worker = SimWorker::new(&req, self.state.clone())?;
            let (id, kill, forget) = self.register(None);
            let task = tokio::spawn(jobset_agent::run(cfg, client, NoBarrier, Some(worker), stop(kill)));
            (id, task, forget, "main-container mode")
        } else {
            let endpoint = cfg.barrier.clone().unwrap_or_else(|| {
                jobset_agent::config::barrier_endpoint_from_pod(&req.pod, cfg.container_name.as_deref()).endpoint()
            });
            let (lift, lifted) = watch::channel(false);
            let (id, kill, forget) = self.register(Some(BarrierProbe { endpoint, lifted }));
            let task = tokio::spawn(jobset_agent::run(cfg, client, lift, None::<NoWorker>, stop(kill)));
            (id, task, forget, "sidecar")
        };
        // Dropped with the exit future: an abandoned agent container must not run on.
        let task = AbortOnDropHandle::new(task);
        let log_path = req.log_path.clone();
        if let Some(p) = &log_path {
            let line = format!("simulated container {name} started (in-place restart agent, {mode})");
            append_log(p, &[cri_line(jiff::Timestamp::now(), "stdout", &line)]);
        }
        let exit = async move {
            let _forget = forget;
            let status = match task.await {
                Ok(code) => ExitStatus::code(code),
                Err(e) => ExitStatus {
                    message: Some(format!("the in-place restart agent ended abnormally: {e}")),
                    ..ExitStatus::code(1)
                },
            };
            if let Some(p) = &log_path {
                let line = format!("in-place restart agent {name} exited with code {}", status.exit_code);
                append_log(p, &[cri_line(status.finished_at, "stdout", &line)]);
            }
            status
        }
        .boxed();
        Ok(Started { id, ready: true, exit })
    }
}

/// The agent's configuration for one run of `req`'s container, read from the container's env as
/// the `jobset agent` command reads its environment: the process runtime's resolver
/// ([`process::container_env`]: literal values with `$(VAR)` expansion, `envFrom`, `configMapKeyRef`,
/// `secretKeyRef` and downward API `fieldRef`s). The namespace defaults to the pod's (there is
/// no service-account directory), `AGENT_CONTAINER_NAME` to the container itself, the scope
/// (`AGENT_REPLICATED_JOB_NAME`, `AGENT_JOB_INDEX`) to the pod's labels (the pod is at hand: no GET).
pub fn agent_config(req: &StartRequest) -> Result<jobset_agent::AgentConfig, RuntimeError> {
    let c = &req.container;
    let mut env = process::container_env(req)?;
    let set = |k: &str| env.get(k).is_some_and(|v| !v.is_empty());
    if !set("NAMESPACE") && !set("POD_NAMESPACE") {
        let ns = req.pod.metadata.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
        env.insert("NAMESPACE".into(), ns);
    }
    let fail = |e: String| RuntimeError::new(format!("container {:?}: in-place restart agent: {e}", c.name));
    // Never read: the namespace is set above.
    let no_service_account = std::path::Path::new("/nonexistent/serviceaccount");
    let mut cfg = jobset_agent::AgentConfig::from_env(|k| env.get(k).cloned(), no_service_account)
        .map_err(|e| fail(e.to_string()))?;
    cfg.container_name.get_or_insert_with(|| c.name.clone());
    // No file system: with WATCH_STATE_FILE set, the runtime keeps the resume point in memory
    // instead (SimulatedRuntime::start_agent).
    if cfg.scope.is_none() {
        cfg.scope = req.pod.metadata.labels.as_ref().and_then(jobset_agent::decide::Scope::of_labels);
    }
    Ok(cfg)
}

/// Main-container mode's worker, simulated: each run resolves what it does as a regular container
/// named `<container>/worker` (see the module doc).
struct SimWorker {
    state: SimulationState,
    key: AttemptKey,
    settings: BTreeMap<String, String>,
    index: Option<u32>,
    job_index: Option<u32>,
    name: String,
    default_duration: Duration,
    /// The running run: when it ends by itself (`None`: never) and its exit code.
    run: Option<(Option<std::pin::Pin<Box<tokio::time::Sleep>>>, i32)>,
}

impl SimWorker {
    fn new(req: &StartRequest, state: SimulationState) -> Result<SimWorker, RuntimeError> {
        let name = format!("{}/worker", req.container.name);
        let w = SimWorker {
            key: AttemptKey::of(&req.pod, &name),
            state,
            settings: settings(&req.pod, &req.node.rules),
            index: completion_index(&req.pod),
            job_index: job_index(&req.pod),
            name,
            default_duration: req.default_run_duration,
            run: None,
        };
        // Bad annotations fail the container's start, not a later worker run.
        w.behaviour(0).map_err(|e| RuntimeError::new(format!("{PREFIX}: {e}")))?;
        Ok(w)
    }

    fn behaviour(&self, attempt: u32) -> Result<Behaviour, String> {
        let kind = ContainerKind::Regular;
        resolve(&self.settings, self.index, self.job_index, &self.name, kind, attempt, self.default_duration)
    }
}

impl Worker for SimWorker {
    fn start(&mut self) -> std::io::Result<()> {
        let b = self.behaviour(self.state.next_attempt(self.key.clone())).map_err(std::io::Error::other)?;
        self.run = Some((b.duration.map(|d| Box::pin(tokio::time::sleep(d))), b.exit_code));
        self.state.workers.send_modify(|r| r.started += 1);
        Ok(())
    }

    async fn wait(&mut self) -> i32 {
        let Some((Some(end), code)) = &mut self.run else { return std::future::pending().await };
        end.as_mut().await;
        let code = *code;
        self.run = None;
        if code != 0 {
            self.state.workers.send_modify(|r| r.failed += 1);
        }
        code
    }

    async fn stop(&mut self) {
        self.run = None;
    }
}

/// `path` as the agent's endpoint compares it: without its query, with a leading `/`.
fn request_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if path.starts_with('/') { path.to_string() } else { format!("/{path}") }
}

impl Runtime for SimulatedRuntime {
    fn start(&self, req: StartRequest) -> BoxFuture<'static, Result<Started, RuntimeError>> {
        let name = req.container.name.clone();
        let attempt = self.state.next_attempt(AttemptKey::of(&req.pod, &name));
        if runs_agent(&req.container) {
            return futures::future::ready(self.start_agent(req)).boxed();
        }
        let settings = settings(&req.pod, &req.node.rules);
        let (index, job_index) = (completion_index(&req.pod), job_index(&req.pod));
        let behaviour = match resolve(&settings, index, job_index, &name, req.kind, attempt, req.default_run_duration) {
            Ok(b) => b,
            Err(e) => return futures::future::ready(Err(RuntimeError::new(format!("{PREFIX}: {e}")))).boxed(),
        };
        let (id, rx, forget) = self.register(None);
        if let Some(p) = &req.log_path {
            append_log(
                p,
                &[cri_line(jiff::Timestamp::now(), "stdout", &format!("simulated container {name} started"))],
            );
        }
        let log_path = req.log_path.clone();
        let exit = async move {
            let _forget = forget;
            let termination_delay = behaviour.termination_delay;
            let killed = async {
                match rx.await {
                    // A container may take a while to stop, never longer than its grace period.
                    // None at all is no timer: the exit is there at once, for the pod worker to
                    // write with whatever follows it.
                    Ok(grace) if !termination_delay.min(grace).is_zero() => {
                        tokio::time::sleep(termination_delay.min(grace)).await
                    }
                    Ok(_) => {}
                    // A dropped switch (runtime gone) is not a kill.
                    Err(_) => futures::future::pending::<()>().await,
                }
            };
            let natural = async {
                match behaviour.duration {
                    Some(d) => tokio::time::sleep(d).await,
                    None => futures::future::pending().await,
                }
            };
            let (code, line) = tokio::select! {
                _ = natural => (behaviour.exit_code, format!("simulated container {name} exited with code {}", behaviour.exit_code)),
                _ = killed => (KILLED_EXIT_CODE, format!("simulated container {name} killed, exited with code {KILLED_EXIT_CODE}")),
            };
            let status = ExitStatus::code(code);
            if let Some(p) = &log_path {
                append_log(p, &[cri_line(status.finished_at, "stdout", &line)]);
            }
            status
        }
        .boxed();
        futures::future::ready(Ok(Started { id, ready: behaviour.ready, exit })).boxed()
    }

    fn kill(&self, id: &ContainerId, grace: Duration) {
        let kill = self.running.lock().ok().and_then(|mut m| m.get_mut(id)?.kill.take());
        if let Some(kill) = kill {
            let _ = kill.send(grace);
        }
    }

    fn remove_pod(&self, uid: &str) {
        if let Ok(mut m) = self.resume.lock() {
            m.retain(|(pod, _), _| pod != uid);
        }
    }

    /// Simulated containers run nothing, so a command "run" in one succeeds while it runs.
    fn exec(
        &self,
        id: &ContainerId,
        _argv: Vec<String>,
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, RuntimeError>> {
        let known = self.running.lock().map(|m| m.get(id).is_some_and(|r| r.kill.is_some())).unwrap_or(false);
        let res = if known {
            Ok(ExecOutput { exit_code: 0, output: Vec::new() })
        } else {
            Err(RuntimeError::new(format!("container {id} is not running")))
        };
        futures::future::ready(res).boxed()
    }

    /// An in-place restart agent's barrier endpoint (see the module doc); `None` for every other
    /// container, whose probes succeed as before.
    fn http_probe(
        &self,
        id: &ContainerId,
        path: &str,
        port: u16,
        wait: Duration,
    ) -> Option<BoxFuture<'static, Result<u16, String>>> {
        let barrier = self.running.lock().ok()?.get(id)?.barrier.clone()?;
        let path = request_path(path);
        Some(
            async move {
                let BarrierProbe { endpoint, mut lifted } = barrier;
                if port != endpoint.port {
                    return Err(format!(
                        "dial port {port}: connection refused (the agent's barrier listens on port {})",
                        endpoint.port
                    ));
                }
                if path != endpoint.path {
                    return Ok(404);
                }
                // Held until the barrier lifts (200) or `wait` has passed (503).
                match tokio::time::timeout(wait, lifted.wait_for(|lifted| *lifted)).await {
                    Ok(Ok(_)) => Ok(200),
                    Ok(Err(_)) => Err("the in-place restart agent has exited".into()),
                    Err(_) => Ok(503),
                }
            }
            .boxed(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerKind::*;

    fn s(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const D: Duration = Duration::from_secs(1);

    #[test]
    fn durations() {
        let ms = |n| Some(Some(Duration::from_millis(n)));
        for (input, want) in [
            ("100ms", ms(100)),
            ("2s", ms(2000)),
            ("1.5s", ms(1500)),
            ("1m30s", ms(90_000)),
            ("1h", ms(3_600_000)),
            ("0", ms(0)),
            ("forever", Some(None)),
            ("", None),
            ("10", None),
            ("s", None),
            ("3days", None),
        ] {
            assert_eq!(parse_duration(input).ok(), want, "{input}");
        }
    }

    #[test]
    fn index_lists() {
        assert_eq!(parse_indexes("1,2").unwrap(), [(1, 1), (2, 2)]);
        assert_eq!(parse_indexes("0-3, 7").unwrap(), [(0, 3), (7, 7)]);
        assert!(parse_indexes("3-1").is_err());
        assert!(parse_indexes("a").is_err());
    }

    /// Index 0 fails its first attempt after 200 ms; everything else runs forever.
    fn fail_once() -> BTreeMap<String, String> {
        s(&[("duration", "forever"), ("fail-indexes", "0"), ("fail-attempts", "1"), ("fail-duration", "200ms")])
    }

    /// (settings, index, container, kind, attempt, duration, exit code, ready)
    type Case = (BTreeMap<String, String>, Option<u32>, &'static str, ContainerKind, u32, Option<Duration>, i32, bool);

    #[test]
    fn behaviour_resolution() {
        // (settings, index, container, kind, attempt) → (duration, exit code, ready)
        let ms = |n| Some(Duration::from_millis(n));
        let cases: Vec<Case> = vec![
            (s(&[]), None, "main", Regular, 0, Some(D), 0, true),
            (s(&[("duration", "50ms")]), None, "main", Regular, 0, ms(50), 0, true),
            (s(&[("duration", "forever")]), None, "main", Regular, 0, None, 0, true),
            (s(&[("exit-code", "3")]), None, "main", Regular, 0, Some(D), 3, true),
            (s(&[("exit-code", "3"), ("exit-code-side", "4")]), None, "side", Regular, 0, Some(D), 4, true),
            (s(&[("exit-code", "3"), ("exit-code-side", "4")]), None, "main", Regular, 0, Some(D), 3, true),
            // Init containers and sidecars ignore the pod-wide exit code.
            (s(&[("exit-code", "3")]), None, "init", Init, 0, Some(D), 0, true),
            (s(&[("exit-code-init", "2")]), None, "init", Init, 0, Some(D), 2, true),
            (s(&[("duration", "50ms")]), None, "proxy", Sidecar, 0, None, 0, true),
            (s(&[("duration-proxy", "50ms")]), None, "proxy", Sidecar, 0, ms(50), 0, true),
            (s(&[("duration", "1s"), ("duration-main", "5ms")]), None, "main", Regular, 0, ms(5), 0, true),
            // fail-indexes: only listed indexes fail; default failing code 1.
            (s(&[("fail-indexes", "1,3-4")]), Some(1), "main", Regular, 0, Some(D), 1, true),
            (s(&[("fail-indexes", "1,3-4")]), Some(4), "main", Regular, 0, Some(D), 1, true),
            (s(&[("fail-indexes", "1,3-4")]), Some(2), "main", Regular, 0, Some(D), 0, true),
            (s(&[("fail-indexes", "1")]), None, "main", Regular, 0, Some(D), 0, true),
            (s(&[("fail-indexes", "0"), ("exit-code", "7")]), Some(0), "main", Regular, 0, Some(D), 7, true),
            (s(&[("fail-indexes", "0"), ("exit-code", "7")]), Some(1), "main", Regular, 0, Some(D), 0, true),
            // fail-attempts: the first N attempts fail.
            (s(&[("fail-attempts", "2"), ("exit-code", "5")]), None, "main", Regular, 0, Some(D), 5, true),
            (s(&[("fail-attempts", "2"), ("exit-code", "5")]), None, "main", Regular, 1, Some(D), 5, true),
            (s(&[("fail-attempts", "2"), ("exit-code", "5")]), None, "main", Regular, 2, Some(D), 0, true),
            (s(&[("fail-attempts", "1"), ("fail-indexes", "2")]), Some(2), "main", Regular, 0, Some(D), 1, true),
            (s(&[("fail-attempts", "1"), ("fail-indexes", "2")]), Some(2), "main", Regular, 1, Some(D), 0, true),
            (s(&[("fail-attempts", "1"), ("fail-indexes", "2")]), Some(1), "main", Regular, 0, Some(D), 0, true),
            // Gating does not make init containers fail unless they have their own code.
            (s(&[("fail-attempts", "1")]), None, "init", Init, 0, Some(D), 0, true),
            (s(&[("never-ready", "true")]), None, "main", Regular, 0, Some(D), 0, false),
            // fail-duration: how long a failing run runs; runs that do not fail keep `duration`.
            (fail_once(), Some(0), "main", Regular, 0, ms(200), 1, true),
            (fail_once(), Some(0), "main", Regular, 1, None, 0, true),
            (fail_once(), Some(1), "main", Regular, 0, None, 0, true),
            (s(&[("fail-duration", "200ms")]), None, "main", Regular, 0, Some(D), 0, true),
            (s(&[("fail-duration", "200ms"), ("exit-code", "3")]), None, "main", Regular, 0, ms(200), 3, true),
            (s(&[("fail-duration", "forever"), ("exit-code", "3")]), None, "main", Regular, 0, None, 3, true),
            (
                s(&[("fail-duration", "5ms"), ("duration-main", "1s"), ("exit-code", "3")]),
                None,
                "main",
                Regular,
                0,
                ms(5),
                3,
                true,
            ),
            // A sidecar gated to fail has no failing code of its own: it keeps running.
            (fail_once(), Some(0), "proxy", Sidecar, 0, None, 0, true),
            (s(&[("fail-duration", "5ms"), ("exit-code-init", "2")]), None, "init", Init, 0, ms(5), 2, true),
        ];
        for (i, (settings, index, name, kind, attempt, duration, code, ready)) in cases.into_iter().enumerate() {
            let b = resolve(&settings, index, None, name, kind, attempt, D).unwrap();
            assert_eq!(
                b,
                Behaviour { duration, exit_code: code, ready, termination_delay: Duration::ZERO },
                "case {i}: {settings:?} {index:?} {name}"
            );
        }
        for bad in [
            ("duration", "soon"),
            ("exit-code", "x"),
            ("fail-indexes", "a-b"),
            ("fail-job-indexes", "2-1"),
            ("fail-attempts", "-1"),
            ("fail-duration", "soon"),
        ] {
            assert!(resolve(&s(&[bad]), None, None, "main", Regular, 0, D).is_err(), "{bad:?}");
        }
    }

    /// Exit code of a regular container with `settings`, completion index, job index and attempt.
    fn code(settings: &[(&str, &str)], index: Option<u32>, job_index: Option<u32>, attempt: u32) -> i32 {
        resolve(&s(settings), index, job_index, "main", Regular, attempt, D).unwrap().exit_code
    }

    #[test]
    fn fail_job_indexes_fail_only_pods_of_the_listed_jobs() {
        let set = [("fail-job-indexes", "0,2-3")];
        assert_eq!(code(&set, None, Some(0), 0), 1);
        assert_eq!(code(&set, None, Some(2), 0), 1);
        assert_eq!(code(&set, None, Some(3), 0), 1);
        assert_eq!(code(&set, None, Some(1), 0), 0);
        assert_eq!(code(&set, None, Some(4), 0), 0);
        // A pod outside any JobSet has no job index and is never listed.
        assert_eq!(code(&set, None, None, 0), 0);
        assert_eq!(code(&[("fail-job-indexes", "1"), ("exit-code", "3")], None, Some(1), 0), 3);
        assert_eq!(code(&[("fail-job-indexes", "1"), ("exit-code", "3")], None, Some(0), 0), 0);
    }

    #[test]
    fn fail_job_indexes_combine_with_fail_indexes_and_fail_attempts_by_and() {
        let set = [("fail-job-indexes", "1"), ("fail-indexes", "0"), ("fail-attempts", "1"), ("exit-code", "2")];
        assert_eq!(code(&set, Some(0), Some(1), 0), 2, "every gate says fail");
        assert_eq!(code(&set, Some(1), Some(1), 0), 0, "completion index not listed");
        assert_eq!(code(&set, Some(0), Some(0), 0), 0, "job index not listed");
        assert_eq!(code(&set, Some(0), Some(1), 1), 0, "attempts used up");
        let set = [("fail-job-indexes", "2"), ("fail-attempts", "1")];
        assert_eq!(code(&set, None, Some(2), 0), 1);
        assert_eq!(code(&set, None, Some(2), 1), 0);
    }

    #[test]
    fn job_index_is_read_from_the_jobset_label() {
        assert_eq!(job_index(&pod(&[], &[(JOB_INDEX, "3")])), Some(3));
        assert_eq!(job_index(&pod(&[], &[])), None);
        assert_eq!(job_index(&pod(&[], &[(JOB_INDEX, "x")])), None);
        // Only the label counts, like upstream's pod selectors.
        assert_eq!(job_index(&pod(&[(JOB_INDEX, "3")], &[])), None);
    }

    fn pod(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        p.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        p
    }

    #[test]
    fn annotations_win_over_node_rules() {
        let rules = vec![
            SimRule { match_labels: s(&[("app", "x")]), exit_code: Some(9), ..Default::default() },
            SimRule { duration: Some("5s".into()), ..Default::default() },
        ];
        let annotated = pod(&[("sim.jobset.x-k8s.io/exit-code", "2"), ("other/x", "y")], &[("app", "x")]);
        assert_eq!(settings(&annotated, &rules), s(&[("exit-code", "2")]));
        assert_eq!(settings(&pod(&[], &[("app", "x")]), &rules), s(&[("exit-code", "9")]));
        assert_eq!(settings(&pod(&[], &[("app", "y")]), &rules), s(&[("duration", "5s")]));
        assert_eq!(settings(&pod(&[], &[]), &[]), s(&[]));
    }

    #[test]
    fn attempts_are_keyed_by_owner_index_and_container() {
        let state = SimulationState::new();
        let mut a = pod(&[(COMPLETION_INDEX, "1")], &[]);
        a.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "j".into(),
            uid: "u1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let mut b = a.clone();
        b.metadata.name = Some("other-pod-same-index".into());
        assert_eq!(state.next_attempt(AttemptKey::of(&a, "main")), 0);
        assert_eq!(state.next_attempt(AttemptKey::of(&b, "main")), 1);
        assert_eq!(state.next_attempt(AttemptKey::of(&a, "side")), 0);
        let mut c = a.clone();
        c.metadata.annotations = Some(s(&[(COMPLETION_INDEX, "2")]));
        assert_eq!(state.next_attempt(AttemptKey::of(&c, "main")), 0);
        assert_eq!(state.attempts(&AttemptKey::of(&a, "main")), 2);
        assert_eq!(AttemptKey::of(&pod(&[], &[]), "main").owner, "pod/p");
    }

    fn owned_by_job(mut p: Pod, name: &str, uid: &str) -> Pod {
        p.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        p
    }

    #[test]
    fn jobset_pods_keep_counting_attempts_when_their_job_is_recreated() {
        let state = SimulationState::new();
        let labels = [(JOBSET_UID, "js-1"), (JOB_NAME, "train-workers-0")];
        let first = owned_by_job(pod(&[(COMPLETION_INDEX, "0")], &labels), "train-workers-0", "job-uid-1");
        // The JobSet restarts: same Job name, new Job uid, new pod.
        let mut second = owned_by_job(pod(&[(COMPLETION_INDEX, "0")], &labels), "train-workers-0", "job-uid-2");
        second.metadata.name = Some("train-workers-0-0-xyz".into());
        assert_eq!(AttemptKey::of(&first, "main").owner, "jobset/js-1/train-workers-0");
        assert_eq!(state.next_attempt(AttemptKey::of(&first, "main")), 0);
        assert_eq!(state.next_attempt(AttemptKey::of(&second, "main")), 1);
        // So `fail-attempts: 1` fails the first run only.
        let fail_once = [("fail-attempts", "1")];
        assert_eq!(code(&fail_once, Some(0), None, 0), 1);
        assert_eq!(code(&fail_once, Some(0), None, 1), 0);
    }

    #[test]
    fn jobset_pods_of_different_jobs_or_jobsets_count_apart() {
        let state = SimulationState::new();
        let of = |js: &str, job: &str| {
            owned_by_job(pod(&[(COMPLETION_INDEX, "0")], &[(JOBSET_UID, js), (JOB_NAME, job)]), job, "same-uid")
        };
        assert_eq!(state.next_attempt(AttemptKey::of(&of("js-1", "a-w-0"), "main")), 0);
        assert_eq!(state.next_attempt(AttemptKey::of(&of("js-1", "a-w-1"), "main")), 0);
        assert_eq!(state.next_attempt(AttemptKey::of(&of("js-2", "a-w-0"), "main")), 0);
        assert_eq!(state.next_attempt(AttemptKey::of(&of("js-1", "a-w-0"), "main")), 1);
    }

    #[test]
    fn jobset_pods_without_a_job_name_label_use_the_controlling_job_name() {
        let p = owned_by_job(pod(&[], &[(JOBSET_UID, "js-1")]), "train-driver-0", "u9");
        assert_eq!(AttemptKey::of(&p, "main").owner, "jobset/js-1/train-driver-0");
        // With neither a job-name label nor a controlling Job the pod counts on its own.
        assert_eq!(AttemptKey::of(&pod(&[], &[(JOBSET_UID, "js-1")]), "main").owner, "pod/p");
    }

    #[test]
    fn pods_outside_a_jobset_keep_the_job_uid_key() {
        let p = owned_by_job(pod(&[], &[(JOB_NAME, "plain")]), "plain", "u1");
        assert_eq!(AttemptKey::of(&p, "main").owner, "job/u1");
        let recreated = owned_by_job(pod(&[], &[(JOB_NAME, "plain")]), "plain", "u2");
        assert_ne!(AttemptKey::of(&p, "main"), AttemptKey::of(&recreated, "main"));
    }

    #[tokio::test]
    async fn runs_exit_and_kills() {
        use crate::config::NodeConfig;
        let rt = SimulatedRuntime::new(SimulationState::new());
        let dir = tempfile::tempdir().unwrap();
        let req = |ann: &[(&str, &str)], log: Option<std::path::PathBuf>| StartRequest {
            pod: Arc::new(pod(ann, &[])),
            container: k8s_openapi::api::core::v1::Container { name: "main".into(), ..Default::default() },
            kind: Regular,
            restart_count: 0,
            node: Arc::new(NodeConfig::new("n")),
            default_run_duration: Duration::from_millis(1),
            log_path: log,
            pod_ip: "10.0.0.1".into(),
            resources: Arc::default(),
        };
        let log = dir.path().join("main/0.log");
        let started = rt.start(req(&[("sim.jobset.x-k8s.io/exit-code", "4")], Some(log.clone()))).await.unwrap();
        assert_eq!(started.exit.await.exit_code, 4);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("stdout F simulated container main started\n"), "{text}");
        assert!(text.contains("exited with code 4\n"), "{text}");

        let forever = rt.start(req(&[("sim.jobset.x-k8s.io/duration", "forever")], None)).await.unwrap();
        assert_eq!(rt.running(), 1);
        rt.kill(&forever.id, Duration::from_secs(30));
        assert_eq!(forever.exit.await.exit_code, KILLED_EXIT_CODE);
        assert_eq!(rt.running(), 0);

        let dropped = rt.start(req(&[("sim.jobset.x-k8s.io/duration", "forever")], None)).await.unwrap();
        drop(dropped);
        assert_eq!(rt.running(), 0);

        let err = rt.start(req(&[("sim.jobset.x-k8s.io/duration", "soon")], None)).await.unwrap_err();
        assert!(err.0.contains("invalid duration"), "{err}");
    }
}

#[cfg(test)]
mod agent_tests {
    //! The in-place restart agent in the simulated runtime, against the embedded API server (the
    //! test writes the JobSet status in the controller's place).

    use k8s_openapi::api::core::v1::Container;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;
    use crate::config::NodeConfig;

    const NS: &str = "team";
    const WAIT: Duration = Duration::from_secs(20);

    fn agent_container(env: serde_json::Value) -> Container {
        serde_json::from_value(json!({
            "name": "agent", "image": "registry.k8s.io/jobset/in-place-restart-agent:v0.1.0",
            "restartPolicy": "Always",
            "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": 8081}, "periodSeconds": 1},
            "env": env,
        }))
        .unwrap()
    }

    fn standard_env() -> serde_json::Value {
        json!([
            {"name": "JOBSET_NAME", "valueFrom": {"fieldRef":
                {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ])
    }

    fn agent_pod(container: &Container) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "train-w-0-0", "namespace": NS,
                         "annotations": {"jobset.sigs.k8s.io/jobset-name": "train"},
                         "labels": {"app": "x"}},
            "spec": {"initContainers": [container], "containers": [{"name": "worker", "image": "busybox"}]}
        }))
        .unwrap()
    }

    fn request(pod: Pod, container: Container) -> StartRequest {
        StartRequest {
            pod: Arc::new(pod),
            container,
            kind: ContainerKind::Sidecar,
            restart_count: 0,
            node: Arc::new(NodeConfig::new("n")),
            default_run_duration: Duration::from_millis(1),
            log_path: None,
            pod_ip: "10.0.0.1".into(),
            resources: Arc::default(),
        }
    }

    fn config_of(env: serde_json::Value) -> Result<jobset_agent::AgentConfig, RuntimeError> {
        let c = agent_container(env);
        agent_config(&request(agent_pod(&c), c))
    }

    #[test]
    fn agent_config_resolves_field_refs_and_defaults_the_namespace_and_container() {
        let cfg = config_of(standard_env()).unwrap();
        assert_eq!(
            (cfg.namespace.as_str(), cfg.jobset_name.as_str(), cfg.pod_name.as_str()),
            (NS, "train", "train-w-0-0")
        );
        assert_eq!(cfg.container_name.as_deref(), Some("agent"));
        assert_eq!(cfg.barrier, None, "taken from the startupProbe");
        assert_eq!(cfg.exit_code, 1);
        assert_eq!(cfg.backoff, jobset_agent::BackoffConfig::default());

        let cfg = config_of(json!([
            {"name": "JOBSET_NAME", "value": "other"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "value": "elsewhere"},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "AGENT_CONTAINER_NAME", "value": "sidecar-$(APP)"},
            {"name": "STARTUP_PROBE_PORT", "value": "9000"},
        ]))
        .unwrap();
        assert_eq!((cfg.namespace.as_str(), cfg.jobset_name.as_str()), ("elsewhere", "other"));
        // `$(VAR)` expands as in a real container.
        assert_eq!(cfg.container_name.as_deref(), Some("sidecar-x"));
        assert_eq!(cfg.barrier, Some(Endpoint { path: "/barrier-is-down".into(), port: 9000 }));
        let cfg = config_of(json!([
            {"name": "JOBSET_NAME", "value": "js"}, {"name": "POD_NAME", "value": "p"},
            {"name": "RESTART_POD_IN_PLACE_EXIT_CODE", "value": "42"},
        ]))
        .unwrap();
        assert_eq!(cfg.exit_code, 42);
    }

    #[test]
    fn agent_config_takes_the_scope_from_the_pod_labels_unless_set() {
        let scope = |rjob: &str, index: i32| {
            Some(jobset_agent::decide::Scope { replicated_job: rjob.into(), job_index: index })
        };
        let c = agent_container(standard_env());
        let mut pod = agent_pod(&c);
        assert_eq!(agent_config(&request(pod.clone(), c.clone())).unwrap().scope, None, "no labels: read when needed");
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert("jobset.sigs.k8s.io/replicatedjob-name".into(), "workers".into());
        labels.insert("jobset.sigs.k8s.io/job-index".into(), "1".into());
        assert_eq!(agent_config(&request(pod.clone(), c)).unwrap().scope, scope("workers", 1));
        let mut env = standard_env();
        let set = [
            json!({"name": "AGENT_REPLICATED_JOB_NAME", "value": "driver"}),
            json!({"name": "AGENT_JOB_INDEX", "value": "0"}),
        ];
        env.as_array_mut().unwrap().extend(set);
        let c = agent_container(env);
        assert_eq!(agent_config(&request(pod, c)).unwrap().scope, scope("driver", 0), "the env wins");
    }

    #[test]
    fn agent_config_errors_name_the_container() {
        let err = config_of(json!([{"name": "POD_NAME", "value": "p"}])).unwrap_err();
        assert!(err.0.contains("container \"agent\"") && err.0.contains("JOBSET_NAME is required"), "{err}");
        let err = config_of(json!([
            {"name": "JOBSET_NAME", "value": "js"}, {"name": "POD_NAME", "value": "p"},
            {"name": "WORKER_COMMAND", "value": "train"}, {"name": "STARTUP_PROBE_PORT", "value": "8081"},
        ]))
        .unwrap_err();
        assert!(err.0.contains("container \"agent\"") && err.0.contains("WORKER_COMMAND"), "{err}");
        let err = config_of(json!([
            {"name": "JOBSET_NAME", "value": "js"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}},
        ]))
        .unwrap_err();
        assert!(err.0.contains("unsupported fieldRef"), "{err}");
    }

    #[test]
    fn agent_resume_points_are_kept_per_pod_and_container_until_the_pod_goes() {
        let rt = SimulatedRuntime::new(SimulationState::new());
        let first = rt.resume_store("u1", "agent");
        // (pod, container, shares the first run's resume point)
        let cases = [("u1", "agent", true), ("u2", "agent", false), ("u1", "other", false)];
        for (uid, container, same) in cases {
            assert_eq!(rt.resume_store(uid, container) == first, same, "{uid}/{container}");
        }
        rt.remove_pod("u1");
        assert!(rt.resume_store("u1", "agent") != first, "dropped with its pod");
        assert!(rt.resume_store("u2", "agent") == rt.resume_store("u2", "agent"), "other pods keep theirs");
        // The agent's own default, a file in /tmp, would be the host's /tmp here.
        assert_eq!(config_of(standard_env()).unwrap().resume, ResumeStore::Off);
    }

    #[tokio::test]
    async fn an_agent_container_needs_a_client() {
        let rt = SimulatedRuntime::new(SimulationState::new());
        let c = agent_container(standard_env());
        let err = rt.start(request(agent_pod(&c), c)).await.unwrap_err();
        assert_eq!(
            err.0,
            "container \"agent\": runs the in-place restart agent but the simulated runtime has no API client"
        );
    }

    /// A server with the JobSet `train` (InPlaceRestart) and the agent's pod.
    async fn server_with_jobset(pod: &Pod) -> kube::Client {
        let server = jobset_apiserver::ApiServer::in_memory();
        let client = server.client();
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        Api::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let js: jobset_api::jobset::JobSet = serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": NS},
            "spec": {
                "failurePolicy": {"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
                "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                    "completions": 1, "parallelism": 1,
                    "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "worker", "image": "busybox"}]}}
                }}}]
            }
        }))
        .unwrap();
        Api::namespaced(client.clone(), NS).create(&PostParams::default(), &js).await.unwrap();
        Api::namespaced(client.clone(), NS).create(&PostParams::default(), pod).await.unwrap();
        client
    }

    async fn set_status(client: &kube::Client, status: serde_json::Value) {
        Api::<jobset_api::jobset::JobSet>::namespaced(client.clone(), NS)
            .patch_status("train", &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }

    /// Waits (through a watch) until the agent's pod carries attempt `want`.
    async fn announced(client: &kube::Client, want: &str) {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let pods = Api::<Pod>::namespaced(client.clone(), NS);
        let mut events = watcher(pods, watcher::Config::default().fields("metadata.name=train-w-0-0")).boxed();
        let attempt =
            |p: &Pod| p.metadata.annotations.as_ref()?.get(jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT).cloned();
        let seen = tokio::time::timeout(WAIT, async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                    && attempt(&p).as_deref() == Some(want)
                {
                    return;
                }
            }
        })
        .await;
        assert!(seen.is_ok(), "the agent did not announce attempt {want}");
    }

    fn probe(
        rt: &SimulatedRuntime,
        id: &ContainerId,
        path: &str,
        port: u16,
        wait: Duration,
    ) -> BoxFuture<'static, Result<u16, String>> {
        rt.http_probe(id, path, port, wait).expect("the runtime answers an agent's probe")
    }

    #[tokio::test]
    async fn the_agent_announces_holds_the_barrier_until_synced_and_exits_when_deprecated() {
        let mut env = standard_env();
        // A fast back-off, as a pod would set it.
        env.as_array_mut().unwrap().extend([
            json!({"name": "WATCH_BACKOFF_INITIAL", "value": "10ms"}),
            json!({"name": "WATCH_BACKOFF_MAX", "value": "100ms"}),
        ]);
        let c = agent_container(env);
        let pod = agent_pod(&c);
        let client = server_with_jobset(&pod).await;
        let rt = SimulatedRuntime::new(SimulationState::new()).with_agent_client(client.clone());
        let started = rt.start(request(pod, c)).await.unwrap();
        let id = started.id.clone();
        assert_eq!(rt.running(), 1);

        // Held: 503 once the wait is over; another path is 404, another port no connection.
        assert_eq!(probe(&rt, &id, "/barrier-is-down", 8081, Duration::from_millis(50)).await, Ok(503));
        assert_eq!(probe(&rt, &id, "/other", 8081, WAIT).await, Ok(404));
        assert!(probe(&rt, &id, "/barrier-is-down", 80, WAIT).await.unwrap_err().contains("connection refused"));
        // A held probe answers 200 the moment the barrier lifts.
        let held = tokio::spawn(probe(&rt, &id, "barrier-is-down?x=1", 8081, WAIT));
        announced(&client, "0").await;
        assert!(!held.is_finished());
        set_status(&client, json!({"currentInPlaceRestartAttempt": 0})).await;
        assert_eq!(tokio::time::timeout(WAIT, held).await.expect("answered").unwrap(), Ok(200));

        // Deprecated: the agent exits with the in-place restart code.
        set_status(&client, json!({"previousInPlaceRestartAttempt": 0})).await;
        let exit = tokio::time::timeout(WAIT, started.exit).await.expect("the agent exited");
        assert_eq!(exit.exit_code, 1);
        assert_eq!(rt.running(), 0);
        assert!(rt.http_probe(&id, "/barrier-is-down", 8081, WAIT).is_none(), "gone with its container");
    }

    #[tokio::test]
    async fn main_container_mode_restarts_its_simulated_worker_without_leaving_the_container() {
        let c: Container = serde_json::from_value(json!({
            "name": "trainer", "image": "registry.k8s.io/jobset/in-place-restart-agent:v0.1.0",
            "env": [
                {"name": "JOBSET_NAME", "value": "train"}, {"name": "POD_NAME", "value": "train-w-0-0"},
                {"name": "WORKER_COMMAND", "value": "python train.py"},
                {"name": "KEEP_WATCH_ACROSS_RESTARTS", "value": "true"},
            ],
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "train-w-0-0", "namespace": NS, "annotations": {
                "sim.jobset.x-k8s.io/duration": "forever",
                "sim.jobset.x-k8s.io/fail-attempts": "1",
                "sim.jobset.x-k8s.io/fail-duration": "10ms"}},
            "spec": {"containers": [c]}
        }))
        .unwrap();
        let client = server_with_jobset(&pod).await;
        let state = SimulationState::new();
        let runs = state.worker_runs();
        let rt = SimulatedRuntime::new(state).with_agent_client(client.clone());
        let started = rt.start(StartRequest { kind: ContainerKind::Regular, ..request(pod, c) }).await.unwrap();
        let runs_reach = |want: WorkerRuns| {
            let mut runs = runs.clone();
            async move {
                let seen = tokio::time::timeout(WAIT, runs.wait_for(|r| *r == want)).await.is_ok();
                assert!(seen, "worker runs never reached {want:?}: {:?}", *runs.borrow());
            }
        };

        // Held until attempt 0 is current; then the first run fails by itself.
        announced(&client, "0").await;
        assert_eq!(*runs.borrow(), WorkerRuns::default());
        set_status(&client, json!({"currentInPlaceRestartAttempt": 0})).await;
        runs_reach(WorkerRuns { started: 1, failed: 1 }).await;
        // The agent stays, announces the next attempt and restarts the worker once it is current.
        announced(&client, "1").await;
        set_status(&client, json!({"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0})).await;
        runs_reach(WorkerRuns { started: 2, failed: 1 }).await;
        assert_eq!(rt.running(), 1, "the container still runs");

        rt.kill(&started.id, Duration::from_secs(30));
        let exit = tokio::time::timeout(WAIT, started.exit).await.expect("the agent stopped");
        assert_eq!(exit.exit_code, KILLED_EXIT_CODE);
    }

    #[tokio::test]
    async fn killing_an_agent_stops_it_with_143_and_dropping_it_aborts_it() {
        let c = agent_container(standard_env());
        let pod = agent_pod(&c);
        let client = server_with_jobset(&pod).await;
        let rt = SimulatedRuntime::new(SimulationState::new()).with_agent_client(client.clone());
        let started = rt.start(request(pod.clone(), c.clone())).await.unwrap();
        rt.kill(&started.id, Duration::from_secs(30));
        let exit = tokio::time::timeout(WAIT, started.exit).await.expect("the agent stopped");
        assert_eq!(exit.exit_code, KILLED_EXIT_CODE);

        // Dropping the exit future aborts the agent's task, which drops its barrier: a probe held
        // on it ends at once instead of waiting.
        let started = rt.start(request(pod, c)).await.unwrap();
        let held = probe(&rt, &started.id, "/barrier-is-down", 8081, WAIT);
        assert_eq!(rt.running(), 1);
        drop(started);
        assert_eq!(rt.running(), 0);
        let answer = tokio::time::timeout(Duration::from_secs(5), held).await.expect("the agent task was aborted");
        assert_eq!(answer, Err("the in-place restart agent has exited".to_string()));
    }
}
