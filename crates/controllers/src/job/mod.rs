//! The batch/v1 Job controller, with upstream's failure handling: a kube-runtime controller
//! around the pure [`sync::sync`].

pub mod backoff;
pub mod indexes;
pub mod pod_failure_policy;
pub mod success_policy;
pub mod sync;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use self::backoff::BackoffRecord;
use self::sync::{EventKind, SyncConfig, SyncInput, TRACKING_FINALIZER};
use crate::pod_index::PodIndex;
use crate::shared_pods::SharedPods;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube API: {0}")]
    Kube(#[from] kube::Error),
}

#[derive(Debug, Clone)]
pub struct JobControllerConfig {
    pub sync: SyncConfig,
    /// How soon to look again when the pod cache has not caught up with our own writes.
    pub cache_wait: Duration,
    /// How often pods that keep the tracking finalizer after their Job is gone are released.
    pub orphan_sweep: Duration,
    pub concurrency: u16,
}

impl Default for JobControllerConfig {
    fn default() -> Self {
        JobControllerConfig {
            sync: SyncConfig::default(),
            cache_wait: Duration::from_millis(20),
            orphan_sweep: Duration::from_secs(1),
            concurrency: 8,
        }
    }
}

/// Writes this controller made that its caches must show before it decides again.
#[derive(Default)]
struct Expectations {
    /// Pod names created and not seen yet.
    creates: HashSet<String>,
    /// Pod uids deleted and not yet seen deleting or gone.
    deletes: HashSet<String>,
    /// The resourceVersion of our last status write.
    status_rv: u64,
}

pub struct Ctx {
    client: Client,
    pods: PodIndex,
    recorder: Recorder,
    config: JobControllerConfig,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    expectations: Mutex<HashMap<String, Expectations>>,
    /// `setConditionReason` of each podFailurePolicy rule, per Job uid (the policy is immutable).
    reasons: Mutex<HashMap<String, Vec<Option<String>>>>,
}

fn controller_uid(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Job")
        .map(|o| o.uid.as_str())
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0)
}

impl Ctx {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the caches reflect every write this controller made for the Job.
    fn caught_up(&self, job: &Job, pods: &[Arc<Pod>]) -> bool {
        let uid = job.uid().unwrap_or_default();
        let mut all = Self::lock(&self.expectations);
        let Some(e) = all.get_mut(&uid) else { return true };
        if rv_of(&job.metadata) < e.status_rv {
            return false;
        }
        let names: HashSet<&str> = pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
        e.creates.retain(|n| !names.contains(n.as_str()));
        e.deletes.retain(|u| {
            pods.iter().any(|p| p.metadata.uid.as_deref() == Some(u) && p.metadata.deletion_timestamp.is_none())
        });
        e.creates.is_empty() && e.deletes.is_empty()
    }

    fn expect(&self, uid: &str) -> std::sync::MutexGuard<'_, HashMap<String, Expectations>> {
        let mut all = Self::lock(&self.expectations);
        all.entry(uid.to_string()).or_default();
        all
    }

    async fn condition_reasons(&self, job: &Job) -> Result<Vec<Option<String>>, Error> {
        let has_policy = job.spec.as_ref().and_then(|s| s.pod_failure_policy.as_ref()).is_some();
        if !has_policy {
            return Ok(vec![]);
        }
        let uid = job.uid().unwrap_or_default();
        if let Some(r) = Self::lock(&self.reasons).get(&uid) {
            return Ok(r.clone());
        }
        // k8s-openapi drops fields it does not know: read the extension from the raw object.
        let api: Api<kube::core::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &job.namespace().unwrap_or_default(),
            &kube::core::ApiResource::erase::<Job>(&()),
        );
        let raw = api.get(&job.name_any()).await?;
        let reasons: Vec<Option<String>> = raw.data["spec"]["podFailurePolicy"]["rules"]
            .as_array()
            .map(|rules| rules.iter().map(|r| r["setConditionReason"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        Self::lock(&self.reasons).insert(uid, reasons.clone());
        Ok(reasons)
    }
}

pub async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let uid = job.uid().unwrap_or_default();
    let ns = job.namespace().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = ctx.pods.of(&uid);
    if !ctx.caught_up(&job, &pods) {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    let reasons = ctx.condition_reasons(&job).await?;
    let backoff = Ctx::lock(&ctx.backoff).get(&uid).cloned().unwrap_or_default();
    let plan = sync::sync(&SyncInput {
        job: &job,
        set_condition_reasons: reasons,
        pods: pods.iter().map(|p| p.as_ref()).collect(),
        now: jiff::Timestamp::now(),
        backoff,
        config: &ctx.config.sync,
    });
    // Pod creations and deletions first (upstream's manageJob), so the status counts real pods;
    // pods that must not count as failed lose their finalizer before they are deleted.
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let by_name: HashMap<&str, &Arc<Pod>> =
        pods.iter().filter_map(|p| Some((p.metadata.name.as_deref()?, p))).collect();
    for d in &plan.deletes {
        if d.remove_finalizer_first {
            remove_finalizer(&pod_api, &d.name).await?;
        }
        if let Some(p) = by_name.get(d.name.as_str()) {
            ctx.expect(&uid).get_mut(&uid).expect("just inserted").deletes.insert(p.uid().unwrap_or_default());
        }
        match pod_api.delete(&d.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Slow start, as upstream: batches of 1, 2, 4, ... created concurrently; a failed batch stops
    // the rest (the next sync recomputes what is missing).
    let mut batch = 1usize;
    let mut rest: &[Pod] = &plan.creates;
    while !rest.is_empty() {
        let (now, later) = rest.split_at(batch.min(rest.len()));
        let pp = PostParams::default();
        let results = futures::future::join_all(now.iter().map(|p| pod_api.create(&pp, p))).await;
        // The server names the pods (generateName): expect the names it answered with. Syncs of
        // one Job never overlap, so the next one sees these before it reads the cache.
        let mut failed = None;
        {
            let mut all = ctx.expect(&uid);
            let e = all.get_mut(&uid).expect("just inserted");
            for r in results {
                match r {
                    Ok(created) => {
                        e.creates.insert(created.name_any());
                    }
                    Err(err) => failed = Some(err),
                }
            }
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        rest = later;
        batch *= 2;
    }
    // The one status write: it records finished pods before their finalizers go.
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(status) = plan.status.clone() {
        // A full replace with our resourceVersion: a stale cache fails here, before any finalizer goes.
        let mut updated = (*job).clone();
        updated.status = Some(status);
        match jobs.replace_status(&job.name_any(), &PostParams::default(), &updated).await {
            Ok(written) => ctx.expect(&uid).get_mut(&uid).expect("just inserted").status_rv = rv_of(&written.metadata),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::requeue(ctx.config.cache_wait)),
            Err(e) => return Err(e.into()),
        }
    }
    if plan.finished {
        Ctx::lock(&ctx.backoff).remove(&uid);
    } else {
        Ctx::lock(&ctx.backoff).insert(uid.clone(), plan.backoff.clone());
    }
    let removals = futures::stream::iter(plan.remove_finalizers.iter().cloned().map(|name| {
        let api = pod_api.clone();
        async move { remove_finalizer(&api, &name).await }
    }))
    .buffer_unordered(64)
    .collect::<Vec<_>>()
    .await;
    removals.into_iter().collect::<Result<Vec<()>, Error>>()?;
    // Events only after the status they report was written.
    for e in &plan.events {
        let ev = KubeEvent {
            type_: if e.kind == EventKind::Warning { EventType::Warning } else { EventType::Normal },
            reason: e.reason.clone(),
            note: Some(e.message.clone()),
            action: "Sync".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&ev, &job.object_ref(&())).await {
            tracing::warn!(job = %job.name_any(), error = %err, "publishing an event failed");
        }
    }
    if plan.finished {
        Ctx::lock(&ctx.reasons).remove(&uid);
    }
    Ok(plan.requeue_after.map(Action::requeue).unwrap_or_else(Action::await_change))
}

async fn remove_finalizer(pods: &Api<Pod>, name: &str) -> Result<(), Error> {
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match pods.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn error_policy(_job: Arc<Job>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::debug!(error = %err, "job sync failed; retrying");
    Action::requeue(Duration::from_millis(200))
}

/// The pods a Job controller follows (upstream's informer: those with the controller-uid label).
pub fn job_pod(p: &Pod) -> bool {
    controller_uid(p).is_some()
}

/// Whether a pod update can change what the Job controller decides: everything counts but the
/// resourceVersion, managedFields and the annotations outside `batch.kubernetes.io/` (it reads
/// only its own). A group restart in place writes an attempt annotation on every pod, and syncing
/// each pod's Job for each of them took a tenth of that restart's CPU; upstream's controller
/// folds such updates into one sync a second (`syncJobBatchPeriod`).
fn matters_to_job(before: &Pod, now: &Pod) -> bool {
    // Every field named, so that a field added to ObjectMeta is a compile error here.
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields: _,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = &before.metadata;
    let n = &now.metadata;
    fn batch(a: &Option<BTreeMap<String, String>>) -> impl Iterator<Item = (&String, &String)> {
        a.iter().flatten().filter(|(k, _)| k.starts_with("batch.kubernetes.io/"))
    }
    // The API server bumps a pod's generation whenever its spec changes (as kube-apiserver does
    // since pods have one), except for the binding: the whole spec is compared only without one.
    let spec_changed = match (generation, n.generation) {
        (Some(a), Some(b)) if *a == b => node_name(before) != node_name(now),
        _ => before.spec != now.spec,
    };
    fn node_name(p: &Pod) -> Option<&str> {
        p.spec.as_ref()?.node_name.as_deref()
    }
    spec_changed
        || before.status != now.status
        || !batch(annotations).eq(batch(&n.annotations))
        || (creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name)
            != (
                &n.creation_timestamp,
                &n.deletion_grace_period_seconds,
                &n.deletion_timestamp,
                &n.finalizers,
                &n.generate_name,
            )
        || (generation, labels, name, namespace, owner_references, self_link, uid)
            != (&n.generation, &n.labels, &n.name, &n.namespace, &n.owner_references, &n.self_link, &n.uid)
}

/// Runs the Job controller until the stream of reconciles ends; its pods come from `pods`.
pub async fn run(client: Client, config: JobControllerConfig, pods: SharedPods) {
    let jobs: Api<Job> = Api::all(client.clone());
    let index = PodIndex::passing_updates_that(controller_uid, matters_to_job);
    let pod_events = index.follow(pods.subscribe(job_pod));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods: index.clone(),
        recorder: Recorder::new(client.clone(), Reporter { controller: "job-controller".into(), instance: None }),
        config: config.clone(),
        backoff: Mutex::default(),
        expectations: Mutex::default(),
        reasons: Mutex::default(),
    });
    let controller = Controller::new(jobs, watcher::Config::default())
        .owns_shared_stream(pod_events)
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));
    let job_store = controller.store();
    let sweeper = tokio::spawn(release_orphans(client.clone(), index, job_store, config.orphan_sweep));
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "job reconcile");
            }
        })
        .await;
    sweeper.abort();
}

/// Pods that keep the tracking finalizer though no Job controls them any more lose it
/// (upstream's orphan handling), so they can be deleted.
async fn release_orphans(client: Client, pods: PodIndex, jobs: Store<Job>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if jobs.wait_until_ready().await.is_err() {
            return;
        }
        let live: HashSet<String> = jobs.state().iter().filter_map(|j| j.uid()).collect();
        // The index files pods by their controlling Job's uid.
        let Some(pods) = pods.of_owners_not(|uid| live.contains(uid)) else { continue };
        let orphans: Vec<Arc<Pod>> = pods
            .into_iter()
            .filter(|p| p.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER)))
            .collect();
        // Concurrently: a restarted JobSet can leave thousands of them at once.
        futures::stream::iter(orphans.into_iter().map(|p| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
            async move {
                if let Err(e) = remove_finalizer(&api, &p.name_any()).await {
                    tracing::debug!(pod = %p.name_any(), error = %e, "releasing an orphaned pod");
                }
            }
        }))
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::indexes::{COMPLETION_INDEX, INDEX_FAILURE_COUNT};
    use super::*;

    #[test]
    fn only_updates_of_what_the_job_controller_reads_matter_to_it() {
        let base: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "resourceVersion": "1", "generation": 1,
                         "annotations": {COMPLETION_INDEX: "0", "jobset.sigs.k8s.io/in-place-restart-attempt": "0"},
                         "labels": {"a": "b"}, "finalizers": [TRACKING_FINALIZER]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        type Change = fn(&mut Pod);
        let cases: [(&str, Change, bool); 10] = [
            ("resourceVersion only", |p| p.metadata.resource_version = Some("2".into()), false),
            (
                "another controller's annotation",
                |p| annotate(p, "jobset.sigs.k8s.io/in-place-restart-attempt", "1"),
                false,
            ),
            ("a batch annotation", |p| annotate(p, INDEX_FAILURE_COUNT, "1"), true),
            ("the status", |p| p.status.as_mut().unwrap().phase = Some("Failed".into()), true),
            ("a label", |p| p.metadata.labels = None, true),
            ("the tracking finalizer removed", |p| p.metadata.finalizers = None, true),
            ("deletion requested", |p| p.metadata.deletion_grace_period_seconds = Some(30), true),
            ("the binding", |p| p.spec.as_mut().unwrap().node_name = Some("n".into()), true),
            (
                "the spec, at a new generation",
                |p| {
                    p.spec.as_mut().unwrap().containers[0].image = Some("j".into());
                    p.metadata.generation = Some(2);
                },
                true,
            ),
            (
                "the spec of a pod without a generation",
                |p| {
                    p.spec.as_mut().unwrap().containers[0].image = Some("j".into());
                    p.metadata.generation = None;
                },
                true,
            ),
        ];
        for (what, change, matters) in cases {
            let mut now = base.clone();
            change(&mut now);
            assert_eq!(matters_to_job(&base, &now), matters, "{what}");
        }
        // Without generations on either side, the spec is compared.
        let mut before = base.clone();
        before.metadata.generation = None;
        let mut now = before.clone();
        now.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
        assert!(matters_to_job(&before, &now), "a spec change without generations");
    }

    fn annotate(p: &mut Pod, k: &str, v: &str) {
        p.metadata.annotations.get_or_insert_default().insert(k.into(), v.into());
    }
}
