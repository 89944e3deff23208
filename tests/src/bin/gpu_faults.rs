//! `gpu_faults`: a kernel spinning in a barrier stops soon after its peer rank's bootstrap link
//! closes. One GPU is enough: two ranks run as threads of this process on device 0, connected
//! by a TCP bootstrap over loopback. Rank 1 launches a barrier-only kernel that waits up to
//! 60 s for rank 0; rank 0 never launches it and, 0.5 s later, "crashes": its communicator is
//! dropped while its thread panics, so its links close without a goodbye. Rank 1's bootstrap
//! sees the link end and raises the abort flag of its device communicator (host-mapped
//! memory, written while the kernel spins); the kernel must return the abort code (2) within
//! 3 s of the crash, and the device communicator must name rank 0 as the cause.
//!
//! Prints one line (`gpu_faults: ok: …`); any failure exits non-zero. The panic message of the
//! simulated crash on standard error is expected.

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use symcomm::bootstrap::RootListener;
use symcomm::cuda::{self, VmmBuffer};
use symcomm::launch::{LaunchConfig, Module, synchronize};
use symcomm::{Bootstrap, CommOptions, Communicator, DevComm, Error, Requirements, Result};
use symcomm_test_kernels as k;
use symcomm_tests::kernels;

/// How long the kernel would wait without an abort.
const WAIT_NS: u64 = 60_000_000_000;
/// How soon after the crash the kernel must have stopped.
const PROMPT: Duration = Duration::from_secs(3);

fn fail(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// Rank 0: takes part in the set-up, then crashes once rank 1's kernel is spinning; keeps its
/// device communicator (whose memory rank 1 has mapped) until rank 1 is done.
fn victim(
    root: RootListener,
    crashed: mpsc::Sender<Instant>,
    done: mpsc::Receiver<()>,
) -> Result<()> {
    let comm = Communicator::init(
        Bootstrap::serve_tcp(root, 2, Duration::from_secs(60))?,
        CommOptions::new().device(0),
    )?;
    let _ctx = cuda::open_device(0)?;
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
    comm.bootstrap().barrier()?; // rank 1 launches its kernel right after this
    thread::sleep(Duration::from_millis(500));
    let at = Instant::now();
    let crash = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _dies_with_me = comm;
        panic!("gpu_faults: simulated crash of rank 0 (expected)");
    }));
    if crash.is_ok() {
        return Err(fail("the simulated crash did not happen"));
    }
    let _ = crashed.send(at);
    let _ = done.recv_timeout(Duration::from_secs(120));
    drop(dev);
    Ok(())
}

/// Rank 1: spins in a barrier that rank 0 never joins; returns the summary line.
fn survivor(
    id: symcomm::bootstrap::UniqueId,
    crashed: mpsc::Receiver<Instant>,
    done: mpsc::Sender<()>,
) -> Result<String> {
    let comm = Communicator::init(
        Bootstrap::connect_tcp(&id, 1, 2, Duration::from_secs(60))?,
        CommOptions::new().device(0),
    )?;
    let _ctx = cuda::open_device(0)?;
    let module = Module::load(kernels::PTX)?;
    let probe = module.kernel::<k::BarrierTimeoutProbe>()?;
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
    let out = VmmBuffer::new(0, 8)?;
    out.fill_bytes(0xff)?;
    comm.bootstrap().barrier()?;
    // SAFETY: a typed launch of `barrier_timeout_probe`; the communicator has one barrier and
    // `out` holds two u32 of this device.
    unsafe {
        probe.launch(
            LaunchConfig::linear(1, 128),
            std::ptr::null_mut(),
            (dev.raw(), WAIT_NS, out.as_mut_ptr()),
        )?
    };
    let synced = synchronize();
    let ended = Instant::now();
    let _ = done.send(());
    synced?;
    let at = crashed
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| fail("rank 0 never reported its crash"))?;
    let mut words = [0u32; 2];
    out.copy_to_host(&mut words)?;
    let took = ended.saturating_duration_since(at);
    if words != [2, 1] {
        return Err(fail(format!(
            "expected the abort code 2 and the kernel past its wait, got code {} done {}",
            words[0], words[1]
        )));
    }
    if took > PROMPT {
        return Err(fail(format!("the kernel stopped {took:?} after the crash")));
    }
    let cause = dev
        .failure()
        .ok_or_else(|| fail("the device communicator reports no failure"))?;
    if !matches!(cause, Error::PeerFailed { peer: 0, .. }) {
        return Err(fail(format!("the cause does not name rank 0: {cause}")));
    }
    Ok(format!(
        "link-death: barrier kernel (60 s wait) aborted {:.1} ms after rank 0 began to crash; \
         cause: {cause}",
        took.as_secs_f64() * 1e3
    ))
}

fn main() -> ExitCode {
    if let Err(e @ Error::NoDriver(_)) = cuda::init_driver() {
        println!("gpu_faults: skipped: {e}");
        return ExitCode::SUCCESS;
    }
    symcomm::init_logging();
    let run = || -> Result<String> {
        let root = RootListener::bind(([127, 0, 0, 1], 0).into())?;
        let id = root.unique_id();
        let (crashed_tx, crashed_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        thread::scope(|s| {
            let v = s.spawn(move || victim(root, crashed_tx, done_rx));
            let line = survivor(id, crashed_rx, done_tx);
            let v = v
                .join()
                .unwrap_or_else(|_| Err(fail("rank 0's thread panicked outside the crash")));
            let line = line?;
            v?;
            Ok(line)
        })
    };
    match run() {
        Ok(line) => {
            println!("gpu_faults: ok: {line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu_faults: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
