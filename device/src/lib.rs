//! `symcomm-device`: what kernels are written against.
//!
//! The Rust counterpart of NCCL's `nccl_device.h`: `no_std`, inline PTX where Rust has no
//! intrinsic. Every function compiles for `nvptx64-nvidia-cuda` (the GPU) and for the host
//! (where the CPU emulator runs kernels; outside an emulated launch the thread-geometry
//! functions report a single thread).

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(stdarch_nvptx))]
#![warn(missing_docs)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

pub mod arch;
pub mod team;

pub use symcomm_macros::kernel;

/// Everything a kernel usually needs, in one import.
pub mod prelude {
    pub use crate::arch::{Dim3, block_dim, block_idx, grid_dim, thread_idx};
    pub use crate::kernel;
}

/// On the GPU a panic traps the kernel (the launch then fails with an error on the host).
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    arch::trap()
}
