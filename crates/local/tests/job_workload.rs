//! The Job controller's Workload integration (Kubernetes 1.36, KEP-5547, gate
//! `EnableWorkloadWithJob`) through the API: a gang candidate Job gets a Workload and a PodGroup,
//! its pods join the group, and the scheduler places them as one gang.

use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

mod common;
use common::{has_condition, job, wait_job};

async fn cluster(workload_with_job: bool) -> LocalCluster {
    let mut config = LocalConfig::fast(1);
    config.job.workload_with_job = workload_with_job;
    LocalCluster::start(ApiServer::in_memory(), config).await
}

fn indexed(n: i32) -> serde_json::Value {
    json!({"completions": n, "parallelism": n, "completionMode": "Indexed"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_candidate_job_gets_a_workload_and_a_pod_group_its_pods_join() {
    let c = cluster(true).await;
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let sim = json!({"sim.jobset.x-k8s.io/duration": "10ms"});
    jobs.create(&PostParams::default(), &job("train", indexed(3), sim)).await.unwrap();
    let done = wait_job(&jobs, "train", "Complete", |j| has_condition(j, "Complete")).await;

    let workloads: Api<Workload> = Api::default_namespaced(c.client());
    let wls = workloads.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(wls.len(), 1);
    let wl = &wls[0];
    let r = wl.spec.controller_ref.as_ref().unwrap();
    assert_eq!((r.api_group.as_deref(), r.kind.as_str(), r.name.as_str()), (Some("batch"), "Job", "train"));
    assert_eq!(wl.metadata.owner_references.as_ref().unwrap()[0].uid, done.metadata.uid.clone().unwrap());
    let template = &wl.spec.pod_group_templates[0];
    assert_eq!(template.name, "train-pgt-0");
    assert_eq!(template.scheduling_policy.gang.as_ref().unwrap().min_count, 3);

    let groups: Api<PodGroup> = Api::default_namespaced(c.client());
    let pgs = groups.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pgs.len(), 1);
    let pg = &pgs[0];
    let from = pg.spec.pod_group_template_ref.as_ref().and_then(|r| r.workload.as_ref()).unwrap();
    assert_eq!(
        (from.workload_name.as_str(), from.pod_group_template_name.as_str()),
        (wl.metadata.name.as_deref().unwrap(), "train-pgt-0")
    );
    let conditions = pg.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(
        conditions.iter().any(|c| c.type_ == "PodGroupScheduled" && c.status == "True"),
        "the scheduler placed it as a gang: {conditions:?}"
    );

    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let pods = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        let group = p.spec.as_ref().and_then(|s| s.scheduling_group.as_ref()).and_then(|g| g.pod_group_name.clone());
        assert_eq!(group.as_deref(), pg.metadata.name.as_deref());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_or_for_a_job_that_is_no_gang_there_is_no_workload() {
    let sim = json!({"sim.jobset.x-k8s.io/duration": "10ms"});
    for (gate, name, spec) in [
        (false, "gated", indexed(2)),
        (true, "partial", json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"})),
    ] {
        let c = cluster(gate).await;
        let jobs: Api<Job> = Api::default_namespaced(c.client());
        jobs.create(&PostParams::default(), &job(name, spec, sim.clone())).await.unwrap();
        wait_job(&jobs, name, "Complete", |j| has_condition(j, "Complete")).await;
        let workloads: Api<Workload> = Api::default_namespaced(c.client());
        assert!(workloads.list(&ListParams::default()).await.unwrap().items.is_empty(), "{name}");
        let pods: Api<Pod> = Api::default_namespaced(c.client());
        let pods = pods.list(&ListParams::default()).await.unwrap().items;
        assert!(pods.iter().all(|p| p.spec.as_ref().unwrap().scheduling_group.is_none()), "{name}");
    }
}
