//! [`LaunchLimits`]: the launch shapes this process's device runs well, for code that sizes
//! its own grids (the gallery does) so that one program fits both backends.
//!
//! A GPU runs blocks of up to 1024 threads and grids of any size. The CPU emulator runs every
//! GPU thread as an OS thread (`symcomm_device::emu`), so it runs small shapes well: blocks of
//! [`DEFAULT_EMU_THREADS`] threads (`SYMCOMM_EMU_THREADS`, 1–1024) and grids of
//! [`DEFAULT_EMU_BLOCKS`] blocks (`SYMCOMM_EMU_BLOCKS`). Kernels that stride over their launch
//! shape compute the same results with any of them.

use crate::backend::{Backend, backend};
use crate::{Error, Result};

/// The variable that sets the emulator's threads per block.
pub const EMU_THREADS_ENV: &str = "SYMCOMM_EMU_THREADS";
/// The variable that sets the emulator's blocks per grid.
pub const EMU_BLOCKS_ENV: &str = "SYMCOMM_EMU_BLOCKS";
/// The emulator's threads per block unless [`EMU_THREADS_ENV`] says otherwise (two warps).
pub const DEFAULT_EMU_THREADS: u32 = 64;
/// The emulator's blocks per grid unless [`EMU_BLOCKS_ENV`] says otherwise.
pub const DEFAULT_EMU_BLOCKS: u32 = 2;
/// Most threads per block of a GPU launch.
pub const GPU_MAX_BLOCK_THREADS: u32 = 1024;

/// The launch shapes to stay within on this process's device ([`limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchLimits {
    /// Most threads per block.
    pub max_block_threads: u32,
    /// Most blocks per grid worth launching (`None`: as many as the work needs).
    pub max_grid_blocks: Option<u32>,
}

/// The launch limits of this process's backend: [`GPU_MAX_BLOCK_THREADS`] and no grid limit
/// on GPUs; under emulation `SYMCOMM_EMU_THREADS` (default [`DEFAULT_EMU_THREADS`]) and
/// `SYMCOMM_EMU_BLOCKS` (default [`DEFAULT_EMU_BLOCKS`]).
///
/// # Errors
/// [`Error::Env`] when one of the variables is not a number in range.
pub fn limits() -> Result<LaunchLimits> {
    match backend()? {
        Backend::Gpu => Ok(LaunchLimits {
            max_block_threads: GPU_MAX_BLOCK_THREADS,
            max_grid_blocks: None,
        }),
        Backend::Emulated => emulated_limits(
            std::env::var(EMU_THREADS_ENV).ok().as_deref(),
            std::env::var(EMU_BLOCKS_ENV).ok().as_deref(),
        ),
    }
}

/// The emulator's limits from the two variables' values.
pub(crate) fn emulated_limits(threads: Option<&str>, blocks: Option<&str>) -> Result<LaunchLimits> {
    let parse = |var: &str, v: Option<&str>, default: u32, max: u32| match v {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(Error::Env {
                var: var.into(),
                reason: format!("{v:?} is not a number in 1..={max}"),
            }),
        },
    };
    Ok(LaunchLimits {
        max_block_threads: parse(
            EMU_THREADS_ENV,
            threads,
            DEFAULT_EMU_THREADS,
            GPU_MAX_BLOCK_THREADS,
        )?,
        max_grid_blocks: Some(parse(EMU_BLOCKS_ENV, blocks, DEFAULT_EMU_BLOCKS, 1 << 16)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_limits_default_to_two_blocks_of_two_warps_and_reject_nonsense() {
        let l = emulated_limits(None, None).unwrap();
        assert_eq!((l.max_block_threads, l.max_grid_blocks), (64, Some(2)));
        let l = emulated_limits(Some("32"), Some("8")).unwrap();
        assert_eq!((l.max_block_threads, l.max_grid_blocks), (32, Some(8)));
        for bad in ["0", "2048", "x", ""] {
            let e = emulated_limits(Some(bad), None).unwrap_err().to_string();
            assert!(e.contains("SYMCOMM_EMU_THREADS"), "{e}");
        }
        let e = emulated_limits(None, Some("0")).unwrap_err().to_string();
        assert!(e.contains("SYMCOMM_EMU_BLOCKS"), "{e}");
    }
}
