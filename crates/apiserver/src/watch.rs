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

use crate::error::ApiError;
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

    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(ev) = self.replay.pop_front() {
                if let Some(l) = self.view(&ev) {
                    return Some(l);
                }
                continue;
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
