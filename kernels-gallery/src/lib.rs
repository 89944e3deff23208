//! `symcomm-gallery`: collectives written only against the public device API, a host API that
//! picks the algorithm by size, and the `symcomm-bench` benchmark (symcomm and NCCL side by
//! side, CUDA-graph timed, every element checked).
//!
//! ```ignore
//! let gallery = Collectives::from_env(&comm)?;               // collective
//! let win = comm.register_window(&mem)?;                     // collective
//! gallery.all_reduce(Buf::whole(&win), Buf::whole(&win), n, DataType::Bf16, RedOp::Sum, stream)?;
//! ```
//!
//! | collective | small (LL, no barrier) | large |
//! |---|---|---|
//! | all-reduce | ≤ 64 KiB one-shot: push input as LL lines, reduce all in rank order (a two-shot on LL lines exists, off by default) | two-shot: reduce-scatter by loads + all-gather by stores between two barriers (or `two_shot_push`: stores only, through a scratch; off by default) |
//! | all-gather | push to every peer as LL lines | push with 16-byte stores between two barriers |
//! | reduce-scatter | LL lines, reduce in rank order | load slice `rank` from every peer |
//! | all-to-all | LL lines | push blocks between two barriers |
//! | broadcast | the root pushes LL lines to every peer, which acknowledge | each rank pulls a slice from the root and pushes it to all |
//! | all-reduce + residual + RMSNorm (bf16) | one-shot LL, normalise locally | rows split across ranks, `h` pushed, normalised locally |
//!
//! Types f32, bf16, f16, i32 with sum/min/max (16-bit floats accumulate in f32); multimem
//! (NVLink SHARP) variants of the all-reduce (sums of f32, bf16, f16, i32; min/max of bf16,
//! f16, i32) are tested on the emulator and run only when forced (`SYMCOMM_ALGO=multimem_*`
//! with `SYMCOMM_NVLS=1`; never on our test node). Any element count at any element offset
//! (an empty call, count 0, runs nothing); the multimem algorithms and the fused RMSNorm run
//! only on 16-byte multiples. Every rank must make the same calls in the same order with the
//! same environment
//! ([`Tuning`] lists the knobs, e.g. `SYMCOMM_ALGO`).
//!
//! All calls are asynchronous and CUDA-graph capturable: barrier epochs and LL counters live
//! in device memory. Device-side waits are bounded (`SYMCOMM_TIMEOUT_MS`); a timeout is
//! reported by [`Collectives::check_status`] after a stream sync, after which the
//! [`Collectives`] must be re-created.
//!
//! On the CPU emulator (`SYMCOMM_BACKEND=emu`) the same host code runs the kernels on the
//! host, synchronously, with small blocks (see [`sizing`]).
//!
//! The kernels live in `kernels-gallery/kernels` (crate `symcomm-gallery-kernels`); the
//! `emulated` test there runs every kernel on the CPU with one thread per rank.
//!
//! # symcomm-bench
//!
//! ```text
//! symcomm-run -n 8 -- symcomm-bench [--coll all] [--types f32,bf16] [--min 4K] [--max 1G]
//! symcomm-bench --threads 8 [...]
//! ```
//! See `src/bin/symcomm-bench/main.rs` for every option.

#![warn(missing_docs)]

mod agreement;
pub mod buffer;
pub mod check;
pub mod collectives;
pub mod rmsnorm;
pub mod sizing;
pub mod tuning;
pub mod types;

pub use buffer::Buf;
pub use collectives::Collectives;
pub use rmsnorm::NormBuffers;
pub use tuning::{Algo, Tuning};
pub use types::{DataType, RedOp};

/// The gallery kernels as PTX, with their entry points.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_gallery_kernels.rs"));
}
