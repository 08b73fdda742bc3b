//! `jobset bench gang`: one JobSet of `pods` pods on simulated nodes, scheduled one pod at a time
//! and then as one gang (`jobset.sigs.k8s.io/gang-policy: JobSetAsGang`, KEP-4671), each on a
//! fresh cluster: how long from the last pod created to every pod bound, and from create.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobset_local::{LocalCluster, LocalConfig};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use super::{Limits, Tracker, jobset_resource, milestone, server_with, track};
use jobset_apiserver::persist::Memory;

/// (create → all pods created, all created → all bound) of one run.
async fn run(pods: i32, nodes: usize, gang: bool) -> anyhow::Result<(Duration, Duration)> {
    let server = server_with(Box::new(Memory), Limits::default())?;
    let cluster = LocalCluster::start(server.clone(), LocalConfig::with_nodes(nodes)).await;
    let client = server.client();
    let name = if gang { "bench-gang" } else { "bench-pods" };
    let tracker = Arc::new(Mutex::new(Tracker::new(pods as usize, 1)));
    let (tx, mut rx) = tokio::sync::watch::channel(());
    let tracking = track(client.clone(), name, tracker.clone(), tx);
    let mut annotations = json!({});
    if gang {
        annotations[jobset_api::jobset::gang::GANG_POLICY] = json!(jobset_api::jobset::gang::JOBSET_AS_GANG);
    }
    let js: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer"}]}
            }
        }}}]}
    }))?;
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client, "default", &jobset_resource());
    let created = Instant::now();
    jobsets.create(&PostParams::default(), &js).await?;
    let limit = Duration::from_secs(600);
    let all_created = format!("attempt 0: all {pods} pods created");
    let all_bound = format!("attempt 0: all {pods} pods scheduled");
    let made = milestone(&tracker, &mut rx, limit, "every pod created", |t| t.at(&all_created), Tracker::stuck).await?;
    let bound = milestone(&tracker, &mut rx, limit, "every pod bound", |t| t.at(&all_bound), Tracker::stuck).await?;
    tracking.abort();
    cluster.shutdown().await;
    Ok((made.duration_since(created), bound.saturating_duration_since(made)))
}

pub async fn bench(pods: i32, nodes: usize) -> anyhow::Result<()> {
    println!(
        "jobset bench gang: one JobSet of {pods} pods on {nodes} simulated nodes ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let mut rows = vec![];
    for gang in [false, true] {
        let (made, bound) = run(pods, nodes, gang).await?;
        let what = if gang { "one gang (JobSetAsGang)" } else { "pod by pod" };
        println!(
            "  {what}: create → all created {:.2} s, all created → all bound {:.2} s",
            made.as_secs_f64(),
            bound.as_secs_f64()
        );
        rows.push((what, made, bound));
    }
    println!();
    println!("| scheduling | create → all pods created | all created → all bound |");
    println!("|---|---|---|");
    for (what, made, bound) in rows {
        println!("| {what} | {:.2} s | {:.2} s |", made.as_secs_f64(), bound.as_secs_f64());
    }
    Ok(())
}
