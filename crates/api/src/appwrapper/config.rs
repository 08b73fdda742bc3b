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
        // Upstream checks warmup under the admission name.
        for (name, d) in [
            ("ForcefulDelectionGracePeriod", self.forceful_deletion_grace_period),
            ("RetryPausePeriod", self.retry_pause_period),
            ("FailureGracePeriod", self.failure_grace_period),
            ("AdmissionGracePeriod", self.admission_grace_period),
            ("AdmissionGracePeriod", self.warmup_grace_period),
        ] {
            if d > ceiling {
                return Err(format!("{name} {} exceeds GracePeriodCeiling {}", go_duration(d), go_duration(ceiling)));
            }
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

impl AppWrapperConfig {
    /// Reads upstream's `OperatorConfig` YAML (the value of its ConfigMap's single data key), or
    /// that ConfigMap itself (`kind: ConfigMap`), then validates it as upstream does at startup.
    ///
    /// Only `appwrapper.faultTolerance`, `appwrapper.autopilot` and `appwrapper.schedulerName`
    /// are used; every other key is accepted and ignored. As upstream (YAML → JSON unmarshalled
    /// over the defaults), a missing key keeps its default and `resourceTaints` entries are
    /// merged into the default map (a resource's list replaces its default list). Durations are
    /// integer nanoseconds (Go's `time.Duration` in JSON) or Go duration strings (`"90s"`).
    /// Errors name the field and where it is (`line 3 column 27: appwrapper.faultTolerance...`).
    pub fn from_yaml(text: &str) -> Result<AppWrapperConfig, String> {
        let doc = parse_document(text)?;
        match doc.kind.as_deref() {
            None => doc.into_config(),
            Some("ConfigMap") => {
                // Upstream: "must hold exactly one data key".
                let mut data = doc.data.unwrap_or_default();
                let count = data.len();
                let (key, value) = match data.pop_first() {
                    Some(entry) if count == 1 => entry,
                    _ => {
                        return Err(format!(
                            "the ConfigMap must hold exactly one data key (the configuration), not {count}"
                        ));
                    }
                };
                parse_document(&value)
                    .and_then(|inner| match inner.kind {
                        Some(kind) => Err(format!("expected the OperatorConfig YAML, not a {kind}")),
                        None => inner.into_config(),
                    })
                    .map_err(|e| format!("ConfigMap data {key:?}: {e}"))
            }
            Some(kind) => Err(format!(
                "expected upstream's OperatorConfig YAML (`appwrapper: ...`) or a ConfigMap holding it, not a {kind}"
            )),
        }
    }
}

/// One YAML document; empty or `null` is upstream's empty ConfigMap value (all defaults).
fn parse_document(text: &str) -> Result<ConfigDocument, String> {
    let blank = text.lines().map(str::trim).all(|l| l.is_empty() || l.starts_with('#') || l == "---");
    if blank {
        return Ok(ConfigDocument::default());
    }
    match serde_saphyr::from_str::<Option<ConfigDocument>>(text) {
        Ok(doc) => Ok(doc.unwrap_or_default()),
        Err(e) => {
            let message = e.without_snippet().to_string();
            let message = strip_position(&message);
            Err(match e.location() {
                Some(at) => format!("line {} column {}: {message}", at.line(), at.column()),
                None => message.to_string(),
            })
        }
    }
}

/// A serde_saphyr message without the position it appends (` at line 3, column 27`).
fn strip_position(message: &str) -> &str {
    let mut s = message;
    while let Some(i) = s.rfind(" at line ") {
        let position = &s[i + " at line ".len()..];
        let is_position = position
            .split_once(", column ")
            .is_some_and(|(l, c)| [l, c].iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
        if !is_position {
            break;
        }
        s = &s[..i];
    }
    s
}

/// `#[serde(default, deserialize_with = "...")]` for a key of the file: its errors start with
/// the key's path (serde_saphyr's say only where the value is).
macro_rules! config_keys {
    ($($f:ident: $path:literal,)*) => {$(
        fn $f<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
            config_key(d, $path)
        }
    )*};
}

config_keys! {
    de_kind: "kind",
    de_data: "data",
    de_appwrapper: "appwrapper",
    de_fault_tolerance: "appwrapper.faultTolerance",
    de_autopilot: "appwrapper.autopilot",
    de_admission: "appwrapper.faultTolerance.admissionGracePeriod",
    de_warmup: "appwrapper.faultTolerance.warmupGracePeriod",
    de_failure: "appwrapper.faultTolerance.failureGracePeriod",
    de_reset_pause: "appwrapper.faultTolerance.resetPause",
    de_retry_limit: "appwrapper.faultTolerance.retryLimit",
    de_deletion: "appwrapper.faultTolerance.deletionGracePeriod",
    de_ceiling: "appwrapper.faultTolerance.gracePeriodCeiling",
    de_success_ttl: "appwrapper.faultTolerance.successTTLCeiling",
    de_inject: "appwrapper.autopilot.injectAntiAffinities",
    de_monitor: "appwrapper.autopilot.monitorNodes",
    de_weight: "appwrapper.autopilot.preferNoScheduleWeight",
    de_taints: "appwrapper.autopilot.resourceTaints",
    de_scheduler: "appwrapper.schedulerName",
}

fn config_key<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
    path: &str,
) -> Result<Option<T>, D::Error> {
    use serde::Deserialize;
    Option::<T>::deserialize(d).map_err(|e| {
        let message = e.to_string();
        if message.strip_prefix(path).is_some_and(|rest| rest.starts_with('.')) {
            return e; // names a key inside, at its position
        }
        // The new error is placed at the value again.
        serde::de::Error::custom(format_args!("{path}: {}", strip_position(&message)))
    })
}

/// Upstream's `OperatorConfig` (only `appwrapper` is used), or a ConfigMap (`kind`, `data`).
#[derive(Default, serde::Deserialize)]
struct ConfigDocument {
    #[serde(default, deserialize_with = "de_kind")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "de_data")]
    data: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "de_appwrapper")]
    appwrapper: Option<AppWrapperFile>,
}

impl ConfigDocument {
    /// Applies the file over upstream's defaults, then validates.
    fn into_config(self) -> Result<AppWrapperConfig, String> {
        let mut config = AppWrapperConfig::default();
        let aw = self.appwrapper.unwrap_or_default();
        if let Some(ft) = aw.fault_tolerance {
            let c = &mut config.fault_tolerance;
            for (value, field) in [
                (ft.admission_grace_period, &mut c.admission_grace_period),
                (ft.warmup_grace_period, &mut c.warmup_grace_period),
                (ft.failure_grace_period, &mut c.failure_grace_period),
                (ft.reset_pause, &mut c.retry_pause_period),
                (ft.deletion_grace_period, &mut c.forceful_deletion_grace_period),
                (ft.grace_period_ceiling, &mut c.grace_period_maximum),
                (ft.success_ttl_ceiling, &mut c.success_ttl),
            ] {
                if let Some(ConfigDuration(d)) = value {
                    *field = d;
                }
            }
            c.retry_limit = ft.retry_limit.unwrap_or(c.retry_limit);
        }
        if let Some(ap) = aw.autopilot {
            let c = &mut config.autopilot;
            c.inject_anti_affinities = ap.inject_anti_affinities.unwrap_or(c.inject_anti_affinities);
            c.monitor_nodes = ap.monitor_nodes.unwrap_or(c.monitor_nodes);
            c.prefer_no_schedule_weight = ap.prefer_no_schedule_weight.unwrap_or(c.prefer_no_schedule_weight);
            for (resource, taints) in ap.resource_taints.unwrap_or_default() {
                let taints = taints.unwrap_or_default().into_iter();
                let taints = taints.map(|t| ResourceTaint { key: t.key, value: t.value, effect: t.effect });
                c.resource_taints.insert(resource, taints.collect());
            }
        }
        config.scheduler_name = aw.scheduler_name.filter(|n| !n.is_empty());
        config.fault_tolerance.validate()?;
        Ok(config)
    }
}

/// `appwrapper`: unknown keys (`defaultQueueName`, `userRBACAdmissionCheck`, the Kueue
/// settings, ...) are ignored.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppWrapperFile {
    #[serde(default, deserialize_with = "de_fault_tolerance")]
    fault_tolerance: Option<FaultToleranceFile>,
    #[serde(default, deserialize_with = "de_autopilot")]
    autopilot: Option<AutopilotFile>,
    #[serde(default, deserialize_with = "de_scheduler")]
    scheduler_name: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct FaultToleranceFile {
    #[serde(default, deserialize_with = "de_admission")]
    admission_grace_period: Option<ConfigDuration>,
    #[serde(default, deserialize_with = "de_warmup")]
    warmup_grace_period: Option<ConfigDuration>,
    #[serde(default, deserialize_with = "de_failure")]
    failure_grace_period: Option<ConfigDuration>,
    #[serde(default, deserialize_with = "de_reset_pause")]
    reset_pause: Option<ConfigDuration>,
    #[serde(default, deserialize_with = "de_retry_limit")]
    retry_limit: Option<i32>,
    #[serde(default, deserialize_with = "de_deletion")]
    deletion_grace_period: Option<ConfigDuration>,
    #[serde(default, deserialize_with = "de_ceiling")]
    grace_period_ceiling: Option<ConfigDuration>,
    #[serde(default, rename = "successTTLCeiling", deserialize_with = "de_success_ttl")]
    success_ttl_ceiling: Option<ConfigDuration>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AutopilotFile {
    #[serde(default, deserialize_with = "de_inject")]
    inject_anti_affinities: Option<bool>,
    #[serde(default, deserialize_with = "de_monitor")]
    monitor_nodes: Option<bool>,
    #[serde(default, deserialize_with = "de_weight")]
    prefer_no_schedule_weight: Option<i32>,
    #[serde(default, deserialize_with = "de_taints")]
    resource_taints: Option<BTreeMap<String, Option<Vec<TaintFile>>>>,
}

/// A `v1.Taint` as upstream reads it (`timeAdded` ignored).
#[derive(serde::Deserialize)]
struct TaintFile {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

/// A duration in the file: integer nanoseconds (Go's `time.Duration` from JSON, as in
/// upstream's ConfigMap) or a Go duration string (`"90s"`, `"1m30s"`); never negative.
struct ConfigDuration(Duration);

impl<'de> serde::Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Unexpected, Visitor};
        struct V;
        impl Visitor<'_> for V {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration: integer nanoseconds or a Go duration such as \"90s\" or \"1m30s\"")
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<ConfigDuration, E> {
                match i64::try_from(v) {
                    Ok(_) => Ok(ConfigDuration(Duration::from_nanos(v))),
                    Err(_) => Err(E::invalid_value(Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<ConfigDuration, E> {
                match u64::try_from(v) {
                    Ok(v) => Ok(ConfigDuration(Duration::from_nanos(v))),
                    Err(_) => {
                        let magnitude = go_duration(Duration::from_nanos(v.unsigned_abs()));
                        Err(E::custom(format_args!("negative duration -{magnitude}")))
                    }
                }
            }
            fn visit_str<E: Error>(self, s: &str) -> Result<ConfigDuration, E> {
                match parse_go_duration_signed(s) {
                    Some(ns) if ns < 0 => Err(E::custom(format_args!("negative duration {s:?}"))),
                    Some(ns) if ns <= i64::MAX as i128 => Ok(ConfigDuration(Duration::from_nanos(ns as u64))),
                    _ => Err(E::invalid_value(Unexpected::Str(s), &self)),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
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

    /// Upstream's ConfigMap value, durations in nanoseconds.
    const UPSTREAM: &str = "\
appwrapper:
  enableKueueIntegrations: true
  defaultQueueName: default-queue
  userRBACAdmissionCheck: true
  faultTolerance:
    admissionGracePeriod: 60000000000
    warmupGracePeriod: 300000000000
    failureGracePeriod: 120000000000
    resetPause: 90000000000
    retryLimit: 5
    deletionGracePeriod: 600000000000
    gracePeriodCeiling: 86400000000000
    successTTLCeiling: 3600000000000
  autopilot:
    injectAntiAffinities: false
    monitorNodes: true
    preferNoScheduleWeight: 10
    resourceTaints:
      nvidia.com/gpu:
      - {key: autopilot.ibm.com/gpuhealth, value: EVICT, effect: NoExecute}
  schedulerName: my-scheduler
controllerManager:
  health: {bindAddress: ':8081'}
  leaderElection: true
certManagement: {namespace: appwrapper-system}
webhooksEnabled: true
";

    #[test]
    fn from_yaml_reads_upstreams_operator_config() {
        let c = AppWrapperConfig::from_yaml(UPSTREAM).unwrap();
        let ft = &c.fault_tolerance;
        assert_eq!(ft.admission_grace_period, Duration::from_secs(60));
        assert_eq!(ft.warmup_grace_period, Duration::from_secs(300));
        assert_eq!(ft.failure_grace_period, Duration::from_secs(120));
        assert_eq!(ft.retry_pause_period, Duration::from_secs(90));
        assert_eq!(ft.retry_limit, 5);
        assert_eq!(ft.forceful_deletion_grace_period, Duration::from_secs(600));
        assert_eq!(ft.grace_period_maximum, Duration::from_secs(24 * 3600));
        assert_eq!(ft.success_ttl, Duration::from_secs(3600));
        assert!(!c.autopilot.inject_anti_affinities && c.autopilot.monitor_nodes);
        assert_eq!(c.autopilot.prefer_no_schedule_weight, 10);
        let gpu = [ResourceTaint::new("autopilot.ibm.com/gpuhealth", "EVICT", "NoExecute")];
        assert_eq!(c.autopilot.resource_taints, BTreeMap::from([("nvidia.com/gpu".to_string(), gpu.to_vec())]));
        assert_eq!(c.scheduler_name.as_deref(), Some("my-scheduler"));
    }

    #[test]
    fn from_yaml_durations_are_nanoseconds_or_go_strings() {
        for (value, want) in [
            ("60000000000", Duration::from_secs(60)),
            ("0", Duration::ZERO),
            ("1", Duration::from_nanos(1)),
            ("90s", Duration::from_secs(90)),
            ("\"1m30s\"", Duration::from_secs(90)),
            ("1.5m", Duration::from_secs(90)),
            ("250ms", Duration::from_millis(250)),
            ("2h", Duration::from_secs(7200)),
        ] {
            let c = AppWrapperConfig::from_yaml(&format!("appwrapper:\n  faultTolerance:\n    resetPause: {value}\n"));
            assert_eq!(c.map(|c| c.fault_tolerance.retry_pause_period), Ok(want), "{value}");
        }
    }

    #[test]
    fn from_yaml_missing_keys_keep_upstreams_defaults() {
        for text in ["", "# nothing\n", "---\n", "~\n", "{}\n", "appwrapper:\n", "appwrapper: {faultTolerance: {}}\n"] {
            assert_eq!(AppWrapperConfig::from_yaml(text), Ok(AppWrapperConfig::default()), "{text:?}");
        }
        let c = AppWrapperConfig::from_yaml("appwrapper:\n  faultTolerance:\n    retryLimit: 0\n").unwrap();
        let want = FaultToleranceConfig { retry_limit: 0, ..Default::default() };
        assert_eq!((c.fault_tolerance, c.autopilot, c.scheduler_name), (want, AutopilotConfig::default(), None));
        // As Go's JSON decoding into the default map: other resources keep their entries.
        let c = AppWrapperConfig::from_yaml(
            "appwrapper:\n  autopilot:\n    resourceTaints:\n      example.com/fpga: [{key: fpga, value: bad, effect: NoSchedule}]\n",
        )
        .unwrap();
        let defaults = AutopilotConfig::default().resource_taints;
        assert_eq!(c.autopilot.resource_taints["nvidia.com/gpu"], defaults["nvidia.com/gpu"]);
        assert_eq!(c.autopilot.resource_taints["example.com/fpga"], [ResourceTaint::new("fpga", "bad", "NoSchedule")]);
    }

    #[test]
    fn from_yaml_ignores_unknown_keys() {
        for text in [
            "controllerManager: {metrics: {bindAddress: ':8443'}}\nwebhooksEnabled: false\n",
            "appwrapper:\n  defaultQueueName: q\n  userRBACAdmissionCheck: false\n  kueueJobReconciller: {manageJobsWithoutQueueName: true}\n",
            "appwrapper:\n  faultTolerance:\n    someFutureKnob: [1, 2]\n  autopilot:\n    futureFlag: true\n",
        ] {
            let c = AppWrapperConfig::from_yaml(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(c, AppWrapperConfig::default(), "{text:?}");
        }
    }

    #[test]
    fn from_yaml_errors_name_the_field_and_its_position() {
        for (text, want) in [
            (
                "appwrapper:\n  faultTolerance:\n    admissionGracePeriod: ten\n",
                "line 3 column 27: appwrapper.faultTolerance.admissionGracePeriod: invalid value: string \"ten\", \
                 expected a duration: integer nanoseconds or a Go duration such as \"90s\" or \"1m30s\"",
            ),
            (
                "appwrapper:\n  faultTolerance: {warmupGracePeriod: \"90\"}\n",
                "line 2 column 39: appwrapper.faultTolerance.warmupGracePeriod: invalid value: string \"90\"",
            ),
            (
                "appwrapper:\n  faultTolerance:\n    failureGracePeriod: 1.5\n",
                "line 3 column 25: appwrapper.faultTolerance.failureGracePeriod: invalid type: floating point `1.5`",
            ),
            (
                "appwrapper:\n  faultTolerance:\n    resetPause: -5s\n",
                "line 3 column 17: appwrapper.faultTolerance.resetPause: negative duration \"-5s\"",
            ),
            (
                "appwrapper:\n  faultTolerance:\n    successTTLCeiling: -1\n",
                "line 3 column 24: appwrapper.faultTolerance.successTTLCeiling: negative duration -1ns",
            ),
            (
                "appwrapper:\n  faultTolerance:\n    retryLimit: three\n",
                "line 3 column 17: appwrapper.faultTolerance.retryLimit: ",
            ),
            (
                "appwrapper:\n  autopilot: {monitorNodes: maybe}\n",
                "line 2 column 29: appwrapper.autopilot.monitorNodes: ",
            ),
            (
                "appwrapper:\n  faultTolerance:\n    deletionGracePeriod: -60000000000\n",
                "line 3 column 26: appwrapper.faultTolerance.deletionGracePeriod: negative duration -1m0s",
            ),
            (
                "appwrapper:\n  autopilot:\n    resourceTaints:\n      nvidia.com/gpu: [{value: x}]\n",
                "line 4 column 7: appwrapper.autopilot.resourceTaints: missing field `key`",
            ),
            ("appwrapper:\n  faultTolerance: 5\n", "line 2 column 19: appwrapper.faultTolerance: "),
            ("appwrapper: [1]\n", "line 1 column 13: appwrapper: "),
            ("hello\n", "line 1 column 1: "),
            ("appwrapper: [\n", "line 1 column"),
        ] {
            let err = AppWrapperConfig::from_yaml(text).unwrap_err();
            assert!(err.starts_with(want), "{text:?}:\n got {err}\nwant {want}");
            assert!(!err.contains('\n') && !err.contains(" at line "), "{err}");
        }
    }

    #[test]
    fn from_yaml_accepts_the_configmap() {
        let configmap = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: appwrapper-operator-config\n  namespace: appwrapper-system\n\
             data:\n  config.yaml: |\n{}",
            UPSTREAM.lines().map(|l| format!("    {l}\n")).collect::<String>()
        );
        assert_eq!(AppWrapperConfig::from_yaml(&configmap), AppWrapperConfig::from_yaml(UPSTREAM));
        let one_key = "the ConfigMap must hold exactly one data key (the configuration)";
        for (text, want) in [
            ("kind: ConfigMap\ndata: {}\n", format!("{one_key}, not 0")),
            ("kind: ConfigMap\n", format!("{one_key}, not 0")),
            ("kind: ConfigMap\ndata: {a: '', b: ''}\n", format!("{one_key}, not 2")),
            (
                "kind: ConfigMap\ndata:\n  config.yaml: |\n    appwrapper:\n      faultTolerance: {retryLimit: x}\n",
                "ConfigMap data \"config.yaml\": line 2 column 32: appwrapper.faultTolerance.retryLimit: invalid i32".into(),
            ),
            (
                "kind: ConfigMap\ndata:\n  config.yaml: 'appwrapper: {faultTolerance: {resetPause: 25h}}'\n",
                "ConfigMap data \"config.yaml\": RetryPausePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s".into(),
            ),
            ("kind: ConfigMap\ndata:\n  config.yaml: 'kind: ConfigMap'\n", "ConfigMap data \"config.yaml\": expected".into()),
            (
                "kind: AppWrapper\n",
                "expected upstream's OperatorConfig YAML (`appwrapper: ...`) or a ConfigMap holding it, not a AppWrapper".into(),
            ),
        ] {
            let err = AppWrapperConfig::from_yaml(text).unwrap_err();
            assert!(err.starts_with(&want), "{text:?}:\n got {err}\nwant {want}");
        }
        let c = AppWrapperConfig::from_yaml("kind: ConfigMap\ndata:\n  config.yaml: ''\n");
        assert_eq!(c, Ok(AppWrapperConfig::default()));
    }

    #[test]
    fn from_yaml_validates_with_upstreams_messages() {
        for (fault_tolerance, want) in [
            ("{deletionGracePeriod: 25h}", "ForcefulDelectionGracePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s"),
            ("{gracePeriodCeiling: 1m}", "ForcefulDelectionGracePeriod 10m0s exceeds GracePeriodCeiling 1m0s"),
            ("{resetPause: 90000000000000}", "RetryPausePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s"),
            ("{failureGracePeriod: 48h}", "FailureGracePeriod 48h0m0s exceeds GracePeriodCeiling 24h0m0s"),
            ("{admissionGracePeriod: 10m}", "AdmissionGracePeriod 5m0s exceeds AdmissionGracePeriod 24h0m0s"),
            ("{successTTLCeiling: 0}", "SuccessTTL 0s is not a positive duration"),
        ] {
            let text = format!("appwrapper:\n  faultTolerance: {fault_tolerance}\n");
            assert_eq!(AppWrapperConfig::from_yaml(&text), Err(want.to_string()), "{fault_tolerance}");
        }
        let ok = "appwrapper:\n  faultTolerance: {admissionGracePeriod: 10m, warmupGracePeriod: 10m}\n";
        let admission = AppWrapperConfig::from_yaml(ok).map(|c| c.fault_tolerance.admission_grace_period);
        assert_eq!(admission, Ok(Duration::from_secs(600)));
    }
}
