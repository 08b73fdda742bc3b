//! Reconcilers, each a kube-runtime controller (`reconcile(Arc<K>, Arc<Ctx>) -> Result<Action>`)
//! around pure decision functions that are unit-tested table-style.

pub mod appwrapper;
pub mod job;
pub mod jobset;
pub mod nodelifecycle;
pub mod pod_index;
pub mod scheduler;
pub mod shared_pods;

/// What a reconcile of the JobSet or AppWrapper controller can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Reconcile(String),
}

/// Publishes an event about `obj` (action `Reconciling`); a failure is only logged, as an event
/// is never worth failing a reconcile for.
pub(crate) async fn publish_event<K>(
    recorder: &kube::runtime::events::Recorder,
    obj: &K,
    warning: bool,
    reason: &str,
    message: &str,
) where
    K: kube::Resource<DynamicType = ()>,
{
    use kube::runtime::events::{Event, EventType};
    let ev = Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.to_string(),
        note: Some(message.to_string()),
        action: "Reconciling".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(kind = %K::kind(&()), name = obj.meta().name.as_deref().unwrap_or_default(), error = %err, "publishing an event failed");
    }
}
