//! Fair queuing within one priority level, as kube-apiserver's `fairqueuing/queueset` and
//! `shufflesharding` packages do it: a flow's requests go to the shortest of the queues of its
//! hand (shuffle sharding), and a free seat goes to the head of the queue whose virtual finish
//! time is least (Fair Queuing for Server Requests). Pure: the caller passes the time.

use std::collections::VecDeque;

/// What kube-apiserver assumes a request takes before it knows (`estimatedServiceDuration`):
/// a dispatch charges its queue this many seat-seconds per seat, corrected when it finishes.
pub const ESTIMATED_SERVICE_SECONDS: f64 = 0.003;

/// The most bits of a flow's hash a hand may use (`shufflesharding.MaxHashBits`).
const MAX_HASH_BITS: f64 = 60.0;

/// The largest hand (what the dealer's fixed buffer holds).
pub const MAX_HAND_SIZE: usize = 15;

/// Deals a hand of distinct queue indices from a flow's hash (`shufflesharding.Dealer`).
#[derive(Debug, Clone)]
pub struct Dealer {
    deck_size: usize,
    hand_size: usize,
}

impl Dealer {
    /// A dealer of `hand_size` cards from `deck_size`, refused as upstream refuses it.
    pub fn new(deck_size: usize, hand_size: usize) -> Result<Dealer, String> {
        if deck_size == 0 || hand_size == 0 || hand_size > deck_size || hand_size > MAX_HAND_SIZE {
            return Err(format!("bad hand size {hand_size} for a deck of {deck_size}"));
        }
        let bits = ((deck_size as f64).log2() * hand_size as f64).ceil();
        if bits > MAX_HASH_BITS {
            return Err(format!(
                "required entropy bits of deckSize {deck_size} and handSize {hand_size} should not be greater than {MAX_HASH_BITS}"
            ));
        }
        Ok(Dealer { deck_size, hand_size })
    }

    /// The hand of `hash`: each card is the remainder of a mixed-radix digit of the hash,
    /// shifted past the cards dealt before it, so the cards are distinct.
    pub fn deal(&self, mut hash: u64) -> ([usize; MAX_HAND_SIZE], usize) {
        let mut remainders = [0usize; MAX_HAND_SIZE];
        for (i, r) in remainders.iter_mut().enumerate().take(self.hand_size) {
            let radix = (self.deck_size - i) as u64;
            *r = (hash % radix) as usize;
            hash /= radix;
        }
        let mut hand = [0usize; MAX_HAND_SIZE];
        for i in 0..self.hand_size {
            let mut card = remainders[i];
            for j in (1..=i).rev() {
                if card >= remainders[j - 1] {
                    card += 1;
                }
            }
            hand[i] = card;
        }
        (hand, self.hand_size)
    }
}

/// A level's queues (`limitResponse.queuing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queuing {
    pub queues: usize,
    pub hand_size: usize,
    pub queue_length_limit: usize,
}

/// Why a request was refused, as the `reason` label of `apiserver_flowcontrol_rejected_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Every seat taken and the chosen queue at its length limit.
    QueueFull,
    /// A level without queues (`Reject`) with every seat taken.
    ConcurrencyLimit,
    /// Waited in its queue longer than the wait limit.
    TimeOut,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue-full",
            Reason::ConcurrencyLimit => "concurrency-limit",
            Reason::TimeOut => "time-out",
        }
    }
}

/// What became of an arriving request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Seated at once (from `queue`, or without one in a level that does not queue).
    Executing {
        queue: Option<usize>,
    },
    /// Waiting in `queue` until a [`Dispatch`] names it.
    Queued {
        queue: usize,
    },
    Rejected(Reason),
}

/// A waiting request given its seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    pub id: u64,
    pub queue: usize,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    id: u64,
    seats: usize,
    arrival_r: f64,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    waiting_seats: usize,
    /// The virtual time at which the queue's next request starts (`nextDispatchR`).
    next_dispatch_r: f64,
    seats_in_use: usize,
    executing: usize,
}

impl Queue {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }
}

/// One priority level's seats and queues.
#[derive(Debug)]
pub struct QueueSet {
    concurrency_limit: usize,
    queuing: Option<Queuing>,
    dealer: Option<Dealer>,
    queues: Vec<Queue>,
    /// Seat-seconds handed to each non-empty queue so far (the progress meter R).
    current_r: f64,
    last_time: f64,
    /// The queue dispatched from last; the search for the next starts after it.
    robin_index: usize,
    enqueues: usize,
    seats_in_use: usize,
    waiting: usize,
    executing: usize,
}

impl QueueSet {
    /// A level of `concurrency_limit` seats; without `queuing` a request finding no free seat is
    /// refused at once (`limitResponse.type: Reject`).
    pub fn new(concurrency_limit: usize, queuing: Option<Queuing>) -> Result<QueueSet, String> {
        let dealer = queuing.map(|q| Dealer::new(q.queues, q.hand_size)).transpose()?;
        let queues = (0..queuing.map_or(0, |q| q.queues)).map(|_| Queue::default()).collect();
        Ok(QueueSet {
            concurrency_limit,
            queuing,
            dealer,
            queues,
            current_r: 0.0,
            last_time: 0.0,
            robin_index: 0,
            enqueues: 0,
            seats_in_use: 0,
            waiting: 0,
            executing: 0,
        })
    }

    pub fn concurrency_limit(&self) -> usize {
        self.concurrency_limit
    }

    pub fn seats_in_use(&self) -> usize {
        self.seats_in_use
    }

    /// Requests waiting in the queues.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    pub fn executing(&self) -> usize {
        self.executing
    }

    /// Requests waiting in queue `q`.
    pub fn queue_length(&self, q: usize) -> usize {
        self.queues.get(q).map_or(0, |q| q.waiting.len())
    }

    /// Advances R by the time since the last event at the rate each active queue is served.
    fn sync_time(&mut self, now: f64) {
        let elapsed = (now - self.last_time).max(0.0);
        self.last_time = self.last_time.max(now);
        self.current_r += self.virtual_time_ratio() * elapsed;
    }

    fn virtual_time_ratio(&self) -> f64 {
        let (mut active, mut requested) = (0usize, 0usize);
        for q in &self.queues {
            requested += q.seats_in_use + q.waiting_seats;
            if !q.idle() {
                active += 1;
            }
        }
        if active == 0 {
            return 0.0;
        }
        requested.min(self.concurrency_limit) as f64 / active as f64
    }

    fn can_accommodate(&self, seats: usize) -> bool {
        if seats > self.concurrency_limit {
            // Wider than the level: alone, when nothing else executes.
            return self.executing == 0;
        }
        self.seats_in_use + seats <= self.concurrency_limit
    }

    /// The queue of the flow hashed to `hash`: the one of its hand with the least waiting work,
    /// the hand visited from a rotating offset so overlapping hands share evenly.
    fn shuffle_shard(&mut self, hash: u64) -> usize {
        let dealer = self.dealer.as_ref().expect("a queuing level has a dealer");
        let (hand, len) = dealer.deal(hash);
        let offset = self.enqueues % len;
        self.enqueues += 1;
        let mut best = hand[offset];
        let mut least = usize::MAX;
        for i in 0..len {
            let q = hand[(offset + i) % len];
            if self.queues[q].waiting_seats < least {
                least = self.queues[q].waiting_seats;
                best = q;
            }
        }
        best
    }

    /// A request of flow `hash` asking for `seats` arrives at `now`: seated, queued or refused;
    /// with the waiting requests seated meanwhile (never the arriving one: that is in the
    /// [`Arrival`]).
    pub fn arrive(&mut self, now: f64, hash: u64, id: u64, seats: usize) -> (Arrival, Vec<Dispatch>) {
        self.sync_time(now);
        let Some(queuing) = self.queuing else {
            if !self.can_accommodate(seats) {
                return (Arrival::Rejected(Reason::ConcurrencyLimit), vec![]);
            }
            self.seats_in_use += seats;
            self.executing += 1;
            return (Arrival::Executing { queue: None }, vec![]);
        };
        let qi = self.shuffle_shard(hash);
        if self.seats_in_use >= self.concurrency_limit && self.queues[qi].waiting.len() >= queuing.queue_length_limit {
            return (Arrival::Rejected(Reason::QueueFull), vec![]);
        }
        let current_r = self.current_r;
        let q = &mut self.queues[qi];
        if q.idle() {
            q.next_dispatch_r = current_r;
        }
        q.waiting.push_back(Waiting { id, seats, arrival_r: current_r });
        q.waiting_seats += seats;
        self.waiting += 1;
        self.bound_next_dispatch(qi);
        let mut dispatched = self.dispatch_as_much_as_possible();
        match dispatched.iter().position(|d| d.id == id) {
            Some(i) => {
                dispatched.remove(i);
                (Arrival::Executing { queue: Some(qi) }, dispatched)
            }
            None => (Arrival::Queued { queue: qi }, dispatched),
        }
    }

    /// A request seated from `queue` with `seats` finished at `now` after `service_seconds`:
    /// its queue is charged what it really took, and the freed seats go to waiting requests.
    pub fn finish(&mut self, now: f64, queue: Option<usize>, seats: usize, service_seconds: f64) -> Vec<Dispatch> {
        self.sync_time(now);
        self.executing -= 1;
        self.seats_in_use -= seats;
        if let Some(qi) = queue {
            let q = &mut self.queues[qi];
            q.executing -= 1;
            q.seats_in_use -= seats;
            q.next_dispatch_r -= seats as f64 * (ESTIMATED_SERVICE_SECONDS - service_seconds);
            self.bound_next_dispatch(qi);
        }
        self.dispatch_as_much_as_possible()
    }

    /// Takes waiting request `id` out of `queue` (it timed out or its client went away); false
    /// when it is not waiting there (already seated).
    pub fn cancel(&mut self, now: f64, id: u64, queue: usize) -> bool {
        self.sync_time(now);
        let Some(q) = self.queues.get_mut(queue) else { return false };
        let Some(pos) = q.waiting.iter().position(|w| w.id == id) else { return false };
        let w = q.waiting.remove(pos).expect("position found");
        q.waiting_seats -= w.seats;
        self.waiting -= 1;
        self.bound_next_dispatch(queue);
        true
    }

    fn dispatch_as_much_as_possible(&mut self) -> Vec<Dispatch> {
        let mut out = Vec::new();
        while self.waiting > 0 && self.seats_in_use < self.concurrency_limit {
            match self.dispatch_one() {
                Some(d) => out.push(d),
                None => break,
            }
        }
        out
    }

    /// Seats the head of the queue with the least virtual finish time (ties: the first after
    /// the last queue dispatched from), if its seats are free.
    fn dispatch_one(&mut self) -> Option<Dispatch> {
        let n = self.queues.len();
        let mut best: Option<(usize, f64)> = None;
        let mut index = self.robin_index;
        for _ in 0..n {
            index = (index + 1) % n;
            let q = &self.queues[index];
            if let Some(head) = q.waiting.front() {
                let finish = q.next_dispatch_r + head.seats as f64 * ESTIMATED_SERVICE_SECONDS;
                if best.is_none_or(|(_, f)| finish < f) {
                    best = Some((index, finish));
                }
            }
        }
        let (qi, _) = best?;
        let seats = self.queues[qi].waiting.front().expect("a non-empty queue").seats;
        if !self.can_accommodate(seats) {
            return None;
        }
        self.robin_index = qi;
        let q = &mut self.queues[qi];
        let w = q.waiting.pop_front().expect("a non-empty queue");
        q.waiting_seats -= w.seats;
        q.seats_in_use += w.seats;
        q.executing += 1;
        q.next_dispatch_r += w.seats as f64 * ESTIMATED_SERVICE_SECONDS;
        self.waiting -= 1;
        self.executing += 1;
        self.seats_in_use += w.seats;
        self.bound_next_dispatch(qi);
        Some(Dispatch { id: w.id, queue: qi })
    }

    /// Anti-windup: a queue's next dispatch is never earlier (in virtual time) than the arrival
    /// of its oldest waiting request.
    fn bound_next_dispatch(&mut self, qi: usize) {
        let q = &mut self.queues[qi];
        if let Some(head) = q.waiting.front()
            && q.next_dispatch_r < head.arrival_r
        {
            q.next_dispatch_r = head.arrival_r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hand(d: &Dealer, hash: u64) -> Vec<usize> {
        let (h, n) = d.deal(hash);
        h[..n].to_vec()
    }

    #[test]
    fn the_dealer_deals_distinct_cards_from_mixed_radix_digits_of_the_hash() {
        let d = Dealer::new(8, 3).unwrap();
        assert_eq!(hand(&d, 0), [0, 1, 2]);
        // 13 = 5 + 8·(1 + 7·0): digits 5, 1, 0; the later ones shift past the earlier cards.
        assert_eq!(hand(&d, 13), [5, 1, 0]);
        for hash in [1u64, 99, 12_345, u64::MAX, 0xdead_beef] {
            let mut h = hand(&d, hash);
            assert!(h.iter().all(|&c| c < 8), "{h:?}");
            h.sort();
            h.dedup();
            assert_eq!(h.len(), 3, "hash {hash}: distinct cards");
        }
    }

    #[test]
    fn a_dealer_is_refused_for_hands_that_do_not_fit() {
        for (deck, hand, ok) in
            [(128, 6, true), (64, 6, true), (16, 4, true), (4, 5, false), (0, 1, false), (8, 0, false)]
        {
            assert_eq!(Dealer::new(deck, hand).is_ok(), ok, "{deck}/{hand}");
        }
        // 2^20 queues × hand 4 = 80 bits of hash: more than 60.
        assert!(Dealer::new(1 << 20, 4).unwrap_err().contains("should not be greater than 60"));
    }

    const Q: Queuing = Queuing { queues: 8, hand_size: 2, queue_length_limit: 2 };

    #[test]
    fn requests_are_seated_until_the_limit_then_queued_then_refused_when_the_queue_is_full() {
        let mut qs = QueueSet::new(2, Some(Q)).unwrap();
        let mut outcomes = vec![];
        for id in 0..8 {
            outcomes.push(qs.arrive(0.0, 7, id, 1).0);
        }
        let executing = outcomes.iter().filter(|a| matches!(a, Arrival::Executing { .. })).count();
        let queued = outcomes.iter().filter(|a| matches!(a, Arrival::Queued { .. })).count();
        let full = outcomes.iter().filter(|a| **a == Arrival::Rejected(Reason::QueueFull)).count();
        // 2 seats; the flow's hand of 2 queues holds 2 each; the rest are refused.
        assert_eq!((executing, queued, full), (2, 4, 2));
        assert_eq!((qs.seats_in_use(), qs.waiting(), qs.executing()), (2, 4, 2));
    }

    #[test]
    fn a_flow_fills_the_shortest_queue_of_its_hand() {
        let mut qs = QueueSet::new(1, Some(Queuing { queue_length_limit: 10, ..Q })).unwrap();
        let (h, _) = Dealer::new(8, 2).unwrap().deal(7);
        let mut queues = vec![];
        for id in 0..5 {
            if let (Arrival::Queued { queue }, _) = qs.arrive(0.0, 7, id, 1) {
                queues.push(queue);
            }
        }
        // One seated; the 4 queued alternate between the two queues of the hand.
        assert_eq!(queues.len(), 4);
        assert_eq!(qs.queue_length(h[0]), 2);
        assert_eq!(qs.queue_length(h[1]), 2);
    }

    #[test]
    fn a_freed_seat_goes_to_the_queue_with_the_least_virtual_finish_time() {
        // One seat; flow A floods, flow B sends one request once A's requests wait.
        let mut qs = QueueSet::new(1, Some(Queuing { queues: 64, hand_size: 1, queue_length_limit: 100 })).unwrap();
        let (a, b) = (1u64, 2u64);
        let qa = Dealer::new(64, 1).unwrap().deal(a).0[0];
        let qb = Dealer::new(64, 1).unwrap().deal(b).0[0];
        assert_ne!(qa, qb);
        let (first, _) = qs.arrive(0.0, a, 0, 1);
        assert_eq!(first, Arrival::Executing { queue: Some(qa) });
        for id in 1..=50 {
            assert_eq!(qs.arrive(0.0, a, id, 1).0, Arrival::Queued { queue: qa });
        }
        // B arrives later in virtual time than A's queue started, but A's queue is charged for
        // each request it is given: after one more of A's, B's turn comes.
        assert_eq!(qs.arrive(0.001, b, 100, 1).0, Arrival::Queued { queue: qb });
        let mut order = vec![];
        let mut executing = Some(qa);
        for step in 0..4 {
            let t = 0.002 + step as f64 * 0.001;
            let next = qs.finish(t, executing, 1, 0.001);
            assert_eq!(next.len(), 1, "one seat freed, one seated");
            order.push(next[0].id);
            executing = Some(next[0].queue);
        }
        let b_at = order.iter().position(|&id| id == 100).expect("B seated");
        assert!(b_at <= 1, "B waits behind at most one of A's 50: {order:?}");
        assert_eq!(qs.waiting(), 50 - 3);
    }

    #[test]
    fn a_level_without_queues_refuses_once_its_seats_are_taken() {
        let mut qs = QueueSet::new(2, None).unwrap();
        assert_eq!(qs.arrive(0.0, 1, 0, 1).0, Arrival::Executing { queue: None });
        assert_eq!(qs.arrive(0.0, 1, 1, 1).0, Arrival::Executing { queue: None });
        assert_eq!(qs.arrive(0.0, 1, 2, 1).0, Arrival::Rejected(Reason::ConcurrencyLimit));
        assert!(qs.finish(0.1, None, 1, 0.1).is_empty());
        assert_eq!(qs.arrive(0.1, 1, 3, 1).0, Arrival::Executing { queue: None });
    }

    #[test]
    fn seats_are_counted_per_request_width() {
        let mut qs = QueueSet::new(4, Some(Queuing { queues: 4, hand_size: 1, queue_length_limit: 5 })).unwrap();
        assert!(matches!(qs.arrive(0.0, 1, 0, 3).0, Arrival::Executing { .. }));
        // 3 of 4 seats taken: a 2-seat request waits, a 1-seat one behind it too (FIFO per queue).
        let (wide, _) = qs.arrive(0.0, 1, 1, 2);
        let Arrival::Queued { queue } = wide else { panic!("{wide:?}") };
        assert_eq!(qs.seats_in_use(), 3);
        let next = qs.finish(0.01, Some(queue), 3, 0.01);
        assert_eq!(next, [Dispatch { id: 1, queue }]);
        assert_eq!(qs.seats_in_use(), 2);
        // Wider than the level: seated only when nothing else executes.
        let (huge, _) = qs.arrive(0.02, 1, 2, 9);
        assert!(matches!(huge, Arrival::Queued { .. }));
        assert_eq!(qs.finish(0.03, Some(queue), 2, 0.02), [Dispatch { id: 2, queue }]);
    }

    #[test]
    fn a_cancelled_request_leaves_its_queue_and_is_never_seated() {
        let mut qs = QueueSet::new(1, Some(Queuing { queues: 4, hand_size: 1, queue_length_limit: 5 })).unwrap();
        let (_, _) = qs.arrive(0.0, 1, 0, 1);
        let (Arrival::Queued { queue }, _) = qs.arrive(0.0, 1, 1, 1) else { panic!() };
        let _ = qs.arrive(0.0, 1, 2, 1);
        assert!(qs.cancel(0.1, 1, queue));
        assert!(!qs.cancel(0.1, 1, queue), "once only");
        assert_eq!(qs.finish(0.2, Some(queue), 1, 0.2), [Dispatch { id: 2, queue }]);
        assert_eq!(qs.waiting(), 0);
    }
}
