//! `coop`: cooperative groups (Thread, Tile, Warp, Lanes, WarpSpan, Cta) reporting their rank,
//! size and vote, and the memory order of the warp-level `any` that the barrier (`barrier`)
//! relies on.

use symcomm_device::arch;
use symcomm_device::prelude::*;

/// The mask of the calling lane's half warp (lanes 0-15 or 16-31), for a `Lanes` group.
#[inline(always)]
fn half_warp() -> u32 {
    if arch::lane_id() < 16 {
        0x0000_ffff
    } else {
        0xffff_0000
    }
}

/// `[thread_rank, size, any(p)]` of the group `g`.
#[inline(always)]
fn probe<C: Coop>(g: &C, p: bool) -> [u32; 3] {
    [g.thread_rank(), g.size(), u32::from(g.any(p))]
}

/// Cooperative groups: per thread 20 words at `out[20 * tid ..]` (one block of 128 threads):
/// rank/size/any for Thread, Tile<4>, Warp, Lanes (half warps), WarpSpan (warps 0-1 with id
/// 0, warps 2-3 with id 1), Cta, where `any` ORs `thread_idx().x == 70`.
///
/// # Safety
/// One block of exactly 128 threads; `out` holds 20 × 128 u32.
#[kernel]
pub unsafe fn coop_probe(out: *mut u32) {
    let t = thread_idx().x;
    let p = t == 70;
    let th = Thread::new();
    let t4 = Tile::<4>::new();
    let w = Warp::new();
    let l = Lanes::new(half_warp());
    let s = if t < 64 {
        WarpSpan::new(0, 2, 0)
    } else {
        WarpSpan::new(2, 2, 1)
    };
    let c = Cta::new();
    let groups = [
        probe(&th, p),
        probe(&t4, p),
        probe(&w, p),
        probe(&l, p),
        probe(&s, p),
        probe(&c, p),
    ];
    let mut words = [0; 20];
    words[..18].copy_from_slice(groups.as_flattened());
    t4.sync();
    w.sync();
    l.sync();
    s.sync();
    c.sync();
    for (k, x) in words.into_iter().enumerate() {
        // SAFETY: launch contract.
        unsafe { *out.add(20 * t as usize + k) = x };
    }
}

/// `Coop::any` of the warp-level groups (Tile<4>, Warp, Lanes of half warps): `out[t]` has
/// bit 0/1/2 set when the group's OR of `thread_idx().x == 70` is true. Its PTX shows that
/// each `any` synchronises with `bar.warp.sync` (which orders memory; `vote.sync` does not),
/// as `LsaBarrier::wait` relies on for warp-level groups.
///
/// # Safety
/// 1-D blocks of whole warps; `out` holds one u32 per thread of the block.
#[kernel]
pub unsafe fn warp_any_orders(out: *mut u32) {
    let t = thread_idx().x;
    let p = t == 70;
    let half = half_warp();
    let bits = u32::from(Tile::<4>::new().any(p))
        | u32::from(Warp::new().any(p)) << 1
        | u32::from(Lanes::new(half).any(p)) << 2;
    // SAFETY: launch contract.
    unsafe { *out.add(t as usize) = bits };
}
