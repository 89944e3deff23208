//! The row math of the RMSNorm kernels: a thread's packs of a row segment (in registers),
//! block sums, and the bf16 arithmetic of `h`, the scale and the output.

use symcomm_device::arch::{self, FULL_MASK, block_dim, thread_idx};
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::mem::U32x4;
use symcomm_device::reduce::{Bf16, Element, Sum};
use symcomm_device::shared_array;

use crate::common::{Acc, ld, pack_off, st};
use crate::rmsnorm_split as split;
use crate::rmsnorm_split::MAX_PACKS;

/// Calls `f(0)`, …, `f(MAX_PACKS - 1)` as straight-line code, so that arrays of a thread's
/// packs indexed by `i` stay in registers (a loop the compiler does not unroll would keep
/// them in local memory, on the critical path after the waits).
#[inline(always)]
pub(super) fn each_pack(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
}
const _: () = assert!(MAX_PACKS == 2, "each_pack spells out MAX_PACKS calls");

/// This thread's packs of one segment of a row: packs `k0 + i × stride` (`i < MAX_PACKS`)
/// below `end`, `stride` the block size.
#[derive(Clone, Copy)]
pub(super) struct Packs {
    k0: u64,
    end: u64,
    stride: u64,
}

impl Packs {
    /// This thread's packs of segment `seg` of a row of `ppr` packs cut into `segs`
    /// ([`split::seg_range`]; `segs = 1`: the whole row).
    #[inline(always)]
    pub(super) fn of_segment(ppr: u64, segs: u64, seg: u64) -> Packs {
        let (k0, end) = split::seg_range(ppr, segs, seg);
        Packs {
            k0: k0 + u64::from(thread_idx().x),
            end,
            stride: u64::from(block_dim().x),
        }
    }

    /// Calls `f(i, k)` for this thread's `i`-th pack `k` of the segment, for each it holds
    /// (straight-line code: see [`each_pack`]).
    #[inline(always)]
    pub(super) fn each(&self, mut f: impl FnMut(usize, u64)) {
        each_pack(|i| {
            let k = self.k0 + i as u64 * self.stride;
            if k < self.end {
                f(i, k);
            }
        });
    }

    /// This thread's packs of the row at byte address `row` (zero where it holds none).
    ///
    /// # Safety
    /// `row` is valid for reads of the segment's packs.
    #[inline(always)]
    pub(super) unsafe fn load(&self, row: u64) -> [U32x4; MAX_PACKS] {
        let mut v = [U32x4::default(); MAX_PACKS];
        // SAFETY: inside the segment (caller's contract).
        self.each(|i, k| v[i] = unsafe { ld(row + pack_off(k)) });
        v
    }
}

// ANCHOR: rsqrt
/// `1 / sqrt(x)` for `x > 0` to f32 precision (bit-level estimate + three Newton steps), the
/// same on the GPU and the host.
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    let mut y = f32::from_bits(0x5f37_59df_u32.wrapping_sub(x.to_bits() >> 1));
    let h = 0.5 * x;
    let mut i = 0;
    while i < 3 {
        y *= 1.5 - h * y * y;
        i += 1;
    }
    y
}
// ANCHOR_END: rsqrt

// ANCHOR: block_sum
/// Most warps of a block (1024 threads).
pub(super) const MAX_WARPS: usize = 32;

/// Block-wide sums with one `bar.sync` each: warp shuffles, then one value per warp through
/// shared memory, which every warp adds up with the same shuffles. The shared words alternate
/// between two buffers, so a call need not wait for every warp to have read the previous
/// call's words (a warp writing buffer `k` again, two calls later, has passed the barrier of
/// the call in between, which every warp reached after reading buffer `k`).
pub(super) struct BlockSum {
    buf: usize,
}

impl BlockSum {
    #[inline(always)]
    pub(super) fn new() -> BlockSum {
        BlockSum { buf: 0 }
    }

    /// Sum over the block of every thread's `v` (the same bits on every thread). Every
    /// thread of the block calls it, as many times as the others.
    #[inline(always)]
    pub(super) fn sum(&mut self, v: f32) -> f32 {
        let parts: *mut f32 = shared_array!(GALLERY_RMSNORM_PARTS: [f32; 2 * MAX_WARPS]);
        let threads = block_dim().x;
        let mut s = v;
        let mut m = 16;
        while m > 0 {
            // Uniform over the block: lanes beyond the block size do not exist.
            if m < threads {
                s += arch::shfl_xor(FULL_MASK, s, m);
            }
            m >>= 1;
        }
        let warps = threads.div_ceil(32) as usize;
        if warps == 1 {
            return s;
        }
        // SAFETY: buffer `buf` of the two (blocks of at most MAX_WARPS warps).
        let parts = unsafe { parts.add(self.buf * MAX_WARPS) };
        self.buf ^= 1;
        let lane = thread_idx().x % 32;
        let warp = (thread_idx().x / 32) as usize;
        if lane == 0 {
            // SAFETY: warp < MAX_WARPS.
            unsafe { parts.add(warp).write(s) };
        }
        Cta::new().sync();
        // Lane `l` takes warp `l`'s sum (zero past the last warp) and the same butterfly
        // adds them up: lane 0 adds in a fixed pairwise tree, and each step's pair of lanes
        // add the same two values, so every lane, warp, block and rank gets the same bits.
        // (Every thread adding all the words itself, in the same tree, cost ~0.4 µs more
        // per fused one-shot launch: 16 shared loads and 31 adds per thread after the
        // barrier, on the critical path.)
        let t = if (lane as usize) < warps {
            // SAFETY: written above by warp `lane`, before the barrier.
            unsafe { parts.add(lane as usize).read() }
        } else {
            0.0
        };
        warp_sum(t)
    }
}

/// Sum over a full warp of every lane's `v` by a butterfly of shuffles: one fixed pairwise
/// order, the same bits on every lane.
#[inline(always)]
pub(super) fn warp_sum(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v += arch::shfl_xor(FULL_MASK, v, m);
        m >>= 1;
    }
    v
}
// ANCHOR_END: block_sum

/// The 8 lanes of a bf16 pack as `f32` (exact).
#[inline(always)]
fn lanes(v: U32x4) -> [f32; 8] {
    let mut a = [0.0f32; 8];
    let mut i = 0;
    while i < 8 {
        a[i] = Bf16::get(&v, i);
        i += 1;
    }
    a
}

/// Rounds 8 `f32` lanes to a bf16 pack (ties to even): on the GPU one `cvt.rn.bf16x2.f32`
/// per pair of lanes, the same bits as the software rounding for every non-NaN value (see
/// [`Bf16::pack2`]).
#[inline(always)]
fn round_pack(a: &[f32; 8]) -> U32x4 {
    U32x4([
        Bf16::pack2(a[0], a[1]),
        Bf16::pack2(a[2], a[3]),
        Bf16::pack2(a[4], a[5]),
        Bf16::pack2(a[6], a[7]),
    ])
}

/// A running lane-wise `f32` sum of bf16 packs in the order they are added, rounded once
/// with the hardware conversion (`Element::pack` of bf16, as [`round_pack`]).
pub(super) type RowSum = Acc<Bf16, Sum>;

/// Lane-wise `bf16(a + b)` of two bf16 packs, computed in f32.
#[inline(always)]
pub(super) fn add_bf16(a: U32x4, b: U32x4) -> U32x4 {
    let mut acc = RowSum::new(a);
    acc.add(b);
    acc.finish()
}

/// Sum of squares of the lanes of a bf16 pack.
#[inline(always)]
pub(super) fn sumsq(h: U32x4) -> f32 {
    let mut s = 0.0;
    let mut i = 0;
    while i < 8 {
        let x = Bf16::get(&h, i);
        s += x * x;
        i += 1;
    }
    s
}

/// `bf16(h · inv · w)` lane-wise.
#[inline(always)]
pub(super) fn scale(h: U32x4, w: U32x4, inv: f32) -> U32x4 {
    let (h, w) = (lanes(h), lanes(w));
    let mut o = [0.0f32; 8];
    let mut i = 0;
    while i < 8 {
        o[i] = h[i] * inv * w[i];
        i += 1;
    }
    round_pack(&o)
}

/// `rsqrt(mean(h²) + eps)` of a row of `hidden` elements whose sum of squares is `total`.
#[inline(always)]
pub(super) fn inv_rms(total: f32, hidden: u64, eps: f32) -> f32 {
    rsqrt(total / hidden as f32 + eps)
}

// ANCHOR: finish_row
/// Sum of squares of this thread's packs of `h` (the thread's share of a row's; packs the
/// thread does not hold are zero and add nothing).
#[inline(always)]
pub(super) fn thread_sumsq(h: &[U32x4; MAX_PACKS]) -> f32 {
    let mut ss = 0.0;
    each_pack(|i| ss += sumsq(h[i]));
    ss
}

/// Writes this thread's packs `p` of a row (at byte `row_off` of the rows): `residual_out = h`
/// and `out = bf16(h · inv · w)`, with the weight packs `w` loaded early so that their
/// latency overlapped the reduction.
///
/// # Safety
/// Pointers valid for the row (see the kernels).
#[inline(always)]
pub(super) unsafe fn write_row(
    p: &Packs,
    h: &[U32x4; MAX_PACKS],
    w: &[U32x4; MAX_PACKS],
    inv: f32,
    out: u64,
    residual_out: u64,
    row_off: u64,
) {
    p.each(|i, k| {
        let o = row_off + pack_off(k);
        // SAFETY: the caller's row pointers.
        unsafe {
            st(residual_out + o, h[i]);
            st(out + o, scale(h[i], w[i], inv));
        }
    });
}
// ANCHOR_END: finish_row
