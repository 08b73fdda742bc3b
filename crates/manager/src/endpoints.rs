//! The manager's HTTP endpoints, served on every replica, leader or not, as controller-runtime's:
//! health probes (`/healthz`, `/readyz`) and Prometheus metrics (`/metrics`, over HTTPS with a
//! self-signed certificate by default, as controller-runtime's secure metrics serving without
//! a cert dir).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The content type of Prometheus' OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A Go-style bind address as upstream's flags and configuration take it: `:8081` (every
/// interface), `host:port`, or `0` / empty to serve nothing (controller-runtime's "disabled").
pub fn parse_bind_address(field: &str, s: &str) -> Result<Option<SocketAddr>, String> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let with_host = if s.starts_with(':') { format!("0.0.0.0{s}") } else { s.to_string() };
    let with_host = with_host.replacen("localhost:", "127.0.0.1:", 1);
    with_host
        .parse::<SocketAddr>()
        .map(Some)
        .map_err(|_| format!("{field}: invalid bind address {s:?}: expected host:port, :port, or 0 to disable"))
}

/// `/healthz` answers while the process serves; `/readyz` once `ready` holds.
pub fn health_router(ready: watch::Receiver<bool>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let ready = *ready.borrow();
            async move {
                if ready {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::INTERNAL_SERVER_ERROR, "[-]readyz failed: caches have not synced\nreadyz check failed")
                }
            }
        }),
    )
}

pub fn metrics_router(registry: Arc<Mutex<Registry>>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(registry)
}

async fn metrics(State(registry): State<Arc<Mutex<Registry>>>) -> impl IntoResponse {
    let mut text = String::new();
    let encoded = {
        let r = registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &r)
    };
    match encoded {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")).into_response(),
    }
}

/// A self-signed serving certificate for `localhost` and the host's name, as controller-runtime
/// makes for secure metrics without a cert dir (scrapers use `insecureSkipVerify`).
pub fn self_signed_tls() -> anyhow::Result<Arc<rustls::ServerConfig>> {
    Ok(self_signed()?.0)
}

fn self_signed() -> anyhow::Result<(Arc<rustls::ServerConfig>, rustls::pki_types::CertificateDer<'static>)> {
    let mut names = vec!["localhost".to_string()];
    if let Ok(h) = nix::unistd::gethostname() {
        names.extend(h.into_string().ok());
    }
    let cert = rcgen::generate_simple_self_signed(names)?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    Ok((Arc::new(config), cert.cert.der().clone()))
}

/// A bound listener and what it serves; `serve` runs until `handle` shuts it down.
pub struct Endpoint {
    pub listener: std::net::TcpListener,
    pub router: Router,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Endpoint {
    /// Binds now, so the address is known (and a port in use is reported) before anything runs.
    pub fn bind(
        field: &str,
        addr: SocketAddr,
        router: Router,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> anyhow::Result<Endpoint> {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("{field}: listening on {addr}: {e}"))?;
        listener.set_nonblocking(true)?;
        Ok(Endpoint { listener, router, tls })
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        match self.listener.local_addr() {
            Ok(a) => format!("{scheme}://{a}{path}"),
            Err(_) => format!("{scheme}://?{path}"),
        }
    }

    pub async fn serve(self, handle: Handle<SocketAddr>) -> std::io::Result<()> {
        let service = self.router.into_make_service();
        match self.tls {
            Some(tls) => {
                axum_server::from_tcp_rustls(self.listener, RustlsConfig::from_config(tls))?
                    .handle(handle)
                    .serve(service)
                    .await
            }
            None => axum_server::from_tcp(self.listener)?.handle(handle).serve(service).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_read_as_go_listens() {
        let cases: [(&str, Option<&str>); 7] = [
            (":8081", Some("0.0.0.0:8081")),
            ("127.0.0.1:8443", Some("127.0.0.1:8443")),
            ("localhost:9000", Some("127.0.0.1:9000")),
            ("[::1]:8081", Some("[::1]:8081")),
            ("127.0.0.1:0", Some("127.0.0.1:0")),
            ("0", None),
            ("", None),
        ];
        for (s, want) in cases {
            let got = parse_bind_address("metrics.bindAddress", s).unwrap();
            assert_eq!(got.map(|a| a.to_string()).as_deref(), want, "{s:?}");
        }
    }

    #[test]
    fn a_bad_bind_address_names_the_field() {
        for s in ["8081", "host", ":port", "1.2.3.4:99999"] {
            let e = parse_bind_address("health.healthProbeBindAddress", s).unwrap_err();
            assert!(e.starts_with("health.healthProbeBindAddress: invalid bind address"), "{s}: {e}");
        }
    }

    #[tokio::test]
    async fn metrics_are_served_over_https_with_the_self_signed_certificate() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut registry = Registry::default();
        let counter: prometheus_client::metrics::counter::Counter = Default::default();
        registry.register("jobset_completed", "Number of completed JobSets", counter.clone());
        counter.inc();
        let (tls, cert) = self_signed().unwrap();
        let router = metrics_router(Arc::new(Mutex::new(registry)));
        let ep = Endpoint::bind("metrics.bindAddress", "127.0.0.1:0".parse().unwrap(), router, Some(tls)).unwrap();
        let url = ep.url("/metrics");
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let addr = ep.listener.local_addr().unwrap();
        let handle = Handle::new();
        let serving = tokio::spawn(ep.serve(handle.clone()));

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        tls.read_to_end(&mut out).await.unwrap_or_default();
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("application/openmetrics-text"), "{out}");
        assert!(out.contains("jobset_completed_total 1"), "{out}");
        handle.shutdown();
        serving.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn readyz_fails_until_the_caches_have_synced() {
        use tower::ServiceExt;
        let (tx, rx) = watch::channel(false);
        let app = health_router(rx);
        let status = |app: Router, path: &'static str| async move {
            let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
            app.oneshot(req).await.unwrap().status()
        };
        assert_eq!(status(app.clone(), "/healthz").await, StatusCode::OK);
        assert_eq!(status(app.clone(), "/readyz").await, StatusCode::INTERNAL_SERVER_ERROR);
        tx.send_replace(true);
        assert_eq!(status(app.clone(), "/readyz").await, StatusCode::OK);
    }
}
