//! Multimem (NVLink SHARP) accesses: one instruction on a **multicast address** reaches the
//! copies of every GPU bound to the multicast object.
//!
//! - `ld_reduce_{add,min,max}_*`: loads the value at the address from every bound GPU and
//!   returns their sum (16-bit floats accumulated in `f32` by the switch, `.acc::f32`),
//!   minimum or maximum (lane by lane for packed 16-bit floats; NaN inputs as the PTX ISA
//!   specifies for the switch). PTX has `min`/`max` for the 16-bit floats and the integers,
//!   not for `f32`/`f64`;
//! - `st_*`: stores the value into every bound GPU's copy;
//! - `red_add_*`: adds the value into every bound GPU's copy.
//!
//! `ld_reduce` and `st` are `.relaxed.sys` (bracket them with barriers, as every multimem
//! algorithm does); `red_add` takes an [`Ordering`] whose release half selects
//! `.release.sys` (used for barrier arrival). Vector forms move 16 bytes (`.v4`) where PTX has
//! them (f32, f16x2, bf16x2); f64 and integers are scalar only. Packed 16-bit types are
//! passed as their bits (`u32` = two lanes, low lane first; [`U32x4`] = eight lanes).
//!
//! Requirements: sm_90 or later, PTX ISA 8.1+, and a multicast object bound to the memory.
//! Addresses must be multicast addresses (e.g. [`SymPtr::multimem`](crate::ptr::SymPtr)),
//! naturally aligned (16 bytes for vector forms).
//!
//! On the host (CPU emulation), a multicast address that the emulated host runtime registered
//! ([`crate::emu::multicast`]) resolves to the LSA peers' copies: `ld_reduce` folds them in
//! member order (16-bit floats in `f32`, rounded once; in `min`/`max` a NaN lane gives way to
//! a number and `±0` come out either way, as `f32::min` does: not checked against the switch,
//! so results with NaN or signed zeros may differ on hardware), `st` stores to each, `red_add` adds atomically to each; loads
//! and stores are relaxed atomic words (one 8-byte word for `f64`/`u64`/`i64`, else one 4-byte
//! word per element or packed pair), as the GPU's `.relaxed.sys`. Any other address is taken
//! to be the caller's only copy (a single rank).

use crate::mem::{F32x4, Ordering, U32x4};

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(target_arch = "nvptx64")]
mod nvptx;

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

macro_rules! doc_ld_reduce {
    ($($name:ident, $t:ty, $what:literal, $ptx:literal;)*) => {$(
        #[doc = concat!($what, " over every bound GPU of the value at `p` ",
            "(`multimem.ld_reduce.relaxed.sys.global.", $ptx, "`).")]
        ///
        /// # Safety
        /// - `p` is a naturally aligned multicast address of bound memory, readable on every
        ///   bound GPU; sm_90+.
        ///
        /// # Ordering
        /// Relaxed at system scope.
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            // SAFETY: forwarded.
            unsafe { backend::$name(p) }
        }
    )*};
}

macro_rules! doc_st {
    ($(#[$m:meta])* $name:ident, $t:ty, $ptx:literal) => {
        $(#[$m])*
        #[doc = concat!("Stores `v` into every bound GPU's copy at `p` (`", $ptx, "`).")]
        ///
        /// # Safety
        /// - `p` is a naturally aligned multicast address of bound memory; sm_90+.
        ///
        /// # Ordering
        /// Relaxed at system scope.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            // SAFETY: forwarded.
            unsafe { backend::$name(p, v) }
        }
    };
}

macro_rules! doc_red {
    ($(#[$m:meta])* $name:ident, $t:ty, $ptx:literal) => {
        $(#[$m])*
        #[doc = concat!("Adds `v` into every bound GPU's copy at `p` (`", $ptx, "`).")]
        ///
        /// # Safety
        /// - `p` is a naturally aligned multicast address of bound memory; sm_90+.
        ///
        /// # Ordering
        /// `.release.sys` when `order` has a release half (this thread's earlier writes are
        /// visible to whoever acquires the result), else `.relaxed.sys`.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t, order: Ordering) {
            // SAFETY: forwarded.
            unsafe { backend::$name(p, v, order) }
        }
    };
}

doc_ld_reduce! {
    ld_reduce_add_f32, f32, "Sum", "add.f32";
    ld_reduce_add_v4_f32, F32x4, "Sum", "add.v4.f32";
    ld_reduce_add_f16x2, u32, "Sum", "add.acc::f32.f16x2";
    ld_reduce_add_v4_f16x2, U32x4, "Sum", "add.acc::f32.v4.f16x2";
    ld_reduce_add_bf16x2, u32, "Sum", "add.acc::f32.bf16x2";
    ld_reduce_add_v4_bf16x2, U32x4, "Sum", "add.acc::f32.v4.bf16x2";
    ld_reduce_add_f64, f64, "Sum", "add.f64";
    ld_reduce_add_u32, u32, "Sum (wrapping)", "add.u32";
    ld_reduce_add_s32, i32, "Sum (wrapping)", "add.s32";
    ld_reduce_add_u64, u64, "Sum (wrapping)", "add.u64";
    ld_reduce_min_f16x2, u32, "Lane-wise minimum", "min.f16x2";
    ld_reduce_min_v4_f16x2, U32x4, "Lane-wise minimum", "min.v4.f16x2";
    ld_reduce_min_bf16x2, u32, "Lane-wise minimum", "min.bf16x2";
    ld_reduce_min_v4_bf16x2, U32x4, "Lane-wise minimum", "min.v4.bf16x2";
    ld_reduce_min_u32, u32, "Minimum", "min.u32";
    ld_reduce_min_s32, i32, "Minimum", "min.s32";
    ld_reduce_min_u64, u64, "Minimum", "min.u64";
    ld_reduce_min_s64, i64, "Minimum", "min.s64";
    ld_reduce_max_f16x2, u32, "Lane-wise maximum", "max.f16x2";
    ld_reduce_max_v4_f16x2, U32x4, "Lane-wise maximum", "max.v4.f16x2";
    ld_reduce_max_bf16x2, u32, "Lane-wise maximum", "max.bf16x2";
    ld_reduce_max_v4_bf16x2, U32x4, "Lane-wise maximum", "max.v4.bf16x2";
    ld_reduce_max_u32, u32, "Maximum", "max.u32";
    ld_reduce_max_s32, i32, "Maximum", "max.s32";
    ld_reduce_max_u64, u64, "Maximum", "max.u64";
    ld_reduce_max_s64, i64, "Maximum", "max.s64";
}

doc_st!(st_f32, f32, "multimem.st.relaxed.sys.global.f32");
doc_st!(st_v4_f32, F32x4, "multimem.st.relaxed.sys.global.v4.f32");
doc_st!(st_f16x2, u32, "multimem.st.relaxed.sys.global.f16x2");
doc_st!(
    st_v4_f16x2,
    U32x4,
    "multimem.st.relaxed.sys.global.v4.f16x2"
);
doc_st!(st_bf16x2, u32, "multimem.st.relaxed.sys.global.bf16x2");
doc_st!(
    st_v4_bf16x2,
    U32x4,
    "multimem.st.relaxed.sys.global.v4.bf16x2"
);
doc_st!(st_f64, f64, "multimem.st.relaxed.sys.global.f64");
doc_st!(st_u32, u32, "multimem.st.relaxed.sys.global.u32");
doc_st!(st_s32, i32, "multimem.st.relaxed.sys.global.s32");
doc_st!(st_u64, u64, "multimem.st.relaxed.sys.global.u64");

doc_red!(red_add_f32, f32, "multimem.red.<order>.sys.global.add.f32");
doc_red!(
    red_add_v4_f32,
    F32x4,
    "multimem.red.<order>.sys.global.add.v4.f32"
);
doc_red!(
    red_add_f16x2,
    u32,
    "multimem.red.<order>.sys.global.add.f16x2"
);
doc_red!(
    red_add_v4_f16x2,
    U32x4,
    "multimem.red.<order>.sys.global.add.v4.f16x2"
);
doc_red!(
    red_add_bf16x2,
    u32,
    "multimem.red.<order>.sys.global.add.bf16x2"
);
doc_red!(
    red_add_v4_bf16x2,
    U32x4,
    "multimem.red.<order>.sys.global.add.v4.bf16x2"
);
doc_red!(red_add_f64, f64, "multimem.red.<order>.sys.global.add.f64");
doc_red!(
    #[doc(alias = "multimem.red.release.sys.global.add.u32")]
    red_add_u32,
    u32,
    "multimem.red.<order>.sys.global.add.u32"
);
doc_red!(red_add_s32, i32, "multimem.red.<order>.sys.global.add.s32");
doc_red!(red_add_u64, u64, "multimem.red.<order>.sys.global.add.u64");

#[cfg(test)]
mod tests;
