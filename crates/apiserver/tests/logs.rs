//! `pods/{name}/log` serves what a node agent wrote in the log directory layout.

mod common;

use std::io::Write;

use common::{Transport, fast_config, harness_with};
use futures::{AsyncBufReadExt, StreamExt};
use jobset_apiserver::Admission;
use jobset_apiserver::logs::{cri_line, log_path};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn append(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(cri_line(jiff::Timestamp::now(), "stdout", text).as_bytes()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_support_container_tail_timestamps_previous_and_follow() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = fast_config();
    config.log_dir = Some(dir.path().to_path_buf());
    let h = harness_with(Transport::InProcess, config, Admission::default()).await;
    let pods: Api<Pod> = Api::default_namespaced(h.client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [
        {"name": "main", "image": "i"}, {"name": "side", "image": "i"}]}}))
    .unwrap();
    let uid = pods.create(&PostParams::default(), &pod).await.unwrap().metadata.uid.unwrap();
    let running = |restarts: u32| {
        json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "restartCount": restarts, "ready": true, "image": "i", "imageID": "", "state": {"running": {}}},
            {"name": "side", "restartCount": 0, "ready": true, "image": "i", "imageID": "", "state": {"running": {}}}]}})
    };
    pods.patch_status("p", &PatchParams::default(), &Patch::Merge(running(1))).await.unwrap();
    append(&log_path(dir.path(), "default", "p", &uid, "main", 0), "first run");
    for l in ["one", "two", "three"] {
        append(&log_path(dir.path(), "default", "p", &uid, "main", 1), l);
    }
    let logs = |p: LogParams| {
        let pods = pods.clone();
        async move { pods.logs("p", &p).await }
    };
    let main = || LogParams { container: Some("main".into()), ..Default::default() };
    assert_eq!(logs(main()).await.unwrap(), "one\ntwo\nthree\n");
    assert_eq!(logs(LogParams { tail_lines: Some(1), ..main() }).await.unwrap(), "three\n");
    assert_eq!(logs(LogParams { previous: true, ..main() }).await.unwrap(), "first run\n");
    let stamped = logs(LogParams { timestamps: true, tail_lines: Some(1), ..main() }).await.unwrap();
    let (ts, text) = stamped.trim_end().split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{stamped}");
    assert_eq!(text, "three");
    // Two containers and none named: a 400 naming the choices.
    let err = logs(LogParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("choose one of: [main side]")),
        "{err:?}"
    );
    let err = logs(LogParams { container: Some("side".into()), ..Default::default() }).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("waiting to start")),
        "{err:?}"
    );
    let err = pods.logs("nope", &main()).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");

    // Follow: new lines arrive while the container runs; the stream ends once it stopped.
    let mut lines =
        pods.log_stream("p", &LogParams { follow: true, tail_lines: Some(0), ..main() }).await.unwrap().lines();
    append(&log_path(dir.path(), "default", "p", &uid, "main", 1), "four");
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next()).await.unwrap();
    assert_eq!(next.unwrap().unwrap(), "four");
    let mut stopped = running(1);
    stopped["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0}});
    pods.patch_status("p", &PatchParams::default(), &Patch::Merge(stopped)).await.unwrap();
    let end =
        tokio::time::timeout(std::time::Duration::from_secs(10), async { while lines.next().await.is_some() {} }).await;
    assert!(end.is_ok(), "followed log did not end after the container stopped");
}
