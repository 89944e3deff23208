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
