//! CUDA driver access, in cudarc's layers: raw `sys` bindings (loaded at run time,
//! `dynamic-loading`, so building needs no CUDA toolkit and a machine without a driver gets
//! [`Error::NoDriver`] instead of a panic) → checked calls (the private `driver` module: one
//! thin function per driver call, returning a [`Result`] that names it) → RAII types whose
//! `Drop` undoes exactly their own call ([`vmm`], [`memory`], [`stream`], [`multicast`]).
//!
//! The emulated backend ([`crate::backend`]) has a layer of the same shape: the private `memfd`
//! module does the memory calls with memfd + `mmap`. Each RAII type holds one backend's
//! resource, chosen when it is made; the public types with two backends dispatch and have no
//! `Drop` of their own (multicast objects exist on GPUs only). Device queries are [`device`].

pub mod device;
pub(crate) mod driver;
pub mod interop;
pub(crate) mod memfd;
pub mod memory;
pub mod multicast;
pub mod region;
pub mod stream;
pub mod vmm;

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::{Error, Result};

pub use driver::init_driver;
pub use interop::CudarcView;
pub use region::DeviceMemory;
pub use stream::{AsStream, Event, Graph, Stream};
pub use vmm::{Allocation, Mapping, PhysicalMem, Shareable, VaRange, VmmBuffer, find_allocation};

/// The number of CUDA devices visible to this process.
pub fn device_count() -> Result<usize> {
    init_driver()?;
    Ok(driver::device_get_count()?.max(0) as usize)
}

/// Free and total memory (bytes) of the current context's device (`cuMemGetInfo`).
pub fn mem_info() -> Result<(usize, usize)> {
    driver::mem_get_info()
}

/// Opens the primary context of device `ordinal` and makes it current on this thread.
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(Error::InvalidArgument(format!(
            "device {ordinal} does not exist ({count} visible)"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| Error::Cuda {
        call: "cuDevicePrimaryCtxRetain",
        code: e.0,
    })?;
    ctx.bind_to_thread().map_err(|e| Error::Cuda {
        call: "cuCtxSetCurrent",
        code: e.0,
    })?;
    Ok(ctx)
}
