//! Well-known names of `workload.codeflare.dev`: labels, annotations, finalizer, phases' condition
//! types and reasons, exactly as project-codeflare/appwrapper spells them (`api/v1beta2`).

pub const GROUP: &str = "workload.codeflare.dev";
pub const VERSION: &str = "v1beta2";
pub const API_VERSION: &str = "workload.codeflare.dev/v1beta2";
pub const KIND: &str = "AppWrapper";
pub const PLURAL: &str = "appwrappers";

/// The `spec.managedBy` value this controller serves (an absent `managedBy` is served too).
pub const CONTROLLER_NAME: &str = "workload.codeflare.dev/appwrapper-controller";
/// On every wrapped top-level object and every pod template: the AppWrapper's name.
pub const APPWRAPPER_LABEL: &str = "workload.codeflare.dev/appwrapper";
pub const FINALIZER: &str = "workload.codeflare.dev/finalizer";
pub const USER_LABEL: &str = "workload.codeflare.dev/user";
pub const USERID_LABEL: &str = "workload.codeflare.dev/userid";
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

// Per-AppWrapper fault-tolerance annotations (read from the AppWrapper's own metadata only).
pub const ADMISSION_GRACE_PERIOD_DURATION: &str = "workload.codeflare.dev.appwrapper/admissionGracePeriodDuration";
pub const WARMUP_GRACE_PERIOD_DURATION: &str = "workload.codeflare.dev.appwrapper/warmupGracePeriodDuration";
pub const FAILURE_GRACE_PERIOD_DURATION: &str = "workload.codeflare.dev.appwrapper/failureGracePeriodDuration";
pub const RETRY_PAUSE_PERIOD_DURATION: &str = "workload.codeflare.dev.appwrapper/retryPausePeriodDuration";
pub const RETRY_LIMIT: &str = "workload.codeflare.dev.appwrapper/retryLimit";
pub const FORCEFUL_DELETION_GRACE_PERIOD_DURATION: &str =
    "workload.codeflare.dev.appwrapper/forcefulDeletionGracePeriodDuration";
pub const DELETION_ON_FAILURE_GRACE_PERIOD_DURATION: &str =
    "workload.codeflare.dev.appwrapper/deletionOnFailureGracePeriodDuration";
pub const SUCCESS_TTL_DURATION: &str = "workload.codeflare.dev.appwrapper/successTTLDuration";
pub const TERMINAL_EXIT_CODES: &str = "workload.codeflare.dev.appwrapper/terminalExitCodes";
pub const RETRYABLE_EXIT_CODES: &str = "workload.codeflare.dev.appwrapper/retryableExitCodes";

// PodSet annotations for topology-aware scheduling.
pub const TAS_POD_INDEX_LABEL: &str = "workload.codeflare.dev.appwrapper/tas-pod-index-label";
pub const TAS_SUB_GROUP_INDEX_LABEL: &str = "workload.codeflare.dev.appwrapper/tas-sub-group-index-label";
pub const TAS_SUB_GROUP_COUNT: &str = "workload.codeflare.dev.appwrapper/tas-sub-group-count";

// AppWrapper condition types.
pub const QUOTA_RESERVED: &str = "QuotaReserved";
pub const RESOURCES_DEPLOYED: &str = "ResourcesDeployed";
pub const PODS_READY: &str = "PodsReady";
pub const UNHEALTHY: &str = "Unhealthy";
pub const DELETING_RESOURCES: &str = "DeletingResources";
