//! JobSet and AppWrapper resource definitions, well-known names and admission logic.
//! Pure: no I/O.

pub mod admission;
pub mod appwrapper;
pub mod crdgen;
pub mod crds;
pub mod field;
pub mod job;
pub mod jobset;
pub mod validation;
