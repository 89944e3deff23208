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

use crate::arch::{self, FULL_MASK, WARP_SIZE};

/// A group of threads acting together (see the module docs).
pub trait Coop {
    /// This thread's index in the group, `0..size()`.
    fn thread_rank(&self) -> u32;
    /// Number of threads in the group.
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
#[doc(alias = "ncclCoopTile")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tile<const N: u32>;

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
        Tile
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

impl<const N: u32> Coop for Tile<N> {
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
            arch::vote_any(self.lane_mask(), pred)
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
    /// The lanes in `mask` (must include the calling lane).
    #[inline(always)]
    pub const fn new(mask: u32) -> Self {
        Lanes { mask }
    }

    /// The lanes executing this call together (`activemask`); a snapshot, see
    /// [`arch::active_mask`].
    #[doc(alias = "ncclCoopCoalesced")]
    #[inline(always)]
    pub fn coalesced() -> Self {
        Lanes::new(arch::active_mask())
    }

    /// The lane mask.
    #[inline(always)]
    pub const fn mask(&self) -> u32 {
        self.mask
    }
}

impl Coop for Lanes {
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
    /// The span of `n_warps` warps starting at `warp0` using barrier id `id` (`0..15`; traps
    /// otherwise).
    #[inline(always)]
    pub fn new(warp0: u32, n_warps: u32, id: u32) -> Self {
        if id >= 15 || n_warps == 0 {
            arch::trap();
        }
        WarpSpan { warp0, n_warps, id }
    }
}

impl Coop for WarpSpan {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        arch::thread_idx().x - WARP_SIZE * self.warp0
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

impl Coop for Cta {
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
