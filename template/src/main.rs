//! `my-app`: every rank holds a vector `x_r`; one fused kernel computes
//! `y = scale × Σ_r x_r + bias` on every rank (an all-reduce, then an element-wise operation),
//! and each rank checks every element of `y` against a host reference, over several calls.
//!
//! ```text
//! my-app --threads 4 [--n ELEMENTS] [--iters K]       4 ranks as threads of one process
//! symcomm-run -n 4 my-app [--n ELEMENTS] [--iters K]  4 ranks as processes
//! ```
//!
//! Rank `r` uses GPU `r` (`SYMCOMM_DEVICE` puts every rank on one GPU). Without a CUDA driver
//! (or with `SYMCOMM_BACKEND=emu`) the same code runs on the CPU emulator.

use std::process::ExitCode;

use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::{all_passed, run_ranks, take_threads_flag};
use symcomm::{Communicator, DevComm, Device, Error, Requirements, Result, SymmetricMemory};

// The kernel's launch type, which `#[kernel]` emits next to it: launches through it are
// checked by the compiler against the kernel's signature.
use my_app_kernels::AllReduceScaleBias;

// ANCHOR: embed
/// The kernels crate as PTX (`PTX`, `ENTRY_POINTS`), written by `build.rs`. Including it also
/// links the kernels' host build, which the CPU emulator runs.
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/my_app_kernels.rs"));
}
// ANCHOR_END: embed

/// Gives up on a peer that never reaches a barrier after this long (GPU time).
const TIMEOUT_NS: u64 = 20_000_000_000;

struct Args {
    threads: Option<usize>,
    n: Option<usize>,
    iters: usize,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut rest: Vec<String> = std::env::args().skip(1).collect();
    let threads = take_threads_flag(&mut rest)?;
    let mut args = Args {
        threads,
        n: None,
        iters: 3,
    };
    let mut it = rest.into_iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| v > 0)
            .ok_or(format!("{flag} needs a positive number"))?;
        match flag.as_str() {
            "--n" => args.n = Some(value),
            "--iters" => args.iters = value,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(args)
}

/// Rank `rank`'s input of call `iter`, and the bias: random values in [-100, 100).
fn input(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let bits = s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
            bits as f32 / (1u64 << 24) as f32 * 200.0 - 100.0
        })
        .collect()
}

/// The launch: `BLOCKS` blocks (each with a barrier of its own) of `THREADS` threads. The
/// kernel strides over any shape; raise `BLOCKS` for long vectors on GPUs. (The CPU emulator
/// runs every GPU thread as an OS thread: 4 ranks as threads are 4096 threads here.)
const BLOCKS: u32 = 8;
const THREADS: u32 = 128;

// ANCHOR: rank
/// One rank: set up, run `iters` calls, check every element of every call.
fn rank(comm: Communicator, n: usize, iters: usize) -> Result<String> {
    // ANCHOR: setup
    let dev = Device::for_rank(&comm)?; // the rank's GPU (or emulated device)
    let stream = dev.stream()?; // ranks sharing a GPU then run at once
    let x = SymmetricMemory::alloc(&comm, n * 4)?; // this rank's input, readable by its peers
    let bias = dev.alloc(n * 4)?;
    let y = dev.alloc(n * 4)?;
    let status = dev.alloc(BLOCKS as usize * 4)?;
    let bias_host = input(u64::MAX, n);
    stream.copy_to_device(&bias, 0, &bias_host)?;
    // Loading a module waits for the kernels running in the context: with ranks sharing a
    // GPU, load it before the collective calls, as a peer's kernel may wait for ours.
    let module = Module::load(kernels::PTX)?;
    let kernel = module.kernel::<AllReduceScaleBias>()?; // typed by the kernel's signature
    let win = comm.register_window(&x)?; // collective
    let devcomm = DevComm::create(&comm, Requirements::new().lsa_barriers(BLOCKS))?; // collective
    // ANCHOR_END: setup

    let scale = 0.5f32;
    let first = comm.rank() - comm.lsa_rank();
    for iter in 0..iters as u64 {
        // ANCHOR: call
        let mine = input(comm.rank() as u64 * 1000 + iter, n);
        stream.copy_to_device(&x, 0, &mine)?; // complete when it returns
        stream.fill_bytes(&y, 0xff)?; // poison: NaN until the kernel writes it
        stream.fill_bytes(&status, 0xff)?;
        // Exactly the kernel's parameter types, or this does not compile.
        let args = (
            devcomm.raw(),
            win.handle(), // the window (a `WindowHandle`)
            n as u64,
            scale,
            bias.as_ptr(),  // *const f32
            y.as_mut_ptr(), // *mut f32
            TIMEOUT_NS,
            status.as_mut_ptr(), // *mut u32
        );
        let cfg = LaunchConfig::linear(BLOCKS, THREADS);
        // SAFETY: every copy of the window holds n f32, bias and y hold n f32, status one word
        // per block; the communicator has one barrier per block; every rank launches the same
        // shape; all of it outlives the stream synchronisation below.
        unsafe { kernel.launch(cfg, &stream, args)? };
        stream.synchronize()?; // this rank's kernel only
        // ANCHOR_END: call

        // ANCHOR: check
        let mut codes = vec![0u32; BLOCKS as usize];
        stream.copy_to_host(&status, 0, &mut codes)?;
        if let Some(code) = codes.iter().find(|&&c| c != 0) {
            return Err(Error::InvalidArgument(format!(
                "call {iter}: a barrier failed with code {code} (1 timed out, 2 aborted)"
            )));
        }
        let mut got = vec![0f32; n];
        stream.copy_to_host(&y, 0, &mut got)?;
        let inputs: Vec<Vec<f32>> = (0..comm.lsa_size())
            .map(|p| input((first + p) as u64 * 1000 + iter, n))
            .collect();
        let wrong = (0..n)
            .filter(|&i| {
                let mut sum = 0.0f32; // the kernel's order: LSA rank 0, 1, …
                for x in &inputs {
                    sum += x[i];
                }
                got[i].to_bits() != (sum * scale + bias_host[i]).to_bits()
            })
            .count();
        if wrong != 0 {
            return Err(Error::InvalidArgument(format!(
                "call {iter}: {wrong} of {n} elements of y wrong"
            )));
        }
        // ANCHOR_END: check
    }
    Ok(format!(
        "my-app: rank {} of {}: {iters} calls of all_reduce_scale_bias, {n} elements each, every element checked",
        comm.rank(),
        comm.size()
    ))
}
// ANCHOR_END: rank

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG=info shows the topology
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("my-app: {msg}");
            eprintln!("usage: my-app [--threads N] [--n ELEMENTS] [--iters K]");
            return ExitCode::from(2);
        }
    };
    match symcomm::backend::emulator_notice("my-app") {
        Ok(Some(line)) => println!("{line}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("my-app: {e}");
            return ExitCode::FAILURE;
        }
    }
    let n = args.n.unwrap_or(1 << 20);
    let ok = all_passed(
        run_ranks(args.threads, |comm| rank(comm, n, args.iters)),
        |_, line| {
            println!("{line}");
            true
        },
        |rank, e| eprintln!("my-app: rank {rank} FAILED: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
