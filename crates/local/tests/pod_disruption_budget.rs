//! PodDisruptionBudgets in local mode: the disruption controller keeps their status, and the
//! eviction subresource spends and honours it, as kube-controller-manager and kube-apiserver do.

use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{Api, EvictParams, PostParams};
use serde_json::json;

mod common;
use common::{by_name, wait_for};

const VIOLATES: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

struct Setup {
    _cluster: LocalCluster,
    pdbs: Api<PodDisruptionBudget>,
    /// Evictions through a client that does not retry 429 (the in-process one would, for minutes).
    evict: Api<Pod>,
}

/// A one-node cluster with budget `budget` (`minAvailable: min`) over `pods` running pods.
async fn setup(min: i32, pods: usize) -> Setup {
    let server = ApiServer::in_memory();
    let cluster = LocalCluster::start(server.clone(), LocalConfig::fast(1)).await;
    let client = server.client();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "budget"},
        "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": "guarded"}}}});
    pdbs.create(&PostParams::default(), &serde_json::from_value(budget).unwrap()).await.unwrap();
    let api: Api<Pod> = Api::namespaced(client, "default");
    for i in 0..pods {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "labels": {"app": "guarded"},
                         "annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        api.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    }
    Setup { _cluster: cluster, pdbs, evict: Api::namespaced(kube::Client::new(server.router(), "default"), "default") }
}

fn status(b: &PodDisruptionBudget) -> PodDisruptionBudgetStatus {
    b.status.clone().unwrap_or_default()
}

/// (currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed)
fn counts(b: &PodDisruptionBudget) -> [i32; 4] {
    let s = status(b);
    [s.current_healthy, s.desired_healthy, s.expected_pods, s.disruptions_allowed].map(|n| n.unwrap_or(0))
}

fn allowed_condition(b: &PodDisruptionBudget) -> (String, String) {
    let c = status(b).conditions.unwrap_or_default().into_iter().find(|c| c.type_ == "DisruptionAllowed").unwrap();
    (c.status, c.reason)
}

async fn wait_counts(s: &Setup, what: &str, want: [i32; 4]) -> PodDisruptionBudget {
    let found = wait_for(&s.pdbs, by_name("budget"), what, |b| b.first().is_some_and(|b| counts(b) == want)).await;
    found.into_iter().next().unwrap()
}

/// The 429 Status of a refused eviction: (message, cause type, cause message).
async fn refused(s: &Setup, pod: &str) -> (String, String, String) {
    match s.evict.evict(pod, &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"), "{status:?}");
            let cause = status.details.and_then(|d| d.causes.into_iter().next()).expect("a cause");
            (status.message, cause.reason, cause.message)
        }
        other => panic!("eviction of {pod} not refused: {other:?}"),
    }
}

#[tokio::test]
async fn a_budget_with_no_room_refuses_evictions_with_429() {
    let s = setup(2, 2).await;
    let b = wait_counts(&s, "two healthy pods", [2, 2, 2, 0]).await;
    assert_eq!(allowed_condition(&b), ("False".into(), "InsufficientPods".into()));
    assert_eq!(status(&b).observed_generation, Some(1));
    let (message, cause, detail) = refused(&s, "p0").await;
    assert_eq!(message, VIOLATES);
    assert_eq!(cause, "DisruptionBudget");
    assert_eq!(detail, "The disruption budget budget needs 2 healthy pods and has 2 currently");
}

#[tokio::test]
async fn one_eviction_spends_the_one_disruption_allowed_and_the_next_is_refused() {
    let s = setup(2, 3).await;
    let b = wait_counts(&s, "three healthy pods", [3, 2, 3, 1]).await;
    assert_eq!(allowed_condition(&b), ("True".into(), "SufficientPods".into()));
    s.evict.evict("p0", &EvictParams::default()).await.expect("the first eviction is allowed");
    // The eviction spent the budget in its own write, before the controller saw the pod go.
    let now = s.pdbs.get("budget").await.unwrap();
    assert_eq!(status(&now).disruptions_allowed, Some(0));
    let (message, _, detail) = refused(&s, "p1").await;
    assert_eq!(message, VIOLATES);
    assert!(detail.starts_with("The disruption budget budget needs 2 healthy pods and has "), "{detail}");
    let b = wait_counts(&s, "the evicted pod gone", [2, 2, 2, 0]).await;
    assert_eq!(allowed_condition(&b), ("False".into(), "InsufficientPods".into()));
    let (_, _, detail) = refused(&s, "p1").await;
    assert_eq!(detail, "The disruption budget budget needs 2 healthy pods and has 2 currently");
}
