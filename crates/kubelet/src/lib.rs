//! The node agent: registers a Node, heartbeats its Lease and Ready condition, and drives every
//! pod bound to it through an explicit state machine ([`pod`]), with containers run by a
//! [`runtime::Runtime`] (today the [`runtime::simulated::SimulatedRuntime`]).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use std::sync::Arc;
//! use jobset_kubelet::{AgentConfig, NodeConfig, run_node};
//! use jobset_kubelet::runtime::simulated::{SimulatedRuntime, SimulationState};
//!
//! let runtime = Arc::new(SimulatedRuntime::new(SimulationState::new()));
//! let mut nodes = Vec::new();
//! for node in NodeConfig::uniform(4, "node") {
//!     nodes.push(run_node(client.clone(), node, AgentConfig::default(), runtime.clone()).await);
//! }
//! nodes[0].fail(); // simulated node loss: no heartbeats, no status writes
//! nodes[0].recover();
//! # }
//! ```

pub mod config;
pub mod hosts;
pub mod machine;
pub mod node;
pub mod pod;
pub mod probe;
pub mod resources;
pub mod runtime;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub use crate::config::{AgentConfig, NodeConfig, SimRule};
pub use crate::runtime::Runtime;

/// Node annotation through which `jobset node fail` reaches the agents (see [`follow_failure_annotations`]).
pub const NODE_FAILED_ANNOTATION: &str = "sim.jobset.x-k8s.io/node-failed";

/// What every task of one node agent shares.
pub(crate) struct NodeContext {
    pub client: Client,
    pub node: Arc<NodeConfig>,
    pub cfg: Arc<AgentConfig>,
    pub runtime: Arc<dyn Runtime>,
    /// `false` while the node is failed: nothing is written to the API.
    pub alive: watch::Receiver<bool>,
    pub node_ip: String,
}

static NEXT_NODE_IP: AtomicU32 = AtomicU32::new(2);
static NEXT_POD_IP: AtomicU32 = AtomicU32::new(1);

fn next_node_ip() -> String {
    let n = NEXT_NODE_IP.fetch_add(1, Ordering::Relaxed);
    format!("172.18.{}.{}", (n >> 8) & 255, n & 255)
}

/// A fake pod IP in 10.0.0.0/8, unique within the process (until 16M pods).
pub(crate) fn next_pod_ip() -> String {
    let n = (NEXT_POD_IP.fetch_add(1, Ordering::Relaxed) % 0xFF_FFFE) + 1;
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

struct Shared {
    name: String,
    alive: watch::Sender<bool>,
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Controls a running node agent. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle").field("name", &self.shared.name).field("failed", &self.is_failed()).finish()
    }
}

impl NodeHandle {
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Simulates losing the node: the Lease is no longer renewed, the node status and pod
    /// statuses are no longer written, pod changes are no longer seen. Containers keep their
    /// course (a partition, not a power cut); what changed is reported after [`recover`](Self::recover).
    pub fn fail(&self) {
        self.shared.alive.send_replace(false);
    }

    /// Undoes [`fail`](Self::fail): the node heartbeats and reports again at once.
    pub fn recover(&self) {
        self.shared.alive.send_replace(true);
    }

    pub fn is_failed(&self) -> bool {
        !*self.shared.alive.borrow()
    }

    /// Follows whether the node is alive (`false` while failed).
    pub fn watch_alive(&self) -> watch::Receiver<bool> {
        self.shared.alive.subscribe()
    }

    /// Stops the agent: its tasks end and the pods' containers are stopped. The Node, its Lease
    /// and the pods stay in the API.
    pub async fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.shared.tasks.lock().expect("tasks lock"));
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// The events of a node's pods, as kube's watcher delivers them.
pub type PodEvents = BoxStream<'static, watcher::Event<Arc<Pod>>>;

/// Where a node agent learns of its pods.
pub enum PodSource {
    /// A watch of its own of the pods with `spec.nodeName=<node>`, as a kubelet has.
    Watch,
    /// Events from a pod watch the process already has (e.g. one informer serving many simulated
    /// nodes, as kwok's does): they must be those a `spec.nodeName=<node>` watch would see.
    Events(PodEvents),
}

/// Starts the agent of `node` with a pod watch of its own; see [`run_node_with`].
pub async fn run_node(client: Client, node: NodeConfig, cfg: AgentConfig, runtime: Arc<dyn Runtime>) -> NodeHandle {
    run_node_with(client, node, cfg, runtime, PodSource::Watch).await
}

/// Starts the agent of `node`: registers the Node (retried by the heartbeat task if the first
/// attempt fails), then spawns the heartbeat (Lease + Ready condition) and the pod loop (the
/// pods of `pods`, one worker task per pod).
pub async fn run_node_with(
    client: Client,
    node: NodeConfig,
    cfg: AgentConfig,
    runtime: Arc<dyn Runtime>,
    pods: PodSource,
) -> NodeHandle {
    let (alive_tx, alive_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ctx = Arc::new(NodeContext {
        client,
        node: Arc::new(node),
        cfg: Arc::new(cfg),
        runtime,
        alive: alive_rx,
        node_ip: next_node_ip(),
    });
    let uid = match node::register(&ctx).await {
        Ok(uid) => Some(uid),
        Err(e) => {
            tracing::warn!(node = %ctx.node.name, error = %e, "registering the node (will retry)");
            None
        }
    };
    let heartbeat = tokio::spawn(node::heartbeat(ctx.clone(), uid, shutdown_rx.clone()));
    let events = match pods {
        PodSource::Watch => own_watch(&ctx),
        PodSource::Events(events) => events,
    };
    let pods = tokio::spawn(watch_pods(ctx.clone(), events, shutdown_rx));
    NodeHandle {
        shared: Arc::new(Shared {
            name: ctx.node.name.clone(),
            alive: alive_tx,
            shutdown: shutdown_tx,
            tasks: Mutex::new(vec![heartbeat, pods]),
        }),
    }
}

/// A pod's worker: `None` once it has ended (the pod is not taken on again).
type Workers = HashMap<String, Option<watch::Sender<Arc<Pod>>>>;

fn dispatch(ctx: &Arc<NodeContext>, workers: &mut Workers, tasks: &mut JoinSet<()>, pod: Arc<Pod>) {
    let Some(uid) = pod.metadata.uid.clone() else { return };
    match workers.get_mut(&uid) {
        Some(Some(tx)) => {
            if tx.send(pod).is_err() {
                workers.insert(uid, None);
            }
        }
        Some(None) => {}
        None => {
            let (tx, rx) = watch::channel(pod);
            tasks.spawn(worker::run(ctx.clone(), rx));
            workers.insert(uid, Some(tx));
        }
    }
}

/// The node's own watch of its pods; errors are logged and retried with kube's back-off.
fn own_watch(ctx: &NodeContext) -> PodEvents {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.node.name));
    let node = ctx.node.name.clone();
    watcher(api, config)
        .default_backoff()
        .filter_map(move |ev| {
            let ev = ev.inspect_err(|e| tracing::debug!(node = %node, error = %e, "pod watch")).ok();
            std::future::ready(ev.map(shared))
        })
        .boxed()
}

fn shared(ev: watcher::Event<Pod>) -> watcher::Event<Arc<Pod>> {
    match ev {
        watcher::Event::Apply(p) => watcher::Event::Apply(Arc::new(p)),
        watcher::Event::Delete(p) => watcher::Event::Delete(Arc::new(p)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(p) => watcher::Event::InitApply(Arc::new(p)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Follows the node's pods and hands each to its worker. While the node is failed, the stream
/// is not read (an own watch may then be dropped by the server; the watcher relists on recovery).
async fn watch_pods(ctx: Arc<NodeContext>, mut stream: PodEvents, mut shutdown: watch::Receiver<bool>) {
    let mut alive = ctx.alive.clone();
    let mut workers = Workers::new();
    let mut tasks = JoinSet::new();
    let mut listed: Option<HashSet<String>> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let reading = *alive.borrow_and_update();
        tokio::select! {
            _ = shutdown.changed() => break,
            r = alive.changed() => if r.is_err() { break },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            ev = stream.next(), if reading => match ev {
                None => break,
                Some(watcher::Event::Apply(pod)) => dispatch(&ctx, &mut workers, &mut tasks, pod),
                Some(watcher::Event::Delete(pod)) => {
                    // Gone from the API: dropping the sender stops the worker.
                    if let Some(uid) = &pod.metadata.uid {
                        workers.remove(uid);
                    }
                }
                Some(watcher::Event::Init) => listed = Some(HashSet::new()),
                Some(watcher::Event::InitApply(pod)) => {
                    if let (Some(l), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                        l.insert(uid);
                    }
                    dispatch(&ctx, &mut workers, &mut tasks, pod);
                }
                Some(watcher::Event::InitDone) => {
                    if let Some(l) = listed.take() {
                        workers.retain(|uid, _| l.contains(uid));
                        // Containers a previous agent left for pods deleted since are killed.
                        ctx.runtime.sweep(&ctx.node.name, &l);
                    }
                }
            },
        }
    }
    drop(workers);
    while tasks.join_next().await.is_some() {}
}

/// Follows [`NODE_FAILED_ANNOTATION`] on the Nodes of `handles` (one watch for all of them):
/// set → [`NodeHandle::fail`], removed → [`NodeHandle::recover`]. This is how `jobset node
/// fail|recover` reaches agents running inside `jobset up`.
pub fn follow_failure_annotations(client: Client, handles: Vec<NodeHandle>) -> JoinHandle<()> {
    let by_name: HashMap<String, NodeHandle> = handles.into_iter().map(|h| (h.name().to_string(), h)).collect();
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut stream = watcher(api, watcher::Config::default()).default_backoff().applied_objects().boxed();
        // Only changes of the annotation act, so fail()/recover() called directly are left alone.
        let mut annotated: HashMap<String, bool> = HashMap::new();
        while let Some(ev) = stream.next().await {
            let Ok(node) = ev else { continue };
            let Some(name) = node.metadata.name.clone() else { continue };
            let Some(h) = by_name.get(&name) else { continue };
            let failed = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(NODE_FAILED_ANNOTATION))
                .is_some_and(|v| v != "false");
            if annotated.insert(name, failed).unwrap_or(false) != failed {
                if failed { h.fail() } else { h.recover() }
            }
        }
    })
}
