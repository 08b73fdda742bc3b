//! The web view's HTML (maud escapes every value it splices in). A page is a layout around a
//! fragment; the fragment alone is what the live view fetches again on a change.
//!
//! Stable hooks for tests: `data-jobset="ns/name"` and `data-appwrapper="ns/name"` rows on the
//! overview (tables `#jobsets`, `#appwrappers`); on a JobSet's page the tables
//! `#replicated-jobs`, `#jobs`, `#pods` with `data-name` rows (and `data-state`), the table
//! `#restart-history` with `data-restart-row="<index>"` rows and `data-phase`/`data-seconds`
//! cells, and `#timeline` holding [`crate::render::chart`] (its own hooks: `data-row`,
//! `data-restart`, ...); `main[data-refreshes]` counts the live refreshes.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::model::{Detail, JobSetRow, Overview};
use super::{BASE, EVENTS};
use crate::timeline::Restart;

const CSS: &str = include_str!("../../assets/ui.css");
const LIVE_JS: &str = include_str!("../../assets/ui.js");
const LOGIN_JS: &str = include_str!("../../assets/login.js");

/// The document head: the style, and an empty icon so that browsers do not ask for
/// `/favicon.ico` (the API server's, which needs a token).
fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            link rel="icon" href="data:,";
            title { (title) " · jobset" }
            style { (PreEscaped(CSS)) }
        }
    }
}

/// The login page: a form for the token and nothing of the cluster. `next` is where a login
/// goes (already checked by `auth::safe_next`); without it, the page's script fills in the
/// page's own address (so a 401 page echoes nothing of the request).
pub fn login(next: Option<&str>, error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("log in"))
            body {
                header { a href={ (BASE) "/" } { "jobset" } }
                main.login {
                    h1 { "Log in" }
                    p.note {
                        "The token is the cluster's: the " code { "token" } " of its kubeconfig user "
                        "(" code { "kubectl config view --raw --minify -o jsonpath='{.users[0].user.token}'" } "), "
                        "or open the address " code { "jobset up" } " printed, which carries it after " code { "#token=" } "."
                    }
                    @if let Some(e) = error { p.error #login-error { (e) } }
                    form #login method="post" action={ (BASE) "/login" } {
                        input type="hidden" name="next" value=[next];
                        p { label { "Token " input type="password" name="token" autocomplete="off" required autofocus; } }
                        p { button type="submit" { "Log in" } }
                    }
                }
                script { (PreEscaped(LOGIN_JS)) }
            }
        }
    }
}

/// A page of the live view: `fragment` as first served, refreshed from `fragment_url` on each
/// event of `events_url` (without one, a snapshot: `?live=0`).
pub fn page(title: &str, fragment_url: &str, events_url: Option<&str>, fragment: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    a href={ (BASE) "/" } { "jobset" }
                    @if events_url.is_some() { span #live data-state="connecting" { "live" } }
                    @else { span #live data-state="off" { "snapshot" } }
                    form method="post" action={ (BASE) "/logout" } { button type="submit" { "Log out" } }
                }
                main data-fragment=(fragment_url) data-events=[events_url] data-refreshes="0" { (fragment) }
                script { (PreEscaped(LIVE_JS)) }
            }
        }
    }
}

fn state(s: &str) -> Markup {
    html! { span.state data-state=(s) { (s) } }
}

/// A path segment, percent-encoded (names are DNS labels, but a URL is built from anything).
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The URL of a JobSet's page.
pub fn jobset_url(namespace: &str, name: &str) -> String {
    format!("{BASE}/jobsets/{}/{}", encode(namespace), encode(name))
}

/// The fragment URL of a JobSet's page.
pub fn jobset_fragment_url(namespace: &str, name: &str) -> String {
    format!("{BASE}/partial/jobsets/{}/{}", encode(namespace), encode(name))
}

/// The events URL of a JobSet's page (its own objects' changes).
pub fn jobset_events_url(namespace: &str, name: &str) -> String {
    format!("{BASE}{EVENTS}?namespace={}&jobset={}", encode(namespace), encode(name))
}

/// The overview: every JobSet and AppWrapper.
pub fn overview(o: &Overview) -> Markup {
    html! {
        h1 { "JobSets" }
        @if o.jobsets.is_empty() {
            p.note #no-jobsets { "No JobSets." }
        } @else {
            table #jobsets {
                thead { tr { th { "Namespace" } th { "Name" } th { "Status" } th { "Jobs ready" } th { "Restarts" } th { "Last restart" } th { "Created" } } }
                tbody {
                    @for r in &o.jobsets {
                        tr data-jobset={ (r.namespace) "/" (r.name) } data-state=(r.status) {
                            td { (r.namespace) }
                            td { a href=(jobset_url(&r.namespace, &r.name)) { (r.name) } }
                            td { (state(r.status)) }
                            td.num { (r.jobs_ready) "/" (r.jobs_wanted) }
                            td.num { (r.restarts) }
                            td.num { (r.last_restart.as_deref().unwrap_or("-")) }
                            td { @if let Some(t) = r.created { (t) } }
                        }
                    }
                }
            }
        }
        h2 { "AppWrappers" }
        @if let Some(e) = &o.appwrappers_error {
            p.error #appwrappers-error { "AppWrappers could not be listed: " (e) }
        } @else if o.appwrappers.is_empty() {
            p.note #no-appwrappers { "No AppWrappers." }
        } @else {
            table #appwrappers {
                thead { tr { th { "Namespace" } th { "Name" } th { "Phase" } th { "Retries" } th { "Components" } } }
                tbody {
                    @for w in &o.appwrappers {
                        tr data-appwrapper={ (w.namespace) "/" (w.name) } data-state=(w.phase) {
                            td { (w.namespace) }
                            td { (w.name) }
                            td { @if !w.phase.is_empty() { (state(&w.phase)) } }
                            td.num { (w.retries) }
                            td {
                                @for (i, c) in w.components.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    (c.kind) " "
                                    @if c.kind == "JobSet" && !c.name.is_empty() {
                                        a href=(jobset_url(&w.namespace, &c.name)) { (c.name) }
                                    } @else {
                                        (c.name)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A JobSet that is not there (any more).
pub fn missing(namespace: &str, name: &str) -> Markup {
    html! {
        h1 { "JobSet " (namespace) "/" (name) }
        p.note #missing { "There is no such JobSet (any more)." }
    }
}

fn summary(r: &JobSetRow, d: &Detail) -> Markup {
    html! {
        h1 data-jobset={ (r.namespace) "/" (r.name) } data-state=(r.status) { "JobSet " (r.namespace) "/" (r.name) " " (state(r.status)) }
        table #summary {
            tr { th { "Jobs ready" } td { (r.jobs_ready) "/" (r.jobs_wanted) } }
            tr { th { "Restarts" } td { (r.restarts) " (" (r.restarts_count_towards_max) " towards maxRestarts)" } }
            tr { th { "Restart strategy" } td { (d.strategy) } }
            tr { th { "Suspended" } td { (d.suspended) } }
            @if let Some(t) = r.created { tr { th { "Created" } td { (t) } } }
        }
    }
}

/// A JobSet's page: its summary, `restarts` (the timeline's), the `chart`, its replicated jobs,
/// Jobs, pods and conditions.
pub fn detail(d: &Detail, restarts: &[Restart], chart: Markup) -> Markup {
    html! {
        (summary(&d.jobset, d))
        h2 { "Restart history" }
        (restart_history(restarts))
        h2 { "Timeline" }
        section #timeline { (chart) }
        h2 { "Replicated jobs" }
        table #replicated-jobs {
            thead { tr { th { "Name" } th { "Replicas" } th { "Ready" } th { "Succeeded" } th { "Failed" } th { "Active" } th { "Suspended" } th { "Restarts" } } }
            tbody {
                @for r in &d.replicated_jobs {
                    tr data-name=(r.name) {
                        td { (r.name) } td.num { (r.replicas) } td.num { (r.ready) } td.num { (r.succeeded) }
                        td.num { (r.failed) } td.num { (r.active) } td.num { (r.suspended) } td.num { (r.restarts) }
                    }
                }
            }
        }
        h2 { "Jobs" }
        @if d.jobs.is_empty() {
            p.note { "No Jobs." }
        } @else {
            table #jobs {
                thead { tr { th { "Name" } th { "Replicated job" } th { "Index" } th { "Attempt" } th { "State" } th { "Active" } th { "Ready" } th { "Succeeded" } th { "Failed" } } }
                tbody {
                    @for j in &d.jobs {
                        tr data-name=(j.name) data-state=(j.state) {
                            td { (j.name) } td { (j.replicated_job) }
                            td.num { @if let Some(i) = j.index { (i) } } td.num { (j.attempt) }
                            td { (state(j.state)) }
                            td.num { (j.active) } td.num { (j.ready) } td.num { (j.succeeded) } td.num { (j.failed) }
                        }
                    }
                }
            }
        }
        h2 { "Pods" }
        @if d.pods.is_empty() {
            p.note { "No pods." }
        } @else {
            table #pods {
                thead { tr { th { "Name" } th { "Job" } th { "Index" } th { "State" } th { "Ready" } th { "Restarts" } th { "In-place attempt" } th { "Node" } } }
                tbody {
                    @for p in &d.pods {
                        tr data-name=(p.name) data-state=(p.state) {
                            td { (p.name) } td { (p.job) } td.num { @if let Some(i) = p.index { (i) } }
                            td { (state(&p.state)) } td.num { (p.ready) } td.num { (p.restarts) }
                            td.num { (p.in_place_attempt.as_deref().unwrap_or("")) } td { (p.node) }
                        }
                    }
                }
            }
            @if d.pods_total > d.pods.len() {
                p.note #pods-more { (d.pods_total - d.pods.len()) " more pods not listed (the timeline shows every one)." }
            }
        }
        @if !d.conditions.is_empty() {
            h2 { "Conditions" }
            table #conditions {
                thead { tr { th { "Type" } th { "Status" } th { "Reason" } th { "Message" } th { "Since" } } }
                tbody {
                    @for c in &d.conditions {
                        tr data-condition=(c.type_) {
                            td { (c.type_) } td { (c.status) } td { (c.reason) } td { (c.message) } td { (c.last_transition) }
                        }
                    }
                }
            }
        }
    }
}

/// The restart history: one row per record, its trigger, action and phase durations.
fn restart_history(rows: &[Restart]) -> Markup {
    const PHASES: [&str; 5] = ["detect", "stop", "barrier", "start", "total"];
    html! {
        @if rows.is_empty() {
            p.note #restart-history data-restarts="0" { "No restarts." }
        } @else {
            table #restart-history data-restarts=(rows.len()) {
                thead {
                    tr {
                        th { "#" } th { "Attempt" } th { "Strategy" } th { "Scope" }
                        @for p in PHASES { th { (p) } }
                        th { "State" } th { "Trigger" } th { "Action" } th { "Decided at (UTC)" }
                    }
                }
                tbody {
                    @for r in rows {
                        tr data-restart-row=(r.index) data-attempt=(r.attempt) {
                            td.num { (r.index) } td.num { (r.attempt) } td { (r.strategy) }
                            td { (r.scope) @if let Some(t) = &r.target { " " (t) } }
                            @for name in PHASES {
                                @match r.phases.iter().find(|p| p.name == name) {
                                    Some(p) => td.num data-phase=(p.name) data-seconds=(p.seconds) { (seconds(p.seconds)) },
                                    None => td.num { "-" },
                                }
                            }
                            td {
                                @if r.superseded { (state("Superseded")) }
                                @else if r.running_at.is_none() { (state("Restarting")) }
                                @else { (state("Completed")) }
                            }
                            td.wrap {
                                (r.trigger.reason)
                                @if let Some(p) = r.trigger.pod.as_ref().or(r.trigger.job.as_ref()) { ": " (p) }
                                @if let Some(c) = &r.trigger.container { " (" (c) ")" }
                                @if let Some(code) = r.trigger.exit_code { ", exit code " (code) }
                                @if let Some(m) = &r.trigger.message { br; span.note { (m) } }
                            }
                            td.wrap {
                                (r.trigger.action)
                                @if let Some(rule) = &r.trigger.rule { " (rule " (rule) ")" }
                                @if !r.trigger.counts_towards_max { br; span.note { "not counted towards maxRestarts" } }
                            }
                            td title=(r.decided_at) { (clock(r.decided_at)) }
                        }
                    }
                }
            }
        }
    }
}

/// A time of day, to the millisecond (UTC): restarts are read in fractions of a second.
fn clock(t: jiff::Timestamp) -> String {
    t.strftime("%H:%M:%S%.3f").to_string()
}

/// Seconds as a person reads them: `0.250s`, `12.5s`, `3m4.2s`.
fn seconds(s: f64) -> String {
    if s < 60.0 { format!("{s:.3}s") } else { format!("{}m{:.1}s", (s / 60.0).floor(), s % 60.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_urls_are_percent_encoded() {
        assert_eq!(jobset_url("ns", "a.b-c"), "/ui/jobsets/ns/a.b-c");
        assert_eq!(jobset_url("n s", "a/b?c"), "/ui/jobsets/n%20s/a%2Fb%3Fc");
        assert_eq!(jobset_events_url("ns", "a&b"), "/ui/events?namespace=ns&jobset=a%26b");
    }

    #[test]
    fn clock_shows_the_time_of_day_to_the_millisecond() {
        assert_eq!(clock("2026-01-01T10:02:03.456789Z".parse().unwrap()), "10:02:03.456");
    }

    #[test]
    fn seconds_read_as_a_person_would() {
        assert_eq!(seconds(0.25), "0.250s");
        assert_eq!(seconds(12.5), "12.500s");
        assert_eq!(seconds(184.2), "3m4.2s");
    }

    #[test]
    fn values_are_escaped() {
        let m = missing("<script>", "a\"b");
        let text = m.into_string();
        assert!(text.contains("&lt;script&gt;"), "{text}");
        assert!(!text.contains("<script>"), "{text}");
    }
}
