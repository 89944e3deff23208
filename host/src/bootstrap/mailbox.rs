//! A rank's mailbox: what its peers have sent it and not yet been consumed, plus what is known
//! about their health.
//!
//! Both transports deliver into a [`Mailbox`]: the TCP transport from one reader thread per
//! peer connection, the in-process transport directly from the sending thread. The collectives
//! in [`super`] take messages out, waiting on a condition variable with a deadline. Because
//! every connection is always drained into the mailbox, a blocking send never waits for the
//! receiver to reach the matching call, so collectives cannot deadlock on socket buffers.
//!
//! Invariants:
//! - messages from one peer are taken in the order they were sent (one FIFO per peer and
//!   channel: collectives and point-to-point are separate);
//! - a peer's queue holds at most [`MAX_QUEUED_BYTES`] (by default) (each message counts at least
//!   [`MIN_MESSAGE_COST`]); a delivery beyond that waits for the consumer, which pushes back on
//!   the sender, so a flooding peer cannot make this rank allocate without bound;
//! - once a peer is closed, nothing more is delivered from it; messages it sent before closing
//!   are still handed out;
//! - the first failure (an abort received from a peer, a peer that died, or one this rank
//!   detected) is kept, and the failure listeners ([`Mailbox::on_failure`]: e.g. the abort flags
//!   of device communicators) are called once, at once, from whichever thread records it. A
//!   wait reports it as soon as a peer it still needs is *stuck*: closed, or gave up (sent an
//!   abort). A wait whose missing peers are all alive keeps waiting for them (their data may be
//!   in flight on their own connections, behind the abort that arrived on another one); what
//!   has arrived is always handed out first.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::wire::MAX_MESSAGE_BYTES;

/// Most bytes queued from one peer before deliveries from it wait for the consumer
/// (the default; see [`Mailbox::with_limit`]).
pub(crate) const MAX_QUEUED_BYTES: usize = 4 * MAX_MESSAGE_BYTES;
/// What an (even empty) queued message counts against [`MAX_QUEUED_BYTES`].
pub(crate) const MIN_MESSAGE_COST: usize = 256;

/// The collective operations, carried in every collective message so that a rank in a
/// different collective is detected instead of misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    AllGather = 1,
    Broadcast = 2,
    Barrier = 3,
    Connect = 4,
    /// The runtime's own all-gathers and barriers (registration, agreement, device
    /// communicators): a tag space apart from the user's, so a user collective that meets one
    /// is an error, never a misread (e.g. a user all-gather receiving registration records).
    RuntimeAllGather = 5,
    RuntimeBarrier = 6,
}

impl Op {
    pub fn from_u32(v: u32) -> Option<Op> {
        Some(match v {
            1 => Op::AllGather,
            2 => Op::Broadcast,
            3 => Op::Barrier,
            4 => Op::Connect,
            5 => Op::RuntimeAllGather,
            6 => Op::RuntimeBarrier,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::AllGather => "all-gather",
            Op::Broadcast => "broadcast",
            Op::Barrier => "barrier",
            Op::Connect => "connect",
            Op::RuntimeAllGather => "runtime all-gather",
            Op::RuntimeBarrier => "runtime barrier",
        }
    }
}

/// One rank's contribution to a collective.
#[derive(Debug)]
pub(crate) struct CollMsg {
    pub op: Op,
    /// The sender's step number (for error messages).
    pub step: u64,
    pub data: Vec<u8>,
}

/// Something a peer sent.
#[derive(Debug)]
pub(crate) enum Incoming {
    Coll(CollMsg),
    P2p(Vec<u8>),
}

impl Incoming {
    fn cost(&self) -> usize {
        let len = match self {
            Incoming::Coll(m) => m.data.len(),
            Incoming::P2p(d) => d.len(),
        };
        len.max(MIN_MESSAGE_COST)
    }
}

/// How a peer went away.
#[derive(Clone, Debug)]
pub(crate) enum Closed {
    /// It closed its communicator on purpose.
    Left,
    /// It disconnected, crashed or broke the protocol; the text says which.
    Died(String),
}

impl Closed {
    pub fn reason(&self) -> String {
        match self {
            Closed::Left => "closed its communicator".into(),
            Closed::Died(why) => why.clone(),
        }
    }
}

/// The first failure seen by this rank: the rank to blame and what it did.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub culprit: usize,
    pub reason: String,
}

/// Why a wait ended without a message.
#[derive(Debug)]
pub(crate) enum WaitError {
    /// The group is broken (see [`Failure`]).
    Failed(Failure),
    /// A peer this wait needs is gone and sent nothing more.
    Closed(usize, Closed),
    /// The deadline passed while waiting for this peer.
    TimedOut(usize),
}

/// Why a delivery was not made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DeliverError {
    /// The mailbox's owner is shutting down.
    ShutDown,
    /// The queue stayed full until the deadline.
    TimedOut,
}

#[derive(Default)]
struct PeerQueue {
    coll: VecDeque<CollMsg>,
    p2p: VecDeque<Vec<u8>>,
    bytes: usize,
    closed: Option<(u64, Closed)>,
    /// The peer sent an abort: it has given up and will send nothing more.
    gave_up: bool,
}

/// Called once with the first failure (see [`Mailbox::on_failure`]).
pub(crate) type Listener = Box<dyn Fn(&Failure) + Send + Sync>;

struct State {
    peers: Vec<PeerQueue>,
    failure: Option<Failure>,
    shutdown: bool,
    closes: u64,
}

impl State {
    /// If `peer` will send nothing more (it closed or gave up): an order key (earliest close
    /// first; peers that gave up first of all) and the peer.
    fn stuck(&self, peer: usize) -> Option<(u64, usize)> {
        let q = &self.peers[peer];
        if q.gave_up {
            return Some((0, peer));
        }
        q.closed.as_ref().map(|(seq, _)| (*seq, peer))
    }

    /// The error for a wait that needs `peer`, which is stuck: the recorded failure (it names
    /// the root cause) if there is one, else how `peer` went away.
    fn blame(&self, peer: usize) -> WaitError {
        match (&self.failure, &self.peers[peer].closed) {
            (Some(f), _) => WaitError::Failed(f.clone()),
            (None, Some((_, how))) => WaitError::Closed(peer, how.clone()),
            (None, None) => WaitError::Closed(peer, Closed::Died("gave up".into())),
        }
    }
}

/// See the module documentation.
pub(crate) struct Mailbox {
    state: Mutex<State>,
    cv: Condvar,
    limit: usize,
    /// Failure listeners by id; called under this lock, so that a removed listener is never
    /// running (and is dropped by the thread that removed it).
    listeners: Mutex<(u64, Vec<(u64, Listener)>)>,
}

impl Mailbox {
    pub fn new(size: usize) -> Mailbox {
        Mailbox::with_limit(size, MAX_QUEUED_BYTES)
    }

    /// A mailbox whose per-peer queues hold at most `limit` bytes.
    pub fn with_limit(size: usize, limit: usize) -> Mailbox {
        Mailbox {
            limit,
            state: Mutex::new(State {
                peers: (0..size).map(|_| PeerQueue::default()).collect(),
                failure: None,
                shutdown: false,
                closes: 0,
            }),
            cv: Condvar::new(),
            listeners: Mutex::new((0, Vec::new())),
        }
    }

    fn lock_listeners(&self) -> MutexGuard<'_, (u64, Vec<(u64, Listener)>)> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `listener`, called once with the first failure (at once if there is one
    /// already); returns the id that [`Mailbox::remove_listener`] takes.
    pub fn on_failure(&self, listener: Listener) -> u64 {
        let mut l = self.lock_listeners();
        if let Some(f) = self.failure() {
            listener(&f);
        }
        l.0 += 1;
        let id = l.0;
        l.1.push((id, listener));
        id
    }

    /// Unregisters a listener; once this returns it is not running and never runs again.
    pub fn remove_listener(&self, id: u64) {
        let removed = {
            let mut l = self.lock_listeners();
            let at = l.1.iter().position(|(i, _)| *i == id);
            at.map(|at| l.1.remove(at))
        };
        drop(removed); // outside the lock: a listener may own what it drops
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queues inconsistent (every update
        // is a single push/pop), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a message from `from`, waiting (until `deadline`, or forever with `None`) while
    /// that peer's queue is full.
    pub fn deliver(
        &self,
        from: usize,
        msg: Incoming,
        deadline: Option<Instant>,
    ) -> Result<(), DeliverError> {
        let cost = msg.cost();
        let mut st = self.lock();
        loop {
            if st.shutdown {
                return Err(DeliverError::ShutDown);
            }
            let q = &st.peers[from];
            if q.closed.is_some() {
                // Nothing is accepted from a peer after it closed; dropping is correct.
                return Ok(());
            }
            if q.bytes == 0 || q.bytes + cost <= self.limit {
                break;
            }
            st = match deadline {
                None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(DeliverError::TimedOut);
                    }
                    self.cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        let q = &mut st.peers[from];
        q.bytes += cost;
        match msg {
            Incoming::Coll(m) => q.coll.push_back(m),
            Incoming::P2p(d) => q.p2p.push_back(d),
        }
        drop(st);
        self.cv.notify_all();
        Ok(())
    }

    /// Marks `from` as gone (the first call wins). A peer that died (rather than left) is a
    /// failure of the group: recorded at once, so that listeners and later calls learn it
    /// without waiting for a step that needs that peer.
    pub fn close(&self, from: usize, how: Closed) {
        let mut st = self.lock();
        let mut died = None;
        if st.peers[from].closed.is_none() {
            st.closes += 1;
            let seq = st.closes;
            if let Closed::Died(why) = &how {
                died = Some(Failure {
                    culprit: from,
                    reason: why.clone(),
                });
            }
            st.peers[from].closed = Some((seq, how));
        }
        drop(st);
        self.cv.notify_all();
        if let Some(f) = died {
            self.fail(f);
        }
    }

    /// Records that `from` gave up (it sent an abort) and the failure it reported.
    pub fn abort_from(&self, from: usize, failure: Failure) {
        self.lock().peers[from].gave_up = true;
        self.fail(failure);
    }

    /// Records a failure unless one is already recorded; returns the one that stands.
    pub fn fail(&self, failure: Failure) -> Failure {
        // The listeners' lock is taken first (as in `on_failure`), so that a listener being
        // registered sees either the failure or the call below, exactly once.
        let listeners = self.lock_listeners();
        let mut st = self.lock();
        let first = st.failure.is_none();
        let stands = st.failure.get_or_insert(failure).clone();
        drop(st);
        self.cv.notify_all();
        if first {
            for (_, listener) in &listeners.1 {
                listener(&stands);
            }
        }
        stands
    }

    /// The recorded failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.lock().failure.clone()
    }

    /// Whether `peer` has closed.
    pub fn is_closed(&self, peer: usize) -> bool {
        self.lock().peers[peer].closed.is_some()
    }

    /// How `peer` went away, if it did.
    pub fn closed_reason(&self, peer: usize) -> Option<String> {
        self.lock().peers[peer]
            .closed
            .as_ref()
            .map(|(_, how)| how.reason())
    }

    /// Stops all waiting deliveries (the owner is going away).
    pub fn shut_down(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
    }

    /// Whether [`Mailbox::shut_down`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.lock().shutdown
    }

    /// Takes one collective message from each of `peers` (in that order), waiting until
    /// `deadline`. Fails as soon as a missing peer is stuck (see the module documentation),
    /// or at the deadline with the first peer still missing.
    pub fn take_coll(&self, peers: &[usize], deadline: Instant) -> Result<Vec<CollMsg>, WaitError> {
        let mut got: Vec<Option<CollMsg>> = peers.iter().map(|_| None).collect();
        let mut missing = peers.len();
        let mut st = self.lock();
        loop {
            let mut took = false;
            for (slot, &p) in got.iter_mut().zip(peers) {
                if slot.is_none()
                    && let Some(m) = st.peers[p].coll.pop_front()
                {
                    st.peers[p].bytes -= m.data.len().max(MIN_MESSAGE_COST);
                    *slot = Some(m);
                    missing -= 1;
                    took = true;
                }
            }
            if took {
                self.cv.notify_all();
            }
            if missing == 0 {
                return Ok(got.into_iter().flatten().collect());
            }
            let stuck = got
                .iter()
                .zip(peers)
                .filter(|(slot, _)| slot.is_none())
                .filter_map(|(_, &p)| st.stuck(p))
                .min_by_key(|(seq, _)| *seq);
            if let Some((_, p)) = stuck {
                return Err(st.blame(p));
            }
            let now = Instant::now();
            if now >= deadline {
                let first_missing = got
                    .iter()
                    .zip(peers)
                    .find(|(slot, _)| slot.is_none())
                    .map_or(0, |(_, &p)| p);
                return Err(WaitError::TimedOut(first_missing));
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Takes the next point-to-point message from `peer`, waiting until `deadline`.
    pub fn take_p2p(&self, peer: usize, deadline: Instant) -> Result<Vec<u8>, WaitError> {
        let mut st = self.lock();
        loop {
            if let Some(d) = st.peers[peer].p2p.pop_front() {
                st.peers[peer].bytes -= d.len().max(MIN_MESSAGE_COST);
                drop(st);
                self.cv.notify_all();
                return Ok(d);
            }
            if st.stuck(peer).is_some() {
                return Err(st.blame(peer));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::TimedOut(peer));
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn coll(data: &[u8]) -> Incoming {
        Incoming::Coll(CollMsg {
            op: Op::Barrier,
            step: 1,
            data: data.to_vec(),
        })
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[test]
    fn messages_sent_before_closing_are_still_delivered() {
        let m = Mailbox::new(2);
        m.deliver(1, Incoming::P2p(b"x".to_vec()), None).unwrap();
        m.close(1, Closed::Left);
        assert_eq!(m.take_p2p(1, soon()).unwrap(), b"x");
        assert!(matches!(
            m.take_p2p(1, soon()),
            Err(WaitError::Closed(1, Closed::Left))
        ));
    }

    #[test]
    fn the_earliest_closed_peer_is_blamed() {
        let m = Mailbox::new(4);
        m.close(3, Closed::Died("disconnected".into()));
        m.close(1, Closed::Died("disconnected".into()));
        m.deliver(2, coll(b""), None).unwrap();
        assert!(matches!(
            m.take_coll(&[1, 2, 3], soon()),
            Err(WaitError::Failed(f)) if f.culprit == 3
        ));
        // Leaving is not a failure: a wait that needs the peer reports how it went.
        let m = Mailbox::new(3);
        m.close(2, Closed::Left);
        assert!(m.failure().is_none());
        assert!(matches!(
            m.take_coll(&[2], soon()),
            Err(WaitError::Closed(2, Closed::Left))
        ));
    }

    #[test]
    fn a_death_calls_the_failure_listeners_once_at_once() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let m = Mailbox::new(3);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let id = m.on_failure(Box::new(move |f| {
            assert_eq!(f.culprit, 2);
            c.fetch_add(1, Ordering::SeqCst);
        }));
        m.close(2, Closed::Died("disconnected".into()));
        m.close(1, Closed::Died("disconnected".into()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Registered after the failure: called at once.
        let c = calls.clone();
        let late = m.on_failure(Box::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        m.remove_listener(id);
        m.remove_listener(late);
        // A removed listener is never called again.
        let m = Mailbox::new(2);
        let c = calls.clone();
        let id = m.on_failure(Box::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        m.remove_listener(id);
        m.close(1, Closed::Died("disconnected".into()));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_peer_that_gave_up_ends_waits_for_it_and_the_first_failure_stands() {
        let m = Mailbox::new(3);
        m.abort_from(
            1,
            Failure {
                culprit: 2,
                reason: "disconnected".into(),
            },
        );
        let f = m.fail(Failure {
            culprit: 1,
            reason: "later".into(),
        });
        assert_eq!(f.culprit, 2);
        assert!(matches!(m.take_coll(&[1], soon()), Err(WaitError::Failed(f)) if f.culprit == 2));
        assert!(matches!(m.take_p2p(1, soon()), Err(WaitError::Failed(_))));
    }

    #[test]
    fn data_that_has_arrived_is_handed_out_despite_a_failure() {
        let m = Mailbox::new(3);
        m.deliver(1, coll(b"a"), None).unwrap();
        m.deliver(2, Incoming::P2p(b"b".to_vec()), None).unwrap();
        m.abort_from(
            2,
            Failure {
                culprit: 2,
                reason: "disconnected".into(),
            },
        );
        assert_eq!(m.take_coll(&[1], soon()).unwrap()[0].data, b"a");
        assert_eq!(m.take_p2p(2, soon()).unwrap(), b"b");
        assert!(matches!(
            m.take_coll(&[2], soon()),
            Err(WaitError::Failed(_))
        ));
    }

    #[test]
    fn an_abort_from_one_peer_does_not_cut_short_data_in_flight_from_another() {
        let m = Mailbox::new(3);
        m.abort_from(
            2,
            Failure {
                culprit: 2,
                reason: "disconnected".into(),
            },
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                m.deliver(1, coll(b"late"), None).unwrap();
            });
            let deadline = Instant::now() + Duration::from_secs(5);
            assert_eq!(m.take_coll(&[1], deadline).unwrap()[0].data, b"late");
        });
    }

    #[test]
    fn a_missing_peer_times_out_by_name() {
        let m = Mailbox::new(3);
        m.deliver(1, coll(b""), None).unwrap();
        let t = Instant::now();
        assert!(matches!(
            m.take_coll(&[1, 2], soon()),
            Err(WaitError::TimedOut(2))
        ));
        assert!(t.elapsed() >= Duration::from_millis(40));
    }

    #[test]
    fn a_flooding_peer_is_held_back_once_its_queue_is_full() {
        let limit = 16 * MIN_MESSAGE_COST;
        let m = Mailbox::with_limit(2, limit);
        let big = vec![0u8; limit / 2];
        m.deliver(1, Incoming::P2p(big.clone()), None).unwrap();
        m.deliver(1, Incoming::P2p(big.clone()), None).unwrap();
        assert_eq!(
            m.deliver(1, Incoming::P2p(vec![1]), Some(soon())),
            Err(DeliverError::TimedOut)
        );
        // Consuming makes room again.
        m.take_p2p(1, soon()).unwrap();
        m.deliver(1, Incoming::P2p(vec![1]), Some(soon())).unwrap();
        // Empty messages count too: a stream of them is bounded as well.
        let m = Mailbox::with_limit(2, limit);
        for _ in 0..limit / MIN_MESSAGE_COST {
            m.deliver(1, coll(b""), None).unwrap();
        }
        assert_eq!(
            m.deliver(1, coll(b""), Some(soon())),
            Err(DeliverError::TimedOut)
        );
    }
}
