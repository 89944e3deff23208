//! `ring_exchange`: a ring all-gather over GIN (GPU-initiated networking). Every rank puts its
//! block to its right neighbour with a strong signal and forwards what it received, for
//! `size − 1` steps; afterwards every rank's window holds every rank's block, and the program
//! checks every element of it.
//!
//! Usage: `ring_exchange --threads N [--n N] [--rounds R]` runs N ranks as threads of this
//! process, rank `r` declaring its own node `node{r}` (so no two ranks share memory and every
//! block crosses GIN), rank `r` on GPU `r`, or every rank on GPU `SYMCOMM_DEVICE` when that is
//! set. Without `--threads` the ranks come from a launcher: `symcomm-run -n N ring_exchange`
//! (one process per rank; `symcomm-run --nnodes M` declares the nodes).
//!
//! Without a CUDA driver (or with `SYMCOMM_BACKEND=emu`) it says so in one line and runs the
//! same code on the CPU emulator.

use std::process::ExitCode;
use std::time::Duration;

use symcomm::cuda::VmmBuffer;
use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::{all_passed, run_ranks, take_threads_flag};
use symcomm::{
    CommOptions, Communicator, DevComm, Device, Error, Requirements, Result, Stream,
    SymmetricMemory,
};
use symcomm_example_kernels::{RingExchange, ring_pattern};
use symcomm_examples::kernels;

/// Threads of the one block (they write the rank's own block; one of them posts).
const THREADS: u32 = 128;
const TIMEOUT_NS: u64 = 20_000_000_000;
/// How long thread ranks wait for each other while the communicators are set up.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Args {
    threads: Option<usize>,
    n: usize,
    rounds: u32,
}

// ANCHOR: rank
fn ring(comm: Communicator, a: Args) -> Result<String> {
    let (size, n) = (comm.size(), a.n);
    let dev = Device::for_rank(&comm)?;
    // Loaded before the collective calls, like every example (a module load waits for the
    // kernels running in the context, which may be a peer's kernel waiting for ours).
    let module = Module::load(kernels::PTX)?;
    let kernel = module.kernel::<RingExchange>()?;
    let stream = dev.stream()?;
    let status = dev.alloc(2 * 4)?;
    let mem = SymmetricMemory::alloc(&comm, size * n * 4)?;
    let win = comm.register_window(&mem)?; // collective; the window gets its GIN id
    // One context and one signal: GIN connections to every rank and a proxy thread.
    let devcomm = DevComm::create(&comm, Requirements::new().gin_contexts(1).gin_signals(1))?;

    for round in 0..a.rounds {
        // Poison: every slot but our own must be overwritten by a put.
        stream.fill_bytes(&mem, 0xff)?;
        stream.fill_bytes(&status, 0xff)?;
        stream.synchronize()?;
        // No rank launches before every rank has poisoned, and checked the previous round.
        comm.bootstrap().barrier()?;
        let args = (
            devcomm.raw(),
            win.handle(),
            n as u64,
            round,
            // Signal 0 at launch: each launch adds size − 1 to it, and nothing else does.
            u64::from(round) * (size as u64 - 1),
            TIMEOUT_NS,
            status.as_mut_ptr::<u32>(),
        );
        // SAFETY: the window holds size × n u32 on every rank, the communicator has a GIN
        // context and a signal connecting every rank, signal 0 is `base` (the barrier above
        // orders the launches), status holds 2 u32, and every rank launches one block with
        // the same arguments.
        unsafe { kernel.launch(LaunchConfig::linear(1, THREADS), &stream, args)? };
        stream.synchronize()?;
        check(&comm, &devcomm, &stream, &mem, &status, n, round)?;
    }

    let stats = devcomm
        .gin_stats()
        .ok_or_else(|| Error::Internal("a device communicator without GIN".into()))?;
    // Each round this rank put size − 1 blocks: they crossed the transport.
    let least = u64::from(a.rounds) * (size as u64 - 1) * n as u64 * 4;
    if stats.bytes_sent < least {
        return Err(Error::InvalidArgument(format!(
            "the GIN transport sent {} bytes for this rank, fewer than the {least} it put",
            stats.bytes_sent
        )));
    }
    // Every kernel has finished: no rank drops its device communicator (and closes its
    // connections) or unmaps its window while a peer still uses them.
    comm.bootstrap().barrier()?;
    Ok(format!(
        "ring_exchange: rank {} of {size}: every block of every rank arrived ({} rounds × \
         {size} blocks × {n} values checked; GIN sent {} bytes)",
        comm.rank(),
        a.rounds,
        stats.bytes_sent
    ))
}
// ANCHOR_END: rank

/// Reads the kernel's status and this rank's window after round `round` and checks every value:
/// slot `o` holds rank `o`'s block.
fn check(
    comm: &Communicator,
    devcomm: &DevComm,
    stream: &Stream,
    mem: &SymmetricMemory,
    status: &VmmBuffer,
    n: usize,
    round: u32,
) -> Result<()> {
    let size = comm.size();
    let mut codes = [0u32; 2];
    stream.copy_to_host(status, 0, &mut codes)?;
    if codes != [0, size as u32 - 1] {
        let why = devcomm.failure().map_or(String::new(), |e| {
            format!(" (the communicator failed: {e})")
        });
        return Err(Error::InvalidArgument(format!(
            "round {round}: the kernel ended with code {} (1 = timeout, 2 = aborted) after {} \
             of {} steps{why}",
            codes[0],
            codes[1],
            size - 1
        )));
    }
    let mut got = vec![0u32; size * n];
    stream.copy_to_host(mem, 0, &mut got)?;
    let want = |o: usize, i: usize| ring_pattern(o as u32, round, i as u64);
    let wrong: Vec<(usize, usize)> = (0..size)
        .flat_map(|o| (0..n).map(move |i| (o, i)))
        .filter(|&(o, i)| got[o * n + i] != want(o, i))
        .collect();
    if let Some(&(o, i)) = wrong.first() {
        return Err(Error::InvalidArgument(format!(
            "round {round}: {} of {} values wrong in rank {}'s window; the first: element {i} \
             of rank {o}'s block is {:#010x}, want {:#010x}",
            wrong.len(),
            size * n,
            comm.rank(),
            got[o * n + i],
            want(o, i)
        )));
    }
    Ok(())
}

const USAGE: &str = "usage: ring_exchange [--threads N] [--n ELEMENTS] [--rounds R]";

fn parse() -> std::result::Result<Args, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let threads = take_threads_flag(&mut args)?;
    let mut a = Args {
        threads,
        n: 1 << 16,
        rounds: 3,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it
            .next()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| v > 0);
        match (flag.as_str(), v) {
            ("--n", Some(v)) => a.n = v,
            ("--rounds", Some(v)) => a.rounds = u32::try_from(v).map_err(|_| USAGE)?,
            ("--n" | "--rounds", None) => return Err(format!("{flag} needs a positive number")),
            _ => return Err(USAGE.into()),
        }
    }
    Ok(a)
}

/// Thread ranks that each declare their own node, on GPU `r` or all on `SYMCOMM_DEVICE`.
fn thread_ranks(n: usize, a: Args) -> Vec<(usize, Result<String>)> {
    let one = std::env::var("SYMCOMM_DEVICE")
        .ok()
        .and_then(|d| d.parse::<usize>().ok());
    let comms = Communicator::init_threads_with(n, INIT_TIMEOUT, |r| {
        CommOptions::new()
            .device(one.unwrap_or(r))
            .node_id(format!("node{r}"))
    });
    match comms {
        Err(e) => vec![(0, Err(e))],
        Ok(comms) => std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .map(|c| (c.rank(), s.spawn(move || ring(c, a))))
                .collect();
            handles
                .into_iter()
                .map(|(r, h)| {
                    let res = h.join().unwrap_or_else(|_| {
                        Err(Error::Panicked {
                            rank: Some(r),
                            what: "the rank's thread".into(),
                        })
                    });
                    (r, res)
                })
                .collect()
        }),
    }
}

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ring_exchange: {e}");
            return ExitCode::from(2);
        }
    };
    match symcomm::backend::emulator_notice("ring_exchange") {
        Ok(Some(line)) => println!("{line}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("ring_exchange: {e}");
            return ExitCode::FAILURE;
        }
    }
    let results = match a.threads {
        Some(n) => thread_ranks(n, a),
        None => run_ranks(None, |comm| ring(comm, a)),
    };
    let ok = all_passed(
        results,
        |_, line| {
            println!("{line}");
            true
        },
        |rank, e| eprintln!("ring_exchange: rank {rank} FAILED: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
