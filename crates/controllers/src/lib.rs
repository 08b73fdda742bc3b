//! Reconcilers, each a kube-runtime controller (`reconcile(Arc<K>, Arc<Ctx>) -> Result<Action>`)
//! around pure decision functions that are unit-tested table-style.

pub mod appwrapper;
pub mod disruption;
pub mod job;
pub mod jobset;
pub mod listed;
pub mod metrics;
pub mod nodelifecycle;
pub mod pod_index;
pub mod scheduler;
pub mod shared_pods;

/// How a process drives a controller's life (`jobset manager`; local mode needs neither).
#[derive(Default)]
pub struct Lifecycle {
    /// Told once every cache the controller reads has its first complete list (`/readyz`).
    pub ready: Option<tokio::sync::oneshot::Sender<()>>,
    /// Once cancelled, no reconcile starts and the controller returns when those in flight
    /// have finished (kube-runtime's graceful shutdown, as controller-runtime's on SIGTERM).
    pub shutdown: Option<tokio_util::sync::CancellationToken>,
}

impl Lifecycle {
    /// Tells `ready` once `synced` (the caches' waits) completes, then never completes itself:
    /// meant for a `select!` beside the controller.
    async fn report_ready(ready: Option<tokio::sync::oneshot::Sender<()>>, synced: impl Future<Output = ()>) {
        synced.await;
        if let Some(tx) = ready {
            let _ = tx.send(());
        }
        std::future::pending::<()>().await
    }

    /// The graceful-shutdown trigger for kube-runtime's `Controller::graceful_shutdown_on`.
    async fn shutdown_trigger(shutdown: Option<tokio_util::sync::CancellationToken>) {
        match shutdown {
            Some(t) => t.cancelled_owned().await,
            None => std::future::pending().await,
        }
    }
}

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
