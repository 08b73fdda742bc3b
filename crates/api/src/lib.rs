//! JobSet and AppWrapper resource definitions, well-known names and admission logic.
//! Pure: no I/O.

pub mod admission;
pub mod appwrapper;
pub mod crdgen;
pub mod crds;
pub mod field;
pub mod job;
pub mod job_status;
pub mod jobset;
pub mod manifest;
pub mod pdb;
pub mod pod;
pub mod quantity;
pub mod validation;
pub mod workload;
