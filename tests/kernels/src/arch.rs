//! `arch` primitives: static and dynamic shared memory, warp shuffles and votes, block-wide
//! reductions and named barriers, timers and programmatic dependent launch. Thread block
//! clusters (`cluster`) and cooperative groups (`coop`) have their own modules.

use symcomm_device::arch::{self, FULL_MASK};
use symcomm_device::mem::{self, LoadOrder, Scope, StoreOrder};
use symcomm_device::prelude::*;
use symcomm_device::shared_array;

use crate::geometry::gid;

/// Number of threads per block `smem_static_reverse` must be launched with.
pub const STATIC_SMEM_THREADS: u32 = 256;

// ANCHOR: smem_static_reverse
/// Reverses each block's 256-element chunk through a static shared array:
/// `out[b*256 + t] = input[b*256 + 255 - t]`.
///
/// # Safety
/// Launched with exactly 256 threads per block; `input`/`out` hold 256 × blocks u32.
#[kernel]
pub unsafe fn smem_static_reverse(input: *const u32, out: *mut u32) {
    let tile: *mut u32 = shared_array!(TEST_REVERSE_TILE: [u32; 256]);
    let t = thread_idx().x as usize;
    let base = block_idx().x as usize * 256;
    // SAFETY: t < 256 (launch contract); the buffers hold the block's chunk.
    unsafe { *tile.add(t) = *input.add(base + t) };
    arch::sync_threads();
    // SAFETY: as above.
    unsafe { *out.add(base + t) = *tile.add(255 - t) };
}
// ANCHOR_END: smem_static_reverse

/// Reverses each block's chunk of `block_dim.x` elements through dynamic shared memory and
/// writes the dynamic shared size seen by the block to `sizes[block]`.
///
/// # Safety
/// Launched with `block_dim.x * 4` bytes of dynamic shared memory; `input`/`out` hold
/// `block_dim.x × blocks` u32; `sizes` holds `blocks` u32.
#[kernel]
pub unsafe fn smem_dynamic_reverse(input: *const u32, out: *mut u32, sizes: *mut u32) {
    let smem: *mut u32 = arch::dynamic_shared();
    let n = block_dim().x as usize;
    let t = thread_idx().x as usize;
    let base = block_idx().x as usize * n;
    // SAFETY: launch contract.
    unsafe { *smem.add(t) = *input.add(base + t) };
    arch::sync_threads();
    // SAFETY: launch contract.
    unsafe { *out.add(base + t) = *smem.add(n - 1 - t) };
    if t == 0 {
        // SAFETY: launch contract.
        unsafe { *sizes.add(block_idx().x as usize) = arch::dynamic_shared_size() };
    }
}

/// Words per thread written by [`warp_ops`].
pub const WARP_OPS_WORDS: usize = 12;

/// Warp primitives on `v = input[gid]`; per thread 12 words at `out[12 * gid ..]`:
/// `lane_id, shfl_idx(v, 0), shfl_xor(v, 1), shfl_up(v, 1), shfl_down(v, 1),
/// ballot(v & 1), vote_all(v != 0), vote_any(v % 97 == 0), lanemask_lt,
/// shfl_xor(u64 (v << 32 | !v), 5) lo, hi, active_mask`.
///
/// # Safety
/// 1-D blocks of a multiple of 32 threads; `input` holds one u32 per thread, `out` 12.
#[kernel]
pub unsafe fn warp_ops(input: *const u32, out: *mut u32) {
    let i = gid();
    // SAFETY: launch contract.
    let v = unsafe { *input.add(i) };
    let wide = (u64::from(v) << 32) | u64::from(!v);
    let w = arch::shfl_xor(FULL_MASK, wide, 5);
    let words = [
        arch::lane_id(),
        arch::shfl_idx(FULL_MASK, v, 0),
        arch::shfl_xor(FULL_MASK, v, 1),
        arch::shfl_up(FULL_MASK, v, 1),
        arch::shfl_down(FULL_MASK, v, 1),
        arch::ballot(FULL_MASK, v & 1 == 1),
        u32::from(arch::vote_all(FULL_MASK, v != 0)),
        u32::from(arch::vote_any(FULL_MASK, v % 97 == 0)),
        arch::lanemask_lt(),
        w as u32,
        (w >> 32) as u32,
        arch::active_mask(),
    ];
    for (k, x) in words.into_iter().enumerate() {
        // SAFETY: launch contract.
        unsafe { *out.add(WARP_OPS_WORDS * i + k) = x };
    }
}

/// Block-wide reductions and named barriers on `v = input[gid]`; per block 3 words at
/// `out[3 * block ..]`: `sync_threads_count(v & 1)`, `sync_threads_or(v == 7)`, and the
/// number of threads that saw the OR of `v == 7` over warps 0-1 through named barrier 1
/// (`barrier_sync_or`) agree with the block OR restricted to those warps.
///
/// # Safety
/// 1-D blocks of at least 64 threads (a multiple of 32); `input` one u32 per thread, `out`
/// 3 per block.
#[kernel]
pub unsafe fn block_votes(input: *const u32, out: *mut u32) {
    let i = gid();
    // SAFETY: launch contract.
    let v = unsafe { *input.add(i) };
    let count = arch::sync_threads_count(v & 1 == 1);
    let any = arch::sync_threads_or(v == 7);
    let t = thread_idx().x;
    let mut span_any = 0;
    if t < 64 {
        span_any = u32::from(arch::barrier_sync_or(1, 64, v == 7));
        arch::barrier_sync(2, 64);
    }
    // Count the warps-0-1 threads whose named-barrier OR was true.
    let agreed = arch::sync_threads_count(span_any == 1);
    if t == 0 {
        // SAFETY: launch contract.
        unsafe {
            *out.add(3 * block_idx().x as usize) = count;
            *out.add(3 * block_idx().x as usize + 1) = u32::from(any);
            *out.add(3 * block_idx().x as usize + 2) = agreed;
        }
    }
}

/// Timers: per thread 4 u64 at `out[4 * gid ..]`: `globaltimer` before and after a wait of
/// at least one timer tick (bounded to 10^6 polls), `clock64` before and after.
///
/// # Safety
/// `out` holds 4 u64 per thread.
#[kernel]
pub unsafe fn timers(out: *mut u64) {
    let i = gid();
    let c0 = arch::clock64();
    let t0 = arch::globaltimer();
    let mut t1 = t0;
    let mut polls = 0;
    while t1 == t0 && polls < 1_000_000 {
        arch::nanosleep(100);
        t1 = arch::globaltimer();
        polls += 1;
    }
    let c1 = arch::clock64();
    for (k, x) in [t0, t1, c0, c1].into_iter().enumerate() {
        // SAFETY: launch contract.
        unsafe { *out.add(4 * i + k) = x };
    }
}

/// Dependent launch, first kernel: lets the next kernel launch at once
/// ([`arch::launch_dependents`]), then waits `delay_ns` (`globaltimer`) and writes `value`
/// to `out[gid]`.
///
/// # Safety
/// `out` holds one u32 per thread.
#[kernel]
pub unsafe fn pdl_producer(out: *mut u32, value: u32, delay_ns: u64) {
    arch::launch_dependents();
    let t0 = arch::globaltimer();
    while arch::globaltimer().wrapping_sub(t0) < delay_ns {
        arch::nanosleep(1000);
    }
    // SAFETY: launch contract.
    unsafe { *out.add(gid()) = value };
}

/// Dependent launch, second kernel: `early[gid]` = `src[gid]` read before
/// [`arch::grid_dependency_wait`] (a relaxed load: what the first kernel had written by
/// then, if this kernel already runs), `dst[gid]` = `src[gid]` read after it (what the first
/// kernel wrote, always).
///
/// # Safety
/// `src`, `dst` and `early` hold one u32 per thread.
#[kernel]
pub unsafe fn pdl_consumer(src: *const u32, dst: *mut u32, early: *mut u32) {
    let i = gid();
    // SAFETY: launch contract; a relaxed load may race with the producer's store.
    unsafe {
        *early.add(i) = mem::load(src.add(i), LoadOrder::Relaxed, Scope::Gpu);
    }
    arch::grid_dependency_wait();
    // SAFETY: launch contract.
    unsafe { *dst.add(i) = *src.add(i) };
}

/// Named barriers over the whole block (`n_threads = 0`): warp 0 writes `value ^ t` to
/// `out[t]` and arrives at barrier 3 without waiting; the other warps `barrier_sync(3, 0)`,
/// then thread `t` copies `out[t % 32]` to `out[t]`. Afterwards every `out[t]` of the block
/// is `value ^ (t % 32)`.
///
/// # Safety
/// One 1-D block of at least 33 threads (a partial last warp is fine); `out` holds one u32
/// per thread.
#[kernel]
pub unsafe fn block_named_barrier(out: *mut u32, value: u32) {
    let t = thread_idx().x;
    if arch::warp_idx() == 0 {
        // SAFETY: launch contract; only warp 0 writes these words before the barrier.
        unsafe { mem::store(out.add(t as usize), value ^ t, StoreOrder::Weak, Scope::Cta) };
        arch::barrier_arrive(3, 0);
    } else {
        arch::barrier_sync(3, 0);
        // SAFETY: launch contract; the barrier ordered warp 0's writes before this read.
        unsafe {
            let v = mem::load(out.add((t % 32) as usize), LoadOrder::Weak, Scope::Cta);
            mem::store(out.add(t as usize), v, StoreOrder::Weak, Scope::Cta);
        }
    }
}
