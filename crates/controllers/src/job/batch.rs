//! Upstream's Job sync batching: kube-controller-manager's Job controller enqueues a Job for its
//! pod events (creation, update, deletion) with `enqueueSyncJobBatched`, a workqueue
//! `AddAfter(key, syncJobBatchPeriod)` (1 s), and a key already waiting is not added again. So a
//! Job whose thousands of pods change at once syncs once, a period after the first change, and
//! sees them all; a Job that is created, deleted or whose spec changes syncs at once.

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Duration;

use futures::stream::{self, Stream, StreamExt};
use tokio_util::time::DelayQueue;

/// When a trigger syncs its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger<K> {
    /// At once (upstream's `enqueueSyncJobImmediately`: a Job created, deleted or its spec
    /// changed); a batched trigger of the key already waiting still comes.
    Now(K),
    /// A period after it arrived, folded into one of the key already waiting
    /// (`enqueueSyncJobBatched`: pod events, a Job's status updates).
    Batched(K),
}

/// `triggers` as each says (see [`Trigger`]). A zero period passes every trigger on at once.
pub fn batched<K, S>(triggers: S, period: Duration) -> stream::BoxStream<'static, K>
where
    K: Clone + Eq + Hash + Send + 'static,
    S: Stream<Item = Trigger<K>> + Send + 'static,
{
    if period.is_zero() {
        return triggers.map(|(Trigger::Now(k) | Trigger::Batched(k))| k).boxed();
    }
    struct State<S, K> {
        input: Option<S>,
        waiting: DelayQueue<K>,
        keys: HashSet<K>,
    }
    let start = State { input: Some(Box::pin(triggers)), waiting: DelayQueue::new(), keys: HashSet::new() };
    stream::unfold(start, move |mut s| async move {
        loop {
            // The input is read as it comes (its consumer keeps its caches current); only the
            // triggers wait.
            let next = match s.input.as_mut() {
                Some(input) => tokio::select! {
                    biased;
                    k = input.next() => Some(k),
                    Some(expired) = futures::future::poll_fn(|cx| s.waiting.poll_expired(cx)), if !s.keys.is_empty() => {
                        let k = expired.into_inner();
                        s.keys.remove(&k);
                        return Some((k, s));
                    }
                },
                None => None,
            };
            match next {
                Some(Some(Trigger::Now(k))) => return Some((k, s)),
                Some(Some(Trigger::Batched(k))) => {
                    if s.keys.insert(k.clone()) {
                        s.waiting.insert(k, period);
                    }
                }
                // The input ended: what waits is still delivered, then the stream ends.
                Some(None) => s.input = None,
                None => {
                    let expired = futures::future::poll_fn(|cx| s.waiting.poll_expired(cx)).await?;
                    let k = expired.into_inner();
                    s.keys.remove(&k);
                    return Some((k, s));
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio::time::Instant;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    /// The triggers received by `at` (ms after the start), with when each came out.
    async fn run(period_ms: u64, sends: &[(u64, Trigger<&'static str>)]) -> Vec<(u64, &'static str)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = batched(UnboundedReceiverStream::new(rx), Duration::from_millis(period_ms));
        let start = Instant::now();
        let sends = sends.to_vec();
        tokio::spawn(async move {
            for (at, k) in sends {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                tx.send(k).unwrap();
            }
        });
        let mut got = vec![];
        while let Some(k) = out.next().await {
            got.push((start.elapsed().as_millis() as u64, k));
        }
        got
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_for_one_key_within_a_period_sync_once_a_period_after_the_first() {
        use Trigger::{Batched as B, Now as N};
        // (case, period, triggers sent (ms, trigger), syncs (ms, key))
        type Case<'a> = (&'a str, u64, &'a [(u64, Trigger<&'a str>)], &'a [(u64, &'a str)]);
        let cases: [Case; 7] = [
            ("one trigger waits a period", 1000, &[(0, B("a"))], &[(1000, "a")]),
            ("a burst for one key is one sync", 1000, &[(0, B("a")), (10, B("a")), (999, B("a"))], &[(1000, "a")]),
            (
                "keys wait each on its own",
                1000,
                &[(0, B("a")), (300, B("b")), (400, B("a"))],
                &[(1000, "a"), (1300, "b")],
            ),
            ("a trigger after the sync waits again", 1000, &[(0, B("a")), (1500, B("a"))], &[(1000, "a"), (2500, "a")]),
            ("an immediate trigger syncs at once", 1000, &[(0, N("a")), (10, N("a"))], &[(0, "a"), (10, "a")]),
            (
                "an immediate trigger leaves the waiting one",
                1000,
                &[(0, B("a")), (10, N("a"))],
                &[(10, "a"), (1000, "a")],
            ),
            ("a zero period passes every trigger at once", 0, &[(0, B("a")), (10, B("a"))], &[(0, "a"), (10, "a")]),
        ];
        for (case, period, sends, want) in cases {
            assert_eq!(run(period, sends).await, want.to_vec(), "{case}");
        }
    }
}
