//! Progress of the waited-for workloads, rendered from their status (pure).

use serde_json::Value;

/// How a workload ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Succeeded,
    Failed { reason: String, message: String },
}

/// One waited-for workload's counts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    /// `job.batch/name`.
    pub name: String,
    pub active: i64,
    pub ready: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub restarts: i64,
    /// JobSets only: `status.restartsCountTowardsMax` (shown in the summary with `restarts`).
    pub restarts_towards_max: Option<i64>,
    /// AppWrappers only: `status.phase`, the status word until the AppWrapper finishes (`New`
    /// before the controller has set one).
    pub phase: Option<String>,
    /// AppWrappers only: `status.resettingCount`, shown as `resets N` in place of `restarts N`
    /// (and in the table's RESTARTS column).
    pub resets: Option<i64>,
    pub outcome: Option<Outcome>,
}

impl Row {
    pub fn status(&self) -> &str {
        match &self.outcome {
            None => self.phase.as_deref().unwrap_or("Running"),
            Some(Outcome::Succeeded) => "Succeeded",
            Some(Outcome::Failed { .. }) => "Failed",
        }
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The first of `types` among the object's conditions with status True.
fn true_condition<'a>(obj: &'a Value, types: &[&str]) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| types.contains(&c["type"].as_str().unwrap_or_default()) && c["status"] == "True")
}

fn outcome(obj: &Value, success: &str) -> Option<Outcome> {
    let c = true_condition(obj, &[success, "Failed"])?;
    Some(if c["type"] == success {
        Outcome::Succeeded
    } else {
        Outcome::Failed {
            reason: c["reason"].as_str().unwrap_or_default().to_string(),
            message: c["message"].as_str().unwrap_or_default().to_string(),
        }
    })
}

/// A batch/v1 Job: counts from its status (uncountedTerminatedPods ignored); finished on a
/// Complete or Failed condition.
pub fn job_row(name: &str, job: &Value, restarts: i64) -> Row {
    let s = &job["status"];
    Row {
        name: name.to_string(),
        active: int(&s["active"]),
        ready: int(&s["ready"]),
        succeeded: int(&s["succeeded"]),
        failed: int(&s["failed"]),
        restarts,
        outcome: outcome(job, "Complete"),
        ..Row::default()
    }
}

/// A JobSet: counts summed over `status.replicatedJobsStatus`; finished on Completed or Failed.
pub fn jobset_row(name: &str, js: &Value) -> Row {
    let mut row = Row { name: name.to_string(), outcome: outcome(js, "Completed"), ..Row::default() };
    for r in js["status"]["replicatedJobsStatus"].as_array().into_iter().flatten() {
        row.active += int(&r["active"]);
        row.ready += int(&r["ready"]);
        row.succeeded += int(&r["succeeded"]);
        row.failed += int(&r["failed"]);
    }
    row.restarts = int(&js["status"]["restarts"]);
    row.restarts_towards_max = Some(int(&js["status"]["restartsCountTowardsMax"]));
    row
}

/// The failed pods of an AppWrapper's current attempt, as `run` last saw them: a Failed
/// AppWrapper's `FoundFailedPods` condition has no message, and its pods are deleted as it fails.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FailedPods {
    /// `status.resettingCount` when they were seen.
    resets: i64,
    /// One per failed pod: `NAME (CONTAINER: exit code N)`.
    pods: Vec<String>,
}

impl FailedPods {
    /// Records the failed pods among `pods` (the AppWrapper's labelled pods) while the AppWrapper
    /// is Running or Failed, when they are its current attempt's (failed pods seen once stay
    /// recorded until others are seen); forgets them in the other phases but Succeeded, whose
    /// pods are an earlier attempt's or none. Pods being deleted count only when a container
    /// exited with a code of its own: the others fail because the AppWrapper is tearing them
    /// down (killed: exit code 143 or 137), not the other way round. A pod that failed on its
    /// own is often first seen already being deleted, when the AppWrapper failed between polls.
    pub fn observe(&mut self, aw: &Value, pods: &[Value]) {
        match aw["status"]["phase"].as_str() {
            Some("Running" | "Failed") => {
                let failed: Vec<String> = pods.iter().filter(|p| failed_on_its_own(p)).map(failed_pod).collect();
                if !failed.is_empty() {
                    *self = FailedPods { resets: int(&aw["status"]["resettingCount"]), pods: failed };
                }
            }
            Some("Succeeded") => {}
            _ => *self = FailedPods::default(),
        }
    }

    /// `1 failed pod: a (main: exit code 42)`, `2 failed pods: a (...), b (...)`.
    fn message(&self) -> String {
        let n = self.pods.len();
        format!("{n} failed pod{}: {}", if n == 1 { "" } else { "s" }, self.pods.join(", "))
    }
}

/// Whether `pod` failed, and not only because it is being deleted (see [`FailedPods::observe`]).
fn failed_on_its_own(pod: &Value) -> bool {
    const KILLED: [i64; 2] = [128 + 15, 128 + 9];
    pod["status"]["phase"] == "Failed"
        && (pod["metadata"]["deletionTimestamp"].is_null() || exit_codes(pod).any(|(_, code)| !KILLED.contains(&code)))
}

/// The app containers' non-zero exit codes, by container name.
fn exit_codes(pod: &Value) -> impl Iterator<Item = (&str, i64)> {
    pod["status"]["containerStatuses"].as_array().into_iter().flatten().filter_map(|c| {
        let code = c["state"]["terminated"]["exitCode"].as_i64().filter(|&code| code != 0)?;
        Some((c["name"].as_str().unwrap_or_default(), code))
    })
}

/// `NAME (CONTAINER: exit code N, ...)` over the app containers that exited non-zero; else
/// `NAME (REASON)` from the pod's status (`Evicted`, ...), else just `NAME`.
fn failed_pod(pod: &Value) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let exits: Vec<String> = exit_codes(pod).map(|(name, code)| format!("{name}: exit code {code}")).collect();
    match pod["status"]["reason"].as_str() {
        _ if !exits.is_empty() => format!("{name} ({})", exits.join(", ")),
        Some(reason) if !reason.is_empty() => format!("{name} ({reason})"),
        _ => name.to_string(),
    }
}

/// An AppWrapper (`workload.codeflare.dev`): finished when `status.phase` is Succeeded or Failed;
/// until then the status word is its phase (`Suspended`, `Resuming`, `Running`, `Resetting`,
/// ...). Counts are over its pods (those labelled `workload.codeflare.dev/appwrapper=NAME`,
/// whatever wrapped object made them): active = Pending + Running, ready = with condition Ready
/// True, succeeded, failed. `resets` is `status.resettingCount`.
///
/// A Failed AppWrapper's reason and message are its `Unhealthy` condition's when that is True.
/// The controller always sets it to the health check that failed before it fails an AppWrapper
/// (`FoundFailedPods`, `FailedComponent`, `MissingComponent`, `InsufficientPodsReady`,
/// `CreateFailed`, `AutopilotNoExecute`), which tells more than the conditions recording the
/// clean-up (ResourcesDeployed: `Resources deleted for failed AppWrapper`). Otherwise they are
/// those of the condition that changed last. `FoundFailedPods` has no message (as upstream's):
/// it is then `failed`'s description of the failed pods with their exit codes (e.g. `1 failed
/// pod: x-0-abcde (main: exit code 42)`), when `failed` was recorded in the same attempt (same
/// `resettingCount`).
pub fn appwrapper_row(name: &str, aw: &Value, pods: &[Value], failed: &FailedPods) -> Row {
    let s = &aw["status"];
    let resets = int(&s["resettingCount"]);
    let phase = s["phase"].as_str().filter(|p| !p.is_empty()).unwrap_or("New");
    let outcome = match phase {
        "Succeeded" => Some(Outcome::Succeeded),
        "Failed" => {
            let conditions = s["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
            let latest = conditions.iter().max_by_key(|c| c["lastTransitionTime"].as_str().unwrap_or_default());
            let c = true_condition(aw, &["Unhealthy"]).or(latest);
            let text = |c: Option<&Value>, k: &str| c.and_then(|c| c[k].as_str()).unwrap_or_default().to_string();
            let (reason, mut message) = (text(c, "reason"), text(c, "message"));
            if message.is_empty() && reason == "FoundFailedPods" && !failed.pods.is_empty() && failed.resets == resets {
                message = failed.message();
            }
            Some(Outcome::Failed { reason, message })
        }
        _ => None,
    };
    let mut row =
        Row { name: name.to_string(), phase: Some(phase.to_string()), resets: Some(resets), outcome, ..Row::default() };
    for p in pods {
        match p["status"]["phase"].as_str().unwrap_or_default() {
            "Pending" | "Running" => row.active += 1,
            "Succeeded" => row.succeeded += 1,
            "Failed" => row.failed += 1,
            _ => {}
        }
        let ready = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready && p["status"]["phase"] == "Running" {
            row.ready += 1;
        }
    }
    row
}

/// One line per row, for logs and pipes.
pub fn line(row: &Row) -> String {
    let restarts = match row.resets {
        Some(n) => format!("resets {n}"),
        None => format!("restarts {}", row.restarts),
    };
    format!(
        "{}: {}, active {}, ready {}, succeeded {}, failed {}, {restarts}",
        row.name,
        row.status(),
        row.active,
        row.ready,
        row.succeeded,
        row.failed,
    )
}

/// An aligned table with a header, for terminals.
pub fn table(rows: &[Row]) -> Vec<String> {
    let header = ["NAME", "STATUS", "ACTIVE", "READY", "SUCCEEDED", "FAILED", "RESTARTS"].map(String::from).to_vec();
    let mut cells = vec![header];
    for r in rows {
        cells.push(vec![
            r.name.clone(),
            r.status().to_string(),
            r.active.to_string(),
            r.ready.to_string(),
            r.succeeded.to_string(),
            r.failed.to_string(),
            r.resets.unwrap_or(r.restarts).to_string(),
        ]);
    }
    align(&cells)
}

/// Columns padded to their widest cell plus 3 spaces, as kubectl's tabwriter; no trailing spaces.
pub fn align(cells: &[Vec<String>]) -> Vec<String> {
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| cells.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0))
        .collect();
    cells
        .iter()
        .map(|r| {
            let mut s = String::new();
            for (i, c) in r.iter().enumerate() {
                if i + 1 == r.len() {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}", w = widths[i] + 3));
                }
            }
            s
        })
        .collect()
}

/// The final word on a row (`failed: REASON: MESSAGE`, or `failed: REASON` without a message);
/// for a JobSet followed by `; restarts N (M towards maxRestarts)`, for an AppWrapper by
/// `; resets N`.
pub fn summary(row: &Row) -> String {
    let word = match &row.outcome {
        Some(Outcome::Succeeded) => format!("{} succeeded", row.name),
        Some(Outcome::Failed { reason, message }) if message.is_empty() => format!("{} failed: {reason}", row.name),
        Some(Outcome::Failed { reason, message }) => format!("{} failed: {reason}: {message}", row.name),
        None => format!("{} did not finish", row.name),
    };
    match (row.restarts_towards_max, row.resets) {
        (Some(m), _) => format!("{word}; restarts {} ({m} towards maxRestarts)", row.restarts),
        (None, Some(n)) => format!("{word}; resets {n}"),
        (None, None) => word,
    }
}

pub const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_counts_and_outcomes() {
        let running = json!({"status": {"active": 2, "ready": 1, "succeeded": 3,
            "uncountedTerminatedPods": {"succeeded": ["x"]}}});
        let row = job_row("job.batch/a", &running, 4);
        assert_eq!(line(&row), "job.batch/a: Running, active 2, ready 1, succeeded 3, failed 0, restarts 4");
        let failed = json!({"status": {"failed": 1, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "m"},
            {"type": "Complete", "status": "False"},
            {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit 3"}]}});
        let row = job_row("job.batch/b", &failed, 0);
        assert_eq!(row.outcome, Some(Outcome::Failed { reason: "PodFailurePolicy".into(), message: "exit 3".into() }));
        assert_eq!(summary(&row), "job.batch/b failed: PodFailurePolicy: exit 3");
        let done = json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(job_row("j", &done, 0).outcome, Some(Outcome::Succeeded));
        assert_eq!(job_row("j", &json!({}), 0).outcome, None);
    }

    #[test]
    fn jobsets_sum_their_replicated_jobs() {
        let js = json!({"status": {"restarts": 1, "replicatedJobsStatus": [
            {"name": "w", "active": 2, "ready": 2, "succeeded": 0, "failed": 0},
            {"name": "d", "active": 0, "ready": 0, "succeeded": 1, "failed": 1}],
            "conditions": [{"type": "Completed", "status": "True"}]}});
        let row = jobset_row("jobset.jobset.x-k8s.io/t", &js);
        assert_eq!((row.active, row.ready, row.succeeded, row.failed, row.restarts), (2, 2, 1, 1, 1));
        assert_eq!(row.outcome, Some(Outcome::Succeeded));
        assert_eq!(summary(&row), "jobset.jobset.x-k8s.io/t succeeded; restarts 1 (0 towards maxRestarts)");
        let failed = json!({"status": {"restarts": 3, "restartsCountTowardsMax": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "m (first failed job: j)"}]}});
        assert_eq!(
            summary(&jobset_row("jobset.jobset.x-k8s.io/f", &failed)),
            "jobset.jobset.x-k8s.io/f failed: ReachedMaxRestarts: m (first failed job: j); restarts 3 (1 towards maxRestarts)"
        );
        assert_eq!(jobset_row("x", &json!({})).outcome, None, "no status yet: still waiting");
    }

    fn pod(name: &str, phase: &str, ready: bool, exit: Option<i64>) -> Value {
        let state = match exit {
            Some(code) => json!({"terminated": {"exitCode": code}}),
            None => json!({"running": {}}),
        };
        json!({"metadata": {"name": name}, "status": {"phase": phase,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            "containerStatuses": [{"name": "main", "state": state}]}})
    }

    #[test]
    fn appwrappers_show_their_phase_pods_and_resets() {
        let aw = json!({"status": {"phase": "Resetting", "resettingCount": 1}});
        let pods = [
            pod("a", "Running", true, None),
            pod("b", "Pending", false, None),
            pod("c", "Succeeded", false, Some(0)),
            pod("d", "Failed", false, Some(1)),
        ];
        let row = appwrapper_row("appwrapper.workload.codeflare.dev/w", &aw, &pods, &FailedPods::default());
        assert_eq!(
            line(&row),
            "appwrapper.workload.codeflare.dev/w: Resetting, active 2, ready 1, succeeded 1, failed 1, resets 1"
        );
        assert_eq!(row.outcome, None);
        assert_eq!(table(std::slice::from_ref(&row))[1].split_whitespace().last(), Some("1"), "resets as RESTARTS");
        assert_eq!(appwrapper_row("x", &json!({}), &[], &FailedPods::default()).status(), "New");

        let done = json!({"status": {"phase": "Succeeded", "resettingCount": 1, "conditions": [
            {"type": "Unhealthy", "status": "False", "reason": "FoundNoFailedPods", "message": ""}]}});
        let row = appwrapper_row("appwrapper.workload.codeflare.dev/w", &done, &[], &FailedPods::default());
        assert_eq!(summary(&row), "appwrapper.workload.codeflare.dev/w succeeded; resets 1");
    }

    #[test]
    fn a_failed_appwrapper_says_which_health_check_failed() {
        let failed =
            |conditions: Value| json!({"status": {"phase": "Failed", "resettingCount": 2, "conditions": conditions}});
        let cleanup = json!({"type": "ResourcesDeployed", "status": "False", "reason": "Failed",
            "message": "Resources deleted for failed AppWrapper", "lastTransitionTime": "2025-01-01T00:00:09Z"});
        let aw = failed(json!([
            {"type": "Unhealthy", "status": "True", "reason": "InsufficientPodsReady",
             "message": "1 pods pending; 0 pods running; 0 pods succeeded", "lastTransitionTime": "2025-01-01T00:00:01Z"},
            cleanup.clone()]));
        let row = appwrapper_row("aw/x", &aw, &[], &FailedPods::default());
        assert_eq!(
            summary(&row),
            "aw/x failed: InsufficientPodsReady: 1 pods pending; 0 pods running; 0 pods succeeded; resets 2"
        );

        // No Unhealthy=True: the condition that changed last.
        let aw = failed(json!([
            {"type": "Unhealthy", "status": "False", "reason": "FoundNoFailedPods", "lastTransitionTime": "2025-01-01T00:00:01Z"},
            cleanup,
            {"type": "QuotaReserved", "status": "False", "reason": "Failed", "message": "No resources deployed",
             "lastTransitionTime": "2025-01-01T00:00:05Z"}]));
        assert_eq!(
            summary(&appwrapper_row("aw/x", &aw, &[], &FailedPods::default())),
            "aw/x failed: Failed: Resources deleted for failed AppWrapper; resets 2"
        );
    }

    #[test]
    fn found_failed_pods_is_told_by_the_failed_pods_of_the_same_attempt() {
        let status = |phase: &str, resets: i64| {
            json!({"status": {"phase": phase, "resettingCount": resets, "conditions": [
                {"type": "Unhealthy", "status": "True", "reason": "FoundFailedPods", "message": ""}]}})
        };
        let pods = [pod("w-0-abc", "Failed", false, Some(42)), pod("w-1-def", "Running", true, None)];
        let mut failed = FailedPods::default();
        failed.observe(&status("Running", 0), &pods);
        // The pods are being deleted when the phase is Failed: what was seen before tells.
        let mut killed = pod("w-1-def", "Failed", false, Some(143));
        killed["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        failed.observe(&status("Failed", 0), &[killed.clone()]);
        let row = appwrapper_row("aw/t", &status("Failed", 0), &[], &failed);
        assert_eq!(summary(&row), "aw/t failed: FoundFailedPods: 1 failed pod: w-0-abc (main: exit code 42); resets 0");

        // First seen when the AppWrapper failed and is deleting its pods: the pod that failed on
        // its own tells, the one killed by the teardown does not.
        let mut own = pods[0].clone();
        own["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        let mut late = FailedPods::default();
        late.observe(&status("Failed", 0), &[own, killed]);
        let row = appwrapper_row("aw/t", &status("Failed", 0), &[], &late);
        assert_eq!(summary(&row), "aw/t failed: FoundFailedPods: 1 failed pod: w-0-abc (main: exit code 42); resets 0");

        // Two failed pods, one evicted.
        let mut evicted = pod("w-1-def", "Failed", false, None);
        evicted["status"]["reason"] = json!("Evicted");
        let mut two = FailedPods::default();
        two.observe(&status("Running", 0), &[pods[0].clone(), evicted]);
        assert_eq!(
            summary(&appwrapper_row("aw/t", &status("Failed", 0), &[], &two)),
            "aw/t failed: FoundFailedPods: 2 failed pods: w-0-abc (main: exit code 42), w-1-def (Evicted); resets 0"
        );

        // An earlier attempt's pods do not tell why a later one failed.
        assert_eq!(
            summary(&appwrapper_row("aw/t", &status("Failed", 1), &[], &failed)),
            "aw/t failed: FoundFailedPods; resets 1"
        );
        // A reset forgets them.
        failed.observe(&status("Resetting", 1), &pods);
        assert_eq!(failed, FailedPods::default());
    }

    #[test]
    fn tables_align_like_kubectl() {
        let rows = [
            Row { name: "job.batch/long-name".into(), active: 1, ..Row::default() },
            Row { name: "job.batch/b".into(), succeeded: 12, outcome: Some(Outcome::Succeeded), ..Row::default() },
        ];
        assert_eq!(
            table(&rows),
            [
                "NAME                  STATUS      ACTIVE   READY   SUCCEEDED   FAILED   RESTARTS",
                "job.batch/long-name   Running     1        0       0           0        0",
                "job.batch/b           Succeeded   0        0       12          0        0",
            ]
        );
    }
}
