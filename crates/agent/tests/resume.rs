//! A restarted sidecar agent resumes its JobSet watch where its pod's previous agent left off
//! (crates/agent/src/resume.rs), against the embedded API server: no list when the server still
//! has the history after the saved resourceVersion, a streaming list (or a list) after a 410.
//! An agent with no resume point streams its JobSet with one watch (`sendInitialEvents`), and
//! lists and watches against a server that refuses or ignores that.
mod common;
use common::{NS, POD};

use std::sync::Arc;
use std::time::Duration;

use jobset_agent::{AgentConfig, BackoffConfig, Endpoint, MemoryStore, NoWorker, ResumeStore};
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::{DISABLE_IN_PLACE_RESTART, IN_PLACE_RESTART_ATTEMPT};
use jobset_apiserver::persist::Memory;
use jobset_apiserver::store::StoreConfig;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_secs(20);

struct Env {
    server: Arc<ApiServer>,
    client: kube::Client,
    store: MemoryStore,
    /// The agents' `watch_list` (how long a streaming list may take to its bookmark).
    watch_list: Option<Duration>,
}

impl Env {
    /// A server keeping `history` events per resource for watches, with the JobSet `train`
    /// (InPlaceRestart) and its pod.
    async fn start(history: usize) -> Env {
        let config =
            ServerConfig { store: StoreConfig { watch_history: history, ..Default::default() }, ..Default::default() };
        let env = Env::empty(config, ApiServer::client);
        common::populate(&env.client).await;
        env
    }

    /// A server with `config`, reached through `client`, holding nothing yet.
    fn empty(config: ServerConfig, client: impl Fn(&Arc<ApiServer>) -> kube::Client) -> Env {
        let server = ApiServer::new(Box::new(Memory), Admission::default(), config).unwrap();
        let client = client(&server);
        Env { server, client, store: MemoryStore::new(), watch_list: Some(TIMEOUT) }
    }

    fn config(&self) -> AgentConfig {
        let mut cfg = AgentConfig::new(NS, "train", POD);
        cfg.exit_code = 42;
        cfg.backoff =
            BackoffConfig { initial: Duration::from_millis(10), max: Duration::from_millis(100), jitter: 1.0 };
        cfg.resume = ResumeStore::Memory(self.store.clone());
        cfg.watch_list = self.watch_list;
        cfg
    }

    /// One agent "container run": a sidecar-mode agent with a fresh barrier, sharing the store.
    fn spawn(&self) -> (JoinHandle<i32>, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        let agent = jobset_agent::run(self.config(), self.client.clone(), tx, None::<NoWorker>, std::future::pending());
        (tokio::spawn(agent), rx)
    }

    async fn patch_jobset(&self, patch: Value) {
        let api = Api::<JobSet>::namespaced(self.client.clone(), NS);
        api.patch("train", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    async fn set_status(&self, status: Value) {
        Api::<JobSet>::namespaced(self.client.clone(), NS)
            .patch_status("train", &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }

    /// The pod's attempt annotation, read with one GET.
    async fn attempt(&self) -> Option<String> {
        let pod = Api::<Pod>::namespaced(self.client.clone(), NS).get(POD).await.unwrap();
        pod.metadata.annotations.and_then(|mut a| a.remove(IN_PLACE_RESTART_ATTEMPT))
    }

    /// Waits until the pod's attempt annotation is `want` (GETs until then: no list).
    async fn attempt_is(&self, want: &str) {
        let seen = tokio::time::timeout(TIMEOUT, async {
            while self.attempt().await.as_deref() != Some(want) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "the pod was not annotated with attempt {want}");
    }

    fn count(&self, verb: &str) -> u64 {
        self.server.requests.snapshot().0.into_iter().find(|(v, _)| *v == verb).map_or(0, |(_, n)| n)
    }

    /// The first agent run: announces 0, is lifted at current 0, and is killed. Returns the
    /// saved resume point.
    async fn first_run(&self) -> jobset_agent::resume::Saved {
        let (agent, mut barrier) = self.spawn();
        self.attempt_is("0").await;
        self.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
        lifted(&mut barrier).await;
        agent.abort();
        let _ = agent.await;
        self.store.get().expect("the agent kept its resume point")
    }
}

async fn lifted(rx: &mut watch::Receiver<bool>) {
    tokio::time::timeout(TIMEOUT, rx.wait_for(|l| *l)).await.expect("barrier lifted in time").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_agent_resumes_its_watch_at_the_saved_resource_version_without_a_list() {
    let env = Env::start(10_000).await;
    let saved = env.first_run().await;
    let status = saved.object.as_deref().map(|o| serde_json::from_str::<Value>(o).unwrap()["status"].clone());
    assert_eq!(status, Some(json!({"currentInPlaceRestartAttempt": 0})), "the JobSet as last seen");
    assert!(!saved.resource_version.is_empty());

    // While no agent runs, the JobSet changes: only a watch from the saved resourceVersion
    // replays that; a watch from "now" never sees it.
    env.patch_jobset(json!({"metadata": {"annotations": {DISABLE_IN_PLACE_RESTART: "true"}}})).await;
    let (lists, watches) = (env.count("list"), env.count("watch"));
    let (agent, mut barrier) = env.spawn();
    lifted(&mut barrier).await;
    assert_eq!(env.count("list"), lists, "no list");
    assert_eq!(env.count("watch"), watches + 1, "one watch");
    // It decided from the saved view first (current 0: announce 1); a list would have shown the
    // bypass annotation, which announces nothing.
    assert_eq!(env.attempt().await.as_deref(), Some("1"));
    assert!(!agent.is_finished());
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_agent_starts_afresh_when_its_resource_version_is_gone() {
    // (streaming lists on, lists then watches: a streaming list, or a list)
    for (watch_list, lists_after) in [(Some(TIMEOUT), 0), (None, 1)] {
        let mut env = Env::start(2).await;
        env.watch_list = watch_list;
        env.first_run().await;
        // More changes than the server keeps: the saved resourceVersion is compacted away (410).
        for i in 0..4 {
            env.patch_jobset(json!({"metadata": {"labels": {"change": i.to_string()}}})).await;
        }
        env.patch_jobset(json!({"metadata": {"annotations": {DISABLE_IN_PLACE_RESTART: "true"}}})).await;
        let lists = env.count("list");
        let (agent, mut barrier) = env.spawn();
        lifted(&mut barrier).await;
        assert_eq!(env.count("list"), lists + lists_after, "watch_list {watch_list:?}: lists after the 410");
        let saved = env.store.get().unwrap();
        let annotations =
            serde_json::from_str::<Value>(saved.object.as_deref().unwrap()).unwrap()["metadata"]["annotations"].clone();
        assert_eq!(annotations[DISABLE_IN_PLACE_RESTART], "true", "watch_list {watch_list:?}: the JobSet is kept");
        agent.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barrier_endpoint_read_once_per_pod_and_then_kept() {
    let env = Env::start(10_000).await;
    let mut cfg = env.config();
    cfg.barrier = None;
    let want = Endpoint { path: "/barrier-is-lifted".into(), port: 8080 };
    let gets = env.count("get");
    let got = tokio::time::timeout(TIMEOUT, jobset_agent::barrier_endpoint(&cfg, &env.client)).await.unwrap();
    assert_eq!((got, env.count("get")), (want.clone(), gets + 1), "read from the pod");
    assert_eq!(jobset_agent::saved_endpoint(&cfg), Some(want.clone()), "kept");
    let got = tokio::time::timeout(TIMEOUT, jobset_agent::barrier_endpoint(&cfg, &env.client)).await.unwrap();
    assert_eq!((got, env.count("get")), (want, gets + 1), "the next agent of the pod reads no pod");
}

/// A client of `server` as a kube-apiserver older than streaming lists (1.26) serves it: the
/// parameters it does not know are dropped, so a streaming list is a plain watch from "0" (the
/// current objects as ADDED events, then changes, and no initial-events-end bookmark).
fn ignoring_streaming_lists(server: &Arc<ApiServer>) -> kube::Client {
    use axum::extract::Request;
    async fn drop_unknown(mut req: Request) -> Request {
        let Some(query) = req.uri().query() else { return req };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|p| !p.starts_with("sendInitialEvents=") && !p.starts_with("resourceVersionMatch="))
            .collect();
        let uri = format!("{}?{}", req.uri().path(), kept.join("&"));
        *req.uri_mut() = uri.parse().expect("the same URI, less two parameters");
        req
    }
    kube::Client::new(server.router().layer(axum::middleware::map_request(drop_unknown)), "default")
}

/// The server `config` without the `WatchList` feature gate.
fn without_watch_list() -> ServerConfig {
    ServerConfig { watch_list: false, ..Default::default() }
}

/// A fresh agent's run: announces 0 and is lifted at current 0. Returns (lists, watches) made.
async fn fresh_run(env: &Env) -> (u64, u64) {
    let (lists, watches) = (env.count("list"), env.count("watch"));
    let (agent, mut barrier) = env.spawn();
    env.attempt_is("0").await;
    env.set_status(json!({"currentInPlaceRestartAttempt": 0})).await;
    lifted(&mut barrier).await;
    assert!(!agent.is_finished());
    agent.abort();
    (env.count("list") - lists, env.count("watch") - watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_agent_streams_its_jobset_with_one_watch_and_no_list() {
    let env = Env::start(10_000).await;
    assert_eq!(fresh_run(&env).await, (0, 1), "(lists, watches)");
    let saved = env.store.get().expect("a resume point");
    let object = serde_json::from_str::<Value>(saved.object.as_deref().expect("the JobSet")).unwrap();
    assert_eq!(object["status"], json!({"currentInPlaceRestartAttempt": 0}), "kept as last seen");
    assert!(!saved.resource_version.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_agent_of_a_missing_jobset_waits_on_its_streaming_list_until_it_is_created() {
    let env = Env::empty(ServerConfig::default(), ApiServer::client);
    Api::<Pod>::namespaced(env.client.clone(), NS).create(&Default::default(), &common::pod()).await.unwrap();
    let (lists, watches) = (env.count("list"), env.count("watch"));
    let (agent, _barrier) = env.spawn();
    // The bookmark of an empty snapshot is kept as the resume point: no JobSet at that version.
    let bookmarked = tokio::time::timeout(TIMEOUT, async {
        loop {
            match env.store.get() {
                Some(s) if !s.resource_version.is_empty() => return s,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .expect("the initial-events-end bookmark kept");
    assert_eq!(bookmarked.object, None);
    Api::<JobSet>::namespaced(env.client.clone(), NS).create(&Default::default(), &common::train()).await.unwrap();
    env.attempt_is("0").await;
    assert_eq!((env.count("list") - lists, env.count("watch") - watches), (0, 1), "(lists, watches)");
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_agent_lists_and_watches_when_the_server_refuses_streaming_lists() {
    let env = Env::empty(without_watch_list(), ApiServer::client);
    common::populate(&env.client).await;
    // The refused streaming list (422), then a list and its watch.
    assert_eq!(fresh_run(&env).await, (1, 2), "(lists, watches)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_agent_lists_and_watches_when_no_initial_events_end_bookmark_comes() {
    let mut env = Env::empty(without_watch_list(), ignoring_streaming_lists);
    env.watch_list = Some(Duration::from_millis(200));
    common::populate(&env.client).await;
    // The ignored streaming list (its ADDED event is not taken as a view without the bookmark),
    // then a list and its watch.
    assert_eq!(fresh_run(&env).await, (1, 2), "(lists, watches)");
}
