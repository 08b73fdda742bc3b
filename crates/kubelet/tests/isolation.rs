//! Pod isolation in the process runtime (issue 24): another pod cannot reach a pod's secret,
//! service account token, `/tmp` or emptyDir, nor the API server's data, through the host's
//! filesystem; `securityContext` users, groups, `fsGroup`, `runAsNonRoot` and
//! `readOnlyRootFilesystem` are honoured. These need root (mount namespaces, changing users):
//! elsewhere they are skipped, except under CI (`CI` set), where they fail instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jobset_kubelet::NodeConfig;
use jobset_kubelet::runtime::process::{ProcessConfig, ProcessRuntime, SERVICE_ACCOUNT_DIR, ServiceAccountSource};
use jobset_kubelet::runtime::sandbox;
use jobset_kubelet::runtime::{ContainerKind, ErrorKind, ExitStatus, PodResources, Runtime, StartRequest, Started};
use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(20);

/// Whether the isolation tests can run here: as root with mount namespaces. Under CI they must.
fn can_isolate(rt: &ProcessRuntime) -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { nix::libc::geteuid() } == 0;
    if root && rt.isolated() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI runs the isolation tests as root with mount namespaces (root: {root}, isolated: {})",
        rt.isolated()
    );
    eprintln!("skipped: pod isolation needs root and mount namespaces");
    false
}

/// A value no other test run shares.
fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

fn pod(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut spec = spec;
    spec["nodeName"] = json!("n1");
    spec["containers"] = json!([]);
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")}, "spec": spec})
}

fn container(script: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"name": "main", "image": "busybox", "command": ["sh", "-c", script]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c
}

fn request(pod: &serde_json::Value, container: serde_json::Value, res: &PodResources, log: &Path) -> StartRequest {
    StartRequest {
        pod: Arc::new(serde_json::from_value::<Pod>(pod.clone()).unwrap()),
        container: serde_json::from_value::<Container>(container).unwrap(),
        kind: ContainerKind::Regular,
        restart_count: 0,
        node: Arc::new(NodeConfig::new("n1")),
        default_run_duration: Duration::from_secs(1),
        log_path: Some(log.to_path_buf()),
        pod_ip: "127.1.0.1".into(),
        resources: Arc::new(res.clone()),
    }
}

/// The texts of a CRI log's lines.
fn log_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_string()).collect()
}

/// Polls the log (every 10 ms) until it has `line`; panics after [`TIMEOUT`].
async fn wait_for_line(log: &Path, line: &str) {
    tokio::time::timeout(TIMEOUT, async {
        while !log_lines(log).iter().any(|l| l == line) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{line:?} not in {}: {:?}", log.display(), log_lines(log)));
}

async fn started(rt: &ProcessRuntime, req: StartRequest) -> Started {
    tokio::time::timeout(TIMEOUT, rt.start(req)).await.expect("start in time").expect("started")
}

async fn exit(s: Started) -> ExitStatus {
    tokio::time::timeout(TIMEOUT, s.exit).await.expect("the container exits in time")
}

/// Runs one container of `pod` to its end: (exit code, log lines).
async fn run(
    rt: &ProcessRuntime,
    pod: &serde_json::Value,
    c: serde_json::Value,
    res: &PodResources,
) -> (i32, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let code = exit(started(rt, request(pod, c, res, &log)).await).await.exit_code;
    (code, log_lines(&log))
}

/// Every regular file under `dir` whose content contains `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_containing(&p, needle)),
            Ok(t) if t.is_file() && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) => {
                out.push(p)
            }
            _ => {}
        }
    }
    out
}

/// A shell line that reads `path` and says `read <path>: <content>` or `refused <path>: <error>`.
fn try_read(path: &Path) -> String {
    let p = path.display();
    format!("if out=$(cat {p} 2>&1); then echo \"read {p}: $out\"; else echo \"refused {p}: $out\"; fi; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_pod_cannot_read_a_pods_secret_token_tmp_or_the_api_servers_data() {
    // Outside /tmp: there, the pod's private /tmp would hide the data dir whatever the runtime does.
    let data = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = data.path().join("runtime");
    std::fs::create_dir_all(&state).unwrap();
    let redb = data.path().join("jobset.redb");
    let stored = unique("every-secret-of-the-cluster");
    std::fs::write(&redb, &stored).unwrap();
    let token = unique("token");
    let token_of = token.clone();
    let sa = ServiceAccountSource {
        host: "127.0.0.1".into(),
        port: 6443,
        ca_pem: "CA".into(),
        token: Arc::new(move |p: &Pod| format!("{token_of}-of-{}", p.metadata.name.clone().unwrap_or_default())),
    };
    let rt = ProcessRuntime::new(ProcessConfig {
        state_dir: Some(state.clone()),
        hidden: vec![data.path().to_path_buf()],
        service_account: Some(sa),
        ..ProcessConfig::default()
    });
    if !can_isolate(&rt) {
        return;
    }
    let password = unique("hunter2");
    let mut res = PodResources::default();
    res.secrets.insert("creds".into(), [("password".to_string(), password.clone().into_bytes())].into());
    let shared = tempfile::tempdir_in("/var/tmp").unwrap();
    let go = shared.path().join("go");

    // Pod A: a secret volume, the service account token, an emptyDir, its /tmp.
    let a = pod(
        "a",
        json!({"volumes": [{"name": "sec", "secret": {"secretName": "creds"}}, {"name": "scratch", "emptyDir": {}}]}),
    );
    let script = format!(
        "echo a-tmp > /tmp/private; echo a-empty-dir > /tmp/scratch/file; \
         echo own-secret=$(cat /tmp/creds/password); echo own-token=$(cat {SERVICE_ACCOUNT_DIR}/token); \
         echo own-tmp=$(cat /tmp/private); echo ready; until [ -e {} ]; do sleep 0.01; done",
        go.display()
    );
    let mounts = json!({"volumeMounts": [
        {"name": "sec", "mountPath": "/tmp/creds"},
        {"name": "scratch", "mountPath": "/tmp/scratch"},
    ]});
    let logs = tempfile::tempdir().unwrap();
    let log_a = logs.path().join("a.log");
    let run_a = started(&rt, request(&a, container(&script, mounts), &res, &log_a)).await;
    wait_for_line(&log_a, "ready").await;

    // What A's files are on the host: B tries exactly these paths.
    let sandbox_a = state.join("pods/uid-a");
    let tmp_a = sandbox_a.join("tmp/private");
    let empty_dir_a = sandbox_a.join("volumes/scratch/file");
    assert_eq!(std::fs::read_to_string(&tmp_a).unwrap(), "a-tmp\n", "A's /tmp is on the host's disk");
    assert_eq!(std::fs::read_to_string(&empty_dir_a).unwrap(), "a-empty-dir\n");
    // The secret and the token never are (a tmpfs in A's mount namespace holds them).
    for needle in [password.as_str(), token.as_str()] {
        assert_eq!(files_containing(data.path(), needle.as_bytes()), Vec::<PathBuf>::new(), "{needle} on disk");
    }

    // Pod B tries A's files at their host paths, where they would be, and the API server's data.
    // Without a token of its own: no in-memory volume is staged over the state dir in B's namespace,
    // only the cover hides it.
    let b = pod("b", json!({"automountServiceAccountToken": false}));
    let targets = [
        tmp_a.clone(),
        empty_dir_a.clone(),
        sandbox_a.join("volumes/sec/password"),
        sandbox_a.join("volumes/kube-api-access/token"),
        redb.clone(),
    ];
    let mut script: String = targets.iter().map(|p| try_read(p)).collect();
    script.push_str(&format!(
        "echo found=$(grep -rl -e {password} -e {token} -e {stored} {} 2>/dev/null)",
        data.path().display()
    ));
    let (code, out_b) = run(&rt, &b, container(&script, json!({})), &res).await;
    assert_eq!(code, 0, "{out_b:?}");
    for (target, line) in targets.iter().zip(&out_b) {
        let refused = format!("refused {}: ", target.display());
        assert!(
            line.starts_with(&refused)
                && (line.contains("No such file or directory") || line.contains("Permission denied")),
            "pod B reached {}: {line:?}",
            target.display()
        );
    }
    assert_eq!(out_b.get(targets.len()).map(String::as_str), Some("found="), "{out_b:?}");
    for leaked in [password.as_str(), token.as_str(), stored.as_str(), "a-tmp", "a-empty-dir"] {
        assert!(!out_b.iter().any(|l| l.contains(leaked)), "pod B saw {leaked}: {out_b:?}");
    }

    // A reads its own, to the end.
    std::fs::write(&go, "").unwrap();
    assert_eq!(exit(run_a).await.exit_code, 0);
    let out_a = log_lines(&log_a);
    assert_eq!(
        out_a,
        [format!("own-secret={password}"), format!("own-token={token}-of-a"), "own-tmp=a-tmp".into(), "ready".into()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_as_user_pods_processes_run_as_that_uid() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    let p = pod(
        "user",
        json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]}}),
    );
    // The container's runAsUser wins over the pod's.
    let c = container(
        "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); echo ready; exec sleep 300",
        json!({"securityContext": {"runAsUser": 1001}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let run = started(&rt, request(&p, c, &PodResources::default(), &log)).await;
    wait_for_line(&log, "ready").await;
    assert_eq!(log_lines(&log)[0], "uid=1001 gid=3000 groups=3000 2000 4000");
    // Seen from the host: the container's process itself.
    let pid = rt.pid(&run.id).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let id = sandbox::status_identity(&status).unwrap();
    assert_eq!((id.uid, id.gid, id.groups), (1001, 3000, vec![2000, 4000]), "{status}");
    // A command run in the container runs as its user, as `kubectl exec` does.
    let argv = vec!["sh".to_string(), "-c".to_string(), "id -u; id -G".to_string()];
    let out = rt.exec(&run.id, argv, TIMEOUT).await.unwrap();
    assert_eq!((out.exit_code, String::from_utf8_lossy(&out.output).as_ref()), (0, "1001\n3000 2000 4000\n"));
    let output = sandbox::exec_command(pid, &["id".to_string(), "-u".to_string()]).unwrap().output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1001\n");
    rt.kill(&run.id, Duration::ZERO);
    exit(run).await;

    // Without a securityContext: the runtime's user (root here).
    let (code, out) = run_default(&rt).await;
    assert_eq!((code, out), (0, vec!["uid=0".to_string()]));
}

async fn run_default(rt: &ProcessRuntime) -> (i32, Vec<String>) {
    run(rt, &pod("plain", json!({})), container("echo uid=$(id -u)", json!({})), &PodResources::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fs_group_owns_the_pods_volumes_and_the_user_can_use_them() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    let mut res = PodResources::default();
    res.secrets.insert("s".into(), [("key".to_string(), b"secret-value".to_vec())].into());
    res.config_maps.insert("c".into(), [("key".to_string(), b"config-value".to_vec())].into());
    let p = pod(
        "fs",
        json!({"securityContext": {"runAsUser": 1000, "fsGroup": 2000}, "volumes": [
            {"name": "e", "emptyDir": {}},
            {"name": "s", "secret": {"secretName": "s", "defaultMode": 0o400}},
            {"name": "c", "configMap": {"name": "c", "defaultMode": 0o400}},
        ]}),
    );
    let mounts = json!({"volumeMounts": [
        {"name": "e", "mountPath": "/tmp/e"},
        {"name": "s", "mountPath": "/tmp/s"},
        {"name": "c", "mountPath": "/tmp/c"},
        {"name": "e", "mountPath": "/tmp/sub", "subPath": "deeper"},
    ]});
    let script = "stat -c '%n %g %a' /tmp/e /tmp/s /tmp/s/key /tmp/c/key /tmp/sub; \
                  touch /tmp/e/new && stat -c '%n %u %g' /tmp/e/new; touch /tmp/sub/x && echo sub-writable; \
                  cat /tmp/s/key; echo; cat /tmp/c/key; echo";
    let (code, out) = run(&rt, &p, container(script, mounts), &res).await;
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(
        out,
        [
            "/tmp/e 2000 2777",
            "/tmp/s 2000 2755",
            "/tmp/s/key 2000 440",
            "/tmp/c/key 2000 440",
            "/tmp/sub 2000 2777",
            "/tmp/e/new 1000 2000",
            "sub-writable",
            "secret-value",
            "config-value",
        ]
    );

    // Without fsGroup a 0400 secret stays root's (as in Kubernetes): the user cannot read it.
    let p = pod(
        "nofs",
        json!({"securityContext": {"runAsUser": 1000}, "volumes": [{"name": "s", "secret": {"secretName": "s", "defaultMode": 0o400}}]}),
    );
    let mounts = json!({"volumeMounts": [{"name": "s", "mountPath": "/tmp/s"}]});
    let (code, out) = run(&rt, &p, container("cat /tmp/s/key || echo denied", mounts), &res).await;
    assert_eq!(code, 0);
    assert!(out.iter().any(|l| l == "denied") && out.iter().any(|l| l.contains("Permission denied")), "{out:?}");
    assert!(!out.iter().any(|l| l.contains("secret-value")), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_filesystem_refuses_writes_but_volumes_take_them() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    // A host directory on the root filesystem (not under /tmp, which is the pod's).
    let host = tempfile::tempdir_in("/var/tmp").unwrap();
    let h = host.path().display();
    let p = pod("ro", json!({"volumes": [{"name": "e", "emptyDir": {}}]}));
    let mounts = json!({"volumeMounts": [{"name": "e", "mountPath": format!("{h}/volume")}]});
    let script = format!(
        "touch {h}/root-file 2>/dev/null && echo wrote-root; touch /tmp/tmp-file 2>/dev/null && echo wrote-tmp; \
         touch {h}/volume/file && echo wrote-volume"
    );
    let read_only = json!({"securityContext": {"readOnlyRootFilesystem": true}});
    let mut c = container(&script, mounts.clone());
    c["securityContext"] = read_only["securityContext"].clone();
    let (code, out) = run(&rt, &p, c, &PodResources::default()).await;
    assert_eq!((code, out), (0, vec!["wrote-volume".to_string()]));
    assert!(!host.path().join("root-file").exists());
    // The same container without it writes everywhere: the refusals above are the option's.
    let (code, out) = run(&rt, &p, container(&script, mounts), &PodResources::default()).await;
    assert_eq!((code, out), (0, vec!["wrote-root".to_string(), "wrote-tmp".into(), "wrote-volume".into()]));
    assert!(host.path().join("root-file").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_fails_a_root_container_with_kubelets_message() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    let p = pod("nonroot", json!({"securityContext": {"runAsNonRoot": true}}));
    let err = rt.start(request(&p, container("true", json!({})), &PodResources::default(), &log)).await.unwrap_err();
    assert_eq!(
        err.0,
        "container has runAsNonRoot and image will run as root (pod: \"nonroot_ns(uid-nonroot)\", container: main)"
    );
    assert_eq!(err.1, ErrorKind::Config, "the agent shows it Waiting CreateContainerConfigError");
    // With a non-root user it runs.
    let c = container("id -u", json!({"securityContext": {"runAsUser": 1000}}));
    let (code, out) = run(&rt, &p, c, &PodResources::default()).await;
    assert_eq!((code, out), (0, vec!["1000".to_string()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_pod_sees_only_its_own_processes_and_cannot_unmount_the_cover() {
    let data = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = data.path().join("runtime");
    std::fs::create_dir_all(&state).unwrap();
    let state = std::fs::canonicalize(&state).unwrap();
    let rt = ProcessRuntime::new(ProcessConfig { state_dir: Some(state.clone()), ..ProcessConfig::default() });
    if !can_isolate(&rt) {
        return;
    }
    assert!(rt.namespaces().pid, "root with mount namespaces has PID namespaces");
    let password = unique("hunter2");
    let mut res = PodResources::default();
    res.secrets.insert("creds".into(), [("password".to_string(), password.clone().into_bytes())].into());
    let shared = tempfile::tempdir_in("/var/tmp").unwrap();
    let go = shared.path().join("go");

    // Pod A: a secret and a file in its /tmp.
    let a = pod("a", json!({"volumes": [{"name": "sec", "secret": {"secretName": "creds"}}]}));
    let script = format!("echo a-tmp > /tmp/private; echo ready; until [ -e {} ]; do sleep 0.01; done", go.display());
    let mounts = json!({"volumeMounts": [{"name": "sec", "mountPath": "/tmp/creds"}]});
    let logs = tempfile::tempdir().unwrap();
    let log_a = logs.path().join("a.log");
    let run_a = started(&rt, request(&a, container(&script, mounts), &res, &log_a)).await;
    wait_for_line(&log_a, "ready").await;
    let pid_a = sandbox::container_pid(&run_a.id.0).unwrap();
    assert_eq!(Some(pid_a), rt.pid(&run_a.id));
    let through_proc = PathBuf::from(format!("/proc/{pid_a}/root/tmp/creds/password"));
    let on_disk = state.join("pods/uid-a/tmp/private");
    assert!(std::fs::read_to_string(&through_proc).unwrap().contains(&password), "the host sees it there");

    // A command run in A (`kubectl exec`) is in A's PID namespace and has A's /proc.
    let argv = ["sh", "-c", "cat /tmp/creds/password; echo; grep -c . /proc/self/status >/dev/null && echo own-proc"];
    let out = rt.exec(&run_a.id, argv.iter().map(|s| s.to_string()).collect(), TIMEOUT).await.unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.output).into_owned()),
        (0, format!("{password}\nown-proc\n"))
    );

    // Pod B, root, tries A's secret through A's /proc entry, unmounts its own /proc and the
    // cover over the state directory, and tries again.
    let script = format!(
        "echo pids=$(ls /proc | grep -c '^[0-9]'); {}\
         if umount {} 2>/dev/null; then echo unmounted-cover; else echo cover-stays; fi; \
         if umount -l /proc 2>/dev/null; then echo unmounted-proc; else echo proc-stays; fi; {}{}",
        try_read(&through_proc),
        state.display(),
        try_read(&through_proc),
        try_read(&on_disk),
    );
    let b = pod("b", json!({}));
    let refused = |p: &Path| format!("refused {}: cat: {}: No such file or directory", p.display(), p.display());
    let (code, out) = run(&rt, &b, container(&script, json!({})), &res).await;
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(
        out[1..],
        [refused(&through_proc), "cover-stays".into(), "proc-stays".into(), refused(&through_proc), refused(&on_disk)],
    );
    // The namespace's init, the shell, the command substitution's subshell, `ls`, `grep`.
    let pids: u32 = out[0].strip_prefix("pids=").and_then(|n| n.parse().ok()).unwrap_or(u32::MAX);
    assert!((2..=6).contains(&pids), "B's /proc lists its own few processes: {out:?}");

    // With CAP_SYS_ADMIN (added, or privileged) both come off and A's files are in reach: what
    // keeps B out above is the missing capability.
    for (name, sc) in
        [("b-admin", json!({"capabilities": {"add": ["SYS_ADMIN"]}})), ("b-privileged", json!({"privileged": true}))]
    {
        let (code, out) =
            run(&rt, &pod(name, json!({})), container(&script, json!({"securityContext": sc})), &res).await;
        assert_eq!(code, 0, "{out:?}");
        assert_eq!(
            out[1..],
            [
                refused(&through_proc),
                "unmounted-cover".into(),
                "unmounted-proc".into(),
                format!("read {}: {password}", through_proc.display()),
                format!("read {}: a-tmp", on_disk.display()),
            ],
            "{name}"
        );
    }
    std::fs::write(&go, "").unwrap();
    assert_eq!(exit(run_a).await.exit_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_follow_the_security_context_and_no_new_privs_allow_privilege_escalation() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status | tr -s '\\t' ' '";
    // (container securityContext, expected lines)
    for (sc, want) in [
        (json!({}), ["CapEff: 00000000a80425fb", "CapBnd: 00000000a80425fb", "NoNewPrivs: 0"]),
        (
            json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, "allowPrivilegeEscalation": false}),
            ["CapEff: 0000000000000400", "CapBnd: 0000000000000400", "NoNewPrivs: 1"],
        ),
        (json!({"runAsUser": 1000}), ["CapEff: 0000000000000000", "CapBnd: 00000000a80425fb", "NoNewPrivs: 0"]),
    ] {
        let c = container(script, json!({"securityContext": sc}));
        let (code, out) = run(&rt, &pod("caps", json!({})), c, &PodResources::default()).await;
        assert_eq!((code, out), (0, want.map(String::from).to_vec()), "{sc}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_and_sys_paths_are_masked_or_read_only_unless_privileged() {
    let rt = ProcessRuntime::new(ProcessConfig::default());
    if !can_isolate(&rt) {
        return;
    }
    // Each line: what the container finds at one of containerd's default masked or read-only
    // paths (the mount's filesystem type and options from its mountinfo, `-` without a mount of
    // its own), and how many bytes it reads from a masked file.
    let script = "for p in /proc/timer_list /proc/kcore /proc/acpi /sys/firmware /proc/sys /proc/sysrq-trigger; do \
                    m=$(awk -v p=$p '$5 == p { for (i = 7; $i != \"-\"; i++); print $(i+1), substr($6, 1, 2) }' \
                    /proc/self/mountinfo | tail -n 1); echo \"$p ${m:--}\"; done; \
                  echo timer_list=$(wc -c < /proc/timer_list)";
    let exists = |p: &str| Path::new(p).exists();
    let host_timer_list = std::fs::read("/proc/timer_list").map(|b| b.len()).unwrap_or(0);

    let (code, out) = run(&rt, &pod("masked", json!({})), container(script, json!({})), &PodResources::default()).await;
    assert_eq!(code, 0, "{out:?}");
    let mount = |p: &str, fs: &str| if exists(p) { format!("{p} {fs}") } else { format!("{p} -") };
    assert_eq!(
        out,
        [
            mount("/proc/timer_list", "devtmpfs rw"),
            mount("/proc/kcore", "devtmpfs rw"),
            mount("/proc/acpi", "tmpfs ro"),
            mount("/sys/firmware", "tmpfs ro"),
            mount("/proc/sys", "proc ro"),
            mount("/proc/sysrq-trigger", "proc ro"),
            "timer_list=0".to_string(),
        ]
        .map(|l| l.replace("devtmpfs", &dev_fs())),
        "masked: /dev/null on files, an empty read-only tmpfs on directories; read-only paths"
    );

    // privileged (and procMount: Unmasked) see the kernel's files.
    for (name, sc) in [("privileged", json!({"privileged": true})), ("unmasked", json!({"procMount": "Unmasked"}))] {
        let c = container(script, json!({"securityContext": sc}));
        let (code, out) = run(&rt, &pod(name, json!({})), c, &PodResources::default()).await;
        assert_eq!(code, 0, "{out:?}");
        let paths =
            ["/proc/timer_list", "/proc/kcore", "/proc/acpi", "/sys/firmware", "/proc/sys", "/proc/sysrq-trigger"];
        assert_eq!(out[..6], paths.map(|p| format!("{p} -")), "{name}");
        if host_timer_list > 0 {
            assert_ne!(out[6], "timer_list=0", "{name}");
        }
    }
}

/// The filesystem type of the host's `/dev` (whose `/dev/null` covers masked files).
fn dev_fs() -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (f.get(4) == Some(&"/dev")).then(|| f.get(sep + 1).map(|s| s.to_string()))?
        })
        .unwrap_or_else(|| "devtmpfs".into())
}
