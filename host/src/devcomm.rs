//! Device communicators: what a kernel needs to synchronise with its LSA peers.
//!
//! [`DevComm::create`] (collective) allocates and registers a **resource window** that holds
//! the LSA barrier state (epochs and per-peer inboxes, laid out as the device crate's
//! `LsaBarrier` expects), zeroes it on every rank before any rank can use it, and fills the
//! plain-data [`symcomm_device::comm::DevComm`] that kernels take by value. It also allocates
//! an **abort flag** in device-mapped host memory: [`DevComm::abort`] raises it, and every
//! device-side wait (barriers, LL loads, the gallery's pipelines) polls it, so a stuck kernel
//! can be released from the host. The communicator's bootstrap raises it too, from whichever
//! thread first learns that a rank died or gave up ([`Bootstrap::watch_failure`]): kernels
//! waiting for a dead peer stop within a poll interval instead of at their own timeout, and
//! [`DevComm::failure`] says why. The flag is host memory the device reads over the bus, so the
//! host can raise it while a kernel spins (a write queued on a stream behind that kernel would
//! never run).
//!
//! [`Bootstrap::watch_failure`]: crate::Bootstrap::watch_failure
//!
//! Multicast (NVLink SHARP) is not used unless requested *and* `SYMCOMM_NVLS=1` is set; the
//! default is unicast barriers, which need nothing from the switch. On the emulated backend
//! ([`crate::backend`]) a requested multicast range needs no opt-in: it is an address range
//! that the device crate's host `multimem` resolves to the LSA peers' copies.

use symcomm_device::comm::{
    DevComm as RawDevComm, LsaBarrierHandle, MultimemHandle, RESOURCE_UNIT, ResourceWindow,
};

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::bootstrap::FailureWatch;
use crate::comm::Communicator;
use crate::cuda::memory::HostMapped;
use crate::gin::{
    DEFAULT_GIN_QUEUE_DEPTH, GinConnection, GinFootprint, GinParams, GinRuntime, GinStats,
    MAX_GIN_BARRIERS, MAX_GIN_CONTEXTS, MAX_GIN_QUEUE_DEPTH, MAX_GIN_SIGNALS,
};
use crate::window::{SymmetricMemory, Window};
use crate::{Error, Result};

pub use crate::cuda::multicast::NVLS_ENV;

/// What a device communicator must provide (NCCL's `ncclDevCommRequirements`).
#[doc(alias = "ncclDevCommRequirements")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirements {
    lsa_barriers: u32,
    lsa_multimem: bool,
    gin_contexts: u32,
    gin_signals: u32,
    gin_counters: u32,
    gin_queue_depth: u32,
    gin_connection: GinConnection,
    world_gin_barriers: u32,
    rail_gin_barriers: u32,
}

impl Default for Requirements {
    fn default() -> Self {
        Requirements {
            lsa_barriers: 0,
            lsa_multimem: false,
            gin_contexts: 0,
            gin_signals: 0,
            gin_counters: 0,
            gin_queue_depth: DEFAULT_GIN_QUEUE_DEPTH,
            gin_connection: GinConnection::Full,
            world_gin_barriers: 0,
            rail_gin_barriers: 0,
        }
    }
}

impl Requirements {
    /// Nothing: no barriers, no multicast.
    pub fn new() -> Self {
        Self::default()
    }

    /// `n` independent LSA barriers (a kernel usually uses one per block: `n ≥ grid size`);
    /// at most [`MAX_LSA_BARRIERS`] ([`DevComm::create`] refuses more).
    pub fn lsa_barriers(mut self, n: u32) -> Self {
        self.lsa_barriers = n;
        self
    }

    /// Asks for an LSA multicast range (NVLink SHARP). On GPUs refused unless
    /// `SYMCOMM_NVLS=1`; always available under emulation.
    pub fn lsa_multimem(mut self, on: bool) -> Self {
        self.lsa_multimem = on;
        self
    }

    /// `n` GIN contexts (independent queues; NCCL's `ginContextCount`), at most
    /// [`MAX_GIN_CONTEXTS`]. 0 (the default) means no GIN: the communicator's `gin` handle is
    /// zero and no proxy runs.
    #[doc(alias = "ginContextCount")]
    pub fn gin_contexts(mut self, n: u32) -> Self {
        self.gin_contexts = n;
        self
    }

    /// `n` GIN signals (shared by the contexts; NCCL's `ginSignalCount`), at most
    /// [`MAX_GIN_SIGNALS`].
    #[doc(alias = "ginSignalCount")]
    pub fn gin_signals(mut self, n: u32) -> Self {
        self.gin_signals = n;
        self
    }

    /// `n` GIN counters (NCCL's `ginCounterCount`), at most [`MAX_GIN_SIGNALS`].
    #[doc(alias = "ginCounterCount")]
    pub fn gin_counters(mut self, n: u32) -> Self {
        self.gin_counters = n;
        self
    }

    /// Entries per GIN ring (a power of two, at most [`MAX_GIN_QUEUE_DEPTH`]; default
    /// [`DEFAULT_GIN_QUEUE_DEPTH`]). A kernel that posts more than this to one peer before
    /// the proxy catches up waits for credit.
    #[doc(alias = "ginQueueDepth")]
    pub fn gin_queue_depth(mut self, n: u32) -> Self {
        self.gin_queue_depth = n;
        self
    }

    /// Which peers GIN connects: every rank ([`GinConnection::Full`], the default) or the rail
    /// team ([`GinConnection::Rail`]: one connection set per node instead of per rank).
    #[doc(alias = "ginConnectionType")]
    pub fn gin_connection(mut self, c: GinConnection) -> Self {
        self.gin_connection = c;
        self
    }

    /// `n` GIN barriers over the world team (NCCL's `worldGinBarrierCount`): each takes one
    /// signal per rank at every rank, past the signals kernels name; at most
    /// [`MAX_GIN_BARRIERS`].
    #[doc(alias = "worldGinBarrierCount")]
    pub fn world_gin_barriers(mut self, n: u32) -> Self {
        self.world_gin_barriers = n;
        self
    }

    /// `n` GIN barriers over the rail team (NCCL's `railGinBarrierCount`); the hybrid
    /// `Barrier` uses rail barrier `index` with LSA barrier `index`. At most
    /// [`MAX_GIN_BARRIERS`].
    #[doc(alias = "railGinBarrierCount")]
    pub fn rail_gin_barriers(mut self, n: u32) -> Self {
        self.rail_gin_barriers = n;
        self
    }

    /// What a rank's GIN with these requirements takes in a job of `world` ranks with LSA
    /// teams of `lsa_size` (no GIN: all zero); computed, nothing is allocated.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for GIN requirements out of range.
    pub fn gin_footprint(&self, world: usize, lsa_size: usize) -> Result<GinFootprint> {
        Ok(self
            .gin_params()?
            .map(|p| crate::gin::footprint_of(&p, world, lsa_size))
            .unwrap_or_default())
    }

    /// The GIN parameters, checked; `None` without GIN.
    fn gin_params(&self) -> Result<Option<GinParams>> {
        if self.gin_contexts == 0 {
            return Ok(None);
        }
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if self.gin_contexts > MAX_GIN_CONTEXTS {
            return bad(format!(
                "gin_contexts({}): at most {MAX_GIN_CONTEXTS}",
                self.gin_contexts
            ));
        }
        for (name, n) in [
            ("gin_signals", self.gin_signals),
            ("gin_counters", self.gin_counters),
        ] {
            if n > MAX_GIN_SIGNALS {
                return bad(format!("{name}({n}): at most {MAX_GIN_SIGNALS}"));
            }
        }
        let d = self.gin_queue_depth;
        if !d.is_power_of_two() || d > MAX_GIN_QUEUE_DEPTH {
            return bad(format!(
                "gin_queue_depth({d}): a power of two from 1 to {MAX_GIN_QUEUE_DEPTH}"
            ));
        }
        for (name, n) in [
            ("world_gin_barriers", self.world_gin_barriers),
            ("rail_gin_barriers", self.rail_gin_barriers),
        ] {
            if n > MAX_GIN_BARRIERS {
                return bad(format!("{name}({n}): at most {MAX_GIN_BARRIERS}"));
            }
        }
        if self.gin_connection == GinConnection::None {
            return bad(format!(
                "gin_connection(None) with gin_contexts({}): ask for 0 contexts for no GIN",
                self.gin_contexts
            ));
        }
        Ok(Some(GinParams {
            contexts: self.gin_contexts,
            signals: self.gin_signals,
            counters: self.gin_counters,
            queue_depth: d,
            connection: self.gin_connection,
            world_barriers: self.world_gin_barriers,
            rail_barriers: self.rail_gin_barriers,
        }))
    }

    /// Bytes of the barrier part of the resource window (the GIN producer indices follow).
    fn barrier_bytes(&self, lsa_size: usize) -> Result<usize> {
        let mut r = *self;
        r.gin_contexts = 0;
        r.resource_bytes(lsa_size)
    }

    /// Bytes of the resource window's barrier part over an LSA team of `lsa_size` (before
    /// rounding to the allocation granularity); [`Error::InvalidArgument`] for more than
    /// [`MAX_LSA_BARRIERS`] barriers or a size that does not fit a `usize`. With GIN, the
    /// producer indices come on top: `gin_contexts × peer slots × 8` bytes (peer slots: the
    /// world size, or the node count with rail connectivity), rounded up to 128.
    pub fn resource_bytes(&self, lsa_size: usize) -> Result<usize> {
        let n = self.lsa_barriers;
        if n > MAX_LSA_BARRIERS {
            return Err(Error::InvalidArgument(format!(
                "lsa_barriers({n}): at most {MAX_LSA_BARRIERS} barriers (the device \
                 communicator counts them in an i32)"
            )));
        }
        let overflow = || {
            Error::InvalidArgument(format!(
                "lsa_barriers({n}) over an LSA team of {lsa_size} ranks needs a barrier buffer \
                 larger than the address space"
            ))
        };
        let ranks = u32::try_from(lsa_size).map_err(|_| overflow())?;
        let barriers = LsaBarrierHandle::checked_buffer_bytes(n, ranks)
            .and_then(|b| b.checked_next_multiple_of(RESOURCE_UNIT))
            .map(|b| b.max(RESOURCE_UNIT))
            .ok_or_else(overflow)?;
        Ok(barriers)
    }
}

/// The most LSA barriers one device communicator holds: the device handle counts them in an
/// `i32` ([`LsaBarrierHandle::n_barriers`]).
pub const MAX_LSA_BARRIERS: u32 = i32::MAX as u32;

/// A device communicator: owns the resource window and the abort flag; [`DevComm::raw`] is
/// the kernel argument. Destroyed on drop (local; do it in the same order on every rank, like
/// window deregistration).
#[doc(alias = "ncclDevComm")]
#[derive(Debug)]
pub struct DevComm {
    // Dropped first: the proxy stops before the memory and flag it uses go.
    gin: Option<GinRuntime>,
    raw: RawDevComm,
    // Field order is drop order: the failure watch (which raises the flag) goes before the
    // flag, and the window before the memory it maps.
    watch: FailureWatch,
    _resource_window: Window,
    _resource_memory: SymmetricMemory,
    abort: Arc<HostMapped<u32>>,
}

impl DevComm {
    /// Collective: every rank of `comm` calls this with the same requirements; creates the
    /// device communicator. Every rank gets the same error if a rank cannot take part.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for requirements that cannot be met (more than
    /// [`MAX_LSA_BARRIERS`] barriers), checked locally before any collective step, so every
    /// rank passing them fails alike; [`Error::Unsupported`] on every rank, before anything is
    /// allocated, when two ranks of a node are different processes on the same GPU (their
    /// kernels would take turns, and a barrier between them could only time out; see
    /// `SYMCOMM_SHARED_GPU` for MPS); the errors of allocating (e.g. [`Error::OutOfMemory`]
    /// under emulation) and registering its resource window. With GIN
    /// ([`Requirements::gin_contexts`] > 0): [`Error::InvalidArgument`] for GIN requirements
    /// out of range (checked locally, before any collective step), [`Error::Mismatch`] on every
    /// rank when ranks ask for different GIN requirements or transports
    /// ([`crate::gin::TRANSPORT_ENV`]), and the errors of setting up the transport's
    /// connections, the same on every rank.
    #[doc(alias = "ncclDevCommCreate")]
    pub fn create(comm: &Communicator, req: Requirements) -> Result<DevComm> {
        let gin = req.gin_params()?;
        let barrier_bytes = req.barrier_bytes(comm.lsa_size())?;
        // The GIN producer indices (one u64 per ring) follow the barriers, then the GIN
        // barriers' epochs (one u64 each).
        let gin_bytes = gin.map_or(0, |g| {
            let slots = match g.connection {
                GinConnection::Rail => comm.size() / comm.lsa_size().max(1),
                _ => comm.size(),
            };
            // Producer indices and cached credit limits: two u64 per ring.
            (g.contexts as usize * slots * 16).next_multiple_of(RESOURCE_UNIT)
        });
        let epoch_bytes = gin.map_or(0, |g| {
            ((g.world_barriers + g.rail_barriers) as usize * 8).next_multiple_of(RESOURCE_UNIT)
        });
        let bytes = barrier_bytes + gin_bytes + epoch_bytes;
        let n_barriers = i32::try_from(req.lsa_barriers).map_err(|_| {
            Error::Internal(format!("{} barriers passed the check", req.lsa_barriers))
        })?;
        // Kernels of ranks that cannot run at the same time could only wait for each other
        // until they time out: refuse now, on every rank (emulated kernels all run at once).
        if !crate::backend::is_emulated()? {
            comm.check_devices_run_together()?;
        }
        // ANCHOR: zero_then_register
        let memory = SymmetricMemory::alloc(comm, bytes)?;
        // Zero before registering: registration ends with a barrier of the LSA team, so no peer
        // can write into our inboxes before they are zeroed.
        memory.buffer().fill_bytes(0)?;
        let window = comm.register_window(&memory)?;
        // ANCHOR_END: zero_then_register
        let abort = Arc::new(HostMapped::new(0u32)?);
        let raise = Arc::clone(&abort);
        // Relaxed: raising the flag publishes nothing else (kernels read it relaxed, .sys).
        let watch = comm
            .bootstrap()
            .watch_failure(move |_| raise.atomic().store(1, Ordering::Relaxed));
        let d = window.descriptor();
        let mut raw = RawDevComm::new(
            comm.rank() as i32,
            comm.size() as i32,
            comm.lsa_rank() as i32,
            comm.lsa_size() as i32,
        );
        raw.resource_window = window.handle().addr();
        raw.resource = ResourceWindow {
            lsa_flat_base: d.lsa_flat_base,
            stride4g: d.stride4g,
            mc_offset4k: d.mc_offset4k,
        };
        raw.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers,
        };
        raw.abort_flag = abort.device_ptr();
        let gin = match gin {
            Some(params) => {
                let producers = raw.resource_local_ptr((barrier_bytes / RESOURCE_UNIT) as u32);
                let epochs =
                    raw.resource_local_ptr(((barrier_bytes + gin_bytes) / RESOURCE_UNIT) as u32);
                let g = GinRuntime::start(
                    comm,
                    params,
                    (
                        producers as u64,
                        epochs as u64,
                        (gin_bytes + epoch_bytes) as u64,
                    ),
                    Arc::clone(&abort),
                )?;
                raw.gin = g.handle();
                Some(g)
            }
            None => None,
        };
        if req.lsa_multimem {
            // Collective; refused on every rank unless every rank opted in (SYMCOMM_NVLS=1).
            raw.lsa_multimem = MultimemHandle {
                mc_base: comm.lsa_multicast_base()?,
            };
        }
        crate::fault::pause_point("devcomm", comm.rank());
        comm.bootstrap().runtime_barrier()?;
        Ok(DevComm {
            gin,
            raw,
            watch,
            _resource_window: window,
            _resource_memory: memory,
            abort,
        })
    }

    /// The plain-data communicator kernels take by value.
    pub fn raw(&self) -> RawDevComm {
        self.raw
    }

    /// Raises the abort flag: every device-side wait of kernels using this communicator
    /// returns `Aborted` soon after (they poll it). Irreversible for this communicator's
    /// barriers. Relaxed: raising it orders no other memory.
    pub fn abort(&self) {
        self.abort.atomic().store(1, Ordering::Relaxed);
    }

    /// True once the flag is raised: by [`DevComm::abort`], or because the communicator's
    /// bootstrap failed ([`DevComm::failure`]).
    pub fn is_aborted(&self) -> bool {
        self.abort.atomic().load(Ordering::Relaxed) != 0
    }

    /// Why the communicator failed (a rank died, gave up or broke the protocol), as every later
    /// call of it reports; `None` while it is healthy. After a kernel reported an abort this
    /// names the cause; `None` then means [`DevComm::abort`] was called locally.
    pub fn failure(&self) -> Option<Error> {
        if let Some(e) = self.gin.as_ref().and_then(GinRuntime::failure) {
            return Some(e);
        }
        self.watch.failure("device communicator")
    }

    /// The GIN runtime (tests that forge wire frames).
    #[cfg(test)]
    pub(crate) fn gin_runtime(&self) -> Option<&GinRuntime> {
        self.gin.as_ref()
    }

    /// What this rank's GIN takes, from its own allocations and connections (`None` without
    /// GIN); [`Requirements::gin_footprint`] computes the same without creating anything.
    pub fn gin_footprint(&self) -> Option<GinFootprint> {
        self.gin.as_ref().map(GinRuntime::footprint)
    }

    /// What the GIN transport has carried for this rank (`None` without GIN).
    pub fn gin_stats(&self) -> Option<GinStats> {
        self.gin.as_ref().map(GinRuntime::stats)
    }

    /// The host's view of this rank's GIN signal `index` (acquire), `None` without GIN or for
    /// an index out of range.
    pub fn gin_signal(&self, index: u32) -> Option<u64> {
        self.gin.as_ref()?.signal(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_bytes_hold_the_barrier_layout_in_128_byte_units() {
        // (3n + n·ranks) words: 32 barriers × 8 ranks = (96 + 256) × 4 = 1408 → 1408 (11 units).
        let bytes = |n, ranks| Requirements::new().lsa_barriers(n).resource_bytes(ranks);
        assert_eq!(bytes(32, 8).unwrap(), 1408);
        assert_eq!(bytes(1, 2).unwrap(), 128);
        assert_eq!(bytes(0, 8).unwrap(), 128);
        // The largest count: 2^31 - 1 barriers · 11 words · 4 bytes, in whole units.
        let largest = (i32::MAX as usize * 11 * 4).next_multiple_of(128);
        assert_eq!(bytes(MAX_LSA_BARRIERS, 8).unwrap(), largest);
    }

    #[test]
    fn barrier_counts_beyond_i32_and_sizes_beyond_usize_are_refused() {
        let bytes = |n, ranks| Requirements::new().lsa_barriers(n).resource_bytes(ranks);
        for n in [MAX_LSA_BARRIERS + 1, u32::MAX] {
            let msg = bytes(n, 2).unwrap_err().to_string();
            assert_eq!(
                msg,
                format!(
                    "invalid argument: lsa_barriers({n}): at most 2147483647 barriers (the \
                     device communicator counts them in an i32)"
                )
            );
        }
        let msg = bytes(MAX_LSA_BARRIERS, usize::MAX).unwrap_err().to_string();
        assert!(
            msg.contains("lsa_barriers(2147483647) over an LSA team of"),
            "{msg}"
        );
        assert!(msg.contains("larger than the address space"), "{msg}");
    }
}
