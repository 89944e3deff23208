//! Checks of the `barrier` kernels (`tests/kernels/src/barrier.rs`): LSA barrier rounds on a
//! team of one whose epochs persist across launches, two "ranks" publishing data through a
//! real flat VA ([`FlatVa`]) with block and warp coops, and a peer that never arrives (timeout,
//! and abort through the flag).

use std::sync::Arc;
use std::time::{Duration, Instant};

use symcomm::Result;
use symcomm::cuda::vmm::Shareable;
use symcomm::cuda::{Mapping, PhysicalMem, VaRange};
use symcomm::launch::LaunchConfig;
use symcomm_device::comm::LsaBarrierHandle;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, compare};

use crate::harness::{Ctx, Verdict, ensure};

pub fn check_barrier_team1(ctx: &Ctx) -> Result<Verdict> {
    let blocks = 4u32;
    let rounds = 5u32;
    let words = LsaBarrierHandle::buffer_bytes(blocks, 1) / 4;
    let res = ctx.zeroed::<u32>(words)?;
    let comm = refs::lsa_comm(res.device_ptr(), 1, 0, 1, blocks);
    for launch in 1..=2u32 {
        let out = ctx.poisoned::<u32>(2 * blocks as usize)?;
        ctx.run::<k::BarrierRounds>(
            LaunchConfig::linear(blocks, 128),
            (comm, out.as_mut_ptr(), rounds, 1_000_000_000u64),
        )?;
        let got: Vec<u32> = ctx.download(&out, 2 * blocks as usize)?;
        let want = refs::barrier_rounds_words(blocks, launch, rounds);
        if let Err(e) = compare(&format!("launch {launch}: codes and epochs"), &got, &want) {
            return Ok(Err(e));
        }
    }
    let state: Vec<u32> = ctx.download(&res, words)?;
    let persisted = &state[blocks as usize..2 * blocks as usize];
    Ok(compare(
        "persisted unicast epochs",
        persisted,
        &vec![2 * rounds; blocks as usize],
    )
    .map(|()| {
        format!(
            "{blocks} barriers × {rounds} rounds × 2 launches; epochs persisted in device memory"
        )
    }))
}

/// Two 2 MiB memories mapped 4 GiB apart in one VA range: a real flat VA for two LSA ranks.
struct FlatVa {
    _maps: [Mapping; 2],
    base: u64,
}

fn flat_va(ctx: &Ctx) -> Result<FlatVa> {
    let slot = 4u64 << 30;
    let va = VaRange::reserve(2 * slot as usize, 0)?;
    let mem0: Arc<PhysicalMem> = PhysicalMem::new(ctx.dev, 2 << 20, Shareable::No)?;
    let mem1 = PhysicalMem::new(ctx.dev, 2 << 20, Shareable::No)?;
    let m0 = Mapping::new(&va, 0, &mem0, &[ctx.dev])?;
    let m1 = Mapping::new(&va, slot as usize, &mem1, &[ctx.dev])?;
    let base = va.base();
    ctx.fill(base, (2 << 20) / 4, 0)?;
    ctx.fill(base + slot, (2 << 20) / 4, 0)?;
    Ok(FlatVa {
        _maps: [m0, m1],
        base,
    })
}

pub fn check_barrier_pair(ctx: &Ctx) -> Result<Verdict> {
    let va = flat_va(ctx)?;
    let comm = refs::lsa_comm(va.base, 1, 0, 2, 1);
    let rounds = 50u32;
    let mut detail = vec![];
    for (launch, (coop_kind, name)) in [(0u32, "Cta"), (1, "Warp")].into_iter().enumerate() {
        let out = ctx.poisoned::<u32>(2 * k::BARRIER_PAIR_WORDS)?;
        ctx.run::<k::BarrierPair>(
            LaunchConfig::linear(2, 128),
            (
                comm,
                out.as_mut_ptr(),
                rounds,
                4096u64,
                2_000_000_000u64,
                coop_kind,
            ),
        )?;
        let got: Vec<u32> = ctx.download(&out, 2 * k::BARRIER_PAIR_WORDS)?;
        let want = refs::barrier_pair_words(launch as u32, rounds);
        if let Err(e) = compare(
            &format!("{name} coop: [code, mismatch, epoch, rounds] per rank"),
            &got,
            &want,
        ) {
            return Ok(Err(e));
        }
        detail.push(name);
    }
    // Persisted unicast epoch (word n + 0 = 1) of each rank's buffer.
    let e0 = ctx.read_u32(va.base, 8)?;
    let e1 = ctx.read_u32(va.base + (4 << 30), 8)?;
    Ok(compare("persisted epochs (rank 0, rank 1)", &[e0[1], e1[1]], &[4 * rounds, 4 * rounds])
        .map(|()| format!("2 ranks in a 4 GiB-stride flat VA, {rounds} publish rounds each with {} coops; data seen after acquire", detail.join(" and "))))
}

/// Runs `barrier_lonely` (one block of an LSA team of two whose rank 1 never arrives) with
/// `timeout_ns`, with a raised abort flag when `abort`: the result code, the wait's duration
/// on the device (ns) and the launch's on the host.
fn run_lonely(ctx: &Ctx, timeout_ns: u64, abort: bool) -> Result<(u32, u64, Duration)> {
    let res = ctx.zeroed::<u32>(LsaBarrierHandle::buffer_bytes(1, 2) / 4)?;
    let flag = ctx.upload(&[1u32])?;
    let mut comm = refs::lsa_comm(res.device_ptr(), 0, 0, 2, 1);
    if abort {
        comm.abort_flag = flag.device_ptr();
    }
    let out = ctx.poisoned::<u32>(3)?;
    let t = Instant::now();
    ctx.run::<k::BarrierLonely>(
        LaunchConfig::linear(1, 64),
        (comm, out.as_mut_ptr(), timeout_ns),
    )?;
    let host = t.elapsed();
    let got: Vec<u32> = ctx.download(&out, 3)?;
    Ok((got[0], refs::lonely_elapsed_ns(&got), host))
}

pub fn check_barrier_timeout(ctx: &Ctx) -> Result<Verdict> {
    let timeout = 50_000_000u64;
    let (code, dt, host) = run_lonely(ctx, timeout, false)?;
    Ok(ensure(code == 1, || {
        format!("result code {code} (expected 1 = timeout)")
    })
    .and_then(|()| {
        ensure(dt >= timeout && dt < 20 * timeout, || {
            format!("waited {dt} ns for a {timeout} ns timeout")
        })
    })
    .map(|()| {
        format!(
            "peer never arrives: Timeout after {:.1} ms (device), {:.1} ms launch",
            dt as f64 / 1e6,
            host.as_secs_f64() * 1e3
        )
    }))
}

pub fn check_barrier_abort(ctx: &Ctx) -> Result<Verdict> {
    // The timeout is a safety net only: the abort must end the wait first.
    let (code, dt, _) = run_lonely(ctx, 10_000_000_000, true)?;
    Ok(ensure(code == 2, || {
        format!("result code {code} (expected 2 = aborted)")
    })
    .and_then(|()| ensure(dt < 1_000_000_000, || format!("abort took {dt} ns")))
    .map(|()| {
        format!(
            "raised abort flag ends the wait: Aborted after {:.3} ms",
            dt as f64 / 1e6
        )
    }))
}
