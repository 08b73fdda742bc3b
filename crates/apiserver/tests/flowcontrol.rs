//! API Priority and Fairness through a real server: a flood from one service account fills its
//! own priority level (`workload-low`: its seats, its flow's queues, then 429s) while a
//! controller's request (`kube-controller-manager` → `workload-high`) is served before every
//! queued request of the flood; with APF off, the same flood takes the in-flight limit's every
//! slot and the controller's request is refused and has to wait. Requests are held in flight by
//! not reading their response bodies (the seat is held until the body has been sent).

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use common::{fast_config, server_with};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use jobset_apiserver::flowcontrol::{self, FLOW_SCHEMA_UID_HEADER, PRIORITY_LEVEL_UID_HEADER, Requester};
use jobset_apiserver::http::TOO_MANY_REQUESTS_MESSAGE;
use jobset_apiserver::rbac::UserInfo;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::json;
use tower::ServiceExt;

const FLOOD: usize = 2_000;
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// 29 + 20 = 49 seats with APF: `workload-low` gets 20, `workload-high` 8.
fn config(apf: bool) -> ServerConfig {
    ServerConfig {
        max_requests_inflight: Some(29),
        max_mutating_requests_inflight: Some(20),
        enable_priority_and_fairness: apf,
        priority_and_fairness_wait_limit: Duration::from_secs(120),
        retry_after_seconds: 1,
        ..fast_config()
    }
}

/// A GET of `uri` sent to the router as `user`.
async fn get_as(server: &Arc<ApiServer>, user: &UserInfo, uri: &str) -> Response<Body> {
    let mut req = Request::builder().method(Method::GET).uri(uri).body(Body::empty()).unwrap();
    req.extensions_mut().insert(Requester(Arc::new(user.clone())));
    server.router().oneshot(req).await.unwrap()
}

/// The flood: `FLOOD` concurrent GETs from one service account. Returns the responses as they
/// come (bodies unread), once `immediate` of them have come (the others are queued).
async fn flood(
    server: &Arc<ApiServer>,
    immediate: usize,
) -> (Vec<Response<Body>>, tokio::sync::mpsc::UnboundedReceiver<Response<Body>>) {
    let agent = flowcontrol::service_account("default", "agent");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..FLOOD {
        let (server, agent, tx) = (server.clone(), agent.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(get_as(&server, &agent, CONFIGMAPS).await);
        });
    }
    let mut got = Vec::with_capacity(immediate);
    tokio::time::timeout(Duration::from_secs(60), async {
        while got.len() < immediate {
            got.push(rx.recv().await.expect("the flood's tasks hold the sender"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} of the flood's {immediate} immediate answers came", got.len()));
    (got, rx)
}

fn split(responses: Vec<Response<Body>>) -> (Vec<Response<Body>>, Vec<Response<Body>>) {
    responses.into_iter().partition(|r| r.status() == StatusCode::OK)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_apf_a_service_account_flood_does_not_delay_the_controller_managers_requests() {
    let server = server_with(config(true), Admission::default());
    // workload-low: 20 seats; the flow's hand of 6 queues × 50 hold 300; the rest are refused.
    let (answered, mut rest) = flood(&server, FLOOD - 300).await;
    let (held, refused) = split(answered);
    assert_eq!((held.len(), refused.len()), (20, FLOOD - 320));
    assert_eq!((server.flowcontrol.executing("workload-low"), server.flowcontrol.waiting("workload-low")), (20, 300));
    let r = &refused[0];
    assert_eq!(r.headers().get(header::RETRY_AFTER).unwrap(), "1");
    assert_eq!(
        r.headers().get(PRIORITY_LEVEL_UID_HEADER).unwrap().to_str().unwrap(),
        flowcontrol::priority_level_uid("workload-low").unwrap()
    );
    let body = refused.into_iter().next().unwrap().into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, TOO_MANY_REQUESTS_MESSAGE);

    // The controller manager lists and writes through its own level, while the flood's 300
    // queued requests are all still waiting: it was served before every one of them.
    let kcm = server.client_as(flowcontrol::kube_controller_manager());
    let configmaps: Api<ConfigMap> = Api::default_namespaced(kcm);
    let served = tokio::time::timeout(Duration::from_secs(30), async {
        configmaps.list(&ListParams::default()).await.unwrap();
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "from-kcm"}})).unwrap();
        configmaps.create(&Default::default(), &cm).await.unwrap();
    })
    .await;
    assert!(served.is_ok(), "the controller manager's requests waited behind the flood");
    assert_eq!(server.flowcontrol.waiting("workload-low"), 300, "the controller went before all 300 queued");
    assert_eq!(server.requests.rejected(), (FLOOD - 320) as u64, "the controller was never refused");
    let list = get_as(&server, &flowcontrol::kube_controller_manager(), CONFIGMAPS).await;
    assert_eq!(
        list.headers().get(FLOW_SCHEMA_UID_HEADER).unwrap().to_str().unwrap(),
        flowcontrol::flow_schema_uid("kube-controller-manager").unwrap()
    );

    // Nothing queued is lost: each freed seat serves the next, until all 300 are answered 200.
    drop(held);
    let mut drained = 0;
    tokio::time::timeout(Duration::from_secs(60), async {
        while drained < 300 {
            let r = rest.recv().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            drained += 1;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{drained} of the 300 queued requests were served"));
    assert_eq!((server.flowcontrol.executing("workload-low"), server.flowcontrol.waiting("workload-low")), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_apf_the_same_flood_takes_every_slot_and_the_controller_waits_for_it() {
    let server = server_with(config(false), Admission::default());
    // The read-only in-flight limit: 29 served (held), the rest refused; nothing queues.
    let (answered, _rest) = flood(&server, FLOOD).await;
    let (held, refused) = split(answered);
    assert_eq!((held.len(), refused.len()), (29, FLOOD - 29));

    // The controller manager's list is refused while the flood holds the slots, and its
    // client waits `Retry-After` before it tries again.
    let kcm = server.client_as(flowcontrol::kube_controller_manager());
    let listing =
        tokio::spawn(async move { Api::<ConfigMap>::default_namespaced(kcm).list(&ListParams::default()).await });
    tokio::time::timeout(Duration::from_secs(20), async {
        while server.requests.rejected() < FLOOD as u64 - 28 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the controller's list is refused");
    assert!(!listing.is_finished());
    drop(held);
    tokio::time::timeout(Duration::from_secs(20), listing).await.unwrap().unwrap().expect("served once a slot is free");
    // No priority-and-fairness headers without APF.
    let r = get_as(&server, &flowcontrol::kube_controller_manager(), CONFIGMAPS).await;
    assert!(r.headers().get(FLOW_SCHEMA_UID_HEADER).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_gives_its_seat_back_once_established_and_the_admin_is_exempt() {
    // 1 + 1 seats: every limited level has one.
    let cfg = ServerConfig { max_requests_inflight: Some(1), max_mutating_requests_inflight: Some(1), ..config(true) };
    let server = server_with(cfg, Admission::default());
    let agent = flowcontrol::service_account("default", "agent");
    let watch = get_as(&server, &agent, &format!("{CONFIGMAPS}?watch=true&timeoutSeconds=30")).await;
    assert_eq!(watch.status(), StatusCode::OK);
    assert_eq!(server.flowcontrol.executing("workload-low"), 0, "an established watch holds no seat");
    let held = get_as(&server, &agent, CONFIGMAPS).await;
    assert_eq!(server.flowcontrol.executing("workload-low"), 1);
    // The admin's requests (system:masters) are exempt: never queued behind anyone.
    let mut admin = Vec::new();
    for _ in 0..10 {
        let r = server.router().oneshot(Request::get(CONFIGMAPS).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers().get(PRIORITY_LEVEL_UID_HEADER).unwrap().to_str().unwrap(),
            flowcontrol::priority_level_uid("exempt").unwrap()
        );
        admin.push(r);
    }
    drop((held, watch));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlimited_server_only_classifies() {
    let cfg = ServerConfig { max_requests_inflight: None, max_mutating_requests_inflight: None, ..config(true) };
    let server = server_with(cfg, Admission::default());
    let agent = flowcontrol::service_account("default", "agent");
    let mut held = Vec::new();
    for _ in 0..500 {
        let r = get_as(&server, &agent, CONFIGMAPS).await;
        assert_eq!(r.status(), StatusCode::OK);
        held.push(r);
    }
    assert_eq!(server.requests.rejected(), 0);
    assert!(held[0].headers().get(FLOW_SCHEMA_UID_HEADER).is_some());
}

/// Over HTTPS, a service-account token's requests are classified by its user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_is_classified_as_service_accounts() {
    let server = server_with(config(true), Admission::default());
    let dir = tempfile::tempdir().unwrap();
    let creds = jobset_apiserver::tls::load_or_create(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let tls = jobset_apiserver::tls::server_config(&creds).unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(jobset_apiserver::serve::serve_https(server.clone(), listener, tls, creds.token.clone(), async {
        let _ = stopped.await;
    }));
    let admin = server.client();
    for obj in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent", "namespace": "default"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "read"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "read"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "default"}]}),
    ] {
        common::create(&admin, obj).await.unwrap();
    }
    let token = server.issue_service_account_token("default", "agent", None).unwrap();
    let creds = jobset_apiserver::tls::Credentials { token, ..creds };
    let kc = kube::config::Kubeconfig::from_yaml(&jobset_apiserver::tls::kubeconfig_yaml(&url, &creds, "t")).unwrap();
    let client =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let resp = client.send(Request::get(CONFIGMAPS).body(kube::client::Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let h = |name: &str| resp.headers().get(name).unwrap().to_str().unwrap().to_string();
    assert_eq!(h(FLOW_SCHEMA_UID_HEADER), flowcontrol::flow_schema_uid("service-accounts").unwrap());
    assert_eq!(h(PRIORITY_LEVEL_UID_HEADER), flowcontrol::priority_level_uid("workload-low").unwrap());
}

/// In-process clients record each request's latency, as they see it, by their user's class.
#[tokio::test]
async fn in_process_clients_record_their_latency_by_class() {
    let server = server_with(fast_config(), Admission::default());
    let latency = |class| server.flowcontrol.latency.snapshot(class).count();
    let kcm: Api<ConfigMap> = Api::default_namespaced(server.client_as(flowcontrol::kube_controller_manager()));
    let node: Api<ConfigMap> = Api::default_namespaced(server.client_as(flowcontrol::node("n")));
    for _ in 0..10 {
        kcm.list(&ListParams::default()).await.unwrap();
    }
    node.list(&ListParams::default()).await.unwrap();
    Api::<ConfigMap>::default_namespaced(server.client()).list(&ListParams::default()).await.unwrap();
    use flowcontrol::UserClass::*;
    assert_eq!([latency(Controllers), latency(Nodes), latency(ServiceAccounts), latency(Other)], [10, 1, 0, 0]);
}
