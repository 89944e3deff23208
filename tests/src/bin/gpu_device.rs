//! `gpu_device`: runs the device-API test kernels on ONE GPU and checks every result.
//!
//! Usage: `gpu_device [--device N]` (device defaults to `$LOCAL_RANK`, else 0).
//!
//! Each check poisons its outputs first (0xFF bytes), fills inputs from a fixed-seed generator,
//! launches, synchronises and compares every element with a host reference
//! ([`symcomm_tests::reference`], shared with the CPU emulator tests; mostly the same
//! `symcomm-device` functions running on the CPU). It prints one line per check and a final
//! `N passed, M failed` line; the exit status is non-zero when any check failed. Without a CUDA
//! driver it prints `gpu_device: skipped: ...` and exits 0.
//!
//! Safety rules of the GPU test node: the multimem kernels are only **loaded** (JIT-compiled
//! with the module) and looked up, never launched, and nothing here creates a multicast object.
//! Every spin-wait in the kernels is timed, so no launch can hang.

use std::ffi::c_void;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use symcomm::cuda::vmm::Shareable;
use symcomm::cuda::{self, Mapping, PhysicalMem, VaRange, VmmBuffer};
use symcomm::launch::{LaunchConfig, Module, synchronize};
use symcomm::{Error, Result};
use symcomm_device::comm::{DevComm, LsaBarrierHandle, ResourceWindow};
use symcomm_device::mem::U32x4;
use symcomm_device::ptr::SymPtr;
use symcomm_device::util::rolling_le;
use symcomm_device::window::{Window, add4g};
use symcomm_tests::kernels;
use symcomm_tests::reference::{self as refs, Rng, compare, is_permutation};

// Output layouts of the test kernels (documented on each kernel in `tests/kernels/src/lib.rs`,
// which exports them).
use symcomm_test_kernels as layout;

/// The verdict of one check: `Ok(detail)` passed, `Err(detail)` failed.
type Verdict = std::result::Result<String, String>;

/// One kernel argument: a pointer to the value (for `cuLaunchKernel`) and its size (checked
/// against the PTX parameter list before launching). The value must outlive the launch call.
struct Arg(*mut c_void, usize);

fn p<T>(v: &mut T) -> Arg {
    Arg((v as *mut T).cast(), size_of::<T>())
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

struct Ctx {
    dev: i32,
    module: Module,
}

impl Ctx {
    /// A device buffer of `n` elements of `T`, poisoned with 0xFF bytes.
    fn poisoned<T>(&self, n: usize) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, (n * size_of::<T>()).max(16))?;
        b.fill_bytes(0xff)?;
        Ok(b)
    }

    /// A device buffer of `n` elements of `T`, zeroed.
    fn zeroed<T>(&self, n: usize) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, (n * size_of::<T>()).max(16))?;
        b.fill_bytes(0)?;
        Ok(b)
    }

    /// A device buffer holding `data`.
    fn upload<T: Copy>(&self, data: &[T]) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, size_of_val(data).max(16))?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    fn download<T: Copy + Default>(&self, b: &VmmBuffer, n: usize) -> Result<Vec<T>> {
        let mut v = vec![T::default(); n];
        b.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Launches kernel `name` and waits for it (errors name the failing driver call). The
    /// argument sizes must match the parameter list the PTX declares.
    fn run(&self, name: &str, cfg: LaunchConfig, args: &mut [Arg]) -> Result<()> {
        let declared = self.module.param_sizes(name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot read the parameters of `{name}` from the PTX"
            ))
        })?;
        let passed: Vec<usize> = args.iter().map(|a| a.1).collect();
        if declared != passed {
            return Err(Error::InvalidArgument(format!(
                "kernel `{name}` declares parameters of {declared:?} bytes, the test passes {passed:?}"
            )));
        }
        let f = self.module.function(name)?;
        let mut ptrs: Vec<*mut c_void> = args.iter().map(|a| a.0).collect();
        // SAFETY: one pointer per parameter of `name` with the declared size (checked above),
        // each to a value of the parameter's Rust type, and buffers sized as the kernel's
        // `# Safety` section asks; the values outlive this call.
        unsafe { f.launch(cfg, std::ptr::null_mut(), &mut ptrs)? };
        synchronize()
    }

    /// `dst[0..n] = value` on any device memory (also custom VA mappings).
    fn fill(&self, dst: u64, n: u64, value: u32) -> Result<()> {
        let (mut d, mut n, mut v) = (dst, n, value);
        self.run(
            "fill_u32",
            LaunchConfig::linear(64, 256),
            &mut [p(&mut d), p(&mut n), p(&mut v)],
        )
    }

    /// Copies `n` u32 from any device memory into a fresh host vector.
    fn read_u32(&self, src: u64, n: usize) -> Result<Vec<u32>> {
        let out = self.poisoned::<u32>(n)?;
        let (mut s, mut d, mut k) = (src, out.device_ptr(), n as u64);
        self.run(
            "copy_u32",
            LaunchConfig::linear(64, 256),
            &mut [p(&mut s), p(&mut d), p(&mut k)],
        )?;
        self.download(&out, n)
    }
}

// ---------------------------------------------------------------------------------------
// Checks. Each returns Ok(verdict), or Err for a CUDA/driver error (reported as a failure).

/// Runs before any launch: every kernel must already be on the device, so that no first
/// launch waits for the kernels running in the context (under lazy loading, the driver's
/// default, a kernel would be loaded only when first used; the suite runs this with
/// `CUDA_MODULE_LOADING=LAZY`).
fn check_module_load(ctx: &Ctx) -> Result<Verdict> {
    let mut unloaded = Vec::new();
    for name in kernels::ENTRY_POINTS {
        if !ctx.module.function(name)?.is_loaded()? {
            unloaded.push(*name);
        }
    }
    let lazy = std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "default".into());
    Ok(ensure(unloaded.is_empty(), || {
        format!("not loaded before their first launch: {unloaded:?}")
    })
    .map(|()| {
        format!(
            "{} kernels JIT-loaded, found and on the device before any launch \
             (CUDA_MODULE_LOADING={lazy}), multimem ones included (never launched)",
            kernels::ENTRY_POINTS.len()
        )
    }))
}

fn check_geometry(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, threads) = (3u32, 64u32);
    let n = (blocks * threads) as usize;
    let out = ctx.poisoned::<u32>(8 * n)?;
    let mut o = out.device_ptr();
    ctx.run(
        "geometry",
        LaunchConfig::linear(blocks, threads),
        &mut [p(&mut o)],
    )?;
    let got: Vec<u32> = ctx.download(&out, 8 * n)?;
    let want = refs::geometry_words(blocks, threads);
    Ok(compare("geometry words", &got, &want).map(|()| format!("{n} threads × 8 words")))
}

fn check_smem_static(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (4usize, layout::STATIC_SMEM_THREADS as usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let (inb, out) = (ctx.upload(&input)?, ctx.poisoned::<u32>(blocks * t)?);
    let (mut a, mut b) = (inb.device_ptr(), out.device_ptr());
    ctx.run(
        "smem_static_reverse",
        LaunchConfig::linear(blocks as u32, t as u32),
        &mut [p(&mut a), p(&mut b)],
    )?;
    let got: Vec<u32> = ctx.download(&out, blocks * t)?;
    let want = refs::reversed_per_block(&input, t);
    Ok(compare("reversed", &got, &want)
        .map(|()| format!("{blocks} blocks × {t} through a 1 KiB static array")))
}

fn check_cluster_exchange(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
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
        let (mut a, mut b, mut g, mut st) = (
            inb.device_ptr(),
            out.device_ptr(),
            geo.device_ptr(),
            status.device_ptr(),
        );
        let mut r = rounds as u32;
        ctx.run(
            "cluster_exchange",
            LaunchConfig::linear(blocks as u32, 32 * warps as u32).with_cluster(size as u32),
            &mut [p(&mut a), p(&mut b), p(&mut g), p(&mut st), p(&mut r)],
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

fn check_smem_dynamic(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (3usize, 128usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let (inb, out, sizes) = (
        ctx.upload(&input)?,
        ctx.poisoned::<u32>(blocks * t)?,
        ctx.poisoned::<u32>(blocks)?,
    );
    let (mut a, mut b, mut s) = (inb.device_ptr(), out.device_ptr(), sizes.device_ptr());
    let cfg = LaunchConfig {
        shared_mem_bytes: (t * 4) as u32,
        ..LaunchConfig::linear(blocks as u32, t as u32)
    };
    ctx.run(
        "smem_dynamic_reverse",
        cfg,
        &mut [p(&mut a), p(&mut b), p(&mut s)],
    )?;
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

fn check_warp_ops(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (2usize, 64usize);
    let n = blocks * t;
    let input = refs::warp_ops_input(rng, n);
    let (inb, out) = (
        ctx.upload(&input)?,
        ctx.poisoned::<u32>(layout::WARP_OPS_WORDS * n)?,
    );
    let (mut a, mut b) = (inb.device_ptr(), out.device_ptr());
    ctx.run(
        "warp_ops",
        LaunchConfig::linear(blocks as u32, t as u32),
        &mut [p(&mut a), p(&mut b)],
    )?;
    let got: Vec<u32> = ctx.download(&out, layout::WARP_OPS_WORDS * n)?;
    let want = refs::warp_ops_words(&input);
    Ok(compare("warp op words", &got, &want).map(|()| {
        format!(
            "{n} threads: shfl idx/xor/up/down (32+64-bit), ballot, all, any, lanemask, activemask"
        )
    }))
}

fn check_block_votes(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let (blocks, t) = (2usize, 128usize);
    let input = refs::block_votes_input(rng, blocks * t);
    let (inb, out) = (ctx.upload(&input)?, ctx.poisoned::<u32>(3 * blocks)?);
    let (mut a, mut b) = (inb.device_ptr(), out.device_ptr());
    ctx.run(
        "block_votes",
        LaunchConfig::linear(blocks as u32, t as u32),
        &mut [p(&mut a), p(&mut b)],
    )?;
    let got: Vec<u32> = ctx.download(&out, 3 * blocks)?;
    let want = refs::block_votes_words(&input, t);
    Ok(compare("count/or/named-or", &got, &want)
        .map(|()| "sync_threads_count, sync_threads_or, bar.red.or on barrier 1".into()))
}

fn check_timers(ctx: &Ctx) -> Result<Verdict> {
    let n = 64usize;
    let out = ctx.poisoned::<u64>(4 * n)?;
    let mut o = out.device_ptr();
    let t = Instant::now();
    ctx.run("timers", LaunchConfig::linear(2, 32), &mut [p(&mut o)])?;
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

/// Programmatic dependent launch: the consumer, launched with the attribute behind a producer
/// that allows it at once and then takes 200 µs, must run before the producer has written
/// (its early reads see the poison) and still see every value after its grid dependency
/// wait.
fn check_dependent_launch(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, threads) = (4u32, 128u32);
    let n = (blocks * threads) as usize;
    let value = 0x5eed_0001u32;
    let (src, dst, early) = (
        ctx.poisoned::<u32>(n)?,
        ctx.poisoned::<u32>(n)?,
        ctx.poisoned::<u32>(n)?,
    );
    let stream = cuda::Stream::new()?;
    let producer = ctx.module.function("pdl_producer")?;
    let consumer = ctx.module.function("pdl_consumer")?;
    let cfg = LaunchConfig::linear(blocks, threads);
    // SAFETY: the argument types match the kernels; every buffer holds one u32 per thread
    // and outlives the stream synchronisation below.
    unsafe {
        producer.launch_with(cfg, stream.raw(), (src.device_ptr(), value, 200_000u64))?;
        consumer.launch_with(
            cfg.with_dependent_launch(),
            stream.raw(),
            (src.device_ptr(), dst.device_ptr(), early.device_ptr()),
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

fn check_coop(ctx: &Ctx) -> Result<Verdict> {
    let (threads, words) = (refs::COOP_PROBE_THREADS, refs::COOP_PROBE_WORDS);
    let out = ctx.poisoned::<u32>(words * threads as usize)?;
    let mut o = out.device_ptr();
    ctx.run(
        "coop_probe",
        LaunchConfig::linear(1, threads),
        &mut [p(&mut o)],
    )?;
    let got: Vec<u32> = ctx.download(&out, words * threads as usize)?;
    let want = refs::coop_probe_words();
    Ok(compare("rank/size/any words", &got, &want)
        .map(|()| "Thread, Tile<4>, Warp, Lanes, WarpSpan, Cta".into()))
}

/// `warp_any_orders` on one block of 128 threads: thread 70 raises the predicate, so Tile<4>
/// 68..=71, Warp 64..=95 and the half warp 64..=79 see it (bits 0, 1, 2).
fn check_warp_any(ctx: &Ctx) -> Result<Verdict> {
    let threads = 128u32;
    let out = ctx.poisoned::<u32>(threads as usize)?;
    let mut o = out.device_ptr();
    ctx.run(
        "warp_any_orders",
        LaunchConfig::linear(1, threads),
        &mut [p(&mut o)],
    )?;
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

/// `block_named_barrier` with a partial last warp (80 threads: arrive count rounded to 96)
/// and with whole warps (128): every `out[t]` is `value ^ (t % 32)`.
fn check_block_named_barrier(ctx: &Ctx) -> Result<Verdict> {
    for threads in [80u32, 128] {
        let out = ctx.poisoned::<u32>(threads as usize)?;
        let (mut o, mut v) = (out.device_ptr(), 0x5a5a_0000u32);
        ctx.run(
            "block_named_barrier",
            LaunchConfig::linear(1, threads),
            &mut [p(&mut o), p(&mut v)],
        )?;
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

fn check_atomic_add(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (64u32, 256u32);
    let n = (blocks * t) as usize;
    let (counter, olds) = (ctx.zeroed::<u32>(1)?, ctx.poisoned::<u32>(n)?);
    let (mut c, mut o) = (counter.device_ptr(), olds.device_ptr());
    ctx.run(
        "atomic_add_acq_rel",
        LaunchConfig::linear(blocks, t),
        &mut [p(&mut c), p(&mut o)],
    )?;
    let total: Vec<u32> = ctx.download(&counter, 1)?;
    let olds: Vec<u32> = ctx.download(&olds, n)?;
    Ok(ensure(total[0] as usize == n, || {
        format!("counter {} after {n} increments", total[0])
    })
    .and_then(|()| {
        ensure(
            is_permutation(olds.iter().map(|&x| u64::from(x)).collect(), n),
            || "old values are not a permutation of 0..n".into(),
        )
    })
    .map(|()| format!("{n} threads: exact count, olds a permutation")))
}

fn check_red_add(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (64u32, 256u32);
    let n = u64::from(blocks * t);
    let (c32, c64, c64b) = (
        ctx.zeroed::<u32>(1)?,
        ctx.zeroed::<u64>(1)?,
        ctx.zeroed::<u64>(1)?,
    );
    let (mut a, mut b, mut c) = (c32.device_ptr(), c64.device_ptr(), c64b.device_ptr());
    ctx.run(
        "red_add_release",
        LaunchConfig::linear(blocks, t),
        &mut [p(&mut a), p(&mut b), p(&mut c)],
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

fn check_atomic_cas(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (16u32, 128u32);
    let n = (blocks * t) as usize;
    let (counter, olds) = (ctx.zeroed::<u32>(1)?, ctx.poisoned::<u32>(n)?);
    let (mut c, mut o) = (counter.device_ptr(), olds.device_ptr());
    ctx.run(
        "atomic_cas_counter",
        LaunchConfig::linear(blocks, t),
        &mut [p(&mut c), p(&mut o)],
    )?;
    let total = ctx.download::<u32>(&counter, 1)?[0];
    let olds: Vec<u32> = ctx.download(&olds, n)?;
    Ok(ensure(total as usize == n, || {
        format!("counter {total} after {n} CAS increments")
    })
    .and_then(|()| {
        ensure(
            is_permutation(olds.iter().map(|&x| u64::from(x)).collect(), n),
            || "replaced values are not a permutation (or a thread gave up)".into(),
        )
    })
    .map(|()| format!("{n} threads: CAS loop counts exactly")))
}

fn check_atomic_exch(ctx: &Ctx) -> Result<Verdict> {
    let (blocks, t) = (32u32, 256u32);
    let n = (blocks * t) as usize;
    let (s32, o32, s64, o64) = (
        ctx.zeroed::<u32>(1)?,
        ctx.poisoned::<u32>(n)?,
        ctx.zeroed::<u64>(1)?,
        ctx.poisoned::<u64>(n)?,
    );
    let (mut a, mut b, mut c, mut d) = (
        s32.device_ptr(),
        o32.device_ptr(),
        s64.device_ptr(),
        o64.device_ptr(),
    );
    ctx.run(
        "atomic_exch_chain",
        LaunchConfig::linear(blocks, t),
        &mut [p(&mut a), p(&mut b), p(&mut c), p(&mut d)],
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

fn check_message_pass(ctx: &Ctx) -> Result<Verdict> {
    let n = 64usize;
    let (data, flags, out) = (
        ctx.poisoned::<u32>(2 * n)?,
        ctx.zeroed::<u32>(2)?,
        ctx.poisoned::<u32>(2 + 2 * n)?,
    );
    let (mut d, mut f, mut o, mut k, mut to) = (
        data.device_ptr(),
        flags.device_ptr(),
        out.device_ptr(),
        n as u32,
        2_000_000_000u64,
    );
    ctx.run(
        "message_pass",
        LaunchConfig::linear(2, 32),
        &mut [p(&mut d), p(&mut f), p(&mut o), p(&mut k), p(&mut to)],
    )?;
    let got: Vec<u32> = ctx.download(&out, 2 + 2 * n)?;
    let want = refs::message_pass_words(n);
    Ok(compare("codes + payload", &got, &want).map(|()| {
        "st.release.sys and fence.acq_rel.sys + relaxed store, seen through ld.acquire.sys".into()
    }))
}

fn check_vectors(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 10_000usize;
    let src: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let (s, a, b, c) = (
        ctx.upload(&src)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.poisoned::<U32x4>(n)?,
    );
    let (mut ps, mut pa, mut pb, mut pc, mut k) = (
        s.device_ptr(),
        a.device_ptr(),
        b.device_ptr(),
        c.device_ptr(),
        n as u64,
    );
    ctx.run(
        "vector_roundtrip",
        LaunchConfig::linear(40, 128),
        &mut [p(&mut ps), p(&mut pa), p(&mut pb), p(&mut pc), p(&mut k)],
    )?;
    let ga: Vec<U32x4> = ctx.download(&a, n)?;
    let gb: Vec<U32x4> = ctx.download(&b, n)?;
    let gc: Vec<U32x4> = ctx.download(&c, n)?;
    Ok(compare("v4.u32", &ga, &src)
        .and_then(|()| compare("v4.f32 (bits)", &gb, &src))
        .and_then(|()| compare("v2.u64", &gc, &src))
        .map(|()| format!("{n} vectors through v4.u32, v4.f32, v2.u64")))
}

fn check_load_const(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
    let n = 5000usize;
    let src: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let w = refs::sample_window(rng);
    let (s, o, wb, wo) = (
        ctx.upload(&src)?,
        ctx.poisoned::<U32x4>(n)?,
        ctx.upload(&[w])?,
        ctx.poisoned::<u64>(9)?,
    );
    let (mut ps, mut po, mut k, mut pw, mut pwo) = (
        s.device_ptr(),
        o.device_ptr(),
        n as u64,
        wb.device_ptr(),
        wo.device_ptr(),
    );
    ctx.run(
        "load_const_copy",
        LaunchConfig::linear(20, 128),
        &mut [p(&mut ps), p(&mut po), p(&mut k), p(&mut pw), p(&mut pwo)],
    )?;
    let got: Vec<U32x4> = ctx.download(&o, n)?;
    let gw: Vec<u64> = ctx.download(&wo, 9)?;
    Ok(compare("ld.global.nc.v4", &got, &src)
        .and_then(|()| compare("Window via load_const", &gw, &refs::window_words(&w)))
        .map(|()| format!("{n} vectors and a 72-byte Window")))
}

fn check_div(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
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
    let (mut a, mut b, mut c, mut d, mut k) = (
        bx.device_ptr(),
        bd.device_ptr(),
        bq.device_ptr(),
        br.device_ptr(),
        n as u64,
    );
    ctx.run(
        "div_fast",
        LaunchConfig::linear(64, 256),
        &mut [p(&mut a), p(&mut b), p(&mut c), p(&mut d), p(&mut k)],
    )?;
    let q: Vec<u32> = ctx.download(&bq, n)?;
    let r: Vec<u32> = ctx.download(&br, n)?;
    let (wq, wr) = refs::div_words(&xs, &ds);
    Ok(compare("quotients", &q, &wq)
        .and_then(|()| compare("remainders", &r, &wr))
        .map(|()| format!("{n} divisions (divisors 1..=1024 and large) exact on the GPU")))
}

fn check_team(ctx: &Ctx) -> Result<Verdict> {
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
        let out = ctx.poisoned::<i32>(layout::TEAM_PROBE_WORDS)?;
        let (mut c, mut o) = (comm, out.device_ptr());
        ctx.run(
            "team_probe",
            LaunchConfig::linear(1, 32),
            &mut [p(&mut c), p(&mut o)],
        )?;
        let got: Vec<i32> = ctx.download(&out, layout::TEAM_PROBE_WORDS)?;
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

fn check_window(ctx: &Ctx) -> Result<Verdict> {
    let threads = 256usize;
    let target = ctx.poisoned::<f32>(64 + threads)?;
    let stride4g = 2u32;
    let lsa_rank = 1;
    // Byte 0 of the window in LSA rank 0's slot, so that our own copy is `target`.
    let base = add4g(
        target.device_ptr(),
        (lsa_rank as u32 * stride4g).wrapping_neg(),
    );
    let w = Window {
        win_host: 0x1234,
        lsa_flat_base: base,
        lsa_rank,
        world_rank: 5,
        stride4g,
        mc_offset4k: 9,
        ..Window::default()
    };
    let wb = ctx.upload(&[w])?;
    let mut comm = DevComm::new(5, 8, lsa_rank, 4);
    comm.lsa_multimem.mc_base = 0x7000_0000_0000; // an address only: never dereferenced
    comm.resource = ResourceWindow {
        lsa_flat_base: 0x5000_0000_0000,
        stride4g: 3,
        mc_offset4k: 4,
    };
    comm.resource_window = wb.device_ptr();
    let sym: SymPtr<f32> = SymPtr::new(wb.device_ptr() as *const Window, 256);
    let out = ctx.poisoned::<u64>(layout::WINDOW_MATH_WORDS)?;
    let (mut pw, mut c, mut s, mut o) = (wb.device_ptr(), comm, sym, out.device_ptr());
    ctx.run(
        "window_math",
        LaunchConfig::linear(1, threads as u32),
        &mut [p(&mut pw), p(&mut c), p(&mut s), p(&mut o)],
    )?;
    let got: Vec<u64> = ctx.download(&out, layout::WINDOW_MATH_WORDS)?;
    // The same arithmetic on the host, against a host copy of the descriptor.
    let want = refs::window_math_words(&w, &comm, 256);
    // Independent spot checks of the model: our copy is `target`, peer p is p * 8 GiB away.
    let spot = [
        (got[0], target.device_ptr()),
        (got[11], target.device_ptr() + 256),
        (got[13], target.device_ptr() + 256 + 20),
        (got[4], target.device_ptr() + 16 + 2 * (8 << 30)),
        (got[7], 0),
        (got[8], 0),
        (got[10], 0x7000_0000_0000 + 9 * 4096 + 64),
    ];
    let written: Vec<f32> = ctx.download(&target, 64 + threads)?;
    let want_written: Vec<f32> = (0..threads).map(|i| (i + 1) as f32).collect();
    Ok(compare("pointer words", &got, &want)
        .and_then(|()| {
            let (g, e): (Vec<u64>, Vec<u64>) = spot.iter().copied().unzip();
            compare("flat-VA spot checks", &g, &e)
        })
        .and_then(|()| compare("writes through SymPtr::local", &written[64..], &want_written))
        .map(|()| "local/lsa/peer/try_peer/team/multimem pointers and SymPtr math match the host; writes land".into()))
}

fn check_reduce(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
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
    let ops = layout::REDUCE_OPS;
    let (ba, bb, bo) = (
        ctx.upload(&a)?,
        ctx.upload(&b)?,
        ctx.poisoned::<U32x4>(ops * n)?,
    );
    let (mut pa, mut pb, mut po, mut k) =
        (ba.device_ptr(), bb.device_ptr(), bo.device_ptr(), n as u64);
    ctx.run(
        "reduce_packs",
        LaunchConfig::linear(16, 128),
        &mut [p(&mut pa), p(&mut pb), p(&mut po), p(&mut k)],
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

fn check_ll(ctx: &Ctx, rng: &mut Rng) -> Result<Verdict> {
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
    let (mut pl, mut pd, mut pg, mut pc) = (
        lines.device_ptr(),
        bd.device_ptr(),
        got.device_ptr(),
        codes.device_ptr(),
    );
    let (mut k, mut e, mut to, mut short) = (n as u32, epoch, 2_000_000_000u64, 1_000_000u64);
    ctx.run(
        "ll_roundtrip",
        LaunchConfig::linear(2, 128),
        &mut [
            p(&mut pl),
            p(&mut pd),
            p(&mut pg),
            p(&mut pc),
            p(&mut k),
            p(&mut e),
            p(&mut to),
            p(&mut short),
        ],
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

fn check_barrier_team1(ctx: &Ctx) -> Result<Verdict> {
    let blocks = 4u32;
    let rounds = 5u32;
    let words = LsaBarrierHandle::buffer_bytes(blocks, 1) / 4;
    let res = ctx.zeroed::<u32>(words)?;
    let comm = refs::lsa_comm(res.device_ptr(), 1, 0, 1, blocks);
    for launch in 1..=2u32 {
        let out = ctx.poisoned::<u32>(2 * blocks as usize)?;
        let (mut c, mut o, mut r, mut to) = (comm, out.device_ptr(), rounds, 1_000_000_000u64);
        ctx.run(
            "barrier_rounds",
            LaunchConfig::linear(blocks, 128),
            &mut [p(&mut c), p(&mut o), p(&mut r), p(&mut to)],
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

fn check_barrier_pair(ctx: &Ctx) -> Result<Verdict> {
    let va = flat_va(ctx)?;
    let comm = refs::lsa_comm(va.base, 1, 0, 2, 1);
    let rounds = 50u32;
    let mut detail = vec![];
    for (launch, (coop_kind, name)) in [(0u32, "Cta"), (1, "Warp")].into_iter().enumerate() {
        let out = ctx.poisoned::<u32>(2 * layout::BARRIER_PAIR_WORDS)?;
        let (mut c, mut o, mut r, mut off, mut to, mut kind) = (
            comm,
            out.device_ptr(),
            rounds,
            4096u64,
            2_000_000_000u64,
            coop_kind,
        );
        ctx.run(
            "barrier_pair",
            LaunchConfig::linear(2, 128),
            &mut [
                p(&mut c),
                p(&mut o),
                p(&mut r),
                p(&mut off),
                p(&mut to),
                p(&mut kind),
            ],
        )?;
        let got: Vec<u32> = ctx.download(&out, 2 * layout::BARRIER_PAIR_WORDS)?;
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

fn check_barrier_timeout(ctx: &Ctx) -> Result<Verdict> {
    let res = ctx.zeroed::<u32>(LsaBarrierHandle::buffer_bytes(1, 2) / 4)?;
    let comm = refs::lsa_comm(res.device_ptr(), 0, 0, 2, 1);
    let timeout = 50_000_000u64;
    let out = ctx.poisoned::<u32>(3)?;
    let (mut c, mut o, mut to) = (comm, out.device_ptr(), timeout);
    let t = Instant::now();
    ctx.run(
        "barrier_lonely",
        LaunchConfig::linear(1, 64),
        &mut [p(&mut c), p(&mut o), p(&mut to)],
    )?;
    let host = t.elapsed();
    let got: Vec<u32> = ctx.download(&out, 3)?;
    let dt = refs::lonely_elapsed_ns(&got);
    Ok(ensure(got[0] == 1, || {
        format!("result code {} (expected 1 = timeout)", got[0])
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

fn check_barrier_abort(ctx: &Ctx) -> Result<Verdict> {
    let res = ctx.zeroed::<u32>(LsaBarrierHandle::buffer_bytes(1, 2) / 4)?;
    let flag = ctx.upload(&[1u32])?;
    let mut comm = refs::lsa_comm(res.device_ptr(), 0, 0, 2, 1);
    comm.abort_flag = flag.device_ptr();
    let timeout = 10_000_000_000u64; // safety net only: the abort must end the wait first
    let out = ctx.poisoned::<u32>(3)?;
    let (mut c, mut o, mut to) = (comm, out.device_ptr(), timeout);
    ctx.run(
        "barrier_lonely",
        LaunchConfig::linear(1, 64),
        &mut [p(&mut c), p(&mut o), p(&mut to)],
    )?;
    let got: Vec<u32> = ctx.download(&out, 3)?;
    let dt = refs::lonely_elapsed_ns(&got);
    Ok(ensure(got[0] == 2, || {
        format!("result code {} (expected 2 = aborted)", got[0])
    })
    .and_then(|()| ensure(dt < 1_000_000_000, || format!("abort took {dt} ns")))
    .map(|()| {
        format!(
            "raised abort flag ends the wait: Aborted after {:.3} ms",
            dt as f64 / 1e6
        )
    }))
}

// ---------------------------------------------------------------------------------------

struct Args {
    device: usize,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        device: std::env::var("LOCAL_RANK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--device" => {
                let v = it.next().ok_or("--device needs a value")?;
                args.device = v
                    .parse()
                    .map_err(|_| format!("--device: not a number: {v}"))?;
            }
            "-h" | "--help" => return Err("usage: gpu_device [--device N]".into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("gpu_device: {msg}");
            return ExitCode::from(2);
        }
    };
    match cuda::init_driver() {
        Ok(()) => {}
        Err(e @ Error::NoDriver(_)) => {
            println!("gpu_device: skipped: {e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpu_device: FAILED: {e}");
            return ExitCode::FAILURE;
        }
    }
    let _ctx = match cuda::open_device(args.device) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu_device: FAILED: device {}: {e}", args.device);
            return ExitCode::FAILURE;
        }
    };
    let module = match Module::load(kernels::PTX) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("gpu_device: FAILED: loading the test kernels: {e}");
            println!("gpu_device: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let ctx = Ctx {
        dev: args.device as i32,
        module,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut passed, mut failed) = (0, 0);
    let mut report = |name: &str, r: Result<Verdict>| match r {
        Ok(Ok(detail)) => {
            passed += 1;
            println!("ok    {name:<18} {detail}");
        }
        Ok(Err(detail)) => {
            failed += 1;
            println!("FAIL  {name:<18} {detail}");
        }
        Err(e) => {
            failed += 1;
            println!("FAIL  {name:<18} {e}");
        }
    };
    println!(
        "gpu_device: device {}, {} test kernels",
        args.device,
        kernels::ENTRY_POINTS.len()
    );
    report("module_load", check_module_load(&ctx));
    report("geometry", check_geometry(&ctx));
    report("dependent_launch", check_dependent_launch(&ctx));
    report("smem_static", check_smem_static(&ctx, &mut rng));
    report("cluster_exchange", check_cluster_exchange(&ctx, &mut rng));
    report("smem_dynamic", check_smem_dynamic(&ctx, &mut rng));
    report("warp_ops", check_warp_ops(&ctx, &mut rng));
    report("block_votes", check_block_votes(&ctx, &mut rng));
    report("timers", check_timers(&ctx));
    report("coop", check_coop(&ctx));
    report("warp_any", check_warp_any(&ctx));
    report("block_named_barrier", check_block_named_barrier(&ctx));
    report("atomic_add", check_atomic_add(&ctx));
    report("red_add", check_red_add(&ctx));
    report("atomic_cas", check_atomic_cas(&ctx));
    report("atomic_exch", check_atomic_exch(&ctx));
    report("fences_message", check_message_pass(&ctx));
    report("vectors", check_vectors(&ctx, &mut rng));
    report("load_const", check_load_const(&ctx, &mut rng));
    report("div_fast", check_div(&ctx, &mut rng));
    report("team_math", check_team(&ctx));
    report("window_symptr", check_window(&ctx));
    report("reduce_packs", check_reduce(&ctx, &mut rng));
    report("ll_roundtrip", check_ll(&ctx, &mut rng));
    report("barrier_team1", check_barrier_team1(&ctx));
    report("barrier_pair", check_barrier_pair(&ctx));
    report("barrier_timeout", check_barrier_timeout(&ctx));
    report("barrier_abort", check_barrier_abort(&ctx));
    println!("gpu_device: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_buffers_and_by_value_parameters_have_the_sizes_the_launches_assume() {
        assert_eq!(symcomm_device::util::idiv_rcp32(1), 0);
        assert_eq!(LsaBarrierHandle::buffer_bytes(4, 1) / 4, 16);
        // Every launch checks its argument sizes against `Module::param_sizes` (the PTX
        // declaration); DevComm and SymPtr travel by value with their Rust sizes.
        assert_eq!(size_of::<DevComm>(), 80);
        assert_eq!(size_of::<SymPtr<f32>>(), 16);
        for decl in [
            ".param .u64 .ptr .align 1 window_math_param_0,",
            ".param .align 8 .b8 window_math_param_1[80],",
            ".param .align 8 .b8 window_math_param_2[16],",
            ".param .u64 .ptr .align 1 window_math_param_3\n)",
            ".param .align 8 .b8 barrier_pair_param_0[80],",
            ".param .u64 .ptr .align 1 barrier_pair_param_1,",
            ".param .u32 barrier_pair_param_2,",
            ".param .u64 barrier_pair_param_3,",
            ".param .u64 barrier_pair_param_4,",
            ".param .u32 barrier_pair_param_5\n)",
        ] {
            assert!(kernels::PTX.contains(decl), "{decl}");
        }
    }
}
