//! Admission warnings reach the user as kubectl shows them: `Warning: <text>` on stderr, and the
//! object is still created. The JobSet hook warns about an `InPlaceRestart` JobSet whose pods run
//! no in-place restart agent. kubectl must be on PATH for the kubectl test, as in kubectl.rs.

mod common;

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

const LIMIT: Duration = Duration::from_secs(60);

const WARNING: &str = r#"Warning: spec.replicatedJobs[0].template.spec.template.spec: no container runs the in-place restart agent (image registry.k8s.io/jobset/in-place-restart-agent, "jobset agent", or env JOBSET_NAME and POD_NAME); its pods will not take part in in-place restarts"#;

/// A suspended InPlaceRestart JobSet; `AGENT` becomes the pod's init containers.
const JOBSET: &str = r#"apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: NAME
spec:
  suspend: true
  failurePolicy:
    restartStrategy: InPlaceRestart
    maxRestarts: 3
  replicatedJobs:
  - name: workers
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 2147483647
        podReplacementPolicy: Failed
        template:
          spec:
            restartPolicy: Never
            initContainers: AGENT
            containers:
            - name: main
              image: busybox
              command: ["sh", "-c", "echo hello"]
"#;

const AGENT: &str =
    r#"[{name: agent, image: "registry.k8s.io/jobset/in-place-restart-agent:v0.11.0", restartPolicy: Always}]"#;

fn manifest(dir: &std::path::Path, name: &str, agent: bool) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, JOBSET.replace("NAME", name).replace("AGENT", if agent { AGENT } else { "[]" })).unwrap();
    path.to_string_lossy().into_owned()
}

async fn exists(server: &common::Server, name: &str) -> bool {
    let gvk = GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet");
    let api: Api<DynamicObject> = Api::default_namespaced_with(server.client().await, &ApiResource::from_gvk(&gvk));
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_apply_prints_admission_warnings_and_creates_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"), 0, &[]).await;
    let kubeconfig = server.kubeconfig.to_string_lossy().into_owned();

    let file = manifest(dir.path(), "no-agent", false);
    let out = common::jobset(&["apply", "-f", &file, "--kubeconfig", &kubeconfig], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stderr.lines().filter(|l| l.starts_with("Warning: ")).collect::<Vec<_>>(), [WARNING], "{out:?}");
    assert_eq!(out.stdout.trim(), "jobset.jobset.x-k8s.io/no-agent created", "{out:?}");
    assert!(exists(&server, "no-agent").await);

    // Applying it again warns again (admission runs on update too).
    let out = common::jobset(&["apply", "-f", &file, "--kubeconfig", &kubeconfig], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains(WARNING), "{out:?}");

    let file = manifest(dir.path(), "with-agent", true);
    let out = common::jobset(&["apply", "-f", &file, "--kubeconfig", &kubeconfig], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("Warning"), "{out:?}");
    assert!(exists(&server, "with-agent").await);
    server.kill().await;
}

/// Finds `kubectl` on PATH, failing the test with install instructions when it is missing.
fn kubectl_path() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "kubectl is not on PATH: this test drives a real kubectl. Install Debian's \
             `kubernetes-client` package (`apt-get install kubernetes-client`), as CI does."
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_prints_the_warning() {
    let kubectl = kubectl_path();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"), 0, &[]).await;
    let file = manifest(dir.path(), "no-agent", false);
    let child = tokio::process::Command::new(kubectl)
        .args(["--request-timeout=20s", "apply", "-f", &file])
        .env("KUBECONFIG", &server.kubeconfig)
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning kubectl");
    let out = tokio::time::timeout(LIMIT, child.wait_with_output()).await.expect("kubectl finishes").unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains(WARNING), "stderr:\n{stderr}");
    assert!(stdout.contains("jobset.jobset.x-k8s.io/no-agent created"), "stdout:\n{stdout}");
    assert!(exists(&server, "no-agent").await);
    server.kill().await;
}
