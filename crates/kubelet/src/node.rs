//! Node registration and heartbeats: the Node object with its Ready condition, and the
//! `coordination.k8s.io/v1` Lease in `kube-node-lease` renewed every heartbeat interval.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::NodeContext;
use crate::config::{AgentConfig, NodeConfig};

/// `status.nodeInfo.kubeletVersion` of simulated nodes.
pub const KUBELET_VERSION: &str = "v1.36.0";
/// Where node Leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// This machine's architecture as Go names it (`GOARCH`), which a kubelet reports in the
/// `kubernetes.io/arch` label and `nodeInfo`.
pub const GOARCH: &str = if cfg!(target_arch = "x86_64") {
    "amd64"
} else if cfg!(target_arch = "aarch64") {
    "arm64"
} else {
    std::env::consts::ARCH
};
/// The field manager of the agent's writes.
pub const FIELD_MANAGER: &str = "jobset-kubelet";

/// The node's labels: the well-known ones, then the declared ones.
pub fn node_labels(node: &NodeConfig) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", node.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", GOARCH),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", GOARCH),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    labels.extend(node.labels.clone());
    labels
}

/// The conditions a healthy node reports. `since` gives the transition time of each type
/// (defaulting to `now`).
pub fn node_conditions(since: &BTreeMap<String, Time>, now: Timestamp) -> Vec<NodeCondition> {
    [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(since.get(type_).cloned().unwrap_or(Time(now))),
    })
    .collect()
}

fn node_status(node: &NodeConfig, node_ip: &str, now: Timestamp) -> NodeStatus {
    let quantities = |q: BTreeMap<String, String>| q.into_iter().map(|(k, v)| (k, Quantity(v))).collect();
    NodeStatus {
        capacity: Some(quantities(node.effective_capacity())),
        allocatable: Some(quantities(node.effective_allocatable())),
        conditions: Some(node_conditions(&BTreeMap::new(), now)),
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: node_ip.into() },
            NodeAddress { type_: "Hostname".into(), address: node.name.clone() },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }) }),
        node_info: Some(NodeSystemInfo {
            architecture: GOARCH.into(),
            boot_id: format!("sim-{}", node.name),
            container_runtime_version: format!("sim://{}", env!("CARGO_PKG_VERSION")),
            kernel_version: "simulated".into(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: format!("sim-{}", node.name),
            operating_system: "linux".into(),
            os_image: "jobset-rs simulated node".into(),
            swap: None,
            system_uuid: format!("sim-{}", node.name),
        }),
        ..Default::default()
    }
}

/// The Node object an agent registers.
pub fn node_object(node: &NodeConfig, node_ip: &str, now: Timestamp) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(node.name.clone()), labels: Some(node_labels(node)), ..Default::default() },
        spec: Some(NodeSpec {
            provider_id: Some(format!("sim://{}", node.name)),
            taints: (!node.taints.is_empty()).then(|| node.taints.clone()),
            ..Default::default()
        }),
        status: Some(node_status(node, node_ip, now)),
    }
}

/// The node Lease an agent keeps renewed.
pub fn lease_object(node: &str, node_uid: &str, cfg: &AgentConfig, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some(NODE_LEASE_NAMESPACE.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.into(),
                uid: node_uid.into(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(lease_seconds(cfg.lease_duration)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

fn lease_seconds(d: Duration) -> i32 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).clamp(1, i32::MAX as u64) as i32
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Creates the Node, or brings an existing one up to date (labels, capacity, conditions; taints
/// set by others are kept). Returns its uid.
pub(crate) async fn register(ctx: &NodeContext) -> Result<String, kube::Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let now = Timestamp::now();
    let obj = node_object(&ctx.node, &ctx.node_ip, now);
    let node = match api.create(&PostParams::default(), &obj).await {
        Ok(n) => n,
        Err(e) if is_status(&e, 409) => {
            let pp = PatchParams::default();
            api.patch(&ctx.node.name, &pp, &Patch::Merge(json!({"metadata": {"labels": node_labels(&ctx.node)}})))
                .await?;
            let mut status = node_status(&ctx.node, &ctx.node_ip, now);
            status.conditions = None;
            api.patch_status(&ctx.node.name, &pp, &Patch::Strategic(json!({"status": status}))).await?;
            post_status(ctx).await?
        }
        Err(e) => return Err(e),
    };
    Ok(node.metadata.uid.unwrap_or_default())
}

/// Posts the Ready condition (keeping transition times of unchanged conditions).
pub(crate) async fn post_status(ctx: &NodeContext) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let current = api.get(&ctx.node.name).await?;
    let ours = node_conditions(&BTreeMap::new(), Timestamp::now());
    let since: BTreeMap<String, Time> = current
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| ours.iter().any(|o| o.type_ == c.type_ && o.status == c.status))
        .filter_map(|c| Some((c.type_.clone(), c.last_transition_time.clone()?)))
        .collect();
    let conditions = node_conditions(&since, Timestamp::now());
    api.patch_status(
        &ctx.node.name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": conditions}})),
    )
    .await
}

/// Renews the node Lease, creating it when missing.
pub(crate) async fn renew_lease(ctx: &NodeContext, node_uid: &str) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), NODE_LEASE_NAMESPACE);
    let lease = lease_object(&ctx.node.name, node_uid, &ctx.cfg, Timestamp::now());
    let patch = json!({"spec": &lease.spec});
    match api.patch(&ctx.node.name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Renews the Lease every heartbeat interval and posts the node status every status update
/// interval, while the node is alive; registers first when that has not worked yet.
pub(crate) async fn heartbeat(
    ctx: Arc<NodeContext>,
    mut node_uid: Option<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut alive = ctx.alive.clone();
    let mut status_due = tokio::time::Instant::now() + ctx.cfg.status_update_interval;
    loop {
        if *shutdown.borrow() {
            return;
        }
        if !*alive.borrow_and_update() {
            tokio::select! {
                r = alive.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
            // Back from the dead: say so at once.
            status_due = tokio::time::Instant::now();
            continue;
        }
        let now = tokio::time::Instant::now();
        match &node_uid {
            None => match register(&ctx).await {
                Ok(uid) => {
                    node_uid = Some(uid);
                    status_due = now + ctx.cfg.status_update_interval;
                    continue;
                }
                Err(e) => tracing::warn!(node = %ctx.node.name, error = %e, "registering the node"),
            },
            Some(uid) => {
                if let Err(e) = renew_lease(&ctx, uid).await {
                    tracing::warn!(node = %ctx.node.name, error = %e, "renewing the node lease");
                }
                if now >= status_due {
                    status_due = now + ctx.cfg.status_update_interval;
                    match post_status(&ctx).await {
                        Ok(_) => {}
                        Err(e) if is_status(&e, 404) => {
                            // Someone deleted the Node: register it again.
                            node_uid = None;
                            continue;
                        }
                        Err(e) => tracing::warn!(node = %ctx.node.name, error = %e, "posting the node status"),
                    }
                }
            }
        }
        let next = (now + ctx.cfg.heartbeat_interval).min(status_due.max(now + Duration::from_millis(1)));
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            r = alive.changed() => if r.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_object_shape() {
        let mut cfg = NodeConfig::new("n1");
        cfg.labels.insert("zone".into(), "a".into());
        cfg.capacity.insert("nvidia.com/gpu".into(), "4".into());
        cfg.taints.push(crate::config::parse_taint("gpu:NoSchedule").unwrap());
        let now: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let n = node_object(&cfg, "172.18.0.2", now);
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(v["metadata"]["labels"]["zone"], "a");
        assert_eq!(v["spec"]["taints"][0]["key"], "gpu");
        assert_eq!(v["status"]["capacity"]["nvidia.com/gpu"], "4");
        assert_eq!(v["status"]["allocatable"]["pods"], "110");
        assert_eq!(v["status"]["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert_eq!(v["status"]["addresses"][0]["address"], "172.18.0.2");
        let ready = v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(ready["message"], "kubelet is posting ready status");
        assert_eq!(ready["lastHeartbeatTime"], "2024-01-01T00:00:00Z");
    }

    #[test]
    fn lease_shape() {
        let cfg = AgentConfig { lease_duration: Duration::from_millis(1500), ..Default::default() };
        let now: Timestamp = "2024-01-01T00:00:00.25Z".parse().unwrap();
        let v = serde_json::to_value(lease_object("n1", "uid-1", &cfg, now)).unwrap();
        assert_eq!(v["metadata"]["namespace"], NODE_LEASE_NAMESPACE);
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(v["spec"]["holderIdentity"], "n1");
        assert_eq!(v["spec"]["leaseDurationSeconds"], 2);
        assert_eq!(v["spec"]["renewTime"], "2024-01-01T00:00:00.250000Z");
        assert_eq!(lease_seconds(Duration::from_secs(40)), 40);
        assert_eq!(lease_seconds(Duration::ZERO), 1);
    }
}
