//! AppWrapper (`workload.codeflare.dev/v1beta2`): types, well-known names, the controller's
//! configuration, podSets and admission validation, as project-codeflare/appwrapper.

pub mod config;
pub mod keys;
pub mod podsets;
pub mod types;
pub mod validation;

pub use config::{AppWrapperConfig, AutopilotConfig, FaultTolerance, FaultToleranceConfig, ResourceTaint, go_duration};
pub use types::*;
