//! All-reduce through NVLink SHARP (multimem): the switch reduces. Compiled, assembled and
//! module-loaded, but **never run on the shared test node** (multicast objects can take its
//! GPUs out of service); the host API does not select them, and the runtime refuses multicast
//! unless `SYMCOMM_NVLS=1`.
//!
//! - one-shot: every rank `ld_reduce`s the whole buffer from the multicast address and stores
//!   the sum locally (entry barrier: inputs ready; exit barrier: inputs may be reused);
//! - two-shot: rank `r` `ld_reduce`s its slice and `multimem.st`s the sum to every rank at
//!   once (entry barrier; exit barrier publishes the stores).
//!
//! Only sums (the switch adds) of f32, bf16 and f16 (fp32 accumulation in the switch for the
//! 16-bit types).

use symcomm_device::comm::DevComm;
use symcomm_device::mem::{F32x4, Ordering, U32x4};
use symcomm_device::multimem;
use symcomm_device::ptr::SymPtr;

use crate::common::{bracketed, grid_stride, local_addr, pack_off, st};
use crate::plan;

/// A 16-byte lane format the switch can reduce.
pub trait McPack {
    /// Sum over every bound GPU of the pack at multicast address `p`.
    ///
    /// # Safety
    /// `p` is a 16-byte aligned multicast address of bound memory; sm_90+.
    unsafe fn ld_reduce(p: u64) -> U32x4;
    /// Stores `v` into every bound GPU's copy at multicast address `p`.
    ///
    /// # Safety
    /// As [`ld_reduce`](Self::ld_reduce).
    unsafe fn st_all(p: u64, v: U32x4);
}

/// f32 lanes.
pub struct McF32;
/// bf16 lanes (fp32 accumulation).
pub struct McBf16;
/// f16 lanes (fp32 accumulation).
pub struct McF16;

impl McPack for McF32 {
    #[inline(always)]
    unsafe fn ld_reduce(p: u64) -> U32x4 {
        // SAFETY: forwarded.
        U32x4::from(unsafe { multimem::ld_reduce_add_v4_f32(p as *const F32x4) })
    }
    #[inline(always)]
    unsafe fn st_all(p: u64, v: U32x4) {
        // SAFETY: forwarded.
        unsafe { multimem::st_v4_f32(p as *mut F32x4, F32x4::from(v)) }
    }
}

impl McPack for McBf16 {
    #[inline(always)]
    unsafe fn ld_reduce(p: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { multimem::ld_reduce_add_v4_bf16x2(p as *const U32x4) }
    }
    #[inline(always)]
    unsafe fn st_all(p: u64, v: U32x4) {
        // SAFETY: forwarded.
        unsafe { multimem::st_v4_bf16x2(p as *mut U32x4, v) }
    }
}

impl McPack for McF16 {
    #[inline(always)]
    unsafe fn ld_reduce(p: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { multimem::ld_reduce_add_v4_f16x2(p as *const U32x4) }
    }
    #[inline(always)]
    unsafe fn st_all(p: u64, v: U32x4) {
        // SAFETY: forwarded.
        unsafe { multimem::st_v4_f16x2(p as *mut U32x4, v) }
    }
}

/// Multimem one-shot all-reduce (sum) of `packs` packs: `dst` (local) = sum of every rank's
/// `src`.
///
/// # Safety
/// `src` is a window bound to the communicator's LSA multicast object (`comm.lsa_multimem`
/// present), holding `packs × 16` bytes on every rank; `dst` holds as many locally; barriers
/// and launch shape as for the unicast kernels; sm_90 with NVLink SHARP.
#[inline(always)]
pub unsafe fn one_shot<P: McPack>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        bracketed(comm, Ordering::Release, timeout_ns, status, || {
            let mc = src.lsa_multimem(comm) as u64;
            let out = local_addr(dst);
            let (first, stride) = grid_stride();
            let mut j = first;
            while j < packs {
                let o = pack_off(j);
                st(out + o, P::ld_reduce(mc + o));
                j += stride;
            }
        })
    }
}

/// Multimem two-shot all-reduce (sum): rank `r` reduces slice `r` in the switch and stores
/// the result to every rank's `dst` through the multicast address.
///
/// # Safety
/// As [`one_shot`], with `dst` also a window bound to the multicast object.
#[inline(always)]
pub unsafe fn two_shot<P: McPack>(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        bracketed(comm, Ordering::AcqRel, timeout_ns, status, || {
            let (lo, hi) = plan::slice(packs, comm.lsa_size as u64, comm.lsa_rank as u64);
            let (smc, dmc) = (src.lsa_multimem(comm) as u64, dst.lsa_multimem(comm) as u64);
            let (first, stride) = grid_stride();
            let mut j = lo + first;
            while j < hi {
                let o = pack_off(j);
                P::st_all(dmc + o, P::ld_reduce(smc + o));
                j += stride;
            }
        })
    }
}
