//! The agent's settings, read from its container's environment. Both upstream's variable names
//! (`cmd/in-place-restart-agent`) and the design doc's are accepted; see docs/in-place-restart.md.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::decide::Scope;
use crate::resume::ResumeStore;

/// Where a pod's service-account files are mounted.
pub const DEFAULT_SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Upstream's default barrier path and port.
pub const DEFAULT_BARRIER_PATH: &str = "/barrier-is-down";
pub const DEFAULT_BARRIER_PORT: u16 = 8081;
/// Upstream's default exit code that triggers the in-place restart.
pub const DEFAULT_EXIT_CODE: i32 = 1;

/// Everything the agent needs. Construct with [`AgentConfig::new`] (in-process) or
/// [`AgentConfig::from_env`] (the `jobset agent` command).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentConfig {
    pub namespace: String,
    pub jobset_name: String,
    pub pod_name: String,
    /// Where the barrier answers the startup probe (sidecar mode). `None`: take it from the pod's
    /// own startupProbe ([`barrier_endpoint_from_pod`]).
    pub barrier: Option<Endpoint>,
    /// `AGENT_CONTAINER_NAME`: the agent's container, to find its startupProbe.
    pub container_name: Option<String>,
    /// The exit code whose restartPolicyRule restarts the pod (sidecar) or the container in place.
    pub exit_code: i32,
    /// Main-container mode: the agent runs the worker itself.
    pub worker: Option<WorkerConfig>,
    /// Back-off of the JobSet watch, the pod GET and the annotation write.
    pub backoff: BackoffConfig,
    /// Extension `BARRIER_HOLD`: how long the barrier endpoint holds a probe while the barrier is
    /// up, answering 200 the moment it lifts ([`crate::HttpBarrier`]; zero: 503 at once).
    pub barrier_hold: Duration,
    /// `AGENT_REPLICATED_JOB_NAME` and `AGENT_JOB_INDEX`: the pod's scope, which selects the status entries
    /// of scoped in-place restart that cover it. `None`: read from the pod's labels the first
    /// time the JobSet's status carries a scoped entry (see [`AgentConfig::with_scope`]).
    pub scope: Option<Scope>,
    /// Where the agent keeps its JobSet watch's resume point across its own restarts
    /// (`WATCH_STATE_FILE`, see [`crate::resume`]).
    pub resume: ResumeStore,
    /// `WATCH_LIST_TIMEOUT`: an agent with no resume point opens one watch with
    /// `sendInitialEvents` (a streaming list) instead of a list and a watch, and lists and
    /// watches if the `k8s.io/initial-events-end` bookmark has not come within this time (a
    /// server that ignores the parameter). `None` (`off` or `0`): list and watch.
    pub watch_list: Option<Duration>,
}

/// The default of `WATCH_LIST_TIMEOUT` (client-go warns after as long without the bookmark).
pub const DEFAULT_WATCH_LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// The file `WATCH_STATE_FILE=on` means, `<this>-<POD_NAME>.json`: in a process pod's `/tmp`, which
/// outlives its containers (named after the pod, for pods that share the host's `/tmp`).
pub const DEFAULT_WATCH_STATE_FILE: &str = "/tmp/jobset-in-place-restart-agent";

/// An HTTP path and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub path: String,
    pub port: u16,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint { path: DEFAULT_BARRIER_PATH.into(), port: DEFAULT_BARRIER_PORT }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    pub shell: String,
    pub command: String,
    /// Extension `KEEP_WATCH_ACROSS_RESTARTS`: restart the worker in the same agent process
    /// instead of exiting for the container restart.
    pub keep_watch: bool,
    /// Between SIGTERM and SIGKILL when the worker is stopped.
    pub kill_grace: Duration,
}

/// Exponential back-off with jitter: the n-th delay (from 0) is `min(max, initial * 2^n)`,
/// reduced by a random fraction of up to `jitter` (1.0 = "full jitter": uniform in [0, delay]),
/// so that the thousands of agents a group restart starts at once spread their retries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    pub initial: Duration,
    pub max: Duration,
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig { initial: Duration::from_millis(100), max: Duration::from_secs(10), jitter: 1.0 }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {var}={value:?}: {reason}")]
    Invalid { var: &'static str, value: String, reason: String },
    #[error("environment variables {0} and {1} disagree ({2:?} vs {3:?}); set one")]
    Conflict(&'static str, &'static str, String, String),
    #[error("{0} cannot be combined with {1}")]
    Incompatible(&'static str, &'static str),
    #[error("the namespace: neither NAMESPACE nor POD_NAMESPACE is set, and reading {path}: {error}")]
    Namespace { path: String, error: String },
    #[error("environment variable {0} is set but {1} is not; set both (the pod's scope) or neither")]
    Partial(&'static str, &'static str),
}

impl AgentConfig {
    /// Defaults for everything but the identity: upstream's barrier endpoint and exit code,
    /// sidecar mode.
    pub fn new(namespace: &str, jobset_name: &str, pod_name: &str) -> AgentConfig {
        AgentConfig {
            namespace: namespace.into(),
            jobset_name: jobset_name.into(),
            pod_name: pod_name.into(),
            barrier: Some(Endpoint::default()),
            container_name: None,
            exit_code: DEFAULT_EXIT_CODE,
            worker: None,
            backoff: BackoffConfig::default(),
            barrier_hold: crate::DEFAULT_BARRIER_HOLD,
            scope: None,
            resume: ResumeStore::Off,
            watch_list: Some(DEFAULT_WATCH_LIST_TIMEOUT),
        }
    }

    /// The pod's scope: its replicated job (label `jobset.sigs.k8s.io/replicatedjob-name`) and
    /// its Job's index (label `jobset.sigs.k8s.io/job-index`). An agent given its scope never
    /// reads its pod for it.
    pub fn with_scope(mut self, replicated_job: &str, job_index: i32) -> AgentConfig {
        self.scope = Some(Scope { replicated_job: replicated_job.into(), job_index });
        self
    }

    /// Reads the configuration through `env` (empty values count as unset); the namespace falls
    /// back to the file `<service_account_dir>/namespace`.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        service_account_dir: &Path,
    ) -> Result<AgentConfig, ConfigError> {
        let get = |k: &str| env(k).filter(|v| !v.is_empty());
        let required = |k: &'static str| get(k).ok_or(ConfigError::Missing(k));
        let jobset_name = required("JOBSET_NAME")?;
        let pod_name = required("POD_NAME")?;
        let namespace = match either(&get, "NAMESPACE", "POD_NAMESPACE")? {
            Some((_, ns)) => ns,
            None => {
                let path = service_account_dir.join("namespace");
                std::fs::read_to_string(&path)
                    .map(|s| s.trim().to_string())
                    .map_err(|e| ConfigError::Namespace { path: path.display().to_string(), error: e.to_string() })?
            }
        };

        let path = get("STARTUP_PROBE_PATH");
        let port = get("STARTUP_PROBE_PORT").map(|v| parse_port("STARTUP_PROBE_PORT", v)).transpose()?;
        let barrier = match (path, port) {
            (None, None) => None,
            (path, port) => Some(Endpoint {
                path: path.unwrap_or_else(|| DEFAULT_BARRIER_PATH.into()),
                port: port.unwrap_or(DEFAULT_BARRIER_PORT),
            }),
        };

        let exit_code = match either(&get, "IN_PLACE_RESTART_EXIT_CODE", "RESTART_POD_IN_PLACE_EXIT_CODE")? {
            Some((var, v)) => parse_exit_code(var, v)?,
            None => DEFAULT_EXIT_CODE,
        };

        let keep_watch = match get("KEEP_WATCH_ACROSS_RESTARTS") {
            Some(v) => parse_bool("KEEP_WATCH_ACROSS_RESTARTS", v)?,
            None => false,
        };
        let worker = match get("WORKER_COMMAND") {
            Some(command) => {
                // Upstream: main-container mode has no startup probe to answer.
                if barrier.is_some() {
                    return Err(ConfigError::Incompatible("WORKER_COMMAND", "STARTUP_PROBE_PATH/STARTUP_PROBE_PORT"));
                }
                Some(WorkerConfig {
                    shell: get("SHELL").unwrap_or_else(|| "/bin/sh".into()),
                    command,
                    keep_watch,
                    kill_grace: duration(&get, "WORKER_KILL_GRACE", Duration::from_secs(10))?,
                })
            }
            // A sidecar must exit for its pod to restart; there is no worker to restart instead.
            None if keep_watch => {
                return Err(ConfigError::Incompatible(
                    "KEEP_WATCH_ACROSS_RESTARTS=true",
                    "sidecar mode (no WORKER_COMMAND)",
                ));
            }
            None => None,
        };

        let defaults = BackoffConfig::default();
        let backoff = BackoffConfig {
            initial: duration(&get, "WATCH_BACKOFF_INITIAL", defaults.initial)?,
            max: duration(&get, "WATCH_BACKOFF_MAX", defaults.max)?,
            jitter: match get("WATCH_BACKOFF_JITTER") {
                Some(v) => parse_jitter(v)?,
                None => defaults.jitter,
            },
        };
        if backoff.initial.is_zero() {
            let raw = get("WATCH_BACKOFF_INITIAL").unwrap_or_default();
            return Err(invalid("WATCH_BACKOFF_INITIAL", &raw, "must be positive"));
        }
        if backoff.max < backoff.initial {
            let raw = get("WATCH_BACKOFF_MAX").unwrap_or_else(|| format!("{:?} (default)", backoff.max));
            return Err(invalid("WATCH_BACKOFF_MAX", &raw, "must not be below WATCH_BACKOFF_INITIAL"));
        }

        let resume = match get("WATCH_STATE_FILE").as_deref() {
            // Opt-in: measured slower at 5,000 simulated pods (docs/in-place-restart.md).
            None | Some("off") => ResumeStore::Off,
            Some("on") => ResumeStore::File(format!("{DEFAULT_WATCH_STATE_FILE}-{pod_name}.json").into()),
            Some(path) => ResumeStore::File(path.into()),
        };
        let watch_list = match get("WATCH_LIST_TIMEOUT").as_deref() {
            Some("off") => None,
            _ => Some(duration(&get, "WATCH_LIST_TIMEOUT", DEFAULT_WATCH_LIST_TIMEOUT)?).filter(|d| !d.is_zero()),
        };
        Ok(AgentConfig {
            namespace,
            jobset_name,
            pod_name,
            barrier,
            container_name: get("AGENT_CONTAINER_NAME"),
            exit_code,
            worker,
            backoff,
            barrier_hold: duration(&get, "BARRIER_HOLD", crate::DEFAULT_BARRIER_HOLD)?,
            scope: scope(&get)?,
            resume,
            watch_list,
        })
    }
}

/// `AGENT_REPLICATED_JOB_NAME` and `AGENT_JOB_INDEX` (downward API on the pod's labels), both or neither.
fn scope(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Scope>, ConfigError> {
    match (get("AGENT_REPLICATED_JOB_NAME"), get("AGENT_JOB_INDEX")) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::Partial("AGENT_REPLICATED_JOB_NAME", "AGENT_JOB_INDEX")),
        (None, Some(_)) => Err(ConfigError::Partial("AGENT_JOB_INDEX", "AGENT_REPLICATED_JOB_NAME")),
        (Some(replicated_job), Some(index)) => match index.parse::<i32>() {
            Ok(job_index) if job_index >= 0 => Ok(Some(Scope { replicated_job, job_index })),
            _ => Err(invalid(
                "AGENT_JOB_INDEX",
                &index,
                "expected a non-negative integer (the label jobset.sigs.k8s.io/job-index)",
            )),
        },
    }
}

fn invalid(var: &'static str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid { var, value: value.into(), reason: reason.into() }
}

/// The variable and value of whichever of two synonyms is set; both set to different values is
/// an error.
fn either(
    get: &impl Fn(&str) -> Option<String>,
    a: &'static str,
    b: &'static str,
) -> Result<Option<(&'static str, String)>, ConfigError> {
    match (get(a), get(b)) {
        (Some(x), Some(y)) if x != y => Err(ConfigError::Conflict(a, b, x, y)),
        (Some(x), _) => Ok(Some((a, x))),
        (None, y) => Ok(y.map(|y| (b, y))),
    }
}

fn parse_port(var: &'static str, v: String) -> Result<u16, ConfigError> {
    match v.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(var, &v, "not a port number (1-65535)")),
    }
}

fn parse_exit_code(var: &'static str, v: String) -> Result<i32, ConfigError> {
    match v.parse::<i32>() {
        // Beyond 255 the kernel truncates the code and the restartPolicyRule would never match.
        Ok(c) if (0..=255).contains(&c) => Ok(c),
        Ok(_) => Err(invalid(var, &v, "an exit code is 0-255")),
        Err(_) => Err(invalid(var, &v, "not an integer")),
    }
}

fn parse_bool(var: &'static str, v: String) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(invalid(var, &v, "expected true or false")),
    }
}

fn parse_jitter(v: String) -> Result<f64, ConfigError> {
    match v.parse::<f64>() {
        Ok(j) if (0.0..=1.0).contains(&j) => Ok(j),
        _ => Err(invalid("WATCH_BACKOFF_JITTER", &v, "expected a fraction from 0 to 1")),
    }
}

fn duration(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match get(var) {
        Some(v) => parse_duration(&v).ok_or_else(|| invalid(var, &v, "expected a duration such as 500ms, 5s, 2m")),
        None => Ok(default),
    }
}

/// `500ms`, `5s`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len()));
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// Where the barrier is, as read from the agent's own pod, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointChoice {
    /// The httpGet startupProbe of this container.
    FromPod { container: String, endpoint: Endpoint },
    /// Upstream's defaults, for this reason.
    Default { reason: String },
}

impl EndpointChoice {
    pub fn endpoint(&self) -> Endpoint {
        match self {
            EndpointChoice::FromPod { endpoint, .. } => endpoint.clone(),
            EndpointChoice::Default { .. } => Endpoint::default(),
        }
    }
}

/// The design doc's contract when `STARTUP_PROBE_PATH`/`_PORT` are unset: the httpGet
/// startupProbe of the container named `container_name`, else of the only sidecar (init
/// container with `restartPolicy: Always`) that has one; otherwise upstream's defaults.
pub fn barrier_endpoint_from_pod(pod: &Pod, container_name: Option<&str>) -> EndpointChoice {
    let default = |reason: String| EndpointChoice::Default { reason };
    let Some(spec) = pod.spec.as_ref() else { return default("the pod has no spec".into()) };
    let inits = spec.init_containers.iter().flatten();
    let has_http_probe = |c: &&Container| c.startup_probe.as_ref().is_some_and(|p| p.http_get.is_some());
    let container = match container_name {
        Some(name) => match inits.chain(&spec.containers).find(|c| c.name == name) {
            Some(c) if has_http_probe(&c) => c,
            Some(_) => return default(format!("container {name:?} has no httpGet startupProbe")),
            None => return default(format!("the pod has no container {name:?} (AGENT_CONTAINER_NAME)")),
        },
        None => {
            let sidecars: Vec<&Container> =
                inits.filter(|c| c.restart_policy.as_deref() == Some("Always")).filter(has_http_probe).collect();
            match sidecars.as_slice() {
                [c] => *c,
                [] => return default("no sidecar container has an httpGet startupProbe".into()),
                many => {
                    let names: Vec<&str> = many.iter().map(|c| c.name.as_str()).collect();
                    return default(format!(
                        "several sidecars have an httpGet startupProbe ({names:?}); set AGENT_CONTAINER_NAME"
                    ));
                }
            }
        }
    };
    let probe = container.startup_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("filtered above");
    let port = match &probe.port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
    // Port 0 would have the barrier listen on a random port no probe reaches.
    .filter(|p| *p > 0);
    let Some(port) = port else {
        return default(format!("container {:?}: startupProbe port {:?} does not resolve", container.name, probe.port));
    };
    // The kubelet requests "/" when the probe has no path.
    let path = probe.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
    EndpointChoice::FromPod { container: container.name.clone(), endpoint: Endpoint { path, port } }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<AgentConfig, ConfigError> {
        let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        AgentConfig::from_env(|k| env.get(k).cloned(), Path::new("/nonexistent-service-account"))
    }

    const BASE: [(&str, &str); 3] = [("JOBSET_NAME", "js"), ("POD_NAME", "js-w-0-0"), ("NAMESPACE", "ns")];

    fn with(extra: &[(&'static str, &'static str)]) -> Result<AgentConfig, ConfigError> {
        let mut vars = BASE.to_vec();
        vars.extend_from_slice(extra);
        config(&vars)
    }

    #[test]
    fn minimal_environment_gives_sidecar_mode_with_upstream_defaults() {
        let c = with(&[]).unwrap();
        assert_eq!((c.jobset_name.as_str(), c.pod_name.as_str(), c.namespace.as_str()), ("js", "js-w-0-0", "ns"));
        assert_eq!(c.barrier, None, "the endpoint comes from the pod when not configured");
        assert_eq!(c.exit_code, 1);
        assert_eq!(c.worker, None);
        assert_eq!(c.backoff, BackoffConfig::default());
    }

    #[test]
    fn missing_required_variable_is_named() {
        for missing in ["JOBSET_NAME", "POD_NAME"] {
            let vars: Vec<_> = BASE.iter().copied().filter(|(k, _)| *k != missing).collect();
            let err = config(&vars).unwrap_err();
            assert_eq!(err, ConfigError::Missing(missing));
            assert!(err.to_string().contains(missing));
        }
        let empty: Vec<_> = BASE.iter().map(|(k, v)| if *k == "POD_NAME" { (*k, "") } else { (*k, *v) }).collect();
        assert_eq!(config(&empty).unwrap_err(), ConfigError::Missing("POD_NAME"));
    }

    #[test]
    fn namespace_from_either_variable_else_the_service_account_file() {
        let base = [("JOBSET_NAME", "js"), ("POD_NAME", "p")];
        let mut vars = base.to_vec();
        vars.push(("POD_NAMESPACE", "from-pod-namespace"));
        assert_eq!(config(&vars).unwrap().namespace, "from-pod-namespace");

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("namespace"), "from-file\n").unwrap();
        let env: HashMap<&str, &str> = base.into_iter().collect();
        let c = AgentConfig::from_env(|k| env.get(k).map(|v| v.to_string()), dir.path()).unwrap();
        assert_eq!(c.namespace, "from-file");

        let err = config(&base).unwrap_err();
        assert!(matches!(err, ConfigError::Namespace { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent-service-account/namespace"), "{err}");

        let conflict = with(&[("POD_NAMESPACE", "other")]).unwrap_err();
        assert_eq!(conflict, ConfigError::Conflict("NAMESPACE", "POD_NAMESPACE", "ns".into(), "other".into()));
    }

    #[test]
    fn explicit_probe_variables_fix_the_endpoint_and_fill_the_other_half_with_defaults() {
        let c = with(&[("STARTUP_PROBE_PATH", "/ready")]).unwrap();
        assert_eq!(c.barrier, Some(Endpoint { path: "/ready".into(), port: 8081 }));
        let c = with(&[("STARTUP_PROBE_PORT", "9000")]).unwrap();
        assert_eq!(c.barrier, Some(Endpoint { path: "/barrier-is-down".into(), port: 9000 }));
        let err = with(&[("STARTUP_PROBE_PORT", "http")]).unwrap_err();
        assert!(err.to_string().contains("STARTUP_PROBE_PORT"), "{err}");
    }

    #[test]
    fn exit_code_from_upstream_or_design_doc_name() {
        assert_eq!(with(&[("IN_PLACE_RESTART_EXIT_CODE", "42")]).unwrap().exit_code, 42);
        assert_eq!(with(&[("RESTART_POD_IN_PLACE_EXIT_CODE", "43")]).unwrap().exit_code, 43);
        let both = [("IN_PLACE_RESTART_EXIT_CODE", "42"), ("RESTART_POD_IN_PLACE_EXIT_CODE", "42")];
        assert_eq!(with(&both).unwrap().exit_code, 42, "the same value twice is fine");
        let err = with(&[("IN_PLACE_RESTART_EXIT_CODE", "42"), ("RESTART_POD_IN_PLACE_EXIT_CODE", "7")]).unwrap_err();
        assert!(matches!(err, ConfigError::Conflict(..)), "{err}");
    }

    #[test]
    fn invalid_exit_code_is_an_error_naming_the_variable() {
        for var in ["IN_PLACE_RESTART_EXIT_CODE", "RESTART_POD_IN_PLACE_EXIT_CODE"] {
            for bad in ["x", "1.5", "256", "-1"] {
                let err = with(&[(var, bad)]).unwrap_err();
                assert!(matches!(err, ConfigError::Invalid { var: v, .. } if v == var), "{var}={bad}: {err}");
            }
        }
    }

    #[test]
    fn worker_command_selects_main_container_mode() {
        let c = with(&[("WORKER_COMMAND", "python train.py")]).unwrap();
        let w = c.worker.unwrap();
        assert_eq!((w.shell.as_str(), w.command.as_str(), w.keep_watch), ("/bin/sh", "python train.py", false));
        assert_eq!(w.kill_grace, Duration::from_secs(10));

        let c = with(&[
            ("WORKER_COMMAND", "x"),
            ("SHELL", "/bin/bash"),
            ("KEEP_WATCH_ACROSS_RESTARTS", "true"),
            ("WORKER_KILL_GRACE", "500ms"),
        ])
        .unwrap();
        let w = c.worker.unwrap();
        assert_eq!((w.shell.as_str(), w.keep_watch, w.kill_grace), ("/bin/bash", true, Duration::from_millis(500)));
    }

    #[test]
    fn incompatible_modes_are_rejected() {
        let err = with(&[("WORKER_COMMAND", "x"), ("STARTUP_PROBE_PORT", "8081")]).unwrap_err();
        assert!(matches!(err, ConfigError::Incompatible("WORKER_COMMAND", _)), "{err}");
        let err = with(&[("KEEP_WATCH_ACROSS_RESTARTS", "true")]).unwrap_err();
        assert!(matches!(err, ConfigError::Incompatible("KEEP_WATCH_ACROSS_RESTARTS=true", _)), "{err}");
        let err = with(&[("WORKER_COMMAND", "x"), ("KEEP_WATCH_ACROSS_RESTARTS", "yes")]).unwrap_err();
        assert!(err.to_string().contains("KEEP_WATCH_ACROSS_RESTARTS"), "{err}");
    }

    #[test]
    fn backoff_settings_are_read_and_checked() {
        let c =
            with(&[("WATCH_BACKOFF_INITIAL", "50ms"), ("WATCH_BACKOFF_MAX", "2s"), ("WATCH_BACKOFF_JITTER", "0.5")])
                .unwrap();
        assert_eq!(
            c.backoff,
            BackoffConfig { initial: Duration::from_millis(50), max: Duration::from_secs(2), jitter: 0.5 }
        );
        for (var, value) in [
            ("WATCH_BACKOFF_INITIAL", "0"),
            ("WATCH_BACKOFF_INITIAL", "soon"),
            ("WATCH_BACKOFF_MAX", "10ms"),
            ("WATCH_BACKOFF_JITTER", "2"),
        ] {
            let err = with(&[(var, value)]).unwrap_err();
            assert!(err.to_string().contains(var), "{var}={value}: {err}");
        }
    }

    #[test]
    fn barrier_hold_defaults_under_the_kubelets_probe_timeout_and_is_configurable() {
        assert_eq!(with(&[]).unwrap().barrier_hold, Duration::from_millis(900));
        assert_eq!(with(&[("BARRIER_HOLD", "0")]).unwrap().barrier_hold, Duration::ZERO);
        assert_eq!(with(&[("BARRIER_HOLD", "2s")]).unwrap().barrier_hold, Duration::from_secs(2));
        let err = with(&[("BARRIER_HOLD", "long")]).unwrap_err();
        assert!(err.to_string().contains("BARRIER_HOLD"), "{err}");
    }

    #[test]
    fn scope_from_both_variables_or_neither() {
        assert_eq!(with(&[]).unwrap().scope, None, "read from the pod when needed");
        let c = with(&[("AGENT_REPLICATED_JOB_NAME", "workers"), ("AGENT_JOB_INDEX", "7")]).unwrap();
        assert_eq!(c.scope, Some(Scope { replicated_job: "workers".into(), job_index: 7 }));
        assert_eq!(c, AgentConfig { scope: None, ..c.clone() }.with_scope("workers", 7), "the in-process builder");
        let c = with(&[("AGENT_REPLICATED_JOB_NAME", ""), ("AGENT_JOB_INDEX", "")]).unwrap();
        assert_eq!(c.scope, None, "empty values count as unset");

        let err = with(&[("AGENT_REPLICATED_JOB_NAME", "workers")]).unwrap_err();
        assert_eq!(err, ConfigError::Partial("AGENT_REPLICATED_JOB_NAME", "AGENT_JOB_INDEX"));
        assert!(err.to_string().contains("JOB_INDEX is not"), "{err}");
        // A worker's own variables (upstream's examples set JOB_INDEX) are not the agent's scope.
        let c = with(&[("JOB_INDEX", "0"), ("REPLICATED_JOB_NAME", "w")]).unwrap();
        assert_eq!(c.scope, None, "main-container mode shares the worker's environment");
        let err = with(&[("AGENT_JOB_INDEX", "0")]).unwrap_err();
        assert_eq!(err, ConfigError::Partial("AGENT_JOB_INDEX", "AGENT_REPLICATED_JOB_NAME"));
    }

    #[test]
    fn job_index_must_be_a_non_negative_integer() {
        for bad in ["-1", "x", "1.5", "99999999999"] {
            let err = with(&[("AGENT_REPLICATED_JOB_NAME", "workers"), ("AGENT_JOB_INDEX", bad)]).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { var: "AGENT_JOB_INDEX", value, .. } if value == bad),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("AGENT_JOB_INDEX"), "{err}");
        }
    }

    #[test]
    fn durations_parse_with_units() {
        let cases = [
            ("250ms", Some(Duration::from_millis(250))),
            ("3s", Some(Duration::from_secs(3))),
            ("2", Some(Duration::from_secs(2))),
            ("1.5m", Some(Duration::from_secs(90))),
            ("1h", Some(Duration::from_secs(3600))),
            ("3d", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s), want, "{s:?}");
        }
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn sidecar(name: &str, path: &str, port: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": "agent", "restartPolicy": "Always",
               "ports": [{"name": "barrier", "containerPort": 8080}],
               "startupProbe": {"httpGet": {"path": path, "port": port}}})
    }

    fn worker() -> serde_json::Value {
        json!({"name": "worker", "image": "w", "startupProbe": {"httpGet": {"path": "/w", "port": 9999}}})
    }

    /// Name, pod spec, AGENT_CONTAINER_NAME, the choice or (Err) words of the reason for the defaults.
    type Case = (&'static str, serde_json::Value, Option<&'static str>, Result<EndpointChoice, &'static str>);

    #[test]
    fn endpoint_from_pod_table() {
        let from = |c: &str, path: &str, port: u16| EndpointChoice::FromPod {
            container: c.into(),
            endpoint: Endpoint { path: path.into(), port },
        };
        let plain_init = json!({"name": "init", "image": "i", "startupProbe": {"httpGet": {"path": "/i", "port": 1}}});
        let no_probe_sidecar = json!({"name": "agent", "image": "a", "restartPolicy": "Always"});
        let cases: Vec<Case> = vec![
            (
                "the only sidecar with an httpGet startupProbe",
                json!({"initContainers": [sidecar("agent", "/barrier-is-lifted", json!(8080))], "containers": [worker()]}),
                None,
                Ok(from("agent", "/barrier-is-lifted", 8080)),
            ),
            (
                "a named port resolves through the container's ports",
                json!({"initContainers": [sidecar("agent", "/up", json!("barrier"))], "containers": [worker()]}),
                None,
                Ok(from("agent", "/up", 8080)),
            ),
            (
                "an init container that is not a sidecar does not count",
                json!({"initContainers": [plain_init, sidecar("agent", "/up", json!(7000))], "containers": [worker()]}),
                None,
                Ok(from("agent", "/up", 7000)),
            ),
            (
                "AGENT_CONTAINER_NAME picks among several sidecars",
                json!({"initContainers": [sidecar("a", "/a", json!(1)), sidecar("b", "/b", json!(2))],
                       "containers": [worker()]}),
                Some("b"),
                Ok(from("b", "/b", 2)),
            ),
            (
                "AGENT_CONTAINER_NAME may name a main container",
                json!({"containers": [worker()]}),
                Some("worker"),
                Ok(from("worker", "/w", 9999)),
            ),
            (
                "no path means the kubelet's /",
                json!({"initContainers": [{"name": "agent", "image": "a", "restartPolicy": "Always",
                                           "startupProbe": {"httpGet": {"port": 8080}}}],
                       "containers": [worker()]}),
                None,
                Ok(from("agent", "/", 8080)),
            ),
            (
                "several candidate sidecars are ambiguous",
                json!({"initContainers": [sidecar("a", "/a", json!(1)), sidecar("b", "/b", json!(2))],
                       "containers": [worker()]}),
                None,
                Err("several sidecars"),
            ),
            (
                "no sidecar with a probe",
                json!({"initContainers": [no_probe_sidecar], "containers": [worker()]}),
                None,
                Err("no sidecar"),
            ),
            (
                "AGENT_CONTAINER_NAME naming no container",
                json!({"initContainers": [sidecar("agent", "/up", json!(1))], "containers": [worker()]}),
                Some("missing"),
                Err("no container \"missing\""),
            ),
            (
                "an unknown named port",
                json!({"initContainers": [sidecar("agent", "/up", json!("metrics"))], "containers": [worker()]}),
                None,
                Err("does not resolve"),
            ),
        ];
        for (name, spec, container, want) in cases {
            let got = barrier_endpoint_from_pod(&pod(spec), container);
            match (want, &got) {
                (Ok(want), got) => assert_eq!(got, &want, "{name}"),
                (Err(reason), EndpointChoice::Default { reason: r }) => {
                    assert!(r.contains(reason), "{name}: {r:?} should mention {reason:?}");
                    assert_eq!(got.endpoint(), Endpoint::default(), "{name}: falls back to upstream's defaults");
                }
                (Err(_), got) => panic!("{name}: expected the defaults, got {got:?}"),
            }
        }
    }

    /// Found by the `agent_config` fuzz target: a named port whose `containerPort` is 0 (or
    /// left out) resolved to port 0.
    #[test]
    fn a_named_probe_port_whose_container_port_is_0_does_not_resolve() {
        for port in [json!({"name": "barrier", "containerPort": 0}), json!({"name": "barrier"})] {
            let agent = json!({"name": "agent", "image": "a", "restartPolicy": "Always", "ports": [port],
                               "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": "barrier"}}});
            let got =
                barrier_endpoint_from_pod(&pod(json!({"initContainers": [agent], "containers": [worker()]})), None);
            match &got {
                EndpointChoice::Default { reason } => assert!(reason.contains("does not resolve"), "{port}: {reason}"),
                other => panic!("{port}: expected the defaults, got {other:?}"),
            }
            assert_eq!(got.endpoint(), Endpoint::default(), "{port}");
        }
    }
}
