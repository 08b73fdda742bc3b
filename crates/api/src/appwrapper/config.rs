//! The AppWrapper controller's configuration (upstream `pkg/config`): cluster-wide defaults,
//! their validation with upstream's messages, and the per-AppWrapper values upstream reads from
//! the AppWrapper's annotations with upstream's parsing and clipping.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::keys;

/// `appwrapper.faultTolerance`: the cluster-wide fault-tolerance parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultToleranceConfig {
    pub admission_grace_period: Duration,
    pub warmup_grace_period: Duration,
    pub failure_grace_period: Duration,
    /// Upstream's config key `resetPause`.
    pub retry_pause_period: Duration,
    pub retry_limit: i32,
    /// Upstream's config key `deletionGracePeriod`.
    pub forceful_deletion_grace_period: Duration,
    /// Upstream's config key `gracePeriodCeiling`: the cap of every clipped duration.
    pub grace_period_maximum: Duration,
    /// Upstream's config key `successTTLCeiling`: an annotation can only shorten it.
    pub success_ttl: Duration,
}

impl Default for FaultToleranceConfig {
    /// Upstream's defaults.
    fn default() -> Self {
        FaultToleranceConfig {
            admission_grace_period: Duration::from_secs(60),
            warmup_grace_period: Duration::from_secs(5 * 60),
            failure_grace_period: Duration::from_secs(60),
            retry_pause_period: Duration::from_secs(90),
            retry_limit: 3,
            forceful_deletion_grace_period: Duration::from_secs(10 * 60),
            grace_period_maximum: Duration::from_secs(24 * 60 * 60),
            success_ttl: Duration::from_secs(7 * 24 * 60 * 60),
        }
    }
}

impl FaultToleranceConfig {
    /// Every grace period zero: a failure resets at once (benchmarks, tests).
    pub fn zero_grace() -> Self {
        FaultToleranceConfig {
            admission_grace_period: Duration::ZERO,
            warmup_grace_period: Duration::ZERO,
            failure_grace_period: Duration::ZERO,
            retry_pause_period: Duration::ZERO,
            forceful_deletion_grace_period: Duration::ZERO,
            ..Default::default()
        }
    }

    /// Upstream's `ValidateAppWrapperConfig`, with its exact messages (typos included).
    pub fn validate(&self) -> Result<(), String> {
        let ceiling = self.grace_period_maximum;
        if self.forceful_deletion_grace_period > ceiling {
            return Err(format!(
                "ForcefulDelectionGracePeriod {} exceeds GracePeriodCeiling {}",
                go_duration(self.forceful_deletion_grace_period),
                go_duration(ceiling)
            ));
        }
        if self.retry_pause_period > ceiling {
            return Err(format!(
                "RetryPausePeriod {} exceeds GracePeriodCeiling {}",
                go_duration(self.retry_pause_period),
                go_duration(ceiling)
            ));
        }
        if self.failure_grace_period > ceiling {
            return Err(format!(
                "FailureGracePeriod {} exceeds GracePeriodCeiling {}",
                go_duration(self.failure_grace_period),
                go_duration(ceiling)
            ));
        }
        if self.admission_grace_period > ceiling {
            return Err(format!(
                "AdmissionGracePeriod {} exceeds GracePeriodCeiling {}",
                go_duration(self.admission_grace_period),
                go_duration(ceiling)
            ));
        }
        if self.warmup_grace_period > ceiling {
            return Err(format!(
                "AdmissionGracePeriod {} exceeds GracePeriodCeiling {}",
                go_duration(self.warmup_grace_period),
                go_duration(ceiling)
            ));
        }
        if self.admission_grace_period > self.warmup_grace_period {
            return Err(format!(
                "AdmissionGracePeriod {} exceeds AdmissionGracePeriod {}",
                go_duration(self.warmup_grace_period),
                go_duration(ceiling)
            ));
        }
        if self.success_ttl.is_zero() {
            return Err(format!("SuccessTTL {} is not a positive duration", go_duration(self.success_ttl)));
        }
        Ok(())
    }

    /// The parameters that apply to the AppWrapper with metadata `meta`.
    pub fn for_appwrapper(&self, meta: &ObjectMeta) -> FaultTolerance {
        let ann = meta.annotations.as_ref();
        let get = |k: &str| ann.and_then(|a| a.get(k)).map(String::as_str);
        // Malformed → default; negative → 0; beyond the ceiling → the ceiling.
        let clipped = |k: &str, default: Duration| match get(k).map(parse_go_duration_signed) {
            Some(Some(d)) if d <= 0 => Duration::ZERO,
            Some(Some(d)) => Duration::from_nanos(d as u64).min(self.grace_period_maximum),
            _ => default,
        };
        let success_ttl = match get(keys::SUCCESS_TTL_DURATION).and_then(parse_go_duration_signed) {
            Some(d) if d > 0 && (d as u128) < self.success_ttl.as_nanos() => Duration::from_nanos(d as u64),
            _ => self.success_ttl,
        };
        FaultTolerance {
            admission_grace_period: clipped(keys::ADMISSION_GRACE_PERIOD_DURATION, self.admission_grace_period),
            warmup_grace_period: clipped(keys::WARMUP_GRACE_PERIOD_DURATION, self.warmup_grace_period),
            failure_grace_period: clipped(keys::FAILURE_GRACE_PERIOD_DURATION, self.failure_grace_period),
            retry_pause_period: clipped(keys::RETRY_PAUSE_PERIOD_DURATION, self.retry_pause_period),
            retry_limit: get(keys::RETRY_LIMIT).and_then(|s| s.parse().ok()).unwrap_or(self.retry_limit),
            forceful_deletion_grace_period: clipped(
                keys::FORCEFUL_DELETION_GRACE_PERIOD_DURATION,
                self.forceful_deletion_grace_period,
            ),
            deletion_on_failure_grace_period: clipped(keys::DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, Duration::ZERO),
            success_ttl,
            terminal_exit_codes: get(keys::TERMINAL_EXIT_CODES).map(parse_exit_codes).unwrap_or_default(),
            retryable_exit_codes: get(keys::RETRYABLE_EXIT_CODES).map(parse_exit_codes).unwrap_or_default(),
        }
    }
}

/// The parameters in force for one AppWrapper.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultTolerance {
    pub admission_grace_period: Duration,
    pub warmup_grace_period: Duration,
    pub failure_grace_period: Duration,
    pub retry_pause_period: Duration,
    pub retry_limit: i32,
    pub forceful_deletion_grace_period: Duration,
    /// How long a Failed AppWrapper keeps its resources for debugging (default 0).
    pub deletion_on_failure_grace_period: Duration,
    pub success_ttl: Duration,
    pub terminal_exit_codes: Vec<i32>,
    pub retryable_exit_codes: Vec<i32>,
}

impl FaultTolerance {
    /// Whether a container that exited with `code` (non-zero) makes the failure terminal:
    /// a listed terminal code, or, when retryable codes are listed, any code not among them.
    pub fn is_terminal_exit_code(&self, code: i32) -> bool {
        self.terminal_exit_codes.contains(&code)
            || (!self.retryable_exit_codes.is_empty() && !self.retryable_exit_codes.contains(&code))
    }
}

/// Upstream's parsing: split on `,`, keep what `strconv.Atoi` accepts (no trimming).
fn parse_exit_codes(s: &str) -> Vec<i32> {
    s.split(',').filter_map(|c| c.parse().ok()).collect()
}

/// A Go `time.Duration` string (`"90s"`, `"1h30m"`, `"1.5m"`, `"-5s"`, `"0"`) in nanoseconds;
/// `None` if malformed. Go's grammar is a subset of jiff's "friendly" duration format.
fn parse_go_duration_signed(s: &str) -> Option<i128> {
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    if unsigned == "0" {
        return Some(0);
    }
    // Go requires a unit on every number and allows no spaces or words.
    if unsigned.is_empty() || unsigned.contains(|c: char| c.is_whitespace() || c == ',') || s.starts_with(['P', 'p']) {
        return None;
    }
    let d: jiff::SignedDuration = s.parse().ok()?;
    Some(d.as_nanos())
}

/// Formats a duration as Go's `Duration.String` does (`1m30s`, `24h0m0s`, `500ms`), for
/// messages that print one.
pub fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        return if ns < 1_000 {
            format!("{ns}ns")
        } else if ns < 1_000_000 {
            format!("{}µs", trim(ns as f64 / 1e3))
        } else {
            format!("{}ms", trim(ns as f64 / 1e6))
        };
    }
    let h = ns / 3_600_000_000_000;
    let m = ns / 60_000_000_000 % 60;
    let s = (ns % 60_000_000_000) as f64 / 1e9;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim(s)));
    out
}

fn trim(x: f64) -> String {
    let s = format!("{x:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One `resourceTaints` entry: a node label `key=value` that flags a resource, with the effect
/// it has (`PreferNoSchedule`, `NoSchedule` or `NoExecute`). Matched against node *labels*, as
/// upstream's Autopilot integration does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl ResourceTaint {
    pub fn new(key: &str, value: &str, effect: &str) -> Self {
        ResourceTaint { key: key.into(), value: value.into(), effect: effect.into() }
    }
}

/// `appwrapper.autopilot`.
#[derive(Clone, Debug, PartialEq)]
pub struct AutopilotConfig {
    pub inject_anti_affinities: bool,
    pub monitor_nodes: bool,
    pub prefer_no_schedule_weight: i32,
    /// Per resource name (e.g. `nvidia.com/gpu`), the node labels that flag it.
    pub resource_taints: BTreeMap<String, Vec<ResourceTaint>>,
}

impl Default for AutopilotConfig {
    /// Upstream's defaults.
    fn default() -> Self {
        let gpu = vec![
            ResourceTaint::new("autopilot.ibm.com/gpuhealth", "WARN", "PreferNoSchedule"),
            ResourceTaint::new("autopilot.ibm.com/gpuhealth", "TESTING", "NoSchedule"),
            ResourceTaint::new("autopilot.ibm.com/gpuhealth", "EVICT", "NoExecute"),
        ];
        AutopilotConfig {
            inject_anti_affinities: true,
            monitor_nodes: true,
            prefer_no_schedule_weight: 50,
            resource_taints: BTreeMap::from([("nvidia.com/gpu".to_string(), gpu)]),
        }
    }
}

/// `appwrapper`: the whole controller configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppWrapperConfig {
    pub fault_tolerance: FaultToleranceConfig,
    pub autopilot: AutopilotConfig,
    /// Injected into pod templates that name no scheduler.
    pub scheduler_name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn no_annotations_take_the_cluster_defaults() {
        let ft = FaultToleranceConfig::default().for_appwrapper(&ObjectMeta::default());
        assert_eq!(ft.admission_grace_period, Duration::from_secs(60));
        assert_eq!(ft.warmup_grace_period, Duration::from_secs(300));
        assert_eq!(ft.failure_grace_period, Duration::from_secs(60));
        assert_eq!(ft.retry_pause_period, Duration::from_secs(90));
        assert_eq!(ft.retry_limit, 3);
        assert_eq!(ft.forceful_deletion_grace_period, Duration::from_secs(600));
        assert_eq!(ft.deletion_on_failure_grace_period, Duration::ZERO);
        assert_eq!(ft.success_ttl, Duration::from_secs(7 * 24 * 3600));
        assert!(ft.terminal_exit_codes.is_empty() && ft.retryable_exit_codes.is_empty());
    }

    #[test]
    fn annotation_durations_use_go_syntax() {
        let ft = FaultToleranceConfig::default().for_appwrapper(&meta(&[
            (keys::ADMISSION_GRACE_PERIOD_DURATION, "10s"),
            (keys::WARMUP_GRACE_PERIOD_DURATION, "1m30s"),
            (keys::FAILURE_GRACE_PERIOD_DURATION, "1.5m"),
            (keys::RETRY_PAUSE_PERIOD_DURATION, "250ms"),
            (keys::FORCEFUL_DELETION_GRACE_PERIOD_DURATION, "0"),
            (keys::DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, "2h"),
        ]));
        assert_eq!(ft.admission_grace_period, Duration::from_secs(10));
        assert_eq!(ft.warmup_grace_period, Duration::from_secs(90));
        assert_eq!(ft.failure_grace_period, Duration::from_secs(90));
        assert_eq!(ft.retry_pause_period, Duration::from_millis(250));
        assert_eq!(ft.forceful_deletion_grace_period, Duration::ZERO);
        assert_eq!(ft.deletion_on_failure_grace_period, Duration::from_secs(7200));
    }

    #[test]
    fn malformed_durations_fall_back_to_the_default() {
        for bad in ["", "10", "ten seconds", "10 s", "P1D", "1h,2m"] {
            let ft = FaultToleranceConfig::default().for_appwrapper(&meta(&[
                (keys::FAILURE_GRACE_PERIOD_DURATION, bad),
                (keys::DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, bad),
            ]));
            assert_eq!(ft.failure_grace_period, Duration::from_secs(60), "{bad:?}");
            assert_eq!(ft.deletion_on_failure_grace_period, Duration::ZERO, "{bad:?}");
        }
    }

    #[test]
    fn negative_durations_clip_to_zero_and_long_ones_to_the_ceiling() {
        let ft = FaultToleranceConfig::default().for_appwrapper(&meta(&[
            (keys::ADMISSION_GRACE_PERIOD_DURATION, "-5s"),
            (keys::RETRY_PAUSE_PERIOD_DURATION, "100h"),
            (keys::DELETION_ON_FAILURE_GRACE_PERIOD_DURATION, "48h"),
        ]));
        assert_eq!(ft.admission_grace_period, Duration::ZERO);
        assert_eq!(ft.retry_pause_period, Duration::from_secs(24 * 3600));
        assert_eq!(ft.deletion_on_failure_grace_period, Duration::from_secs(24 * 3600));
    }

    #[test]
    fn success_ttl_annotation_can_only_shorten() {
        let ttl = |v: &str| {
            FaultToleranceConfig::default().for_appwrapper(&meta(&[(keys::SUCCESS_TTL_DURATION, v)])).success_ttl
        };
        assert_eq!(ttl("1h"), Duration::from_secs(3600));
        assert_eq!(ttl("1000h"), Duration::from_secs(7 * 24 * 3600));
        assert_eq!(ttl("0s"), Duration::from_secs(7 * 24 * 3600));
        assert_eq!(ttl("-1h"), Duration::from_secs(7 * 24 * 3600));
    }

    #[test]
    fn retry_limit_is_parsed_as_an_integer_and_not_clipped() {
        let limit =
            |v: &str| FaultToleranceConfig::default().for_appwrapper(&meta(&[(keys::RETRY_LIMIT, v)])).retry_limit;
        assert_eq!(limit("0"), 0);
        assert_eq!(limit("100"), 100);
        assert_eq!(limit("-1"), -1);
        assert_eq!(limit("two"), 3);
    }

    #[test]
    fn exit_codes_keep_only_what_atoi_accepts() {
        let ft = FaultToleranceConfig::default()
            .for_appwrapper(&meta(&[(keys::TERMINAL_EXIT_CODES, "3, 10,42,x"), (keys::RETRYABLE_EXIT_CODES, "")]));
        assert_eq!(ft.terminal_exit_codes, [3, 42]);
        assert!(ft.retryable_exit_codes.is_empty());
    }

    #[test]
    fn terminal_is_a_listed_code_or_one_missing_from_the_retryable_list() {
        let ft = |t: &str, r: &str| {
            FaultToleranceConfig::default()
                .for_appwrapper(&meta(&[(keys::TERMINAL_EXIT_CODES, t), (keys::RETRYABLE_EXIT_CODES, r)]))
        };
        assert!(ft("3", "").is_terminal_exit_code(3));
        assert!(!ft("3", "").is_terminal_exit_code(1));
        assert!(ft("", "1,2").is_terminal_exit_code(7));
        assert!(!ft("", "1,2").is_terminal_exit_code(2));
        assert!(!ft("", "").is_terminal_exit_code(1));
    }

    #[test]
    fn config_validation_uses_upstream_messages() {
        let ok = FaultToleranceConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let c = FaultToleranceConfig { retry_pause_period: Duration::from_secs(25 * 3600), ..ok.clone() };
        assert_eq!(c.validate().unwrap_err(), "RetryPausePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s");
        let c = FaultToleranceConfig { forceful_deletion_grace_period: Duration::from_secs(25 * 3600), ..ok.clone() };
        assert_eq!(
            c.validate().unwrap_err(),
            "ForcefulDelectionGracePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s"
        );
        let c = FaultToleranceConfig { admission_grace_period: Duration::from_secs(600), ..ok.clone() };
        assert_eq!(c.validate().unwrap_err(), "AdmissionGracePeriod 5m0s exceeds AdmissionGracePeriod 24h0m0s");
        let c = FaultToleranceConfig { success_ttl: Duration::ZERO, ..ok.clone() };
        assert_eq!(c.validate().unwrap_err(), "SuccessTTL 0s is not a positive duration");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(FaultToleranceConfig::zero_grace().validate(), Ok(()));
    }
}
