//! [`Device`]: one rank's device, the same calls on a GPU and on the CPU emulator.
//!
//! Host code gets its streams, device buffers and synchronisation from a `Device`, and its
//! copies, fills, events and CUDA graphs from the [`Stream`]s it makes, so one program runs
//! on both backends without a branch:
//!
//! ```no_run
//! # fn rank(comm: symcomm::Communicator) -> symcomm::Result<()> {
//! use symcomm::{Device, SymmetricMemory};
//! let dev = Device::for_rank(&comm)?; // the rank's GPU, its context current on this thread
//! let stream = dev.stream()?;
//! let mem = SymmetricMemory::alloc(&comm, 1 << 20)?;
//! stream.copy_to_device(&mem, 0, &[1.0f32; 1024])?;
//! # Ok(()) }
//! ```
//!
//! On the GPU a `Device` holds the device's primary context (cudarc's `CudaContext`), made
//! current on the thread that opens it; [`Device::from_cudarc`] adopts a context the program
//! already has. Under emulation it holds only the ordinal.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::backend::{Backend, backend};
use crate::cuda::{self, Stream, VmmBuffer};
use crate::{Communicator, Error, Result};

/// One rank's device: streams, device buffers, synchronisation; the GPU's context or the
/// emulator's device.
#[derive(Debug, Clone)]
pub struct Device {
    ordinal: usize,
    /// `None` under emulation.
    ctx: Option<Arc<CudaContext>>,
}

impl Device {
    /// Device `ordinal` of this process: on the GPU its primary context is retained and made
    /// current on the calling thread (which allocations and launches need); under emulation
    /// nothing is opened.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an ordinal past the visible devices; [`Error::Cuda`] when
    /// the driver refuses.
    pub fn open(ordinal: usize) -> Result<Device> {
        let ctx = match backend()? {
            Backend::Emulated => None,
            Backend::Gpu => {
                let ctx = cuda::open_device(ordinal)?;
                // SAFETY: this handle is new, so no cudarc slice of it exists yet; symcomm makes
                // none, and the docs of `cudarc_context` tell users who make some that they are
                // not ordered across streams by events.
                unsafe { ctx.disable_event_tracking() };
                Some(ctx)
            }
        };
        Ok(Device { ordinal, ctx })
    }

    /// The device of `comm`'s rank ([`Communicator::device`]), opened as [`Device::open`] does.
    ///
    /// # Errors
    /// As [`Device::open`].
    pub fn for_rank(comm: &Communicator) -> Result<Device> {
        Device::open(comm.device())
    }

    /// Adopts a cudarc context the program already has (made current on the calling thread):
    /// symcomm's allocations, streams and launches then share it with the program's cudarc
    /// (or candle) work.
    ///
    /// # Errors
    /// [`Error::Unsupported`] under the emulated backend; [`Error::Cuda`] when the context
    /// cannot be made current.
    pub fn from_cudarc(ctx: Arc<CudaContext>) -> Result<Device> {
        if backend()? == Backend::Emulated {
            return Err(Error::Unsupported {
                what: "a cudarc context on the emulated backend".into(),
                hint: "there is no CUDA driver: use Device::open".into(),
            });
        }
        let dev = Device {
            ordinal: ctx.ordinal(),
            ctx: Some(ctx),
        };
        dev.bind_to_thread()?;
        Ok(dev)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// True on the CPU emulator.
    pub fn is_emulated(&self) -> bool {
        self.ctx.is_none()
    }

    /// The cudarc context (the device's primary context, or the one adopted); `None` under
    /// emulation.
    ///
    /// On a context that [`Device::open`] opened, cudarc's event tracking is off: making a
    /// stream then never synchronises the whole context (which, with ranks sharing a GPU,
    /// would wait for the other ranks' kernels, which may wait for this rank), and cudarc
    /// slices allocated on it are not ordered across streams automatically. An adopted context
    /// ([`Device::from_cudarc`]) keeps its own setting.
    pub fn cudarc_context(&self) -> Option<&Arc<CudaContext>> {
        self.ctx.as_ref()
    }

    /// Makes the device's context current on the calling thread, for a thread other than the
    /// one that opened it (no-op under emulation).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the driver refuses.
    pub fn bind_to_thread(&self) -> Result<()> {
        match &self.ctx {
            Some(ctx) => ctx.bind_to_thread().map_err(|e| Error::Cuda {
                call: "cuCtxSetCurrent",
                code: e.0,
            }),
            None => Ok(()),
        }
    }

    /// A new stream of this device that does not synchronise with the legacy default stream
    /// (cudarc's, [`Stream::as_cudarc`]; destroyed when the last handle to it goes).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the driver refuses.
    pub fn stream(&self) -> Result<Stream> {
        Stream::new_in(self.ctx.as_ref())
    }

    /// Allocates at least `bytes` of device memory (not symmetric: for inputs, outputs and
    /// status words that peers do not address). Freed on drop.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero bytes; [`Error::OutOfMemory`] or [`Error::Cuda`] when
    /// the device has no room.
    pub fn alloc(&self, bytes: usize) -> Result<VmmBuffer> {
        self.bind_to_thread()?;
        VmmBuffer::new(self.ordinal as i32, bytes)
    }

    /// Waits for everything queued on every stream of the device's context
    /// (`cuCtxSynchronize`; no-op under emulation). With several ranks sharing one GPU (as
    /// threads) it also waits for the other ranks' kernels, which may be waiting for this
    /// rank: prefer [`Stream::synchronize`].
    ///
    /// # Errors
    /// [`Error::Cuda`] with the error of failed work.
    pub fn synchronize(&self) -> Result<()> {
        match &self.ctx {
            Some(ctx) => ctx.synchronize().map_err(|e| Error::Cuda {
                call: "cuCtxSynchronize",
                code: e.0,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
