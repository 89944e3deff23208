//! Sizing the gallery's launches to the device's [`LaunchLimits`] (`symcomm::launch::limits`),
//! so that the same host code runs on GPUs and on the CPU emulator.
//!
//! A GPU takes blocks of [`plan::THREADS`] and every grid [`Tuning`] asks for. The emulator
//! runs every GPU thread as an OS thread and says so in its limits (blocks of
//! `SYMCOMM_EMU_THREADS`, default 64; grids of `SYMCOMM_EMU_BLOCKS`, default 2), and the
//! gallery keeps within them:
//! - blocks have [`threads`] threads: the kernels stride over `block_dim()`, so any block size
//!   works, except that the fused RMSNorm then takes rows of at most `8 × MAX_PACKS × threads`
//!   elements;
//! - [`tuning_from_env`] caps the grids at the limit's blocks unless `SYMCOMM_MAX_BLOCKS` /
//!   `SYMCOMM_LL_BLOCKS` say otherwise, and then the push scratch (sized for large grids) at
//!   [`CAPPED_PUSH_SCRATCH`] unless `SYMCOMM_PUSH_SCRATCH` does.

use symcomm::Result;
use symcomm::launch::{LaunchLimits, limits};
use symcomm_gallery_kernels::plan;

use crate::tuning::Tuning;

/// Bytes of push-kernel slots when the device limits the grid and `SYMCOMM_PUSH_SCRATCH` is
/// not set: a few blocks' pipelines need no more.
pub const CAPPED_PUSH_SCRATCH: usize = 256 << 10;

/// Threads per block of every gallery kernel on this device: [`plan::THREADS`], or fewer where
/// the device's limits say so.
pub fn threads() -> Result<u32> {
    Ok(threads_within(limits()?))
}

fn threads_within(l: LaunchLimits) -> u32 {
    plan::THREADS.min(l.max_block_threads)
}

/// [`Tuning::from_env_for`] `n` ranks, with the grid caps within the device's limits where the
/// environment does not set them.
pub fn tuning_from_env(n: usize) -> Result<Tuning> {
    let mut t = Tuning::from_env_for(n)?;
    fit(&mut t, limits()?, |k| std::env::var_os(k).is_some());
    Ok(t)
}

fn fit(t: &mut Tuning, l: LaunchLimits, is_set: impl Fn(&str) -> bool) {
    let Some(blocks) = l.max_grid_blocks else {
        return;
    };
    if !is_set("SYMCOMM_MAX_BLOCKS") {
        t.max_blocks = t.max_blocks.min(blocks);
    }
    if !is_set("SYMCOMM_LL_BLOCKS") {
        t.ll_blocks = t.ll_blocks.min(blocks);
    }
    if !is_set("SYMCOMM_PUSH_SCRATCH") {
        t.push_scratch = t.push_scratch.min(CAPPED_PUSH_SCRATCH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: LaunchLimits = LaunchLimits {
        max_block_threads: 1024,
        max_grid_blocks: None,
    };
    const SMALL: LaunchLimits = LaunchLimits {
        max_block_threads: 64,
        max_grid_blocks: Some(2),
    };

    #[test]
    fn blocks_take_the_gallerys_threads_within_the_limit() {
        assert_eq!(threads_within(GPU), plan::THREADS);
        assert_eq!(threads_within(SMALL), 64);
    }

    #[test]
    fn grid_caps_apply_only_where_the_device_and_the_environment_say() {
        let mut t = Tuning::default();
        fit(&mut t, GPU, |_| false);
        assert_eq!(t, Tuning::default());
        let mut t = Tuning::default();
        fit(&mut t, SMALL, |_| false);
        assert_eq!((t.max_blocks, t.ll_blocks), (2, 2));
        let mut t = Tuning::default();
        fit(&mut t, SMALL, |k| k == "SYMCOMM_LL_BLOCKS");
        assert_eq!(
            (t.max_blocks, t.ll_blocks),
            (2, Tuning::default().ll_blocks)
        );
        assert_eq!(t.push_scratch, CAPPED_PUSH_SCRATCH);
    }
}
