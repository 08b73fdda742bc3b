//! Black-box tests of the AppWrapper controller: create an AppWrapper through the API, let
//! simulated pods succeed or fail (pod annotations), and assert phases, conditions (upstream's
//! reasons and messages), `resettingCount` and which wrapped objects and pods were recreated.
//! Durations come from the per-AppWrapper annotations, shortened to milliseconds.
//!
//! Every wait goes through a watch with a timeout; tests that assert on what happened in between
//! record every version of the AppWrapper from before it is created.

use jobset_api::appwrapper::keys::*;
use jobset_api::appwrapper::{AppWrapper, AppWrapperPhase};
use jobset_api::jobset::JobSet;
use jobset_apiserver::ApiServer;
use jobset_local::{LocalCluster, LocalConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use AppWrapperPhase::*;

mod common;
use common::*;

const SIM: &str = "sim.jobset.x-k8s.io/";

async fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::start(ApiServer::in_memory(), LocalConfig::fast(nodes)).await
}

/// An AppWrapper under construction (upstream's sample shapes).
struct AwBuilder(Value);

impl AwBuilder {
    /// Wraps a Job of `pods` pods (parallelism = completions) whose pods carry `sim` annotations.
    fn job(name: &str, pods: i32, sim: Value) -> AwBuilder {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("{name}-job")},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 100,
                "template": {"metadata": {"annotations": sim},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}
        });
        AwBuilder(json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": "default", "annotations": {}},
            "spec": {"components": [{"template": job}]}
        }))
    }

    /// Wraps a JobSet of two replicated jobs, one pod each.
    fn jobset(name: &str, sim: Value) -> AwBuilder {
        let rj = |n: &str| {
            json!({"name": n, "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1,
                "template": {"metadata": {"annotations": sim},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}})
        };
        let js = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": format!("{name}-js")},
            "spec": {"replicatedJobs": [rj("leader"), rj("workers")]}
        });
        AwBuilder(json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": "default", "annotations": {}},
            "spec": {"components": [{"template": js}]}
        }))
    }

    /// A fault-tolerance annotation (`workload.codeflare.dev.appwrapper/...`).
    fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }

    /// No failure grace period and no retry pause: a failed pod resets at once. (The admission
    /// and warmup grace periods keep their defaults: at zero, pods still starting would count
    /// as a failure.)
    fn no_grace(self) -> Self {
        self.annotation(FAILURE_GRACE_PERIOD_DURATION, "0s").annotation(RETRY_PAUSE_PERIOD_DURATION, "0s")
    }

    fn suspend(mut self) -> Self {
        self.0["spec"]["suspend"] = json!(true);
        self
    }

    /// Applies `f` to the wrapped template's pod spec (`spec.template.spec` of the Job).
    fn pod_spec(mut self, f: impl FnOnce(&mut Value)) -> Self {
        f(&mut self.0["spec"]["components"][0]["template"]["spec"]["template"]["spec"]);
        self
    }

    fn build(self) -> AppWrapper {
        serde_json::from_value(self.0).unwrap()
    }
}

fn phase(aw: &AppWrapper) -> Option<AppWrapperPhase> {
    aw.phase()
}

/// The phases the recorded versions went through, repeats dropped.
fn phases(versions: &[AppWrapper]) -> Vec<AppWrapperPhase> {
    let mut p: Vec<_> = versions.iter().filter_map(phase).collect();
    p.dedup();
    p
}

fn resets(aw: &AppWrapper) -> i32 {
    aw.status.as_ref().map_or(0, |s| s.resetting_count)
}

async fn patch_aw(api: &Api<AppWrapper>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// Creates `aw` in a fresh recorder's view and returns the recorder.
async fn start(c: &LocalCluster, aw: AppWrapper) -> (Api<AppWrapper>, History<AppWrapper>) {
    let api: Api<AppWrapper> = Api::namespaced(c.client(), "default");
    let name = aw.metadata.name.clone().unwrap();
    let history = record(api.clone(), by_name(&name)).await;
    api.create(&PostParams::default(), &aw).await.unwrap();
    (api, history)
}

fn labelled(aw: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!("{APPWRAPPER_LABEL}={aw}"))
}

async fn pods_of(c: &LocalCluster, aw: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client(), "default")
        .list(&ListParams::default().labels(&format!("{APPWRAPPER_LABEL}={aw}")))
        .await
        .unwrap()
        .items
}

fn pod_phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn condition(aw: &AppWrapper, t: &str) -> (String, String, String) {
    let c = aw.condition(t).unwrap_or_else(|| panic!("no {t} condition: {aw:#?}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

async fn wait_aw(api: &Api<AppWrapper>, name: &str, what: &str, pred: impl Fn(&AppWrapper) -> bool) -> AppWrapper {
    let found =
        wait_for(api, by_name(name), &format!("appwrapper {name}: {what}"), |v| v.first().is_some_and(&pred)).await;
    found.into_iter().next().unwrap()
}

#[tokio::test]
async fn wrapped_job_runs_to_success_with_labels_everywhere() {
    let c = cluster(2).await;
    let (api, history) = start(&c, AwBuilder::job("ok", 2, json!({format!("{SIM}duration"): "200ms"})).build()).await;

    let done = wait_aw(&api, "ok", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    assert_eq!(phases(&history.versions()), [Suspended, Resuming, Running, Succeeded]);
    assert_eq!(
        condition(&done, QUOTA_RESERVED),
        ("False".into(), "Succeeded".into(), "2 pods succeeded and no running, pending, or failed pods".into())
    );
    assert_eq!(condition(&done, RESOURCES_DEPLOYED).0, "True", "kept until the success TTL");
    assert!(done.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER));
    let cs = &done.status.as_ref().unwrap().component_status[0];
    assert_eq!((cs.name.as_str(), cs.kind.as_str(), cs.api_version.as_str()), ("ok-job", "Job", "batch/v1"));
    assert_eq!(cs.pod_sets[0].replicas, Some(2));

    let job = Api::<Job>::namespaced(c.client(), "default").get("ok-job").await.unwrap();
    assert_eq!(job.metadata.labels.as_ref().unwrap()[APPWRAPPER_LABEL], "ok");
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("AppWrapper", "ok", Some(true)));
    let pods = Api::<Pod>::namespaced(c.client(), "default")
        .list(&kube::api::ListParams::default().labels(&format!("{APPWRAPPER_LABEL}=ok")))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2, "every pod carries the AppWrapper label");
    c.shutdown().await;
}

/// Pods that fail on their first attempt only (attempts count across resets).
fn fail_once() -> Value {
    json!({format!("{SIM}duration"): "100ms", format!("{SIM}exit-code"): "1", format!("{SIM}fail-attempts"): "1"})
}

#[tokio::test]
async fn failed_pod_resets_the_workload_holding_quota_through_the_pause() {
    let c = cluster(2).await;
    // A pause long enough to see the AppWrapper inside it, whatever the machine's speed; then
    // shortened, as the failure grace test does.
    let aw = AwBuilder::job("reset", 2, fail_once()).no_grace().annotation(RETRY_PAUSE_PERIOD_DURATION, "1h");
    let jobs = record(Api::<Job>::namespaced(c.client(), "default"), labelled("reset")).await;
    let (api, history) = start(&c, aw.build()).await;

    // The pause: everything deleted (ResourcesDeployed False) and the quota still held.
    let paused = wait_aw(&api, "reset", "in the reset pause", |a| {
        phase(a) == Some(Resetting) && a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False")
    })
    .await;
    assert_eq!(
        condition(&paused, RESOURCES_DEPLOYED),
        ("False".into(), "Resetting".into(), "Resources deleted for resetting AppWrapper".into())
    );
    assert!(pods_of(&c, "reset").await.is_empty());
    patch_aw(&api, "reset", json!({"metadata": {"annotations": {RETRY_PAUSE_PERIOD_DURATION: "0s"}}})).await;

    let done = wait_aw(&api, "reset", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    assert_eq!(phases(&history.versions()), [Suspended, Resuming, Running, Resetting, Resuming, Running, Succeeded]);
    assert_eq!(resets(&done), 1);
    assert_eq!(jobs.incarnations()["reset-job"], 2, "the reset deleted and recreated the Job");
    let resetting: Vec<AppWrapper> = history.versions().into_iter().filter(|a| phase(a) == Some(Resetting)).collect();
    for a in &resetting {
        assert_eq!(condition(a, QUOTA_RESERVED).0, "True", "quota is held while resetting: {a:#?}");
        assert_eq!(condition(a, UNHEALTHY).1, "FoundFailedPods");
    }
    assert_eq!(condition(&done, UNHEALTHY).1, "FoundNoFailedPods");
    c.shutdown().await;
}

#[tokio::test]
async fn failure_grace_period_holds_the_reset_until_it_expires() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("grace", 1, fail_once()).no_grace().annotation(FAILURE_GRACE_PERIOD_DURATION, "1h");
    let (api, history) = start(&c, aw.build()).await;

    let unhealthy = wait_aw(&api, "grace", "Unhealthy", |a| a.is_true(UNHEALTHY)).await;
    assert_eq!(phase(&unhealthy), Some(Running), "within the grace period the workload keeps running");
    assert_eq!(condition(&unhealthy, UNHEALTHY), ("True".into(), "FoundFailedPods".into(), String::new()));
    // Shortening the grace period lets the reset go ahead.
    patch_aw(&api, "grace", json!({"metadata": {"annotations": {FAILURE_GRACE_PERIOD_DURATION: "0s"}}})).await;
    let done = wait_aw(&api, "grace", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    assert_eq!(resets(&done), 1);
    let before_patch: Vec<_> = history
        .versions()
        .into_iter()
        .take_while(|a| a.metadata.annotations.as_ref().unwrap()[FAILURE_GRACE_PERIOD_DURATION] == "1h")
        .collect();
    assert!(before_patch.iter().all(|a| phase(a) != Some(Resetting)), "no reset inside the grace period");
    c.shutdown().await;
}

#[tokio::test]
async fn exhausting_the_retry_limit_fails_and_deletes_everything() {
    let c = cluster(2).await;
    let always = json!({format!("{SIM}duration"): "50ms", format!("{SIM}exit-code"): "1"});
    let aw = AwBuilder::job("limit", 1, always).no_grace().annotation(RETRY_LIMIT, "2");
    let (api, history) = start(&c, aw.build()).await;

    let failed = wait_aw(&api, "limit", "Failed with nothing left", |a| {
        phase(a) == Some(Failed) && condition(a, QUOTA_RESERVED).0 == "False"
    })
    .await;
    assert_eq!(resets(&failed), 2, "retryLimit 2 allows two resets; the third failure fails");
    assert_eq!(
        condition(&failed, RESOURCES_DEPLOYED),
        ("False".into(), "Failed".into(), "Resources deleted for failed AppWrapper".into())
    );
    assert_eq!(condition(&failed, QUOTA_RESERVED), ("False".into(), "Failed".into(), "No resources deployed".into()));
    assert_eq!(condition(&failed, DELETING_RESOURCES).1, "DeletionComplete");
    assert_eq!(phases(&history.versions()).iter().filter(|p| **p == Resetting).count(), 2);
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("limit-job").await.unwrap().is_none());
    assert!(pods_of(&c, "limit").await.is_empty(), "ResourcesDeployed=False: no labelled pod left");
    c.shutdown().await;
}

/// A 400 from the API server (here: a component carrying a resourceVersion) is not one of
/// upstream's fatal errors (NoMatch, Invalid, an object the AppWrapper does not control): it is
/// retried within the admission grace period, then `CreateFailed` resets the workload, and with no
/// retry left fails it. What was being created is on record from before the first attempt.
#[tokio::test]
async fn a_rejected_create_is_retried_in_the_admission_grace_period_then_resets() {
    let c = cluster(1).await;
    let mut aw = AwBuilder::job("rejected", 1, json!({}))
        .no_grace()
        .annotation(ADMISSION_GRACE_PERIOD_DURATION, "300ms")
        .annotation(RETRY_LIMIT, "1");
    aw.0["spec"]["components"][0]["template"]["metadata"]["resourceVersion"] = json!("7");
    let (api, history) = start(&c, aw.build()).await;

    let failed = wait_aw(&api, "rejected", "Failed", |a| phase(a) == Some(Failed)).await;
    let message = "error creating components: resourceVersion should not be set on objects to be created";
    assert_eq!(condition(&failed, UNHEALTHY), ("True".into(), "CreateFailed".into(), message.into()));
    assert_eq!(resets(&failed), 1, "a non-fatal error spends a retry");
    assert_eq!(phases(&history.versions()), [Suspended, Resuming, Resetting, Resuming, Failed]);

    let component = |a: &AppWrapper| a.status.as_ref().and_then(|s| s.component_status.first().cloned());
    let recorded = component(&failed).unwrap();
    assert_eq!(
        (recorded.name.as_str(), recorded.kind.as_str(), recorded.api_version.as_str()),
        ("rejected-job", "Job", "batch/v1")
    );
    let reasons: Vec<(String, String)> = history
        .versions()
        .iter()
        .filter_map(component)
        .filter_map(|cs| cs.conditions.into_iter().find(|c| c.type_ == RESOURCES_DEPLOYED))
        .map(|c| (c.status, c.reason))
        .collect();
    assert_eq!(
        reasons.first(),
        Some(&("Unknown".into(), "ComponentCreationInitiated".into())),
        "recorded before the first attempt: {reasons:?}"
    );
    assert!(reasons.contains(&("False".into(), "ComponentCreationErrored".into())), "{reasons:?}");
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("rejected-job").await.unwrap().is_none());
    c.shutdown().await;
}

#[tokio::test]
async fn terminal_exit_code_fails_without_a_reset() {
    let c = cluster(1).await;
    let sim = json!({format!("{SIM}duration"): "50ms", format!("{SIM}exit-code"): "42"});
    let aw = AwBuilder::job("terminal", 1, sim).no_grace().annotation(TERMINAL_EXIT_CODES, "3,42");
    let (api, history) = start(&c, aw.build()).await;

    let failed = wait_aw(&api, "terminal", "Failed", |a| phase(a) == Some(Failed)).await;
    assert_eq!(resets(&failed), 0);
    assert!(!phases(&history.versions()).contains(&Resetting));
    assert_eq!(condition(&failed, UNHEALTHY).1, "FoundFailedPods");
    c.shutdown().await;
}

#[tokio::test]
async fn retryable_exit_codes_make_every_other_code_terminal() {
    let c = cluster(1).await;
    let sim = json!({format!("{SIM}duration"): "50ms", format!("{SIM}exit-code"): "7"});
    let aw = AwBuilder::job("retryable", 1, sim).no_grace().annotation(RETRYABLE_EXIT_CODES, "1,2");
    let (api, _history) = start(&c, aw.build()).await;
    let failed = wait_aw(&api, "retryable", "Failed", |a| phase(a) == Some(Failed)).await;
    assert_eq!(resets(&failed), 0);
    c.shutdown().await;
}

/// Pods that run until killed and then take an hour to exit (within their grace period).
fn stuck_terminating(spec: &mut Value) {
    spec["terminationGracePeriodSeconds"] = json!(3600);
}

#[tokio::test]
async fn suspend_while_running_undeploys_and_a_pod_stuck_terminating_is_force_deleted() {
    let c = cluster(1).await;
    let sim = json!({format!("{SIM}duration"): "forever", format!("{SIM}termination-delay"): "1h"});
    let aw = AwBuilder::job("stuck", 1, sim)
        .annotation(FORCEFUL_DELETION_GRACE_PERIOD_DURATION, "300ms")
        .pod_spec(stuck_terminating);
    let (api, history) = start(&c, aw.build()).await;
    wait_for(&Api::<Pod>::namespaced(c.client(), "default"), labelled("stuck"), "pod running", |p| {
        p.len() == 1 && pod_phase(&p[0]) == "Running"
    })
    .await;
    wait_aw(&api, "stuck", "PodsReady", |a| a.is_true(PODS_READY)).await;

    patch_aw(&api, "stuck", json!({"spec": {"suspend": true}})).await;
    let suspended = wait_aw(&api, "stuck", "Suspended", |a| {
        phase(a) == Some(Suspended)
            && resets(a) == 0
            && a.condition(QUOTA_RESERVED).is_some_and(|c| c.status == "False")
    })
    .await;
    assert_eq!(condition(&suspended, QUOTA_RESERVED), ("False".into(), "Suspended".into(), "Suspend is true".into()));
    assert_eq!(
        condition(&suspended, RESOURCES_DEPLOYED),
        ("False".into(), "Suspended".into(), "Suspend is true".into())
    );
    assert_eq!(condition(&suspended, PODS_READY).1, "Suspended");
    assert!(pods_of(&c, "stuck").await.is_empty(), "the terminating pod was force-deleted");
    let seen = phases(&history.versions());
    assert_eq!(&seen[seen.len() - 3..], [Running, Suspending, Suspended]);
    // Without the forceful deletion the pod would still be terminating (1 h grace).
    let versions = history.versions();
    let suspending = versions.iter().rfind(|a| phase(a) == Some(Suspending)).unwrap();
    assert_eq!(condition(suspending, DELETING_RESOURCES).1, "DeletionInitiated");

    // Resuming recreates the workload.
    patch_aw(&api, "stuck", json!({"spec": {"suspend": false}})).await;
    wait_aw(&api, "stuck", "Running again", |a| phase(a) == Some(Running) && a.is_true(PODS_READY)).await;
    c.shutdown().await;
}

#[tokio::test]
async fn created_suspended_it_deploys_nothing_until_resumed() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("later", 1, json!({format!("{SIM}duration"): "50ms"})).suspend();
    let (api, _history) = start(&c, aw.build()).await;
    let s = wait_aw(&api, "later", "Suspended", |a| phase(a) == Some(Suspended)).await;
    assert!(s.condition(QUOTA_RESERVED).is_none() && s.metadata.finalizers.is_none());
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("later-job").await.unwrap().is_none());
    patch_aw(&api, "later", json!({"spec": {"suspend": false}})).await;
    wait_aw(&api, "later", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    c.shutdown().await;
}

#[tokio::test]
async fn suspend_during_the_reset_pause_suspends() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("pause", 1, fail_once()).no_grace().annotation(RETRY_PAUSE_PERIOD_DURATION, "1h");
    let (api, history) = start(&c, aw.build()).await;
    wait_aw(&api, "pause", "paused", |a| {
        phase(a) == Some(Resetting) && a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False")
    })
    .await;
    patch_aw(&api, "pause", json!({"spec": {"suspend": true}})).await;
    let s = wait_aw(&api, "pause", "Suspended", |a| phase(a) == Some(Suspended) && resets(a) == 1).await;
    assert_eq!(condition(&s, QUOTA_RESERVED).0, "False");
    assert!(phases(&history.versions()).ends_with(&[Resetting, Suspending, Suspended]));
    c.shutdown().await;
}

#[tokio::test]
async fn success_ttl_deletes_the_resources_of_a_succeeded_workload() {
    let c = cluster(1).await;
    let aw =
        AwBuilder::job("ttl", 1, json!({format!("{SIM}duration"): "50ms"})).annotation(SUCCESS_TTL_DURATION, "500ms");
    let (api, _history) = start(&c, aw.build()).await;
    let done = wait_aw(&api, "ttl", "resources deleted", |a| {
        phase(a) == Some(Succeeded) && a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False")
    })
    .await;
    assert_eq!(
        condition(&done, RESOURCES_DEPLOYED),
        ("False".into(), "Succeeded".into(), "Time to live after success of 500ms expired".into())
    );
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("ttl-job").await.unwrap().is_none());
    c.shutdown().await;
}

#[tokio::test]
async fn suspending_a_succeeded_workload_changes_nothing() {
    let c = cluster(1).await;
    let (api, history) = start(&c, AwBuilder::job("done", 1, json!({format!("{SIM}duration"): "50ms"})).build()).await;
    wait_aw(&api, "done", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    patch_aw(&api, "done", json!({"spec": {"suspend": true}})).await;
    // Then a success TTL that has expired already: the reconcile that acts on it sees the
    // suspend too, and deletes the resources for the TTL, not for Kueue.
    patch_aw(&api, "done", json!({"metadata": {"annotations": {(SUCCESS_TTL_DURATION): "1ms"}}})).await;
    let done =
        wait_aw(&api, "done", "deleted", |a| a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False"))
            .await;
    assert_eq!(condition(&done, RESOURCES_DEPLOYED).2, "Time to live after success of 1ms expired");
    assert_eq!(phases(&history.versions()), [Suspended, Resuming, Running, Succeeded]);
    c.shutdown().await;
}

#[tokio::test]
async fn deletion_on_failure_grace_keeps_the_failed_workload_for_debugging() {
    let c = cluster(1).await;
    let sim = json!({format!("{SIM}duration"): "50ms", format!("{SIM}exit-code"): "1"});
    let aw = AwBuilder::job("debug", 1, sim)
        .no_grace()
        .annotation(RETRY_LIMIT, "0")
        .annotation(DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, "1h");
    let (api, _history) = start(&c, aw.build()).await;
    let paused = wait_aw(&api, "debug", "deletion paused", |a| {
        a.condition(DELETING_RESOURCES).is_some_and(|c| c.reason == "DeletionPaused")
    })
    .await;
    assert_eq!(phase(&paused), Some(Failed));
    assert_eq!(
        condition(&paused, DELETING_RESOURCES).2,
        format!("{DELETION_ON_FAILURE_GRACE_PERIOD_DURATION} has value 1h0m0s")
    );
    assert!(paused.is_true(QUOTA_RESERVED) && paused.is_true(RESOURCES_DEPLOYED), "quota and resources kept");
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("debug-job").await.unwrap().is_some());
    // Kueue's way to cut the pause short: suspend.
    patch_aw(&api, "debug", json!({"spec": {"suspend": true}})).await;
    let done =
        wait_aw(&api, "debug", "deleted", |a| a.condition(RESOURCES_DEPLOYED).is_some_and(|c| c.status == "False"))
            .await;
    assert_eq!(condition(&done, RESOURCES_DEPLOYED).2, "Kueue forced resource deletion by suspending AppWrapper");
    assert_eq!(phase(&done), Some(Failed));
    c.shutdown().await;
}

#[tokio::test]
async fn pods_that_are_never_created_reset_after_the_admission_grace_period() {
    let c = cluster(1).await;
    // A suspended Job creates no pods: only the admission grace period can end the wait.
    let mut aw = AwBuilder::job("nopods", 2, json!({}))
        .no_grace()
        .annotation(ADMISSION_GRACE_PERIOD_DURATION, "300ms")
        .annotation(WARMUP_GRACE_PERIOD_DURATION, "1h")
        .annotation(RETRY_LIMIT, "0");
    aw.0["spec"]["components"][0]["template"]["spec"]["suspend"] = json!(true);
    let (api, _history) = start(&c, aw.build()).await;
    let failed = wait_aw(&api, "nopods", "Failed", |a| phase(a) == Some(Failed)).await;
    assert_eq!(
        condition(&failed, UNHEALTHY),
        ("True".into(), "InsufficientPodsReady".into(), "0 pods pending; 0 pods running; 0 pods succeeded".into())
    );
    assert_eq!(resets(&failed), 0);
    c.shutdown().await;
}

#[tokio::test]
async fn pods_stuck_initializing_reset_after_the_warmup_grace_period() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("warm", 1, json!({format!("{SIM}duration-init"): "forever"}))
        .no_grace()
        .annotation(ADMISSION_GRACE_PERIOD_DURATION, "1h")
        .annotation(WARMUP_GRACE_PERIOD_DURATION, "300ms")
        .annotation(RETRY_LIMIT, "0")
        .pod_spec(|s| s["initContainers"] = json!([{"name": "init", "image": "busybox"}]));
    let (api, _history) = start(&c, aw.build()).await;
    // All pods exist (pending), so the warmup grace applies, not the admission grace.
    wait_for(&Api::<Pod>::namespaced(c.client(), "default"), labelled("warm"), "pod initializing", |p| {
        p.len() == 1 && pod_phase(&p[0]) == "Pending"
    })
    .await;
    let failed = wait_aw(&api, "warm", "Failed", |a| phase(a) == Some(Failed)).await;
    assert_eq!(condition(&failed, UNHEALTHY).1, "InsufficientPodsReady");
    assert_eq!(condition(&failed, UNHEALTHY).2, "1 pods pending; 0 pods running; 0 pods succeeded");
    c.shutdown().await;
}

#[tokio::test]
async fn an_externally_deleted_component_fails_the_workload() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("gone", 1, json!({format!("{SIM}duration"): "forever"})).no_grace();
    let (api, _history) = start(&c, aw.build()).await;
    wait_aw(&api, "gone", "PodsReady", |a| a.is_true(PODS_READY)).await;
    Api::<Job>::namespaced(c.client(), "default").delete("gone-job", &DeleteParams::background()).await.unwrap();
    let failed = wait_aw(&api, "gone", "Failed", |a| phase(a) == Some(Failed)).await;
    assert_eq!(
        condition(&failed, UNHEALTHY),
        ("True".into(), "MissingComponent".into(), "Only found 0 deployed components, but was expecting 1".into())
    );
    assert_eq!(resets(&failed), 0);
    c.shutdown().await;
}

#[tokio::test]
async fn deleting_the_appwrapper_removes_everything_it_created() {
    let c = cluster(1).await;
    let aw = AwBuilder::job("bye", 2, json!({format!("{SIM}duration"): "forever"}));
    let (api, _history) = start(&c, aw.build()).await;
    wait_aw(&api, "bye", "PodsReady", |a| a.is_true(PODS_READY)).await;
    api.delete("bye", &DeleteParams::default()).await.unwrap();
    wait_for(&api, by_name("bye"), "AppWrapper gone", |v| v.is_empty()).await;
    assert!(Api::<Job>::namespaced(c.client(), "default").get_opt("bye-job").await.unwrap().is_none());
    wait_for(&Api::<Pod>::namespaced(c.client(), "default"), labelled("bye"), "pods gone", |p| p.is_empty()).await;
    c.shutdown().await;
}

#[tokio::test]
async fn wrapped_jobset_runs_to_success() {
    let c = cluster(2).await;
    let aw = AwBuilder::jobset("wrapped", json!({format!("{SIM}duration"): "100ms"}));
    let (api, _history) = start(&c, aw.build()).await;
    let done = wait_aw(&api, "wrapped", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    let cs = &done.status.as_ref().unwrap().component_status[0];
    assert_eq!((cs.kind.as_str(), cs.pod_sets.len()), ("JobSet", 2));
    let js = Api::<JobSet>::namespaced(c.client(), "default").get("wrapped-js").await.unwrap();
    assert_eq!(js.metadata.labels.as_ref().unwrap()[APPWRAPPER_LABEL], "wrapped");
    assert_eq!(pods_of(&c, "wrapped").await.len(), 2);
    c.shutdown().await;
}

#[tokio::test]
async fn an_evicted_gpu_node_migrates_the_workload_without_spending_a_retry() {
    let mut config = LocalConfig::fast(2);
    for n in &mut config.nodes {
        n.capacity.insert("nvidia.com/gpu".into(), "8".into());
    }
    let c = LocalCluster::start(ApiServer::in_memory(), config).await;
    let aw = AwBuilder::job("gpu", 1, json!({format!("{SIM}duration"): "forever"}))
        .no_grace()
        .annotation(RETRY_LIMIT, "1")
        .pod_spec(|s| s["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}}));
    let (api, history) = start(&c, aw.build()).await;
    let pods = Api::<Pod>::namespaced(c.client(), "default");
    let running =
        wait_for(&pods, labelled("gpu"), "pod running", |p| p.len() == 1 && pod_phase(&p[0]) == "Running").await;
    let first_node = running[0].spec.as_ref().unwrap().node_name.clone().unwrap();

    Api::<Node>::all(c.client())
        .patch(
            &first_node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"autopilot.ibm.com/gpuhealth": "EVICT"}}})),
        )
        .await
        .unwrap();
    let moved = wait_for(&pods, labelled("gpu"), "pod running elsewhere", |p| {
        p.len() == 1
            && pod_phase(&p[0]) == "Running"
            && p[0].spec.as_ref().unwrap().node_name.as_ref() != Some(&first_node)
    })
    .await;
    let aw = wait_aw(&api, "gpu", "Running again", |a| phase(a) == Some(Running) && a.is_true(PODS_READY)).await;
    assert_eq!(resets(&aw), 0, "a node-health migration spends no retry");
    let versions = history.versions();
    let reset = versions.iter().find(|a| phase(a) == Some(Resetting)).expect("went through Resetting");
    assert_eq!(
        condition(reset, UNHEALTHY),
        (
            "True".into(),
            "AutopilotNoExecute".into(),
            format!("Workload contains pods using NoExecute resources on Nodes: map[{first_node}:{{}}]")
        )
    );
    // The injected anti-affinity keeps the new pod off every flagged node.
    let terms = &moved[0].spec.as_ref().unwrap().affinity.as_ref().unwrap().node_affinity.as_ref().unwrap();
    let required = terms.required_during_scheduling_ignored_during_execution.as_ref().unwrap();
    let expr = &required.node_selector_terms[0].match_expressions.as_ref().unwrap()[0];
    assert_eq!((expr.key.as_str(), expr.operator.as_str()), ("autopilot.ibm.com/gpuhealth", "NotIn"));
    assert!(expr.values.as_ref().unwrap().contains(&"EVICT".to_string()));
    c.shutdown().await;
}

#[tokio::test]
async fn a_controller_restart_mid_reset_counts_the_reset_once() {
    let mut c = cluster(1).await;
    let aw = AwBuilder::job("crash", 1, fail_once()).no_grace().annotation(RETRY_PAUSE_PERIOD_DURATION, "500ms");
    let (api, _history) = start(&c, aw.build()).await;
    wait_aw(&api, "crash", "Resetting", |a| phase(a) == Some(Resetting)).await;
    c.restart_appwrapper_controller();
    let done = wait_aw(&api, "crash", "Succeeded", |a| phase(a) == Some(Succeeded)).await;
    assert_eq!(resets(&done), 1);
    c.shutdown().await;
}
