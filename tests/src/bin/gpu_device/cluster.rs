//! Check of the `cluster` kernel (`tests/kernels/src/cluster.rs`): every word of every round
//! crosses to the blocks of its cluster through `st.async` and `mbarrier`, for clusters of 2,
//! 4 and 8 blocks.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_cluster_exchange(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, warps, rounds) = (16usize, 4usize, 5usize);
    let mut shapes = Vec::new();
    for size in [2usize, 4, 8] {
        let input: Vec<u32> = (0..blocks * warps * rounds)
            .map(|_| rng.next_u32())
            .collect();
        let n_out = blocks * rounds * size * warps;
        let (inb, out, geo, status) = (
            ctx.upload(&input)?,
            ctx.poisoned::<u32>(n_out)?,
            ctx.poisoned::<u32>(2 * blocks)?,
            ctx.poisoned::<u32>(blocks)?,
        );
        ctx.run::<k::ClusterExchange>(
            LaunchConfig::linear(blocks as u32, 32 * warps as u32).with_cluster(size as u32),
            (
                inb.as_ptr(),
                out.as_mut_ptr(),
                geo.as_mut_ptr(),
                status.as_mut_ptr(),
                rounds as u32,
            ),
        )?;
        let want = refs::cluster_exchange(&input, blocks, warps, size, rounds);
        let want_geo: Vec<u32> = (0..blocks)
            .flat_map(|b| [(b % size) as u32, size as u32])
            .collect();
        let got: Vec<u32> = ctx.download(&out, n_out)?;
        let got_geo: Vec<u32> = ctx.download(&geo, 2 * blocks)?;
        let got_status: Vec<u32> = ctx.download(&status, blocks)?;
        let verdict = compare(&format!("clusters of {size}: words"), &got, &want)
            .and_then(|()| compare("rank, size", &got_geo, &want_geo))
            .and_then(|()| compare("wait codes", &got_status, &vec![0; blocks]));
        if let Err(e) = verdict {
            return Ok(Err(e));
        }
        shapes.push(size.to_string());
    }
    Ok(Ok(format!(
        "{blocks} blocks × {warps} warps, {rounds} rounds, clusters of {}: every word through st.async + mbarrier",
        shapes.join("/")
    )))
}
