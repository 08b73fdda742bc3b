//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics
//! (`tools/leaderelection/leaderelection.go` and `resourcelock/leaselock.go`).
//!
//! Every candidate GETs the Lease; a missing Lease is created held by the caller; a Lease held
//! by someone else is taken only once its record has stayed unchanged for `lease_duration`,
//! measured on our own monotonic clock from when we first saw that record (the timestamps in it
//! come from other machines' clocks and are never compared with ours). Takeovers and renewals
//! replace the Lease carrying the resourceVersion we read, so of two concurrent writers one gets
//! a 409 and loses.
//!
//! Safety: the leader declares its leadership lost at most `renew_deadline` after its last
//! successful renewal *started* (every attempt is cut off at that deadline, so a hung request
//! cannot hold it longer). A standby can only see that renewal after it started, and then waits
//! `lease_duration > renew_deadline` more before it writes, so the old leader has stopped first.
//! This holds as long as the replicas' clocks run at the same rate (they need not agree), all
//! replicas use the same `lease_duration`, identities are unique, and the caller stops acting as
//! soon as [`LeaderElector::renew_until_lost`] returns.
//!
//! ```text
//! elector.acquire().await;
//! let lost = tokio::select! {
//!     lost = elector.renew_until_lost() => Some(lost),
//!     () = shutdown => None,
//! };
//! stop_controllers().await;
//! if lost.is_none() {
//!     elector.release().await?;
//! }
//! ```

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};
use tracing::{debug, info, warn};

/// client-go's default `LeaseDuration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default `RenewDeadline`.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default `RetryPeriod`.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: acquisition attempts are `retry_period * (1 + rand * 1.2)` apart.
const JITTER_FACTOR: f64 = 1.2;

/// Which Lease to contend for, as whom, and how patiently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    /// Must be unique per replica (client-go uses `hostname_uuid`): a replica that finds its own
    /// identity in the Lease renews it without waiting.
    pub identity: String,
    /// How long a standby waits, from when it saw the record change, before taking the Lease.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it declares its leadership lost.
    pub renew_deadline: Duration,
    /// The pause between attempts.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// A configuration with client-go's default timings (15 s, 10 s, 2 s).
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: impl Into<String>) -> Self {
        ElectionConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// client-go's `NewLeaderElector` checks, in its order and with its messages.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseDurationNotAboveRenewDeadline);
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::RenewDeadlineTooShort);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::RetryPeriodZero);
        }
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::EmptyNamespace);
        }
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("leaseDuration must be greater than renewDeadline")]
    LeaseDurationNotAboveRenewDeadline,
    #[error("renewDeadline must be greater than retryPeriod*JitterFactor")]
    RenewDeadlineTooShort,
    #[error("retryPeriod must be greater than zero")]
    RetryPeriodZero,
    #[error("Lock identity is empty")]
    EmptyIdentity,
    #[error("the lease namespace is empty")]
    EmptyNamespace,
    #[error("the lease name is empty")]
    EmptyName,
}

/// Why leadership ended. The caller must stop acting as leader as soon as it gets one.
#[must_use = "the caller must stop acting as leader at once"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// A renewal found the Lease held by someone else.
    AnotherHolder(String),
    /// No renewal succeeded within `renew_deadline` of the start of the last successful one.
    RenewDeadline { last_error: Option<String> },
    /// Renewal was asked for while not leading: never acquired, already lost, or released.
    NotLeading,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::AnotherHolder(holder) => write!(f, "the lease is now held by {holder:?}"),
            Lost::RenewDeadline { last_error: None } => f.write_str("no renewal succeeded within the renew deadline"),
            Lost::RenewDeadline { last_error: Some(e) } => {
                write!(f, "no renewal succeeded within the renew deadline (last error: {e})")
            }
            Lost::NotLeading => f.write_str("not leading: the lease was never acquired, or already lost or released"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("releasing the lease: {0}")]
    Api(#[from] kube::Error),
    #[error("releasing the lease timed out after {0:?}")]
    TimedOut(Duration),
}

/// One candidate for the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// `namespace/name`, for logs.
    lock: String,
    observed: Option<Observed>,
    /// While leading, when the last successful write (acquisition or renewal) was started: the
    /// renew deadline counts from here. Kept here so a dropped `renew_until_lost` can be resumed.
    renewed_at: Option<Instant>,
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: ElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            lock: format!("{}/{}", config.namespace, config.name),
            config,
            observed: None,
            renewed_at: None,
        })
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until we hold the Lease, trying every `retry_period` with client-go's jitter. Each
    /// attempt is bounded by `renew_deadline`, so a hung request only delays the next one.
    pub async fn acquire(&mut self) {
        let lock = self.lock.clone();
        info!(%lock, identity = %self.config.identity, "attempting to acquire leader lease {lock}...");
        loop {
            let started = Instant::now();
            match timeout(self.config.renew_deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(Outcome::Holding)) => {
                    info!(%lock, identity = %self.config.identity, "successfully acquired lease {lock}");
                    self.renewed_at = Some(started);
                    return;
                }
                Ok(Ok(Outcome::HeldBy(_))) => {}
                Ok(Err(e)) => warn!(%lock, error = %e, "failed to acquire lease {lock}"),
                Err(_) => warn!(%lock, "an attempt to acquire lease {lock} timed out"),
            }
            sleep(jittered(self.config.retry_period)).await;
        }
    }

    /// Renews every `retry_period` and returns once leadership is lost: another holder was
    /// seen, or no renewal succeeded within `renew_deadline` of the start of the last successful
    /// one (attempts are cut off at that deadline). The caller must stop acting at once.
    ///
    /// Dropping the future and calling again resumes with the same deadline; called while not
    /// leading, it returns [`Lost::NotLeading`] at once.
    pub async fn renew_until_lost(&mut self) -> Lost {
        let lock = self.lock.clone();
        let mut last_error = None;
        let lost = loop {
            let Some(renewed_at) = self.renewed_at else { break Lost::NotLeading };
            let deadline = renewed_at + self.config.renew_deadline;
            sleep_until((Instant::now() + self.config.retry_period).min(deadline)).await;
            if Instant::now() >= deadline {
                break Lost::RenewDeadline { last_error };
            }
            let started = Instant::now();
            match timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(Outcome::Holding)) => {
                    debug!(%lock, "successfully renewed lease {lock}");
                    self.renewed_at = Some(started);
                    last_error = None;
                }
                Ok(Ok(Outcome::HeldBy(holder))) => break Lost::AnotherHolder(holder),
                Ok(Err(e)) => {
                    warn!(%lock, error = %e, "failed to renew lease {lock}");
                    last_error = Some(e.to_string());
                }
                Err(_) => last_error = Some("the attempt was cut off at the renew deadline".to_string()),
            }
        };
        if self.renewed_at.take().is_some() {
            warn!(%lock, identity = %self.config.identity, reason = %lost, "lost leader lease {lock}: {lost}");
        }
        lost
    }

    /// client-go's `ReleaseOnCancel`: if the Lease still names us, clears its holder (with
    /// `leaseDurationSeconds: 1`) so a standby takes it at once instead of waiting it out. Call it
    /// only once nothing acts as leader any more. Bounded by `renew_deadline`, as upstream.
    pub async fn release(&mut self) -> Result<(), ReleaseError> {
        self.renewed_at = None;
        let limit = self.config.renew_deadline;
        timeout(limit, self.try_release()).await.map_err(|_| ReleaseError::TimedOut(limit))?
    }

    async fn try_release(&mut self) -> Result<(), ReleaseError> {
        let lock = &self.lock;
        loop {
            let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
                debug!(%lock, "lease {lock} does not exist: nothing to release");
                return Ok(());
            };
            let spec = lease.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                debug!(%lock, holder = ?spec.holder_identity, "lease {lock} is not ours: nothing to release");
                return Ok(());
            }
            lease.spec = Some(released(&spec, Timestamp::now()));
            match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observed = Some(Observed { spec: written.spec.unwrap_or_default(), at: Instant::now() });
                    info!(%lock, identity = %self.config.identity, "released lease {lock}");
                    return Ok(());
                }
                // A renewal cancelled in flight may still have landed; read again and retry.
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    debug!(%lock, "conflict while releasing lease {lock}; retrying");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`, without its optimistic leader fast path: GET, decide,
    /// then create or replace (carrying the resourceVersion read).
    async fn try_acquire_or_renew(&mut self) -> Result<Outcome, kube::Error> {
        let current = self.api.get_opt(&self.config.name).await?;
        let now = Instant::now();
        if let Some(lease) = &current {
            self.observed = Some(see(self.observed.take(), lease.spec.clone().unwrap_or_default(), now));
        }
        let observed = current.as_ref().and(self.observed.as_ref());
        match decide(observed, &self.config, now, Timestamp::now()) {
            Decision::Wait { holder, until } => {
                debug!(lock = %self.lock, %holder, expires_in = ?until - now, "lease is held and has not yet expired");
                Ok(Outcome::HeldBy(holder))
            }
            Decision::Take(spec) => {
                let pp = PostParams::default();
                let written = match current {
                    None => {
                        let metadata = ObjectMeta {
                            name: Some(self.config.name.clone()),
                            namespace: Some(self.config.namespace.clone()),
                            ..ObjectMeta::default()
                        };
                        self.api.create(&pp, &Lease { metadata, spec: Some(spec) }).await?
                    }
                    Some(mut lease) => {
                        lease.spec = Some(spec);
                        self.api.replace(&self.config.name, &pp, &lease).await?
                    }
                };
                self.observed = Some(Observed { spec: written.spec.unwrap_or_default(), at: Instant::now() });
                Ok(Outcome::Holding)
            }
        }
    }
}

enum Outcome {
    Holding,
    HeldBy(String),
}

/// The last Lease record we read, and when we first read it in this form.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// Keeps the first observation instant while the record stays the same, so a holder that stops
/// renewing expires `lease_duration` after we first saw its last renewal.
fn see(previous: Option<Observed>, spec: LeaseSpec, now: Instant) -> Observed {
    match previous {
        Some(previous) if previous.spec == spec => previous,
        _ => Observed { spec, at: now },
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Decision {
    /// Write this record: create the Lease if it is absent, else replace it.
    Take(LeaseSpec),
    /// Another candidate holds the Lease; it is not ours to take before `until`.
    Wait { holder: String, until: Instant },
}

/// client-go's decision: `observed` is `None` when the Lease does not exist; `now` is our
/// monotonic clock (compared with `observed.at` only), `wall` is what goes into the record.
fn decide(observed: Option<&Observed>, config: &ElectionConfig, now: Instant, wall: Timestamp) -> Decision {
    let ours = |acquire_time: Option<MicroTime>, transitions: i32| {
        Decision::Take(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: Some(whole_seconds(config.lease_duration)),
            acquire_time,
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        })
    };
    let Some(observed) = observed else {
        return ours(Some(MicroTime(wall)), 0);
    };
    let spec = &observed.spec;
    let transitions = spec.lease_transitions.unwrap_or(0);
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == config.identity {
        return ours(spec.acquire_time.clone(), transitions);
    }
    let until = observed.at + config.lease_duration;
    if !holder.is_empty() && until > now {
        return Decision::Wait { holder: holder.to_string(), until };
    }
    ours(Some(MicroTime(wall)), transitions.saturating_add(1))
}

/// The record client-go's `release` writes: no holder, a one-second duration, the transition
/// count kept.
fn released(spec: &LeaseSpec, wall: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(wall)),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(spec.lease_transitions.unwrap_or(0)),
        ..LeaseSpec::default()
    }
}

/// `leaseDurationSeconds` for the record: rounded up, at least 1, so a sub-second duration is not
/// written as 0 (client-go truncates).
fn whole_seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// client-go's `wait.Jitter(period, JitterFactor)`.
fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::random::<f64>() * JITTER_FACTOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ElectionConfig {
        ElectionConfig::new("default", "jobset-manager", "me")
    }

    fn wall(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn record(holder: Option<&str>, acquired: i64, renewed: i64, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(wall(acquired))),
            renew_time: Some(MicroTime(wall(renewed))),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn ours(acquired: i64, renewed: i64, transitions: i32) -> Decision {
        Decision::Take(record(Some("me"), acquired, renewed, transitions))
    }

    #[test]
    fn validation_follows_client_go() {
        let ms = Duration::from_millis;
        let timed = |lease_duration, renew_deadline, retry_period| ElectionConfig {
            lease_duration: ms(lease_duration),
            renew_deadline: ms(renew_deadline),
            retry_period: ms(retry_period),
            ..config()
        };
        let cases = [
            ("defaults", config(), Ok(())),
            ("millisecond timings", timed(600, 400, 100), Ok(())),
            ("equal duration and deadline", timed(400, 400, 100), Err(ConfigError::LeaseDurationNotAboveRenewDeadline)),
            ("deadline at 1.2 retries", timed(600, 120, 100), Err(ConfigError::RenewDeadlineTooShort)),
            ("zero retry period", timed(600, 400, 0), Err(ConfigError::RetryPeriodZero)),
            ("empty identity", ElectionConfig { identity: String::new(), ..config() }, Err(ConfigError::EmptyIdentity)),
            (
                "empty namespace",
                ElectionConfig { namespace: String::new(), ..config() },
                Err(ConfigError::EmptyNamespace),
            ),
            ("empty name", ElectionConfig { name: String::new(), ..config() }, Err(ConfigError::EmptyName)),
        ];
        for (name, config, want) in cases {
            assert_eq!(config.validate(), want, "{name}");
        }
        assert_eq!(
            ConfigError::LeaseDurationNotAboveRenewDeadline.to_string(),
            "leaseDuration must be greater than renewDeadline"
        );
        assert_eq!(
            ConfigError::RenewDeadlineTooShort.to_string(),
            "renewDeadline must be greater than retryPeriod*JitterFactor"
        );
    }

    #[test]
    fn lease_duration_seconds_are_rounded_up_to_at_least_one() {
        let cases = [(0, 1), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (15_000, 15)];
        for (millis, want) in cases {
            assert_eq!(whole_seconds(Duration::from_millis(millis)), want, "{millis} ms");
        }
    }

    #[test]
    fn an_absent_lease_is_created_held_by_us() {
        let now = Instant::now();
        assert_eq!(decide(None, &config(), now, wall(100)), ours(100, 100, 0));
    }

    #[test]
    fn a_lease_held_by_another_is_not_taken_before_it_expires() {
        let seen = Instant::now();
        let observed = Observed { spec: record(Some("other"), 10, 20, 3), at: seen };
        let until = seen + DEFAULT_LEASE_DURATION;
        for now in [seen, seen + Duration::from_secs(14), until - Duration::from_nanos(1)] {
            assert_eq!(
                decide(Some(&observed), &config(), now, wall(100)),
                Decision::Wait { holder: "other".into(), until },
                "{:?} after the observation",
                now - seen
            );
        }
    }

    #[test]
    fn a_lease_held_by_another_is_taken_once_it_expires_with_one_more_transition() {
        let seen = Instant::now();
        let observed = Observed { spec: record(Some("other"), 10, 20, 3), at: seen };
        for now in [seen + DEFAULT_LEASE_DURATION, seen + Duration::from_secs(60)] {
            assert_eq!(decide(Some(&observed), &config(), now, wall(100)), ours(100, 100, 4));
        }
    }

    #[test]
    fn expiry_counts_from_our_observation_not_from_the_recorded_renew_time() {
        // Renewed "an hour ago" by the holder's clock, but we only just saw it: still held.
        let seen = Instant::now();
        let observed = Observed { spec: record(Some("other"), 0, 0, 1), at: seen };
        let decision = decide(Some(&observed), &config(), seen + Duration::from_secs(1), wall(3_600));
        assert!(matches!(decision, Decision::Wait { .. }), "{decision:?}");
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let seen = Instant::now();
        for holder in [Some(""), None] {
            let observed = Observed { spec: record(holder, 10, 20, 3), at: seen };
            assert_eq!(decide(Some(&observed), &config(), seen, wall(100)), ours(100, 100, 4), "holder {holder:?}");
        }
    }

    #[test]
    fn our_own_renewal_keeps_acquire_time_and_transitions() {
        // Even when just observed: our own record needs no waiting.
        let seen = Instant::now();
        let observed = Observed { spec: record(Some("me"), 10, 20, 3), at: seen };
        assert_eq!(decide(Some(&observed), &config(), seen, wall(100)), ours(10, 100, 3));
    }

    #[test]
    fn the_written_record_drops_coordinated_leasing_fields_as_client_go_does() {
        let seen = Instant::now();
        let spec = LeaseSpec {
            preferred_holder: Some("x".into()),
            strategy: Some("OldestEmulationVersion".into()),
            ..record(Some("me"), 10, 20, 3)
        };
        let decision = decide(Some(&Observed { spec, at: seen }), &config(), seen, wall(100));
        assert_eq!(decision, ours(10, 100, 3));
    }

    #[test]
    fn an_unchanged_record_keeps_its_first_observation_instant() {
        let first = Instant::now();
        let seen = see(None, record(Some("other"), 10, 20, 3), first);
        let again = see(Some(seen.clone()), record(Some("other"), 10, 20, 3), first + Duration::from_secs(5));
        assert_eq!(again, seen);
    }

    #[test]
    fn a_changed_record_restarts_the_expiry_clock() {
        let first = Instant::now();
        let later = first + Duration::from_secs(5);
        let seen = see(None, record(Some("other"), 10, 20, 3), first);
        // A renewal only moves renewTime; that is enough.
        let renewed = see(Some(seen), record(Some("other"), 10, 22, 3), later);
        assert_eq!(renewed, Observed { spec: record(Some("other"), 10, 22, 3), at: later });
    }

    #[test]
    fn a_release_clears_the_holder_and_keeps_the_transition_count() {
        let spec = released(&record(Some("me"), 10, 20, 3), wall(100));
        let want = LeaseSpec { lease_duration_seconds: Some(1), ..record(Some(""), 100, 100, 3) };
        assert_eq!(spec, want);
    }

    #[test]
    fn acquisition_retries_are_jittered_between_one_and_two_point_two_periods() {
        let period = Duration::from_secs(2);
        for _ in 0..1_000 {
            let d = jittered(period);
            assert!(d >= period && d <= period.mul_f64(1.0 + JITTER_FACTOR), "{d:?}");
        }
    }

    #[test]
    fn lost_says_why() {
        assert_eq!(Lost::AnotherHolder("b".into()).to_string(), "the lease is now held by \"b\"");
        let deadline = Lost::RenewDeadline { last_error: Some("boom".into()) };
        assert_eq!(deadline.to_string(), "no renewal succeeded within the renew deadline (last error: boom)");
    }
}
