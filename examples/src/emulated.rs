//! Running the examples on the CPU emulator when there is no GPU.
//!
//! The host runtime picks its backend once per process ([`symcomm::backend`]): the GPU when
//! the CUDA driver loads, the emulator otherwise (or as `SYMCOMM_BACKEND=gpu|emu` says).
//! Under emulation the examples do exactly what they do on GPUs (the same allocations, window
//! registrations and device communicators, on host memory) except for the kernel launch: the
//! kernels crate's host build is a plain Rust function, which [`launch`] runs over a grid of
//! OS threads (`symcomm_device::emu`). Grids are small, since every GPU thread is an OS
//! thread.

pub use symcomm::backend::{emulated_launch as launch, emulator_notice as notice};

/// Blocks of an emulated launch of the examples.
pub const EMU_BLOCKS: u32 = 2;

/// Threads per block of an emulated launch of the examples.
pub const EMU_THREADS: u32 = 64;
