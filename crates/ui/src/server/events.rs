//! The live view's server-sent events, driven by kube watches: `ready` once every watch has
//! listed (the page refreshes then, catching what changed before; its data the kinds watched),
//! then `change` (its data the kinds that changed, e.g. `JobSet,Pod`) for the changes of each
//! debounce window.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use jobset_api::appwrapper::AppWrapper;
use jobset_api::jobset::keys;
use jobset_api::jobset::types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

/// Which objects a page shows: everything (the overview), or one JobSet's.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Scope {
    pub namespace: Option<String>,
    pub jobset: Option<String>,
}

/// What a watch saw.
#[derive(Debug, PartialEq)]
enum Seen {
    /// Its (re)list is done.
    Listed,
    /// An object was added, modified or deleted.
    Changed,
    /// Listing or watching failed (it is retried with back-off).
    Failed(String),
}

type Watches = SelectAll<BoxStream<'static, (&'static str, Seen)>>;

fn watch<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, (&'static str, Seen)>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind: &'static str = match K::kind(&()) {
        std::borrow::Cow::Borrowed(k) => k,
        std::borrow::Cow::Owned(_) => "object",
    };
    watcher(api, config)
        .default_backoff()
        .filter_map(move |e| async move {
            let seen = match e {
                Ok(watcher::Event::InitDone) => Seen::Listed,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Seen::Changed,
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => return None,
                Err(e) => Seen::Failed(e.to_string()),
            };
            Some((kind, seen))
        })
        .boxed()
}

/// The watches of a scope: its JobSets, Jobs and pods (those of JobSets only), and on the
/// overview AppWrappers too.
fn watches(client: &Client, scope: &Scope) -> Watches {
    let in_scope = |config: watcher::Config| match &scope.jobset {
        Some(name) => config.labels(&format!("{}={name}", keys::JOBSET_NAME)),
        None => config.labels(keys::JOBSET_NAME),
    };
    let mut all = SelectAll::new();
    match &scope.namespace {
        Some(ns) => {
            let jobsets = match &scope.jobset {
                Some(name) => watcher::Config::default().fields(&format!("metadata.name={name}")),
                None => watcher::Config::default(),
            };
            all.push(watch(Api::<JobSet>::namespaced(client.clone(), ns), jobsets));
            all.push(watch(Api::<Job>::namespaced(client.clone(), ns), in_scope(watcher::Config::default())));
            all.push(watch(Api::<Pod>::namespaced(client.clone(), ns), in_scope(watcher::Config::default())));
            if scope.jobset.is_none() {
                all.push(watch(Api::<AppWrapper>::namespaced(client.clone(), ns), watcher::Config::default()));
            }
        }
        None => {
            all.push(watch(Api::<JobSet>::all(client.clone()), watcher::Config::default()));
            all.push(watch(Api::<Job>::all(client.clone()), in_scope(watcher::Config::default())));
            all.push(watch(Api::<Pod>::all(client.clone()), in_scope(watcher::Config::default())));
            all.push(watch(Api::<AppWrapper>::all(client.clone()), watcher::Config::default()));
        }
    }
    all
}

/// The event stream of a page: `ready`, then a `change` per debounce window with changes.
pub fn stream(
    client: &Client,
    scope: &Scope,
    debounce: Duration,
    keep_alive: Duration,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let watches = watches(client, scope);
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(pump(watches, debounce, tx));
    Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::new().interval(keep_alive))
}

/// The decision of one watch report: whether the page is now ready (every watch listed or
/// failed once: a kind the cluster lacks must not hold the page back), and whether the report
/// is a change (a re-list after the first one is: changes may have been missed).
#[derive(Debug, Default)]
struct Tally {
    settled: BTreeSet<&'static str>,
    listed: BTreeSet<&'static str>,
}

impl Tally {
    /// Takes a report of `kind`; returns (became ready, is a change).
    fn see(&mut self, kind: &'static str, seen: &Seen, watches: usize) -> (bool, bool) {
        let was_ready = self.settled.len() == watches;
        let change = match seen {
            Seen::Changed => true,
            Seen::Listed => !self.listed.insert(kind),
            Seen::Failed(_) => false,
        };
        self.settled.insert(kind);
        (!was_ready && self.settled.len() == watches, change && was_ready)
    }
}

/// Sends the events of `watches` to `tx` until the page goes away (or the watches end).
async fn pump(mut watches: Watches, debounce: Duration, tx: mpsc::Sender<Event>) {
    let count = watches.len();
    let mut tally = Tally::default();
    let mut changed: BTreeSet<&'static str> = BTreeSet::new();
    let mut flush_at: Option<Instant> = None;
    loop {
        let flush = async {
            match flush_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tx.closed() => return,
            _ = flush => {
                let kinds: Vec<&str> = std::mem::take(&mut changed).into_iter().collect();
                flush_at = None;
                if tx.send(Event::default().event("change").data(kinds.join(","))).await.is_err() {
                    return;
                }
            }
            next = watches.next() => {
                let Some((kind, seen)) = next else { return };
                if let Seen::Failed(e) = &seen {
                    tracing::debug!(kind, error = %e, "web view watch failed (retried)");
                }
                let (ready, change) = tally.see(kind, &seen, count);
                // Its data names the kinds watched: a browser drops an event without data.
                let kinds: Vec<&str> = tally.settled.iter().copied().collect();
                if ready && tx.send(Event::default().event("ready").data(kinds.join(","))).await.is_err() {
                    return;
                }
                if change {
                    changed.insert(kind);
                    flush_at.get_or_insert_with(|| Instant::now() + debounce);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_watch_listed_or_failed_and_changes_count_only_after() {
        let mut t = Tally::default();
        assert_eq!(t.see("JobSet", &Seen::Listed, 3), (false, false));
        assert_eq!(
            t.see("JobSet", &Seen::Changed, 3),
            (false, false),
            "before ready the page is refreshed by ready itself"
        );
        assert_eq!(t.see("Pod", &Seen::Failed("forbidden".into()), 3), (false, false));
        assert_eq!(t.see("Job", &Seen::Listed, 3), (true, false), "the last watch settled");
        assert_eq!(t.see("Job", &Seen::Changed, 3), (false, true));
        assert_eq!(t.see("Pod", &Seen::Listed, 3), (false, false), "a first list after a failure is no change");
        assert_eq!(t.see("JobSet", &Seen::Listed, 3), (false, true), "a re-list may hide missed changes");
        assert_eq!(t.see("Pod", &Seen::Failed("gone".into()), 3), (false, false));
    }
}
