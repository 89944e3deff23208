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

use symcomm_device::comm::DevComm;
use symcomm_device::mem::{Ordering, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::common::{
    Acc, bracketed, grid_stride, ld, local_addr, pack_off, peer_addr, reduce_packs, rotated, st,
};
use crate::ll_path::{LlLaunch, recv_pack, send_pack};
use crate::plan;

// ANCHOR: two_shot
/// Two-shot all-reduce of `packs` packs from `src` into `dst` (both windows; may be equal).
///
/// # Safety
/// See the entry points: windows of at least `packs × 16` bytes from the offsets on every
/// rank, `comm` with `grid_dim().x` barriers, the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn two_shot<T: Element, O: ReduceOp>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded to the bracket and the body.
    unsafe {
        bracketed(comm, Ordering::AcqRel, timeout_ns, status, || {
            if comm.lsa_size == 8 {
                two_shot_n::<T, O, 8>(comm, src, dst, packs)
            } else {
                two_shot_any::<T, O>(comm, src, dst, packs)
            }
        })
    }
}
// ANCHOR_END: two_shot

// ANCHOR: two_shot_n
#[inline(always)]
unsafe fn two_shot_n<T: Element, O: ReduceOp, const N: usize>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
) {
    let me = comm.lsa_rank;
    let (lo, hi) = plan::slice(packs, N as u64, me as u64);
    let mut sb = [0u64; N];
    let mut db = [0u64; N];
    let mut k = 0;
    while k < N {
        let p = rotated(me, k as i32, N as i32);
        // SAFETY: live descriptors (caller's contract).
        unsafe {
            sb[k] = peer_addr(src, p);
            db[k] = peer_addr(dst, p);
        }
        k += 1;
    }
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        let o = pack_off(j);
        let mut v = [U32x4::default(); N];
        let mut k = 0;
        while k < N {
            // SAFETY: j < packs, inside every peer's source.
            v[k] = unsafe { ld(sb[k] + o) };
            k += 1;
        }
        let r = reduce_packs::<T, O, N>(&v);
        k = 0;
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
unsafe fn two_shot_any<T: Element, O: ReduceOp>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let (lo, hi) = plan::slice(packs, n as u64, me as u64);
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        let o = pack_off(j);
        // SAFETY: as in two_shot_n.
        unsafe {
            let mut acc = Acc::<T, O>::new(ld(peer_addr(src, me) + o));
            for k in 1..n {
                acc.add(ld(peer_addr(src, rotated(me, k, n)) + o));
            }
            let r = acc.finish();
            for k in 0..n {
                st(peer_addr(dst, rotated(me, k, n)) + o, r);
            }
        }
        j += stride;
    }
}

/// Reduce-scatter: `dst` (this rank's, `packs` packs) = reduction over every peer of slice
/// `rank` (`packs` packs at `src + rank × packs × 16`).
///
/// # Safety
/// As [`two_shot`]; `src` holds `lsa_size × packs` packs, `dst` (may be a local pointer)
/// `packs` packs on every rank.
#[inline(always)]
pub unsafe fn reduce_scatter<T: Element, O: ReduceOp>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded.
    unsafe {
        bracketed(comm, Ordering::Release, timeout_ns, status, || {
            let (me, n) = (comm.lsa_rank, comm.lsa_size);
            let slice = pack_off(packs * me as u64);
            let out = local_addr(dst);
            let (first, stride) = grid_stride();
            let mut j = first;
            if n == 8 {
                let mut sb = [0u64; 8];
                let mut k = 0;
                while k < 8 {
                    sb[k] = peer_addr(src, rotated(me, k as i32, 8)) + slice;
                    k += 1;
                }
                while j < packs {
                    let o = pack_off(j);
                    let mut v = [U32x4::default(); 8];
                    k = 0;
                    while k < 8 {
                        v[k] = ld(sb[k] + o);
                        k += 1;
                    }
                    st(out + o, reduce_packs::<T, O, 8>(&v));
                    j += stride;
                }
            } else {
                while j < packs {
                    let o = pack_off(j) + slice;
                    let mut acc = Acc::<T, O>::new(ld(peer_addr(src, me) + o));
                    for k in 1..n {
                        acc.add(ld(peer_addr(src, rotated(me, k, n)) + o));
                    }
                    st(out + pack_off(j), acc.finish());
                    j += stride;
                }
            }
        })
    }
}

// ANCHOR: one_shot_ll
/// One-shot LL all-reduce of `packs` packs: `dst` (this rank's; may equal `src`, may be a
/// local pointer) = reduction over every rank's `src`, folded in rank order.
///
/// # Safety
/// `src` is a valid local range of `packs` packs (its window is not needed); `scratch` is
/// the gallery scratch window with room for `cap ≥ packs` packs per sender; every LSA rank
/// runs the same sequence of LL launches; `status` is null or a valid `u32`.
#[inline(always)]
pub unsafe fn one_shot_ll<T: Element, O: ReduceOp>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    scratch: SymPtr<u8>,
    cap: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let ll = LlLaunch::begin(comm, scratch, cap);
        let (me, n) = (comm.lsa_rank, comm.lsa_size);
        let (inp, out) = (local_addr(src), local_addr(dst));
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < packs {
            let v = ld(inp + pack_off(j));
            for k in 1..n {
                send_pack(&ll, rotated(me, k, n), j, v);
            }
            j += stride;
        }
        let mut res = Ok(());
        j = first;
        'packs: while j < packs {
            let own = ld(inp + pack_off(j));
            let first_v = if me == 0 {
                own
            } else {
                match recv_pack(&ll, 0, j, timeout_ns) {
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
                    match recv_pack(&ll, s, j, timeout_ns) {
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
        ll.end(res, status);
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
pub unsafe fn two_shot_ll<T: Element, O: ReduceOp>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    scratch: SymPtr<u8>,
    cap: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let ll = LlLaunch::begin(comm, scratch, cap);
        let (me, n) = (comm.lsa_rank, comm.lsa_size);
        let (inp, out) = (local_addr(src), local_addr(dst));
        let chunk = plan::slice_len(packs, n as u64);
        let (first, stride) = grid_stride();
        // Reduce-scatter: slice p (pack j of it) to peer p.
        for k in 1..n {
            let p = rotated(me, k, n);
            let (lo, hi) = plan::slice(packs, n as u64, p as u64);
            let mut j = first;
            while j < hi - lo {
                send_pack(&ll, p, j, ld(inp + pack_off(lo + j)));
                j += stride;
            }
        }
        let mut res = Ok(());
        // Reduce slice `me`, keep it, and send it on.
        let (lo, hi) = plan::slice(packs, n as u64, me as u64);
        let mut j = first;
        while j < hi - lo && res.is_ok() {
            let own = ld(inp + pack_off(lo + j));
            let acc = recv_reduce::<T, O>(&ll, n, j, own, timeout_ns, &mut res);
            // ANCHOR: two_shot_ll_forward
            let v = acc.finish();
            for k in 1..n {
                send_pack(&ll, rotated(me, k, n), chunk + j, v);
            }
            st(out + pack_off(lo + j), v);
            j += stride;
            // ANCHOR_END: two_shot_ll_forward
        }
        // All-gather: every peer's reduced slice.
        'peers: for k in 1..n {
            let s = rotated(me, k, n);
            let (lo, hi) = plan::slice(packs, n as u64, s as u64);
            let mut j = first;
            while j < hi - lo {
                if res.is_err() {
                    break 'peers;
                }
                match recv_pack(&ll, s, chunk + j, timeout_ns) {
                    Ok(v) => st(out + pack_off(lo + j), v),
                    Err(e) => res = Err(e),
                }
                j += stride;
            }
        }
        ll.end(res, status);
    }
}

/// The reduction, in rank order, of pack `j` of every rank: this rank's is `own`, the others'
/// arrive as LL lines in slot `j`. After a wait fails (its error lands in `res`, which must be
/// `Ok` on entry for any wait to happen) the remaining ranks contribute `own`: the result is
/// then not to be stored.
///
/// # Safety
/// `j < cap`; every peer sends pack `j` in this launch of `ll`.
#[inline(always)]
pub(crate) unsafe fn recv_reduce<T: Element, O: ReduceOp>(
    ll: &LlLaunch,
    n: i32,
    j: u64,
    own: U32x4,
    timeout_ns: u64,
    res: &mut Result<(), WaitError>,
) -> Acc<T, O> {
    // SAFETY: forwarded (caller's contract).
    let mut acc = Acc::<T, O>::new(unsafe { ll.pack_of(0, own, j, timeout_ns, res) });
    for s in 1..n {
        // SAFETY: as above.
        acc.add(unsafe { ll.pack_of(s, own, j, timeout_ns, res) });
    }
    acc
}
