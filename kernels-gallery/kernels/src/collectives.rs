//! Data-movement collectives (no reduction): all-gather, all-to-all, broadcast. All are
//! barrier-bracketed and push with 16-byte stores into peers' windows, visiting peers in an
//! order rotated by rank.

use symcomm_device::comm::DevComm;
use symcomm_device::mem::U32x4;

use crate::common::{
    Gate, Io, by_shape, grid_stride, ld, ld_each, local_addr, pack_off, passes, peer_addr, rotated,
    settle, st, st_peers, stride_pairs, unroll,
};
use crate::plan::{self, PACK};
use crate::shape::{Dst, EdgeBytes, Edges, Span, Src, floor};

/// All-gather: block `rank` (`bytes` at `dst + rank × bytes`) of every peer's `dst` receives
/// this rank's `src` (`bytes`, local), in the packs of that block. Barrier-bracketed, exit
/// `AcqRel` (it stores into peers).
///
/// `gate` is the entry barrier's wait ([`Gate`]): the body reads its descriptors and computes
/// its addresses and bounds before opening it.
///
/// # Safety
/// `src` valid for `bytes` locally; `dst` a window of `lsa_size × bytes` on every rank;
/// `comm` with `grid_dim().x` barriers; the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn all_gather(comm: &DevComm, io: Io, any: bool, gate: &mut Gate) {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, all_gather_in(comm, io, gate)) }
}

#[inline(always)]
unsafe fn all_gather_in<const ANY: bool>(comm: &DevComm, io: Io, gate: &mut Gate) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let at = io.bytes * me as u64;
    // SAFETY: forwarded.
    unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64 + at, io.bytes);
        // (Two ranks: `all_gather_two`, a kernel of its own; here they take the loop below.)
        if ANY && n == 4 {
            return all_gather_any_n::<4>(comm, io, gate);
        }
        let inp = local_addr(io.src);
        let from = Src::at(inp, span);
        if !gate.open() {
            return;
        }
        if ANY {
            passes!(0, span.packs(), |p| {
                let v = p.load(|j| from.load(j));
                for k in 0..n {
                    let to = Dst::at(peer_addr(io.dst, rotated(me, k, n)) + at, span);
                    p.each(&v, |j, x| to.store(j, x));
                }
            });
            return;
        }
        // Whole packs: the loop of before any shape was taken.
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < span.packs() {
            let o = pack_off(j);
            st_peers(io.dst, me, n, at + o, ld(inp + o));
            j += stride;
        }
    }
}

/// [`all_gather`] of any shape for a team of exactly two LSA ranks: the body of
/// [`all_gather_any_n`] alone, the host's `all_gather_any_2`. In the kernel that also holds
/// the bodies for four ranks and for any count, the same two-rank body took about 190 cycles
/// more from the entry barrier to its first pass (900 against 710, clock stamps in one block),
/// and an odd all-gather of 1 MiB and a bit 1.05–1.07× the next multiple of 16 bytes, against
/// 1.02–1.05× in a kernel of its own (two ranks on one H100, four device calls).
///
/// # Safety
/// As [`all_gather`]; the LSA team has two ranks.
#[inline(always)]
pub unsafe fn all_gather_two(comm: &DevComm, io: Io, gate: &mut Gate) {
    // SAFETY: forwarded.
    unsafe { all_gather_any_n::<2>(comm, io, gate) }
}

/// [`all_gather`]'s any-shape body for `N` ranks: every peer's destination address computed
/// once ([`unroll`]: in registers). The whole setup (descriptor reads, the shift, the inner
/// packs and the edge bytes) runs before the entry barrier's wait ([`Gate`], [`settle`]):
/// with it after the wait, the any-shape kernel on 16-byte aligned data took 1.03–1.04× the
/// aligned kernel's time at 1 MiB (two ranks on one H100).
///
/// # Safety
/// As [`all_gather`]; `N` is the LSA team's size.
#[inline(always)]
unsafe fn all_gather_any_n<const N: usize>(comm: &DevComm, io: Io, gate: &mut Gate) {
    let me = comm.lsa_rank;
    let at = io.bytes * me as u64;
    let span = Span::<true>::new(io.dst.offset as u64 + at, io.bytes);
    // SAFETY: live descriptors (the caller's contract).
    let src = unsafe { local_addr(io.src) };
    let from = Src::at(src, span);
    let mut to = [0u64; N];
    unroll::<N>(|k| {
        // SAFETY: as above.
        to[k] = floor(unsafe { peer_addr(io.dst, rotated(me, k as i32, N as i32)) } + at);
    });
    let (mut span, mut from, mut src) = (span, from, src);
    let (mut lo, mut hi) = span.inner();
    let mut edges = EdgeBytes::new(Edges::of(span));
    span.settle();
    from.settle();
    settle(&mut src);
    unroll::<N>(|k| settle(&mut to[k]));
    settle(&mut lo);
    settle(&mut hi);
    edges.settle();
    if !gate.open() {
        return;
    }
    // SAFETY: forwarded.
    unsafe {
        if from.shift.is_flat() {
            all_gather_pairs::<N, true>(span, (lo, hi), edges, from, src, &to)
        } else {
            all_gather_pairs::<N, false>(span, (lo, hi), edges, from, src, &to)
        }
    }
}

/// The passes of [`all_gather_any_n`] over the range's whole packs ([`Span::inner`]), with
/// the shifted loads when `FLAT` ([`Src::load_as`]); the bytes outside them one per thread
/// ([`EdgeBytes`]).
///
/// A pass stored a partial pack in pieces ([`Dst::store`]) before: the thread holding both
/// partial packs of a block (thread 0, with a third pack at 1 MiB and a few bytes) took
/// about 1000 clock cycles more than the others, and its block was the last to finish.
///
/// # Safety
/// `from` (first byte at `src`) and the destination copies `to` (pack 0 of block `me`) hold
/// the range.
#[inline(always)]
unsafe fn all_gather_pairs<const N: usize, const FLAT: bool>(
    span: Span<true>,
    (lo, hi): (u64, u64),
    edges: EdgeBytes,
    from: Src<true>,
    src: u64,
    to: &[u64; N],
) {
    // SAFETY: the source holds the range.
    let first = unsafe { edges.load(&[src]) };
    passes!(lo, hi, |p| {
        // SAFETY: whole packs of the source and of block `me` of every peer's destination;
        // only this thread of this rank writes them.
        unsafe {
            let v = p.load(|j| from.load_inner::<FLAT>(j));
            unroll::<N>(|k| p.each(&v, |j, x| st(to[k] + pack_off(j), x)));
        }
    });
    unroll::<N>(|k| {
        // SAFETY: edge bytes of the source and of block `me` of peer `k`'s destination; only
        // this thread of this rank writes them.
        unsafe { edges.store(first, &[src], &[to[k] + span.lead]) };
    });
}

/// All-to-all: block `p` of this rank's `src` goes to block `rank` of peer `p`'s `dst`
/// (blocks of `bytes`), in the packs of that block. Barrier-bracketed, exit `AcqRel`.
///
/// Each thread moves pack `j` of every block before it moves on to its next pack: the copy
/// into this rank's own block (local memory) and the pushes to the peers interleave, so
/// NVLink is never idle while the local copy runs, and with 2, 4 or 8 ranks all `n` loads of
/// a pack are in flight at once. (Copying block by block, all threads did their local block
/// first: on 2×H200 that left the all-to-all at 0.84–0.91× NCCL's bus bandwidth from 64 MiB.)
///
/// `gate` as for [`all_gather`].
///
/// # Safety
/// `src` valid for `lsa_size × bytes` locally; `dst` a window of that size on every
/// rank, not overlapping `src`; otherwise as [`all_gather`].
#[inline(always)]
pub unsafe fn all_to_all(comm: &DevComm, io: Io, any: bool, gate: &mut Gate) {
    // SAFETY: forwarded.
    unsafe {
        // Blocks of any other shape sit at different places in their packs: the loop over
        // peers at run time (arrays of shifted sources would not unroll and would live in
        // local memory).
        if any {
            // (Two ranks only: with four, the arrays of shifted sources and packs took the
            // kernel past the 128 registers of a 512-thread block.)
            return match comm.lsa_size {
                2 => all_to_all_any_n::<2>(comm, io, gate),
                _ => all_to_all_any::<true>(comm, io, gate),
            };
        }
        match comm.lsa_size {
            2 => all_to_all_n::<2>(comm, io, gate),
            4 => all_to_all_n::<4>(comm, io, gate),
            8 => all_to_all_n::<8>(comm, io, gate),
            _ => all_to_all_any::<false>(comm, io, gate),
        }
    }
}

/// [`all_to_all`]'s body for `N` ranks, 16-byte aligned blocks: the `N` source and
/// destination addresses computed once, the `N` loads of a pack issued before its `N` stores.
#[inline(always)]
unsafe fn all_to_all_n<const N: usize>(comm: &DevComm, io: Io, gate: &mut Gate) {
    let (me, packs) = (comm.lsa_rank, io.bytes / PACK);
    // SAFETY: live descriptors (the caller's contract).
    let (inp, out) = unsafe { (local_addr(io.src), local_addr(io.dst)) };
    let mine = pack_off(packs * me as u64);
    let mut from = [0u64; N];
    let mut to = [0u64; N];
    let mut k = 0;
    while k < N {
        let p = rotated(me, k as i32, N as i32);
        from[k] = inp + pack_off(packs * p as u64);
        to[k] = if p == me {
            out
        } else {
            // SAFETY: as above.
            unsafe { peer_addr(io.dst, p) }
        } + mine;
        k += 1;
    }
    if !gate.open() {
        return;
    }
    let (first, stride) = grid_stride();
    let mut j = first;
    while j < packs {
        let o = pack_off(j);
        // SAFETY: j < packs: inside block `k` of the local source.
        let v = unsafe { ld_each(&from, o) };
        k = 0;
        while k < N {
            // SAFETY: inside block `me` of peer `k`'s destination; only this thread of this
            // rank writes that pack.
            unsafe { st(to[k] + o, v[k]) };
            k += 1;
        }
        j += stride;
    }
}

/// [`all_to_all`]'s any-shape body for `N` ranks: every block's source computed once
/// ([`unroll`]: in registers), the `N` loads of a pack before its stores. Its setup,
/// destination addresses included, runs before the entry barrier's wait ([`Gate`],
/// [`settle`]), and so do the choice of kernel body by the mask of shifted sources and that
/// body's first addresses ([`all_to_all_walk`]). (History, two ranks on one H100, the odd
/// 1 MiB against the next multiple of 16 bytes: 1.06–1.10× with the setup before the wait and
/// passes of two packs per thread; 1.03–1.08× with their loads unclamped
/// ([`Src::load_inner`]); 1.014–1.037× with the body of [`all_to_all_walk`], in four calls
/// on four H100s (the committed build: 1.016–1.024× in two calls). "Any count at any element
/// offset" in the book.)
#[inline(always)]
unsafe fn all_to_all_any_n<const N: usize>(comm: &DevComm, io: Io, gate: &mut Gate) {
    // The masks of shifted sources below are those of two sources.
    const { assert!(N <= 2) };
    let (me, bytes) = (comm.lsa_rank, io.bytes);
    // SAFETY: live descriptors (the caller's contract).
    let (inp, out) = unsafe { (local_addr(io.src), local_addr(io.dst)) };
    let mine = bytes * me as u64;
    let span = Span::<true>::new(io.dst.offset as u64 + mine, bytes);
    let mut src = [0u64; N];
    let mut from = [Src::at(inp, span); N];
    unroll::<N>(|k| {
        let p = rotated(me, k as i32, N as i32);
        src[k] = inp + bytes * p as u64;
        from[k] = Src::at(src[k], span);
    });
    let mut to = [0u64; N];
    unroll::<N>(|k| {
        let p = rotated(me, k as i32, N as i32);
        let copy = if p == me {
            out
        } else {
            // SAFETY: as above.
            unsafe { peer_addr(io.dst, p) }
        };
        to[k] = floor(copy + mine);
    });
    // Which sources sit elsewhere in their packs than the destination: only those take the
    // shifted loads (with two ranks, one of the two blocks of an odd size on each rank). One
    // flag for all sources made both take them: an odd all-to-all of 64 MiB then took 1.00×
    // the next multiple of 16 bytes, 0.91× with the mask (two ranks on one H100).
    let mut flat = 0u32;
    unroll::<N>(|k| flat |= u32::from(from[k].shift.is_flat()) << k);
    let mut span = span;
    let (mut lo, mut hi) = span.inner();
    let mut edges = EdgeBytes::new(Edges::of(span));
    span.settle();
    settle(&mut lo);
    settle(&mut hi);
    edges.settle();
    unroll::<N>(|k| {
        from[k].settle();
        settle(&mut src[k]);
        settle(&mut to[k]);
    });
    // SAFETY: forwarded.
    unsafe {
        match flat {
            0 => all_to_all_walk::<N, 0>(gate, span, (lo, hi), edges, &from, &src, &to),
            1 => all_to_all_walk::<N, 1>(gate, span, (lo, hi), edges, &from, &src, &to),
            2 => all_to_all_walk::<N, 2>(gate, span, (lo, hi), edges, &from, &src, &to),
            _ => all_to_all_walk::<N, 3>(gate, span, (lo, hi), edges, &from, &src, &to),
        }
    }
}

/// The copies of [`all_to_all_any_n`] over the range's whole packs ([`Span::inner`]), with
/// the shifted loads ([`Src::load_at`]) from the sources `k` whose bit `k` is set in `FLAT`
/// (`N ≤ 2`: the four masks are the kernels); the bytes outside them one per thread
/// ([`EdgeBytes`], as in [`all_gather_pairs`]). Opens `gate` itself.
///
/// The aligned body's loop ([`all_to_all_n`]): one pack of each source per pass, a grid's
/// packs apart. This thread's first source and destination addresses ([`Src::pack_at`]) are
/// computed before the entry barrier's wait ([`settle`]); after it, the loop only steps them.
/// Measured against the passes of two packs that the body had before
/// ([`stride_passes`](crate::common::stride_passes), indices turned into addresses after the
/// wait), two ranks on one H100, odd size ÷ the next multiple of 16 bytes in the same call:
/// - 1 MiB: 1.014–1.037× against 1.047–1.080× (four calls). The same loop with its
///   addresses computed, and the mask chosen, after the wait: 1.043–1.062×;
/// - 64 MiB: 1.009–1.010× against 0.90×: with many packs per thread, two in flight are
///   faster than one. The aligned body has one, and a body that took passes of two only then
///   (a branch on the packs per thread, made before the wait) made the odd 1 MiB 1.06× again.
///
/// `to[k]` is pack 0 of block `me` in the copy that source `k` goes to; `(lo, hi)` and
/// `edges` are the span's.
///
/// # Safety
/// Each `from[k]` (first byte at `src[k]`) holds the range, and so does each destination in
/// `to`; a source whose bit is clear is not shifted.
#[inline(always)]
unsafe fn all_to_all_walk<const N: usize, const FLAT: u32>(
    gate: &mut Gate,
    span: Span<true>,
    (lo, hi): (u64, u64),
    edges: EdgeBytes,
    from: &[Src<true>; N],
    src: &[u64; N],
    to: &[u64; N],
) {
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    let (mut at, mut dst) = ([0u64; N], [0u64; N]);
    unroll::<N>(|k| {
        at[k] = from[k].pack_at(j);
        dst[k] = to[k] + pack_off(j);
    });
    let (mut hi, mut stride, mut step) = (hi, stride, pack_off(stride));
    settle(&mut j);
    settle(&mut hi);
    settle(&mut stride);
    settle(&mut step);
    unroll::<N>(|k| {
        settle(&mut at[k]);
        settle(&mut dst[k]);
    });
    if !gate.open() {
        return;
    }
    // SAFETY: every source holds the range.
    let first = unsafe { edges.load(src) };
    let load = |k: usize, at: u64| {
        // SAFETY: whole packs (`j < hi`) of block `k` of the local source and of block `me`
        // of peer `k`'s destination (for the stores below too); only this thread of this rank
        // writes them.
        unsafe {
            if (FLAT >> k) & 1 != 0 {
                from[k].load_at::<true>(at)
            } else {
                from[k].load_at::<false>(at)
            }
        }
    };
    while j < hi {
        let mut v = [U32x4::default(); N];
        unroll::<N>(|k| v[k] = load(k, at[k]));
        unroll::<N>(|k| {
            // SAFETY: as above.
            unsafe { st(dst[k], v[k]) };
            at[k] += step;
            dst[k] += step;
        });
        j += stride;
    }
    if edges.any() {
        let mut dst = *to;
        unroll::<N>(|k| dst[k] += span.lead);
        // SAFETY: edge bytes of each source and of block `me` of each destination; only this
        // thread of this rank writes them.
        unsafe { edges.store(first, src, &dst) };
    }
}

/// [`all_to_all`]'s body for any number of ranks: pack by pack, peers in rotated order.
#[inline(always)]
unsafe fn all_to_all_any<const ANY: bool>(comm: &DevComm, io: Io, gate: &mut Gate) {
    let (me, n, bytes) = (comm.lsa_rank, comm.lsa_size, io.bytes);
    // SAFETY: live descriptors (the caller's contract).
    let inp = unsafe { local_addr(io.src) };
    if !gate.open() {
        return;
    }
    let mine = bytes * me as u64;
    let span = Span::<ANY>::new(io.dst.offset as u64 + mine, bytes);
    if !ANY {
        // Whole packs: the loop of before any shape was taken.
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < span.packs() {
            let o = pack_off(j);
            for k in 0..n {
                let p = rotated(me, k, n);
                // SAFETY: as in `all_to_all_n`.
                unsafe {
                    let v = ld(inp + bytes * p as u64 + o);
                    st(peer_addr(io.dst, p) + mine + o, v);
                }
            }
            j += stride;
        }
        return;
    }
    passes!(0, span.packs(), |pass| {
        for k in 0..n {
            let p = rotated(me, k, n);
            // SAFETY: as in `all_to_all_n`.
            unsafe {
                let from = Src::at(inp + bytes * p as u64, span);
                let v = pass.load(|j| from.load(j));
                let to = Dst::at(peer_addr(io.dst, p) + mine, span);
                pass.each(&v, |j, x| to.store(j, x));
            }
        }
    });
}

/// Broadcast of `root`'s `src` (a window, `bytes`) into every rank's `dst` (a window), in the
/// packs of `dst`: each rank reads its [`plan::bcast_slice`] from the root and stores it into
/// every rank that receives (scatter + all-gather). From three ranks on, the root takes no
/// slice and receives nothing: it copies its `src` into its own `dst` locally (nothing when in
/// place), so it sends each byte over NVLink once. (With `n` slices, one of them the root's,
/// the root sent `2(n − 1)/n` of the data: 1.13–1.41× NCCL's time from 32 MiB on 4×H200.)
/// Barrier-bracketed, exit `AcqRel`.
///
/// # Safety
/// `src` and `dst` windows of `bytes` on every rank (`dst` may equal `src`); otherwise as
/// [`all_gather`].
#[inline(always)]
pub unsafe fn broadcast(comm: &DevComm, io: Io, root: i32, any: bool) {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, broadcast_in(comm, io, root)) }
}

#[inline(always)]
unsafe fn broadcast_in<const ANY: bool>(comm: &DevComm, io: Io, root: i32) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let (first, stride) = grid_stride();
    let root_moves = plan::bcast_root_moves(n as u64);
    // SAFETY: forwarded.
    unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        if me == root && !root_moves {
            let (from, to) = (local_addr(io.src), local_addr(io.dst));
            if from != to {
                let (from, to) = (Src::at(from, span), Dst::at(to, span));
                let mut j = first;
                while j < span.packs() {
                    to.store(j, from.load(j));
                    j += stride;
                }
            }
            return;
        }
        let (lo, hi) = plan::bcast_slice(span.packs(), n as u64, me as u64, root as u64);
        let from = Src::at(peer_addr(io.src, root), span);
        if ANY {
            let (from, slice) = (from.any(), (lo, hi));
            return if from.shift.is_flat() {
                broadcast_pairs::<true>(comm, io, root, from, slice)
            } else {
                broadcast_pairs::<false>(comm, io, root, from, slice)
            };
        }
        let mut j = lo + first;
        while j < hi {
            let v = from.load(j);
            for k in 0..n {
                let p = rotated(me, k, n);
                if p != root || root_moves {
                    Dst::at(peer_addr(io.dst, p), span).store(j, v);
                }
            }
            j += stride;
        }
    }
}

/// The any-shape passes of [`broadcast`] over packs `lo..hi` of the root's `from`, with the
/// shifted loads when `FLAT` ([`Src::load_as`]).
///
/// # Safety
/// As [`broadcast`].
#[inline(always)]
unsafe fn broadcast_pairs<const FLAT: bool>(
    comm: &DevComm,
    io: Io,
    root: i32,
    from: Src<true>,
    (lo, hi): (u64, u64),
) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let root_moves = plan::bcast_root_moves(n as u64);
    let span = Span::<true>::new(io.dst.offset as u64, io.bytes);
    stride_pairs(lo, hi, |j, j2, both| {
        // SAFETY: packs of the root's source and of every receiving rank's destination; only
        // this thread of this rank writes their bytes of the range.
        unsafe {
            let jj = if both { j2 } else { j };
            let (v, w) = (from.load_as::<FLAT>(j), from.load_as::<FLAT>(jj));
            for k in 0..n {
                let p = rotated(me, k, n);
                if p != root || root_moves {
                    let to = Dst::at(peer_addr(io.dst, p), span);
                    to.store(j, v);
                    if both {
                        to.store(j2, w);
                    }
                }
            }
        }
    });
}
