//! The binary's output conventions: log lines coloured only on a terminal and never with
//! `NO_COLOR`, `--log-format json`, `jobset completion`, `jobset version`, and the server's
//! `Warning` headers shown by `jobset run` as kubectl shows them.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const LIMIT: Duration = Duration::from_secs(60);

/// A log line `jobset up` writes at info level on every clean stop.
const SHUT_DOWN: &str = "shut down";

/// `jobset up` on a fresh data dir under `dir` with info logs, `NO_COLOR` unset unless `env`
/// sets it, and stderr to `stderr`.
fn up(dir: &Path, extra_args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Command {
    let mut cmd = common::command(&dir.join("data"), 0, extra_args);
    cmd.env("JOBSET_LOG", "info").env_remove("NO_COLOR").envs(env.iter().copied()).stderr(stderr);
    cmd
}

/// Spawns `cmd`, waits for its listening line, stops it with SIGTERM and waits for it to exit 0.
async fn up_then_stop(mut cmd: Command, stderr: impl FnOnce(&mut tokio::process::Child)) {
    let mut child = cmd.spawn().expect("spawn jobset up");
    // The pty's slave end must be open only in the child, so that its exit ends the reads.
    drop(cmd);
    stderr(&mut child);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::time::timeout(common::STARTUP_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line.starts_with(common::LISTENING) {
                return;
            }
        }
        panic!("jobset up exited before listening");
    })
    .await
    .expect("jobset up listens");
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM jobset up");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("jobset up stops on SIGTERM").unwrap();
    assert!(status.success(), "{status:?}");
}

/// What `jobset up` writes to a piped stderr from its start to its stop.
async fn piped_logs(extra_args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut drained = None;
    up_then_stop(up(dir.path(), extra_args, env, Stdio::piped()), |child| {
        drained = Some(common::drain_stderr(child));
    })
    .await;
    let (stderr, task) = drained.unwrap();
    tokio::time::timeout(LIMIT, task).await.expect("stderr closes").unwrap();
    let text = stderr.lock().unwrap().clone();
    assert!(text.contains(SHUT_DOWN), "no log line on stderr:\n{text}");
    text
}

/// What `jobset up` writes to a terminal (a pty) as its stderr from its start to its stop.
async fn terminal_logs(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut master = std::fs::File::from(pty.master);
    // Reads until the child's exit closes the last slave descriptor (EIO on Linux).
    let reader = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    up_then_stop(up(dir.path(), &[], env, Stdio::from(pty.slave)), |_| {}).await;
    let text = tokio::time::timeout(LIMIT, reader).await.expect("the terminal closes").unwrap();
    assert!(text.contains(SHUT_DOWN), "no log line on the terminal:\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_on_a_pipe_carry_no_colour() {
    let text = piped_logs(&[], &[]).await;
    assert!(!text.contains("\x1b["), "ANSI codes on a pipe:\n{text:?}");
    assert!(text.lines().any(|l| l.contains(" INFO ") && l.ends_with(SHUT_DOWN)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let text = terminal_logs(&[]).await;
    assert!(text.contains("\x1b["), "no colour on a terminal:\n{text:?}");
    let text = terminal_logs(&[("NO_COLOR", "1")]).await;
    assert!(!text.contains("\x1b["), "colour with NO_COLOR=1:\n{text:?}");
    // no-color.org: an empty NO_COLOR is as if unset.
    let text = terminal_logs(&[("NO_COLOR", "")]).await;
    assert!(text.contains("\x1b["), "no colour with an empty NO_COLOR:\n{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_one_object_per_line() {
    let text = piped_logs(&["--log-format", "json"], &[]).await;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\nin:\n{text}")))
        .collect();
    for l in &lines {
        assert!(l["level"].is_string() && l["timestamp"].is_string() && l["target"].is_string(), "{l}");
        assert!(l["fields"]["message"].is_string(), "{l}");
    }
    assert!(lines.iter().any(|l| l["level"] == "INFO" && l["fields"]["message"] == SHUT_DOWN), "{text}");
}

#[tokio::test]
async fn log_format_takes_text_or_json_only() {
    let out = common::jobset(&["--log-format", "xml", "version"], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("invalid value 'xml' for '--log-format <LOG_FORMAT>'"), "{out:?}");
    assert!(out.stderr.contains("[possible values: text, json]"), "{out:?}");
}

#[tokio::test]
async fn completion_prints_a_script_for_each_shell() {
    for (shell, wants) in [
        ("bash", ["complete -F _jobset", "jobset,up)", "jobset,run)"]),
        ("zsh", ["#compdef jobset", "'up:", "'run:"]),
        ("fish", ["complete -c jobset", "-a \"up\"", "-a \"run\""]),
    ] {
        let out = common::jobset(&["completion", shell], LIMIT).await;
        assert_eq!(out.code, 0, "{shell}: {out:?}");
        assert!(out.stderr.is_empty(), "{shell}: {out:?}");
        for want in wants {
            assert!(out.stdout.contains(want), "{shell} script lacks {want:?}:\n{}", out.stdout);
        }
    }
}

#[tokio::test]
async fn completion_for_an_unknown_shell_names_the_valid_ones() {
    let out = common::jobset(&["completion", "tcsh"], LIMIT).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(out.stderr.contains("invalid value 'tcsh' for '<SHELL>'"), "{out:?}");
    assert!(out.stderr.contains("[possible values: bash, elvish, fish, powershell, zsh]"), "{out:?}");
}

/// `git rev-parse --short HEAD` of this checkout, as build.rs reads it.
fn head_commit() -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git runs (the tests run in a git checkout)");
    assert!(out.status.success(), "git rev-parse: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn version_names_the_crate_version_and_the_git_commit() {
    let want = format!("jobset {} (commit {})\n", env!("CARGO_PKG_VERSION"), head_commit());
    for args in [&["version"][..], &["--version"], &["-V"]] {
        let out = common::jobset(args, LIMIT).await;
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
        assert_eq!(out.stdout, want, "{args:?}: {out:?}");
    }
}

const TYPO: &str = r#"apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: typo
spec:
  x: 1
  replicatedJobs:
  - name: workers
    template:
      spec:
        template:
          metadata:
            annotations:
              sim.jobset.x-k8s.io/duration: "100ms"
          spec:
            restartPolicy: Never
            containers: [{name: main, image: busybox}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_run_prints_the_servers_warnings_as_kubectl_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.yaml");
    std::fs::write(&file, TYPO).unwrap();
    let out = common::jobset(&["run", "--runtime", "simulated", file.to_str().unwrap()], LIMIT).await;
    assert_eq!(out.code, 0, "{out:?}");
    // The server (fieldValidation unset: Warn) pruned the field and said so, once.
    assert_eq!(out.stderr.lines().collect::<Vec<_>>(), [r#"Warning: unknown field "spec.x""#], "{out:?}");
    assert!(out.stdout.starts_with("jobset.jobset.x-k8s.io/typo created\n"), "{out:?}");
}
