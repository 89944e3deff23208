//! Kernels that exercise the device API, one small kernel per primitive, in one module per
//! device-crate module (`arch`, `cluster`, `coop`, `mem`, `util`, `team`, `window`, `reduce`,
//! `ll`, `barrier`, `multimem`; `symmem` holds the multi-GPU kernels). Every item is
//! re-exported at the crate root, where the host and the tests name it. Their PTX is checked
//! for the intended instructions (`tests/tests/device_ptx.rs`, per kernel) and the
//! non-multimem ones run on one GPU in `gpu_device` (`tests/src/bin/gpu_device/`), which
//! documents the expected results next to each launch.
//!
//! Conventions: every spin-wait is timed (no launch can hang); wait results are reported as
//! [`WaitError::result_code`](symcomm_device::wait::WaitError::result_code) (0 ok, 1 timeout,
//! 2 aborted). Kernels that are only **loaded**, never launched, are marked "load-only": they
//! use multimem.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

mod symmem;
pub use symmem::*;

mod geometry;
pub use geometry::*;
mod buffers;
pub use buffers::*;
mod arch;
pub use arch::*;
mod cluster;
pub use cluster::*;
mod coop;
pub use coop::*;
mod mem;
pub use mem::*;
mod util;
pub use util::*;
mod team;
pub use team::*;
mod window;
pub use window::*;
mod reduce;
pub use reduce::*;
mod ll;
pub use ll::*;
mod barrier;
pub use barrier::*;
mod gin;
pub use gin::*;
mod multimem;
pub use multimem::*;
