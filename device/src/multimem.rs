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
}

/// The host backend: a multicast address registered by the emulated host runtime
/// ([`crate::emu::multicast`]) resolves to every LSA peer's copy; any other address is taken
/// to be the only copy (a single rank).
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::emu::multicast;
    use crate::mem::{F32x4, Ordering, U32x4};
    use crate::reduce::{Bf16, F16, add_bf16x2, add_f16x2};
    use core::sync::atomic::{self as a, AtomicU32, AtomicU64};

    const RELAXED: a::Ordering = a::Ordering::Relaxed;

    fn ord(o: Ordering) -> a::Ordering {
        if o.has_release() {
            a::Ordering::Release
        } else {
            a::Ordering::Relaxed
        }
    }

    /// Calls `f` with the address of every copy of `p`, in member order.
    fn each_copy<T>(p: *const T, mut f: impl FnMut(*mut T)) {
        match multicast::resolve(p as u64) {
            Some((bases, offset)) => {
                for &b in bases.iter() {
                    f(b.wrapping_add(offset) as *mut T)
                }
            }
            None => f(p.cast_mut()),
        }
    }

    /// True when `T` is one 8-byte word: `f64`, `u64`, `i64` (16-byte vectors are four 4-byte words).
    const fn one_u64<T>() -> bool {
        core::mem::size_of::<T>() == 8
    }

    /// True when `T` is a whole number of the words [`load_relaxed`] uses for it.
    const fn words_fit<T>() -> bool {
        let (size, align) = (core::mem::size_of::<T>(), core::mem::align_of::<T>());
        if one_u64::<T>() {
            align == 8
        } else {
            align >= 4 && size.is_multiple_of(4)
        }
    }

    /// Reads `T` (4, 8 or 16 bytes, every bit pattern valid) at `q` as relaxed atomic words of
    /// its elements: one 8-byte word for `f64`/`u64`/`i64`, else 4-byte words (one per element or
    /// packed pair, as the GPU's `.v4` forms and the `red` updates here). The GPU's multimem
    /// accesses are `.relaxed.sys`, and other emulated threads access the copies concurrently,
    /// so a non-atomic access would be a data race; word sizes match the `red` updates, since
    /// racing atomics of different sizes are undefined behaviour in Rust.
    ///
    /// # Safety
    /// `q` is valid for an aligned read of `T`, and `T` is a plain-old-data type of this
    /// module (`u32`, `i32`, `u64`, `i64`, `f32`, `f64`, [`F32x4`], [`U32x4`]).
    unsafe fn load_relaxed<T: Copy>(q: *const T) -> T {
        const { assert!(words_fit::<T>()) };
        let mut out = core::mem::MaybeUninit::<T>::uninit();
        if one_u64::<T>() {
            // SAFETY: `*q` is one 8-byte aligned word; `out` has room for it.
            unsafe {
                let w = AtomicU64::from_ptr(q.cast::<u64>().cast_mut()).load(RELAXED);
                out.as_mut_ptr().cast::<u64>().write(w);
            }
        } else {
            for i in 0..core::mem::size_of::<T>() / 4 {
                // SAFETY: word i lies inside `*q`, 4-byte aligned; `out` has room for it.
                unsafe {
                    let w = AtomicU32::from_ptr(q.cast::<u32>().add(i).cast_mut()).load(RELAXED);
                    out.as_mut_ptr().cast::<u32>().add(i).write(w);
                }
            }
        }
        // SAFETY: every byte was written, and every bit pattern is a valid `T` (no padding).
        unsafe { out.assume_init() }
    }

    /// Writes `v` at `q` as relaxed atomic words (as [`load_relaxed`] reads them).
    ///
    /// # Safety
    /// `q` is valid for an aligned write of `T`, a type as in [`load_relaxed`].
    unsafe fn store_relaxed<T: Copy>(q: *mut T, v: T) {
        const { assert!(words_fit::<T>()) };
        let src = (&raw const v).cast::<u8>();
        if one_u64::<T>() {
            // SAFETY: `*q` and `v` are one 8-byte word, aligned in `*q`.
            unsafe {
                let w = src.cast::<u64>().read_unaligned();
                AtomicU64::from_ptr(q.cast::<u64>()).store(w, RELAXED);
            }
        } else {
            for i in 0..core::mem::size_of::<T>() / 4 {
                // SAFETY: word i lies inside `*q` and `v` (no padding), 4-byte aligned in `*q`.
                unsafe {
                    let w = src.add(4 * i).cast::<u32>().read_unaligned();
                    AtomicU32::from_ptr(q.cast::<u32>().add(i)).store(w, RELAXED);
                }
            }
        }
    }

    /// Reads every copy of `p` and folds the values: `first` starts the accumulator from the
    /// first copy, `fold` adds each further one.
    ///
    /// # Safety
    /// Every copy of `p` is valid for an aligned read of `T`, a type as in [`load_relaxed`].
    unsafe fn ld_fold<T: Copy, A>(
        p: *const T,
        first: impl Fn(T) -> A,
        fold: impl Fn(A, T) -> A,
    ) -> A {
        let mut acc: Option<A> = None;
        each_copy(p, |q| {
            // SAFETY: the caller's contract, for every copy.
            let v = unsafe { load_relaxed(q) };
            acc = Some(match acc.take() {
                None => first(v),
                Some(a) => fold(a, v),
            });
        });
        match acc {
            Some(a) => a,
            // Never reached (a range has at least one member), but stay total.
            // SAFETY: as above, for `p` itself.
            None => first(unsafe { load_relaxed(p) }),
        }
    }

    fn f16_lanes(w: u32) -> [f32; 2] {
        [F16(w as u16).to_f32(), F16((w >> 16) as u16).to_f32()]
    }
    fn f16_pack(l: [f32; 2]) -> u32 {
        u32::from(F16::from_f32(l[0]).0) | u32::from(F16::from_f32(l[1]).0) << 16
    }
    fn bf16_lanes(w: u32) -> [f32; 2] {
        [Bf16(w as u16).to_f32(), Bf16((w >> 16) as u16).to_f32()]
    }
    fn bf16_pack(l: [f32; 2]) -> u32 {
        u32::from(Bf16::from_f32(l[0]).0) | u32::from(Bf16::from_f32(l[1]).0) << 16
    }
    fn lanes8(v: U32x4, lanes: fn(u32) -> [f32; 2]) -> [f32; 8] {
        let mut out = [0.0; 8];
        for (i, w) in v.0.iter().enumerate() {
            let [lo, hi] = lanes(*w);
            out[2 * i] = lo;
            out[2 * i + 1] = hi;
        }
        out
    }
    fn pack8(l: [f32; 8], pack: fn([f32; 2]) -> u32) -> U32x4 {
        U32x4([
            pack([l[0], l[1]]),
            pack([l[2], l[3]]),
            pack([l[4], l[5]]),
            pack([l[6], l[7]]),
        ])
    }
    /// `f` lane by lane.
    fn zip<const N: usize>(a: [f32; N], b: [f32; N], f: fn(f32, f32) -> f32) -> [f32; N] {
        core::array::from_fn(|i| f(a[i], b[i]))
    }

    macro_rules! ld_scalar {
        ($($name:ident, $t:ty, $fold:expr;)*) => {$(
            pub unsafe fn $name(p: *const $t) -> $t {
                // SAFETY: forwarded.
                unsafe { ld_fold(p, |v| v, $fold) }
            }
        )*};
    }
    ld_scalar! {
        ld_reduce_add_f32, f32, |a: f32, v: f32| a + v;
        ld_reduce_add_f64, f64, |a: f64, v: f64| a + v;
        ld_reduce_add_u32, u32, u32::wrapping_add;
        ld_reduce_add_s32, i32, i32::wrapping_add;
        ld_reduce_add_u64, u64, u64::wrapping_add;
        ld_reduce_min_u32, u32, u32::min;
        ld_reduce_min_s32, i32, i32::min;
        ld_reduce_min_u64, u64, u64::min;
        ld_reduce_min_s64, i64, i64::min;
        ld_reduce_max_u32, u32, u32::max;
        ld_reduce_max_s32, i32, i32::max;
        ld_reduce_max_u64, u64, u64::max;
        ld_reduce_max_s64, i64, i64::max;
    }

    pub unsafe fn ld_reduce_add_v4_f32(p: *const F32x4) -> F32x4 {
        // SAFETY: forwarded.
        unsafe {
            ld_fold(
                p,
                |v| v,
                |a: F32x4, v: F32x4| F32x4(core::array::from_fn(|i| a.0[i] + v.0[i])),
            )
        }
    }

    /// Packed 16-bit forms, scalar (`u32`, two lanes) and `.v4` (eight lanes): every lane is
    /// widened to `f32`, folded over the copies by `$f` and rounded once (`.acc::f32` for
    /// sums; a minimum or maximum is one of the inputs, so its rounding is exact).
    macro_rules! ld_packed {
        ($($one:ident, $four:ident, $lanes:ident, $pack:ident, $f:expr;)*) => {$(
            pub unsafe fn $one(p: *const u32) -> u32 {
                // SAFETY: forwarded.
                $pack(unsafe { ld_fold(p, $lanes, |a, v| zip(a, $lanes(v), $f)) })
            }
            pub unsafe fn $four(p: *const U32x4) -> U32x4 {
                // SAFETY: forwarded.
                let acc = unsafe {
                    ld_fold(p, |v| lanes8(v, $lanes), |a, v| zip(a, lanes8(v, $lanes), $f))
                };
                pack8(acc, $pack)
            }
        )*};
    }
    ld_packed! {
        ld_reduce_add_f16x2, ld_reduce_add_v4_f16x2, f16_lanes, f16_pack, |a, b| a + b;
        ld_reduce_add_bf16x2, ld_reduce_add_v4_bf16x2, bf16_lanes, bf16_pack, |a, b| a + b;
        ld_reduce_min_f16x2, ld_reduce_min_v4_f16x2, f16_lanes, f16_pack, f32::min;
        ld_reduce_min_bf16x2, ld_reduce_min_v4_bf16x2, bf16_lanes, bf16_pack, f32::min;
        ld_reduce_max_f16x2, ld_reduce_max_v4_f16x2, f16_lanes, f16_pack, f32::max;
        ld_reduce_max_bf16x2, ld_reduce_max_v4_bf16x2, bf16_lanes, bf16_pack, f32::max;
    }

    macro_rules! st_all {
        ($($name:ident, $t:ty;)*) => {$(
            pub unsafe fn $name(p: *mut $t, v: $t) {
                each_copy(p, |q| {
                    // SAFETY: the caller guarantees every copy is valid and aligned.
                    unsafe { store_relaxed(q, v) }
                });
            }
        )*};
    }
    st_all! {
        st_f32, f32;
        st_v4_f32, F32x4;
        st_f16x2, u32;
        st_v4_f16x2, U32x4;
        st_bf16x2, u32;
        st_v4_bf16x2, U32x4;
        st_f64, f64;
        st_u32, u32;
        st_s32, i32;
        st_u64, u64;
    }

    /// Atomically replaces the 32-bit word at `p` by `f(old)`.
    unsafe fn update32(p: *mut u32, o: Ordering, f: impl Fn(u32) -> u32) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        let at = unsafe { AtomicU32::from_ptr(p) };
        let _ = at.fetch_update(ord(o), a::Ordering::Relaxed, |x| Some(f(x)));
    }

    /// Atomically replaces the 64-bit word at `p` by `f(old)`.
    unsafe fn update64(p: *mut u64, o: Ordering, f: impl Fn(u64) -> u64) {
        // SAFETY: the caller guarantees a valid, aligned `p`.
        let at = unsafe { AtomicU64::from_ptr(p) };
        let _ = at.fetch_update(ord(o), a::Ordering::Relaxed, |x| Some(f(x)));
    }

    /// Applies the 32-bit update `f` to word `lane` of every copy of `p`.
    unsafe fn red32<T>(p: *mut T, lane: usize, o: Ordering, f: impl Fn(u32) -> u32) {
        each_copy(p, |q| {
            // SAFETY: the caller guarantees every copy is valid and aligned; `lane` lies
            // inside `T`.
            unsafe { update32(q.cast::<u32>().add(lane), o, &f) }
        });
    }

    pub unsafe fn red_add_f32(p: *mut f32, v: f32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red32(p, 0, o, |x| (f32::from_bits(x) + v).to_bits()) }
    }
    pub unsafe fn red_add_v4_f32(p: *mut F32x4, v: F32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; lane i lies inside the 16 bytes.
            unsafe { red32(p, i, o, |x| (f32::from_bits(x) + v.0[i]).to_bits()) }
        }
    }
    pub unsafe fn red_add_f16x2(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red32(p, 0, o, |x| add_f16x2(x, v)) }
    }
    pub unsafe fn red_add_v4_f16x2(p: *mut U32x4, v: U32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; word i lies inside the 16 bytes.
            unsafe { red32(p, i, o, |x| add_f16x2(x, v.0[i])) }
        }
    }
    pub unsafe fn red_add_bf16x2(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red32(p, 0, o, |x| add_bf16x2(x, v)) }
    }
    pub unsafe fn red_add_v4_bf16x2(p: *mut U32x4, v: U32x4, o: Ordering) {
        for i in 0..4 {
            // SAFETY: forwarded; word i lies inside the 16 bytes.
            unsafe { red32(p, i, o, |x| add_bf16x2(x, v.0[i])) }
        }
    }
    pub unsafe fn red_add_u32(p: *mut u32, v: u32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red32(p, 0, o, |x| x.wrapping_add(v)) }
    }
    pub unsafe fn red_add_s32(p: *mut i32, v: i32, o: Ordering) {
        // SAFETY: forwarded.
        unsafe { red32(p, 0, o, |x| x.wrapping_add(v as u32)) }
    }
    pub unsafe fn red_add_f64(p: *mut f64, v: f64, o: Ordering) {
        each_copy(p, |q| {
            // SAFETY: the caller guarantees every copy is valid and aligned.
            unsafe { update64(q.cast(), o, |x| (f64::from_bits(x) + v).to_bits()) }
        });
    }
    pub unsafe fn red_add_u64(p: *mut u64, v: u64, o: Ordering) {
        each_copy(p, |q| {
            // SAFETY: the caller guarantees every copy is valid and aligned.
            unsafe { AtomicU64::from_ptr(q) }.fetch_add(v, ord(o));
        });
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

    #[test]
    fn a_registered_multicast_address_reaches_every_copy() {
        // Three "peers" of four words each; the multicast range is a separate address range
        // that is never dereferenced itself.
        let mut copies = [
            [1u32, 0x3c00_3c00, 0, 0],
            [2, 0x3c00_3c00, 0, 0],
            [3, 0x4000_3c00, 0, 0],
        ];
        let bases: std::vec::Vec<u64> = copies.iter_mut().map(|c| c.as_mut_ptr() as u64).collect();
        let mc = 0x6f00_0000_0000u64;
        // SAFETY: each copy is 16 bytes of `copies`, which outlives `range` (dropped below,
        // before `copies` is read again) and is only accessed through the multimem calls.
        let range = unsafe { crate::emu::multicast::register(mc, 16, &bases) }.unwrap();
        let word = |i: u64| (mc + 4 * i) as *mut u32;
        unsafe {
            assert_eq!(ld_reduce_add_u32(word(0)), 6);
            // f16x2 (1, 1) + (1, 1) + (1, 2) = (3, 4), accumulated in f32.
            assert_eq!(ld_reduce_add_f16x2(word(1)), 0x4400_4200);
            st_u32(word(2), 7);
            red_add_u32(word(3), 5, Ordering::Release);
            red_add_u32(word(3), 1, Ordering::Relaxed);
        }
        drop(range);
        for c in &copies {
            assert_eq!(c[2..], [7, 6]);
        }
    }

    #[test]
    fn min_and_max_pick_per_type_and_per_lane() {
        use crate::reduce::Bf16;
        /// One copy: an i32 word, an f16x2 word, a 64-bit word, eight bf16 lanes.
        #[repr(C, align(16))]
        struct Copy4 {
            s: i32,
            h: u32,
            d: i64,
            v: U32x4,
        }
        let ints = [-5i32, 3, 2];
        // f16x2, low lane first: (1, -2), (-1, 0.5), (2, 4).
        let halves = [0xc000_3c00u32, 0x3800_bc00, 0x4400_4000];
        let longs = [-1i64, 1, 7];
        let lane = |c: usize, i: usize| ((i * 3 + c * 5) % 7) as f32 - 3.0 + 0.25 * c as f32;
        let bf = |f: f32| u32::from(Bf16::from_f32(f).0);
        let packed = |c: usize| {
            U32x4(core::array::from_fn(|w| {
                bf(lane(c, 2 * w)) | bf(lane(c, 2 * w + 1)) << 16
            }))
        };
        let mut copies: std::vec::Vec<Copy4> = (0..3)
            .map(|c| Copy4 {
                s: ints[c],
                h: halves[c],
                d: longs[c],
                v: packed(c),
            })
            .collect();
        let bases: std::vec::Vec<u64> = copies.iter_mut().map(|c| (&raw mut *c) as u64).collect();
        let mc = 0x6e00_0000_0000u64;
        // SAFETY: each copy is 32 bytes of `copies`, which outlives `range` and is only read
        // through the multimem calls meanwhile.
        let range = unsafe { crate::emu::multicast::register(mc, 32, &bases) }.unwrap();
        let fold = |f: fn(f32, f32) -> f32| {
            U32x4(core::array::from_fn(|w| {
                let pick = |i| bf((0..3).map(|c| lane(c, i)).reduce(f).unwrap());
                pick(2 * w) | pick(2 * w + 1) << 16
            }))
        };
        // SAFETY: every address is an aligned word (or 16 bytes) of the registered range.
        unsafe {
            assert_eq!(ld_reduce_min_s32(mc as *const i32), -5);
            assert_eq!(ld_reduce_max_s32(mc as *const i32), 3);
            assert_eq!(ld_reduce_min_u32(mc as *const u32), 2);
            assert_eq!(ld_reduce_max_u32(mc as *const u32), -5i32 as u32);
            let h = (mc + 4) as *const u32;
            assert_eq!(ld_reduce_min_f16x2(h), 0xc000_bc00); // (-1, -2)
            assert_eq!(ld_reduce_max_f16x2(h), 0x4400_4000); // (2, 4)
            assert_eq!(ld_reduce_min_s64((mc + 8) as *const i64), -1);
            assert_eq!(ld_reduce_max_s64((mc + 8) as *const i64), 7);
            assert_eq!(ld_reduce_min_u64((mc + 8) as *const u64), 1);
            assert_eq!(ld_reduce_max_u64((mc + 8) as *const u64), u64::MAX);
            let v = (mc + 16) as *const U32x4;
            assert_eq!(ld_reduce_min_v4_bf16x2(v).0, fold(f32::min).0);
            assert_eq!(ld_reduce_max_v4_bf16x2(v).0, fold(f32::max).0);
            // The minimum of every lane is one copy's lane, and not always the same copy's.
            let first = ld_reduce_min_bf16x2(v.cast());
            assert_eq!(first, fold(f32::min).0[0]);
            assert_ne!(fold(f32::min).0, packed(0).0);
        }
        drop(range);
    }
}
