//! A pod of the process runtime reaches `jobset up` with the standard in-cluster configuration
//! (here: a real `kubectl` inside the pod), and its bound token may change only the in-place
//! restart attempt annotation of its own pod.

mod common;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";

fn pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "sh", "command": ["sh", "-c", script]}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_token_changes_its_attempt_annotation_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), 0, &["--nodes", "1", "--runtime", "process"]).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    pods.create(&PostParams::default(), &pod("other", "sleep 60")).await.unwrap();
    // HOME in the pod's private /tmp: no kubeconfig there, so kubectl uses the in-cluster one.
    let script = format!(
        "export HOME=/tmp; \
         kubectl annotate pod other {ATTEMPT}=5 --overwrite 2>&1; echo other:$?; \
         kubectl annotate pod me {ATTEMPT}=0 --overwrite 2>&1; echo self:$?; \
         kubectl label pod me x=y 2>&1; echo label:$?; \
         echo namespace:$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
    );
    let created = pods.create(&PostParams::default(), &pod("me", &script)).await.unwrap();
    let mut w = pods.watch(&WatchParams::default().fields("metadata.name=me"), "0").await.unwrap().boxed();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = w.try_next().await.unwrap() {
            if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev
                && p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
            {
                return;
            }
        }
    })
    .await
    .expect("pod me finished");
    let log = pods.logs("me", &LogParams::default()).await.unwrap();
    assert!(log.contains("self:0"), "{log}");
    assert!(log.contains("other:1") && log.contains("forbidden"), "{log}");
    assert!(log.contains("label:1"), "{log}");
    assert!(log.contains("namespace:default"), "{log}");
    let me = pods.get("me").await.unwrap();
    assert_eq!(me.uid(), created.uid());
    assert_eq!(me.annotations().get(ATTEMPT).map(String::as_str), Some("0"));
    assert!(!me.labels().contains_key("x"));
    assert!(!pods.get("other").await.unwrap().annotations().contains_key(ATTEMPT));
    server.kill().await;
}
