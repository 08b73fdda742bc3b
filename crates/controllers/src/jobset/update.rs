//! upstream's `statusUpdateOpts`: the status a reconcile will write, the events and metric
//! increments that go out only once that write succeeded.

use jiff::Timestamp;
use jobset_api::jobset::JobSetStatus;
use jobset_api::jobset::keys::{COND_COMPLETED, COND_FAILED};

use super::conditions::{Cond, update_condition};
use super::restart_history::Observation;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// A metric to record once the status is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    Completed,
    Failed,
    /// A restart, by action name and trigger reason.
    Restart {
        action: &'static str,
        reason: String,
    },
    /// A restart phase's duration, stamped by this write.
    RestartPhase(Observation),
    /// KEP-1186: the JobSet failed for its `activeDeadlineSeconds` (besides `Failed`).
    DeadlineExceeded,
}

#[derive(Debug, Clone)]
pub struct Update {
    pub status: JobSetStatus,
    pub changed: bool,
    pub events: Vec<Event>,
    pub metrics: Vec<Metric>,
    pub now: Timestamp,
}

impl Update {
    pub fn new(status: JobSetStatus, now: Timestamp) -> Update {
        Update { status, changed: false, events: vec![], metrics: vec![], now }
    }

    /// Sets a condition; a change is written and reported as an event.
    pub fn set(&mut self, c: Cond) {
        if update_condition(&mut self.status, &c, self.now) {
            self.changed = true;
            self.events.push(Event { warning: c.warning, reason: c.reason.clone(), message: c.message.clone() });
            match (c.type_, c.status) {
                (COND_COMPLETED, true) => self.metrics.push(Metric::Completed),
                (COND_FAILED, true) => self.metrics.push(Metric::Failed),
                _ => {}
            }
        }
    }

    pub fn event(&mut self, warning: bool, reason: &str, message: String) {
        self.events.push(Event { warning, reason: reason.into(), message });
    }

    pub fn mark(&mut self) {
        self.changed = true;
    }
}
