//! Host-side checking of collective results against the benchmark pattern
//! (`symcomm_gallery_kernels::pattern`): encoding and decoding elements, counting wrong ones,
//! and the same for the rows of the fused all-reduce + residual + RMSNorm.

use symcomm_device::reduce::{Bf16, F16};
use symcomm_gallery_kernels::pattern;

use crate::rmsnorm::{bf16_close, reference_row};
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

/// Little-endian bytes of the small integer `v` as an element of type `t` (what [`decode`]
/// reads back as `v`).
pub fn encode(t: DataType, v: i32) -> Vec<u8> {
    match t {
        DataType::F32 => (v as f32).to_le_bytes().to_vec(),
        DataType::I32 => v.to_le_bytes().to_vec(),
        DataType::Bf16 => Bf16::from_f32(v as f32).0.to_le_bytes().to_vec(),
        DataType::F16 => F16::from_f32(v as f32).0.to_le_bytes().to_vec(),
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

/// The first element of a fused result with a wrong value (bf16 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMismatch {
    /// Its index in the rows.
    pub index: usize,
    /// `h` (`residual_out`) as received, and as the reference has it.
    pub h: (u16, u16),
    /// `out` as received, and as the reference has it.
    pub out: (u16, u16),
}

/// The wrong values of a fused all-reduce + residual + RMSNorm result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowMismatches {
    /// Wrong values, `h` and `out` counted apart (up to two per element).
    pub count: usize,
    /// The first element with a wrong value.
    pub first: Option<RowMismatch>,
}

/// Checks the outputs `h` (`residual_out`) and `out` of a fused call over `ranks` ranks whose
/// input `x` was the pattern under `seed`, with `residual` rows and `weight` (bf16 bits; the
/// row width is `weight.len()`), against [`reference_row`]: `h` bit for bit, `out` within
/// [`bf16_close`]. An element missing from `h` or `out` is wrong (read as `0xffff`, a NaN).
pub fn fused_wrong(
    h: &[u16],
    out: &[u16],
    residual: &[u16],
    weight: &[u16],
    (seed, ranks): (u32, u32),
    eps: f32,
) -> RowMismatches {
    let mut m = RowMismatches::default();
    let hidden = weight.len().max(1);
    for (t, res) in residual.chunks(hidden).enumerate() {
        let row = t * hidden..t * hidden + res.len();
        let s: Vec<u16> = row
            .clone()
            .map(|i| Bf16::from_f32(pattern::sum(seed, ranks, i as u64) as f32).0)
            .collect();
        let (h_want, out_want) = reference_row(&s, res, weight, eps);
        for (k, i) in row.enumerate() {
            let got = |v: &[u16]| v.get(i).copied().unwrap_or(0xffff);
            let (h, out) = ((got(h), h_want[k]), (got(out), out_want[k]));
            let bad = usize::from(h.0 != h.1) + usize::from(!bf16_close(out.0, out.1));
            if bad != 0 && m.first.is_none() {
                m.first = Some(RowMismatch { index: i, h, out });
            }
            m.count += bad;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn fused_rows_are_checked_against_the_reference_and_missing_ones_are_wrong() {
        let (hidden, tokens, seed, ranks, eps) = (16, 3, 7, 4, 1e-6);
        let bf = |v: i32| Bf16::from_f32(v as f32).0;
        let residual: Vec<u16> = (0..tokens * hidden).map(|i| bf(i as i32 % 5)).collect();
        let weight: Vec<u16> = (0..hidden).map(|i| bf(1 + i as i32 % 3)).collect();
        let (mut h, mut out) = (Vec::new(), Vec::new());
        for (t, res) in residual.chunks(hidden).enumerate() {
            let s: Vec<u16> = (t * hidden..(t + 1) * hidden)
                .map(|i| bf(pattern::sum(seed, ranks, i as u64)))
                .collect();
            let (hr, yr) = reference_row(&s, res, &weight, eps);
            h.extend(hr);
            out.extend(yr);
        }
        let check =
            |h: &[u16], out: &[u16]| fused_wrong(h, out, &residual, &weight, (seed, ranks), eps);
        assert_eq!(check(&h, &out), RowMismatches::default());
        let (h_want, out_want) = (h[20], out[20]);
        h[20] ^= 1;
        out[20] = bf(1000);
        let m = check(&h, &out);
        assert_eq!(m.count, 2);
        let first = m.first.unwrap();
        assert_eq!(
            (first.index, first.h, first.out.1),
            (20, (h_want ^ 1, h_want), out_want)
        );
        // Rows of `h` that never arrived are wrong (two rows here, and `out` at 20 still).
        assert_eq!(check(&h[..hidden], &out).count, 2 * hidden + 1);
    }
}
