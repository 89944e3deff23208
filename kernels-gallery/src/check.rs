//! Host-side checking of collective results against the benchmark pattern
//! (`symcomm_gallery_kernels::pattern`): decoding elements and counting wrong ones.

use symcomm_device::reduce::{Bf16, F16};
use symcomm_gallery_kernels::pattern;

use crate::types::{DataType, RedOp};

/// The `elem` code of the `bench_fill` kernel for `t`.
pub const fn fill_code(t: DataType) -> u32 {
    match t {
        DataType::F32 => 0,
        DataType::Bf16 => 1,
        DataType::F16 => 2,
        DataType::I32 => 3,
    }
}

/// Element `i` of `bytes` (little-endian elements of type `t`) as an `f64` (NaN stays NaN);
/// NaN as well for an element past the end of `bytes`.
pub fn decode(bytes: &[u8], t: DataType, i: usize) -> f64 {
    let s = t.size();
    let Some(b) = i.checked_mul(s).and_then(|at| bytes.get(at..at + s)) else {
        return f64::NAN;
    };
    match t {
        DataType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::Bf16 => f64::from(Bf16(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        DataType::F16 => f64::from(F16(u16::from_le_bytes([b[0], b[1]])).to_f32()),
    }
}

/// The reduction of the pattern over `n` ranks at element `i`.
pub fn reduced(op: RedOp, seed: u32, n: u32, i: u64) -> i32 {
    match op {
        RedOp::Sum => pattern::sum(seed, n, i),
        RedOp::Min => pattern::min(seed, n, i),
        RedOp::Max => pattern::max(seed, n, i),
    }
}

/// Number of elements of `got` (`count` elements of `t`) that differ from `want(i)`.
///
/// The pattern's values and their reductions are small integers, exact in every type, so the
/// tolerance is zero; a NaN (e.g. the 0x7f poison in f16) is always wrong, and so is an
/// element past the end of `got` (it was never received).
pub fn count_wrong(got: &[u8], t: DataType, count: usize, want: impl Fn(usize) -> i32) -> usize {
    find_wrong(got, t, count, want, 0).count
}

/// The wrong elements of a result: how many, and the first few as `(index, got, want)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mismatches {
    /// Number of wrong elements.
    pub count: usize,
    /// The first wrong elements (at most the number asked for), in index order.
    pub first: Vec<(usize, f64, i32)>,
}

/// [`count_wrong`] that also keeps the first `keep` wrong elements (for diagnostics).
pub fn find_wrong(
    got: &[u8],
    t: DataType,
    count: usize,
    want: impl Fn(usize) -> i32,
    keep: usize,
) -> Mismatches {
    let mut m = Mismatches::default();
    for i in 0..count {
        let (g, w) = (decode(got, t, i), want(i));
        if g.is_nan() || g != f64::from(w) {
            m.count += 1;
            if m.first.len() < keep {
                m.first.push((i, g, w));
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(t: DataType, v: i32) -> Vec<u8> {
        match t {
            DataType::F32 => (v as f32).to_le_bytes().to_vec(),
            DataType::I32 => v.to_le_bytes().to_vec(),
            DataType::Bf16 => Bf16::from_f32(v as f32).0.to_le_bytes().to_vec(),
            DataType::F16 => F16::from_f32(v as f32).0.to_le_bytes().to_vec(),
        }
    }

    #[test]
    fn exact_results_pass_and_poison_or_off_by_one_fails() {
        for t in DataType::ALL {
            let want = |i: usize| reduced(RedOp::Sum, 9, 8, i as u64);
            let mut buf: Vec<u8> = (0..100).flat_map(|i| encode(t, want(i))).collect();
            assert_eq!(count_wrong(&buf, t, 100, want), 0, "{t}");
            buf[3 * t.size()..4 * t.size()].copy_from_slice(&encode(t, want(3) + 1));
            for b in &mut buf[10 * t.size()..12 * t.size()] {
                *b = 0x7f; // the benchmark's poison byte
            }
            assert_eq!(count_wrong(&buf, t, 100, want), 3, "{t}");
            let m = find_wrong(&buf, t, 100, want, 2);
            assert_eq!(m.count, 3);
            assert_eq!(m.first.len(), 2);
            assert_eq!((m.first[0].0, m.first[0].2), (3, want(3)));
            assert_eq!(m.first[0].1, f64::from(want(3) + 1));
            assert_eq!(m.first[1].0, 10);
            // Elements `got` does not hold are missing, hence wrong (not a panic).
            assert_eq!(count_wrong(&buf[..98 * t.size()], t, 100, want), 5, "{t}");
            assert!(decode(&buf, t, usize::MAX).is_nan());
        }
    }
}
