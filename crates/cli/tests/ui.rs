//! `jobset up` serves the web view at /ui on its HTTPS port, behind the server's token, and
//! prints its address.

mod common;

use std::time::Duration;

use http::{Request, StatusCode, header};
use kube::client::Body;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long anything may take (start-up, a request).
const WAIT: Duration = Duration::from_secs(60);
const WEB_UI: &str = "web UI: ";

/// A client for the server of `kubeconfig`, holding its token or none.
async fn client(kubeconfig: &std::path::Path, with_token: bool) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("kubeconfig loads");
    if !with_token {
        config.auth_info = Default::default();
    }
    kube::Client::try_from(config).expect("client")
}

async fn send(client: &kube::Client, req: Request<Vec<u8>>) -> (StatusCode, http::HeaderMap, String) {
    let res =
        tokio::time::timeout(WAIT, client.send(req.map(Body::from))).await.expect("answered in time").expect("sent");
    let (parts, body) = res.into_parts();
    let bytes = tokio::time::timeout(WAIT, body.collect_bytes()).await.expect("body in time").expect("body");
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

fn get(path: &str) -> Request<Vec<u8>> {
    Request::get(path).body(Vec::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_up_serves_the_web_view_behind_its_token_and_prints_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::command(dir.path(), 0, &["--nodes", "0"]).spawn().expect("spawn jobset up");
    let (stderr, _drained) = common::drain_stderr(&mut child);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (port, ui_url) = tokio::time::timeout(WAIT, async {
        let mut port = None;
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Some(rest) = line.strip_prefix(common::LISTENING) {
                port = Some(rest.trim().parse::<u16>().expect("port in the listening line"));
            }
            if let Some(url) = line.strip_prefix(WEB_UI) {
                return (port.expect("the listening line comes first"), url.to_string());
            }
        }
        panic!("jobset up printed no `{WEB_UI}` line; stderr:\n{}", stderr.lock().unwrap());
    })
    .await
    .expect("jobset up started in time");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    // The address is the login page with the server's own token in the fragment.
    let kubeconfig = dir.path().join("kubeconfig");
    let token = std::fs::read_to_string(dir.path().join("token")).expect("the server's token file");
    let token = token.trim();
    assert_eq!(ui_url, format!("https://127.0.0.1:{port}/ui/login#token={token}"));

    let anonymous = client(&kubeconfig, false).await;
    let admin = client(&kubeconfig, true).await;
    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "seen-by-the-ui", "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}],
        }}}}}]},
    });
    let create = Request::post("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets")
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&jobset).unwrap())
        .unwrap();
    let (status, _, body) = send(&admin, create).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // Without the token: the login page, and 401 with no data everywhere else.
    let (status, _, body) = send(&anonymous, get("/ui/login")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"<form id="login""#) && !body.contains("seen-by-the-ui"), "{body}");
    for path in ["/ui/", "/ui/api/overview", "/ui/jobsets/default/seen-by-the-ui", "/ui/events"] {
        let (status, _, body) = send(&anonymous, get(path)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(!body.contains("seen-by-the-ui"), "{path}: {body}");
    }
    // The API's own authentication is unchanged.
    let (status, _, _) = send(&anonymous, get("/apis/jobset.x-k8s.io/v1alpha2/jobsets")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // With it, by bearer header or by the cookie a login sets.
    let (status, _, body) = send(&admin, get("/ui/api/overview")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#""name":"seen-by-the-ui""#), "{body}");
    let login = Request::post("/ui/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2Fui%2F").into_bytes())
        .unwrap();
    let (status, headers, _) = send(&anonymous, login).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/ui"),
        "{cookie}"
    );
    let (name_value, _) = cookie.split_once(';').unwrap();
    let page = Request::get("/ui/").header(header::COOKIE, name_value).body(Vec::new()).unwrap();
    let (status, _, body) = send(&anonymous, page).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"data-jobset="default/seen-by-the-ui""#), "{body}");
    child.kill().await.expect("stop jobset up");
    assert!(!stderr.lock().unwrap().contains("panicked"));
}
