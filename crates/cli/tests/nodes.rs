//! Failure injection end to end: `jobset up --nodes 3 --runtime simulated` runs the controllers
//! and simulated nodes, and `jobset node fail|recover|drain|taint` (a separate process, through
//! KUBECONFIG) disrupts them. Pods of a lost, drained or NoExecute-tainted node get
//! `DisruptionTarget`, so a Job whose pod failure policy ignores that condition replaces them
//! without counting a failure.
//!
//! Each test starts its own server (`--port 0`, a temporary data dir) with fast timings, and waits
//! for states through watches with timeouts.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::tracker::Tracker;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::process::Command;

/// Limit for one API call or one `jobset node` run.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Limit for one awaited state.
const WAIT_TIMEOUT: Duration = Duration::from_secs(20);
const NODES: usize = 3;
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const IGNORE_DISRUPTIONS: &str = r#"{"rules":[{"action":"Ignore","onPodConditions":[{"type":"DisruptionTarget"}]}]}"#;

/// A running `jobset up --nodes 3`, with the temporary data dir it lives in.
struct Server {
    server: common::Server,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let nodes = NODES.to_string();
    let server = common::start(
        dir.path(),
        0,
        &[
            "--nodes",
            &nodes,
            "--runtime",
            "simulated",
            "--heartbeat-interval",
            "50ms",
            "--node-grace-period",
            "600ms",
            "--job-backoff",
            "10ms",
            "--default-run-duration",
            "50ms",
        ],
    )
    .await;
    let client = server.client().await;
    Server { server, client, _dir: dir }
}

impl std::ops::Deref for Server {
    type Target = common::Server;

    fn deref(&self) -> &common::Server {
        &self.server
    }
}

/// The result of one `jobset node ...` run.
struct Output {
    args: String,
    success: bool,
    stdout: String,
    stderr: String,
}

impl Output {
    fn describe(&self) -> String {
        format!(
            "jobset {}\n  success: {}\n  stdout: {}\n  stderr: {}",
            self.args, self.success, self.stdout, self.stderr
        )
    }

    /// Asserts exit code 0 and that stdout is exactly `line`.
    #[track_caller]
    fn ok(&self, line: &str) {
        assert!(self.success, "expected success from {}", self.describe());
        assert_eq!(self.stdout.trim_end(), line, "unexpected output from {}", self.describe());
    }

    /// Asserts a non-zero exit whose stderr holds every needle.
    #[track_caller]
    fn failed(&self, needles: &[&str]) {
        assert!(!self.success, "expected failure from {}", self.describe());
        assert!(!self.stderr.contains("panicked"), "jobset crashed: {}", self.describe());
        for n in needles {
            assert!(self.stderr.contains(n), "expected {n:?} in the error of {}", self.describe());
        }
    }
}

/// Runs `jobset ARGS` with KUBECONFIG pointing at the server.
async fn jobset(kubeconfig: &Path, args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_jobset"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("JOBSET_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jobset");
    let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("jobset {args:?} did not finish within {CALL_TIMEOUT:?}"))
        .expect("wait for jobset");
    Output {
        args: args.join(" "),
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Watches of the three kinds the tests look at.
struct Cluster {
    server: Server,
    pods: Tracker<Pod>,
    nodes: Tracker<Node>,
    jobs: Tracker<Job>,
}

async fn cluster() -> Cluster {
    let server = start().await;
    let c = server.client.clone();
    let cluster = Cluster {
        pods: Tracker::new(Api::namespaced(c.clone(), "default"), "pods", WAIT_TIMEOUT).await,
        nodes: Tracker::new(Api::all(c.clone()), "nodes", WAIT_TIMEOUT).await,
        jobs: Tracker::new(Api::namespaced(c, "default"), "jobs", WAIT_TIMEOUT).await,
        server,
    };
    cluster
        .nodes
        .until("every node Ready", |s| {
            let ready = s.current.values().filter(|n| node_ready(n) == Some("True")).count();
            (ready == NODES).then_some(())
        })
        .await;
    cluster
}

impl Cluster {
    async fn node(&self, args: &[&str]) -> Output {
        let mut all = vec!["node"];
        all.extend_from_slice(args);
        jobset(&self.server.kubeconfig, &all).await
    }

    async fn create_job(&self, name: &str, pod_failure_policy: Option<&str>) {
        let mut spec = json!({
            "parallelism": 3, "completions": 3, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            },
        });
        if let Some(p) = pod_failure_policy {
            spec["podFailurePolicy"] = serde_json::from_str(p).unwrap();
        }
        let job: Job = serde_json::from_value(
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap();
        let api: Api<Job> = Api::namespaced(self.server.client.clone(), "default");
        call("create job", api.create(&PostParams::default(), &job)).await;
    }

    async fn create_pod(&self, pod: Value) {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let api: Api<Pod> = Api::namespaced(self.server.client.clone(), "default");
        call("create pod", api.create(&PostParams::default(), &pod)).await;
    }

    /// Waits until `n` pods of the Job run; returns them (name → node).
    async fn running(&self, job: &str, n: usize) -> BTreeMap<String, String> {
        self.pods
            .until(&format!("{n} running pods of job {job}"), |s| {
                let running: BTreeMap<String, String> = s
                    .current
                    .values()
                    .filter(|p| job_of(p) == Some(job) && phase(p) == Some("Running") && !deleting(p))
                    .map(|p| (p.name_any(), node_of(p).unwrap().to_string()))
                    .collect();
                (running.len() == n).then_some(running)
            })
            .await
    }

    /// Waits until every pod of `victims` got `DisruptionTarget=True` with `reason` (and, if
    /// `phase` is given, reached it) at some point, and is gone.
    async fn disrupted_and_gone(&self, victims: &[String], reason: &str, phase: Option<&str>) {
        for v in victims {
            self.pods
                .until(&format!("{v} to get DisruptionTarget ({reason}) and be deleted"), |s| {
                    let disrupted = s.versions(v).any(|p| {
                        condition(p, "DisruptionTarget")
                            .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some(reason))
                            && phase.is_none_or(|ph| self::phase(p) == Some(ph))
                    });
                    (disrupted && !s.current.contains_key(v)).then_some(())
                })
                .await;
        }
    }

    /// Waits until the Job has `victims.len()` running replacements, none on `avoid`; asserts the
    /// Job never counted a failure nor got a Failed condition.
    async fn replaced_uncounted(&self, job: &str, before: &BTreeMap<String, String>, victims: &[String], avoid: &str) {
        let replacements = self
            .pods
            .until(&format!("replacements of {victims:?}"), |s| {
                let new: Vec<Pod> = s
                    .current
                    .values()
                    .filter(|p| job_of(p) == Some(job) && !before.contains_key(&p.name_any()))
                    .filter(|p| phase(p) == Some("Running") && !deleting(p))
                    .cloned()
                    .collect();
                (new.len() == victims.len()).then_some(new)
            })
            .await;
        for p in &replacements {
            assert_ne!(node_of(p), Some(avoid), "replacement {} runs on {avoid}", p.name_any());
        }
        // The Job has seen everything: all victims gone (their finalizers removed) and 3 active.
        self.jobs
            .until("the job to count 3 active pods", |s| {
                let st = s.current.get(job)?.status.clone()?;
                (st.active == Some(3)
                    && st.uncounted_terminated_pods.is_none_or(|u| u.failed.unwrap_or_default().is_empty()))
                .then_some(())
            })
            .await;
        let seen = self.jobs.seen();
        for j in seen.versions(job) {
            let st = j.status.clone().unwrap_or_default();
            assert_eq!(st.failed.unwrap_or(0), 0, "the disruption was counted as a failure: {st:#?}");
            assert!(
                !st.conditions.iter().flatten().any(|c| c.type_ == "Failed" || c.type_ == "FailureTarget"),
                "the job failed: {st:#?}"
            );
        }
    }
}

async fn call<T>(what: &str, f: impl std::future::Future<Output = kube::Result<T>>) -> T {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what}: timed out after {CALL_TIMEOUT:?}"),
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn job_of(p: &Pod) -> Option<&str> {
    p.labels().get("batch.kubernetes.io/job-name").map(String::as_str)
}

fn condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

fn node_ready(n: &Node) -> Option<&str> {
    n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.as_str())
}

fn has_taint(n: &Node, key: &str, effect: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == effect))
}

/// The pods of `running` on `node`.
fn on(running: &BTreeMap<String, String>, node: &str) -> Vec<String> {
    running.iter().filter(|(_, n)| n.as_str() == node).map(|(p, _)| p.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_node_disrupts_its_pods_and_an_ignore_rule_replaces_them_uncounted() {
    let c = cluster().await;
    c.create_job("ignore", Some(IGNORE_DISRUPTIONS)).await;
    let before = c.running("ignore", 3).await;
    let node = before.values().next().unwrap().clone();
    let victims = on(&before, &node);

    c.node(&["fail", &node]).await.ok(&format!("node/{node} failed (heartbeats stopped)"));
    // Its pods end Failed with DisruptionTarget, as PodGC leaves them for a lost node.
    c.disrupted_and_gone(&victims, "DeletionByTaintManager", Some("Failed")).await;
    c.nodes
        .until(&format!("{node} Ready=Unknown and tainted unreachable"), |s| {
            let n = s.current.get(&node)?;
            (node_ready(n) == Some("Unknown") && has_taint(n, UNREACHABLE, "NoExecute")).then_some(())
        })
        .await;
    c.replaced_uncounted("ignore", &before, &victims, &node).await;

    c.node(&["recover", &node]).await.ok(&format!("node/{node} recovered"));
    c.nodes
        .until(&format!("{node} Ready=True without the unreachable taint"), |s| {
            let n = s.current.get(&node)?;
            (node_ready(n) == Some("True") && !has_taint(n, UNREACHABLE, "NoExecute")).then_some(())
        })
        .await;
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_node_fails_a_job_whose_policy_does_not_ignore_disruptions() {
    let c = cluster().await;
    c.create_job("counted", None).await;
    let before = c.running("counted", 3).await;
    let node = before.values().next().unwrap().clone();
    let victims = on(&before, &node);

    c.node(&["fail", &node]).await.ok(&format!("node/{node} failed (heartbeats stopped)"));
    c.disrupted_and_gone(&victims, "DeletionByTaintManager", Some("Failed")).await;
    let status = c
        .jobs
        .until("the job to fail", |s| {
            let st = s.current.get("counted")?.status.clone()?;
            st.conditions.iter().flatten().any(|c| c.type_ == "Failed" && c.status == "True").then_some(st)
        })
        .await;
    let failed = status.conditions.iter().flatten().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"), "{status:#?}");
    assert!(status.failed.unwrap_or(0) >= 1, "the disruption was not counted: {status:#?}");
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_cordons_and_evicts_with_disruption_target() {
    let c = cluster().await;
    c.create_job("drained", Some(IGNORE_DISRUPTIONS)).await;
    let before = c.running("drained", 3).await;
    let node = before.values().next().unwrap().clone();
    let victims = on(&before, &node);

    c.node(&["drain", &node]).await.ok(&format!("node/{node} drained ({} pods evicted)", victims.len()));
    c.nodes
        .until(&format!("{node} unschedulable"), |s| {
            s.current.get(&node)?.spec.as_ref()?.unschedulable.is_some_and(|u| u).then_some(())
        })
        .await;
    c.disrupted_and_gone(&victims, "EvictionByEvictionAPI", None).await;
    c.replaced_uncounted("drained", &before, &victims, &node).await;
    c.server.check();
}

/// A PodDisruptionBudget with no room refuses the eviction (429); the drain says so as kubectl
/// drain does and tries again until the budget allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_waits_for_a_disruption_budget_as_kubectl_drain() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::{Patch, PatchParams};
    use tokio::io::{AsyncBufReadExt, BufReader};
    let c = cluster().await;
    c.create_job("guarded", None).await;
    let before = c.running("guarded", 3).await;
    let node = before.values().next().unwrap().clone();
    let victims = on(&before, &node);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(c.server.client.clone(), "default");
    let pdb = json!({"metadata": {"name": "guard"}, "spec": {"minAvailable": 3,
        "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "guarded"}}}});
    budgets.create(&PostParams::default(), &serde_json::from_value(pdb).unwrap()).await.unwrap();
    let observed = |b: &PodDisruptionBudget| {
        b.status.as_ref().is_some_and(|s| s.observed_generation == b.metadata.generation && s.expected_pods == Some(3))
    };
    let budget = Tracker::<PodDisruptionBudget>::new(budgets.clone(), "poddisruptionbudgets", WAIT_TIMEOUT).await;
    budget.until("the budget observed", |s| s.current.get("guard").filter(|b| observed(b)).map(|_| ())).await;

    let mut drain = Command::new(env!("CARGO_BIN_EXE_jobset"))
        .args(["node", "drain", &node, "--retry-interval", "100ms"])
        .env("KUBECONFIG", &c.server.kubeconfig)
        .env("JOBSET_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(drain.stderr.take().unwrap()).lines();
    let refused = tokio::time::timeout(CALL_TIMEOUT, stderr.next_line())
        .await
        .expect("the drain reports the refused eviction")
        .unwrap()
        .unwrap_or_default();
    let victim = victims.iter().find(|v| refused.contains(&format!("pods/{v:?}"))).expect(&refused);
    assert_eq!(
        refused,
        format!(
            "error when evicting pods/{victim:?} -n \"default\" (will retry after 100ms): Cannot evict pod as it would violate the pod's disruption budget."
        )
    );
    let room = json!({"spec": {"minAvailable": 3 - victims.len() as i64}});
    budgets.patch("guard", &PatchParams::default(), &Patch::Merge(room)).await.unwrap();
    let out = tokio::time::timeout(CALL_TIMEOUT, drain.wait_with_output()).await.expect("the drain ends").unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim_end(), format!("node/{node} drained ({} pods evicted)", victims.len()));
    c.disrupted_and_gone(&victims, "EvictionByEvictionAPI", None).await;
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn taints_evict_intolerant_pods_and_keep_new_pods_off() {
    let c = cluster().await;
    c.create_job("tainted", Some(IGNORE_DISRUPTIONS)).await;
    let before = c.running("tainted", 3).await;
    let nodes: std::collections::BTreeSet<String> = before.values().cloned().collect();
    let node = nodes.first().unwrap().clone();
    let victims = on(&before, &node);
    c.create_pod(json!({
        "metadata": {"name": "tolerant", "annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }))
    .await;
    c.pods.until("tolerant to run", |s| (phase(s.current.get("tolerant")?) == Some("Running")).then_some(())).await;

    c.node(&["taint", &node, "dedicated=ml:NoExecute"]).await.ok(&format!("node/{node} tainted"));
    c.disrupted_and_gone(&victims, "DeletionByTaintManager", None).await;
    c.replaced_uncounted("tainted", &before, &victims, &node).await;
    let tolerant = c.pods.get("tolerant").expect("the tolerating pod is still there");
    assert_eq!((phase(&tolerant), node_of(&tolerant)), (Some("Running"), Some(node.as_str())));
    {
        let seen = c.pods.seen();
        for p in seen.versions("tolerant") {
            assert!(!deleting(p) && condition(p, "DisruptionTarget").is_none(), "tolerant was disrupted: {p:#?}");
        }
    }

    // NoSchedule: running pods stay, new ones do not land.
    let other = nodes.iter().nth(1).cloned();
    let other = other.unwrap_or_else(|| (0..NODES).map(|i| format!("node-{i}")).find(|n| *n != node).unwrap());
    c.node(&["taint", &other, "maintenance:NoSchedule"]).await.ok(&format!("node/{other} tainted"));
    c.nodes
        .until(&format!("{other} tainted NoSchedule"), |s| {
            has_taint(s.current.get(&other)?, "maintenance", "NoSchedule").then_some(())
        })
        .await;
    c.create_pod(json!({
        "metadata": {"name": "pinned", "annotations": {"sim.jobset.x-k8s.io/duration": "forever"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": other},
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }))
    .await;
    let pinned = c
        .pods
        .until("pinned to be unschedulable", |s| {
            let p = s.current.get("pinned")?;
            condition(p, "PodScheduled")
                .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
                .then(|| p.clone())
        })
        .await;
    assert_eq!((phase(&pinned), node_of(&pinned)), (Some("Pending"), None), "{pinned:#?}");
    // The pods already running there were left alone.
    let seen = c.pods.seen();
    for p in seen.history.iter().map(|(_, p)| p).filter(|p| node_of(p) == Some(other.as_str())) {
        assert!(condition(p, "DisruptionTarget").is_none(), "NoSchedule disrupted {}", p.name_any());
    }
    drop(seen);
    c.server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_a_clear_error() {
    let server = start().await;
    let kc = server.kubeconfig.clone();
    jobset(&kc, &["node", "fail", "nope"]).await.failed(&["\"nope\"", "not found"]);
    jobset(&kc, &["node", "recover", "nope"]).await.failed(&["\"nope\"", "not found"]);
    jobset(&kc, &["node", "taint", "nope", "a=b:NoSchedule"]).await.failed(&["\"nope\"", "not found"]);
    jobset(&kc, &["node", "taint", "node-0", "bad"]).await.failed(&["KEY[=VALUE]:EFFECT"]);
    jobset(&kc, &["node", "taint", "node-0", "a=b:Sometimes"])
        .await
        .failed(&["NoSchedule, PreferNoSchedule or NoExecute"]);
    server.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn label_sets_and_removes_node_labels_like_kubectl() {
    const HEALTH: &str = "autopilot.ibm.com/gpuhealth";
    let server = start().await;
    let kc = server.kubeconfig.clone();
    let nodes: Api<Node> = Api::all(server.client.clone());
    let labels = || async { call("get node-0", nodes.get("node-0")).await.labels().clone() };
    let label = |args: &[&str]| {
        let all: Vec<String> = ["node", "label", "node-0"].iter().chain(args).map(|s| s.to_string()).collect();
        let kc = kc.clone();
        async move { jobset(&kc, &all.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    label(&[&format!("{HEALTH}=WARN"), "team=ml"]).await.ok("node/node-0 labeled");
    let now = labels().await;
    assert_eq!((now.get(HEALTH).map(String::as_str), now.get("team").map(String::as_str)), (Some("WARN"), Some("ml")));
    assert_eq!(now.get("kubernetes.io/hostname").map(String::as_str), Some("node-0"), "other labels are kept");

    // A different value needs --overwrite; setting the same value again does not.
    label(&[&format!("{HEALTH}=EVICT")])
        .await
        .failed(&["'autopilot.ibm.com/gpuhealth' already has a value (WARN), and --overwrite is false"]);
    assert_eq!(labels().await.get(HEALTH).map(String::as_str), Some("WARN"));
    label(&[&format!("{HEALTH}=WARN")]).await.ok("node/node-0 not labeled");
    label(&[&format!("{HEALTH}=EVICT"), "--overwrite"]).await.ok("node/node-0 labeled");
    assert_eq!(labels().await.get(HEALTH).map(String::as_str), Some("EVICT"));

    label(&[&format!("{HEALTH}-"), "team-"]).await.ok("node/node-0 unlabeled");
    let now = labels().await;
    assert!(!now.contains_key(HEALTH) && !now.contains_key("team"), "{now:?}");
    assert_eq!(now.get("kubernetes.io/hostname").map(String::as_str), Some("node-0"));
    label(&["team-"]).await.ok("label \"team\" not found.\nnode/node-0 not labeled");

    // Bad input names the argument and changes nothing.
    label(&["bad key=v"]).await.failed(&["invalid label key", "\"bad key=v\""]);
    label(&["k=not ok"]).await.failed(&["invalid label value", "\"k=not ok\""]);
    label(&["k"]).await.failed(&["unknown label spec: k"]);
    jobset(&kc, &["node", "label", "nope", "a=b"]).await.failed(&["\"nope\"", "not found"]);
    assert_eq!(labels().await, now);
    server.check();
}
