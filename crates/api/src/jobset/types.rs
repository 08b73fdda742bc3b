//! The `jobset.x-k8s.io/v1alpha2` JobSet, field for field as upstream's `jobset_types.go`.
//!
//! Extensions of jobset-rs (additive, ignored by upstream tools):
//! - failure-policy actions `RestartReplicatedJob`, `RestartReplicatedJobAndIgnoreMaxRestarts` and
//!   `FailJob` (KEP-262 future work);
//! - `ReplicatedJobStatus.restarts`, `.restartsCountTowardsMax` (the replicated job's own restarts)
//!   and `.failedJobIndexes` (the Jobs a `FailJob` rule left failed);
//! - `JobSetStatus.restartHistory`: the last restarts, their triggers and phase times
//!   ([`RestartRecord`]);
//! - per-rule restart budgets: `FailurePolicyRule.maxRestarts` and
//!   `JobSetStatus.failurePolicyRulesStatus` ([`FailurePolicyRuleStatus`]).
//!
//! A replicated job's `template` is kept as raw JSON ([`JobTemplate`]) so that fields a typed
//! client does not know (e.g. the local-mode `setConditionReason` of a podFailurePolicy rule)
//! reach the child Jobs unchanged.
//!
//! The CRD's schema is derived from these types (`crate::crdgen`): the `#[schemars]` attributes
//! carry upstream's kubebuilder markers (CEL rules, list types, bounds, defaults, required).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::crdgen::any_object")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: JobSetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<JobSetStatus>,
}

impl kube_core::Resource for JobSet {
    type DynamicType = ();
    type Scope = kube_core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        keys::KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        keys::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        keys::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        keys::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl kube_core::object::HasStatus for JobSet {
    type Status = JobSetStatus;
    fn status(&self) -> Option<&JobSetStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<JobSetStatus> {
        &mut self.status
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))",
    "message": "StartupPolicy and DependsOn APIs are mutually exclusive",
}]))]
pub struct JobSetSpec {
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub success_policy: Option<SuccessPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub startup_policy: Option<StartupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<Coordinator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// KEP-1186: how long the JobSet may be continuously active (from `status.startTime`) before
    /// it fails with reason `DeadlineExceeded` and its active Jobs are deleted. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub volume_claim_policies: Vec<VolumeClaimPolicy>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["name", "template"]))]
pub struct ReplicatedJob {
    pub name: String,
    #[serde(default = "default_group_name")]
    pub group_name: String,
    #[serde(default)]
    pub template: JobTemplate,
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"], "x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub depends_on: Vec<DependsOn>,
}

fn default_group_name() -> String {
    "default".into()
}
fn default_replicas() -> i32 {
    1
}

/// A `batch/v1` JobTemplateSpec kept as the JSON the user wrote, with typed getters for the
/// fields the controller and validation read. Its schema is `batch/v1` JobTemplateSpec's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(with = "k8s_openapi::api::batch::v1::JobTemplateSpec")]
pub struct JobTemplate(pub Value);

impl JobTemplate {
    fn spec_field(&self, key: &str) -> Option<&Value> {
        self.0.get("spec")?.get(key)
    }
    pub fn parallelism(&self) -> Option<i32> {
        self.spec_field("parallelism")?.as_i64().map(|v| v as i32)
    }
    pub fn completions(&self) -> Option<i32> {
        self.spec_field("completions")?.as_i64().map(|v| v as i32)
    }
    pub fn completion_mode(&self) -> Option<&str> {
        self.spec_field("completionMode")?.as_str()
    }
    pub fn is_indexed(&self) -> bool {
        self.completion_mode() == Some("Indexed")
    }
    /// The pod template (`spec.template`), if any.
    pub fn pod_template(&self) -> Option<&Value> {
        self.spec_field("template")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    pub name: String,
    pub status: DependsOnStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DependsOnStatus {
    Ready,
    Complete,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    #[serde(default, rename = "enableDNSHostnames", skip_serializing_if = "Option::is_none")]
    pub enable_dns_hostnames: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    All,
    Any,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    #[serde(default)]
    pub max_restarts: i32,
    #[serde(default)]
    pub restart_strategy: RestartStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<FailurePolicyRule>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RestartStrategy {
    #[default]
    Recreate,
    BlockingRecreate,
    InPlaceRestart,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["action", "name"]))]
pub struct FailurePolicyRule {
    #[serde(default)]
    pub name: String,
    pub action: FailurePolicyAction,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_message_patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
    /// Extension (per-rule restart budget, upstream issue #976): the restarts this rule may make,
    /// counted in `status.failurePolicyRulesStatus` and not towards `failurePolicy.maxRestarts`.
    /// Only for `RestartJobSet`, `RestartJob` and `RestartReplicatedJob`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_restarts: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FailurePolicyAction {
    FailJobSet,
    RestartJobSet,
    RestartJobSetAndIgnoreMaxRestarts,
    RestartJob,
    RestartJobAndIgnoreMaxRestarts,
    /// Extension: recreate every Job of the failed Job's replicated job.
    RestartReplicatedJob,
    /// Extension: as `RestartReplicatedJob`, without spending `maxRestarts`.
    RestartReplicatedJobAndIgnoreMaxRestarts,
    /// Extension: leave the failed Job failed; the JobSet goes on.
    FailJob,
}

impl FailurePolicyAction {
    pub const ALL: [FailurePolicyAction; 8] = [
        FailurePolicyAction::FailJobSet,
        FailurePolicyAction::RestartJobSet,
        FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts,
        FailurePolicyAction::RestartJob,
        FailurePolicyAction::RestartJobAndIgnoreMaxRestarts,
        FailurePolicyAction::RestartReplicatedJob,
        FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts,
        FailurePolicyAction::FailJob,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicyAction::FailJobSet => "FailJobSet",
            FailurePolicyAction::RestartJobSet => "RestartJobSet",
            FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts => "RestartJobSetAndIgnoreMaxRestarts",
            FailurePolicyAction::RestartJob => "RestartJob",
            FailurePolicyAction::RestartJobAndIgnoreMaxRestarts => "RestartJobAndIgnoreMaxRestarts",
            FailurePolicyAction::RestartReplicatedJob => "RestartReplicatedJob",
            FailurePolicyAction::RestartReplicatedJobAndIgnoreMaxRestarts => "RestartReplicatedJobAndIgnoreMaxRestarts",
            FailurePolicyAction::FailJob => "FailJob",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    pub startup_policy_order: StartupPolicyOrder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StartupPolicyOrder {
    AnyOrder,
    InOrder,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Coordinator {
    pub replicated_job: String,
    // Upstream's Go `int`: an integer without a format.
    #[serde(default)]
    #[schemars(schema_with = "crate::crdgen::integer")]
    pub job_index: i32,
    #[serde(default)]
    #[schemars(schema_with = "crate::crdgen::integer")]
    pub pod_index: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
    "message": "namespace cannot be set for VolumeClaimPolicies templates",
}]))]
pub struct VolumeClaimPolicy {
    #[serde(default)]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    pub templates: Vec<PersistentVolumeClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<VolumeRetentionPolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRetentionPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Delete"))]
    pub when_deleted: Option<RetentionPolicyAction>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RetentionPolicyAction {
    Delete,
    Retain,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub restarts: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts_count_towards_max: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub terminal_state: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs_status: Vec<ReplicatedJobStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub previous_in_place_restart_attempt: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_in_place_restart_attempt: Option<i32>,
    /// Extension: the JobSet's last restarts, oldest first (at most the controller's restart
    /// history limit, 10 by default), each with its trigger and the time each phase ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub restart_history: Vec<RestartRecord>,
    /// Extension (scoped in-place restart): JobSet-wide in-place restarts, counted only while the
    /// failure policy restarts some replicated job in place by itself (otherwise, as upstream,
    /// the attempts themselves tell the count and this stays 0). Counts towards `maxRestarts`.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub in_place_restarts: i32,
    /// KEP-1282: the JobSet's runs; 0 for the first, one more for each resume and each restart
    /// of the whole JobSet. Unset until it first runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub execution_attempts: Option<i32>,
    /// KEP-1186: when the JobSet last became active (first start, resume, or restart of the
    /// whole JobSet); cleared while suspended. `activeDeadlineSeconds` counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Extension (per-rule restart budget): the restarts of each failure-policy rule that has its
    /// own `maxRestarts`, once it restarted something.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub failure_policy_rules_status: Vec<FailurePolicyRuleStatus>,
}

/// Extension: the restarts a failure-policy rule with its own `maxRestarts` made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["name", "restarts"]))]
pub struct FailurePolicyRuleStatus {
    pub name: String,
    /// Restarts the rule made (recreated or in place), each spending its `maxRestarts`.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub restarts: i32,
}

/// Extension: what a restart restarted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RestartScope {
    /// Every Job (or, in place, every pod) of the JobSet.
    #[default]
    JobSet,
    /// Every Job of one replicated job (`target`).
    ReplicatedJob,
    /// One Job (`target`).
    Job,
}

impl RestartScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartScope::JobSet => "JobSet",
            RestartScope::ReplicatedJob => "ReplicatedJob",
            RestartScope::Job => "Job",
        }
    }
}

impl RestartStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartStrategy::Recreate => "Recreate",
            RestartStrategy::BlockingRecreate => "BlockingRecreate",
            RestartStrategy::InPlaceRestart => "InPlaceRestart",
        }
    }
}

/// Extension: one restart, recorded by the controller in the status write that decided it (so a
/// restarted controller can neither lose nor repeat it), its phase times filled in by the
/// reconciles that first observe each phase's end. Times are `MicroTime`s: restarts take
/// fractions of a second, which `Time`'s whole seconds would hide.
///
/// Phases: `failedAt` (the failure: the failed container's `finishedAt`, else the failed Job's
/// `Failed` condition time; 1 s resolution, as Kubernetes keeps them) → `decidedAt` (the
/// restart decided and written) → `stoppedAt` (Recreate: no Job of the old attempt left in the
/// scope, so its pods are gone; in place: no pod left at the deprecated attempt, every agent has
/// restarted its pod) → `barrierLiftedAt` (in place only: `currentInPlaceRestartAttempt` moved to
/// the new attempt) → `runningAt` (every Job of the new attempt in the scope ready, i.e. every
/// pod running and ready, or done).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["attempt", "strategy", "scope", "trigger", "decidedAt"]))]
pub struct RestartRecord {
    /// The attempt the restart began: `restarts` after a JobSet restart, the replicated job's
    /// `restarts`, the Job's `jobRestarts` entry, or the in-place attempt after the deprecated one.
    pub attempt: i32,
    pub strategy: RestartStrategy,
    pub scope: RestartScope,
    /// The replicated job (scope `ReplicatedJob`) or Job (scope `Job`) restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub trigger: RestartTrigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<MicroTime>,
    pub decided_at: MicroTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_lifted_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<MicroTime>,
    /// From `failedAt` (else `decidedAt`) to `runningAt`, as a Go duration (`2.345s`), once the
    /// restart is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Set when the restart never finished: a later restart of the same or a wider scope, or the
    /// end of the JobSet, cut it short.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub superseded: bool,
}

/// Extension: what set a restart off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["reason", "action", "countsTowardsMax"]))]
pub struct RestartTrigger {
    /// The first failed Job (a failure-policy restart) or the Job of the first failed pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The first failed pod, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The failed container of that pod, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The failed Job's `Failed` condition reason (`BackoffLimitExceeded`, `PodFailurePolicy`,
    /// ...), or for an in-place restart `WorkerFailed` (a worker container of the current attempt
    /// failed) or `PodRestartedInPlace` (an agent moved its pod past the current attempt).
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The failure-policy rule that applied, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The failure-policy action taken (`RestartJobSet` for the default policy and for in-place
    /// restarts).
    pub action: String,
    /// Whether the restart counts towards `maxRestarts`.
    pub counts_towards_max: bool,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["active", "failed", "name", "ready", "succeeded", "suspended"]))]
pub struct ReplicatedJobStatus {
    pub name: String,
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub suspended: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "atomic"))]
    pub job_restarts: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "atomic"))]
    pub job_restarts_count_towards_max: Vec<i32>,
    /// Extension: `RestartReplicatedJob*` restarts of this replicated job.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
    /// Extension: `RestartReplicatedJob` restarts of this replicated job (they count towards
    /// `maxRestarts`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts_count_towards_max: i32,
    /// Extension: job indexes a `FailJob` rule left failed, ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub failed_job_indexes: Vec<i32>,
    /// Extension (scoped in-place restart, `RestartReplicatedJob*` under `InPlaceRestart`): every
    /// pod of this replicated job is at this in-place restart attempt; its agents lift their
    /// barriers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_in_place_restart_attempt: Option<i32>,
    /// Extension: pods of this replicated job at or below this attempt restart in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub previous_in_place_restart_attempt: Option<i32>,
    /// Extension: in-place restarts of this replicated job alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub in_place_restarts: i32,
    /// Extension: those of [`Self::in_place_restarts`] that count towards `maxRestarts`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub in_place_restarts_count_towards_max: i32,
    /// Extension (scoped in-place restart, `RestartJob*` under `InPlaceRestart`): the in-place
    /// restart state of each Job of this replicated job that restarted in place alone, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["jobIndex"]))]
    pub in_place_restart_jobs: Vec<JobInPlaceRestartStatus>,
}

/// Extension: the in-place restart state of one Job (its pods), for `RestartJob*` rules under
/// `InPlaceRestart`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobInPlaceRestartStatus {
    /// The Job's index (label `jobset.sigs.k8s.io/job-index`).
    #[schemars(range(min = 0))]
    pub job_index: i32,
    /// Every pod of this Job is at this attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_in_place_restart_attempt: Option<i32>,
    /// Pods of this Job at or below this attempt restart in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub previous_in_place_restart_attempt: Option<i32>,
    /// In-place restarts of this Job alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
    /// Those of `restarts` that count towards `maxRestarts`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts_count_towards_max: i32,
}

impl JobSet {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }
    pub fn suspended(&self) -> bool {
        self.spec.suspend == Some(true)
    }
    pub fn restart_strategy(&self) -> RestartStrategy {
        self.spec.failure_policy.as_ref().map(|f| f.restart_strategy).unwrap_or_default()
    }
    /// Whether a headless Service is wanted (nil network or flag: none, as upstream's controller).
    pub fn dns_hostnames(&self) -> bool {
        self.spec.network.as_ref().and_then(|n| n.enable_dns_hostnames) == Some(true)
    }
    /// `spec.network.subdomain`, else the JobSet name.
    pub fn subdomain(&self) -> &str {
        self.spec.network.as_ref().and_then(|n| n.subdomain.as_deref()).filter(|s| !s.is_empty()).unwrap_or(self.name())
    }
    pub fn replicated_job(&self, name: &str) -> Option<&ReplicatedJob> {
        self.spec.replicated_jobs.iter().find(|r| r.name == name)
    }
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
    pub fn condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
    /// Completed or Failed is True.
    pub fn finished(&self) -> bool {
        self.condition_true(keys::COND_COMPLETED) || self.condition_true(keys::COND_FAILED)
    }
}

/// `<jobset>-<replicatedJob>-<jobIndex>` (`placement.GenJobName`).
pub fn job_name(jobset: &str, replicated_job: &str, index: i32) -> String {
    format!("{jobset}-{replicated_job}-{index}")
}
