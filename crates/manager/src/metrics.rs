//! The manager's own series beside the controllers': client_golang's standard process metrics
//! (read at each scrape by `metrics-process`, a port of client_golang's collector) and client-go's
//! `leader_election_master_status`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// `process_*` as client_golang's process collector names them.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = metrics_process::collector::collect();
        if let Some(v) = m.cpu_seconds_total {
            let metric = ConstCounter::new(v);
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                metric.metric_type(),
            )?)?;
        }
        let gauges: [(&str, &str, Option<u64>); 5] = [
            ("process_open_fds", "Number of open file descriptors.", m.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors.", m.max_fds),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", m.virtual_memory_bytes),
            ("process_resident_memory_bytes", "Resident memory size in bytes.", m.resident_memory_bytes),
            ("process_threads", "Number of OS threads in the process.", m.threads),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let metric = ConstGauge::new(v as i64);
                metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
            }
        }
        if let Some(v) = m.start_time_seconds {
            let metric = ConstGauge::new(v as i64);
            metric.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                None,
                metric.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// client-go's leader-election gauge: 1 while this replica leads, 0 otherwise.
#[derive(Clone, Default)]
pub struct LeaderMetric {
    status: Family<LeaseLabels, Gauge>,
}

impl LeaderMetric {
    pub fn set(&self, lease: &str, leading: bool) {
        self.status.get_or_create(&LeaseLabels { name: lease.to_string() }).set(i64::from(leading));
    }
}

/// Registers the process collector and `leader`.
pub fn register(registry: &mut Registry, leader: &LeaderMetric) {
    registry.register_collector(Box::new(ProcessCollector));
    registry.register(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
        leader.status.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_and_leader_series_render_with_client_golang_names() {
        let leader = LeaderMetric::default();
        let mut r = Registry::default();
        register(&mut r, &leader);
        leader.set("6d4f6a47.jobset.x-k8s.io", true);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        for series in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
            "leader_election_master_status{name=\"6d4f6a47.jobset.x-k8s.io\"} 1",
        ] {
            assert!(out.contains(series), "{series} missing from:\n{out}");
        }
        leader.set("6d4f6a47.jobset.x-k8s.io", false);
        out.clear();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(out.contains("leader_election_master_status{name=\"6d4f6a47.jobset.x-k8s.io\"} 0"), "{out}");
    }
}
