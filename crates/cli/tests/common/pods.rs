//! Following the pods of a `jobset up` started by a test: waits through watches, and the main
//! container's status and process.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// Waits (through a watch, at most `wait`) for pod `name` to satisfy `pred`.
pub async fn wait_for(pods: &Api<Pod>, name: &str, what: &str, wait: Duration, pred: impl Fn(&Pod) -> bool) -> Pod {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = watcher(pods.clone(), config).applied_objects().boxed();
    tokio::time::timeout(wait, async {
        while let Some(ev) = w.next().await {
            if let Ok(p) = ev
                && pred(&p)
            {
                return p;
            }
        }
        panic!("the watch of {name} ended")
    })
    .await
    .unwrap_or_else(|_| panic!("pod {name}: not {what} within {wait:?}"))
}

/// The status of the container named `main`.
pub fn main_status(p: &Pod) -> Option<&ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "main")
}

pub fn running(p: &Pod) -> bool {
    main_status(p).and_then(|c| c.state.as_ref()).is_some_and(|s| s.running.is_some())
}

/// The main container's ID and the host pid of its command (`process://<pid>-<n>`).
pub fn main_container(p: &Pod) -> (String, i32) {
    let id = main_status(p).and_then(|c| c.container_id.clone()).expect("a container ID");
    let pid = id.strip_prefix("process://").and_then(|r| r.split('-').next()).and_then(|p| p.parse().ok());
    (id.clone(), pid.unwrap_or_else(|| panic!("a pid in {id}")))
}
