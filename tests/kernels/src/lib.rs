//! Kernels that exercise the device API, one small kernel per primitive. Their PTX is checked
//! for the intended instructions (`tests/tests/device_ptx.rs`, per kernel) and the
//! non-multimem ones run on one GPU in `gpu_device` (`tests/src/bin/gpu_device.rs`), which
//! documents the expected results next to each launch.
//!
//! Conventions: every spin-wait is timed (no launch can hang); wait results are reported as
//! [`WaitError::result_code`] (0 ok, 1 timeout, 2 aborted). Kernels that are only **loaded**,
//! never launched, are marked "load-only": they use multimem.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

mod symmem;
pub use symmem::*;

use symcomm_device::arch::{self, FULL_MASK};
use symcomm_device::barrier::{BarrierMode, LsaBarrier};
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta, Lanes, Thread, Tile, Warp, WarpSpan};
use symcomm_device::ll;
use symcomm_device::mem::{
    self, F32x4, LoadOrder, Ordering, Scope, StoreOrder, U32x4, U64x2, atomic_add, atomic_cas,
    atomic_exch, red_add,
};
use symcomm_device::multimem;
use symcomm_device::prelude::*;
use symcomm_device::reduce::{Bf16, F16, Max, Min, Prod, Sum, reduce_pack};
use symcomm_device::shared_array;
use symcomm_device::team::Team;
use symcomm_device::util::{idiv_fast32, idiv_rcp32, imod_fast32};
use symcomm_device::wait::{Spin, WaitError};
use symcomm_device::window::Window;

/// Global 1-D thread index.
#[inline(always)]
fn gid() -> usize {
    (block_idx().x * block_dim().x + thread_idx().x) as usize
}

/// Writes each thread's geometry as 8 words at `out[8 * global_id ..]`:
/// `thread_idx.{x,y,z}, block_idx.{x,y,z}, block_dim.x, grid_dim.x`.
///
/// # Safety
/// `out` is valid for `8 × total threads` u32 writes.
#[kernel]
pub unsafe fn geometry(out: *mut u32) {
    let (t, b, bd, gd) = (thread_idx(), block_idx(), block_dim(), grid_dim());
    let block_linear = (b.z * gd.y + b.y) * gd.x + b.x;
    let thread_linear = (t.z * bd.y + t.y) * bd.x + t.x;
    let id = (block_linear * (bd.x * bd.y * bd.z) + thread_linear) as usize;
    let words = [t.x, t.y, t.z, b.x, b.y, b.z, bd.x, gd.x];
    for (k, w) in words.into_iter().enumerate() {
        // SAFETY: id < total threads; the caller sized `out` for 8 words per thread.
        unsafe { *out.add(8 * id + k) = w };
    }
}

// ---------------------------------------------------------------------------------------
// Helpers for the host side of the GPU tests (memory that cuMemset/cuMemcpy cannot reach
// because it is mapped in a custom VA range).

/// `dst[i] = value` for `i < n`, grid-stride.
///
/// # Safety
/// `dst` is valid for `n` u32 writes.
#[kernel]
pub unsafe fn fill_u32(dst: *mut u32, n: u64, value: u32) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: i < n.
        unsafe { *dst.add(i) = value };
        i += stride;
    }
}

/// `dst[i] = src[i]` for `i < n`, grid-stride.
///
/// # Safety
/// `src`/`dst` are valid for `n` u32 reads/writes and do not overlap.
#[kernel]
pub unsafe fn copy_u32(src: *const u32, dst: *mut u32, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: i < n.
        unsafe { *dst.add(i) = *src.add(i) };
        i += stride;
    }
}

// ---------------------------------------------------------------------------------------
// arch: shared memory, warp ops, block reductions, timers.

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

/// Most blocks per cluster and warps per block of [`cluster_exchange`].
pub const CLUSTER_MAX: usize = 8;
/// See [`CLUSTER_MAX`].
pub const CLUSTER_MAX_WARPS: usize = 8;

/// Thread block clusters: for `rounds` rounds, warp `w` of every block stores the word
/// `input[(block × warps + w) × rounds + k]` into slot `rank × warps + w` of every block of its
/// cluster (itself included) with `cluster::store_async_u32`, counted on that block's
/// transaction barrier; each block waits for all `size × warps` words of the round and thread
/// `t < size × warps` writes slot `t` to `out[(block × rounds + k) × size × warps + t]`. The
/// slots and barriers alternate between two buffers, as in the fused RMSNorm's row join.
/// Block 0's thread 0 also writes `[rank, size]` of every block to `geo[2 × block ..]`
/// (every block writes its own pair).
///
/// # Safety
/// 1-D launch in clusters of at most [`CLUSTER_MAX`] blocks, blocks of a multiple of 32
/// threads and at most [`CLUSTER_MAX_WARPS`] warps; `input` holds `blocks × warps × rounds`
/// words, `out` `blocks × rounds × size × warps`, `geo` `2 × blocks`; `status` one word per
/// block (wait result code).
#[kernel]
pub unsafe fn cluster_exchange(
    input: *const u32,
    out: *mut u32,
    geo: *mut u32,
    status: *mut u32,
    rounds: u32,
) {
    use symcomm_device::cluster::{self, Mbarrier};
    let bars: *mut u64 = shared_array!(TEST_CLUSTER_BARS: [u64; 2]);
    let slots: *mut u32 =
        shared_array!(TEST_CLUSTER_SLOTS: [u32; 2 * CLUSTER_MAX * CLUSTER_MAX_WARPS]);
    let (rank, size) = (cluster::rank(), cluster::size());
    let (t, block) = (thread_idx().x, block_idx().x);
    let warps = block_dim().x / 32;
    let (lane, warp) = (t % 32, t / 32);
    if t == 0 {
        // SAFETY: this block's shared words, not yet used.
        unsafe {
            Mbarrier::new(bars).init(1);
            Mbarrier::new(bars.add(1)).init(1);
            *geo.add(2 * block as usize) = rank;
            *geo.add(2 * block as usize + 1) = size;
        }
        cluster::fence_init();
    }
    // Every block's barriers are initialised and every block has started.
    cluster::sync();
    let entries = size * warps;
    let mut code = 0;
    for k in 0..rounds {
        let buf = (k & 1) as usize;
        // SAFETY: buffer `buf` of two (entries ≤ CLUSTER_MAX × CLUSTER_MAX_WARPS).
        let (bar, mine) = unsafe {
            (
                Mbarrier::new(bars.add(buf)),
                slots.add(buf * CLUSTER_MAX * CLUSTER_MAX_WARPS),
            )
        };
        if t == 0 {
            // SAFETY: initialised; one arrival per phase.
            unsafe { bar.arrive_expect_tx(4 * entries) };
        }
        if lane < size {
            // SAFETY: the launch contract; block `lane` of the cluster waits for this word.
            unsafe {
                let v = *input.add(((block * warps + warp) * rounds + k) as usize);
                let dst = cluster::map(mine.add((rank * warps + warp) as usize), lane);
                cluster::store_async_u32(dst, v, bar.remote(lane));
            }
        }
        // SAFETY: initialised; phase `k / 2` of this barrier is the current one.
        if let Err(e) = unsafe { bar.wait_parity((k >> 1) & 1, core::ptr::null(), 1_000_000_000) } {
            code = WaitError::result_code(Err(e));
        }
        if t < entries {
            // SAFETY: landed before the phase completed; `out` as in the contract.
            unsafe {
                *out.add(((block * rounds + k) * entries + t) as usize) =
                    mine.add(t as usize).read_volatile();
            }
        }
        // Every thread has read buffer `buf` before this block sends its next round's words
        // (which peers wait for before they write buffer `buf` again).
        arch::sync_threads();
    }
    if t == 0 {
        // SAFETY: the launch contract.
        unsafe { *status.add(block as usize) = code };
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

/// Cooperative groups: per thread 20 words at `out[20 * tid ..]` (one block of 128 threads):
/// rank/size/any for Thread, Tile<4>, Warp, Lanes (half warps), WarpSpan (warps 0-1 with id
/// 0, warps 2-3 with id 1), Cta, where `any` ORs `thread_idx().x == 70`.
///
/// # Safety
/// One block of exactly 128 threads; `out` holds 20 × 128 u32.
#[kernel]
pub unsafe fn coop_probe(out: *mut u32) {
    let t = thread_idx().x;
    let p = t == 70;
    let th = Thread::new();
    let t4 = Tile::<4>::new();
    let w = Warp::new();
    let half = if arch::lane_id() < 16 {
        0x0000_ffff
    } else {
        0xffff_0000
    };
    let l = Lanes::new(half);
    let s = if t < 64 {
        WarpSpan::new(0, 2, 0)
    } else {
        WarpSpan::new(2, 2, 1)
    };
    let c = Cta::new();
    let words = [
        th.thread_rank(),
        th.size(),
        u32::from(th.any(p)),
        t4.thread_rank(),
        t4.size(),
        u32::from(t4.any(p)),
        w.thread_rank(),
        w.size(),
        u32::from(w.any(p)),
        l.thread_rank(),
        l.size(),
        u32::from(l.any(p)),
        s.thread_rank(),
        s.size(),
        u32::from(s.any(p)),
        c.thread_rank(),
        c.size(),
        u32::from(c.any(p)),
        0,
        0,
    ];
    t4.sync();
    w.sync();
    l.sync();
    s.sync();
    c.sync();
    for (k, x) in words.into_iter().enumerate() {
        // SAFETY: launch contract.
        unsafe { *out.add(20 * t as usize + k) = x };
    }
}

/// `Coop::any` of the warp-level groups (Tile<4>, Warp, Lanes of half warps): `out[t]` has
/// bit 0/1/2 set when the group's OR of `thread_idx().x == 70` is true. Its PTX shows that
/// each `any` synchronises with `bar.warp.sync` (which orders memory; `vote.sync` does not),
/// as `LsaBarrier::wait` relies on for warp-level groups.
///
/// # Safety
/// 1-D blocks of whole warps; `out` holds one u32 per thread of the block.
#[kernel]
pub unsafe fn warp_any_orders(out: *mut u32) {
    let t = thread_idx().x;
    let p = t == 70;
    let half = if arch::lane_id() < 16 {
        0x0000_ffff
    } else {
        0xffff_0000
    };
    let bits = u32::from(Tile::<4>::new().any(p))
        | u32::from(Warp::new().any(p)) << 1
        | u32::from(Lanes::new(half).any(p)) << 2;
    // SAFETY: launch contract.
    unsafe { *out.add(t as usize) = bits };
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

// ---------------------------------------------------------------------------------------
// mem: ordered atomics, fences, vector accesses, constant loads.

/// Every thread does `old = atomic_add(counter, 1, AcqRel, Sys)` and records `olds[gid] =
/// old`; afterwards `*counter` = threads and `olds` is a permutation of `0..threads`.
///
/// # Safety
/// `counter` valid (zeroed by the host); `olds` holds one u32 per thread.
#[kernel]
pub unsafe fn atomic_add_acq_rel(counter: *mut u32, olds: *mut u32) {
    // SAFETY: launch contract.
    unsafe { *olds.add(gid()) = atomic_add(counter, 1, Ordering::AcqRel, Scope::Sys) };
}

/// Every thread does `red_add(c32, 1, Release, Sys)`, `red_add(c64, 2^32 + 1, Release, Gpu)`
/// and `atomic_add(c64b, 3, Acquire, Gpu)`.
///
/// # Safety
/// The three counters are valid and zeroed by the host.
#[kernel]
pub unsafe fn red_add_release(c32: *mut u32, c64: *mut u64, c64b: *mut u64) {
    // SAFETY: launch contract.
    unsafe {
        red_add(c32, 1, Ordering::Release, Scope::Sys);
        red_add(c64, (1 << 32) + 1, Ordering::Release, Scope::Gpu);
        atomic_add(c64b, 3, Ordering::Acquire, Scope::Gpu);
    }
}

/// Every thread increments `*counter` with a CAS loop (`atom.acq_rel.sys.cas`, bounded to
/// 10^6 attempts) and records the value it replaced in `olds[gid]` (or `u32::MAX` if it gave
/// up); afterwards `*counter` = threads, `olds` a permutation.
///
/// # Safety
/// `counter` valid and zeroed; `olds` one u32 per thread.
#[kernel]
pub unsafe fn atomic_cas_counter(counter: *mut u32, olds: *mut u32) {
    // SAFETY: launch contract.
    let mut cur = unsafe { mem::load(counter, LoadOrder::Relaxed, Scope::Sys) };
    let mut got = u32::MAX;
    for _ in 0..1_000_000 {
        // SAFETY: launch contract.
        let seen = unsafe { atomic_cas(counter, cur, cur + 1, Ordering::AcqRel, Scope::Sys) };
        if seen == cur {
            got = cur;
            break;
        }
        cur = seen;
    }
    // SAFETY: launch contract.
    unsafe { *olds.add(gid()) = got };
}

/// Every thread swaps `gid + 1` into `*slot` (`atom.acq_rel.sys.exch`) and records the old
/// value; also a 64-bit exchange of `gid + 1` into `*slot64` (`Release`, `Gpu`). Afterwards
/// the old values plus the final value are a permutation of `0..=threads`.
///
/// # Safety
/// Slots valid and zeroed; `olds` and `olds64` one element per thread.
#[kernel]
pub unsafe fn atomic_exch_chain(
    slot: *mut u32,
    olds: *mut u32,
    slot64: *mut u64,
    olds64: *mut u64,
) {
    let i = gid();
    // SAFETY: launch contract.
    unsafe {
        *olds.add(i) = atomic_exch(slot, i as u32 + 1, Ordering::AcqRel, Scope::Sys);
        *olds64.add(i) = atomic_exch(slot64, i as u64 + 1, Ordering::Release, Scope::Gpu);
    }
}

/// The word `k` of round `round` that [`message_pass`] sends (the host checks the consumer
/// saw exactly these).
#[inline(always)]
pub const fn message_payload(round: usize, k: usize) -> u32 {
    (round * 1000 + k) as u32 ^ 0x5a5a
}

/// Message passing between block 0 (producer) and block 1 (consumer), thread 0 of each, in
/// two rounds: round 0 publishes with `st.release.sys`, round 1 with `fence.acq_rel.sys` + a
/// relaxed store (and `fence.sc.sys` / `fence.proxy.alias` on the way). The consumer waits
/// with `ld.acquire.sys` (timed, `timeout_ns`) and copies the payload to `out`.
/// `out[0..2]` = wait result codes, `out[2..2+2n]` = payloads seen (round-major), each
/// [`message_payload`].
///
/// # Safety
/// Two blocks; `data` holds 2n u32, `flags` 2 u32 (zeroed), `out` 2 + 2n u32.
#[kernel]
pub unsafe fn message_pass(
    data: *mut u32,
    flags: *mut u32,
    out: *mut u32,
    n: u32,
    timeout_ns: u64,
) {
    if thread_idx().x != 0 {
        return;
    }
    let n = n as usize;
    if block_idx().x == 0 {
        for round in 0..2usize {
            for k in 0..n {
                // SAFETY: launch contract.
                unsafe {
                    mem::store(
                        data.add(round * n + k),
                        message_payload(round, k),
                        StoreOrder::Weak,
                        Scope::Sys,
                    )
                };
            }
            // SAFETY: launch contract.
            unsafe {
                if round == 0 {
                    mem::store(flags, 1, StoreOrder::Release, Scope::Sys);
                } else {
                    mem::fence_sc(Scope::Sys);
                    mem::fence_proxy_alias();
                    mem::fence(Ordering::Release, Scope::Sys);
                    mem::store(flags.add(1), 1, StoreOrder::Relaxed, Scope::Sys);
                }
            }
        }
    } else if block_idx().x == 1 {
        for round in 0..2usize {
            // SAFETY: no abort flag.
            let mut spin = unsafe { Spin::new(core::ptr::null(), timeout_ns) };
            let r = spin.until(|| {
                // SAFETY: launch contract.
                unsafe { mem::load(flags.add(round), LoadOrder::Acquire, Scope::Sys) == 1 }
            });
            // SAFETY: launch contract.
            unsafe { *out.add(round) = WaitError::result_code(r) };
            for k in 0..n {
                // SAFETY: launch contract.
                unsafe {
                    *out.add(2 + round * n + k) =
                        mem::load(data.add(round * n + k), LoadOrder::Weak, Scope::Sys)
                };
            }
        }
    }
}

/// Copies `n` 16-byte vectors from `src` to three outputs with different vector forms:
/// `dst_u32` via weak `v4.u32`, `dst_f32` via relaxed-gpu load + release-sys store `v4.f32`
/// (bit-exact: no arithmetic), `dst_u64` via acquire-sys load + volatile store `v2.u64`.
///
/// # Safety
/// All buffers hold `n` 16-byte aligned vectors.
#[kernel]
pub unsafe fn vector_roundtrip(
    src: *const U32x4,
    dst_u32: *mut U32x4,
    dst_f32: *mut F32x4,
    dst_u64: *mut U64x2,
    n: u64,
) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: i < n (launch contract).
        unsafe {
            let v = mem::load_v4_u32(src.add(i), LoadOrder::Weak, Scope::Gpu);
            mem::store_v4_u32(dst_u32.add(i), v, StoreOrder::Weak, Scope::Gpu);
            let f = mem::load_v4_f32(src.add(i).cast(), LoadOrder::Relaxed, Scope::Gpu);
            mem::store_v4_f32(dst_f32.add(i), f, StoreOrder::Release, Scope::Sys);
            let d = mem::load_v2_u64(src.add(i).cast(), LoadOrder::Acquire, Scope::Sys);
            mem::store_v2_u64(dst_u64.add(i), d, StoreOrder::Volatile, Scope::Sys);
        }
        i += stride;
    }
}

/// Constant loads: `out[i] = load_const_v4(src + i)` for `i < n` (vectors), and thread 0
/// copies the window descriptor at `win` with `load_const::<Window>` and `load_const_word`
/// into `win_out` (as 9 u64: the 72 bytes).
///
/// # Safety
/// `src`/`out` hold `n` vectors; `win` is a descriptor in global memory; `win_out` 72 bytes.
#[kernel]
pub unsafe fn load_const_copy(
    src: *const U32x4,
    out: *mut U32x4,
    n: u64,
    win: *const Window,
    win_out: *mut u64,
) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: launch contract.
        unsafe { *out.add(i) = mem::load_const_v4(src.add(i)) };
        i += stride;
    }
    if gid() == 0 {
        // SAFETY: launch contract.
        let w: Window = unsafe { mem::load_const(win) };
        // SAFETY: launch contract.
        let rank: i32 = unsafe { mem::load_const_word(&raw const (*win).world_rank) };
        let words = [
            w.win_host,
            w.lsa_flat_base,
            (w.lsa_rank as u32 as u64) | ((rank as u32 as u64) << 32),
            u64::from(w.stride4g) | (u64::from(w.mc_offset4k) << 32),
            u64::from(w.gin_offset4k) | (u64::from(w.pad) << 32),
            w.gin_wins[0],
            w.gin_wins[1],
            w.gin_wins[2],
            w.gin_wins[3],
        ];
        for (k, x) in words.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *win_out.add(k) = x };
        }
    }
}

// ---------------------------------------------------------------------------------------
// util / team / window / ptr: pure math, compared with the host.

/// `q[i] = idiv_fast32(x[i], d[i], idiv_rcp32(d[i]))`, `r[i] = imod_fast32(...)`.
///
/// # Safety
/// All buffers hold `n` u32; every `d[i] >= 1`.
#[kernel]
pub unsafe fn div_fast(x: *const u32, d: *const u32, q: *mut u32, r: *mut u32, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: launch contract.
        unsafe {
            let (xi, di) = (*x.add(i), *d.add(i));
            let rcp = idiv_rcp32(di);
            *q.add(i) = idiv_fast32(xi, di, rcp);
            *r.add(i) = imod_fast32(xi, di, rcp);
        }
        i += stride;
    }
}

/// Words written by [`team_probe`].
pub const TEAM_PROBE_WORDS: usize = 64;

/// The team facts of `comm` as 64 i32 (see [`team_probe_values`]); thread 0 only.
///
/// # Safety
/// `out` holds 64 i32.
#[kernel]
pub unsafe fn team_probe(comm: DevComm, out: *mut i32) {
    if gid() == 0 {
        let v = team_probe_values(&comm);
        for (k, x) in v.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(k) = x };
        }
    }
}

/// The values [`team_probe`] writes: world/LSA/rail teams (3 words each), their world ranks
/// for members 0..4, membership and conversions between LSA and rail and world, inner and
/// outer factors, the rank in the difference world∖LSA, LSA ranks of rail members, the
/// comm's compatibility; unused words are -7. Public so the host can compute the reference
/// with the same device-crate functions on the CPU.
pub fn team_probe_values(comm: &DevComm) -> [i32; TEAM_PROBE_WORDS] {
    let mut v = [-7i32; TEAM_PROBE_WORDS];
    let (w, l, r) = (comm.world_team(), comm.lsa_team(), comm.rail_team());
    let mut k = 0;
    let mut push = |x: i32| {
        if k < TEAM_PROBE_WORDS {
            v[k] = x;
            k += 1;
        }
    };
    for t in [w, l, r] {
        push(t.n_ranks);
        push(t.rank);
        push(t.stride);
        for m in 0..4 {
            push(comm.team_rank_to_world(&t, m));
        }
    }
    for m in 0..4 {
        push(i32::from(l.contains(&w, m)));
        push(l.try_rank_from(&w, m).unwrap_or(-1));
        push(i32::from(r.contains(&w, m)));
        push(r.try_rank_from(&w, m).unwrap_or(-1));
    }
    let inner: Team = w.inner_factor(comm.lsa_size);
    let outer: Team = w.outer_factor(comm.lsa_size);
    for t in [inner, outer] {
        push(t.n_ranks);
        push(t.rank);
        push(t.stride);
    }
    push(w.rank_in_difference(&l, 0));
    push(comm.team_rank_to_lsa(&r, r.rank));
    push(i32::from(comm.is_compatible()));
    v
}

/// Number of u64 written by [`window_math`].
pub const WINDOW_MATH_WORDS: usize = 24;

/// Window and SymPtr address arithmetic against the descriptor at `win` (24 u64 in `out`,
/// thread 0; see the host for the list), then every thread writes `gid + 1` through
/// `SymPtr::local()` of `sym` (an f32 buffer of the window) element `gid`, as `f32`.
///
/// # Safety
/// `win` is a descriptor in global memory whose local copy (`local_ptr(off)` for the byte
/// offsets of `sym` + threads) is real, writable memory; `out` holds 24 u64.
#[kernel]
pub unsafe fn window_math(win: *const Window, comm: DevComm, sym: SymPtr<f32>, out: *mut u64) {
    let i = gid();
    if i == 0 {
        // SAFETY: launch contract.
        let w = unsafe { &*win };
        let team = comm.lsa_team();
        // SAFETY: launch contract (addresses only, nothing dereferenced here).
        let words: [u64; WINDOW_MATH_WORDS] = unsafe {
            [
                w.local_ptr(0) as u64,
                w.local_ptr(4096) as u64,
                w.lsa_ptr(16, 0) as u64,
                w.lsa_ptr(16, 1) as u64,
                w.lsa_ptr(16, 3) as u64,
                w.peer_ptr(8, comm.rank + 1) as u64,
                w.try_peer_ptr(8, comm.rank + 1, &comm)
                    .map_or(0, |p| p as u64),
                w.try_peer_ptr(8, comm.rank + comm.lsa_size, &comm)
                    .map_or(0, |p| p as u64),
                w.try_peer_ptr(8, comm.rank - comm.lsa_rank - 1, &comm)
                    .map_or(0, |p| p as u64),
                w.team_peer_ptr(32, &team, 0) as u64,
                w.multimem_ptr(64, &comm) as u64,
                sym.local() as u64,
                (sym + 5).local() as u64,
                (sym + 5).lsa(1) as u64,
                sym.peer(&team, 0) as u64,
                sym.peer_world(comm.rank) as u64,
                sym.lsa_multimem(&comm) as u64,
                ((sym + 9) - sym) as u64,
                sym.cast::<u64>().add(3).offset as u64,
                symcomm_device::window::add4g(0x0000_1234_5678_9abc, 7),
                comm.resource_local_ptr(3) as u64,
                comm.resource_lsa_ptr(1, 1) as u64,
                comm.resource_multimem_ptr(2) as u64,
                w.lsa_rank() as u64,
            ]
        };
        for (k, x) in words.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(k) = x };
        }
    }
    // SAFETY: launch contract: the local copy holds one f32 per thread.
    unsafe { *(sym + i).local() = (i + 1) as f32 };
}

// ---------------------------------------------------------------------------------------
// reduce: packed vectors.

/// Outputs per input pair written by [`reduce_packs`].
pub const REDUCE_OPS: usize = 8;

// ANCHOR: reduce_packs
/// For every `i < n`: `out[8 i + k]` = reduction `k` of `a[i]` and `b[i]`:
/// F16 Sum, Bf16 Sum, f32 Sum, f32 Max, i32 Min, u32 Prod, u64 Sum, f64 Sum.
///
/// # Safety
/// `a`, `b` hold `n` vectors, `out` 8n.
#[kernel]
pub unsafe fn reduce_packs(a: *const U32x4, b: *const U32x4, out: *mut U32x4, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: launch contract.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        let r = [
            reduce_pack::<F16, Sum>(x, y),
            reduce_pack::<Bf16, Sum>(x, y),
            reduce_pack::<f32, Sum>(x, y),
            reduce_pack::<f32, Max>(x, y),
            reduce_pack::<i32, Min>(x, y),
            reduce_pack::<u32, Prod>(x, y),
            reduce_pack::<u64, Sum>(x, y),
            reduce_pack::<f64, Sum>(x, y),
        ];
        for (k, v) in r.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(REDUCE_OPS * i + k) = v };
        }
        i += stride;
    }
}
// ANCHOR_END: reduce_packs

// ---------------------------------------------------------------------------------------
// ll: line round trip between two blocks.

/// LL round trip: block 0 sends `data[i]` in line `i` (`i < n`) for round `epoch`; block 1
/// receives every line with a timed wait and writes `got[i]` and `codes[i]` (result code).
/// Block 1 also polls line `n` (never written in this round; the host pre-fills it with the
/// previous epoch) with `short_timeout_ns` and writes its code to `codes[n]` (expected:
/// timeout).
///
/// # Safety
/// Two blocks; `lines` holds n + 1 lines, `data`/`got` n u64, `codes` n + 1 u32.
#[allow(clippy::too_many_arguments)] // a kernel's parameters are its interface
#[kernel]
pub unsafe fn ll_roundtrip(
    lines: *mut ll::Line,
    data: *const u64,
    got: *mut u64,
    codes: *mut u32,
    n: u32,
    epoch: u32,
    timeout_ns: u64,
    short_timeout_ns: u64,
) {
    let t = thread_idx().x;
    let step = block_dim().x;
    if block_idx().x == 0 {
        let mut i = t;
        while i < n {
            // SAFETY: launch contract.
            unsafe { ll::store(lines.add(i as usize), *data.add(i as usize), epoch) };
            i += step;
        }
    } else if block_idx().x == 1 {
        let mut i = t;
        while i < n {
            // SAFETY: launch contract.
            let r =
                unsafe { ll::load(lines.add(i as usize), epoch, core::ptr::null(), timeout_ns) };
            // SAFETY: launch contract.
            unsafe {
                *got.add(i as usize) = r.unwrap_or(0);
                *codes.add(i as usize) = WaitError::result_code(r.map(|_| ()));
            }
            i += step;
        }
        if t == 0 {
            // SAFETY: launch contract.
            let r = unsafe {
                ll::load(
                    lines.add(n as usize),
                    epoch,
                    core::ptr::null(),
                    short_timeout_ns,
                )
            };
            // SAFETY: launch contract.
            unsafe { *codes.add(n as usize) = WaitError::result_code(r.map(|_| ())) };
        }
    }
}

// ---------------------------------------------------------------------------------------
// barrier: LSA barrier sessions.

/// Each block runs `rounds` timed `sync(AcqRel)` rounds on barrier `block_idx` of `comm`
/// (typically a team of one) with a block-wide coop, then finishes. `out[block]` = the
/// first non-zero result code (0 if all succeeded), `out[blocks + block]` = the final epoch.
///
/// # Safety
/// `comm` is a valid communicator with at least `grid_dim.x` LSA barriers; `out` holds
/// 2 × blocks u32.
#[kernel]
pub unsafe fn barrier_rounds(comm: DevComm, out: *mut u32, rounds: u32, timeout_ns: u64) {
    let cta = Cta::new();
    let b = block_idx().x;
    // SAFETY: launch contract.
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    let mut code = 0;
    for _ in 0..rounds {
        let r = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
        if code == 0 {
            code = WaitError::result_code(r);
        }
    }
    let epoch = bar.epoch();
    bar.finish(&cta);
    if thread_idx().x == 0 {
        // SAFETY: launch contract.
        unsafe {
            *out.add(b as usize) = code;
            *out.add((grid_dim().x + b) as usize) = epoch;
        }
    }
}

/// Words per block written by [`barrier_pair`].
pub const BARRIER_PAIR_WORDS: usize = 4;

/// Two "ranks" in one launch: block `b` (b = 0, 1) plays LSA rank `b` of a 2-rank team whose
/// resource window is the flat VA described by `comm` (two mapped slots). Per round `r`:
/// thread `t` writes `payload(b, r, t)` into the **peer's** data area (at byte `data_offset`
/// of the peer's slot, `u32` index `t`), then `sync_timeout(AcqRel)`; after the barrier it
/// checks its **own** data area holds `payload(1 - b, r, t)`. Coop: the given `coop_kind`
/// (0 = Cta, 1 = Warp with warp 0 only). Per block 4 words at `out[4 b ..]`: first non-zero
/// result code, number of payload mismatches, final epoch, rounds completed.
///
/// # Safety
/// `comm` describes the 2-slot flat VA with LSA barriers (one) and `data_offset` leaves room
/// for `block_dim.x` u32 per slot; two blocks; `out` holds 8 u32.
#[kernel]
pub unsafe fn barrier_pair(
    comm: DevComm,
    out: *mut u32,
    rounds: u32,
    data_offset: u64,
    timeout_ns: u64,
    coop_kind: u32,
) {
    let b = block_idx().x as i32;
    let mut c = comm;
    c.lsa_rank = b;
    c.rank = b;
    if coop_kind == 1 {
        if arch::warp_idx() == 0 {
            let w = Warp::new();
            // SAFETY: launch contract.
            unsafe { pair_rounds(&w, &c, out, rounds, data_offset, timeout_ns) };
        }
    } else {
        // SAFETY: launch contract.
        unsafe { pair_rounds(&Cta::new(), &c, out, rounds, data_offset, timeout_ns) };
    }
}

#[inline(always)]
fn payload(rank: i32, round: u32, t: u32) -> u32 {
    (rank as u32) << 28 ^ round << 12 ^ t ^ 0x0a5a_0000
}

#[inline(always)]
unsafe fn pair_rounds<C: Coop>(
    coop: &C,
    c: &DevComm,
    out: *mut u32,
    rounds: u32,
    data_offset: u64,
    timeout_ns: u64,
) {
    let me = c.lsa_rank;
    let peer = 1 - me;
    let t = coop.thread_rank();
    let mine = c
        .resource_lsa_ptr(0, me)
        .wrapping_add(data_offset as usize)
        .cast::<u32>();
    let theirs = c
        .resource_lsa_ptr(0, peer)
        .wrapping_add(data_offset as usize)
        .cast::<u32>();
    // SAFETY: launch contract.
    let mut bar = unsafe {
        LsaBarrier::with_team(
            coop,
            c,
            c.lsa_team(),
            c.lsa_barrier,
            0,
            BarrierMode::Unicast,
        )
    };
    let mut code = 0;
    let mut bad = 0u32;
    let mut done = 0;
    for r in 0..rounds {
        // SAFETY: launch contract: slot t of the peer's data area.
        unsafe {
            mem::store(
                theirs.wrapping_add(t as usize),
                payload(me, r, t),
                StoreOrder::Weak,
                Scope::Sys,
            )
        };
        let res = bar.sync_timeout(coop, Ordering::AcqRel, timeout_ns);
        if res.is_err() {
            code = WaitError::result_code(res);
            break;
        }
        // SAFETY: launch contract.
        let seen = unsafe { mem::load(mine.wrapping_add(t as usize), LoadOrder::Weak, Scope::Sys) };
        bad += u32::from(seen != payload(peer, r, t));
        // Nobody overwrites our data area before we have read it.
        let res = bar.sync_timeout(coop, Ordering::Release, timeout_ns);
        if res.is_err() {
            code = WaitError::result_code(res);
            break;
        }
        done += 1;
    }
    let epoch = bar.epoch();
    bar.finish(coop);
    let bad_total = coop_count(coop, bad);
    if coop.is_leader() {
        // SAFETY: launch contract.
        unsafe {
            let o = out.add(BARRIER_PAIR_WORDS * me as usize);
            *o = code;
            *o.add(1) = bad_total;
            *o.add(2) = epoch;
            *o.add(3) = done;
        }
    }
}

/// Non-zero if any member of the coop saw a mismatch (a count would need shared memory).
#[inline(always)]
fn coop_count<C: Coop>(coop: &C, bad: u32) -> u32 {
    u32::from(coop.any(bad != 0))
}

/// A barrier whose peer never arrives: one block, LSA team of `comm` (size 2, nobody plays
/// rank 1), one `sync_timeout(Acquire)` with `timeout_ns`. `out[0]` = result code (expected 1
/// = timeout, or 2 = aborted when `comm.abort_flag` points to a raised flag), `out[1..3]` =
/// elapsed `%globaltimer` nanoseconds (lo, hi). The session is finished either way.
///
/// # Safety
/// `comm` valid with one LSA barrier; `out` holds 3 u32.
#[kernel]
pub unsafe fn barrier_lonely(comm: DevComm, out: *mut u32, timeout_ns: u64) {
    let cta = Cta::new();
    let t0 = arch::globaltimer();
    // SAFETY: launch contract.
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, 0) };
    let r = bar.sync_timeout(&cta, Ordering::Acquire, timeout_ns);
    bar.finish(&cta);
    let dt = arch::globaltimer() - t0;
    if thread_idx().x == 0 {
        // SAFETY: launch contract.
        unsafe {
            *out = WaitError::result_code(r);
            *out.add(1) = dt as u32;
            *out.add(2) = (dt >> 32) as u32;
        }
    }
}

// ---------------------------------------------------------------------------------------
// multimem: LOAD-ONLY (never launched on the test node).

/// Load-only: every multimem instruction once on multicast address `mc` (16-byte aligned),
/// results to `out`.
///
/// # Safety
/// Never launch without a bound multicast object; `mc` and `out` hold 64 bytes.
#[kernel]
pub unsafe fn multimem_ops(mc: *mut U32x4, out: *mut U32x4) {
    let p = mc.cast::<u8>();
    // SAFETY: load-only kernel (see the docs).
    unsafe {
        let v4 = multimem::ld_reduce_add_v4_bf16x2(mc);
        let h4 = multimem::ld_reduce_add_v4_f16x2(mc);
        let f4 = multimem::ld_reduce_add_v4_f32(mc.cast());
        let s = [
            multimem::ld_reduce_add_bf16x2(p.cast()),
            multimem::ld_reduce_add_f16x2(p.cast()),
            multimem::ld_reduce_add_f32(p.cast()).to_bits(),
            multimem::ld_reduce_add_u32(p.cast()),
        ];
        let s2 = multimem::ld_reduce_add_s32(p.cast());
        let d = multimem::ld_reduce_add_f64(p.cast());
        let u = multimem::ld_reduce_add_u64(p.cast());
        // Minimum and maximum: the 16-bit floats (scalar and `.v4`) and the integers.
        let lo4 = multimem::ld_reduce_min_v4_bf16x2(mc);
        let hi4 = multimem::ld_reduce_max_v4_f16x2(mc);
        let m = multimem::ld_reduce_min_bf16x2(p.cast())
            ^ multimem::ld_reduce_max_bf16x2(p.cast())
            ^ multimem::ld_reduce_min_f16x2(p.cast())
            ^ multimem::ld_reduce_max_f16x2(p.cast())
            ^ multimem::ld_reduce_min_u32(p.cast())
            ^ multimem::ld_reduce_max_u32(p.cast())
            ^ multimem::ld_reduce_min_s32(p.cast()) as u32
            ^ multimem::ld_reduce_max_s32(p.cast()) as u32;
        let m64 = multimem::ld_reduce_min_u64(p.cast())
            ^ multimem::ld_reduce_max_u64(p.cast())
            ^ multimem::ld_reduce_min_s64(p.cast()) as u64
            ^ multimem::ld_reduce_max_s64(p.cast()) as u64;
        *out = U32x4(core::array::from_fn(|i| v4.0[i] ^ lo4.0[i]));
        *out.add(1) = U32x4(core::array::from_fn(|i| h4.0[i] ^ hi4.0[i]));
        *out.add(2) = U32x4::from(f4);
        *out.add(3) = U32x4([
            s[0] ^ s[1],
            s[2] ^ s[3] ^ m,
            s2 as u32,
            (d.to_bits() ^ u ^ m64) as u32,
        ]);
        multimem::st_v4_f32(mc.cast(), f4);
        multimem::st_v4_bf16x2(mc.add(1), v4);
        multimem::st_v4_f16x2(mc.add(2), h4);
        multimem::st_f32(p.cast(), 1.0);
        multimem::st_f16x2(p.cast(), s[0]);
        multimem::st_bf16x2(p.cast(), s[1]);
        multimem::st_f64(p.cast(), d);
        multimem::st_u32(p.cast(), s[3]);
        multimem::st_s32(p.cast(), s2);
        multimem::st_u64(p.cast(), u);
        multimem::red_add_u32(p.cast(), 1, Ordering::Release);
        multimem::red_add_u32(p.cast(), 1, Ordering::Relaxed);
        multimem::red_add_s32(p.cast(), -1, Ordering::Release);
        multimem::red_add_u64(p.cast(), 1, Ordering::Release);
        multimem::red_add_f32(p.cast(), 1.0, Ordering::Relaxed);
        multimem::red_add_f64(p.cast(), 1.0, Ordering::Relaxed);
        multimem::red_add_f16x2(p.cast(), s[0], Ordering::Relaxed);
        multimem::red_add_bf16x2(p.cast(), s[1], Ordering::Release);
        multimem::red_add_v4_f32(mc.cast(), f4, Ordering::Release);
        multimem::red_add_v4_f16x2(mc, h4, Ordering::Relaxed);
        multimem::red_add_v4_bf16x2(mc, v4, Ordering::Relaxed);
    }
}

// ANCHOR: barrier_multimem
/// Load-only: a multimem LSA barrier session (`multimem.red.release.sys.global.add.u32` on
/// arrive with a release order), one timed `sync(Release)` and one `sync(Acquire)`.
/// `out[0]` = result codes OR-ed.
///
/// # Safety
/// Never launch without a bound multicast object and LSA barriers.
#[kernel]
pub unsafe fn barrier_multimem(comm: DevComm, out: *mut u32, timeout_ns: u64) {
    let cta = Cta::new();
    // SAFETY: load-only kernel.
    let mut bar = unsafe { LsaBarrier::new_multimem(&cta, &comm, block_idx().x) };
    let a = bar.sync_timeout(&cta, Ordering::Release, timeout_ns);
    let b = bar.sync_timeout(&cta, Ordering::Acquire, timeout_ns);
    bar.finish(&cta);
    if thread_idx().x == 0 {
        // SAFETY: load-only kernel.
        unsafe { *out = WaitError::result_code(a) | WaitError::result_code(b) };
    }
}
// ANCHOR_END: barrier_multimem

/// The kernels on the host backend (one block of one thread): the logic of the barrier,
/// LL and pointer kernels, including the timeout and abort paths.
#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use symcomm_device::comm::{LsaBarrierHandle, ResourceWindow};

    fn comm_with_resource(buf: &mut [u32], n_ranks: i32, n_barriers: i32) -> DevComm {
        let mut c = DevComm::new(0, n_ranks, 0, n_ranks);
        c.resource = ResourceWindow {
            lsa_flat_base: buf.as_mut_ptr() as u64,
            stride4g: 0,
            mc_offset4k: 0,
        };
        c.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers,
        };
        c
    }

    // ANCHOR: team_of_one
    #[test]
    fn a_team_of_one_passes_every_round_and_persists_the_epoch() {
        let mut buf = vec![0u32; 16];
        let comm = comm_with_resource(&mut buf, 1, 2);
        let mut out = [u32::MAX; 2];
        for launch in 1..=3 {
            // SAFETY: outside an emulated launch this is one block; `comm` has 2 LSA barriers
            // in `buf` (alive for the test) and `out` holds 2 u32.
            unsafe { barrier_rounds(comm, out.as_mut_ptr(), 4, 1_000_000_000) };
            assert_eq!(out, [0, 4 * launch]);
        }
        assert_eq!(buf[2], 12); // unicast epoch of barrier 0: word n + 0
    }
    // ANCHOR_END: team_of_one

    #[test]
    fn a_missing_peer_times_out_and_an_abort_flag_ends_the_wait() {
        let mut buf = vec![0u32; 16];
        let mut comm = comm_with_resource(&mut buf, 2, 1);
        let mut out = [u32::MAX; 3];
        // SAFETY: `comm` has one LSA barrier in `buf` (alive for the test); `out` holds 3 u32.
        unsafe { barrier_lonely(comm, out.as_mut_ptr(), 20_000_000) };
        assert_eq!(out[0], 1, "timeout code");
        let dt = u64::from(out[1]) | (u64::from(out[2]) << 32);
        assert!(dt >= 20_000_000, "waited {dt} ns");
        // Our arrival landed in the peer's inbox (same memory: stride 0): word 3n + 0*2 + 0.
        assert_eq!(buf[3], 1);
        let flag = 1u32;
        comm.abort_flag = &raw const flag as u64;
        // SAFETY: as above; the abort flag is `flag`, alive until the call returns.
        unsafe { barrier_lonely(comm, out.as_mut_ptr(), 10_000_000_000) };
        assert_eq!(out[0], 2, "aborted code");
    }

    #[test]
    fn window_math_matches_the_flat_va_model_on_the_host() {
        let mut target = vec![0f32; 64];
        let base = symcomm_device::window::add4g(target.as_mut_ptr() as u64, 2u32.wrapping_neg());
        let w = Window {
            lsa_flat_base: base,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            mc_offset4k: 9,
            ..Window::default()
        };
        let mut comm = DevComm::new(5, 8, 1, 4);
        comm.lsa_multimem.mc_base = 0x7000_0000_0000;
        let sym: SymPtr<f32> = SymPtr::new(&raw const w, 16);
        let mut out = [0u64; WINDOW_MATH_WORDS];
        // SAFETY: `w` is a descriptor whose local copy is `target` (alive, writable, large
        // enough for the offsets the kernel writes); `out` holds WINDOW_MATH_WORDS u64.
        unsafe { window_math(&raw const w, comm, sym, out.as_mut_ptr()) };
        let t = target.as_ptr() as u64;
        assert_eq!(out[0], t);
        assert_eq!(out[11], t + 16);
        assert_eq!(out[7], 0);
        assert_eq!(out[8], 0);
        assert_eq!(out[10], 0x7000_0000_0000 + 9 * 4096 + 64);
        assert_eq!(out[17], 9);
        assert_eq!(target[4], 1.0); // thread 0 wrote element 0 of `sym` (byte 16)
    }

    #[test]
    fn team_probe_reports_the_comm() {
        let v = team_probe_values(&DevComm::new(5, 8, 1, 4));
        assert_eq!(&v[..3], &[8, 5, 1]);
        assert_eq!(&v[7..10], &[4, 1, 1]);
        assert_eq!(&v[14..17], &[2, 1, 4]);
        let mut out = [0i32; TEAM_PROBE_WORDS];
        // SAFETY: `out` holds TEAM_PROBE_WORDS (64) i32.
        unsafe { team_probe(DevComm::new(5, 8, 1, 4), out.as_mut_ptr()) };
        assert_eq!(out, v);
    }
}
