//! JobSet (`jobset.x-k8s.io/v1alpha2`): types, well-known names, defaulting and validation.

pub mod agent;
pub mod defaults;
pub mod exclusive;
pub mod gang;
pub mod keys;
pub mod types;
pub mod validation;

pub use defaults::default_jobset;
pub use types::*;
pub use validation::{ClaimLookup, Features, validate_jobset, validate_jobset_in};
