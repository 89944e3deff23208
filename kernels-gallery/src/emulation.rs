//! The gallery on the CPU emulator (`SYMCOMM_BACKEND=emu`, or no CUDA driver).
//!
//! The host API and `symcomm-bench` run unchanged: kernels are launched by name through
//! `symcomm::launch`, which runs them on the emulator (one OS thread per GPU thread,
//! synchronously, streams ignored). Two things differ, because every emulated GPU thread is
//! an OS thread:
//! - blocks have [`threads`] threads (`SYMCOMM_EMU_THREADS`, default
//!   [`DEFAULT_THREADS`]) instead of [`plan::THREADS`]: the kernels stride over
//!   `block_dim()`, so any block size works, except that the fused RMSNorm then takes rows of
//!   at most `8 × MAX_PACKS × threads` elements;
//! - [`tuning_from_env`] caps the grids at [`DEFAULT_BLOCKS`] blocks unless
//!   `SYMCOMM_MAX_BLOCKS` / `SYMCOMM_LL_BLOCKS` say otherwise, and the push scratch at
//!   [`EMULATED_PUSH_SCRATCH`] unless `SYMCOMM_PUSH_SCRATCH` does.

use symcomm::{Error, Result};
use symcomm_gallery_kernels::plan;

use crate::tuning::Tuning;

/// The variable that sets the threads per block under emulation.
pub const THREADS_ENV: &str = "SYMCOMM_EMU_THREADS";

/// Threads per block under emulation unless [`THREADS_ENV`] is set (two warps).
pub const DEFAULT_THREADS: u32 = 64;

/// Most blocks of a kernel under emulation unless `SYMCOMM_MAX_BLOCKS` / `SYMCOMM_LL_BLOCKS`
/// are set.
pub const DEFAULT_BLOCKS: u32 = 2;

/// Bytes of push-kernel slots under emulation unless `SYMCOMM_PUSH_SCRATCH` is set (the
/// emulated windows are host memory, one copy per rank).
pub const EMULATED_PUSH_SCRATCH: usize = 256 << 10;

/// True when this process runs on the CPU emulator.
pub fn is_emulated() -> Result<bool> {
    symcomm::backend::is_emulated()
}

/// Threads per block of every gallery kernel on this backend: [`plan::THREADS`] on GPUs,
/// `SYMCOMM_EMU_THREADS` (1–1024, default [`DEFAULT_THREADS`]) under emulation.
pub fn threads() -> Result<u32> {
    if !is_emulated()? {
        return Ok(plan::THREADS);
    }
    threads_from(std::env::var(THREADS_ENV).ok().as_deref())
}

fn threads_from(v: Option<&str>) -> Result<u32> {
    match v {
        None => Ok(DEFAULT_THREADS),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(n),
            _ => Err(Error::Env {
                var: THREADS_ENV.into(),
                reason: format!("{v:?} is not a number in 1..=1024"),
            }),
        },
    }
}

/// [`Tuning::from_env_for`] `n` ranks, with the grid caps at [`DEFAULT_BLOCKS`] under
/// emulation where the environment does not set them.
pub fn tuning_from_env(n: usize) -> Result<Tuning> {
    let mut t = Tuning::from_env_for(n)?;
    if is_emulated()? {
        emulated_caps(&mut t, |k| std::env::var_os(k).is_some());
    }
    Ok(t)
}

fn emulated_caps(t: &mut Tuning, is_set: impl Fn(&str) -> bool) {
    if !is_set("SYMCOMM_MAX_BLOCKS") {
        t.max_blocks = t.max_blocks.min(DEFAULT_BLOCKS);
    }
    if !is_set("SYMCOMM_LL_BLOCKS") {
        t.ll_blocks = t.ll_blocks.min(DEFAULT_BLOCKS);
    }
    if !is_set("SYMCOMM_PUSH_SCRATCH") {
        t.push_scratch = t.push_scratch.min(EMULATED_PUSH_SCRATCH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_default_to_two_warps_and_reject_nonsense() {
        assert_eq!(threads_from(None).unwrap(), 64);
        assert_eq!(threads_from(Some("32")).unwrap(), 32);
        assert!(threads_from(Some("0")).is_err());
        assert!(threads_from(Some("2048")).is_err());
        assert!(threads_from(Some("x")).is_err());
    }

    #[test]
    fn grid_caps_apply_only_where_the_environment_is_silent() {
        let mut t = Tuning::default();
        emulated_caps(&mut t, |_| false);
        assert_eq!((t.max_blocks, t.ll_blocks), (2, 2));
        let mut t = Tuning::default();
        emulated_caps(&mut t, |k| k == "SYMCOMM_LL_BLOCKS");
        assert_eq!(
            (t.max_blocks, t.ll_blocks),
            (2, Tuning::default().ll_blocks)
        );
        assert_eq!(t.push_scratch, EMULATED_PUSH_SCRATCH);
    }
}
