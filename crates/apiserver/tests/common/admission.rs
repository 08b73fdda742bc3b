//! Requests straight to the server's router, and the 422 Status an admission hook's rejection
//! becomes, for the admission tests.

use axum::body::Body;
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub async fn send(app: &axum::Router, method: Method, uri: &str, body: &Value) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap())
}

/// A Status's causes as (reason, field, message).
pub type Causes = Vec<(String, String, String)>;

/// Asserts a 422 Invalid Status for object `name` of `group`/`kind` and returns its causes.
pub fn invalid_for(code: u16, status: &Value, group: &str, kind: &str, name: &str) -> Causes {
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Invalid", "{status}");
    assert_eq!(status["details"]["group"], group, "{status}");
    assert_eq!(status["details"]["kind"], kind, "{status}");
    assert_eq!(status["details"]["name"], name, "{status}");
    status["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {status}"))
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("reason"), s("field"), s("message"))
        })
        .collect()
}

pub fn owned(causes: &[(&str, &str, &str)]) -> Causes {
    causes.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect()
}
