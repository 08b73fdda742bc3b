//! Well-known names of `jobset.x-k8s.io`: labels, annotations, condition types, reasons and
//! messages, exactly as upstream kubernetes-sigs/jobset spells them (`api/jobset/v1alpha2`,
//! `pkg/constants`). Extensions of jobset-rs are marked as such.

pub const GROUP: &str = "jobset.x-k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";
pub const KIND: &str = "JobSet";
pub const PLURAL: &str = "jobsets";

// Labels and annotations on child Jobs and their pod templates (both, same value).
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";
pub const REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
pub const JOB_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/job-restart-attempt";
/// Extension: `status.replicatedJobsStatus[rj].restarts` when the Job was created (the
/// `RestartReplicatedJob` actions bump it).
pub const REPLICATED_JOB_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/replicatedjob-restart-attempt";
pub const REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
pub const GLOBAL_REPLICAS: &str = "jobset.sigs.k8s.io/global-replicas";
pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
pub const JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
pub const JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
pub const GROUP_NAME: &str = "jobset.sigs.k8s.io/group-name";
pub const GROUP_REPLICAS: &str = "jobset.sigs.k8s.io/group-replicas";
pub const JOB_GROUP_INDEX: &str = "jobset.sigs.k8s.io/job-group-index";
pub const COORDINATOR: &str = "jobset.sigs.k8s.io/coordinator";
pub const PRIORITY: &str = "jobset.sigs.k8s.io/priority";
pub const IN_PLACE_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";
pub const DISABLE_IN_PLACE_RESTART: &str = "jobset.sigs.k8s.io/disable-in-place-restart";
/// KEP-1282: `status.executionAttempts` when the Job was created or resumed (Jobs and pod
/// templates; an annotation only).
pub const EXECUTION_ATTEMPT: &str = "jobset.sigs.k8s.io/execution-attempt";

// Exclusive placement.
pub const EXCLUSIVE_TOPOLOGY: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";
pub const NODE_SELECTOR_STRATEGY: &str = "alpha.jobset.sigs.k8s.io/node-selector";
pub const NAMESPACED_JOB: &str = "alpha.jobset.sigs.k8s.io/namespaced-job";
pub const NO_SCHEDULE_TAINT: &str = "alpha.jobset.sigs.k8s.io/no-schedule";

/// The value of `spec.managedBy` that means "the built-in controller".
pub const JOBSET_CONTROLLER_NAME: &str = "jobset.sigs.k8s.io/jobset-controller";

// Condition types.
pub const COND_COMPLETED: &str = "Completed";
pub const COND_FAILED: &str = "Failed";
pub const COND_SUSPENDED: &str = "Suspended";
pub const COND_RESTARTING: &str = "RestartingJobSet";
pub const COND_STARTUP_IN_PROGRESS: &str = "StartupPolicyInProgress";
pub const COND_STARTUP_COMPLETED: &str = "StartupPolicyCompleted";

// Condition and event reasons.
pub const REASON_ALL_JOBS_COMPLETED: &str = "AllJobsCompleted";
pub const REASON_FAILED_JOBS: &str = "FailedJobs";
pub const REASON_REACHED_MAX_RESTARTS: &str = "ReachedMaxRestarts";
/// KEP-1186: `activeDeadlineSeconds` passed.
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const REASON_FAIL_JOBSET_ACTION: &str = "FailJobSetFailurePolicyAction";
pub const REASON_SUSPENDED: &str = "SuspendedJobs";
pub const REASON_RESUMED: &str = "ResumeJobs";
pub const REASON_STARTUP_IN_PROGRESS: &str = "InOrderStartupPolicyInProgress";
pub const REASON_STARTUP_COMPLETED: &str = "InOrderStartupPolicyCompleted";
pub const REASON_DEFAULT_FAILURE_POLICY: &str = "DefaultFailurePolicy";
/// Prefix of the `RestartingJobSet` reason when a named rule matched: `FailurePolicy_<rule>`.
pub const REASON_FAILURE_POLICY_PREFIX: &str = "FailurePolicy_";
pub const REASON_JOBS_READY: &str = "JobsReady";
pub const REASON_JOBSET_FAILED: &str = "JobSetFailed";
pub const REASON_JOBSET_COMPLETED: &str = "JobSetCompleted";
pub const REASON_JOBSET_SUSPENDED: &str = "JobSetSuspended";
pub const REASON_RESTART_JOBSET_ACTION: &str = "RestartJobSetFailurePolicyAction";
pub const REASON_RESTART_JOBSET_IGNORE_ACTION: &str = "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction";
pub const REASON_RESTART_JOB_ACTION: &str = "RestartJobFailurePolicyAction";
pub const REASON_RESTART_JOB_IGNORE_ACTION: &str = "RestartJobAndIgnoreMaxRestartsFailurePolicyAction";
/// Extension (event reason).
pub const REASON_RESTART_REPLICATED_JOB_ACTION: &str = "RestartReplicatedJobFailurePolicyAction";
/// Extension (event reason).
pub const REASON_RESTART_REPLICATED_JOB_IGNORE_ACTION: &str =
    "RestartReplicatedJobAndIgnoreMaxRestartsFailurePolicyAction";
/// Extension (event reason).
pub const REASON_FAIL_JOB_ACTION: &str = "FailJobFailurePolicyAction";
pub const REASON_JOB_CREATION_FAILED: &str = "JobCreationFailed";
pub const REASON_HEADLESS_SERVICE_CREATION_FAILED: &str = "HeadlessServiceCreationFailed";
pub const REASON_PVC_CREATION_FAILED: &str = "PVCCreationFailed";
/// KEP-1150: a resumed Job refused its template's new container resources.
pub const REASON_FAILED_RESOURCE_PROPAGATION: &str = "FailedResourcePropagation";

// Messages.
pub const MSG_ALL_JOBS_COMPLETED: &str = "jobset completed successfully";
pub const MSG_FAILED_JOBS: &str = "jobset failed due to one or more job failures";
pub const MSG_REACHED_MAX_RESTARTS: &str = "jobset failed due to reaching max number of restarts";
pub const MSG_FAIL_JOBSET_ACTION: &str = "applying FailJobSet failure policy action";
pub const MSG_RESTART_JOBSET_ACTION: &str = "applying RestartJobSet failure policy action";
pub const MSG_RESTART_JOBSET_IGNORE_ACTION: &str = "applying RestartJobSetAndIgnoreMaxRestarts failure policy action";
pub const MSG_RESTART_JOB_ACTION: &str = "applying RestartJob failure policy action";
pub const MSG_RESTART_JOB_IGNORE_ACTION: &str = "applying RestartJobAndIgnoreMaxRestarts failure policy action";
pub const MSG_RESTART_REPLICATED_JOB_ACTION: &str = "applying RestartReplicatedJob failure policy action";
pub const MSG_RESTART_REPLICATED_JOB_IGNORE_ACTION: &str =
    "applying RestartReplicatedJobAndIgnoreMaxRestarts failure policy action";
pub const MSG_FAIL_JOB_ACTION: &str = "applying FailJob failure policy action";
pub const MSG_SUSPENDED: &str = "jobset is suspended";
pub const MSG_RESUMED: &str = "jobset is resumed";
pub const MSG_STARTUP_IN_PROGRESS: &str = "in order startup policy is in progress";
pub const MSG_STARTUP_COMPLETED: &str = "in order startup policy has completed";
pub const MSG_JOBS_READY: &str = "all jobs are ready";
pub const MSG_JOBSET_FAILED: &str = "jobset failed";

/// The batch/v1 Job failure reasons a failure-policy rule may name (`onJobFailureReasons`).
pub const JOB_FAILURE_REASONS: &[&str] =
    &["BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded", "PodFailurePolicy"];
