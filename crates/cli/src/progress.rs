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
    pub outcome: Option<Outcome>,
}

impl Row {
    pub fn status(&self) -> &str {
        match &self.outcome {
            None => "Running",
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
        restarts_towards_max: None,
        outcome: outcome(job, "Complete"),
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

/// One line per row, for logs and pipes.
pub fn line(row: &Row) -> String {
    format!(
        "{}: {}, active {}, ready {}, succeeded {}, failed {}, restarts {}",
        row.name,
        row.status(),
        row.active,
        row.ready,
        row.succeeded,
        row.failed,
        row.restarts
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
            r.restarts.to_string(),
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

/// The final word on a row; for a JobSet followed by `; restarts N (M towards maxRestarts)`.
pub fn summary(row: &Row) -> String {
    let word = match &row.outcome {
        Some(Outcome::Succeeded) => format!("{} succeeded", row.name),
        Some(Outcome::Failed { reason, message }) => format!("{} failed: {reason}: {message}", row.name),
        None => format!("{} did not finish", row.name),
    };
    match row.restarts_towards_max {
        Some(m) => format!("{word}; restarts {} ({m} towards maxRestarts)", row.restarts),
        None => word,
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
