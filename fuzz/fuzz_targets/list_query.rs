//! List and watch requests: the request path as RBAC reads it (`RequestInfo::parse`), and the
//! query parameters of a collection GET as the server reads them (`ListOptions`, `limit`,
//! `continue`, `labelSelector`, `fieldSelector`, `timeoutSeconds`, `watch`, `sendInitialEvents`,
//! `resourceVersion(Match)`, `allowWatchBookmarks`, `includeObject`, ...), sent through the
//! server's own router to an in-memory server holding one object of each kind.
//!
//! Input: `METHOD /path` on the first line, the query string (without `?`) on the second, and
//! optionally an `Accept` header value on the third. A list or watch of a resource (as
//! `RequestInfo` reads the path) is sent to the server as a GET; a watch's stream is dropped at
//! once (its set-up is what is fuzzed).
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use jobset_apiserver::rbac::RequestInfo;
use jobset_fuzz::{server, verbose};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

/// Bytes a URI may hold as they are (RFC 3986's unreserved and reserved characters, and `%`);
/// any other is percent-encoded, so that every input makes a request.
fn uri_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.splitn(3, '\n');
    let first = lines.next().unwrap_or_default();
    let query = lines.next().unwrap_or_default();
    let accept = lines.next().unwrap_or_default();
    let (method, path) = first.split_once(' ').unwrap_or(("GET", first));
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return };
    let Ok(info) = RequestInfo::parse(&method, path, Some(query)) else { return };
    let _ = info.combined_resource();
    let collection_get = method == Method::GET
        && info.is_resource_request
        && matches!(info.verb.as_str(), "list" | "watch")
        && info.subresource.is_empty();
    if !collection_get {
        return;
    }
    let uri = format!("{}?{}", uri_safe(path), uri_safe(query));
    let mut request = Request::builder().method(Method::GET).uri(uri);
    if !accept.is_empty() {
        request = request.header(http::header::ACCEPT, accept);
    }
    let Ok(request) = request.body(Body::empty()) else { return };
    let response = runtime().block_on(server().router().oneshot(request)).expect("the router is infallible");
    verbose(|| format!("{path}?{query}: {}", response.status()));
    assert_ne!(response.status(), StatusCode::INTERNAL_SERVER_ERROR, "{first}?{query}");
});
