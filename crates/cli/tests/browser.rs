//! Looking at the restart timeline and the web view as a person would, in headless Chromium
//! (Debian's `chromium`, which `.ci/run` installs; elsewhere the test skips, saying so, when it is
//! missing). The scenario, examples/in-place-restart/two-restarts.yaml, runs on `jobset up
//! --runtime process`: a Recreate restart (a Job fails), then an in-place restart (a worker
//! exits 1), then it completes. Then:
//! - `jobset timeline` writes the HTML; in Chromium its rows and both restart markers are there,
//!   each phase duration shown equals the one computed from the JobSet's `status.restartHistory`
//!   (`jobset get jobset NAME -o json`), and the console stays silent. The screenshot is kept as
//!   `target/test-artifacts/timeline.png` (the README's picture: docs/img/timeline.png).
//! - the web view at `/ui`: without the token every data route answers 401 and shows nothing;
//!   with the token in the login URL's fragment the overview lists the JobSet and its page shows
//!   the restart history and the timeline as the record has them, the console silent.
//!
//! How Chromium is driven (its command line, no DevTools protocol): tests/common/chromium.rs.

#[path = "common/chromium.rs"]
mod chromium;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use chromium::{Chromium, Element, Load};
use common::tracker::Tracker;
use jiff::Timestamp;
use jobset_api::jobset::{JobSet, RestartRecord, RestartStrategy};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::{Api, ResourceExt};

const NAME: &str = "two-restarts";
const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/in-place-restart/two-restarts.yaml");
/// How long the scenario (or any one state of it) may take: generous, the machine is shared.
const WAIT: Duration = Duration::from_secs(120);
const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";

/// The pod slots of the scenario (2 Jobs of 2 pods) and its Jobs' rows, as `data-row` names them.
const ROWS: [&str; 6] = ["workers/0", "workers/0/0", "workers/0/1", "workers/1", "workers/1/0", "workers/1/1"];

/// `jobset up --runtime process --nodes 2` with the scenario run to completion.
struct Scenario {
    server: common::Server,
    jobsets: Tracker<JobSet>,
    pods: Tracker<Pod>,
    _dir: tempfile::TempDir,
}

impl Scenario {
    async fn run() -> Scenario {
        let dir = tempfile::tempdir().unwrap();
        let server =
            common::start(dir.path(), 0, &["--runtime", "process", "--nodes", "2", "--job-backoff", "10ms"]).await;
        let client = server.client().await;
        let jobsets = Tracker::new(Api::<JobSet>::default_namespaced(client.clone()), "jobsets", WAIT).await;
        let pods = Tracker::new(Api::<Pod>::default_namespaced(client), "pods", WAIT).await;
        let s = Scenario { server, jobsets, pods, _dir: dir };
        let out = s.jobset(&["apply", "-f", SCENARIO]).await;
        assert_eq!(out.code, 0, "{out:?}");
        s.jobsets
            .until(&format!("{NAME} to end"), |seen| {
                let js = seen.current.get(NAME)?;
                (!js.status.as_ref()?.terminal_state.is_empty()).then_some(())
            })
            .await;
        s
    }

    /// `jobset ARGS` against this cluster.
    async fn jobset(&self, args: &[&str]) -> common::Output {
        let mut cmd = common::jobset_command(args);
        cmd.env("KUBECONFIG", &self.server.kubeconfig);
        common::run_to_end(cmd, WAIT).await
    }

    /// What the watches saw, for a failure message: each JobSet status change (restarts, in-place
    /// attempts, records, conditions) and each pod's containers at the end.
    fn story(&self) -> String {
        let mut out = String::from("JobSet versions:\n");
        for v in self.jobsets.seen().versions(NAME) {
            let Some(st) = &v.status else { continue };
            let conds: Vec<String> =
                st.conditions.iter().filter(|c| c.status == "True").map(|c| c.type_.clone()).collect();
            out += &format!(
                "  restarts {} in-place current {:?} previous {:?} records {} {conds:?}\n",
                st.restarts,
                st.current_in_place_restart_attempt,
                st.previous_in_place_restart_attempt,
                st.restart_history.len()
            );
        }
        out += "pods:\n";
        for p in self.pods.seen().current.values() {
            let st = p.status.as_ref();
            out += &format!(
                "  {} restart-attempt {:?} in-place {:?} {:?}\n",
                p.name_any(),
                p.annotations().get(RESTART_ATTEMPT),
                p.annotations().get("jobset.sigs.k8s.io/in-place-restart-attempt"),
                st.and_then(|s| s.phase.clone())
            );
            for c in st
                .iter()
                .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
            {
                out += &format!("    {} restarts {} {:?} last {:?}\n", c.name, c.restart_count, c.state, c.last_state);
            }
        }
        out
    }

    /// The cluster's bearer token, from its kubeconfig.
    fn token(&self) -> String {
        let text = std::fs::read_to_string(&self.server.kubeconfig).unwrap();
        let kc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        kc["users"][0]["user"]["token"].as_str().expect("a token in the kubeconfig").to_string()
    }
}

fn worker(p: &Pod) -> Option<&ContainerStatus> {
    p.status.as_ref()?.container_statuses.iter().flatten().find(|c| c.name == "worker")
}

/// The scenario did what its manifest says: it completed after exactly one Recreate (the
/// pods of restart attempt 0 were deleted, none restarted in place) and one in-place restart
/// (each pod of attempt 1 restarted its worker once and succeeded), and the record says so.
fn check_scenario(s: &Scenario, js: &JobSet) -> Vec<RestartRecord> {
    let status = js.status.as_ref().expect("a status");
    assert_eq!(status.terminal_state, "Completed", "{status:#?}\n{}", s.story());
    assert_eq!(status.restarts, 1, "one Recreate: {status:#?}");
    let seen = s.pods.seen();
    let mut by_attempt: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, p) in &seen.history {
        let attempt = p.annotations().get(RESTART_ATTEMPT).cloned().unwrap_or_default();
        by_attempt.entry(attempt).or_default().insert(p.name_any());
    }
    assert_eq!(by_attempt.keys().collect::<Vec<_>>(), ["0", "1"], "pods by restart attempt: {by_attempt:?}");
    for name in &by_attempt["0"] {
        assert!(!seen.current.contains_key(name), "{name} of attempt 0 was not deleted by the Recreate");
        let restarted = seen.versions(name).filter_map(worker).map(|w| w.restart_count).max().unwrap_or(0);
        assert_eq!(restarted, 0, "{name} of attempt 0 was restarted in place");
    }
    assert_eq!(by_attempt["1"].len(), 4, "{by_attempt:?}");
    for name in &by_attempt["1"] {
        let p = &seen.current[name];
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let w = worker(p).expect("a worker status");
        assert_eq!((phase, w.restart_count), (Some("Succeeded"), 1), "{name}: {:#?}", p.status);
    }
    drop(seen);

    let history = status.restart_history.clone();
    let kinds: Vec<(RestartStrategy, bool)> = history.iter().map(|r| (r.strategy, r.superseded)).collect();
    assert_eq!(kinds, [(RestartStrategy::Recreate, false), (RestartStrategy::InPlaceRestart, false)], "{history:#?}");
    for r in &history {
        let duration = r.duration.as_deref().unwrap_or_else(|| panic!("an unfinished restart: {r:#?}"));
        let total = phases(r)["total"];
        assert!((go_seconds(duration) - total).abs() < 1e-6, "duration {duration} against the total {total} s: {r:#?}");
    }
    history
}

/// The phase durations of a record, as the design defines them, in seconds.
fn phases(r: &RestartRecord) -> BTreeMap<&'static str, f64> {
    let t = |m: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| m.as_ref().map(|m| m.0);
    let secs =
        |a: Option<Timestamp>, b: Option<Timestamp>| Some((b?.as_microsecond() - a?.as_microsecond()) as f64 / 1e6);
    let (failed, decided) = (t(&r.failed_at), Some(r.decided_at.0));
    let (stopped, lifted, running) = (t(&r.stopped_at), t(&r.barrier_lifted_at), t(&r.running_at));
    [
        ("detect", secs(failed, decided)),
        ("stop", secs(decided, stopped)),
        ("barrier", lifted.and(secs(stopped, lifted))),
        ("start", secs(lifted.or(stopped), running)),
        ("total", secs(failed.or(decided), running)),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect()
}

/// Seconds in a Go duration string (`1.5s`, `1m3.25s`, `250ms`, `0s`), which jiff's friendly
/// format reads.
fn go_seconds(d: &str) -> f64 {
    d.parse::<jiff::SignedDuration>().unwrap_or_else(|e| panic!("not a Go duration: {d:?}: {e}")).as_secs_f64()
}

/// `target/test-artifacts/FILE`: the target directory is the one this test binary was built in
/// (`target/debug/deps/browser-*`).
fn artifact(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).expect("the target directory");
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(file)
}

/// The phases (`data-phase` → `data-seconds`) annotated inside `e`.
fn shown_in(e: &Element) -> BTreeMap<String, f64> {
    e.with_attr("data-phase")
        .into_iter()
        .map(|p| {
            let secs = p.attr("data-seconds").and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
            (p.attr("data-phase").unwrap().to_string(), secs)
        })
        .collect()
}

/// What the restart markers (`data-restart`) annotate: restart index → phase → seconds.
fn shown_phases(root: &Element) -> BTreeMap<String, BTreeMap<String, f64>> {
    root.with_attr("data-restart")
        .into_iter()
        .map(|m| (m.attr("data-restart").unwrap().to_string(), shown_in(m)))
        .collect()
}

/// The chart's restart markers and the restart table (`#TABLE`) show each restart's phases as
/// the record has them: the markers' `data-seconds` exactly, the table's text to the millisecond
/// (and its `data-seconds`, where it has them).
#[track_caller]
fn check_phases(what: &str, root: &Element, history: &[RestartRecord], table: &str) {
    let shown = shown_phases(root);
    assert_eq!(shown.keys().cloned().collect::<Vec<_>>(), ["0", "1"], "{what}: restart markers");
    let table = root.by_id(table).unwrap_or_else(|| panic!("{what}: no #{table}"));
    let rows = table
        .find_all(&|e| e.name == "tbody")
        .into_iter()
        .flat_map(|b| b.children.iter().filter(|r| r.name == "tr"))
        .collect::<Vec<_>>();
    assert_eq!(rows.len(), history.len(), "{what}: restart table rows: {}", table.text);
    for (i, r) in history.iter().enumerate() {
        let want = phases(r);
        let got = &shown[&i.to_string()];
        let names = |m: &BTreeMap<String, f64>| m.keys().cloned().collect::<Vec<_>>();
        let want_names: Vec<String> = want.keys().map(|k| k.to_string()).collect();
        assert_eq!(names(got), want_names, "{what}: restart {i}'s phases");
        let in_table = shown_in(rows[i]);
        assert!(in_table.is_empty() || names(&in_table) == want_names, "{what}: restart {i}'s table row: {in_table:?}");
        for (phase, secs) in &want {
            assert!(
                (got[*phase] - secs).abs() < 1e-6,
                "{what}: restart {i} {phase}: shown {} s, recorded {secs} s",
                got[*phase]
            );
            if let Some(t) = in_table.get(*phase) {
                assert!(
                    (t - secs).abs() < 1e-6,
                    "{what}: restart {i} {phase}: the table says {t} s, recorded {secs} s"
                );
            }
            let text = format!("{secs:.3}s");
            assert!(
                rows[i].text.contains(&text),
                "{what}: restart {i} {phase} {text} not in its table row {:?}",
                rows[i].text
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_and_web_view_show_a_recreate_and_an_in_place_restart() {
    let Some(browser) = Chromium::for_test("timeline_and_web_view_show_a_recreate_and_an_in_place_restart") else {
        return;
    };
    let s = Scenario::run().await;
    let out = s.jobset(&["get", "jobset", NAME, "-o", "json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let js: JobSet = serde_json::from_str(&out.stdout).unwrap();
    let history = check_scenario(&s, &js);

    // The timeline file.
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("timeline.html");
    let out = s.jobset(&["timeline", NAME, "--output", html.to_str().unwrap()]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let shot = artifact("timeline.png");
    let _ = std::fs::remove_file(&shot);
    let how = Load { window: (1400, 440), screenshot: Some(shot.clone()), ..Load::default() };
    let page = browser.load(&format!("file://{}", html.display()), &how).await;
    eprintln!("the timeline's screenshot: {}", shot.display());
    page.assert_no_errors("the timeline");
    let rows: BTreeSet<&str> = page.root.with_attr("data-row").into_iter().filter_map(|e| e.attr("data-row")).collect();
    assert_eq!(rows, BTreeSet::from(ROWS), "rows");
    check_phases("the timeline", &page.root, &history, "restart-table");
    // Nothing in it reaches out (self-contained).
    assert!(page.responses.is_empty(), "{:?}", page.responses);
    assert_no_external_references(&page.html);

    web_view(&s, &browser, &history).await;
    s.server.check();
}

/// No `src`/`href` leaves the document (no network, no external scripts or styles).
#[track_caller]
fn assert_no_external_references(html: &str) {
    for attr in ["src=\"", "href=\""] {
        for (i, _) in html.match_indices(attr) {
            let value = &html[i + attr.len()..];
            let value = &value[..value.find('"').unwrap_or(value.len())];
            assert!(value.starts_with('#') || value.starts_with("data:"), "an external reference {attr}{value}\"");
        }
    }
}

/// Nothing of the JobSet on the page: not in its text, no rows, restarts or restart table. (The
/// login page served for a 401 keeps the address asked for in its form, which may name it.)
#[track_caller]
fn assert_shows_no_data(what: &str, page: &chromium::Page) {
    assert!(!page.root.text.contains(NAME), "{what} without the token shows the JobSet:\n{}", page.html);
    let hooks = page.root.find_all(&|e| {
        e.attrs.contains_key("data-row")
            || e.attrs.contains_key("data-restart")
            || e.attr("id") == Some("restart-table")
    });
    assert!(hooks.is_empty(), "{what} without the token shows data:\n{}", page.html);
}

/// The web view: nothing without the token, everything with it.
async fn web_view(s: &Scenario, browser: &Chromium, history: &[RestartRecord]) {
    let base = format!("https://127.0.0.1:{}/ui", s.server.port);
    let how = || Load { ignore_certificate_errors: true, ..Load::default() };

    // Without the token: the pages, their JSON and the event stream answer 401 and show nothing.
    let paths =
        ["/".to_string(), format!("/jobsets/default/{NAME}"), format!("/api/jobsets/default/{NAME}"), "/events".into()];
    for path in paths {
        let url = format!("{base}{path}");
        let page = browser.load(&url, &how()).await;
        let first = page.responses.first().unwrap_or_else(|| panic!("{url}: no response: {page:?}"));
        assert_eq!((first.url.as_str(), first.status), (url.as_str(), 401), "{:?}", page.responses);
        assert_shows_no_data(&url, &page);
    }
    // The login page itself shows no cluster data.
    let login = browser.load(&format!("{base}/login"), &how()).await;
    login.assert_no_errors("the login page");
    assert_shows_no_data("the login page", &login);

    // With the token in the fragment (as `jobset up` prints the URL): logged in, the overview
    // lists the JobSet.
    let token = s.token();
    let shot = artifact("web-view.png");
    let url = format!("{base}/login#token={token}");
    let page = browser.load(&url, &Load { screenshot: Some(shot.clone()), ..how() }).await;
    eprintln!("the web view's screenshot: {}", shot.display());
    page.assert_no_errors("the web view's overview");
    let listed = page.root.find_all(&|e| e.attr("data-jobset") == Some(&format!("default/{NAME}")));
    assert!(listed.len() == 1 && listed[0].text.contains(NAME), "the overview does not list {NAME}:\n{}", page.html);

    // The JobSet's page, logged in the same way: its restart history and the timeline.
    let url = format!("{base}/login?next=/ui/jobsets/default/{NAME}#token={token}");
    let shot = artifact("web-view-jobset.png");
    let page = browser.load(&url, &Load { window: (1400, 1200), screenshot: Some(shot.clone()), ..how() }).await;
    eprintln!("the JobSet's page's screenshot: {}", shot.display());
    page.assert_no_errors("the JobSet's page");
    let rows: BTreeSet<&str> = page.root.with_attr("data-row").into_iter().filter_map(|e| e.attr("data-row")).collect();
    assert_eq!(rows, BTreeSet::from(ROWS), "rows on the JobSet's page");
    check_phases("the JobSet's page", &page.root, history, "restart-history");
}

/// The console check can fail: a page that logs and throws is caught, its DOM read as scripts
/// left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_reports_console_messages_and_uncaught_exceptions() {
    let Some(browser) = Chromium::for_test("chromium_reports_console_messages_and_uncaught_exceptions") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("noisy.html");
    let html = r#"<!DOCTYPE html><body><p id="p">before</p><script>
document.getElementById("p").textContent = "after";
console.error("something broke");
undefinedFunction();
</script></body>"#;
    std::fs::write(&file, html).unwrap();
    let page = browser.load(&format!("file://{}", file.display()), &Load::default()).await;
    assert_eq!(page.root.by_id("p").map(|p| p.text.as_str()), Some("after"));
    assert_eq!(page.console.len(), 2, "{:?}", page.console);
    assert!(page.console[0].starts_with("\"something broke\""), "{:?}", page.console);
    assert!(
        page.console[1].contains("Uncaught ReferenceError: undefinedFunction is not defined"),
        "{:?}",
        page.console
    );
    let caught = std::panic::catch_unwind(|| page.assert_no_errors("the noisy page"));
    assert!(caught.is_err(), "assert_no_errors let console errors through");
}

#[test]
fn dom_parser_reads_chromiums_serialization() {
    let html = r#"<html><head><style>a > b {}</style></head><body><div id="t" data-row="a&amp;b">x <b>y</b> &lt;z&gt;</div><br><svg><g data-restart="0"><text data-phase="stop" data-seconds="1.5">1.5 s</text></g></svg><script>if (1 < 2) {}</script></body></html>"#;
    let root = chromium::parse(html);
    let t = root.by_id("t").expect("the div");
    assert_eq!(t.attr("data-row"), Some("a&b"));
    assert_eq!(t.text, "x y <z>");
    let phase = root.with_attr("data-phase")[0];
    assert_eq!((phase.name.as_str(), phase.attr("data-seconds"), phase.text.as_str()), ("text", Some("1.5"), "1.5 s"));
    assert_eq!(shown_phases(&root)["0"]["stop"], 1.5);
    let body = root.find_all(&|e| e.name == "body")[0];
    assert_eq!(body.children.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["div", "br", "svg", "script"]);
}

#[test]
fn go_durations_read_as_seconds() {
    for (d, want) in
        [("0s", 0.0), ("1.5s", 1.5), ("1m3.25s", 63.25), ("250ms", 0.25), ("1h0m1s", 3601.0), ("1.5µs", 1.5e-6)]
    {
        assert!((go_seconds(d) - want).abs() < 1e-12, "{d}: {}", go_seconds(d));
    }
}

#[test]
fn origin_is_scheme_host_and_port() {
    assert_eq!(chromium::origin("https://127.0.0.1:8443/ui#token=x"), "https://127.0.0.1:8443");
    assert_eq!(chromium::origin("file:///tmp/t.html"), "file:///tmp/t.html");
}

#[test]
fn network_log_responses_to_the_origin_only() {
    let log = r#"{"constants": {"logEventTypes": {"URL_REQUEST_START_JOB": 1, "HTTP_TRANSACTION_READ_RESPONSE_HEADERS": 2}},
      "events": [
        {"source": {"id": 5}, "type": 1, "params": {"url": "https://127.0.0.1:9/ui/"}},
        {"source": {"id": 6}, "type": 1, "params": {"url": "https://update.googleapis.com/x"}},
        {"source": {"id": 7}, "type": 1, "params": {"url": "https://127.0.0.1:9/favicon.ico"}},
        {"source": {"id": 5}, "type": 2, "params": {"headers": ["HTTP/1.1 401 Unauthorized", "a: b"]}},
        {"source": {"id": 6}, "type": 2, "params": {"headers": ["HTTP/1.1 500 x"]}},
        {"source": {"id": 7}, "type": 2, "params": {"headers": ["HTTP/1.1 404 x"]}}
      ]}"#;
    let r = chromium::responses(log, "https://127.0.0.1:9");
    assert_eq!(r, [chromium::Response { url: "https://127.0.0.1:9/ui/".into(), status: 401 }]);
}
