//! Resources mutable while suspended: KEP-1150 (a suspended JobSet's container resources) on top
//! of Kubernetes' KEP-5440 (a suspended Job's). The Kueue flow: a JobSet is submitted suspended,
//! its requests are right-sized, it is resumed, and its Jobs and pods run with the new requests.

use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::*;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;
use common::*;

/// KEP-1150's Story 1 manifest, as written.
const STORY_1: &str = r#"
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: training-job
spec:
  suspend: true
  replicatedJobs:
  - name: workers
    replicas: 4
    template:
      spec:
        template:
          spec:
            containers:
            - name: trainer
              image: my-trainer:latest
              resources:
                requests:
                  cpu: "4"
                  nvidia.com/gpu: "1"
"#;

/// The `requests` of a pod spec's first container.
fn requests(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Option<Value> {
    let c = spec?.containers.first()?;
    serde_json::to_value(c.resources.as_ref()?.requests.as_ref()?).ok()
}

fn is_invalid(r: Result<impl std::fmt::Debug, kube::Error>, field: &str) {
    match r {
        Err(kube::Error::Api(s)) => assert!(
            s.code == 422
                && s.message.contains(&format!("{field}: Invalid value: "))
                && s.message.ends_with("field is immutable"),
            "{}",
            s.message
        ),
        other => panic!("expected a 422 on {field}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kep_1150_story_1_right_sizing_a_suspended_jobset_reaches_its_pods_on_resume() {
    // Four nodes of 2 CPUs and a GPU each: the submitted 4 CPUs fit nowhere, the right-sized 2 do.
    let mut config = LocalConfig::fast(4);
    for n in &mut config.nodes {
        n.capacity.insert("cpu".into(), "2".into());
        n.capacity.insert("nvidia.com/gpu".into(), "1".into());
    }
    let c = LocalCluster::start(ApiServer::in_memory(), config).await;
    let name = "training-job";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let pods = record(Api::<Pod>::default_namespaced(c.client()), of_jobset(name)).await;
    let js: JobSet = serde_saphyr::from_str(STORY_1).unwrap();
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    wait_for(&jobs, of_jobset(name), "four suspended Jobs", |j| {
        j.len() == 4 && j.iter().all(|j| j.spec.as_ref().and_then(|s| s.suspend) == Some(true))
    })
    .await;

    // The KEP's patch, then the resume.
    let pp = PatchParams::default();
    let right_size: json_patch::Patch = serde_json::from_value(json!([
      {"op": "replace",
       "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/resources/requests",
       "value": {"cpu": "2", "nvidia.com/gpu": "1"}}
    ]))
    .unwrap();
    jobsets.patch(name, &pp, &Patch::Json::<()>(right_size)).await.expect("resources change while suspended");
    jobsets.patch(name, &pp, &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();

    let want = json!({"cpu": "2", "nvidia.com/gpu": "1"});
    let resumed = wait_for(&jobs, of_jobset(name), "four resumed Jobs", |j| {
        j.len() == 4 && j.iter().all(|j| j.spec.as_ref().and_then(|s| s.suspend) == Some(false))
    })
    .await;
    for j in &resumed {
        let template = j.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        assert_eq!(requests(template), Some(want.clone()), "{}", name_of(j));
    }
    wait_jobset(&jobsets, name, "completed", |js| js.condition_true(COND_COMPLETED)).await;
    // Every pod ever created had the new requests (none could have run with 4 CPUs).
    let all = pods.versions();
    assert!(all.len() >= 4, "{} pod versions", all.len());
    for p in &all {
        assert_eq!(requests(p.spec.as_ref()), Some(want.clone()), "{}", name_of(p));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_jobsets_and_started_jobs_keep_their_resources() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(1)).await;
    let pp = PatchParams::default();
    let resize = |path: &str| -> json_patch::Patch {
        serde_json::from_value(json!([{"op": "add", "path": path, "value": {"requests": {"cpu": "1"}}}])).unwrap()
    };

    // A running JobSet: upstream's immutability error.
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let mut js: JobSet = serde_saphyr::from_str(STORY_1).unwrap();
    js.metadata.name = Some("running".into());
    js.spec.suspend = Some(false);
    js.spec.replicated_jobs[0].template.0["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({});
    js.spec.replicated_jobs[0].template.0["spec"]["template"]["metadata"] =
        json!({"annotations": {format!("{SIM}duration"): "forever"}});
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    let path = "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/resources";
    is_invalid(jobsets.patch("running", &pp, &Patch::Json::<()>(resize(path))).await, "spec.replicatedJobs");

    // A Job: mutable while suspended and never started (KEP-5440), not once it runs.
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let spec = json!({"suspend": true, "template": {}});
    jobs.create(&PostParams::default(), &job("plain", spec, json!({format!("{SIM}duration"): "forever"})))
        .await
        .unwrap();
    let path = "/spec/template/spec/containers/0/resources";
    jobs.patch("plain", &pp, &Patch::Json::<()>(resize(path))).await.expect("a suspended Job's resources change");
    jobs.patch("plain", &pp, &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let started =
        wait_job(&jobs, "plain", "started", |j| j.status.as_ref().is_some_and(|s| s.start_time.is_some())).await;
    let template = started.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    assert_eq!(requests(template), Some(json!({"cpu": "1"})));
    let bigger: json_patch::Patch = serde_json::from_value(
        json!([{"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "2"}]),
    )
    .unwrap();
    is_invalid(jobs.patch("plain", &pp, &Patch::Json::<()>(bigger)).await, "spec.template");
    c.shutdown().await;
}

/// KEP-1150 on a cluster whose Jobs refuse the change (KEP-5440 off there; a
/// ValidatingAdmissionPolicy with kube-apiserver's immutability message plays it): the resume
/// patch fails, the JobSet says why in a `FailedResourcePropagation` Warning, and its Jobs stay
/// suspended with the requests they had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_new_resources_the_jobs_refuse_is_reported_as_failed_resource_propagation() {
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    use k8s_openapi::api::core::v1::Event;
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(1)).await;
    let resources = "spec.template.spec.containers[0].resources";
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": "job-resources-immutable"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                         "operations": ["UPDATE"], "resources": ["jobs"]}]},
                 "validations": [{"expression": format!("object.{resources} == oldObject.{resources}"),
                                  "message": "spec.template: Invalid value: field is immutable"}]}
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": "job-resources-immutable"},
        "spec": {"policyName": "job-resources-immutable", "validationActions": ["Deny"]}
    }))
    .unwrap();
    Api::<ValidatingAdmissionPolicy>::all(c.client()).create(&PostParams::default(), &policy).await.unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(c.client()).create(&PostParams::default(), &binding).await.unwrap();

    let name = "training-job";
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    let jobs: Api<Job> = Api::default_namespaced(c.client());
    let js: JobSet = serde_saphyr::from_str(STORY_1).unwrap();
    jobsets.create(&PostParams::default(), &js).await.unwrap();
    wait_for(&jobs, of_jobset(name), "four suspended Jobs", |j| j.len() == 4).await;
    let pp = PatchParams::default();
    let path = "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/resources/requests/cpu";
    let right_size: json_patch::Patch =
        serde_json::from_value(json!([{"op": "replace", "path": path, "value": "2"}])).unwrap();
    jobsets.patch(name, &pp, &Patch::Json::<()>(right_size)).await.expect("resources change while suspended");
    jobsets.patch(name, &pp, &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();

    let events: Api<Event> = Api::default_namespaced(c.client());
    let reported = wait_for(&events, Default::default(), "a FailedResourcePropagation event", |es| {
        es.iter().any(|e| e.reason.as_deref() == Some(REASON_FAILED_RESOURCE_PROPAGATION))
    })
    .await;
    let e = reported.iter().find(|e| e.reason.as_deref() == Some(REASON_FAILED_RESOURCE_PROPAGATION)).unwrap();
    assert_eq!((e.type_.as_deref(), e.involved_object.name.as_deref()), (Some("Warning"), Some(name)));
    let job = e.message.as_deref().unwrap_or_default();
    let want_start = "Failed to propagate mutated resources to child Job: jobs.batch \"training-job-workers-";
    let denied = "is forbidden: ValidatingAdmissionPolicy 'job-resources-immutable' with binding \
                  'job-resources-immutable' denied request: spec.template: Invalid value: field is immutable. \
                  Ensure MutablePodResourcesForSuspendedJobs is enabled on the API server.";
    assert!(job.starts_with(want_start) && job.ends_with(denied), "{job}");

    // Nothing half-done: every Job is still suspended with the submitted requests.
    for j in jobs.list(&Default::default()).await.unwrap() {
        assert_eq!(j.spec.as_ref().and_then(|s| s.suspend), Some(true), "{}", name_of(&j));
        let template = j.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        assert_eq!(requests(template), Some(json!({"cpu": "4", "nvidia.com/gpu": "1"})), "{}", name_of(&j));
    }
    c.shutdown().await;
}
