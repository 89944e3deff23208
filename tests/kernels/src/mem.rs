//! `mem`: ordered atomics with exact counts, message passing through fences and
//! release/acquire accesses, 16-byte vector accesses and constant loads.

use symcomm_device::mem::{
    self, F32x4, U32x4, U64x2, atomic_add, atomic_cas, atomic_exch, red_add,
};
use symcomm_device::prelude::*;
use symcomm_device::wait::Spin;

use crate::geometry::gid;

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
/// copies the window descriptor of `win` with `load_const::<Window>` and `load_const_word`
/// into `win_out` (as 9 u64: the 72 bytes).
///
/// # Safety
/// `src`/`out` hold `n` vectors; `win` names a descriptor in global memory; `win_out` 72
/// bytes.
#[kernel]
pub unsafe fn load_const_copy(
    src: *const U32x4,
    out: *mut U32x4,
    n: u64,
    win: WindowHandle,
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
        // SAFETY: launch contract (`win` names a descriptor in global memory).
        let w: Window = unsafe { mem::load_const(win.as_ptr()) };
        // SAFETY: as above.
        let rank: i32 = unsafe { mem::load_const_word(&raw const (*win.as_ptr()).world_rank) };
        let words = [
            w.win_host,
            w.lsa_flat_base,
            (w.lsa_rank as u32 as u64) | ((rank as u32 as u64) << 32),
            u64::from(w.stride4g) | (u64::from(w.mc_offset4k) << 32),
            u64::from(w.gin_offset4k) | (u64::from(w.lsa_size) << 32),
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

/// Predicated stores: thread `i < n` stores the low `W = 1 << (i % 4)` bytes of `src[i]` at
/// byte `W × ((i / 4) % (16 / W))` of its 16-byte slot of `out` (`out[16 i..16 i + 16]`)
/// with `mem::store_low_if`, when `i % 3 != 0`; the slot's other bytes stay as they were.
///
/// # Safety
/// `src` holds `n` values; `out` `16 n` bytes, 16-byte aligned.
#[kernel]
pub unsafe fn store_low_if_slots(src: *const u64, out: *mut u8, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        let w = 1usize << (i % 4);
        let at = 16 * i + w * ((i / 4) % (16 / w));
        let want = !i.is_multiple_of(3);
        // SAFETY: i < n: inside slot i, `w`-aligned; only this thread writes its slot.
        unsafe {
            let (v, p) = (*src.add(i), out.add(at));
            match w {
                1 => mem::store_low_if::<1>(p, v, want),
                2 => mem::store_low_if::<2>(p, v, want),
                4 => mem::store_low_if::<4>(p, v, want),
                _ => mem::store_low_if::<8>(p, v, want),
            }
        }
        i += stride;
    }
}
