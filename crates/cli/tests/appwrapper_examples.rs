//! The AppWrapper examples (`examples/appwrapper/`) run through `jobset run` with real host
//! processes, each to the end its header comment documents.

mod common;

use std::time::Duration;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/appwrapper");
/// The reference of an AppWrapper in `jobset run`'s output.
const APPWRAPPER: &str = "appwrapper.workload.codeflare.dev/";

/// `jobset run examples/appwrapper/FILE --timeout 60s` (the Job controller's default back-off:
/// the examples' AppWrappers reset before it replaces a failed pod).
async fn run(file: &str) -> common::Output {
    let path = format!("{EXAMPLES}/{file}");
    common::jobset(&["run", &path, "--timeout", "60s"], Duration::from_secs(120)).await
}

/// The final line `jobset run` printed for AppWrapper `name` (`... succeeded; resets N` or
/// `... failed: REASON: MESSAGE; resets N`).
fn summary<'a>(out: &'a common::Output, name: &str) -> &'a str {
    let prefix = format!("{APPWRAPPER}{name} ");
    out.stdout.lines().rfind(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no summary of {name}: {out:?}"))
}

/// The progress lines of AppWrapper `name`, each without the `appwrapper.../NAME: ` prefix.
fn progress<'a>(out: &'a common::Output, name: &str) -> Vec<&'a str> {
    let prefix = format!("{APPWRAPPER}{name}: ");
    out.stdout.lines().filter_map(|l| l.strip_prefix(&prefix)).collect()
}

/// Runs FILE, which must end with exit code `code` and a summary of AppWrapper `name`
/// containing every one of `says`.
async fn ends(file: &str, name: &str, code: i32, says: &[&str]) -> common::Output {
    let out = run(file).await;
    assert_eq!(out.code, code, "{file}: {out:?}");
    let line = summary(&out, name);
    for s in says {
        assert!(line.contains(s), "{file}: {line:?} does not say {s:?}; {out:?}");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_attempt_resets_the_wrapped_job_once_then_it_succeeds() {
    let out = ends("job.yaml", "wrapped-job", 0, &["wrapped-job succeeded; resets 1"]).await;
    let lines = progress(&out, "wrapped-job");
    let first = |word: &str| {
        lines.iter().position(|l| l.starts_with(word)).unwrap_or_else(|| panic!("no {word} line: {out:?}"))
    };
    let resetting = first("Resetting, ");
    assert!(lines[resetting].ends_with(", resets 1"), "{out:?}");
    assert!(first("Running, ") < resetting, "{out:?}");
    assert!(
        lines[resetting..].iter().any(|l| l.starts_with("Running, ") && l.ends_with(", resets 1")),
        "Running again after the reset: {out:?}"
    );
    assert!(lines.iter().all(|l| !l.ends_with(", resets 2")), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapped_jobset_succeeds() {
    let out = ends("jobset.yaml", "wrapped-jobset", 0, &["wrapped-jobset succeeded; resets 0"]).await;
    assert!(progress(&out, "wrapped-jobset").iter().all(|l| !l.starts_with("Resetting")), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_exit_code_fails_the_appwrapper_without_a_reset() {
    let out = ends(
        "terminal-exit-code.yaml",
        "terminal-exit-code",
        1,
        &[
            "terminal-exit-code failed: FoundFailedPods: 1 failed pod: terminal-exit-code-0-",
            "(main: exit code 42); resets 0",
        ],
    )
    .await;
    assert!(progress(&out, "terminal-exit-code").iter().all(|l| !l.starts_with("Resetting")), "{out:?}");
}

/// How long the trainer of `autopilot.yaml` may take to run.
const POD_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flagged_by_autopilot_moves_the_workload_to_a_healthy_node() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};

    let dir = tempfile::tempdir().unwrap();
    let nodes = format!("{EXAMPLES}/gpu-nodes.yaml");
    let server = common::start(dir.path(), 0, &["--nodes-file", &nodes, "--runtime", "process"]).await;
    let kubeconfig = server.kubeconfig.to_string_lossy().into_owned();
    let file = format!("{EXAMPLES}/autopilot.yaml");
    let run = common::jobset_command(&["run", "--kubeconfig", &kubeconfig, &file, "--timeout", "60s"])
        .spawn()
        .expect("spawn jobset run");

    let pods: Api<Pod> = Api::namespaced(server.client().await, "default");
    let labelled = ListParams::default().labels("workload.codeflare.dev/appwrapper=autopilot");
    let running_on = || async {
        let list = pods.list(&labelled).await.expect("list pods");
        list.items.iter().find_map(|p| {
            let status = p.status.as_ref()?;
            (status.phase.as_deref() == Some("Running")).then(|| p.spec.as_ref()?.node_name.clone())?
        })
    };
    let flagged = tokio::time::timeout(POD_TIMEOUT, async {
        loop {
            if let Some(node) = running_on().await {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the trainer runs");
    let label = common::jobset_command(&["node", "label", &flagged, "autopilot.ibm.com/gpuhealth=EVICT"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("jobset node label");
    assert!(label.status.success(), "{label:?}");

    let out = tokio::time::timeout(Duration::from_secs(120), run.wait_with_output())
        .await
        .expect("jobset run finishes")
        .expect("wait for jobset run");
    let out = common::Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(out.code, 0, "{out:?}");
    assert!(summary(&out, "autopilot").ends_with("autopilot succeeded; resets 0"), "not counted: {out:?}");
    assert!(progress(&out, "autopilot").iter().any(|l| l.starts_with("Resetting, ")), "{out:?}");
    // The trainer that succeeded ran on the other node.
    let done = pods.list(&labelled).await.expect("list pods");
    let nodes: Vec<(Option<String>, Option<String>)> = done
        .items
        .iter()
        .map(|p| (p.status.as_ref().and_then(|s| s.phase.clone()), p.spec.as_ref().and_then(|s| s.node_name.clone())))
        .collect();
    assert!(nodes.len() == 1 && nodes[0].0.as_deref() == Some("Succeeded"), "{nodes:?}");
    assert_ne!(nodes[0].1.as_deref(), Some(flagged.as_str()), "{nodes:?}");
    server.check();
}
