//! Fixtures shared by the agent's integration tests.

use jobset_api::jobset::JobSet;
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
