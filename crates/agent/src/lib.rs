//! The JobSet in-place restart agent (upstream `cmd/in-place-restart-agent`, KEP-467).
//!
//! One agent runs in every pod of a JobSet with `restartStrategy: InPlaceRestart`. It announces
//! the pod's attempt in the annotation `jobset.sigs.k8s.io/in-place-restart-attempt`, holds the
//! pod's main containers behind a barrier until the controller reports every pod at that attempt
//! (`status.currentInPlaceRestartAttempt`), and exits with a configured code, which a
//! `restartPolicyRules` entry turns into an in-place restart, once the controller deprecates the
//! attempt (`status.previousInPlaceRestartAttempt`). See docs/in-place-restart.md.
//!
//! [`decide`] is the logic, pure; [`run`] is its I/O. The barrier and the worker are traits so
//! that the same agent runs in a real pod ([`HttpBarrier`], [`ProcessWorker`]) or in-process
//! (a `tokio::sync::watch::Sender<bool>` as the barrier, no worker).

pub mod backoff;
pub mod barrier;
pub mod config;
pub mod decide;
pub mod resume;
mod run;
mod scope;
pub mod worker;

pub use barrier::{Barrier, DEFAULT_BARRIER_HOLD, HttpBarrier, NoBarrier};
pub use config::{AgentConfig, BackoffConfig, ConfigError, Endpoint, WorkerConfig};
pub use resume::{MemoryStore, ResumeStore, saved_endpoint};
pub use run::{FIELD_MANAGER, barrier_endpoint, run, termination_signal};
pub use worker::{NoWorker, ProcessWorker, Worker};
