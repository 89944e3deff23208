//! `multimem`: LOAD-ONLY kernels (never launched on the test node): every multimem instruction
//! once, and a multimem LSA barrier session. Their PTX is checked and loaded, not run.

use symcomm_device::mem::U32x4;
use symcomm_device::multimem;
use symcomm_device::prelude::*;

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
