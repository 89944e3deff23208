//! The benchmark's test data: element `i` of rank `p`'s input is a small integer
//! `a(i) + b(i) · p` (`a` in `-4..=4`, `b` in `-1..=1`, from a hash of `i` and a seed).
//!
//! Small integers are exact in every supported type and their sums stay exact (|sum| ≤ 60
//! for 8 ranks, within bf16's 8-bit significand), so results can be checked exactly whatever
//! order a reduction uses; the rank term makes a sum that reads one peer twice and another
//! not at all come out wrong. Expected sums, minima and maxima over ranks have closed forms.

/// splitmix64's finaliser.
#[inline(always)]
pub const fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `(a, b)` of element `i` under `seed`.
#[inline(always)]
pub const fn coefficients(seed: u32, i: u64) -> (i32, i32) {
    let h = mix(i ^ ((seed as u64) << 40));
    ((h % 9) as i32 - 4, ((h >> 16) % 3) as i32 - 1)
}

/// Element `i` of rank `rank`'s input.
#[inline(always)]
pub const fn value(seed: u32, rank: u32, i: u64) -> i32 {
    let (a, b) = coefficients(seed, i);
    a + b * rank as i32
}

/// Sum over ranks `0..n` of [`value`].
#[inline(always)]
pub const fn sum(seed: u32, n: u32, i: u64) -> i32 {
    let (a, b) = coefficients(seed, i);
    n as i32 * a + b * (n as i32 * (n as i32 - 1) / 2)
}

/// Minimum over ranks `0..n` of [`value`].
#[inline(always)]
pub const fn min(seed: u32, n: u32, i: u64) -> i32 {
    let (a, b) = coefficients(seed, i);
    let last = b * (n as i32 - 1);
    a + if last < 0 { last } else { 0 }
}

/// Maximum over ranks `0..n` of [`value`].
#[inline(always)]
pub const fn max(seed: u32, n: u32, i: u64) -> i32 {
    let (a, b) = coefficients(seed, i);
    let last = b * (n as i32 - 1);
    a + if last > 0 { last } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms_match_brute_force_over_ranks() {
        for n in 1..=8u32 {
            for i in 0..2000u64 {
                let vals: std::vec::Vec<i32> = (0..n).map(|p| value(7, p, i)).collect();
                assert_eq!(sum(7, n, i), vals.iter().sum::<i32>());
                assert_eq!(min(7, n, i), *vals.iter().min().unwrap());
                assert_eq!(max(7, n, i), *vals.iter().max().unwrap());
                assert!(sum(7, n, i).abs() <= 60);
            }
        }
    }

    #[test]
    fn reading_one_rank_twice_changes_most_sums() {
        let n = 8;
        let changed = (0..1000u64)
            .filter(|&i| {
                let wrong: i32 = (0..n)
                    .map(|p| value(3, if p == 5 { 2 } else { p }, i))
                    .sum();
                wrong != sum(3, n, i)
            })
            .count();
        assert!(changed > 500, "{changed}");
    }
}
