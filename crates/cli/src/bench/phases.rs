//! A restart record's phases (`status.restartHistory`), printed beside what a bench measured of
//! the same restart: the record's phase durations, then, milestone by milestone, when the bench's
//! own watch saw each phase end against the record's time for it, on the wall clock (the bench
//! and the controller share the machine's clock).
//!
//! The record's `failedAt` comes from Kubernetes' whole-second `finishedAt` (or condition time),
//! while the benches see the failure to the millisecond: so the spans compared like with like
//! both start at `decidedAt` (a microsecond time), and the failure-to-running spans are shown for
//! what they are, `failedAt`'s rounding included.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use jobset_api::jobset::{JobSet, RestartRecord, RestartStrategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::runtime::wait::await_condition;

/// One phase of a restart record.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Phase {
    /// The `phase` label of the restart metrics: detect, stop, barrier, start, total.
    pub name: &'static str,
    /// The record fields it spans, e.g. `decidedAt → stoppedAt`.
    pub span: &'static str,
    /// Its length, when the record has both ends.
    pub seconds: Option<f64>,
}

fn at(m: &Option<MicroTime>) -> Option<Timestamp> {
    m.as_ref().map(|m| m.0)
}

fn secs(from: Option<Timestamp>, to: Option<Timestamp>) -> Option<f64> {
    Some(to?.duration_since(from?).as_secs_f64())
}

/// The phases of `r`: `detect` = decidedAt − failedAt, `stop` = stoppedAt − decidedAt,
/// `barrier` = barrierLiftedAt − stoppedAt (in place only), `start` = runningAt −
/// (barrierLiftedAt or stoppedAt), `total` = runningAt − (failedAt or decidedAt).
pub(super) fn phases(r: &RestartRecord) -> Vec<Phase> {
    let (failed, decided, stopped, lifted, running) =
        (at(&r.failed_at), Some(r.decided_at.0), at(&r.stopped_at), at(&r.barrier_lifted_at), at(&r.running_at));
    let in_place = r.strategy == RestartStrategy::InPlaceRestart;
    let mut out = vec![];
    if failed.is_some() {
        out.push(Phase { name: "detect", span: "failedAt → decidedAt", seconds: secs(failed, decided) });
    }
    out.push(Phase { name: "stop", span: "decidedAt → stoppedAt", seconds: secs(decided, stopped) });
    if in_place {
        out.push(Phase { name: "barrier", span: "stoppedAt → barrierLiftedAt", seconds: secs(stopped, lifted) });
    }
    let start = match in_place {
        true => Phase { name: "start", span: "barrierLiftedAt → runningAt", seconds: secs(lifted, running) },
        false => Phase { name: "start", span: "stoppedAt → runningAt", seconds: secs(stopped, running) },
    };
    out.push(start);
    out.push(match failed {
        Some(_) => Phase { name: "total", span: "failedAt → runningAt", seconds: secs(failed, running) },
        None => Phase { name: "total", span: "decidedAt → runningAt", seconds: secs(decided, running) },
    });
    out
}

/// When the bench's own watches saw the restart's milestones (wall clock, see [`wall`]).
#[derive(Debug, Clone)]
pub(super) struct Seen {
    /// The failure the bench made or waited for, as its watch saw it.
    pub failure: Timestamp,
    /// The JobSet status write that decided the restart (the one that appended the record).
    pub decided: Option<Timestamp>,
    /// The old attempt gone (Recreate: every Job of it; in place: every pod past it).
    pub stopped: Option<Timestamp>,
    /// In place: `currentInPlaceRestartAttempt` moved to the new attempt.
    pub barrier_lifted: Option<Timestamp>,
    /// The end of the bench's own measurement.
    pub running: Timestamp,
    /// What `running` is, e.g. "all 5000 pods of attempt 1 Running".
    pub running_what: String,
    /// Where the bench's end and the record's `runningAt` differ by definition, why.
    pub note: Option<&'static str>,
}

/// `at` on the wall clock, given one reading of both clocks taken together (`anchor`).
pub(super) fn wall(at: Instant, anchor: (Instant, Timestamp)) -> Timestamp {
    let (now, wall_now) = anchor;
    let offset = match now.checked_duration_since(at) {
        Some(before) => -SignedDuration::try_from(before).unwrap_or(SignedDuration::MAX),
        None => SignedDuration::try_from(at.duration_since(now)).unwrap_or(SignedDuration::MAX),
    };
    wall_now.saturating_add(offset).unwrap_or(wall_now)
}

/// The lines a bench prints for record `r` beside its own measurement `seen` (indented to sit
/// under the bench's figures).
pub(super) fn report(r: &RestartRecord, seen: &Seen) -> Vec<String> {
    let mut out = vec![format!("  restart record (status.restartHistory): {}", describe(r))];
    let phases = phases(r);
    for p in &phases {
        let value = p.seconds.map_or("-    ".to_string(), |s| format!("{s:.3} s"));
        let note = if p.span.starts_with("failedAt") { " (failedAt: whole seconds)" } else { "" };
        out.push(format!("    {:<9} {value:>11}  {}{note}", p.name, p.span));
    }
    if r.superseded {
        out.push("    superseded: a later restart or the JobSet's end cut it short; nothing to compare".into());
        return out;
    }
    let Some(running_at) = r.running_at.as_ref().map(|m| m.0) else {
        out.push("    no runningAt yet: nothing to compare".into());
        return out;
    };
    // Milestone by milestone: bench's sighting − record's time (positive: the bench saw it later).
    out.push("  bench's watch − record, per milestone (wall clock; positive: the bench saw it later):".into());
    let offset = |bench: Timestamp, record: Timestamp| bench.duration_since(record).as_secs_f64();
    let mut row = |what: &str, bench: Option<Timestamp>, record: Option<Timestamp>, note: &str| {
        if let (Some(b), Some(rec)) = (bench, record) {
            out.push(format!("    {what:<9} {:>+9.3} s{note}", offset(b, rec)));
        }
    };
    let rounding = "  (failedAt: whole seconds, so up to 1 s of this is its rounding)";
    row("failure", Some(seen.failure), at(&r.failed_at), rounding);
    row("decision", seen.decided, Some(r.decided_at.0), "  (its status write seen)");
    row("stopped", seen.stopped, at(&r.stopped_at), "");
    row("barrier", seen.barrier_lifted, at(&r.barrier_lifted_at), "");
    row("running", Some(seen.running), Some(running_at), "");
    // Like with like: both spans from decidedAt, a microsecond time, since the bench's own span
    // starts at the failure it saw to the millisecond and failedAt has whole seconds.
    let record_span = running_at.duration_since(r.decided_at.0).as_secs_f64();
    let bench_span = seen.running.duration_since(r.decided_at.0).as_secs_f64();
    out.push(format!(
        "  from decidedAt (the record's failedAt has 1 s resolution, the bench sees the failure to the ms, so both spans start at decidedAt): record decidedAt → runningAt {record_span:.3} s; bench decidedAt → {} seen: {bench_span:.3} s; record − bench {:+.3} s",
        seen.running_what,
        record_span - bench_span
    ));
    if let Some(failed_at) = at(&r.failed_at) {
        let record_total = running_at.duration_since(failed_at).as_secs_f64();
        let bench_total = seen.running.duration_since(seen.failure).as_secs_f64();
        out.push(format!(
            "  from the failure: record failedAt → runningAt {record_total:.3} s; bench, failure seen → {}: {bench_total:.3} s; record − bench {:+.3} s (failedAt's whole seconds included)",
            seen.running_what,
            record_total - bench_total
        ));
    }
    if let Some(note) = seen.note {
        out.push(format!("  ({note})"));
    }
    out
}

/// The record's attempt, strategy, scope and trigger on one line.
fn describe(r: &RestartRecord) -> String {
    let tr = &r.trigger;
    let mut what =
        vec![format!("attempt {}", r.attempt), r.strategy.as_str().to_string(), r.scope.as_str().to_string()];
    if let Some(target) = &r.target {
        what.push(target.clone());
    }
    let mut trigger = vec![tr.reason.clone()];
    for (k, v) in [("job", &tr.job), ("pod", &tr.pod), ("container", &tr.container)] {
        if let Some(v) = v {
            trigger.push(format!("{k} {v}"));
        }
    }
    if let Some(code) = tr.exit_code {
        trigger.push(format!("exit code {code}"));
    }
    let mut line = format!("{}; trigger {}; action {}", what.join(", "), trigger.join(", "), tr.action);
    if let Some(d) = &r.duration {
        line.push_str(&format!("; duration {d}"));
    }
    line
}

/// The last record of `history` that began `attempt`, once it is over (`runningAt` set, or
/// superseded).
pub(super) fn finished(history: &[RestartRecord], attempt: i32) -> Option<&RestartRecord> {
    history.iter().rev().find(|r| r.attempt == attempt).filter(|r| r.running_at.is_some() || r.superseded)
}

/// Waits (at most `limit`) until JobSet `name`'s record of restart `attempt` is over, then prints
/// it beside what the bench saw. The bench's own figures stand whatever happens here: a record
/// that is missing or late is printed as such, not an error.
pub(super) async fn print_record(client: kube::Client, name: &str, attempt: i32, limit: Duration, seen: &Seen) {
    let api: Api<JobSet> = Api::namespaced(client, "default");
    let over = move |js: Option<&JobSet>| {
        js.and_then(|j| j.status.as_ref()).is_some_and(|s| finished(&s.restart_history, attempt).is_some())
    };
    let lines = match tokio::time::timeout(limit, await_condition(api.clone(), name, over)).await {
        Ok(Ok(Some(js))) => {
            let history = js.status.map(|s| s.restart_history).unwrap_or_default();
            finished(&history, attempt).map(|r| report(r, seen)).unwrap_or_default()
        }
        Ok(Ok(None)) => vec![format!("  restart record: JobSet {name} is gone")],
        Ok(Err(e)) => vec![format!("  restart record: reading JobSet {name}: {e}")],
        Err(_) => {
            let attempts = match api.get(name).await {
                Ok(js) => format!(
                    "{:?}",
                    js.status
                        .map(|s| s.restart_history)
                        .unwrap_or_default()
                        .iter()
                        .map(|r| r.attempt)
                        .collect::<Vec<_>>()
                ),
                Err(e) => e.to_string(),
            };
            vec![format!(
                "  restart record: none of attempt {attempt} over within {} s (status.restartHistory attempts: {attempts})",
                limit.as_secs()
            )]
        }
    };
    for l in lines {
        println!("{l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn record(v: serde_json::Value) -> RestartRecord {
        let mut base = json!({
            "attempt": 1, "strategy": "InPlaceRestart", "scope": "JobSet",
            "trigger": {"reason": "WorkerFailed", "pod": "js-workers-0-0-abcde", "container": "worker", "exitCode": 1,
                        "action": "RestartJobSet", "countsTowardsMax": true},
            "decidedAt": "2026-11-27T12:00:03.400000Z"
        });
        for (k, v) in v.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn in_place_done() -> RestartRecord {
        record(json!({
            "failedAt": "2026-11-27T12:00:03.000000Z",
            "stoppedAt": "2026-11-27T12:00:04.200000Z",
            "barrierLiftedAt": "2026-11-27T12:00:04.250000Z",
            "runningAt": "2026-11-27T12:00:04.750000Z",
            "duration": "1.75s"
        }))
    }

    fn recreate_done() -> RestartRecord {
        record(json!({
            "strategy": "Recreate",
            "trigger": {"reason": "BackoffLimitExceeded", "job": "js-workers-0", "action": "RestartJobSet", "countsTowardsMax": true},
            "failedAt": "2026-11-27T12:00:03Z",
            "stoppedAt": "2026-11-27T12:00:05.400000Z",
            "runningAt": "2026-11-27T12:00:09.400000Z"
        }))
    }

    fn seen() -> Seen {
        Seen {
            failure: ts("2026-11-27T12:00:03.350Z"),
            decided: Some(ts("2026-11-27T12:00:03.405Z")),
            stopped: Some(ts("2026-11-27T12:00:04.190Z")),
            barrier_lifted: Some(ts("2026-11-27T12:00:04.252Z")),
            running: ts("2026-11-27T12:00:04.730Z"),
            running_what: "all 10 workers running".into(),
            note: None,
        }
    }

    /// A phase as (name, span, seconds rounded to the microsecond).
    type Named = (&'static str, &'static str, Option<f64>);

    fn named(ps: &[Phase]) -> Vec<Named> {
        ps.iter().map(|p| (p.name, p.span, p.seconds.map(|s| (s * 1e6).round() / 1e6))).collect()
    }

    #[test]
    fn phases_follow_the_record_for_each_strategy_and_missing_end() {
        let no_failure = record(json!({"strategy": "Recreate", "stoppedAt": "2026-11-27T12:00:04.400000Z"}));
        let cases: Vec<(&str, RestartRecord, Vec<Named>)> = vec![
            (
                "in place: all five phases, barrier between stop and start",
                in_place_done(),
                vec![
                    ("detect", "failedAt → decidedAt", Some(0.4)),
                    ("stop", "decidedAt → stoppedAt", Some(0.8)),
                    ("barrier", "stoppedAt → barrierLiftedAt", Some(0.05)),
                    ("start", "barrierLiftedAt → runningAt", Some(0.5)),
                    ("total", "failedAt → runningAt", Some(1.75)),
                ],
            ),
            (
                "recreate: no barrier, start from stoppedAt",
                recreate_done(),
                vec![
                    ("detect", "failedAt → decidedAt", Some(0.4)),
                    ("stop", "decidedAt → stoppedAt", Some(2.0)),
                    ("start", "stoppedAt → runningAt", Some(4.0)),
                    ("total", "failedAt → runningAt", Some(6.4)),
                ],
            ),
            (
                "no failedAt: no detect, total from decidedAt; unfinished phases have no length",
                no_failure,
                vec![
                    ("stop", "decidedAt → stoppedAt", Some(1.0)),
                    ("start", "stoppedAt → runningAt", None),
                    ("total", "decidedAt → runningAt", None),
                ],
            ),
        ];
        for (name, r, want) in cases {
            assert_eq!(named(&phases(&r)), want, "{name}");
        }
    }

    #[test]
    fn report_compares_each_milestone_and_the_spans_from_the_decision() {
        let lines = report(&in_place_done(), &seen());
        let want = [
            "  restart record (status.restartHistory): attempt 1, InPlaceRestart, JobSet; trigger WorkerFailed, pod js-workers-0-0-abcde, container worker, exit code 1; action RestartJobSet; duration 1.75s",
            "    detect        0.400 s  failedAt → decidedAt (failedAt: whole seconds)",
            "    stop          0.800 s  decidedAt → stoppedAt",
            "    barrier       0.050 s  stoppedAt → barrierLiftedAt",
            "    start         0.500 s  barrierLiftedAt → runningAt",
            "    total         1.750 s  failedAt → runningAt (failedAt: whole seconds)",
            "  bench's watch − record, per milestone (wall clock; positive: the bench saw it later):",
            "    failure      +0.350 s  (failedAt: whole seconds, so up to 1 s of this is its rounding)",
            "    decision     +0.005 s  (its status write seen)",
            "    stopped      -0.010 s",
            "    barrier      +0.002 s",
            "    running      -0.020 s",
            "  from decidedAt (the record's failedAt has 1 s resolution, the bench sees the failure to the ms, so both spans start at decidedAt): record decidedAt → runningAt 1.350 s; bench decidedAt → all 10 workers running seen: 1.330 s; record − bench +0.020 s",
            "  from the failure: record failedAt → runningAt 1.750 s; bench, failure seen → all 10 workers running: 1.380 s; record − bench +0.370 s (failedAt's whole seconds included)",
        ];
        assert_eq!(lines, want);
    }

    #[test]
    fn report_rows_only_the_milestones_the_bench_saw_and_spans_from_decided_at_regardless() {
        let cases = [
            ("every milestone seen", seen(), vec!["failure", "decision", "stopped", "barrier", "running"]),
            (
                "main-container mode: no pod milestones, decision seen",
                Seen { stopped: None, ..seen() },
                vec!["failure", "decision", "barrier", "running"],
            ),
            (
                "the JobSet watch missed the status writes",
                Seen { decided: None, barrier_lifted: None, ..seen() },
                vec!["failure", "stopped", "running"],
            ),
        ];
        for (name, s, want) in cases {
            let lines = report(&in_place_done(), &s);
            // The rows between the per-milestone header and the span lines.
            let rows: Vec<&str> = lines
                .iter()
                .skip_while(|l| !l.starts_with("  bench's watch − record"))
                .skip(1)
                .take_while(|l| l.starts_with("    "))
                .filter_map(|l| l.split_whitespace().next())
                .collect();
            assert_eq!(rows, want, "{name}: {lines:#?}");
            let span = "record decidedAt → runningAt 1.350 s; bench decidedAt → all 10 workers running seen: 1.330 s; record − bench +0.020 s";
            assert!(lines.iter().any(|l| l.ends_with(span)), "{name}: {lines:#?}");
        }
    }

    #[test]
    fn report_ends_with_the_benchs_note_when_it_has_one() {
        let cases = [("no note", None, "failedAt's whole seconds included)"), ("note", Some("why"), "  (why)")];
        for (name, note, last) in cases {
            let lines = report(&in_place_done(), &Seen { note, ..seen() });
            assert!(lines.last().is_some_and(|l| l.ends_with(last)), "{name}: {lines:#?}");
        }
    }

    #[test]
    fn report_has_no_comparison_for_an_unfinished_or_superseded_record() {
        let cases = [
            (
                "unfinished",
                record(json!({"stoppedAt": "2026-11-27T12:00:04.200000Z"})),
                "    no runningAt yet: nothing to compare",
            ),
            (
                "superseded",
                record(json!({"superseded": true})),
                "    superseded: a later restart or the JobSet's end cut it short; nothing to compare",
            ),
        ];
        for (name, r, last) in cases {
            let lines = report(&r, &seen());
            assert_eq!(lines.last().map(String::as_str), Some(last), "{name}");
            assert!(!lines.iter().any(|l| l.contains("record − bench")), "{name}: {lines:#?}");
            assert!(lines.iter().any(|l| l.starts_with("    stop ")), "{name}: the phases are printed: {lines:#?}");
        }
    }

    #[test]
    fn finished_takes_the_last_record_of_the_attempt_once_over() {
        let unfinished = record(json!({}));
        let done = in_place_done();
        let superseded = record(json!({"superseded": true}));
        let other = record(json!({"attempt": 2, "runningAt": "2026-11-27T12:00:09Z"}));
        let cases: Vec<(&str, Vec<RestartRecord>, Option<&RestartRecord>)> = vec![
            ("none yet", vec![], None),
            ("not over", vec![unfinished.clone()], None),
            ("over", vec![done.clone(), other.clone()], Some(&done)),
            ("superseded counts as over", vec![superseded.clone()], Some(&superseded)),
            ("only another attempt", vec![other.clone()], None),
        ];
        for (name, history, want) in cases {
            assert_eq!(finished(&history, 1), want, "{name}");
        }
    }

    #[test]
    fn wall_places_an_instant_on_the_wall_clock_before_or_after_the_anchor() {
        let now = Instant::now();
        let anchor = (now, ts("2026-11-27T12:00:10Z"));
        let cases = [
            ("before", now - std::time::Duration::from_millis(1500), "2026-11-27T12:00:08.5Z"),
            ("at", now, "2026-11-27T12:00:10Z"),
            ("after", now + std::time::Duration::from_millis(250), "2026-11-27T12:00:10.25Z"),
        ];
        for (name, at, want) in cases {
            assert_eq!(wall(at, anchor), ts(want), "{name}");
        }
    }
}
