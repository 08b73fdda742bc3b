//! Reconcilers, each a kube-runtime controller (`reconcile(Arc<K>, Arc<Ctx>) -> Result<Action>`)
//! around pure decision functions that are unit-tested table-style.

pub mod appwrapper;
pub mod job;
pub mod jobset;
pub mod nodelifecycle;
pub mod pod_index;
pub mod scheduler;
