//! Kernels of the multi-GPU symmetric-memory checks (`tests/src/bin/gpu_symmem.rs`): barrier
//! round trips that publish data through a registered window, and a barrier nobody completes.

use symcomm_device::mem;
use symcomm_device::prelude::*;

/// What rank `rank`'s thread `t` of block `b` publishes at barrier epoch `epoch`.
pub const fn stress_value(rank: u32, b: u32, t: u32, epoch: u32) -> u32 {
    (rank.wrapping_mul(0x0100_0193) ^ b.wrapping_mul(0x9e37_79b1) ^ t.wrapping_mul(0x85eb_ca77))
        .wrapping_add(epoch.wrapping_mul(0xc2b2_ae3d))
}

/// Words of `out` written by [`barrier_stress`]: mismatches, sum of result codes (0 = every
/// wait succeeded), completed rounds (summed over blocks).
pub const STRESS_OUT_WORDS: usize = 3;

// ANCHOR: barrier_stress
/// `iters` rounds per block of: write a value that depends on (rank, block, thread, epoch) into
/// the own window copy (double-buffered by epoch parity), `sync(AcqRel)` the LSA team, read every
/// peer's value for the same (block, thread) and compare. Epochs come from device memory, so
/// graph replays publish fresh values.
///
/// Window layout per rank: `2 × grid × block` u32. `out[0] += mismatches`, `out[1] += result
/// code` (per thread whose wait failed), `out[2] += completed rounds` (one add per block).
///
/// # Safety
/// - `comm` has at least `grid_dim.x` LSA barriers; `win` is a window of at least
///   `2 × grid × block × 4` bytes; `out` holds [`STRESS_OUT_WORDS`] u32 of this device;
/// - every LSA rank launches it with the same shape and `iters`.
#[kernel]
pub unsafe fn barrier_stress(
    comm: DevComm,
    win: WindowHandle,
    iters: u32,
    timeout_ns: u64,
    out: *mut u32,
) {
    let cta = Cta::new();
    let (b, t) = (block_idx().x, thread_idx().x);
    let (nb, nt) = (grid_dim().x as usize, block_dim().x as usize);
    // SAFETY: one session per block index on every LSA rank (launch contract).
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    let first_world = comm.rank - comm.lsa_rank;
    let (mut bad, mut code, mut done) = (0u32, 0u32, 0u32);
    // ANCHOR: stress_loop
    for _ in 0..iters {
        let epoch = bar.epoch();
        let idx = ((epoch as usize & 1) * nb + b as usize) * nt + t as usize;
        // SAFETY: idx < 2 × grid × block, inside the window.
        unsafe {
            win.get()
                .local_ptr(idx * 4)
                .cast::<u32>()
                .write(stress_value(comm.rank as u32, b, t, epoch))
        };
        let res = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
        if res.is_err() {
            code = WaitError::result_code(res);
            break;
        }
        for p in 0..comm.lsa_size {
            if p == comm.lsa_rank {
                continue;
            }
            // SAFETY: same index in peer p's copy; published before its release arrive.
            let seen = unsafe { win.get().lsa_ptr(idx * 4, p).cast::<u32>().read() };
            bad += u32::from(seen != stress_value((first_world + p) as u32, b, t, epoch));
        }
        done += 1;
    }
    bar.finish(&cta);
    // ANCHOR_END: stress_loop
    // SAFETY: `out` holds STRESS_OUT_WORDS u32 (launch contract).
    unsafe {
        if bad != 0 {
            mem::red_add(out, bad, Ordering::Relaxed, Scope::Gpu);
        }
        if code != 0 {
            mem::red_add(out.add(1), code, Ordering::Relaxed, Scope::Gpu);
        }
        if t == 0 {
            mem::red_add(out.add(2), done, Ordering::Relaxed, Scope::Gpu);
        }
    }
}
// ANCHOR_END: barrier_stress

/// One barrier on index 0 that this rank joins but (by the test's design) one LSA peer never
/// does: `out[0]` = the result code of `sync_timeout(Acquire, timeout_ns)` (expected 1 =
/// timeout), `out[1]` = 1 once the kernel got past the wait.
///
/// # Safety
/// `comm` has at least one LSA barrier; `out` holds 2 u32 of this device.
#[kernel]
pub unsafe fn barrier_timeout_probe(comm: DevComm, timeout_ns: u64, out: *mut u32) {
    let cta = Cta::new();
    // SAFETY: barrier 0 exists (launch contract).
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, 0) };
    let res = bar.sync_timeout(&cta, Ordering::Acquire, timeout_ns);
    bar.finish(&cta);
    if cta.is_leader() {
        // SAFETY: `out` holds 2 u32.
        unsafe {
            *out = WaitError::result_code(res);
            *out.add(1) = 1;
        }
    }
}
