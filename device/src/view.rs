//! Typed views of windows: a run of `T` at the same offset of every rank's copy
//! ([`SymSlice`]), one rank's copy of it ([`PeerSlice`]), and the LSA team's copies in rank
//! order ([`LsaPeers`]). What NCCL's users write as
//! `((float*)ncclGetLsaPointer(w, off, p))[i]` is `x.lsa(p).read(i)` here, with the peer and
//! the index checked where [`crate::check`] is enabled and no byte arithmetic in user code.
//!
//! ```ignore
//! // Every rank's copy of the window `x` holds `n` f32 from element 0.
//! let x = SymSlice::<f32>::new(x.sym(0), n);
//! let mut sum = 0.0;
//! for copy in unsafe { x.lsa_peers(&comm) } {
//!     sum += unsafe { copy.read(i) };
//! }
//! ```
//!
//! # Ordering
//! [`PeerSlice::read`] and [`PeerSlice::write`] are plain (weak) accesses, ordered with other
//! ranks' accesses only by a barrier or a fence (as a CUDA load or store through the pointer).
//! For atomics and ordered accesses take the element's address ([`PeerSlice::ptr`]) to
//! [`crate::mem`].

use crate::check;
use crate::comm::DevComm;
use crate::ptr::SymPtr;
use crate::team::Team;

/// `len` elements of `T` from `start`, on every rank that has the window.
pub struct SymSlice<T> {
    start: SymPtr<T>,
    len: usize,
}

impl<T> Clone for SymSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SymSlice<T> {}

impl<T> core::fmt::Debug for SymSlice<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SymSlice")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

impl<T> SymSlice<T> {
    /// The `len` elements from `start`.
    #[inline(always)]
    pub const fn new(start: SymPtr<T>, len: usize) -> Self {
        SymSlice { start, len }
    }

    /// Number of elements.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no element.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The position of element 0.
    #[inline(always)]
    pub const fn start(&self) -> SymPtr<T> {
        self.start
    }

    /// Elements `from..from + len` of this view (checked against its length where
    /// [`check::ENABLED`]).
    #[inline(always)]
    pub fn range(self, from: usize, len: usize) -> Self {
        if check::ENABLED && (from > self.len || len > self.len - from) {
            check::range_out_of_view(from, len, self.len);
        }
        SymSlice::new(self.start.add(from), len)
    }

    /// The caller's own copy.
    ///
    /// # Safety
    /// As [`SymPtr::local`]; the window's copies hold the `len` elements.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn local(&self) -> PeerSlice<T> {
        // SAFETY: forwarded.
        PeerSlice::from_raw(unsafe { self.start.local() }, self.len)
    }

    /// LSA peer `peer`'s copy (the peer is checked where [`check::ENABLED`]).
    ///
    /// # Safety
    /// As [`SymPtr::lsa`]; the window's copies hold the `len` elements.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn lsa(&self, peer: i32) -> PeerSlice<T> {
        // SAFETY: forwarded.
        PeerSlice::from_raw(unsafe { self.start.lsa(peer) }, self.len)
    }

    /// Member `peer` of `team`'s copy (checked where [`check::ENABLED`]).
    ///
    /// # Safety
    /// As [`SymPtr::peer`]; the window's copies hold the `len` elements.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn peer(&self, team: &Team, peer: i32) -> PeerSlice<T> {
        // SAFETY: forwarded.
        PeerSlice::from_raw(unsafe { self.start.peer(team, peer) }, self.len)
    }

    /// Every LSA rank's copy, in LSA-rank order (0, 1, … `comm.lsa_size - 1`).
    ///
    /// # Safety
    /// As [`lsa`](Self::lsa); `comm` is the communicator the window belongs to.
    ///
    /// # Ordering
    /// None (address arithmetic).
    #[inline(always)]
    pub unsafe fn lsa_peers(&self, comm: &DevComm) -> LsaPeers<T> {
        LsaPeers {
            view: *self,
            next: 0,
            end: comm.lsa_size,
        }
    }
}

/// Iterator over the LSA team's copies of a [`SymSlice`] (see [`SymSlice::lsa_peers`]): one
/// [`PeerSlice`] per LSA rank, in rank order.
pub struct LsaPeers<T> {
    view: SymSlice<T>,
    next: i32,
    end: i32,
}

impl<T> Clone for LsaPeers<T> {
    fn clone(&self) -> Self {
        LsaPeers {
            view: self.view,
            next: self.next,
            end: self.end,
        }
    }
}

impl<T> core::fmt::Debug for LsaPeers<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LsaPeers")
            .field("next", &self.next)
            .field("end", &self.end)
            .finish()
    }
}

impl<T> ExactSizeIterator for LsaPeers<T> {}

impl<T> Iterator for LsaPeers<T> {
    type Item = PeerSlice<T>;

    #[inline(always)]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.end - self.next).max(0) as usize;
        (left, Some(left))
    }

    #[inline(always)]
    fn next(&mut self) -> Option<PeerSlice<T>> {
        if self.next >= self.end {
            return None;
        }
        let peer = self.next;
        self.next += 1;
        // SAFETY: the caller of `lsa_peers` vouched for the window and the communicator, so
        // `peer < lsa_size` names a mapped copy.
        Some(unsafe { self.view.lsa(peer) })
    }
}

/// One rank's copy of a [`SymSlice`]: `len` elements at a device address. Element accesses are
/// checked against `len` where [`check::ENABLED`].
pub struct PeerSlice<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> core::fmt::Debug for PeerSlice<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PeerSlice")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl<T> Clone for PeerSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PeerSlice<T> {}

impl<T> PeerSlice<T> {
    /// `len` elements at `ptr` (not dereferenced until an access).
    #[inline(always)]
    pub const fn from_raw(ptr: *mut T, len: usize) -> Self {
        PeerSlice { ptr, len }
    }

    /// Number of elements.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the copy has no element.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of element 0.
    #[inline(always)]
    pub const fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// The address of element `i` (checked against the length where [`check::ENABLED`]).
    #[inline(always)]
    pub fn ptr(&self, i: usize) -> *mut T {
        if check::ENABLED && i >= self.len {
            check::index_out_of_view(i, self.len);
        }
        self.ptr.wrapping_add(i)
    }

    /// Reads element `i` (a plain load).
    ///
    /// # Safety
    /// The copy is mapped and holds an initialised `T` at `i`; no other thread writes it
    /// concurrently without an order between the two (a barrier or a fence).
    ///
    /// # Ordering
    /// None (a weak load).
    #[inline(always)]
    pub unsafe fn read(&self, i: usize) -> T {
        // SAFETY: the caller's contract; `ptr` checked the index where enabled.
        unsafe { self.ptr(i).read() }
    }

    /// Writes element `i` (a plain store).
    ///
    /// # Safety
    /// The copy is mapped and writable at `i`; no other thread accesses that element
    /// concurrently without an order between the two.
    ///
    /// # Ordering
    /// None (a weak store).
    #[inline(always)]
    pub unsafe fn write(&self, i: usize, value: T) {
        // SAFETY: the caller's contract; `ptr` checked the index where enabled.
        unsafe { self.ptr(i).write(value) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::{EmuError, Launch};
    use crate::window::{Window, WindowHandle};

    /// A host buffer of 8 u64 and a descriptor of a two-rank window in which it is LSA rank
    /// `lsa_rank`'s copy (the other copy's address is computed, never dereferenced).
    struct Fake {
        mem: std::vec::Vec<u64>,
        desc: Window,
    }

    fn fake(lsa_rank: i32) -> Fake {
        let mem: std::vec::Vec<u64> = (0..8).map(|i| 100 + i).collect();
        let base = mem.as_ptr() as u64;
        // Rank `lsa_rank`'s copy is `mem`: the flat base is `lsa_rank` strides (4 GiB) below.
        let desc = Window {
            lsa_flat_base: base.wrapping_sub(u64::from(lsa_rank as u32) << 32),
            lsa_rank,
            stride4g: 1,
            lsa_size: 2,
            ..Window::default()
        };
        Fake { mem, desc }
    }

    #[test]
    fn a_view_reads_writes_and_walks_the_lsa_team_in_rank_order() {
        let mut f = fake(1);
        let h = WindowHandle::from_ptr(&raw const f.desc);
        let x = SymSlice::<u64>::new(h.sym(2), 4);
        // SAFETY: the local copy is `f.mem` (alive, 8 u64); elements 2..6 are in it.
        unsafe {
            let mine = x.local();
            assert_eq!(mine.len(), 4);
            assert_eq!(mine.read(0), 102);
            mine.write(3, 7);
        }
        assert_eq!(f.mem[5], 7);
        let comm = DevComm::new(1, 2, 1, 2);
        // SAFETY: only addresses are computed for the peers' copies.
        let peers: std::vec::Vec<u64> = unsafe { x.lsa_peers(&comm) }
            .map(|c| c.as_ptr() as u64)
            .collect();
        let base = f.mem.as_mut_ptr() as u64 + 16;
        assert_eq!(peers, [base - (1 << 32), base]);
        assert_eq!(x.range(1, 2).start().offset, 24);
        // The same element through the symmetric pointer's own accessors.
        let p = h.sym::<u64>(3);
        // SAFETY: element 3 of the local copy is in `f.mem`.
        unsafe {
            assert_eq!(p.read(), 103);
            p.write(9);
            assert_eq!(p.read_lsa(1), 9); // LSA rank 1 is this rank
        }
        assert_eq!(f.mem[3], 9);
    }

    #[test]
    fn indices_and_peers_past_the_end_are_reported() {
        let f = fake(0);
        let h = WindowHandle::from_ptr(&raw const f.desc);
        let x = SymSlice::<u64>::new(h.sym(0), 8);
        let message = |f: &(dyn Fn() + Sync)| match Launch::new(1u32, 1u32).run(f) {
            Err(EmuError::Panic { message, .. }) => message,
            other => panic!("not reported: {other:?}"),
        };
        let m = message(&|| {
            // SAFETY: the local copy is `f.mem`; the check stops the access before it reads.
            core::hint::black_box(unsafe { x.local().read(8) });
        });
        assert!(
            m.contains("element 8 is past the end of a view of 8 elements"),
            "{m}"
        );
        let m = message(&|| {
            // SAFETY: only an address would be computed; the check stops it first.
            core::hint::black_box(unsafe { x.lsa(2) });
        });
        assert!(
            m.contains("LSA peer 2 is not in the window's LSA team of 2 ranks"),
            "{m}"
        );
        let m = message(&|| {
            core::hint::black_box(x.range(6, 3));
        });
        assert!(
            m.contains("elements 6..9 are not in a view of 8 elements"),
            "{m}"
        );
    }
}
