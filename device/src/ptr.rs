//! `SymPtr<T>`: a typed position inside a window, valid on every rank.
//!
//! A `SymPtr` is `{window, offset}` (the [`WindowHandle`] of the window and a byte offset into
//! it); it names "element i of this buffer" independently of which rank's copy is meant, so it
//! can be passed to kernels and stored in symmetric data structures. The accessors turn it into
//! a raw pointer to one rank's copy: [`SymPtr::local`], [`SymPtr::lsa`], [`SymPtr::peer`],
//! [`SymPtr::multimem`]; [`WindowHandle::sym`] makes one. For a run of elements on every rank,
//! see the views of [`crate::view`].
//!
//! Arithmetic is in elements of `T` (`p + n` advances by `n * size_of::<T>()` bytes), as for
//! raw pointers. Where [`crate::check`] is enabled (the host; GPU builds with `bounds-checks`)
//! the accessors stop the kernel with a message on a misaligned offset or an offset past the
//! per-rank slot, and on a peer outside its team: [`SymPtr::lsa`] and [`SymPtr::peer_world`]
//! on an LSA rank outside `0..lsa_size`, [`SymPtr::peer`] on a member outside
//! `0..team.n_ranks`.

use core::marker::PhantomData;
use core::ops::{Add, AddAssign, Sub, SubAssign};

use crate::check;
use crate::comm::{DevComm, MultimemHandle};
use crate::team::Team;
use crate::window::WindowHandle;

/// A typed symmetric pointer: byte `offset` of `window` (see the module docs).
///
/// Layout: `{ window: WindowHandle, offset: usize }`, 16 bytes, like NCCL's `ncclSymPtr<T>`.
/// Plain data (`bytemuck::Pod`), so it is a kernel argument.
#[doc(alias = "ncclSymPtr")]
#[repr(C)]
pub struct SymPtr<T> {
    /// The window (null: `offset` is itself a local address).
    pub window: WindowHandle,
    /// Byte offset into the window.
    pub offset: usize,
    // An address pair, shareable between threads like the integers it holds.
    _t: PhantomData<fn() -> *mut T>,
}

const _: () = assert!(core::mem::size_of::<SymPtr<u64>>() == 16);

// SAFETY: two 8-byte integers (`repr(C)`, no padding) and a zero-sized marker: every bit
// pattern is a value.
unsafe impl<T> bytemuck::Zeroable for SymPtr<T> {}
// SAFETY: as above; `Copy` and, with `T: 'static`, `'static`.
unsafe impl<T: 'static> bytemuck::Pod for SymPtr<T> {}

impl WindowHandle {
    /// A symmetric pointer to element `index` of type `T` of this window (byte offset
    /// `index × size_of::<T>()`; nothing is read).
    #[inline(always)]
    pub const fn sym<T>(self, index: usize) -> SymPtr<T> {
        SymPtr::new(self, index * core::mem::size_of::<T>())
    }
}

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
        self.window == other.window && self.offset == other.offset
    }
}

impl<T> Eq for SymPtr<T> {}

impl<T> SymPtr<T> {
    /// Byte `offset` of `window`.
    #[inline(always)]
    pub const fn new(window: WindowHandle, offset: usize) -> Self {
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
        SymPtr::new(WindowHandle::NULL, ptr as usize)
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
        if check::ENABLED {
            if self.window.is_null() {
                check::no_window();
            }
            // SAFETY: only called by accessors whose callers guarantee a valid descriptor.
            let s4g =
                unsafe { crate::mem::load_const(&raw const (*self.window.as_ptr()).stride4g) };
            let size = core::mem::size_of::<T>();
            let slot = u64::from(s4g) << 32;
            if !self.offset.is_multiple_of(core::mem::align_of::<T>())
                || self.offset as u64 + size as u64 > slot
            {
                check::bad_offset(self.offset, size, slot);
            }
        }
    }

    /// The caller's own copy (or the local address itself when `window` is null).
    ///
    /// # Safety
    /// - `window` is null or the handle of a descriptor in global memory that is not modified
    ///   while the kernel runs.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "localPtr")]
    #[inline(always)]
    pub unsafe fn local(self) -> *mut T {
        let window = self.window.as_ptr();
        if window.is_null() {
            return core::ptr::with_exposed_provenance_mut(self.offset);
        }
        self.check();
        // SAFETY: forwarded.
        unsafe { (*window).local_ptr(self.offset).cast() }
    }

    /// LSA peer `lsa_peer`'s copy.
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `lsa_peer` is in `0..lsa_size` for the result to be dereferenceable (checked where
    ///   [`check::ENABLED`]).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "lsaPtr")]
    #[inline(always)]
    pub unsafe fn lsa(self, lsa_peer: i32) -> *mut T {
        self.check();
        // SAFETY: forwarded.
        unsafe { self.window.get().lsa_ptr(self.offset, lsa_peer).cast() }
    }

    /// Member `peer` of `team`'s copy (the member must be in the caller's LSA team).
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `peer` is a member of `team` (`0..team.n_ranks`; checked where [`check::ENABLED`])
    ///   whose world rank is in the caller's LSA team.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[doc(alias = "peerPtr")]
    #[inline(always)]
    pub unsafe fn peer(self, team: &Team, peer: i32) -> *mut T {
        if check::ENABLED && !team.has_rank(peer) {
            check::member_outside_team(peer, team.n_ranks);
        }
        self.check();
        // SAFETY: forwarded.
        unsafe {
            self.window
                .get()
                .team_peer_ptr(self.offset, team, peer)
                .cast()
        }
    }

    /// World rank `world_peer`'s copy (must be in the caller's LSA team).
    ///
    /// # Safety
    /// - `window` is a non-null descriptor as in [`local`](Self::local);
    /// - `world_peer` is in the caller's LSA team (its LSA rank, `lsa_rank + world_peer -
    ///   world_rank`, is checked where [`check::ENABLED`]; see also
    ///   [`Window::try_peer_ptr`](crate::window::Window::try_peer_ptr)).
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn peer_world(self, world_peer: i32) -> *mut T {
        self.check();
        // SAFETY: forwarded.
        unsafe { self.window.get().peer_ptr(self.offset, world_peer).cast() }
    }

    /// Reads this element of the caller's own copy (a plain load).
    ///
    /// # Safety
    /// As [`local`](Self::local); the element is initialised and not written concurrently
    /// without an order between the two (a barrier or a fence).
    ///
    /// # Ordering
    /// None (a weak load).
    #[inline(always)]
    pub unsafe fn read(self) -> T {
        // SAFETY: forwarded.
        unsafe { self.local().read() }
    }

    /// Writes this element of the caller's own copy (a plain store).
    ///
    /// # Safety
    /// As [`read`](Self::read), for a write.
    ///
    /// # Ordering
    /// None (a weak store).
    #[inline(always)]
    pub unsafe fn write(self, value: T) {
        // SAFETY: forwarded.
        unsafe { self.local().write(value) }
    }

    /// Reads this element of LSA peer `lsa_peer`'s copy (a plain load; the peer is checked
    /// where [`check::ENABLED`]).
    ///
    /// # Safety
    /// As [`lsa`](Self::lsa) and [`read`](Self::read).
    ///
    /// # Ordering
    /// None (a weak load).
    #[inline(always)]
    pub unsafe fn read_lsa(self, lsa_peer: i32) -> T {
        // SAFETY: forwarded.
        unsafe { self.lsa(lsa_peer).read() }
    }

    /// Writes this element of LSA peer `lsa_peer`'s copy (a plain store; the peer is checked
    /// where [`check::ENABLED`]).
    ///
    /// # Safety
    /// As [`lsa`](Self::lsa) and [`write`](Self::write).
    ///
    /// # Ordering
    /// None (a weak store).
    #[inline(always)]
    pub unsafe fn write_lsa(self, lsa_peer: i32, value: T) {
        // SAFETY: forwarded.
        unsafe { self.lsa(lsa_peer).write(value) }
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
        unsafe { self.window.get().multimem_ptr_in(self.offset, mm).cast() }
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
    use crate::window::Window;

    /// What the checks catch (on by default on the host): an LSA rank outside the team, from
    /// `lsa` or derived by `peer_world`, a member outside the team, a misaligned offset.
    #[test]
    fn checks_stop_the_kernel_with_a_message() {
        use crate::emu::{EmuError, Launch};
        let w = Window {
            lsa_flat_base: 0x10_0000_0000,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            lsa_size: 2,
            ..Window::default()
        };
        let p: SymPtr<u32> = SymPtr::new(WindowHandle::from_ptr(&raw const w), 64);
        let fails = |f: &dyn Fn()| -> Option<std::string::String> {
            // SAFETY: one emulated thread; the closures share only the read-only descriptor.
            match unsafe { Launch::new(1, 1).run_unsync(f) } {
                Ok(()) => None,
                Err(EmuError::Panic { message, .. }) => Some(message),
                Err(e) => panic!("not a check's report: {e}"),
            }
        };
        let m = fails(&|| {
            // SAFETY: the descriptor is valid; only addresses are computed.
            unsafe { p.peer_world(3) }; // LSA rank 1 + 3 - 5 = -1
        });
        assert!(m.unwrap_or_default().contains("LSA peer -1 "));
        assert_eq!(
            fails(&|| {
                // SAFETY: the descriptor is valid; only addresses are computed.
                unsafe { p.peer_world(4) };
            }),
            None
        ); // LSA rank 0
        let m = fails(&|| {
            // SAFETY: the descriptor is valid; only addresses are computed.
            unsafe { p.peer_world(6) }; // LSA rank 2 of 2
        });
        assert!(
            m.unwrap_or_default()
                .contains("LSA peer 2 is not in the window's LSA team of 2")
        );
        let m = fails(&|| {
            // SAFETY: the descriptor is valid; only addresses are computed.
            unsafe { p.lsa(-1) };
        });
        assert!(m.unwrap_or_default().contains("LSA peer -1 "));
        let m = fails(&|| {
            // SAFETY: the descriptor is valid; only addresses are computed.
            unsafe { p.peer(&Team::new(2, 1, 1), 2) };
        });
        assert!(
            m.unwrap_or_default()
                .contains("peer 2 is not a member of the team of 2 ranks")
        );
        let m = fails(&|| {
            // SAFETY: the descriptor is valid; only addresses are computed.
            unsafe { SymPtr::<u32>::new(p.window, 6).local() };
        });
        assert!(
            m.unwrap_or_default()
                .contains("offset 6 (element of 4 bytes) is misaligned")
        );
        // A pointer without a window has no peers: reported, not a null dereference.
        let mut x = 0u32;
        let local = SymPtr::from_local(&raw mut x);
        let m = fails(&|| {
            // SAFETY: the check stops the call before anything is computed or read.
            unsafe { local.lsa(0) };
        });
        assert!(
            m.unwrap_or_default()
                .contains("without a window (from_local)")
        );
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
        let p: SymPtr<f32> = SymPtr::new(WindowHandle::from_ptr(&raw const w), 64);
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
