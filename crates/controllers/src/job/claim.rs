//! Which pods a Job controls, as upstream decides it: adoption and release by selector
//! (`getPodsForJob` → `PodControllerRefManager.ClaimPods` / `ClaimObject`, with the
//! `AdoptPod` / `ReleasePod` patches), the tracking finalizers of orphans (`syncOrphanPod`), and
//! the active pods of an Indexed Job that go whatever the count
//! (`appendDuplicatedIndexPodsForRemoval`). Pure; `job::reconcile` and the orphan sweep do the I/O.

use std::cmp::Ordering;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{Selector, SelectorExt};
use serde_json::{Value, json};

use super::indexes::COMPLETION_INDEX;
use super::sync::{CONTROLLER_NAME, TRACKING_FINALIZER};

/// What `ClaimObject` does with one pod for one Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// An orphan the selector matches: take control of it (controller reference and tracking
    /// finalizer).
    Adopt,
    /// Controlled by the Job but no longer matched: let it go (reference and finalizer removed).
    Release,
    /// Controlled by the Job and matched.
    Keep,
    /// Not the Job's, nor to become it.
    Ignore,
}

/// The pod's controller reference (upstream's `metav1.GetControllerOf`).
pub fn controller_of(p: &Pod) -> Option<&OwnerReference> {
    p.metadata.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))
}

/// The uid of the Job that controls the pod.
pub fn job_controller_uid(p: &Pod) -> Option<&str> {
    controller_of(p).filter(|o| o.kind == "Job").map(|o| o.uid.as_str())
}

/// Where the Job controller's pod index files a pod: pods controlled by a Job under its uid, pods
/// controlled by nothing (adoption candidates, orphans that may keep a tracking finalizer) under
/// their namespace; pods controlled by anything else are not followed. A namespace named like a
/// Job's uid would share its group: readers keep only the pods they asked for
/// ([`controlled_by`], [`orphans_in`]).
pub fn index_key(p: &Pod) -> Option<&str> {
    match controller_of(p) {
        Some(o) => (o.kind == "Job").then_some(o.uid.as_str()),
        None => Some(p.metadata.namespace.as_deref().unwrap_or_default()),
    }
}

/// The pods the Job with uid `job_uid` controls, out of its index group.
pub fn controlled_by<P: AsRef<Pod>>(mut pods: Vec<P>, job_uid: &str) -> Vec<P> {
    pods.retain(|p| job_controller_uid(p.as_ref()) == Some(job_uid));
    pods
}

/// The pods without a controller in `namespace`, out of its index group.
pub fn orphans_in<P: AsRef<Pod>>(mut pods: Vec<P>, namespace: &str) -> Vec<P> {
    pods.retain(|p| controller_of(p.as_ref()).is_none() && p.as_ref().metadata.namespace.as_deref() == Some(namespace));
    pods
}

pub fn has_tracking_finalizer(p: &Pod) -> bool {
    p.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER))
}

/// The Job's selector (`metav1.LabelSelectorAsSelector`; `None` when missing or unparsable,
/// which API validation rules out: upstream's sync then fails, here no pod is claimed or released).
pub fn job_selector(job: &Job) -> Option<Selector> {
    Selector::try_from(job.spec.as_ref()?.selector.clone()?).ok()
}

fn selected(selector: &Selector, p: &Pod) -> bool {
    static NO_LABELS: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    selector.matches(p.metadata.labels.as_ref().unwrap_or(&NO_LABELS))
}

/// Whether the Job's sync claims pods at all: upstream's `syncJob` returns before
/// `getPodsForJob` for Jobs that are finished or managed by another controller.
pub fn claims_pods(job: &Job) -> bool {
    let managed_by = job.spec.as_ref().and_then(|s| s.managed_by.as_deref());
    let finished = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True"));
    managed_by.is_none_or(|m| m == CONTROLLER_NAME) && !finished
}

/// Upstream's `ClaimObject` for one pod (`selector` is the Job's).
pub fn claim(job: &Job, selector: &Selector, p: &Pod) -> Claim {
    if !claims_pods(job) {
        return Claim::Ignore;
    }
    let job_deleting = job.metadata.deletion_timestamp.is_some();
    if let Some(owner) = controller_of(p) {
        if Some(owner.uid.as_str()) != job.metadata.uid.as_deref() {
            return Claim::Ignore;
        }
        if selected(selector, p) {
            // Claiming what it already owns takes no action, so a deleting Job may.
            return Claim::Keep;
        }
        return if job_deleting { Claim::Ignore } else { Claim::Release };
    }
    if job_deleting
        || !selected(selector, p)
        || p.metadata.deletion_timestamp.is_some()
        || p.metadata.namespace != job.metadata.namespace
    {
        return Claim::Ignore;
    }
    Claim::Adopt
}

/// Upstream's `canAdoptFunc` (`RecheckDeletionTimestamp` over a fresh read of the Job): an
/// adoption is refused when the Job read from the server is another one or is being deleted.
pub fn can_adopt(job: &Job, fresh: &Job) -> Result<(), String> {
    let (ns, name) =
        (job.metadata.namespace.as_deref().unwrap_or_default(), job.metadata.name.as_deref().unwrap_or_default());
    let (got, wanted) =
        (fresh.metadata.uid.as_deref().unwrap_or_default(), job.metadata.uid.as_deref().unwrap_or_default());
    if got != wanted {
        return Err(format!(
            "can't recheck DeletionTimestamp: original Job {ns}/{name} is gone: got uid {got}, wanted {wanted}"
        ));
    }
    if let Some(t) = &fresh.metadata.deletion_timestamp {
        return Err(format!("{ns}/{name} has just been deleted at {}", t.0));
    }
    Ok(())
}

/// Upstream's `AdoptPod` patch (strategic merge: `ownerRefControllerPatch` with the tracking
/// finalizer). It also carries the pod's resourceVersion: our API server does not refuse a second
/// controller reference as kube-apiserver's `ValidateOwnerReferences` does, so a pod claimed by
/// someone else since the cache saw it must fail with 409 instead.
pub fn adopt_patch(job: &Job, p: &Pod) -> Value {
    json!({"metadata": {
        "ownerReferences": [{
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job.metadata.name.as_deref().unwrap_or_default(),
            "uid": job.metadata.uid.as_deref().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
        "uid": p.metadata.uid.as_deref().unwrap_or_default(),
        "resourceVersion": p.metadata.resource_version.as_deref().unwrap_or_default(),
        "finalizers": [TRACKING_FINALIZER],
    }})
}

/// Upstream's `ReleasePod` patch (`GenerateDeleteOwnerRefStrategicMergeBytes` with the tracking
/// finalizer): the Job's reference and the finalizer go.
pub fn release_patch(job_uid: &str, p: &Pod) -> Value {
    json!({"metadata": {
        "uid": p.metadata.uid.as_deref().unwrap_or_default(),
        "ownerReferences": [{"$patch": "delete", "uid": job_uid}],
        "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
    }})
}

/// Upstream's `syncOrphanPod` rule for a pod that keeps the tracking finalizer: it goes unless a
/// Job that exists (`job_live`, by uid) controls the pod (or a controller of another kind does:
/// not ours to touch). Jobs that exist but are finished, being deleted or managed elsewhere are
/// their own sync's business.
pub fn orphan_finalizer_removable(p: &Pod, job_live: impl Fn(&str) -> bool) -> bool {
    if !has_tracking_finalizer(p) {
        return false;
    }
    match controller_of(p) {
        None => true,
        Some(o) => o.kind == "Job" && o.api_version == "batch/v1" && !job_live(&o.uid),
    }
}

/// The patch that takes the tracking finalizer off an orphan, as of the version the decision
/// read: a pod adopted since then fails with 409 and is looked at again.
pub fn orphan_release_patch(p: &Pod) -> Value {
    json!({"metadata": {
        "resourceVersion": p.metadata.resource_version.as_deref().unwrap_or_default(),
        "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
    }})
}

/// Per index group: pods with the tracking finalizer, and of them those without a controller,
/// so the orphan sweep visits only groups that can hold something to release.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tracking {
    pub finalizers: usize,
    pub orphans_with_finalizer: usize,
}

impl crate::pod_index::Summary for Tracking {
    type Digest = (bool, bool);
    fn digest(p: &Pod) -> (bool, bool) {
        let f = has_tracking_finalizer(p);
        (f, f && controller_of(p).is_none())
    }
    fn add(&mut self, &(f, o): &(bool, bool)) {
        self.finalizers += usize::from(f);
        self.orphans_with_finalizer += usize::from(o);
    }
    fn remove(&mut self, &(f, o): &(bool, bool)) {
        self.finalizers -= usize::from(f);
        self.orphans_with_finalizer -= usize::from(o);
    }
}

impl Tracking {
    /// Whether the group filed under `owner` may hold a pod whose finalizer goes.
    pub fn worth_sweeping(&self, owner: &str, job_live: impl Fn(&str) -> bool) -> bool {
        self.orphans_with_finalizer > 0 || (self.finalizers > 0 && !job_live(owner))
    }
}

/// Upstream's `getCompletionIndex`: the completion-index annotation, when it is a non-negative
/// integer (the label is not read).
fn completion_index(p: &Pod) -> Option<i32> {
    let v = p.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?;
    v.parse::<i32>().ok().filter(|i| *i >= 0)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn ready_since(p: &Pod) -> Option<Option<jiff::Timestamp>> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(c.last_transition_time.as_ref().map(|t| t.0))
}

fn max_restarts(p: &Pod) -> i32 {
    let s = p.status.as_ref();
    s.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

/// Upstream's `afterOrZero(a, b)`: a zero time sorts first, then the later one.
fn after_or_zero(a: Option<jiff::Timestamp>, b: Option<jiff::Timestamp>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a > b,
        (a, _) => a.is_none(),
    }
}

/// Upstream's `controller.ActivePods` order: the pod to delete first is the least. Unassigned <
/// assigned; Pending < Unknown < Running; not ready < ready; ready for less time < more; more
/// restarts < fewer; newer < older.
pub fn active_pods_cmp(a: &Pod, b: &Pod) -> Ordering {
    let less = |i: &Pod, j: &Pod| -> bool {
        let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let (ni, nj) = (node(i), node(j));
        if ni != nj && (ni.is_empty() || nj.is_empty()) {
            return ni.is_empty();
        }
        let ordinal = |p: &Pod| match phase(p) {
            "Pending" => 0,
            "Unknown" => 1,
            "Running" => 2,
            _ => 0,
        };
        if ordinal(i) != ordinal(j) {
            return ordinal(i) < ordinal(j);
        }
        let (ri, rj) = (ready_since(i), ready_since(j));
        if ri.is_some() != rj.is_some() {
            return ri.is_none();
        }
        if let (Some(ti), Some(tj)) = (ri, rj)
            && ti != tj
        {
            return after_or_zero(ti, tj);
        }
        if max_restarts(i) != max_restarts(j) {
            return max_restarts(i) > max_restarts(j);
        }
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if created(i) != created(j) {
            return after_or_zero(created(i), created(j));
        }
        false
    };
    if less(a, b) {
        Ordering::Less
    } else if less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// Upstream's `appendDuplicatedIndexPodsForRemoval` over an Indexed Job's active pods: those
/// without a completion index or with one ≥ `completions` go, and of each index all but the
/// pod `ActivePods` ranks highest; returns (to remove, left).
pub fn duplicated_index_pods_for_removal<'a>(active: &[&'a Pod], completions: i32) -> (Vec<&'a Pod>, Vec<&'a Pod>) {
    let mut rm = vec![];
    let mut by_index: std::collections::BTreeMap<i32, Vec<&'a Pod>> = std::collections::BTreeMap::new();
    for p in active {
        match completion_index(p) {
            Some(i) if i < completions => by_index.entry(i).or_default().push(p),
            _ => rm.push(*p),
        }
    }
    let mut left = vec![];
    for (_, mut pods) in by_index {
        pods.sort_by(|a, b| active_pods_cmp(a, b));
        let kept = pods.pop().expect("an index has a pod");
        rm.extend(pods);
        left.push(kept);
    }
    (rm, left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_index::Summary;

    fn job(extra: Value) -> Job {
        let mut v = json!({
            "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {}}
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn pod(extra: Value) -> Pod {
        let mut v = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid", "resourceVersion": "7", "labels": {"app": "a"}}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut Value, b: Value) {
        json_patch::merge(a, &b);
    }

    fn owned_by(uid: &str, controller: bool) -> Value {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid, "controller": controller}]}})
    }

    #[test]
    fn a_job_claims_pods_as_upstreams_claim_object() {
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let other_labels = json!({"metadata": {"labels": {"app": "b"}}});
        let cases: [(&str, Value, Value, Claim); 12] = [
            ("an orphan the selector matches is adopted", json!({}), json!({}), Claim::Adopt),
            ("an orphan the selector does not match is ignored", json!({}), other_labels.clone(), Claim::Ignore),
            ("an orphan being deleted is not adopted", json!({}), deleting.clone(), Claim::Ignore),
            (
                "an orphan of another namespace is not adopted",
                json!({}),
                json!({"metadata": {"namespace": "other"}}),
                Claim::Ignore,
            ),
            ("a Job being deleted adopts nothing", deleting.clone(), json!({}), Claim::Ignore),
            (
                "a pod with only a non-controller reference is an orphan",
                json!({}),
                owned_by("job-uid", false),
                Claim::Adopt,
            ),
            ("a controlled pod still matched is kept", json!({}), owned_by("job-uid", true), Claim::Keep),
            ("a Job being deleted keeps what it controls", deleting.clone(), owned_by("job-uid", true), Claim::Keep),
            (
                "a controlled pod no longer matched is released",
                json!({}),
                {
                    let mut v = owned_by("job-uid", true);
                    merge(&mut v, other_labels.clone());
                    v
                },
                Claim::Release,
            ),
            (
                "a Job being deleted releases nothing",
                deleting.clone(),
                {
                    let mut v = owned_by("job-uid", true);
                    merge(&mut v, other_labels.clone());
                    v
                },
                Claim::Ignore,
            ),
            ("a pod another controller controls is ignored", json!({}), owned_by("other-uid", true), Claim::Ignore),
            (
                "a finished Job claims nothing",
                json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
                json!({}),
                Claim::Ignore,
            ),
        ];
        for (what, j, p, want) in cases {
            let j = job(j);
            let selector = job_selector(&j).unwrap();
            assert_eq!(claim(&j, &selector, &pod(p)), want, "{what}");
        }
        let external = job(json!({"spec": {"managedBy": "example.com/other"}}));
        assert_eq!(
            claim(&external, &job_selector(&external).unwrap(), &pod(json!({}))),
            Claim::Ignore,
            "a Job managed elsewhere claims nothing"
        );
    }

    #[test]
    fn selectors_with_expressions_match_as_label_selectors_do() {
        let j = job(json!({"spec": {"selector": {"matchLabels": null, "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["a", "b"]}, {"key": "skip", "operator": "DoesNotExist"}]}}}));
        let selector = job_selector(&j).unwrap();
        assert_eq!(claim(&j, &selector, &pod(json!({"metadata": {"labels": {"app": "b"}}}))), Claim::Adopt);
        assert_eq!(claim(&j, &selector, &pod(json!({"metadata": {"labels": {"skip": "1"}}}))), Claim::Ignore);
        let bad = job(json!({"spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}}));
        assert!(job_selector(&bad).is_none(), "an unparsable selector claims nothing");
    }

    #[test]
    fn adoption_is_refused_for_a_job_replaced_or_being_deleted_since_the_cache_saw_it() {
        let j = job(json!({}));
        assert_eq!(can_adopt(&j, &j), Ok(()));
        assert_eq!(
            can_adopt(&j, &job(json!({"metadata": {"uid": "new-uid"}}))),
            Err("can't recheck DeletionTimestamp: original Job ns/j is gone: got uid new-uid, wanted job-uid".into())
        );
        assert_eq!(
            can_adopt(&j, &job(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}))),
            Err("ns/j has just been deleted at 2026-01-01T00:00:00Z".into())
        );
    }

    #[test]
    fn adopt_and_release_patches_are_upstreams_with_the_tracking_finalizer() {
        let j = job(json!({}));
        let p = pod(json!({}));
        assert_eq!(
            adopt_patch(&j, &p),
            json!({"metadata": {
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid", "controller": true, "blockOwnerDeletion": true}],
                "uid": "pod-uid", "resourceVersion": "7", "finalizers": [TRACKING_FINALIZER]}})
        );
        assert_eq!(
            release_patch("job-uid", &p),
            json!({"metadata": {"uid": "pod-uid", "ownerReferences": [{"$patch": "delete", "uid": "job-uid"}],
                "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
        );
        assert_eq!(
            orphan_release_patch(&p),
            json!({"metadata": {"resourceVersion": "7", "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
        );
    }

    #[test]
    fn orphans_lose_the_tracking_finalizer_unless_a_live_job_controls_them() {
        let finalizer = json!({"metadata": {"finalizers": [TRACKING_FINALIZER]}});
        let with = |v: Value| {
            let mut f = finalizer.clone();
            merge(&mut f, v);
            f
        };
        let other_kind = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "rs-uid", "controller": true}]}});
        let cases: [(&str, Value, bool); 6] = [
            ("an orphan (no owner) loses it", finalizer.clone(), true),
            (
                "a pod with only a non-controller reference to a live Job loses it",
                with(owned_by("job-uid", false)),
                true,
            ),
            ("a pod controlled by a Job that is gone loses it", with(owned_by("gone-uid", true)), true),
            ("a pod controlled by a live Job keeps it", with(owned_by("job-uid", true)), false),
            ("a pod controlled by another kind keeps it", with(other_kind), false),
            ("a pod without the finalizer has nothing to lose", json!({}), false),
        ];
        for (what, p, want) in cases {
            assert_eq!(orphan_finalizer_removable(&pod(p), |uid| uid == "job-uid"), want, "{what}");
        }
    }

    #[test]
    fn index_groups_file_job_pods_by_job_uid_and_orphans_by_namespace() {
        let other_kind = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "rs-uid", "controller": true}]}});
        assert_eq!(index_key(&pod(owned_by("job-uid", true))), Some("job-uid"));
        assert_eq!(index_key(&pod(owned_by("job-uid", false))), Some("ns"));
        assert_eq!(index_key(&pod(json!({}))), Some("ns"));
        assert_eq!(index_key(&pod(other_kind)), None);
        // A namespace named as a Job's uid shares its group: each reader keeps its own pods.
        let group =
            vec![pod(owned_by("job-uid", true)), pod(json!({"metadata": {"namespace": "job-uid", "name": "o"}}))];
        assert_eq!(controlled_by(group.clone().into_iter().map(std::sync::Arc::new).collect(), "job-uid").len(), 1);
        let orphans = orphans_in(group.into_iter().map(std::sync::Arc::new).collect(), "job-uid");
        assert_eq!(orphans.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["o"]);
    }

    #[test]
    fn the_sweep_visits_groups_with_orphaned_finalizers_or_of_jobs_that_are_gone() {
        let mut t = Tracking::default();
        let tracked = Tracking::digest(&pod(json!({"metadata": {"finalizers": [TRACKING_FINALIZER]}})));
        let controlled = {
            let mut v = owned_by("job-uid", true);
            merge(&mut v, json!({"metadata": {"finalizers": [TRACKING_FINALIZER]}}));
            Tracking::digest(&pod(v))
        };
        let live = |o: &str| o == "job-uid";
        t.add(&controlled);
        assert!(!t.worth_sweeping("job-uid", live), "a live Job's pods are its own");
        assert!(t.worth_sweeping("gone-uid", live), "a gone Job's pods are orphans");
        t.add(&tracked);
        assert!(t.worth_sweeping("job-uid", live), "an orphan with the finalizer, even in a group named as a live Job");
        t.remove(&tracked);
        t.remove(&controlled);
        assert_eq!(t, Tracking::default());
    }

    fn active(name: &str, index: Option<&str>, extra: Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        if let Some(i) = index {
            v["metadata"]["annotations"] = json!({COMPLETION_INDEX: i});
        }
        merge(&mut v, extra);
        pod(v)
    }

    #[test]
    fn indexed_pods_without_a_valid_index_or_duplicating_one_are_removed() {
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}]}});
        let cases: [(&str, Vec<Pod>, &[&str]); 8] = [
            (
                "unique valid indexes stay",
                vec![active("a", Some("0"), json!({})), active("b", Some("1"), json!({}))],
                &[],
            ),
            ("no index annotation", vec![active("a", None, json!({}))], &["a"]),
            (
                "an index label alone is no index",
                vec![active("a", None, json!({"metadata": {"labels": {COMPLETION_INDEX: "0"}}}))],
                &["a"],
            ),
            (
                "an unparsable or negative index",
                vec![active("a", Some("x"), json!({})), active("b", Some("-1"), json!({}))],
                &["a", "b"],
            ),
            (
                "an index ≥ completions",
                vec![active("a", Some("2"), json!({})), active("b", Some("1"), json!({}))],
                &["a"],
            ),
            (
                "of a duplicated index the unscheduled pod goes",
                vec![
                    active("a", Some("0"), json!({})),
                    active("b", Some("0"), json!({"spec": {"nodeName": null}, "status": {"phase": "Pending"}})),
                ],
                &["b"],
            ),
            (
                "of a duplicated index the not-ready pod goes",
                vec![active("a", Some("0"), json!({})), active("b", Some("0"), ready.clone())],
                &["a"],
            ),
            (
                "of equals the newer pod goes",
                vec![
                    active("a", Some("0"), json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:05Z"}})),
                    active("b", Some("0"), json!({})),
                ],
                &["a"],
            ),
        ];
        for (what, pods, want) in cases {
            let refs: Vec<&Pod> = pods.iter().collect();
            let (rm, left) = duplicated_index_pods_for_removal(&refs, 2);
            let mut names: Vec<&str> = rm.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect();
            names.sort();
            assert_eq!(names, want, "{what}");
            assert_eq!(rm.len() + left.len(), pods.len(), "{what}: every pod is either removed or left");
        }
    }

    #[test]
    fn active_pods_order_ranks_as_upstreams() {
        let p = |extra: Value| active("x", None, extra);
        let restarts = |n: i32| json!({"status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": n}]}});
        let ready_at =
            |t: &str| json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": t}]}});
        // (less, greater): the first is deleted first.
        let cases: [(&str, Pod, Pod); 6] = [
            ("unassigned before assigned", p(json!({"spec": {"nodeName": null}})), p(json!({}))),
            ("pending before running", p(json!({"status": {"phase": "Pending"}})), p(json!({}))),
            ("unknown before running", p(json!({"status": {"phase": "Unknown"}})), p(json!({}))),
            (
                "ready for less time before more",
                p(ready_at("2026-01-01T00:00:20Z")),
                p(ready_at("2026-01-01T00:00:10Z")),
            ),
            ("more restarts before fewer", p(restarts(3)), p(restarts(1))),
            ("newer before older", p(json!({"metadata": {"creationTimestamp": "2026-01-02T00:00:00Z"}})), p(json!({}))),
        ];
        for (what, less, greater) in cases {
            assert_eq!(active_pods_cmp(&less, &greater), Ordering::Less, "{what}");
            assert_eq!(active_pods_cmp(&greater, &less), Ordering::Greater, "{what}");
        }
        assert_eq!(active_pods_cmp(&p(json!({})), &p(json!({}))), Ordering::Equal);
    }
}
