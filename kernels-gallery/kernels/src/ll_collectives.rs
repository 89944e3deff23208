//! LL (barrier-free) versions of all-gather, reduce-scatter, all-to-all and broadcast for
//! small sizes:
//! the same LL path as the one-shot all-reduce (`ll_path`). Every rank sends to and receives
//! from every peer in each launch, which the LL double-buffering relies on.
//!
//! `packs` is the per-peer block: all-gather input, reduce-scatter output, all-to-all block.
//! The entry points open and end the launch (`LlLaunch::begin`, `LlLaunch::end`) around
//! these bodies, which return the result of their waits.

use symcomm_device::mem::U32x4;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::common::{Io, grid_stride, ld, local_addr, pack_off, rotated, st};
use crate::ll_path::{LlLaunch, recv_pack, send_pack};

/// LL all-gather: block `rank` of every rank's `dst` receives this rank's `src`.
///
/// # Safety
/// `src` holds `packs` packs and `dst` `lsa_size × packs` packs on this rank (`src` may be
/// this rank's block of `dst`); `ll` as for the one-shot all-reduce with `cap ≥ packs`.
#[inline(always)]
pub unsafe fn all_gather(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let (me, packs) = (ll.me, io.packs);
        // Written out rather than through `LlLaunch::send_all` with a copy: that form (the own
        // block's address hoisted out of the loop) made ptxas schedule the kernel with 54
        // registers instead of 44, and the 4 KiB all-gather took 6% longer on an H100.
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < packs {
            let v = ld(inp + pack_off(j));
            ll.send_peers(j, v);
            st(out + pack_off(me as u64 * packs + j), v);
            j += stride;
        }
        recv_blocks(ll, out, packs)
    }
}

/// LL all-to-all: block `p` of this rank's `src` lands in block `rank` of peer `p`'s `dst`.
///
/// # Safety
/// `src` and `dst` hold `lsa_size × packs` packs on this rank and do not overlap; `ll` as
/// for [`all_gather`].
#[inline(always)]
pub unsafe fn all_to_all(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    let packs = io.packs;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let (first, stride) = grid_stride();
        let mine = ll.me as u64 * packs;
        let mut j = first;
        while j < packs {
            ll.send_blocks(inp, packs, j);
            st(out + pack_off(mine + j), ld(inp + pack_off(mine + j)));
            j += stride;
        }
        recv_blocks(ll, out, packs)
    }
}

/// LL broadcast: `packs` packs of LSA rank `root`'s `src` land in every rank's `dst`.
///
/// The root pushes every pack to every peer as LL lines and copies it into its own `dst`;
/// the other ranks poll for the root's lines. The LL double buffering needs every rank to
/// hear from each peer it sends to in every launch (see `ll_path`): here only the root sends
/// data, so every other rank sends the root one pack (slot 0 of its sender slot, otherwise
/// unused) as an acknowledgement and the root waits for them. A peer can then only be in
/// launch `k + 2` (the root's bank of `k` again) after the root's `k + 1` data, sent after the
/// root had read the peer's `k + 1` acknowledgement, itself sent after the peer had finished
/// reading launch `k`; and the other way round.
///
/// # Safety
/// `src` (on the root) and `dst` hold `packs` packs on this rank (`dst` may equal `src`);
/// `root` is an LSA rank; `ll` as for [`all_gather`] with `cap ≥ packs`.
#[inline(always)]
pub unsafe fn broadcast(ll: &LlLaunch, io: Io, root: i32) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let out = local_addr(io.dst);
        let (first, stride) = grid_stride();
        let lead = first == 0;
        let mut res = Ok(());
        if me == root {
            ll.send_all(local_addr(io.src), io.packs, Some(out));
            if lead {
                // The acknowledgements carry nothing: only their arrival matters.
                for k in 1..n {
                    ll.pack_of(rotated(me, k, n), U32x4::default(), 0, &mut res);
                }
            }
        } else {
            if lead {
                send_pack(ll, root, 0, U32x4::default());
            }
            let mut j = first;
            while j < io.packs && res.is_ok() {
                let v = ll.pack_of(root, U32x4::default(), j, &mut res);
                if res.is_ok() {
                    st(out + pack_off(j), v);
                }
                j += stride;
            }
        }
        res
    }
}

/// LL reduce-scatter: `dst` (`packs` packs) = reduction, in rank order, of block `rank` of
/// every rank's `src`.
///
/// # Safety
/// `src` holds `lsa_size × packs` packs on this rank, `dst` `packs` packs (may be this rank's
/// block of `src`); `ll` as for [`all_gather`].
#[inline(always)]
pub unsafe fn reduce_scatter<T: Element, O: ReduceOp>(
    ll: &LlLaunch,
    io: Io,
) -> Result<(), WaitError> {
    let packs = io.packs;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < packs {
            ll.send_blocks(inp, packs, j);
            j += stride;
        }
        let mine = ll.me as u64 * packs;
        let mut res = Ok(());
        j = first;
        while j < packs && res.is_ok() {
            let own = ld(inp + pack_off(mine + j));
            let acc = ll.reduce::<T, O>(j, own, &mut res);
            if res.is_ok() {
                st(out + pack_off(j), acc.finish());
            }
            j += stride;
        }
        res
    }
}

/// Receives, for each of this thread's packs `j` (grid-stride), pack `j` of every peer `s`
/// (visited rotated) into block `s` (`packs` packs) of `out`; stops at the first wait that
/// fails and returns its error.
///
/// # Safety
/// `out` holds `lsa_size × packs` packs on this rank; every peer sends packs `0..packs` in
/// this launch of `ll`.
#[inline(always)]
unsafe fn recv_blocks(ll: &LlLaunch, out: u64, packs: u64) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    let (first, stride) = grid_stride();
    let mut res = Ok(());
    let mut j = first;
    'packs: while j < packs {
        for k in 1..n {
            let s = rotated(me, k, n);
            // SAFETY: j < packs ≤ cap, sent by peer `s`; block `s` of `out` holds pack `j`
            // (caller's contract).
            unsafe {
                match recv_pack(ll, s, j) {
                    Ok(v) => st(out + pack_off(s as u64 * packs + j), v),
                    Err(e) => {
                        res = Err(e);
                        break 'packs;
                    }
                }
            }
        }
        j += stride;
    }
    res
}
