//! `hello_window`: the first symmetric-memory program. Every rank registers a window, writes a
//! pattern into its slot of every LSA peer's copy, synchronises with an LSA barrier, and checks
//! that its own copy holds every peer's pattern.
//!
//! Usage: `symcomm-run -n 8 hello_window [--n N]` (one process per GPU), or
//! `hello_window --threads 8 [--n N]` (one process driving 8 GPUs).
//!
//! Without a CUDA driver (or with `SYMCOMM_BACKEND=emu`) it says so in one line and runs on the
//! CPU emulator, in either launch mode: the same registration, device communicator and
//! kernel, on host memory, with a small grid (`--n` then defaults to 2^12).

use std::process::ExitCode;

use symcomm::cuda::{self, Stream, VmmBuffer};
use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::{all_passed, run_ranks, take_threads_flag};
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory};
use symcomm_device::window::Window as DeviceWindow;
use symcomm_example_kernels::hello_pattern;
use symcomm_examples::{emulated, kernels};

const BLOCKS: u32 = 8;
const TIMEOUT_NS: u64 = 20_000_000_000;

// ANCHOR: rank
fn hello(comm: Communicator, n: usize, emulate: bool) -> Result<String> {
    if emulate {
        return hello_emulated(comm, n);
    }
    // ANCHOR: setup
    let _ctx = cuda::open_device(comm.device())?;
    let lsa = comm.lsa_size();
    let mem = SymmetricMemory::alloc(&comm, lsa * n * 4)?;
    mem.buffer().fill_bytes(0xff)?; // poison: every slot must be overwritten by its peer
    let status = VmmBuffer::new(comm.device() as i32, BLOCKS as usize * 4)?;
    status.fill_bytes(0xff)?;
    // Before the collective calls: loading a module waits for every kernel running in the
    // context, which with ranks sharing a GPU may be a peer's kernel waiting for ours.
    let module = Module::load(kernels::PTX)?;
    let kernel = module.function("hello_window")?;
    // A stream of our own: ranks sharing a GPU (threads on one context) then run at once.
    let stream = Stream::new()?;
    let win = comm.register_window(&mem)?; // collective
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(BLOCKS))?; // collective
    // ANCHOR_END: setup

    // ANCHOR: launch
    let args = (
        dev.raw(),
        win.device_ptr() as *const DeviceWindow,
        n as u64,
        TIMEOUT_NS,
        status.device_ptr() as *mut u32,
    );
    // SAFETY: the arguments match `hello_window`; the window holds lsa × n u32, the
    // communicator has BLOCKS barriers, and every rank launches the same shape.
    unsafe { kernel.launch_with(LaunchConfig::linear(BLOCKS, 512), stream.raw(), args)? };
    stream.synchronize()?; // this rank's kernel only, not the other ranks' in the context
    // ANCHOR_END: launch
    check(&comm, &mem, &status, BLOCKS, n, "GPU")
}
// ANCHOR_END: rank

/// [`hello`] on the CPU emulator: the same allocations, registration and device communicator
/// (on host memory); the kernel's host build over a small grid.
fn hello_emulated(comm: Communicator, n: usize) -> Result<String> {
    let lsa = comm.lsa_size();
    let blocks = emulated::EMU_BLOCKS;
    let mem = SymmetricMemory::alloc(&comm, lsa * n * 4)?;
    mem.buffer().fill_bytes(0xff)?;
    let win = comm.register_window(&mem)?; // collective
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(blocks))?; // collective
    let status = VmmBuffer::new(comm.device() as i32, blocks as usize * 4)?;
    status.fill_bytes(0xff)?;
    let (raw, w, st) = (
        dev.raw(),
        win.device_ptr() as *const DeviceWindow,
        status.device_ptr() as *mut u32,
    );
    // SAFETY: as for the GPU launch: the window holds lsa × n u32, the communicator has
    // `blocks` barriers, every rank launches the same shape, and everything outlives the launch.
    unsafe {
        emulated::launch(blocks, emulated::EMU_THREADS, || {
            symcomm_example_kernels::hello_window(raw, w, n as u64, TIMEOUT_NS, st)
        })?
    };
    let line = check(&comm, &mem, &status, blocks, n, "emulated GPU")?;
    comm.bootstrap().barrier()?; // no rank unmaps its window while a peer still checks
    Ok(line)
}

/// Reads the barrier codes and this rank's copy of the window and checks every value.
fn check(
    comm: &Communicator,
    mem: &SymmetricMemory,
    status: &VmmBuffer,
    blocks: u32,
    n: usize,
    device_kind: &str,
) -> Result<String> {
    // ANCHOR: check
    let lsa = comm.lsa_size();
    let mut codes = vec![0u32; blocks as usize];
    status.copy_to_host(&mut codes)?;
    if let Some(code) = codes.iter().find(|&&c| c != 0) {
        return Err(Error::InvalidArgument(format!(
            "a barrier failed with code {code} (1 = timeout, 2 = aborted)"
        )));
    }
    let mut got = vec![0u32; lsa * n];
    mem.buffer().copy_to_host(&mut got)?;
    let first_world = comm.rank() - comm.lsa_rank();
    let wrong = (0..lsa)
        .flat_map(|p| (0..n).map(move |i| (p, i)))
        .filter(|&(p, i)| got[p * n + i] != hello_pattern((first_world + p) as u32, i as u64))
        .count();
    if wrong != 0 {
        return Err(Error::InvalidArgument(format!(
            "{wrong} of {} values wrong in rank {}'s window",
            lsa * n,
            comm.rank()
        )));
    }
    // ANCHOR_END: check
    Ok(format!(
        "hello_window: rank {} ({device_kind} {}) sees the patterns of all {lsa} LSA peers ({n} values each)",
        comm.rank(),
        comm.device()
    ))
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let threads = match take_threads_flag(&mut args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hello_window: {e}");
            return ExitCode::from(2);
        }
    };
    let n = match args.as_slice() {
        [] => None,
        [flag, v] if flag == "--n" => match v.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                eprintln!("hello_window: --n needs a positive number");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: hello_window [--threads N] [--n ELEMENTS]");
            return ExitCode::from(2);
        }
    };
    let emulate = match emulated::notice("hello_window") {
        Ok(Some(line)) => {
            // One process prints the line once, whatever its number of ranks.
            println!("{line}");
            true
        }
        Ok(None) => false,
        Err(e) => {
            eprintln!("hello_window: {e}");
            return ExitCode::FAILURE;
        }
    };
    let n = n.unwrap_or(if emulate { 1 << 12 } else { 1 << 20 });
    if let (false, Err(e @ Error::NoDriver(_))) = (emulate, cuda::init_driver()) {
        println!("hello_window: skipped: {e}");
        return ExitCode::SUCCESS;
    }
    let ok = all_passed(
        run_ranks(threads, |comm| hello(comm, n, emulate)),
        |_, line| {
            println!("{line}");
            true
        },
        |rank, e| eprintln!("hello_window: rank {rank} FAILED: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
