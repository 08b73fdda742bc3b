//! batch/v1 Job admission is built in: defaults (selector, template labels) and upstream's errors.

mod common;

use common::{Transport, harness};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::json;

fn job(restart: &str, pfp: bool) -> Job {
    let mut v = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "i"}]}}}});
    if pfp {
        v["spec"]["podFailurePolicy"] =
            json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]});
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn jobs_are_defaulted_and_validated_with_upstream_messages() {
    let h = harness(Transport::InProcess).await;
    let jobs: Api<Job> = Api::default_namespaced(h.client.clone());
    let err = jobs.create(&PostParams::default(), &job("OnFailure", true)).await.unwrap_err();
    let kube::Error::Api(s) = err else { panic!("{err:?}") };
    assert_eq!(s.code, 422);
    assert!(
        s.message.contains(
            "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Never\""
        ) || s.message.contains("only \"Never\" is supported when podFailurePolicy is specified"),
        "{}",
        s.message
    );
    let created = jobs.create(&PostParams::default(), &job("Never", false)).await.unwrap();
    let spec = created.spec.unwrap();
    let uid = created.metadata.uid.unwrap();
    assert_eq!(spec.backoff_limit, Some(6));
    assert_eq!(spec.completions, Some(1));
    assert_eq!(spec.selector.unwrap().match_labels.unwrap()["batch.kubernetes.io/controller-uid"], uid);
    assert_eq!(spec.template.metadata.unwrap().labels.unwrap()["batch.kubernetes.io/job-name"], "j");
}
