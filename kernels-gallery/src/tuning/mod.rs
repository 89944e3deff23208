//! Algorithm selection and launch shapes: what the host API picks for a given size, and the
//! environment knobs that change it.
//!
//! Every rank must pick the same algorithm and shape for the same call, so the knobs must be
//! set identically on every rank (the launcher passes the environment to all of them);
//! `Collectives::new` compares them across ranks ([`Tuning::agreed_knobs`]) and refuses to
//! start, on every rank, where they differ.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `SYMCOMM_ALGO` | force the all-reduce algorithm: `one_shot`, `two_shot_ll`, `two_shot`, `two_shot_push`, `multimem_one_shot` or `multimem_two_shot` (the last two only with `SYMCOMM_NVLS=1`) | by size |
//! | `SYMCOMM_NVLS` | `1`: create the LSA multicast object (NVLink SHARP) with the collectives, which the multimem algorithms need; the runtime refuses it without the same opt-in ([`Tuning::multimem`]) | off |
//! | `SYMCOMM_ONE_SHOT_MAX` | largest all-reduce (bytes) that uses the one-shot LL kernel | 64 KiB (256 KiB on 2 ranks, 128 KiB on 3: [`Tuning::for_ranks`]) |
//! | `SYMCOMM_FUSED_ONE_SHOT_MAX` / `SYMCOMM_FUSED_TWO_SHOT_LL_MAX` | the same limits for the fused all-reduce + RMSNorm | 64 KiB (as the one-shot's on 2 and 3 ranks) / 256 KiB |
//! | `SYMCOMM_TWO_SHOT_LL_MAX` | largest all-reduce (bytes) that uses the two-shot LL kernel (never above the one-shot limit by default) | 64 KiB |
//! | `SYMCOMM_FUSED_DIRECT_MAX` | largest fused two-shot (bytes of rows) with window outputs (`all_reduce_rmsnorm_into`) whose row owners write every rank's `out` and `residual_out` themselves; above it they push `h` once and every rank normalises locally | no limit |
//! | `SYMCOMM_LL_MAX` | largest all-gather / reduce-scatter / all-to-all (bytes, nccl-tests size) on LL kernels | 256 KiB |
//! | `SYMCOMM_PUSH_SCRATCH` | bytes of slots of the pipelined push (stores-only) all-reduce and reduce-scatter, i.e. their scratch size (plus a few KiB of counters); 0 = off | 32 MiB |
//! | `SYMCOMM_PUSH_SLOTS` | slots per block and peer of the pipelined push kernels (2–16; steps in flight) | 2 |
//! | `SYMCOMM_PUSH_MIN` | smallest all-reduce (bytes) that uses the pipelined push when it is on | 16 MiB |
//! | `SYMCOMM_RS_PUSH_MIN` | smallest reduce-scatter (bytes, nccl-tests size) that uses it | never (the pulling reduce-scatter is faster on 4×H200) |
//! | `SYMCOMM_MAX_BLOCKS` | most blocks of a barrier-based kernel (1–128) | 128 |
//! | `SYMCOMM_MIN_THREADS` | fewest threads per block of a barrier-based kernel (32–512, a multiple of 32): grids take up to `SYMCOMM_MAX_BLOCKS` blocks this narrow before blocks grow (see `plan::spread`) | 128 |
//! | `SYMCOMM_LL_BLOCKS` | most blocks of an LL kernel (1–64; all must be resident at once) | 64 |
//! | `SYMCOMM_LL_MIN_THREADS` | the same as `SYMCOMM_MIN_THREADS` for the LL kernels, and for the fused LL kernels on rows wider than one full block (there at least one pack per thread in 8 blocks) | 64 |
//! | `SYMCOMM_TIMEOUT_MS` | bound of every device-side wait | 10 000 |
//! | `SYMCOMM_PDL` | which launches use programmatic dependent launch: `all`, `ll` (the LL kernels) or `off` ([`DependentLaunch`]) | `all` |

//!
//! The files: [`Algo`] (the all-reduce algorithms), the knobs with their defaults and limits
//! ([`Tuning`], `knobs.rs`), reading them from the environment (`env.rs`), the choice by size
//! (`choice.rs`) and the launch shapes and scratch sizes they imply (`shape.rs`).

mod algo;
mod choice;
mod env;
mod knobs;
mod shape;

pub use algo::Algo;
pub use knobs::{
    DependentLaunch, LL_LIMIT, LL_TWO_SHOT_LIMIT, MAX_BLOCKS, MAX_LL_BLOCKS, MAX_PUSH_SLOTS,
    PUSH_SCRATCH_LIMIT, Tuning,
};

#[cfg(test)]
mod tests;
