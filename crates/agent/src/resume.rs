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

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

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

/// How a watch was opened, for tests and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    List,
    Resume,
}

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
                let start = if self.saved.resource_version.is_empty() { Start::List } else { Start::Resume };
                let listed = match start {
                    Start::List => match self.list().await {
                        Ok(listed) => listed,
                        Err(e) => {
                            self.retry_later("listing the JobSet", &e).await;
                            continue;
                        }
                    },
                    Start::Resume => None,
                };
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
            let line = self.lines.as_mut().expect("opened above").next().await;
            match line {
                // The server ended the watch (its timeout): resume where it left off.
                None => self.lines = None,
                Some(Err(e)) => {
                    self.lines = None;
                    self.retry_later("reading the JobSet watch", &e).await;
                }
                Some(Ok(line)) if line.trim().is_empty() => {}
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
                    self.saved.object = Some(parsed.object.get().to_owned());
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

    fn persist(&mut self) {
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
}
