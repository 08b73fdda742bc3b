//! The AppWrapper controller (`workload.codeflare.dev/v1beta2`), as project-codeflare/appwrapper:
//! a kube-runtime controller around the pure [`sync::sync`] state machine. One status write per
//! reconcile (a replace carrying the AppWrapper's resourceVersion, so a stale cache can never
//! count a reset twice); events and the phase metric only after it succeeded.
//!
//! Faster than upstream, which re-checks a running workload every 60 s and ignores node events:
//! every event of a labelled pod or wrapped Job/JobSet, and every node whose Autopilot health
//! changes, reconciles the AppWrappers concerned at once (grace periods still apply).

pub mod autopilot;
pub mod resources;
pub mod sync;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jobset_api::appwrapper::keys::{APPWRAPPER_LABEL, CONTROLLER_NAME, FINALIZER};
use jobset_api::appwrapper::{AppWrapper, AppWrapperConfig};
use jobset_api::jobset::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::Value;

use self::autopilot::NodeHealth;
use self::resources::CreateError;
use self::sync::{ComponentState, Created, Deletion, Observed, PodSummary, SyncInput, Timing};

pub use crate::Error;

#[derive(Debug, Clone)]
pub struct AppWrapperControllerConfig {
    pub appwrapper: AppWrapperConfig,
    pub timing: Timing,
    /// Reconciles of different objects at once (kube-runtime's `Config::concurrency`); 0, the
    /// default, is unbounded. With a bound (8), kube-runtime 5.0's controller loop lost reconcile
    /// requests under load: in `jobset bench scale`'s soak, Jobs were never synced again and their
    /// JobSets never finished (15 of 639 cycles stuck at 8, 0 of 1,278 at 0; docs/benchmarks.md).
    pub concurrency: u16,
    /// How soon to retry after an error.
    pub error_backoff: Duration,
    /// How soon to look again when the AppWrapper cache has not caught up with our own write.
    pub cache_wait: Duration,
}

impl Default for AppWrapperControllerConfig {
    fn default() -> Self {
        AppWrapperControllerConfig {
            appwrapper: AppWrapperConfig::default(),
            timing: Timing::default(),
            concurrency: 0,
            error_backoff: Duration::from_millis(500),
            cache_wait: Duration::from_millis(20),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    namespace: String,
    phase: String,
}

/// Upstream's `appwrapper_phase_total{namespace,phase}`: +1 on every phase transition; reconciles
/// go to controller-runtime's series (`controller="appwrapper"`).
#[derive(Default)]
pub struct Metrics {
    phases: Family<PhaseLabels, Counter>,
    reconcile: crate::metrics::ReconcileMetrics,
}

impl Metrics {
    /// Reconciles counted in `reconcile`, shared with the process's other controllers.
    pub fn with_reconcile(reconcile: crate::metrics::ReconcileMetrics) -> Metrics {
        Metrics { phases: Family::default(), reconcile }
    }

    /// Registers the AppWrapper series; the reconcile series are registered by whoever shares them.
    pub fn register(&self, registry: &mut Registry) {
        registry.register("appwrapper_phase", "Number of AppWrapper phase transitions", self.phases.clone());
    }
}

pub struct Ctx {
    client: Client,
    pods: Store<Pod>,
    health: Arc<Mutex<NodeHealth>>,
    recorder: Recorder,
    config: AppWrapperControllerConfig,
    metrics: Arc<Metrics>,
    /// resourceVersion of our last write, per AppWrapper uid.
    written: Mutex<HashMap<String, u64>>,
    /// Resolved API resources by (group, version, kind).
    resources: Mutex<HashMap<GroupVersionKind, ApiResource>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn rv(aw: &AppWrapper) -> u64 {
    aw.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0)
}

pub async fn reconcile(aw: Arc<AppWrapper>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_inner(aw, &ctx).await;
    ctx.metrics.reconcile.observe("appwrapper", started.elapsed(), result.is_err());
    result
}

async fn reconcile_inner(aw: Arc<AppWrapper>, ctx: &Ctx) -> Result<Action, Error> {
    if aw.spec.managed_by.as_deref().is_some_and(|m| m != CONTROLLER_NAME) {
        return Ok(Action::await_change());
    }
    let uid = aw.metadata.uid.clone().unwrap_or_default();
    if lock(&ctx.written).get(&uid).is_some_and(|&w| rv(&aw) < w) {
        return Ok(Action::requeue(ctx.config.cache_wait));
    }
    let ns = aw.namespace().unwrap_or_default();
    let ft = ctx.config.appwrapper.fault_tolerance.for_appwrapper(&aw.metadata);
    let observed = observe(&aw, &ns, &ft, ctx).await?;
    let (aw, created) = if sync::creates(&aw) { create_components(aw, &ns, ctx).await? } else { (aw, vec![]) };
    let plan = sync::sync(&SyncInput {
        aw: &aw,
        ft: &ft,
        observed: &observed,
        created: &created,
        now: jiff::Timestamp::now(),
        timing: &ctx.config.timing,
    })
    .map_err(Error::Reconcile)?;

    for d in &plan.deletions {
        delete(&aw, &ns, d, ctx).await?;
    }
    let api: Api<AppWrapper> = Api::namespaced(ctx.client.clone(), &ns);
    let mut base = (*aw).clone();
    if plan.add_finalizer && !base.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = base.finalizers().to_vec();
        finalizers.push(FINALIZER.into());
        base = api
            .patch(
                &base.name_any(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": base.resource_version()}})),
            )
            .await?;
    }
    let mut written = base.clone();
    if Some(&plan.status) != aw.status.as_ref() {
        let mut next = base.clone();
        next.status = Some(plan.status.clone());
        match api.replace_status(&next.name_any(), &PostParams::default(), &next).await {
            Ok(w) => {
                lock(&ctx.written).insert(uid.clone(), rv(&w));
                written = w;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::requeue(ctx.config.cache_wait)),
            Err(e) => return Err(e.into()),
        }
        for (reason, message) in &plan.events {
            // Upstream's AppWrapper events are all Normal.
            crate::publish_event(&ctx.recorder, aw.as_ref(), false, reason, message).await;
        }
        for p in &plan.transitions {
            tracing::debug!(appwrapper = %aw.name_any(), namespace = %ns, phase = %p, "phase transition");
            ctx.metrics.phases.get_or_create(&PhaseLabels { namespace: ns.clone(), phase: p.to_string() }).inc();
        }
    }
    if plan.remove_finalizer {
        let finalizers: Vec<String> = written.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
        let patch =
            serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": written.resource_version()}});
        match api.patch(&written.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::requeue(ctx.config.cache_wait)),
            Err(e) => return Err(e.into()),
        }
        lock(&ctx.written).remove(&uid);
        return Ok(Action::await_change());
    }
    Ok(plan.requeue_after.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// The pods labelled with the AppWrapper's name in its namespace.
fn pods_of(ctx: &Ctx, aw: &AppWrapper, ns: &str) -> Vec<Arc<Pod>> {
    let name = aw.name_any();
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && p.labels().get(APPWRAPPER_LABEL) == Some(&name))
        .collect()
}

async fn observe(
    aw: &AppWrapper,
    ns: &str,
    ft: &jobset_api::appwrapper::FaultTolerance,
    ctx: &Ctx,
) -> Result<Observed, Error> {
    let mut components = Vec::with_capacity(aw.spec.components.len());
    for i in 0..aw.spec.components.len() {
        components.push(observe_component(aw, ns, i, ctx).await?);
    }
    let pods = pods_of(ctx, aw, ns);
    let no_execute_nodes = {
        let health = lock(&ctx.health);
        autopilot::pods_on_no_execute_nodes(&health, pods.iter().map(|p| p.as_ref()))
    };
    Ok(Observed {
        components,
        pods: PodSummary::of(pods.iter().map(|p| p.as_ref()), ft),
        pod_names: pods.iter().map(|p| p.name_any()).collect(),
        no_execute_nodes,
    })
}

/// The component's object name: the one recorded at creation, else the template's.
fn component_name(aw: &AppWrapper, i: usize) -> Option<String> {
    let recorded = aw.status.as_ref().and_then(|s| s.component_status.get(i)).map(|c| c.name.clone());
    recorded
        .filter(|n| !n.is_empty())
        .or_else(|| aw.spec.components[i].template.pointer("/metadata/name")?.as_str().map(str::to_string))
}

fn gvk_of(template: &Value) -> Option<GroupVersionKind> {
    let api_version = template.get("apiVersion")?.as_str()?;
    let kind = template.get("kind")?.as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
}

async fn api_resource(ctx: &Ctx, gvk: &GroupVersionKind) -> Result<ApiResource, kube::Error> {
    if let Some(r) = lock(&ctx.resources).get(gvk) {
        return Ok(r.clone());
    }
    let (resource, _caps) = kube::discovery::pinned_kind(&ctx.client, gvk).await?;
    lock(&ctx.resources).insert(gvk.clone(), resource.clone());
    Ok(resource)
}

fn controlled_by(obj: &DynamicObject, aw: &AppWrapper) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "AppWrapper" && Some(&o.name) == aw.metadata.name.as_ref())
}

async fn observe_component(aw: &AppWrapper, ns: &str, i: usize, ctx: &Ctx) -> Result<ComponentState, Error> {
    let (Some(name), Some(gvk)) = (component_name(aw, i), gvk_of(&aw.spec.components[i].template)) else {
        return Ok(ComponentState::Absent);
    };
    let resource = match api_resource(ctx, &gvk).await {
        Ok(r) => r,
        // A kind the cluster does not serve has nothing to find.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(ComponentState::Absent),
        Err(kube::Error::Discovery(_)) => return Ok(ComponentState::Absent),
        Err(e) => return Err(e.into()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
    let Some(obj) = api.get_opt(&name).await? else {
        return Ok(ComponentState::Absent);
    };
    if !controlled_by(&obj, aw) {
        return Ok(ComponentState::Absent);
    }
    let failed = matches!((gvk.group.as_str(), gvk.kind.as_str()), ("batch", "Job") | ("kubeflow.org", "PyTorchJob"))
        && obj.data.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| c["type"].as_str() == Some("Failed") && c["status"].as_str() == Some("True"))
        });
    Ok(ComponentState::Present { name, deleting: obj.metadata.deletion_timestamp.is_some(), failed })
}

/// Creates the components not yet deployed, in order, stopping at the first error (as upstream).
/// Before the first attempt at a component, its identity is recorded in a status write
/// ([`sync::initiate`]); the AppWrapper as last written is returned with the outcomes.
async fn create_components(
    mut aw: Arc<AppWrapper>,
    ns: &str,
    ctx: &Ctx,
) -> Result<(Arc<AppWrapper>, Vec<Created>), Error> {
    let mut out = vec![];
    for index in sync::to_create(&aw) {
        let built = resources::build_component(&aw, index, &ctx.config.appwrapper).and_then(|obj| {
            gvk_of(&obj).map(|gvk| (obj, gvk)).ok_or_else(|| CreateError::fatal("failed to decode as JSON"))
        });
        let (obj, gvk) = match built {
            Ok(b) => b,
            Err(e) => {
                out.push(Created::Err { index, message: e.message, fatal: e.fatal });
                break;
            }
        };
        if let Some(status) = sync::initiate(&aw, index, &obj, jiff::Timestamp::now()) {
            let api: Api<AppWrapper> = Api::namespaced(ctx.client.clone(), ns);
            let mut next = (*aw).clone();
            next.status = Some(status);
            let written = api.replace_status(&next.name_any(), &PostParams::default(), &next).await?;
            lock(&ctx.written).insert(written.metadata.uid.clone().unwrap_or_default(), rv(&written));
            aw = Arc::new(written);
        }
        match create_component(&aw, ns, obj, &gvk, ctx).await {
            Ok(name) => out.push(Created::Ok {
                index,
                name,
                kind: gvk.kind.clone(),
                api_version: ApiResource::from_gvk(&gvk).api_version,
            }),
            Err(e) => {
                out.push(Created::Err { index, message: e.message, fatal: e.fatal });
                break;
            }
        }
    }
    Ok((aw, out))
}

/// The message of an API error (a Status's, as upstream's `err.Error()`), else the error.
fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

/// Creates `obj`, returning its name. Fatal, as upstream's `createComponent`: no such kind
/// (NoMatch), Invalid (422), and an object of that name the AppWrapper does not control; every
/// other error (a 400, a quota's 403, a timeout) is retried within the admission grace period.
async fn create_component(
    aw: &AppWrapper,
    ns: &str,
    obj: Value,
    gvk: &GroupVersionKind,
    ctx: &Ctx,
) -> Result<String, CreateError> {
    let resource = api_resource(ctx, gvk).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 404 => {
            CreateError::fatal(format!("no matches for kind {:?}: {}", gvk.kind, s.message))
        }
        kube::Error::Discovery(d) => CreateError::fatal(format!("no matches for kind {:?}: {d}", gvk.kind)),
        e => CreateError::retryable(message(&e)),
    })?;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
    let dynamic: DynamicObject =
        serde_json::from_value(obj).map_err(|e| CreateError::fatal(format!("failed to decode as JSON: {e}")))?;
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(created) => Ok(created.name_any()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let name = dynamic.name_any();
            match api.get_opt(&name).await {
                Ok(Some(existing)) if controlled_by(&existing, aw) => Ok(name),
                Ok(_) => {
                    Err(CreateError::fatal(format!("resource {name} exists, but is not controlled by appwrapper")))
                }
                Err(e) => Err(CreateError::retryable(message(&e))),
            }
        }
        Err(kube::Error::Api(s)) if s.code == 422 => Err(CreateError::fatal(s.message)),
        Err(e) => Err(CreateError::retryable(message(&e))),
    }
}

async fn delete(aw: &AppWrapper, ns: &str, d: &Deletion, ctx: &Ctx) -> Result<(), Error> {
    let result = match d {
        Deletion::Component { index, name, force } => {
            let Some(gvk) = gvk_of(&aw.spec.components[*index].template) else { return Ok(()) };
            let resource = api_resource(ctx, &gvk).await?;
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                grace_period_seconds: force.then_some(0),
                ..Default::default()
            };
            api.delete(name, &dp).await.map(|_| ())
        }
        Deletion::Pod { name } => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            api.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn error_policy(aw: Arc<AppWrapper>, err: &Error, ctx: Arc<Ctx>) -> Action {
    tracing::debug!(appwrapper = %aw.name_any(), error = %err, "appwrapper reconcile failed; retrying");
    Action::requeue(ctx.config.error_backoff)
}

/// The AppWrapper named by an object's `workload.codeflare.dev/appwrapper` label.
fn labelled<K: kube::Resource>(obj: &K) -> Option<ObjectRef<AppWrapper>> {
    let name = obj.meta().labels.as_ref()?.get(APPWRAPPER_LABEL)?;
    Some(ObjectRef::new(name).within(obj.meta().namespace.as_deref()?))
}

/// Runs the AppWrapper controller until its stream of reconciles ends.
pub async fn run(
    client: Client,
    config: AppWrapperControllerConfig,
    metrics: Arc<Metrics>,
    lifecycle: crate::Lifecycle,
) {
    if let Err(e) = config.appwrapper.fault_tolerance.validate() {
        tracing::error!(error = %e, "invalid AppWrapper configuration; the AppWrapper controller does not run");
        return;
    }
    let appwrappers: Api<AppWrapper> = Api::all(client.clone());
    let labelled_cfg = || watcher::Config::default().labels(APPWRAPPER_LABEL);
    let (pod_reader, pod_writer) = reflector::store();
    let pod_events = reflector(pod_writer, watcher(Api::<Pod>::all(client.clone()), labelled_cfg()))
        .touched_objects()
        .default_backoff();
    let job_events = watcher(Api::<Job>::all(client.clone()), labelled_cfg()).touched_objects().default_backoff();
    let jobset_events = watcher(Api::<JobSet>::all(client.clone()), labelled_cfg()).touched_objects().default_backoff();
    let health = Arc::new(Mutex::new(NodeHealth::default()));
    let autopilot_cfg = config.appwrapper.autopilot.clone();
    let monitor = autopilot_cfg.monitor_nodes;
    let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).default_backoff();
    // A node whose health changed wakes the AppWrappers with pods on it.
    let (node_health, node_pods) = (health.clone(), pod_reader.clone());
    let node_triggers = node_events
        .filter_map(move |ev| {
            let changed: BTreeSet<String> = match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) if monitor => {
                    let name = n.name_any();
                    if lock(&node_health).observe(&n, &autopilot_cfg) {
                        BTreeSet::from([name])
                    } else {
                        BTreeSet::new()
                    }
                }
                Ok(watcher::Event::Delete(n)) if monitor => {
                    let name = n.name_any();
                    if lock(&node_health).forget(&name) { BTreeSet::from([name]) } else { BTreeSet::new() }
                }
                _ => BTreeSet::new(),
            };
            let refs: Vec<ObjectRef<AppWrapper>> = if changed.is_empty() {
                vec![]
            } else {
                node_pods
                    .state()
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| changed.contains(n)))
                    .filter_map(|p| labelled(p.as_ref()))
                    .collect::<std::collections::HashSet<_>>()
                    .into_iter()
                    .collect()
            };
            std::future::ready(Some(futures::stream::iter(refs)))
        })
        .flatten();
    // `Controller::new`'s own reflector, with its first list tracked for `/readyz`: the
    // controller waits on its store itself (see `listed`).
    let (cached, appwrapper_writer) = reflector::store();
    let (appwrapper_events, appwrappers_listed) =
        crate::listed::track(reflector(appwrapper_writer, watcher(appwrappers, watcher::Config::default())));
    let controller = Controller::for_stream(appwrapper_events.applied_objects(), cached);
    let synced = {
        let pods = pod_reader.clone();
        async move {
            let _ = futures::join!(appwrappers_listed.wait(), pods.wait_until_ready());
        }
    };
    let controller = controller
        .watches_stream(pod_events, |p: Pod| labelled(&p))
        .watches_stream(job_events, |j: Job| labelled(&j))
        .watches_stream(jobset_events, |j: JobSet| labelled(&j))
        .reconcile_on(node_triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(crate::Lifecycle::shutdown_trigger(lifecycle.shutdown));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods: pod_reader,
        health,
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "appwrapper-controller".into(), instance: None },
        ),
        config,
        metrics,
        written: Mutex::default(),
        resources: Mutex::default(),
    });
    let reconciles = controller.run(reconcile, error_policy, ctx).for_each(|r| async move {
        if let Err(e) = r {
            tracing::debug!(error = %e, "appwrapper reconcile");
        }
    });
    tokio::select! {
        _ = reconciles => {}
        _ = crate::Lifecycle::report_ready(lifecycle.ready, synced) => {}
    }
}
