//! Cooperative groups: a set of threads that execute a collective step together.
//!
//! A [`Coop`] knows each member's rank within the group, the group size, how to synchronise
//! the group, and how to OR a predicate over it. Barrier sessions and other collective device
//! functions are generic over it, so the same code works for one thread, a tile of a warp, a
//! warp, an arbitrary lane set, a span of warps, or the whole block:
//!
//! | type | `thread_rank` / `size` | `sync` |
//! |---|---|---|
//! | [`Thread`] = `Tile<1>` | 0 / 1 | none |
//! | [`Tile<N>`] (N a power of two ≤ 32) | `lane % N` / N | `bar.warp.sync` on the tile's lanes |
//! | [`Warp`] = `Tile<32>` | lane / 32 | `bar.warp.sync 0xffffffff` |
//! | [`Lanes`] (any lane mask) | rank among the mask's lanes / popcount | `bar.warp.sync mask` |
//! | [`WarpSpan`] (consecutive warps) | `tid.x - 32 * warp0` / `32 * n_warps` | named barrier `1 + id` |
//! | [`Cta`] | `tid.x` / `block_dim.x` | `bar.sync 0` |
//!
//! All members of a group must call each collective method together (same order, no
//! divergence between them). `Cta` and `WarpSpan` assume a 1-D block (`thread_idx().x`).
//!
//! The warp-level groups (`Tile`, `Warp`, `Lanes`) implement [`Coop::any`] as `bar.warp.sync`
//! followed by `vote.sync.any`: PTX gives `bar.warp.sync` memory ordering among the lanes, but
//! not `vote.sync`, and `any` promises the ordering of `sync`.

use crate::arch::{self, FULL_MASK, WARP_SIZE};

/// A group of threads acting together (see the module docs).
///
/// # Safety
/// Collective device functions (e.g. [`LsaBarrier`](crate::barrier::LsaBarrier)) split work
/// by rank and rely on the group's synchronisation for their memory ordering, so an
/// implementation must guarantee, on every thread that is a **member** of the group (the
/// threads the value describes, e.g. the lanes of a [`Lanes`] mask, the warps of a
/// [`WarpSpan`]):
/// - `thread_rank() < size()`, and distinct members have distinct ranks;
/// - `size()` is the number of members (so at least 1), the same on every member;
/// - `sync` and `any` wait for exactly the members and give the ordering documented on
///   [`sync`](Self::sync) (and `any` returns the same OR on every member).
///
/// A thread that calls the methods without being a member (e.g. a thread outside a
/// `WarpSpan`) is a bug of the caller, but no function of this crate lets it reach memory
/// outside what a member could reach.
pub unsafe trait Coop {
    /// This thread's index in the group, `0..size()`.
    fn thread_rank(&self) -> u32;
    /// Number of threads in the group (at least 1).
    fn size(&self) -> u32;
    /// Waits for every member.
    ///
    /// # Ordering
    /// Memory operations of the members before the sync are visible to all members after it
    /// (CTA scope).
    fn sync(&self);
    /// Waits for every member and returns the OR of their `pred` (the same on every member).
    ///
    /// # Ordering
    /// As [`sync`](Self::sync).
    fn any(&self, pred: bool) -> bool;
    /// True on the member of rank 0.
    #[inline(always)]
    fn is_leader(&self) -> bool {
        self.thread_rank() == 0
    }
}

/// `N` consecutive lanes of a warp, aligned to `N` (N a power of two, 1 ≤ N ≤ 32).
///
/// Only [`Tile::new`] (or `Default`, which calls it) builds one, and it rejects any other `N`
/// at compile time:
///
/// ```compile_fail,E0080
/// use symcomm_device::coop::{Coop, Tile};
/// let t = Tile::<3>::default(); // not a power of two: a compile-time error
/// t.sync();
/// ```
///
/// ```compile_fail,E0423
/// use symcomm_device::coop::Tile;
/// let t = Tile::<64>; // no unit-struct literal: the field is private
/// ```
#[doc(alias = "ncclCoopTile")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile<const N: u32> {
    /// Private, so that only the checked constructor builds a tile.
    _checked: (),
}

/// The calling thread alone.
#[doc(alias = "ncclCoopThread")]
pub type Thread = Tile<1>;

/// A whole warp.
#[doc(alias = "ncclCoopWarp")]
pub type Warp = Tile<32>;

impl<const N: u32> Tile<N> {
    /// The tile of the calling lane.
    #[inline(always)]
    pub const fn new() -> Self {
        const {
            assert!(
                N.is_power_of_two() && N <= WARP_SIZE,
                "tile size must be 1, 2, 4, 8, 16 or 32"
            )
        };
        Tile { _checked: () }
    }

    /// The lanes of the caller's tile.
    #[inline(always)]
    pub fn lane_mask(&self) -> u32 {
        if N == WARP_SIZE {
            FULL_MASK
        } else {
            ((1u32 << N) - 1) << (arch::lane_id() & !(N - 1))
        }
    }
}

impl<const N: u32> Default for Tile<N> {
    /// [`Tile::new`] (with its compile-time check of `N`).
    #[inline(always)]
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: a `Tile<N>` exists only through `new`, so `N` is a power of two ≤ 32: every lane is
// a member of the aligned tile of `lane_mask()`, has rank `lane % N < N`, and the tile's
// lanes have distinct ranks; `sync`/`any` synchronise exactly those lanes with
// `bar.warp.sync` (which orders memory among them).
unsafe impl<const N: u32> Coop for Tile<N> {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        if N == 1 { 0 } else { arch::lane_id() % N }
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        N
    }
    #[inline(always)]
    fn sync(&self) {
        if N > 1 {
            arch::sync_warp(self.lane_mask());
        }
    }
    #[inline(always)]
    fn any(&self, pred: bool) -> bool {
        if N == 1 {
            pred
        } else {
            // `vote.sync` alone orders no memory; `bar.warp.sync` gives the order of `sync`.
            let mask = self.lane_mask();
            arch::sync_warp(mask);
            arch::vote_any(mask, pred)
        }
    }
}

/// An arbitrary set of lanes of one warp, given as a mask that includes the caller.
#[doc(alias = "ncclCoopLanes")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    mask: u32,
}

impl Lanes {
    /// The lanes in `mask`, which must include the calling lane; traps otherwise (in
    /// particular for an empty mask, which would make a group of size 0).
    #[inline(always)]
    pub fn new(mask: u32) -> Self {
        if mask & arch::lanemask_eq() == 0 {
            arch::trap();
        }
        Lanes { mask }
    }

    /// The lanes executing this call together (`activemask`); a snapshot, see
    /// [`arch::active_mask`].
    #[doc(alias = "ncclCoopCoalesced")]
    #[inline(always)]
    pub fn coalesced() -> Self {
        // `activemask` always includes the calling lane: no check needed.
        Lanes {
            mask: arch::active_mask(),
        }
    }

    /// The lane mask.
    #[inline(always)]
    pub const fn mask(&self) -> u32 {
        self.mask
    }
}

// SAFETY: `new` traps unless the calling lane is in `mask` (and `coalesced` includes it), so
// the holder is a member; a member's rank is the number of mask lanes below it, which is
// less than the popcount and distinct per lane; `sync`/`any` use `bar.warp.sync mask`.
unsafe impl Coop for Lanes {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        (self.mask & arch::lanemask_lt()).count_ones()
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        self.mask.count_ones()
    }
    #[inline(always)]
    fn sync(&self) {
        arch::sync_warp(self.mask)
    }
    #[inline(always)]
    fn any(&self, pred: bool) -> bool {
        // `vote.sync` alone orders no memory; `bar.warp.sync` gives the order of `sync`.
        arch::sync_warp(self.mask);
        arch::vote_any(self.mask, pred)
    }
}

/// `n_warps` consecutive warps of a 1-D block starting at warp `warp0`, synchronised with
/// named barrier `1 + id` (`id` in `0..15`; barrier 0 belongs to [`Cta`]). Two spans that
/// run concurrently need different ids.
#[doc(alias = "ncclCoopWarpSpan")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarpSpan {
    warp0: u32,
    n_warps: u32,
    id: u32,
}

impl WarpSpan {
    /// The span of `n_warps` warps starting at `warp0` using barrier id `id` (`0..15`).
    /// Traps unless `id < 15`, `n_warps >= 1` and the span lies within the 32 warps a block
    /// can have (`warp0 + n_warps <= 32`).
    #[inline(always)]
    pub fn new(warp0: u32, n_warps: u32, id: u32) -> Self {
        // At most 1024 threads per block, so at most 32 warps.
        const MAX_WARPS: u32 = 1024 / WARP_SIZE;
        if id >= 15 || n_warps == 0 || n_warps > MAX_WARPS || warp0 > MAX_WARPS - n_warps {
            arch::trap();
        }
        WarpSpan { warp0, n_warps, id }
    }
}

// SAFETY: the members are the threads of warps `warp0 .. warp0 + n_warps` of a 1-D block
// (documented); for them `tid.x - 32 * warp0` is `0 .. 32 * n_warps` = `0..size()`, distinct;
// `sync`/`any` are the named barrier `1 + id` over exactly those threads.
unsafe impl Coop for WarpSpan {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        // >= size() on a thread outside the span (wrapping, in every build profile, on a
        // thread below `warp0`).
        arch::thread_idx().x.wrapping_sub(WARP_SIZE * self.warp0)
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        WARP_SIZE * self.n_warps
    }
    #[inline(always)]
    fn sync(&self) {
        arch::barrier_sync(1 + self.id, WARP_SIZE * self.n_warps)
    }
    #[inline(always)]
    fn any(&self, pred: bool) -> bool {
        arch::barrier_sync_or(1 + self.id, WARP_SIZE * self.n_warps, pred)
    }
}

/// Every thread of the (1-D) block.
#[doc(alias = "ncclCoopCta")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cta;

impl Cta {
    /// The calling thread's block.
    #[inline(always)]
    pub const fn new() -> Self {
        Cta
    }
}

// SAFETY: in a 1-D block (documented) the members are the block's threads, `tid.x <
// ntid.x = size()` and distinct; `sync`/`any` are `bar.sync 0` / `bar.red.or` over the block.
unsafe impl Coop for Cta {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        arch::thread_idx().x
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        arch::block_dim().x
    }
    #[inline(always)]
    fn sync(&self) {
        arch::sync_threads()
    }
    #[inline(always)]
    fn any(&self, pred: bool) -> bool {
        arch::sync_threads_or(pred)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_host_thread_is_rank_0_of_every_group() {
        assert_eq!((Thread::new().thread_rank(), Thread::new().size()), (0, 1));
        assert_eq!((Warp::new().thread_rank(), Warp::new().size()), (0, 32));
        assert_eq!(Tile::<8>::new().lane_mask(), 0xff);
        assert_eq!(Warp::new().lane_mask(), FULL_MASK);
        let l = Lanes::new(0b1011);
        assert_eq!((l.thread_rank(), l.size()), (0, 3));
        assert!(l.any(true) && !l.any(false));
        assert!(Cta::new().is_leader());
        assert_eq!(WarpSpan::new(0, 2, 3).size(), 64);
        Cta.sync();
        Warp::new().sync();
    }
}
