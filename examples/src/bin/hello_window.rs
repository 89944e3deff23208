//! `hello_window`: the first symmetric-memory program. Every rank registers a window, writes a
//! pattern into its slot of every LSA peer's copy, synchronises with an LSA barrier, and checks
//! that its own copy holds every peer's pattern.
//!
//! Usage: `symcomm-run -n 8 hello_window [--n N]` (one process per GPU), or
//! `hello_window --threads 8 [--n N]` (one process driving 8 GPUs).
//!
//! Without a CUDA driver (or with `SYMCOMM_BACKEND=emu`) it says so in one line and runs the
//! same code on the CPU emulator, in either launch mode: the same registration, device
//! communicator and kernel, on host memory.

use std::process::ExitCode;

use symcomm::cuda::VmmBuffer;
use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::{all_passed, run_ranks, take_threads_flag};
use symcomm::{
    Communicator, DevComm, Device, Error, Requirements, Result, Stream, SymmetricMemory,
};
use symcomm_example_kernels::{HelloWindow, hello_pattern};
use symcomm_examples::kernels;

/// Blocks of the launch, and barriers of the device communicator (one per block).
const BLOCKS: u32 = 8;
/// Threads per block: the kernel strides over any shape. (Under emulation every GPU thread is
/// an OS thread, so with 8 ranks as threads this is 8192 threads.)
const THREADS: u32 = 128;
const TIMEOUT_NS: u64 = 20_000_000_000;

// ANCHOR: rank
fn hello(comm: Communicator, n: usize) -> Result<String> {
    // ANCHOR: setup
    let dev = Device::for_rank(&comm)?; // the rank's GPU, current on this thread
    let lsa = comm.lsa_size();
    let mem = SymmetricMemory::alloc(&comm, lsa * n * 4)?;
    let status = dev.alloc(BLOCKS as usize * 4)?;
    // Before the collective calls: loading a module waits for every kernel running in the
    // context, which with ranks sharing a GPU may be a peer's kernel waiting for ours.
    let module = Module::load(kernels::PTX)?;
    let kernel = module.kernel::<HelloWindow>()?; // typed by the kernel's signature
    // A stream of our own: ranks sharing a GPU (threads on one context) then run at once.
    let stream = dev.stream()?;
    stream.fill_bytes(&mem, 0xff)?; // poison: every slot must be overwritten by its peer
    stream.fill_bytes(&status, 0xff)?;
    stream.synchronize()?; // the poison lands before any peer can write
    let win = comm.register_window(&mem)?; // collective
    let devcomm = DevComm::create(&comm, Requirements::new().lsa_barriers(BLOCKS))?; // collective
    // ANCHOR_END: setup

    // ANCHOR: launch
    let args = (
        devcomm.raw(),
        win.handle(), // the window as kernels take it (a `WindowHandle`)
        n as u64,
        TIMEOUT_NS,
        status.as_mut_ptr::<u32>(),
    );
    // SAFETY: the window holds lsa × n u32, status BLOCKS u32, the communicator has BLOCKS
    // barriers, and every rank launches the same shape (the types are checked by the compiler).
    unsafe { kernel.launch(LaunchConfig::linear(BLOCKS, THREADS), &stream, args)? };
    stream.synchronize()?; // this rank's kernel only, not the other ranks' in the context
    // ANCHOR_END: launch
    let line = check(&comm, &stream, &mem, &status, n)?;
    comm.bootstrap().barrier()?; // no rank unmaps its window while a peer still checks
    Ok(line)
}
// ANCHOR_END: rank

/// Reads the barrier codes and this rank's copy of the window and checks every value.
fn check(
    comm: &Communicator,
    stream: &Stream,
    mem: &SymmetricMemory,
    status: &VmmBuffer,
    n: usize,
) -> Result<String> {
    // ANCHOR: check
    let lsa = comm.lsa_size();
    let mut codes = vec![0u32; BLOCKS as usize];
    stream.copy_to_host(status, 0, &mut codes)?;
    if let Some(code) = codes.iter().find(|&&c| c != 0) {
        return Err(Error::InvalidArgument(format!(
            "a barrier failed with code {code} (1 = timeout, 2 = aborted)"
        )));
    }
    let mut got = vec![0u32; lsa * n];
    stream.copy_to_host(mem, 0, &mut got)?;
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
        "hello_window: rank {} (device {}) sees the patterns of all {lsa} LSA peers ({n} values each)",
        comm.rank(),
        comm.device()
    ))
}

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG
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
    match symcomm::backend::emulator_notice("hello_window") {
        // One process prints the line once, whatever its number of ranks.
        Ok(Some(line)) => println!("{line}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("hello_window: {e}");
            return ExitCode::FAILURE;
        }
    }
    let n = n.unwrap_or(1 << 16);
    let ok = all_passed(
        run_ranks(threads, |comm| hello(comm, n)),
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
