//! The agent's JobSet watch, resumable across the agent's own restarts.
//!
//! A sidecar agent exits at every in-place restart of its pod and comes back as a new process;
//! with a plain list-and-watch, every agent of the JobSet then lists it again at the same moment.
//! Instead, the agent keeps (in a [`ResumeStore`]) the JobSet as it last saw it, with that event's
//! `resourceVersion`; a restarted agent starts from that object and opens its watch at that
//! `resourceVersion`, so the API server replays what changed while it was down, with no list. When
//! the server no longer has that history (`410 Gone`, "too old resource version") it lists, as a
//! fresh agent does.
//!
//! The first view is then as old as the agent's last event, which a fresh agent's list may also
//! be: client-go's reflector (upstream's agent) lists at `resourceVersion=0`, served from the
//! watch cache with no freshness guarantee. Either way the events that follow bring the agent up
//! to date in order. The object is kept as the server sent it, so every field the agent reads
//! (now or later) survives the restart.
//!
//! With no resume point the agent makes one request, not a list and a watch: a streaming list
//! (KEP-3157, `AgentConfig::watch_list`), a watch with `sendInitialEvents=true` that first sends
//! the JobSet as an ADDED event and then a bookmark annotated `k8s.io/initial-events-end`. The
//! JobSet it sent (or, when there is none, nothing, as an empty list) is the first view once that
//! bookmark has come. When the server refuses the request, or ends it before the bookmark, the
//! agent lists and watches, as client-go's reflector falls back to a list
//! (`Reflector.ListAndWatchWithContext`); when no bookmark comes in time (a server that ignores
//! the parameter) it does too, and makes no more streaming lists.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::io::AsyncBufReadExt;
use futures::stream::{BoxStream, Stream, StreamExt};
use kube::Client;
use kube::api::{ListParams, WatchParams};
use kube::core::Request;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::backoff::JitteredBackoff;
use crate::config::{AgentConfig, BackoffConfig, Endpoint};
use crate::decide::JobSetView;

/// Where the agent keeps its resume point across its own restarts.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ResumeStore {
    /// Every start lists the JobSet.
    #[default]
    Off,
    /// A file the agent owns (`WATCH_STATE_FILE`). It must outlive the agent's container: a process
    /// pod's `/tmp` does (one directory for the whole pod), a restarted Kubernetes container's
    /// `/tmp` does not (use an `emptyDir`); a missing or unreadable file means a list.
    File(PathBuf),
    /// In memory, kept by whoever restarts the agent (the simulated runtime, per pod).
    Memory(MemoryStore),
}

/// A resume point kept in memory; clones share it.
#[derive(Clone, Default)]
pub struct MemoryStore(Arc<Mutex<Option<Saved>>>);

impl PartialEq for MemoryStore {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// What is kept (tests).
    pub fn get(&self) -> Option<Saved> {
        self.0.lock().ok()?.clone()
    }

    /// Replaces what is kept (tests).
    pub fn set(&self, saved: Option<Saved>) {
        if let Ok(mut s) = self.0.lock() {
            *s = saved;
        }
    }
}

/// What an agent keeps for the next agent of its pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    /// Whose it is: another pod's or JobSet's is ignored.
    pub namespace: String,
    pub jobset: String,
    pub pod: String,
    /// Where to resume the watch; empty: list first.
    #[serde(default)]
    pub resource_version: String,
    /// The JobSet at `resource_version`, as the server sent it; `None`: it did not exist.
    #[serde(default)]
    pub object: Option<String>,
    /// The barrier endpoint read from the pod's startupProbe (the pod spec cannot change).
    #[serde(default)]
    pub endpoint_path: Option<String>,
    #[serde(default)]
    pub endpoint_port: Option<u16>,
}

impl Saved {
    fn fresh(cfg: &AgentConfig) -> Saved {
        Saved {
            namespace: cfg.namespace.clone(),
            jobset: cfg.jobset_name.clone(),
            pod: cfg.pod_name.clone(),
            ..Saved::default()
        }
    }

    fn belongs_to(&self, cfg: &AgentConfig) -> bool {
        self.namespace == cfg.namespace && self.jobset == cfg.jobset_name && self.pod == cfg.pod_name
    }

    /// The saved barrier endpoint.
    pub fn endpoint(&self) -> Option<Endpoint> {
        Some(Endpoint { path: self.endpoint_path.clone()?, port: self.endpoint_port? })
    }
}

impl ResumeStore {
    /// The saved state of `cfg`'s pod, if any.
    pub fn load(&self, cfg: &AgentConfig) -> Option<Saved> {
        let saved = match self {
            ResumeStore::Off => None,
            ResumeStore::Memory(m) => m.get(),
            ResumeStore::File(path) => match std::fs::read(path) {
                Ok(bytes) => serde_json::from_slice(&bytes)
                    .map_err(|e| tracing::warn!(file = %path.display(), error = %e, "ignoring the watch state file"))
                    .ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "reading the watch state file");
                    None
                }
            },
        };
        saved.filter(|s| s.belongs_to(cfg))
    }

    /// Keeps `saved`; a failure is logged (the next agent lists instead).
    pub fn save(&self, saved: &Saved) -> Result<(), String> {
        match self {
            ResumeStore::Off => Ok(()),
            ResumeStore::Memory(m) => {
                m.set(Some(saved.clone()));
                Ok(())
            }
            ResumeStore::File(path) => {
                // Written whole, then renamed: a kill mid-write leaves the previous state.
                // Named per process: agents of pods sharing a host's /tmp may write at once.
                let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
                let bytes = serde_json::to_vec(saved).map_err(|e| e.to_string())?;
                std::fs::write(&tmp, bytes)
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
        }
    }
}

/// The barrier endpoint a previous agent of this pod read from the pod, if kept.
pub fn saved_endpoint(cfg: &AgentConfig) -> Option<Endpoint> {
    cfg.resume.load(cfg)?.endpoint()
}

/// Keeps the barrier endpoint for the next agent of this pod.
pub(crate) fn save_endpoint(cfg: &AgentConfig, endpoint: &Endpoint) {
    let mut saved = cfg.resume.load(cfg).unwrap_or_else(|| Saved::fresh(cfg));
    saved.endpoint_path = Some(endpoint.path.clone());
    saved.endpoint_port = Some(endpoint.port);
    if let Err(e) = cfg.resume.save(&saved) {
        tracing::warn!(error = %e, "keeping the barrier endpoint");
    }
}

/// A change of the agent's JobSet.
#[derive(Debug)]
pub(crate) enum Change {
    Apply(Box<JobSetView>),
    Deleted,
}

/// How a watch is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// One watch with `sendInitialEvents`: the JobSet, then changes.
    StreamingList,
    /// A list, then a watch from its resourceVersion.
    List,
    /// A watch from the saved resourceVersion.
    Resume,
}

/// Why a streaming list could not be opened.
#[derive(Debug)]
enum OpenError {
    /// The server answered with this Status code (and message).
    Status(u16, String),
    /// No answer (connection, TLS, ...).
    Other(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Status(code, message) => write!(f, "{code}: {message}"),
            OpenError::Other(e) => f.write_str(e),
        }
    }
}

/// A streaming list before its `k8s.io/initial-events-end` bookmark.
struct Initial {
    /// When the agent stops waiting for the bookmark.
    deadline: tokio::time::Instant,
    /// The JobSet the initial events sent, handed out with the bookmark.
    pending: Option<Change>,
}

/// What to do with one line of a streaming list's initial events.
#[derive(Debug, PartialEq)]
enum InitialStep {
    /// Keep reading (the JobSet, if sent, is held).
    Continue,
    /// The bookmark came: the initial events are complete.
    Done,
    /// The server failed the request with this code: retry the streaming list (410, 429 and a
    /// too-large resourceVersion, as client-go's reflector does) or list and watch (others).
    Error(u16),
}

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One line of a watch stream; the object is kept as sent.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    metadata: MetaFields,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The `code` of an `ERROR` event's Status.
#[derive(Deserialize)]
struct StatusCode {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default)]
    metadata: MetaFields,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

type Lines = Pin<Box<dyn Stream<Item = std::io::Result<String>> + Send>>;

struct Source {
    client: Client,
    request: Request,
    selector: String,
    store: ResumeStore,
    saved: Saved,
    backoff: BackoffConfig,
    delays: Option<JitteredBackoff>,
    lines: Option<Lines>,
    /// The saved object, handed out first.
    first: Option<JobSetView>,
    save_failed: bool,
    /// How long a streaming list may take to its bookmark; `None`: list and watch.
    watch_list: Option<Duration>,
    /// The next start lists and watches (the last streaming list failed).
    list_once: bool,
    /// Set while `lines` is a streaming list's initial events.
    initial: Option<Initial>,
}

/// The changes of `cfg`'s JobSet, resuming from `cfg.resume` when it holds this pod's last view.
/// Errors are logged and retried with back-off; the stream does not end.
pub(crate) fn jobset_changes(cfg: &AgentConfig, client: Client) -> BoxStream<'static, Change> {
    let saved = cfg.resume.load(cfg).unwrap_or_else(|| Saved::fresh(cfg));
    let first = match (&saved.object, saved.resource_version.is_empty()) {
        (Some(raw), false) => match serde_json::from_str::<JobSetView>(raw) {
            Ok(js) => Some(js),
            Err(e) => {
                tracing::warn!(error = %e, "the saved JobSet does not parse; listing it");
                None
            }
        },
        _ => None,
    };
    let mut saved = saved;
    if first.is_none() && saved.object.is_some() {
        saved.resource_version.clear();
    }
    let source = Source {
        client,
        request: Request::new(<JobSetView as kube::Resource>::url_path(&(), Some(&cfg.namespace))),
        selector: format!("metadata.name={}", cfg.jobset_name),
        store: cfg.resume.clone(),
        saved,
        backoff: cfg.backoff,
        delays: None,
        lines: None,
        first,
        save_failed: false,
        watch_list: cfg.watch_list,
        list_once: false,
        initial: None,
    };
    futures::stream::unfold(source, |mut s| async move {
        let change = s.next().await;
        Some((change, s))
    })
    .boxed()
}

impl Source {
    async fn next(&mut self) -> Change {
        if self.first.is_some() {
            // The watch first: a server that refuses the resourceVersion outright (HTTP 410)
            // gets a list instead of the saved view.
            match self.open().await {
                Ok(lines) => self.lines = Some(lines),
                Err(e) if is_gone(&e) => {
                    tracing::info!(error = %e, "the watch cannot resume; listing the JobSet");
                    self.saved.resource_version.clear();
                    self.first = None;
                }
                Err(e) => tracing::warn!(error = %e, "watching the JobSet"),
            }
            if let Some(js) = self.first.take() {
                tracing::info!(resource_version = %self.saved.resource_version, "resuming from the JobSet as last seen");
                return Change::Apply(Box::new(js));
            }
        }
        loop {
            if self.lines.is_none() {
                let start = match (self.saved.resource_version.is_empty(), self.watch_list) {
                    (false, _) => Start::Resume,
                    (true, Some(_)) if !self.list_once => Start::StreamingList,
                    (true, _) => Start::List,
                };
                if start == Start::StreamingList {
                    self.open_streaming_list().await;
                    continue;
                }
                let listed = match start {
                    Start::List => match self.list().await {
                        Ok(listed) => listed,
                        Err(e) => {
                            self.retry_later("listing the JobSet", &e).await;
                            continue;
                        }
                    },
                    Start::Resume | Start::StreamingList => None,
                };
                self.list_once = false;
                match self.open().await {
                    Ok(lines) => self.lines = Some(lines),
                    Err(e) if is_gone(&e) => {
                        tracing::info!(error = %e, "the watch cannot resume; listing the JobSet");
                        self.saved.resource_version.clear();
                    }
                    Err(e) => self.retry_later("watching the JobSet", &e).await,
                }
                if let Some(change) = listed {
                    return change;
                }
                continue;
            }
            let lines = self.lines.as_mut().expect("opened above");
            let line = match &self.initial {
                Some(initial) => match tokio::time::timeout_at(initial.deadline, lines.next()).await {
                    Ok(line) => line,
                    Err(_) => {
                        // client-go waits for the bookmark however long it takes; a server that
                        // ignores `sendInitialEvents` never sends it.
                        tracing::info!(
                            timeout = ?self.watch_list,
                            "no initial-events-end bookmark in time (the server ignores streaming lists); listing the JobSet from now on"
                        );
                        self.watch_list = None;
                        self.end_streaming_list(false);
                        continue;
                    }
                },
                None => lines.next().await,
            };
            match line {
                // Before its bookmark (client-go: a watch-list that ends early falls back to a
                // list when it was very short, and is retried otherwise; it is always a list here,
                // so a server that keeps ending it cannot keep the agent waiting).
                None if self.initial.is_some() => {
                    tracing::info!("the streaming list ended before its initial events did; listing the JobSet");
                    self.end_streaming_list(true);
                }
                // The server ended the watch (its timeout): resume where it left off.
                None => self.lines = None,
                Some(Err(e)) => {
                    self.lines = None;
                    if self.initial.is_some() {
                        self.end_streaming_list(false);
                    }
                    self.retry_later("reading the JobSet watch", &e).await;
                }
                Some(Ok(line)) if line.trim().is_empty() => {}
                Some(Ok(line)) if self.initial.is_some() => match self.on_initial_line(&line) {
                    InitialStep::Continue => {}
                    InitialStep::Done => {
                        self.delays = None;
                        if let Some(change) = self.initial.take().and_then(|i| i.pending) {
                            return change;
                        }
                    }
                    InitialStep::Error(code) => {
                        self.end_streaming_list(!matches!(code, 410 | 429 | 504));
                        if code == 429 {
                            self.retry_later("the streaming list of the JobSet", &"429 Too Many Requests").await;
                        }
                    }
                },
                Some(Ok(line)) => {
                    if let Some(change) = self.on_line(&line) {
                        self.delays = None;
                        return change;
                    }
                }
            }
        }
    }

    /// Lists the JobSet; `Some` when it exists (to hand out once the watch is open).
    async fn list(&mut self) -> Result<Option<Change>, String> {
        // Any resourceVersion, as a fresh watcher's first list (served from the cache).
        let lp = ListParams::default().fields(&self.selector).match_any();
        let req = self.request.list(&lp).map_err(|e| e.to_string())?;
        let text = self.client.request_text(req).await.map_err(|e| e.to_string())?;
        let list: RawList<'_> = serde_json::from_str(&text).map_err(|e| format!("the JobSet list: {e}"))?;
        let raw = list.items.first().map(|o| o.get().to_owned());
        let js = raw.as_deref().map(serde_json::from_str::<JobSetView>).transpose().map_err(|e| e.to_string())?;
        self.saved.resource_version = list.metadata.resource_version.unwrap_or_default();
        self.saved.object = raw;
        self.persist();
        Ok(js.map(|js| Change::Apply(Box::new(js))))
    }

    /// Opens a streaming list (`lines` and `initial` are set), or decides what to do instead, as
    /// client-go's reflector does when its watch-list request fails (`Reflector.watchList`):
    /// 429 and no answer are retried with back-off, any other error status lists and watches.
    async fn open_streaming_list(&mut self) {
        // resourceVersion "0": any state, as the list it replaces (served from the watch cache).
        let wp = WatchParams::streaming_lists().fields(&self.selector);
        let opened = match self.request.watch(&wp, "0") {
            Ok(req) => match self.client.request_stream(req).await {
                Ok(body) => Ok(Box::pin(body.lines()) as Lines),
                Err(kube::Error::Api(s)) => Err(OpenError::Status(s.code, s.message.clone())),
                Err(e) => Err(OpenError::Other(e.to_string())),
            },
            Err(e) => Err(OpenError::Other(e.to_string())),
        };
        match opened {
            Ok(lines) => {
                let timeout = self.watch_list.unwrap_or_default();
                self.lines = Some(lines);
                self.initial = Some(Initial { deadline: tokio::time::Instant::now() + timeout, pending: None });
            }
            Err(OpenError::Status(429, m)) => self.retry_later("the streaming list of the JobSet", &m).await,
            Err(e @ OpenError::Status(..)) => {
                tracing::info!(error = %e, "the server refuses the streaming list; listing the JobSet");
                self.list_once = true;
            }
            Err(e @ OpenError::Other(_)) => self.retry_later("the streaming list of the JobSet", &e).await,
        }
    }

    /// Drops a streaming list before its bookmark; with `list_once`, the next start lists and
    /// watches.
    fn end_streaming_list(&mut self, list_once: bool) {
        self.lines = None;
        self.initial = None;
        self.list_once |= list_once;
        // The JobSet in unfinished initial events was never handed out: start afresh, not from
        // its resourceVersion.
        self.saved.resource_version.clear();
    }

    /// Handles one line of a streaming list's initial events.
    fn on_initial_line(&mut self, line: &str) -> InitialStep {
        let Ok(parsed) = serde_json::from_str::<Line<'_>>(line) else {
            tracing::warn!("an unreadable JobSet watch event");
            return InitialStep::Continue;
        };
        match parsed.kind {
            "BOOKMARK" => {
                let meta = serde_json::from_str::<Meta>(parsed.object.get()).map(|m| m.metadata).unwrap_or_default();
                let end = meta.annotations.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true");
                if let Some(rv) = meta.resource_version {
                    self.saved.resource_version = rv;
                    // A missing JobSet is saved as such (a resume point with no object).
                    if end && self.initial.as_ref().is_some_and(|i| i.pending.is_none()) {
                        self.saved.object = None;
                    }
                    if end {
                        self.save();
                    }
                }
                if end { InitialStep::Done } else { InitialStep::Continue }
            }
            "ERROR" => {
                let status: Option<StatusCode> = serde_json::from_str(parsed.object.get()).ok();
                let (code, message) = status.map_or((0, String::new()), |s| (s.code, s.message));
                tracing::info!(code, message, "the streaming list of the JobSet failed");
                InitialStep::Error(code)
            }
            _ => {
                let change = self.on_line(line);
                if let Some(initial) = self.initial.as_mut() {
                    match change {
                        Some(Change::Deleted) => initial.pending = None,
                        Some(apply) => initial.pending = Some(apply),
                        None => {}
                    }
                }
                InitialStep::Continue
            }
        }
    }

    async fn open(&mut self) -> Result<Lines, String> {
        let wp = WatchParams::default().fields(&self.selector);
        let req = self.request.watch(&wp, &self.saved.resource_version).map_err(|e| e.to_string())?;
        match self.client.request_stream(req).await {
            Ok(body) => Ok(Box::pin(body.lines())),
            Err(kube::Error::Api(s)) if s.code == 410 => Err(format!("410 Gone: {}", s.message)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Handles one watch line; `Some` for a change of the JobSet.
    fn on_line(&mut self, line: &str) -> Option<Change> {
        let parsed: Line<'_> = match serde_json::from_str(line) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "an unreadable JobSet watch event");
                return None;
            }
        };
        let rv = || serde_json::from_str::<Meta>(parsed.object.get()).ok().and_then(|m| m.metadata.resource_version);
        match parsed.kind {
            "ADDED" | "MODIFIED" => match serde_json::from_str::<JobSetView>(parsed.object.get()) {
                Ok(js) => {
                    self.saved.resource_version = js.metadata.resource_version.clone().unwrap_or_default();
                    // Only a store reads it back (at the next agent's start): without one, every
                    // agent copying every JobSet event was waste.
                    self.saved.object =
                        (!matches!(self.store, ResumeStore::Off)).then(|| parsed.object.get().to_owned());
                    self.persist();
                    Some(Change::Apply(Box::new(js)))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an unreadable JobSet");
                    None
                }
            },
            "DELETED" => {
                self.saved.resource_version = rv().unwrap_or_default();
                self.saved.object = None;
                self.persist();
                Some(Change::Deleted)
            }
            "BOOKMARK" => {
                if let Some(rv) = rv() {
                    self.saved.resource_version = rv;
                    self.persist();
                }
                None
            }
            "ERROR" => {
                let status: Option<StatusCode> = serde_json::from_str(parsed.object.get()).ok();
                let (code, message) = status.map_or((0, String::new()), |s| (s.code, s.message));
                self.lines = None;
                if code == 410 {
                    tracing::info!(message, "the watch cannot resume (410 Gone); listing the JobSet");
                    self.saved.resource_version.clear();
                } else {
                    tracing::warn!(code, message, "the JobSet watch failed; watching again");
                }
                None
            }
            other => {
                tracing::debug!(kind = other, "ignoring a JobSet watch event");
                None
            }
        }
    }

    /// Keeps the resume point; not while a streaming list's initial events come (its bookmark
    /// keeps it once, as a list does).
    fn persist(&mut self) {
        if self.initial.is_none() {
            self.save();
        }
    }

    fn save(&mut self) {
        if let Err(e) = self.store.save(&self.saved)
            && !std::mem::replace(&mut self.save_failed, true)
        {
            tracing::warn!(error = %e, "keeping the watch state (a restarted agent will list)");
        }
    }

    async fn retry_later(&mut self, what: &str, error: &(dyn std::fmt::Display + Sync)) {
        let delay = self.delays.get_or_insert_with(|| JitteredBackoff::new(self.backoff)).next_delay();
        tracing::warn!(error = %error, retry_in = ?delay, "{what}");
        tokio::time::sleep(delay).await;
    }
}

fn is_gone(e: &str) -> bool {
    e.starts_with("410 Gone")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pod: &str) -> AgentConfig {
        AgentConfig::new("ns", "train", pod)
    }

    fn saved(pod: &str, rv: &str) -> Saved {
        Saved { resource_version: rv.into(), object: Some("{}".into()), ..Saved::fresh(&cfg(pod)) }
    }

    /// Name, what the file holds (None: no file; Err: these bytes), the pod asking, the answer.
    type Case = (&'static str, Option<Result<Saved, &'static str>>, &'static str, Option<Saved>);

    #[test]
    fn a_file_store_gives_back_only_this_pods_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = ResumeStore::File(path.clone());
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("no file: list", None, "p", None),
            ("its own state", Some(Ok(saved("p", "7"))), "p", Some(saved("p", "7"))),
            ("another pod's state is ignored", Some(Ok(saved("q", "7"))), "p", None),
            ("an unreadable file is ignored", Some(Err("{not json")), "p", None),
        ];
        for (name, file, pod, want) in cases {
            let _ = std::fs::remove_file(&path);
            match file {
                Some(Ok(s)) => store.save(&s).unwrap(),
                Some(Err(bytes)) => std::fs::write(&path, bytes).unwrap(),
                None => {}
            }
            assert_eq!(store.load(&cfg(pod)), want, "{name}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["state.json"], "written through a renamed temporary file");
    }

    #[test]
    fn a_store_that_cannot_be_written_reports_it_and_off_keeps_nothing() {
        let store = ResumeStore::File("/nonexistent-dir/state.json".into());
        assert!(store.save(&saved("p", "1")).is_err());
        assert_eq!(store.load(&cfg("p")), None);
        assert_eq!(ResumeStore::Off.save(&saved("p", "1")), Ok(()));
        assert_eq!(ResumeStore::Off.load(&cfg("p")), None);
        let mem = MemoryStore::new();
        ResumeStore::Memory(mem.clone()).save(&saved("p", "3")).unwrap();
        assert_eq!(ResumeStore::Memory(mem).load(&cfg("p")), Some(saved("p", "3")));
    }

    #[test]
    fn watch_state_file_setting() {
        let cases = [
            ("unset: off (opt-in)", None, ResumeStore::Off),
            ("on: the pod's /tmp", Some("on"), ResumeStore::File("/tmp/jobset-in-place-restart-agent-p.json".into())),
            ("a path", Some("/state/agent.json"), ResumeStore::File("/state/agent.json".into())),
            ("off", Some("off"), ResumeStore::Off),
        ];
        for (name, value, want) in cases {
            let env = |k: &str| match k {
                "JOBSET_NAME" => Some("train".to_string()),
                "POD_NAME" => Some("p".to_string()),
                "NAMESPACE" => Some("ns".to_string()),
                "WATCH_STATE_FILE" => value.map(str::to_string),
                _ => None,
            };
            let got = AgentConfig::from_env(env, std::path::Path::new("/nonexistent")).unwrap().resume;
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(AgentConfig::new("ns", "train", "p").resume, ResumeStore::Off, "in-process agents opt in");
    }

    #[test]
    fn watch_list_timeout_setting() {
        let ten = Some(Duration::from_secs(10));
        /// The setting, or an error naming the variable.
        type Want = Result<Option<Duration>, ()>;
        let cases: [(&str, Option<&str>, Want); 6] = [
            ("unset: streaming lists, 10s to the bookmark", None, Ok(ten)),
            ("a duration", Some("500ms"), Ok(Some(Duration::from_millis(500)))),
            ("plain seconds", Some("3"), Ok(Some(Duration::from_secs(3)))),
            ("off: list and watch", Some("off"), Ok(None)),
            ("0: list and watch", Some("0"), Ok(None)),
            ("not a duration", Some("soon"), Err(())),
        ];
        for (name, value, want) in cases {
            let env = |k: &str| match k {
                "JOBSET_NAME" => Some("train".to_string()),
                "POD_NAME" => Some("p".to_string()),
                "NAMESPACE" => Some("ns".to_string()),
                "WATCH_LIST_TIMEOUT" => value.map(str::to_string),
                _ => None,
            };
            let got = AgentConfig::from_env(env, std::path::Path::new("/nonexistent"));
            match (got, want) {
                (Ok(c), Ok(want)) => assert_eq!(c.watch_list, want, "{name}"),
                (Err(e), Err(())) => assert!(e.to_string().contains("WATCH_LIST_TIMEOUT"), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(AgentConfig::new("ns", "train", "p").watch_list, ten, "in-process agents stream too");
    }
}
