//! `symcomm`: the host runtime.
//!
//! Layered like cudarc: raw driver calls (`cudarc::driver::sys`) → checked calls that return
//! [`Error`] naming the call → RAII types whose `Drop` undoes exactly what their constructor
//! did. See the architecture in the book ("Inside the host runtime").

#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "the symcomm host runtime supports Linux only (CUDA VMM handles are passed as POSIX fds)"
);

pub mod backend;
pub mod bootstrap;
pub mod comm;
pub mod cuda;
pub mod devcomm;
pub mod device;
pub mod error;
pub mod fault;
pub mod gin;
pub(crate) mod ipc;
pub mod launch;
pub mod launcher;
mod logging;
pub mod ranks;
pub(crate) mod space;
pub(crate) mod symmem;
mod time;
pub mod window;

/// The cudarc crate symcomm is built on (its driver API: `cudarc::driver::CudaContext`,
/// `CudaStream`), re-exported so that a program's cudarc objects are of the same version as
/// symcomm's ([`Device::from_cudarc`], [`Stream::from_cudarc`], [`cuda::CudarcView`]).
pub use cudarc;

pub use bootstrap::Bootstrap;
pub use comm::{CommOptions, Communicator, Team};
pub use cuda::{AsStream, DeviceMemory, Event, Graph, Stream};
pub use devcomm::{DevComm, Requirements};
pub use device::Device;
pub use error::{Error, Result};
pub use logging::init_logging;
pub use window::{SymmetricMemory, SymmetricUsage, Window};

/// The plain-data traits copies and kernel arguments use (`Pod`, `Zeroable`).
pub use bytemuck;
/// How kernels take a window (see [`Window::handle`]).
pub use symcomm_device::window::WindowHandle;

/// Not API: what symcomm's own test programs reach below the public surface (the fd server
/// that passes memory handles between processes, and its socket names). It may change in any
/// release.
#[doc(hidden)]
pub mod internals {
    pub use crate::ipc::{FdServer, socket_name};
}
