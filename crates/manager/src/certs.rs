//! The webhook server's certificate, as upstream JobSet gets it from open-policy-agent's
//! cert-controller rotator (`internalCertManagement.enable`, default on), or from `webhook.certDir`
//! (cert-manager's layout) when that is off.
//!
//! Internal management: a CA (`jobset-ca`, organization `jobset`) and a serving certificate for
//! `<webhookServiceName>.<namespace>.svc` (and `.svc.cluster.local`) live in the Secret
//! `<webhookSecretName>` of the manager's namespace under cert-controller's keys (`ca.crt`,
//! `ca.key`, `tls.crt`, `tls.key`); the CA is injected as `caBundle` into every webhook of the
//! two webhook configurations (by update, as cert-controller). Both are renewed once they would
//! be invalid within the lookahead (90 days; CA valid 10 years, serving certificate 1 year,
//! checked every 12 hours, as cert-controller), and on every change of the Secret or the
//! configurations (watched). The manager's namespace: [`manager_namespace`].
//!
//! Differences from cert-controller, all so that several replicas and a cluster without the
//! shipped Secret work: every replica runs the rotation (cert-controller's default too) and
//! serves what the Secret holds, read through the API (upstream mounts the Secret as files and
//! waits for the kubelet to refresh them); a missing Secret is created (upstream needs it in the
//! manifests), and of two replicas creating or renewing it at once one wins (create conflict or
//! stale resourceVersion) and the other uses the winner's; keys are ECDSA P-256 (upstream: RSA
//! 2048). Creating a missing Secret needs `create` on Secrets, which upstream's RBAC (and the
//! shipped Secret) do without.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use rcgen::PublicKeyData;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::{Value, json};
use tokio::sync::watch;

/// cert-controller's Secret keys.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
/// Upstream JobSet's CA name (also the CA certificate's DNS name) and organization.
pub const CA_NAME: &str = "jobset-ca";
pub const CA_ORGANIZATION: &str = "jobset";
/// Upstream JobSet's webhook configurations, which receive the CA bundle.
pub const MUTATING_CONFIGURATION: &str = "jobset-mutating-webhook-configuration";
pub const VALIDATING_CONFIGURATION: &str = "jobset-validating-webhook-configuration";
/// Where the manager runs when neither `POD_NAMESPACE` nor the service account's namespace
/// file says (upstream's default).
pub const DEFAULT_NAMESPACE: &str = "jobset-system";
const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

const DAY: Duration = Duration::from_secs(24 * 3600);

/// How long certificates live and when they are renewed (cert-controller's defaults).
#[derive(Clone, Debug)]
pub struct Rotation {
    pub ca_validity: Duration,
    pub serving_validity: Duration,
    /// A certificate that would be invalid this far ahead is renewed now.
    pub lookahead: Duration,
    /// How often the certificates are checked without any change to the Secret.
    pub check_period: Duration,
    /// How soon a failed check (API error, forbidden) is tried again.
    pub retry_period: Duration,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            ca_validity: 3650 * DAY,
            serving_validity: 365 * DAY,
            lookahead: 90 * DAY,
            check_period: Duration::from_secs(12 * 3600),
            retry_period: Duration::from_secs(10),
        }
    }
}

/// Internal certificate management's settings.
#[derive(Clone, Debug)]
pub struct CertConfig {
    pub namespace: String,
    pub service_name: String,
    pub secret_name: String,
    /// The webhook configurations to inject the CA into: (mutating?, name).
    pub configurations: Vec<(bool, String)>,
    pub rotation: Rotation,
}

impl CertConfig {
    /// Upstream's names in `namespace`.
    pub fn new(namespace: &str, service_name: &str, secret_name: &str) -> CertConfig {
        CertConfig {
            namespace: namespace.to_string(),
            service_name: service_name.to_string(),
            secret_name: secret_name.to_string(),
            configurations: vec![(true, MUTATING_CONFIGURATION.into()), (false, VALIDATING_CONFIGURATION.into())],
            rotation: Rotation::default(),
        }
    }

    /// The name the API server dials: `<service>.<namespace>.svc` (cert-controller's `DNSName`).
    pub fn dns_name(&self) -> String {
        format!("{}.{}.svc", self.service_name, self.namespace)
    }

    fn dns_names(&self) -> Vec<String> {
        vec![self.dns_name(), format!("{}.cluster.local", self.dns_name())]
    }
}

/// The manager's namespace: `$POD_NAMESPACE` (the downward API), else the service account's
/// namespace file (in a pod), else upstream's default `jobset-system`.
pub fn manager_namespace() -> String {
    let env = std::env::var("POD_NAMESPACE").ok();
    let file = std::fs::read_to_string(NAMESPACE_FILE).ok();
    [env, file]
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

/// The four PEM files of the Secret.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bundle {
    pub ca_cert: Vec<u8>,
    pub ca_key: Vec<u8>,
    pub tls_cert: Vec<u8>,
    pub tls_key: Vec<u8>,
}

impl Bundle {
    /// The Secret's `data` (missing keys empty).
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Bundle {
        let get = |k: &str| data.get(k).map(|b| b.0.clone()).unwrap_or_default();
        Bundle { ca_cert: get(CA_CERT), ca_key: get(CA_KEY), tls_cert: get(TLS_CERT), tls_key: get(TLS_KEY) }
    }

    /// Writes the four keys into `data`, keeping any other key (as cert-controller's
    /// `populateSecret`).
    fn write(&self, data: &mut BTreeMap<String, ByteString>) {
        for (k, v) in
            [(CA_CERT, &self.ca_cert), (CA_KEY, &self.ca_key), (TLS_CERT, &self.tls_cert), (TLS_KEY, &self.tls_key)]
        {
            data.insert(k.to_string(), ByteString(v.clone()));
        }
    }
}

/// What to do with the Secret as found.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// No Secret: create it with a new CA and serving certificate.
    Create,
    /// Both certificates stay valid past the lookahead: serve them.
    Keep,
    /// The CA is good, the serving certificate is not (`why`): a new one signed by the CA.
    RenewServing { why: String },
    /// No usable CA (`why`): a new CA and serving certificate. `garbage`: the Secret held
    /// certificates that do not read, which deserves a warning (an empty Secret is the shipped
    /// placeholder).
    RenewAll { why: String, garbage: bool },
}

/// Decides from the Secret's data (`None`: no Secret) at `now`, as cert-controller's
/// `refreshCertIfNeeded`: the CA first, then the serving certificate, each judged at
/// `now + lookahead`.
pub fn plan(data: Option<&Bundle>, cfg: &CertConfig, now: SystemTime) -> Plan {
    let Some(b) = data else { return Plan::Create };
    let at = now + cfg.rotation.lookahead;
    if let Err(why) = ca_valid(&b.ca_cert, &b.ca_key, at) {
        let empty = b.ca_cert.is_empty() && b.ca_key.is_empty();
        return Plan::RenewAll { why, garbage: !empty && !readable(&b.ca_cert, &b.ca_key) };
    }
    match serving_valid(&b.ca_cert, &b.tls_cert, &b.tls_key, &cfg.dns_name(), at) {
        Ok(()) => Plan::Keep,
        Err(why) => Plan::RenewServing { why },
    }
}

/// A certificate and key that parse, whatever they hold.
fn readable(cert: &[u8], key: &[u8]) -> bool {
    let cert = x509_parser::pem::parse_x509_pem(cert).is_ok_and(|(_, pem)| pem.parse_x509().is_ok());
    cert && rcgen::KeyPair::from_pem(&String::from_utf8_lossy(key)).is_ok()
}

/// The bundle `plan` calls for (`existing`: the Secret's, for its CA), valid from an hour
/// before `now` (cert-controller's allowance for clock skew).
pub fn generate(plan: &Plan, existing: Option<&Bundle>, cfg: &CertConfig, now: SystemTime) -> Result<Bundle, String> {
    let begin = time::OffsetDateTime::from(now - Duration::from_secs(3600));
    let (ca_cert, ca_key) = match (plan, existing) {
        (Plan::RenewServing { .. }, Some(b)) => (b.ca_cert.clone(), b.ca_key.clone()),
        _ => new_ca(begin, time::OffsetDateTime::from(now + cfg.rotation.ca_validity))?,
    };
    let end = time::OffsetDateTime::from(now + cfg.rotation.serving_validity);
    let (tls_cert, tls_key) = new_serving(&ca_cert, &ca_key, cfg.dns_names(), begin, end)?;
    Ok(Bundle { ca_cert, ca_key, tls_cert, tls_key })
}

fn new_ca(begin: time::OffsetDateTime, end: time::OffsetDateTime) -> Result<(Vec<u8>, Vec<u8>), String> {
    let fail = |e: rcgen::Error| format!("creating the CA certificate: {e}");
    let mut params = rcgen::CertificateParams::new(vec![CA_NAME.to_string()]).map_err(fail)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, CA_NAME);
    params.distinguished_name.push(rcgen::DnType::OrganizationName, CA_ORGANIZATION);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    params.not_before = begin;
    params.not_after = end;
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = params.self_signed(&key).map_err(fail)?;
    Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
}

fn new_serving(
    ca_cert: &[u8],
    ca_key: &[u8],
    dns_names: Vec<String>,
    begin: time::OffsetDateTime,
    end: time::OffsetDateTime,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let fail = |e: rcgen::Error| format!("creating the serving certificate: {e}");
    let ca_key = rcgen::KeyPair::from_pem(&String::from_utf8_lossy(ca_key)).map_err(fail)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&String::from_utf8_lossy(ca_cert), ca_key).map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(dns_names.clone()).map_err(fail)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, dns_names[0].as_str());
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = begin;
    params.not_after = end;
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = params.signed_by(&key, &issuer).map_err(fail)?;
    Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
}

/// The key in `key_pem` is the one certified by `cert`'s subject public key info.
fn key_matches(cert: &x509_parser::certificate::X509Certificate<'_>, key_pem: &[u8]) -> Result<(), String> {
    let key =
        rcgen::KeyPair::from_pem(&String::from_utf8_lossy(key_pem)).map_err(|e| format!("reading the key: {e}"))?;
    match key.subject_public_key_info() == cert.tbs_certificate.subject_pki.raw {
        true => Ok(()),
        false => Err("the key does not match the certificate".into()),
    }
}

/// cert-controller's `validCACert`: a CA certificate for `jobset-ca`, valid at `at`, with its key.
pub fn ca_valid(cert: &[u8], key: &[u8], at: SystemTime) -> Result<(), String> {
    if cert.is_empty() || key.is_empty() {
        return Err("empty cert".into());
    }
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert).map_err(|e| format!("bad CA cert: {e}"))?;
    let ca = pem.parse_x509().map_err(|e| format!("parsing CA cert: {e}"))?;
    if !ca.is_ca() {
        return Err("the CA certificate is not a CA".into());
    }
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let t = x509_parser::time::ASN1Time::from_timestamp(secs).map_err(|e| e.to_string())?;
    if !ca.validity().is_valid_at(t) {
        return Err(format!(
            "the CA certificate is not valid at {}",
            jiff::Timestamp::from_second(secs).unwrap_or_default()
        ));
    }
    let names = match ca.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.clone(),
        _ => vec![],
    };
    if !names.iter().any(|n| matches!(n, x509_parser::extensions::GeneralName::DNSName(d) if *d == CA_NAME)) {
        return Err(format!("the CA certificate is not valid for {CA_NAME}"));
    }
    key_matches(&ca, key)
}

/// cert-controller's `validServerCert`: `cert` chains to `ca`, is valid for `dns_name` and
/// server authentication at `at`, and `key` is its key.
pub fn serving_valid(ca: &[u8], cert: &[u8], key: &[u8], dns_name: &str, at: SystemTime) -> Result<(), String> {
    if ca.is_empty() || cert.is_empty() || key.is_empty() {
        return Err("empty cert".into());
    }
    let ca_der = CertificateDer::from_pem_slice(ca).map_err(|e| format!("bad CA cert: {e}"))?;
    let der = CertificateDer::from_pem_slice(cert).map_err(|e| format!("bad cert: {e}"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(|e| format!("parsing cert: {e}"))?;
    key_matches(&parsed, key)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_der).map_err(|e| format!("bad CA cert: {e}"))?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns_name.to_string()).map_err(|e| format!("{dns_name}: {e}"))?;
    let at = UnixTime::since_unix_epoch(at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default());
    verifier.verify_server_cert(&der, &[], &name, &[], at).map(|_| ()).map_err(|e| format!("verifying cert: {e}"))
}

/// Puts `ca_pem` as `caBundle` into every webhook of a webhook configuration
/// (cert-controller's `injectCertToWebhook`); false when every webhook had it already.
pub fn inject_ca_bundle(configuration: &mut Value, ca_pem: &[u8]) -> bool {
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let Some(webhooks) = configuration.get_mut("webhooks").and_then(Value::as_array_mut) else { return false };
    let mut changed = false;
    for hook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        let config = hook.entry("clientConfig").or_insert_with(|| json!({}));
        if !config.is_object() {
            *config = json!({});
        }
        if config.get("caBundle").and_then(Value::as_str) != Some(bundle.as_str()) {
            config["caBundle"] = json!(bundle);
            changed = true;
        }
    }
    changed
}

/// The certificate the webhook server presents, swapped in place when it changes (a rustls
/// certificate resolver). Until one is set, handshakes fail.
#[derive(Debug, Default)]
pub struct ServingCert {
    current: RwLock<Option<(Vec<u8>, Arc<CertifiedKey>)>>,
}

impl ServingCert {
    /// Serves `cert`/`key` (PEM) from now on; `Ok(true)` when that is a change.
    pub fn set(&self, cert: &[u8], key: &[u8]) -> Result<bool, String> {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|(c, _)| c == cert) {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(|e| format!("tls.crt: {e}"))?;
        if chain.is_empty() {
            return Err("tls.crt: no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("tls.key: {e}"))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| format!("tls.key: {e}"))?;
        let certified = CertifiedKey::new(chain, signer);
        certified.keys_match().map_err(|e| format!("tls.key does not match tls.crt: {e}"))?;
        *current = Some((cert.to_vec(), Arc::new(certified)));
        Ok(true)
    }

    pub fn is_set(&self) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(_, k)| k.clone())
    }
}

fn configuration_resource(mutating: bool) -> ApiResource {
    let (kind, plural) = match mutating {
        true => ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        false => ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind), plural)
}

fn api_error(what: &str, e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{what}: {} ({})", s.message, s.code),
        other => format!("{what}: {other}"),
    }
}

/// Runs internal certificate management for ever: reconciles the Secret, serves its
/// certificate, injects its CA, on every change of the Secret or the configurations and every
/// `check_period`; `ready` turns true once the webhook server serves a valid certificate and
/// the CA went in (a missing configuration is skipped, as cert-controller does).
pub async fn manage(client: Client, cfg: CertConfig, serving: Arc<ServingCert>, ready: watch::Sender<bool>) {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    // Failing watches (say, no permission) back off rather than spin.
    let secret_events = watcher(Api::<Secret>::namespaced(client.clone(), &cfg.namespace), by_name(&cfg.secret_name))
        .default_backoff()
        .map(|e| e.map(|_| ()))
        .boxed();
    let mut streams = vec![secret_events];
    for (mutating, name) in &cfg.configurations {
        let api = Api::<DynamicObject>::all_with(client.clone(), &configuration_resource(*mutating));
        streams.push(watcher(api, by_name(name)).default_backoff().map(|e| e.map(|_| ())).boxed());
    }
    // Watch failures (say, no permission) are reported by the reconcile, which makes the same calls.
    let mut changes = futures::stream::select_all(streams).filter_map(|e| async move { e.ok() }).boxed();
    loop {
        let wait = match reconcile(&client, &cfg, &serving).await {
            Ok(()) => {
                if !ready.send_replace(true) {
                    tracing::info!(secret = %cfg.secret_name, "webhook certificates are ready and the CA is injected");
                }
                cfg.rotation.check_period
            }
            Err(e) => {
                tracing::error!(
                    namespace = %cfg.namespace,
                    secret = %cfg.secret_name,
                    "internal certificate management failed, retrying in {:?}: {e}",
                    cfg.rotation.retry_period
                );
                cfg.rotation.retry_period
            }
        };
        tokio::select! {
            _ = changes.next() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One pass: the Secret settled (created or renewed as needed), its certificate served, its CA
/// injected.
pub async fn reconcile(client: &Client, cfg: &CertConfig, serving: &ServingCert) -> Result<(), String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let what = format!("Secret {}/{}", cfg.namespace, cfg.secret_name);
    // A write that loses a race (another replica created or renewed it first) reads again.
    let mut attempts = 0;
    let bundle = loop {
        attempts += 1;
        let found = secrets.get_opt(&cfg.secret_name).await.map_err(|e| api_error(&format!("reading {what}"), e))?;
        let existing = found.as_ref().map(|s| Bundle::from_data(s.data.as_ref().unwrap_or(&BTreeMap::new())));
        let plan = plan(existing.as_ref(), cfg, SystemTime::now());
        match &plan {
            Plan::Keep => break existing.unwrap_or_default(),
            Plan::Create => tracing::info!("creating {what} with a new CA and serving certificate"),
            Plan::RenewAll { why, garbage: true } => {
                tracing::warn!("{what} holds no usable CA ({why}): replacing it with a new CA and serving certificate")
            }
            Plan::RenewAll { why, garbage: false } => tracing::info!("refreshing CA and server certs in {what}: {why}"),
            Plan::RenewServing { why } => tracing::info!("refreshing server certs in {what}: {why}"),
        }
        let bundle = generate(&plan, existing.as_ref(), cfg, SystemTime::now())?;
        let written = match found {
            None => {
                let mut secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(cfg.secret_name.clone()),
                        namespace: Some(cfg.namespace.clone()),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::new()),
                    ..Default::default()
                };
                bundle.write(secret.data.as_mut().expect("set above"));
                secrets.create(&PostParams::default(), &secret).await
            }
            Some(mut secret) => {
                bundle.write(secret.data.get_or_insert_with(BTreeMap::new));
                secrets.replace(&cfg.secret_name, &PostParams::default(), &secret).await
            }
        };
        match written {
            Ok(_) => break bundle,
            Err(kube::Error::Api(s)) if s.code == 409 && attempts < 3 => continue,
            Err(e) => return Err(api_error(&format!("writing {what}"), e)),
        }
    };
    if serving.set(&bundle.tls_cert, &bundle.tls_key).map_err(|e| format!("{what}: {e}"))? {
        tracing::info!("serving webhooks with the certificate of {what}");
    }
    inject(client, cfg, &bundle.ca_cert).await
}

/// Puts the CA into every webhook of the configurations (cert-controller's `ensureCerts`).
async fn inject(client: &Client, cfg: &CertConfig, ca: &[u8]) -> Result<(), String> {
    let mut failed = Vec::new();
    for (mutating, name) in &cfg.configurations {
        let resource = configuration_resource(*mutating);
        let what = format!("{} {name}", resource.kind);
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let found = match api.get_opt(name).await {
            Ok(Some(o)) => o,
            Ok(None) => {
                tracing::warn!("{what} not found: its webhooks do not get the CA bundle");
                continue;
            }
            Err(e) => {
                failed.push(api_error(&format!("reading {what}"), e));
                continue;
            }
        };
        if found.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // An update with the resourceVersion read, as cert-controller (RBAC: `update`).
        let mut value = serde_json::to_value(&found).unwrap_or_default();
        if !inject_ca_bundle(&mut value, ca) {
            continue;
        }
        let updated: DynamicObject = serde_json::from_value(value).map_err(|e| format!("{what}: {e}"))?;
        match api.replace(name, &PostParams::default(), &updated).await {
            Ok(o) => tracing::info!(
                "injected the CA bundle into {what} (resourceVersion {})",
                o.resource_version().unwrap_or_default()
            ),
            Err(e) => failed.push(api_error(&format!("injecting the CA bundle into {what}"), e)),
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(failed.join("; ")),
    }
}

/// cert-manager's layout: `tls.crt` and `tls.key` in `dir`.
pub fn read_dir(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|e| format!("webhook.certDir: reading {}: {e}", path.display()))
    };
    Ok((read(TLS_CERT)?, read(TLS_KEY)?))
}

/// Serves the certificate in `dir`, read again every `poll` and swapped when the files change
/// (controller-runtime's certwatcher polls too). The first read is the caller's.
pub async fn watch_dir(dir: PathBuf, poll: Duration, serving: Arc<ServingCert>) {
    let mut last_error = None;
    loop {
        tokio::time::sleep(poll).await;
        let loaded =
            read_dir(&dir).and_then(|(c, k)| serving.set(&c, &k).map_err(|e| format!("{}: {e}", dir.display())));
        match loaded {
            Ok(true) => {
                tracing::info!(dir = %dir.display(), "webhook certificate reloaded");
                last_error = None;
            }
            Ok(false) => last_error = None,
            Err(e) if last_error.as_ref() != Some(&e) => {
                tracing::warn!("keeping the current webhook certificate: {e}");
                last_error = Some(e);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CertConfig {
        CertConfig::new("jobset-system", "jobset-webhook-service", "jobset-webhook-server-cert")
    }

    fn fresh(now: SystemTime) -> Bundle {
        generate(&Plan::Create, None, &cfg(), now).unwrap()
    }

    #[test]
    fn the_secret_s_state_decides_what_to_do() {
        let now = SystemTime::now();
        let c = cfg();
        let good = fresh(now);
        // Serving certificate expiring within the lookahead: the CA is kept.
        let short = CertConfig { rotation: Rotation { serving_validity: 30 * DAY, ..Rotation::default() }, ..cfg() };
        let expiring = generate(&Plan::Create, None, &short, now).unwrap();
        let other_service =
            generate(&Plan::Create, None, &CertConfig::new("jobset-system", "other", "s"), now).unwrap();
        let other_ca = fresh(now);
        let foreign_serving =
            Bundle { tls_cert: other_ca.tls_cert.clone(), tls_key: other_ca.tls_key.clone(), ..good.clone() };
        let swapped_key = Bundle { tls_key: other_ca.tls_key.clone(), ..good.clone() };
        let ca_expiring = generate(
            &Plan::Create,
            None,
            &CertConfig { rotation: Rotation { ca_validity: 10 * DAY, ..Rotation::default() }, ..cfg() },
            now,
        )
        .unwrap();
        let garbage = Bundle { ca_cert: b"not a certificate".to_vec(), ..good.clone() };
        let placeholder = Bundle::default();

        // The plan's kind; the reasons are for the log.
        let kind = |p: &Plan| match p {
            Plan::Create => "create",
            Plan::Keep => "keep",
            Plan::RenewServing { .. } => "new serving",
            Plan::RenewAll { garbage: false, .. } => "new CA",
            Plan::RenewAll { garbage: true, .. } => "new CA, with a warning",
        };
        let cases: [(&str, Option<&Bundle>, &str); 9] = [
            ("missing", None, "create"),
            ("valid", Some(&good), "keep"),
            ("empty placeholder", Some(&placeholder), "new CA"),
            ("serving near expiry", Some(&expiring), "new serving"),
            ("serving for another service", Some(&other_service), "new serving"),
            ("serving from another CA", Some(&foreign_serving), "new serving"),
            ("serving key not its certificate's", Some(&swapped_key), "new serving"),
            ("CA near expiry", Some(&ca_expiring), "new CA"),
            ("garbage", Some(&garbage), "new CA, with a warning"),
        ];
        for (name, data, want) in cases {
            let got = plan(data, &c, now);
            assert_eq!(kind(&got), want, "{name}: {got:?}");
        }
    }

    #[test]
    fn a_renewed_serving_certificate_keeps_the_ca_and_a_renewed_ca_replaces_it() {
        let now = SystemTime::now();
        let old = fresh(now);
        let serving = generate(&Plan::RenewServing { why: String::new() }, Some(&old), &cfg(), now).unwrap();
        assert_eq!((&serving.ca_cert, &serving.ca_key), (&old.ca_cert, &old.ca_key));
        assert_ne!(serving.tls_cert, old.tls_cert);
        assert_eq!(plan(Some(&serving), &cfg(), now), Plan::Keep);
        let all = generate(&Plan::RenewAll { why: String::new(), garbage: true }, Some(&old), &cfg(), now).unwrap();
        assert_ne!(all.ca_cert, old.ca_cert);
        assert_eq!(plan(Some(&all), &cfg(), now), Plan::Keep);
    }

    #[test]
    fn the_serving_certificate_names_the_service_in_the_namespace() {
        let now = SystemTime::now();
        let b = fresh(now);
        for name in
            ["jobset-webhook-service.jobset-system.svc", "jobset-webhook-service.jobset-system.svc.cluster.local"]
        {
            serving_valid(&b.ca_cert, &b.tls_cert, &b.tls_key, name, now).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let e =
            serving_valid(&b.ca_cert, &b.tls_cert, &b.tls_key, "jobset-webhook-service.default.svc", now).unwrap_err();
        assert!(e.starts_with("verifying cert"), "{e}");
        // Valid for a year, then not.
        let e = serving_valid(&b.ca_cert, &b.tls_cert, &b.tls_key, &cfg().dns_name(), now + 366 * DAY).unwrap_err();
        assert!(e.contains("expired"), "{e}");
        ca_valid(&b.ca_cert, &b.ca_key, now + 3000 * DAY).unwrap();
        assert!(ca_valid(&b.ca_cert, &b.ca_key, now + 3700 * DAY).is_err());
        assert_eq!(ca_valid(&b.ca_cert, &b.tls_key, now).unwrap_err(), "the key does not match the certificate");
        assert_eq!(ca_valid(&b.tls_cert, &b.tls_key, now).unwrap_err(), "the CA certificate is not a CA");
    }

    #[test]
    fn the_ca_bundle_goes_into_every_webhook_that_lacks_it() {
        let ca = b"-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
        let mut config = json!({
            "metadata": {"name": "c", "resourceVersion": "7"},
            "webhooks": [
                {"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "n"}}},
                {"name": "b", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": b64}},
                {"name": "c", "clientConfig": {"caBundle": "b2xk"}},
            ],
        });
        assert!(inject_ca_bundle(&mut config, ca));
        assert_eq!(
            config["webhooks"],
            json!([
                {"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": b64}},
                {"name": "b", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": b64}},
                {"name": "c", "clientConfig": {"caBundle": b64}},
            ])
        );
        assert!(!inject_ca_bundle(&mut config, ca), "nothing left to inject");
        assert!(!inject_ca_bundle(&mut json!({"metadata": {}}), ca), "no webhooks, nothing to do");
    }

    #[test]
    fn the_serving_cert_is_swapped_only_for_a_valid_pair() {
        let now = SystemTime::now();
        let (a, b) = (fresh(now), fresh(now));
        let s = ServingCert::default();
        assert!(!s.is_set());
        assert_eq!(s.set(&a.tls_cert, &a.tls_key), Ok(true));
        assert_eq!(s.set(&a.tls_cert, &a.tls_key), Ok(false), "the same certificate is no change");
        let e = s.set(&b.tls_cert, &a.tls_key).unwrap_err();
        assert!(e.starts_with("tls.key does not match tls.crt"), "{e}");
        assert!(s.set(b"garbage", &a.tls_key).is_err());
        assert_eq!(s.set(&b.tls_cert, &b.tls_key), Ok(true));
        assert!(s.is_set());
    }

    #[test]
    fn a_cert_dir_missing_its_files_names_the_field_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_dir(dir.path()).unwrap_err();
        assert!(e.starts_with(&format!("webhook.certDir: reading {}/tls.crt: ", dir.path().display())), "{e}");
    }
}
