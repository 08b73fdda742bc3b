//! The chaos scenarios: a JobSet of process pods (real `sh` commands) that fail by exit code on
//! given restart attempts, so the fault-free end state is known from the definition alone.

use jobset_api::jobset::agent::AGENT_IMAGE;
use jobset_api::jobset::keys;
use serde_json::{Value, json};

use super::verdict::EndState;

/// The JobSet's name in every variant (the AppWrapper's too).
pub const NAME: &str = "chaos";
/// Restart attempts on which one worker exits 1 (that of Job index `attempt % 2`): attempts
/// `0..FAILING_ATTEMPTS` fail.
pub const FAILING_ATTEMPTS: i64 = 2;
/// The environment variable that marks every container process of a run.
pub const MARKER_ENV: &str = "JOBSET_CHAOS_RUN";

/// A workload shape.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    /// Failures restart the JobSet by recreating its Jobs.
    Recreate,
    /// Failures restart every pod in place, through the in-place restart agent sidecar.
    InPlace,
    /// The Recreate JobSet wrapped in an AppWrapper.
    Appwrapper,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Recreate => "recreate",
            Variant::InPlace => "in-place",
            Variant::Appwrapper => "appwrapper",
        }
    }

    /// The object to create.
    pub fn manifest(self, marker: &str, work: &str) -> Value {
        match self {
            Variant::Recreate => jobset(recreate_spec(marker, work)),
            Variant::InPlace => jobset(in_place_spec(marker, work)),
            Variant::Appwrapper => json!({
                "apiVersion": jobset_api::appwrapper::keys::API_VERSION,
                "kind": jobset_api::appwrapper::keys::KIND,
                "metadata": {"name": NAME},
                "spec": {"components": [{"template": jobset(recreate_spec(marker, work))}]},
            }),
        }
    }

    /// The end state of every run, derived from the scenario: a worker fails on each of the first
    /// [`FAILING_ATTEMPTS`] attempts, so the JobSet restarts exactly that many times (Recreate:
    /// `restarts`; in place: `currentInPlaceRestartAttempt`, `restarts` staying 0), then
    /// completes; the AppWrapper sees its JobSet complete without resetting it.
    pub fn expected(self) -> EndState {
        let completed = EndState {
            condition: keys::COND_COMPLETED.into(),
            reason: keys::REASON_ALL_JOBS_COMPLETED.into(),
            restarts: FAILING_ATTEMPTS,
            in_place_attempt: None,
            wrapper: None,
        };
        match self {
            Variant::Recreate => completed,
            Variant::InPlace => EndState { restarts: 0, in_place_attempt: Some(FAILING_ATTEMPTS), ..completed },
            Variant::Appwrapper => EndState { wrapper: Some(("Succeeded".into(), 0)), ..completed },
        }
    }
}

fn jobset(spec: Value) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": NAME}, "spec": spec})
}

fn field_env(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

/// The worker: at a failing attempt (`$ATTEMPT`), the worker of Job index `$ATTEMPT % 2` exits 1
/// after `work` and the others wait to be restarted (a pod that succeeded could not join an
/// in-place restart, so which pods finish must not depend on timing); at the last attempt every
/// worker exits 0 after `work`. The failing worker alternates so that, in place, no container
/// triggers two pod restarts: the second would wait a CrashLoopBackOff delay (10 s in `jobset
/// up`, kubelet's), which the end state does not depend on and the runs would only wait out.
fn script(work: &str) -> String {
    format!(
        "if [ \"$ATTEMPT\" -lt {FAILING_ATTEMPTS} ]; then \
         if [ \"$JOB_INDEX\" = $((ATTEMPT % 2)) ]; then sleep {work}; exit 1; fi; exec sleep 3600; fi; \
         sleep {work}; exit 0"
    )
}

/// Two Jobs of one pod each; a pod failure fails its Job (backoffLimit 0), which restarts the
/// JobSet, except a disruption (a lost node), which the Job replaces without counting it.
fn recreate_spec(marker: &str, work: &str) -> Value {
    json!({
        "failurePolicy": {"maxRestarts": FAILING_ATTEMPTS + 3},
        "replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": "busybox",
                    "env": [
                        {"name": MARKER_ENV, "value": marker},
                        field_env("ATTEMPT", &format!("metadata.labels['{}']", keys::RESTART_ATTEMPT)),
                        field_env("JOB_INDEX", &format!("metadata.labels['{}']", keys::JOB_INDEX)),
                    ],
                    "command": ["sh", "-c", script(work)],
                }],
            }},
        }}}],
    })
}

/// As examples/in-place-restart: two Jobs of one pod, each with the agent sidecar (the process
/// runtime runs `jobset agent` for its image) whose startupProbe is the barrier; a worker exiting
/// non-zero restarts its pod in place and the agents restart the others. The attempt is the
/// pod's in-place restart attempt annotation, which the agent sets before the barrier lifts.
fn in_place_spec(marker: &str, work: &str) -> Value {
    let marker_env = json!({"name": MARKER_ENV, "value": marker});
    let rules = json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]);
    json!({
        "failurePolicy": {"maxRestarts": FAILING_ATTEMPTS + 3, "restartStrategy": "InPlaceRestart"},
        "replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": 2147483647,
            "podReplacementPolicy": "Failed",
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "initContainers": [{
                    "name": "agent", "image": format!("{AGENT_IMAGE}:v0.11.0"), "restartPolicy": "Always",
                    "restartPolicyRules": rules,
                    "startupProbe": {"httpGet": {"path": "/barrier-is-down", "port": 8081}, "failureThreshold": 600, "periodSeconds": 1},
                    "env": [
                        marker_env,
                        field_env("JOBSET_NAME", &format!("metadata.annotations['{}']", keys::JOBSET_NAME)),
                        field_env("POD_NAME", "metadata.name"),
                    ],
                }],
                "containers": [{
                    "name": "main", "image": "busybox", "restartPolicy": "Never", "restartPolicyRules": rules,
                    "env": [
                        marker_env,
                        field_env("ATTEMPT", &format!("metadata.annotations['{}']", keys::IN_PLACE_RESTART_ATTEMPT)),
                        field_env("JOB_INDEX", &format!("metadata.labels['{}']", keys::JOB_INDEX)),
                    ],
                    "command": ["sh", "-c", script(work)],
                }],
            }},
        }}}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_is_a_valid_object_with_the_marker_on_every_container() {
        for v in [Variant::Recreate, Variant::InPlace, Variant::Appwrapper] {
            let m = v.manifest("run-7", "0.5");
            let js = if v == Variant::Appwrapper {
                let js = m.pointer("/spec/components/0/template").unwrap().clone();
                let _: jobset_api::appwrapper::AppWrapper = serde_json::from_value(m).expect("an AppWrapper");
                js
            } else {
                m
            };
            let parsed: jobset_api::jobset::JobSet = serde_json::from_value(js.clone()).expect("a JobSet");
            assert_eq!(parsed.metadata.name.as_deref(), Some(NAME));
            let pod = js.pointer("/spec/replicatedJobs/0/template/spec/template/spec").unwrap();
            let containers =
                ["containers", "initContainers"].iter().filter_map(|k| pod.get(*k).and_then(Value::as_array)).flatten();
            for c in containers {
                assert!(
                    c["env"].as_array().unwrap().contains(&json!({"name": MARKER_ENV, "value": "run-7"})),
                    "{v:?}: {c}"
                );
            }
        }
    }

    #[test]
    fn the_script_fails_one_worker_in_turn_on_the_failing_attempts_only() {
        let run = |index: &str, attempt: i64| {
            let mut child = std::process::Command::new("sh")
                .args(["-c", &script("0")])
                .env("JOB_INDEX", index)
                .env("ATTEMPT", attempt.to_string())
                .spawn()
                .unwrap();
            // A worker waiting to be restarted is still running a moment later.
            for _ in 0..50 {
                if let Some(status) = child.try_wait().unwrap() {
                    return status.code();
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            child.kill().unwrap();
            child.wait().unwrap();
            None
        };
        // (attempt, index 0's exit, index 1's exit; None: still waiting)
        let table = [(0, Some(1), None), (1, None, Some(1)), (2, Some(0), Some(0)), (3, Some(0), Some(0))];
        assert_eq!(FAILING_ATTEMPTS, 2, "the table's failing attempts");
        for (attempt, index0, index1) in table {
            assert_eq!(run("0", attempt), index0, "index 0, attempt {attempt}");
            assert_eq!(run("1", attempt), index1, "index 1, attempt {attempt}");
        }
    }

    #[test]
    fn expected_end_states_follow_from_the_failing_attempts() {
        assert_eq!(Variant::Recreate.expected().to_string(), "Completed (AllJobsCompleted), restarts 2");
        assert_eq!(
            Variant::InPlace.expected().to_string(),
            "Completed (AllJobsCompleted), restarts 0, in-place attempt 2"
        );
        assert_eq!(
            Variant::Appwrapper.expected().to_string(),
            "Completed (AllJobsCompleted), restarts 2, AppWrapper Succeeded with 0 retries"
        );
    }
}
