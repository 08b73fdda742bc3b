//! Pods grouped by their owner (a Job's uid, a JobSet's uid), kept from a pod watch's events, so
//! a reconcile reads its owner's pods without scanning every pod of the cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

/// The owner key a pod is filed under (`None`: not indexed).
pub type OwnerKey = fn(&Pod) -> Option<&str>;

/// Whether an update of a pod (its version before, and now) can change its owner's reconcile.
pub type Matters = fn(&Pod, &Pod) -> bool;

/// Counts over an owner's pods, kept up to date as they are filed and unfiled (e.g. a JobSet's
/// in-place restart tally), so that a reconcile reads them instead of every pod. Each pod's
/// digest is taken once per event and kept, so exactly what was added is removed.
pub trait Summary: Default + Clone + Send + 'static {
    type Digest: Send + 'static;
    fn digest(p: &Pod) -> Self::Digest;
    fn add(&mut self, d: &Self::Digest);
    fn remove(&mut self, d: &Self::Digest);
}

/// No summary.
impl Summary for () {
    type Digest = ();
    fn digest(_: &Pod) {}
    fn add(&mut self, _: &()) {}
    fn remove(&mut self, _: &()) {}
}

#[derive(Clone)]
pub struct PodIndex<S: Summary = ()> {
    key: OwnerKey,
    matters: Matters,
    pods: Arc<Mutex<Grouped<S>>>,
    /// The relist in progress (between `Init` and `InitDone`).
    relist: Arc<Mutex<Grouped<S>>>,
    /// The first list is complete.
    synced: Arc<AtomicBool>,
}

/// One owner's pods (pod uid → pod and its digest) and their summary.
struct Group<S: Summary> {
    pods: HashMap<String, (Arc<Pod>, S::Digest)>,
    summary: S,
}

struct Grouped<S: Summary> {
    by_owner: HashMap<String, Group<S>>,
    /// Pod uid → the owner key it is filed under, so a pod whose key changed moves.
    filed: HashMap<String, String>,
}

impl<S: Summary> Default for Grouped<S> {
    fn default() -> Self {
        Grouped { by_owner: HashMap::new(), filed: HashMap::new() }
    }
}

impl<S: Summary> Grouped<S> {
    fn remove(&mut self, pod_uid: &str) -> Option<Arc<Pod>> {
        let owner = self.filed.remove(pod_uid)?;
        let group = self.by_owner.get_mut(&owner)?;
        let (removed, digest) = group.pods.remove(pod_uid)?;
        group.summary.remove(&digest);
        if group.pods.is_empty() {
            self.by_owner.remove(&owner);
        }
        Some(removed)
    }

    /// Files `pod`, returning the version it replaces.
    fn insert(&mut self, key: OwnerKey, pod: &Arc<Pod>) -> Option<Arc<Pod>> {
        let uid = pod.metadata.uid.as_deref()?;
        let previous = self.remove(uid);
        if let Some(owner) = key(pod) {
            let digest = S::digest(pod);
            let group = self
                .by_owner
                .entry(owner.to_string())
                .or_insert_with(|| Group { pods: HashMap::new(), summary: S::default() });
            group.summary.add(&digest);
            group.pods.insert(uid.to_string(), (pod.clone(), digest));
            self.filed.insert(uid.to_string(), owner.to_string());
        }
        previous
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: Summary> PodIndex<S> {
    pub fn new(key: OwnerKey) -> PodIndex<S> {
        PodIndex::passing_updates_that(key, |_, _| true)
    }

    /// An index that passes on an update of a pod it holds only where `matters(before, now)`;
    /// it files every update all the same.
    pub fn passing_updates_that(key: OwnerKey, matters: Matters) -> PodIndex<S> {
        PodIndex { key, matters, pods: Arc::default(), relist: Arc::default(), synced: Arc::default() }
    }

    /// Follows one event of the pod watch, returning the pod it touched (an update only where it
    /// matters): the index, the controller's triggers and the shared informer hold one copy
    /// (thousands of pod events a second in a group restart made copying them a noticeable share
    /// of the CPU).
    pub fn apply(&self, ev: watcher::Event<Arc<Pod>>) -> Option<Arc<Pod>> {
        match ev {
            watcher::Event::Apply(p) => {
                let before = lock(&self.pods).insert(self.key, &p);
                before.is_none_or(|b| (self.matters)(&b, &p)).then_some(p)
            }
            watcher::Event::Delete(p) => {
                if let Some(uid) = p.metadata.uid.as_deref() {
                    lock(&self.pods).remove(uid);
                }
                Some(p)
            }
            watcher::Event::Init => {
                *lock(&self.relist) = Grouped::default();
                None
            }
            watcher::Event::InitApply(p) => {
                lock(&self.relist).insert(self.key, &p);
                Some(p)
            }
            watcher::Event::InitDone => {
                let fresh = std::mem::take(&mut *lock(&self.relist));
                *lock(&self.pods) = fresh;
                self.synced.store(true, Ordering::Release);
                None
            }
        }
    }

    /// The stream of pods a pod subscription touched, kept in this index on the way.
    pub fn follow(
        &self,
        events: impl Stream<Item = watcher::Event<Arc<Pod>>> + Send + 'static,
    ) -> impl Stream<Item = Arc<Pod>> + Send + 'static {
        let index = self.clone();
        events.filter_map(move |ev| std::future::ready(index.apply(ev)))
    }

    /// Whether the first list is complete: before it, an owner's pods may be missing from
    /// [`PodIndex::of`] (upstream's controllers wait for their informers' `HasSynced`).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The pods filed under `owner`.
    pub fn of(&self, owner: &str) -> Vec<Arc<Pod>> {
        lock(&self.pods)
            .by_owner
            .get(owner)
            .map(|g| g.pods.values().map(|(p, _)| p.clone()).collect())
            .unwrap_or_default()
    }

    /// The summary of the pods filed under `owner`.
    pub fn summary(&self, owner: &str) -> S {
        lock(&self.pods).by_owner.get(owner).map(|g| g.summary.clone()).unwrap_or_default()
    }

    /// The pod with this uid, wherever it is filed.
    pub fn get(&self, pod_uid: &str) -> Option<Arc<Pod>> {
        let pods = lock(&self.pods);
        let owner = pods.filed.get(pod_uid)?;
        pods.by_owner.get(owner)?.pods.get(pod_uid).map(|(p, _)| p.clone())
    }

    /// The pods filed under the owners that `wanted` picks by key and summary, once the first
    /// list is complete (`None` before). Owners are checked, not pods: a sweep for orphans runs
    /// every second over thousands of pods of live owners.
    pub fn of_owners_where(&self, wanted: impl Fn(&str, &S) -> bool) -> Option<Vec<Arc<Pod>>> {
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        let pods = lock(&self.pods);
        let picked = pods.by_owner.iter().filter(|(owner, g)| wanted(owner, &g.summary));
        Some(picked.flat_map(|(_, g)| g.pods.values().map(|(p, _)| p.clone())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn by_label(p: &Pod) -> Option<&str> {
        p.metadata.labels.as_ref()?.get("owner").map(String::as_str)
    }

    fn filed(owner: &str, pod_uid: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": pod_uid, "uid": pod_uid, "labels": {"owner": owner}}}))
                .unwrap(),
        )
    }

    fn uids(index: &PodIndex, owner: &str) -> Vec<String> {
        let mut out: Vec<String> = index.of(owner).iter().filter_map(|p| p.metadata.uid.clone()).collect();
        out.sort();
        out
    }

    #[test]
    fn pods_are_filed_by_owner_through_key_changes_deletions_and_relists() {
        let index: PodIndex = PodIndex::new(by_label);
        let touched = index.apply(watcher::Event::Apply(filed("a", "p1")));
        assert_eq!(touched.and_then(|p| p.metadata.uid.clone()).as_deref(), Some("p1"));
        index.apply(watcher::Event::Apply(filed("a", "p2")));
        index.apply(watcher::Event::Apply(filed("b", "p2")));
        assert_eq!((uids(&index, "a"), uids(&index, "b")), (vec!["p1".into()], vec!["p2".into()]));
        assert!(index.apply(watcher::Event::Delete(filed("a", "p1"))).is_some());
        assert!(uids(&index, "a").is_empty());
        // A relist replaces everything once it is done, not before.
        assert!(index.apply(watcher::Event::Init).is_none());
        index.apply(watcher::Event::InitApply(filed("a", "p3")));
        assert_eq!(uids(&index, "b"), ["p2"]);
        assert!(index.apply(watcher::Event::InitDone).is_none());
        assert_eq!((uids(&index, "a"), uids(&index, "b")), (vec!["p3".into()], vec![]));
    }

    /// The names of an owner's pods, as a summary.
    #[derive(Clone, Default, Debug, PartialEq)]
    struct Names(Vec<String>);

    impl Summary for Names {
        type Digest = String;
        fn digest(p: &Pod) -> String {
            p.metadata.name.clone().unwrap_or_default()
        }
        fn add(&mut self, d: &String) {
            self.0.push(d.clone());
            self.0.sort();
        }
        fn remove(&mut self, d: &String) {
            self.0.retain(|n| n != d);
        }
    }

    #[test]
    fn an_owners_summary_follows_its_pods_through_updates_key_changes_deletions_and_relists() {
        let index: PodIndex<Names> = PodIndex::new(by_label);
        let names = |owner: &str| index.summary(owner).0;
        index.apply(watcher::Event::Apply(filed("a", "p1")));
        index.apply(watcher::Event::Apply(filed("a", "p2")));
        index.apply(watcher::Event::Apply(filed("a", "p2")));
        assert_eq!(names("a"), ["p1", "p2"], "an update replaces the pod's digest");
        index.apply(watcher::Event::Apply(filed("b", "p2")));
        assert_eq!((names("a"), names("b")), (vec!["p1".to_string()], vec!["p2".to_string()]));
        index.apply(watcher::Event::Delete(filed("b", "p2")));
        assert!(names("b").is_empty());
        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(filed("b", "p3")));
        index.apply(watcher::Event::InitDone);
        assert_eq!((names("a"), names("b")), (vec![], vec!["p3".to_string()]));
    }

    #[test]
    fn an_update_that_does_not_matter_is_filed_but_not_passed_on() {
        let labels_changed = |a: &Pod, b: &Pod| a.metadata.labels != b.metadata.labels;
        let index: PodIndex = PodIndex::passing_updates_that(by_label, labels_changed);
        let mut p1 = filed("a", "p1");
        assert!(index.apply(watcher::Event::Apply(p1.clone())).is_some(), "a new pod always matters");
        Arc::make_mut(&mut p1).metadata.annotations = Some([("k".into(), "v".into())].into());
        assert!(index.apply(watcher::Event::Apply(p1.clone())).is_none());
        assert!(index.of("a")[0].metadata.annotations.is_some(), "the update is filed");
        assert!(index.apply(watcher::Event::Apply(filed("b", "p1"))).is_some());
        assert!(index.apply(watcher::Event::Delete(filed("b", "p1"))).is_some(), "a deletion always matters");
    }

    #[test]
    fn pods_of_picked_owners_are_listed_only_once_the_first_list_is_complete() {
        let index: PodIndex<Names> = PodIndex::new(by_label);
        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(filed("a", "p1")));
        assert!(index.of_owners_where(|_, _| true).is_none());
        assert!(!index.is_synced(), "a Job controller waits: its pods may be missing");
        index.apply(watcher::Event::InitDone);
        assert!(index.is_synced());
        index.apply(watcher::Event::Apply(filed("b", "p2")));
        index.apply(watcher::Event::Apply(filed("c", "p3")));
        let picked = |live: &[&str]| {
            let mut uids: Vec<String> = (index.of_owners_where(|o, _| !live.contains(&o)).unwrap().iter())
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            uids.sort();
            uids
        };
        assert_eq!(picked(&[]), ["p1", "p2", "p3"]);
        assert_eq!(picked(&["a", "c"]), ["p2"]);
        assert!(picked(&["a", "b", "c"]).is_empty());
        // By summary: the owners whose pods include p3.
        let by_summary = index.of_owners_where(|_, s| s.0.iter().any(|n| n == "p3")).unwrap();
        assert_eq!(by_summary.iter().filter_map(|p| p.metadata.uid.clone()).collect::<Vec<_>>(), ["p3"]);
    }

    #[test]
    fn a_pod_is_found_by_uid_wherever_it_is_filed() {
        let index: PodIndex = PodIndex::new(by_label);
        index.apply(watcher::Event::Apply(filed("a", "p1")));
        assert_eq!(index.get("p1").and_then(|p| p.metadata.uid.clone()).as_deref(), Some("p1"));
        index.apply(watcher::Event::Apply(filed("b", "p1")));
        assert_eq!(index.get("p1").unwrap().metadata.labels.as_ref().unwrap()["owner"], "b");
        index.apply(watcher::Event::Delete(filed("b", "p1")));
        assert!(index.get("p1").is_none());
    }
}
