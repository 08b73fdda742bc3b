//! Following every object of one kind through a watch, shared by the integration tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// What a watch has seen: the objects that exist now, and every version delivered with when it
/// arrived (deleted objects included), so short-lived states and their order are not missed.
pub struct Seen<K> {
    pub current: BTreeMap<String, K>,
    pub history: Vec<(Instant, K)>,
}

impl<K: ResourceExt> Seen<K> {
    pub fn versions<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a K> + 'a {
        self.history.iter().map(|(_, o)| o).filter(move |o| o.name_any() == name)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Follows every object of one kind from before the test acts until it ends.
pub struct Tracker<K> {
    seen: Arc<Mutex<Seen<K>>>,
    changed: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
    kind: &'static str,
    /// How long [`Tracker::until`] waits.
    wait: Duration,
}

impl<K> Tracker<K>
where
    K: Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// Starts the watch and waits (up to `wait`) for its initial list.
    pub async fn new(api: Api<K>, kind: &'static str, wait: Duration) -> Tracker<K> {
        let seen = Arc::new(Mutex::new(Seen { current: BTreeMap::new(), history: Vec::new() }));
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
                let mut init: BTreeMap<String, K> = BTreeMap::new();
                while let Some(ev) = stream.next().await {
                    let Ok(ev) = ev else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let now = Instant::now();
                    let mut s = lock(&seen);
                    match ev {
                        watcher::Event::Init => init.clear(),
                        watcher::Event::InitApply(o) => {
                            s.history.push((now, o.clone()));
                            init.insert(o.name_any(), o);
                        }
                        watcher::Event::InitDone => s.current = std::mem::take(&mut init),
                        watcher::Event::Apply(o) => {
                            s.history.push((now, o.clone()));
                            s.current.insert(o.name_any(), o);
                        }
                        watcher::Event::Delete(o) => {
                            s.history.push((now, o.clone()));
                            s.current.remove(&o.name_any());
                        }
                    }
                    drop(s);
                    tx.send_modify(|n| *n += 1);
                }
            })
        };
        let t = Tracker { seen, changed, task, kind, wait };
        t.until("the initial list", |_| Some(())).await;
        t
    }

    /// Waits until `f` returns something, re-evaluated on every watch event.
    pub async fn until<T>(&self, what: &str, mut f: impl FnMut(&Seen<K>) -> Option<T>) -> T {
        let mut changed = self.changed.clone();
        let waited = tokio::time::timeout(self.wait, async {
            loop {
                changed.borrow_and_update();
                if *changed.borrow() > 0
                    && let Some(v) = f(&lock(&self.seen))
                {
                    return v;
                }
                changed.changed().await.expect("the watch task ended");
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            let s = lock(&self.seen);
            panic!("{}: timed out after {:?} waiting for {what}; now:\n{:#?}", self.kind, self.wait, s.current)
        })
    }

    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen<K>> {
        lock(&self.seen)
    }

    /// The object named `name` as it is now.
    pub fn get(&self, name: &str) -> Option<K> {
        lock(&self.seen).current.get(name).cloned()
    }
}

impl<K> Drop for Tracker<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
