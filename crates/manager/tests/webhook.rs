//! The manager's webhook server against the in-process embedded API server: internal
//! certificate management (the Secret, the CA bundle in the webhook configurations, rotation of
//! a bad Secret, replicas racing), AdmissionReviews posted over TLS trusting the Secret's CA, and
//! certificates from a cert dir. Tests wait through watches and timeouts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use jobset_apiserver::ApiServer;
use jobset_manager::certs::{self, CertConfig, MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION};
use jobset_manager::webhook::{Certificates, MUTATE_APPWRAPPER, MUTATE_JOBSET, VALIDATE_JOBSET, WebhookServer};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const NAMESPACE: &str = "jobset-system";
const SERVICE: &str = "jobset-webhook-service";
const SECRET: &str = "jobset-webhook-server-cert";
const DNS_NAME: &str = "jobset-webhook-service.jobset-system.svc";
/// A bound for what must happen.
const WAIT: Duration = Duration::from_secs(20);

async fn cluster() -> (Arc<ApiServer>, Client) {
    let server = ApiServer::in_memory();
    let client = server.client();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create the namespace");
    (server, client)
}

/// The two configurations as shipped: webhooks calling the service, no CA bundle yet.
async fn configurations(client: &Client) {
    let hook = |name: &str, path: &str, resource: &str| {
        json!({
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": path}},
            "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["CREATE"], "resources": [resource]}],
        })
    };
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": MUTATING_CONFIGURATION},
        "webhooks": [hook("mjobset.kb.io", MUTATE_JOBSET, "jobsets"), hook("mpod.kb.io", "/mutate--v1-pod", "pods")],
    }))
    .unwrap();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": VALIDATING_CONFIGURATION},
        "webhooks": [hook("vjobset.kb.io", VALIDATE_JOBSET, "jobsets")],
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&pp, &mutating).await.expect("mutating");
    Api::<ValidatingWebhookConfiguration>::all(client.clone()).create(&pp, &validating).await.expect("validating");
}

fn cert_config() -> CertConfig {
    CertConfig::new(NAMESPACE, SERVICE, SECRET)
}

/// Starts a webhook server on a free loopback port; it runs until the test ends.
fn start(client: &Client, certs: Certificates) -> (SocketAddr, tokio::sync::watch::Receiver<bool>) {
    let server = WebhookServer::bind("127.0.0.1:0".parse().unwrap(), client.clone(), Default::default(), certs)
        .expect("the webhook server binds");
    let addr = server.local_addr().unwrap();
    let ready = server.ready();
    tokio::spawn(server.serve(axum_server::Handle::new()));
    (addr, ready)
}

async fn until_ready(ready: &mut tokio::sync::watch::Receiver<bool>) {
    timeout(WAIT, ready.wait_for(|r| *r)).await.expect("the webhook server becomes ready in time").unwrap();
}

async fn secret(client: &Client) -> Secret {
    Api::<Secret>::namespaced(client.clone(), NAMESPACE).get(SECRET).await.expect("the Secret exists")
}

fn key<'a>(s: &'a Secret, k: &str) -> &'a [u8] {
    s.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.as_slice()).unwrap_or_default()
}

/// A TLS connection to `addr` for `DNS_NAME`, trusting only `ca_pem`.
async fn connect(addr: SocketAddr, ca_pem: &[u8]) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(DNS_NAME).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("a TLS handshake the CA vouches for")
}

/// The certificate the server presents.
async fn served_cert(addr: SocketAddr, ca_pem: &[u8]) -> Vec<u8> {
    let tls = connect(addr, ca_pem).await;
    tls.get_ref().1.peer_certificates().expect("a server certificate")[0].to_vec()
}

fn der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}

/// POSTs an AdmissionReview for `request` to `path`; the review's `response`.
async fn review(addr: SocketAddr, ca_pem: &[u8], path: &str, request: Value) -> Value {
    let body = serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )
    .unwrap();
    let mut tls = connect(addr, ca_pem).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {DNS_NAME}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let (_, body) = text.split_once("\r\n\r\n").expect("a body");
    let review: Value = serde_json::from_str(body).unwrap();
    assert_eq!((&review["apiVersion"], &review["kind"]), (&json!("admission.k8s.io/v1"), &json!("AdmissionReview")));
    review["response"].clone()
}

fn bundles(config: &Value) -> Vec<String> {
    config["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["clientConfig"]["caBundle"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn configuration_bundles(client: &Client) -> (Vec<String>, Vec<String>) {
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone()).get(MUTATING_CONFIGURATION).await.unwrap();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get(VALIDATING_CONFIGURATION).await.unwrap();
    (bundles(&serde_json::to_value(m).unwrap()), bundles(&serde_json::to_value(v).unwrap()))
}

fn jobset(spec: Value) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "default"}, "spec": spec})
}

fn rjob(name: &str) -> Value {
    json!({"name": name, "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}})
}

#[tokio::test]
async fn internal_certificates_are_created_injected_and_serve_admission_reviews_over_tls() {
    let (_server, client) = cluster().await;
    configurations(&client).await;
    let (addr, mut ready) = start(&client, Certificates::Internal(cert_config()));
    until_ready(&mut ready).await;

    // The Secret holds cert-controller's four keys, and the configurations every webhook's CA.
    let s = secret(&client).await;
    let ca = key(&s, certs::CA_CERT).to_vec();
    let now = std::time::SystemTime::now();
    certs::ca_valid(&ca, key(&s, certs::CA_KEY), now).expect("a valid CA");
    certs::serving_valid(&ca, key(&s, certs::TLS_CERT), key(&s, certs::TLS_KEY), DNS_NAME, now)
        .expect("a valid serving cert");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&ca);
    assert_eq!(configuration_bundles(&client).await, (vec![b64.clone(), b64.clone()], vec![b64]));
    assert_eq!(
        served_cert(addr, &ca).await,
        der(key(&s, certs::TLS_CERT)),
        "the server presents the Secret's certificate"
    );

    // An invalid JobSet: upstream's 422, delivered as controller-runtime delivers an API Status.
    let mut first = rjob("a");
    first["dependsOn"] = json!([{"name": "a", "status": "Ready"}]);
    let invalid = jobset(json!({"replicatedJobs": [first]}));
    let denied =
        review(addr, &ca, VALIDATE_JOBSET, json!({"uid": "u-1", "operation": "CREATE", "object": invalid})).await;
    assert_eq!(denied["uid"], "u-1");
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["code"], 422);
    assert_eq!(denied["status"]["reason"], "Invalid");
    assert_eq!(
        denied["status"]["message"],
        "JobSet.jobset.x-k8s.io \"js\" is invalid: <nil>: Internal error: DependsOn can't be set for the first ReplicatedJob"
    );

    // Defaulting: a JSON patch that gives upstream's defaults.
    let bare = jobset(json!({"replicatedJobs": [rjob("w")]}));
    let patched = review(addr, &ca, MUTATE_JOBSET, json!({"uid": "u-2", "operation": "CREATE", "object": bare})).await;
    assert_eq!((&patched["allowed"], &patched["patchType"]), (&json!(true), &json!("JSONPatch")));
    let ops = base64::engine::general_purpose::STANDARD.decode(patched["patch"].as_str().unwrap()).unwrap();
    let mut defaulted = bare.clone();
    json_patch::patch(&mut defaulted, &serde_json::from_slice::<json_patch::Patch>(&ops).unwrap()).unwrap();
    assert_eq!(defaulted["spec"]["successPolicy"], json!({"operator": "All"}));
    assert_eq!(defaulted["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"], "Indexed");

    // AppWrappers are labelled with the requesting user.
    let aw = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "metadata": {"name": "aw"}, "spec": {"components": []}});
    let user = json!({"username": "alice", "uid": "42"});
    let labelled = review(
        addr,
        &ca,
        MUTATE_APPWRAPPER,
        json!({"uid": "u-3", "operation": "CREATE", "userInfo": user, "object": aw}),
    )
    .await;
    let ops = base64::engine::general_purpose::STANDARD.decode(labelled["patch"].as_str().unwrap()).unwrap();
    let ops: Value = serde_json::from_slice(&ops).unwrap();
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"workload.codeflare.dev/user": "alice", "workload.codeflare.dev/userid": "42"}}])
    );
}

#[tokio::test]
async fn replicas_racing_to_create_the_secret_serve_the_one_certificate_it_holds() {
    let (_server, client) = cluster().await;
    configurations(&client).await;
    let (a, mut ready_a) = start(&client, Certificates::Internal(cert_config()));
    let (b, mut ready_b) = start(&client, Certificates::Internal(cert_config()));
    until_ready(&mut ready_a).await;
    until_ready(&mut ready_b).await;
    let s = secret(&client).await;
    let ca = key(&s, certs::CA_CERT);
    let tls = der(key(&s, certs::TLS_CERT));
    assert_eq!(served_cert(a, ca).await, tls);
    assert_eq!(served_cert(b, ca).await, tls);
}

#[tokio::test]
async fn a_secret_overwritten_with_garbage_gets_a_new_ca_which_is_served_and_injected() {
    let (_server, client) = cluster().await;
    configurations(&client).await;
    let (addr, mut ready) = start(&client, Certificates::Internal(cert_config()));
    until_ready(&mut ready).await;
    let old = secret(&client).await;

    let mut broken = old.clone();
    broken.data.as_mut().unwrap().insert(certs::CA_CERT.into(), ByteString(b"garbage".to_vec()));
    let secrets = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    secrets.replace(SECRET, &PostParams::default(), &broken).await.expect("overwrite the Secret");

    // The rotation injects the new CA after it serves the new certificate: wait for that.
    let configs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let old_bundle = base64::engine::general_purpose::STANDARD.encode(key(&old, certs::CA_CERT));
    let renewed = move |c: Option<&ValidatingWebhookConfiguration>| {
        let v = serde_json::to_value(c).unwrap_or_default();
        v["webhooks"].is_array() && bundles(&v).iter().all(|b| !b.is_empty() && *b != old_bundle)
    };
    timeout(WAIT, await_condition(configs, VALIDATING_CONFIGURATION, renewed))
        .await
        .expect("the new CA is injected in time")
        .unwrap();
    let new = secret(&client).await;
    let ca = key(&new, certs::CA_CERT);
    assert_ne!(ca, key(&old, certs::CA_CERT));
    assert_eq!(served_cert(addr, ca).await, der(key(&new, certs::TLS_CERT)));
}

#[tokio::test]
async fn without_internal_management_the_cert_dir_is_served_and_reloaded_when_it_changes() {
    let (_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    let first = certs::generate(&certs::Plan::Create, None, &cert_config(), now).unwrap();
    let write = |b: &certs::Bundle| {
        std::fs::write(dir.path().join("tls.crt"), &b.tls_cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), &b.tls_key).unwrap();
    };
    write(&first);
    let poll = Duration::from_millis(50);
    let (addr, ready) = start(&client, Certificates::Dir { dir: dir.path().to_path_buf(), poll });
    assert!(*ready.borrow(), "ready as soon as the files are read");
    assert_eq!(served_cert(addr, &first.ca_cert).await, der(&first.tls_cert));

    // A renewal by cert-manager (same CA): served once the files are read again.
    let second =
        certs::generate(&certs::Plan::RenewServing { why: String::new() }, Some(&first), &cert_config(), now).unwrap();
    write(&second);
    let reloaded = async {
        while served_cert(addr, &first.ca_cert).await != der(&second.tls_cert) {
            tokio::time::sleep(poll).await;
        }
    };
    timeout(WAIT, reloaded).await.expect("the new certificate is served in time");
}

#[tokio::test]
async fn a_cert_dir_without_certificates_is_an_error_naming_it() {
    let (_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::Dir { dir: dir.path().to_path_buf(), poll: Duration::from_secs(1) };
    let e =
        WebhookServer::bind("127.0.0.1:0".parse().unwrap(), client, Default::default(), certs).err().expect("an error");
    assert!(e.to_string().starts_with(&format!("webhook.certDir: reading {}/tls.crt", dir.path().display())), "{e}");
}

#[tokio::test]
async fn certificate_management_that_cannot_reach_the_secret_retries_and_is_ready_once_it_can() {
    let (server, _) = cluster().await;
    // A client whose Secret requests fail while `cut` holds.
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let inner = server.client();
    let flag = cut.clone();
    let client = Client::new(
        tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (inner, refused) = (
                inner.clone(),
                flag.load(std::sync::atomic::Ordering::SeqCst) && req.uri().path().contains("/secrets"),
            );
            async move {
                match refused {
                    true => Err(kube::Error::Service("injected failure".into())),
                    false => inner.send(req).await,
                }
            }
        }),
        "default",
    );
    let mut config = cert_config();
    config.rotation.retry_period = Duration::from_millis(100);
    let (_, mut ready) = start(&client, Certificates::Internal(config));
    // Many retry periods without the Secret: not ready (the absence is a timeout that elapses).
    assert!(timeout(Duration::from_secs(1), ready.wait_for(|r| *r)).await.is_err(), "ready without a certificate");
    cut.store(false, std::sync::atomic::Ordering::SeqCst);
    until_ready(&mut ready).await;
    let s = secret(&server.client()).await;
    certs::ca_valid(key(&s, certs::CA_CERT), key(&s, certs::CA_KEY), std::time::SystemTime::now()).expect("a valid CA");
}

/// Pod `index` of Job `js-w-0` (uid `job-uid`) of a JobSet exclusive on racks.
fn exclusive_pod(name: &str, index: &str) -> Value {
    use jobset_api::jobset::keys::{EXCLUSIVE_TOPOLOGY, JOB_INDEX, JOB_KEY, JOBSET_NAME, REPLICATED_JOB_NAME};
    let labels = json!({JOBSET_NAME: "js", REPLICATED_JOB_NAME: "w", JOB_INDEX: "0", JOB_KEY: "k0"});
    let mut annotations = labels.clone();
    annotations[EXCLUSIVE_TOPOLOGY] = json!("example.com/rack");
    annotations["batch.kubernetes.io/job-completion-index"] = json!(index);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-w-0", "uid": "job-uid", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "priority": 0},
    })
}

#[tokio::test]
async fn the_pod_webhooks_find_the_leader_and_its_node_through_the_api_server() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    let (_server, client) = cluster().await;
    let (addr, mut ready) = start(&client, Certificates::Internal(cert_config()));
    until_ready(&mut ready).await;
    let ca = key(&secret(&client).await, certs::CA_CERT).to_vec();
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"example.com/rack": "r7"}}})).unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let leader: Pod = serde_json::from_value(exclusive_pod("js-w-0-0-abcde", "0")).unwrap();
    pods.create(&PostParams::default(), &leader).await.unwrap();
    let follower = exclusive_pod("js-w-0-1-fghij", "1");
    let create = |object: &Value| json!({"uid": "u", "operation": "CREATE", "object": object});
    let patched = |answer: &Value| {
        assert_eq!(answer["allowed"], true, "{answer}");
        let ops = base64::engine::general_purpose::STANDARD.decode(answer["patch"].as_str().unwrap()).unwrap();
        let mut p = follower.clone();
        json_patch::patch(&mut p, &serde_json::from_slice::<json_patch::Patch>(&ops).unwrap()).unwrap();
        p
    };

    // The leader is not scheduled: the follower is only labelled, then refused.
    let unpinned = patched(&review(addr, &ca, "/mutate--v1-pod", create(&follower)).await);
    assert_eq!(unpinned["metadata"]["labels"]["jobset.sigs.k8s.io/priority"], "0");
    assert_eq!(unpinned["spec"].get("nodeSelector"), None);
    let refused = review(addr, &ca, "/validate--v1-pod", create(&unpinned)).await;
    assert_eq!((&refused["allowed"], &refused["status"]["code"]), (&json!(false), &json!(403)));
    assert_eq!(refused["status"]["message"], "follower pod node selector not set");

    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "js-w-0-0-abcde"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    pods.create_subresource::<_, Value>("binding", "js-w-0-0-abcde", &PostParams::default(), &binding).await.unwrap();
    let pinned = patched(&review(addr, &ca, "/mutate--v1-pod", create(&follower)).await);
    assert_eq!(pinned["spec"]["nodeSelector"], json!({"example.com/rack": "r7"}));
    let admitted = review(addr, &ca, "/validate--v1-pod", create(&pinned)).await;
    assert_eq!(admitted["allowed"], true, "{admitted}");
}
