//! `hello_window`: the first symmetric-memory program. Every rank registers a window, writes a
//! pattern into its slot of every LSA peer's copy, synchronises with an LSA barrier, and checks
//! that its own copy holds every peer's pattern.
//!
//! Usage: `symcomm-run -n 8 hello_window [--n N]` (one process per GPU), or
//! `hello_window --threads 8 [--n N]` (one process driving 8 GPUs).

use std::process::ExitCode;

use symcomm::cuda::{self, VmmBuffer};
use symcomm::launch::{LaunchConfig, Module, synchronize};
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory};
use symcomm_device::window::Window as DeviceWindow;
use symcomm_example_kernels::hello_pattern;
use symcomm_examples::kernels;
use symcomm_examples::ranks::{run_ranks, take_threads_flag};

const BLOCKS: u32 = 8;
const TIMEOUT_NS: u64 = 20_000_000_000;

// ANCHOR: rank
fn hello(comm: Communicator, n: usize) -> Result<String> {
    // ANCHOR: setup
    let _ctx = cuda::open_device(comm.device())?;
    let lsa = comm.lsa_size();
    let mem = SymmetricMemory::alloc(&comm, lsa * n * 4)?;
    mem.buffer().fill_bytes(0xff)?; // poison: every slot must be overwritten by its peer
    let win = comm.register_window(&mem)?; // collective
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(BLOCKS))?; // collective
    let status = VmmBuffer::new(comm.device() as i32, BLOCKS as usize * 4)?;
    status.fill_bytes(0xff)?;
    // ANCHOR_END: setup

    // ANCHOR: launch
    let module = Module::load(kernels::PTX)?;
    let kernel = module.function("hello_window")?;
    let args = (
        dev.raw(),
        win.device_ptr() as *const DeviceWindow,
        n as u64,
        TIMEOUT_NS,
        status.device_ptr() as *mut u32,
    );
    // SAFETY: the arguments match `hello_window`; the window holds lsa × n u32, the
    // communicator has BLOCKS barriers, and every rank launches the same shape.
    unsafe {
        kernel.launch_with(
            LaunchConfig::linear(BLOCKS, 512),
            std::ptr::null_mut(),
            args,
        )?
    };
    synchronize()?;
    // ANCHOR_END: launch

    // ANCHOR: check
    let mut codes = vec![0u32; BLOCKS as usize];
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
        "hello_window: rank {} (GPU {}) sees the patterns of all {lsa} LSA peers ({n} values each)",
        comm.rank(),
        comm.device()
    ))
}
// ANCHOR_END: rank

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
        [] => 1 << 20,
        [flag, v] if flag == "--n" => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
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
    if let Err(e @ Error::NoDriver(_)) = cuda::init_driver() {
        println!("hello_window: skipped: {e}");
        return ExitCode::SUCCESS;
    }
    let mut ok = true;
    for (rank, result) in run_ranks(threads, |comm| hello(comm, n)) {
        match result {
            Ok(line) => println!("{line}"),
            Err(e) => {
                ok = false;
                eprintln!("hello_window: rank {rank} FAILED: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
