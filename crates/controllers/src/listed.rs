//! Whether a watch's first list is complete, for any number of waiting tasks.
//!
//! kube-runtime's `Store::wait_until_ready` wakes only the last of the tasks waiting on it at
//! once: its `DelayedInit` polls one futures oneshot receiver, which keeps a single waker. A
//! `Controller` waits on its own store before its first reconcile, so a second task waiting on
//! that store (the Job controller's orphan sweep, a `/readyz` report) could sleep forever, or take
//! the controller's wake-up. It did: 1 run in about 100 of the orphan-sweep test under load.
//! Those second waiters read a [`Listed`] instead.

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::watch;

/// Told once the first `InitDone` of a watch has gone past.
#[derive(Clone)]
pub struct Listed(watch::Receiver<bool>);

impl Listed {
    /// Waits for the first complete list; `false` if the watch stream was dropped before it.
    pub async fn wait(&self) -> bool {
        self.0.clone().wait_for(|listed| *listed).await.is_ok()
    }
}

/// `events` unchanged, and a [`Listed`] told as the first `InitDone` passes: put after a
/// reflector, its store already holds the list when the waiters wake.
pub fn track<K, S>(events: S) -> (impl Stream<Item = S::Item> + Send + 'static, Listed)
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let (tx, rx) = watch::channel(false);
    let events = events.inspect(move |ev| {
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            tx.send_if_modified(|listed| !std::mem::replace(listed, true));
        }
    });
    (events, Listed(rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    type Ev = Result<watcher::Event<()>, watcher::Error>;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_task_waiting_wakes_when_the_first_list_completes() {
        let (tx, rx) = mpsc::unbounded_channel::<Ev>();
        let (events, listed) = track(UnboundedReceiverStream::new(rx));
        let drain = tokio::spawn(events.for_each(|_| async {}));
        // Waiting at once, as a controller's runner and a sweep do (each registered before the
        // list completes).
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                tokio::spawn({
                    let l = listed.clone();
                    async move { l.wait().await }
                })
            })
            .collect();
        tokio::task::yield_now().await;
        for ev in [watcher::Event::Init, watcher::Event::InitApply(()), watcher::Event::InitDone] {
            tx.send(Ok(ev)).unwrap();
        }
        for w in waiters {
            let woke = tokio::time::timeout(Duration::from_secs(5), w).await;
            assert!(matches!(woke, Ok(Ok(true))), "a waiter was not woken: {woke:?}");
        }
        // A later relist changes nothing; a late waiter returns at once.
        tx.send(Ok(watcher::Event::Init)).unwrap();
        assert!(tokio::time::timeout(Duration::from_secs(5), listed.wait()).await.unwrap());
        drop(tx);
        drain.await.unwrap();
    }

    #[tokio::test]
    async fn a_watch_dropped_before_its_first_list_releases_the_waiters_with_false() {
        let (tx, rx) = mpsc::unbounded_channel::<Ev>();
        let (events, listed) = track(UnboundedReceiverStream::new(rx));
        tx.send(Ok(watcher::Event::Init)).unwrap();
        drop(tx);
        events.for_each(|_| async {}).await;
        assert!(!listed.wait().await);
    }
}
