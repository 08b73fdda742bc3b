//! Events the JobSet controller records when the API server rejects a child it creates: the
//! note carries the API server's Status message as upstream's `err.Error()` does (as kubectl
//! shows it), not a dump of the client's error value.

use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::REASON_JOB_CREATION_FAILED;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;

mod common;
use common::*;

/// kube-apiserver's answer to a Job with `maxFailedIndexes` but no `backoffLimitPerIndex`
/// (`ValidateJobSpec`), a template the JobSet schema and webhook accept.
const REJECTED: &str = r#"Job.batch "rejected-workers-0" is invalid: spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"#;

#[tokio::test]
async fn a_job_the_api_server_rejects_is_reported_as_job_creation_failed_with_the_servers_message() {
    let c = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(1)).await;
    let job_template = json!({
        "parallelism": 1, "completions": 1, "completionMode": "Indexed", "backoffLimit": 0, "maxFailedIndexes": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    });
    let js: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "rejected", "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job_template}}]}
    }))
    .unwrap();
    let jobsets: Api<JobSet> = Api::default_namespaced(c.client());
    jobsets.create(&PostParams::default(), &js).await.expect("the JobSet is accepted");

    let events: Api<Event> = Api::default_namespaced(c.client());
    let is_it = |e: &Event| e.reason.as_deref() == Some(REASON_JOB_CREATION_FAILED);
    let seen = wait_for(
        &events,
        watcher::Config::default().fields("involvedObject.name=rejected"),
        "event JobCreationFailed of rejected",
        |v| v.iter().any(is_it),
    )
    .await;
    let e = seen.into_iter().find(is_it).unwrap();
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    // Upstream: fmt.Errorf("job %q creation failed with error: %v", job.Name, err).
    let want = format!(r#"job "rejected-workers-0" creation failed with error: {REJECTED}"#);
    assert_eq!(e.message.as_deref(), Some(want.as_str()));

    // The same Job created directly gets that very message from the API server.
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "rejected-workers-0", "namespace": "default"},
        "spec": job_template
    }))
    .unwrap();
    match Api::<Job>::default_namespaced(c.client()).create(&PostParams::default(), &job).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.message.as_str()), (422, REJECTED)),
        other => panic!("expected a 422, got {other:?}"),
    }
    c.shutdown().await;
}
