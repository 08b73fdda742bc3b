//! Local PKI, bearer token and kubeconfig for `jobset up`.
//!
//! On first start [`load_or_create`] generates, below the data dir:
//!
//! ```text
//! <dir>/pki/ca.crt       self-signed CA certificate (CN "jobset-ca"), mode 0644
//! <dir>/pki/ca.key       CA private key (PKCS#8 PEM),                   mode 0600
//! <dir>/pki/server.crt   serving certificate signed by the CA,          mode 0644
//!                        SANs 127.0.0.1, ::1, localhost
//! <dir>/pki/server.key   serving private key (PKCS#8 PEM),              mode 0600
//! <dir>/token            bearer token (base64url, 32 random bytes),     mode 0600
//! ```
//!
//! (`pki/` itself is mode 0700.) Later starts load the same files, so kubeconfigs
//! written earlier keep working across restarts. A data dir where only some of
//! these files exist is an error: silently generating a new CA would break every
//! kubeconfig that trusts the old one.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore as _;
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use serde::Serialize;

/// Subdirectory of the data dir holding the certificates and keys.
pub const PKI_DIR: &str = "pki";
/// CA certificate file name inside [`PKI_DIR`].
pub const CA_CERT_FILE: &str = "ca.crt";
/// CA private key file name inside [`PKI_DIR`].
pub const CA_KEY_FILE: &str = "ca.key";
/// Serving certificate file name inside [`PKI_DIR`].
pub const SERVER_CERT_FILE: &str = "server.crt";
/// Serving private key file name inside [`PKI_DIR`].
pub const SERVER_KEY_FILE: &str = "server.key";
/// Bearer token file name inside the data dir.
pub const TOKEN_FILE: &str = "token";

/// Names the serving certificate is valid for.
const SERVER_SANS: [&str; 3] = ["127.0.0.1", "::1", "localhost"];
/// Certificate lifetime (about ten years).
const VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
/// Back-dating of `notBefore`, to tolerate small clock differences.
const BACKDATE: Duration = Duration::from_secs(24 * 60 * 60);

/// Any failure to create, load or use the local TLS material. The message names
/// the file involved (where there is one) and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

impl TlsError {
    fn at(path: &Path, problem: impl fmt::Display) -> Self {
        TlsError(format!("{}: {problem}", path.display()))
    }
}

/// The credentials of the local API server.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// PEM of the self-signed CA certificate (what clients trust).
    pub ca_cert_pem: String,
    /// PEM of the serving certificate, signed by the CA.
    pub server_cert_pem: String,
    /// PEM (PKCS#8) of the serving private key. Secret.
    pub server_key_pem: String,
    /// Bearer token clients must present. Secret.
    pub token: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("server_cert_pem", &self.server_cert_pem)
            .field("server_key_pem", &format_args!("<redacted>"))
            .field("token", &format_args!("<redacted>"))
            .finish()
    }
}

struct Layout {
    dir: PathBuf,
    pki: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    token: PathBuf,
}

impl Layout {
    fn new(dir: &Path) -> Self {
        let pki = dir.join(PKI_DIR);
        Layout {
            dir: dir.to_path_buf(),
            ca_cert: pki.join(CA_CERT_FILE),
            ca_key: pki.join(CA_KEY_FILE),
            server_cert: pki.join(SERVER_CERT_FILE),
            server_key: pki.join(SERVER_KEY_FILE),
            token: dir.join(TOKEN_FILE),
            pki,
        }
    }

    fn files(&self) -> [&Path; 5] {
        [&self.ca_cert, &self.ca_key, &self.server_cert, &self.server_key, &self.token]
    }
}

/// Loads the credentials stored in `dir`, generating them on first start.
///
/// First start means none of `pki/ca.crt`, `pki/ca.key`, `pki/server.crt`,
/// `pki/server.key` and `token` exists. If only some exist, this fails and names a
/// missing file rather than replacing a CA that existing kubeconfigs trust.
/// Loaded files are checked: the PEM must parse, the serving certificate must
/// chain to the CA and be valid now for `127.0.0.1` and `localhost`, and each key
/// must match its certificate.
pub fn load_or_create(dir: &Path) -> Result<Credentials, TlsError> {
    let layout = Layout::new(dir);
    let mut missing = Vec::new();
    let mut present = Vec::new();
    for path in layout.files() {
        if exists(path)? {
            present.push(path);
        } else {
            missing.push(path);
        }
    }
    if present.is_empty() {
        generate(&layout)?;
    } else if missing == [layout.token.as_path()] {
        // A first start that died between placing pki/ and the token. The token only
        // authenticates to this server and every start rewrites the kubeconfig, so a new
        // one breaks nothing; a new CA would.
        publish_new_file(&layout.token, format!("{}\n", new_token()).as_bytes(), 0o600)?;
    } else if let Some(first_missing) = missing.first() {
        return Err(TlsError::at(
            first_missing,
            format_args!(
                "missing, but {} exists: the data dir {} is incomplete. Refusing to \
                 generate a new CA that existing kubeconfigs would not trust; restore the \
                 file, or remove {} and {} to start over (existing kubeconfigs then stop \
                 working)",
                present[0].display(),
                layout.dir.display(),
                layout.pki.display(),
                layout.token.display(),
            ),
        ));
    }
    load(&layout)
}

fn exists(path: &Path) -> Result<bool, TlsError> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(_) => Err(TlsError::at(path, "exists but is not a regular file")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(TlsError::at(path, format_args!("cannot access: {e}"))),
    }
}

fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------

struct Generated {
    ca_cert_pem: String,
    ca_key_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
}

fn generate_pki() -> Result<Generated, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
        KeyPair, KeyUsagePurpose,
    };

    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let not_before = now - BACKDATE;
    let not_after = now + VALIDITY;

    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params.distinguished_name.push(DnType::CommonName, "jobset-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let server_key = KeyPair::generate()?;
    let mut server_params = CertificateParams::new(SERVER_SANS.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    server_params.distinguished_name = DistinguishedName::new();
    server_params.distinguished_name.push(DnType::CommonName, "jobset-apiserver");
    server_params.is_ca = IsCa::ExplicitNoCa;
    server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server_params.use_authority_key_identifier_extension = true;
    server_params.not_before = not_before;
    server_params.not_after = not_after;
    let server_cert = server_params.signed_by(&server_key, &ca)?;

    Ok(Generated {
        ca_cert_pem: ca.pem(),
        ca_key_pem,
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
    })
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Writes a fresh PKI and token. `pki/` is assembled in a staging directory and
/// renamed into place, so it appears all at once (and a concurrent start that
/// wins the race is kept rather than overwritten); the token is published with a
/// no-clobber hard link for the same reason. Callers load from disk afterwards.
fn generate(layout: &Layout) -> Result<(), TlsError> {
    let pki = generate_pki().map_err(|e| TlsError(format!("generating the CA and serving certificate: {e}")))?;

    create_dir_all_private(&layout.dir)?;

    let staging = layout.dir.join(format!(".{PKI_DIR}.tmp-{}", random_suffix()));
    let staged = write_staging(&staging, &pki);
    if let Err(e) = staged {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    if let Err(e) = fs::rename(&staging, &layout.pki) {
        let _ = fs::remove_dir_all(&staging);
        // Another process that started at the same time may have won; its PKI is
        // then the one to keep. Anything else is a real failure.
        if !matches!(fs::metadata(&layout.ca_cert), Ok(m) if m.is_file()) {
            return Err(TlsError::at(&layout.pki, format_args!("cannot move {} into place: {e}", staging.display())));
        }
    }
    sync_dir(&layout.dir);

    publish_new_file(&layout.token, format!("{}\n", new_token()).as_bytes(), 0o600)
}

fn write_staging(staging: &Path, pki: &Generated) -> Result<(), TlsError> {
    create_dir_private(staging)?;
    let files: [(&str, &str, u32); 4] = [
        (CA_CERT_FILE, &pki.ca_cert_pem, 0o644),
        (CA_KEY_FILE, &pki.ca_key_pem, 0o600),
        (SERVER_CERT_FILE, &pki.server_cert_pem, 0o644),
        (SERVER_KEY_FILE, &pki.server_key_pem, 0o600),
    ];
    for (name, contents, mode) in files {
        write_new_file(&staging.join(name), contents.as_bytes(), mode)?;
    }
    sync_dir(staging);
    Ok(())
}

fn new_file_options(mode: u32) -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    options
}

/// Creates `path` (which must not exist) with `mode` and writes `contents` durably.
fn write_new_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    let mut file =
        new_file_options(mode).open(path).map_err(|e| TlsError::at(path, format_args!("cannot create: {e}")))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|e| TlsError::at(path, format_args!("cannot write: {e}")))
}

/// Publishes `contents` at `path` unless a file is already there (which then
/// wins), never leaving a partially written file at `path`.
fn publish_new_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    let tmp = temp_sibling(path)?;
    write_new_file(&tmp, contents, mode).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    let result = match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        // File systems without hard links: fall back to a plain rename.
        Err(_) => fs::rename(&tmp, path).map_err(|e| TlsError::at(path, format_args!("cannot move into place: {e}"))),
    };
    let _ = fs::remove_file(&tmp);
    if let Some(parent) = path.parent() {
        sync_dir(parent);
    }
    result
}

fn temp_sibling(path: &Path) -> Result<PathBuf, TlsError> {
    let name = path.file_name().ok_or_else(|| TlsError::at(path, "is not a file path"))?;
    Ok(path.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), random_suffix())))
}

fn create_dir_private(path: &Path) -> Result<(), TlsError> {
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(path).map_err(|e| TlsError::at(path, format_args!("cannot create directory: {e}")))
}

fn create_dir_all_private(path: &Path) -> Result<(), TlsError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(path).map_err(|e| TlsError::at(path, format_args!("cannot create directory: {e}")))
}

/// Best-effort fsync of a directory so renames into it survive a crash.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

// ---------------------------------------------------------------------------
// Loading and checking
// ---------------------------------------------------------------------------

fn read_text(path: &Path) -> Result<String, TlsError> {
    let bytes = fs::read(path).map_err(|e| TlsError::at(path, format_args!("cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|_| TlsError::at(path, "is not UTF-8 text (garbled PEM?)"))
}

fn parse_certs(what: &dyn fmt::Display, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{what}: invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{what}: no PEM CERTIFICATE block found")));
    }
    Ok(certs)
}

fn parse_key(what: &dyn fmt::Display, pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|e| TlsError(format!("{what}: invalid PEM: {e}")))?
        .ok_or_else(|| TlsError(format!("{what}: no PEM PRIVATE KEY block found")))
}

/// Checks that `key` parses and belongs to the first certificate of `certs`.
fn check_key_matches(
    provider: &CryptoProvider,
    certs: &[CertificateDer<'static>],
    key_what: &dyn fmt::Display,
    key: PrivateKeyDer<'static>,
    cert_what: &dyn fmt::Display,
) -> Result<(), TlsError> {
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError(format!("{key_what}: unusable private key: {e}")))?;
    match CertifiedKey::new(certs.to_vec(), signing_key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError(format!("{key_what}: does not match the certificate in {cert_what}")))
        }
        Err(e) => Err(TlsError(format!("{cert_what}: unusable certificate: {e}"))),
    }
}

fn load(layout: &Layout) -> Result<Credentials, TlsError> {
    let provider = ring_provider();

    let ca_path = layout.ca_cert.display();
    let ca_cert_pem = read_text(&layout.ca_cert)?;
    let ca_certs = parse_certs(&ca_path, &ca_cert_pem)?;
    let mut roots = RootCertStore::empty();
    for cert in &ca_certs {
        roots
            .add(cert.clone())
            .map_err(|e| TlsError::at(&layout.ca_cert, format_args!("not a usable CA certificate: {e}")))?;
    }

    let ca_key_path = layout.ca_key.display();
    let ca_key = parse_key(&ca_key_path, &read_text(&layout.ca_key)?)?;
    check_key_matches(&provider, &ca_certs, &ca_key_path, ca_key, &ca_path)?;

    let server_cert_path = layout.server_cert.display();
    let server_cert_pem = read_text(&layout.server_cert)?;
    let server_certs = parse_certs(&server_cert_path, &server_cert_pem)?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::at(&layout.ca_cert, format_args!("cannot build a verifier: {e}")))?;
    let now = UnixTime::now();
    for name in ["127.0.0.1", "localhost"] {
        let server_name =
            ServerName::try_from(name).map_err(|e| TlsError(format!("invalid server name {name}: {e}")))?;
        verifier.verify_server_cert(&server_certs[0], &server_certs[1..], &server_name, &[], now).map_err(|e| {
            TlsError::at(
                &layout.server_cert,
                format_args!("not a valid serving certificate for {name} issued by the CA in {ca_path}: {e}"),
            )
        })?;
    }

    let server_key_path = layout.server_key.display();
    let server_key_pem = read_text(&layout.server_key)?;
    let server_key = parse_key(&server_key_path, &server_key_pem)?;
    check_key_matches(&provider, &server_certs, &server_key_path, server_key, &server_cert_path)?;

    let token = read_text(&layout.token)?.trim().to_string();
    if token.is_empty() {
        return Err(TlsError::at(&layout.token, "is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TlsError::at(
            &layout.token,
            "contains characters not allowed in a bearer token (only visible ASCII, no spaces)",
        ));
    }

    Ok(Credentials { ca_cert_pem, server_cert_pem, server_key_pem, token })
}

// ---------------------------------------------------------------------------
// Server configuration
// ---------------------------------------------------------------------------

/// A rustls server configuration serving `creds`' certificate with the ring
/// provider, safe default protocol versions, no client authentication and ALPN
/// `h2` then `http/1.1`.
pub fn server_config(creds: &Credentials) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = parse_certs(&"server certificate", &creds.server_cert_pem)?;
    let key = parse_key(&"server private key", &creds.server_key_pem)?;
    let mut config = rustls::ServerConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(format!("server certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

// ---------------------------------------------------------------------------
// Kubeconfig
// ---------------------------------------------------------------------------

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority_data: String,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct User {
    token: String,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug))]
struct Context {
    cluster: String,
    user: String,
    namespace: String,
}

/// A kubeconfig (`apiVersion: v1`, `kind: Config`) with one cluster, user and
/// context, all named `context_name`: the cluster at `server_url` trusted through
/// `certificate-authority-data` (base64 of the CA PEM), the user authenticating
/// with the bearer token, the context in namespace `default` and current.
pub fn kubeconfig_yaml(server_url: &str, creds: &Credentials, context_name: &str) -> String {
    let config = Kubeconfig {
        api_version: "v1".into(),
        kind: "Config".into(),
        clusters: vec![NamedCluster {
            name: context_name.into(),
            cluster: Cluster {
                server: server_url.into(),
                certificate_authority_data: STANDARD.encode(&creds.ca_cert_pem),
            },
        }],
        users: vec![NamedUser { name: context_name.into(), user: User { token: creds.token.clone() } }],
        contexts: vec![NamedContext {
            name: context_name.into(),
            context: Context { cluster: context_name.into(), user: context_name.into(), namespace: "default".into() },
        }],
        current_context: context_name.into(),
    };
    let mut options = serde_saphyr::SerializerOptions::default();
    // Keep the long base64 value a plain one-line scalar rather than a `>` block.
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(&config, options)
        .expect("serializing a struct of plain strings to YAML cannot fail")
}

/// Writes `yaml` to `path` atomically (a temp file in the same directory, created
/// with mode 0600, then renamed over `path`), creating missing parent directories
/// (mode 0700).
pub fn write_kubeconfig(path: &Path, yaml: &str) -> Result<(), TlsError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    create_dir_all_private(parent)?;
    let tmp = temp_sibling(path)?;
    write_new_file(&tmp, yaml.as_bytes(), 0o600)
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| TlsError::at(path, format_args!("cannot replace: {e}"))))
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
    sync_dir(parent);
    Ok(())
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

/// Whether an `Authorization` header value is `Bearer <expected>` (scheme
/// case-insensitive). The token bytes are compared in constant time; an empty
/// `expected` token never matches.
pub fn token_matches(expected: &str, authorization_header: Option<&str>) -> bool {
    authorization_header.and_then(bearer_token).is_some_and(|presented| token_is(expected, presented))
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive, as
/// kube-apiserver's bearer-token authenticator reads it), if it is one.
pub fn bearer_token(authorization_header: &str) -> Option<&str> {
    let (scheme, presented) = authorization_header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| presented.trim_start())
}

/// Whether `presented` is the token `expected`, compared in constant time; an empty `expected`
/// token never matches.
pub fn token_is(expected: &str, presented: &str) -> bool {
    !expected.is_empty() && constant_time_eq(expected.as_bytes(), presented.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pki(dir: &Path, name: &str) -> PathBuf {
        dir.join(PKI_DIR).join(name)
    }

    #[test]
    fn create_then_load_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let created = load_or_create(&dir).unwrap();
        let loaded = load_or_create(&dir).unwrap();
        assert_eq!(created, loaded);
        assert_eq!(created.token.len(), 43);
        assert!(created.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(created.server_key_pem.contains("PRIVATE KEY"));
        for name in [CA_CERT_FILE, CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE] {
            assert!(pki(&dir, name).is_file(), "{name}");
        }
        // No staging leftovers.
        let entries: Vec<_> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        let mut entries = entries;
        entries.sort();
        assert_eq!(entries, ["pki", "token"]);
        // A different data dir gets different credentials.
        let other = load_or_create(&tmp.path().join("other")).unwrap();
        assert_ne!(other.ca_cert_pem, created.ca_cert_pem);
        assert_ne!(other.token, created.token);
    }

    #[test]
    fn partial_data_dir_names_the_missing_file() {
        for name in [CA_CERT_FILE, CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path();
            let original = load_or_create(dir).unwrap();
            let path = pki(dir, name);
            fs::remove_file(&path).unwrap();
            let err = load_or_create(dir).unwrap_err().to_string();
            assert!(err.starts_with(&path.display().to_string()), "{err}");
            assert!(err.contains("missing"), "{err}");
            // Nothing was regenerated behind our back.
            assert!(!path.exists());
            if name != CA_CERT_FILE {
                assert_eq!(read_text(&pki(dir, CA_CERT_FILE)).unwrap(), original.ca_cert_pem);
            }
        }
    }

    #[test]
    fn a_missing_token_beside_a_complete_pki_is_regenerated_and_the_ca_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let original = load_or_create(dir).unwrap();
        fs::remove_file(dir.join(TOKEN_FILE)).unwrap();
        let again = load_or_create(dir).unwrap();
        assert_eq!(again.ca_cert_pem, original.ca_cert_pem);
        assert_ne!(again.token, original.token);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(fs::metadata(dir.join(TOKEN_FILE)).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn garbled_files_are_errors_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        load_or_create(dir).unwrap();
        let files =
            [pki(dir, CA_CERT_FILE), pki(dir, CA_KEY_FILE), pki(dir, SERVER_CERT_FILE), pki(dir, SERVER_KEY_FILE)];
        let originals: Vec<Vec<u8>> = files.iter().map(|p| fs::read(p).unwrap()).collect();
        let garbage: [&[u8]; 5] = [
            b"this is not PEM\n",
            b"-----BEGIN CERTIFICATE-----\n!!!notbase64!!!\n-----END CERTIFICATE-----\n",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            b"\xff\xfe\x00garbage",
        ];
        for (i, path) in files.iter().enumerate() {
            for bad in garbage {
                fs::write(path, bad).unwrap();
                let err = load_or_create(dir).unwrap_err().to_string();
                assert!(
                    err.starts_with(&path.display().to_string()),
                    "{} with {:?}: {err}",
                    path.display(),
                    String::from_utf8_lossy(bad)
                );
            }
            fs::write(path, &originals[i]).unwrap();
        }
        load_or_create(dir).unwrap();

        // A key that parses but belongs to another certificate.
        fs::write(pki(dir, SERVER_KEY_FILE), &originals[1]).unwrap();
        let err = load_or_create(dir).unwrap_err().to_string();
        assert!(err.contains("server.key: does not match"), "{err}");
        fs::write(pki(dir, SERVER_KEY_FILE), &originals[3]).unwrap();

        // A serving certificate from another CA.
        let other = tempfile::tempdir().unwrap();
        let other_creds = load_or_create(other.path()).unwrap();
        fs::write(pki(dir, SERVER_CERT_FILE), &other_creds.server_cert_pem).unwrap();
        let err = load_or_create(dir).unwrap_err().to_string();
        assert!(err.contains("server.crt: not a valid serving certificate"), "{err}");
        fs::write(pki(dir, SERVER_CERT_FILE), &originals[2]).unwrap();

        // Token problems.
        fs::write(dir.join(TOKEN_FILE), "\n").unwrap();
        let err = load_or_create(dir).unwrap_err().to_string();
        assert!(err.contains("token: is empty"), "{err}");
        fs::write(dir.join(TOKEN_FILE), "two words\n").unwrap();
        let err = load_or_create(dir).unwrap_err().to_string();
        assert!(err.contains("token: contains characters"), "{err}");

        // A directory where a file should be.
        fs::remove_file(dir.join(TOKEN_FILE)).unwrap();
        fs::create_dir(dir.join(TOKEN_FILE)).unwrap();
        let err = load_or_create(dir).unwrap_err().to_string();
        assert!(err.contains("token: exists but is not a regular file"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn secret_files_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let creds = load_or_create(&dir).unwrap();
        assert_eq!(mode(&pki(&dir, CA_KEY_FILE)), 0o600);
        assert_eq!(mode(&pki(&dir, SERVER_KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.join(TOKEN_FILE)), 0o600);
        assert_eq!(mode(&dir.join(PKI_DIR)), 0o700);
        assert_eq!(mode(&pki(&dir, CA_CERT_FILE)) & 0o600, 0o600);

        let kubeconfig = tmp.path().join("home/.kube/config");
        write_kubeconfig(&kubeconfig, &kubeconfig_yaml("https://127.0.0.1:1", &creds, "x")).unwrap();
        assert_eq!(mode(&kubeconfig), 0o600);
        // Overwriting keeps it private and leaves no temp files.
        fs::set_permissions(&kubeconfig, fs::Permissions::from_mode(0o644)).unwrap();
        write_kubeconfig(&kubeconfig, "replaced\n").unwrap();
        assert_eq!(mode(&kubeconfig), 0o600);
        assert_eq!(fs::read_to_string(&kubeconfig).unwrap(), "replaced\n");
        assert_eq!(fs::read_dir(kubeconfig.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn kubeconfig_parses_back() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = load_or_create(tmp.path()).unwrap();
        let yaml = kubeconfig_yaml("https://127.0.0.1:6443", &creds, "jobset");
        assert!(yaml.contains("apiVersion: v1"), "{yaml}");
        assert!(yaml.contains("kind: Config"), "{yaml}");
        assert!(yaml.contains("certificate-authority-data: "), "{yaml}");
        assert!(yaml.contains("current-context: jobset"), "{yaml}");

        let parsed: Kubeconfig = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(parsed.api_version, "v1");
        assert_eq!(parsed.kind, "Config");
        assert_eq!(parsed.current_context, "jobset");
        let cluster = &parsed.clusters[0];
        assert_eq!(cluster.name, "jobset");
        assert_eq!(cluster.cluster.server, "https://127.0.0.1:6443");
        let ca = STANDARD.decode(&cluster.cluster.certificate_authority_data).unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), creds.ca_cert_pem);
        assert_eq!(parsed.users[0].name, "jobset");
        assert_eq!(parsed.users[0].user.token, creds.token);
        let context = &parsed.contexts[0];
        assert_eq!(context.name, "jobset");
        assert_eq!(context.context.cluster, "jobset");
        assert_eq!(context.context.user, "jobset");
        assert_eq!(context.context.namespace, "default");

        // Names that need quoting in YAML survive too.
        let yaml = kubeconfig_yaml("https://[::1]:6443", &creds, "yes: #odd");
        let parsed: Kubeconfig = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(parsed.current_context, "yes: #odd");
        assert_eq!(parsed.clusters[0].cluster.server, "https://[::1]:6443");
    }

    #[test]
    fn token_matching() {
        let t = "s3cr3t-token_value";
        assert!(token_matches(t, Some("Bearer s3cr3t-token_value")));
        assert!(token_matches(t, Some("bearer s3cr3t-token_value")));
        assert!(token_matches(t, Some("Bearer  s3cr3t-token_value ")));
        assert!(!token_matches(t, None));
        assert!(!token_matches(t, Some("")));
        assert!(!token_matches(t, Some("Bearer")));
        assert!(!token_matches(t, Some("Bearer ")));
        assert!(!token_matches(t, Some("Bearer s3cr3t-token_valuf")));
        assert!(!token_matches(t, Some("Bearer s3cr3t-token_value2")));
        assert!(!token_matches(t, Some("Bearer s3cr3t")));
        assert!(!token_matches(t, Some("s3cr3t-token_value")));
        assert!(!token_matches(t, Some("Basic s3cr3t-token_value")));
        let basic = format!("Basic {}", STANDARD.encode(format!("admin:{t}")));
        assert!(!token_matches(t, Some(&basic)));
        assert!(!token_matches("", Some("Bearer ")));
        assert!(!token_matches("", Some("Bearer")));
    }

    #[test]
    fn debug_redacts_secrets() {
        let creds = Credentials {
            ca_cert_pem: "CA".into(),
            server_cert_pem: "CERT".into(),
            server_key_pem: "KEY-MATERIAL".into(),
            token: "TOKEN-VALUE".into(),
        };
        let shown = format!("{creds:?} {creds:#?}");
        assert!(!shown.contains("KEY-MATERIAL"), "{shown}");
        assert!(!shown.contains("TOKEN-VALUE"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(shown.contains("CERT"), "{shown}");
    }

    #[test]
    fn server_config_rejects_bad_material() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = load_or_create(tmp.path()).unwrap();
        let config = server_config(&creds).unwrap();
        assert_eq!(config.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        let mut bad = creds.clone();
        bad.server_key_pem = "nope".into();
        assert!(server_config(&bad).is_err());
        let mut bad = creds;
        bad.server_cert_pem = bad.ca_cert_pem.clone();
        let err = server_config(&bad).unwrap_err().to_string();
        assert!(err.contains("server certificate and key"), "{err}");
    }

    mod end_to_end {
        use super::*;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio::net::{TcpListener, TcpStream};
        use tokio_rustls::{TlsAcceptor, TlsConnector};

        fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
            let mut roots = RootCertStore::empty();
            for cert in parse_certs(&"ca", ca_pem).unwrap() {
                roots.add(cert).unwrap();
            }
            let mut config = rustls::ClientConfig::builder_with_provider(ring_provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(config)
        }

        async fn exchange(
            addr: std::net::SocketAddr,
            config: Arc<rustls::ClientConfig>,
            name: &'static str,
        ) -> io::Result<(Vec<u8>, Option<Vec<u8>>)> {
            let tcp = TcpStream::connect(addr).await?;
            let server_name = ServerName::try_from(name).unwrap();
            let mut tls = TlsConnector::from(config).connect(server_name, tcp).await?;
            let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            tls.write_all(b"ping\n").await?;
            let mut reply = vec![0u8; 5];
            tls.read_exact(&mut reply).await?;
            tls.shutdown().await?;
            Ok((reply, alpn))
        }

        #[tokio::test]
        async fn tls_handshake_with_generated_ca() {
            let tmp = tempfile::tempdir().unwrap();
            load_or_create(tmp.path()).unwrap();
            // Reload to be sure the persisted material is what gets served.
            let creds = load_or_create(tmp.path()).unwrap();
            let acceptor = TlsAcceptor::from(server_config(&creds).unwrap());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        // Failed handshakes (the negative cases) are expected.
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let mut buf = [0u8; 5];
                        if tls.read_exact(&mut buf).await.is_ok() {
                            assert_eq!(&buf, b"ping\n");
                            let _ = tls.write_all(b"pong\n").await;
                            let _ = tls.shutdown().await;
                        }
                    });
                }
            });

            let good = client_config(&creds.ca_cert_pem);
            for name in ["127.0.0.1", "localhost"] {
                let (reply, alpn) = tokio::time::timeout(Duration::from_secs(10), exchange(addr, good.clone(), name))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(reply, b"pong\n", "{name}");
                assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "{name}");
            }

            // A name not in the SANs is rejected.
            let err = exchange(addr, good, "example.com").await.unwrap_err();
            assert!(err.to_string().contains("certificate"), "{err}");

            // A client trusting a different CA is rejected.
            let other = tempfile::tempdir().unwrap();
            let other_creds = load_or_create(other.path()).unwrap();
            let err = exchange(addr, client_config(&other_creds.ca_cert_pem), "127.0.0.1").await.unwrap_err();
            assert!(err.to_string().contains("certificate"), "{err}");

            server.abort();
        }
    }
}
