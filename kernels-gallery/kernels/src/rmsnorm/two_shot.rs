//! The fused two-shot with barriers: the owners of the rows reduce them between the LSA
//! barriers, and every rank normalises every row after the exit barrier (or, direct, the
//! owners write every rank's outputs themselves).

use symcomm_device::arch::{block_idx, grid_dim, thread_idx};
use symcomm_device::barrier::LsaBarrier;
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::mem::{self, LoadOrder, Ordering, Scope, StoreOrder, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Bf16, Sum};
use symcomm_device::wait::WaitError;

use super::args::NormArgs;
use super::join::RowJoin;
use super::row::{BlockSum, Packs, add_bf16, inv_rms, scale, sumsq, write_row};
use crate::common::{ld, local_addr, pack_off, peer_addr, pull, report, rotated, st_peers};
use crate::plan;
use crate::rmsnorm_split::MAX_PACKS;
use crate::rmsnorm_split::{h_off, inv_off};

/// Items a thread of the barrier two-shot's second phase normalises at once (all their loads
/// issued before any use).
const STREAM_ITEMS: usize = 4;

/// Calls `f(0)`, …, `f(STREAM_ITEMS - 1)` as straight-line code (see
/// [`each_pack`](super::row::each_pack)).
#[inline(always)]
fn each_item(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
    f(2);
    f(3);
}
const _: () = assert!(STREAM_ITEMS == 4, "each_item spells out STREAM_ITEMS calls");

/// Fused two-shot: see the module docs of [`rmsnorm`](super). `fused` is byte 0 of the
/// fused region of the scratch window (see [`crate::rmsnorm_split`]: scales for
/// `tokens × segs` items and room for `tokens × hidden` bf16). Work item `it` (of
/// `tokens × segs`, row-major) belongs to block `it mod grid`: on the rank owning its row,
/// that block reduces it before the exit barrier, joining the row's other segments in its
/// cluster (`RowJoin`, guarded); after it, that block normalises it on every rank (so the
/// exit barrier of block `b` orders everything block `b` reads).
///
/// # Safety
/// `x` is a window of `tokens × hidden` bf16 on every rank; `residual` holds the same values
/// on every rank (a replicated residual stream); `comm` has `grid_dim().x` barriers; every
/// block of the grid is resident; `tokens × segs ≤ MAX_ITEMS` and, with `segs > 1`, the
/// launch is in clusters of `segs ≤ MAX_SEGS` blocks (the grid a multiple of `segs`); every
/// LSA rank runs the same sequence of these launches; the rest as
/// [`rmsnorm_residual`](super::rmsnorm_residual).
///
/// **Direct** (`direct = Some((out, residual_out))`, both windows of `tokens × hidden` bf16 at
/// the same offset on every rank; `a.out` and `a.residual_out` are then ignored): the owner
/// pushes `h` straight into every rank's `residual_out` and, once it has the row's scale,
/// `out = h · scale · w` into every rank's `out`, and the kernel ends at the exit barrier:
/// no second phase (which costs about 2 µs at 128 rows), for one more push of the rows per
/// peer. Rows of different owners are disjoint, so `residual_out` may be the residual and
/// `out` may be `x` (every rank reads and writes only the rows it owns before the barrier).
#[inline(always)]
pub unsafe fn fused_two_shot(
    comm: &DevComm,
    x: SymPtr<u8>,
    a: NormArgs,
    fused: SymPtr<u8>,
    direct: Option<(SymPtr<u8>, SymPtr<u8>)>,
    timeout_ns: u64,
    status: *mut u32,
) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let (ppr, segs, hidden) = (a.hidden / 8, a.segs(), a.hidden);
    let g = u64::from(grid_dim().x);
    let b = u64::from(block_idx().x);
    // Every item of this block is segment `b mod segs` of its row (the grid is a multiple of
    // `segs`): the same packs of the row, the same weight packs.
    let p = Packs::of_segment(ppr, segs, b % segs);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        // Guarded: a block whose entry barrier failed skips its rows (`bracketed`), while the
        // other blocks of its cluster may still send it their partials.
        let mut join = RowJoin::guarded(segs, timeout_ns, comm.abort_flag_ptr());
        let local = local_addr(fused);
        let mut res: Result<(), WaitError> = Ok(());
        // ANCHOR: fused_two_shot_owner
        // `bracketed`, spelled out: LLVM does not inline a closure this large, and its
        // captures (the join, the arrays of packs) would then live in local memory.
        let cta = Cta::new();
        let mut bar = LsaBarrier::new(&cta, comm, block_idx().x);
        let mut entered = bar.sync_timeout(&cta, Ordering::Acquire, timeout_ns);
        if entered.is_ok() {
            let mut sums = BlockSum::new();
            let (lo, hi) = plan::slice(a.tokens, n as u64, me as u64);
            // Our items `[lo × segs, hi × segs)` that are this block's (≡ b mod grid).
            let first = lo * segs;
            let mut it = first + (b + g - first % g) % g;
            while it < hi * segs {
                let row = it / segs;
                let row_off = pack_off(row * ppr);
                let mut ss = 0.0;
                // Direct only: this thread's packs of `h` and of the weight, kept in
                // registers for `out` after the join.
                let mut hv = [U32x4::default(); MAX_PACKS];
                let mut wv = [U32x4::default(); MAX_PACKS];
                p.each(|i, k| {
                    let o = row_off + pack_off(k);
                    if direct.is_some() {
                        wv[i] = ld(a.weight + pack_off(k));
                    }
                    let rsd = ld(a.residual + o);
                    // Our copy first, then the peers in rotated order, as the plain
                    // two-shot all-reduce (the same rounding; and ranks reading the
                    // same peer at once would crowd its links: ~2 µs at 2 MiB).
                    let h = add_bf16(pull::<Bf16, Sum>(x, me, n, o).finish(), rsd);
                    hv[i] = h;
                    ss += sumsq(h);
                    // `h` into every rank's scratch, or (direct) its `residual_out`.
                    let (win, off) = match direct {
                        Some((_, rout)) => (rout, o),
                        None => (fused, h_off(row, hidden) + pack_off(k)),
                    };
                    st_peers(win, me, n, off, h);
                });
                // The row's scale, from the partials of its segments (the blocks of this
                // cluster).
                let total = join.row_total(&mut sums, ss, &mut res);
                if let Some((dout, _)) = direct {
                    // Direct: the normalised packs into every rank's `out`.
                    let inv = inv_rms(total, hidden, a.eps);
                    p.each(|i, k| {
                        st_peers(dout, me, n, row_off + pack_off(k), scale(hv[i], wv[i], inv));
                    });
                } else if thread_idx().x == 0 {
                    // The scale goes with the item: one word per peer.
                    let inv = inv_rms(total, hidden, a.eps).to_bits();
                    for q in 0..n {
                        let base = peer_addr(fused, rotated(me, q, n));
                        let p = (base + inv_off(it)) as *mut u32;
                        mem::store(p, inv, StoreOrder::Weak, Scope::Sys);
                    }
                }
                it += g;
            }
            entered = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
        }
        bar.finish(&cta);
        if cta.is_leader() {
            report(status, entered);
        }
        join.depart();
        if direct.is_some() {
            // Every row is in place on every rank (the exit barrier above).
            join.finish();
            report(status, res);
            return;
        }
        // After the exit barrier of block b, every rank's block b has pushed h and the scale
        // of its items: a pure stream, STREAM_ITEMS items per step with every load issued
        // before any use, no block reduction, no wait. Every rank writes the same bits.
        // ANCHOR_END: fused_two_shot_owner
        let w = p.load(a.weight);
        let items = a.tokens * segs;
        let mut it = b;
        while it < items {
            let mut h = [[U32x4::default(); MAX_PACKS]; STREAM_ITEMS];
            let mut inv = [0u32; STREAM_ITEMS];
            each_item(|u| {
                let item = it + u as u64 * g;
                if item < items {
                    let at = (local + inv_off(item)) as *const u32;
                    inv[u] = mem::load(at, LoadOrder::Weak, Scope::Gpu);
                    h[u] = p.load(local + h_off(item / segs, hidden));
                }
            });
            each_item(|u| {
                let item = it + u as u64 * g;
                if item < items {
                    let row_off = pack_off(item / segs * ppr);
                    let inv = f32::from_bits(inv[u]);
                    write_row(&p, &h[u], &w, inv, a.out, a.residual_out, row_off);
                }
            });
            it += STREAM_ITEMS as u64 * g;
        }
        join.finish();
        report(status, res);
    }
}
