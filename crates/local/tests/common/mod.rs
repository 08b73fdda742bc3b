//! Helpers shared by the local-mode integration tests: waiting for objects through watches.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::JOBSET_NAME;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub const TIMEOUT: Duration = Duration::from_secs(60);

pub trait Obj: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Obj for K {}

pub fn name_of(o: &impl Resource) -> String {
    o.meta().name.clone().unwrap_or_default()
}

pub fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

pub fn of_jobset(name: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!("{JOBSET_NAME}={name}"))
}

/// Waits (through a watch, bounded) until the objects matching `cfg` satisfy `pred`, and
/// returns them (sorted by name).
pub async fn wait_for<K: Obj>(api: &Api<K>, cfg: watcher::Config, what: &str, pred: impl Fn(&[K]) -> bool) -> Vec<K> {
    let mut s = watcher(api.clone(), cfg).default_backoff().boxed();
    let mut state: BTreeMap<String, K> = BTreeMap::new();
    let mut init: BTreeMap<String, K> = BTreeMap::new();
    let mut synced = false;
    let found = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = s.next().await {
            match ev {
                Ok(watcher::Event::Init) => init.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    init.insert(name_of(&o), o);
                }
                Ok(watcher::Event::InitDone) => {
                    state = std::mem::take(&mut init);
                    synced = true;
                }
                Ok(watcher::Event::Apply(o)) => {
                    state.insert(name_of(&o), o);
                }
                Ok(watcher::Event::Delete(o)) => {
                    state.remove(&name_of(&o));
                }
                Err(_) => continue,
            }
            if synced {
                let all: Vec<K> = state.values().cloned().collect();
                if pred(&all) {
                    return all;
                }
            }
        }
        panic!("watch ended")
    })
    .await;
    match found {
        Ok(all) => all,
        Err(_) => {
            let last: Vec<&K> = state.values().collect();
            panic!("timed out waiting for {what}; last seen: {last:#?}")
        }
    }
}

pub async fn wait_jobset(api: &Api<JobSet>, name: &str, what: &str, pred: impl Fn(&JobSet) -> bool) -> JobSet {
    let found = wait_for(api, by_name(name), &format!("jobset {name}: {what}"), |v| v.first().is_some_and(&pred)).await;
    found.into_iter().next().unwrap()
}

pub fn uid_of(o: &impl Resource) -> String {
    o.meta().uid.clone().unwrap_or_default()
}

/// One observed version of an object (`deleted`: the watch reported it gone).
#[derive(Clone, Debug)]
pub struct Seen<K> {
    pub deleted: bool,
    pub obj: K,
}

/// Every version of the matching objects, from a watch started before the test acts.
pub struct History<K> {
    log: Arc<Mutex<Vec<Seen<K>>>>,
    changed: tokio::sync::watch::Receiver<usize>,
    task: JoinHandle<()>,
}

pub async fn record<K: Obj>(api: Api<K>, cfg: watcher::Config) -> History<K> {
    let log: Arc<Mutex<Vec<Seen<K>>>> = Arc::default();
    let (tx, changed) = tokio::sync::watch::channel(0usize);
    let (synced_tx, synced) = tokio::sync::oneshot::channel();
    let l = log.clone();
    let task = tokio::spawn(async move {
        let mut synced_tx = Some(synced_tx);
        let mut s = watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = s.next().await {
            let seen = match ev {
                Ok(watcher::Event::InitApply(obj) | watcher::Event::Apply(obj)) => Seen { deleted: false, obj },
                Ok(watcher::Event::Delete(obj)) => Seen { deleted: true, obj },
                Ok(watcher::Event::InitDone) => {
                    if let Some(t) = synced_tx.take() {
                        let _ = t.send(());
                    }
                    continue;
                }
                _ => continue,
            };
            let n = {
                let mut log = l.lock().unwrap();
                log.push(seen);
                log.len()
            };
            let _ = tx.send(n);
        }
    });
    tokio::time::timeout(TIMEOUT, synced).await.expect("the recorder's watch synced").unwrap();
    History { log, changed, task }
}

impl<K: Obj> History<K> {
    pub fn snapshot(&self) -> Vec<Seen<K>> {
        self.log.lock().unwrap().clone()
    }
    /// Every non-deleted version, in order.
    pub fn versions(&self) -> Vec<K> {
        self.snapshot().into_iter().filter(|s| !s.deleted).map(|s| s.obj).collect()
    }
    /// Waits until the recorded log satisfies `pred`.
    pub async fn until(&self, what: &str, pred: impl Fn(&[Seen<K>]) -> bool) {
        let mut rx = self.changed.clone();
        tokio::time::timeout(TIMEOUT, async {
            loop {
                if pred(&self.snapshot()) {
                    return;
                }
                rx.changed().await.expect("recorder running");
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for the recorded history: {what}"))
    }
    /// Waits until the recorder has seen `obj`'s resourceVersion.
    pub async fn caught_up(&self, obj: &K) {
        let rv = obj.meta().resource_version.clone();
        self.until("caught up", |log| log.iter().any(|s| s.obj.meta().resource_version == rv)).await;
    }
    /// Every uid each name had, in order of appearance.
    pub fn uids(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for s in self.snapshot() {
            let uids = out.entry(name_of(&s.obj)).or_default();
            let uid = uid_of(&s.obj);
            if !uids.contains(&uid) {
                uids.push(uid);
            }
        }
        out
    }
    /// How many distinct objects (uids) each name had.
    pub fn incarnations(&self) -> BTreeMap<String, usize> {
        self.uids().into_iter().map(|(k, v)| (k, v.len())).collect()
    }
    /// The last version of every uid, in order of first appearance.
    pub fn last_of_each(&self) -> Vec<K> {
        let mut order: Vec<String> = vec![];
        let mut last: BTreeMap<String, K> = BTreeMap::new();
        for s in self.snapshot() {
            let uid = uid_of(&s.obj);
            if !order.contains(&uid) {
                order.push(uid.clone());
            }
            last.insert(uid, s.obj);
        }
        order.into_iter().map(|u| last.remove(&u).unwrap()).collect()
    }
}

impl<K> Drop for History<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The JobSet's `(currentInPlaceRestartAttempt, previousInPlaceRestartAttempt)`.
pub fn in_place_attempts(js: &JobSet) -> (Option<i32>, Option<i32>) {
    let s = js.status.as_ref();
    (s.and_then(|s| s.current_in_place_restart_attempt), s.and_then(|s| s.previous_in_place_restart_attempt))
}

/// The `(current, previous)` pairs the JobSet went through, repeats dropped.
pub fn in_place_history(versions: &[JobSet]) -> Vec<(Option<i32>, Option<i32>)> {
    let mut out: Vec<(Option<i32>, Option<i32>)> = versions.iter().map(in_place_attempts).collect();
    out.dedup();
    out
}

/// A Job whose pods carry simulation annotations (`spec` is merged over the defaults; the
/// template's labels, if `spec` gives any, are kept).
pub fn job(name: &str, spec: Value, sim: Value) -> Job {
    let mut v = json!({"metadata": {"name": name}, "spec": spec});
    let labels = v["spec"]["template"]["metadata"]["labels"].clone();
    v["spec"]["template"] = json!({"metadata": {"annotations": sim, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}});
    serde_json::from_value(v).unwrap()
}

/// Whether the Job has condition `type_` True.
pub fn has_condition(j: &Job, type_: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Waits (through a watch, bounded) until the Job satisfies `pred`.
pub async fn wait_job(api: &Api<Job>, name: &str, what: &str, pred: impl Fn(&Job) -> bool) -> Job {
    let mut s = watcher(api.clone(), watcher::Config::default().fields(&format!("metadata.name={name}")))
        .applied_objects()
        .boxed();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(j)) = s.next().await {
            if pred(&j) {
                return j;
            }
        }
        panic!("watch ended")
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for job {name}: {what}"))
}

/// The in-place restart agent's image, as upstream's manifests name it (any tag runs the agent).
pub const AGENT_IMAGE: &str = "registry.k8s.io/jobset/in-place-restart-agent:v0.1.0";

/// The prefix of the simulated runtime's pod annotations.
pub const SIM: &str = "sim.jobset.x-k8s.io/";

/// `RestartAllContainers` on any non-zero exit.
pub fn restart_all_on_failure() -> Value {
    json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}])
}

/// An in-place restart replicated job: one Job of two pods (the Job fields InPlaceRestart requires), each pod
/// with the agent as a sidecar (its startup probe is the barrier) and a worker; `sim` are the
/// pod's simulation annotations (on top of `duration: forever`).
pub fn agent_rjob(name: &str, sim: &[(&str, &str)]) -> Value {
    let mut annotations = json!({format!("{SIM}duration"): "forever"});
    for (k, v) in sim {
        annotations[format!("{SIM}{k}")] = json!(v);
    }
    json!({
        "name": name, "replicas": 1,
        "template": {"spec": {
            "parallelism": 2, "completions": 2, "completionMode": "Indexed",
            "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [{
                        "name": "agent", "image": AGENT_IMAGE, "restartPolicy": "Always",
                        "restartPolicyRules": restart_all_on_failure(),
                        "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": 8081},
                                         "periodSeconds": 1, "failureThreshold": 600},
                        "env": [
                            {"name": "JOBSET_NAME", "valueFrom": {"fieldRef":
                                {"fieldPath": format!("metadata.annotations['{JOBSET_NAME}']")}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ]
                    }],
                    "containers": [{
                        "name": "worker", "image": "busybox", "restartPolicy": "Never",
                        "restartPolicyRules": restart_all_on_failure()
                    }]
                }
            }
        }}
    })
}

/// A JobSet with everything the webhook would default set explicitly.
pub fn jobset(name: &str, strategy: &str, max_restarts: i32, rules: Vec<Value>, rjobs: Vec<Value>) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": jobset_api::jobset::keys::API_VERSION, "kind": jobset_api::jobset::keys::KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicatedJobs": rjobs,
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": strategy, "rules": rules},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true}
        }
    }))
    .expect("a valid JobSet")
}

pub fn status(js: &JobSet) -> jobset_api::jobset::JobSetStatus {
    js.status.clone().unwrap_or_default()
}

pub fn rj_status(js: &JobSet, rj: &str) -> jobset_api::jobset::ReplicatedJobStatus {
    status(js).replicated_jobs_status.into_iter().find(|s| s.name == rj).unwrap_or_default()
}

/// The status of the pod's container (init or regular) `name`.
pub fn container<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = p.status.as_ref()?;
    s.init_container_statuses.iter().chain(s.container_statuses.iter()).flatten().find(|c| c.name == name)
}

/// Whether the pod's container `name` is running.
pub fn running(p: &Pod, name: &str) -> bool {
    container(p, name).and_then(|c| c.state.as_ref()).is_some_and(|s| s.running.is_some())
}

/// The restart count of the pod's container `name`.
pub fn restart_count(p: &Pod, name: &str) -> Option<i32> {
    container(p, name).map(|c| c.restart_count)
}
