//! AppWrapper (`workload.codeflare.dev/v1beta2`): types, well-known names and the controller's
//! configuration, as project-codeflare/appwrapper.

pub mod config;
pub mod keys;
pub mod types;

pub use config::{AppWrapperConfig, AutopilotConfig, FaultTolerance, FaultToleranceConfig, ResourceTaint};
pub use types::*;
