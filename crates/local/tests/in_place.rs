//! In-place restart end to end on simulated nodes: every pod runs the real in-place restart agent
//! (the simulated runtime runs `jobset_agent::run` for the agent image) as a sidecar whose startup
//! probe is its barrier, and a simulated worker. The JobSet controller and the agents coordinate
//! through the pods' attempt annotations and the JobSet status alone, as in a real cluster.
//!
//! Every wait goes through a watch with a timeout; the tests record the history of the JobSet and
//! of its pods from before the JobSet is created, and compare versions across objects by their
//! resourceVersion (one global, monotonic counter in the embedded server).

use std::collections::BTreeMap;

use jobset_api::jobset::keys::*;
use jobset_api::jobset::{JobSet, JobSetStatus};
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;
use common::*;

/// A node label no node has until a test adds it.
const GATE: &str = "example.com/gate";

async fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(nodes)).await
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// An InPlaceRestart JobSet of these replicated jobs. Everything the webhook would default is
/// set explicitly.
fn in_place_jobset(name: &str, max_restarts: i32, rjobs: Vec<Value>) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicatedJobs": rjobs,
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": "InPlaceRestart"},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true}
        }
    }))
    .unwrap()
}

/// The pods of Job 0 of `b` with completion index 1 fail their worker after 300 ms, `attempts`
/// times (`None`: every time); every other run runs until stopped.
fn b_fails(attempts: Option<u32>) -> Value {
    let attempts = attempts.map(|n| n.to_string());
    let mut sim = vec![("fail-job-indexes", "0"), ("fail-indexes", "1"), ("fail-duration", "300ms")];
    if let Some(n) = &attempts {
        sim.push(("fail-attempts", n));
    }
    agent_rjob("b", &sim)
}

// ---------------------------------------------------------------------------------------------
// Waiting and recording through watches.
// ---------------------------------------------------------------------------------------------

fn rv_of(o: &impl Resource) -> u64 {
    o.meta().resource_version.as_deref().and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

// ---------------------------------------------------------------------------------------------
// Status helpers.
// ---------------------------------------------------------------------------------------------

fn status(js: &JobSet) -> JobSetStatus {
    js.status.clone().unwrap_or_default()
}

fn attempt(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(IN_PLACE_RESTART_ATTEMPT).map(String::as_str)
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

/// Pod name → its (uid, node) in every recorded version where it is bound.
fn identities(history: &[Pod]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for p in history {
        if let Some(node) = node_of(p) {
            let id = (p.metadata.uid.clone().unwrap_or_default(), node.to_string());
            let ids = out.entry(name_of(p)).or_default();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_worker_restarts_every_pod_in_place() {
    let c = cluster(4).await;
    let name = "inplace";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let sets = record(jobsets.clone(), by_name(name)).await;
    let pods = record(pods_api.clone(), of_jobset(name)).await;
    // Pod 1 of `b`'s Job fails its worker once, 300 ms after the barrier first lifted.
    let js = in_place_jobset(name, 3, vec![agent_rjob("a", &[]), b_fails(Some(1))]);
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    wait_jobset(&jobsets, name, "current attempt 1", |js| in_place_attempts(js).0 == Some(1)).await;
    let restarted = wait_for(&pods_api, of_jobset(name), "4 pods at attempt 1 with their workers running", |p| {
        p.len() == 4 && p.iter().all(|p| attempt(p) == Some("1") && running(p, "worker"))
    })
    .await;
    for p in &restarted {
        assert_eq!(restart_count(p, "worker"), Some(1), "{}: the worker restarted once", name_of(p));
        assert_eq!(restart_count(p, "agent"), Some(1), "{}: the agent restarted once", name_of(p));
    }
    let js = jobsets.get(name).await.unwrap();
    sets.caught_up(&js).await;
    let last = restarted.iter().max_by_key(|p| rv_of(*p)).unwrap();
    pods.caught_up(last).await;

    // Same pods, same nodes: nothing was recreated or rescheduled.
    let ids = identities(&pods.versions());
    assert_eq!(ids.len(), 4, "{ids:#?}");
    assert!(ids.values().all(|ids| ids.len() == 1), "every pod keeps its uid and node: {ids:#?}");
    // The worker's failure deprecated attempt 0 at once; every pod then agreed on attempt 1.
    assert_eq!(
        in_place_history(&sets.versions()),
        [(None, None), (Some(0), None), (Some(0), Some(0)), (Some(1), Some(0))],
    );
    assert!(!js.finished(), "{:?}", js.status);
    assert_eq!(status(&js).restarts, 0, "an in-place restart is not a JobSet restart");
    assert!(js.condition(COND_FAILED).is_none(), "{:?}", js.status);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_start_only_once_the_barrier_lifted() {
    let c = cluster(4).await;
    let name = "barrier";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let sets = record(jobsets.clone(), by_name(name)).await;
    let pods = record(pods_api.clone(), of_jobset(name)).await;
    // `b`'s pods fit no node until the gate label is added, so the barriers of `a`'s pods, whose
    // agents have announced attempt 0, hold: not every pod of the JobSet is at that attempt.
    let mut b = agent_rjob("b", &[]);
    b["template"]["spec"]["template"]["spec"]["nodeSelector"] = json!({GATE: "open"});
    jobsets.create(&PostParams::default(), &in_place_jobset(name, 3, vec![agent_rjob("a", &[]), b])).await.unwrap();

    let a_announced = |p: &Pod| label(p, REPLICATED_JOB_NAME) == Some("a") && attempt(p) == Some("0");
    let waiting = wait_for(&pods_api, of_jobset(name), "a's agents running and announced", |p| {
        p.iter().filter(|p| a_announced(p) && running(p, "agent")).count() == 2
    })
    .await;
    assert!(!waiting.iter().any(|p| running(p, "worker")), "a worker runs behind a held barrier: {waiting:#?}");
    let js = jobsets.get(name).await.unwrap();
    assert_eq!(in_place_attempts(&js), (None, None));

    // Open the gate: `b`'s pods start, announce, and every barrier lifts.
    let nodes: Api<Node> = Api::all(c.client());
    let open = json!({"metadata": {"labels": {GATE: "open"}}});
    nodes.patch("node-0", &PatchParams::default(), &Patch::Merge(&open)).await.unwrap();
    let synced = wait_jobset(&jobsets, name, "current attempt 0", |js| in_place_attempts(js).0 == Some(0)).await;
    let all = wait_for(&pods_api, of_jobset(name), "4 workers running", |p| {
        p.len() == 4 && p.iter().all(|p| running(p, "worker"))
    })
    .await;
    sets.caught_up(&synced).await;
    pods.caught_up(all.iter().max_by_key(|p| rv_of(*p)).unwrap()).await;

    // No pod version shows a started worker before the JobSet reported attempt 0 synced.
    let lifted_at = sets.versions().iter().filter(|js| in_place_attempts(js).0 == Some(0)).map(rv_of).min().unwrap();
    let early: Vec<(String, u64)> = pods
        .versions()
        .iter()
        .filter(|p| container(p, "worker").is_some_and(|c| c.started == Some(true) || running(p, "worker")))
        .filter(|p| rv_of(*p) < lifted_at)
        .map(|p| (name_of(p), rv_of(p)))
        .collect();
    assert!(early.is_empty(), "workers started before the barrier lifted (at {lifted_at}): {early:?}");
    for p in &all {
        assert_eq!(restart_count(p, "worker"), Some(0), "{}", name_of(p));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_failing_every_attempt_exceeds_max_restarts() {
    let c = cluster(4).await;
    let name = "maxrestarts";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let sets = record(jobsets.clone(), by_name(name)).await;
    // maxRestarts 1: attempt 0 fails, attempt 1 fails, attempt 2 is one restart too many.
    let js = in_place_jobset(name, 1, vec![agent_rjob("a", &[]), b_fails(None)]);
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    let done = wait_jobset(&jobsets, name, "Completed or Failed", JobSet::finished).await;
    let failed = done.condition(COND_FAILED).expect("a Failed condition");
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("True", REASON_REACHED_MAX_RESTARTS));
    assert_eq!(status(&done).terminal_state, COND_FAILED);
    assert_eq!(status(&done).restarts, 0);
    sets.caught_up(&done).await;
    let history = in_place_history(&sets.versions());
    assert!(history.contains(&(Some(1), Some(0))), "attempt 1 was synced before: {history:?}");
    c.shutdown().await;
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}
