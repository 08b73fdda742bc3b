//! The AppWrapper state machine against upstream's Reconcile (reference `appwrapper.md` §6, §7):
//! one builder fixture per scenario, a fixed `now`, condition times relative to it.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use jobset_api::appwrapper::keys::{
    FINALIZER, RETRY_LIMIT, RETRYABLE_EXIT_CODES, SUCCESS_TTL_DURATION, TERMINAL_EXIT_CODES,
    WARMUP_GRACE_PERIOD_DURATION,
};
use jobset_api::appwrapper::{AppWrapperComponent, AppWrapperPodSet, AppWrapperSpec, FaultToleranceConfig};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;

/// The name the wrapped Job was created with.
const JOB: &str = "aw-job-x7k2p";

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn ago(secs: i64) -> Timestamp {
    now() - SignedDuration::from_secs(secs)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A batch/v1 Job with parallelism 2: one podSet of 2 pods.
fn job_component() -> AppWrapperComponent {
    AppWrapperComponent {
        template: json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "aw-job"},
            "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        }),
        ..Default::default()
    }
}

fn job_pod_set() -> AppWrapperPodSet {
    AppWrapperPodSet { replicas: Some(2), path: "template.spec.template".into(), annotations: BTreeMap::new() }
}

fn present() -> ComponentState {
    ComponentState::Present { name: JOB.into(), deleting: false, failed: false }
}

fn being_deleted() -> ComponentState {
    ComponentState::Present { name: JOB.into(), deleting: true, failed: false }
}

fn failed_component() -> ComponentState {
    ComponentState::Present { name: JOB.into(), deleting: false, failed: true }
}

fn created_ok() -> Created {
    Created::Ok { index: 0, name: JOB.into(), kind: "Job".into(), api_version: "batch/v1".into() }
}

fn create_err(fatal: bool) -> Created {
    Created::Err { index: 0, message: "boom".into(), fatal }
}

fn delete_job(force: bool) -> Deletion {
    Deletion::Component { index: 0, name: JOB.into(), force }
}

fn delete_pod(name: &str) -> Deletion {
    Deletion::Pod { name: name.into() }
}

/// An AppWrapper wrapping one Job, what the shell observed of it, and the creations it attempted.
struct Fx {
    aw: AppWrapper,
    observed: Observed,
    created: Vec<Created>,
    timing: Timing,
}

impl Fx {
    /// A brand-new AppWrapper (phase "").
    fn new() -> Self {
        let aw = AppWrapper {
            metadata: ObjectMeta { name: Some("aw".into()), namespace: Some("ns".into()), ..Default::default() },
            spec: AppWrapperSpec { components: vec![job_component()], ..Default::default() },
            ..Default::default()
        };
        Fx { aw, observed: Observed::default(), created: vec![], timing: Timing::default() }
    }

    fn status_mut(&mut self) -> &mut AppWrapperStatus {
        self.aw.status.get_or_insert_with(Default::default)
    }

    /// Phase `p`, with the podSets frozen (2 expected pods) if not yet.
    fn phase(mut self, p: AppWrapperPhase) -> Self {
        let st = self.status_mut();
        st.phase = Some(p);
        if st.component_status.is_empty() {
            st.component_status =
                vec![AppWrapperComponentStatus { pod_sets: vec![job_pod_set()], ..Default::default() }];
        }
        self
    }

    /// Condition `t` with a neutral reason, last transitioned `secs_ago`.
    fn cond(self, t: &str, status: bool, secs_ago: i64) -> Self {
        self.cond_r(t, status, "Setup", secs_ago)
    }

    fn cond_r(self, t: &str, status: bool, reason: &str, secs_ago: i64) -> Self {
        self.cond_m(t, status, reason, "", secs_ago)
    }

    fn cond_m(mut self, t: &str, status: bool, reason: &str, message: &str, secs_ago: i64) -> Self {
        let conds = &mut self.status_mut().conditions;
        conds.retain(|c| c.type_ != t);
        conds.push(Condition {
            type_: t.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(ago(secs_ago)),
            observed_generation: None,
        });
        self
    }

    /// As the Suspended → Resuming transition left it, `secs_ago`: quota reserved, resources
    /// deployed, pods not ready, healthy.
    fn deployed(self, secs_ago: i64) -> Self {
        let m = "Suspend is false";
        self.cond_m(QUOTA_RESERVED, true, "Resuming", m, secs_ago)
            .cond_m(RESOURCES_DEPLOYED, true, "Resuming", m, secs_ago)
            .cond_m(PODS_READY, false, "Resuming", m, secs_ago)
            .cond_m(UNHEALTHY, false, "Resuming", m, secs_ago)
    }

    /// The component's status as after a successful creation.
    fn component_created(mut self) -> Self {
        let cs = &mut self.status_mut().component_status[0];
        cs.name = JOB.into();
        cs.kind = "Job".into();
        cs.api_version = "batch/v1".into();
        set_condition(&mut cs.conditions, RESOURCES_DEPLOYED, true, "ComponentCreatedSuccessfully", "", ago(600));
        self
    }

    fn component(mut self, c: ComponentState) -> Self {
        self.observed.components = vec![c];
        self
    }

    /// Labelled pods by phase; each one also exists by name (`pod-0`, `pod-1`, ...).
    fn pods(mut self, pending: i32, running: i32, succeeded: i32, failed: i32) -> Self {
        self.observed.pods = PodSummary { pending, running, succeeded, failed, terminal_failure: false };
        self.observed.pod_names = (0..pending + running + succeeded + failed).map(|i| format!("pod-{i}")).collect();
        self
    }

    fn terminal(mut self) -> Self {
        self.observed.pods.terminal_failure = true;
        self
    }

    fn no_execute(mut self, nodes: &[&str]) -> Self {
        self.observed.no_execute_nodes = nodes.iter().map(|n| n.to_string()).collect();
        self
    }

    fn suspend(mut self) -> Self {
        self.aw.spec.suspend = true;
        self
    }

    fn annotation(mut self, k: &str, v: &str) -> Self {
        self.aw.metadata.annotations.get_or_insert_with(Default::default).insert(k.into(), v.into());
        self
    }

    fn resets(mut self, n: i32) -> Self {
        self.status_mut().resetting_count = n;
        self
    }

    fn created(mut self, c: Created) -> Self {
        self.created.push(c);
        self
    }

    fn timing(mut self, t: Timing) -> Self {
        self.timing = t;
        self
    }

    /// Deleted by the user, finalizer still on.
    fn deleted(mut self) -> Self {
        self.aw.metadata.deletion_timestamp = Some(Time(ago(1)));
        self.aw.metadata.finalizers = Some(vec![FINALIZER.into()]);
        self
    }

    fn without_finalizer(mut self) -> Self {
        self.aw.metadata.finalizers = None;
        self
    }

    fn status(&self) -> AppWrapperStatus {
        self.aw.status.clone().unwrap_or_default()
    }

    fn try_run(&self) -> Result<Plan, String> {
        let ft = FaultToleranceConfig::default().for_appwrapper(&self.aw.metadata);
        sync(&SyncInput {
            aw: &self.aw,
            ft: &ft,
            observed: &self.observed,
            created: &self.created,
            now: now(),
            timing: &self.timing,
        })
    }

    fn run(&self) -> Plan {
        self.try_run().unwrap()
    }
}

/// (status, reason, message) of AppWrapper condition `t`.
fn condition<'a>(p: &'a Plan, t: &str) -> (&'a str, &'a str, &'a str) {
    let c = p.status.conditions.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t} condition"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// lastTransitionTime of AppWrapper condition `t`.
fn since(p: &Plan, t: &str) -> Timestamp {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"))
        .last_transition_time
        .0
}

/// (status, reason, message) of component 0's `ResourcesDeployed`.
fn component_condition(p: &Plan) -> (&str, &str, &str) {
    let c = p.status.component_status[0].conditions.iter().find(|c| c.type_ == RESOURCES_DEPLOYED).unwrap();
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn events(p: &Plan) -> Vec<(&str, &str)> {
    p.events.iter().map(|(r, m)| (*r, m.as_str())).collect()
}

// ---------------------------------------------------------------------------------------------
// Phase "" and Suspended

#[test]
fn a_new_appwrapper_freezes_the_inferred_pod_sets_and_goes_suspended() {
    let p = Fx::new().run();
    assert_eq!(p.status.phase, Some(Suspended));
    assert_eq!(p.transitions, [Suspended]);
    assert_eq!(p.status.component_status.len(), 1);
    let ps = &p.status.component_status[0].pod_sets;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].path, "template.spec.template");
    assert_eq!(ps[0].replicas, Some(2), "a Job's pods are its parallelism");
    assert!(p.status.conditions.is_empty());
    assert!(!p.add_finalizer, "the finalizer is added just before the first deployment");
    assert!(p.deletions.is_empty() && p.events.is_empty());
}

#[test]
fn a_new_appwrapper_freezes_declared_pod_sets_as_declared() {
    let mut fx = Fx::new();
    let declared =
        AppWrapperPodSet { replicas: Some(3), path: "template.spec.podTemplate".into(), ..Default::default() };
    fx.aw.spec.components[0] = AppWrapperComponent {
        declared_pod_sets: vec![declared.clone()],
        template: json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}}),
        ..Default::default()
    };
    let p = fx.run();
    assert_eq!(p.status.phase, Some(Suspended));
    assert_eq!(p.status.component_status[0].pod_sets, [declared]);
}

#[test]
fn a_new_appwrapper_whose_pod_sets_cannot_be_found_is_an_error() {
    let mut fx = Fx::new();
    fx.aw.spec.components[0].template = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 2}});
    let err = fx.try_run().unwrap_err();
    assert!(err.starts_with("spec.components[0]: "), "{err}");
}

#[test]
fn a_suspended_appwrapper_stays_while_suspend_is_true() {
    let fx = Fx::new().phase(Suspended).suspend();
    let p = fx.run();
    assert_eq!(p.status, fx.status(), "nothing changes");
    assert!(p.transitions.is_empty());
    assert!(!p.add_finalizer);
    assert_eq!(p.requeue_after, None);
}

#[test]
fn unsuspending_adds_the_finalizer_deploys_and_goes_resuming() {
    let p = Fx::new()
        .phase(Suspended)
        .cond_r(QUOTA_RESERVED, false, "Suspended", 300)
        .cond_r(RESOURCES_DEPLOYED, false, "Suspended", 300)
        .run();
    assert!(p.add_finalizer);
    for t in [QUOTA_RESERVED, RESOURCES_DEPLOYED] {
        assert_eq!(condition(&p, t), ("True", "Resuming", "Suspend is false"), "{t}");
        assert_eq!(since(&p, t), now(), "{t}: the deploy time");
    }
    for t in [PODS_READY, UNHEALTHY] {
        assert_eq!(condition(&p, t), ("False", "Resuming", "Suspend is false"), "{t}");
    }
    assert_eq!(p.status.phase, Some(Resuming));
    assert_eq!(p.transitions, [Resuming]);
}

// ---------------------------------------------------------------------------------------------
// Resuming

fn resuming() -> Fx {
    Fx::new().phase(Resuming).deployed(10)
}

#[test]
fn resuming_creates_the_components_whose_own_resources_deployed_is_not_true() {
    let fx = resuming();
    assert!(creates(&fx.aw));
    assert_eq!(to_create(&fx.aw), [0]);
    let fx = resuming().component_created();
    assert_eq!(to_create(&fx.aw), Vec::<usize>::new());
    assert!(!creates(&resuming().suspend().aw), "suspended: nothing is created");
    assert!(!creates(&resuming().deleted().aw), "deleted: nothing is created");
    assert!(!creates(&Fx::new().phase(Running).aw), "only in Resuming");
}

#[test]
fn resuming_with_every_component_created_goes_running_and_records_it() {
    let p = resuming().created(created_ok()).run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(p.transitions, [Running]);
    let cs = &p.status.component_status[0];
    assert_eq!((cs.name.as_str(), cs.kind.as_str(), cs.api_version.as_str()), (JOB, "Job", "batch/v1"));
    assert_eq!(component_condition(&p), ("True", "ComponentCreatedSuccessfully", ""));
    assert_eq!(cs.pod_sets, [job_pod_set()], "the frozen podSets are kept");
    assert!(p.events.is_empty());
}

#[test]
fn resuming_with_the_components_already_created_goes_running() {
    let p = resuming().component_created().run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(p.transitions, [Running]);
}

#[test]
fn a_retryable_create_error_within_the_admission_grace_period_is_retried_soon() {
    let fx = resuming().created(create_err(false));
    let p = fx.run();
    assert_eq!(p.requeue_after, Some(fx.timing.create_retry));
    assert_eq!(p.requeue_after, Some(secs(1)), "upstream retries after 1 s");
    assert_eq!(p.status.phase, Some(Resuming));
    assert!(p.transitions.is_empty() && p.events.is_empty());
    assert_eq!(component_condition(&p), ("False", "ComponentCreationErrored", "boom"));
    assert_eq!(condition(&p, UNHEALTHY), ("False", "Resuming", "Suspend is false"));
    assert_eq!(p.status.resetting_count, 0);
}

#[test]
fn create_retry_uses_the_configured_timing() {
    let timing = Timing { create_retry: Duration::from_millis(250), ..Timing::default() };
    let p = resuming().created(create_err(false)).timing(timing).run();
    assert_eq!(p.requeue_after, Some(Duration::from_millis(250)));
}

#[test]
fn a_retryable_create_error_after_the_admission_grace_period_resets() {
    let p = Fx::new().phase(Resuming).deployed(61).created(create_err(false)).run();
    assert_eq!(condition(&p, UNHEALTHY), ("True", "CreateFailed", "error creating components: boom"));
    assert_eq!(since(&p, UNHEALTHY), now());
    assert_eq!(events(&p), [("Unhealthy", "CreateFailed: error creating components: boom")]);
    assert_eq!(p.status.phase, Some(Resetting));
    assert_eq!(p.transitions, [Resetting]);
    assert_eq!(p.status.resetting_count, 1);
}

#[test]
fn the_admission_grace_period_ends_exactly_at_its_deadline() {
    let p = Fx::new().phase(Resuming).deployed(60).created(create_err(false)).run();
    assert_eq!(p.status.phase, Some(Resetting), "Go's now.Before(deadline) is false at the deadline");
}

#[test]
fn a_retryable_create_error_with_no_resets_left_fails() {
    let p = Fx::new().phase(Resuming).deployed(61).resets(3).created(create_err(false)).run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.status.resetting_count, 3);
    assert_eq!(condition(&p, UNHEALTHY).1, "CreateFailed");
}

/// The object `build_component` makes of the fixture's component.
fn built_job() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "aw-job", "namespace": "ns"}, "spec": {}})
}

#[test]
fn the_first_attempt_at_a_component_is_recorded_before_the_create() {
    let fx = resuming();
    let status = initiate(&fx.aw, 0, &built_job(), now()).expect("a status to write");
    let cs = &status.component_status[0];
    assert_eq!((cs.name.as_str(), cs.kind.as_str(), cs.api_version.as_str()), ("aw-job", "Job", "batch/v1"));
    let c = cs.conditions.iter().find(|c| c.type_ == RESOURCES_DEPLOYED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("Unknown", "ComponentCreationInitiated", "")
    );
    assert_eq!(c.last_transition_time.0, now());
    assert_eq!(cs.pod_sets, fx.aw.status.as_ref().unwrap().component_status[0].pod_sets, "podSets kept");
    assert_eq!(status.phase, Some(Resuming), "nothing else changes");
}

#[test]
fn a_later_attempt_is_not_recorded_again() {
    let mut errored = resuming();
    errored.aw.status = Some(resuming().created(create_err(false)).run().status);
    let mut initiated = resuming();
    initiated.aw.status = initiate(&initiated.aw, 0, &built_job(), ago(5));
    // ResourcesDeployed False (an earlier error), True (created), Unknown (initiated).
    for (what, fx) in [("errored", errored), ("created", resuming().component_created()), ("initiated", initiated)] {
        assert_eq!(initiate(&fx.aw, 0, &built_job(), now()), None, "{what}");
    }
}

#[test]
fn a_component_missing_from_the_status_gets_an_entry() {
    let mut fx = resuming();
    fx.aw.spec.components.push(job_component());
    let status = initiate(&fx.aw, 1, &built_job(), now()).unwrap();
    assert_eq!(status.component_status.len(), 2);
    assert_eq!(status.component_status[1].name, "aw-job");
}

#[test]
fn a_fatal_create_error_fails_at_once_even_within_the_grace_period() {
    let p = resuming().created(create_err(true)).run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.transitions, [Failed]);
    assert_eq!(condition(&p, UNHEALTHY), ("True", "CreateFailed", "error creating components: boom"));
    assert_eq!(events(&p), [("Unhealthy", "CreateFailed: error creating components: boom")]);
    assert_eq!(p.status.resetting_count, 0, "no retry");
    assert_eq!(component_condition(&p), ("False", "ComponentCreationErrored", "boom"));
}

// ---------------------------------------------------------------------------------------------
// Running

/// Deployed 10 min ago, the Job exists, 2 pods expected.
fn running() -> Fx {
    Fx::new().phase(Running).deployed(600).component_created().component(present())
}

#[test]
fn all_pods_running_marks_pods_ready_and_rechecks_in_a_minute() {
    let p = running().pods(0, 2, 0, 0).run();
    assert_eq!(condition(&p, PODS_READY), ("True", "SufficientPodsReady", "2 pods running; 0 pods succeeded"));
    assert_eq!(since(&p, PODS_READY), now());
    assert_eq!(p.requeue_after, Some(secs(60)));
    assert_eq!(p.status.phase, Some(Running));
    assert!(p.transitions.is_empty() && p.events.is_empty() && p.deletions.is_empty());
    assert_eq!(condition(&p, UNHEALTHY), ("False", "Resuming", "Suspend is false"), "a False Unhealthy is left alone");
}

#[test]
fn running_and_succeeded_pods_together_are_enough() {
    let p = running().pods(0, 1, 1, 0).run();
    assert_eq!(condition(&p, PODS_READY), ("True", "SufficientPodsReady", "1 pods running; 1 pods succeeded"));
}

#[test]
fn the_ready_recheck_uses_the_configured_timing() {
    let p = running().pods(0, 2, 0, 0).timing(Timing { ready_recheck: secs(7), ..Timing::default() }).run();
    assert_eq!(p.requeue_after, Some(secs(7)));
}

#[test]
fn a_failed_pod_marks_unhealthy_and_waits_the_failure_grace_period() {
    let p = running().pods(0, 1, 0, 1).run();
    assert_eq!(condition(&p, UNHEALTHY), ("True", "FoundFailedPods", ""));
    assert_eq!(since(&p, UNHEALTHY), now(), "first detection");
    assert_eq!(p.requeue_after, Some(secs(60)));
    assert_eq!(p.status.phase, Some(Running));
    assert!(p.transitions.is_empty() && p.events.is_empty());
    assert_eq!(p.status.resetting_count, 0);
}

#[test]
fn a_failed_pod_seen_before_waits_only_the_rest_of_the_grace_period() {
    let p = running().pods(0, 1, 0, 1).cond(UNHEALTHY, true, 20).run();
    assert_eq!(p.requeue_after, Some(secs(40)));
    assert_eq!(since(&p, UNHEALTHY), ago(20), "the grace is measured from the first detection");
    assert_eq!(p.status.phase, Some(Running));
    assert!(p.events.is_empty());
}

#[test]
fn a_failed_pod_after_the_failure_grace_period_resets() {
    let p = running().pods(0, 1, 0, 1).cond(UNHEALTHY, true, 61).resets(1).run();
    assert_eq!(events(&p), [("Unhealthy", "FoundFailedPods: 1 failed pods")]);
    assert_eq!(p.status.phase, Some(Resetting));
    assert_eq!(p.transitions, [Resetting]);
    assert_eq!(p.status.resetting_count, 2);
    assert_eq!(since(&p, UNHEALTHY), ago(61), "the retry pause counts from the detection");
    assert!(p.deletions.is_empty(), "Resetting deletes on the next reconcile");
}

#[test]
fn the_failure_grace_period_ends_exactly_at_its_deadline() {
    let p = running().pods(0, 1, 0, 1).cond_r(UNHEALTHY, true, "FoundFailedPods", 60).run();
    assert_eq!(p.status.phase, Some(Resetting));
}

#[test]
fn a_terminal_pod_failure_still_gets_the_grace_period_then_fails() {
    let p = running().pods(0, 1, 0, 1).terminal().cond_r(UNHEALTHY, true, "FoundFailedPods", 20).run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(p.requeue_after, Some(secs(40)));

    let p = running().pods(0, 1, 0, 1).terminal().cond_r(UNHEALTHY, true, "FoundFailedPods", 61).run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.transitions, [Failed]);
    assert_eq!(p.status.resetting_count, 0);
    assert_eq!(events(&p), [("Unhealthy", "FoundFailedPods: 1 failed pods")]);
}

#[test]
fn the_retry_limit_allows_that_many_resets_and_then_fails() {
    let fx = |n| running().pods(0, 1, 0, 1).cond_r(UNHEALTHY, true, "FoundFailedPods", 61).resets(n);
    let p = fx(2).run();
    assert_eq!((p.status.phase, p.status.resetting_count), (Some(Resetting), 3));
    let p = fx(3).run();
    assert_eq!((p.status.phase, p.status.resetting_count), (Some(Failed), 3));
}

#[test]
fn a_retry_limit_annotation_of_zero_fails_the_first_unhealthy_episode() {
    let p =
        running().annotation(RETRY_LIMIT, "0").pods(0, 1, 0, 1).cond_r(UNHEALTHY, true, "FoundFailedPods", 61).run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.status.resetting_count, 0);
}

#[test]
fn a_missing_component_fails_at_once() {
    let p = running().component(ComponentState::Absent).pods(0, 2, 0, 0).run();
    let msg = "Only found 0 deployed components, but was expecting 1";
    assert_eq!(condition(&p, UNHEALTHY), ("True", "MissingComponent", msg));
    assert_eq!(events(&p), [("Unhealthy", format!("MissingComponent: {msg}").as_str())]);
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.transitions, [Failed]);
    assert_eq!(p.status.resetting_count, 0, "no retry");
}

#[test]
fn a_component_being_deleted_counts_as_missing() {
    let p = running().component(being_deleted()).pods(0, 2, 0, 0).run();
    assert_eq!(condition(&p, UNHEALTHY).2, "Only found 0 deployed components, but was expecting 1");
    assert_eq!(p.status.phase, Some(Failed));
}

#[test]
fn a_failed_component_resets_without_a_grace_period() {
    let p = running().component(failed_component()).pods(0, 2, 0, 0).run();
    assert_eq!(condition(&p, UNHEALTHY), ("True", "FailedComponent", "Found 1 failed components"));
    assert_eq!(since(&p, UNHEALTHY), now());
    assert_eq!(events(&p), [("Unhealthy", "FailedComponent: Found 1 failed components")]);
    assert_eq!(p.status.phase, Some(Resetting));
    assert_eq!(p.status.resetting_count, 1);
}

#[test]
fn a_failed_component_with_a_terminal_pod_failure_fails() {
    let p = running().component(failed_component()).pods(0, 1, 0, 1).terminal().run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(condition(&p, UNHEALTHY).1, "FailedComponent");
}

#[test]
fn all_pods_succeeded_is_success_and_releases_the_quota() {
    let p = running().pods(0, 0, 2, 0).run();
    let msg = "2 pods succeeded and no running, pending, or failed pods";
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Succeeded", msg));
    assert_eq!(since(&p, QUOTA_RESERVED), now());
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("True", "Succeeded", msg));
    assert_eq!(since(&p, RESOURCES_DEPLOYED), ago(600), "still the deploy time");
    assert_eq!(p.status.phase, Some(Succeeded));
    assert_eq!(p.transitions, [Succeeded]);
    assert!(p.deletions.is_empty(), "resources are kept for the success TTL");
}

#[test]
fn success_needs_no_failed_pod() {
    let p = running().pods(0, 0, 2, 1).run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(condition(&p, UNHEALTHY), ("True", "FoundFailedPods", ""));
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True");
}

#[test]
fn autopilot_no_execute_nodes_reset_without_counting_a_retry() {
    let p = running().pods(0, 2, 0, 0).no_execute(&["n1", "n2"]).resets(1).run();
    let (status, reason, msg) = condition(&p, UNHEALTHY);
    assert_eq!((status, reason), ("True", "AutopilotNoExecute"));
    assert!(msg.starts_with("Workload contains pods using NoExecute resources on Nodes: "), "{msg}");
    assert!(msg.contains("n1") && msg.contains("n2"), "{msg}");
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].0, "Unhealthy");
    assert!(p.events[0].1.contains(msg), "{:?}", p.events);
    assert_eq!(p.status.phase, Some(Resetting));
    assert_eq!(p.status.resetting_count, 1, "not incremented");
}

#[test]
fn autopilot_no_execute_with_the_retry_limit_exhausted_fails() {
    let p = running().pods(0, 2, 0, 0).no_execute(&["n1"]).resets(3).run();
    assert_eq!(p.status.phase, Some(Failed));
    assert_eq!(p.status.resetting_count, 3);
    assert_eq!(condition(&p, UNHEALTHY).1, "AutopilotNoExecute");
}

#[test]
fn failed_pods_are_checked_before_autopilot() {
    let p = running().pods(0, 1, 0, 1).no_execute(&["n1"]).run();
    assert_eq!(condition(&p, UNHEALTHY).1, "FoundFailedPods");
    assert_eq!(p.status.phase, Some(Running), "within the failure grace period");
    assert_eq!(p.requeue_after, Some(secs(60)));
}

#[test]
fn too_few_pods_within_the_admission_grace_period_waits() {
    // 1 running of 2: pending+running+succeeded < expected, so the admission grace (60 s) applies.
    let fx = Fx::new().phase(Running).deployed(30).component_created().component(present()).pods(0, 1, 0, 0);
    let p = fx.run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(p.requeue_after, Some(fx.timing.poll));
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert!(p.events.is_empty());
    assert_eq!(condition(&p, UNHEALTHY).0, "False");
    assert_eq!(condition(&p, PODS_READY), ("False", "Resuming", "Suspend is false"), "a False PodsReady is left alone");
}

#[test]
fn too_few_pods_after_the_admission_grace_period_reset() {
    let fx = Fx::new().phase(Running).deployed(61).component_created().component(present()).pods(0, 1, 0, 0);
    let p = fx.run();
    let msg = "0 pods pending; 1 pods running; 0 pods succeeded";
    assert_eq!(condition(&p, UNHEALTHY), ("True", "InsufficientPodsReady", msg));
    assert_eq!(events(&p), [("Unhealthy", format!("InsufficientPodsReady: {msg}").as_str())]);
    assert_eq!(p.status.phase, Some(Resetting));
    assert_eq!(p.status.resetting_count, 1);
}

#[test]
fn enough_pending_pods_get_the_warmup_grace_period_instead() {
    // 1 pending + 1 running >= 2 expected: the warmup grace (5 min) applies, not the admission one.
    let fx = |deployed| Fx::new().phase(Running).deployed(deployed).component_created().component(present());
    let p = fx(61).pods(1, 1, 0, 0).run();
    assert_eq!(p.status.phase, Some(Running));
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert!(p.events.is_empty());

    let p = fx(299).pods(1, 1, 0, 0).run();
    assert_eq!(p.status.phase, Some(Running));

    let p = fx(300).pods(1, 1, 0, 0).run();
    let msg = "1 pods pending; 1 pods running; 0 pods succeeded";
    assert_eq!(condition(&p, UNHEALTHY), ("True", "InsufficientPodsReady", msg));
    assert_eq!(events(&p), [("Unhealthy", format!("InsufficientPodsReady: {msg}").as_str())]);
    assert_eq!(p.status.phase, Some(Resetting));

    let p = fx(61).pods(0, 1, 0, 0).run();
    assert_eq!(p.status.phase, Some(Resetting), "1 of 2 pods only: the admission grace");
}

#[test]
fn the_warmup_grace_period_follows_its_annotation() {
    let p = Fx::new()
        .annotation(WARMUP_GRACE_PERIOD_DURATION, "2m")
        .phase(Running)
        .deployed(121)
        .component_created()
        .component(present())
        .pods(1, 1, 0, 0)
        .run();
    assert_eq!(p.status.phase, Some(Resetting));
}

#[test]
fn pods_ready_turns_false_when_pods_go_missing() {
    let p = running()
        .cond_r(PODS_READY, true, "SufficientPodsReady", 100)
        .cond_r(RESOURCES_DEPLOYED, true, "Resuming", 100)
        .pods(1, 1, 0, 0)
        .run();
    assert_eq!(
        condition(&p, PODS_READY),
        ("False", "InsufficientPodsReady", "1 pods pending; 1 pods running; 0 pods succeeded")
    );
    assert_eq!(since(&p, PODS_READY), now());
    assert_eq!(p.status.phase, Some(Running));
}

#[test]
fn a_healthy_check_clears_unhealthy() {
    let p = running().cond_r(UNHEALTHY, true, "FoundFailedPods", 30).pods(0, 2, 0, 0).run();
    assert_eq!(condition(&p, UNHEALTHY), ("False", "FoundNoFailedPods", ""));
    assert_eq!(since(&p, UNHEALTHY), now());
    assert_eq!(condition(&p, PODS_READY).0, "True");
    assert_eq!(p.status.phase, Some(Running));
}

// ---------------------------------------------------------------------------------------------
// Resetting

/// Unhealthy since 30 s ago, deployed, the Job still there.
fn resetting() -> Fx {
    Fx::new()
        .phase(Resetting)
        .deployed(600)
        .component_created()
        .cond_r(UNHEALTHY, true, "FoundFailedPods", 30)
        .resets(1)
        .component(present())
}

#[test]
fn resetting_deletes_the_components_in_the_background() {
    let p = resetting().cond_r(PODS_READY, true, "SufficientPodsReady", 100).pods(0, 1, 0, 1).run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True", "until everything is gone");
    assert_eq!(condition(&p, DELETING_RESOURCES), ("True", "DeletionInitiated", ""));
    assert_eq!(since(&p, DELETING_RESOURCES), now());
    assert_eq!(condition(&p, PODS_READY), ("False", "Resetting", ""));
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True", "the quota is held");
    assert_eq!(p.status.phase, Some(Resetting));
    assert!(p.transitions.is_empty());
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert_eq!(p.status.resetting_count, 1);
}

#[test]
fn resetting_does_not_repeat_a_delete_already_under_way() {
    let p = resetting().component(being_deleted()).cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 10).run();
    assert!(p.deletions.is_empty(), "{:?}", p.deletions);
    assert_eq!(since(&p, DELETING_RESOURCES), ago(10), "the deletion episode keeps its start");
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
}

#[test]
fn resetting_waits_for_the_labelled_pods_after_the_components_are_gone() {
    let p = resetting().component(ComponentState::Absent).pods(0, 0, 0, 1).run();
    assert!(p.deletions.is_empty(), "pods are left to the wrapped controller until the forceful grace");
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
    assert_eq!(component_condition(&p), ("False", "CompononetDeleted", ""));
    assert_eq!(p.status.phase, Some(Resetting));
}

#[test]
fn resetting_with_everything_gone_waits_out_the_retry_pause() {
    let p = resetting().component(ComponentState::Absent).run();
    assert!(p.deletions.is_empty());
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("False", "Resetting", "Resources deleted for resetting AppWrapper"));
    assert_eq!(condition(&p, DELETING_RESOURCES), ("False", "DeletionComplete", ""));
    assert_eq!(component_condition(&p), ("False", "CompononetDeleted", ""));
    assert_eq!(p.requeue_after, Some(secs(60)), "Unhealthy.LTT (30 s ago) + 90 s");
    assert_eq!(p.status.phase, Some(Resetting));
    assert!(p.transitions.is_empty());
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True");
}

#[test]
fn resetting_after_the_pause_resumes_with_a_new_deploy_time() {
    let p = resetting()
        .component(ComponentState::Absent)
        .cond_r(RESOURCES_DEPLOYED, false, "Resetting", 60)
        .cond_r(UNHEALTHY, true, "FoundFailedPods", 90)
        .run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("True", "Resuming", "Reset complete; resuming"));
    assert_eq!(since(&p, RESOURCES_DEPLOYED), now());
    assert_eq!(p.status.phase, Some(Resuming));
    assert_eq!(p.transitions, [Resuming]);
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True");
    assert_eq!(condition(&p, UNHEALTHY).0, "True", "cleared only by a healthy Running check");
    assert_eq!(p.status.resetting_count, 1);
    assert!(p.deletions.is_empty());
}

#[test]
fn resetting_finishes_in_one_reconcile_when_everything_is_gone_and_the_pause_is_over() {
    let p = resetting().component(ComponentState::Absent).cond_r(UNHEALTHY, true, "FoundFailedPods", 91).run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("True", "Resuming", "Reset complete; resuming"));
    assert_eq!(since(&p, RESOURCES_DEPLOYED), now());
    assert_eq!(p.status.phase, Some(Resuming));
}

#[test]
fn after_the_forceful_deletion_grace_period_every_pod_is_deleted() {
    let p = resetting()
        .component(being_deleted())
        .cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 601)
        .pods(0, 2, 0, 0)
        .run();
    assert_eq!(p.deletions, [delete_pod("pod-0"), delete_pod("pod-1")]);
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
}

#[test]
fn pods_are_forced_while_the_components_are_deleted_in_the_background() {
    let p = resetting().cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 601).pods(0, 1, 0, 0).run();
    assert_eq!(p.deletions, [delete_pod("pod-0"), delete_job(false)]);
}

#[test]
fn the_forceful_deletion_grace_period_is_exclusive_of_its_deadline() {
    let p = resetting()
        .component(being_deleted())
        .cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 600)
        .pods(0, 2, 0, 0)
        .run();
    assert!(p.deletions.is_empty(), "Go's now.After(deadline) is false at the deadline");
}

#[test]
fn after_the_forceful_deletion_grace_period_with_no_pods_left_components_are_forced() {
    let p = resetting().component(being_deleted()).cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 601).run();
    assert_eq!(p.deletions, [delete_job(true)]);
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
}

// ---------------------------------------------------------------------------------------------
// Suspending

#[test]
fn an_external_suspend_while_running_resuming_or_resetting_goes_suspending() {
    for (phase, fx) in [
        (Running, running().pods(0, 2, 0, 0)),
        (Resuming, resuming()),
        (Resetting, resetting().cond_r(PODS_READY, true, "SufficientPodsReady", 100)),
    ] {
        let fx = fx.suspend();
        let p = fx.run();
        assert_eq!(p.status.phase, Some(Suspending), "{phase}");
        assert_eq!(p.transitions, [Suspending], "{phase}");
        let msg = format!("Externally suspended while in the {phase} phase");
        assert_eq!(events(&p), [("Suspending", msg.as_str())], "{phase}");
        assert!(p.deletions.is_empty(), "{phase}");
        let mut expected = fx.status();
        expected.phase = Some(Suspending);
        assert_eq!(p.status, expected, "{phase}: nothing but the phase changes");
    }
}

#[test]
fn suspending_deletes_the_components_first() {
    let p = Fx::new().phase(Suspending).deployed(600).component_created().component(present()).suspend().run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(p.status.phase, Some(Suspending));
    assert!(p.transitions.is_empty());
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True");
    assert_eq!(p.requeue_after, Some(secs(5)));
}

#[test]
fn suspending_with_everything_gone_goes_suspended_and_releases_the_quota() {
    // Without the suspend bit too: a suspension once started is finished.
    let p = Fx::new()
        .phase(Suspending)
        .deployed(600)
        .component_created()
        .cond_r(PODS_READY, true, "SufficientPodsReady", 100)
        .cond_r(UNHEALTHY, true, "FoundFailedPods", 50)
        .component(ComponentState::Absent)
        .run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("False", "Suspended", "Suspend is true"));
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Suspended", "Suspend is true"));
    assert_eq!(condition(&p, PODS_READY), ("False", "Suspended", ""));
    assert_eq!(condition(&p, UNHEALTHY), ("False", "Suspended", ""));
    assert_eq!(p.status.phase, Some(Suspended));
    assert_eq!(p.transitions, [Suspended]);
    assert!(p.deletions.is_empty());
}

#[test]
fn the_reset_counter_survives_a_suspension() {
    let p = Fx::new().phase(Suspending).deployed(600).resets(2).component(ComponentState::Absent).suspend().run();
    assert_eq!(p.status.phase, Some(Suspended));
    assert_eq!(p.status.resetting_count, 2);
}

// ---------------------------------------------------------------------------------------------
// Failed

/// Failed 100 s ago with its resources still deployed.
fn failed() -> Fx {
    Fx::new()
        .phase(Failed)
        .deployed(600)
        .component_created()
        .cond_r(UNHEALTHY, true, "FoundFailedPods", 100)
        .component(present())
}

const ONE_HOUR_DELAY: (&str, &str) = (DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, "1h");

#[test]
fn a_failed_appwrapper_deletes_its_resources_keeping_the_quota_until_they_are_gone() {
    let p = failed().run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True");
    assert_eq!(condition(&p, DELETING_RESOURCES), ("True", "DeletionInitiated", ""));
    assert_eq!(p.status.phase, Some(Failed));
    assert!(p.transitions.is_empty());
}

#[test]
fn a_failed_appwrapper_with_nothing_left_releases_the_quota() {
    let p = failed().component(ComponentState::Absent).run();
    assert!(p.deletions.is_empty());
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("False", "Failed", "Resources deleted for failed AppWrapper"));
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Failed", "No resources deployed"));
    assert_eq!(p.status.phase, Some(Failed));
    assert!(p.transitions.is_empty());
    assert_eq!(p.requeue_after, None);
}

#[test]
fn the_deletion_on_failure_grace_period_keeps_the_resources_for_debugging() {
    let p = failed().annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1).run();
    assert!(p.deletions.is_empty());
    assert_eq!(
        condition(&p, DELETING_RESOURCES),
        (
            "False",
            "DeletionPaused",
            "workload.codeflare.dev.appwrapper/deletionOnFailureGracePeriodDuration has value 1h0m0s"
        )
    );
    assert_eq!(since(&p, DELETING_RESOURCES), now());
    assert_eq!(p.requeue_after, Some(secs(3600)));
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
    assert_eq!(condition(&p, QUOTA_RESERVED).0, "True", "the quota is held while paused");
}

#[test]
fn a_deletion_pause_under_way_waits_for_the_rest_of_it() {
    let p = failed()
        .annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1)
        .cond_r(DELETING_RESOURCES, false, "DeletionPaused", 3599)
        .run();
    assert!(p.deletions.is_empty());
    assert_eq!(p.requeue_after, Some(secs(1)));
    assert_eq!(since(&p, DELETING_RESOURCES), ago(3599));
}

#[test]
fn once_the_deletion_pause_is_over_the_resources_are_deleted() {
    let p = failed()
        .annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1)
        .cond_r(DELETING_RESOURCES, false, "DeletionPaused", 3600)
        .run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(condition(&p, DELETING_RESOURCES), ("True", "DeletionInitiated", ""));
    assert_eq!(since(&p, DELETING_RESOURCES), now());

    // The deletion under way is not paused again.
    let p = failed()
        .annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1)
        .cond_r(DELETING_RESOURCES, true, "DeletionInitiated", 10)
        .component(ComponentState::Absent)
        .run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("False", "Failed", "Resources deleted for failed AppWrapper"));
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Failed", "No resources deployed"));
    assert_eq!(condition(&p, DELETING_RESOURCES), ("False", "DeletionComplete", ""));
}

#[test]
fn the_deletion_pause_starts_fresh_after_an_earlier_deletion() {
    // A reset two hours ago left DeletingResources False; the pause still lasts the full hour.
    let p = failed()
        .annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1)
        .cond_r(DELETING_RESOURCES, false, "DeletionComplete", 7200)
        .run();
    assert!(p.deletions.is_empty());
    assert_eq!(condition(&p, DELETING_RESOURCES).1, "DeletionPaused");
    assert_eq!(since(&p, DELETING_RESOURCES), now());
    assert_eq!(p.requeue_after, Some(secs(3600)));
}

#[test]
fn suspending_a_failed_appwrapper_cuts_the_deletion_pause_short() {
    let p = failed()
        .annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1)
        .cond_r(DELETING_RESOURCES, false, "DeletionPaused", 10)
        .suspend()
        .run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(condition(&p, DELETING_RESOURCES), ("True", "DeletionInitiated", ""));
    assert_eq!(p.status.phase, Some(Failed), "a Failed AppWrapper does not go Suspending");
    assert!(p.events.is_empty());

    let p = failed().annotation(ONE_HOUR_DELAY.0, ONE_HOUR_DELAY.1).suspend().component(ComponentState::Absent).run();
    assert_eq!(
        condition(&p, RESOURCES_DEPLOYED),
        ("False", "Failed", "Kueue forced resource deletion by suspending AppWrapper")
    );
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Failed", "No resources deployed"));
}

#[test]
fn without_a_deletion_pause_suspend_changes_nothing_for_a_failed_appwrapper() {
    let p = failed().suspend().component(ComponentState::Absent).run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).2, "Resources deleted for failed AppWrapper");
    assert_eq!(p.status.phase, Some(Failed));
}

// ---------------------------------------------------------------------------------------------
// Succeeded

/// Succeeded, deployed `deployed` seconds ago, with a 1 h success TTL.
fn succeeded(deployed: i64) -> Fx {
    Fx::new()
        .annotation(SUCCESS_TTL_DURATION, "1h")
        .phase(Succeeded)
        .component_created()
        .cond_r(QUOTA_RESERVED, false, "Succeeded", 100)
        .cond_r(RESOURCES_DEPLOYED, true, "Succeeded", deployed)
        .component(present())
}

#[test]
fn a_succeeded_appwrapper_keeps_its_resources_for_the_success_ttl() {
    let fx = succeeded(3599);
    let p = fx.run();
    assert!(p.deletions.is_empty());
    assert_eq!(p.requeue_after, Some(secs(1)));
    assert_eq!(p.status, fx.status());
}

#[test]
fn the_success_ttl_counts_from_the_deploy_time() {
    let p = succeeded(3600).run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True", "until everything is gone");

    let p = succeeded(3601).component(ComponentState::Absent).run();
    assert_eq!(
        condition(&p, RESOURCES_DEPLOYED),
        ("False", "Succeeded", "Time to live after success of 1h0m0s expired")
    );
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Succeeded", ""));
    assert_eq!(p.status.phase, Some(Succeeded));
    assert!(p.transitions.is_empty());
}

#[test]
fn a_succeeded_appwrapper_ignores_suspend() {
    let p = succeeded(100).suspend().run();
    assert_eq!(p.status.phase, Some(Succeeded));
    assert!(p.transitions.is_empty() && p.events.is_empty() && p.deletions.is_empty());
    assert_eq!(p.requeue_after, Some(secs(3500)));
}

#[test]
fn a_succeeded_appwrapper_with_its_resources_gone_does_nothing() {
    let fx = succeeded(7200).cond_r(RESOURCES_DEPLOYED, false, "Succeeded", 10).component(ComponentState::Absent);
    let p = fx.run();
    assert_eq!(p.status, fx.status());
    assert_eq!(p.requeue_after, None);
    assert!(p.deletions.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Deletion of the AppWrapper

#[test]
fn a_deleted_appwrapper_deletes_its_resources_while_terminating() {
    let p = running().deleted().pods(0, 2, 0, 0).run();
    assert_eq!(p.deletions, [delete_job(false)]);
    assert_eq!(p.status.phase, Some(Terminating));
    assert_eq!(p.transitions, [Terminating]);
    assert!(!p.remove_finalizer);
    assert_eq!(p.requeue_after, Some(secs(5)));
    assert_eq!(condition(&p, RESOURCES_DEPLOYED).0, "True");
}

#[test]
fn a_terminating_appwrapper_enters_terminating_only_once() {
    let p = Fx::new().phase(Terminating).deployed(600).component_created().component(being_deleted()).deleted().run();
    assert_eq!(p.status.phase, Some(Terminating));
    assert!(p.transitions.is_empty());
    assert!(!p.remove_finalizer);
}

#[test]
fn once_everything_is_gone_the_finalizer_is_removed() {
    let p = running().deleted().component(ComponentState::Absent).run();
    assert_eq!(condition(&p, RESOURCES_DEPLOYED), ("False", "Terminating", "Resources successfully deleted"));
    assert_eq!(condition(&p, QUOTA_RESERVED), ("False", "Terminating", "No resources deployed"));
    assert!(p.remove_finalizer);
    assert!(p.deletions.is_empty());
    assert_eq!(p.status.phase, Some(Running), "upstream writes no phase here");
}

#[test]
fn a_deleted_suspended_appwrapper_just_drops_its_finalizer() {
    let fx = Fx::new()
        .phase(Suspended)
        .cond_r(QUOTA_RESERVED, false, "Suspended", 100)
        .cond_r(RESOURCES_DEPLOYED, false, "Suspended", 100)
        .deleted();
    let p = fx.run();
    assert!(p.remove_finalizer);
    assert_eq!(p.status, fx.status());
}

#[test]
fn a_deleted_appwrapper_without_the_finalizer_is_left_alone() {
    let fx = running().deleted().without_finalizer().pods(0, 2, 0, 0);
    let p = fx.run();
    assert_eq!(p.status, fx.status());
    assert!(p.deletions.is_empty() && !p.remove_finalizer && p.transitions.is_empty());
}

// ---------------------------------------------------------------------------------------------
// set_condition

#[test]
fn set_condition_moves_the_transition_time_only_when_the_status_flips() {
    let (t1, t2, t3) = (ago(300), ago(200), ago(100));
    let mut conds = vec![];
    set_condition(&mut conds, PODS_READY, false, "Other", "", t1);
    set_condition(&mut conds, UNHEALTHY, true, "A", "m1", t1);
    assert_eq!(conds.len(), 2);
    assert_eq!((conds[1].status.as_str(), conds[1].last_transition_time.0), ("True", t1));

    set_condition(&mut conds, UNHEALTHY, true, "B", "m2", t2);
    assert_eq!((conds[1].reason.as_str(), conds[1].message.as_str()), ("B", "m2"), "reason and message follow");
    assert_eq!(conds[1].last_transition_time.0, t1, "same status: the time stays");

    set_condition(&mut conds, UNHEALTHY, false, "C", "", t3);
    assert_eq!((conds[1].status.as_str(), conds[1].reason.as_str()), ("False", "C"));
    assert_eq!(conds[1].last_transition_time.0, t3);

    assert_eq!(conds.len(), 2, "updated in place");
    assert_eq!((conds[0].type_.as_str(), conds[0].last_transition_time.0), (PODS_READY, t1), "others untouched");
}

// ---------------------------------------------------------------------------------------------
// PodSummary

fn pod(phase: Option<&str>, terminating: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            deletion_timestamp: terminating.then(|| Time(ago(1))),
            ..Default::default()
        },
        status: Some(PodStatus { phase: phase.map(Into::into), ..Default::default() }),
        ..Default::default()
    }
}

fn terminated(code: i32) -> ContainerStatus {
    ContainerStatus {
        name: "c".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code: code, ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Failed pod whose app containers exited with `codes`.
fn failed_pod(codes: &[i32]) -> Pod {
    let mut p = pod(Some("Failed"), false);
    p.status.as_mut().unwrap().container_statuses = Some(codes.iter().map(|&c| terminated(c)).collect());
    p
}

fn ft(annotations: &[(&str, &str)]) -> FaultTolerance {
    let meta = ObjectMeta {
        annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    };
    FaultToleranceConfig::default().for_appwrapper(&meta)
}

#[test]
fn pod_summary_skips_terminating_running_pods_but_counts_terminating_pending_ones() {
    let pods = [
        pod(Some("Pending"), false),
        pod(Some("Pending"), true),
        pod(Some("Running"), false),
        pod(Some("Running"), true),
        pod(Some("Succeeded"), false),
        pod(Some("Succeeded"), true),
        pod(Some("Failed"), false),
        pod(Some("Unknown"), false),
        pod(None, false),
    ];
    let s = PodSummary::of(&pods, &ft(&[]));
    assert_eq!(s, PodSummary { pending: 2, running: 1, succeeded: 2, failed: 1, terminal_failure: false });
}

#[test]
fn a_listed_terminal_exit_code_makes_the_failure_terminal() {
    let ft = ft(&[(TERMINAL_EXIT_CODES, "3,42")]);
    assert!(PodSummary::of(&[failed_pod(&[0, 42])], &ft).terminal_failure);
    assert!(PodSummary::of(&[failed_pod(&[1]), failed_pod(&[3])], &ft).terminal_failure, "any failed pod");
    assert!(!PodSummary::of(&[failed_pod(&[1, 2])], &ft).terminal_failure);
    assert!(!PodSummary::of(&[failed_pod(&[])], &ft).terminal_failure);
}

#[test]
fn with_retryable_exit_codes_any_other_non_zero_code_is_terminal() {
    let ft = ft(&[(RETRYABLE_EXIT_CODES, "1,2")]);
    assert!(!PodSummary::of(&[failed_pod(&[2])], &ft).terminal_failure);
    assert!(!PodSummary::of(&[failed_pod(&[0, 1])], &ft).terminal_failure, "exit 0 is never judged");
    assert!(PodSummary::of(&[failed_pod(&[1, 7])], &ft).terminal_failure);
}

#[test]
fn without_exit_code_lists_no_failure_is_terminal() {
    assert!(!PodSummary::of(&[failed_pod(&[1, 3, 137])], &ft(&[])).terminal_failure);
}

#[test]
fn only_failed_pods_app_containers_decide_terminal_failures() {
    let ft = ft(&[(TERMINAL_EXIT_CODES, "3")]);
    let mut init = pod(Some("Failed"), false);
    init.status.as_mut().unwrap().init_container_statuses = Some(vec![terminated(3)]);
    assert!(!PodSummary::of(&[init], &ft).terminal_failure, "init containers are not inspected");

    let mut running = pod(Some("Running"), false);
    running.status.as_mut().unwrap().container_statuses = Some(vec![terminated(3)]);
    let s = PodSummary::of(&[running], &ft);
    assert_eq!((s.running, s.terminal_failure), (1, false), "only Failed pods are inspected");

    let mut waiting = pod(Some("Failed"), false);
    waiting.status.as_mut().unwrap().container_statuses =
        Some(vec![ContainerStatus { name: "c".into(), ..Default::default() }]);
    assert!(!PodSummary::of(&[waiting], &ft).terminal_failure, "no terminated state, no exit code");
}
