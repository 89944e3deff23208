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

use symcomm_device::mem::U32x4;
use symcomm_device::ptr::SymPtr;

use crate::common::{
    Acc, Gate, Io, by_shape, grid_stride, local_addr, pack_off, peer_addr, peer_addrs,
    reduce_packs, rotated, settle, st, stride_pairs, unroll,
};
use crate::ll_path::{LlLaunch, recv_pack};
use crate::plan;
use crate::shape::{Dst, Shift, Span, Src, floor, floor_each};

// ANCHOR: two_shot
/// Two-shot all-reduce of `bytes` from `src` into `dst` (both windows; may be equal), in the
/// packs of `dst`.
/// Its entry point runs it between the LSA barriers of [`bracketed`](crate::common::bracketed)
/// with an `AcqRel` exit: it stores into peers.
///
/// # Safety
/// See the entry points: windows of at least `bytes` from the offsets on every rank, at the
/// same offsets on every rank, `comm` with `grid_dim().x` barriers, the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn two_shot<T: Element, O: ReduceOp>(comm: &DevComm, io: Io, any: bool) {
    // SAFETY: forwarded.
    unsafe {
        // Any other shape takes the loop over peers at run time: arrays of shifted loads
        // would not unroll and would live in local memory.
        if comm.lsa_size == 8 && !any {
            two_shot_n::<T, O, 8, false>(comm, io)
        } else if any && comm.lsa_size == 2 {
            two_shot_any_n::<T, O, 2>(comm, io)
        } else if any && comm.lsa_size == 4 {
            two_shot_any_n::<T, O, 4>(comm, io)
        } else {
            by_shape!(any, two_shot_any::<T, O>(comm, io))
        }
    }
}
// ANCHOR_END: two_shot

// ANCHOR: two_shot_n
#[inline(always)]
unsafe fn two_shot_n<T: Element, O: ReduceOp, const N: usize, const ANY: bool>(
    comm: &DevComm,
    io: Io,
) {
    let me = comm.lsa_rank;
    // SAFETY: live descriptors (caller's contract).
    let (sb, db, span, shift) = unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        // Every rank's copy of both (rotated), computed once: the address of pack 0.
        (
            floor_each(peer_addrs::<N>(io.src, me, 0)),
            floor_each(peer_addrs::<N>(io.dst, me, 0)),
            span,
            Shift::new(local_addr(io.src), span),
        )
    };
    let (lo, hi) = plan::slice(span.packs(), N as u64, me as u64);
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        // SAFETY: pack j of every peer's source.
        let r = reduce_packs::<T, O, N>(&unsafe { shift.load_each(&sb, j) });
        let mut k = 0;
        while k < N {
            // SAFETY: pack j of every peer's destination; only this thread of this rank
            // writes it.
            unsafe { Dst { base: db[k], span }.store(j, r) };
            k += 1;
        }
        j += stride;
    }
}
// ANCHOR_END: two_shot_n

#[inline(always)]
unsafe fn two_shot_any<T: Element, O: ReduceOp, const ANY: bool>(comm: &DevComm, io: Io) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    // SAFETY: live descriptors (caller's contract).
    let (span, shift) = unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        (span, Shift::new(local_addr(io.src), span))
    };
    let (lo, hi) = plan::slice(span.packs(), n as u64, me as u64);
    if ANY {
        stride_pairs(lo, hi, |j, j2, both| {
            // SAFETY: as in two_shot_n.
            unsafe {
                let (a, b) = pull_pair::<T, O, ANY>(io.src, 0, shift, me, n, j, j2, both);
                let (r, q) = (a.finish(), b.finish());
                for k in 0..n {
                    let to = Dst::at(peer_addr(io.dst, rotated(me, k, n)), span);
                    to.store(j, r);
                    if both {
                        to.store(j2, q);
                    }
                }
            }
        });
        return;
    }
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        // SAFETY: as in two_shot_n.
        unsafe {
            let r = pull_shifted::<T, O, ANY>(io.src, 0, shift, me, n, j).finish();
            for k in 0..n {
                Dst::at(peer_addr(io.dst, rotated(me, k, n)), span).store(j, r);
            }
        }
        j += stride;
    }
}

/// The any-shape two-shot for `N` ranks: every copy's source and destination address
/// computed once ([`unroll`]: in registers), the `2N` loads of a pair of packs before any is
/// folded in.
#[inline(always)]
unsafe fn two_shot_any_n<T: Element, O: ReduceOp, const N: usize>(comm: &DevComm, io: Io) {
    let me = comm.lsa_rank;
    let span = Span::<true>::new(io.dst.offset as u64, io.bytes);
    // SAFETY: live descriptors (caller's contract).
    let shift = Shift::new(unsafe { local_addr(io.src) }, span);
    let (mut sb, mut db) = ([0u64; N], [0u64; N]);
    unroll::<N>(|k| {
        let p = rotated(me, k as i32, N as i32);
        // SAFETY: as above.
        unsafe {
            sb[k] = shift.base(peer_addr(io.src, p));
            db[k] = floor(peer_addr(io.dst, p));
        }
    });
    let (lo, hi) = plan::slice(span.packs(), N as u64, me as u64);
    // SAFETY: forwarded.
    unsafe {
        if shift.is_flat() {
            two_shot_pairs::<T, O, N, true>(span, shift, &sb, &db, (lo, hi))
        } else {
            two_shot_pairs::<T, O, N, false>(span, shift, &sb, &db, (lo, hi))
        }
    }
}

/// The passes of [`two_shot_any_n`] over packs `lo..hi`, with the shifted loads when `FLAT`
/// ([`Shift::load_as`]).
///
/// # Safety
/// As [`two_shot_any_n`]: every copy `sb` (read through `shift`) and `db` holds the range.
#[inline(always)]
unsafe fn two_shot_pairs<T: Element, O: ReduceOp, const N: usize, const FLAT: bool>(
    span: Span<true>,
    shift: Shift<true>,
    sb: &[u64; N],
    db: &[u64; N],
    (lo, hi): (u64, u64),
) {
    stride_pairs(lo, hi, |j, j2, both| {
        // SAFETY: packs of every copy's source and destination; only this thread of this rank
        // writes them.
        unsafe {
            let jj = if both { j2 } else { j };
            let (r, q) = reduce_pair_n::<T, O, N, FLAT>(shift, sb, j, jj);
            unroll::<N>(|k| {
                let d = Dst { base: db[k], span };
                d.store(j, r);
                if both {
                    d.store(j2, q);
                }
            });
        }
    });
}

/// The any-shape reduce-scatter for `N` ranks into `out`, from the `N` copies of the block
/// whose pack 0 is at `sb[k]`, read through `shift` (shifted loads when `FLAT`). Opens `gate`
/// itself.
///
/// As `all_to_all_walk` (in `collectives.rs`): the whole packs of `out`
/// ([`Span::inner`]) one per pass, a grid's packs apart, from addresses computed before the
/// entry barrier's wait and only stepped after it ([`Shift::pack_at`], [`Shift::load_at`]: no
/// index clamp). The grid's last thread then reduces the one or two packs that `out` fills
/// only in part ([`Shift::load_as`], [`Dst::store`]). Odd f32 size ÷ the next multiple of 16
/// bytes, two ranks on one H100, four rounds in one device call, against the passes of two
/// packs ([`stride_pairs`]) and the choice of body after the wait that this replaced:
/// - 1 MiB: 1.005–1.029× (1.037–1.062× before; bf16 0.92–0.95×, 0.95–0.98× before);
/// - 64 MiB: 1.004–1.005× (0.84× before: two packs in flight are faster with many per
///   thread, as they would be for the aligned body).
///
/// # Safety
/// As [`reduce_scatter`]; `FLAT` or the shift is zero.
#[inline(always)]
unsafe fn reduce_scatter_walk<T: Element, O: ReduceOp, const N: usize, const FLAT: bool>(
    gate: &mut Gate,
    shift: Shift<true>,
    sb: &[u64; N],
    out: Dst<true>,
) {
    let (lo, hi) = out.span.inner();
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    let mut at = [0u64; N];
    unroll::<N>(|k| at[k] = shift.pack_at(sb[k], j));
    let (mut to, mut hi, mut step) = (out.base + pack_off(j), hi, pack_off(stride));
    settle(&mut j);
    settle(&mut hi);
    settle(&mut to);
    settle(&mut step);
    unroll::<N>(|k| settle(&mut at[k]));
    if !gate.open() {
        return;
    }
    while j < hi {
        let mut x = [U32x4::default(); N];
        // SAFETY: whole packs (`j < hi`) of `out` and of the block in every copy; only this
        // thread writes the pack of `out`.
        unsafe {
            unroll::<N>(|k| x[k] = shift.load_at::<FLAT>(at[k]));
            st(to, reduce_packs::<T, O, N>(&x));
        }
        unroll::<N>(|k| at[k] += step);
        to += step;
        j += stride;
    }
    // The packs `out` fills in part: its first when it has a head (`lo` is 1), the one after
    // the whole packs when it has a tail.
    let packs = out.span.packs();
    if first + 1 == stride && (lo == 1 || hi < packs) {
        let edge = [0, hi];
        let mut x = [[U32x4::default(); N]; 2];
        // SAFETY: packs of the block in every copy (shifted loads clamp to its packs; the
        // unshifted ones read packs 0 and `min(hi, packs − 1)`, both below `packs`) and of
        // `out`, stored in part; only this thread writes them.
        unsafe {
            unroll::<N>(|k| {
                x[0][k] = shift.load_as::<FLAT>(sb[k], edge[0]);
                x[1][k] = shift.load_as::<FLAT>(sb[k], edge[1].min(packs - 1));
            });
            if lo == 1 {
                out.store(edge[0], reduce_packs::<T, O, N>(&x[0]));
            }
            if hi < packs {
                out.store(edge[1], reduce_packs::<T, O, N>(&x[1]));
            }
        }
    }
}

/// The reductions, in array order, of packs `j` and `jj` of the `N` copies whose pack 0 is at
/// `base` (read through `shift`, [`Shift::load_as`]): all `2N` loads issued before the first
/// is folded in.
///
/// # Safety
/// The source range is valid for reads in every copy; `FLAT` or the shift is zero.
#[inline(always)]
unsafe fn reduce_pair_n<T: Element, O: ReduceOp, const N: usize, const FLAT: bool>(
    shift: Shift<true>,
    base: &[u64; N],
    j: u64,
    jj: u64,
) -> (U32x4, U32x4) {
    let (mut x, mut y) = ([U32x4::default(); N], [U32x4::default(); N]);
    unroll::<N>(|k| {
        // SAFETY: forwarded.
        unsafe {
            x[k] = shift.load_as::<FLAT>(base[k], j);
            y[k] = shift.load_as::<FLAT>(base[k], jj);
        }
    });
    (reduce_packs::<T, O, N>(&x), reduce_packs::<T, O, N>(&y))
}

/// The reduction of destination pack `j` of the source range at byte `off` of `src` in every
/// LSA rank's copy (`n` ranks, read through `shift`): ours first, then the peers [`rotated`]
/// from `me`, one load at a time.
///
/// # Safety
/// `src.window` is a live window descriptor; the range is valid for reads in every copy.
#[inline(always)]
unsafe fn pull_shifted<T: Element, O: ReduceOp, const ANY: bool>(
    src: SymPtr<u8>,
    off: u64,
    shift: Shift<ANY>,
    me: i32,
    n: i32,
    j: u64,
) -> Acc<T, O> {
    // SAFETY: forwarded.
    unsafe {
        let mut acc = Acc::<T, O>::new(shift.load(shift.base(peer_addr(src, me) + off), j));
        for k in 1..n {
            acc.add(shift.load(shift.base(peer_addr(src, rotated(me, k, n)) + off), j));
        }
        acc
    }
}

/// [`pull_shifted`] of packs `j` and `j2` together (`j2` only when `both`): for each rank,
/// the loads of both packs before either is folded in.
///
/// # Safety
/// As [`pull_shifted`].
#[inline(always)]
unsafe fn pull_pair<T: Element, O: ReduceOp, const ANY: bool>(
    src: SymPtr<u8>,
    off: u64,
    shift: Shift<ANY>,
    me: i32,
    n: i32,
    j: u64,
    j2: u64,
    both: bool,
) -> (Acc<T, O>, Acc<T, O>) {
    let j2 = if both { j2 } else { j };
    // SAFETY: forwarded.
    unsafe {
        let base = shift.base(peer_addr(src, me) + off);
        let (x, y) = (shift.load(base, j), shift.load(base, j2));
        let (mut a, mut b) = (Acc::<T, O>::new(x), Acc::<T, O>::new(y));
        for k in 1..n {
            let base = shift.base(peer_addr(src, rotated(me, k, n)) + off);
            let (x, y) = (shift.load(base, j), shift.load(base, j2));
            a.add(x);
            b.add(y);
        }
        (a, b)
    }
}

/// Reduce-scatter: `dst` (this rank's, `bytes`) = reduction over every peer of block `rank`
/// (`bytes` at `src + rank × bytes`), in the packs of `dst`. Barrier-bracketed, exit
/// `Release` (it stores only into its own memory). `gate` is the entry barrier's wait
/// ([`Gate`]), opened once the body's addresses are computed: the peers' block addresses of
/// the bodies for two, four and eight ranks are read while the barrier waits. With that, the
/// reduce-scatter of 1 MiB took 5.23–5.25 µs aligned and 5.46–5.50 µs at an odd f32 size,
/// against 5.43–5.60 and 5.74–5.90 µs without (two ranks on one H100, the same device call).
///
/// # Safety
/// As [`two_shot`]; `src` holds `lsa_size × bytes`, `dst` (may be a local pointer) `bytes` on
/// every rank.
#[inline(always)]
pub unsafe fn reduce_scatter<T: Element, O: ReduceOp>(
    comm: &DevComm,
    io: Io,
    any: bool,
    gate: &mut Gate,
) {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, reduce_scatter_in::<T, O>(comm, io, gate)) }
}

#[inline(always)]
unsafe fn reduce_scatter_in<T: Element, O: ReduceOp, const ANY: bool>(
    comm: &DevComm,
    io: Io,
    gate: &mut Gate,
) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let block = io.bytes * me as u64;
    // SAFETY: forwarded.
    unsafe {
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        let out = Dst::at(local_addr(io.dst), span);
        let shift = Shift::new(local_addr(io.src) + block, span);
        let (first, stride) = grid_stride();
        let mut j = first;
        // (Any other shape: the loop over peers at run time, as in `two_shot`.)
        if n == 8 && !ANY {
            let mut sb = floor_each(peer_addrs::<8>(io.src, me, block));
            unroll::<8>(|k| settle(&mut sb[k]));
            if !gate.open() {
                return;
            }
            while j < span.packs() {
                out.store(j, reduce_packs::<T, O, 8>(&shift.load_each(&sb, j)));
                j += stride;
            }
        } else if ANY && (n == 2 || n == 4) {
            // Every copy's block address computed once (in registers).
            let mut sb = [0u64; 4];
            unroll::<4>(|k| {
                if (k as i32) < n {
                    sb[k] = shift.base(peer_addr(io.src, rotated(me, k as i32, n)) + block);
                }
            });
            let (sh, out) = (shift.any(), out.any());
            let sb2 = [sb[0], sb[1]];
            match (n, sh.is_flat()) {
                (2, true) => reduce_scatter_walk::<T, O, 2, true>(gate, sh, &sb2, out),
                (2, false) => reduce_scatter_walk::<T, O, 2, false>(gate, sh, &sb2, out),
                (_, true) => reduce_scatter_walk::<T, O, 4, true>(gate, sh, &sb, out),
                (_, false) => reduce_scatter_walk::<T, O, 4, false>(gate, sh, &sb, out),
            }
        } else if ANY {
            if !gate.open() {
                return;
            }
            stride_pairs(0, span.packs(), |j, j2, both| {
                let (a, b) = pull_pair::<T, O, ANY>(io.src, block, shift, me, n, j, j2, both);
                out.store(j, a.finish());
                if both {
                    out.store(j2, b.finish());
                }
            });
        } else {
            if !gate.open() {
                return;
            }
            while j < span.packs() {
                out.store(
                    j,
                    pull_shifted::<T, O, ANY>(io.src, block, shift, me, n, j).finish(),
                );
                j += stride;
            }
        }
    }
}

// ANCHOR: one_shot_ll
/// One-shot LL all-reduce of `bytes`: `dst` (this rank's; may equal `src`, may be a local
/// pointer) = reduction over every rank's `src`, folded in rank order, in the packs of `dst`
/// (every rank sends its input in them). The result of the waits goes back to the entry point,
/// which ends the launch (`ll.end`).
///
/// # Safety
/// `src` is a valid local range of `bytes` (its window is not needed); `ll` was begun on the
/// gallery scratch window with room for `cap ≥` the packs of `dst` per sender; every LSA rank
/// runs the same sequence of LL launches.
#[inline(always)]
pub unsafe fn one_shot_ll<T: Element, O: ReduceOp>(
    ll: &LlLaunch,
    io: Io,
    any: bool,
) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, one_shot_ll_in::<T, O>(ll, io)) }
}

#[inline(always)]
unsafe fn one_shot_ll_in<T: Element, O: ReduceOp, const ANY: bool>(
    ll: &LlLaunch,
    io: Io,
) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let out = local_addr(io.dst);
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        let (inp, out, packs) = (
            Src::at(local_addr(io.src), span),
            Dst::at(out, span),
            span.packs(),
        );
        // Every pack to every peer, starting with the next rank (`rotated`).
        ll.send_all(inp, packs, None);
        let (first, stride) = grid_stride();
        let mut res = Ok(());
        let mut j = first;
        'packs: while j < packs {
            let own = inp.load(j);
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
            out.store_straight(j, acc.finish());
            j += stride;
        }
        res
    }
}
// ANCHOR_END: one_shot_ll

/// Two-shot all-reduce on LL lines, no barrier: rank `r` sends slice `p` of its input to peer
/// `p` (reduce-scatter), reduces slice `r` in rank order as its lines arrive, then sends the
/// result to every peer (all-gather). Slices are of the packs of `dst`. LL slots
/// `[0, slice)` of each sender carry the first phase, `[slice, 2 slice)` the second.
///
/// # Safety
/// As [`one_shot_ll`] with `src` and `dst` holding `bytes` on this rank and
/// `cap ≥ 2 × ceil(packs / lsa_size)`.
#[inline(always)]
pub unsafe fn two_shot_ll<T: Element, O: ReduceOp>(
    ll: &LlLaunch,
    io: Io,
    any: bool,
) -> Result<(), WaitError> {
    // SAFETY: forwarded.
    unsafe { by_shape!(any, two_shot_ll_in::<T, O>(ll, io)) }
}

#[inline(always)]
unsafe fn two_shot_ll_in<T: Element, O: ReduceOp, const ANY: bool>(
    ll: &LlLaunch,
    io: Io,
) -> Result<(), WaitError> {
    let (me, n) = (ll.me, ll.n);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let out = local_addr(io.dst);
        let span = Span::<ANY>::new(io.dst.offset as u64, io.bytes);
        let (inp, out, packs) = (
            Src::at(local_addr(io.src), span),
            Dst::at(out, span),
            span.packs(),
        );
        let chunk = plan::slice_len(packs, n as u64);
        // `(first, len)` of slice `p`.
        let slice = |p: i32| {
            let (lo, hi) = plan::slice(packs, n as u64, p as u64);
            (lo, hi - lo)
        };
        // Reduce-scatter: slice p (pack j of it) to peer p.
        ll.send_slices(inp, slice);
        let (first, stride) = grid_stride();
        let mut res = Ok(());
        // Reduce slice `me`, keep it, and send it on.
        let (lo, len) = slice(me);
        let mut j = first;
        while j < len && res.is_ok() {
            let own = inp.load(lo + j);
            let acc = ll.reduce::<T, O>(j, own, &mut res);
            // ANCHOR: two_shot_ll_forward
            let v = acc.finish();
            ll.send_peers(chunk + j, v);
            out.store_straight(lo + j, v);
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
                    Ok(v) => out.store_straight(lo + j, v),
                    Err(e) => res = Err(e),
                }
                j += stride;
            }
        }
        res
    }
}
