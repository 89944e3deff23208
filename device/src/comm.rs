//! `DevComm`: everything a kernel needs to know about its communicator, passed **by value**
//! as a kernel argument (it lives in the kernel's parameter space, so reading a field costs no
//! global-memory load).
//!
//! The host runtime fills it (`DevComm::create` on the host side, with the resource window
//! allocated and zeroed); kernels only read it. It is plain data: `#[repr(C)]`, `Copy`, device
//! addresses as `u64`, no references, a fixed layout asserted at compile time, and a
//! [`magic`](DevComm::magic) + [`version`](DevComm::version) header so a kernel can refuse a
//! struct written by an incompatible runtime ([`DevComm::is_compatible`]).
//!
//! The **resource window** is a window the runtime allocates per `DevComm` for internal state
//! (barrier epochs and inboxes, LL buffers). Buffers in it are named by handles in units of
//! [`RESOURCE_UNIT`] bytes. Its three hot fields are copied into [`DevComm::resource`] so that
//! finding a peer's barrier inbox needs no dependent load.

use crate::gin::GinHandle;
use crate::team::Team;
use crate::util::{add4g, idiv_fast32, idiv_rcp32};

/// `DevComm::magic` of a struct written by a symcomm runtime ("SYMC").
pub const DEVCOMM_MAGIC: u32 = 0x434d_5953;

/// The layout version of [`DevComm`] this crate was compiled with. Bumped on every layout or
/// meaning change.
pub const DEVCOMM_VERSION: u32 = 3;

/// Resource handles count in units of this many bytes (as NCCL's `ncclDevResourceHandle_t`).
pub const RESOURCE_UNIT: usize = 128;

/// The LSA barriers of a communicator: where their buffer is and how many there are.
///
/// The buffer (in the resource window, one copy per rank, zeroed at creation) holds
/// `3 * n_barriers + n_barriers * lsa_size` `u32` words; see [`crate::barrier`].
#[doc(alias = "ncclLsaBarrierHandle")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LsaBarrierHandle {
    /// Offset of the barrier buffer in the resource window, in [`RESOURCE_UNIT`]s.
    pub buf_handle: u32,
    /// Number of independent barriers (valid barrier indices are `0..n_barriers`).
    pub n_barriers: i32,
}

impl LsaBarrierHandle {
    /// Size in bytes of the buffer for `n_barriers` barriers over a team of `n_ranks`:
    /// `(3 * n_barriers + n_barriers * n_ranks) * 4`.
    #[doc(alias = "ncclLsaBarrierCreateRequirement")]
    pub const fn buffer_bytes(n_barriers: u32, n_ranks: u32) -> usize {
        (3 * n_barriers as usize + n_barriers as usize * n_ranks as usize) * 4
    }

    /// [`buffer_bytes`](Self::buffer_bytes), or `None` when the size does not fit a `usize`
    /// (for counts that come from a user: `n_barriers · (3 + n_ranks) · 4` exceeds 2^64 for
    /// large enough ones).
    pub const fn checked_buffer_bytes(n_barriers: u32, n_ranks: u32) -> Option<usize> {
        // `as usize` keeps every u32 on the 64-bit targets the crate builds for.
        let words = match (n_ranks as usize).checked_add(3) {
            Some(per_barrier) => per_barrier.checked_mul(n_barriers as usize),
            None => None,
        };
        match words {
            Some(words) => words.checked_mul(4),
            None => None,
        }
    }
}

/// A multicast (NVLink SHARP) address range of a team: its base address, 0 when the team has
/// no multicast object.
#[doc(alias = "ncclMultimemHandle")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MultimemHandle {
    /// Device address of byte 0 of the team's multicast range (`mcBasePtr`); 0 = none.
    pub mc_base: u64,
}

impl MultimemHandle {
    /// True when there is a multicast range.
    #[inline(always)]
    pub const fn is_present(&self) -> bool {
        self.mc_base != 0
    }
}

/// The hot fields of the resource window, inlined into [`DevComm`]. Same meanings as the
/// [`Window`](crate::window::Window) fields of the same names.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResourceWindow {
    /// Address of the resource window's byte 0 in LSA rank 0's slot of the flat VA.
    pub lsa_flat_base: u64,
    /// Per-rank slot size of the flat VA in units of 4 GiB.
    pub stride4g: u32,
    /// Offset of the resource window in the multicast range, in 4 KiB units.
    pub mc_offset4k: u32,
}

/// The device-side communicator (see the module docs). Passed by value to kernels.
#[doc(alias = "ncclDevComm")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevComm {
    /// [`DEVCOMM_MAGIC`] when written by a symcomm runtime.
    pub magic: u32,
    /// The [`DEVCOMM_VERSION`] of the layout the runtime wrote.
    pub version: u32,
    /// This rank in the world (the whole communicator), `0..n_ranks`.
    pub rank: i32,
    /// Number of ranks in the world.
    pub n_ranks: i32,
    /// `idiv_rcp32(n_ranks)` (see [`crate::util::idiv_fast32`]).
    pub n_ranks_rcp32: u32,
    /// This rank in its LSA team, `0..lsa_size`.
    pub lsa_rank: i32,
    /// Number of ranks in the LSA team (ranks whose memory this GPU can load from / store to;
    /// consecutive world ranks, `n_ranks % lsa_size == 0`).
    pub lsa_size: i32,
    /// `idiv_rcp32(lsa_size)`.
    pub lsa_size_rcp32: u32,
    /// Device address of the resource window's [`Window`](crate::window::Window)
    /// descriptor; 0 when the communicator has no resources.
    pub resource_window: u64,
    /// The resource window's hot fields (copies of the descriptor's).
    pub resource: ResourceWindow,
    /// The LSA team's multicast range (`mc_base == 0` unless multimem was requested).
    pub lsa_multimem: MultimemHandle,
    /// The LSA barriers.
    pub lsa_barrier: LsaBarrierHandle,
    /// Device address of a `u32` abort flag (device or mapped host memory); waits give up with
    /// [`WaitError::Aborted`](crate::wait::WaitError::Aborted) once it is non-zero. 0 = none.
    pub abort_flag: u64,
    /// The GIN state (all zero when the communicator has no GIN; see [`crate::gin`]).
    pub gin: GinHandle,
}

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<LsaBarrierHandle>() == 8);
    assert!(size_of::<MultimemHandle>() == 8);
    assert!(size_of::<ResourceWindow>() == 16);
    assert!(offset_of!(ResourceWindow, lsa_flat_base) == 0);
    assert!(offset_of!(ResourceWindow, stride4g) == 8);
    assert!(offset_of!(ResourceWindow, mc_offset4k) == 12);
    assert!(size_of::<DevComm>() == 168);
    assert!(align_of::<DevComm>() == 8);
    assert!(offset_of!(DevComm, magic) == 0);
    assert!(offset_of!(DevComm, version) == 4);
    assert!(offset_of!(DevComm, rank) == 8);
    assert!(offset_of!(DevComm, n_ranks) == 12);
    assert!(offset_of!(DevComm, n_ranks_rcp32) == 16);
    assert!(offset_of!(DevComm, lsa_rank) == 20);
    assert!(offset_of!(DevComm, lsa_size) == 24);
    assert!(offset_of!(DevComm, lsa_size_rcp32) == 28);
    assert!(offset_of!(DevComm, resource_window) == 32);
    assert!(offset_of!(DevComm, resource) == 40);
    assert!(offset_of!(DevComm, lsa_multimem) == 56);
    assert!(offset_of!(DevComm, lsa_barrier) == 64);
    assert!(offset_of!(DevComm, abort_flag) == 72);
    assert!(offset_of!(DevComm, gin) == 80);
};

// `DevComm` is a kernel argument, so `bytemuck::Pod` (as every by-value argument of a
// `#[kernel]`), and so are the handles inside it.
// SAFETY: for this impl and the seven below: `repr(C)` structs of integers whose offsets and
// sizes are asserted above to leave no padding; every bit pattern is a value.
unsafe impl bytemuck::Zeroable for DevComm {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for DevComm {}
// SAFETY: see above.
unsafe impl bytemuck::Zeroable for ResourceWindow {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for ResourceWindow {}
// SAFETY: see above.
unsafe impl bytemuck::Zeroable for MultimemHandle {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for MultimemHandle {}
// SAFETY: see above.
unsafe impl bytemuck::Zeroable for LsaBarrierHandle {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for LsaBarrierHandle {}

impl DevComm {
    /// A communicator header for `rank` of `n_ranks` with LSA rank `lsa_rank` of `lsa_size`:
    /// magic, version and reciprocals set, no resource window, no multicast, no barriers, no
    /// abort flag, no GIN. The host runtime fills in the rest.
    ///
    /// `n_ranks` and `lsa_size` must be at least 1.
    pub const fn new(rank: i32, n_ranks: i32, lsa_rank: i32, lsa_size: i32) -> DevComm {
        DevComm {
            magic: DEVCOMM_MAGIC,
            version: DEVCOMM_VERSION,
            rank,
            n_ranks,
            n_ranks_rcp32: idiv_rcp32(n_ranks as u32),
            lsa_rank,
            lsa_size,
            lsa_size_rcp32: idiv_rcp32(lsa_size as u32),
            resource_window: 0,
            resource: ResourceWindow {
                lsa_flat_base: 0,
                stride4g: 0,
                mc_offset4k: 0,
            },
            lsa_multimem: MultimemHandle { mc_base: 0 },
            lsa_barrier: LsaBarrierHandle {
                buf_handle: 0,
                n_barriers: 0,
            },
            abort_flag: 0,
            gin: GinHandle {
                rings: 0,
                producers: 0,
                consumers: 0,
                signals: 0,
                counters: 0,
                n_contexts: 0,
                queue_depth: 0,
                n_signals: 0,
                n_counters: 0,
                peer_slots: 0,
                connection: 0,
                barrier_epochs: 0,
                barrier_signals: 0,
                world_barriers: 0,
                rail_barriers: 0,
                reserved: 0,
            },
        }
    }

    /// True when the struct carries this crate's magic and layout version.
    #[inline(always)]
    pub const fn is_compatible(&self) -> bool {
        self.magic == DEVCOMM_MAGIC && self.version == DEVCOMM_VERSION
    }

    /// The world team (see [`Team::world`]).
    #[doc(alias = "ncclTeamWorld")]
    #[inline(always)]
    pub const fn world_team(&self) -> Team {
        Team::world(self)
    }

    /// The LSA team (see [`Team::lsa`]).
    #[doc(alias = "ncclTeamLsa")]
    #[inline(always)]
    pub const fn lsa_team(&self) -> Team {
        Team::lsa(self)
    }

    /// The rail team (see [`Team::rail`]).
    #[doc(alias = "ncclTeamRail")]
    #[inline(always)]
    pub const fn rail_team(&self) -> Team {
        Team::rail(self)
    }

    /// The world rank of member `r` of `team` (a team of this rank).
    #[doc(alias = "ncclTeamRankToWorld")]
    #[inline(always)]
    pub const fn team_rank_to_world(&self, team: &Team, r: i32) -> i32 {
        team.to_world(self.rank, r)
    }

    /// The LSA rank of member `r` of `team` (not checked to be in the LSA team).
    #[doc(alias = "ncclTeamRankToLsa")]
    #[inline(always)]
    pub const fn team_rank_to_lsa(&self, team: &Team, r: i32) -> i32 {
        team.to_lsa(self.lsa_rank, r)
    }

    /// The abort flag as a pointer (null when there is none).
    #[inline(always)]
    pub const fn abort_flag_ptr(&self) -> *const u32 {
        self.abort_flag as *const u32
    }

    /// Address of byte 0 of resource buffer `handle` in LSA peer `lsa_peer`'s copy of the
    /// resource window (pure arithmetic; nothing is read). A `const fn`, outside the runtime
    /// checks of [`crate::check`]: `lsa_peer` must be in `0..lsa_size` for the address to be
    /// mapped.
    #[doc(alias = "ncclGetResourceBufferLsaPointer")]
    #[inline(always)]
    pub const fn resource_lsa_ptr(&self, handle: u32, lsa_peer: i32) -> *mut u8 {
        let base = add4g(
            self.resource.lsa_flat_base,
            (lsa_peer as u32).wrapping_mul(self.resource.stride4g),
        );
        base.wrapping_add(handle as u64 * RESOURCE_UNIT as u64) as *mut u8
    }

    /// Address of byte 0 of resource buffer `handle` in this rank's own resource window.
    #[doc(alias = "ncclGetResourceBufferLocalPointer")]
    #[inline(always)]
    pub const fn resource_local_ptr(&self, handle: u32) -> *mut u8 {
        self.resource_lsa_ptr(handle, self.lsa_rank)
    }

    /// Multicast address of resource buffer `handle` in the LSA team's multicast range (null
    /// when the communicator has no LSA multicast).
    #[doc(alias = "ncclGetResourceBufferLsaMultimemPointer")]
    #[inline(always)]
    pub const fn resource_multimem_ptr(&self, handle: u32) -> *mut u8 {
        if !self.lsa_multimem.is_present() {
            return core::ptr::null_mut();
        }
        (self.lsa_multimem.mc_base
            + 4096 * self.resource.mc_offset4k as u64
            + handle as u64 * RESOURCE_UNIT as u64) as *mut u8
    }
}

/// The teams of a communicator, seen from the calling rank.
impl Team {
    /// Every rank of the communicator: `{n_ranks, rank, 1}`.
    #[doc(alias = "ncclTeamWorld")]
    #[inline(always)]
    pub const fn world(comm: &DevComm) -> Team {
        Team::new(comm.n_ranks, comm.rank, 1)
    }

    /// The caller's LSA team (the ranks whose memory it can load from and store to):
    /// `{lsa_size, lsa_rank, 1}`.
    #[doc(alias = "ncclTeamLsa")]
    #[inline(always)]
    pub const fn lsa(comm: &DevComm) -> Team {
        Team::new(comm.lsa_size, comm.lsa_rank, 1)
    }

    /// The caller's rail team: one rank per LSA team, those with the caller's LSA index:
    /// `{n_ranks / lsa_size, rank / lsa_size, lsa_size}` (the outer factor of the world by
    /// the LSA size; divisions through the comm's precomputed reciprocal).
    #[doc(alias = "ncclTeamRail")]
    #[inline(always)]
    pub const fn rail(comm: &DevComm) -> Team {
        let d = comm.lsa_size as u32;
        Team::new(
            idiv_fast32(comm.n_ranks as u32, d, comm.lsa_size_rcp32) as i32,
            idiv_fast32(comm.rank as u32, d, comm.lsa_size_rcp32) as i32,
            comm.lsa_size,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devcomm_layout_is_fixed() {
        use core::mem::{offset_of, size_of};
        assert_eq!(size_of::<DevComm>(), 168);
        let offsets = [
            offset_of!(DevComm, magic),
            offset_of!(DevComm, version),
            offset_of!(DevComm, rank),
            offset_of!(DevComm, n_ranks),
            offset_of!(DevComm, n_ranks_rcp32),
            offset_of!(DevComm, lsa_rank),
            offset_of!(DevComm, lsa_size),
            offset_of!(DevComm, lsa_size_rcp32),
            offset_of!(DevComm, resource_window),
            offset_of!(DevComm, resource),
            offset_of!(DevComm, lsa_multimem),
            offset_of!(DevComm, lsa_barrier),
            offset_of!(DevComm, abort_flag),
            offset_of!(DevComm, gin),
        ];
        assert_eq!(
            offsets,
            [0, 4, 8, 12, 16, 20, 24, 28, 32, 40, 56, 64, 72, 80]
        );
        assert_eq!(offset_of!(LsaBarrierHandle, n_barriers), 4);
    }

    #[test]
    fn new_fills_the_header_and_reciprocals() {
        let c = DevComm::new(5, 8, 1, 4);
        assert!(c.is_compatible());
        assert_eq!(c.n_ranks_rcp32, idiv_rcp32(8));
        assert_eq!(c.lsa_size_rcp32, idiv_rcp32(4));
        assert_eq!(c.rail_team(), Team::new(2, 1, 4));
        assert!(c.abort_flag_ptr().is_null());
        let mut bad = c;
        bad.version += 1;
        assert!(!bad.is_compatible());
    }

    #[test]
    fn resource_pointers_use_the_4g_stride() {
        let mut c = DevComm::new(1, 2, 1, 2);
        c.resource = ResourceWindow {
            lsa_flat_base: 0x7f00_0000_1000,
            stride4g: 3,
            mc_offset4k: 2,
        };
        assert_eq!(c.resource_lsa_ptr(0, 0) as u64, 0x7f00_0000_1000);
        assert_eq!(
            c.resource_local_ptr(2) as u64,
            0x7f00_0000_1000 + 3 * (1 << 32) + 256
        );
        assert!(c.resource_multimem_ptr(0).is_null());
        c.lsa_multimem.mc_base = 0x1_0000_0000;
        assert_eq!(
            c.resource_multimem_ptr(1) as u64,
            0x1_0000_0000 + 8192 + 128
        );
        assert_eq!(LsaBarrierHandle::buffer_bytes(4, 8), (12 + 32) * 4);
        assert_eq!(
            LsaBarrierHandle::checked_buffer_bytes(4, 8),
            Some((12 + 32) * 4)
        );
        assert_eq!(
            LsaBarrierHandle::checked_buffer_bytes(u32::MAX, 2),
            Some(5 * (u32::MAX as usize) * 4)
        );
        assert_eq!(
            LsaBarrierHandle::checked_buffer_bytes(u32::MAX, u32::MAX),
            None
        );
    }
}
