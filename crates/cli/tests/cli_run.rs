//! `jobset run`: apply manifests to an embedded cluster (or a `jobset up`), show progress, exit
//! with the workload's outcome (0 succeeded, 1 failed, 2 timed out, 3 bad input).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

const LIMIT: Duration = Duration::from_secs(60);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SIMULATED_JOB: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: sim
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      annotations:
        sim.jobset.x-k8s.io/duration: "100ms"
        sim.jobset.x-k8s.io/exit-code: "0"
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox}]
"#;

const FAILING_JOB: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: exit3}
spec:
  backoffLimit: 0
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {operator: In, values: [3]}
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "exit 3"]}]
"#;

#[tokio::test]
async fn a_simulated_job_runs_to_success_with_progress() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "job.yaml", SIMULATED_JOB);
    let out = common::jobset(&["run", "--runtime", "simulated", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("configmap/settings created\njob.batch/sim created\n"), "{out:?}");
    assert!(out.stdout.contains("job.batch/sim: Succeeded, active 0, ready 0, succeeded 2, failed 0"), "{out:?}");
    assert!(out.stdout.ends_with("job.batch/sim succeeded\n"), "{out:?}");
}

#[tokio::test]
async fn a_failing_job_exits_1_with_the_failure_reason() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "fail.yaml", FAILING_JOB);
    let out = common::jobset(&["run", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("job.batch/exit3: Failed, active 0, ready 0, succeeded 0, failed 1"), "{out:?}");
    let last = out.stdout.lines().last().unwrap();
    assert!(
        last.starts_with("job.batch/exit3 failed: PodFailurePolicy: Container main for pod default/exit3-"),
        "{out:?}"
    );
    assert!(last.ends_with("failed with exit code 3 matching FailJob rule at index 0"), "{out:?}");
}

#[tokio::test]
async fn the_timeout_expiring_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "long.yaml", &FAILING_JOB.replace("exit3", "long").replace("exit 3", "sleep 30"));
    let started = Instant::now();
    let out = common::jobset(&["run", "--timeout", "1s", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("error: timed out after 1s: not finished: job.batch/long"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "the sleeping pod does not hold the exit up");
}

#[tokio::test]
async fn bad_input_exits_3_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\nmetadata:\n  name: b\n  labels: {a: [}\n",
    );
    let out = common::jobset(&["run", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    let want = format!("error: {}:8:", f.display());
    assert!(out.stderr.starts_with(&want), "{want:?} in {out:?}");
    assert!(!out.stdout.contains("created"), "nothing is applied: {out:?}");

    let f = write(
        dir.path(),
        "nokind.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n",
    );
    let out = common::jobset(&["run", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains(&format!("{}: document 2 (line 5): Object 'Kind' is missing", f.display())), "{out:?}");

    let f = write(dir.path(), "foo.yaml", "apiVersion: v1\nkind: Foo\nmetadata: {name: x}\n");
    let out = common::jobset(&["run", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    let want = format!(
        "error: resource mapping not found for name: \"x\" namespace: \"\" from {:?}: no matches for kind \"Foo\" in version \"v1\"",
        f.display().to_string()
    );
    assert!(out.stderr.starts_with(&want), "{want:?} in {out:?}");

    let out = common::jobset(&["run", "--timeout", "soon", f.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "usage errors exit 3: {out:?}");
}

#[tokio::test]
async fn the_appwrapper_config_is_read_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let job = write(dir.path(), "job.yaml", SIMULATED_JOB);
    let job = job.to_str().unwrap();
    let bad = write(dir.path(), "bad.yaml", "appwrapper:\n  faultTolerance:\n    resetPause: soon\n");
    let out = common::jobset(&["run", "--appwrapper-config", bad.to_str().unwrap(), job], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    let want = format!("error: {}: line 3 column 17: appwrapper.faultTolerance.resetPause: ", bad.display());
    assert!(out.stderr.starts_with(&want), "{want:?} in {out:?}");
    assert!(!out.stdout.contains("created"), "nothing is applied: {out:?}");

    // Upstream's ConfigMap, with a combination upstream refuses.
    let invalid = write(
        dir.path(),
        "configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: appwrapper-operator-config}\ndata:\n  config.yaml: |\n    \
         appwrapper:\n      faultTolerance: {resetPause: 90000000000000}\n",
    );
    let out = common::jobset(&["up", "--port", "0", "--appwrapper-config", invalid.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    let want = format!(
        "error: {}: ConfigMap data \"config.yaml\": RetryPausePeriod 25h0m0s exceeds GracePeriodCeiling 24h0m0s\n",
        invalid.display()
    );
    assert_eq!(out.stderr, want, "{out:?}");
    assert!(!out.stdout.contains("listening"), "{out:?}");

    let good = write(
        dir.path(),
        "good.yaml",
        "appwrapper:\n  faultTolerance: {admissionGracePeriod: 30000000000, resetPause: 5s, retryLimit: 1}\n",
    );
    let args = ["run", "--runtime", "simulated", "--appwrapper-config", good.to_str().unwrap(), job];
    let out = common::jobset(&args, LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
}

#[tokio::test]
async fn nothing_to_wait_for_exits_0_after_applying() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "cm.json", r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "only"}}"#);
    let out = common::jobset(&["run", f.to_str().unwrap()], LIMIT).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "configmap/only created\n"), "{out:?}");
}

/// Against an existing server (`--kubeconfig`): a syntax error applies nothing; an invalid object
/// after a valid one names what was created before it; a second run finds the objects existing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_against_a_server_say_what_was_applied() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"), 0, &[]).await;
    let kc = server.kubeconfig.to_str().unwrap().to_string();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let names = || async {
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect::<Vec<_>>()
    };
    let before = names().await;

    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: first}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: [x}\n",
    );
    let out = common::jobset(&["run", "--kubeconfig", &kc, bad.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.starts_with(&format!("error: {}:7:", bad.display())), "{out:?}");
    assert_eq!(names().await, before, "nothing was created");

    let invalid = write(
        dir.path(),
        "invalid.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: first}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: broken}\nspec:\n  parallelism: -1\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: busybox}]\n",
    );
    let out = common::jobset(&["run", "--kubeconfig", &kc, invalid.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("configmap/first created"), "{out:?}");
    let want = format!(
        "Error from server (Invalid): error when creating {:?}: Job.batch \"broken\" is invalid: spec.parallelism",
        invalid.display().to_string()
    );
    assert!(out.stderr.contains(&want), "{want:?} in {out:?}");
    assert!(out.stderr.contains("created before the error: configmap/first"), "{out:?}");

    let out = common::jobset(&["run", "--kubeconfig", &kc, invalid.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("Error from server (AlreadyExists): error when creating"), "{out:?}");
    assert!(out.stderr.contains("configmaps \"first\" already exists"), "{out:?}");
    assert!(out.stderr.contains("nothing was created before the error"), "{out:?}");
    server.kill().await;
}

/// `--keep`: the embedded cluster stays up after the workload, for the client commands, until
/// Ctrl-C; `apply -f -` reads stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leaves_the_cluster_running_until_interrupted() {
    use tokio::io::AsyncWriteExt;

    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "job.yaml", SIMULATED_JOB);
    let mut run =
        common::jobset_command(&["run", "--keep", "--runtime", "simulated", f.to_str().unwrap()]).spawn().unwrap();
    let (seen, kubeconfig) = common::kept_cluster(&mut run, LIMIT).await;
    assert!(seen.contains("job.batch/sim succeeded\n"), "{seen}");
    let out = common::jobset(&["get", "jobs", "--kubeconfig", &kubeconfig], LIMIT).await;
    assert!(out.stdout.lines().nth(1).unwrap_or_default().starts_with("sim    Complete   2/2"), "{out:?}");

    let mut apply = common::jobset_command(&["apply", "--kubeconfig", &kubeconfig, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = apply.stdin.take().unwrap();
    stdin.write_all(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-stdin}\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(LIMIT, apply.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "configmap/from-stdin created\n");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.id().unwrap() as i32), nix::sys::signal::Signal::SIGINT)
        .unwrap();
    let status = tokio::time::timeout(LIMIT, run.wait()).await.expect("exits on Ctrl-C").unwrap();
    assert_eq!(status.code(), Some(0));
    let out = common::jobset(&["get", "jobs", "--kubeconfig", &kubeconfig], LIMIT).await;
    assert_eq!(out.code, 1, "the cluster is gone: {out:?}");
}
