//! The timeline as a self-contained HTML page with an inline SVG Gantt chart (no script, no
//! network): [`page`] for `jobset timeline`, [`chart`] for the live view.
//!
//! Hooks for browser tests: `data-row` on every row (`<rj>/<job>` for a Job's aggregate row,
//! `<rj>/<job>/<completion>` for a pod slot), `data-restart="<i>"` once per restart (its marker
//! group in the restarts lane), `data-phase` and `data-seconds` on each phase annotation inside
//! it, and the table `#restart-table`.
//!
//! A Job's pods sit in a `<details>` under its aggregate row, open unless the timeline is
//! aggregated: the browser lays out folded pods only when asked, so thousands stay cheap.

use jiff::Timestamp;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::timeline::{Restart, Segment, State, Timeline};

/// Width of the row labels, in pixels.
const LABEL_W: f64 = 230.0;
/// Width of the time axis, in pixels.
const PLOT_W: f64 = 1000.0;
/// Height of one row, and of a bar in it.
const ROW_H: f64 = 14.0;
const BAR_H: f64 = 10.0;
/// Height of one restart's lane.
const LANE_H: f64 = 27.0;
/// Running bars take one of these colour classes by attempt, in turn.
const ATTEMPT_COLOURS: usize = 4;

/// Styles of the chart, scoped under `.jt`.
const CSS: &str = "
.jt{font:12px/1.3 system-ui,sans-serif;color:#222}
.jt svg{display:block;overflow:visible}
.jt text{font:11px system-ui,sans-serif;fill:#222}
.jt .lbl{fill:#333}
.jt details{margin:0}
.jt summary{list-style:none;cursor:pointer}
.jt summary::-webkit-details-marker{display:none}
.jt summary text.lbl{font-weight:600}
.jt details[open]>summary text.lbl{fill:#000}
.jt h3{margin:8px 0 2px;font-size:13px}
.jt .axis line{stroke:#ccc}
.jt .grid{stroke:#eee}
.jt .s-pending{fill:#c9ced6}
.jt .s-running.a0{fill:#2e7d32}.jt .s-running.a1{fill:#1565c0}.jt .s-running.a2{fill:#6a1b9a}.jt .s-running.a3{fill:#00838f}
.jt .s-terminating{fill:#ef8f00}
.jt .s-failed{fill:#d32f2f}
.jt .s-restarting{fill:#fbc02d}
.jt .s-barrier{fill:#9575cd}
.jt .rec{fill-opacity:.8;stroke:#333;stroke-width:.6;stroke-dasharray:3 2}
.jt .decision{stroke:#000;stroke-width:1;stroke-dasharray:3 2}
.jt .failure{fill:#b71c1c;stroke:#fff;stroke-width:.7}
.jt .p-detect{fill:#e57373}.jt .p-stop{fill:#ffb74d}.jt .p-barrier{fill:#9575cd}.jt .p-start{fill:#64b5f6}
.jt .p-total{stroke:#222;stroke-width:2}
.jt .legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0}
.jt .legend svg{display:inline-block;vertical-align:middle;margin-right:4px}
";

/// Styles of the page around the chart.
const PAGE_CSS: &str = "
body{margin:16px;font:13px/1.4 system-ui,sans-serif;color:#222}
h1{font-size:18px;margin:0 0 4px}
.meta{color:#555;margin:0 0 10px}
#restart-table{border-collapse:collapse;margin:8px 0 14px}
#restart-table th,#restart-table td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
#restart-table td.num{text-align:right;font-variant-numeric:tabular-nums}
";

/// The whole HTML document: title, restart table, legend and chart.
pub fn page(t: &Timeline) -> String {
    let pods: usize = t.replicated_jobs.iter().flat_map(|r| &r.jobs).map(|j| j.pods.len()).sum();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Restart timeline of " (t.namespace) "/" (t.jobset) }
                style { (PreEscaped(PAGE_CSS)) }
            }
            body {
                h1 { "Restart timeline of JobSet " (t.namespace) "/" (t.jobset) }
                p class="meta" {
                    "Restart strategy " (t.strategy) " · " (pods) " pod slots · " (t.restarts.len()) " recorded restarts · from "
                    (clock(t.start)) " to " (clock(t.end)) " UTC"
                }
                (restart_table(t))
                (chart(t))
            }
        }
    }
    .into_string()
}

/// The table of restarts: trigger and phase durations.
pub fn restart_table(t: &Timeline) -> Markup {
    const PHASES: [&str; 5] = ["detect", "stop", "barrier", "start", "total"];
    html! {
        table id="restart-table" {
            thead { tr {
                th { "#" } th { "Attempt" } th { "Strategy" } th { "Scope" } th { "Trigger" } th { "Failed at" }
                @for p in PHASES { th { (p) } }
                th { "State" }
            } }
            tbody {
                @if t.restarts.is_empty() {
                    tr { td colspan="12" { "No restart recorded." } }
                }
                @for r in &t.restarts {
                    tr {
                        td class="num" { (r.index) }
                        td class="num" { (r.attempt) }
                        td { (r.strategy) }
                        td { (r.scope) @if let Some(target) = &r.target { " " (target) } }
                        td { (trigger_text(r)) }
                        td { (r.failed_at.map(clock).unwrap_or_default()) }
                        @for p in PHASES {
                            td class="num" {
                                @if let Some(phase) = r.phases.iter().find(|x| x.name == p) { (format_seconds(phase.seconds)) }
                            }
                        }
                        td { (r.progress()) }
                    }
                }
            }
        }
    }
}

/// The chart alone (legend, axis, restarts lane, rows), with its scoped styles.
pub fn chart(t: &Timeline) -> Markup {
    let x = Scale::new(t.start, t.end);
    let width = LABEL_W + PLOT_W;
    html! {
        div class="jt" {
            style { (PreEscaped(CSS)) }
            (legend())
            (axis(&x))
            (restart_lanes(t, &x))
            @for rj in &t.replicated_jobs {
                section data-replicated-job=(rj.name) {
                    h3 { "Replicated job " (rj.name) " (" (rj.jobs.len()) " Jobs)" }
                    @for job in &rj.jobs {
                        @let restarts: Vec<&Restart> = t.restarts.iter().filter(|r| r.affects(&rj.name, &job.name)).collect();
                        details data-job=(job.name) open[!t.aggregated] {
                            summary {
                                svg width=(width) height=(ROW_H) {
                                    g data-row=(job.row) {
                                        title { (job.name) ": " (job.pods.len()) " pods" }
                                        text class="lbl" x="2" y=(BAR_H) { "▸ " (job.name) " (" (job.pods.len()) " pods)" }
                                        (bars(&job.aggregate, &x, true))
                                        (job_marks(&restarts, &job.row, &x))
                                    }
                                }
                            }
                            @let height = ROW_H * job.pods.len() as f64;
                            svg width=(width) height=(height) {
                                @for (i, row) in job.pods.iter().enumerate() {
                                    g data-row=(row.row) transform={ "translate(0," (i as f64 * ROW_H) ")" } {
                                        text x="14" y=(BAR_H) { (row.completion_index) @if let Some(pod) = &row.pod { " " (pod) } }
                                        (bars(&row.segments, &x, !t.aggregated))
                                        @for r in restarts.iter().filter(|r| r.failure_row.as_deref() == Some(row.row.as_str())) {
                                            @if let Some(f) = r.failed_at { (cross(x.x(f), ROW_H / 2.0)) }
                                        }
                                    }
                                }
                                // Decisions once across all the Job's pods: per row they would
                                // weigh on a 5,000-pod page.
                                @for r in &restarts {
                                    @let d = px(x.x(r.decided_at));
                                    line class="decision" x1=(d) x2=(d) y1="0" y2=(height) {}
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Maps times to x coordinates of the plot.
struct Scale {
    start: Timestamp,
    span: f64,
}

impl Scale {
    fn new(start: Timestamp, end: Timestamp) -> Scale {
        Scale { start, span: crate::timeline::seconds(start, end).max(1e-3) }
    }
    fn offset(&self, t: Timestamp) -> f64 {
        crate::timeline::seconds(self.start, t)
    }
    fn x(&self, t: Timestamp) -> f64 {
        LABEL_W + self.offset(t) / self.span * PLOT_W
    }
}

/// One decimal is plenty for pixels and keeps the page small (none when it is 0).
fn px(v: f64) -> String {
    let s = format!("{v:.1}");
    match s.strip_suffix(".0") {
        Some(whole) => whole.to_string(),
        None => s,
    }
}

fn state_class(s: &Segment) -> String {
    let state = match s.state {
        State::Pending => "s-pending",
        State::Running => "s-running",
        State::Terminating => "s-terminating",
        State::Failed => "s-failed",
        State::RestartingInPlace => "s-restarting",
        State::WaitingAtBarrier => "s-barrier",
    };
    let mut class = state.to_string();
    // Only running bars change colour with the attempt.
    if s.state == State::Running {
        class += &format!(" a{}", s.attempt.rem_euclid(ATTEMPT_COLOURS as i32));
    }
    if s.from_record {
        class += " rec";
    }
    class
}

fn bars(segments: &[Segment], x: &Scale, titles: bool) -> Markup {
    html! {
        @for s in segments {
            @let (x0, x1) = (x.x(s.start), x.x(s.end));
            rect x=(px(x0)) y="2" width=(px((x1 - x0).max(0.5))) height=(BAR_H) class=(state_class(s)) {
                @if titles {
                    title { (s.state.as_str()) ", attempt " (s.attempt) ": " (format_seconds(crate::timeline::seconds(s.start, s.end))) " from +" (offset_label(x.offset(s.start))) @if s.from_record { " (from the restart record)" } }
                }
            }
        }
    }
}

/// Decision lines of `restarts` across a Job's aggregate row, and a cross at each failure of one
/// of its pods (or of the Job itself).
fn job_marks(restarts: &[&Restart], row: &str, x: &Scale) -> Markup {
    let inside = |fr: &str| fr == row || fr.strip_prefix(row).is_some_and(|rest| rest.starts_with('/'));
    html! {
        @for r in restarts {
            @let d = px(x.x(r.decided_at));
            line class="decision" x1=(d) x2=(d) y1="0" y2=(ROW_H) {}
            @if let Some(f) = r.failed_at.filter(|_| r.failure_row.as_deref().is_some_and(inside)) {
                (cross(x.x(f), ROW_H / 2.0))
            }
        }
    }
}

fn cross(cx: f64, cy: f64) -> Markup {
    let (a, b) = (cx - 4.0, cx + 4.0);
    let (c, d) = (cy - 4.0, cy + 4.0);
    html! { path class="failure" d={ "M" (px(a)) " " (px(c)) "L" (px(b)) " " (px(d)) "M" (px(a)) " " (px(d)) "L" (px(b)) " " (px(c)) } style="stroke:#b71c1c;stroke-width:2" {} }
}

/// One lane per restart: its failure, decision and phases, each phase annotated with its length.
fn restart_lanes(t: &Timeline, x: &Scale) -> Markup {
    let width = LABEL_W + PLOT_W;
    html! {
        svg class="restarts" width=(width) height=(LANE_H * t.restarts.len() as f64) {
            @for (i, r) in t.restarts.iter().enumerate() {
                g data-restart=(r.index) transform={ "translate(0," (i as f64 * LANE_H) ")" } {
                    title { "Restart " (r.index) " (attempt " (r.attempt) "): " (trigger_text(r)) }
                    text class="lbl" x="2" y="11" { "restart " (r.index) ": " (r.trigger.reason) }
                    text x="2" y="21" style="font-size:9px;fill:#666" { (r.strategy) " " (r.scope) @if let Some(target) = &r.target { " " (target) } " · " (r.progress()) }
                    @for p in r.phases.iter().filter(|p| p.name != "total") {
                        @let (x0, x1) = (x.x(p.start), x.x(p.end));
                        rect class={ "p-" (p.name) } data-phase=(p.name) data-seconds=(p.seconds) x=(px(x0)) y="2" width=(px((x1 - x0).max(0.5))) height="9" {
                            title { (p.name) ": " (format_seconds(p.seconds)) }
                        }
                    }
                    @if let Some(total) = r.phases.iter().find(|p| p.name == "total") {
                        line class="p-total" data-phase="total" data-seconds=(total.seconds) x1=(px(x.x(total.start))) x2=(px(x.x(total.end))) y1="14" y2="14" {
                            title { "total: " (format_seconds(total.seconds)) }
                        }
                    }
                    @let d = px(x.x(r.decided_at));
                    line class="decision" x1=(d) x2=(d) y1="0" y2=(LANE_H - 2.0) { title { "decided at +" (offset_label(x.offset(r.decided_at))) } }
                    @if let Some(f) = r.failed_at { (cross(x.x(f), 7.0)) }
                    // Under the bars, from where the restart began, moved left if it would overflow.
                    @let text = phase_text(r);
                    @let begin = r.phases.iter().map(|p| x.x(p.start)).fold(x.x(r.decided_at), f64::min);
                    @let text_x = begin.min(width - 5.5 * text.chars().count() as f64).max(LABEL_W);
                    text x=(px(text_x)) y="24" style="font-size:10px" { (text) }
                }
            }
        }
    }
}

fn phase_text(r: &Restart) -> String {
    let parts: Vec<String> = r.phases.iter().map(|p| format!("{} {}", p.name, format_seconds(p.seconds))).collect();
    if parts.is_empty() { r.progress().to_string() } else { parts.join(" · ") }
}

fn trigger_text(r: &Restart) -> String {
    let tr = &r.trigger;
    let mut s = format!("{} → {}", tr.reason, tr.action);
    if let Some(rule) = &tr.rule {
        s += &format!(" (rule {rule})");
    }
    let what: Vec<String> = [
        tr.job.as_ref().map(|j| format!("Job {j}")),
        tr.pod.as_ref().map(|p| format!("pod {p}")),
        tr.container.as_ref().map(|c| format!("container {c}")),
        tr.exit_code.map(|c| format!("exit code {c}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !what.is_empty() {
        s += &format!(": {}", what.join(", "));
    }
    if !tr.counts_towards_max {
        s += " (not counted towards maxRestarts)";
    }
    s
}

fn legend() -> Markup {
    let swatch = |class: &str| html! { svg width="14" height="10" { rect width="14" height="10" class=(class) {} } };
    html! {
        div class="legend" {
            @for s in State::ALL.into_iter().filter(|s| *s != State::Running) {
                span { (swatch(&state_class(&Segment { start: Timestamp::UNIX_EPOCH, end: Timestamp::UNIX_EPOCH, state: s, attempt: 0, from_record: false }))) (s.as_str()) }
            }
            @for a in 0..ATTEMPT_COLOURS {
                span { (swatch(&format!("s-running a{a}"))) "running, attempt " (a) @if a + 1 == ATTEMPT_COLOURS { "+" } }
            }
            span { (swatch("s-running a0 rec")) "drawn from the restart record" }
            span { svg width="14" height="10" { line class="decision" x1="7" x2="7" y1="0" y2="10" {} } "restart decided" }
            span { svg width="14" height="10" { (cross(7.0, 5.0)) } "failure" }
            @for p in ["detect", "stop", "barrier", "start"] {
                span { (swatch(&format!("p-{p}"))) "phase " (p) }
            }
        }
    }
}

/// The time axis: ticks at a round step, labelled with the time since the chart's start.
fn axis(x: &Scale) -> Markup {
    let step = tick_step(x.span);
    let count = (x.span / step).floor() as usize;
    html! {
        svg class="axis" width=(LABEL_W + PLOT_W) height="18" {
            text x="2" y="12" { "time since " (clock(x.start)) }
            line x1=(LABEL_W) x2=(LABEL_W + PLOT_W) y1="17" y2="17" {}
            @for i in 0..=count {
                @let at = px(LABEL_W + i as f64 * step / x.span * PLOT_W);
                line x1=(at) x2=(at) y1="12" y2="17" {}
                text x=(at) y="10" text-anchor="middle" { (offset_label(i as f64 * step)) }
            }
        }
    }
}

/// A round tick step giving at most ten ticks over `span` seconds.
fn tick_step(span: f64) -> f64 {
    const STEPS: [f64; 22] = [
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
        3600.0, 7200.0, 21600.0, 86400.0,
    ];
    STEPS.into_iter().find(|s| span / s <= 10.0).unwrap_or_else(|| (span / 10.0 / 86400.0).ceil() * 86400.0)
}

/// `90` → `1m30s`, `0.5` → `0.5s`, `7200` → `2h`.
fn offset_label(secs: f64) -> String {
    if secs < 60.0 {
        let s = format!("{:.2}", secs);
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    } else {
        let total = secs.round() as u64;
        let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
        let mut out = String::new();
        if h > 0 {
            out += &format!("{h}h");
        }
        if m > 0 {
            out += &format!("{m}m");
        }
        if s > 0 {
            out += &format!("{s}s");
        }
        out
    }
}

/// A phase length: `0.250s`, `12.000s`, `2m3.500s`.
pub fn format_seconds(secs: f64) -> String {
    if secs.abs() < 60.0 { format!("{secs:.3}s") } else { format!("{}m{:.3}s", (secs / 60.0).trunc(), secs % 60.0) }
}

/// `2026-11-27 11:31:36.123`, UTC.
fn clock(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::fixtures::*;
    use crate::timeline::{Inputs, build};
    use k8s_openapi::api::core::v1::Pod;

    /// Two restarts (a Recreate one, then one in place) of `replicas` Jobs of `parallelism` pods,
    /// the pods of the current attempt live.
    fn two_restarts(replicas: i32, parallelism: i32) -> Timeline {
        let js = jobset(
            "Recreate",
            &[("workers", replicas, parallelism)],
            vec![
                record(
                    1,
                    "Recreate",
                    "train-workers-0-0-aaaaa",
                    [Some(10.0), Some(10.5), Some(12.0), None, Some(15.25)],
                ),
                record(
                    2,
                    "InPlaceRestart",
                    "train-workers-0-1-bbbbb",
                    [Some(30.0), Some(30.125), Some(31.0), Some(31.5), Some(33.0)],
                ),
            ],
        );
        let pods: Vec<Pod> = (0..replicas)
            .flat_map(|j| {
                (0..parallelism).map(move |c| {
                    pod(&format!("train-workers-{j}-{c}-{c:05}"), ("workers", j, c), 13.0, Some(14.0), None, None)
                })
            })
            .collect();
        build(&Inputs { jobset: &js, jobs: &[], pods: &pods, now: at(40.0) })
    }

    /// Values of attribute `name` in `html`, in order.
    fn attr_values<'h>(html: &'h str, name: &str) -> Vec<&'h str> {
        let key = format!(" {name}=\"");
        html.match_indices(&key)
            .map(|(i, _)| &html[i + key.len()..])
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect()
    }

    #[test]
    fn page_is_self_contained() {
        let html = page(&two_restarts(2, 3));
        assert!(html.starts_with("<!DOCTYPE html>"));
        for forbidden in ["<script", "<link", "<img", "<iframe", "@import", "url("] {
            assert!(!html.contains(forbidden), "{forbidden} in the page");
        }
        for attr in ["src", "href", "xlink:href"] {
            let bad: Vec<&str> = attr_values(&html, attr)
                .into_iter()
                .filter(|v| v.starts_with("http://") || v.starts_with("https://") || v.starts_with("//"))
                .collect();
            assert!(bad.is_empty(), "{attr}: {bad:?}");
        }
    }

    #[test]
    fn page_has_a_row_per_job_and_pod_slot_and_a_marker_per_restart() {
        let t = two_restarts(2, 3);
        let html = page(&t);
        let rows = attr_values(&html, "data-row");
        assert_eq!(
            rows,
            [
                "workers/0",
                "workers/0/0",
                "workers/0/1",
                "workers/0/2",
                "workers/1",
                "workers/1/0",
                "workers/1/1",
                "workers/1/2"
            ]
        );
        assert_eq!(attr_values(&html, "data-restart"), ["0", "1"]);
        assert_eq!(html.matches("id=\"restart-table\"").count(), 1);
        // The chart alone carries the same hooks, without the table.
        let chart = chart(&t).into_string();
        assert_eq!(attr_values(&chart, "data-row"), rows);
        assert!(!chart.contains("restart-table"));
    }

    #[test]
    fn phase_annotations_carry_the_seconds_of_the_record() {
        let t = two_restarts(1, 2);
        let html = page(&t);
        let phases: Vec<(&str, f64)> = attr_values(&html, "data-phase")
            .into_iter()
            .zip(attr_values(&html, "data-seconds").into_iter().map(|s| s.parse().unwrap()))
            .collect();
        assert_eq!(
            phases,
            [
                ("detect", 0.5),
                ("stop", 1.5),
                ("start", 3.25),
                ("total", 5.25),
                ("detect", 0.125),
                ("stop", 0.875),
                ("barrier", 0.5),
                ("start", 1.5),
                ("total", 3.0)
            ]
        );
    }

    #[test]
    fn pods_are_open_below_the_aggregation_threshold_and_folded_above() {
        for (parallelism, open) in [(3, true), (300, false)] {
            let html = page(&two_restarts(1, parallelism));
            assert_eq!(html.contains("<details data-job=\"train-workers-0\" open>"), open, "{parallelism} pods");
        }
    }

    #[test]
    fn page_of_five_thousand_pods_is_under_five_megabytes() {
        let t = two_restarts(10, 500);
        let html = page(&t);
        assert_eq!(attr_values(&html, "data-row").len(), 10 + 5000);
        assert!(html.len() < 5 * 1024 * 1024, "{} bytes", html.len());
    }

    #[test]
    fn tick_step_gives_at_most_ten_round_ticks() {
        for (span, want) in [
            (0.05, 0.01),
            (3.0, 0.5),
            (9.0, 1.0),
            (40.0, 5.0),
            (600.0, 60.0),
            (5400.0, 600.0),
            (86400.0 * 3.0, 86400.0),
        ] {
            assert_eq!(tick_step(span), want, "span {span}");
        }
    }

    #[test]
    fn offset_label_reads_as_seconds_minutes_hours() {
        for (secs, want) in [
            (0.0, "0s"),
            (0.5, "0.5s"),
            (12.0, "12s"),
            (90.0, "1m30s"),
            (120.0, "2m"),
            (7200.0, "2h"),
            (3725.0, "1h2m5s"),
        ] {
            assert_eq!(offset_label(secs), want);
        }
    }

    #[test]
    fn duration_shows_milliseconds_and_minutes() {
        for (secs, want) in [(0.25, "0.250s"), (12.0, "12.000s"), (123.5, "2m3.500s"), (-0.5, "-0.500s")] {
            assert_eq!(format_seconds(secs), want);
        }
    }
}
