//! Check of the `ll` kernel (`tests/kernels/src/ll.rs`): a round of LL lines between two
//! blocks delivers every payload, and stale and unwritten lines are never accepted.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_device::util::rolling_le;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare};

use crate::harness::{Ctx, Verdict, ensure};

pub fn check_ll(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 256usize;
    // Lines hold junk from the previous round: never accepted in this round.
    let (epoch, old, data) = refs::ll_inputs(rng, n);
    let stale = epoch - 1;
    let (lines, bd, got, codes) = (
        ctx.upload(&old)?,
        ctx.upload(&data)?,
        ctx.poisoned::<u64>(n)?,
        ctx.poisoned::<u32>(n + 1)?,
    );
    let (timeout, short) = (2_000_000_000u64, 1_000_000u64);
    ctx.run::<k::LlRoundtrip>(
        LaunchConfig::linear(2, 128),
        (
            lines.as_mut_ptr(),
            bd.as_ptr(),
            got.as_mut_ptr(),
            codes.as_mut_ptr(),
            n as u32,
            epoch,
            timeout,
            short,
        ),
    )?;
    let g: Vec<u64> = ctx.download(&got, n)?;
    let c: Vec<u32> = ctx.download(&codes, n + 1)?;
    let want_codes = refs::ll_codes(n);
    let rolled = rolling_le(stale, epoch);
    Ok(compare("payloads", &g, &data)
        .and_then(|()| {
            compare(
                "result codes (last: unwritten line must time out)",
                &c,
                &want_codes,
            )
        })
        .and_then(|()| ensure(rolled, || "epoch order".into()))
        .map(|()| format!("{n} lines in one round; stale and unwritten lines rejected")))
}
