//! What the proxy thread and the transport's threads of one rank share: the requirements,
//! the mapped memory kernels use, the registry, the landing state, the counts, the failure.
//! It also checks every incoming operation against this rank's own registrations and
//! requirements (never trusting the peer) and applies signals.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use symcomm_device::gin::{Descriptor, GinConnection, SignalOp};

use super::landing::{Landing, batch_values};
use super::mover::Mover;
use super::registry::Registry;
use super::wire::{Frame, Kind};
use crate::Error;
use crate::cuda::memory::{HostMapped, PinnedBytes};
use crate::symmem::state::GinPickUp;

/// Longest wait for the GPU to carry out queued landings before this rank's GIN fails.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest time a deregistration waits for a proxy that makes no progress at all
/// ([`Shared::wait_picked_up`]).
const PICKUP_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// How a transport tells every peer that this rank's GIN failed (the reason).
pub(crate) type Notify = Box<dyn Fn(&str) + Send + Sync>;

/// Where an operation's data goes, once checked.
pub(crate) enum Target {
    /// No data (a signal).
    Nothing,
    /// `len` bytes of window `win` from `off`.
    Bytes { win: u32, off: u64, len: usize },
}

/// What every thread of a rank's GIN knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub rank: usize,
    pub lsa_rank: usize,
    pub lsa_size: usize,
    pub n_contexts: u32,
    pub n_signals: u32,
    pub n_counters: u32,
    pub depth: u32,
    pub peer_slots: u32,
    pub connection: GinConnection,
    /// The deliberately broken build (feature `gin-strong-as-weak`): strong signals are
    /// applied as weak ones. Only to show that the ordering tests fail.
    pub strong_as_weak: bool,
}

/// The mapped host memory of a rank's GIN.
pub(crate) struct GinMemory {
    pub rings: PinnedBytes,
    /// One word per ring, then the landing word (the last batch of queued landings the GPU
    /// has carried out: [`Shared::land_values`]).
    pub consumers: PinnedBytes,
    pub signals: PinnedBytes,
    pub counters: PinnedBytes,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub value_landings: AtomicU64,
}

/// State shared by the proxy and the transport's threads.
pub(crate) struct Shared {
    pub cfg: Config,
    pub mem: GinMemory,
    pub registry: Registry,
    pub stats: Stats,
    pub abort: Arc<HostMapped<u32>>,
    pub failure: Mutex<Option<String>>,
    /// Set with the first failure (the proxy checks it before every descriptor).
    pub failed: AtomicBool,
    pub stop: AtomicBool,
    pub landing: Mutex<Landing>,
    /// Tells the peers that this rank's GIN failed (set by the transport).
    pub notify: OnceLock<Notify>,
    /// Reports this rank's GIN failure to every rank through the bootstrap, so that a rank
    /// waiting for this one's signals is released even when no connection joins them.
    pub reporter: crate::bootstrap::FailureReporter,
}

impl Shared {
    /// Whether this rank exchanges GIN operations with world rank `p` (itself included).
    pub(crate) fn connected(&self, p: usize) -> bool {
        match self.cfg.connection {
            GinConnection::Full => true,
            GinConnection::Rail => p % self.cfg.lsa_size == self.cfg.lsa_rank,
            GinConnection::None => false,
        }
    }

    /// Fails this rank's GIN with `e` (the first failure is kept) and raises the abort flag.
    /// Tells the peers (once), so that none keeps waiting for this rank.
    pub(crate) fn fail(&self, e: Error) {
        let text = e.to_string();
        let prefix = format!("rank {}: ", self.cfg.rank);
        let reason = text.strip_prefix(&prefix).unwrap_or(&text).to_string();
        let first = match self.failure.lock() {
            Ok(mut f) if f.is_none() => {
                *f = Some(reason.clone());
                true
            }
            _ => false,
        };
        self.failed.store(true, Ordering::Release);
        // Relaxed: the flag publishes nothing else (kernels read it relaxed, .sys).
        self.abort.atomic().store(1, Ordering::Relaxed);
        if first {
            tracing::warn!("rank {}: GIN failed: {reason}", self.cfg.rank);
            if !self.stopping() {
                if let Some(notify) = self.notify.get() {
                    notify(&reason);
                }
                self.reporter
                    .report(self.cfg.rank, format!("failed its GIN: {reason}"));
            }
        }
    }

    /// Checks that operation `f` from `from` is new and not too far ahead of its stream (a
    /// peer that repeats or skips sequence numbers is refused, not trusted).
    pub(crate) fn admit(&self, from: usize, f: &Frame) -> Result<(), String> {
        let mut landing = match self.landing.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        landing.admit(from, f)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The world rank of peer slot `slot`.
    pub(crate) fn world_of(&self, slot: usize) -> usize {
        match self.cfg.connection {
            GinConnection::Rail => slot * self.cfg.lsa_size + self.cfg.lsa_rank,
            _ => slot,
        }
    }
    /// Checks `f`, sent by `from`, against this rank's windows and requirements; the address
    /// its data goes to, or why it is refused.
    pub(crate) fn check_incoming(&self, from: usize, f: &Frame) -> Result<Target, String> {
        if f.context >= self.cfg.n_contexts {
            return Err(format!(
                "context {} (this rank has {})",
                f.context, self.cfg.n_contexts
            ));
        }
        if f.signal_op != SignalOp::None && f.signal >= self.cfg.n_signals {
            return Err(format!(
                "signal {} (this rank has {} signals)",
                f.signal, self.cfg.n_signals
            ));
        }
        if !self.connected(from) {
            return Err(format!(
                "an operation from rank {from}, which is not its GIN peer"
            ));
        }
        let len = match f.kind {
            Kind::Put => f.bytes,
            Kind::PutValue => {
                if !(1..=8).contains(&f.value_size) {
                    return Err(format!("an inline value of {} bytes", f.value_size));
                }
                u64::from(f.value_size)
            }
            Kind::Signal => {
                if f.signal_op == SignalOp::None {
                    return Err("a signal without an action".into());
                }
                return Ok(Target::Nothing);
            }
            Kind::Close | Kind::Refused | Kind::Failed => {
                return Err("a control frame as an operation".into());
            }
        };
        let Some(size) = self.registry.size(f.dst_win) else {
            return Err(format!(
                "a {} of {len} bytes to window {}, which this rank has not registered",
                kind_name(f.kind),
                f.dst_win
            ));
        };
        match f.dst_off.checked_add(len) {
            Some(end) if end <= size as u64 => Ok(Target::Bytes {
                win: f.dst_win,
                off: f.dst_off,
                len: len as usize,
            }),
            _ => Err(format!(
                "a {} of {len} bytes to window {} at offset {}, beyond its {size} bytes",
                kind_name(f.kind),
                f.dst_win,
                f.dst_off
            )),
        }
    }

    /// Records that operation `f` from `from` has landed and applies the signals that may now
    /// be seen (see [`Landing::landed`]).
    pub(crate) fn landed(&self, from: usize, f: &Frame) {
        let mut landing = match self.landing.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        let mut actions = Vec::new();
        landing.landed(from, f, self.cfg.strong_as_weak, |a| actions.push(a));
        if actions.is_empty() {
            return;
        }
        // A signal this thread applies must not pass data (or a signal) still queued for the
        // GPU to write.
        self.drain(landing.queued.issued);
        for a in actions {
            self.apply_signal(a);
        }
    }

    /// The index of the landing word among the consumer words (after one per ring).
    fn landing_index(&self) -> usize {
        self.cfg.n_contexts as usize * self.cfg.peer_slots as usize
    }

    /// The landing word: the last batch of queued landings the GPU has carried out.
    fn landing_word(&self) -> &AtomicU64 {
        self.mem.consumers.word(self.landing_index())
    }

    /// [`GinPickUp::wait_picked_up`](crate::symmem::state::GinPickUp): for each ring, the index
    /// one past the newest descriptor stamped now (a slot's stamp only grows, so the largest
    /// stamp of the ring, or its consumer index if larger), then a wait until the proxy's
    /// consumer index has reached it. The proxy takes a ring's entries in order, so that
    /// covers every entry stamped before the call, also behind a gap that a running kernel
    /// has yet to stamp. Warns after 1 s; goes on (with a warning) only once no ring has
    /// moved for [`PICKUP_STALL`], or when this rank's GIN has failed. A runtime that is being
    /// dropped is still waited for: its proxy carries out what was posted before it stops.
    pub(crate) fn wait_picked_up(&self) {
        let (depth, rings) = (
            u64::from(self.cfg.depth),
            self.cfg.n_contexts as usize * self.cfg.peer_slots as usize,
        );
        let consumed = |ring: usize| self.mem.consumers.word(ring).load(Ordering::Acquire);
        let posted: Vec<u64> = (0..rings)
            .map(|ring| {
                let newest = (0..depth)
                    .map(|k| {
                        let slot = (ring as u64 * depth + k) as usize * 16;
                        // Acquire: as the proxy reads them.
                        self.mem
                            .rings
                            .word(slot + Descriptor::STAMP)
                            .load(Ordering::Acquire)
                    })
                    .max()
                    .unwrap_or(0);
                newest.max(consumed(ring))
            })
            .collect();
        tracing::debug!(
            "rank {}: deregistration: rings posted up to {posted:?}",
            self.cfg.rank
        );
        let t0 = std::time::Instant::now();
        let mut warned = false;
        let mut seen: Vec<u64> = (0..rings).map(consumed).collect();
        let mut moved = t0;
        loop {
            let now: Vec<u64> = (0..rings).map(consumed).collect();
            if now.iter().zip(&posted).all(|(c, p)| c >= p) || self.failed() {
                return;
            }
            if now != seen {
                seen = now;
                moved = std::time::Instant::now();
            }
            if !warned && t0.elapsed() > std::time::Duration::from_secs(1) {
                tracing::warn!(
                    "rank {}: deregistration waits for the GIN proxy to carry out what kernels                      posted (for 1 s now)",
                    self.cfg.rank
                );
                warned = true;
            }
            if moved.elapsed() > PICKUP_STALL {
                tracing::warn!(
                    "rank {}: deregistration goes on: the GIN proxy has not moved for                      {PICKUP_STALL:?}; an operation from the window may fail",
                    self.cfg.rank
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }

    /// Waits until the GPU has carried out queued batch `issued` and every one before it
    /// (fails this rank's GIN after [`DRAIN_LIMIT`]: the GPU stopped; returns at once when
    /// this rank's GIN has failed).
    fn drain(&self, issued: u64) {
        let w = self.landing_word();
        let mut since: Option<std::time::Instant> = None;
        // Acquire: the batch's writes were made before it reported.
        while w.load(Ordering::Acquire) < issued {
            if self.failed() {
                return;
            }
            let t0 = *since.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed() > DRAIN_LIMIT {
                self.fail(Error::Gin {
                    rank: None,
                    reason: format!(
                        "landings queued for the GPU were not carried out in {DRAIN_LIMIT:?}"
                    ),
                });
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Lands `bytes` of operation `f` from `from` at `off` of window `win` (GPU memory) by
    /// stream memory operations on `mover`'s stream, followed in the same batch by the signal
    /// updates that its landing lets through (computed here: the value each signal will hold),
    /// then the batch's number to the landing word. The GPU carries the batch out in order, so
    /// a kernel that sees a signal sees the data before it; nothing waits for it here, and a
    /// signal update by this rank's threads waits for it first ([`Shared::landed`]).
    /// `Ok(false)`: not for this path (host memory, unaligned, too long, or stream memory
    /// operations refused before); the caller lands by copy and calls [`Shared::landed`]. A
    /// batch the driver refuses, or one of too many writes, lands here by copy.
    pub(crate) fn land_values(
        &self,
        from: usize,
        f: &Frame,
        mover: &mut Mover,
        (win, off): (u32, u64),
        bytes: &[u8],
    ) -> std::result::Result<bool, std::result::Result<String, Error>> {
        let pinned = self.registry.pin(win, off, bytes.len())?;
        let addr = pinned.addr;
        if !mover.writes_values(addr, bytes.len()) {
            return Ok(false);
        }
        let mut landing = match self.landing.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        let mut actions = Vec::new();
        landing.landed(from, f, self.cfg.strong_as_weak, |a| actions.push(a));
        // A signal that an earlier batch writes is read once that batch has run: then its
        // value in memory is the truth, a kernel's reset since included.
        let mut done = self.landing_word().load(Ordering::Acquire);
        let last = actions
            .iter()
            .filter_map(|a| landing.queued.values.get(&a.1).copied())
            .max()
            .unwrap_or(0);
        if last > done {
            self.drain(last);
            done = self.landing_word().load(Ordering::Acquire);
        }
        let batch = landing.queued.issued + 1;
        // Acquire: as a kernel would read it.
        let values = batch_values(&actions, |index| {
            self.mem
                .signals
                .word(index as usize)
                .load(Ordering::Acquire)
        });
        let then: Vec<(u64, u64)> = values
            .iter()
            .map(|&(index, v)| (self.mem.signals.device_ptr() + 8 * u64::from(index), v))
            .collect();
        let word = self.mem.consumers.device_ptr() + 8 * self.landing_index() as u64;
        // SAFETY: aligned (`writes_values`); the window stays mapped while `pinned` lives,
        // which is kept below until the batch has run; the signals and the landing word are
        // this rank's mapped memory, which outlives the movers (each synchronises its stream
        // before it goes).
        let queued =
            unsafe { mover.queue_values(addr, bytes, &then, (word, batch)) }.map_err(Err)?;
        if queued {
            self.stats.value_landings.fetch_add(1, Ordering::Relaxed);
            let q = &mut landing.queued;
            q.issued = batch;
            for (index, _) in values {
                q.values.insert(index, batch);
            }
            if q.values.len() > 256 {
                q.values.retain(|_, &mut b| b > done);
            }
            q.pins.push_back((batch, pinned));
            while q.pins.front().is_some_and(|(b, _)| *b <= done) {
                q.pins.pop_front();
            }
        } else {
            // Refused: by copy, then the signals from this thread.
            mover.store_now(addr, bytes).map_err(Err)?;
            self.drain(landing.queued.issued);
            for a in actions {
                self.apply_signal(a);
            }
        }
        Ok(true)
    }

    /// Lets go of the windows of queued landings the GPU has carried out; whether some are
    /// still held (the receive thread calls this until none are, so that a deregistration
    /// waiting for its window goes on).
    pub(crate) fn release_landed(&self) -> bool {
        let mut landing = match self.landing.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        let done = self.landing_word().load(Ordering::Acquire);
        let pins = &mut landing.queued.pins;
        while pins.front().is_some_and(|(b, _)| *b <= done) {
            pins.pop_front();
        }
        !pins.is_empty()
    }

    /// Applies one signal update (release: the data that landed before it is visible to a
    /// kernel that acquires the new value).
    fn apply_signal(&self, (op, index, operand): (SignalOp, u32, u64)) {
        let w = self.mem.signals.word(index as usize);
        match op {
            SignalOp::None => {}
            SignalOp::Inc | SignalOp::Add => {
                w.fetch_add(operand, Ordering::Release);
            }
            SignalOp::Set => w.store(operand, Ordering::Release),
        }
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Put => "put",
        Kind::PutValue => "put_value",
        Kind::Signal => "signal",
        Kind::Close => "close",
        Kind::Refused => "refusal",
        Kind::Failed => "failure notice",
    }
}

impl GinPickUp for Shared {
    fn wait_picked_up(&self) {
        Shared::wait_picked_up(self);
    }
}
