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

use symcomm_device::arch::{self, FULL_MASK, block_dim, block_idx, grid_dim, thread_idx};
use symcomm_device::barrier::LsaBarrier;
use symcomm_device::cluster::{self, Mbarrier};
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::mem::{self, LoadOrder, Ordering, Scope, StoreOrder, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Bf16, Element};
use symcomm_device::shared_array;
use symcomm_device::wait::WaitError;

use crate::common::{grid_stride, ld, local_addr, pack_off, peer_addr, report, rotated, st};
use crate::ll_path::{LlLaunch, recv_pack, send_pack};
use crate::plan;
use crate::rmsnorm_split::{self as split, h_off, inv_off};

/// The row arguments of the RMSNorm kernels (one kernel parameter; `#[repr(C)]`, 56 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NormArgs {
    /// Device address of the residual rows (`tokens × hidden` bf16, replicated on every rank).
    pub residual: u64,
    /// Device address of the weight (`hidden` bf16).
    pub weight: u64,
    /// Device address of the normalised output rows.
    pub out: u64,
    /// Device address of `h = sum + residual` (may equal `residual`).
    pub residual_out: u64,
    /// Rows.
    pub tokens: u64,
    /// Elements per row (a multiple of 8).
    pub hidden: u64,
    /// The epsilon inside the square root.
    pub eps: f32,
    /// Segments per row of the fused kernels (0 or 1: one block per row; see
    /// [`crate::rmsnorm_split::split`]); ignored by the unfused kernel.
    pub segs: u32,
}

const _: () = assert!(core::mem::size_of::<NormArgs>() == 56);

pub use crate::rmsnorm_split::MAX_PACKS;

/// Calls `f(0)`, …, `f(MAX_PACKS - 1)` as straight-line code, so that arrays of a thread's
/// packs indexed by `i` stay in registers (a loop the compiler does not unroll would keep
/// them in local memory, on the critical path after the waits).
#[inline(always)]
fn each_pack(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
}
const _: () = assert!(MAX_PACKS == 2, "each_pack spells out MAX_PACKS calls");

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
const MAX_WARPS: usize = 32;

/// Block-wide sums with one `bar.sync` each: warp shuffles, then one value per warp through
/// shared memory, which every warp adds up with the same shuffles. The shared words alternate
/// between two buffers, so a call need not wait for every warp to have read the previous
/// call's words (a warp writing buffer `k` again, two calls later, has passed the barrier of
/// the call in between, which every warp reached after reading buffer `k`).
struct BlockSum {
    buf: usize,
}

impl BlockSum {
    #[inline(always)]
    fn new() -> BlockSum {
        BlockSum { buf: 0 }
    }

    /// Sum over the block of every thread's `v` (the same bits on every thread). Every
    /// thread of the block calls it, as many times as the others.
    #[inline(always)]
    fn sum(&mut self, v: f32) -> f32 {
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
        let mut t = if (lane as usize) < warps {
            // SAFETY: written above by warp `lane`, before the barrier.
            unsafe { parts.add(lane as usize).read() }
        } else {
            0.0
        };
        let mut m = 16;
        while m > 0 {
            t += arch::shfl_xor(FULL_MASK, t, m);
            m >>= 1;
        }
        t
    }
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

/// A running lane-wise `f32` sum of bf16 packs in the order they are added, rounded once by
/// [`round_pack`] (what `Acc<Bf16, Sum>` computes, with the hardware rounding).
#[inline(always)]
fn add_lanes(acc: &mut [f32; 8], v: U32x4) {
    let v = lanes(v);
    let mut i = 0;
    while i < 8 {
        acc[i] += v[i];
        i += 1;
    }
}

/// Lane-wise `bf16(a + b)` of two bf16 packs, computed in f32.
#[inline(always)]
fn add_bf16(a: U32x4, b: U32x4) -> U32x4 {
    let mut acc = lanes(a);
    add_lanes(&mut acc, b);
    round_pack(&acc)
}

/// Sum of squares of the lanes of a bf16 pack.
#[inline(always)]
fn sumsq(h: U32x4) -> f32 {
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
fn scale(h: U32x4, w: U32x4, inv: f32) -> U32x4 {
    let (h, w) = (lanes(h), lanes(w));
    let mut o = [0.0f32; 8];
    let mut i = 0;
    while i < 8 {
        o[i] = h[i] * inv * w[i];
        i += 1;
    }
    round_pack(&o)
}

// ANCHOR: finish_row
/// Sum of squares of this thread's packs of `h` (the thread's share of a row's; packs the
/// thread does not hold are zero and add nothing).
#[inline(always)]
fn thread_sumsq(h: &[U32x4; MAX_PACKS]) -> f32 {
    let mut ss = 0.0;
    each_pack(|i| ss += sumsq(h[i]));
    ss
}

/// Writes this thread's packs of a row (packs `k0 + i × stride` below `end` of the row at
/// byte `row_off`): `residual_out = h` and `out = bf16(h · inv · w)`, with the weight packs
/// `w` loaded early so that their latency overlapped the reduction.
///
/// # Safety
/// Pointers valid for the row (see the kernels).
#[inline(always)]
unsafe fn write_row(
    h: &[U32x4; MAX_PACKS],
    w: &[U32x4; MAX_PACKS],
    end: u64,
    k0: u64,
    stride: u64,
    inv: f32,
    out: u64,
    residual_out: u64,
    row_off: u64,
) {
    each_pack(|i| {
        let k = k0 + i as u64 * stride;
        if k < end {
            let o = row_off + pack_off(k);
            // SAFETY: the caller's row pointers.
            unsafe {
                st(residual_out + o, h[i]);
                st(out + o, scale(h[i], w[i], inv));
            }
        }
    });
}
// ANCHOR_END: finish_row

/// `rsqrt(mean(h²) + eps)` of a row of `hidden` elements whose sum of squares is `total`.
#[inline(always)]
fn inv_rms(total: f32, hidden: u64, eps: f32) -> f32 {
    rsqrt(total / hidden as f32 + eps)
}

// ANCHOR: row_total
/// Most warp partials of a row in an LL fused launch (segments × warps per block).
const MAX_ROW_PARTS: usize = split::MAX_SEGS as usize * MAX_WARPS;

/// Where the blocks of a row meet in a fused launch. With one segment per row the block sum
/// is the row's. With `segs > 1` the row's blocks form one thread block cluster (the host
/// launches clusters of `segs` blocks, so block `b` holds segment `b % segs` of its rows) and
/// every warp stores its partial sum of squares straight into every block of the cluster
/// (`cluster::store_async_u32`), counted on that block's transaction barrier; a block waits
/// on its own barrier for all `segs × warps` partials and adds them in one fixed order, so
/// every block of the row, on every rank, gets the same bits. No `bar.sync` and no global
/// memory: on one H100 this join costs about 0.4 µs where tagged slots in global memory,
/// published and polled through L2, cost 0.6–2.5 µs.
///
/// Two partial buffers and two barriers alternate between the rows a block takes in turn: a
/// warp storing into buffer `k` again, two rows later, has received every block's partials of
/// the row in between, which each block sent after it had read buffer `k`.
///
/// A block's shared memory must outlive every store into it. In the LL kernels every block of
/// a cluster joins every row (their receives are bounded), so each block has received all
/// that is sent to it before it leaves, and the join waits for nothing but its partials. A
/// kernel whose blocks may skip their rows (the barrier two-shot, after a failed entry
/// barrier) joins *guarded*: it calls [`depart`](Self::depart) after its last row, so that
/// [`finish`](Self::finish) keeps every block until all blocks of its cluster have sent their
/// last partial; a guarded join may then give up, at the abort flag or once a wait has
/// failed, and the blocks waiting for a block that gave up time out in turn (bounded).
struct RowJoin {
    segs: u64,
    bars: *mut u64,
    parts: *mut f32,
    /// Rows joined so far by this block (picks the buffer and the phase).
    rounds: u32,
    /// Whether this block has passed the cluster barrier that follows the barriers' set-up.
    started: bool,
    /// Whether this block has arrived at the closing cluster barrier ([`Self::depart`]).
    departed: bool,
    timeout_ns: u64,
    /// Guarded joins only (see above): the abort flag the waits poll; null otherwise.
    abort: *const u32,
    guarded: bool,
}

impl RowJoin {
    /// Sets up the join of a launch with `segs` segments per row: with `segs > 1`, thread 0
    /// initialises the two barriers and every thread arrives at the cluster barrier (waited
    /// for at the first row, so the set-up overlaps the data movement). Every thread calls it.
    ///
    /// # Safety
    /// With `segs > 1` the launch is in clusters of `segs` blocks, `segs ≤ MAX_SEGS`, and the
    /// grid is a multiple of `segs`.
    #[inline(always)]
    unsafe fn new(segs: u64, timeout_ns: u64) -> RowJoin {
        // SAFETY: forwarded.
        unsafe { Self::setup(segs, timeout_ns, core::ptr::null(), false) }
    }

    /// [`new`](Self::new) for a guarded join (see the type's docs), whose waits poll `abort`.
    ///
    /// # Safety
    /// As [`new`](Self::new); `abort` is null or a valid global `u32`; every block calls
    /// [`depart`](Self::depart) after its last [`row_total`](Self::row_total).
    #[inline(always)]
    unsafe fn guarded(segs: u64, timeout_ns: u64, abort: *const u32) -> RowJoin {
        // SAFETY: forwarded.
        unsafe { Self::setup(segs, timeout_ns, abort, true) }
    }

    /// # Safety
    /// As [`new`](Self::new) and [`guarded`](Self::guarded).
    #[inline(always)]
    unsafe fn setup(segs: u64, timeout_ns: u64, abort: *const u32, guarded: bool) -> RowJoin {
        let bars: *mut u64 = shared_array!(GALLERY_ROW_BARS: [u64; 2]);
        let parts: *mut f32 = shared_array!(GALLERY_ROW_PARTS: [f32; 2 * MAX_ROW_PARTS]);
        if segs > 1 {
            if thread_idx().x == 0 {
                // SAFETY: this block's shared words, not yet in use by anyone.
                unsafe {
                    Mbarrier::new(bars).init(1);
                    Mbarrier::new(bars.add(1)).init(1);
                }
                cluster::fence_init();
            }
            cluster::arrive();
        }
        RowJoin {
            segs,
            bars,
            parts,
            rounds: 0,
            started: segs <= 1,
            departed: false,
            timeout_ns,
            abort,
            guarded,
        }
    }

    /// The sum of squares of the row of this block's current item from this thread's share
    /// `ss`. A failed wait lands in `res` (the total is then not to be trusted, which the
    /// reported status says). Every thread of the block calls it.
    ///
    /// # Safety
    /// Every block of the cluster calls it as many times, once per row of the launch's items
    /// it takes (all blocks of a cluster take the same rows).
    #[inline(always)]
    unsafe fn row_total(
        &mut self,
        sums: &mut BlockSum,
        ss: f32,
        res: &mut Result<(), WaitError>,
    ) -> f32 {
        if self.segs <= 1 {
            return sums.sum(ss);
        }
        if self.guarded && res.is_err() {
            // Given up (see the type's docs): the total is not to be trusted anyway.
            return ss;
        }
        if !self.started {
            // The peers' barriers are initialised and the peers have started.
            cluster::wait();
            self.started = true;
        }
        let mut w = ss;
        let mut m = 16;
        while m > 0 {
            w += arch::shfl_xor(FULL_MASK, w, m);
            m >>= 1;
        }
        let buf = (self.rounds & 1) as usize;
        let parity = (self.rounds >> 1) & 1;
        self.rounds = self.rounds.wrapping_add(1);
        let warps = block_dim().x.div_ceil(32);
        let entries = self.segs as u32 * warps;
        // SAFETY: buffer `buf` of the two, `2 × MAX_ROW_PARTS` words (segs ≤ MAX_SEGS,
        // warps ≤ MAX_WARPS); barrier `buf` of the two.
        let (parts, bar) = unsafe {
            (
                self.parts.add(buf * MAX_ROW_PARTS),
                Mbarrier::new(self.bars.add(buf)),
            )
        };
        let (lane, warp) = (thread_idx().x % 32, thread_idx().x / 32);
        if thread_idx().x == 0 {
            // SAFETY: initialised in `new`; one arrival per phase (this one).
            unsafe { bar.arrive_expect_tx(4 * entries) };
        }
        if u64::from(lane) < self.segs {
            // SAFETY: rank `lane` < segs = the cluster size; that block has started (the
            // cluster barrier above) and waits for this word in this phase (below).
            unsafe {
                let slot = parts.add((cluster::rank() * warps + warp) as usize);
                cluster::store_async_u32(
                    cluster::map(slot.cast::<u32>(), lane),
                    w.to_bits(),
                    bar.remote(lane),
                );
            }
        }
        // Unguarded, the wait ignores the abort flag: the blocks of a cluster reach every row
        // whatever their peers on other ranks do (their receives are bounded), and a block
        // that left early could exit while a peer still stores into its shared memory. Only a
        // bug times out there.
        // SAFETY: initialised; this phase is the current one; `abort` null or valid (`guarded`).
        if let Err(e) = unsafe { bar.wait_parity(parity, self.abort, self.timeout_ns) } {
            *res = Err(e);
        }
        // Lane `l` adds entries `l, l + 32, …`, then the same butterfly as `BlockSum`: one
        // fixed order on every thread, block and rank.
        let mut t = 0.0f32;
        let mut e = lane;
        while e < entries {
            // SAFETY: entry `e` < entries ≤ MAX_ROW_PARTS, landed before the barrier's phase
            // completed (acquired by the wait).
            t += unsafe { parts.add(e as usize).read_volatile() };
            e += 32;
        }
        let mut m = 16;
        while m > 0 {
            t += arch::shfl_xor(FULL_MASK, t, m);
            m >>= 1;
        }
        t
    }

    /// Guarded joins: this block has sent its last partial; arrives at the cluster barrier
    /// that [`finish`](Self::finish) waits for. Every thread calls it once, after its last
    /// row and before [`finish`](Self::finish) (work in between overlaps the barrier).
    #[inline(always)]
    fn depart(&mut self) {
        if self.segs > 1 {
            if !self.started {
                cluster::wait();
                self.started = true;
            }
            cluster::arrive();
            self.departed = true;
        }
    }

    /// Ends the join: waits at the cluster barrier this block last arrived at (the set-up's if
    /// it never joined a row, [`depart`](Self::depart)'s if it departed). Every thread calls
    /// it last.
    #[inline(always)]
    fn finish(self) {
        if !self.started || self.departed {
            cluster::wait();
        }
    }
}
// ANCHOR_END: row_total

/// The unfused half: `h = s + residual`, RMSNorm of `h`, one block per row (grid-stride
/// over rows).
///
/// # Safety
/// All pointers are device memory of this GPU holding `tokens × hidden` bf16 (`weight`:
/// `hidden`); `hidden / 8 ≤ MAX_PACKS × block size`; `residual_out` may equal `residual`.
#[inline(always)]
pub unsafe fn rmsnorm_residual(s: u64, a: NormArgs) {
    let NormArgs {
        residual,
        weight,
        out,
        residual_out,
        tokens,
        hidden,
        eps,
        ..
    } = a;
    let ppr = hidden / 8;
    let (k0, stride) = (u64::from(thread_idx().x), u64::from(block_dim().x));
    let mut sums = BlockSum::new();
    let mut row = u64::from(block_idx().x);
    while row < tokens {
        let row_off = pack_off(row * ppr);
        let mut h = [U32x4::default(); MAX_PACKS];
        let mut w = [U32x4::default(); MAX_PACKS];
        each_pack(|i| {
            let k = k0 + i as u64 * stride;
            if k < ppr {
                let o = row_off + pack_off(k);
                // SAFETY: inside the row and the weight.
                unsafe {
                    w[i] = ld(weight + pack_off(k));
                    h[i] = add_bf16(ld(s + o), ld(residual + o));
                }
            }
        });
        let inv = inv_rms(sums.sum(thread_sumsq(&h)), hidden, eps);
        // SAFETY: forwarded.
        unsafe { write_row(&h, &w, ppr, k0, stride, inv, out, residual_out, row_off) };
        row += u64::from(grid_dim().x);
    }
}

/// Fused one-shot (LL): see the module docs. Block `b` takes items `b, b + grid, …` of
/// `tokens × segs`.
///
/// # Safety
/// `x` holds `tokens × hidden` bf16 on this rank; `scratch` is the gallery scratch window
/// with `cap ≥ tokens × hidden / 8`; with `segs > 1`, `segs ≤ MAX_SEGS`, the grid is a
/// multiple of `segs`, launched in clusters of `segs` blocks, every block resident; the rest
/// as [`rmsnorm_residual`]; every LSA rank runs the same sequence of LL launches.
#[inline(always)]
pub unsafe fn fused_one_shot(
    comm: &DevComm,
    x: SymPtr<u8>,
    a: NormArgs,
    scratch: SymPtr<u8>,
    cap: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    let NormArgs {
        residual,
        weight,
        out,
        residual_out,
        tokens,
        hidden,
        eps,
        segs,
    } = a;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let ll = LlLaunch::begin(comm, scratch, cap);
        let (me, n) = (comm.lsa_rank, comm.lsa_size);
        let inp = local_addr(x);
        let ppr = hidden / 8;
        let segs = u64::from(segs.max(1));
        let mut join = RowJoin::new(segs, timeout_ns);
        // Send every pack first (grid-stride, as the one-shot all-reduce), so peers can start.
        let (first, gstride) = grid_stride();
        let mut j = first;
        while j < tokens * ppr {
            let v = ld(inp + pack_off(j));
            for p in 1..n {
                send_pack(&ll, rotated(me, p, n), j, v);
            }
            j += gstride;
        }
        let mut res: Result<(), WaitError> = Ok(());
        let stride = u64::from(block_dim().x);
        let mut sums = BlockSum::new();
        let mut item = u64::from(block_idx().x);
        while item < tokens * segs {
            let (row, seg) = (item / segs, item % segs);
            let (k0, hi) = split::seg_range(ppr, segs, seg);
            let k0 = k0 + u64::from(thread_idx().x);
            let row_off = pack_off(row * ppr);
            // Everything local first: its latency overlaps the wait for the peers' lines.
            let mut own = [U32x4::default(); MAX_PACKS];
            let mut rsd = [U32x4::default(); MAX_PACKS];
            let mut w = [U32x4::default(); MAX_PACKS];
            each_pack(|i| {
                let k = k0 + i as u64 * stride;
                if k < hi {
                    own[i] = ld(inp + row_off + pack_off(k));
                    rsd[i] = ld(residual + row_off + pack_off(k));
                    w[i] = ld(weight + pack_off(k));
                }
            });
            let mut h = [U32x4::default(); MAX_PACKS];
            each_pack(|i| {
                let k = k0 + i as u64 * stride;
                if k < hi {
                    // ANCHOR: fused_one_shot_pack
                    let j = row * ppr + k;
                    let own = own[i];
                    // Rank order, as the one-shot all-reduce (the same bits on every rank).
                    let mut acc = lanes(ll.pack_of(0, own, j, timeout_ns, &mut res));
                    for s in 1..n {
                        add_lanes(&mut acc, ll.pack_of(s, own, j, timeout_ns, &mut res));
                    }
                    h[i] = add_bf16(round_pack(&acc), rsd[i]);
                    // ANCHOR_END: fused_one_shot_pack
                }
            });
            let total = join.row_total(&mut sums, thread_sumsq(&h), &mut res);
            let inv = inv_rms(total, hidden, eps);
            write_row(&h, &w, hi, k0, stride, inv, out, residual_out, row_off);
            item += u64::from(grid_dim().x);
        }
        join.finish();
        ll.end(res, status);
    }
}

/// Byte offset of row `row`'s `h` copy in the fused region of the scratch window.
#[inline(always)]
pub const fn fused_h_off(row: u64, hidden: u64) -> u64 {
    h_off(row, hidden)
}

/// Items a thread of the barrier two-shot's second phase normalises at once (all their loads
/// issued before any use).
const STREAM_ITEMS: usize = 4;

/// Calls `f(0)`, …, `f(STREAM_ITEMS - 1)` as straight-line code (see [`each_pack`]).
#[inline(always)]
fn each_item(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
    f(2);
    f(3);
}
const _: () = assert!(STREAM_ITEMS == 4, "each_item spells out STREAM_ITEMS calls");

/// Fused two-shot: see the module docs. `fused` is byte 0 of the fused region of the scratch
/// window (see [`crate::rmsnorm_split`]: scales for `tokens × segs` items and room for
/// `tokens × hidden` bf16). Work item `it` (of `tokens × segs`, row-major) belongs to block
/// `it mod grid`: on the rank owning its row, that block reduces it before the exit barrier,
/// joining the row's other segments in its cluster (`RowJoin`, guarded); after it, that
/// block normalises it on every rank (so the exit barrier of block `b` orders everything
/// block `b` reads).
///
/// # Safety
/// `x` is a window of `tokens × hidden` bf16 on every rank; `residual` holds the same values
/// on every rank (a replicated residual stream); `comm` has `grid_dim().x` barriers; every
/// block of the grid is resident; `tokens × segs ≤ MAX_ITEMS` and, with `segs > 1`, the
/// launch is in clusters of `segs ≤ MAX_SEGS` blocks (the grid a multiple of `segs`); every
/// LSA rank runs the same sequence of these launches; the rest as [`rmsnorm_residual`].
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
    let NormArgs {
        residual,
        weight,
        out,
        residual_out,
        tokens,
        hidden,
        eps,
        segs,
    } = a;
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let ppr = hidden / 8;
    let segs = u64::from(segs.max(1));
    let stride = u64::from(block_dim().x);
    let g = u64::from(grid_dim().x);
    let b = u64::from(block_idx().x);
    // Every item of this block is segment `b mod segs` of its row (the grid is a multiple of
    // `segs`): the same packs of the row, the same weight packs.
    let (k0, end) = split::seg_range(ppr, segs, b % segs);
    let k0 = k0 + u64::from(thread_idx().x);
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
            let (lo, hi) = plan::slice(tokens, n as u64, me as u64);
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
                each_pack(|i| {
                    let k = k0 + i as u64 * stride;
                    if k < end {
                        let o = row_off + pack_off(k);
                        if direct.is_some() {
                            wv[i] = ld(weight + pack_off(k));
                        }
                        let rsd = ld(residual + o);
                        // Our copy first, then the peers in rotated order, as the plain
                        // two-shot all-reduce (the same rounding; and ranks reading the
                        // same peer at once would crowd its links: ~2 µs at 2 MiB).
                        let mut acc = lanes(ld(peer_addr(x, me) + o));
                        for p in 1..n {
                            add_lanes(&mut acc, ld(peer_addr(x, rotated(me, p, n)) + o));
                        }
                        let h = add_bf16(round_pack(&acc), rsd);
                        hv[i] = h;
                        ss += sumsq(h);
                        // `h` into every rank's scratch, or (direct) its `residual_out`.
                        let (win, off) = match direct {
                            Some((_, rout)) => (rout, o),
                            None => (fused, h_off(row, hidden) + pack_off(k)),
                        };
                        for q in 0..n {
                            st(peer_addr(win, rotated(me, q, n)) + off, h);
                        }
                    }
                });
                // The row's scale, from the partials of its segments (the blocks of this
                // cluster).
                let total = join.row_total(&mut sums, ss, &mut res);
                if let Some((dout, _)) = direct {
                    // Direct: the normalised packs into every rank's `out`.
                    let inv = inv_rms(total, hidden, eps);
                    each_pack(|i| {
                        let k = k0 + i as u64 * stride;
                        if k < end {
                            let v = scale(hv[i], wv[i], inv);
                            for q in 0..n {
                                st(
                                    peer_addr(dout, rotated(me, q, n)) + row_off + pack_off(k),
                                    v,
                                );
                            }
                        }
                    });
                } else if thread_idx().x == 0 {
                    // The scale goes with the item: one word per peer.
                    let inv = inv_rms(total, hidden, eps).to_bits();
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
        let mut w = [U32x4::default(); MAX_PACKS];
        each_pack(|i| {
            let k = k0 + i as u64 * stride;
            if k < end {
                w[i] = ld(weight + pack_off(k));
            }
        });
        let items = tokens * segs;
        let mut it = b;
        while it < items {
            let mut h = [[U32x4::default(); MAX_PACKS]; STREAM_ITEMS];
            let mut inv = [0u32; STREAM_ITEMS];
            each_item(|u| {
                let item = it + u as u64 * g;
                if item < items {
                    let p = (local + inv_off(item)) as *const u32;
                    inv[u] = mem::load(p, LoadOrder::Weak, Scope::Gpu);
                    let row = item / segs;
                    each_pack(|i| {
                        let k = k0 + i as u64 * stride;
                        if k < end {
                            h[u][i] = ld(local + h_off(row, hidden) + pack_off(k));
                        }
                    });
                }
            });
            each_item(|u| {
                let item = it + u as u64 * g;
                if item < items {
                    let row_off = pack_off(item / segs * ppr);
                    let inv = f32::from_bits(inv[u]);
                    write_row(&h[u], &w, end, k0, stride, inv, out, residual_out, row_off);
                }
            });
            it += STREAM_ITEMS as u64 * g;
        }
        join.finish();
        report(status, res);
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
    comm: &DevComm,
    x: SymPtr<u8>,
    a: NormArgs,
    scratch: SymPtr<u8>,
    cap: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    let NormArgs {
        residual,
        weight,
        out,
        residual_out,
        tokens,
        hidden,
        eps,
        segs,
    } = a;
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let ll = LlLaunch::begin(comm, scratch, cap);
        let (me, n) = (comm.lsa_rank, comm.lsa_size);
        let inp = local_addr(x);
        let ppr = hidden / 8;
        let segs = u64::from(segs.max(1));
        let mut join = RowJoin::new(segs, timeout_ns);
        let chunk = plan::slice_len(tokens, n as u64) * ppr;
        let (first, stride) = grid_stride();
        // 1. Each owner gets its rows of our x.
        for k in 1..n {
            let p = rotated(me, k, n);
            let (lo, hi) = plan::slice(tokens, n as u64, p as u64);
            let mut j = first;
            while j < (hi - lo) * ppr {
                send_pack(&ll, p, j, ld(inp + pack_off(lo * ppr + j)));
                j += stride;
            }
        }
        // 2. Reduce our rows, add the residual, send h to every rank (us included).
        let mut res: Result<(), WaitError> = Ok(());
        let (lo, hi) = plan::slice(tokens, n as u64, me as u64);
        let mut j = first;
        while j < (hi - lo) * ppr {
            let g = lo * ppr + j;
            let own = ld(inp + pack_off(g));
            // Loaded before the wait, so its latency overlaps it.
            let rsd = ld(residual + pack_off(g));
            let mut acc = lanes(ll.pack_of(0, own, j, timeout_ns, &mut res));
            for s in 1..n {
                add_lanes(&mut acc, ll.pack_of(s, own, j, timeout_ns, &mut res));
            }
            let h = add_bf16(round_pack(&acc), rsd);
            for k in 0..n {
                send_pack(&ll, rotated(me, k, n), chunk + j, h);
            }
            j += stride;
        }
        // 3. Normalise every row from the h its owner sent.
        let kstride = u64::from(block_dim().x);
        let mut sums = BlockSum::new();
        let mut item = u64::from(block_idx().x);
        while item < tokens * segs {
            let (row, seg) = (item / segs, item % segs);
            let (k0, end) = split::seg_range(ppr, segs, seg);
            let k0 = k0 + u64::from(thread_idx().x);
            let owner = owner_of(row, tokens, n as u64);
            let (olo, _) = plan::slice(tokens, n as u64, owner);
            let row_off = pack_off(row * ppr);
            let mut w = [U32x4::default(); MAX_PACKS];
            each_pack(|i| {
                let k = k0 + i as u64 * kstride;
                if k < end {
                    w[i] = ld(weight + pack_off(k));
                }
            });
            let mut h = [U32x4::default(); MAX_PACKS];
            each_pack(|i| {
                let k = k0 + i as u64 * kstride;
                if k < end && res.is_ok() {
                    let slot = chunk + (row - olo) * ppr + k;
                    match recv_pack(&ll, owner as i32, slot, timeout_ns) {
                        Ok(v) => h[i] = v,
                        Err(e) => res = Err(e),
                    }
                }
            });
            let total = join.row_total(&mut sums, thread_sumsq(&h), &mut res);
            let inv = inv_rms(total, hidden, eps);
            write_row(&h, &w, end, k0, kstride, inv, out, residual_out, row_off);
            item += u64::from(grid_dim().x);
        }
        join.finish();
        ll.end(res, status);
    }
}

/// The rank that owns `row` when `tokens` rows are split into `n` slices of
/// `ceil(tokens / n)`.
#[inline(always)]
pub const fn owner_of(row: u64, tokens: u64, n: u64) -> u64 {
    row / tokens.div_ceil(n)
}
