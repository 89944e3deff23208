//! Check of the `reduce` kernel (`tests/kernels/src/reduce.rs`): packed reductions of every
//! element type are bit-identical to the host's, including where the 16-bit rounding turns.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_device::mem::U32x4;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_reduce(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 4096usize;
    // Finite under every interpretation: clear the top exponent bit of each 16-bit half.
    let random_pack = |rng: &mut Rng| U32x4([0; 4].map(|_| rng.next_u32() & 0xbfff_bfff));
    let mut a: Vec<U32x4> = (0..n).map(|_| random_pack(rng)).collect();
    let mut b: Vec<U32x4> = (0..n).map(|_| random_pack(rng)).collect();
    // Where the f16 rounding turns: sums past the largest finite value (to ±infinity, or back
    // to 65504), subnormal sums, ties. The GPU rounds with `cvt.rn.f16.f32`, the host in
    // software: both must agree bit for bit. No NaN (the GPU's is canonical, the host keeps
    // the payload).
    let edges: [(u32, u32); 6] = [
        (0x7bff_fbff, 0x7bff_fbff), // 65504 + 65504 = inf; -65504 - 65504 = -inf
        (0x7bff_7bff, 0x3c00_0001), // 65504 + 1 rounds back to 65504; + min subnormal
        (0x7800_7bff, 0x7800_0010), // 32768 + 32768 = 65536: inf; 65504 + tiny
        (0x0001_03ff, 0x8001_0001), // subnormals: to zero; to the smallest normal
        (0x3f80_4000, 0x3f80_c000), // bf16: 1 + 1; 2 - 2 (and as f16)
        (0x3c01_3c00, 0x1000_1000), // f16 ties: 1 + 2^-11 to even (1), 1 + 2^-10 + 2^-11 up
    ];
    for (i, &(x, y)) in edges.iter().enumerate() {
        (a[i], b[i]) = (U32x4([x; 4]), U32x4([y; 4]));
    }
    let ops = k::REDUCE_OPS;
    let (ba, bb, bo) = (
        ctx.upload(&a)?,
        ctx.upload(&b)?,
        ctx.poisoned::<U32x4>(ops * n)?,
    );
    ctx.run::<k::ReducePacks>(
        LaunchConfig::linear(16, 128),
        (ba.as_ptr(), bb.as_ptr(), bo.as_mut_ptr(), n as u64),
    )?;
    let got: Vec<U32x4> = ctx.download(&bo, ops * n)?;
    let want = refs::reduce_packs_words(&a, &b);
    Ok(compare(
        "packed results (f16+, bf16+, f32+, f32 max, i32 min, u32 *, u64+, f64+)",
        &got,
        &want,
    )
    .map(|()| format!("{n} vector pairs × {ops} ops bit-identical to the host")))
}
