//! `fault_victim`: one rank of the fault suite's job (`tests/tests/faults.rs`), started by
//! `symcomm-run` on the CPU emulator. It goes through every phase a fault test can stop a rank
//! at (`symcomm::fault::PHASES`): set-up, a window registration, device communicators, a gallery
//! all-reduce, a barrier-only kernel and a deregistration followed by a bootstrap barrier.
//!
//! Prints `fault_victim: rank R pid P socket @NAME` first, `fault_victim: rank R done` at the
//! end, and on a failure `fault_victim: rank R failed after Xs: ERROR` on standard error (exit
//! code 1). The victim stops at the phase `SYMCOMM_TEST_PAUSE_AT` names and is killed there.

use std::process::ExitCode;
use std::time::Instant;

use symcomm::launch::{LaunchConfig, Module, synchronize};
use symcomm::{Communicator, DevComm, Requirements, Result, SymmetricMemory};
use symcomm_gallery::types::{DataType, RedOp};
use symcomm_gallery::{Buf, Collectives};
use symcomm_test_kernels as k;
use symcomm_tests::kernels;

/// How long the barrier-only kernel may wait for its peers: far beyond the 3 s in which a
/// failure must be known, so that only an abort ends it in time.
const PROBE_WAIT_NS: u64 = 60_000_000_000;

fn run(comm: Communicator) -> Result<()> {
    let me = comm.rank();
    let n = comm.size();
    let count = 4096;
    let mem = SymmetricMemory::alloc(&comm, count * 4)?;
    let win = comm.register_window(&mem)?;
    let g = Collectives::from_env(&comm)?;
    let data: Vec<f32> = (0..count).map(|i| (i * n + me) as f32).collect();
    mem.buffer().copy_from_host(&data)?;
    let buf = Buf::whole(&win);
    g.all_reduce(
        buf,
        buf,
        count,
        DataType::F32,
        RedOp::Sum,
        std::ptr::null_mut(),
    )?;
    synchronize()?;
    g.check_status()?;
    let mut got = vec![0f32; count];
    mem.buffer().copy_to_host(&mut got)?;
    let want = |i: usize| (0..n).map(|r| (i * n + r) as f32).sum::<f32>();
    if let Some(i) = (0..count).find(|&i| got[i] != want(i)) {
        return Err(symcomm::Error::Internal(format!(
            "all-reduce: element {i} is {} instead of {}",
            got[i],
            want(i)
        )));
    }

    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
    let module = Module::load(kernels::PTX)?;
    let probe = module.kernel::<k::BarrierTimeoutProbe>()?;
    let out = SymmetricMemory::alloc(&comm, 8)?;
    out.buffer().fill_bytes(0xff)?;
    symcomm::fault::pause_point("barrier-kernel", me);
    // SAFETY: a typed launch of `barrier_timeout_probe`; the communicator has one barrier and
    // `out` holds two u32 of this device.
    unsafe {
        probe.launch(
            LaunchConfig::linear(1, 32),
            std::ptr::null_mut(),
            (dev.raw(), PROBE_WAIT_NS, out.as_mut_ptr()),
        )?
    };
    synchronize()?;
    let mut words = [0u32; 2];
    out.buffer().copy_to_host(&mut words)?;
    if words != [0, 1] {
        return Err(dev.failure().unwrap_or_else(|| {
            symcomm::Error::Internal(format!(
                "barrier kernel: code {} done {}",
                words[0], words[1]
            ))
        }));
    }
    drop(g);
    win.deregister()?;
    comm.bootstrap().barrier()?;
    Ok(())
}

fn main() -> ExitCode {
    let t0 = Instant::now();
    let rank: usize = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let job = std::env::var("SYMCOMM_UNIQUE_ID")
        .ok()
        .and_then(|id| symcomm::bootstrap::UniqueId::parse(&id).ok())
        .map(|id| symcomm::internals::socket_name(id.magic(), rank))
        .unwrap_or_default();
    eprintln!(
        "fault_victim: rank {rank} pid {} socket @{job}",
        std::process::id()
    );
    symcomm::init_logging();
    match Communicator::from_env().and_then(run) {
        Ok(()) => {
            eprintln!("fault_victim: rank {rank} done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "fault_victim: rank {rank} failed after {:.2}s: {e}",
                t0.elapsed().as_secs_f64()
            );
            ExitCode::FAILURE
        }
    }
}
