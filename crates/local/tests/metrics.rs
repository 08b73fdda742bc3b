//! `GET /metrics`: the JobSet controller's Prometheus series, served by the embedded API server
//! in the OpenMetrics text encoding.

use std::time::Duration;

use futures::StreamExt;
use jobset_api::jobset::JobSet;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

async fn get_metrics(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.expect("GET /metrics")
}

#[tokio::test]
async fn completed_jobset_is_counted_at_metrics() {
    let cluster = LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(2)).await;
    let client = cluster.client();
    let jobsets: Api<JobSet> = Api::default_namespaced(client.clone());
    let js: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "metrics-demo"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "50ms"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
            }
        }}}]}
    }))
    .unwrap();
    jobsets.create(&PostParams::default(), &js).await.unwrap();

    // Until the JobSet is Completed (through a watch), then until the counter is served (the
    // controller counts after its status write succeeded).
    let mut w = watcher(jobsets.clone(), watcher::Config::default().fields("metadata.name=metrics-demo"))
        .applied_objects()
        .boxed();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(Ok(js)) = w.next().await {
            let conds = js.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
            if conds.iter().any(|c| c.type_ == "Completed" && c.status == "True") {
                return;
            }
        }
        panic!("the JobSet watch ended");
    })
    .await
    .expect("the JobSet completes within a minute");

    let want = r#"jobset_completed_total{jobset_name="metrics-demo",namespace="default"} 1"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = get_metrics(&client).await;
        if text.contains(want) || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(text.contains(want), "{text}");
    assert!(text.contains("# TYPE jobset_completed counter"), "{text}");
    assert!(text.contains(r#"controller_runtime_reconcile_time_seconds_count{controller="jobset"}"#), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert!(!text.contains("jobset_failed_total{"), "{text}");

    // The content type is OpenMetrics text.
    let req = http::Request::get("/metrics").body(kube::client::Body::from(Vec::new())).unwrap();
    let resp = client.send(req).await.expect("GET /metrics");
    assert_eq!(resp.status(), http::StatusCode::OK);
    assert_eq!(
        resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        Some(jobset_apiserver::OPENMETRICS_CONTENT_TYPE)
    );
    cluster.shutdown().await;
}
