//! Jittered exponential back-off. After a group restart every agent of the JobSet starts at the
//! same moment; spreading their retries keeps them from hitting the API server in waves (the
//! design doc measured 429s from 5,000 agents re-creating their watches at once).

use std::time::Duration;

use kube::runtime::utils::Backoff;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::BackoffConfig;

/// The delay before retry `attempt` (from 0), given `unit` drawn uniformly from [0, 1).
pub fn delay(cfg: &BackoffConfig, attempt: u32, unit: f64) -> Duration {
    let exp = cfg.initial.saturating_mul(2u32.saturating_pow(attempt.min(31))).min(cfg.max);
    exp.mul_f64(1.0 - cfg.jitter * unit)
}

/// [`delay`] as an endless iterator, usable as kube's watcher [`Backoff`] (reset on success).
pub struct JitteredBackoff {
    cfg: BackoffConfig,
    attempt: u32,
    rng: SmallRng,
}

impl JitteredBackoff {
    pub fn new(cfg: BackoffConfig) -> JitteredBackoff {
        JitteredBackoff { cfg, attempt: 0, rng: SmallRng::from_os_rng() }
    }

    pub fn next_delay(&mut self) -> Duration {
        let d = delay(&self.cfg, self.attempt, self.rng.random());
        self.attempt = self.attempt.saturating_add(1);
        d
    }
}

impl Iterator for JitteredBackoff {
    type Item = Duration;
    /// Never `None`: the agent retries as long as it lives.
    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

impl Backoff for JitteredBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: BackoffConfig =
        BackoffConfig { initial: Duration::from_millis(100), max: Duration::from_secs(10), jitter: 1.0 };

    #[test]
    fn delay_doubles_up_to_the_max_without_jitter_draw() {
        let got: Vec<Duration> = (0..10).map(|n| delay(&CFG, n, 0.0)).collect();
        let ms = |v: u64| Duration::from_millis(v);
        assert_eq!(
            got,
            [ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(6400), ms(10_000), ms(10_000), ms(10_000)]
        );
        assert_eq!(delay(&CFG, u32::MAX, 0.0), CFG.max, "no overflow on long outages");
    }

    #[test]
    fn full_jitter_spreads_over_zero_to_the_delay() {
        assert_eq!(delay(&CFG, 3, 0.5), Duration::from_millis(400));
        assert!(delay(&CFG, 3, 0.999_999) < Duration::from_millis(1));
        let half = BackoffConfig { jitter: 0.5, ..CFG };
        assert_eq!(delay(&half, 3, 0.5), Duration::from_millis(600), "at most half is taken off");
        let none = BackoffConfig { jitter: 0.0, ..CFG };
        assert_eq!(delay(&none, 3, 0.9), Duration::from_millis(800));
    }

    #[test]
    fn reset_starts_again_from_the_initial_delay() {
        let mut b = JitteredBackoff::new(BackoffConfig { jitter: 0.0, ..CFG });
        let first: Vec<Duration> = b.by_ref().take(3).collect();
        assert_eq!(first, [100, 200, 400].map(Duration::from_millis));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn jittered_delays_stay_within_bounds() {
        let mut b = JitteredBackoff::new(CFG);
        for n in 0..20 {
            let d = b.next_delay();
            assert!(d <= delay(&CFG, n, 0.0), "retry {n}: {d:?}");
        }
    }
}
