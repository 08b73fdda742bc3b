//! `jobset node`: failure injection on local nodes (fail, recover, drain, taint).

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
    /// Cordon the node and evict its pods (each gets DisruptionTarget).
    Drain { name: String },
    /// Add a taint: KEY[=VALUE]:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute.
    Taint { name: String, taint: String },
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
        NodeCommand::Drain { name } => {
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
                let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
                api.evict(&p.name_any(), &EvictParams::default())
                    .await
                    .with_context(|| format!("evicting pod {}", p.name_any()))?;
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
}
