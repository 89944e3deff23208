//! The fused kernels on LL lines (no barrier): the one-shot and the two-shot LL. Their entry
//! points open and end the LL launch around these bodies, which return the result of their
//! waits.

use symcomm_device::arch::{block_idx, grid_dim};
use symcomm_device::mem::U32x4;
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Bf16, Sum};
use symcomm_device::wait::WaitError;

use super::args::{NormArgs, owner_of};
use super::join::RowJoin;
use super::row::{BlockSum, Packs, add_bf16, inv_rms, thread_sumsq, write_row};
use crate::common::{grid_stride, ld, local_addr, pack_off, rotated};
use crate::ll_path::{LlLaunch, recv_pack, send_pack};
use crate::plan;
use crate::rmsnorm_split::MAX_PACKS;
use crate::shape::Src;

/// Fused one-shot (LL): see the module docs of [`rmsnorm`](super). Block `b` takes items
/// `b, b + grid, …` of `tokens × segs`.
///
/// # Safety
/// `x` holds `tokens × hidden` bf16 on this rank; `ll` was begun on the gallery scratch
/// window with `cap ≥ tokens × hidden / 8`; with `segs > 1`, `segs ≤ MAX_SEGS`, the grid is a
/// multiple of `segs`, launched in clusters of `segs` blocks, every block resident; the rest
/// as [`rmsnorm_residual`](super::rmsnorm_residual); every LSA rank runs the same sequence of
/// LL launches.
#[inline(always)]
pub unsafe fn fused_one_shot(ll: &LlLaunch, x: SymPtr<u8>, a: NormArgs) -> Result<(), WaitError> {
    let ppr = a.hidden / 8;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let inp = local_addr(x);
        let join = RowJoin::new(a.segs(), ll.timeout_ns);
        // Send every pack first (grid-stride, as the one-shot all-reduce), so peers can start.
        ll.send_all(Src::aligned(inp), a.tokens * ppr, None);
        let mut res = Ok(());
        normalise_items(a, join, &mut res, |row, p, res| {
            let row_off = pack_off(row * ppr);
            // Everything local first: its latency overlaps the wait for the peers' lines.
            let mut own = [U32x4::default(); MAX_PACKS];
            let mut rsd = [U32x4::default(); MAX_PACKS];
            let mut w = [U32x4::default(); MAX_PACKS];
            p.each(|i, k| {
                own[i] = ld(inp + row_off + pack_off(k));
                rsd[i] = ld(a.residual + row_off + pack_off(k));
                w[i] = ld(a.weight + pack_off(k));
            });
            let mut h = [U32x4::default(); MAX_PACKS];
            p.each(|i, k| {
                // ANCHOR: fused_one_shot_pack
                let j = row * ppr + k;
                // Rank order, as the one-shot all-reduce (the same bits on every rank).
                let s = ll.reduce::<Bf16, Sum>(j, own[i], res).finish();
                h[i] = add_bf16(s, rsd[i]);
                // ANCHOR_END: fused_one_shot_pack
            });
            (h, w)
        });
        res
    }
}

/// Fused two-shot on LL lines, no barrier: rows are split across ranks; every rank sends
/// each owner its rows of `x` (slots `[0, chunk)`), the owner reduces them in rank order,
/// adds the residual and sends `h` to every rank, itself included (slots
/// `[chunk, 2 chunk)`), and every rank normalises every row as its `h` arrives (block `b`
/// takes items `b, b + grid, …` of `tokens × segs`).
/// `chunk = ceil(tokens / lsa_size) × hidden / 8`.
///
/// # Safety
/// As [`fused_one_shot`] with `cap ≥ 2 × chunk`; the residual is the same on every rank.
#[inline(always)]
pub unsafe fn fused_two_shot_ll(
    ll: &LlLaunch,
    x: SymPtr<u8>,
    a: NormArgs,
) -> Result<(), WaitError> {
    let (me, n, tokens) = (ll.me, ll.n, a.tokens);
    let ppr = a.hidden / 8;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let inp = local_addr(x);
        let join = RowJoin::new(a.segs(), ll.timeout_ns);
        let chunk = plan::slice_len(tokens, n as u64) * ppr;
        // 1. Each owner gets its rows of our x.
        ll.send_slices(Src::aligned(inp), |p| {
            let (lo, hi) = plan::slice(tokens, n as u64, p as u64);
            (lo * ppr, (hi - lo) * ppr)
        });
        // 2. Reduce our rows, add the residual, send h to every rank (us included).
        let mut res: Result<(), WaitError> = Ok(());
        let (lo, hi) = plan::slice(tokens, n as u64, me as u64);
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < (hi - lo) * ppr {
            let g = lo * ppr + j;
            let own = ld(inp + pack_off(g));
            // Loaded before the wait, so its latency overlaps it.
            let rsd = ld(a.residual + pack_off(g));
            let h = add_bf16(ll.reduce::<Bf16, Sum>(j, own, &mut res).finish(), rsd);
            for k in 0..n {
                send_pack(ll, rotated(me, k, n), chunk + j, h);
            }
            j += stride;
        }
        // 3. Normalise every row from the h its owner sent.
        normalise_items(a, join, &mut res, |row, p, res| {
            let owner = owner_of(row, tokens, n as u64);
            let (olo, _) = plan::slice(tokens, n as u64, owner);
            let w = p.load(a.weight);
            let mut h = [U32x4::default(); MAX_PACKS];
            p.each(|i, k| {
                if res.is_ok() {
                    let slot = chunk + (row - olo) * ppr + k;
                    match recv_pack(ll, owner as i32, slot) {
                        Ok(v) => h[i] = v,
                        Err(e) => *res = Err(e),
                    }
                }
            });
            (h, w)
        });
        res
    }
}

/// Normalises this block's items `b, b + grid, …` of `tokens × segs` (`b` the block index):
/// `packs(row, p, res)` gives this thread's packs `p` of the item's `h` and of the weight
/// (a failed wait lands in `res`), then the row's sum of squares is joined across its
/// segments, and the row is written. Finishes the join.
///
/// # Safety
/// As the kernels' (`a`'s pointers, the launch in clusters of `segs` blocks).
#[inline(always)]
unsafe fn normalise_items(
    a: NormArgs,
    mut join: RowJoin,
    res: &mut Result<(), WaitError>,
    mut packs: impl FnMut(u64, &Packs, &mut Result<(), WaitError>) -> RowPacks,
) {
    let (ppr, segs) = (a.hidden / 8, a.segs());
    let mut sums = BlockSum::new();
    let mut item = u64::from(block_idx().x);
    while item < a.tokens * segs {
        let (row, seg) = (item / segs, item % segs);
        let p = Packs::of_segment(ppr, segs, seg);
        let (h, w) = packs(row, &p, res);
        // SAFETY: forwarded (caller's contract).
        unsafe {
            let total = join.row_total(&mut sums, thread_sumsq(&h), res);
            let inv = inv_rms(total, a.hidden, a.eps);
            write_row(&p, &h, &w, inv, a.out, a.residual_out, pack_off(row * ppr));
        }
        item += u64::from(grid_dim().x);
    }
    join.finish();
}

/// A thread's packs of `h` and of the weight.
type RowPacks = ([U32x4; MAX_PACKS], [U32x4; MAX_PACKS]);
