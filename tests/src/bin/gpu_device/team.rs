//! Check of the `team` kernel (`tests/kernels/src/team.rs`): the team facts the GPU computes
//! for several communicator shapes (passed by value) equal the host's.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_device::comm::DevComm;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_team(ctx: &Ctx) -> Result<Verdict> {
    let shapes = [
        (8, 5, 4),
        (16, 13, 8),
        (1, 0, 1),
        (6, 3, 3),
        (2, 1, 2),
        (12, 7, 4),
        (24, 23, 8),
        (9, 0, 3),
    ];
    for (n, rank, lsa) in shapes {
        let comm = DevComm::new(rank, n, rank % lsa, lsa);
        let out = ctx.poisoned::<i32>(k::TEAM_PROBE_WORDS)?;
        ctx.run::<k::TeamProbe>(LaunchConfig::linear(1, 32), (comm, out.as_mut_ptr()))?;
        let got: Vec<i32> = ctx.download(&out, k::TEAM_PROBE_WORDS)?;
        if let Err(e) = compare(
            &format!("team facts for n={n} rank={rank} lsa={lsa}"),
            &got,
            &refs::team_probe_values(&comm),
        ) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(format!(
        "{} communicator shapes: world/LSA/rail teams, conversions, factors, DevComm by value",
        shapes.len()
    )))
}
