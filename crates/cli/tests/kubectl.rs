//! Drives a real `kubectl` against `jobset up`.
//!
//! Each test starts its own server (`--port 0`, a temporary data dir) and runs kubectl with
//! `KUBECONFIG` pointing at the kubeconfig it writes and `HOME` set to a fresh directory, so the
//! discovery cache starts cold. kubectl must be on PATH: both Debian's `kubernetes-client` (1.20)
//! and the 1.32 dispatcher are supported, so only the output both print is asserted.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Passed to every kubectl invocation, so a hung request fails instead of blocking CI.
const REQUEST_TIMEOUT: &str = "--request-timeout=20s";
/// Wall-clock limit for one kubectl command (covers `delete`'s wait, which has no request timeout).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `jobset up` may take to print its listening line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const LISTENING: &str = "jobset API server listening on https://127.0.0.1:";

/// A suspended JobSet (so it never finishes while a test changes it) whose Indexed Jobs have
/// `parallelism == completions == SIZE`: the one part of `replicatedJobs` that stays mutable
/// (elastic JobSets).
const JOBSET: &str = r#"apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: NAME
spec:
  suspend: true
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: SIZE
        completions: SIZE
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox
              command: ["sh", "-c", "echo hello"]
"#;

fn jobset(name: &str, size: u32) -> String {
    JOBSET.replace("NAME", name).replace("SIZE", &size.to_string())
}

fn job(name: &str, tier: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    tier: {tier}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["true"]
"#
    )
}

fn pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    app: watched
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
"#
    )
}

/// The result of one kubectl run.
struct Output {
    args: Vec<String>,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Output {
    fn describe(&self) -> String {
        format!(
            "kubectl {}\n  exit: {}\n  stdout:\n{}\n  stderr:\n{}",
            self.args.join(" "),
            self.status,
            indent(&self.stdout),
            indent(&self.stderr)
        )
    }

    /// Asserts exit code 0 and returns stdout.
    #[track_caller]
    fn ok(&self) -> &str {
        assert!(self.status.success(), "expected success from {}", self.describe());
        &self.stdout
    }

    /// Asserts a non-zero exit code and returns stderr.
    #[track_caller]
    fn failed(&self) -> &str {
        assert!(!self.status.success(), "expected failure from {}", self.describe());
        assert!(
            !self.stderr.contains("panic") && !self.stderr.contains("goroutine "),
            "kubectl crashed instead of printing a clean error: {}",
            self.describe()
        );
        &self.stderr
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    | {l}")).collect::<Vec<_>>().join("\n")
}

/// Asserts that `haystack` contains every needle, showing the whole output otherwise.
#[track_caller]
fn assert_contains(out: &Output, haystack: &str, needles: &[&str]) {
    for needle in needles {
        assert!(haystack.contains(needle), "expected {needle:?} in the output of {}", out.describe());
    }
}

/// Finds `kubectl` on PATH, failing the test with install instructions when it is missing.
fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "kubectl is not on PATH: these tests drive a real kubectl. Install Debian's \
                 `kubernetes-client` package (`apt-get install kubernetes-client`), as CI does."
        )
    })
}

/// Spawns a reader thread that forwards `reader`'s lines over a channel.
fn line_channel(reader: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads all of `reader` on a thread.
fn collect(mut reader: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        reader.read_to_end(&mut buf).ok();
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Kills a child that was started in its own process group, with everything it started.
fn kill_group(child: &mut Child) {
    let pid = child.id();
    let killed = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !killed {
        child.kill().ok();
    }
    child.wait().ok();
}

/// A `jobset up` server plus the environment kubectl runs in. Dropping it kills the server.
struct Cluster {
    server: Child,
    kubectl: PathBuf,
    url: String,
    data: TempDir,
    home: TempDir,
    work: TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let kubectl = kubectl_path();
        let data = TempDir::new().expect("temp data dir");
        let home = TempDir::new().expect("temp HOME");
        let work = TempDir::new().expect("temp work dir");
        let log = fs::File::create(data.path().join("server.log")).expect("server log file");
        let mut server = Command::new(env!("CARGO_BIN_EXE_jobset"))
            .args(["up", "--port", "0", "--data-dir"])
            .arg(data.path())
            // A standalone kubeconfig: the user's ~/.kube/config is left alone.
            .arg("--kubeconfig")
            .arg(data.path().join("kubeconfig"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawning `jobset up`");
        let lines = line_channel(server.stdout.take().expect("server stdout"));
        // From here on the guard kills the server whatever happens.
        let mut cluster = Cluster { server, kubectl, url: String::new(), data, home, work };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.starts_with(LISTENING) => {
                    cluster.url = line["jobset API server listening on ".len()..].trim().to_string();
                    break;
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("`jobset up` did not print {LISTENING:?} within {STARTUP_TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = cluster.server.wait().ok();
                    panic!("`jobset up` exited before listening ({status:?})")
                }
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        thread::spawn(move || for _ in lines {});
        assert!(cluster.kubeconfig().is_file(), "no kubeconfig at {}", cluster.kubeconfig().display());
        eprintln!("jobset up: {} (kubectl: {})", cluster.url, cluster.kubectl.display());
        cluster
    }

    fn kubeconfig(&self) -> PathBuf {
        self.data.path().join("kubeconfig")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg(REQUEST_TIMEOUT)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", self.home.path())
            .current_dir(self.work.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }

    /// Runs kubectl to completion (killing it after [`COMMAND_TIMEOUT`]).
    fn kubectl(&self, args: &[&str]) -> Output {
        let started = Instant::now();
        let mut child = self.command(args).spawn().expect("spawning kubectl");
        let stdout = collect(child.stdout.take().expect("kubectl stdout"));
        let stderr = collect(child.stderr.take().expect("kubectl stderr"));
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for kubectl") {
                break status;
            }
            if started.elapsed() > COMMAND_TIMEOUT {
                kill_group(&mut child);
                panic!(
                    "kubectl {} did not finish within {COMMAND_TIMEOUT:?}\n  stdout:\n{}\n  stderr:\n{}",
                    args.join(" "),
                    indent(&stdout.join().unwrap_or_default()),
                    indent(&stderr.join().unwrap_or_default())
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        let out = Output {
            args: args.iter().map(|s| s.to_string()).collect(),
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        };
        eprintln!("$ kubectl {}  [{:?}, {}]", args.join(" "), started.elapsed(), out.status);
        out
    }

    /// Runs kubectl, asserting success, and returns stdout.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        self.kubectl(args).ok().to_string()
    }

    /// `kubectl get KIND NAME -o json`, parsed.
    #[track_caller]
    fn get_json(&self, kind: &str, name: &str) -> serde_json::Value {
        let out = self.kubectl(&["get", kind, name, "-o", "json"]);
        serde_json::from_str(out.ok()).unwrap_or_else(|e| panic!("bad JSON ({e}) from {}", out.describe()))
    }

    /// Writes a manifest into the work dir (kubectl's cwd) and returns its file name.
    fn manifest(&self, file: &str, content: &str) -> String {
        fs::write(self.work.path().join(file), content).expect("writing manifest");
        file.to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.server.kill().ok();
        self.server.wait().ok();
        // Its process containers outlive a kill -9 by design; the test's end is theirs too.
        common::kill_kept_containers(self.data.path());
        // On failure, show the server's log too, to tell a server error from a kubectl one.
        if thread::panicking() {
            let log = fs::read_to_string(self.data.path().join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            if !tail.is_empty() {
                eprintln!("--- jobset up log (last {} lines) ---\n{}", tail.len(), tail.join("\n"));
            }
        }
    }
}

/// `parallelism` of the JobSet's Jobs (equal to `completions`).
fn size(js: &serde_json::Value) -> u64 {
    let spec = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(spec["parallelism"], spec["completions"], "{js:#}");
    spec["parallelism"].as_u64().expect("spec.replicatedJobs[0].template.spec.parallelism")
}

/// Rows of a `kubectl get` table, by first column.
fn row_names(table: &str) -> Vec<String> {
    table.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

#[test]
fn apply_client_and_server_side() {
    let c = Cluster::start();

    // 1. Client-side apply: created, configured (with the change visible), unchanged.
    let f = c.manifest("demo.yaml", &jobset("demo", 2));
    let out = c.kubectl(&["apply", "-f", &f]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo created"]);
    assert_eq!(size(&c.get_json("jobset", "demo")), 2);

    c.manifest("demo.yaml", &jobset("demo", 3));
    let out = c.kubectl(&["apply", "-f", &f]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo configured"]);
    let js = c.get_json("jobset", "demo");
    assert_eq!(size(&js), 3, "apply did not change parallelism: {js:#}");
    assert!(
        js["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string(),
        "no last-applied-configuration annotation: {js:#}"
    );

    // Re-applying the same manifest: kubectl sees the server-defaulted fields inside
    // `replicatedJobs` (a list, which a JSON merge patch replaces whole) and sends the list again;
    // the server defaults it again, so nothing changes and nothing is rejected as immutable.
    let out = c.kubectl(&["apply", "-f", &f]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo configured"]);
    let again = c.get_json("jobset", "demo");
    assert_eq!(again["spec"], js["spec"], "re-apply changed the spec");
    assert_eq!(again["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"], "Indexed", "{again:#}");

    // 2. Server-side apply: a new object, the same object changed, and an existing
    // (client-side applied) object re-applied as is.
    let g = c.manifest("ssa.yaml", &jobset("demo-ssa", 1));
    let out = c.kubectl(&["apply", "--server-side", "-f", &g]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo-ssa serverside-applied"]);
    assert_eq!(size(&c.get_json("jobset", "demo-ssa")), 1);

    c.manifest("ssa.yaml", &jobset("demo-ssa", 4));
    let out = c.kubectl(&["apply", "--server-side", "-f", &g]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo-ssa serverside-applied"]);
    assert_eq!(size(&c.get_json("jobset", "demo-ssa")), 4);

    let out = c.kubectl(&["apply", "--server-side", "-f", &f]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo serverside-applied"]);
    assert_eq!(size(&c.get_json("jobset", "demo")), 3);

    // 10. create of an existing object.
    let out = c.kubectl(&["create", "-f", &f]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["AlreadyExists", "jobsets.jobset.x-k8s.io \"demo\" already exists"]);
}

#[test]
fn get_describe_and_api_resources() {
    let c = Cluster::start();
    let f = c.manifest("demo.yaml", &jobset("demo", 2));
    c.ok(&["apply", "-f", &f]);

    // 3. Table output with the CRD's printer columns.
    let out = c.kubectl(&["get", "jobsets"]);
    let table = out.ok();
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "STARTTIME", "AGE"] {
        assert!(header.split_whitespace().any(|c| c == column), "no {column} column in {}", out.describe());
    }
    assert_eq!(row_names(table), ["demo"], "{}", out.describe());

    let out = c.kubectl(&["get", "jobset", "demo", "-o", "yaml"]);
    assert_contains(
        &out,
        out.ok(),
        &["kind: JobSet", "apiVersion: jobset.x-k8s.io/v1alpha2", "name: demo", "resourceVersion:"],
    );

    // Label selectors on a built-in resource.
    let front = c.manifest("front.yaml", &job("job-frontend", "frontend"));
    let back = c.manifest("back.yaml", &job("job-backend", "backend"));
    let out = c.kubectl(&["create", "-f", &front]);
    assert_contains(&out, out.ok(), &["job.batch/job-frontend created"]);
    let out = c.kubectl(&["create", "-f", &back]);
    assert_contains(&out, out.ok(), &["job.batch/job-backend created"]);
    let out = c.kubectl(&["get", "jobs", "-l", "tier=frontend"]);
    assert_eq!(row_names(out.ok()), ["job-frontend"], "{}", out.describe());
    let out = c.kubectl(&["get", "jobs", "-l", "tier=backend"]);
    assert_eq!(row_names(out.ok()), ["job-backend"], "{}", out.describe());
    let out = c.kubectl(&["get", "jobs", "-l", "tier=nope"]);
    out.ok();
    assert_contains(&out, &out.stderr, &["No resources found"]);

    // 5. describe.
    let out = c.kubectl(&["describe", "jobset", "demo"]);
    let text = out.ok();
    let has_line =
        |key: &str, value: &str| text.lines().any(|l| l.strip_prefix(key).is_some_and(|rest| rest.trim() == value));
    assert!(has_line("Name:", "demo"), "no `Name: demo` line in {}", out.describe());
    assert!(has_line("Namespace:", "default"), "no `Namespace: default` line in {}", out.describe());
    assert!(has_line("Kind:", "JobSet"), "no `Kind: JobSet` line in {}", out.describe());
    assert!(has_line("API Version:", "jobset.x-k8s.io/v1alpha2"), "no `API Version:` line in {}", out.describe());
    assert_contains(&out, text, &["Replicated Jobs:", "workers"]);

    // 8. api-resources.
    let out = c.kubectl(&["api-resources"]);
    let text = out.ok();
    for (name, version, kind) in
        [("jobsets", "jobset.x-k8s.io/v1alpha2", "JobSet"), ("jobs", "batch/v1", "Job"), ("pods", "v1", "Pod")]
    {
        let found = text.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.first() == Some(&name) && cols.contains(&version) && cols.last() == Some(&kind)
        });
        assert!(found, "api-resources has no {name} {version} {kind} row: {}", out.describe());
    }
}

#[test]
fn patch_and_delete() {
    let c = Cluster::start();
    let f = c.manifest("demo.yaml", &jobset("demo", 2));
    c.ok(&["apply", "-f", &f]);

    // 6. Merge patch, then JSON patch.
    let out = c.kubectl(&["patch", "jobset", "demo", "--type=merge", "-p", r#"{"spec":{"suspend":true}}"#]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo patched"]);
    assert_eq!(c.ok(&["get", "jobset", "demo", "-o", "jsonpath={.spec.suspend}"]).trim(), "true");

    let out = c.kubectl(&[
        "patch",
        "jobset",
        "demo",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/suspend","value":false},{"op":"replace","path":"/spec/replicatedJobs/0/template/spec/parallelism","value":5},{"op":"replace","path":"/spec/replicatedJobs/0/template/spec/completions","value":5}]"#,
    ]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/demo patched"]);
    let js = c.get_json("jobset", "demo");
    assert_eq!(js["spec"]["suspend"], serde_json::json!(false), "{js:#}");
    assert_eq!(size(&js), 5, "{js:#}");

    // 7. delete returns (within COMMAND_TIMEOUT) and the object is gone.
    let out = c.kubectl(&["delete", "jobset", "demo"]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io \"demo\" deleted"]);
    let out = c.kubectl(&["get", "jobset", "demo"]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["NotFound", "\"demo\" not found"]);
    let out = c.kubectl(&["get", "jobsets"]);
    out.ok();
    assert_contains(&out, &out.stderr, &["No resources found"]);
}

#[test]
fn watch_sees_a_pod_created_while_watching() {
    let c = Cluster::start();
    let before = c.manifest("before.yaml", &pod("pod-before"));
    c.ok(&["create", "-f", &before]);

    // 4. `get pods -w`: wait for the initial listing, then create a pod, then expect its row.
    let mut watch = c.command(&["get", "pods", "-w"]).spawn().expect("spawning kubectl get pods -w");
    let lines = line_channel(watch.stdout.take().expect("watch stdout"));
    let stderr = collect(watch.stderr.take().expect("watch stderr"));
    let mut seen = Vec::new();
    let wait_for = |needle: &str, seen: &mut Vec<String>| -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            let hit = line.contains(needle);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    };
    let initial = wait_for("pod-before", &mut seen);
    let mut during = false;
    if initial {
        let f = c.manifest("during.yaml", &pod("pod-during"));
        let out = c.kubectl(&["create", "-f", &f]);
        assert_contains(&out, out.ok(), &["pod/pod-during created"]);
        during = wait_for("pod-during", &mut seen);
    }
    kill_group(&mut watch);
    let stderr = stderr.join().unwrap_or_default();
    let report = format!("watch stdout:\n{}\nwatch stderr:\n{}", indent(&seen.join("\n")), indent(&stderr));
    assert!(initial, "the watch never listed pod-before\n{report}");
    assert!(during, "the watch did not report pod-during, created while watching\n{report}");
    assert!(seen[0].split_whitespace().next() == Some("NAME"), "no header line first\n{report}");
    // Pods stay Pending: nothing runs them.
    assert!(seen.iter().any(|l| l.contains("pod-during") && l.contains("Pending")), "{report}");
}

#[test]
fn bad_manifests_get_clean_errors() {
    let c = Cluster::start();

    // 9. A server-side validation error.
    let bad = c.manifest("bad-name.yaml", &jobset("Bad_Name", 1));
    let out = c.kubectl(&["apply", "-f", &bad]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["is invalid", "metadata.name", "Bad_Name"]);
    let out = c.kubectl(&["create", "-f", &bad]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["is invalid", "metadata.name"]);

    // The wrong apiVersion for the kind, and a kind nobody serves: kubectl's mapping error.
    let wrong = c.manifest("wrong-version.yaml", &jobset("demo", 1).replace("jobset.x-k8s.io/v1alpha2", "batch/v1"));
    let out = c.kubectl(&["apply", "-f", &wrong]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["no matches for kind \"JobSet\" in version \"batch/v1\""]);

    let unknown = c.manifest(
        "unknown-kind.yaml",
        &jobset("demo", 1)
            .replace("jobset.x-k8s.io/v1alpha2", "example.com/v1")
            .replace("kind: JobSet", "kind: Widget"),
    );
    let out = c.kubectl(&["create", "-f", &unknown]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["no matches for kind \"Widget\" in version \"example.com/v1\""]);

    let out = c.kubectl(&["get", "widgets"]);
    let err = out.failed().to_string();
    assert_contains(&out, &err, &["the server doesn't have a resource type \"widgets\""]);

    // The server is still serving, and none of the bad objects exist.
    let out = c.kubectl(&["get", "jobsets"]);
    out.ok();
    assert_contains(&out, &out.stderr, &["No resources found"]);
    let good = c.manifest("good.yaml", &jobset("good", 1));
    let out = c.kubectl(&["apply", "-f", &good]);
    assert_contains(&out, out.ok(), &["jobset.jobset.x-k8s.io/good created"]);
    assert_eq!(row_names(&c.ok(&["get", "jobsets"])), ["good"]);
}

/// `metadata.name` of every item of a `kubectl get -o json` list.
fn item_names(list: &serde_json::Value) -> Vec<String> {
    let items = list["items"].as_array().unwrap_or_else(|| panic!("no items in {list:#}"));
    items.iter().filter_map(|i| i["metadata"]["name"].as_str()).map(str::to_string).collect()
}

#[test]
fn imperative_create_commands_send_protobuf() {
    use serde_json::json;
    let c = Cluster::start();

    // kubectl's generators post built-in objects as application/vnd.kubernetes.protobuf.
    let out = c.kubectl(&["create", "namespace", "team"]);
    assert_contains(&out, out.ok(), &["namespace/team created"]);
    let ns = c.get_json("namespace", "team");
    assert_eq!(ns["metadata"]["name"], "team", "{ns:#}");
    assert_eq!(ns["status"]["phase"], "Active", "{ns:#}");

    let out = c.kubectl(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team",
        "--from-literal=mode=fast",
        "--from-literal=level=3",
    ]);
    assert_contains(&out, out.ok(), &["configmap/settings created"]);
    let cm: serde_json::Value =
        serde_json::from_str(&c.ok(&["get", "configmap", "settings", "-n", "team", "-o", "json"]))
            .expect("configmap JSON");
    assert_eq!(cm["data"], json!({"mode": "fast", "level": "3"}), "{cm:#}");
    assert_eq!(cm["metadata"]["namespace"], "team", "{cm:#}");

    let out =
        c.kubectl(&["create", "secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=pass=s3cr3t"]);
    assert_contains(&out, out.ok(), &["secret/creds created"]);
    let secret = c.get_json("secret", "creds");
    // base64 of "admin" and "s3cr3t"
    assert_eq!(secret["data"], json!({"user": "YWRtaW4=", "pass": "czNjcjN0"}), "{secret:#}");

    let out = c.kubectl(&["create", "job", "hello", "--image=busybox", "--", "echo", "hello"]);
    assert_contains(&out, out.ok(), &["job.batch/hello created"]);
    let job = c.get_json("job", "hello");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never", "{job:#}");
    assert_eq!(pod["containers"][0]["name"], "hello", "{job:#}");
    assert_eq!(pod["containers"][0]["image"], "busybox", "{job:#}");
    assert_eq!(pod["containers"][0]["command"], json!(["echo", "hello"]), "{job:#}");

    let out = c.kubectl(&["create", "serviceaccount", "robot"]);
    assert_contains(&out, out.ok(), &["serviceaccount/robot created"]);
    assert_eq!(c.get_json("serviceaccount", "robot")["metadata"]["name"], "robot");

    let out = c.kubectl(&["create", "role", "reader", "--verb=get,list", "--resource=pods,configmaps"]);
    assert_contains(&out, out.ok(), &["role.rbac.authorization.k8s.io/reader created"]);
    let role = c.get_json("role", "reader");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list"]}]),
        "{role:#}"
    );

    let out = c.kubectl(&["create", "rolebinding", "robot-reads", "--role=reader", "--serviceaccount=default:robot"]);
    assert_contains(&out, out.ok(), &["rolebinding.rbac.authorization.k8s.io/robot-reads created"]);
    let binding = c.get_json("rolebinding", "robot-reads");
    assert_eq!(binding["roleRef"], json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}));
    assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]));

    let out = c.kubectl(&["create", "deployment", "web", "--image=nginx", "--replicas=0"]);
    assert_contains(&out, out.ok(), &["deployment.apps/web created"]);
    let deploy = c.get_json("deployment", "web");
    // A pointer set to zero survives (Go sends it; JSON absent would mean 1).
    assert_eq!(deploy["spec"]["replicas"], 0, "{deploy:#}");
    assert_eq!(deploy["spec"]["selector"], json!({"matchLabels": {"app": "web"}}), "{deploy:#}");

    let out = c.kubectl(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    assert_contains(&out, out.ok(), &["service/web created"]);
    let svc = c.get_json("service", "web");
    // targetPort is an IntOrString.
    assert_eq!(svc["spec"]["ports"][0]["port"], 80, "{svc:#}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080, "{svc:#}");
    assert_eq!(svc["spec"]["selector"], json!({"app": "web"}), "{svc:#}");

    let out =
        c.kubectl(&["run", "shell", "--image=busybox", "--restart=Never", "--labels=tier=debug", "--", "sleep", "60"]);
    assert_contains(&out, out.ok(), &["pod/shell created"]);
    let pod = c.get_json("pod", "shell");
    assert_eq!(pod["metadata"]["labels"], json!({"tier": "debug"}), "{pod:#}");
    assert_eq!(pod["spec"]["containers"][0]["args"], json!(["sleep", "60"]), "{pod:#}");

    // The objects list like any other.
    let list: serde_json::Value =
        serde_json::from_str(&c.ok(&["get", "configmaps,secrets", "-n", "team", "-o", "json"])).expect("list JSON");
    assert!(item_names(&list).contains(&"settings".to_string()), "{list:#}");
}

#[test]
fn resource_quotas_show_usage_and_refuse_what_exceeds_them() {
    let c = Cluster::start();
    let quota = c.manifest(
        "quota.yaml",
        r#"apiVersion: v1
kind: ResourceQuota
metadata:
  name: objects
spec:
  hard:
    configmaps: 1
    limits.memory: 2Gi
    pods: "4"
"#,
    );
    let out = c.kubectl(&["apply", "-f", &quota]);
    assert_contains(&out, out.ok(), &["resourcequota/objects created"]);
    let first = c.manifest("first.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n");
    c.ok(&["apply", "-f", &first]);

    // `quota` is the short name; the server's table has kube-apiserver's columns.
    let out = c.kubectl(&["get", "quota"]);
    let table = out.ok();
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"], "{}", out.describe());
    assert_contains(&out, table, &["objects", "configmaps: 1/1, pods: 0/4", "limits.memory: 0/2Gi"]);

    let out = c.kubectl(&["describe", "quota", "objects"]);
    let text = out.ok();
    for (resource, used, hard) in [("configmaps", "1", "1"), ("limits.memory", "0", "2Gi"), ("pods", "0", "4")] {
        let found = text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [resource, used, hard]);
        assert!(found, "no `{resource} {used} {hard}` row in {}", out.describe());
    }

    let second = c.manifest("second.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: second\n");
    let out = c.kubectl(&["apply", "-f", &second]);
    assert_contains(
        &out,
        out.failed(),
        &[
            r#"configmaps "second" is forbidden: exceeded quota: objects, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"#,
        ],
    );
}

#[test]
fn priority_classes_are_listed_and_an_unknown_class_is_refused() {
    let c = Cluster::start();
    let class = c.manifest(
        "class.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: high\nvalue: 1000\ndescription: urgent\n",
    );
    let out = c.kubectl(&["apply", "-f", &class]);
    assert_contains(&out, out.ok(), &["priorityclass.scheduling.k8s.io/high created"]);

    // `pc` is the short name; the server's table has kube-apiserver's columns.
    let out = c.kubectl(&["get", "pc"]);
    let table = out.ok();
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"], "{}", out.describe());
    assert_eq!(row_names(table), ["high", "system-cluster-critical", "system-node-critical"], "{}", out.describe());
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!([row[1], row[2], row[4]], ["1000", "false", "PreemptLowerPriority"], "{}", out.describe());

    let pod = c.manifest(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  priorityClassName: x\n  containers:\n  - name: c\n    image: busybox\n",
    );
    let out = c.kubectl(&["apply", "-f", &pod]);
    assert_contains(&out, out.failed(), &[r#"pods "p" is forbidden: no PriorityClass with name x was found"#]);
}

#[test]
fn upstreams_in_place_restart_service_account_file_applies() {
    let c = Cluster::start();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/in-place-restart/service-account.yaml");
    let out = c.kubectl(&["apply", "-f", file]);
    assert_contains(
        &out,
        out.ok(),
        &[
            "serviceaccount/jobset-in-place-restart created",
            "role.rbac.authorization.k8s.io/jobset-in-place-restart created",
            "rolebinding.rbac.authorization.k8s.io/jobset-in-place-restart created",
            "validatingadmissionpolicy.admissionregistration.k8s.io/jobset-in-place-restart created",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/jobset-in-place-restart created",
        ],
    );
    let role = c.get_json("role", "jobset-in-place-restart");
    assert_eq!(role["rules"][1]["resources"], serde_json::json!(["jobsets"]), "{role:#}");
}

#[test]
fn pod_disruption_budgets_are_listed_with_kubectls_columns() {
    let c = Cluster::start();
    let pdb = c.manifest(
        "pdb.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: workers\nspec:\n  minAvailable: 2\n  selector:\n    matchLabels:\n      app: workers\n",
    );
    let out = c.kubectl(&["apply", "-f", &pdb]);
    assert_contains(&out, out.ok(), &["poddisruptionbudget.policy/workers created"]);
    // `kubectl create pdb` posts protobuf.
    let out = c.kubectl(&["create", "pdb", "imperative", "--selector=app=x", "--max-unavailable=25%"]);
    assert_contains(&out, out.ok(), &["poddisruptionbudget.policy/imperative created"]);
    // `pdb` is the short name; the server's table has kube-apiserver's columns.
    let out = c.kubectl(&["get", "pdb"]);
    let table = out.ok();
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"],
        "{}",
        out.describe()
    );
    let rows: Vec<Vec<&str>> = table.lines().skip(1).map(|l| l.split_whitespace().take(4).collect()).collect();
    assert_eq!(rows, [["imperative", "N/A", "25%", "0"], ["workers", "2", "N/A", "0"]], "{}", out.describe());
}
