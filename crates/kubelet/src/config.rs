//! What a node is (declared by the user) and how its agent behaves (timings, log directory).
//!
//! A nodes file is YAML: a list of [`NodeConfig`].
//!
//! ```yaml
//! - name: gpu-0
//!   labels: {topology.kubernetes.io/zone: a}
//!   capacity: {cpu: 16, memory: 64Gi, nvidia.com/gpu: 8}
//!   taints:
//!   - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
//!   - dedicated=ml:NoExecute
//!   rules:
//!   - matchLabels: {app: flaky}
//!     duration: 2s
//!     exitCode: 1
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Deserializer, Serialize};

/// Capacity a node gets for the resources its declaration leaves out.
pub const DEFAULT_CAPACITY: &[(&str, &str)] = &[("cpu", "32"), ("memory", "256Gi"), ("pods", "110")];

/// One local node, as declared by the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeConfig {
    pub name: String,
    /// Added to the well-known labels (`kubernetes.io/hostname`, `kubernetes.io/os`, ...).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Resource name → quantity (`cpu`, `memory`, `pods`, extended resources like `nvidia.com/gpu`).
    /// Missing `cpu`, `memory` and `pods` take [`DEFAULT_CAPACITY`]. Numbers are accepted for quantities.
    #[serde(default, deserialize_with = "quantities")]
    pub capacity: BTreeMap<String, String>,
    /// What the scheduler may place on the node (`status.allocatable`): missing resources equal
    /// the effective capacity.
    #[serde(default, deserialize_with = "quantities", skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    /// Taints set when the node is registered: `{key, value, effect}` or `KEY[=VALUE]:EFFECT`.
    #[serde(default, deserialize_with = "taints")]
    pub taints: Vec<Taint>,
    /// Simulated behaviour of pods without `sim.jobset.x-k8s.io/` annotations: the first rule whose
    /// labels match the pod's applies.
    #[serde(default)]
    pub rules: Vec<SimRule>,
}

/// A node-level rule for the simulated runtime (see [`crate::runtime::simulated`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimRule {
    /// Pod labels that must all be present with these values (empty: every pod).
    #[serde(default, alias = "match_labels")]
    pub match_labels: BTreeMap<String, String>,
    /// How long containers run, e.g. `100ms`, `2s`, `1m30s`, `forever`.
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default, alias = "exit_code")]
    pub exit_code: Option<i32>,
    /// Completion indexes the non-zero exit code applies to, e.g. `1,3-5`.
    #[serde(default, alias = "fail_indexes")]
    pub fail_indexes: Option<String>,
    /// Only the first N attempts fail.
    #[serde(default, alias = "fail_attempts")]
    pub fail_attempts: Option<u32>,
    #[serde(default, alias = "never_ready")]
    pub never_ready: bool,
}

impl NodeConfig {
    /// A node with default capacity, no labels, taints or rules.
    pub fn new(name: impl Into<String>) -> NodeConfig {
        NodeConfig {
            name: name.into(),
            labels: BTreeMap::new(),
            capacity: BTreeMap::new(),
            allocatable: BTreeMap::new(),
            taints: Vec::new(),
            rules: Vec::new(),
        }
    }

    /// `count` identical nodes named `<prefix>-0` … `<prefix>-<count-1>` (`jobset up --nodes N`).
    pub fn uniform(count: usize, prefix: &str) -> Vec<NodeConfig> {
        (0..count).map(|i| NodeConfig::new(format!("{prefix}-{i}"))).collect()
    }

    /// Parses a nodes file: a YAML list of nodes. Names must be unique and non-empty.
    pub fn parse_list(yaml: &str) -> Result<Vec<NodeConfig>, ConfigError> {
        let nodes: Vec<NodeConfig> = serde_saphyr::from_str(yaml).map_err(|e| ConfigError(e.to_string()))?;
        let mut seen = std::collections::BTreeSet::new();
        for n in &nodes {
            if n.name.is_empty() {
                return Err(ConfigError("a node has an empty name".into()));
            }
            if !seen.insert(n.name.as_str()) {
                return Err(ConfigError(format!("node {:?} is declared twice", n.name)));
            }
        }
        Ok(nodes)
    }

    /// The declared capacity with the defaults filled in.
    pub fn effective_capacity(&self) -> BTreeMap<String, String> {
        let mut c = self.capacity.clone();
        for (k, v) in DEFAULT_CAPACITY {
            c.entry((*k).to_string()).or_insert_with(|| (*v).to_string());
        }
        c
    }

    /// The allocatable resources: the declared ones, the rest as [`NodeConfig::effective_capacity`].
    pub fn effective_allocatable(&self) -> BTreeMap<String, String> {
        let mut a = self.effective_capacity();
        a.extend(self.allocatable.clone());
        a
    }
}

/// A nodes file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid nodes file: {0}")]
pub struct ConfigError(pub String);

/// Timings and paths of a node agent. Every duration is configurable so tests run fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// How often the node Lease is renewed.
    pub heartbeat_interval: Duration,
    /// `leaseDurationSeconds` of the node Lease (rounded up to whole seconds, at least 1).
    pub lease_duration: Duration,
    /// How often the node's status (Ready condition heartbeat) is posted.
    pub status_update_interval: Duration,
    /// First CrashLoopBackOff delay (the first restart is immediate, as in kubelet).
    pub restart_backoff_base: Duration,
    /// CrashLoopBackOff cap.
    pub restart_backoff_max: Duration,
    /// The back-off starts over when a container's previous restart is longer ago than this
    /// (kubelet: 10 minutes of running without a problem).
    pub restart_backoff_reset: Duration,
    /// How long a container the runtime could not create (a full disk, too many open files) or
    /// whose config could not be built (a missing ConfigMap key: `CreateContainerConfigError`)
    /// waits before the next try (kubelet: its pod worker's back-off period, 10 s).
    pub create_retry: Duration,
    /// The least grace a container gets after a preStop hook that used up (most of) the grace
    /// period (kubelet: 2 s, §4.5).
    pub min_kill_grace_after_pre_stop: Duration,
    /// How long a simulated container runs when nothing says otherwise.
    pub default_run_duration: Duration,
    /// Where container logs are written (`<dir>/<ns>_<pod>_<uid>/<container>/<restartCount>.log`).
    pub log_dir: Option<PathBuf>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            heartbeat_interval: Duration::from_secs(10),
            lease_duration: Duration::from_secs(40),
            status_update_interval: Duration::from_secs(10),
            restart_backoff_base: Duration::from_secs(10),
            restart_backoff_max: Duration::from_secs(300),
            restart_backoff_reset: Duration::from_secs(600),
            create_retry: Duration::from_secs(10),
            min_kill_grace_after_pre_stop: Duration::from_secs(2),
            default_run_duration: Duration::from_secs(1),
            log_dir: None,
        }
    }
}

fn quantities<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Q {
        S(String),
        I(i64),
        F(f64),
    }
    let raw: BTreeMap<String, Q> = BTreeMap::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Q::S(s) => s,
                Q::I(i) => i.to_string(),
                Q::F(f) => f.to_string(),
            };
            (k, v)
        })
        .collect())
}

/// Parses `KEY[=VALUE]:EFFECT` (kubectl taint syntax).
pub fn parse_taint(s: &str) -> Result<Taint, ConfigError> {
    let (kv, effect) =
        s.rsplit_once(':').ok_or_else(|| ConfigError(format!("taint {s:?}: expected KEY[=VALUE]:EFFECT")))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(ConfigError(format!(
            "taint {s:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute, not {effect:?}"
        )));
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(ConfigError(format!("taint {s:?}: the key is empty")));
    }
    Ok(Taint { key: key.into(), value, effect: effect.into(), time_added: None })
}

fn taints<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Taint>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum T {
        S(String),
        Full {
            key: String,
            #[serde(default)]
            value: Option<String>,
            effect: String,
        },
    }
    let raw: Vec<T> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|t| match t {
            T::S(s) => parse_taint(&s).map_err(serde::de::Error::custom),
            T::Full { key, value, effect } => {
                let v = value.as_deref().map(|v| format!("={v}")).unwrap_or_default();
                parse_taint(&format!("{key}{v}:{effect}")).map_err(serde::de::Error::custom)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_nodes() {
        let n = NodeConfig::uniform(3, "node");
        assert_eq!(n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["node-0", "node-1", "node-2"]);
        assert_eq!(n[0].effective_capacity()["pods"], "110");
    }

    #[test]
    fn allocatable_is_the_capacity_unless_declared() {
        let nodes =
            NodeConfig::parse_list("- name: a\n  capacity: {cpu: 4}\n  allocatable: {memory: 1Gi}\n- name: b\n")
                .unwrap();
        let a = nodes[0].effective_allocatable();
        assert_eq!((a["cpu"].as_str(), a["memory"].as_str(), a["pods"].as_str()), ("4", "1Gi", "110"));
        assert_eq!(nodes[1].effective_allocatable(), nodes[1].effective_capacity());
    }

    #[test]
    fn nodes_file() {
        let yaml = r#"
- name: gpu-0
  labels: {zone: a}
  capacity: {cpu: 16, memory: 64Gi, nvidia.com/gpu: 8}
  taints:
  - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
  - dedicated:NoExecute
  rules:
  - matchLabels: {app: flaky}
    duration: 2s
    exitCode: 1
- name: cpu-0
"#;
        let nodes = NodeConfig::parse_list(yaml).unwrap();
        assert_eq!(nodes.len(), 2);
        let g = &nodes[0];
        assert_eq!(g.labels["zone"], "a");
        assert_eq!(g.capacity["cpu"], "16");
        assert_eq!(g.capacity["nvidia.com/gpu"], "8");
        assert_eq!(g.effective_capacity()["pods"], "110");
        assert_eq!(g.taints[0].key, "nvidia.com/gpu");
        assert_eq!(g.taints[0].value.as_deref(), Some("true"));
        assert_eq!(g.taints[1].effect, "NoExecute");
        assert_eq!(g.taints[1].value, None);
        assert_eq!(g.rules[0].exit_code, Some(1));
        assert_eq!(g.rules[0].match_labels["app"], "flaky");
        assert_eq!(nodes[1], NodeConfig::new("cpu-0"));
    }

    #[test]
    fn bad_nodes_files() {
        for yaml in [
            "- name: a\n- name: a\n",
            "- name: ''\n",
            "- name: a\n  taints: [x:Sometimes]\n",
            "- name: a\n  colour: red\n",
            "name: a\n",
        ] {
            assert!(NodeConfig::parse_list(yaml).is_err(), "{yaml}");
        }
    }
}
