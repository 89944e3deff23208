//! How the lanes of a packed 16-byte vector are read and written ([`Element`]) and the
//! arithmetic of the type they are computed in ([`Arith`]).

use super::float16::{Bf16, F16};
use crate::mem::U32x4;

/// Arithmetic of an accumulation type (wrapping for integers, IEEE for floats).
pub trait Arith: Copy {
    /// `a + b`.
    fn add(a: Self, b: Self) -> Self;
    /// `a * b`.
    fn mul(a: Self, b: Self) -> Self;
    /// The smaller (for floats: the non-NaN one if only one is NaN).
    fn min(a: Self, b: Self) -> Self;
    /// The larger (for floats: the non-NaN one if only one is NaN).
    fn max(a: Self, b: Self) -> Self;
}

macro_rules! arith_int {
    ($($t:ty)*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
        }
    )*};
}
arith_int!(i32 u32 u64 i64);

macro_rules! arith_float {
    ($($t:ty)*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { a.min(b) }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { a.max(b) }
        }
    )*};
}
arith_float!(f32 f64);

/// An element type of packed vectors: how many lanes fit in 16 bytes and how a lane converts
/// to and from its accumulation type.
pub trait Element: Copy {
    /// The type lanes are computed in (`f32` for 16-bit floats, the type itself otherwise).
    type Acc: Arith + Default;
    /// Lanes per 16 bytes.
    const LANES: usize;
    /// Lane `i` of `v`, converted to the accumulation type.
    fn get(v: &U32x4, i: usize) -> Self::Acc;
    /// Rounds `a` to the element type and stores it in lane `i` of `v`.
    fn put(v: &mut U32x4, i: usize, a: Self::Acc);
    /// Rounds lanes `0..LANES` of `a` and packs them: [`put`](Self::put) of each by default;
    /// the 16-bit floats round two lanes per instruction on the GPU (`cvt.rn.bf16x2.f32`,
    /// `cvt.rn.f16x2.f32`: the same bits as `put` for every value but NaN, which comes out
    /// canonical there).
    #[inline(always)]
    fn pack(a: &[Self::Acc; 8]) -> U32x4 {
        let mut out = U32x4::default();
        let mut i = 0;
        while i < Self::LANES {
            Self::put(&mut out, i, a[i]);
            i += 1;
        }
        out
    }
}

macro_rules! element32 {
    ($($t:ty => $to:expr, $from:expr;)*) => {$(
        impl Element for $t {
            type Acc = $t;
            const LANES: usize = 4;
            #[inline(always)]
            fn get(v: &U32x4, i: usize) -> $t { $from(v.0[i]) }
            #[inline(always)]
            fn put(v: &mut U32x4, i: usize, a: $t) { v.0[i] = $to(a); }
        }
    )*};
}
element32! {
    f32 => f32::to_bits, f32::from_bits;
    u32 => |a: u32| a, |w: u32| w;
    i32 => |a: i32| a as u32, |w: u32| w as i32;
}

macro_rules! element64 {
    ($($t:ty => $to:expr, $from:expr;)*) => {$(
        impl Element for $t {
            type Acc = $t;
            const LANES: usize = 2;
            #[inline(always)]
            fn get(v: &U32x4, i: usize) -> $t {
                $from(u64::from(v.0[2 * i]) | (u64::from(v.0[2 * i + 1]) << 32))
            }
            #[inline(always)]
            fn put(v: &mut U32x4, i: usize, a: $t) {
                let w: u64 = $to(a);
                v.0[2 * i] = w as u32;
                v.0[2 * i + 1] = (w >> 32) as u32;
            }
        }
    )*};
}
element64! {
    f64 => f64::to_bits, f64::from_bits;
    u64 => |a: u64| a, |w: u64| w;
    i64 => |a: i64| a as u64, |w: u64| w as i64;
}

macro_rules! element16 {
    ($($t:ident;)*) => {$(
        impl Element for $t {
            type Acc = f32;
            const LANES: usize = 8;
            #[inline(always)]
            fn get(v: &U32x4, i: usize) -> f32 {
                $t((v.0[i / 2] >> (16 * (i % 2))) as u16).widen()
            }
            #[inline(always)]
            fn put(v: &mut U32x4, i: usize, a: f32) {
                let shift = 16 * (i % 2);
                let w = &mut v.0[i / 2];
                *w = (*w & !(0xffff << shift)) | (u32::from($t::round(a).0) << shift);
            }
            #[inline(always)]
            fn pack(a: &[f32; 8]) -> U32x4 {
                U32x4([
                    $t::pack2(a[0], a[1]),
                    $t::pack2(a[2], a[3]),
                    $t::pack2(a[4], a[5]),
                    $t::pack2(a[6], a[7]),
                ])
            }
        }
    )*};
}
element16! {
    F16;
    Bf16;
}
