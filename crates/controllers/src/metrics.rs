//! controller-runtime's per-controller reconcile series, shared by the JobSet and AppWrapper
//! controllers of a process (one family per name in a registry, label `controller`):
//! `controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total` and `controller_runtime_reconcile_time_seconds`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

/// Clones share the series.
#[derive(Clone)]
pub struct ReconcileMetrics {
    total: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    time: Family<ControllerLabels, Histogram>,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            total: Family::default(),
            errors: Family::default(),
            time: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
        }
    }
}

impl ReconcileMetrics {
    /// Registers the series once per registry (names without the `_total` suffix, which the
    /// OpenMetrics encoder adds to counters).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.time.clone(),
        );
    }

    /// One reconcile of `controller` that took `took`: `result` `success` or `error`, as
    /// controller-runtime labels it (kube's `Action` does not tell a requeue apart).
    pub fn observe(&self, controller: &str, took: Duration, error: bool) {
        let c = ControllerLabels { controller: controller.into() };
        self.time.get_or_create(&c).observe(took.as_secs_f64());
        let result = if error { "error" } else { "success" };
        self.total.get_or_create(&ResultLabels { controller: controller.into(), result: result.into() }).inc();
        if error {
            self.errors.get_or_create(&c).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_render_per_controller_and_result_with_controller_runtime_names() {
        let m = ReconcileMetrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        let shared = m.clone();
        m.observe("jobset", Duration::from_millis(3), false);
        m.observe("jobset", Duration::from_millis(3), true);
        shared.observe("appwrapper", Duration::from_millis(1), false);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        for series in [
            r#"controller_runtime_reconcile_total{controller="jobset",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="jobset",result="error"} 1"#,
            r#"controller_runtime_reconcile_total{controller="appwrapper",result="success"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="jobset"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="jobset"} 2"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="appwrapper"} 1"#,
        ] {
            assert!(out.contains(series), "{series} missing:\n{out}");
        }
        assert!(!out.contains(r#"controller_runtime_reconcile_errors_total{controller="appwrapper"}"#), "{out}");
    }
}
