//! Who may see the web view: the login page and its form (no cluster data), the cookie it
//! sets, and the check every data route makes.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;

use super::{BASE, Ui, views};

/// Whether a token may see the cluster. It is given the token a request presents, and should
/// compare it in constant time (`jobset up`: the API server's admin token).
pub type Authenticator = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The cookie holding the token after a login (HttpOnly, so page scripts cannot read it).
pub const COOKIE: &str = "jobset-ui-token";

/// The value of a cookie named `name`, from every `Cookie` header of a request.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

/// The token a request presents: an `Authorization: Bearer` header, else the login cookie.
fn presented(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim_start())
    });
    bearer.or_else(|| cookie(headers, COOKIE))
}

/// Whether a path is a page a person opens (answered, without a token, by the login page).
fn is_page(path: &str) -> bool {
    path == BASE || path == "/ui/" || path.starts_with("/ui/jobsets/")
}

/// Where a login may send the browser: a path of the web view, else its overview (never
/// another site: `//host`, a backslash or a scheme are refused).
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == BASE || n.starts_with("/ui/"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.chars().all(|c| c.is_ascii_graphic()) =>
        {
            n.to_string()
        }
        _ => format!("{BASE}/"),
    }
}

/// The middleware of the data routes: the request goes on only with a token the
/// authenticator accepts; otherwise 401 and no data (a page gets the login page).
pub async fn require(State(ui): State<Ui>, req: Request, next: Next) -> Response {
    if presented(req.headers()).is_some_and(|t| (ui.auth)(t)) {
        return next.run(req).await;
    }
    let challenge = [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))];
    let path = req.uri().path();
    if is_page(path) {
        (StatusCode::UNAUTHORIZED, challenge, Html(views::login(None, None).into_string())).into_response()
    } else {
        (StatusCode::UNAUTHORIZED, challenge, "401 Unauthorized: log in at /ui/login or send Authorization: Bearer\n")
            .into_response()
    }
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// `GET /ui/login`: the login page (no cluster data).
pub async fn login_page(Query(q): Query<NextQuery>) -> Html<String> {
    Html(views::login(Some(&safe_next(q.next.as_deref())), None).into_string())
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// Whether a token can be kept as a cookie value as it is (RFC 6265 cookie-octets).
fn cookie_safe(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'))
}

/// Whether a browser says the request comes from another site: `Sec-Fetch-Site` other than
/// `same-origin`, else an `Origin` that is not this server (`https://` + `Host`). A request
/// with neither (curl, a kube client) is no browser's and is not refused. The login and logout
/// forms change the browser's session, so another site must not submit them (login CSRF would
/// log the browser in as the attacker; a logout would end the user's session).
fn cross_site(headers: &HeaderMap) -> bool {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value("sec-fetch-site") {
        return site != "same-origin";
    }
    match (value("origin"), value("host")) {
        (Some(origin), Some(host)) => origin != format!("https://{host}"),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn refused() -> Response {
    (StatusCode::FORBIDDEN, "403 Forbidden: a cross-site request to the web view's login or logout\n").into_response()
}

/// `POST /ui/login`: with a token the authenticator accepts, the cookie and a redirect to
/// where the login came from; otherwise 401 and the login page again. 403 from another site.
pub async fn login(State(ui): State<Ui>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    if cross_site(&headers) {
        return refused();
    }
    let next = safe_next(form.next.as_deref());
    let token = form.token.trim();
    if !(ui.auth)(token) {
        return (
            StatusCode::UNAUTHORIZED,
            Html(views::login(Some(&next), Some("That token is not valid.")).into_string()),
        )
            .into_response();
    }
    if !cookie_safe(token) {
        let message = "This token cannot be kept in a cookie: send it as Authorization: Bearer instead.";
        return (StatusCode::BAD_REQUEST, Html(views::login(Some(&next), Some(message)).into_string())).into_response();
    }
    let cookie = format!("{COOKIE}={token}; Path={BASE}; HttpOnly; Secure; SameSite=Strict");
    let location = HeaderValue::from_str(&next).unwrap_or_else(|_| HeaderValue::from_static("/ui/"));
    match HeaderValue::from_str(&cookie) {
        Ok(cookie) => {
            (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, location)]).into_response()
        }
        Err(_) => StatusCode::BAD_REQUEST.into_response(),
    }
}

/// `POST /ui/logout`: forgets the cookie, back to the login page. 403 from another site.
pub async fn logout(headers: HeaderMap) -> Response {
    if cross_site(&headers) {
        return refused();
    }
    let cookie = format!("{COOKIE}=; Path={BASE}; HttpOnly; Secure; SameSite=Strict; Max-Age=0");
    let cookie = HeaderValue::from_str(&cookie).expect("a constant cookie is a valid header");
    (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, HeaderValue::from_static("/ui/login"))])
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_returns_only_to_a_path_of_the_web_view() {
        for (next, to) in [
            (Some("/ui/jobsets/ns/a"), "/ui/jobsets/ns/a"),
            (Some("/ui"), "/ui"),
            (Some("/ui/?x=1"), "/ui/?x=1"),
            (None, "/ui/"),
            (Some("https://evil.example/ui/"), "/ui/"),
            (Some("//evil.example/ui/"), "/ui/"),
            (Some("/ui//evil.example"), "/ui/"),
            (Some("/ui/\\evil"), "/ui/"),
            (Some("/uix"), "/ui/"),
            (Some("/api/v1/pods"), "/ui/"),
            (Some("/ui/a b"), "/ui/"),
            (Some("/ui/\r\nSet-Cookie: x"), "/ui/"),
        ] {
            assert_eq!(safe_next(next), to, "{next:?}");
        }
    }

    #[test]
    fn the_token_is_read_from_the_bearer_header_first_then_the_cookie() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let both = headers(&[("authorization", "Bearer b1"), ("cookie", "jobset-ui-token=c1")]);
        assert_eq!(presented(&both), Some("b1"));
        assert_eq!(presented(&headers(&[("authorization", "bearer  b2")])), Some("b2"), "scheme case-insensitive");
        assert_eq!(presented(&headers(&[("cookie", "a=1; jobset-ui-token=c2; b=2")])), Some("c2"));
        assert_eq!(presented(&headers(&[("cookie", "a=1"), ("cookie", "jobset-ui-token=c3")])), Some("c3"));
        assert_eq!(presented(&headers(&[("cookie", "xjobset-ui-token=c4")])), None);
        assert_eq!(presented(&headers(&[("authorization", "Basic Zm9vOmJhcg==")])), None);
        assert_eq!(presented(&HeaderMap::new()), None);
    }

    #[test]
    fn a_login_or_logout_from_another_site_is_told_by_fetch_metadata_or_origin() {
        type Headers = &'static [(&'static str, &'static str)];
        let cases: [(&str, Headers, bool); 8] = [
            (
                "the page's own form",
                &[("sec-fetch-site", "same-origin"), ("origin", "https://127.0.0.1:6443"), ("host", "127.0.0.1:6443")],
                false,
            ),
            (
                "another site's form",
                &[("sec-fetch-site", "cross-site"), ("origin", "https://evil.example"), ("host", "127.0.0.1:6443")],
                true,
            ),
            ("a sibling site", &[("sec-fetch-site", "same-site")], true),
            (
                "fetch metadata first",
                &[("sec-fetch-site", "cross-site"), ("origin", "https://127.0.0.1:6443"), ("host", "127.0.0.1:6443")],
                true,
            ),
            (
                "no fetch metadata, own origin",
                &[("origin", "https://127.0.0.1:6443"), ("host", "127.0.0.1:6443")],
                false,
            ),
            (
                "no fetch metadata, other origin",
                &[("origin", "https://evil.example"), ("host", "127.0.0.1:6443")],
                true,
            ),
            ("an opaque origin", &[("origin", "null"), ("host", "127.0.0.1:6443")], true),
            ("no browser (curl)", &[("host", "127.0.0.1:6443")], false),
        ];
        for (what, pairs, want) in cases {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_str(v).unwrap());
            }
            assert_eq!(cross_site(&h), want, "{what}");
        }
    }

    #[test]
    fn only_cookie_octets_are_kept_in_the_cookie() {
        assert!(cookie_safe("aZ09-_=."));
        for bad in ["", "a b", "a;b", "a,b", "a\"b", "a\\b", "é"] {
            assert!(!cookie_safe(bad), "{bad:?}");
        }
    }
}
