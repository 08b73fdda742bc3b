//! Gang-scheduled JobSets (extension: the annotation `jobset.sigs.k8s.io/gang-policy`, upstream
//! KEP draft #969's options, over Kubernetes' Workload API, KEP-4671) on simulated nodes with
//! GPUs: the JobSet's Workload and PodGroups, all-or-nothing placement, and every restart
//! strategy keeping the gang. Waits go through watches with a timeout.

use jobset_api::jobset::JobSet;
use jobset_api::jobset::gang::GANG_POLICY;
use jobset_api::jobset::keys::RESTART_ATTEMPT;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;
use common::*;

/// Two nodes of 4 GPUs each.
async fn gpu_cluster() -> LocalCluster {
    let mut config = LocalConfig::fast(2);
    for n in &mut config.nodes {
        n.capacity.insert("nvidia.com/gpu".into(), "4".into());
    }
    LocalCluster::start(ApiServer::in_memory(), config).await
}

/// A replicated job of 3 Jobs, each one pod asking for 2 GPUs, with these simulation annotations.
fn gpu_rjob(sim: &[(&str, &str)]) -> Value {
    let mut annotations = json!({format!("{SIM}duration"): "forever"});
    for (k, v) in sim {
        annotations[format!("{SIM}{k}")] = json!(v);
    }
    json!({"name": "w", "replicas": 3, "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
        "template": {"metadata": {"annotations": annotations}, "spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox",
                "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]}}}}})
}

fn gang(mut js: JobSet, policy: &str) -> JobSet {
    js.metadata.annotations.get_or_insert_default().insert(GANG_POLICY.into(), policy.into());
    js
}

fn group_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.as_deref()
}

fn bound(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

fn attempt_of(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref()?.get(RESTART_ATTEMPT).map(String::as_str)
}

/// The PodGroup's `PodGroupScheduled` status, once it has one equal to `status`.
async fn group_scheduled(c: &LocalCluster, name: &str, status: &str) -> PodGroup {
    let groups: Api<PodGroup> = Api::default_namespaced(c.client());
    let found = wait_for(&groups, by_name(name), &format!("PodGroup {name} PodGroupScheduled={status}"), |gs| {
        gs.iter().any(|g| {
            let cs = g.status.as_ref().and_then(|s| s.conditions.as_ref());
            cs.into_iter().flatten().any(|c| c.type_ == "PodGroupScheduled" && c.status == status)
        })
    })
    .await;
    found.into_iter().next().unwrap()
}

async fn cordon(c: &LocalCluster, node: &str, cordoned: bool) {
    let nodes: Api<Node> = Api::all(c.client());
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": cordoned}})))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_jobset_stays_entirely_pending_while_a_node_is_cordoned_and_starts_together_once_uncordoned() {
    let c = gpu_cluster().await;
    cordon(&c, "node-1", true).await;
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let js = gang(jobset("gang", "Recreate", 0, vec![], vec![gpu_rjob(&[])]), "JobSetAsGang");
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    let waiting = group_scheduled(&c, "gang-all-0", "False").await;
    let workloads: Api<Workload> = Api::default_namespaced(c.client());
    let wl = workloads.get("gang").await.unwrap();
    let template = &wl.spec.pod_group_templates[0];
    assert_eq!((template.name.as_str(), template.scheduling_policy.gang.as_ref().unwrap().min_count), ("all", 3));
    let message = &waiting.status.unwrap().conditions.unwrap()[0].message;
    assert!(message.starts_with("minCount (3) cannot be satisfied: 2 scheduled"), "{message}");
    let now = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(now.len(), 3);
    assert!(now.iter().all(|p| group_of(p) == Some("gang-all-0")), "every pod joins the gang");
    assert!(!now.iter().any(bound), "two pods fit on node-0, yet none is bound");

    cordon(&c, "node-1", false).await;
    wait_for(&pods, of_jobset("gang"), "3 pods running", |ps| ps.len() == 3 && ps.iter().all(|p| running(p, "main")))
        .await;
    group_scheduled(&c, "gang-all-0", "True").await;
    c.shutdown().await;
}

/// Job 0's pod fails once; a restart that recreates the Jobs makes a new gang, placed all
/// together again, and the old gang's PodGroup is deleted once its Jobs are gone.
async fn recreated_jobs_form_a_new_gang(strategy: &str) {
    let c = gpu_cluster().await;
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let failing = gpu_rjob(&[("fail-job-indexes", "0"), ("fail-attempts", "1"), ("fail-duration", "300ms")]);
    let js = gang(jobset("gang", strategy, 3, vec![], vec![failing]), "JobSetAsGang");
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    wait_jobset(&jobsets, "gang", "restarted once", |js| status(js).restarts == 1).await;
    let restarted = wait_for(&pods, of_jobset("gang"), "3 pods of attempt 1 running", |ps| {
        let new: Vec<&Pod> = ps.iter().filter(|p| attempt_of(p) == Some("1")).collect();
        new.len() == 3 && new.iter().all(|p| running(p, "main"))
    })
    .await;
    for p in restarted.iter().filter(|p| attempt_of(p) == Some("1")) {
        assert_eq!(group_of(p), Some("gang-all-1"), "{strategy}: a recreated Job's pod joins the new gang");
    }
    group_scheduled(&c, "gang-all-1", "True").await;
    let groups: Api<PodGroup> = Api::default_namespaced(c.client());
    let left = wait_for(&groups, of_jobset("gang"), "only the new attempt's PodGroup", |gs| gs.len() == 1).await;
    assert_eq!(name_of(&left[0]), "gang-all-1", "{strategy}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_restart_schedules_the_new_jobs_as_a_gang_again() {
    recreated_jobs_form_a_new_gang("Recreate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_recreate_restart_schedules_the_new_jobs_as_a_gang_again() {
    recreated_jobs_form_a_new_gang("BlockingRecreate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_restart_keeps_the_gang_s_pods_bound() {
    let c = gpu_cluster().await;
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let pods_api: Api<Pod> = Api::default_namespaced(c.client());
    let pods = record(pods_api.clone(), of_jobset("inplace")).await;
    let b = agent_rjob(
        "b",
        &[("fail-job-indexes", "0"), ("fail-indexes", "1"), ("fail-duration", "300ms"), ("fail-attempts", "1")],
    );
    let js = gang(
        jobset("inplace", "InPlaceRestart", 3, vec![], vec![agent_rjob("a", &[]), b]),
        "JobSetGangPerReplicatedJob",
    );
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    group_scheduled(&c, "inplace-a-0-0", "True").await;
    group_scheduled(&c, "inplace-b-0-0", "True").await;
    wait_jobset(&jobsets, "inplace", "in-place attempt 1", |js| in_place_attempts(js).0 == Some(1)).await;
    let annotation = jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
    let restarted = wait_for(&pods_api, of_jobset("inplace"), "4 pods at attempt 1 running", |ps| {
        ps.len() == 4
            && ps.iter().all(|p| {
                p.metadata.annotations.as_ref().and_then(|a| a.get(annotation)).map(String::as_str) == Some("1")
                    && running(p, "worker")
            })
    })
    .await;
    let last = restarted.iter().max_by_key(|p| p.metadata.resource_version.clone()).unwrap();
    pods.caught_up(last).await;
    assert_eq!(pods.uids().values().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1, 1], "no pod was recreated");
    let mut nodes = std::collections::BTreeMap::new();
    for p in pods.versions().iter().filter(|p| bound(p)) {
        nodes
            .entry(name_of(p))
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(p.spec.as_ref().unwrap().node_name.clone());
    }
    assert!(nodes.values().all(|n| n.len() == 1), "every pod stays on its node: {nodes:?}");
    for p in &restarted {
        let rj = &p.metadata.labels.as_ref().unwrap()[jobset_api::jobset::keys::REPLICATED_JOB_NAME];
        assert_eq!(group_of(p), Some(format!("inplace-{rj}-0-0").as_str()), "{}", name_of(p));
    }
    let groups: Api<PodGroup> = Api::default_namespaced(c.client());
    assert_eq!(groups.list(&ListParams::default()).await.unwrap().items.len(), 2, "no new gang");
    c.shutdown().await;
}

/// A PodGroup no pod may join any more (as one a controller that crashed between a restart and
/// the clean-up leaves behind) is deleted by the next JobSet controller, which remembers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_deletes_pod_groups_left_from_earlier_attempts() {
    let mut c = gpu_cluster().await;
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let js = gang(jobset("gang", "Recreate", 0, vec![], vec![gpu_rjob(&[])]), "JobSetAsGang");
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    let current = group_scheduled(&c, "gang-all-0", "True").await;

    let groups: Api<PodGroup> = Api::default_namespaced(c.client());
    let mut left = PodGroup { metadata: current.metadata.clone(), spec: current.spec.clone(), status: None };
    left.metadata = kube::api::ObjectMeta {
        name: Some("gang-all-left".into()),
        labels: current.metadata.labels.clone(),
        owner_references: current.metadata.owner_references.clone(),
        ..Default::default()
    };
    groups.create(&PostParams::default(), &left).await.unwrap();
    c.restart_jobset_controller();
    let kept = wait_for(&groups, of_jobset("gang"), "the left-over PodGroup deleted", |gs| gs.len() == 1).await;
    assert_eq!(name_of(&kept[0]), "gang-all-0", "the one in use stays");
    c.shutdown().await;
}
