//! `gpu_symmem`: the multi-GPU checks of symmetric memory — windows, device communicators and
//! barriers. Run one process per GPU (`symcomm-run -n 8 gpu_symmem CHECK`) or one process
//! driving every GPU (`gpu_symmem --threads 8 CHECK`).
//!
//! CHECK is one of:
//! - `stress [ROUNDS] [REPLAYS]`: ROUNDS (100 000) barrier round trips, each publishing data
//!   through a window before the barrier and checking every peer's data after it; then REPLAYS
//!   (1 000) replays of a CUDA graph of the same kernel (100 rounds each);
//! - `cycles [N]`: N (1 000) × alloc → register → deregister → free; device memory and the
//!   window slot space must return to their starting values;
//! - `bad-input`: an unaligned pointer, a `cuMemAlloc` pointer and sizes that differ across ranks
//!   must give an error on every rank, after which registration still works;
//! - `peer-death`: the last rank leaves before registering; every other rank must get an error
//!   naming it within the timeout;
//! - `timeout`: the last LSA rank never joins a barrier; the others' kernels must return the
//!   timeout code, and a raised abort flag must end a long wait;
//! - `cost`: milliseconds per window registration.
//!
//! Every rank prints one line per check; any failure exits non-zero.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, sys};
use symcomm::cuda::{self, VmmBuffer, memory::DeviceBox};
use symcomm::launch::{LaunchConfig, Module, synchronize};
use symcomm::ranks::{all_passed, run_ranks, take_threads_flag};
use symcomm::{
    Communicator, DevComm, Error, Requirements, Result, SymmetricMemory, SymmetricUsage,
};
use symcomm_test_kernels as k;
use symcomm_tests::kernels;

const BLOCKS: u32 = 8;
const THREADS: u32 = 256;
const WAIT_NS: u64 = 20_000_000_000;

fn fail(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// Per-rank setup shared by the checks.
struct Rank {
    // Drop order: the module before the communicator, the context last.
    module: Module,
    comm: Communicator,
    ctx: Arc<CudaContext>,
}

impl Rank {
    fn open(comm: Communicator) -> Result<Rank> {
        let ctx = cuda::open_device(comm.device())?;
        let module = Module::load(kernels::PTX)?;
        Ok(Rank { module, comm, ctx })
    }

    fn device(&self) -> i32 {
        self.comm.device() as i32
    }

    /// Gathers one u64 per rank.
    fn gather_u64(&self, v: u64) -> Result<Vec<u64>> {
        self.comm
            .bootstrap()
            .all_gather(&v.to_le_bytes())?
            .iter()
            .map(|b| {
                b.get(..8)
                    .and_then(|s| s.try_into().ok())
                    .map(u64::from_le_bytes)
                    .ok_or_else(|| fail("malformed gathered value"))
            })
            .collect()
    }
}

fn read_words(buf: &VmmBuffer, n: usize) -> Result<Vec<u32>> {
    let mut v = vec![0u32; n];
    buf.copy_to_host(&mut v)?;
    Ok(v)
}

fn stress(r: &Rank, rounds: u32, replays: u32) -> Result<String> {
    let words = 2 * (BLOCKS * THREADS) as usize;
    let mem = SymmetricMemory::alloc(&r.comm, words * 4)?;
    mem.buffer().fill_bytes(0)?;
    let win = r.comm.register_window(&mem)?;
    let dev = DevComm::create(&r.comm, Requirements::new().lsa_barriers(BLOCKS))?;
    let out = VmmBuffer::new(r.device(), 3 * 4)?;
    out.fill_bytes(0)?;
    let f = r.module.kernel::<k::BarrierStress>()?;
    let cfg = LaunchConfig::linear(BLOCKS, THREADS);
    let args = |iters: u32| (dev.raw(), win.handle(), iters, WAIT_NS, out.as_mut_ptr());

    r.comm.bootstrap().barrier()?;
    let t0 = Instant::now();
    // SAFETY: a typed launch of `barrier_stress`; the window holds 2 × BLOCKS × THREADS u32;
    // `out` holds 3 u32; the communicator has BLOCKS barriers; every rank launches the same
    // shape and rounds.
    unsafe { f.launch(cfg, std::ptr::null_mut(), args(rounds))? };
    synchronize()?;
    let direct = t0.elapsed();
    let got = read_words(&out, 3)?;
    let want_done = rounds * BLOCKS;
    if got != [0, 0, want_done] {
        return Err(fail(format!(
            "direct launch: {} mismatches, code sum {}, {} of {want_done} block-rounds done",
            got[0], got[1], got[2]
        )));
    }

    // The same kernel captured once into a CUDA graph and replayed.
    out.fill_bytes(0)?;
    let per_replay = 100u32;
    // ANCHOR: graph
    let stream = r.ctx.new_stream().map_err(|e| Error::Cuda {
        call: "cuStreamCreate",
        code: e.0,
    })?;
    let cu =
        |call: &'static str| move |e: cudarc::driver::DriverError| Error::Cuda { call, code: e.0 };
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(cu("cuStreamBeginCapture"))?;
    // SAFETY: as above; the captured launch reads its epochs from device memory on every
    // replay, so each replay publishes fresh values.
    let launched = unsafe { f.launch(cfg, stream.cu_stream(), args(per_replay)) };
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(cu("cuStreamEndCapture"))?;
    launched?;
    let graph = graph.ok_or_else(|| fail("capture produced no graph"))?;
    r.comm.bootstrap().barrier()?;
    let t1 = Instant::now();
    for _ in 0..replays {
        graph.launch().map_err(cu("cuGraphLaunch"))?;
    }
    stream.synchronize().map_err(cu("cuStreamSynchronize"))?;
    // ANCHOR_END: graph
    let replayed = t1.elapsed();
    let got = read_words(&out, 3)?;
    let want_done = replays * per_replay * BLOCKS;
    if got != [0, 0, want_done] {
        return Err(fail(format!(
            "graph replays: {} mismatches, code sum {}, {} of {want_done} block-rounds done",
            got[0], got[1], got[2]
        )));
    }
    drop(graph);
    Ok(format!(
        "stress: {rounds} round trips × {BLOCKS} blocks, 0 mismatches ({:.2} µs per round trip); \
         {replays} graph replays × {per_replay} rounds, 0 mismatches ({:.2} µs per round trip)",
        direct.as_secs_f64() * 1e6 / f64::from(rounds),
        replayed.as_secs_f64() * 1e6 / f64::from(replays * per_replay),
    ))
}

fn cycles(r: &Rank, count: u32) -> Result<String> {
    let bytes = 4 << 20;
    let one_cycle = || -> Result<()> {
        let mem = SymmetricMemory::alloc(&r.comm, bytes)?;
        let win = r.comm.register_window(&mem)?;
        win.deregister()?;
        drop(mem);
        Ok(())
    };
    // Free device memory and symmetric state once every rank is done with the cycles before:
    // a rank's physical memory lives until the last peer has unmapped it.
    let settled = |missing: &str| -> Result<(usize, SymmetricUsage)> {
        r.comm.bootstrap().barrier()?;
        let (free, _) = cuda::mem_info()?;
        let usage = r.comm.symmetric_usage().ok_or_else(|| fail(missing))?;
        Ok((free, usage))
    };
    one_cycle()?; // creates the symmetric state (flat VA, fd server) once
    synchronize()?;
    let (free0, usage0) = settled("no symmetric state after a registration")?;
    let t0 = Instant::now();
    for i in 0..count {
        one_cycle().map_err(|e| fail(format!("cycle {i}: {e}")))?;
    }
    synchronize()?;
    let elapsed = t0.elapsed();
    let (free1, usage1) = settled("symmetric state vanished")?;
    let granule = cuda::vmm::granularity(r.device(), cuda::vmm::Shareable::PosixFd)?;
    let lost = free0.saturating_sub(free1);
    if lost > granule {
        return Err(fail(format!(
            "device memory did not come back: {lost} bytes lost after {count} cycles (granule {granule})"
        )));
    }
    if usage1 != usage0 {
        return Err(fail(format!(
            "symmetric state grew: before {usage0:?}, after {usage1:?}"
        )));
    }
    // The same allocation registered several times at once takes one slot per window, and
    // all of it comes back when they are deregistered.
    let mem = SymmetricMemory::alloc(&r.comm, bytes)?;
    let wins = (0..3)
        .map(|_| r.comm.register_window(&mem))
        .collect::<Result<Vec<_>>>()?;
    let during = r.comm.symmetric_usage().map_or(0, |u| u.windows);
    for w in wins {
        w.deregister()?;
    }
    let after = r
        .comm
        .symmetric_usage()
        .ok_or_else(|| fail("symmetric state vanished"))?;
    if during != usage0.windows + 3 || after != usage0 {
        return Err(fail(format!(
            "re-registering one allocation: {during} windows while registered, state after {after:?}"
        )));
    }
    Ok(format!(
        "cycles: {count} × alloc/register/deregister/free of {} MiB: free memory back to start \
         (diff {} B, granule {granule} B), slot space {} B used, {} windows, flat VA unchanged \
         ({} GiB at {:#x}); {:.2} ms per cycle; one allocation registered 3× at once and \
         deregistered: state back to start",
        bytes >> 20,
        free0 as i64 - free1 as i64,
        usage1.slot_bytes_used,
        usage1.windows,
        usage1.flat_bytes >> 30,
        usage1.flat_base,
        elapsed.as_secs_f64() * 1e3 / f64::from(count)
    ))
}

fn bad_input(r: &Rank) -> Result<String> {
    let n = r.comm.size();
    let me = r.comm.rank();
    let bytes = 4 << 20;
    let mem = SymmetricMemory::alloc(&r.comm, bytes)?;
    let plain = DeviceBox::new(&[0u64; 512])?;
    let mut seen = Vec::new();

    let mut expect_error =
        |case: &str, culprit: usize, result: Result<symcomm::Window>| match result {
            Ok(_) => Err(fail(format!("{case}: registration succeeded on rank {me}"))),
            Err(e) => {
                let text = e.to_string();
                if me != culprit && n > 1 && !text.contains(&format!("rank {culprit}")) {
                    return Err(fail(format!(
                        "{case}: the error does not name rank {culprit}: {text}"
                    )));
                }
                seen.push(format!("{case}: \"{text}\""));
                Ok(())
            }
        };
    let culprit = 1 % n;
    let ptr = if me == culprit {
        mem.device_ptr() + 16
    } else {
        mem.device_ptr()
    };
    expect_error(
        "unaligned",
        culprit,
        r.comm.register_window_ptr(ptr, 1 << 20),
    )?;

    let culprit = 2 % n;
    let ptr = if me == culprit {
        plain.device_ptr()
    } else {
        mem.device_ptr()
    };
    expect_error("cuMemAlloc", culprit, r.comm.register_window_ptr(ptr, 4096))?;

    let size = if me == 0 { bytes } else { bytes / 2 };
    let mismatch = r.comm.register_window_ptr(mem.device_ptr(), size);
    match &mismatch {
        Err(Error::Mismatch { .. }) => {}
        Err(e) => return Err(fail(format!("sizes: expected a mismatch error, got: {e}"))),
        Ok(_) => return Err(fail("sizes: registration with different sizes succeeded")),
    }
    let texts = r.comm.bootstrap().all_gather(
        mismatch
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .as_bytes(),
    )?;
    if texts.iter().any(|t| t != &texts[0]) {
        return Err(fail("sizes: ranks got different mismatch errors"));
    }
    seen.push(format!("sizes: \"{}\"", String::from_utf8_lossy(&texts[0])));

    // The communicator still works.
    let win = r.comm.register_window(&mem)?;
    win.deregister()?;
    Ok(format!(
        "bad-input: every rank refused all three, then registered fine; {}",
        seen.join("; ")
    ))
}

fn peer_death(r: &Rank) -> Result<String> {
    let n = r.comm.size();
    let me = r.comm.rank();
    if n < 2 {
        return Ok("peer-death: skipped (one rank)".into());
    }
    if me == n - 1 {
        return Ok(format!(
            "peer-death: rank {me} leaves before registering (on purpose)"
        ));
    }
    let mem = SymmetricMemory::alloc(&r.comm, 2 << 20)?;
    let t0 = Instant::now();
    match r.comm.register_window(&mem) {
        Ok(_) => Err(fail("registration succeeded although a peer had died")),
        Err(e) => {
            let text = e.to_string();
            if !text.contains(&format!("rank {}", n - 1)) {
                return Err(fail(format!(
                    "the error does not name the dead rank: {text}"
                )));
            }
            Ok(format!(
                "peer-death: error after {:.2} s (timeout {:?}): \"{text}\"",
                t0.elapsed().as_secs_f64(),
                r.comm.bootstrap().timeout()
            ))
        }
    }
}

fn timeout(r: &Rank) -> Result<String> {
    let lsa_last = r.comm.lsa_size() - 1;
    let absent = r.comm.lsa_rank() == lsa_last;
    if r.comm.lsa_size() < 2 {
        return Ok("timeout: skipped (LSA team of one)".into());
    }
    let probe = r.module.kernel::<k::BarrierTimeoutProbe>()?;
    let out = VmmBuffer::new(r.device(), 8)?;
    let run = |dev: &DevComm, wait_ns: u64| -> Result<Duration> {
        out.fill_bytes(0xff)?;
        let t0 = Instant::now();
        // SAFETY: a typed launch of `barrier_timeout_probe`; the communicator has one
        // barrier; `out` holds 2 u32.
        unsafe {
            probe.launch(
                LaunchConfig::linear(1, 128),
                std::ptr::null_mut(),
                (dev.raw(), wait_ns, out.as_mut_ptr()),
            )?
        };
        Ok(t0.elapsed())
    };
    // Waits for the probe launched `started` ago, which must return result code `want`
    // (`what`): how long it took.
    let finish = |started: Duration, want: u32, what: &str| -> Result<Duration> {
        let t0 = Instant::now();
        synchronize()?;
        let w = read_words(&out, 2)?;
        if w[1] != 1 {
            return Err(fail("the probe kernel did not get past its wait"));
        }
        if w[0] != want {
            return Err(fail(format!(
                "expected the {what} code {want}, got {}",
                w[0]
            )));
        }
        Ok(started + t0.elapsed())
    };

    // 1. A 200 ms timed wait on a peer that never arrives.
    let dev = DevComm::create(&r.comm, Requirements::new().lsa_barriers(1))?;
    let mut line = String::new();
    if !absent {
        let launch = run(&dev, 200_000_000)?;
        let took = finish(launch, 1, "timeout")?;
        line.push_str(&format!(
            "200 ms wait for absent LSA rank {lsa_last} returned Timeout after {:.0} ms",
            took.as_secs_f64() * 1e3
        ));
    }
    r.comm.bootstrap().barrier()?;
    drop(dev);

    // 2. A 60 s wait ended by the host's abort flag after 100 ms.
    let dev = DevComm::create(&r.comm, Requirements::new().lsa_barriers(1))?;
    if !absent {
        // ANCHOR: abort
        let launch = run(&dev, 60_000_000_000)?;
        std::thread::sleep(Duration::from_millis(100));
        dev.abort();
        let took = finish(launch, 2, "aborted")?;
        // ANCHOR_END: abort
        line.push_str(&format!(
            "; 60 s wait ended by the abort flag (code 2) after {:.0} ms",
            took.as_secs_f64() * 1e3
        ));
    } else {
        line.push_str(&format!("LSA rank {lsa_last}: stayed away on purpose"));
    }
    r.comm.bootstrap().barrier()?;
    Ok(format!("timeout: {line}"))
}

fn cost(r: &Rank, windows: usize) -> Result<String> {
    let bytes = 64 << 20;
    let mems = (0..windows)
        .map(|_| SymmetricMemory::alloc(&r.comm, bytes))
        .collect::<Result<Vec<_>>>()?;
    let mut times = Vec::with_capacity(windows);
    let mut wins = Vec::with_capacity(windows);
    for m in &mems {
        r.comm.bootstrap().barrier()?;
        let t0 = Instant::now();
        wins.push(r.comm.register_window(m)?);
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // Deregister in the same order on every rank.
    for w in wins {
        w.deregister()?;
    }
    let first = times[0];
    let mut rest = times[1..].to_vec();
    rest.sort_by(f64::total_cmp);
    let median = rest.get(rest.len() / 2).copied().unwrap_or(first);
    let slowest = r.gather_u64((median * 1000.0) as u64)?;
    let worst = slowest.iter().copied().max().unwrap_or(0) as f64 / 1000.0;
    Ok(format!(
        "cost: {} ranks, {} MiB windows: first registration {first:.1} ms (creates the flat VA \
         and fd server), then median {median:.2} ms (min {:.2}, max {:.2}); slowest rank's \
         median {worst:.2} ms",
        r.comm.size(),
        bytes >> 20,
        rest.first().copied().unwrap_or(first),
        rest.last().copied().unwrap_or(first),
    ))
}

fn run_check(
    comm: Communicator,
    check: &str,
    arg1: Option<u32>,
    arg2: Option<u32>,
) -> Result<String> {
    let r = Rank::open(comm)?;
    match check {
        "stress" => stress(&r, arg1.unwrap_or(100_000), arg2.unwrap_or(1_000)),
        "cycles" => cycles(&r, arg1.unwrap_or(1_000)),
        "bad-input" => bad_input(&r),
        "peer-death" => peer_death(&r),
        "timeout" => timeout(&r),
        "cost" => cost(&r, arg1.unwrap_or(20) as usize),
        other => Err(fail(format!("unknown check {other:?}"))),
    }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let threads = match take_threads_flag(&mut args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("gpu_symmem: {e}");
            return ExitCode::from(2);
        }
    };
    let usage = "usage: gpu_symmem [--threads N] stress|cycles|bad-input|peer-death|timeout|cost [ARG] [ARG]";
    let Some(check) = args.first().cloned() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u32>().ok());
    let (a1, a2) = (num(1), num(2));
    if let Err(e @ Error::NoDriver(_)) = cuda::init_driver() {
        println!("gpu_symmem: skipped: {e}");
        return ExitCode::SUCCESS;
    }
    symcomm::init_logging();
    let ok = all_passed(
        run_ranks(threads, |comm| run_check(comm, &check, a1, a2)),
        |rank, line| {
            println!("rank {rank}: ok: {line}");
            true
        },
        |rank, e| eprintln!("rank {rank}: FAILED: {check}: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
