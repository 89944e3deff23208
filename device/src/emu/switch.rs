//! The emulated NVLink switch: what a `multimem` instruction does to the copies of a multicast
//! range, on the host. The host backend of [`crate::multimem`] forwards every call here; the
//! contract of each operation is documented there.
//!
//! A multicast address that the emulated host runtime registered in
//! [`multicast`](super::multicast) resolves to the copy of every member (`flat_base + peer ×
//! stride`); any other address is taken to be the caller's only copy (a single rank). Over
//! those copies:
//! - `ld_reduce` reads every copy in member order and folds the values: integers wrap,
//!   packed 16-bit floats are widened to `f32` lane by lane, folded and rounded once (the
//!   switch's `.acc::f32`; a minimum or maximum is one of the inputs, so exact);
//! - `st` stores the value into every copy;
//! - `red_add` adds the value into every copy with an atomic read-modify-write of each word,
//!   released when the order has a release half.
//!
//! Reads and stores are relaxed atomic words (one 8-byte word for `f64`/`u64`/`i64`, else one
//! 4-byte word per element or packed pair), as the GPU's `.relaxed.sys` and the same sizes as
//! the `red` updates.

use super::multicast;
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
unsafe fn ld_fold<T: Copy, A>(p: *const T, first: impl Fn(T) -> A, fold: impl Fn(A, T) -> A) -> A {
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
