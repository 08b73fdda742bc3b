//! The JobSet controller (`jobset.x-k8s.io/v1alpha2`), as upstream kubernetes-sigs/jobset plus
//! KEP-262's future-work failure-policy actions: a kube-runtime controller around the pure
//! [`sync::sync`]. One status write per reconcile (a replace carrying the JobSet's
//! resourceVersion, so a stale cache can never count a restart twice); events and metrics only
//! after it succeeded.

pub mod children;
pub mod conditions;
pub mod construct;
pub mod deadline;
pub mod execution_attempts;
pub mod failure_policy;
pub mod gang;
pub mod in_place_restart;
pub mod metrics;
pub mod restart_history;
pub mod startup_policy;
pub mod success_policy;
pub mod sync;
pub mod ttl;
pub mod update;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobset_api::jobset::keys::{self, JOBSET_NAME, JOBSET_UID};
use jobset_api::jobset::{Features, JobSet, RestartStrategy};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use self::in_place_restart::Tally;
use self::metrics::Metrics;
use self::sync::{Plan, SyncInput};
use self::update::Metric;
use crate::pod_index::PodIndex;
use crate::shared_pods::SharedPods;

pub use crate::Error;

#[derive(Debug, Clone)]
pub struct JobSetControllerConfig {
    pub features: Features,
    /// Reconciles of different objects at once (kube-runtime's `Config::concurrency`); 0, the
    /// default, is unbounded. With a bound (8), kube-runtime 5.0's controller loop lost reconcile
    /// requests under load: in `jobset bench scale`'s soak, Jobs were never synced again and their
    /// JobSets never finished (15 of 639 cycles stuck at 8, 0 of 1,278 at 0; docs/benchmarks.md).
    pub concurrency: u16,
    /// How soon to retry after an error.
    pub error_backoff: Duration,
    /// How soon to look again when the JobSet cache has not caught up with our own status write.
    pub cache_wait: Duration,
    /// Parallel child creations and deletions (upstream: 50).
    pub parallelism: usize,
    /// The restarts a JobSet's `status.restartHistory` keeps, the newest (0: none).
    pub restart_history_limit: usize,
}

impl Default for JobSetControllerConfig {
    fn default() -> Self {
        JobSetControllerConfig {
            features: Features::default(),
            concurrency: 0,
            error_backoff: Duration::from_millis(500),
            cache_wait: Duration::from_millis(20),
            parallelism: 50,
            restart_history_limit: restart_history::DEFAULT_LIMIT,
        }
    }
}

pub struct Ctx {
    client: Client,
    jobs: Store<Job>,
    services: Store<Service>,
    /// Claims labelled with a JobSet name (those the controller creates).
    claims: Store<PersistentVolumeClaim>,
    pods: PodIndex<Tally>,
    recorder: Recorder,
    config: JobSetControllerConfig,
    pub metrics: Arc<Metrics>,
    written: Arc<Mutex<Written>>,
}

/// What this controller last did, per JobSet uid.
#[derive(Default)]
struct Written {
    /// The resourceVersion of our last status write: a cache older than it is not acted on.
    status: HashMap<String, u64>,
    /// The PodGroups in use when a gang JobSet's stale ones were last removed: while the same
    /// ones are in use, there is nothing new to remove (no list on every reconcile).
    pod_groups: HashMap<String, BTreeSet<String>>,
}

impl Written {
    /// Forgets JobSets that are gone, as the JobSet watch tells: a deleted one (most are deleted
    /// at once, without a reconcile that could drop its entries), and on a relist (`InitDone`,
    /// the store then holding the list) any that is not `live`. A churn of JobSets leaves
    /// nothing behind.
    fn follow(&mut self, ev: &watcher::Event<JobSet>, live: impl Fn() -> HashSet<String>) {
        match ev {
            watcher::Event::Delete(js) => {
                let uid = js.metadata.uid.as_deref().unwrap_or_default();
                self.status.remove(uid);
                self.pod_groups.remove(uid);
            }
            watcher::Event::InitDone => {
                let live = live();
                self.status.retain(|uid, _| live.contains(uid));
                self.pod_groups.retain(|uid, _| live.contains(uid));
            }
            _ => {}
        }
    }
}

fn rv(js: &JobSet) -> u64 {
    js.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0)
}

fn owned_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid && o.kind == "JobSet")
}

impl Ctx {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Pods are filed by their label `jobset.sigs.k8s.io/jobset-uid`, so pods of a deleted JobSet of
/// the same name are not taken for the new one's.
fn jobset_uid(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref()?.get(JOBSET_UID).map(String::as_str)
}

pub async fn reconcile(js: Arc<JobSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&js, &ctx).await;
    ctx.metrics.observe_reconcile(started.elapsed(), result.is_err());
    result
}

async fn reconcile_inner(js: &JobSet, ctx: &Ctx) -> Result<Action, Error> {
    if js.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = js.metadata.uid.clone().unwrap_or_default();
    if Ctx::lock(&ctx.written).status.get(&uid).is_some_and(|&w| rv(js) < w) {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    let ns = js.namespace().to_string();
    let jobs: Vec<Arc<Job>> = ctx.jobs.state().into_iter().filter(|j| owned_by(&j.metadata, &uid)).collect();
    // Only BlockingRecreate reads pods, and InPlaceRestart their tally: a JobSet of thousands of
    // pods does not copy them on every reconcile (the reconcile that opens a restart record reads
    // those its trigger needs, in `execute`).
    let (pods, tally) = match js.restart_strategy() {
        RestartStrategy::Recreate => (vec![], Tally::default()),
        RestartStrategy::BlockingRecreate => (ctx.pods.of(&uid), Tally::default()),
        RestartStrategy::InPlaceRestart => (vec![], ctx.pods.summary(&uid)),
    };
    let plan = sync::sync(&SyncInput {
        js,
        jobs: jobs.iter().map(|j| j.as_ref()).collect(),
        pods: pods.iter().map(|p| p.as_ref()).collect(),
        in_place: &tally,
        now: now_micros(),
        features: &ctx.config.features,
        history_limit: ctx.config.restart_history_limit,
    })
    .map_err(Error::Reconcile)?;
    if let Some(in_use) = gang::in_use(js, jobs.iter().map(|j| j.as_ref())) {
        remove_stale_pod_groups(ctx, js, &ns, &uid, in_use).await?;
    }
    execute(js, &ns, &uid, plan, ctx).await
}

/// Deletes the PodGroups of a gang JobSet's earlier attempts (see [`gang`]): listed once per
/// change of the groups in use, so a controller restarted between a restart and the deletion
/// still deletes them.
async fn remove_stale_pod_groups(
    ctx: &Ctx,
    js: &JobSet,
    ns: &str,
    uid: &str,
    in_use: BTreeSet<String>,
) -> Result<(), Error> {
    use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
    if Ctx::lock(&ctx.written).pod_groups.get(uid) == Some(&in_use) {
        return Ok(());
    }
    let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!("{JOBSET_NAME}={}", js.name()));
    let groups = api.list(&lp).await?.items;
    let owned = groups.iter().filter(|g| owned_by(&g.metadata, uid)).filter_map(|g| g.metadata.name.as_deref());
    for name in gang::stale(&in_use, owned) {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ctx::lock(&ctx.written).pod_groups.insert(uid.to_string(), in_use);
    Ok(())
}

/// The clock in whole microseconds: restart records keep `MicroTime`s, so a record's `duration`
/// is exactly the difference of the times it shows.
fn now_micros() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    let micros = jiff::TimestampRound::new().smallest(jiff::Unit::Microsecond).mode(jiff::RoundMode::Trunc);
    now.round(micros).unwrap_or(now)
}

async fn execute(js: &JobSet, ns: &str, uid: &str, plan: Plan, ctx: &Ctx) -> Result<Action, Error> {
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let fg = DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..Default::default() };
    let deletions = futures::stream::iter(plan.delete_jobs.clone().into_iter().map(|name| {
        let (api, dp) = (job_api.clone(), fg.clone());
        async move {
            match api.delete(&name, &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(ctx.config.parallelism)
    .collect::<Vec<_>>()
    .await;
    deletions.into_iter().collect::<Result<Vec<()>, _>>()?;

    // The cached JobSet may not show a deletion yet: children created for a JobSet being deleted
    // would hold up its foreground deletion, so creations first check the live object.
    let service = plan.service.as_ref().filter(|svc| {
        let name = svc["metadata"]["name"].as_str().unwrap_or_default();
        ctx.services.get(&ObjectRef::new(name).within(ns)).is_none()
    });
    let claims: Vec<&Value> = plan
        .claims
        .iter()
        .filter(|c| {
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            ctx.claims.get(&ObjectRef::new(name).within(ns)).is_none()
        })
        .collect();
    let creates = service.is_some() || !claims.is_empty() || !plan.create_jobs.is_empty();
    if creates && !still_live(ctx, js, ns, uid).await? {
        return Ok(Action::await_change());
    }
    if let Some(svc) = service {
        create::<Service>(ctx, js, ns, svc, keys::REASON_HEADLESS_SERVICE_CREATION_FAILED).await?;
    }
    for claim in claims {
        create::<PersistentVolumeClaim>(ctx, js, ns, claim, keys::REASON_PVC_CREATION_FAILED).await?;
    }

    let pp = PatchParams::default();
    for p in &plan.patch_jobs {
        if p.clear_start_time {
            let clear = json!({"status": {"startTime": null}});
            match job_api.patch_status(&p.name, &pp, &Patch::Merge(&clear)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        match job_api.patch(&p.name, &pp, &Patch::Merge(&p.patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                // KEP-1150: say why, rather than only retrying (a server without KEP-5440).
                let template = p.patch.pointer("/spec/template/spec");
                if ["containers", "initContainers"].iter().any(|k| template.and_then(|t| t.get(*k)).is_some()) {
                    let message = format!(
                        "Failed to propagate mutated resources to child Job: {}. Ensure MutablePodResourcesForSuspendedJobs is enabled on the API server.",
                        api_error_message(&e)
                    );
                    publish(ctx, js, true, keys::REASON_FAILED_RESOURCE_PROPAGATION, &message).await;
                }
                return Err(e.into());
            }
        }
    }

    // Extension (gang scheduling, `jobset_api::jobset::gang`): the Workload and the PodGroups
    // the new Jobs' pods join exist before the Jobs.
    let replicated_jobs =
        plan.create_jobs.iter().filter_map(|j| j["metadata"]["labels"][keys::REPLICATED_JOB_NAME].as_str());
    if let Some((workload, groups)) = jobset_api::jobset::gang::objects_for(js, replicated_jobs)
        && !plan.create_jobs.is_empty()
    {
        use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
        create::<Workload>(ctx, js, ns, &workload, "WorkloadCreationFailed").await?;
        for g in &groups {
            create::<PodGroup>(ctx, js, ns, g, "PodGroupCreationFailed").await?;
        }
    }
    if !plan.create_jobs.is_empty() {
        // Created from JSON, so template fields unknown to k8s-openapi reach the Job.
        let raw: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ApiResource::erase::<Job>(&()));
        let results = futures::stream::iter(plan.create_jobs.clone().into_iter().map(|j| {
            let api = raw.clone();
            async move {
                let name = j["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let obj: DynamicObject = serde_json::from_value(j).map_err(|e| (name.clone(), e.to_string()))?;
                match api.create(&PostParams::default(), &obj).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err((name, api_error_message(&e))),
                }
            }
        }))
        .buffer_unordered(ctx.config.parallelism)
        .collect::<Vec<_>>()
        .await;
        let errors: Vec<String> = results
            .into_iter()
            .filter_map(Result::err)
            .map(|(name, e)| format!("job {name:?} creation failed with error: {e}"))
            .collect();
        if !errors.is_empty() {
            let message = errors.join("\n");
            publish(ctx, js, true, keys::REASON_JOB_CREATION_FAILED, &message).await;
            return Err(Error::Reconcile(message));
        }
    }

    let mut update = plan.update;
    if !plan.trigger_pods.is_empty() {
        // The one reconcile that reads the failed Job's pods (or, in place, the pods of the
        // attempts concerned), to name the failed pod and container in each record just opened.
        let pods = ctx.pods.of(uid);
        restart_history::complete_triggers(&mut update, &plan.trigger_pods, pods.iter().map(|p| p.as_ref()));
    }
    if update.changed {
        let old = js.status.as_ref().map(|s| s.restart_history.as_slice()).unwrap_or_default();
        let phases = restart_history::observations(old, &update.status.restart_history);
        update.metrics.extend(phases.into_iter().map(Metric::RestartPhase));
        let api: Api<JobSet> = Api::namespaced(ctx.client.clone(), ns);
        let mut next = js.clone();
        next.status = Some(update.status.clone());
        match api.replace_status(js.name(), &PostParams::default(), &next).await {
            Ok(written) => {
                Ctx::lock(&ctx.written).status.insert(uid.to_string(), rv(&written));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::requeue(ctx.config.cache_wait)),
            Err(e) => return Err(e.into()),
        }
        // Metrics first: counting is instant, while each event is a request a crash could cut.
        for m in &update.metrics {
            match m {
                Metric::Completed => ctx.metrics.completed(ns, js.name()),
                Metric::Failed => ctx.metrics.failed(ns, js.name()),
                Metric::Restart { action, reason } => ctx.metrics.restart(ns, js.name(), action, reason),
                Metric::RestartPhase(o) => ctx.metrics.restart_phase(o),
                Metric::DeadlineExceeded => ctx.metrics.active_deadline_exceeded(ns, js.name()),
            }
        }
        for e in &update.events {
            publish(ctx, js, e.warning, &e.reason, &e.message).await;
        }
    }

    if plan.delete_jobset {
        let api: Api<JobSet> = Api::namespaced(ctx.client.clone(), ns);
        match api.delete(js.name(), &fg).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let mut w = Ctx::lock(&ctx.written);
        w.status.remove(uid);
        w.pod_groups.remove(uid);
        return Ok(Action::await_change());
    }
    Ok(plan.requeue_after.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// Whether the JobSet still exists, with this uid, and is not being deleted.
async fn still_live(ctx: &Ctx, js: &JobSet, ns: &str, uid: &str) -> Result<bool, Error> {
    let api: Api<JobSet> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api
        .get_opt(js.name())
        .await?
        .is_some_and(|live| live.metadata.uid.as_deref() == Some(uid) && live.metadata.deletion_timestamp.is_none()))
}

/// Creates a child object; one that exists already (owned or not) is left alone, as upstream.
/// A failure is reported as a Warning event.
async fn create<K>(ctx: &Ctx, js: &JobSet, ns: &str, obj: &Value, reason: &str) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let k: K = serde_json::from_value(obj.clone()).map_err(|e| Error::Reconcile(e.to_string()))?;
    match api.create(&PostParams::default(), &k).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => {
            publish(ctx, js, true, reason, &api_error_message(&e)).await;
            Err(e.into())
        }
    }
}

/// An API error as Go's `err.Error()` reads in upstream's events: a rejection is the Status
/// `message` the API server sent (as kubectl shows it), any other error its own text.
fn api_error_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

async fn publish(ctx: &Ctx, js: &JobSet, warning: bool, reason: &str, message: &str) {
    crate::publish_event(&ctx.recorder, js, warning, reason, message).await;
}

pub fn error_policy(js: Arc<JobSet>, err: &Error, ctx: Arc<Ctx>) -> Action {
    tracing::debug!(jobset = %js.name(), error = %err, "jobset reconcile failed; retrying");
    Action::requeue(ctx.config.error_backoff)
}

/// The pods a JobSet controller follows: those with the JobSet name label.
pub fn jobset_pod(p: &Pod) -> bool {
    p.labels().contains_key(JOBSET_NAME)
}

/// The JobSet a pod event reconciles: the pod's, unless the cache shows that JobSet (the same
/// uid) with `Recreate`, whose reconcile reads no pods (its `failurePolicy` is immutable): a
/// `Recreate` restart of thousands of pods would otherwise reconcile for each of their events.
fn pod_trigger(
    p: &Pod,
    cached: impl Fn(&ObjectRef<JobSet>) -> Option<(Option<String>, RestartStrategy)>,
) -> Option<ObjectRef<JobSet>> {
    let r = ObjectRef::<JobSet>::new(p.labels().get(JOBSET_NAME)?).within(&p.namespace()?);
    match cached(&r) {
        Some((uid, RestartStrategy::Recreate)) if uid.as_deref() == jobset_uid(p) => None,
        _ => Some(r),
    }
}

/// Runs the JobSet controller until its stream of reconciles ends; its pods come from `pods`
/// (alone, e.g. `SharedPods::start(client, watcher::Config::default().labels(JOBSET_NAME))`, or
/// shared with the other controllers of the process).
pub async fn run(
    client: Client,
    config: JobSetControllerConfig,
    metrics: Arc<Metrics>,
    pods: SharedPods,
    lifecycle: crate::Lifecycle,
) {
    let jobsets: Api<JobSet> = Api::all(client.clone());
    let jobs: Api<Job> = Api::all(client.clone());
    let services: Api<Service> = Api::all(client.clone());
    let (job_reader, job_writer) = reflector::store();
    let job_events = reflector(job_writer, watcher(jobs, watcher::Config::default().labels(JOBSET_NAME)))
        .touched_objects()
        .default_backoff();
    let (svc_reader, svc_writer) = reflector::store();
    let svc_events =
        reflector(svc_writer, watcher(services, watcher::Config::default())).touched_objects().default_backoff();
    let (claim_reader, claim_writer) = reflector::store();
    let claim_watch =
        watcher(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default().labels(JOBSET_NAME));
    // Claims are only looked up, never reconciled on.
    let claim_cache = reflector(claim_writer, claim_watch).default_backoff().for_each(|_| async {});
    // Pods matter for BlockingRecreate and InPlaceRestart: indexed by JobSet, mapped to it.
    let pod_index = PodIndex::new(jobset_uid);
    let pod_events = pod_index.follow(pods.subscribe(jobset_pod));
    // `Controller::new`'s own reflector, with its first list tracked for `/readyz`: the
    // controller waits on its store itself (see `listed`).
    let (cached, jobset_writer) = reflector::store();
    let (jobset_events, jobsets_listed) =
        crate::listed::track(reflector(jobset_writer, watcher(jobsets, watcher::Config::default())));
    let written: Arc<Mutex<Written>> = Arc::default();
    let jobset_events = jobset_events.inspect({
        let (written, cached) = (written.clone(), cached.clone());
        move |ev| {
            if let Ok(ev) = ev {
                let live = || cached.state().iter().filter_map(|js| js.metadata.uid.clone()).collect();
                Ctx::lock(&written).follow(ev, live);
            }
        }
    });
    let controller = Controller::for_stream(jobset_events.applied_objects(), cached.clone());
    let synced = {
        let (jobs, svcs, claims, pods) = (job_reader.clone(), svc_reader.clone(), claim_reader.clone(), pods.clone());
        async move {
            let _ = futures::join!(
                jobsets_listed.wait(),
                jobs.wait_until_ready(),
                svcs.wait_until_ready(),
                claims.wait_until_ready(),
                pods.wait_until_ready()
            );
        }
    };
    let controller = controller
        .owns_stream(job_events)
        .owns_stream(svc_events)
        .watches_shared_stream(pod_events, move |p: Arc<Pod>| {
            pod_trigger(&p, |r| cached.get(r).map(|js| (js.metadata.uid.clone(), js.restart_strategy())))
        })
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(crate::Lifecycle::shutdown_trigger(lifecycle.shutdown));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        jobs: job_reader,
        services: svc_reader,
        claims: claim_reader,
        pods: pod_index,
        recorder: Recorder::new(client.clone(), Reporter { controller: "jobset-controller".into(), instance: None }),
        config,
        metrics,
        written,
    });
    let reconciles = controller.run(reconcile, error_policy, ctx).for_each(|r| async move {
        if let Err(e) = r {
            tracing::debug!(error = %e, "jobset reconcile");
        }
    });
    // The claim cache lives exactly as long as the controller.
    tokio::select! {
        _ = reconciles => {}
        _ = claim_cache => {}
        _ = crate::Lifecycle::report_ready(lifecycle.ready, synced) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::children::fixtures::pod;
    use super::*;

    #[test]
    fn an_api_error_reads_as_the_status_message_and_any_other_error_as_its_text() {
        let rejected = kube::Error::Api(
            kube::core::Status::failure(
                "Job.batch \"js-w-0\" is invalid: spec.template.spec.containers[0].image: Required value",
                "Invalid",
            )
            .with_code(422)
            .boxed(),
        );
        let other = kube::Error::LinesCodecMaxLineLengthExceeded;
        let cases = [
            (&rejected, "Job.batch \"js-w-0\" is invalid: spec.template.spec.containers[0].image: Required value"),
            (&other, "Error finding newline character"),
        ];
        for (err, want) in cases {
            assert_eq!(api_error_message(err), want, "{err:?}");
        }
    }

    #[test]
    fn the_reconcile_clock_keeps_whole_microseconds_as_micro_times_do() {
        // Several readings: a clock that happened to read a whole microsecond proves nothing.
        for _ in 0..5 {
            assert_eq!(now_micros().subsec_nanosecond() % 1_000, 0);
        }
    }

    #[test]
    fn a_pod_event_reconciles_its_jobset_unless_that_is_a_cached_recreate_one() {
        use RestartStrategy::*;
        let p = pod("js", "js-w-0-0").label(JOBSET_UID, "u1").obj();
        type Cached = Option<(Option<String>, RestartStrategy)>;
        let cases: [(&str, Cached, bool); 6] = [
            ("not cached yet", None, true),
            ("Recreate", Some((Some("u1".into()), Recreate)), false),
            ("BlockingRecreate", Some((Some("u1".into()), BlockingRecreate)), true),
            ("InPlaceRestart", Some((Some("u1".into()), InPlaceRestart)), true),
            ("a newer JobSet of the same name", Some((Some("u2".into()), Recreate)), true),
            ("a cached JobSet without a uid", Some((None, Recreate)), true),
        ];
        for (what, cached, reconciles) in cases {
            let got = pod_trigger(&p, |r| {
                assert_eq!((r.name.as_str(), r.namespace.as_deref()), ("js", Some("default")));
                cached.clone()
            });
            assert_eq!(got.is_some(), reconciles, "{what}");
        }
        let unlabelled = Pod::default();
        assert!(pod_trigger(&unlabelled, |_| None).is_none(), "a pod of no JobSet");
    }

    #[test]
    fn what_was_written_is_forgotten_for_jobsets_deleted_or_missing_from_a_relist() {
        let js = |uid: &str| {
            let mut js = JobSet::default();
            js.metadata.uid = Some(uid.into());
            js
        };
        let written = |uids: &[&str]| {
            let mut w = Written::default();
            for u in uids {
                w.status.insert(u.to_string(), 7);
                w.pod_groups.insert(u.to_string(), BTreeSet::from(["g".to_string()]));
            }
            w
        };
        let live = || HashSet::from(["a".to_string()]);
        let cases: [(&str, watcher::Event<JobSet>, &[&str]); 4] = [
            ("a deleted JobSet is forgotten", watcher::Event::Delete(js("b")), &["a"]),
            ("a relist keeps only the listed", watcher::Event::InitDone, &["a"]),
            ("an update forgets nothing", watcher::Event::Apply(js("b")), &["a", "b"]),
            ("a relist's start forgets nothing yet", watcher::Event::Init, &["a", "b"]),
        ];
        for (name, ev, want) in cases {
            let mut w = written(&["a", "b"]);
            w.follow(&ev, live);
            let mut kept: Vec<&str> = w.status.keys().map(String::as_str).collect();
            kept.sort();
            assert_eq!(kept, want, "{name}: status");
            assert_eq!(w.pod_groups.len(), want.len(), "{name}: pod groups");
        }
    }
}
