//! The HTTPS call to a webhook: `POST` of the AdmissionReview over TLS that trusts only the
//! webhook's `caBundle` and checks the serving certificate's name (`<service>.<namespace>.svc`
//! for a service reference, the URL's host otherwise), within `timeoutSeconds`. Errors are
//! worded as Go's `net/http` and `crypto/tls` word them after `Post "<url>": `.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

/// Where to connect and what to call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as kube-apiserver's rest client prints it in errors, with `?timeout=<n>s`.
    pub url: String,
    /// The host the certificate must be for (SNI too).
    pub server_name: String,
    /// `host:port` to connect to.
    pub address: String,
    /// Path and query of the request.
    pub path: String,
}

impl Endpoint {
    /// The endpoint of `clientConfig.url` (already validated as `https://host[:port][/path]`).
    pub fn for_url(url: &str, timeout: Duration) -> Result<Endpoint, String> {
        let rest = url.strip_prefix("https://").ok_or_else(|| format!("unsupported protocol scheme in {url:?}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = split_host_port(authority);
        let path = format!("{path}?timeout={}s", timeout.as_secs());
        Ok(Endpoint {
            url: format!("https://{authority}{path}"),
            server_name: host.to_string(),
            address: if host.contains(':') {
                format!("[{host}]:{}", port.unwrap_or(443))
            } else {
                format!("{host}:{}", port.unwrap_or(443))
            },
            path,
        })
    }

    /// The endpoint of a service reference, reached at `address`.
    pub fn for_service(
        namespace: &str,
        name: &str,
        port: u16,
        path: &str,
        address: String,
        timeout: Duration,
    ) -> Endpoint {
        let server_name = format!("{name}.{namespace}.svc");
        let path = format!("{}?timeout={}s", if path.is_empty() { "/" } else { path }, timeout.as_secs());
        Endpoint { url: format!("https://{server_name}:{port}{path}"), server_name, address, path }
    }
}

fn split_host_port(authority: &str) -> (&str, Option<u16>) {
    // `[::1]:443`, `host:443`, `host`.
    if let Some(rest) = authority.strip_prefix('[')
        && let Some((h, p)) = rest.split_once(']')
    {
        return (h, p.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h, p.parse().ok()),
        _ => (authority, None),
    }
}

/// A webhook's answer: status code, content type and body.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub content_type: String,
    pub body: Bytes,
}

/// The TLS client of a `caBundle` (PEM): it trusts those certificates only.
pub fn tls_config(ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    if !ca_bundle.is_empty() {
        let certs: Vec<_> = rustls_pemfile::certs(&mut &ca_bundle[..]).filter_map(Result::ok).collect();
        if certs.is_empty() {
            return Err(
                "could not get REST client: unable to load root certificates: unable to parse bytes as PEM block"
                    .into(),
            );
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("could not get REST client: unable to load root certificates: {e}"))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("could not get REST client: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Go's `crypto/tls`/`crypto/x509` wording of a failed handshake.
fn tls_error(e: &std::io::Error, server_name: &str) -> String {
    use rustls::{CertificateError, Error};
    let Some(err) = e.get_ref().and_then(|i| i.downcast_ref::<Error>()) else { return e.to_string() };
    let verify = |what: String| format!("tls: failed to verify certificate: x509: {what}");
    match err {
        // A CA of the same name that did not sign it is unknown to Go as well.
        Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
            verify("certificate signed by unknown authority".into())
        }
        Error::InvalidCertificate(CertificateError::NotValidForNameContext { presented, .. }) => {
            // rustls presents `DnsName("a.b")` and `IpAddress(..)`.
            let is_ip = |p: &String| p.starts_with("IpAddress");
            if server_name.parse::<std::net::IpAddr>().is_ok() && !presented.iter().any(is_ip) {
                return verify(format!(
                    "cannot validate certificate for {server_name} because it doesn't contain any IP SANs"
                ));
            }
            let names: Vec<&str> = presented
                .iter()
                .map(|p| p.split_once('(').map_or(p.as_str(), |(_, rest)| rest.trim_end_matches(')').trim_matches('"')))
                .collect();
            verify(format!("certificate is valid for {}, not {server_name}", names.join(", ")))
        }
        Error::InvalidCertificate(CertificateError::NotValidForName) => {
            verify(format!("certificate is not valid for {server_name}"))
        }
        Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. })
        | Error::InvalidCertificate(CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. }) => {
            verify("certificate has expired or is not yet valid".into())
        }
        other => format!("tls: {other}"),
    }
}

/// Posts `body` to `endpoint` and reads the answer, all within `timeout`. `Err` is the text
/// after `failed to call webhook: ` (including `Post "<url>": `).
pub async fn post(
    endpoint: &Endpoint,
    tls: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Reply, String> {
    let post = |why: String| format!("failed to call webhook: Post {:?}: {why}", endpoint.url);
    match tokio::time::timeout(timeout, exchange(endpoint, tls, body)).await {
        Err(_) => Err(post("context deadline exceeded".into())),
        Ok(Err(why)) => Err(post(why)),
        Ok(Ok(reply)) => Ok(reply),
    }
}

async fn exchange(endpoint: &Endpoint, tls: Arc<rustls::ClientConfig>, body: Vec<u8>) -> Result<Reply, String> {
    let tcp = tokio::net::TcpStream::connect(&endpoint.address).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => format!("dial tcp {}: connect: connection refused", endpoint.address),
        _ => format!("dial tcp {}: {e}", endpoint.address),
    })?;
    let name = rustls::pki_types::ServerName::try_from(endpoint.server_name.clone())
        .map_err(|e| format!("tls: invalid server name {:?}: {e}", endpoint.server_name))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| tls_error(&e, &endpoint.server_name))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    // The connection task ends with the exchange (or when the call times out and drops it).
    let driver = tokio::spawn(conn);
    let request = http::Request::post(&endpoint.path)
        .header(http::header::HOST, &endpoint.server_name)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Reply { code, content_type, body })
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_named_as_kube_apiservers_rest_client_names_them() {
        let s = Endpoint::for_service(
            "system",
            "webhook-service",
            443,
            "/mutate",
            "127.0.0.1:9443".into(),
            Duration::from_secs(10),
        );
        assert_eq!(s.url, "https://webhook-service.system.svc:443/mutate?timeout=10s");
        assert_eq!(s.server_name, "webhook-service.system.svc");
        assert_eq!(s.address, "127.0.0.1:9443");
        let u = Endpoint::for_url("https://127.0.0.1:8443/validate", Duration::from_secs(3)).unwrap();
        assert_eq!(
            (u.url.as_str(), u.server_name.as_str(), u.address.as_str()),
            ("https://127.0.0.1:8443/validate?timeout=3s", "127.0.0.1", "127.0.0.1:8443")
        );
        let v6 = Endpoint::for_url("https://[::1]:8443/v", Duration::from_secs(1)).unwrap();
        assert_eq!((v6.server_name.as_str(), v6.address.as_str()), ("::1", "[::1]:8443"));
        let h = Endpoint::for_url("https://hooks.example.com", Duration::from_secs(1)).unwrap();
        assert_eq!((h.address.as_str(), h.path.as_str()), ("hooks.example.com:443", "/?timeout=1s"));
    }

    #[test]
    fn a_ca_bundle_that_is_not_pem_is_kube_apiservers_error() {
        assert_eq!(
            tls_config(b"not a certificate").unwrap_err(),
            "could not get REST client: unable to load root certificates: unable to parse bytes as PEM block"
        );
        assert!(tls_config(b"").is_ok());
    }
}
