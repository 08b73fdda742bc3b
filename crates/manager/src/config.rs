//! The manager's configuration: upstream JobSet's `config.jobset.x-k8s.io/v1alpha1` `Configuration`.
//!
//! Decoded as upstream's `pkg/config` decodes it (strictly: an unknown or repeated key is an
//! error), then defaulted as `api/config/v1alpha1/defaults.go` and validated as
//! `pkg/config/validation.go`, with upstream's messages. Every error is one line naming the file
//! and, where the file says it, the line, column and field path.
//!
//! As upstream's decoder (which defaults the type from the target): a missing `apiVersion` or
//! `kind`, and an empty file, are accepted.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use jobset_api::field::{FieldError, go_json, quote};
use jobset_api::jobset::Features;
use jobset_api::validation::{dns1035_label_errors, dns1123_subdomain_errors};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use serde_json::json;

pub const API_VERSION: &str = "config.jobset.x-k8s.io/v1alpha1";
pub const KIND: &str = "Configuration";

pub const DEFAULT_WEBHOOK_SERVICE_NAME: &str = "jobset-webhook-service";
pub const DEFAULT_WEBHOOK_SECRET_NAME: &str = "jobset-webhook-server-cert";
pub const DEFAULT_WEBHOOK_PORT: u16 = 9443;
pub const DEFAULT_HEALTH_PROBE_BIND_ADDRESS: &str = ":8081";
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = ":8443";
pub const DEFAULT_LEADER_ELECTION_ID: &str = "6d4f6a47.jobset.x-k8s.io";
pub const DEFAULT_LEADER_ELECTION_LEASE_DURATION: Duration = Duration::from_secs(15);
pub const DEFAULT_LEADER_ELECTION_RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const DEFAULT_LEADER_ELECTION_RETRY_PERIOD: Duration = Duration::from_secs(2);
pub const DEFAULT_RESOURCE_LOCK: &str = "leases";
pub const DEFAULT_CLIENT_CONNECTION_QPS: f64 = 500.0;
pub const DEFAULT_CLIENT_CONNECTION_BURST: u32 = 500;

/// Upstream's `Configuration` after `SetDefaults_Configuration`. An optional string that the
/// file leaves out or sets to `""` (unset, in Go) is `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    pub webhook: ControllerWebhook,
    pub leader_election: LeaderElectionConfiguration,
    pub metrics: ControllerMetrics,
    pub health: ControllerHealth,
    /// `None` without a `tls` key: the servers keep their defaults (TLS 1.2 and up).
    pub tls: Option<TlsOptions>,
    pub internal_cert_management: InternalCertManagement,
    pub client_connection: ClientConnection,
    /// `featureGates` as written (checked while parsing); see [`Configuration::features`].
    pub feature_gates: BTreeMap<String, bool>,
}

/// `webhook`.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerWebhook {
    /// A file's port of 0 or less is 9443 here, as controller-runtime's webhook server reads it.
    pub port: u16,
    pub host: Option<String>,
    pub cert_dir: Option<String>,
}

/// `leaderElection`: component-base's `LeaderElectionConfiguration`.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderElectionConfiguration {
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub resource_lock: String,
    pub resource_name: String,
    /// `None`: the manager's own namespace.
    pub resource_namespace: Option<String>,
}

/// `metrics`. A `bindAddress` of `"0"` turns the metrics server off.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerMetrics {
    pub bind_address: String,
    pub cert_dir: Option<String>,
}

/// `health`. `None` endpoint names are controller-runtime's `readyz` and `healthz`.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerHealth {
    pub health_probe_bind_address: String,
    pub readiness_endpoint_name: Option<String>,
    pub liveness_endpoint_name: Option<String>,
}

/// `tls`: Go `crypto/tls` names (`VersionTLS12`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
#[derive(Clone, Debug, PartialEq)]
pub struct TlsOptions {
    /// `None` means TLS 1.2.
    pub min_version: Option<String>,
    pub cipher_suites: Vec<String>,
}

/// `internalCertManagement`. As upstream, the names are defaulted only when it is enabled, so
/// they are `Some` whenever `enable` is true.
#[derive(Clone, Debug, PartialEq)]
pub struct InternalCertManagement {
    pub enable: bool,
    pub webhook_service_name: Option<String>,
    pub webhook_secret_name: Option<String>,
}

/// `clientConnection`: the API client's rate limit (client-go's `QPS`/`Burst`). Go's
/// `float32`/`int32` here widened to what the flags take; a negative burst, which client-go
/// refuses, is refused on parsing.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientConnection {
    pub qps: f64,
    pub burst: u32,
}

impl Default for Configuration {
    /// Upstream's defaults: what an empty file gives.
    fn default() -> Self {
        ConfigurationFile::default().defaulted()
    }
}

impl Configuration {
    /// The JobSet feature gates in force. The alpha gates default to on here (upstream: off),
    /// so `featureGates` only turns them off; component-base's `AllAlpha` sets every alpha gate
    /// the file does not name. Errors as component-base's `SetFromMap` for gates that [`parse`]
    /// would have refused (set in code).
    pub fn features(&self) -> Result<Features, ConfigError> {
        let gates = &self.feature_gates;
        if let Some(e) = gates.iter().find_map(|(name, &enabled)| check_gate(name, enabled).err()) {
            return Err(ConfigError(one_line(&format!("featureGates: {e}"))));
        }
        let gate = |name: &str| gates.get(name).or(gates.get(ALL_ALPHA)).copied().unwrap_or(true);
        Ok(Features {
            in_place_restart: gate("InPlaceRestart"),
            restart_job: gate("RestartJob"),
            elastic_jobset: gate("ElasticJobSet"),
            mutable_pod_resources: gate("MutablePodResourcesForSuspendedJobSets"),
            execution_attempts: gate("ExecutionAttemptsTracking"),
            active_deadline: gate("JobSetActiveDeadlineSeconds"),
        })
    }
}

/// Bad configuration: one line naming the file (and line, column and field where known).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Reads, defaults and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Configuration, ConfigError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{source}: {e}")))?;
    parse(&text, &source)
}

/// Parses, defaults and validates a configuration file's text; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<Configuration, ConfigError> {
    // As Go's JSON decoding of the YAML: an unquoted number or boolean is not a string.
    let options = serde_saphyr::options! { no_schema: true, with_snippet: false };
    let mut path = String::new();
    let file: Option<ConfigurationFile> = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = dotted(e.path());
            e.into_inner()
        })
    })
    .map_err(|e| decode_error(source, &path, &e))?;
    let config = file.unwrap_or_default().defaulted();
    let errors = config.validate();
    if errors.is_empty() {
        return Ok(config);
    }
    Err(ConfigError(one_line(&format!("{source}: {}", aggregate(&errors)))))
}

/// `file:line:column: path: message`, in the words upstream's strict decoder uses where it has
/// some (`unknown field`, `duplicate field`).
fn decode_error(source: &str, path: &str, e: &serde_saphyr::Error) -> ConfigError {
    use serde_saphyr::{DefaultMessageFormatter, Error, MessageFormatter};
    let e = e.without_snippet();
    let at = |what: &str| if path.is_empty() { what.to_string() } else { format!("{path}: {what}") };
    let message = match e {
        Error::SerdeUnknownField { expected, .. } => {
            format!("unknown field {} in the Configuration, expected one of {}", quote(path), expected.join(", "))
        }
        Error::DuplicateMappingKey { key: Some(key), .. } => at(&format!("duplicate field {}", quote(key))),
        Error::QuotingRequired { value, .. } => at(&format!("{value} is not a string: quote it")),
        Error::MultipleDocuments { .. } => "a second YAML document: the file must hold one Configuration".into(),
        other => at(&DefaultMessageFormatter.format_message(other)),
    };
    let position = match e.location() {
        Some(at) => format!("{source}:{}:{}", at.line(), at.column()),
        None => source.to_string(),
    };
    ConfigError(one_line(&format!("{position}: {message}")))
}

/// A serde path as the file spells it (`leaderElection.leaseDuration`, `tls.cipherSuites[1]`).
fn dotted(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            // A repeated key's segment is unknown; its error names the key.
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

/// Control characters (from the file's own text) escaped, so that the message stays one line.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `field.ErrorList.ToAggregate().Error()`: repeated messages dropped, several in brackets.
fn aggregate(errors: &[FieldError]) -> String {
    let mut messages: Vec<String> = Vec::new();
    for message in errors.iter().map(FieldError::to_string) {
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    match messages.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl Configuration {
    /// `pkg/config/validation.go`'s `validate`, with its messages.
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let certs = &self.internal_cert_management;
        if certs.enable {
            for (field, name, check) in [
                ("webhookServiceName", &certs.webhook_service_name, dns1035_label_errors as fn(&str) -> Vec<String>),
                ("webhookSecretName", &certs.webhook_secret_name, dns1123_subdomain_errors),
            ] {
                let Some(name) = name else { continue };
                let problems = check(name);
                if !problems.is_empty() {
                    let field = format!("internalCertManagement.{field}");
                    errors.push(FieldError::invalid(field, &json!(name), problems.join(",")));
                }
            }
        }
        if let Some(tls) = &self.tls {
            if let Err(detail) = parse_tls_options(tls) {
                errors.push(FieldError::invalid_rendered("tls", tls_json(tls), detail));
            } else if tls.min_version.as_deref() == Some("VersionTLS13") && !tls.cipher_suites.is_empty() {
                let detail = "may not be specified when `minVersion` is 'VersionTLS13'";
                errors.push(FieldError::invalid("tls.cipherSuites", &json!(tls.cipher_suites), detail));
            }
        }
        errors
    }
}

/// Upstream's `tlsconfig.ParseTLSOptions` (through component-base's `cliflag`): both problems
/// reported, joined by `; `.
fn parse_tls_options(tls: &TlsOptions) -> Result<(), String> {
    const USE: &str = "Please use VersionTLS12 or VersionTLS13";
    const USE_SECURE: &str = "Please use the secure cipher names";
    let version = match tls.min_version.as_deref().unwrap_or_default() {
        "" | "VersionTLS12" | "VersionTLS13" => None,
        v @ ("VersionTLS10" | "VersionTLS11") => Some(format!("invalid minVersion: {v} is not supported. {USE}")),
        v => Some(format!("invalid minVersion: unknown tls version {}. {USE}", quote(v))),
    };
    let known = |s: &&String| [SECURE_CIPHER_SUITES, INSECURE_CIPHER_SUITES].iter().any(|l| l.contains(&s.as_str()));
    let suites = tls.cipher_suites.iter().find(|s| !known(s)).map(|s| {
        let secure = SECURE_CIPHER_SUITES.join(" ");
        format!("invalid cipher suites: Cipher suite {s} not supported or doesn't exist. {USE_SECURE}: [{secure}]")
    });
    match (version, suites) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) => Err(format!("{a}; {b}")),
        (Some(e), None) | (None, Some(e)) => Err(e),
    }
}

/// `tls` as `json.Marshal` writes the Go struct in a field error: declared order, empty omitted.
fn tls_json(tls: &TlsOptions) -> String {
    let mut fields = Vec::new();
    if let Some(version) = &tls.min_version {
        fields.push(format!("\"minVersion\":{}", go_json(&json!(version))));
    }
    if !tls.cipher_suites.is_empty() {
        fields.push(format!("\"cipherSuites\":{}", go_json(&json!(tls.cipher_suites))));
    }
    format!("{{{}}}", fields.join(","))
}

/// Go's `tls.CipherSuites()` names plus component-base's two legacy aliases, sorted as
/// `cliflag.PreferredTLSCipherNames()` lists them in its error.
const SECURE_CIPHER_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// Go's `tls.InsecureCipherSuites()`: accepted too.
const INSECURE_CIPHER_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_RC4_128_SHA",
];

/// component-base's gate that sets every alpha gate the file does not name.
const ALL_ALPHA: &str = "AllAlpha";

/// component-base's `SetFromMap` checks of one `featureGates` entry against upstream's
/// `pkg/features` (`TLSOptions` is GA, locked to true) and component-base's own two gates.
fn check_gate(name: &str, enabled: bool) -> Result<(), String> {
    match name {
        "InPlaceRestart"
        | "RestartJob"
        | "ElasticJobSet"
        | "MutablePodResourcesForSuspendedJobSets"
        | "ExecutionAttemptsTracking"
        | "JobSetActiveDeadlineSeconds"
        | ALL_ALPHA
        | "AllBeta" => Ok(()),
        "TLSOptions" if enabled => Ok(()),
        "TLSOptions" => Err(format!("cannot set feature gate {name} to {enabled}, feature is locked to true")),
        _ => Err(format!("unrecognized feature gate: {name}")),
    }
}

/// The file as written: every key optional, none unknown.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ConfigurationFile {
    #[serde(rename = "apiVersion", default, deserialize_with = "de_api_version")]
    _api_version: (),
    #[serde(rename = "kind", default, deserialize_with = "de_kind")]
    _kind: (),
    webhook: Option<WebhookFile>,
    leader_election: Option<LeaderElectionFile>,
    metrics: Option<MetricsFile>,
    health: Option<HealthFile>,
    tls: Option<TlsFile>,
    internal_cert_management: Option<InternalCertManagementFile>,
    client_connection: Option<ClientConnectionFile>,
    #[serde(default, deserialize_with = "de_feature_gates")]
    feature_gates: BTreeMap<String, bool>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookFile {
    #[serde(default, deserialize_with = "de_port")]
    port: Option<u16>,
    host: Option<String>,
    cert_dir: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LeaderElectionFile {
    leader_elect: Option<bool>,
    lease_duration: Option<GoDuration>,
    renew_deadline: Option<GoDuration>,
    retry_period: Option<GoDuration>,
    resource_lock: Option<String>,
    resource_name: Option<String>,
    resource_namespace: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MetricsFile {
    bind_address: Option<String>,
    cert_dir: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HealthFile {
    health_probe_bind_address: Option<String>,
    readiness_endpoint_name: Option<String>,
    liveness_endpoint_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TlsFile {
    min_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct InternalCertManagementFile {
    enable: Option<bool>,
    webhook_service_name: Option<String>,
    webhook_secret_name: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClientConnectionFile {
    #[serde(default, deserialize_with = "de_qps")]
    qps: Option<f64>,
    #[serde(default, deserialize_with = "de_burst")]
    burst: Option<u32>,
}

impl ConfigurationFile {
    /// `SetDefaults_Configuration`, with component-base's
    /// `RecommendedDefaultLeaderElectionConfiguration`: empty strings and zero durations count
    /// as unset, as they do in Go.
    fn defaulted(self) -> Configuration {
        let webhook = self.webhook.unwrap_or_default();
        let election = self.leader_election.unwrap_or_default();
        let metrics = self.metrics.unwrap_or_default();
        let health = self.health.unwrap_or_default();
        let certs = self.internal_cert_management.unwrap_or_default();
        let client = self.client_connection.unwrap_or_default();
        let enable = certs.enable.unwrap_or(true);
        let cert_name = |name: Option<String>, default: &str| match enable {
            true => Some(name.unwrap_or_else(|| default.to_string())),
            false => name,
        };
        let duration = |d: Option<GoDuration>, default| d.map(|d| d.0).filter(|d| !d.is_zero()).unwrap_or(default);
        Configuration {
            webhook: ControllerWebhook {
                port: webhook.port.unwrap_or(DEFAULT_WEBHOOK_PORT),
                host: non_empty(webhook.host),
                cert_dir: non_empty(webhook.cert_dir),
            },
            leader_election: LeaderElectionConfiguration {
                leader_elect: election.leader_elect.unwrap_or(true),
                lease_duration: duration(election.lease_duration, DEFAULT_LEADER_ELECTION_LEASE_DURATION),
                renew_deadline: duration(election.renew_deadline, DEFAULT_LEADER_ELECTION_RENEW_DEADLINE),
                retry_period: duration(election.retry_period, DEFAULT_LEADER_ELECTION_RETRY_PERIOD),
                resource_lock: non_empty_or(election.resource_lock, DEFAULT_RESOURCE_LOCK),
                resource_name: non_empty_or(election.resource_name, DEFAULT_LEADER_ELECTION_ID),
                resource_namespace: non_empty(election.resource_namespace),
            },
            metrics: ControllerMetrics {
                bind_address: non_empty_or(metrics.bind_address, DEFAULT_METRICS_BIND_ADDRESS),
                cert_dir: non_empty(metrics.cert_dir),
            },
            health: ControllerHealth {
                health_probe_bind_address: non_empty_or(
                    health.health_probe_bind_address,
                    DEFAULT_HEALTH_PROBE_BIND_ADDRESS,
                ),
                readiness_endpoint_name: non_empty(health.readiness_endpoint_name),
                liveness_endpoint_name: non_empty(health.liveness_endpoint_name),
            },
            tls: self.tls.map(|tls| TlsOptions {
                min_version: non_empty(tls.min_version),
                cipher_suites: tls.cipher_suites.unwrap_or_default(),
            }),
            internal_cert_management: InternalCertManagement {
                enable,
                webhook_service_name: cert_name(certs.webhook_service_name, DEFAULT_WEBHOOK_SERVICE_NAME),
                webhook_secret_name: cert_name(certs.webhook_secret_name, DEFAULT_WEBHOOK_SECRET_NAME),
            },
            client_connection: ClientConnection {
                qps: client.qps.unwrap_or(DEFAULT_CLIENT_CONNECTION_QPS),
                burst: client.burst.unwrap_or(DEFAULT_CLIENT_CONNECTION_BURST),
            },
            feature_gates: self.feature_gates,
        }
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn non_empty_or(value: Option<String>, default: &str) -> String {
    non_empty(value).unwrap_or_else(|| default.to_string())
}

fn de_api_version<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_value(d, API_VERSION)
}

fn de_kind<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_value(d, KIND)
}

/// `apiVersion` and `kind`: empty takes upstream's, as its decoder defaults them.
fn expect_value<'de, D: Deserializer<'de>>(d: D, want: &str) -> Result<(), D::Error> {
    match Option::<String>::deserialize(d)? {
        Some(got) if !got.is_empty() && got != want => {
            Err(D::Error::custom(format!("expected {}, got {}", quote(want), quote(&got))))
        }
        _ => Ok(()),
    }
}

/// `webhook.port` (a Go `int`): beyond 65535 cannot be bound; 0 or less is unset, as
/// controller-runtime's webhook server reads it.
fn de_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    match Option::<i64>::deserialize(d)? {
        Some(port) if port > i64::from(u16::MAX) => {
            Err(D::Error::custom(format!("invalid value: {port}, expected a port number up to 65535")))
        }
        port => Ok(port.and_then(|p| u16::try_from(p).ok()).filter(|&p| p > 0)),
    }
}

/// `clientConnection.qps` (a Go `float32`): Go's JSON has no infinity or NaN.
fn de_qps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<f32>::deserialize(d)? {
        Some(qps) if !qps.is_finite() => {
            Err(D::Error::custom(format!("invalid value: {qps}, expected a finite number")))
        }
        qps => Ok(qps.map(f64::from)),
    }
}

/// `clientConnection.burst` (a Go `int32`): client-go refuses a negative one.
fn de_burst<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<i32>::deserialize(d)? {
        Some(burst) => u32::try_from(burst)
            .map(Some)
            .map_err(|_| D::Error::custom(format!("invalid value: {burst}, expected a burst of 0 or more"))),
        None => Ok(None),
    }
}

/// `featureGates`, each entry checked as its value is read, so that its error has its line.
fn de_feature_gates<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, bool>, D::Error> {
    struct Gates;
    impl<'de> Visitor<'de> for Gates {
        type Value = BTreeMap<String, bool>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of feature gate names to booleans")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut gates = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                let enabled = map.next_value_seed(Gate(&name))?;
                gates.insert(name, enabled);
            }
            Ok(gates)
        }
    }
    /// One gate's value, checked against its name.
    struct Gate<'a>(&'a str);
    impl<'de> DeserializeSeed<'de> for Gate<'_> {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            let enabled = bool::deserialize(d)?;
            check_gate(self.0, enabled).map_err(D::Error::custom)?;
            Ok(enabled)
        }
    }
    d.deserialize_option(Gates)
}

/// A `metav1.Duration`: a string in Go's `time.ParseDuration` syntax. A negative one, which
/// no setting here can use, is refused (`std::time::Duration` cannot hold it).
struct GoDuration(Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Go duration string such as \"15s\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<GoDuration, E> {
                parse_duration_flag(s).map(GoDuration).map_err(E::custom)
            }
        }
        // `any`, not `str`: a bare number is a type error, as in Go, not a string.
        d.deserialize_any(V)
    }
}

/// A Go duration (`30s`, `1m30s`), for flags as for the file: Go's `time.ParseDuration` with
/// its messages; negative durations are refused.
pub fn parse_duration_flag(s: &str) -> Result<Duration, String> {
    let nanos = parse_go_duration(s)?;
    u64::try_from(nanos).map(Duration::from_nanos).map_err(|_| format!("negative duration {}", time_quote(s)))
}

/// Go's `time.ParseDuration`, in nanoseconds, with its error messages: signed decimal numbers,
/// each with an optional fraction and a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`), such
/// as `300ms`, `-1.5h` or `2h45m`; `0` alone needs no unit.
fn parse_go_duration(orig: &str) -> Result<i64, String> {
    const LIMIT: u64 = 1 << 63;
    let invalid = || format!("time: invalid duration {}", time_quote(orig));
    let mut s = orig;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        (neg, s) = (true, rest);
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        // The integer part; Go refuses one beyond 2^63.
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let mut value: u64 = 0;
        for b in s[..digits].bytes() {
            value = value.checked_mul(10).and_then(|v| v.checked_add(u64::from(b - b'0'))).ok_or_else(invalid)?;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        let pre = digits > 0;
        s = &s[digits..];
        // The fraction; digits past u64's precision are dropped, as Go does.
        let (mut fraction, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let mut overflow = false;
            for b in rest[..digits].bytes() {
                match fraction.checked_mul(10).and_then(|f| f.checked_add(u64::from(b - b'0'))) {
                    Some(f) if !overflow && f <= LIMIT => (fraction, scale) = (f, scale * 10.0),
                    _ => overflow = true,
                }
            }
            post = digits > 0;
            s = &rest[digits..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", time_quote(orig)));
        }
        let unit: u64 = match &s[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            u => return Err(format!("time: unknown unit {} in duration {}", time_quote(u), time_quote(orig))),
        };
        s = &s[unit_len..];
        if value > LIMIT / unit {
            return Err(invalid());
        }
        value *= unit;
        if fraction > 0 {
            // As Go: a float64 is nanosecond-accurate for fractions of hours.
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total = total.checked_add(value).filter(|&t| t <= LIMIT).ok_or_else(invalid)?;
    }
    match (neg, i64::try_from(total)) {
        (true, _) => Ok((total as i64).wrapping_neg()),
        (false, Ok(total)) => Ok(total),
        (false, Err(_)) => Err(invalid()),
    }
}

/// Go's `time.quote`: bytes outside printable ASCII as `\x..`.
fn time_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c.is_ascii() && c >= ' ' {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's shipped `config/components/manager/controller_manager_config.yaml`.
    const UPSTREAM_SAMPLE: &str =
        "../../../shared/spec/reference/upstream/jobset/manager_controller_manager_config.yaml";

    const HEAD: &str = "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n";

    fn parse_ok(text: &str) -> Configuration {
        parse(text, "c.yaml").unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn parse_err(text: &str) -> String {
        match parse(text, "c.yaml") {
            Ok(c) => panic!("{text:?} was accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn defaults_with(edit: impl FnOnce(&mut Configuration)) -> Configuration {
        let mut c = Configuration::default();
        edit(&mut c);
        c
    }

    fn certs_disabled(c: &mut Configuration) {
        c.internal_cert_management =
            InternalCertManagement { enable: false, webhook_service_name: None, webhook_secret_name: None };
    }

    fn gates(c: &Configuration) -> (bool, bool, bool) {
        let f = c.features().unwrap();
        (f.in_place_restart, f.restart_job, f.elastic_jobset)
    }

    #[test]
    fn upstream_sample_is_accepted_and_yields_the_defaults_with_leader_election_on() {
        let config = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(UPSTREAM_SAMPLE)).unwrap();
        assert!(config.leader_election.leader_elect);
        assert_eq!(config, Configuration::default());
    }

    #[test]
    fn defaults_are_upstreams_defaults_go() {
        let c = Configuration::default();
        assert_eq!(c.webhook, ControllerWebhook { port: 9443, host: None, cert_dir: None });
        assert_eq!(
            c.leader_election,
            LeaderElectionConfiguration {
                leader_elect: true,
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
                resource_lock: "leases".into(),
                resource_name: "6d4f6a47.jobset.x-k8s.io".into(),
                resource_namespace: None,
            }
        );
        assert_eq!(c.metrics, ControllerMetrics { bind_address: ":8443".into(), cert_dir: None });
        let health = ControllerHealth {
            health_probe_bind_address: ":8081".into(),
            readiness_endpoint_name: None,
            liveness_endpoint_name: None,
        };
        assert_eq!(c.health, health);
        assert_eq!(c.tls, None);
        let certs = InternalCertManagement {
            enable: true,
            webhook_service_name: Some("jobset-webhook-service".into()),
            webhook_secret_name: Some("jobset-webhook-server-cert".into()),
        };
        assert_eq!(c.internal_cert_management, certs);
        assert_eq!(c.client_connection, ClientConnection { qps: 500.0, burst: 500 });
        assert!(c.feature_gates.is_empty());
        assert_eq!(gates(&c), (true, true, true), "this project's alpha gates default on");
    }

    #[test]
    fn an_empty_file_or_one_without_apiversion_and_kind_takes_the_defaults_as_upstreams_decoder() {
        for text in [
            "",
            "\n",
            "# nothing\n",
            "---\n",
            "~\n",
            "{}\n",
            HEAD,
            "apiVersion: config.jobset.x-k8s.io/v1alpha1\n",
            "kind: Configuration\n",
            "apiVersion: ''\nkind: ''\n",
        ] {
            assert_eq!(parse_ok(text), Configuration::default(), "{text:?}");
        }
    }

    #[test]
    fn a_wrong_apiversion_or_kind_is_an_error_naming_it() {
        for (text, want) in [
            (
                "apiVersion: config.jobset.x-k8s.io/v1beta1\nkind: Configuration\n",
                r#"c.yaml:1:13: apiVersion: expected "config.jobset.x-k8s.io/v1alpha1", got "config.jobset.x-k8s.io/v1beta1""#,
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\n",
                r#"c.yaml:1:13: apiVersion: expected "config.jobset.x-k8s.io/v1alpha1", got "v1""#,
            ),
            (
                "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: JobSet\n",
                r#"c.yaml:2:7: kind: expected "Configuration", got "JobSet""#,
            ),
            ("kind: [Configuration]\n", "c.yaml:1:7: kind: expected string scalar"),
        ] {
            assert_eq!(parse_err(text), want, "{text:?}");
        }
    }

    #[test]
    fn defaulting_mirrors_upstreams_defaults_test() {
        let cases = [
            ("defaulting namespace", "internalCertManagement: {enable: false}\n", defaults_with(certs_disabled)),
            (
                "defaulting ControllerManager",
                "leaderElection: {leaderElect: true}\ninternalCertManagement: {enable: false}\n",
                defaults_with(certs_disabled),
            ),
            (
                "should not default ControllerManager",
                "webhook: {port: 9444}\nmetrics: {bindAddress: ':38081'}\nhealth: {healthProbeBindAddress: ':38080'}\n\
                 leaderElection:\n  leaderElect: true\n  leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s\n  \
                 resourceLock: leases\n  resourceName: foo.jobset.x-k8s.io\ninternalCertManagement: {enable: false}\n",
                defaults_with(|c| {
                    certs_disabled(c);
                    c.webhook.port = 9444;
                    c.metrics.bind_address = ":38081".into();
                    c.health.health_probe_bind_address = ":38080".into();
                    c.leader_election.resource_name = "foo.jobset.x-k8s.io".into();
                }),
            ),
            (
                "should not set LeaderElectionID",
                "leaderElection: {leaderElect: false}\ninternalCertManagement: {enable: false}\n",
                defaults_with(|c| {
                    certs_disabled(c);
                    c.leader_election.leader_elect = false;
                }),
            ),
            ("defaulting InternalCertManagement", "{}\n", Configuration::default()),
            (
                "should not default InternalCertManagement",
                "internalCertManagement: {enable: false}\n",
                defaults_with(certs_disabled),
            ),
            (
                "should not default values in custom ClientConnection",
                "internalCertManagement: {enable: false}\nclientConnection: {qps: 123, burst: 456}\n",
                defaults_with(|c| {
                    certs_disabled(c);
                    c.client_connection = ClientConnection { qps: 123.0, burst: 456 };
                }),
            ),
            (
                "should default empty custom ClientConnection",
                "internalCertManagement: {enable: false}\nclientConnection: {}\n",
                defaults_with(certs_disabled),
            ),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_ok(text), want, "{name}");
        }
    }

    #[test]
    fn loading_mirrors_upstreams_config_test() {
        let tenant_certs = |c: &mut Configuration| {
            c.internal_cert_management.webhook_service_name = Some("jobset-tenant-a-webhook-service".into());
            c.internal_cert_management.webhook_secret_name = Some("jobset-tenant-a-webhook-server-cert".into());
        };
        let cases = [
            (
                "ControllerManagerConfigurationSpec overwrite config",
                "health:\n  healthProbeBindAddress: :38081\nmetrics:\n  bindAddress: :38080\nleaderElection:\n  \
                 leaderElect: true\n  resourceName: test-id\nwebhook:\n  port: 9444\n",
                defaults_with(|c| {
                    c.health.health_probe_bind_address = ":38081".into();
                    c.metrics.bind_address = ":38080".into();
                    c.leader_election.resource_name = "test-id".into();
                    c.webhook.port = 9444;
                }),
            ),
            (
                "cert options overwrite config",
                "internalCertManagement:\n  enable: true\n  webhookServiceName: jobset-tenant-a-webhook-service\n  \
                 webhookSecretName: jobset-tenant-a-webhook-server-cert\n",
                defaults_with(tenant_certs),
            ),
            (
                "disable cert overwrite config",
                "internalCertManagement:\n  enable: false\n",
                defaults_with(certs_disabled),
            ),
            (
                "leaderElection disabled config",
                "leaderElection:\n  leaderElect: false\nwebhook:\n  port: 9443\n",
                defaults_with(|c| c.leader_election.leader_elect = false),
            ),
            (
                "clientConnection config",
                "clientConnection:\n  qps: 50\n  burst: 100\n",
                defaults_with(|c| c.client_connection = ClientConnection { qps: 50.0, burst: 100 }),
            ),
            (
                "metrics cert config",
                "metrics:\n  bindAddress: :8443\n  certDir: /tmp/my-metrics-server/my-serving-certs\n\
                 internalCertManagement:\n  enable: true\n  webhookServiceName: jobset-tenant-a-webhook-service\n  \
                 webhookSecretName: jobset-tenant-a-webhook-server-cert\n",
                defaults_with(|c| {
                    tenant_certs(c);
                    c.metrics.cert_dir = Some("/tmp/my-metrics-server/my-serving-certs".into());
                }),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(parse_ok(&format!("{HEAD}{body}")), want, "{name}");
        }
        let err = parse_err(&format!("{HEAD}invalidField: invalidValue\nhealth:\n  healthProbeBindAddress: :8081\n"));
        assert_eq!(
            err,
            "c.yaml:3:1: unknown field \"invalidField\" in the Configuration, expected one of apiVersion, kind, \
             webhook, leaderElection, metrics, health, tls, internalCertManagement, clientConnection, featureGates"
        );
    }

    const FULL: &str = "\
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
webhook:
  port: 9444
  host: 127.0.0.1
  certDir: /certs/webhook
leaderElection:
  leaderElect: false
  leaseDuration: 1m30s
  renewDeadline: 45.5s
  retryPeriod: 500ms
  resourceLock: leases
  resourceName: my-lock
  resourceNamespace: jobset-system
metrics:
  bindAddress: \":9090\"
  certDir: /certs/metrics
health:
  healthProbeBindAddress: \":9091\"
  readinessEndpointName: ready
  livenessEndpointName: live
tls:
  minVersion: VersionTLS12
  cipherSuites:
  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
internalCertManagement:
  enable: true
  webhookServiceName: my-webhook-service
  webhookSecretName: my-webhook-secret
clientConnection:
  qps: 50.5
  burst: 100
featureGates:
  InPlaceRestart: false
  RestartJob: true
  TLSOptions: true
";

    #[test]
    fn a_file_setting_every_field_is_read_whole_in_yaml_or_json() {
        let want = Configuration {
            webhook: ControllerWebhook {
                port: 9444,
                host: Some("127.0.0.1".into()),
                cert_dir: Some("/certs/webhook".into()),
            },
            leader_election: LeaderElectionConfiguration {
                leader_elect: false,
                lease_duration: Duration::from_secs(90),
                renew_deadline: Duration::from_millis(45_500),
                retry_period: Duration::from_millis(500),
                resource_lock: "leases".into(),
                resource_name: "my-lock".into(),
                resource_namespace: Some("jobset-system".into()),
            },
            metrics: ControllerMetrics { bind_address: ":9090".into(), cert_dir: Some("/certs/metrics".into()) },
            health: ControllerHealth {
                health_probe_bind_address: ":9091".into(),
                readiness_endpoint_name: Some("ready".into()),
                liveness_endpoint_name: Some("live".into()),
            },
            tls: Some(TlsOptions {
                min_version: Some("VersionTLS12".into()),
                cipher_suites: vec![
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
                ],
            }),
            internal_cert_management: InternalCertManagement {
                enable: true,
                webhook_service_name: Some("my-webhook-service".into()),
                webhook_secret_name: Some("my-webhook-secret".into()),
            },
            client_connection: ClientConnection { qps: 50.5, burst: 100 },
            feature_gates: BTreeMap::from([
                ("InPlaceRestart".into(), false),
                ("RestartJob".into(), true),
                ("TLSOptions".into(), true),
            ]),
        };
        let config = parse_ok(FULL);
        assert_eq!(config, want);
        assert_eq!(gates(&config), (false, true, true));
        let json = r#"{"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "webhook": {"port": 9444, "host": "127.0.0.1", "certDir": "/certs/webhook"},
            "leaderElection": {"leaderElect": false, "leaseDuration": "1m30s", "renewDeadline": "45.5s",
              "retryPeriod": "500ms", "resourceLock": "leases", "resourceName": "my-lock",
              "resourceNamespace": "jobset-system"},
            "metrics": {"bindAddress": ":9090", "certDir": "/certs/metrics"},
            "health": {"healthProbeBindAddress": ":9091", "readinessEndpointName": "ready",
              "livenessEndpointName": "live"},
            "tls": {"minVersion": "VersionTLS12", "cipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
              "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]},
            "internalCertManagement": {"enable": true, "webhookServiceName": "my-webhook-service",
              "webhookSecretName": "my-webhook-secret"},
            "clientConnection": {"qps": 50.5, "burst": 100},
            "featureGates": {"InPlaceRestart": false, "RestartJob": true, "TLSOptions": true}}"#;
        assert_eq!(parse_ok(json), want);
    }

    #[test]
    fn zero_empty_and_null_values_count_as_unset_as_in_go() {
        let text = "webhook: {port: 0, host: '', certDir: ''}\n\
                    leaderElection: {leaseDuration: 0s, renewDeadline: '0', retryPeriod: 0ms, resourceLock: '', \
                    resourceName: '', resourceNamespace: ''}\n\
                    metrics: {bindAddress: '', certDir: ''}\n\
                    health: {healthProbeBindAddress: '', readinessEndpointName: '', livenessEndpointName: ''}\n\
                    tls: {minVersion: ''}\n";
        let tls = TlsOptions { min_version: None, cipher_suites: vec![] };
        assert_eq!(parse_ok(text), defaults_with(|c| c.tls = Some(tls)));
        let text = "webhook: {port: null}\nleaderElection:\nmetrics: ~\nhealth:\n\
                    clientConnection: {qps: null, burst: null}\ninternalCertManagement: {enable: null}\nfeatureGates:\n";
        assert_eq!(parse_ok(text), Configuration::default());
        // controller-runtime's webhook server serves a port of 0 or less on 9443.
        assert_eq!(parse_ok("webhook: {port: -1}\n").webhook.port, 9443);
        // A 0 QPS or burst is client-go's to default, not the file's.
        assert_eq!(
            parse_ok("clientConnection: {qps: 0, burst: 0}\n").client_connection,
            ClientConnection { qps: 0.0, burst: 0 }
        );
        // Explicit empty names are kept (and then refused by validation).
        assert_eq!(
            parse_ok("internalCertManagement: {enable: false, webhookServiceName: ''}\n")
                .internal_cert_management
                .webhook_service_name,
            Some(String::new())
        );
    }

    #[test]
    fn go_durations_parse_as_time_parse_duration() {
        const S: i64 = 1_000_000_000;
        for (text, want) in [
            ("0", 0),
            ("+0", 0),
            ("-0", 0),
            ("15s", 15 * S),
            ("1m30s", 90 * S),
            ("500ms", S / 2),
            ("1.5h", 5400 * S),
            ("2h45m", 9900 * S),
            ("300us", 300_000),
            ("1\u{b5}s", 1_000),
            ("1\u{3bc}s", 1_000),
            ("100ns", 100),
            (".5s", S / 2),
            ("5.s", 5 * S),
            ("1s1s", 2 * S),
            ("-1.5h", -5400 * S),
            ("+2m", 120 * S),
            ("1.0000000001s", S),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("2562047h", 2_562_047 * 3600 * S),
        ] {
            assert_eq!(parse_go_duration(text), Ok(want), "{text:?}");
        }
        for (text, want) in [
            ("", r#"time: invalid duration """#),
            ("15", r#"time: missing unit in duration "15""#),
            ("1.5.5s", r#"time: missing unit in duration "1.5.5s""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
            ("1 s", r#"time: unknown unit " s" in duration "1 s""#),
            ("1\u{b5}", r#"time: unknown unit "\xc2\xb5" in duration "1\xc2\xb5""#),
            ("s", r#"time: invalid duration "s""#),
            (".s", r#"time: invalid duration ".s""#),
            ("-", r#"time: invalid duration "-""#),
            ("--1s", r#"time: invalid duration "--1s""#),
            ("P1D", r#"time: invalid duration "P1D""#),
            ("9223372036854775808ns", r#"time: invalid duration "9223372036854775808ns""#),
            ("2562048h", r#"time: invalid duration "2562048h""#),
            ("99999999999999999999s", r#"time: invalid duration "99999999999999999999s""#),
        ] {
            assert_eq!(parse_go_duration(text), Err(want.to_string()), "{text:?}");
        }
    }

    #[test]
    fn duration_flags_take_go_syntax_and_refuse_negatives() {
        assert_eq!(parse_duration_flag("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration_flag("1m0.5s"), Ok(Duration::from_millis(60_500)));
        assert_eq!(parse_duration_flag("-1s"), Err(r#"negative duration "-1s""#.to_string()));
        assert_eq!(parse_duration_flag("30"), Err(r#"time: missing unit in duration "30""#.to_string()));
    }

    #[test]
    fn bad_durations_are_errors_naming_the_field_and_line() {
        for (text, want) in [
            (
                "leaderElection:\n  leaseDuration: 15\n",
                r#"c.yaml:2:3: leaderElection.leaseDuration: invalid type: integer `15`, expected a Go duration string such as "15s""#,
            ),
            (
                "leaderElection:\n  renewDeadline: 10x\n",
                r#"c.yaml:2:18: leaderElection.renewDeadline: time: unknown unit "x" in duration "10x""#,
            ),
            (
                "leaderElection:\n  retryPeriod: -2s\n",
                r#"c.yaml:2:16: leaderElection.retryPeriod: negative duration "-2s""#,
            ),
            (
                "leaderElection: {leaseDuration: 1 day}\n",
                r#"c.yaml:1:33: leaderElection.leaseDuration: time: unknown unit " day" in duration "1 day""#,
            ),
        ] {
            assert_eq!(parse_err(text), want, "{text:?}");
        }
    }

    #[test]
    fn unknown_keys_are_errors_naming_their_path_and_line() {
        for (text, want) in [
            (
                "leaderElction:\n  leaderElect: true\n",
                r#"c.yaml:1:1: unknown field "leaderElction" in the Configuration"#,
            ),
            ("LeaderElection: {}\n", r#"c.yaml:1:1: unknown field "LeaderElection" in the Configuration"#),
            (
                "controllerManager:\n  health: {}\n",
                r#"c.yaml:1:1: unknown field "controllerManager" in the Configuration"#,
            ),
            (
                "leaderElection:\n  leaderElect: true\n  leaseDurtion: 5s\n",
                "c.yaml:3:3: unknown field \"leaderElection.leaseDurtion\" in the Configuration, expected one of \
                 leaderElect, leaseDuration, renewDeadline, retryPeriod, resourceLock, resourceName, resourceNamespace",
            ),
            ("webhook: {port: 9443, hots: x}\n", r#"c.yaml:1:23: unknown field "webhook.hots" in the Configuration"#),
            (
                "metrics:\n  bindAdress: ':8443'\n",
                r#"c.yaml:2:3: unknown field "metrics.bindAdress" in the Configuration"#,
            ),
            (
                "health:\n  readinessEndpoint: r\n",
                r#"c.yaml:2:3: unknown field "health.readinessEndpoint" in the Configuration"#,
            ),
            ("tls:\n  ciphers: []\n", r#"c.yaml:2:3: unknown field "tls.ciphers" in the Configuration"#),
            (
                "internalCertManagement:\n  enabled: false\n",
                r#"c.yaml:2:3: unknown field "internalCertManagement.enabled" in the Configuration"#,
            ),
            (
                "clientConnection:\n  kubeconfig: /x\n",
                r#"c.yaml:2:3: unknown field "clientConnection.kubeconfig" in the Configuration"#,
            ),
        ] {
            let err = parse_err(text);
            assert!(err.starts_with(want), "{text:?}:\n got {err}\nwant {want}");
        }
    }

    #[test]
    fn wrong_types_are_errors_naming_the_field_and_line() {
        for (text, want) in [
            ("clientConnection:\n  qps: fast\n", "c.yaml:2:8: clientConnection.qps: invalid floating point"),
            (
                "clientConnection:\n  qps: .inf\n",
                "c.yaml:2:8: clientConnection.qps: invalid value: inf, expected a finite number",
            ),
            ("clientConnection:\n  burst: 1.5\n", "c.yaml:2:10: clientConnection.burst: invalid i32"),
            ("clientConnection:\n  burst: 3000000000\n", "c.yaml:2:10: clientConnection.burst: invalid i32"),
            (
                "clientConnection:\n  burst: -1\n",
                "c.yaml:2:10: clientConnection.burst: invalid value: -1, expected a burst of 0 or more",
            ),
            ("webhook:\n  port: https\n", "c.yaml:2:9: webhook.port: invalid i64"),
            (
                "webhook:\n  port: 70000\n",
                "c.yaml:2:9: webhook.port: invalid value: 70000, expected a port number up to 65535",
            ),
            ("leaderElection:\n  leaderElect: maybe\n", "c.yaml:2:16: leaderElection.leaderElect: invalid boolean"),
            (
                "leaderElection:\n  resourceName: 12\n",
                "c.yaml:2:17: leaderElection.resourceName: 12 is not a string: quote it",
            ),
            ("metrics:\n  bindAddress: 0\n", "c.yaml:2:16: metrics.bindAddress: 0 is not a string: quote it"),
            ("internalCertManagement:\n  enable: 1\n", "c.yaml:2:11: internalCertManagement.enable: invalid boolean"),
            (
                "tls:\n  cipherSuites: TLS_AES_128_GCM_SHA256\n",
                "c.yaml:2:17: tls.cipherSuites: expected sequence start",
            ),
            ("tls:\n  cipherSuites: [a, 1]\n", "c.yaml:2:21: tls.cipherSuites[1]: 1 is not a string: quote it"),
            ("featureGates: [InPlaceRestart]\n", "c.yaml:1:15: featureGates: "),
            (
                "featureGates:\n  InPlaceRestart: sometimes\n",
                "c.yaml:2:19: featureGates.InPlaceRestart: invalid boolean",
            ),
            ("webhook: 9443\n", "c.yaml:1:10: webhook: expected mapping start"),
            ("- webhook\n", "c.yaml:1:1: expected mapping start"),
            ("webhook:\n  port: 9443\n  port: 9444\n", r#"c.yaml:3:3: webhook: duplicate field "port""#),
            ("webhook: {port: [\n", "c.yaml:1:17: webhook.port: "),
            (
                "kind: Configuration\n---\nkind: Configuration\n",
                "c.yaml:3:1: a second YAML document: the file must hold one Configuration",
            ),
        ] {
            let err = parse_err(text);
            assert!(err.starts_with(want), "{text:?}:\n got {err}\nwant {want}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn validation_mirrors_upstreams_validation_test() {
        let dns1035 = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an \
                       alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', \
                       regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
        let dns1123 = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
                       and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
                       validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        let use_12_or_13 = "Please use VersionTLS12 or VersionTLS13";
        let long_names =
            format!("internalCertManagement: {{webhookServiceName: {}, webhookSecretName: A}}", "a".repeat(64));
        let bad_suite = "invalid cipher suites: Cipher suite INVALID_CIPHER_SUITE not supported or doesn't exist. \
                         Please use the secure cipher names: [TLS_AES_128_GCM_SHA256 TLS_AES_256_GCM_SHA384 \
                         TLS_CHACHA20_POLY1305_SHA256 TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA \
                         TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA \
                         TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305 \
                         TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA \
                         TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA \
                         TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305 \
                         TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256]";
        let cases: Vec<(&str, &str, Option<String>)> = vec![
            (
                "invalid .internalCertManagement.webhookSecretName",
                "internalCertManagement: {enable: true, webhookSecretName: ':)'}",
                Some(format!(r#"internalCertManagement.webhookSecretName: Invalid value: ":)": {dns1123}"#)),
            ),
            (
                "invalid .internalCertManagement.webhookServiceName",
                "internalCertManagement: {enable: true, webhookServiceName: 0-invalid}",
                Some(format!(r#"internalCertManagement.webhookServiceName: Invalid value: "0-invalid": {dns1035}"#)),
            ),
            (
                "disabled .internalCertManagement with invalid .internalCertManagement.webhookServiceName",
                "internalCertManagement: {enable: false, webhookServiceName: 0-invalid}",
                None,
            ),
            (
                "valid .internalCertManagement",
                "internalCertManagement: {enable: true, webhookServiceName: webhook-svc, webhookSecretName: webhook-sec}",
                None,
            ),
            (
                "both names invalid, and too long",
                &long_names,
                Some(format!(
                    r#"[internalCertManagement.webhookServiceName: Invalid value: "{}": must be no more than 63 characters, internalCertManagement.webhookSecretName: Invalid value: "A": {dns1123}]"#,
                    "a".repeat(64)
                )),
            ),
            (
                "valid TLS with TLS 1.2 and cipher suites",
                "tls: {minVersion: VersionTLS12, cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}",
                None,
            ),
            ("valid TLS with TLS 1.3 and no cipher suites", "tls: {minVersion: VersionTLS13}", None),
            (
                "invalid TLS with TLS 1.3 and cipher suites",
                "tls: {minVersion: VersionTLS13, cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}",
                Some(
                    r#"tls.cipherSuites: Invalid value: ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]: may not be specified when `minVersion` is 'VersionTLS13'"#
                        .into(),
                ),
            ),
            (
                "invalid TLS with unsupported minVersion VersionTLS10",
                "tls: {minVersion: VersionTLS10}",
                Some(format!(
                    r#"tls: Invalid value: {{"minVersion":"VersionTLS10"}}: invalid minVersion: VersionTLS10 is not supported. {use_12_or_13}"#
                )),
            ),
            (
                "invalid TLS with unsupported minVersion VersionTLS11",
                "tls: {minVersion: VersionTLS11}",
                Some(format!(
                    r#"tls: Invalid value: {{"minVersion":"VersionTLS11"}}: invalid minVersion: VersionTLS11 is not supported. {use_12_or_13}"#
                )),
            ),
            (
                "invalid TLS with invalid minVersion string",
                "tls: {minVersion: InvalidVersion}",
                Some(format!(
                    r#"tls: Invalid value: {{"minVersion":"InvalidVersion"}}: invalid minVersion: unknown tls version "InvalidVersion". {use_12_or_13}"#
                )),
            ),
            (
                "invalid TLS with invalid cipher suite name",
                "tls: {minVersion: VersionTLS12, cipherSuites: [INVALID_CIPHER_SUITE]}",
                Some(format!(
                    r#"tls: Invalid value: {{"minVersion":"VersionTLS12","cipherSuites":["INVALID_CIPHER_SUITE"]}}: {bad_suite}"#
                )),
            ),
            (
                "invalid TLS with invalid minVersion and invalid cipher suite",
                "tls: {minVersion: VersionTLS10, cipherSuites: [INVALID_CIPHER_SUITE]}",
                Some(format!(
                    r#"tls: Invalid value: {{"minVersion":"VersionTLS10","cipherSuites":["INVALID_CIPHER_SUITE"]}}: invalid minVersion: VersionTLS10 is not supported. {use_12_or_13}; {bad_suite}"#
                )),
            ),
            ("valid TLS with empty cipher suites", "tls: {minVersion: VersionTLS12, cipherSuites: []}", None),
            (
                "valid TLS with multiple valid cipher suites",
                "tls: {minVersion: VersionTLS12, cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, \
                 TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]}",
                None,
            ),
            (
                "insecure and legacy suite names are accepted",
                "tls: {cipherSuites: [TLS_RSA_WITH_RC4_128_SHA, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]}",
                None,
            ),
            ("nil TLS config is valid", "{}", None),
            ("empty TLS config is valid", "tls: {}", None),
        ];
        for (name, text, want) in cases {
            let got = parse(text, "c.yaml").err().map(|e| e.to_string());
            assert_eq!(got, want.map(|w| format!("c.yaml: {w}")), "{name}");
        }
    }

    #[test]
    fn cipher_suite_names_are_sorted_as_go_lists_them_and_disjoint() {
        for list in [SECURE_CIPHER_SUITES, INSECURE_CIPHER_SUITES] {
            assert!(list.is_sorted(), "{list:?}");
        }
        assert!(SECURE_CIPHER_SUITES.iter().all(|s| !INSECURE_CIPHER_SUITES.contains(s)));
    }

    #[test]
    fn feature_gates_are_checked_as_component_base_does() {
        for (text, want) in [
            (
                "featureGates:\n  InPlaceRestart: true\n  Foo: true\n",
                "c.yaml:3:8: featureGates.Foo: unrecognized feature gate: Foo",
            ),
            (
                "featureGates: {inPlaceRestart: false}\n",
                "c.yaml:1:32: featureGates.inPlaceRestart: unrecognized feature gate: inPlaceRestart",
            ),
            (
                "featureGates:\n  TLSOptions: false\n",
                "c.yaml:2:15: featureGates.TLSOptions: cannot set feature gate TLSOptions to false, feature is locked to true",
            ),
            ("featureGates: {\"a\\nb\": true}\n", "c.yaml:1:24: featureGates.a\\nb: unrecognized feature gate: a\\nb"),
        ] {
            assert_eq!(parse_err(text), want, "{text:?}");
        }
        // Gates set in code are checked when they are read.
        let mut config = Configuration::default();
        config.feature_gates.insert("TLSOptions".into(), false);
        let err = config.features().unwrap_err().to_string();
        assert_eq!(err, "featureGates: cannot set feature gate TLSOptions to false, feature is locked to true");
    }

    #[test]
    fn feature_gates_turn_alpha_gates_off_and_all_alpha_sets_those_not_named() {
        for (gates_yaml, want) in [
            ("{}", (true, true, true)),
            ("{InPlaceRestart: false}", (false, true, true)),
            ("{RestartJob: false, ElasticJobSet: false}", (true, false, false)),
            ("{TLSOptions: true, AllBeta: false}", (true, true, true)),
            ("{AllAlpha: false}", (false, false, false)),
            ("{AllAlpha: false, RestartJob: true}", (false, true, false)),
            ("{AllAlpha: true, ElasticJobSet: false}", (true, true, false)),
        ] {
            assert_eq!(gates(&parse_ok(&format!("featureGates: {gates_yaml}\n"))), want, "{gates_yaml}");
        }
        // KEP-1150's gate, alpha upstream: on unless turned off.
        for (gates_yaml, want) in
            [("{}", true), ("{MutablePodResourcesForSuspendedJobSets: false}", false), ("{AllAlpha: false}", false)]
        {
            let f = parse_ok(&format!("featureGates: {gates_yaml}\n")).features().unwrap();
            assert_eq!(f.mutable_pod_resources, want, "{gates_yaml}");
        }
        // The gates KEP-1282 and KEP-1186 design: on unless turned off.
        for (gates_yaml, want) in [
            ("{}", (true, true)),
            ("{ExecutionAttemptsTracking: false}", (false, true)),
            ("{JobSetActiveDeadlineSeconds: false}", (true, false)),
            ("{AllAlpha: false}", (false, false)),
        ] {
            let f = parse_ok(&format!("featureGates: {gates_yaml}\n")).features().unwrap();
            assert_eq!((f.execution_attempts, f.active_deadline), want, "{gates_yaml}");
        }
    }

    #[test]
    fn load_names_the_file_it_cannot_read_or_finds_bad() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let err = load(&missing).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", missing.display())) && err.contains("No such file"), "{err}");
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", dir.path().display())), "{err}");
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, format!("{HEAD}webhook:\n  prot: 1\n")).unwrap();
        let err = load(&bad).unwrap_err().to_string();
        let want = "4:3: unknown field \"webhook.prot\" in the Configuration, expected one of port, host, certDir";
        assert_eq!(err, format!("{}:{want}", bad.display()));
        let good = dir.path().join("good.yaml");
        std::fs::write(&good, FULL).unwrap();
        assert_eq!(load(&good), parse(FULL, "other name"));
    }
}
