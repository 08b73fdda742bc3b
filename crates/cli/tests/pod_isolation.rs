//! `jobset up --runtime process` keeps its pods out of its data dir (issue 24): a pod reads its
//! own Secret, while another pod finds nothing of the data dir (the API server's store with
//! every Secret, the keys, the logs, the other pods' sandboxes), and the Secret's bytes never
//! reach the runtime's files on disk. Needs root (mount namespaces): skipped elsewhere, except
//! under CI (`CI` set), where it fails instead.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn pod(name: &str, script: &str, spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    spec["restartPolicy"] = json!("Never");
    spec["containers"][0]["name"] = json!("main");
    spec["containers"][0]["image"] = json!("busybox");
    spec["containers"][0]["command"] = json!(["sh", "-c", script]);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// Waits (through a watch) until pod `name` has finished; returns its phase.
async fn finished(pods: &Api<Pod>, name: &str) -> String {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = watcher(pods.clone(), config).applied_objects().boxed();
    tokio::time::timeout(WAIT, async {
        while let Some(ev) = w.next().await {
            let phase = ev.ok().and_then(|p| p.status?.phase);
            if let Some(phase @ ("Succeeded" | "Failed")) = phase.as_deref() {
                return phase.to_string();
            }
        }
        panic!("the watch of {name} ended")
    })
    .await
    .unwrap_or_else(|_| panic!("pod {name} did not finish within {WAIT:?}"))
}

/// Every regular file under `dir` whose content contains `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_containing(&p, needle)),
            Ok(t) if t.is_file() && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) => {
                out.push(p)
            }
            _ => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_pods_see_their_secret_but_nothing_of_the_data_dir() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { nix::libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs the isolation tests as root");
        eprintln!("skipped: pod isolation needs root");
        return;
    }
    // Outside /tmp: there, the pods' private /tmp would hide the data dir anyway.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = dir.path().display().to_string();
    let args = ["--nodes", "1", "--runtime", "process", "--heartbeat-interval", "100ms"];
    let server = common::start(dir.path(), 0, &args).await;
    let client = server.client().await;
    let value = format!("hunter2-{}", std::process::id());
    let secret = Secret {
        metadata: kube::api::ObjectMeta { name: Some("creds".into()), ..Default::default() },
        data: Some([("password".to_string(), ByteString(value.clone().into_bytes()))].into()),
        ..Default::default()
    };
    Api::<Secret>::default_namespaced(client.clone()).create(&PostParams::default(), &secret).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);

    let owner = pod(
        "owner",
        "echo own=$(cat /tmp/creds/password); echo token-bytes=$(wc -c < /var/run/secrets/kubernetes.io/serviceaccount/token)",
        json!({"volumes": [{"name": "creds", "secret": {"secretName": "creds"}}],
               "containers": [{"volumeMounts": [{"name": "creds", "mountPath": "/tmp/creds"}]}]}),
    );
    pods.create(&PostParams::default(), &owner).await.unwrap();
    assert_eq!(finished(&pods, "owner").await, "Succeeded");
    let log = pods.logs("owner", &LogParams::default()).await.unwrap();
    let mut lines = log.lines();
    assert_eq!(lines.next(), Some(format!("own={value}").as_str()), "{log}");
    assert!(lines.next().is_some_and(|l| l.strip_prefix("token-bytes=").is_some_and(|n| n != "0")), "{log}");
    let runtime = dir.path().join("runtime");
    assert!(runtime.join("pods").is_dir(), "the runtime's state is in the data dir");
    assert_eq!(files_containing(&runtime, value.as_bytes()), Vec::<PathBuf>::new(), "the secret on disk");

    let script = format!(
        "echo entries=$(ls -A {data} | wc -l); cat {data}/store.redb > /dev/null 2>&1 && echo read-store; \
         grep -rl {value} {data} 2>/dev/null; echo end"
    );
    pods.create(&PostParams::default(), &pod("other", &script, json!({"containers": [{}]}))).await.unwrap();
    assert_eq!(finished(&pods, "other").await, "Succeeded");
    let log = pods.logs("other", &LogParams::default()).await.unwrap();
    assert_eq!(log, "entries=0\nend\n", "another pod saw the data dir");
    server.kill().await;
}
