//! Two processes, as on a real cluster (`common::pair`): `jobset up --external-controllers
//! jobset,appwrapper` plays a cluster with no JobSet installed (API server, Job controller,
//! scheduler, nodes), and `jobset manager` runs the JobSet and AppWrapper controllers and
//! webhooks in an OS process of its own, over HTTPS, with the identity of the ServiceAccount
//! that config/rbac/ binds to the shipped ClusterRole (the embedded server enforces RBAC for it).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pair::*;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The uids of the Jobs seen, by (Job name, restart attempt): one each, or a Job was created
/// twice for one attempt.
type JobsSeen = Arc<Mutex<std::collections::BTreeMap<(String, String), Vec<String>>>>;

/// Records every Job of JobSet `jobset`.
fn record_jobs(client: kube::Client, jobset: &str) -> JobsSeen {
    let seen = JobsSeen::default();
    let api: Api<Job> = Api::namespaced(client, "default");
    let cfg = watcher::Config::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    let recorder = seen.clone();
    tokio::spawn(async move {
        let mut jobs = std::pin::pin!(watcher(api, cfg).default_backoff().applied_objects());
        while let Some(Ok(j)) = jobs.next().await {
            let attempt = j.metadata.labels.as_ref().and_then(|l| l.get("jobset.sigs.k8s.io/restart-attempt")).cloned();
            let key = (j.metadata.name.clone().unwrap_or_default(), attempt.unwrap_or_default());
            let uid = j.metadata.uid.clone().unwrap_or_default();
            let mut seen = recorder.lock().unwrap();
            let uids = seen.entry(key).or_default();
            if !uids.contains(&uid) {
                uids.push(uid);
            }
        }
    });
    seen
}

fn assert_each_job_created_once(seen: &JobsSeen) {
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "no Job was seen");
    for ((name, attempt), uids) in seen.iter() {
        assert_eq!(uids.len(), 1, "Job {name} of restart attempt {attempt} was created {} times: {uids:?}", uids.len());
    }
}

const RESTART_JOBSET: &str = "examples/failure-policy/restart-jobset.yaml";

/// The README's main example (KEP-262's RestartJobSet story) ends through the pair as in local
/// mode: Completed after exactly 2 restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_runs_the_restart_jobset_example_to_the_same_end_as_local_mode() {
    let c = cluster().await;
    let m = c.manager("manager-a").await;
    c.lease_held_by("manager-a", WAIT).await;
    let kubeconfig = c.server.kubeconfig.to_string_lossy().into_owned();
    let file = format!("{REPO}/{RESTART_JOBSET}");
    let out = c.jobset_command(&["run", "--kubeconfig", &kubeconfig, &file, "--timeout", "60s"]).await;
    assert_eq!(out.code, 0, "{out:?}\nmanager:\n{}", m.stderr.lock().unwrap());
    assert!(out.stdout.contains("restart-jobset succeeded; restarts 2 (2 towards maxRestarts)"), "{out:?}");
    // The probes and metrics of a leader that has reconciled.
    assert_eq!(http_get(&format!("{}/healthz", m.health)).await.0, 200);
    assert_eq!(http_get(&format!("{}/readyz", m.health)).await.0, 200);
    let metrics = m.scrape().await;
    for series in [
        "jobset_completed_total{jobset_name=\"restart-jobset\",namespace=\"default\"} 1",
        "jobset_restarts_total{jobset_name=\"restart-jobset\",namespace=\"default\",action=\"RestartJobSet\",reason=\"BackoffLimitExceeded\"} 2",
        "leader_election_master_status{name=\"6d4f6a47.jobset.x-k8s.io\"} 1",
        "controller_runtime_reconcile_total{controller=\"jobset\",result=\"success\"} ",
        "process_resident_memory_bytes ",
    ] {
        assert!(metrics.contains(series), "{series} missing from the metrics:\n{metrics}");
    }
    m.kill().await;
}

/// Two managers; the leader is killed with SIGKILL in the middle of a restart. The standby has
/// not reconciled anything until then, takes over within the lease duration, and the JobSet ends
/// exactly as in a fault-free run: Completed, 2 restarts, no Job created twice for one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_from_a_killed_leader_mid_restart_and_the_jobset_ends_as_without_the_fault() {
    let c = cluster().await;
    let a = c.manager("manager-a").await;
    c.lease_held_by("manager-a", WAIT).await;
    let b = c.manager("manager-b").await;
    let jobs = record_jobs(c.admin().await, "restart-jobset");
    let out = apply(&c.server, &format!("{REPO}/{RESTART_JOBSET}")).await;
    assert_eq!(out.code, 0, "{out:?}");
    c.jobset_until("restart-jobset", "restarted once", |js| status_i64(js, "restarts") >= 1).await;
    assert_eq!(b.jobset_reconciles().await, 0, "the standby reconciled while manager-a led");
    assert!(a.jobset_reconciles().await > 0, "the leader has not reconciled");
    a.kill().await;
    let killed = Instant::now();
    let took_over = c.lease_held_by("manager-b", LEASE_DURATION + RENEW_DEADLINE + WAIT / 10).await;
    eprintln!("manager-b took over {:?} after manager-a was killed", took_over - killed);
    let js = c.jobset_until("restart-jobset", "Completed", |js| has_condition(js, "Completed")).await;
    assert_eq!(status_i64(&js, "restarts"), 2, "{js:?}");
    assert_eq!(status_i64(&js, "restartsCountTowardsMax"), 2, "{js:?}");
    assert!(b.jobset_reconciles().await > 0, "the new leader did not reconcile");
    assert_each_job_created_once(&jobs);
    b.kill().await;
}

/// A leader whose Lease another holder took (its renewal sees the new holder) stops at once: it
/// exits 1 saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_over_stops_and_exits() {
    let c = cluster().await;
    let mut a = c.manager("manager-a").await;
    c.lease_held_by("manager-a", WAIT).await;
    // Another holder takes the lease, as a replica whose clock ran ahead would.
    let api: Api<Lease> = Api::namespaced(c.admin().await, NAMESPACE);
    let mut lease = api.get(LEASE).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(3600);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now()));
    api.replace(LEASE, &PostParams::default(), &lease).await.unwrap();
    let (status, stderr) = a.exit(WAIT).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("leader election lost"), "{stderr}");
    a.check();
}

/// A TCP proxy between a manager and the API server that the test can cut: every connection
/// through it is dropped and new ones are refused, as in a network partition.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    cut_tx: tokio::sync::broadcast::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let (cut_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let (flag, tx) = (cut.clone(), cut_tx.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if flag.load(Ordering::SeqCst) {
                    continue;
                }
                let mut stop = tx.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = stop.recv() => {}
                    }
                });
            }
        });
        Proxy { port, cut, cut_tx, task }
    }

    /// Drops every connection and refuses new ones.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.cut_tx.send(());
    }
}

/// A leader cut off from the API server (its renewals fail) stops acting and exits once its
/// renew deadline has passed, before the standby, which waits a full lease duration from its last
/// sight of a renewal, takes the lease: never two leaders acting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_before_the_standby_takes_over() {
    let c = cluster().await;
    let proxy = Proxy::start(c.server.port).await;
    let proxied = c.dir.path().join("proxied.kubeconfig");
    let text = std::fs::read_to_string(&c.manager_kubeconfig).unwrap();
    let text = text.replace(&format!("127.0.0.1:{}", c.server.port), &format!("127.0.0.1:{}", proxy.port));
    std::fs::write(&proxied, text).unwrap();
    let mut a = Manager::start(&proxied, &c.config(true), "manager-a", &[]).await;
    c.lease_held_by("manager-a", WAIT).await;
    let _b = c.manager("manager-b").await;
    proxy.cut();
    let cut = Instant::now();
    let a_exit = {
        let exited = async {
            let status = a.child.wait().await.unwrap();
            (status, Instant::now())
        };
        let b_leads = c.lease_held_by("manager-b", WAIT);
        tokio::pin!(b_leads);
        tokio::select! {
            (status, at) = exited => {
                assert_eq!(status.code(), Some(1), "{}", a.stderr.lock().unwrap());
                at
            }
            b_at = &mut b_leads => panic!(
                "manager-b took the lease {:?} after the cut while manager-a was still running:\n{}",
                b_at - cut,
                a.stderr.lock().unwrap()
            ),
        }
    };
    let b_at = c.lease_held_by("manager-b", WAIT).await;
    assert!(a_exit < b_at, "manager-a stopped after manager-b took over");
    eprintln!("manager-a stopped {:?} after the cut, manager-b led {:?} after it", a_exit - cut, b_at - cut);
    assert!(a.stderr.lock().unwrap().contains("leader election lost"), "{}", a.stderr.lock().unwrap());
    proxy.task.abort();
}

/// The manager killed and restarted at random moments of a JobSet's life (seeded; the seed is
/// printed) converges to the fault-free end: Completed, 2 restarts, each Job created once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_killed_at_random_moments_converges_to_the_fault_free_status() {
    let seed: u64 = std::env::var("JOBSET_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("seed {seed} (JOBSET_TEST_SEED={seed} repeats this run)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let c = cluster().await;
    let jobs = record_jobs(c.admin().await, "restart-jobset");
    // The same identity across restarts, as a StatefulSet's pod name: it takes its lease back at once.
    let mut m = c.manager("manager-a").await;
    let out = apply(&c.server, &format!("{REPO}/{RESTART_JOBSET}")).await;
    assert_eq!(out.code, 0, "{out:?}");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..800))).await;
        m.kill().await;
        m = c.manager("manager-a").await;
    }
    let js = c.jobset_until("restart-jobset", "Completed", |js| has_condition(js, "Completed")).await;
    assert_eq!(status_i64(&js, "restarts"), 2, "seed {seed}: {js:?}");
    assert_eq!(status_i64(&js, "restartsCountTowardsMax"), 2, "seed {seed}: {js:?}");
    assert_each_job_created_once(&jobs);
    m.kill().await;
}

/// `jobset manager ARGS...` to its end.
async fn manager_fails(args: &[&str]) -> common::Output {
    let mut all = vec!["manager", "--health-probe-bind-address", "0", "--metrics-bind-address", "0"];
    all.extend_from_slice(args);
    // The manager's own default log filter, as a user gets it.
    let mut cmd = common::jobset_command(&all);
    cmd.env_remove("JOBSET_LOG");
    common::run_to_end(cmd, WAIT).await
}

/// Each bad input ends the manager with exit code 1 and one line naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_line_naming_the_cause_and_exit_code_1() {
    let c = cluster().await;
    let dir = c.dir.path();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let no_context =
        write("no-context.kubeconfig", "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n");
    let unreachable = {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let text = std::fs::read_to_string(&c.manager_kubeconfig).unwrap();
        write(
            "unreachable.kubeconfig",
            &text.replace(&format!("127.0.0.1:{}", c.server.port), &format!("127.0.0.1:{port}")),
        )
    };
    let wrong_token = {
        let p = dir.join("wrong-token.kubeconfig");
        write_kubeconfig_with_token(&c.manager_kubeconfig, &p, "not-a-token");
        p.to_string_lossy().into_owned()
    };
    let unknown_key = write(
        "unknown-key.yaml",
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\nleaderElection:\n  leaderElct: true\n",
    );
    let manager = c.manager_kubeconfig.to_string_lossy().into_owned();
    let missing = dir.join("missing.kubeconfig").to_string_lossy().into_owned();
    let cases: [(&str, Vec<&str>, &str); 5] = [
        ("a kubeconfig that does not exist", vec!["--kubeconfig", &missing], "missing.kubeconfig: No such file"),
        (
            "a kubeconfig without a current context",
            vec!["--kubeconfig", &no_context],
            "failed to determine current context",
        ),
        (
            "an unreachable server",
            vec!["--kubeconfig", &unreachable],
            "cannot reach the API server at https://127.0.0.1:",
        ),
        ("a wrong token", vec!["--kubeconfig", &wrong_token], "rejected our credentials (401 Unauthorized)"),
        (
            "a configuration with an unknown key",
            vec!["--kubeconfig", &manager, "--config", &unknown_key],
            "unknown-key.yaml:4:3: unknown field \"leaderElection.leaderElct\"",
        ),
    ];
    for (what, args, says) in cases {
        let out = manager_fails(&args).await;
        assert_eq!(out.code, 1, "{what}: {out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: not one line: {out:?}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(says),
            "{what}: {:?} does not say {says:?}",
            lines[0]
        );
        assert!(!out.stderr.contains("panicked"), "{what}: {out:?}");
    }
}

/// Upstream's main-container-mode in-place restart example, with process pods, through the pair:
/// a worker fails, every pod restarts in place (same pods), the JobSet's attempt advances, and
/// no restart is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_restart_with_process_pods_works_through_the_manager() {
    use k8s_openapi::api::core::v1::Pod;
    let c = cluster().await;
    let m = c.manager("manager-a").await;
    let out = apply(&c.server, &format!("{REPO}/examples/in-place-restart/jobset-main-container-mode.yaml")).await;
    assert_eq!(out.code, 0, "{out:?}");
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let at_attempt = |attempt: &'static str| {
        let pods = pods.clone();
        async move {
            let cfg = watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=js");
            let mut seen = std::collections::BTreeMap::new();
            let mut events = std::pin::pin!(watcher(pods, cfg).default_backoff().applied_objects());
            while let Some(Ok(p)) = events.next().await {
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                let at =
                    p.metadata.annotations.as_ref().and_then(|a| a.get("jobset.sigs.k8s.io/in-place-restart-attempt"));
                if running && at.map(String::as_str) == Some(attempt) {
                    seen.insert(p.metadata.name.clone().unwrap(), p.metadata.uid.clone().unwrap());
                } else {
                    seen.remove(p.metadata.name.as_deref().unwrap());
                }
                if seen.len() == 4 {
                    return seen;
                }
            }
            panic!("the pod watch ended")
        }
    };
    let before = tokio::time::timeout(WAIT, at_attempt("0")).await.expect("4 pods running at attempt 0");
    let target = before.keys().next().unwrap().clone();
    let out =
        c.jobset_command(&["exec", &target, "--", "sh", "-c", "mount -t tmpfs tmpfs /tmp && touch /tmp/exit1"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let after = tokio::time::timeout(WAIT, at_attempt("1")).await.expect("4 pods running at attempt 1");
    assert_eq!(after, before, "pods were recreated instead of restarted in place");
    let js =
        c.jobset_until("js", "at in-place attempt 1", |js| status_i64(js, "currentInPlaceRestartAttempt") == 1).await;
    assert_eq!(js.data.pointer("/status/previousInPlaceRestartAttempt").and_then(Value::as_i64), Some(0), "{js:?}");
    assert_eq!(status_i64(&js, "restarts"), 0, "{js:?}");
    m.kill().await;
}

/// KEP-262's examples and upstream's documentation examples that end by themselves end through
/// the pair exactly as in local mode: the same exit code and final status line (condition,
/// reason, message, restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kep262_and_upstream_examples_end_through_the_manager_as_in_local_mode() {
    let c = cluster().await;
    let m = c.manager("manager-a").await;
    let kubeconfig = c.server.kubeconfig.to_string_lossy().into_owned();
    let examples = [
        ("failure-policy/fail-jobset.yaml", "fail-jobset"),
        ("failure-policy/restart-jobset.yaml", "restart-jobset"),
        ("failure-policy/ignore-max-restarts.yaml", "ignore-max-restarts"),
        ("failure-policy/different-policies.yaml", "different-policies"),
        ("failure-policy/restart-replicated-job.yaml", "restart-replicated-job"),
        ("failure-policy/fail-job-restart-job.yaml", "fail-job-restart-job"),
        ("upstream/simple/group.yaml", "group-example"),
        ("upstream/simple/paralleljobs.yaml", "paralleljobs"),
        ("upstream/simple/ttl-after-finished.yaml", "jobset-with-ttl"),
        ("upstream/simple/failure-policy.yaml", "failure-policy"),
        ("upstream/failure-policy/failjobset-action.yaml", "failjobset-action-example"),
        ("upstream/failure-policy/host-maintenance-event-model.yaml", "host-maintenance-event-model"),
        ("upstream/failure-policy/restartjobset-action.yaml", "restartjobset-action-example"),
        ("upstream/depends-on/depends-on.yaml", "depends-on"),
        ("upstream/depends-on/multiple-depends-on.yaml", "multiple-depends-on"),
        ("upstream/startup-policy/startup-driver-ready.yaml", "startup-driver-ready"),
        ("upstream/volume-claim-policy/single-pvc.yaml", "volume-claim-trainjob"),
    ];
    // The examples mostly wait (their commands sleep) and their JobSets' names differ: three at a
    // time, each in local mode (its own cluster) beside the pair, take a fifth of the time one by
    // one took.
    let ran = futures::stream::iter(examples.map(|(file, name)| {
        let (path, kubeconfig, c) = (format!("{REPO}/examples/{file}"), &kubeconfig, &c);
        async move {
            let local_args = ["run", &path, "--job-backoff", "10ms", "--timeout", "60s"];
            let pair_args = ["run", "--kubeconfig", kubeconfig, &path, "--timeout", "60s"];
            let (local, pair) = tokio::join!(common::jobset(&local_args, WAIT * 2), c.jobset_command(&pair_args));
            (file, name, local, pair)
        }
    }))
    .buffer_unordered(3)
    .collect::<Vec<_>>()
    .await;
    for (file, name, local, pair) in ran {
        assert!(local.code == 0 || local.code == 1, "{file} in local mode: {local:?}");
        assert_eq!(
            (pair.code, summary(&pair, name)),
            (local.code, summary(&local, name)),
            "{file}: through the manager vs local mode\nmanager:\n{}",
            m.stderr.lock().unwrap()
        );
    }
    m.kill().await;
}

/// Accepts the manager's self-signed metrics certificate, as scrapers configured with
/// `insecureSkipVerify` do.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// An HTTPS GET with an optional bearer token: (status, body).
async fn https_get(url: &str, token: Option<&str>) -> (u16, String) {
    let rest = url.strip_prefix("https://").expect("an https:// URL");
    let (host, path) = host_and_path(rest);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(host).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("TLS handshake");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    // A server may close without TLS close_notify once it has answered.
    let _ = s.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out).into_owned();
    response(&out)
}

/// Upstream's secure metrics: HTTPS, and only for a token the cluster authenticates
/// (TokenReview) whose user may `get /metrics` (SubjectAccessReview; the shipped
/// `jobset-metrics-reader` role), with controller-runtime's answers otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_metrics_are_served_only_to_scrapers_allowed_to_get_them() {
    let c = cluster().await;
    let admin = c.admin().await;
    let accounts = c.dir.path().join("scrapers.yaml");
    std::fs::write(
        &accounts,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: prometheus, namespace: monitoring}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: nosy, namespace: monitoring}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: prometheus-metrics}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: jobset-metrics-reader}\n\
         subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]\n",
    )
    .unwrap();
    let out = apply(&c.server, &accounts.to_string_lossy()).await;
    assert_eq!(out.code, 0, "{out:?}");
    let prometheus = token_of(&admin, "monitoring", "prometheus").await;
    let nosy = token_of(&admin, "monitoring", "nosy").await;
    let m = Manager::start(&c.manager_kubeconfig, &c.config(true), "manager-a", &["--metrics-secure=true"]).await;
    assert!(m.metrics.starts_with("https://"), "{}", m.metrics);
    let cases: [(&str, Option<&str>, u16, &str); 4] = [
        ("no token", None, 401, "Unauthorized"),
        ("a token the cluster did not issue", Some("garbage"), 401, "Unauthorized"),
        (
            "a ServiceAccount without the reader role",
            Some(&nosy),
            403,
            "Authorization denied for user system:serviceaccount:monitoring:nosy",
        ),
        ("a ServiceAccount bound to jobset-metrics-reader", Some(&prometheus), 200, "leader_election_master_status"),
    ];
    for (who, token, status, says) in cases {
        let (got, body) = https_get(&m.metrics, token).await;
        assert_eq!(got, status, "{who}: {body}\nmanager:\n{}", m.stderr.lock().unwrap());
        assert!(body.contains(says), "{who}: {body:?} does not say {says:?}");
    }
    m.kill().await;
}

/// SIGTERM to the leader: it finishes, releases the Lease and exits 0, and the standby takes the
/// released Lease at once instead of waiting for it to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_with_sigterm_releases_the_lease_to_the_standby_at_once() {
    let c = cluster().await;
    let mut a = c.manager("manager-a").await;
    c.lease_held_by("manager-a", WAIT).await;
    let _b = c.manager("manager-b").await;
    let pid = nix::unistd::Pid::from_raw(a.child.id().expect("manager-a runs") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let (status, stderr) = a.exit(WAIT).await;
    let stopped = Instant::now();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("released lease"), "{stderr}");
    // Without the release the standby would wait out the lease duration from its last sight of
    // a renewal.
    let b_at = c.lease_held_by("manager-b", WAIT).await;
    assert!(b_at - stopped < LEASE_DURATION, "manager-b took {:?} after manager-a stopped", b_at - stopped);
    a.check();
}

/// Exclusive placement through the manager's pod webhooks (the embedded server's built-in ones
/// step aside with JobSet admission): each Job on a node of its own, its leader with upstream's
/// affinity terms once, its follower pinned to the leader's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_placement_goes_through_the_manager_s_pod_webhooks() {
    use k8s_openapi::api::core::v1::Pod;
    const HOST: &str = "kubernetes.io/hostname";
    let c = cluster().await;
    let m = c.manager("manager-a").await;
    let file = c.dir.path().join("exclusive.yaml");
    let containers = r#"[{name: main, image: busybox, command: [sleep, "60"]}]"#;
    let manifest = format!(
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: excl\n  annotations:\n    \
         alpha.jobset.sigs.k8s.io/exclusive-topology: {HOST}\nspec:\n  replicatedJobs:\n  - name: w\n    replicas: 2\n    \
         template:\n      spec:\n        parallelism: 2\n        completions: 2\n        template:\n          spec:\n            \
         containers: {containers}\n"
    );
    std::fs::write(&file, manifest).unwrap();
    let out = apply(&c.server, file.to_str().unwrap()).await;
    assert_eq!(out.code, 0, "{out:?}");
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let bound = tokio::time::timeout(WAIT, async {
        let cfg = watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=excl");
        let mut seen = std::collections::BTreeMap::new();
        let mut events = std::pin::pin!(watcher(pods, cfg).default_backoff().applied_objects());
        while let Some(Ok(p)) = events.next().await {
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                seen.insert(p.metadata.name.clone().unwrap(), p);
            }
            if seen.len() == 4 {
                return seen;
            }
        }
        panic!("the pod watch ended")
    })
    .await
    .expect("4 pods bound");
    let label = |p: &Pod, k: &str| p.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned().unwrap_or_default();
    let node = |p: &Pod| p.spec.as_ref().unwrap().node_name.clone().unwrap();
    let mut nodes_of_job: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for p in bound.values() {
        let job = label(p, "batch.kubernetes.io/job-name");
        nodes_of_job.entry(job.clone()).or_default().insert(node(p));
        assert_eq!(label(p, "jobset.sigs.k8s.io/priority"), "0", "{p:?}");
        let v = serde_json::to_value(p).unwrap();
        let index = label(p, "batch.kubernetes.io/job-completion-index");
        if index == "0" {
            let anti = v.pointer("/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution");
            let anti = anti.and_then(Value::as_array).expect("the leader's anti-affinity");
            assert_eq!(anti.len(), 1, "one webhook gave the terms: {anti:?}");
            let priority = &anti[0]["labelSelector"]["matchExpressions"][2];
            assert_eq!(
                *priority,
                serde_json::json!({"key": "jobset.sigs.k8s.io/priority", "operator": "In", "values": ["0"]})
            );
        } else {
            let leader = bound.values().find(|l| {
                label(l, "batch.kubernetes.io/job-name") == job
                    && label(l, "batch.kubernetes.io/job-completion-index") == "0"
            });
            let leader = leader.expect("the Job's leader");
            assert_eq!(v.pointer("/spec/nodeSelector"), Some(&serde_json::json!({HOST: node(leader)})), "{p:?}");
            assert_eq!(v.pointer("/spec/affinity"), None, "{p:?}");
        }
    }
    assert_eq!(nodes_of_job.len(), 2, "{nodes_of_job:?}");
    assert!(nodes_of_job.values().all(|n| n.len() == 1), "a Job spans nodes: {nodes_of_job:?}");
    let used: std::collections::BTreeSet<&String> = nodes_of_job.values().flatten().collect();
    assert_eq!(used.len(), 2, "two Jobs share a node: {nodes_of_job:?}");
    m.kill().await;
}
