//! Leader election against the in-process embedded API server, with millisecond timings. Tests
//! wait on the electors' futures with timeouts; an expected absence is a timeout that elapses.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{Either, select};
use http::{Method, Request, Response, StatusCode};
use jobset_apiserver::ApiServer;
use jobset_manager::election::{ElectionConfig, LeaderElector, Lost};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::client::Body;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, timeout};

const NAME: &str = "jobset-manager";
const LEASE_DURATION: Duration = Duration::from_millis(1500);
const RENEW_DEADLINE: Duration = Duration::from_millis(1000);
const RETRY_PERIOD: Duration = Duration::from_millis(100);
/// A bound for what must happen; far above every timing above.
const WAIT: Duration = Duration::from_secs(20);

fn elector(client: Client, identity: &str) -> LeaderElector {
    let config = ElectionConfig {
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..ElectionConfig::new("default", NAME, identity)
    };
    LeaderElector::new(client, config).expect("valid config")
}

fn leases(server: &Arc<ApiServer>) -> Api<Lease> {
    Api::namespaced(server.client(), "default")
}

async fn spec(server: &Arc<ApiServer>) -> LeaseSpec {
    leases(server).get(NAME).await.expect("the lease exists").spec.expect("the lease has a spec")
}

/// A client whose every request goes through `f` (given the server's own client) first.
fn wrapped<F, Fut>(server: &Arc<ApiServer>, f: F) -> Client
where
    F: Fn(Client, Request<Body>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Body>, kube::Error>> + Send + 'static,
{
    let inner = server.client();
    Client::new(tower::service_fn(move |req| f(inner.clone(), req)), "default")
}

#[derive(Clone, Copy)]
enum Wire {
    Pass,
    Fail,
    Hang,
}

/// A client that the test can cut off: its requests fail, or never complete.
fn switchable(server: &Arc<ApiServer>, wire: Arc<Mutex<Wire>>) -> Client {
    wrapped(server, move |inner, req| {
        let state = *wire.lock().unwrap();
        async move {
            match state {
                Wire::Pass => inner.send(req).await,
                Wire::Fail => Err(kube::Error::Service("injected failure".into())),
                Wire::Hang => std::future::pending().await,
            }
        }
    })
}

#[tokio::test]
async fn one_candidate_leads_and_its_release_hands_over_at_once() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    let mut b = elector(server.client(), "b");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");

    let (release, released) = oneshot::channel::<()>();
    let leader = tokio::spawn(async move {
        tokio::select! {
            lost = a.renew_until_lost() => panic!("a lost a lease it was renewing: {lost}"),
            _ = released => {}
        }
        a.release().await.expect("a releases its lease");
        Instant::now()
    });
    let mut standby = tokio::spawn(async move {
        b.acquire().await;
        Instant::now()
    });

    // Longer than the lease duration: only a's renewals keep b out.
    let waited = LEASE_DURATION + LEASE_DURATION / 2;
    assert!(timeout(waited, &mut standby).await.is_err(), "b acquired a lease that a was renewing");

    release.send(()).unwrap();
    let released_at = timeout(WAIT, leader).await.expect("a releases in time").unwrap();
    // Had a not cleared the holder, b would wait about a lease duration from a's last write.
    let acquired_at = timeout(LEASE_DURATION / 2, standby)
        .await
        .expect("b takes a released lease at once, well before the lease duration")
        .unwrap();
    assert!(acquired_at > released_at);
    let spec = spec(&server).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test]
async fn a_release_writes_client_go_s_released_record() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    let held = spec(&server).await;
    assert_eq!(held.holder_identity.as_deref(), Some("a"));
    assert_eq!(held.lease_duration_seconds, Some(2), "1.5 s rounds up");
    assert_eq!(held.lease_transitions, Some(0));
    assert!(held.acquire_time.is_some() && held.acquire_time == held.renew_time);

    timeout(WAIT, a.release()).await.expect("release is bounded").expect("a releases");
    let released = spec(&server).await;
    assert_eq!(released.holder_identity.as_deref(), Some(""));
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(0));
}

#[tokio::test]
async fn a_release_leaves_a_lease_held_by_another_alone() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    overwrite_holder(&server, "intruder").await;
    timeout(WAIT, a.release()).await.expect("release is bounded").expect("nothing to release is no error");
    assert_eq!(spec(&server).await.holder_identity.as_deref(), Some("intruder"));
}

#[tokio::test]
async fn an_abandoned_lease_is_taken_only_a_lease_duration_after_it_was_first_seen() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    // a renews for a while, then stops without releasing (the future is dropped).
    assert!(timeout(LEASE_DURATION, a.renew_until_lost()).await.is_err(), "a lost a renewed lease");

    let mut b = elector(server.client(), "b");
    let started = Instant::now();
    timeout(WAIT, b.acquire()).await.expect("b takes over the abandoned lease");
    let acquired = Instant::now();
    // Every observation b made was after `started`.
    assert!(
        acquired >= started + LEASE_DURATION,
        "b took the lease {:?} after first seeing it, before the lease duration",
        acquired - started
    );
    let spec = spec(&server).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

/// Sets the lease's holder as another writer would, retrying on conflicts with the renewals.
async fn overwrite_holder(server: &Arc<ApiServer>, holder: &str) {
    let leases = leases(server);
    loop {
        let mut lease = leases.get(NAME).await.unwrap();
        lease.spec.as_mut().unwrap().holder_identity = Some(holder.to_string());
        match leases.replace(NAME, &PostParams::default(), &lease).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(e) => panic!("overwriting the holder: {e}"),
        }
    }
}

#[tokio::test]
async fn a_leader_that_sees_another_holder_declares_loss() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    let leader = tokio::spawn(async move { a.renew_until_lost().await });
    overwrite_holder(&server, "intruder").await;
    let lost = timeout(WAIT, leader).await.expect("a notices the new holder").unwrap();
    assert_eq!(lost, Lost::AnotherHolder("intruder".to_string()));
}

#[tokio::test]
async fn renewing_without_leading_reports_not_leading_at_once() {
    let server = ApiServer::in_memory();
    let mut a = elector(server.client(), "a");
    let quick = RETRY_PERIOD / 2;
    assert_eq!(timeout(quick, a.renew_until_lost()).await, Ok(Lost::NotLeading), "never acquired");

    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    overwrite_holder(&server, "intruder").await;
    let lost = timeout(WAIT, a.renew_until_lost()).await.expect("a notices the new holder");
    assert_eq!(lost, Lost::AnotherHolder("intruder".to_string()));
    assert_eq!(timeout(quick, a.renew_until_lost()).await, Ok(Lost::NotLeading), "already lost");

    let mut b = elector(server.client(), "b");
    timeout(WAIT, b.acquire()).await.expect("b takes the lease over");
    timeout(WAIT, b.release()).await.expect("release is bounded").expect("b releases");
    assert_eq!(timeout(quick, b.renew_until_lost()).await, Ok(Lost::NotLeading), "released");
}

/// As the manager does on shutdown: renewal is dropped, then resumed while reconciles finish.
#[tokio::test]
async fn a_resumed_renewal_keeps_the_deadline_of_the_last_success() {
    let server = ApiServer::in_memory();
    let wire = Arc::new(Mutex::new(Wire::Pass));
    let mut a = elector(switchable(&server, wire.clone()), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    assert!(timeout(RETRY_PERIOD * 3, a.renew_until_lost()).await.is_err(), "a lost a renewed lease");

    *wire.lock().unwrap() = Wire::Fail;
    let cut_at = Instant::now();
    assert!(timeout(RENEW_DEADLINE / 2, a.renew_until_lost()).await.is_err(), "lost before the deadline");
    let lost = timeout(WAIT, a.renew_until_lost()).await.expect("a declares loss");
    let lost_at = Instant::now();
    assert!(matches!(lost, Lost::RenewDeadline { .. }), "{lost:?}");
    // No success after `cut_at`: the deadline is at most `cut_at + RENEW_DEADLINE`. Restarting it
    // on each call would put the loss at `cut_at + 1.5 * RENEW_DEADLINE` or later.
    assert!(
        lost_at < cut_at + RENEW_DEADLINE + RENEW_DEADLINE / 3,
        "loss declared {:?} after the cut",
        lost_at - cut_at
    );
}

/// The core safety property: a leader cut off from the API server declares loss before a
/// standby can take the lease over.
async fn a_cut_off_leader_stops_before_a_standby_takes_over(cut: Wire) {
    let server = ApiServer::in_memory();
    let wire = Arc::new(Mutex::new(Wire::Pass));
    let mut a = elector(switchable(&server, wire.clone()), "a");
    timeout(WAIT, a.acquire()).await.expect("a acquires the free lease");
    let leader = tokio::spawn(async move {
        let lost = a.renew_until_lost().await;
        (lost, Instant::now())
    });
    let mut b = elector(server.client(), "b");
    let standby = tokio::spawn(async move {
        b.acquire().await;
        Instant::now()
    });

    *wire.lock().unwrap() = cut;
    let (lost, lost_at) = timeout(WAIT, leader).await.expect("the cut-off leader never declared loss").unwrap();
    assert!(matches!(lost, Lost::RenewDeadline { .. }), "{lost:?}");
    let acquired_at = timeout(WAIT, standby).await.expect("b takes over").unwrap();
    assert!(
        lost_at < acquired_at,
        "b acquired the lease {:?} before a declared loss",
        lost_at.saturating_duration_since(acquired_at)
    );
}

#[tokio::test]
async fn a_leader_whose_requests_fail_stops_before_a_standby_takes_over() {
    a_cut_off_leader_stops_before_a_standby_takes_over(Wire::Fail).await;
}

#[tokio::test]
async fn a_leader_whose_requests_hang_stops_before_a_standby_takes_over() {
    a_cut_off_leader_stops_before_a_standby_takes_over(Wire::Hang).await;
}

#[tokio::test]
async fn candidates_racing_for_an_expired_lease_yield_exactly_one_leader() {
    let server = ApiServer::in_memory();
    let ghost = Lease {
        metadata: ObjectMeta { name: Some(NAME.into()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            lease_duration_seconds: Some(2),
            renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }),
    };
    leases(&server).create(&PostParams::default(), &ghost).await.unwrap();

    // Every PUT waits until two have been sent, so both takeovers carry the same resourceVersion.
    let (puts, _) = watch::channel(0usize);
    let conflicts = Arc::new(AtomicUsize::new(0));
    let gated = |identity: &str| {
        let (puts, conflicts) = (puts.clone(), conflicts.clone());
        let client = wrapped(&server, move |inner, req| {
            let (puts, conflicts) = (puts.clone(), conflicts.clone());
            async move {
                if req.method() == Method::PUT {
                    puts.send_modify(|n| *n += 1);
                    puts.subscribe().wait_for(|n| *n >= 2).await.unwrap();
                }
                let resp = inner.send(req).await?;
                if resp.status() == StatusCode::CONFLICT {
                    conflicts.fetch_add(1, Ordering::SeqCst);
                }
                Ok(resp)
            }
        });
        let mut candidate = elector(client, identity);
        tokio::spawn(async move {
            candidate.acquire().await;
            candidate
        })
    };
    let (a, b) = (gated("a"), gated("b"));

    let (mut winner, loser) = match timeout(WAIT, select(a, b)).await.expect("one candidate wins") {
        Either::Left((won, other)) | Either::Right((won, other)) => (won.unwrap(), other),
    };
    let winner_id = winner.identity().to_string();
    let renewing = tokio::spawn(async move { winner.renew_until_lost().await });

    assert!(timeout(LEASE_DURATION + LEASE_DURATION / 2, loser).await.is_err(), "both candidates acquired the lease");
    assert!(!renewing.is_finished(), "the winner lost its lease");
    assert_eq!(conflicts.load(Ordering::SeqCst), 1, "exactly one takeover is refused with 409");
    let spec = spec(&server).await;
    assert_eq!(spec.holder_identity.as_deref(), Some(winner_id.as_str()));
    assert_eq!(spec.lease_transitions, Some(4), "one takeover, one transition");
}
