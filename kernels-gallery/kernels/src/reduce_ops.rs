//! All-reduce and reduce-scatter bodies, generic over the element type `T` and operator `O`
//! (the entry points in `lib.rs` instantiate them).
//!
//! - **two-shot** (bandwidth): rank `r` owns slice `r` of the packs; for each of its packs it
//!   loads the pack from every peer, reduces, and stores the result into every peer's output
//!   (reduce-scatter by loads + all-gather by stores, fused per pack). Each pack is read and
//!   written by one thread of one rank only, so in-place needs no extra barrier.
//! - **one-shot LL** (latency): every rank pushes its input to every peer as LL lines (data
//!   and epoch in one 16-byte store) into the peer's scratch window, then polls its own
//!   scratch for every peer's lines and reduces in rank order (the same bits on every rank).
//!   No barrier at all: the epoch lives in device memory and advances once per launch.
//! - **reduce-scatter**: rank `r` loads slice `r` from every peer, reduces, stores locally.
//!
//! The entry points bracket the barrier bodies with the LSA barriers (`common::bracketed`)
//! and open and end the LL launch around the LL bodies (`ll_path::LlLaunch`).

use symcomm_device::comm::DevComm;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::common::{
    Acc, Io, grid_stride, ld, ld_each, local_addr, pack_off, peer_addrs, pull, reduce_packs,
    rotated, st, st_peers,
};
use crate::ll_path::{LlLaunch, recv_pack};
use crate::plan;

// ANCHOR: two_shot
/// Two-shot all-reduce of `packs` packs from `src` into `dst` (both windows; may be equal).
/// Its entry point runs it between the LSA barriers of [`bracketed`](crate::common::bracketed)
/// with an `AcqRel` exit: it stores into peers.
///
/// # Safety
/// See the entry points: windows of at least `packs × 16` bytes from the offsets on every
/// rank, `comm` with `grid_dim().x` barriers, the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn two_shot<T: Element, O: ReduceOp>(comm: &DevComm, io: Io) {
    // SAFETY: forwarded.
    unsafe {
        if comm.lsa_size == 8 {
            two_shot_n::<T, O, 8>(comm, io)
        } else {
            two_shot_any::<T, O>(comm, io)
        }
    }
}
// ANCHOR_END: two_shot

// ANCHOR: two_shot_n
#[inline(always)]
unsafe fn two_shot_n<T: Element, O: ReduceOp, const N: usize>(comm: &DevComm, io: Io) {
    let me = comm.lsa_rank;
    let (lo, hi) = plan::slice(io.packs, N as u64, me as u64);
    // Every rank's copy of both (rotated), computed once.
    // SAFETY: live descriptors (caller's contract).
    let (sb, db) = unsafe {
        (
            peer_addrs::<N>(io.src, me, 0),
            peer_addrs::<N>(io.dst, me, 0),
        )
    };
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        let o = pack_off(j);
        // SAFETY: j < packs, inside every peer's source.
        let r = reduce_packs::<T, O, N>(&unsafe { ld_each(&sb, o) });
        let mut k = 0;
        while k < N {
            // SAFETY: j < packs, inside every peer's destination; only this thread of this
            // rank touches pack j of any copy.
            unsafe { st(db[k] + o, r) };
            k += 1;
        }
        j += stride;
    }
}
// ANCHOR_END: two_shot_n

#[inline(always)]
unsafe fn two_shot_any<T: Element, O: ReduceOp>(comm: &DevComm, io: Io) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let (lo, hi) = plan::slice(io.packs, n as u64, me as u64);
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        let o = pack_off(j);
        // SAFETY: as in two_shot_n.
        unsafe { st_peers(io.dst, me, n, o, pull::<T, O>(io.src, me, n, o).finish()) };
        j += stride;
    }
}

/// Reduce-scatter: `dst` (this rank's, `packs` packs) = reduction over every peer of slice
/// `rank` (`packs` packs at `src + rank × packs × 16`). Barrier-bracketed, exit `Release`
/// (it stores only into its own memory).
///
/// # Safety
/// As [`two_shot`]; `src` holds `lsa_size × packs` packs, `dst` (may be a local pointer)
/// `packs` packs on every rank.
#[inline(always)]
pub unsafe fn reduce_scatter<T: Element, O: ReduceOp>(comm: &DevComm, io: Io) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let slice = pack_off(io.packs * me as u64);
    // SAFETY: forwarded.
    unsafe {
        let out = local_addr(io.dst);
        let (first, stride) = grid_stride();
        let mut j = first;
        if n == 8 {
            let sb = peer_addrs::<8>(io.src, me, slice);
            while j < io.packs {
                let o = pack_off(j);
                st(out + o, reduce_packs::<T, O, 8>(&ld_each(&sb, o)));
                j += stride;
            }
        } else {
            while j < io.packs {
                let o = pack_off(j);
                st(out + o, pull::<T, O>(io.src, me, n, o + slice).finish());
                j += stride;
            }
        }
    }
}

// ANCHOR: one_shot_ll
/// One-shot LL all-reduce of `packs` packs: `dst` (this rank's; may equal `src`, may be a
/// local pointer) = reduction over every rank's `src`, folded in rank order. The result of
/// the waits goes back to the entry point, which ends the launch (`ll.end`).
///
/// # Safety
/// `src` is a valid local range of `packs` packs (its window is not needed); `ll` was begun
/// on the gallery scratch window with room for `cap ≥ packs` packs per sender; every LSA rank
/// runs the same sequence of LL launches.
#[inline(always)]
pub unsafe fn one_shot_ll<T: Element, O: ReduceOp>(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    let (me, n, packs) = (ll.me, ll.n, io.packs);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        // Every pack to every peer, starting with the next rank (`rotated`).
        ll.send_all(inp, packs, None);
        let (first, stride) = grid_stride();
        let mut res = Ok(());
        let mut j = first;
        'packs: while j < packs {
            let own = ld(inp + pack_off(j));
            let first_v = if me == 0 {
                own
            } else {
                match recv_pack(ll, 0, j) {
                    Ok(v) => v,
                    Err(e) => {
                        res = Err(e);
                        break 'packs;
                    }
                }
            };
            let mut acc = Acc::<T, O>::new(first_v);
            for s in 1..n {
                let v = if s == me {
                    own
                } else {
                    match recv_pack(ll, s, j) {
                        Ok(v) => v,
                        Err(e) => {
                            res = Err(e);
                            break 'packs;
                        }
                    }
                };
                acc.add(v);
            }
            st(out + pack_off(j), acc.finish());
            j += stride;
        }
        res
    }
}
// ANCHOR_END: one_shot_ll

/// Two-shot all-reduce on LL lines, no barrier: rank `r` sends slice `p` of its input to peer
/// `p` (reduce-scatter), reduces slice `r` in rank order as its lines arrive, then sends the
/// result to every peer (all-gather). LL slots `[0, slice)` of each sender carry the first
/// phase, `[slice, 2 slice)` the second.
///
/// # Safety
/// As [`one_shot_ll`] with `src` and `dst` holding `packs` packs on this rank and
/// `cap ≥ 2 × ceil(packs / lsa_size)`.
#[inline(always)]
pub unsafe fn two_shot_ll<T: Element, O: ReduceOp>(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    let (me, n, packs) = (ll.me, ll.n, io.packs);
    let chunk = plan::slice_len(packs, n as u64);
    // `(first, len)` of slice `p`.
    let slice = |p: i32| {
        let (lo, hi) = plan::slice(packs, n as u64, p as u64);
        (lo, hi - lo)
    };
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        // Reduce-scatter: slice p (pack j of it) to peer p.
        ll.send_slices(inp, slice);
        let (first, stride) = grid_stride();
        let mut res = Ok(());
        // Reduce slice `me`, keep it, and send it on.
        let (lo, len) = slice(me);
        let mut j = first;
        while j < len && res.is_ok() {
            let own = ld(inp + pack_off(lo + j));
            let acc = ll.reduce::<T, O>(j, own, &mut res);
            // ANCHOR: two_shot_ll_forward
            let v = acc.finish();
            ll.send_peers(chunk + j, v);
            st(out + pack_off(lo + j), v);
            j += stride;
            // ANCHOR_END: two_shot_ll_forward
        }
        // All-gather: every peer's reduced slice.
        'peers: for k in 1..n {
            let s = rotated(me, k, n);
            let (lo, len) = slice(s);
            let mut j = first;
            while j < len {
                if res.is_err() {
                    break 'peers;
                }
                match recv_pack(ll, s, chunk + j) {
                    Ok(v) => st(out + pack_off(lo + j), v),
                    Err(e) => res = Err(e),
                }
                j += stride;
            }
        }
        res
    }
}
