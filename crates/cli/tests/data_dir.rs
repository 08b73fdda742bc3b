//! The data dir of `jobset up` (issue 24, pod isolation): private to its user (0700, files
//! 0600), but for what pods themselves read and write; held by one `jobset up` at a time, a lock
//! that a `kill -9` does not leave behind even with containers outliving it; and no Secret value
//! or token in any log of a run, at the most verbose log level.

mod common;
use common::pods::{main_container, running, wait_for};

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{Api, ListParams, LogParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(60);

/// A started `jobset up`, its stdout kept too.
struct Up {
    server: common::Server,
    stdout: Arc<Mutex<String>>,
    drains: Vec<tokio::task::JoinHandle<()>>,
}

/// `jobset up --data-dir DIR` with one process node, logging at `log` (`$JOBSET_LOG`).
async fn up(dir: &Path, log: &str) -> Up {
    let args = ["--nodes", "1", "--runtime", "process", "--heartbeat-interval", "100ms"];
    let mut cmd = common::command(dir, 0, &args);
    cmd.env("JOBSET_LOG", log).env("NO_COLOR", "1");
    let mut child = cmd.spawn().expect("spawn jobset up");
    let (stderr, drained) = common::drain_stderr(&mut child);
    let stdout = Arc::new(Mutex::new(String::new()));
    let (port_tx, port_rx) = tokio::sync::oneshot::channel();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let kept = stdout.clone();
    let read = tokio::spawn(async move {
        let mut port_tx = Some(port_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(common::LISTENING)
                && let Some(tx) = port_tx.take()
            {
                let _ = tx.send(rest.trim().parse::<u16>().expect("a port in the listening line"));
            }
            let mut out = kept.lock().unwrap();
            out.push_str(&line);
            out.push('\n');
        }
    });
    let port = match tokio::time::timeout(common::STARTUP_TIMEOUT, port_rx).await {
        Ok(Ok(port)) => port,
        _ => {
            panic!("jobset up did not listen within {:?}; stderr:\n{}", common::STARTUP_TIMEOUT, stderr.lock().unwrap())
        }
    };
    let server = common::Server { child, port, kubeconfig: dir.join("kubeconfig"), stderr, crashed: false };
    Up { server, stdout, drains: vec![drained, read] }
}

impl Up {
    /// SIGTERM (which stops every container), then waits for the exit and the last output.
    async fn stop(mut self) -> (String, String) {
        let pid = self.server.child.id().expect("jobset up runs") as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(WAIT, self.server.child.wait()).await.expect("jobset up stops on SIGTERM");
        assert!(status.unwrap().success(), "stderr:\n{}", self.server.stderr.lock().unwrap());
        for drain in self.drains {
            tokio::time::timeout(WAIT, drain).await.expect("the output ends with jobset up").unwrap();
        }
        self.server.check();
        let stdout = self.stdout.lock().unwrap().clone();
        let stderr = self.server.stderr.lock().unwrap().clone();
        (stdout, stderr)
    }
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn failed(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
}

/// Every file and directory under `dir` (not `dir` itself), depth first.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push(path.clone());
        if is_dir {
            walk(&path, out);
        }
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777
}

/// Creates pod `survivor`, a container that runs until killed; the host pid of its command once
/// it runs.
async fn survivor(pods: &Api<Pod>) -> i32 {
    let survivor = pod(json!({
        "metadata": {"name": "survivor"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "while true; do sleep 0.05; done"]}]}
    }));
    pods.create(&PostParams::default(), &survivor).await.unwrap();
    main_container(&wait_for(pods, "survivor", "running", WAIT, running).await).1
}

/// `jobset status` / `jobset down` on `dir`, with a HOME of their own (`down` edits
/// ~/.kube/config).
async fn lifecycle(command: &str, dir: &Path, home: &Path) -> common::Output {
    let mut cmd = common::jobset_command(&[command, "--data-dir", dir.to_str().unwrap()]);
    cmd.env("HOME", home);
    common::run_to_end(cmd, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_stops_the_containers_a_killed_jobset_up_left_and_never_signals_a_process_a_stale_pid_file_names() {
    let (dir, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = dir.path();
    let first = up(d, "warn").await;
    let pods: Api<Pod> = Api::default_namespaced(first.server.client().await);
    let pid = survivor(&pods).await;
    first.server.crash().await;
    // The killed `jobset up`'s pid file stays; its pid now names another process (here one of
    // ours, as after pid reuse), which holds no lock on the data dir.
    let mut stranger = tokio::process::Command::new("sleep").arg("600").kill_on_drop(true).spawn().unwrap();
    let stranger_pid = stranger.id().unwrap() as i32;
    std::fs::write(d.join("jobset.pid"), format!("{stranger_pid}\n")).unwrap();

    let status = lifecycle("status", d, home.path()).await;
    assert!(status.code == 0 && status.stdout.contains("Stopped"), "{status:?}");
    assert!(!status.stdout.contains(&stranger_pid.to_string()), "{status:?}");
    let down = lifecycle("down", d, home.path()).await;
    assert_eq!(down.code, 0, "{down:?}");
    assert!(down.stdout.contains("jobset cluster \"default\" is not running\n"), "{down:?}");
    assert!(down.stdout.contains("stopped 1 container(s) left running by a killed jobset up\n"), "{down:?}");
    common::gone(pid, "the container after jobset down", WAIT).await;
    assert!(common::alive(stranger_pid), "jobset down signalled the process the stale pid file named");
    stranger.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_jobset_up_on_a_data_dir_is_refused_and_a_killed_ones_containers_do_not_keep_it_locked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let first = up(d, "warn").await;
    let pods: Api<Pod> = Api::default_namespaced(first.server.client().await);
    let pid = survivor(&pods).await;

    let second = common::run_to_end(common::command(d, 0, &["--nodes", "0"]), WAIT).await;
    let holder = first.server.child.id().unwrap();
    let want = format!(
        "error: cluster \"default\" is already running (pid {holder}): its data dir {0} is in use by another `jobset up`; `jobset down --data-dir {0}` stops it",
        d.display()
    );
    assert_eq!((second.code, second.stderr.trim_end()), (1, want.as_str()), "{second:?}");
    assert!(!second.stdout.contains(common::LISTENING), "{second:?}");
    assert!(running(&pods.get("survivor").await.unwrap()), "the first one serves on");

    // A kill -9 leaves the container running under its supervisor, a process spawned by the
    // killed `jobset up`: it does not hold the lock, so the next one starts and adopts it.
    first.server.crash().await;
    assert!(common::alive(pid), "the container outlives a kill -9 of jobset up");
    let next = up(d, "warn").await;
    let pods: Api<Pod> = Api::default_namespaced(next.server.client().await);
    let adopted = pods.get("survivor").await.unwrap();
    assert!(running(&adopted) && main_container(&adopted).1 == pid, "{:?}", adopted.status);
    next.stop().await;
    common::gone(pid, "the container after a graceful stop of jobset up", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_is_private_to_its_user_but_for_what_pods_read_and_write() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("data");
    // As an older version left it.
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = up(&d, "warn").await;
    let tightened = format!(
        "{} was mode 0755, readable to others: made it 0700 (the data dir holds the cluster's keys and Secrets)",
        d.display()
    );
    assert!(server.server.stderr.lock().unwrap().contains(&tightened), "{}", server.server.stderr.lock().unwrap());

    let client = server.server.client().await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "stringData": {"password": "not-for-others"}
    }))
    .unwrap();
    Api::<Secret>::default_namespaced(client.clone()).create(&PostParams::default(), &secret).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let mounts = json!([{"name": "creds", "mountPath": "/etc/creds"}, {"name": "scratch", "mountPath": "/scratch"}]);
    let write = "cat /etc/creds/password > /dev/null && echo x > /tmp/f && mkdir /scratch/d && echo y > /scratch/d/g";
    let p = pod(json!({
        "metadata": {"name": "perms"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [{"name": "write", "image": "busybox", "command": ["sh", "-c", write], "volumeMounts": mounts}],
            "containers": [{"name": "main", "image": "busybox", "volumeMounts": mounts,
                "command": ["sh", "-c", "while true; do sleep 0.05; done"]}],
            "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}, {"name": "scratch", "emptyDir": {}}]}
    }));
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(&pods, "perms", "running (or failed)", WAIT, |p| running(p) || failed(p)).await;
    assert!(running(&p), "{:?}", p.status);
    let uid = p.metadata.uid.clone().unwrap();

    let mut paths = Vec::new();
    walk(&d, &mut paths);
    let sandbox = d.join("runtime/pods").join(&uid);
    // What the runtime deliberately leaves open, as kubelet does: the pod's /tmp (1777, as the
    // host's) and its volumes (the modes the pod asks for, and what its containers write there
    // with their usual umask 022), and the hosts files (0644, a pod's /etc/hosts for any
    // runAsUser, as kubelet's), all reached only through the pod's own mounts.
    let (tmp, volumes, hosts) = (sandbox.join("tmp"), sandbox.join("volumes"), d.join("hosts"));
    let for_pods = |p: &Path| {
        p.starts_with(&tmp) || (p.starts_with(&volumes) && p != volumes) || (p.starts_with(&hosts) && p != hosts)
    };
    let offenders: Vec<String> = paths
        .iter()
        .filter(|p| !for_pods(p))
        .filter(|p| mode(p) & 0o077 != 0)
        .map(|p| format!("{} {:04o}", p.display(), mode(p)))
        .collect();
    assert!(offenders.is_empty(), "readable or writable by group or others:\n{}", offenders.join("\n"));
    assert_eq!(mode(&d), 0o700);
    for file in ["store.redb", "token", "kubeconfig", "pki/ca.key", "jobset.lock", "jobset.pid"] {
        assert_eq!(mode(&d.join(file)), 0o600, "{file}");
    }
    assert!(paths.iter().any(|p| p.extension().is_some_and(|e| e == "log")), "container logs are among them");
    // The exceptions are what the pod made: its container ran with umask 022.
    assert_eq!(mode(&sandbox.join("tmp")), 0o1777);
    assert_eq!(mode(&sandbox.join("tmp/f")), 0o644);
    assert_eq!(mode(&sandbox.join("volumes/scratch/d")), 0o755);
    server.stop().await;
}

/// `bytes` as a Secret's `data` carries them: base64.
fn base64(bytes: &[u8]) -> String {
    let v = serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).unwrap();
    v.as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_or_token_reaches_any_log_of_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = up(d, "trace").await;
    let client = server.server.client().await;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let value = format!("leakcheck{nanos:x}{:x}", std::process::id());
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "db-creds"}, "stringData": {"password": value}})).unwrap();
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    secrets.get("db-creds").await.unwrap();

    // The Secret reaches the pod three ways (env, envFrom, volumes); the pod's token is used
    // against the API server.
    let check = r#"SA=/var/run/secrets/kubernetes.io/serviceaccount
[ -n "$PASSWORD" ] && [ "$PASSWORD" = "$password" ] && [ "$PASSWORD" = "$(cat /etc/creds/password)" ] \
  && [ "$PASSWORD" = "$(cat /etc/projected/password)" ] || { echo "the secret is missing"; exit 1; }
code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert $SA/ca.crt -H "Authorization: Bearer $(cat $SA/token)" \
  "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/default/pods/leak")
echo "api: $code"
[ "$code" = 200 ]"#;
    let from_secret =
        json!([{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}}]);
    let env_from = json!([{"secretRef": {"name": "db-creds"}}]);
    let mounts =
        json!([{"name": "creds", "mountPath": "/etc/creds"}, {"name": "projected", "mountPath": "/etc/projected"}]);
    let container = |name: &str, script: &str| {
        json!({"name": name, "image": "busybox", "command": ["sh", "-c", script],
            "env": from_secret, "envFrom": env_from, "volumeMounts": mounts})
    };
    let p = pod(json!({
        "metadata": {"name": "leak"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [container("check", check)],
            "containers": [container("main", "echo main started; while true; do sleep 0.05; done")],
            "volumes": [{"name": "creds", "secret": {"secretName": "db-creds"}},
                {"name": "projected", "projected": {"sources": [{"secret": {"name": "db-creds"}}]}}]}
    }));
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(&pods, "leak", "running (or failed)", WAIT, |p| running(p) || failed(p)).await;
    let check_log = pods.logs("leak", &LogParams { container: Some("check".into()), ..LogParams::default() }).await;
    assert!(running(&p), "{:?}\ncheck: {check_log:?}", p.status);
    assert_eq!(check_log.unwrap(), "api: 200\n", "the pod reached the API server with its token");

    // The main container's output is in its log before jobset up stops.
    let params = LogParams { container: Some("main".into()), follow: true, ..LogParams::default() };
    let started = tokio::time::timeout(WAIT, async {
        // Until its first line, the log is not there to follow ("waiting to start").
        let stream = loop {
            match pods.log_stream("leak", &params).await {
                Ok(stream) => break stream,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let mut lines = futures::AsyncBufReadExt::lines(stream);
        while let Some(Ok(line)) = lines.next().await {
            if line == "main started" {
                return true;
            }
        }
        false
    });
    assert!(started.await.unwrap_or(false), "the main container's log says it started");

    // What the container holds, read in its own mount namespace.
    let pid = main_container(&p).1;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&environ).contains(&format!("PASSWORD={value}")), "the secret is in the env");
    let kubeconfig = server.server.kubeconfig.to_str().unwrap().to_string();
    let token = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    let out = common::jobset(&["exec", "leak", "--kubeconfig", &kubeconfig, "--", "cat", token], WAIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    let pod_token = out.stdout;
    assert!(pod_token.len() > 20, "{pod_token:?}");
    let cluster_token = std::fs::read_to_string(d.join("token")).unwrap().trim().to_string();
    // Whatever events the run has (node agents record none for pods; controllers do for theirs).
    let events = Api::<Event>::all(client).list(&ListParams::default()).await.unwrap();
    let events = serde_json::to_string(&events.items).unwrap();
    let (stdout, stderr) = server.stop().await;
    assert!(stderr.contains(" TRACE ") && stderr.contains(" DEBUG "), "the most verbose level");

    // Every log of the run: jobset up's output (but the web UI's login line, the address it
    // prints on purpose for its user), every log file in the data dir, the events.
    let mut logs: Vec<(String, String)> = vec![
        ("jobset up's stderr".into(), stderr),
        (
            "jobset up's stdout".into(),
            stdout.lines().filter(|l| !l.starts_with("web UI: ")).collect::<Vec<_>>().join("\n"),
        ),
        ("the events".into(), events),
    ];
    let mut paths = Vec::new();
    walk(d, &mut paths);
    for path in
        paths.iter().filter(|p| p.is_file() && p.file_name().is_some_and(|n| n.to_string_lossy().contains(".log")))
    {
        logs.push((path.display().to_string(), String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned()));
    }
    let read: Vec<&str> = logs.iter().map(|(log, _)| log.as_str()).collect();
    assert!(logs.iter().any(|(_, text)| text.contains("main started")), "the container logs are among {read:?}");
    let needles = [
        ("the Secret's value", value.clone()),
        ("the Secret's value in base64", base64(value.as_bytes())),
        ("the pod's token", pod_token.trim().to_string()),
        ("the cluster's token", cluster_token),
    ];
    let leaks: Vec<String> = logs
        .iter()
        .flat_map(|(log, text)| {
            needles.iter().filter_map(move |(what, needle)| {
                let line = text.lines().find(|l| l.contains(needle.as_str()))?;
                Some(format!("{what} in {log}: {line}"))
            })
        })
        .collect();
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_jobset_up_keeps_the_token_out_of_its_log() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("data");
    let dir = d.to_str().unwrap();
    let kubeconfig = d.join("kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let args = ["up", "--detach", "--nodes", "0", "--port", "0", "--data-dir", dir, "--kubeconfig", kubeconfig];
    // `down` edits the user's kubeconfig: a home of its own.
    let jobset = |args: &[&str]| {
        let mut cmd = common::jobset_command(args);
        cmd.env("HOME", root.path()).env_remove("XDG_DATA_HOME");
        common::run_to_end(cmd, WAIT)
    };
    let up = jobset(&args).await;
    assert_eq!(up.code, 0, "{up:?}");
    let token = std::fs::read_to_string(d.join("token")).unwrap().trim().to_string();
    assert!(up.stdout.contains(&format!("#token={token}")), "the user is shown the login address: {up:?}");
    let down = jobset(&["down", "--data-dir", dir]).await;
    assert_eq!(down.code, 0, "{down:?}");
    let log = std::fs::read_to_string(d.join("jobset.log")).unwrap();
    assert!(log.contains(&format!("/login (token in {})\n", d.join("token").display())), "{log}");
    assert!(!log.contains(&token), "{log}");
    assert_eq!(mode(&d.join("jobset.log")), 0o600);
}
