//! CUDA driver access: the driver probe, checked calls, device queries ([`device`]), and RAII
//! over the virtual-memory API ([`vmm`]).
//!
//! Everything here goes through cudarc's raw `sys` bindings, loaded at run time
//! (`dynamic-loading`), so building needs no CUDA toolkit and a machine without a driver gets
//! [`Error::NoDriver`] instead of a panic.
//!
//! Under the emulated backend ([`crate::backend`]) the memory types ([`vmm`], [`memory`]) hold
//! host memory instead (memfd + `mmap`), with the same API and teardown order.

pub mod device;
pub(crate) mod emu;
pub mod memory;
pub mod multicast;
pub mod stream;
pub mod vmm;

use std::sync::Arc;

use cudarc::driver::CudaContext;
use cudarc::driver::sys;

use crate::{Error, Result};

pub use stream::Stream;
pub use vmm::{Allocation, Mapping, PhysicalMem, Shareable, VaRange, VmmBuffer, find_allocation};

/// Turns a raw driver status into a [`Result`] that names the call.
pub(crate) fn check(call: &'static str, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda { call, code: status })
    }
}

/// Loads and initialises the CUDA driver; [`Error::NoDriver`] when there is none.
///
/// Call this before anything else that touches CUDA: cudarc's raw bindings abort the process
/// if the driver library is missing, this check does not.
pub fn init_driver() -> Result<()> {
    // SAFETY: probing for the library has no preconditions; it only tries to dlopen it.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDriver(
            "libcuda.so could not be loaded (no NVIDIA driver on this machine)".into(),
        ));
    }
    // SAFETY: cuInit takes flags 0 and may be called any number of times.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// The number of CUDA devices visible to this process.
pub fn device_count() -> Result<usize> {
    init_driver()?;
    let mut n = 0;
    // SAFETY: the driver is initialised and `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n.max(0) as usize)
}

/// Free and total memory (bytes) of the current context's device (`cuMemGetInfo`).
pub fn mem_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers; needs a current context.
    check("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
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
