//! `jobset up` with no node flags runs a working cluster: one process node named after this host,
//! with this machine's CPUs and memory as a kubelet reports them, and every controller.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

/// Bound on each state the test waits for.
const WAIT: Duration = Duration::from_secs(60);
/// kube-scheduler's message for a pod no node has the CPUs for, on a one-node cluster.
const INSUFFICIENT_CPU: &str = "0/1 nodes are available: 1 Insufficient cpu. \
     preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";

/// `MemTotal` of /proc/meminfo, in KiB (the kernel's `kB`).
fn mem_total_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:")).expect("a MemTotal line");
    line.trim().strip_suffix(" kB").expect("MemTotal in kB").trim().parse().unwrap()
}

/// A binary-SI quantity (`24684096Ki`, `16Gi`, plain bytes) in bytes.
fn bytes(quantity: &str) -> u64 {
    let (digits, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)]
        .into_iter()
        .find_map(|(suffix, shift)| quantity.strip_suffix(suffix).map(|d| (d, shift)))
        .unwrap_or((quantity, 0));
    digits.parse::<u64>().unwrap_or_else(|_| panic!("quantity {quantity:?}")) << shift
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_without_node_flags_runs_one_measured_process_node_and_the_controllers() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), 0, &["--heartbeat-interval", "200ms"]).await;
    let client = server.client().await;

    // One node, named after the host, with what this machine has.
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let name = jobset_kubelet::machine::node_name(&hostname);
    let nodes: Api<Node> = Api::all(client.clone());
    within("the node registers", await_condition(nodes.clone(), &name, |n: Option<&Node>| n.is_some())).await.unwrap();
    let listed = nodes.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.iter().filter_map(|n| n.metadata.name.as_deref()).collect::<Vec<_>>(), [name.as_str()]);
    let status = listed[0].status.clone().unwrap();
    let (capacity, allocatable) = (status.capacity.unwrap(), status.allocatable.unwrap());
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(capacity["cpu"].0, cpus.to_string());
    assert_eq!(bytes(&capacity["memory"].0), mem_total_kib() * 1024, "capacity {:?}", capacity["memory"]);
    assert_eq!(capacity["pods"].0, "110");
    assert_eq!(bytes(&allocatable["memory"].0), (mem_total_kib() - 100 * 1024) * 1024, "less the eviction threshold");
    assert!(!capacity.contains_key("nvidia.com/gpu") || std::path::Path::new("/dev/nvidia0").exists());

    // The Job and JobSet controllers run, and the pods run as processes of this machine.
    let gvk = GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet");
    let jobsets: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "jobsets"));
    let js: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "tiny"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "true"]}]}}}}}]}
    }))
    .unwrap();
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    let completed = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data["status"]["conditions"].as_array())
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Completed" && c["status"] == "True"))
    };
    within("the JobSet completes", await_condition(jobsets.clone(), "tiny", completed)).await.unwrap();

    // A pod asking for more CPUs than the machine has stays Pending, and the scheduler says why.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "too-big"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "true"], "resources": {"requests": {"cpu": (cpus + 1).to_string()}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let unschedulable = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
    };
    let p = within("the scheduler gives up on the pod", await_condition(pods.clone(), "too-big", unschedulable))
        .await
        .unwrap()
        .unwrap();
    let status = p.status.unwrap();
    let cond = status.conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(
        (cond.reason.as_deref(), cond.message.as_deref(), status.phase.as_deref(), p.spec.unwrap().node_name),
        (Some("Unschedulable"), Some(INSUFFICIENT_CPU), Some("Pending"), None)
    );
    server.kill().await;
}

/// `--nodes 0`: the API server alone, as the summary says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_with_nodes_0_runs_the_api_server_alone_and_says_so() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::command(dir.path(), 0, &["--nodes", "0"]).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let summary = within("the summary", async {
        let mut summary = Vec::new();
        while summary.len() < 5 {
            match lines.next_line().await.unwrap() {
                Some(line) => summary.push(line),
                None => panic!("stdout ended after {summary:?}"),
            }
        }
        summary
    })
    .await;
    assert!(summary[0].starts_with(common::LISTENING), "{summary:?}");
    assert!(summary[3].starts_with("web UI: https://127.0.0.1:"), "{summary:?}");
    assert_eq!(
        [&summary[1], &summary[2], &summary[4]],
        [
            "nodes: none (--nodes 0): the API server alone",
            "controllers: garbage-collector",
            &format!("export KUBECONFIG={}", dir.path().join("kubeconfig").display()),
        ]
    );
    child.kill().await.unwrap();
}
