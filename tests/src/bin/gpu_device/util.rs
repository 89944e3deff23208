//! Check of the `util` kernel (`tests/kernels/src/util.rs`): the fast division by a
//! precomputed reciprocal is exact for every divisor 1..=1024 (edge and random dividends) and
//! for large divisors.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_div(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (mut xs, mut ds) = (vec![], vec![]);
    for d in 1u32..=1024 {
        let top = u32::MAX / d;
        let mut push = |x: u32| {
            xs.push(x);
            ds.push(d);
        };
        for x in [
            0,
            1,
            d - 1,
            d,
            d + 1,
            u32::MAX,
            u32::MAX - 1,
            top * d,
            (top * d).wrapping_sub(1),
            (top / 2) * d + d - 1,
        ] {
            push(x);
        }
        for _ in 0..22 {
            push(rng.next_u32());
        }
    }
    for d in [65_535u32, 65_536, 1 << 31, u32::MAX] {
        for x in [0u32, 1, d - 1, d, u32::MAX] {
            xs.push(x);
            ds.push(d);
        }
    }
    let n = xs.len();
    let (bx, bd, bq, br) = (
        ctx.upload(&xs)?,
        ctx.upload(&ds)?,
        ctx.poisoned::<u32>(n)?,
        ctx.poisoned::<u32>(n)?,
    );
    ctx.run::<k::DivFast>(
        LaunchConfig::linear(64, 256),
        (
            bx.as_ptr(),
            bd.as_ptr(),
            bq.as_mut_ptr(),
            br.as_mut_ptr(),
            n as u64,
        ),
    )?;
    let q: Vec<u32> = ctx.download(&bq, n)?;
    let r: Vec<u32> = ctx.download(&br, n)?;
    let (wq, wr) = refs::div_words(&xs, &ds);
    Ok(compare("quotients", &q, &wq)
        .and_then(|()| compare("remainders", &r, &wr))
        .map(|()| format!("{n} divisions (divisors 1..=1024 and large) exact on the GPU")))
}
