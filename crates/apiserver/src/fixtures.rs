//! Objects for benchmarks and harnesses, shared so that each measures the same thing.

use serde_json::{Value, json};

/// A pod shaped like a JobSet worker's (labels, annotations, env, resources): about 1.5 KB of
/// JSON. What `jobset bench apiserver` and `examples/create_cost.rs` create.
pub fn worker_pod(i: usize) -> Value {
    json!({
        "metadata": {
            "name": format!("trainer-workers-{}-{}-x7k2p", i / 8, i % 8),
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "trainer", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": (i / 8).to_string(), "batch.kubernetes.io/job-completion-index": (i % 8).to_string(),
                "batch.kubernetes.io/controller-uid": "5f0c1d2e-8a4b-4c3d-9e8f-7a6b5c4d3e2f", "job-name": format!("trainer-workers-{}", i / 8)
            },
            "annotations": {"jobset.sigs.k8s.io/jobset-name": "trainer", "batch.kubernetes.io/job-completion-index": (i % 8).to_string()}
        },
        "spec": {
            "restartPolicy": "Never", "subdomain": "trainer", "hostname": format!("trainer-workers-{}-{}", i / 8, i % 8),
            "containers": [{
                "name": "trainer", "image": "registry.example.com/ml/trainer:2026.11",
                "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
                "env": [{"name": "JOB_COMPLETION_INDEX", "value": (i % 8).to_string()}, {"name": "MASTER_ADDR", "value": "trainer-workers-0-0.trainer"}, {"name": "WORLD_SIZE", "value": "15000"}],
                "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
            }]
        }
    })
}
