//! Prometheus metrics of the JobSet controller: upstream's `jobset_completed_total` and
//! `jobset_failed_total`, plus restarts by failure-policy action and controller-runtime's
//! reconcile time and error series (label `controller="jobset"`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

pub struct Metrics {
    completed: Family<JobSetLabels, Counter>,
    failed: Family<JobSetLabels, Counter>,
    restarts: Family<RestartLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    reconcile_errors: Family<ControllerLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            completed: Family::default(),
            failed: Family::default(),
            restarts: Family::default(),
            reconcile_time: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
            reconcile_errors: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every series in `registry` (names without the `_total` suffix, which the
    /// OpenMetrics encoder adds to counters).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("jobset_completed", "Number of completed JobSets", self.completed.clone());
        registry.register("jobset_failed", "Number of failed JobSets", self.failed.clone());
        registry.register("jobset_restarts", "Failure-policy restarts, by action", self.restarts.clone());
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
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

    pub fn restart(&self, ns: &str, name: &str, action: &str) {
        let l = RestartLabels { jobset_name: name.into(), namespace: ns.into(), action: action.into() };
        self.restarts.get_or_create(&l).inc();
    }

    pub fn observe_reconcile(&self, took: Duration, error: bool) {
        let l = ControllerLabels { controller: "jobset".into() };
        self.reconcile_time.get_or_create(&l).observe(took.as_secs_f64());
        if error {
            self.reconcile_errors.get_or_create(&l).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_upstream_names_and_labels() {
        let m = Metrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        m.completed("ns", "a");
        m.failed("ns", "b");
        m.restart("ns", "a", "RestartJobSet");
        m.observe_reconcile(Duration::from_millis(3), true);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(out.contains(r#"jobset_completed_total{jobset_name="a",namespace="ns"} 1"#), "{out}");
        assert!(out.contains(r#"jobset_failed_total{jobset_name="b",namespace="ns"} 1"#), "{out}");
        assert!(
            out.contains(r#"jobset_restarts_total{jobset_name="a",namespace="ns",action="RestartJobSet"} 1"#),
            "{out}"
        );
        assert!(out.contains(r#"controller_runtime_reconcile_errors_total{controller="jobset"} 1"#), "{out}");
        assert!(out.contains("controller_runtime_reconcile_time_seconds_count{controller=\"jobset\"} 1"), "{out}");
    }
}
