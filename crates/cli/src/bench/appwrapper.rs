//! `jobset bench appwrapper`: an AppWrapper wrapping one Indexed Job, from a pod failure to the
//! AppWrapper back in Running with every pod of the recreated Job running, with zero failure
//! grace and retry pause; and what upstream's defaults would add, computed on paper.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use jobset_api::appwrapper::keys::{
    API_VERSION, APPWRAPPER_LABEL, FAILURE_GRACE_PERIOD_DURATION, KIND, PODS_READY, RESOURCES_DEPLOYED,
    RETRY_PAUSE_PERIOD_DURATION,
};
use jobset_api::appwrapper::{AppWrapper, AppWrapperPhase, FaultToleranceConfig};
use jobset_apiserver::persist::Memory;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use super::{Limits, UsageWho, cpu, server_with};

/// What the bench saw, in order.
#[derive(Default)]
struct Marks(Vec<(String, Instant)>);

impl Marks {
    fn mark(&mut self, what: &str) {
        if !self.0.iter().any(|(w, _)| w == what) {
            self.0.push((what.to_string(), Instant::now()));
        }
    }
    fn at(&self, what: &str) -> Option<Instant> {
        self.0.iter().find(|(w, _)| w == what).map(|(_, t)| *t)
    }
}

const ALL_RUNNING: &str = "Running, PodsReady";
const POD_FAILED: &str = "a pod Failed";
const RESETTING: &str = "Resetting";
const DELETED: &str = "resources deleted (ResourcesDeployed=False)";
const RESUMING: &str = "Resuming";
const RUNNING_AGAIN: &str = "Running, PodsReady, resettingCount 1";

pub async fn appwrapper_bench(
    pods: &[i32],
    pods_per_node: i32,
    fail_after: Duration,
    limits: Limits,
) -> anyhow::Result<()> {
    println!(
        "jobset bench appwrapper ({} cores; API server in-flight limits {:?}/{:?})",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        limits.read_only,
        limits.mutating
    );
    for &n in pods {
        one(n, pods_per_node, fail_after, limits).await?;
    }
    let ft = FaultToleranceConfig::default();
    println!(
        "upstream's defaults, on paper: a Running AppWrapper is re-checked every 60 s (failed pods do not trigger a \
         reconcile), then FailureGracePeriod {} s, then RetryPausePeriod {} s counted from detection (deletion \
         overlaps it): {}–{} s plus the redeploy measured above",
        ft.failure_grace_period.as_secs(),
        ft.retry_pause_period.as_secs(),
        ft.failure_grace_period.as_secs() + ft.retry_pause_period.as_secs(),
        60 + ft.failure_grace_period.as_secs() + ft.retry_pause_period.as_secs(),
    );
    Ok(())
}

async fn one(pods: i32, pods_per_node: i32, fail_after: Duration, limits: Limits) -> anyhow::Result<()> {
    let server = server_with(Box::new(Memory), limits)?;
    let nodes = (pods / pods_per_node.max(1)).max(1) as usize;
    let cluster = LocalCluster::start(server.clone(), LocalConfig::with_nodes(nodes)).await;
    let client = server.client();
    let name = format!("bench-{pods}");
    // Pod 0 fails once, `fail_after` after it started; every other pod runs until deleted.
    let sim = json!({
        "sim.jobset.x-k8s.io/duration": "forever",
        "sim.jobset.x-k8s.io/exit-code": "1",
        "sim.jobset.x-k8s.io/fail-indexes": "0",
        "sim.jobset.x-k8s.io/fail-attempts": "1",
        "sim.jobset.x-k8s.io/fail-duration": format!("{}ms", fail_after.as_millis()),
    });
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": pods,
            "template": {"metadata": {"annotations": sim}, "spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example.com/ml/trainer:2026.11"}]}}}});
    let aw: AppWrapper = serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "annotations": {FAILURE_GRACE_PERIOD_DURATION: "0s", RETRY_PAUSE_PERIOD_DURATION: "0s"}},
        "spec": {"components": [{"template": job}]}
    }))?;
    let api: Api<AppWrapper> = Api::default_namespaced(client.clone());
    let pod_api: Api<Pod> = Api::default_namespaced(client.clone());
    let mut aws = watcher(api.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    let mut pod_events = watcher(pod_api, watcher::Config::default().labels(&format!("{APPWRAPPER_LABEL}={name}")))
        .applied_objects()
        .boxed();
    let start = Instant::now();
    api.create(&PostParams::default(), &aw).await?;
    let mut marks = Marks::default();
    let mut requests = (0, 0);
    let mut cpu_at_failure = Duration::ZERO;
    tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            tokio::select! {
                Some(Ok(a)) = aws.next() => {
                    let resets = a.status.as_ref().map_or(0, |s| s.resetting_count);
                    match a.phase() {
                        Some(AppWrapperPhase::Running) if a.is_true(PODS_READY) && resets == 0 => marks.mark(ALL_RUNNING),
                        Some(AppWrapperPhase::Resetting) => {
                            marks.mark(RESETTING);
                            if a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False") {
                                marks.mark(DELETED);
                            }
                        }
                        Some(AppWrapperPhase::Resuming) if resets == 1 => marks.mark(RESUMING),
                        Some(AppWrapperPhase::Running) if a.is_true(PODS_READY) && resets == 1 => {
                            marks.mark(RUNNING_AGAIN);
                            return Ok(());
                        }
                        Some(AppWrapperPhase::Failed) => anyhow::bail!("the AppWrapper failed: {:?}", a.status),
                        _ => {}
                    }
                }
                Some(Ok(p)) = pod_events.next() => {
                    if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") && marks.at(POD_FAILED).is_none() {
                        marks.mark(POD_FAILED);
                        requests.0 = server.requests.snapshot().1;
                        cpu_at_failure = cpu(UsageWho::RUSAGE_SELF);
                    }
                }
                else => anyhow::bail!("the watches ended"),
            }
        }
    })
    .await
    .context("no recovery within 10 minutes")??;
    requests.1 = server.requests.snapshot().1;
    let process_cpu = cpu(UsageWho::RUSAGE_SELF) - cpu_at_failure;
    let (Some(up), Some(failed), Some(back)) = (marks.at(ALL_RUNNING), marks.at(POD_FAILED), marks.at(RUNNING_AGAIN))
    else {
        anyhow::bail!("missed a milestone");
    };
    println!(
        "{pods} pods on {nodes} nodes: all running {:.2} s after create; pod failure → AppWrapper Running with all {pods} \
         pods running again: {:.2} s",
        (up - start).as_secs_f64(),
        (back - failed).as_secs_f64()
    );
    let steps: Vec<String> = [RESETTING, DELETED, RESUMING, RUNNING_AGAIN]
        .iter()
        .filter_map(|m| Some(format!("{m} +{:.2} s", (marks.at(m)? - failed).as_secs_f64())))
        .collect();
    println!("  after the failure: {}", steps.join(", "));
    println!(
        "  API requests during the recovery: {}; process CPU {:.2} s",
        requests.1 - requests.0,
        process_cpu.as_secs_f64()
    );
    cluster.shutdown().await;
    Ok(())
}
