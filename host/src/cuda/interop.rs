//! cudarc interop: [`CudarcView`], a typed view of symcomm device memory (a window, a
//! symmetric allocation, a buffer) that implements cudarc's `DevicePtr`/`DevicePtrMut`, so
//! cudarc's copies and kernels, and libraries built on cudarc (candle's CUDA backend), can read
//! and write it without owning it.
//!
//! The other direction, symcomm on cudarc's objects: [`crate::Device::from_cudarc`] adopts a
//! `CudaContext`, [`Stream::from_cudarc`](super::Stream::from_cudarc) a `CudaStream`, and
//! launches and collectives take any [`AsStream`](super::AsStream), a `&CudaStream` included.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, sys};

use super::region::DeviceMemory;
use crate::{Error, Result};

/// `len` elements of `T` of symcomm device memory, seen by cudarc on `stream`. It borrows the
/// memory, which stays symcomm's.
///
/// # Ordering
/// Work that cudarc queues through the view runs on the stream cudarc is given, after what is
/// queued there before, and cudarc waits for that stream before the view's borrow ends (its
/// `SyncOnDrop`), so the memory cannot be freed under it. Order it with symcomm's work on
/// other streams by queuing both on one stream, or with events.
#[derive(Debug)]
pub struct CudarcView<'a, T> {
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
    _mem: PhantomData<&'a [T]>,
}

impl<'a, T> CudarcView<'a, T> {
    /// A view of all of `mem` as elements of `T` (its byte length rounded down to whole
    /// elements), for cudarc work on `stream`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `mem` is not aligned for `T`, or holds no whole `T`.
    pub fn new<M: DeviceMemory + ?Sized>(mem: &'a M, stream: &Arc<CudaStream>) -> Result<Self> {
        let (size, align) = (size_of::<T>(), align_of::<T>());
        if size == 0 || !mem.device_ptr().is_multiple_of(align as u64) || mem.byte_len() < size {
            return Err(Error::InvalidArgument(format!(
                "a cudarc view of {} bytes at {:#x} as elements of {size} bytes (alignment {align})",
                mem.byte_len(),
                mem.device_ptr()
            )));
        }
        Ok(CudarcView {
            ptr: mem.device_ptr(),
            len: mem.byte_len() / size,
            stream: stream.clone(),
            _mem: PhantomData,
        })
    }
}

impl<T> DeviceSlice<T> for CudarcView<'_, T> {
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for CudarcView<'_, T> {
    fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        // Synchronised when cudarc drops it, after queuing the work: the memory is borrowed,
        // not owned, and must not be freed while that work runs.
        (self.ptr, SyncOnDrop::sync_stream(stream))
    }
}

impl<T> DevicePtrMut<T> for CudarcView<'_, T> {
    fn device_ptr_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        // As for `device_ptr`.
        (self.ptr, SyncOnDrop::sync_stream(stream))
    }
}
