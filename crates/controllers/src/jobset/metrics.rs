//! Prometheus metrics of the JobSet controller: upstream's `jobset_completed_total` and
//! `jobset_failed_total`, KEP-1186's `jobset_active_deadline_exceeded_total`, plus restarts by
//! action and trigger reason and the duration of each restart phase (docs/restart-timeline.md);
//! its reconciles go to controller-runtime's series
//! (`crate::metrics::ReconcileMetrics`, `controller="jobset"`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::restart_history::Observation;
use crate::metrics::ReconcileMetrics;

/// `jobset_restart_duration_seconds` buckets: restarts take from a tenth of a second (in place, a
/// few pods) to half an hour (thousands of pods rescheduled).
pub const RESTART_BUCKETS: [f64; 13] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobSetLabels {
    jobset_name: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestartLabels {
    jobset_name: String,
    namespace: String,
    action: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    strategy: String,
    scope: String,
    phase: String,
}

type PhaseFamily = Family<PhaseLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    completed: Family<JobSetLabels, Counter>,
    failed: Family<JobSetLabels, Counter>,
    deadline_exceeded: Family<JobSetLabels, Counter>,
    restarts: Family<RestartLabels, Counter>,
    restart_phases: PhaseFamily,
    reconcile: ReconcileMetrics,
}

impl Default for Metrics {
    /// With reconcile series of its own (a process with one controller).
    fn default() -> Self {
        Metrics::with_reconcile(ReconcileMetrics::default())
    }
}

impl Metrics {
    /// Reconciles counted in `reconcile`, shared with the process's other controllers and
    /// registered once beside these.
    pub fn with_reconcile(reconcile: ReconcileMetrics) -> Metrics {
        Metrics {
            completed: Family::default(),
            failed: Family::default(),
            deadline_exceeded: Family::default(),
            restarts: Family::default(),
            restart_phases: Family::new_with_constructor(|| Histogram::new(RESTART_BUCKETS)),
            reconcile,
        }
    }

    /// Registers the JobSet series in `registry` (names without the `_total` suffix, which the
    /// OpenMetrics encoder adds to counters); the reconcile series are registered by whoever
    /// shares them.
    pub fn register(&self, registry: &mut Registry) {
        registry.register("jobset_completed", "Number of completed JobSets", self.completed.clone());
        registry.register("jobset_failed", "Number of failed JobSets", self.failed.clone());
        registry.register(
            "jobset_active_deadline_exceeded",
            "Number of JobSets failed for exceeding their activeDeadlineSeconds",
            self.deadline_exceeded.clone(),
        );
        registry.register("jobset_restarts", "JobSet restarts, by action and trigger reason", self.restarts.clone());
        registry.register(
            "jobset_restart_duration_seconds",
            "Duration of each restart phase (detect, stop, barrier, start, total), by strategy and scope",
            self.restart_phases.clone(),
        );
    }

    fn labels(ns: &str, name: &str) -> JobSetLabels {
        JobSetLabels { jobset_name: name.into(), namespace: ns.into() }
    }

    pub fn completed(&self, ns: &str, name: &str) {
        self.completed.get_or_create(&Self::labels(ns, name)).inc();
    }

    pub fn failed(&self, ns: &str, name: &str) {
        self.failed.get_or_create(&Self::labels(ns, name)).inc();
    }

    pub fn active_deadline_exceeded(&self, ns: &str, name: &str) {
        self.deadline_exceeded.get_or_create(&Self::labels(ns, name)).inc();
    }

    pub fn restart(&self, ns: &str, name: &str, action: &str, reason: &str) {
        let l = RestartLabels {
            jobset_name: name.into(),
            namespace: ns.into(),
            action: action.into(),
            reason: reason.into(),
        };
        self.restarts.get_or_create(&l).inc();
    }

    pub fn restart_phase(&self, o: &Observation) {
        let l =
            PhaseLabels { strategy: o.strategy.as_str().into(), scope: o.scope.as_str().into(), phase: o.phase.into() };
        self.restart_phases.get_or_create(&l).observe(o.seconds);
    }

    pub fn observe_reconcile(&self, took: Duration, error: bool) {
        self.reconcile.observe("jobset", took, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobset_api::jobset::{RestartScope, RestartStrategy};

    #[test]
    fn counters_render_with_upstream_names_and_labels() {
        let reconcile = ReconcileMetrics::default();
        let m = Metrics::with_reconcile(reconcile.clone());
        let mut r = Registry::default();
        m.register(&mut r);
        reconcile.register(&mut r);
        m.completed("ns", "a");
        m.failed("ns", "b");
        m.active_deadline_exceeded("ns", "b");
        m.restart("ns", "a", "RestartJobSet", "BackoffLimitExceeded");
        m.restart_phase(&Observation {
            strategy: RestartStrategy::InPlaceRestart,
            scope: RestartScope::JobSet,
            phase: "detect",
            seconds: 0.3,
        });
        m.observe_reconcile(Duration::from_millis(3), true);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(out.contains(r#"jobset_completed_total{jobset_name="a",namespace="ns"} 1"#), "{out}");
        assert!(out.contains(r#"jobset_failed_total{jobset_name="b",namespace="ns"} 1"#), "{out}");
        assert!(out.contains(r#"jobset_active_deadline_exceeded_total{jobset_name="b",namespace="ns"} 1"#), "{out}");
        assert!(
            out.contains(
                r#"jobset_restarts_total{jobset_name="a",namespace="ns",action="RestartJobSet",reason="BackoffLimitExceeded"} 1"#
            ),
            "{out}"
        );
        let phase = r#"strategy="InPlaceRestart",scope="JobSet",phase="detect""#;
        for series in [
            format!(r#"jobset_restart_duration_seconds_bucket{{le="0.25",{phase}}} 0"#),
            format!(r#"jobset_restart_duration_seconds_bucket{{le="0.5",{phase}}} 1"#),
            format!(r#"jobset_restart_duration_seconds_bucket{{le="1800.0",{phase}}} 1"#),
            format!(r#"jobset_restart_duration_seconds_count{{{phase}}} 1"#),
        ] {
            assert!(out.contains(&series), "{series} missing:\n{out}");
        }
        assert!(out.contains(r#"controller_runtime_reconcile_errors_total{controller="jobset"} 1"#), "{out}");
        assert!(out.contains("controller_runtime_reconcile_time_seconds_count{controller=\"jobset\"} 1"), "{out}");
    }
}
