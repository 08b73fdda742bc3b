//! One watch of the pods, shared by the controllers of a process, as kube-controller-manager's
//! shared informer is: each pod event is parsed and cached once, however many controllers follow
//! it. In a group restart of 5,000 pods each pod event used to be parsed by the Job controller,
//! the JobSet controller, the scheduler and the node lifecycle controller in turn; one extra
//! watcher of all pods cost about 0.09 s of that restart on two cores.
//!
//! A subscriber gets kube's watcher events (`Init`, `InitApply`, `InitDone`, `Apply`, `Delete`)
//! for the pods its filter selects, starting with the cache's current content, so a controller
//! that is restarted begins with a full list, as one with a watch of its own would. A pod that
//! stops matching a filter is a `Delete` for that subscriber, as for a label-selector watch.
//!
//! Node agents of simulated nodes subscribe by node name ([`SharedPods::subscribe_node`]), as
//! kwok's one pod informer serves every node it fakes: an event is routed to the subscribers of
//! its pod's `spec.nodeName` alone, so hundreds of nodes cost one parse per event, not one watch
//! each. A subscriber sees what a `spec.nodeName=<node>` field-selector watch would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::task::AbortOnDropHandle;

/// Which pods a subscriber follows.
pub type PodFilter = fn(&Pod) -> bool;

/// A shared pod informer. Clones share the watch; it stops when the last clone is dropped.
#[derive(Clone)]
pub struct SharedPods {
    cache: Arc<Mutex<Cache>>,
    synced: watch::Receiver<bool>,
    _watch: Arc<AbortOnDropHandle<()>>,
}

type Key = (String, String);

#[derive(Default)]
struct Cache {
    pods: HashMap<Key, Arc<Pod>>,
    /// The list in progress (between `Init` and `InitDone`).
    relist: Option<HashMap<Key, Arc<Pod>>>,
    synced: bool,
    subscribers: Vec<Subscriber>,
    /// Subscribers by the `spec.nodeName` they follow.
    nodes: HashMap<String, Vec<Sender>>,
}

type Sender = mpsc::UnboundedSender<watcher::Event<Arc<Pod>>>;

struct Subscriber {
    filter: PodFilter,
    tx: Sender,
}

/// One event of the watch, with the pod's previous version where it had one.
enum Change {
    Init,
    InitApply(Arc<Pod>),
    InitDone,
    Apply(Arc<Pod>, Option<Arc<Pod>>),
    Delete(Arc<Pod>, Option<Arc<Pod>>),
}

impl Change {
    /// The event a subscriber with `filter` gets, if any.
    fn seen_by(&self, filter: impl Fn(&Pod) -> bool) -> Option<watcher::Event<Arc<Pod>>> {
        let was = |prev: &Option<Arc<Pod>>| prev.as_deref().is_some_and(&filter);
        match self {
            Change::Init => Some(watcher::Event::Init),
            Change::InitDone => Some(watcher::Event::InitDone),
            Change::InitApply(p) => filter(p).then(|| watcher::Event::InitApply(p.clone())),
            Change::Apply(p, _) if filter(p) => Some(watcher::Event::Apply(p.clone())),
            Change::Apply(p, prev) => was(prev).then(|| watcher::Event::Delete(p.clone())),
            Change::Delete(p, prev) => (filter(p) || was(prev)).then(|| watcher::Event::Delete(p.clone())),
        }
    }

    /// The nodes whose subscribers may see this change: the pod's, and its previous one's.
    fn nodes(&self) -> [Option<&str>; 2] {
        match self {
            Change::Init | Change::InitDone => [None, None],
            Change::InitApply(p) => [node_of(p), None],
            Change::Apply(p, prev) | Change::Delete(p, prev) => {
                let before = prev.as_deref().and_then(node_of).filter(|n| Some(*n) != node_of(p));
                [node_of(p), before]
            }
        }
    }
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

fn key(p: &Pod) -> Key {
    (p.namespace().unwrap_or_default(), p.name_any())
}

fn lock(m: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cache {
    /// Updates the cache with one event of the watch and passes it on to each subscriber, as that
    /// subscriber's filter shows it.
    fn apply(&mut self, ev: watcher::Event<Pod>) {
        let change = match ev {
            watcher::Event::Apply(p) => {
                let p = Arc::new(p);
                let prev = self.pods.insert(key(&p), p.clone());
                Change::Apply(p, prev)
            }
            watcher::Event::Delete(p) => {
                let p = Arc::new(p);
                let prev = self.pods.remove(&key(&p));
                Change::Delete(p, prev)
            }
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                Change::Init
            }
            watcher::Event::InitApply(p) => {
                let p = Arc::new(p);
                self.relist.get_or_insert_default().insert(key(&p), p.clone());
                Change::InitApply(p)
            }
            watcher::Event::InitDone => {
                self.pods = self.relist.take().unwrap_or_default();
                self.synced = true;
                Change::InitDone
            }
        };
        // A subscriber whose receiver is gone (its controller stopped) is dropped here.
        self.subscribers.retain(|s| change.seen_by(s.filter).is_none_or(|ev| s.tx.send(ev).is_ok()));
        let send =
            |subs: &mut Vec<Sender>, ev: &watcher::Event<Arc<Pod>>| subs.retain(|tx| tx.send(ev.clone()).is_ok());
        if matches!(change, Change::Init | Change::InitDone) {
            let ev = change.seen_by(|_| true).expect("every subscriber sees the list's bounds");
            self.nodes.values_mut().for_each(|subs| send(subs, &ev));
        }
        for node in change.nodes().into_iter().flatten() {
            if let Some(subs) = self.nodes.get_mut(node)
                && let Some(ev) = change.seen_by(|p| node_of(p) == Some(node))
            {
                send(subs, &ev);
            }
        }
        self.nodes.retain(|_, subs| !subs.is_empty());
    }

    /// Registers a subscriber, first sending it what the cache holds: the list in progress so
    /// far (the rest of it follows), else the complete list.
    fn subscribe(&mut self, filter: PodFilter) -> mpsc::UnboundedReceiver<watcher::Event<Arc<Pod>>> {
        let (tx, rx) = self.replay(filter);
        self.subscribers.push(Subscriber { filter, tx });
        rx
    }

    /// Registers a subscriber of the pods bound to `node`.
    fn subscribe_node(&mut self, node: &str) -> mpsc::UnboundedReceiver<watcher::Event<Arc<Pod>>> {
        let (tx, rx) = self.replay(|p| node_of(p) == Some(node));
        self.nodes.entry(node.to_string()).or_default().push(tx);
        rx
    }

    /// A new subscriber's channel, holding what the cache has of the pods `filter` selects.
    fn replay(&self, filter: impl Fn(&Pod) -> bool) -> (Sender, mpsc::UnboundedReceiver<watcher::Event<Arc<Pod>>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (listed, done) = match &self.relist {
            Some(partial) => (Some(partial), false),
            None if self.synced => (Some(&self.pods), true),
            // Nothing listed yet: the watch's own `Init` comes next.
            None => (None, false),
        };
        if let Some(pods) = listed {
            let _ = tx.send(watcher::Event::Init);
            for p in pods.values().filter(|p| filter(p)) {
                let _ = tx.send(watcher::Event::InitApply(p.clone()));
            }
            if done {
                let _ = tx.send(watcher::Event::InitDone);
            }
        }
        (tx, rx)
    }
}

impl SharedPods {
    /// Starts the watch (`config` may narrow it, e.g. to a label) on the current runtime; errors
    /// are retried with kube's default back-off.
    pub fn start(client: Client, config: watcher::Config) -> SharedPods {
        let cache = Arc::new(Mutex::new(Cache::default()));
        let (synced_tx, synced) = watch::channel(false);
        let events = watcher(Api::<Pod>::all(client), config).default_backoff();
        let task = tokio::spawn(follow(events, cache.clone(), synced_tx));
        SharedPods { cache, synced, _watch: Arc::new(AbortOnDropHandle::new(task)) }
    }

    /// The events of the pods `filter` selects, from the current content of the cache on.
    pub fn subscribe(&self, filter: PodFilter) -> impl Stream<Item = watcher::Event<Arc<Pod>>> + Send + 'static {
        UnboundedReceiverStream::new(lock(&self.cache).subscribe(filter))
    }

    /// The events of the pods bound to `node`, from the current content of the cache on: what a
    /// `spec.nodeName=<node>` watch would see (a node agent's pods).
    pub fn subscribe_node(&self, node: &str) -> impl Stream<Item = watcher::Event<Arc<Pod>>> + Send + 'static {
        UnboundedReceiverStream::new(lock(&self.cache).subscribe_node(node))
    }

    /// Every cached pod.
    pub fn state(&self) -> Vec<Arc<Pod>> {
        lock(&self.cache).pods.values().cloned().collect()
    }

    /// Waits for the first complete list; `false` if the watch stopped before.
    pub async fn wait_until_ready(&self) -> bool {
        self.synced.clone().wait_for(|s| *s).await.is_ok()
    }
}

async fn follow(
    events: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    cache: Arc<Mutex<Cache>>,
    synced: watch::Sender<bool>,
) {
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => {
                let done = matches!(ev, watcher::Event::InitDone);
                lock(&cache).apply(ev);
                if done {
                    synced.send_replace(true);
                }
            }
            Err(e) => tracing::debug!(error = %e, "shared pod watch"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};

    fn pod(name: &str, team: Option<&str>) -> Pod {
        let labels = team.map(|t| json!({"team": t})).unwrap_or(json!({}));
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels}}))
            .unwrap()
    }

    fn on_node(name: &str, node: Option<&str>) -> Pod {
        let mut p = pod(name, None);
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec { node_name: node.map(Into::into), ..Default::default() });
        p
    }

    fn team_a(p: &Pod) -> bool {
        p.labels().get("team").is_some_and(|t| t == "a")
    }

    fn every(_: &Pod) -> bool {
        true
    }

    /// What a subscriber has received so far, as (event, pod name).
    fn drain(rx: &mut mpsc::UnboundedReceiver<watcher::Event<Arc<Pod>>>) -> Vec<(&'static str, String)> {
        let mut out = vec![];
        while let Ok(ev) = rx.try_recv() {
            out.push(match ev {
                Init => ("init", String::new()),
                InitApply(p) => ("init-apply", p.name_any()),
                InitDone => ("init-done", String::new()),
                Apply(p) => ("apply", p.name_any()),
                Delete(p) => ("delete", p.name_any()),
            });
        }
        out
    }

    fn listed(cache: &mut Cache, pods: Vec<Pod>) {
        cache.apply(Init);
        for p in pods {
            cache.apply(InitApply(p));
        }
        cache.apply(InitDone);
    }

    #[test]
    fn a_subscriber_sees_only_its_pods_and_a_pod_that_stops_matching_is_deleted_for_it() {
        let mut cache = Cache::default();
        let mut a = cache.subscribe(team_a);
        let mut all = cache.subscribe(every);
        listed(&mut cache, vec![pod("p1", Some("a")), pod("p2", Some("b"))]);
        assert_eq!(drain(&mut a), [("init", "".into()), ("init-apply", "p1".into()), ("init-done", "".into())]);
        assert_eq!(drain(&mut all).len(), 4);
        cache.apply(Apply(pod("p2", Some("b"))));
        cache.apply(Apply(pod("p1", None)));
        cache.apply(Apply(pod("p3", Some("a"))));
        cache.apply(Delete(pod("p3", Some("a"))));
        assert_eq!(drain(&mut a), [("delete", "p1".into()), ("apply", "p3".into()), ("delete", "p3".into())]);
        assert_eq!(drain(&mut all).iter().map(|(e, _)| *e).collect::<Vec<_>>(), ["apply", "apply", "apply", "delete"]);
    }

    #[test]
    fn a_node_subscriber_sees_the_pods_bound_to_its_node_as_a_node_name_watch_would() {
        let mut cache = Cache::default();
        let mut n1 = cache.subscribe_node("n1");
        let mut n2 = cache.subscribe_node("n2");
        listed(&mut cache, vec![on_node("p1", Some("n1")), on_node("p2", Some("n2")), on_node("p3", None)]);
        assert_eq!(drain(&mut n1), [("init", "".into()), ("init-apply", "p1".into()), ("init-done", "".into())]);
        assert_eq!(drain(&mut n2), [("init", "".into()), ("init-apply", "p2".into()), ("init-done", "".into())]);
        // Bound: added for its node. Updated: only its node hears of it. Deleted: likewise.
        cache.apply(Apply(on_node("p3", Some("n1"))));
        cache.apply(Apply(on_node("p1", Some("n1"))));
        cache.apply(Delete(on_node("p2", Some("n2"))));
        assert_eq!(drain(&mut n1), [("apply", "p3".into()), ("apply", "p1".into())]);
        assert_eq!(drain(&mut n2), [("delete", "p2".into())]);
        // A pod whose node changed leaves the old node's view.
        cache.apply(Apply(on_node("p3", Some("n2"))));
        assert_eq!(drain(&mut n1), [("delete", "p3".into())]);
        assert_eq!(drain(&mut n2), [("apply", "p3".into())]);
        // A late subscriber starts from the cache; a dropped one is forgotten.
        let mut late = cache.subscribe_node("n2");
        assert_eq!(drain(&mut late), [("init", "".into()), ("init-apply", "p3".into()), ("init-done", "".into())]);
        drop(n1);
        cache.apply(Apply(on_node("p1", Some("n1"))));
        assert!(!cache.nodes.contains_key("n1"));
        assert_eq!(cache.nodes["n2"].len(), 2);
    }

    #[test]
    fn a_late_subscriber_starts_from_the_cache_and_a_relist_replaces_it() {
        let mut cache = Cache::default();
        listed(&mut cache, vec![pod("p1", Some("a")), pod("p2", Some("a"))]);
        cache.apply(Delete(pod("p2", Some("a"))));
        let mut late = cache.subscribe(team_a);
        assert_eq!(drain(&mut late), [("init", "".into()), ("init-apply", "p1".into()), ("init-done", "".into())]);
        // Joining in the middle of a relist: what it has so far, then the rest as it comes.
        cache.apply(Init);
        cache.apply(InitApply(pod("p4", Some("a"))));
        let mut mid = cache.subscribe(team_a);
        cache.apply(InitApply(pod("p5", Some("a"))));
        cache.apply(InitDone);
        let expected: Vec<(&str, String)> = vec![
            ("init", "".into()),
            ("init-apply", "p4".into()),
            ("init-apply", "p5".into()),
            ("init-done", "".into()),
        ];
        assert_eq!(drain(&mut mid), expected);
        assert_eq!(drain(&mut late), expected);
        let mut names: Vec<String> = cache.pods.values().map(|p| p.name_any()).collect();
        names.sort();
        assert_eq!(names, ["p4", "p5"]);
    }

    #[test]
    fn a_subscriber_before_the_first_list_waits_for_it_and_a_dropped_one_is_forgotten() {
        let mut cache = Cache::default();
        let mut early = cache.subscribe(every);
        assert!(drain(&mut early).is_empty());
        drop(cache.subscribe(every));
        listed(&mut cache, vec![pod("p1", None)]);
        assert_eq!(drain(&mut early).len(), 3);
        assert_eq!(cache.subscribers.len(), 1);
    }
}
