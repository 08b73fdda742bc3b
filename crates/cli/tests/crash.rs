//! Crash recovery of `jobset up --data-dir`: SIGKILL while writes are in flight loses no
//! acknowledged write and never reuses a resourceVersion; a damaged data dir is refused loudly.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use rand::Rng;

use common::{STARTUP_TIMEOUT, command, start, try_start};

/// Limit for one API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent writers while the server is killed.
const WRITERS: usize = 8;
const ROUNDS: usize = 3;

fn cm(name: &str, i: usize) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.to_string());
    c.metadata.labels = Some([("crash-test".to_string(), "true".to_string())].into());
    c.data = Some([("i".to_string(), i.to_string()), ("pad".to_string(), "x".repeat(i % 2000))].into());
    c
}

/// An acknowledged create.
#[derive(Debug, Clone)]
struct Acked {
    uid: String,
    rv: u64,
}

fn rv_of(c: &ConfigMap) -> u64 {
    c.metadata.resource_version.as_deref().expect("resourceVersion").parse().expect("numeric resourceVersion")
}

async fn call<T>(what: &str, f: impl std::future::Future<Output = kube::Result<T>>) -> T {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what}: timed out after {CALL_TIMEOUT:?}"),
    }
}

/// Every acknowledged object is there, unchanged; nothing is newer than the store's resourceVersion;
/// a new write gets a resourceVersion above every acknowledged one.
async fn verify(client: &kube::Client, acked: &BTreeMap<String, Acked>, probe: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let max_acked = acked.values().map(|a| a.rv).max().unwrap_or(0);
    let list = call("list configmaps", api.list(&ListParams::default().labels("crash-test=true"))).await;
    let list_rv: u64 = list.metadata.resource_version.as_deref().expect("list resourceVersion").parse().unwrap();
    assert!(list_rv >= max_acked, "list resourceVersion {list_rv} < max acknowledged {max_acked}");
    let found: BTreeMap<String, ConfigMap> =
        list.items.into_iter().map(|c| (c.metadata.name.clone().unwrap(), c)).collect();
    let mut max_seen = 0;
    for c in found.values() {
        max_seen = max_seen.max(rv_of(c));
    }
    assert!(max_seen <= list_rv, "an object has resourceVersion {max_seen} > list resourceVersion {list_rv}");
    for (name, a) in acked {
        let c = found
            .get(name)
            .unwrap_or_else(|| panic!("acknowledged ConfigMap {name} (rv {}) is gone after the crash", a.rv));
        assert_eq!(c.metadata.uid.as_deref(), Some(a.uid.as_str()), "{name}: uid changed");
        assert_eq!(rv_of(c), a.rv, "{name}: resourceVersion changed");
        // And a GET agrees with the list.
        let got = call(&format!("get {name}"), api.get(name)).await;
        assert_eq!(got.metadata.uid.as_deref(), Some(a.uid.as_str()));
    }
    let created = call("create probe", api.create(&PostParams::default(), &cm(probe, 0))).await;
    let rv = rv_of(&created);
    assert!(rv > max_acked, "new write got resourceVersion {rv}, not above max acknowledged {max_acked}");
    assert!(rv > list_rv, "new write got resourceVersion {rv}, not above the list's {list_rv}");
    assert!(rv > max_seen, "new write got resourceVersion {rv}, reusing one an object already has ({max_seen})");
    let after = call("list after probe", api.list(&ListParams::default().labels("crash-test=true"))).await;
    let after_rv: u64 = after.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    assert!(after_rv >= rv, "list resourceVersion {after_rv} below the last write {rv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<String, Acked> = BTreeMap::new();
    let mut rng = rand::rng();
    let mut in_flight_at_kill = 0;
    for round in 0..ROUNDS {
        let server = start(dir.path(), 0, &[]).await;
        let client = server.client().await;
        verify(&client, &acked, &format!("probe-{round}")).await;
        // The probe is acknowledged too.
        let probe =
            call("get probe", Api::<ConfigMap>::namespaced(client.clone(), "default").get(&format!("probe-{round}")))
                .await;
        acked.insert(format!("probe-{round}"), Acked { uid: probe.metadata.uid.clone().unwrap(), rv: rv_of(&probe) });

        let round_acked: Arc<Mutex<Vec<(String, Acked)>>> = Arc::default();
        let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
            let round_acked = round_acked.clone();
            let attempts = attempts.clone();
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("r{round}-w{w}-{i}");
                    attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // Errors once the server is gone end the writer; a write whose answer was lost
                    // may or may not be stored, and either is fine.
                    match tokio::time::timeout(CALL_TIMEOUT, api.create(&PostParams::default(), &cm(&name, i))).await {
                        Ok(Ok(c)) => {
                            let a = Acked { uid: c.metadata.uid.clone().expect("uid"), rv: rv_of(&c) };
                            round_acked.lock().unwrap().push((name, a));
                        }
                        Ok(Err(_)) | Err(_) => return i,
                    }
                }
                unreachable!()
            }));
        }
        let delay = Duration::from_millis(rng.random_range(50..=500));
        tokio::time::sleep(delay).await;
        let before_kill = round_acked.lock().unwrap().len();
        let attempted = attempts.load(std::sync::atomic::Ordering::Relaxed);
        server.crash().await;
        for w in writers {
            tokio::time::timeout(CALL_TIMEOUT * 2, w).await.expect("writer stops after the kill").expect("writer task");
        }
        let round_acked = std::mem::take(&mut *round_acked.lock().unwrap());
        in_flight_at_kill += attempted.saturating_sub(before_kill);
        println!("round {round}: killed after {delay:?}, {} creates acknowledged", round_acked.len());
        let mut rvs: Vec<u64> = round_acked.iter().map(|(_, a)| a.rv).collect();
        rvs.sort_unstable();
        let n = rvs.len();
        rvs.dedup();
        assert_eq!(rvs.len(), n, "two acknowledged creates share a resourceVersion");
        for (name, a) in round_acked {
            assert!(acked.insert(name.clone(), a).is_none(), "{name} acknowledged twice");
        }
    }
    assert!(acked.len() > ROUNDS, "no create was acknowledged before any kill: the test proved nothing");
    assert!(in_flight_at_kill > 0, "no write was in flight at any kill");
    // A final restart sees everything.
    let server = start(dir.path(), 0, &[]).await;
    let client = server.client().await;
    verify(&client, &acked, "probe-final").await;
    // No uid was handed out twice across restarts.
    let mut uids: Vec<&str> = acked.values().map(|a| a.uid.as_str()).collect();
    uids.sort_unstable();
    let n = uids.len();
    uids.dedup();
    assert_eq!(uids.len(), n, "a uid was reused");
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watcher_survives_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 0, &[]).await;
    let port = server.port;
    let client = server.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    call("create before", api.create(&PostParams::default(), &cm("before", 1))).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch_task = {
        let errors = errors.clone();
        let stream = watcher(api.clone(), watcher::Config::default().labels("crash-test=true").timeout(20));
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    // Connection refused while the server is down: the watcher retries.
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
    };

    // Waits for an event that carries the named object; returns whether a relist (Init) was seen on the way.
    async fn wait_for(rx: &mut tokio::sync::mpsc::UnboundedReceiver<watcher::Event<ConfigMap>>, name: &str) -> bool {
        let mut relisted = false;
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(ev) = rx.recv().await {
                match ev {
                    watcher::Event::Init => relisted = true,
                    watcher::Event::Apply(c) | watcher::Event::InitApply(c)
                        if c.metadata.name.as_deref() == Some(name) =>
                    {
                        return true;
                    }
                    _ => {}
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "watcher never delivered {name}");
        relisted
    }

    assert!(wait_for(&mut rx, "before").await, "the first list is an Init");
    call("create live", api.create(&PostParams::default(), &cm("live", 2))).await;
    wait_for(&mut rx, "live").await;

    // Crash, and come back on the same port (the watcher's client knows only that URL).
    server.crash().await;
    let server = start(dir.path(), port, &[]).await;
    // A write after the restart must reach the watcher.
    let client2 = server.client().await;
    let api2: Api<ConfigMap> = Api::namespaced(client2, "default");
    call("create after", api2.create(&PostParams::default(), &cm("after", 3))).await;
    wait_for(&mut rx, "after").await;
    // And the watcher keeps going: a later write arrives as well.
    call("create later", api2.create(&PostParams::default(), &cm("later", 5))).await;
    wait_for(&mut rx, "later").await;
    println!("watcher saw {} errors while the server was down", errors.load(std::sync::atomic::Ordering::Relaxed));
    watch_task.abort();
    server.kill().await;
}

/// Runs `jobset up` expecting it to fail; returns its stderr. Asserts it never listened.
async fn expect_startup_failure(dir: &Path) -> String {
    let child = command(dir, 0, &[]).kill_on_drop(true).spawn().expect("spawn");
    let out = tokio::time::timeout(STARTUP_TIMEOUT, child.wait_with_output())
        .await
        .expect("jobset up should exit promptly on a bad data dir")
        .expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "jobset up succeeded on a bad data dir; stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("listening"), "jobset up served a bad data dir: {stdout}");
    stderr
}

#[tokio::test]
async fn garbage_store_is_refused_and_left_alone() {
    let mut rng = rand::rng();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![];
    for len in [16usize, 4096, 65536] {
        let mut b = vec![0u8; len];
        rng.fill(&mut b[..]);
        cases.push(("random bytes", b));
    }
    cases.push(("a text file", b"apiVersion: v1\nkind: Config\n".to_vec()));
    cases.push((
        "an SQLite header",
        b"SQLite format 3\0".iter().copied().chain(std::iter::repeat_n(0u8, 4080)).collect(),
    ));
    for (what, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("store.redb");
        std::fs::write(&file, &bytes).unwrap();
        let stderr = expect_startup_failure(dir.path()).await;
        assert!(stderr.contains("store.redb"), "{what}: the error should name store.redb:\n{stderr}");
        assert!(std::fs::read(&file).unwrap() == bytes, "{what}: the file was modified");
    }
}

#[tokio::test]
async fn foreign_redb_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.redb");
    {
        // A perfectly good redb database, written by somebody else.
        let db = redb::Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(redb::TableDefinition::<&str, &str>::new("other-app")).unwrap();
            t.insert("k", "v").unwrap();
        }
        txn.commit().unwrap();
    }
    let stderr = expect_startup_failure(dir.path()).await;
    assert!(stderr.contains("store.redb"), "the error should name store.redb:\n{stderr}");
    assert!(stderr.contains("not a jobset data file"), "the error should say what is wrong:\n{stderr}");
    // The other application's data is untouched (redb may rewrite its own bookkeeping on open).
    {
        let db = redb::Database::open(&file).expect("the foreign database still opens");
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let t =
            txn.open_table(redb::TableDefinition::<&str, &str>::new("other-app")).expect("its table is still there");
        assert_eq!(t.get("k").unwrap().map(|v| v.value().to_string()).as_deref(), Some("v"));
        assert!(
            txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("objects")).is_err(),
            "jobset tables were added"
        );
    }

    // store.redb as a directory.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("store.redb")).unwrap();
    let stderr = expect_startup_failure(dir.path()).await;
    assert!(stderr.contains("store.redb"), "the error should name store.redb:\n{stderr}");
}

#[tokio::test]
async fn missing_pki_file_is_a_clear_error() {
    for missing in ["pki/ca.key", "pki/ca.crt", "pki/server.crt", "pki/server.key"] {
        let dir = tempfile::tempdir().unwrap();
        // A real data dir with something in it.
        let server = start(dir.path(), 0, &[]).await;
        let api: Api<ConfigMap> = Api::namespaced(server.client().await, "default");
        call("create", api.create(&PostParams::default(), &cm("kept", 1))).await;
        server.crash().await;

        std::fs::remove_file(dir.path().join(missing)).unwrap();
        let stderr = expect_startup_failure(dir.path()).await;
        let file = Path::new(missing).file_name().unwrap().to_str().unwrap();
        assert!(
            stderr.contains(file) && stderr.contains("missing"),
            "missing {missing}: the error should name it:\n{stderr}"
        );
        // The store itself is intact: nothing was generated over the remaining files.
        assert!(dir.path().join("store.redb").exists());
    }
}

/// The token only authenticates to this server and every start rewrites the kubeconfig, so a
/// lost token is replaced; the CA, which existing kubeconfigs trust, is kept.
#[tokio::test]
async fn missing_token_is_replaced_and_the_store_kept() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 0, &[]).await;
    let api: Api<ConfigMap> = Api::namespaced(server.client().await, "default");
    call("create", api.create(&PostParams::default(), &cm("kept", 1))).await;
    server.crash().await;
    let ca = std::fs::read(dir.path().join("pki/ca.crt")).unwrap();
    std::fs::remove_file(dir.path().join("token")).unwrap();
    let server = start(dir.path(), 0, &[]).await;
    let api: Api<ConfigMap> = Api::namespaced(server.client().await, "default");
    assert!(call("get", api.get_opt("kept")).await.is_some());
    assert_eq!(std::fs::read(dir.path().join("pki/ca.crt")).unwrap(), ca);
    server.kill().await;
}

/// Kills `jobset up` early in its first start on an empty data dir, then starts it again.
async fn kill_during_first_start(rng: &mut impl Rng) -> (Vec<&'static str>, Result<(), String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = command(dir.path(), 0, &[]).spawn().expect("spawn");
    tokio::time::sleep(Duration::from_micros(rng.random_range(0..40_000))).await;
    child.kill().await.expect("kill -9");
    let left: Vec<&str> =
        ["store.redb", "store.redb.tmp", "pki", "token"].into_iter().filter(|f| dir.path().join(f).exists()).collect();
    let restarted = match try_start(dir.path(), 0, &[]).await {
        Ok(server) => {
            let api: Api<ConfigMap> = Api::namespaced(server.client().await, "default");
            call("create after the first-start crash", api.create(&PostParams::default(), &cm("x", 1))).await;
            server.kill().await;
            assert!(!dir.path().join("store.redb.tmp").exists(), "a leftover store.redb.tmp was not cleaned up");
            Ok(())
        }
        Err(e) => Err(e),
    };
    (left, restarted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_first_start_never_bricks_the_store() {
    let mut rng = rand::rng();
    for i in 0..20 {
        let (left, restarted) = kill_during_first_start(&mut rng).await;
        if let Err(e) = restarted {
            // Only the store is checked here; see the ignored test below for the token.
            assert!(
                !e.contains("store.redb"),
                "#{i}: killed during the first start (left {left:?}), the store is refused:\n{e}"
            );
        }
    }
}

/// A kill at any moment of the first start (between placing `pki/` and the token included)
/// leaves a data dir the next start accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_first_start_leaves_a_startable_data_dir() {
    let mut rng = rand::rng();
    for i in 0..60 {
        let (left, restarted) = kill_during_first_start(&mut rng).await;
        if let Err(e) = restarted {
            panic!("#{i}: killed during the first start (left {left:?}), the data dir is refused:\n{e}");
        }
    }
}

#[tokio::test]
async fn leftover_temporary_store_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.redb.tmp"), b"half-written garbage from a crash").unwrap();
    let server = start(dir.path(), 0, &[]).await;
    let api: Api<ConfigMap> = Api::namespaced(server.client().await, "default");
    call("create", api.create(&PostParams::default(), &cm("fresh", 1))).await;
    server.kill().await;
    assert!(!dir.path().join("store.redb.tmp").exists());
    assert!(dir.path().join("store.redb").exists());
}
