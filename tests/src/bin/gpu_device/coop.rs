//! Checks of the `coop` kernels (`tests/kernels/src/coop.rs`): rank, size and vote of every
//! cooperative group, and which threads the warp-level `any` of each group reaches.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_coop(ctx: &Ctx) -> Result<Verdict> {
    let (threads, words) = (refs::COOP_PROBE_THREADS, refs::COOP_PROBE_WORDS);
    let out = ctx.poisoned::<u32>(words * threads as usize)?;
    ctx.run::<k::CoopProbe>(LaunchConfig::linear(1, threads), (out.as_mut_ptr(),))?;
    let got: Vec<u32> = ctx.download(&out, words * threads as usize)?;
    let want = refs::coop_probe_words();
    Ok(compare("rank/size/any words", &got, &want)
        .map(|()| "Thread, Tile<4>, Warp, Lanes, WarpSpan, Cta".into()))
}

/// `warp_any_orders` on one block of 128 threads: thread 70 raises the predicate, so Tile<4>
/// 68..=71, Warp 64..=95 and the half warp 64..=79 see it (bits 0, 1, 2).
pub fn check_warp_any(ctx: &Ctx) -> Result<Verdict> {
    let threads = 128u32;
    let out = ctx.poisoned::<u32>(threads as usize)?;
    ctx.run::<k::WarpAnyOrders>(LaunchConfig::linear(1, threads), (out.as_mut_ptr(),))?;
    let got: Vec<u32> = ctx.download(&out, threads as usize)?;
    let want: Vec<u32> = (0..threads)
        .map(|t| {
            u32::from((68..=71).contains(&t))
                | u32::from((64..=95).contains(&t)) << 1
                | u32::from((64..=79).contains(&t)) << 2
        })
        .collect();
    Ok(compare("any bits", &got, &want)
        .map(|()| "Tile<4>, Warp, Lanes: bar.warp.sync + vote.sync.any".into()))
}
