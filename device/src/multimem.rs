//! Multimem (NVLink SHARP) accesses: one instruction on a **multicast address** reaches the
//! copies of every GPU bound to the multicast object.
//!
//! - `ld_reduce_*`: loads the value at the address from every bound GPU and returns their sum
//!   (16-bit floats accumulated in `f32` by the switch, `.acc::f32`);
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
//! On the host (one rank, no multicast) the multicast address is taken to be the caller's own
//! copy: `ld_reduce` returns the local value, `st` stores it, `red_add` adds atomically.

use crate::mem::{F32x4, Ordering, U32x4};

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

macro_rules! doc_ld_reduce {
    ($(#[$m:meta])* $name:ident, $t:ty, $ret:ty, $ptx:literal) => {
        $(#[$m])*
        #[doc = concat!("Sum over every bound GPU of the value at `p` (`", $ptx, "`).")]
        ///
        /// # Safety
        /// - `p` is a naturally aligned multicast address of bound memory, readable on every
        ///   bound GPU; sm_90+.
        ///
        /// # Ordering
        /// Relaxed at system scope.
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $ret {
            // SAFETY: forwarded.
            unsafe { backend::$name(p) }
        }
    };
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

doc_ld_reduce!(
    ld_reduce_add_f32,
    f32,
    f32,
    "multimem.ld_reduce.relaxed.sys.global.add.f32"
);
doc_ld_reduce!(
    ld_reduce_add_v4_f32,
    F32x4,
    F32x4,
    "multimem.ld_reduce.relaxed.sys.global.add.v4.f32"
);
doc_ld_reduce!(
    ld_reduce_add_f16x2,
    u32,
    u32,
    "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.f16x2"
);
doc_ld_reduce!(
    ld_reduce_add_v4_f16x2,
    U32x4,
    U32x4,
    "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2"
);
doc_ld_reduce!(
    ld_reduce_add_bf16x2,
    u32,
    u32,
    "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2"
);
doc_ld_reduce!(
    ld_reduce_add_v4_bf16x2,
    U32x4,
    U32x4,
    "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2"
);
doc_ld_reduce!(
    ld_reduce_add_f64,
    f64,
    f64,
    "multimem.ld_reduce.relaxed.sys.global.add.f64"
);
doc_ld_reduce!(
    ld_reduce_add_u32,
    u32,
    u32,
    "multimem.ld_reduce.relaxed.sys.global.add.u32"
);
doc_ld_reduce!(
    ld_reduce_add_s32,
    i32,
    i32,
    "multimem.ld_reduce.relaxed.sys.global.add.s32"
);
doc_ld_reduce!(
    ld_reduce_add_u64,
    u64,
    u64,
    "multimem.ld_reduce.relaxed.sys.global.add.u64"
);

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

/// The GPU backend: every multimem instruction of the crate.
#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use crate::mem::{F32x4, Ordering, U32x4};
    use core::arch::asm;

    macro_rules! ld_reduce1 {
        ($name:ident, $t:ty, $cls:ident, $ty:literal) => {
            #[inline(always)]
            pub unsafe fn $name(p: *const $t) -> $t {
                let v: $t;
                // SAFETY: the public wrapper's caller guarantees `p`.
                unsafe {
                    asm!(concat!("multimem.ld_reduce.relaxed.sys.global.add.", $ty, " {v}, [{p}];"),
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
                    asm!(concat!("multimem.ld_reduce.relaxed.sys.global.add.", $ty,
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

    ld_reduce1!(ld_reduce_add_f32, f32, reg32, "f32");
    ld_reduce4!(ld_reduce_add_v4_f32, F32x4, f32, "v4.f32");
    ld_reduce1!(ld_reduce_add_f16x2, u32, reg32, "acc::f32.f16x2");
    ld_reduce4!(ld_reduce_add_v4_f16x2, U32x4, u32, "acc::f32.v4.f16x2");
    ld_reduce1!(ld_reduce_add_bf16x2, u32, reg32, "acc::f32.bf16x2");
    ld_reduce4!(ld_reduce_add_v4_bf16x2, U32x4, u32, "acc::f32.v4.bf16x2");
    ld_reduce1!(ld_reduce_add_f64, f64, reg64, "f64");
    ld_reduce1!(ld_reduce_add_u32, u32, reg32, "u32");
    ld_reduce1!(ld_reduce_add_s32, i32, reg32, "s32");
    ld_reduce1!(ld_reduce_add_u64, u64, reg64, "u64");

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
}

/// The host backend: a single rank, so the multicast address is the local copy.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::mem::{F32x4, Ordering, U32x4};
    use crate::reduce::{add_bf16x2, add_f16x2};
    use core::sync::atomic::{self as a, AtomicU32, AtomicU64};

    fn ord(o: Ordering) -> a::Ordering {
        if o.has_release() {
            a::Ordering::Release
        } else {
            a::Ordering::Relaxed
        }
    }

    macro_rules! plain {
        ($($ld:ident, $st:ident, $t:ty;)*) => {$(
            pub unsafe fn $ld(p: *const $t) -> $t {
                // SAFETY: the caller guarantees a valid, aligned `p`.
                unsafe { p.read_volatile() }
            }
            pub unsafe fn $st(p: *mut $t, v: $t) {
                // SAFETY: the caller guarantees a valid, aligned `p`.
                unsafe { p.write_volatile(v) }
            }
        )*};
    }
    plain! {
        ld_reduce_add_f32, st_f32, f32;
        ld_reduce_add_v4_f32, st_v4_f32, F32x4;
        ld_reduce_add_f16x2, st_f16x2, u32;
        ld_reduce_add_v4_f16x2, st_v4_f16x2, U32x4;
        ld_reduce_add_bf16x2, st_bf16x2, u32;
        ld_reduce_add_v4_bf16x2, st_v4_bf16x2, U32x4;
        ld_reduce_add_f64, st_f64, f64;
        ld_reduce_add_u32, st_u32, u32;
        ld_reduce_add_s32, st_s32, i32;
        ld_reduce_add_u64, st_u64, u64;
    }

    /// Atomically replaces the 32-bit word at `p` by `f(old)`.
    unsafe fn update32(p: *mut u32, o: Ordering, f: impl Fn(u32) -> u32) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        let at = unsafe { AtomicU32::from_ptr(p) };
        let _ = at.fetch_update(ord(o), a::Ordering::Relaxed, |x| Some(f(x)));
    }

    pub unsafe fn red_add_f32(p: *mut f32, v: f32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { update32(p.cast(), o, |x| (f32::from_bits(x) + v).to_bits()) }
    }
    pub unsafe fn red_add_v4_f32(p: *mut F32x4, v: F32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; lane i lies inside the 16 bytes.
            unsafe { red_add_f32(p.cast::<f32>().add(i), v.0[i], o) }
        }
    }
    pub unsafe fn red_add_f16x2(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { update32(p, o, |x| add_f16x2(x, v)) }
    }
    pub unsafe fn red_add_v4_f16x2(p: *mut U32x4, v: U32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; word i lies inside the 16 bytes.
            unsafe { red_add_f16x2(p.cast::<u32>().add(i), v.0[i], o) }
        }
    }
    pub unsafe fn red_add_bf16x2(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { update32(p, o, |x| add_bf16x2(x, v)) }
    }
    pub unsafe fn red_add_v4_bf16x2(p: *mut U32x4, v: U32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; word i lies inside the 16 bytes.
            unsafe { red_add_bf16x2(p.cast::<u32>().add(i), v.0[i], o) }
        }
    }
    pub unsafe fn red_add_f64(p: *mut f64, v: f64, o: Ordering) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        let at = unsafe { AtomicU64::from_ptr(p.cast()) };
        let _ = at.fetch_update(ord(o), a::Ordering::Relaxed, |x| {
            Some((f64::from_bits(x) + v).to_bits())
        });
    }
    pub unsafe fn red_add_u32(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, ord(o));
    }
    pub unsafe fn red_add_s32(p: *mut i32, v: i32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red_add_u32(p.cast(), v as u32, o) }
    }
    pub unsafe fn red_add_u64(p: *mut u64, v: u64, o: Ordering) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, ord(o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_host_rank_reduces_into_its_own_copy() {
        let mut x = 3u32;
        let mut f = 1.5f32;
        let mut v = F32x4([1.0, 2.0, 3.0, 4.0]);
        unsafe {
            red_add_u32(&raw mut x, 2, Ordering::Release);
            assert_eq!(ld_reduce_add_u32(&raw const x), 5);
            red_add_f32(&raw mut f, 0.25, Ordering::Relaxed);
            st_f32(&raw mut f, ld_reduce_add_f32(&raw const f) * 2.0);
            assert_eq!(f, 3.5);
            red_add_v4_f32(&raw mut v, F32x4([1.0; 4]), Ordering::Relaxed);
            assert_eq!(ld_reduce_add_v4_f32(&raw const v).0, [2.0, 3.0, 4.0, 5.0]);
            let one_one = 0x3c00_3c00u32; // f16x2 (1.0, 1.0)
            let mut h = one_one;
            red_add_f16x2(&raw mut h, one_one, Ordering::Relaxed);
            assert_eq!(h, 0x4000_4000); // (2.0, 2.0)
        }
    }
}
