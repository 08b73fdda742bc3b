//! Who may read `/metrics` when it is served securely, as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` decides it: the scraper's bearer token is checked
//! with a `TokenReview`, then its user's right to `get` the path with a `SubjectAccessReview`, both
//! answered by the cluster's API server (the manager's ServiceAccount needs
//! config/rbac/metrics_auth_role.yaml; a scraper needs `nonResourceURLs: [/metrics]`, `get`).
//! Nothing is cached: a scrape every few seconds costs two small requests.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

/// The bearer token of an `Authorization` header, if it carries one.
fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The review of `user`'s right to `verb` (the request method, lower-cased) on the
/// non-resource `path`.
fn access_review(user: &UserInfo, verb: &str, path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_lowercase()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// controller-runtime's answers: 401 `Unauthorized`, 403 `Authorization denied for user NAME`,
/// 500 when a review could not be made.
fn refuse(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{message}\n")).into_response()
}

/// The middleware: lets the request through only for an authenticated, authorized user.
pub async fn authenticate_and_authorize(State(client): State<Arc<Client>>, req: Request, next: Next) -> Response {
    let header = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let Some(token) = bearer(header) else {
        return refuse(StatusCode::UNAUTHORIZED, "Unauthorized".into());
    };
    let review =
        TokenReview { spec: TokenReviewSpec { token: token.to_string(), ..Default::default() }, ..Default::default() };
    let reviewed = Api::<TokenReview>::all((*client).clone()).create(&PostParams::default(), &review).await;
    let user = match reviewed {
        Ok(r) => match r.status {
            Some(s) if s.authenticated == Some(true) => s.user.unwrap_or_default(),
            _ => return refuse(StatusCode::UNAUTHORIZED, "Unauthorized".into()),
        },
        Err(e) => {
            tracing::error!(error = %e, "Authentication failed");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "Authentication failed".into());
        }
    };
    let name = user.username.clone().unwrap_or_default();
    let review = access_review(&user, req.method().as_str(), req.uri().path());
    match Api::<SubjectAccessReview>::all((*client).clone()).create(&PostParams::default(), &review).await {
        Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => next.run(req).await,
        Ok(r) => {
            let reason = r.status.and_then(|s| s.reason).unwrap_or_default();
            tracing::debug!(user = %name, %reason, "Authorization denied for user {name}");
            refuse(StatusCode::FORBIDDEN, format!("Authorization denied for user {name}"))
        }
        Err(e) => {
            let message = format!("Authorization for user {name} failed");
            tracing::error!(error = %e, "{message}");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_authenticates() {
        let cases: [(Option<&str>, Option<&str>); 7] = [
            (Some("Bearer abc"), Some("abc")),
            (Some("bearer abc"), Some("abc")),
            (Some("  Bearer   abc  "), Some("abc")),
            (Some("Basic dXNlcjpwYXNz"), None),
            (Some("Bearer "), None),
            (Some("abc"), None),
            (None, None),
        ];
        for (header, want) in cases {
            assert_eq!(bearer(header), want, "{header:?}");
        }
    }

    #[test]
    fn the_access_review_asks_for_the_reviewed_user_and_the_request() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            uid: Some("u-1".into()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            extra: None,
        };
        let review = serde_json::to_value(access_review(&user, "GET", "/metrics")).unwrap();
        assert_eq!(
            review["spec"],
            serde_json::json!({
                "user": "system:serviceaccount:monitoring:prometheus",
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            })
        );
    }
}
