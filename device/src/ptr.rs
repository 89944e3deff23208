//! `SymPtr<T>`: a typed position inside a window, valid on every rank.
//!
//! A `SymPtr` is `{window, offset}` (the device address of the window descriptor and a byte
//! offset into the window); it names "element i of this buffer" independently of which rank's
//! copy is meant, so it can be passed to kernels and stored in symmetric data structures. The
//! accessors turn it into a raw pointer to one rank's copy: [`SymPtr::local`],
//! [`SymPtr::lsa`], [`SymPtr::peer`], [`SymPtr::multimem`].
//!
//! Arithmetic is in elements of `T` (`p + n` advances by `n * size_of::<T>()` bytes), as for
//! raw pointers. With the cargo feature `bounds-checks` the accessors trap on a misaligned
//! offset or an offset past the per-rank slot, and on the peer indices they can check:
//! [`SymPtr::peer`] on a member outside `0..team.n_ranks`, [`SymPtr::lsa`] and
//! [`SymPtr::peer_world`] on a (resulting) LSA rank below 0. An LSA rank at or past the LSA
//! team's size is **not** caught: the window descriptor does not carry that size (use
//! [`Window::try_peer_ptr`] with the communicator, or [`SymPtr::peer`] with the LSA team, to
//! check it).

use core::marker::PhantomData;
use core::ops::{Add, AddAssign, Sub, SubAssign};

use crate::comm::{DevComm, MultimemHandle};
use crate::team::Team;
use crate::window::Window;

/// A typed symmetric pointer: byte `offset` of `window` (see the module docs).
///
/// Layout: `{ window: *const Window, offset: usize }`, 16 bytes, like NCCL's `ncclSymPtr<T>`.
#[doc(alias = "ncclSymPtr")]
#[repr(C)]
pub struct SymPtr<T> {
    /// Device address of the window descriptor (null: `offset` is itself a local address).
    pub window: *const Window,
    /// Byte offset into the window.
    pub offset: usize,
    _t: PhantomData<*mut T>,
}

const _: () = assert!(core::mem::size_of::<SymPtr<u64>>() == 16);

impl<T> Clone for SymPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SymPtr<T> {}

impl<T> core::fmt::Debug for SymPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SymPtr")
            .field("window", &self.window)
            .field("offset", &self.offset)
            .finish()
    }
}

impl<T> PartialEq for SymPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.window, other.window) && self.offset == other.offset
    }
}

impl<T> Eq for SymPtr<T> {}

impl<T> SymPtr<T> {
    /// Byte `offset` of the window whose descriptor is at device address `window`.
    #[inline(always)]
    pub const fn new(window: *const Window, offset: usize) -> Self {
        SymPtr {
            window,
            offset,
            _t: PhantomData,
        }
    }

    /// A "symmetric" pointer to unregistered memory: [`local`](Self::local) returns `ptr`
    /// itself (NCCL's null-window convention); the other accessors must not be used.
    #[inline(always)]
    pub fn from_local(ptr: *mut T) -> Self {
        SymPtr::new(core::ptr::null(), ptr as usize)
    }

    /// The same position seen as `U` (the byte offset is kept).
    #[inline(always)]
    pub const fn cast<U>(self) -> SymPtr<U> {
        SymPtr::new(self.window, self.offset)
    }

    /// `n` elements further (offset += `n * size_of::<T>()`).
    #[allow(clippy::should_implement_trait)]
    #[inline(always)]
    pub const fn add(self, n: usize) -> Self {
        SymPtr::new(self.window, self.offset + n * core::mem::size_of::<T>())
    }

    /// `n` elements back.
    #[allow(clippy::should_implement_trait)]
    #[inline(always)]
    pub const fn sub(self, n: usize) -> Self {
        SymPtr::new(self.window, self.offset - n * core::mem::size_of::<T>())
    }

    /// `n` elements away, either direction.
    #[inline(always)]
    pub const fn offset_by(self, n: isize) -> Self {
        let bytes = n * core::mem::size_of::<T>() as isize;
        SymPtr::new(self.window, self.offset.wrapping_add_signed(bytes))
    }

    /// The distance `self - origin` in elements (both in the same window).
    #[inline(always)]
    pub const fn offset_from(self, origin: Self) -> isize {
        (self.offset as isize - origin.offset as isize) / core::mem::size_of::<T>() as isize
    }

    #[inline(always)]
    fn check(&self) {
        #[cfg(feature = "bounds-checks")]
        {
            if !self.offset.is_multiple_of(core::mem::align_of::<T>()) {
                crate::arch::trap();
            }
            // SAFETY: only called by accessors whose callers guarantee a valid descriptor.
            let s4g = unsafe { crate::mem::load_const(&raw const (*self.window).stride4g) };
            let end = self.offset as u64 + core::mem::size_of::<T>() as u64;
            if end > (u64::from(s4g) << 32) {
                crate::arch::trap();
            }
        }
    }

    /// The caller's own copy (or the local address itself when `window` is null).
    ///
    /// # Safety
    /// - `window` is null or the device address of a descriptor in global memory that is not
    ///   modified while the kernel runs.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "localPtr")]
    #[inline(always)]
    pub unsafe fn local(self) -> *mut T {
        if self.window.is_null() {
            return self.offset as *mut T;
        }
        self.check();
        // SAFETY: forwarded.
        unsafe { (*self.window).local_ptr(self.offset).cast() }
    }

    /// LSA peer `lsa_peer`'s copy.
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `lsa_peer` is in `0..lsa_size` for the result to be dereferenceable (with
    ///   `bounds-checks`, a negative index traps; an index `>= lsa_size` is not caught, the
    ///   descriptor does not know the LSA size).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "lsaPtr")]
    #[inline(always)]
    pub unsafe fn lsa(self, lsa_peer: i32) -> *mut T {
        #[cfg(feature = "bounds-checks")]
        if lsa_peer < 0 {
            crate::arch::trap();
        }
        self.check();
        // SAFETY: forwarded.
        unsafe { (*self.window).lsa_ptr(self.offset, lsa_peer).cast() }
    }

    /// Member `peer` of `team`'s copy (the member must be in the caller's LSA team).
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `peer` is a member of `team` (`0..team.n_ranks`; trapped with `bounds-checks`) whose
    ///   world rank is in the caller's LSA team.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "peerPtr")]
    #[inline(always)]
    pub unsafe fn peer(self, team: &Team, peer: i32) -> *mut T {
        #[cfg(feature = "bounds-checks")]
        if !team.has_rank(peer) {
            crate::arch::trap();
        }
        self.check();
        // SAFETY: forwarded.
        unsafe { (*self.window).team_peer_ptr(self.offset, team, peer).cast() }
    }

    /// World rank `world_peer`'s copy (must be in the caller's LSA team).
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `world_peer` is in the caller's LSA team. With `bounds-checks`, a world rank whose
    ///   LSA rank (`lsa_rank + world_peer - world_rank`) is negative traps; one past the end
    ///   of the LSA team is not caught (the descriptor does not know the LSA size; see
    ///   [`Window::try_peer_ptr`]).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn peer_world(self, world_peer: i32) -> *mut T {
        #[cfg(feature = "bounds-checks")]
        {
            // SAFETY: `window` is a valid descriptor (the caller's contract).
            let (lsa, world) = unsafe { ((*self.window).lsa_rank(), (*self.window).world_rank()) };
            if (world_peer as i64) - (world as i64) + (lsa as i64) < 0 {
                crate::arch::trap();
            }
        }
        self.check();
        // SAFETY: forwarded.
        unsafe { (*self.window).peer_ptr(self.offset, world_peer).cast() }
    }

    /// The multicast address in `mm`'s range (null when `mm` has none). Only multimem
    /// instructions ([`crate::multimem`]) may access it.
    ///
    /// # Safety
    /// As [`local`](Self::local) with a non-null window bound to `mm`'s multicast object.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "multimemPtr")]
    #[inline(always)]
    pub unsafe fn multimem(self, mm: MultimemHandle) -> *mut T {
        self.check();
        // SAFETY: forwarded.
        unsafe { (*self.window).multimem_ptr_in(self.offset, mm).cast() }
    }

    /// The multicast address in the LSA team's range of `comm`.
    ///
    /// # Safety
    /// As [`multimem`](Self::multimem).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "lsaMultimemPtr")]
    #[inline(always)]
    pub unsafe fn lsa_multimem(self, comm: &DevComm) -> *mut T {
        // SAFETY: forwarded.
        unsafe { self.multimem(comm.lsa_multimem) }
    }
}

impl<T> Add<usize> for SymPtr<T> {
    type Output = SymPtr<T>;
    #[inline(always)]
    fn add(self, n: usize) -> SymPtr<T> {
        SymPtr::add(self, n)
    }
}

impl<T> Sub<usize> for SymPtr<T> {
    type Output = SymPtr<T>;
    #[inline(always)]
    fn sub(self, n: usize) -> SymPtr<T> {
        SymPtr::sub(self, n)
    }
}

impl<T> AddAssign<usize> for SymPtr<T> {
    #[inline(always)]
    fn add_assign(&mut self, n: usize) {
        *self = SymPtr::add(*self, n);
    }
}

impl<T> SubAssign<usize> for SymPtr<T> {
    #[inline(always)]
    fn sub_assign(&mut self, n: usize) {
        *self = SymPtr::sub(*self, n);
    }
}

impl<T> Sub for SymPtr<T> {
    type Output = isize;
    #[inline(always)]
    fn sub(self, origin: SymPtr<T>) -> isize {
        self.offset_from(origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bounds-checks` catches: a negative LSA rank, from `lsa` or derived by
    /// `peer_world` (which checked nothing before), and a member outside the team.
    #[cfg(feature = "bounds-checks")]
    #[test]
    fn bounds_checks_trap_on_the_peers_they_can_check() {
        use crate::emu::{EmuError, Launch};
        let w = Window {
            lsa_flat_base: 0x10_0000_0000,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            ..Window::default()
        };
        let p: SymPtr<u32> = SymPtr::new(&raw const w, 64);
        let traps = |f: &dyn Fn()| {
            // SAFETY: one emulated thread; the closures share only the read-only descriptor.
            let r = unsafe { Launch::new(1, 1).run_unsync(f) };
            matches!(r, Err(EmuError::Trap { .. }))
        };
        // SAFETY (all closures): the descriptor is valid; only addresses are computed.
        assert!(traps(&|| {
            unsafe { p.peer_world(3) }; // LSA rank 1 + 3 - 5 = -1
        }));
        assert!(!traps(&|| {
            unsafe { p.peer_world(4) }; // LSA rank 0
        }));
        assert!(traps(&|| {
            unsafe { p.lsa(-1) };
        }));
        assert!(traps(&|| {
            unsafe { p.peer(&Team::new(2, 1, 1), 2) };
        }));
    }

    #[test]
    fn arithmetic_is_in_elements_and_accessors_use_the_window() {
        let w = Window {
            lsa_flat_base: 0x10_0000_0000,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            mc_offset4k: 3,
            ..Window::default()
        };
        let p: SymPtr<f32> = SymPtr::new(&raw const w, 64);
        let q = p + 10;
        assert_eq!(q.offset, 104);
        assert_eq!(q - p, 10);
        assert_eq!((q - 4).offset, 88);
        assert_eq!(p.offset_by(-4).offset, 48);
        let mut r = p;
        r += 2;
        r -= 1;
        assert_eq!(r, p + 1);
        assert_eq!(p.cast::<u64>().add(1).offset, 72);
        let slot = 2u64 << 32;
        // SAFETY: the accessors read only the descriptor `w` (alive) and compute addresses
        // from it; nothing else is dereferenced.
        unsafe {
            assert_eq!(p.local() as u64, 0x10_0000_0000 + slot + 64);
            assert_eq!(p.lsa(3) as u64, 0x10_0000_0000 + 3 * slot + 64);
            assert_eq!(p.peer_world(4) as u64, 0x10_0000_0000 + 64);
            assert_eq!(p.peer(&Team::new(2, 1, 1), 0) as u64, 0x10_0000_0000 + 64);
            let mm = MultimemHandle {
                mc_base: 0x40_0000_0000,
            };
            assert_eq!(p.multimem(mm) as u64, 0x40_0000_0000 + 3 * 4096 + 64);
            let mut x = 1.5f32;
            assert_eq!(SymPtr::from_local(&raw mut x).local(), &raw mut x);
        }
    }
}
