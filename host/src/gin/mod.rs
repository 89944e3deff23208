//! The host half of GIN (GPU-initiated networking): the memory kernels post into, the proxy
//! thread that drains it, and the transport that carries operations between ranks.
//!
//! A device communicator created with GIN requirements ([`crate::Requirements::gin_contexts`]
//! and the rest) gets, per rank:
//! - **rings**: one per (context, peer slot), `queue_depth` 128-byte descriptors each, in
//!   pinned host memory mapped into the device (the layout of
//!   [`symcomm_device::gin::descriptor`]); the **producer** indices live in the resource window
//!   (device memory, where kernels take ring entries with an atomic add), the **consumer**
//!   indices in mapped host memory (written by the proxy when it is done with an entry, read by
//!   kernels for credit and [`flush`](symcomm_device::gin::Gin::flush));
//! - **signals** and **counters**: `u64` arrays in mapped host memory; the receiving proxy
//!   updates signals, the sending proxy counters, both with release stores that kernels
//!   acquire;
//! - a **proxy thread** (`symcomm-gin<rank>`) that polls the rings in order, checks each
//!   descriptor against this rank's windows and requirements, hands the operation to the
//!   transport, bumps its counter once the source has been read, and then advances the
//!   consumer index;
//! - the **transport**: [`SOCKET`](TRANSPORT_ENV) (TCP between proxies, see `socket.rs`),
//!   selected by `SYMCOMM_GIN_TRANSPORT=auto|socket`, with its receive thread
//!   (`symcomm-gin-rx<rank>`) that checks and lands what peers send.
//!
//! **Contexts and `gin_wins`**: every window has one GIN id (its registration number + 1, the
//! same on every rank), written into all four `gin_wins` slots of its descriptor; context `c`
//! reads slot `c mod 4`. A transport with one registration per network device (an RDMA one)
//! would give the slots different keys and spread contexts over them.
//!
//! **Idle CPU**: the proxy spins (yielding) for [`SPIN`] after its last descriptor, then sleeps
//! 50 µs at a time, and 1 ms at a time after [`NAP_AFTER`] of idleness: about 1000 wake-ups a
//! second, well under 1% of a core, while an active kernel sees sub-10-µs pickup. The receive
//! thread polls its connections without blocking (yielding between polls) for 100 µs after a
//! frame, then blocks in `poll`.
//!
//! **Failure**: a descriptor or frame that breaks the rules (a put outside a window, an unknown
//! window, an index out of range, a peer that is not connected, a connection lost without
//! notice) fails the device communicator on this rank: the error is kept
//! ([`crate::DevComm::failure`]), the abort flag is raised so that every device wait returns
//! `Aborted`, the peer whose operation was refused is told why, and every connected peer gets a
//! failure notice (best effort, never blocking), so that none keeps waiting for this rank.

mod footprint;
mod landing;
mod mover;
mod registry;
mod socket;
mod state;
#[cfg(test)]
mod tests;
mod transport;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use footprint::GinFootprint;
pub(crate) use footprint::GinParams;
pub use mover::TEST_VALUE_WRITES_ENV;
pub use socket::TEST_DELAY_ENV;
pub use symcomm_device::gin::GinConnection;
use symcomm_device::gin::{Descriptor, GinHandle, Op};

use crate::comm::Communicator;
use crate::cuda::memory::{HostMapped, PinnedBytes};
use crate::device::Device;
use crate::{Error, Result};
use landing::Landing;
use mover::Mover;
use registry::Registry;
use state::{Config, GinMemory, Shared, Stats, Target};
use transport::Transport;
use wire::{Frame, Kind};

/// Bytes of every live GIN pinned allocation of this process (rings, indices, signals,
/// counters and staging buffers of every rank it runs), as allocated: what
/// [`GinFootprint`]'s accounting is checked against.
pub fn pinned_bytes_live() -> u64 {
    crate::cuda::memory::pinned_bytes_live()
}

/// The footprint of one rank (see [`crate::Requirements::gin_footprint`]).
pub(crate) fn footprint_of(p: &GinParams, world: usize, lsa: usize) -> GinFootprint {
    footprint::footprint(p, world, lsa)
}

/// Selects the GIN transport: `auto` (the default) or `socket`.
pub const TRANSPORT_ENV: &str = "SYMCOMM_GIN_TRANSPORT";
/// Most GIN contexts of one device communicator.
pub const MAX_GIN_CONTEXTS: u32 = 64;
/// Most GIN signals (and, separately, counters) of one device communicator.
pub const MAX_GIN_SIGNALS: u32 = 1 << 20;
/// Most GIN barriers of one kind (world or rail) of one device communicator.
pub const MAX_GIN_BARRIERS: u32 = 1 << 16;
/// Largest GIN queue depth (entries per ring).
pub const MAX_GIN_QUEUE_DEPTH: u32 = 1 << 16;
/// The queue depth when none is asked for.
pub const DEFAULT_GIN_QUEUE_DEPTH: u32 = 128;
/// How long the proxy spins after its last descriptor before it sleeps.
pub const SPIN: Duration = Duration::from_micros(200);
/// Idleness after which the proxy sleeps 1 ms at a time.
pub const NAP_AFTER: Duration = Duration::from_millis(20);

/// What the transport has carried for this rank: the proof that data crossed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GinStats {
    /// Bytes written to connections (headers and data).
    pub bytes_sent: u64,
    /// Bytes read from connections (headers and data).
    pub bytes_received: u64,
    /// Operations sent.
    pub frames_sent: u64,
    /// Operations received.
    pub frames_received: u64,
    /// Small puts into GPU windows landed by one batch of stream memory operations that also
    /// carries the signal updates they release (none under emulation; the others land by
    /// copy, or by such writes that a thread waits for).
    pub value_landings: u64,
}

/// A rank's running GIN: owned by its device communicator; stopped on drop.
pub(crate) struct GinRuntime {
    /// The GIN part of the resource window (producers and barrier epochs).
    device_bytes: u64,
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
    proxy: Option<JoinHandle<()>>,
    handle: GinHandle,
}

impl std::fmt::Debug for GinRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GinRuntime")
            .field("handle", &self.handle)
            .finish()
    }
}

impl GinRuntime {
    /// Collective: sets up GIN for `comm` (memory, transport connections, proxy thread).
    /// `producers` and `epochs` are the device addresses of the producer indices (one `u64`
    /// per ring) and of the GIN barriers' epochs (one `u64` per barrier), zeroed device
    /// memory of `device_bytes` together; `abort` the device communicator's flag.
    pub(crate) fn start(
        comm: &Communicator,
        params: GinParams,
        (producers, epochs, device_bytes): (u64, u64, u64),
        abort: Arc<HostMapped<u32>>,
    ) -> Result<GinRuntime> {
        let me = comm.rank();
        let transport = std::env::var(TRANSPORT_ENV).unwrap_or_default();
        // The user's signals, then one per team member for every GIN barrier.
        let all_signals = footprint::all_signals(&params, comm.size(), comm.lsa_size());
        let barrier_signals = all_signals - u64::from(params.signals);
        let prepared = (|| {
            if all_signals > u64::from(u32::MAX) {
                return Err(Error::InvalidArgument(format!(
                    "GIN: {} signals and {barrier_signals} barrier signals do not fit a u32 index",
                    params.signals
                )));
            }
            if !matches!(transport.as_str(), "" | "auto" | "socket") {
                return Err(Error::InvalidArgument(format!(
                    "{TRANSPORT_ENV}={transport}: the GIN transports are auto and socket"
                )));
            }
            let peer_slots =
                footprint::peer_slots(params.connection, comm.size(), comm.lsa_size()) as u32;
            let rings = params.contexts as usize * peer_slots as usize;
            let mem = GinMemory {
                rings: PinnedBytes::new(rings * params.queue_depth as usize * 128)?,
                consumers: PinnedBytes::new(rings * 8 + 8)?,
                signals: PinnedBytes::new(all_signals as usize * 8)?,
                counters: PinnedBytes::new(params.counters as usize * 8)?,
            };
            let device = Device::for_rank(comm)?;
            Ok((peer_slots, mem, device))
        })();
        let settings = [
            (
                "transport",
                if transport.is_empty() {
                    "auto".into()
                } else {
                    transport.clone()
                },
            ),
            ("contexts", params.contexts.to_string()),
            ("signals", params.signals.to_string()),
            ("counters", params.counters.to_string()),
            ("queue depth", params.queue_depth.to_string()),
            ("world barriers", params.world_barriers.to_string()),
            ("rail barriers", params.rail_barriers.to_string()),
            ("connection", format!("{:?}", params.connection)),
        ];
        comm.agree(
            "GIN requirements",
            "GIN",
            prepared.as_ref().err(),
            &settings,
        )?;
        let (peer_slots, mem, device) = prepared?;
        let cfg = Config {
            rank: me,
            lsa_rank: comm.lsa_rank(),
            lsa_size: comm.lsa_size(),
            n_contexts: params.contexts,
            n_signals: all_signals as u32,
            n_counters: params.counters,
            depth: params.queue_depth,
            peer_slots,
            connection: params.connection,
            strong_as_weak: cfg!(feature = "gin-strong-as-weak"),
        };
        let handle = GinHandle {
            rings: mem.rings.device_ptr(),
            producers,
            consumers: mem.consumers.device_ptr(),
            signals: mem.signals.device_ptr(),
            counters: mem.counters.device_ptr(),
            n_contexts: params.contexts,
            queue_depth: params.queue_depth,
            n_signals: params.signals,
            n_counters: params.counters,
            peer_slots,
            connection: params.connection as u32,
            barrier_epochs: epochs,
            barrier_signals: params.signals,
            world_barriers: params.world_barriers,
            rail_barriers: params.rail_barriers,
            reserved: 0,
        };
        let shared = Arc::new(Shared {
            cfg,
            mem,
            registry: Registry::new(Arc::clone(comm.gin_table())),
            stats: Stats::default(),
            abort,
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            landing: Mutex::new(Landing::default()),
            notify: std::sync::OnceLock::new(),
            reporter: comm.bootstrap().failure_reporter(),
        });
        let transport: Arc<dyn Transport> = Arc::new(socket::Sockets::connect(
            comm,
            Arc::clone(&shared),
            &device,
        )?);
        let dyn_shared: Arc<dyn crate::symmem::state::GinPickUp> = shared.clone();
        comm.gin_runtimes().add(Arc::downgrade(&dyn_shared));
        let (sh, tr) = (Arc::clone(&shared), Arc::clone(&transport));
        let proxy = Mover::new(&device).and_then(|mover| {
            std::thread::Builder::new()
                .name(format!("symcomm-gin{me}"))
                .spawn(move || proxy(sh, tr, mover))
                .map_err(|e| Error::Io {
                    what: "starting the GIN proxy thread".into(),
                    source: e,
                })
        });
        // The last rank-local step: every rank learns whether every rank's GIN started.
        let started = comm.agree("GIN start", "GIN", proxy.as_ref().err(), &[]);
        let proxy = match (proxy, started) {
            (Ok(p), Ok(())) => p,
            (proxy, started) => {
                shared.stop.store(true, Ordering::Release);
                let err = match proxy {
                    Ok(p) => {
                        let _ = p.join();
                        started.err()
                    }
                    Err(e) => Some(e),
                };
                transport.close();
                return Err(err.unwrap_or_else(|| Error::Internal("GIN start failed".into())));
            }
        };
        tracing::info!(
            "rank {me}: GIN over sockets: {} contexts × {peer_slots} peer slots, depth {}, {} \
             signals, {} counters",
            params.contexts,
            params.queue_depth,
            params.signals,
            params.counters
        );
        Ok(GinRuntime {
            device_bytes,
            shared,
            transport,
            proxy: Some(proxy),
            handle,
        })
    }

    /// What kernels find in `DevComm::gin`.
    pub(crate) fn handle(&self) -> GinHandle {
        self.handle
    }

    /// The failure of this rank's GIN, if any.
    pub(crate) fn failure(&self) -> Option<Error> {
        let reason = self.shared.failure.lock().ok()?.clone()?;
        Some(Error::Gin {
            rank: Some(self.shared.cfg.rank),
            reason,
        })
    }

    /// This rank's resources, from its own allocations and connections.
    pub(crate) fn footprint(&self) -> GinFootprint {
        let m = &self.shared.mem;
        let len = |b: &PinnedBytes| PinnedBytes::alloc_len(b.len()) as u64;
        GinFootprint {
            pinned_bytes: len(&m.rings) + len(&m.consumers) + len(&m.signals) + len(&m.counters),
            staging_bytes: 2 * mover::STAGING_BYTES as u64,
            device_bytes: self.device_bytes,
            fds: self.transport.fds() as u64,
        }
    }

    /// The transport's counts so far.
    pub(crate) fn stats(&self) -> GinStats {
        let s = &self.shared.stats;
        GinStats {
            bytes_sent: s.bytes_sent.load(Ordering::Relaxed),
            bytes_received: s.bytes_received.load(Ordering::Relaxed),
            frames_sent: s.frames_sent.load(Ordering::Relaxed),
            frames_received: s.frames_received.load(Ordering::Relaxed),
            value_landings: s.value_landings.load(Ordering::Relaxed),
        }
    }

    /// Host access to signal `index` (tests, host-side waits; barrier signals included).
    pub(crate) fn signal(&self, index: u32) -> Option<u64> {
        (index < self.shared.cfg.n_signals).then(|| {
            self.shared
                .mem
                .signals
                .word(index as usize)
                .load(Ordering::Acquire)
        })
    }

    /// Test-only: sends a forged frame to `peer`.
    #[cfg(test)]
    pub(crate) fn send_raw(&self, peer: usize, f: &Frame, body: &[u8]) -> Result<()> {
        self.transport.send_raw(peer, f, body)
    }
}

impl Drop for GinRuntime {
    fn drop(&mut self) {
        // No kernel may wait on the rings and signals freed below (one still running is
        // released: its waits return `Aborted`). The proxy drains what kernels posted, then
        // stops; then the transport says goodbye.
        self.shared.abort.atomic().store(1, Ordering::Relaxed);
        self.shared.stop.store(true, Ordering::Release);
        if let Some(p) = self.proxy.take() {
            let _ = p.join();
        }
        self.transport.close();
    }
}

/// The proxy thread: drains the rings until asked to stop (see the module docs).
fn proxy(shared: Arc<Shared>, transport: Arc<dyn Transport>, mut mover: Mover) {
    if let Err(e) = mover.bind() {
        return shared.fail(e);
    }
    let cfg = shared.cfg;
    let rings = cfg.n_contexts as usize * cfg.peer_slots as usize;
    let depth = cfg.depth as u64;
    let mut heads = vec![0u64; rings];
    let mut last_work = Instant::now();
    loop {
        let mut busy = false;
        for (ring, head) in heads.iter_mut().enumerate() {
            for _ in 0..64 {
                if shared.failed() {
                    return;
                }
                let idx = *head;
                let base = (ring as u64 * depth + (idx & (depth - 1))) as usize * 16;
                let stamp = shared.mem.rings.word(base + Descriptor::STAMP);
                if stamp.load(Ordering::Acquire) != idx + 1 {
                    break;
                }
                let mut d = Descriptor::default();
                for (k, w) in d.words.iter_mut().enumerate().take(Descriptor::STAMP) {
                    *w = shared.mem.rings.word(base + k).load(Ordering::Relaxed);
                }
                let context = (ring / cfg.peer_slots as usize) as u32;
                let peer = shared.world_of(ring % cfg.peer_slots as usize);
                if let Err(e) = process(&shared, &*transport, &mut mover, context, peer, idx, &d) {
                    return shared.fail(e);
                }
                // Release: we are done reading the entry (and its source) before the kernel
                // may reuse either.
                shared
                    .mem
                    .consumers
                    .word(ring)
                    .store(idx + 1, Ordering::Release);
                *head += 1;
                busy = true;
            }
        }
        if busy {
            last_work = Instant::now();
            continue;
        }
        if shared.stopping() || shared.failed() {
            return;
        }
        let idle = last_work.elapsed();
        if idle < SPIN {
            std::thread::yield_now();
        } else if idle < NAP_AFTER {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Carries out one descriptor posted by this rank's kernels.
fn process(
    shared: &Shared,
    transport: &dyn Transport,
    mover: &mut Mover,
    context: u32,
    peer: usize,
    seq: u64,
    d: &Descriptor,
) -> Result<()> {
    let me = shared.cfg.rank;
    let bad = |what: String| {
        Error::InvalidArgument(format!(
            "GIN: a kernel of rank {me} posted {what} (context {context}, to rank {peer})"
        ))
    };
    let op = d
        .op()
        .ok_or_else(|| bad(format!("an unknown operation {}", d.words[0] as u8)))?;
    let signal_op = d.signal_op().ok_or_else(|| {
        bad(format!(
            "an unknown signal action {}",
            (d.words[0] >> 8) as u8
        ))
    })?;
    let mut f = Frame::new(match op {
        Op::Put => Kind::Put,
        Op::PutValue => Kind::PutValue,
        Op::Signal => Kind::Signal,
    });
    f.signal_op = signal_op;
    f.strong = d.strong();
    f.context = context;
    f.signal = d.signal();
    f.signal_value = d.signal_value();
    f.seq = seq;
    f.dst_win = d.dst_win();
    f.dst_off = d.dst_off();
    f.value = d.value();
    f.value_size = d.value_size().min(255) as u8;
    if let Some(c) = d.counter()
        && c >= shared.cfg.n_counters
    {
        return Err(bad(format!(
            "counter {c} (this communicator has {} counters)",
            shared.cfg.n_counters
        )));
    }
    let src = match op {
        Op::Put => {
            let (bytes, off, win) = (d.bytes(), d.src_off(), d.src_win());
            let size = shared.registry.size(win).ok_or_else(|| {
                bad(format!(
                    "a put from window {win}, which this rank has not registered"
                ))
            })?;
            if off.checked_add(bytes).is_none_or(|end| end > size as u64) {
                return Err(bad(format!(
                    "a put of {bytes} bytes from window {win} at offset {off}, beyond its {size} \
                     bytes"
                )));
            }
            f.bytes = bytes;
            Some((win, off, bytes as usize))
        }
        _ => None,
    };
    if peer == me {
        // A put to itself: the same checks and ordering as a peer's, without the wire.
        let target = shared.check_incoming(me, &f).map_err(bad)?;
        shared.admit(me, &f).map_err(bad)?;
        let moved = match (target, src) {
            (Target::Bytes { win, off, len }, Some((sw, so, _))) => {
                mover.copy(&shared.registry, (win, off), (sw, so), len)
            }
            (Target::Bytes { win, off, len }, None) => {
                mover.write(&shared.registry, (win, off), &f.value.to_le_bytes()[..len])
            }
            (Target::Nothing, _) => Ok(()),
        };
        match moved {
            Ok(()) => {}
            Err(Ok(why)) => return Err(bad(why)),
            Err(Err(e)) => return Err(e),
        }
        shared.landed(me, &f);
    } else {
        transport.send(peer, &f, src, mover)?;
    }
    if let Some(c) = d.counter() {
        // Release: the source has been read before the kernel sees the count.
        shared
            .mem
            .counters
            .word(c as usize)
            .fetch_add(1, Ordering::Release);
    }
    Ok(())
}
