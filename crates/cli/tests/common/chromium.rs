//! Looking at pages as a person would: headless Chromium (Debian's `chromium` package, which
//! `.ci/run` installs) driven from its command line, no DevTools protocol. One run loads a page
//! (following what its scripts navigate to while it loads: a login form submitted, a redirect),
//! and leaves:
//! - the DOM once loaded (`--dump-dom`), parsed into [`Element`]s (no `--virtual-time-budget`:
//!   virtual time stands still while a request is open, and the web view keeps an event stream
//!   open);
//! - the console: every `console.*` call and uncaught exception (`--enable-logging=stderr`
//!   prints them as `CONSOLE` lines; it does not say their level, so any line counts);
//! - every HTTP response to the page's own origin, from the network log (`--log-net-log`), so
//!   failed loads (a 401, a 404), which DevTools shows as console errors, are seen too;
//! - optionally a screenshot of the window.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// Where Debian installs it; `CHROMIUM` overrides.
const DEFAULT_BINARY: &str = "/usr/bin/chromium";

/// Console messages on stderr (`CONSOLE(...)` lines), on top of the headless flags.
const LOGGING: &[&str] = &["--enable-logging=stderr", "--v=0"];

/// A Chromium binary.
pub struct Chromium {
    binary: PathBuf,
}

/// How to load a page.
pub struct Load {
    /// Wall-clock bound on the whole run.
    pub timeout: Duration,
    pub window: (u32, u32),
    pub screenshot: Option<PathBuf>,
    /// Accept the server's certificate (`jobset up` serves HTTPS with its own CA).
    pub ignore_certificate_errors: bool,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            timeout: Duration::from_secs(60),
            window: (1400, 900),
            screenshot: None,
            ignore_certificate_errors: false,
        }
    }
}

/// One HTTP exchange of the page with its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub url: String,
    pub status: u16,
}

/// What a load left.
#[derive(Debug)]
pub struct Page {
    /// The serialized DOM.
    pub html: String,
    pub root: Element,
    /// Console messages, as Chromium logged them (`"text", source: URL (line)`).
    pub console: Vec<String>,
    /// The responses to requests to the page's origin (not `/favicon.ico`, which the browser asks
    /// for on its own), in order.
    pub responses: Vec<Response>,
}

impl Page {
    /// Panics unless the console stayed silent and every response from the origin was a success.
    #[track_caller]
    pub fn assert_no_errors(&self, what: &str) {
        assert!(self.console.is_empty(), "{what}: console messages:\n{}", self.console.join("\n"));
        let failed: Vec<&Response> = self.responses.iter().filter(|r| r.status >= 400).collect();
        assert!(failed.is_empty(), "{what}: failed loads: {failed:?}");
    }
}

impl Chromium {
    /// `$CHROMIUM`, else `/usr/bin/chromium`, else `chromium` on PATH.
    pub fn find() -> Option<Chromium> {
        if let Some(b) = std::env::var_os("CHROMIUM") {
            return Some(Chromium { binary: b.into() });
        }
        if Path::new(DEFAULT_BINARY).is_file() {
            return Some(Chromium { binary: DEFAULT_BINARY.into() });
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path).map(|d| d.join("chromium")).find(|p| p.is_file()).map(|binary| Chromium { binary })
    }

    /// For a test: the browser, or `None` (the test then returns, having said why) when there is
    /// none and this is not CI. In CI (`CI` set), where `.ci/run` installs it, a missing browser
    /// fails the test.
    pub fn for_test(test: &str) -> Option<Chromium> {
        let found = Chromium::find();
        if found.is_none() {
            let msg = "headless Chromium is not installed: install Debian's `chromium` package \
                       (`apt-get install chromium`, as .ci/run does) or set CHROMIUM to a Chromium binary";
            assert!(std::env::var_os("CI").is_none(), "{test}: {msg}");
            eprintln!("SKIPPED {test}: {msg}");
        }
        found
    }

    /// Loads `url` once (see the module docs).
    pub async fn load(&self, url: &str, how: &Load) -> Page {
        let profile = tempfile::tempdir().expect("a profile directory");
        let net_log = profile.path().join("net-log.json");
        let mut cmd = Command::new(&self.binary);
        cmd.args(jobset_ui::HEADLESS_CHROMIUM_FLAGS)
            .args(LOGGING)
            .arg(format!("--user-data-dir={}", profile.path().join("profile").display()))
            .arg(format!("--log-net-log={}", net_log.display()))
            .arg(format!("--window-size={},{}", how.window.0, how.window.1))
            .arg("--dump-dom");
        if let Some(shot) = &how.screenshot {
            cmd.arg(format!("--screenshot={}", shot.display()));
        }
        if how.ignore_certificate_errors {
            cmd.arg("--ignore-certificate-errors");
        }
        cmd.arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: on a timeout the renderers go with it.
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        let pid = child.id().expect("a running chromium");
        let out = match tokio::time::timeout(how.timeout, child.wait_with_output()).await {
            Ok(out) => out.expect("waiting for chromium"),
            Err(_) => {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL);
                panic!("chromium did not finish loading {url} within {:?}", how.timeout);
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "chromium failed on {url} ({}):\n{stderr}", out.status);
        let html = String::from_utf8_lossy(&out.stdout).into_owned();
        let console = stderr
            .lines()
            .filter_map(|l| l.split_once(":CONSOLE").map(|(_, rest)| rest.split_once("] ").map_or(rest, |(_, m)| m)))
            .map(str::to_string)
            .collect();
        let log = std::fs::read_to_string(&net_log).unwrap_or_else(|e| panic!("reading {}: {e}", net_log.display()));
        let responses = responses(&log, &origin(url));
        if let Some(shot) = &how.screenshot {
            assert!(shot.is_file(), "chromium wrote no screenshot at {}:\n{stderr}", shot.display());
        }
        Page { root: parse(&html), html, console, responses }
    }
}

/// `scheme://host:port` of an http(s) URL; the whole URL up to its path for others (`file://`).
pub fn origin(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.starts_with("http") => {
            format!("{scheme}://{}", rest.split(['/', '#', '?']).next().unwrap_or(rest))
        }
        _ => url.split('#').next().unwrap_or(url).to_string(),
    }
}

/// The HTTP responses in a Chromium network log (`--log-net-log`) to requests for URLs under
/// `origin`: each URL request's URL (`URL_REQUEST_START_JOB`) with the status line of its
/// response headers (`HTTP_TRANSACTION_READ_RESPONSE_HEADERS`, logged for HTTP/1 and HTTP/2).
pub fn responses(log: &str, origin: &str) -> Vec<Response> {
    let log: Value = serde_json::from_str(log).expect("chromium's network log is JSON");
    let types = &log["constants"]["logEventTypes"];
    let ty = |name: &str| types[name].as_i64().unwrap_or_else(|| panic!("no event type {name} in the network log"));
    let (start, headers) = (ty("URL_REQUEST_START_JOB"), ty("HTTP_TRANSACTION_READ_RESPONSE_HEADERS"));
    let mut urls: BTreeMap<i64, String> = BTreeMap::new();
    let mut out = Vec::new();
    for e in log["events"].as_array().into_iter().flatten() {
        let source = e["source"]["id"].as_i64().unwrap_or(-1);
        let t = e["type"].as_i64();
        if t == Some(start) {
            if let Some(url) = e["params"]["url"].as_str() {
                urls.insert(source, url.to_string());
            }
        } else if t == Some(headers)
            && let Some(url) = urls.get(&source)
            && url.starts_with(origin)
            && !url.ends_with("/favicon.ico")
        {
            let line = e["params"]["headers"][0].as_str().unwrap_or_default();
            let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
            out.push(Response { url: url.clone(), status });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The dumped DOM

/// An element of the dumped DOM: its name, attributes, children and text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Element {
    pub name: String,
    pub attrs: BTreeMap<String, String>,
    pub children: Vec<Element>,
    /// Its own text and its descendants', in order, entities decoded.
    pub text: String,
}

impl Element {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.get(name).map(String::as_str)
    }

    /// Every descendant (and itself) satisfying `pred`, in document order.
    pub fn find_all(&self, pred: &dyn Fn(&Element) -> bool) -> Vec<&Element> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            if pred(e) {
                out.push(e);
            }
            stack.extend(e.children.iter().rev());
        }
        out
    }

    /// Every descendant (and itself) with attribute `name`.
    pub fn with_attr(&self, name: &str) -> Vec<&Element> {
        self.find_all(&|e| e.attrs.contains_key(name))
    }

    /// The element with `id`.
    pub fn by_id(&self, id: &str) -> Option<&Element> {
        self.find_all(&|e| e.attr("id") == Some(id)).into_iter().next()
    }
}

/// HTML elements that have no end tag.
const VOID: &[&str] =
    &["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"];

fn decode(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Parses the DOM as Chromium serializes it (`--dump-dom`): every non-void element closed (SVG
/// elements included), attribute values double-quoted with `&`, `"`, `<`, `>` escaped, text
/// escaped except in `<script>` and `<style>`. Not a general HTML parser: a browser already parsed
/// the page, and this reads its canonical output.
pub fn parse(html: &str) -> Element {
    let mut stack = vec![Element { name: "#document".into(), ..Element::default() }];
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            push_text(&mut stack, &decode(rest));
            break;
        };
        push_text(&mut stack, &decode(&rest[..lt]));
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |i| &after[i + 3..]);
        } else if rest.starts_with("<!") {
            rest = rest.find('>').map_or("", |i| &rest[i + 1..]);
        } else if let Some(after) = rest.strip_prefix("</") {
            let end = after.find('>').unwrap_or(after.len());
            let name = after[..end].trim().to_ascii_lowercase();
            close(&mut stack, &name);
            rest = after.get(end + 1..).unwrap_or("");
        } else {
            let (el, after) = start_tag(&rest[1..]);
            rest = after;
            let name = el.name.clone();
            if VOID.contains(&name.as_str()) {
                stack.last_mut().unwrap().children.push(el);
            } else if name == "script" || name == "style" {
                // Raw text up to the end tag.
                let end = rest.find(&format!("</{name}")).unwrap_or(rest.len());
                let mut el = el;
                el.text = rest[..end].to_string();
                stack.last_mut().unwrap().children.push(el);
                rest = &rest[end..];
                rest = rest.find('>').map_or("", |i| &rest[i + 1..]);
            } else {
                stack.push(el);
            }
        }
    }
    while stack.len() > 1 {
        let top = stack.pop().unwrap();
        adopt(&mut stack, top);
    }
    stack.pop().unwrap()
}

fn push_text(stack: &mut [Element], text: &str) {
    if !text.is_empty() {
        stack.last_mut().unwrap().text.push_str(text);
    }
}

/// Closes the innermost open element called `name` (and any left open inside it).
fn close(stack: &mut Vec<Element>, name: &str) {
    if !stack[1..].iter().any(|e| e.name == name) {
        return;
    }
    loop {
        let top = stack.pop().unwrap();
        let done = top.name == name;
        adopt(stack, top);
        if done {
            return;
        }
    }
}

fn adopt(stack: &mut [Element], child: Element) {
    let parent = stack.last_mut().unwrap();
    parent.text.push_str(&child.text);
    parent.children.push(child);
}

/// A start tag after its `<`: the element (no children yet) and what follows the tag.
fn start_tag(s: &str) -> (Element, &str) {
    let name_end = s.find(|c: char| c.is_whitespace() || c == '>' || c == '/').unwrap_or(s.len());
    let mut el = Element { name: s[..name_end].to_ascii_lowercase(), ..Element::default() };
    let mut rest = &s[name_end..];
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
        if rest.is_empty() {
            return (el, rest);
        }
        if let Some(after) = rest.strip_prefix('>') {
            return (el, after);
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '=' || c == '>').unwrap_or(rest.len());
        let name = rest[..end].to_ascii_lowercase();
        rest = &rest[end..];
        let value = match rest.strip_prefix("=\"") {
            Some(v) => {
                let close = v.find('"').unwrap_or(v.len());
                rest = v.get(close + 1..).unwrap_or("");
                decode(&v[..close])
            }
            None => String::new(),
        };
        el.attrs.insert(name, value);
    }
}
