//! The GPU backend: every multimem instruction of the crate.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `multimem` that calls it, documented in `multimem/mod.rs`.

use crate::mem::{F32x4, Ordering, U32x4};
use core::arch::asm;

macro_rules! ld_reduce1 {
    ($name:ident, $t:ty, $cls:ident, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            let v: $t;
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                asm!(concat!("multimem.ld_reduce.relaxed.sys.global.", $ty, " {v}, [{p}];"),
                     v = out($cls) v, p = in(reg64) p, options(nostack))
            };
            v
        }
    };
}

macro_rules! ld_reduce4 {
    ($name:ident, $t:ident, $e:ty, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            let (a, b, c, d): ($e, $e, $e, $e);
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                asm!(concat!("multimem.ld_reduce.relaxed.sys.global.", $ty,
                             " {{{a}, {b}, {c}, {d}}}, [{p}];"),
                     a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
                     p = in(reg64) p, options(nostack))
            };
            $t([a, b, c, d])
        }
    };
}

macro_rules! st1 {
    ($name:ident, $t:ty, $cls:ident, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                asm!(concat!("multimem.st.relaxed.sys.global.", $ty, " [{p}], {v};"),
                     p = in(reg64) p, v = in($cls) v, options(nostack))
            }
        }
    };
}

macro_rules! st4 {
    ($name:ident, $t:ident, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            let [a, b, c, d] = v.0;
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                asm!(concat!("multimem.st.relaxed.sys.global.", $ty,
                             " [{p}], {{{a}, {b}, {c}, {d}}};"),
                     p = in(reg64) p, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
                     d = in(reg32) d, options(nostack))
            }
        }
    };
}

macro_rules! red1 {
    ($name:ident, $t:ty, $cls:ident, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t, order: Ordering) {
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                if order.has_release() {
                    asm!(concat!("multimem.red.release.sys.global.add.", $ty, " [{p}], {v};"),
                         p = in(reg64) p, v = in($cls) v, options(nostack))
                } else {
                    asm!(concat!("multimem.red.relaxed.sys.global.add.", $ty, " [{p}], {v};"),
                         p = in(reg64) p, v = in($cls) v, options(nostack))
                }
            }
        }
    };
}

macro_rules! red4 {
    ($name:ident, $t:ident, $ty:literal) => {
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t, order: Ordering) {
            let [a, b, c, d] = v.0;
            // SAFETY: the public wrapper's caller guarantees `p`.
            unsafe {
                if order.has_release() {
                    asm!(concat!("multimem.red.release.sys.global.add.", $ty,
                                 " [{p}], {{{a}, {b}, {c}, {d}}};"),
                         p = in(reg64) p, a = in(reg32) a, b = in(reg32) b,
                         c = in(reg32) c, d = in(reg32) d, options(nostack))
                } else {
                    asm!(concat!("multimem.red.relaxed.sys.global.add.", $ty,
                                 " [{p}], {{{a}, {b}, {c}, {d}}};"),
                         p = in(reg64) p, a = in(reg32) a, b = in(reg32) b,
                         c = in(reg32) c, d = in(reg32) d, options(nostack))
                }
            }
        }
    };
}

ld_reduce1!(ld_reduce_add_f32, f32, reg32, "add.f32");
ld_reduce4!(ld_reduce_add_v4_f32, F32x4, f32, "add.v4.f32");
ld_reduce1!(ld_reduce_add_f16x2, u32, reg32, "add.acc::f32.f16x2");
ld_reduce4!(ld_reduce_add_v4_f16x2, U32x4, u32, "add.acc::f32.v4.f16x2");
ld_reduce1!(ld_reduce_add_bf16x2, u32, reg32, "add.acc::f32.bf16x2");
ld_reduce4!(
    ld_reduce_add_v4_bf16x2,
    U32x4,
    u32,
    "add.acc::f32.v4.bf16x2"
);
ld_reduce1!(ld_reduce_add_f64, f64, reg64, "add.f64");
ld_reduce1!(ld_reduce_add_u32, u32, reg32, "add.u32");
ld_reduce1!(ld_reduce_add_s32, i32, reg32, "add.s32");
ld_reduce1!(ld_reduce_add_u64, u64, reg64, "add.u64");
ld_reduce1!(ld_reduce_min_f16x2, u32, reg32, "min.f16x2");
ld_reduce4!(ld_reduce_min_v4_f16x2, U32x4, u32, "min.v4.f16x2");
ld_reduce1!(ld_reduce_min_bf16x2, u32, reg32, "min.bf16x2");
ld_reduce4!(ld_reduce_min_v4_bf16x2, U32x4, u32, "min.v4.bf16x2");
ld_reduce1!(ld_reduce_min_u32, u32, reg32, "min.u32");
ld_reduce1!(ld_reduce_min_s32, i32, reg32, "min.s32");
ld_reduce1!(ld_reduce_min_u64, u64, reg64, "min.u64");
ld_reduce1!(ld_reduce_min_s64, i64, reg64, "min.s64");
ld_reduce1!(ld_reduce_max_f16x2, u32, reg32, "max.f16x2");
ld_reduce4!(ld_reduce_max_v4_f16x2, U32x4, u32, "max.v4.f16x2");
ld_reduce1!(ld_reduce_max_bf16x2, u32, reg32, "max.bf16x2");
ld_reduce4!(ld_reduce_max_v4_bf16x2, U32x4, u32, "max.v4.bf16x2");
ld_reduce1!(ld_reduce_max_u32, u32, reg32, "max.u32");
ld_reduce1!(ld_reduce_max_s32, i32, reg32, "max.s32");
ld_reduce1!(ld_reduce_max_u64, u64, reg64, "max.u64");
ld_reduce1!(ld_reduce_max_s64, i64, reg64, "max.s64");

st1!(st_f32, f32, reg32, "f32");
st4!(st_v4_f32, F32x4, "v4.f32");
st1!(st_f16x2, u32, reg32, "f16x2");
st4!(st_v4_f16x2, U32x4, "v4.f16x2");
st1!(st_bf16x2, u32, reg32, "bf16x2");
st4!(st_v4_bf16x2, U32x4, "v4.bf16x2");
st1!(st_f64, f64, reg64, "f64");
st1!(st_u32, u32, reg32, "u32");
st1!(st_s32, i32, reg32, "s32");
st1!(st_u64, u64, reg64, "u64");

red1!(red_add_f32, f32, reg32, "f32");
red4!(red_add_v4_f32, F32x4, "v4.f32");
red1!(red_add_f16x2, u32, reg32, "f16x2");
red4!(red_add_v4_f16x2, U32x4, "v4.f16x2");
red1!(red_add_bf16x2, u32, reg32, "bf16x2");
red4!(red_add_v4_bf16x2, U32x4, "v4.bf16x2");
red1!(red_add_f64, f64, reg64, "f64");
red1!(red_add_u32, u32, reg32, "u32");
red1!(red_add_s32, i32, reg32, "s32");
red1!(red_add_u64, u64, reg64, "u64");
