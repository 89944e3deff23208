//! Fused all-reduce + residual add + RMSNorm on bf16 token rows (`tokens × hidden`,
//! `hidden ≤ 16 × block size`, a multiple of 8), and the unfused RMSNorm kernel the
//! benchmark pairs with NCCL's all-reduce.
//!
//! Per row, with every intermediate rounded to bf16 exactly as an all-reduce followed by a
//! separate kernel would round it:
//! `s = Σ_ranks x`, `h = s + residual` (written to `residual_out`),
//! `out = h · rsqrt(mean(h²) + eps) · weight`.
//!
//! - **one-shot (LL)**: every rank pushes its rows to every peer as LL lines, reduces every
//!   row itself in rank order, normalises and writes locally. No barrier.
//! - **two-shot**: rank `r` owns a contiguous slice of rows; it loads each owned row from
//!   every peer, adds the residual, pushes the `h` row into every peer's scratch and, once
//!   it has the row's sum of squares, the row's scale `rsqrt(mean(h²) + eps)` next to it;
//!   after the exit barrier every rank streams `out = h · scale · w` and `residual_out = h`
//!   from what it received (no reduction, no wait).
//!
//! Rows may be cut into segments, each one block's work item, so that a few rows still fill
//! a grid as wide as the plain all-reduce's ([`crate::rmsnorm_split`]); the blocks of a row
//! form one thread block cluster and combine their sums of squares through each other's
//! shared memory (`RowJoin`).
//!
//! The row math (a thread's packs of a row, block sums, the bf16 arithmetic) is in `row`,
//! the cluster row join in `join`, the LL kernels (one-shot, two-shot LL) in `ll` and the
//! two-shot with barriers in `two_shot`, the arguments in `args`; this module has the unfused
//! kernel.

mod args;
mod join;
mod ll;
mod row;
mod two_shot;

use symcomm_device::arch::{block_idx, grid_dim};
use symcomm_device::mem::U32x4;

pub use self::args::{NormArgs, fused_h_off, owner_of};
pub use self::ll::{fused_one_shot, fused_two_shot_ll};
pub use self::row::rsqrt;
use self::row::{BlockSum, Packs, add_bf16, inv_rms, thread_sumsq, write_row};
pub use self::two_shot::fused_two_shot;
use crate::common::{ld, pack_off};
pub use crate::rmsnorm_split::MAX_PACKS;

/// The unfused half: `h = s + residual`, RMSNorm of `h`, one block per row (grid-stride
/// over rows).
///
/// # Safety
/// All pointers are device memory of this GPU holding `tokens × hidden` bf16 (`weight`:
/// `hidden`); `hidden / 8 ≤ MAX_PACKS × block size`; `residual_out` may equal `residual`.
#[inline(always)]
pub unsafe fn rmsnorm_residual(s: u64, a: NormArgs) {
    let ppr = a.hidden / 8;
    // This thread's packs of the whole row.
    let p = Packs::of_segment(ppr, 1, 0);
    let mut sums = BlockSum::new();
    let mut row = u64::from(block_idx().x);
    while row < a.tokens {
        let row_off = pack_off(row * ppr);
        let mut h = [U32x4::default(); MAX_PACKS];
        let mut w = [U32x4::default(); MAX_PACKS];
        p.each(|i, k| {
            let o = row_off + pack_off(k);
            // SAFETY: inside the row and the weight.
            unsafe {
                w[i] = ld(a.weight + pack_off(k));
                h[i] = add_bf16(ld(s + o), ld(a.residual + o));
            }
        });
        let inv = inv_rms(sums.sum(thread_sumsq(&h)), a.hidden, a.eps);
        // SAFETY: forwarded.
        unsafe { write_row(&p, &h, &w, inv, a.out, a.residual_out, row_off) };
        row += u64::from(grid_dim().x);
    }
}
