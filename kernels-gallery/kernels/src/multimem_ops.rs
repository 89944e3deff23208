//! All-reduce through NVLink SHARP (multimem): the switch reduces. Compiled, assembled and
//! module-loaded, but **never run on the shared test node** (multicast objects can take its
//! GPUs out of service). The host API runs them only when forced (`SYMCOMM_ALGO`) with the
//! multicast range asked for (`SYMCOMM_NVLS=1`, without which the runtime refuses multicast),
//! never by size.
//!
//! - one-shot: every rank `ld_reduce`s the whole buffer from the multicast address and stores
//!   the result locally (entry barrier: inputs ready; exit barrier: inputs may be reused);
//!   out of place only, on every rank;
//! - two-shot: rank `r` `ld_reduce`s its slice and `multimem.st`s the sum to every rank at
//!   once (entry barrier; exit barrier publishes the stores).
//!
//! What the switch can reduce: sums of f32, bf16, f16 (fp32 accumulation in the switch for the
//! 16-bit types) and i32 (wrapping); minimum and maximum of bf16, f16 and i32 (PTX has no f32
//! `min`/`max` for multimem).

use symcomm_device::comm::DevComm;
use symcomm_device::mem::{F32x4, U32x4};
use symcomm_device::multimem;

use crate::common::{Io, grid_stride, local_addr, pack_off, st};
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

/// f32 lanes, sum.
pub struct McF32;
/// bf16 lanes, sum (fp32 accumulation).
pub struct McBf16;
/// f16 lanes, sum (fp32 accumulation).
pub struct McF16;
/// bf16 lanes, minimum.
pub struct McBf16Min;
/// bf16 lanes, maximum.
pub struct McBf16Max;
/// f16 lanes, minimum.
pub struct McF16Min;
/// f16 lanes, maximum.
pub struct McF16Max;
/// i32 lanes, wrapping sum.
pub struct McI32;
/// i32 lanes, minimum.
pub struct McI32Min;
/// i32 lanes, maximum.
pub struct McI32Max;

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

/// Packed 16-bit lanes: one `.v4` `ld_reduce` and one `.v4` store per pack.
macro_rules! mc_packed {
    ($($name:ident: $ld:ident, $st:ident;)*) => {$(
        impl McPack for $name {
            #[inline(always)]
            unsafe fn ld_reduce(p: u64) -> U32x4 {
                // SAFETY: forwarded.
                unsafe { multimem::$ld(p as *const U32x4) }
            }
            #[inline(always)]
            unsafe fn st_all(p: u64, v: U32x4) {
                // SAFETY: forwarded.
                unsafe { multimem::$st(p as *mut U32x4, v) }
            }
        }
    )*};
}
mc_packed! {
    McBf16: ld_reduce_add_v4_bf16x2, st_v4_bf16x2;
    McF16: ld_reduce_add_v4_f16x2, st_v4_f16x2;
    McBf16Min: ld_reduce_min_v4_bf16x2, st_v4_bf16x2;
    McBf16Max: ld_reduce_max_v4_bf16x2, st_v4_bf16x2;
    McF16Min: ld_reduce_min_v4_f16x2, st_v4_f16x2;
    McF16Max: ld_reduce_max_v4_f16x2, st_v4_f16x2;
}

/// i32 lanes: PTX has no vector form of the integer `ld_reduce`, so a pack takes four scalar
/// ones; the result goes out as one `.v4.f32` store, which moves the bits unchanged (a store
/// does no arithmetic).
macro_rules! mc_words {
    ($($name:ident: $ld:ident;)*) => {$(
        impl McPack for $name {
            #[inline(always)]
            unsafe fn ld_reduce(p: u64) -> U32x4 {
                // SAFETY: forwarded; word k lies inside the 16-byte pack.
                U32x4(core::array::from_fn(|k| unsafe {
                    multimem::$ld((p + 4 * k as u64) as *const i32) as u32
                }))
            }
            #[inline(always)]
            unsafe fn st_all(p: u64, v: U32x4) {
                // SAFETY: forwarded.
                unsafe { multimem::st_v4_f32(p as *mut F32x4, F32x4::from(v)) }
            }
        }
    )*};
}
mc_words! {
    McI32: ld_reduce_add_s32;
    McI32Min: ld_reduce_min_s32;
    McI32Max: ld_reduce_max_s32;
}

/// Multimem one-shot all-reduce of `bytes` (a multiple of 16: whole packs only): `dst` (local) = `P`'s reduction of every
/// rank's `src`. Barrier-bracketed (entry: inputs ready; exit `Release`: inputs may be reused).
///
/// Every rank asks the switch for every pack, and nothing says that the switch adds the
/// copies in the same order for every requester: float sums may differ in the last bits
/// between ranks (the two-shot stores one result to every rank, so its ranks agree).
///
/// # Safety
/// `src` is a window bound to the communicator's LSA multicast object (`comm.lsa_multimem`
/// present), holding `bytes` (a multiple of 16, as both offsets) on every rank; `dst` holds as many locally and is
/// apart from `src` on **every** rank (a rank writing its `src` while peers still read it
/// through the switch corrupts their results); barriers and launch shape as for the unicast
/// kernels; sm_90 with NVLink SHARP.
#[inline(always)]
pub unsafe fn one_shot<P: McPack>(comm: &DevComm, io: Io) {
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let mc = io.src.lsa_multimem(comm) as u64;
        let out = local_addr(io.dst);
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < io.bytes / plan::PACK {
            let o = pack_off(j);
            st(out + o, P::ld_reduce(mc + o));
            j += stride;
        }
    }
}

/// Multimem two-shot all-reduce: rank `r` reduces slice `r` in the switch and stores
/// the result to every rank's `dst` through the multicast address. Barrier-bracketed, exit
/// `AcqRel` (publishes the stores).
///
/// # Safety
/// As [`one_shot`], with `dst` also a window bound to the multicast object.
#[inline(always)]
pub unsafe fn two_shot<P: McPack>(comm: &DevComm, io: Io) {
    let packs = io.bytes / plan::PACK;
    let (lo, hi) = plan::slice(packs, comm.lsa_size as u64, comm.lsa_rank as u64);
    // SAFETY: forwarded (caller's contract).
    unsafe {
        let (smc, dmc) = (
            io.src.lsa_multimem(comm) as u64,
            io.dst.lsa_multimem(comm) as u64,
        );
        let (first, stride) = grid_stride();
        let mut j = lo + first;
        while j < hi {
            let o = pack_off(j);
            P::st_all(dmc + o, P::ld_reduce(smc + o));
            j += stride;
        }
    }
}
