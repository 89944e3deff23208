//! Element types and reduction operators on packed 16-byte vectors.
//!
//! The data path moves 16 bytes per thread per access ([`U32x4`]); this module interprets those
//! bytes as lanes of an [`Element`] type (`f32`, `f64`, [`F16`], [`Bf16`], `i32`, `u32`,
//! `u64`, `i64`) and combines two vectors lane by lane with a [`ReduceOp`] ([`Sum`], [`Min`],
//! [`Max`], [`Prod`]). 16-bit floats are computed in `f32` (convert, operate, round to nearest
//! even once), as NVLink SHARP's `.acc::f32` does. [`Accumulator`] keeps a running reduction
//! of many vectors in the accumulation type and rounds once at the end.
//!
//! Rust has no stable `f16`/`bf16` in `core`, so [`F16`] and [`Bf16`] are bit patterns with
//! software conversions (round-to-nearest-even, NaN kept quiet, overflow to infinity).
//! Integer operations wrap. Pure code, identical on the GPU and the host.

use core::marker::PhantomData;

use crate::mem::U32x4;

/// An IEEE-754 binary16 value as its bit pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

/// A bfloat16 value (the top half of an `f32`) as its bit pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// The body of `F16::pack2` / `Bf16::pack2`: the `cvt.rn.*x2.f32` instruction `$cvt` on the
/// GPU, `$t::from_f32` of both lanes on the host.
macro_rules! pack2 {
    ($t:ident, $cvt:literal, $lo:expr, $hi:expr) => {{
        #[cfg(target_arch = "nvptx64")]
        {
            let d: u32;
            // SAFETY: a register-only conversion (`hi` goes to the upper half of `d`).
            unsafe {
                core::arch::asm!(
                    concat!($cvt, " {d}, {hi}, {lo};"),
                    d = out(reg32) d,
                    hi = in(reg32) $hi,
                    lo = in(reg32) $lo,
                    options(pure, nomem, nostack),
                )
            };
            d
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            u32::from($t::from_f32($lo).0) | u32::from($t::from_f32($hi).0) << 16
        }
    }};
}

impl F16 {
    /// Rounds `x` to the nearest binary16 (ties to even; overflow to ±infinity; NaN stays a
    /// quiet NaN).
    pub const fn from_f32(x: f32) -> F16 {
        let x = x.to_bits();
        let sign = ((x >> 16) & 0x8000) as u16;
        let exp = ((x >> 23) & 0xff) as i32;
        let mant = x & 0x7f_ffff;
        if exp == 0xff {
            let nan = if mant != 0 {
                0x0200 | (mant >> 13) as u16
            } else {
                0
            };
            return F16(sign | 0x7c00 | nan);
        }
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            // Subnormal (or zero) in binary16: value = m * 2^(exp - 150), unit 2^-24.
            if e < -10 {
                return F16(sign);
            }
            let m = mant | 0x80_0000;
            let shift = (14 - e) as u32;
            let half = 1u32 << (shift - 1);
            let rem = m & ((1u32 << shift) - 1);
            let mut s = m >> shift;
            if rem > half || (rem == half && s & 1 == 1) {
                s += 1;
            }
            return F16(sign | s as u16);
        }
        let mut h = ((e as u32) << 10) | (mant >> 13);
        let rem = mant & 0x1fff;
        if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
            h += 1; // may carry into the exponent, up to infinity: both correct
        }
        F16(sign | h as u16)
    }

    /// The exact `f32` value.
    pub const fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let mant = h & 0x3ff;
        if exp == 0x1f {
            return f32::from_bits(sign | 0x7f80_0000 | (mant << 13));
        }
        if exp == 0 {
            let v = mant as f32 * (1.0 / 16_777_216.0); // mant * 2^-24, exact
            return if sign != 0 { -v } else { v };
        }
        f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13))
    }

    /// [`from_f32`](Self::from_f32) as the hardware computes it: one `cvt.rn.f16.f32` on the
    /// GPU, the software rounding on the host. The two agree on every input that is not a
    /// NaN (round to nearest even, subnormals kept, overflow to ±infinity); a NaN becomes
    /// the canonical quiet NaN `0x7fff` on the GPU.
    ///
    /// Kernels use this rather than `from_f32`: the software rounding branches on the
    /// exponent, and eight of those per 16-byte pack kept LLVM from unrolling the lane loops
    /// of [`Accumulator`], which then lived in local memory.
    #[inline(always)]
    pub fn round(x: f32) -> F16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let h: u16;
            // SAFETY: a register-only conversion.
            unsafe {
                core::arch::asm!(
                    "cvt.rn.f16.f32 {h}, {x};",
                    h = out(reg16) h,
                    x = in(reg32) x,
                    options(pure, nomem, nostack),
                )
            };
            F16(h)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            F16::from_f32(x)
        }
    }

    /// [`to_f32`](Self::to_f32) as the hardware computes it: one exact `cvt.f32.f16` on the
    /// GPU (a NaN keeps its sign and payload, quieted), `to_f32` on the host.
    #[inline(always)]
    pub fn widen(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            let f: f32;
            // SAFETY: a register-only conversion.
            unsafe {
                core::arch::asm!(
                    "cvt.f32.f16 {f}, {h};",
                    f = out(reg32) f,
                    h = in(reg16) self.0,
                    options(pure, nomem, nostack),
                )
            };
            f
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            self.to_f32()
        }
    }

    /// Rounds `lo` and `hi` to binary16 and packs them into one word, `lo` in bits 0–15:
    /// [`round`](Self::round) of both, in one `cvt.rn.f16x2.f32` on the GPU (sm_80 and
    /// later; a NaN becomes the canonical `0x7fff`), `from_f32` of both on the host.
    #[inline(always)]
    pub fn pack2(lo: f32, hi: f32) -> u32 {
        pack2!(F16, "cvt.rn.f16x2.f32", lo, hi)
    }
}

impl Bf16 {
    /// The same as [`from_f32`](Self::from_f32) (which has no branch but the NaN test).
    #[inline(always)]
    pub fn round(x: f32) -> Bf16 {
        Bf16::from_f32(x)
    }

    /// The same as [`to_f32`](Self::to_f32) (a shift).
    #[inline(always)]
    pub fn widen(self) -> f32 {
        self.to_f32()
    }

    /// Rounds `x` to the nearest bfloat16 (ties to even; NaN stays a quiet NaN).
    pub const fn from_f32(x: f32) -> Bf16 {
        let b = x.to_bits();
        if x.is_nan() {
            return Bf16(((b >> 16) | 0x0040) as u16);
        }
        let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
        Bf16((r >> 16) as u16)
    }

    /// The exact `f32` value.
    pub const fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// Rounds `lo` and `hi` to bfloat16 (ties to even) and packs them into one word, `lo` in
    /// bits 0–15 (lane order of a pack): `from_f32(lo).0 | from_f32(hi).0 << 16` for every
    /// input that is not a NaN.
    ///
    /// On the GPU it is one `cvt.rn.bf16x2.f32` (sm_80 and later) instead of the integer
    /// rounding of [`from_f32`](Self::from_f32): round-to-nearest-even of an `f32` to the 8-bit
    /// significand of bfloat16, keeping subnormals and rounding overflow to infinity, which is
    /// what `from_f32` computes for every non-NaN input. A NaN becomes the canonical quiet NaN
    /// `0x7fff` there, where `from_f32` keeps the sign and payload. On the host (the
    /// emulator) it is `from_f32`.
    #[inline(always)]
    pub fn pack2(lo: f32, hi: f32) -> u32 {
        pack2!(Bf16, "cvt.rn.bf16x2.f32", lo, hi)
    }
}

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

/// A reduction operator.
pub trait ReduceOp {
    /// Combines two values.
    fn apply<A: Arith>(a: A, b: A) -> A;
}

/// Addition.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sum;
/// Minimum.
#[derive(Debug, Clone, Copy, Default)]
pub struct Min;
/// Maximum.
#[derive(Debug, Clone, Copy, Default)]
pub struct Max;
/// Multiplication.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prod;

impl ReduceOp for Sum {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::add(a, b)
    }
}
impl ReduceOp for Min {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::min(a, b)
    }
}
impl ReduceOp for Max {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::max(a, b)
    }
}
impl ReduceOp for Prod {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::mul(a, b)
    }
}

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

/// `a op b` lane by lane, computed in `T::Acc` and rounded once per lane.
#[inline(always)]
pub fn reduce_pack<T: Element, O: ReduceOp>(a: U32x4, b: U32x4) -> U32x4 {
    let mut acc = [T::Acc::default(); 8];
    for (i, x) in acc.iter_mut().enumerate().take(T::LANES) {
        *x = O::apply(T::get(&a, i), T::get(&b, i));
    }
    T::pack(&acc)
}

/// A running reduction of packed vectors in the accumulation type; rounds once in
/// [`finish`](Accumulator::finish) (fp32 accumulation for 16-bit floats).
#[derive(Debug, Clone, Copy)]
pub struct Accumulator<T: Element, O: ReduceOp> {
    acc: [T::Acc; 8],
    _op: PhantomData<(T, O)>,
}

impl<T: Element, O: ReduceOp> Accumulator<T, O> {
    /// Starts with the lanes of `first`.
    #[inline(always)]
    pub fn new(first: U32x4) -> Self {
        let mut acc = [T::Acc::default(); 8];
        for (i, a) in acc.iter_mut().enumerate().take(T::LANES) {
            *a = T::get(&first, i);
        }
        Accumulator {
            acc,
            _op: PhantomData,
        }
    }

    /// Folds in the lanes of `v`.
    #[inline(always)]
    pub fn add(&mut self, v: U32x4) {
        for (i, a) in self.acc.iter_mut().enumerate().take(T::LANES) {
            *a = O::apply(*a, T::get(&v, i));
        }
    }

    /// The result, rounded to `T`.
    #[inline(always)]
    pub fn finish(&self) -> U32x4 {
        T::pack(&self.acc)
    }
}

/// Two packed binary16 lanes added in `f32` and rounded (one `f16x2` word, low lane first).
#[inline(always)]
pub fn add_f16x2(a: u32, b: u32) -> u32 {
    let lo = F16::from_f32(F16(a as u16).to_f32() + F16(b as u16).to_f32()).0;
    let hi = F16::from_f32(F16((a >> 16) as u16).to_f32() + F16((b >> 16) as u16).to_f32()).0;
    u32::from(lo) | (u32::from(hi) << 16)
}

/// Two packed bfloat16 lanes added in `f32` and rounded (one `bf16x2` word, low lane first).
#[inline(always)]
pub fn add_bf16x2(a: u32, b: u32) -> u32 {
    let lo = Bf16::from_f32(Bf16(a as u16).to_f32() + Bf16(b as u16).to_f32()).0;
    let hi = Bf16::from_f32(Bf16((a >> 16) as u16).to_f32() + Bf16((b >> 16) as u16).to_f32()).0;
    u32::from(lo) | (u32::from(hi) << 16)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 16) as u32
        }
    }

    /// Positive finite values of a 16-bit format, ascending, as (f64, bits).
    fn table(max_finite: u16, to_f32: fn(u16) -> f32) -> Vec<(f64, u16)> {
        (0..=max_finite)
            .map(|b| (f64::from(to_f32(b)), b))
            .collect()
    }

    /// Nearest value of the table to `x` (ties to the even bit pattern), with overflow to
    /// infinity at the midpoint past the largest finite value. Independent of the code under
    /// test: a search over every representable value.
    fn nearest(t: &[(f64, u16)], inf: u16, x: f64) -> u16 {
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = x.abs();
        let (top, top_bits) = t[t.len() - 1];
        let ulp_top = top - t[t.len() - 2].0;
        if a >= top + ulp_top / 2.0 {
            // exactly the midpoint: ties to even → infinity since top's pattern is odd
            return sign | inf;
        }
        let i = t.partition_point(|&(v, _)| v < a);
        if i == 0 {
            return sign | t[0].1;
        }
        if i >= t.len() {
            return sign | top_bits;
        }
        let (hi, hb) = t[i];
        let (lo, lb) = t[i - 1];
        let bits = if a - lo < hi - a {
            lb
        } else if hi - a < a - lo {
            hb
        } else if lb % 2 == 0 {
            lb
        } else {
            hb
        };
        sign | bits
    }

    fn f16_table() -> Vec<(f64, u16)> {
        table(0x7bff, |b| F16(b).to_f32())
    }
    fn bf16_table() -> Vec<(f64, u16)> {
        table(0x7f7f, |b| Bf16(b).to_f32())
    }

    #[test]
    fn bf16_pairs_pack_as_two_roundings_in_lane_order() {
        // Ties both ways, subnormals, overflow to infinity, signed zeros, infinities.
        let xs = [
            0.0f32,
            -0.0,
            1.0,
            -2.5,
            f32::from_bits(0x3f80_8000), // tie, rounds to even (down)
            f32::from_bits(0x3f81_8000), // tie, rounds to even (up)
            f32::from_bits(0x3f80_8001),
            f32::from_bits(0x0000_8001), // f32 subnormal
            f32::from_bits(0x007f_ffff),
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            3.0e38,
        ];
        for &lo in &xs {
            for &hi in &xs {
                let w = Bf16::pack2(lo, hi);
                assert_eq!(w as u16, Bf16::from_f32(lo).0, "{lo} {hi}");
                assert_eq!((w >> 16) as u16, Bf16::from_f32(hi).0, "{lo} {hi}");
                let mut v = U32x4::default();
                Bf16::put(&mut v, 0, lo);
                Bf16::put(&mut v, 1, hi);
                assert_eq!(v.0[0], w, "lane order of a pack");
            }
        }
    }

    #[test]
    fn sixteen_bit_formats_round_trip_every_finite_value() {
        for b in 0..=u16::MAX {
            let h = F16(b);
            if (b & 0x7c00) != 0x7c00 {
                assert_eq!(F16::from_f32(h.to_f32()), h, "f16 {b:#x}");
            }
            let bf = Bf16(b);
            if (b & 0x7f80) != 0x7f80 {
                assert_eq!(Bf16::from_f32(bf.to_f32()), bf, "bf16 {b:#x}");
            }
        }
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(F16::from_f32(1e6).0, 0x7c00);
        assert_eq!(F16::from_f32(-1e6).0, 0xfc00);
        assert_eq!(F16::from_f32(65520.0).0, 0x7c00); // midpoint past max rounds to inf
        assert_eq!(F16::from_f32(65519.0).0, 0x7bff);
    }

    #[test]
    fn f32_to_16_bit_rounds_to_nearest_even() {
        let (t16, tb) = (f16_table(), bf16_table());
        let mut rng = Rng(0xdead_beef_cafe_f00d);
        for _ in 0..200_000 {
            // Random f32 in the binary16 range (and a bit beyond), including subnormals.
            // Exponents 2^-30 .. 2^17: zero, subnormal, normal and overflowing results.
            let e = 127 - 30 + rng.next() % 48;
            let x = f32::from_bits((rng.next() & 0x807f_ffff) | (e << 23));
            assert_eq!(
                F16::from_f32(x).0,
                nearest(&t16, 0x7c00, f64::from(x)),
                "f16 of {x:e}"
            );
            assert_eq!(
                Bf16::from_f32(x).0,
                nearest(&tb, 0x7f80, f64::from(x)),
                "bf16 of {x:e}"
            );
        }
        // Exact midpoints between neighbours: ties go to the even pattern.
        for b in 0u16..0x7bff {
            let mid = (f64::from(F16(b).to_f32()) + f64::from(F16(b + 1).to_f32())) / 2.0;
            let want = if b % 2 == 0 { b } else { b + 1 };
            assert_eq!(
                F16::from_f32(mid as f32).0,
                want,
                "f16 midpoint after {b:#x}"
            );
        }
        for b in 0u16..0x7f7f {
            let mid = (f64::from(Bf16(b).to_f32()) + f64::from(Bf16(b + 1).to_f32())) / 2.0;
            let want = if b % 2 == 0 { b } else { b + 1 };
            assert_eq!(
                Bf16::from_f32(mid as f32).0,
                want,
                "bf16 midpoint after {b:#x}"
            );
        }
    }

    fn random_pack16(rng: &mut Rng, exp_mask: u32) -> U32x4 {
        // Finite values only: clear one exponent bit so no lane is Inf/NaN.
        U32x4([0; 4].map(|_| rng.next() & exp_mask))
    }

    #[test]
    fn packed_f16_and_bf16_sums_match_an_f64_reference() {
        let (t16, tb) = (f16_table(), bf16_table());
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        for _ in 0..20_000 {
            // f16: two lanes per word, clear the top exponent bit of each lane (0xbfff).
            let a = random_pack16(&mut rng, 0xbfff_bfff);
            let b = random_pack16(&mut rng, 0xbfff_bfff);
            let got = reduce_pack::<F16, Sum>(a, b);
            for i in 0..8 {
                let (x, y) = (F16::get(&a, i), F16::get(&b, i));
                // fp32 accumulation: the f64 sum rounded to f32 first, then to f16.
                let acc = (f64::from(x) + f64::from(y)) as f32;
                let want = nearest(&t16, 0x7c00, f64::from(acc));
                assert_eq!(
                    (got.0[i / 2] >> (16 * (i % 2))) as u16,
                    want,
                    "f16 lane {i}: {x} + {y}"
                );
                // and it is within one rounding of the exact sum
                let exact = f64::from(x) + f64::from(y);
                assert!((f64::from(F16::get(&got, i)) - exact).abs() <= exact.abs() * 1e-3 + 1e-7);
            }
            let a = random_pack16(&mut rng, 0xbfff_bfff);
            let b = random_pack16(&mut rng, 0xbfff_bfff);
            let got = reduce_pack::<Bf16, Sum>(a, b);
            for i in 0..8 {
                let (x, y) = (Bf16::get(&a, i), Bf16::get(&b, i));
                let acc = (f64::from(x) + f64::from(y)) as f32;
                let want = nearest(&tb, 0x7f80, f64::from(acc));
                assert_eq!(
                    (got.0[i / 2] >> (16 * (i % 2))) as u16,
                    want,
                    "bf16 lane {i}"
                );
            }
            assert_eq!(
                add_f16x2(a.0[0], b.0[0]),
                reduce_pack::<F16, Sum>(a, b).0[0]
            );
            assert_eq!(
                add_bf16x2(a.0[1], b.0[1]),
                reduce_pack::<Bf16, Sum>(a, b).0[1]
            );
        }
    }

    #[test]
    fn accumulators_round_once_after_fp32_accumulation() {
        let t16 = f16_table();
        let mut rng = Rng(42);
        for _ in 0..2_000 {
            let vs: Vec<U32x4> = (0..8)
                .map(|_| random_pack16(&mut rng, 0xbbff_bbff))
                .collect();
            let mut acc = Accumulator::<F16, Sum>::new(vs[0]);
            for v in &vs[1..] {
                acc.add(*v);
            }
            let got = acc.finish();
            for i in 0..8 {
                // One rounding to f16 at the end of an f32 running sum (not one per step) ...
                let f32_sum = vs.iter().fold(0f32, |s, v| s + F16::get(v, i));
                let lane = (got.0[i / 2] >> (16 * (i % 2))) as u16;
                assert_eq!(lane, nearest(&t16, 0x7c00, f64::from(f32_sum)));
                // ... which stays within half an f16 ulp (plus f32 noise) of the exact sum.
                let exact: f64 = vs.iter().map(|v| f64::from(F16::get(v, i))).sum();
                let r = f64::from(F16(lane).to_f32());
                assert!(
                    (r - exact).abs() <= exact.abs() / 1024.0 + 1e-7,
                    "{r} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn wider_types_reduce_lane_by_lane() {
        let a = U32x4([1, 0xffff_ffff, 7, 3]);
        let b = U32x4([2, 2, 5, 3]);
        assert_eq!(reduce_pack::<u32, Sum>(a, b).0, [3, 1, 12, 6]);
        assert_eq!(reduce_pack::<u32, Max>(a, b).0, [2, 0xffff_ffff, 7, 3]);
        assert_eq!(reduce_pack::<i32, Min>(a, b).0, [1, 0xffff_ffff, 5, 3]);
        assert_eq!(reduce_pack::<u32, Prod>(a, b).0, [2, 0xffff_fffe, 35, 9]);
        let fa = U32x4([1.5f32, -2.0, 0.25, 8.0].map(f32::to_bits));
        let fb = U32x4([2.5f32, 1.0, 0.5, -8.0].map(f32::to_bits));
        assert_eq!(
            reduce_pack::<f32, Sum>(fa, fb).0,
            [4.0f32, -1.0, 0.75, 0.0].map(f32::to_bits)
        );
        let da = U32x4::from(crate::mem::U64x2([1.5f64.to_bits(), u64::MAX]));
        let db = U32x4::from(crate::mem::U64x2([0.25f64.to_bits(), 2]));
        let s = crate::mem::U64x2::from(reduce_pack::<f64, Sum>(da, db));
        assert_eq!(f64::from_bits(s.0[0]), 1.75);
        let s = crate::mem::U64x2::from(reduce_pack::<u64, Sum>(da, db));
        assert_eq!(s.0[1], 1);
    }
}
