//! Containers whose config cannot be built, end to end (issue 24): the node agent with the process
//! runtime against the embedded API server. As kubelet, a container whose env refers to a
//! ConfigMap key that is missing waits with reason `CreateContainerConfigError` and kubelet's
//! message, the pod Pending, and starts (its first run) once the key is there; a pod whose
//! volume projects a missing ConfigMap starts no container at all (every one Waiting
//! `ContainerCreating`, a `FailedMount` event) until the ConfigMap appears. Needs no root.
//! Every wait goes through a watch with a timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist};
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime};
use jobset_kubelet::{AgentConfig, NodeConfig, run_node};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateWaiting, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Waits (through a watch of the pod) until `cond` holds; returns the pod.
async fn wait_for(pods: &Api<Pod>, name: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = watcher(pods.clone(), config).applied_objects().boxed();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = w.next().await {
            if let Ok(p) = ev
                && cond(&p)
            {
                return p;
            }
        }
        panic!("the watch of {name} ended")
    })
    .await
    .unwrap_or_else(|_| panic!("pod {name}: not {what} within {TIMEOUT:?}"))
}

fn waiting(p: &Pod) -> Option<ContainerStateWaiting> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.waiting.clone()
}

/// A node agent with the process runtime against a fresh embedded API server; `create_retry`
/// short. The client, and what must live as long as the test.
async fn cluster() -> (kube::Client, impl Sized) {
    let logs = tempfile::tempdir().unwrap();
    let config = ServerConfig { log_dir: Some(logs.path().to_path_buf()), ..ServerConfig::default() };
    let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), config).unwrap();
    let client = server.client();
    let agent = AgentConfig {
        heartbeat_interval: Duration::from_millis(50),
        status_update_interval: Duration::from_millis(100),
        create_retry: Duration::from_millis(200),
        log_dir: Some(logs.path().to_path_buf()),
        ..AgentConfig::default()
    };
    let runtime = Arc::new(ProcessRuntime::new(ProcessConfig::default()));
    let node = run_node(client.clone(), NodeConfig::new("n1"), agent, runtime).await;
    (client, (server, node, logs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_config_map_volume_starts_no_container_until_it_is_created() {
    let (client, _cluster) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    // The first container mounts nothing: it still waits, as kubelet mounts every volume first.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never",
            "containers": [
                {"name": "first", "image": "busybox", "command": ["sh", "-c", "echo first"]},
                {"name": "reader", "image": "busybox", "command": ["sh", "-c", "cat /etc/cfg/k"],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}
            ],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "opt", "configMap": {"name": "none", "optional": true}}
            ]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    // kubelet's event, tried again (the Recorder counts the repeats in one event's series).
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let config = watcher::Config::default().fields("regarding.name=p");
    let mut w = watcher(events, config).applied_objects().boxed();
    let ev = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = w.next().await {
            if let Ok(e) = ev
                && e.reason.as_deref() == Some("FailedMount")
                && e.series.as_ref().is_some_and(|s| s.count >= 2)
            {
                return e;
            }
        }
        panic!("the watch of events ended")
    })
    .await
    .expect("a FailedMount event, repeated, within the timeout");
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.note.as_deref(), Some("MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"));
    assert_eq!(ev.reporting_controller.as_deref(), Some("kubelet"));

    // Tried twice, and still nothing started: Pending, every container ContainerCreating.
    let p = wait_for(&pods, "p", "waiting for its volumes", |p| {
        p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| cs.len() == 2)
    })
    .await;
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.pod_ip, None, "no sandbox before the volumes are mounted");
    for cs in status.container_statuses.as_ref().unwrap() {
        let reason = cs.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref());
        assert_eq!((cs.name.as_str(), reason, cs.restart_count), (cs.name.as_str(), Some("ContainerCreating"), 0));
    }

    // The ConfigMap arrives: the next try mounts it and both containers run, their first run.
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "v\n"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let p = wait_for(&pods, "p", "finished", |p| {
        matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
    })
    .await;
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert!(status.container_statuses.as_ref().unwrap().iter().all(|c| c.restart_count == 0));
    let log = pods.logs("p", &LogParams { container: Some("reader".into()), ..LogParams::default() }).await.unwrap();
    assert_eq!(log, "v\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_config_map_key_waits_as_create_container_config_error_until_it_is_added() {
    let (client, _cluster) = cluster().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"other": "x"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "command": ["sh", "-c", "echo k=$K"],
            "env": [
                {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
                {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "k", "optional": true}}}
            ]
        }]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let p = wait_for(&pods, "p", "CreateContainerConfigError", |p| {
        waiting(p).and_then(|w| w.reason).as_deref() == Some("CreateContainerConfigError")
    })
    .await;
    let w = waiting(&p).unwrap();
    assert_eq!(w.message.as_deref(), Some("couldn't find key k in ConfigMap default/cfg"), "kubelet's message");
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.container_statuses.as_ref().unwrap()[0].restart_count, 0);

    // The key arrives: the next try runs the container, its first run.
    let patch = json!({"data": {"k": "here"}});
    cms.patch("cfg", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let p = wait_for(&pods, "p", "finished", |p| {
        matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
    })
    .await;
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(status.container_statuses.as_ref().unwrap()[0].restart_count, 0, "the failed tries are not counted");
    let log = pods.logs("p", &LogParams::default()).await.unwrap();
    assert_eq!(log, "k=here\n");
}
