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
use crate::window::{SymmetricMemory, Window};
use crate::{Error, Result};

pub use crate::cuda::multicast::NVLS_ENV;

/// What a device communicator must provide (NCCL's `ncclDevCommRequirements`).
#[doc(alias = "ncclDevCommRequirements")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requirements {
    lsa_barriers: u32,
    lsa_multimem: bool,
}

impl Requirements {
    /// Nothing: no barriers, no multicast.
    pub fn new() -> Self {
        Self::default()
    }

    /// `n` independent LSA barriers (a kernel usually uses one per block: `n ≥ grid size`).
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

    /// Bytes of the resource window these requirements need (before rounding to the
    /// allocation granularity).
    pub fn resource_bytes(&self, lsa_size: usize) -> usize {
        let barriers = LsaBarrierHandle::buffer_bytes(self.lsa_barriers, lsa_size as u32);
        barriers.next_multiple_of(RESOURCE_UNIT).max(RESOURCE_UNIT)
    }
}

/// A device communicator: owns the resource window and the abort flag; [`DevComm::raw`] is
/// the kernel argument. Destroyed on drop (local; do it in the same order on every rank, like
/// window deregistration).
#[doc(alias = "ncclDevComm")]
#[derive(Debug)]
pub struct DevComm {
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
    /// [`Error::Unsupported`] on every rank, before anything is
    /// allocated, when two ranks of a node are different processes on the same GPU (their
    /// kernels would take turns, and a barrier between them could only time out; see
    /// `SYMCOMM_SHARED_GPU` for MPS); the errors of registering its resource window.
    #[doc(alias = "ncclDevCommCreate")]
    pub fn create(comm: &Communicator, req: Requirements) -> Result<DevComm> {
        // Kernels of ranks that cannot run at the same time could only wait for each other
        // until they time out: refuse now, on every rank (emulated kernels all run at once).
        if !crate::backend::is_emulated()? {
            comm.check_devices_run_together()?;
        }
        let bytes = req.resource_bytes(comm.lsa_size());
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
        raw.resource_window = window.device_ptr();
        raw.resource = ResourceWindow {
            lsa_flat_base: d.lsa_flat_base,
            stride4g: d.stride4g,
            mc_offset4k: d.mc_offset4k,
        };
        raw.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers: req.lsa_barriers as i32,
        };
        raw.abort_flag = abort.device_ptr();
        if req.lsa_multimem {
            // Collective; refused on every rank unless every rank opted in (SYMCOMM_NVLS=1).
            raw.lsa_multimem = MultimemHandle {
                mc_base: comm.lsa_multicast_base()?,
            };
        }
        crate::fault::pause_point("devcomm", comm.rank());
        comm.bootstrap().runtime_barrier()?;
        Ok(DevComm {
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
        self.watch.failure("device communicator")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_bytes_hold_the_barrier_layout_in_128_byte_units() {
        // (3n + n·ranks) words: 32 barriers × 8 ranks = (96 + 256) × 4 = 1408 → 1408 (11 units).
        assert_eq!(Requirements::new().lsa_barriers(32).resource_bytes(8), 1408);
        assert_eq!(Requirements::new().lsa_barriers(1).resource_bytes(2), 128);
        assert_eq!(Requirements::new().resource_bytes(8), 128);
    }
}
