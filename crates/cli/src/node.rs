//! `jobset node`: failure injection on local nodes (fail, recover, drain, taint, label).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Annotation through which `jobset node fail` reaches the node agent running inside `jobset up`.
pub const FAILED_ANNOTATION: &str = "sim.jobset.x-k8s.io/node-failed";

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// The node stops heartbeating, as a lost machine: its pods get DisruptionTarget and fail.
    Fail { name: String },
    /// The node heartbeats again.
    Recover { name: String },
    /// Cordon the node and evict its pods (each gets DisruptionTarget). An eviction a
    /// PodDisruptionBudget refuses (429) is tried again, as kubectl drain does.
    Drain {
        name: String,
        /// How long to wait before evicting again a pod a disruption budget protects.
        #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
        retry_interval: Duration,
        /// Give up after this long (0: never), as kubectl drain's `--timeout`.
        #[arg(long, default_value = "0s", value_parser = crate::parse_duration)]
        timeout: Duration,
    },
    /// Add a taint: KEY[=VALUE]:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute.
    Taint { name: String, taint: String },
    /// Set labels (KEY=VALUE) or remove them (KEY-), as kubectl label does; e.g. Autopilot's
    /// autopilot.ibm.com/gpuhealth=EVICT.
    Label {
        name: String,
        #[arg(required = true, value_name = "KEY=VALUE|KEY-")]
        labels: Vec<String>,
        /// Replace a label that already has a different value.
        #[arg(long)]
        overwrite: bool,
    },
}

/// Parsed `jobset node label` arguments: labels to set and keys to remove.
#[derive(Debug, Default, PartialEq)]
pub struct LabelChanges {
    pub set: BTreeMap<String, String>,
    pub remove: Vec<String>,
}

/// Parses `KEY=VALUE` and `KEY-` as kubectl label does, and validates keys and values
/// client-side (kubectl leaves keys to the server) so the error names the argument.
pub fn parse_labels(args: &[String]) -> anyhow::Result<LabelChanges> {
    let mut c = LabelChanges::default();
    for arg in args {
        if arg.contains('=') {
            let [key, value] = arg.split('=').collect::<Vec<_>>()[..] else { bail!("invalid label spec: {arg}") };
            check_key(arg, key)?;
            let errs = jobset_apiserver::names::label_value(value);
            if !errs.is_empty() {
                bail!("invalid label value: {arg:?}: {}", errs.join(";"));
            }
            c.set.insert(key.into(), value.into());
        } else if let Some(key) = arg.strip_suffix('-') {
            check_key(arg, key)?;
            c.remove.push(key.into());
        } else {
            bail!("unknown label spec: {arg} (expected KEY=VALUE or KEY-)");
        }
    }
    if c.remove.iter().any(|k| c.set.contains_key(k)) {
        bail!("can not both modify and remove a label in the same command");
    }
    Ok(c)
}

fn check_key(arg: &str, key: &str) -> anyhow::Result<()> {
    let errs = jobset_apiserver::names::qualified_name(key);
    if !errs.is_empty() {
        bail!("invalid label key: {arg:?}: {}", errs.join(";"));
    }
    Ok(())
}

/// The merge patch for `changes` against the node's `current` labels and kubectl's verb for
/// it (`labeled`, `unlabeled`, `label(s) changed`, `not labeled`); `Err` with kubectl's
/// message when a label would change without `overwrite`.
pub fn label_patch(
    current: &BTreeMap<String, String>,
    changes: &LabelChanges,
    overwrite: bool,
) -> anyhow::Result<(serde_json::Value, &'static str)> {
    if !overwrite {
        let conflicts: Vec<String> = changes
            .set
            .iter()
            .filter_map(|(k, v)| current.get(k).filter(|old| *old != v).map(|old| (k, old)))
            .map(|(k, old)| format!("'{k}' already has a value ({old}), and --overwrite is false"))
            .collect();
        match conflicts.len() {
            0 => {}
            1 => bail!("{}", conflicts[0]),
            // As kubectl's error aggregate prints several.
            _ => bail!("[{}]", conflicts.join(", ")),
        }
    }
    let mut patch = serde_json::Map::new();
    let (mut labeled, mut unlabeled) = (false, false);
    for (k, v) in &changes.set {
        labeled |= current.get(k) != Some(v);
        patch.insert(k.clone(), v.clone().into());
    }
    for k in &changes.remove {
        unlabeled |= current.contains_key(k);
        patch.insert(k.clone(), serde_json::Value::Null);
    }
    let verb = match (labeled, unlabeled) {
        (true, true) => "label(s) changed",
        (true, false) => "labeled",
        (false, true) => "unlabeled",
        (false, false) => "not labeled",
    };
    Ok((json!({"metadata": {"labels": patch}}), verb))
}

/// A duration as Go's `time.Duration` prints it in kubectl's messages (`5s`, `100ms`).
fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

/// Parses `KEY[=VALUE]:EFFECT` as kubectl taint does.
pub fn parse_taint(s: &str) -> anyhow::Result<Taint> {
    let (kv, effect) = s.rsplit_once(':').with_context(|| format!("taint {s:?}: expected KEY[=VALUE]:EFFECT"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        bail!("taint {s:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute, not {effect:?}");
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    if key.is_empty() {
        bail!("taint {s:?}: the key is empty");
    }
    Ok(Taint { key: key.into(), value, effect: effect.into(), time_added: None })
}

pub async fn run(cmd: NodeCommand) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the API server (set KUBECONFIG to the file `jobset up` printed)")?;
    let nodes: Api<Node> = Api::all(client.clone());
    match cmd {
        NodeCommand::Fail { name } | NodeCommand::Recover { name } if nodes.get_opt(&name).await?.is_none() => {
            bail!("node {name:?} not found")
        }
        NodeCommand::Fail { name } => {
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {FAILED_ANNOTATION: "true"}}})),
                )
                .await?;
            println!("node/{name} failed (heartbeats stopped)");
        }
        NodeCommand::Recover { name } => {
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {FAILED_ANNOTATION: null}}})),
                )
                .await?;
            println!("node/{name} recovered");
        }
        NodeCommand::Drain { name, retry_interval, timeout } => {
            let deadline = (!timeout.is_zero()).then(|| tokio::time::Instant::now() + timeout);
            // Evictions without kube's own retry of 429s (15 growing waits, minutes in all): a
            // budget's refusal is reported and tried again below, as kubectl drain does.
            let mut config = kube::Config::infer().await.context("loading the kubeconfig")?;
            config.default_retry = false;
            let evictions = Client::try_from(config).context("building the client")?;
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
                .await?;
            let pods: Api<Pod> = Api::all(client.clone());
            let on_node = pods.list(&ListParams::default().fields(&format!("spec.nodeName={name}"))).await?;
            let mut evicted = 0;
            for p in on_node
                .items
                .iter()
                .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            {
                let ns = p.namespace().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(evictions.clone(), &ns);
                loop {
                    match api.evict(&p.name_any(), &EvictParams::default()).await {
                        Ok(_) => break,
                        // A disruption budget with no room: kubectl drain's message, then again.
                        Err(kube::Error::Api(s)) if s.code == 429 => {
                            if deadline.is_some_and(|d| tokio::time::Instant::now() + retry_interval > d) {
                                bail!(
                                    "drain did not complete within {timeout:?}: evicting pod {}: {}",
                                    p.name_any(),
                                    s.message
                                );
                            }
                            eprintln!(
                                "error when evicting pods/{:?} -n {ns:?} (will retry after {}): {}",
                                p.name_any(),
                                go_duration(retry_interval),
                                s.message
                            );
                            tokio::time::sleep(retry_interval).await;
                        }
                        Err(e) => return Err(e).with_context(|| format!("evicting pod {}", p.name_any())),
                    }
                }
                evicted += 1;
            }
            println!("node/{name} drained ({evicted} pods evicted)");
        }
        NodeCommand::Taint { name, taint } => {
            let t = parse_taint(&taint)?;
            let node = nodes.get_opt(&name).await?.with_context(|| format!("node {name:?} not found"))?;
            let mut taints: Vec<Taint> = node.spec.and_then(|s| s.taints).unwrap_or_default();
            taints.retain(|x| !(x.key == t.key && x.effect == t.effect));
            taints.push(t);
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}}))).await?;
            println!("node/{name} tainted");
        }
        NodeCommand::Label { name, labels, overwrite } => {
            let changes = parse_labels(&labels)?;
            let node = nodes.get_opt(&name).await?.with_context(|| format!("node {name:?} not found"))?;
            let current = node.metadata.labels.unwrap_or_default();
            for k in changes.remove.iter().filter(|k| !current.contains_key(*k)) {
                println!("label {k:?} not found.");
            }
            let (patch, verb) = label_patch(&current, &changes, overwrite)?;
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await?;
            println!("node/{name} {verb}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_like_kubectl() {
        let t = parse_taint("gpu=broken:NoExecute").unwrap();
        assert_eq!((t.key.as_str(), t.value.as_deref(), t.effect.as_str()), ("gpu", Some("broken"), "NoExecute"));
        let t = parse_taint("maintenance:NoSchedule").unwrap();
        assert_eq!((t.key.as_str(), t.value, t.effect.as_str()), ("maintenance", None, "NoSchedule"));
        assert!(parse_taint("a=b").unwrap_err().to_string().contains("KEY[=VALUE]:EFFECT"));
        assert!(parse_taint("a=b:Sometimes").unwrap_err().to_string().contains("effect must be"));
        assert!(parse_taint("=b:NoSchedule").unwrap_err().to_string().contains("key is empty"));
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn labels_parse_like_kubectl_label() {
        let c = parse_labels(&args(&["autopilot.ibm.com/gpuhealth=EVICT", "zone=", "old-"])).unwrap();
        assert_eq!(
            c.set,
            BTreeMap::from([("autopilot.ibm.com/gpuhealth".into(), "EVICT".into()), ("zone".into(), "".into())])
        );
        assert_eq!(c.remove, ["old"]);
        let err = |a: &[&str]| parse_labels(&args(a)).unwrap_err().to_string();
        assert_eq!(err(&["a=b=c"]), "invalid label spec: a=b=c");
        assert!(err(&["bad key=v"]).starts_with("invalid label key: \"bad key=v\": name part must consist of"));
        assert!(err(&["a/b/c=v"]).starts_with("invalid label key: \"a/b/c=v\""));
        assert!(err(&["=v"]).starts_with("invalid label key: \"=v\": name part must be non-empty"));
        assert!(err(&["Bad.Prefix/k-"]).starts_with("invalid label key: \"Bad.Prefix/k-\": prefix part"));
        assert!(err(&["k=-v"]).starts_with("invalid label value: \"k=-v\": a valid label must be"));
        assert_eq!(err(&["k"]), "unknown label spec: k (expected KEY=VALUE or KEY-)");
        assert_eq!(err(&["k=v", "k-"]), "can not both modify and remove a label in the same command");
    }

    #[test]
    fn label_patches_refuse_to_change_a_value_without_overwrite() {
        let current = BTreeMap::from([("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())]);
        let changes = |a: &[&str]| parse_labels(&args(a)).unwrap();
        type Want = Result<(serde_json::Value, &'static str), &'static str>;
        let cases: &[(&[&str], bool, Want)] = &[
            (&["c=3"], false, Ok((json!({"c": "3"}), "labeled"))),
            (&["a=1"], false, Ok((json!({"a": "1"}), "not labeled"))),
            (&["a=9"], false, Err("'a' already has a value (1), and --overwrite is false")),
            (
                &["a=9", "b=8"],
                false,
                // Go's error aggregate: several errors in brackets.
                Err(
                    "['a' already has a value (1), and --overwrite is false, 'b' already has a value (2), and --overwrite is false]",
                ),
            ),
            (&["a=9"], true, Ok((json!({"a": "9"}), "labeled"))),
            (&["a-"], false, Ok((json!({"a": null}), "unlabeled"))),
            (&["z-"], false, Ok((json!({"z": null}), "not labeled"))),
            (&["a-", "c=3"], false, Ok((json!({"a": null, "c": "3"}), "label(s) changed"))),
        ];
        for (a, overwrite, want) in cases {
            let got = label_patch(&current, &changes(a), *overwrite).map_err(|e| e.to_string());
            let want = want
                .clone()
                .map(|(labels, verb)| (json!({"metadata": {"labels": labels}}), verb))
                .map_err(String::from);
            assert_eq!(got, want, "{a:?} overwrite={overwrite}");
        }
    }
}
