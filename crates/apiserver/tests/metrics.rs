//! `GET /metrics`: 404 until a registry is set, then its OpenMetrics text; behind the token on the
//! authenticated router (only /version, /healthz, /readyz and /livez are public).

use jobset_apiserver::{ApiServer, MetricsRegistry, OPENMETRICS_CONTENT_TYPE};
use prometheus_client::metrics::counter::Counter;
use tower::ServiceExt;

async fn get(router: &axum::Router, token: Option<&str>) -> (http::StatusCode, Option<String>, String) {
    let mut req = http::Request::get("/metrics");
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = router.clone().oneshot(req.body(axum::body::Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ct = resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, ct, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn metrics_are_served_once_a_registry_is_set_and_need_the_token() {
    let server = ApiServer::in_memory();
    let router = jobset_apiserver::serve::authenticated_router(&server, "s3cret".into());
    assert_eq!(get(&router, Some("s3cret")).await.0, http::StatusCode::NOT_FOUND);

    let registry = MetricsRegistry::default();
    let requests = Counter::<u64>::default();
    registry.lock().unwrap().register("demo_requests", "Requests seen", requests.clone());
    server.set_metrics_registry(registry);
    requests.inc_by(3);

    assert_eq!(get(&router, None).await.0, http::StatusCode::UNAUTHORIZED);
    assert_eq!(get(&router, Some("wrong")).await.0, http::StatusCode::UNAUTHORIZED);
    let (status, ct, body) = get(&router, Some("s3cret")).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(ct.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
    assert!(body.contains("# TYPE demo_requests counter"), "{body}");
    assert!(body.contains("demo_requests_total 3"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}
