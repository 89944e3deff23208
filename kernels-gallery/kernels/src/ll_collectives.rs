//! LL (barrier-free) versions of all-gather, reduce-scatter, all-to-all and broadcast for
//! small sizes:
//! the same LL path as the one-shot all-reduce (`ll_path`). Every rank sends to and receives
//! from every peer in each launch, which the LL double-buffering relies on.
//!
//! `bytes` is the per-peer block: all-gather input, reduce-scatter output, all-to-all block.
//! Senders send in the packs of the receiver's destination, which sits at the same place in
//! its packs on every rank (the same offsets everywhere; the host sends an in-place
//! reduce-scatter whose blocks are not whole packs to the barrier kernel instead).
//! The entry points open and end the launch (`LlLaunch::begin`, `LlLaunch::end`) around
//! these bodies, which return the result of their waits.

use symcomm_device::mem::U32x4;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::common::{Io, by_shape, grid_stride, local_addr, rotated};
use crate::ll_path::{LlLaunch, recv_pack, send_pack};
use crate::plan;
use crate::shape::{Dst, Span, Src};

/// LL all-gather: block `rank` of every rank's `dst` receives this rank's `src`, in the packs
/// of that block.
///
/// # Safety
/// `src` holds `bytes` and `dst` `lsa_size × bytes` on this rank (`src` may be this rank's
/// block of `dst`); `ll` as for the one-shot all-reduce with `cap ≥` the most packs of a block
/// (`plan::block_packs`).
#[inline(always)]
pub unsafe fn all_gather(ll: &LlLaunch, io: Io, any: bool) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, all_gather_in(ll, io)) }
}

#[inline(always)]
unsafe fn all_gather_in<const ANY: bool>(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let (me, bytes) = (ll.me, io.bytes);
        let mine = out + me as u64 * bytes;
        let span = Span::<ANY>::new(io.dst.offset as u64 + me as u64 * bytes, bytes);
        let (from, to) = (Src::at(inp, span), Dst::at(mine, span));
        // Written out rather than through `LlLaunch::send_all` with a copy: that form (the own
        // block's address hoisted out of the loop) made ptxas schedule the kernel with 54
        // registers instead of 44, and the 4 KiB all-gather took 6% longer on an H100.
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < span.packs() {
            let v = from.load(j);
            ll.send_peers(j, v);
            to.store_straight(j, v);
            j += stride;
        }
        recv_blocks::<ANY>(ll, out, bytes)
    }
}

/// LL all-to-all: block `p` of this rank's `src` lands in block `rank` of peer `p`'s `dst`,
/// in the packs of that block.
///
/// Any shape: the first half of the grid sends and receives, the second half copies this
/// rank's own block (the host launches threads for twice the packs). On the threads that
/// send, the copy (a load, then a store in pieces at the block's edges) sat between the
/// sends and the first poll, or after the last: an odd 4 KiB all-to-all took 2.62 µs
/// against 2.12 µs for the next multiple of 16 bytes wherever it was, 2.42–2.49 µs apart
/// (2 ranks on one H100). The whole-pack form keeps its one loop: there the copy's load
/// overlaps the wait for the peers' lines (after them, it took 2.55 µs).
///
/// # Safety
/// `src` and `dst` hold `lsa_size × bytes` on this rank and do not overlap; `ll` as for
/// [`all_gather`]; the grid has a nonzero even number of threads (whole warps: the any-shape
/// form splits it into threads that send and threads that copy).
#[inline(always)]
pub unsafe fn all_to_all(ll: &LlLaunch, io: Io, any: bool) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, all_to_all_in(ll, io)) }
}

#[inline(always)]
unsafe fn all_to_all_in<const ANY: bool>(ll: &LlLaunch, io: Io) -> Result<(), WaitError> {
    let bytes = io.bytes;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let mine = ll.me as u64 * bytes;
        let span = Span::<ANY>::new(io.dst.offset as u64 + mine, bytes);
        let (from, to) = (Src::at(inp + mine, span), Dst::at(out + mine, span));
        let (first, stride) = grid_stride();
        if ANY {
            // Half the grid sends and receives, half copies (an even number of threads: whole
            // warps). Kept this simple on purpose: rounding `half` to whole warps and stepping
            // the copiers by `stride - half` made the same 4 KiB launches 0.07 µs slower.
            let half = stride / 2;
            if first < half {
                let mut j = first;
                while j < span.packs() {
                    ll.send_blocks(inp, bytes, span, j);
                    j += half;
                }
                return recv_blocks_from::<ANY>(ll, out, bytes, (first, half));
            }
            let mut j = first - half;
            while j < span.packs() {
                to.store_straight(j, from.load(j));
                j += half;
            }
            return Ok(());
        }
        let mut j = first;
        while j < span.packs() {
            ll.send_blocks(inp, bytes, span, j);
            to.store_straight(j, from.load(j));
            j += stride;
        }
        recv_blocks::<ANY>(ll, out, bytes)
    }
}

/// LL broadcast: `bytes` of LSA rank `root`'s `src` land in every rank's `dst`, in the packs
/// of `dst`.
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
/// `src` (on the root) and `dst` hold `bytes` on this rank (`dst` may equal `src`); `root` is
/// an LSA rank; `ll` as for [`all_gather`] with `cap ≥` the packs of `dst`.
#[inline(always)]
pub unsafe fn broadcast(ll: &LlLaunch, io: Io, root: i32, any: bool) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, broadcast_in(ll, io, root)) }
}

#[inline(always)]
unsafe fn broadcast_in<const ANY: bool>(ll: &LlLaunch, io: Io, root: i32) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        let out = Dst::at(local_addr(io.dst), span);
        let (first, stride) = grid_stride();
        let lead = first == 0;
        let mut res = Ok(());
        if me == root {
            let from = Src::at(local_addr(io.src), span);
            ll.send_all(from, span.packs(), Some(out));
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
            while j < span.packs() && res.is_ok() {
                let v = ll.pack_of(root, U32x4::default(), j, &mut res);
                if res.is_ok() {
                    out.store_straight(j, v);
                }
                j += stride;
            }
        }
        res
    }
}

/// LL reduce-scatter: `dst` (`bytes`) = reduction, in rank order, of block `rank` of every
/// rank's `src`, in the packs of `dst`.
///
/// # Safety
/// `src` holds `lsa_size × bytes` on this rank, `dst` `bytes` (may be this rank's block of
/// `src`); `ll` as for [`all_gather`] with `cap ≥` the packs of `dst`.
#[inline(always)]
pub unsafe fn reduce_scatter<T: Element, O: ReduceOp>(
    ll: &LlLaunch,
    io: Io,
    any: bool,
) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, reduce_scatter_in::<T, O>(ll, io)) }
}

#[inline(always)]
unsafe fn reduce_scatter_in<T: Element, O: ReduceOp, const ANY: bool>(
    ll: &LlLaunch,
    io: Io,
) -> Result<(), WaitError> {
    let bytes = io.bytes;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (inp, out) = (local_addr(io.src), local_addr(io.dst));
        let span = Span::<ANY>::new(io.dst.offset as u64, bytes);
        let (own, out) = (
            Src::at(inp + ll.me as u64 * bytes, span),
            Dst::at(out, span),
        );
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < span.packs() {
            ll.send_blocks(inp, bytes, span, j);
            j += stride;
        }
        let mut res = Ok(());
        j = first;
        while j < span.packs() && res.is_ok() {
            let acc = ll.reduce::<T, O>(j, own.load(j), &mut res);
            if res.is_ok() {
                out.store_straight(j, acc.finish());
            }
            j += stride;
        }
        res
    }
}

/// Receives, for each of this thread's packs `j` (grid-stride), pack `j` of every peer `s`
/// (visited rotated) into block `s` (`bytes` at byte `s × bytes`) of `out`, in that block's
/// packs; stops at the first wait that fails and returns its error.
///
/// # Safety
/// `out` holds `lsa_size × bytes` on this rank; every peer `s` sends the packs of its block
/// in this launch of `ll`.
#[inline(always)]
unsafe fn recv_blocks<const ANY: bool>(
    ll: &LlLaunch,
    out: u64,
    bytes: u64,
) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { recv_blocks_from::<ANY>(ll, out, bytes, grid_stride()) }
}

/// [`recv_blocks`] over packs `first, first + stride, …` (`stride ≥ 1`; the threads that
/// receive, together, cover every pack).
///
/// # Safety
/// As [`recv_blocks`].
#[inline(always)]
unsafe fn recv_blocks_from<const ANY: bool>(
    ll: &LlLaunch,
    out: u64,
    bytes: u64,
    (first, stride): (u64, u64),
) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    let most = if ANY {
        plan::block_packs(out, bytes, n as u64)
    } else {
        bytes / plan::PACK
    };
    let mut res = Ok(());
    let mut j = first;
    'packs: while j < most {
        for k in 1..n {
            let s = rotated(me, k, n);
            let block = out + s as u64 * bytes;
            let span = Span::<ANY>::new(block, bytes);
            if j >= span.packs() {
                continue;
            }
            // SAFETY: j < the packs of block `s`, sent by peer `s` (caller's contract).
            unsafe {
                match recv_pack(ll, s, j) {
                    Ok(v) => Dst::at(block, span).store_straight(j, v),
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
