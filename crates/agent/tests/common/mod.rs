//! Fixtures shared by the agent's integration tests.

use jobset_api::jobset::JobSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

pub const NS: &str = "default";
/// The one pod of [`train`].
pub const POD: &str = "train-workers-0-0";

/// The JobSet `train`: InPlaceRestart, `maxRestarts: 5`, one replicated job `workers` of one pod.
pub fn train() -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {
            "failurePolicy": {"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "completions": 1, "parallelism": 1,
                "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
                "template": {"spec": {"restartPolicy": "Never",
                                      "containers": [{"name": "worker", "image": "busybox"}]}}
            }}}]
        }
    }))
    .expect("a valid JobSet")
}

/// [`POD`]: the agent as a sidecar (its startup probe is the barrier) and a worker.
pub fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": POD, "namespace": NS, "labels": {"jobset.sigs.k8s.io/jobset-name": "train"}},
        "spec": {
            "initContainers": [{"name": "agent", "image": "jobset", "restartPolicy": "Always",
                                "startupProbe": {"httpGet": {"path": "/barrier-is-lifted", "port": 8080}}}],
            "containers": [{"name": "worker", "image": "busybox"}]
        }
    }))
    .expect("a valid Pod")
}

/// Creates [`train`] and its pod through `client`.
pub async fn populate(client: &kube::Client) {
    Api::<JobSet>::namespaced(client.clone(), NS).create(&PostParams::default(), &train()).await.unwrap();
    Api::<Pod>::namespaced(client.clone(), NS).create(&PostParams::default(), &pod()).await.unwrap();
}
