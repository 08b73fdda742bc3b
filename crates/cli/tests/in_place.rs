//! In-place restart (`restartStrategy: InPlaceRestart`) end to end with real processes: `jobset
//! up --runtime process` runs the agent image as `jobset agent` (an init container with
//! `restartPolicy: Always` whose startupProbe on port 8081 of the pod's own address is the
//! barrier), the JobSet controller coordinates the attempts and the kubelet restarts pods in place.
//! The manifests of examples/in-place-restart/ run as their header comments say.
//!
//! That a pod's bound token may change only its own pod's attempt annotation (not another pod's,
//! nor anything else) is tested in pod_identity.rs.
//!
//! Every `jobset up` numbers its pods' addresses from 127.1.0.1, and every agent listens on port
//! 8081 of its pod's address: two clusters at once would collide, so these tests run one at a time.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::tracker::{Seen, Tracker};
use jobset_api::jobset::agent::AGENT_IMAGE;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, DynamicObject, LogParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

/// How long any one state may take to be reached (generous: the machine is shared).
const WAIT: Duration = Duration::from_secs(60);
const ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";
const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/in-place-restart");

/// One cluster at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Exits N (after removing the file) once `/tmp/exitN` exists: the test decides when a worker
/// fails, and the trigger is consumed, so the restarted worker runs on.
const WORKER: &str = r#"echo "start $(date +%s.%N)"
while sleep 0.1; do
  for f in /tmp/exit[0-9]*; do
    if [ -f "$f" ]; then rm -f "$f"; echo "exiting ${f#/tmp/exit}"; exit "${f#/tmp/exit}"; fi
  done
done"#;

// ---------------------------------------------------------------------------------------------
// Watching

// ---------------------------------------------------------------------------------------------
// The cluster

/// A `jobset up --runtime process` with watches on its pods and JobSets.
struct Cluster {
    pods: Tracker<Pod>,
    jobsets: Tracker<DynamicObject>,
    api: Api<DynamicObject>,
    server: common::Server,
    dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"))
}

/// `jobset up --runtime process --job-backoff 10ms NODES...` (`--nodes N` or `--nodes-file F`, and
/// any other flags).
async fn cluster(nodes: &[&str]) -> Cluster {
    let serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--runtime", "process", "--job-backoff", "10ms"];
    args.extend_from_slice(nodes);
    let server = common::start(dir.path(), 0, &args).await;
    let client = server.client().await;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &jobset_resource());
    let pods = Tracker::new(Api::default_namespaced(client), "pods", WAIT).await;
    let jobsets = Tracker::new(api.clone(), "jobsets", WAIT).await;
    Cluster { pods, jobsets, api, server, dir, _serial: serial }
}

impl Cluster {
    async fn create(&self, js: Value) {
        let obj: DynamicObject = serde_json::from_value(js).unwrap();
        self.api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("creating the JobSet: {e}"));
    }

    /// `jobset ARGS` against this cluster (KUBECONFIG set), bounded.
    async fn jobset(&self, args: &[&str]) -> common::Output {
        let child = common::jobset_command(args).env("KUBECONFIG", &self.server.kubeconfig).spawn().unwrap();
        let out = tokio::time::timeout(WAIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("jobset {args:?} did not finish within {WAIT:?}"))
            .unwrap();
        common::Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `jobset apply -f examples/in-place-restart/FILE`.
    async fn apply_example(&self, file: &str) {
        let path = format!("{EXAMPLES}/{file}");
        assert!(Path::new(&path).is_file(), "{path}");
        let out = self.jobset(&["apply", "-f", &path]).await;
        assert_eq!(out.code, 0, "{out:?}");
    }

    /// Makes the worker of the examples in `container` exit `code`, as their headers say: `jobset
    /// exec POD [-c CONTAINER] -- sh -c 'mount -t tmpfs tmpfs /tmp && touch /tmp/exitCODE'` (the
    /// failing container gets a /tmp of its own, which a restart discards). `None`: the pod's
    /// first container. Returns when the watch saw it exit with `code`.
    async fn exec_exit(&self, pod: &str, container: Option<&str>, code: i32) -> Instant {
        let script = format!("mount -t tmpfs tmpfs /tmp && touch /tmp/exit{code}");
        let mut args = vec!["exec", pod];
        if let Some(c) = container {
            args.extend_from_slice(&["-c", c]);
        }
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let out = self.jobset(&args).await;
        assert_eq!(out.code, 0, "{out:?}");
        let name = container.unwrap_or("in-place-restart-agent");
        self.pods
            .until(&format!("{pod}'s {name} to exit {code}"), |s| {
                let exited = |p: &Pod| {
                    status(p, name).is_some_and(|c| {
                        [&c.state, &c.last_state].into_iter().any(|s| {
                            s.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == code)
                        })
                    })
                };
                s.history.iter().find(|(_, p)| p.name_any() == pod && exited(p)).map(|(at, _)| *at)
            })
            .await
    }

    /// A file in the pod's private /tmp, seen from the host (`<data dir>/runtime/pods/<uid>/tmp`).
    fn tmp_file(&self, pod: &Pod, file: &str) -> PathBuf {
        let tmp = self.dir.path().join("runtime/pods").join(pod.uid().unwrap()).join("tmp");
        assert!(tmp.is_dir(), "{} has no sandbox at {}", pod.name_any(), tmp.display());
        tmp.join(file)
    }

    /// Creates `/tmp/FILE` in the pod (`exitN`: its worker exits N).
    fn touch(&self, pod: &Pod, file: &str) {
        std::fs::write(self.tmp_file(pod, file), b"").unwrap();
    }

    /// Waits until JobSet `js` is at `currentInPlaceRestartAttempt` `attempt` with `n` live pods,
    /// each at that attempt with its `container` running after `restarts` restarts: the pods.
    async fn group(&self, js: &str, n: usize, attempt: i64, container: &str, restarts: i32) -> BTreeMap<String, Pod> {
        let what = format!("{n} pods of {js} at attempt {attempt}, {container} running after {restarts} restarts");
        let pods = self
            .pods
            .until(&what, |s| {
                let pods = live_pods(s, js);
                let ready = pods.len() == n
                    && pods.values().all(|p| {
                        attempt_of(p) == Some(attempt) && status(p, container).is_some_and(|c| runs(c, restarts))
                    });
                ready.then_some(pods)
            })
            .await;
        self.jobsets
            .until(&format!("{js} at currentInPlaceRestartAttempt {attempt}"), |s| {
                (field(s.current.get(js)?, "currentInPlaceRestartAttempt") == Some(attempt)).then_some(())
            })
            .await;
        pods
    }

    /// Waits until JobSet `js` has the condition Failed: its reason and message.
    async fn failed(&self, js: &str) -> (String, String) {
        self.jobsets
            .until(&format!("{js} to fail"), |s| {
                let c = condition(s.current.get(js)?, "Failed")?;
                Some((c["reason"].as_str()?.to_string(), c["message"].as_str().unwrap_or_default().to_string()))
            })
            .await
    }

    fn jobset_now(&self, js: &str) -> DynamicObject {
        self.jobsets.seen().current.get(js).cloned().expect("the JobSet exists")
    }

    /// Every version of JobSet `js` seen so far kept `status.restarts` at 0.
    fn never_restarted(&self, js: &str) {
        for v in self.jobsets.seen().versions(js) {
            assert_eq!(field(v, "restarts").unwrap_or(0), 0, "the JobSet was recreated: {:#?}", v.data["status"]);
            assert_eq!(field(v, "restartsCountTowardsMax").unwrap_or(0), 0, "{:#?}", v.data["status"]);
        }
    }
}

/// The pods of JobSet `js` that are neither terminal nor being deleted, by name.
fn live_pods(s: &Seen<Pod>, js: &str) -> BTreeMap<String, Pod> {
    s.current
        .iter()
        .filter(|(_, p)| p.labels().get(JOBSET_NAME).is_some_and(|n| n == js))
        .filter(|(_, p)| p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), Some("Failed" | "Succeeded")))
        .map(|(n, p)| (n.clone(), p.clone()))
        .collect()
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn node(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

fn attempt_of(p: &Pod) -> Option<i64> {
    p.annotations().get(ATTEMPT)?.parse().ok()
}

/// The status of container `name` (regular, init or sidecar).
fn status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses.iter().chain(s.init_container_statuses.iter()).flatten().find(|c| c.name == name)
}

/// Running (and, if it has a startup probe, started) after `restarts` restarts.
fn runs(c: &ContainerStatus, restarts: i32) -> bool {
    c.restart_count == restarts && c.state.as_ref().is_some_and(|s| s.running.is_some()) && c.started != Some(false)
}

/// At attempt 1 with its worker running: restarted once in place if it is one of the pods
/// `before`, not restarted at all if it replaced one.
fn restarted_or_replaced(p: &Pod, before: &BTreeMap<String, Pod>) -> bool {
    let want = if before.contains_key(&p.name_any()) { 1 } else { 0 };
    attempt_of(p) == Some(1) && status(p, "worker").is_some_and(|w| runs(w, want))
}

/// The container's restart count (-1 before it has a status).
fn restarts(p: &Pod, container: &str) -> i32 {
    status(p, container).map_or(-1, |c| c.restart_count)
}

fn rv(o: &impl Resource) -> u64 {
    o.meta().resource_version.as_deref().and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

/// An integer of the JobSet's status.
fn field(js: &DynamicObject, name: &str) -> Option<i64> {
    js.data["status"][name].as_i64()
}

fn condition<'a>(js: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    js.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["status"] == "True")
}

// ---------------------------------------------------------------------------------------------
// The JobSets

/// An InPlaceRestart JobSet of two replicated jobs (`a`, `b`) of one Job of 2 pods each: the agent
/// sidecar (the agent image, upstream's barrier endpoint `/barrier-is-down` on port 8081) and a
/// worker running `script` that restarts its pod in place when it exits non-zero.
fn jobset(name: &str, max_restarts: i32, script: &str) -> Value {
    let agent = json!({
        "name": "agent",
        "image": format!("{AGENT_IMAGE}:v0.11.0"),
        "restartPolicy": "Always",
        "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}],
        "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": 8081}, "periodSeconds": 1, "failureThreshold": 600},
        "env": [
            {"name": "JOBSET_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    });
    let worker = json!({
        "name": "worker",
        "image": "busybox",
        "command": ["sh", "-c", script],
        "restartPolicy": "Never",
        "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}],
        "env": [{"name": "REPLICATED_JOB", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']"}}}],
    });
    let rj = |rj: &str| {
        json!({"name": rj, "replicas": 1, "template": {"spec": {
            "completions": 2, "parallelism": 2, "backoffLimit": 2147483647, "podReplacementPolicy": "Failed",
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "initContainers": [agent], "containers": [worker]}}
        }}})
    };
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [rj("a"), rj("b")],
        }
    })
}

/// Applies `f` to the pod template of every replicated job.
fn each_pod_spec(js: &mut Value, f: impl Fn(&mut Value)) {
    for rj in js["spec"]["replicatedJobs"].as_array_mut().unwrap() {
        f(&mut rj["template"]["spec"]["template"]["spec"]);
    }
}

// ---------------------------------------------------------------------------------------------
// a. A failed worker restarts the whole group in place

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_worker_restarts_every_pod_in_place_behind_the_barrier() {
    let c = cluster(&["--nodes", "2"]).await;
    let mut js = jobset("ipr", 3, WORKER);
    // A plain init container that waits while /tmp/hold exists: the test holds one pod back from
    // announcing the next attempt, so the barrier has to keep the other workers from starting.
    each_pod_spec(&mut js, |spec| {
        let hold = json!({"name": "hold", "image": "busybox", "command": ["sh", "-c", "while [ -e /tmp/hold ]; do sleep 0.05; done"]});
        spec["initContainers"].as_array_mut().unwrap().insert(0, hold);
    });
    c.create(js).await;
    // 4 pods on 2 nodes of one host, each agent listening on port 8081 of its own pod address.
    let before = c.group("ipr", 4, 0, "worker", 0).await;
    let names: Vec<String> = before.keys().cloned().collect();
    let (failing, held) = (&before[&names[0]], &before[&names[3]]);
    assert!(failing.name_any().starts_with("ipr-a-0-0-") && held.name_any().starts_with("ipr-b-0-1-"), "{names:?}");

    c.touch(held, "hold");
    c.touch(failing, "exit1");
    // Every pod but the held one restarts and announces attempt 1; the held one is deprecated,
    // restarts and waits in its `hold` init container.
    c.pods
        .until("3 pods at attempt 1 with their agents up, the held pod in `hold`", |s| {
            let pods = live_pods(s, "ipr");
            let others = names[..3].iter().all(|n| {
                pods.get(n).is_some_and(|p| {
                    attempt_of(p) == Some(1)
                        && status(p, "agent").is_some_and(|a| {
                            a.restart_count == 1 && a.state.as_ref().is_some_and(|s| s.running.is_some())
                        })
                })
            });
            let held = pods.get(&names[3]).is_some_and(|p| {
                attempt_of(p) == Some(0)
                    && status(p, "hold")
                        .is_some_and(|h| h.restart_count == 1 && h.state.as_ref().is_some_and(|s| s.running.is_some()))
            });
            (others && held).then_some(())
        })
        .await;
    {
        let js = c.jobset_now("ipr");
        assert_eq!(field(&js, "currentInPlaceRestartAttempt"), Some(0), "{:#?}", js.data["status"]);
        assert_eq!(field(&js, "previousInPlaceRestartAttempt"), Some(0), "{:#?}", js.data["status"]);
        let seen = c.pods.seen();
        for n in &names[..3] {
            let p = &seen.current[n];
            assert!(
                !status(p, "worker").is_some_and(|w| runs(w, 1)),
                "{n}'s worker started while a pod was held: {:#?}",
                p.status
            );
        }
    }
    std::fs::remove_file(c.tmp_file(held, "hold")).unwrap();

    let after = c.group("ipr", 4, 1, "worker", 1).await;
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "the same pods");
    for (name, p) in &after {
        let b = &before[name];
        assert_eq!((p.uid(), node(p)), (b.uid(), node(b)), "{name} was recreated or moved");
        assert_eq!(restarts(p, "worker"), 1, "{name}");
        assert_eq!(restarts(p, "agent"), 1, "{name}");
        assert_eq!(p.annotations().get(ATTEMPT).map(String::as_str), Some("1"), "{name}");
    }
    let js = c.jobset_now("ipr");
    assert_eq!(field(&js, "previousInPlaceRestartAttempt"), Some(0), "{:#?}", js.data["status"]);
    assert!(condition(&js, "Failed").is_none(), "{:#?}", js.data["status"]);
    c.never_restarted("ipr");

    // The barrier held every worker of attempt 1 until the JobSet said all pods were at it: in
    // the global order of resourceVersions, each worker's new run shows up after that status.
    let synced = c
        .jobsets
        .seen()
        .versions("ipr")
        .find(|v| field(v, "currentInPlaceRestartAttempt") == Some(1))
        .map(rv)
        .expect("a version at attempt 1");
    let seen = c.pods.seen();
    for name in after.keys() {
        let first = seen.versions(name).find(|p| {
            status(p, "worker")
                .is_some_and(|w| w.restart_count == 1 && w.state.as_ref().is_some_and(|s| s.running.is_some()))
        });
        let first = first.map(rv).expect("the restarted worker ran");
        assert!(first > synced, "{name}'s worker ran at resourceVersion {first}, before the group synced at {synced}");
        assert!(seen.versions(name).all(|p| restarts(p, "worker") <= 1), "{name}'s worker restarted more than once");
    }
    drop(seen);
    c.server.check();
}

// ---------------------------------------------------------------------------------------------
// b. A FailJobSet exit code fails the JobSet instead

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failjobset_exit_code_fails_the_jobset_without_restarting_it() {
    let c = cluster(&["--nodes", "2"]).await;
    let mut js = jobset("fatal", 3, WORKER);
    // The design doc's failure-policy integration: exit code 3 ends the worker (no in-place
    // restart), fails its Job through the pod failure policy, and the JobSet through FailJobSet.
    js["spec"]["failurePolicy"]["rules"] =
        json!([{"name": "fatal", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]);
    for rj in js["spec"]["replicatedJobs"].as_array_mut().unwrap() {
        rj["template"]["spec"]["podFailurePolicy"] = json!({"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "worker", "operator": "In", "values": [3]}}
        ]});
    }
    each_pod_spec(&mut js, |spec| {
        spec["restartPolicy"] = json!("Never");
        spec["containers"][0]["restartPolicyRules"] =
            json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0, 3]}}]);
    });
    c.create(js).await;
    let before = c.group("fatal", 4, 0, "worker", 0).await;
    let failing = before.values().next().unwrap();
    c.touch(failing, "exit3");

    let (reason, message) = c.failed("fatal").await;
    assert_eq!(reason, "FailJobSetFailurePolicyAction", "{message}");
    assert!(message.starts_with("applying FailJobSet failure policy action"), "{message}");
    c.never_restarted("fatal");
    let seen = c.pods.seen();
    let worker_exits: Vec<i32> = seen
        .versions(&failing.name_any())
        .filter_map(|p| status(p, "worker")?.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
        .collect();
    assert!(worker_exits.contains(&3), "{worker_exits:?}");
    assert!(seen.versions(&failing.name_any()).all(|p| restarts(p, "worker") <= 0), "the failed worker was restarted");
    drop(seen);
    c.server.check();
}

// ---------------------------------------------------------------------------------------------
// c. A lost node: its pod is recreated elsewhere, the others restart in place

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_nodes_pod_is_recreated_and_the_others_restart_in_place() {
    let c = cluster(&["--nodes", "5", "--heartbeat-interval", "100ms", "--node-grace-period", "1s"]).await;
    let mut js = jobset("hybrid", 3, WORKER);
    // One pod per node, and a spare node for the replacement.
    each_pod_spec(&mut js, |spec| {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {JOBSET_NAME: "hybrid"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}});
    });
    c.create(js).await;
    let before = c.group("hybrid", 4, 0, "worker", 0).await;
    let lost = before.values().next().unwrap().clone();
    let lost_node = node(&lost);

    let out = c.jobset(&["node", "fail", &lost_node]).await;
    assert_eq!(out.code, 0, "{out:?}");
    // The Job replaces the pod once the node lifecycle controller failed it (podReplacementPolicy
    // Failed); the replacement announces attempt 1, which restarts the others in place.
    let after = c
        .pods
        .until("4 pods at attempt 1: the survivors' workers restarted once, the replacement's running", |s| {
            let pods = live_pods(s, "hybrid");
            (pods.len() == 4 && pods.values().all(|p| restarted_or_replaced(p, &before))).then_some(pods)
        })
        .await;
    c.jobsets
        .until("hybrid at currentInPlaceRestartAttempt 1", |s| {
            (field(s.current.get("hybrid")?, "currentInPlaceRestartAttempt") == Some(1)).then_some(())
        })
        .await;
    let (survivors, new): (Vec<&Pod>, Vec<&Pod>) = after.values().partition(|p| before.contains_key(&p.name_any()));
    assert_eq!(survivors.len(), 3, "{:?}", after.keys());
    assert_eq!(new.len(), 1, "{:?}", after.keys());
    for p in &survivors {
        let b = &before[&p.name_any()];
        assert_eq!((p.uid(), node(p)), (b.uid(), node(b)), "{} was recreated or moved", p.name_any());
        assert_ne!(node(p), lost_node);
    }
    let replacement = new[0];
    assert_ne!(replacement.uid(), lost.uid());
    assert_ne!(node(replacement), lost_node, "the replacement runs on the lost node");
    assert!(!before.values().any(|p| node(p) == node(replacement)), "the replacement shares a node");
    // Same Job and completion index as the lost pod.
    let index = |p: &Pod| p.annotations().get("batch.kubernetes.io/job-completion-index").cloned();
    let job = |p: &Pod| p.labels().get("batch.kubernetes.io/job-name").cloned();
    assert_eq!((job(replacement), index(replacement)), (job(&lost), index(&lost)));
    c.never_restarted("hybrid");
    c.server.check();
}

// ---------------------------------------------------------------------------------------------
// d. maxRestarts bounds in-place restarts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_failing_every_attempt_reaches_max_restarts() {
    let c = cluster(&["--nodes", "2"]).await;
    // The first pod of replicated job `a` fails every run; the others run on.
    let script = r#"if [ "$REPLICATED_JOB" = a ] && [ "$JOB_COMPLETION_INDEX" = 0 ]; then sleep 0.3; exit 1; fi
exec sleep 3600"#;
    c.create(jobset("doomed", 1, script)).await;
    let (reason, message) = c.failed("doomed").await;
    assert_eq!(reason, "ReachedMaxRestarts", "{message}");
    assert_eq!(message, "jobset failed due to reaching max number of restarts");
    // It got there by in-place restarts: attempt 1 was reached, nothing was recreated.
    assert!(
        c.jobsets.seen().versions("doomed").any(|v| field(v, "currentInPlaceRestartAttempt") == Some(1)),
        "never synced at attempt 1"
    );
    c.never_restarted("doomed");
    c.server.check();
}

// ---------------------------------------------------------------------------------------------
// f. Upstream's examples, as shipped in examples/in-place-restart/

/// Applies `file` (upstream's JobSet `js`, 4 pods), fails one worker the way the file's header
/// says, and checks that all 4 pods restart in place to attempt 1: how long that took from the
/// worker's exit.
async fn upstream_example(file: &str, container: &str, exec_container: Option<&str>) -> Duration {
    let c = cluster(&["--nodes", "2"]).await;
    c.apply_example(file).await;
    let before = c.group("js", 4, 0, container, 0).await;
    let target = before.keys().next().unwrap().clone();
    let failed = c.exec_exit(&target, exec_container, 1).await;
    let after = c.group("js", 4, 1, container, 1).await;
    let took = failed.elapsed();
    for (name, p) in &after {
        let b = &before[name];
        assert_eq!((p.uid(), node(p)), (b.uid(), node(b)), "{name} was recreated or moved");
    }
    let js = c.jobset_now("js");
    assert_eq!(field(&js, "previousInPlaceRestartAttempt"), Some(0), "{:#?}", js.data["status"]);
    c.never_restarted("js");
    if exec_container.is_none() {
        // Main-container mode: the agent started the worker again in every pod.
        let pods: Api<Pod> = Api::default_namespaced(c.server.client().await);
        for name in after.keys() {
            let started = tokio::time::timeout(WAIT, async {
                loop {
                    let log = pods.logs(name, &LogParams::default()).await.unwrap_or_default();
                    if log.lines().any(|l| l == "Start") {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
            assert!(started.is_ok(), "{name}'s worker did not start again");
        }
        let previous = LogParams { previous: true, ..LogParams::default() };
        let log = pods.logs(&target, &previous).await.unwrap();
        assert!(log.contains("exiting 1"), "{log}");
    }
    c.server.check();
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_sidecar_mode_example_restarts_in_place() {
    let took = upstream_example("jobset-sidecar-container-mode.yaml", "worker", Some("worker")).await;
    eprintln!("sidecar mode: worker exit → all 4 workers running at attempt 1 in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_main_container_mode_example_restarts_in_place() {
    let took = upstream_example("jobset-main-container-mode.yaml", "in-place-restart-agent", None).await;
    eprintln!("main-container mode: worker exit → all 4 agents running at attempt 1 in {took:?}");
}

// ---------------------------------------------------------------------------------------------
// The design doc's manifests, on the TPU node pools of examples/in-place-restart/tpu-nodes.yaml

/// The node pool of a node of tpu-nodes.yaml (`pool-a-0` → `pool-a`).
fn pool(node: &str) -> &str {
    node.rsplit_once('-').map_or(node, |(pool, _)| pool)
}

/// The pods' pools per Job: each Job in one pool of its own (exclusive topology), one pod per
/// node (4 TPUs each).
fn one_pool_per_job(pods: &BTreeMap<String, Pod>) {
    let mut pools: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pods.values() {
        pools.entry(p.labels()["batch.kubernetes.io/job-name"].clone()).or_default().push(node(p));
    }
    let used: Vec<&str> = pools.values().map(|nodes| pool(&nodes[0])).collect();
    for nodes in pools.values() {
        assert!(nodes.iter().all(|n| pool(n) == pool(&nodes[0])), "a Job spans pools: {pools:?}");
    }
    assert_eq!(
        used.iter().collect::<std::collections::BTreeSet<_>>().len(),
        used.len(),
        "Jobs share a pool: {pools:?}"
    );
    let nodes: std::collections::BTreeSet<String> = pods.values().map(node).collect();
    assert_eq!(nodes.len(), pods.len(), "pods share a node: {pools:?}");
}

fn tpu_cluster_args() -> [String; 2] {
    ["--nodes-file".into(), format!("{EXAMPLES}/tpu-nodes.yaml")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn design_doc_example_restarts_in_place_within_its_node_pools() {
    let args = tpu_cluster_args();
    let c = cluster(&[&args[0], &args[1]]).await;
    c.apply_example("design-doc-in-place-restart.yaml").await;
    let js = "jobset-example-in-place-restart";
    let before = c.group(js, 4, 0, "worker", 0).await;
    one_pool_per_job(&before);
    c.exec_exit(before.keys().next().unwrap(), Some("worker"), 1).await;
    let after = c.group(js, 4, 1, "worker", 1).await;
    for (name, p) in &after {
        let b = &before[name];
        assert_eq!((p.uid(), node(p)), (b.uid(), node(b)), "{name} was recreated or moved");
    }
    c.never_restarted(js);
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn design_doc_failure_policy_example_recreates_on_4_and_fails_on_3() {
    let args = tpu_cluster_args();
    let c = cluster(&[&args[0], &args[1]]).await;
    c.apply_example("design-doc-failure-policy.yaml").await;
    let js = "jobset-example-in-place-restart-failurepolicy";
    let before = c.group(js, 4, 0, "worker", 0).await;
    one_pool_per_job(&before);

    // Z = 4: that pod fails and is replaced in its pool; the others restart in place.
    let lost = before.values().next().unwrap().clone();
    c.exec_exit(&lost.name_any(), Some("worker"), 4).await;
    let after = c
        .pods
        .until("the replacement and the 3 others at attempt 1", |s| {
            let pods = live_pods(s, js);
            (pods.len() == 4 && pods.values().all(|p| restarted_or_replaced(p, &before))).then_some(pods)
        })
        .await;
    assert!(!after.contains_key(&lost.name_any()), "{:?}", after.keys());
    assert_eq!(after.keys().filter(|n| before.contains_key(*n)).count(), 3, "{:?}", after.keys());
    one_pool_per_job(&after);
    c.jobsets
        .until(&format!("{js} at currentInPlaceRestartAttempt 1"), |s| {
            (field(s.current.get(js)?, "currentInPlaceRestartAttempt") == Some(1)).then_some(())
        })
        .await;

    // Y = 3: the Job fails (PodFailurePolicy), so the JobSet fails (FailJobSet).
    c.exec_exit(after.keys().next().unwrap(), Some("worker"), 3).await;
    let (reason, message) = c.failed(js).await;
    assert_eq!(reason, "FailJobSetFailurePolicyAction", "{message}");
    c.never_restarted(js);
    c.server.check();
}
