//! Small arithmetic shared by the device modules: wrap-safe compares of 32-bit counters,
//! division by a precomputed reciprocal (NCCL's `utility.h` counterparts) and the 4 GiB
//! steps of flat-VA addresses ([`add4g`]).
//!
//! Pure functions, identical on the GPU and the host.

/// `a <= b` for counters that wrap at 2³²: true when `b` is at most 2³¹ − 1 steps ahead of `a`.
///
/// Barrier epochs and LL epochs only ever move forward and are compared within half the range
/// of each other, so this stays correct across the wrap from `u32::MAX` to 0.
#[doc(alias = "rollingLessEq")]
#[inline(always)]
pub const fn rolling_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) <= 0x7fff_ffff
}

/// `a < b` for counters that wrap at 2³² (see [`rolling_le`]).
#[doc(alias = "rollingLessThan")]
#[inline(always)]
pub const fn rolling_lt(a: u32, b: u32) -> bool {
    a != b && rolling_le(a, b)
}

/// The reciprocal of `d` for [`idiv_fast32`]: `u32::MAX / d`, plus one when `d` is a power of
/// two (wrapping, so `d == 1` gives 0, which [`idiv_fast32`] reads as "divide by one").
///
/// `d` must not be 0 (division by zero panics, which traps on the GPU).
#[doc(alias = "idivRcp32")]
#[inline(always)]
pub const fn idiv_rcp32(d: u32) -> u32 {
    (u32::MAX / d).wrapping_add(d.is_power_of_two() as u32)
}

/// `x / d` using `rcp = idiv_rcp32(d)`: one multiply-high plus one correction step, exact for
/// every `x` and every `d >= 1`.
#[doc(alias = "idivFast32")]
#[inline(always)]
pub const fn idiv_fast32(x: u32, d: u32, rcp: u32) -> u32 {
    if rcp == 0 {
        return x; // d == 1
    }
    let mut q = ((x as u64 * rcp as u64) >> 32) as u32;
    // The estimate is never above the quotient and at most one below it.
    if x - q * d >= d {
        q += 1;
    }
    q
}

/// `x % d` using `rcp = idiv_rcp32(d)` (see [`idiv_fast32`]).
#[inline(always)]
pub const fn imod_fast32(x: u32, d: u32, rcp: u32) -> u32 {
    x - idiv_fast32(x, d, rcp) * d
}

// ANCHOR: add4g
/// Adds `delta4g * 2³²` to `ptr` by adding `delta4g` to its high 32-bit word (wrapping in 32
/// bits), NCCL's `add4G`. Callers pass `peer * stride4g` computed in `u32` arithmetic.
///
/// The low word is untouched, so no carry is needed; a multiply by a 4 GiB stride in 64 bits
/// would give the same result for every in-range peer.
#[doc(alias = "add4G")]
#[inline(always)]
pub const fn add4g(ptr: u64, delta4g: u32) -> u64 {
    let hi = ((ptr >> 32) as u32).wrapping_add(delta4g);
    ((hi as u64) << 32) | (ptr & 0xffff_ffff)
}
// ANCHOR_END: add4g

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    #[test]
    fn rolling_compares_survive_the_wrap_at_2_pow_32() {
        assert!(rolling_le(5, 5));
        assert!(rolling_le(5, 6));
        assert!(!rolling_le(6, 5));
        assert!(rolling_le(u32::MAX, 0));
        assert!(rolling_le(u32::MAX - 3, 2));
        assert!(!rolling_le(2, u32::MAX - 3));
        assert!(rolling_lt(u32::MAX, 0));
        assert!(!rolling_lt(0, 0));
        // The boundary: half the range ahead still counts as "later", one more does not.
        assert!(rolling_le(0, 0x7fff_ffff));
        assert!(!rolling_le(0, 0x8000_0000));
        for base in [0u32, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX - 1, u32::MAX] {
            for d in [0u32, 1, 2, 1000, 0x7fff_fffe, 0x7fff_ffff] {
                assert!(rolling_le(base, base.wrapping_add(d)), "{base} + {d}");
                assert_eq!(rolling_lt(base, base.wrapping_add(d)), d != 0);
            }
            assert!(!rolling_le(base, base.wrapping_sub(1)));
        }
    }

    #[test]
    fn reciprocal_division_is_exact_for_divisors_up_to_1024() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u32
        };
        for d in 1u32..=1024 {
            let rcp = idiv_rcp32(d);
            let mut xs = vec![
                0,
                1,
                2,
                d - 1,
                d,
                d + 1,
                u32::MAX,
                u32::MAX - 1,
                u32::MAX - d,
            ];
            let top = u32::MAX / d;
            for k in [1, 2, 3, 1000, top / 2, top - 1, top] {
                let m = k.wrapping_mul(d);
                xs.extend([m.wrapping_sub(1), m, m.wrapping_add(1)]);
            }
            xs.extend((0..300).map(|_| rand()));
            for x in xs {
                assert_eq!(idiv_fast32(x, d, rcp), x / d, "{x} / {d}");
                assert_eq!(imod_fast32(x, d, rcp), x % d, "{x} % {d}");
            }
        }
    }

    #[test]
    fn reciprocal_division_is_exact_for_large_divisors() {
        for d in [
            1025u32,
            4097,
            65_535,
            65_536,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX - 1,
            u32::MAX,
        ] {
            let rcp = idiv_rcp32(d);
            for x in [
                0u32,
                1,
                d - 1,
                d,
                d.wrapping_add(1),
                u32::MAX,
                u32::MAX - 1,
                0x8000_0000,
            ] {
                assert_eq!(idiv_fast32(x, d, rcp), x / d, "{x} / {d}");
            }
        }
    }
}
