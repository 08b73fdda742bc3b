//! The HTTPS listener: loopback only, TLS with the generated CA, bearer-token authentication.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::auth::{PodTokens, User};
use crate::error::ApiError;
use crate::http::ApiServer;

/// Paths anyone may read, as kube-apiserver's `system:public-info-viewer` allows.
fn public(path: &str) -> bool {
    matches!(path, "/version" | "/healthz" | "/readyz" | "/livez")
}

struct Auth {
    token: String,
    pod_tokens: PodTokens,
    server: Arc<ApiServer>,
}

async fn authenticate(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let header = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if public(req.uri().path()) || crate::tls::token_matches(&auth.token, header) {
        return next.run(req).await;
    }
    let bearer = header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim);
    match bearer.and_then(|t| auth.pod_tokens.verify(t)).filter(|id| auth.server.pod_exists(id)) {
        // A pod's token reaches discovery and resources only (authorized per request there).
        Some(id) if req.uri().path().starts_with("/api") => {
            req.extensions_mut().insert(User::Pod(id));
            next.run(req).await
        }
        Some(id) => ApiError::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{}\" cannot get path \"{}\"", id.username(), req.uri().path()),
        )
        .into_response(),
        None => ApiError::unauthorized().into_response(),
    }
}

/// The router behind the listener: the API plus authentication by the server's token or a
/// pod-bound token ([`crate::auth`]).
pub fn authenticated_router(server: &Arc<ApiServer>, token: String) -> axum::Router {
    let auth = Auth { pod_tokens: PodTokens::new(&token), token, server: server.clone() };
    server.router().layer(axum::middleware::from_fn_with_state(Arc::new(auth), authenticate))
}

/// Serves HTTPS on `listener` until `shutdown` completes.
pub async fn serve_https(
    server: Arc<ApiServer>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    token: String,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = authenticated_router(&server, token);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = listener.accept() => r?,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
