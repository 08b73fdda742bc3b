//! The admission webhooks end to end, as on a real cluster: the shipped config/ is applied with
//! kubectl to `jobset up --external-controllers jobset,appwrapper` (which leaves JobSet and
//! AppWrapper admission to the webhooks), the webhook Service is pointed at `jobset manager`'s
//! webhook port (as an admin would edit a Service), the manager runs with the shipped
//! ServiceAccount's token and internal certificate management, and a real kubectl sees the CRD
//! schema's unknown-field warning and error, the webhook's denial over TLS and its defaults, and
//! kube-apiserver's answers when the manager is down. kubectl must be on PATH, as in kubectl.rs.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::pair::*;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;

/// Passed to every kubectl command, so that a hung request fails instead of blocking CI.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Wall-clock limit of one kubectl command.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a finished kubectl printed.
#[derive(Debug)]
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// A real kubectl with the admin's kubeconfig and a HOME of its own (a cold discovery cache).
struct Kubectl {
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn new(kubeconfig: &Path) -> Kubectl {
        Kubectl { kubeconfig: kubeconfig.to_path_buf(), home: tempfile::tempdir().unwrap() }
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = tokio::process::Command::new(kubectl_path())
            .arg(format!("--request-timeout={}s", REQUEST_TIMEOUT.as_secs()))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(KUBECTL_TIMEOUT, out)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not end within {KUBECTL_TIMEOUT:?}"))
            .expect("run kubectl");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl and asserts it succeeded.
    async fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args).await;
        assert!(out.ok, "kubectl {args:?} failed: {out:?}");
        out
    }

    /// Runs kubectl and asserts it failed cleanly; returns its stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(!out.ok, "kubectl {args:?} succeeded: {out:?}");
        assert!(!out.stderr.contains("panic") && !out.stderr.contains("goroutine "), "kubectl crashed: {out:?}");
        out.stderr
    }

    /// Whether this kubectl has server-side field validation (`--validate=warn|strict`, 1.25+;
    /// Debian's kubernetes-client is 1.20).
    async fn has_field_validation(&self) -> bool {
        let out = self.ok(&["version", "--client", "-o", "json"]).await;
        let v: Value = serde_json::from_str(&out.stdout).expect("kubectl version -o json prints JSON");
        let minor = v["clientVersion"]["minor"].as_str().unwrap_or_default();
        let minor: u32 =
            minor.trim_end_matches('+').parse().unwrap_or_else(|_| panic!("kubectl minor version {minor:?}"));
        minor >= 25
    }

    /// JobSet `name` as stored, or None when there is none.
    async fn jobset(&self, name: &str) -> Option<Value> {
        let out = self.run(&["get", "jobset", name, "-o", "json"]).await;
        if !out.ok {
            assert!(out.stderr.contains("NotFound"), "kubectl get jobset {name}: {out:?}");
            return None;
        }
        Some(serde_json::from_str(&out.stdout).expect("kubectl get -o json prints JSON"))
    }
}

/// `kubectl` on PATH (CI installs Debian's kubernetes-client).
fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("kubectl is not on PATH: this test drives a real kubectl (apt-get install kubernetes-client)")
    })
}

/// A JobSet manifest `name` with one replicated job; `spec` and `rjob` are extra YAML lines
/// (indented) of its spec and of its replicated job. Suspended unless `spec` says otherwise, so
/// that it never runs.
fn jobset(name: &str, spec: &str, rjob: &str) -> String {
    format!(
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: {name}\nspec:\n  suspend: true\n{spec}\
         \x20 replicatedJobs:\n  - name: workers\n{rjob}\
         \x20   template:\n      spec:\n        template:\n          spec:\n            \
         containers:\n            - name: main\n              image: busybox\n              command: [\"true\"]\n"
    )
}

/// A suspended AppWrapper manifest `name` wrapping one object of `kind`.
fn appwrapper(name: &str, kind: &str) -> String {
    format!(
        "apiVersion: workload.codeflare.dev/v1beta2\nkind: AppWrapper\nmetadata:\n  name: {name}\nspec:\n  suspend: true\n  \
         components:\n  - template:\n      apiVersion: {}\n      kind: {kind}\n      metadata:\n        name: {name}-inner\n      \
         spec:\n        {}\n",
        if kind == "Job" { "batch/v1" } else { "workload.codeflare.dev/v1beta2" },
        if kind == "Job" {
            "template:\n          spec:\n            restartPolicy: Never\n            containers:\n            - name: main\n              image: busybox\n              command: [\"true\"]"
        } else {
            "components: []"
        },
    )
}

/// Writes `text` to `dir/name` and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// How kubectl prints upstream's denial of a JobSet whose first replicated job has `dependsOn`.
const INVALID_CAUSES: &str =
    r#"The JobSet "invalid" is invalid: <nil>: Internal error: DependsOn can't be set for the first ReplicatedJob"#;
/// That denial's message, as kube-apiserver wraps a webhook's.
const DENIED: &str = r#"admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "invalid" is invalid: <nil>: Internal error: DependsOn can't be set for the first ReplicatedJob"#;

/// Creates the JobSet of manifest `yaml` as the admin, through the API, which must refuse it:
/// the Status's code, reason and message.
async fn denial(c: &Cluster, yaml: &str) -> (u16, String, String) {
    let api: Api<DynamicObject> = Api::namespaced_with(c.admin().await, "default", &jobset_resource());
    let obj: DynamicObject = serde_saphyr::from_str(yaml).expect("a JobSet manifest");
    match api.create(&PostParams::default(), &obj).await {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("creating {yaml} was not refused: {other:?}"),
    }
}

/// Sets the failurePolicy of the JobSet webhooks (`mjobset.kb.io`, `vjobset.kb.io`: the first
/// webhook of each shipped configuration), as an admin would with `kubectl patch`.
async fn set_jobset_webhooks_failure_policy(kubectl: &Kubectl, policy: &str) {
    for (kind, name) in [
        ("mutatingwebhookconfiguration", "jobset-mutating-webhook-configuration"),
        ("validatingwebhookconfiguration", "jobset-validating-webhook-configuration"),
    ] {
        let patch = format!(r#"[{{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "{policy}"}}]"#);
        kubectl.ok(&["patch", kind, name, "--type=json", "-p", &patch]).await;
    }
}

/// The Done-when of the admission webhooks: kubectl against the shipped manifests and a
/// `jobset manager`, with every answer as kube-apiserver and upstream's webhooks give it; the
/// manager stopped (failurePolicy Fail: rejected, nothing stored; Ignore: let through), started
/// again, and the README's main example ends as in local mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_the_webhooks_defaults_and_denials_over_tls_and_the_readme_example_ends_as_in_local_mode() {
    let dir = tempfile::tempdir().unwrap();
    let server = up(dir.path()).await;
    let kubectl = Kubectl::new(&server.kubeconfig);
    let config = format!("{REPO}/config");
    kubectl.ok(&["apply", "--server-side", "-R", "-f", &config]).await;

    // The webhook Service leads to the manager's webhook port, as kube-proxy would to its pod.
    let port = free_port();
    let target = format!(r#"{{"spec": {{"ports": [{{"port": 443, "targetPort": {port}}}]}}}}"#);
    kubectl.ok(&["-n", NAMESPACE, "patch", "service", WEBHOOK_SERVICE, "-p", &target]).await;
    let c = Cluster::with_manager_token(server, dir).await;
    let manager_config = c.config_with_webhook_port(true, port);
    let m = Manager::start(&c.manager_kubeconfig, &manager_config, "manager-a", &[]).await;
    let files = c.dir.path();

    // A misspelled field: kubectl's unknown-field warning (--validate=warn) or strict decoding
    // error (kubectl's default, --validate=strict), from the CRD schema; the field is pruned.
    let typo = write(files, "typo.yaml", &jobset("typo", "  failurPolicy:\n    maxRestarts: 1\n", ""));
    if kubectl.has_field_validation().await {
        let out = kubectl.ok(&["apply", "--validate=warn", "-f", &typo]).await;
        assert!(out.stderr.contains(r#"Warning: unknown field "spec.failurPolicy""#), "{out:?}");
        let strict = write(files, "strict.yaml", &jobset("strict", "  failurPolicy:\n    maxRestarts: 1\n", ""));
        let stderr = kubectl.fails(&["apply", "-f", &strict]).await;
        assert!(
            stderr.contains(r#"JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: unknown field "spec.failurPolicy""#),
            "{stderr}"
        );
        assert_eq!(kubectl.jobset("strict").await, None);
    } else {
        eprintln!("kubectl predates --validate=warn|strict (1.25): only the pruning is checked");
        kubectl.ok(&["apply", "--validate=false", "-f", &typo]).await;
    }
    let stored = kubectl.jobset("typo").await.expect("the JobSet with a warning is stored");
    assert_eq!(stored["spec"].get("failurPolicy"), None, "the unknown field is pruned: {stored}");

    // An invalid JobSet the CRD schema accepts: denied by the manager's validating webhook, over
    // TLS, with upstream's message as kube-apiserver wraps it. kubectl prints a 422's causes
    // (the Status's details, kept as the webhook gave them); the message says who denied.
    let invalid_yaml = jobset("invalid", "", "    dependsOn:\n    - name: workers\n      status: Ready\n");
    let invalid = write(files, "invalid.yaml", &invalid_yaml);
    let stderr = kubectl.fails(&["apply", "-f", &invalid]).await;
    assert!(stderr.contains(INVALID_CAUSES), "{stderr}");
    assert_eq!(denial(&c, &invalid_yaml).await, (422, "Invalid".into(), DENIED.into()));
    assert_eq!(kubectl.jobset("invalid").await, None);

    // A JobSet that only the mutating webhook completes comes back with upstream's defaults.
    let minimal = write(files, "minimal.yaml", &jobset("minimal", "", ""));
    kubectl.ok(&["apply", "-f", &minimal]).await;
    let js = kubectl.jobset("minimal").await.expect("stored");
    for (path, want) in [
        ("/spec/successPolicy/operator", "All"),
        ("/spec/startupPolicy/startupPolicyOrder", "AnyOrder"),
        ("/spec/replicatedJobs/0/template/spec/completionMode", "Indexed"),
        ("/spec/replicatedJobs/0/template/spec/template/spec/restartPolicy", "OnFailure"),
    ] {
        assert_eq!(js.pointer(path).and_then(Value::as_str), Some(want), "{path} of {js}");
    }
    assert_eq!(js.pointer("/spec/network/enableDNSHostnames"), Some(&Value::Bool(true)), "{js}");
    // The CRD schema's default, which kube-apiserver applies itself.
    assert_eq!(js.pointer("/spec/replicatedJobs/0/replicas"), Some(&Value::from(1)), "{js}");

    // AppWrappers likewise: labelled with the requesting user by the mutating webhook, a nested
    // one denied by the validating webhook with upstream's message.
    let aw = write(files, "aw.yaml", &appwrapper("aw", "Job"));
    kubectl.ok(&["apply", "-f", &aw]).await;
    let out = kubectl.ok(&["get", "appwrapper", "aw", "-o", "json"]).await;
    let stored: Value = serde_json::from_str(&out.stdout).unwrap();
    // The admin's user name as upstream's label sanitizer writes it.
    let user = jobset_apiserver::auth::ADMIN_USERNAME.replace(':', "_");
    assert_eq!(stored.pointer("/metadata/labels/workload.codeflare.dev~1user"), Some(&Value::from(user)), "{stored}");
    let nested = write(files, "nested.yaml", &appwrapper("nested", "AppWrapper"));
    let stderr = kubectl.fails(&["apply", "-f", &nested]).await;
    assert!(
        stderr.contains(&format!(
            r#"Error from server (Forbidden): error when creating "{nested}": admission webhook "vappwrapper.kb.io" denied the request: [spec.components[0].template: Forbidden: Nested AppWrappers are forbidden, "#
        )),
        "{stderr}"
    );

    // The manager stopped, failurePolicy Fail: kube-apiserver's error, nothing stored, nothing lost.
    m.kill().await;
    let stderr = kubectl.fails(&["apply", "-f", &invalid]).await;
    let refused = format!(
        r#"Internal error occurred: failed calling webhook "mjobset.kb.io": failed to call webhook: Post "https://{WEBHOOK_SERVICE}.{NAMESPACE}.svc:443/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused"#
    );
    assert!(stderr.contains(&refused), "{stderr}");
    assert_eq!(kubectl.jobset("invalid").await, None);
    for name in ["typo", "minimal"] {
        assert!(kubectl.jobset(name).await.is_some(), "{name} was lost");
    }

    // Switched off (failurePolicy Ignore, manager stopped): the invalid JobSet gets through,
    // so the denial above was the webhook's.
    set_jobset_webhooks_failure_policy(&kubectl, "Ignore").await;
    let out = kubectl.ok(&["apply", "-f", &invalid]).await;
    assert!(out.stdout.contains("jobset.jobset.x-k8s.io/invalid created"), "{out:?}");
    kubectl.ok(&["delete", "jobset", "invalid", "typo", "minimal"]).await;

    // Switched on again, the manager started again with the ServiceAccount's token: denied again.
    set_jobset_webhooks_failure_policy(&kubectl, "Fail").await;
    let m = Manager::start(&c.manager_kubeconfig, &manager_config, "manager-a", &[]).await;
    assert_eq!(denial(&c, &invalid_yaml).await, (422, "Invalid".into(), DENIED.into()));

    // The README's main example ends through the manager exactly as in local mode.
    let example = format!("{REPO}/examples/failure-policy/restart-jobset.yaml");
    let admin = c.server.kubeconfig.to_string_lossy().into_owned();
    let local = common::jobset(&["run", &example, "--job-backoff", "10ms", "--timeout", "60s"], WAIT * 2).await;
    let pair = c.jobset_command(&["run", "--kubeconfig", &admin, &example, "--timeout", "60s"]).await;
    assert_eq!(local.code, 0, "{local:?}");
    assert_eq!(
        (pair.code, summary(&pair, "restart-jobset")),
        (local.code, summary(&local, "restart-jobset")),
        "through the manager vs local mode\nmanager:\n{}",
        m.stderr.lock().unwrap()
    );
    let js = c.jobset_until("restart-jobset", "Completed", |js| has_condition(js, "Completed")).await;
    assert_eq!(status_i64(&js, "restarts"), 2, "{js:?}");
    m.kill().await;
    c.server.check();
}
