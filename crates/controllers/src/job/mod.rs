//! The batch/v1 Job controller, with upstream's failure handling.

pub mod backoff;
pub mod indexes;
pub mod pod_failure_policy;
pub mod success_policy;
