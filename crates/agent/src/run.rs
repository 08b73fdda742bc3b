//! The async shell: watches the agent's own JobSet, feeds [`decide::step`] and carries out its
//! actions against the API server, the barrier and the worker.

use std::future::Future;
use std::pin::pin;

use futures::StreamExt;
use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde_json::json;

use crate::backoff::JitteredBackoff;
use crate::barrier::Barrier;
use crate::config::{AgentConfig, BackoffConfig, Endpoint, EndpointChoice, barrier_endpoint_from_pod};
use crate::decide::{self, Action, Input, Policy, State};
use crate::resume::Change;
use crate::scope::ScopeSource;
use crate::worker::Worker;

/// The field manager of the attempt annotation.
pub const FIELD_MANAGER: &str = "jobset-in-place-restart-agent";

/// Runs the agent until it must exit; returns the exit code: the configured in-place restart code
/// when its attempt is deprecated, the worker's code in main-container mode, or what `stop`
/// yields (see [`termination_signal`]). `worker: None` is sidecar mode.
pub async fn run<B: Barrier, W: Worker>(
    cfg: AgentConfig,
    client: Client,
    mut barrier: B,
    mut worker: Option<W>,
    stop: impl Future<Output = i32>,
) -> i32 {
    let policy = Policy { exit_code: cfg.exit_code, keep_watch: cfg.worker.as_ref().is_some_and(|w| w.keep_watch) };
    let mut state = State::initial(worker.is_some());
    let pods = PodWriter { client: client.clone(), request: Request::new(Pod::url_path(&(), Some(&cfg.namespace))) };
    let mut scope = ScopeSource::new(&cfg, client.clone());
    // Only its own JobSet: a namespace may hold many, each with thousands of agents. Resumed
    // from where this pod's previous agent left off, when it kept that (crate::resume).
    let mut events = crate::resume::jobset_changes(&cfg, client);
    let mut stop = pin!(stop);
    tracing::info!(namespace = %cfg.namespace, jobset = %cfg.jobset_name, pod = %cfg.pod_name, "agent started");

    loop {
        let input = tokio::select! {
            code = &mut stop => return shut_down(code, worker).await,
            event = events.next() => match event {
                Some(Change::Apply(js)) => Input::JobSet(scope.observe(*js).await),
                Some(Change::Deleted) => {
                    tracing::info!("the JobSet was deleted");
                    continue;
                }
                None => {
                    tracing::error!("the JobSet watch ended");
                    return 1;
                }
            },
            code = exited(&mut worker, state.worker == decide::WorkerState::Running) => Input::WorkerExited(code),
            js = scope.retry_due() => Input::JobSet(scope.observe(js).await),
        };
        let (next, actions) = decide::step(state, input, &policy);
        tracing::debug!(?input, ?actions, "step");
        state = next;
        // A signal also ends a write still retrying.
        tokio::select! {
            code = &mut stop => return shut_down(code, worker).await,
            exit = execute(&actions, &cfg, &pods, &mut barrier, &mut worker) => if let Some(code) = exit {
                return code;
            },
        }
    }
}

async fn exited<W: Worker>(worker: &mut Option<W>, running: bool) -> i32 {
    match worker {
        Some(w) if running => w.wait().await,
        _ => std::future::pending().await,
    }
}

async fn shut_down<W: Worker>(code: i32, worker: Option<W>) -> i32 {
    tracing::info!(code, "stopping");
    if let Some(mut w) = worker {
        w.stop().await;
    }
    code
}

/// Carries out `actions` in order; `Some(code)` when the agent must exit.
async fn execute<B: Barrier, W: Worker>(
    actions: &[Action],
    cfg: &AgentConfig,
    pods: &PodWriter,
    barrier: &mut B,
    worker: &mut Option<W>,
) -> Option<i32> {
    for action in actions {
        match *action {
            Action::Annotate(n) => annotate(pods, &cfg.pod_name, n, cfg.backoff).await,
            Action::LiftBarrier => {
                tracing::info!("barrier lifted");
                barrier.lift();
            }
            Action::StartWorker => {
                if let Some(w) = worker.as_mut()
                    && let Err(e) = w.start()
                {
                    tracing::error!(error = %e, "starting the worker");
                    return Some(1);
                }
            }
            Action::KillWorker => {
                if let Some(w) = worker.as_mut() {
                    w.stop().await;
                }
            }
            Action::Exit(code) => {
                tracing::info!(code, "attempt deprecated or worker done; exiting");
                return Some(code);
            }
        }
    }
    None
}

/// Writes the agent's own pod. The server's reply (the whole pod) is not parsed: thousands of
/// agents announce an attempt at once, and parsing each pod back cost more than building the patch.
struct PodWriter {
    client: Client,
    request: Request,
}

impl PodWriter {
    async fn patch(&self, name: &str, params: &PatchParams, patch: &Patch<&serde_json::Value>) -> kube::Result<()> {
        let req = self.request.patch(name, params, patch).map_err(kube::Error::BuildRequest)?;
        self.client.request_text(req).await.map(drop)
    }
}

/// Server-side applies the attempt annotation, retrying until it is written.
async fn annotate(pods: &PodWriter, pod: &str, attempt: i32, backoff: BackoffConfig) {
    let patch = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "annotations": {IN_PLACE_RESTART_ATTEMPT: attempt.to_string()}},
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // Seeded only on a failure: thousands of agents annotate at once, nearly all at the first try.
    let mut delays = None;
    loop {
        match pods.patch(pod, &params, &Patch::Apply(&patch)).await {
            Ok(_) => {
                tracing::info!(attempt, "announced this pod's in-place restart attempt");
                return;
            }
            Err(e) => {
                let delay = delays.get_or_insert_with(|| JitteredBackoff::new(backoff)).next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, "writing the pod's attempt annotation");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The barrier endpoint of sidecar mode: the configured one, else the agent container's
/// startupProbe, read once from its own pod (retried until the GET succeeds).
pub async fn barrier_endpoint(cfg: &AgentConfig, client: &Client) -> Endpoint {
    if let Some(e) = &cfg.barrier {
        return e.clone();
    }
    // The pod spec cannot change: what this pod's previous agent read still holds.
    if let Some(e) = crate::resume::saved_endpoint(cfg) {
        return e;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut delays = JitteredBackoff::new(cfg.backoff);
    let pod = loop {
        match pods.get(&cfg.pod_name).await {
            Ok(pod) => break pod,
            Err(e) => {
                let delay = delays.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, "reading the own pod for its startupProbe");
                tokio::time::sleep(delay).await;
            }
        }
    };
    let choice = barrier_endpoint_from_pod(&pod, cfg.container_name.as_deref());
    match &choice {
        EndpointChoice::FromPod { container, endpoint } => {
            tracing::info!(container, path = %endpoint.path, port = endpoint.port, "barrier endpoint from the startupProbe");
        }
        EndpointChoice::Default { reason } => {
            tracing::warn!(reason, "using the default barrier endpoint; set STARTUP_PROBE_PATH/STARTUP_PROBE_PORT");
        }
    }
    let endpoint = choice.endpoint();
    crate::resume::save_endpoint(cfg, &endpoint);
    endpoint
}

/// Resolves to `128 + signal` on the first SIGTERM or SIGINT. The handlers are installed when this
/// is called, not when the future is first polled.
pub fn termination_signal() -> std::io::Result<impl Future<Output = i32>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => 128 + SignalKind::terminate().as_raw_value(),
            _ = int.recv() => 128 + SignalKind::interrupt().as_raw_value(),
        }
    })
}
