//! The HTTPS listener: loopback only, TLS with the generated CA, bearer-token authentication,
//! and RBAC authorization of service-account tokens.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::auth::User;
use crate::error::ApiError;
use crate::http::ApiServer;
use crate::rbac::{Decision, RequestInfo};

/// Paths anyone may read, as kube-apiserver's `system:public-info-viewer` allows.
fn public(path: &str) -> bool {
    matches!(path, "/version" | "/healthz" | "/readyz" | "/livez")
}

/// Who may make the request: the server's token (anything), a pod-bound token (its own pod and
/// JobSet, checked per request in `http.rs`), or a service-account token (what RBAC allows,
/// decided here, before the request is routed, as kube-apiserver's authorization filter does).
/// Every token is read by `ApiServer::authenticate_token`, as a TokenReview's is.
async fn authenticate(State(server): State<Arc<ApiServer>>, mut req: Request, next: Next) -> Response {
    if public(req.uri().path()) {
        return next.run(req).await;
    }
    let header = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let user = header.and_then(crate::tls::bearer_token).and_then(|t| server.authenticate_token(t, &[]).ok());
    match user.map(|(user, _)| user) {
        None => ApiError::unauthorized().into_response(),
        Some(User::Admin) => next.run(req).await,
        Some(User::Pod(id)) => {
            // A pod's token reaches discovery and resources only (authorized per request there).
            if req.uri().path().starts_with("/api") {
                req.extensions_mut().insert(User::Pod(id));
                return next.run(req).await;
            }
            let info = RequestInfo::parse(req.method(), req.uri().path(), req.uri().query()).unwrap_or_default();
            crate::auth::forbidden(&id.username(), &info, "").into_response()
        }
        Some(User::ServiceAccount(sa)) => {
            let info = match RequestInfo::parse(req.method(), req.uri().path(), req.uri().query()) {
                Ok(info) => info,
                Err(e) => return ApiError::internal(format!("failed to create RequestInfo: {e}")).into_response(),
            };
            if let Decision::Deny { reason } = server.authorize(&sa.user_info(), &info) {
                return crate::auth::forbidden(&sa.username(), &info, &reason).into_response();
            }
            req.extensions_mut().insert(User::ServiceAccount(sa));
            next.run(req).await
        }
    }
}

/// The router behind the listener: the API plus authentication by the server's token, a
/// pod-bound token ([`crate::auth`]) or a service-account token ([`crate::rbac`]). The server
/// accepts `token` as the admin's, and signs service-account tokens with a key derived from it,
/// from here on.
pub fn authenticated_router(server: &Arc<ApiServer>, token: String) -> axum::Router {
    server.set_service_account_signing_key(&token);
    server.router().layer(axum::middleware::from_fn_with_state(server.clone(), authenticate))
}

/// Serves HTTPS on `listener` until `shutdown` completes.
pub async fn serve_https(
    server: Arc<ApiServer>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    token: String,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_https_with(server, listener, tls, token, None, shutdown).await
}

/// Where the web view is mounted: every path under it goes to the `ui` router of
/// [`serve_https_with`], no other.
pub const UI_PATH: &str = "/ui";

/// Whether `path` is the web view's ([`UI_PATH`] or below it).
fn is_ui_path(path: &str) -> bool {
    path.strip_prefix(UI_PATH).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// [`serve_https`], and, given a `ui` router, the web view: requests for paths under
/// [`UI_PATH`] go to it, outside the API's authentication, because its login page must be
/// reachable without a token (the web view authenticates its data routes itself).
pub async fn serve_https_with(
    server: Arc<ApiServer>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    token: String,
    ui: Option<axum::Router>,
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
        let ui = ui.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let target = match &ui {
                    Some(ui) if is_ui_path(req.uri().path()) => ui.clone(),
                    _ => app.clone(),
                };
                target.oneshot(req.map(axum::body::Body::new))
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_under_ui_go_to_the_web_view() {
        for (path, ui) in [
            ("/ui", true),
            ("/ui/", true),
            ("/ui/jobsets/default/a", true),
            ("/uix", false),
            ("/api/v1/ui", false),
            ("/", false),
            ("/apis/jobset.x-k8s.io/v1alpha2/jobsets", false),
        ] {
            assert_eq!(is_ui_path(path), ui, "{path}");
        }
    }
}
