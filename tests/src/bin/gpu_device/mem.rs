//! Checks of the `mem` kernels (`tests/kernels/src/mem.rs`): ordered atomics that count
//! exactly, exchange chains, message passing through release/acquire and fences, 16-byte
//! vector accesses and constant loads.

use symcomm::Result;
use symcomm::launch::{Kernel, LaunchConfig};
use symcomm_device::mem::U32x4;
use symcomm_device::window::WindowHandle;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, compare, is_permutation};

use crate::harness::{Ctx, Verdict, ensure};

/// Runs the counter kernel `K` (`AtomicAddAcqRel`, `AtomicCasCounter`: every thread adds one
/// to a zeroed counter and records the value it replaced) on `blocks × t` threads.
/// It passes when the counter equals the number of threads and the replaced values are a
/// permutation of `0..threads`; the failures name the `increments` and say
/// `not_a_permutation`, the pass reports `passed` after the thread count.
fn check_counter<K: Kernel<Args = (*mut u32, *mut u32)>>(
    ctx: &Ctx,
    (blocks, t): (u32, u32),
    increments: &str,
    not_a_permutation: &str,
    passed: &str,
) -> Result<Verdict> {
    let n = (blocks * t) as usize;
    let (counter, olds) = (ctx.zeroed::<u32>(1)?, ctx.poisoned::<u32>(n)?);
    ctx.run::<K>(
        LaunchConfig::linear(blocks, t),
        (counter.as_mut_ptr(), olds.as_mut_ptr()),
    )?;
    let total = ctx.download::<u32>(&counter, 1)?[0];
    let olds: Vec<u32> = ctx.download(&olds, n)?;
    Ok(ensure(total as usize == n, || {
        format!("counter {total} after {n} {increments}")
    })
    .and_then(|()| {
        ensure(
            is_permutation(olds.iter().map(|&x| u64::from(x)).collect(), n),
            || not_a_permutation.into(),
        )
    })
    .map(|()| format!("{n} threads: {passed}")))
}

pub fn check_atomic_add(ctx: &Ctx) -> Result<Verdict> {
    check_counter::<k::AtomicAddAcqRel>(
        ctx,
        (64, 256),
        "increments",
        "old values are not a permutation of 0..n",
        "exact count, olds a permutation",
    )
}

pub fn check_red_add(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (64u32, 256u32);
    let n = u64::from(blocks * t);
    let (c32, c64, c64b) = (
        ctx.zeroed::<u32>(1)?,
        ctx.zeroed::<u64>(1)?,
        ctx.zeroed::<u64>(1)?,
    );
    ctx.run::<k::RedAddRelease>(
        LaunchConfig::linear(blocks, t),
        (c32.as_mut_ptr(), c64.as_mut_ptr(), c64b.as_mut_ptr()),
    )?;
    let got = [
        u64::from(ctx.download::<u32>(&c32, 1)?[0]),
        ctx.download::<u64>(&c64, 1)?[0],
        ctx.download::<u64>(&c64b, 1)?[0],
    ];
    let want = refs::red_add_totals(n);
    Ok(compare("counters", &got, &want)
        .map(|()| format!("{n} threads: red u32/u64 and atom.acquire u64 exact")))
}

pub fn check_atomic_cas(ctx: &Ctx) -> Result<Verdict> {
    check_counter::<k::AtomicCasCounter>(
        ctx,
        (16, 128),
        "CAS increments",
        "replaced values are not a permutation (or a thread gave up)",
        "CAS loop counts exactly",
    )
}

pub fn check_atomic_exch(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (32u32, 256u32);
    let n = (blocks * t) as usize;
    let (s32, o32, s64, o64) = (
        ctx.zeroed::<u32>(1)?,
        ctx.poisoned::<u32>(n)?,
        ctx.zeroed::<u64>(1)?,
        ctx.poisoned::<u64>(n)?,
    );
    ctx.run::<k::AtomicExchChain>(
        LaunchConfig::linear(blocks, t),
        (
            s32.as_mut_ptr(),
            o32.as_mut_ptr(),
            s64.as_mut_ptr(),
            o64.as_mut_ptr(),
        ),
    )?;
    let mut v32: Vec<u64> = ctx
        .download::<u32>(&o32, n)?
        .into_iter()
        .map(u64::from)
        .collect();
    v32.push(u64::from(ctx.download::<u32>(&s32, 1)?[0]));
    let mut v64: Vec<u64> = ctx.download::<u64>(&o64, n)?;
    v64.push(ctx.download::<u64>(&s64, 1)?[0]);
    Ok(ensure(is_permutation(v32, n + 1), || {
        "32-bit exchange chain lost or duplicated a value".into()
    })
    .and_then(|()| {
        ensure(is_permutation(v64, n + 1), || {
            "64-bit exchange chain lost or duplicated a value".into()
        })
    })
    .map(|()| format!("{n} threads: exchanges form one chain (32 and 64 bit)")))
}

pub fn check_message_pass(ctx: &Ctx) -> Result<Verdict> {
    let n = 64usize;
    let (data, flags, out) = (
        ctx.poisoned::<u32>(2 * n)?,
        ctx.zeroed::<u32>(2)?,
        ctx.poisoned::<u32>(2 + 2 * n)?,
    );
    ctx.run::<k::MessagePass>(
        LaunchConfig::linear(2, 32),
        (
            data.as_mut_ptr(),
            flags.as_mut_ptr(),
            out.as_mut_ptr(),
            n as u32,
            2_000_000_000u64,
        ),
    )?;
    let got: Vec<u32> = ctx.download(&out, 2 + 2 * n)?;
    let want = refs::message_pass_words(n);
    Ok(compare("codes + payload", &got, &want).map(|()| {
        "st.release.sys and fence.acq_rel.sys + relaxed store, seen through ld.acquire.sys".into()
    }))
}

pub fn check_vectors(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 10_000usize;
    let src: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let (s, a, b, c) = (
        ctx.upload(&src)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.poisoned::<U32x4>(n)?,
    );
    ctx.run::<k::VectorRoundtrip>(
        LaunchConfig::linear(40, 128),
        (
            s.as_ptr(),
            a.as_mut_ptr(),
            b.as_mut_ptr(),
            c.as_mut_ptr(),
            n as u64,
        ),
    )?;
    let ga: Vec<U32x4> = ctx.download(&a, n)?;
    let gb: Vec<U32x4> = ctx.download(&b, n)?;
    let gc: Vec<U32x4> = ctx.download(&c, n)?;
    Ok(compare("v4.u32", &ga, &src)
        .and_then(|()| compare("v4.f32 (bits)", &gb, &src))
        .and_then(|()| compare("v2.u64", &gc, &src))
        .map(|()| format!("{n} vectors through v4.u32, v4.f32, v2.u64")))
}

pub fn check_load_const(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 5000usize;
    let src: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let w = refs::sample_window(rng);
    let (s, o, wb, wo) = (
        ctx.upload(&src)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.upload(&[w])?,
        ctx.poisoned::<u64>(9)?,
    );
    ctx.run::<k::LoadConstCopy>(
        LaunchConfig::linear(20, 128),
        (
            s.as_ptr(),
            o.as_mut_ptr(),
            n as u64,
            WindowHandle::from_addr(wb.device_ptr()),
            wo.as_mut_ptr(),
        ),
    )?;
    let got: Vec<U32x4> = ctx.download(&o, n)?;
    let gw: Vec<u64> = ctx.download(&wo, 9)?;
    Ok(compare("ld.global.nc.v4", &got, &src)
        .and_then(|()| compare("Window via load_const", &gw, &refs::window_words(&w)))
        .map(|()| format!("{n} vectors and a 72-byte Window")))
}

pub fn check_store_low_if(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 4000usize;
    let src: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    let (s, o) = (ctx.upload(&src)?, ctx.poisoned::<u8>(16 * n)?);
    ctx.run::<k::StoreLowIfSlots>(
        LaunchConfig::linear(16, 128),
        (s.as_ptr(), o.as_mut_ptr(), n as u64),
    )?;
    let got: Vec<u8> = ctx.download(&o, 16 * n)?;
    Ok(compare(
        "predicated stores",
        &got,
        &refs::store_low_if_slots(&src, 0xff),
    )
    .map(|()| format!("{n} slots: @p st.global.u8/u16/u32/u64 wrote their bytes only when p held")))
}
