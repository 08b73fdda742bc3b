//! The pod's scope (replicated job and Job index) for [`crate::run`]: configured, or read from
//! the pod's labels the first time the JobSet's status carries a scoped entry, so that a JobSet
//! without scoped in-place restart costs its agents no extra request.

use std::pin::Pin;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::time::Sleep;

use crate::backoff::JitteredBackoff;
use crate::config::AgentConfig;
use crate::decide::{JobSetView, Observed, Scope};

/// Where the agent's scope stands, and the JobSet to observe again once a failed pod GET is due
/// for its retry.
pub(crate) struct ScopeSource {
    /// `None` until read; `Some(None)` for a pod without the labels (only the JobSet's entry
    /// covers it).
    scope: Option<Option<Scope>>,
    pods: Api<Pod>,
    pod_name: String,
    backoff: JitteredBackoff,
    retry: Option<(JobSetView, Pin<Box<Sleep>>)>,
}

impl ScopeSource {
    pub(crate) fn new(cfg: &AgentConfig, client: kube::Client) -> ScopeSource {
        ScopeSource {
            scope: cfg.scope.clone().map(Some),
            pods: Api::namespaced(client, &cfg.namespace),
            pod_name: cfg.pod_name.clone(),
            backoff: JitteredBackoff::new(cfg.backoff),
            retry: None,
        }
    }

    /// `js` as this pod sees it. The first JobSet with a scoped entry makes an agent whose scope
    /// is unknown read its pod (one GET); a failed GET is retried after a back-off
    /// ([`ScopeSource::retry_due`]), the pod meanwhile covered by the JobSet's entry alone (see
    /// [`Observed::of`] for why that is safe).
    pub(crate) async fn observe(&mut self, js: JobSetView) -> Observed {
        let scoped = js.status.as_ref().is_some_and(|s| s.has_scoped_entries());
        if self.scope.is_none() {
            match &mut self.retry {
                _ if !scoped => self.retry = None,
                // The GET waits for its back-off; the retry observes this newer JobSet.
                Some((pending, _)) => *pending = js.clone(),
                None => match self.pods.get(&self.pod_name).await {
                    Ok(pod) => {
                        let scope = pod.metadata.labels.as_ref().and_then(Scope::of_labels);
                        match &scope {
                            Some(s) => {
                                tracing::info!(replicated_job = %s.replicated_job, job_index = s.job_index, "read the pod's scope")
                            }
                            None => tracing::warn!(
                                "the pod has no valid jobset.sigs.k8s.io/replicatedjob-name and job-index labels; \
                                 only the JobSet-wide in-place restart attempts apply to it"
                            ),
                        }
                        self.scope = Some(scope);
                    }
                    Err(e) => {
                        let delay = self.backoff.next_delay();
                        tracing::warn!(error = %e, retry_in = ?delay, "reading the own pod for its replicated job and Job index");
                        self.retry = Some((js.clone(), Box::pin(tokio::time::sleep(delay))));
                    }
                },
            }
        }
        Observed::of(&js, self.scope.as_ref().and_then(Option::as_ref))
    }

    /// The JobSet to observe again once a failed GET's back-off has passed; never resolves while
    /// none is pending. Cancel-safe.
    pub(crate) async fn retry_due(&mut self) -> JobSetView {
        match &mut self.retry {
            Some((_, at)) => {
                at.as_mut().await;
                self.retry.take().expect("pending above").0
            }
            None => std::future::pending().await,
        }
    }
}
