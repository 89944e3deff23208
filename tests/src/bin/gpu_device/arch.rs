//! Checks of the `arch` kernels (`tests/kernels/src/arch.rs` and `geometry.rs`): launch
//! geometry, programmatic dependent launch, static and dynamic shared memory, warp ops, block
//! votes, timers and whole-block named barriers. Clusters and coops have their own checks.

use std::time::Instant;

use symcomm::Result;
use symcomm::cuda;
use symcomm::launch::LaunchConfig;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_geometry(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, threads) = (3u32, 64u32);
    let n = (blocks * threads) as usize;
    let out = ctx.poisoned::<u32>(8 * n)?;
    ctx.run::<k::Geometry>(LaunchConfig::linear(blocks, threads), (out.as_mut_ptr(),))?;
    let got: Vec<u32> = ctx.download(&out, 8 * n)?;
    let want = refs::geometry_words(blocks, threads);
    Ok(compare("geometry words", &got, &want).map(|()| format!("{n} threads × 8 words")))
}

/// Programmatic dependent launch: the consumer, launched with the attribute behind a producer
/// that allows it at once and then takes 200 µs, must run before the producer has written
/// (its early reads see the poison) and still see every value after its grid dependency
/// wait.
pub fn check_dependent_launch(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, threads) = (4u32, 128u32);
    let n = (blocks * threads) as usize;
    let value = 0x5eed_0001u32;
    let (src, dst, early) = (
        ctx.poisoned::<u32>(n)?,
        ctx.poisoned::<u32>(n)?,
        ctx.poisoned::<u32>(n)?,
    );
    let stream = cuda::Stream::new()?;
    let producer = ctx.module.kernel::<k::PdlProducer>()?;
    let consumer = ctx.module.kernel::<k::PdlConsumer>()?;
    let cfg = LaunchConfig::linear(blocks, threads);
    // SAFETY: the argument types are the kernels' (typed launches); every buffer holds one
    // u32 per thread and outlives the stream synchronisation below.
    unsafe {
        producer.launch(cfg, &stream, (src.as_mut_ptr(), value, 200_000u64))?;
        consumer.launch(
            cfg.with_dependent_launch(),
            &stream,
            (src.as_ptr(), dst.as_mut_ptr(), early.as_mut_ptr()),
        )?;
    }
    stream.synchronize()?;
    let got: Vec<u32> = ctx.download(&dst, n)?;
    if let Err(e) = compare("after the wait", &got, &vec![value; n]) {
        return Ok(Err(e));
    }
    let early: Vec<u32> = ctx.download(&early, n)?;
    let overlapped = early.iter().filter(|&&v| v == u32::MAX).count();
    if overlapped != n {
        return Ok(Err(format!(
            "only {overlapped} of {n} consumer threads ran before the producer wrote: the \
             dependent launch did not start early"
        )));
    }
    Ok(Ok(format!(
        "consumer started during the producer ({n} of {n} early reads saw the poison) and \
         read all {n} values after grid_dependency_wait"
    )))
}

/// `Stream::synchronize_asleep` returns only once the stream's work is done: a 5 ms kernel
/// must have written every value when it returns, and at least 5 ms must have passed.
pub fn check_synchronize_asleep(ctx: &Ctx) -> Result<Verdict> {
    let n = 256usize;
    let value = 0x5eed_0002u32;
    let out = ctx.poisoned::<u32>(n)?;
    let dev = symcomm::Device::open(ctx.dev as usize)?;
    let stream = dev.stream()?;
    let producer = ctx.module.kernel::<k::PdlProducer>()?;
    let delay_ns = 5_000_000u64;
    let t0 = Instant::now();
    // SAFETY: the argument types are the kernel's; `out` holds one u32 per thread and
    // outlives the wait below.
    unsafe {
        producer.launch(
            LaunchConfig::linear(2, 128),
            &stream,
            (out.as_mut_ptr(), value, delay_ns),
        )?
    };
    stream.synchronize_asleep()?;
    let waited = t0.elapsed();
    let got: Vec<u32> = ctx.download(&out, n)?;
    if let Err(e) = compare("after synchronize_asleep", &got, &vec![value; n]) {
        return Ok(Err(e));
    }
    if waited.as_nanos() < u128::from(delay_ns) {
        return Ok(Err(format!(
            "synchronize_asleep returned after {waited:?}, before the 5 ms kernel ended"
        )));
    }
    Ok(Ok(format!(
        "returned after {:.2} ms with all {n} values written",
        waited.as_secs_f64() * 1e3
    )))
}

pub fn check_smem_static(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (4usize, k::STATIC_SMEM_THREADS as usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let (inb, out) = (ctx.upload(&input)?, ctx.poisoned::<u32>(blocks * t)?);
    ctx.run::<k::SmemStaticReverse>(
        LaunchConfig::linear(blocks as u32, t as u32),
        (inb.as_ptr(), out.as_mut_ptr()),
    )?;
    let got: Vec<u32> = ctx.download(&out, blocks * t)?;
    let want = refs::reversed_per_block(&input, t);
    Ok(compare("reversed", &got, &want)
        .map(|()| format!("{blocks} blocks × {t} through a 1 KiB static array")))
}

pub fn check_smem_dynamic(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (3usize, 128usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let (inb, out, sizes) = (
        ctx.upload(&input)?,
        ctx.poisoned::<u32>(blocks * t)?,
        ctx.poisoned::<u32>(blocks)?,
    );
    let cfg = LaunchConfig {
        shared_mem_bytes: (t * 4) as u32,
        ..LaunchConfig::linear(blocks as u32, t as u32)
    };
    ctx.run::<k::SmemDynamicReverse>(cfg, (inb.as_ptr(), out.as_mut_ptr(), sizes.as_mut_ptr()))?;
    let got: Vec<u32> = ctx.download(&out, blocks * t)?;
    let want = refs::reversed_per_block(&input, t);
    let got_sizes: Vec<u32> = ctx.download(&sizes, blocks)?;
    Ok(compare("reversed", &got, &want)
        .and_then(|()| {
            compare(
                "dynamic_shared_size",
                &got_sizes,
                &vec![(t * 4) as u32; blocks],
            )
        })
        .map(|()| format!("{blocks} blocks × {t}, {} B dynamic", t * 4)))
}

pub fn check_warp_ops(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (2usize, 64usize);
    let n = blocks * t;
    let input = refs::warp_ops_input(rng, n);
    let (inb, out) = (
        ctx.upload(&input)?,
        ctx.poisoned::<u32>(k::WARP_OPS_WORDS * n)?,
    );
    ctx.run::<k::WarpOps>(
        LaunchConfig::linear(blocks as u32, t as u32),
        (inb.as_ptr(), out.as_mut_ptr()),
    )?;
    let got: Vec<u32> = ctx.download(&out, k::WARP_OPS_WORDS * n)?;
    let want = refs::warp_ops_words(&input);
    Ok(compare("warp op words", &got, &want).map(|()| {
        format!(
            "{n} threads: shfl idx/xor/up/down (32+64-bit), ballot, all, any, lanemask, activemask"
        )
    }))
}

pub fn check_block_votes(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (2usize, 128usize);
    let input = refs::block_votes_input(rng, blocks * t);
    let (inb, out) = (ctx.upload(&input)?, ctx.poisoned::<u32>(3 * blocks)?);
    ctx.run::<k::BlockVotes>(
        LaunchConfig::linear(blocks as u32, t as u32),
        (inb.as_ptr(), out.as_mut_ptr()),
    )?;
    let got: Vec<u32> = ctx.download(&out, 3 * blocks)?;
    let want = refs::block_votes_words(&input, t);
    Ok(compare("count/or/named-or", &got, &want)
        .map(|()| "sync_threads_count, sync_threads_or, bar.red.or on barrier 1".into()))
}

pub fn check_timers(ctx: &Ctx) -> Result<Verdict> {
    let n = 64usize;
    let out = ctx.poisoned::<u64>(4 * n)?;
    let t = Instant::now();
    ctx.run::<k::Timers>(LaunchConfig::linear(2, 32), (out.as_mut_ptr(),))?;
    let host_ns = t.elapsed().as_nanos() as u64;
    let got: Vec<u64> = ctx.download(&out, 4 * n)?;
    for i in 0..n {
        let [t0, t1, c0, c1] = [got[4 * i], got[4 * i + 1], got[4 * i + 2], got[4 * i + 3]];
        if t0 == 0 || t0 == u64::MAX || t1 <= t0 || c1 <= c0 || t1 - t0 > host_ns {
            return Ok(Err(format!(
                "thread {i}: globaltimer {t0} -> {t1}, clock64 {c0} -> {c1} (launch took {host_ns} ns)"
            )));
        }
    }
    let tick = (0..n)
        .map(|i| got[4 * i + 1] - got[4 * i])
        .min()
        .unwrap_or(0);
    Ok(Ok(format!(
        "{n} threads: globaltimer and clock64 strictly increase (smallest tick seen {tick} ns)"
    )))
}

/// `block_named_barrier` with a partial last warp (80 threads: arrive count rounded to 96)
/// and with whole warps (128): every `out[t]` is `value ^ (t % 32)`.
pub fn check_block_named_barrier(ctx: &Ctx) -> Result<Verdict> {
    for threads in [80u32, 128] {
        let out = ctx.poisoned::<u32>(threads as usize)?;
        let v = 0x5a5a_0000u32;
        ctx.run::<k::BlockNamedBarrier>(LaunchConfig::linear(1, threads), (out.as_mut_ptr(), v))?;
        let got: Vec<u32> = ctx.download(&out, threads as usize)?;
        let want: Vec<u32> = (0..threads).map(|t| v ^ (t % 32)).collect();
        if let Err(e) = compare(&format!("{threads} threads"), &got, &want) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(
        "bar.arrive/bar.sync with n = 0 (whole block), 80 and 128 threads".into(),
    ))
}
