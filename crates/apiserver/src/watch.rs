//! Watch streams: newline-delimited JSON events, filtered per watcher, never blocking writers.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::{Instant, Interval, Sleep};

use crate::error::{ApiError, Cause};
use crate::http::ApiServer;
use crate::object::Obj;
use crate::resources::ResourceDef;
use crate::store::{Event, EventType};

/// Decides which objects a watcher (or a list) sees.
pub struct Filter {
    /// The resource the objects are stored as (field selectors use its names).
    pub storage: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub labels: crate::selector::LabelSelector,
    pub fields: crate::selector::FieldSelector,
}

impl Filter {
    pub fn matches(&self, o: &Obj) -> bool {
        self.namespace.as_ref().is_none_or(|ns| &o.namespace == ns)
            && self.labels.matches(&o.labels)
            && self.fields.matches(|f| o.field(&self.storage, f))
    }
}

/// How each event's object is rendered (plain, or as a one-row Table for kubectl).
pub type Render = Box<dyn Fn(&ResourceDef, &Obj) -> Bytes + Send + Sync>;

pub struct WatchStream {
    pub server: Arc<ApiServer>,
    /// The resource as the client asked for it (what events are rendered as).
    pub def: Arc<ResourceDef>,
    pub filter: Filter,
    pub replay: VecDeque<Arc<Event>>,
    pub rx: broadcast::Receiver<Arc<Event>>,
    /// Live events at or below this were covered by the replay.
    pub start_rv: u64,
    /// The watch's end (`timeoutSeconds`): one timer for the stream's life, not one per event.
    pub deadline: Pin<Box<Sleep>>,
    pub bookmarks: Option<Interval>,
    pub render: Render,
    pub done: bool,
    /// A watch-list's end of the initial events: once the replay is sent, a bookmark at this
    /// resourceVersion annotated `k8s.io/initial-events-end: "true"`.
    pub end_bookmark: Option<u64>,
}

fn line(kind: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

pub fn error_line(e: &ApiError) -> Bytes {
    line("ERROR", &serde_json::to_vec(&e.status_json()).unwrap_or_default())
}

impl WatchStream {
    /// The event as this watcher sees it: label/field transitions turn into ADDED or DELETED.
    fn view(&self, ev: &Event) -> Option<Bytes> {
        let now = self.filter.matches(&ev.obj);
        let before = ev.prev.as_ref().map(|p| self.filter.matches(p));
        let kind = match (ev.kind, now, before) {
            (EventType::Deleted, true, _) => EventType::Deleted,
            (EventType::Deleted, false, _) => return None,
            (EventType::Added, true, _) => EventType::Added,
            (EventType::Modified, true, Some(true)) => EventType::Modified,
            (EventType::Modified, true, _) => EventType::Added,
            (EventType::Modified, false, Some(true)) => EventType::Deleted,
            _ => return None,
        };
        Some(line(kind.as_str(), &(self.render)(&self.def, &ev.obj)))
    }

    fn bookmark(&self) -> Option<Bytes> {
        let rv = self.server.store.bookmark_rv(&self.rx)?;
        let obj = serde_json::json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": {"resourceVersion": rv.to_string()}});
        Some(line("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default()))
    }

    /// The bookmark that ends a watch-list's initial events (kube-apiserver's cacher: an empty
    /// object of the kind at the snapshot's resourceVersion, annotated by
    /// `storage.AnnotateInitialEventsEndBookmark`).
    fn initial_events_end(&self, rv: u64) -> Bytes {
        let obj = serde_json::json!({
            "kind": self.def.kind,
            "apiVersion": self.def.api_version(),
            "metadata": {"resourceVersion": rv.to_string(), "annotations": {INITIAL_EVENTS_END: "true"}},
        });
        line("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default())
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(ev) = self.replay.pop_front() {
                if let Some(l) = self.view(&ev) {
                    return Some(l);
                }
                continue;
            }
            if let Some(rv) = self.end_bookmark.take() {
                return Some(self.initial_events_end(rv));
            }
            if self.done {
                return None;
            }
            let tick = async {
                match self.bookmarks.as_mut() {
                    Some(i) => i.tick().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.deadline.as_mut() => return None,
                _ = tick => {
                    if let Some(b) = self.bookmark() {
                        return Some(b);
                    }
                }
                r = self.rx.recv() => match r {
                    Ok(ev) if ev.rv <= self.start_rv => {}
                    Ok(ev) => {
                        if let Some(l) = self.view(&ev) {
                            return Some(l);
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        // The watcher fell too far behind: it must relist, as after a compaction.
                        self.done = true;
                        return Some(error_line(&ApiError::gone(format!(
                            "too old resource version: watcher fell {n} events behind"
                        ))));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }

    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        futures::stream::unfold(self, |mut st| async move { st.next_chunk().await.map(|c| (Ok(c), st)) })
    }
}

pub fn bookmark_interval(d: Duration) -> Interval {
    let mut i = tokio::time::interval_at(Instant::now() + d, d);
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

/// The annotation of the bookmark that ends a watch-list's initial events
/// (`metav1.InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// `metav1.ResourceVersionMatchNotOlderThan` and `metav1.ResourceVersionMatchExact`.
pub const NOT_OLDER_THAN: &str = "NotOlderThan";
pub const EXACT: &str = "Exact";

/// The fields of `metav1.ListOptions` that decide what a collection GET (list or watch) serves,
/// as kube-apiserver decodes them from the query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    pub watch: bool,
    /// `resourceVersion`; empty when not given.
    pub resource_version: String,
    /// `resourceVersionMatch`; empty when not given.
    pub resource_version_match: String,
    pub send_initial_events: Option<bool>,
    pub allow_watch_bookmarks: bool,
    /// `continue`; empty when not given.
    pub continue_token: String,
}

/// A boolean query parameter as kube-apiserver's parameter codec reads it
/// (`runtime.Convert_Slice_string_To_bool`): anything but `0` and `false` (any case) is true.
fn query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

impl ListOptions {
    /// The options of a query; `watch` is whether the request is a watch.
    pub fn from_query(q: &std::collections::HashMap<String, String>, watch: bool) -> ListOptions {
        let text = |k: &str| q.get(k).cloned().unwrap_or_default();
        ListOptions {
            watch,
            resource_version: text("resourceVersion"),
            resource_version_match: text("resourceVersionMatch"),
            send_initial_events: q.get("sendInitialEvents").map(|v| query_bool(v)),
            allow_watch_bookmarks: q.get("allowWatchBookmarks").is_some_and(|v| query_bool(v)),
            continue_token: text("continue"),
        }
    }

    /// `internalversion.SetListOptionsDefaults`: with the WatchList feature, a watch from
    /// resourceVersion "" or "0" that sets neither `sendInitialEvents` nor
    /// `resourceVersionMatch` is a watch-list (its initial events end with a bookmark when it
    /// allows bookmarks).
    pub fn set_defaults(&mut self, watch_list: bool) {
        if !watch_list || self.send_initial_events.is_some() || !self.resource_version_match.is_empty() {
            return;
        }
        if self.watch && (self.resource_version.is_empty() || self.resource_version == "0") {
            self.send_initial_events = Some(true);
            self.resource_version_match = NOT_OLDER_THAN.into();
        }
    }

    /// `validation.ValidateListOptions`, word for word.
    pub fn validate(&self, watch_list: bool) -> Vec<Cause> {
        let m = self.resource_version_match.as_str();
        let mut errs = vec![];
        if self.watch {
            if self.send_initial_events.is_some() {
                if m != NOT_OLDER_THAN {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        &format!("sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"),
                    ));
                }
                if !watch_list {
                    errs.push(Cause::forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                    ));
                }
            }
            if !m.is_empty() {
                if self.send_initial_events.is_none() {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != NOT_OLDER_THAN {
                    errs.push(not_supported("resourceVersionMatch", m, &[NOT_OLDER_THAN]));
                }
                if !self.continue_token.is_empty() {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return errs;
        }
        if !m.is_empty() {
            if self.resource_version.is_empty() {
                errs.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !self.continue_token.is_empty() {
                errs.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != EXACT && m != NOT_OLDER_THAN {
                errs.push(not_supported("resourceVersionMatch", m, &[EXACT, NOT_OLDER_THAN, ""]));
            }
            if m == EXACT && self.resource_version == "0" {
                errs.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(Cause::forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
        }
        errs
    }

    /// What `listOpts` answers: defaults set, then the validation as one 422
    /// (`ListOptions.meta.k8s.io "" is invalid: ...`).
    pub fn checked(mut self, watch_list: bool) -> Result<ListOptions, ApiError> {
        self.set_defaults(watch_list);
        let errs = self.validate(watch_list);
        if errs.is_empty() { Ok(self) } else { Err(ApiError::invalid_kind("meta.k8s.io", "ListOptions", "", errs)) }
    }

    /// The resourceVersion as a number ("" is `None`).
    pub fn parsed_rv(&self) -> Result<Option<u64>, ApiError> {
        match self.resource_version.as_str() {
            "" => Ok(None),
            rv => rv
                .parse::<u64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}"))),
        }
    }

    /// Where a watch starts (kube-apiserver's `Cacher.Watch`: `getWatchCacheResourceVersion`,
    /// `getAllEventsSinceLocked`, `setInitialEventsEndBookmarkIfRequested`).
    pub fn watch_plan(&self, rv: Option<u64>) -> WatchPlan {
        let rv = rv.filter(|&n| n > 0);
        match (self.send_initial_events, rv) {
            // The current state whatever the resourceVersion (not older than it: the watch
            // cache waits until it has caught up; an old one is no error).
            (Some(true), _) => {
                WatchPlan { start: WatchFrom::Initial, min_rv: rv, end_bookmark: self.allow_watch_bookmarks }
            }
            (Some(false), None) => WatchPlan { start: WatchFrom::Now, min_rv: None, end_bookmark: false },
            // Legacy "" and "0": the current state first (kept for compatibility), no bookmark.
            (None, None) => WatchPlan { start: WatchFrom::Initial, min_rv: None, end_bookmark: false },
            (_, Some(n)) => WatchPlan { start: WatchFrom::After(n), min_rv: None, end_bookmark: false },
        }
    }
}

/// `field.NotSupported`: the bad value rendered as Go's `json.Marshal` renders a string type.
fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let rendered = serde_json::to_string(value)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!("Unsupported value: {rendered}: supported values: {}", supported.join(", ")),
    }
}

/// Where a watch's events start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// An ADDED event per current object, then the changes after them.
    Initial,
    /// The changes from now on.
    Now,
    /// The changes after this resourceVersion (410 once it is compacted away).
    After(u64),
}

/// How a watch is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchPlan {
    pub start: WatchFrom,
    /// The store must have reached this resourceVersion first (`NotOlderThan`).
    pub min_rv: Option<u64>,
    /// The initial events end with the `k8s.io/initial-events-end` bookmark.
    pub end_bookmark: bool,
}

/// How a list is served (kube-apiserver: `storage.ValidateListOptions` and the cacher's
/// delegation to etcd for exact resourceVersions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListAt {
    /// The current state ("" is a consistent read, "0" any state; the store's is both).
    Current,
    /// Not older than this resourceVersion: the current state once the store has reached it.
    NotOlderThan(u64),
    /// Exactly this resourceVersion.
    Exact(u64),
}

impl ListOptions {
    /// How a list with these options (and `limit`, 0 for none) is served.
    pub fn list_at(&self, rv: Option<u64>, limit: usize) -> Result<ListAt, ApiError> {
        // `storage.ValidateListOptions`: a continue token carries its own resourceVersion.
        if !self.continue_token.is_empty() {
            if !self.resource_version.is_empty() && self.resource_version != "0" {
                return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
            }
            return Ok(ListAt::Current);
        }
        let Some(n) = rv.filter(|&n| n > 0) else { return Ok(ListAt::Current) };
        Ok(match self.resource_version_match.as_str() {
            EXACT => ListAt::Exact(n),
            // The legacy exact match: a resourceVersion with a limit.
            "" if limit > 0 => ListAt::Exact(n),
            _ => ListAt::NotOlderThan(n),
        })
    }
}

/// `storage.NewTooLargeResourceVersionError`: 504, asking to retry after `retry_after_seconds`
/// (the watch cache says 1; etcd, for an exact read, 0, which is left out).
pub fn too_large_resource_version(requested: u64, current: u64, retry_after_seconds: u32) -> ApiError {
    let mut details = serde_json::json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
    });
    if retry_after_seconds > 0 {
        details["retryAfterSeconds"] = serde_json::json!(retry_after_seconds);
    }
    ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("Timeout: Too large resource version: {requested}, current: {current}"),
        details: Some(details),
    }
}

/// etcd's answer to a list at a compacted resourceVersion (`etcd3/errors.go`).
pub fn list_too_old() -> ApiError {
    ApiError::gone("The resourceVersion for the provided list is too old.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(query: &str, watch: bool) -> ListOptions {
        let q = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        ListOptions::from_query(&q, watch)
    }

    #[test]
    fn boolean_parameters_are_read_as_kube_apiservers_parameter_codec_reads_them() {
        for (value, want) in [("true", true), ("1", true), ("yes", true), ("", true), ("0", false), ("False", false)] {
            let o = opts(&format!("sendInitialEvents={value}&allowWatchBookmarks={value}"), true);
            assert_eq!((o.send_initial_events, o.allow_watch_bookmarks), (Some(want), want), "{value:?}");
        }
        assert_eq!(opts("", true).send_initial_events, None, "absent is unset");
    }

    #[test]
    fn where_a_watch_starts() {
        let initial = |end_bookmark, min_rv| WatchPlan { start: WatchFrom::Initial, min_rv, end_bookmark };
        let plain = |start| WatchPlan { start, min_rv: None, end_bookmark: false };
        let list_watch = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
        #[rustfmt::skip]
        let cases = [
            ("watch-list from \"\"", format!("{list_watch}&resourceVersion="), true, initial(true, None)),
            ("watch-list from 0", format!("{list_watch}&resourceVersion=0"), true, initial(true, None)),
            ("watch-list not older than 7", format!("{list_watch}&resourceVersion=7"), true, initial(true, Some(7))),
            ("initial events without bookmarks", "sendInitialEvents=true&resourceVersionMatch=NotOlderThan".into(), true, initial(false, None)),
            ("no initial events from \"\"", "sendInitialEvents=false&resourceVersionMatch=NotOlderThan".into(), true, plain(WatchFrom::Now)),
            ("no initial events from 0", "sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=0".into(), true, plain(WatchFrom::Now)),
            ("no initial events after 7", "sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=7".into(), true, plain(WatchFrom::After(7))),
            ("legacy from 0, gate on: defaulted", "allowWatchBookmarks=true&resourceVersion=0".into(), true, initial(true, None)),
            ("legacy from \"\", gate off", "allowWatchBookmarks=true".into(), false, initial(false, None)),
            ("legacy after 7", "allowWatchBookmarks=true&resourceVersion=7".into(), true, plain(WatchFrom::After(7))),
        ];
        for (name, query, gate, want) in cases {
            let o = opts(&query, true).checked(gate).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(o.watch_plan(o.parsed_rv().unwrap()), want, "{name}");
        }
    }

    #[test]
    fn how_a_list_is_served() {
        #[rustfmt::skip]
        let cases = [
            ("no resourceVersion: consistent", "", 0, Ok(ListAt::Current)),
            ("0: any", "resourceVersion=0", 0, Ok(ListAt::Current)),
            ("0 with a limit", "resourceVersion=0", 10, Ok(ListAt::Current)),
            ("legacy 7: not older than", "resourceVersion=7", 0, Ok(ListAt::NotOlderThan(7))),
            ("legacy 7 with a limit: exact", "resourceVersion=7", 10, Ok(ListAt::Exact(7))),
            ("NotOlderThan 7 with a limit", "resourceVersion=7&resourceVersionMatch=NotOlderThan", 10, Ok(ListAt::NotOlderThan(7))),
            ("Exact 7", "resourceVersion=7&resourceVersionMatch=Exact", 0, Ok(ListAt::Exact(7))),
            ("continue: its own", "continue=abc&resourceVersion=0", 10, Ok(ListAt::Current)),
            ("continue with a resourceVersion", "continue=abc&resourceVersion=7", 10, Err(400)),
        ];
        for (name, query, limit, want) in cases {
            let o = opts(query, false);
            let got = o.list_at(o.parsed_rv().unwrap(), limit).map_err(|e| e.code);
            assert_eq!(got, want, "{name}");
        }
    }
}
