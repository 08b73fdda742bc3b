//! `jobset describe KIND NAME`: metadata, the spec essentials, status, conditions and events,
//! as readable text (pure rendering; the shell fetches the object and its events).

use clap::Args;
use jiff::Timestamp;
use jobset_api::jobset::RestartRecord;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::client::{self, ClientArgs};
use crate::progress::align;
use crate::{Failure, get, kinds};

#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// The kind: `job`, `pod`, `po`, `jobs.batch`, `node`, ...
    pub kind: String,
    /// The object's name.
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `key: value` lines whose values line up (per block, as kubectl's tabwriter).
struct Block(Vec<(usize, String, String)>);

impl Block {
    fn new() -> Block {
        Block(Vec::new())
    }
    fn kv(&mut self, indent: usize, key: &str, value: impl Into<String>) {
        self.0.push((indent, format!("{key}:"), value.into()));
    }
    fn render(&self, out: &mut String) {
        let width = self.0.iter().filter(|(_, _, v)| !v.is_empty()).map(|(i, k, _)| i + k.len()).max().unwrap_or(0) + 2;
        for (indent, key, value) in &self.0 {
            let key = format!("{}{key}", " ".repeat(*indent));
            if value.is_empty() {
                out.push_str(&format!("{key}\n"));
                continue;
            }
            for (n, line) in value.split('\n').enumerate() {
                let lead = if n == 0 { key.as_str() } else { "" };
                out.push_str(&format!("{lead:width$}{line}\n"));
            }
        }
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

fn map_lines(v: &Value) -> String {
    let lines: Vec<String> = v.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", s(v))).collect();
    or_none(lines.join("\n"))
}

/// The description of `obj` (kind `kind`) with its events, at `now`.
pub fn describe(kind: &str, obj: &Value, events: &mut [Event], now: Timestamp) -> String {
    let meta = &obj["metadata"];
    let mut b = Block::new();
    b.kv(0, "Name", s(&meta["name"]));
    if !meta["namespace"].is_null() {
        b.kv(0, "Namespace", s(&meta["namespace"]));
    }
    b.kv(0, "Labels", map_lines(&meta["labels"]));
    b.kv(0, "Annotations", map_lines(&meta["annotations"]));
    b.kv(0, "Created", s(&meta["creationTimestamp"]));
    if let Some(owner) = meta["ownerReferences"].as_array().and_then(|o| o.iter().find(|o| o["controller"] == true)) {
        b.kv(0, "Controlled By", format!("{}/{}", s(&owner["kind"]), s(&owner["name"])));
    }
    match kind {
        "Job" => job(&mut b, obj),
        "Pod" => pod(&mut b, obj),
        "JobSet" => {
            jobset(&mut b, obj, now);
            generic(&mut b, obj);
        }
        _ => generic(&mut b, obj),
    }
    let mut out = String::new();
    b.render(&mut out);
    conditions(&mut out, obj);
    if kind == "JobSet" {
        rule_budgets(&mut out, obj);
        restarts(&mut out, obj);
    }
    events_section(&mut out, events, now);
    out
}

fn job(b: &mut Block, j: &Value) {
    let spec = &j["spec"];
    let st = &j["status"];
    b.kv(0, "Parallelism", or_none(s(&spec["parallelism"])));
    b.kv(0, "Completions", if spec["completions"].is_null() { "<unset>".into() } else { s(&spec["completions"]) });
    b.kv(0, "Completion Mode", or_none(s(&spec["completionMode"])));
    b.kv(0, "Suspend", or_none(s(&spec["suspend"])));
    b.kv(0, "Backoff Limit", or_none(s(&spec["backoffLimit"])));
    if !spec["backoffLimitPerIndex"].is_null() {
        b.kv(0, "Backoff Limit Per Index", s(&spec["backoffLimitPerIndex"]));
    }
    if let Some(rules) = spec["podFailurePolicy"]["rules"].as_array() {
        let lines: Vec<String> = rules
            .iter()
            .map(|r| {
                let on = if r["onExitCodes"].is_null() {
                    format!("on pod conditions {}", r["onPodConditions"])
                } else {
                    let e = &r["onExitCodes"];
                    format!("on exit codes {} {}", s(&e["operator"]), e["values"])
                };
                format!("{} {on}", s(&r["action"]))
            })
            .collect();
        b.kv(0, "Pod Failure Policy", lines.join("\n"));
    }
    b.kv(0, "Start Time", or_none(s(&st["startTime"])));
    if !st["completionTime"].is_null() {
        b.kv(0, "Completed At", s(&st["completionTime"]));
    }
    let n = |k: &str| st[k].as_i64().unwrap_or(0);
    b.kv(
        0,
        "Pods Statuses",
        format!(
            "{} Active ({} Ready) / {} Succeeded / {} Failed",
            n("active"),
            n("ready"),
            n("succeeded"),
            n("failed")
        ),
    );
    if !st["completedIndexes"].is_null() {
        b.kv(0, "Completed Indexes", s(&st["completedIndexes"]));
    }
    b.kv(0, "Pod Template", "");
    containers(b, 2, &spec["template"]["spec"]["containers"], &Value::Null);
}

fn pod(b: &mut Block, p: &Value) {
    let spec = &p["spec"];
    let st = &p["status"];
    let node = s(&spec["nodeName"]);
    let host = s(&st["hostIP"]);
    b.kv(
        0,
        "Node",
        if node.is_empty() {
            "<none>".into()
        } else if host.is_empty() {
            node
        } else {
            format!("{node}/{host}")
        },
    );
    b.kv(0, "Start Time", or_none(s(&st["startTime"])));
    b.kv(0, "Status", s(&st["phase"]));
    if !st["reason"].is_null() {
        b.kv(0, "Reason", s(&st["reason"]));
        b.kv(0, "Message", s(&st["message"]));
    }
    b.kv(0, "IP", s(&st["podIP"]));
    b.kv(0, "Restart Policy", s(&spec["restartPolicy"]));
    b.kv(0, "Containers", "");
    containers(b, 2, &spec["containers"], &st["containerStatuses"]);
}

fn containers(b: &mut Block, indent: usize, specs: &Value, statuses: &Value) {
    for c in specs.as_array().into_iter().flatten() {
        let name = s(&c["name"]);
        b.kv(indent, &name, "");
        let i = indent + 2;
        b.kv(i, "Image", s(&c["image"]));
        if let Some(cmd) = c["command"].as_array() {
            b.kv(i, "Command", cmd.iter().map(s).collect::<Vec<_>>().join("\n"));
        }
        if let Some(args) = c["args"].as_array() {
            b.kv(i, "Args", args.iter().map(s).collect::<Vec<_>>().join("\n"));
        }
        let status = statuses.as_array().into_iter().flatten().find(|st| st["name"] == c["name"]);
        if let Some(st) = status {
            state(b, i, "State", &st["state"]);
            if st["lastState"].as_object().is_some_and(|o| !o.is_empty()) {
                state(b, i, "Last State", &st["lastState"]);
            }
            b.kv(i, "Ready", if st["ready"] == true { "True" } else { "False" });
            b.kv(i, "Restart Count", s(&st["restartCount"]));
        }
    }
}

fn state(b: &mut Block, indent: usize, label: &str, state: &Value) {
    let Some((which, detail)) = state.as_object().and_then(|o| o.iter().next()) else {
        b.kv(indent, label, "Waiting");
        return;
    };
    let mut word = which.clone();
    if let Some(first) = word.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    b.kv(indent, label, word);
    for (key, field) in [
        ("Reason", "reason"),
        ("Message", "message"),
        ("Exit Code", "exitCode"),
        ("Signal", "signal"),
        ("Started", "startedAt"),
        ("Finished", "finishedAt"),
    ] {
        if !detail[field].is_null() {
            b.kv(indent + 2, key, s(&detail[field]));
        }
    }
}

fn generic(b: &mut Block, obj: &Value) {
    for section in ["spec", "data", "status"] {
        let mut v = obj[section].clone();
        if let Value::Object(m) = &mut v {
            m.remove("conditions");
            if m.is_empty() {
                continue;
            }
        } else if v.is_null() {
            continue;
        }
        let yaml = get::to_yaml(&v);
        let mut title = section.to_string();
        title[0..1].make_ascii_uppercase();
        b.kv(0, &title, "");
        for line in yaml.lines() {
            b.0.push((2, line.to_string(), String::new()));
        }
    }
}

/// A JobSet's run and deadline (KEP-1282, KEP-1186), above the spec and status dump.
fn jobset(b: &mut Block, js: &Value, now: Timestamp) {
    let (spec, st) = (&js["spec"], &js["status"]);
    if !st["executionAttempts"].is_null() {
        b.kv(0, "Execution Attempts", s(&st["executionAttempts"]));
    }
    if !st["startTime"].is_null() {
        b.kv(0, "Start Time", s(&st["startTime"]));
    }
    let Some(seconds) = spec["activeDeadlineSeconds"].as_i64() else { return };
    let start = st["startTime"].as_str().and_then(|t| t.parse::<Timestamp>().ok());
    let deadline = start.and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(seconds)).ok());
    // The deadline only runs while the JobSet is active (startTime is cleared while suspended).
    let finished = st["terminalState"].as_str().is_some_and(|t| !t.is_empty());
    let value = match deadline {
        Some(d) if finished => format!("{seconds}s (deadline {d})"),
        Some(d) if d > now => {
            format!("{seconds}s (deadline {d}, in {})", jobset_apiserver::table::human_duration(d.duration_since(now)))
        }
        Some(d) => format!("{seconds}s (deadline {d}, passed)"),
        None => format!("{seconds}s (not running)"),
    };
    b.kv(0, "Active Deadline Seconds", value);
}

/// Each failure-policy rule with its own `maxRestarts` and the restarts it made
/// (`status.failurePolicyRulesStatus`), also the counts of rules no longer in the spec.
fn rule_budgets(out: &mut String, js: &Value) {
    let rules = js["spec"]["failurePolicy"]["rules"].as_array().cloned().unwrap_or_default();
    let counts = js["status"]["failurePolicyRulesStatus"].as_array().cloned().unwrap_or_default();
    let count = |name: &Value| counts.iter().find(|c| &c["name"] == name).map_or("0".into(), |c| s(&c["restarts"]));
    let mut rows: Vec<Vec<String>> = rules
        .iter()
        .filter(|r| !r["maxRestarts"].is_null())
        .map(|r| vec![s(&r["name"]), s(&r["action"]), count(&r["name"]), s(&r["maxRestarts"])])
        .collect();
    for c in &counts {
        let rule = rules.iter().find(|r| r["name"] == c["name"]);
        if rule.is_none_or(|r| r["maxRestarts"].is_null()) {
            let action = rule.map_or("<none>".into(), |r| s(&r["action"]));
            rows.push(vec![s(&c["name"]), action, s(&c["restarts"]), "<none>".into()]);
        }
    }
    if rows.is_empty() {
        return;
    }
    out.push_str("Failure Policy Rule Budgets:\n");
    let mut cells = vec![
        ["Rule", "Action", "Restarts", "Max Restarts"].map(String::from).to_vec(),
        ["----", "------", "--------", "------------"].map(String::from).to_vec(),
    ];
    cells.extend(rows);
    for l in align(&cells) {
        out.push_str(&format!("  {}\n", l.trim_end()));
    }
}

fn conditions(out: &mut String, obj: &Value) {
    let Some(cs) = obj["status"]["conditions"].as_array().filter(|c| !c.is_empty()) else { return };
    out.push_str("Conditions:\n");
    let mut cells = vec![
        ["Type", "Status", "Reason", "Message"].map(String::from).to_vec(),
        ["----", "------", "------", "-------"].map(String::from).to_vec(),
    ];
    for c in cs {
        cells.push(vec![
            s(&c["type"]),
            s(&c["status"]),
            s(&c["reason"]),
            s(&c["message"]).lines().next().unwrap_or_default().to_string(),
        ]);
    }
    for l in align(&cells) {
        out.push_str(&format!("  {}\n", l.trim_end()));
    }
}

/// How many of the recorded restarts `describe jobset` lists (the newest).
const RESTARTS_SHOWN: usize = 10;

/// A JobSet's last restarts (`status.restartHistory`): trigger and phase durations.
fn restarts(out: &mut String, obj: &Value) {
    let Some(history) = obj["status"]["restartHistory"].as_array().filter(|h| !h.is_empty()) else { return };
    let skipped = history.len().saturating_sub(RESTARTS_SHOWN);
    out.push_str("Restarts:\n");
    const PHASES: [&str; 5] = ["detect", "stop", "barrier", "start", "total"];
    let mut cells = vec![
        ["#", "Attempt", "Strategy", "Scope", "Trigger", "Detect", "Stop", "Barrier", "Start", "Total", "State"]
            .map(String::from)
            .to_vec(),
        ["-", "-------", "--------", "-----", "-------", "------", "----", "-------", "-----", "-----", "-----"]
            .map(String::from)
            .to_vec(),
    ];
    let mut unreadable = Vec::new();
    for (i, v) in history.iter().enumerate().skip(skipped) {
        let record = match serde_json::from_value::<RestartRecord>(v.clone()) {
            Ok(r) => jobset_ui::timeline::restart(i, &r),
            Err(e) => {
                unreadable.push(format!("  status.restartHistory[{i}] is unreadable: {e}\n"));
                continue;
            }
        };
        let tr = &record.trigger;
        let mut trigger = format!("{} -> {}", tr.reason, tr.action);
        let what: Vec<String> = [tr.pod.clone().or(tr.job.clone()), tr.exit_code.map(|c| format!("exit code {c}"))]
            .into_iter()
            .flatten()
            .collect();
        if !what.is_empty() {
            trigger += &format!(" ({})", what.join(", "));
        }
        let scope = match &record.target {
            Some(t) => format!("{} {t}", record.scope),
            None => record.scope.clone(),
        };
        let mut row = vec![i.to_string(), record.attempt.to_string(), record.strategy.clone(), scope, trigger];
        for p in PHASES {
            row.push(
                record
                    .phases
                    .iter()
                    .find(|x| x.name == p)
                    .map_or("-".into(), |x| jobset_ui::render::format_seconds(x.seconds)),
            );
        }
        row.push(record.progress().into());
        cells.push(row);
    }
    for l in align(&cells) {
        out.push_str(&format!("  {}\n", l.trim_end()));
    }
    out.extend(unreadable);
    if skipped > 0 {
        out.push_str(&format!("  ({skipped} earlier restarts not shown)\n"));
    }
}

fn events_section(out: &mut String, events: &mut [Event], now: Timestamp) {
    if events.is_empty() {
        out.push_str("Events:  <none>\n");
        return;
    }
    events.sort_by_key(crate::events::last_seen);
    out.push_str("Events:\n");
    let mut cells = vec![
        ["Type", "Reason", "Age", "From", "Message"].map(String::from).to_vec(),
        ["----", "------", "----", "----", "-------"].map(String::from).to_vec(),
    ];
    for e in events.iter() {
        let row = crate::events::row(e, now, false);
        let from = e
            .source
            .as_ref()
            .and_then(|s| s.component.clone())
            .or_else(|| e.reporting_component.clone())
            .unwrap_or_default();
        cells.push(vec![row[1].clone(), row[2].clone(), row[0].clone(), from, row[4].clone()]);
    }
    for l in align(&cells) {
        out.push_str(&format!("  {}\n", l.trim_end()));
    }
}

pub async fn run(args: DescribeArgs) -> anyhow::Result<i32> {
    let conn = client::connect(&args.client).await?;
    let resources = kinds::discover(&conn.client).await?;
    let resource = get::resolve_kind(&resources, &args.kind)?;
    let path = format!("{}/{}", resource.collection_path(Some(&conn.namespace)), args.name);
    let obj = get::request(&conn.client, &path, None).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let events_api: Api<Event> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced(conn.client.clone(), ns),
        None => Api::all(conn.client.clone()),
    };
    // Servers that do not index involvedObject.uid get a plain list, filtered here.
    let mut events = match events_api.list(&ListParams::default().fields(&format!("involvedObject.uid={uid}"))).await {
        Ok(l) => l.items,
        Err(_) => events_api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default(),
    };
    events.retain(|e| e.involved_object.uid.as_deref() == Some(uid.as_str()));
    print!("{}", describe(&resource.kind, &obj, &mut events, Timestamp::now()));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jobs_show_counts_conditions_and_events() {
        let job = json!({"metadata": {"name": "j", "namespace": "default", "labels": {"a": "b", "c": "d"},
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"parallelism": 2, "completions": 4, "completionMode": "Indexed", "backoffLimit": 0,
                "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]},
                "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]}}},
            "status": {"failed": 1, "active": 1, "conditions": [
                {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 3"}]}});
        let mut events: Vec<Event> = vec![
            serde_json::from_value(json!({"metadata": {"name": "e"},
            "involvedObject": {"kind": "Job", "name": "j"}, "type": "Normal", "reason": "SuccessfulCreate",
            "message": "Created pod: j-0", "source": {"component": "job-controller"},
            "lastTimestamp": "2026-01-01T00:00:01Z"}))
            .unwrap(),
        ];
        let now: Timestamp = "2026-01-01T00:00:31Z".parse().unwrap();
        let text = describe("Job", &job, &mut events, now);
        for want in [
            "Name:                j\n",
            "Labels:              a=b\n                     c=d\n",
            "Completion Mode:     Indexed\n",
            "Pod Failure Policy:  FailJob on exit codes In [3]\n",
            "Pods Statuses:       1 Active (0 Ready) / 0 Succeeded / 1 Failed\n",
            "  main:\n",
            "    Command:         sh\n                     -c\n",
            "  Failed   True     PodFailurePolicy   exit code 3\n",
            "  Normal   SuccessfulCreate   30s    job-controller   Created pod: j-0\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(describe("Job", &json!({}), &mut [], now).contains("Events:  <none>"));
    }

    #[test]
    fn pods_show_node_and_container_states() {
        let pod = json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "node-0", "restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Failed", "hostIP": "10.0.0.1", "podIP": "10.1.0.5", "containerStatuses": [
                {"name": "main", "ready": false, "restartCount": 2,
                 "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
                 "lastState": {"terminated": {"exitCode": 1}}}]}});
        let text = describe("Pod", &pod, &mut [], Timestamp::now());
        for want in [
            "Node:               node-0/10.0.0.1\n",
            "IP:                 10.1.0.5\n",
            "    State:          Terminated\n",
            "      Exit Code:    3\n",
            "    Last State:     Terminated\n",
            "    Restart Count:  2\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }

    #[test]
    fn jobsets_show_execution_attempts_start_time_and_deadline() {
        let now: Timestamp = "2026-01-01T00:04:00Z".parse().unwrap();
        let js = |spec: Value, status: Value| json!({"metadata": {"name": "js"}, "spec": spec, "status": status});
        let running = js(
            json!({"activeDeadlineSeconds": 600}),
            json!({"executionAttempts": 2, "startTime": "2026-01-01T00:00:00Z"}),
        );
        let text = describe("JobSet", &running, &mut [], now);
        for want in [
            "Execution Attempts:       2\n",
            "Start Time:               2026-01-01T00:00:00Z\n",
            "Active Deadline Seconds:  600s (deadline 2026-01-01T00:10:00Z, in 6m)\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let late = "2026-01-01T00:11:00Z".parse().unwrap();
        assert!(describe("JobSet", &running, &mut [], late).contains("(deadline 2026-01-01T00:10:00Z, passed)\n"));
        let failed = js(
            json!({"activeDeadlineSeconds": 600}),
            json!({"startTime": "2026-01-01T00:00:00Z", "terminalState": "Failed"}),
        );
        assert!(describe("JobSet", &failed, &mut [], late).contains("600s (deadline 2026-01-01T00:10:00Z)\n"));
        let suspended = js(json!({"activeDeadlineSeconds": 600, "suspend": true}), json!({"executionAttempts": 0}));
        let text = describe("JobSet", &suspended, &mut [], now);
        assert!(text.contains("Active Deadline Seconds:  600s (not running)\n"), "{text}");
        assert!(!text.contains("Start Time:"), "{text}");
        let plain = describe("JobSet", &js(json!({}), json!({})), &mut [], now);
        for absent in ["Execution Attempts:", "Start Time:", "Active Deadline Seconds:"] {
            assert!(!plain.contains(absent), "{absent:?} in\n{plain}");
        }
    }

    #[test]
    fn jobsets_show_each_rule_budget_with_its_restarts() {
        let js = json!({"metadata": {"name": "js"},
            "spec": {"failurePolicy": {"maxRestarts": 3, "rules": [
                {"name": "infra", "action": "RestartJobSet", "maxRestarts": 100},
                {"name": "app", "action": "RestartJob", "maxRestarts": 2},
                {"name": "fatal", "action": "FailJobSet"}]}},
            "status": {"failurePolicyRulesStatus": [{"name": "infra", "restarts": 7}, {"name": "gone", "restarts": 1}]}});
        let text = describe("JobSet", &js, &mut [], Timestamp::now());
        let section = &text[text.find("Failure Policy Rule Budgets:\n").expect("a budgets section")..];
        let lines: Vec<Vec<&str>> = section.lines().skip(1).take(5).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["Rule", "Action", "Restarts", "Max", "Restarts"]);
        assert_eq!(lines[2], ["infra", "RestartJobSet", "7", "100"]);
        assert_eq!(lines[3], ["app", "RestartJob", "0", "2"]);
        assert_eq!(lines[4], ["gone", "<none>", "1", "<none>"]);
        assert!(!section.contains("fatal"), "{section}");
        let none = json!({"metadata": {"name": "js"}, "spec": {"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet"}]}}});
        assert!(!describe("JobSet", &none, &mut [], Timestamp::now()).contains("Failure Policy Rule Budgets:"));
    }

    #[test]
    fn jobsets_list_their_last_restarts_with_trigger_and_phase_durations() {
        let record = |attempt: i32, strategy: &str, times: [Option<&str>; 5], superseded: bool| {
            let mut r = json!({"attempt": attempt, "strategy": strategy, "scope": "JobSet",
                "trigger": {"job": "js-workers-0", "pod": "js-workers-0-1-abcde", "exitCode": 1, "reason": "BackoffLimitExceeded", "action": "RestartJobSet", "countsTowardsMax": true},
                "decidedAt": times[1].unwrap(), "superseded": superseded});
            for (k, t) in ["failedAt", "decidedAt", "stoppedAt", "barrierLiftedAt", "runningAt"].into_iter().zip(times)
            {
                if let Some(t) = t {
                    r[k] = json!(t);
                }
            }
            r
        };
        let js = json!({"metadata": {"name": "js", "namespace": "default"}, "spec": {}, "status": {"restarts": 2, "restartHistory": [
            record(1, "Recreate", [Some("2026-01-01T00:00:10Z"), Some("2026-01-01T00:00:10.250000Z"), Some("2026-01-01T00:00:12Z"), None, Some("2026-01-01T00:00:13.500000Z")], false),
            record(2, "InPlaceRestart", [None, Some("2026-01-01T00:01:00Z"), Some("2026-01-01T00:01:00.500000Z"), Some("2026-01-01T00:01:01Z"), None], false),
            record(3, "Recreate", [Some("2026-01-01T00:02:00Z"), Some("2026-01-01T00:02:01Z"), None, None, None], true),
        ]}});
        let text = describe("JobSet", &js, &mut [], Timestamp::now());
        let section = &text[text.find("Restarts:\n").expect("a Restarts section")..text.find("Events:").unwrap()];
        let lines: Vec<&str> = section.lines().map(str::trim_end).collect();
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["#", "Attempt", "Strategy", "Scope", "Trigger", "Detect", "Stop", "Barrier", "Start", "Total", "State"]
        );
        let trigger = ["BackoffLimitExceeded", "->", "RestartJobSet", "(js-workers-0-1-abcde,", "exit", "code", "1)"];
        fn row<'a>(cells: &[&'a str], trigger: &[&'a str]) -> Vec<&'a str> {
            [&cells[..4], trigger, &cells[4..]].concat()
        }
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            row(&["0", "1", "Recreate", "JobSet", "0.250s", "1.750s", "-", "1.500s", "3.500s", "done"], &trigger)
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            row(&["1", "2", "InPlaceRestart", "JobSet", "-", "0.500s", "0.500s", "-", "-", "in", "progress"], &trigger)
        );
        assert_eq!(
            lines[5].split_whitespace().collect::<Vec<_>>(),
            row(&["2", "3", "Recreate", "JobSet", "1.000s", "-", "-", "-", "-", "superseded"], &trigger)
        );
        assert!(
            !describe(
                "JobSet",
                &json!({"metadata": {"name": "js"}, "status": {"restarts": 0}}),
                &mut [],
                Timestamp::now()
            )
            .contains("Restarts:")
        );
    }
}
