//! What a rank's GIN takes — pinned host memory, staging buffers, device memory, file
//! descriptors — computed from the requirements and the job's shape (no allocation: the
//! table for 1024 ranks needs no 1024 ranks), and the same accounting of a running rank.

use symcomm_device::gin::GinConnection;

use super::mover::STAGING_BYTES;
use super::socket::SETUP_FDS;
use crate::cuda::memory::PinnedBytes;

/// The GIN part of a device communicator's requirements (checked by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GinParams {
    pub contexts: u32,
    pub signals: u32,
    pub counters: u32,
    pub queue_depth: u32,
    pub connection: GinConnection,
    pub world_barriers: u32,
    pub rail_barriers: u32,
}

/// One rank's GIN resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GinFootprint {
    /// Pinned host memory mapped into the device, page-rounded as allocated: the rings, the
    /// consumer indices with the landing word, the signals (the kernels' and the barriers')
    /// and the counters.
    pub pinned_bytes: u64,
    /// The staging buffers of the proxy thread and the receive thread (pinned on GPUs, host
    /// memory under emulation).
    pub staging_bytes: u64,
    /// Device memory in the resource window: the producer indices with their cached credit
    /// limits, and the GIN barriers' epochs (each part rounded up to 128 bytes).
    pub device_bytes: u64,
    /// File descriptors: the listener and the receive thread's wake-up descriptor from set-up
    /// on, plus one TCP socket per lane of every connection made since (on the first operation
    /// between two ranks: up to 2 per peer this rank exchanges operations with, 4 when both
    /// dialed at once). The computed footprint ([`crate::Requirements::gin_footprint`]) is
    /// the set-up's.
    pub fds: u64,
}

impl GinFootprint {
    /// Every byte of the footprint.
    pub fn total_bytes(&self) -> u64 {
        self.pinned_bytes + self.staging_bytes + self.device_bytes
    }
}

/// Peer slots (rings per context) of a rank of `world` ranks with LSA teams of `lsa`.
pub(crate) fn peer_slots(connection: GinConnection, world: usize, lsa: usize) -> usize {
    match connection {
        GinConnection::Rail => world / lsa.max(1),
        _ => world,
    }
}

/// Signals including the barriers' (one per team member and barrier).
pub(crate) fn all_signals(p: &GinParams, world: usize, lsa: usize) -> u64 {
    u64::from(p.signals)
        + u64::from(p.world_barriers) * world as u64
        + u64::from(p.rail_barriers) * (world / lsa.max(1)) as u64
}

/// The footprint of one rank of `world` ranks with LSA teams of `lsa` ranks.
pub(crate) fn footprint(p: &GinParams, world: usize, lsa: usize) -> GinFootprint {
    let slots = peer_slots(p.connection, world, lsa) as u64;
    let rings = u64::from(p.contexts) * slots;
    let pinned = |bytes: u64| PinnedBytes::alloc_len(bytes as usize) as u64;
    let unit = |bytes: u64| bytes.next_multiple_of(128);
    GinFootprint {
        pinned_bytes: pinned(rings * u64::from(p.queue_depth) * 128)
            + pinned(rings * 8 + 8)
            + pinned(all_signals(p, world, lsa) * 8)
            + pinned(u64::from(p.counters) * 8),
        staging_bytes: 2 * STAGING_BYTES as u64,
        device_bytes: unit(rings * 16) + unit(u64::from(p.world_barriers + p.rail_barriers) * 8),
        fds: SETUP_FDS as u64,
    }
}
