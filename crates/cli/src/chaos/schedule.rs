//! The fault schedule of one chaos run, a pure function of its seed: which faults, at which
//! instants after the scenario's objects are created, and how long each one lasts.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A fault the chaos driver can inject.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// `kill -9` of `jobset up --data-dir`, started again on the same data dir after a while.
    KillUp,
    /// A node agent stops heartbeating (`jobset node fail`) for longer than the node grace
    /// period, then heartbeats again (`jobset node recover`).
    NodeFail,
    /// The data dir's filesystem is filled up, then freed.
    DiskFull,
    /// `kill -9` of `jobset manager` (the JobSet and AppWrapper controllers and webhooks in a
    /// process of their own, beside `jobset up --external-controllers`), started again after a
    /// while.
    KillManager,
}

impl FaultKind {
    /// The name in flags and in the summary table.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillUp => "kill-up",
            FaultKind::NodeFail => "node-fail",
            FaultKind::DiskFull => "disk-full",
            FaultKind::KillManager => "kill-manager",
        }
    }
}

/// One fault of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    /// When it starts, after the scenario's objects were created.
    pub at: Duration,
    /// How long it lasts: the time `jobset up` or `jobset manager` stays down, the node stays
    /// failed or the disk stays full.
    pub hold: Duration,
    /// The node it hits (`node-N`; only for [`FaultKind::NodeFail`]).
    pub node: usize,
}

/// What a schedule may contain.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The faults to draw from (none: a fault-free run).
    pub kinds: Vec<FaultKind>,
    /// Faults start within this time after creation.
    pub window: Duration,
    /// At most this many faults per run (at least one when `kinds` is not empty).
    pub max_faults: usize,
    /// How long a killed `jobset up` or `jobset manager` stays down at most.
    pub max_down: Duration,
    /// The node grace period: a node fault lasts between 1.5 and 2.5 times it, so the node is
    /// lost for sure (lost as seen from the control plane, not just late).
    pub node_grace: Duration,
    /// How long the disk stays full at most.
    pub max_full: Duration,
    /// The number of nodes.
    pub nodes: usize,
}

/// The run's faults, ordered by start.
pub fn plan(seed: u64, limits: &Limits) -> Vec<Fault> {
    if limits.kinds.is_empty() || limits.max_faults == 0 {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let count = rng.random_range(1..=limits.max_faults);
    let mut faults: Vec<Fault> = (0..count)
        .map(|_| {
            let kind = limits.kinds[rng.random_range(0..limits.kinds.len())];
            let at = limits.window.mul_f64(rng.random::<f64>());
            let hold = match kind {
                FaultKind::KillUp | FaultKind::KillManager => limits.max_down.mul_f64(rng.random::<f64>()),
                FaultKind::NodeFail => limits.node_grace.mul_f64(1.5 + rng.random::<f64>()),
                FaultKind::DiskFull => limits.max_full.mul_f64(rng.random::<f64>()),
            };
            let node = rng.random_range(0..limits.nodes.max(1));
            Fault { kind, at, hold, node }
        })
        .collect();
    faults.sort_by_key(|f| f.at);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(kinds: &[FaultKind]) -> Limits {
        Limits {
            kinds: kinds.to_vec(),
            window: Duration::from_secs(5),
            max_faults: 3,
            max_down: Duration::from_secs(1),
            node_grace: Duration::from_millis(800),
            max_full: Duration::from_secs(2),
            nodes: 2,
        }
    }

    #[test]
    fn a_seed_replays_the_same_schedule() {
        let all = limits(&[FaultKind::KillUp, FaultKind::NodeFail, FaultKind::DiskFull, FaultKind::KillManager]);
        for seed in [0, 1, 42, u64::MAX] {
            assert_eq!(plan(seed, &all), plan(seed, &all), "seed {seed}");
        }
        let distinct: std::collections::BTreeSet<String> = (0..20).map(|s| format!("{:?}", plan(s, &all))).collect();
        assert!(distinct.len() > 15, "seeds give different schedules: {distinct:?}");
    }

    #[test]
    fn faults_are_ordered_within_the_window_and_of_the_kinds_asked() {
        let table: [(&[FaultKind], usize); 5] = [
            (&[FaultKind::KillUp], 3),
            (&[FaultKind::NodeFail], 3),
            (&[FaultKind::DiskFull, FaultKind::KillUp], 3),
            (&[FaultKind::KillManager], 3),
            (&[FaultKind::KillUp, FaultKind::NodeFail, FaultKind::DiskFull, FaultKind::KillManager], 1),
        ];
        for (kinds, max) in table {
            let l = Limits { max_faults: max, ..limits(kinds) };
            for seed in 0..200 {
                let faults = plan(seed, &l);
                assert!((1..=max).contains(&faults.len()), "{kinds:?} seed {seed}: {faults:?}");
                assert!(faults.windows(2).all(|w| w[0].at <= w[1].at), "ordered: {faults:?}");
                for f in &faults {
                    assert!(kinds.contains(&f.kind), "{f:?} not of {kinds:?}");
                    assert!(f.at <= l.window && f.node < l.nodes, "{f:?}");
                    match f.kind {
                        FaultKind::KillUp | FaultKind::KillManager => assert!(f.hold <= l.max_down, "{f:?}"),
                        FaultKind::DiskFull => assert!(f.hold <= l.max_full, "{f:?}"),
                        FaultKind::NodeFail => {
                            assert!(f.hold >= l.node_grace.mul_f64(1.5) && f.hold <= l.node_grace.mul_f64(2.5), "{f:?}")
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn no_kinds_or_no_faults_is_a_fault_free_run() {
        assert!(plan(7, &limits(&[])).is_empty());
        assert!(plan(7, &Limits { max_faults: 0, ..limits(&[FaultKind::KillUp]) }).is_empty());
    }
}
