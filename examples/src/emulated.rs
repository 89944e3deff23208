//! Running the examples on the CPU emulator when there is no GPU.
//!
//! The host runtime picks its backend once per process ([`symcomm::backend`]): the GPU when
//! the CUDA driver loads, the emulator otherwise (or as `SYMCOMM_BACKEND=gpu|emu` says).
//! Under emulation the examples do exactly what they do on GPUs (the same allocations, window
//! registrations and device communicators, on host memory) except for the kernel launch: the
//! kernels crate's host build is a plain Rust function, which [`launch`] runs over a grid of
//! OS threads (`symcomm_device::emu`). Grids are small, since every GPU thread is an OS
//! thread.

use symcomm::backend::{self, Backend, Reason};
use symcomm::{Error, Result};
use symcomm_device::emu::Launch;

/// Blocks of an emulated launch of the examples.
pub const EMU_BLOCKS: u32 = 2;

/// Threads per block of an emulated launch of the examples.
pub const EMU_THREADS: u32 = 64;

/// `Some(line)` announcing the emulator when this process runs on it (for program `prog`),
/// `None` on GPUs.
pub fn notice(prog: &str) -> Result<Option<String>> {
    Ok(match backend::selection()? {
        (Backend::Gpu, _) => None,
        (Backend::Emulated, Reason::NoDriver(_)) => Some(format!(
            "{prog}: no CUDA driver; running on the CPU emulator"
        )),
        (Backend::Emulated, _) => Some(format!(
            "{prog}: {}=emu; running on the CPU emulator",
            backend::BACKEND_ENV
        )),
    })
}

/// Runs `kernel` (a call of a kernel's host build) over `blocks × threads` emulated GPU
/// threads and waits for it; a panic, trap, deadlock or watchdog expiry in the kernel is an
/// error naming the block and thread.
///
/// # Safety
/// `kernel` runs on every emulated thread at once: what it captures (usually raw pointers
/// into emulated device memory) must be valid for that, as for the GPU launch it stands for.
pub unsafe fn launch(blocks: u32, threads: u32, kernel: impl Fn()) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { Launch::new(blocks, threads).run_unsync(kernel) }
        .map_err(|e| Error::InvalidArgument(format!("emulated kernel launch: {e}")))
}
