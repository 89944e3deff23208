//! `symcomm-bench`: nccl-tests-style rows for the gallery collectives and NCCL, side by side
//! in the same run, with every result checked.
//!
//! Usage: `symcomm-run -n 8 symcomm-bench [OPTIONS]` (one process per GPU, the default
//! mode) or `symcomm-bench --threads 8 [OPTIONS]` (one process driving 8 GPUs).
//!
//! Options:
//! - `--coll LIST`: `all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,rmsnorm` or
//!   `all` (default `all_reduce`); `--coll gin` is a benchmark of its own (GIN between two
//!   nodes against raw TCP: see `gin.rs`)
//! - `--types LIST`: `f32,bf16,f16,i32` (default `f32,bf16`); `--ops LIST`: `sum,min,max`
//!   (default `sum`)
//! - `--min BYTES`, `--max BYTES` (suffixes K, M, G; default 4K and 1G), sizes double; or
//!   `--sizes LIST`: these byte counts, in this order (any count of elements: a size that is
//!   not whole elements per rank block is named in a `#` line instead of a row)
//! - `--iters N` ops captured per CUDA graph (20), `--replays N` timed replays (20),
//!   `--warmup N` untimed replays (5)
//! - `--inplace`: in-place variants; `--no-nccl`: symcomm only
//! - `--vs-aligned`: each size that is not whole 16-byte packs per rank block (an odd element
//!   count) is timed against the next size that is: both checked, both captured, and their
//!   graph replays interleaved (A, B, A, B, …) so that clocks and neighbours treat them alike;
//!   a `#` line after the two rows gives the ratio and the difference of their medians
//! - `--fused-windows`: the fused rows write `out` and `residual_out` in a registered window
//!   (`all_reduce_rmsnorm_into`: up to `SYMCOMM_FUSED_DIRECT_MAX` the two-shot pushes the
//!   rows directly, algo `direct`) instead of plain device buffers
//! - `--eager`: no CUDA graphs: each timed round is `--iters` ops launched one by one on the
//!   stream (host launch costs included, as in an eager PyTorch program)
//! - `--algos LIST`: all-reduce rows per forced algorithm (`auto,one_shot,two_shot_ll,
//!   two_shot,two_shot_push`; default `auto` = chosen by size); `two_shot_push` turns the push
//!   scratch back on (32 MiB) if `SYMCOMM_PUSH_SCRATCH=0` turned it off. `multimem_one_shot`
//!   and `multimem_two_shot` (NVLink SHARP) run only with `SYMCOMM_NVLS=1` (else the choice by
//!   size); never use them on a shared machine. NCCL still runs with `NCCL_NVLS_ENABLE=0`
//!   then (set below for every run), so those rows compare against NCCL without NVLS
//!
//! For each size and implementation: inputs are filled with the pattern (random small
//! integers, exact in every type), outputs poisoned with 0x7f bytes, the collective runs once
//! and every element of every rank's output is checked (#wrong, summed over ranks); then N
//! ops are captured into a CUDA graph, replayed back to back, each replay timed with CUDA
//! events, and the median replay time / N is the time (mean over ranks). NCCL runs with
//! `NCCL_NVLS_ENABLE=0`. Exits non-zero if any element was wrong.
//!
//! On the CPU emulator (`SYMCOMM_BACKEND=emu`, or no CUDA driver) the same code runs the
//! kernels on the host: NCCL is off (it needs GPUs), a graph replay runs its `--iters` ops
//! again, synchronously, timed on the host clock, blocks are small
//! (`symcomm_gallery::sizing`), so the fused RMSNorm rows are 512 and 1024 wide, and the
//! defaults shrink to `--max 64K --iters 1 --replays 3 --warmup 1`.

mod coll;
mod error;
mod gin;
mod nccl;
mod norm;
mod opts;
mod plain;
mod rank;
mod report;
mod timing;

use std::process::ExitCode;

use symcomm::{Communicator, Error, Result, cuda};
use symcomm_gallery::kernels;

use crate::coll::Coll;
use crate::opts::{Opts, USAGE, parse_args};
use crate::rank::Rank;
use crate::report::Report;

fn main() -> ExitCode {
    // NVLink SHARP stays off on the shared node: set before NCCL (or anything) starts.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    symcomm::init_logging(); // SYMCOMM_LOG
    let args: Vec<String> = std::env::args().skip(1).collect();
    let notice = match symcomm::backend::emulator_notice("symcomm-bench") {
        Ok(n) => n,
        Err(e) => {
            eprintln!("symcomm-bench: {e}");
            return ExitCode::from(2);
        }
    };
    // A device that runs only small grids (the CPU emulator) gets small default sizes.
    let small = match symcomm::launch::limits() {
        Ok(l) => l.max_grid_blocks.is_some(),
        Err(e) => {
            eprintln!("symcomm-bench: {e}");
            return ExitCode::from(2);
        }
    };
    // `--coll gin`: GIN between two nodes, its own rows and baselines (see `gin`).
    if args.windows(2).any(|w| w[0] == "--coll" && w[1] == "gin") {
        if let Some(line) = &notice {
            println!("{line}");
        }
        return match gin::parse(&args) {
            Ok(o) if gin::run(&o) => ExitCode::SUCCESS,
            Ok(_) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("symcomm-bench: {e}");
                ExitCode::from(2)
            }
        };
    }
    let opts = match parse_args(args, small) {
        Ok(o) => o,
        Err(e) => {
            if e != "help" {
                eprintln!("symcomm-bench: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match &notice {
        Some(line) => println!("{line}"),
        None => {
            if let Err(e @ Error::NoDriver(_)) = cuda::init_driver() {
                println!("symcomm-bench: skipped: {e}");
                return ExitCode::SUCCESS;
            }
        }
    }
    let ok = symcomm::ranks::all_passed(
        symcomm::ranks::run_ranks(opts.threads, |comm| run_rank(comm, &opts)),
        |rank, (rows, wrong)| {
            if rank == 0 {
                println!("{}", report::totals(rows, wrong));
            }
            wrong == 0
        },
        |rank, e| eprintln!("symcomm-bench: rank {rank} FAILED: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One rank's benchmark: set up, print the header (rank 0), then the rows of every
/// collective of the command line. Returns the rows and their wrong elements (summed over
/// ranks: the same on every rank).
fn run_rank(comm: Communicator, opts: &Opts) -> Result<(usize, u64)> {
    let rank = Rank::new(comm, opts)?;
    let mut report = Report::new(rank.rank() == 0);
    preamble(&rank, &report)?;
    let mut seed = 1u32;
    for &coll in &opts.colls {
        match coll {
            Coll::RmsNorm => norm::rows(&rank, &mut seed, &mut report)?,
            _ => plain::rows(&rank, coll, &mut seed, &mut report)?,
        }
    }
    Ok(report.totals())
}

/// The header and the module line (rank 0). Every multimem kernel is looked up first: they
/// are JIT-compiled with the module and run only when forced with multicast on (`--algos
/// multimem_*` and `SYMCOMM_NVLS=1`, never on our node).
fn preamble(rank: &Rank<'_>, report: &Report) -> Result<()> {
    let g = &rank.gallery;
    let nccl = rank.nccl.as_ref().map(|x| x.version);
    let pdl = g.tuning().dependent_launch.name();
    let head = report::header(rank.opts, rank.n(), nccl, rank.emulated(), pdl);
    let multimem: Vec<&str> = kernels::ENTRY_POINTS
        .iter()
        .copied()
        .filter(|e| e.contains("multimem"))
        .collect();
    for name in &multimem {
        g.module().function(name)?;
    }
    report.note(&head);
    let (all, on) = (kernels::ENTRY_POINTS.len(), g.tuning().multimem);
    report.note(&report::module_line(all, multimem.len(), on));
    Ok(())
}
