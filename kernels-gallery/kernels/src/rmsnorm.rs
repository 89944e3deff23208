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
//! kernels: the pack form, and the element form that rows of any `hidden` at any element
//! offset take after an all-reduce of any shape.

mod args;
mod join;
mod ll;
mod row;
mod two_shot;

use symcomm_device::arch::{block_dim, block_idx, grid_dim, thread_idx};
use symcomm_device::mem::U32x4;
use symcomm_device::reduce::Bf16;

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

// ANCHOR: rmsnorm_elements
/// The unfused half element by element, for rows of any `hidden` at any element offset (the
/// form the fused call takes after an all-reduce of any shape): one block per row
/// (grid-stride over rows), thread `t` takes elements `t, t + block size, …` of it. The first
/// pass writes `h = bf16(s + residual)` to `residual_out` and sums `h²`; the second reads
/// back the same elements (written by this thread) and writes `out = bf16(h · inv · w)`.
/// The same rounding as the pack form and the host reference.
///
/// # Safety
/// All pointers are device memory of this GPU, 2-byte aligned, holding `tokens × hidden`
/// bf16 (`weight`: `hidden`); `residual_out` may equal `residual`; `out` overlaps neither
/// `residual_out` nor `residual`, nor `s`.
#[inline(always)]
pub unsafe fn rmsnorm_residual_elements(s: u64, a: NormArgs) {
    let (t, step) = (u64::from(thread_idx().x), u64::from(block_dim().x));
    let mut sums = BlockSum::new();
    let mut row = u64::from(block_idx().x);
    while row < a.tokens {
        let first = row * a.hidden;
        let mut ss = 0.0f32;
        let mut i = t;
        while i < a.hidden {
            let e = 2 * (first + i);
            // SAFETY: element `first + i` of the rows (caller's contract).
            unsafe {
                let h = Bf16::from_f32(ld_bf16(s + e) + ld_bf16(a.residual + e));
                st_bf16(a.residual_out + e, h);
                ss += h.to_f32() * h.to_f32();
            }
            i += step;
        }
        let inv = inv_rms(sums.sum(ss), a.hidden, a.eps);
        let mut i = t;
        while i < a.hidden {
            let e = 2 * (first + i);
            // SAFETY: as above; `residual_out`'s element was written by this thread.
            unsafe {
                let (h, w) = (ld_bf16(a.residual_out + e), ld_bf16(a.weight + 2 * i));
                st_bf16(a.out + e, Bf16::from_f32(h * inv * w));
            }
            i += step;
        }
        row += u64::from(grid_dim().x);
    }
}
// ANCHOR_END: rmsnorm_elements

/// The bf16 at byte address `addr`, as `f32` (exact).
///
/// # Safety
/// `addr` is 2-byte aligned and valid for reads; no thread writes it concurrently.
#[inline(always)]
unsafe fn ld_bf16(addr: u64) -> f32 {
    // SAFETY: forwarded.
    Bf16(unsafe { (addr as *const u16).read() }).to_f32()
}

/// Stores `v` at byte address `addr`.
///
/// # Safety
/// `addr` is 2-byte aligned and valid for writes; no other thread accesses it concurrently.
#[inline(always)]
unsafe fn st_bf16(addr: u64, v: Bf16) {
    // SAFETY: forwarded.
    unsafe { (addr as *mut u16).write(v.0) }
}
