//! The batch/v1 Job controller, with upstream's failure handling: a kube-runtime controller
//! around the pure [`sync::sync`].

pub mod backoff;
pub mod batch;
pub mod claim;
pub mod indexes;
pub mod pod_failure_policy;
pub mod success_policy;
pub mod sync;
pub mod workload;

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
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::task::AbortOnDropHandle;

use self::backoff::BackoffRecord;
use self::batch::Trigger;
use self::claim::{Claim, Tracking};
use self::sync::{EventKind, SyncConfig, SyncInput, TRACKING_FINALIZER};
use crate::pod_index::PodIndex;
use crate::shared_pods::SharedPods;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube API: {0}")]
    Kube(#[from] kube::Error),
    /// Upstream's `AdoptPod` refusal (the Job is another one, or going, since the cache saw it).
    #[error("can't adopt Pod {pod}: {reason}")]
    Adopt { pod: String, reason: String },
}

#[derive(Debug, Clone)]
pub struct JobControllerConfig {
    pub sync: SyncConfig,
    /// How soon to look again when the pod cache has not caught up with our own writes.
    pub cache_wait: Duration,
    /// How soon a failed sync is retried: a pod creation refused (an exclusive-placement follower
    /// before its leader is scheduled, say) is created again then, and counts as no failure.
    pub error_retry: Duration,
    /// How often pods that keep the tracking finalizer with no existing Job controlling them
    /// (their Job is gone, or they have no controller) are released.
    pub orphan_sweep: Duration,
    /// Reconciles of different objects at once (kube-runtime's `Config::concurrency`); 0, the
    /// default, is unbounded. With a bound (8), kube-runtime 5.0's controller loop lost reconcile
    /// requests under load: in `jobset bench scale`'s soak, Jobs were never synced again and their
    /// JobSets never finished (15 of 639 cycles stuck at 8, 0 of 1,278 at 0; docs/benchmarks.md).
    pub concurrency: u16,
    /// Upstream's `syncJobBatchPeriod` (1 s): a Job syncs this long after a change of one of its
    /// pods or of its status, once for all the changes in between ([`batch`]); a Job created,
    /// deleted or whose spec changed syncs at once.
    pub sync_batch_period: Duration,
    /// Kubernetes 1.36's alpha gate `EnableWorkloadWithJob` (off by default, as upstream): gang
    /// candidates get a Workload and a PodGroup, and their pods join it ([`workload`]).
    pub workload_with_job: bool,
}

impl Default for JobControllerConfig {
    fn default() -> Self {
        JobControllerConfig {
            sync: SyncConfig::default(),
            cache_wait: Duration::from_millis(20),
            error_retry: Duration::from_millis(200),
            orphan_sweep: Duration::from_secs(1),
            concurrency: 0,
            sync_batch_period: Duration::from_secs(1),
            workload_with_job: false,
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
    /// Pod uids whose tracking finalizer we removed and the cache still shows (upstream's
    /// `finalizerExpectations`): a sync counts them as without it. Unlike the sets above they do
    /// not hold a sync back.
    finalizer_removals: HashSet<String>,
}

pub struct Ctx {
    client: Client,
    pods: PodIndex<Tracking>,
    recorder: Recorder,
    config: JobControllerConfig,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    expectations: Mutex<HashMap<String, Expectations>>,
    /// `setConditionReason` of each podFailurePolicy rule, per Job uid (the policy is immutable).
    reasons: Mutex<HashMap<String, Vec<Option<String>>>>,
    /// Per Job uid, pods it adopted or released (pod uid → the resourceVersion of that write)
    /// that the cache does not show yet: its next sync waits for them.
    claims: Mutex<HashMap<String, HashMap<String, u64>>>,
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
        e.finalizer_removals
            .retain(|u| pods.iter().any(|p| p.metadata.uid.as_deref() == Some(u) && sync::has_finalizer(p)));
        e.creates.is_empty() && e.deletes.is_empty()
    }

    /// The finalizer removals the cache does not show yet (as of the last [`Ctx::caught_up`]).
    fn expected_finalizer_removals(&self, uid: &str) -> HashSet<String> {
        Self::lock(&self.expectations).get(uid).map(|e| e.finalizer_removals.clone()).unwrap_or_default()
    }

    /// Drops what the controller keeps per Job uid for Jobs that no longer exist, as upstream's
    /// `deleteJob` deletes a Job's expectations: a churn of Jobs leaves nothing behind. (A sync of
    /// a Job deleted meanwhile may add an entry back; the next sweep drops it.)
    fn forget_gone(&self, live: &dyn Fn(&str) -> bool) {
        Self::lock(&self.backoff).retain(|uid, _| live(uid));
        Self::lock(&self.expectations).retain(|uid, _| live(uid));
        Self::lock(&self.reasons).retain(|uid, _| live(uid));
        Self::lock(&self.claims).retain(|uid, _| live(uid));
    }

    fn expect(&self, uid: &str) -> std::sync::MutexGuard<'_, HashMap<String, Expectations>> {
        let mut all = Self::lock(&self.expectations);
        all.entry(uid.to_string()).or_default();
        all
    }

    /// The PodGroup a gang candidate's new pods join, its Workload and PodGroup created when
    /// missing (`ensureWorkloadAndPodGroup`); None falls back to default scheduling.
    async fn pod_group_for(&self, job: &Job, pods: usize) -> Result<Option<String>, Error> {
        use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
        use workload::{PodGroupStep, WorkloadStep};
        let ns = job.namespace().unwrap_or_default();
        let workloads: Api<Workload> = Api::namespaced(self.client.clone(), &ns);
        let referencing: Vec<Workload> = workloads
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|w| workload::references(w, job))
            .collect();
        let wl = match workload::workload_step(job, &referencing, workload::is_new(job, pods)) {
            WorkloadStep::Fallback => return Ok(None),
            WorkloadStep::Use(wl) => wl.clone(),
            WorkloadStep::Create => {
                let created = match workloads.create(&PostParams::default(), &workload::new_workload(job)).await {
                    Ok(created) => created,
                    // Ours from a sync whose list ran before the cache showed it: the next sync uses it.
                    Err(kube::Error::Api(s)) if s.code == 409 => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let name = created.name_any();
                let note = format!("Created Workload {name} for Job {}", job.name_any());
                self.publish(job, EventType::Normal, "WorkloadCreated", note).await;
                created
            }
        };
        let groups: Api<PodGroup> = Api::namespaced(self.client.clone(), &ns);
        let made: Vec<PodGroup> = groups
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|g| workload::made_from(g, &wl.name_any()))
            .collect();
        Ok(match workload::pod_group_step(job, &made) {
            PodGroupStep::Fallback => None,
            PodGroupStep::Use(pg) => Some(pg.name_any()),
            PodGroupStep::Create => {
                match groups.create(&PostParams::default(), &workload::new_pod_group(job, &wl)).await {
                    Ok(pg) => Some(pg.name_any()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Some(workload::new_pod_group(job, &wl).name_any()),
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    async fn publish(&self, job: &Job, type_: EventType, reason: &str, note: String) {
        let ev = KubeEvent { type_, reason: reason.into(), note: Some(note), action: "Sync".into(), secondary: None };
        if let Err(err) = self.recorder.publish(&ev, &job.object_ref(&())).await {
            tracing::warn!(job = %job.name_any(), error = %err, "publishing an event failed");
        }
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
    // Upstream's Run waits for the pod informer's first list (`WaitForNamedCacheSync`): a Job
    // synced before it sees none of its pods and creates each index again, which a fresh
    // controller (a restarted `jobset up`, no expectations) did for the Jobs its first list held.
    if !ctx.pods.is_synced() {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    let pods: Vec<Arc<Pod>> = claim::controlled_by(ctx.pods.of(&uid), &uid);
    if !ctx.caught_up(&job, &pods) {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    // Adoptions and releases first (upstream's getPodsForJob); the sync then reads the pods as
    // the cache shows them after those writes.
    if ctx.claim_pods(&job, &pods).await? {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    let reasons = ctx.condition_reasons(&job).await?;
    let backoff = Ctx::lock(&ctx.backoff).get(&uid).cloned().unwrap_or_default();
    let mut plan = sync::sync(&SyncInput {
        job: &job,
        set_condition_reasons: reasons,
        pods: pods.iter().map(|p| p.as_ref()).collect(),
        now: jiff::Timestamp::now(),
        backoff,
        config: &ctx.config.sync,
        expected_finalizer_removals: ctx.expected_finalizer_removals(&uid),
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
    let mut creates = std::mem::take(&mut plan.creates);
    if ctx.config.workload_with_job
        && !creates.is_empty()
        && workload::is_candidate(&job)
        && let Some(pod_group) = ctx.pod_group_for(&job, pods.len()).await?
    {
        for p in &mut creates {
            workload::join(p, &pod_group);
        }
    }
    // Slow start, as upstream: batches of 1, 2, 4, ... created concurrently; a failed batch stops
    // the rest (the next sync recomputes what is missing).
    let mut batch = 1usize;
    let mut rest: &[Pod] = &creates;
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
    // Expected before the patches go out: the next sync may run before the cache shows them.
    let removing: Vec<(String, String)> =
        plan.remove_finalizers.iter().filter_map(|n| Some((n.clone(), by_name.get(n.as_str())?.uid()?))).collect();
    ctx.expect(&uid)
        .get_mut(&uid)
        .expect("just inserted")
        .finalizer_removals
        .extend(removing.iter().map(|(_, u)| u.clone()));
    let removals = futures::stream::iter(removing.into_iter().map(|(name, pod_uid)| {
        let api = pod_api.clone();
        async move { (pod_uid, remove_finalizer(&api, &name).await) }
    }))
    .buffer_unordered(64)
    .collect::<Vec<_>>()
    .await;
    let mut first_error = None;
    for (pod_uid, r) in removals {
        if let Err(e) = r {
            // No update will show this removal: the pod counts as tracked again.
            ctx.expect(&uid).get_mut(&uid).expect("just inserted").finalizer_removals.remove(&pod_uid);
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Events only after the status they report was written.
    for e in &plan.events {
        let type_ = if e.kind == EventKind::Warning { EventType::Warning } else { EventType::Normal };
        ctx.publish(&job, type_, &e.reason, e.message.clone()).await;
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

pub fn error_policy(_job: Arc<Job>, err: &Error, ctx: Arc<Ctx>) -> Action {
    tracing::debug!(error = %err, "job sync failed; retrying");
    Action::requeue(ctx.config.error_retry)
}

/// The pods a Job controller follows: those a Job controls, and those nothing controls (upstream
/// watches every pod; pods of other controllers can be neither adopted nor released).
pub fn job_pod(p: &Pod) -> bool {
    claim::index_key(p).is_some()
}

/// The Jobs a pod event concerns: its controlling Job, or for a pod nothing controls, the Jobs of
/// its namespace whose selector matches it (upstream's `getPodJobs`: they may adopt it).
fn jobs_of_pod(jobs: &Store<Job>, p: &Pod) -> Vec<ObjectRef<Job>> {
    let ns = p.namespace();
    match claim::controller_of(p) {
        Some(o) if o.kind == "Job" => vec![ObjectRef::new(&o.name).within(ns.as_deref().unwrap_or_default())],
        Some(_) => vec![],
        None => jobs
            .state()
            .iter()
            .filter(|j| j.namespace() == ns)
            .filter(|j| claim::job_selector(j).is_some_and(|s| claim::claim(j, &s, p) == Claim::Adopt))
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect(),
    }
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
    let index = PodIndex::passing_updates_that(claim::index_key, matters_to_job);
    let pod_events = index.follow(pods.subscribe(job_pod));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods: index.clone(),
        recorder: Recorder::new(client.clone(), Reporter { controller: "job-controller".into(), instance: None }),
        config: config.clone(),
        backoff: Mutex::default(),
        expectations: Mutex::default(),
        reasons: Mutex::default(),
        claims: Mutex::default(),
    });
    let (job_store, writer) = reflector::store::<Job>();
    let (job_events, jobs_listed) =
        crate::listed::track(watcher(jobs, watcher::Config::default()).default_backoff().reflect(writer));
    let job_triggers = job_events.scan(HashMap::<ObjectRef<Job>, Option<i64>>::new(), |generations, ev| {
        futures::future::ready(Some(futures::stream::iter(job_trigger(generations, ev))))
    });
    let store = job_store.clone();
    let pod_triggers =
        pod_events.flat_map(move |p| futures::stream::iter(jobs_of_pod(&store, &p).into_iter().map(Trigger::Batched)));
    let triggers = futures::stream::select(job_triggers.flatten(), pod_triggers);
    // Every trigger comes through `batched`, the Jobs' own events too (upstream's Job event
    // handlers); the controller's own stream is only the store.
    let controller = Controller::for_stream(futures::stream::pending(), job_store.clone())
        .reconcile_on(batch::batched(triggers, config.sync_batch_period))
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));
    // Stops with the controller, also when its future is dropped.
    let _sweeper =
        AbortOnDropHandle::new(tokio::spawn(release_orphans(ctx.clone(), job_store, jobs_listed, config.orphan_sweep)));
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "job reconcile");
            }
        })
        .await;
}

/// When a Job event syncs its Job, as upstream's Job event handlers enqueue it: created
/// (`addJob`), deleted (`deleteJob`) or its spec changed (a new generation, `updateJob`) at once;
/// any other update (its status) batched. `generations` holds each Job's last seen generation.
fn job_trigger(
    generations: &mut HashMap<ObjectRef<Job>, Option<i64>>,
    ev: Result<watcher::Event<Job>, watcher::Error>,
) -> Option<Trigger<ObjectRef<Job>>> {
    match ev {
        Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) => {
            let r = ObjectRef::from_obj(&j);
            let generation = j.metadata.generation;
            let same = generations.insert(r.clone(), generation) == Some(generation);
            Some(if same { Trigger::Batched(r) } else { Trigger::Now(r) })
        }
        Ok(watcher::Event::Delete(j)) => {
            let r = ObjectRef::from_obj(&j);
            generations.remove(&r);
            Some(Trigger::Now(r))
        }
        _ => None,
    }
}

/// Pods that keep the tracking finalizer though no existing Job controls them lose it
/// (upstream's `syncOrphanPod`, fed there by pod events and `deleteJob`'s `cleanupPodFinalizers`):
/// pods of deleted Jobs (also deleted with `propagationPolicy: Orphan`), released pods, pods with
/// only a non-controller reference. Jobs that exist remove their own pods' finalizers.
async fn release_orphans(ctx: Arc<Ctx>, jobs: Store<Job>, listed: crate::listed::Listed, every: Duration) {
    let (client, pods) = (&ctx.client, &ctx.pods);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        // Not `jobs.wait_until_ready()`: the controller waits on that store too (see `listed`).
        if !listed.wait().await {
            return;
        }
        let live: HashSet<String> = jobs.state().iter().filter_map(|j| j.uid()).collect();
        let live = |uid: &str| live.contains(uid);
        ctx.forget_gone(&live);
        // Groups are checked by their tallies, not pod by pod: the sweep runs every second over
        // thousands of pods of live Jobs.
        let Some(pods) = pods.of_owners_where(|owner, t| t.worth_sweeping(owner, live)) else { continue };
        let orphans: Vec<Arc<Pod>> = pods.into_iter().filter(|p| claim::orphan_finalizer_removable(p, live)).collect();
        // Concurrently: a restarted JobSet can leave thousands of them at once.
        futures::stream::iter(orphans.into_iter().map(|p| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
            async move {
                let patch = Patch::Strategic(claim::orphan_release_patch(&p));
                match api.patch(&p.name_any(), &PatchParams::default(), &patch).await {
                    Ok(_) => {}
                    // Gone, or changed since the index saw it (adopted, say): the next sweep looks again.
                    Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
                    Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "releasing an orphaned pod"),
                }
            }
        }))
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    }
}

impl Ctx {
    /// Upstream's `getPodsForJob` → `ClaimPods`: adopts the orphans of the Job's namespace that
    /// its selector matches and releases the pods it controls that the selector no longer
    /// matches. Returns whether it wrote anything, or still waits for the cache to show such
    /// writes: the sync then waits, so that it never counts a pod on a stale view of who owns it.
    async fn claim_pods(&self, job: &Job, owned: &[Arc<Pod>]) -> Result<bool, Error> {
        let uid = job.uid().unwrap_or_default();
        if !self.claims_seen(&uid) {
            return Ok(true);
        }
        let Some(selector) = claim::job_selector(job).filter(|_| claim::claims_pods(job)) else { return Ok(false) };
        let ns = job.namespace().unwrap_or_default();
        let orphans = claim::orphans_in(self.pods.of(&ns), &ns);
        let (mut adopt, mut release) = (vec![], vec![]);
        for p in owned.iter().chain(orphans.iter()) {
            match claim::claim(job, &selector, p) {
                Claim::Adopt => adopt.push(p),
                Claim::Release => release.push(p),
                Claim::Keep | Claim::Ignore => {}
            }
        }
        if adopt.is_empty() && release.is_empty() {
            return Ok(false);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        if let Some(first) = adopt.first() {
            // Upstream's canAdoptFunc: one uncached read of the Job before the first adoption.
            let jobs: Api<Job> = Api::namespaced(self.client.clone(), &ns);
            let reason = match jobs.get(&job.name_any()).await {
                Ok(fresh) => claim::can_adopt(job, &fresh).err(),
                Err(e) => Some(format!("can't recheck DeletionTimestamp: {e}")),
            };
            if let Some(reason) = reason {
                let pod = format!("{ns}/{} ({})", first.name_any(), first.uid().unwrap_or_default());
                return Err(Error::Adopt { pod, reason });
            }
        }
        let patches = adopt
            .iter()
            .map(|p| (p, claim::adopt_patch(job, p), false))
            .chain(release.iter().map(|p| (p, claim::release_patch(&uid, p), true)));
        for (p, patch, releasing) in patches {
            match api.patch(&p.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(written) => {
                    let mut all = Self::lock(&self.claims);
                    all.entry(uid.clone()).or_default().insert(p.uid().unwrap_or_default(), rv_of(&written.metadata));
                }
                Err(kube::Error::Api(s)) if s.code == 404 || (releasing && s.code == 422) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Whether the cache shows every adoption and release of the Job (each pod at the version
    /// the write returned, or gone).
    fn claims_seen(&self, job_uid: &str) -> bool {
        let mut all = Self::lock(&self.claims);
        let Some(pending) = all.get_mut(job_uid) else { return true };
        pending.retain(|pod_uid, rv| self.pods.get(pod_uid).is_some_and(|p| rv_of(&p.metadata) < *rv));
        if pending.is_empty() {
            all.remove(job_uid);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::indexes::{COMPLETION_INDEX, INDEX_FAILURE_COUNT};
    use super::*;

    #[tokio::test]
    async fn what_the_controller_keeps_per_job_is_dropped_once_the_job_is_gone() {
        let client = jobset_apiserver::ApiServer::in_memory().client();
        let reporter = Reporter { controller: "job-controller".into(), instance: None };
        let ctx = Ctx {
            client: client.clone(),
            pods: PodIndex::new(claim::index_key),
            recorder: Recorder::new(client, reporter),
            config: JobControllerConfig::default(),
            backoff: Mutex::default(),
            expectations: Mutex::default(),
            reasons: Mutex::default(),
            claims: Mutex::default(),
        };
        for uid in ["gone", "live"] {
            drop(ctx.expect(uid));
            Ctx::lock(&ctx.backoff).insert(uid.into(), BackoffRecord::default());
            Ctx::lock(&ctx.reasons).insert(uid.into(), vec![]);
            Ctx::lock(&ctx.claims).insert(uid.into(), HashMap::new());
        }
        ctx.forget_gone(&|uid| uid == "live");
        let keys = |k: Vec<&String>| k.into_iter().cloned().collect::<Vec<_>>();
        let kept = [
            keys(Ctx::lock(&ctx.backoff).keys().collect()),
            keys(Ctx::lock(&ctx.expectations).keys().collect()),
            keys(Ctx::lock(&ctx.reasons).keys().collect()),
            keys(Ctx::lock(&ctx.claims).keys().collect()),
        ];
        assert_eq!(kept, [["live"], ["live"], ["live"], ["live"]].map(|k| k.map(String::from).to_vec()));
    }

    #[test]
    fn a_job_created_deleted_or_respecced_syncs_at_once_and_a_status_update_is_batched() {
        let job = |generation: i64, rv: &str| -> Job {
            serde_json::from_value(
                json!({"metadata": {"name": "j", "namespace": "ns", "generation": generation, "resourceVersion": rv}}),
            )
            .unwrap()
        };
        let r = ObjectRef::<Job>::new("j").within("ns");
        let now = Some(Trigger::Now(r.clone()));
        let batched = Some(Trigger::Batched(r.clone()));
        // (case, event, trigger), in order on one Job
        type Case = (&'static str, watcher::Event<Job>, Option<Trigger<ObjectRef<Job>>>);
        let cases: [Case; 7] = [
            ("listed at the start", watcher::Event::InitApply(job(1, "1")), now.clone()),
            ("the end of the list", watcher::Event::InitDone, None),
            ("its status written", watcher::Event::Apply(job(1, "2")), batched.clone()),
            ("its spec changed", watcher::Event::Apply(job(2, "3")), now.clone()),
            ("listed again after a relist, unchanged", watcher::Event::InitApply(job(2, "3")), batched),
            ("deleted", watcher::Event::Delete(job(2, "4")), now.clone()),
            ("created again", watcher::Event::Apply(job(1, "5")), now),
        ];
        let mut generations = HashMap::new();
        for (case, ev, want) in cases {
            assert_eq!(job_trigger(&mut generations, Ok(ev)), want, "{case}");
        }
    }

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
