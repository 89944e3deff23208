//! Windows: a registered buffer that exists at the same offset in every LSA peer's memory,
//! and the address arithmetic to reach any peer's copy.
//!
//! [`Window`] has exactly the layout of NCCL's `struct ncclWindow_vidmem` of NCCL 2.28.7 to
//! 2.30.3 (72 bytes, asserted at compile time), plus the LSA team's size in what is padding
//! there. Kernels receive a [`WindowHandle`] (NCCL's `ncclWindow_t`): the device address of a
//! descriptor the host runtime wrote before the launch, typed so that a data pointer cannot be
//! passed in its place. Its fields are read with non-coherent loads (`ld.global.nc`), so **the
//! descriptor must not change while a kernel that uses it runs**.
//!
//! Peer indices are checked against the LSA team where [`crate::check`] is enabled (the host,
//! GPU builds with `bounds-checks`): a peer outside `0..lsa_size` stops the kernel with a
//! message naming the peer and the size.
//!
//! Flat-VA model: every rank maps LSA rank `r`'s memory at `lsa_flat_base + r * stride`
//! where the per-rank slot size `stride = stride4g * 4 GiB`; a window's byte `o` of peer `r` is
//! therefore `add4g(lsa_flat_base, r * stride4g) + o` (see [`add4g`]). The multicast address of
//! byte `o` is `mc_base + 4096 * mc_offset4k + o`.

use crate::check;
use crate::comm::{DevComm, MultimemHandle};
use crate::mem::load_const;
use crate::team::Team;

#[doc(inline)]
pub use crate::util::add4g;

/// The device-side descriptor of a registered window (layout of NCCL's `ncclWindow_vidmem`,
/// 2.28.7–2.30.3). Kernels take it through a [`WindowHandle`].
#[doc(alias = "ncclWindow_vidmem")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// Host address of the runtime's bookkeeping for this window (never used on the device).
    pub win_host: u64,
    /// Address of the window's byte 0 in LSA rank 0's slot of the flat VA.
    pub lsa_flat_base: u64,
    /// The caller's LSA rank.
    pub lsa_rank: i32,
    /// The caller's world rank.
    pub world_rank: i32,
    /// Per-rank slot size of the flat VA, in units of 4 GiB.
    pub stride4g: u32,
    /// Offset of the window in its team's multicast range, in 4 KiB units.
    pub mc_offset4k: u32,
    /// Offset of the window in its backing allocation, in 4 KiB units (for network
    /// registrations; unused by LSA code).
    pub gin_offset4k: u32,
    /// Size of the LSA team: a symcomm addition in what is padding in NCCL's layout. 0 means
    /// unknown, and then only negative peers are caught by the checks; a descriptor that
    /// symcomm did not write (one from NCCL) must have 0 here, as NCCL does not promise these
    /// bytes.
    pub lsa_size: u32,
    /// Per network connection: device handle of the registration (unused by LSA code; 0).
    pub gin_wins: [u64; 4],
}

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Window>() == 72);
    assert!(align_of::<Window>() == 8);
    assert!(offset_of!(Window, win_host) == 0);
    assert!(offset_of!(Window, lsa_flat_base) == 8);
    assert!(offset_of!(Window, lsa_rank) == 16);
    assert!(offset_of!(Window, world_rank) == 20);
    assert!(offset_of!(Window, stride4g) == 24);
    assert!(offset_of!(Window, mc_offset4k) == 28);
    assert!(offset_of!(Window, gin_offset4k) == 32);
    assert!(offset_of!(Window, lsa_size) == 36);
    assert!(offset_of!(Window, gin_wins) == 40);
};

// SAFETY: `repr(C)` integers whose offsets (asserted above) leave no padding; every bit
// pattern is a value.
unsafe impl bytemuck::Zeroable for Window {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Window {}

/// A window as kernels take it: the device address of its [`Window`] descriptor (NCCL's
/// `ncclWindow_t`). 8 bytes of plain data, so it is a kernel argument like any other, and a
/// type of its own, so that a data pointer passed in its place does not compile. The host
/// runtime hands it out (`symcomm::Window::handle`); kernels reach the descriptor through
/// [`WindowHandle::get`] or make typed pointers and views into the window (`sym`, `view`).
#[doc(alias = "ncclWindow_t")]
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WindowHandle {
    addr: u64,
}

// SAFETY: one `u64` (`repr(transparent)`): no padding, every bit pattern is a value (an
// address, dereferenced only through the unsafe `get`).
unsafe impl bytemuck::Zeroable for WindowHandle {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for WindowHandle {}

impl WindowHandle {
    /// No window (address 0).
    pub const NULL: WindowHandle = WindowHandle { addr: 0 };

    /// The handle of the descriptor at device address `addr` (nothing is checked or read).
    #[inline(always)]
    pub const fn from_addr(addr: u64) -> Self {
        WindowHandle { addr }
    }

    /// The handle of the descriptor `window` points to.
    #[inline(always)]
    pub fn from_ptr(window: *const Window) -> Self {
        WindowHandle {
            addr: window as usize as u64,
        }
    }

    /// The descriptor's device address.
    #[inline(always)]
    pub const fn addr(self) -> u64 {
        self.addr
    }

    /// Whether this is [`WindowHandle::NULL`].
    #[inline(always)]
    pub const fn is_null(self) -> bool {
        self.addr == 0
    }

    /// The descriptor as a raw pointer.
    #[inline(always)]
    pub fn as_ptr(self) -> *const Window {
        core::ptr::with_exposed_provenance(self.addr as usize)
    }

    /// The descriptor, for its accessors ([`Window::lsa_ptr`] and the rest).
    ///
    /// # Safety
    /// The handle is not null and names a descriptor in global memory (written by the host
    /// runtime) that stays valid and unchanged while the reference is used.
    #[inline(always)]
    pub unsafe fn get<'a>(self) -> &'a Window {
        // SAFETY: the caller's contract.
        unsafe { &*self.as_ptr() }
    }
}

impl Window {
    /// The flat-VA base of the window, read from the descriptor.
    ///
    /// # Safety
    /// `self` is a window descriptor in global memory, unchanged while the kernel runs (as for
    /// every public method).
    #[inline(always)]
    unsafe fn base(&self) -> u64 {
        // SAFETY: the caller of the public method guarantees `self` is a global descriptor.
        unsafe { load_const(&raw const self.lsa_flat_base) }
    }

    /// The per-rank stride of the flat VA in units of 4 GiB, read from the descriptor.
    ///
    /// # Safety
    /// As [`Window::base`].
    #[inline(always)]
    unsafe fn stride4g(&self) -> u32 {
        // SAFETY: as `base`.
        unsafe { load_const(&raw const self.stride4g) }
    }

    /// The caller's LSA rank, read from the descriptor.
    ///
    /// # Safety
    /// `self` lives in global memory and is not modified while the kernel runs.
    #[inline(always)]
    pub unsafe fn lsa_rank(&self) -> i32 {
        // SAFETY: forwarded.
        unsafe { load_const(&raw const self.lsa_rank) }
    }

    /// The caller's world rank, read from the descriptor.
    ///
    /// # Safety
    /// As [`lsa_rank`](Self::lsa_rank).
    #[inline(always)]
    pub unsafe fn world_rank(&self) -> i32 {
        // SAFETY: forwarded.
        unsafe { load_const(&raw const self.world_rank) }
    }

    // ANCHOR: lsa_ptr
    /// Address of byte `offset` of LSA peer `lsa_peer`'s copy of the window (no range check
    /// of `offset`; nothing is dereferenced).
    ///
    /// Where [`check::ENABLED`], a peer outside `0..lsa_size` stops the kernel with a message
    /// naming it and the size (see [`crate::check`]).
    ///
    /// # Safety
    /// - `self` lives in global memory (a descriptor written by the host runtime) and is not
    ///   modified while the kernel runs;
    /// - `lsa_peer` is in `0..lsa_size` for the result to be dereferenceable.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetLsaPointer")]
    #[inline(always)]
    pub unsafe fn lsa_ptr(&self, offset: usize, lsa_peer: i32) -> *mut u8 {
        if check::ENABLED {
            // SAFETY: forwarded.
            let size = unsafe { load_const(&raw const self.lsa_size) };
            if lsa_peer < 0 || (size != 0 && lsa_peer as u32 >= size) {
                check::peer_outside_team(lsa_peer, size);
            }
        }
        // SAFETY: forwarded.
        let (base, s4g) = unsafe { (self.base(), self.stride4g()) };
        add4g(base, (lsa_peer as u32).wrapping_mul(s4g)).wrapping_add(offset as u64) as *mut u8
    }
    // ANCHOR_END: lsa_ptr

    /// Address of byte `offset` of the caller's own copy of the window.
    ///
    /// # Safety
    /// As [`lsa_ptr`](Self::lsa_ptr).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetLocalPointer")]
    #[inline(always)]
    pub unsafe fn local_ptr(&self, offset: usize) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { self.lsa_ptr(offset, self.lsa_rank()) }
    }

    /// Address of byte `offset` of world rank `world_peer`'s copy, assuming `world_peer` is
    /// in the caller's LSA team (checked as in [`lsa_ptr`](Self::lsa_ptr) where
    /// [`check::ENABLED`]; see [`try_peer_ptr`](Self::try_peer_ptr) for an `Option`).
    ///
    /// # Safety
    /// As [`lsa_ptr`](Self::lsa_ptr).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetPeerPointer")]
    #[inline(always)]
    pub unsafe fn peer_ptr(&self, offset: usize, world_peer: i32) -> *mut u8 {
        // SAFETY: forwarded.
        let lsa_peer = unsafe { self.lsa_rank() + (world_peer - self.world_rank()) };
        // SAFETY: forwarded.
        unsafe { self.lsa_ptr(offset, lsa_peer) }
    }

    /// [`peer_ptr`](Self::peer_ptr), or `None` when `world_peer` is not in the caller's LSA
    /// team (`comm.lsa_size` consecutive world ranks around the caller).
    ///
    /// # Safety
    /// As [`lsa_ptr`](Self::lsa_ptr); `comm` is the communicator the window belongs to.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn try_peer_ptr(
        &self,
        offset: usize,
        world_peer: i32,
        comm: &DevComm,
    ) -> Option<*mut u8> {
        // SAFETY: forwarded.
        let lsa_peer = unsafe { self.lsa_rank() + (world_peer - self.world_rank()) };
        if 0 <= lsa_peer && lsa_peer < comm.lsa_size {
            // SAFETY: forwarded.
            Some(unsafe { self.lsa_ptr(offset, lsa_peer) })
        } else {
            None
        }
    }

    /// Address of byte `offset` of member `peer` of `team`'s copy, assuming that member is in
    /// the caller's LSA team (its LSA rank is checked as in [`lsa_ptr`](Self::lsa_ptr) where
    /// [`check::ENABLED`]).
    ///
    /// # Safety
    /// As [`lsa_ptr`](Self::lsa_ptr).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetPeerPointer")]
    #[inline(always)]
    pub unsafe fn team_peer_ptr(&self, offset: usize, team: &Team, peer: i32) -> *mut u8 {
        // SAFETY: forwarded.
        let lsa_peer = unsafe { team.to_lsa(self.lsa_rank(), peer) };
        // SAFETY: forwarded.
        unsafe { self.lsa_ptr(offset, lsa_peer) }
    }

    /// Multicast address of byte `offset` in the range of `mm`; null when `mm` has no range.
    ///
    /// # Safety
    /// As [`lsa_ptr`](Self::lsa_ptr); the window is bound to `mm`'s multicast object.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetMultimemPointer")]
    #[inline(always)]
    pub unsafe fn multimem_ptr_in(&self, offset: usize, mm: MultimemHandle) -> *mut u8 {
        if !mm.is_present() {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded.
        let off4k = unsafe { load_const(&raw const self.mc_offset4k) };
        (mm.mc_base + 4096 * off4k as u64).wrapping_add(offset as u64) as *mut u8
    }

    /// Multicast address of byte `offset` in the LSA team's range of `comm`; null when the
    /// communicator has no LSA multicast.
    ///
    /// # Safety
    /// As [`multimem_ptr_in`](Self::multimem_ptr_in).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "ncclGetLsaMultimemPointer")]
    #[inline(always)]
    pub unsafe fn multimem_ptr(&self, offset: usize, comm: &DevComm) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { self.multimem_ptr_in(offset, comm.lsa_multimem) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_layout_is_ncclwindow_vidmem_of_2_28_7_to_2_30_3() {
        use core::mem::{offset_of, size_of};
        assert_eq!(size_of::<Window>(), 72);
        let offsets = [
            offset_of!(Window, win_host),
            offset_of!(Window, lsa_flat_base),
            offset_of!(Window, lsa_rank),
            offset_of!(Window, world_rank),
            offset_of!(Window, stride4g),
            offset_of!(Window, mc_offset4k),
            offset_of!(Window, gin_offset4k),
            offset_of!(Window, lsa_size),
            offset_of!(Window, gin_wins),
        ];
        assert_eq!(offsets, [0, 8, 16, 20, 24, 28, 32, 36, 40]);
    }

    /// Acceptance (issue 29): peer index == team size is an error naming both, on the
    /// emulator; a peer inside the team is not.
    #[test]
    fn a_peer_outside_the_lsa_team_is_reported_with_the_peer_and_the_size() {
        use crate::emu::{EmuError, Launch};
        let w = Window {
            lsa_flat_base: 0x7000_0000_0000,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            lsa_size: 4,
            ..Window::default()
        };
        let h = WindowHandle::from_ptr(&raw const w);
        let run = |peer: i32| {
            // SAFETY: `w` outlives the launch; only addresses are computed from it.
            Launch::new(1u32, 1u32).run(|| unsafe {
                core::hint::black_box(h.get().lsa_ptr(0, peer));
            })
        };
        assert!(run(3).is_ok());
        for (peer, shown) in [(4, "LSA peer 4 "), (-1, "LSA peer -1 ")] {
            match run(peer) {
                Err(EmuError::Panic { message, .. }) => {
                    assert!(message.starts_with("symcomm: "), "{message}");
                    assert!(message.contains(shown), "{message}");
                    assert!(message.contains("LSA team of 4 ranks"), "{message}");
                }
                other => panic!("peer {peer}: {other:?}"),
            }
        }
        // Through a world rank (LSA rank 1 + 8 - 5 = 4).
        use std::string::ToString;
        // SAFETY: as above.
        let e = Launch::new(1u32, 1u32)
            .run(|| unsafe {
                core::hint::black_box(h.get().peer_ptr(0, 8));
            })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("LSA peer 4 is not in the window's LSA team of 4 ranks"),
            "{e}"
        );
    }

    #[test]
    fn add4g_adds_to_the_high_word_only() {
        assert_eq!(add4g(0x0000_7f00_1234_5678, 0), 0x0000_7f00_1234_5678);
        assert_eq!(add4g(0x0000_7f00_1234_5678, 1), 0x0000_7f01_1234_5678);
        assert_eq!(add4g(0x0000_7f00_ffff_ffff, 3), 0x0000_7f03_ffff_ffff);
        // Wraps in 32 bits like NCCL's (negative deltas as two's complement).
        assert_eq!(
            add4g(0x0000_0005_0000_0010, (-2i32) as u32),
            0x0000_0003_0000_0010
        );
        assert_eq!(add4g(0xffff_ffff_0000_0000, 1), 0x0000_0000_0000_0000);
        for base in [0u64, 0x1000, 0x7f12_3456_7000, 0x0000_1000_ffff_f000] {
            for peer in 0u32..8 {
                for s4g in [1u32, 2, 35] {
                    let want = base.wrapping_add(u64::from(peer * s4g) << 32);
                    assert_eq!(add4g(base, peer * s4g), want);
                }
            }
        }
    }

    #[test]
    fn pointers_follow_the_flat_va_model() {
        let w = Window {
            lsa_flat_base: 0x7000_0000_0000,
            lsa_rank: 2,
            world_rank: 10,
            stride4g: 36,
            mc_offset4k: 5,
            ..Window::default()
        };
        let slot = 36u64 << 32;
        let mut comm = DevComm::new(10, 16, 2, 4);
        // SAFETY: the pointer functions read only `w` (alive) and `comm` and compute
        // addresses; nothing else is dereferenced.
        unsafe {
            assert_eq!(w.local_ptr(64) as u64, 0x7000_0000_0000 + 2 * slot + 64);
            assert_eq!(w.lsa_ptr(8, 3) as u64, 0x7000_0000_0000 + 3 * slot + 8);
            assert_eq!(w.peer_ptr(0, 8) as u64, 0x7000_0000_0000);
            assert_eq!(
                w.try_peer_ptr(0, 11, &comm),
                Some((0x7000_0000_0000 + 3 * slot) as *mut u8)
            );
            assert_eq!(w.try_peer_ptr(0, 12, &comm), None);
            assert_eq!(w.try_peer_ptr(0, 7, &comm), None);
            let rail = Team::new(4, 2, 4);
            assert_eq!(
                w.team_peer_ptr(0, &Team::new(4, 2, 1), 1) as u64,
                0x7000_0000_0000 + slot
            );
            assert_eq!(rail.to_world(10, 3), 14);
            assert!(w.multimem_ptr(0, &comm).is_null());
            comm.lsa_multimem.mc_base = 0x9000_0000_0000;
            assert_eq!(
                w.multimem_ptr(16, &comm) as u64,
                0x9000_0000_0000 + 5 * 4096 + 16
            );
        }
    }
}
